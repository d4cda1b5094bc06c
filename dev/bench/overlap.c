// dev/bench/overlap.c: does a pass over memory hide under the matmul kernel's FMAs when it runs in
// slices between the kernel's calls? The question behind deferring AdamW into the next forward
// pass (doc/cpu_speed.md, "Why not 70%, reliably"): the kernel keeps the FMA units busy and reads
// its operands from L1 and L2, so the memory bus is mostly idle while it runs; an update of the
// weights done a slice at a time between kernel calls might then cost only its arithmetic.
//
// It times, on all OpenMP threads, three things and prints the best of `rounds` each:
//   product   R forward passes of one linear layer (matmul_forward_fast, gpt2/cpu_layers.h):
//             B*T = 256 rows, C -> OC (default the MLP's 768 -> 3072)
//   update    AdamW (adamw_update, gpt2/arithmetic.h) over N floats of parameters, gradients
//             and both moments (7 streams of N floats: far larger than the caches), each thread
//             its half
//   both      the same R products with the same update cut into slices, one slice after each
//             kernel call of each thread (gpt2/cpu_math.h's MM_AFTER_KERNEL), sized so that the
//             update ends with the products; the slices can prefetch the one AHEAD slices on, so
//             that its lines arrive while the kernel runs
// and "hidden": how much of the update's own time the interleaving saved, (product + update -
// both) / update. 100% would be an update for free; 0% no overlap at all.
//
//   gcc -O3 -fno-math-errno -march=native -fopenmp dev/bench/overlap.c -o build/overlap -lm
//   ./build/overlap [N=32000000] [AHEAD=0] [R=20] [rounds=3] [C=768] [OC=3072]

#include <stdio.h>
#include <stdlib.h>

static void overlap_slice(void);
#define MM_AFTER_KERNEL() overlap_slice()
#include "../../gpt2/cpu_layers.h"
#include "../../gpt2/arithmetic.h"
#include "../../gpt2/random.h"

#define MAX_THREADS 256

static float *params, *grads, *m1, *m2;
static AdamWStep step;
static size_t cursor[MAX_THREADS], stop[MAX_THREADS];   // each thread's part of the update
static size_t slice;      // floats per slice (0: no slices, the update waits)
static int ahead;         // prefetch the slice this many slices ahead
static int interleaving;  // 1 while the products should run slices

// AdamW on the next n floats of thread t's part, first asking for the lines of the slice `ahead`
// slices on.
static void update_floats(int t, size_t n) {
    size_t lo = cursor[t], hi = lo + n < stop[t] ? lo + n : stop[t];
    if (ahead > 0) {
        size_t from = lo + (size_t)ahead * n, to = from + n < stop[t] ? from + n : stop[t];
        for (size_t i = from; i < to; i += 16) {
            __builtin_prefetch(params + i, 1);
            __builtin_prefetch(grads + i, 0);
            __builtin_prefetch(m1 + i, 1);
            __builtin_prefetch(m2 + i, 1);
        }
    }
    for (size_t i = lo; i < hi; i++) params[i] = adamw_update(params[i], grads[i], &m1[i], &m2[i], step, 0.999f);
    cursor[t] = hi;
}

static void overlap_slice(void) {
    int t = thread_num();
    if (interleaving && cursor[t] < stop[t]) update_floats(t, slice);
}

// Each thread's part of the N floats, from its start.
static void reset_parts(size_t n) {
    int threads = num_threads();
    for (int t = 0; t < threads; t++) cursor[t] = n * t / threads, stop[t] = n * (t + 1) / threads;
}

// What the slices left, run to the end on every thread.
static void finish_update(void) {
    #pragma omp parallel
    {
        int t = thread_num();
        while (cursor[t] < stop[t]) update_floats(t, 1 << 14);
    }
}

static float* random_floats(size_t n, uint64_t* rng, int positive) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = positive ? random_f32(rng) : random_f32(rng) - 0.5f;
    return x;
}

int main(int argc, char** argv) {
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : 32000000;
    ahead = argc > 2 ? atoi(argv[2]) : 0;
    int reps = argc > 3 ? atoi(argv[3]) : 20, rounds = argc > 4 ? atoi(argv[4]) : 3;
    int C = argc > 5 ? atoi(argv[5]) : 768, OC = argc > 6 ? atoi(argv[6]) : 3072, BT = 256;
    int threads = num_threads();
    if (n < 1 || reps < 1 || rounds < 1 || C < 1 || OC < 1 || ahead < 0 || threads > MAX_THREADS) {
        fprintf(stderr, "usage: overlap [N>=1] [AHEAD>=0] [R>=1] [rounds>=1] [C>=1] [OC>=1]\n");
        return 1;
    }
    uint64_t rng = 1;
    float* inp = random_floats((size_t)BT * C, &rng, 0);
    float* weight = random_floats((size_t)OC * C, &rng, 0);
    float* out = random_floats((size_t)BT * OC, &rng, 0);
    params = random_floats(n, &rng, 0), grads = random_floats(n, &rng, 0);
    m1 = random_floats(n, &rng, 0), m2 = random_floats(n, &rng, 1);
    step = adamw_step(1e-4f, 0.9f, 0.95f, 1e-8f, 3);
    // kernel calls per thread in one product: the forward pass computes out^T = weight . inp^T,
    // the threads splitting the OC rows of the weight in MR-row tiles, each against BT/NR tiles
    long calls = (long)((OC + MM_MR - 1) / MM_MR + threads - 1) / threads * ((BT + MM_NR - 1) / MM_NR);
    slice = (n / threads + (size_t)calls * reps - 1) / ((size_t)calls * reps);
    slice = (slice + 15) / 16 * 16;
    printf("overlap: %d threads, %d products %d -> %d at %d rows, AdamW over %zu floats (%.0f MB moved),"
           " slices of %zu floats after each of ~%ld kernel calls a thread, prefetch %d ahead\n",
           threads, reps, C, OC, BT, n, 28.0 * n / 1e6, slice, calls * reps, ahead);
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < rounds; r++) {
        double t0 = now_seconds();
        for (int i = 0; i < reps; i++) matmul_forward_fast(out, inp, weight, NULL, 1, BT, C, OC);
        double product = now_seconds() - t0;
        reset_parts(n);
        t0 = now_seconds();
        finish_update();
        double update = now_seconds() - t0;
        reset_parts(n);
        interleaving = 1;
        t0 = now_seconds();
        for (int i = 0; i < reps; i++) matmul_forward_fast(out, inp, weight, NULL, 1, BT, C, OC);
        interleaving = 0;
        finish_update();   // what the slices did not reach
        double both = now_seconds() - t0;
        if (product < best[0]) best[0] = product;
        if (update < best[1]) best[1] = update;
        if (both < best[2]) best[2] = both;
    }
    printf("product %.1f ms, update %.1f ms (%.1f GB/s), both interleaved %.1f ms: hidden %.0f%% of the update\n",
           1e3 * best[0], 1e3 * best[1], 28.0 * n / best[1] / 1e9, 1e3 * best[2],
           100.0 * (best[0] + best[1] - best[2]) / best[1]);
    free(inp), free(weight), free(out), free(params), free(grads), free(m1), free(m2);
    return 0;
}
