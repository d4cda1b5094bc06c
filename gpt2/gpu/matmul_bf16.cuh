// gpt2/gpu/matmul_bf16.cuh: the bf16 path's matrix products on the tensor cores: the four PTX
// instructions, one GEMM (gemm_bf16, the twin of gemm_fp32) with float32 accumulation and an
// epilogue fusing bias, residual and GELU, and the block's linear layers on it.

#ifndef GPT2_GPU_MATMUL_BF16_CUH
#define GPT2_GPU_MATMUL_BF16_CUH

#include "../arithmetic.h"  // gelu, gelu_grad
#include "cuda_utils.cuh"
#include "matmul_fp32.cuh"  // bias_backward_gpu: the bias gradient is the same column sum

// ---------- tensor-core instructions ----------
//
// The emulator (dev/emu/cuda_emu.h) defines functions of the same names; dev/gpu/instruction_check.cu
// checks each against the PTX ISA.
#ifndef CUDA_EMU
// From compute capability 8.0 on; a build for an older GPU (GPU_ARCH=75) traps (train_gpu runs
// only -p fp32 there). The compiler does not read asm: an instruction that touches memory not in
// its operands (ldmatrix, cp.async) carries a "memory" clobber, so that no shared-memory access
// is moved across it, nor served after a wait from registers loaded before it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define TENSOR_CORE_PTX(...) __trap()
#else
#define TENSOR_CORE_PTX(...) asm volatile(__VA_ARGS__)
#endif

// d += a b on one warp's 16x8 tile: mma.sync.m16n8k16, bf16 A (16x16) and B (16x8), float32 D.
// Fragments (g = lane / 4, q = lane % 4; two bf16 a register, low half first):
//   a[0] = A[g][2q, 2q+1]    a[1] = A[g+8][2q, 2q+1]   a[2] = A[g][2q+8, +9]   a[3] = A[g+8][2q+8, +9]
//   b[0] = B[2q, 2q+1][g]    b[1] = B[2q+8, 2q+9][g]
//   d[0], d[1] = D[g][2q, 2q+1]                        d[2], d[3] = D[g+8][2q, 2q+1]
// Registers only: no "memory" clobber, which would only stop loads and stores moving around it.
__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    TENSOR_CORE_PTX("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 bf16 matrices from shared memory: lanes 8i..8i+7 give the addresses of matrix i's rows
// (16 bytes, aligned); r[i] gets row lane/4, columns 2(lane%4), +1. .trans: the transposes.
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* row) {
    TENSOR_CORE_PTX("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* row) {
    TENSOR_CORE_PTX("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(row)) : "memory");
}

// 16 bytes from global to shared memory, in the background, not through registers; src_bytes = 0
// writes zeros (past a matrix's edge). Copies since the last commit form a group; wait<N> leaves
// at most the N newest in flight. Other threads see the data after the wait and a __syncthreads.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    TENSOR_CORE_PTX("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_address(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit(void) { TENSOR_CORE_PTX("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait(void) {
    TENSOR_CORE_PTX("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
#endif

// ---------- the bf16 GEMM on the tensor cores ----------
//
// C = op(A) op(B) on the tensor cores, then an epilogue on the float32 results; layouts as for
// gemm_fp32 (TA, TB), C float32 or bf16. A block's warps each own MI x NI tiles of 16x8. Three
// stages of BM x 32 and 32 x BN tiles: cp.async fills two while the warps multiply the third.
// Swizzled rows, ldmatrix(.trans), zero-filled edges (any M, N, K), the epilogue through shared
// memory and split-K: doc/gpu.md "The tensor-core matmul".

enum { EPI_NONE, EPI_GELU, EPI_GELU_BACKWARD };

typedef struct {
    const bf16* A;
    const bf16* B;
    void* C;                   // float* or bf16*, as the kernel's OutT
    int M, N, K;
    long long lda, ldb, ldc;
    const float* bias;         // (N), added; or NULL
    const bf16* residual;      // (M, ldc), added; or NULL (a residual connection)
    bf16* aux;                 // (M, ldc) pre-activation: EPI_GELU stores it, C = gelu(aux);
                               // EPI_GELU_BACKWARD reads it, C = result * gelu'(aux)
    int epilogue;
    int accumulate;            // 1: C += result
    int vecA, vecB;            // 1: rows of A / B start 16-byte aligned (cp.async may copy them)
    int vecC;                  // 1: C, bias, residual and aux may be accessed 16 bytes of C at a time
    // split-K (the launchers set these): slices of slice_ktiles k tiles (the mma.sync kernel's
    // blockIdx.z); split, slice s leaves plain sums at partial + s*M*ldp (ldp: N rounded up to 8)
    int slice_ktiles;
    float* partial;            // NULL: unsplit
    long long ldp;
} GemmBf16Args;

#define MMA_BK 32      // k per stage
#define MMA_STAGES 3   // 3 x (128x32 + 32x128) bf16 = 48 KiB, the static shared-memory limit

// The index of element e of row r in a stage tile of `width`-bf16 rows. XOR-ing the 16-byte chunk
// number with bits of the row number puts ldmatrix's 8 row reads in 8 different bank groups.
__device__ __forceinline__ int mma_smem_index(int r, int e, int width) {
    int chunk = e >> 3;
    int swizzled = width >= 64 ? chunk ^ (r & 7) : chunk ^ ((r >> 1) & 3);
    return r * width + (swizzled << 3) + (e & 7);
}

// Stages the rows x width tile at src[(row0 + r) * ld + col0 + e], zeros outside [0, R) x [0, Cn).
template <int NT>
__device__ __forceinline__ void mma_stage_tile(bf16* tile, int rows, int width, const bf16* src, long long ld,
                                               int row0, int col0, int R, int Cn, int vec) {
    int chunks_per_row = width / 8;
    for (int f = threadIdx.x; f < rows * chunks_per_row; f += NT) {
        int r = f / chunks_per_row, e = (f % chunks_per_row) * 8;
        bf16* dst = tile + mma_smem_index(r, e, width);
        int row = row0 + r, col = col0 + e;
        if (row >= R || col >= Cn) {
            cp_async16(dst, src, 0);  // wholly outside: 16 zero bytes
        } else if (vec && col + 8 <= Cn) {
            cp_async16(dst, src + row * ld + col, 16);
        } else {
            for (int i = 0; i < 8; i++) dst[i] = col + i < Cn ? src[row * ld + col + i] : __float2bfloat16(0.0f);
        }
    }
}

// VEC consecutive elements as one access, aligned to their size (at most 16 bytes).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC < 16 ? sizeof(T) * VEC : 16) Pack {
    T v[VEC];
};

// x[0 .. VEC) = p[0 .. VEC) as float: one wide access, or `count` elements then zeros.
template <int VEC, typename T>
__device__ __forceinline__ void load_piece(float* x, const T* p, bool wide, int count) {
    if (wide) {
        Pack<T, VEC> pk = *reinterpret_cast<const Pack<T, VEC>*>(p);
#pragma unroll
        for (int e = 0; e < VEC; e++) x[e] = to_float(pk.v[e]);
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++) x[e] = e < count ? to_float(p[e]) : 0.0f;
    }
}
template <int VEC, typename T>
__device__ __forceinline__ void store_piece(T* p, const float* x, bool wide, int count) {
    if (wide) {
        Pack<T, VEC> pk;
#pragma unroll
        for (int e = 0; e < VEC; e++) pk.v[e] = from_float<T>(x[e]);
        *reinterpret_cast<Pack<T, VEC>*>(p) = pk;
    } else {
#pragma unroll
        for (int e = 0; e < VEC; e++)
            if (e < count) p[e] = from_float<T>(x[e]);
    }
}

// The epilogue of v = C(m, n .. n+VEC-1), in float32 and in this order: bias, GELU or its
// gradient, residual, old C. 16 bytes of C at a time where vecC and the edge allow.
template <typename OutT, int VEC>
__device__ __forceinline__ void gemm_bf16_epilogue(const GemmBf16Args& g, int m, int n, float* v) {
    if (m >= g.M || n >= g.N) return;
    bool wide = g.vecC && n + VEC <= g.N;
    int count = min(VEC, g.N - n);
    long long i = m * g.ldc + n;
    float x[VEC];
    if (g.bias != NULL) {
        load_piece<VEC>(x, g.bias + n, wide, count);
#pragma unroll
        for (int e = 0; e < VEC; e++) v[e] += x[e];
    }
    if (g.epilogue == EPI_GELU) {
        store_piece<VEC>(g.aux + i, v, wide, count);  // the pre-activation, rounded to bf16
#pragma unroll
        for (int e = 0; e < VEC; e++) v[e] = gelu(__bfloat162float(__float2bfloat16(v[e])));  // of the stored value, which the backward reads
    } else if (g.epilogue == EPI_GELU_BACKWARD) {
        load_piece<VEC>(x, g.aux + i, wide, count);
#pragma unroll
        for (int e = 0; e < VEC; e++) v[e] *= gelu_grad(x[e]);
    }
    if (g.residual != NULL) {
        load_piece<VEC>(x, g.residual + i, wide, count);
#pragma unroll
        for (int e = 0; e < VEC; e++) v[e] += x[e];
    }
    OutT* C = (OutT*)g.C + i;
    if (g.accumulate) {
        load_piece<VEC>(x, C, wide, count);
#pragma unroll
        for (int e = 0; e < VEC; e++) v[e] += x[e];
    }
    store_piece<VEC>(C, v, wide, count);
}

// One stage for one warp at (wm, wn): per 16 of k, MI A and NI B fragments by ldmatrix, then
// MI x NI mma.
template <int BM, int BN, int MI, int NI, bool TA, bool TB>
__device__ __forceinline__ void mma_multiply_stage(float (*acc)[NI][4], const bf16* As, const bf16* Bs, int wm,
                                                   int wn, int lane) {
#pragma unroll
    for (int ks = 0; ks < MMA_BK; ks += 16) {
        // A: matrices (m 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15); lane l, matrix l/8.
        uint32_t a[MI][4], b[NI][2];
#pragma unroll
        for (int i = 0; i < MI; i++) {
            int m = wm + i * 16;
            if (!TA) ldmatrix_x4(a[i], As + mma_smem_index(m + lane % 16, ks + (lane / 16) * 8, MMA_BK));
            else ldmatrix_x4_trans(a[i], As + mma_smem_index(ks + lane % 8 + (lane / 16) * 8,
                                                              m + (lane / 8) % 2 * 8, BM));
        }
        // B: two n-tiles per ldmatrix, b[j][0], b[j][1], b[j+1][0], b[j+1][1].
#pragma unroll
        for (int j = 0; j < NI; j += 2) {
            int n = wn + j * 8;
            uint32_t r[4];
            if (TB) ldmatrix_x4(r, Bs + mma_smem_index(n + lane % 8 + (lane / 16) * 8, ks + (lane / 8) % 2 * 8,
                                                        MMA_BK));
            else ldmatrix_x4_trans(r, Bs + mma_smem_index(ks + lane % 8 + (lane / 8) % 2 * 8,
                                                           n + (lane / 16) * 8, BN));
            b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
            for (int j = 0; j < NI; j++) mma_bf16_16816(acc[i][j], a[i], b[j]);
    }
}

// v = the VEC staged floats at src, column c, in 16-byte reads.
template <int VEC>
__device__ __forceinline__ void read_staged(float* v, const float* src, int c);
template <>
__device__ __forceinline__ void read_staged<4>(float* v, const float* src, int c) {
    float4 x = *reinterpret_cast<const float4*>(src);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}
// 8 floats in two halves, which half first alternating every 4 pieces: a quarter warp's 8 reads
// then cover the 32 banks once instead of 16 banks twice.
template <>
__device__ __forceinline__ void read_staged<8>(float* v, const float* src, int c) {
    int h = (c >> 5) & 1;
    float4 x = *reinterpret_cast<const float4*>(src + 4 * h);
    float4 y = *reinterpret_cast<const float4*>(src + 4 - 4 * h);
    float4 lo = h ? y : x, hi = h ? x : y;
    v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
    v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
}

template <int BM, int BN, int WM, int WN, bool TA, bool TB, typename OutT>
__global__ void __launch_bounds__(WM * WN * 32) gemm_bf16_kernel(GemmBf16Args g) {
    constexpr int NT = WM * WN * 32;
    constexpr int MI = BM / WM / 16, NI = BN / WN / 8;  // 16x8 tiles per warp
    static_assert(NI % 2 == 0, "B fragments are loaded two n-tiles at a time");
    constexpr int A_TILE = BM * MMA_BK, B_TILE = BN * MMA_BK;
    __shared__ __align__(128) bf16 smem[MMA_STAGES][A_TILE + B_TILE];

    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int wm = (warp / WN) * (BM / WM), wn = (warp % WN) * (BN / WN);  // this warp's piece
    // The block's k tiles: all, or (split-K) its slice's.
    int kt_first = blockIdx.z * g.slice_ktiles;
    int ktiles = min(g.slice_ktiles, (g.K + MMA_BK - 1) / MMA_BK - kt_first);

    // The block's k tile kt into stage buffer s, as the tiles lie in memory.
    auto load = [&](int kt, int s) {
        int k0 = (kt_first + kt) * MMA_BK;
        bf16* As = smem[s];
        bf16* Bs = smem[s] + A_TILE;
        if (!TA) mma_stage_tile<NT>(As, BM, MMA_BK, g.A, g.lda, m0, k0, g.M, g.K, g.vecA);
        else mma_stage_tile<NT>(As, MMA_BK, BM, g.A, g.lda, k0, m0, g.K, g.M, g.vecA);
        if (TB) mma_stage_tile<NT>(Bs, BN, MMA_BK, g.B, g.ldb, n0, k0, g.N, g.K, g.vecB);
        else mma_stage_tile<NT>(Bs, MMA_BK, BN, g.B, g.ldb, k0, n0, g.K, g.N, g.vecB);
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

    // Iteration kt waits for tile kt, then refills the buffer tile kt-1 used. One group per
    // iteration, empty or not: "all but the newest STAGES-2" then means "up to tile kt".
    for (int s = 0; s < MMA_STAGES - 1; s++) {
        if (s < ktiles) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<MMA_STAGES - 2>();
        __syncthreads();
        if (kt + MMA_STAGES - 1 < ktiles) load(kt + MMA_STAGES - 1, (kt + MMA_STAGES - 1) % MMA_STAGES);
        cp_async_commit();
        mma_multiply_stage<BM, BN, MI, NI, TA, TB>(acc, smem[kt % MMA_STAGES], smem[kt % MMA_STAGES] + A_TILE,
                                                   wm, wn, lane);
    }
    cp_async_wait<0>();  // the trailing groups are empty, but every copy is waited for

    // The epilogue through shared memory, so that global accesses are 16 bytes wide and a warp's
    // cover whole rows (fragments would give 4-8 bytes a lane); in bands of warp rows when the
    // float32 tile exceeds the pipeline's 48 KiB. Rows padded by 8 floats: a half warp's fragment
    // stores hit 32 different banks.
    constexpr int VEC = 16 / sizeof(OutT);
    constexpr int LDS = BN + 8;
    constexpr int WARP_ROWS = BM / WM;  // rows of a warp's piece
    constexpr int FIT = (int)(sizeof(smem) / sizeof(float)) / (WARP_ROWS * LDS);  // warp rows that fit
    constexpr int BAND = FIT < WM ? FIT : WM;  // warp rows staged at a time
    static_assert(BAND >= 1 && WM % BAND == 0, "the staged epilogue takes whole bands of warp rows");
    float* staged = reinterpret_cast<float*>(&smem[0][0]);
    int warp_row = warp / WN;
    for (int band = 0; band < WM; band += BAND) {
        __syncthreads();  // every warp done with the last k tile, or the last band
        if (warp_row >= band && warp_row < band + BAND) {
            int r = (warp_row - band) * WARP_ROWS + lane / 4, c = wn + (lane % 4) * 2;
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NI; j++) {
                    float* d = staged + (r + i * 16) * LDS + c + j * 8;
                    *reinterpret_cast<float2*>(d) = make_float2(acc[i][j][0], acc[i][j][1]);
                    *reinterpret_cast<float2*>(d + 8 * LDS) = make_float2(acc[i][j][2], acc[i][j][3]);
                }
        }
        __syncthreads();  // the band complete before any thread reads it
        for (int f = threadIdx.x; f < BAND * WARP_ROWS * (BN / VEC); f += NT) {
            int r = f / (BN / VEC), c = (f % (BN / VEC)) * VEC;
            float v[VEC];
            read_staged<VEC>(v, staged + r * LDS + c, c);
            int m = m0 + band * WARP_ROWS + r, n = n0 + c;
            if (g.partial == NULL) {
                gemm_bf16_epilogue<OutT, VEC>(g, m, n, v);
            } else if (m < g.M && n < g.ldp) {  // split-K: the plain sums, zeros from N to ldp
                float* p = g.partial + ((long long)blockIdx.z * g.M + m) * g.ldp + n;
#pragma unroll
                for (int q = 0; q < VEC; q += 4)
                    *reinterpret_cast<float4*>(p + q) = make_float4(v[q], v[q + 1], v[q + 2], v[q + 3]);
            }
        }
    }
}

// Split-K's second kernel: the partial sums added in slice order, then the epilogue. One thread
// per 16 bytes of C; rows of ldp floats keep every piece whole and aligned.
template <typename OutT>
__global__ void gemm_bf16_splitk_reduce_kernel(GemmBf16Args g, int slices) {
    constexpr int VEC = 16 / sizeof(OutT);
    int pieces = (int)(g.ldp / VEC);  // per row
    size_t f = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= (size_t)g.M * pieces) return;
    int m = (int)(f / pieces), n = (int)(f % pieces) * VEC;
    const float* p = g.partial + m * g.ldp + n;
    float v[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++) v[e] = 0.0f;
    for (int s = 0; s < slices; s++, p += (size_t)g.M * g.ldp) {
#pragma unroll
        for (int q = 0; q < VEC; q += 4) {
            float4 x = *reinterpret_cast<const float4*>(p + q);
            v[q] += x.x; v[q + 1] += x.y; v[q + 2] += x.z; v[q + 3] += x.w;
        }
    }
    gemm_bf16_epilogue<OutT, VEC>(g, m, n, v);
}

// 128x128 tiles (8 warps) when they give every SM two blocks; else 64x64 (4 warps).
static bool gemm_bf16_big(const GemmBf16Args& g) {
    return (size_t)ceil_div(g.M, 128) * ceil_div(g.N, 128) >= (size_t)2 * cuda_num_sms;
}

// gemm_bf16's split-K slices (splitk_plan), 1 unsplit; only 64x64 tiles split.
static int gemm_bf16_slices(const GemmBf16Args& g, int* slice_k) {
    *slice_k = 0;
    if (gemm_bf16_big(g)) return 1;
    return splitk_plan((size_t)ceil_div(g.M, 64) * ceil_div(g.N, 64), g.K, MMA_BK, slice_k);
}

// Split, the slices run as blockIdx.z into partial sums in scratch, and a second kernel finishes.
template <bool TA, bool TB, typename OutT>
static void gemm_bf16_launch(GemmBf16Args g) {
    bool big = gemm_bf16_big(g);
    int slice_k, slices = gemm_bf16_slices(g, &slice_k);
    int bm = big ? 128 : 64;
    dim3 grid(ceil_div(g.N, bm), ceil_div(g.M, bm), slices);
    if (grid.y > 65535) fail("matmul of %d x %d is too large for one launch (%s:%d)", g.M, g.N, __FILE__, __LINE__);
    g.slice_ktiles = slices > 1 ? slice_k / MMA_BK : ceil_div(g.K, MMA_BK);
    g.partial = NULL;
    if (slices > 1) {
        g.ldp = (g.N + 7) / 8 * 8;
        g.partial = scratch_floats((size_t)slices * g.M * g.ldp);
    }
    if (big) gemm_bf16_kernel<128, 128, 2, 4, TA, TB, OutT><<<grid, 256>>>(g);
    else gemm_bf16_kernel<64, 64, 2, 2, TA, TB, OutT><<<grid, 128>>>(g);
    launch_check(gemm_bf16_kernel);
    if (slices > 1) {
        size_t pieces = (size_t)g.M * (g.ldp / (16 / sizeof(OutT)));
        gemm_bf16_splitk_reduce_kernel<OutT><<<ceil_div(pieces, 256), 256>>>(g, slices);
        launch_check(gemm_bf16_splitk_reduce_kernel);
    }
}

// The Hopper kernel (wgmma and TMA), on GemmBf16Args, the epilogue and the split-K reduction above.
#include "matmul_wgmma.cuh"

#define WGMMA_BN 128  // columns of the wgmma kernel's tiles

// 1: gemm_bf16 runs the mma.sync kernel even where the wgmma one could (gpu_check tests both).
static int gemm_bf16_mma_sync_only = 0;
static long long gemm_bf16_wgmma_runs = 0;  // products the wgmma kernel ran (gpu_check asserts the path)

// The wgmma kernel (BN-wide tiles) on a 9.0 GPU that the build has it for, where TMA can read the
// operands; else the mma.sync one.
template <int BN, bool TA, bool TB, typename OutT>
static void gemm_bf16_run(GemmBf16Args g) {
    if (!gemm_bf16_mma_sync_only && wgmma_available() && gemm_bf16_wgmma_launch<BN, TA, TB, OutT>(g)) {
        gemm_bf16_wgmma_runs++;
        return;
    }
    gemm_bf16_launch<TA, TB, OutT>(g);
}

// A product's operands; the caller sets the epilogue's extras.
static GemmBf16Args gemm_bf16_args(const bf16* A, long long lda, const bf16* B, long long ldb, void* C,
                                   long long ldc, int M, int N, int K) {
    GemmBf16Args g = {.A = A, .B = B, .C = C, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                      .epilogue = EPI_NONE};  // the rest 0: no bias, residual or aux, C =
    return g;
}

// Dispatches on the operand layouts and the output type (out_f32: C is float*, else bf16*). BN: the
// wgmma kernel's tile width (gpu_check times 256 beside it).
template <int BN = WGMMA_BN>
static void gemm_bf16(GemmBf16Args g, bool ta, bool tb, bool out_f32) {
    if (g.M == 0 || g.N == 0) return;
    g.vecA = aligned16(g.A) && g.lda % 8 == 0;
    g.vecB = aligned16(g.B) && g.ldb % 8 == 0;
    int vec = out_f32 ? 4 : 8;  // elements in 16 bytes of C (residual and aux rows: ldc too)
    g.vecC = aligned16(g.C) && g.ldc % vec == 0 && (g.bias == NULL || aligned16(g.bias)) &&
             (g.residual == NULL || aligned16(g.residual)) && (g.aux == NULL || aligned16(g.aux));
    if (out_f32) {
        if (!ta && !tb) gemm_bf16_run<BN, false, false, float>(g);
        if (!ta && tb) gemm_bf16_run<BN, false, true, float>(g);
        if (ta && !tb) gemm_bf16_run<BN, true, false, float>(g);
        if (ta && tb) gemm_bf16_run<BN, true, true, float>(g);
    } else {
        if (!ta && !tb) gemm_bf16_run<BN, false, false, bf16>(g);
        if (!ta && tb) gemm_bf16_run<BN, false, true, bf16>(g);
        if (ta && !tb) gemm_bf16_run<BN, true, false, bf16>(g);
        if (ta && tb) gemm_bf16_run<BN, true, true, bf16>(g);
    }
}

// ---------- the linear layer in bf16 ----------
// The epilogues fuse the bias, the residual add, GELU and (backward) its derivative.

// out (B,T,OC) = inp (B,T,C) weight (OC,C)^T + bias, bf16 in and out.
static void matmul_forward_gpu(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int T,
                               int C, int OC) {
    GemmBf16Args g = gemm_bf16_args(inp, C, weight, C, out, OC, B * T, OC, C);
    g.bias = bias;
    gemm_bf16(g, false, true, false);
}

// out = residual + inp weight^T + bias: the product that ends each half of a block.
static void matmul_residual_forward_gpu(bf16* out, const bf16* inp, const bf16* weight, const float* bias,
                                        const bf16* residual, int B, int T, int C, int OC) {
    GemmBf16Args g = gemm_bf16_args(inp, C, weight, C, out, OC, B * T, OC, C);
    g.bias = bias;
    g.residual = residual;
    gemm_bf16(g, false, true, false);
}

// out = gelu(pre), pre (B,T,OC) = inp weight^T + bias, both kept (the backward needs pre).
static void matmul_gelu_forward_gpu(bf16* out, bf16* pre, const bf16* inp, const bf16* weight, const float* bias,
                                    int B, int T, int C, int OC) {
    GemmBf16Args g = gemm_bf16_args(inp, C, weight, C, out, OC, B * T, OC, C);
    g.bias = bias;
    g.aux = pre;
    g.epilogue = EPI_GELU;
    gemm_bf16(g, false, true, false);
}

// dinp (N, C) = dout (N, OC) weight (OC, C), written (not accumulated), times gelu'(gelu_pre)
// when gelu_pre is given (the product's input was gelu(gelu_pre)); dweight (OC, C) += dout^T inp
// and dbias (OC) += the column sums of dout, in float32.
static void matmul_backward_set_dinp_of(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                        const bf16* weight, const bf16* gelu_pre, int N, int C, int OC) {
    GemmBf16Args g = gemm_bf16_args(dout, OC, weight, C, dinp, C, N, C, OC);  // B(k=o, n=c) = weight[o*C + c]
    if (gelu_pre != NULL) {
        g.aux = (bf16*)gelu_pre;
        g.epilogue = EPI_GELU_BACKWARD;
    }
    gemm_bf16(g, false, false, false);
    g = gemm_bf16_args(dout, OC, inp, C, dweight, C, OC, C, N);  // A(o, row) = dout[row*OC + o]: transposed
    g.accumulate = 1;
    gemm_bf16(g, true, false, true);
    if (dbias != NULL) bias_backward_gpu(dbias, dout, N, OC);
}

static void matmul_backward_set_dinp_gpu(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                         const bf16* weight, int B, int T, int C, int OC) {
    matmul_backward_set_dinp_of(dinp, dweight, dbias, dout, inp, weight, NULL, B * T, C, OC);
}

// The backward of a product whose input was gelu(pre): dpre, written (GELU's derivative fused).
static void gelu_matmul_backward_set_dinp_gpu(bf16* dpre, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                              const bf16* weight, const bf16* pre, int B, int T, int C, int OC) {
    matmul_backward_set_dinp_of(dpre, dweight, dbias, dout, inp, weight, pre, B * T, C, OC);
}

#endif // GPT2_GPU_MATMUL_BF16_CUH
