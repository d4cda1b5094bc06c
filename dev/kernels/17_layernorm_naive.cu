// dev/kernels/17_layernorm_naive.cu: layernorm's forward on the GPU, one thread per row.
//
// The first rung of the layernorm ladder: the CPU's loop over rows becomes the grid, and each
// thread runs the CPU's loops over its row as they are: a pass for the mean, a pass for the
// variance of x - mean, a pass for the output. Layernorm does about 8 FLOPs per float it moves, so
// the memory's bandwidth bounds it: at the timed shape (32768 rows of C = 768) the fewest bytes
// are 201.6 MB (inp read and out written, 100.7 MB each; mean, rstd, weight and bias are small),
// 42 us at an H200's 4.8 TB/s, 60 us at an H100's 3.35 TB/s. This step reaches a small fraction:
//  - uncoalesced: at each i the 32 threads of a warp read x[i] of 32 rows that lie C floats
//    (3 KB) apart: 32 separate 32-byte sectors for 128 useful bytes. L1 may keep a sector until
//    its thread has read all 8 of its floats, but every load is still 32 requests to serve;
//  - three passes over a row that the next passes find neither in L1 (each thread's rows are 3 KB,
//    a block's 768 KB) nor in L2 (the 100 MB of all rows are being read at once): inp is read from
//    DRAM three times, twice the fewest bytes overall;
//  - few threads: 32768 rows are 32768 threads, 128 blocks of 256: 8 warps on each of 128 of the
//    132 SMs of an H100 or H200, which hold 64 each: too few loads in flight to cover DRAM's latency.
// Next (18): a warp per row, whose 32 lanes read 32 consecutive floats.
//
//   make kernels-emu     every step on the CPU emulator of CUDA: small shapes, PASS or FAIL
//   make kernels         every step on a GPU: checked, then timed at the shape above

#include "layernorm.cuh"

__global__ void layernorm_forward_kernel17(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                           const float* bias, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    // The CPU reference loop (gpt2/cpu_layers.h), repeated here on purpose: each ladder file reads alone.
    const float* x = inp + (size_t)row * C;
    float m = 0.0f;
    for (int i = 0; i < C; i++) m += x[i];
    m /= C;
    float v = 0.0f;
    for (int i = 0; i < C; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    v /= C;
    float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
    float* o = out + (size_t)row * C;
    for (int i = 0; i < C; i++) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
    mean[row] = m;
    rstd[row] = s;
}

static void layernorm_forward17(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, int B, int T, int C) {
    int N = B * T;
    layernorm_forward_kernel17<<<ceil_div(N, 256), 256>>>(out, mean, rstd, inp, weight, bias, N, C);
    launch_check(layernorm_forward_kernel17);
}

int main(void) {
    return layernorm_step_main({"17", "layernorm", "naive: one thread per row"}, layernorm_forward17);
}
