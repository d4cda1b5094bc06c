// train_cpu.c: GPT-2 training on the CPU, in plain C with OpenMP: the reference that train_gpu.cu
// and infer.c are checked against, itself checked against PyTorch (doc/correctness.md).
//
//   make train_cpu && ./train_cpu        a small GPT-2 from scratch on Tiny Shakespeare
//   ./train_cpu -h                       every option
//   make LAYERS=naive                    every layer on the plain loops that define it
//
// The layers are gpt2/cpu_layers.h, the tensors gpt2/model.h, the run (options, data,
// checkpoints) gpt2/run.h. Here: the model's memory, its forward and backward pass, AdamW, and
// the training loop in main. -p bf16 multiplies bf16 operands as train_gpu's mixed precision does
// (doc/train_cpu.md). Under mpirun the run is data parallel, or split by -tp, -pp, -z
// (gpt2/train_parallel.h, doc/parallel.md).

#include "gpt2/model.h"
#include "gpt2/cpu_layers.h"
#include "gpt2/cpu_peak.h"
#include "gpt2/run.h"
#include "gpt2/train_parallel.h"
#include "gpt2/product_timer.h"

// ---------- the matrix products of this run ----------

// -p bf16: operands rounded to bf16 as the products read them, sums in float32; everything else
// stays float32 (doc/train_cpu.md, "Mixed precision").
static int bf16_products;

// out (B,T,OC) = inp (B,T,C) weight (OC,C)^T + bias
static void run_matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                               int C, int OC) {
    double t0 = product_timer_start();
    if (bf16_products) matmul_forward_bf16(out, inp, weight, bias, B, T, C, OC);
    else matmul_forward(out, inp, weight, bias, B, T, C, OC);
    product_timer_stop(0, B * T, C, OC, t0);
}

// dinp and dbias added to; dweight added to, or with set_dweight written (the first backward
// pass after gpt2_zero_grad, which leaves the matrices' gradients unzeroed)
static void run_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                const float* weight, int B, int T, int C, int OC, int set_dweight) {
    double t0 = product_timer_start();
    if (bf16_products && set_dweight) {
        matmul_backward_bf16_set_dweight(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
    } else if (bf16_products) {
        matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
    } else if (set_dweight) {
        matmul_backward_set_dweight(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
    } else {
        matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
    }
    product_timer_stop(1, B * T, C, OC, t0);
}

// ---------- the activations ----------

// gpt2/model.h's activation table (or, with grads, its gradients') without probs, which the
// fused classifier never stores, nor the logits' gradient, which overwrites the logits.
static void activation_sizes_cpu(size_t* sizes, const GPT2* model, int B, int T, int grads) {
    size_t layer[NUM_ACTIVATION_TENSORS];
    shard_activation_sizes(sizes, layer, model->config, model->shard, B, T);
    sizes[PROBS] = 0;
    if (grads) sizes[LOGITS] = 0;
}

// Floats of activation gradients for the largest batch the activations hold.
static size_t activation_grads_floats(const GPT2* model) {
    size_t sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_cpu(sizes, model, model->capacity_B, model->capacity_T, 1);
    return sum_sizes(sizes, NUM_ACTIVATION_TENSORS);
}

// Activations for num_slots batches of up to B x T, the inputs and targets, and before the last
// pipeline stage the gradient of its output; the activation gradients come with the first
// backward pass.
void gpt2_allocate_activations(GPT2* model, int B, int T) {
    free(model->acts_memory);
    free(model->grads_acts_memory);
    free(model->inputs);
    free(model->targets);
    free(model->pipe_grad);
    size_t slots = model->num_slots, BT = (size_t)B * T;
    model->capacity_B = B;
    model->capacity_T = T;
    activation_sizes_cpu(model->act_sizes, model, B, T, 0);
    model->num_activations = sum_sizes(model->act_sizes, NUM_ACTIVATION_TENSORS);
    model->acts_memory = (float*)calloc_huge_pages(slots * model->num_activations, sizeof(float));
    model->grads_acts_memory = NULL;
    model->inputs = (int*)malloc_check(slots * BT * sizeof(int));
    model->targets = (int*)malloc_check(slots * BT * sizeof(int));
    model->pipe_grad = model->shard.head ? NULL : (float*)calloc_check(BT * model->config.channels, sizeof(float));
    model->activation_bytes = (slots * model->num_activations + activation_grads_floats(model) +
                               (model->shard.head ? 0 : BT * model->config.channels)) * sizeof(float);
}

// Activation tensors (or their gradients) laid out in memory for B x T, within the allocation;
// returns the floats used.
static size_t layout_activations(ActivationTensors* a, float* memory, const GPT2* model, int B, int T, int grads) {
    size_t sizes[NUM_ACTIVATION_TENSORS];
    activation_sizes_cpu(sizes, model, B, T, grads);
    point_tensors((float**)a, memory, sizes, NUM_ACTIVATION_TENSORS);
    return sum_sizes(sizes, NUM_ACTIVATION_TENSORS);
}

// The activations of the model's current slot, laid out for B x T.
static void layout_slot(GPT2* model, int B, int T) {
    layout_activations(&model->acts, model->acts_memory + (size_t)model->slot * model->num_activations, model, B, T, 0);
}

// ---------- the forward pass ----------

// The forward pass of a batch of (B, T) token ids. With targets (else NULL) the mean loss goes to
// model->mean_loss and the logits are overwritten by its gradient, where the backward pass
// starts. A pipeline stage runs its layers from acts.encoded; under -tp the projections' partial
// sums are added over the group (tp_sum_floats).
void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    GPT2Config c = model->config;
    Shard s = model->shard;
    if (model->acts_memory == NULL || B > model->capacity_B || T > model->capacity_T) {
        gpt2_allocate_activations(model, B > model->capacity_B ? B : model->capacity_B,
                                  T > model->capacity_T ? T : model->capacity_T);
    }
    layout_slot(model, B, T);
    model->last_B = B;
    model->last_T = T;
    memcpy(gpt2_slot_inputs(model), inputs, (size_t)B * T * sizeof(int));
    int C = c.channels, NH = c.num_heads / s.tp, H = C / s.tp, Vp = c.padded_vocab_size;
    int BTC = B * T * C, tp_first = s.tp_rank == 0;  // the process that adds the biases and the residual
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    if (s.embed) encoder_forward(a.encoded, gpt2_slot_inputs(model), p.wte, p.wpe, B, T, C);
    const float* x = a.encoded;  // the residual stream entering layer l
    for (int l = 0; l < s.num_layers; l++) {
        ParameterTensors w = shard_parameters_of_layer(p, c, s, l);
        ActivationTensors al = shard_activations_of_layer(a, c, s, B, T, l);
        // attention: residual2 = x + attproj(attention(qkv(layernorm1(x))))
        layernorm_forward(al.ln1, al.ln1_mean, al.ln1_rstd, x, w.ln1w, w.ln1b, B, T, C);
        run_matmul_forward(al.qkv, al.ln1, w.qkvw, w.qkvb, B, T, C, 3 * H);
        attention_forward(al.atty, al.preatt, al.att, al.qkv, B, T, H, NH);
        if (tp_first) {
            run_matmul_forward(al.attproj, al.atty, w.attprojw, w.attprojb, B, T, H, C);
            residual_forward(al.residual2, x, al.attproj, BTC);
        } else {
            run_matmul_forward(al.residual2, al.atty, w.attprojw, NULL, B, T, H, C);
        }
        tp_sum_floats(al.residual2, BTC);
        // MLP: residual3 = residual2 + fcproj(gelu(fc(layernorm2(residual2))))
        layernorm_forward(al.ln2, al.ln2_mean, al.ln2_rstd, al.residual2, w.ln2w, w.ln2b, B, T, C);
        run_matmul_forward(al.fch, al.ln2, w.fcw, w.fcb, B, T, C, 4 * H);
        gelu_forward(al.fch_gelu, al.fch, B * T * 4 * H);
        if (tp_first) {
            run_matmul_forward(al.fcproj, al.fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * H, C);
            residual_forward(al.residual3, al.residual2, al.fcproj, BTC);
        } else {
            run_matmul_forward(al.residual3, al.fch_gelu, w.fcprojw, NULL, B, T, 4 * H, C);
        }
        tp_sum_floats(al.residual3, BTC);
        x = al.residual3;
    }
    model->mean_loss = -1.0f;
    if (!s.head) return;
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnfw, p.lnfb, B, T, C);
    run_matmul_forward(a.logits, a.lnf, p.wte, NULL, B, T, C, Vp);  // the output layer is tied to wte
    if (targets == NULL) return;
    int* slot_targets = gpt2_slot_targets(model);
    memcpy(slot_targets, targets, (size_t)B * T * sizeof(int));
    // the loss is the mean over the B*T positions: each position's loss has gradient 1/(B*T)
    crossentropy_softmax_fused(a.logits, a.losses, a.logits, slot_targets, 1.0f / (float)(B * T), B, T,
                               c.vocab_size, Vp);
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)B * T; i++) sum += a.losses[i];
    model->mean_loss = (float)(sum / ((double)B * T));
}

// ---------- the backward pass ----------

// memset on all threads, one large piece each: one thread fills memory at a fraction of its
// bandwidth, and glibc writes large blocks with non-temporal stores (doc/cpu_speed.md).
static void zero_floats(float* x, size_t n) {
    #pragma omp parallel
    {
        size_t start, end;
        thread_share(n, &start, &end);
        memset(x + start, 0, (end - start) * sizeof(float));
    }
}

// Whether the first backward pass after gpt2_zero_grad writes gradient k whole: the products'
// weights (wte's where the output layer's product runs before the embedding's backward).
static int written_by_first_backward(const GPT2* model, int k) {
    return k == QKVW || k == ATTPROJW || k == FCW || k == FCPROJW || (k == WTE && model->shard.head);
}

// A fresh start for the gradients: zeros in all but those the next backward pass writes whole
// (gpt2_backward with first = 1), which would be overwritten unread.
void gpt2_zero_grad(GPT2* model) {
    if (model->grads_memory == NULL) return;
    float* g = model->grads_memory;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (!written_by_first_backward(model, k)) zero_floats(g, model->param_sizes[k]);
        g += model->param_sizes[k];
    }
    zero_floats(g, model->num_padded - model->num_parameters);  // the padding
}

// The backward pass of the current slot's last forward pass (before the last stage, from
// pipe_grad): parameter gradients added to model->grads, but with first = 1 (the first pass
// after gpt2_zero_grad) the matrices' written. Activation gradients start at zero.
void gpt2_backward(GPT2* model, int first) {
    if (model->grads_memory == NULL) {
        model->grads_memory = (float*)calloc_huge_pages(model->num_padded, sizeof(float));
        point_tensors((float**)&model->grads, model->grads_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    }
    if (model->grads_acts_memory == NULL) {
        model->grads_acts_memory = (float*)calloc_huge_pages(activation_grads_floats(model), sizeof(float));
    }
    GPT2Config c = model->config;
    Shard s = model->shard;
    int B = model->last_B, T = model->last_T, C = c.channels, L = s.num_layers;
    int NH = c.num_heads / s.tp, H = C / s.tp, BTC = B * T * C;
    layout_slot(model, B, T);  // a pipeline runs other slots' forward passes in between
    size_t used = layout_activations(&model->grads_acts, model->grads_acts_memory, model, B, T, 1);
    zero_floats(model->grads_acts_memory, used);
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts, da = model->grads_acts;
    if (s.head) {
        da.logits = a.logits;  // the classifier left the loss's gradient there
        ActivationTensors last = shard_activations_of_layer(a, c, s, B, T, L - 1);
        ActivationTensors dlast = shard_activations_of_layer(da, c, s, B, T, L - 1);
        run_matmul_backward(da.lnf, g.wte, NULL, da.logits, a.lnf, p.wte, B, T, C, c.padded_vocab_size, first);
        layernorm_backward(dlast.residual3, g.lnfw, g.lnfb, da.lnf, last.residual3, p.lnfw, a.lnf_mean, a.lnf_rstd,
                           B, T, C);
    }
    for (int l = L - 1; l >= 0; l--) {
        ParameterTensors w = shard_parameters_of_layer(p, c, s, l), dw = shard_parameters_of_layer(g, c, s, l);
        ActivationTensors al = shard_activations_of_layer(a, c, s, B, T, l);
        ActivationTensors dl = shard_activations_of_layer(da, c, s, B, T, l);
        if (l == L - 1 && !s.head) dl.residual3 = model->pipe_grad;  // from the next stage
        // the block's input x and its gradient dx: the stage's input, or the layer below's output
        const float* x = l == 0 ? a.encoded : shard_activations_of_layer(a, c, s, B, T, l - 1).residual3;
        float* dx = l == 0 ? da.encoded : shard_activations_of_layer(da, c, s, B, T, l - 1).residual3;
        // MLP: residual3 = residual2 + fcproj(gelu(fc(layernorm2(residual2))))
        residual_backward(dl.residual2, dl.fcproj, dl.residual3, BTC);
        run_matmul_backward(dl.fch_gelu, dw.fcprojw, dw.fcprojb, dl.fcproj, al.fch_gelu, w.fcprojw, B, T, 4 * H, C, first);
        gelu_backward(dl.fch, al.fch, dl.fch_gelu, B * T * 4 * H);
        run_matmul_backward(dl.ln2, dw.fcw, dw.fcb, dl.fch, al.ln2, w.fcw, B, T, C, 4 * H, first);
        tp_sum_floats(dl.ln2, BTC);  // -tp: each process's part of the MLP gave part of it
        layernorm_backward(dl.residual2, dw.ln2w, dw.ln2b, dl.ln2, al.residual2, w.ln2w, al.ln2_mean, al.ln2_rstd,
                           B, T, C);
        // attention: residual2 = x + attproj(attention(qkv(layernorm1(x))))
        residual_backward(dx, dl.attproj, dl.residual2, BTC);
        run_matmul_backward(dl.atty, dw.attprojw, dw.attprojb, dl.attproj, al.atty, w.attprojw, B, T, H, C, first);
        attention_backward(dl.qkv, dl.preatt, dl.att, dl.atty, al.qkv, al.att, B, T, H, NH);
        run_matmul_backward(dl.ln1, dw.qkvw, dw.qkvb, dl.qkv, al.ln1, w.qkvw, B, T, C, 3 * H, first);
        tp_sum_floats(dl.ln1, BTC);
        layernorm_backward(dx, dw.ln1w, dw.ln1b, dl.ln1, x, w.ln1w, al.ln1_mean, al.ln1_rstd, B, T, C);
    }
    if (s.embed) encoder_backward(g.wte, g.wpe, da.encoded, gpt2_slot_inputs(model), B, T, C);
}

// ---------- the gradient norm and AdamW ----------

// Sum of squares in double, in chunks added in a fixed order: the same for any thread count.
static double sum_of_squares(const float* x, size_t n) {
    const size_t chunk = 1 << 16;
    long long num_chunks = (long long)((n + chunk - 1) / chunk);
    double* partial = (double*)malloc_check((size_t)(num_chunks > 0 ? num_chunks : 1) * sizeof(double));
    #pragma omp parallel for
    for (long long k = 0; k < num_chunks; k++) {
        size_t end = ((size_t)k + 1) * chunk < n ? ((size_t)k + 1) * chunk : n;
        // 32 running sums (i mod 32), which the compiler keeps in vector registers (4 of AVX-512's
        // 8 doubles): a single sum is a chain of dependent adds that cannot be vectorised (the
        // order is fixed), and one vector of 8 would still wait an add's latency every 8 floats,
        // slower than the memory delivers them; then the 32 added in a fixed tree
        double s[32] = {0.0};
        size_t i = (size_t)k * chunk;
        for (; i + 32 <= end; i += 32) {
            for (int j = 0; j < 32; j++) s[j] += (double)x[i + j] * x[i + j];
        }
        for (; i < end; i++) s[0] += (double)x[i] * x[i];
        for (int w = 16; w >= 1; w /= 2) {
            for (int j = 0; j < w; j++) s[j] += s[j + w];
        }
        partial[k] = s[0];
    }
    double total = 0.0;
    for (long long k = 0; k < num_chunks; k++) total += partial[k];
    free(partial);
    return total;
}

// The global L2 norm of the gradients times grad_scale: this process's ranges
// (gpt2/train_parallel.h), summed over the processes that hold the others.
static float gpt2_grad_norm(GPT2* model, float grad_scale) {
    size_t offset[NUM_PARAMETER_TENSORS], count[NUM_PARAMETER_TENSORS];
    int n = grad_norm_ranges(model, offset, count);
    double squares = 0.0;
    for (int r = 0; r < n; r++) squares += sum_of_squares(model->grads_memory + offset[r], count[r]);
    return grad_norm_of(squares, grad_scale);
}

// One AdamW step (t from 1; gpt2/arithmetic.h) on [opt_offset, opt_offset + opt_count), each
// gradient times grad_factor as it is read (the clip's factor, no pass of its own), weight
// decay on the matrices only.
void gpt2_update(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                 float grad_factor) {
    if (model->m_memory == NULL) {
        model->m_memory = (float*)calloc_huge_pages(model->opt_count, sizeof(float));
        model->v_memory = (float*)calloc_huge_pages(model->opt_count, sizeof(float));
    }
    AdamWStep s = adamw_step(lr, beta1, beta2, eps, t);
    size_t lo = model->opt_offset, hi = lo + model->opt_count, start = 0;
    float *p = model->params_memory, *g = model->grads_memory, *m = model->m_memory, *v = model->v_memory;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t end = start + model->param_sizes[k];
        size_t from = start > lo ? start : lo, to = end < hi ? end : hi;  // tensor k's part in the range
        start = end;
        float decay = PARAMETERS[k].decay ? 1.0f - lr * weight_decay : 1.0f;
        #pragma omp parallel for
        for (long long i = (long long)from; i < (long long)to; i++) {
            p[i] = adamw_update(p[i], g[i] * grad_factor, &m[i - lo], &v[i - lo], s, decay);
        }
    }
}

// ---------- the pipeline's exchanges ----------

// An exchange of the pipeline's schedule (gpt2/train_parallel.h) over MPI: with the stage
// before, the input's gradient and slot op.slot's input; after, its output and pipe_grad.
static void pipe_exchange(GPT2* model, PipeOp op, int B, int T) {
    if (!op.send && !op.recv) return;
    size_t bytes = (size_t)B * T * model->config.channels * sizeof(float);
    ActivationTensors a, da;  // op.slot's activations, the gradients
    if (op.slot >= 0) {
        layout_activations(&a, model->acts_memory + (size_t)op.slot * model->num_activations, model, B, T, 0);
    }
    layout_activations(&da, model->grads_acts_memory, model, B, T, 1);
    void *send = NULL, *recv = NULL;
    if (op.peer < 0) {
        if (op.send) send = da.encoded;
        if (op.recv) recv = a.encoded;
    } else {
        if (op.send) send = shard_activations_of_layer(a, model->config, model->shard, B, T, model->shard.num_layers - 1).residual3;
        if (op.recv) recv = model->pipe_grad;
    }
    parallel_exchange(send, recv, bytes, split.pp_rank + op.peer);
}

#ifndef TRAIN_CPU_NO_MAIN  // tests that call the model's functions define it

// ---------- validation and samples ----------

// The mean loss over the validation batches (gpt2/run.h: run_val_begin), printed.
static void validate(Run* run, GPT2* model, int step) {
    int passes = run_val_begin(run);
    double sum = 0.0;
    for (int i = 0; i < passes; i++) {
        dataloader_next_batch(&run->val);
        model->slot = 0;
        pipe_exchange(model, pipe_input(model, 0), run->val.B, run->val.T);
        gpt2_forward(model, run->val.inputs, run->val.targets, run->val.B, run->val.T);
        pipe_exchange(model, pipe_output(model, 0), run->val.B, run->val.T);
        sum += stage_loss(model);
    }
    run_val_report(run, step, sum, passes);
}

// A sample: each token one forward pass over the whole sequence so far, the plain way (infer.c
// keeps a key-value cache instead). A split model runs it through every process.
static void sample(Run* run, GPT2* model, int step) {
    int* tokens = (int*)malloc_check((size_t)run->cfg.T * sizeof(int));
    int n = run_sample_begin(run, &tokens[0], step);
    size_t Vp = (size_t)model->config.padded_vocab_size;
    for (int t = 1; t <= n; t++) {
        float coin = random_f32(&run->sample_rng);
        model->slot = 0;
        pipe_exchange(model, pipe_input(model, 0), 1, t);
        gpt2_forward(model, tokens, NULL, 1, t);
        pipe_exchange(model, pipe_output(model, 0), 1, t);
        tokens[t] = run_sample_next(run, model->shard.head ? model->acts.logits + (t - 1) * Vp : NULL, coin);
    }
    run_sample_end();
    free(tokens);
}

// ---------- main ----------

// -p: fp32 (the default) or bf16. Returns 1 for bf16.
static int choose_bf16(const char* precision) {
    if (precision == NULL || strcmp(precision, "fp32") == 0) return 0;
    if (strcmp(precision, "bf16") != 0) fail("-p expects fp32 or bf16, got %s", precision);
    return 1;
}

int main(int argc, char** argv) {
    parallel_init(&argc, &argv);  // started by mpirun: one rank of a data-parallel run
    rank0_first_begin();          // a bad option or input is reported once, by rank 0
    TrainConfig cfg = train_config_parse(argc, argv, train_config_defaults(0));
    bf16_products = choose_bf16(cfg.precision);
    rank0_first_end();
    char key[1024];
    train_config_key(&cfg, key, sizeof(key));
    parallel_check_same("options", key);
    product_timer_init();
    if (procs.rank == 0 && bf16_products) {
        printf("precision bf16 (float32 master weights): matrix products of bf16 weights and activations summed "
               "in float32, the rest float32; bf16 products: %s\n", cpu_bf16_arith());
    } else if (procs.rank == 0) {
        printf("precision fp32: float32 throughout\n");
    }
    // MFU's reference: this machine's peak in the products' precision, measured on every process
    // at once (processes that share the cores each get their share)
    const char* precision = bf16_products ? "bf16" : "fp32";
    cpu_peak_report(precision, procs.rank == 0);
    double peak = cpu_peak_of(precision);
    Run run;
    run_open(&run, cfg, NULL);     // the model (fresh, loaded or resumed), the data, -o DIR
    GPT2* model = run_part(&run);  // the whole model, or this process's part (gpt2/train_parallel.h)
    int B = cfg.micro_batch, T = cfg.T;
    gpt2_allocate_activations(model, B, T);
    run_print_summary(&run, model);
    if (cfg.val_every > 0 && run.start_step == 0) validate(&run, model, 0);
    PipeOp* ops = (PipeOp*)malloc_check((6 * (size_t)run.micro_steps + 2) * sizeof(PipeOp));
    int num_ops = pipe_schedule(ops, model, run.micro_steps);  // forward, backward, for each micro-step
    run.eta_start = now_seconds();
    for (int step = run.start_step + 1; step <= cfg.max_steps; step++) {
        double t0 = now_seconds();
        float lr = learning_rate_at(&cfg, step);
        parallel_step_begin();
        gpt2_zero_grad(model);
        double loss_sum = 0.0;
        for (int i = 0; i < num_ops; i++) {  // the micro-steps of B x T, their gradients added up
            PipeOp op = ops[i];
            if (op.action != PIPE_EXCHANGE) model->slot = op.slot;
            if (op.action == PIPE_EXCHANGE) {
                pipe_exchange(model, op, B, T);
            } else if (op.action == PIPE_FORWARD) {
                dataloader_next_batch(&run.train);
                gpt2_forward(model, run.train.inputs, run.train.targets, B, T);
                loss_sum += stage_loss(model);
            } else {
                gpt2_backward(model, op.micro == 0);
            }
        }
        if (procs.mpi) {  // every process gets the sum of the gradients and the losses
            double t1 = now_seconds();
            parallel_sum_gradients(model);
            loss_sum = parallel_group_sum(GROUP_WORLD, loss_sum);
            run.reduce_time = now_seconds() - t1;
        }
        // the gradient of the step's mean loss: the sum over micro-steps and replicas, divided
        int parts = run.micro_steps * split.dp;
        run.loss = (float)(loss_sum / parts);
        float norm = gpt2_grad_norm(model, 1.0f / (float)parts);
        check_step_finite(step, run.loss, norm);
        gpt2_update(model, lr, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, cfg.weight_decay, step,
                    clip_factor(norm, 1.0f / (float)parts, 1.0f));
        parallel_gather_params(model);  // ZeRO-1: every replica's updated part to every replica
        run_print_step(&run, model, step, norm, lr, now_seconds() - t0, peak);
        if (step == run.start_step + 1) run_print_parts(model);
        int due = run_due(&run, step);
        if (due & RUN_VALIDATE) validate(&run, model, step);
        if (due & RUN_SAMPLE) sample(&run, model, step);
        if ((due & RUN_SAVE) && run.split) run_gather(&run);  // the parts into rank 0's whole model
        if (due & RUN_SAVE) run_save(&run, step);
    }
    if (cfg.max_steps == 0 && cfg.output_dir != NULL) run_save(&run, 0);  // -x 0: the initial model
    run_print_average(&run, model, peak);
    if (procs.rank == 0) product_timer_print(peak);
    free(ops);
    run_close(&run);
    parallel_split_free();
    parallel_finalize();
    return 0;
}

#endif
