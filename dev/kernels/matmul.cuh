// dev/kernels/matmul.cuh: the frame of the matmul steps of the ladder (01 to 12). Every step
// computes the linear layer's forward, as matmul_forward in gpt2/cpu_layers.h does:
//     out (B*T, OC) = inp (B*T, C) . weight (OC, C)^T + bias (OC)
// and its main is one call: matmul_step_main (float32 steps), matmul_step_main_bf16 (the tensor
// cores' steps: bf16 inputs and output, float32 bias and accumulation) or matmul_step_main_sm90a
// (the bf16 steps on Hopper's wgmma and TMA: skipped on other GPUs). All check the step's
// launcher against the CPU on shapes that leave partial tiles at every edge and on a shape of
// whole tiles, then, on a GPU, at GPT-2 124M's MLP product (B=4, T=1024, C=768, OC=3072), which
// they also time: 2 B T C OC FLOPs.

#ifndef DEV_KERNELS_MATMUL_CUH
#define DEV_KERNELS_MATMUL_CUH

#include "ladder.cuh"

// The launcher every float32 step defines, with the CPU function's signature.
typedef void (*MatmulForward)(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                              int C, int OC);
typedef void (*MatmulForwardBf16)(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int T,
                                  int C, int OC);

// The shapes every step must get right, the float32 steps and the bf16 ones alike (the project's
// bf16 GEMM takes any M, N, K; steps 08, 10 and 11 ask C to be a multiple of 8, as all of these
// are, which is all the vectorised steps ask of their inputs: their launchers say so when it is
// not). No C here is a multiple of 64 but one: the 64-wide k slices of 10 to 12 end in zeros.
static const int MATMUL_SHAPES[][4] = {
    {2, 37, 40, 72},   // B*T = 74 and OC = 72: partial tiles on both sides of the output
    {1, 3, 24, 10},    // fewer rows and columns than one tile holds; OC = 10: no 16-byte rows of out
    {1, 64, 64, 128},  // whole tiles only
    {1, 50, 776, 40},  // a long k and one tile of out: the project's kernels (07, 09, 12) split k
                       // in slices (split-K), the last ending in a partial k tile
};

// One shape: random inputs, the CPU's matmul_forward, the step's launcher on a NaN-poisoned
// output, every element compared; then, if `timed`, the launcher timed on the same buffers.
static void matmul_check(MatmulForward forward, int B, int T, int C, int OC, LadderStep* s, bool timed) {
    size_t BT = (size_t)B * T;
    printf("matmul B=%d T=%d C=%d OC=%d\n", B, T, C, OC);
    float *inp = host_random(BT * C, -1, 1), *weight = host_random((size_t)OC * C, -1, 1);
    float *bias = host_random(OC, -1, 1), *out = host_zeros(BT * OC);
    matmul_forward(out, inp, weight, bias, B, T, C, OC);
    float *d_inp = to_device(inp, BT * C), *d_weight = to_device(weight, (size_t)OC * C);
    float *d_bias = to_device(bias, OC), *d_out = device_poisoned(BT * OC);
    forward(d_out, d_inp, d_weight, d_bias, B, T, C, OC);
    compare("out", d_out, out, BT * OC, fp32_sum_atol(C), 1e-5f);
    if (timed) ladder_time(s, [&] { forward(d_out, d_inp, d_weight, d_bias, B, T, C, OC); }, 2.0 * BT * C * OC);
    free(inp); free(weight); free(bias); free(out);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_weight)); cuda_check(cudaFree(d_bias));
    cuda_check(cudaFree(d_out));
}

// A step's run: `check` (matmul_check or matmul_check_bf16) on every shape, then, with a GPU, on
// GPT-2 124M's MLP product, timed.
template <typename Forward, typename Check>
static int matmul_steps(LadderStep s, Forward forward, Check check) {
    ladder_begin(&s);
    if (!ladder_can_run(&s)) return ladder_skip(&s, "(wgmma and TMA need an sm_90 GPU: H100, H200)");
    for (const auto& shape : MATMUL_SHAPES) check(forward, shape[0], shape[1], shape[2], shape[3], &s, false);
    if (ladder_shape_big()) check(forward, 4, 1024, 768, 3072, &s, true);
    return ladder_end(&s);
}

static int matmul_step_main(LadderStep s, MatmulForward forward) {
    s.limit = LIMIT_FP32;
    return matmul_steps(s, forward, matmul_check);
}

// ---------- the bf16 steps (08 to 12) ----------
//
// The tensor cores' steps take bf16 inp and weight, a float32 bias, accumulate in float32 and
// write bf16 out, as the project's bf16 path does. The inputs are drawn as floats and rounded to
// bf16 on the host, and the CPU reference runs on the rounded values, so what is checked is the
// kernel, not bf16's rounding of its inputs. The products of two bf16 are exact in float32, so
// before its last rounding the GPU's sum differs from the CPU's only by float32 rounding in a
// different order: fp32_sum_atol(C), as for the float32 steps. Then the one rounding of out to
// bf16 (8 significant bits) moves a value v by at most half a unit in its last place, which is
// 2^-8 |v| at worst (v just above a power of two; 2^-9 |v| just below the next one): rtol 2^-8,
// and atol grown by the same factor, since v itself may be off by atol.

// matmul_check for a bf16 step: the same shapes, checks and timing, on bf16 operands.
static void matmul_check_bf16(MatmulForwardBf16 forward, int B, int T, int C, int OC, LadderStep* s, bool timed) {
    size_t BT = (size_t)B * T;
    printf("matmul bf16 B=%d T=%d C=%d OC=%d\n", B, T, C, OC);
    float *inp = host_random(BT * C, -1, 1), *weight = host_random((size_t)OC * C, -1, 1);
    float *bias = host_random(OC, -1, 1), *out = host_zeros(BT * OC);
    bf16 *d_inp = to_device_bf16(inp, BT * C), *d_weight = to_device_bf16(weight, (size_t)OC * C);
    matmul_forward(out, inp, weight, bias, B, T, C, OC);  // on the rounded inputs
    float* d_bias = to_device(bias, OC);
    bf16* d_out = device_poisoned_bf16(BT * OC);
    forward(d_out, d_inp, d_weight, d_bias, B, T, C, OC);
    const float rtol = BF16_RTOL;  // the rounding of out to bf16 (above)
    float* got = to_host_bf16(d_out, BT * OC);
    compare_host("out (bf16)", got, out, BT * OC, fp32_sum_atol(C) * (1.0f + rtol), rtol, NULL);
    if (timed) ladder_time(s, [&] { forward(d_out, d_inp, d_weight, d_bias, B, T, C, OC); }, 2.0 * BT * C * OC);
    free(inp); free(weight); free(bias); free(out); free(got);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_weight)); cuda_check(cudaFree(d_bias));
    cuda_check(cudaFree(d_out));
}

static int matmul_step_main_bf16(LadderStep s, MatmulForwardBf16 forward) {
    s.limit = LIMIT_BF16;
    return matmul_steps(s, forward, matmul_check_bf16);
}

// A bf16 step built for sm_90a (10 to 12): the same checks, on compute capability 9.0 only.
static int matmul_step_main_sm90a(LadderStep s, MatmulForwardBf16 forward) {
    s.sm90a = true;
    return matmul_step_main_bf16(s, forward);
}

#endif  // DEV_KERNELS_MATMUL_CUH
