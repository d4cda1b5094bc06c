// gpt2/gpu/attention.cuh: causal self-attention in float32, forward and backward, as
// gpt2/cpu_layers.h's: batched SGEMMs and a warp-per-row softmax, storing the T x T scores.

#ifndef GPT2_GPU_ATTENTION_CUH
#define GPT2_GPU_ATTENTION_CUH

#include "../arithmetic.h"  // attention_scale
#include "cuda_utils.cuh"
#include "matmul_fp32.cuh"

// Head h of sequence b in qkv (B,T,3C): the (T, hs) slice at b*T*3C + h*hs (+C, +2C), stride 3C.

// att[b,h,t,:] = softmax of preatt[b,h,t,0..t] (already scaled), zeros after t (att V reads whole
// rows of the diagonal tiles). One warp per row.
__global__ void attention_softmax_kernel(float* att, const float* preatt, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    const float* x = preatt + (size_t)row * T;  // only x[0..t] was computed
    float* y = att + (size_t)row * T;
    float maxval = -INFINITY;
    for (int i = lane; i <= t; i += 32) maxval = fmaxf(maxval, x[i]);
    maxval = warp_max(maxval);
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) sum += expf(x[i] - maxval);
    sum = warp_sum(sum);
    float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (int i = lane; i < T; i += 32) y[i] = i <= t ? expf(x[i] - maxval) * inv : 0.0f;
}

// Head h of sequence b at p + b * batch_stride + h * head_stride.
typedef struct {
    const float* p;
    long long ld, batch_stride, head_stride;
} HeadMatrix;

// The (T, hs) slice of head h in a (B, T, width) tensor: Q, K, V or out.
static HeadMatrix head_slice(const float* p, int T, int width, int hs) {
    HeadMatrix m = {p, width, (long long)T * width, hs};
    return m;
}

// The (T, T) matrix of head h in a (B, NH, T, T) tensor.
static HeadMatrix head_square(const float* p, int T, int NH) {
    HeadMatrix m = {p, T, (long long)NH * T * T, (long long)T * T};
    return m;
}

// For every (b, h), over z = b*NH + h: C = alpha op(A) op(B) [+ C if accumulate].
static void attention_gemm(HeadMatrix a, bool ta, HeadMatrix b, bool tb, HeadMatrix c, int M, int N,
                           int K, int B, int NH, float alpha, int accumulate, int causal) {
    GemmFp32Args g = gemm_fp32_args(a.p, a.ld, b.p, b.ld, (float*)c.p, c.ld, M, N, K);
    g.strideA[0] = a.batch_stride;
    g.strideA[1] = a.head_stride;
    g.strideB[0] = b.batch_stride;
    g.strideB[1] = b.head_stride;
    g.strideC[0] = c.batch_stride;
    g.strideC[1] = c.head_stride;
    g.inner = NH;
    g.alpha = alpha;
    g.accumulate = accumulate;
    g.causal = causal;
    gemm_fp32(g, ta, tb, B * NH);
}

// out (B,T,C), preatt and att (B,NH,T,T), inp = qkv (B,T,3C). preatt = Q K^T / sqrt(hs), its
// upper triangle unwritten; att = softmax; out = att V.
static void attention_forward_gpu(float* out, float* preatt, float* att, const float* inp,
                                  int B, int T, int C, int NH) {
    int hs = C / NH;
    HeadMatrix q = head_slice(inp, T, 3 * C, hs), k = head_slice(inp + C, T, 3 * C, hs);
    HeadMatrix v = head_slice(inp + 2 * C, T, 3 * C, hs);
    // K read transposed; tiles above the diagonal skipped
    attention_gemm(q, false, k, true, head_square(preatt, T, NH), T, T, hs, B, NH, attention_scale(hs),
                   0, CAUSAL_OUT_LOWER);
    attention_softmax_kernel<<<ceil_div((size_t)B * NH * T, 8), 256>>>(att, preatt, B * NH * T, T);
    launch_check(attention_softmax_kernel);
    // att is lower triangular
    attention_gemm(head_square(att, T, NH), false, v, false, head_slice(out, T, C, hs), T, hs, T, B, NH,
                   1.0f, 0, CAUSAL_A_LOWER);
}

// dpreatt = att * (datt - sum(att * datt)) on the causal part of each row, zeros after it.
__global__ void attention_softmax_backward_kernel(float* dpreatt, const float* datt, const float* att,
                                                  int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    const float* a = att + (size_t)row * T;
    const float* da = datt + (size_t)row * T;  // only da[0..t] was computed
    float dot = 0.0f;
    for (int i = lane; i <= t; i += 32) dot += a[i] * da[i];
    dot = warp_sum(dot);
    float* dp = dpreatt + (size_t)row * T;
    for (int i = lane; i < T; i += 32) dp[i] = i <= t ? a[i] * (da[i] - dot) : 0.0f;
}

// dinp = dqkv (B,T,3C) += the gradients of Q, K and V. dpreatt and datt (B,NH,T,T) are scratch,
// overwritten (the CPU accumulates into them).
static void attention_backward_gpu(float* dinp, float* dpreatt, float* datt, const float* dout,
                                   const float* inp, const float* att, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = attention_scale(hs);
    HeadMatrix q = head_slice(inp, T, 3 * C, hs), k = head_slice(inp + C, T, 3 * C, hs);
    HeadMatrix v = head_slice(inp + 2 * C, T, 3 * C, hs), d = head_slice(dout, T, C, hs);
    HeadMatrix dq = head_slice(dinp, T, 3 * C, hs), dk = head_slice(dinp + C, T, 3 * C, hs);
    HeadMatrix dv = head_slice(dinp + 2 * C, T, 3 * C, hs);
    HeadMatrix a = head_square(att, T, NH), da = head_square(datt, T, NH), dp = head_square(dpreatt, T, NH);
    // datt = dout_h V^T: only n <= m needed
    attention_gemm(d, false, v, true, da, T, T, hs, B, NH, 1.0f, 0, CAUSAL_OUT_LOWER);
    // dV += att^T dout_h: A(m=t2, k=t1) zero for t1 < t2
    attention_gemm(a, true, d, false, dv, T, hs, T, B, NH, 1.0f, 1, CAUSAL_A_UPPER);
    attention_softmax_backward_kernel<<<ceil_div((size_t)B * NH * T, 8), 256>>>(dpreatt, datt, att, B * NH * T, T);
    launch_check(attention_softmax_backward_kernel);
    // dQ += scale * dpreatt K: dpreatt is lower triangular
    attention_gemm(dp, false, k, false, dq, T, hs, T, B, NH, scale, 1, CAUSAL_A_LOWER);
    // dK += scale * dpreatt^T Q: A(m=t2, k=t1) zero for t1 < t2
    attention_gemm(dp, true, q, false, dk, T, hs, T, B, NH, scale, 1, CAUSAL_A_UPPER);
}

#endif // GPT2_GPU_ATTENTION_CUH
