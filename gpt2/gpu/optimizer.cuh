// gpt2/gpu/optimizer.cuh: the end of a training step, on the device: the step's mean loss, the
// gradients' global norm (fixed-order sums in double), the clip factor, and AdamW, which applies
// it as it updates and writes the bf16 copy.

#ifndef GPT2_GPU_OPTIMIZER_CUH
#define GPT2_GPU_OPTIMIZER_CUH

#include "../arithmetic.h"  // clip_factor, adamw_step, adamw_update
#include "../model.h"       // GPT2, PARAMETERS
#include "cuda_utils.cuh"

#define NORM_BLOCKS 512  // fixed, not per device: the summation order, hence the bits, never change
#define NORM_RANGES NUM_PARAMETER_TENSORS  // grad_norm_ranges gives at most one per tensor

// The step's scalars, kept in device memory so that no pass waits for the host: the losses of
// its forward passes, the gradients' sum of squares, and from them the norm and AdamW's factor.
typedef struct StepScalars {
    double loss_sum;         // the step's forward passes' mean losses, added as they run
    float last_loss;         // the last forward pass's mean loss
    float loss, norm;        // loss_sum / parts, and the global gradient norm times grad_scale
    float grad_factor;       // what AdamW multiplies each gradient by: clip_factor(norm, ...)
    int finite;              // loss and norm finite: AdamW updates only then
    double squares[NORM_RANGES + 1];  // each range's sum of squares, then their total
    double partial[NORM_RANGES][NORM_BLOCKS];
} StepScalars;

// The mean of a forward pass's n losses, summed in double in a fixed order, into last_loss and,
// when the pass counts in the step's loss, added to loss_sum. One block.
__global__ void mean_loss_kernel(StepScalars* s, const float* losses, int n, int counted) {
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += losses[i];
    sum = block_sum(sum);
    if (threadIdx.x == 0) {
        float mean = (float)(sum / n);  // a float, as train_cpu's mean_loss
        s->last_loss = mean;
        if (counted) s->loss_sum += mean;
    }
}

__device__ __forceinline__ double squares_of(float4 v) {
    return (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w;
}

// Stage 1 of a range's sum of squares: partial[b] = block b's, in double as on the CPU. Where x
// is 16-byte aligned four floats a load, two loads in flight per thread (bandwidth needs some
// megabytes in flight: 512 x 256 threads x 32 bytes is 4 MB); the rest one float at a time.
__global__ void norm_squared_kernel(double* partial, const float* x, size_t n) {
    size_t head = ((16 - (uintptr_t)x % 16) % 16) / sizeof(float);  // floats before a 16-byte boundary
    if (head > n) head = n;
    size_t quads = (n - head) / 4, stride = (size_t)gridDim.x * blockDim.x;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* x4 = (const float4*)(x + head);
    double sum = 0.0;
    size_t i = first;
    for (; i + stride < quads; i += 2 * stride) {
        float4 a = x4[i], b = x4[i + stride];
        sum += squares_of(a) + squares_of(b);
    }
    if (i < quads) sum += squares_of(x4[i]);
    for (size_t i = first; i < head; i += stride) sum += (double)x[i] * x[i];
    for (size_t i = head + 4 * quads + first; i < n; i += stride) sum += (double)x[i] * x[i];
    sum = block_sum(sum);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// Stage 2: range r's NORM_BLOCKS partial sums into squares[r].
__global__ void norm_finish_kernel(StepScalars* s) {
    double sum = 0.0;
    for (int i = threadIdx.x; i < NORM_BLOCKS; i += blockDim.x) sum += s->partial[blockIdx.x][i];
    sum = block_sum(sum);
    if (threadIdx.x == 0) s->squares[blockIdx.x] = sum;
}

// The step's end, one thread: the ranges' sums in order (as the host adds them), the norm, the
// clip factor, the mean loss over `parts` passes, and whether to update (gpt2/arithmetic.h).
__global__ void step_scalars_kernel(StepScalars* s, int ranges, float grad_scale, float max_norm, int parts) {
    double squares = 0.0;
    for (int r = 0; r < ranges; r++) squares += s->squares[r];
    s->squares[NORM_RANGES] = squares;
    s->norm = (float)(grad_scale * sqrt(squares));
    s->grad_factor = clip_factor(s->norm, grad_scale, max_norm);
    s->loss = (float)(s->loss_sum / parts);
    s->finite = isfinite(s->loss) && isfinite(s->norm);
}

// The step's scalars of a model, allocated on first use: no loss yet, gradients taken as they are.
static StepScalars* step_scalars_gpu(GPT2* model) {
    if (model->step_gpu == NULL) {
        StepScalars* s = (StepScalars*)calloc_check(1, sizeof(StepScalars));
        s->grad_factor = 1.0f;
        s->finite = 1;
        cuda_check(cudaMalloc((void**)&model->step_gpu, sizeof(StepScalars)));
        cuda_check(cudaMemcpy(model->step_gpu, s, sizeof(StepScalars), cudaMemcpyHostToDevice));
        free(s);
    }
    return model->step_gpu;
}

// A new step: no losses yet.
static void step_scalars_reset_gpu(GPT2* model) {
    cuda_check(cudaMemsetAsync(&step_scalars_gpu(model)->loss_sum, 0, sizeof(double)));
}

// After a forward pass's fused classifier: its mean loss, added to the step's if `counted`.
static void mean_loss_gpu(GPT2* model, const float* losses, int n, int counted) {
    mean_loss_kernel<<<1, 1024>>>(step_scalars_gpu(model), losses, n, counted);
    launch_check(mean_loss_kernel);
}

// The sums of squares of gradient ranges x + offset[r], count[r], then the step's scalars.
static void step_scalars_of_gpu(GPT2* model, const float* x, const size_t* offset, const size_t* count, int ranges,
                                float grad_scale, float max_norm, int parts) {
    StepScalars* s = step_scalars_gpu(model);
    for (int r = 0; r < ranges; r++) {
        norm_squared_kernel<<<NORM_BLOCKS, 256>>>(s->partial[r], x + offset[r], count[r]);
        launch_check(norm_squared_kernel);
    }
    if (ranges > 0) {
        norm_finish_kernel<<<ranges, 256>>>(s);
        launch_check(norm_finish_kernel);
    }
    step_scalars_kernel<<<1, 1>>>(s, ranges, grad_scale, max_norm, parts);
    launch_check(step_scalars_kernel);
}

// The step's scalars on the host, once the queue has run them.
static StepScalars step_scalars_to_host(GPT2* model) {
    StepScalars s;
    cuda_check(cudaMemcpy(&s, step_scalars_gpu(model), offsetof(StepScalars, partial), cudaMemcpyDeviceToHost));
    return s;
}

// The same scalars computed on the host (under MPI, where the sums run over processes) back to
// the device, for AdamW.
static void step_scalars_to_gpu(GPT2* model, const StepScalars* s) {
    cuda_check(cudaMemcpy(step_scalars_gpu(model), s, offsetof(StepScalars, partial), cudaMemcpyHostToDevice));
}

// One AdamW step, one thread per parameter: adamw_update, the CPU's formula, on each gradient
// times the step's clip factor; none at all where the step's loss or norm is not finite (the host
// stops the run). params16 (bf16 path) gets each new value rounded to bf16: the copy the passes read.
__global__ void adamw_kernel(float* params, bf16* params16, const float* grads, float* m, float* v, size_t n,
                             AdamWStep s, float decay, const StepScalars* step) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || !step->finite) return;
    float p = adamw_update(params[i], grads[i] * step->grad_factor, &m[i], &v[i], s, decay);
    params[i] = p;
    if (params16 != NULL) params16[i] = __float2bfloat16(p);
}

// One AdamW step (t from 1), as the CPU's gpt2_update, of parameters [opt_offset, +opt_count)
// (all but under ZeRO-1), held in master, m and v from opt_offset on; one launch per tensor,
// decay on matrices only. params16, if not NULL, gets the new bf16 values at model positions.
static void adamw_update_gpu(GPT2* model, float* master, bf16* params16, float lr, float beta1, float beta2,
                             float eps, float weight_decay, int t) {
    AdamWStep s = adamw_step(lr, beta1, beta2, eps, t);
    StepScalars* step = step_scalars_gpu(model);
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
                                                model->v_memory + (from - lo), n, s, decay, step);
        launch_check(adamw_kernel);
    }
}

#endif // GPT2_GPU_OPTIMIZER_CUH
