// gpt2/gpu/matmul_fp32.cuh: the float32 path's matrix products: one register-tiled SGEMM on the
// CUDA cores (gemm_fp32; its tensor-core twin: gemm_bf16), the linear layer on it
// (gpt2/cpu_layers.h: matmul_forward, matmul_backward), and the bias gradient of both paths.
// USE_CUBLAS=1 swaps cuBLAS in for the linear layers, for comparison only.

#ifndef GPT2_GPU_MATMUL_FP32_CUH
#define GPT2_GPU_MATMUL_FP32_CUH

#include "cuda_utils.cuh"
#ifdef USE_CUBLAS
#include <cublas_v2.h>
#endif

// ---------- the float32 GEMM ----------
//
// C(m,n) = alpha * sum_k A(m,k) B(k,n) [+ bias(n)] [+ C(m,n) if accumulate], A(m,k) = A[m*lda + k]
// or A[k*lda + m] when TA, B likewise with TB. Batch z (blockIdx.z) adds (z / inner) * stride[0]
// + (z % inner) * stride[1] to each pointer: attention's (sequence, head).
// Register-blocked: a thread keeps TM x TN outputs; per BK slice of k, A and B tiles are staged
// k-major, so TM*TN FMAs cost TM+TN float4 reads. A thread's columns are 4-wide groups 4*BN/TN
// apart, so a quarter warp reads 8 consecutive float4s: no bank conflicts (doc/gpu.md "The kernels").

enum { CAUSAL_NONE, CAUSAL_OUT_LOWER, CAUSAL_A_LOWER, CAUSAL_A_UPPER };
// OUT_LOWER: only n <= m is needed, tiles above the diagonal are left unwritten. A_LOWER: A(m,k)
// = 0 for k > m (k stops at the tile's last row); A_UPPER: 0 for k < m (k starts at its first).

typedef struct {
    const float* A;
    const float* B;
    float* C;
    const float* bias;  // (N) or NULL
    int M, N, K;
    long long lda, ldb, ldc;
    long long strideA[2], strideB[2], strideC[2];
    int inner;          // batch z = outer * inner + inner index
    float alpha;
    int accumulate;     // 1: C += result; 0: C = result
    int causal;
    int vecA, vecB, vecC;  // 1 when rows of A / B / C (and bias) may be read as aligned float4
    int slice_k;        // split-K: blockIdx.z is a slice of k this long; 0: all of k
} GemmFp32Args;

// p[r*ld + c .. c+3], zeros outside [0, R) x [0, Cn); one float4 when vec (aligned) allows.
__device__ __forceinline__ float4 load_tile4(const float* p, long long ld, int r, int c, int R, int Cn, int vec) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r >= R) return v;
    const float* row = p + r * ld;
    if (vec && c + 3 < Cn) return *reinterpret_cast<const float4*>(row + c);
    if (c < Cn) v.x = row[c];
    if (c + 1 < Cn) v.y = row[c + 1];
    if (c + 2 < Cn) v.z = row[c + 2];
    if (c + 3 < Cn) v.w = row[c + 3];
    return v;
}

// Stages the BM x BK tile of A at (m0, k0), k-major (As[k][m]), zeros outside the matrix.
template <int BM, int BK, int NT, bool TA>
__device__ __forceinline__ void stage_tile_a(float (*As)[BM + 4], const float* A, const GemmFp32Args& g,
                                             int m0, int k0, int k_end) {
    for (int f = threadIdx.x; f < BM * BK / 4; f += NT) {
        if (!TA) {  // A(m,k) = A[m*lda + k]: read 4 consecutive k of one row, store transposed
            int m = f / (BK / 4), kq = (f % (BK / 4)) * 4;
            float4 v = load_tile4(A, g.lda, m0 + m, k0 + kq, g.M, k_end, g.vecA);
            As[kq + 0][m] = v.x; As[kq + 1][m] = v.y; As[kq + 2][m] = v.z; As[kq + 3][m] = v.w;
        } else {    // A(m,k) = A[k*lda + m]: read 4 consecutive m, store as they are
            int k = f / (BM / 4), mq = (f % (BM / 4)) * 4;
            *reinterpret_cast<float4*>(&As[k][mq]) = load_tile4(A, g.lda, k0 + k, m0 + mq, k_end, g.M, g.vecA);
        }
    }
}

// The same for the BK x BN tile of B at (k0, n0): Bs[k][n].
template <int BN, int BK, int NT, bool TB>
__device__ __forceinline__ void stage_tile_b(float (*Bs)[BN + 4], const float* B, const GemmFp32Args& g,
                                             int n0, int k0, int k_end) {
    for (int f = threadIdx.x; f < BN * BK / 4; f += NT) {
        if (!TB) {  // B(k,n) = B[k*ldb + n]
            int k = f / (BN / 4), nq = (f % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[k][nq]) = load_tile4(B, g.ldb, k0 + k, n0 + nq, k_end, g.N, g.vecB);
        } else {    // B(k,n) = B[n*ldb + k]
            int n = f / (BK / 4), kq = (f % (BK / 4)) * 4;
            float4 v = load_tile4(B, g.ldb, n0 + n, k0 + kq, g.N, k_end, g.vecB);
            Bs[kq + 0][n] = v.x; Bs[kq + 1][n] = v.y; Bs[kq + 2][n] = v.z; Bs[kq + 3][n] = v.w;
        }
    }
}

// C[m, n..n+3] of row crow = r (+ bias, + old C): one float4 where allowed, else up to N.
__device__ __forceinline__ void store_c4(float* crow, int n, float4 r, const GemmFp32Args& g) {
    if (g.vecC && n + 3 < g.N) {
        if (g.bias != NULL) {
            float4 bv = *reinterpret_cast<const float4*>(g.bias + n);
            r.x += bv.x; r.y += bv.y; r.z += bv.z; r.w += bv.w;
        }
        if (g.accumulate) {
            float4 cv = *reinterpret_cast<const float4*>(crow + n);
            r.x += cv.x; r.y += cv.y; r.z += cv.z; r.w += cv.w;
        }
        *reinterpret_cast<float4*>(crow + n) = r;
        return;
    }
    float v[4] = {r.x, r.y, r.z, r.w};
    for (int q = 0; q < 4 && n + q < g.N; q++) {
        if (g.bias != NULL) v[q] += g.bias[n + q];
        if (g.accumulate) v[q] += crow[n + q];
        crow[n + q] = v[q];
    }
}

// __launch_bounds__(threads, 2): two blocks an SM, one's loads overlapping the other's FMAs.
template <int BM, int BN, int BK, int TM, int TN, bool TA, bool TB>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), 2) gemm_fp32_kernel(GemmFp32Args g) {
    constexpr int NT = (BM / TM) * (BN / TN);  // threads per block
    constexpr int TX = BN / TN;                // threads along n
    constexpr int GM = 4 * BM / TM, GN = 4 * BN / TN;  // spacing of a thread's 4-wide groups
    // +4 columns: the transposed stores would otherwise hit one bank for k and k+8; float4-aligned.
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN + 4];

    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (g.causal == CAUSAL_OUT_LOWER && n0 > m0 + BM - 1) return;  // the whole block leaves
    int outer = blockIdx.z / g.inner, in = blockIdx.z % g.inner;
    const float* A = g.A + outer * g.strideA[0] + in * g.strideA[1];
    const float* B = g.B + outer * g.strideB[0] + in * g.strideB[1];
    float* C = g.C + outer * g.strideC[0] + in * g.strideC[1];
    int k_begin = 0, k_end = g.K;
    if (g.slice_k > 0) {  // split-K: z is the slice (a multiple of BK long: float4 alignment holds)
        k_begin = min(g.K, (int)blockIdx.z * g.slice_k);
        k_end = min(g.K, k_begin + g.slice_k);
    }
    if (g.causal == CAUSAL_A_LOWER) k_end = min(g.K, m0 + BM);
    if (g.causal == CAUSAL_A_UPPER) k_begin = min(g.K, m0);  // m0 is a multiple of BK: float4 alignment holds

    int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        stage_tile_a<BM, BK, NT, TA>(As, A, g, m0, k0, k_end);
        stage_tile_b<BN, BK, NT, TB>(Bs, B, g, n0, k0, k_end);
        __syncthreads();  // tiles complete before anyone reads them
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM / 4; i++) {
                float4 v = *reinterpret_cast<const float4*>(&As[k][i * GM + ty * 4]);
                a[4 * i + 0] = v.x; a[4 * i + 1] = v.y; a[4 * i + 2] = v.z; a[4 * i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN / 4; j++) {
                float4 v = *reinterpret_cast<const float4*>(&Bs[k][j * GN + tx * 4]);
                b[4 * j + 0] = v.x; b[4 * j + 1] = v.y; b[4 * j + 2] = v.z; b[4 * j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // everyone done reading before the next tiles overwrite them
    }

    // Row m = m0 + (i/4)*GM + ty*4 + i%4, columns in 4-wide groups.
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int m = m0 + (i / 4) * GM + ty * 4 + i % 4;
        if (m >= g.M) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            float4 r = make_float4(g.alpha * acc[i][j], g.alpha * acc[i][j + 1], g.alpha * acc[i][j + 2],
                                   g.alpha * acc[i][j + 3]);
            store_c4(C + m * g.ldc, n0 + (j / 4) * GN + tx * 4, r, g);
        }
    }
}

#ifdef USE_CUBLAS
static cublasHandle_t cublas_handle = NULL;  // made at the first product
static void cublas_check_(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        fail("cuBLAS call %s failed with status %d (%s:%d)", call, (int)s, file, line);
    }
}
#define cublas_check(call) cublas_check_((call), #call, __FILE__, __LINE__)

__global__ void add_bias_kernel(float* out, const float* bias, int M, int N) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (size_t)M * N) out[idx] += bias[idx % N];
}
#endif

// ---------- split-K: more blocks for products with few output tiles ----------
//
// A product with few tiles of C and a long k (a weight gradient: k = B*T) leaves SMs idle; k is
// cut into slices, blocks (tile, slice) leave partial products in scratch, and a second kernel
// adds them in slice order (the same bits every run) and applies the epilogue. The plan and its
// cost: doc/gpu.md "The kernels" (Split-K). Only 64x64 tiles split.
#define SPLITK_MIN_K 256  // the shortest slice of k
#define SPLITK_MAX 16     // the most slices

// Slices for `tiles` output tiles and K along k read bk at a time, about two blocks an SM;
// *slice_k gets a slice's length (a multiple of bk). 1: no split (*slice_k = 0).
static int splitk_plan(size_t tiles, int K, int bk, int* slice_k) {
    size_t want = (size_t)2 * cuda_num_sms;
    int s = tiles >= want ? 1 : (int)((want + tiles - 1) / tiles);
    if (s > K / SPLITK_MIN_K) s = K / SPLITK_MIN_K;
    if (s > SPLITK_MAX) s = SPLITK_MAX;
    *slice_k = 0;
    if (s <= 1) return 1;
    int per = ceil_div(ceil_div(K, bk), s);  // k tiles per slice
    *slice_k = per * bk;
    return ceil_div(K, *slice_k);  // per was rounded up: there may be fewer slices than s
}

// Split-K's second kernel: C(m,n) = alpha * (the slices' (M, N) partials, in order) [+ bias]
// [+ C], as store_c4. One thread per element (coalesced).
__global__ void gemm_fp32_splitk_reduce_kernel(GemmFp32Args g, const float* partial, int slices) {
    size_t MN = (size_t)g.M * g.N, idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= MN) return;
    int m = (int)(idx / g.N), n = (int)(idx % g.N);
    float sum = 0.0f;
    for (int s = 0; s < slices; s++) sum += partial[s * MN + idx];
    float v = g.alpha * sum;
    if (g.bias != NULL) v += g.bias[n];
    float* c = g.C + m * g.ldc + n;
    if (g.accumulate) v += *c;
    *c = v;
}

// The SGEMM on `batch` products (blockIdx.z; or split-K's slices) in 128x128 (big) or 64x64 tiles.
static void gemm_fp32_launch(GemmFp32Args g, bool ta, bool tb, int batch, bool big) {
    g.vecA = aligned16(g.A) && g.lda % 4 == 0 && g.strideA[0] % 4 == 0 && g.strideA[1] % 4 == 0;
    g.vecB = aligned16(g.B) && g.ldb % 4 == 0 && g.strideB[0] % 4 == 0 && g.strideB[1] % 4 == 0;
    g.vecC = aligned16(g.C) && g.ldc % 4 == 0 && g.strideC[0] % 4 == 0 && g.strideC[1] % 4 == 0 &&
             (g.bias == NULL || aligned16(g.bias));
    int bm = big ? 128 : 64;
    dim3 grid(ceil_div(g.N, bm), ceil_div(g.M, bm), batch);
    if (grid.y > 65535 || grid.z > 65535) {
        fail("matmul of %d x %d (batch %d) is too large for one launch (%s:%d)",
             g.M, g.N, batch, __FILE__, __LINE__);
    }
    if (big) {
        if (!ta && !tb) gemm_fp32_kernel<128, 128, 16, 8, 8, false, false><<<grid, 256>>>(g);
        if (!ta && tb) gemm_fp32_kernel<128, 128, 16, 8, 8, false, true><<<grid, 256>>>(g);
        if (ta && !tb) gemm_fp32_kernel<128, 128, 16, 8, 8, true, false><<<grid, 256>>>(g);
        if (ta && tb) gemm_fp32_kernel<128, 128, 16, 8, 8, true, true><<<grid, 256>>>(g);
    } else {
        if (!ta && !tb) gemm_fp32_kernel<64, 64, 16, 4, 4, false, false><<<grid, 256>>>(g);
        if (!ta && tb) gemm_fp32_kernel<64, 64, 16, 4, 4, false, true><<<grid, 256>>>(g);
        if (ta && !tb) gemm_fp32_kernel<64, 64, 16, 4, 4, true, false><<<grid, 256>>>(g);
        if (ta && tb) gemm_fp32_kernel<64, 64, 16, 4, 4, true, true><<<grid, 256>>>(g);
    }
    launch_check(gemm_fp32_kernel);
}

// Whether gemm_fp32 runs a product in 128x128 tiles: when they give every SM two blocks.
static bool gemm_fp32_big(const GemmFp32Args& g, int batch) {
    return (size_t)ceil_div(g.M, 128) * ceil_div(g.N, 128) * batch >= (size_t)2 * cuda_num_sms;
}

// gemm_fp32's split-K slices, 1 unsplit: only single, non-causal products in 64x64 tiles split.
static int gemm_fp32_slices(const GemmFp32Args& g, int batch, int* slice_k) {
    *slice_k = 0;
    if (gemm_fp32_big(g, batch) || batch != 1 || g.causal != CAUSAL_NONE) return 1;
    return splitk_plan((size_t)ceil_div(g.M, 64) * ceil_div(g.N, 64), g.K, 16, slice_k);
}

// The SGEMM on `batch` products: 128x128 tiles, 64x64 when those give under two blocks an SM,
// and split-K when even those do and k is long.
static void gemm_fp32(GemmFp32Args g, bool ta, bool tb, int batch) {
    if (g.M == 0 || g.N == 0 || batch == 0) return;
#ifdef USE_CUBLAS
    if (batch == 1 && g.causal == CAUSAL_NONE) {
        // cuBLAS is column-major: row-major C = op(A) op(B) is C^T = op(B)^T op(A)^T there, so A
        // and B swap, flags kept; the bias is added after (add_bias_kernel).
        float beta = g.accumulate ? 1.0f : 0.0f;
        if (g.bias != NULL && g.ldc != g.N) {
            fail("gemm_fp32: bias with ldc %lld != N %d is not supported (%s:%d)", (long long)g.ldc, g.N,
                 __FILE__, __LINE__);
        }
        if (cublas_handle == NULL) cublas_check(cublasCreate(&cublas_handle));
        cublas_check(cublasSgemm(cublas_handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 g.N, g.M, g.K, &g.alpha, g.B, (int)g.ldb, g.A, (int)g.lda, &beta, g.C, (int)g.ldc));
        if (g.bias != NULL) {
            add_bias_kernel<<<ceil_div((size_t)g.M * g.N, 256), 256>>>(g.C, g.bias, g.M, g.N);
            launch_check(add_bias_kernel);
        }
        return;
    }
#endif
    int slice_k = 0, slices = gemm_fp32_slices(g, batch, &slice_k);
    if (slices == 1) {
        gemm_fp32_launch(g, ta, tb, batch, gemm_fp32_big(g, batch));
        return;
    }
    // The slices as a batch: each its own (M, N) partial, plain sums (the epilogue comes after).
    size_t MN = (size_t)g.M * g.N;
    GemmFp32Args p = g;
    p.C = scratch_floats(slices * MN);
    p.ldc = g.N;
    p.strideC[0] = (long long)MN;
    p.bias = NULL;
    p.alpha = 1.0f;
    p.accumulate = 0;
    p.slice_k = slice_k;
    gemm_fp32_launch(p, ta, tb, slices, false);
    gemm_fp32_splitk_reduce_kernel<<<ceil_div(MN, 256), 256>>>(g, p.C, slices);
    launch_check(gemm_fp32_splitk_reduce_kernel);
}

// An unbatched product's operands; the caller sets the rest.
static GemmFp32Args gemm_fp32_args(const float* A, long long lda, const float* B, long long ldb, float* C,
                                   long long ldc, int M, int N, int K) {
    GemmFp32Args g = {.A = A, .B = B, .C = C, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                      .inner = 1, .alpha = 1.0f, .causal = CAUSAL_NONE};  // the rest 0: no bias, no batch, C =
    return g;
}

// ---------- the linear layer in float32 ----------

// out(B,T,OC) = inp(B,T,C) weight(OC,C)^T + bias(OC): the SGEMM with B stored transposed.
static void matmul_forward_gpu(float* out, const float* inp, const float* weight, const float* bias,
                               int B, int T, int C, int OC) {
    GemmFp32Args g = gemm_fp32_args(inp, C, weight, C, out, OC, B * T, OC, C);
    g.bias = bias;
    gemm_fp32(g, false, true, 1);
}

// Stage 1 of dbias[o] += sum over rows of dout[row, o], as layernorm_backward_params_kernel.
template <typename floatX>
__global__ void bias_backward_kernel(float* partial, const floatX* dout, int N, int OC) {
    __shared__ float part[8][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane;
    int row_end = min(N, (int)(blockIdx.y + 1) * COLSUM_ROWS_PER_CHUNK);
    float sum = 0.0f;
    if (col < OC) {
        for (int row = blockIdx.y * COLSUM_ROWS_PER_CHUNK + warp; row < row_end; row += 8) {
            sum += to_float(dout[(size_t)row * OC + col]);
        }
    }
    part[warp][lane] = sum;
    __syncthreads();
    if (warp == 0 && col < OC) {
        float total = 0.0f;
        for (int w = 0; w < 8; w++) total += part[w][lane];
        partial[(size_t)blockIdx.y * OC + col] = total;
    }
}

// dbias(OC) += column sums of dout (N, OC), in two deterministic stages.
template <typename floatX>
static void bias_backward_gpu(float* dbias, const floatX* dout, int N, int OC) {
    int chunks = ceil_div(N, COLSUM_ROWS_PER_CHUNK);
    float* partial = scratch_floats((size_t)chunks * OC);
    bias_backward_kernel<floatX><<<dim3(ceil_div(OC, 32), chunks), 256>>>(partial, dout, N, OC);
    launch_check(bias_backward_kernel);
    sum_partials_kernel<<<ceil_div(OC, 256), 256>>>(dbias, partial, chunks, OC, OC);
    launch_check(sum_partials_kernel);
}

// dinp(B,T,C) += dout(B,T,OC) weight(OC,C); dweight(OC,C) += dout^T inp; dbias(OC) += column
// sums of dout (dbias may be NULL).
static void matmul_backward_gpu(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, int B, int T, int C, int OC) {
    int N = B * T;
    GemmFp32Args g = gemm_fp32_args(dout, OC, weight, C, dinp, C, N, C, OC);
    g.accumulate = 1;
    gemm_fp32(g, false, false, 1);
    g = gemm_fp32_args(dout, OC, inp, C, dweight, C, OC, C, N);  // A(o,row) = dout[row*OC + o]: transposed
    g.accumulate = 1;
    gemm_fp32(g, true, false, 1);
    if (dbias != NULL) bias_backward_gpu(dbias, dout, N, OC);
}

#endif // GPT2_GPU_MATMUL_FP32_CUH
