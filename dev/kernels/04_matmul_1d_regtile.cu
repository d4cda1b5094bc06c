// dev/kernels/04_matmul_1d_regtile.cu: the linear layer's forward on the GPU, each thread a strip
// of 8 outputs down a column of out, one weight value from a register for 8 FMAs.
//
// What changed from 03: a block of 512 threads computes a 64x64 tile of out, each thread TM = 8
// outputs of one column n (rows ty*8 .. ty*8+7 of the tile). For each k the thread loads the
// weight value Ws[n][k] once into a register and uses it for 8 FMAs, one per row, reading the 8
// inp values As[m][k] (the same for the whole warp: broadcasts). Shared-memory loads per FMA fall
// from 2 (03) to (1 + 8) / 8 = 1.125: 03 was bound by them, so the FMA units now wait less. The
// bigger tile (64x64, was 32x32) also halves the global traffic again: each value fetched is used
// by 64 threads, 2 M N K / 64 floats in all.
//
// The k slice is now 8 wide (BK = 8): the 64x8 tiles of inp and of weight are 512 floats each, one
// per thread. A warp copies 4 rows of 8 floats: 4 runs of 32 contiguous bytes, each a whole
// 32-byte sector of the memory system, so no byte fetched is wasted, though the warp touches 4
// lines where 03's touched one.
//
// Shared-memory layouts, as 03's: both tiles k-contiguous, as the (OC, C) weight and inp lie in
// global memory. As[m][k] is read by a warp at one address (a warp is 32 threads of one ty, so one
// row m): a broadcast, no padding needed. Ws[n][k] is read at 32 different rows n: rows padded to
// 9 floats put them in banks (9n + k) % 32, all different since 9 and 32 share no factor.
//
// What bounds it now: still shared memory, at 9 loads per 8 FMAs. Next (05): a 2D tile of
// outputs per thread, whose values of both operands are reused from registers.

#include "matmul.cuh"

#define BM4 64  // rows of out per block
#define BN4 64  // columns of out per block
#define BK4 8   // the slice of k staged at a time
#define TM4 8   // rows of out per thread

__global__ void matmul_forward_kernel4(float* out, const float* inp, const float* weight, const float* bias, int M,
                                       int N, int K) {
    __shared__ float As[BM4][BK4];      // As[m][k]: read as broadcasts
    __shared__ float Ws[BN4][BK4 + 1];  // Ws[n][k], rows of 9: no bank conflicts in the loop
    int tid = threadIdx.x;
    int tx = tid % BN4, ty = tid / BN4;  // this thread: column tx, rows ty*TM4 .. +TM4 of the tile
    int m0 = blockIdx.y * BM4, n0 = blockIdx.x * BN4;
    // the element this thread copies of each tile: row r, column c (8 threads per row: 32 bytes)
    int r = tid / BK4, c = tid % BK4;
    float acc[TM4] = {0.0f};  // in registers: every index is known at compile time once the loops unroll
    for (int k0 = 0; k0 < K; k0 += BK4) {
        int k = k0 + c;  // zeros outside the matrices
        As[r][c] = m0 + r < M && k < K ? inp[(size_t)(m0 + r) * K + k] : 0.0f;
        Ws[r][c] = n0 + r < N && k < K ? weight[(size_t)(n0 + r) * K + k] : 0.0f;
        __syncthreads();  // the tiles complete before anyone reads them
#pragma unroll
        for (int kk = 0; kk < BK4; kk++) {
            float w = Ws[tx][kk];  // one load, TM4 FMAs
#pragma unroll
            for (int i = 0; i < TM4; i++) acc[i] += As[ty * TM4 + i][kk] * w;
        }
        __syncthreads();  // everyone done reading before the next slice overwrites them
    }
    int n = n0 + tx;
    if (n >= N) return;
#pragma unroll
    for (int i = 0; i < TM4; i++) {
        int m = m0 + ty * TM4 + i;
        if (m < M) out[(size_t)m * N + n] = acc[i] + bias[n];
    }
}

static void matmul_forward4(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                            int C, int OC) {
    static_assert(BM4 * BK4 == (BM4 / TM4) * BN4 && BN4 * BK4 == (BM4 / TM4) * BN4,
                  "each thread copies one element of each tile");
    dim3 grid(ceil_div(OC, BN4), ceil_div(B * T, BM4));
    matmul_forward_kernel4<<<grid, (BM4 / TM4) * BN4>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel4);
}

int main(void) {
    return matmul_step_main({"04", "matmul", "1D register tile: 8 outputs per thread"}, matmul_forward4);
}
