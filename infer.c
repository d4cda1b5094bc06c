// infer.c: GPT-2 text generation with a paged key-value cache, for one prompt or many requests
// at once, on the CPU.
//
//   ./infer -e MODEL -p "PROMPT"            prints the continuation token by token; timings on stderr
//   ./infer -e MODEL -f REQUESTS.jsonl -b 8 answers a file of requests, 8 sequences at a time
//
// MODEL is an llm.c checkpoint (float32 or bfloat16), a Hugging Face GPT-2 model.safetensors
// (dev/data/download_gpt2.sh fetches GPT-2 124M), or dN for a freshly initialised model of N layers.
//
// Why a cache. The training forward pass processes a whole sequence; generating with it (as the
// trainers' samples do, gpt2/run.h's run_sample) reruns the model over all t tokens to get token
// t+1, so n tokens cost O(n^2) token-passes. But attention is causal: the key and value vectors
// of a position depend only on the tokens up to it, so they never change once computed. We keep
// them, per layer and head, in a cache. Then each new token needs one pass of its own through
// the model, attending to the cached keys and values of all positions before it.
//
// Two phases with different bottlenecks:
//   prefill  a prompt's P tokens at once: every weight matrix multiplies a (P, C) block,
//            matrix-matrix, so each weight read from memory is used P times and the FMA units
//            set the pace;
//   decode   one token per sequence per step: every weight matrix multiplies a (B, C) block for
//            the B sequences decoding together. At B = 1 that is one vector: each weight is read
//            once for 2 floating-point operations, and memory bandwidth sets the speed,
//            tokens/s <= bandwidth / bytes of weights. Each further sequence reuses the weights
//            already read, until at large B the FMA units are the limit again.
//            dev/bench/bench_infer.sh measures both ends (doc/infer.md).
//
// What runs which sequence when (the batching, continuous batching, the pages of the cache,
// sampling, the answers in order) is gpt2/engine.h, the same for the GPU (infer_gpu.cu); the
// flags are gpt2/infer_run.h. This file is the CPU's forward pass over a paged cache: the layers
// of gpt2/cpu_layers.h in the transformer block of gpt2/model.h (block_forward, the one training
// runs), attention against the pages (gpt2/kv_pages.h), and the products on weights packed once
// for gpt2/cpu_math.h's GEMM, which computes every row of a batch the same way whatever the
// others: a request's tokens do not depend on what else is generated with it.
//
// -w bf16: the products in bf16 (gpt2/cpu_bf16.h). The weight matrices and wte are rounded to
// bf16 as they are packed, once, and nothing else changes: the products read half the bytes
// (what a decode step at batch 1 waits for), each rounds its input rows to bf16 and sums in
// float32, and everything between them (the embeddings, layernorm, attention, GELU, the
// residual stream, the logits) and the key-value cache stay float32. The default for a model
// whose weights are bf16 values already (a bf16 checkpoint), where the rounding changes nothing.

#include "gpt2/cpu_layers.h"
#include "gpt2/model.h"
#include "gpt2/kv_pages.h"
#include "gpt2/infer_run.h"

// ---------- the cache and the activations ----------
// One allocation, carved into tensors by a table of sizes (as the model's activations): the
// pool of pages, and the scratch activations of the tokens of one pass, sized for the longest
// pass (a whole-context prompt, or every slot's token). Nothing is kept per layer, since there
// is no backward pass.

#define NUM_GENERATOR_TENSORS 13
typedef struct {
    float* key;       // (L, num_pages, NH, KV_PAGE, hs) the pool of pages, keys
    float* value;     // (L, num_pages, NH, KV_PAGE, hs) values
    float* x;         // (rows, C) the residual stream of the tokens being processed
    float* ln;        // (rows, C) layernorm output
    float* ln_mean;   // (rows)
    float* ln_rstd;   // (rows)
    float* qkv;       // (rows, 3*C)
    float* atty;      // (rows, C) attention output
    float* proj;      // (rows, C) output of attproj and of fcproj, before the residual add
    float* fch;       // (rows, 4*C)
    float* fch_gelu;  // (rows, 4*C)
    float* last;      // (slots, C) the last token of each sequence, final layernorm
    float* last_ln;   // (slots, C)
} GeneratorTensors;

typedef struct {
    const GPT2* model;
    int bf16;             // the products in bf16 (-w bf16)
    ParameterTensors w;   // what the products read: the matrices and wte packed once for the GEMM
                          // (pack_weight; in bf16 pack_weight_bf16, whose bf16_t values these
                          // float pointers then point to: generator_matmul_bf16), the rest the
                          // model's own
    void* packed;         // the packed matrices, one allocation
    GeneratorTensors t;
    size_t sizes[NUM_GENERATOR_TENSORS];
    float* memory;
    int num_pages;
    int rows;         // tokens in one pass, at most
    int slots;        // sequences in one pass, at most
} Generator;

// Bytes of a weight (OC, C) packed for the generator's products, in float32 or bf16, rounded up
// to whole 64-byte lines: the packed matrices lie one after another, each aligned as the GEMM
// needs.
static size_t generator_packed_bytes(const Generator* g, int C, int OC) {
    size_t bytes = g->bf16 ? packed_weight_size_bf16(C, OC) * sizeof(bf16_t) : packed_weight_size(C, OC) * sizeof(float);
    return (bytes + 63) / 64 * 64;
}

// The weights the products read, packed once (gpt2/cpu_layers.h: pack_weight, or
// pack_weight_bf16 in bf16): every matrix of every layer, and wte for the logits. Only the packed
// copy of the precision in use is made. (The model keeps its float32 weights: the embedding reads
// rows of wte, C floats a token, and the tests compare with the model's full forward pass.)
static void generator_pack(Generator* g, const GPT2* model) {
    GPT2Config c = model->config;
    int L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size;
    ParameterTensors p = model->params;
    float** matrix[5] = {&g->w.qkvw, &g->w.attprojw, &g->w.fcw, &g->w.fcprojw, &g->w.wte};
    const float* from[5] = {p.qkvw, p.attprojw, p.fcw, p.fcprojw, p.wte};
    int rows[5] = {3 * C, C, 4 * C, C, Vp}, cols[5] = {C, C, C, 4 * C, C}, count[5] = {L, L, L, L, 1};
    size_t total = 0;
    for (int m = 0; m < 5; m++) total += count[m] * generator_packed_bytes(g, cols[m], rows[m]);
    g->packed = aligned_alloc_check(64, total);
    g->w = p;
    char* at = (char*)g->packed;
    for (int m = 0; m < 5; m++) {
        *matrix[m] = (float*)at;  // layer l's: l packed sizes on (generator_layer)
        for (int l = 0; l < count[m]; l++) {
            const float* weight = from[m] + (size_t)l * rows[m] * cols[m];
            if (g->bf16) {
                pack_weight_bf16((bf16_t*)at, weight, cols[m], rows[m]);
            } else {
                pack_weight((float*)at, weight, cols[m], rows[m]);
            }
            at += generator_packed_bytes(g, cols[m], rows[m]);
        }
    }
}

// The pool is calloc'd: the operating system maps its pages when they are first written, so the
// memory used follows the pages taken (the pool hands out low page ids first). bf16: the products
// in bf16 (-w bf16).
void generator_build(Generator* g, const GPT2* model, int slots, int num_pages, int bf16) {
    GPT2Config c = model->config;
    g->bf16 = bf16;
    generator_pack(g, model);
    size_t L = c.num_layers, C = c.channels;
    size_t rows = c.max_seq_len > slots ? c.max_seq_len : slots;
    size_t pool = (size_t)num_pages * KV_PAGE * C;  // a layer's pages: NH heads x KV_PAGE x hs each
    size_t* s = g->sizes;
    s[0] = L * pool;      // key
    s[1] = L * pool;      // value
    s[2] = rows * C;      // x
    s[3] = rows * C;      // ln
    s[4] = rows;          // ln_mean
    s[5] = rows;          // ln_rstd
    s[6] = rows * 3 * C;  // qkv
    s[7] = rows * C;      // atty
    s[8] = rows * C;      // proj
    s[9] = rows * 4 * C;  // fch
    s[10] = rows * 4 * C; // fch_gelu
    s[11] = slots * C;    // last
    s[12] = slots * C;    // last_ln
    g->model = model;
    g->memory = (float*)calloc_check(sum_sizes(s, NUM_GENERATOR_TENSORS), sizeof(float));
    point_tensors((float**)&g->t, g->memory, s, NUM_GENERATOR_TENSORS);
    g->num_pages = num_pages;
    g->rows = (int)rows;
    g->slots = slots;
}

void generator_free(Generator* g) {
    free(g->packed);
    free(g->memory);
    memset(g, 0, sizeof(*g));
}

// ---------- forward over the pages ----------

// Layer l's packed matrix of a weight (OC, C), whose layer 0's is at first: l packed sizes on
// (generator_packed_bytes).
static float* generator_layer_matrix(const Generator* g, float* first, int l, int C, int OC) {
    return (float*)((char*)first + l * generator_packed_bytes(g, C, OC));
}

// Layer l's weights, as parameters_of_layer gives them, with its packed matrices.
static ParameterTensors generator_layer(const Generator* g, int l) {
    GPT2Config c = g->model->config;
    int C = c.channels;
    ParameterTensors w = parameters_of_layer(g->w, c, l);
    w.qkvw = generator_layer_matrix(g, g->w.qkvw, l, C, 3 * C);
    w.attprojw = generator_layer_matrix(g, g->w.attprojw, l, C, C);
    w.fcw = generator_layer_matrix(g, g->w.fcw, l, C, 4 * C);
    w.fcprojw = generator_layer_matrix(g, g->w.fcprojw, l, 4 * C, C);
    return w;
}

// The layers of generation: the CPU's, with attention against the paged cache; forward only.
static const Layers LAYERS_INFER = {
    .layernorm_fwd = layernorm_forward,
    .matmul_fwd = matmul_forward_packed,
    .gelu_fwd = gelu_forward,
    .residual_fwd = residual_forward,
    .attention_cached_fwd = attention_forward_paged,
};

// The bf16 product (matmul_forward_packed_bf16) in the float32 table's slot. In C the block
// hands every weight through as a float pointer (gpt2/model.h: ParameterTensors); in bf16 the
// generator's point to pack_weight_bf16's values, read here as what they are.
static void generator_matmul_bf16(float* out, const float* inp, const float* weight, const float* bias,
                                  int B, int T, int C, int OC) {
    matmul_forward_packed_bf16(out, inp, (const bf16_t*)(const void*)weight, bias, B, T, C, OC);
}

// -w bf16: the same layers, the products in bf16.
static const Layers LAYERS_INFER_BF16 = {
    .layernorm_fwd = layernorm_forward,
    .matmul_fwd = generator_matmul_bf16,
    .gelu_fwd = gelu_forward,
    .residual_fwd = residual_forward,
    .attention_cached_fwd = attention_forward_paged,
};

// The block's activations for the tokens of one pass, in the scratch tensors. Nothing is kept
// for a backward pass, so every layer runs in the same ones: the residual stream is updated in
// place (x is the block's input, residual2 and residual3), and the products before the two
// residual adds share proj.
static ActivationTensors generator_activations(const GeneratorTensors* t) {
    ActivationTensors a;
    memset(&a, 0, sizeof(a));
    a.encoded = a.residual2 = a.residual3 = t->x;
    a.ln1 = a.ln2 = t->ln;
    a.ln1_mean = a.ln2_mean = a.lnf_mean = t->ln_mean;
    a.ln1_rstd = a.ln2_rstd = a.lnf_rstd = t->ln_rstd;
    a.qkv = t->qkv;
    a.atty = t->atty;
    a.attproj = a.fcproj = t->proj;
    a.fch = t->fch;
    a.fch_gelu = t->fch_gelu;
    return a;
}

// Runs a pass (gpt2/engine.h: T tokens of each of B sequences, sequence b from position pos[b])
// through the model, adding their keys and values to their pages, and writes the logits of each
// sequence's last token to logits (B, Vp). With all_logits non-NULL also writes the logits of
// every token there, (B*T, Vp) (the tests compare them with train_cpu.c's gpt2_forward). The
// padding logits V..Vp-1 are 0 (zero rows of wte). The engine has checked the tokens (ids
// below V, positions within the context) and taken the pages.
void generator_forward(Generator* g, const EnginePass* pass, float* logits, float* all_logits) {
    GPT2Config cfg = g->model->config;
    int B = pass->B, T = pass->T, C = cfg.channels, Vp = cfg.padded_vocab_size;
    if ((size_t)B * T > (size_t)g->rows || B > g->slots) fail("generator_forward: a pass larger than built for");
    const Layers* f = g->bf16 ? &LAYERS_INFER_BF16 : &LAYERS_INFER;
    ParameterTensors p = g->w;
    ActivationTensors a = generator_activations(&g->t);
    size_t layer_pool = (size_t)g->num_pages * KV_PAGE * C;
    // sequence b's tokens take rows pos[b].. of wpe
    for (int b = 0; b < B; b++) {
        encoder_forward(a.encoded + (size_t)b * T * C, pass->tokens + (size_t)b * T, g->model->params.wte,
                        p.wpe + (size_t)pass->pos[b] * C, 1, T, C);
    }
    LayerCache lc;
    lc.pages = pass->pages;
    lc.pos = pass->pos;
    lc.max_pages = pass->max_pages;
    lc.max_len = pass->max_len;
    lc.prefill = pass->prefill;
    lc.scratch = NULL;
    lc.scratch_size = 0;
    for (int l = 0; l < cfg.num_layers; l++) {
        lc.key = g->t.key + l * layer_pool;
        lc.value = g->t.value + l * layer_pool;
        block_forward(f, generator_layer(g, l), a, a.residual3, &lc, B, T, C, cfg.num_heads,
                      (const TensorGroup*)NULL);
    }
    // the output layer is tied to wte; generation needs only each sequence's last token
    if (all_logits != NULL) {
        layernorm_forward(a.ln1, a.lnf_mean, a.lnf_rstd, a.residual3, p.lnfw, p.lnfb, B, T, C);
        f->matmul_fwd(all_logits, a.ln1, p.wte, NULL, B, T, C, Vp);
    }
    for (int b = 0; b < B; b++) {
        memcpy(g->t.last + (size_t)b * C, a.residual3 + ((size_t)b * T + T - 1) * C, (size_t)C * sizeof(float));
    }
    layernorm_forward(g->t.last_ln, a.lnf_mean, a.lnf_rstd, g->t.last, p.lnfw, p.lnfb, B, 1, C);
    f->matmul_fwd(logits, g->t.last_ln, p.wte, NULL, B, 1, C, Vp);
}

// ---------- the device ----------

static void cpu_forward(void* ctx, const EnginePass* pass, float* logits) {
    generator_forward((Generator*)ctx, pass, logits, NULL);
}

// precision: fp32 or bf16 (infer_run.h has checked it): the products'; the cache is float32 in both.
static void cpu_build(const GPT2* model, int slots, int pages, const char* precision, EngineDevice* device) {
    Generator* g = (Generator*)malloc_check(sizeof(Generator));
    generator_build(g, model, slots, pages, strcmp(precision, "bf16") == 0);
    device->ctx = g;
    device->forward = cpu_forward;
}

static void cpu_free(EngineDevice* device) {
    generator_free((Generator*)device->ctx);
    free(device->ctx);
}

// The cache holds float32 keys and values in either precision.
static size_t cpu_value_bytes(const char* precision) {
    (void)precision;
    return sizeof(float);
}

// float32 by default; bf16 for a model whose weights are bf16 values (.bf16_weights_in_bf16).
static const char* cpu_init(char* name, size_t cap) {
    snprintf(name, cap, "cpu, %d threads", num_threads());
    return "fp32";
}

// What the bf16 products run on in this build (gpt2/cpu_bf16.h), for the header line.
static const char* cpu_arith(const char* precision) {
    return strcmp(precision, "bf16") == 0 ? cpu_bf16_arith() : NULL;
}

static const InferDevice INFER_CPU = {
    .init = cpu_init,
    .build = cpu_build,
    .free = cpu_free,
    .value_bytes = cpu_value_bytes,
    .bf16_weights_in_bf16 = 1,
    .arith = cpu_arith,
};

// ---------- main ----------
#ifndef INFER_NO_MAIN  // test/infer_check.c defines it to call the functions above

int main(int argc, char** argv) {
    return infer_main(argc, argv, &INFER_CPU);
}

#endif // INFER_NO_MAIN
