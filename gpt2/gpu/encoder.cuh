// gpt2/gpu/encoder.cuh: the token and position embeddings on the GPU, forward and backward
// (gpt2/cpu_layers.h: encoder_forward, encoder_backward), for float or bf16 activations.

#ifndef GPT2_GPU_ENCODER_CUH
#define GPT2_GPU_ENCODER_CUH

#include "cuda_utils.cuh"

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], one thread per output element (coalesced along C).
template <typename floatX>
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int t = (int)(bt % T);
    out[idx] = from_float<floatX>(wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c]);
}

template <typename floatX>
static void encoder_forward_gpu(floatX* out, const int* inp, const float* wte, const float* wpe,
                                int B, int T, int C) {
    encoder_forward_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(out, inp, wte, wpe, B, T, C);
    launch_check(encoder_forward_kernel);
}

// Generation's embeddings: the T tokens of sequence b sit at positions pos[b]..pos[b]+T-1 of
// their own sequences, so out[b,t,:] = wte[inp[b,t],:] + wpe[pos[b]+t,:]; pos is on the GPU.
template <typename floatX>
__global__ void encoder_forward_at_kernel(floatX* out, const int* inp, const int* pos, const float* wte,
                                          const float* wpe, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int b = (int)(bt / T), t = (int)(bt % T);
    out[idx] = from_float<floatX>(wte[(size_t)inp[bt] * C + c] + wpe[(size_t)(pos[b] + t) * C + c]);
}

template <typename floatX>
static void encoder_forward_at_gpu(floatX* out, const int* inp, const int* pos, const float* wte, const float* wpe,
                                   int B, int T, int C) {
    encoder_forward_at_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(out, inp, pos, wte, wpe, B, T, C);
    launch_check(encoder_forward_at_kernel);
}

// dwpe[t,c] += sum over b of dout[b,t,c]: one thread per (t, c), b in order.
template <typename floatX>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_float(dout[(size_t)b * T * C + idx]);
    dwpe[idx] += sum;
}

// dwte[tok,:] += sum of dout[p,:] over the positions p holding tok. One block per position p; only
// the block of a token's first position writes, summing all its positions in order, so that no
// two blocks write the same row and the sum is deterministic (atomicAdd per position would not be).
template <typename floatX>
__global__ void encoder_backward_wte_kernel(float* dwte, const floatX* dout, const int* inp, int BT, int C) {
    int p = blockIdx.x;
    int tok = inp[p];
    int seen_before = 0;
    for (int q = threadIdx.x; q < p; q += blockDim.x) seen_before |= inp[q] == tok;
    if (__syncthreads_or(seen_before)) return;  // the whole block leaves together
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int q = p; q < BT; q++) {
            if (inp[q] == tok) sum += to_float(dout[(size_t)q * C + c]);  // inp[q]: one address, broadcast
        }
        dwte[(size_t)tok * C + c] += sum;
    }
}

template <typename floatX>
static void encoder_backward_gpu(float* dwte, float* dwpe, const floatX* dout, const int* inp,
                                 int B, int T, int C) {
    encoder_backward_wpe_kernel<floatX><<<ceil_div((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    launch_check(encoder_backward_wpe_kernel);
    encoder_backward_wte_kernel<floatX><<<B * T, 256>>>(dwte, dout, inp, B * T, C);
    launch_check(encoder_backward_wte_kernel);
}

#endif // GPT2_GPU_ENCODER_CUH
