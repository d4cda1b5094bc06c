// dev/bench/membw.c: measures this machine's memory read bandwidth on all OpenMP threads.
//
// Generating one token at batch 1 reads every weight of the model once and does only two
// floating-point operations per float read, so its speed is set by how fast the cores can pull
// bytes from DRAM, not by their FMA units. This program measures that ceiling the way inference
// uses memory: every thread sums its own contiguous slice of a buffer far larger than the last-
// level cache (so each pass really goes to DRAM), with vectorised loads. dev/bench/bench_infer.sh
// divides the bytes of weights read per token by this figure to get the tokens/s that no
// batch-1 implementation on this machine can beat (doc/infer.md).
//
// It prints the median over its passes: the sustained bandwidth, comparable with a generation
// speed averaged over many tokens (the best pass catches short quiet moments of a shared machine).
//
//   gcc -O3 -march=native -fopenmp dev/bench/membw.c -o build/membw && ./build/membw [MiB]
//   prints: membw_read_gbs 31.2 (median of 15 passes; best 33.0; threads 2, buffer 1024 MiB)

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define DEFAULT_MIB 1024   // 32x the 32 MiB L3 of the development machine; nothing stays cached
#define PASSES 15

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Sum of x[0..n). The `omp simd` reduction lets the compiler keep one partial sum per vector
// lane (16 with AVX-512) and reorder the additions, which plain C forbids without -ffast-math;
// one vector add per 64 bytes is far faster than DRAM delivers them, so the loads set the pace.
// Every 1 KB read, the 1 KB 8 KB ahead is asked for (a prefetch per 64-byte line), as the packed
// products of generation do (gpt2/cpu_math.h, gpt2/cpu_bf16.h): the hardware's prefetcher alone
// keeps fewer lines in flight, and measured 10% less on the development machine (64 against
// 71 GB/s, alternating), below what infer itself then read.
static float sum_slice(const float* x, size_t n) {
    float acc = 0.0f;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        for (int line = 0; line < 256; line += 16) __builtin_prefetch(x + i + 2048 + line);
        #pragma omp simd reduction(+:acc)
        for (size_t j = i; j < i + 256; j++) acc += x[j];
    }
    for (; i < n; i++) acc += x[i];
    return acc;
}

int main(int argc, char** argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : DEFAULT_MIB;
    if (mib < 64) {
        fprintf(stderr, "usage: membw [MiB >= 64] (the buffer must be much larger than the caches)\n");
        return 1;
    }
    size_t n = mib * 1024 * 1024 / sizeof(float);
    float* x = (float*)malloc(n * sizeof(float));
    if (x == NULL) {
        fprintf(stderr, "error: out of memory allocating %zu MiB; try a smaller size\n", mib);
        return 1;
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    // First touch from the thread that will read each page (matters on multi-socket machines),
    // with the same static split of [0, n) as the timed loop below.
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = (float)(i & 1023) * 1e-3f;

    double times[PASSES];
    float check = 0.0f;
    for (int pass = 0; pass < PASSES; pass++) {
        float total = 0.0f;
        double t0 = now_seconds();
        #pragma omp parallel reduction(+:total)
        {
            int id = 0, nt = 1;
#ifdef _OPENMP
            id = omp_get_thread_num();
            nt = omp_get_num_threads();
#endif
            size_t begin = n * id / nt, end = n * (id + 1) / nt;
            total += sum_slice(x + begin, end - begin);
        }
        times[pass] = now_seconds() - t0;
        check += total;
    }
    // sort the pass times (insertion sort: 15 numbers)
    for (int i = 1; i < PASSES; i++) {
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double tmp = times[j];
            times[j] = times[j - 1];
            times[j - 1] = tmp;
        }
    }
    double bytes = (double)n * sizeof(float);
    // printing the sum keeps the compiler from dropping the reads
    printf("membw_read_gbs %.1f (median of %d passes; best %.1f; threads %d, buffer %zu MiB; "
           "checksum %.3g)\n", bytes / times[PASSES / 2] / 1e9, PASSES, bytes / times[0] / 1e9,
           threads, mib, (double)check);
    free(x);
    return 0;
}
