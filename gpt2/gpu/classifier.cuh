// gpt2/gpu/classifier.cuh: the output softmax, cross-entropy loss and its gradient, fused
// (gpt2/cpu_layers.h: softmax_forward, crossentropy_forward, crossentropy_softmax_backward).

#ifndef GPT2_GPU_CLASSIFIER_CUH
#define GPT2_GPU_CLASSIFIER_CUH

#include "cuda_utils.cuh"

// One block per position over the V real columns: max and sum of exp (no overflow), loss =
// log(sum) - (x[target] - max), dlogits = (p - 1[target]) / (B*T), written, padding 0; the
// probabilities never stored. dlogits may be logits: the target is read before the first barrier.
template <typename floatX>
__global__ void fused_classifier_kernel(floatX* dlogits, float* losses, const floatX* logits,
                                        const int* targets, float dloss, int V, int Vp) {
    size_t row = blockIdx.x;
    const floatX* x = logits + row * Vp;
    int target = targets[row];
    float x_target = to_float(x[target]);
    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxval = fmaxf(maxval, to_float(x[i]));
    maxval = block_max(maxval);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(to_float(x[i]) - maxval);
    sum = block_sum(sum);
    if (threadIdx.x == 0) losses[row] = logf(sum) - (x_target - maxval);
    float inv = 1.0f / sum;
    floatX* dx = dlogits + row * Vp;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float d = i < V ? (expf(to_float(x[i]) - maxval) * inv - (i == target ? 1.0f : 0.0f)) * dloss : 0.0f;
        dx[i] = from_float<floatX>(d);
    }
}

template <typename floatX>
static void fused_classifier_gpu(floatX* dlogits, float* losses, const floatX* logits, const int* targets,
                                 int B, int T, int V, int Vp) {
    fused_classifier_kernel<floatX><<<B * T, 1024>>>(dlogits, losses, logits, targets, 1.0f / (B * T), V, Vp);
    launch_check(fused_classifier_kernel);
}

#endif // GPT2_GPU_CLASSIFIER_CUH
