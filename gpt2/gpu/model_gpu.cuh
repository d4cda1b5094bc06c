// gpt2/gpu/model_gpu.cuh: the model in GPU memory, in both precisions: its parameters copied
// there (with their gradients and the AdamW moments, in float32), the activations and activation
// gradients of training laid out (float32 as gpt2/model.h lays them out; the bf16 path's own
// way), the bytes all of it takes and the largest batch that fits, and the way back to the host.
// Files are read and written on the host (gpt2/checkpoint.h); train_gpu.cu runs the passes.

#ifndef GPT2_GPU_MODEL_GPU_CUH
#define GPT2_GPU_MODEL_GPU_CUH

#include "../model.h"
#include "cuda_utils.cuh"
#include "elementwise.cuh"  // float_to_bf16_gpu

// ---------- float32 ----------

// The activation table of gpt2/model.h without probs: the fused classifier never stores them.
static void activation_sizes_gpu(size_t* sizes, GPT2Config config, int B, int T) {
    size_t layer[NUM_ACTIVATION_TENSORS];
    activation_sizes(sizes, layer, config, B, T);
    sizes[PROBS] = 0;
}

// The parameters, their gradients and the AdamW moments of a host model on the GPU, in float32,
// with room for inputs and targets of capacity_B x capacity_T: what both precisions keep. The
// gradients start at zero, and so do the moments of a fresh run (a resumed one brings its own).
static void gpt2_build_parameters_gpu(GPT2* model, const GPT2* host, int capacity_B, int capacity_T) {
    memset(model, 0, sizeof(*model));
    model->config = host->config;
    memcpy(model->param_sizes, host->param_sizes, sizeof(model->param_sizes));
    model->num_parameters = host->num_parameters;
    model->capacity_B = capacity_B;
    model->capacity_T = capacity_T;
    size_t n = model->num_parameters, BT = (size_t)capacity_B * capacity_T;
    cuda_check(cudaMalloc((void**)&model->params_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->m_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->v_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->inputs, BT * sizeof(int)));
    cuda_check(cudaMalloc((void**)&model->targets, BT * sizeof(int)));
    cuda_check(cudaMemcpy(model->params_memory, host->params_memory, n * sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(model->grads_memory, 0, n * sizeof(float)));
    if (host->m_memory != NULL) {
        cuda_check(cudaMemcpy(model->m_memory, host->m_memory, n * sizeof(float), cudaMemcpyHostToDevice));
        cuda_check(cudaMemcpy(model->v_memory, host->v_memory, n * sizeof(float), cudaMemcpyHostToDevice));
    } else {
        cuda_check(cudaMemset(model->m_memory, 0, n * sizeof(float)));
        cuda_check(cudaMemset(model->v_memory, 0, n * sizeof(float)));
    }
    point_tensors((float**)&model->params, model->params_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    point_tensors((float**)&model->grads, model->grads_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    model->cpu_losses = (float*)malloc_check(BT * sizeof(float));
    model->mean_loss = -1.0f;
    model->device_bytes = 4 * n * sizeof(float) + 2 * BT * sizeof(int);
}

// The bytes the float32 path needs on the GPU for a batch of B x T.
static size_t gpt2_fp32_bytes(GPT2Config c, size_t num_parameters, int B, int T) {
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_gpu(act_sizes, c, B, T);
    return (4 * num_parameters + 2 * sum_sizes(act_sizes, NUM_ACTIVATION_TENSORS)) * sizeof(float) +
           2 * (size_t)B * T * sizeof(int);
}

// A GPT2 whose tensors are all in device memory, for batches of up to capacity_B x capacity_T,
// with the parameters (and, when resuming, the AdamW moments) of a host model.
void gpt2_build_gpu(GPT2* model, const GPT2* host, int capacity_B, int capacity_T) {
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_gpu(act_sizes, host->config, capacity_B, capacity_T);
    size_t na = sum_sizes(act_sizes, NUM_ACTIVATION_TENSORS);
    require_free_memory(gpt2_fp32_bytes(host->config, host->num_parameters, capacity_B, capacity_T), capacity_B,
                        capacity_T);
    gpt2_build_parameters_gpu(model, host, capacity_B, capacity_T);
    memcpy(model->act_sizes, act_sizes, sizeof(act_sizes));
    model->num_activations = na;
    cuda_check(cudaMalloc((void**)&model->acts_memory, na * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_acts_memory, na * sizeof(float)));
    model->device_bytes += 2 * na * sizeof(float);
}

void gpt2_free_gpu(GPT2* model) {
    cuda_check(cudaFree(model->params_memory));
    cuda_check(cudaFree(model->grads_memory));
    cuda_check(cudaFree(model->m_memory));
    cuda_check(cudaFree(model->v_memory));
    cuda_check(cudaFree(model->acts_memory));
    cuda_check(cudaFree(model->grads_acts_memory));
    cuda_check(cudaFree(model->inputs));
    cuda_check(cudaFree(model->targets));
    free(model->cpu_losses);
    memset(model, 0, sizeof(*model));
}

// The parameters and AdamW moments into the run's host model, to be saved.
static void gpt2_to_host_gpu(const GPT2* model, GPT2* host) {
    size_t bytes = model->num_parameters * sizeof(float);
    if (host->m_memory == NULL) {
        host->m_memory = (float*)malloc_check(bytes);
        host->v_memory = (float*)malloc_check(bytes);
    }
    cuda_check(cudaMemcpy(host->params_memory, model->params_memory, bytes, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(host->m_memory, model->m_memory, bytes, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(host->v_memory, model->v_memory, bytes, cudaMemcpyDeviceToHost));
}

// ---------- bf16 ----------

// The model of the bf16 path: the float32 GPT2 (master parameters, gradients, AdamW moments, on
// the GPU) as its first member, so that the Trainer's GPT2* points to it, and beside it the bf16
// copy of the parameters, the activations, and the backward pass's buffers. The backward pass
// goes one block at a time, so one block's worth of activation gradients is enough: dresidual,
// the gradient of the residual stream, carried from block to block, and three scratch buffers.
typedef struct {
    GPT2 base;
    bf16* params16;          // (num_parameters) the parameters, rounded to bf16 after every update
    char* acts_memory;       // the activations, for up to capacity_B x capacity_T
    bf16* dresidual;         // (B, T, C)
    bf16* dbuf;              // (B, T, C)
    bf16* dbuf4;             // (B, T, 4*C)
    bf16* dqkv;              // (B, T, 3*C)
    bf16* grads_acts_memory; // the four above, one allocation
} GPT2BF16;

// The bf16 view of parameters p (the whole model's, or a layer's slice, in the float32 master
// copy): the weight matrices in their bf16 copy params16, at the same offsets, the rest float32.
static ParameterTensorsOf<bf16> weights_bf16(const GPT2BF16* m, ParameterTensors p) {
    auto copy16 = [m](const float* x) { return m->params16 + (x - m->base.params_memory); };
    ParameterTensorsOf<bf16> w = {copy16(p.wte), p.wpe, p.ln1w, p.ln1b, copy16(p.qkvw), p.qkvb, copy16(p.attprojw),
                                  p.attprojb, p.ln2w, p.ln2b, copy16(p.fcw), p.fcb, copy16(p.fcprojw), p.fcprojb,
                                  p.lnfw, p.lnfb};
    return w;
}

// The activations of a batch of B x T laid out from `memory` (NULL: only counted), each tensor
// on a 256-byte boundary (aligned for cp.async), the per-layer ones at layer l's slice; returns
// the bytes they take. Those this path does without stay NULL: preatt and att (flash attention
// keeps att_lse), attproj and fcproj (the products add the residual), probs (a fused classifier).
static size_t layout_activations_bf16(ActivationTensorsOf<bf16>* a, char* memory, GPT2Config c, int B, int T,
                                      int l) {
    size_t sizes[NUM_ACTIVATION_TENSORS], layer[NUM_ACTIVATION_TENSORS], offset = 0;
    activation_sizes(sizes, layer, c, B, T);
    layer[ATT_LSE] = (size_t)B * T * c.num_heads;
    sizes[ATT_LSE] = c.num_layers * layer[ATT_LSE];
    memset(a, 0, sizeof(*a));
#define PLACE(field, index)                                                                            \
    do {                                                                                               \
        if (memory != NULL) a->field = (decltype(a->field))(memory + offset) + (size_t)l * layer[index]; \
        offset += (sizes[index] * sizeof(*a->field) + 255) / 256 * 256;                                 \
    } while (0)
    PLACE(encoded, ENCODED); PLACE(ln1, LN1); PLACE(ln1_mean, LN1_MEAN); PLACE(ln1_rstd, LN1_RSTD);
    PLACE(qkv, QKV); PLACE(atty, ATTY); PLACE(att_lse, ATT_LSE); PLACE(residual2, RESIDUAL2);
    PLACE(ln2, LN2); PLACE(ln2_mean, LN2_MEAN); PLACE(ln2_rstd, LN2_RSTD); PLACE(fch, FCH);
    PLACE(fch_gelu, FCH_GELU); PLACE(residual3, RESIDUAL3); PLACE(lnf, LNF); PLACE(lnf_mean, LNF_MEAN);
    PLACE(lnf_rstd, LNF_RSTD); PLACE(logits, LOGITS); PLACE(losses, LOSSES);
#undef PLACE
    return offset;
}

static ActivationTensorsOf<bf16> activations_bf16(const GPT2BF16* m, int l) {
    ActivationTensorsOf<bf16> a;
    layout_activations_bf16(&a, m->acts_memory, m->base.config, m->base.last_B, m->base.last_T, l);
    return a;
}

// The gradients of one block's activations, in the four buffers. The residual stream's gradient is
// one buffer, dresidual, carried down from block to block: each block's da.residual3 and
// da.residual2, its products' (attproj and fcproj, whose residual adds are fused), and its
// input's. The other gradients live only inside a block and share the scratch buffers.
static ActivationTensorsOf<bf16> activation_grads_bf16(const GPT2BF16* m) {
    ActivationTensorsOf<bf16> da;
    memset(&da, 0, sizeof(da));
    da.encoded = da.residual2 = da.residual3 = da.attproj = da.fcproj = m->dresidual;
    da.ln1 = da.atty = da.ln2 = da.lnf = m->dbuf;
    da.fch = m->dbuf4;
    da.qkv = m->dqkv;
    return da;
}

// The bytes the bf16 path needs on the GPU for a batch of B x T.
static size_t gpt2_bf16_bytes(GPT2Config c, size_t num_parameters, int B, int T) {
    ActivationTensorsOf<bf16> a;
    size_t BT = (size_t)B * T, C = c.channels;
    return 4 * num_parameters * sizeof(float) + num_parameters * sizeof(bf16) + 2 * BT * sizeof(int) +
           layout_activations_bf16(&a, NULL, c, B, T, 0) + BT * 9 * C * sizeof(bf16);
}

void gpt2_build_bf16(GPT2BF16* m, const GPT2* host, int capacity_B, int capacity_T) {
    GPT2Config c = host->config;
    size_t need = gpt2_bf16_bytes(c, host->num_parameters, capacity_B, capacity_T);
    require_free_memory(need, capacity_B, capacity_T);
    GPT2* base = &m->base;
    gpt2_build_parameters_gpu(base, host, capacity_B, capacity_T);
    size_t n = base->num_parameters, BT = (size_t)capacity_B * capacity_T, C = c.channels;
    cuda_check(cudaMalloc((void**)&m->params16, n * sizeof(bf16)));
    float_to_bf16_gpu(m->params16, base->params_memory, n);
    ActivationTensorsOf<bf16> a;
    cuda_check(cudaMalloc((void**)&m->acts_memory, layout_activations_bf16(&a, NULL, c, capacity_B, capacity_T, 0)));
    cuda_check(cudaMalloc((void**)&m->grads_acts_memory, BT * 9 * C * sizeof(bf16)));
    m->dresidual = m->grads_acts_memory;
    m->dbuf = m->dresidual + BT * C;
    m->dbuf4 = m->dbuf + BT * C;
    m->dqkv = m->dbuf4 + BT * 4 * C;
    base->device_bytes = need;
}

void gpt2_free_bf16(GPT2BF16* m) {
    cuda_check(cudaFree(m->params16));
    cuda_check(cudaFree(m->acts_memory));
    cuda_check(cudaFree(m->grads_acts_memory));
    gpt2_free_gpu(&m->base);
}

// ---------- both ----------

// The largest B whose batches of B x T fit in `available` bytes (0: not even B = 1), for either
// path's byte count, which grows linearly with B.
static int largest_batch(size_t (*bytes)(GPT2Config, size_t, int, int), GPT2Config c, size_t num_parameters,
                         int T, size_t available) {
    size_t one = bytes(c, num_parameters, 1, T), per_b = bytes(c, num_parameters, 2, T) - one;
    if (one > available) return 0;
    return 1 + (int)((available - one) / per_b);
}

#endif // GPT2_GPU_MODEL_GPU_CUH
