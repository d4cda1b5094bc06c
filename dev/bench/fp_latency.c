// The latency of one float add and one fused multiply-add on this core, in clock cycles: the
// time from an instruction's inputs to its result, which is what a chain of dependent operations
// (the naive matmul's `val += x[i] * w[i]`, Lesson 6) pays per step. Each chain is 64 instructions
// where every one reads the result of the one before; its time per instruction, divided by the
// time of a chain of dependent integer adds (one cycle each on every x86 core of the last decades),
// gives cycles without reading a cycle counter. The best of 5 runs of each is kept.
//   cc -O2 -o build/fp_latency dev/bench/fp_latency.c && ./build/fp_latency
// x86-64 only (the chains are written in assembly, so that the compiler cannot reorder them).
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define OPS 200000000L  // instructions per timed chain
#define X8(s) s s s s s s s s

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
// seconds per instruction of one run of each chain
static double int_add_chain(void) {
    uint64_t a = 1;
    double t0 = now();
    for (long i = 0; i < OPS; i += 64) __asm__ volatile(X8(X8("add $1, %0\n\t")) : "+r"(a));
    return (now() - t0) / OPS;
}

static double float_add_chain(void) {
    float x = 1.0f, y = 1e-3f;
    double t0 = now();
    for (long i = 0; i < OPS; i += 64) __asm__ volatile(X8(X8("addss %1, %0\n\t")) : "+x"(x) : "x"(y));
    return (now() - t0) / OPS;
}

static double fma_chain(void) {
    float x = 1.0f, y = 0.999f, z = 1e-3f;
    double t0 = now();
    for (long i = 0; i < OPS; i += 64)
        __asm__ volatile(X8(X8("vfmadd231ss %1, %2, %0\n\t")) : "+x"(x) : "x"(y), "x"(z));
    return (now() - t0) / OPS;
}

// the best of 5 runs: the one least disturbed by whatever else the machine was doing
static double best_of_5(double (*chain)(void)) {
    double best = chain();
    for (int rep = 1; rep < 5; rep++) {
        double t = chain();
        if (t < best) best = t;
    }
    return best;
}

int main(void) {
    __builtin_cpu_init();
    double cycle = best_of_5(int_add_chain);
    printf("clock (a chain of integer adds, 1 cycle each): %.2f GHz\n", 1e-9 / cycle);
    printf("float add latency (addss):                %.1f cycles\n", best_of_5(float_add_chain) / cycle);
    if (__builtin_cpu_supports("fma"))
        printf("fused multiply-add latency (vfmadd231ss): %.1f cycles\n", best_of_5(fma_chain) / cycle);
    else
        printf("fused multiply-add latency: this CPU has no FMA instructions\n");
    return 0;
}
#else
int main(void) {
    fprintf(stderr, "fp_latency: x86-64 only (its chains are x86 assembly)\n");
    return 1;
}
#endif
