// gpt2/cpu_math.h: the fast arithmetic of the CPU layers: a blocked, packed matrix product
// (gemm_accumulate and gemm_bias, their _packed twins for a B packed once, and the forms that
// read a row-major operand in place: gemm_accumulate_a_rows, gemm_bias_weight_rows), and a max, a
// dot product, exp and tanh in plain arithmetic that vectorises. Engineering beside the lesson:
// gpt2/cpu_layers.h defines each layer plainly and calls these where they make it fast
// (matmul_forward, matmul_backward, matmul_forward_packed, attention, softmax_forward, the
// classifier, GELU). doc/cpu_speed.md has the measured speeds and what was tried.

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

// Inside a parallel region: this thread's number (0 without OpenMP), and its share of n things,
// [begin, end) = [n t / T, n (t + 1) / T) for thread t of the region's T: the threads' shares lie
// in their order, end to end, and cover all n.
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
// B (K x N), with A and B each given by a pointer and two strides, so that a transposed operand
// is only another pair of strides (the forward pass's gemm_bias sets C = bias + A . B instead):
//   forward    out  (BT x OC) = bias + inp (BT x C) . weight^T (C x OC)   weight^T(k, o) = weight[o*C + k]
//   backward   dinp (BT x C)  += dout (BT x OC) . weight (OC x C)
//              dW   (OC x C)  += dout^T (OC x BT) . inp (BT x C)     dout^T(o, k) = dout[k*OC + o]
//
// The scheme is GotoBLAS's (also BLIS's), sized for AVX-512 with 16 floats per vector, 32 vector
// registers, and per core 48 KB of L1d and 1 MB of L2 (Zen 5; doc/cpu_speed.md has the
// measurements behind each size):
//   register tile  MR x NR = 14 x 32 floats of C stay in 28 registers while the micro-kernel runs
//                  over k. Each k step loads 2 vectors of B, broadcasts 14 floats of A and does 28
//                  vector FMAs: 16 loads per 28 FMAs, so the FMA units, not the loads, set the
//                  pace.
//   KC = 1024      depth of one pass, as deep as the model's common K (C = 768) so that a tile of
//                  C is loaded and stored once per product rather than once per pass: the B
//                  micro-panel (KC x NR, 128 KB) and the A micro-panel (MR x KC, 56 KB) stream
//                  from L2, 9 and 4 bytes per cycle of FMAs, far below what L2 delivers,
//   MC = 126       rows in a packed block of A (MC x KC floats, 504 KB) that stays in L2 beside
//                  the B micro-panel: about 128, in whole tiles (9 x 14), so that a block has no
//                  short tile whose few accumulators could not keep the FMA units busy,
//   NC = 2048      columns in a packed block of B (KC x NC, 8 MB) that stays in L3.
// Packing copies a block of A into MR-row micro-panels and a block of B into NR-column
// micro-panels, in the order the kernel reads them, so the kernel reads both with unit stride
// whatever the layout of the original. Where that order is a transpose of the original (weight^T
// in the forward pass, inp and dout as A), it is transposed 16 x 16 floats at a time in
// registers. Edge panels of B are padded with zero columns; the kernel computes full NR-wide
// tiles and writes back only the part inside C. It has a version for each row count, so that a
// tile of fewer than MR rows (a single row in a decode step) costs only its own rows: the A
// micro-panel of such a tile is packed only as high as its rows.
// Two products of training skip a pack (doc/cpu_speed.md has what each saved). The kernel only
// needs A's rows in order along k, which a row-major A already is: dinp += dout . weight reads
// dout's rows where they lie (gemm_accumulate_a_rows), instead of each thread packing all of it.
// The forward pass computes out^T = weight . inp^T (gemm_bias_weight_rows): the weight, read in
// place, is A, only inp^T (B x T tokens: small) is packed as B, and each tile goes into out
// transposed through registers. Neither changes any element's arithmetic.
//
// Threads: C is cut into one slice per thread along its longer side (rows of the weight in the
// forward pass, columns of dinp, rows of dW for every layer except the MLP projection), in whole
// tiles, and each thread runs the whole blocked product on its slice with its own packing
// buffers. One fork and one join per product and no barriers inside: on a machine shared with
// other work, a product waits for one late thread, not for one late thread per block.
//
// Determinism: every element of C is summed over k in the same order (the KC blocks in turn, k
// in turn inside) by exactly one thread, so the result does not depend on the number of threads
// or on scheduling; there are no atomics and no reductions across threads. Nor does it depend on
// the other rows of A: a row's elements get the same arithmetic whatever M is and wherever the
// row sits (batch invariance, which generation relies on).
//
// The vector width and tile come from the build: AVX-512 (-march=native on such a machine), AVX2,
// or 16-byte vectors (SSE, NEON) through GCC vector extensions; any other compiler, or
// -DMATMUL_PLAIN_C, gets the same code with one float per "vector", a 4 x 8 register tile of
// scalars. test/test_matmul.sh checks all of them against the naive loops of gpt2/cpu_layers.h.

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
// The loops over the register tile, unrolled so that the tile lives in registers. A build may
// define MM_UNROLL empty (the CUDA emulator's race-detector builds do, where this GEMM only makes
// reference values and its unrolled copies took most of the compile time): the same arithmetic,
// in the same order, only slower.
#ifndef MM_UNROLL
#define MM_UNROLL _Pragma("GCC unroll 32")
#endif
#if !defined(__clang__)
#define MM_SHUFFLE_TRANSPOSE 1   // __builtin_shuffle is GCC's (clang spells it differently)
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
// NC in whole NR-wide micro-panels (2048 for the ISAs' tiles): gemm_pack_b's panels start at
// multiples of NR, and a block of columns must start on one of them to find its panels there.
#define MM_NC ((2048 + MM_NR - 1) / MM_NR * MM_NR)
#define MM_MC_PAD ((MM_MC + MM_MR - 1) / MM_MR * MM_MR)   // whole micro-panels
// NC where A is read in place (dinp's dout, gemm_accumulate_a_rows): rereading A for each block of
// B's columns costs no packing there, so a block of B can be narrow enough to stay in a 2 MB L2
// (KC x 512 floats: 2 MB at most, 1.5 MB at K = 768) rather than in L3, where a packed A, packed
// again for every block of columns, wants blocks of B as wide as NC (doc/cpu_speed.md).
#define MM_NC_A_ROWS ((512 + MM_NR - 1) / MM_NR * MM_NR)

static int mm_min(int a, int b) { return a < b ? a : b; }

// acc + a * b, rounded once wherever the machine has a fused multiply-add, and the same way in
// every copy of the kernel below. Left to itself, GCC (-ffp-contract=fast, its default for GNU C)
// fuses some of these products and not others depending on how it schedules a copy (seen with
// one-vector tiles on AVX2, and with plain floats that it vectorises across the tile), and a
// row's bits would then depend on how many rows share its tile. So the FMA is spelled out.
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
// Transposes a LANES x LANES block held in LANES vectors, in log2(LANES) rounds: the round with
// half-width h swaps the off-diagonal h x h sub-blocks of every 2h x 2h block (h = LANES/2 ... 1),
// each swap one two-vector shuffle per row. 16 x 16 floats: 64 shuffles instead of 256 scalar moves.
// Always inlined: as a call, the block goes through memory (slower: doc/cpu_speed.md).
__attribute__((always_inline)) static inline void mm_transpose(mm_vec* v) {
    mm_ivec lane;
    MM_UNROLL for (int l = 0; l < MM_LANES; l++) lane[l] = l;
    MM_UNROLL for (int s = 1; s < MM_LANES; s *= 2) {
        int h = MM_LANES / 2 / s;
        mm_ivec upper = (lane & h) != 0;   // -1 in the upper half of each 2h group of lanes
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

// n <= LANES floats from src to dst: a copy of constant size for each n, which the compiler
// turns into a move or two where a memcpy of a variable size would be a call (n is a constant
// wherever the caller's loops unroll). Only the cases up to LANES copy: the compiler, which
// cannot tell that n stays below LANES, would otherwise warn of copies longer than a vector.
static MM_ALWAYS_INLINE void mm_copy_floats(float* dst, const float* src, int n) {
#define MM_COPY(k) case k: if (k <= MM_LANES) memcpy(dst, src, k * sizeof(float)); return;
    switch (n) {
        MM_COPY(1) MM_COPY(2) MM_COPY(3) MM_COPY(4) MM_COPY(5) MM_COPY(6) MM_COPY(7) MM_COPY(8)
        MM_COPY(9) MM_COPY(10) MM_COPY(11) MM_COPY(12) MM_COPY(13) MM_COPY(14) MM_COPY(15) MM_COPY(16)
        default: return;
    }
#undef MM_COPY
}

// The end of a call of the kernel in its transposed form (below): the tile's `rows` x nr sums,
// in acc, go into C transposed, tile element (i, j) to c[j * ldc + i], with one add each: into
// init[i] (the init of C's column i, the tile's row) or into what C holds. Through registers,
// LANES rows at a time turned into LANES columns (mm_transpose), each stored as one run of n
// floats along a row of C (AVX-512: one masked store). One copy for every row count, called once
// per tile (a few dozen cycles against the tile's thousands): inlined into each copy of the
// kernel, it doubled the compile time of every program that includes this file.
static MM_NOINLINE void mm_store_transposed(int rows, const mm_vec (*acc)[MM_NR_VECS], float* c,
                                            size_t ldc, int nr, const float* init) {
#ifdef MM_SHUFFLE_TRANSPOSE
    if (nr == MM_NR) {
        MM_UNROLL for (int r0 = 0; r0 < rows; r0 += MM_LANES) {
            int n = mm_min(MM_LANES, rows - r0);   // the tile's rows r0.. as the lanes of a row of C
            mm_vec start = {0};   // the tile's init values, a row of C's columns
            if (init != NULL) memcpy(&start, init + r0, (size_t)n * sizeof(float));
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) {
                mm_vec block[MM_LANES];
                MM_UNROLL for (int l = 0; l < MM_LANES; l++) block[l] = acc[mm_min(r0 + l, rows - 1)][v];
                mm_transpose(block);   // block[t]: the tile's column v * LANES + t, rows r0.. in its lanes
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

// The source of the next block of B that gemm_block will pack, fetched into the caches a share
// at a time while the kernel works on the present one: packing then reads it from cache rather
// than memory, and the bytes come from memory while the FMA units are busy. Its lines are walked
// as segments of contiguous floats: rows of B where a row is contiguous (csb = 1), else columns
// (rsb = 1); B with neither is left to the hardware.
typedef struct {
    const float* base;      // the first float of the first segment
    size_t stride;          // floats from one segment to the next
    int segments, length;   // how many segments, floats in each
    int segment, offset;    // the cursor: the next line to fetch
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

// How many lines of f each of `calls` kernel calls fetches, to have fetched all of it by the last.
static int mm_prefetch_share(const mm_prefetch* f, int calls) {
    if (f->segments == 0 || calls <= 0) return 0;
    return (int)(((long long)f->segments * ((f->length + 15) / 16) + calls - 1) / calls);
}

// Fetches the next `lines` cache lines of the block (64 bytes, 16 floats each).
static inline void mm_prefetch_some(mm_prefetch* f, int lines) {
    for (; lines > 0 && f->segment < f->segments; lines--) {
        __builtin_prefetch(f->base + f->segment * f->stride + f->offset, 0, 2);
        f->offset += 16;
        if (f->offset >= f->length) f->segment++, f->offset = 0;
    }
}

// What a kernel call fetches while it runs: lines of the next block of B and of the next block of
// A, a burst of a few at a time spread over its k steps (mm_bursts(kc) bursts a call, 16 where kc
// allows), so that each burst's lines arrive while the FMAs go on. Issued all at once between two
// calls, a hundred prefetches that miss fill the core's line-fill buffers and hold up the
// instructions behind them (doc/cpu_speed.md).
#define MM_FETCH_BURSTS 16
static inline int mm_burst_steps(int kc) {   // k steps from one burst to the next
    return kc > MM_FETCH_BURSTS ? (kc + MM_FETCH_BURSTS - 1) / MM_FETCH_BURSTS : 1;
}
static inline int mm_bursts(int kc) { return (kc + mm_burst_steps(kc) - 1) / mm_burst_steps(kc); }

typedef struct {
    mm_prefetch next[2];   // the next block of B, the next block of A
    int burst[2];          // lines of each per burst
} mm_fetch;

static inline void mm_fetch_burst(mm_fetch* f) {
    mm_prefetch_some(&f->next[0], f->burst[0]);
    mm_prefetch_some(&f->next[1], f->burst[1]);
}

// The micro-kernel body for a tile of `rows` rows (rows <= MR): C tile (rows x nr of it inside C,
// row stride ldc) += packed A micro-panel (rows x kc) . packed B micro-panel (kc x NR), or, given
// an init row (the nr values C's columns start from: a bias, or zeros), C tile = init + the
// product, C not read. Every element of C gets the same arithmetic whatever `rows` is: a sum that
// starts at zero, one MM_FMA per k in order, then one add into C (or into init, the same add as
// into a C filled with init beforehand). So a row's result does not depend on how many rows
// share its tile, which the packed product's batch invariance rests on.
// Two other forms: with a_rows (a constant in each copy of the body), A's rows are read where
// they lie, row i of the tile at ap + i * lda, not from a packed micro-panel; with transposed
// (decided once per call: it changes only the tile's end), the tile goes into C transposed
// (mm_store_transposed, init then one value per row of the tile). The same arithmetic for every
// element in each. fetch (may be NULL): what to prefetch while the call runs, besides its tile of C.
static MM_ALWAYS_INLINE void mm_kernel_rows(int rows, int kc, const float* ap, size_t lda, const float* bp,
                                            float* c, size_t ldc, int nr, const float* init,
                                            int a_rows, int transposed, mm_fetch* fetch) {
    const mm_vec zero = {0};
    mm_vec acc[MM_MR][MM_NR_VECS];
    MM_UNROLL for (int i = 0; i < rows; i++) {
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = zero;
    }
    // The k steps in mm_bursts(kc) chunks, each after a burst of prefetches: the lines of the tile
    // of C that the end of the call adds into or stores (its rows, or in the transposed form its
    // nr columns, one or two lines each), spread over the first half of the bursts so that they
    // are in cache by the end, and the fetch's share of the next blocks.
    int step = mm_burst_steps(kc), half = (mm_bursts(kc) + 1) / 2;
    int c_rows = transposed ? nr : rows, c_next = 0, c_burst = (c_rows + half - 1) / half;
    int c_span = transposed ? rows - 1 : MM_NR - 1;   // from a row's first float of the tile to its last
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
                // broadcast to every lane by the multiply
                float a = a_rows ? ap[i * lda + p] : ap[(size_t)p * rows + i];
                MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = MM_FMA(acc[i][v], a, bv[v]);
            }
        }
    }
    if (transposed) {
        mm_store_transposed(rows, (const mm_vec (*)[MM_NR_VECS])acc, c, ldc, nr, init);
    } else if (nr == MM_NR) {
        MM_UNROLL for (int i = 0; i < rows; i++) {
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) {
                mm_vec cv;   // memcpy: rows of C need not be aligned (one unaligned load/store)
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

// The micro-kernel for an mr-row tile: one copy of the body per row count, each with `rows` a
// constant, so that its loops over rows unroll and keep the accumulators in registers. An edge
// tile of mr < MR rows (M = 1 in a decode step) then runs mr rows of FMAs, not MR rows of which
// MR - mr are padding. Cases past this build's MR are never reached, and compile to nothing; a
// tile taller than 14 rows (none of the ISAs' own) runs its tiles of more than 14 rows through
// the body with a variable row count: the same arithmetic, its accumulators in memory.
// The body in the form a product asks for (lda A's row stride where its rows are read in place);
// mm_kernel the packed form, mm_kernel_a_rows A read in place, its tile into C as it is or
// (transposed) transposed.
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

// Packs `rows` x kc elements into one micro-panel: element (r, p) goes to dst[p * rows_total + r],
// the order in which the kernel reads them. src points to element (0, 0); element (r, p) is at
// src[r * stride_r + p * stride_p]. Rows from `rows` to rows_total are left as they are.
static void mm_pack_panel(float* dst, const float* src, size_t stride_r, size_t stride_p,
                          int rows, int rows_total, int kc) {
    int p0 = 0;
    if (stride_p == 1) {   // rows are contiguous along p: a transpose
#ifdef MM_SHUFFLE_TRANSPOSE
        // LANES x LANES blocks through registers, for full panels (NR = a multiple of LANES
        // rows, or MR = a multiple plus MR % LANES: the last block rereads the panel's last row
        // to fill its vectors, and stores only MR % LANES floats of each).
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
    } else {               // columns are contiguous along r (or nothing is): copy rows of floats
        for (int p = 0; p < kc; p++) {
            const float* s = src + p * stride_p;
            for (int r = 0; r < rows; r++) dst[(size_t)p * rows_total + r] = s[r * stride_r];
        }
    }
}

// Packs the kc x nc block of B at b (element (p, j) at b[p * rsb + j * csb]) into NR-column
// micro-panels one after another, the last one padded with zero columns (the kernel multiplies
// them and stores none of them): the panel of columns j..j+NR-1 at dst + j * kc.
static void mm_pack_b(float* dst, const float* b, size_t rsb, size_t csb, int kc, int nc) {
    if (csb == 1 && rsb != 1) {
        // B's rows contiguous (dinp's B, the weight): each row read from end to end and dealt out
        // to the micro-panels, 8 at a time (their parts of a row are 1 KB of it; the panels lie
        // kc x NR floats apart, often in the same few sets of L1, which holds 12 lines a set)
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
        b += whole, dst += (size_t)whole * kc, nc -= whole;   // the last, narrower panel below
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

// Packs the mc x kc block of A at a (element (i, p) at a[i * rsa + p * csa]) into MR-row
// micro-panels one after another, the last one only as high as its rows: the panel of rows
// i..i+MR-1 at dst + i * kc.
static void mm_pack_a(float* dst, const float* a, size_t rsa, size_t csa, int mc, int kc) {
    if (rsa == 1 && csa != 1) {
        // A's columns contiguous (dW's A, dout^T: a column is a row of dout, rows of dout far
        // apart): each column read once from end to end and dealt out to every micro-panel,
        // rather than each panel reading its few floats of every column in turn
        for (int p = 0; p < kc; p++) {
            const float* s = a + p * csa;
            int i = 0;
            for (; i + MM_MR <= mc; i += MM_MR) {   // whole panels: a copy of constant size, inlined
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

// Operand B of a product: either a matrix that gemm_block packs block by block as it goes
// (packed == NULL; element (p, j) at b[p * rsb + j * csb]), or the whole of B packed once by
// gemm_pack_b (below), n_pad floats wide. And what the product does with C: adds into it
// (init 0), or (init 1) sets it, C = bias + A . B, the bias a row of N floats (NULL: zeros), added
// where the first KC block's sums go into C, so C is never filled beforehand and read back.
// And what the product does with A: packs it, or (a_rows) reads it where it lies, its rows
// contiguous (csa = 1): a block of A's rows is then in L2 as its packed copy would be, read as
// MR streams rather than one. transposed: the product is the transpose of the one wanted
// (gemm_bias_weight_rows, below): C is written transposed (element (i, j) of the product at
// c[j * ldc + i]) and the bias has one value per row of A.
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

// The init row of C = A . B: zeros for a tile's NR columns, or, in the transposed form, for its
// MR rows.
static const float mm_zero_row[MM_NR > MM_MR ? MM_NR : MM_MR] = {0};

// The init row for the tile of C's columns col.. in the KC block that starts at row pc of B: the
// bias's (or zeros) in the first block of a product that sets C, else none (C += the block's sums).
static inline const float* mm_init_row(int init, const float* bias, int pc, int col) {
    if (pc > 0 || !init) return NULL;
    return bias != NULL ? bias + col : mm_zero_row;
}

// C (M x N, row stride ldc) = the bias in every row (zeros without one): a product of no K.
static void mm_set_rows(float* c, size_t ldc, const float* bias, int M, int N) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) c[i * ldc + j] = bias != NULL ? bias[j] : 0.0f;
    }
}

// C (M x N, row stride ldc) += A . columns j0..j0+N-1 of B, on one thread, blocked as described
// above; c points at the first column of the slice. A(i, p) is a[i * rsa + p * csa]. packed_a
// holds MC_PAD x KC floats and packed_b KC x NC (unused when B comes packed), both 64-byte
// aligned. Each KC x nc block of B is packed here, or found where gemm_pack_b put it: both give
// the kernel the same panels, so both give the same bits.
// What gemm_block does after each kernel call besides its prefetches: nothing, unless a program
// defines MM_AFTER_KERNEL() before including this file (dev/bench/overlap.c runs slices of other
// work there, to see whether that work's memory traffic hides under the kernel's FMAs).
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
            const float* bp;   // the block's micro-panels, the one of columns j.. at bp + j * kc
            if (b->packed != NULL) {
                bp = b->packed + (size_t)pc * b->n_pad + (size_t)(j0 + jc) * kc;
            } else {
                mm_pack_b(packed_b, b->b + pc * b->rsb + (j0 + jc) * b->csb, b->rsb, b->csb, kc, nc);
                bp = packed_b;
            }
            // the next block in this loop order: the next KC rows, else the next NC columns
            int next_pc = pc + MM_KC < K ? pc + MM_KC : 0, next_jc = pc + MM_KC < K ? jc : jc + NC;
            mm_fetch fetch;
            fetch.next[0] = mm_prefetch_block(b, next_pc, mm_min(MM_KC, K - next_pc), j0 + next_jc,
                                              mm_min(NC, N - next_jc));
            int calls = (nc + MM_NR - 1) / MM_NR * ((M + MM_MR - 1) / MM_MR + (M + MM_MC - 1) / MM_MC);
            fetch.burst[0] = (mm_prefetch_share(&fetch.next[0], calls) + mm_bursts(kc) - 1) / mm_bursts(kc);
            for (int ic = 0; ic < M; ic += MM_MC) {
                int mc = mm_min(MM_MC, M - ic);
                if (!b->a_rows) mm_pack_a(packed_a, a + ic * rsa + pc * csa, rsa, csa, mc, kc);
                // and the source of the next block of A, here (dW's dout^T: rows of dout far apart)
                fetch.next[1] = ic + MM_MC < M
                    ? mm_prefetch_of(a + (ic + MM_MC) * rsa + pc * csa, rsa, csa, mm_min(MM_MC, M - ic - MM_MC), kc)
                    : mm_prefetch_of(NULL, 0, 0, 0, 0);
                int a_lines = mm_prefetch_share(&fetch.next[1], (nc + MM_NR - 1) / MM_NR * ((mc + MM_MR - 1) / MM_MR));
                fetch.burst[1] = (a_lines + mm_bursts(kc) - 1) / mm_bursts(kc);
                mm_fetch* f = fetch.burst[0] + fetch.burst[1] > 0 ? &fetch : NULL;
                for (int j = 0; j < nc; j += MM_NR) {        // one B micro-panel, from L1,
                    const float* init = mm_init_row(b->init, b->bias, pc, j0 + jc + j);
                    for (int i = 0; i < mc; i += MM_MR) {    // against every A micro-panel in L2
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

// The packing buffers, kept from one product to the next and grown when a product needs more:
// up to 9 MB a thread, which, allocated and freed on every call, the C library handed back to
// the kernel and took again as fresh pages (mapped and zeroed each time). One set for each thread
// that calls products (thread-local: two threads calling at once would not share one), which
// its OpenMP threads share out; the set lives until the program ends.
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

// C (M x N, row stride ldc) += A (M x K) . B (K x N) on all threads: each takes a contiguous
// slice of whole tiles along the longer side of C and runs gemm_block on it with its own buffers.
static void gemm_threads(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                         const mm_operand* b, int M, int N, int K) {
    int threads = num_threads();
    size_t b_floats = b->packed != NULL ? 0 : (size_t)MM_KC * MM_NC;
    size_t per_thread = ((size_t)MM_MC_PAD * MM_KC + b_floats + 15) / 16 * 16;
    float* aligned = mm_scratch(threads * per_thread);   // 64-byte aligned
    #pragma omp parallel num_threads(threads)
    {
        float* packed_a = aligned + thread_num() * per_thread;
        float* packed_b = packed_a + (size_t)MM_MC_PAD * MM_KC;
        size_t t0, t1;  // this thread's tiles
        // where element (i, j) of the product goes: c + i * rs + j * cs (C^T for a transposed one)
        size_t rs = b->transposed ? 1 : ldc, cs = b->transposed ? ldc : 1;
        if (N >= M) {   // slices of columns, in whole NR-wide tiles
            thread_share((size_t)(N + MM_NR - 1) / MM_NR, &t0, &t1);
            int j0 = (int)t0 * MM_NR, j1 = mm_min(N, (int)t1 * MM_NR);
            if (j1 > j0) {
                gemm_block(c + j0 * cs, ldc, a, rsa, csa, b, j0, M, j1 - j0, K, packed_a, packed_b);
            }
        } else {        // slices of rows, in whole MR-high tiles
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
// B(p, j) at b[p * rsb + j * csb], B packed block by block as the product goes.
static void gemm_accumulate(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                            const float* b, size_t rsb, size_t csb, int M, int N, int K) {
    mm_operand op = {b, rsb, csb, NULL, 0, 0, NULL, 0, 0};
    gemm_threads(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C (M x N, row stride ldc) += A . B as gemm_accumulate, for an A whose rows are contiguous (row
// stride lda), read where they lie rather than packed: the backward pass's dinp += dout .
// weight, whose dout both threads would each pack whole (their slices are of C's columns).
// The same bits as gemm_accumulate (test_matmul checks it).
static void gemm_accumulate_a_rows(float* c, size_t ldc, const float* a, size_t lda, const float* b,
                                   size_t rsb, size_t csb, int M, int N, int K) {
    mm_operand op = {b, rsb, csb, NULL, 0, 0, NULL, 1, 0};
    gemm_threads(c, ldc, a, lda, 1, &op, M, N, K);
}

// C (M x N) = bias + A . B for an operand with init set: the product sets C where its first KC
// block adds into it, and a product of no K sets it here.
static void gemm_set(float* c, size_t ldc, const float* a, size_t rsa, size_t csa, const mm_operand* op,
                     int M, int N, int K) {
    if (K > 0) gemm_threads(c, ldc, a, rsa, csa, op, M, N, K);
    else mm_set_rows(c, ldc, op->bias, M, N);
}

// C (M x N, row stride ldc) = bias + A . B, A and B as in gemm_accumulate, bias N floats (NULL:
// zeros): the same bits as filling C with the bias and calling gemm_accumulate, without the
// pass that fills C and the read of it that the product's first block then makes.
static void gemm_bias(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                      const float* b, size_t rsb, size_t csb, int M, int N, int K, const float* bias) {
    mm_operand op = {b, rsb, csb, NULL, 0, 1, bias, 0, 0};
    gemm_set(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C (M x N, row stride ldc) = bias + A . W^T, for A (M x K, row stride lda) and a weight W (N x
// K, row stride ldw) whose rows are contiguous: the forward pass's product, computed as its
// transpose C^T = W . A^T (the weight as operand A, A^T as operand B), so that the weight is read
// where it lies, as the rows the kernel broadcasts from, and never packed: only A^T is, a small
// matrix when M = B*T is smaller than N. The kernel writes its tiles of C^T into C transposed
// (mm_store_transposed). Every element gets the arithmetic it gets from gemm_bias(c, ldc, a,
// lda, 1, w, 1, ldw, M, N, K, bias), so the same bits (test_matmul checks it).
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
// Generation multiplies the same weights by a few rows at a time (one row per sequence in a
// decode step), where packing B costs as much as the product: gemm_pack_b packs the whole of B
// once, and gemm_accumulate_packed reads the panels from there. The layout is gemm_block's,
// block after block: KC-deep blocks of B one after another, each n_pad = N rounded up to whole
// NR-wide micro-panels wide, so the block of rows pc.. (pc a multiple of KC) starts at
// pc * n_pad and its panel of columns j.. at pc * n_pad + j * kc. Each element of C then gets the
// same arithmetic as from gemm_accumulate: the same bits, whatever M, the row's place among the M
// rows, or the number of threads (test_matmul checks it).
// The packed operand must be 64-byte aligned (the kernel's aligned vector loads): a group of
// them carved from one aligned allocation stays aligned, since every gemm_packed_size is a whole
// number of 64-byte lines (n_pad is a multiple of NR).

static inline size_t mm_packed_width(int N) { return (size_t)(N + MM_NR - 1) / MM_NR * MM_NR; }

// Floats that gemm_pack_b writes for a K x N operand.
static inline size_t gemm_packed_size(int K, int N) { return (size_t)K * mm_packed_width(N); }

static inline void mm_check_aligned(const float* packed, const char* who) {
    if ((uintptr_t)packed % MM_VEC_BYTES != 0) {
        fail("%s: the packed operand at %p is not %d-byte aligned (allocate it with "
             "aligned_alloc_check(64, ...))", who, (const void*)packed, MM_VEC_BYTES);
    }
}

// Packs B (K x N, element (p, j) at b[p * rsb + j * csb]) into packed (gemm_packed_size(K, N)
// floats), one KC-deep block per thread at a time.
static inline void gemm_pack_b(float* packed, const float* b, size_t rsb, size_t csb, int K, int N) {
    mm_check_aligned(packed, "gemm_pack_b");
    size_t n_pad = mm_packed_width(N);
    #pragma omp parallel for schedule(static, 1)
    for (int pc = 0; pc < K; pc += MM_KC) {
        mm_pack_b(packed + (size_t)pc * n_pad, b + pc * rsb, rsb, csb, mm_min(MM_KC, K - pc), N);
    }
}

// C (M x N, row stride ldc) += A (M x K) . B (K x N), A as in gemm_accumulate, B packed by
// gemm_pack_b. Bit for bit gemm_accumulate's result.
static inline void gemm_accumulate_packed(float* c, size_t ldc, const float* a, size_t rsa,
                                          size_t csa, const float* packed_b, int M, int N, int K) {
    mm_check_aligned(packed_b, "gemm_accumulate_packed");
    mm_operand op = {NULL, 0, 0, packed_b, mm_packed_width(N), 0, NULL, 0, 0};
    gemm_threads(c, ldc, a, rsa, csa, &op, M, N, K);
}

// C = bias + A . B as gemm_bias, B packed by gemm_pack_b. Bit for bit gemm_bias's result.
static inline void gemm_bias_packed(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                                    const float* packed_b, int M, int N, int K, const float* bias) {
    mm_check_aligned(packed_b, "gemm_bias_packed");
    mm_operand op = {NULL, 0, 0, packed_b, mm_packed_width(N), 1, bias, 0, 0};
    gemm_set(c, ldc, a, rsa, csa, &op, M, N, K);
}

// ---------- the largest of n floats, vectorised ----------
// A max is exact, so any order of comparisons gives the same result (NaNs aside): 16 running
// maxima, one per lane, then the lanes. GCC keeps a `x > m ? x : m` loop scalar (it may not turn
// it into the vector max without -ffinite-math-only), so the AVX-512 build says it with
// _mm512_max_ps, whose (a > b ? a : b) is that expression exactly (the other builds, the plain-C
// one included, run the loop).
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
// sum a[i] * b[i] over i < n. Summed in the order written (s += a[i] * b[i]), a dot product is one
// chain of dependent adds, which the compiler may not reorder, so it runs one multiply-add per
// add latency on one lane. Here lane j keeps its own sum of the terms i = j mod 16, and the 16
// sums are added in a fixed tree at the end (halves, then quarters, ...): a fixed order too (the
// same bits every run, on any number of threads), in which the 16 lanes are one vector FMA per
// 16 terms. Attention's scores and its backward's dot products run on it (gpt2/cpu_layers.h).

// 16 lanes' sums added in dot_lanes' fixed tree: halves, quarters, then the last four in pairs
// (layernorm's lane sums, gpt2/cpu_layers.h, end in it too).
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
    dot_vec8 lo8, hi8;   // the tree in registers: halves added as vectors
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
// GELU needs tanh of every MLP activation (B*T*4C of them, forward and backward), softmax an exp
// of every logit. libm's tanhf and expf are calls into scalar code, which keep those loops
// scalar. tanh_vec is the same function in plain arithmetic, which the compiler inlines and
// vectorises: Cephes' tanhf (an odd polynomial for |x| < 0.625, 1 - 2/(e^2|x| + 1) above), on an
// e^y = 2^n * e^r (n = round(y / ln 2) put in the exponent bits, a polynomial for e^r,
// |r| <= ln2 / 2), which softmax uses too. test_matmul checks both against libm in double, on
// every 61st float of their range, within 2 ulp. |x| is capped at 10, where the formula gives
// exactly 1 (as tanh does in float from |x| = 9.01) and e^2|x| is far from overflow. The layers
// call them through TANH_FAST and EXP_FAST, which gradcheck's double build maps to libm's tanh
// and exp.
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
