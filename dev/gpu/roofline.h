// dev/gpu/roofline.h: the roofline of one training step of train_gpu: every kernel (or launcher,
// where one operation is a few kernels) that a step runs, in the order it runs them, with what it
// must compute and move, and the least time a GPU could take for it.
//
// A kernel can go no faster than its arithmetic at the peak rate of the units that do it, nor than
// its bytes at the peak bandwidth of the memory they come from. Its floor is the larger of the two:
//     floor = max(FLOPs / peak FLOP/s, bytes / peak bytes/s)
// and the kernel is compute-bound when the first is larger, memory-bound when the second is. The
// step's floor is the sum of its kernels' floors (they run one after another on one stream), and
// B*T tokens over it is a ceiling on tokens per second that no implementation of these kernels on
// that GPU can pass.
//
// What is counted, per kernel:
//   FLOPs  the products' multiply-adds, 2 per term (2 M N K per matrix product; attention's over
//          the causal half, T(T+1)/2 (query, key) pairs per head, 2 hs per pair and product); for
//          the other kernels, the float32 operations per element read off their code, each exp or
//          tanh counted as one (ROOFLINE_OPS_... below).
//   bytes  compulsory DRAM traffic: every tensor the kernel (or its launcher's kernels) reads is
//          read once, every tensor it writes is written once, one it adds into is read and
//          written once; what one kernel of a launcher stores for the next (float32 attention's
//          T x T scores) is written once and read once. Scratch sums of a few MB at most between
//          two kernels of a launcher (column-sum partials, 1.6 MB for a layernorm backward at B=8;
//          flash attention's D) stay in the 50 MB L2 of an H100 and are not counted; nor are the
//          host copies (the batch in; the step's loss and norm out).
//   peak   the bf16 path's products and flash attention: the tensor cores; everything else, and
//          every kernel of the float32 path (its SGEMM and attention too): the CUDA cores.
//
// One source of truth: dev/gpu/roofline.c prints this table for doc/gpu.md (test/test_roofline.sh
// fails when the doc's copy differs), and `build/gpu_check roofline` times each row's launcher on
// a GPU and prints the table again beside the measured times. The rows follow train_gpu.cu's
// passes: a change there is a change here.

#ifndef DEV_GPU_ROOFLINE_H
#define DEV_GPU_ROOFLINE_H

#include <stdio.h>
#include "../../gpt2/model.h"

// ---------- peaks ----------

// H100 SXM5, NVIDIA's spec sheet: bf16 on the tensor cores, dense (the sheet's 1979 TFLOP/s is with
// 2:4 sparsity, twice the dense rate), float32 on the CUDA cores, HBM3 bandwidth.
#define H100_BF16_TENSOR_FLOPS 989e12
#define H100_FP32_FLOPS 67e12
#define H100_HBM_BYTES_PER_S 3.35e12

typedef struct {
    double tensor_flops;  // bf16 on the tensor cores, FLOP/s
    double cuda_flops;    // float32 on the CUDA cores, FLOP/s
    double bandwidth;     // DRAM, bytes/s
} RooflinePeaks;

static inline RooflinePeaks roofline_h100(void) {
    RooflinePeaks p = {H100_BF16_TENSOR_FLOPS, H100_FP32_FLOPS, H100_HBM_BYTES_PER_S};
    return p;
}

// ---------- the rows ----------

// Which launcher a row runs: build/gpu_check roofline calls it by this name.
typedef enum {
    OP_ZERO_GRADS, OP_ENCODER_FWD, OP_LN1_FWD, OP_QKV_FWD, OP_ATTENTION_FWD, OP_ATTPROJ_FWD,
    OP_RESIDUAL2_FWD, OP_LN2_FWD, OP_FC_FWD, OP_GELU_FWD, OP_FCPROJ_FWD, OP_RESIDUAL3_FWD, OP_LNF_FWD,
    OP_LOGITS_FWD, OP_CLASSIFIER, OP_MEAN_LOSS, OP_ZERO_ACT_GRADS, OP_LOGITS_BWD, OP_LNF_BWD, OP_RESIDUAL3_BWD,
    OP_FCPROJ_BWD, OP_GELU_BWD, OP_FC_BWD, OP_LN2_BWD, OP_RESIDUAL2_BWD, OP_ATTPROJ_BWD,
    OP_ATTENTION_BWD, OP_QKV_BWD, OP_LN1_BWD, OP_ENCODER_BWD, OP_GRAD_NORM, OP_ADAMW,
    NUM_ROOFLINE_OPS
} RooflineOp;

typedef enum { ON_CUDA_CORES, ON_TENSOR_CORES } RooflineUnit;

typedef struct {
    RooflineOp op;
    const char* what;      // the work, e.g. "qkv forward (+bias)"
    const char* launcher;  // the function train_gpu calls for it
    int count;             // calls per step: 1, or L for a layer's
    double flops, bytes;   // per call
    RooflineUnit unit;
    int product;           // 1: a matrix product (its FLOPs are 2 M N K per product, checked below)
} RooflineRow;

#define ROOFLINE_MAX_ROWS 40

typedef struct {
    GPT2Config config;
    int B, T, bf16;
    size_t num_parameters;
    int n;
    RooflineRow rows[ROOFLINE_MAX_ROWS];
} Roofline;

// Float32 operations per element of the kernels that are not products, read off their code
// (gpt2/gpu/: layernorm.cuh, elementwise.cuh, classifier.cuh, optimizer.cuh, gpt2/arithmetic.h).
// They decide nothing: every such kernel does under a fifth of the FLOPs per byte at which an
// H100's CUDA cores would become the limit (67 / 3.35 = 20), so their floor is their bytes.
#define ROOFLINE_OPS_LAYERNORM_FWD 8   // mean: 1; variance: 3; out = (x - m) s w + b: 4
#define ROOFLINE_OPS_LAYERNORM_BWD 19  // dinp: 6 for the two sums, 8 for the update; dweight, dbias: 5
#define ROOFLINE_OPS_GELU_FWD 9        // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), tanh as 1
#define ROOFLINE_OPS_GELU_BWD 20       // gelu_grad (tanh as 1), then dinp += dout * it
#define ROOFLINE_OPS_CLASSIFIER 9      // per real logit: max 1; sum of exp 3; gradient 5 (exp as 1)
#define ROOFLINE_OPS_ADAMW 17          // per parameter: the clip factor 1, m 4, v 5, the step 7 (sqrt as 1)

static inline void roofline_add(Roofline* r, RooflineOp op, const char* what, const char* launcher, int count,
                                double flops, double bytes, RooflineUnit unit, int product) {
    if (r->n == ROOFLINE_MAX_ROWS) fail("roofline: more than %d rows", ROOFLINE_MAX_ROWS);
    RooflineRow row = {op, what, launcher, count, flops, bytes, unit, product};
    r->rows[r->n++] = row;
}

// A linear layer's product out (N, OC) = inp (N, IC) weight (OC, IC)^T (+ bias (OC), float32), in
// activations of `act` bytes and weights of `wgt` bytes, plus `extra` bytes of its epilogue (a
// residual read, a pre-activation written).
static inline void roofline_linear_forward(Roofline* r, RooflineOp op, const char* what, const char* launcher,
                                           int count, double N, double IC, double OC, int bias, int act, int wgt,
                                           double extra) {
    double bytes = N * IC * act + OC * IC * wgt + (bias ? OC * 4 : 0) + N * OC * act + extra;
    roofline_add(r, op, what, launcher, count, 2 * N * IC * OC, bytes,
                 r->bf16 ? ON_TENSOR_CORES : ON_CUDA_CORES, 1);
}

// Its backward: dinp (N, IC) = dout weight, written (bf16) or added into (float32, read and
// written); dweight (OC, IC) += dout^T inp, float32, read and written; dbias (OC) += the column
// sums of dout. Two products of 2 N IC OC. `extra`: what the dinp product's epilogue reads.
static inline void roofline_linear_backward(Roofline* r, RooflineOp op, const char* what, const char* launcher,
                                            int count, double N, double IC, double OC, int bias, int act, int wgt,
                                            double extra) {
    double dinp = r->bf16 ? N * IC * act : 2 * N * IC * act;
    double bytes = N * OC * act + N * IC * act + OC * IC * wgt + dinp + 2 * OC * IC * 4 + (bias ? 2 * OC * 4 : 0) +
                   extra;
    roofline_add(r, op, what, launcher, count, 4 * N * IC * OC, bytes,
                 r->bf16 ? ON_TENSOR_CORES : ON_CUDA_CORES, 1);
}

// The activation gradients that the float32 backward pass clears before it starts, in floats:
// all of them but the logits' (the classifier writes them), the attention scores' (preatt, att:
// scratch, written before they are read) and the probabilities (never stored); as
// train_gpu.cu's gpt2_zero_activation_grads_gpu does, which returns the bytes it cleared
// (build/gpu_check roofline compares the two).
static inline size_t roofline_zeroed_activation_grads(GPT2Config c, int B, int T) {
    size_t sizes[NUM_ACTIVATION_TENSORS], layer[NUM_ACTIVATION_TENSORS], n = 0;
    activation_sizes(sizes, layer, c, B, T);
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        if (i != LOGITS && i != PROBS && i != PREATT && i != ATT) n += sizes[i];
    }
    return n;
}

// The rows of one step of train_gpu on one GPU, one micro-step of B x T, in float32 (bf16 = 0) or
// in bf16 (train_gpu.cu's gpt2_forward_gpu, gpt2_backward_gpu of each), then the step's end: the
// gradient norm, clipping, AdamW. A layer's rows count L calls each.
static inline void roofline_build(Roofline* r, GPT2Config c, int B, int T, int bf16) {
    memset(r, 0, sizeof(*r));
    r->config = c;
    r->B = B;
    r->T = T;
    r->bf16 = bf16;
    size_t psizes[NUM_PARAMETER_TENSORS], player[NUM_PARAMETER_TENSORS];
    parameter_sizes(psizes, player, c);
    r->num_parameters = sum_sizes(psizes, NUM_PARAMETER_TENSORS);
    double N = (double)B * T, C = c.channels, Vp = c.padded_vocab_size, V = c.vocab_size, P = (double)r->num_parameters;
    double NH = c.num_heads, hs = C / NH, pairs = (double)T * (T + 1) / 2, full = (double)T * T;
    int L = c.num_layers, a = bf16 ? 2 : 4, w = bf16 ? 2 : 4;  // bytes of an activation, of a weight matrix
    double NC = N * C, stats = 2 * N * 4;                      // a (B,T,C) tensor; layernorm's mean and rstd
#define BACKWARD (bf16 ? "matmul_backward_set_dinp_gpu" : "matmul_backward_gpu")  // the path's product backward

    roofline_add(r, OP_ZERO_GRADS, "zero the parameter gradients (cudaMemset)", "gpt2_zero_grad_gpu", 1, 0, P * 4,
                 ON_CUDA_CORES, 0);
    // ---- forward
    roofline_add(r, OP_ENCODER_FWD, "encoder forward (a float32 wte row per position)", "encoder_forward_gpu", 1, NC,
                 N * 4 + NC * 4 + (double)T * C * 4 + NC * a, ON_CUDA_CORES, 0);
    double ln_fwd_bytes = 2 * NC * a + 2 * C * 4 + stats;
    roofline_add(r, OP_LN1_FWD, "layernorm 1 forward", "layernorm_forward_gpu", L, ROOFLINE_OPS_LAYERNORM_FWD * NC,
                 ln_fwd_bytes, ON_CUDA_CORES, 0);
    roofline_linear_forward(r, OP_QKV_FWD, "qkv forward (+bias)", "matmul_forward_gpu", L, N, C, 3 * C, 1, a, w, 0);
    // attention: Q K^T and P V over the causal half; the float32 path keeps the (T, T) scores of
    // every (b, h): preatt's causal half written and read back by the softmax, which writes all
    // of att (zeros after the diagonal), whose causal half the P V product reads
    double heads = B * NH, att_fwd_flops = heads * pairs * 2 * (2 * hs);
    if (bf16) {
        roofline_add(r, OP_ATTENTION_FWD, "flash attention forward", "flash_attention_forward_gpu", L, att_fwd_flops,
                     3 * NC * a + NC * a + heads * T * 4, ON_TENSOR_CORES, 0);
    } else {
        roofline_add(r, OP_ATTENTION_FWD, "attention forward (stores T x T)", "attention_forward_gpu", L,
                     att_fwd_flops, 3 * NC * 4 + NC * 4 + heads * 4 * (pairs + pairs + full + pairs), ON_CUDA_CORES,
                     0);
    }
    if (bf16) {
        roofline_linear_forward(r, OP_ATTPROJ_FWD, "attproj forward (+bias +residual)", "matmul_residual_forward_gpu",
                                L, N, C, C, 1, a, w, NC * a);
    } else {
        roofline_linear_forward(r, OP_ATTPROJ_FWD, "attproj forward (+bias)", "matmul_forward_gpu", L, N, C, C, 1, a,
                                w, 0);
        roofline_add(r, OP_RESIDUAL2_FWD, "residual forward", "residual_forward_gpu", L, NC, 3 * NC * 4, ON_CUDA_CORES,
                     0);
    }
    roofline_add(r, OP_LN2_FWD, "layernorm 2 forward", "layernorm_forward_gpu", L, ROOFLINE_OPS_LAYERNORM_FWD * NC,
                 ln_fwd_bytes, ON_CUDA_CORES, 0);
    if (bf16) {
        roofline_linear_forward(r, OP_FC_FWD, "fc forward (+bias, GELU; keeps both)", "matmul_gelu_forward_gpu", L,
                                N, C, 4 * C, 1, a, w, 4 * NC * a);
        roofline_linear_forward(r, OP_FCPROJ_FWD, "fcproj forward (+bias +residual)", "matmul_residual_forward_gpu",
                                L, N, 4 * C, C, 1, a, w, NC * a);
    } else {
        roofline_linear_forward(r, OP_FC_FWD, "fc forward (+bias)", "matmul_forward_gpu", L, N, C, 4 * C, 1, a, w, 0);
        roofline_add(r, OP_GELU_FWD, "GELU forward", "gelu_forward_gpu", L, ROOFLINE_OPS_GELU_FWD * 4 * NC,
                     2 * 4 * NC * 4, ON_CUDA_CORES, 0);
        roofline_linear_forward(r, OP_FCPROJ_FWD, "fcproj forward (+bias)", "matmul_forward_gpu", L, N, 4 * C, C, 1,
                                a, w, 0);
        roofline_add(r, OP_RESIDUAL3_FWD, "residual forward", "residual_forward_gpu", L, NC, 3 * NC * 4, ON_CUDA_CORES,
                     0);
    }
    roofline_add(r, OP_LNF_FWD, "final layernorm forward", "layernorm_forward_gpu", 1, ROOFLINE_OPS_LAYERNORM_FWD * NC,
                 ln_fwd_bytes, ON_CUDA_CORES, 0);
    roofline_linear_forward(r, OP_LOGITS_FWD, "logits forward (lnf wte^T)", "matmul_forward_gpu", 1, N, C, Vp, 0, a,
                            w, 0);
    // softmax, loss and the loss's gradient, written over the logits (Vp columns, the padding 0)
    roofline_add(r, OP_CLASSIFIER, "fused classifier (softmax, loss, dlogits)", "fused_classifier_gpu", 1,
                 ROOFLINE_OPS_CLASSIFIER * N * V, 2 * N * Vp * a + N * 4 + N * 4, ON_CUDA_CORES, 0);
    // the losses' mean, kept on the GPU for the step's loss (read once, from L2 as often as not)
    roofline_add(r, OP_MEAN_LOSS, "mean loss (stays on the GPU)", "mean_loss_gpu", 1, N, N * 4, ON_CUDA_CORES, 0);
    // ---- backward
    double ln_bwd_bytes = 2 * NC * a + 2 * NC * a + C * 4 + stats + 2 * 2 * C * 4;
    if (!bf16) {
        roofline_add(r, OP_ZERO_ACT_GRADS, "zero the activation gradients", "gpt2_zero_activation_grads_gpu", 1, 0,
                     (double)roofline_zeroed_activation_grads(c, B, T) * 4, ON_CUDA_CORES, 0);
    }
    roofline_linear_backward(r, OP_LOGITS_BWD, "logits backward (dinp, dwte)", BACKWARD, 1, N, C, Vp, 0,
                             a, w, 0);
    if (bf16) {
        roofline_add(r, OP_ZERO_ACT_GRADS, "zero dresidual (in gpt2_backward_gpu)", "cudaMemset", 1, 0, NC * a,
                     ON_CUDA_CORES, 0);
    }
    roofline_add(r, OP_LNF_BWD, "final layernorm backward", "layernorm_backward_gpu", 1,
                 ROOFLINE_OPS_LAYERNORM_BWD * NC, ln_bwd_bytes, ON_CUDA_CORES, 0);
    if (bf16) {
        // dpre = (dout fcprojw) gelu'(pre): the forward's pre-activation read by the epilogue
        roofline_linear_backward(r, OP_FCPROJ_BWD, "fcproj backward (dinp with GELU', dweight, dbias)",
                                 "gelu_matmul_backward_set_dinp_gpu", L, N, 4 * C, C, 1, a, w, 4 * NC * a);
    } else {
        roofline_add(r, OP_RESIDUAL3_BWD, "residual backward", "residual_backward_gpu", L, 2 * NC, 5 * NC * 4,
                     ON_CUDA_CORES, 0);
        roofline_linear_backward(r, OP_FCPROJ_BWD, "fcproj backward (dinp, dweight, dbias)", "matmul_backward_gpu", L,
                                 N, 4 * C, C, 1, a, w, 0);
        roofline_add(r, OP_GELU_BWD, "GELU backward", "gelu_backward_gpu", L, ROOFLINE_OPS_GELU_BWD * 4 * NC,
                     4 * 4 * NC * 4, ON_CUDA_CORES, 0);
    }
    roofline_linear_backward(r, OP_FC_BWD, "fc backward (dinp, dweight, dbias)", BACKWARD, L, N, C,
                             4 * C, 1, a, w, 0);
    roofline_add(r, OP_LN2_BWD, "layernorm 2 backward", "layernorm_backward_gpu", L, ROOFLINE_OPS_LAYERNORM_BWD * NC,
                 ln_bwd_bytes, ON_CUDA_CORES, 0);
    if (!bf16) {
        roofline_add(r, OP_RESIDUAL2_BWD, "residual backward", "residual_backward_gpu", L, 2 * NC, 5 * NC * 4,
                     ON_CUDA_CORES, 0);
    }
    roofline_linear_backward(r, OP_ATTPROJ_BWD, "attproj backward (dinp, dweight, dbias)", BACKWARD, L,
                             N, C, C, 1, a, w, 0);
    if (bf16) {
        // 7 products per (query, key) pair: S and dP in the dK/dV kernel and again in the dQ
        // kernel, then dV, dK, dQ; reads qkv, out, dout, lse, writes dqkv
        roofline_add(r, OP_ATTENTION_BWD, "flash attention backward", "flash_attention_backward_set_dinp_gpu", L,
                     heads * pairs * 7 * (2 * hs), 3 * NC * a + NC * a + NC * a + heads * T * 4 + 3 * NC * a,
                     ON_TENSOR_CORES, 0);
    } else {
        // 4 products (dP, dV, dQ, dK) from the stored att: datt's causal half written and read,
        // all of dpreatt written (zeros after the diagonal), its causal half read; dqkv added into
        roofline_add(r, OP_ATTENTION_BWD, "attention backward (stores T x T)", "attention_backward_gpu", L,
                     heads * pairs * 4 * (2 * hs),
                     NC * 4 + 3 * NC * 4 + 2 * 3 * NC * 4 + heads * 4 * (pairs + pairs + pairs + full + pairs),
                     ON_CUDA_CORES, 0);
    }
    roofline_linear_backward(r, OP_QKV_BWD, "qkv backward (dinp, dweight, dbias)", BACKWARD, L, N, C,
                             3 * C, 1, a, w, 0);
    roofline_add(r, OP_LN1_BWD, "layernorm 1 backward", "layernorm_backward_gpu", L, ROOFLINE_OPS_LAYERNORM_BWD * NC,
                 ln_bwd_bytes, ON_CUDA_CORES, 0);
    // dwpe += the sum over b; dwte += each position's gradient into its token's row: counted as a
    // float32 row per position, read and written (a token that repeats touches its row once: fewer)
    roofline_add(r, OP_ENCODER_BWD, "encoder backward (dwte, dwpe)", "encoder_backward_gpu", 1, 2 * NC,
                 NC * a + N * 4 + 2 * (double)T * C * 4 + 2 * NC * 4, ON_CUDA_CORES, 0);
    // ---- the step's end
    // the norm and the clip factor stay on the GPU: AdamW multiplies each gradient by the factor
    // as it reads it, so clipping costs no pass of its own
    roofline_add(r, OP_GRAD_NORM, "gradient norm and clip factor", "gpt2_grad_norm_gpu", 1, 2 * P, P * 4,
                 ON_CUDA_CORES, 0);
    // AdamW reads the float32 parameters, gradients, m and v and writes the parameters, m and v;
    // the bf16 path also writes the bf16 copy of the parameters that the next step's passes read
    roofline_add(r, OP_ADAMW, bf16 ? "AdamW (x the clip factor; float32 master, writes the bf16 copy)" : "AdamW (x the clip factor)",
                 "gpt2_update_gpu", 1, ROOFLINE_OPS_ADAMW * P,
                 P * 7 * 4 + (bf16 ? P * 2 : 0), ON_CUDA_CORES, 0);
#undef BACKWARD
}

// ---------- floors ----------

static inline double roofline_peak_flops(const RooflineRow* row, RooflinePeaks p) {
    return row->unit == ON_TENSOR_CORES ? p.tensor_flops : p.cuda_flops;
}

// A row's floor for the whole step (all its calls), in seconds, and whether compute bounds it.
static inline double roofline_floor_s(const RooflineRow* row, RooflinePeaks p, int* compute_bound) {
    double compute = row->flops / roofline_peak_flops(row, p), memory = row->bytes / p.bandwidth;
    if (compute_bound != NULL) *compute_bound = compute > memory;
    return row->count * (compute > memory ? compute : memory);
}

typedef struct {
    double flops, bytes;        // per step
    double floor_s;             // per step: the sum of the rows' floors
    double compute_s, memory_s; // the part of it in compute-bound rows, in memory-bound rows
} RooflineTotals;

static inline RooflineTotals roofline_totals(const Roofline* r, RooflinePeaks p) {
    RooflineTotals t = {0, 0, 0, 0, 0};
    for (int i = 0; i < r->n; i++) {
        const RooflineRow* row = &r->rows[i];
        int compute;
        double s = roofline_floor_s(row, p, &compute);
        t.flops += row->count * row->flops;
        t.bytes += row->count * row->bytes;
        t.floor_s += s;
        if (compute) t.compute_s += s;
        else t.memory_s += s;
    }
    return t;
}

// ---------- the table, in markdown ----------

// One precision's table with the H100 SXM floors, then its totals.
static inline void roofline_print_markdown(const Roofline* r, FILE* out) {
    RooflinePeaks h100 = roofline_h100();
    fprintf(out, "| # | kernel | launcher | calls | GFLOP | GB | peak | floor ms | bound |\n");
    fprintf(out, "| ---: | --- | --- | ---: | ---: | ---: | --- | ---: | --- |\n");
    for (int i = 0; i < r->n; i++) {
        const RooflineRow* row = &r->rows[i];
        int compute;
        double s = roofline_floor_s(row, h100, &compute);
        fprintf(out, "| %d | %s | `%s` | %d | %.1f | %.3f | %s | %.3f | %s |\n", i + 1, row->what, row->launcher,
                row->count, row->count * row->flops / 1e9, row->count * row->bytes / 1e9,
                row->unit == ON_TENSOR_CORES ? "tensor" : "CUDA cores", s * 1e3, compute ? "compute" : "memory");
    }
    RooflineTotals t = roofline_totals(r, h100);
    double tokens = (double)r->B * r->T;
    fprintf(out, "| | **the step** | | | **%.1f** | **%.3f** | | **%.3f** | %.3f compute + %.3f memory |\n",
            t.flops / 1e9, t.bytes / 1e9, t.floor_s * 1e3, t.compute_s * 1e3, t.memory_s * 1e3);
    fprintf(out, "\nStep floor %.2f ms: at most %.0fK tokens/s (B x T = %.0f tokens a step).\n", t.floor_s * 1e3,
            tokens / t.floor_s / 1e3, tokens);
}

// The products' FLOPs must be those of the model's matrices: each weight matrix (the blocks' four
// and wte, the output layer) takes part in one product forward and two backward, 2 FLOPs per
// weight and token each, so 6 x matrix weights x tokens. A shape or count gone wrong in the rows
// above breaks this; returns 0 then, after saying so on stderr.
static inline int roofline_check(const Roofline* r) {
    size_t sizes[NUM_PARAMETER_TENSORS], layer[NUM_PARAMETER_TENSORS];
    parameter_sizes(sizes, layer, r->config);
    double matrices = (double)sizes[QKVW] + sizes[ATTPROJW] + sizes[FCW] + sizes[FCPROJW] + sizes[WTE];
    double expect = 6 * matrices * r->B * r->T, got = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->rows[i].product) got += r->rows[i].count * r->rows[i].flops;
    }
    if (got != expect) {
        fprintf(stderr, "roofline: the products' rows add up to %.6g FLOPs, 6 x matrix weights x tokens is %.6g\n",
                got, expect);
        return 0;
    }
    return 1;
}

#endif  // DEV_GPU_ROOFLINE_H
