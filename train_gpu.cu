// train_gpu.cu: GPT-2 training on an NVIDIA GPU, every operation a kernel written here, in
// float32 (-p fp32) or in mixed precision (-p bf16, the default from compute capability 8.0).
//
//   make train_gpu && ./train_gpu        GPT-2 124M from scratch on Tiny Shakespeare, T=1024
//   ./train_gpu -p fp32                  the float32 path, kernel for kernel the CPU's twin
//   mpirun -np N ./train_gpu ...         data parallel on N GPUs, gradients summed by NCCL
//                                        (doc/parallel.md)
//   GPU_DEBUG=1 ./train_gpu ...          wait after every kernel: a fault names its kernel
//   make train_gpu_emu                   the same program on the CPU emulator: build/emu/train_gpu
//
// The GPU twin of train_cpu.c. Each CPU layer `x(...)` of gpt2/cpu_layers.h has a GPU twin
// `x_gpu(...)` with the same arguments on device pointers, which launches kernels `..._kernel`;
// in float32 the model's forward and backward pass (gpt2/model.h) and the training loop
// (gpt2/run.h) are the ones train_cpu.c runs, handed the GPU's layers and training operations.
// Everything that is not arithmetic on the GPU (files, the command line, the data) happens on the
// host, in the shared headers. The float32 kernels:
//   - matmul: one register-tiled shared-memory SGEMM (128x128 tiles, 8x8 outputs per thread,
//     float4 loads, any M, N, K) serves the linear layers and the attention products;
//   - attention: Q K^T and att V as batched SGEMMs over (b, h), causal tiles skipped, and a
//     warp-per-row causal softmax in between (T x T scores are stored);
//   - layernorm, GELU, residual, encoder: warp-per-row or element-wise kernels;
//   - a fused classifier: softmax, cross-entropy and its gradient in one kernel per row;
//   - gradient global norm (deterministic two-stage reduction), clipping and AdamW.
// The bf16 path (its own forward and backward, near the end) replaces two of them and keeps the
// rest, templated on the activation type:
//   - matmul on the tensor cores: mma.sync m16n8k16 from ldmatrix fragments, a three-stage
//     cp.async pipeline, swizzled shared memory, bias, GELU and residual fused into the epilogue;
//   - causal flash attention, forward and backward, that never stores the T x T scores;
//   - AdamW on float32 master weights, writing the bf16 copy the products read.
// Every reduction runs in a fixed order, so two runs of the same step give the same bits.
// Build with USE_CUBLAS=1 to swap cuBLAS in for the float32 linear layers, for comparison only.
// doc/gpu.md explains the kernels; dev/gpu/gpu_check.cu checks each one against the CPU.

#include "gpt2/model.h"
#include "gpt2/cpu_layers.h"
#include "gpt2/run.h"

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#ifdef USE_CUBLAS
#include <cublas_v2.h>
#endif
#ifdef USE_MPI
#include <nccl.h>  // data parallel: the gradients summed over the GPUs of the run
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

// ---------- tensor-core instructions ----------
//
// The four PTX instructions the bf16 matrix products are built from, each wrapped in a function
// of the same name on the CPU emulator (dev/emu/cuda_emu.h), so that the kernels compile for both;
// dev/gpu/instruction_check.cu checks each against its definition in the PTX ISA, on a GPU and here.
typedef __nv_bfloat16 bf16;

#ifndef CUDA_EMU
// mma.sync on bf16 and cp.async exist from compute capability 8.0 on. A build for an older GPU
// (GPU_ARCH=75) compiles them as a trap: train_gpu runs only -p fp32 there (gpu_use_bf16).
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
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* row) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(row);
    TENSOR_CORE_PTX("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// 16 bytes from global to shared memory without passing through registers: the copy runs in the
// background until a cp_async_wait. src_bytes = 0 writes 16 zero bytes instead (a tile's part
// beyond the matrix's edge). Copies issued since the last commit form one group; cp_async_wait<N>
// waits until at most N groups, the newest, are still in flight. Other threads see the data only
// after that wait and a __syncthreads.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    TENSOR_CORE_PTX("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(addr), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit(void) { TENSOR_CORE_PTX("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait(void) { TENSOR_CORE_PTX("cp.async.wait_group %0;\n" :: "n"(N)); }
#endif

// The kernels below that serve both paths take their activations as act_t, float or bf16, and
// do their arithmetic in float32 either way: to_float on every load, from_float on every store.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <typename act_t> __device__ __forceinline__ act_t from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }

// ---------- encoder ----------

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], one thread per output element (coalesced along C).
template <typename act_t>
__global__ void encoder_forward_kernel(act_t* out, const int* inp, const float* wte, const float* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) return;
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int t = (int)(bt % T);
    out[idx] = from_float<act_t>(wte[(size_t)inp[bt] * C + c] + wpe[(size_t)t * C + c]);
}

template <typename act_t>
static void encoder_forward_gpu(act_t* out, const int* inp, const float* wte, const float* wpe,
                                int B, int T, int C) {
    encoder_forward_kernel<act_t><<<ceil_div((size_t)B * T * C, 256), 256>>>(out, inp, wte, wpe, B, T, C);
    launch_check(encoder_forward_kernel);
}

// dwpe[t,c] += sum over b of dout[b,t,c]: one thread per (t, c), b in order.
template <typename act_t>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const act_t* dout, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += to_float(dout[(size_t)b * T * C + idx]);
    dwpe[idx] += sum;
}

// dwte[tok,:] += sum of dout[p,:] over the positions p holding tok. One block per position p; only
// the block of a token's first position writes, summing all its positions in order, so that no
// two blocks write the same row and the sum is deterministic (atomicAdd per position would not be).
template <typename act_t>
__global__ void encoder_backward_wte_kernel(float* dwte, const act_t* dout, const int* inp, int BT, int C) {
    int p = blockIdx.x;
    int tok = inp[p];
    int seen_before = 0;
    for (int q = threadIdx.x; q < p; q += blockDim.x) seen_before |= inp[q] == tok;
    if (__syncthreads_or(seen_before)) return;  // the whole block leaves together
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int q = p; q < BT; q++) {
            if (inp[q] == tok) sum += to_float(dout[(size_t)q * C + c]);  // inp[q]: one address, broadcast
        }
        dwte[(size_t)tok * C + c] += sum;
    }
}

template <typename act_t>
static void encoder_backward_gpu(float* dwte, float* dwpe, const act_t* dout, const int* inp,
                                 int B, int T, int C) {
    encoder_backward_wpe_kernel<act_t><<<ceil_div((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    launch_check(encoder_backward_wpe_kernel);
    encoder_backward_wte_kernel<act_t><<<B * T, 256>>>(dwte, dout, inp, B * T, C);
    launch_check(encoder_backward_wte_kernel);
}

// ---------- layernorm ----------

// One warp per row of C: two passes over the row (mean, then variance of x - mean, as the CPU
// does, which is more accurate than E[x^2] - E[x]^2), then the normalised output.
template <typename act_t>
__global__ void layernorm_forward_kernel(act_t* out, float* mean, float* rstd, const act_t* inp,
                                         const float* weight, const float* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;  // whole warps leave: the shuffles below still see all 32 lanes
    const act_t* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += to_float(x[i]);
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = to_float(x[i]) - m;
        var += d * d;
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LAYERNORM_EPS);
    act_t* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) o[i] = from_float<act_t>((s * (to_float(x[i]) - m)) * weight[i] + bias[i]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

template <typename act_t>
static void layernorm_forward_gpu(act_t* out, float* mean, float* rstd, const act_t* inp,
                                  const float* weight, const float* bias, int B, int T, int C) {
    int N = B * T;
    layernorm_forward_kernel<act_t><<<ceil_div(N, 8), 256>>>(out, mean, rstd, inp, weight, bias, N, C);
    launch_check(layernorm_forward_kernel);
}

// dinp, one warp per row: with n = (x - mean) * rstd and g = weight * dout,
// dinp += (g - mean(g) - n * mean(g * n)) * rstd.
template <typename act_t>
__global__ void layernorm_backward_kernel(act_t* dinp, const act_t* dout, const act_t* inp,
                                          const float* weight, const float* mean, const float* rstd,
                                          int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const act_t* x = inp + (size_t)row * C;
    const act_t* dy = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float g_sum = 0.0f, gn_sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float g = weight[i] * to_float(dy[i]);
        g_sum += g;
        gn_sum += g * (to_float(x[i]) - m) * s;
    }
    float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
    act_t* dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float n = (to_float(x[i]) - m) * s;
        dx[i] = from_float<act_t>(to_float(dx[i]) + (weight[i] * to_float(dy[i]) - g_mean - n * gn_mean) * s);
    }
}

// Stage 1 of dweight += sum over rows of dout * n and dbias += sum over rows of dout. Block =
// 32 columns x 8 warps; warp w takes rows w, w+8, ... of its chunk, reading 32 consecutive
// floats of a row per step (coalesced). Writes partial[chunk][0][col] and partial[chunk][1][col].
template <typename act_t>
__global__ void layernorm_backward_params_kernel(float* partial, const act_t* dout, const act_t* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
    __shared__ float dw_part[8][32], db_part[8][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int col = blockIdx.x * 32 + lane;
    int row_end = min(N, (int)(blockIdx.y + 1) * COLSUM_ROWS_PER_CHUNK);
    float dw = 0.0f, db = 0.0f;
    if (col < C) {
        for (int row = blockIdx.y * COLSUM_ROWS_PER_CHUNK + warp; row < row_end; row += 8) {
            float dy = to_float(dout[(size_t)row * C + col]);
            dw += dy * (to_float(inp[(size_t)row * C + col]) - mean[row]) * rstd[row];
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

template <typename act_t>
static void layernorm_backward_gpu(act_t* dinp, float* dweight, float* dbias, const act_t* dout,
                                   const act_t* inp, const float* weight, const float* mean,
                                   const float* rstd, int B, int T, int C) {
    int N = B * T;
    layernorm_backward_kernel<act_t><<<ceil_div(N, 8), 256>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    launch_check(layernorm_backward_kernel);
    int chunks = ceil_div(N, COLSUM_ROWS_PER_CHUNK);
    float* partial = scratch_floats((size_t)chunks * 2 * C);
    dim3 grid(ceil_div(C, 32), chunks);
    layernorm_backward_params_kernel<act_t><<<grid, 256>>>(partial, dout, inp, mean, rstd, N, C);
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
template <typename act_t>
__global__ void bias_backward_kernel(float* partial, const act_t* dout, int N, int OC) {
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
template <typename act_t>
static void bias_backward_gpu(float* dbias, const act_t* dout, int N, int OC) {
    int chunks = ceil_div(N, COLSUM_ROWS_PER_CHUNK);
    float* partial = scratch_floats((size_t)chunks * OC);
    bias_backward_kernel<act_t><<<dim3(ceil_div(OC, 32), chunks), 256>>>(partial, dout, N, OC);
    launch_check(bias_backward_kernel);
    sum_partials_kernel<<<ceil_div(OC, 256), 256>>>(dbias, partial, chunks, OC, OC);
    launch_check(sum_partials_kernel);
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
    if (dbias != NULL) bias_backward_gpu(dbias, dout, N, OC);
}

// ---------- matmul on tensor cores (bf16) ----------
//
// The bf16 path's one matrix-product kernel: C = op(A) op(B) with bf16 operands on the tensor
// cores (mma.sync m16n8k16, float32 accumulation), then an epilogue on the float32 results.
// Operand layouts as for the SGEMM above: A(m,k) = A[m*lda + k], or A[k*lda + m] when TA;
// B(k,n) = B[k*ldb + n], or B[n*ldb + k] when TB. C(m,n) = C[m*ldc + n], in float32 or bf16.
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
} MmaArgs;

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

// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its
// derivative through 1 - tanh^2; the float32 GELU kernels and the bf16 matmul's epilogue use both.
__device__ __forceinline__ float gelu_of(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float gelu_grad_of(float x) {
    float th = tanhf(GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x));
    float du = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// The epilogue of one result v = C(m, n) before rounding: bias, GELU or its gradient, the
// residual, the old C, in that order, all in float32.
template <typename OutT>
__device__ __forceinline__ void mma_store(const MmaArgs& g, int m, int n, float v) {
    if (m >= g.M || n >= g.N) return;
    long long i = m * g.ldc + n;
    if (g.bias != NULL) v += g.bias[n];
    if (g.epilogue == EPI_GELU) {
        bf16 pre = __float2bfloat16(v);
        g.aux[i] = pre;
        v = gelu_of(__bfloat162float(pre));  // of the stored value, which the backward reads
    } else if (g.epilogue == EPI_GELU_BACKWARD) {
        v *= gelu_grad_of(__bfloat162float(g.aux[i]));
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
__global__ void __launch_bounds__(WM * WN * 32) matmul_mma_kernel(MmaArgs g) {
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
static void matmul_mma_launch(const MmaArgs& g) {
    bool big = (size_t)ceil_div(g.M, 128) * ceil_div(g.N, 128) >= (size_t)2 * gpu_num_sms;
    int bm = big ? 128 : 64;
    dim3 grid(ceil_div(g.N, bm), ceil_div(g.M, bm));
    if (grid.y > 65535) fail("matmul of %d x %d is too large for one launch (%s:%d)", g.M, g.N, __FILE__, __LINE__);
    if (big) matmul_mma_kernel<128, 128, 2, 4, TA, TB, OutT><<<grid, 256>>>(g);
    else matmul_mma_kernel<64, 64, 2, 2, TA, TB, OutT><<<grid, 128>>>(g);
    launch_check(matmul_mma_kernel);
}

// A product with the operands given; the epilogue's extras are set by the caller.
static MmaArgs mma_args(const bf16* A, long long lda, const bf16* B, long long ldb, void* C, long long ldc,
                        int M, int N, int K) {
    MmaArgs g;
    memset(&g, 0, sizeof(g));
    g.A = A; g.B = B; g.C = C;
    g.lda = lda; g.ldb = ldb; g.ldc = ldc;
    g.M = M; g.N = N; g.K = K;
    g.epilogue = EPI_NONE;
    return g;
}

// Dispatches on the operand layouts and the output type (out_f32: C is float*, else bf16*).
static void matmul_mma(MmaArgs g, bool ta, bool tb, bool out_f32) {
    if (g.M == 0 || g.N == 0) return;
    g.vecA = aligned16(g.A) && g.lda % 8 == 0;
    g.vecB = aligned16(g.B) && g.ldb % 8 == 0;
    if (out_f32) {
        if (!ta && !tb) matmul_mma_launch<false, false, float>(g);
        if (!ta && tb) matmul_mma_launch<false, true, float>(g);
        if (ta && !tb) matmul_mma_launch<true, false, float>(g);
        if (ta && tb) matmul_mma_launch<true, true, float>(g);
    } else {
        if (!ta && !tb) matmul_mma_launch<false, false, bf16>(g);
        if (!ta && tb) matmul_mma_launch<false, true, bf16>(g);
        if (ta && !tb) matmul_mma_launch<true, false, bf16>(g);
        if (ta && tb) matmul_mma_launch<true, true, bf16>(g);
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

// ---------- flash attention (bf16) ----------
//
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
// How the kernels run (on CUDA cores; the products could later move to tensor cores): a block
// owns FLASH_ROWS rows (queries, or keys in the dK/dV kernel) of one (b, h), a thread one row, and
// the other side comes through shared memory FLASH_TILE rows at a time, converted to float once
// when loaded; all threads of a warp then read the same row of the tile, a broadcast. A thread
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
        out, lse, qkv, T, C, NH, 1.0f / sqrtf((float)HS));
    launch_check(flash_attention_forward_kernel);
}

template <int HS>
static void flash_backward_launch(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                  const float* D, int B, int T, int C, int NH) {
    dim3 grid(ceil_div((size_t)T, FLASH_ROWS), NH, B);
    float scale = 1.0f / sqrtf((float)HS);
    flash_attention_backward_dkv_kernel<HS><<<grid, FlashSlices<HS, FLASH_BWD_W>::THREADS>>>(
        dqkv, dout, qkv, lse, D, T, C, NH, scale);
    launch_check(flash_attention_backward_dkv_kernel);
    flash_attention_backward_dq_kernel<HS><<<grid, FlashSlices<HS, FLASH_BWD_W>::THREADS>>>(
        dqkv, dout, qkv, lse, D, T, C, NH, scale);
    launch_check(flash_attention_backward_dq_kernel);
}

// out (B,T,C) bf16; lse (B,NH,T) float32: the log-sum-exp of each query row's scaled scores,
// kept for the backward. qkv (B,T,3C) bf16.
static void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
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

// dqkv (B,T,3C) bf16 is written (not accumulated) with the gradients of Q, K and V; dout (B,T,C)
// bf16; out and lse from the forward. D goes to the shared scratch buffer.
static void flash_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                                     const float* lse, int B, int T, int C, int NH) {
    int hs = flash_head_size(C, NH);
    flash_check_aligned(dqkv, "dqkv");
    flash_check_aligned(dout, "dout");
    flash_check_aligned(qkv, "qkv");
    float* D = scratch_floats((size_t)B * NH * T);
    flash_attention_backward_d_kernel<<<ceil_div((size_t)B * T * NH, 256), 256>>>(D, dout, out, B, T, C, NH);
    launch_check(flash_attention_backward_d_kernel);
    switch (hs) {
    case 16: flash_backward_launch<16>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    case 32: flash_backward_launch<32>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    case 64: flash_backward_launch<64>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    default: flash_backward_launch<128>(dqkv, dout, qkv, lse, D, B, T, C, NH); break;
    }
}

// ---------- GELU and residual ----------

// GELU element by element (gelu_of, gelu_grad_of: with the matmul kernels above).
__global__ void gelu_forward_kernel(float* out, const float* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    out[i] = gelu_of(inp[i]);
}

static void gelu_forward_gpu(float* out, const float* inp, int N) {
    gelu_forward_kernel<<<ceil_div(N, 256), 256>>>(out, inp, N);
    launch_check(gelu_forward_kernel);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    dinp[i] += dout[i] * gelu_grad_of(inp[i]);
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
// dlogits may be logits itself (the bf16 path overwrites its logits with their gradient): every
// thread reads the logit of the target before the block's first barrier, and afterwards reads
// and writes only its own columns.
template <typename act_t>
__global__ void fused_classifier_kernel(act_t* dlogits, float* losses, const act_t* logits,
                                        const int* targets, float dloss, int V, int Vp) {
    size_t row = blockIdx.x;
    const act_t* x = logits + row * Vp;
    int target = targets[row];
    float x_target = to_float(x[target]);
    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxval = fmaxf(maxval, to_float(x[i]));
    maxval = block_max(maxval);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(to_float(x[i]) - maxval);
    sum = block_sum(sum);
    if (threadIdx.x == 0) losses[row] = logf(sum) - (x_target - maxval);
    float inv = 1.0f / sum;
    act_t* dx = dlogits + row * Vp;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float d = i < V ? (expf(to_float(x[i]) - maxval) * inv - (i == target ? 1.0f : 0.0f)) * dloss : 0.0f;
        dx[i] = from_float<act_t>(d);
    }
}

template <typename act_t>
static void fused_classifier_gpu(act_t* dlogits, float* losses, const act_t* logits, const int* targets,
                                 int B, int T, int V, int Vp) {
    fused_classifier_kernel<act_t><<<B * T, 1024>>>(dlogits, losses, logits, targets, 1.0f / (B * T), V, Vp);
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
static float clip_gradients_gpu(float* grads, size_t n, float grad_scale, float max_norm) {
    double* partial = (double*)scratch_floats(2 * (NORM_BLOCKS + 1));
    norm_squared_kernel<<<NORM_BLOCKS, 256>>>(partial, grads, n);
    launch_check(norm_squared_kernel);
    norm_finish_kernel<<<1, 256>>>(partial, NORM_BLOCKS);
    launch_check(norm_finish_kernel);
    double sum;
    cuda_check(cudaMemcpy(&sum, partial + NORM_BLOCKS, sizeof(double), cudaMemcpyDeviceToHost));
    float norm = (float)(grad_scale * sqrt(sum));
    float coef = max_norm / (norm + 1e-6f);
    float factor = coef < 1.0f ? grad_scale * coef : grad_scale;
    if (factor != 1.0f) {
        scale_kernel<<<ceil_div(n, 256), 256>>>(grads, factor, n);
        launch_check(scale_kernel);
    }
    return norm;
}

// One AdamW step on n parameters, the CPU's gpt2_update formula element for element:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p = p*decay - step_size * m / (sqrt(v)/bc2 + eps)
// The bf16 path keeps these float32 parameters as its master copy and passes params16, which
// receives each new value rounded to the nearest bf16: the forward and backward read that copy.
__global__ void adamw_kernel(float* params, bf16* params16, const float* grads, float* m, float* v, size_t n,
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
    float p = params[i] * decay - step_size * mi / denom;
    params[i] = p;
    if (params16 != NULL) params16[i] = __float2bfloat16(p);
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
    // one GPU per process: a data-parallel run's processes on one machine take one each
    int device = procs.local_rank;
    if (device >= count) {
        fail("this process is number %d of those started on this machine, which has %d GPU%s: start at most one "
             "process per GPU", device + 1, count, count > 1 ? "s" : "");
    }
    cuda_check(cudaSetDevice(device));
    cuda_check(cudaGetDeviceProperties(&gpu_info.prop, device));
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
    cuda_check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
    gpu_info.clock_ghz = clock_khz / 1e6;
    int major = gpu_info.prop.major, minor = gpu_info.prop.minor;
    gpu_info.lanes_per_sm = (major == 7 || (major == 8 && minor == 0)) ? 64 : 128;
    gpu_info.peak_flops = gpu_info.prop.multiProcessorCount * gpu_info.clock_ghz * 1e9 * gpu_info.lanes_per_sm * 2.0;
    int mem_clock_khz = 0, bus_bits = 0;
    cuda_check(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device));
    cuda_check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    gpu_info.peak_bandwidth = 2.0 * mem_clock_khz * 1e3 * bus_bits / 8.0;
    gpu_num_sms = gpu_info.prop.multiProcessorCount;
#ifdef USE_CUBLAS
    cublas_check(cublasCreate(&cublas_handle));
#endif
}

static double gpu_peak_flops_bf16(void);

static void gpu_print_info(int bf16) {
    printf("device: %s, compute capability %d.%d, %d SMs at %.2f GHz, %.1f GiB\n", gpu_info.prop.name,
           gpu_info.prop.major, gpu_info.prop.minor, gpu_info.prop.multiProcessorCount, gpu_info.clock_ghz,
           gpu_info.prop.totalGlobalMem / 1073741824.0);
    if (bf16) {
        printf("precision bf16 (float32 master weights): tensor-core matmuls, flash attention; peak bf16 %.1f "
               "TFLOP/s, the MFU reference\n", gpu_peak_flops_bf16() / 1e12);
        return;
    }
    printf("precision fp32: peak float32 (no tensor cores) %.1f TFLOP/s = %d SMs x %.2f GHz x %d lanes x 2, the MFU reference%s\n",
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
    encoder_forward_gpu<float>, encoder_backward_gpu<float>, layernorm_forward_gpu<float>, layernorm_backward_gpu<float>,
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
// Stops with one line when `need` bytes of GPU memory are not free, before anything is allocated.
static void gpu_check_memory(size_t need, int B, int T) {
    size_t free_bytes, total_bytes;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (need > free_bytes) {
        fail("the model needs %.1f GiB of GPU memory (parameters, gradients, AdamW moments, activations "
             "for B=%d T=%d) but %.1f GiB are free: use a smaller -b or -t", need / 1073741824.0, B, T,
             free_bytes / 1073741824.0);
    }
}

// The parameters, their gradients and the AdamW moments of a host model on the GPU, in float32,
// with room for inputs and targets of B x T: what both precisions keep.
static void gpt2_build_gpu_parameters(GPT2* model, const GPT2* host, int B, int T) {
    memset(model, 0, sizeof(*model));
    model->config = host->config;
    memcpy(model->param_sizes, host->param_sizes, sizeof(model->param_sizes));
    model->num_parameters = host->num_parameters;
    model->batch_size = B;
    model->seq_len = T;
    size_t n = model->num_parameters;
    cuda_check(cudaMalloc((void**)&model->params_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->m_memory, n * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->v_memory, n * sizeof(float)));
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
    model->device_bytes = 4 * n * sizeof(float) + 2 * (size_t)B * T * sizeof(int);
}

// The bytes the float32 path needs on the GPU for a batch of B x T.
static size_t gpt2_fp32_bytes(GPT2Config c, size_t num_parameters, int B, int T) {
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    gpu_activation_sizes(act_sizes, c, B, T);
    return (4 * num_parameters + 2 * sum_sizes(act_sizes, NUM_ACTIVATION_TENSORS)) * sizeof(float) +
           2 * (size_t)B * T * sizeof(int);
}

// The largest B whose batches of B x T fit in `available` bytes (0: not even B = 1), for either
// path's byte count, which grows linearly with B.
static int largest_batch(size_t (*bytes)(GPT2Config, size_t, int, int), GPT2Config c, size_t num_parameters,
                         int T, size_t available) {
    size_t one = bytes(c, num_parameters, 1, T), per_b = bytes(c, num_parameters, 2, T) - one;
    if (one > available) return 0;
    return 1 + (int)((available - one) / per_b);
}

void gpt2_build_gpu(GPT2* model, const GPT2* host, int B, int T) {
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    gpu_activation_sizes(act_sizes, host->config, B, T);
    size_t na = sum_sizes(act_sizes, NUM_ACTIVATION_TENSORS);
    gpu_check_memory(gpt2_fp32_bytes(host->config, host->num_parameters, B, T), B, T);
    gpt2_build_gpu_parameters(model, host, B, T);
    memcpy(model->act_sizes, act_sizes, sizeof(act_sizes));
    model->num_activations = na;
    cuda_check(cudaMalloc((void**)&model->acts_memory, na * sizeof(float)));
    cuda_check(cudaMalloc((void**)&model->grads_acts_memory, na * sizeof(float)));
    model->device_bytes += 2 * na * sizeof(float);
}

// model->mean_loss: the mean of the BT per-position losses on the device, summed on the host in
// double (both precisions).
static void gpu_mean_loss(GPT2* model, const float* losses, size_t BT) {
    cuda_check(cudaMemcpy(model->cpu_losses, losses, BT * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += model->cpu_losses[i];
    model->mean_loss = (float)(sum / (double)BT);
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
    gpu_mean_loss(model, a.losses, BT);
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

float gpt2_clip_gradients_gpu(GPT2* model, float grad_scale, float max_norm) {
    return clip_gradients_gpu(model->grads_memory, model->num_parameters, grad_scale, max_norm);
}

// One AdamW step (t from 1), as gpt2_update: one launch per tensor, weight decay on the
// matrices only (PARAMETERS[k].decay). params16, if not NULL, receives the new parameters in bf16.
static void adamw_update_gpu(GPT2* model, bf16* params16, float lr, float beta1, float beta2, float eps,
                             float weight_decay, int t) {
    AdamWScalars s = adamw_scalars(lr, beta1, beta2, t);
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        float decay = PARAMETERS[k].decay ? 1.0f - lr * weight_decay : 1.0f;
        size_t n = model->param_sizes[k];
        adamw_kernel<<<ceil_div(n, 256), 256>>>(model->params_memory + offset,
                                                params16 != NULL ? params16 + offset : NULL, model->grads_memory + offset,
                                                model->m_memory + offset, model->v_memory + offset, n, beta1,
                                                beta2, eps, decay, s.step_size, s.bias_correction2_sqrt);
        launch_check(adamw_kernel);
        offset += n;
    }
}

void gpt2_update_gpu(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    adamw_update_gpu(model, NULL, lr, beta1, beta2, eps, weight_decay, t);
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

// ---------- data parallel: NCCL ----------
//
// Under mpirun, each process trains on its own GPU, and the float32 parameter gradients (both
// precisions keep them in float32) are summed over the GPUs by NCCL's all-reduce, which moves
// them GPU to GPU (NVLink, PCIe or the network) without a copy to the host. MPI only starts the
// processes and hands NCCL's id for the run from rank 0 to the others (gpt2/parallel.h).
#ifdef USE_MPI
static ncclComm_t nccl_comm;

static void nccl_check_(ncclResult_t r, const char* call, const char* file, int line) {
    if (r != ncclSuccess) fail("NCCL call %s failed: %s (%s:%d)", call, ncclGetErrorString(r), file, line);
}
#define nccl_check(call) nccl_check_((call), #call, __FILE__, __LINE__)

static void nccl_init(void) {
    ncclUniqueId id;
    if (procs.rank == 0) nccl_check(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    nccl_check(ncclCommInitRank(&nccl_comm, procs.size, id, procs.rank));
}

static void nccl_free(void) { nccl_check(ncclCommDestroy(nccl_comm)); }

static void gpt2_all_reduce_gpu(GPT2* model) {
    nccl_check(ncclAllReduce(model->grads_memory, model->grads_memory, model->num_parameters, ncclFloat, ncclSum,
                             nccl_comm, 0));
}
#else  // built without MPI: always one process, whose gradients are already the sum
static void nccl_init(void) {}
static void nccl_free(void) {}
static void gpt2_all_reduce_gpu(GPT2* model) {}
#endif

// The model's training operations for gpt2/run.h's loop, on a device copy of the run's model.
static const Trainer GPU_TRAINER = {
    gpt2_forward_gpu, gpt2_zero_grad_gpu, gpt2_backward_gpu, gpt2_all_reduce_gpu, gpt2_clip_gradients_gpu,
    gpt2_update_gpu, gpt2_logits_to_host_gpu, gpt2_to_host_gpu, gpu_synchronize, gpu_peak_flops,
};

// ---------- the model in mixed precision (bf16) ----------
//
// -p bf16 trains the same GPT-2 with bf16 (8 exponent bits like float32, 8 significant bits)
// for what is large and streamed: the weights the matrix products read, the activations, their
// gradients. What must not lose digits stays float32: the master copy of the parameters (an
// update of 1e-4 of a weight of 1 would vanish in bf16, whose spacing there is 2^-7), their
// gradients and the AdamW moments, layernorm's mean and 1/std, flash attention's log-sum-exp,
// the losses, and every sum inside a kernel. bf16 has float32's range, so small gradients do not
// underflow to zero and no loss scaling is needed, unlike float16.
//
// The step: the forward and backward read params16, a bf16 copy of the float32 parameters that
// each AdamW step rewrites; the backward writes float32 parameter gradients (the tensor-core
// products accumulate in float32 and add into them); AdamW updates the float32 master copy. The
// products run on the tensor cores (matmul_mma_kernel), with bias, GELU and the residual
// connection fused into their epilogues; attention is flash attention, which never stores the
// T x T scores. Layers that are not products (layernorm, encoder, classifier) and the parameters
// they read (layernorm weights, biases, embeddings) are the float32 path's kernels, reading bf16
// activations and float32 parameters.

// The bf16 path's activations. Fewer than the float32 path's: no preatt or att (flash attention
// keeps one log-sum-exp per row instead), no attproj or fcproj (the residual is added in the
// product's epilogue), no probs (the classifier is fused).
typedef struct {
    bf16* encoded;     // (B, T, C)
    bf16* ln1;         // (L, B, T, C)
    float* ln1_mean;   // (L, B, T)
    float* ln1_rstd;   // (L, B, T)
    bf16* qkv;         // (L, B, T, 3*C)
    bf16* atty;        // (L, B, T, C)
    float* att_lse;    // (L, B, NH, T)  log-sum-exp of each row of scaled scores
    bf16* residual2;   // (L, B, T, C)
    bf16* ln2;         // (L, B, T, C)
    float* ln2_mean;   // (L, B, T)
    float* ln2_rstd;   // (L, B, T)
    bf16* fch;         // (L, B, T, 4*C) before GELU
    bf16* fch_gelu;    // (L, B, T, 4*C)
    bf16* residual3;   // (L, B, T, C)
    bf16* lnf;         // (B, T, C)
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;   // (B, T)
    bf16* logits;      // (B, T, Vp); after a forward pass with targets, the gradient of the loss
    float* losses;     // (B, T)
} ActivationsBF16;

// Lays the activations of a batch of B x T out from `memory` (NULL: only counts), each tensor on
// a 256-byte boundary (aligned for cp.async), with the per-layer tensors pointing at layer l's
// slice; returns the bytes they all take.
static size_t layout_activations_bf16(ActivationsBF16* a, char* memory, GPT2Config c, int B, int T, int l) {
    size_t L = c.num_layers, BT = (size_t)B * T, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    size_t offset = 0;
#define PLACE(field, per_layer, n)                                                              \
    do {                                                                                        \
        a->field = (decltype(a->field))(memory != NULL ? memory + offset : NULL);              \
        if (memory != NULL && (per_layer)) a->field += (size_t)l * (n);                         \
        offset += (((per_layer) ? L : 1) * (n) * sizeof(*a->field) + 255) / 256 * 256;         \
    } while (0)
    PLACE(encoded, 0, BT * C);
    PLACE(ln1, 1, BT * C);
    PLACE(ln1_mean, 1, BT);
    PLACE(ln1_rstd, 1, BT);
    PLACE(qkv, 1, BT * 3 * C);
    PLACE(atty, 1, BT * C);
    PLACE(att_lse, 1, BT * NH);
    PLACE(residual2, 1, BT * C);
    PLACE(ln2, 1, BT * C);
    PLACE(ln2_mean, 1, BT);
    PLACE(ln2_rstd, 1, BT);
    PLACE(fch, 1, BT * 4 * C);
    PLACE(fch_gelu, 1, BT * 4 * C);
    PLACE(residual3, 1, BT * C);
    PLACE(lnf, 0, BT * C);
    PLACE(lnf_mean, 0, BT);
    PLACE(lnf_rstd, 0, BT);
    PLACE(logits, 0, BT * Vp);
    PLACE(losses, 0, BT);
#undef PLACE
    return offset;
}

// The model of the bf16 path: the float32 GPT2 (master parameters, gradients, AdamW moments, on
// the GPU) as its first member, so that the Trainer's GPT2* points to it, and beside it the bf16
// copy of the parameters, the activations, and the backward pass's buffers. The backward pass
// goes one layer at a time, so one layer's worth of activation gradients is enough: dresidual,
// the gradient of the residual stream, carried from layer to layer, and three scratch buffers.
typedef struct {
    GPT2 base;
    bf16* params16;          // (num_parameters) the parameters, rounded to bf16 after every update
    char* acts_memory;       // the activations, for up to batch_size x seq_len
    bf16* dresidual;         // (B, T, C)
    bf16* dbuf;              // (B, T, C)
    bf16* dbuf4;             // (B, T, 4*C)
    bf16* dqkv;              // (B, T, 3*C)
    bf16* grads_acts_memory; // the four above, one allocation
} GPT2BF16;

// The bf16 copy of a parameter tensor (or of its layer-l slice): at the same offset as in the
// float32 parameters.
static const bf16* weights16(const GPT2BF16* m, const float* p) {
    return m->params16 + (p - m->base.params_memory);
}

__global__ void float_to_bf16_kernel(bf16* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2bfloat16(in[i]);
}

// The bytes the bf16 path needs on the GPU for a batch of B x T.
static size_t gpt2_bf16_bytes(GPT2Config c, size_t num_parameters, int B, int T) {
    ActivationsBF16 a;
    size_t BT = (size_t)B * T, C = c.channels;
    return 4 * num_parameters * sizeof(float) + num_parameters * sizeof(bf16) + 2 * BT * sizeof(int) +
           layout_activations_bf16(&a, NULL, c, B, T, 0) + BT * 9 * C * sizeof(bf16);
}

void gpt2_build_bf16(GPT2BF16* m, const GPT2* host, int B, int T) {
    GPT2Config c = host->config;
    size_t need = gpt2_bf16_bytes(c, host->num_parameters, B, T);
    gpu_check_memory(need, B, T);
    GPT2* base = &m->base;
    gpt2_build_gpu_parameters(base, host, B, T);
    size_t n = base->num_parameters, BT = (size_t)B * T, C = c.channels;
    cuda_check(cudaMalloc((void**)&m->params16, n * sizeof(bf16)));
    float_to_bf16_kernel<<<ceil_div(n, 256), 256>>>(m->params16, base->params_memory, n);
    launch_check(float_to_bf16_kernel);
    ActivationsBF16 a;
    cuda_check(cudaMalloc((void**)&m->acts_memory, layout_activations_bf16(&a, NULL, c, B, T, 0)));
    cuda_check(cudaMalloc((void**)&m->grads_acts_memory, BT * 9 * C * sizeof(bf16)));
    m->dresidual = m->grads_acts_memory;
    m->dbuf = m->dresidual + BT * C;
    m->dbuf4 = m->dbuf + BT * C;
    m->dqkv = m->dbuf4 + BT * 4 * C;
    base->device_bytes = need;
}

// out (N, OC) = inp (N, C) weight (OC, C)^T + bias [+ residual (N, OC)], bf16 in and out.
static void matmul_forward_bf16(bf16* out, const bf16* inp, const bf16* weight, const float* bias,
                                const bf16* residual, int N, int C, int OC) {
    MmaArgs g = mma_args(inp, C, weight, C, out, OC, N, OC, C);
    g.bias = bias;
    g.residual = residual;
    matmul_mma(g, false, true, false);
}

// out = gelu(pre), pre (N, OC) = inp (N, C) weight (OC, C)^T + bias: the MLP's first layer with
// its activation, both outputs kept (the backward needs pre).
static void matmul_gelu_forward_bf16(bf16* out, bf16* pre, const bf16* inp, const bf16* weight,
                                     const float* bias, int N, int C, int OC) {
    MmaArgs g = mma_args(inp, C, weight, C, out, OC, N, OC, C);
    g.bias = bias;
    g.aux = pre;
    g.epilogue = EPI_GELU;
    matmul_mma(g, false, true, false);
}

// dinp (N, C) = dout (N, OC) weight (OC, C), written (not accumulated), times gelu'(gelu_pre)
// when gelu_pre is given (the product's input was gelu(gelu_pre)); dweight (OC, C) += dout^T inp
// and dbias (OC) += the column sums of dout, in float32.
static void matmul_backward_bf16(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                 const bf16* weight, const bf16* gelu_pre, int N, int C, int OC) {
    MmaArgs g = mma_args(dout, OC, weight, C, dinp, C, N, C, OC);  // B(k=o, n=c) = weight[o*C + c]
    if (gelu_pre != NULL) {
        g.aux = (bf16*)gelu_pre;
        g.epilogue = EPI_GELU_BACKWARD;
    }
    matmul_mma(g, false, false, false);
    g = mma_args(dout, OC, inp, C, dweight, C, OC, C, N);  // A(o, row) = dout[row*OC + o]: transposed
    g.accumulate = 1;
    matmul_mma(g, true, false, true);
    if (dbias != NULL) bias_backward_gpu(dbias, dout, N, OC);
}

// The forward pass, as gpt2_forward_gpu, in bf16. With targets, the classifier overwrites the
// logits with the gradient of the mean loss.
void gpt2_forward_bf16(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    GPT2BF16* m = (GPT2BF16*)model;
    GPT2Config c = model->config;
    int C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size, N = B * T;
    model->B = B;
    model->T = T;
    cuda_check(cudaMemcpy(model->inputs, inputs, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    ParameterTensors p = model->params;
    ActivationsBF16 a;
    layout_activations_bf16(&a, m->acts_memory, c, B, T, 0);
    encoder_forward_gpu(a.encoded, model->inputs, p.wte, p.wpe, B, T, C);
    const bf16* x = a.encoded;  // the residual stream entering block l
    for (int l = 0; l < c.num_layers; l++) {
        ParameterTensors w = parameters_of_layer(p, c, l);
        ActivationsBF16 al;
        layout_activations_bf16(&al, m->acts_memory, c, B, T, l);
        layernorm_forward_gpu(al.ln1, al.ln1_mean, al.ln1_rstd, x, w.ln1w, w.ln1b, B, T, C);
        matmul_forward_bf16(al.qkv, al.ln1, weights16(m, w.qkvw), w.qkvb, NULL, N, C, 3 * C);
        flash_attention_forward(al.atty, al.att_lse, al.qkv, B, T, C, NH);
        matmul_forward_bf16(al.residual2, al.atty, weights16(m, w.attprojw), w.attprojb, x, N, C, C);
        layernorm_forward_gpu(al.ln2, al.ln2_mean, al.ln2_rstd, al.residual2, w.ln2w, w.ln2b, B, T, C);
        matmul_gelu_forward_bf16(al.fch_gelu, al.fch, al.ln2, weights16(m, w.fcw), w.fcb, N, C, 4 * C);
        matmul_forward_bf16(al.residual3, al.fch_gelu, weights16(m, w.fcprojw), w.fcprojb, al.residual2, N, 4 * C, C);
        x = al.residual3;
    }
    layernorm_forward_gpu(a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnfw, p.lnfb, B, T, C);
    matmul_forward_bf16(a.logits, a.lnf, weights16(m, p.wte), NULL, NULL, N, C, Vp);
    model->mean_loss = -1.0f;
    if (targets == NULL) return;
    cuda_check(cudaMemcpy(model->targets, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    fused_classifier_gpu(a.logits, a.losses, a.logits, model->targets, B, T, c.vocab_size, Vp);
    gpu_mean_loss(model, a.losses, N);
}

// The backward pass of the last forward pass (which had targets), as gpt2_backward_gpu. The
// gradient of the residual stream, dresidual, runs from the top down: each block's two halves
// read it as the gradient of their output (their products end in the residual add, whose
// gradient passes through unchanged) and add their input's gradient into it (layernorm_backward).
void gpt2_backward_bf16(GPT2* model) {
    GPT2BF16* m = (GPT2BF16*)model;
    GPT2Config c = model->config;
    int B = model->B, T = model->T, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size, N = B * T;
    ParameterTensors p = model->params, g = model->grads;
    ActivationsBF16 a, last;
    layout_activations_bf16(&a, m->acts_memory, c, B, T, 0);
    layout_activations_bf16(&last, m->acts_memory, c, B, T, c.num_layers - 1);
    bf16 *dres = m->dresidual, *dbuf = m->dbuf, *dbuf4 = m->dbuf4, *dqkv = m->dqkv;
    matmul_backward_bf16(dbuf, g.wte, NULL, a.logits, a.lnf, weights16(m, p.wte), NULL, N, C, Vp);
    cuda_check(cudaMemset(dres, 0, (size_t)N * C * sizeof(bf16)));
    layernorm_backward_gpu(dres, g.lnfw, g.lnfb, dbuf, last.residual3, p.lnfw, a.lnf_mean, a.lnf_rstd, B, T, C);
    for (int l = c.num_layers - 1; l >= 0; l--) {
        ParameterTensors w = parameters_of_layer(p, c, l), dw = parameters_of_layer(g, c, l);
        ActivationsBF16 al, prev;
        layout_activations_bf16(&al, m->acts_memory, c, B, T, l);
        layout_activations_bf16(&prev, m->acts_memory, c, B, T, l > 0 ? l - 1 : 0);
        const bf16* x = l == 0 ? a.encoded : prev.residual3;  // the block's input
        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2)))
        matmul_backward_bf16(dbuf4, dw.fcprojw, dw.fcprojb, dres, al.fch_gelu, weights16(m, w.fcprojw), al.fch,
                             N, 4 * C, C);
        matmul_backward_bf16(dbuf, dw.fcw, dw.fcb, dbuf4, al.ln2, weights16(m, w.fcw), NULL, N, C, 4 * C);
        layernorm_backward_gpu(dres, dw.ln2w, dw.ln2b, dbuf, al.residual2, w.ln2w, al.ln2_mean, al.ln2_rstd, B, T, C);
        // attention: residual2 = x + attproj(attention(qkv(ln1)))
        matmul_backward_bf16(dbuf, dw.attprojw, dw.attprojb, dres, al.atty, weights16(m, w.attprojw), NULL, N, C, C);
        flash_attention_backward(dqkv, dbuf, al.qkv, al.atty, al.att_lse, B, T, C, NH);
        matmul_backward_bf16(dbuf, dw.qkvw, dw.qkvb, dqkv, al.ln1, weights16(m, w.qkvw), NULL, N, C, 3 * C);
        layernorm_backward_gpu(dres, dw.ln1w, dw.ln1b, dbuf, x, w.ln1w, al.ln1_mean, al.ln1_rstd, B, T, C);
    }
    encoder_backward_gpu(g.wte, g.wpe, (const bf16*)dres, model->inputs, B, T, C);
}

void gpt2_update_bf16(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
    adamw_update_gpu(model, ((GPT2BF16*)model)->params16, lr, beta1, beta2, eps, weight_decay, t);
}

void gpt2_free_bf16(GPT2BF16* m) {
    cuda_check(cudaFree(m->params16));
    cuda_check(cudaFree(m->acts_memory));
    cuda_check(cudaFree(m->grads_acts_memory));
    gpt2_free_gpu(&m->base);
}

static void gpt2_logits_to_host_bf16(const GPT2* model, int position, float* out) {
    const GPT2BF16* m = (const GPT2BF16*)model;
    int Vp = model->config.padded_vocab_size;
    ActivationsBF16 a;
    layout_activations_bf16(&a, m->acts_memory, model->config, model->B, model->T, 0);
    uint16_t* bits = (uint16_t*)malloc_check((size_t)Vp * sizeof(uint16_t));
    cuda_check(cudaMemcpy(bits, a.logits + (size_t)position * Vp, (size_t)Vp * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (int i = 0; i < Vp; i++) out[i] = bf16_to_float(bits[i]);
    free(bits);
}

// Peak bf16 tensor-core throughput, dense, float32 accumulation: SMs x clock x flops per SM per
// clock, which is 2048 on A100 (8.0), 1024 on the 8.6 / 8.9 data-centre parts (A10, L4, L40;
// GeForce cards do half that with float32 accumulation) and 4096 on H100 (9.0, counted for its
// wgmma instructions; mma.sync, which these kernels use, reaches only part of it).
static double gpu_peak_flops_bf16(void) {
    int major = gpu_info.prop.major, minor = gpu_info.prop.minor;
    double per_clock = major >= 9 ? 4096 : (major == 8 && minor == 0) ? 2048 : 1024;
    return gpu_info.prop.multiProcessorCount * gpu_info.clock_ghz * 1e9 * per_clock;
}

static const Trainer GPU_TRAINER_BF16 = {
    gpt2_forward_bf16, gpt2_zero_grad_gpu, gpt2_backward_bf16, gpt2_all_reduce_gpu, gpt2_clip_gradients_gpu,
    gpt2_update_bf16, gpt2_logits_to_host_bf16, gpt2_to_host_gpu, gpu_synchronize, gpu_peak_flops_bf16,
};

// ---------- main ----------
#ifndef TRAIN_GPU_NO_MAIN  // dev/gpu/gpu_check.cu defines it to call the functions above

// -p: bf16 where the GPU has bf16 tensor cores (compute capability 8.0 and up), else fp32.
static int gpu_use_bf16(const char* precision) {
    int capable = gpu_info.prop.major >= 8;
    if (precision == NULL) return capable;
    if (strcmp(precision, "fp32") == 0) return 0;
    if (strcmp(precision, "bf16") != 0) fail("-p expects fp32 or bf16, got %s", precision);
    if (!capable) {
        fail("-p bf16 needs a GPU of compute capability 8.0 or newer (this one: %s, %d.%d): use -p fp32",
             gpu_info.prop.name, gpu_info.prop.major, gpu_info.prop.minor);
    }
    return 1;
}

// Checked before the run's output directory is made: flash attention keeps a head's row in
// registers, so it is compiled for a few head sizes.
static void check_model_bf16(GPT2Config c) {
    int hs = c.channels / c.num_heads;
    if (!flash_attention_supports(hs)) {
        fail("-p bf16: flash attention is built for head sizes 16, 32, 64 and 128, and this model's is %d "
             "(C=%d, NH=%d): use -p fp32", hs, c.channels, c.num_heads);
    }
}

int main(int argc, char** argv) {
    parallel_init(&argc, &argv);  // started by mpirun: one rank of a data-parallel run, one GPU each
    rank0_first_begin();          // a bad option, input or GPU is reported once, by rank 0
    TrainConfig cfg = train_config_parse(argc, argv, train_config_defaults(1));  // d12, T=1024
    gpu_init();  // no device: one line, exit 1
    int bf16 = gpu_use_bf16(cfg.precision);
    rank0_first_end();
    char key[1024];
    train_config_key(&cfg, key, sizeof(key));
    parallel_check_same("options", key);
    if (procs.rank == 0) gpu_print_info(bf16);
    Run run;
    run_open(&run, cfg, bf16 ? check_model_bf16 : NULL);  // the model on the host, the data, -o DIR
    if (procs.mpi) nccl_init();
    size_t free_bytes, total_bytes;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (procs.rank == 0) {
        printf("largest batch at T=%d in the %.1f GiB of free GPU memory: B=%d%s\n", cfg.T, free_bytes / 1073741824.0,
               largest_batch(bf16 ? gpt2_bf16_bytes : gpt2_fp32_bytes, run.model.config, run.model.num_parameters,
                             cfg.T, free_bytes), procs.size > 1 ? " per GPU" : "");
    }
    if (bf16) {
        GPT2BF16 model;
        gpt2_build_bf16(&model, &run.model, cfg.B, cfg.T);  // a copy of it on the GPU, trained there
        run_train(&run, &GPU_TRAINER_BF16, &model.base);
        gpt2_free_bf16(&model);
    } else {
        GPT2 model;
        gpt2_build_gpu(&model, &run.model, cfg.B, cfg.T);
        run_train(&run, &GPU_TRAINER, &model);
        gpt2_free_gpu(&model);
    }
    run_close(&run);
    if (procs.mpi) nccl_free();
    parallel_finalize();
    return 0;
}

#endif
