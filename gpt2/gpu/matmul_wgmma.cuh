// gpt2/gpu/matmul_wgmma.cuh: gemm_bf16 on Hopper (compute capability 9.0, an sm_90a build): TMA
// copies the tiles into a ring of shared-memory stages, wgmma multiplies them straight from there.
// The same product, layouts and epilogue as gemm_bf16_kernel (matmul_bf16.cuh, which includes
// this file after its GemmBf16Args, epilogue and split-K reduction, and picks this path).
//
// A block of three warpgroups stays on its SM (a persistent grid) and walks tiles of C:
//   warpgroup 0, the producer: one thread waits for a free stage, then has TMA fill it with the
//     next k tile of A (128 x 64) and B (BN x 64); the stage's `full` barrier completes when the
//     bytes have landed;
//   warpgroups 1 and 2, the consumers: each multiplies its 64 rows of the tile (wgmma, 64 x BN x 16
//     a time, float32 accumulators in registers), frees each stage on its `empty` barrier once its
//     wgmmas have read it, and at the tile's end runs the epilogue from its registers.

#ifndef GPT2_GPU_MATMUL_WGMMA_CUH
#define GPT2_GPU_MATMUL_WGMMA_CUH

#include "hopper.cuh"

#define WGMMA_BM 128     // rows of a tile: 64 per consumer warpgroup
#define WGMMA_BK 64      // k per stage: 128 bytes of bf16, one 128-byte swizzle row
#define WGMMA_GROUP_M 8  // tile rows walked together, so that blocks at work share rows of A in L2

// A stage: A's 128 x 64 tile, then B's BN x 64 (K-major: rows of k) or 64 x BN (N-major: 64-wide
// strips, 8 KiB apart), each 128-byte swizzled by TMA.
template <int BN>
struct WgmmaShape {
    static constexpr int A_BYTES = WGMMA_BM * WGMMA_BK * 2;
    static constexpr int STAGE_BYTES = A_BYTES + BN * WGMMA_BK * 2;
    static constexpr int STAGES = BN == 128 ? 5 : 4;  // 160 or 192 KiB of the 227 an SM offers
    // the ring, its barriers (full, then empty), and 1 KiB to align the ring to 1024 bytes
    static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;
};

// Work unit u of the block's walk: a tile (m0, n0) of C and a slice of k tiles. Tiles go down
// WGMMA_GROUP_M tile rows, then one column right, so that the blocks at work at once read few rows
// of A and few columns of B.
struct WgmmaUnit {
    int m0, n0, slice, kt0, ktiles;
};
template <int BN>
__device__ __forceinline__ WgmmaUnit wgmma_unit(const GemmBf16Args& g, int u) {
    int tiles_m = (g.M + WGMMA_BM - 1) / WGMMA_BM, tiles_n = (g.N + BN - 1) / BN;
    int tiles = tiles_m * tiles_n;
    int tile = u % tiles;
    int group = tile / (WGMMA_GROUP_M * tiles_n), first_m = group * WGMMA_GROUP_M;
    int rows = min(WGMMA_GROUP_M, tiles_m - first_m);
    int in_group = tile % (WGMMA_GROUP_M * tiles_n);
    WgmmaUnit w;
    w.m0 = (first_m + in_group % rows) * WGMMA_BM;
    w.n0 = in_group / rows * BN;
    w.slice = u / tiles;
    w.kt0 = w.slice * g.slice_ktiles;
    w.ktiles = min(g.slice_ktiles, (g.K + WGMMA_BK - 1) / WGMMA_BK - w.kt0);  // >= 1: K > 0, no slice empty
    return w;
}

template <int BN>
__host__ __device__ __forceinline__ int wgmma_units(const GemmBf16Args& g, int slices) {
    return (g.M + WGMMA_BM - 1) / WGMMA_BM * ((g.N + BN - 1) / BN) * slices;
}

// map_a, map_b: TMA's tensor maps of A and B (gemm_bf16_wgmma_launch), passed as constants.
template <int BN, bool TA, bool TB, typename OutT>
__global__ void __launch_bounds__(384, 1)
gemm_bf16_wgmma_kernel(GemmBf16Args g, const __grid_constant__ CUtensorMap map_a,
                       const __grid_constant__ CUtensorMap map_b) {
#if defined(CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef WgmmaShape<BN> S;
    constexpr int STAGES = S::STAGES;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // the swizzle works on address bits 4-9: the ring starts at a multiple of 1024
    unsigned char* ring = smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024;
    uint64_t* full = reinterpret_cast<uint64_t*>(ring + STAGES * S::STAGE_BYTES);
    uint64_t* empty = full + STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbarrier_init(&full[s], 1);   // the producer's arrive; its copies' bytes
            mbarrier_init(&empty[s], 2);  // one arrive per consumer warpgroup
        }
        mbarrier_init_fence();
    }
    __syncthreads();

    int ktiles = (g.K + WGMMA_BK - 1) / WGMMA_BK;
    int units = wgmma_units<BN>(g, (ktiles + g.slice_ktiles - 1) / g.slice_ktiles);
    int warpgroup = threadIdx.x / 128;
    // Both roles walk the same units and k tiles; stage s and its phase parity run on across
    // units (the parity flips each time the ring wraps).
    int stage = 0;
    uint32_t phase = 0;
    if (warpgroup == 0) {
        setmaxnreg_dec<40>();
        if (threadIdx.x != 0) return;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
            WgmmaUnit w = wgmma_unit<BN>(g, u);
            for (int kt = 0; kt < w.ktiles; kt++) {
                // the consumers freed the stage; on the ring's first pass the wait for the parity
                // before phase 0 returns at once
                mbarrier_wait(&empty[stage], phase ^ 1);
                mbarrier_arrive_expect_tx(&full[stage], S::STAGE_BYTES);  // whole boxes: edges count
                unsigned char* As = ring + stage * S::STAGE_BYTES;
                unsigned char* Bs = As + S::A_BYTES;
                int k0 = (w.kt0 + kt) * WGMMA_BK;
                if (!TA) {
                    tma_load_2d(As, &map_a, k0, w.m0, &full[stage]);
                } else {
                    for (int j = 0; j < WGMMA_BM / 64; j++) tma_load_2d(As + j * 8192, &map_a, w.m0 + 64 * j, k0, &full[stage]);
                }
                if (TB) {
                    tma_load_2d(Bs, &map_b, k0, w.n0, &full[stage]);
                } else {
                    for (int j = 0; j < BN / 64; j++) tma_load_2d(Bs + j * 8192, &map_b, w.n0 + 64 * j, k0, &full[stage]);
                }
                if (++stage == STAGES) { stage = 0; phase ^= 1; }
            }
        }
        return;
    }

    setmaxnreg_inc<232>();
    int c = warpgroup - 1;  // this consumer's rows of the tile: 64c .. 64c+63
    int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    bool releaser = t == 0;  // arrives on `empty` for the warpgroup
    float acc[BN / 2];
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
        WgmmaUnit w = wgmma_unit<BN>(g, u);
        int last = -1;  // the stage of the previous k tile, still read by the wgmmas in flight
        for (int kt = 0; kt < w.ktiles; kt++) {
            mbarrier_wait(&full[stage], phase);
            uint32_t a = smem_address(ring + stage * S::STAGE_BYTES), b = a + S::A_BYTES;
            wgmma_fence();
            wgmma_hold<BN / 2>(acc);
#pragma unroll
            for (int kk = 0; kk < WGMMA_BK / 16; kk++) {
                // A: K-major steps 32 bytes along its swizzled rows, M-major 16 rows of 128 bytes
                uint64_t da = TA ? wgmma_descriptor(a + c * 8192 + kk * 2048, 8192, 1024, WGMMA_SWIZZLE_128B)
                                 : wgmma_descriptor(a + c * 8192 + kk * 32, 16, 1024, WGMMA_SWIZZLE_128B);
                uint64_t db = TB ? wgmma_descriptor(b + kk * 32, 16, 1024, WGMMA_SWIZZLE_128B)
                                 : wgmma_descriptor(b + kk * 2048, 8192, 1024, WGMMA_SWIZZLE_128B);
                wgmma_bf16<BN, TA, !TB>(acc, da, db, kt > 0 || kk > 0);
            }
            wgmma_commit();
            // the previous tile's group is done: its stage may be refilled
            wgmma_wait<1>();
            wgmma_hold<BN / 2>(acc);
            if (last >= 0 && releaser) mbarrier_arrive(&empty[last]);
            last = stage;
            if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
        wgmma_wait<0>();
        wgmma_hold<BN / 2>(acc);
        if (last >= 0 && releaser) mbarrier_arrive(&empty[last]);

        // The epilogue from the fragments: per 8 columns j, D[g][8j+2q, +1] and D[g+8][8j+2q, +1].
        int m = w.m0 + c * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            int n = w.n0 + j * 8 + (lane % 4) * 2;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float v[2] = {acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]};
                int mh = m + 8 * h;
                if (g.partial == NULL) {
                    gemm_bf16_epilogue<OutT, 2>(g, mh, n, v);
                } else if (mh < g.M && n < g.ldp) {  // split-K: the plain sums, zeros from N to ldp
                    float* p = g.partial + ((long long)w.slice * g.M + mh) * g.ldp + n;
                    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
                }
            }
        }
    }
#endif
}

// Split-K for the wgmma tiles: only products with fewer tiles than SMs split (a weight gradient:
// few tiles of C, a long k), planned as splitk_plan plans the mma.sync kernel's.
template <int BN>
static int gemm_bf16_wgmma_slices(const GemmBf16Args& g, int* slice_k) {
    *slice_k = 0;
    if (wgmma_units<BN>(g, 1) >= cuda_num_sms) return 1;
    return splitk_plan((size_t)wgmma_units<BN>(g, 1), g.K, WGMMA_BK, slice_k);
}

// The product on the wgmma kernel; false (nothing launched) when TMA cannot read A or B (a base
// not 16-byte aligned, a row length not a multiple of 8, no k), which gemm_bf16 then runs on mma.sync.
template <int BN, bool TA, bool TB, typename OutT>
static bool gemm_bf16_wgmma_launch(GemmBf16Args g) {
    CUtensorMap map_a, map_b;
    // boxes: K-major tiles whole (rows x 64 k), M/N-major ones in strips of 64 x 64 k rows
    bool ok = TA ? tensor_map_bf16(&map_a, g.A, g.K, g.M, g.lda, WGMMA_BK, 64)
                 : tensor_map_bf16(&map_a, g.A, g.M, g.K, g.lda, WGMMA_BM, WGMMA_BK);
    ok = ok && (TB ? tensor_map_bf16(&map_b, g.B, g.N, g.K, g.ldb, BN, WGMMA_BK)
                   : tensor_map_bf16(&map_b, g.B, g.K, g.N, g.ldb, WGMMA_BK, 64));
    if (!ok) return false;
    int slice_k, slices = gemm_bf16_wgmma_slices<BN>(g, &slice_k);
    g.slice_ktiles = slices > 1 ? slice_k / WGMMA_BK : ceil_div(g.K, WGMMA_BK);
    g.partial = NULL;
    if (slices > 1) {
        g.ldp = (g.N + 7) / 8 * 8;
        g.partial = scratch_floats((size_t)slices * g.M * g.ldp);
    }
    static bool smem_set = false;  // once per instantiation
    if (!smem_set) {
        cuda_check(cudaFuncSetAttribute(gemm_bf16_wgmma_kernel<BN, TA, TB, OutT>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, WgmmaShape<BN>::SMEM_BYTES));
        smem_set = true;
    }
    int units = wgmma_units<BN>(g, slices);
    int blocks = units < cuda_num_sms ? units : cuda_num_sms;
    gemm_bf16_wgmma_kernel<BN, TA, TB, OutT><<<blocks, 384, WgmmaShape<BN>::SMEM_BYTES>>>(g, map_a, map_b);
    launch_check(gemm_bf16_wgmma_kernel);
    if (slices > 1) {
        size_t pieces = (size_t)g.M * (g.ldp / (16 / sizeof(OutT)));
        gemm_bf16_splitk_reduce_kernel<OutT><<<ceil_div(pieces, 256), 256>>>(g, slices);
        launch_check(gemm_bf16_splitk_reduce_kernel);
    }
    return true;
}

// ---------- which path ----------

// Whether this build has the wgmma kernels for this GPU: a 9.0 GPU, and sm_90a code (not only
// sm_90 or PTX, where they trap). The probe writes 1 only where they were compiled.
__global__ void wgmma_probe_kernel(int* built) {
#if defined(CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *built = 1;
#endif
}

static bool wgmma_available(void) {
    static int available = -1;  // found out once
    if (available >= 0) return available;
    available = 0;
    if (cuda_device.prop.major != 9) return false;
    int* d_built;
    cuda_check(cudaMalloc((void**)&d_built, sizeof(int)));
    cuda_check(cudaMemset(d_built, 0, sizeof(int)));
    wgmma_probe_kernel<<<1, 1>>>(d_built);
    launch_check(wgmma_probe_kernel);
    cuda_check(cudaMemcpy(&available, d_built, sizeof(int), cudaMemcpyDeviceToHost));
    cuda_check(cudaFree(d_built));
    return available;
}

#endif // GPT2_GPU_MATMUL_WGMMA_CUH
