// dev/kernels/15_attention_flash.cu: causal self-attention's forward as flash attention: the
// online softmax, one thread per query row, nothing of size T x T stored (float32, CUDA cores).
//
// What changed from step 14: att is gone too, and with it the second kernel. A thread owns a
// query row (b, h, t) and walks its keys 0..t in order, keeping three things: the largest score
// so far m, the denominator l = sum exp(s - m) and the unnormalised output o = sum exp(s - m) v
// (in registers: the head size is a template parameter, so the loops over it unroll). A key
// that raises the maximum to m' multiplies l and o by exp(m - m') once, which makes every term
// already in them what it would have been had m' been used from the start; after the last key
// o / l is the softmax-weighted sum itself, not an approximation (FlashAttention's online
// softmax: doc/lessons/08-flash-attention.md, doc/lessons/online_softmax.py). The scores live
// one at a time in a register.
// Bytes: step 14's 8 per (query, key) pair (att written, read back) drop to none: qkv is read
// and out written, the 50 MB of dev/kernels/attention.cuh, 128 FLOPs per byte; 403 MB less per
// call than step 13 stored at the least. Its limit is the float32 CUDA cores (LIMIT_FP32).
// How the reads go: the 32 threads of a warp are 32 consecutive queries of one head, and at
// each step they all read the same key and value row: a broadcast, one transaction for the warp.
// But every warp reads every row of K and V before its queries itself, from L1 or L2: a key row
// is fetched T/32 times per head (32 times at T = 1024), and the warps of a block, which walk the
// same keys, do not share what they fetch. Next: the project's own flash kernels
// (gpt2/gpu/flash_attention.cuh on the CUDA cores, step 16 on the tensor cores) stage K and V in
// shared memory a tile at a time, fetched once per block (doc/exercises/09-flash-shared asks
// for that step, 20), and step 16 hands both products to the tensor cores.
//
//   make kernels-emu     every step on the CPU emulator of CUDA: small shapes, PASS or FAIL
//   make kernels         every step on a GPU: checked, then timed at GPT-2 124M's shapes

#include "attention.cuh"

#define ATTENTION15_ROWS 64  // query rows (threads) a block owns

// out (B, T, C) from inp = qkv (B, T, 3C); grid (row blocks, NH, B), a thread per query row t.
template <int HS>
__global__ void attention_forward_kernel15(float* out, const float* inp, int T, int C) {
    int t = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    if (t >= T) return;
    size_t ld = 3 * (size_t)C;                                // a row of qkv
    const float* head = inp + (size_t)b * T * ld + h * HS;   // q of row 0 of (b, h); k at +C, v at +2C
    float scale = attention_scale(HS);
    float q[HS], o[HS];
#pragma unroll
    for (int i = 0; i < HS; i++) {
        q[i] = head[(size_t)t * ld + i];
        o[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        const float* k = head + (size_t)t2 * ld + C;
        const float* v = head + (size_t)t2 * ld + 2 * C;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < HS; i++) s += q[i] * k[i];
        s *= scale;
        float m_new = fmaxf(m, s);
        float rescale = expf(m - m_new);  // 0 at key 0 (m = -inf, while o and l are still 0); 1 while m holds
        float p = expf(s - m_new);
        l = l * rescale + p;
#pragma unroll
        for (int i = 0; i < HS; i++) o[i] = o[i] * rescale + p * v[i];
        m = m_new;
    }
    float* o_row = out + ((size_t)b * T + t) * C + h * HS;
#pragma unroll
    for (int i = 0; i < HS; i++) o_row[i] = o[i] / l;
}

template <int HS>
static void attention_forward15_launch(float* out, const float* inp, int B, int T, int C, int NH) {
    dim3 grid(ceil_div((size_t)T, ATTENTION15_ROWS), NH, B);
    attention_forward_kernel15<HS><<<grid, ATTENTION15_ROWS>>>(out, inp, T, C);
    launch_check(attention_forward_kernel15);
}

// preatt and att are not written (the driver passes NULL): flash attention never forms them.
static void attention_forward15(float* out, float* preatt, float* att, const float* inp, int B, int T, int C,
                                int NH) {
    int hs = C / NH;
    switch (C % NH == 0 ? hs : 0) {
    case 16: attention_forward15_launch<16>(out, inp, B, T, C, NH); break;
    case 32: attention_forward15_launch<32>(out, inp, B, T, C, NH); break;
    case 64: attention_forward15_launch<64>(out, inp, B, T, C, NH); break;
    default:
        fail("attention_forward15: head size C/NH = %d/%d: a thread holds its query row and output in registers, "
             "compiled for head sizes 16, 32 and 64", C, NH);
    }
}

int main(void) {
    return attention_step_main({"15", "attention", "flash: online softmax, a thread per row", LIMIT_FP32},
                               attention_forward15, STORES_NOTHING);
}
