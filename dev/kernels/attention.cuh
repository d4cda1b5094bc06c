// dev/kernels/attention.cuh: the frame of the attention steps of the ladder (13 to 16). Every step
// computes the causal self-attention's forward, as attention_forward in gpt2/cpu_layers.h does:
// for batch b, head h and query t, with q, k, v the head's hs = C/NH columns of the three thirds
// of qkv (B, T, 3C),
//     out[b, t, h] = sum over t2 <= t of softmax_t2(q_t . k_t2 / sqrt(hs)) v_t2      (B, T, C)
// and its main is one call: attention_step_main (the float32 steps, which may also store the
// scores as the CPU does: preatt, the scaled q . k, and att, their softmax, both (B, NH, T, T)) or
// attention_step_main_bf16 (the tensor cores' step: bf16 qkv and out, float32 lse). Both check the
// step against the CPU on shapes whose T is no multiple of any tile, with head sizes 16 and 64,
// then, on a GPU, at GPT-2 124M's attention (B=4, T=1024, C=768, NH=12: hs = 64), which they time.
//
// The work. Query t meets keys 0..t: T(T+1)/2 (query, key) pairs per (b, h). A pair costs the dot
// product q . k (hs multiplies, hs adds) and adds p v to the output (hs more of each): 4 hs FLOPs.
// The whole forward is
//     4 hs B NH T(T+1)/2 = 2 B NH T (T+1) hs  ~  2 B NH T^2 hs FLOPs
// (the T(T+1)/2 exponentials and scalings per head are of lower order): 6.45 GFLOP at GPT-2
// 124M's shape. The fewest bytes it must move: qkv read once and out written once, 4 (3C + C) B T
// bytes = 50 MB: 128 FLOPs per byte, far right of the ridge of any GPU (an H100's float32 peak,
// 67 TFLOP/s, over its 3.35 TB/s is 20 FLOPs per byte; an H200's 4.8 TB/s gives 14). Attention
// itself is compute bound -- unless it stores its T x T scores: each matrix written once and read
// back once costs 8 bytes per pair against the pair's 4 hs = 256 FLOPs, and a step that stores
// two of them (13) lands at 14 FLOPs per byte, at or left of the ridge: bound by the bandwidth.
// attention_work says which count each step is held to.

#ifndef DEV_KERNELS_ATTENTION_CUH
#define DEV_KERNELS_ATTENTION_CUH

#include "ladder.cuh"

// The launcher every float32 step defines, with the CPU function's signature. preatt and att are
// NULL for a step that does not store them (AttentionStores says which it does).
typedef void (*AttentionForward)(float* out, float* preatt, float* att, const float* inp, int B, int T, int C,
                                 int NH);
// The tensor cores' step: out (B, T, C) bf16, lse (B, NH, T) float32 (the log of each row's softmax
// denominator, which the flash backward needs), qkv (B, T, 3C) bf16.
typedef void (*AttentionForwardBf16)(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH);

// Which of the CPU's two (B, NH, T, T) matrices a step writes.
typedef enum { STORES_NOTHING, STORES_ATT, STORES_PREATT_AND_ATT } AttentionStores;

// The shapes every step must get right: {B, T, C, NH, qk}. T = 37, 45, 70 and 150 are no multiple
// of any tile of the steps (32 or 64 rows); hs = C/NH is 16 or 64. At T = 150 a block walks three
// tiles of 64 keys, so a double-buffered kernel (16) refills a stage it has used. qk scales q and k: at 1 the scores
// have a spread of about 1/3 and the softmax is flat; at 4 a spread of about 5, so the row's
// maximum jumps often and far as the keys go by, which an online softmax's rescaling must follow.
// The emulator runs each thread on the CPU: B NH T^2 hs stays below a million.
static const int ATTENTION_SHAPES[][5] = {
    {2, 37, 64, 4, 1},   // hs 16, a tile of 32 rows and 5 more
    {1, 70, 128, 2, 1},  // hs 64, a tile of 64 rows and 6 more
    {1, 45, 128, 2, 4},  // hs 64, peaked softmax
    {1, 150, 32, 2, 1},  // hs 16, two tiles of 64 rows and 22 more
    {1, 1, 32, 2, 1},    // one query, one key: its softmax is 1
};

// The work a step is held to (ladder_time): the FLOPs above, or, for a step bound by the
// bandwidth, the bytes its design must move at the least: qkv read once, out written once, and
// each stored (T x T) matrix's causal part written once and read back once.
static double attention_work(LadderLimit limit, int matrices, int B, int T, int C, int NH) {
    double pairs = (double)B * NH * T * (T + 1) / 2.0;
    if (limit != LIMIT_BANDWIDTH) return 4.0 * (C / NH) * pairs;
    return 4.0 * (4.0 * B * T * C + 2.0 * matrices * pairs);
}

// qkv (B, T, 3C) uniform in [-1, 1], its q and k thirds multiplied by qk.
static float* attention_random_qkv(int B, int T, int C, float qk) {
    size_t n = (size_t)B * T * 3 * C;
    float* qkv = host_random(n, -1, 1);
    for (size_t i = 0; i < n; i++)
        if ((i % (3 * C)) < (size_t)(2 * C)) qkv[i] *= qk;
    return qkv;
}

// 1 for the causal part (t2 <= t) of a (B, NH, T, T) matrix, the only part the steps write and
// the backward reads.
static unsigned char* attention_causal_mask(size_t n, int T) {
    unsigned char* causal = (unsigned char*)malloc_check(n);
    for (size_t i = 0; i < n; i++) causal[i] = (i % T) <= ((i / T) % T);
    return causal;
}

// The third kernel of the steps that store att (13, 14): out (B, T, C), one thread per output, each
// the att-weighted sum of one column of the values 0..t. A warp's 32 outputs are consecutive
// columns: v is read coalesced, and the lanes of one head read the same att (a broadcast).
__global__ void attention_forward_values_kernel(float* out, const float* att, const float* inp, int B, int T,
                                                  int C, int NH) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // (b T + t) C + c
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C), t = (int)(idx / C % T), b = (int)(idx / ((size_t)T * C));
    int hs = C / NH, h = c / hs;
    const float* a = att + (((size_t)b * NH + h) * T + t) * T;
    const float* v = inp + (size_t)b * T * 3 * C + 2 * C + c;  // column c of the values, row 0
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) sum += a[t2] * v[(size_t)t2 * 3 * C];
    out[idx] = sum;
}

// One shape: random inputs, the CPU's attention_forward, the step's launcher on NaN-poisoned
// outputs, out and the stored scores compared; then, if `timed`, the launcher timed.
// Tolerances (those of dev/gpu/gpu_check.cu's float32 attention, scaled by qk^2 where the scores
// are): a score is a float32 sum of hs products, both sides add them in the same order and
// differ only by contraction to FMA and the scale's rounding: 1e-5 sqrt(hs) qk^2 + 1e-5 |ref|
// (qk^2 sqrt(hs)/3 is the size of such a sum). att = exp(s - max) / sum: exp's ulp or two on
// each side and the sum's rounding in another order, relative: 1e-4 |ref| + 1e-6. out is a
// P-weighted average of values in [-1, 1]: its own sum's rounding, and the scores' errors times
// |v| <= 1: 1e-5 + 1e-4 |ref|, some hundred times the float32 noise at T = 1024 and far below the
// errors of a wrong mask, index or rescale (of the size of out itself).
static void attention_check(AttentionForward forward, AttentionStores stores, int B, int T, int C, int NH, int qk,
                            LadderStep* s, bool timed) {
    size_t BT = (size_t)B * T, n_att = (size_t)B * NH * T * T;
    int hs = C / NH;
    printf("attention B=%d T=%d C=%d NH=%d (hs %d), q and k in [-%d, %d]\n", B, T, C, NH, hs, qk, qk);
    float* inp = attention_random_qkv(B, T, C, (float)qk);
    float *out = host_zeros(BT * C), *preatt = host_zeros(n_att), *att = host_zeros(n_att);
    attention_forward(out, preatt, att, inp, B, T, C, NH);
    float *d_inp = to_device(inp, BT * 3 * C), *d_out = device_poisoned(BT * C);
    float* d_preatt = stores == STORES_PREATT_AND_ATT ? device_poisoned(n_att) : NULL;
    float* d_att = stores != STORES_NOTHING ? device_poisoned(n_att) : NULL;
    forward(d_out, d_preatt, d_att, d_inp, B, T, C, NH);
    compare("out", d_out, out, BT * C, 1e-5f, 1e-4f);
    unsigned char* causal = attention_causal_mask(n_att, T);
    if (d_preatt != NULL) {
        float* h = to_host(d_preatt, n_att);
        compare_host("preatt (t2 <= t)", h, preatt, n_att, 1e-5f * sqrtf((float)hs) * qk * qk, 1e-5f, causal);
        free(h);
    }
    if (d_att != NULL) {
        float* h = to_host(d_att, n_att);
        compare_host("att (t2 <= t)", h, att, n_att, 1e-6f, 1e-4f, causal);
        free(h);
    }
    int matrices = stores == STORES_PREATT_AND_ATT ? 2 : stores == STORES_ATT ? 1 : 0;
    if (timed)
        ladder_time(s, [&] { forward(d_out, d_preatt, d_att, d_inp, B, T, C, NH); },
                    attention_work(s->limit, matrices, B, T, C, NH));
    free(inp); free(out); free(preatt); free(att); free(causal);
    cuda_check(cudaFree(d_inp)); cuda_check(cudaFree(d_out));
    if (d_preatt != NULL) cuda_check(cudaFree(d_preatt));
    if (d_att != NULL) cuda_check(cudaFree(d_att));
}

static int attention_step_main(LadderStep s, AttentionForward forward, AttentionStores stores) {
    ladder_begin(&s);
    for (const auto& shape : ATTENTION_SHAPES)
        attention_check(forward, stores, shape[0], shape[1], shape[2], shape[3], shape[4], &s, false);
    if (ladder_shape_big()) attention_check(forward, stores, 4, 1024, 768, 12, 1, &s, true);
    return ladder_end(&s);
}

// ---------- the tensor cores' step: bf16 ----------

// One shape of the bf16 step: qkv rounded to bf16 on the host, and the CPU's float32 attention on
// those very values, so that what is checked is the kernel and not bf16's rounding of its inputs.
// Tolerances, derived as dev/gpu/gpu_check.cu's check_attention_bf16 derives its own: out is
// rounded once to bf16 (rtol 2^-8) and gets an atol of 2^-13 of its largest value (some hundred
// times the float32 noise of sums in another order and of exp2f, far below the O(1) errors of a
// wrong mask or index). The tensor cores also round P to bf16 before O = P V: each term p v of
// out_td moves by at most 2^-9 of itself, so out_td may move by 2^-9 sum_t2 P_t,t2 |v_t2,d|; twice
// that, per value from the CPU's P, is added (compare_host_slack). lse is float32 on both sides:
// 2^-16 of its largest value.
static void attention_check_bf16(AttentionForwardBf16 forward, int B, int T, int C, int NH, int qk, LadderStep* s,
                                 bool timed) {
    size_t BT = (size_t)B * T, n_qkv = BT * 3 * C, n_out = BT * C, n_lse = (size_t)B * NH * T;
    size_t n_att = (size_t)B * NH * T * T;
    int hs = C / NH;
    printf("attention bf16 B=%d T=%d C=%d NH=%d (hs %d), q and k in [-%d, %d]\n", B, T, C, NH, hs, qk, qk);
    float* qkv = attention_random_qkv(B, T, C, (float)qk);
    bf16* d_qkv = to_device_bf16(qkv, n_qkv);
    float *out = host_zeros(n_out), *preatt = host_zeros(n_att), *att = host_zeros(n_att);
    attention_forward(out, preatt, att, qkv, B, T, C, NH);
    float* lse = (float*)malloc_check(n_lse * sizeof(float));
    attention_lse_ref(lse, preatt, n_lse, T);
    float* slack = host_zeros(n_out);  // the bound of P's rounding to bf16 (above), per value
    attention_out_bf16_slack(slack, att, qkv, B, T, C, NH);
    bf16* d_out = device_poisoned_bf16(n_out);
    float* d_lse = device_poisoned(n_lse);
    forward(d_out, d_lse, d_qkv, B, T, C, NH);
    float* out_gpu = to_host_bf16(d_out, n_out);
    compare_host_slack("out (bf16)", out_gpu, out, n_out, max_abs(out, n_out) / 8192, BF16_RTOL, NULL,
                       slack);
    compare("lse", d_lse, lse, n_lse, max_abs(lse, n_lse) / 65536, 0.0f);
    if (timed)
        ladder_time(s, [&] { forward(d_out, d_lse, d_qkv, B, T, C, NH); }, attention_work(s->limit, 0, B, T, C, NH));
    free(qkv); free(out); free(preatt); free(att); free(lse); free(slack); free(out_gpu);
    cuda_check(cudaFree(d_qkv)); cuda_check(cudaFree(d_out)); cuda_check(cudaFree(d_lse));
}

static int attention_step_main_bf16(LadderStep s, AttentionForwardBf16 forward) {
    s.limit = LIMIT_BF16;
    ladder_begin(&s);
    for (const auto& shape : ATTENTION_SHAPES)
        attention_check_bf16(forward, shape[0], shape[1], shape[2], shape[3], shape[4], &s, false);
    if (ladder_shape_big()) attention_check_bf16(forward, 4, 1024, 768, 12, 1, &s, true);
    return ladder_end(&s);
}

#endif  // DEV_KERNELS_ATTENTION_CUH
