// gpt2/cpu_peak.h: the measured peak arithmetic rate of this machine's cores in float32 and bf16:
// what train_cpu's MFU is counted against (dev/bench/fma_peak.c prints it).
// Every thread runs CPU_PEAK_CHAINS independent chains of one instruction, touching no memory:
// fp32 one FMA (2 FLOPs a lane); bf16 vdpbf16ps (4 FLOPs a lane), or on AMX tdpbf16ps on four
// independent tiles of sums. An instruction's latency is ~4-6 cycles and a core starts two a
// cycle, so at least 12 chains must be in flight; 24 are, and fit AVX-512's registers. After a
// warm-up the best of a few runs counts: other processes only slow a run down.
// Without AVX512_BF16 the bf16 products run on FMAs, so bf16's peak is the FMA's.

#ifndef GPT2_CPU_PEAK_H
#define GPT2_CPU_PEAK_H

#include <stdio.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
// gradcheck's `#define float double` build cannot take the intrinsics: no bf16 chains there.
#if defined(__AVX512BF16__) && defined(__AVX512F__) && !defined(float)
#include <immintrin.h>
#define CPU_PEAK_BF16 1
#else
#define CPU_PEAK_BF16 0
#endif
#include "io.h"
#include "cpu_amx.h"

#if defined(__AVX512F__)
#define CPU_PEAK_VEC_BYTES 64
#elif defined(__AVX2__) || defined(__AVX__)
#define CPU_PEAK_VEC_BYTES 32
#else
#define CPU_PEAK_VEC_BYTES 16
#endif
#define CPU_PEAK_LANES ((int)(CPU_PEAK_VEC_BYTES / sizeof(float)))  // float32 lanes of one vector
#define CPU_PEAK_CHAINS 24

typedef float cpu_peak_vec __attribute__((vector_size(CPU_PEAK_VEC_BYTES)));

// the chains' sums go here, so the compiler cannot drop the work
static volatile float cpu_peak_sink;

static inline int cpu_peak_has_bf16(void) { return CPU_PEAK_BF16; }

// 1 where the bf16 products run on AMX, so its peak is bf16's.
static inline int cpu_peak_has_amx(void) { return CPU_AMX && cpu_peak_has_bf16() && cpu_amx_on(); }

// What cpu_peak_measure measures: 0 float32 FMA, 1 vdpbf16ps, 2 AMX's tdpbf16ps.
enum { CPU_PEAK_FP32 = 0, CPU_PEAK_DPBF16 = 1, CPU_PEAK_AMX = 2 };

// FLOPs of one round of one thread: one instruction on every chain (AMX: on each tile of sums)
static inline double cpu_peak_flops_per_round(int kind) {
    if (kind == CPU_PEAK_AMX) return 4.0 * 16 * 16 * 32 * 2;
    return (kind == CPU_PEAK_DPBF16 ? 4.0 * 16 : 2.0 * CPU_PEAK_LANES) * CPU_PEAK_CHAINS;
}

static inline double cpu_peak_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// `iters` rounds of the float32 FMA chains; returns a value that depends on all of them.
static float cpu_peak_chains_fp32(long iters, float seed) {
    cpu_peak_vec acc[CPU_PEAK_CHAINS];
    cpu_peak_vec a, b;
    for (int l = 0; l < CPU_PEAK_LANES; l++) {
        a[l] = 0.999999f;
        b[l] = 1e-7f * seed;
    }
    for (int c = 0; c < CPU_PEAK_CHAINS; c++) {
        for (int l = 0; l < CPU_PEAK_LANES; l++) acc[c][l] = seed + 0.001f * c + 0.0001f * l;
    }
    for (long i = 0; i < iters; i++) {
        // the asm barrier keeps `a` and `b` in registers and stops the folding of iterations
        // (without `b` GCC gave every FMA a memory operand: doc/cpu_speed.md)
        __asm__ volatile("" : "+v"(a), "+v"(b));
        // fully unrolled so that every chain has its own register (nvcc would warn of the pragma)
#ifndef __CUDACC__
        #pragma GCC unroll 32
#endif
        for (int c = 0; c < CPU_PEAK_CHAINS; c++) acc[c] = acc[c] * a + b;   // contracted to one FMA
    }
    float sum = 0.0f;
    for (int c = 0; c < CPU_PEAK_CHAINS; c++) {
        for (int l = 0; l < CPU_PEAK_LANES; l++) sum += acc[c][l];
    }
    return sum;
}

#if CPU_PEAK_BF16
// `iters` rounds of the vdpbf16ps chains. The products are ~1e-6: after 1e7 rounds the sums are
// ~10, no overflow and no denormals to slow the units.
static float cpu_peak_chains_bf16(long iters, float seed) {
    __m512 acc[CPU_PEAK_CHAINS];
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f * seed));
    __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f * seed), _mm512_set1_ps(1e-3f));
    for (int c = 0; c < CPU_PEAK_CHAINS; c++) acc[c] = _mm512_set1_ps(seed + 0.001f * c);
    for (long i = 0; i < iters; i++) {
        __asm__ volatile("" : "+v"(a));
        #pragma GCC unroll 32
        for (int c = 0; c < CPU_PEAK_CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    }
    float sum = 0.0f, lanes[16];
    for (int c = 0; c < CPU_PEAK_CHAINS; c++) {
        _mm512_storeu_ps(lanes, acc[c]);
        for (int l = 0; l < 16; l++) sum += lanes[l];
    }
    return sum;
}
#endif

#if CPU_AMX
// `iters` rounds of tdpbf16ps on tiles 0-3 (A in 4-5, B in 6-7, as bf_kernel_amx), products 1e-6.
static float cpu_peak_chains_amx(long iters, float seed) {
    uint16_t a[16 * 32] __attribute__((aligned(64))), b[16 * 32] __attribute__((aligned(64)));
    float sums[16 * 16] __attribute__((aligned(64)));
    uint32_t bits;
    float value = 1e-3f * seed;
    memcpy(&bits, &value, sizeof(bits));
    for (int i = 0; i < 16 * 32; i++) a[i] = b[i] = (uint16_t)(bits >> 16);   // value cut to bf16
    cpu_amx_configure();
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(3, sums, 64);
    cpu_amx_release();
    float sum = 0.0f;
    for (int i = 0; i < 16 * 16; i++) sum += sums[i];
    return sum;
}
#endif

// The peak in GFLOP/s of all OpenMP threads (their number in *threads): a warm-up, then the best
// of `reps` runs of `iters` rounds (AMX: iters / 16, its instructions being long). `kind`:
// CPU_PEAK_FP32, _DPBF16 or _AMX; *checksum: the chains' sums, printed so the work is kept.
static double cpu_peak_measure(int kind, long iters, int reps, int* threads, float* checksum) {
    if (kind == CPU_PEAK_DPBF16 && !cpu_peak_has_bf16()) fail("cpu_peak_measure: this build has no AVX512_BF16 instruction to measure");
    if (kind == CPU_PEAK_AMX && !cpu_peak_has_amx()) fail("cpu_peak_measure: AMX is not in use here");
    if (kind == CPU_PEAK_AMX) iters = iters / 16 > 0 ? iters / 16 : 1;
    double best = 0.0;
    float sink = 0.0f;
    int n = 1;
    for (int rep = -1; rep < reps; rep++) {   // rep -1: the warm-up, not timed
        long rounds = rep < 0 ? (iters + 3) / 4 : iters;
        double t0 = cpu_peak_seconds();
        #pragma omp parallel reduction(+ : sink)
        {
#ifdef _OPENMP
            #pragma omp single
            n = omp_get_num_threads();
#endif
#if CPU_AMX
            if (kind == CPU_PEAK_AMX) sink += cpu_peak_chains_amx(rounds, 2.0f + rep);
            else
#endif
#if CPU_PEAK_BF16
            if (kind == CPU_PEAK_DPBF16) sink += cpu_peak_chains_bf16(rounds, 1.0f + rep);
            else
#endif
                sink += cpu_peak_chains_fp32(rounds, 1.0f + rep);
        }
        double secs = cpu_peak_seconds() - t0;
        double gflops = cpu_peak_flops_per_round(kind) * (double)rounds * n / secs * 1e-9;
        if (rep >= 0 && gflops > best) best = gflops;
    }
    cpu_peak_sink = sink;
    if (threads != NULL) *threads = n;
    if (checksum != NULL) *checksum = sink;
    return best;
}

// What bf16's peak is measured on: AMX where the products run on it, else vdpbf16ps, else FMAs.
static inline int cpu_peak_bf16_kind(void) {
    return cpu_peak_has_amx() ? CPU_PEAK_AMX : cpu_peak_has_bf16() ? CPU_PEAK_DPBF16 : CPU_PEAK_FP32;
}

// What the peak of a precision ("fp32" or "bf16") is measured on, for a header line.
static inline const char* cpu_peak_instruction(const char* precision) {
    if (strcmp(precision, "bf16") == 0 && cpu_peak_has_amx()) return "bf16 AMX tdpbf16ps";
    if (strcmp(precision, "bf16") == 0 && cpu_peak_has_bf16()) return "bf16 vdpbf16ps";
    if (strcmp(precision, "bf16") == 0) return "float32 FMA (no AVX512_BF16 in this build: its bf16 products run on FMAs)";
    return "float32 FMA";
}

// The peak FLOP/s of all threads in "fp32" or "bf16", measured on the first call and remembered;
// *threads (may be NULL): how many threads.
static double cpu_peak_of_threads(const char* precision, int* threads) {
    static double peak[3];
    static int peak_threads[3];
    int bf16 = strcmp(precision, "bf16") == 0;
    if (!bf16 && strcmp(precision, "fp32") != 0) fail("cpu_peak_of: no peak for precision '%s' (fp32 or bf16)", precision);
    int kind = bf16 ? cpu_peak_bf16_kind() : CPU_PEAK_FP32;
    if (peak[kind] == 0.0) {
        // many short runs: on a shared machine the best of 10 catches a quiet moment
        peak[kind] = 1e9 * cpu_peak_measure(kind, 1000000, 10, &peak_threads[kind], NULL);
    }
    if (threads != NULL) *threads = peak_threads[kind];
    return peak[kind];
}

static inline double cpu_peak_of(const char* precision) { return cpu_peak_of_threads(precision, NULL); }

// Measures the peak of a precision (cpu_peak_of) and, when `print`, says so in one line.
static inline void cpu_peak_report(const char* precision, int print) {
    int threads;
    double peak = cpu_peak_of_threads(precision, &threads);
    if (print) {
        printf("peak: %.1f GFLOP/s %s, measured on %d thread%s, the MFU reference\n", peak * 1e-9,
               cpu_peak_instruction(precision), threads, threads > 1 ? "s" : "");
    }
}

#endif // GPT2_CPU_PEAK_H
