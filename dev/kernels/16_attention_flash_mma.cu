// dev/kernels/16_attention_flash_mma.cu: the project's flash attention forward on the tensor cores
// (gpt2/gpu/flash_attention_mma.cuh, what train_gpu's bf16 path runs), included, not copied.
//
// What it adds over step 15, whose arithmetic (the online softmax: m, l and the output rescaled
// by exp(m_old - m_new)) it keeps, in the manner of FlashAttention-2:
//   - bf16 in and out (qkv, out), float32 inside: half the bytes of every load; and it stores
//     lse = m + log l per row, which its backward needs instead of att.
//   - A block owns 128 query rows of one head (8 warps, 16 rows each) and walks the keys a tile
//     of 64 rows at a time (32 for hs = 128). K and V tiles are staged in shared memory once per
//     block (step 15 fetched each key row once per warp), by cp.async through three stages: the
//     next tiles' copies are in flight while the tensor cores work on this one.
//   - S = Q K^T and O += P V run as mma.sync m16n8k16 on bf16 fragments: 4096 multiply-adds an
//     instruction where an FMA does one. The fragments come out of shared memory by ldmatrix,
//     whose 8 rows a matrix are swizzled (their 16-byte chunks XOR-ed by the row) so that they
//     fall in 8 different bank groups.
//   - P never leaves the registers: the accumulator of the first product is, lane by lane, the A
//     operand of the second; it is rounded to bf16 on the way (the one change to the arithmetic,
//     which the check bounds per value). m and l stay float32; a row's maximum and sum take two
//     shuffles among the four lanes that hold it.
//   - The blocks with the longest rows (the last queries, which see the most keys) start first,
//     a warp skips the key tiles after its last query (causal), and only the diagonal tile is
//     masked.
// Its limit is the bf16 tensor cores (LIMIT_BF16), its work the same 2 B NH T (T+1) hs FLOPs as
// every step's (dev/kernels/attention.cuh). The kernels themselves: gpt2/gpu/flash_attention_mma.cuh,
// whose opening comment derives them; the lesson: doc/lessons/08-flash-attention.md. The last
// rung of the attention ladder.
//
//   make kernels-emu     every step on the CPU emulator of CUDA: small shapes, PASS or FAIL
//   make kernels         every step on a GPU: checked, then timed at GPT-2 124M's shapes

#include "attention.cuh"
#include "../../gpt2/gpu/flash_attention_mma.cuh"  // flash_attention_forward_with, the mma kernels

// The tensor-core kernels by name (FLASH_TENSOR_CORES): a head size or alignment they do not take
// fails with one line, where FLASH_AUTO would quietly run the CUDA-core kernels instead.
static void attention_forward16(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    flash_attention_forward_with(FLASH_TENSOR_CORES, out, lse, qkv, B, T, C, NH);
}

int main(void) {
    return attention_step_main_bf16({"16", "attention", "flash on the tensor cores: mma.sync, bf16"},
                                    attention_forward16);
}
