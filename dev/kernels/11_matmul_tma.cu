// dev/kernels/11_matmul_tma.cu: the linear layer's forward on wgmma, its tiles copied by TMA into a
// ring of stages that mbarriers guard (gpt2/gpu/hopper.cuh). Needs an sm_90a build and a compute
// capability 9.0 GPU; on any other the step says SKIP.
//
// What changed from 10: the copies. TMA, Hopper's tensor copy engine, moves a whole 2D box of a
// matrix (here 128 rows x 64 bf16) from global to shared memory on one thread's request: no thread
// computes an address, no data passes through registers, the 128-byte swizzle that wgmma reads is
// written by the engine, and what lies past the matrix's edges arrives as zeros (a partial last k
// slice too, so any K with rows 16-byte aligned). The host describes each matrix once, in a
// tensor map (tensor_map_bf16), passed to the kernel as a __grid_constant__ parameter.
//
// The copies are asynchronous, so they can run ahead: shared memory holds STAGES11 slices of k,
// each with a "full" mbarrier. One thread announces a stage's bytes (arrive_expect_tx) and starts
// its two copies; the barrier's phase completes when the bytes have landed. Every thread waits for
// the phase of the slice it needs by its parity (the n-th use of a stage is phase n, parity n % 2),
// then the warpgroups issue their wgmmas. After a __syncthreads (every warpgroup done with the
// stage) the same thread refills it with the slice STAGES11 further on. So while the tensor cores
// work on slice s, the copies of s+1 .. s+3 are in flight, where 10 stopped at every slice. The
// stages are 4 x 32 KiB, more than the 48 KiB a kernel may declare statically: they are dynamic
// shared memory, its size given at the launch and allowed by cudaFuncSetAttribute.
//
// What bounds it: at GPT-2's shapes, closer to the tensor cores, but every warp still does both
// jobs: all wait at the __syncthreads before each refill, and the next slice's wgmmas start only
// after the last ones have finished (wgmma_wait<0>). Next (12): warp specialization.

#include "matmul.cuh"
#include "../../gpt2/gpu/hopper.cuh"  // wgmma_bf16, tma_load_2d, mbarrier_*, tensor_map_bf16

#define BM11 128  // 2 warpgroups x 64 rows
#define BN11 128  // wgmma's N
#define BK11 64   // 64 bf16: one 128-byte swizzled row, the box's width
#define STAGES11 4
#define NT11 256
#define TILE11 (BM11 * BK11 * 2)  // bytes of one tile, of A or of B (BM11 = BN11)
#define SMEM11 (STAGES11 * 2 * TILE11 + 1024)  // the stages, and room to align them to 1024 bytes

__global__ void __launch_bounds__(NT11) matmul_forward_kernel11(bf16* out, const __grid_constant__ CUtensorMap map_inp,
                                                                const __grid_constant__ CUtensorMap map_weight,
                                                                const float* bias, int M, int N, int K) {
    extern __shared__ unsigned char smem11[];
    __shared__ uint64_t full[STAGES11];  // a stage's copies have landed
    // stage s: A at tiles + 2s TILE11, B after it; 1024-byte aligned, as the swizzle needs
    unsigned char* tiles = smem11 + (1024 - smem_address(smem11) % 1024) % 1024;
    int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
    int m0 = blockIdx.y * BM11, n0 = blockIdx.x * BN11, slices = (K + BK11 - 1) / BK11;

    if (tid == 0) {
        for (int s = 0; s < STAGES11; s++) mbarrier_init(&full[s], 1);  // the one arrival: expect_tx's
        mbarrier_init_fence();
        for (int s = 0; s < STAGES11 && s < slices; s++) {  // the first slices, in flight at once
            mbarrier_arrive_expect_tx(&full[s], 2 * TILE11);
            tma_load_2d(tiles + 2 * s * TILE11, &map_inp, s * BK11, m0, &full[s]);
            tma_load_2d(tiles + (2 * s + 1) * TILE11, &map_weight, s * BK11, n0, &full[s]);
        }
    }
    __syncthreads();  // the barriers initialised before anyone waits on them

    float d[64];  // this thread's part of the warpgroup's 64x128 tile (layout: wgmma_bf16)
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
    for (int t = 0; t < slices; t++) {
        int s = t % STAGES11;
        mbarrier_wait(&full[s], (t / STAGES11) % 2);
        unsigned char *As = tiles + 2 * s * TILE11, *Ws = As + TILE11;
        wgmma_fence();
        wgmma_hold<64>(d);
#pragma unroll
        for (int ks = 0; ks < BK11 / 16; ks++) {
            // K-major, 128B swizzle: 8-row groups 1024 bytes apart; k16 = 32 bytes further along
            uint64_t a = wgmma_descriptor(smem_address(As + wg * 64 * 128 + ks * 32), 16, 1024, WGMMA_SWIZZLE_128B);
            uint64_t b = wgmma_descriptor(smem_address(Ws + ks * 32), 16, 1024, WGMMA_SWIZZLE_128B);
            wgmma_bf16<BN11, 0, 0>(d, a, b, 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_hold<64>(d);
        __syncthreads();  // both warpgroups done reading stage s before it is refilled
        if (tid == 0 && t + STAGES11 < slices) {
            int k = (t + STAGES11) * BK11;
            mbarrier_arrive_expect_tx(&full[s], 2 * TILE11);
            tma_load_2d(As, &map_inp, k, m0, &full[s]);
            tma_load_2d(Ws, &map_weight, k, n0, &full[s]);
        }
    }

    // out from the accumulators, as in 10
    int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int j = 0; j < BN11 / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int m = m0 + wg * 64 + warp * 16 + g + (e / 2) * 8, n = n0 + j * 8 + 2 * q + e % 2;
            if (m < M && n < N) out[(size_t)m * N + n] = __float2bfloat16(d[4 * j + e] + bias[n]);
        }
}

static void matmul_forward11(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int T,
                             int C, int OC) {
    CUtensorMap map_inp, map_weight;  // boxes of 128 rows x 64 of k (TILE11 bytes: what each stage expects)
    if (!tensor_map_bf16(&map_inp, inp, B * T, C, C, BM11, BK11) ||
        !tensor_map_bf16(&map_weight, weight, OC, C, C, BN11, BK11)) {
        fail("matmul_forward11: TMA cannot describe inp or weight: C = %d must be a multiple of 8 and both "
             "16-byte aligned", C);
    }
    cuda_check(cudaFuncSetAttribute(matmul_forward_kernel11, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM11));
    dim3 grid(ceil_div(OC, BN11), ceil_div(B * T, BM11));
    if (grid.y > 65535) fail("matmul_forward11: B*T = %d needs more than 65535 blocks along y", B * T);
    matmul_forward_kernel11<<<grid, NT11, SMEM11>>>(out, map_inp, map_weight, bias, B * T, OC, C);
    launch_check(matmul_forward_kernel11);
}

int main(void) {
    return matmul_step_main_sm90a({"11", "matmul", "TMA copies into a 4-stage mbarrier ring"}, matmul_forward11);
}
