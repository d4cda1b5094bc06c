// train_gpu.cu: GPT-2 training on an NVIDIA GPU, every operation a kernel written here, in
// float32 (-p fp32) or in mixed precision (-p bf16, the default from compute capability 8.0).
//
//   make train_gpu && ./train_gpu        GPT-2 124M from scratch on Tiny Shakespeare, T=1024
//   ./train_gpu -p fp32                  the float32 path, kernel for kernel the CPU's twin
//   mpirun -np N ./train_gpu ...         data parallel on N GPUs, gradients summed by NCCL; with
//                                        -tp, -pp, -z the model or its optimizer split over them
//                                        (doc/parallel.md)
//   GPU_DEBUG=1 ./train_gpu ...          wait after every kernel: a fault names its kernel
//   make train_gpu_emu                   the same program on the CPU emulator: build/emu/train_gpu
//
// The GPU twin of train_cpu.c, and read the same way. The kernels are in gpt2/gpu/, a header per
// layer: each CPU layer x(...) of gpt2/cpu_layers.h has a twin x_gpu(...) there with the same
// arguments on device pointers. This file is the model on the GPU: its memory, the loss and
// where backpropagation starts, clipping, AdamW; then main. In float32 the forward and backward
// pass (gpt2/model.h) and the training loop (gpt2/run.h) are the ones train_cpu.c runs, handed
// the GPU's layers and operations. The bf16 path (its section below) runs the same transformer
// block on its own layers: tensor-core products with the bias, GELU and residual add fused into
// them, and flash attention. Everything that is not arithmetic on the GPU (files, the command
// line, the data) happens on the host, in the shared headers. Every reduction runs in a fixed
// order, so two runs of the same step give the same bits. doc/gpu.md explains the kernels;
// dev/gpu/gpu_check.cu checks each one against the CPU.

#include "gpt2/model.h"
#include "gpt2/run.h"
#include "gpt2/gpu/layers.cuh"     // every layer's kernels, and their tables LAYERS_GPU, LAYERS_BF16
#include "gpt2/gpu/classifier.cuh"
#include "gpt2/gpu/optimizer.cuh"
#include "gpt2/gpu/model_gpu.cuh"  // the model in GPU memory, in both precisions
#include "gpt2/gpu/multi_gpu.cuh"
#include "gpt2/gpu/generate.cuh"  // the samples: generation with a key-value cache, as infer_gpu

// ---------- the model on the GPU, in float32 ----------

// The batch's tokens (host arrays (B, T)) to the GPU, into the current slot, for a forward pass
// of B x T. Only the first pipeline stage, which runs the encoder, reads them.
static void gpt2_inputs_to_gpu(GPT2* model, const int* inputs, int B, int T) {
    model->last_B = B;
    model->last_T = T;
    if (!model->shard.embed) return;
    cuda_check(cudaMemcpy(gpt2_slot_inputs(model), inputs, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice));
}

// The end of a forward pass with targets (NULL: none, mean_loss -1): the fused classifier's
// per-position losses, and the gradient of their mean with respect to the logits in dlogits,
// ready for the backward pass; the mean loss summed on the host in double (both precisions).
// Both paths pass dlogits = logits: each slot's logits become their own gradient, which its
// backward pass reads (GPipe runs every forward pass of a step before the backward passes).
template <typename floatX>
static void gpt2_loss_gpu(GPT2* model, floatX* dlogits, float* losses, const floatX* logits, const int* targets) {
    GPT2Config c = model->config;
    int B = model->last_B, T = model->last_T;
    size_t BT = (size_t)B * T;
    model->mean_loss = -1.0f;
    if (targets == NULL) return;
    int* slot_targets = gpt2_slot_targets(model);
    cuda_check(cudaMemcpy(slot_targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice));
    fused_classifier_gpu(dlogits, losses, logits, slot_targets, B, T, c.vocab_size, c.padded_vocab_size);
    cuda_check(cudaMemcpy(model->cpu_losses, losses, BT * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += model->cpu_losses[i];
    model->mean_loss = (float)(sum / (double)BT);
}

// The forward pass, as train_cpu.c's gpt2_forward, on the current slot: inputs and targets are
// host arrays (B, T); targets may be NULL. On a pipeline stage, its part (gpt2/model.h); only
// the last stage computes the loss. With targets, the logits are then their gradient.
void gpt2_forward_gpu(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    gpt2_layout_slot_gpu(model, B, T);  // laid out for this B and T, inside the allocation
    gpt2_inputs_to_gpu(model, inputs, B, T);
    gpt2_forward_layers(&LAYERS_GPU, model, tensor_group_gpu<float>());
    model->mean_loss = -1.0f;
    if (!model->shard.head) return;
    ActivationTensors a = model->acts;
    gpt2_loss_gpu(model, a.logits, a.losses, a.logits, targets);
}

// The gradients to zero for a fresh step (num_padded: the padding stays 0), and the time of the
// collectives since the last step (validation's, the samples') forgotten: not this step's.
void gpt2_zero_grad_gpu(GPT2* model) {
    cuda_check(cudaMemset(model->grads_memory, 0, model->num_padded * sizeof(float)));
    comm_time_discard();
}

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

// The backward pass of the current slot's last forward pass (which had targets, or on a stage
// before the last, whose output's gradient is in pipe_grad), as gpt2_backward.
void gpt2_backward_gpu(GPT2* model) {
    gpt2_layout_slot_gpu(model, model->last_B, model->last_T);  // a pipeline runs other slots in between
    gpt2_zero_activation_grads_gpu(model);
    gpt2_backward_layers(&LAYERS_GPU, model, tensor_group_gpu<float>());
}

// The sum of the squares of the gradients [offset, offset + n), in double, in a fixed order.
static double gpt2_grad_squares_gpu(GPT2* model, size_t offset, size_t n) {
    return sum_of_squares_gpu(model->grads_memory + offset, n);
}

static void gpt2_scale_grads_gpu(GPT2* model, size_t offset, size_t n, float factor) {
    scale_gpu(model->grads_memory + offset, n, factor);
}

// A whole model's gradients scaled and clipped in one call, as train_cpu.c's gpt2_clip_gradients
// (gpt2/run.h's run_step does the same through grad_squares and scale_grads).
float gpt2_clip_gradients_gpu(GPT2* model, float grad_scale, float max_norm) {
    return clip_gradients_gpu(model->grads_memory, model->num_parameters, grad_scale, max_norm);
}

void gpt2_update_gpu(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    adamw_update_gpu(model, model->params_memory + model->opt_offset, NULL, lr, beta1, beta2, eps, weight_decay, t);
}

static void gpt2_logits_to_host_gpu(const GPT2* model, int position, float* out) {
    size_t Vp = (size_t)model->config.padded_vocab_size;
    cuda_check(cudaMemcpy(out, model->acts.logits + (size_t)position * Vp, Vp * sizeof(float),
                          cudaMemcpyDeviceToHost));
}

// A pipeline stage's buffer (gpt2/run.h: STAGE_IN ...) of slot `slot`, in device memory: the
// stream entering the stage (acts.encoded) and leaving it (its last block's residual3), the
// gradient of its output (pipe_grad) and of its input (grads_acts.encoded).
static void* gpt2_stage_buffer_gpu(GPT2* model, int which, int slot, int B, int T, size_t* bytes) {
    *bytes = (size_t)B * T * model->config.channels * sizeof(float);
    if (which == STAGE_DOUT) return model->pipe_grad;
    if (which == STAGE_DIN) return model->grads_acts_memory;  // encoded is the first tensor
    size_t sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_gpu(sizes, NULL, model->config, model->shard, B, T);
    ActivationTensors a;
    point_tensors((float**)&a, model->acts_memory + (size_t)slot * model->num_activations, sizes, NUM_ACTIVATION_TENSORS);
    if (which == STAGE_IN) return a.encoded;
    return shard_activations_of_layer(a, model->config, model->shard, B, T, model->shard.num_layers - 1).residual3;
}

// The samples' generator: infer_gpu's (gpt2/gpu/generate.cuh) over the weights being trained,
// for one sequence, with a pool of `pages` pages (a whole model only: gpt2/run.h's run_sample).
static void gpt2_generator_build_gpu(GPT2* model, int pages, EngineDevice* device) {
    *device = generator_gpu_device(model->config, model->params, model->params, &LAYERS_GPU_INFER, 1, pages);
}

// The model's training operations for gpt2/run.h's loop, on a device copy of the run's model or
// of this process's part of it; NCCL moves its device memory between the processes.
static const Trainer TRAINER_GPU = {
    gpt2_forward_gpu, gpt2_zero_grad_gpu, gpt2_backward_gpu, gpt2_grad_squares_gpu, gpt2_scale_grads_gpu,
    gpt2_update_gpu, gpt2_logits_to_host_gpu, gpt2_to_host_gpu, synchronize_comm_gpu, peak_flops_gpu,
    gpt2_generator_build_gpu, generator_gpu_device_free<float>,
    nccl_sum, nccl_reduce_scatter, nccl_all_gather, nccl_exchange, gpt2_stage_buffer_gpu, NULL,
};

// ---------- the model in mixed precision (bf16) ----------
//
// -p bf16 trains the same GPT-2 with bf16 (8 exponent bits like float32, 8 significant bits)
// for what is large and streamed: the weights the matrix products read, the activations, their
// gradients. What must not lose digits stays float32: the master copy of the parameters (an
// update of 1e-4 of a weight of 1 would vanish in bf16, whose spacing there is 2^-7), their
// gradients and the AdamW moments, layernorm's mean and 1/std, flash attention's log-sum-exp,
// the losses, and every sum inside a kernel. bf16 has float32's range, so small gradients do not
// underflow to zero and no loss scaling is needed, unlike float16.
//
// The step: the forward and backward read params16, a bf16 copy of the float32 parameters that
// each AdamW step rewrites; the backward writes float32 parameter gradients (the tensor-core
// products accumulate in float32 and add into them); AdamW updates the float32 master copy (under
// ZeRO-1, each GPU its part of it, gpt2_gather_params_bf16 below). The
// products run on the tensor cores (gemm_bf16), with bias, GELU and the residual connection
// fused into their epilogues; attention is flash attention, which never stores the
// T x T scores. Layers that are not products (layernorm, encoder, classifier) and the parameters
// they read (layernorm weights, biases, embeddings) are the float32 path's kernels, reading bf16
// activations and float32 parameters.

// The forward pass, as gpt2_forward_gpu, in bf16, on the current slot: the float32 embeddings
// (the first stage), the shard's blocks, the logits from the bf16 copy of wte (the last stage).
// With targets, the classifier overwrites the logits with the gradient of the mean loss.
void gpt2_forward_bf16(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    GPT2BF16* m = (GPT2BF16*)model;
    GPT2Config c = model->config;
    Shard s = model->shard;
    int C = c.channels;
    gpt2_inputs_to_gpu(model, inputs, B, T);
    const TensorGroupOf<bf16>* tp = tensor_group_gpu<bf16>();
    ParameterTensors p = model->params;  // the float32 ones
    ParameterTensorsOf<bf16> w = weights_bf16(m);
    ActivationTensorsOf<bf16> a = activations_bf16(m, 0);
    if (s.embed) encoder_forward_gpu(a.encoded, gpt2_slot_inputs(model), p.wte, p.wpe, B, T, C);
    const bf16* x = a.encoded;  // the residual stream entering block l: the stage's input for the first
    for (int l = 0; l < s.num_layers; l++) {
        ActivationTensorsOf<bf16> al = activations_bf16(m, l);
        block_forward(&LAYERS_BF16, shard_parameters_of_layer(w, c, s, l), al, x, (const LayerCacheOf<bf16>*)NULL,
                      B, T, C, c.num_heads, tp);
        x = al.residual3;
    }
    model->mean_loss = -1.0f;
    if (!s.head) return;
    layernorm_forward_gpu(a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnfw, p.lnfb, B, T, C);
    matmul_forward_bf16(a.logits, a.lnf, w.wte, NULL, B, T, C, c.padded_vocab_size);
    gpt2_loss_gpu(model, a.logits, a.losses, a.logits, targets);
}

// The backward pass of the current slot's last forward pass, as gpt2_backward_gpu, one block at
// a time: the gradient of the residual stream enters each block from the one above, in
// dresidual, where a stage before the last has received the gradient of its output (its
// stage_buffer STAGE_DOUT), and where the gradient of the stage's input is left (STAGE_DIN).
void gpt2_backward_bf16(GPT2* model) {
    GPT2BF16* m = (GPT2BF16*)model;
    GPT2Config c = model->config;
    Shard s = model->shard;
    int B = model->last_B, T = model->last_T, C = c.channels, L = s.num_layers;
    const TensorGroupOf<bf16>* tp = tensor_group_gpu<bf16>();
    ParameterTensors p = model->params, g = model->grads;
    ParameterTensorsOf<bf16> w = weights_bf16(m);
    ActivationTensorsOf<bf16> a = activations_bf16(m, 0), da = activation_grads_bf16(m);
    if (s.head) {
        matmul_backward_bf16(da.lnf, g.wte, NULL, a.logits, a.lnf, w.wte, B, T, C, c.padded_vocab_size);
        cuda_check(cudaMemset(da.residual3, 0, (size_t)B * T * C * sizeof(bf16)));
        layernorm_backward_gpu(da.residual3, g.lnfw, g.lnfb, da.lnf, activations_bf16(m, L - 1).residual3, p.lnfw,
                               a.lnf_mean, a.lnf_rstd, B, T, C);
    }
    for (int l = L - 1; l >= 0; l--) {
        const bf16* x = l == 0 ? a.encoded : activations_bf16(m, l - 1).residual3;  // the block's input
        block_backward(&LAYERS_BF16, shard_parameters_of_layer(w, c, s, l), shard_parameters_of_layer(g, c, s, l),
                       activations_bf16(m, l), da, x, da.residual3, B, T, C, c.num_heads, tp);
    }
    if (s.embed) encoder_backward_gpu(g.wte, g.wpe, (const bf16*)da.encoded, gpt2_slot_inputs(model), B, T, C);
}

// AdamW on the float32 master copy (under ZeRO-1, this GPU's part of it), writing the new values
// to the bf16 copy too.
void gpt2_update_bf16(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    GPT2BF16* m = (GPT2BF16*)model;
    float* master = m->master != NULL ? m->master : model->params_memory + model->opt_offset;
    adamw_update_gpu(model, master, m->params16, lr, beta1, beta2, eps, weight_decay, t);
}

// ZeRO-1's gathering in bf16, after replica p has updated part p, [p x P, (p+1) x P), of the
// parameters (P = opt_count) in its float32 master copy and in the bf16 copy: every part of the
// bf16 copy to every replica (all-gather, 2 bytes a parameter), and the new values of the
// tensors the passes read in float32 (params32) from the replica that computed them. Part p's
// share of those is one contiguous range of params32 (its tensors keep the model's order), of a
// size that differs from part to part: replica p copies it out of its master part and
// broadcasts it. The blocks' matrices travel in bf16 only, and every replica receives the bits
// their owner computed, so the run computes what it does without ZeRO-1.
static void gpt2_gather_params_bf16(GPT2* model) {
    GPT2BF16* m = (GPT2BF16*)model;
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
// parameters of its part only (gpt2/run.h's run_gather gathers the others' over the replicas).
static void gpt2_to_host_bf16(const GPT2* model, GPT2* host) {
    const GPT2BF16* m = (const GPT2BF16*)model;
    gpt2_to_host_gpu(model, host);
    if (m->master == NULL) return;
    cuda_check(cudaMemcpy(host->params_memory + model->opt_offset, m->master, model->opt_count * sizeof(float),
                          cudaMemcpyDeviceToHost));
}

static void gpt2_logits_to_host_bf16(const GPT2* model, int position, float* out) {
    int Vp = model->config.padded_vocab_size;
    ActivationTensorsOf<bf16> a = activations_bf16((const GPT2BF16*)model, 0);
    uint16_t* bits = (uint16_t*)malloc_check((size_t)Vp * sizeof(uint16_t));
    cuda_check(cudaMemcpy(bits, a.logits + (size_t)position * Vp, (size_t)Vp * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_float(bits[i]);
    free(bits);
}

// A pipeline stage's buffer of slot `slot` in bf16: its input (encoded) and output (its last
// block's residual3), and both their gradients in dresidual (gpt2_backward_bf16).
static void* gpt2_stage_buffer_bf16(GPT2* model, int which, int slot, int B, int T, size_t* bytes) {
    GPT2BF16* m = (GPT2BF16*)model;
    *bytes = (size_t)B * T * model->config.channels * sizeof(bf16);
    if (which == STAGE_DOUT || which == STAGE_DIN) return m->dresidual;
    ActivationTensorsOf<bf16> a;
    int l = which == STAGE_IN ? 0 : model->shard.num_layers - 1;
    layout_activations_bf16(&a, m->acts_memory + (size_t)slot * m->slot_bytes, model->config, model->shard, B, T, l);
    return which == STAGE_IN ? a.encoded : a.residual3;
}

// The samples' generator in bf16, over the bf16 copy of the weights being trained.
static void gpt2_generator_build_bf16(GPT2* model, int pages, EngineDevice* device) {
    *device = generator_gpu_device(model->config, model->params, weights_bf16((GPT2BF16*)model), &LAYERS_BF16_INFER, 1,
                                   pages);
}

static const Trainer TRAINER_BF16 = {
    gpt2_forward_bf16, gpt2_zero_grad_gpu, gpt2_backward_bf16, gpt2_grad_squares_gpu, gpt2_scale_grads_gpu,
    gpt2_update_bf16, gpt2_logits_to_host_bf16, gpt2_to_host_bf16, synchronize_comm_gpu, peak_flops_bf16,
    gpt2_generator_build_bf16, generator_gpu_device_free<bf16>,
    nccl_sum, nccl_reduce_scatter, nccl_all_gather, nccl_exchange, gpt2_stage_buffer_bf16, gpt2_gather_params_bf16,
};

// ---------- main ----------
#ifndef TRAIN_GPU_NO_MAIN  // dev/gpu/gpu_check.cu defines it to call the functions above

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
        run_train(&run, &TRAINER_BF16, &model.base);
        gpt2_free_bf16(&model);
    } else {
        GPT2 model;
        gpt2_build_gpu(&model, host, cfg.micro_batch, cfg.T);
        run_train(&run, &TRAINER_GPU, &model);
        gpt2_free_gpu(&model);
    }
    run_close(&run);
    if (procs.mpi) nccl_free();
    parallel_split_free();
    parallel_finalize();
    return 0;
}

#endif
