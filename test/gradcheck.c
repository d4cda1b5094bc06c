// gradcheck.c: every layer's backward (gpt2/cpu_layers.h) and the whole model's (gpt2/model.h,
// train_cpu.c) against finite differences, in double.
//
// Independent of PyTorch: for a layer with output out = f(inputs, weights), take the scalar
//     L = sum_i w_i * out_i        (w random, fixed)
// whose gradient the layer's backward computes when handed dout = w. Each input and weight
// element x is nudged both ways and the central difference (L(x+h) - L(x-h)) / 2h is compared
// with the backward's value. Then the same for the whole model's loss, at a sample of the
// parameters of each of the 16 tensors.
//
// Why double: in float32 a finite difference loses half the digits (rounding error eps/h against
// truncation error h^2), so it could only catch gross mistakes. In double the two agree to ~1e-8,
// so an error of 1e-6 relative (a wrong constant, a missed term) shows.
//
// How, without a second copy of the layers: the layers and the model are written once, in float.
// This file compiles them again in double: it first includes every system header they use (their
// include guards then make the code's own includes no-ops, so the define below cannot reach them),
// then `#define float double` and maps the float math functions (sqrtf, ...) to their double
// versions, then includes train_cpu.c and with it the headers (the fast matmul in its plain-C
// build, see below). The compiled code is theirs, token for token, with every float a double.
//
// Usage: gradcheck         exit 0 when every gradient agrees, 1 otherwise

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <float.h>
#include <time.h>
#include <ctype.h>
#include <assert.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// The checkpoint loaders reinterpret 16- and 32-bit patterns as float; in double they would be
// wrong (and GCC says so), but this program never calls them.
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#define float double
#define sqrtf sqrt
#define expf exp
#define logf log
#define tanhf tanh
#define TANH_FAST tanh   // gpt2/cpu_math.h's tanh_vec and exp_vec work on float bits (test_matmul
#define EXP_FAST exp     // checks them)
#define coshf cosh
#define fabsf fabs
#define fmaf fma     // the plain-C GEMM kernel's fused multiply-add (gpt2/cpu_math.h: MM_FMA)
#define powf pow
#define fmaxf fmax
#define fminf fmin
#define cosf cos
#define sinf sin
// The fast matmul's vector kernels assume 4-byte floats (vector widths, lane counts, shuffles);
// its plain-C build runs the same blocked, packed, threaded code one element at a time, which
// compiles in double unchanged. (test/test_matmul.sh checks the vector kernels against it.)
#define MATMUL_PLAIN_C
#define TRAIN_CPU_NO_MAIN
#include "../train_cpu.c"
#undef float

#define H 1e-5            // finite-difference step; inputs are O(1)
#define TOL 1e-6          // |fd - analytic| <= TOL * (|analytic| + max|analytic| of the tensor)

// ---------- a layer under test ----------

#define MAX_INPUTS 4

typedef struct LayerCase_ {
    const char* name;
    int B, T, C, OC, NH, V, Vp;
    int* tokens;                   // (B, T) encoder inputs
    int* targets;                  // (B, T) crossentropy targets
    int nin;                       // the differentiable inputs and weights:
    const char* in_name[MAX_INPUTS];
    double* in[MAX_INPUTS];
    double* din[MAX_INPUTS];
    size_t n_in[MAX_INPUTS];
    double* out;                   // the output, and the weights w of L = sum w_i out_i
    double* w;
    size_t n_out;
    double* saved[2];              // what forward saves for backward (mean/rstd, preatt/att, probs)
    double* scratch[2];            // backward's scratch gradients (dpreatt, datt)
    size_t n_saved[2], n_scratch[2];
    void (*forward)(struct LayerCase_*);
    void (*backward)(struct LayerCase_*);
} LayerCase;

static uint64_t rng_state = 1234;

static double uniform(void) {   // in [-1, 1), from gpt2/random.h's generator
    return 2.0 * random_f32(&rng_state) - 1.0;
}

static double* rand_array(size_t n) {
    double* x = (double*)malloc_check(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = uniform();
    return x;
}

static double* zero_array(size_t n) {
    return (double*)calloc_check(n, sizeof(double));
}

static double dot(const double* a, const double* b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// ---------- the check ----------

static int failures = 0;

// Compares an analytic gradient with its finite differences; prints one line, counts a failure.
static void compare(const char* layer, const char* name, const double* analytic,
                    const double* fd, size_t n) {
    double scale = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(analytic[i]));
    double worst = 0.0, max_abs = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(fd[i] - analytic[i]);
        double denom = fabs(analytic[i]) + scale;
        double e = denom > 0.0 ? d / denom : (d > 0.0 ? INFINITY : 0.0);
        if (!(e <= worst)) worst = e;                 // "!(<=)" keeps a NaN as a failure
        if (!(d <= max_abs)) max_abs = d;
    }
    int ok = worst <= TOL && scale > 0.0;            // an all-zero gradient checks nothing
    if (!ok) failures++;
    printf("%-4s %-26s d%-8s n=%-5zu max|grad| %.2e  max|fd-grad| %.2e  rel %.1e\n",
           ok ? "ok" : "FAIL", layer, name, n, scale, max_abs, worst);
}

static void check_layer(LayerCase* lc) {
    // analytic: forward, then backward with dout = w into zeroed gradients (backward accumulates)
    lc->forward(lc);
    for (int k = 0; k < lc->nin; k++) memset(lc->din[k], 0, lc->n_in[k] * sizeof(double));
    for (int k = 0; k < 2; k++) {
        if (lc->scratch[k]) memset(lc->scratch[k], 0, lc->n_scratch[k] * sizeof(double));
    }
    lc->backward(lc);
    // numeric: central differences of L = w . out, one element at a time
    for (int k = 0; k < lc->nin; k++) {
        double* fd = zero_array(lc->n_in[k]);
        for (size_t j = 0; j < lc->n_in[k]; j++) {
            double x = lc->in[k][j];
            lc->in[k][j] = x + H;
            lc->forward(lc);
            double lp = dot(lc->w, lc->out, lc->n_out);
            lc->in[k][j] = x - H;
            lc->forward(lc);
            double lm = dot(lc->w, lc->out, lc->n_out);
            lc->in[k][j] = x;
            fd[j] = (lp - lm) / (2.0 * H);
        }
        compare(lc->name, lc->in_name[k], lc->din[k], fd, lc->n_in[k]);
        free(fd);
    }
}

// Sets up a case: sizes, inputs (random), their gradients, output and w (random).
static void add_input(LayerCase* lc, const char* name, size_t n) {
    int k = lc->nin++;
    lc->in_name[k] = name;
    lc->in[k] = rand_array(n);
    lc->din[k] = zero_array(n);
    lc->n_in[k] = n;
}

static void set_output(LayerCase* lc, size_t n) {
    lc->out = zero_array(n);
    lc->w = rand_array(n);
    lc->n_out = n;
}

static void free_case(LayerCase* lc) {
    for (int k = 0; k < lc->nin; k++) { free(lc->in[k]); free(lc->din[k]); }
    for (int k = 0; k < 2; k++) { free(lc->saved[k]); free(lc->scratch[k]); }
    free(lc->out); free(lc->w); free(lc->tokens); free(lc->targets);
}

static LayerCase new_case(const char* name, int B, int T, int C) {
    LayerCase lc;
    memset(&lc, 0, sizeof(lc));
    lc.name = name;
    lc.B = B; lc.T = T; lc.C = C;
    return lc;
}

// ---------- the layers: how each one is run forward and backward ----------

static void encoder_fwd(LayerCase* c) {
    encoder_forward(c->out, c->tokens, c->in[0], c->in[1], c->B, c->T, c->C);
}
static void encoder_bwd(LayerCase* c) {
    encoder_backward(c->din[0], c->din[1], c->w, c->tokens, c->B, c->T, c->C);
}

static void layernorm_fwd(LayerCase* c) {
    layernorm_forward(c->out, c->saved[0], c->saved[1], c->in[0], c->in[1], c->in[2],
                      c->B, c->T, c->C);
}
static void layernorm_bwd(LayerCase* c) {
    layernorm_backward(c->din[0], c->din[1], c->din[2], c->w, c->in[0], c->in[1],
                       c->saved[0], c->saved[1], c->B, c->T, c->C);
}

static void matmul_fwd(LayerCase* c) {
    matmul_forward(c->out, c->in[0], c->in[1], c->nin > 2 ? c->in[2] : NULL,
                   c->B, c->T, c->C, c->OC);
}
static void matmul_bwd(LayerCase* c) {
    matmul_backward(c->din[0], c->din[1], c->nin > 2 ? c->din[2] : NULL, c->w, c->in[0],
                    c->in[1], c->B, c->T, c->C, c->OC);
}

// attention as the model runs it (its products on the GEMM), and the plain loops that define it
static void attention_fwd(LayerCase* c) {
    attention_forward(c->out, c->saved[0], c->saved[1], c->in[0], c->B, c->T, c->C, c->NH);
}
static void attention_bwd(LayerCase* c) {
    attention_backward(c->din[0], c->scratch[0], c->scratch[1], c->w, c->in[0], c->saved[1],
                       c->B, c->T, c->C, c->NH);
}
static void attention_naive_fwd(LayerCase* c) {
    attention_forward_naive(c->out, c->saved[0], c->saved[1], c->in[0], c->B, c->T, c->C, c->NH);
}
static void attention_naive_bwd(LayerCase* c) {
    attention_backward_naive(c->din[0], c->scratch[0], c->scratch[1], c->w, c->in[0], c->saved[1],
                             c->B, c->T, c->C, c->NH);
}

static void gelu_fwd(LayerCase* c) { gelu_forward(c->out, c->in[0], (int)c->n_out); }
static void gelu_bwd(LayerCase* c) { gelu_backward(c->din[0], c->in[0], c->w, (int)c->n_out); }

static void residual_fwd(LayerCase* c) {
    residual_forward(c->out, c->in[0], c->in[1], (int)c->n_out);
}
static void residual_bwd(LayerCase* c) {
    residual_backward(c->din[0], c->din[1], c->w, (int)c->n_out);
}

// out = the per-position losses; L = sum w_bt * loss_bt, so dlosses = w
static void softmax_ce_fwd(LayerCase* c) {
    softmax_forward(c->saved[0], c->in[0], c->B, c->T, c->V, c->Vp);
    crossentropy_forward(c->out, c->saved[0], c->targets, c->B, c->T, c->Vp);
}
static void softmax_ce_bwd(LayerCase* c) {
    crossentropy_softmax_backward(c->din[0], c->w, c->saved[0], c->targets, c->B, c->T, c->V,
                                  c->Vp);
}

static void alloc_saved(LayerCase* c, int k, size_t n) {
    c->saved[k] = zero_array(n);
    c->n_saved[k] = n;
}

static void alloc_scratch(LayerCase* c, int k, size_t n) {
    c->scratch[k] = zero_array(n);
    c->n_scratch[k] = n;
}

static int* rand_ids(size_t n, int below) {
    int* ids = (int*)malloc_check(n * sizeof(int));
    for (size_t i = 0; i < n; i++) ids[i] = (int)(random_u32(&rng_state) % (uint32_t)below);
    return ids;
}

static void check_layers(int B, int T) {
    const int C = 8, NH = 2, V = 5, Vp = 8;
    size_t BT = (size_t)B * T;
    char name[64];
    printf("-- layers, B=%d T=%d (B*T=%zu)\n", B, T, BT);

    LayerCase c = new_case("encoder", B, T, C);
    c.tokens = rand_ids(BT, V);                      // few ids, so some repeat: accumulation
    add_input(&c, "wte", (size_t)V * C);
    add_input(&c, "wpe", (size_t)T * C);
    set_output(&c, BT * C);
    c.forward = encoder_fwd; c.backward = encoder_bwd;
    check_layer(&c); free_case(&c);

    c = new_case("layernorm", B, T, C);
    add_input(&c, "inp", BT * C);
    add_input(&c, "weight", C);
    add_input(&c, "bias", C);
    set_output(&c, BT * C);
    alloc_saved(&c, 0, BT); alloc_saved(&c, 1, BT);
    c.forward = layernorm_fwd; c.backward = layernorm_bwd;
    check_layer(&c); free_case(&c);

    for (int bias = 1; bias >= 0; bias--) {
        c = new_case(bias ? "matmul (bias)" : "matmul (no bias)", B, T, C);
        c.OC = 3 * C;
        add_input(&c, "inp", BT * C);
        add_input(&c, "weight", (size_t)c.OC * C);
        if (bias) add_input(&c, "bias", c.OC);
        set_output(&c, BT * c.OC);
        c.forward = matmul_fwd; c.backward = matmul_bwd;
        check_layer(&c); free_case(&c);
    }

    for (int nh = 1; nh <= 2 * NH; nh++) {
        int naive = nh > NH;   // the plain loops, at each NH again
        snprintf(name, sizeof(name), "attention%s (NH=%d)", naive ? " naive" : "", naive ? nh - NH : nh);
        c = new_case(name, B, T, C);
        c.NH = naive ? nh - NH : nh;
        add_input(&c, "inp", BT * 3 * C);
        set_output(&c, BT * C);
        size_t na = (size_t)B * c.NH * T * T;
        alloc_saved(&c, 0, na); alloc_saved(&c, 1, na);
        alloc_scratch(&c, 0, na); alloc_scratch(&c, 1, na);
        c.forward = naive ? attention_naive_fwd : attention_fwd;
        c.backward = naive ? attention_naive_bwd : attention_bwd;
        check_layer(&c); free_case(&c);
    }

    c = new_case("gelu", B, T, C);
    add_input(&c, "inp", BT * 4 * C);
    for (size_t i = 0; i < BT * 4 * C; i++) c.in[0][i] *= 3.0;   // reach both tails
    set_output(&c, BT * 4 * C);
    c.forward = gelu_fwd; c.backward = gelu_bwd;
    check_layer(&c); free_case(&c);

    c = new_case("residual", B, T, C);
    add_input(&c, "inp1", BT * C);
    add_input(&c, "inp2", BT * C);
    set_output(&c, BT * C);
    c.forward = residual_fwd; c.backward = residual_bwd;
    check_layer(&c); free_case(&c);

    c = new_case("softmax+crossentropy", B, T, C);
    c.V = V; c.Vp = Vp;
    c.targets = rand_ids(BT, V);
    add_input(&c, "logits", BT * Vp);                // padding columns too: their gradient is 0
    for (size_t i = 0; i < BT * Vp; i++) c.in[0][i] *= 3.0;
    set_output(&c, BT);
    alloc_saved(&c, 0, BT * Vp);
    c.forward = softmax_ce_fwd; c.backward = softmax_ce_bwd;
    check_layer(&c); free_case(&c);
}

// ---------- the whole model ----------

// gpt2_backward against finite differences of gpt2_forward's mean loss, for every parameter of
// a tiny model: this checks how the layers are wired together (residual stream, weight tying,
// the 1/(B*T) of the mean), which the per-layer checks cannot see.
static void check_model(int B, int T) {
    GPT2Config cfg = gpt2_config(T + 1, 11, 2, 2, 8, 16);  // maxT V L NH C Vp
    GPT2 model;
    gpt2_build_fresh(&model, cfg, 42);
    // GPT-2's initialisation (std 0.02, zero biases, unit layernorm weights) makes most gradients
    // tiny and many equal; random O(1) values make every term of the backward count.
    size_t P = model.num_parameters, L = (size_t)cfg.num_layers, C = (size_t)cfg.channels;
    for (size_t i = 0; i < P; i++) model.params_memory[i] = 0.3 * uniform();
    for (size_t i = 0; i < L * C; i++) {
        model.params.ln1w[i] += 1.0;
        model.params.ln2w[i] += 1.0;
    }
    for (size_t i = 0; i < C; i++) model.params.lnfw[i] += 1.0;

    size_t BT = (size_t)B * T;
    int* inputs = rand_ids(BT, cfg.vocab_size);
    int* targets = rand_ids(BT, cfg.vocab_size);
    printf("-- model L=%d NH=%d C=%d V=%d Vp=%d, B=%d T=%d, %zu parameters\n", cfg.num_layers,
           cfg.num_heads, cfg.channels, cfg.vocab_size, cfg.padded_vocab_size, B, T, P);
    gpt2_forward(&model, inputs, targets, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1);
    double* analytic = zero_array(P);
    memcpy(analytic, model.grads_memory, P * sizeof(double));
    double* fd = zero_array(P);
    for (size_t i = 0; i < P; i++) {
        double x = model.params_memory[i];
        model.params_memory[i] = x + H;
        gpt2_forward(&model, inputs, targets, B, T);
        double lp = model.mean_loss;
        model.params_memory[i] = x - H;
        gpt2_forward(&model, inputs, targets, B, T);
        double lm = model.mean_loss;
        model.params_memory[i] = x;
        fd[i] = (lp - lm) / (2.0 * H);
    }
    size_t off = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        compare("model", PARAMETERS[t].name, analytic + off, fd + off, model.param_sizes[t]);
        off += model.param_sizes[t];
    }
    free(analytic); free(fd); free(inputs); free(targets);
    gpt2_free(&model);
}

// ---------- main ----------

int main(void) {
    check_layers(2, 3);     // B*T = 6, not a multiple of the matmul's 8-row tiles
    check_layers(2, 4);     // B*T = 8, the tiled path
    check_model(2, 3);
    if (failures > 0) {
        printf("FAIL: %d gradients disagree with their finite differences\n", failures);
        return 1;
    }
    printf("all gradients agree with finite differences (tolerance %.0e)\n", TOL);
    return 0;
}
