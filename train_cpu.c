// train_cpu.c: GPT-2 training in plain C with OpenMP. The reference implementation: the GPU
// version (train_gpu.cu) and inference (infer.c) include this file and are checked against it.
//
// Read it top to bottom: utilities, the layers (each a forward/backward pair), the model (build,
// forward, backward, update, free), file I/O (checkpoints, safetensors, token files, training
// state), sampling, the command line, and main. Define TRAIN_CPU_NO_MAIN before including it to
// leave out main().
//
// Shapes follow llm.c: B batch, T sequence length, C channels, NH heads, V vocabulary, Vp the
// vocabulary padded to a multiple of 128, L layers, maxT the longest context.

#ifndef TRAIN_CPU_C
#define TRAIN_CPU_C

#define TOKENIZER_NO_MAIN
#include "tokenizer.c"

#include <math.h>
#include <time.h>
#include <ctype.h>
#include <sys/stat.h>
#include <sys/types.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// ---------- utilities ----------

#define LAYERNORM_EPS 1e-5f
#define STATE_MAGIC 20240527          // training state file (optimizer moments, step, data position)
#define STATE_VERSION 1

static inline int num_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// xorshift* random numbers: tiny, fast and the same on every machine, so a seed means one run.
static uint32_t random_u32(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

// uniform in [0, 1), 24 random bits
static float random_f32(uint64_t* state) {
    return (float)(random_u32(state) >> 8) / 16777216.0f;
}

// A well-mixed nonzero seed from a few integers (splitmix64), for independent random streams.
static uint64_t seed_mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b * 0xBF58476D1CE4E5B9ull + c * 0x94D049BB133111EBull + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 1;
}

// ---------- layers ----------
// Every layer is a pair: name_forward(outputs, inputs, weights, sizes) and
// name_backward(gradients it accumulates into, dout, what forward saved, sizes).
// Backward functions ADD into their gradient buffers (+=): a tensor used twice (the residual
// stream, wte as embedding and as output layer) collects both contributions.
// Parallel loops split work over independent outputs only, so results never depend on how the
// threads are scheduled: the same thread count gives the same bits.

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                     int B, int T, int C) {
    // out (B,T,C) = wte[token] + wpe[position]
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float* wte_ix = wte + (size_t)inp[bt] * C;
        const float* wpe_t = wpe + (size_t)t * C;
        float* out_bt = out + (size_t)bt * C;
        for (int i = 0; i < C; i++) out_bt[i] = wte_ix[i] + wpe_t[i];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                      int B, int T, int C) {
    // Two positions can hold the same token, so rows of dwte are shared: split over channels.
    #pragma omp parallel for
    for (int i = 0; i < C; i++) {
        for (int bt = 0; bt < B * T; bt++) {
            float d = dout[(size_t)bt * C + i];
            dwte[(size_t)inp[bt] * C + i] += d;
            dwpe[(size_t)(bt % T) * C + i] += d;
        }
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int B, int T, int C) {
    // out = (x - mean) / sqrt(var + eps) * weight + bias, per row of C; mean and rstd are saved
    // for the backward pass.
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
        float* o = out + (size_t)bt * C;
        for (int i = 0; i < C; i++) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
        mean[bt] = m;
        rstd[bt] = s;
    }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int B, int T, int C) {
    // dinp: each row on its own. With n = normalized x and g = dout * weight,
    // dx = rstd * (g - mean(g) - n * mean(g * n)).
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        const float* d = dout + (size_t)bt * C;
        float m = mean[bt], s = rstd[bt];
        float g_mean = 0.0f, gn_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float n = (x[i] - m) * s;
            float g = weight[i] * d[i];
            g_mean += g;
            gn_mean += g * n;
        }
        g_mean /= C;
        gn_mean /= C;
        float* dx = dinp + (size_t)bt * C;
        for (int i = 0; i < C; i++) {
            float n = (x[i] - m) * s;
            float g = weight[i] * d[i];
            dx[i] += s * (g - g_mean - n * gn_mean);
        }
    }
    // dweight and dbias sum over all rows: split over channels so every sum has one fixed order.
    #pragma omp parallel for
    for (int i = 0; i < C; i++) {
        float dw = 0.0f, db = 0.0f;
        for (int bt = 0; bt < B * T; bt++) {
            float n = (inp[(size_t)bt * C + i] - mean[bt]) * rstd[bt];
            float d = dout[(size_t)bt * C + i];
            dw += n * d;
            db += d;
        }
        dweight[i] += dw;
        dbias[i] += db;
    }
}

// The matrix products. The naive versions are the readable definition, and the reference the
// fast versions are tested against (test/matmul_check.c).

void matmul_forward_naive(float* out, const float* inp, const float* weight, const float* bias,
                          int B, int T, int C, int OC) {
    // out (B,T,OC) = inp (B,T,C) . weight (OC,C)^T + bias (OC); bias may be NULL
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        for (int o = 0; o < OC; o++) {
            const float* w = weight + (size_t)o * C;
            float val = bias != NULL ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) val += x[i] * w[i];
            out[(size_t)bt * OC + o] = val;
        }
    }
}

void matmul_backward_naive(float* dinp, float* dweight, float* dbias, const float* dout,
                           const float* inp, const float* weight, int B, int T, int C, int OC) {
    // dinp (B,T,C) += dout (B,T,OC) . weight (OC,C)
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* d = dout + (size_t)bt * OC;
        float* dx = dinp + (size_t)bt * C;
        for (int o = 0; o < OC; o++) {
            const float* w = weight + (size_t)o * C;
            for (int i = 0; i < C; i++) dx[i] += d[o] * w[i];
        }
    }
    // dweight (OC,C) += dout^T . inp, dbias (OC) += sum over rows of dout
    #pragma omp parallel for
    for (int o = 0; o < OC; o++) {
        float* dw = dweight + (size_t)o * C;
        float db = 0.0f;
        for (int bt = 0; bt < B * T; bt++) {
            float d = dout[(size_t)bt * OC + o];
            const float* x = inp + (size_t)bt * C;
            for (int i = 0; i < C; i++) dw[i] += d * x[i];
            db += d;
        }
        if (dbias != NULL) dbias[o] += db;
    }
}

// ---------- fast matmul ----------
// The three products of a linear layer are one routine, gemm_accumulate: C (M x N) += A (M x K) .
// B (K x N), with A and B each given by a pointer and two strides, so that a transposed operand
// is only another pair of strides:
//   forward    out  (BT x OC) += inp (BT x C) . weight^T (C x OC)    weight^T(k, o) = weight[o*C + k]
//   backward   dinp (BT x C)  += dout (BT x OC) . weight (OC x C)
//              dW   (OC x C)  += dout^T (OC x BT) . inp (BT x C)     dout^T(o, k) = dout[k*OC + o]
//
// The scheme is GotoBLAS's (also BLIS's), with numbers for AVX-512 on this project's 2-core Zen 4
// machine (32 KB L1d and 1 MB L2 per core, 16 floats per vector, 32 vector registers):
//   register tile  MR x NR = 14 x 32 floats of C stay in 28 registers while the micro-kernel runs
//                  over k. Each k step loads 2 vectors of B, broadcasts 14 floats of A and does 28
//                  vector FMAs: 16 loads per 28 FMAs, so the FMA unit, not the loads, sets the
//                  pace. From L1 this kernel runs at the machine's FMA peak.
//   KC = 256       depth of one pass: a packed micro-panel of B (KC x NR, 32 KB) is reused from L1
//                  by every micro-panel of A in the block,
//   MC = 256       rows in a packed block of A (MC x KC floats, 256 KB) that stays in L2,
//   NC = 2048      columns in a packed block of B (KC x NC, 2 MB) that stays in L3.
// Packing copies a block of A into MR-row micro-panels and a block of B into NR-column
// micro-panels, in the order the kernel reads them, so the kernel reads both with unit stride
// whatever the layout of the original. Where that order is a transpose of the original (weight^T
// in the forward pass, inp and dout as A), it is transposed 16 x 16 floats at a time in
// registers. Edge panels are padded with zeros; the kernel computes full tiles and writes back
// only the part inside C.
// Measured on that machine (dev/bench_matmul.c, doc/cpu_speed.md): the kernel alone, from L1,
// 113-116 GFLOP/s per core = the FMA peak; all matmuls of a GPT-2 124M step (B*T = 256) at
// 170-190 GFLOP/s on 2 threads, 75-80% of the 2-core peak, about 1.05 s of the ~1.6 s step;
// packing is ~8% of the matmul time. The naive loops above: 2-5 GFLOP/s forward (a dot product
// in strict float order does not vectorise), 16-24 backward.
//
// Threads: C is cut into one slice per thread along its longer side (columns of out and dinp,
// rows of dW for every layer except the MLP projection), in whole tiles, and each thread runs the
// whole blocked product on its slice with its own packing buffers. One fork and one join per
// product and no barriers inside: a busy machine (2 cores shared by several people) delays a
// product by one late thread, not by one late thread per block.
//
// Determinism: every element of C is summed over k in the same order (the KC blocks in turn, k
// in turn inside) by exactly one thread, so the result does not depend on the number of threads
// or on scheduling; there are no atomics and no reductions across threads.
//
// The vector width and tile come from the build: AVX-512 (-march=native on this machine), AVX2,
// or 16-byte vectors (SSE, NEON) through GCC vector extensions; any other compiler, or
// -DMATMUL_PLAIN_C, gets the same code with one float per "vector", a 4 x 8 register tile of
// scalars. test/test_matmul.sh checks all of them against the naive loops above.

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
#define MM_UNROLL _Pragma("GCC unroll 32")
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
#define MM_KC 256
#define MM_MC 256
#define MM_NC 2048
#define MM_MC_PAD ((MM_MC + MM_MR - 1) / MM_MR * MM_MR)   // whole micro-panels
#define MM_NC_PAD ((MM_NC + MM_NR - 1) / MM_NR * MM_NR)

static int mm_min(int a, int b) { return a < b ? a : b; }

// The micro-kernel: C tile (mr x nr of it inside C, row stride ldc) += packed A micro-panel
// (MR x kc) . packed B micro-panel (kc x NR).
static void mm_kernel(int kc, const float* ap, const float* bp, float* c, size_t ldc, int mr, int nr) {
    const mm_vec zero = {0};
    mm_vec acc[MM_MR][MM_NR_VECS];
    MM_UNROLL for (int i = 0; i < MM_MR; i++) {
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] = zero;
    }
    for (int p = 0; p < kc; p++) {
        const mm_vec* b = (const mm_vec*)(bp + (size_t)p * MM_NR);   // 64-byte aligned
        mm_vec bv[MM_NR_VECS];
        MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) bv[v] = b[v];
        MM_UNROLL for (int i = 0; i < MM_MR; i++) {
            float a = ap[(size_t)p * MM_MR + i];   // broadcast to every lane by the multiply
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) acc[i][v] += a * bv[v];
        }
    }
    if (mr == MM_MR && nr == MM_NR) {
        MM_UNROLL for (int i = 0; i < MM_MR; i++) {
            MM_UNROLL for (int v = 0; v < MM_NR_VECS; v++) {
                mm_vec cv;   // memcpy: rows of C need not be aligned (one unaligned load/store)
                memcpy(&cv, c + i * ldc + v * MM_LANES, sizeof(cv));
                cv += acc[i][v];
                memcpy(c + i * ldc + v * MM_LANES, &cv, sizeof(cv));
            }
        }
    } else {
        float tile[MM_MR * MM_NR];
        memcpy(tile, acc, sizeof(tile));
        for (int i = 0; i < mr; i++) {
            for (int j = 0; j < nr; j++) c[i * ldc + j] += tile[i * MM_NR + j];
        }
    }
}

#ifdef MM_SHUFFLE_TRANSPOSE
// Transposes a LANES x LANES block held in LANES vectors, in log2(LANES) rounds: the round with
// half-width h swaps the off-diagonal h x h sub-blocks of every 2h x 2h block (h = LANES/2 ... 1),
// each swap one two-vector shuffle per row. 16 x 16 floats: 64 shuffles instead of 256 scalar moves.
// Always inlined: as a call, the block goes through memory (measured 4-8% slower forward).
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

// Packs `rows` x kc elements into one micro-panel: element (r, p) goes to dst[p * rows_total + r],
// the order in which the kernel reads them. src points to element (0, 0); element (r, p) is at
// src[r * stride_r + p * stride_p]. Rows from `rows` to rows_total are zero.
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
    for (int r = rows; r < rows_total; r++) {
        for (int p = 0; p < kc; p++) dst[(size_t)p * rows_total + r] = 0.0f;
    }
}

// C (M x N, row stride ldc) += A . B on one thread, blocked as described above. A(i, p) is
// a[i * rsa + p * csa], B(p, j) is b[p * rsb + j * csb]. packed_a holds MC_PAD x KC floats and
// packed_b KC x NC_PAD, both 64-byte aligned.
static void gemm_block(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                       const float* b, size_t rsb, size_t csb, int M, int N, int K,
                       float* packed_a, float* packed_b) {
    for (int jc = 0; jc < N; jc += MM_NC) {
        int nc = mm_min(MM_NC, N - jc);
        for (int pc = 0; pc < K; pc += MM_KC) {
            int kc = mm_min(MM_KC, K - pc);
            for (int j = 0; j < nc; j += MM_NR) {
                mm_pack_panel(packed_b + (size_t)j * kc, b + pc * rsb + (jc + j) * csb, csb, rsb,
                              mm_min(MM_NR, nc - j), MM_NR, kc);
            }
            for (int ic = 0; ic < M; ic += MM_MC) {
                int mc = mm_min(MM_MC, M - ic);
                for (int i = 0; i < mc; i += MM_MR) {
                    mm_pack_panel(packed_a + (size_t)i * kc, a + (ic + i) * rsa + pc * csa, rsa,
                                  csa, mm_min(MM_MR, mc - i), MM_MR, kc);
                }
                for (int j = 0; j < nc; j += MM_NR) {        // one B micro-panel, from L1,
                    for (int i = 0; i < mc; i += MM_MR) {    // against every A micro-panel in L2
                        mm_kernel(kc, packed_a + (size_t)i * kc, packed_b + (size_t)j * kc,
                                  c + (ic + i) * ldc + jc + j, ldc, mm_min(MM_MR, mc - i),
                                  mm_min(MM_NR, nc - j));
                    }
                }
            }
        }
    }
}

// C (M x N, row stride ldc) += A (M x K) . B (K x N), strides as in gemm_block, on all threads:
// each takes a contiguous slice of whole tiles along the longer side of C.
static void gemm_accumulate(float* c, size_t ldc, const float* a, size_t rsa, size_t csa,
                            const float* b, size_t rsb, size_t csb, int M, int N, int K) {
    int threads = num_threads();
    size_t per_thread = ((size_t)MM_MC_PAD * MM_KC + (size_t)MM_KC * MM_NC_PAD + 15) / 16 * 16;
    float* scratch = (float*)malloc_check((threads * per_thread + 16) * sizeof(float));
    float* aligned = (float*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    #pragma omp parallel num_threads(threads)
    {
        int tid = 0, nth = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        nth = omp_get_num_threads();
#endif
        float* packed_a = aligned + tid * per_thread;
        float* packed_b = packed_a + (size_t)MM_MC_PAD * MM_KC;
        if (N >= M) {   // slices of columns, in whole NR-wide tiles
            int tiles = (N + MM_NR - 1) / MM_NR;
            int j0 = tiles * tid / nth * MM_NR, j1 = mm_min(N, tiles * (tid + 1) / nth * MM_NR);
            if (j1 > j0) {
                gemm_block(c + j0, ldc, a, rsa, csa, b + j0 * csb, rsb, csb, M, j1 - j0, K,
                           packed_a, packed_b);
            }
        } else {        // slices of rows, in whole MR-high tiles
            int tiles = (M + MM_MR - 1) / MM_MR;
            int i0 = tiles * tid / nth * MM_MR, i1 = mm_min(M, tiles * (tid + 1) / nth * MM_MR);
            if (i1 > i0) {
                gemm_block(c + i0 * ldc, ldc, a + i0 * rsa, rsa, csa, b, rsb, csb, i1 - i0, N, K,
                           packed_a, packed_b);
            }
        }
    }
    free(scratch);
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    int BT = B * T;
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        float* y = out + (size_t)bt * OC;
        for (int o = 0; o < OC; o++) y[o] = bias != NULL ? bias[o] : 0.0f;
    }
    gemm_accumulate(out, OC, inp, C, 1, weight, 1, C, BT, OC, C);   // out += inp . weight^T
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int B, int T, int C, int OC) {
    int BT = B * T;
    gemm_accumulate(dinp, C, dout, OC, 1, weight, C, 1, BT, C, OC);    // dinp += dout . weight
    gemm_accumulate(dweight, C, dout, 1, OC, inp, C, 1, OC, C, BT);    // dW += dout^T . inp
    if (dbias != NULL) {
        // each thread sums its own columns over bt in order: a fixed order, no races
        #pragma omp parallel
        {
            int tid = 0, nth = 1;
#ifdef _OPENMP
            tid = omp_get_thread_num();
            nth = omp_get_num_threads();
#endif
            int o0 = (int)((long long)OC * tid / nth), o1 = (int)((long long)OC * (tid + 1) / nth);
            for (int bt = 0; bt < BT; bt++) {
                const float* d = dout + (size_t)bt * OC;
                for (int o = o0; o < o1; o++) dbias[o] += d[o];
            }
        }
    }
}

// ---------- attention ----------

void attention_forward(float* out, float* preatt, float* att, const float* inp,
                       int B, int T, int C, int NH) {
    // inp (B,T,3C) holds query, key, value for each position; out (B,T,C).
    // preatt, att (B,NH,T,T): scores before and after the causal softmax (saved for backward).
    int C3 = 3 * C;
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float* q = inp + ((size_t)b * T + t) * C3 + h * hs;
                float* pre = preatt + (((size_t)b * NH + h) * T + t) * T;
                float* a = att + (((size_t)b * NH + h) * T + t) * T;
                // scores against keys 0..t (the causal mask), and their max for a stable softmax
                float maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = inp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    pre[t2] = s;
                    if (s > maxval) maxval = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(pre[t2] - maxval);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) {
                    pre[t2] = 0.0f;  // masked: never read, written so the buffer holds no garbage
                    a[t2] = 0.0f;
                }
                // out = att . value
                float* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = inp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float w = a[t2];
                    for (int i = 0; i < hs; i++) o[i] += w * v[i];
                }
            }
        }
    }
}

void attention_backward(float* dinp, float* dpreatt, float* datt, const float* dout,
                        const float* inp, const float* att, int B, int T, int C, int NH) {
    // dinp (B,T,3C) += gradients of query, key, value. One (batch, head) pair touches only its own
    // slice of dinp, so the pairs run in parallel without races.
    int C3 = 3 * C;
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float* a = att + (((size_t)b * NH + h) * T + t) * T;
                float* da = datt + (((size_t)b * NH + h) * T + t) * T;
                float* dpre = dpreatt + (((size_t)b * NH + h) * T + t) * T;
                const float* q = inp + ((size_t)b * T + t) * C3 + h * hs;
                float* dq = dinp + ((size_t)b * T + t) * C3 + h * hs;
                const float* d = dout + ((size_t)b * T + t) * C + h * hs;
                // through out = att . value
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = inp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float* dv = dinp + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += v[i] * d[i];
                        dv[i] += a[t2] * d[i];
                    }
                    da[t2] += s;
                }
                // through the softmax: dpre = att * (datt - sum(att * datt))
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * da[t2];
                for (int t2 = 0; t2 <= t; t2++) dpre[t2] += a[t2] * (da[t2] - dot);
                // through the scores q . k * scale
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = inp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float* dk = dinp + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float g = dpre[t2] * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += k[i] * g;
                        dk[i] += q[i] * g;
                    }
                }
            }
        }
    }
}

// ---------- pointwise layers ----------

// GELU needs tanh of every MLP activation (B*T*4C of them, forward and backward). libm's tanhf
// is a call into scalar code, which keeps the loop scalar: it took ~9% of a d12 step. tanh_vec is
// the same function in plain arithmetic, which the compiler inlines and vectorises: Cephes'
// tanhf (an odd polynomial for |x| < 0.625, 1 - 2/(e^2|x| + 1) above), on an e^y = 2^n * e^r
// (n = round(y / ln 2) put in the exponent bits, a polynomial for e^r, |r| <= ln2 / 2), which
// softmax uses too. test_matmul checks both against libm in double, on every 61st float of their
// range, within 2 ulp. |x| is capped at 10, where the formula gives exactly 1 (as tanh does in
// float from |x| = 9.01) and e^2|x| is far from overflow. The layers call them through TANH_FAST
// and EXP_FAST, which gradcheck's double build maps to libm's tanh and exp.
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

#define GELU_SCALING_FACTOR 0.7978845608028654f  // sqrt(2 / pi)

void gelu_forward(float* out, const float* inp, int N) {
    // the tanh approximation of GELU, as GPT-2 uses it
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + TANH_FAST(GELU_SCALING_FACTOR * (x + cube)));
    }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int N) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        float u = GELU_SCALING_FACTOR * (x + 0.044715f * x * x * x);
        float th = TANH_FAST(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
    }
}

void residual_forward(float* out, const float* inp1, const float* inp2, int N) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

void residual_backward(float* dinp1, float* dinp2, const float* dout, int N) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}

// ---------- output layer: softmax and cross-entropy ----------

void softmax_forward(float* probs, const float* logits, int B, int T, int V, int Vp) {
    // probs (B,T,Vp) over the V real classes; the padding columns V..Vp-1 get probability 0.
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = logits + (size_t)bt * Vp;
        float* p = probs + (size_t)bt * Vp;
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++) if (x[i] > maxval) maxval = x[i];
        // EXP_FAST (see GELU) and 16 running sums (i mod 16, a fixed order) let this vectorise;
        // below e^-87 a probability comes out as ~1e-38 rather than 0, which no sum can see
        float sums[16] = {0.0f};
        int i = 0;
        for (; i + 16 <= V; i += 16) {
            for (int j = 0; j < 16; j++) {
                p[i + j] = EXP_FAST(x[i + j] - maxval);
                sums[j] += p[i + j];
            }
        }
        for (; i < V; i++) {
            p[i] = EXP_FAST(x[i] - maxval);
            sums[0] += p[i];
        }
        float sum = 0.0f;
        for (int j = 0; j < 16; j++) sum += sums[j];
        float inv = 1.0f / sum;
        for (i = 0; i < V; i++) p[i] *= inv;
        for (i = V; i < Vp; i++) p[i] = 0.0f;
    }
}

void crossentropy_forward(float* losses, const float* probs, const int* targets,
                          int B, int T, int Vp) {
    // losses (B,T) = -log probability of the target
    for (int bt = 0; bt < B * T; bt++) {
        losses[bt] = -logf(probs[(size_t)bt * Vp + targets[bt]]);
    }
}

void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs,
                                   const int* targets, int B, int T, int V, int Vp) {
    // d loss / d logits = probs - onehot(target), times the loss's own gradient; padding gets none
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float* dl = dlogits + (size_t)bt * Vp;
        const float* p = probs + (size_t)bt * Vp;
        float d = dlosses[bt];
        int target = targets[bt];
        for (int i = 0; i < V; i++) {
            float indicator = i == target ? 1.0f : 0.0f;
            dl[i] += (p[i] - indicator) * d;
        }
    }
}

// ---------- the model ----------

typedef struct {
    int max_seq_len;        // maxT, the longest context
    int vocab_size;         // V
    int padded_vocab_size;  // Vp, V rounded up to a multiple of 128
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

#define NUM_PARAMETER_TENSORS 16
typedef struct {
    float* wte;       // (Vp, C)
    float* wpe;       // (maxT, C)
    float* ln1w;      // (L, C)
    float* ln1b;      // (L, C)
    float* qkvw;      // (L, 3*C, C)
    float* qkvb;      // (L, 3*C)
    float* attprojw;  // (L, C, C)
    float* attprojb;  // (L, C)
    float* ln2w;      // (L, C)
    float* ln2b;      // (L, C)
    float* fcw;       // (L, 4*C, C)
    float* fcb;       // (L, 4*C)
    float* fcprojw;   // (L, C, 4*C)
    float* fcprojb;   // (L, C)
    float* lnfw;      // (C)
    float* lnfb;      // (C)
} ParameterTensors;

const char* PARAMETER_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// Weight decay applies to the matrices only, not to biases and layernorm parameters.
static const int PARAMETER_DECAYS[NUM_PARAMETER_TENSORS] = {
    1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

void fill_in_parameter_sizes(size_t* sizes, GPT2Config config) {
    size_t Vp = config.padded_vocab_size, C = config.channels;
    size_t maxT = config.max_seq_len, L = config.num_layers;
    sizes[0] = Vp * C;            // wte
    sizes[1] = maxT * C;          // wpe
    sizes[2] = L * C;             // ln1w
    sizes[3] = L * C;             // ln1b
    sizes[4] = L * (3 * C) * C;   // qkvw
    sizes[5] = L * (3 * C);       // qkvb
    sizes[6] = L * C * C;         // attprojw
    sizes[7] = L * C;             // attprojb
    sizes[8] = L * C;             // ln2w
    sizes[9] = L * C;             // ln2b
    sizes[10] = L * (4 * C) * C;  // fcw
    sizes[11] = L * (4 * C);      // fcb
    sizes[12] = L * C * (4 * C);  // fcprojw
    sizes[13] = L * C;            // fcprojb
    sizes[14] = C;                // lnfw
    sizes[15] = C;                // lnfb
}

// Points the tensors of a struct of float pointers into one allocation, in table order.
static void point_tensors(float** tensors, float* memory, const size_t* sizes, int n) {
    for (int i = 0; i < n; i++) {
        tensors[i] = memory;
        memory += sizes[i];
    }
}

static size_t sum_sizes(const size_t* sizes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    return total;
}

#define NUM_ACTIVATION_TENSORS 23
typedef struct {
    float* encoded;    // (B, T, C)
    float* ln1;        // (L, B, T, C)
    float* ln1_mean;   // (L, B, T)
    float* ln1_rstd;   // (L, B, T)
    float* qkv;        // (L, B, T, 3*C)
    float* atty;       // (L, B, T, C)
    float* preatt;     // (L, B, NH, T, T)
    float* att;        // (L, B, NH, T, T)
    float* attproj;    // (L, B, T, C)
    float* residual2;  // (L, B, T, C)
    float* ln2;        // (L, B, T, C)
    float* ln2_mean;   // (L, B, T)
    float* ln2_rstd;   // (L, B, T)
    float* fch;        // (L, B, T, 4*C)
    float* fch_gelu;   // (L, B, T, 4*C)
    float* fcproj;     // (L, B, T, C)
    float* residual3;  // (L, B, T, C)
    float* lnf;        // (B, T, C)
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;   // (B, T)
    float* logits;     // (B, T, Vp)
    float* probs;      // (B, T, Vp)
    float* losses;     // (B, T)
} ActivationTensors;

void fill_in_activation_sizes(size_t* sizes, GPT2Config config, int B, int T) {
    size_t C = config.channels, NH = config.num_heads, L = config.num_layers;
    size_t Vp = config.padded_vocab_size, BT = (size_t)B * T;
    sizes[0] = BT * C;               // encoded
    sizes[1] = L * BT * C;           // ln1
    sizes[2] = L * BT;               // ln1_mean
    sizes[3] = L * BT;               // ln1_rstd
    sizes[4] = L * BT * 3 * C;       // qkv
    sizes[5] = L * BT * C;           // atty
    sizes[6] = L * B * NH * T * T;   // preatt
    sizes[7] = L * B * NH * T * T;   // att
    sizes[8] = L * BT * C;           // attproj
    sizes[9] = L * BT * C;           // residual2
    sizes[10] = L * BT * C;          // ln2
    sizes[11] = L * BT;              // ln2_mean
    sizes[12] = L * BT;              // ln2_rstd
    sizes[13] = L * BT * 4 * C;      // fch
    sizes[14] = L * BT * 4 * C;      // fch_gelu
    sizes[15] = L * BT * C;          // fcproj
    sizes[16] = L * BT * C;          // residual3
    sizes[17] = BT * C;              // lnf
    sizes[18] = BT;                  // lnf_mean
    sizes[19] = BT;                  // lnf_rstd
    sizes[20] = BT * Vp;             // logits
    sizes[21] = BT * Vp;             // probs
    sizes[22] = BT;                  // losses
}

typedef struct {
    GPT2Config config;
    // the weights and their sizes
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float* params_memory;
    size_t num_parameters;
    // their gradients, and the AdamW moments (allocated on the first backward / update)
    ParameterTensors grads;
    float* grads_memory;
    float* m_memory;
    float* v_memory;
    // the activations and their gradients, for batches of up to batch_size x seq_len
    ActivationTensors acts;
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    float* acts_memory;
    size_t num_activations;
    ActivationTensors grads_acts;
    float* grads_acts_memory;
    int batch_size;   // B and T the activations were allocated for (0: not yet)
    int seq_len;
    int B, T;         // B and T of the last forward pass
    int* inputs;      // (B, T) of the last forward pass
    int* targets;     // (B, T), or unused when the last forward had no targets
    float mean_loss;  // of the last forward pass; -1 when it had no targets
} GPT2;

// Checks a configuration read from a file or built from flags; exits with a clear error.
static void gpt2_check_config(GPT2Config c, const char* where) {
    if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
        c.channels <= 0 || c.padded_vocab_size < c.vocab_size) {
        fprintf(stderr, "error: %s: invalid model shape (maxT=%d V=%d Vp=%d L=%d NH=%d C=%d)\n",
                where, c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers,
                c.num_heads, c.channels);
        exit(1);
    }
    if (c.channels % c.num_heads != 0) {
        fprintf(stderr, "error: %s: channels C=%d are not divisible by heads NH=%d\n", where,
                c.channels, c.num_heads);
        exit(1);
    }
    if (c.max_seq_len > 1 << 20 || c.vocab_size > 1 << 24 || c.num_layers > 1024 ||
        c.channels > 1 << 16) {
        fprintf(stderr, "error: %s: model shape too large to be real (maxT=%d V=%d L=%d C=%d)\n",
                where, c.max_seq_len, c.vocab_size, c.num_layers, c.channels);
        exit(1);
    }
}

// Allocates the parameters for a configuration (contents not set).
static void gpt2_allocate_params(GPT2* model, GPT2Config config) {
    memset(model, 0, sizeof(*model));
    model->config = config;
    fill_in_parameter_sizes(model->param_sizes, config);
    model->num_parameters = sum_sizes(model->param_sizes, NUM_PARAMETER_TENSORS);
    model->params_memory = (float*)malloc_check(model->num_parameters * sizeof(float));
    point_tensors((float**)&model->params, model->params_memory, model->param_sizes,
                  NUM_PARAMETER_TENSORS);
    model->mean_loss = -1.0f;
}

// dN: N layers, N heads of 64 channels (C = 64N), GPT-2's vocabulary and context. d12, d24,
// d36 and d48 are the four GPT-2 sizes (124M, 350M, 774M, 1558M).
GPT2Config gpt2_config_for_depth(int depth) {
    GPT2Config c;
    c.max_seq_len = 1024;
    c.vocab_size = GPT2_VOCAB;
    c.padded_vocab_size = 50304;
    c.num_layers = depth;
    switch (depth) {
        case 12: c.channels = 768; c.num_heads = 12; break;
        case 24: c.channels = 1024; c.num_heads = 16; break;
        case 36: c.channels = 1280; c.num_heads = 20; break;
        case 48: c.channels = 1600; c.num_heads = 25; break;
        default: c.channels = 64 * depth; c.num_heads = depth; break;
    }
    return c;
}

// Fresh weights as GPT-2 initialises them: normal(0, 0.02) matrices, residual projections
// scaled down by 1/sqrt(2L) (one per residual add), zero biases, unit layernorm weights.
// Each chunk of 64K numbers has its own random stream, so the result does not depend on threads.
void gpt2_build_init(GPT2* model, GPT2Config config, uint64_t seed) {
    gpt2_check_config(config, "model");
    gpt2_allocate_params(model, config);
    float* tensors[NUM_PARAMETER_TENSORS];
    point_tensors(tensors, model->params_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    float residual_scale = 1.0f / sqrtf(2.0f * config.num_layers);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        float* p = tensors[i];
        size_t n = model->param_sizes[i];
        int is_layernorm_weight = i == 2 || i == 8 || i == 14;
        if (!PARAMETER_DECAYS[i]) {  // biases and layernorm parameters
            float value = is_layernorm_weight ? 1.0f : 0.0f;
            for (size_t j = 0; j < n; j++) p[j] = value;
            continue;
        }
        float std = 0.02f * ((i == 6 || i == 12) ? residual_scale : 1.0f);
        size_t valid = n;
        if (i == 0) valid = (size_t)config.vocab_size * config.channels;  // wte padding stays 0
        const size_t chunk = 1 << 16;
        long long num_chunks = (long long)((n + chunk - 1) / chunk);
        #pragma omp parallel for
        for (long long k = 0; k < num_chunks; k++) {
            uint64_t rng = seed_mix(seed, (uint64_t)i, (uint64_t)k);
            size_t end = ((size_t)k + 1) * chunk < n ? ((size_t)k + 1) * chunk : n;
            for (size_t j = (size_t)k * chunk; j < end; j += 2) {
                // Box-Muller: two normals from two uniforms
                float u1 = 1.0f - random_f32(&rng);  // in (0, 1]: log stays finite
                float u2 = random_f32(&rng);
                float r = sqrtf(-2.0f * logf(u1));
                float z0 = r * cosf(6.2831853f * u2), z1 = r * sinf(6.2831853f * u2);
                p[j] = j < valid ? std * z0 : 0.0f;
                if (j + 1 < end) p[j + 1] = j + 1 < valid ? std * z1 : 0.0f;
            }
        }
    }
}

// Allocates activations (and their gradients) for batches of up to B x T.
void gpt2_allocate_activations(GPT2* model, int B, int T) {
    if (model->acts_memory != NULL) {
        free(model->acts_memory);
        free(model->grads_acts_memory);
        free(model->inputs);
        free(model->targets);
    }
    model->batch_size = B;
    model->seq_len = T;
    fill_in_activation_sizes(model->act_sizes, model->config, B, T);
    model->num_activations = sum_sizes(model->act_sizes, NUM_ACTIVATION_TENSORS);
    model->acts_memory = (float*)calloc_check(model->num_activations, sizeof(float));
    model->grads_acts_memory = NULL;  // on the first backward
    point_tensors((float**)&model->acts, model->acts_memory, model->act_sizes,
                  NUM_ACTIVATION_TENSORS);
    model->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    model->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
}

// The forward pass. targets may be NULL (inference): then no loss is computed.
// Activations are laid out for the B and T of this call, which must not exceed the allocation.
void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    GPT2Config cfg = model->config;
    int V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    int L = cfg.num_layers, NH = cfg.num_heads, C = cfg.channels;
    if (T > cfg.max_seq_len) {
        fprintf(stderr, "error: sequence length T=%d exceeds the model's context maxT=%d\n", T,
                cfg.max_seq_len);
        exit(1);
    }
    for (int i = 0; i < B * T; i++) {
        int bad_input = inputs[i] < 0 || inputs[i] >= V;
        int bad_target = targets != NULL && (targets[i] < 0 || targets[i] >= V);
        if (bad_input || bad_target) {
            fprintf(stderr, "error: token id %d at position %d is outside the vocabulary (V=%d)\n",
                    bad_input ? inputs[i] : targets[i], i, V);
            exit(1);
        }
    }
    if (model->acts_memory == NULL) {
        gpt2_allocate_activations(model, B, T);
    } else if (B > model->batch_size || T > model->seq_len) {
        gpt2_allocate_activations(model, B > model->batch_size ? B : model->batch_size,
                                  T > model->seq_len ? T : model->seq_len);
    }
    // the tensors are laid out for this B and T inside the allocation
    size_t sizes[NUM_ACTIVATION_TENSORS];
    fill_in_activation_sizes(sizes, cfg, B, T);
    point_tensors((float**)&model->acts, model->acts_memory, sizes, NUM_ACTIVATION_TENSORS);
    model->B = B;
    model->T = T;
    memcpy(model->inputs, inputs, (size_t)B * T * sizeof(int));
    if (targets != NULL) memcpy(model->targets, targets, (size_t)B * T * sizeof(int));

    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    size_t BTC = (size_t)B * T * C, BT = (size_t)B * T, att_size = (size_t)B * NH * T * T;
    encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BTC;
        // this layer's weights
        float* l_ln1w = p.ln1w + l * C;
        float* l_ln1b = p.ln1b + l * C;
        float* l_qkvw = p.qkvw + (size_t)l * 3 * C * C;
        float* l_qkvb = p.qkvb + l * 3 * C;
        float* l_attprojw = p.attprojw + (size_t)l * C * C;
        float* l_attprojb = p.attprojb + l * C;
        float* l_ln2w = p.ln2w + l * C;
        float* l_ln2b = p.ln2b + l * C;
        float* l_fcw = p.fcw + (size_t)l * 4 * C * C;
        float* l_fcb = p.fcb + l * 4 * C;
        float* l_fcprojw = p.fcprojw + (size_t)l * C * 4 * C;
        float* l_fcprojb = p.fcprojb + l * C;
        // this layer's activations
        float* l_ln1 = a.ln1 + l * BTC;
        float* l_ln1_mean = a.ln1_mean + l * BT;
        float* l_ln1_rstd = a.ln1_rstd + l * BT;
        float* l_qkv = a.qkv + l * BTC * 3;
        float* l_atty = a.atty + l * BTC;
        float* l_preatt = a.preatt + l * att_size;
        float* l_att = a.att + l * att_size;
        float* l_attproj = a.attproj + l * BTC;
        float* l_residual2 = a.residual2 + l * BTC;
        float* l_ln2 = a.ln2 + l * BTC;
        float* l_ln2_mean = a.ln2_mean + l * BT;
        float* l_ln2_rstd = a.ln2_rstd + l * BT;
        float* l_fch = a.fch + l * BTC * 4;
        float* l_fch_gelu = a.fch_gelu + l * BTC * 4;
        float* l_fcproj = a.fcproj + l * BTC;
        float* l_residual3 = a.residual3 + l * BTC;
        // attention block, then MLP block, each pre-norm with a residual connection
        layernorm_forward(l_ln1, l_ln1_mean, l_ln1_rstd, residual, l_ln1w, l_ln1b, B, T, C);
        matmul_forward(l_qkv, l_ln1, l_qkvw, l_qkvb, B, T, C, 3 * C);
        attention_forward(l_atty, l_preatt, l_att, l_qkv, B, T, C, NH);
        matmul_forward(l_attproj, l_atty, l_attprojw, l_attprojb, B, T, C, C);
        residual_forward(l_residual2, residual, l_attproj, (int)BTC);
        layernorm_forward(l_ln2, l_ln2_mean, l_ln2_rstd, l_residual2, l_ln2w, l_ln2b, B, T, C);
        matmul_forward(l_fch, l_ln2, l_fcw, l_fcb, B, T, C, 4 * C);
        gelu_forward(l_fch_gelu, l_fch, (int)(BTC * 4));
        matmul_forward(l_fcproj, l_fch_gelu, l_fcprojw, l_fcprojb, B, T, 4 * C, C);
        residual_forward(l_residual3, l_residual2, l_fcproj, (int)BTC);
    }
    float* residual = a.residual3 + (L - 1) * BTC;
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, p.lnfw, p.lnfb, B, T, C);
    matmul_forward(a.logits, a.lnf, p.wte, NULL, B, T, C, Vp);  // output layer tied to wte
    softmax_forward(a.probs, a.logits, B, T, V, Vp);

    if (targets != NULL) {
        crossentropy_forward(a.losses, a.probs, targets, B, T, Vp);
        double sum = 0.0;
        for (size_t i = 0; i < BT; i++) sum += a.losses[i];
        model->mean_loss = (float)(sum / (double)BT);
    } else {
        model->mean_loss = -1.0f;
    }
}

void gpt2_zero_grad(GPT2* model) {
    if (model->grads_memory != NULL) memset(model->grads_memory, 0, model->num_parameters * sizeof(float));
}

// The backward pass, for the last forward pass (which must have had targets). Parameter
// gradients accumulate into model->grads; call gpt2_zero_grad first for a fresh step.
void gpt2_backward(GPT2* model) {
    if (model->mean_loss == -1.0f) {
        fprintf(stderr, "error: gpt2_backward needs a forward pass with targets first\n");
        exit(1);
    }
    if (model->grads_memory == NULL) {
        model->grads_memory = (float*)calloc_check(model->num_parameters, sizeof(float));
        point_tensors((float**)&model->grads, model->grads_memory, model->param_sizes,
                      NUM_PARAMETER_TENSORS);
    }
    if (model->grads_acts_memory == NULL) {
        model->grads_acts_memory = (float*)calloc_check(model->num_activations, sizeof(float));
    }
    GPT2Config cfg = model->config;
    int B = model->B, T = model->T;
    int V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    int L = cfg.num_layers, NH = cfg.num_heads, C = cfg.channels;
    size_t sizes[NUM_ACTIVATION_TENSORS];
    fill_in_activation_sizes(sizes, cfg, B, T);
    size_t used = sum_sizes(sizes, NUM_ACTIVATION_TENSORS);
    memset(model->grads_acts_memory, 0, used * sizeof(float));
    point_tensors((float**)&model->grads_acts, model->grads_acts_memory, sizes,
                  NUM_ACTIVATION_TENSORS);

    ParameterTensors p = model->params;
    ParameterTensors g = model->grads;
    ActivationTensors a = model->acts;
    ActivationTensors ga = model->grads_acts;
    size_t BTC = (size_t)B * T * C, BT = (size_t)B * T, att_size = (size_t)B * NH * T * T;

    // the loss is the mean over B*T positions
    float dloss_mean = 1.0f / (float)(B * T);
    for (size_t i = 0; i < BT; i++) ga.losses[i] = dloss_mean;

    crossentropy_softmax_backward(ga.logits, ga.losses, a.probs, model->targets, B, T, V, Vp);
    matmul_backward(ga.lnf, g.wte, NULL, ga.logits, a.lnf, p.wte, B, T, C, Vp);
    float* residual = a.residual3 + (L - 1) * BTC;
    float* dresidual = ga.residual3 + (L - 1) * BTC;
    layernorm_backward(dresidual, g.lnfw, g.lnfb, ga.lnf, residual, p.lnfw, a.lnf_mean,
                       a.lnf_rstd, B, T, C);

    for (int l = L - 1; l >= 0; l--) {
        residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BTC;
        dresidual = l == 0 ? ga.encoded : ga.residual3 + (l - 1) * BTC;
        // weights and their gradients
        float* l_ln1w = p.ln1w + l * C;
        float* l_qkvw = p.qkvw + (size_t)l * 3 * C * C;
        float* l_attprojw = p.attprojw + (size_t)l * C * C;
        float* l_ln2w = p.ln2w + l * C;
        float* l_fcw = p.fcw + (size_t)l * 4 * C * C;
        float* l_fcprojw = p.fcprojw + (size_t)l * C * 4 * C;
        float* dl_ln1w = g.ln1w + l * C;
        float* dl_ln1b = g.ln1b + l * C;
        float* dl_qkvw = g.qkvw + (size_t)l * 3 * C * C;
        float* dl_qkvb = g.qkvb + l * 3 * C;
        float* dl_attprojw = g.attprojw + (size_t)l * C * C;
        float* dl_attprojb = g.attprojb + l * C;
        float* dl_ln2w = g.ln2w + l * C;
        float* dl_ln2b = g.ln2b + l * C;
        float* dl_fcw = g.fcw + (size_t)l * 4 * C * C;
        float* dl_fcb = g.fcb + l * 4 * C;
        float* dl_fcprojw = g.fcprojw + (size_t)l * C * 4 * C;
        float* dl_fcprojb = g.fcprojb + l * C;
        // activations and their gradients
        float* l_ln1 = a.ln1 + l * BTC;
        float* l_ln1_mean = a.ln1_mean + l * BT;
        float* l_ln1_rstd = a.ln1_rstd + l * BT;
        float* l_qkv = a.qkv + l * BTC * 3;
        float* l_atty = a.atty + l * BTC;
        float* l_att = a.att + l * att_size;
        float* l_residual2 = a.residual2 + l * BTC;
        float* l_ln2 = a.ln2 + l * BTC;
        float* l_ln2_mean = a.ln2_mean + l * BT;
        float* l_ln2_rstd = a.ln2_rstd + l * BT;
        float* l_fch = a.fch + l * BTC * 4;
        float* l_fch_gelu = a.fch_gelu + l * BTC * 4;
        float* dl_ln1 = ga.ln1 + l * BTC;
        float* dl_qkv = ga.qkv + l * BTC * 3;
        float* dl_atty = ga.atty + l * BTC;
        float* dl_preatt = ga.preatt + l * att_size;
        float* dl_att = ga.att + l * att_size;
        float* dl_attproj = ga.attproj + l * BTC;
        float* dl_residual2 = ga.residual2 + l * BTC;
        float* dl_ln2 = ga.ln2 + l * BTC;
        float* dl_fch = ga.fch + l * BTC * 4;
        float* dl_fch_gelu = ga.fch_gelu + l * BTC * 4;
        float* dl_fcproj = ga.fcproj + l * BTC;
        float* dl_residual3 = ga.residual3 + l * BTC;
        // the forward pass of this layer in reverse
        residual_backward(dl_residual2, dl_fcproj, dl_residual3, (int)BTC);
        matmul_backward(dl_fch_gelu, dl_fcprojw, dl_fcprojb, dl_fcproj, l_fch_gelu, l_fcprojw,
                        B, T, 4 * C, C);
        gelu_backward(dl_fch, l_fch, dl_fch_gelu, (int)(BTC * 4));
        matmul_backward(dl_ln2, dl_fcw, dl_fcb, dl_fch, l_ln2, l_fcw, B, T, C, 4 * C);
        layernorm_backward(dl_residual2, dl_ln2w, dl_ln2b, dl_ln2, l_residual2, l_ln2w,
                           l_ln2_mean, l_ln2_rstd, B, T, C);
        residual_backward(dresidual, dl_attproj, dl_residual2, (int)BTC);
        matmul_backward(dl_atty, dl_attprojw, dl_attprojb, dl_attproj, l_atty, l_attprojw,
                        B, T, C, C);
        attention_backward(dl_qkv, dl_preatt, dl_att, dl_atty, l_qkv, l_att, B, T, C, NH);
        matmul_backward(dl_ln1, dl_qkvw, dl_qkvb, dl_qkv, l_ln1, l_qkvw, B, T, C, 3 * C);
        layernorm_backward(dresidual, dl_ln1w, dl_ln1b, dl_ln1, residual, l_ln1w, l_ln1_mean,
                           l_ln1_rstd, B, T, C);
    }
    encoder_backward(g.wte, g.wpe, ga.encoded, model->inputs, B, T, C);
}

// Sum of squares of n floats in double, in fixed-size chunks added in a fixed order: the same
// result for any thread count.
static double sum_of_squares(const float* x, size_t n) {
    const size_t chunk = 1 << 16;
    long long num_chunks = (long long)((n + chunk - 1) / chunk);
    double* partial = (double*)malloc_check((size_t)(num_chunks > 0 ? num_chunks : 1) * sizeof(double));
    #pragma omp parallel for
    for (long long k = 0; k < num_chunks; k++) {
        size_t end = ((size_t)k + 1) * chunk < n ? ((size_t)k + 1) * chunk : n;
        // 8 running sums (i mod 8), so that the compiler can keep them in one vector register; a
        // single sum is a chain of dependent adds that cannot be vectorised (the order is fixed)
        double s[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        size_t i = (size_t)k * chunk;
        for (; i + 8 <= end; i += 8) {
            for (int j = 0; j < 8; j++) s[j] += (double)x[i + j] * x[i + j];
        }
        for (; i < end; i++) s[0] += (double)x[i] * x[i];
        partial[k] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
    double total = 0.0;
    for (long long k = 0; k < num_chunks; k++) total += partial[k];
    free(partial);
    return total;
}

// Scales the gradients so that their global L2 norm is at most max_norm, as PyTorch's
// clip_grad_norm_ does (coefficient max_norm / (norm + 1e-6), applied only when below 1).
// Returns the norm before clipping.
float gpt2_clip_gradients(GPT2* model, float max_norm) {
    float norm = (float)sqrt(sum_of_squares(model->grads_memory, model->num_parameters));
    float coef = max_norm / (norm + 1e-6f);
    if (coef < 1.0f) {
        float* g = model->grads_memory;
        #pragma omp parallel for
        for (long long i = 0; i < (long long)model->num_parameters; i++) g[i] *= coef;
    }
    return norm;
}

// One AdamW step (t counts from 1), as torch.optim.AdamW computes it:
//   p *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// with weight decay only on the matrices (PARAMETER_DECAYS).
void gpt2_update(GPT2* model, float lr, float beta1, float beta2, float eps,
                 float weight_decay, int t) {
    if (model->m_memory == NULL) {
        model->m_memory = (float*)calloc_check(model->num_parameters, sizeof(float));
        model->v_memory = (float*)calloc_check(model->num_parameters, sizeof(float));
    }
    float bias_correction1 = 1.0f - powf(beta1, (float)t);
    float bias_correction2_sqrt = sqrtf(1.0f - powf(beta2, (float)t));
    float step_size = lr / bias_correction1;
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        float decay = PARAMETER_DECAYS[k] ? 1.0f - lr * weight_decay : 1.0f;
        float* p = model->params_memory + offset;
        float* g = model->grads_memory + offset;
        float* m = model->m_memory + offset;
        float* v = model->v_memory + offset;
        #pragma omp parallel for
        for (long long i = 0; i < (long long)model->param_sizes[k]; i++) {
            float gi = g[i];
            float mi = beta1 * m[i] + (1.0f - beta1) * gi;
            float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
            p[i] = p[i] * decay - step_size * mi / denom;
        }
        offset += model->param_sizes[k];
    }
}

void gpt2_free(GPT2* model) {
    free(model->params_memory);
    free(model->grads_memory);
    free(model->m_memory);
    free(model->v_memory);
    free(model->acts_memory);
    free(model->grads_acts_memory);
    free(model->inputs);
    free(model->targets);
    memset(model, 0, sizeof(*model));
}

// ---------- checkpoints ----------

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

void gpt2_build_from_safetensors(GPT2* model, const char* path);

// Loads an llm.c checkpoint (version 3 float32 or version 5 bfloat16), or a Hugging Face
// model.safetensors file (told apart by the first bytes).
void gpt2_build_from_checkpoint(GPT2* model, const char* path) {
    FILE* f = fopen_check(path, "rb");
    long long size = file_size_check(f, path);
    int32_t header[HEADER_INTS];
    if (size >= 4) fread_check(header, sizeof(int32_t), 1, f, path);
    if (size < 4 || header[0] != CHECKPOINT_MAGIC) {
        fclose(f);
        gpt2_build_from_safetensors(model, path);
        return;
    }
    if (size < (long long)sizeof(header)) {
        fprintf(stderr, "error: %s is truncated: %lld bytes, shorter than the 1024-byte header\n",
                path, size);
        exit(1);
    }
    fread_check(header + 1, sizeof(int32_t), HEADER_INTS - 1, f, path);
    int version = header[1];
    if (version != CHECKPOINT_VERSION_F32 && version != CHECKPOINT_VERSION_BF16) {
        fprintf(stderr, "error: %s: unsupported checkpoint version %d (this program reads "
                "version 3, float32, and version 5, bfloat16)\n", path, version);
        exit(1);
    }
    GPT2Config config;
    config.max_seq_len = header[2];
    config.vocab_size = header[3];
    config.num_layers = header[4];
    config.num_heads = header[5];
    config.channels = header[6];
    config.padded_vocab_size = header[7];
    gpt2_check_config(config, path);
    gpt2_allocate_params(model, config);
    size_t elem = version == CHECKPOINT_VERSION_F32 ? 4 : 2;
    long long expected = (long long)sizeof(header) + (long long)(model->num_parameters * elem);
    if (size != expected) {
        fprintf(stderr, "error: %s is %s: %lld bytes, expected %lld for this model shape\n", path,
                size < expected ? "truncated" : "longer than its header says", size, expected);
        exit(1);
    }
    if (version == CHECKPOINT_VERSION_F32) {
        fread_check(model->params_memory, sizeof(float), model->num_parameters, f, path);
    } else {
        const size_t chunk = 1 << 20;
        uint16_t* buf = (uint16_t*)malloc_check(chunk * sizeof(uint16_t));
        for (size_t done = 0; done < model->num_parameters; done += chunk) {
            size_t n = model->num_parameters - done < chunk ? model->num_parameters - done : chunk;
            fread_check(buf, sizeof(uint16_t), n, f, path);
            for (size_t i = 0; i < n; i++) model->params_memory[done + i] = bf16_to_float(buf[i]);
        }
        free(buf);
    }
    fclose(f);
}

// Writes an llm.c checkpoint, version 3 (float32), atomically. params holds all tensors in
// file order; the GPU version passes a host copy.
void write_checkpoint(const char* path, GPT2Config config, const float* params, size_t num_parameters) {
    int32_t header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = CHECKPOINT_MAGIC;
    header[1] = CHECKPOINT_VERSION_F32;
    header[2] = config.max_seq_len;
    header[3] = config.vocab_size;
    header[4] = config.num_layers;
    header[5] = config.num_heads;
    header[6] = config.channels;
    header[7] = config.padded_vocab_size;
    AtomicFile a = atomic_open_check(path);
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, a.f, path);
    fwrite_check(params, sizeof(float), num_parameters, a.f, path);
    atomic_close_check(&a);
}

void gpt2_save_checkpoint(const GPT2* model, const char* path) {
    write_checkpoint(path, model->config, model->params_memory, model->num_parameters);
}

// ---------- safetensors ----------
// Hugging Face's model.safetensors (FORMATS.md): a u64 header length N, N bytes of JSON, then
// the raw little-endian tensors. The JSON is one flat object: "__metadata__" (ignored) and, per
// tensor, "name": {"dtype": "F32", "shape": [768, 2304], "data_offsets": [begin, end]}, the
// offsets counted from the end of the header. It is small (about 15 KB for GPT-2), so a minimal
// reader does: strings, integers, arrays and objects, other values skipped.
//
// GPT-2's tensors by transformers' names (files saved from GPT2LMHeadModel put "transformer."
// in front of all but lm_head.weight) and where they go:
//   wte.weight (V, C)             -> wte (Vp, C), the rows V..Vp-1 zero
//   wpe.weight (maxT, C)          -> wpe
//   h.N.ln_1, h.N.ln_2, ln_f      -> ln1w/ln1b, ln2w/ln2b, lnfw/lnfb (.weight/.bias, (C))
//   h.N.attn.c_attn  (C, 3C)      -> qkvw (3C, C), transposed;  .bias (3C) -> qkvb
//   h.N.attn.c_proj  (C, C)       -> attprojw (C, C), transposed;  .bias -> attprojb
//   h.N.mlp.c_fc     (C, 4C)      -> fcw (4C, C), transposed;  .bias -> fcb
//   h.N.mlp.c_proj   (4C, C)      -> fcprojw (C, 4C), transposed;  .bias -> fcprojb
// The four matrices are transformers' Conv1D, which computes x @ W + b with W stored (in, out):
// the transpose of the (out, in) rows of a Linear and of llm.c. The model's shape comes from
// the file: V and C from wte, maxT from wpe's rows, L from the h.N count. The number of heads is
// not stored; every GPT-2 size uses heads of 64 channels, so NH = C / 64.
// Also accepted: h.N.attn.bias and h.N.attn.masked_bias, the causal-mask buffers older files
// hold (not parameters: skipped), and lm_head.weight, which must equal wte (GPT-2 ties them).
// Tensors may be F32, F16 or BF16 (converted to float32). Anything else is an error: a missing
// or misshapen tensor, an unknown one, offsets outside the file.

#define SAFETENSORS_MAX_HEADER (100 << 20)  // the format's own limit on the JSON header
#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_NAME 256
#define GPT2_HEAD_SIZE 64

#define safetensors_fail(path, ...)                \
    do {                                           \
        fprintf(stderr, "error: %s: ", path);      \
        fprintf(stderr, __VA_ARGS__);              \
        fprintf(stderr, "\n");                     \
        exit(1);                                   \
    } while (0)

typedef struct {
    char name[SAFETENSORS_MAX_NAME];
    char dtype[8];
    int ndim;
    long long shape[SAFETENSORS_MAX_DIMS];
    long long begin, end;  // byte range within the data section
    int used;              // loaded into the model (or a buffer we skip)
} SafetensorsEntry;

typedef struct {
    const char* s;   // the JSON header
    size_t n, pos;
    const char* path;
} SafetensorsJson;

static void st_json_fail(const SafetensorsJson* r, const char* what) {
    safetensors_fail(r->path, "malformed safetensors header: %s at byte %zu of the JSON", what,
                     r->pos);
}

static void st_json_space(SafetensorsJson* r) {
    while (r->pos < r->n && (r->s[r->pos] == ' ' || r->s[r->pos] == '\n' ||
                             r->s[r->pos] == '\r' || r->s[r->pos] == '\t')) r->pos++;
}

// Consumes c (after whitespace) if it is next; returns whether it was.
static int st_json_accept(SafetensorsJson* r, char c) {
    st_json_space(r);
    if (r->pos < r->n && r->s[r->pos] == c) {
        r->pos++;
        return 1;
    }
    return 0;
}

static void st_json_expect(SafetensorsJson* r, char c) {
    if (!st_json_accept(r, c)) {
        char what[32];
        snprintf(what, sizeof(what), "expected '%c'", c);
        st_json_fail(r, what);
    }
}

// A string into out (cap bytes with the NUL). Tensor names and dtypes are ASCII: the escapes
// \" \\ \/ and \u00XX are decoded, anything beyond ASCII is refused.
static void st_json_string(SafetensorsJson* r, char* out, size_t cap) {
    st_json_expect(r, '"');
    size_t len = 0;
    for (;;) {
        if (r->pos >= r->n) st_json_fail(r, "unterminated string");
        char c = r->s[r->pos++];
        if (c == '"') break;
        if (c == '\\') {
            if (r->pos >= r->n) st_json_fail(r, "unterminated string");
            c = r->s[r->pos++];
            if (c == 'u') {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = r->pos < r->n ? r->s[r->pos++] : 'x';
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) st_json_fail(r, "bad \\u escape");
                    v = v * 16 + (unsigned)d;
                }
                if (v == 0 || v >= 0x80) st_json_fail(r, "non-ASCII character in a name");
                c = (char)v;
            } else if (c != '"' && c != '\\' && c != '/') {
                st_json_fail(r, "unsupported escape in a name");
            }
        } else if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x80) {
            st_json_fail(r, "control or non-ASCII character in a string");
        }
        if (len + 1 >= cap) st_json_fail(r, "string too long for a tensor name");
        out[len++] = c;
    }
    out[len] = '\0';
}

static long long st_json_int(SafetensorsJson* r) {
    st_json_space(r);
    size_t start = r->pos;
    long long v = 0;
    while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9') {
        if (v > (1LL << 50)) st_json_fail(r, "integer too large");
        v = v * 10 + (r->s[r->pos++] - '0');
    }
    if (r->pos == start) st_json_fail(r, "expected a non-negative integer");
    return v;
}

// [int, int, ...] into out (at most max of them); returns how many.
static int st_json_int_array(SafetensorsJson* r, long long* out, int max) {
    st_json_expect(r, '[');
    int n = 0;
    if (st_json_accept(r, ']')) return 0;
    do {
        if (n == max) st_json_fail(r, "array too long");
        out[n++] = st_json_int(r);
    } while (st_json_accept(r, ','));
    st_json_expect(r, ']');
    return n;
}

// Skips any JSON value (the metadata, unknown fields).
static void st_json_skip(SafetensorsJson* r, int depth) {
    if (depth > 16) st_json_fail(r, "nested too deeply");
    st_json_space(r);
    if (r->pos >= r->n) st_json_fail(r, "unexpected end");
    char c = r->s[r->pos];
    if (c == '"') {
        r->pos++;
        while (r->pos < r->n && r->s[r->pos] != '"') r->pos += r->s[r->pos] == '\\' ? 2 : 1;
        if (r->pos >= r->n) st_json_fail(r, "unterminated string");
        r->pos++;
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        r->pos++;
        if (st_json_accept(r, close)) return;
        do {
            if (c == '{') {
                st_json_skip(r, depth + 1);  // the key
                st_json_expect(r, ':');
            }
            st_json_skip(r, depth + 1);
        } while (st_json_accept(r, ','));
        st_json_expect(r, close);
    } else {  // a number, true, false or null
        size_t start = r->pos;
        while (r->pos < r->n && strchr(",}] \n\r\t", r->s[r->pos]) == NULL) r->pos++;
        if (r->pos == start) st_json_fail(r, "expected a value");
    }
}

// One tensor's {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}.
static void st_json_tensor(SafetensorsJson* r, SafetensorsEntry* e) {
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    char key[32];
    st_json_expect(r, '{');
    do {
        st_json_string(r, key, sizeof(key));
        st_json_expect(r, ':');
        if (strcmp(key, "dtype") == 0) {
            st_json_string(r, e->dtype, sizeof(e->dtype));
            have_dtype = 1;
        } else if (strcmp(key, "shape") == 0) {
            e->ndim = st_json_int_array(r, e->shape, SAFETENSORS_MAX_DIMS);
            have_shape = 1;
        } else if (strcmp(key, "data_offsets") == 0) {
            long long off[2];
            if (st_json_int_array(r, off, 2) != 2) st_json_fail(r, "data_offsets needs 2 integers");
            e->begin = off[0];
            e->end = off[1];
            have_offsets = 1;
        } else {
            st_json_skip(r, 1);
        }
    } while (st_json_accept(r, ','));
    st_json_expect(r, '}');
    if (!have_dtype || !have_shape || !have_offsets) {
        safetensors_fail(r->path, "tensor %s lacks dtype, shape or data_offsets", e->name);
    }
}

static size_t st_dtype_size(const char* dtype) {
    if (strcmp(dtype, "F64") == 0 || strcmp(dtype, "I64") == 0 || strcmp(dtype, "U64") == 0) return 8;
    if (strcmp(dtype, "F32") == 0 || strcmp(dtype, "I32") == 0 || strcmp(dtype, "U32") == 0) return 4;
    if (strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0 || strcmp(dtype, "I16") == 0 ||
        strcmp(dtype, "U16") == 0) return 2;
    if (strcmp(dtype, "I8") == 0 || strcmp(dtype, "U8") == 0 || strcmp(dtype, "BOOL") == 0) return 1;
    return 0;
}

static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
        float f = ldexpf((float)mantissa, -24);
        return sign ? -f : f;
    }
    // float16 exponent bias 15, float32 127; 31 is inf/NaN in both (255 in float32)
    uint32_t bits = sign | (exponent == 31 ? 0xffu << 23 : (exponent + 112) << 23) | mantissa << 13;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

typedef struct {
    const char* path;
    FILE* f;
    long long data_start;      // 8 + header length
    SafetensorsEntry* entries;
    int num_entries;
    const char* prefix;        // "transformer." or ""
} Safetensors;

static SafetensorsEntry* st_find(const Safetensors* st, const char* name) {
    for (int i = 0; i < st->num_entries; i++) {
        if (strcmp(st->entries[i].name, name) == 0) return &st->entries[i];
    }
    return NULL;
}

// Reads the tensor `name` (prefix added; "h.LAYER." too when layer >= 0), which must have shape
// (rows) when cols is 0, else (rows, cols), as float32 into dest. With transpose, dest receives
// it as (cols, rows): a Conv1D (in, out) weight becomes (out, in).
static void st_load(Safetensors* st, int layer, const char* name, float* dest, long long rows,
                    long long cols, int transpose) {
    char full[SAFETENSORS_MAX_NAME];
    if (layer >= 0) snprintf(full, sizeof(full), "%sh.%d.%s", st->prefix, layer, name);
    else snprintf(full, sizeof(full), "%s%s", st->prefix, name);
    SafetensorsEntry* e = st_find(st, full);
    if (e == NULL) safetensors_fail(st->path, "tensor %s is missing", full);
    int ndim = cols == 0 ? 1 : 2;
    if (e->ndim != ndim || e->shape[0] != rows || (ndim == 2 && e->shape[1] != cols)) {
        char got[128] = "", want[64];
        for (int i = 0; i < e->ndim; i++) {
            size_t len = strlen(got);
            snprintf(got + len, sizeof(got) - len, "%s%lld", i ? ", " : "", e->shape[i]);
        }
        if (ndim == 1) snprintf(want, sizeof(want), "%lld", rows);
        else snprintf(want, sizeof(want), "%lld, %lld", rows, cols);
        safetensors_fail(st->path, "tensor %s has shape (%s), expected (%s) for this model", full,
                         got, want);
    }
    size_t n = (size_t)rows * (size_t)(cols == 0 ? 1 : cols);
    if (fseek(st->f, (long)(st->data_start + e->begin), SEEK_SET) != 0) {
        safetensors_fail(st->path, "cannot seek to tensor %s", full);
    }
    float* buf = transpose ? (float*)malloc_check(n * sizeof(float)) : dest;
    if (strcmp(e->dtype, "F32") == 0) {
        fread_check(buf, sizeof(float), n, st->f, st->path);
    } else {
        int bf16 = strcmp(e->dtype, "BF16") == 0;
        if (!bf16 && strcmp(e->dtype, "F16") != 0) {
            safetensors_fail(st->path, "tensor %s has dtype %s; this program reads F32, F16 and BF16",
                             full, e->dtype);
        }
        const size_t chunk = 1 << 16;
        uint16_t* raw = (uint16_t*)malloc_check(chunk * sizeof(uint16_t));
        for (size_t done = 0; done < n; done += chunk) {
            size_t m = n - done < chunk ? n - done : chunk;
            fread_check(raw, sizeof(uint16_t), m, st->f, st->path);
            for (size_t i = 0; i < m; i++) buf[done + i] = bf16 ? bf16_to_float(raw[i]) : f16_to_float(raw[i]);
        }
        free(raw);
    }
    if (transpose) {
        #pragma omp parallel for
        for (long long c = 0; c < cols; c++) {
            for (long long r = 0; r < rows; r++) dest[c * rows + r] = buf[r * cols + c];
        }
        free(buf);
    }
    e->used = 1;
}

// Is name (prefix removed) h.N.REST? Then returns N and points *rest at REST; else -1.
static int st_layer_of(const char* name, const char** rest) {
    if (strncmp(name, "h.", 2) != 0 || name[2] < '0' || name[2] > '9') return -1;
    char* end;
    long layer = strtol(name + 2, &end, 10);
    if (*end != '.' || layer > 100000) return -1;
    *rest = end + 1;
    return (int)layer;
}

void gpt2_build_from_safetensors(GPT2* model, const char* path) {
    Safetensors st;
    memset(&st, 0, sizeof(st));
    st.path = path;
    st.f = fopen_check(path, "rb");
    long long size = file_size_check(st.f, path);

    // the header: its length, then the JSON
    uint64_t header_len = 0;
    if (size >= 8) fread_check(&header_len, sizeof(header_len), 1, st.f, path);
    if (size < 8) {
        safetensors_fail(path, "neither an llm.c checkpoint (magic %d) nor a safetensors file "
                         "(only %lld bytes)", CHECKPOINT_MAGIC, size);
    }
    if (header_len < 2 || header_len > SAFETENSORS_MAX_HEADER || (long long)header_len > size - 8) {
        safetensors_fail(path, "neither an llm.c checkpoint (magic %d) nor a safetensors file "
                         "(a safetensors file starts with the length of its JSON header; this "
                         "one's first 8 bytes say %llu, the file has %lld)", CHECKPOINT_MAGIC,
                         (unsigned long long)header_len, size);
    }
    char* json = (char*)malloc_check((size_t)header_len);
    fread_check(json, 1, (size_t)header_len, st.f, path);
    st.data_start = 8 + (long long)header_len;
    long long data_size = size - st.data_start;
    SafetensorsJson r;
    r.s = json;
    r.n = (size_t)header_len;
    r.pos = 0;
    r.path = path;
    st_json_space(&r);
    if (r.pos >= r.n || r.s[r.pos] != '{') {
        safetensors_fail(path, "neither an llm.c checkpoint (magic %d) nor a safetensors file "
                         "(no JSON header after the first 8 bytes)", CHECKPOINT_MAGIC);
    }
    st_json_expect(&r, '{');
    int cap = 0;
    if (!st_json_accept(&r, '}')) {
        do {
            char name[SAFETENSORS_MAX_NAME];
            st_json_string(&r, name, sizeof(name));
            st_json_expect(&r, ':');
            if (strcmp(name, "__metadata__") == 0) {
                st_json_skip(&r, 1);
                continue;
            }
            if (st_find(&st, name) != NULL) safetensors_fail(path, "tensor %s appears twice", name);
            if (st.num_entries == cap) {
                cap = cap ? 2 * cap : 256;
                st.entries = (SafetensorsEntry*)realloc_check(st.entries, (size_t)cap * sizeof(SafetensorsEntry));
            }
            SafetensorsEntry* e = &st.entries[st.num_entries++];
            memset(e, 0, sizeof(*e));
            memcpy(e->name, name, sizeof(name));
            st_json_tensor(&r, e);
        } while (st_json_accept(&r, ','));
        st_json_expect(&r, '}');
    }
    st_json_space(&r);
    if (r.pos != r.n) st_json_fail(&r, "text after the header object");
    free(json);

    // every tensor's bytes lie inside the data section and match its dtype and shape
    for (int i = 0; i < st.num_entries; i++) {
        SafetensorsEntry* e = &st.entries[i];
        size_t elem = st_dtype_size(e->dtype);
        if (elem == 0) safetensors_fail(path, "tensor %s has unknown dtype %s", e->name, e->dtype);
        long long numel = 1;
        for (int d = 0; d < e->ndim; d++) {
            if (e->shape[d] > (1LL << 40) / (numel > 0 ? numel : 1)) {
                safetensors_fail(path, "tensor %s has an impossible shape", e->name);
            }
            numel *= e->shape[d];
        }
        if (e->begin > e->end || e->end > data_size) {
            safetensors_fail(path, "tensor %s has data_offsets [%lld, %lld] outside the %lld bytes "
                             "of data (truncated file?)", e->name, e->begin, e->end, data_size);
        }
        if (e->end - e->begin != numel * (long long)elem) {
            safetensors_fail(path, "tensor %s: data_offsets span %lld bytes, its shape and dtype "
                             "need %lld", e->name, e->end - e->begin, numel * (long long)elem);
        }
    }

    // the model's shape from the file
    st.prefix = st_find(&st, "transformer.wte.weight") != NULL ? "transformer." : "";
    char name[SAFETENSORS_MAX_NAME];
    snprintf(name, sizeof(name), "%swte.weight", st.prefix);
    SafetensorsEntry* wte = st_find(&st, name);
    snprintf(name, sizeof(name), "%swpe.weight", st.prefix);
    SafetensorsEntry* wpe = st_find(&st, name);
    if (wte == NULL || wpe == NULL || wte->ndim != 2 || wpe->ndim != 2 ||
        wpe->shape[1] != wte->shape[1]) {
        safetensors_fail(path, "not a GPT-2 safetensors file: needs wte.weight (V, C) and "
                         "wpe.weight (maxT, C)");
    }
    size_t prefix_len = strlen(st.prefix);
    int L = 0;
    for (int i = 0; i < st.num_entries; i++) {
        const char* rest;
        const char* n = st.entries[i].name;
        if (strncmp(n, st.prefix, prefix_len) != 0) continue;
        int layer = st_layer_of(n + prefix_len, &rest);
        if (layer + 1 > L) L = layer + 1;
    }
    GPT2Config config;
    config.vocab_size = (int)(wte->shape[0] < INT32_MAX ? wte->shape[0] : -1);
    config.padded_vocab_size = (config.vocab_size + 127) / 128 * 128;
    config.channels = (int)(wte->shape[1] < INT32_MAX ? wte->shape[1] : -1);
    config.max_seq_len = (int)(wpe->shape[0] < INT32_MAX ? wpe->shape[0] : -1);
    config.num_layers = L;
    if (config.channels <= 0 || config.channels % GPT2_HEAD_SIZE != 0) {
        safetensors_fail(path, "channels C=%d are not a multiple of GPT-2's head size %d, so "
                         "the number of heads is unknown", config.channels, GPT2_HEAD_SIZE);
    }
    config.num_heads = config.channels / GPT2_HEAD_SIZE;
    gpt2_check_config(config, path);
    gpt2_allocate_params(model, config);

    // the tensors, each checked for its shape
    long long V = config.vocab_size, C = config.channels, maxT = config.max_seq_len;
    const ParameterTensors* p = &model->params;
    st_load(&st, -1, "wte.weight", p->wte, V, C, 0);
    memset(p->wte + V * C, 0, (size_t)(config.padded_vocab_size - V) * C * sizeof(float));
    st_load(&st, -1, "wpe.weight", p->wpe, maxT, C, 0);
    for (int l = 0; l < L; l++) {
        st_load(&st, l, "ln_1.weight", p->ln1w + l * C, C, 0, 0);
        st_load(&st, l, "ln_1.bias", p->ln1b + l * C, C, 0, 0);
        st_load(&st, l, "attn.c_attn.weight", p->qkvw + l * 3 * C * C, C, 3 * C, 1);
        st_load(&st, l, "attn.c_attn.bias", p->qkvb + l * 3 * C, 3 * C, 0, 0);
        st_load(&st, l, "attn.c_proj.weight", p->attprojw + l * C * C, C, C, 1);
        st_load(&st, l, "attn.c_proj.bias", p->attprojb + l * C, C, 0, 0);
        st_load(&st, l, "ln_2.weight", p->ln2w + l * C, C, 0, 0);
        st_load(&st, l, "ln_2.bias", p->ln2b + l * C, C, 0, 0);
        st_load(&st, l, "mlp.c_fc.weight", p->fcw + l * 4 * C * C, C, 4 * C, 1);
        st_load(&st, l, "mlp.c_fc.bias", p->fcb + l * 4 * C, 4 * C, 0, 0);
        st_load(&st, l, "mlp.c_proj.weight", p->fcprojw + l * C * 4 * C, 4 * C, C, 1);
        st_load(&st, l, "mlp.c_proj.bias", p->fcprojb + l * C, C, 0, 0);
    }
    st_load(&st, -1, "ln_f.weight", p->lnfw, C, 0, 0);
    st_load(&st, -1, "ln_f.bias", p->lnfb, C, 0, 0);

    // what is left must be the mask buffers or a tied lm_head.weight
    for (int i = 0; i < st.num_entries; i++) {
        SafetensorsEntry* e = &st.entries[i];
        if (e->used) continue;
        const char* rest = NULL;
        int layer = strncmp(e->name, st.prefix, prefix_len) == 0
                        ? st_layer_of(e->name + prefix_len, &rest) : -1;
        if (layer >= 0 && (strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0)) {
            continue;
        }
        if (strcmp(e->name, "lm_head.weight") == 0) {
            float* head = (float*)malloc_check((size_t)(V * C) * sizeof(float));
            const char* saved = st.prefix;
            st.prefix = "";
            st_load(&st, -1, "lm_head.weight", head, V, C, 0);
            st.prefix = saved;
            if (memcmp(head, p->wte, (size_t)(V * C) * sizeof(float)) != 0) {
                safetensors_fail(path, "lm_head.weight differs from wte.weight: GPT-2 ties its "
                                 "output layer to the embedding, and so does this program");
            }
            free(head);
            continue;
        }
        safetensors_fail(path, "unexpected tensor %s: not part of GPT-2", e->name);
    }
    free(st.entries);
    fclose(st.f);
}

// ---------- token data ----------
// A token file (FORMATS.md) is read whole into memory and checked once: every id must be below
// the model's vocabulary. Batches are B*T+1 consecutive tokens (targets are inputs shifted by
// one), taken in order from the start and wrapping at the end; or, with shuffle, the batches of
// each pass over the file in a random order drawn from the seed.

typedef struct {
    int B, T;
    uint16_t* tokens;
    size_t num_tokens;
    size_t num_batches;     // whole batches per pass over the file
    size_t batch_index;     // the next batch of this pass
    int shuffle;
    uint64_t shuffle_seed;
    uint64_t epoch;         // passes completed
    size_t* order;          // batch order of this pass (shuffle only)
    int* inputs;            // (B, T)
    int* targets;           // (B, T)
} DataLoader;

static void dataloader_make_order(DataLoader* dl) {
    for (size_t i = 0; i < dl->num_batches; i++) dl->order[i] = i;
    if (!dl->shuffle) return;
    uint64_t rng = seed_mix(dl->shuffle_seed, dl->epoch, 0x5eed);
    for (size_t i = dl->num_batches - 1; i > 0; i--) {  // Fisher-Yates
        size_t j = (size_t)(((uint64_t)random_u32(&rng) << 32 | random_u32(&rng)) % (i + 1));
        size_t tmp = dl->order[i];
        dl->order[i] = dl->order[j];
        dl->order[j] = tmp;
    }
}

void dataloader_init(DataLoader* dl, const char* path, int B, int T, int vocab_size,
                     int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B;
    dl->T = T;
    FILE* f = fopen_check(path, "rb");
    int32_t header[HEADER_INTS];
    long long size = read_header_check(f, path, header);
    if (header[0] != TOKENS_MAGIC) {
        fprintf(stderr, "error: %s is not a token file (magic %d, expected %d)\n", path,
                header[0], TOKENS_MAGIC);
        exit(1);
    }
    if (header[1] != TOKENS_VERSION) {
        fprintf(stderr, "error: %s: unsupported token file version %d (expected %d)\n", path,
                header[1], TOKENS_VERSION);
        exit(1);
    }
    long long n = (uint32_t)header[2];
    long long expected = (long long)sizeof(header) + 2 * n;
    if (size != expected) {
        fprintf(stderr, "error: %s is %s: %lld bytes, but its header says %lld tokens (%lld bytes)\n",
                path, size < expected ? "truncated" : "longer than its header says", size, n, expected);
        exit(1);
    }
    size_t need = (size_t)B * T + 1;
    if ((size_t)n < need) {
        fprintf(stderr, "error: %s holds %lld tokens, fewer than one batch needs (B*T+1 = %zu)\n",
                path, n, need);
        exit(1);
    }
    dl->num_tokens = (size_t)n;
    dl->tokens = (uint16_t*)malloc_check(dl->num_tokens * sizeof(uint16_t));
    fread_check(dl->tokens, sizeof(uint16_t), dl->num_tokens, f, path);
    fclose(f);
    for (size_t i = 0; i < dl->num_tokens; i++) {
        if (dl->tokens[i] >= vocab_size) {
            fprintf(stderr, "error: %s: token id %d at position %zu is not below the model's "
                    "vocabulary size %d\n", path, dl->tokens[i], i, vocab_size);
            exit(1);
        }
    }
    dl->num_batches = (dl->num_tokens - 1) / ((size_t)B * T);
    dl->shuffle = shuffle;
    dl->shuffle_seed = seed;
    dl->order = (size_t*)malloc_check(dl->num_batches * sizeof(size_t));
    dataloader_make_order(dl);
    dl->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    dl->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
}

void dataloader_reset(DataLoader* dl) {
    dl->batch_index = 0;
    dl->epoch = 0;
    dataloader_make_order(dl);
}

// Sets the position: batch `batch_index` of pass `epoch` (used when resuming). batch_index ==
// num_batches means the pass is complete: the next batch wraps into pass epoch+1.
void dataloader_seek(DataLoader* dl, uint64_t epoch, size_t batch_index) {
    dl->epoch = epoch;
    dataloader_make_order(dl);
    dl->batch_index = batch_index <= dl->num_batches ? batch_index : 0;
}

void dataloader_next_batch(DataLoader* dl) {
    if (dl->batch_index >= dl->num_batches) {  // wrap around: the next pass over the file
        dl->batch_index = 0;
        dl->epoch++;
        dataloader_make_order(dl);
    }
    size_t BT = (size_t)dl->B * dl->T;
    const uint16_t* src = dl->tokens + dl->order[dl->batch_index] * BT;
    for (size_t i = 0; i < BT; i++) {
        dl->inputs[i] = src[i];
        dl->targets[i] = src[i + 1];
    }
    dl->batch_index++;
}

void dataloader_free(DataLoader* dl) {
    free(dl->tokens);
    free(dl->order);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}

// ---------- sampling ----------

// Draws an index from the probabilities probs[0..n-1], given a uniform coin in [0, 1).
int sample_mult(const float* probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) return i;
    }
    return n - 1;  // rounding: the cdf ended just under 1
}

// Prints a token's bytes, leaving out control bytes other than newline and tab so that a sample
// cannot garble the terminal.
static void print_token(const Tokenizer* tok, int id) {
    if (tok == NULL) {
        printf("%d ", id);
        return;
    }
    size_t len = 0;
    const unsigned char* bytes = tokenizer_decode(tok, (uint32_t)id, &len);
    if (bytes == NULL) return;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = bytes[i];
        if (c >= 32 || c == '\n' || c == '\t') putchar(c);
    }
}

// Generates n tokens after an end-of-text token, one forward pass per token over the sequence so
// far (the plain way; infer.c keeps a cache instead), and prints them.
void gpt2_sample_and_print(GPT2* model, const Tokenizer* tok, int n, uint64_t* rng) {
    int maxT = model->seq_len > 0 ? model->seq_len : model->config.max_seq_len;
    if (n > maxT - 1) n = maxT - 1;
    int eot = tok != NULL ? tok->eot_token : GPT2_EOT;
    if (eot >= model->config.vocab_size) eot = model->config.vocab_size - 1;
    int* tokens = (int*)malloc_check((size_t)(n + 1) * sizeof(int));
    tokens[0] = eot;
    int Vp = model->config.padded_vocab_size;
    for (int t = 1; t <= n; t++) {
        gpt2_forward(model, tokens, NULL, 1, t);
        const float* probs = model->acts.probs + (size_t)(t - 1) * Vp;
        int next = sample_mult(probs, model->config.vocab_size, random_f32(rng));
        tokens[t] = next;
        print_token(tok, next);
        fflush(stdout);
    }
    printf("\n");
    free(tokens);
}

// ---------- training state (resume) ----------
// Beside each checkpoint model_STEP.bin, state_STEP.bin holds what the checkpoint does not:
// the step, the AdamW moments m and v, the data loader's position and the random state.
// Resuming from both continues bit for bit as if the run had never stopped.

typedef struct {
    int step;            // steps completed
    int B, T;            // batch shape the run uses (must match on resume)
    uint64_t epoch;      // data loader: passes completed
    uint64_t batch_index;// data loader: next batch of this pass
    uint64_t rng;        // sampling random state
} TrainState;

void write_state(const char* path, TrainState s, const float* m, const float* v, size_t n) {
    int32_t header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = s.step;
    header[3] = s.B;
    header[4] = s.T;
    memcpy(&header[8], &s.epoch, 8);
    memcpy(&header[10], &s.batch_index, 8);
    memcpy(&header[12], &s.rng, 8);
    uint64_t n64 = n;
    memcpy(&header[14], &n64, 8);
    AtomicFile a = atomic_open_check(path);
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, a.f, path);
    fwrite_check(m, sizeof(float), n, a.f, path);
    fwrite_check(v, sizeof(float), n, a.f, path);
    atomic_close_check(&a);
}

// Reads a state file into s, m and v (n floats each, allocated by the caller).
void read_state(const char* path, TrainState* s, float* m, float* v, size_t n) {
    FILE* f = fopen_check(path, "rb");
    int32_t header[HEADER_INTS];
    long long size = read_header_check(f, path, header);
    if (header[0] != STATE_MAGIC || header[1] != STATE_VERSION) {
        fprintf(stderr, "error: %s is not a training state file (magic %d version %d)\n", path,
                header[0], header[1]);
        exit(1);
    }
    uint64_t n64;
    memcpy(&n64, &header[14], 8);
    if (n64 != n || size != (long long)sizeof(header) + 8LL * (long long)n) {
        fprintf(stderr, "error: %s does not match the model (%llu moments for %zu parameters, "
                "%lld bytes)\n", path, (unsigned long long)n64, n, size);
        exit(1);
    }
    s->step = header[2];
    s->B = header[3];
    s->T = header[4];
    memcpy(&s->epoch, &header[8], 8);
    memcpy(&s->batch_index, &header[10], 8);
    memcpy(&s->rng, &header[12], 8);
    fread_check(m, sizeof(float), n, f, path);
    fread_check(v, sizeof(float), n, f, path);
    fclose(f);
}

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// The latest step in DIR with both model_STEP.bin and state_STEP.bin, or -1.
int find_latest_checkpoint(const char* dir, int max_step) {
    char model_path[4096], state_path[4096];
    for (int step = max_step; step >= 0; step--) {
        snprintf(model_path, sizeof(model_path), "%s/model_%08d.bin", dir, step);
        snprintf(state_path, sizeof(state_path), "%s/state_%08d.bin", dir, step);
        if (file_exists(model_path) && file_exists(state_path)) return step;
    }
    return -1;
}

// ---------- command line ----------

typedef struct {
    const char* train_file;       // -i
    const char* val_file;         // -j
    const char* init;             // -e: checkpoint file, or dN for a fresh model of depth N
    const char* output_dir;       // -o
    const char* tokenizer_file;   // -k
    int B;                        // -b
    int T;                        // -t
    int max_steps;                // -x
    float learning_rate;          // -l
    int warmup_steps;             // -u
    float final_lr_frac;          // -q
    float weight_decay;           // -c
    int val_every;                // -v
    int val_batches;              // -m
    int sample_every;             // -s
    int gen_tokens;               // -g
    int checkpoint_every;         // -n
    int resume;                   // -y
    uint64_t seed;                // -S
    int shuffle;                  // -R
} TrainConfig;

// The defaults are the default run: a 4-layer GPT-2 (C=256, 4 heads, 16M parameters, most of
// them in the 50,257-token embedding) on Tiny Shakespeare, sized to show falling validation loss
// and play-like samples within minutes on a 2-core machine.
TrainConfig train_config_defaults(void) {
    TrainConfig c;
    c.train_file = "data/tinyshakespeare_train.bin";
    c.val_file = "data/tinyshakespeare_val.bin";
    c.init = "d4";
    c.output_dir = NULL;
    c.tokenizer_file = "data/gpt2_tokenizer.bin";
    c.B = 8;
    c.T = 64;
    c.max_steps = 500;
    c.learning_rate = 1e-3f;
    c.warmup_steps = 0;
    c.final_lr_frac = 1.0f;
    c.weight_decay = 0.0f;
    c.val_every = 50;
    c.val_batches = 10;
    c.sample_every = 100;
    c.gen_tokens = 64;
    c.checkpoint_every = 0;
    c.resume = 0;
    c.seed = 1337;
    c.shuffle = 0;
    return c;
}

// d: the defaults to show (train_gpu.cu has its own).
void print_usage(const char* prog, TrainConfig d) {
    fprintf(stderr,
            "usage: %s [options]\n"
            "  -i FILE   training tokens (default %s)\n"
            "  -j FILE   validation tokens (default %s)\n"
            "  -e INIT   checkpoint (llm.c .bin or model.safetensors) or dN for a fresh model of N layers (default %s)\n"
            "  -o DIR    output directory for main.log, checkpoints and state (default none)\n"
            "  -k FILE   tokenizer file for printing samples (default %s)\n"
            "  -b N      batch size B (default %d)\n"
            "  -t N      sequence length T (default %d)\n"
            "  -x N      training steps (default %d)\n"
            "  -l LR     learning rate (default %g)\n"
            "  -u N      linear warmup steps (default %d)\n"
            "  -q F      final learning rate as a fraction of -l, reached by cosine decay; 1 = constant (default %g)\n"
            "  -c WD     weight decay on the matrices (default %g)\n"
            "  -v N      validation loss every N steps, 0 = never (default %d)\n"
            "  -m N      validation batches (default %d)\n"
            "  -s N      sample text every N steps, 0 = never (default %d)\n"
            "  -g N      tokens per sample (default %d)\n"
            "  -n N      checkpoint every N steps and at the end, with -o; 0 = at the end only (default %d)\n"
            "  -y 1      resume from the latest checkpoint and state in -o (default %d)\n"
            "  -S SEED   random seed for initialisation, shuffling and sampling (default %llu)\n"
            "  -R 1      shuffle the order of batches, from the seed (default %d)\n"
            "  -h        this help\n",
            prog, d.train_file, d.val_file, d.init, d.tokenizer_file, d.B, d.T, d.max_steps,
            d.learning_rate, d.warmup_steps, d.final_lr_frac, d.weight_decay, d.val_every,
            d.val_batches, d.sample_every, d.gen_tokens, d.checkpoint_every, d.resume,
            (unsigned long long)d.seed, d.shuffle);
}

// Command lines are "-x VALUE" pairs. Returns the value of the flag argv[i], or NULL for -h and
// --help (the caller prints its usage); anything else is an error.
const char* flag_value(int argc, char** argv, int i) {
    const char* flag = argv[i];
    if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) return NULL;
    if (flag[0] != '-' || strlen(flag) != 2) {
        fprintf(stderr, "error: unexpected argument '%s' (see -h)\n", flag);
        exit(1);
    }
    if (i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value (see -h)\n", flag);
        exit(1);
    }
    return argv[i + 1];
}

static int parse_int_arg(const char* flag, const char* s, int min) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || end == s || v < min || v > 1000000000L) {
        fprintf(stderr, "error: %s expects an integer >= %d, got '%s'\n", flag, min, s);
        exit(1);
    }
    return (int)v;
}

static float parse_float_arg(const char* flag, const char* s, float min) {
    char* end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || *end != '\0' || end == s || !(v >= min) || isinf(v)) {
        fprintf(stderr, "error: %s expects a number >= %g, got '%s'\n", flag, min, s);
        exit(1);
    }
    return v;
}

// Parses the options over the defaults c (train_gpu.cu passes its own).
TrainConfig parse_args_over(TrainConfig c, int argc, char** argv) {
    TrainConfig defaults = c;
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        const char* val = flag_value(argc, argv, i);
        if (val == NULL) {
            print_usage(argv[0], defaults);
            exit(0);
        }
        switch (flag[1]) {
            case 'i': c.train_file = val; break;
            case 'j': c.val_file = val; break;
            case 'e': c.init = val; break;
            case 'o': c.output_dir = val; break;
            case 'k': c.tokenizer_file = val; break;
            case 'b': c.B = parse_int_arg(flag, val, 1); break;
            case 't': c.T = parse_int_arg(flag, val, 1); break;
            case 'x': c.max_steps = parse_int_arg(flag, val, 0); break;
            case 'l': c.learning_rate = parse_float_arg(flag, val, 0.0f); break;
            case 'u': c.warmup_steps = parse_int_arg(flag, val, 0); break;
            case 'q': c.final_lr_frac = parse_float_arg(flag, val, 0.0f); break;
            case 'c': c.weight_decay = parse_float_arg(flag, val, 0.0f); break;
            case 'v': c.val_every = parse_int_arg(flag, val, 0); break;
            case 'm': c.val_batches = parse_int_arg(flag, val, 1); break;
            case 's': c.sample_every = parse_int_arg(flag, val, 0); break;
            case 'g': c.gen_tokens = parse_int_arg(flag, val, 1); break;
            case 'n': c.checkpoint_every = parse_int_arg(flag, val, 0); break;
            case 'y': c.resume = parse_int_arg(flag, val, 0); break;
            case 'S': c.seed = (uint64_t)parse_int_arg(flag, val, 0); break;
            case 'R': c.shuffle = parse_int_arg(flag, val, 0); break;
            default:
                fprintf(stderr, "error: unknown option %s (see -h)\n", flag);
                exit(1);
        }
    }
    if (c.final_lr_frac > 1.0f) {
        fprintf(stderr, "error: -q expects a fraction between 0 and 1, got %g\n", c.final_lr_frac);
        exit(1);
    }
    if (c.resume && c.output_dir == NULL) {
        fprintf(stderr, "error: -y 1 resumes from the checkpoints in -o DIR: give -o\n");
        exit(1);
    }
    return c;
}

TrainConfig parse_args(int argc, char** argv) {
    return parse_args_over(train_config_defaults(), argc, argv);
}

// Learning rate at step (from 1): linear warmup over warmup_steps, then cosine decay from the
// full rate to final_lr_frac of it at max_steps (constant when final_lr_frac is 1).
float learning_rate_at(const TrainConfig* c, int step) {
    float lr = c->learning_rate;
    if (step <= c->warmup_steps) return lr * (float)step / (float)c->warmup_steps;
    if (c->final_lr_frac >= 1.0f || c->max_steps <= c->warmup_steps) return lr;
    float progress = (float)(step - c->warmup_steps) / (float)(c->max_steps - c->warmup_steps);
    float coeff = 0.5f * (1.0f + cosf(3.14159265f * progress));
    float min_lr = lr * c->final_lr_frac;
    return min_lr + coeff * (lr - min_lr);
}

// Stops the run when training has diverged: a loss or gradient norm that is not finite would
// turn every parameter into NaN at the next update. Checked before that update is applied.
void check_step_finite(int step, float loss, float norm) {
    if (isfinite(loss) && isfinite(norm)) return;
    fprintf(stderr, "error: training diverged at step %d (loss %f, gradient norm %f); stopped before "
            "its update (learning rate too high?)\n", step, loss, norm);
    exit(1);
}

// Is s of the form dN (a depth for a fresh model) rather than a file name? Returns N, or -1.
static int parse_depth(const char* s) {
    if (s[0] != 'd' || s[1] == '\0' || strlen(s) > 6) return -1;
    for (const char* p = s + 1; *p; p++) if (!isdigit((unsigned char)*p)) return -1;
    return atoi(s + 1);
}

// Builds the model named by -e: a fresh one for dN (unless a file of that name exists), else a file.
void gpt2_build_from_init(GPT2* model, const char* init, uint64_t seed) {
    int depth = parse_depth(init);
    if (depth >= 0 && !file_exists(init)) {
        if (depth < 1 || depth > 128) {
            fprintf(stderr, "error: -e %s: a fresh model has 1 to 128 layers\n", init);
            exit(1);
        }
        gpt2_build_init(model, gpt2_config_for_depth(depth), seed);
    } else {
        gpt2_build_from_checkpoint(model, init);
    }
}

// Makes DIR if needed and proves it writable by creating and removing a file in it, so a run
// fails at the start rather than at its first checkpoint.
void ensure_output_dir(const char* dir) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (mkdir(dir, 0755) != 0) {
            fprintf(stderr, "error: cannot create output directory %s: %s\n", dir, strerror(errno));
            exit(1);
        }
    } else if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "error: output path %s exists and is not a directory\n", dir);
        exit(1);
    }
    char probe[4096];
    snprintf(probe, sizeof(probe), "%s/.write_test", dir);
    FILE* f = fopen(probe, "wb");
    if (f == NULL) {
        fprintf(stderr, "error: output directory %s is not writable: %s\n", dir, strerror(errno));
        exit(1);
    }
    fclose(f);
    remove(probe);
}

// Mean loss over up to max_batches batches of the validation file, from its start.
float gpt2_validate(GPT2* model, DataLoader* val, int max_batches) {
    dataloader_reset(val);
    int n = max_batches < (int)val->num_batches ? max_batches : (int)val->num_batches;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        dataloader_next_batch(val);
        gpt2_forward(model, val->inputs, val->targets, val->B, val->T);
        sum += model->mean_loss;
    }
    return (float)(sum / n);
}

// ---------- main ----------
#ifndef TRAIN_CPU_NO_MAIN

int main(int argc, char** argv) {
    TrainConfig cfg = parse_args(argc, argv);
    int B = cfg.B, T = cfg.T;

    // the model: fresh, from a file, or from the latest checkpoint of a run being resumed
    GPT2 model;
    TrainState state;
    memset(&state, 0, sizeof(state));
    int resume_step = -1;
    char path[4096];
    if (cfg.resume) {
        resume_step = find_latest_checkpoint(cfg.output_dir, cfg.max_steps);
        if (resume_step < 0) {
            fprintf(stderr, "error: -y 1: no model_STEP.bin with state_STEP.bin (STEP <= %d) in %s\n",
                    cfg.max_steps, cfg.output_dir);
            exit(1);
        }
        snprintf(path, sizeof(path), "%s/model_%08d.bin", cfg.output_dir, resume_step);
        gpt2_build_from_checkpoint(&model, path);
    } else {
        gpt2_build_from_init(&model, cfg.init, cfg.seed);
    }
    GPT2Config mc = model.config;
    if (T > mc.max_seq_len) {
        fprintf(stderr, "error: -t %d is longer than the model's context maxT=%d\n", T, mc.max_seq_len);
        exit(1);
    }

    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, cfg.train_file, B, T, mc.vocab_size, cfg.shuffle, cfg.seed);
    int use_val = cfg.val_every > 0;
    if (use_val) dataloader_init(&val_loader, cfg.val_file, B, T, mc.vocab_size, 0, 0);

    // the tokenizer only prints samples: without one, samples print as token ids
    Tokenizer tokenizer;
    Tokenizer* tok = NULL;
    if (cfg.sample_every > 0) {
        if (file_exists(cfg.tokenizer_file)) {
            tokenizer_init(&tokenizer, cfg.tokenizer_file);
            if ((int)tokenizer.vocab_size >= mc.vocab_size) tok = &tokenizer;
            else tokenizer_free(&tokenizer);
        }
        if (tok == NULL) fprintf(stderr, "note: no tokenizer for this vocabulary at %s: samples print as token ids\n",
                                 cfg.tokenizer_file);
    }

    gpt2_allocate_activations(&model, B, T);
    printf("model: L=%d NH=%d C=%d V=%d (padded %d) maxT=%d, %zu parameters (%.1f MB)\n",
           mc.num_layers, mc.num_heads, mc.channels, mc.vocab_size, mc.padded_vocab_size,
           mc.max_seq_len, model.num_parameters, model.num_parameters * 4.0 / 1e6);
    printf("memory: parameters + gradients + AdamW m, v %.1f MB, activations + their gradients %.1f MB (B=%d, T=%d)\n",
           model.num_parameters * 16.0 / 1e6, model.num_activations * 8.0 / 1e6, B, T);
    printf("train: %s (%zu tokens, %zu batches)%s, val: %s\n", cfg.train_file,
           train_loader.num_tokens, train_loader.num_batches, cfg.shuffle ? " shuffled" : "",
           use_val ? cfg.val_file : "off");
    printf("steps %d, lr %g (warmup %d, final fraction %g), weight decay %g, seed %llu, threads %d\n",
           cfg.max_steps, cfg.learning_rate, cfg.warmup_steps, cfg.final_lr_frac, cfg.weight_decay,
           (unsigned long long)cfg.seed, num_threads());

    uint64_t sample_rng = seed_mix(cfg.seed, 0x5a3b1e, 0);
    int start_step = 0;
    if (resume_step >= 0) {
        model.m_memory = (float*)calloc_check(model.num_parameters, sizeof(float));
        model.v_memory = (float*)calloc_check(model.num_parameters, sizeof(float));
        snprintf(path, sizeof(path), "%s/state_%08d.bin", cfg.output_dir, resume_step);
        read_state(path, &state, model.m_memory, model.v_memory, model.num_parameters);
        if (state.B != B || state.T != T || state.step != resume_step) {
            fprintf(stderr, "error: %s was written by a run with B=%d T=%d at step %d; resume with the same -b and -t\n",
                    path, state.B, state.T, state.step);
            exit(1);
        }
        dataloader_seek(&train_loader, state.epoch, (size_t)state.batch_index);
        sample_rng = state.rng;
        start_step = resume_step;
        printf("resumed from %s/model_%08d.bin at step %d\n", cfg.output_dir, resume_step, resume_step);
    }

    // the output directory is made only now, once every input has been checked
    FILE* log = NULL;
    if (cfg.output_dir != NULL) {
        ensure_output_dir(cfg.output_dir);
        snprintf(path, sizeof(path), "%s/main.log", cfg.output_dir);
        if (resume_step < 0 && file_exists(path)) {
            fprintf(stderr, "error: %s already exists: resume that run with -y 1, or choose another -o\n", path);
            exit(1);
        }
        log = fopen_check(path, resume_step >= 0 ? "a" : "w");
    }

    if (use_val && start_step == 0) {
        float val_loss = gpt2_validate(&model, &val_loader, cfg.val_batches);
        printf("step %d: val loss %.6f\n", 0, val_loss);
        if (log) { fprintf(log, "s:%d tel:%f\n", 0, val_loss); fflush(log); }
    }

    double total_time = 0.0;
    int timed_steps = 0;
    for (int step = start_step + 1; step <= cfg.max_steps; step++) {
        double t0 = now_seconds();
        dataloader_next_batch(&train_loader);
        gpt2_forward(&model, train_loader.inputs, train_loader.targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        float norm = gpt2_clip_gradients(&model, 1.0f);
        check_step_finite(step, model.mean_loss, norm);
        float lr = learning_rate_at(&cfg, step);
        gpt2_update(&model, lr, 0.9f, 0.95f, 1e-8f, cfg.weight_decay, step);
        double dt = now_seconds() - t0;
        if (step > start_step + 1 || cfg.max_steps - start_step == 1) { total_time += dt; timed_steps++; }
        printf("step %4d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s\n", step,
               cfg.max_steps, model.mean_loss, norm, lr, dt * 1e3, B * T / dt);
        fflush(stdout);
        if (log) { fprintf(log, "s:%d trl:%f\n", step, model.mean_loss); fflush(log); }

        int last = step == cfg.max_steps;
        if (use_val && (step % cfg.val_every == 0 || last)) {
            float val_loss = gpt2_validate(&model, &val_loader, cfg.val_batches);
            printf("step %d: val loss %.6f\n", step, val_loss);
            if (log) { fprintf(log, "s:%d tel:%f\n", step, val_loss); fflush(log); }
        }
        if (cfg.sample_every > 0 && (step % cfg.sample_every == 0 || last)) {
            printf("--- sample at step %d ---\n", step);
            gpt2_sample_and_print(&model, tok, cfg.gen_tokens, &sample_rng);
            printf("---\n");
        }
        if (cfg.output_dir != NULL &&
            ((cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || last)) {
            snprintf(path, sizeof(path), "%s/model_%08d.bin", cfg.output_dir, step);
            gpt2_save_checkpoint(&model, path);
            state.step = step;
            state.B = B;
            state.T = T;
            state.epoch = train_loader.epoch;
            state.batch_index = train_loader.batch_index;
            state.rng = sample_rng;
            snprintf(path, sizeof(path), "%s/state_%08d.bin", cfg.output_dir, step);
            write_state(path, state, model.m_memory, model.v_memory, model.num_parameters);
            printf("wrote %s/model_%08d.bin and state_%08d.bin\n", cfg.output_dir, step, step);
        }
    }
    if (cfg.max_steps == 0 && cfg.output_dir != NULL) {  // -x 0: just write the initial model
        snprintf(path, sizeof(path), "%s/model_%08d.bin", cfg.output_dir, 0);
        gpt2_save_checkpoint(&model, path);
        printf("wrote %s\n", path);
    }
    if (timed_steps > 0) {
        printf("average %.1f ms per step, %.0f tok/s\n", total_time / timed_steps * 1e3,
               B * T * timed_steps / total_time);
    }

    if (log) fclose_check(log, "main.log");
    if (tok) tokenizer_free(tok);
    dataloader_free(&train_loader);
    if (use_val) dataloader_free(&val_loader);
    gpt2_free(&model);
    return 0;
}

#endif // TRAIN_CPU_NO_MAIN
#endif // TRAIN_CPU_C
