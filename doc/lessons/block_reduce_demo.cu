// doc/lessons/block_reduce_demo.cu: Lesson 5's warp and block reductions (gpt2/gpu/cuda_utils.cuh),
// run on the CPU emulator of CUDA (dev/emu/cuda_emu.h). One block of 256 threads, thread i holding
// the value i: warp_sum gives every lane its warp's sum, block_sum every thread the block's sum, and
// a second block_sum right after the first reuses the same shared array `partial`.
//
//   bash doc/lessons/emu.sh doc/lessons/block_reduce_demo.cu                    the reductions
//   bash doc/lessons/emu.sh --race doc/lessons/block_reduce_demo.cu one-barrier
//
// `one-barrier` takes the second sum with block_sum_one_barrier below: block_reduce without its
// first __syncthreads. The emulator's race detector stops it, naming the two lines that race.

#include <stdio.h>
#include <string.h>
#include "../../gpt2/gpu/cuda_utils.cuh"

#define THREADS 256

// block_reduce (gpt2/gpu/cuda_utils.cuh) for a sum, less the __syncthreads before `partial` is
// written: wrong when it is called twice in a row, as the kernel below does.
__device__ float block_sum_one_barrier(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;  // a slower warp may still be reading the last call's values
    __syncthreads();
    return warp_sum(lane < nwarps ? partial[lane] : 0.0f);
}

__global__ void reductions_kernel(float* warp_sums, float* first, float* second, int one_barrier) {
    float v = (float)threadIdx.x;
    warp_sums[threadIdx.x] = warp_sum(v);
    if (one_barrier) {
        first[threadIdx.x] = block_sum_one_barrier(v);
        second[threadIdx.x] = block_sum_one_barrier(2.0f * v);
    } else {
        first[threadIdx.x] = block_sum(v);
        second[threadIdx.x] = block_sum(2.0f * v);
    }
}

// Whether all n values equal the first; prints it.
static int print_same(const char* what, const float* x, int n) {
    int same = 1;
    for (int i = 1; i < n; i++) same &= x[i] == x[0];
    printf("%s %.0f%s\n", what, x[0], same ? "" : " (but not in every thread)");
    return same;
}

int main(int argc, char** argv) {
    int one_barrier = argc > 1 && strcmp(argv[1], "one-barrier") == 0;
    float *d_warp, *d_first, *d_second;
    cuda_check(cudaMalloc((void**)&d_warp, THREADS * sizeof(float)));
    cuda_check(cudaMalloc((void**)&d_first, THREADS * sizeof(float)));
    cuda_check(cudaMalloc((void**)&d_second, THREADS * sizeof(float)));
    reductions_kernel<<<1, THREADS>>>(d_warp, d_first, d_second, one_barrier);
    launch_check(reductions_kernel);
    float warp[THREADS], first[THREADS], second[THREADS];
    cuda_check(cudaMemcpy(warp, d_warp, sizeof(warp), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(first, d_first, sizeof(first), cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(second, d_second, sizeof(second), cudaMemcpyDeviceToHost));
    int ok = 1;
    printf("one block of %d threads (%d warps), thread i holding v = i\n", THREADS, THREADS / 32);
    for (int w = 0; w < THREADS / 32; w += 7) {
        char what[64];
        snprintf(what, sizeof(what), "warp_sum, warp %d (threads %d..%d), in its 32 lanes:", w, 32 * w, 32 * w + 31);
        ok &= print_same(what, warp + 32 * w, 32);
    }
    ok &= print_same("block_sum(v) in all 256 threads:", first, THREADS);
    ok &= print_same("block_sum(2 v) right after it, in all 256 threads:", second, THREADS);
    cuda_check(cudaFree(d_warp));
    cuda_check(cudaFree(d_first));
    cuda_check(cudaFree(d_second));
    return ok ? 0 : 1;
}
