// ref_check.c: train_cpu.c's model functions against the PyTorch reference (dev/reference/gpt2_ref.py), in
// float32, on one batch.
//
// dev/reference/gpt2_ref.py builds the same GPT-2 from the same checkpoint and batch in PyTorch and writes
// a dump: logits, loss, every parameter gradient, the gradient norm, once computed in float32
// and once in float64 (its later fields, the losses and parameters after N AdamW steps, are not
// read here: the training program itself is checked by test/compare_run.py). This program runs
// train_cpu.c's own functions (included, not pasted) on the same files and compares with the
// float32 run, which is the gate; the float64 run is printed beside it so the reader sees that
// train_cpu.c is about as far from the exact answer as PyTorch itself.
//
// Tolerances (doc/correctness.md says why): for every tensor, elementwise
//     |x - ref| <= tol_elem * (|ref| + max|ref|)   ("elem": relative, floored at the tensor's scale)
// and ||x - ref|| / ||ref|| <= tol_norm            ("norm"). NaN never passes.
//
// Usage: ref_check model.bin tokens.bin ref.dump      exit 0 when all agree, 1 otherwise

#define TRAIN_CPU_NO_MAIN
#include "../train_cpu.c"

#include <math.h>

#define DUMP_MAGIC 20240901
#define DUMP_VERSION 1

#define TOL_LOGITS 1e-4      // the bound; float32 itself is ~1e-6 here
#define TOL_LOSS 1e-4        // relative, on the loss (the bound)
#define TOL_GRADS 1e-5       // float32 gradients are ~1e-6 off; a gradient 1.001x too big is 1e-3
#define TOL_GRAD_NORM 1e-5   // relative

// ---------- the dump written by dev/reference/gpt2_ref.py ----------

typedef struct {
    double* logits;       // (B, T, V)
    double loss;
    double grad_norm;     // before clipping
    double* grads;        // (P) the 16 tensors in file order
    double* step_losses;  // (steps + 1) the loss before each update, then after the last
    double* params;       // (P) after the last update
} RefRun;

typedef struct {
    int B, T, V, Vp, steps;
    size_t P;
    double lr, beta1, beta2, eps, weight_decay, max_norm;
    int* inputs;          // (B, T)
    int* targets;         // (B, T)
    RefRun run[2];        // PyTorch float32, float64
} RefDump;

static double* read_doubles(FILE* f, size_t n, const char* path) {
    double* x = (double*)malloc_check(n * sizeof(double));
    fread_check(x, sizeof(double), n, f, path);
    return x;
}

static void ref_dump_read(RefDump* d, const char* path) {
    FILE* f = fopen_check(path, "rb");
    int h[HEADER_INTS];
    fread_check(h, sizeof(int), HEADER_INTS, f, path);
    if (h[0] != DUMP_MAGIC || h[1] != DUMP_VERSION || h[8] != 2) {
        fail("%s is not a version %d reference dump; rerun dev/reference/gpt2_ref.py", path, DUMP_VERSION);
    }
    d->B = h[2]; d->T = h[3]; d->V = h[4]; d->Vp = h[5]; d->P = (size_t)h[6]; d->steps = h[7];
    double hp[6];
    fread_check(hp, sizeof(double), 6, f, path);
    d->lr = hp[0]; d->beta1 = hp[1]; d->beta2 = hp[2]; d->eps = hp[3];
    d->weight_decay = hp[4]; d->max_norm = hp[5];
    size_t BT = (size_t)d->B * d->T;
    d->inputs = (int*)malloc_check(BT * sizeof(int));
    d->targets = (int*)malloc_check(BT * sizeof(int));
    fread_check(d->inputs, sizeof(int), BT, f, path);
    fread_check(d->targets, sizeof(int), BT, f, path);
    for (int r = 0; r < 2; r++) {
        RefRun* run = &d->run[r];
        run->logits = read_doubles(f, BT * d->V, path);
        double lg[2];
        fread_check(lg, sizeof(double), 2, f, path);
        run->loss = lg[0];
        run->grad_norm = lg[1];
        run->grads = read_doubles(f, d->P, path);
        run->step_losses = read_doubles(f, (size_t)d->steps + 1, path);
        run->params = read_doubles(f, d->P, path);
    }
    fclose(f);
}

static void ref_dump_free(RefDump* d) {
    free(d->inputs);
    free(d->targets);
    for (int r = 0; r < 2; r++) {
        free(d->run[r].logits);
        free(d->run[r].grads);
        free(d->run[r].step_losses);
        free(d->run[r].params);
    }
}

// ---------- comparison ----------

typedef struct {
    double elem;   // max over elements of |x - ref| / (|ref| + max|ref|)
    double norm;   // ||x - ref|| / ||ref||
    double max_abs;
} Err;

// Errors of x against ref; a NaN or infinity in x makes every error infinite.
static Err errors_f(const float* x, const double* ref, size_t n) {
    double scale = 0.0, ref_sq = 0.0, diff_sq = 0.0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(ref[i]));
        ref_sq += ref[i] * ref[i];
    }
    Err e = {0.0, 0.0, 0.0};
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - ref[i]);
        if (!isfinite(x[i])) d = INFINITY;
        double denom = fabs(ref[i]) + scale;
        double elem = denom > 0.0 ? d / denom : (d > 0.0 ? INFINITY : 0.0);
        if (!(elem <= e.elem)) e.elem = elem;       // "!(<=)" lets NaN through as a failure
        if (!(d <= e.max_abs)) e.max_abs = d;
        diff_sq += d * d;
    }
    e.norm = ref_sq > 0.0 ? sqrt(diff_sq / ref_sq) : (diff_sq > 0.0 ? INFINITY : 0.0);
    return e;
}

static Err errors_d(const double* x, const double* ref, size_t n) {
    float* xf = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) xf[i] = (float)x[i];   // exact: x holds float32 values
    Err e = errors_f(xf, ref, n);
    free(xf);
    return e;
}

static int failures = 0;

// Compares one tensor with the float32 reference (the gate) and prints its errors against the
// float64 reference too, next to PyTorch float32's own error against float64.
static void check(const char* what, const float* x, const double* ref32, const double* ref64,
                  size_t n, double tol_elem, double tol_norm) {
    Err e32 = errors_f(x, ref32, n);
    Err e64 = errors_f(x, ref64, n);
    Err t64 = errors_d(ref32, ref64, n);
    int ok = e32.elem <= tol_elem && e32.norm <= tol_norm;
    if (!ok) failures++;
    printf("%-4s %-14s vs torch32: elem %.1e norm %.1e max|d| %.1e | vs float64: norm %.1e "
           "(torch32: %.1e)  tol %.0e/%.0e\n", ok ? "ok" : "FAIL", what, e32.elem, e32.norm,
           e32.max_abs, e64.norm, t64.norm, tol_elem, tol_norm);
}

static void check_scalar(const char* what, double x, double ref32, double ref64, double tol) {
    double d = fabs(x - ref32) / fabs(ref32);
    int ok = d <= tol;                                 // false for NaN
    if (!ok) failures++;
    printf("%-4s %-14s %.8f vs torch32 %.8f: rel %.1e | float64 %.8f  tol %.0e\n",
           ok ? "ok" : "FAIL", what, x, ref32, d, ref64, tol);
}

// ---------- main ----------

int main(int argc, char** argv) {
    if (argc != 4) {
        fail("usage: %s model.bin tokens.bin ref.dump  (dump from dev/reference/gpt2_ref.py)", argv[0]);
    }
    RefDump d;
    ref_dump_read(&d, argv[3]);
    GPT2 model;
    gpt2_build_from_file(&model, argv[1]);
    GPT2Config c = model.config;
    if (c.vocab_size != d.V || c.padded_vocab_size != d.Vp || model.num_parameters != d.P) {
        fail("%s and %s describe different models (V %d/%d, Vp %d/%d, P %zu/%zu)", argv[1], argv[3],
             c.vocab_size, d.V, c.padded_vocab_size, d.Vp, model.num_parameters, d.P);
    }
    int B = d.B, T = d.T, V = d.V, Vp = d.Vp;
    printf("model L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, batch B=%d T=%d (B*T=%d), max_norm %g\n",
           c.num_layers, c.num_heads, c.channels, V, Vp, c.max_seq_len, B, T, B * T, d.max_norm);

    // The data loader must hand out the same first batch as the reference took.
    DataLoader dl;
    dataloader_init(&dl, argv[2], B, T, 0, 1, 1, V, 0, 0);
    dataloader_next_batch(&dl);
    for (int i = 0; i < B * T; i++) {
        if (dl.inputs[i] != d.inputs[i] || dl.targets[i] != d.targets[i]) {
            printf("FAIL data loader: token %d is %d->%d, the reference has %d->%d\n", i,
                   dl.inputs[i], dl.targets[i], d.inputs[i], d.targets[i]);
            failures++;
            break;
        }
    }

    // One step of the model's own functions on the reference's batch: what only they expose
    // (the logits, every gradient, the norm before clipping). The training loop itself is
    // checked by running ./train_cpu against `dev/reference/gpt2_ref.py train` (test/compare_run.py).
    size_t BT = (size_t)B * T;
    float* logits = (float*)malloc_check(BT * V * sizeof(float));
    // logits: a forward pass without targets (with them, the logits become their gradient);
    // only the first V of the Vp columns are real
    gpt2_forward(&model, d.inputs, NULL, B, T);
    for (size_t bt = 0; bt < BT; bt++) memcpy(logits + bt * V, model.acts.logits + bt * Vp, V * sizeof(float));
    check("logits", logits, d.run[0].logits, d.run[1].logits, BT * V, TOL_LOGITS, TOL_LOGITS);
    gpt2_forward(&model, d.inputs, d.targets, B, T);
    // the padding columns of the logits' gradient must be exactly 0: they are wte's padding rows'
    int pad_ok = 1;
    for (size_t bt = 0; bt < BT; bt++) {
        for (int i = V; i < Vp; i++) pad_ok &= model.acts.logits[bt * Vp + i] == 0.0f;
    }
    if (!pad_ok) failures++;
    printf("%-4s the logits' gradient in padding columns %d..%d is 0\n", pad_ok ? "ok" : "FAIL", V, Vp - 1);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1);
    check_scalar("loss", model.mean_loss, d.run[0].loss, d.run[1].loss, TOL_LOSS);
    size_t off = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        char name[32];
        snprintf(name, sizeof(name), "grad %s", PARAMETERS[t].name);
        check(name, model.grads_memory + off, d.run[0].grads + off, d.run[1].grads + off,
              model.param_sizes[t], TOL_GRADS, TOL_GRADS);
        off += model.param_sizes[t];
    }
    float norm = gpt2_grad_norm(&model, 1.0f);  // as train_cpu's loop computes it
    check_scalar("grad norm", norm, d.run[0].grad_norm, d.run[1].grad_norm, TOL_GRAD_NORM);

    // the fused classifier (what gpt2_forward runs) against the three functions it fuses, on the
    // same logits: the same gradient bit for bit, the same losses to float32 rounding
    gpt2_forward(&model, d.inputs, NULL, B, T);
    size_t n = BT * Vp;
    float* probs = (float*)malloc_check(n * sizeof(float));
    float* dlogits = (float*)calloc_check(n, sizeof(float));
    float* fused = (float*)malloc_check(n * sizeof(float));
    float* losses = (float*)malloc_check(BT * sizeof(float));
    float* fused_losses = (float*)malloc_check(BT * sizeof(float));
    float* dlosses = (float*)malloc_check(BT * sizeof(float));
    for (size_t i = 0; i < BT; i++) dlosses[i] = 1.0f / (float)BT;
    softmax_forward(probs, model.acts.logits, B, T, V, Vp);
    crossentropy_forward(losses, probs, d.targets, B, T, Vp);
    crossentropy_softmax_backward(dlogits, dlosses, probs, d.targets, B, T, V, Vp);
    crossentropy_softmax_fused(fused, fused_losses, model.acts.logits, d.targets, 1.0f / (float)BT, B, T, V, Vp);
    int same = 1;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) same &= fused[i] == dlogits[i];
    for (size_t i = 0; i < BT; i++) worst = fmax(worst, fabs(fused_losses[i] - losses[i]) / fabs(losses[i]));
    int fused_ok = same && worst < 1e-6;
    if (!fused_ok) failures++;
    printf("%-4s fused classifier: dlogits %s the unfused ones, losses within %.1e relative\n", fused_ok ? "ok" : "FAIL",
           same ? "bit for bit" : "differ from", worst);
    free(probs); free(dlogits); free(fused); free(losses); free(fused_losses); free(dlosses);

    free(logits);
    dataloader_free(&dl);
    gpt2_free(&model);
    ref_dump_free(&d);
    if (failures > 0) {
        printf("FAIL: %d checks out of tolerance\n", failures);
        return 1;
    }
    printf("all checks within tolerance\n");
    return 0;
}
