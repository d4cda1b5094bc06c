// gpt2/gpu/layers.cuh: every layer's launchers, as the passes of train_gpu.cu and
// gpt2/gpu/generate.cuh call them, and the weights a bf16 pass reads.

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

// ---------- the float32 twins of the bf16 fused products ----------
// matmul_bf16.cuh's names, so a pass reads alike in both precisions: here two plain kernels.

// out = residual + inp weight^T + bias
static void matmul_residual_forward_gpu(float* out, const float* inp, const float* weight, const float* bias,
                                        const float* residual, int B, int T, int C, int OC) {
    matmul_forward_gpu(out, inp, weight, bias, B, T, C, OC);
    residual_forward_gpu(out, residual, out, (int)((size_t)B * T * OC));
}

// out = gelu(pre), pre = inp weight^T + bias
static void matmul_gelu_forward_gpu(float* out, float* pre, const float* inp, const float* weight, const float* bias,
                                    int B, int T, int C, int OC) {
    matmul_forward_gpu(pre, inp, weight, bias, B, T, C, OC);
    gelu_forward_gpu(out, pre, (int)((size_t)B * T * OC));
}

// ---------- the weights the layers read ----------

// The weights a bf16 pass reads: p's float32 tensors, and the matrices (wte and the blocks') from
// `copy`, a bf16 copy laid out by `sizes`.
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
