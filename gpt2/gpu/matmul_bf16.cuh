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

// The epilogue of one result v = C(m, n) before rounding: bias, GELU or its gradient, the
// residual, the old C, in that order, all in float32.
template <typename OutT>
__device__ __forceinline__ void mma_store(const GemmBf16Args& g, int m, int n, float v) {
    if (m >= g.M || n >= g.N) return;
    long long i = m * g.ldc + n;
    if (g.bias != NULL) v += g.bias[n];
    if (g.epilogue == EPI_GELU) {
        bf16 pre = __float2bfloat16(v);
        g.aux[i] = pre;
        v = gelu(__bfloat162float(pre));  // of the stored value, which the backward reads
    } else if (g.epilogue == EPI_GELU_BACKWARD) {
        v *= gelu_grad(__bfloat162float(g.aux[i]));
    }
    if (g.residual != NULL) v += __bfloat162float(g.residual[i]);
    OutT* C = (OutT*)g.C;
    if (g.accumulate) v += to_float(C[i]);
    C[i] = from_float<OutT>(v);
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
    int ktiles = (g.K + MMA_BK - 1) / MMA_BK;

    // Slice kt into stage buffer s. A's tile is BM rows of 32 k, or (TA) 32 rows of BM m; B's
    // is BN rows of 32 k (TB) or 32 rows of BN n.
    auto load = [&](int kt, int s) {
        int k0 = kt * MMA_BK;
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

    // The pipeline: slices 0 .. STAGES-2 in flight before the loop; iteration kt waits for
    // slice kt, then refills the buffer that slice kt-1 used (every warp is past it: the
    // __syncthreads) with slice kt + STAGES-1. Every iteration commits one group, empty or not,
    // so that "all but the newest STAGES-2 groups" always means "up to slice kt".
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

    // Lane l holds D[g][2q, 2q+1] and D[g+8][2q, 2q+1] of each 16x8 tile (g = l/4, q = l%4).
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++) {
            int m = m0 + wm + i * 16 + lane / 4, n = n0 + wn + j * 8 + (lane % 4) * 2;
            mma_store<OutT>(g, m, n, acc[i][j][0]);
            mma_store<OutT>(g, m, n + 1, acc[i][j][1]);
            mma_store<OutT>(g, m + 8, n, acc[i][j][2]);
            mma_store<OutT>(g, m + 8, n + 1, acc[i][j][3]);
        }
}

// Runs the bf16 product. 128x128 tiles (8 warps, 64x32 each) when there are enough of them to
// give every SM two blocks; else 64x64 tiles (4 warps, 32x32 each), four times as many blocks.
template <bool TA, bool TB, typename OutT>
static void gemm_bf16_launch(const GemmBf16Args& g) {
    bool big = (size_t)ceil_div(g.M, 128) * ceil_div(g.N, 128) >= (size_t)2 * cuda_num_sms;
    int bm = big ? 128 : 64;
    dim3 grid(ceil_div(g.N, bm), ceil_div(g.M, bm));
    if (grid.y > 65535) fail("matmul of %d x %d is too large for one launch (%s:%d)", g.M, g.N, __FILE__, __LINE__);
    if (big) gemm_bf16_kernel<128, 128, 2, 4, TA, TB, OutT><<<grid, 256>>>(g);
    else gemm_bf16_kernel<64, 64, 2, 2, TA, TB, OutT><<<grid, 128>>>(g);
    launch_check(gemm_bf16_kernel);
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
