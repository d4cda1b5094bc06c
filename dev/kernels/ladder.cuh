// dev/kernels/ladder.cuh: what every step of the kernel ladder shares. A step is one complete
// program (dev/kernels/NN_family_name.cu): its kernel and launcher, then a main that checks the
// launcher against the CPU layer of gpt2/cpu_layers.h on fresh random inputs and, on a GPU, times
// it. This header gives that main its frame:
//
//   ladder_begin(step)            the device; the step's number, family and one line on what changed
//   compare(...)                  from dev/gpu/check.cuh: |gpu - cpu| <= atol + rtol |cpu|, NaN fails
//   ladder_shape_big()            0 on the emulator (small shapes only), 1 on a GPU (GPT-2 124M's too)
//   ladder_time(step, f, work)    on a GPU: the median of 20 launches, and the rate against the limit
//   return ladder_end(step)       one last line, PASS or FAIL; exit status 1 on any mismatch
//   return ladder_skip(step, why) instead, where this GPU lacks the step's instructions: SKIP
//
// The last line has a fixed form, which dev/kernels/run.sh reads into the ladder's table:
//   PASS 01 matmul   naive: one thread per output            2.715 ms   1.48 TFLOP/s   2.2% of float32 peak
// and, where LADDER_TSV names a file, the same fields are appended to it, tab-separated.

#ifndef DEV_KERNELS_LADDER_CUH
#define DEV_KERNELS_LADDER_CUH

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../gpt2/random.h"          // random_f32: the inputs
#include "../../gpt2/cpu_layers.h"      // the CPU layers every step is checked against
#include "../../gpt2/gpu/cuda_utils.cuh" // cuda_check, launch_check, ceil_div, warp_sum, the device's peaks
#include "../gpu/check.cuh"             // host_random, to_device, device_poisoned, compare, median_ms_gpu

// What bounds a step: the float32 CUDA cores, the bf16 tensor cores, or the memory's bandwidth.
typedef enum { LIMIT_FP32, LIMIT_BF16, LIMIT_BANDWIDTH } LadderLimit;

typedef struct {
    const char* number;  // "01": the order of the ladder
    const char* family;  // "matmul", "attention", "layernorm"
    const char* what;    // what this step changes from the one before, in a few words
    LadderLimit limit;
    double ms;           // the median time at the big shape; < 0 until timed
    double work;         // FLOPs (LIMIT_FP32, LIMIT_BF16) or bytes (LIMIT_BANDWIDTH) per launch
    bool sm90a;          // Hopper's wgmma and TMA (an sm_90a build): runs on compute capability 9.0 only
} LadderStep;

static int ladder_shape_big(void) {
#ifdef CUDA_EMU
    return 0;  // the emulator runs each thread on the CPU: small shapes, correctness only
#else
    return 1;
#endif
}

static void ladder_begin(LadderStep* s) {
    cuda_make_target = "kernels";  // what an error that asks for a rebuild names
    cuda_cpu_instead = "make kernels-emu (the ladder on the CPU emulator)";
    cuda_device_init();
    s->ms = -1.0;
    printf("step %s (%s): %s\n", s->number, s->family, s->what);
    printf("device: %s, %d SMs\n", cuda_device.prop.name, cuda_device.prop.multiProcessorCount);
}

static double ladder_peak(LadderLimit limit) {
    return limit == LIMIT_FP32 ? cuda_device.peak_flops
         : limit == LIMIT_BF16 ? peak_flops_bf16()
                               : cuda_device.peak_bandwidth;
}
static const char* ladder_unit(LadderLimit limit) { return limit == LIMIT_BANDWIDTH ? "GB/s" : "TFLOP/s"; }
static const char* ladder_limit_name(LadderLimit limit) {
    return limit == LIMIT_FP32 ? "float32 peak" : limit == LIMIT_BF16 ? "bf16 tensor peak" : "memory bandwidth";
}
// FLOP/s in TFLOP/s, bytes/s in GB/s
static double ladder_rate(const LadderStep* s) {
    return s->work / (s->ms * 1e-3) / (s->limit == LIMIT_BANDWIDTH ? 1e9 : 1e12);
}

// Times launch() at the big shape: 3 warm-up launches, then the median of 20 timed with CUDA
// events. work: the FLOPs the step must do, or the fewest bytes it must move (each input read
// once, each output written once), whichever s->limit says bounds it.
template <typename F>
static void ladder_time(LadderStep* s, F launch, double work) {
    if (!ladder_shape_big()) return;
    s->work = work;
    s->ms = median_ms_gpu(launch);
    printf("  time %.3f ms, %.2f %s, %.1f%% of the %s\n", s->ms, ladder_rate(s), ladder_unit(s->limit),
           100.0 * work / (s->ms * 1e-3) / ladder_peak(s->limit), ladder_limit_name(s->limit));
}

// Whether this GPU runs the step's instructions: sm_90a code runs on compute capability 9.0 alone
// (the emulator reports 9.0).
static bool ladder_can_run(const LadderStep* s) {
    return !s->sm90a || (cuda_device.prop.major == 9 && cuda_device.prop.minor == 0);
}

// The row of LADDER_TSV (see above).
static void ladder_tsv_row(const LadderStep* s, const char* verdict, double rate, double pct) {
    const char* tsv = getenv("LADDER_TSV");
    if (tsv == NULL || tsv[0] == '\0') return;
    FILE* f = fopen_check(tsv, "a");
    fprintf(f, "%s\t%s\t%s\t%s\t%.4f\t%.3f\t%s\t%.2f\t%s\n", s->number, s->family, s->what, verdict, s->ms, rate,
            ladder_unit(s->limit), pct, ladder_limit_name(s->limit));
    fclose_check(f, tsv);
}

// A step this GPU cannot run: the last line says SKIP and why, and the exit status is 0.
static int ladder_skip(const LadderStep* s, const char* why) {
    printf("SKIP %s %-9s %-44s %s\n", s->number, s->family, s->what, why);
    ladder_tsv_row(s, "SKIP", 0.0, 0.0);
    return 0;
}

// The step's last line (and its row in LADDER_TSV); the exit status: 1 when anything failed.
static int ladder_end(const LadderStep* s) {
    const char* verdict = failures == 0 ? "PASS" : "FAIL";
    char timing[128] = "not timed (the emulator checks correctness only)";
    double rate = 0.0, pct = 0.0;
    if (s->ms >= 0.0) {
        rate = ladder_rate(s);
        pct = 100.0 * s->work / (s->ms * 1e-3) / ladder_peak(s->limit);
        snprintf(timing, sizeof(timing), "%8.3f ms %9.2f %-7s %5.1f%% of %s", s->ms, rate, ladder_unit(s->limit),
                 pct, ladder_limit_name(s->limit));
    }
    printf("%s %s %-9s %-44s %s\n", verdict, s->number, s->family, s->what, timing);
    ladder_tsv_row(s, verdict, rate, pct);
    return failures == 0 ? 0 : 1;
}

#endif  // DEV_KERNELS_LADDER_CUH
