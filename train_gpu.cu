// train_gpu.cu: GPT-2 training on an NVIDIA GPU, every operation a kernel written here, in
// float32 (-p fp32) or mixed precision (-p bf16, the default from compute capability 8.0).
//
//   make train_gpu && ./train_gpu        GPT-2 124M from scratch on Tiny Shakespeare, T=1024
//   ./train_gpu -p fp32                  the float32 path, kernel for kernel the CPU's twin
//   mpirun -np N ./train_gpu ...         data parallel over N GPUs (NCCL); -tp, -pp, -z split it
//   GPU_DEBUG=1 ./train_gpu ...          wait after every kernel: a fault names its kernel
//   make train_gpu_emu                   the same program on the CPU emulator: build/emu/train_gpu
//
// train_cpu.c's twin: each CPU layer x(...) has a launcher x_gpu(...) in gpt2/gpu/ with its
// arguments on device pointers; the bf16 pass fuses bias, GELU and residual into its tensor-core
// products and runs flash attention (doc/gpu.md). Reductions run in a fixed order: same bits.

#include <type_traits>
#include "gpt2/model.h"
#include "gpt2/run.h"
#include "gpt2/train_parallel.h"
#include "gpt2/gpu/layers.cuh"     // the launchers of every layer
#include "gpt2/gpu/classifier.cuh"
#include "gpt2/gpu/optimizer.cuh"
#include "gpt2/gpu/model_gpu.cuh"  // the model in GPU memory, in both precisions
#include "gpt2/gpu/multi_gpu.cuh"
#include "gpt2/gpu/generate.cuh"   // the samples, with a key-value cache as infer_gpu

// ---------- the batch and the loss ----------

// The batch's way to the GPU: through pinned host memory, so that the copy is queued like a
// kernel (a copy from pageable memory may wait for the queue to drain first). A buffer is refilled
// once its last copy has run (its event): the GPU is then past that pass's start, and the rest of
// the pass still queued.
typedef struct {
    int* host;  // pinned
    size_t capacity;
    cudaEvent_t copied;
} PinnedTokens;
static PinnedTokens pinned_inputs, pinned_targets;

static void tokens_to_gpu(PinnedTokens* p, int* device, const int* tokens, size_t n) {
    if (p->copied == NULL) cuda_check(cudaEventCreate(&p->copied));
    cuda_check(cudaEventSynchronize(p->copied));  // its last copy has run
    if (n > p->capacity) {
        if (p->host != NULL) cuda_check(cudaFreeHost(p->host));
        cuda_check(cudaMallocHost((void**)&p->host, n * sizeof(int)));
        p->capacity = n;
    }
    memcpy(p->host, tokens, n * sizeof(int));
    cuda_check(cudaMemcpyAsync(device, p->host, n * sizeof(int), cudaMemcpyHostToDevice));
    cuda_check(cudaEventRecord(p->copied));
}

// The batch's tokens (host arrays (B, T)) to the GPU, into the current slot, for a forward pass
// of B x T. Only the first pipeline stage, which runs the encoder, reads them.
static void gpt2_inputs_to_gpu(GPT2* model, const int* inputs, int B, int T) {
    model->last_B = B;
    model->last_T = T;
    if (!model->shard.embed) return;
    tokens_to_gpu(&pinned_inputs, gpt2_slot_inputs(model), inputs, (size_t)B * T);
}

// The end of a forward pass with targets (NULL: none): the fused classifier's per-position
// losses, and the gradient of their mean with respect to the logits in dlogits, ready for the
// backward pass; their mean (in double) stays on the GPU, added to the step's loss there
// (gpt2/gpu/optimizer.cuh), so that the host need not wait. Both paths pass dlogits = logits: each
// slot's logits become their own gradient, which its backward pass reads (GPipe runs every
// forward pass of a step before the backward passes).
template <typename floatX>
static void gpt2_loss_gpu(GPT2* model, floatX* dlogits, float* losses, const floatX* logits, const int* targets) {
    GPT2Config c = model->config;
    int B = model->last_B, T = model->last_T;
    if (targets == NULL) return;
    int* slot_targets = gpt2_slot_targets(model);
    tokens_to_gpu(&pinned_targets, slot_targets, targets, (size_t)B * T);
    fused_classifier_gpu(dlogits, losses, logits, slot_targets, B, T, c.vocab_size, c.padded_vocab_size);
    mean_loss_gpu(model, losses, B * T, model->shard.tp_rank == 0);  // counted once per -tp group
}

// The last forward pass's mean loss on the host (a wait for the GPU), as stage_loss counts it.
static double stage_loss_gpu(GPT2* model) {
    if (model->shard.head) model->mean_loss = step_scalars_to_host(model).last_loss;
    return stage_loss(model);
}

// ---------- the forward pass, in both precisions ----------

static GPT2* gpt2_of(GPT2* model) { return model; }
static GPT2* gpt2_of(GPT2BF16* m) { return &m->base; }

// The weights a pass reads, and layer l's activations of the current slot: float32's, or bf16's
// (the matrices and activations in bf16, gpt2/gpu/model_gpu.cuh).
static ParameterTensors weights_gpu(GPT2* model) { return model->params; }
static ParameterTensorsOf<bf16> weights_gpu(GPT2BF16* m) { return weights_bf16(m); }
static ActivationTensors activations_gpu(GPT2* model, int l) {
    return shard_activations_of_layer(model->acts, model->config, model->shard, model->last_B, model->last_T, l);
}
static ActivationTensorsOf<bf16> activations_gpu(GPT2BF16* m, int l) { return activations_bf16(m, l); }

// As train_cpu.c's gpt2_forward, on the GPU, in float32 (a GPT2) or bf16 (a GPT2BF16): inputs and
// targets are host arrays (B, T), targets may be NULL; with them the logits become their
// gradient. In bf16 the products fuse the bias, GELU and the residual add and attention is flash
// attention; in float32 the same names run the plain kernels. On a pipeline stage its part; under
// -tp the projections' partial sums are added over the group.
template <typename Model>
void gpt2_forward_gpu(Model* m, const int* inputs, const int* targets, int B, int T) {
    GPT2* model = gpt2_of(m);
    constexpr bool bf16_path = !std::is_same<Model, GPT2>::value;
    if constexpr (!bf16_path) gpt2_layout_slot_gpu(model, B, T);  // bf16 lays out each layer's on the fly
    gpt2_inputs_to_gpu(model, inputs, B, T);
    GPT2Config c = model->config;
    Shard s = model->shard;
    int C = c.channels, NH = c.num_heads / s.tp, H = C / s.tp, BTC = B * T * C, tp_first = s.tp_rank == 0;
    ParameterTensors p = model->params;  // float32: embeddings, layernorms, biases
    auto wall = weights_gpu(m);          // and the matrices, in the path's precision
    auto a = activations_gpu(m, 0);
    if (s.embed) encoder_forward_gpu(a.encoded, gpt2_slot_inputs(model), p.wte, p.wpe, B, T, C);
    auto x = a.encoded;  // the residual stream entering layer l
    for (int l = 0; l < s.num_layers; l++) {
        auto w = shard_parameters_of_layer(wall, c, s, l);
        auto al = activations_gpu(m, l);
        layernorm_forward_gpu(al.ln1, al.ln1_mean, al.ln1_rstd, x, w.ln1w, w.ln1b, B, T, C);
        matmul_forward_gpu(al.qkv, al.ln1, w.qkvw, w.qkvb, B, T, C, 3 * H);
        if constexpr (bf16_path) flash_attention_forward_gpu(al.atty, al.att_lse, al.qkv, B, T, H, NH);
        else attention_forward_gpu(al.atty, al.preatt, al.att, al.qkv, B, T, H, NH);
        if (tp_first) matmul_residual_forward_gpu(al.residual2, al.atty, w.attprojw, w.attprojb, x, B, T, H, C);
        else matmul_forward_gpu(al.residual2, al.atty, w.attprojw, NULL, B, T, H, C);
        tp_sum_gpu(al.residual2, BTC);
        layernorm_forward_gpu(al.ln2, al.ln2_mean, al.ln2_rstd, al.residual2, w.ln2w, w.ln2b, B, T, C);
        matmul_gelu_forward_gpu(al.fch_gelu, al.fch, al.ln2, w.fcw, w.fcb, B, T, C, 4 * H);
        if (tp_first) {
            matmul_residual_forward_gpu(al.residual3, al.fch_gelu, w.fcprojw, w.fcprojb, al.residual2, B, T, 4 * H, C);
        } else {
            matmul_forward_gpu(al.residual3, al.fch_gelu, w.fcprojw, NULL, B, T, 4 * H, C);
        }
        tp_sum_gpu(al.residual3, BTC);
        x = al.residual3;
    }
    model->mean_loss = -1.0f;
    if (!s.head) return;
    layernorm_forward_gpu(a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnfw, p.lnfb, B, T, C);
    matmul_forward_gpu(a.logits, a.lnf, wall.wte, NULL, B, T, C, c.padded_vocab_size);  // tied to wte
    gpt2_loss_gpu(model, a.logits, a.losses, a.logits, targets);
}

// ---------- the backward pass in float32 ----------

// The activation gradients of the current slot to zero before a backward pass, except three that
// are written before they are read: logits (their gradient, by the forward's fused classifier, in
// the logits themselves), preatt and att (attention's scratch). Returns the bytes cleared (which
// dev/gpu/roofline.h counts).
static size_t gpt2_zero_activation_grads_gpu(GPT2* model) {
    size_t sizes[NUM_ACTIVATION_TENSORS], grad_sizes[NUM_ACTIVATION_TENSORS], bytes = 0;
    activation_sizes_gpu(sizes, grad_sizes, model->config, model->shard, model->last_B, model->last_T);
    float** dtensors = (float**)&model->grads_acts;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        if (i == LOGITS || i == PREATT || i == ATT || grad_sizes[i] == 0) continue;
        cuda_check(cudaMemset(dtensors[i], 0, grad_sizes[i] * sizeof(float)));
        bytes += grad_sizes[i] * sizeof(float);
    }
    return bytes;
}

// The backward pass of the current slot's last forward pass, as train_cpu.c's: every layer adds
// into the gradients of its inputs and parameters (the activation gradients start at zero).
void gpt2_backward_gpu(GPT2* model) {
    int B = model->last_B, T = model->last_T;
    gpt2_layout_slot_gpu(model, B, T);  // a pipeline runs other slots in between
    gpt2_zero_activation_grads_gpu(model);
    GPT2Config c = model->config;
    Shard s = model->shard;
    int C = c.channels, L = s.num_layers, NH = c.num_heads / s.tp, H = C / s.tp, BTC = B * T * C;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts, da = model->grads_acts;
    if (s.head) {
        ActivationTensors last = shard_activations_of_layer(a, c, s, B, T, L - 1);
        ActivationTensors dlast = shard_activations_of_layer(da, c, s, B, T, L - 1);
        matmul_backward_gpu(da.lnf, g.wte, NULL, da.logits, a.lnf, p.wte, B, T, C, c.padded_vocab_size);
        layernorm_backward_gpu(dlast.residual3, g.lnfw, g.lnfb, da.lnf, last.residual3, p.lnfw, a.lnf_mean,
                               a.lnf_rstd, B, T, C);
    }
    for (int l = L - 1; l >= 0; l--) {
        ParameterTensors w = shard_parameters_of_layer(p, c, s, l), dw = shard_parameters_of_layer(g, c, s, l);
        ActivationTensors al = shard_activations_of_layer(a, c, s, B, T, l);
        ActivationTensors dl = shard_activations_of_layer(da, c, s, B, T, l);
        if (l == L - 1 && !s.head) dl.residual3 = model->pipe_grad;  // from the next stage
        const float* x = l == 0 ? a.encoded : shard_activations_of_layer(a, c, s, B, T, l - 1).residual3;
        float* dx = l == 0 ? da.encoded : shard_activations_of_layer(da, c, s, B, T, l - 1).residual3;
        residual_backward_gpu(dl.residual2, dl.fcproj, dl.residual3, BTC);
        matmul_backward_gpu(dl.fch_gelu, dw.fcprojw, dw.fcprojb, dl.fcproj, al.fch_gelu, w.fcprojw, B, T, 4 * H, C);
        gelu_backward_gpu(dl.fch, al.fch, dl.fch_gelu, B * T * 4 * H);
        matmul_backward_gpu(dl.ln2, dw.fcw, dw.fcb, dl.fch, al.ln2, w.fcw, B, T, C, 4 * H);
        tp_sum_gpu(dl.ln2, BTC);
        layernorm_backward_gpu(dl.residual2, dw.ln2w, dw.ln2b, dl.ln2, al.residual2, w.ln2w, al.ln2_mean,
                               al.ln2_rstd, B, T, C);
        residual_backward_gpu(dx, dl.attproj, dl.residual2, BTC);
        matmul_backward_gpu(dl.atty, dw.attprojw, dw.attprojb, dl.attproj, al.atty, w.attprojw, B, T, H, C);
        attention_backward_gpu(dl.qkv, dl.preatt, dl.att, dl.atty, al.qkv, al.att, B, T, H, NH);
        matmul_backward_gpu(dl.ln1, dw.qkvw, dw.qkvb, dl.qkv, al.ln1, w.qkvw, B, T, C, 3 * H);
        tp_sum_gpu(dl.ln1, BTC);
        layernorm_backward_gpu(dx, dw.ln1w, dw.ln1b, dl.ln1, x, w.ln1w, al.ln1_mean, al.ln1_rstd, B, T, C);
    }
    if (s.embed) encoder_backward_gpu(g.wte, g.wpe, da.encoded, gpt2_slot_inputs(model), B, T, C);
}

// ---------- the backward pass in bf16 ----------

// One block at a time: the products and flash attention write the gradients of their inputs
// into scratch buffers that every block reuses (model_gpu.cuh: activation_grads_bf16); the
// residual stream's gradient is one buffer, dresidual (da.residual2 = da.residual3 = da.attproj
// = ...), which layernorm's backward adds into. A stage before the last finds the gradient of its
// output there, and leaves that of its input.
void gpt2_backward_gpu(GPT2BF16* m) {
    GPT2* model = &m->base;
    GPT2Config c = model->config;
    Shard s = model->shard;
    int B = model->last_B, T = model->last_T, C = c.channels, L = s.num_layers;
    int NH = c.num_heads / s.tp, H = C / s.tp, BTC = B * T * C;
    ParameterTensors p = model->params, g = model->grads;
    ParameterTensorsOf<bf16> wb = weights_bf16(m);
    ActivationTensorsOf<bf16> a = activations_bf16(m, 0), da = activation_grads_bf16(m);
    if (s.head) {
        matmul_backward_set_dinp_gpu(da.lnf, g.wte, NULL, a.logits, a.lnf, wb.wte, B, T, C, c.padded_vocab_size);
        cuda_check(cudaMemset(da.residual3, 0, (size_t)BTC * sizeof(bf16)));
        layernorm_backward_gpu(da.residual3, g.lnfw, g.lnfb, da.lnf, activations_bf16(m, L - 1).residual3, p.lnfw,
                               a.lnf_mean, a.lnf_rstd, B, T, C);
    }
    for (int l = L - 1; l >= 0; l--) {
        ParameterTensorsOf<bf16> w = shard_parameters_of_layer(wb, c, s, l);
        ParameterTensors dw = shard_parameters_of_layer(g, c, s, l);
        ActivationTensorsOf<bf16> al = activations_bf16(m, l);
        const bf16* x = l == 0 ? a.encoded : activations_bf16(m, l - 1).residual3;  // the block's input
        gelu_matmul_backward_set_dinp_gpu(da.fch, dw.fcprojw, dw.fcprojb, da.fcproj, al.fch_gelu, w.fcprojw, al.fch,
                                          B, T, 4 * H, C);
        matmul_backward_set_dinp_gpu(da.ln2, dw.fcw, dw.fcb, da.fch, al.ln2, w.fcw, B, T, C, 4 * H);
        tp_sum_gpu(da.ln2, BTC);
        layernorm_backward_gpu(da.residual2, dw.ln2w, dw.ln2b, da.ln2, al.residual2, w.ln2w, al.ln2_mean,
                               al.ln2_rstd, B, T, C);
        matmul_backward_set_dinp_gpu(da.atty, dw.attprojw, dw.attprojb, da.attproj, al.atty, w.attprojw, B, T, H, C);
        flash_attention_backward_set_dinp_gpu(da.qkv, da.atty, al.qkv, al.atty, al.att_lse, B, T, H, NH);
        matmul_backward_set_dinp_gpu(da.ln1, dw.qkvw, dw.qkvb, da.qkv, al.ln1, w.qkvw, B, T, C, 3 * H);
        tp_sum_gpu(da.ln1, BTC);
        layernorm_backward_gpu(da.residual3, dw.ln1w, dw.ln1b, da.ln1, x, w.ln1w, al.ln1_mean, al.ln1_rstd, B, T, C);
    }
    if (s.embed) encoder_backward_gpu(g.wte, g.wpe, (const bf16*)da.encoded, gpt2_slot_inputs(model), B, T, C);
}

// ---------- AdamW, the gradient norm, the way back to the host ----------

// AdamW on the parameters this GPU updates ([opt_offset, opt_offset + opt_count): all but under
// ZeRO-1); in bf16 on the float32 master copy, rewriting the bf16 copy too.
void gpt2_update_gpu(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    adamw_update_gpu(model, model->params_memory + model->opt_offset, NULL, lr, beta1, beta2, eps, weight_decay, t);
}
void gpt2_update_gpu(GPT2BF16* m, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    float* master = m->master != NULL ? m->master : m->base.params_memory + m->base.opt_offset;
    adamw_update_gpu(&m->base, master, m->params16, lr, beta1, beta2, eps, weight_decay, t);
}

// The gradients zeroed for a fresh step, and the step's loss.
void gpt2_zero_grad_gpu(GPT2* model) {
    cuda_check(cudaMemsetAsync(model->grads_memory, 0, model->num_padded * sizeof(float)));
    step_scalars_reset_gpu(model);
}

// As train_cpu.c's gpt2_grad_norm, queued on the GPU: the global L2 norm of the gradients
// (gpt2/train_parallel.h: the ranges this process counts) times 1/parts, the factor AdamW
// multiplies them by (1/parts, clipped to max_norm as PyTorch's clip_grad_norm_), and the mean of
// the step's losses over its parts; step_scalars_to_host reads them once the step has run. Under
// MPI the sums run over the processes, on the host.
void gpt2_grad_norm_gpu(GPT2* model, int parts, float max_norm) {
    size_t offset[NUM_PARAMETER_TENSORS], count[NUM_PARAMETER_TENSORS];
    int n = grad_norm_ranges(model, offset, count);
    float grad_scale = 1.0f / (float)parts;
    step_scalars_of_gpu(model, model->grads_memory, offset, count, n, grad_scale, max_norm, parts);
    if (!procs.mpi) return;
    StepScalars s = step_scalars_to_host(model);
    s.loss = (float)(parallel_group_sum(GROUP_WORLD, s.loss_sum) / parts);
    s.norm = grad_norm_of(s.squares[NORM_RANGES], grad_scale);
    s.grad_factor = clip_factor(s.norm, grad_scale, max_norm);
    s.finite = isfinite(s.loss) && isfinite(s.norm);
    step_scalars_to_gpu(model, &s);
}

// ZeRO-1, after each replica updated its part: every part to every replica.
static void gather_params_gpu(GPT2* model) {
    if (split.zero && split.dp > 1) nccl_all_gather(GROUP_DP, model->params_memory, model->num_padded);
}
// ZeRO-1's gathering in bf16, after replica p has updated part p, [p x P, (p+1) x P), of the
// parameters (P = opt_count) in its float32 master copy and in the bf16 copy: every part of the
// bf16 copy to every replica (all-gather, 2 bytes a parameter), and the new values of the
// tensors the passes read in float32 (params32) from the replica that computed them. Part p's
// share of those is one contiguous range of params32 (its tensors keep the model's order), of a
// size that differs from part to part: replica p copies it out of its master part and
// broadcasts it. The blocks' matrices travel in bf16 only, and every replica receives the bits
// their owner computed, so the run computes what it does without ZeRO-1.
static void gather_params_gpu(GPT2BF16* m) {
    GPT2* model = &m->base;
    if (!split.zero || split.dp == 1) return;
    nccl_all_gather_bf16(GROUP_DP, m->params16, model->num_padded);
    size_t P = model->opt_count;
    for (int p = 0; p < split.dp; p++) {
        size_t lo = (size_t)p * P, hi = lo + P, start = 0, at32 = 0, first = 0, count = 0;
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {  // tensor k's part of [lo, hi), in params32
            size_t end = start + model->param_sizes[k], from = start > lo ? start : lo, to = end < hi ? end : hi;
            if (m->sizes32[k] > 0 && from < to) {
                if (count == 0) first = at32 + (from - start);
                if (p == split.dp_rank) {
                    cuda_check(cudaMemcpy(m->params32 + at32 + (from - start), m->master + (from - lo),
                                          (to - from) * sizeof(float), cudaMemcpyDeviceToDevice));
                }
                count += to - from;
            }
            start = end;
            at32 += m->sizes32[k];
        }
        nccl_broadcast(GROUP_DP, m->params32 + first, count, p);
    }
}

// The parameters and moments of this GPU into its host model; under ZeRO-1 the float32
// parameters of its part only (gpt2/train_parallel.h's run_gather gathers the others' over the replicas).
static void gpt2_to_host_gpu(GPT2BF16* m, GPT2* host) {
    const GPT2* model = &m->base;
    gpt2_to_host_gpu(model, host);
    if (m->master == NULL) return;
    cuda_check(cudaMemcpy(host->params_memory + model->opt_offset, m->master, model->opt_count * sizeof(float),
                          cudaMemcpyDeviceToHost));
}

// ---------- the pipeline's exchanges ----------

// An exchange of the pipeline's schedule over NCCL (gpt2/train_parallel.h), on device memory:
// the stream entering the stage and leaving it, and their gradients.
static void pipe_exchange_gpu(GPT2* model, PipeOp op, int B, int T) {
    if (!op.send && !op.recv) return;
    size_t bytes = (size_t)B * T * model->config.channels * sizeof(float), sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_gpu(sizes, NULL, model->config, model->shard, B, T);
    ActivationTensors a;
    if (op.slot >= 0) point_tensors((float**)&a, model->acts_memory + (size_t)op.slot * model->num_activations, sizes,
                                    NUM_ACTIVATION_TENSORS);
    void *send = NULL, *recv = NULL;
    if (op.peer < 0) {
        if (op.send) send = model->grads_acts_memory;  // encoded's gradient is the first tensor
        if (op.recv) recv = a.encoded;
    } else {
        if (op.send) send = shard_activations_of_layer(a, model->config, model->shard, B, T, model->shard.num_layers - 1).residual3;
        if (op.recv) recv = model->pipe_grad;
    }
    nccl_exchange(send, recv, bytes, split.pp_rank + op.peer);
}

// In bf16: the input and output of slot op.slot, and both gradients in dresidual.
static void pipe_exchange_gpu(GPT2BF16* m, PipeOp op, int B, int T) {
    if (!op.send && !op.recv) return;
    size_t bytes = (size_t)B * T * m->base.config.channels * sizeof(bf16);
    ActivationTensorsOf<bf16> in, out;
    if (op.slot >= 0) {
        char* slot = m->acts16_memory + (size_t)op.slot * m->slot_bytes;
        layout_activations_bf16(&in, slot, m->base.config, m->base.shard, B, T, 0);
        layout_activations_bf16(&out, slot, m->base.config, m->base.shard, B, T, m->base.shard.num_layers - 1);
    }
    void *send = NULL, *recv = NULL;
    if (op.peer < 0) {
        if (op.send) send = m->dresidual;
        if (op.recv) recv = in.encoded;
    } else {
        if (op.send) send = out.residual3;
        if (op.recv) recv = m->dresidual;
    }
    nccl_exchange(send, recv, bytes, split.pp_rank + op.peer);
}

#ifndef TRAIN_GPU_NO_MAIN  // dev/gpu/gpu_check.cu defines it to call the functions above

// ---------- validation and samples ----------

template <typename Model>
static void validate(Run* run, Model* m, int step) {
    GPT2* model = gpt2_of(m);
    int passes = run_val_begin(run);
    double sum = 0.0;
    for (int i = 0; i < passes; i++) {
        dataloader_next_batch(&run->val);
        model->slot = 0;
        pipe_exchange_gpu(m, pipe_input(model, 0), run->val.B, run->val.T);
        gpt2_forward_gpu(m, run->val.inputs, run->val.targets, run->val.B, run->val.T);
        pipe_exchange_gpu(m, pipe_output(model, 0), run->val.B, run->val.T);
        sum += stage_loss_gpu(model);
    }
    run_val_report(run, step, sum, passes);
}

// The Vp logits at `position` of the last forward pass (batch 1) into a host array.
static void logits_to_host(GPT2* model, int position, float* out) {
    size_t Vp = (size_t)model->config.padded_vocab_size;
    cuda_check(cudaMemcpy(out, model->acts.logits + position * Vp, Vp * sizeof(float), cudaMemcpyDeviceToHost));
}
static void logits_to_host(GPT2BF16* m, int position, float* out) {
    int Vp = m->base.config.padded_vocab_size;
    uint16_t* bits = (uint16_t*)malloc_check((size_t)Vp * sizeof(uint16_t));
    cuda_check(cudaMemcpy(bits, activations_bf16(m, 0).logits + (size_t)position * Vp, (size_t)Vp * sizeof(bf16),
                          cudaMemcpyDeviceToHost));
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_float(bits[i]);
    free(bits);
}

// infer_gpu's generator (gpt2/gpu/generate.cuh) over the weights being trained, for one sequence.
static EngineDevice sample_generator(GPT2* model, int pages) {
    return generator_gpu_device(model->config, model->params, model->params, 1, pages);
}
static EngineDevice sample_generator(GPT2BF16* m, int pages) {
    return generator_gpu_device(m->base.config, m->base.params, weights_bf16(m), 1, pages);
}
static void sample_generator_free(GPT2*, EngineDevice* gen) { generator_gpu_device_free<float>(gen); }
static void sample_generator_free(GPT2BF16*, EngineDevice* gen) { generator_gpu_device_free<bf16>(gen); }

// A sample: each token one pass of its own against a key-value cache, as infer_gpu generates; a
// model split over processes runs the whole sequence through every process for each token.
template <typename Model>
static void sample(Run* run, Model* m, int step) {
    GPT2* model = gpt2_of(m);
    int Vp = model->config.padded_vocab_size, cached = !split_is_model_parallel();
    int* tokens = (int*)malloc_check((size_t)run->cfg.T * sizeof(int));
    float* logits = (float*)malloc_check((size_t)Vp * sizeof(float));
    int n = run_sample_length(run);  // the generator is built for them first
    int pages = kv_pages_for(n + 1);
    int* table = (int*)malloc_check((size_t)pages * sizeof(int));
    for (int i = 0; i < pages; i++) table[i] = i;  // one sequence: the pool's pages in order
    EngineDevice gen;
    if (cached) gen = sample_generator(m, pages);
    run_sample_begin(run, &tokens[0], step);
    for (int t = 1; t <= n; t++) {
        float coin = random_f32(&run->sample_rng);
        if (cached) {
            int pos = t - 1;  // token t-1 at position t-1
            EnginePass pass = engine_pass(1, 1, tokens + t - 1, &pos, table, pages);
            gen.forward(gen.ctx, &pass, logits);
        } else {
            model->slot = 0;
            pipe_exchange_gpu(m, pipe_input(model, 0), 1, t);
            gpt2_forward_gpu(m, tokens, NULL, 1, t);
            pipe_exchange_gpu(m, pipe_output(model, 0), 1, t);
            if (model->shard.head) logits_to_host(m, t - 1, logits);
        }
        tokens[t] = run_sample_next(run, model->shard.head ? logits : NULL, coin);
    }
    run_sample_end();
    if (cached) sample_generator_free(m, &gen);
    free(table);
    free(tokens);
    free(logits);
}

// ---------- the training loop ----------

// Trains a model built on the GPU from the run's host model (or this process's part of it) to
// -x steps; the same loop as train_cpu.c's main, with the GPU's queue waited on once a step, at
// its end (and around the collectives under MPI): the loss, the norm and the clip stay on the GPU.
template <typename Model>
static void train(Run* run, Model* m, double peak) {
    GPT2* model = gpt2_of(m);
    const TrainConfig* cfg = &run->cfg;
    int B = cfg->micro_batch, T = cfg->T;
    run_print_summary(run, model);
    if (cfg->val_every > 0 && run->start_step == 0) validate(run, m, 0);
    PipeOp* ops = (PipeOp*)malloc_check((6 * (size_t)run->micro_steps + 2) * sizeof(PipeOp));
    int num_ops = pipe_schedule(ops, model, run->micro_steps);
    run->eta_start = now_seconds();
    for (int step = run->start_step + 1; step <= cfg->max_steps; step++) {
        double t0 = now_seconds();
        float lr = learning_rate_at(cfg, step);
        parallel_step_begin();
        gpt2_zero_grad_gpu(model);
        comm_time_discard();  // validation's and the samples' collectives are not this step's
        for (int i = 0; i < num_ops; i++) {
            PipeOp op = ops[i];
            if (op.action != PIPE_EXCHANGE) model->slot = op.slot;
            if (op.action == PIPE_EXCHANGE) {
                pipe_exchange_gpu(m, op, B, T);
            } else if (op.action == PIPE_FORWARD) {
                dataloader_next_batch(&run->train);
                gpt2_forward_gpu(m, run->train.inputs, run->train.targets, B, T);  // its loss added on the GPU
            } else {
                gpt2_backward_gpu(m);
            }
        }
        if (procs.mpi) {
            synchronize_comm_gpu();  // the backward is queued: time only the sums
            double t1 = now_seconds();
            nccl_sum_gradients(model);
            synchronize_comm_gpu();
            run->reduce_time = now_seconds() - t1;
        }
        gpt2_grad_norm_gpu(model, run->micro_steps * split.dp, 1.0f);  // and the loss, on the GPU
        gpt2_update_gpu(m, lr, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, cfg->weight_decay, step);  // if both finite
        gather_params_gpu(m);
        synchronize_comm_gpu();  // the step is queued: wait, then time it
        StepScalars s = step_scalars_to_host(model);
        run->loss = s.loss;
        check_step_finite(step, s.loss, s.norm);  // the update was skipped: stop
        run_print_step(run, model, step, s.norm, lr, now_seconds() - t0, peak);
        if (step == run->start_step + 1) run_print_parts(model);
        int due = run_due(run, step);
        if (due & RUN_VALIDATE) validate(run, m, step);
        if (due & RUN_SAMPLE) sample(run, m, step);
        if (due & RUN_SAVE) {
            gpt2_to_host_gpu(m, run->split ? &run->part : &run->model);
            if (run->split) run_gather(run);
            run_save(run, step);
        }
    }
    if (cfg->max_steps == 0 && cfg->output_dir != NULL) run_save(run, 0);  // -x 0: the initial model
    run_print_average(run, model, peak);
    free(ops);
}

// ---------- main ----------

// -p: bf16 where the GPU has bf16 tensor cores (compute capability 8.0 and up), else fp32.
static int choose_bf16(const char* precision) {
    int capable = cuda_device.prop.major >= 8;
    if (precision == NULL) return capable;
    if (strcmp(precision, "fp32") == 0) return 0;
    if (strcmp(precision, "bf16") != 0) fail("-p expects fp32 or bf16, got %s", precision);
    if (!capable) {
        fail("-p bf16 needs a GPU of compute capability 8.0 or newer (this one: %s, %d.%d): use -p fp32",
             cuda_device.prop.name, cuda_device.prop.major, cuda_device.prop.minor);
    }
    return 1;
}

// Checked before the run's output directory is made: flash attention keeps a head's row in
// registers, so it is compiled for a few head sizes.
static void check_model_bf16(GPT2Config c) {
    int hs = c.channels / c.num_heads;
    if (!flash_attention_supports(hs)) {
        fail("-p bf16: flash attention is built for head sizes 16, 32, 64 and 128, and this model's is %d "
             "(C=%d, NH=%d): use -p fp32", hs, c.channels, c.num_heads);
    }
}

int main(int argc, char** argv) {
    parallel_init(&argc, &argv);  // started by mpirun: one rank of a data-parallel run, one GPU each
    rank0_first_begin();          // a bad option, input or GPU is reported once, by rank 0
    TrainConfig cfg = train_config_parse(argc, argv, train_config_defaults(1));  // d12, T=1024
    cuda_device_init();  // no device: one line, exit 1
    int bf16 = choose_bf16(cfg.precision);
    rank0_first_end();
    cuda_device_check_own();  // under mpirun, every rank: two processes on one GPU stop the run
    char key[1024];
    train_config_key(&cfg, key, sizeof(key));
    parallel_check_same("options", key);
    if (procs.rank == 0) cuda_device_print(bf16);
    Run run;
    run_open(&run, cfg, bf16 ? check_model_bf16 : NULL);  // the model on the host, the data, -o DIR
    if (procs.mpi) nccl_init();  // after run_open, which makes the grid of processes NCCL's groups follow
    GPT2* host = run_part(&run);  // the whole model, or this process's part of it (-tp, -pp, -z)
    size_t free_bytes, total_bytes;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (procs.rank == 0) {
        printf("largest batch at T=%d in the %.1f GiB of free GPU memory: B=%d%s\n", cfg.T, free_bytes / 1073741824.0,
               largest_batch_part(bf16, host, cfg.T, free_bytes),
               run.split ? " per GPU (rank 0's part)" : procs.size > 1 ? " per GPU" : "");
    }
    if (bf16) {
        GPT2BF16 model;
        gpt2_build_bf16(&model, host, cfg.micro_batch, cfg.T);  // a copy of it on the GPU, trained there
        train(&run, &model, peak_flops_bf16());
        gpt2_free_bf16(&model);
    } else {
        GPT2 model;
        gpt2_build_gpu(&model, host, cfg.micro_batch, cfg.T);
        train(&run, &model, peak_flops_gpu());
        gpt2_free_gpu(&model);
    }
    run_close(&run);
    if (procs.mpi) nccl_free();
    parallel_split_free();
    parallel_finalize();
    return 0;
}

#endif
