// dev/kernels/03_matmul_smem_tiles.cu: the linear layer's forward on the GPU, a block per 32x32
// tile of out, its operands staged in shared memory.
//
// What changed from 02: a block of 32x32 threads computes a 32x32 tile of out, one output per
// thread again (as in 01), and walks k in slices of 32. For each slice it copies a 32x32 tile of
// inp (rows m0.., columns k0..) and one of weight (rows n0..) into shared memory, then every
// thread reads its row of the inp tile and its row of the weight tile from there. Each value
// fetched from global memory is now used by 32 threads: global traffic falls 32-fold, to
// 2 M N K / 32 floats, and L2 no longer bounds the step.
//
// Coalescing: both operands run along k, so thread (ty, tx) copies element (ty, tx) of each tile
// from row ty, column k0 + tx: a warp (one ty, tx = 0..31) reads 128 contiguous bytes of one row.
//
// Bank conflicts: shared memory has 32 banks, 4 bytes wide; float i lives in bank i % 32, and a
// warp's 32 reads take one pass if they hit 32 different banks (or the same address, a broadcast).
// In the loop over k a warp (one ty) reads As[ty][k], one address (a broadcast), and Ws[tx][k]
// for tx = 0..31. Stored as it lies in global memory, Ws's rows would be 32 floats long, and those
// 32 reads would all fall in bank k % 32: 32 passes, a 32-way conflict. One float of padding per
// row (rows of 33) puts Ws[tx][k] in bank (tx + k) % 32: 32 different banks. The weight's (OC, C)
// layout is why: a thread's output needs a row of weight, and the warp reads across those rows.
//
// What bounds it now: shared memory. Each FMA needs two shared-memory loads (an As and a Ws
// value), and an SM issues shared-memory loads at a fraction of its FMA rate (32 lanes' worth a
// clock against 128 FMAs), so the FMA units wait. Next (04): each thread computes several outputs
// and reuses a value it loaded, from a register.

#include "matmul.cuh"

#define TILE3 32  // BM = BN = BK: the block's tile of out, and the slice of k it stages

__global__ void matmul_forward_kernel3(float* out, const float* inp, const float* weight, const float* bias, int M,
                                       int N, int K) {
    __shared__ float As[TILE3][TILE3];      // As[m][k]: a broadcast in the loop, no padding needed
    __shared__ float Ws[TILE3][TILE3 + 1];  // Ws[n][k], rows padded to 33 floats: no bank conflicts
    int tx = threadIdx.x, ty = threadIdx.y;
    int m0 = blockIdx.y * TILE3, n0 = blockIdx.x * TILE3;
    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE3) {
        // zeros outside the matrices: they add nothing to the sums
        int k = k0 + tx;
        As[ty][tx] = m0 + ty < M && k < K ? inp[(size_t)(m0 + ty) * K + k] : 0.0f;
        Ws[ty][tx] = n0 + ty < N && k < K ? weight[(size_t)(n0 + ty) * K + k] : 0.0f;
        __syncthreads();  // the tiles complete before anyone reads them
        for (int kk = 0; kk < TILE3; kk++) sum += As[ty][kk] * Ws[tx][kk];
        __syncthreads();  // everyone done reading before the next slice overwrites them
    }
    int m = m0 + ty, n = n0 + tx;
    if (m < M && n < N) out[(size_t)m * N + n] = sum + bias[n];
}

static void matmul_forward3(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                            int C, int OC) {
    dim3 block(TILE3, TILE3);  // tx along n (a warp writes 32 consecutive outputs), ty along m
    dim3 grid(ceil_div(OC, TILE3), ceil_div(B * T, TILE3));
    matmul_forward_kernel3<<<grid, block>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel3);
}

int main(void) {
    return matmul_step_main({"03", "matmul", "shared-memory tiles of 32x32: 32x reuse"}, matmul_forward3);
}
