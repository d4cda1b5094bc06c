// dev/kernels/13_attention_naive.cu: causal self-attention's forward on the GPU as the CPU does
// it, in three kernels: the scores, their softmax, the weighted sum of the values.
//
// The first rung of the attention ladder: each loop of attention_forward_naive (gpt2/cpu_layers.h)
// becomes a kernel, one thread per thing it computes, and the kernels hand their results on
// through device memory.
//   scores   one thread per (b, h, t, t2 <= t): preatt = q_t . k_t2 / sqrt(hs). The threads of a
//            warp take consecutive t2, so at each i they read one float of q (a broadcast) and
//            32 floats of k that lie 3C floats apart: 32 transactions for 128 useful bytes.
//   softmax  one thread per row (b, h, t): three passes over the row (its maximum, the
//            exponentials and their sum into att, the division), with the rows of a warp T
//            floats apart: again one transaction per lane.
//   values   one thread per output (b, t, c): out = att_t . v over t2 <= t. A warp's 32 outputs
//            are consecutive columns: v is read coalesced, and the warp's lanes of one head
//            read the same att (a broadcast).
// The T x T scores are stored twice: preatt written, read back (twice), att written (twice) and
// read back. At the least that is 16 bytes per (query, key) pair against the pair's 4 hs = 256
// FLOPs (dev/kernels/attention.cuh): 14 FLOPs per byte with qkv and out, at or left of the ridge
// of an H100 (20) or an H200 (14): this design is bound by the memory's bandwidth, and its limit
// is LIMIT_BANDWIDTH, its work the bytes it must move at the least (attention_work, 2 matrices).
// The uncoalesced reads keep it far below even that. Next (14): compute the scores and their
// softmax in one kernel, a warp per row, and never store preatt.
//
//   make kernels-emu     every step on the CPU emulator of CUDA: small shapes, PASS or FAIL
//   make kernels         every step on a GPU: checked, then timed at GPT-2 124M's shapes

#include "attention.cuh"

// preatt (B, NH, T, T): the scaled scores of the causal part; the rest is never written or read.
__global__ void attention_forward_scores_kernel13(float* preatt, const float* inp, int B, int T, int C, int NH) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * T) return;
    int t2 = (int)(idx % T), t = (int)(idx / T % T);
    if (t2 > t) return;  // the causal mask: a key after the query
    int h = (int)(idx / ((size_t)T * T) % NH), b = (int)(idx / ((size_t)NH * T * T));
    int hs = C / NH;
    const float* q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
    const float* k = inp + ((size_t)b * T + t2) * 3 * C + C + h * hs;
    float s = 0.0f;
    for (int i = 0; i < hs; i++) s += q[i] * k[i];
    preatt[idx] = s * attention_scale(hs);
}

// att (B, NH, T, T): the softmax of each row's scores 0..t, subtracting their maximum first so
// that no exponential overflows (softmax(s) = softmax(s - max)).
__global__ void attention_forward_softmax_kernel13(float* att, const float* preatt, int B, int T, int NH) {
    size_t row = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // (b NH + h) T + t
    if (row >= (size_t)B * NH * T) return;
    int t = (int)(row % T);
    const float* pre = preatt + row * T;
    float* a = att + row * T;
    // The CPU reference loop (gpt2/cpu_layers.h), repeated here on purpose: each ladder file reads alone.
    float maxval = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) maxval = fmaxf(maxval, pre[t2]);
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        float e = expf(pre[t2] - maxval);
        a[t2] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
}

// out (B, T, C): attention_forward_values_kernel of dev/kernels/attention.cuh (one thread per
// output), which step 14 runs too.

static void attention_forward13(float* out, float* preatt, float* att, const float* inp, int B, int T, int C,
                                int NH) {
    const int block = 256;
    attention_forward_scores_kernel13<<<ceil_div((size_t)B * NH * T * T, block), block>>>(preatt, inp, B, T, C, NH);
    launch_check(attention_forward_scores_kernel13);
    attention_forward_softmax_kernel13<<<ceil_div((size_t)B * NH * T, block), block>>>(att, preatt, B, T, NH);
    launch_check(attention_forward_softmax_kernel13);
    attention_forward_values_kernel<<<ceil_div((size_t)B * T * C, block), block>>>(out, att, inp, B, T, C, NH);
    launch_check(attention_forward_values_kernel);
}

int main(void) {
    return attention_step_main({"13", "attention", "naive: scores, softmax, values: 3 kernels", LIMIT_BANDWIDTH},
                               attention_forward13, STORES_PREATT_AND_ATT);
}
