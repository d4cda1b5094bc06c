// gpt2/model.h: the GPT-2 model: its shape, its tensors and where each lives in memory, GPT-2's
// initialisation, and the forward and backward pass as calls to its layers, written once.
//
//   x = wte[token] + wpe[position]                       encoder
//   for each of L blocks:                                 (block_forward below)
//       x = x + attproj(attention(qkv(layernorm1(x))))    causal, NH heads, scores / sqrt(C/NH)
//       x = x + fcproj(gelu(fc(layernorm2(x))))           MLP of width 4C
//   logits = layernorm_f(x) . wte^T                       output layer tied to the embedding
//
// The layers themselves belong to a device. Each path hands the block its own Layers table:
// train_cpu.c the C loops of gpt2/cpu_layers.h, infer.c the same with attention against its
// key-value cache, train_gpu.cu the launchers of its CUDA kernels (gpt2/gpu/), in float32 or in
// bf16 with fused layers; the block below, and the whole forward and backward pass of the
// float32 paths, are the same for all of them.
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

// ---------- the element type: float32, and bf16 on the GPU ----------
// In C every tensor is float32, in train_cpu -p bf16 too: its matrix products round their
// operands to bf16 as they read them (train_cpu.c: choose_layers), so it stores no bf16
// tensors. train_gpu.cu's mixed-precision path (-p bf16) stores its activations and the weight
// matrices it multiplies in bf16 and runs the same transformer block on them (block_forward,
// block_backward below). So the structs that hold such tensors, and the block, are written once
// over floatX (llm.c's name for that type): compiled as C, floatX is float and they are plain
// structs and functions; compiled as C++ (CUDA), each is a template over floatX, and the plain
// names are its float32 instances (ParameterTensors is ParameterTensorsOf<float>). OF(name)
// names the floatX one in a function over floatX.
#ifdef __cplusplus
#define OVER_FLOATX template <typename floatX>
#define OF(name) name##Of<floatX>
#define FLOAT32_INSTANCE(name) typedef name##Of<float> name
#else
typedef float floatX;
#define OVER_FLOATX
#define OF(name) struct name##Of
#define FLOAT32_INSTANCE(name) typedef struct name##Of name
#endif

// ---------- the parameters ----------
// 16 tensors, in the order of the checkpoint file. Each is one field of ParameterTensors, and
// the same order indexes the tables below (the enum names the indices). The weight matrices are
// floatX (the products read them; bf16 copies on the bf16 path), the rest float32.

enum {
    WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB,
    LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB, NUM_PARAMETER_TENSORS
};

OVER_FLOATX struct ParameterTensorsOf {
    floatX* wte;      // (Vp, C)  token embeddings; also the output layer
    float* wpe;       // (maxT, C) position embeddings
    float* ln1w;      // (L, C)
    float* ln1b;      // (L, C)
    floatX* qkvw;     // (L, 3*C, C)
    float* qkvb;      // (L, 3*C)
    floatX* attprojw; // (L, C, C)
    float* attprojb;  // (L, C)
    float* ln2w;      // (L, C)
    float* ln2b;      // (L, C)
    floatX* fcw;      // (L, 4*C, C)
    float* fcb;       // (L, 4*C)
    floatX* fcprojw;  // (L, C, 4*C)
    float* fcprojb;   // (L, C)
    float* lnfw;      // (C)
    float* lnfb;      // (C)
};
FLOAT32_INSTANCE(ParameterTensors);

// The struct is walked as an array of NUM_PARAMETER_TENSORS pointers (point_tensors):
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

// ---------- the part of the model a process holds: its shard ----------
// Under model parallelism (doc/parallel.md) each process holds a part of the model. Pipeline
// parallelism gives it the layers [first_layer, first_layer + num_layers), with the embedding on
// the first stage and the final layernorm and the output layer on the last (both hold wte, which
// ties them). Tensor parallelism gives it part tp_rank of tp of every block of those layers:
// NH/tp of the heads (their rows of qkvw, and the same columns of attprojw) and 4C/tp of the
// MLP's width (rows of fcw, columns of fcprojw), the rest of the block whole. A process alone
// holds the whole model, shard_whole.
typedef struct {
    int first_layer, num_layers;
    int tp, tp_rank;
    int embed;  // holds wte and wpe and runs the encoder: the first stage
    int head;   // holds lnf and wte and computes the logits: the last stage
} Shard;

static inline Shard shard_whole(GPT2Config c) {
    Shard s = {0, c.num_layers, 1, 0, 1, 1};
    return s;
}

// Stage pp_rank of pp, part tp_rank of tp. The L layers go to the stages in order, L / pp each,
// the first L mod pp stages one more: the last stage, which also computes the logits, gets fewer.
static inline Shard shard_of(GPT2Config c, int tp, int tp_rank, int pp, int pp_rank) {
    int L = c.num_layers, base = L / pp, extra = L % pp;
    Shard s;
    s.first_layer = pp_rank * base + (pp_rank < extra ? pp_rank : extra);
    s.num_layers = base + (pp_rank < extra ? 1 : 0);
    s.tp = tp;
    s.tp_rank = tp_rank;
    s.embed = pp_rank == 0;
    s.head = pp_rank == pp - 1;
    return s;
}

// sizes[i]: the floats of tensor i in a shard; layer[i]: the floats of one layer's slice of it, 0
// for the four tensors that are not per layer (wte, wpe, lnfw, lnfb), which a stage holds whole
// or not at all. H = C/tp: the shard's channels of attention (4H of the MLP's).
static inline void shard_parameter_sizes(size_t* sizes, size_t* layer, GPT2Config c, Shard s) {
    size_t Vp = c.padded_vocab_size, C = c.channels, maxT = c.max_seq_len, H = C / s.tp;
    memset(layer, 0, NUM_PARAMETER_TENSORS * sizeof(size_t));
    layer[LN1W] = C;
    layer[LN1B] = C;
    layer[QKVW] = 3 * H * C;
    layer[QKVB] = 3 * H;
    layer[ATTPROJW] = C * H;
    layer[ATTPROJB] = C;
    layer[LN2W] = C;
    layer[LN2B] = C;
    layer[FCW] = 4 * H * C;
    layer[FCB] = 4 * H;
    layer[FCPROJW] = C * 4 * H;
    layer[FCPROJB] = C;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) sizes[i] = (size_t)s.num_layers * layer[i];
    sizes[WTE] = s.embed || s.head ? Vp * C : 0;
    sizes[WPE] = s.embed ? maxT * C : 0;
    sizes[LNFW] = s.head ? C : 0;
    sizes[LNFB] = s.head ? C : 0;
}

// The whole model's.
static inline void parameter_sizes(size_t* sizes, size_t* layer, GPT2Config c) {
    shard_parameter_sizes(sizes, layer, c, shard_whole(c));
}

// One layer's slice of a weight of (rows, cols) floats (bias: cols 1), between the whole model
// (global) and a shard (local), as tensor parallelism splits it: by rows (split 1, each of
// `blocks` blocks of rows in tp parts: q, k and v are 3 blocks), by columns (split 2), or whole
// (split 0). to_shard: 1 copies global into local, 0 back.
static inline void shard_copy_slice(float* local, float* global, size_t rows, size_t cols, int split,
                                    int blocks, Shard s, int to_shard) {
    size_t n_rows = split == 1 ? rows / blocks / s.tp : rows, n_cols = split == 2 ? cols / s.tp : cols;
    for (int b = 0; b < (split == 1 ? blocks : 1); b++) {
        for (size_t r = 0; r < n_rows; r++) {
            size_t g_row = split == 1 ? (size_t)b * (rows / blocks) + s.tp_rank * n_rows + r : r;
            float* g = global + g_row * cols + (split == 2 ? s.tp_rank * n_cols : 0);
            float* l = local + ((size_t)b * n_rows + r) * n_cols;
            if (to_shard) memcpy(l, g, n_cols * sizeof(float));
            else memcpy(g, l, n_cols * sizeof(float));
        }
    }
}

// Copies between a whole model's tensors (global, in file order) and a shard's (local): to_shard
// 1 fills the shard, 0 puts the shard's values back where they belong in the whole model. Used
// for the parameters and for AdamW's moments, which are laid out alike.
static inline void shard_copy(float* local, float* global, GPT2Config c, Shard s, int to_shard) {
    size_t gsizes[NUM_PARAMETER_TENSORS], glayer[NUM_PARAMETER_TENSORS];
    size_t lsizes[NUM_PARAMETER_TENSORS], llayer[NUM_PARAMETER_TENSORS];
    parameter_sizes(gsizes, glayer, c);
    shard_parameter_sizes(lsizes, llayer, c, s);
    size_t C = c.channels, goff = 0, loff = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        if (glayer[k] == 0 && lsizes[k] > 0) {  // wte, wpe, lnf: whole
            shard_copy_slice(local + loff, global + goff, 1, lsizes[k], 0, 1, s, to_shard);
        }
        for (int l = 0; l < s.num_layers && glayer[k] > 0; l++) {
            float* g = global + goff + (size_t)(s.first_layer + l) * glayer[k];
            float* lo = local + loff + (size_t)l * llayer[k];
            switch (k) {
                case QKVW: shard_copy_slice(lo, g, 3 * C, C, 1, 3, s, to_shard); break;
                case QKVB: shard_copy_slice(lo, g, 3 * C, 1, 1, 3, s, to_shard); break;
                case FCW: shard_copy_slice(lo, g, 4 * C, C, 1, 1, s, to_shard); break;
                case FCB: shard_copy_slice(lo, g, 4 * C, 1, 1, 1, s, to_shard); break;
                case ATTPROJW: shard_copy_slice(lo, g, C, C, 2, 1, s, to_shard); break;
                case FCPROJW: shard_copy_slice(lo, g, C, 4 * C, 2, 1, s, to_shard); break;
                default: shard_copy_slice(lo, g, 1, glayer[k], 0, 1, s, to_shard); break;
            }
        }
        goff += gsizes[k];
        loff += lsizes[k];
    }
}

// ---------- the activations ----------
// What the forward pass keeps for the backward pass, 24 tensors laid out for the B and T of the
// pass. Their gradients have the same layout. A path may leave some out (size 0, pointer NULL):
// flash attention keeps att_lse instead of preatt and att, a product with the residual add fused
// into it has no attproj or fcproj, a fused classifier no probs.

enum {
    ENCODED, LN1, LN1_MEAN, LN1_RSTD, QKV, ATTY, PREATT, ATT, ATT_LSE, ATTPROJ, RESIDUAL2, LN2,
    LN2_MEAN, LN2_RSTD, FCH, FCH_GELU, FCPROJ, RESIDUAL3, LNF, LNF_MEAN, LNF_RSTD, LOGITS, PROBS,
    LOSSES, NUM_ACTIVATION_TENSORS
};

OVER_FLOATX struct ActivationTensorsOf {
    floatX* encoded;   // (B, T, C)   wte[token] + wpe[position]: the residual stream into block 0
    floatX* ln1;       // (L, B, T, C)
    float* ln1_mean;   // (L, B, T)
    float* ln1_rstd;   // (L, B, T)
    floatX* qkv;       // (L, B, T, 3*C)  query, key, value of every head
    floatX* atty;      // (L, B, T, C)    attention output, heads side by side
    float* preatt;     // (L, B, NH, T, T) scores before the softmax
    float* att;        // (L, B, NH, T, T) after it
    float* att_lse;    // (L, B, NH, T)   flash attention's instead: each row's log-sum-exp of scores
    floatX* attproj;   // (L, B, T, C)
    floatX* residual2; // (L, B, T, C)    the stream after the attention half of the block
    floatX* ln2;       // (L, B, T, C)
    float* ln2_mean;   // (L, B, T)
    float* ln2_rstd;   // (L, B, T)
    floatX* fch;       // (L, B, T, 4*C)
    floatX* fch_gelu;  // (L, B, T, 4*C)
    floatX* fcproj;    // (L, B, T, C)
    floatX* residual3; // (L, B, T, C)    the stream after the whole block
    floatX* lnf;       // (B, T, C)
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;   // (B, T)
    floatX* logits;    // (B, T, Vp)
    float* probs;      // (B, T, Vp)
    float* losses;     // (B, T)
};
FLOAT32_INSTANCE(ActivationTensors);

typedef char activation_tensors_match_the_enum
    [sizeof(ActivationTensors) == NUM_ACTIVATION_TENSORS * sizeof(float*) ? 1 : -1];

// As shard_parameter_sizes, for a batch of B x T: the tensors of the float32 paths (att_lse is
// flash attention's, the bf16 path's, which lays out its own activations). A stage keeps
// `encoded` as the stream entering its first block (the embeddings, or what the stage before
// sent), and the final layernorm, logits and losses only when it is the last.
static inline void shard_activation_sizes(size_t* sizes, size_t* layer, GPT2Config c, Shard s, int B, int T) {
    size_t C = c.channels, H = C / s.tp, heads = c.num_heads / s.tp, Vp = c.padded_vocab_size;
    size_t BT = (size_t)B * T;
    memset(layer, 0, NUM_ACTIVATION_TENSORS * sizeof(size_t));
    layer[LN1] = BT * C;
    layer[LN1_MEAN] = BT;
    layer[LN1_RSTD] = BT;
    layer[QKV] = BT * 3 * H;
    layer[ATTY] = BT * H;
    layer[PREATT] = BT * heads * T;
    layer[ATT] = BT * heads * T;
    layer[ATTPROJ] = BT * C;
    layer[RESIDUAL2] = BT * C;
    layer[LN2] = BT * C;
    layer[LN2_MEAN] = BT;
    layer[LN2_RSTD] = BT;
    layer[FCH] = BT * 4 * H;
    layer[FCH_GELU] = BT * 4 * H;
    layer[FCPROJ] = BT * C;
    layer[RESIDUAL3] = BT * C;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) sizes[i] = (size_t)s.num_layers * layer[i];
    sizes[ENCODED] = BT * C;
    sizes[LNF] = s.head ? BT * C : 0;
    sizes[LNF_MEAN] = s.head ? BT : 0;
    sizes[LNF_RSTD] = s.head ? BT : 0;
    sizes[LOGITS] = s.head ? BT * Vp : 0;
    sizes[PROBS] = s.head ? BT * Vp : 0;
    sizes[LOSSES] = s.head ? BT : 0;
}

static inline void activation_sizes(size_t* sizes, size_t* layer, GPT2Config c, int B, int T) {
    shard_activation_sizes(sizes, layer, c, shard_whole(c), B, T);
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
// floats each), the others as they are (the activations; the parameters name their fields,
// whose types differ on the bf16 path: shard_parameters_of_layer).
static inline void layer_views(float** view, float* const* all, const size_t* layer, int n, int l) {
    for (int i = 0; i < n; i++) view[i] = all[i] + (size_t)l * layer[i];
}

// Layer l of a shard's parameters (l counts from its first layer). Field by field, each in its own
// element type: the bf16 path's weights (a bf16 copy's matrices beside float32 tensors) too.
OVER_FLOATX static inline OF(ParameterTensors) shard_parameters_of_layer(OF(ParameterTensors) p, GPT2Config c, Shard s,
                                                                          int l) {
    size_t sizes[NUM_PARAMETER_TENSORS], layer[NUM_PARAMETER_TENSORS];
    shard_parameter_sizes(sizes, layer, c, s);
    OF(ParameterTensors) v;
#define AT(field, k) v.field = p.field + (size_t)l * layer[k]
    AT(wte, WTE); AT(wpe, WPE); AT(ln1w, LN1W); AT(ln1b, LN1B); AT(qkvw, QKVW); AT(qkvb, QKVB);
    AT(attprojw, ATTPROJW); AT(attprojb, ATTPROJB); AT(ln2w, LN2W); AT(ln2b, LN2B); AT(fcw, FCW); AT(fcb, FCB);
    AT(fcprojw, FCPROJW); AT(fcprojb, FCPROJB); AT(lnfw, LNFW); AT(lnfb, LNFB);
#undef AT
    return v;
}

OVER_FLOATX static inline OF(ParameterTensors) parameters_of_layer(OF(ParameterTensors) p, GPT2Config c, int l) {
    return shard_parameters_of_layer(p, c, shard_whole(c), l);
}

static inline ActivationTensors shard_activations_of_layer(ActivationTensors a, GPT2Config c, Shard s, int B, int T,
                                                           int l) {
    size_t sizes[NUM_ACTIVATION_TENSORS], layer[NUM_ACTIVATION_TENSORS];
    shard_activation_sizes(sizes, layer, c, s, B, T);
    ActivationTensors view;
    layer_views((float**)&view, (float* const*)&a, layer, NUM_ACTIVATION_TENSORS, l);
    return view;
}

static inline ActivationTensors activations_of_layer(ActivationTensors a, GPT2Config c, int B, int T, int l) {
    return shard_activations_of_layer(a, c, shard_whole(c), B, T, l);
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
    float grads_factor;        // train_cpu only: a factor the gradients are still to be multiplied by,
                               // which its update applies as it reads them (0: none pending)
    int grads_fresh;           // train_cpu only: gradients zeroed, but for those the next backward
                               // pass writes rather than adds to (train_cpu.c: gpt2_zero_grad)
    float* v_memory;
    ActivationTensors acts;    // laid out for last_B x last_T, the batch of the last forward pass
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    float* acts_memory;        // sized for capacity_B x capacity_T
    size_t num_activations;
    ActivationTensors grads_acts;
    float* grads_acts_memory;
    int capacity_B, capacity_T; // the largest B and T the activations have room for (0: none yet)
    int last_B, last_T;        // the B and T of the last forward pass
    int* inputs;               // (B, T) of the last forward pass
    int* targets;              // (B, T), when the last forward pass had targets
    float* cpu_losses;         // train_gpu.cu only: a host copy of acts.losses
    size_t device_bytes;       // train_gpu.cu only: the GPU memory this model holds
    float mean_loss;           // of the last forward pass; -1 when it had no targets
    // Under model parallelism and ZeRO (doc/parallel.md; the whole model alone: shard_whole,
    // num_padded = opt_count = num_parameters, opt_offset 0, one slot, no pipe_grad):
    Shard shard;               // the part of the model this process holds; the sizes above are its
    size_t num_padded;         // floats in params_memory and grads_memory: num_parameters rounded up
                               // to whole parts under ZeRO-1, one per data-parallel rank
    size_t opt_offset;         // the parameters whose AdamW moments this process keeps and updates:
    size_t opt_count;          // [opt_offset, opt_offset + opt_count); m and v hold opt_count floats
    int num_slots;             // batches whose activations are kept at once (a pipeline stage holds
    int slot;                  // several); the slot of the next forward and backward pass; inputs,
                               // targets and the activations hold num_slots of theirs
    float* pipe_grad;          // (B, T, C) the gradient of this stage's output, from the next stage
    size_t activation_bytes;   // the activations of every slot and their gradients, as the device
                               // lays them out
    size_t param_bytes;        // train_gpu.cu's bf16 only (0: float32's, 4 bytes a parameter): its
    size_t optimizer_bytes;    // parameters (the bf16 copy, float32 ones) and AdamW state (m, v,
                               // and under ZeRO-1 the float32 master copy of its part)
} GPT2;

// The inputs and targets of the current slot.
static inline int* gpt2_slot_inputs(const GPT2* model) {
    return model->inputs + (size_t)model->slot * model->capacity_B * model->capacity_T;
}
static inline int* gpt2_slot_targets(const GPT2* model) {
    return model->targets + (size_t)model->slot * model->capacity_B * model->capacity_T;
}

// Allocates the parameters of a shard of a shape, their contents not set, and nothing else,
// params_memory rounded up to `parts` equal parts (ZeRO-1's, else 1), the padding zero.
static inline void gpt2_allocate_shard(GPT2* model, GPT2Config config, Shard shard, int parts) {
    size_t layer[NUM_PARAMETER_TENSORS];
    memset(model, 0, sizeof(*model));
    model->config = config;
    model->shard = shard;
    shard_parameter_sizes(model->param_sizes, layer, config, shard);
    model->num_parameters = sum_sizes(model->param_sizes, NUM_PARAMETER_TENSORS);
    model->num_padded = (model->num_parameters + parts - 1) / parts * parts;
    model->opt_count = model->num_parameters;
    model->num_slots = 1;
    model->params_memory = (float*)malloc_check(model->num_padded * sizeof(float));
    hint_huge_pages(model->params_memory, model->num_padded * sizeof(float));
    memset(model->params_memory + model->num_parameters, 0, (model->num_padded - model->num_parameters) * sizeof(float));
    point_tensors((float**)&model->params, model->params_memory, model->param_sizes, NUM_PARAMETER_TENSORS);
    model->mean_loss = -1.0f;
}

// Allocates the parameters of a shape, their contents not set, and nothing else.
static inline void gpt2_allocate_params(GPT2* model, GPT2Config config) {
    gpt2_allocate_shard(model, config, shard_whole(config), 1);
}

// A shard of a whole host model: its parameters and, if the whole model has them, its AdamW
// moments; with ZeRO-1 (parts > 1), the moments of part `part` of `parts` only, which this
// process will keep and update.
static inline void gpt2_shard_from(GPT2* model, const GPT2* whole, Shard shard, int parts, int part) {
    gpt2_allocate_shard(model, whole->config, shard, parts);
    shard_copy(model->params_memory, whole->params_memory, whole->config, shard, 1);
    size_t part_size = model->num_padded / parts;
    model->opt_offset = (size_t)part * part_size;
    model->opt_count = part_size;
    if (whole->m_memory == NULL) return;
    float* moments = (float*)calloc_check(model->num_padded, sizeof(float));
    float* out[2] = {NULL, NULL};
    const float* in[2] = {whole->m_memory, whole->v_memory};
    for (int i = 0; i < 2; i++) {
        shard_copy(moments, (float*)in[i], whole->config, shard, 1);
        out[i] = (float*)malloc_check(part_size * sizeof(float));
        memcpy(out[i], moments + model->opt_offset, part_size * sizeof(float));
    }
    free(moments);
    model->m_memory = out[0];
    model->v_memory = out[1];
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

// A fresh model, initialised as the GPT-2 paper describes it (and nanoGPT and llm.c do it):
// normal(0, 0.02) matrices, the two residual projections scaled down by 1/sqrt(2L) (one per
// residual add), zero biases, unit layernorm weights, and wte's padding rows zero. (OpenAI's
// released model code, an inference script, draws wpe with 0.01 and scales nothing.)
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
    free(model->pipe_grad);
    memset(model, 0, sizeof(*model));
}

// ---------- the layers of a device ----------

// The key-value cache of one layer, for generation (infer.c, infer_gpu.cu), paged: every
// sequence keeps its keys and values in pages of KV_PAGE positions taken from one pool as it
// grows (gpt2/kv_pages.h), so the memory follows the tokens held, not sequences x maxT. A pass
// runs T tokens of each of B sequences; sequence b held pos[b] positions before it, and its T
// tokens go to positions pos[b]..pos[b]+T-1. Position t of sequence b lies in page
// pages[b * max_pages + t / KV_PAGE], at row t % KV_PAGE of each head's block of that page.
#define KV_PAGE 16
OVER_FLOATX struct LayerCacheOf {
    floatX* key;          // this layer's pool: (num_pages, NH, KV_PAGE, hs)
    floatX* value;        // (num_pages, NH, KV_PAGE, hs)
    const int* pages;     // (B, max_pages) each sequence's pages, in order of position
    const int* pos;       // (B) positions each sequence held before this pass
    int max_pages;        // the row stride of pages
    int max_len;          // the largest pos[b] + T: how far the longest sequence reaches
    int prefill;          // 1 when every pos[b] is 0: whole prompts, which a device may run
                          // through its attention without a cache (flash attention), then store
    float* scratch;       // the device attention's scratch (the GPU's partial softmax sums of a
    size_t scratch_size;  // sequence split in parts), and its size in floats; NULL, 0 on the CPU
};
FLOAT32_INSTANCE(LayerCache);

// A device's layers, as the transformer block calls them. Each path fills one table:
//   LAYERS_CPU (train_cpu.c)    the loops of gpt2/cpu_layers.h: layernorm_forward, matmul_forward, ...
//   LAYERS_INFER (infer.c)      the same, with attention against the key-value cache
//   LAYERS_GPU (train_gpu.cu)   the float32 kernels' launchers: layernorm_forward_gpu, ... (gpt2/gpu/)
//   LAYERS_BF16 (train_gpu.cu)  the bf16 path's: tensor-core products with fused epilogues, flash attention
// Each field says what the layer computes; the functions named above are its definitions, with
// the same arguments. The first group is the plain layers, every one of which gpt2/cpu_layers.h
// defines; a device may leave out some of them (NULL) when it has the optional entries of the
// second group in their place, which the block then calls instead (block_attention_forward, ...).
// Backward layers add into the gradients of their parameters (+=). Into the gradients of their
// inputs the float32 paths' add too, over activation gradients that start at zero; the bf16
// path's products and flash attention write them (=), into scratch buffers that each block
// reuses (gpt2/gpu/model_gpu.cuh: activation_grads_bf16): the same, as each such gradient has
// one producer.
OVER_FLOATX struct LayersOf {
    // out (B,T,C) = wte[inp] + wpe[t]
    void (*encoder_fwd)(floatX* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C);
    void (*encoder_bwd)(float* dwte, float* dwpe, const floatX* dout, const int* inp, int B, int T, int C);
    // out = (inp - mean) * rstd * weight + bias, over rows of C; mean and rstd (B,T) kept
    void (*layernorm_fwd)(floatX* out, float* mean, float* rstd, const floatX* inp, const float* weight,
                          const float* bias, int B, int T, int C);
    void (*layernorm_bwd)(floatX* dinp, float* dweight, float* dbias, const floatX* dout, const floatX* inp,
                          const float* weight, const float* mean, const float* rstd, int B, int T, int C);
    // out (B,T,OC) = inp (B,T,C) weight (OC,C)^T + bias (or NULL)
    void (*matmul_fwd)(floatX* out, const floatX* inp, const floatX* weight, const float* bias,
                       int B, int T, int C, int OC);
    void (*matmul_bwd)(floatX* dinp, float* dweight, float* dbias, const floatX* dout, const floatX* inp,
                       const floatX* weight, int B, int T, int C, int OC);
    // causal self-attention of inp = qkv (B,T,3C) into out (B,T,C), keeping the scores (preatt)
    // and their softmax (att), (B,NH,T,T)
    void (*attention_fwd)(floatX* out, float* preatt, float* att, const floatX* inp, int B, int T, int C, int NH);
    void (*attention_bwd)(floatX* dinp, float* dpreatt, float* datt, const floatX* dout, const floatX* inp,
                          const float* att, int B, int T, int C, int NH);
    // GELU (tanh approximation) on N values
    void (*gelu_fwd)(floatX* out, const floatX* inp, int N);
    void (*gelu_bwd)(floatX* dinp, const floatX* inp, const floatX* dout, int N);
    // out = inp1 + inp2 on N values
    void (*residual_fwd)(floatX* out, const floatX* inp1, const floatX* inp2, int N);
    void (*residual_bwd)(floatX* dinp1, floatX* dinp2, const floatX* dout, int N);

    // Optional (NULL: the block uses the plain layers above).
    // out = residual + inp weight^T + bias: the product with the residual add in its epilogue.
    // A device with it keeps the residual stream's gradient in one buffer (its activation
    // gradients residual2, residual3, attproj and fcproj are the same memory), so the add's
    // backward, which passes the gradient through unchanged, has nothing to do.
    void (*matmul_residual_fwd)(floatX* out, const floatX* inp, const floatX* weight, const float* bias,
                                const floatX* residual, int B, int T, int C, int OC);
    // out = gelu(pre), pre = inp weight^T + bias, both kept: the MLP's first product with its GELU
    void (*matmul_gelu_fwd)(floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const float* bias,
                            int B, int T, int C, int OC);
    // the backward of gelu then a product: dinp (written) = (dout weight) * gelu'(pre), with the
    // product's dweight and dbias; inp = gelu(pre)
    void (*gelu_matmul_bwd)(floatX* dinp, float* dweight, float* dbias, const floatX* dout, const floatX* inp,
                            const floatX* weight, const floatX* pre, int B, int T, int C, int OC);
    // attention that keeps one log-sum-exp per row (lse, (B,NH,T)) instead of the scores; its
    // backward writes dqkv
    void (*flash_attention_fwd)(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH);
    void (*flash_attention_bwd)(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                const float* lse, int B, int T, int C, int NH);
    // attention of T new tokens of each of B sequences (qkv (B,T,3C)) against their paged caches,
    // whose keys and values they join first
    void (*attention_cached_fwd)(floatX* out, const OF(LayerCache)* cache, const floatX* qkv, int B, int T,
                                 int C, int NH);
};
FLOAT32_INSTANCE(Layers);

// Tensor parallelism's group, as the block sees it (doc/parallel.md): its size, this process's
// rank in it, and the device's sum of a tensor over the group's processes, in place (an
// all-reduce). The block is given NULL when it runs whole on one device.
OVER_FLOATX struct TensorGroupOf {
    int size, rank;
    void (*sum)(floatX* x, size_t n);
};
FLOAT32_INSTANCE(TensorGroup);

// ---------- the transformer block, written once ----------
// Every path runs these: the CPU, infer.c, the GPU in float32 and in bf16. Where a device has an
// optional layer, the block_..._forward helpers call it in place of the plain ones.

// Attention with what the device keeps: against the key-value cache when there is one
// (generation), flash attention's log-sum-exp, or the scores and their softmax.
OVER_FLOATX static inline void block_attention_forward(const OF(Layers)* f, OF(ActivationTensors) a,
                                                       const OF(LayerCache)* cache, int B, int T, int C, int NH) {
    if (cache != NULL) {
        f->attention_cached_fwd(a.atty, cache, a.qkv, B, T, C, NH);
    } else if (f->flash_attention_fwd != NULL) {
        f->flash_attention_fwd(a.atty, a.att_lse, a.qkv, B, T, C, NH);
    } else {
        f->attention_fwd(a.atty, a.preatt, a.att, a.qkv, B, T, C, NH);
    }
}

// out = residual + (inp weight^T + bias): the projection that ends each half of the block, with
// the residual add fused into it where the device has that, else into proj and then the add.
// Split by tensor parallelism over its inputs (the heads, the MLP's width), each process's
// product is a partial sum: the first adds the residual and the bias to its own, the others
// nothing, and the group's sum of out is the whole.
OVER_FLOATX static inline void block_matmul_residual_forward(const OF(Layers)* f, floatX* out, floatX* proj,
                                                             const floatX* inp, const floatX* weight, const float* bias,
                                                             const floatX* residual, int B, int T, int C, int OC,
                                                             const OF(TensorGroup)* tp) {
    if (tp != NULL && tp->rank != 0) {
        f->matmul_fwd(out, inp, weight, (const float*)NULL, B, T, C, OC);
    } else if (f->matmul_residual_fwd != NULL) {
        f->matmul_residual_fwd(out, inp, weight, bias, residual, B, T, C, OC);
    } else {
        f->matmul_fwd(proj, inp, weight, bias, B, T, C, OC);
        f->residual_fwd(out, residual, proj, (int)((size_t)B * T * OC));
    }
    if (tp != NULL) tp->sum(out, (size_t)B * T * OC);
}

// out = gelu(pre), pre = inp weight^T + bias: fused where the device has it.
OVER_FLOATX static inline void block_matmul_gelu_forward(const OF(Layers)* f, floatX* out, floatX* pre,
                                                         const floatX* inp, const floatX* weight, const float* bias,
                                                         int B, int T, int C, int OC) {
    if (f->matmul_gelu_fwd != NULL) {
        f->matmul_gelu_fwd(out, pre, inp, weight, bias, B, T, C, OC);
        return;
    }
    f->matmul_fwd(pre, inp, weight, bias, B, T, C, OC);
    f->gelu_fwd(out, pre, (int)((size_t)B * T * OC));
}

// One transformer block, pre-norm: x (B,T,C) is the residual stream entering it, w and a its
// layer's parameters and activations; a.residual3 is the stream leaving it. cache: this layer's
// key-value cache in generation, NULL in training. tp: NULL, or the tensor-parallel group whose
// processes each hold H = C/tp->size of the attention's channels (its heads) and 4H of the MLP's,
// and sum the partial products of the two projections that end the halves of the block.
OVER_FLOATX static inline void block_forward(const OF(Layers)* f, OF(ParameterTensors) w, OF(ActivationTensors) a,
                                             const floatX* x, const OF(LayerCache)* cache, int B, int T, int C,
                                             int NH, const OF(TensorGroup)* tp) {
    int parts = tp != NULL ? tp->size : 1, H = C / parts;
    // attention: residual2 = x + attproj(attention(qkv(layernorm1(x))))
    f->layernorm_fwd(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1w, w.ln1b, B, T, C);
    f->matmul_fwd(a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * H);
    block_attention_forward(f, a, cache, B, T, H, NH / parts);
    block_matmul_residual_forward(f, a.residual2, a.attproj, a.atty, w.attprojw, w.attprojb, x, B, T, H, C, tp);
    // MLP: residual3 = residual2 + fcproj(gelu(fc(layernorm2(residual2))))
    f->layernorm_fwd(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, B, T, C);
    block_matmul_gelu_forward(f, a.fch_gelu, a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * H);
    block_matmul_residual_forward(f, a.residual3, a.fcproj, a.fch_gelu, w.fcprojw, w.fcprojb, a.residual2,
                                  B, T, 4 * H, C, tp);
}

// The backward of out = residual + proj: the gradient reaches both unchanged. A device whose
// products add the residual (matmul_residual_fwd) keeps dout, dresidual and dproj in one buffer,
// which already holds it.
OVER_FLOATX static inline void block_residual_backward(const OF(Layers)* f, floatX* dresidual, floatX* dproj,
                                                       const floatX* dout, int N) {
    if (f->matmul_residual_fwd == NULL) f->residual_bwd(dresidual, dproj, dout, N);
}

// The backward of fcproj(gelu(fch)): dfch from dout, with fcproj's parameter gradients; fused
// where the device has it, else through dfch_gelu.
OVER_FLOATX static inline void block_gelu_matmul_backward(const OF(Layers)* f, floatX* dpre, floatX* dout_gelu,
                                                          float* dweight, float* dbias, const floatX* dout,
                                                          const floatX* out_gelu, const floatX* weight,
                                                          const floatX* pre, int B, int T, int C, int OC) {
    if (f->gelu_matmul_bwd != NULL) {
        f->gelu_matmul_bwd(dpre, dweight, dbias, dout, out_gelu, weight, pre, B, T, C, OC);
        return;
    }
    f->matmul_bwd(dout_gelu, dweight, dbias, dout, out_gelu, weight, B, T, C, OC);
    f->gelu_bwd(dpre, pre, dout_gelu, (int)((size_t)B * T * C));
}

OVER_FLOATX static inline void block_attention_backward(const OF(Layers)* f, OF(ActivationTensors) a,
                                                        OF(ActivationTensors) da, int B, int T, int C, int NH) {
    if (f->flash_attention_bwd != NULL) {
        f->flash_attention_bwd(da.qkv, da.atty, a.qkv, a.atty, a.att_lse, B, T, C, NH);
    } else {
        f->attention_bwd(da.qkv, da.preatt, da.att, da.atty, a.qkv, a.att, B, T, C, NH);
    }
}

// The block in reverse: from the gradient of its output (da.residual3) to the gradients of its
// parameters (dw, float32 on every path) and of its input (dx), accumulated (+=). Under tensor
// parallelism each process's products that begin the halves of the block give it its heads' or
// its MLP part's share of the gradient of their input (dln1, dln2): summed over the group, that
// is the whole of it. These two sums are the backward of the forward's two.
OVER_FLOATX static inline void block_backward(const OF(Layers)* f, OF(ParameterTensors) w, ParameterTensors dw,
                                              OF(ActivationTensors) a, OF(ActivationTensors) da, const floatX* x,
                                              floatX* dx, int B, int T, int C, int NH, const OF(TensorGroup)* tp) {
    int BTC = (int)((size_t)B * T * C), parts = tp != NULL ? tp->size : 1, H = C / parts;
    // MLP: residual3 = residual2 + fcproj(gelu(fc(layernorm2(residual2))))
    block_residual_backward(f, da.residual2, da.fcproj, da.residual3, BTC);
    block_gelu_matmul_backward(f, da.fch, da.fch_gelu, dw.fcprojw, dw.fcprojb, da.fcproj, a.fch_gelu, w.fcprojw,
                               a.fch, B, T, 4 * H, C);
    f->matmul_bwd(da.ln2, dw.fcw, dw.fcb, da.fch, a.ln2, w.fcw, B, T, C, 4 * H);
    if (tp != NULL) tp->sum(da.ln2, (size_t)BTC);
    f->layernorm_bwd(da.residual2, dw.ln2w, dw.ln2b, da.ln2, a.residual2, w.ln2w, a.ln2_mean, a.ln2_rstd,
                     B, T, C);
    // attention: residual2 = x + attproj(attention(qkv(layernorm1(x))))
    block_residual_backward(f, dx, da.attproj, da.residual2, BTC);
    f->matmul_bwd(da.atty, dw.attprojw, dw.attprojb, da.attproj, a.atty, w.attprojw, B, T, H, C);
    block_attention_backward(f, a, da, B, T, H, NH / parts);
    f->matmul_bwd(da.ln1, dw.qkvw, dw.qkvb, da.qkv, a.ln1, w.qkvw, B, T, C, 3 * H);
    if (tp != NULL) tp->sum(da.ln1, (size_t)BTC);
    f->layernorm_bwd(dx, dw.ln1w, dw.ln1b, da.ln1, x, w.ln1w, a.ln1_mean, a.ln1_rstd, B, T, C);
}

// ---------- the forward and backward pass of the float32 paths ----------

// The forward pass from model->inputs to acts.logits, for the batch the activations are laid out
// for (model->last_B x last_T). The loss is the device's to compute. On a pipeline stage, of the
// model's shard: the embeddings on the first stage (the others find their input in a.encoded,
// from the stage before), its blocks, and the logits on the last. tp: the block's group, or NULL.
static inline void gpt2_forward_layers(const Layers* f, GPT2* model, const TensorGroup* tp) {
    GPT2Config c = model->config;
    Shard s = model->shard;
    int B = model->last_B, T = model->last_T, C = c.channels;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    if (s.embed) f->encoder_fwd(a.encoded, gpt2_slot_inputs(model), p.wte, p.wpe, B, T, C);
    const float* x = a.encoded;  // the residual stream entering block l
    for (int l = 0; l < s.num_layers; l++) {
        ActivationTensors al = shard_activations_of_layer(a, c, s, B, T, l);
        block_forward(f, shard_parameters_of_layer(p, c, s, l), al, x, (const LayerCache*)NULL, B, T, C,
                      c.num_heads, tp);
        x = al.residual3;
    }
    if (!s.head) return;
    f->layernorm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnfw, p.lnfb, B, T, C);
    f->matmul_fwd(a.logits, a.lnf, p.wte, NULL, B, T, C, c.padded_vocab_size);  // tied to wte
}

// The backward pass, from the gradient of the loss with respect to the logits (grads_acts.logits,
// which the device computes) to every parameter's gradient, accumulated into model->grads. A
// stage other than the last starts from model->pipe_grad, the gradient of its output that the
// next stage sent; its first block leaves the gradient of its input in grads_acts.encoded.
static inline void gpt2_backward_layers(const Layers* f, GPT2* model, const TensorGroup* tp) {
    GPT2Config c = model->config;
    Shard s = model->shard;
    int B = model->last_B, T = model->last_T, C = c.channels, L = s.num_layers;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts, da = model->grads_acts;
    ActivationTensors last = shard_activations_of_layer(a, c, s, B, T, L - 1);
    ActivationTensors dlast = shard_activations_of_layer(da, c, s, B, T, L - 1);
    if (s.head) {
        f->matmul_bwd(da.lnf, g.wte, NULL, da.logits, a.lnf, p.wte, B, T, C, c.padded_vocab_size);
        f->layernorm_bwd(dlast.residual3, g.lnfw, g.lnfb, da.lnf, last.residual3, p.lnfw, a.lnf_mean, a.lnf_rstd,
                         B, T, C);
    }
    for (int l = L - 1; l >= 0; l--) {
        // the block's input: the stage's input for its first block, else the previous block's output
        const float* x = l == 0 ? a.encoded : shard_activations_of_layer(a, c, s, B, T, l - 1).residual3;
        float* dx = l == 0 ? da.encoded : shard_activations_of_layer(da, c, s, B, T, l - 1).residual3;
        ActivationTensors dl = shard_activations_of_layer(da, c, s, B, T, l);
        if (l == L - 1 && !s.head) dl.residual3 = model->pipe_grad;
        block_backward(f, shard_parameters_of_layer(p, c, s, l), shard_parameters_of_layer(g, c, s, l),
                       shard_activations_of_layer(a, c, s, B, T, l), dl, x, dx, B, T, C, c.num_heads, tp);
    }
    if (s.embed) f->encoder_bwd(g.wte, g.wpe, da.encoded, gpt2_slot_inputs(model), B, T, C);
}

#endif // GPT2_MODEL_H
