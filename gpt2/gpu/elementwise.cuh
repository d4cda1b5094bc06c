// gpt2/gpu/elementwise.cuh: the layers that work element by element on the GPU, in float32:
// GELU and the residual add, forward and backward (gpt2/cpu_layers.h: gelu_forward, ...), one
// thread per element; and the conversion of float32 to bf16. (The bf16 path fuses GELU and the
// residual add into its products: gpt2/gpu/matmul_bf16.cuh.)

#ifndef GPT2_GPU_ELEMENTWISE_CUH
#define GPT2_GPU_ELEMENTWISE_CUH

#include "../arithmetic.h"  // gelu, gelu_grad
#include "cuda_utils.cuh"

// GELU element by element (gpt2/arithmetic.h: gelu, gelu_grad).
__global__ void gelu_forward_kernel(float* out, const float* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    out[i] = gelu(inp[i]);
}

static void gelu_forward_gpu(float* out, const float* inp, int N) {
    gelu_forward_kernel<<<ceil_div(N, 256), 256>>>(out, inp, N);
    launch_check(gelu_forward_kernel);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    dinp[i] += dout[i] * gelu_grad(inp[i]);
}

static void gelu_backward_gpu(float* dinp, const float* inp, const float* dout, int N) {
    gelu_backward_kernel<<<ceil_div(N, 256), 256>>>(dinp, inp, dout, N);
    launch_check(gelu_backward_kernel);
}

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = inp1[i] + inp2[i];
}

static void residual_forward_gpu(float* out, const float* inp1, const float* inp2, int N) {
    residual_forward_kernel<<<ceil_div(N, 256), 256>>>(out, inp1, inp2, N);
    launch_check(residual_forward_kernel);
}

__global__ void residual_backward_kernel(float* dinp1, float* dinp2, const float* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
}

static void residual_backward_gpu(float* dinp1, float* dinp2, const float* dout, int N) {
    residual_backward_kernel<<<ceil_div(N, 256), 256>>>(dinp1, dinp2, dout, N);
    launch_check(residual_backward_kernel);
}

// out = in rounded to the nearest bf16.
__global__ void float_to_bf16_kernel(bf16* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(in[i]);
}

static void float_to_bf16_gpu(bf16* out, const float* in, size_t n) {
    float_to_bf16_kernel<<<ceil_div(n, 256), 256>>>(out, in, n);
    launch_check(float_to_bf16_kernel);
}

#endif // GPT2_GPU_ELEMENTWISE_CUH
