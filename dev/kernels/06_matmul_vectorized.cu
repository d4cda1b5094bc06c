// dev/kernels/06_matmul_vectorized.cu: the linear layer's forward on the GPU, 05's 8x8 register
// tiles with float4 loads and k-major shared tiles that are read without bank conflicts.
//
// What changed from 05: how the tiles move, the arithmetic is the same.
//  - Global to shared: each thread copies 4 consecutive k of a row of inp (or of weight) as one
//    float4, one 16-byte load where 05 made four 4-byte ones: a quarter of the load instructions
//    for the same bytes (a warp still copies 16 rows' runs of 32 bytes, whole sectors).
//  - The shared tiles are k-major, As[k][m] and Ws[k][n]: the float4 read along k is stored
//    transposed, its 4 values into 4 rows. In the loop, a thread's values for one k then lie side
//    by side, and it reads them as float4s: 4 loads for 8 + 8 values where 05 made 16.
//  - No bank conflicts. 05 had a 4-way conflict on every weight read (the 16 tx of a warp read
//    rows 72 floats apart, in 4 banks) and a 2-way one on every inp read (2 ty, rows 64 floats
//    apart, one bank). Here a thread's 8 columns are two groups of 4, 64 apart (tx*4 and
//    64 + tx*4), and likewise its 8 rows: a float4 load of a warp is served a quarter warp at a
//    time, and the 8 threads of a quarter warp (8 consecutive tx, one ty) read 8 consecutive
//    float4s of Ws[k] (128 bytes: the 32 banks once) and one float4 of As[k] (a broadcast).
//    A thread's outputs are then not one 8x8 block but 4 blocks of 4x4; which outputs a thread
//    owns does not change the arithmetic. The transposed stores: a warp's 32 threads copy rows
//    m = 0..15 at k = 0..3 (kq = 0) and k = 4..7 (kq = 4); storing As[kq + c][m] for c = 0..3,
//    rows of 128 floats would put kq = 0 and kq = 4 in the same banks (4 rows = 512 floats apart,
//    a multiple of 32): 2-way. Rows padded to 132 floats move kq = 4 by 528 floats, 16 banks:
//    32 different banks. (132 is a multiple of 4: the float4 reads stay 16-byte aligned.)
//
// The launcher asks C to be a multiple of 4, so that every row of inp and weight starts 16-byte
// aligned (cudaMalloc's pointers are) and a float4 never straddles the end of a row.
// What bounds it now: with 4 shared-memory loads per 64 FMAs, shared memory no longer does; what
// keeps the FMA units from their peak is the copy of each k slice, which nothing in the block
// overlaps (every thread waits at the __syncthreads), hidden only by the other block on the SM.
// Next (07): the project's own SGEMM, which tunes this kernel further and handles every shape.

#include "matmul.cuh"

#define BM6 128
#define BN6 128
#define BK6 8
#define TM6 8
#define TN6 8
#define NT6 ((BM6 / TM6) * (BN6 / TN6))  // 256 threads
#define PAD6 4                           // floats of padding per shared row (above)

// p[r*K + k .. k+3], or zeros when row r is past R or k past K (K a multiple of 4: all or nothing)
__device__ __forceinline__ float4 load_row4(const float* p, int r, int R, int k, int K) {
    if (r >= R || k >= K) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    return *reinterpret_cast<const float4*>(p + (size_t)r * K + k);
}

__global__ void matmul_forward_kernel6(float* out, const float* inp, const float* weight, const float* bias, int M,
                                       int N, int K) {
    __shared__ __align__(16) float As[BK6][BM6 + PAD6];  // As[k][m]
    __shared__ __align__(16) float Ws[BK6][BN6 + PAD6];  // Ws[k][n]
    int tid = threadIdx.x;
    int tx = tid % (BN6 / TN6), ty = tid / (BN6 / TN6);
    int m0 = blockIdx.y * BM6, n0 = blockIdx.x * BN6;
    // the float4 this thread copies of each tile: row r, k = kq .. kq+3 (BK6 / 4 = 2 per row)
    int r = tid / (BK6 / 4), kq = tid % (BK6 / 4) * 4;
    static_assert(BM6 * BK6 / 4 == NT6 && BN6 * BK6 / 4 == NT6, "one float4 of each tile per thread");
    float acc[TM6][TN6];
#pragma unroll
    for (int i = 0; i < TM6; i++)
#pragma unroll
        for (int j = 0; j < TN6; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += BK6) {
        float4 a = load_row4(inp, m0 + r, M, k0 + kq, K);
        float4 w = load_row4(weight, n0 + r, N, k0 + kq, K);
        As[kq + 0][r] = a.x; As[kq + 1][r] = a.y; As[kq + 2][r] = a.z; As[kq + 3][r] = a.w;
        Ws[kq + 0][r] = w.x; Ws[kq + 1][r] = w.y; Ws[kq + 2][r] = w.z; Ws[kq + 3][r] = w.w;
        __syncthreads();  // the tiles complete before anyone reads them
#pragma unroll
        for (int kk = 0; kk < BK6; kk++) {
            float av[TM6], bv[TN6];  // rows ty*4 + 0..3 and 64 + ty*4 + 0..3; columns likewise
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float4 x = *reinterpret_cast<const float4*>(&As[kk][h * (BM6 / 2) + ty * 4]);
                float4 y = *reinterpret_cast<const float4*>(&Ws[kk][h * (BN6 / 2) + tx * 4]);
                av[4 * h + 0] = x.x; av[4 * h + 1] = x.y; av[4 * h + 2] = x.z; av[4 * h + 3] = x.w;
                bv[4 * h + 0] = y.x; bv[4 * h + 1] = y.y; bv[4 * h + 2] = y.z; bv[4 * h + 3] = y.w;
            }
            // 05's outer product and write-back, repeated here on purpose: each ladder file reads alone.
#pragma unroll
            for (int i = 0; i < TM6; i++)
#pragma unroll
                for (int j = 0; j < TN6; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();  // everyone done reading before the next slice overwrites them
    }
#pragma unroll
    for (int i = 0; i < TM6; i++) {
        int m = m0 + (i / 4) * (BM6 / 2) + ty * 4 + i % 4;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN6; j++) {
            int n = n0 + (j / 4) * (BN6 / 2) + tx * 4 + j % 4;
            if (n < N) out[(size_t)m * N + n] = acc[i][j] + bias[n];
        }
    }
}

static void matmul_forward6(float* out, const float* inp, const float* weight, const float* bias, int B, int T,
                            int C, int OC) {
    if (C % 4 != 0) {
        fail("matmul_forward6: C = %d is not a multiple of 4: the float4 loads need rows of inp and weight that "
             "start 16-byte aligned", C);
    }
    dim3 grid(ceil_div(OC, BN6), ceil_div(B * T, BM6));
    matmul_forward_kernel6<<<grid, NT6>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel6);
}

int main(void) {
    return matmul_step_main({"06", "matmul", "float4 loads, conflict-free k-major tiles"}, matmul_forward6);
}
