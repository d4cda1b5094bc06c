// gpt2/cpu_layers.h: GPT-2's layers on the CPU, each a forward and backward pair: the definition
// of what the model computes, in plain C loops (train_cpu.c, infer.c; the GPU kernels are checked
// against them).
//
// name_forward(outputs, inputs, weights, sizes); name_backward(gradients it ADDS into (+=), dout,
// what forward saved, sizes): a tensor used twice (the residual stream, wte) collects both.
// Parallel loops split work over independent outputs only: the same thread count, the same bits.
// Shapes as llm.c: B batch, T time, C channels, NH heads, OC a linear layer's outputs, V the
// vocabulary, Vp V padded to a multiple of 128.

#ifndef GPT2_CPU_LAYERS_H
#define GPT2_CPU_LAYERS_H

#include <math.h>
#include "arithmetic.h"
#include "cpu_math.h"
#include "cpu_bf16.h"

// ---------- encoder: token and position embeddings ----------

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

// ---------- layernorm ----------
// The definition; the model calls layernorm_forward and layernorm_backward (after attention,
// below), which run layernorm_*_fast, the same arithmetic with its sums over a row in 16 lanes,
// unless the build says LAYERS_NAIVE.

// A row's output from its mean m and rstd s: (x - m) * s * weight + bias.
static inline void layernorm_row_out(float* o, const float* x, float m, float s,
                                     const float* weight, const float* bias, int C) {
    for (int i = 0; i < C; i++) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
}

// A row's dx += s * (g - mean(g) - n * mean(g * n)), with n = (x - m) * s and g = weight * dout.
static inline void layernorm_row_dx(float* dx, const float* x, const float* d, const float* weight,
                                    float m, float s, float g_mean, float gn_mean, int C) {
    for (int i = 0; i < C; i++) {
        float n = (x[i] - m) * s;
        float g = weight[i] * d[i];
        dx[i] += s * (g - g_mean - n * gn_mean);
    }
}

void layernorm_forward_naive(float* out, float* mean, float* rstd, const float* inp,
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
        layernorm_row_out(out + (size_t)bt * C, x, m, s, weight, bias, C);
        mean[bt] = m;
        rstd[bt] = s;
    }
}

void layernorm_backward_naive(float* dinp, float* dweight, float* dbias, const float* dout,
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
        layernorm_row_dx(dinp + (size_t)bt * C, x, d, weight, m, s, g_mean, gn_mean, C);
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

// ---------- matmul: the linear layers ----------
// The naive loops are the definition. The fast ones do the same arithmetic through
// gemm_accumulate (gpt2/cpu_math.h), arranged for caches and vector registers, and are tested
// against them (test/matmul_check.c). `make LAYERS=naive` runs the whole model on the naive
// loops: slow, but every product can be followed in a debugger.

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

// The products that read an operand in place rather than packing it are faster while B*T is
// small, where the pack they skip costs most; at thousands of rows the packed form wins
// (doc/cpu_speed.md). Either way the same bits.
#define MATMUL_IN_PLACE_ROWS 768

void matmul_forward_fast(float* out, const float* inp, const float* weight, const float* bias,
                         int B, int T, int C, int OC) {
    if (B * T <= MATMUL_IN_PLACE_ROWS) {   // out = bias + inp . weight^T, the weight read in place
        gemm_bias_weight_rows(out, OC, inp, C, weight, C, B * T, OC, C, bias);
    } else {
        gemm_bias(out, OC, inp, C, 1, weight, 1, C, B * T, OC, C, bias);
    }
}

// dinp += dout . weight, dout's rows read where they lie while they are few
static void matmul_dinp(float* dinp, const float* dout, const float* weight, int BT, int C, int OC) {
    if (BT <= MATMUL_IN_PLACE_ROWS) gemm_accumulate_a_rows(dinp, C, dout, OC, weight, C, 1, BT, C, OC);
    else gemm_accumulate(dinp, C, dout, OC, 1, weight, C, 1, BT, C, OC);
}

// dbias (OC) += column sums of dout (BT, OC): each thread its own columns, the rows in order (a
// fixed order, no races), dout read row by row (by columns, much slower: doc/cpu_speed.md).
static void matmul_dbias_rows(float* dbias, const float* dout, int BT, int OC) {
    #pragma omp parallel
    {
        size_t o0, o1;
        thread_share((size_t)OC, &o0, &o1);
        for (int bt = 0; bt < BT; bt++) {
            const float* d = dout + (size_t)bt * OC;
            for (size_t o = o0; o < o1; o++) dbias[o] += d[o];
        }
    }
}

void matmul_backward_fast(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int B, int T, int C, int OC) {
    int BT = B * T;
    matmul_dinp(dinp, dout, weight, BT, C, OC);                        // dinp += dout . weight
    gemm_accumulate(dweight, C, dout, 1, OC, inp, C, 1, OC, C, BT);    // dW += dout^T . inp
    if (dbias != NULL) matmul_dbias_rows(dbias, dout, BT, OC);
}

// matmul_backward_fast for the first backward pass after the gradients are zeroed: dW =
// dout^T . inp written, not added to what dweight holds (matmul_backward_set_dweight, below).
void matmul_backward_fast_set_dweight(float* dinp, float* dweight, float* dbias, const float* dout,
                                      const float* inp, const float* weight, int B, int T, int C, int OC) {
    int BT = B * T;
    matmul_dinp(dinp, dout, weight, BT, C, OC);                        // dinp += dout . weight
    gemm_bias(dweight, C, dout, 1, OC, inp, C, 1, OC, C, BT, NULL);    // dW = dout^T . inp
    if (dbias != NULL) matmul_dbias_rows(dbias, dout, BT, OC);
}

// The naive loops under LAYERS_NAIVE (`make LAYERS=naive`), the fast ones otherwise: one choice
// for the linear layer's every pass, float32 and bf16 alike.
typedef void matmul_forward_fn(float* out, const float* inp, const float* weight, const float* bias,
                               int B, int T, int C, int OC);
typedef void matmul_backward_fn(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, int B, int T, int C, int OC);

static void matmul_forward_pick(matmul_forward_fn* naive, matmul_forward_fn* fast, float* out,
                                const float* inp, const float* weight, const float* bias,
                                int B, int T, int C, int OC) {
#ifdef LAYERS_NAIVE
    (void)fast;
    naive(out, inp, weight, bias, B, T, C, OC);
#else
    (void)naive;
    fast(out, inp, weight, bias, B, T, C, OC);
#endif
}

// first: the first backward pass after the gradients are zeroed, where `fast` writes dweight;
// the naive loops add it to zeros, which is the definition.
static void matmul_backward_pick(matmul_backward_fn* naive, matmul_backward_fn* fast, int first,
                                 float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, int B, int T, int C, int OC) {
#ifdef LAYERS_NAIVE
    (void)fast;
    if (first) memset(dweight, 0, (size_t)OC * C * sizeof(float));
    naive(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
#else
    (void)naive, (void)first;
    fast(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
#endif
}

// out (B,T,OC) = inp (B,T,C) . weight (OC,C)^T + bias (OC); bias may be NULL
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    matmul_forward_pick(matmul_forward_naive, matmul_forward_fast,
                        out, inp, weight, bias, B, T, C, OC);
}

// dinp += dout . weight, dweight += dout^T . inp, dbias += column sums of dout (may be NULL)
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int B, int T, int C, int OC) {
    matmul_backward_pick(matmul_backward_naive, matmul_backward_fast, 0,
                         dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
}

// matmul_backward for the first backward pass after the gradients are zeroed (train_cpu.c:
// gpt2_zero_grad): dweight = dout^T . inp written, the bits of adding it to zeros, so the
// gradients need not be zeroed first nor read back. dinp and dbias are added to.
void matmul_backward_set_dweight(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, int B, int T, int C, int OC) {
    matmul_backward_pick(matmul_backward_naive, matmul_backward_fast_set_dweight, 1,
                         dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
}

// ---------- matmul with the weight packed once: generation ----------
// Generation multiplies each weight by a few rows at a time, where repacking it on every call
// costs as much as the product: pack_weight packs it once, at load, for matmul_forward_packed.
// Batch invariance: each element is computed exactly as matmul_forward computes it, whatever B*T
// is, wherever the row sits and whatever the thread count: a sequence's tokens do not depend on
// which others share its decode steps (test_matmul). Under LAYERS_NAIVE the "packing" is a copy
// and the product the naive loops, row-invariant too.

// Values that a weight (OC, C) packs into: the fast form's `fast`, or under LAYERS_NAIVE the
// weight's own layout, OC x C.
static size_t packed_size_pick(size_t fast, int C, int OC) {
#ifdef LAYERS_NAIVE
    (void)fast;
    return (size_t)OC * C;
#else
    (void)C, (void)OC;
    return fast;
#endif
}

// Floats that pack_weight writes for a weight (OC, C).
size_t packed_weight_size(int C, int OC) {
    return packed_size_pick(gemm_packed_size(C, OC), C, OC);   // the operand is weight^T, C x OC
}

// packed (packed_weight_size(C, OC) floats, 64-byte aligned) = weight (OC, C), packed.
void pack_weight(float* packed, const float* weight, int C, int OC) {
#ifdef LAYERS_NAIVE
    memcpy(packed, weight, (size_t)OC * C * sizeof(float));
#else
    gemm_pack_b(packed, weight, 1, C, C, OC);   // weight^T(k, o) = weight[o*C + k]
#endif
}

// out (B,T,OC) = inp (B,T,C) . weight (OC,C)^T + bias (OC), the weight packed by pack_weight;
// bias may be NULL. The same bits as matmul_forward.
void matmul_forward_packed(float* out, const float* inp, const float* packed_weight,
                           const float* bias, int B, int T, int C, int OC) {
#ifdef LAYERS_NAIVE
    matmul_forward_naive(out, inp, packed_weight, bias, B, T, C, OC);
#else
    gemm_bias_packed(out, OC, inp, C, 1, packed_weight, B * T, OC, C, bias);
#endif
}

// ---------- matmul in bf16: train_cpu -p bf16, infer -w bf16 ----------
// The linear layer with its products in bf16 (gpt2/cpu_bf16.h): inputs, weights and output
// gradients rounded to bf16 as the products read them, products exact, sums float32. The naive
// loops are the definition, as in float32; both keep cpu_bf16.h's contract (one fixed order of
// the sums per element: the same bits for any thread count, for a row whatever the other rows).

// The naive loops in bf16 are the float32 definition on operands rounded to bf16: a product of
// two bf16 values is exact in float32. x (n floats) rounded into a malloc'd copy.
static float* bf16_rounded_copy(const float* x, size_t n) {
    float* r = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) r[i] = bf16_round(x[i]);
    return r;
}

void matmul_forward_bf16_naive(float* out, const float* inp, const float* weight, const float* bias,
                               int B, int T, int C, int OC) {
    float* x = bf16_rounded_copy(inp, (size_t)B * T * C);
    float* w = bf16_rounded_copy(weight, (size_t)OC * C);
    matmul_forward_naive(out, x, w, bias, B, T, C, OC);
    free(x);
    free(w);
}

void matmul_backward_bf16_naive(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, int B, int T, int C, int OC) {
    float* d = bf16_rounded_copy(dout, (size_t)B * T * OC);
    float* x = bf16_rounded_copy(inp, (size_t)B * T * C);
    float* w = bf16_rounded_copy(weight, (size_t)OC * C);
    matmul_backward_naive(dinp, dweight, NULL, d, x, w, B, T, C, OC);
    free(d);
    free(x);
    free(w);
    if (dbias == NULL) return;
    #pragma omp parallel for
    for (int o = 0; o < OC; o++) {   // dbias (OC) += sum over rows of dout, not rounded
        float db = 0.0f;
        for (int bt = 0; bt < B * T; bt++) db += dout[(size_t)bt * OC + o];
        dbias[o] += db;
    }
}

void matmul_forward_bf16_fast(float* out, const float* inp, const float* weight, const float* bias,
                              int B, int T, int C, int OC) {
    gemm_bias_bf16(out, OC, inp, C, 1, weight, 1, C, B * T, OC, C, bias);   // out = bias + inp . weight^T
}

void matmul_backward_bf16_fast(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int B, int T, int C, int OC) {
    int BT = B * T;
    gemm_accumulate_bf16(dinp, C, dout, OC, 1, weight, C, 1, BT, C, OC);   // dinp += dout . weight
    gemm_accumulate_bf16(dweight, C, dout, 1, OC, inp, C, 1, OC, C, BT);   // dW += dout^T . inp
    if (dbias != NULL) matmul_dbias_rows(dbias, dout, BT, OC);
}

// matmul_backward_bf16_fast for the first backward pass after the gradients are zeroed: dW
// written, not added to (matmul_backward_set_dweight, in float32).
void matmul_backward_bf16_fast_set_dweight(float* dinp, float* dweight, float* dbias, const float* dout,
                                           const float* inp, const float* weight, int B, int T, int C, int OC) {
    int BT = B * T;
    gemm_accumulate_bf16(dinp, C, dout, OC, 1, weight, C, 1, BT, C, OC);   // dinp += dout . weight
    gemm_bias_bf16(dweight, C, dout, 1, OC, inp, C, 1, OC, C, BT, NULL);   // dW = dout^T . inp
    if (dbias != NULL) matmul_dbias_rows(dbias, dout, BT, OC);
}

// out (B,T,OC) = bf16(inp) . bf16(weight)^T + bias (OC); bias may be NULL
void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias,
                         int B, int T, int C, int OC) {
    matmul_forward_pick(matmul_forward_bf16_naive, matmul_forward_bf16_fast,
                        out, inp, weight, bias, B, T, C, OC);
}

// dinp += bf16(dout) . bf16(weight), dweight += bf16(dout)^T . bf16(inp), dbias += column sums
// of dout (float32; may be NULL)
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int B, int T, int C, int OC) {
    matmul_backward_pick(matmul_backward_bf16_naive, matmul_backward_bf16_fast, 0,
                         dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
}

// matmul_backward_bf16 for the first backward pass: dweight written (matmul_backward_set_dweight).
void matmul_backward_bf16_set_dweight(float* dinp, float* dweight, float* dbias, const float* dout,
                                      const float* inp, const float* weight, int B, int T, int C, int OC) {
    matmul_backward_pick(matmul_backward_bf16_naive, matmul_backward_bf16_fast_set_dweight, 1,
                         dinp, dweight, dbias, dout, inp, weight, B, T, C, OC);
}

// The weight packed once, as pack_weight and matmul_forward_packed in float32. Under LAYERS_NAIVE
// the "packing" is the weight rounded to bf16 in its own layout, and the product the naive loops.

// bf16 values that pack_weight_bf16 writes for a weight (OC, C).
size_t packed_weight_size_bf16(int C, int OC) {
    return packed_size_pick(gemm_packed_size_bf16(C, OC), C, OC);
}

// packed (packed_weight_size_bf16(C, OC) values, 64-byte aligned) = weight (OC, C) rounded to
// bf16, packed.
void pack_weight_bf16(bf16_t* packed, const float* weight, int C, int OC) {
#ifdef LAYERS_NAIVE
    for (size_t i = 0; i < (size_t)OC * C; i++) packed[i] = bf16_from_float(weight[i]);
#else
    gemm_pack_b_bf16(packed, weight, 1, C, C, OC);   // weight^T(k, o) = weight[o*C + k]
#endif
}

// out (B,T,OC) = bf16(inp) . weight^T + bias, the weight packed by pack_weight_bf16; bias may be
// NULL. The same bits as matmul_forward_bf16 on the weight it was packed from.
void matmul_forward_packed_bf16(float* out, const float* inp, const bf16_t* packed_weight,
                                const float* bias, int B, int T, int C, int OC) {
#ifdef LAYERS_NAIVE
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        for (int o = 0; o < OC; o++) {
            const bf16_t* w = packed_weight + (size_t)o * C;
            float val = bias != NULL ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) val += bf16_round(x[i]) * bf16_to_float(w[i]);
            out[(size_t)bt * OC + o] = val;
        }
    }
#else
    gemm_bias_packed_bf16(out, OC, inp, C, 1, packed_weight, B * T, OC, C, bias);
#endif
}

// ---------- attention ----------

// y[i] += sum over r < rows of (w[r * ws] * wscale) * x[r * xs + i], r in order, one multiply-add
// at a time as `for r: for i: y[i] += g * x[...]` does, with y held in registers W floats at a
// time (the compiler must assume a store to y changes x). The same bits; wscale = 1 is exact.
#define AXPY_SUM_CHUNK(W)                                                          \
    for (; i + (W) <= n; i += (W)) {                                               \
        float acc[W];                                                              \
        memcpy(acc, y + i, sizeof(acc));                                           \
        for (int r = 0; r < rows; r++) {                                           \
            float g = w[(size_t)r * ws] * wscale;                                  \
            const float* xr = x + (size_t)r * xs + i;                              \
            for (int j = 0; j < (W); j++) acc[j] += g * xr[j];                     \
        }                                                                          \
        memcpy(y + i, acc, sizeof(acc));                                           \
    }
static inline void axpy_sum(float* y, const float* w, size_t ws, float wscale, const float* x, size_t xs,
                            int rows, int n) {
    int i = 0;
    AXPY_SUM_CHUNK(64)   // a head of 64 in four vector registers
    AXPY_SUM_CHUNK(16)
    AXPY_SUM_CHUNK(1)
}
#undef AXPY_SUM_CHUNK

void attention_forward_naive(float* out, float* preatt, float* att, const float* inp,
                             int B, int T, int C, int NH) {
    // inp (B,T,3C) holds query, key, value for each position; out (B,T,C).
    // preatt, att (B,NH,T,T): scores before and after the causal softmax (saved for backward).
    int C3 = 3 * C;
    int hs = C / NH;
    float scale = attention_scale(hs);
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
                    float s = dot_lanes(q, k, hs) * scale;   // q . k (gpt2/cpu_math.h)
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
                axpy_sum(o, a, 1, 1.0f, inp + (size_t)b * T * C3 + 2 * C + h * hs, C3, t + 1, hs);
            }
        }
    }
}

void attention_backward_naive(float* dinp, float* dpreatt, float* datt, const float* dout,
                              const float* inp, const float* att, int B, int T, int C, int NH) {
    // dinp (B,T,3C) += gradients of query, key, value. One (batch, head) pair touches only its own
    // slice of dinp, so the pairs run in parallel without races.
    int C3 = 3 * C;
    int hs = C / NH;
    float scale = attention_scale(hs);
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* q = inp + (size_t)b * T * C3 + h * hs;   // row t at q + t * C3
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* dq = dinp + (size_t)b * T * C3 + h * hs;
            float* dk = dq + C;
            float* dv = dq + 2 * C;
            const float* d = dout + (size_t)b * T * C + h * hs;  // row t at d + t * C
            const float* a = att + ((size_t)b * NH + h) * T * T;  // row t at a + t * T
            float* da = datt + ((size_t)b * NH + h) * T * T;
            float* dpre = dpreatt + ((size_t)b * NH + h) * T * T;
            for (int t = 0; t < T; t++) {
                // through out = att . value: datt[t][t2] = value[t2] . dout[t]
                for (int t2 = 0; t2 <= t; t2++) da[t * T + t2] += dot_lanes(v + (size_t)t2 * C3, d + (size_t)t * C, hs);
                // through the softmax: dpre = att * (datt - sum(att * datt))
                float dot = dot_lanes(a + t * T, da + t * T, t + 1);
                for (int t2 = 0; t2 <= t; t2++) dpre[t * T + t2] += a[t * T + t2] * (da[t * T + t2] - dot);
            }
            // through the scores q . k * scale: dq[t] gets dpre[t][t2] * scale * k[t2] for t2 <= t
            for (int t = 0; t < T; t++) axpy_sum(dq + (size_t)t * C3, dpre + t * T, 1, scale, k, C3, t + 1, hs);
            // dk[t2] gets dpre[t][t2] * scale * q[t] and dv[t2] att[t][t2] * dout[t], for t >= t2 in order
            for (int t2 = 0; t2 < T; t2++) {
                axpy_sum(dk + (size_t)t2 * C3, dpre + t2 * T + t2, T, scale, q + (size_t)t2 * C3, C3, T - t2, hs);
                axpy_sum(dv + (size_t)t2 * C3, a + t2 * T + t2, T, 1.0f, d + (size_t)t2 * C, C, T - t2, hs);
            }
        }
    }
}

// The products of attention as matrix products of one (batch, head) pair (rows T x hs, C3 apart;
// scores T x T), each on the calling thread: gemm_block on this thread's packing buffers.
typedef struct {
    float* packed_a;   // MC_PAD x KC floats at most
    float* packed_b;   // KC x NC floats at most
    float* scratch;    // T x T floats
} AttentionBuffers;

static AttentionBuffers attention_buffers(int T, int hs) {
    int k = mm_min(T > hs ? T : hs, MM_KC);
    size_t a_floats = ((size_t)MM_MC_PAD * k + 15) / 16 * 16;
    size_t b_floats = ((size_t)k * mm_packed_width(mm_min(T > hs ? T : hs, MM_NC)) + 15) / 16 * 16;
    float* buf = mm_scratch(a_floats + b_floats + (size_t)T * T);   // this thread's
    AttentionBuffers ab = {buf, buf + a_floats, buf + a_floats + b_floats};
    return ab;
}

// C (M x N, row stride ldc) = A . B (set) or += A . B, A and B addressed as in gemm_accumulate.
static void attention_product(const AttentionBuffers* ab, float* c, size_t ldc, const float* a, size_t rsa,
                              size_t csa, const float* b, size_t rsb, size_t csb, int M, int N, int K, int set) {
    mm_operand op = {b, rsb, csb, NULL, 0, set, NULL, 0, 0};
    gemm_block(c, ldc, a, rsa, csa, &op, 0, M, N, K, ab->packed_a, ab->packed_b);
}

void attention_forward_fast(float* out, float* preatt, float* att, const float* inp,
                            int B, int T, int C, int NH) {
    int C3 = 3 * C;
    int hs = C / NH;
    float scale = attention_scale(hs);
    #pragma omp parallel
    {
        AttentionBuffers ab = attention_buffers(T, hs);
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float* q = inp + (size_t)b * T * C3 + h * hs;   // row t at q + t * C3
                const float* k = q + C;
                const float* v = q + 2 * C;
                float* pre = preatt + ((size_t)b * NH + h) * T * T;
                float* a = att + ((size_t)b * NH + h) * T * T;
                // the scores of every query against every key: pre = q . k^T
                attention_product(&ab, pre, T, q, C3, 1, k, 1, C3, T, T, hs, 1);
                for (int t = 0; t < T; t++) {   // row t's softmax over keys 0..t, in loops that vectorise
                    float* pr = pre + (size_t)t * T;
                    float* ar = a + (size_t)t * T;
                    for (int t2 = 0; t2 <= t; t2++) pr[t2] *= scale;
                    float maxval = max_lanes(pr, t + 1);
                    for (int t2 = 0; t2 <= t; t2++) ar[t2] = EXP_FAST(pr[t2] - maxval);
                    float sum = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) sum += ar[t2];
                    float inv = 1.0f / sum;
                    for (int t2 = 0; t2 <= t; t2++) ar[t2] *= inv;
                    for (int t2 = t + 1; t2 < T; t2++) {
                        pr[t2] = 0.0f;
                        ar[t2] = 0.0f;
                    }
                }
                // out = att . value (the masked zeros add nothing)
                attention_product(&ab, out + (size_t)b * T * C + h * hs, C, a, T, 1, v, C3, 1, T, hs, T, 1);
            }
        }
    }
}

void attention_backward_fast(float* dinp, float* dpreatt, float* datt, const float* dout,
                             const float* inp, const float* att, int B, int T, int C, int NH) {
    int C3 = 3 * C;
    int hs = C / NH;
    float scale = attention_scale(hs);
    #pragma omp parallel
    {
        AttentionBuffers ab = attention_buffers(T, hs);
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float* q = inp + (size_t)b * T * C3 + h * hs;
                const float* k = q + C;
                const float* v = q + 2 * C;
                float* dq = dinp + (size_t)b * T * C3 + h * hs;
                float* dk = dq + C;
                float* dv = dq + 2 * C;
                const float* d = dout + (size_t)b * T * C + h * hs;
                const float* a = att + ((size_t)b * NH + h) * T * T;
                float* da = datt + ((size_t)b * NH + h) * T * T;
                float* dpre = dpreatt + ((size_t)b * NH + h) * T * T;
                float* ds = ab.scratch;
                // through out = att . value: datt += dout . value^T
                attention_product(&ab, da, T, d, C, 1, v, 1, C3, T, T, hs, 0);
                for (int t = 0; t < T; t++) {
                    float dot = dot_lanes(a + t * T, da + t * T, t + 1);
                    for (int t2 = 0; t2 <= t; t2++) dpre[t * T + t2] += a[t * T + t2] * (da[t * T + t2] - dot);
                    for (int t2 = 0; t2 < T; t2++) ds[t * T + t2] = t2 <= t ? dpre[t * T + t2] * scale : 0.0f;
                }
                attention_product(&ab, dq, C3, ds, T, 1, k, C3, 1, T, hs, T, 0);   // dq += ds . key
                attention_product(&ab, dk, C3, ds, 1, T, q, C3, 1, T, hs, T, 0);   // dk += ds^T . query
                attention_product(&ab, dv, C3, a, 1, T, d, C, 1, T, hs, T, 0);     // dv += att^T . dout
            }
        }
    }
}

void attention_forward(float* out, float* preatt, float* att, const float* inp,
                       int B, int T, int C, int NH) {
#ifdef LAYERS_NAIVE
    attention_forward_naive(out, preatt, att, inp, B, T, C, NH);
#else
    attention_forward_fast(out, preatt, att, inp, B, T, C, NH);
#endif
}

void attention_backward(float* dinp, float* dpreatt, float* datt, const float* dout,
                        const float* inp, const float* att, int B, int T, int C, int NH) {
#ifdef LAYERS_NAIVE
    attention_backward_naive(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH);
#else
    attention_backward_fast(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH);
#endif
}

// ---------- layernorm in lanes ----------
// layernorm_*_naive's arithmetic with a row's sums (the mean, the variance, the backward's two
// means) in 16 lanes, lane j the terms i = j mod 16, added in lanes_total's fixed tree: the same
// bits on any thread count, within rounding of the plain loop (test_vs_pytorch, gradcheck).
// dweight and dbias sum down the rows in row order, 64 channels at a time in the vectors.

void layernorm_forward_fast(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int B, int T, int C) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        float sum[16] = {0.0f}, sq[16] = {0.0f};
        int i0 = C / 16 * 16;
        for (int i = 0; i < i0; i += 16) {
            for (int j = 0; j < 16; j++) sum[j] += x[i + j];
        }
        for (int i = i0; i < C; i++) sum[i - i0] += x[i];
        float m = lanes_total(sum) / C;
        for (int i = 0; i < i0; i += 16) {
            for (int j = 0; j < 16; j++) {
                float d = x[i + j] - m;
                sq[j] += d * d;
            }
        }
        for (int i = i0; i < C; i++) {
            float d = x[i] - m;
            sq[i - i0] += d * d;
        }
        float v = lanes_total(sq) / C;
        float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
        layernorm_row_out(out + (size_t)bt * C, x, m, s, weight, bias, C);
        mean[bt] = m;
        rstd[bt] = s;
    }
}

void layernorm_backward_fast(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int B, int T, int C) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        const float* d = dout + (size_t)bt * C;
        float m = mean[bt], s = rstd[bt];
        float g_sum[16] = {0.0f}, gn_sum[16] = {0.0f};
        int i0 = C / 16 * 16;
        for (int i = 0; i < i0; i += 16) {
            for (int j = 0; j < 16; j++) {
                float n = (x[i + j] - m) * s;
                float g = weight[i + j] * d[i + j];
                g_sum[j] += g;
                gn_sum[j] += g * n;
            }
        }
        for (int i = i0; i < C; i++) {
            float n = (x[i] - m) * s;
            float g = weight[i] * d[i];
            g_sum[i - i0] += g;
            gn_sum[i - i0] += g * n;
        }
        float g_mean = lanes_total(g_sum) / C, gn_mean = lanes_total(gn_sum) / C;
        layernorm_row_dx(dinp + (size_t)bt * C, x, d, weight, m, s, g_mean, gn_mean, C);
    }
    int chunks = (C + 63) / 64;
    #pragma omp parallel for
    for (int c = 0; c < chunks; c++) {
        int i0 = c * 64, w = C - i0 < 64 ? C - i0 : 64;
        float dw[64] = {0.0f}, db[64] = {0.0f};
        for (int bt = 0; bt < B * T; bt++) {
            const float* x = inp + (size_t)bt * C + i0;
            const float* d = dout + (size_t)bt * C + i0;
            float m = mean[bt], s = rstd[bt];
            for (int j = 0; j < w; j++) {
                float n = (x[j] - m) * s;
                dw[j] += n * d[j];
                db[j] += d[j];
            }
        }
        for (int j = 0; j < w; j++) {
            dweight[i0 + j] += dw[j];
            dbias[i0 + j] += db[j];
        }
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int B, int T, int C) {
#ifdef LAYERS_NAIVE
    layernorm_forward_naive(out, mean, rstd, inp, weight, bias, B, T, C);
#else
    layernorm_forward_fast(out, mean, rstd, inp, weight, bias, B, T, C);
#endif
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int B, int T, int C) {
#ifdef LAYERS_NAIVE
    layernorm_backward_naive(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C);
#else
    layernorm_backward_fast(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C);
#endif
}

// ---------- GELU and the residual add ----------

void gelu_forward(float* out, const float* inp, int N) {
    // the tanh approximation of GELU, as GPT-2 uses it (gpt2/arithmetic.h)
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = gelu_of(x, TANH_FAST(gelu_tanh_arg(x)));
    }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int N) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        float x = inp[i];
        dinp[i] += dout[i] * gelu_grad_of(x, TANH_FAST(gelu_tanh_arg(x)));
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
        // EXP_FAST (gpt2/cpu_math.h) and 16 running sums (i mod 16, a fixed order) let this vectorise;
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

// The three above in one pass over each position's logits, as train_gpu's classifier: the loss
// log(sum) - (x[target] - max), and dlogits = (p - onehot(target)) * dloss written, padding 0.
// Each row's exponentials wait in its dlogits row (in L2) until the sum is known. dlogits may be
// logits itself: the target's logit is read first, every other element before it is written.
// The bits of softmax_forward and crossentropy_softmax_backward.
void crossentropy_softmax_fused(float* dlogits, float* losses, const float* logits, const int* targets,
                                float dloss, int B, int T, int V, int Vp) {
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = logits + (size_t)bt * Vp;
        float* dx = dlogits + (size_t)bt * Vp;
        int target = targets[bt];
        float x_target = x[target];
        float maxval = max_lanes(x, V);   // gpt2/cpu_math.h
        // 16 running sums (i mod 16), as softmax_forward, in a vector register where the compiler
        // has vector types (GCC kept an array in memory, on the critical path)
        float lanes[16] = {0.0f};
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(MATMUL_PLAIN_C)
        dot_vec16 sums = {0}, e;
#endif
        int i = 0;
        for (; i + 16 <= V; i += 16) {
            float ex[16];
            for (int j = 0; j < 16; j++) ex[j] = EXP_FAST(x[i + j] - maxval);
            memcpy(dx + i, ex, sizeof(ex));
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(MATMUL_PLAIN_C)
            memcpy(&e, ex, sizeof(ex));
            sums += e;
#else
            for (int j = 0; j < 16; j++) lanes[j] += ex[j];
#endif
        }
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(MATMUL_PLAIN_C)
        memcpy(lanes, &sums, sizeof(lanes));
#endif
        for (; i < V; i++) {
            dx[i] = EXP_FAST(x[i] - maxval);
            lanes[0] += dx[i];
        }
        float sum = 0.0f;
        for (int j = 0; j < 16; j++) sum += lanes[j];
        losses[bt] = logf(sum) - (x_target - maxval);
        float inv = 1.0f / sum;
        float p_target = dx[target] * inv;
        for (i = 0; i < V; i++) dx[i] = dx[i] * inv * dloss;   // (p - 0) * dloss
        dx[target] = (p_target - 1.0f) * dloss;
        for (i = V; i < Vp; i++) dx[i] = 0.0f;
    }
}

#endif // GPT2_CPU_LAYERS_H
