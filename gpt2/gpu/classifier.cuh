// gpt2/gpu/classifier.cuh: the output layer's softmax, cross-entropy loss and the gradient of the
// loss, fused into one kernel per position (gpt2/cpu_layers.h: softmax_forward,
// crossentropy_forward, crossentropy_softmax_backward), for float or bf16 logits.

#ifndef GPT2_GPU_CLASSIFIER_CUH
#define GPT2_GPU_CLASSIFIER_CUH

#include "cuda_utils.cuh"

// One block per position (b,t), over the V real columns of its Vp logits: the max, the sum of
// exp (for a softmax that cannot overflow), the loss -log p[target] = log(sum) - (x[target] -
// max), and the gradient of the mean loss, dlogits = (p - 1[target]) / (B*T). That replaces the
// CPU's softmax_forward, crossentropy_forward and crossentropy_softmax_backward without ever
// storing the (B,T,Vp) probabilities. dlogits is written (not accumulated), padding columns 0.
// dlogits may be logits itself (the bf16 path overwrites its logits with their gradient): every
// thread reads the logit of the target before the block's first barrier, and afterwards reads
// and writes only its own columns.
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
