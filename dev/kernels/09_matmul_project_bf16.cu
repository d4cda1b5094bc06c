// dev/kernels/09_matmul_project_bf16.cu: the linear layer's forward on the project's tensor-core
// GEMM, gemm_bf16_kernel of gpt2/gpu/matmul_bf16.cuh, through the launcher train_gpu's bf16 path
// calls (bf16 inp, weight and out, float32 bias and accumulation, as in 08). On Hopper gemm_bf16
// would take its wgmma kernel (step 12): this step turns that off, gemm_bf16_mma_sync_only.
//
// What changed from 08: the same instructions (ldmatrix, mma.sync m16n8k16), kept busy.
//  - A pipeline: cp.async copies 16 bytes from global to shared memory in the background, without
//    passing through registers. Shared memory holds 3 stages of k slices (32 wide); while the warps
//    multiply slice s, the copies of slices s+1 and s+2 are in flight, so the tensor cores wait
//    for memory only when the copies fall behind, where 08 stopped at every slice to load, then
//    compute.
//  - A swizzle instead of padding: chunk c of shared row r is stored at chunk c XOR (bits of r),
//    which spreads ldmatrix's 8 row reads over the 32 banks as 08's padding did, but costs no
//    memory: 3 stages of 128x32 + 128x32 bf16 are 48 KiB, the most a kernel may declare
//    statically; 08's padding would have made them 60.
//  - Bigger tiles: 128x128 per block of 8 warps, 64x32 per warp (4 x 4 mma tiles, 64
//    accumulators a lane) when there are at least two such tiles per SM, as at GPT-2's shapes:
//    per 16 of k a warp loads 4 + 2 fragments (ldmatrix_x4) for 16 mma, where 08's 32x32 loaded
//    2 + 2 for 8, and each value copied from global memory serves 128 outputs, not 64. Fewer tiles
//    run as 64x64 (08's shape), and split-K when even those are too few (the last check shape of
//    dev/kernels/matmul.cuh runs in 3 slices, as step 07 does).
//  - The epilogue through shared memory: the warps leave their float32 accumulators there, then
//    consecutive threads take consecutive 16-byte pieces of a row of out (8 bf16), add the bias
//    and store them whole, where 08's fragments went out two bytes at a time, scattered over 16 rows.
//    The same epilogue fuses what the model's other products need: GELU, the residual add.
//  - Every shape: any M, N and K (chunks that straddle a matrix's edge, or rows that are not 16-byte
//    aligned, are copied element by element); 08 asked C to be a multiple of 8.
// What bounds it: at GPT-2's shapes, the tensor cores' rate through mma.sync; Hopper's wgmma
// instructions and its TMA copies (steps 10 to 12) go further.

#include "matmul.cuh"
#include "../../gpt2/gpu/matmul_bf16.cuh"  // matmul_forward_gpu: gemm_bf16 with weight read as B^T

int main(void) {
    gemm_bf16_mma_sync_only = 1;  // the mma.sync kernel, on Hopper too
    return matmul_step_main_bf16({"09", "matmul", "the project's pipelined bf16 GEMM"}, matmul_forward_gpu);
}
