// train_gpu.cu: GPT-2 training on one NVIDIA GPU, every operation a kernel written here in float32.
//
//   make train_gpu && ./train_gpu        GPT-2 124M from scratch on Tiny Shakespeare, T=1024
//   GPU_DEBUG=1 ./train_gpu ...          wait after every kernel: a fault names its kernel
//   make train_gpu_emu                   the same program on the CPU emulator: build/emu/train_gpu
//
// The GPU twin of train_cpu.c. Each CPU layer `x(...)` of gpt2/cpu_layers.h has a GPU twin
// `x_gpu(...)` with the same arguments on device pointers, which launches kernels `..._kernel`;
// the model's forward and backward pass (gpt2/model.h) and the training loop (gpt2/run.h) are the
// ones train_cpu.c runs, handed the GPU's layers and training operations. Everything that is not
// arithmetic on the GPU (files, the command line, the data) happens on the host, in the shared
// headers. The kernels:
//   - matmul: one register-tiled shared-memory SGEMM (128x128 tiles, 8x8 outputs per thread,
//     float4 loads, any M, N, K) serves the linear layers and the attention products;
//   - attention: Q K^T and att V as batched SGEMMs over (b, h), causal tiles skipped, and a
//     warp-per-row causal softmax in between (no flash attention: T x T scores are stored);
//   - layernorm, GELU, residual, encoder: warp-per-row or element-wise kernels;
//   - a fused classifier: softmax, cross-entropy and its gradient in one kernel per row;
//   - gradient global norm (deterministic two-stage reduction), clipping and AdamW.
// Every reduction runs in a fixed order, so two runs of the same step give the same bits.
// Build with USE_CUBLAS=1 to swap cuBLAS in for the linear layers, for comparison only.
// doc/gpu.md explains the kernels; dev/gpu_check.cu checks each one against the CPU.

#include "gpt2/model.h"
#include "gpt2/cpu_layers.h"
#include "gpt2/run.h"

#include <cuda_runtime.h>
#ifdef USE_CUBLAS
#include <cublas_v2.h>
#endif

// ---------- CUDA utilities ----------

// Every CUDA call goes through cuda_check, which names the failed call, file and line and stops.
// Kernels run asynchronously: a launch returns at once, and a kernel that faults (an illegal
// address, say) is reported by whichever later call waits for the GPU, which is then the one
// named. Each launch is followed by launch_check(kernel), which reports a launch the GPU refused
// (a bad configuration) at once and, with GPU_DEBUG=1 in the environment, also waits for the
// kernel to finish, so that a fault is reported with the kernel's name. That costs speed: a
// switch for finding a fault, not for training.
static int gpu_debug = 0;  // GPU_DEBUG=1, read by gpu_init

// The errors a kernel's fault leaves behind (the GPU context is lost; every later call fails).
static int is_kernel_fault(cudaError_t err) {
    return err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure;
}

static void cuda_check_(cudaError_t err, const char* call, const char* file, int line) {
    if (err == cudaSuccess) return;
    fail("CUDA call %s failed: %s (%s:%d)%s", call, cudaGetErrorString(err), file, line,
         is_kernel_fault(err) && !gpu_debug ? "; an earlier kernel faulted: run with GPU_DEBUG=1 to name it" : "");
}
#define cuda_check(call) cuda_check_((call), #call, __FILE__, __LINE__)

static void launch_check_(const char* kernel, const char* file, int line) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess && gpu_debug) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) fail("kernel %s (%s:%d) failed: %s", kernel, file, line, cudaGetErrorString(err));
}
#define launch_check(kernel) launch_check_(#kernel, __FILE__, __LINE__)

#ifndef GPU_ARCHS
#define GPU_ARCHS "unknown"  // the Makefile says which (GPU_ARCH)
#endif

static int ceil_div(size_t n, int d) { return (int)((n + d - 1) / d); }

static int gpu_num_sms = 132;  // set from the device in gpu_init; picks the matmul tile size

// Sums over the 32 lanes of a warp; every lane gets the result (butterfly, fixed order).
template <typename F>
__device__ __forceinline__ F warp_sum(F v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// The two warp reductions, as types, so that block_reduce can take either.
struct WarpSum {
    template <typename F>
    __device__ F operator()(F v) const { return warp_sum(v); }
};
struct WarpMax {
    __device__ float operator()(float v) const { return warp_max(v); }
};

// Reduces v over the whole block (blockDim.x a multiple of 32): each warp reduces its 32 values,
// then every warp reduces the warps' results, so every thread gets the block's result. identity
// fills the lanes past the last warp. The first __syncthreads keeps a second call from
// overwriting `partial` while a slow warp still reads the first call's values.
template <typename F, typename WarpOp>
__device__ F block_reduce(F v, F identity) {
    __shared__ F partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = WarpOp()(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return WarpOp()(lane < nwarps ? partial[lane] : identity);
}
template <typename F>
__device__ F block_sum(F v) { return block_reduce<F, WarpSum>(v, (F)0); }
__device__ float block_max(float v) { return block_reduce<float, WarpMax>(v, -INFINITY); }

// Scratch memory for the partial sums of two-stage reductions, grown on demand. The kernels of
// one stream run in order, so one buffer serves every reduction.
static float* gpu_scratch = NULL;
static size_t gpu_scratch_floats = 0;
static float* scratch_floats(size_t n) {
    if (n > gpu_scratch_floats) {
        if (gpu_scratch != NULL) cuda_check(cudaFree(gpu_scratch));  // synchronises: no kernel still uses it
        cuda_check(cudaMalloc((void**)&gpu_scratch, n * sizeof(float)));
        gpu_scratch_floats = n;
    }
    return gpu_scratch;
}

// Stage 2 of the deterministic column sums: out[i] += sum over chunks c (in order) of
// partial[c * stride + i], for i < n.
__global__ void sum_partials_kernel(float* out, const float* partial, int chunks, int stride, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float sum = 0.0f;
    for (int c = 0; c < chunks; c++) sum += partial[(size_t)c * stride + i];
    out[i] += sum;
}

// Column sums over many rows are split into chunks of rows (one block per 32 columns and chunk,
// stage 1) whose partial sums a second kernel adds in order (stage 2): enough blocks to fill the
// GPU, and the same result on every run, which atomicAdd would not give.
#define COLSUM_ROWS_PER_CHUNK 128

// ---------- encoder ----------

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], one thread per output element (coalesced along C).
__global__ void encoder_forward_kernel(float* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int t = (int)(bt % T);
    out[idx] = wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c];
}

static void encoder_forward_gpu(float* out, const int* inp, const float* wte, const float* wpe,
                                int B, int T, int C) {
    encoder_forward_kernel<<<ceil_div((size_t)B * T * C, 256), 256>>>(out, inp, wte, wpe, B, T, C);
    launch_check(encoder_forward_kernel);
}

// dwpe[t,c] += sum over b of dout[b,t,c]: one thread per (t, c), b in order.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += dout[(size_t)b * T * C + idx];
    dwpe[idx] += sum;
}

// dwte[tok,:] += sum of dout[p,:] over the positions p holding tok. One block per position p; only
// the block of a token's first position writes, summing all its positions in order, so that no
// two blocks write the same row and the sum is deterministic (atomicAdd per position would not be).
__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int* inp, int BT, int C) {
    int p = blockIdx.x;
    int tok = inp[p];
    int seen_before = 0;
    for (int q = threadIdx.x; q < p; q += blockDim.x) seen_before |= inp[q] == tok;
    if (__syncthreads_or(seen_before)) return;  // the whole block leaves together
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int q = p; q < BT; q++) {
            if (inp[q] == tok) sum += dout[(size_t)q * C + c];  // inp[q]: one address, broadcast
        }
        dwte[(size_t)tok * C + c] += sum;
    }
}

static void encoder_backward_gpu(float* dwte, float* dwpe, const float* dout, const int* inp,
                                 int B, int T, int C) {
    encoder_backward_wpe_kernel<<<ceil_div((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    launch_check(encoder_backward_wpe_kernel);
    encoder_backward_wte_kernel<<<B * T, 256>>>(dwte, dout, inp, B * T, C);
    launch_check(encoder_backward_wte_kernel);
}

// ---------- layernorm ----------

// One warp per row of C: two passes over the row (mean, then variance of x - mean, as the CPU
// does, which is more accurate than E[x^2] - E[x]^2), then the normalised output.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;  // whole warps leave: the shuffles below still see all 32 lanes
    const float* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - m;
        var += d * d;
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LAYERNORM_EPS);
    float* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

static void layernorm_forward_gpu(float* out, float* mean, float* rstd, const float* inp,
                                  const float* weight, const float* bias, int B, int T, int C) {
    int N = B * T;
    layernorm_forward_kernel<<<ceil_div(N, 8), 256>>>(out, mean, rstd, inp, weight, bias, N, C);
    launch_check(layernorm_forward_kernel);
}

// dinp, one warp per row: with n = (x - mean) * rstd and g = weight * dout,
// dinp += (g - mean(g) - n * mean(g * n)) * rstd.
__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp,
                                          const float* weight, const float* mean, const float* rstd,
                                          int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    const float* dy = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gn_sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float g = weight[i] * dy[i];
        g_sum += g;
        gn_sum += g * (x[i] - m) * s;
    }
    float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
    float* dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float n = (x[i] - m) * s;
        dx[i] += (weight[i] * dy[i] - g_mean - n * gn_mean) * s;
    }
}

// Stage 1 of dweight += sum over rows of dout * n and dbias += sum over rows of dout. Block =
// 32 columns x 8 warps; warp w takes rows w, w+8, ... of its chunk, reading 32 consecutive
// floats of a row per step (coalesced). Writes partial[chunk][0][col] and partial[chunk][1][col].
__global__ void layernorm_backward_params_kernel(float* partial, const float* dout, const float* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
    __shared__ float dw_part[8][32], db_part[8][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane;
    int row_end = min(N, (int)(blockIdx.y + 1) * COLSUM_ROWS_PER_CHUNK);
    float dw = 0.0f, db = 0.0f;
    if (col < C) {
        for (int row = blockIdx.y * COLSUM_ROWS_PER_CHUNK + warp; row < row_end; row += 8) {
            float dy = dout[(size_t)row * C + col];
            dw += dy * (inp[(size_t)row * C + col] - mean[row]) * rstd[row];
            db += dy;
        }
    }
    dw_part[warp][lane] = dw;
    db_part[warp][lane] = db;
    __syncthreads();
    if (warp == 0 && col < C) {
        float dw_sum = 0.0f, db_sum = 0.0f;
        for (int w = 0; w < 8; w++) {
            dw_sum += dw_part[w][lane];
            db_sum += db_part[w][lane];
        }
        partial[(size_t)blockIdx.y * 2 * C + col] = dw_sum;
        partial[(size_t)blockIdx.y * 2 * C + C + col] = db_sum;
    }
}

static void layernorm_backward_gpu(float* dinp, float* dweight, float* dbias, const float* dout,
                                   const float* inp, const float* weight, const float* mean,
                                   const float* rstd, int B, int T, int C) {
    int N = B * T;
    layernorm_backward_kernel<<<ceil_div(N, 8), 256>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    launch_check(layernorm_backward_kernel);
    int chunks = ceil_div(N, COLSUM_ROWS_PER_CHUNK);
    float* partial = scratch_floats((size_t)chunks * 2 * C);
    dim3 grid(ceil_div(C, 32), chunks);
    layernorm_backward_params_kernel<<<grid, 256>>>(partial, dout, inp, mean, rstd, N, C);
    launch_check(layernorm_backward_params_kernel);
    sum_partials_kernel<<<ceil_div(C, 256), 256>>>(dweight, partial, chunks, 2 * C, C);
    launch_check(sum_partials_kernel);
    sum_partials_kernel<<<ceil_div(C, 256), 256>>>(dbias, partial + C, chunks, 2 * C, C);
    launch_check(sum_partials_kernel);
}

// ---------- matmul ----------
//
// One SGEMM kernel for every product in the model:
//   C(m,n) = alpha * sum_k A(m,k) B(k,n)  [+ bias(n)]  [+ C(m,n) if accumulate]
// with A(m,k) = A[m*lda + k], or A[k*lda + m] when TA (A stored transposed), and likewise
// B(k,n) = B[k*ldb + n], or B[n*ldb + k] when TB. A batch runs over blockIdx.z: batch z uses
// A + (z / inner) * strideA[0] + (z % inner) * strideA[1], the same for B and C; the attention
// uses that to address head h of sequence b inside the (B, T, 3C) qkv tensor.
//
// Tiling (the classic register-blocked SGEMM): a block computes a BM x BN tile of C with
// (BM/TM) x (BN/TN) threads, each TM x TN outputs held in registers. For every BK-wide slice of
// k, the block stages a BM x BK tile of A and a BK x BN tile of B in shared memory, both stored
// k-major, so each thread reads its TM values of A and TN values of B for one k as float4s and
// does TM*TN FMAs with them: 2*TM*TN flops per (TM+TN) shared-memory reads instead of 2 per 2.
// A thread's outputs are 4-wide groups spaced 4*BN/TN apart (not one contiguous run of TN),
// so that the 8 threads of a quarter warp read 8 consecutive float4s: no bank conflicts.

enum { CAUSAL_NONE, CAUSAL_OUT_LOWER, CAUSAL_A_LOWER, CAUSAL_A_UPPER };
// CAUSAL_OUT_LOWER: only C(m,n) with n <= m is needed: tiles entirely above the diagonal are
//   skipped (left unwritten). CAUSAL_A_LOWER: A(m,k) = 0 for k > m, so k stops at the tile's
//   last row. CAUSAL_A_UPPER: A(m,k) = 0 for k < m, so k starts at the tile's first row.

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
} GemmArgs;

// Loads p[r*ld + c .. c+3] with zeros outside rows [0, R) and columns [0, Cn). The float4 path
// needs ld and p 16-byte aligned (vec) and c a multiple of 4 (always true here).
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

// Stages the BM x BK tile of A at (m0, k0) in shared memory, k-major (As[k][m]), zeros outside
// rows [0, M) and columns [k0, k_end). The NT threads of the block share the float4 loads.
template <int BM, int BK, int NT, bool TA>
__device__ __forceinline__ void stage_tile_a(float (*As)[BM + 4], const float* A, const GemmArgs& g,
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
__device__ __forceinline__ void stage_tile_b(float (*Bs)[BN + 4], const float* B, const GemmArgs& g,
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

// Writes r = alpha * (four accumulators) to C[m, n..n+3] of the row crow, plus bias and the old
// C when asked: one float4 where the row allows it, else column by column up to N.
__device__ __forceinline__ void store_c4(float* crow, int n, float4 r, const GemmArgs& g) {
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

// __launch_bounds__(threads, 2): at most 128 registers a thread, so that two blocks share an SM
// and one block's loads overlap the other's FMAs.
template <int BM, int BN, int BK, int TM, int TN, bool TA, bool TB>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), 2) matmul_kernel(GemmArgs g) {
    constexpr int NT = (BM / TM) * (BN / TN);  // threads per block
    constexpr int TX = BN / TN;                // threads along n
    constexpr int GM = 4 * BM / TM, GN = 4 * BN / TN;  // spacing of a thread's 4-wide groups
    // +4 columns of padding: the transposed stores (As[k][m] for k-contiguous A) would otherwise
    // hit the same bank for k and k+8; a multiple of 4 keeps float4 reads aligned.
    __shared__ __align__(16) float As[BK][BM + 4];
    __shared__ __align__(16) float Bs[BK][BN + 4];

    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    if (g.causal == CAUSAL_OUT_LOWER && n0 > m0 + BM - 1) return;  // the whole block leaves
    int outer = blockIdx.z / g.inner, in = blockIdx.z % g.inner;
    const float* A = g.A + outer * g.strideA[0] + in * g.strideA[1];
    const float* B = g.B + outer * g.strideB[0] + in * g.strideB[1];
    float* C = g.C + outer * g.strideC[0] + in * g.strideC[1];
    int k_begin = 0, k_end = g.K;
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

    // Write back: row m = m0 + (i/4)*GM + ty*4 + i%4, columns in 4-wide groups.
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

static int aligned16(const void* p) { return ((uintptr_t)p % 16) == 0; }

#ifdef USE_CUBLAS
static cublasHandle_t cublas_handle;
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

// Runs the SGEMM on `batch` products. Big problems use 128x128 tiles (8x8 per thread); when
// that would give fewer than two blocks per SM (e.g. dweight of a C x C projection: 36 tiles
// for 132 SMs), 64x64 tiles (4x4 per thread) keep the GPU busy instead.
static void gemm_gpu(GemmArgs g, bool ta, bool tb, int batch) {
    if (g.M == 0 || g.N == 0 || batch == 0) return;
    g.vecA = aligned16(g.A) && g.lda % 4 == 0 && g.strideA[0] % 4 == 0 && g.strideA[1] % 4 == 0;
    g.vecB = aligned16(g.B) && g.ldb % 4 == 0 && g.strideB[0] % 4 == 0 && g.strideB[1] % 4 == 0;
    g.vecC = aligned16(g.C) && g.ldc % 4 == 0 && g.strideC[0] % 4 == 0 && g.strideC[1] % 4 == 0 &&
             (g.bias == NULL || aligned16(g.bias));
#ifdef USE_CUBLAS
    if (batch == 1 && g.causal == CAUSAL_NONE) {
        // cuBLAS is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
        // and a row-major matrix read as column-major is its transpose: swap A and B, keep flags.
        float beta = g.accumulate ? 1.0f : 0.0f;
        if (g.bias != NULL && g.accumulate) {
            fail("gemm_gpu: bias with accumulate is not supported (%s:%d)", __FILE__, __LINE__);
        }
        cublas_check(cublasSgemm(cublas_handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 g.N, g.M, g.K, &g.alpha, g.B, (int)g.ldb, g.A, (int)g.lda, &beta, g.C, (int)g.ldc));
        if (g.bias != NULL) {
            add_bias_kernel<<<ceil_div((size_t)g.M * g.N, 256), 256>>>(g.C, g.bias, g.M, g.N);
            launch_check(add_bias_kernel);
        }
        return;
    }
#endif
    bool big = (size_t)ceil_div(g.M, 128) * ceil_div(g.N, 128) * batch >= (size_t)2 * gpu_num_sms;
    int bm = big ? 128 : 64;
    dim3 grid(ceil_div(g.N, bm), ceil_div(g.M, bm), batch);
    if (grid.y > 65535 || grid.z > 65535) {
        fail("matmul of %d x %d (batch %d) is too large for one launch (%s:%d)",
             g.M, g.N, batch, __FILE__, __LINE__);
    }
    if (big) {
        if (!ta && !tb) matmul_kernel<128, 128, 16, 8, 8, false, false><<<grid, 256>>>(g);
        if (!ta && tb) matmul_kernel<128, 128, 16, 8, 8, false, true><<<grid, 256>>>(g);
        if (ta && !tb) matmul_kernel<128, 128, 16, 8, 8, true, false><<<grid, 256>>>(g);
        if (ta && tb) matmul_kernel<128, 128, 16, 8, 8, true, true><<<grid, 256>>>(g);
    } else {
        if (!ta && !tb) matmul_kernel<64, 64, 16, 4, 4, false, false><<<grid, 256>>>(g);
        if (!ta && tb) matmul_kernel<64, 64, 16, 4, 4, false, true><<<grid, 256>>>(g);
        if (ta && !tb) matmul_kernel<64, 64, 16, 4, 4, true, false><<<grid, 256>>>(g);
        if (ta && tb) matmul_kernel<64, 64, 16, 4, 4, true, true><<<grid, 256>>>(g);
    }
    launch_check(matmul_kernel);
}

// A plain (unbatched) product with the given operands; the caller sets the rest.
static GemmArgs gemm_args(const float* A, long long lda, const float* B, long long ldb, float* C,
                          long long ldc, int M, int N, int K) {
    GemmArgs g;
    memset(&g, 0, sizeof(g));
    g.A = A; g.B = B; g.C = C;
    g.lda = lda; g.ldb = ldb; g.ldc = ldc;
    g.M = M; g.N = N; g.K = K;
    g.inner = 1;
    g.alpha = 1.0f;
    g.causal = CAUSAL_NONE;
    return g;
}

// out(B,T,OC) = inp(B,T,C) weight(OC,C)^T + bias(OC): the SGEMM with B stored transposed.
static void matmul_forward_gpu(float* out, const float* inp, const float* weight, const float* bias,
                               int B, int T, int C, int OC) {
    GemmArgs g = gemm_args(inp, C, weight, C, out, OC, B * T, OC, C);
    g.bias = bias;
    gemm_gpu(g, false, true, 1);
}

// dbias[o] += sum over rows of dout[row, o], stage 1: as layernorm_backward_params_kernel.
__global__ void bias_backward_kernel(float* partial, const float* dout, int N, int OC) {
    __shared__ float part[8][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane;
    int row_end = min(N, (int)(blockIdx.y + 1) * COLSUM_ROWS_PER_CHUNK);
    float sum = 0.0f;
    if (col < OC) {
        for (int row = blockIdx.y * COLSUM_ROWS_PER_CHUNK + warp; row < row_end; row += 8) {
            sum += dout[(size_t)row * OC + col];
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

// dinp(B,T,C) += dout(B,T,OC) weight(OC,C); dweight(OC,C) += dout^T inp; dbias(OC) += column
// sums of dout (dbias may be NULL).
static void matmul_backward_gpu(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, int B, int T, int C, int OC) {
    int N = B * T;
    GemmArgs g = gemm_args(dout, OC, weight, C, dinp, C, N, C, OC);
    g.accumulate = 1;
    gemm_gpu(g, false, false, 1);
    g = gemm_args(dout, OC, inp, C, dweight, C, OC, C, N);  // A(o,row) = dout[row*OC + o]: transposed
    g.accumulate = 1;
    gemm_gpu(g, true, false, 1);
    if (dbias != NULL) {
        int chunks = ceil_div(N, COLSUM_ROWS_PER_CHUNK);
        float* partial = scratch_floats((size_t)chunks * OC);
        bias_backward_kernel<<<dim3(ceil_div(OC, 32), chunks), 256>>>(partial, dout, N, OC);
        launch_check(bias_backward_kernel);
        sum_partials_kernel<<<ceil_div(OC, 256), 256>>>(dbias, partial, chunks, OC, OC);
        launch_check(sum_partials_kernel);
    }
}

// ---------- attention ----------
//
// qkv (B,T,3C) holds for each position the query, key and value of all NH heads; head h of
// sequence b is the (T, hs) slice starting at b*T*3C + h*hs (+C for keys, +2C for values) with
// row stride 3C. Each product below is one batched SGEMM over z = b*NH + h.

// att[b,h,t,:] = causal softmax of preatt[b,h,t,0..t]; zeros after t (the att V product reads
// whole rows of the diagonal tiles). One warp per row; preatt is already scaled by 1/sqrt(hs).
__global__ void attention_softmax_kernel(float* att, const float* preatt, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    const float* x = preatt + (size_t)row * T;  // only x[0..t] was computed
    float* y = att + (size_t)row * T;
    float maxval = -INFINITY;
    for (int i = lane; i <= t; i += 32) maxval = fmaxf(maxval, x[i]);
    maxval = warp_max(maxval);
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) sum += expf(x[i] - maxval);
    sum = warp_sum(sum);
    float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (int i = lane; i < T; i += 32) y[i] = i <= t ? expf(x[i] - maxval) * inv : 0.0f;
}

// An operand of attention's batched products: head h of sequence b is the matrix at
// p + b * batch_stride + h * head_stride, with row stride ld.
typedef struct {
    const float* p;
    long long ld, batch_stride, head_stride;
} HeadMatrix;

// The (T, hs) slice of head h in a (B, T, width) tensor: Q, K or V in qkv, or a head of out.
static HeadMatrix head_slice(const float* p, int T, int width, int hs) {
    HeadMatrix m = {p, width, (long long)T * width, hs};
    return m;
}

// The (T, T) matrix of head h in a (B, NH, T, T) tensor: preatt, att and their gradients.
static HeadMatrix head_square(const float* p, int T, int NH) {
    HeadMatrix m = {p, T, (long long)NH * T * T, (long long)T * T};
    return m;
}

// For every (b, h): C = alpha op(A) op(B) [+ C if accumulate], op transposing when ta / tb; one
// batched SGEMM over z = b*NH + h. causal says which part of which matrix is zero (see gemm_gpu).
static void attention_gemm(HeadMatrix a, bool ta, HeadMatrix b, bool tb, HeadMatrix c, int M, int N,
                           int K, int B, int NH, float alpha, int accumulate, int causal) {
    GemmArgs g = gemm_args(a.p, a.ld, b.p, b.ld, (float*)c.p, c.ld, M, N, K);
    g.strideA[0] = a.batch_stride;
    g.strideA[1] = a.head_stride;
    g.strideB[0] = b.batch_stride;
    g.strideB[1] = b.head_stride;
    g.strideC[0] = c.batch_stride;
    g.strideC[1] = c.head_stride;
    g.inner = NH;
    g.alpha = alpha;
    g.accumulate = accumulate;
    g.causal = causal;
    gemm_gpu(g, ta, tb, B * NH);
}

// out (B,T,C), preatt and att (B,NH,T,T), inp = qkv (B,T,3C). preatt = Q K^T / sqrt(hs) (only
// n <= m computed), att = softmax, out = att V. preatt's upper triangle is left unwritten.
static void attention_forward_gpu(float* out, float* preatt, float* att, const float* inp,
                                  int B, int T, int C, int NH) {
    int hs = C / NH;
    HeadMatrix q = head_slice(inp, T, 3 * C, hs), k = head_slice(inp + C, T, 3 * C, hs);
    HeadMatrix v = head_slice(inp + 2 * C, T, 3 * C, hs);
    // preatt = scale * Q (T x hs) K^T (hs x T): K read transposed; tiles above the diagonal skipped
    attention_gemm(q, false, k, true, head_square(preatt, T, NH), T, T, hs, B, NH, 1.0f / sqrtf((float)hs),
                   0, CAUSAL_OUT_LOWER);
    attention_softmax_kernel<<<ceil_div((size_t)B * NH * T, 8), 256>>>(att, preatt, B * NH * T, T);
    launch_check(attention_softmax_kernel);
    // out[b, :, h*hs:(h+1)*hs] (T x hs) = att (T x T) V (T x hs); att is lower triangular
    attention_gemm(head_square(att, T, NH), false, v, false, head_slice(out, T, C, hs), T, hs, T, B, NH,
                   1.0f, 0, CAUSAL_A_LOWER);
}

// dpreatt = att * (datt - sum(att * datt)) on the causal part of each row, zeros after it.
__global__ void attention_softmax_backward_kernel(float* dpreatt, const float* datt, const float* att,
                                                  int rows, int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    const float* a = att + (size_t)row * T;
    const float* da = datt + (size_t)row * T;  // only da[0..t] was computed
    float dot = 0.0f;
    for (int i = lane; i <= t; i += 32) dot += a[i] * da[i];
    dot = warp_sum(dot);
    float* dp = dpreatt + (size_t)row * T;
    for (int i = lane; i < T; i += 32) dp[i] = i <= t ? a[i] * (da[i] - dot) : 0.0f;
}

// dinp = dqkv (B,T,3C) accumulates (+=) the gradients of Q, K and V. dpreatt and datt
// (B,NH,T,T) are scratch, overwritten (unlike the CPU, which accumulates into them).
static void attention_backward_gpu(float* dinp, float* dpreatt, float* datt, const float* dout,
                                   const float* inp, const float* att, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    HeadMatrix q = head_slice(inp, T, 3 * C, hs), k = head_slice(inp + C, T, 3 * C, hs);
    HeadMatrix v = head_slice(inp + 2 * C, T, 3 * C, hs), d = head_slice(dout, T, C, hs);
    HeadMatrix dq = head_slice(dinp, T, 3 * C, hs), dk = head_slice(dinp + C, T, 3 * C, hs);
    HeadMatrix dv = head_slice(dinp + 2 * C, T, 3 * C, hs);
    HeadMatrix a = head_square(att, T, NH), da = head_square(datt, T, NH), dp = head_square(dpreatt, T, NH);
    // datt = dout_h (T x hs) V^T: only n <= m is needed
    attention_gemm(d, false, v, true, da, T, T, hs, B, NH, 1.0f, 0, CAUSAL_OUT_LOWER);
    // dV += att^T dout_h: A(m=t2, k=t1) = att[t1][t2], zero for t1 < t2
    attention_gemm(a, true, d, false, dv, T, hs, T, B, NH, 1.0f, 1, CAUSAL_A_UPPER);
    attention_softmax_backward_kernel<<<ceil_div((size_t)B * NH * T, 8), 256>>>(dpreatt, datt, att, B * NH * T, T);
    launch_check(attention_softmax_backward_kernel);
    // dQ += scale * dpreatt K: dpreatt is lower triangular
    attention_gemm(dp, false, k, false, dq, T, hs, T, B, NH, scale, 1, CAUSAL_A_LOWER);
    // dK += scale * dpreatt^T Q: A(m=t2, k=t1) = dpreatt[t1][t2], zero for t1 < t2
    attention_gemm(dp, true, q, false, dk, T, hs, T, B, NH, scale, 1, CAUSAL_A_UPPER);
}

// ---------- GELU and residual ----------

// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
__global__ void gelu_forward_kernel(float* out, const float* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
}

static void gelu_forward_gpu(float* out, const float* inp, int N) {
    gelu_forward_kernel<<<ceil_div(N, 256), 256>>>(out, inp, N);
    launch_check(gelu_forward_kernel);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = inp[i];
    float u = GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;  // d tanh(u) / du
    float du = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
}

static void gelu_backward_gpu(float* dinp, const float* inp, const float* dout, int N) {
    gelu_backward_kernel<<<ceil_div(N, 256), 256>>>(dinp, inp, dout, N);
    launch_check(gelu_backward_kernel);
}

__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = inp1[i] + inp2[i];
}

static void residual_forward_gpu(float* out, const float* inp1, const float* inp2, int N) {
    residual_forward_kernel<<<ceil_div(N, 256), 256>>>(out, inp1, inp2, N);
    launch_check(residual_forward_kernel);
}

__global__ void residual_backward_kernel(float* dinp1, float* dinp2, const float* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
}

static void residual_backward_gpu(float* dinp1, float* dinp2, const float* dout, int N) {
    residual_backward_kernel<<<ceil_div(N, 256), 256>>>(dinp1, dinp2, dout, N);
    launch_check(residual_backward_kernel);
}

// ---------- fused classifier ----------

// One block per position (b,t), over the V real columns of its Vp logits: the max, the sum of
// exp (for a softmax that cannot overflow), the loss -log p[target] = log(sum) - (x[target] -
// max), and the gradient of the mean loss, dlogits = (p - 1[target]) / (B*T). That replaces the
// CPU's softmax_forward, crossentropy_forward and crossentropy_softmax_backward without ever
// storing the (B,T,Vp) probabilities. dlogits is written (not accumulated), padding columns 0.
__global__ void fused_classifier_kernel(float* dlogits, float* losses, const float* logits,
                                        const int* targets, float dloss, int V, int Vp) {
    size_t row = blockIdx.x;
    const float* x = logits + row * Vp;
    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxval = fmaxf(maxval, x[i]);
    maxval = block_max(maxval);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(x[i] - maxval);
    sum = block_sum(sum);
    int target = targets[row];
    if (threadIdx.x == 0) losses[row] = logf(sum) - (x[target] - maxval);
    float inv = 1.0f / sum;
    float* dx = dlogits + row * Vp;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        dx[i] = i < V ? (expf(x[i] - maxval) * inv - (i == target ? 1.0f : 0.0f)) * dloss : 0.0f;
    }
}

static void fused_classifier_gpu(float* dlogits, float* losses, const float* logits, const int* targets,
                                 int B, int T, int V, int Vp) {
    fused_classifier_kernel<<<B * T, 1024>>>(dlogits, losses, logits, targets, 1.0f / (B * T), V, Vp);
    launch_check(fused_classifier_kernel);
}

// ---------- optimizer ----------

#define NORM_BLOCKS 512  // fixed, not per device: the summation order, hence the bits, never change

// Stage 1: block b sums x[i]^2 over its grid-strided elements into partial[b]. In double, as
// the CPU does: 124M squares summed in float would lose digits.
__global__ void norm_squared_kernel(double* partial, const float* x, size_t n) {
    double sum = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        sum += (double)x[i] * x[i];
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// Stage 2: one block adds the NORM_BLOCKS partial sums into partial[NORM_BLOCKS].
__global__ void norm_finish_kernel(double* partial, int n) {
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sum += partial[i];
    sum = block_sum(sum);
    if (threadIdx.x == 0) partial[n] = sum;
}

__global__ void scale_kernel(float* x, float s, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

// Global L2 norm of the n gradients; scaled by max_norm / (norm + 1e-6) when that is below 1,
// the rule of the CPU's gpt2_clip_gradients (and PyTorch's clip_grad_norm_). Returns the norm.
static float clip_gradients_gpu(float* grads, size_t n, float max_norm) {
    double* partial = (double*)scratch_floats(2 * (NORM_BLOCKS + 1));
    norm_squared_kernel<<<NORM_BLOCKS, 256>>>(partial, grads, n);
    launch_check(norm_squared_kernel);
    norm_finish_kernel<<<1, 256>>>(partial, NORM_BLOCKS);
    launch_check(norm_finish_kernel);
    double sum;
    cuda_check(cudaMemcpy(&sum, partial + NORM_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost));
    float norm = (float)sqrt(sum);
    float coef = max_norm / (norm + 1e-6f);
    if (coef < 1.0f) {
        scale_kernel<<<ceil_div(n, 256), 256>>>(grads, coef, n);
        launch_check(scale_kernel);
    }
    return norm;
}

// One AdamW step on n parameters, the CPU's gpt2_update formula element for element:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p = p*decay - step_size * m / (sqrt(v)/bc2 + eps)
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n,
                             float beta1, float beta2, float eps, float decay, float step_size,
                             float bias_correction2_sqrt) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = grads[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
    params[i] = params[i] * decay - step_size * mi / denom;
}

// ---------- the device ----------

// Peak float32 throughput without tensor cores: SMs x clock x FP32 lanes per SM x 2 (an FMA is
// two flops). Lanes per SM by compute capability: 64 on Volta/Turing (7.x) and A100 (8.0), 128
// on 8.6+ and Hopper (9.0). H100 SXM: 132 x 1.98 GHz x 128 x 2 = 66.9 TFLOP/s.
typedef struct {
    cudaDeviceProp prop;
    double clock_ghz;
    int lanes_per_sm;
    double peak_flops;      // float32 FLOP/s
    double peak_bandwidth;  // bytes/s: 2 transfers per memory clock (DDR) x bus width
} GpuInfo;

static GpuInfo gpu_info;

// Picks device 0. "No CUDA device" only when there is none: no NVIDIA driver (its version reads
// 0), or a driver that sees no GPU; one line, exit 1, as for every error. Anything else is a GPU
// that is there but unusable, and the error is named: a driver older than the CUDA runtime this
// program was built with (the runtime refuses it), or whatever else CUDA reports.
static void gpu_init(void) {
    const char* debug = getenv("GPU_DEBUG");
    gpu_debug = debug != NULL && strcmp(debug, "") != 0 && strcmp(debug, "0") != 0;
    int driver = 0, runtime = 0, count = 0;
    cuda_check(cudaDriverGetVersion(&driver));
    cuda_check(cudaRuntimeGetVersion(&runtime));
    if (driver == 0) fail("no CUDA device found (no NVIDIA driver is installed); use ./train_cpu instead");
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
        fail("no CUDA device found (the NVIDIA driver sees no GPU); use ./train_cpu instead");
    }
    if (err == cudaErrorInsufficientDriver && driver < runtime) {
        fail("the NVIDIA driver supports CUDA up to %d.%d, but train_gpu was built with CUDA %d.%d: update "
             "the driver, or build with a CUDA toolkit no newer than %d.%d", driver / 1000, driver % 1000 / 10,
             runtime / 1000, runtime % 1000 / 10, driver / 1000, driver % 1000 / 10);
    }
    if (err != cudaSuccess) {
        fail("CUDA cannot use the GPU: %s (%s)", cudaGetErrorString(err), cudaGetErrorName(err));
    }
    cuda_check(cudaSetDevice(0));
    cuda_check(cudaGetDeviceProperties(&gpu_info.prop, 0));
    // A binary holds machine code for some GPU generations and PTX that the driver can compile for
    // newer ones (Makefile: GPU_ARCH); an older GPU than all of them finds nothing to run.
    cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, sum_partials_kernel);
    if (err == cudaErrorNoKernelImageForDevice) {
        fail("train_gpu was built for compute capability %s, which this GPU (%s, %d.%d) cannot run: "
             "rebuild with make clean && make train_gpu, which targets this machine's GPU", GPU_ARCHS,
             gpu_info.prop.name, gpu_info.prop.major, gpu_info.prop.minor);
    }
    cuda_check(err);
    int clock_khz = 0;
    cuda_check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    gpu_info.clock_ghz = clock_khz / 1e6;
    int major = gpu_info.prop.major, minor = gpu_info.prop.minor;
    gpu_info.lanes_per_sm = (major == 7 || (major == 8 && minor == 0)) ? 64 : 128;
    gpu_info.peak_flops = gpu_info.prop.multiProcessorCount * gpu_info.clock_ghz * 1e9 * gpu_info.lanes_per_sm * 2.0;
    int mem_clock_khz = 0, bus_bits = 0;
    cuda_check(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0));
    cuda_check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    gpu_info.peak_bandwidth = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8.0;
    gpu_num_sms = gpu_info.prop.multiProcessorCount;
#ifdef USE_CUBLAS
    cublas_check(cublasCreate(&cublas_handle));
#endif
}

static void gpu_print_info(void) {
    printf("device: %s, compute capability %d.%d, %d SMs at %.2f GHz, %.1f GiB\n", gpu_info.prop.name,
           gpu_info.prop.major, gpu_info.prop.minor, gpu_info.prop.multiProcessorCount, gpu_info.clock_ghz,
           gpu_info.prop.totalGlobalMem / 1073741824.0);
    printf("peak float32 (no tensor cores) %.1f TFLOP/s = %d SMs x %.2f GHz x %d lanes x 2, the MFU reference%s\n",
           gpu_info.peak_flops / 1e12, gpu_info.prop.multiProcessorCount, gpu_info.clock_ghz,
           gpu_info.lanes_per_sm,
#ifdef USE_CUBLAS
           " (USE_CUBLAS build: matmuls by cuBLAS)"
#else
           ""
#endif
    );
}

// ---------- the model ----------

// The GPU's layers, for the forward and backward pass of gpt2/model.h.
static const Layers GPU_LAYERS = {
    encoder_forward_gpu, encoder_backward_gpu, layernorm_forward_gpu, layernorm_backward_gpu,
    matmul_forward_gpu, matmul_backward_gpu, attention_forward_gpu, attention_backward_gpu,
    gelu_forward_gpu, gelu_backward_gpu, residual_forward_gpu, residual_backward_gpu,
};

// The activation table of gpt2/model.h without probs: the fused classifier never stores them.
static void gpu_activation_sizes(size_t* sizes, GPT2Config config, int B, int T) {
    size_t layer[NUM_ACTIVATION_TENSORS];
    activation_sizes(sizes, layer, config, B, T);
    sizes[PROBS] = 0;
}

// A GPT2 whose tensors are all in device memory, for batches of up to B x T, with the parameters
// (and, when resuming, the AdamW moments) of a host model; gradients start at zero, and so do
// the moments of a fresh run. Files are read and written on the host (gpt2/checkpoint.h).
void gpt2_build_gpu(GPT2* model, const GPT2* host, int B, int T) {
    memset(model, 0, sizeof(*model));
    model->config = host->config;
    memcpy(model->param_sizes, host->param_sizes, sizeof(model->param_sizes));
    model->num_parameters = host->num_parameters;
    model->batch_size = B;
    model->seq_len = T;
    gpu_activation_sizes(model->act_sizes, model->config, B, T);
    model->num_activations = sum_sizes(model->act_sizes, NUM_ACTIVATION_TENSORS);
    size_t n = model->num_parameters, na = model->num_activations;
    size_t need = (4 * n + 2 * na) * sizeof(float) + 2 * (size_t)B * T * sizeof(int);
    size_t free_bytes, total_bytes;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (need > free_bytes) {
        fail("the model needs %.1f GiB of GPU memory (parameters, gradients, AdamW moments, activations "
             "for B=%d T=%d) but %.1f GiB are free: use a smaller -b or -t", need / 1073741824.0, B, T,
             free_bytes / 1073741824.0);
    }
    cuda_check(cudaMalloc((void**)&model->params_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->m_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->v_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->acts_memory, na * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_acts_memory, na * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->inputs, (size_t)B * T * sizeof(int)));
    cuda_check(cudaMalloc((void**)&model->targets, (size_t)B * T * sizeof(int)));
    cuda_check(cudaMemcpy(model->params_memory, host->params_memory, n * sizeof(float), cudaMemcpyHostToDevice));
    cuda_check(cudaMemset(model->grads_memory, 0, n * sizeof(float)));
    if (host->m_memory != NULL) {
        cuda_check(cudaMemcpy(model->m_memory, host->m_memory, n * sizeof(float), cudaMemcpyHostToDevice));
        cuda_check(cudaMemcpy(model->v_memory, host->v_memory, n * sizeof(float), cudaMemcpyHostToDevice));
    } else {
        cuda_check(cudaMemset(model->m_memory, 0, n * sizeof(float)));
        cuda_check(cudaMemset(model->v_memory, 0, n * sizeof(float)));
    }
    point_tensors((float**)&model->params, model->params_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    point_tensors((float**)&model->grads, model->grads_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    model->cpu_losses = (float*)malloc_check((size_t)B * T * sizeof(float));
    model->mean_loss = -1.0f;
}

// The forward pass, as train_cpu.c's gpt2_forward: inputs and targets are host arrays (B, T);
// targets may be NULL. With targets, the fused classifier also leaves the gradient of the mean
// loss with respect to the logits in grads_acts.logits, ready for gpt2_backward_gpu.
void gpt2_forward_gpu(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    GPT2Config c = model->config;
    size_t sizes[NUM_ACTIVATION_TENSORS];
    gpu_activation_sizes(sizes, c, B, T);  // laid out for this B and T, inside the allocation
    point_tensors((float**)&model->acts, model->acts_memory, sizes, NUM_ACTIVATION_TENSORS);
    point_tensors((float**)&model->grads_acts, model->grads_acts_memory, sizes, NUM_ACTIVATION_TENSORS);
    model->B = B;
    model->T = T;
    size_t BT = (size_t)B * T;
    cuda_check(cudaMemcpy(model->inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice));
    gpt2_forward_layers(&GPU_LAYERS, model);
    model->mean_loss = -1.0f;
    if (targets == NULL) return;
    cuda_check(cudaMemcpy(model->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice));
    ActivationTensors a = model->acts;
    fused_classifier_gpu(model->grads_acts.logits, a.losses, a.logits, model->targets, B, T, c.vocab_size,
                         c.padded_vocab_size);
    cuda_check(cudaMemcpy(model->cpu_losses, a.losses, BT * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += model->cpu_losses[i];
    model->mean_loss = (float)(sum / (double)BT);
}

void gpt2_zero_grad_gpu(GPT2* model) {
    cuda_check(cudaMemset(model->grads_memory, 0, model->num_parameters * sizeof(float)));
}

// The backward pass of the last forward pass (which had targets), as gpt2_backward. Activation
// gradients are zeroed here, except three that are written before they are read: logits (by the
// forward's fused classifier), preatt and att (attention's scratch).
void gpt2_backward_gpu(GPT2* model) {
    size_t sizes[NUM_ACTIVATION_TENSORS];
    gpu_activation_sizes(sizes, model->config, model->B, model->T);
    float** dtensors = (float**)&model->grads_acts;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        if (i == LOGITS || i == PREATT || i == ATT) continue;
        cuda_check(cudaMemset(dtensors[i], 0, sizes[i] * sizeof(float)));
    }
    gpt2_backward_layers(&GPU_LAYERS, model);
}

float gpt2_clip_gradients_gpu(GPT2* model, float max_norm) {
    return clip_gradients_gpu(model->grads_memory, model->num_parameters, max_norm);
}

// One AdamW step (t from 1), as gpt2_update: one launch per tensor, weight decay on the
// matrices only (PARAMETERS[k].decay).
void gpt2_update_gpu(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    AdamWScalars s = adamw_scalars(lr, beta1, beta2, t);
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        float decay = PARAMETERS[k].decay ? 1.0f - lr * weight_decay : 1.0f;
        size_t n = model->param_sizes[k];
        adamw_kernel<<<ceil_div(n, 256), 256>>>(model->params_memory + offset, model->grads_memory + offset,
                                                model->m_memory + offset, model->v_memory + offset, n, beta1,
                                                beta2, eps, decay, s.step_size, s.bias_correction2_sqrt);
        launch_check(adamw_kernel);
        offset += n;
    }
}

void gpt2_free_gpu(GPT2* model) {
    cuda_check(cudaFree(model->params_memory));
    cuda_check(cudaFree(model->grads_memory));
    cuda_check(cudaFree(model->m_memory));
    cuda_check(cudaFree(model->v_memory));
    cuda_check(cudaFree(model->acts_memory));
    cuda_check(cudaFree(model->grads_acts_memory));
    cuda_check(cudaFree(model->inputs));
    cuda_check(cudaFree(model->targets));
    free(model->cpu_losses);
    memset(model, 0, sizeof(*model));
}

static void gpt2_logits_to_host_gpu(const GPT2* model, int position, float* out) {
    size_t Vp = (size_t)model->config.padded_vocab_size;
    cuda_check(cudaMemcpy(out, model->acts.logits + (size_t)position * Vp, Vp * sizeof(float),
                          cudaMemcpyDeviceToHost));
}

// The parameters and AdamW moments into the run's host model, to be saved.
static void gpt2_to_host_gpu(const GPT2* model, GPT2* host) {
    size_t bytes = model->num_parameters * sizeof(float);
    if (host->m_memory == NULL) {
        host->m_memory = (float*)malloc_check(bytes);
        host->v_memory = (float*)malloc_check(bytes);
    }
    cuda_check(cudaMemcpy(host->params_memory, model->params_memory, bytes, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(host->m_memory, model->m_memory, bytes, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(host->v_memory, model->v_memory, bytes, cudaMemcpyDeviceToHost));
}

static void gpu_synchronize(void) { cuda_check(cudaDeviceSynchronize()); }
static double gpu_peak_flops(void) { return gpu_info.peak_flops; }

// The model's training operations for gpt2/run.h's loop, on a device copy of the run's model.
static const Trainer GPU_TRAINER = {
    gpt2_forward_gpu, gpt2_zero_grad_gpu, gpt2_backward_gpu, gpt2_clip_gradients_gpu, gpt2_update_gpu,
    gpt2_logits_to_host_gpu, gpt2_to_host_gpu, gpu_synchronize, gpu_peak_flops,
};

// ---------- main ----------
#ifndef TRAIN_GPU_NO_MAIN  // dev/gpu_check.cu defines it to call the functions above

int main(int argc, char** argv) {
    TrainConfig cfg = train_config_parse(argc, argv, train_config_defaults(1));  // d12, T=1024
    gpu_init();  // no device: one line, exit 1
    gpu_print_info();
    Run run;
    run_open(&run, cfg);  // the model (fresh, loaded or resumed) on the host, the data, -o DIR
    GPT2 model;
    gpt2_build_gpu(&model, &run.model, cfg.B, cfg.T);  // a copy of it on the GPU, trained there
    run_train(&run, &GPU_TRAINER, &model);
    gpt2_free_gpu(&model);
    run_close(&run);
    return 0;
}

#endif
