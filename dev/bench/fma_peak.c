// dev/bench/fma_peak.c: measures this machine's peak float32 FMA throughput on all OpenMP threads.
//
// Each thread runs many independent chains acc = acc * a + b on the widest vectors the build
// targets (AVX-512: 16 floats, AVX2: 8, otherwise 4 and whatever the compiler makes of them).
// One FMA unit finishes one FMA per cycle but each takes ~4 cycles, and a core may have two
// units, so at least 2 x 4 chains must be in flight to keep them busy; we run 24, which also
// fits in the 32 vector registers of AVX-512 without spilling. Nothing touches memory inside
// the loop, so this is the compute ceiling that train_cpu's matmuls are measured against
// (doc/cpu_speed.md). Counting: one FMA on one lane = 2 floating-point operations.
//
//   gcc -O3 -march=native -fopenmp dev/bench/fma_peak.c -o build/fma_peak && ./build/fma_peak
//   prints: fma_peak_gflops 138.2 (threads 2, 16 float lanes, ...)

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__)
#define VEC_BYTES 64
#elif defined(__AVX2__) || defined(__AVX__)
#define VEC_BYTES 32
#else
#define VEC_BYTES 16
#endif
#define LANES (VEC_BYTES / 4)
#define CHAINS 24

typedef float vecf __attribute__((vector_size(VEC_BYTES)));

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Runs `iters` rounds of CHAINS independent FMAs and returns a value that depends on all of
// them, so the compiler cannot drop the work.
static float fma_chains(long iters, float seed) {
    vecf acc[CHAINS];
    vecf a, b;
    for (int l = 0; l < LANES; l++) { a[l] = 0.999999f; b[l] = 1e-7f * seed; }
    for (int c = 0; c < CHAINS; c++) {
        for (int l = 0; l < LANES; l++) acc[c][l] = seed + 0.001f * c + 0.0001f * l;
    }
    for (long i = 0; i < iters; i++) {
        // the asm barrier keeps `a` in a register and stops the compiler from folding iterations
        __asm__ volatile("" : "+v"(a));
        // fully unrolled so that every chain lives in its own register
        #pragma GCC unroll 32
        for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * a + b;   // contracted to one FMA
    }
    float sum = 0.0f;
    for (int c = 0; c < CHAINS; c++) {
        for (int l = 0; l < LANES; l++) sum += acc[c][l];
    }
    return sum;
}

int main(int argc, char** argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000000;   // ~0.3 s per thread at 2.6 GHz (AVX-512)
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    fma_chains(iters / 20, 1.0f);   // warm-up: brings the cores to their working clock
    double best = 0.0;
    float sink = 0.0f;
    for (int rep = 0; rep < 3; rep++) {   // best of 3: other processes only ever make it slower
        double t0 = now_seconds();
        #pragma omp parallel reduction(+ : sink)
        {
            sink += fma_chains(iters, 1.0f + rep);
        }
        double secs = now_seconds() - t0;
        double gflops = 2.0 * LANES * CHAINS * (double)iters * threads / secs * 1e-9;
        if (gflops > best) best = gflops;
    }
    printf("fma_peak_gflops %.1f (threads %d, %d float lanes, %d chains; checksum %g)\n",
           best, threads, LANES, CHAINS, (double)sink);
    return 0;
}
