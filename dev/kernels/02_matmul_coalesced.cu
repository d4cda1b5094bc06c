// dev/kernels/02_matmul_coalesced.cu: the linear layer's forward on the GPU, one warp per output,
// its lanes striding along k.
//
// What changed from 01: the loop over k is spread over the 32 lanes of a warp, and a warp_sum adds
// their partial sums. The weight is stored (OC, C): both operands run along k in memory (a row of
// inp, a row of weight), so no layout of one thread per output can be coalesced, since
// neighbouring threads there read rows C floats apart. Here lane l reads k = l, l + 32, ...: at
// each step the warp reads 32 consecutive floats (128 bytes, one line) of inp and 32 of weight,
// where 01's warp read one float of inp and 32 floats of weight from 32 different lines. A load
// instruction now costs the L1 one 128-byte line instead of 32, and no byte fetched goes unused.
//
// Why it is still slow: nothing is reused. Each output still reads its 2C floats (6 KiB at
// C = 768) and does 2C FLOPs with them: 0.25 FLOP per byte, where an H100's FMA units do about 20
// float32 FLOPs in the time its DRAM moves a byte, and several even per byte of L2's bandwidth.
// The 8 warps of a block share a row of inp (an L1 hit after the first), but the
// rows of weight come from L2 over and over: L2's bandwidth bounds this step. The 5 shuffles of
// the warp_sum add a little per output (against C / 32 = 24 FMAs per lane at C = 768).
// Next (03): stage tiles of inp and weight in shared memory, so that each value fetched from
// global memory serves many outputs.

#include "matmul.cuh"

__global__ void matmul_forward_kernel2(float* out, const float* inp, const float* weight, const float* bias, int M,
                                       int N, int K) {
    int lane = threadIdx.x % 32;
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // the warps of a block: consecutive n
    int m = blockIdx.y;
    if (n >= N) return;  // the whole warp: warp_sum needs all 32 lanes
    const float* x = inp + (size_t)m * K;
    const float* w = weight + (size_t)n * K;
    float sum = 0.0f;
    for (int k = lane; k < K; k += 32) sum += x[k] * w[k];
    sum = warp_sum(sum);
    if (lane == 0) out[(size_t)m * N + n] = sum + bias[n];
}

static void matmul_forward2(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                            int C, int OC) {
    const int warps = 8;  // per block: 8 outputs of one row of out, which share that row of inp
    if (B * T > 65535) fail("matmul_forward2: B*T = %d rows exceed the grid's 65535 blocks along y", B * T);
    dim3 grid(ceil_div(OC, warps), B * T);
    matmul_forward_kernel2<<<grid, warps * 32>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel2);
}

int main(void) {
    return matmul_step_main({"02", "matmul", "coalesced: a warp per output, lanes along k"}, matmul_forward2);
}
