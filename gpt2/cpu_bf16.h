// gpt2/cpu_bf16.h: bf16 matrix products on the CPU, for train_cpu -p bf16 and infer -w bf16.
// bf16 is float32 with the low 16 bits of its mantissa cut off (the same range, 8 bits of
// significand), so a product of two bf16 is exact in float32: round both operands to bf16 (to
// nearest, ties to even), multiply exactly, add in float32, as the tensor cores and vdpbf16ps do.

// The contract of every product here, whichever code runs it:
//   C (float32) += bf16(A) . bf16(B), products exact, sums in float32, in one fixed order per
//   element: the same bits for any number of threads, and for a row of A whatever the other rows
//   are (batch invariance); the packed and unpacked B give the same bits.
// Not bit for bit the float32 product of the rounded operands (the kernel pairs the adds);
// test_matmul checks it against that in double. doc/cpu_speed.md, "bf16 products", has the rest.

#ifndef GPT2_CPU_BF16_H
#define GPT2_CPU_BF16_H

#include <stdint.h>
#include <string.h>
#include "io.h"
#include "cpu_math.h"
#include "cpu_amx.h"

typedef uint16_t bf16_t;   // the bits of a bf16 value (the GPU's type is CUDA's __nv_bfloat16)

// float32 -> bf16, rounded to nearest, ties to even (as __float2bfloat16 and vcvtneps2bf16); a NaN
// stays a NaN (made quiet, so rounding cannot carry it into infinity). A denormal is rounded here;
// vcvtneps2bf16 flushes it to zero (test_matmul checks it), and so do the products that use it.
static inline bf16_t bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

// bf16 -> float32 (exact) is bf16_to_float, gpt2/io.h.

// x rounded to the nearest bf16, as a float32
static inline float bf16_round(float x) { return bf16_to_float(bf16_from_float(x)); }

// ---------- the bf16 matrix product ----------
// gemm_accumulate's blocking (gpt2/cpu_math.h) with the operands rounded to bf16 as they are
// packed, and k taken in pairs, the unit of vdpbf16ps: a 32-bit unit holds the even k in its low
// half, the odd k in its high half. Packed B: unit (q, j) = (B(2q, j), B(2q+1, j)); packed A:
// unit (q, i) = (A(i, 2q), A(i, 2q+1)); an odd K pads its last pair with a zero in both.
// Per element: for each KC block, from zero, each pair adds the odd product then the even one,
// then one add into C: vdpbf16ps's order, and the float32 path's (the same bits but where a value
// falls below 2^-126, which vdpbf16ps flushes). AMX (gpt2/cpu_amx.h, unless GPT2_AMX=0) keeps the
// rounding and the blocks but adds inside a block its own way: other bits, the same contract.

#if MM_VEC_BYTES == 64 && defined(__AVX512BF16__) && defined(MM_SHUFFLE_TRANSPOSE)
#define BF_DPBF16 1   // vdpbf16ps, and vcvtne2ps2bf16 to pack
#endif

#ifndef BF_KC
#define BF_KC 512   // even: only the last block of an odd K has an odd depth
#endif

#if CPU_AMX && defined(BF_DPBF16) && MM_NR == 32
#define BF_AMX 1
#define BF_AMX_MR 32    // rows of C per AMX kernel call: two 16-row tiles of A
#define BF_AMX_MC 128   // rows of A packed at a time for AMX (MC's role), whole MRs
#endif

// 1 where the bf16 products run on AMX.
static inline int bf_amx_on(void) {
#ifdef BF_AMX
    return cpu_amx_on();
#else
    return 0;
#endif
}

// The instructions the bf16 products run on (infer's and train_cpu's header lines).
static inline const char* cpu_bf16_arith(void) {
    if (bf_amx_on()) return "AMX (tdpbf16ps)";
#ifdef BF_DPBF16
    return "AVX512_BF16 (vdpbf16ps)";
#else
    return "float32 FMA on bf16 pairs (no AVX512_BF16 in this build)";
#endif
}

#if MM_VEC_BYTES > 4
typedef uint32_t bf_uvec __attribute__((vector_size(MM_VEC_BYTES)));
#else
typedef uint32_t bf_uvec;
#endif

#ifdef BF_DPBF16
// acc + a's pair . each lane's pair of b, per lane: (acc + odd product) + even product.
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

// vdpbf16ps in plain float32: a unit's high half is its odd bf16, its low half shifted up the
// even one. The products are exact, so fused or not, a multiply-add rounds only the sum.
static MM_ALWAYS_INLINE mm_vec bf_dot(mm_vec acc, uint32_t a, bf_uvec b) {
    acc = MM_FMA(acc, bf_float_bits(a & 0xffff0000u), bf_vec_bits(b & 0xffff0000u));
    return MM_FMA(acc, bf_float_bits(a << 16), bf_vec_bits(b << 16));
}
#define BF_DOT(acc, a, b) bf_dot(acc, a, b)
#endif

// The micro-kernel body, as mm_kernel_rows: C tile (rows x nr) += packed A (qc x rows units) .
// packed B (qc x NR units), or C tile = init + the product; the same arithmetic for any `rows`.
static MM_ALWAYS_INLINE void bf_kernel_rows(int rows, int qc, const uint32_t* ap, const uint32_t* bp,
                                            float* c, size_t ldc, int nr, const float* init) {
    const mm_vec zero = {0};
    mm_vec acc[MM_MR][MM_NR_VECS];
    MM_UNROLL for (int i = 0; i < rows; i++) {
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = zero;
#ifdef BF_DPBF16
        // the tile of C, wanted at the end: its rows lie far apart (dW's is in L3 at best)
        __builtin_prefetch(c + i * ldc, 1);
        __builtin_prefetch(c + i * ldc + MM_NR - 1, 1);
#endif
    }
    for (int q = 0; q < qc; q++) {
        const bf_uvec* b = (const bf_uvec*)(bp + (size_t)q * MM_NR);   // 64-byte aligned
#ifdef BF_DPBF16
        // B 32 pairs ahead: where B streams from memory (generation's weights), the hardware's
        // prefetcher alone leaves the kernel waiting between bursts of arithmetic
        if (rows >= 2) {
            __builtin_prefetch(bp + (size_t)(q + 32) * MM_NR);
            __builtin_prefetch(bp + (size_t)(q + 32) * MM_NR + 16);
        }
#endif
        bf_uvec bv[MM_NR_VECS];
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) bv[v] = b[v];
        MM_UNROLL for (int i = 0; i < rows; i++) {
            uint32_t a = ap[(size_t)q * rows + i];   // one pair, broadcast
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = BF_DOT(acc[i][v], a, bv[v]);
        }
    }
    mm_store_tile(rows, (const mm_vec (*)[MM_NR_VECS])acc, c, ldc, nr, init);
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

// Packs `rows` x kc elements rounded to bf16 into one micro-panel of units: unit (q, r) =
// (src(r, 2q), src(r, 2q+1)) to dst[q * rows_total + r], src(r, p) at src[r * stride_r +
// p * stride_p]. Rows from `rows` to rows_total, and an odd kc's last odd half, are zero.
#ifdef BF_DPBF16
static inline __mmask16 bf_mask(int n) {   // the first n of 16 lanes (none for n <= 0)
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// 32 consecutive k of a row (k0 .. k0+15 in `low`, k0+16 .. k0+31 in `high`) -> their 16 units
static inline __m512i bf_units_adjacent(__m512 low, __m512 high) {
    return (__m512i)_mm512_cvtne2ps_pbh(high, low);   // bf16 i of the result is k0 + i
}

// 16 values at an even k and 16 at the next -> 16 units: converted, bf16 i paired with 16 + i.
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
                        // 16 rows are more streams than the hardware prefetcher follows from L3
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
        // Neither stride is 1 (no product of the model's): 16 rows at k and 16 at k+1
        // gathered, then converted and interleaved as in bf_pack_b.
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

// Packs the kc x nc block of B (element (p, j) at b[p * rsb + j * csb]) into NR-column panels,
// the last padded with zero columns: the panel of columns j.. at dst + j * qc units.
static void bf_pack_b(uint32_t* dst, const float* b, size_t rsb, size_t csb, int kc, int nc) {
    int qc = (kc + 1) / 2;
#ifdef BF_DPBF16
    if (csb == 1 && rsb != 1) {
        // Rows of B contiguous: a pair of rows at a time, read end to end and spread over all
        // the panels (panel by panel reads a few bytes of each of kc rows far apart).
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

// Packs the mc x kc block of A (element (i, p) at a[i * rsa + p * csa]) into MR-row panels, the
// last as high as its tile: the panel of rows i.. at dst + i * qc units.
static void bf_pack_a(uint32_t* dst, const float* a, size_t rsa, size_t csa, int mc, int kc) {
    int qc = (kc + 1) / 2;
#ifdef BF_DPBF16
    if (rsa == 1 && csa != 1 && mc <= MM_MC) {
        // Columns of A contiguous (dout^T): a pair of rows of dout at a time, end to end, its
        // units dealt MR to a panel through a row on the stack.
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
// Packs the mc x kc block of A for AMX: row i's units in k order at dst[i * qs], qs = qc in whole
// 16-unit tile rows; rows up to a multiple of 16 and units past qc are zero. bf_pack_a's rounding.
static void bf_pack_a_amx(uint32_t* dst, const float* a, size_t rsa, size_t csa, int mc, int kc) {
    int qc = (kc + 1) / 2, qs = (qc + 15) / 16 * 16, rows = (mc + 15) / 16 * 16;
    if (rsa == 1 && csa != 1) {
        // Columns of A contiguous (dout^T): 16 rows at a pair of k to 16 units, as in bf_pack_a;
        // 16 such vectors transposed are 16 rows' units.
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

// The AMX micro-kernel: C tile (mr, nr <= 32) += A (bf_pack_a_amx's rows, qs units apart) .
// packed B panel (qc x NR units), or = init + the product. Tiles 0-3: the four 16 x 16 sums;
// 4-5: A; 6-7: B. A last step of fewer than 16 pairs reads B from a copy padded with zeros.
static MM_NOINLINE void bf_kernel_amx(int qc, const uint32_t* ap, int qs, const uint32_t* bp,
                                      float* c, size_t ldc, int mr, int nr, const float* init) {
    const size_t a_bytes = (size_t)qs * sizeof(uint32_t), b_bytes = MM_NR * sizeof(uint32_t);
    const uint32_t* ap2 = ap + (size_t)16 * qs;
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

// Operand B: packed block by block (packed == NULL) or once by gemm_pack_b_bf16, n_pad units
// wide; init and bias as in mm_operand.
typedef struct {
    const float* b;
    size_t rsb, csb;
    const uint32_t* packed;
    size_t n_pad;
    int init;
    const float* bias;
} bf_operand;

// gemm_block in bf16, on AMX's tiles where `amx` (this thread configured them), else on vectors.
// packed_a: MC_PAD x KC/2 units (AMX: its MC x KC/2); packed_b: KC/2 x NC; both 64-byte aligned.
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
            const uint32_t* bp;   // the block's panels, columns j.. at bp + j * qc
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
    // packed A: the vector kernel's or AMX's, whichever is larger
    size_t a_units = (size_t)MM_MC_PAD * BF_KC / 2;
#ifdef BF_AMX
    if (a_units < (size_t)BF_AMX_MC * BF_KC / 2) a_units = (size_t)BF_AMX_MC * BF_KC / 2;
    const int mr = amx ? BF_AMX_MR : MM_MR;
#else
    const int mr = MM_MR;
#endif
    size_t b_units = b->packed != NULL ? 0 : (size_t)BF_KC / 2 * MM_NC;
    size_t per_thread = (a_units + b_units + 15) / 16 * 16;
    uint32_t* aligned = (uint32_t*)mm_scratch(threads * per_thread);   // float32's buffers
    #pragma omp parallel num_threads(threads)
    {
        uint32_t* packed_a = aligned + thread_num() * per_thread;
        uint32_t* packed_b = packed_a + a_units;
        size_t t0, t1;  // this thread's tiles
#ifdef BF_AMX
        if (amx) cpu_amx_configure();
#endif
        if (N >= M) {   // slices of columns, whole tiles
            thread_share((size_t)(N + MM_NR - 1) / MM_NR, &t0, &t1);
            int j0 = (int)t0 * MM_NR, j1 = mm_min(N, (int)t1 * MM_NR);
            if (j1 > j0) {
                bf_gemm_block(c + j0, ldc, a, rsa, csa, b, j0, M, j1 - j0, K, packed_a, packed_b, amx);
            }
        } else {        // slices of rows, whole tiles
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

// C (M x N) += bf16(A) . bf16(B), A and B float32 addressed as in gemm_accumulate.
static inline void gemm_accumulate_bf16(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                        const float* b, size_t rsb, size_t csb, int M, int N, int K) {
    bf_operand op = {b, rsb, csb, NULL, 0, 0, NULL};
    bf_gemm_threads(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C = bias + A . B for an operand with init set, as gemm_set.
static void bf_gemm_set(float* c, size_t ldc, const float* a, size_t rsa, size_t csa, const bf_operand* op,
                        int M, int N, int K) {
    if (K > 0) bf_gemm_threads(c, ldc, a, rsa, csa, op, M, N, K);
    else mm_set_rows(c, ldc, op->bias, M, N);
}

// C (M x N) = bias + bf16(A) . bf16(B), bias N floats (NULL: zeros): the bits of C filled with
// the bias and gemm_accumulate_bf16.
static inline void gemm_bias_bf16(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                  const float* b, size_t rsb, size_t csb, int M, int N, int K, const float* bias) {
    bf_operand op = {b, rsb, csb, NULL, 0, 1, bias};
    bf_gemm_set(c, ldc, a, rsa, csa, &op, M, N, K);
}

// ---------- bf16 product with B packed once ----------
// gemm_pack_b's layout in units: the block of rows pc.. at unit pc/2 * n_pad, its panel of
// columns j.. at pc/2 * n_pad + j * qc.

// bf16 values that gemm_pack_b_bf16 writes for a K x N operand (whole 64-byte lines).
static inline size_t gemm_packed_size_bf16(int K, int N) {
    return (size_t)(K + 1) / 2 * 2 * mm_packed_width(N);
}

// Packs B (K x N) rounded to bf16, once; packed must be 64-byte aligned.
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

// C += bf16(A) . B, B packed by gemm_pack_b_bf16: gemm_accumulate_bf16's bits.
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
