// dev/kernels/18_layernorm_warp.cu: layernorm's forward, one warp per row: the project's kernel
// for any C (gpt2/gpu/layernorm.cuh, layernorm_forward_strided_kernel<float>, which
// layernorm_forward_gpu runs for rows that do not fit 19's registers).
//
// What changed from 17: a row is a warp's, not a thread's. Lane l reads x[l], x[l + 32], ...:
// at each step the 32 lanes read 32 consecutive floats, 128 bytes in four whole sectors
// (coalesced), where step 17's warp asked for 32 sectors at once. The sums over the row end in
// warp_sum, five shuffles across the lanes' partial sums (no shared memory, no __syncthreads).
// 32768 rows are now a million threads, 4096 blocks of 8 warps: every SM is full, with many
// loads in flight. The passes are still three (mean, variance of x - mean, output), but the
// second and third read a row that its warp has just read: a block's 8 rows are 24 KB, the rows
// of an SM's 64 resident warps 192 KB, and they come back from L1 or L2, not DRAM.
//
// The roofline at the timed shape (32768 rows of C = 768): 201.6 MB, 42 us at an H200's 4.8 TB/s,
// 60 us at an H100's 3.35 TB/s. This step should reach well over half of it; what it lacks: each
// pass waits for the row's loads and its warp_sum before the next begins, and the re-reads cost
// L1/L2 requests and latency. Next (19): read the row from memory once, into registers.

#include "layernorm.cuh"
#include "../../gpt2/gpu/layernorm.cuh"  // layernorm_forward_strided_kernel

static void layernorm_forward18(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, int B, int T, int C) {
    int N = B * T;
    layernorm_forward_strided_kernel<float><<<ceil_div(N, 8), 256>>>(out, mean, rstd, inp, weight, bias, N, C);
    launch_check(layernorm_forward_strided_kernel);
}

int main(void) {
    return layernorm_step_main({"18", "layernorm", "a warp per row: coalesced, warp_sum"}, layernorm_forward18);
}
