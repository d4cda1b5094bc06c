// dev/bench/bench_matmul.c: the matmuls of one GPT-2 124M training step (B*T = 256 rows), timed one
// by one: matmul_forward_fast / matmul_backward_fast of gpt2/cpu_layers.h (and optionally the
// naive loops beside them), in GFLOP/s, so the blocking constants in gpt2/cpu_math.h can be tuned
// and the effect of each product on the step seen.
//
//   gcc -O3 -march=native -fopenmp dev/bench/bench_matmul.c -o build/bench_matmul -lm
//   ./build/bench_matmul [reps=5] [naive=0]
//   ./build/bench_matmul bf16 [reps=5]
//   ./build/bench_matmul packed [reps=7] [cached]
//   ./build/bench_matmul packed-bf16 [reps=7] [cached]
//
// Per layer (x12): qkv C->3C, attproj C->C, fc C->4C, fcproj 4C->C; then the output layer
// C->Vp (Vp = 50304), the largest single product. Forward = out; backward = dinp and dW (dbias
// is free next to them). Each time is the fastest of `reps` runs (other processes can only make
// a run slower); the last line adds the matmuls up to one training step.
//
// `bf16`: the same products in float32 and in bf16 (matmul_forward_bf16_fast and
// matmul_backward_bf16_fast, gpt2/cpu_bf16.h) side by side, taking turns within each run, and how
// many times as fast bf16 is.
//
// `packed`: generation's products, the same five shapes at M = 1, 8 and 64 rows (a decode step of
// 1, 8, 64 sequences): matmul_forward_packed against matmul_forward, and at M = 1 against a
// matrix-vector product of dot products (omp simd). Generation reads each weight once per step,
// from memory, not from cache: each product cycles through copies of its weight (at least
// 128 MiB of them, 4x the L3), one call per copy, and each pass starts with the caches emptied of
// the pass before. The products take turns, in an order that rotates; times are the median over
// `reps` rounds. `cached`: one copy of each weight and the caches left alone, so that the weights
// stay in L3 where they fit (all but the output layer's) and the kernels' own speed shows.
// `packed-bf16`: the same, matmul_forward_packed against matmul_forward_packed_bf16 (the weight
// packed in bf16: half the bytes to read).

#include "../../gpt2/cpu_layers.h"
#include "../../gpt2/random.h"

static float* random_array(size_t n, uint64_t* rng) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = random_f32(rng) - 0.5f;
    return x;
}

typedef struct { const char* name; int in, out, count; } Shape;
#define NUM_SHAPES 5
static const Shape shapes[NUM_SHAPES] = {
    {"qkv", 768, 3 * 768, 12}, {"attproj", 768, 768, 12}, {"fc", 768, 4 * 768, 12},
    {"fcproj", 4 * 768, 768, 12}, {"lm head", 768, 50304, 1}};

// The operands and gradients of a product of BT rows from IC to OC channels, random.
typedef struct { float *inp, *weight, *bias, *out, *dinp, *dweight, *dbias; } Operands;
static Operands operands(int BT, int IC, int OC, uint64_t* rng) {
    Operands m;
    m.inp = random_array((size_t)BT * IC, rng);
    m.weight = random_array((size_t)OC * IC, rng);
    m.bias = random_array(OC, rng);
    m.out = random_array((size_t)BT * OC, rng);
    m.dinp = random_array((size_t)BT * IC, rng);
    m.dweight = random_array((size_t)OC * IC, rng);
    m.dbias = random_array(OC, rng);
    return m;
}
static void operands_free(Operands* m) {
    free(m->inp); free(m->weight); free(m->bias); free(m->out); free(m->dinp); free(m->dweight); free(m->dbias);
}

typedef void (*forward_fn)(float* out, const float* inp, const float* weight, const float* bias,
                           int B, int T, int C, int OC);
typedef void (*backward_fn)(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int B, int T, int C, int OC);

// One forward and one backward of the product m: their seconds into best[0] and best[1] where
// they beat what those hold (the fastest of the calls so far).
static void time_product(forward_fn forward, backward_fn backward, const Operands* m, int BT, int IC, int OC,
                         double* best) {
    double t0 = now_seconds();
    forward(m->out, m->inp, m->weight, m->bias, 1, BT, IC, OC);
    double t1 = now_seconds();
    backward(m->dinp, m->dweight, m->dbias, m->out, m->inp, m->weight, 1, BT, IC, OC);
    double t2 = now_seconds();
    if (t1 - t0 < best[0]) best[0] = t1 - t0;
    if (t2 - t1 < best[1]) best[1] = t2 - t1;
}

static void bench_training(int reps, int naive) {
    int BT = 256;
    uint64_t rng = 1;
    double step_seconds = 0.0, step_flops = 0.0;
    printf("B*T = %d, %d threads; GFLOP/s counts 2 per multiply-add\n", BT, num_threads());
    for (int s = 0; s < NUM_SHAPES; s++) {
        int IC = shapes[s].in, OC = shapes[s].out;
        Operands m = operands(BT, IC, OC, &rng);
        double flops = 2.0 * BT * IC * OC;
        double best[4] = {1e30, 1e30, 1e30, 1e30};   // fast fwd, fast bwd, naive fwd, naive bwd
        for (int r = 0; r < reps; r++) time_product(matmul_forward_fast, matmul_backward_fast, &m, BT, IC, OC, best);
        if (naive) time_product(matmul_forward_naive, matmul_backward_naive, &m, BT, IC, OC, best + 2);  // once
        printf("%-8s %4d -> %5d  forward %7.2f ms %6.1f GFLOP/s   backward %7.2f ms %6.1f GFLOP/s",
               shapes[s].name, IC, OC, best[0] * 1e3, flops / best[0] * 1e-9, best[1] * 1e3,
               2 * flops / best[1] * 1e-9);
        if (naive) {
            printf("   naive %6.1f / %6.1f GFLOP/s", flops / best[2] * 1e-9, 2 * flops / best[3] * 1e-9);
        }
        printf("\n");
        step_seconds += shapes[s].count * (best[0] + best[1]);
        step_flops += shapes[s].count * 3 * flops;
        operands_free(&m);
    }
    printf("all matmuls of one training step: %.1f ms, %.1f GFLOP/s\n", step_seconds * 1e3,
           step_flops / step_seconds * 1e-9);
}

// The training products in float32 and in bf16, taking turns in each run: fastest of `reps`.
static void bench_training_bf16(int reps) {
    int BT = 256;
    uint64_t rng = 1;
    double step[2] = {0.0, 0.0}, step_flops = 0.0;
    printf("B*T = %d, %d threads, bf16 on %s; GFLOP/s counts 2 per multiply-add; xN: bf16 is N "
           "times as fast\n", BT, num_threads(), cpu_bf16_arith());
    printf("%-8s %13s  %-31s %-31s %s\n", "product", "C -> OC", "float32 forward, backward",
           "bf16 forward, backward", "bf16 speed-up");
    for (int s = 0; s < NUM_SHAPES; s++) {
        int IC = shapes[s].in, OC = shapes[s].out;
        Operands m = operands(BT, IC, OC, &rng);
        double flops = 2.0 * BT * IC * OC;
        double best[4] = {1e30, 1e30, 1e30, 1e30};   // fp32 fwd, fp32 bwd, bf16 fwd, bf16 bwd
        for (int r = 0; r < reps; r++) {
            time_product(matmul_forward_fast, matmul_backward_fast, &m, BT, IC, OC, best);
            time_product(matmul_forward_bf16_fast, matmul_backward_bf16_fast, &m, BT, IC, OC, best + 2);
        }
        printf("%-8s %5d -> %5d", shapes[s].name, IC, OC);
        for (int bf16 = 0; bf16 < 2; bf16++) {
            double fwd = best[2 * bf16], bwd = best[2 * bf16 + 1];
            printf("  %6.2f ms %6.1f, %6.2f ms %6.1f", fwd * 1e3, flops / fwd * 1e-9, bwd * 1e3,
                   2 * flops / bwd * 1e-9);
            step[bf16] += shapes[s].count * (best[2 * bf16] + best[2 * bf16 + 1]);
        }
        printf("  x%.2f, x%.2f\n", best[0] / best[2], best[1] / best[3]);
        step_flops += shapes[s].count * 3 * flops;
        operands_free(&m);
    }
    printf("all matmuls of one training step: float32 %.1f ms, %.1f GFLOP/s; bf16 %.1f ms, %.1f "
           "GFLOP/s; x%.2f\n", step[0] * 1e3, step_flops / step[0] * 1e-9, step[1] * 1e3,
           step_flops / step[1] * 1e-9, step[0] / step[1]);
}

// ---------- generation: the weight packed once ----------

// A decode step's product as dot products: out (OC) = weight (OC, C) . inp (C) + bias, each
// output a vectorised sum (in another order than the GEMM's, so its bits differ).
static void matvec_simd(float* out, const float* inp, const float* weight, const float* bias,
                        int C, int OC) {
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        const float* w = weight + (size_t)o * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int i = 0; i < C; i++) sum += w[i] * inp[i];
        out[o] = sum + bias[o];
    }
}

static int compare_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

enum { PACKED, FORWARD, MATVEC, PACKED_BF16, NUM_PRODUCTS };

// Reads 256 MiB (8x the L3) so that the next pass finds none of the last one's weights in cache:
// without it, a pass that streams the same weights as the pass before it (matmul_forward and the
// matrix-vector product read the same plain copies) finds the end of them still in L3.
static void evict_caches(void) {
    static float* buffer = NULL;
    size_t n = (size_t)64 << 20;
    if (buffer == NULL) {   // written, so that it is memory: unwritten, it reads one zero page
        buffer = (float*)malloc_check(n * sizeof(float));
        memset(buffer, 0, n * sizeof(float));
    }
    float sum = 0.0f;
    #pragma omp parallel for reduction(+:sum)
    for (size_t i = 0; i < n; i += 16) sum += buffer[i];   // one float per 64-byte line
    if (sum != 0.0f) printf("(never printed: the buffer is zero)\n");
}

static double median(double* x, int n) {
    qsort(x, (size_t)n, sizeof(double), compare_double);
    return x[n / 2];
}

// Times the n products of which[] in reps rounds, each round one pass of each product, each pass
// one call per copy of the weight: PACKED on the packed copies, PACKED_BF16 on the bf16 ones, the
// others on the plain ones. The products take turns, so that a busy moment of the machine falls
// on all of them, in an order that rotates from round to round, so that none always follows the
// same one. seconds: the median time per call of each; ratio: the median over rounds of each
// one's time / the first one's in the same round (how many times faster the first product is: the
// steadier figure on a shared machine).
static void time_products(double* seconds, double* ratio, const int* which, int n, int reps,
                          int cached, float* out, const float* inp, float** weights, float** packed,
                          bf16_t** packed16, int copies, const float* bias, int M, int C, int OC) {
    double* times = (double*)malloc_check((size_t)n * reps * sizeof(double));
    double* ratios = (double*)malloc_check((size_t)n * reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        for (int turn = 0; turn < n; turn++) {
            int w = (turn + r) % n, product = which[w];
            if (!cached) evict_caches();
            double t0 = now_seconds();
            for (int k = 0; k < copies; k++) {
                if (product == PACKED) matmul_forward_packed(out, inp, packed[k], bias, 1, M, C, OC);
                else if (product == PACKED_BF16) {
                    matmul_forward_packed_bf16(out, inp, packed16[k], bias, 1, M, C, OC);
                } else if (product == FORWARD) matmul_forward(out, inp, weights[k], bias, 1, M, C, OC);
                else matvec_simd(out, inp, weights[k], bias, C, OC);
            }
            times[w * reps + r] = (now_seconds() - t0) / copies;
        }
        for (int w = 0; w < n; w++) ratios[w * reps + r] = times[w * reps + r] / times[r];
    }
    for (int w = 0; w < n; w++) {
        seconds[which[w]] = median(times + w * reps, reps);
        ratio[which[w]] = median(ratios + w * reps, reps);
    }
    free(times);
    free(ratios);
}

// bf16 = 0: matmul_forward_packed against matmul_forward (and the matrix-vector product at
// M = 1); bf16 = 1: matmul_forward_packed_bf16 against matmul_forward_packed.
static void bench_packed(int reps, int cached, int bf16) {
    int rows[3] = {1, 8, 64};
    uint64_t rng = 1;
    printf("generation's products, %s, median of %d rounds, %d threads; GFLOP/s counts 2 per "
           "multiply-add, xN: %s is N times as fast (median of the rounds' ratios); GB/s: the "
           "weight's bytes per second\n",
           cached ? "one copy of each weight, cached" : "weights cycled through >= 128 MiB of copies",
           reps, num_threads(), bf16 ? "bf16" : "packed");
    if (bf16) {
        printf("bf16 on %s\n", cpu_bf16_arith());
        printf("%-8s %12s %3s  %-22s %s\n", "product", "C -> OC", "M",
               "matmul_forward_packed_bf16", "matmul_forward_packed (float32)");
    } else {
        printf("%-8s %12s %3s  %-22s %-30s %s\n", "product", "C -> OC", "M",
               "matmul_forward_packed", "matmul_forward", "matvec (omp simd)");
    }
    for (int s = 0; s < NUM_SHAPES; s++) {
        int C = shapes[s].in, OC = shapes[s].out;
        size_t wsize = (size_t)OC * C, psize = packed_weight_size(C, OC);
        int copies = cached ? 1 : (int)((128u << 20) / (wsize * sizeof(float)) + 1);
        float** weights = (float**)malloc_check(copies * sizeof(float*));
        float** packed = (float**)malloc_check(copies * sizeof(float*));
        bf16_t** packed16 = (bf16_t**)calloc_check(copies, sizeof(bf16_t*));
        for (int k = 0; k < copies; k++) {
            weights[k] = random_array(wsize, &rng);
            packed[k] = (float*)aligned_alloc_check(64, psize * sizeof(float));
            pack_weight(packed[k], weights[k], C, OC);
            if (bf16) {
                size_t bytes = packed_weight_size_bf16(C, OC) * sizeof(bf16_t);
                packed16[k] = (bf16_t*)aligned_alloc_check(64, bytes);
                pack_weight_bf16(packed16[k], weights[k], C, OC);
            }
        }
        float* bias = random_array(OC, &rng);
        float* inp = random_array((size_t)rows[2] * C, &rng);
        float* out = random_array((size_t)rows[2] * OC, &rng);
        for (int m = 0; m < 3; m++) {
            int M = rows[m];
            double flops = 2.0 * M * C * OC, gb = wsize * sizeof(float) * 1e-9;
            double t[NUM_PRODUCTS], x[NUM_PRODUCTS];
            if (bf16) {
                int which[2] = {PACKED_BF16, PACKED};
                time_products(t, x, which, 2, reps, cached, out, inp, weights, packed, packed16,
                              copies, bias, M, C, OC);
                printf("%-8s %5d -> %5d %3d  %6.1f GFLOP/s %5.1f GB/s  %6.1f GFLOP/s %5.1f GB/s x%.2f\n",
                       shapes[s].name, C, OC, M, flops / t[PACKED_BF16] * 1e-9, gb / 2 / t[PACKED_BF16],
                       flops / t[PACKED] * 1e-9, gb / t[PACKED], x[PACKED]);
                continue;
            }
            int which[3] = {PACKED, FORWARD, MATVEC};
            time_products(t, x, which, M == 1 ? 3 : 2, reps, cached, out, inp, weights, packed,
                          packed16, copies, bias, M, C, OC);
            printf("%-8s %5d -> %5d %3d  %6.1f GFLOP/s %5.1f GB/s  %6.1f GFLOP/s %5.1f GB/s x%.2f",
                   shapes[s].name, C, OC, M, flops / t[PACKED] * 1e-9, gb / t[PACKED],
                   flops / t[FORWARD] * 1e-9, gb / t[FORWARD], x[FORWARD]);
            if (M == 1) {
                printf("  %6.1f GFLOP/s %5.1f GB/s x%.2f", flops / t[MATVEC] * 1e-9, gb / t[MATVEC],
                       x[MATVEC]);
            }
            printf("\n");
        }
        for (int k = 0; k < copies; k++) {
            free(weights[k]);
            free(packed[k]);
            free(packed16[k]);
        }
        free(weights); free(packed); free(packed16); free(bias); free(inp); free(out);
    }
}

int main(int argc, char** argv) {
    const char* mode = argc > 1 ? argv[1] : "";
    int cached = argc > 3 && strcmp(argv[3], "cached") == 0;
    if (strcmp(mode, "packed") == 0 || strcmp(mode, "packed-bf16") == 0) {
        bench_packed(argc > 2 ? atoi(argv[2]) : 7, cached, strcmp(mode, "packed-bf16") == 0);
    } else if (strcmp(mode, "bf16") == 0) {
        bench_training_bf16(argc > 2 ? atoi(argv[2]) : 5);
    } else {
        bench_training(argc > 1 ? atoi(argv[1]) : 5, argc > 2 ? atoi(argv[2]) : 0);
    }
    return 0;
}
