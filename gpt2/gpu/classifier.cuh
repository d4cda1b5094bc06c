// gpt2/gpu/classifier.cuh: the output softmax, cross-entropy loss and its gradient, fused
// (gpt2/cpu_layers.h: softmax_forward, crossentropy_forward, crossentropy_softmax_backward).

#ifndef GPT2_GPU_CLASSIFIER_CUH
#define GPT2_GPU_CLASSIFIER_CUH

#include "cuda_utils.cuh"

// (m, s) += (m2, s2): two sets' max and sum of exp(x - max) as one, each sum rescaled to the
// larger max. (-inf, 0) is the empty set: the == tests keep exp(-inf - -inf) out.
__device__ __forceinline__ void softmax_merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    s = (m == mm ? s : s * expf(m - mm)) + (m2 == mm ? s2 : s2 * expf(m2 - mm));
    m = mm;
}

// One block per position: every thread reads its packs of the row once, keeping a running max m
// and sum s of exp(x - m) (online softmax); the block merges them (in a fixed order), then
// re-reads the row (from L2) to write dlogits = (p - 1[target]) / (B*T), padding 0, and the loss
// log(s) - (x[target] - m). dlogits may be logits: a value is read before its thread writes it.
template <typename floatX, int W>
__global__ void __launch_bounds__(1024) fused_classifier_kernel(floatX* dlogits, float* losses,
                                                                const floatX* logits, const int* targets,
                                                                float dloss, int V, int Vp) {
    __shared__ float warp_m[32], warp_s[32], row_m, row_s;
    size_t row = blockIdx.x;
    const floatX* x = logits + row * Vp;
    int target = targets[row];
    float x_target = to_float(x[target]);
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x * W; i < V; i += blockDim.x * W) {
        float v[W], pack_max = -INFINITY;
        load_values<W>(v, x + i);  // whole in the row: Vp is a multiple of W
        for (int e = 0; e < W; e++) {
            if (i + e < V) pack_max = fmaxf(pack_max, v[e]);
        }
        if (pack_max > m) {  // rescale the sum to the new max
            s *= expf(m - pack_max);
            m = pack_max;
        }
        for (int e = 0; e < W; e++) {
            if (i + e < V) s += expf(v[e] - m);
        }
    }
    // the block's (m, s): each warp's lanes in a tree to lane 0, then warp 0 over the warps
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m2 = __shfl_down_sync(0xffffffffu, m, offset), s2 = __shfl_down_sync(0xffffffffu, s, offset);
        softmax_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        warp_m[warp] = m;
        warp_s[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < (int)blockDim.x / 32 ? warp_m[lane] : -INFINITY;
        s = lane < (int)blockDim.x / 32 ? warp_s[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            float m2 = __shfl_down_sync(0xffffffffu, m, offset), s2 = __shfl_down_sync(0xffffffffu, s, offset);
            softmax_merge(m, s, m2, s2);
        }
    }
    if (threadIdx.x == 0) {
        row_m = m;
        row_s = s;
        losses[row] = logf(s) - (x_target - m);
    }
    __syncthreads();
    float maxval = row_m, inv = 1.0f / row_s;
    floatX* dx = dlogits + row * Vp;
    for (int i = threadIdx.x * W; i < Vp; i += blockDim.x * W) {
        float v[W], d[W];
        if (i < V) load_values<W>(v, x + i);
        for (int e = 0; e < W; e++) {
            int col = i + e;
            d[e] = col < V ? (expf(v[e] - maxval) * inv - (col == target ? 1.0f : 0.0f)) * dloss : 0.0f;
        }
        store_values<W>(dx + i, d);
    }
}

// 1024 threads a row, at most 32 registers: on 8.0 and 9.0 two blocks an SM, two rows in flight
// (doc/gpu.md: why, and the L2).
template <typename floatX>
static void fused_classifier_gpu(floatX* dlogits, float* losses, const floatX* logits, const int* targets,
                                 int B, int T, int V, int Vp) {
    constexpr int W = Pack16<floatX>::N;
    float dloss = 1.0f / (B * T);
    if (Vp % W == 0 && aligned16(logits) && aligned16(dlogits)) {
        fused_classifier_kernel<floatX, W><<<B * T, 1024>>>(dlogits, losses, logits, targets, dloss, V, Vp);
    } else {
        fused_classifier_kernel<floatX, 1><<<B * T, 1024>>>(dlogits, losses, logits, targets, dloss, V, Vp);
    }
    launch_check(fused_classifier_kernel);
}

#endif // GPT2_GPU_CLASSIFIER_CUH
