// gpt2/cpu_bf16.h: bf16 matrix products on the CPU, for train_cpu's mixed precision (-p bf16) and
// infer's bf16 weights (-w bf16).
//
// bf16 is float32 with the low 16 bits of its mantissa cut off: the same 8-bit exponent (the same
// range), 8 bits of significand instead of 24. A product of two bf16 values is exact in float32,
// so a product "in bf16" is: round both operands to bf16 (to nearest, ties to even), multiply
// exactly, add in float32. That is what train_gpu's tensor cores do (gpt2/gpu/matmul_bf16.cuh) and
// what AVX512_BF16's vdpbf16ps does, two products per float32 lane per instruction.
//
// The contract of every product here, whichever code runs it:
//   C (float32) += bf16(A) . bf16(B), products exact, sums in float32, in one fixed order per
//   element: the same bits for any number of threads, and for a row of A whatever the other rows
//   are (batch invariance, which generation relies on); the packed and unpacked B give the same
//   bits.
// It is not bit for bit the float32 product of the rounded operands (the order and pairing of
// the adds is the kernel's); test_matmul checks it against that product in double within a
// float32 sum's rounding.

#ifndef GPT2_CPU_BF16_H
#define GPT2_CPU_BF16_H

#include <stdint.h>
#include <string.h>
#include "io.h"
#include "cpu_math.h"

typedef uint16_t bf16_t;   // the bits of a bf16 value (the GPU's type is CUDA's __nv_bfloat16)

// float32 -> bf16, rounded to nearest, ties to even (as CUDA's __float2bfloat16 and vcvtneps2bf16);
// a NaN stays a NaN (its payload made quiet so that rounding cannot carry it into infinity).
static inline bf16_t bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

// bf16 -> float32 (exact) is bf16_to_float, gpt2/io.h, which reads bf16 checkpoints with it.

// x rounded to the nearest bf16, as a float32
static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

// The instructions the bf16 products run on in this build (printed in infer's and train_cpu's
// header lines).
static inline const char* cpu_bf16_arith(void) { return "float32 FMA on bf16-rounded operands (reference)"; }

// C (M x N, row stride ldc) += bf16(A) . bf16(B); A and B float32, addressed as in gemm_accumulate
// (gpt2/cpu_math.h), rounded to bf16 as they are packed.
static void gemm_accumulate_bf16(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                 const float* b, size_t rsb, size_t csb, int M, int N, int K) {
    float* ar = (float*)malloc_check((size_t)M * K * sizeof(float) + 1);
    float* br = (float*)malloc_check((size_t)K * N * sizeof(float) + 1);
    for (int i = 0; i < M; i++)
        for (int p = 0; p < K; p++) ar[(size_t)i * K + p] = bf16_round(a[i * rsa + p * csa]);
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++) br[(size_t)p * N + j] = bf16_round(b[p * rsb + j * csb]);
    gemm_accumulate(c, ldc, ar, K, 1, br, N, 1, M, N, K);
    free(ar);
    free(br);
}

// bf16 values that gemm_pack_b_bf16 writes for a K x N operand.
static inline size_t gemm_packed_size_bf16(int K, int N) { return (size_t)K * N; }

// Packs B (K x N, element (p, j) at b[p * rsb + j * csb]) rounded to bf16, once (generation's
// weights). packed must be 64-byte aligned.
static void gemm_pack_b_bf16(bf16_t* packed, const float* b, size_t rsb, size_t csb, int K, int N) {
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++) packed[(size_t)p * N + j] = bf16_from_float(b[p * rsb + j * csb]);
}

// C (M x N, row stride ldc) += bf16(A) . B, B packed by gemm_pack_b_bf16. Bit for bit
// gemm_accumulate_bf16's result with the B it was packed from.
static void gemm_accumulate_packed_bf16(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                        const bf16_t* packed_b, int M, int N, int K) {
    float* b = (float*)malloc_check((size_t)K * N * sizeof(float) + 1);
    for (size_t i = 0; i < (size_t)K * N; i++) b[i] = bf16_to_float(packed_b[i]);
    gemm_accumulate_bf16(c, ldc, a, rsa, csa, b, N, 1, M, N, K);
    free(b);
}

#endif // GPT2_CPU_BF16_H
