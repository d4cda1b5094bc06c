// gpt2/model.h: the GPT-2 model: its shape, its tensors and where each lives in memory, GPT-2's
// initialisation, and the forward and backward pass as calls to its layers, written once.
//
//   x = wte[token] + wpe[position]                       encoder
//   for each of L blocks:                                 (block_forward below)
//       x = x + attproj(attention(qkv(layernorm1(x))))    causal, NH heads, scores / sqrt(C/NH)
//       x = x + fcproj(gelu(fc(layernorm2(x))))           MLP of width 4C
//   logits = layernorm_f(x) . wte^T                       output layer tied to the embedding
//
// The layers themselves belong to a device. train_cpu.c passes the C loops of gpt2/cpu_layers.h
// in a Layers table, train_gpu.cu the launchers of its CUDA kernels, which have the same
// signatures on device pointers; the forward and backward passes below are the same for both.
// Shapes follow llm.c: B batch, T sequence length, C channels, NH heads, L layers, V vocabulary,
// Vp the vocabulary padded to a multiple of 128, maxT the longest context.

#ifndef GPT2_MODEL_H
#define GPT2_MODEL_H

#include <math.h>
#include "io.h"
#include "random.h"

// ---------- the shape ----------

typedef struct {
    int max_seq_len;        // maxT, the longest context
    int vocab_size;         // V
    int padded_vocab_size;  // Vp, V rounded up to a multiple of 128
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// A shape from its six numbers, in the order llm.c's checkpoint header holds them (but Vp last).
static inline GPT2Config gpt2_config(int maxT, int V, int L, int NH, int C, int Vp) {
    GPT2Config c;
    c.max_seq_len = maxT;
    c.vocab_size = V;
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    c.padded_vocab_size = Vp;
    return c;
}

// Checks a shape read from a file or built from flags; `where` names its source in the error.
static inline void gpt2_check_config(GPT2Config c, const char* where) {
    if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
        c.channels <= 0 || c.padded_vocab_size < c.vocab_size) {
        fail("%s: invalid model shape (maxT=%d V=%d Vp=%d L=%d NH=%d C=%d)", where, c.max_seq_len,
             c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
    }
    if (c.channels % c.num_heads != 0) {
        fail("%s: channels C=%d are not divisible by heads NH=%d", where, c.channels, c.num_heads);
    }
    if (c.max_seq_len > 1 << 20 || c.vocab_size > 1 << 24 || c.num_layers > 1024 || c.channels > 1 << 16) {
        fail("%s: model shape too large to be real (maxT=%d V=%d L=%d C=%d)", where, c.max_seq_len,
             c.vocab_size, c.num_layers, c.channels);
    }
}

// dN: N layers, N heads of 64 channels (C = 64N), GPT-2's vocabulary and context. d12, d24,
// d36 and d48 are the four GPT-2 sizes (124M, 350M, 774M, 1558M).
static inline GPT2Config gpt2_config_for_depth(int depth) {
    int C = 64 * depth, NH = depth;
    switch (depth) {
        case 12: C = 768; NH = 12; break;
        case 24: C = 1024; NH = 16; break;
        case 36: C = 1280; NH = 20; break;
        case 48: C = 1600; NH = 25; break;
    }
    return gpt2_config(1024, GPT2_VOCAB, depth, NH, C, 50304);
}

// ---------- the parameters ----------
// 16 tensors, in the order of the checkpoint file. Each is one field of ParameterTensors, and
// the same order indexes the tables below (the enum names the indices).

enum {
    WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB,
    LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB, NUM_PARAMETER_TENSORS
};

typedef struct {
    float* wte;       // (Vp, C)  token embeddings; also the output layer
    float* wpe;       // (maxT, C) position embeddings
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

// The struct is walked as an array of NUM_PARAMETER_TENSORS pointers (point_tensors, layer_views):
// a field added without its enum entry fails to compile here.
typedef char parameter_tensors_match_the_enum
    [sizeof(ParameterTensors) == NUM_PARAMETER_TENSORS * sizeof(float*) ? 1 : -1];

// How GPT-2 initialises a tensor (gpt2_build_fresh).
typedef enum { INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_NORMAL_RESIDUAL } ParameterInit;

typedef struct {
    const char* name;
    int decay;           // 1: AdamW's weight decay applies (the matrices, not biases or layernorms)
    ParameterInit init;
} ParameterSpec;

static const ParameterSpec PARAMETERS[NUM_PARAMETER_TENSORS] = {
    {"wte", 1, INIT_NORMAL},      {"wpe", 1, INIT_NORMAL},
    {"ln1w", 0, INIT_ONES},       {"ln1b", 0, INIT_ZEROS},
    {"qkvw", 1, INIT_NORMAL},     {"qkvb", 0, INIT_ZEROS},
    {"attprojw", 1, INIT_NORMAL_RESIDUAL}, {"attprojb", 0, INIT_ZEROS},
    {"ln2w", 0, INIT_ONES},       {"ln2b", 0, INIT_ZEROS},
    {"fcw", 1, INIT_NORMAL},      {"fcb", 0, INIT_ZEROS},
    {"fcprojw", 1, INIT_NORMAL_RESIDUAL}, {"fcprojb", 0, INIT_ZEROS},
    {"lnfw", 0, INIT_ONES},       {"lnfb", 0, INIT_ZEROS},
};

// sizes[i]: the floats of tensor i; layer[i]: the floats of one layer's slice of it, 0 for the
// four tensors that are not per layer (wte, wpe, lnfw, lnfb).
static inline void parameter_sizes(size_t* sizes, size_t* layer, GPT2Config c) {
    size_t Vp = c.padded_vocab_size, C = c.channels, maxT = c.max_seq_len, L = c.num_layers;
    memset(layer, 0, NUM_PARAMETER_TENSORS * sizeof(size_t));
    layer[LN1W] = C;
    layer[LN1B] = C;
    layer[QKVW] = 3 * C * C;
    layer[QKVB] = 3 * C;
    layer[ATTPROJW] = C * C;
    layer[ATTPROJB] = C;
    layer[LN2W] = C;
    layer[LN2B] = C;
    layer[FCW] = 4 * C * C;
    layer[FCB] = 4 * C;
    layer[FCPROJW] = C * 4 * C;
    layer[FCPROJB] = C;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) sizes[i] = L * layer[i];
    sizes[WTE] = Vp * C;
    sizes[WPE] = maxT * C;
    sizes[LNFW] = C;
    sizes[LNFB] = C;
}

// ---------- the activations ----------
// What the forward pass keeps for the backward pass, 23 tensors laid out for the B and T of the
// pass. Their gradients have the same layout.

enum {
    ENCODED, LN1, LN1_MEAN, LN1_RSTD, QKV, ATTY, PREATT, ATT, ATTPROJ, RESIDUAL2, LN2, LN2_MEAN,
    LN2_RSTD, FCH, FCH_GELU, FCPROJ, RESIDUAL3, LNF, LNF_MEAN, LNF_RSTD, LOGITS, PROBS, LOSSES,
    NUM_ACTIVATION_TENSORS
};

typedef struct {
    float* encoded;    // (B, T, C)   wte[token] + wpe[position]: the residual stream into block 0
    float* ln1;        // (L, B, T, C)
    float* ln1_mean;   // (L, B, T)
    float* ln1_rstd;   // (L, B, T)
    float* qkv;        // (L, B, T, 3*C)  query, key, value of every head
    float* atty;       // (L, B, T, C)    attention output, heads side by side
    float* preatt;     // (L, B, NH, T, T) scores before the softmax
    float* att;        // (L, B, NH, T, T) after it
    float* attproj;    // (L, B, T, C)
    float* residual2;  // (L, B, T, C)    the stream after the attention half of the block
    float* ln2;        // (L, B, T, C)
    float* ln2_mean;   // (L, B, T)
    float* ln2_rstd;   // (L, B, T)
    float* fch;        // (L, B, T, 4*C)
    float* fch_gelu;   // (L, B, T, 4*C)
    float* fcproj;     // (L, B, T, C)
    float* residual3;  // (L, B, T, C)    the stream after the whole block
    float* lnf;        // (B, T, C)
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;   // (B, T)
    float* logits;     // (B, T, Vp)
    float* probs;      // (B, T, Vp)
    float* losses;     // (B, T)
} ActivationTensors;

typedef char activation_tensors_match_the_enum
    [sizeof(ActivationTensors) == NUM_ACTIVATION_TENSORS * sizeof(float*) ? 1 : -1];

// As parameter_sizes, for a batch of B x T.
static inline void activation_sizes(size_t* sizes, size_t* layer, GPT2Config c, int B, int T) {
    size_t C = c.channels, NH = c.num_heads, L = c.num_layers, Vp = c.padded_vocab_size;
    size_t BT = (size_t)B * T;
    memset(layer, 0, NUM_ACTIVATION_TENSORS * sizeof(size_t));
    layer[LN1] = BT * C;
    layer[LN1_MEAN] = BT;
    layer[LN1_RSTD] = BT;
    layer[QKV] = BT * 3 * C;
    layer[ATTY] = BT * C;
    layer[PREATT] = BT * NH * T;
    layer[ATT] = BT * NH * T;
    layer[ATTPROJ] = BT * C;
    layer[RESIDUAL2] = BT * C;
    layer[LN2] = BT * C;
    layer[LN2_MEAN] = BT;
    layer[LN2_RSTD] = BT;
    layer[FCH] = BT * 4 * C;
    layer[FCH_GELU] = BT * 4 * C;
    layer[FCPROJ] = BT * C;
    layer[RESIDUAL3] = BT * C;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) sizes[i] = L * layer[i];
    sizes[ENCODED] = BT * C;
    sizes[LNF] = BT * C;
    sizes[LNF_MEAN] = BT;
    sizes[LNF_RSTD] = BT;
    sizes[LOGITS] = BT * Vp;
    sizes[PROBS] = BT * Vp;
    sizes[LOSSES] = BT;
}

// ---------- tensors in memory ----------
// A group of tensors (the parameters, their gradients, the activations, theirs) is one
// allocation, carved into the tensors of a struct of float pointers in table order.

static inline size_t sum_sizes(const size_t* sizes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    return total;
}

static inline void point_tensors(float** tensors, float* memory, const size_t* sizes, int n) {
    for (int i = 0; i < n; i++) {
        tensors[i] = memory;
        memory += sizes[i];
    }
}

// The views of layer l: `all` with every per-layer tensor advanced to layer l's slice (layer[i]
// floats each), the others as they are. One function for every group of tensors.
static inline void layer_views(float** view, float* const* all, const size_t* layer, int n, int l) {
    for (int i = 0; i < n; i++) view[i] = all[i] + (size_t)l * layer[i];
}

static inline ParameterTensors parameters_of_layer(ParameterTensors p, GPT2Config c, int l) {
    size_t sizes[NUM_PARAMETER_TENSORS], layer[NUM_PARAMETER_TENSORS];
    parameter_sizes(sizes, layer, c);
    ParameterTensors view;
    layer_views((float**)&view, (float* const*)&p, layer, NUM_PARAMETER_TENSORS, l);
    return view;
}

static inline ActivationTensors activations_of_layer(ActivationTensors a, GPT2Config c, int B, int T, int l) {
    size_t sizes[NUM_ACTIVATION_TENSORS], layer[NUM_ACTIVATION_TENSORS];
    activation_sizes(sizes, layer, c, B, T);
    ActivationTensors view;
    layer_views((float**)&view, (float* const*)&a, layer, NUM_ACTIVATION_TENSORS, l);
    return view;
}

// ---------- the model ----------

// A GPT-2 and what training it needs. train_cpu.c keeps every tensor in host memory; train_gpu.cu
// builds a second GPT2 whose tensors are in device memory from a host one that holds only the
// parameters (as every loader leaves it: the rest is allocated by the trainer that needs it).
typedef struct {
    GPT2Config config;
    ParameterTensors params;   // the 16 tensors, in params_memory
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float* params_memory;
    size_t num_parameters;
    ParameterTensors grads;    // their gradients
    float* grads_memory;
    float* m_memory;           // AdamW's first and second moments
    float* v_memory;
    ActivationTensors acts;    // laid out for the B and T of the last forward pass
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    float* acts_memory;        // sized for batch_size x seq_len
    size_t num_activations;
    ActivationTensors grads_acts;
    float* grads_acts_memory;
    int batch_size, seq_len;   // the largest B and T the activations have room for (0: none yet)
    int B, T;                  // of the last forward pass
    int* inputs;               // (B, T) of the last forward pass
    int* targets;              // (B, T), when the last forward pass had targets
    float* cpu_losses;         // train_gpu.cu only: a host copy of acts.losses
    size_t device_bytes;       // train_gpu.cu only: the GPU memory this model holds
    float mean_loss;           // of the last forward pass; -1 when it had no targets
} GPT2;

// Allocates the parameters of a shape, their contents not set, and nothing else.
static inline void gpt2_allocate_params(GPT2* model, GPT2Config config) {
    size_t layer[NUM_PARAMETER_TENSORS];
    memset(model, 0, sizeof(*model));
    model->config = config;
    parameter_sizes(model->param_sizes, layer, config);
    model->num_parameters = sum_sizes(model->param_sizes, NUM_PARAMETER_TENSORS);
    model->params_memory = (float*)malloc_check(model->num_parameters * sizeof(float));
    point_tensors((float**)&model->params, model->params_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    model->mean_loss = -1.0f;
}

// Normal(0, std) into p[0..n), zero from index `valid` on. Each chunk of 64K numbers has its own
// random stream from (seed, tensor, chunk), so the result does not depend on the thread count.
static inline void fill_normal(float* p, size_t n, size_t valid, float stddev, uint64_t seed, int tensor) {
    const size_t chunk = 1 << 16;
    long long num_chunks = (long long)((n + chunk - 1) / chunk);
    #pragma omp parallel for
    for (long long k = 0; k < num_chunks; k++) {
        uint64_t rng = seed_mix(seed, (uint64_t)tensor, (uint64_t)k);
        size_t end = ((size_t)k + 1) * chunk < n ? ((size_t)k + 1) * chunk : n;
        for (size_t j = (size_t)k * chunk; j < end; j += 2) {
            // Box-Muller: two normals from two uniforms
            float u1 = 1.0f - random_f32(&rng);  // in (0, 1]: log stays finite
            float u2 = random_f32(&rng);
            float r = sqrtf(-2.0f * logf(u1));
            float z0 = r * cosf(6.2831853f * u2), z1 = r * sinf(6.2831853f * u2);
            p[j] = j < valid ? stddev * z0 : 0.0f;
            if (j + 1 < end) p[j + 1] = j + 1 < valid ? stddev * z1 : 0.0f;
        }
    }
}

// A fresh model, initialised as GPT-2 is: normal(0, 0.02) matrices, the two residual
// projections scaled down by 1/sqrt(2L) (one per residual add), zero biases, unit layernorm
// weights, and wte's padding rows zero.
static inline void gpt2_build_fresh(GPT2* model, GPT2Config config, uint64_t seed) {
    gpt2_check_config(config, "model");
    gpt2_allocate_params(model, config);
    float* tensors[NUM_PARAMETER_TENSORS];
    point_tensors(tensors, model->params_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    float residual_scale = 1.0f / sqrtf(2.0f * config.num_layers);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = model->param_sizes[i];
        size_t valid = i == WTE ? (size_t)config.vocab_size * config.channels : n;
        switch (PARAMETERS[i].init) {
            case INIT_ZEROS: for (size_t j = 0; j < n; j++) tensors[i][j] = 0.0f; break;
            case INIT_ONES: for (size_t j = 0; j < n; j++) tensors[i][j] = 1.0f; break;
            case INIT_NORMAL: fill_normal(tensors[i], n, valid, 0.02f, seed, i); break;
            case INIT_NORMAL_RESIDUAL: fill_normal(tensors[i], n, valid, 0.02f * residual_scale, seed, i); break;
        }
    }
}

// Frees what a host model holds (any of it may be unallocated).
static inline void gpt2_free(GPT2* model) {
    free(model->params_memory);
    free(model->grads_memory);
    free(model->m_memory);
    free(model->v_memory);
    free(model->acts_memory);
    free(model->grads_acts_memory);
    free(model->inputs);
    free(model->targets);
    free(model->cpu_losses);
    memset(model, 0, sizeof(*model));
}

// ---------- the forward and backward pass, written once ----------

// A device's layers (gpt2/cpu_layers.h says what each computes).
typedef struct {
    void (*encoder_forward)(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C);
    void (*encoder_backward)(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C);
    void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int B, int T, int C);
    void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int B, int T, int C);
    void (*matmul_forward)(float* out, const float* inp, const float* weight, const float* bias,
                           int B, int T, int C, int OC);
    void (*matmul_backward)(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int B, int T, int C, int OC);
    void (*attention_forward)(float* out, float* preatt, float* att, const float* inp, int B, int T, int C, int NH);
    void (*attention_backward)(float* dinp, float* dpreatt, float* datt, const float* dout, const float* inp,
                               const float* att, int B, int T, int C, int NH);
    void (*gelu_forward)(float* out, const float* inp, int N);
    void (*gelu_backward)(float* dinp, const float* inp, const float* dout, int N);
    void (*residual_forward)(float* out, const float* inp1, const float* inp2, int N);
    void (*residual_backward)(float* dinp1, float* dinp2, const float* dout, int N);
} Layers;

// One transformer block, pre-norm: x (B,T,C) is the residual stream entering it, w and a its
// layer's parameters and activations; a.residual3 is the stream leaving it.
static inline void block_forward(const Layers* f, ParameterTensors w, ActivationTensors a,
                                 const float* x, int B, int T, int C, int NH) {
    int BTC = (int)((size_t)B * T * C);
    // attention: x + attproj(attention(qkv(layernorm1(x))))
    f->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, B, T, C);
    f->matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * C);
    f->attention_forward(a.atty, a.preatt, a.att, a.qkv, B, T, C, NH);
    f->matmul_forward(a.attproj, a.atty, w.attprojw, w.attprojb, B, T, C, C);
    f->residual_forward(a.residual2, x, a.attproj, BTC);
    // MLP: residual2 + fcproj(gelu(fc(layernorm2(residual2))))
    f->layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, B, T, C);
    f->matmul_forward(a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * C);
    f->gelu_forward(a.fch_gelu, a.fch, 4 * BTC);
    f->matmul_forward(a.fcproj, a.fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * C, C);
    f->residual_forward(a.residual3, a.residual2, a.fcproj, BTC);
}

// The block in reverse: from the gradient of its output (da.residual3) to the gradients of its
// parameters (dw) and of its input (dx), all accumulated (+=).
static inline void block_backward(const Layers* f, ParameterTensors w, ParameterTensors dw,
                                  ActivationTensors a, ActivationTensors da, const float* x, float* dx,
                                  int B, int T, int C, int NH) {
    int BTC = (int)((size_t)B * T * C);
    f->residual_backward(da.residual2, da.fcproj, da.residual3, BTC);
    f->matmul_backward(da.fch_gelu, dw.fcprojw, dw.fcprojb, da.fcproj, a.fch_gelu, w.fcprojw, B, T, 4 * C, C);
    f->gelu_backward(da.fch, a.fch, da.fch_gelu, 4 * BTC);
    f->matmul_backward(da.ln2, dw.fcw, dw.fcb, da.fch, a.ln2, w.fcw, B, T, C, 4 * C);
    f->layernorm_backward(da.residual2, dw.ln2w, dw.ln2b, da.ln2, a.residual2, w.ln2w, a.ln2_mean,
                          a.ln2_rstd, B, T, C);
    f->residual_backward(dx, da.attproj, da.residual2, BTC);
    f->matmul_backward(da.atty, dw.attprojw, dw.attprojb, da.attproj, a.atty, w.attprojw, B, T, C, C);
    f->attention_backward(da.qkv, da.preatt, da.att, da.atty, a.qkv, a.att, B, T, C, NH);
    f->matmul_backward(da.ln1, dw.qkvw, dw.qkvb, da.qkv, a.ln1, w.qkvw, B, T, C, 3 * C);
    f->layernorm_backward(dx, dw.ln1w, dw.ln1b, da.ln1, x, w.ln1w, a.ln1_mean, a.ln1_rstd, B, T, C);
}

// The forward pass from model->inputs to acts.logits, for the B and T the activations are laid
// out for (model->B, model->T). The loss is the device's to compute.
static inline void gpt2_forward_layers(const Layers* f, GPT2* model) {
    GPT2Config c = model->config;
    int B = model->B, T = model->T, C = c.channels;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    f->encoder_forward(a.encoded, model->inputs, p.wte, p.wpe, B, T, C);
    const float* x = a.encoded;  // the residual stream entering block l
    for (int l = 0; l < c.num_layers; l++) {
        ActivationTensors al = activations_of_layer(a, c, B, T, l);
        block_forward(f, parameters_of_layer(p, c, l), al, x, B, T, C, c.num_heads);
        x = al.residual3;
    }
    f->layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnfw, p.lnfb, B, T, C);
    f->matmul_forward(a.logits, a.lnf, p.wte, NULL, B, T, C, c.padded_vocab_size);  // tied to wte
}

// The backward pass, from the gradient of the loss with respect to the logits (grads_acts.logits,
// which the device computes) to every parameter's gradient, accumulated into model->grads.
static inline void gpt2_backward_layers(const Layers* f, GPT2* model) {
    GPT2Config c = model->config;
    int B = model->B, T = model->T, C = c.channels, L = c.num_layers;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts, da = model->grads_acts;
    f->matmul_backward(da.lnf, g.wte, NULL, da.logits, a.lnf, p.wte, B, T, C, c.padded_vocab_size);
    ActivationTensors last = activations_of_layer(a, c, B, T, L - 1);
    ActivationTensors dlast = activations_of_layer(da, c, B, T, L - 1);
    f->layernorm_backward(dlast.residual3, g.lnfw, g.lnfb, da.lnf, last.residual3, p.lnfw, a.lnf_mean,
                          a.lnf_rstd, B, T, C);
    for (int l = L - 1; l >= 0; l--) {
        // the block's input: the embeddings for block 0, else the previous block's output
        const float* x = l == 0 ? a.encoded : activations_of_layer(a, c, B, T, l - 1).residual3;
        float* dx = l == 0 ? da.encoded : activations_of_layer(da, c, B, T, l - 1).residual3;
        block_backward(f, parameters_of_layer(p, c, l), parameters_of_layer(g, c, l),
                       activations_of_layer(a, c, B, T, l), activations_of_layer(da, c, B, T, l), x, dx,
                       B, T, C, c.num_heads);
    }
    f->encoder_backward(g.wte, g.wpe, da.encoded, model->inputs, B, T, C);
}

#endif // GPT2_MODEL_H
