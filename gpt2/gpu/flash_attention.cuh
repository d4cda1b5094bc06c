// gpt2/gpu/flash_attention.cuh: the bf16 path's causal self-attention, forward and backward, on
// the CUDA cores, never storing the T x T scores; bf16 in and out, float32 inside.
// gpt2/gpu/flash_attention_mma.cuh: the same arithmetic on the tensor cores.

#ifndef GPT2_GPU_FLASH_ATTENTION_CUH
#define GPT2_GPU_FLASH_ATTENTION_CUH

#include "../arithmetic.h"  // attention_scale
#include "cuda_utils.cuh"

// Flash attention (Dao et al. 2022; lesson 8 and doc/gpu.md "Kernel notes" derive it): online
// softmax keeps m, l = sum exp(s - m) and a = sum exp(s - m) v, rescaled by exp(m - m') when m
// grows; a / l is exact. The backward recomputes P = exp(S - lse), dS = P (dP - D) with
// D = dO . o, in a dK/dV kernel and a dQ kernel: one owner per output, no atomics, same bits.

// A thread holds a row (or a slice: FlashSlices) in registers, hence HS as a template parameter;
// the other side is staged in shared memory, and a warp reads one row of it at a time (a
// broadcast). Scores are in base 2 (q scaled by log2(e)/sqrt(hs)): one exp2f each.
#define FLASH_ROWS 64    // rows a block owns: queries (forward, dQ) or keys (dK, dV)
#define FLASH_TILE 32    // rows of the other side staged in shared memory at a time
#define FLASH_STEP 16    // keys whose scores a forward thread holds at once: one online-softmax step
#define FLASH_FWD_W 64   // most floats of a row one thread holds in the forward (q and the output)
#define FLASH_BWD_W 32   // the same in the backward, whose threads hold four such rows
#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f

// A row of HS floats over TPR threads, W each (a wider row would not fit in registers). Slices in
// shared memory are padded by 4 floats when TPR > 1: a row's lanes then read different banks.
template <int HS, int MAXW>
struct FlashSlices {
    static constexpr int W = HS < MAXW ? HS : MAXW;
    static constexpr int TPR = HS / W;
    static constexpr int SS4 = (W + (TPR > 1 ? 4 : 0)) / 4;  // slice stride, in float4
    static constexpr int RS4 = TPR * SS4;                     // row stride, in float4
    static constexpr int THREADS = FLASH_ROWS * TPR;
    static_assert(W % 4 == 0 && HS % W == 0 && 32 % TPR == 0, "row slices must be whole float4s");
};
static_assert(FLASH_ROWS % FLASH_TILE == 0, "a key block starts at a query tile's start");
static_assert(FLASH_TILE % FLASH_STEP == 0, "a tile is whole steps");

// Sums a partial dot product over the TPR neighbouring lanes that share a row; each of them gets
// the same bits.
template <int TPR>
__device__ __forceinline__ float flash_row_sum(float v) {
#pragma unroll
    for (int o = 1; o < TPR; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The dot product of a thread's W register floats with the same slice of a staged row.
template <int W>
__device__ __forceinline__ float flash_dot(const float* x, const float4* y) {
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < W / 4; e++) {
        float4 v = y[e];
        s += x[4 * e] * v.x;
        s += x[4 * e + 1] * v.y;
        s += x[4 * e + 2] * v.z;
        s += x[4 * e + 3] * v.w;
    }
    return s;
}

// acc += w * y over a thread's slice.
template <int W>
__device__ __forceinline__ void flash_axpy(float* acc, float w, const float4* y) {
#pragma unroll
    for (int e = 0; e < W / 4; e++) {
        float4 v = y[e];
        acc[4 * e] += w * v.x;
        acc[4 * e + 1] += w * v.y;
        acc[4 * e + 2] += w * v.z;
        acc[4 * e + 3] += w * v.w;
    }
}

// A thread's slice of one row, W bf16 at p times scale; zeros past T (such threads still compute,
// to reach the barriers and shuffles, but write nothing).
template <int W>
__device__ __forceinline__ void flash_load_slice(float* x, const bf16* p, bool valid, float scale) {
    const __nv_bfloat162* p2 = reinterpret_cast<const __nv_bfloat162*>(p);
#pragma unroll
    for (int e = 0; e < W / 2; e++) {
        __nv_bfloat162 v = valid ? p2[e] : __floats2bfloat162_rn(0.0f, 0.0f);
        x[2 * e] = __bfloat162float(v.x) * scale;
        x[2 * e + 1] = __bfloat162float(v.y) * scale;
    }
}

// A thread's slice of one row, times scale, rounded to bf16 at p.
template <int W>
__device__ __forceinline__ void flash_store_slice(bf16* p, const float* x, float scale) {
    __nv_bfloat162* p2 = reinterpret_cast<__nv_bfloat162*>(p);
#pragma unroll
    for (int e = 0; e < W / 2; e++) p2[e] = __floats2bfloat162_rn(x[2 * e] * scale, x[2 * e + 1] * scale);
}

// Rows r0 .. r0+FLASH_TILE-1 (HS bf16 at src + r * ld) into a float tile in S's slices; rows
// from T on are zeros. Consecutive threads read consecutive 8 bytes: coalesced.
template <int HS, typename S>
__device__ __forceinline__ void flash_stage(float4* tile, const bf16* src, size_t ld, int r0, int T) {
    for (int i = threadIdx.x; i < FLASH_TILE * HS / 4; i += blockDim.x) {
        int r = i / (HS / 4), d = (i % (HS / 4)) * 4;
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < T) {
            const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(src + (size_t)(r0 + r) * ld + d);
            __nv_bfloat162 a = p[0], b = p[1];
            x = make_float4(__bfloat162float(a.x), __bfloat162float(a.y), __bfloat162float(b.x),
                            __bfloat162float(b.y));
        }
        tile[r * S::RS4 + (d / S::W) * S::SS4 + (d % S::W) / 4] = x;
    }
}

// out (B,T,C) and lse (B,NH,T) from qkv (B,T,3C); grid (row tiles, NH, B). scale = 1/sqrt(HS).
template <int HS>
__global__ void __launch_bounds__(FlashSlices<HS, FLASH_FWD_W>::THREADS)
flash_attention_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int C, int NH, float scale) {
    typedef FlashSlices<HS, FLASH_FWD_W> S;
    __shared__ float4 k_tile[FLASH_TILE * S::RS4], v_tile[FLASH_TILE * S::RS4];
    int h = blockIdx.y, b = blockIdx.z;
    // The last row tile sees the most keys: started first, it shortens the launch's tail.
    int row0 = (gridDim.x - 1 - blockIdx.x) * FLASH_ROWS;
    int t = row0 + threadIdx.x / S::TPR, slice = threadIdx.x % S::TPR;
    int warp_last = row0 + (threadIdx.x / 32 + 1) * (32 / S::TPR) - 1;  // the warp's last row
    size_t ld = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * ld + h * HS;  // Q of (b, h); K at +C, V at +2C
    float q[S::W], acc[S::W];
    flash_load_slice<S::W>(q, head + (size_t)t * ld + slice * S::W, t < T, scale * FLASH_LOG2E);
#pragma unroll
    for (int e = 0; e < S::W; e++) acc[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // key 0 is in every row's first step: m is finite after it
    int key_end = min(row0 + FLASH_ROWS, T);  // keys past the block's last row are masked for all
    for (int k0 = 0; k0 < key_end; k0 += FLASH_TILE) {
        __syncthreads();  // every thread is done with the previous tile
        flash_stage<HS, S>(k_tile, head + C, ld, k0, T);
        flash_stage<HS, S>(v_tile, head + 2 * C, ld, k0, T);
        __syncthreads();
        if (warp_last < k0) continue;  // the whole warp is before this tile (warp-uniform)
        // FLASH_STEP keys a step: scores, new maximum, one rescale, output. Not unrolled: a whole
        // unrolled tile keeps nvcc from merging the float4 reads into 16-byte loads.
#pragma unroll 1
        for (int j0 = 0; j0 < FLASH_TILE; j0 += FLASH_STEP) {
            if (warp_last < k0 + j0) break;  // keys after all of the warp's rows
            float s[FLASH_STEP];
            float m_new = m;
#pragma unroll
            for (int j = 0; j < FLASH_STEP; j++) {
                s[j] = flash_row_sum<S::TPR>(flash_dot<S::W>(q, k_tile + (j0 + j) * S::RS4 + slice * S::SS4));
                if (k0 + j0 + j > t) s[j] = -INFINITY;  // the causal mask: exp2f(-inf) = 0
                m_new = fmaxf(m_new, s[j]);
            }
            float rescale = exp2f(m - m_new);  // 0 at the first step, where m = -inf and a = l = 0
            l *= rescale;
#pragma unroll
            for (int e = 0; e < S::W; e++) acc[e] *= rescale;
            m = m_new;
#pragma unroll
            for (int j = 0; j < FLASH_STEP; j++) {
                float p = exp2f(s[j] - m);
                l += p;
                flash_axpy<S::W>(acc, p, v_tile + (j0 + j) * S::RS4 + slice * S::SS4);
            }
        }
    }
    if (t < T) {
        flash_store_slice<S::W>(out + ((size_t)b * T + t) * C + h * HS + slice * S::W, acc, 1.0f / l);
        if (slice == 0) lse[((size_t)b * NH + h) * T + t] = (m + log2f(l)) * FLASH_LN2;  // base 2 -> e
    }
}

// D[b,h,t] = dO . O over row t of head h, in float, and lse2[b,h,t] = lse[b,h,t] log2(e) (the
// backward's exponents are in base 2), both in rows of ld >= T floats: past T, D = 0 and
// lse2 = +inf, so that exp2f(s - lse2) = 0 there. One thread per (b, t, h), h fastest: a warp
// reads consecutive heads of a position, one contiguous stretch.
__global__ void flash_attention_backward_d_kernel(float* D, float* lse2, const bf16* dout, const bf16* out,
                                                  const float* lse, int B, int T, int C, int NH, int ld) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * ld * NH) return;
    int h = (int)(idx % NH), hs = C / NH;
    size_t bt = idx / NH, b = bt / ld, t = bt % ld;
    size_t at = (b * NH + h) * ld + t;
    if (t >= (size_t)T) {
        D[at] = 0.0f;
        lse2[at] = INFINITY;
        return;
    }
    const bf16* o = out + (b * T + t) * C + h * hs;
    const bf16* d = dout + (b * T + t) * C + h * hs;
    float sum = 0.0f;
    for (int e = 0; e < hs; e++) sum += __bfloat162float(d[e]) * __bfloat162float(o[e]);
    D[at] = sum;
    lse2[at] = lse[(b * NH + h) * T + t] * FLASH_LOG2E;
}

// The backward kernels' arguments (both kinds): dqkv (B,T,3C), written; dout (B,T,C); lse2, D
// (B,NH,ld): flash_attention_backward_d_kernel's.
typedef struct {
    bf16* dqkv;
    const bf16* dout;
    const bf16* qkv;
    const float* lse2;
    const float* D;
    int T, C, NH, ld;
    float scale;
} FlashBackward;

// dK and dV (the +C and +2C parts of dqkv, written); grid (key tiles, NH, B). Thread: key row j,
// one slice. Walks the query tiles from the block's first key on.
template <int HS>
__global__ void __launch_bounds__(FlashSlices<HS, FLASH_BWD_W>::THREADS)
flash_attention_backward_dkv_kernel(FlashBackward a) {
    typedef FlashSlices<HS, FLASH_BWD_W> S;
    __shared__ float4 q_tile[FLASH_TILE * S::RS4], do_tile[FLASH_TILE * S::RS4];
    __shared__ float lse_tile[FLASH_TILE], d_tile[FLASH_TILE];
    int T = a.T, C = a.C, NH = a.NH;
    int h = blockIdx.y, b = blockIdx.z;
    int row0 = blockIdx.x * FLASH_ROWS;  // the first key tile sees the most queries, and starts first
    int j = row0 + threadIdx.x / S::TPR, slice = threadIdx.x % S::TPR;
    int warp_first = row0 + (threadIdx.x / 32) * (32 / S::TPR);  // the warp's first key
    size_t ld = 3 * (size_t)C;
    const bf16* head = a.qkv + (size_t)b * T * ld + h * HS;
    const bf16* do_head = a.dout + (size_t)b * T * C + h * HS;
    const float* lse2_row = a.lse2 + ((size_t)b * NH + h) * a.ld;
    const float* d_row = a.D + ((size_t)b * NH + h) * a.ld;
    // k pre-scaled: q . k is the score in base 2; dK is scaled by 1/sqrt(hs) at the end.
    float k[S::W], v[S::W], dk[S::W], dv[S::W];
    const bf16* kv_row = head + (size_t)j * ld + slice * S::W;
    flash_load_slice<S::W>(k, kv_row + C, j < T, a.scale * FLASH_LOG2E);
    flash_load_slice<S::W>(v, kv_row + 2 * C, j < T, 1.0f);
#pragma unroll
    for (int e = 0; e < S::W; e++) dk[e] = dv[e] = 0.0f;
    for (int i0 = row0; i0 < T; i0 += FLASH_TILE) {
        __syncthreads();
        flash_stage<HS, S>(q_tile, head, ld, i0, T);
        flash_stage<HS, S>(do_tile, do_head, C, i0, T);
        if (threadIdx.x < FLASH_TILE) {
            int i = i0 + threadIdx.x;
            lse_tile[threadIdx.x] = i < T ? lse2_row[i] : 0.0f;
            d_tile[threadIdx.x] = i < T ? d_row[i] : 0.0f;
        }
        __syncthreads();
        // Queries from the warp's first key on; warp-uniform bounds, as flash_row_sum's shuffles need.
        int ibeg = max(0, warp_first - i0), iend = min(FLASH_TILE, T - i0);
        for (int ii = ibeg; ii < iend; ii++) {
            const float4* qi = q_tile + ii * S::RS4 + slice * S::SS4;
            const float4* doi = do_tile + ii * S::RS4 + slice * S::SS4;
            float s = flash_row_sum<S::TPR>(flash_dot<S::W>(k, qi));
            float dp = flash_row_sum<S::TPR>(flash_dot<S::W>(v, doi));
            float p = j <= i0 + ii ? exp2f(s - lse_tile[ii]) : 0.0f;  // causal: key j after query i
            float ds = p * (dp - d_tile[ii]);
            flash_axpy<S::W>(dv, p, doi);
            flash_axpy<S::W>(dk, ds, qi);
        }
    }
    if (j < T) {
        bf16* out_row = a.dqkv + ((size_t)b * T + j) * ld + h * HS + slice * S::W;
        flash_store_slice<S::W>(out_row + C, dk, a.scale);
        flash_store_slice<S::W>(out_row + 2 * C, dv, 1.0f);
    }
}

// dQ (the first C of each dqkv row, written); grid (query tiles, NH, B). Thread: query row i, one
// slice. Walks the key tiles up to the block's last query.
template <int HS>
__global__ void __launch_bounds__(FlashSlices<HS, FLASH_BWD_W>::THREADS)
flash_attention_backward_dq_kernel(FlashBackward a) {
    typedef FlashSlices<HS, FLASH_BWD_W> S;
    __shared__ float4 k_tile[FLASH_TILE * S::RS4], v_tile[FLASH_TILE * S::RS4];
    int T = a.T, C = a.C, NH = a.NH;
    int h = blockIdx.y, b = blockIdx.z;
    int row0 = (gridDim.x - 1 - blockIdx.x) * FLASH_ROWS;  // the longest rows first, as in the forward
    int i = row0 + threadIdx.x / S::TPR, slice = threadIdx.x % S::TPR;
    int warp_last = row0 + (threadIdx.x / 32 + 1) * (32 / S::TPR) - 1;
    size_t ld = 3 * (size_t)C;
    const bf16* head = a.qkv + (size_t)b * T * ld + h * HS;
    // q pre-scaled: q . k is the score in base 2 (dQ sums plain k).
    float q[S::W], dO[S::W], dq[S::W];
    flash_load_slice<S::W>(q, head + (size_t)i * ld + slice * S::W, i < T, a.scale * FLASH_LOG2E);
    flash_load_slice<S::W>(dO, a.dout + ((size_t)b * T + i) * C + h * HS + slice * S::W, i < T, 1.0f);
#pragma unroll
    for (int e = 0; e < S::W; e++) dq[e] = 0.0f;
    size_t row = ((size_t)b * NH + h) * a.ld + i;
    float lse2 = i < T ? a.lse2[row] : 0.0f, d_i = i < T ? a.D[row] : 0.0f;
    int key_end = min(row0 + FLASH_ROWS, T);
    for (int k0 = 0; k0 < key_end; k0 += FLASH_TILE) {
        __syncthreads();
        flash_stage<HS, S>(k_tile, head + C, ld, k0, T);
        flash_stage<HS, S>(v_tile, head + 2 * C, ld, k0, T);
        __syncthreads();
        // Keys up to the warp's last query (a warp-uniform bound).
        int jend = min(FLASH_TILE, min(warp_last, T - 1) - k0 + 1);
        for (int jj = 0; jj < jend; jj++) {
            const float4* kj = k_tile + jj * S::RS4 + slice * S::SS4;
            const float4* vj = v_tile + jj * S::RS4 + slice * S::SS4;
            float s = flash_row_sum<S::TPR>(flash_dot<S::W>(q, kj));
            float dp = flash_row_sum<S::TPR>(flash_dot<S::W>(dO, vj));
            float p = k0 + jj <= i && i < T ? exp2f(s - lse2) : 0.0f;
            flash_axpy<S::W>(dq, p * (dp - d_i), kj);
        }
    }
    if (i < T) flash_store_slice<S::W>(a.dqkv + ((size_t)b * T + i) * ld + h * HS + slice * S::W, dq, a.scale);
}

// The head sizes the kernels are built for.
static bool flash_attention_supports(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

// The head size C/NH; one the kernels are not built for stops the program.
static int flash_head_size(int C, int NH) {
    int hs = NH > 0 && C % NH == 0 ? C / NH : 0;
    if (!flash_attention_supports(hs))
        fail("flash attention: head size C/NH = %d/%d is not supported (16, 32, 64 or 128)", C, NH);
    return hs;
}

// The kernels access bf16 in pairs, 32 bits at a time.
static void flash_check_aligned(const void* p, const char* name) {
    if ((uintptr_t)p % 4 != 0) fail("flash attention: %s is not 4-byte aligned", name);
}

// The backward's arguments, with D and lse2 computed into the scratch buffer: rows of whole
// 64-row tiles (ld), which the tensor-core kernels stage 16 bytes at a time. The launcher sets scale.
static FlashBackward flash_attention_backward_args(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                                   const float* lse, int B, int T, int C, int NH) {
    int ld = (T + 63) / 64 * 64;
    size_t n = (size_t)B * NH * ld;
    float* D = scratch_floats(2 * n);
    flash_attention_backward_d_kernel<<<ceil_div(n, 256), 256>>>(D, D + n, dout, out, lse, B, T, C, NH, ld);
    launch_check(flash_attention_backward_d_kernel);
    FlashBackward a = {dqkv, dout, qkv, D + n, D, T, C, NH, ld, 0.0f};
    return a;
}

#endif // GPT2_GPU_FLASH_ATTENTION_CUH
