// gpt2/gpu/attention_paged.cuh: generation's attention on the GPU: the new tokens' keys and values
// into their pages, then each token's attention against its paged cache (gpt2/kv_pages.h:
// attention_forward_paged, the CPU twin), split over the positions as flash-decoding does (Dao,
// Haziza, Massa, Sizov 2023). float32 or bf16 in and out, float32 inside.

#ifndef GPT2_GPU_ATTENTION_PAGED_CUH
#define GPT2_GPU_ATTENTION_PAGED_CUH

#include "../arithmetic.h"      // attention_scale
#include "../kv_pages.h"        // kv_row: where a position's key and value lie in the pool
#include "cuda_utils.cuh"
#include "flash_attention_mma.cuh"  // flash_row_sum; flash attention runs a bf16 prefill

// ---------- the split ----------
//
// Decode is memory-bound (one multiply-add per value of K and V read), and one block per (token,
// head) leaves most SMs idle at small batches. So each token's positions are cut into chunks of
// PAGED_CHUNK, one block each, whose softmax parts (m, l, acc) a second kernel merges in a fixed
// order: a token's output does not depend on the batch, to the bit. Why 64 positions, and the
// timings: doc/gpu.md "Generation: attention against the paged cache".

#define PAGED_WARPS 4   // warps per block
#define PAGED_CHUNK 64  // positions per block: 4 pages, one per warp
static_assert(PAGED_CHUNK % (PAGED_WARPS * KV_PAGE) == 0, "a chunk is whole pages, the same number per warp");

// A warp reads a page of one head, KV_PAGE rows of HS values, 16 bytes (W values) a lane: LP lanes
// a row, ROWS rows a step, 512 contiguous bytes (coalesced). A row's lanes add by shuffles.
template <typename floatX, int HS>
struct PagedSlices {
    static constexpr int W = 16 / sizeof(floatX);
    static constexpr int LP = HS / W;
    static constexpr int ROWS = 32 / LP;
    static_assert(HS % W == 0 && LP <= 32 && 32 % LP == 0 && KV_PAGE % ROWS == 0, "rows of whole 16-byte loads");
    static_assert(HS <= PAGED_WARPS * 32, "the block's merge takes one channel per thread");
};

// 16 bytes at p (aligned) as 4 float32 or 8 bf16. A bf16 is the top half of a float32: moving its
// 16 bits up is the exact conversion (element 0 is the low half).
__device__ __forceinline__ void load16(float* x, const float* p) {
    float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x;
    x[1] = v.y;
    x[2] = v.z;
    x[3] = v.w;
}
__device__ __forceinline__ void load16(float* x, const bf16* p) {
    uint4 v = *reinterpret_cast<const uint4*>(p);
    unsigned int pairs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[2 * i] = __int_as_float((int)(pairs[i] << 16));
        x[2 * i + 1] = __int_as_float((int)(pairs[i] & 0xffff0000u));
    }
}

// ---------- online softmax, in parts ----------
// A run of positions as the CPU keeps it: m the largest score, l = sum exp(s - m), acc = sum
// exp(s - m) v. A position is the run (s, 1, v); two runs merge rescaled to the larger maximum; an
// empty run (m = -inf) weighs nothing. Every merge below (positions, lanes, warps, chunks) is this.

__device__ __forceinline__ float softmax_weight(float m, float m_new) {
    return m == -INFINITY ? 0.0f : expf(m - m_new);
}

// (m, l, acc of N values) absorbs the run (m2, l2, acc2): first the one, then the other.
template <int N>
__device__ __forceinline__ void softmax_merge(float& m, float& l, float* acc, float m2, float l2, const float* acc2) {
    float m_new = fmaxf(m, m2);
    float w1 = softmax_weight(m, m_new), w2 = softmax_weight(m2, m_new);
    l = l * w1 + l2 * w2;
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = acc[i] * w1 + acc2[i] * w2;
    m = m_new;
}

// ---------- the kernels ----------

// The new tokens' keys and values, qkv (B,T,3C), into the pool at positions pos[b]+t: one thread
// per (token, channel), a warp's reads and writes consecutive (coalesced).
template <typename floatX>
__global__ void kv_store_kernel(floatX* key, floatX* value, const floatX* qkv, const int* pages, const int* pos,
                                int B, int T, int C, int NH, int max_pages) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C), hs = C / NH;
    size_t bt = idx / C;
    int b = (int)(bt / T), t = (int)(bt % T);
    size_t row = kv_row(pages + (size_t)b * max_pages, pos[b] + t, c / hs, NH, hs);
    const floatX* x = qkv + bt * 3 * C;
    key[row + c % hs] = x[C + c];
    value[row + c % hs] = x[2 * C + c];
}

// The chunks' softmax parts in the caller's scratch: acc (B*T, chunks, C); m, l (B*T, chunks, NH).
typedef struct {
    float* acc;
    float* m;
    float* l;
} PagedPartials;

static PagedPartials paged_partials(float* scratch, int BT, int chunks, int C, int NH) {
    PagedPartials p;
    p.acc = scratch;
    p.m = p.acc + (size_t)BT * chunks * C;
    p.l = p.m + (size_t)BT * chunks * NH;
    return p;
}

// out (B,T,C) or the chunks' parts; grid (B*T tokens, NH, chunks). Token (b, t) sees positions
// 0..pos[b]+t; warp w takes pages w, w+PAGED_WARPS, ... of chunk blockIdx.z. Each group of LP
// lanes keeps a run; groups merge by shuffles, then warps in shared memory, in order.
template <typename floatX, int HS>
__global__ void __launch_bounds__(PAGED_WARPS * 32)
attention_paged_forward_kernel(floatX* out, PagedPartials part, const floatX* key, const floatX* value,
                               const int* pages, const int* pos, const floatX* qkv, int T, int NH, int max_pages,
                               float scale) {
    typedef PagedSlices<floatX, HS> S;
    __shared__ float warp_acc[PAGED_WARPS * HS];
    __shared__ float warp_m[PAGED_WARPS], warp_l[PAGED_WARPS];
    int bt = blockIdx.x, h = blockIdx.y, chunk = blockIdx.z, C = NH * HS;
    int b = bt / T, t = bt % T;
    int last = pos[b] + t;  // the token's own position, the last it sees
    int chunks = last / PAGED_CHUNK + 1;
    if (chunk >= chunks) return;  // the whole block: past the token (a shorter sequence of the batch)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int group = lane / S::LP, slice = lane % S::LP;  // the group's row in a step, the lane's W values of it
    const int* table = pages + (size_t)b * max_pages;

    float q[S::W], acc[S::W];
    load16(q, qkv + (size_t)bt * 3 * C + h * HS + slice * S::W);
#pragma unroll
    for (int i = 0; i < S::W; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int end = min((chunk + 1) * PAGED_CHUNK, last + 1);  // past the chunk's last position for this token
    for (int p0 = chunk * PAGED_CHUNK + warp * KV_PAGE; p0 < end; p0 += PAGED_WARPS * KV_PAGE) {
#pragma unroll
        for (int r = 0; r < KV_PAGE; r += S::ROWS) {
            // Rows after the token's position are not read: a page holds stale data there.
            int p = p0 + r + group;
            bool valid = p <= last;
            float k[S::W], v[S::W];
            if (valid) {
                size_t at = kv_row(table, p, h, NH, HS) + slice * S::W;
                load16(k, key + at);
                load16(v, value + at);
            } else {
#pragma unroll
                for (int i = 0; i < S::W; i++) k[i] = v[i] = 0.0f;
            }
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < S::W; i++) dot += q[i] * k[i];
            float s = flash_row_sum<S::LP>(dot) * scale;  // every lane takes part in the shuffles
            if (valid) softmax_merge<S::W>(m, l, acc, s, 1.0f, v);
        }
    }
    // The groups merge: each step, every lane absorbs the lane o away; group 0 absorbs groups
    // 1, 2, ... in a fixed order and ends with the warp's run (the others' results are unused).
    for (int o = S::LP; o < 32; o <<= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
        float acc2[S::W];
#pragma unroll
        for (int i = 0; i < S::W; i++) acc2[i] = __shfl_xor_sync(0xffffffffu, acc[i], o);
        softmax_merge<S::W>(m, l, acc, m2, l2, acc2);
    }
    if (group == 0) {
#pragma unroll
        for (int i = 0; i < S::W; i++) warp_acc[warp * HS + slice * S::W + i] = acc[i];
        if (slice == 0) {
            warp_m[warp] = m;
            warp_l[warp] = l;
        }
    }
    __syncthreads();
    // The warps merge in order, a thread per channel (warp 0 has the chunk's first position).
    int c = threadIdx.x;
    if (c >= HS) return;
    float cm = warp_m[0], cl = warp_l[0], ca = warp_acc[c];
    for (int w = 1; w < PAGED_WARPS; w++) softmax_merge<1>(cm, cl, &ca, warp_m[w], warp_l[w], &warp_acc[w * HS + c]);
    if (chunks == 1) {
        out[(size_t)bt * C + h * HS + c] = from_float<floatX>(ca / cl);
        return;
    }
    size_t at = (size_t)bt * gridDim.z + chunk;  // (token, chunk)
    part.acc[at * C + h * HS + c] = ca;
    if (c == 0) {
        part.m[at * NH + h] = cm;
        part.l[at * NH + h] = cl;
    }
}

// out (B,T,C) of the tokens that span several chunks, merging their parts in order 0, 1, ...
// One thread per value: a warp reads consecutive channels; m and l are broadcast.
template <typename floatX>
__global__ void attention_paged_combine_kernel(floatX* out, PagedPartials part, const int* pos, int B, int T,
                                               int C, int NH, int num_chunks) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C), h = c / (C / NH);
    size_t bt = idx / C;
    int chunks = (pos[bt / T] + (int)(bt % T)) / PAGED_CHUNK + 1;
    if (chunks == 1) return;  // attention_paged_forward_kernel wrote it
    size_t at = bt * num_chunks;
    float m = part.m[at * NH + h], l = part.l[at * NH + h], acc = part.acc[at * C + c];
    for (int j = 1; j < chunks; j++) {
        softmax_merge<1>(m, l, &acc, part.m[(at + j) * NH + h], part.l[(at + j) * NH + h],
                         &part.acc[(at + j) * C + c]);
    }
    out[idx] = from_float<floatX>(acc / l);
}

// ---------- the launcher ----------

// Scratch floats attention_paged_forward_gpu needs for B x T new tokens up to max_len positions:
// the chunks' parts, or a bf16 prefill's lse (B, NH, T), whichever is more (LayerCache: scratch).
static size_t attention_paged_scratch_floats(int B, int T, int NH, int hs, int max_len) {
    size_t chunks = (size_t)ceil_div((size_t)max_len, PAGED_CHUNK);
    size_t parts = chunks > 1 ? (size_t)B * T * chunks * NH * (hs + 2) : 0;
    size_t lse = (size_t)B * NH * T;
    return parts > lse ? parts : lse;
}

// A prefill (every pos 0) attends to its own tokens, in qkv: in bf16 by flash attention (its
// unused lse in scratch), returning 1. float32 returns 0: its attention would store (B,NH,T,T)
// scores, so the paged kernel runs instead, reading the pages just written.
static int attention_prefill_flash(bf16* out, const LayerCacheOf<bf16>* cache, const bf16* qkv, int B, int T,
                                   int C, int NH) {
    size_t need = (size_t)B * NH * T;
    if (cache->scratch_size < need) {
        fail("attention_paged_forward_gpu: the prefill of B=%d x T=%d needs %zu floats of scratch, the cache "
             "has %zu: size it with attention_paged_scratch_floats", B, T, need, cache->scratch_size);
    }
    flash_attention_forward_gpu(out, cache->scratch, qkv, B, T, C, NH);
    return 1;
}
static int attention_prefill_flash(float* out, const LayerCacheOf<float>* cache, const float* qkv, int B, int T,
                                   int C, int NH) {
    return 0;
}

template <typename floatX, int HS>
static void attention_paged_launch(floatX* out, PagedPartials part, const LayerCacheOf<floatX>* cache,
                                   const floatX* qkv, int B, int T, int NH, int chunks) {
    // tokens on x: up to 2^31 - 1 blocks (y and z: 65535)
    dim3 grid(B * T, NH, chunks);
    attention_paged_forward_kernel<floatX, HS><<<grid, PAGED_WARPS * 32>>>(
        out, part, cache->key, cache->value, cache->pages, cache->pos, qkv, T, NH, cache->max_pages,
        attention_scale(HS));
    launch_check(attention_paged_forward_kernel);
}

// Any other head size (the tests' tiny models have 4 or 8): one thread per output value, each
// running the whole online softmax, every channel recomputing the scores: hs times the work,
// and simple.
template <typename floatX>
__global__ void attention_paged_any_kernel(floatX* out, const floatX* key, const floatX* value, const int* pages,
                                           const int* pos, const floatX* qkv, int B, int T, int C, int NH,
                                           int max_pages, float scale) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int hs = C / NH, c = (int)(idx % C), h = c / hs, i = c % hs;
    size_t bt = idx / C;
    int b = (int)(bt / T), t = (int)(bt % T);
    const int* table = pages + (size_t)b * max_pages;
    const floatX* q = qkv + bt * 3 * C + h * hs;
    float maxval = -INFINITY, sum = 0.0f, o = 0.0f;
    for (int t2 = 0; t2 <= pos[b] + t; t2++) {
        size_t row = kv_row(table, t2, h, NH, hs);
        float score = 0.0f;
        for (int j = 0; j < hs; j++) score += to_float(q[j]) * to_float(key[row + j]);
        score *= scale;
        if (score > maxval) {  // rescale to the new maximum (exp(-inf) = 0)
            float r = expf(maxval - score);
            sum *= r;
            o *= r;
            maxval = score;
        }
        float w = expf(score - maxval);
        sum += w;
        o += w * to_float(value[row + i]);
    }
    out[idx] = from_float<floatX>(o / sum);
}

// out (B,T,C) = the attention of the T new tokens of B sequences, qkv (B,T,3C), against their
// paged caches, which they join first (as attention_forward_paged). cache's arrays are device
// memory; max_len must be the largest pos[b] + T. Head sizes 16 to 128 run the split kernels.
template <typename floatX>
static void attention_paged_forward_gpu(floatX* out, const LayerCacheOf<floatX>* cache, const floatX* qkv, int B,
                                        int T, int C, int NH) {
    int hs = NH > 0 && C % NH == 0 ? C / NH : 0;
    if (hs == 0) fail("attention_paged_forward_gpu: C=%d is not a multiple of NH=%d", C, NH);
    if (hs != 16 && hs != 32 && hs != 64 && hs != 128) {
        kv_store_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(cache->key, cache->value, qkv,
                                                                            cache->pages, cache->pos, B, T, C, NH,
                                                                            cache->max_pages);
        launch_check(kv_store_kernel);
        attention_paged_any_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(
            out, cache->key, cache->value, cache->pages, cache->pos, qkv, B, T, C, NH, cache->max_pages,
            attention_scale(hs));
        launch_check(attention_paged_any_kernel);
        return;
    }
    if (!aligned16(qkv) || !aligned16(cache->key) || !aligned16(cache->value))
        fail("attention_paged_forward_gpu: qkv and the pool must be 16-byte aligned (read 16 bytes at a time)");
    kv_store_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(cache->key, cache->value, qkv, cache->pages,
                                                                        cache->pos, B, T, C, NH, cache->max_pages);
    launch_check(kv_store_kernel);
    if (cache->prefill && attention_prefill_flash(out, cache, qkv, B, T, C, NH)) return;

    int chunks = ceil_div((size_t)cache->max_len, PAGED_CHUNK);
    PagedPartials part = {NULL, NULL, NULL};  // not used when every token fits one chunk
    if (chunks > 1) {
        size_t need = (size_t)B * T * chunks * (C + 2 * NH);
        if (cache->scratch_size < need) {
            fail("attention_paged_forward_gpu: B=%d x T=%d tokens up to %d positions need %zu floats of scratch, "
                 "the cache has %zu: size it with attention_paged_scratch_floats", B, T, cache->max_len, need,
                 cache->scratch_size);
        }
        part = paged_partials(cache->scratch, B * T, chunks, C, NH);
    }
    switch (hs) {
    case 16: attention_paged_launch<floatX, 16>(out, part, cache, qkv, B, T, NH, chunks); break;
    case 32: attention_paged_launch<floatX, 32>(out, part, cache, qkv, B, T, NH, chunks); break;
    case 64: attention_paged_launch<floatX, 64>(out, part, cache, qkv, B, T, NH, chunks); break;
    default: attention_paged_launch<floatX, 128>(out, part, cache, qkv, B, T, NH, chunks); break;
    }
    if (chunks > 1) {
        attention_paged_combine_kernel<floatX><<<ceil_div((size_t)B * T * C, 256), 256>>>(out, part, cache->pos,
                                                                                         B, T, C, NH, chunks);
        launch_check(attention_paged_combine_kernel);
    }
}

#endif // GPT2_GPU_ATTENTION_PAGED_CUH
