// gpt2/gpu/flash_attention_wgmma.cuh: the causal flash attention forward on Hopper (9.0, an sm_90a
// build), in FlashAttention-3's way (Shah et al. 2024): TMA brings the tiles, wgmma multiplies them,
// and a tile's softmax runs while the tensor cores multiply. The inputs, outputs (lse too) and
// arithmetic of flash_attention_forward_mma_kernel, whose launcher picks this one where it runs.
//
// A block owns 128 query rows of one (b, h): three warpgroups, as in matmul_wgmma.cuh's GEMM.
//   warpgroup 0, the producer: one thread has TMA load Q, then K and V 64 keys at a time into a
//     ring of stages (full and empty mbarriers);
//   warpgroups 1 and 2, the consumers: 64 rows each, walking the key tiles up to their diagonal:
//     S = Q K^T (wgmma), online softmax in registers, O += P V (wgmma, P from registers); tile j's
//     softmax runs while the tensor cores do tile j-1's O += P V.
// Design and roofline: doc/gpu.md, "Flash attention on Hopper".

#ifndef GPT2_GPU_FLASH_ATTENTION_WGMMA_CUH
#define GPT2_GPU_FLASH_ATTENTION_WGMMA_CUH

#include "../arithmetic.h"      // attention_scale
#include "flash_attention.cuh"  // FLASH_LOG2E, FLASH_LN2
#include "hopper.cuh"           // wgmma, TMA, mbarrier
#include "matmul_bf16.cuh"      // wgmma_available (matmul_wgmma.cuh)

#define FLASH_WG_ROWS 64                                         // queries per consumer; keys per tile
#define FLASH_WG_CONSUMERS 2
#define FLASH_WG_BLOCK_ROWS (FLASH_WG_CONSUMERS * FLASH_WG_ROWS)  // queries per block
#define FLASH_WG_THREADS (128 * (1 + FLASH_WG_CONSUMERS))
#define FLASH_WG_BOX_BYTES (64 * 64 * 2)  // a TMA box: 64 rows of 64 bf16, one 128-byte swizzle row each

// A tile is 64 rows of one head: HS / 64 boxes side by side, 1024-byte aligned (the swizzle's unit).
template <int HS>
struct FlashWgmma {
    static_assert(HS == 64 || HS == 128, "flash_attention_forward_wgmma_kernel: head sizes 64 and 128");
    static constexpr int TILE_BYTES = HS / 64 * FLASH_WG_BOX_BYTES;
    static constexpr int Q_BYTES = FLASH_WG_CONSUMERS * TILE_BYTES;
    static constexpr int STAGE_BYTES = 2 * TILE_BYTES;  // K, then V
    static constexpr int STAGES = 4;
    // Q, the ring, the barriers (full, empty, Q's), and 1 KiB to align Q to 1024 bytes
    static constexpr int SMEM_BYTES = Q_BYTES + STAGES * STAGE_BYTES + (2 * STAGES + 1) * 8 + 1024;
};

// Where element (r, e) of a tile lies, as TMA writes it: box e / 64, row r's 128 bytes, its
// 16-byte chunk XOR r % 8 (the 128-byte swizzle).
__device__ __forceinline__ int flash_wgmma_offset(int r, int e) {
    return e / 64 * FLASH_WG_BOX_BYTES + r * 128 + ((e % 64 / 8) ^ (r % 8)) * 16 + e % 8 * 2;
}

// S (64 x 64, float32) = Q K^T, 16 of the head at a time: Q and K are K-major (rows of the head),
// so k step kk starts 32 bytes along the swizzled rows of box kk / 4.
template <int HS>
__device__ __forceinline__ void flash_wgmma_scores(float* s, uint32_t q_tile, uint32_t k_tile) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t at = kk / 4 * FLASH_WG_BOX_BYTES + kk % 4 * 32;
        wgmma_bf16<FLASH_WG_ROWS, 0, 0>(s, wgmma_descriptor(q_tile + at, 16, 1024, WGMMA_SWIZZLE_128B),
                                        wgmma_descriptor(k_tile + at, 16, 1024, WGMMA_SWIZZLE_128B), kk > 0);
    }
}

// O (64 x HS) += P V, 16 keys at a time: P's fragments from registers (p[4kk..4kk+3]); V is
// N-major (rows of keys), so k step kk is 16 rows of 128 bytes on, its boxes a strip each.
template <int HS>
__device__ __forceinline__ void flash_wgmma_pv(float* o, const uint32_t* p, uint32_t v_tile) {
#pragma unroll
    for (int kk = 0; kk < FLASH_WG_ROWS / 16; kk++)
        wgmma_bf16_rs<HS, 1>(o, p + 4 * kk,
                             wgmma_descriptor(v_tile + kk * 2048, FLASH_WG_BOX_BYTES, 1024, WGMMA_SWIZZLE_128B), 1);
}

// Online softmax on a 64 x 64 tile of scores in wgmma's layout: the lane's rows `row` and row + 8
// (i = 0, 1), keys k0 + 8j + 2q, +1; masked after the row on the diagonal tile. m: row maxima
// (scaled, base 2), l: this lane's sums, rescale: the old l's and O's factor; s = exp2(s sc - m).
__device__ __forceinline__ void flash_wgmma_softmax(float* s, float* m, float* l, float* rescale, float sc,
                                                    bool diagonal, int row, int k0, int q) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < FLASH_WG_ROWS / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (diagonal && k0 + 8 * j + 2 * q + (e & 1) > row + 8 * (e >> 1)) s[4 * j + e] = -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * j + e]);
        }
    // Key k0 <= row is never masked: the maxima are finite; exp2f(-inf) = 0 at first.
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        float m_new = fmaxf(m[i], mx[i] * sc);  // sc > 0: scaling keeps the maximum
        rescale[i] = exp2f(m[i] - m_new);
        m[i] = m_new;
        l[i] *= rescale[i];
    }
#pragma unroll
    for (int j = 0; j < FLASH_WG_ROWS / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = exp2f(fmaf(s[4 * j + e], sc, -m[e >> 1]));
            s[4 * j + e] = p;
            l[e >> 1] += p;
        }
}

// The accumulators in pairs as bf16 A fragments (wgmma_bf16_rs), the lower column in the low half.
__device__ __forceinline__ void flash_wgmma_pack(uint32_t* p, const float* s) {
#pragma unroll
    for (int i = 0; i < FLASH_WG_ROWS / 4; i++) {
        __nv_bfloat162 v = __floats2bfloat162_rn(s[2 * i], s[2 * i + 1]);
        memcpy(&p[i], &v, sizeof(uint32_t));
    }
}

// out (B,T,C) and lse (B,NH,T) from qkv (B,T,3C), read by TMA through map_qkv: (B*T) x 3C, 64 x
// 64 boxes (flash_attention_forward_wgmma_launch). Grid (NH, B, row blocks), the longest rows first.
template <int HS>
__global__ void __launch_bounds__(FLASH_WG_THREADS, 1)
flash_attention_forward_wgmma_kernel(bf16* out, float* lse, const __grid_constant__ CUtensorMap map_qkv, int T, int C,
                                     int NH, float scale) {
#if defined(CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef FlashWgmma<HS> S;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* q_s = smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024;
    unsigned char* ring = q_s + S::Q_BYTES;
    uint64_t* full = reinterpret_cast<uint64_t*>(ring + S::STAGES * S::STAGE_BYTES);
    uint64_t* empty = full + S::STAGES;
    uint64_t* q_full = empty + S::STAGES;
    int h = blockIdx.x, b = blockIdx.y;
    int row0 = (gridDim.z - 1 - blockIdx.z) * FLASH_WG_BLOCK_ROWS;  // the longest rows first
    int tiles = (min(row0 + FLASH_WG_BLOCK_ROWS, T) + FLASH_WG_ROWS - 1) / FLASH_WG_ROWS;  // keys to the last row
    if (threadIdx.x == 0) {
        for (int s = 0; s < S::STAGES; s++) {
            mbarrier_init(&full[s], 1);                        // the producer's arrive; its copies' bytes
            mbarrier_init(&empty[s], 4 * FLASH_WG_CONSUMERS);  // one arrive per consumer warp
        }
        mbarrier_init(q_full, 1);
        mbarrier_init_fence();
    }
    __syncthreads();

    int warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
        setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        // Rows of the map: the sequence's are b*T..; boxes past T hold the next sequence's rows (or
        // zeros past B*T), which the causal mask hides from every row before T.
        int y = b * T;
        mbarrier_arrive_expect_tx(q_full, S::Q_BYTES);
        for (int c = 0; c < FLASH_WG_CONSUMERS; c++)
            for (int j = 0; j < HS / 64; j++)
                tma_load_2d(q_s + c * S::TILE_BYTES + j * FLASH_WG_BOX_BYTES, &map_qkv, h * HS + 64 * j,
                            y + row0 + c * FLASH_WG_ROWS, q_full);
        int stage = 0;
        uint32_t phase = 0;
        for (int kt = 0; kt < tiles; kt++) {
            mbarrier_wait(&empty[stage], phase ^ 1);  // on the ring's first pass: at once
            mbarrier_arrive_expect_tx(&full[stage], S::STAGE_BYTES);
            unsigned char* k_s = ring + stage * S::STAGE_BYTES;
            for (int j = 0; j < HS / 64; j++) {
                int x = h * HS + 64 * j;
                tma_load_2d(k_s + j * FLASH_WG_BOX_BYTES, &map_qkv, C + x, y + kt * FLASH_WG_ROWS, &full[stage]);
                tma_load_2d(k_s + S::TILE_BYTES + j * FLASH_WG_BOX_BYTES, &map_qkv, 2 * C + x, y + kt * FLASH_WG_ROWS,
                            &full[stage]);
            }
            if (++stage == S::STAGES) { stage = 0; phase ^= 1; }
        }
        return;
    }

    setmaxnreg_inc<232>();
    int c = warpgroup - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    int q0 = row0 + c * FLASH_WG_ROWS;  // the warpgroup's first query
    int row = q0 + warp * 16 + g;       // the lane's rows: row and row + 8
    // Up to the diagonal tile (keys q0..q0+63), or all the block's: rows past T are computed, not stored.
    int my_tiles = min(tiles, q0 / FLASH_WG_ROWS + 1);
    bool releaser = lane == 0;  // wgmma.wait_group speaks for its warp: a lane of each frees the stages
    float sc = scale * FLASH_LOG2E;  // scores in base 2: exp2f
    uint32_t q_tile = smem_address(q_s + c * S::TILE_BYTES), ring_at = smem_address(ring);
    float s[FLASH_WG_ROWS / 2], o[HS / 2], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, rescale[2];
    uint32_t p[FLASH_WG_ROWS / 4];  // P in bf16: the A fragments of O += P V
#pragma unroll
    for (int i = 0; i < HS / 2; i++) o[i] = 0.0f;

    // Tile 0 alone: its scores, its softmax.
    int stage = 0;
    uint32_t phase = 0;
    mbarrier_wait(q_full, 0);
    mbarrier_wait(&full[0], 0);
    wgmma_fence();
    wgmma_hold<FLASH_WG_ROWS / 2>(s);
    flash_wgmma_scores<HS>(s, q_tile, ring_at);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold<FLASH_WG_ROWS / 2>(s);
    flash_wgmma_softmax(s, m, l, rescale, sc, q0 == 0, row, 0, q);
    flash_wgmma_pack(p, s);
    // Then per tile kt: S = Q K_kt^T and O += P V_(kt-1) issued as two groups; the softmax of S once
    // the first is done, while the second multiplies; then O rescaled, P packed, the stage freed.
    for (int kt = 1; kt < my_tiles; kt++) {
        int prev = stage;
        if (++stage == S::STAGES) { stage = 0; phase ^= 1; }
        mbarrier_wait(&full[stage], phase);
        wgmma_fence();
        wgmma_hold<FLASH_WG_ROWS / 2>(s);
        wgmma_hold<HS / 2>(o);
        wgmma_hold<FLASH_WG_ROWS / 4>(p);
        flash_wgmma_scores<HS>(s, q_tile, ring_at + stage * S::STAGE_BYTES);
        wgmma_commit();
        flash_wgmma_pv<HS>(o, p, ring_at + prev * S::STAGE_BYTES + S::TILE_BYTES);
        wgmma_commit();
        wgmma_wait<1>();  // S is in; O += P V goes on
        wgmma_hold<FLASH_WG_ROWS / 2>(s);
        flash_wgmma_softmax(s, m, l, rescale, sc, kt * FLASH_WG_ROWS == q0, row, kt * FLASH_WG_ROWS, q);
        wgmma_wait<0>();
        wgmma_hold<HS / 2>(o);
        wgmma_hold<FLASH_WG_ROWS / 4>(p);
        if (releaser) mbarrier_arrive(&empty[prev]);
#pragma unroll
        for (int i = 0; i < HS / 2; i++) o[i] *= rescale[i % 4 / 2];
        flash_wgmma_pack(p, s);
    }
    wgmma_fence();
    wgmma_hold<HS / 2>(o);
    wgmma_hold<FLASH_WG_ROWS / 4>(p);
    flash_wgmma_pv<HS>(o, p, ring_at + stage * S::STAGE_BYTES + S::TILE_BYTES);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold<HS / 2>(o);
    if (releaser) mbarrier_arrive(&empty[stage]);

    // A row's sum over its four lanes; O / l in bf16 into the warp's own 16 rows of its Q tile
    // (which only its own wgmmas read, all retired), then out: 16 bytes a lane, along the rows.
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    unsigned char* tile = q_s + c * S::TILE_BYTES;
#pragma unroll
    for (int j = 0; j < HS / 8; j++)
#pragma unroll
        for (int i = 0; i < 2; i++)
            *reinterpret_cast<__nv_bfloat162*>(tile + flash_wgmma_offset(warp * 16 + g + 8 * i, 8 * j + 2 * q)) =
                __floats2bfloat162_rn(o[4 * j + 2 * i] / l[i], o[4 * j + 2 * i + 1] / l[i]);
    __syncwarp();
    for (int f = lane; f < 16 * HS / 8; f += 32) {
        int r = f / (HS / 8), e = f % (HS / 8) * 8, t = q0 + warp * 16 + r;
        if (t < T)
            *reinterpret_cast<uint4*>(out + ((size_t)b * T + t) * C + h * HS + e) =
                *reinterpret_cast<const uint4*>(tile + flash_wgmma_offset(warp * 16 + r, e));
    }
    if (q == 0)
        for (int i = 0; i < 2; i++)
            if (row + 8 * i < T) lse[((size_t)b * NH + h) * T + row + 8 * i] = (m[i] + log2f(l[i])) * FLASH_LN2;  // base 2 -> e
#endif
}

template <int HS>
static void flash_wgmma_forward_run(bf16* out, float* lse, const CUtensorMap& map, int B, int T, int C, int NH) {
    static bool smem_set = false;  // once per instantiation
    if (!smem_set) {
        cuda_check(cudaFuncSetAttribute(flash_attention_forward_wgmma_kernel<HS>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, FlashWgmma<HS>::SMEM_BYTES));
        smem_set = true;
    }
    dim3 grid(NH, B, ceil_div((size_t)T, FLASH_WG_BLOCK_ROWS));
    flash_attention_forward_wgmma_kernel<HS><<<grid, FLASH_WG_THREADS, FlashWgmma<HS>::SMEM_BYTES>>>(
        out, lse, map, T, C, NH, attention_scale(HS));
    launch_check(flash_attention_forward_wgmma_kernel);
}

// The forward on this kernel, where it runs: a 9.0 GPU with sm_90a code (wgmma_available), head
// size 64 or 128, out 16-byte aligned and qkv readable by TMA. Else false, nothing launched.
static bool flash_attention_forward_wgmma_launch(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    int hs = NH > 0 && C % NH == 0 ? C / NH : 0;
    CUtensorMap map;  // qkv as (B*T) x 3C, 64 x 64 boxes
    if ((hs != 64 && hs != 128) || !wgmma_available() || !aligned16(out) ||
        !tensor_map_bf16(&map, qkv, B * T, 3 * C, 3 * C, 64, 64))
        return false;
    if (hs == 64) flash_wgmma_forward_run<64>(out, lse, map, B, T, C, NH);
    else flash_wgmma_forward_run<128>(out, lse, map, B, T, C, NH);
    return true;
}

#endif // GPT2_GPU_FLASH_ATTENTION_WGMMA_CUH
