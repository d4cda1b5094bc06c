// gpt2/gpu/layers.cuh: the GPU's layers as the transformer block of gpt2/model.h calls them: a
// table for the float32 path, whose layers are the CPU's twins, and one for the bf16 path, which
// fuses the bias, GELU and the residual add into its tensor-core products and runs flash
// attention; and each of them for generation, with attention against the paged key-value cache.

#ifndef GPT2_GPU_LAYERS_CUH
#define GPT2_GPU_LAYERS_CUH

#include "../model.h"
#include "cuda_utils.cuh"
#include "encoder.cuh"
#include "layernorm.cuh"
#include "matmul_fp32.cuh"
#include "matmul_bf16.cuh"
#include "attention.cuh"
#include "flash_attention_mma.cuh"
#include "attention_paged.cuh"
#include "elementwise.cuh"

// The GPU's layers, for the forward and backward pass of gpt2/model.h: the plain ones, no fusion.
static const Layers LAYERS_GPU = {
    .encoder_fwd = encoder_forward_gpu<float>, .encoder_bwd = encoder_backward_gpu<float>,
    .layernorm_fwd = layernorm_forward_gpu<float>, .layernorm_bwd = layernorm_backward_gpu<float>,
    .matmul_fwd = matmul_forward_gpu, .matmul_bwd = matmul_backward_gpu,
    .attention_fwd = attention_forward_gpu, .attention_bwd = attention_backward_gpu,
    .gelu_fwd = gelu_forward_gpu, .gelu_bwd = gelu_backward_gpu,
    .residual_fwd = residual_forward_gpu, .residual_bwd = residual_backward_gpu,
};

// The bf16 path's layers: the block runs its fused entries in place of the plain products, GELU
// and residual adds (those stay NULL), and flash attention.
static const LayersOf<bf16> LAYERS_BF16 = {
    .encoder_fwd = encoder_forward_gpu<bf16>, .encoder_bwd = encoder_backward_gpu<bf16>,
    .layernorm_fwd = layernorm_forward_gpu<bf16>, .layernorm_bwd = layernorm_backward_gpu<bf16>,
    .matmul_fwd = matmul_forward_bf16, .matmul_bwd = matmul_backward_bf16,
    .matmul_residual_fwd = matmul_residual_forward_bf16, .matmul_gelu_fwd = matmul_gelu_forward_bf16,
    .gelu_matmul_bwd = gelu_matmul_backward_bf16,
    .flash_attention_fwd = flash_attention_forward_bf16, .flash_attention_bwd = flash_attention_backward_bf16,
};

// The tables of generation: the same layers, with attention against the paged key-value cache,
// which the block calls when it is given a cache (gpt2/model.h: block_forward).
template <typename floatX>
static LayersOf<floatX> with_cached_attention(LayersOf<floatX> layers) {
    layers.attention_cached_fwd = attention_paged_forward_gpu<floatX>;
    return layers;
}
static const Layers LAYERS_GPU_INFER = with_cached_attention(LAYERS_GPU);
static const LayersOf<bf16> LAYERS_BF16_INFER = with_cached_attention(LAYERS_BF16);

// ---------- the weights the layers read ----------

// The weights a bf16 pass reads: the float32 tensors of p (embeddings, layernorms, biases) and the
// matrices (wte and the blocks') from `copy`, a bf16 copy laid out by `sizes` as a whole parameter
// array is. (A float32 pass reads p itself.)
static ParameterTensorsOf<bf16> weights_over_copy(ParameterTensors p, const bf16* copy, const size_t* sizes) {
    bf16* at[NUM_PARAMETER_TENSORS];
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        at[k] = (bf16*)copy;
        copy += sizes[k];
    }
    ParameterTensorsOf<bf16> w = {at[WTE], p.wpe, p.ln1w, p.ln1b, at[QKVW], p.qkvb, at[ATTPROJW], p.attprojb,
                                  p.ln2w, p.ln2b, at[FCW], p.fcb, at[FCPROJW], p.fcprojb, p.lnfw, p.lnfb};
    return w;
}

#endif // GPT2_GPU_LAYERS_CUH
