// dev/kernels/19_layernorm_registers.cu: layernorm's forward, one warp per row, the row read from
// memory once: into the lanes' registers.
//
// What changed from 18: the three passes over the row become one read. Each lane loads its C/32
// values of the row into registers (24 at C = 768), all its loads issued before the first is used,
// then computes the mean and the variance of x - mean from the registers, and writes the output.
// The row crosses the memory system once, with a warp's whole row in flight at once, where 18
// waited for each pass's loads and read the row from L1/L2 twice more. Since a lane now owns its
// values, it reads them as float4 where C % 4 == 0 (the rows, then, are 16-byte aligned): a warp's
// load is 512 consecutive bytes, and a quarter of the load instructions.
//
// Why the variance of x - mean, and not one pass of sum(x) and sum(x^2) (var = E[x^2] - E[x]^2)
// nor Welford's update: with the row in registers the second pass costs no memory, only C/32 FMAs
// per lane, and it is the CPU's own formula, as accurate as it. E[x^2] - E[x]^2 in float32 cancels
// on rows whose mean is large against their spread (the check's inputs in [100, 101] lose 17 of
// 24 bits); Welford's (Chan's) combination is accurate too but divides at every step and at every
// shuffle, for nothing here, where the values are still at hand.
//
// The cost: registers. A lane holds LAYERNORM19_MAX_C / 32 floats, 32, fixed at compile time so
// that they are registers (an array indexed by unrolled loops), not local memory; the launcher
// refuses a larger C (GPT-2 124M: 768, 350M: 1024; the larger models need a bigger maximum, or a
// block per row).
//
// The roofline at the timed shape (32768 rows of C = 768): 201.6 MB, 42 us at an H200's 4.8 TB/s,
// 60 us at an H100's 3.35 TB/s. This step moves those bytes and no others (weight and bias, 6 KB,
// stay in L1/L2), so it should reach what a streaming copy reaches, near 90% of the roofline.
//
// The project's layernorm_forward_kernel (gpt2/gpu/layernorm.cuh) is this step for float and
// bf16: 16-byte packs (8 bf16 a load), and a kernel for each size of a lane's share (8, 16, 24 or
// 32 values) rather than one maximum; other rows take 18's kernel.

#include "layernorm.cuh"

// The most floats a row may have: each of its warp's 32 lanes holds 1/32 of them in registers.
#define LAYERNORM19_MAX_C 1024

// W floats that one instruction loads or stores: float4 when W = 4, a float when W = 1.
template <int W>
struct alignas(4 * W) FloatPack {
    float v[W];
};

template <int W>
__global__ void layernorm_forward_kernel19(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                           const float* bias, int N, int C) {
    constexpr int LOADS = LAYERNORM19_MAX_C / 32 / W;  // a lane's loads at most; (k * 32 + lane) * W < C says which
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;  // whole warps leave: the shuffles below still see all 32 lanes
    const float* x = inp + (size_t)row * C;
    FloatPack<W> xs[LOADS];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        int i = (k * 32 + lane) * W;
        if (i < C) xs[k] = *(const FloatPack<W>*)(x + i);
    }
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        if ((k * 32 + lane) * W < C) {
            for (int j = 0; j < W; j++) sum += xs[k].v[j];
        }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        if ((k * 32 + lane) * W < C) {
            for (int j = 0; j < W; j++) {
                float d = xs[k].v[j] - m;
                var += d * d;
            }
        }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LAYERNORM_EPS);
    float* o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < LOADS; k++) {
        int i = (k * 32 + lane) * W;
        if (i < C) {
            FloatPack<W> w = *(const FloatPack<W>*)(weight + i), b = *(const FloatPack<W>*)(bias + i), y;
            for (int j = 0; j < W; j++) y.v[j] = (s * (xs[k].v[j] - m)) * w.v[j] + b.v[j];
            *(FloatPack<W>*)(o + i) = y;
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

static void layernorm_forward19(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, int B, int T, int C) {
    if (C > LAYERNORM19_MAX_C)
        fail("layernorm_forward19: C = %d, but a row must fit in its warp's registers: C <= LAYERNORM19_MAX_C = %d",
             C, LAYERNORM19_MAX_C);
    int N = B * T;
    int blocks = ceil_div(N, 8);  // 8 warps, 8 rows, a block
    // float4 needs every row, and weight and bias, at a multiple of 16 bytes
    if (C % 4 == 0 && aligned16(out) && aligned16(inp) && aligned16(weight) && aligned16(bias)) {
        layernorm_forward_kernel19<4><<<blocks, 256>>>(out, mean, rstd, inp, weight, bias, N, C);
    } else {
        layernorm_forward_kernel19<1><<<blocks, 256>>>(out, mean, rstd, inp, weight, bias, N, C);
    }
    launch_check(layernorm_forward_kernel19);
}

int main(void) {
    return layernorm_step_main({"19", "layernorm", "the row read once, into registers"}, layernorm_forward19);
}
