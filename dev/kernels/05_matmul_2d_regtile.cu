// dev/kernels/05_matmul_2d_regtile.cu: the linear layer's forward on the GPU, each thread an 8x8
// block of out, an outer product of registers per k.
//
// What changed from 04: each thread computes TM x TN = 8 x 8 outputs (rows ty*8.., columns
// tx*8.. of the block's tile). For each k it loads 8 inp values and 8 weight values from shared
// memory into registers and does their outer product, 64 FMAs: 16 shared-memory loads per 64
// FMAs, 0.25 per FMA, where 04 needed 1.125. Every value a thread loads is used 8 times from a
// register. A block of 256 threads (16 x 16) now covers a 128x128 tile, so each value fetched from
// global memory serves 128 outputs: 2 M N K / 128 floats of global traffic, half of 04's.
//
// The 64 accumulators and the 16 operands live in registers, and the compiler needs well over 100
// a thread. That is what the 2D tile costs: fewer threads fit on an SM (its 64K registers hold one
// block of 256 such threads, 8 warps, where 04's 512-thread blocks fitted twice), so the arithmetic
// must hide the latency of the loads by itself (instruction-level parallelism: 64 independent FMAs
// a k).
//
// The tiles keep 04's layouts (k-contiguous rows as in global memory, Ws padded to 9 floats), and
// here they conflict. A warp is 2 rows ty x 16 columns tx of threads. Ws[tx*8 + j][k]: the 16 tx
// read rows 8 apart, 72 floats, which fall in only 4 banks ((72 tx) % 32 = 8 tx % 32): a 4-way
// conflict on every weight load. As[ty*8 + i][k]: the 2 ty read rows 8 apart, 64 floats, the same
// bank: 2-way. And each of the 16 loads moves 4 bytes: 16 load instructions per 64 FMAs.
// Next (06): float4 loads from global memory, and k-major shared tiles that a thread reads as
// float4s without conflicts.

#include "matmul.cuh"

#define BM5 128
#define BN5 128
#define BK5 8
#define TM5 8
#define TN5 8
#define NT5 ((BM5 / TM5) * (BN5 / TN5))  // 256 threads

__global__ void matmul_forward_kernel5(float* out, const float* inp, const float* weight, const float* bias, int M,
                                       int N, int K) {
    __shared__ float As[BM5][BK5];      // As[m][k]
    __shared__ float Ws[BN5][BK5 + 1];  // Ws[n][k], rows of 9 as in 04
    int tid = threadIdx.x;
    int tx = tid % (BN5 / TN5), ty = tid / (BN5 / TN5);  // this thread: rows ty*8.., columns tx*8..
    int m0 = blockIdx.y * BM5, n0 = blockIdx.x * BN5;
    float acc[TM5][TN5];  // in registers: every index is known at compile time once the loops unroll
#pragma unroll
    for (int i = 0; i < TM5; i++)
#pragma unroll
        for (int j = 0; j < TN5; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK5) {
        // 1024 elements per tile, 4 per thread; 8 consecutive threads copy one row's 8 floats
        for (int f = tid; f < BM5 * BK5; f += NT5) {
            int r = f / BK5, c = f % BK5, k = k0 + c;  // zeros outside the matrices
            As[r][c] = m0 + r < M && k < K ? inp[(size_t)(m0 + r) * K + k] : 0.0f;
            Ws[r][c] = n0 + r < N && k < K ? weight[(size_t)(n0 + r) * K + k] : 0.0f;
        }
        __syncthreads();  // the tiles complete before anyone reads them
#pragma unroll
        for (int kk = 0; kk < BK5; kk++) {
            float a[TM5], b[TN5];
#pragma unroll
            for (int i = 0; i < TM5; i++) a[i] = As[ty * TM5 + i][kk];
#pragma unroll
            for (int j = 0; j < TN5; j++) b[j] = Ws[tx * TN5 + j][kk];
#pragma unroll
            for (int i = 0; i < TM5; i++)
#pragma unroll
                for (int j = 0; j < TN5; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // everyone done reading before the next slice overwrites them
    }
#pragma unroll
    for (int i = 0; i < TM5; i++) {
        int m = m0 + ty * TM5 + i;
        if (m >= M) break;
#pragma unroll
        for (int j = 0; j < TN5; j++) {
            int n = n0 + tx * TN5 + j;
            if (n < N) out[(size_t)m * N + n] = acc[i][j] + bias[n];
        }
    }
}

static void matmul_forward5(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                            int C, int OC) {
    dim3 grid(ceil_div(OC, BN5), ceil_div(B * T, BM5));
    matmul_forward_kernel5<<<grid, NT5>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel5);
}

int main(void) {
    return matmul_step_main({"05", "matmul", "2D register tile: 8x8 outputs per thread"}, matmul_forward5);
}
