// dev/kernels/layernorm.cuh: the frame of the layernorm steps of the ladder (17 to 19). Every step
// computes layernorm_forward of gpt2/cpu_layers.h: for each of the B*T rows x of C floats,
//     mean = sum(x) / C,   rstd = 1 / sqrt(sum((x - mean)^2) / C + eps),
//     out  = (x - mean) * rstd * weight + bias
// and its main is one call, layernorm_step_main, which checks the step's launcher (out, mean and
// rstd) against the CPU on small shapes, then, on a GPU, on 32768 rows of C = 768 (B = 32, T =
// 1024: 100 MB in and 100 MB out, several times the 50-60 MB L2, so that the time is the DRAM's),
// which it also times.
//
// Layernorm does about 8 FLOPs per float it moves: it is bound by the memory's bandwidth, and its
// work is the fewest bytes it must move: inp read once, out written once, mean and rstd written,
// weight and bias read once.

#ifndef DEV_KERNELS_LAYERNORM_CUH
#define DEV_KERNELS_LAYERNORM_CUH

#include "ladder.cuh"

// The launcher every step defines, with the CPU function's signature.
typedef void (*LayernormForward)(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int B, int T, int C);

// The shapes every step must get right: B, T, C and the range of the inputs. The warp-per-row
// steps put 8 rows in a block, and no B*T here is a multiple of 8: the last block has idle warps.
typedef struct {
    int B, T, C;
    float lo, hi;
} LayernormShape;
static const LayernormShape LAYERNORM_SHAPES[] = {
    {2, 37, 768, -2.0f, 3.0f},     // GPT-2 124M's C; mean 0.5, so the mean's subtraction matters
    {3, 3, 100, -2.0f, 3.0f},      // C % 4 == 0, but 25 float4s: lanes 25 to 31 of a warp hold none
    {1, 5, 37, -2.0f, 3.0f},       // odd C: no float4 loads; 5 of 32 lanes hold two values, the rest one
    {1, 13, 768, 100.0f, 101.0f},  // a mean of 100.5 against a spread of 0.29: E[x^2] - E[x]^2 in float32
                                   // loses 17 of its 24 bits here (E[x^2] / var = 1.2e5), the variance of
                                   // x - mean none
};

// One shape: random inputs, the CPU's layernorm_forward, the step's launcher on NaN-poisoned
// outputs, every value compared; then, if `timed`, the launcher timed on the same buffers.
//
// The tolerances, |gpu - cpu| <= atol + rtol |cpu| + slack:
//  - mean: the CPU adds a row's C values one after another in float32. Each addition rounds its
//    partial sum, of size up to k |x|avg after k terms, by up to 2^-24 of it; rounding errors of
//    random sign add up to a deviation of about 2^-24 |x|avg C^1.5 / 3 in the sum, so
//    2^-24 |x|avg sqrt(C) / 3 in the mean. The slack allows 6 of those for the CPU and 1.5 more
//    for the GPU (its lanes' partial sums are 32 times shorter): 2.5 * 2^-24 |x|avg sqrt(C)
//    (C = 768, values near 100.5: 4.2e-4, 4e-6 of the mean). atol and rtol: the final division.
//  - rstd: the sum of C squares (x - mean)^2, all positive, so its rounding is relative: about
//    2^-24 sqrt(C) / 3 (5.5e-7 at C = 768), and the mean's error shifts the variance by only its
//    square. rtol 1e-5 allows 10 of those for both sides; it would not pass the 1e-2 that E[x^2] -
//    E[x]^2 loses on the inputs in [100, 101].
//  - out: (x - mean) is exact for x near mean (Sterbenz), so out inherits the mean's error times
//    rstd |weight|: that is its slack, value by value. atol 1e-5: a few roundings of terms of size
//    up to about 3 (|weight n| + |bias|), and rstd's relative error (about 1e-6) times |weight n|.
static void layernorm_check(LayernormForward forward, LayernormShape sh, LadderStep* s, bool timed) {
    int B = sh.B, T = sh.T, C = sh.C;
    size_t N = (size_t)B * T, NC = N * C;
    printf("layernorm B=%d T=%d C=%d, inputs in [%g, %g]\n", B, T, C, sh.lo, sh.hi);
    float* inp = host_random(NC, sh.lo, sh.hi);
    float *weight = host_random(C, 0.5f, 1.5f), *bias = host_random(C, -0.5f, 0.5f);
    float *out = host_zeros(NC), *mean = host_zeros(N), *rstd = host_zeros(N);
    layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C);
    float *d_inp = to_device(inp, NC), *d_weight = to_device(weight, C), *d_bias = to_device(bias, C);
    float *d_out = device_poisoned(NC), *d_mean = device_poisoned(N), *d_rstd = device_poisoned(N);
    forward(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, B, T, C);

    float *mean_slack = host_zeros(N), *out_slack = host_zeros(NC);
    for (size_t row = 0; row < N; row++) {
        double abs_sum = 0.0;
        for (int i = 0; i < C; i++) abs_sum += fabsf(inp[row * C + i]);
        mean_slack[row] = (float)(2.5 * 0x1p-24 * sqrt((double)C) * abs_sum / C);
        for (int i = 0; i < C; i++) out_slack[row * C + i] = fabsf(weight[i]) * rstd[row] * mean_slack[row];
    }
    float *h_out = to_host(d_out, NC), *h_mean = to_host(d_mean, N), *h_rstd = to_host(d_rstd, N);
    compare_host_slack("out", h_out, out, NC, 1e-5f, 1e-5f, NULL, out_slack);
    compare_host_slack("mean", h_mean, mean, N, 1e-7f, 1e-6f, NULL, mean_slack);
    compare_host("rstd", h_rstd, rstd, N, 1e-7f, 1e-5f, NULL);
    free(h_out); free(h_mean); free(h_rstd); free(mean_slack); free(out_slack);

    if (timed) {
        double bytes = 4.0 * (2.0 * NC + 2.0 * N + 2.0 * C);
        ladder_time(s, [&] { forward(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, B, T, C); }, bytes);
    }
    free(inp); free(weight); free(bias); free(out); free(mean); free(rstd);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_weight)); cuda_check(cudaFree(d_bias));
    cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_mean)); cuda_check(cudaFree(d_rstd));
}

static int layernorm_step_main(LadderStep s, LayernormForward forward) {
    s.limit = LIMIT_BANDWIDTH;
    ladder_begin(&s);
    for (const LayernormShape& sh : LAYERNORM_SHAPES) layernorm_check(forward, sh, &s, false);
    if (ladder_shape_big()) layernorm_check(forward, {32, 1024, 768, -2.0f, 3.0f}, &s, true);
    return ladder_end(&s);
}

#endif  // DEV_KERNELS_LAYERNORM_CUH
