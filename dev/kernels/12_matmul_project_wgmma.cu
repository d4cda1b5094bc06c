// dev/kernels/12_matmul_project_wgmma.cu: the linear layer's forward on the project's Hopper GEMM,
// gemm_bf16_wgmma_kernel of gpt2/gpu/matmul_wgmma.cuh, through the launcher train_gpu's bf16 path
// calls, matmul_forward_gpu, as 09 does: on a compute capability 9.0 GPU with an sm_90a build,
// gemm_bf16 takes this kernel (09 turns it off). On any other GPU the step says SKIP.
//
// What changed from 11: who does what, and for how long a block lives.
//  - Warp specialization: a block of 3 warpgroups, one producer and two consumers. The producer's
//    one thread only issues TMA copies; the consumers only issue wgmmas. Each stage has a second
//    mbarrier, "empty": a consumer arrives on it once its wgmmas have read the stage, and the
//    producer waits for that before refilling it. No __syncthreads in the loop: the producer runs
//    ahead as far as the ring allows, and no warpgroup waits for the whole block.
//  - Registers where the work is: the producer gives its registers back (setmaxnreg), and the
//    consumers take them for their accumulators, so a block fits 128 x 128 tiles with a deep
//    ring (5 stages, 160 KiB).
//  - A persistent grid: one block per SM, each walking tile after tile of out, in groups of rows
//    that share their rows of inp in L2; the producer starts the next tile's copies while the
//    consumers finish the last one's epilogue, where 11 launched a block per tile and each began
//    with an empty ring.
//  - Every shape the project needs: split-K when there are fewer tiles than SMs (the last check
//    shape of dev/kernels/matmul.cuh), both operand layouts (the backward's products), the fused
//    epilogues; operands TMA cannot describe (rows not 16-byte aligned) go to 09's kernel.
// What bounds it: at GPT-2's shapes, the tensor cores' rate through wgmma, less the epilogue's
// time and the tiles at the edge of out that are partly empty.

#include "matmul.cuh"
#include "../../gpt2/gpu/matmul_bf16.cuh"  // matmul_forward_gpu: gemm_bf16 with weight read as B^T

int main(void) {
    return matmul_step_main_sm90a({"12", "matmul", "the project's warp-specialized wgmma GEMM"},
                                  matmul_forward_gpu);
}
