// gpt2/gpu/flash_attention_mma.cuh: flash attention on the tensor cores, forward and backward, as
// FlashAttention-2 (Dao 2023) does it: products as mma.sync on bf16, softmax in float32. Also the
// bf16 path's entry points, which pick these kernels or those of gpt2/gpu/flash_attention.cuh.

#ifndef GPT2_GPU_FLASH_ATTENTION_MMA_CUH
#define GPT2_GPU_FLASH_ATTENTION_MMA_CUH

#include "../arithmetic.h"      // attention_scale
#include "cuda_utils.cuh"
#include "flash_attention.cuh"  // the CUDA-core kernels, the D kernel, FLASH_LOG2E, flash_head_size
#include "flash_attention_wgmma.cuh"  // the forward on Hopper's wgmma
#include "matmul_bf16.cuh"      // mma_bf16_16816, ldmatrix_x4(_trans), cp_async16: the instructions

// The arithmetic of gpt2/gpu/flash_attention.cuh (read it first); a warp owns 16 rows and gives
// the products to the tensor cores (mma.sync m16n8k16). Forward, per key tile:
//     S = Q K^T (16 x TILE),  online softmax on S in registers,  O += P V (16 x HS)
// An mma's accumulators are in the lane that needs them as the next A fragment (flash_mma_to_a):
// P stays in registers, rounded to bf16 (m and l stay float32). The dK/dV kernel computes
// S^T = K Q^T and dP^T = V dO^T so P^T, dS^T come out as its own rows' accumulators; the dQ
// kernel S = Q K^T, dP = dO V^T. Design, staging and swizzle: doc/gpu.md "Kernel notes".

// Head sizes 16 to 128 (mma's k is 16; powers of two keep the swizzle inside a row). TILE is 32
// rows for HS = 128, else 64, so that each kernel's shared memory fits the static 48 KiB.
#define FLASH_MMA_ROWS 64     // rows a block owns: 16 per warp
#define FLASH_MMA_THREADS 128 // 4 warps

template <int HS>
struct FlashMma {
    static constexpr int TILE = HS == 128 ? 32 : 64;  // rows of the other side a step takes
    static_assert(HS == 16 || HS == 32 || HS == 64 || HS == 128, "head sizes 16, 32, 64 or 128");
};

// The index of element e of row r in a tile of HS-wide rows. ldmatrix reads a 16-byte chunk from
// each of 8 consecutive rows; XOR-ing the chunk number with bits of the row number puts those 8
// chunks in 8 different bank groups, where unswizzled they would share some.
template <int HS>
__device__ __forceinline__ int flash_mma_index(int r, int e) {
    constexpr int chunks = HS / 8;
    int swizzle = chunks >= 8 ? r & 7 : (r / (8 / chunks)) & (chunks - 1);
    return r * HS + (((e >> 3) ^ swizzle) << 3) + (e & 7);
}

// Rows r0 .. r0+ROWS-1 (HS bf16 at src + r * ld, 16-byte aligned) into a tile by cp.async;
// rows from T on become zeros. The caller commits the group.
template <int HS, int ROWS>
__device__ __forceinline__ void flash_mma_stage(bf16* tile, const bf16* src, size_t ld, int r0, int T) {
    for (int f = threadIdx.x; f < ROWS * HS / 8; f += FLASH_MMA_THREADS) {
        int r = f / (HS / 8), e = (f % (HS / 8)) * 8;
        bool inside = r0 + r < T;
        cp_async16(tile + flash_mma_index<HS>(r, e), inside ? src + (size_t)(r0 + r) * ld + e : src, inside ? 16 : 0);
    }
}

// The backward's step: rows r0.. of x and of y as two cp.async groups, then a wait for x only,
// so that the first product starts while y is on its way.
template <int HS, int TILE>
__device__ __forceinline__ void flash_mma_stage_two(bf16* x_s, const bf16* x, size_t x_ld, bf16* y_s, const bf16* y,
                                                    size_t y_ld, int r0, int T) {
    flash_mma_stage<HS, TILE>(x_s, x, x_ld, r0, T);
    cp_async_commit();
    flash_mma_stage<HS, TILE>(y_s, y, y_ld, r0, T);
    cp_async_commit();
    cp_async_wait<1>();
}

// The A fragments of rows r0 .. r0+15 of a tile: a[kk], columns 16kk .. 16kk+15.
template <int HS>
__device__ __forceinline__ void flash_mma_load_a(uint32_t (*a)[4], const bf16* tile, int r0, int lane) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++)
        ldmatrix_x4(a[kk], tile + flash_mma_index<HS>(r0 + lane % 16, kk * 16 + (lane / 16) * 8));
}

// acc (16 x N, N/8 tiles of 16x8) += A X^T, X rows 0..N-1 of a tile: B(k = d, n) = X[n][d],
// rows along k, as ldmatrix reads them untransposed.
template <int HS, int N>
__device__ __forceinline__ void flash_mma_abt(float (*acc)[4], const uint32_t (*a)[4], const bf16* tile, int lane) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++)
#pragma unroll
        for (int j = 0; j < N / 8; j += 2) {
            uint32_t r[4];  // b of n-tiles j (r[0], r[1]) and j+1 (r[2], r[3])
            ldmatrix_x4(r, tile + flash_mma_index<HS>(j * 8 + lane % 8 + (lane / 16) * 8, kk * 16 + (lane / 8) % 2 * 8));
            mma_bf16_16816(acc[j], a[kk], r);
            mma_bf16_16816(acc[j + 1], a[kk], r + 2);
        }
}

// acc (16 x HS) += A X, X rows 0..K-1 of a tile: B(k, n = d) = X[k][d], rows along n: .trans.
template <int HS, int K>
__device__ __forceinline__ void flash_mma_ab(float (*acc)[4], const uint32_t (*a)[4], const bf16* tile, int lane) {
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++)
#pragma unroll
        for (int j = 0; j < HS / 8; j += 2) {
            uint32_t r[4];
            ldmatrix_x4_trans(r, tile + flash_mma_index<HS>(kk * 16 + lane % 8 + (lane / 8) % 2 * 8, j * 8 + (lane / 16) * 8));
            mma_bf16_16816(acc[j], a[kk], r);
            mma_bf16_16816(acc[j + 1], a[kk], r + 2);
        }
}

// Two floats as one register of two bf16, the first in the low half (the fragments' order).
__device__ __forceinline__ uint32_t flash_mma_pack(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16;
}

// A 16 x K result's accumulators as the A fragments of a 16 x K operand: C[g][2q, 2q+1] and
// C[g+8][2q, 2q+1] of tiles 2kk, 2kk+1 are in the lane that needs them for k-step kk.
template <int K>
__device__ __forceinline__ void flash_mma_to_a(uint32_t (*a)[4], const float (*c)[4]) {
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        a[kk][0] = flash_mma_pack(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = flash_mma_pack(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = flash_mma_pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = flash_mma_pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

template <int N>
__device__ __forceinline__ void flash_mma_zero(float (*acc)[4]) {
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
}

// A warp's 16 x HS result, times scale, into its own rows r0 .. r0+15 of a tile (bf16).
template <int HS>
__device__ __forceinline__ void flash_mma_put(bf16* tile, const float (*acc)[4], int r0, int lane, float scale) {
    int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int j = 0; j < HS / 8; j++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            __nv_bfloat162 v = __floats2bfloat162_rn(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
            *reinterpret_cast<__nv_bfloat162*>(tile + flash_mma_index<HS>(r0 + g + 8 * half, j * 8 + 2 * q)) = v;
        }
}

// Rows 0 .. FLASH_MMA_ROWS-1 of a tile to dst + (r0 + r) * ld, those before T: 16 bytes a thread,
// consecutive threads on consecutive chunks (coalesced).
template <int HS>
__device__ __forceinline__ void flash_mma_store(bf16* dst, size_t ld, const bf16* tile, int r0, int T) {
    for (int f = threadIdx.x; f < FLASH_MMA_ROWS * HS / 8; f += FLASH_MMA_THREADS) {
        int r = f / (HS / 8), e = (f % (HS / 8)) * 8;
        if (r0 + r < T)
            *reinterpret_cast<uint4*>(dst + (size_t)(r0 + r) * ld + e) =
                *reinterpret_cast<const uint4*>(tile + flash_mma_index<HS>(r, e));
    }
}

// out (B,T,C) and lse (B,NH,T) from qkv (B,T,3C); grid (row tiles, NH, B), 4 warps.
template <int HS>
__global__ void __launch_bounds__(FLASH_MMA_THREADS)
flash_attention_forward_mma_kernel(bf16* out, float* lse, const bf16* qkv, int T, int C, int NH, float scale) {
    constexpr int TILE = FlashMma<HS>::TILE;
    __shared__ __align__(128) bf16 q_s[FLASH_MMA_ROWS * HS];
    __shared__ __align__(128) bf16 kv_s[2][2][TILE * HS];  // [stage][K, V]
    int h = blockIdx.y, b = blockIdx.z;
    int row0 = (gridDim.x - 1 - blockIdx.x) * FLASH_MMA_ROWS;  // the longest rows first (their keys)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    int wrow = row0 + warp * 16;  // the warp's first query
    size_t ld = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * ld + h * HS;  // Q of (b, h); K at +C, V at +2C
    int key_end = min(row0 + FLASH_MMA_ROWS, T);            // keys past the block's last row: masked for all
    int tiles = (key_end + TILE - 1) / TILE;
    float sc = scale * FLASH_LOG2E;                          // scores in base 2: exp2f

    flash_mma_stage<HS, FLASH_MMA_ROWS>(q_s, head, ld, row0, T);
    flash_mma_stage<HS, TILE>(kv_s[0][0], head + C, ld, 0, T);
    flash_mma_stage<HS, TILE>(kv_s[0][1], head + 2 * C, ld, 0, T);
    cp_async_commit();
    uint32_t qa[HS / 16][4];
    float o[HS / 8][4];
    flash_mma_zero<HS>(o);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g+8; l: this lane's columns
    for (int kt = 0; kt < tiles; kt++) {
        // The next tile into the other stage (free since the last barrier); wait for this one.
        if (kt + 1 < tiles) {
            flash_mma_stage<HS, TILE>(kv_s[(kt + 1) % 2][0], head + C, ld, (kt + 1) * TILE, T);
            flash_mma_stage<HS, TILE>(kv_s[(kt + 1) % 2][1], head + 2 * C, ld, (kt + 1) * TILE, T);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (kt == 0) flash_mma_load_a<HS>(qa, q_s, warp * 16, lane);
        int k0 = kt * TILE;
        if (k0 <= wrow + 15) {  // some row of the warp sees keys of this tile (warp-uniform)
            float s[TILE / 8][4];
            flash_mma_zero<TILE>(s);
            flash_mma_abt<HS, TILE>(s, qa, kv_s[kt % 2][0], lane);
            bool diagonal = k0 + TILE - 1 > wrow;  // some key after some row: the causal mask
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int j = 0; j < TILE / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = s[j][e] * sc;
                    if (diagonal && k0 + 8 * j + 2 * q + (e & 1) > wrow + g + 8 * (e >> 1)) v = -INFINITY;
                    s[j][e] = v;
                    mx[e >> 1] = fmaxf(mx[e >> 1], v);
                }
            // Key 0 is in every row's first tile: mx is finite, exp2f(m - mx) 0 at the first step.
            float rescale[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                rescale[r] = exp2f(m[r] - mx[r]);
                m[r] = mx[r];
                l[r] *= rescale[r];
            }
#pragma unroll
            for (int j = 0; j < TILE / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[j][e] = exp2f(s[j][e] - m[e >> 1]);
                    l[e >> 1] += s[j][e];
                }
#pragma unroll
            for (int j = 0; j < HS / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) o[j][e] *= rescale[e >> 1];
            uint32_t pa[TILE / 16][4];
            flash_mma_to_a<TILE>(pa, s);
            flash_mma_ab<HS, TILE>(o, pa, kv_s[kt % 2][1], lane);
        }
        __syncthreads();  // every warp is done with this stage before the next step refills it
    }
    cp_async_wait<0>();  // the last group is empty, but every copy is waited for
#pragma unroll
    for (int r = 0; r < 2; r++) {  // a row's sum over its four lanes (same bits in each)
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int j = 0; j < HS / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] /= l[e >> 1];
    flash_mma_put<HS>(q_s, o, warp * 16, lane, 1.0f);  // the warp's own rows of q_s, which only it read
    if (q == 0)
        for (int r = 0; r < 2; r++) {
            int t = wrow + g + 8 * r;
            if (t < T) lse[((size_t)b * NH + h) * T + t] = (m[r] + log2f(l[r])) * FLASH_LN2;  // base 2 -> e
        }
    __syncthreads();
    flash_mma_store<HS>(out + (size_t)b * T * C + h * HS, C, q_s, row0, T);
}

// dK and dV (the +C and +2C parts of dqkv, written) for key rows; grid (key tiles, NH, B). A
// warp owns 16 keys and walks the query tiles from the block's first key on.
template <int HS>
__global__ void __launch_bounds__(FLASH_MMA_THREADS)
flash_attention_backward_dkv_mma_kernel(FlashBackward a) {
    constexpr int TILE = FlashMma<HS>::TILE;
    __shared__ __align__(128) bf16 k_s[FLASH_MMA_ROWS * HS], v_s[FLASH_MMA_ROWS * HS];
    __shared__ __align__(128) bf16 q_s[TILE * HS], do_s[TILE * HS];
    int T = a.T, C = a.C, NH = a.NH;
    int h = blockIdx.y, b = blockIdx.z;
    int row0 = blockIdx.x * FLASH_MMA_ROWS;  // the first keys see the most queries: they start first
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    int wkey = row0 + warp * 16;  // the warp's first key
    size_t ld = 3 * (size_t)C;
    const bf16* head = a.qkv + (size_t)b * T * ld + h * HS;
    const bf16* do_head = a.dout + (size_t)b * T * C + h * HS;
    const float* lse_row = a.lse + ((size_t)b * NH + h) * T;
    const float* d_row = a.D + ((size_t)b * NH + h) * T;
    float sc = a.scale * FLASH_LOG2E;

    flash_mma_stage<HS, FLASH_MMA_ROWS>(k_s, head + C, ld, row0, T);
    flash_mma_stage<HS, FLASH_MMA_ROWS>(v_s, head + 2 * C, ld, row0, T);
    cp_async_commit();
    float dk[HS / 8][4], dv[HS / 8][4];
    flash_mma_zero<HS>(dk);
    flash_mma_zero<HS>(dv);
    for (int i0 = row0; i0 < T; i0 += TILE) {
        __syncthreads();  // every warp is done with the previous tiles
        flash_mma_stage_two<HS, TILE>(q_s, head, ld, do_s, do_head, C, i0, T);  // K, V and this Q tile
        __syncthreads();
        bool active = wkey <= i0 + TILE - 1;  // some query of the tile sees a key of the warp
        float p[TILE / 8][4];                 // P^T: the warp's keys x the tile's queries
        if (active) {
            uint32_t ka[HS / 16][4];
            flash_mma_load_a<HS>(ka, k_s, warp * 16, lane);
            flash_mma_zero<TILE>(p);
            flash_mma_abt<HS, TILE>(p, ka, q_s, lane);  // S^T = K Q^T
#pragma unroll
            for (int j = 0; j < TILE / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = i0 + 8 * j + 2 * q + (e & 1), key = wkey + g + 8 * (e >> 1);
                    p[j][e] = key <= i && i < T ? exp2f(p[j][e] * sc - lse_row[i] * FLASH_LOG2E) : 0.0f;
                }
        }
        cp_async_wait<0>();
        __syncthreads();  // dO has landed
        if (active) {
            uint32_t va[HS / 16][4], pa[TILE / 16][4];
            float ds[TILE / 8][4];
            flash_mma_load_a<HS>(va, v_s, warp * 16, lane);
            flash_mma_zero<TILE>(ds);
            flash_mma_abt<HS, TILE>(ds, va, do_s, lane);  // dP^T = V dO^T
#pragma unroll
            for (int j = 0; j < TILE / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int i = i0 + 8 * j + 2 * q + (e & 1);
                    ds[j][e] = p[j][e] == 0.0f ? 0.0f : p[j][e] * (ds[j][e] - d_row[i]);  // dS^T
                }
            flash_mma_to_a<TILE>(pa, p);
            flash_mma_ab<HS, TILE>(dv, pa, do_s, lane);  // dV += P^T dO
            flash_mma_to_a<TILE>(pa, ds);
            flash_mma_ab<HS, TILE>(dk, pa, q_s, lane);  // dK += dS^T Q
        }
    }
    __syncthreads();  // every warp is done reading k_s and v_s: each now takes its own rows
    flash_mma_put<HS>(k_s, dk, warp * 16, lane, a.scale);
    flash_mma_put<HS>(v_s, dv, warp * 16, lane, 1.0f);
    __syncthreads();
    bf16* dhead = a.dqkv + (size_t)b * T * ld + h * HS;
    flash_mma_store<HS>(dhead + C, ld, k_s, row0, T);
    flash_mma_store<HS>(dhead + 2 * C, ld, v_s, row0, T);
}

// dQ (the first C of each dqkv row, written) for query rows; grid (query tiles, NH, B). A warp
// owns 16 queries and walks the key tiles up to the block's last query.
template <int HS>
__global__ void __launch_bounds__(FLASH_MMA_THREADS)
flash_attention_backward_dq_mma_kernel(FlashBackward a) {
    constexpr int TILE = FlashMma<HS>::TILE;
    __shared__ __align__(128) bf16 q_s[FLASH_MMA_ROWS * HS], do_s[FLASH_MMA_ROWS * HS];
    __shared__ __align__(128) bf16 k_s[TILE * HS], v_s[TILE * HS];
    int T = a.T, C = a.C, NH = a.NH;
    int h = blockIdx.y, b = blockIdx.z;
    int row0 = (gridDim.x - 1 - blockIdx.x) * FLASH_MMA_ROWS;  // the longest rows first
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    int wrow = row0 + warp * 16;
    size_t ld = 3 * (size_t)C;
    const bf16* head = a.qkv + (size_t)b * T * ld + h * HS;
    float sc = a.scale * FLASH_LOG2E;
    float lse2[2], d_i[2];  // rows g and g+8, lse in base 2
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = wrow + g + 8 * r;
        size_t at = ((size_t)b * NH + h) * T + i;
        lse2[r] = i < T ? a.lse[at] * FLASH_LOG2E : 0.0f;
        d_i[r] = i < T ? a.D[at] : 0.0f;
    }

    flash_mma_stage<HS, FLASH_MMA_ROWS>(q_s, head, ld, row0, T);
    flash_mma_stage<HS, FLASH_MMA_ROWS>(do_s, a.dout + (size_t)b * T * C + h * HS, C, row0, T);
    cp_async_commit();
    uint32_t qa[HS / 16][4], doa[HS / 16][4];
    float dq[HS / 8][4];
    flash_mma_zero<HS>(dq);
    int key_end = min(row0 + FLASH_MMA_ROWS, T);
    for (int k0 = 0; k0 < key_end; k0 += TILE) {
        __syncthreads();
        flash_mma_stage_two<HS, TILE>(k_s, head + C, ld, v_s, head + 2 * C, ld, k0, T);  // Q, dO and this K tile
        __syncthreads();
        if (k0 == 0) {
            flash_mma_load_a<HS>(qa, q_s, warp * 16, lane);
            flash_mma_load_a<HS>(doa, do_s, warp * 16, lane);
        }
        bool active = k0 <= wrow + 15;  // some row of the warp sees keys of this tile
        float p[TILE / 8][4];
        if (active) {
            flash_mma_zero<TILE>(p);
            flash_mma_abt<HS, TILE>(p, qa, k_s, lane);  // S = Q K^T
#pragma unroll
            for (int j = 0; j < TILE / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + 8 * j + 2 * q + (e & 1), i = wrow + g + 8 * (e >> 1);
                    p[j][e] = key <= i && i < T ? exp2f(p[j][e] * sc - lse2[e >> 1]) : 0.0f;
                }
        }
        cp_async_wait<0>();
        __syncthreads();  // V has landed
        if (active) {
            float ds[TILE / 8][4];
            uint32_t dsa[TILE / 16][4];
            flash_mma_zero<TILE>(ds);
            flash_mma_abt<HS, TILE>(ds, doa, v_s, lane);  // dP = dO V^T
#pragma unroll
            for (int j = 0; j < TILE / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) ds[j][e] = p[j][e] == 0.0f ? 0.0f : p[j][e] * (ds[j][e] - d_i[e >> 1]);
            flash_mma_to_a<TILE>(dsa, ds);
            flash_mma_ab<HS, TILE>(dq, dsa, k_s, lane);  // dQ += dS K
        }
    }
    __syncthreads();  // every warp is done with q_s: each now takes its own rows
    flash_mma_put<HS>(q_s, dq, warp * 16, lane, a.scale);
    __syncthreads();
    flash_mma_store<HS>(a.dqkv + (size_t)b * T * ld + h * HS, ld, q_s, row0, T);
}

// ---------- the bf16 path's flash attention: which kernels run ----------

// FLASH_WGMMA: the forward on wgmma (flash_attention_wgmma.cuh), the backward on mma.sync.
enum FlashKernels { FLASH_AUTO, FLASH_CUDA_CORES, FLASH_TENSOR_CORES, FLASH_WGMMA };

// The tensor-core kernels copy 16 bytes at a time: the tensors must start 16-byte aligned (rows
// then are too, C being a multiple of 16). Anything else runs on the CUDA cores.
static bool flash_mma_takes(int hs, const void* a, const void* b, const void* c) {
    return (hs == 16 || hs == 32 || hs == 64 || hs == 128) && aligned16(a) && aligned16(b) && aligned16(c);
}

static FlashKernels flash_choose(FlashKernels want, bool mma_ok) {
    if (want == FLASH_WGMMA) want = FLASH_TENSOR_CORES;  // what is left for mma.sync: the backward
    if (want == FLASH_TENSOR_CORES && !mma_ok)
        fail("flash attention: the tensor-core kernels need head size 16, 32, 64 or 128 and 16-byte aligned tensors");
    if (want == FLASH_AUTO) return mma_ok ? FLASH_TENSOR_CORES : FLASH_CUDA_CORES;
    return want;
}

// Both kinds of kernels for head size HS: on the tensor cores (mma) or on the CUDA cores.
template <int HS>
static void flash_forward_launch(bool mma, bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    float scale = attention_scale(HS);
    if (mma) {
        dim3 grid(ceil_div((size_t)T, FLASH_MMA_ROWS), NH, B);
        flash_attention_forward_mma_kernel<HS><<<grid, FLASH_MMA_THREADS>>>(out, lse, qkv, T, C, NH, scale);
        launch_check(flash_attention_forward_mma_kernel);
    } else {
        dim3 grid(ceil_div((size_t)T, FLASH_ROWS), NH, B);
        flash_attention_forward_kernel<HS><<<grid, FlashSlices<HS, FLASH_FWD_W>::THREADS>>>(out, lse, qkv, T, C, NH,
                                                                                          scale);
        launch_check(flash_attention_forward_kernel);
    }
}

// The dK/dV kernel, then the dQ kernel, of either kind.
template <int HS>
static void flash_backward_launch(bool mma, FlashBackward a, int B) {
    a.scale = attention_scale(HS);
    if (mma) {
        dim3 grid(ceil_div((size_t)a.T, FLASH_MMA_ROWS), a.NH, B);
        flash_attention_backward_dkv_mma_kernel<HS><<<grid, FLASH_MMA_THREADS>>>(a);
        launch_check(flash_attention_backward_dkv_mma_kernel);
        flash_attention_backward_dq_mma_kernel<HS><<<grid, FLASH_MMA_THREADS>>>(a);
        launch_check(flash_attention_backward_dq_mma_kernel);
    } else {
        dim3 grid(ceil_div((size_t)a.T, FLASH_ROWS), a.NH, B);
        flash_attention_backward_dkv_kernel<HS><<<grid, FlashSlices<HS, FLASH_BWD_W>::THREADS>>>(a);
        launch_check(flash_attention_backward_dkv_kernel);
        flash_attention_backward_dq_kernel<HS><<<grid, FlashSlices<HS, FLASH_BWD_W>::THREADS>>>(a);
        launch_check(flash_attention_backward_dq_kernel);
    }
}

// The forward with the kernels chosen (FLASH_AUTO: wgmma, else mma.sync, where they can run it).
static void flash_attention_forward_with(FlashKernels kernels, bf16* out, float* lse, const bf16* qkv, int B, int T,
                                         int C, int NH) {
    int hs = flash_head_size(C, NH);
    bool wgmma_wanted = kernels == FLASH_AUTO || kernels == FLASH_WGMMA;
    if (wgmma_wanted && flash_attention_forward_wgmma_launch(out, lse, qkv, B, T, C, NH)) return;
    if (kernels == FLASH_WGMMA)
        fail("flash attention: the wgmma forward needs a 9.0 GPU with sm_90a code, head size 64 or 128 and 16-byte "
             "aligned tensors");
    bool mma = flash_choose(kernels, flash_mma_takes(hs, out, qkv, qkv)) == FLASH_TENSOR_CORES;
    if (!mma) {
        flash_check_aligned(out, "out");
        flash_check_aligned(qkv, "qkv");
    }
    switch (hs) {
    case 16: flash_forward_launch<16>(mma, out, lse, qkv, B, T, C, NH); break;
    case 32: flash_forward_launch<32>(mma, out, lse, qkv, B, T, C, NH); break;
    case 64: flash_forward_launch<64>(mma, out, lse, qkv, B, T, C, NH); break;
    default: flash_forward_launch<128>(mma, out, lse, qkv, B, T, C, NH); break;
    }
}

static void flash_attention_backward_with(FlashKernels kernels, bf16* dqkv, const bf16* dout, const bf16* qkv,
                                          const bf16* out, const float* lse, int B, int T, int C, int NH) {
    int hs = flash_head_size(C, NH);
    bool mma = flash_choose(kernels, flash_mma_takes(hs, dqkv, dout, qkv)) == FLASH_TENSOR_CORES;
    if (!mma) {
        flash_check_aligned(dqkv, "dqkv");
        flash_check_aligned(dout, "dout");
        flash_check_aligned(qkv, "qkv");
    }
    float* D = flash_attention_backward_d(dout, out, B, T, C, NH);
    FlashBackward a = {dqkv, dout, qkv, lse, D, T, C, NH, 0.0f};  // the launcher sets the scale
    switch (hs) {
    case 16: flash_backward_launch<16>(mma, a, B); break;
    case 32: flash_backward_launch<32>(mma, a, B); break;
    case 64: flash_backward_launch<64>(mma, a, B); break;
    default: flash_backward_launch<128>(mma, a, B); break;
    }
}

// out (B,T,C) bf16; lse (B,NH,T) float32: the log-sum-exp of each query row's scaled scores,
// kept for the backward. qkv (B,T,3C) bf16.
static void flash_attention_forward_gpu(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    flash_attention_forward_with(FLASH_AUTO, out, lse, qkv, B, T, C, NH);
}

// dqkv (B,T,3C) bf16 is written (not accumulated) with the gradients of Q, K and V; dout (B,T,C)
// bf16; out and lse from the forward.
static void flash_attention_backward_set_dinp_gpu(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                                  const float* lse, int B, int T, int C, int NH) {
    flash_attention_backward_with(FLASH_AUTO, dqkv, dout, qkv, out, lse, B, T, C, NH);
}

#endif // GPT2_GPU_FLASH_ATTENTION_MMA_CUH
