// gpt2/product_timer.h: GPT2_TIME_PRODUCTS=1 times every matrix product inside train_cpu's
// steps, where its operands come from memory after the other layers (dev/bench/bench_matmul's
// warm loops do not show that), and prints one line per shape and pass at the end: calls, the
// median call, GFLOP/s and the share of the MFU peak (doc/cpu_speed.md). The median leaves the
// first step's page faults out. Nothing else changes: the same calls, the same bits.

#ifndef GPT2_PRODUCT_TIMER_H
#define GPT2_PRODUCT_TIMER_H

#include <stdlib.h>
#include <string.h>
#include "io.h"

#define TIMED_SHAPES 32   // shapes kept, the first ones met
#define TIMED_CALLS 2048  // calls kept per shape and pass
typedef struct {
    int rows, C, OC;
    long calls[2];                   // forward, backward
    float ms[2][TIMED_CALLS];
} TimedShape;
static TimedShape* timed_shapes;     // NULL: not timing
static int timed_count;
static double timed_seconds;

// Starts timing when GPT2_TIME_PRODUCTS is set (and not 0).
static void product_timer_init(void) {
    const char* timing = getenv("GPT2_TIME_PRODUCTS");
    if (timing == NULL || strcmp(timing, "0") == 0 || strcmp(timing, "") == 0 || timed_shapes != NULL) return;
    timed_shapes = (TimedShape*)calloc_check(TIMED_SHAPES, sizeof(TimedShape));
}

static double product_timer_start(void) { return timed_shapes != NULL ? now_seconds() : 0.0; }

// A product of `pass` (0 forward, 1 backward) of (rows x C) by (C x OC) begun at t0.
static void product_timer_stop(int pass, int rows, int C, int OC, double t0) {
    if (timed_shapes == NULL) return;
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

static int compare_floats(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return (x > y) - (x < y);
}

// The table, against `peak` FLOP/s (the MFU reference). Shapes of forward passes only (samples,
// validation batches of other sizes) are counted, not listed.
static void product_timer_print(double peak) {
    if (timed_shapes == NULL) return;
    printf("products timed (GPT2_TIME_PRODUCTS=1), against the peak of %.1f GFLOP/s:\n", peak * 1e-9);
    printf("%-22s %-8s %6s %12s %9s %10s\n", "shape rows x C -> OC", "pass", "calls", "median ms", "GFLOP/s", "% of peak");
    double at_medians = 0.0;
    int forward_only = 0;
    for (int i = 0; i < timed_count; i++) {
        TimedShape* s = &timed_shapes[i];
        if (s->calls[1] == 0) {
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

#endif // GPT2_PRODUCT_TIMER_H
