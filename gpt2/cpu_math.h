// gpt2/cpu_math.h: the fast arithmetic of the CPU layers (gpt2/cpu_layers.h): a blocked, packed
// matrix product, and a max, a dot product, exp and tanh that vectorise. doc/cpu_speed.md has
// the speeds and what was tried.

#ifndef GPT2_CPU_MATH_H
#define GPT2_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "io.h"

static inline int num_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// Inside a parallel region: this thread's share [n t / T, n (t + 1) / T) of n things, in order.
static inline int thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline void thread_share(size_t n, size_t* begin, size_t* end) {
    size_t t = (size_t)thread_num(), threads = 1;
#ifdef _OPENMP
    threads = (size_t)omp_get_num_threads();
#endif
    *begin = n * t / threads;
    *end = n * (t + 1) / threads;
}

// ---------- matrix product ----------
// All three products of a linear layer are one routine, gemm_accumulate: C (M x N) += A (M x K) .
// B (K x N), each operand a pointer and two strides (a transpose is other strides):
//   forward    out  (BT x OC) = bias + inp (BT x C) . weight^T (C x OC)
//   backward   dinp (BT x C)  += dout (BT x OC) . weight (OC x C)
//              dW   (OC x C)  += dout^T (OC x BT) . inp (BT x C)
// GotoBLAS's blocking: an MR x NR tile of C in registers, packed panels of A (in L2) and B (in
// L3); each size and why in doc/cpu_speed.md, "The matmul".

// Determinism: every element of C is summed over k in the same order (the KC blocks in turn, k
// in turn inside) by exactly one thread, so the result does not depend on the number of threads
// or on scheduling; there are no atomics and no reductions across threads. Nor does it depend on
// the other rows of A: a row's elements get the same arithmetic whatever M is and wherever the
// row sits (batch invariance, which generation relies on).

// The vector width and tile come from the build (AVX-512, AVX2, 16 bytes; MATMUL_PLAIN_C: scalars).

#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(MATMUL_PLAIN_C)
#if defined(__AVX512F__)
#define MM_VEC_BYTES 64   // 32 registers of 16 floats: 14 x 2 accumulators
#define MM_MR 14
#define MM_NR_VECS 2
#elif defined(__AVX__)
#define MM_VEC_BYTES 32   // 16 registers of 8 floats: 6 x 2 accumulators
#define MM_MR 6
#define MM_NR_VECS 2
#else
#define MM_VEC_BYTES 16   // 16 registers of 4 floats: 6 x 2 accumulators
#define MM_MR 6
#define MM_NR_VECS 2
#endif
typedef float mm_vec __attribute__((vector_size(MM_VEC_BYTES)));
// Unrolled to keep the tile in registers; may be defined empty (faster emulator builds).
#ifndef MM_UNROLL
#define MM_UNROLL _Pragma("GCC unroll 32")
#endif
#if !defined(__clang__)
#define MM_SHUFFLE_TRANSPOSE 1   // __builtin_shuffle is GCC's
typedef int mm_ivec __attribute__((vector_size(MM_VEC_BYTES)));
#endif
#else
#define MM_VEC_BYTES 4    // plain C: one float per "vector"
#define MM_MR 4
#define MM_NR_VECS 8
typedef float mm_vec;
#define MM_UNROLL
#endif
#define MM_LANES (MM_VEC_BYTES / 4)
#define MM_NR (MM_NR_VECS * MM_LANES)
#define MM_KC 1024
#define MM_MC (128 / MM_MR * MM_MR)   // 126 for the AVX-512 tile
// NC in whole NR-wide panels: a block of columns must start where gemm_pack_b's panels start.
#define MM_NC ((2048 + MM_NR - 1) / MM_NR * MM_NR)
#define MM_MC_PAD ((MM_MC + MM_MR - 1) / MM_MR * MM_MR)   // whole micro-panels
// NC where A is read in place (gemm_accumulate_a_rows): a block of B narrow enough for L2.
#define MM_NC_A_ROWS ((512 + MM_NR - 1) / MM_NR * MM_NR)

static int mm_min(int a, int b) { return a < b ? a : b; }

// acc + a * b rounded once, alike in every copy of the kernel: left to itself GCC fuses some
// products and not others, and a row's bits would depend on its tile's row count.
#if MM_VEC_BYTES == 64
#include <immintrin.h>
#define MM_FMA(acc, a, b) ((mm_vec)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)(b), (__m512)(acc)))
#elif MM_VEC_BYTES == 32 && defined(__FMA__)
#include <immintrin.h>
#define MM_FMA(acc, a, b) ((mm_vec)_mm256_fmadd_ps(_mm256_set1_ps(a), (__m256)(b), (__m256)(acc)))
#elif MM_VEC_BYTES == 16 && defined(__FMA__)
#include <immintrin.h>
#define MM_FMA(acc, a, b) ((mm_vec)_mm_fmadd_ps(_mm_set1_ps(a), (__m128)(b), (__m128)(acc)))
#elif MM_VEC_BYTES == 16 && defined(__aarch64__)
#include <arm_neon.h>
#define MM_FMA(acc, a, b) ((mm_vec)vfmaq_n_f32((float32x4_t)(acc), (float32x4_t)(b), (a)))
#elif MM_VEC_BYTES == 4 && defined(FP_FAST_FMAF)
#define MM_FMA(acc, a, b) fmaf(a, b, acc)
#else
#define MM_FMA(acc, a, b) ((acc) + (a) * (b))   // no FMA instruction: nothing to fuse
#endif

#if defined(__GNUC__)
#define MM_ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define MM_ALWAYS_INLINE inline
#endif
#if defined(__GNUC__)
#define MM_NOINLINE __attribute__((noinline))
#else
#define MM_NOINLINE
#endif

#ifdef MM_SHUFFLE_TRANSPOSE
// Transposes a LANES x LANES block of vectors: log2(LANES) rounds of two-vector shuffles.
// Always inlined: a call goes through memory.
__attribute__((always_inline)) static inline void mm_transpose(mm_vec* v) {
    mm_ivec lane;
    MM_UNROLL for (int l = 0; l < MM_LANES; l++) lane[l] = l;
    MM_UNROLL for (int s = 1; s < MM_LANES; s *= 2) {
        int h = MM_LANES / 2 / s;
        mm_ivec upper = (lane & h) != 0;   // -1 in the upper half of each 2h lanes
        mm_ivec lo = lane + (upper & (MM_LANES - h));
        mm_ivec hi = lane + h + (upper & (MM_LANES - h));
        MM_UNROLL for (int i = 0; i < MM_LANES; i++) {
            if (i & h) continue;
            mm_vec x = v[i], y = v[i + h];
            v[i] = __builtin_shuffle(x, y, lo);
            v[i + h] = __builtin_shuffle(x, y, hi);
        }
    }
}
#endif

// n <= LANES floats, a copy of constant size per n (a move, not a call).
static MM_ALWAYS_INLINE void mm_copy_floats(float* dst, const float* src, int n) {
#define MM_COPY(k) case k: if (k <= MM_LANES) memcpy(dst, src, k * sizeof(float)); return;
    switch (n) {
        MM_COPY(1) MM_COPY(2) MM_COPY(3) MM_COPY(4) MM_COPY(5) MM_COPY(6) MM_COPY(7) MM_COPY(8)
        MM_COPY(9) MM_COPY(10) MM_COPY(11) MM_COPY(12) MM_COPY(13) MM_COPY(14) MM_COPY(15) MM_COPY(16)
        default: return;
    }
#undef MM_COPY
}

// The end of a kernel call: the tile's sums go into C, one add each into init[j] or into C.
static MM_ALWAYS_INLINE void mm_store_tile(int rows, const mm_vec (*acc)[MM_NR_VECS], float* c,
                                           size_t ldc, int nr, const float* init) {
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

// The end of a kernel call, transposed: tile element (i, j) added into init[i] or c[j * ldc + i].
// Not inlined: inlined in every copy of the kernel, it doubled compile times.
static MM_NOINLINE void mm_store_transposed(int rows, const mm_vec (*acc)[MM_NR_VECS], float* c,
                                            size_t ldc, int nr, const float* init) {
#ifdef MM_SHUFFLE_TRANSPOSE
    if (nr == MM_NR) {
        MM_UNROLL for (int r0 = 0; r0 < rows; r0 += MM_LANES) {
            int n = mm_min(MM_LANES, rows - r0);   // rows r0.. as the lanes of a row of C
            mm_vec start = {0};
            if (init != NULL) memcpy(&start, init + r0, (size_t)n * sizeof(float));
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) {
                mm_vec block[MM_LANES];
                MM_UNROLL for (int l = 0; l < MM_LANES; l++) block[l] = acc[mm_min(r0 + l, rows - 1)][v];
                mm_transpose(block);   // block[t]: the tile's column v * LANES + t
                MM_UNROLL for (int t = 0; t < MM_LANES; t++) {
                    float* dst = c + (size_t)(v * MM_LANES + t) * ldc + r0;
#if MM_VEC_BYTES == 64
                    __mmask16 part = (__mmask16)((1u << n) - 1);
                    mm_vec cv = init != NULL ? start : (mm_vec)_mm512_maskz_loadu_ps(part, dst);
                    cv += block[t];
                    _mm512_mask_storeu_ps(dst, part, (__m512)cv);
#else
                    mm_vec cv = start;
                    if (init == NULL) mm_copy_floats((float*)&cv, dst, n);
                    cv += block[t];
                    mm_copy_floats(dst, (const float*)&cv, n);
#endif
                }
            }
        }
        return;
    }
#endif
    float tile[MM_MR * MM_NR];
    memcpy(tile, acc, (size_t)rows * sizeof(acc[0]));
    for (int j = 0; j < nr; j++) {
        for (int i = 0; i < rows; i++) {
            c[j * ldc + i] = (init != NULL ? init[i] : c[j * ldc + i]) + tile[i * MM_NR + j];
        }
    }
}

// The source of the next block of B, prefetched a share at a time while the kernel runs, so
// packing reads it from cache: rows of B (csb = 1), else columns (rsb = 1), else nothing.
typedef struct {
    const float* base;
    size_t stride;          // floats from one segment to the next
    int segments, length;   // how many segments, floats in each
    int segment, offset;    // the next line to fetch
} mm_prefetch;

// The rows x cols block at x (element (r, s) at x[r * rs + s * cs]) as segments.
static mm_prefetch mm_prefetch_of(const float* x, size_t rs, size_t cs, int rows, int cols) {
    mm_prefetch f = {NULL, 0, 0, 0, 0, 0};
    if (rows <= 0 || cols <= 0) return f;
    if (cs == 1) {
        f.base = x, f.stride = rs, f.segments = rows, f.length = cols;
    } else if (rs == 1) {
        f.base = x, f.stride = cs, f.segments = cols, f.length = rows;
    }
    return f;
}

// Lines of f each of `calls` kernel calls fetches, to have all of it by the last.
static int mm_prefetch_share(const mm_prefetch* f, int calls) {
    if (f->segments == 0 || calls <= 0) return 0;
    return (int)(((long long)f->segments * ((f->length + 15) / 16) + calls - 1) / calls);
}

// Fetches the next `lines` cache lines of 16 floats.
static inline void mm_prefetch_some(mm_prefetch* f, int lines) {
    for (; lines > 0 && f->segment < f->segments; lines--) {
        __builtin_prefetch(f->base + f->segment * f->stride + f->offset, 0, 2);
        f->offset += 16;
        if (f->offset >= f->length) f->segment++, f->offset = 0;
    }
}

// Prefetches in bursts spread over a call's k steps: issued at once, misses stall the core.
#define MM_FETCH_BURSTS 16
static inline int mm_burst_steps(int kc) {   // k steps from one burst to the next
    return kc > MM_FETCH_BURSTS ? (kc + MM_FETCH_BURSTS - 1) / MM_FETCH_BURSTS : 1;
}
static inline int mm_bursts(int kc) { return (kc + mm_burst_steps(kc) - 1) / mm_burst_steps(kc); }

typedef struct {
    mm_prefetch next[2];   // the next block of B, of A
    int burst[2];          // lines of each per burst
} mm_fetch;

static inline void mm_fetch_burst(mm_fetch* f) {
    mm_prefetch_some(&f->next[0], f->burst[0]);
    mm_prefetch_some(&f->next[1], f->burst[1]);
}

// The micro-kernel body for a tile of `rows` rows (rows <= MR): C tile (rows x nr) += packed A
// micro-panel (rows x kc) . packed B micro-panel (kc x NR), or C tile = init + the product, C not
// read. Every element gets the same arithmetic whatever `rows` is (from zero, one MM_FMA per k in
// order, one add into C): batch invariance rests on it. a_rows: A's rows read in place at
// ap + i * lda; transposed: the tile goes into C transposed. fetch (may be NULL): what to prefetch.
static MM_ALWAYS_INLINE void mm_kernel_rows(int rows, int kc, const float* ap, size_t lda, const float* bp,
                                            float* c, size_t ldc, int nr, const float* init,
                                            int a_rows, int transposed, mm_fetch* fetch) {
    const mm_vec zero = {0};
    mm_vec acc[MM_MR][MM_NR_VECS];
    MM_UNROLL for (int i = 0; i < rows; i++) {
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = zero;
    }
    // k in chunks, each after a burst of prefetches (the tile of C, the next blocks)
    int step = mm_burst_steps(kc), half = (mm_bursts(kc) + 1) / 2;
    int c_rows = transposed ? nr : rows, c_next = 0, c_burst = (c_rows + half - 1) / half;
    int c_span = transposed ? rows - 1 : MM_NR - 1;
    for (int p0 = 0; p0 < kc; p0 += step) {
        for (int r = 0; r < c_burst && c_next < c_rows; r++, c_next++) {
            __builtin_prefetch(c + c_next * ldc, 1);
            __builtin_prefetch(c + c_next * ldc + c_span, 1);
        }
        if (fetch != NULL) mm_fetch_burst(fetch);
        int p1 = mm_min(kc, p0 + step);
        for (int p = p0; p < p1; p++) {
            const mm_vec* b = (const mm_vec*)(bp + (size_t)p * MM_NR);   // 64-byte aligned
            mm_vec bv[MM_NR_VECS];
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) bv[v] = b[v];
            MM_UNROLL for (int i = 0; i < rows; i++) {
                float a = a_rows ? ap[i * lda + p] : ap[(size_t)p * rows + i];
                MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = MM_FMA(acc[i][v], a, bv[v]);
            }
        }
    }
    if (transposed) mm_store_transposed(rows, (const mm_vec (*)[MM_NR_VECS])acc, c, ldc, nr, init);
    else mm_store_tile(rows, (const mm_vec (*)[MM_NR_VECS])acc, c, ldc, nr, init);
}

// One copy of the body per row count, so its loops unroll and an edge tile (M = 1 in a decode
// step) runs only its rows of FMAs. mm_kernel packs A, mm_kernel_a_rows reads it in place.
static MM_ALWAYS_INLINE void mm_kernel_form(int a_rows, int transposed, int kc, const float* ap, size_t lda,
                                            const float* bp, float* c, size_t ldc, int mr, int nr,
                                            const float* init, mm_fetch* fetch) {
#define MM_ROWS(r) case r: if (r <= MM_MR) mm_kernel_rows(r, kc, ap, lda, bp, c, ldc, nr, init, a_rows, transposed, fetch); break;
    switch (mr) {
        MM_ROWS(1) MM_ROWS(2) MM_ROWS(3) MM_ROWS(4) MM_ROWS(5) MM_ROWS(6) MM_ROWS(7)
        MM_ROWS(8) MM_ROWS(9) MM_ROWS(10) MM_ROWS(11) MM_ROWS(12) MM_ROWS(13) MM_ROWS(14)
        default: mm_kernel_rows(mr, kc, ap, lda, bp, c, ldc, nr, init, a_rows, transposed, fetch); break;
    }
#undef MM_ROWS
}

static void mm_kernel(int kc, const float* ap, const float* bp, float* c, size_t ldc, int mr, int nr,
                      const float* init, mm_fetch* fetch) {
    mm_kernel_form(0, 0, kc, ap, 0, bp, c, ldc, mr, nr, init, fetch);
}

static void mm_kernel_a_rows(int kc, const float* ap, size_t lda, const float* bp, float* c, size_t ldc,
                             int mr, int nr, const float* init, int transposed, mm_fetch* fetch) {
    mm_kernel_form(1, transposed, kc, ap, lda, bp, c, ldc, mr, nr, init, fetch);
}

// Packs `rows` x kc elements into one micro-panel: element (r, p), at src[r * stride_r +
// p * stride_p], to dst[p * rows_total + r]. Rows from `rows` to rows_total are left as they are.
static void mm_pack_panel(float* dst, const float* src, size_t stride_r, size_t stride_p,
                          int rows, int rows_total, int kc) {
    int p0 = 0;
    if (stride_p == 1) {   // a transpose
#ifdef MM_SHUFFLE_TRANSPOSE
        // LANES x LANES blocks through registers, for full panels
        int tail = rows_total % MM_LANES;
        if (rows == rows_total && (tail == 0 || tail == MM_MR % MM_LANES)) {
            for (; p0 + MM_LANES <= kc; p0 += MM_LANES) {
                for (int r0 = 0; r0 < rows_total; r0 += MM_LANES) {
                    mm_vec block[MM_LANES];
                    MM_UNROLL for (int i = 0; i < MM_LANES; i++) {
                        int r = mm_min(r0 + i, rows_total - 1);
                        memcpy(&block[i], src + r * stride_r + p0, sizeof(mm_vec));
                    }
                    mm_transpose(block);
                    float* d = dst + (size_t)p0 * rows_total + r0;
                    if (r0 + MM_LANES <= rows_total) {
                        MM_UNROLL for (int i = 0; i < MM_LANES; i++) {
                            memcpy(d + (size_t)i * rows_total, &block[i], sizeof(mm_vec));
                        }
                    } else {
                        MM_UNROLL for (int i = 0; i < MM_LANES; i++) {
                            memcpy(d + (size_t)i * rows_total, &block[i], (MM_MR % MM_LANES) * sizeof(float));
                        }
                    }
                }
            }
        }
#endif
        for (int r = 0; r < rows; r++) {
            const float* s = src + r * stride_r;
            for (int p = p0; p < kc; p++) dst[(size_t)p * rows_total + r] = s[p];
        }
    } else {               // copy rows of floats
        for (int p = 0; p < kc; p++) {
            const float* s = src + p * stride_p;
            for (int r = 0; r < rows; r++) dst[(size_t)p * rows_total + r] = s[r * stride_r];
        }
    }
}

// Packs the kc x nc block of B (element (p, j) at b[p * rsb + j * csb]) into NR-column panels,
// the last padded with zero columns: the panel of columns j.. at dst + j * kc.
static void mm_pack_b(float* dst, const float* b, size_t rsb, size_t csb, int kc, int nc) {
    if (csb == 1 && rsb != 1) {
        // B's rows contiguous: each read end to end, dealt out 8 panels at a time (the panels
        // often share L1 sets)
        int whole = nc / MM_NR * MM_NR;
        for (int j0 = 0; j0 < whole; j0 += 8 * MM_NR) {
            int j1 = mm_min(whole, j0 + 8 * MM_NR);
            for (int p = 0; p < kc; p++) {
                const float* s = b + p * rsb;
                for (int j = j0; j < j1; j += MM_NR) {
                    memcpy(dst + (size_t)j * kc + (size_t)p * MM_NR, s + j, MM_NR * sizeof(float));
                }
            }
        }
        if (whole == nc) return;
        b += whole, dst += (size_t)whole * kc, nc -= whole;   // the last, narrower panel
    }
    for (int j = 0; j < nc; j += MM_NR) {
        float* panel = dst + (size_t)j * kc;
        int cols = mm_min(MM_NR, nc - j);
        mm_pack_panel(panel, b + j * csb, csb, rsb, cols, MM_NR, kc);
        for (int p = 0; cols < MM_NR && p < kc; p++) {
            memset(panel + (size_t)p * MM_NR + cols, 0, (size_t)(MM_NR - cols) * sizeof(float));
        }
    }
}

// Packs the mc x kc block of A (element (i, p) at a[i * rsa + p * csa]) into MR-row panels, the
// last only as high as its rows: the panel of rows i.. at dst + i * kc.
static void mm_pack_a(float* dst, const float* a, size_t rsa, size_t csa, int mc, int kc) {
    if (rsa == 1 && csa != 1) {
        // A's columns contiguous (dout^T): each read once end to end, dealt to every panel
        for (int p = 0; p < kc; p++) {
            const float* s = a + p * csa;
            int i = 0;
            for (; i + MM_MR <= mc; i += MM_MR) {   // a copy of constant size, inlined
                memcpy(dst + (size_t)i * kc + (size_t)p * MM_MR, s + i, MM_MR * sizeof(float));
            }
            for (int r = 0; i + r < mc; r++) dst[(size_t)i * kc + (size_t)p * (mc - i) + r] = s[i + r];
        }
        return;
    }
    for (int i = 0; i < mc; i += MM_MR) {
        int rows = mm_min(MM_MR, mc - i);
        mm_pack_panel(dst + (size_t)i * kc, a + i * rsa, rsa, csa, rows, rows, kc);
    }
}

// Operand B: a matrix packed block by block (packed == NULL; (p, j) at b[p * rsb + j * csb]) or
// B packed once by gemm_pack_b, n_pad floats wide. init 0: C += A . B; init 1: C = bias + A . B,
// the bias (NULL: zeros) added where the first KC block goes into C. a_rows: A read in place
// (csa = 1). transposed: C written transposed, one bias value per row of A.
typedef struct {
    const float* b;
    size_t rsb, csb;
    const float* packed;
    size_t n_pad;
    int init;
    const float* bias;
    int a_rows, transposed;
} mm_operand;

static mm_prefetch mm_prefetch_block(const mm_operand* b, int pc, int kc, int j, int nc) {
    mm_prefetch none = {NULL, 0, 0, 0, 0, 0};
    if (b->packed != NULL) return none;
    return mm_prefetch_of(b->b + pc * b->rsb + j * b->csb, b->rsb, b->csb, kc, nc);
}

// Init rows: zeros for a tile's NR columns (transposed: its MR rows); the bias (or zeros) in the
// first KC block of a product that sets C, else none.
static const float mm_zero_row[MM_NR > MM_MR ? MM_NR : MM_MR] = {0};

static inline const float* mm_init_row(int init, const float* bias, int pc, int col) {
    if (pc > 0 || !init) return NULL;
    return bias != NULL ? bias + col : mm_zero_row;
}

// C (M x N) = the bias in every row (zeros without one): a product of no K.
static void mm_set_rows(float* c, size_t ldc, const float* bias, int M, int N) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) c[i * ldc + j] = bias != NULL ? bias[j] : 0.0f;
    }
}

// C (M x N) += A . columns j0..j0+N-1 of B on one thread; packed_a (MC_PAD x KC) and packed_b
// (KC x NC) 64-byte aligned. MM_AFTER_KERNEL(): a hook for dev/bench/overlap.c.
#ifndef MM_AFTER_KERNEL
#define MM_AFTER_KERNEL() ((void)0)
#endif

static void gemm_block(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                       const mm_operand* b, int j0, int M, int N, int K,
                       float* packed_a, float* packed_b) {
    const int NC = b->a_rows && !b->transposed ? MM_NC_A_ROWS : MM_NC;
    for (int jc = 0; jc < N; jc += NC) {
        int nc = mm_min(NC, N - jc);
        for (int pc = 0; pc < K; pc += MM_KC) {
            int kc = mm_min(MM_KC, K - pc);
            const float* bp;   // the block's panels, columns j.. at bp + j * kc
            if (b->packed != NULL) {
                bp = b->packed + (size_t)pc * b->n_pad + (size_t)(j0 + jc) * kc;
            } else {
                mm_pack_b(packed_b, b->b + pc * b->rsb + (j0 + jc) * b->csb, b->rsb, b->csb, kc, nc);
                bp = packed_b;
            }
            // the next block: the next KC rows, else the next NC columns
            int next_pc = pc + MM_KC < K ? pc + MM_KC : 0, next_jc = pc + MM_KC < K ? jc : jc + NC;
            mm_fetch fetch;
            fetch.next[0] = mm_prefetch_block(b, next_pc, mm_min(MM_KC, K - next_pc), j0 + next_jc,
                                              mm_min(NC, N - next_jc));
            int calls = (nc + MM_NR - 1) / MM_NR * ((M + MM_MR - 1) / MM_MR + (M + MM_MC - 1) / MM_MC);
            fetch.burst[0] = (mm_prefetch_share(&fetch.next[0], calls) + mm_bursts(kc) - 1) / mm_bursts(kc);
            for (int ic = 0; ic < M; ic += MM_MC) {
                int mc = mm_min(MM_MC, M - ic);
                if (!b->a_rows) mm_pack_a(packed_a, a + ic * rsa + pc * csa, rsa, csa, mc, kc);
                // and the next block of A (dW's dout^T)
                fetch.next[1] = ic + MM_MC < M
                    ? mm_prefetch_of(a + (ic + MM_MC) * rsa + pc * csa, rsa, csa, mm_min(MM_MC, M - ic - MM_MC), kc)
                    : mm_prefetch_of(NULL, 0, 0, 0, 0);
                int a_lines = mm_prefetch_share(&fetch.next[1], (nc + MM_NR - 1) / MM_NR * ((mc + MM_MR - 1) / MM_MR));
                fetch.burst[1] = (a_lines + mm_bursts(kc) - 1) / mm_bursts(kc);
                mm_fetch* f = fetch.burst[0] + fetch.burst[1] > 0 ? &fetch : NULL;
                for (int j = 0; j < nc; j += MM_NR) {        // one B panel, from L1,
                    const float* init = mm_init_row(b->init, b->bias, pc, j0 + jc + j);
                    for (int i = 0; i < mc; i += MM_MR) {    // against every A panel in L2
                        if (b->transposed) {
                            mm_kernel_a_rows(kc, a + (ic + i) * rsa + pc, rsa, bp + (size_t)j * kc,
                                             c + (jc + j) * ldc + ic + i, ldc, mm_min(MM_MR, mc - i),
                                             mm_min(MM_NR, nc - j), mm_init_row(b->init, b->bias, pc, ic + i), 1, f);
                        } else if (b->a_rows) {
                            mm_kernel_a_rows(kc, a + (ic + i) * rsa + pc, rsa, bp + (size_t)j * kc,
                                             c + (ic + i) * ldc + jc + j, ldc, mm_min(MM_MR, mc - i),
                                             mm_min(MM_NR, nc - j), init, 0, f);
                        } else {
                            mm_kernel(kc, packed_a + (size_t)i * kc, bp + (size_t)j * kc,
                                      c + (ic + i) * ldc + jc + j, ldc, mm_min(MM_MR, mc - i),
                                      mm_min(MM_NR, nc - j), init, f);
                        }
                        MM_AFTER_KERNEL();
                    }
                }
            }
        }
    }
}

// The packing buffers (up to 9 MB a thread), kept from product to product (freed, they came
// back as fresh pages). Thread-local: one set per calling thread.
#ifdef __cplusplus
#define MM_THREAD_LOCAL thread_local
#else
#define MM_THREAD_LOCAL _Thread_local
#endif
static float* mm_scratch(size_t floats) {
    static MM_THREAD_LOCAL float* buffer = NULL;
    static MM_THREAD_LOCAL size_t capacity = 0;
    if (floats > capacity) {
        free(buffer);
        buffer = (float*)aligned_alloc_check(64, (floats + 15) / 16 * 16 * sizeof(float));
        capacity = floats;
    }
    return buffer;
}

// C += A . B on all threads, each on its own slice of whole tiles along C's longer side.
static void gemm_threads(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                         const mm_operand* b, int M, int N, int K) {
    int threads = num_threads();
    size_t b_floats = b->packed != NULL ? 0 : (size_t)MM_KC * MM_NC;
    size_t per_thread = ((size_t)MM_MC_PAD * MM_KC + b_floats + 15) / 16 * 16;
    float* aligned = mm_scratch(threads * per_thread);
    #pragma omp parallel num_threads(threads)
    {
        float* packed_a = aligned + thread_num() * per_thread;
        float* packed_b = packed_a + (size_t)MM_MC_PAD * MM_KC;
        size_t t0, t1;  // this thread's tiles
        // element (i, j) at c + i * rs + j * cs (C^T for a transposed one)
        size_t rs = b->transposed ? 1 : ldc, cs = b->transposed ? ldc : 1;
        if (N >= M) {   // slices of columns, whole tiles
            thread_share((size_t)(N + MM_NR - 1) / MM_NR, &t0, &t1);
            int j0 = (int)t0 * MM_NR, j1 = mm_min(N, (int)t1 * MM_NR);
            if (j1 > j0) {
                gemm_block(c + j0 * cs, ldc, a, rsa, csa, b, j0, M, j1 - j0, K, packed_a, packed_b);
            }
        } else {        // slices of rows, whole tiles
            thread_share((size_t)(M + MM_MR - 1) / MM_MR, &t0, &t1);
            int i0 = (int)t0 * MM_MR, i1 = mm_min(M, (int)t1 * MM_MR);
            mm_operand mine = *b;   // a bias by rows starts at this slice's
            if (b->transposed && b->bias != NULL) mine.bias = b->bias + i0;
            if (i1 > i0) {
                gemm_block(c + i0 * rs, ldc, a + i0 * rsa, rsa, csa, &mine, 0, i1 - i0, N, K,
                           packed_a, packed_b);
            }
        }
    }
}

// C (M x N, row stride ldc) += A (M x K) . B (K x N), A(i, p) at a[i * rsa + p * csa] and
// B(p, j) at b[p * rsb + j * csb].
static void gemm_accumulate(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                            const float* b, size_t rsb, size_t csb, int M, int N, int K) {
    mm_operand op = {b, rsb, csb, NULL, 0, 0, NULL, 0, 0};
    gemm_threads(c, ldc, a, rsa, csa, &op, M, N, K);
}

// gemm_accumulate reading A's contiguous rows in place (dinp's dout): the same bits.
static void gemm_accumulate_a_rows(float* c, size_t ldc, const float* a, size_t lda, const float* b,
                                   size_t rsb, size_t csb, int M, int N, int K) {
    mm_operand op = {b, rsb, csb, NULL, 0, 0, NULL, 1, 0};
    gemm_threads(c, ldc, a, lda, 1, &op, M, N, K);
}

// C = bias + A . B for an operand with init set; a product of no K sets C here.
static void gemm_set(float* c, size_t ldc, const float* a, size_t rsa, size_t csa, const mm_operand* op,
                     int M, int N, int K) {
    if (K > 0) gemm_threads(c, ldc, a, rsa, csa, op, M, N, K);
    else mm_set_rows(c, ldc, op->bias, M, N);
}

// C (M x N) = bias + A . B, bias N floats (NULL: zeros): the bits of C filled with the bias and
// gemm_accumulate, without that pass.
static void gemm_bias(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                      const float* b, size_t rsb, size_t csb, int M, int N, int K, const float* bias) {
    mm_operand op = {b, rsb, csb, NULL, 0, 1, bias, 0, 0};
    gemm_set(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C (M x N) = bias + A . W^T, W (N x K) a weight, computed as C^T = W . A^T: W read in place, only
// A^T packed. The bits of gemm_bias(c, ldc, a, lda, 1, w, 1, ldw, M, N, K, bias).
static void gemm_bias_weight_rows(float* c, size_t ldc, const float* a, size_t lda, const float* w,
                                  size_t ldw, int M, int N, int K, const float* bias) {
    if (K <= 0) {
        mm_set_rows(c, ldc, bias, M, N);
        return;
    }
    mm_operand op = {a, 1, lda, NULL, 0, 1, bias, 1, 1};   // B = A^T: element (p, j) at a[j * lda + p]
    gemm_threads(c, ldc, w, ldw, 1, &op, N, M, K);
}

// ---------- matrix product with B packed once ----------
// Generation multiplies the weights by a few rows at a time, where packing costs as much as the
// product: gemm_pack_b packs B once in gemm_block's layout, KC-deep blocks n_pad wide. The same
// bits as gemm_accumulate. packed is 64-byte aligned (each packed size is whole 64-byte lines).

static inline size_t mm_packed_width(int N) { return (size_t)(N + MM_NR - 1) / MM_NR * MM_NR; }

// Floats that gemm_pack_b writes for a K x N operand.
static inline size_t gemm_packed_size(int K, int N) { return (size_t)K * mm_packed_width(N); }

static inline void mm_check_aligned(const float* packed, const char* who) {
    if ((uintptr_t)packed % MM_VEC_BYTES != 0) {
        fail("%s: the packed operand at %p is not %d-byte aligned (allocate it with "
             "aligned_alloc_check(64, ...))", who, (const void*)packed, MM_VEC_BYTES);
    }
}

// Packs B (K x N) into packed (gemm_packed_size(K, N) floats).
static inline void gemm_pack_b(float* packed, const float* b, size_t rsb, size_t csb, int K, int N) {
    mm_check_aligned(packed, "gemm_pack_b");
    size_t n_pad = mm_packed_width(N);
    #pragma omp parallel for schedule(static, 1)
    for (int pc = 0; pc < K; pc += MM_KC) {
        mm_pack_b(packed + (size_t)pc * n_pad, b + pc * rsb, rsb, csb, mm_min(MM_KC, K - pc), N);
    }
}

// C += A . B as gemm_accumulate, B packed by gemm_pack_b: the same bits.
static inline void gemm_accumulate_packed(float* c, size_t ldc, const float* a, size_t rsa,
                                          size_t csa, const float* packed_b, int M, int N, int K) {
    mm_check_aligned(packed_b, "gemm_accumulate_packed");
    mm_operand op = {NULL, 0, 0, packed_b, mm_packed_width(N), 0, NULL, 0, 0};
    gemm_threads(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C = bias + A . B as gemm_bias, B packed by gemm_pack_b: the same bits.
static inline void gemm_bias_packed(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                    const float* packed_b, int M, int N, int K, const float* bias) {
    mm_check_aligned(packed_b, "gemm_bias_packed");
    mm_operand op = {NULL, 0, 0, packed_b, mm_packed_width(N), 1, bias, 0, 0};
    gemm_set(c, ldc, a, rsa, csa, &op, M, N, K);
}

// ---------- the largest of n floats, vectorised ----------
// A max is exact in any order; GCC keeps `x > m ? x : m` scalar, hence _mm512_max_ps.
static inline float max_lanes(const float* x, int n) {
    float m = -INFINITY;
    int i = 0;
#if MM_VEC_BYTES == 64
    if (n >= 16) {
        __m512 v = _mm512_loadu_ps(x);
        for (i = 16; i + 16 <= n; i += 16) v = _mm512_max_ps(_mm512_loadu_ps(x + i), v);
        m = _mm512_reduce_max_ps(v);
    }
#endif
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

// ---------- a dot product that vectorises ----------
// In the order written, a dot product is one chain of dependent adds. Here lane j sums the terms
// i = j mod 16, then a fixed tree adds the lanes: a fixed order, the same bits on any threads.

// 16 lanes' sums in dot_lanes' tree: halves, quarters, then the last four in pairs.
static inline float lanes_total(const float* s) {
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = s[j] + s[j + 8];
    for (int j = 0; j < 4; j++) t[j] += t[j + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(MATMUL_PLAIN_C)
typedef float dot_vec16 __attribute__((vector_size(16 * sizeof(float))));
typedef float dot_vec8 __attribute__((vector_size(8 * sizeof(float))));
typedef float dot_vec4 __attribute__((vector_size(4 * sizeof(float))));
static inline float dot_lanes(const float* a, const float* b, int n) {
    dot_vec16 s = {0}, x, y;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        memcpy(&x, a + i, sizeof(x));
        memcpy(&y, b + i, sizeof(y));
        s += x * y;
    }
    for (int j = 0; i < n; i++, j++) s[j] += a[i] * b[i];
    dot_vec8 lo8, hi8;   // the tree in registers
    memcpy(&lo8, &s, sizeof(lo8));
    memcpy(&hi8, (const char*)&s + sizeof(lo8), sizeof(hi8));
    lo8 += hi8;
    dot_vec4 lo4, hi4;
    memcpy(&lo4, &lo8, sizeof(lo4));
    memcpy(&hi4, (const char*)&lo8 + sizeof(lo4), sizeof(hi4));
    lo4 += hi4;
    return (lo4[0] + lo4[2]) + (lo4[1] + lo4[3]);
}
#else
static inline float dot_lanes(const float* a, const float* b, int n) {
    float s[16] = {0.0f};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) s[j] += a[i + j] * b[i + j];
    }
    for (int j = 0; i < n; i++, j++) s[j] += a[i] * b[i];
    return lanes_total(s);
}
#endif

// ---------- exp and tanh that vectorise ----------
// libm's tanhf and expf keep GELU's and softmax's loops scalar; these vectorise: Cephes' tanhf on
// e^y = 2^n * e^r. Within 2 ulp of libm (test_matmul); gradcheck's double build uses libm.
#ifndef TANH_FAST
#define TANH_FAST tanh_vec
#define EXP_FAST exp_vec
#endif

static inline float exp_vec(float y) {
    y = y < -87.0f ? -87.0f : (y > 88.0f ? 88.0f : y);        // 2^n stays a normal float
    float n = (y * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(y / ln 2): 1.5*2^23 trick
    float r = y - n * 0.693359375f - n * -2.12194440e-4f;      // y - n ln2, ln2 in two parts
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float er = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;                   // 2^n as a float
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    return er * two_n;
}

static inline float tanh_vec(float x) {
    float ax = fabsf(x);
    ax = ax > 10.0f ? 10.0f : ax;                              // (NaN stays NaN)
    float large = 1.0f - 2.0f / (exp_vec(2.0f * ax) + 1.0f);
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                    1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    return ax < 0.625f ? small : copysignf(large, x);
}

#endif // GPT2_CPU_MATH_H
