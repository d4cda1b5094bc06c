// gpt2/gpu/flash_attention.cuh: the bf16 path's causal self-attention, forward and backward,
// that never stores the T x T scores (Dao et al. 2022), on the CUDA cores: bf16 in and out,
// float32 inside. gpt2/gpu/flash_attention_mma.cuh runs the same arithmetic on the tensor cores.

#ifndef GPT2_GPU_FLASH_ATTENTION_CUH
#define GPT2_GPU_FLASH_ATTENTION_CUH

#include "../arithmetic.h"  // attention_scale
#include "cuda_utils.cuh"

// Attention without its (T, T) matrices. Row i of one head has the scores s_j = q_i . k_j / sqrt(hs)
// for the keys j <= i (causal), and the output
//     o_i = sum_j exp(s_j - m) v_j / sum_j exp(s_j - m)
// holds for any constant m: m only keeps exp from overflowing, so any m >= the scores will do.
// Online softmax walks the keys a block at a time and keeps, over the keys seen so far, a running
// maximum m, the denominator l = sum exp(s_j - m) and the unnormalised output a = sum exp(s_j - m) v_j.
// When a block of keys raises the maximum to m', each term seen so far must become
// exp(s_j - m') = exp(s_j - m) exp(m - m'): multiplying l and a by exp(m - m') once per block
// makes them exactly what they would be had m' been used from the start. After the last block
// a / l is the softmax output itself, not an approximation of it (only float rounding differs: the
// terms are added in another order). Scores and probabilities exist only in registers, a block of
// keys at a time.
//
// The backward needs P_ij = exp(s_ij - lse_i), where lse_i = m + log l is the log of row i's
// softmax denominator: with that one float per row any probability follows from its score, so
// the forward stores lse, and the backward recomputes the scores S = Q K^T and P tile by tile
// (one more product) instead of reading a stored (T, T) matrix. With dP_ij = dO_i . v_j the
// softmax's gradient is dS_ij = P_ij (dP_ij - D_i), where D_i = sum_j P_ij dP_ij = dO_i . o_i (as
// o_i = sum_j P_ij v_j): a dot product of two rows of hs values, which a small kernel computes once
// per row. Then
//     dV_j = sum_i P_ij dO_i,   dK_j = sum_i dS_ij q_i / sqrt(hs),   dQ_i = sum_j dS_ij k_j / sqrt(hs).
// dK and dV are sums over queries, dQ a sum over keys. One kernel owns key rows and walks the
// queries, the other owns query rows and walks the keys, each computing S and P for itself: every
// output value has one owner that adds its terms in a fixed order, so there are no atomics and
// two runs give the same bits, for the price of computing S and P twice.
//
// How the kernels run (on the CUDA cores; gpt2/gpu/flash_attention_mma.cuh moves the products
// to the tensor cores): a block owns FLASH_ROWS rows (queries, or keys in the dK/dV kernel) of
// one (b, h), a thread one row, and the other side comes through shared memory FLASH_TILE rows
// at a time, converted to float once when loaded; all threads of a warp then read the same row
// of the tile, a broadcast. A thread
// keeps its row's values and accumulators in registers, so the head size is a template
// parameter (the loops over it unroll into registers). A row wider than FLASH_FWD_W (forward)
// or FLASH_BWD_W (backward, which holds four rows: k, v, dk, dv) floats would not fit in
// registers: 2 or 4 neighbouring lanes then share it, a slice each, and add their partial dot
// products with shuffles. Scores are kept in base 2: q (or k) is multiplied by log2(e)/sqrt(hs)
// once, so that each exponential is one exp2f, which the hardware computes directly.
// A block skips the key tiles after its last row (causal), and a warp the keys after its last row.

#define FLASH_ROWS 64    // rows a block owns: queries (forward, dQ) or keys (dK, dV)
#define FLASH_TILE 32    // rows of the other side staged in shared memory at a time
#define FLASH_STEP 16    // keys whose scores a forward thread holds at once: one online-softmax step
#define FLASH_FWD_W 64   // most floats of a row one thread holds in the forward (q and the output)
#define FLASH_BWD_W 32   // the same in the backward, whose threads hold four such rows
#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f

// How a row of HS floats is split over threads: W floats each, TPR threads per row. In shared
// memory a row is stored as its TPR slices, each padded by 4 floats when TPR > 1: lanes reading
// slices r = 0..TPR-1 of the same row then fall 4r banks apart, where without the padding
// (slices 32 or 64 floats apart) their 16-byte reads would hit the same banks and serialise.
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
// the same bits (float addition is commutative, so both partners of a butterfly step agree).
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

// A thread's slice of one row into registers: W bf16 at p times scale, or zeros for a row past T
// (such threads still compute, to reach the barriers and shuffles, but write nothing).
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

// Rows r0 .. r0+FLASH_TILE-1 of one head (row r: HS bf16 at src + r * ld) into a float tile in
// shared memory, in the slices of FlashSlices S; rows at or past T are zeros. Consecutive threads
// read consecutive 8-byte pieces of a row: coalesced.
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

// out (B,T,C) and lse (B,NH,T) from qkv (B,T,3C); grid (row tiles, NH, B). Thread: query row t,
// slice `slice` of it. scale = 1/sqrt(HS).
template <int HS>
__global__ void __launch_bounds__(FlashSlices<HS, FLASH_FWD_W>::THREADS)
flash_attention_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int C, int NH, float scale) {
    typedef FlashSlices<HS, FLASH_FWD_W> S;
    __shared__ float4 k_tile[FLASH_TILE * S::RS4], v_tile[FLASH_TILE * S::RS4];
    int h = blockIdx.y, b = blockIdx.z;
    // The last row tile sees the most keys: starting it first shortens the tail of the launch.
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
        if (warp_last < k0) continue;  // the whole warp is before this tile (a warp-uniform skip)
        // FLASH_STEP keys at a time: their scores, the new maximum, one rescale, then their
        // share of the output. The steps are a real loop (unroll 1): unrolled, the whole tile
        // would be one block of code so long that nvcc no longer merges the float4 reads of
        // shared memory into 16-byte loads (it emits four 4-byte loads each).
#pragma unroll 1
        for (int j0 = 0; j0 < FLASH_TILE; j0 += FLASH_STEP) {
            if (warp_last < k0 + j0) break;  // as above: keys after all of the warp's rows
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

// D[b,h,t] = dO . O over row t of head h, in float from the bf16 values (see above). One thread per
// (b, t, h), h fastest: a warp reads consecutive heads of a position, one contiguous stretch.
__global__ void flash_attention_backward_d_kernel(float* D, const bf16* dout, const bf16* out, int B, int T,
                                                  int C, int NH) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * NH) return;
    int h = (int)(idx % NH), hs = C / NH;
    size_t bt = idx / NH;
    const bf16* o = out + bt * C + h * hs;
    const bf16* d = dout + bt * C + h * hs;
    float sum = 0.0f;
    for (int e = 0; e < hs; e++) sum += __bfloat162float(d[e]) * __bfloat162float(o[e]);
    size_t b = bt / T, t = bt % T;
    D[(b * NH + h) * T + t] = sum;
}

// dK and dV (the +C and +2C parts of dqkv, written) for key rows; grid (key tiles, NH, B).
// Thread: key row j, one slice. Walks the query tiles from the block's first key on (earlier
// queries see none of its keys).
template <int HS>
__global__ void __launch_bounds__(FlashSlices<HS, FLASH_BWD_W>::THREADS)
flash_attention_backward_dkv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                    const float* D, int T, int C, int NH, float scale) {
    typedef FlashSlices<HS, FLASH_BWD_W> S;
    __shared__ float4 q_tile[FLASH_TILE * S::RS4], do_tile[FLASH_TILE * S::RS4];
    __shared__ float lse_tile[FLASH_TILE], d_tile[FLASH_TILE];
    int h = blockIdx.y, b = blockIdx.z;
    int row0 = blockIdx.x * FLASH_ROWS;  // the first key tile sees the most queries, and starts first
    int j = row0 + threadIdx.x / S::TPR, slice = threadIdx.x % S::TPR;
    int warp_first = row0 + (threadIdx.x / 32) * (32 / S::TPR);  // the warp's first key
    size_t ld = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * ld + h * HS;
    const bf16* do_head = dout + (size_t)b * T * C + h * HS;
    const float* lse_row = lse + ((size_t)b * NH + h) * T;
    const float* d_row = D + ((size_t)b * NH + h) * T;
    // k is pre-scaled so that q . k is the score in base 2; dK is scaled by 1/sqrt(hs) at the end.
    float k[S::W], v[S::W], dk[S::W], dv[S::W];
    const bf16* kv_row = head + (size_t)j * ld + slice * S::W;
    flash_load_slice<S::W>(k, kv_row + C, j < T, scale * FLASH_LOG2E);
    flash_load_slice<S::W>(v, kv_row + 2 * C, j < T, 1.0f);
#pragma unroll
    for (int e = 0; e < S::W; e++) dk[e] = dv[e] = 0.0f;
    for (int i0 = row0; i0 < T; i0 += FLASH_TILE) {
        __syncthreads();
        flash_stage<HS, S>(q_tile, head, ld, i0, T);
        flash_stage<HS, S>(do_tile, do_head, C, i0, T);
        if (threadIdx.x < FLASH_TILE) {
            int i = i0 + threadIdx.x;
            lse_tile[threadIdx.x] = i < T ? lse_row[i] * FLASH_LOG2E : 0.0f;
            d_tile[threadIdx.x] = i < T ? d_row[i] : 0.0f;
        }
        __syncthreads();
        // Queries before the warp's first key see none of its keys; the bounds are warp-uniform,
        // as the shuffles in flash_row_sum need.
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
        bf16* out_row = dqkv + ((size_t)b * T + j) * ld + h * HS + slice * S::W;
        flash_store_slice<S::W>(out_row + C, dk, scale);
        flash_store_slice<S::W>(out_row + 2 * C, dv, 1.0f);
    }
}

// dQ (the first C of each dqkv row, written) for query rows; grid (query tiles, NH, B). Thread:
// query row i, one slice. Walks the key tiles up to the block's last query.
template <int HS>
__global__ void __launch_bounds__(FlashSlices<HS, FLASH_BWD_W>::THREADS)
flash_attention_backward_dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                   const float* D, int T, int C, int NH, float scale) {
    typedef FlashSlices<HS, FLASH_BWD_W> S;
    __shared__ float4 k_tile[FLASH_TILE * S::RS4], v_tile[FLASH_TILE * S::RS4];
    int h = blockIdx.y, b = blockIdx.z;
    int row0 = (gridDim.x - 1 - blockIdx.x) * FLASH_ROWS;  // the longest rows first, as in the forward
    int i = row0 + threadIdx.x / S::TPR, slice = threadIdx.x % S::TPR;
    int warp_last = row0 + (threadIdx.x / 32 + 1) * (32 / S::TPR) - 1;
    size_t ld = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * ld + h * HS;
    // q is pre-scaled so that q . k is the score in base 2 (dQ sums plain k: no effect there).
    float q[S::W], dO[S::W], dq[S::W];
    flash_load_slice<S::W>(q, head + (size_t)i * ld + slice * S::W, i < T, scale * FLASH_LOG2E);
    flash_load_slice<S::W>(dO, dout + ((size_t)b * T + i) * C + h * HS + slice * S::W, i < T, 1.0f);
#pragma unroll
    for (int e = 0; e < S::W; e++) dq[e] = 0.0f;
    size_t row = ((size_t)b * NH + h) * T + i;
    float lse2 = i < T ? lse[row] * FLASH_LOG2E : 0.0f, d_i = i < T ? D[row] : 0.0f;
    int key_end = min(row0 + FLASH_ROWS, T);
    for (int k0 = 0; k0 < key_end; k0 += FLASH_TILE) {
        __syncthreads();
        flash_stage<HS, S>(k_tile, head + C, ld, k0, T);
        flash_stage<HS, S>(v_tile, head + 2 * C, ld, k0, T);
        __syncthreads();
        // Keys after the warp's last query are masked for all of it (warp-uniform bound).
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
    if (i < T) flash_store_slice<S::W>(dqkv + ((size_t)b * T + i) * ld + h * HS + slice * S::W, dq, scale);
}

// The head sizes the kernels are built for.
static bool flash_attention_supports(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }

// The head size of C channels in NH heads; one the kernels are not built for stops the program.
static int flash_head_size(int C, int NH) {
    int hs = NH > 0 && C % NH == 0 ? C / NH : 0;
    if (!flash_attention_supports(hs))
        fail("flash attention: head size C/NH = %d/%d is not supported (16, 32, 64 or 128)", C, NH);
    return hs;
}

// The kernels read and write bf16 in pairs, one 32-bit word each.
static void flash_check_aligned(const void* p, const char* name) {
    if ((uintptr_t)p % 4 != 0) fail("flash attention: %s is not 4-byte aligned", name);
}

template <int HS>
static void flash_forward_launch(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    dim3 grid(ceil_div((size_t)T, FLASH_ROWS), NH, B);
    flash_attention_forward_kernel<HS><<<grid, FlashSlices<HS, FLASH_FWD_W>::THREADS>>>(
        out, lse, qkv, T, C, NH, attention_scale(HS));
    launch_check(flash_attention_forward_kernel);
}

template <int HS>
static void flash_backward_launch(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                  const float* D, int B, int T, int C, int NH) {
    dim3 grid(ceil_div((size_t)T, FLASH_ROWS), NH, B);
    float scale = attention_scale(HS);
    flash_attention_backward_dkv_kernel<HS><<<grid, FlashSlices<HS, FLASH_BWD_W>::THREADS>>>(
        dqkv, dout, qkv, lse, D, T, C, NH, scale);
    launch_check(flash_attention_backward_dkv_kernel);
    flash_attention_backward_dq_kernel<HS><<<grid, FlashSlices<HS, FLASH_BWD_W>::THREADS>>>(
        dqkv, dout, qkv, lse, D, T, C, NH, scale);
    launch_check(flash_attention_backward_dq_kernel);
}

// The forward on the CUDA cores: out (B,T,C) bf16; lse (B,NH,T) float32, the log-sum-exp of each
// query row's scaled scores, kept for the backward. qkv (B,T,3C) bf16. The bf16 path calls
// flash_attention_forward_bf16 (gpt2/gpu/flash_attention_mma.cuh), which runs these kernels for
// the head sizes and alignments the tensor-core ones do not take.
static void flash_attention_forward_cuda_cores(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    int hs = flash_head_size(C, NH);
    flash_check_aligned(out, "out");
    flash_check_aligned(qkv, "qkv");
    switch (hs) {
    case 16: flash_forward_launch<16>(out, lse, qkv, B, T, C, NH); break;
    case 32: flash_forward_launch<32>(out, lse, qkv, B, T, C, NH); break;
    case 64: flash_forward_launch<64>(out, lse, qkv, B, T, C, NH); break;
    default: flash_forward_launch<128>(out, lse, qkv, B, T, C, NH); break;
    }
}

// D = dO . O for every row, in the shared scratch buffer (B, NH, T), which it returns.
static float* flash_attention_backward_d(const bf16* dout, const bf16* out, int B, int T, int C, int NH) {
    float* D = scratch_floats((size_t)B * NH * T);
    flash_attention_backward_d_kernel<<<ceil_div((size_t)B * T * NH, 256), 256>>>(D, dout, out, B, T, C, NH);
    launch_check(flash_attention_backward_d_kernel);
    return D;
}

// The backward on the CUDA cores: dqkv (B,T,3C) bf16 is written (not accumulated) with the
// gradients of Q, K and V; dout (B,T,C) bf16; out and lse from the forward.
static void flash_attention_backward_cuda_cores(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                                const float* lse, int B, int T, int C, int NH) {
    int hs = flash_head_size(C, NH);
    flash_check_aligned(dqkv, "dqkv");
    flash_check_aligned(dout, "dout");
    flash_check_aligned(qkv, "qkv");
    float* D = flash_attention_backward_d(dout, out, B, T, C, NH);
    switch (hs) {
    case 16: flash_backward_launch<16>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    case 32: flash_backward_launch<32>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    case 64: flash_backward_launch<64>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    default: flash_backward_launch<128>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    }
}

#endif // GPT2_GPU_FLASH_ATTENTION_CUH
