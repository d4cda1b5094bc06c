// gpt2/model.h: the GPT-2 model's shape, its tensors and where each lives in memory, and GPT-2's
// initialisation. The passes themselves are written out in each program: train_cpu.c,
// train_gpu.cu, infer.c and gpt2/gpu/generate.cuh.
//
//   x = wte[token] + wpe[position]                       encoder
//   for each of L blocks:
//       x = x + attproj(attention(qkv(layernorm1(x))))    causal, NH heads, scores / sqrt(C/NH)
//       x = x + fcproj(gelu(fc(layernorm2(x))))           MLP of width 4C
//   logits = layernorm_f(x) . wte^T                       output layer tied to the embedding
//
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
    GPT2Config c = {.max_seq_len = maxT, .vocab_size = V, .padded_vocab_size = Vp, .num_layers = L,
                    .num_heads = NH, .channels = C};
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

// dN: N layers of N heads of 64 channels; d12, d24, d36, d48 are GPT-2's four sizes.
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
// train_gpu's bf16 path keeps activations and weight matrices in bf16, so the tensor structs are
// templates over floatX in C++ (ParameterTensors is ParameterTensorsOf<float>) and plain float
// structs in C. OF(name) names the floatX one (doc/gpu.md, "Mixed precision").
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
// 16 tensors in the checkpoint's order; the matrices are floatX (bf16 copies on the bf16 path).

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

// point_tensors walks the struct as an array: a field without its enum entry fails here.
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
// Under model parallelism a process holds layers [first_layer, first_layer + num_layers) and,
// of each block, part tp_rank of tp: NH/tp heads and 4C/tp of the MLP (doc/parallel.md). The
// sizes below depend on it; a process alone holds shard_whole.
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

// sizes[i]: floats of tensor i in a shard; layer[i]: of one layer's slice (0: not per layer).
// H = C/tp: the shard's channels of attention.
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

// ---------- the activations ----------
// What the forward pass keeps for the backward pass, laid out for its B and T; the gradients
// alike. A path may leave some out (size 0, NULL): flash attention keeps att_lse instead of
// preatt and att, a fused residual add needs no attproj or fcproj, a fused classifier no probs.

enum {
    ENCODED, LN1, LN1_MEAN, LN1_RSTD, QKV, ATTY, PREATT, ATT, ATT_LSE, ATTPROJ, RESIDUAL2, LN2,
    LN2_MEAN, LN2_RSTD, FCH, FCH_GELU, FCPROJ, RESIDUAL3, LNF, LNF_MEAN, LNF_RSTD, LOGITS, PROBS,
    LOSSES, NUM_ACTIVATION_TENSORS
};

OVER_FLOATX struct ActivationTensorsOf {
    floatX* encoded;   // (B, T, C)   wte[token] + wpe[position]
    floatX* ln1;       // (L, B, T, C)
    float* ln1_mean;   // (L, B, T)
    float* ln1_rstd;   // (L, B, T)
    floatX* qkv;       // (L, B, T, 3*C)  query, key, value of every head
    floatX* atty;      // (L, B, T, C)    attention output, heads side by side
    float* preatt;     // (L, B, NH, T, T) scores before the softmax
    float* att;        // (L, B, NH, T, T) after it
    float* att_lse;    // (L, B, NH, T)   flash attention's: each row's log-sum-exp
    floatX* attproj;   // (L, B, T, C)
    floatX* residual2; // (L, B, T, C)    after the attention half
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

// As shard_parameter_sizes, for B x T, on the float32 paths (the bf16 path lays out its own). A
// stage's `encoded` is its input; lnf, logits and losses are the last stage's.
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
// A group of tensors is one allocation, carved into a struct's pointers in table order.

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

// Layer l's views: every per-layer tensor advanced to its slice (layer[i] floats each).
static inline void layer_views(float** view, float* const* all, const size_t* layer, int n, int l) {
    for (int i = 0; i < n; i++) view[i] = all[i] + (size_t)l * layer[i];
}

// Layer l of a shard's parameters (from its first layer), field by field: floatX or float32.
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

// A GPT-2 and what training it needs. A loader fills the parameters only; train_cpu.c allocates
// the rest on the host, train_gpu.cu builds a device copy (gpt2/gpu/model_gpu.cuh).
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
    ActivationTensors acts;    // laid out for last_B x last_T
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    float* acts_memory;        // sized for capacity_B x capacity_T
    size_t num_activations;
    ActivationTensors grads_acts;
    float* grads_acts_memory;
    int capacity_B, capacity_T; // the largest B and T the activations hold
    int last_B, last_T;        // the B and T of the last forward pass
    int* inputs;               // (B, T) of the last forward pass
    int* targets;              // (B, T), when the last forward pass had targets
    float mean_loss;           // of the last forward pass; -1 when it had no targets
    struct StepScalars* step_gpu;  // (GPU) the step's losses and gradient norm, on the device
    // split over processes (doc/parallel.md; alone: shard_whole, no padding, one slot)
    Shard shard;               // the part held here; the sizes above are its
    size_t num_padded;         // floats of params and grads: rounded up to whole ZeRO-1 parts
    size_t opt_offset;         // AdamW updates [opt_offset, opt_offset + opt_count) here; m and v
    size_t opt_count;          // hold opt_count floats
    int num_slots;             // batches whose activations a pipeline stage keeps at once
    int slot;                  // the slot of the next pass
    float* pipe_grad;          // (B, T, C) the gradient of this stage's output, from the next stage
    // bytes as laid out, for the summary (0: 4 a parameter, 8 for AdamW; 0 on the host)
    size_t activation_bytes, param_bytes, optimizer_bytes, device_bytes;
} GPT2;

// The inputs and targets of the current slot.
static inline int* gpt2_slot_inputs(const GPT2* model) {
    return model->inputs + (size_t)model->slot * model->capacity_B * model->capacity_T;
}
static inline int* gpt2_slot_targets(const GPT2* model) {
    return model->targets + (size_t)model->slot * model->capacity_B * model->capacity_T;
}

// Allocates a shard's parameters (contents not set), rounded up to `parts` equal parts (ZeRO-1).
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

// Normal(0, std) into p[0..n), zero from `valid` on; a random stream per chunk of 64K, so the
// result does not depend on the thread count.
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

// GPT-2's initialisation (as nanoGPT and llm.c): normal(0, 0.02), the residual projections
// scaled by 1/sqrt(2L), zero biases, unit layernorm weights, wte's padding rows zero.
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
    free(model->pipe_grad);
    memset(model, 0, sizeof(*model));
}

// ---------- the key-value cache of generation ----------

// One layer's paged key-value cache (gpt2/kv_pages.h, doc/infer.md): a pass runs T tokens of each
// of B sequences, sequence b's at positions pos[b]..pos[b]+T-1; position t of sequence b is row
// t % KV_PAGE of page pages[b * max_pages + t / KV_PAGE].
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

#endif // GPT2_MODEL_H
