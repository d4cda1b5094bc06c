// dev/bench/fma_peak.c: measures this machine's peak arithmetic throughput on all OpenMP threads,
// in float32 FMAs (the default) or in bf16 (AVX512_BF16's vdpbf16ps, or AMX's tdpbf16ps where the
// bf16 products run on AMX, gpt2/cpu_amx.h): the compute ceiling that
// train_cpu's matmuls and infer's batched decoding are measured against (doc/cpu_speed.md,
// doc/infer.md). The measurement is gpt2/cpu_peak.h's, the one train_cpu counts its MFU against:
// every thread runs 24 independent vector chains of the instruction, nothing touching memory;
// an FMA on one lane is 2 floating-point operations, a vdpbf16ps lane 4 (two products, two adds);
// AMX: four tiles of sums, each tdpbf16ps 16 x 16 sums of 32 products, 16384 operations.
//
//   gcc -O3 -march=native -fopenmp dev/bench/fma_peak.c -o build/fma_peak
//   ./build/fma_peak [fp32|bf16] [ITERS]    (default fp32, 20000000 rounds per thread per run)
//   prints: fma_peak_gflops 532.0 (threads 2, 16 float lanes, 24 chains; checksum 474.527)
//       or: bf16_peak_gflops 1070.0 (threads 2, vdpbf16ps: 16 float lanes x 2 bf16 products, 24 chains; checksum ...)
//       or: bf16_peak_gflops 7100.0 (threads 2, AMX tdpbf16ps: 16 x 16 sums of 32 bf16 products, 4 tiles; checksum ...)
// A build without AVX512_BF16 (the CPU lacks it, or no -march=native) says so for bf16 and exits 2.

#include <stdlib.h>
#include "../../gpt2/cpu_peak.h"

static long parse_iters(const char* s) {
    char* end;
    long n = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || n < 1) {
        fprintf(stderr, "fma_peak: '%s' is not a count of rounds (a whole number >= 1)\n", s);
        exit(1);
    }
    return n;
}

int main(int argc, char** argv) {
    const char* precision = "fp32";
    int arg = 1;
    if (arg < argc && (strcmp(argv[arg], "fp32") == 0 || strcmp(argv[arg], "bf16") == 0)) precision = argv[arg++];
    long iters = arg < argc ? parse_iters(argv[arg++]) : 20000000;   // ~0.1 s per run on a 2.6 GHz core
    if (arg < argc) {
        fprintf(stderr, "usage: fma_peak [fp32|bf16] [ITERS]\n");
        return 1;
    }
    int bf16 = strcmp(precision, "bf16") == 0;
    int kind = bf16 ? cpu_peak_bf16_kind() : CPU_PEAK_FP32;
    if (bf16 && kind == CPU_PEAK_FP32) {
        fprintf(stderr, "fma_peak: bf16: this build has no AVX512_BF16 (vdpbf16ps): the CPU lacks it, or the build "
                        "was not -march=native\n");
        return 2;
    }
    int threads;
    float checksum;
    double best = cpu_peak_measure(kind, iters, 3, &threads, &checksum);  // best of 3
    if (kind == CPU_PEAK_AMX) {
        printf("bf16_peak_gflops %.1f (threads %d, AMX tdpbf16ps: 16 x 16 sums of 32 bf16 products, 4 tiles; "
               "checksum %g)\n", best, threads, (double)checksum);
    } else if (bf16) {
        printf("bf16_peak_gflops %.1f (threads %d, vdpbf16ps: 16 float lanes x 2 bf16 products, %d chains; checksum %g)\n",
               best, threads, CPU_PEAK_CHAINS, (double)checksum);
    } else {
        printf("fma_peak_gflops %.1f (threads %d, %d float lanes, %d chains; checksum %g)\n", best, threads,
               CPU_PEAK_LANES, CPU_PEAK_CHAINS, (double)checksum);
    }
    return 0;
}
