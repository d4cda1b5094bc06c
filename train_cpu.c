// train_cpu.c: GPT-2 training on the CPU, in plain C with OpenMP. The reference: train_gpu.cu and
// infer.c are checked against it, and it is checked against PyTorch (doc/correctness.md).
//
//   make train_cpu && ./train_cpu        a small GPT-2 from scratch on Tiny Shakespeare
//   ./train_cpu -h                       every option
//
// The lesson is in four files, read in this order:
//   gpt2/cpu_layers.h  the layers, each a forward and a backward function (infer.c runs the
//                      forward ones too, which is why they are not in this file);
//   gpt2/model.h       the model's tensors, and the forward and backward pass as calls to layers;
//   this file          the model on the CPU: its memory, the loss and where backpropagation
//                      starts, the gradient clipping, AdamW;
//   gpt2/run.h         the training loop that runs them, shared with train_gpu.cu.
// Under `mpirun -np N` it trains data parallel, each process on its part of every batch, the
// gradients summed with MPI; with -tp, -pp and -z 1 the model and its optimizer are split over
// the processes too (gpt2/parallel.h, doc/parallel.md).
// Build with `make MATMUL=naive` to run every matrix product on the plain loops that define it.
// With -p bf16 the matrix products take bf16 operands, as train_gpu's mixed precision does
// (choose_layers below); everything else stays float32.

#include "gpt2/model.h"
#include "gpt2/cpu_layers.h"
#include "gpt2/cpu_peak.h"
#include "gpt2/run.h"

// ---------- the model on the CPU ----------

// The CPU's layers, for the forward and backward pass of gpt2/model.h: the plain ones, no fusion.
static const Layers LAYERS_CPU = {
    .encoder_fwd = encoder_forward, .encoder_bwd = encoder_backward,
    .layernorm_fwd = layernorm_forward, .layernorm_bwd = layernorm_backward,
    .matmul_fwd = matmul_forward, .matmul_bwd = matmul_backward,
    .attention_fwd = attention_forward, .attention_bwd = attention_backward,
    .gelu_fwd = gelu_forward, .gelu_bwd = gelu_backward,
    .residual_fwd = residual_forward, .residual_bwd = residual_backward,
};

// The tensor-parallel group of a run split by -tp (gpt2/parallel.h): its sum is MPI's all-reduce
// over the group, on host memory. NULL without -tp: the blocks run whole.
static void tensor_group_sum(float* x, size_t n) { parallel_group_sum_floats(GROUP_TP, x, n); }
static const TensorGroup* tensor_group(void) {
    static TensorGroup group;
    if (split.tp == 1) return NULL;
    group.size = split.tp;
    group.rank = split.tp_rank;
    group.sum = tensor_group_sum;
    return &group;
}

// -p bf16: mixed precision as train_gpu -p bf16 does it (doc/gpu.md, "Mixed precision"), so
// that the two can be read side by side. The matrix products read bf16 weights and bf16
// activations (in the backward, bf16 output gradients too), multiply them exactly and add in
// float32 (matmul_forward_bf16, matmul_backward_bf16: gpt2/cpu_layers.h, gpt2/cpu_bf16.h). What
// must keep its digits stays float32, as on the GPU: the master weights, their gradients, AdamW's
// moments, layernorm, softmax, attention, GELU, the residual adds, the loss and every sum.
// Two differences from the GPU, neither of which changes what a product reads:
// - The bf16 copy of the weights. train_gpu keeps one and rewrites it after every AdamW step.
//   Here each product rounds the float32 master weights to bf16 (to nearest) as it packs them
//   for its GEMM, which it does anyway: the values such a copy would hold, at a cost of one
//   rounding per weight per product (the product itself costs B*T multiply-adds per weight),
//   and no second array to keep in step with the master copy, to gather under ZeRO-1 or to
//   rebuild on resume.
// - The activations. train_gpu stores them, their gradients and the residual stream in bf16,
//   which halves the bytes its kernels stream through GPU memory. Here they are stored in float32
//   and rounded as a product reads them: at a product's input that is exactly what a bf16 copy
//   would hold. A CPU gains little from storing them narrower: the products copy their operands
//   into packed tiles anyway and round them there; of the layers between them, those that stream
//   activations (layernorm, GELU, the residual adds) are a small part of a step, and attention is
//   bound by its arithmetic, not by the bytes of qkv. So those layers read float32 here where the
//   GPU's read bf16, and the two bf16 paths agree within bf16's rounding, not bit for bit.
//
// The layers of this run's forward and backward passes: LAYERS_CPU, or for -p bf16 (main calls
// choose_layers) layers_cpu_bf16, a copy of it with the two matmul entries in bf16, every other
// layer the float32 path's own function. The first backward pass after gpt2_zero_grad runs
// layers_first, the same layers but for the products' backward, which write their weights'
// gradients instead of adding to them (matmul_backward_first): the bits of adding to zeros,
// without zeroing those gradients first or reading them back from memory.
static Layers layers_cpu_bf16, layers_first;
static const Layers* cpu_layers = &LAYERS_CPU;

// ---------- GPT2_TIME_PRODUCTS=1: every matrix product timed inside the steps ----------
// How fast each product runs where it counts, inside a step: its weight and its activations come
// from memory, after the other layers, which dev/bench/bench_matmul's warm loops do not show.
// The layer table's two matmul entries go through timers that read the clock around the same
// calls (nothing else changes: the same bits), and at the end train_cpu prints one line per shape
// (rows x C -> OC) and pass (forward; backward: dinp, dW and the bias gradient together): its
// calls, the median call's time, GFLOP/s and share of the MFU peak. The median leaves the first
// step's page faults out. The first TIMED_CALLS calls of each shape and pass are kept, of the first
// TIMED_SHAPES shapes; those of forward passes only (samples, validation batches of other sizes)
// are counted, not listed.
#define TIMED_SHAPES 32
#define TIMED_CALLS 2048
typedef struct {
    int rows, C, OC;
    long calls[2];                   // forward, backward
    float ms[2][TIMED_CALLS];        // the first TIMED_CALLS of them
} TimedShape;
static TimedShape* timed_shapes;     // NULL: not timing
static int timed_count;
static double timed_seconds;
static Layers layers_timed;
static void (*timed_fwd_inner)(float*, const float*, const float*, const float*, int, int, int, int);
static void (*timed_bwd_inner)(float*, float*, float*, const float*, const float*, const float*, int, int, int, int);
static void (*timed_bwd_first_inner)(float*, float*, float*, const float*, const float*, const float*, int, int, int, int);

static void timed_record(int pass, int rows, int C, int OC, double t0) {
    double t1 = now_seconds();
    timed_seconds += t1 - t0;
    int i = 0;
    while (i < timed_count && !(timed_shapes[i].rows == rows && timed_shapes[i].C == C && timed_shapes[i].OC == OC)) i++;
    if (i == timed_count) {
        if (timed_count == TIMED_SHAPES) return;
        timed_shapes[timed_count++] = (TimedShape){.rows = rows, .C = C, .OC = OC};
    }
    TimedShape* s = &timed_shapes[i];
    if (s->calls[pass] < TIMED_CALLS) s->ms[pass][s->calls[pass]] = (float)(1e3 * (t1 - t0));
    s->calls[pass]++;
}
static void timed_fwd(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC) {
    double t0 = now_seconds();
    timed_fwd_inner(out, inp, weight, bias, B, T, C, OC);
    timed_record(0, B * T, C, OC, t0);
}
static void timed_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                      const float* weight, int B, int T, int C, int OC) {
    double t0 = now_seconds();
    timed_bwd_inner(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
    timed_record(1, B * T, C, OC, t0);
}
static void timed_bwd_first(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int B, int T, int C, int OC) {
    double t0 = now_seconds();
    timed_bwd_first_inner(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
    timed_record(1, B * T, C, OC, t0);
}
static int compare_floats(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}
// The table, against `peak` FLOP/s (the MFU reference)
static void print_product_times(double peak) {
    printf("products timed (GPT2_TIME_PRODUCTS=1), against the peak of %.1f GFLOP/s:\n", peak * 1e-9);
    printf("%-22s %-8s %6s %12s %9s %10s\n", "shape rows x C -> OC", "pass", "calls", "median ms", "GFLOP/s", "% of peak");
    double at_medians = 0.0;
    int forward_only = 0;
    for (int i = 0; i < timed_count; i++) {
        TimedShape* s = &timed_shapes[i];
        if (s->calls[1] == 0) {  // a sample's or a validation batch's own size: not a training product
            forward_only++;
            continue;
        }
        for (int pass = 0; pass < 2; pass++) {
            long calls = s->calls[pass];
            int n = calls < TIMED_CALLS ? (int)calls : TIMED_CALLS;
            if (n == 0) continue;
            qsort(s->ms[pass], n, sizeof(float), compare_floats);
            double ms = s->ms[pass][(n - 1) / 2];
            at_medians += 1e-3 * ms * calls;
            double gflops = (pass == 0 ? 2.0 : 4.0) * s->rows * s->C * s->OC / (ms * 1e-3) * 1e-9;
            char shape[64];
            snprintf(shape, sizeof shape, "%d x %d -> %d", s->rows, s->C, s->OC);
            printf("%-22s %-8s %6ld %12.3f %9.1f %9.1f%%\n", shape, pass == 0 ? "forward" : "backward", calls, ms, gflops,
                   100.0 * gflops * 1e9 / peak);
        }
    }
    if (forward_only > 0) printf("(and %d%s shapes of forward passes only, samples' and validation's: not listed)\n",
                                 forward_only, timed_count == TIMED_SHAPES ? " or more" : "");
    printf("all products: %.2f s, the listed ones %.2f s at their medians (the rest: the first step's page faults,\n"
           "other outliers, the forward-only ones)\n", timed_seconds, at_medians);
}

static inline void choose_layers(int bf16) {
    layers_cpu_bf16 = LAYERS_CPU;
    layers_cpu_bf16.matmul_fwd = matmul_forward_bf16;
    layers_cpu_bf16.matmul_bwd = matmul_backward_bf16;
    cpu_layers = bf16 ? &layers_cpu_bf16 : &LAYERS_CPU;
    layers_first = *cpu_layers;
    layers_first.matmul_bwd = bf16 ? matmul_backward_bf16_first : matmul_backward_first;
    const char* timing = getenv("GPT2_TIME_PRODUCTS");
    if (timing != NULL && strcmp(timing, "0") != 0 && strcmp(timing, "") != 0) {
        if (timed_shapes == NULL) timed_shapes = (TimedShape*)calloc_check(TIMED_SHAPES, sizeof(TimedShape));
        timed_fwd_inner = cpu_layers->matmul_fwd;
        timed_bwd_inner = cpu_layers->matmul_bwd;
        timed_bwd_first_inner = layers_first.matmul_bwd;
        layers_timed = *cpu_layers;
        layers_timed.matmul_fwd = timed_fwd;
        layers_timed.matmul_bwd = timed_bwd;
        layers_first.matmul_fwd = timed_fwd;
        layers_first.matmul_bwd = timed_bwd_first;
        cpu_layers = &layers_timed;
    }
}

// The layers of a backward pass: layers_first for the first after gpt2_zero_grad.
static const Layers* backward_layers(const GPT2* model) {
    if (!model->grads_fresh) return cpu_layers;
    if (layers_first.matmul_bwd == NULL) choose_layers(cpu_layers == &layers_cpu_bf16);  // not chosen yet
    return &layers_first;
}

// The activation table of gpt2/model.h (or of their gradients, with grads) as this file keeps
// it: without probs, which the classifier never stores (gpt2_forward below), and without the
// logits' gradient, which the classifier writes over the logits themselves, as train_gpu's does.
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

// Allocates activations for batches of up to B x T, num_slots of them (a pipeline stage keeps
// several batches' at once), their gradients (for one, on the first backward pass), the model's
// copy of the inputs and targets, and on a pipeline stage before the last, the gradient of its
// output that the next stage sends.
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

// Points a group of activation tensors (or, with grads, their gradients) into memory, laid out
// for a batch of B x T (which fits the allocation: a sample of batch 1 runs through the same
// buffers as training batches). Returns how many floats of memory the layout uses.
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

// The forward pass of a batch: inputs and targets are (B, T) token ids; targets may be NULL
// (then no loss is computed). The mean loss over the B*T positions goes to model->mean_loss, and
// the logits are then overwritten by the gradient of that loss over them, where the backward
// pass starts (as train_gpu does: the probabilities are never stored; for the logits themselves,
// run without targets). On a pipeline stage, the stage's part, from the input in acts.encoded of
// the current slot; only the last stage computes the loss.
void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    GPT2Config c = model->config;
    if (model->acts_memory == NULL || B > model->capacity_B || T > model->capacity_T) {
        gpt2_allocate_activations(model, B > model->capacity_B ? B : model->capacity_B,
                                  T > model->capacity_T ? T : model->capacity_T);
    }
    layout_slot(model, B, T);
    model->last_B = B;
    model->last_T = T;
    memcpy(gpt2_slot_inputs(model), inputs, (size_t)B * T * sizeof(int));
    gpt2_forward_layers(cpu_layers, model, tensor_group());
    model->mean_loss = -1.0f;
    if (!model->shard.head || targets == NULL) return;
    ActivationTensors a = model->acts;
    int* slot_targets = gpt2_slot_targets(model);
    memcpy(slot_targets, targets, (size_t)B * T * sizeof(int));
    // the loss is the mean over the B*T positions: each position's loss has gradient 1/(B*T)
    crossentropy_softmax_fused(a.logits, a.losses, a.logits, slot_targets, 1.0f / (float)(B * T), B, T,
                               c.vocab_size, c.padded_vocab_size);
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)B * T; i++) sum += a.losses[i];
    model->mean_loss = (float)(sum / ((double)B * T));
}

// memset on all threads, one piece each: one thread alone fills memory at a fraction of its
// bandwidth. The pieces are as large as they can be, as glibc's memset writes a large block
// with non-temporal stores, which do not read each line before writing it (in pieces of 256 KB
// the d12 step's zeroing took 2.7 times as long).
static void zero_floats(float* x, size_t n) {
    #pragma omp parallel
    {
        size_t start, end;
        thread_share(n, &start, &end);
        memset(x + start, 0, (end - start) * sizeof(float));
    }
}

// Whether the first backward pass after gpt2_zero_grad writes the whole of parameter gradient k
// itself: the products' weights, whose gradients matmul_backward_first writes (wte's where this
// process has the output layer, whose product comes before the embedding's backward adds to it).
static int written_by_first_backward(const GPT2* model, int k) {
    return k == QKVW || k == ATTPROJW || k == FCW || k == FCPROJW || (k == WTE && model->shard.head);
}

// A fresh start for the gradients: zeros in all but those the next backward pass writes whole,
// which would be overwritten unread (85% of them for d12: 0.4 GB not written).
void gpt2_zero_grad(GPT2* model) {
    if (model->grads_memory != NULL) {
        float* g = model->grads_memory;
        for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
            if (!written_by_first_backward(model, k)) zero_floats(g, model->param_sizes[k]);
            g += model->param_sizes[k];
        }
        zero_floats(g, model->num_padded - model->num_parameters);   // the padding
    }
    model->grads_factor = 0.0f;
    model->grads_fresh = 1;
}

// The backward pass of the current slot's last forward pass, which had targets (or, on a
// pipeline stage before the last, whose output's gradient is in pipe_grad). Parameter gradients
// accumulate into model->grads: call gpt2_zero_grad first for a fresh step.
void gpt2_backward(GPT2* model) {
    if (model->grads_memory == NULL) {
        model->grads_memory = (float*)calloc_huge_pages(model->num_padded, sizeof(float));
        point_tensors((float**)&model->grads, model->grads_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
        model->grads_fresh = 1;
    }
    if (model->grads_acts_memory == NULL) {
        model->grads_acts_memory = (float*)calloc_huge_pages(activation_grads_floats(model), sizeof(float));
    }
    int B = model->last_B, T = model->last_T;
    layout_slot(model, B, T);  // a pipeline runs other slots' forward passes in between
    // the activation gradients accumulate too: they start from zero at every pass
    size_t used = layout_activations(&model->grads_acts, model->grads_acts_memory, model, B, T, 1);
    zero_floats(model->grads_acts_memory, used);
    // the gradient of the loss over the logits: where the forward pass's classifier left it
    if (model->shard.head) model->grads_acts.logits = model->acts.logits;
    gpt2_backward_layers(backward_layers(model), model, tensor_group());
    model->grads_fresh = 0;
}

// Sum of squares of n floats in double, in fixed-size chunks added in a fixed order: the same
// result for any thread count.
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

static double gpt2_grad_squares(GPT2* model, size_t offset, size_t n) {
    return sum_of_squares(model->grads_memory + offset, n);
}

static void gpt2_scale_grads(GPT2* model, size_t offset, size_t n, float factor) {
    float* g = model->grads_memory + offset;
    #pragma omp parallel for
    for (long long i = 0; i < (long long)n; i++) g[i] *= factor;
}

// The training loop's clip (gpt2/run.h) scales the gradients of the parameters this process
// updates, right before the update: rather than a pass over the gradients of its own (a read and
// a write of every one), the factor waits in grads_factor and gpt2_update multiplies each
// gradient by it as it reads it: the same product, the same bits, one pass less.
static void gpt2_scale_grads_at_update(GPT2* model, size_t offset, size_t n, float factor) {
    if (offset != model->opt_offset || n != model->opt_count || model->grads_factor != 0.0f) {
        gpt2_scale_grads(model, offset, n, factor);   // not what the update reads: scale now
        return;
    }
    model->grads_factor = factor;
}

// Scales the gradients of a whole model by grad_scale (1 / the micro-steps and processes they
// were summed over), then so that their global L2 norm is at most max_norm, as PyTorch's
// clip_grad_norm_ does (coefficient max_norm / (norm + 1e-6), applied only when below 1), in one
// pass. Returns the norm after the scale, before clipping. (gpt2/run.h's run_step does the same
// for a model split over processes, whose norm is summed over them.)
float gpt2_clip_gradients(GPT2* model, float grad_scale, float max_norm) {
    float norm = (float)(grad_scale * sqrt(gpt2_grad_squares(model, 0, model->num_parameters)));
    float factor = clip_factor(norm, grad_scale, max_norm);
    if (factor != 1.0f) gpt2_scale_grads(model, 0, model->num_parameters, factor);
    return norm;
}

// One AdamW step (t counts from 1), adamw_update (gpt2/arithmetic.h) on the parameters
// [opt_offset, opt_offset + opt_count) (all of them, but under ZeRO-1), with weight decay only
// on the matrices (PARAMETERS[k].decay). m and v hold the moments of those parameters.
void gpt2_update(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
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
        if (model->grads_factor != 0.0f) {   // the clip's factor, not yet applied (above)
            float f = model->grads_factor;
            #pragma omp parallel for
            for (long long i = (long long)from; i < (long long)to; i++) {
                p[i] = adamw_update(p[i], g[i] * f, &m[i - lo], &v[i - lo], s, decay);
            }
        } else {
            #pragma omp parallel for
            for (long long i = (long long)from; i < (long long)to; i++) {
                p[i] = adamw_update(p[i], g[i], &m[i - lo], &v[i - lo], s, decay);
            }
        }
    }
    model->grads_factor = 0.0f;
}

static void gpt2_logits_to_host(const GPT2* model, int position, float* out) {
    size_t Vp = (size_t)model->config.padded_vocab_size;
    memcpy(out, model->acts.logits + (size_t)position * Vp, Vp * sizeof(float));
}

// A pipeline stage's buffer of slot `slot` (gpt2/run.h: STAGE_IN ...), in host memory.
static void* gpt2_stage_buffer(GPT2* model, int which, int slot, int B, int T, size_t* bytes) {
    *bytes = (size_t)B * T * model->config.channels * sizeof(float);
    ActivationTensors a;
    if (which == STAGE_DOUT) return model->pipe_grad;
    if (which == STAGE_DIN) {
        layout_activations(&a, model->grads_acts_memory, model, B, T, 1);
        return a.encoded;
    }
    layout_activations(&a, model->acts_memory + (size_t)slot * model->num_activations, model, B, T, 0);
    if (which == STAGE_IN) return a.encoded;
    return shard_activations_of_layer(a, model->config, model->shard, B, T, model->shard.num_layers - 1).residual3;
}

// MFU's reference: this machine's peak in the precision of the matrix products (-p), measured
// once (gpt2/cpu_peak.h).
static const char* peak_precision = "fp32";
static double peak_flops_cpu(void) { return cpu_peak_of(peak_precision); }

// The model's training operations for gpt2/run.h's loop; the model is the run's host model (or
// this process's part of it), and MPI moves its host arrays between processes.
static const Trainer TRAINER_CPU = {
    gpt2_forward, gpt2_zero_grad, gpt2_backward, gpt2_grad_squares, gpt2_scale_grads_at_update, gpt2_update,
    gpt2_logits_to_host, NULL, NULL, peak_flops_cpu, NULL, NULL,  // samples: the whole sequence rerun per token
    parallel_group_sum_floats, parallel_reduce_scatter_floats, parallel_all_gather_floats, parallel_exchange,
    gpt2_stage_buffer, NULL,
};

// ---------- main ----------
#ifndef TRAIN_CPU_NO_MAIN  // tests and dev programs that call the functions above define it

// -p: fp32 (the default) or bf16. Returns 1 for bf16.
static int choose_bf16(const char* precision) {
    if (precision == NULL || strcmp(precision, "fp32") == 0) return 0;
    if (strcmp(precision, "bf16") != 0) fail("-p expects fp32 or bf16, got %s", precision);
    return 1;
}

// The header line of the precision, as train_gpu prints its own.
static void print_precision(int bf16) {
    if (bf16) {
        printf("precision bf16 (float32 master weights): matrix products of bf16 weights and activations summed "
               "in float32, the rest float32; bf16 products: %s\n", cpu_bf16_arith());
    } else {
        printf("precision fp32: float32 throughout\n");
    }
}

int main(int argc, char** argv) {
    parallel_init(&argc, &argv);  // started by mpirun: one rank of a data-parallel run
    rank0_first_begin();          // a bad option or input is reported once, by rank 0
    TrainConfig cfg = train_config_parse(argc, argv, train_config_defaults(0));
    int bf16 = choose_bf16(cfg.precision);
    rank0_first_end();
    char key[1024];
    train_config_key(&cfg, key, sizeof(key));
    parallel_check_same("options", key);
    choose_layers(bf16);
    if (procs.rank == 0) print_precision(bf16);
    // the peak MFU counts against, that of the precision in use, measured on every process at
    // once (processes that share the cores each get their share) and said in the header line
    peak_precision = bf16 ? "bf16" : "fp32";
    cpu_peak_report(peak_precision, procs.rank == 0);
    Run run;
    run_open(&run, cfg, NULL);  // the model (fresh, loaded or resumed), the data, -o DIR
    GPT2* model = run_part(&run);  // trained where it is, in host memory: the whole, or this process's part
    gpt2_allocate_activations(model, cfg.micro_batch, cfg.T);
    run_train(&run, &TRAINER_CPU, model);
    if (timed_shapes != NULL && procs.rank == 0) print_product_times(peak_flops_cpu());
    run_close(&run);
    parallel_split_free();
    parallel_finalize();
    return 0;
}

#endif
