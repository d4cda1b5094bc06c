// gpt2/gpu/matmul_bf16.cuh: the bf16 path's matrix products on the tensor cores: the four PTX
// instructions they are made of, one GEMM (gemm_bf16, the twin of gpt2/gpu/matmul_fp32.cuh's
// gemm_fp32) with bf16 operands, float32 accumulation and an epilogue that fuses the bias, the
// residual add and GELU, and the linear layers of the block on it, forward and backward.

#ifndef GPT2_GPU_MATMUL_BF16_CUH
#define GPT2_GPU_MATMUL_BF16_CUH

#include "../arithmetic.h"  // gelu, gelu_grad
#include "cuda_utils.cuh"
#include "matmul_fp32.cuh"  // bias_backward_gpu: the bias gradient is the same column sum

// ---------- tensor-core instructions ----------
//
// The four PTX instructions the bf16 matrix products are built from, each wrapped in a function
// of the same name on the CPU emulator (dev/emu/cuda_emu.h), so that the kernels compile for both;
// dev/gpu/instruction_check.cu checks each against its definition in the PTX ISA, on a GPU and here.
#ifndef CUDA_EMU
// mma.sync on bf16 and cp.async exist from compute capability 8.0 on. A build for an older GPU
// (GPU_ARCH=75) compiles them as a trap: train_gpu runs only -p fp32 there (choose_bf16).
//
// The compiler does not read the PTX inside asm: what it knows of an instruction's effect is its
// operands. Those that touch memory it cannot see in them carry a "memory" clobber: ldmatrix reads
// shared memory through a 32-bit address; cp.async writes it in the background, in groups that
// commit_group closes and wait_group waits for. So the kernels' own loads and stores of shared
// memory are neither moved across these instructions nor, after a wait, served from registers
// loaded before it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define TENSOR_CORE_PTX(...) __trap()
#else
#define TENSOR_CORE_PTX(...) asm volatile(__VA_ARGS__)
#endif

// d += a b on one warp's 16x8 tile: mma.sync.m16n8k16, A (16x16) row-major and B (16x8)
// column-major in bf16, D in float32. Each lane holds a piece of each matrix, in the fragment
// layout of the PTX ISA (g = lane / 4, q = lane % 4; every register holds two bf16, low half
// first):
//   a[0] = A[g][2q, 2q+1]    a[1] = A[g+8][2q, 2q+1]   a[2] = A[g][2q+8, +9]   a[3] = A[g+8][2q+8, +9]
//   b[0] = B[2q, 2q+1][g]    b[1] = B[2q+8, 2q+9][g]
//   d[0], d[1] = D[g][2q, 2q+1]                        d[2], d[3] = D[g+8][2q, 2q+1]
// Registers in, registers out, no memory: no "memory" clobber, which would only keep the compiler
// from reordering the loads and stores around it.
__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b) {
    TENSOR_CORE_PTX("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 bf16 matrices from shared memory into registers: lanes 8i..8i+7 give the addresses of
// matrix i's eight rows (16 bytes each, 16-byte aligned), and every lane receives in r[i] the two
// elements of row lane/4 at columns 2(lane%4), +1 of matrix i. The .trans form delivers the
// transposed matrices: r[i] holds rows 2(lane%4) and 2(lane%4)+1 of column lane/4.
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* row) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    TENSOR_CORE_PTX("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* row) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    TENSOR_CORE_PTX("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// 16 bytes from global to shared memory without passing through registers: the copy runs in the
// background until a cp_async_wait. src_bytes = 0 writes 16 zero bytes instead (a tile's part
// beyond the matrix's edge). Copies issued since the last commit form one group; cp_async_wait<N>
// waits until at most N groups, the newest, are still in flight. Other threads see the data only
// after that wait and a __syncthreads.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    TENSOR_CORE_PTX("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(addr), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit(void) { TENSOR_CORE_PTX("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait(void) {
    TENSOR_CORE_PTX("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
#endif

// ---------- the bf16 GEMM on the tensor cores ----------
//
// The bf16 path's one matrix-product kernel, gemm_bf16_kernel, the twin of gemm_fp32_kernel:
// C = op(A) op(B) with bf16 operands on the tensor cores (mma.sync m16n8k16, float32
// accumulation), then an epilogue on the float32 results. Operand layouts as for the SGEMM
// (gpt2/gpu/matmul_fp32.cuh): A(m,k) = A[m*lda + k], or A[k*lda + m] when TA; B(k,n) =
// B[k*ldb + n], or B[n*ldb + k] when TB. C(m,n) = C[m*ldc + n], in float32 or bf16.
//
// A block computes a BM x BN tile of C; its warps, WM along m and WN along n, each own a
// (BM/WM) x (BN/WN) piece of it, that is MI x NI tiles of 16x8, one mma each per 16 of k. For
// every 32-wide slice of k the block stages a BM x 32 tile of A and a 32 x BN tile of B in shared
// memory, as they lie in global memory (k-contiguous rows, or m- or n-contiguous ones), and
// ldmatrix turns either into the fragment layout mma wants (.trans when the rows run along m or
// n). Three stages: while the warps multiply the tiles of slice s, cp.async brings in slices
// s+1 and s+2, so the tensor cores do not wait for memory. Shared-memory rows are swizzled (see
// mma_smem_index) so that ldmatrix's eight row reads of a matrix hit eight different banks.
//
// Edges: a 16-byte chunk (8 bf16) of a tile that lies wholly inside the matrix and is 16-byte
// aligned is copied by cp.async; one wholly outside is zero-filled by it (src_bytes 0); one that
// straddles the edge, or sits in a matrix whose rows are not 16-byte aligned, is loaded element
// by element. Zeros add nothing to the products, so any M, N and K work.
//
// The epilogue goes through shared memory (gemm_bf16_kernel's last part says why and how), and a
// product with few tiles of C and a long k is split along k (split-K, gpt2/gpu/matmul_fp32.cuh):
// its blocks leave float32 partial sums, and gemm_bf16_splitk_reduce_kernel adds them and
// applies the epilogue, every epilogue below included.

enum { EPI_NONE, EPI_GELU, EPI_GELU_BACKWARD };

typedef struct {
    const bf16* A;
    const bf16* B;
    void* C;                   // float* or bf16*, as the kernel's OutT
    int M, N, K;
    long long lda, ldb, ldc;
    const float* bias;         // (N), added; or NULL
    const bf16* residual;      // (M, ldc), added; or NULL (a residual connection)
    bf16* aux;                 // EPI_GELU: the pre-activation is stored here (M, ldc), C = gelu(it)
                               // EPI_GELU_BACKWARD: holds the forward's pre-activation, C = result * gelu'(it)
    int epilogue;
    int accumulate;            // 1: C += result
    int vecA, vecB;            // 1: rows of A / B start 16-byte aligned (cp.async may copy them)
    int vecC;                  // 1: C, bias, residual and aux may be accessed 16 bytes of C at a time
    // split-K (gemm_bf16_launch sets these): blockIdx.z's slice is slice_ktiles tiles of k (all
    // of them unsplit); when split, slice s leaves its plain sums at partial + s*M*ldp, rows of
    // ldp floats (N rounded up to 8), and the epilogue waits for gemm_bf16_splitk_reduce_kernel
    int slice_ktiles;
    float* partial;            // NULL: unsplit
    long long ldp;
} GemmBf16Args;

#define MMA_BK 32      // k per stage: one 64-byte row of a k-contiguous tile
#define MMA_STAGES 3   // 3 x (128x32 + 32x128) bf16 = 48 KiB, the static shared-memory limit

// The index in a stage tile of element e of row r, rows of `width` bf16 (32, 64 or 128). Rows
// are made of 16-byte chunks; ldmatrix reads one chunk from each of 8 consecutive rows, which
// without a swizzle would sit in the same banks (rows of 128 or 256 bytes) or in two sets of
// banks (rows of 64 bytes, two to a 128-byte line). XOR-ing the chunk number with bits of the row
// number spreads those 8 reads over the 8 chunk positions of a 128-byte line.
__device__ __forceinline__ int mma_smem_index(int r, int e, int width) {
    int chunk = e >> 3;
    int swizzled = width >= 64 ? chunk ^ (r & 7) : chunk ^ ((r >> 1) & 3);
    return r * width + (swizzled << 3) + (e & 7);
}

// Stages the rows x width tile whose row r, element e is src[(row0 + r) * ld + col0 + e], zeros
// outside rows [0, R) and columns [0, Cn). Threads share the 16-byte chunks.
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

// VEC consecutive elements of a row as one access: aligned to their size, or to 16 bytes when
// larger (8 floats are then two 16-byte accesses).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC < 16 ? sizeof(T) * VEC : 16) Pack {
    T v[VEC];
};

// x[0 .. VEC) = p[0 .. VEC) as float: one wide access when `wide`, else the first `count`
// elements one by one and zeros after them.
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

// The epilogue of the VEC results v = C(m, n .. n+VEC-1) before rounding: bias, GELU or its
// gradient, the residual, the old C, in that order, all in float32, each element as if alone.
// Each extra is read, and C written, VEC elements (16 bytes of C) at once where the piece lies
// inside the matrix and vecC allows; else element by element up to N.
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

// One stage's work for one warp: for each 16 of the stage's 32 k, the A fragments of its MI
// 16-row tiles and the B fragments of its NI 8-column tiles from shared memory (ldmatrix), then
// MI x NI mma into the accumulators. (wm, wn): the warp's piece of the block tile.
template <int BM, int BN, int MI, int NI, bool TA, bool TB>
__device__ __forceinline__ void mma_multiply_stage(float (*acc)[NI][4], const bf16* As, const bf16* Bs, int wm,
                                                   int wn, int lane) {
#pragma unroll
    for (int ks = 0; ks < MMA_BK; ks += 16) {
        // A fragments: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
        // of each 16x16 tile, in the order of a[0..3]; lane l gives a row of matrix l/8.
        uint32_t a[MI][4], b[NI][2];
#pragma unroll
        for (int i = 0; i < MI; i++) {
            int m = wm + i * 16;
            if (!TA) ldmatrix_x4(a[i], As + mma_smem_index(m + lane % 16, ks + (lane / 16) * 8, MMA_BK));
            else ldmatrix_x4_trans(a[i], As + mma_smem_index(ks + lane % 8 + (lane / 16) * 8,
                                                              m + (lane / 8) % 2 * 8, BM));
        }
        // B fragments, two 8-wide n-tiles per ldmatrix: matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
        // (n 8-15, k 0-7), (n 8-15, k 8-15) give b[j][0], b[j][1], b[j+1][0], b[j+1][1].
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

// v = the VEC staged floats at src, column c of the tile (a multiple of VEC), in 16-byte reads
// (the epilogue in gemm_bf16_kernel). Consecutive threads read consecutive pieces of a row.
template <int VEC>
__device__ __forceinline__ void read_staged(float* v, const float* src, int c);
template <>
__device__ __forceinline__ void read_staged<4>(float* v, const float* src, int c) {
    float4 x = *reinterpret_cast<const float4*>(src);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}
// 8 floats in two halves, the first read alternating every 4 pieces: the 8 threads of a quarter
// warp reading the same half, 32 bytes apart, would meet each of 16 banks twice; this way each
// read instruction's 8 addresses cover the 32 banks once.
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
    // The block's k tiles: all of them, or (split-K) its slice's, from kt_first on.
    int kt_first = blockIdx.z * g.slice_ktiles;
    int ktiles = min(g.slice_ktiles, (g.K + MMA_BK - 1) / MMA_BK - kt_first);

    // The block's k tile kt into stage buffer s. A's tile is BM rows of 32 k, or (TA) 32 rows of
    // BM m; B's is BN rows of 32 k (TB) or 32 rows of BN n.
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

    // The pipeline: k tiles 0 .. STAGES-2 in flight before the loop; iteration kt waits for
    // tile kt, then refills the buffer that tile kt-1 used (every warp is past it: the
    // __syncthreads) with tile kt + STAGES-1. Every iteration commits one group, empty or not,
    // so that "all but the newest STAGES-2 groups" always means "up to tile kt".
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

    // The epilogue, through shared memory. A lane's fragments hold pairs of elements spread over
    // 16-row tiles (g = lane/4 and g+8, columns 2q, 2q+1): written from there, C would go out
    // (and the residual, aux and old C come in) 4 or 8 bytes per lane, a few per row. So the
    // warps first leave their float32 results in shared memory, the pipeline's (free once every
    // warp is past its last tile: the __syncthreads), and then consecutive threads take
    // consecutive 16-byte pieces of a row of C (VEC elements: 8 bf16 or 4 floats): every access
    // to global memory is 16 bytes wide, and a warp's cover whole rows of the tile. The 128x128
    // tile in float32 is 64 KiB, more than the pipeline's 48 KiB, so it goes in bands of warp
    // rows: two of 64 rows; the 64x64 tile (16 KiB) in one.
    // The staged rows are padded to LDS = BN + 8 floats, so that a row starts 8 banks after the
    // one above: a half warp's 8-byte stores of its fragments (4 rows g, 4 lanes q at columns 2q)
    // then hit 32 different banks (g*8 + 2q, +1), where unpadded rows would put the 4 rows' stores
    // in the same 8 banks.
    constexpr int VEC = 16 / sizeof(OutT);
    constexpr int LDS = BN + 8;
    constexpr int WARP_ROWS = BM / WM;  // rows of a warp's piece
    constexpr int FIT = (int)(sizeof(smem) / sizeof(float)) / (WARP_ROWS * LDS);  // warp rows that fit
    constexpr int BAND = FIT < WM ? FIT : WM;  // warp rows staged at a time
    static_assert(BAND >= 1 && WM % BAND == 0, "the staged epilogue takes whole bands of warp rows");
    float* staged = reinterpret_cast<float*>(&smem[0][0]);
    int warp_row = warp / WN;
    for (int band = 0; band < WM; band += BAND) {
        __syncthreads();  // shared memory free: every warp is done with the last k tile, or with the last band
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

// Split-K's second kernel: each element's partial sums added in slice order, then the epilogue,
// as gemm_bf16_kernel applies it. One thread per piece of VEC elements (16 bytes of C); the
// partials' rows of ldp floats (N rounded up to 8) keep every piece whole and 16-byte aligned.
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

// Whether gemm_bf16 runs a product in 128x128 tiles (8 warps, 64x32 each): when there are enough
// of them to give every SM two blocks; else in 64x64 tiles (4 warps, 32x32 each), four times as
// many blocks.
static bool gemm_bf16_big(const GemmBf16Args& g) {
    return (size_t)ceil_div(g.M, 128) * ceil_div(g.N, 128) >= (size_t)2 * cuda_num_sms;
}

// gemm_bf16's split-K plan for a product (splitk_plan, gpt2/gpu/matmul_fp32.cuh): its number of
// slices, 1 when it runs unsplit; only 64x64 tiles split.
static int gemm_bf16_slices(const GemmBf16Args& g, int* slice_k) {
    *slice_k = 0;
    if (gemm_bf16_big(g)) return 1;
    return splitk_plan((size_t)ceil_div(g.M, 64) * ceil_div(g.N, 64), g.K, MMA_BK, slice_k);
}

// Runs the bf16 product in the tiles gemm_bf16_big picks, split along k as gemm_bf16_slices
// says: then the slices' blocks run as blockIdx.z, into partial sums in scratch memory, and the
// second kernel finishes.
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

// A product with the operands given; the epilogue's extras are set by the caller.
static GemmBf16Args gemm_bf16_args(const bf16* A, long long lda, const bf16* B, long long ldb, void* C,
                                   long long ldc, int M, int N, int K) {
    GemmBf16Args g = {.A = A, .B = B, .C = C, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                      .epilogue = EPI_NONE};  // the rest 0: no bias, residual or aux, C =
    return g;
}

// Dispatches on the operand layouts and the output type (out_f32: C is float*, else bf16*).
static void gemm_bf16(GemmBf16Args g, bool ta, bool tb, bool out_f32) {
    if (g.M == 0 || g.N == 0) return;
    g.vecA = aligned16(g.A) && g.lda % 8 == 0;
    g.vecB = aligned16(g.B) && g.ldb % 8 == 0;
    int vec = out_f32 ? 4 : 8;  // elements in 16 bytes of C; residual and aux rows are ldc long too
    g.vecC = aligned16(g.C) && g.ldc % vec == 0 && (g.bias == NULL || aligned16(g.bias)) &&
             (g.residual == NULL || aligned16(g.residual)) && (g.aux == NULL || aligned16(g.aux));
    if (out_f32) {
        if (!ta && !tb) gemm_bf16_launch<false, false, float>(g);
        if (!ta && tb) gemm_bf16_launch<false, true, float>(g);
        if (ta && !tb) gemm_bf16_launch<true, false, float>(g);
        if (ta && tb) gemm_bf16_launch<true, true, float>(g);
    } else {
        if (!ta && !tb) gemm_bf16_launch<false, false, bf16>(g);
        if (!ta && tb) gemm_bf16_launch<false, true, bf16>(g);
        if (ta && !tb) gemm_bf16_launch<true, false, bf16>(g);
        if (ta && tb) gemm_bf16_launch<true, true, bf16>(g);
    }
}

// ---------- the linear layer in bf16 ----------
// The bf16 path's products, as the block calls them (gpt2/model.h: LayersOf), with what their
// epilogues fuse: the bias always; the residual add; the GELU after the MLP's first product, and
// in the backward its derivative.

// out (B,T,OC) = inp (B,T,C) weight (OC,C)^T + bias, bf16 in and out.
static void matmul_forward_bf16(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int T,
                                int C, int OC) {
    GemmBf16Args g = gemm_bf16_args(inp, C, weight, C, out, OC, B * T, OC, C);
    g.bias = bias;
    gemm_bf16(g, false, true, false);
}

// out = residual + inp weight^T + bias: the product that ends each half of a block, with the
// residual connection added in its epilogue.
static void matmul_residual_forward_bf16(bf16* out, const bf16* inp, const bf16* weight, const float* bias,
                                         const bf16* residual, int B, int T, int C, int OC) {
    GemmBf16Args g = gemm_bf16_args(inp, C, weight, C, out, OC, B * T, OC, C);
    g.bias = bias;
    g.residual = residual;
    gemm_bf16(g, false, true, false);
}

// out = gelu(pre), pre (B,T,OC) = inp weight^T + bias: the MLP's first layer with its
// activation, both outputs kept (the backward needs pre).
static void matmul_gelu_forward_bf16(bf16* out, bf16* pre, const bf16* inp, const bf16* weight, const float* bias,
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
static void matmul_backward_bf16_(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
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

static void matmul_backward_bf16(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                 const bf16* weight, int B, int T, int C, int OC) {
    matmul_backward_bf16_(dinp, dweight, dbias, dout, inp, weight, NULL, B * T, C, OC);
}

// The backward of a product whose input was gelu(pre): the gradient of pre, with GELU's
// derivative in the epilogue of the dinp product.
static void gelu_matmul_backward_bf16(bf16* dpre, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                      const bf16* weight, const bf16* pre, int B, int T, int C, int OC) {
    matmul_backward_bf16_(dpre, dweight, dbias, dout, inp, weight, pre, B * T, C, OC);
}

#endif // GPT2_GPU_MATMUL_BF16_CUH
