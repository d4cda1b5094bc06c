// dev/kernels/07_matmul_project_fp32.cu: the linear layer's forward on the project's own float32
// SGEMM, gemm_fp32_kernel of gpt2/gpu/matmul_fp32.cuh, through the launcher train_gpu calls.
//
// What changed from 06: the kernel is now the one the project trains with. Its core is 06's: a
// block of 256 threads per 128x128 tile of out, 8x8 outputs per thread in two 4-wide groups 64
// apart, k-major shared tiles padded by 4 floats, float4 copies stored transposed, float4 reads
// without bank conflicts. What it adds:
//  - k slices of 16, not 8: half the __syncthreads (and half the pauses for the copy) per k, for
//    16 KiB of shared tiles, still small next to what an SM holds.
//  - __launch_bounds__(256, 2): the compiler keeps a thread to 128 registers, so that two blocks
//    share each SM and one block's copy overlaps the other's FMAs.
//  - float4 stores of out, with the bias added as a float4 (where the rows allow it).
//  - every shape: any C (scalar loads where a row is not 16-byte aligned), and tiles that fit the
//    GPU: when 128x128 tiles would give fewer than two blocks per SM, a 64x64 variant (4x4 per
//    thread) makes four times as many; when even those are too few and k is long, split-K cuts k
//    into slices whose partial sums a second kernel adds in a fixed order (the last check shape of
//    dev/kernels/matmul.cuh, one tile with k = 776, runs in 3 slices).
// At GPT-2's MLP product (4096 x 3072 of out: 768 tiles of 128x128, more than two per SM) it runs
// the 128x128 kernel unsplit, so there 07 differs from 06 only by the first three points.
// The same kernel, with template flags for the operands' layouts, also computes the backward's
// products (dinp = dout weight, dweight = dout^T inp) and attention's, batched over heads.
// What bounds it: the float32 FMAs, as in 06; the next speed-up needs other arithmetic units.
// Next (08): the tensor cores, on bf16 operands.

#include "matmul.cuh"
#include "../../gpt2/gpu/matmul_fp32.cuh"  // matmul_forward_gpu: gemm_fp32 with weight read as B^T

int main(void) {
    return matmul_step_main({"07", "matmul", "the project's SGEMM (gemm_fp32)"}, matmul_forward_gpu);
}
