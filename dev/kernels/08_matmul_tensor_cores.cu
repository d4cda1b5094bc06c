// dev/kernels/08_matmul_tensor_cores.cu: the linear layer's forward on the tensor cores: bf16 inp
// and weight, float32 accumulation and bias, bf16 out; mma.sync through the project's wrappers.
//
// What changed from 07: the arithmetic units. A tensor core's instruction is a warp's, not a
// thread's: mma.sync.m16n8k16 multiplies a 16x16 tile of A (bf16) by a 16x8 tile of B (bf16) and
// adds the 16x8 product into float32 accumulators D: 16*8*16 = 2048 multiply-adds, 4096 FLOPs, in
// one warp instruction, where an FFMA is 32 multiply-adds. An H100's tensor cores do about 15 times
// the FLOPs of its float32 FMA units (the rate this step is measured against, LIMIT_BF16, counts
// Hopper's wgmma instructions; mma.sync reaches only part of it). bf16 halves the bytes of every
// operand as well. The product of two bf16 (8 significant bits) is exact in float32, so the
// difference from 07's results is the rounding of the inputs and of out to bf16, not the sums.
//
// The operands of an mma are spread over the warp's registers in a fixed pattern, the fragments
// (PTX ISA; gpt2/gpu/matmul_bf16.cuh and doc/gpu.md draw them). With g = lane / 4, q = lane % 4,
// each 32-bit register holding two bf16: lane (g, q) holds, of each 8x8 quarter of A and D, row g
// at columns 2q, 2q+1, and of each 8x8 half of B, column g at rows 2q, 2q+1. B is "col" (column-
// major): its columns run along k, which is exactly a row of the (OC, C) weight. So both operands
// are k-contiguous rows (inp's row m, weight's row n), as in every step before, and both are loaded
// the same way, with no transposition anywhere.
//
// The kernel, kept simple: a block of 4 warps computes a 64x64 tile of out, each warp a 32x32
// piece of it: 2 x 4 tiles of 16x8, 8 mma per 16 of k, 32 float32 accumulators per lane. For each
// 32-wide slice of k the block copies a 64x32 tile of inp and one of weight into shared memory,
// plain 16-byte loads and stores, then ldmatrix (ldmatrix_x4: four 8x8 bf16 matrices, each lane
// giving the address of one 16-byte row) turns them into fragments: for A, the four quarters of a
// 16x16 tile; for B, two 8-column tiles' two k halves. The loads, the __syncthreads and the mma
// take turns: no pipelining. The epilogue adds the bias to the fragments and writes out from them,
// two bytes per store.
//
// Bank conflicts: ldmatrix reads one 16-byte chunk from each of 8 consecutive rows. Rows of 32
// bf16 are 64 bytes, two to a 128-byte line of banks: the 8 chunks would fall in 2 sets of 4
// banks, a 4-way conflict. Rows padded by 8 bf16 to 80 bytes start 80 bytes apart, which mod 128
// is 0, 80, 32, 112, 64, 16, 96, 48: the 8 chunks cover the 32 banks once. (80 is a multiple of
// 16: the chunks stay 16-byte aligned, as ldmatrix needs.)
//
// The launcher asks C to be a multiple of 8, so that every row of inp and weight starts 16-byte
// aligned and a chunk of 8 bf16 lies wholly inside a row or wholly past its end.
// Next (09): the project's kernel: cp.async copies in a 3-stage pipeline, a swizzle instead of the
// padding, bigger warp tiles, and an epilogue staged through shared memory.

#include "matmul.cuh"
#include "../../gpt2/gpu/matmul_bf16.cuh"  // mma_bf16_16816, ldmatrix_x4: the PTX instructions, wrapped

#define BM8 64
#define BN8 64
#define BK8 32
#define LDS8 (BK8 + 8)  // bf16 per shared row: 32 of k and 8 of padding (above)
#define NT8 128         // 4 warps, 2 x 2 over the tile

__global__ void __launch_bounds__(NT8) matmul_forward_kernel8(bf16* out, const bf16* inp, const bf16* weight,
                                                              const float* bias, int M, int N, int K) {
    __shared__ __align__(16) bf16 As[BM8][LDS8];  // As[m][k]
    __shared__ __align__(16) bf16 Ws[BN8][LDS8];  // Ws[n][k]: B's columns, as mma's "col" B wants
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int m0 = blockIdx.y * BM8, n0 = blockIdx.x * BN8;
    int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // this warp's 32x32 piece of the tile
    float acc[2][4][4];  // [16-row tile i][8-column tile j][D fragment: rows g, g+8; columns 2q, 2q+1]
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK8) {
        // each tile: 64 rows of 4 chunks of 8 bf16; 4 consecutive threads copy a row's 64 bytes
        for (int f = tid; f < BM8 * BK8 / 8; f += NT8) {
            int r = f / (BK8 / 8), c = f % (BK8 / 8) * 8, k = k0 + c;
            uint4 zero = {0u, 0u, 0u, 0u};  // outside the matrices: adds nothing
            *reinterpret_cast<uint4*>(&As[r][c]) =
                m0 + r < M && k < K ? *reinterpret_cast<const uint4*>(inp + (size_t)(m0 + r) * K + k) : zero;
            *reinterpret_cast<uint4*>(&Ws[r][c]) =
                n0 + r < N && k < K ? *reinterpret_cast<const uint4*>(weight + (size_t)(n0 + r) * K + k) : zero;
        }
        __syncthreads();  // the tiles complete before any warp reads them
#pragma unroll
        for (int ks = 0; ks < BK8; ks += 16) {
            uint32_t a[2][4], b[4][2];
            // A: matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15) of the
            // 16x16 tile, which are a[0..3]; lane l gives row l % 16 of the tile, k half l / 16.
#pragma unroll
            for (int i = 0; i < 2; i++) ldmatrix_x4(a[i], &As[wm + i * 16 + lane % 16][ks + lane / 16 * 8]);
            // B, two 8-column tiles per ldmatrix: matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
            // (n 8-15, k 0-7), (n 8-15, k 8-15) are b[j][0], b[j][1], b[j+1][0], b[j+1][1].
#pragma unroll
            for (int j = 0; j < 4; j += 2) {
                uint32_t r[4];
                ldmatrix_x4(r, &Ws[wn + j * 8 + lane % 8 + lane / 16 * 8][ks + lane / 8 % 2 * 8]);
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_bf16_16816(acc[i][j], a[i], b[j]);
        }
        __syncthreads();  // every warp done reading before the next slice overwrites the tiles
    }

    // out from the fragments: acc[i][j][2h + e] is row g + 8h, column 2q + e of 16x8 tile (i, j)
    int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int m = m0 + wm + i * 16 + g + (e / 2) * 8, n = n0 + wn + j * 8 + 2 * q + e % 2;
                if (m < M && n < N) out[(size_t)m * N + n] = __float2bfloat16(acc[i][j][e] + bias[n]);
            }
}

static void matmul_forward8(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int T, int C,
                            int OC) {
    if (C % 8 != 0) {
        fail("matmul_forward8: C = %d is not a multiple of 8: the 16-byte loads need rows of inp and weight that "
             "start 16-byte aligned", C);
    }
    dim3 grid(ceil_div(OC, BN8), ceil_div(B * T, BM8));
    if (grid.y > 65535) fail("matmul_forward8: B*T = %d needs more than 65535 blocks along y", B * T);
    matmul_forward_kernel8<<<grid, NT8>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel8);
}

int main(void) {
    return matmul_step_main_bf16({"08", "matmul", "tensor cores: mma.sync on bf16, 64x64 tiles"}, matmul_forward8);
}
