// gpt2/gpu/optimizer.cuh: the end of a training step: the gradients' global norm (a fixed-order
// sum in double), scaling and clipping, and AdamW, writing the bf16 copy as it updates.

#ifndef GPT2_GPU_OPTIMIZER_CUH
#define GPT2_GPU_OPTIMIZER_CUH

#include "../arithmetic.h"  // clip_factor, adamw_step, adamw_update
#include "../model.h"       // GPT2, PARAMETERS
#include "cuda_utils.cuh"

#define NORM_BLOCKS 512  // fixed, not per device: the summation order, hence the bits, never change

// Stage 1: partial[b] = block b's sum of x[i]^2, in double as on the CPU (float loses digits).
__global__ void norm_squared_kernel(double* partial, const float* x, size_t n) {
    double sum = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        sum += (double)x[i] * x[i];
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// Stage 2: one block adds the NORM_BLOCKS partial sums into partial[NORM_BLOCKS].
__global__ void norm_finish_kernel(double* partial, int n) {
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += partial[i];
    sum = block_sum(sum);
    if (threadIdx.x == 0) partial[n] = sum;
}

__global__ void scale_kernel(float* x, float s, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

// The sum of the squares of x[0..n), in double, in a fixed order: the same bits every run.
static double sum_of_squares_gpu(const float* x, size_t n) {
    double* partial = (double*)scratch_floats(2 * (NORM_BLOCKS + 1));
    norm_squared_kernel<<<NORM_BLOCKS, 256>>>(partial, x, n);
    launch_check(norm_squared_kernel);
    norm_finish_kernel<<<1, 256>>>(partial, NORM_BLOCKS);
    launch_check(norm_finish_kernel);
    double sum;
    cuda_check(cudaMemcpy(&sum, partial + NORM_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost));
    return sum;
}

static void scale_gpu(float* x, size_t n, float factor) {
    if (n == 0) return;
    scale_kernel<<<ceil_div(n, 256), 256>>>(x, factor, n);
    launch_check(scale_kernel);
}

// One AdamW step, one thread per parameter: adamw_update, the CPU's formula. params16 (bf16
// path) gets each new value rounded to bf16: the copy the forward and backward read.
__global__ void adamw_kernel(float* params, bf16* params16, const float* grads, float* m, float* v, size_t n,
                             AdamWStep s, float decay) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float p = adamw_update(params[i], grads[i], &m[i], &v[i], s, decay);
    params[i] = p;
    if (params16 != NULL) params16[i] = __float2bfloat16(p);
}

// One AdamW step (t from 1), as the CPU's gpt2_update, of parameters [opt_offset, +opt_count)
// (all but under ZeRO-1), held in master, m and v from opt_offset on; one launch per tensor,
// decay on matrices only. params16, if not NULL, gets the new bf16 values at model positions.
static void adamw_update_gpu(GPT2* model, float* master, bf16* params16, float lr, float beta1, float beta2,
                             float eps, float weight_decay, int t) {
    AdamWStep s = adamw_step(lr, beta1, beta2, eps, t);
    size_t lo = model->opt_offset, hi = lo + model->opt_count, start = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        size_t end = start + model->param_sizes[k];
        size_t from = start > lo ? start : lo, to = end < hi ? end : hi;  // tensor k's part of the range
        start = end;
        if (from >= to) continue;
        float decay = PARAMETERS[k].decay ? 1.0f - lr * weight_decay : 1.0f;
        size_t n = to - from;
        adamw_kernel<<<ceil_div(n, 256), 256>>>(master + (from - lo), params16 != NULL ? params16 + from : NULL,
                                                model->grads_memory + from, model->m_memory + (from - lo),
                                                model->v_memory + (from - lo), n, s, decay);
        launch_check(adamw_kernel);
    }
}

#endif // GPT2_GPU_OPTIMIZER_CUH
