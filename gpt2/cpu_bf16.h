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
// float32 sum's rounding, and exactly on operands whose sums float32 holds exactly.

#ifndef GPT2_CPU_BF16_H
#define GPT2_CPU_BF16_H

#include <stdint.h>
#include <string.h>
#include "io.h"
#include "cpu_math.h"
#include "cpu_amx.h"

typedef uint16_t bf16_t;   // the bits of a bf16 value (the GPU's type is CUDA's __nv_bfloat16)

// float32 -> bf16, rounded to nearest, ties to even (as CUDA's __float2bfloat16 and
// vcvtneps2bf16); a NaN stays a NaN (its payload made quiet so that rounding cannot carry it into
// infinity). A float32 denormal (|x| < 2^-126) is rounded like any other value here, to a bf16
// denormal or to 2^-126; vcvtneps2bf16 makes it a zero of its sign instead (as Intel documents;
// test_matmul checks it on the machine), and so do the products below where they run on it.
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

// ---------- the bf16 matrix product ----------
// gemm_accumulate's scheme (gpt2/cpu_math.h: GotoBLAS blocking, packing, a micro-kernel for each
// row count, one slice of C per thread), with the operands rounded to bf16 as they are packed and
// k taken in pairs, the unit of vdpbf16ps: each 32-bit lane of its operands holds two bf16, the
// even k in the low half, the odd k in the high half, and the instruction adds both products of
// the pair into the lane's float32 sum.
//   packed B   a micro-panel of KC x NR is (KC/2) x NR 32-bit units,
//              unit (q, j) = (B(2q, j), B(2q+1, j)): a row of units is NR_VECS vectors of 16;
//   packed A   a micro-panel of rows x KC is (KC/2) x rows units,
//              unit (q, i) = (A(i, 2q), A(i, 2q+1)).
// An odd K pads its last pair with a zero, in A and in B. Each pair step of the micro-kernel loads
// NR_VECS vectors of B, broadcasts one unit of A per row and runs rows x NR_VECS vdpbf16ps: the
// float32 kernel's 14 x 32 register tile, each instruction two multiply-adds per lane.
//   KC = 512   k per pass: a packed micro-panel of B is 512/2 x 32 units, 32 KB, as float32's KC
//              of 256 (doc/cpu_speed.md has the measurements); MC and NC are float32's.
//
// Per element of C, in every build: for each KC block in turn, a sum that starts at zero and for
// each pair in turn adds the odd product, then the even one (each add rounded to float32), then
// one add into C. That is what vdpbf16ps does in a lane (Intel's documented order; the builds'
// fingerprints in test_matmul agree on the machine), and what the build without AVX512_BF16 does
// with two float32 multiply-adds per pair, so both give the same bits wherever no product or sum
// falls below 2^-126: vdpbf16ps takes a denormal input (a bf16 operand or the running sum) as zero
// and flushes a denormal result to zero. Rounding to bf16 happens while packing, A and B alike,
// through the same conversion (the vector one in a build with AVX512_BF16, which flushes float32
// denormals to zero as above; bf16_from_float otherwise): that is what makes packed and unpacked B
// give the same bits.
//
// Packing reads float32 in one of two layouts. Where the pairs (k, k+1) lie next to each other
// (rows of inp and dout as A, weight^T as the forward pass's B), 32 floats of a row become 16 units
// in one conversion, and a 16 x 16 block of units is transposed in registers (mm_transpose);
// where k runs down the columns (weight as dinp's B, inp as dW's B, dout^T as dW's A), 16 floats at
// k and the 16 below them at k+1 become 16 units in one conversion and one interleaving
// permutation, a pair of rows at a time across the whole block.
//
// The vector path needs GCC (mm_transpose's __builtin_shuffle) and AVX512_BF16; every other build
// runs the float32 path, with cpu_math.h's vectors.
//
// Where the machine has AMX (gpt2/cpu_amx.h) the products run on its tiles instead, unless
// GPT2_AMX=0: the same packed B, A packed row by row (bf_pack_a_amx), a 32 x 32 tile of C per
// kernel call in four tile registers (bf_kernel_amx). The rounding to bf16 is the same, and so is
// the structure of each sum (from zero for each KC block, then one add into C), but the adds
// inside a KC block are the tile unit's own, so AMX gives other bits than vdpbf16ps, and the
// contract above holds for each of them.

#if MM_VEC_BYTES == 64 && defined(__AVX512BF16__) && defined(MM_SHUFFLE_TRANSPOSE)
#define BF_DPBF16 1   // the vector path: vdpbf16ps, and vcvtne2ps2bf16 to pack
#endif

#ifndef BF_KC
#define BF_KC 512   // even, so that only the last block of an odd K has an odd depth
#endif

#if CPU_AMX && defined(BF_DPBF16) && MM_NR == 32
#define BF_AMX 1
#define BF_AMX_MR 32    // rows of C per AMX kernel call: two 16-row tiles of A
#define BF_AMX_MC 128   // rows of A packed at a time for AMX (MC's role), a whole number of MR
#endif

// 1 where this build and machine run the bf16 products on AMX (and GPT2_AMX is not 0).
static inline int bf_amx_on(void) {
#ifdef BF_AMX
    return cpu_amx_on();
#else
    return 0;
#endif
}

// The instructions the bf16 products run on in this build (printed in infer's and train_cpu's
// header lines).
static inline const char* cpu_bf16_arith(void) {
    if (bf_amx_on()) return "AMX (tdpbf16ps)";
#ifdef BF_DPBF16
    return "AVX512_BF16 (vdpbf16ps)";
#else
    return "float32 FMA on bf16 pairs (no AVX512_BF16 in this build)";
#endif
}

// A vector of 32-bit units of B, as the kernel loads it.
#if MM_VEC_BYTES > 4
typedef uint32_t bf_uvec __attribute__((vector_size(MM_VEC_BYTES)));
#else
typedef uint32_t bf_uvec;
#endif

#ifdef BF_DPBF16
// acc + (a's pair) . (each lane's pair of b), per lane: (acc + odd product) + even product.
#define BF_DOT(acc, a, b) \
    ((mm_vec)_mm512_dpbf16_ps((__m512)(acc), (__m512bh)_mm512_set1_epi32((int)(a)), (__m512bh)(b)))
#else
static inline float bf_float_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline mm_vec bf_vec_bits(bf_uvec u) {
    mm_vec v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

// The same arithmetic as vdpbf16ps in plain float32: the high half of a unit is its odd bf16, as a
// float32 (the low 16 bits zero); the low half shifted up is the even one. The products are exact,
// so a multiply-add rounds only the sum, whether or not the machine fuses it.
static MM_ALWAYS_INLINE mm_vec bf_dot(mm_vec acc, uint32_t a, bf_uvec b) {
    acc = MM_FMA(acc, bf_float_bits(a & 0xffff0000u), bf_vec_bits(b & 0xffff0000u));
    return MM_FMA(acc, bf_float_bits(a << 16), bf_vec_bits(b << 16));
}
#define BF_DOT(acc, a, b) bf_dot(acc, a, b)
#endif

// The micro-kernel body for a tile of `rows` rows (rows <= MR): C tile (rows x nr of it inside C,
// row stride ldc) += packed A micro-panel (qc x rows units) . packed B micro-panel (qc x NR units),
// or, given an init row, C tile = init + the product, as mm_kernel_rows. As there, every element
// gets the same arithmetic whatever `rows` is.
static MM_ALWAYS_INLINE void bf_kernel_rows(int rows, int qc, const uint32_t* ap, const uint32_t* bp,
                                            float* c, size_t ldc, int nr, const float* init) {
    const mm_vec zero = {0};
    mm_vec acc[MM_MR][MM_NR_VECS];
    MM_UNROLL for (int i = 0; i < rows; i++) {
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = zero;
#ifdef BF_DPBF16
        // the tile of C, wanted at the end: its rows lie far apart (dW's 3072 x 768 is in L3 at
        // best), and without this the kernel waits for them there (doc/cpu_speed.md)
        __builtin_prefetch(c + i * ldc, 1);
        __builtin_prefetch(c + i * ldc + MM_NR - 1, 1);
#endif
    }
    for (int q = 0; q < qc; q++) {
        const bf_uvec* b = (const bf_uvec*)(bp + (size_t)q * MM_NR);   // 64-byte aligned
#ifdef BF_DPBF16
        // B 32 pairs (4 KB) ahead, into the next panel near the end of this one: where B streams
        // from memory (generation's weights) and a few rows do a few instructions per line, the
        // hardware's prefetcher alone lets the kernel wait on memory between its bursts of
        // arithmetic (doc/cpu_speed.md). A single row reads at the memory's speed without it.
        if (rows >= 2) {
            __builtin_prefetch(bp + (size_t)(q + 32) * MM_NR);
            __builtin_prefetch(bp + (size_t)(q + 32) * MM_NR + 16);
        }
#endif
        bf_uvec bv[MM_NR_VECS];
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) bv[v] = b[v];
        MM_UNROLL for (int i = 0; i < rows; i++) {
            uint32_t a = ap[(size_t)q * rows + i];   // one pair, broadcast to every lane
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = BF_DOT(acc[i][v], a, bv[v]);
        }
    }
    if (nr == MM_NR) {
        MM_UNROLL for (int i = 0; i < rows; i++) {
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) {
                mm_vec cv;   // memcpy: rows of C need not be aligned
                memcpy(&cv, (init != NULL ? init : c + i * ldc) + v * MM_LANES, sizeof(cv));
                cv += acc[i][v];
                memcpy(c + i * ldc + v * MM_LANES, &cv, sizeof(cv));
            }
        }
    } else {
        float tile[MM_MR * MM_NR];
        memcpy(tile, acc, (size_t)rows * sizeof(acc[0]));
        for (int i = 0; i < rows; i++) {
            for (int j = 0; j < nr; j++) c[i * ldc + j] = (init != NULL ? init[j] : c[i * ldc + j]) + tile[i * MM_NR + j];
        }
    }
}

// One copy of the body per row count, as mm_kernel does.
static void bf_kernel(int qc, const uint32_t* ap, const uint32_t* bp, float* c, size_t ldc, int mr,
                      int nr, const float* init) {
#define BF_ROWS(r) case r: if (r <= MM_MR) bf_kernel_rows(r, qc, ap, bp, c, ldc, nr, init); break;
    switch (mr) {
        BF_ROWS(1) BF_ROWS(2) BF_ROWS(3) BF_ROWS(4) BF_ROWS(5) BF_ROWS(6) BF_ROWS(7)
        BF_ROWS(8) BF_ROWS(9) BF_ROWS(10) BF_ROWS(11) BF_ROWS(12) BF_ROWS(13) BF_ROWS(14)
        default: bf_kernel_rows(mr, qc, ap, bp, c, ldc, nr, init); break;
    }
#undef BF_ROWS
}

// Packs `rows` x kc elements, rounded to bf16, into one micro-panel of units: unit (q, r) =
// (src(r, 2q), src(r, 2q+1)) goes to dst[q * rows_total + r], where src(r, p) is
// src[r * stride_r + p * stride_p]. Units of rows from `rows` to rows_total, and the odd half of
// the last unit when kc is odd, are zero.
#ifdef BF_DPBF16
static inline __mmask16 bf_mask(int n) {   // the first n of 16 lanes (none for n <= 0)
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// 32 consecutive k of a row (k0 .. k0+15 in `low`, k0+16 .. k0+31 in `high`) -> their 16 units
static inline __m512i bf_units_adjacent(__m512 low, __m512 high) {
    return (__m512i)_mm512_cvtne2ps_pbh(high, low);   // bf16 i of the result is k0 + i
}

// 16 values at an even k and the 16 at the next k -> 16 units: the conversion puts the even ones
// in bf16 0..15 and the odd ones in 16..31, the permutation pairs bf16 i with 16 + i.
static inline __m512i bf_units_apart(__m512 even, __m512 odd) {
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                           24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                           16, 0);
    return _mm512_permutexvar_epi16(pairs, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

static void bf_pack_panel(uint32_t* dst, const float* src, size_t stride_r, size_t stride_p,
                          int rows, int rows_total, int kc) {
    int qc = (kc + 1) / 2;
    if (stride_p == 1 && rows == 1 && rows_total == 1) {   // a decode step's A: units in order
        for (int q0 = 0; q0 < qc; q0 += 16) {
            const float* s = src + 2 * q0;
            int k = kc - 2 * q0;
            __m512i units = bf_units_adjacent(_mm512_maskz_loadu_ps(bf_mask(k), s),
                                              _mm512_maskz_loadu_ps(bf_mask(k - 16), s + 16));
            _mm512_mask_storeu_epi32(dst + q0, bf_mask(qc - q0), units);
        }
    } else if (stride_p == 1) {   // pairs adjacent: 16 rows x 16 units at a time, then a transpose
        for (int r0 = 0; r0 < rows_total; r0 += 16) {
            __mmask16 inside = bf_mask(rows_total - r0);
            for (int q0 = 0; q0 < qc; q0 += 16) {
                int k = kc - 2 * q0;   // the masked loads read no further than kc
                __mmask16 low = bf_mask(k), high = bf_mask(k - 16);
                mm_vec block[16];
                MM_UNROLL for (int i = 0; i < 16; i++) {
                    __m512i units = _mm512_setzero_si512();
                    if (r0 + i < rows) {
                        const float* s = src + (size_t)(r0 + i) * stride_r + 2 * q0;
                        // 16 rows at a time are more streams than the hardware's prefetcher
                        // follows well from L3 (doc/cpu_speed.md)
                        __builtin_prefetch(s + 64);
                        __builtin_prefetch(s + 80);
                        units = bf_units_adjacent(_mm512_maskz_loadu_ps(low, s),
                                                  _mm512_maskz_loadu_ps(high, s + 16));
                    }
                    block[i] = (mm_vec)units;
                }
                mm_transpose(block);   // block[i]: unit q0 + i of rows r0 .. r0+15
                int nq = mm_min(16, qc - q0);
                for (int i = 0; i < nq; i++) {
                    _mm512_mask_storeu_epi32(dst + (size_t)(q0 + i) * rows_total + r0, inside,
                                             (__m512i)block[i]);
                }
            }
        }
    } else {
        // Neither stride is 1 (no product of the model's: where k runs down contiguous columns,
        // bf_pack_a and bf_pack_b take a pair of rows at a time across the whole block): 16 of
        // the rows at k and 16 at k+1 gathered, then converted and interleaved as there.
        for (int q = 0; q < qc; q++) {
            const float* even = src + (size_t)(2 * q) * stride_p;
            const float* odd = even + stride_p;   // read only when 2q + 1 < kc
            int has_odd = 2 * q + 1 < kc;
            for (int r0 = 0; r0 < rows_total; r0 += 16) {
                float e[16] = {0}, o[16] = {0};
                for (int i = 0; i < 16 && r0 + i < rows; i++) {
                    e[i] = even[(size_t)(r0 + i) * stride_r];
                    if (has_odd) o[i] = odd[(size_t)(r0 + i) * stride_r];
                }
                _mm512_mask_storeu_epi32(dst + (size_t)q * rows_total + r0, bf_mask(rows_total - r0),
                                         bf_units_apart(_mm512_loadu_ps(e), _mm512_loadu_ps(o)));
            }
        }
    }
}
#else
static void bf_pack_panel(uint32_t* dst, const float* src, size_t stride_r, size_t stride_p,
                          int rows, int rows_total, int kc) {
    int qc = (kc + 1) / 2;
    for (int q = 0; q < qc; q++) {
        for (int r = 0; r < rows_total; r++) {
            float even = 0.0f, odd = 0.0f;
            if (r < rows) {
                even = src[r * stride_r + (size_t)(2 * q) * stride_p];
                if (2 * q + 1 < kc) odd = src[r * stride_r + (size_t)(2 * q + 1) * stride_p];
            }
            dst[(size_t)q * rows_total + r] =
                bf16_from_float(even) | (uint32_t)bf16_from_float(odd) << 16;
        }
    }
}
#endif

// Packs the kc x nc block of B at b (element (p, j) at b[p * rsb + j * csb]) into NR-column
// micro-panels one after another, the last one padded with zero columns: the panel of columns
// j..j+NR-1 at dst + j * qc units, qc = (kc + 1) / 2.
static void bf_pack_b(uint32_t* dst, const float* b, size_t rsb, size_t csb, int kc, int nc) {
    int qc = (kc + 1) / 2;
#ifdef BF_DPBF16
    if (csb == 1 && rsb != 1) {
        // Rows of B contiguous (weight as dinp's B, inp as dW's): a pair of rows at a time, read
        // from end to end and spread over all the panels. Panel by panel, each pair of rows would
        // be read NR floats at a time, a few bytes from each of kc rows far apart in memory: much
        // slower from L3 (doc/cpu_speed.md).
        int nc_pad = (nc + MM_NR - 1) / MM_NR * MM_NR;
        for (int q = 0; q < qc; q++) {
            const float* even = b + (size_t)(2 * q) * rsb;
            const float* odd = even + rsb;   // read only when 2q + 1 < kc
            int has_odd = 2 * q + 1 < kc;
            for (int j = 0; j < nc_pad; j += 16) {   // the padding columns get zeros
                __mmask16 inside = bf_mask(nc - j);
                __m512 e = _mm512_maskz_loadu_ps(inside, even + j);
                __m512 o = _mm512_maskz_loadu_ps(has_odd ? inside : 0, odd + j);
                uint32_t* d = dst + (size_t)(j / MM_NR * MM_NR) * qc + (size_t)q * MM_NR + j % MM_NR;
                _mm512_store_si512(d, bf_units_apart(e, o));
            }
        }
        return;
    }
#endif
    for (int j = 0; j < nc; j += MM_NR) {
        bf_pack_panel(dst + (size_t)j * qc, b + j * csb, csb, rsb, mm_min(MM_NR, nc - j), MM_NR, kc);
    }
}

// Packs the mc x kc block of A at a (element (i, p) at a[i * rsa + p * csa]) into MR-row
// micro-panels one after another, the last one as high as its tile: the panel of rows i..i+MR-1
// at dst + i * qc units.
static void bf_pack_a(uint32_t* dst, const float* a, size_t rsa, size_t csa, int mc, int kc) {
    int qc = (kc + 1) / 2;
#ifdef BF_DPBF16
    if (rsa == 1 && csa != 1 && mc <= MM_MC) {
        // Columns of A contiguous (dout^T as dW's A): as in bf_pack_b, a pair of rows of dout at a
        // time from end to end, its mc units spread over the panels (MR of them to each, which
        // a vector of 16 does not divide: through a row of units on the stack).
        uint32_t units[MM_MC + 16] __attribute__((aligned(64)));
        for (int q = 0; q < qc; q++) {
            const float* even = a + (size_t)(2 * q) * csa;
            const float* odd = even + csa;   // read only when 2q + 1 < kc
            int has_odd = 2 * q + 1 < kc;
            for (int i = 0; i < mc; i += 16) {
                __mmask16 inside = bf_mask(mc - i);
                __m512 e = _mm512_maskz_loadu_ps(inside, even + i);
                __m512 o = _mm512_maskz_loadu_ps(has_odd ? inside : 0, odd + i);
                _mm512_store_si512(units + i, bf_units_apart(e, o));
            }
            for (int i = 0; i < mc; i += MM_MR) {
                int rows = mm_min(MM_MR, mc - i);
                uint32_t* d = dst + (size_t)i * qc + (size_t)q * rows;
                for (int r = 0; r < rows; r += 16) {   // once, for a tile of at most 16 rows
                    __mmask16 m = bf_mask(rows - r);
                    _mm512_mask_storeu_epi32(d + r, m, _mm512_maskz_loadu_epi32(m, units + i + r));
                }
            }
        }
        return;
    }
#endif
    for (int i = 0; i < mc; i += MM_MR) {
        int rows = mm_min(MM_MR, mc - i);
        bf_pack_panel(dst + (size_t)i * qc, a + i * rsa, rsa, csa, rows, rows, kc);
    }
}

#ifdef BF_AMX
// Packs the mc x kc block of A at a for AMX: each row's units in k order, unit (i, q) =
// (A(i, 2q), A(i, 2q+1)) at dst[i * qs + q], qs = qc rounded up to whole tile rows of 16 units;
// rows from mc up to a multiple of 16, and units from qc to qs, are zero. Rounded to bf16 by the
// same conversion as bf_pack_a.
static void bf_pack_a_amx(uint32_t* dst, const float* a, size_t rsa, size_t csa, int mc, int kc) {
    int qc = (kc + 1) / 2, qs = (qc + 15) / 16 * 16, rows = (mc + 15) / 16 * 16;
    if (rsa == 1 && csa != 1) {
        // Columns of A contiguous (dout^T as dW's A): 16 rows at a pair of k become 16 units at
        // once, as in bf_pack_a; 16 such vectors, transposed in registers, are 16 rows' units.
        for (int i0 = 0; i0 < rows; i0 += 16) {
            __mmask16 inside = bf_mask(mc - i0);
            for (int q0 = 0; q0 < qs; q0 += 16) {
                mm_vec block[16];
                for (int t = 0; t < 16; t++) {
                    int q = q0 + t;
                    __m512i units = _mm512_setzero_si512();
                    if (q < qc) {
                        const float* even = a + (size_t)(2 * q) * csa + i0;
                        __m512 e = _mm512_maskz_loadu_ps(inside, even);
                        __m512 o = _mm512_maskz_loadu_ps(2 * q + 1 < kc ? inside : 0, even + csa);
                        units = bf_units_apart(e, o);
                    }
                    block[t] = (mm_vec)units;   // lane r: unit (i0 + r, q)
                }
                mm_transpose(block);            // block[r]: units q0 .. q0+15 of row i0 + r
                for (int r = 0; r < 16; r++) {
                    _mm512_store_si512(dst + (size_t)(i0 + r) * qs + q0, (__m512i)block[r]);
                }
            }
        }
        return;
    }
    float gathered[BF_KC];   // a row whose k are not adjacent (no product of the model's)
    for (int i = 0; i < rows; i++) {
        uint32_t* d = dst + (size_t)i * qs;
        memset(d, 0, (size_t)qs * sizeof(uint32_t));
        if (i >= mc) continue;
        const float* row = a + (size_t)i * rsa;
        if (csa != 1) {
            for (int p = 0; p < kc; p++) gathered[p] = row[(size_t)p * csa];
            row = gathered;
        }
        bf_pack_panel(d, row, 0, 1, 1, 1, kc);   // one row: its units in order
    }
}

// The AMX micro-kernel: C tile (mr <= 32 rows x nr <= 32 columns inside C, row stride ldc) +=
// A (mr rows of bf_pack_a_amx's layout, qs units apart) . packed B micro-panel (qc x NR units),
// or C tile = init + the product, as bf_kernel. Tiles 0-3 hold the four 16 x 16 sums (rows 0-15
// and 16-31 of A, times columns 0-15 and 16-31 of B), 4-5 the two tiles of A, 6-7 the two of B:
// each step of 16 pairs loads four tiles and runs four tdpbf16ps (two where mr <= 16). A last
// step of fewer than 16 pairs reads B from a copy padded with zero rows (A's padding is zero
// already): the panel's own rows end at qc.
static MM_NOINLINE void bf_kernel_amx(int qc, const uint32_t* ap, int qs, const uint32_t* bp,
                                      float* c, size_t ldc, int mr, int nr, const float* init) {
    const size_t a_bytes = (size_t)qs * sizeof(uint32_t), b_bytes = MM_NR * sizeof(uint32_t);
    const uint32_t* ap2 = ap + (size_t)16 * qs;   // rows 16-31
    uint32_t tail[16 * MM_NR] __attribute__((aligned(64)));
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int q = 0; q < qc; q += 16) {
        const uint32_t* b = bp + (size_t)q * MM_NR;
        if (qc - q < 16) {
            memcpy(tail, b, (size_t)(qc - q) * b_bytes);
            memset(tail + (size_t)(qc - q) * MM_NR, 0, (size_t)(16 - (qc - q)) * b_bytes);
            b = tail;
        }
        _tile_loadd(6, b, b_bytes);
        _tile_loadd(7, b + 16, b_bytes);
        _tile_loadd(4, ap + q, a_bytes);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (mr > 16) {
            _tile_loadd(5, ap2 + q, a_bytes);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    float sums[32 * 32] __attribute__((aligned(64)));   // row i of the tile at sums + 32 i
    _tile_stored(0, sums, 32 * sizeof(float));
    _tile_stored(1, sums + 16, 32 * sizeof(float));
    if (mr > 16) {
        _tile_stored(2, sums + 16 * 32, 32 * sizeof(float));
        _tile_stored(3, sums + 16 * 32 + 16, 32 * sizeof(float));
    }
    __mmask16 low = bf_mask(nr), high = bf_mask(nr - 16);
    for (int i = 0; i < mr; i++) {
        const float* from = init != NULL ? init : c + i * ldc;
        float* to = c + i * ldc;
        __m512 s0 = _mm512_add_ps(_mm512_maskz_loadu_ps(low, from), _mm512_load_ps(sums + 32 * i));
        __m512 s1 = _mm512_add_ps(_mm512_maskz_loadu_ps(high, from + 16), _mm512_load_ps(sums + 32 * i + 16));
        _mm512_mask_storeu_ps(to, low, s0);
        _mm512_mask_storeu_ps(to + 16, high, s1);
    }
}
#endif

// Operand B: a float32 matrix packed block by block as the product goes (packed == NULL), or the
// whole of B packed once by gemm_pack_b_bf16, n_pad units wide. init and bias as in mm_operand:
// C += A . B (init 0) or C = bias + A . B (init 1, bias NULL: zeros).
typedef struct {
    const float* b;
    size_t rsb, csb;
    const uint32_t* packed;
    size_t n_pad;
    int init;
    const float* bias;
} bf_operand;

// gemm_block in bf16: C (M x N) += A . columns j0..j0+N-1 of B on one thread, on AMX's tiles
// where `amx` (the calling thread has loaded their configuration), else on vectors. packed_a
// holds MC_PAD x KC/2 units (AMX: its MC x KC/2) and packed_b KC/2 x NC, both 64-byte aligned.
static void bf_gemm_block(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                          const bf_operand* b, int j0, int M, int N, int K,
                          uint32_t* packed_a, uint32_t* packed_b, int amx) {
#ifdef BF_AMX
    const int mc_max = amx ? BF_AMX_MC : MM_MC, mr_max = amx ? BF_AMX_MR : MM_MR;
#else
    const int mc_max = MM_MC, mr_max = MM_MR;
#endif
    for (int jc = 0; jc < N; jc += MM_NC) {
        int nc = mm_min(MM_NC, N - jc);
        for (int pc = 0; pc < K; pc += BF_KC) {
            int kc = mm_min(BF_KC, K - pc), qc = (kc + 1) / 2;
            const uint32_t* bp;   // the block's micro-panels, the one of columns j.. at bp + j * qc
            if (b->packed != NULL) {
                bp = b->packed + (size_t)(pc / 2) * b->n_pad + (size_t)(j0 + jc) * qc;
            } else {
                bf_pack_b(packed_b, b->b + pc * b->rsb + (j0 + jc) * b->csb, b->rsb, b->csb, kc, nc);
                bp = packed_b;
            }
            for (int ic = 0; ic < M; ic += mc_max) {
                int mc = mm_min(mc_max, M - ic);
#ifdef BF_AMX
                int qs = (qc + 15) / 16 * 16;   // bf_pack_a_amx's row of units
                if (amx) bf_pack_a_amx(packed_a, a + ic * rsa + pc * csa, rsa, csa, mc, kc);
                else
#endif
                    bf_pack_a(packed_a, a + ic * rsa + pc * csa, rsa, csa, mc, kc);
                for (int j = 0; j < nc; j += MM_NR) {
                    const float* init = mm_init_row(b->init, b->bias, pc, j0 + jc + j);
                    for (int i = 0; i < mc; i += mr_max) {
                        float* tile = c + (ic + i) * ldc + jc + j;
                        int mr = mm_min(mr_max, mc - i), nr = mm_min(MM_NR, nc - j);
#ifdef BF_AMX
                        if (amx) {
                            bf_kernel_amx(qc, packed_a + (size_t)i * qs, qs, bp + (size_t)j * qc, tile, ldc, mr, nr, init);
                            continue;
                        }
#endif
                        bf_kernel(qc, packed_a + (size_t)i * qc, bp + (size_t)j * qc, tile, ldc, mr, nr, init);
                    }
                }
            }
        }
    }
}

// gemm_threads in bf16: one slice of C per thread along its longer side, in whole tiles.
static void bf_gemm_threads(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                            const bf_operand* b, int M, int N, int K) {
    int threads = num_threads();
    int amx = bf_amx_on();
    // packed A: MC_PAD x KC/2 units for the vector kernel, AMX's MC x KC/2 for its own
    size_t a_units = (size_t)MM_MC_PAD * BF_KC / 2;
#ifdef BF_AMX
    if (a_units < (size_t)BF_AMX_MC * BF_KC / 2) a_units = (size_t)BF_AMX_MC * BF_KC / 2;
    const int mr = amx ? BF_AMX_MR : MM_MR;
#else
    const int mr = MM_MR;
#endif
    size_t b_units = b->packed != NULL ? 0 : (size_t)BF_KC / 2 * MM_NC;
    size_t per_thread = (a_units + b_units + 15) / 16 * 16;
    uint32_t* aligned = (uint32_t*)mm_scratch(threads * per_thread);   // float32's buffers, 64-byte aligned
    #pragma omp parallel num_threads(threads)
    {
        uint32_t* packed_a = aligned + thread_num() * per_thread;
        uint32_t* packed_b = packed_a + a_units;
        size_t t0, t1;  // this thread's tiles
#ifdef BF_AMX
        if (amx) cpu_amx_configure();
#endif
        if (N >= M) {   // slices of columns, in whole NR-wide tiles
            thread_share((size_t)(N + MM_NR - 1) / MM_NR, &t0, &t1);
            int j0 = (int)t0 * MM_NR, j1 = mm_min(N, (int)t1 * MM_NR);
            if (j1 > j0) {
                bf_gemm_block(c + j0, ldc, a, rsa, csa, b, j0, M, j1 - j0, K, packed_a, packed_b, amx);
            }
        } else {        // slices of rows, in whole MR-high tiles
            thread_share((size_t)(M + mr - 1) / mr, &t0, &t1);
            int i0 = (int)t0 * mr, i1 = mm_min(M, (int)t1 * mr);
            if (i1 > i0) {
                bf_gemm_block(c + i0 * ldc, ldc, a + i0 * rsa, rsa, csa, b, 0, i1 - i0, N, K,
                              packed_a, packed_b, amx);
            }
        }
#ifdef BF_AMX
        if (amx) cpu_amx_release();
#endif
    }
}

// C (M x N, row stride ldc) += bf16(A) . bf16(B); A and B float32, addressed as in gemm_accumulate
// (gpt2/cpu_math.h), rounded to bf16 as they are packed.
static inline void gemm_accumulate_bf16(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                        const float* b, size_t rsb, size_t csb, int M, int N, int K) {
    bf_operand op = {b, rsb, csb, NULL, 0, 0, NULL};
    bf_gemm_threads(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C = bias + A . B for an operand with init set, as gemm_set (a product of no K sets C to the bias).
static void bf_gemm_set(float* c, size_t ldc, const float* a, size_t rsa, size_t csa, const bf_operand* op,
                        int M, int N, int K) {
    if (K > 0) bf_gemm_threads(c, ldc, a, rsa, csa, op, M, N, K);
    else mm_set_rows(c, ldc, op->bias, M, N);
}

// C (M x N, row stride ldc) = bias + bf16(A) . bf16(B), bias N floats (NULL: zeros): gemm_bias
// (gpt2/cpu_math.h) in bf16, the same bits as filling C with the bias and gemm_accumulate_bf16.
static inline void gemm_bias_bf16(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                  const float* b, size_t rsb, size_t csb, int M, int N, int K, const float* bias) {
    bf_operand op = {b, rsb, csb, NULL, 0, 1, bias};
    bf_gemm_set(c, ldc, a, rsa, csa, &op, M, N, K);
}

// ---------- bf16 product with B packed once ----------
// gemm_pack_b's layout in units: KC-deep blocks one after another, each n_pad = N rounded up to
// whole NR-wide micro-panels wide, the block of rows pc.. at unit pc/2 * n_pad and its panel of
// columns j.. at pc/2 * n_pad + j * qc. The bf16 values: 2 per unit, the odd K padded with a zero.

// bf16 values that gemm_pack_b_bf16 writes for a K x N operand (a whole number of 64-byte lines).
static inline size_t gemm_packed_size_bf16(int K, int N) {
    return (size_t)(K + 1) / 2 * 2 * mm_packed_width(N);
}

// Packs B (K x N, element (p, j) at b[p * rsb + j * csb]) rounded to bf16, once (generation's
// weights). packed must be 64-byte aligned.
static inline void gemm_pack_b_bf16(bf16_t* packed, const float* b, size_t rsb, size_t csb, int K,
                                    int N) {
    mm_check_aligned((const float*)packed, "gemm_pack_b_bf16");
    uint32_t* units = (uint32_t*)packed;
    size_t n_pad = mm_packed_width(N);
    #pragma omp parallel for schedule(static, 1)
    for (int pc = 0; pc < K; pc += BF_KC) {
        bf_pack_b(units + (size_t)(pc / 2) * n_pad, b + pc * rsb, rsb, csb, mm_min(BF_KC, K - pc), N);
    }
}

// C (M x N, row stride ldc) += bf16(A) . B, B packed by gemm_pack_b_bf16. Bit for bit
// gemm_accumulate_bf16's result with the B it was packed from.
static inline void gemm_accumulate_packed_bf16(float* c, size_t ldc, const float* a, size_t rsa,
                                               size_t csa, const bf16_t* packed_b, int M, int N,
                                               int K) {
    mm_check_aligned((const float*)packed_b, "gemm_accumulate_packed_bf16");
    bf_operand op = {NULL, 0, 0, (const uint32_t*)packed_b, mm_packed_width(N), 0, NULL};
    bf_gemm_threads(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C = bias + bf16(A) . B as gemm_bias_bf16, B packed by gemm_pack_b_bf16.
static inline void gemm_bias_packed_bf16(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                         const bf16_t* packed_b, int M, int N, int K, const float* bias) {
    mm_check_aligned((const float*)packed_b, "gemm_bias_packed_bf16");
    bf_operand op = {NULL, 0, 0, (const uint32_t*)packed_b, mm_packed_width(N), 1, bias};
    bf_gemm_set(c, ldc, a, rsa, csa, &op, M, N, K);
}

#endif // GPT2_CPU_BF16_H
