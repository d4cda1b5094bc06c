// dev/kernels/10_matmul_wgmma.cu: the linear layer's forward on Hopper's warpgroup instruction,
// wgmma, through the wrappers of gpt2/gpu/hopper.cuh (bf16 inp, weight and out, float32 bias and
// accumulation, as in 08 and 09). Needs an sm_90a build and a compute capability 9.0 GPU; on
// any other the step says SKIP.
//
// What changed from 09: the instruction. mma.sync is a warp's: a 16x8 tile of D, its operands
// first copied from shared memory into the warp's registers by ldmatrix. wgmma is a warpgroup's
// (4 warps, 128 threads): m64nNk16, here a 64x128 tile of D per instruction, 16 times the work of
// one mma.sync, and it reads A and B straight from shared memory through two 64-bit descriptors
// (the tile's address, the bytes between its 8-row groups, the swizzle): no ldmatrix, no operand
// registers, and it runs asynchronously: issued, then waited for. It is also the only way to the
// full rate of Hopper's tensor cores, the peak LIMIT_BF16 counts: mma.sync reaches only part of it.
//
// Everything else is 08 again, to show that one change alone: a block of 2 warpgroups computes a
// 128x128 tile of out, each warpgroup 64 rows of it, 64 float32 accumulators a thread. For each
// 64-wide slice of k, every thread copies 16-byte chunks of inp and weight into shared memory with
// plain loads and stores, then the 4 wgmmas of k16, then a wait; no pipelining. wgmma reads shared
// memory in a layout of its own: rows of 64 bf16 (128 bytes) with the 128-byte swizzle, chunk c of
// row r stored at chunk c ^ (r % 8), which spreads each column of chunks over all 32 banks as 09's
// swizzle did. Both operands are K-major (rows of k: inp's rows and weight's rows, as everywhere
// in the ladder), so both take the same descriptor, and a k16 step is the start address + 32 bytes.
// The stores are the ordinary ("generic") proxy's and wgmma reads through the async proxy: a
// fence_proxy_async orders the two before the barrier. The epilogue writes out from the
// accumulators, bias added, as 08 does.
//
// The launcher asks C to be a multiple of 8, as 08's: a chunk of 8 bf16 lies wholly inside a row or
// wholly past its end, where the copy writes zeros (so the last k slice may be partial).
// What bounds it: the tensor cores wait while every slice is loaded through registers, and the
// threads wait while the tensor cores work. Next (11): TMA copies into a ring of stages.

#include "matmul.cuh"
#include "../../gpt2/gpu/hopper.cuh"  // wgmma_bf16, wgmma_descriptor, fence_proxy_async

#define BM10 128  // 2 warpgroups x 64 rows
#define BN10 128  // wgmma's N
#define BK10 64   // 64 bf16: one 128-byte swizzled row
#define NT10 256
#define TILE10 (BM10 * BK10 * 2)  // bytes of one tile, of A or of B (BM10 = BN10)

// The byte offset of 16-byte chunk c of row r in a swizzled tile of 128-byte rows.
__device__ __forceinline__ int swizzle128(int r, int c) { return r * 128 + ((c ^ (r % 8)) * 16); }

__global__ void __launch_bounds__(NT10) matmul_forward_kernel10(bf16* out, const bf16* inp, const bf16* weight,
                                                                const float* bias, int M, int N, int K) {
    // the tiles 1024-byte aligned, as the swizzle needs (it is read from the address bits)
    __shared__ unsigned char smem10[2 * TILE10 + 1024];
    unsigned char* As = smem10 + (1024 - smem_address(smem10) % 1024) % 1024;  // inp's rows m0.., swizzled
    unsigned char* Ws = As + TILE10;  // weight's rows n0..: B, K-major
    int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
    int m0 = blockIdx.y * BM10, n0 = blockIdx.x * BN10;
    float d[64];  // this thread's part of the warpgroup's 64x128 tile (layout: wgmma_bf16)
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK10) {
        // each tile: 128 rows of 8 chunks of 8 bf16
        for (int f = tid; f < BM10 * BK10 / 8; f += NT10) {
            int r = f / 8, c = f % 8, k = k0 + c * 8;
            uint4 zero = {0u, 0u, 0u, 0u};  // outside the matrices: adds nothing
            *reinterpret_cast<uint4*>(As + swizzle128(r, c)) =
                m0 + r < M && k < K ? *reinterpret_cast<const uint4*>(inp + (size_t)(m0 + r) * K + k) : zero;
            *reinterpret_cast<uint4*>(Ws + swizzle128(r, c)) =
                n0 + r < N && k < K ? *reinterpret_cast<const uint4*>(weight + (size_t)(n0 + r) * K + k) : zero;
        }
        fence_proxy_async();  // the stores, visible to wgmma's reads
        __syncthreads();
        wgmma_fence();
        wgmma_hold<64>(d);
#pragma unroll
        for (int ks = 0; ks < BK10 / 16; ks++) {
            // K-major, 128B swizzle: 8-row groups 1024 bytes apart; k16 = 32 bytes further along
            uint64_t a = wgmma_descriptor(smem_address(As + wg * 64 * 128 + ks * 32), 16, 1024, WGMMA_SWIZZLE_128B);
            uint64_t b = wgmma_descriptor(smem_address(Ws + ks * 32), 16, 1024, WGMMA_SWIZZLE_128B);
            wgmma_bf16<BN10, 0, 0>(d, a, b, 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold<64>(d);
        __syncthreads();  // every warpgroup done reading before the next slice overwrites the tiles
    }

    // out from the accumulators: d[4j + e] is row g + 8 (e / 2), column 8j + 2q + e % 2 of the
    // warp's 16 rows
    int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int j = 0; j < BN10 / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int m = m0 + wg * 64 + warp * 16 + g + (e / 2) * 8, n = n0 + j * 8 + 2 * q + e % 2;
            if (m < M && n < N) out[(size_t)m * N + n] = __float2bfloat16(d[4 * j + e] + bias[n]);
        }
}

static void matmul_forward10(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int T,
                             int C, int OC) {
    if (C % 8 != 0) {
        fail("matmul_forward10: C = %d is not a multiple of 8: the 16-byte loads need rows of inp and weight that "
             "start 16-byte aligned", C);
    }
    dim3 grid(ceil_div(OC, BN10), ceil_div(B * T, BM10));
    if (grid.y > 65535) fail("matmul_forward10: B*T = %d needs more than 65535 blocks along y", B * T);
    matmul_forward_kernel10<<<grid, NT10>>>(out, inp, weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel10);
}

int main(void) {
    return matmul_step_main_sm90a({"10", "matmul", "wgmma: a warpgroup's 64x128, plain loads"}, matmul_forward10);
}
