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
// kernel S = Q K^T, dP = dO V^T. The other side's tiles come through a ring of cp.async stages;
// tiles past the diagonal are skipped and only the diagonal is masked. Design, staging, swizzle
// and what each choice buys against the roofline: doc/gpu.md "Kernel notes".

// Shapes per head size (16 to 128: mma's k is 16; powers of two keep the swizzle inside a row).
// Shared memory is dynamic: a stage ring of TILE-row tiles plus the block's own rows.
template <int HS>
struct FlashMma {
    static_assert(HS == 16 || HS == 32 || HS == 64 || HS == 128, "head sizes 16, 32, 64 or 128");
    // forward: 8 warps own 128 queries, so each K and V tile is read once for 128 rows
    static constexpr int FWD_THREADS = 256, FWD_ROWS = 128, FWD_TILE = HS == 128 ? 32 : 64, FWD_STAGES = 3;
    static constexpr int FWD_SMEM = (FWD_ROWS + 2 * FWD_STAGES * FWD_TILE) * HS * 2;  // Q, then [stage][K, V]
    static constexpr int FWD_BLOCKS = HS == 128 ? 1 : 2;  // per SM: registers at most 64K / (256 FWD_BLOCKS)
    // backward: 4 warps own 64 keys (dK, dV) or queries (dQ); a warp's step takes 16 of the others
    static constexpr int BWD_THREADS = 128, BWD_ROWS = 64, BWD_TILE = HS == 128 ? 32 : 64, BWD_STAGES = 2;
    static constexpr int BWD_SMEM = (2 * BWD_ROWS + 2 * BWD_STAGES * BWD_TILE) * HS * 2;  // own rows, then the ring
    static constexpr int DKV_SMEM = BWD_SMEM + 2 * BWD_STAGES * BWD_TILE * 4;            // + lse2 and D tiles
    static constexpr int BWD_BLOCKS = HS <= 32 ? 4 : HS == 64 ? 3 : 2;  // per SM: 64K / (128 BWD_BLOCKS) registers
    static constexpr bool HELD = HS <= 64;  // the own rows' fragments held for the whole walk, else read per step
};

// The index of element e of row r in a tile of HS-wide rows. ldmatrix reads a 16-byte chunk from
// each of 8 consecutive rows; XOR-ing the chunk number with bits of the row number puts those 8
// chunks in 8 different bank groups, where unswizzled they would share some. Period: 8 rows.
template <int HS>
__device__ __forceinline__ int flash_mma_index(int r, int e) {
    constexpr int chunks = HS / 8;
    int swizzle = chunks >= 8 ? r & 7 : (r / (8 / chunks)) & (chunks - 1);
    return r * HS + (((e >> 3) ^ swizzle) << 3) + (e & 7);
}

// Rows r0 .. r0+ROWS-1 (HS bf16 at src + r * ld, 16-byte aligned) into a tile by cp.async, all
// THREADS of the block; rows from T on become zeros. The caller commits the group.
template <int HS, int ROWS, int THREADS>
__device__ __forceinline__ void flash_mma_stage(bf16* tile, const bf16* src, size_t ld, int r0, int T) {
#pragma unroll
    for (int f = threadIdx.x; f < ROWS * HS / 8; f += THREADS) {
        int r = f / (HS / 8), e = (f % (HS / 8)) * 8;
        bool inside = r0 + r < T;
        cp_async16(tile + flash_mma_index<HS>(r, e), inside ? src + (size_t)(r0 + r) * ld + e : src, inside ? 16 : 0);
    }
}

// N floats (16-byte aligned at both ends) by cp.async.
template <int N, int THREADS>
__device__ __forceinline__ void flash_mma_stage_floats(float* dst, const float* src) {
    for (int f = threadIdx.x; f < N / 4; f += THREADS) cp_async16(dst + 4 * f, src + 4 * f, 16);
}

// The A fragments of rows r0 .. r0+15 of a tile: a[kk], columns 16kk .. 16kk+15.
template <int HS>
__device__ __forceinline__ void flash_mma_load_a(uint32_t (*a)[4], const bf16* tile, int r0, int lane) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++)
        ldmatrix_x4(a[kk], tile + flash_mma_index<HS>(r0 + lane % 16, kk * 16 + (lane / 16) * 8));
}

// acc (16 x N, N/8 tiles of 16x8) += A X^T, X rows x0 .. x0+N-1 of a tile: B(k = d, n) =
// X[x0 + n][d], rows along k, as ldmatrix reads them untransposed.
template <int HS, int N>
__device__ __forceinline__ void flash_mma_abt(float (*acc)[4], const uint32_t (*a)[4], const bf16* tile, int x0,
                                              int lane) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++)
#pragma unroll
        for (int j = 0; j < N / 8; j += 2) {
            uint32_t r[4];  // b of n-tiles j (r[0], r[1]) and j+1 (r[2], r[3])
            ldmatrix_x4(r, tile + flash_mma_index<HS>(x0 + j * 8 + lane % 8 + (lane / 16) * 8,
                                                      kk * 16 + (lane / 8) % 2 * 8));
            mma_bf16_16816(acc[j], a[kk], r);
            mma_bf16_16816(acc[j + 1], a[kk], r + 2);
        }
}

// acc (16 x HS) += A X, X rows x0 .. x0+K-1 of a tile: B(k, n = d) = X[x0 + k][d], rows along
// n: .trans.
template <int HS, int K>
__device__ __forceinline__ void flash_mma_ab(float (*acc)[4], const uint32_t (*a)[4], const bf16* tile, int x0,
                                             int lane) {
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++)
#pragma unroll
        for (int j = 0; j < HS / 8; j += 2) {
            uint32_t r[4];
            ldmatrix_x4_trans(r, tile + flash_mma_index<HS>(x0 + kk * 16 + lane % 8 + (lane / 8) % 2 * 8,
                                                            j * 8 + (lane / 16) * 8));
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

// Rows 0 .. ROWS-1 of a tile to dst + (r0 + r) * ld, those before T: 16 bytes a thread,
// consecutive threads on consecutive chunks (coalesced).
template <int HS, int ROWS, int THREADS>
__device__ __forceinline__ void flash_mma_store(bf16* dst, size_t ld, const bf16* tile, int r0, int T) {
#pragma unroll
    for (int f = threadIdx.x; f < ROWS * HS / 8; f += THREADS) {
        int r = f / (HS / 8), e = (f % (HS / 8)) * 8;
        if (r0 + r < T)
            *reinterpret_cast<uint4*>(dst + (size_t)(r0 + r) * ld + e) =
                *reinterpret_cast<const uint4*>(tile + flash_mma_index<HS>(r, e));
    }
}

// ---------- forward ----------

// One key tile for a warp's 16 queries, rows wr.. of q_s: S = Q K^T, the online softmax, O += P V.
// m, l: rows g and g+8 (l: this lane's columns). mask: the tile crosses the warp's diagonal; its
// key j is after the warp's query r when after + j > r (after: first key - first query), and its
// score becomes -inf.
template <int HS, int TILE>
__device__ __forceinline__ void flash_mma_forward_tile(float (*o)[4], float* m, float* l, const bf16* q_s, int wr,
                                                       const bf16* k_s, const bf16* v_s, bool mask, int after,
                                                       float sc, int lane) {
    int g = lane / 4, q = lane % 4;
    float s[TILE / 8][4];
    flash_mma_zero<TILE>(s);
    uint32_t qa[HS / 16][4];  // read each tile: 16 more registers held would leave 1 block an SM
    flash_mma_load_a<HS>(qa, q_s, wr, lane);
    flash_mma_abt<HS, TILE>(s, qa, k_s, 0, lane);
    if (mask)
#pragma unroll
        for (int j = 0; j < TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (after + 8 * j + 2 * q + (e & 1) > g + 8 * (e >> 1)) s[j][e] = -INFINITY;
    float mx[2] = {-INFINITY, -INFINITY};  // of the unscaled scores: sc > 0 keeps the order
#pragma unroll
    for (int j = 0; j < TILE / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
    // Key 0 is in every row's first tile: m_new is finite, exp2f(m - m_new) 0 at the first step.
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float m_new = fmaxf(m[r], mx[r] * sc);
        rescale[r] = exp2f(m[r] - m_new);
        m[r] = m_new;
        l[r] *= rescale[r];
    }
#pragma unroll
    for (int j = 0; j < TILE / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[j][e] = exp2f(fmaf(s[j][e], sc, -m[e >> 1]));  // scale and shift: one FFMA
            l[e >> 1] += s[j][e];
        }
#pragma unroll
    for (int j = 0; j < HS / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[j][e] *= rescale[e >> 1];
    uint32_t pa[TILE / 16][4];
    flash_mma_to_a<TILE>(pa, s);
    flash_mma_ab<HS, TILE>(o, pa, v_s, 0, lane);
}

// out (B,T,C) and lse (B,NH,T) from qkv (B,T,3C); grid (NH, B, row tiles), 8 warps.
template <int HS>
__global__ void __launch_bounds__(FlashMma<HS>::FWD_THREADS, FlashMma<HS>::FWD_BLOCKS)
flash_attention_forward_mma_kernel(bf16* out, float* lse, const bf16* qkv, int T, int C, int NH, float scale) {
    typedef FlashMma<HS> F;
    constexpr int ROWS = F::FWD_ROWS, TILE = F::FWD_TILE, STAGES = F::FWD_STAGES, THREADS = F::FWD_THREADS;
    extern __shared__ __align__(128) unsigned char flash_mma_smem[];
    bf16* q_s = reinterpret_cast<bf16*>(flash_mma_smem);  // ROWS x HS; the output at the end
    bf16* kv_s = q_s + ROWS * HS;                          // stage s: K at kv_s + 2s TILE HS, then V
    int h = blockIdx.x, b = blockIdx.y;
    int row0 = (gridDim.z - 1 - blockIdx.z) * ROWS;  // the longest rows of every head first
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    int wrow = row0 + warp * 16;  // the warp's first query
    size_t ld = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * ld + h * HS;  // Q of (b, h); K at +C, V at +2C
    int key_end = min(row0 + ROWS, T);                      // keys past the block's last row: masked for all
    int tiles = (key_end + TILE - 1) / TILE;
    float sc = scale * FLASH_LOG2E;  // scores in base 2: exp2f

    auto stage = [&](int kt) {  // K and V of keys kt TILE on, into stage kt % STAGES
        bf16* k_next = kv_s + 2 * (kt % STAGES) * TILE * HS;
        flash_mma_stage<HS, TILE, THREADS>(k_next, head + C, ld, kt * TILE, T);
        flash_mma_stage<HS, TILE, THREADS>(k_next + TILE * HS, head + 2 * C, ld, kt * TILE, T);
    };
    // A cp.async group per tile, Q with the first: STAGES - 1 tiles in flight ahead of the one in use.
    flash_mma_stage<HS, ROWS, THREADS>(q_s, head, ld, row0, T);
    for (int kt = 0; kt < STAGES - 1; kt++) {
        if (kt < tiles) stage(kt);
        cp_async_commit();
    }
    float o[HS / 8][4];
    flash_mma_zero<HS>(o);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int kt = 0; kt < tiles; kt++) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt have landed
        __syncthreads();              // everyone's; and every warp is done with tile kt - 1's stage
        if (kt + STAGES - 1 < tiles) stage(kt + STAGES - 1);  // into the stage tile kt - 1 held
        cp_async_commit();
        int k0 = kt * TILE;
        const bf16* k_s = kv_s + 2 * (kt % STAGES) * TILE * HS;
        bool mask = k0 + TILE - 1 > wrow;  // the diagonal: some key after some row of the warp
        if (k0 <= wrow + 15)               // tiles after all of the warp's rows are skipped
            flash_mma_forward_tile<HS, TILE>(o, m, l, q_s, warp * 16, k_s, k_s + TILE * HS, mask, k0 - wrow, sc, lane);
    }
    cp_async_wait<0>();  // the last groups are empty, but every copy is waited for
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
    flash_mma_store<HS, ROWS, THREADS>(out + (size_t)b * T * C + h * HS, C, q_s, row0, T);
}

// ---------- backward ----------

// A dK/dV warp's step: its 16 keys against queries x0 .. x0+15 of the staged tiles. mask: the step
// is the warp's diagonal (x0's query is the warp's first key): queries before keys get P = 0.
// Queries past T have lse2 = +inf: P = 0 without a mask.
template <int HS>
__device__ __forceinline__ void flash_mma_dkv_step(float (*dk)[4], float (*dv)[4], const uint32_t (*ka)[4],
                                                   const uint32_t (*va)[4], const bf16* k_s, const bf16* v_s, int wk,
                                                   const bf16* q_s, const bf16* do_s, const float* lse2_s,
                                                   const float* d_s, int x0, bool mask, float sc, int lane) {
    constexpr bool HELD = FlashMma<HS>::HELD;
    int g = lane / 4, q = lane % 4;
    float p[2][4], ds[2][4];  // P^T, dS^T: the warp's keys (rows wk.. of k_s) x 16 queries
    uint32_t f[HS / 16][4];   // K's, then V's fragments, where not held
    flash_mma_zero<16>(p);
    flash_mma_zero<16>(ds);
    if (!HELD) flash_mma_load_a<HS>(f, k_s, wk, lane);
    flash_mma_abt<HS, 16>(p, HELD ? ka : f, q_s, x0, lane);  // S^T = K Q^T
    if (!HELD) flash_mma_load_a<HS>(f, v_s, wk, lane);
    flash_mma_abt<HS, 16>(ds, HELD ? va : f, do_s, x0, lane);  // dP^T = V dO^T
    if (mask)  // a score of -inf: P = exp2f(-inf) = 0
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (8 * j + 2 * q + (e & 1) < g + 8 * (e >> 1)) p[j][e] = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int i = x0 + 8 * j + 2 * q;  // this lane's queries: i, i + 1
        float2 lse2 = *reinterpret_cast<const float2*>(lse2_s + i), d = *reinterpret_cast<const float2*>(d_s + i);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            p[j][e] = exp2f(fmaf(p[j][e], sc, -(e & 1 ? lse2.y : lse2.x)));
            ds[j][e] = p[j][e] * (ds[j][e] - (e & 1 ? d.y : d.x));  // dS^T
        }
    }
    uint32_t pa[1][4];
    flash_mma_to_a<16>(pa, p);
    flash_mma_ab<HS, 16>(dv, pa, do_s, x0, lane);  // dV += P^T dO
    flash_mma_to_a<16>(pa, ds);
    flash_mma_ab<HS, 16>(dk, pa, q_s, x0, lane);  // dK += dS^T Q
}

// dK and dV (the +C and +2C parts of dqkv, written) for key rows; grid (NH, B, key tiles). A
// warp owns 16 keys and walks the query tiles from the block's first key on, 16 queries a step.
template <int HS>
__global__ void __launch_bounds__(FlashMma<HS>::BWD_THREADS, FlashMma<HS>::BWD_BLOCKS)
flash_attention_backward_dkv_mma_kernel(FlashBackward a) {
    typedef FlashMma<HS> F;
    constexpr int ROWS = F::BWD_ROWS, TILE = F::BWD_TILE, STAGES = F::BWD_STAGES, THREADS = F::BWD_THREADS;
    extern __shared__ __align__(128) unsigned char flash_mma_smem[];
    bf16* k_s = reinterpret_cast<bf16*>(flash_mma_smem);  // ROWS x HS each; dK and dV at the end
    bf16* v_s = k_s + ROWS * HS;
    bf16* qdo_s = v_s + ROWS * HS;                                           // stage s: Q at 2s TILE HS, then dO
    float* ld_s = reinterpret_cast<float*>(qdo_s + 2 * STAGES * TILE * HS);  // stage s: lse2 at 2s TILE, then D
    int T = a.T, C = a.C;
    int h = blockIdx.x, b = blockIdx.y;
    int row0 = blockIdx.z * ROWS;  // the first keys see the most queries: they start first
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int wkey = row0 + warp * 16;  // the warp's first key
    size_t ld = 3 * (size_t)C;
    const bf16* head = a.qkv + (size_t)b * T * ld + h * HS;
    const bf16* do_head = a.dout + (size_t)b * T * C + h * HS;
    size_t rows = ((size_t)b * a.NH + h) * a.ld;  // this head's lse2 and D
    int tiles = (T - row0 + TILE - 1) / TILE;     // queries before row0 see none of the keys
    float sc = a.scale * FLASH_LOG2E;

    // A query tile: Q, dO, lse2 and D of queries row0 + kt TILE on, into stage kt % STAGES.
    auto stage = [&](int kt) {
        int i0 = row0 + kt * TILE, s = kt % STAGES;
        flash_mma_stage<HS, TILE, THREADS>(qdo_s + 2 * s * TILE * HS, head, ld, i0, T);
        flash_mma_stage<HS, TILE, THREADS>(qdo_s + (2 * s + 1) * TILE * HS, do_head, C, i0, T);
        flash_mma_stage_floats<TILE, THREADS>(ld_s + 2 * s * TILE, a.lse2 + rows + i0);
        flash_mma_stage_floats<TILE, THREADS>(ld_s + (2 * s + 1) * TILE, a.D + rows + i0);
    };
    flash_mma_stage<HS, ROWS, THREADS>(k_s, head + C, ld, row0, T);  // K and V with the first tile
    flash_mma_stage<HS, ROWS, THREADS>(v_s, head + 2 * C, ld, row0, T);
    for (int kt = 0; kt < STAGES - 1; kt++) {
        if (kt < tiles) stage(kt);
        cp_async_commit();
    }
    uint32_t ka[HS / 16][4], va[HS / 16][4];
    float dk[HS / 8][4], dv[HS / 8][4];
    flash_mma_zero<HS>(dk);
    flash_mma_zero<HS>(dv);
    for (int kt = 0; kt < tiles; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // tile kt has landed; every warp is done with tile kt - 1's stage
        if (kt + STAGES - 1 < tiles) stage(kt + STAGES - 1);
        cp_async_commit();
        if (F::HELD && kt == 0) {
            flash_mma_load_a<HS>(ka, k_s, warp * 16, lane);
            flash_mma_load_a<HS>(va, v_s, warp * 16, lane);
        }
        int s = kt % STAGES, i0 = row0 + kt * TILE;
        const bf16* q_s = qdo_s + 2 * s * TILE * HS;
        // Steps start 16-aligned, as the warps' keys do: a step is before, on or after the diagonal.
#pragma unroll
        for (int x0 = 0; x0 < TILE; x0 += 16) {
            if (i0 + x0 < wkey) continue;  // queries before the warp's keys (warp-uniform)
            const bf16* do_s = q_s + TILE * HS;
            const float *lse2_s = ld_s + 2 * s * TILE, *d_s = lse2_s + TILE;
            flash_mma_dkv_step<HS>(dk, dv, ka, va, k_s, v_s, warp * 16, q_s, do_s, lse2_s, d_s, x0, i0 + x0 == wkey,
                                   sc, lane);
        }
    }
    cp_async_wait<0>();
    flash_mma_put<HS>(k_s, dk, warp * 16, lane, a.scale);  // each warp's own rows, which only it read
    flash_mma_put<HS>(v_s, dv, warp * 16, lane, 1.0f);
    __syncthreads();
    bf16* dhead = a.dqkv + (size_t)b * T * ld + h * HS;
    flash_mma_store<HS, ROWS, THREADS>(dhead + C, ld, k_s, row0, T);
    flash_mma_store<HS, ROWS, THREADS>(dhead + 2 * C, ld, v_s, row0, T);
}

// A dQ warp's step: its 16 queries against keys x0 .. x0+15 of the staged tiles. lse2, d_i: rows
// g and g+8 (lse2 = +inf past T: P = 0). mask: the warp's diagonal; keys after rows get P = 0.
template <int HS>
__device__ __forceinline__ void flash_mma_dq_step(float (*dq)[4], const uint32_t (*qa)[4], const uint32_t (*doa)[4],
                                                  const bf16* q_s, const bf16* do_s, int wr, const bf16* k_s,
                                                  const bf16* v_s, const float* lse2, const float* d_i, int x0,
                                                  bool mask, float sc, int lane) {
    constexpr bool HELD = FlashMma<HS>::HELD;
    int g = lane / 4, q = lane % 4;
    float p[2][4], ds[2][4];  // P, dS: the warp's queries (rows wr.. of q_s) x 16 keys
    uint32_t f[HS / 16][4];  // Q's, then dO's fragments, where not held
    flash_mma_zero<16>(p);
    flash_mma_zero<16>(ds);
    if (!HELD) flash_mma_load_a<HS>(f, q_s, wr, lane);
    flash_mma_abt<HS, 16>(p, HELD ? qa : f, k_s, x0, lane);  // S = Q K^T
    if (!HELD) flash_mma_load_a<HS>(f, do_s, wr, lane);
    flash_mma_abt<HS, 16>(ds, HELD ? doa : f, v_s, x0, lane);  // dP = dO V^T
    if (mask)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (8 * j + 2 * q + (e & 1) > g + 8 * (e >> 1)) p[j][e] = -INFINITY;
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            p[j][e] = exp2f(fmaf(p[j][e], sc, -lse2[e >> 1]));
            ds[j][e] = p[j][e] * (ds[j][e] - d_i[e >> 1]);
        }
    uint32_t dsa[1][4];
    flash_mma_to_a<16>(dsa, ds);
    flash_mma_ab<HS, 16>(dq, dsa, k_s, x0, lane);  // dQ += dS K
}

// dQ (the first C of each dqkv row, written) for query rows; grid (NH, B, query tiles). A warp
// owns 16 queries and walks the key tiles up to the block's last query, 16 keys a step.
template <int HS>
__global__ void __launch_bounds__(FlashMma<HS>::BWD_THREADS, FlashMma<HS>::BWD_BLOCKS)
flash_attention_backward_dq_mma_kernel(FlashBackward a) {
    typedef FlashMma<HS> F;
    constexpr int ROWS = F::BWD_ROWS, TILE = F::BWD_TILE, STAGES = F::BWD_STAGES, THREADS = F::BWD_THREADS;
    extern __shared__ __align__(128) unsigned char flash_mma_smem[];
    bf16* q_s = reinterpret_cast<bf16*>(flash_mma_smem);  // ROWS x HS each; dQ at the end
    bf16* do_s = q_s + ROWS * HS;
    bf16* kv_s = do_s + ROWS * HS;  // stage s: K at kv_s + 2s TILE HS, then V
    int T = a.T, C = a.C;
    int h = blockIdx.x, b = blockIdx.y;
    int row0 = (gridDim.z - 1 - blockIdx.z) * ROWS;  // the longest rows of every head first
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    int wrow = row0 + warp * 16;
    size_t ld = 3 * (size_t)C;
    const bf16* head = a.qkv + (size_t)b * T * ld + h * HS;
    float sc = a.scale * FLASH_LOG2E;
    float lse2[2], d_i[2];  // rows g and g+8: inside the row of ld >= row0 + ROWS floats
#pragma unroll
    for (int r = 0; r < 2; r++) {
        size_t at = ((size_t)b * a.NH + h) * a.ld + wrow + g + 8 * r;
        lse2[r] = a.lse2[at];
        d_i[r] = a.D[at];
    }
    int tiles = (min(row0 + ROWS, T) + TILE - 1) / TILE;

    auto stage = [&](int kt) {  // K and V of keys kt TILE on, into stage kt % STAGES
        bf16* k_next = kv_s + 2 * (kt % STAGES) * TILE * HS;
        flash_mma_stage<HS, TILE, THREADS>(k_next, head + C, ld, kt * TILE, T);
        flash_mma_stage<HS, TILE, THREADS>(k_next + TILE * HS, head + 2 * C, ld, kt * TILE, T);
    };
    flash_mma_stage<HS, ROWS, THREADS>(q_s, head, ld, row0, T);  // Q and dO with the first tile
    flash_mma_stage<HS, ROWS, THREADS>(do_s, a.dout + (size_t)b * T * C + h * HS, C, row0, T);
    for (int kt = 0; kt < STAGES - 1; kt++) {
        if (kt < tiles) stage(kt);
        cp_async_commit();
    }
    uint32_t qa[HS / 16][4], doa[HS / 16][4];
    float dq[HS / 8][4];
    flash_mma_zero<HS>(dq);
    for (int kt = 0; kt < tiles; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // tile kt has landed; every warp is done with tile kt - 1's stage
        if (kt + STAGES - 1 < tiles) stage(kt + STAGES - 1);
        cp_async_commit();
        if (F::HELD && kt == 0) {
            flash_mma_load_a<HS>(qa, q_s, warp * 16, lane);
            flash_mma_load_a<HS>(doa, do_s, warp * 16, lane);
        }
        const bf16* k_s = kv_s + 2 * (kt % STAGES) * TILE * HS;
#pragma unroll
        for (int x0 = 0; x0 < TILE; x0 += 16) {
            int k0 = kt * TILE + x0;  // 16-aligned, as the warp's rows are
            if (k0 > wrow) break;     // keys after the warp's rows (warp-uniform)
            const bf16* v_s = k_s + TILE * HS;
            flash_mma_dq_step<HS>(dq, qa, doa, q_s, do_s, warp * 16, k_s, v_s, lse2, d_i, x0, k0 == wrow, sc, lane);
        }
    }
    cp_async_wait<0>();
    flash_mma_put<HS>(q_s, dq, warp * 16, lane, a.scale);  // the warp's own rows, which only it read
    __syncthreads();
    flash_mma_store<HS, ROWS, THREADS>(a.dqkv + (size_t)b * T * ld + h * HS, ld, q_s, row0, T);
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
        typedef FlashMma<HS> F;
        static bool smem_set = false;  // more than 48 KiB of shared memory: once per instantiation
        if (!smem_set) {
            cuda_check(cudaFuncSetAttribute(flash_attention_forward_mma_kernel<HS>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, F::FWD_SMEM));
            smem_set = true;
        }
        dim3 grid(NH, B, ceil_div((size_t)T, F::FWD_ROWS));
        flash_attention_forward_mma_kernel<HS><<<grid, F::FWD_THREADS, F::FWD_SMEM>>>(out, lse, qkv, T, C, NH, scale);
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
        typedef FlashMma<HS> F;
        static bool smem_set = false;
        if (!smem_set) {
            cuda_check(cudaFuncSetAttribute(flash_attention_backward_dkv_mma_kernel<HS>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, F::DKV_SMEM));
            cuda_check(cudaFuncSetAttribute(flash_attention_backward_dq_mma_kernel<HS>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, F::BWD_SMEM));
            smem_set = true;
        }
        dim3 grid(a.NH, B, ceil_div((size_t)a.T, F::BWD_ROWS));
        flash_attention_backward_dkv_mma_kernel<HS><<<grid, F::BWD_THREADS, F::DKV_SMEM>>>(a);
        launch_check(flash_attention_backward_dkv_mma_kernel);
        flash_attention_backward_dq_mma_kernel<HS><<<grid, F::BWD_THREADS, F::BWD_SMEM>>>(a);
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
    FlashBackward a = flash_attention_backward_args(dqkv, dout, qkv, out, lse, B, T, C, NH);
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
