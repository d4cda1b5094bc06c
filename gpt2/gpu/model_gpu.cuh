// gpt2/gpu/model_gpu.cuh: the model in GPU memory, in both precisions: the parameters, their
// gradients and AdamW's moments in float32, the activations and their gradients laid out, the
// bytes it all takes and the largest batch that fits, and the way back to the host. It is built
// from a host model: the run's, or this process's part of it (gpt2/train_parallel.h: run_part).

#ifndef GPT2_GPU_MODEL_GPU_CUH
#define GPT2_GPU_MODEL_GPU_CUH

#include "../model.h"
#include "cuda_utils.cuh"
#include "layers.cuh"  // weights_over_copy

// ---------- what a host model says of its part ----------

// The shape of the part of the model a GPU trains: the whole model alone is shard_whole, its
// parameters unpadded, all of them updated here, one slot.
typedef struct {
    GPT2Config config;
    Shard shard;
    size_t num_parameters, num_padded, opt_offset, opt_count;
    int num_slots;
} GPUPart;

static GPUPart gpu_part_whole(GPT2Config c, size_t num_parameters) {
    GPUPart p = {c, shard_whole(c), num_parameters, num_parameters, 0, num_parameters, 1};
    return p;
}

// Whether the part is one of ZeRO-1's: this GPU updates only the parameters [opt_offset,
// opt_offset + opt_count), one of several data-parallel replicas' parts.
static int gpu_part_zero(GPUPart p) { return p.opt_count < p.num_padded; }

// A host model's part; a model that never set these fields (0) is whole.
static GPUPart gpu_part_of(const GPT2* host) {
    GPUPart p = {host->config, host->shard, host->num_parameters, host->num_padded, host->opt_offset,
                 host->opt_count, host->num_slots};
    if (p.shard.tp == 0) p.shard = shard_whole(host->config);
    if (p.num_padded < p.num_parameters) p.num_padded = p.num_parameters;
    if (p.opt_count == 0) p.opt_count = p.num_parameters;
    if (p.num_slots < 1) p.num_slots = 1;
    return p;
}

// ---------- float32 ----------

// gpt2/model.h's activation table without probs (the fused classifier stores none); the
// gradients (grad_sizes, if not NULL) without logits, whose gradient overwrites the logits.
static void activation_sizes_gpu(size_t* sizes, size_t* grad_sizes, GPT2Config config, Shard shard, int B, int T) {
    size_t layer[NUM_ACTIVATION_TENSORS];
    shard_activation_sizes(sizes, layer, config, shard, B, T);
    sizes[PROBS] = 0;
    if (grad_sizes == NULL) return;
    memcpy(grad_sizes, sizes, NUM_ACTIVATION_TENSORS * sizeof(size_t));
    grad_sizes[LOGITS] = 0;
}

// What both precisions keep on the GPU, in float32: a host model's parameters (if `params`: bf16
// under ZeRO-1 keeps its own), gradients (num_padded floats, zero) and AdamW moments (opt_count,
// zero or a resumed run's), and the inputs and targets of num_slots batches.
static void gpt2_build_parameters_gpu(GPT2* model, const GPT2* host, int capacity_B, int capacity_T, int params) {
    GPUPart part = gpu_part_of(host);
    memset(model, 0, sizeof(*model));
    model->config = host->config;
    memcpy(model->param_sizes, host->param_sizes, sizeof(model->param_sizes));
    model->num_parameters = host->num_parameters;
    model->shard = part.shard;
    model->num_padded = part.num_padded;
    model->opt_offset = part.opt_offset;
    model->opt_count = part.opt_count;
    model->num_slots = part.num_slots;
    model->capacity_B = capacity_B;
    model->capacity_T = capacity_T;
    size_t n = model->num_parameters, np = model->num_padded, no = model->opt_count;
    size_t BT = (size_t)capacity_B * capacity_T, slots = model->num_slots;
    if (params) cuda_check(cudaMalloc((void**)&model->params_memory, np * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_memory, np * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->m_memory, no * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->v_memory, no * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->inputs, slots * BT * sizeof(int)));
    cuda_check(cudaMalloc((void**)&model->targets, slots * BT * sizeof(int)));
    if (params) {
        cuda_check(cudaMemset(model->params_memory, 0, np * sizeof(float)));
        cuda_check(cudaMemcpy(model->params_memory, host->params_memory, n * sizeof(float), cudaMemcpyHostToDevice));
        point_tensors((float**)&model->params, model->params_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    }
    cuda_check(cudaMemset(model->grads_memory, 0, np * sizeof(float)));
    if (host->m_memory != NULL) {
        cuda_check(cudaMemcpy(model->m_memory, host->m_memory, no * sizeof(float), cudaMemcpyHostToDevice));
        cuda_check(cudaMemcpy(model->v_memory, host->v_memory, no * sizeof(float), cudaMemcpyHostToDevice));
    } else {
        cuda_check(cudaMemset(model->m_memory, 0, no * sizeof(float)));
        cuda_check(cudaMemset(model->v_memory, 0, no * sizeof(float)));
    }
    point_tensors((float**)&model->grads, model->grads_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    model->mean_loss = -1.0f;
    model->device_bytes = ((params ? np : 0) + np + 2 * no) * sizeof(float) + 2 * slots * BT * sizeof(int);
}

// The bytes the float32 path needs for a part and batches of B x T: parameters, gradients,
// moments, every slot's activations and one's gradients, inputs, targets, pipe_grad.
static size_t gpt2_fp32_part_bytes(GPUPart p, int B, int T) {
    size_t sizes[NUM_ACTIVATION_TENSORS], grad_sizes[NUM_ACTIVATION_TENSORS], BT = (size_t)B * T;
    activation_sizes_gpu(sizes, grad_sizes, p.config, p.shard, B, T);
    size_t acts = p.num_slots * sum_sizes(sizes, NUM_ACTIVATION_TENSORS) + sum_sizes(grad_sizes, NUM_ACTIVATION_TENSORS);
    size_t pipe = p.shard.head ? 0 : BT * p.config.channels;
    return (2 * p.num_padded + 2 * p.opt_count + acts + pipe) * sizeof(float) + 2 * p.num_slots * BT * sizeof(int);
}

// The same for the whole model alone.
static size_t gpt2_fp32_bytes(GPT2Config c, size_t num_parameters, int B, int T) {
    return gpt2_fp32_part_bytes(gpu_part_whole(c, num_parameters), B, T);
}

// A GPT2 whose tensors are all in device memory, for batches of up to capacity_B x capacity_T,
// with the parameters (and, when resuming, the AdamW moments) of a host model, whole or a part.
void gpt2_build_gpu(GPT2* model, const GPT2* host, int capacity_B, int capacity_T) {
    GPUPart part = gpu_part_of(host);
    size_t sizes[NUM_ACTIVATION_TENSORS], grad_sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_gpu(sizes, grad_sizes, host->config, part.shard, capacity_B, capacity_T);
    size_t na = sum_sizes(sizes, NUM_ACTIVATION_TENSORS), ng = sum_sizes(grad_sizes, NUM_ACTIVATION_TENSORS);
    require_free_memory(gpt2_fp32_part_bytes(part, capacity_B, capacity_T), capacity_B, capacity_T);
    gpt2_build_parameters_gpu(model, host, capacity_B, capacity_T, 1);
    memcpy(model->act_sizes, sizes, sizeof(sizes));
    model->num_activations = na;
    size_t slots = model->num_slots, BT = (size_t)capacity_B * capacity_T;
    cuda_check(cudaMalloc((void**)&model->acts_memory, slots * na * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_acts_memory, ng * sizeof(float)));
    size_t pipe = model->shard.head ? 0 : BT * model->config.channels;
    if (pipe > 0) cuda_check(cudaMalloc((void**)&model->pipe_grad, pipe * sizeof(float)));
    model->activation_bytes = (slots * na + ng + pipe) * sizeof(float);
    model->device_bytes += model->activation_bytes;
}

// The current slot's activations and their gradients, laid out for B x T inside the allocation;
// the logits' gradient is the logits' own memory.
static void gpt2_layout_slot_gpu(GPT2* model, int B, int T) {
    size_t sizes[NUM_ACTIVATION_TENSORS], grad_sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_gpu(sizes, grad_sizes, model->config, model->shard, B, T);
    point_tensors((float**)&model->acts, model->acts_memory + (size_t)model->slot * model->num_activations, sizes,
                  NUM_ACTIVATION_TENSORS);
    point_tensors((float**)&model->grads_acts, model->grads_acts_memory, grad_sizes, NUM_ACTIVATION_TENSORS);
    model->grads_acts.logits = model->acts.logits;
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
    cuda_check(cudaFree(model->pipe_grad));
    cuda_check(cudaFree(model->step_gpu));
    memset(model, 0, sizeof(*model));
}

// The parameters and AdamW moments into a host model of the same part (to be saved, or
// gathered); without float32 parameters (bf16 under ZeRO-1), the moments only.
static void gpt2_to_host_gpu(const GPT2* model, GPT2* host) {
    size_t moments = model->opt_count * sizeof(float);
    if (host->m_memory == NULL) {
        host->m_memory = (float*)malloc_check(moments);
        host->v_memory = (float*)malloc_check(moments);
    }
    if (model->params_memory != NULL) {
        cuda_check(cudaMemcpy(host->params_memory, model->params_memory, model->num_parameters * sizeof(float),
                              cudaMemcpyDeviceToHost));
    }
    cuda_check(cudaMemcpy(host->m_memory, model->m_memory, moments, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(host->v_memory, model->v_memory, moments, cudaMemcpyDeviceToHost));
}

// ---------- bf16 ----------

// The bf16 path's model: the float32 GPT2 (master parameters, gradients, moments), and beside it
// the bf16 copy, the activations, and one block's activation gradients: dresidual, the residual
// stream's gradient carried from block to block (and between pipeline stages), and three scratch
// buffers of widths C, 4H and 3H (H = C/tp). The passes read the blocks' matrices in bf16 and the
// rest in float32 from params32: the master copy itself, or under ZeRO-1, where this GPU keeps
// the master of its part only (`master`), those tensors alone, gathered after every step.
typedef struct {
    GPT2 base;
    bf16* params16;          // (num_padded) the parameters, rounded to bf16 after every update
    float* params32;         // the tensors the passes read in float32, laid out by sizes32
    size_t sizes32[NUM_PARAMETER_TENSORS];  // param_sizes, with 0 for those not in params32
    float* master;           // (opt_count) under ZeRO-1, the float32 master copy of this GPU's part
    char* acts16_memory;     // the activations of num_slots batches of up to capacity_B x capacity_T
    size_t slot_bytes;       // each slot's
    bf16* dresidual;         // (B, T, C)
    bf16* dbuf;              // (B, T, C)
    bf16* dbuf4;             // (B, T, 4*H)
    bf16* dqkv;              // (B, T, 3*H)
    bf16* dacts16_memory;    // the four above, one allocation
} GPT2BF16;

// Whether the bf16 passes read tensor k in float32: all but the blocks' four matrices (wte is
// read both ways: in float32 by the embedding, in bf16 by the output layer).
static int read_in_float32(int k) { return k != QKVW && k != ATTPROJW && k != FCW && k != FCPROJW; }

// params32's layout for a part: every tensor (the master copy itself), or under ZeRO-1 only
// those the passes read in float32; returns the floats it holds.
static size_t float32_sizes_bf16(size_t* sizes32, GPUPart p) {
    size_t layer[NUM_PARAMETER_TENSORS];
    shard_parameter_sizes(sizes32, layer, p.config, p.shard);
    if (gpu_part_zero(p)) {
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) sizes32[k] = read_in_float32(k) ? sizes32[k] : 0;
    }
    return sum_sizes(sizes32, NUM_PARAMETER_TENSORS);
}

// The weights the bf16 passes read, the whole shard's (shard_parameters_of_layer gives a
// layer's): the matrices from the bf16 copy, the rest float32.
static ParameterTensorsOf<bf16> weights_bf16(const GPT2BF16* m) {
    return weights_over_copy(m->base.params, m->params16, m->base.param_sizes);
}

// A shard's activations for B x T laid out from `memory` (NULL: only counted), each on a 256-byte
// boundary (for cp.async), the per-layer ones at layer l's slice; returns their bytes. Without
// preatt, att, attproj, fcproj and probs, which flash attention and the fusions do without.
static size_t layout_activations_bf16(ActivationTensorsOf<bf16>* a, char* memory, GPT2Config c, Shard s, int B,
                                      int T, int l) {
    size_t sizes[NUM_ACTIVATION_TENSORS], layer[NUM_ACTIVATION_TENSORS], offset = 0;
    shard_activation_sizes(sizes, layer, c, s, B, T);
    layer[ATT_LSE] = (size_t)B * T * (c.num_heads / s.tp);
    sizes[ATT_LSE] = s.num_layers * layer[ATT_LSE];
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

// Layer l's activations of slot `slot`, laid out for the last forward pass's B x T.
static ActivationTensorsOf<bf16> activations_bf16_of(const GPT2BF16* m, int slot, int l) {
    ActivationTensorsOf<bf16> a;
    layout_activations_bf16(&a, m->acts16_memory + (size_t)slot * m->slot_bytes, m->base.config, m->base.shard,
                            m->base.last_B, m->base.last_T, l);
    return a;
}

// Those of the current slot.
static ActivationTensorsOf<bf16> activations_bf16(const GPT2BF16* m, int l) {
    return activations_bf16_of(m, m->base.slot, l);
}

// One block's activation gradients in the four buffers: the residual stream's (residual2,
// residual3, attproj, fcproj, encoded) all dresidual; the others share the scratch buffers.
static ActivationTensorsOf<bf16> activation_grads_bf16(const GPT2BF16* m) {
    ActivationTensorsOf<bf16> da;
    memset(&da, 0, sizeof(da));
    da.encoded = da.residual2 = da.residual3 = da.attproj = da.fcproj = m->dresidual;
    da.ln1 = da.atty = da.ln2 = da.lnf = m->dbuf;
    da.fch = m->dbuf4;
    da.qkv = m->dqkv;
    return da;
}

// The elements of the four buffers of activation_grads_bf16, for B x T.
static size_t grads_elements_bf16(GPT2Config c, Shard s, size_t BT) {
    size_t C = c.channels, H = C / s.tp;
    return BT * (2 * C + 7 * H);
}

// The bytes of the bf16 path's parameters on the GPU, the bf16 copy and params32 (the master copy
// itself, but under ZeRO-1), and of AdamW's state, the moments and under ZeRO-1 the master part.
static size_t parameter_bytes_bf16(GPUPart p) {
    size_t sizes32[NUM_PARAMETER_TENSORS], n32 = float32_sizes_bf16(sizes32, p);
    return p.num_padded * sizeof(bf16) + n32 * sizeof(float);
}
static size_t optimizer_bytes_bf16(GPUPart p) { return (2 + gpu_part_zero(p)) * p.opt_count * sizeof(float); }

// The bytes the bf16 path needs on the GPU for a part and batches of B x T.
static size_t gpt2_bf16_part_bytes(GPUPart p, int B, int T) {
    ActivationTensorsOf<bf16> a;
    size_t BT = (size_t)B * T;
    return parameter_bytes_bf16(p) + p.num_padded * sizeof(float) + optimizer_bytes_bf16(p) +
           2 * p.num_slots * BT * sizeof(int) + p.num_slots * layout_activations_bf16(&a, NULL, p.config, p.shard, B, T, 0) +
           grads_elements_bf16(p.config, p.shard, BT) * sizeof(bf16);
}

// The same for the whole model alone.
static size_t gpt2_bf16_bytes(GPT2Config c, size_t num_parameters, int B, int T) {
    return gpt2_bf16_part_bytes(gpu_part_whole(c, num_parameters), B, T);
}

void gpt2_build_bf16(GPT2BF16* m, const GPT2* host, int capacity_B, int capacity_T) {
    GPT2Config c = host->config;
    GPUPart part = gpu_part_of(host);
    size_t need = gpt2_bf16_part_bytes(part, capacity_B, capacity_T);
    require_free_memory(need, capacity_B, capacity_T);
    GPT2* base = &m->base;
    int zero = gpu_part_zero(part);
    gpt2_build_parameters_gpu(base, host, capacity_B, capacity_T, !zero);
    size_t n = base->num_parameters, np = base->num_padded, BT = (size_t)capacity_B * capacity_T, C = c.channels,
           H = C / part.shard.tp;
    // the bf16 copy, rounded to nearest on the host (as float_to_bf16_gpu rounds), the padding zero
    bf16* copy = (bf16*)calloc_check(np, sizeof(bf16));
    for (size_t i = 0; i < n; i++) copy[i] = __float2bfloat16(host->params_memory[i]);
    cuda_check(cudaMalloc((void**)&m->params16, np * sizeof(bf16)));
    cuda_check(cudaMemcpy(m->params16, copy, np * sizeof(bf16), cudaMemcpyHostToDevice));
    free(copy);
    size_t n32 = float32_sizes_bf16(m->sizes32, part);
    m->params32 = base->params_memory;
    m->master = NULL;
    if (zero) {  // the master copy of this GPU's part, and the tensors read in float32, each whole
        cuda_check(cudaMalloc((void**)&m->master, base->opt_count * sizeof(float)));
        cuda_check(cudaMemcpy(m->master, host->params_memory + base->opt_offset, base->opt_count * sizeof(float),
                              cudaMemcpyHostToDevice));
        cuda_check(cudaMalloc((void**)&m->params32, n32 * sizeof(float)));
        size_t from = 0, to = 0;
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            cuda_check(cudaMemcpy(m->params32 + to, host->params_memory + from, m->sizes32[k] * sizeof(float),
                                  cudaMemcpyHostToDevice));
            from += base->param_sizes[k];
            to += m->sizes32[k];
        }
    }
    point_tensors((float**)&base->params, m->params32, m->sizes32, NUM_PARAMETER_TENSORS);
    base->param_bytes = parameter_bytes_bf16(part);
    base->optimizer_bytes = optimizer_bytes_bf16(part);
    ActivationTensorsOf<bf16> a;
    m->slot_bytes = layout_activations_bf16(&a, NULL, c, part.shard, capacity_B, capacity_T, 0);
    cuda_check(cudaMalloc((void**)&m->acts16_memory, base->num_slots * m->slot_bytes));
    size_t grads = grads_elements_bf16(c, part.shard, BT);
    cuda_check(cudaMalloc((void**)&m->dacts16_memory, grads * sizeof(bf16)));
    m->dresidual = m->dacts16_memory;
    m->dbuf = m->dresidual + BT * C;
    m->dbuf4 = m->dbuf + BT * C;
    m->dqkv = m->dbuf4 + BT * 4 * H;
    base->activation_bytes = base->num_slots * m->slot_bytes + grads * sizeof(bf16);
    base->device_bytes = need;
}

void gpt2_free_bf16(GPT2BF16* m) {
    cuda_check(cudaFree(m->params16));
    if (m->master != NULL) {
        cuda_check(cudaFree(m->master));
        cuda_check(cudaFree(m->params32));
    }
    cuda_check(cudaFree(m->acts16_memory));
    cuda_check(cudaFree(m->dacts16_memory));
    gpt2_free_gpu(&m->base);
}

// ---------- both ----------

// The largest B whose batches of B x T fit in `available` bytes (0: not even B = 1), for either
// path's byte count bytes(B), which grows linearly with B.
template <typename Bytes>
static int largest_batch_of(Bytes bytes, size_t available) {
    size_t one = bytes(1), per_b = bytes(2) - one;
    if (one > available) return 0;
    return 1 + (int)((available - one) / per_b);
}

// Of the whole model alone.
static int largest_batch(size_t (*bytes)(GPT2Config, size_t, int, int), GPT2Config c, size_t num_parameters,
                         int T, size_t available) {
    return largest_batch_of([&](int B) { return bytes(c, num_parameters, B, T); }, available);
}

// Of a host model's part, in either precision.
static int largest_batch_part(int use_bf16, const GPT2* host, int T, size_t available) {
    GPUPart p = gpu_part_of(host);
    return largest_batch_of([&](int B) { return use_bf16 ? gpt2_bf16_part_bytes(p, B, T) : gpt2_fp32_part_bytes(p, B, T); },
                            available);
}

#endif // GPT2_GPU_MODEL_GPU_CUH
