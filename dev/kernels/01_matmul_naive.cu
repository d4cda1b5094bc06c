// dev/kernels/01_matmul_naive.cu: the linear layer's forward on the GPU, one thread per output.
//
// The first rung of the matmul ladder: the CPU's loops over rows m and columns n become the grid,
// and each thread keeps the loop over k. Thread (m, n) reads row m of inp and row n of weight, C
// floats each, from device memory, for 2C FLOPs: no value is reused from anything faster. The
// threads of a warp take 32 consecutive n, so at each k the warp reads 32 floats of weight that
// lie C floats apart (32 separate memory transactions for 128 useful bytes) and one float of inp,
// which all 32 share. Next (02): make each warp's reads contiguous.
//
//   make kernels-emu     every step on the CPU emulator of CUDA: small shapes, PASS or FAIL
//   make kernels         every step on a GPU: checked, then timed at GPT-2 124M's shapes

#include "matmul.cuh"

__global__ void matmul_forward_kernel1(float* out, const float* inp, const float* weight, const float* bias, int M,
                                       int N, int K) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    float sum = bias[n];
    for (int k = 0; k < K; k++) sum += inp[(size_t)m * K + k] * weight[(size_t)n * K + k];
    out[(size_t)m * N + n] = sum;
}

static void matmul_forward1(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                            int C, int OC) {
    dim3 block(32, 8);  // a warp along n, 8 warps along m
    dim3 grid(ceil_div(OC, 32), ceil_div(B * T, 8));
    matmul_forward_kernel1<<<grid, block>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel1);
}

int main(void) {
    return matmul_step_main({"01", "matmul", "naive: one thread per output"}, matmul_forward1);
}
