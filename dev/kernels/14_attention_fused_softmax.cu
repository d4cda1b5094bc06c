// dev/kernels/14_attention_fused_softmax.cu: causal self-attention's forward with the scores and
// their softmax in one kernel, a warp per query row; preatt is never stored.
//
// What changed from step 13: its first two kernels become one. A warp owns a row (b, h, t): lane
// l computes the scores of keys l, l+32, l+64, ... and keeps them in registers (32 of them at
// most: T <= 1024, GPT-2's context), the row's maximum and the sum of its exponentials come from
// five shuffles each (warp_max, warp_sum), and the normalised row is written to att once. The
// values kernel is step 13's (attention_forward_values_kernel, in dev/kernels/attention.cuh).
// Why this change rather than fusing only the softmax (one kernel reading preatt with a warp per
// row): what bounds step 13 is the T x T traffic, and a separate softmax kernel still has preatt
// written by one kernel and read back by the next. Keeping the scores in registers between the
// two products removes preatt altogether. Bytes per (query, key) pair: at the least, step 13
// writes preatt and att and reads each back once (16), this step writes att and reads it back
// once (8); as written, step 13 moves 28 (preatt written, read for the maximum and again for the
// exponentials; att written, read and written by the division, read by the values kernel), this
// step 8. At GPT-2 124M's shape a matrix's causal part is 101 MB: 201 MB less per call at the
// least, 504 MB less as written.
// The roofline moves with it: 8 bytes per pair against 4 hs = 256 FLOPs is 26 FLOPs per byte
// with qkv and out, right of the ridge of an H100 (20) and of an H200 (14): by the roofline this
// design is bound by the float32 CUDA cores, its limit LIMIT_FP32 (dev/kernels/attention.cuh's
// FLOPs). The lanes' reads of k are still 32 rows apart, each lane walking its own row, and the
// values kernel still reads att and v from memory once per output column: far from that limit.
// Next (15): no T x T matrix at all, the online softmax of flash attention.
//
//   make kernels-emu     every step on the CPU emulator of CUDA: small shapes, PASS or FAIL
//   make kernels         every step on a GPU: checked, then timed at GPT-2 124M's shapes

#include "attention.cuh"

#define ATTENTION14_PER_LANE 32  // scores a lane holds: T <= 32 x 32 = 1024

// att (B, NH, T, T), its causal part: one warp per row (b NH + h) T + t.
__global__ void attention_forward_softmax_kernel14(float* att, const float* inp, int B, int T, int C, int NH) {
    size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (row >= (size_t)B * NH * T) return;  // the whole warp: every lane has the same row
    int t = (int)(row % T), h = (int)(row / T % NH), b = (int)(row / ((size_t)T * NH));
    int hs = C / NH;
    float scale = attention_scale(hs);
    const float* q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
    const float* k0 = inp + (size_t)b * T * 3 * C + C + h * hs;  // key 0 of this (b, h)
    float s[ATTENTION14_PER_LANE];  // the scores of keys lane + 32 j; unrolled loops keep them in registers
    float maxval = -INFINITY;
#pragma unroll
    for (int j = 0; j < ATTENTION14_PER_LANE; j++) {
        s[j] = -INFINITY;
        if (32 * j > t) continue;  // no lane has a key here (warp-uniform)
        int t2 = lane + 32 * j;
        if (t2 <= t) {
            const float* k = k0 + (size_t)t2 * 3 * C;
            float dot = 0.0f;
            for (int i = 0; i < hs; i++) dot += q[i] * k[i];
            s[j] = dot * scale;
            maxval = fmaxf(maxval, s[j]);
        }
    }
    maxval = warp_max(maxval);  // key 0 is in every row: finite
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < ATTENTION14_PER_LANE; j++) {
        s[j] = expf(s[j] - maxval);  // exp(-inf) = 0 for the keys past t
        sum += s[j];
    }
    float inv = 1.0f / warp_sum(sum);
    float* a = att + row * T;
#pragma unroll
    for (int j = 0; j < ATTENTION14_PER_LANE; j++)
        if (lane + 32 * j <= t) a[lane + 32 * j] = s[j] * inv;
}

// preatt is not written (the driver passes NULL): nothing reads it, the backward needs att only.
static void attention_forward14(float* out, float* preatt, float* att, const float* inp, int B, int T, int C,
                                int NH) {
    if (T > 32 * ATTENTION14_PER_LANE)
        fail("attention_forward14: T = %d, but a warp holds a row's scores in registers, %d a lane: T <= %d", T,
             ATTENTION14_PER_LANE, 32 * ATTENTION14_PER_LANE);
    const int block = 256;  // 8 rows
    attention_forward_softmax_kernel14<<<ceil_div((size_t)B * NH * T * 32, block), block>>>(att, inp, B, T, C, NH);
    launch_check(attention_forward_softmax_kernel14);
    attention_forward_values_kernel<<<ceil_div((size_t)B * T * C, block), block>>>(out, att, inp, B, T, C, NH);
    launch_check(attention_forward_values_kernel);
}

int main(void) {
    return attention_step_main({"14", "attention", "scores and softmax fused: a warp per row", LIMIT_FP32},
                               attention_forward14, STORES_ATT);
}
