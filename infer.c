// infer.c: GPT-2 text generation on the CPU, with a paged key-value cache, for one prompt or
// many requests at once.
//
//   ./infer -e MODEL -p "PROMPT"            prints the continuation token by token; timings on stderr
//   ./infer -e MODEL -f REQUESTS.jsonl -b 8 answers a file of requests, 8 sequences at a time
//
// MODEL is an llm.c checkpoint (float32 or bfloat16), a Hugging Face GPT-2 model.safetensors
// (dev/data/download_gpt2.sh fetches GPT-2 124M), or dN for a freshly initialised model of N layers.
// Why a cache, prefill against decode: doc/infer.md, "How it works"; -w bf16: "bf16 on the CPU".
// The scheduling is gpt2/engine.h, the flags gpt2/infer_run.h; this file is the CPU's forward
// pass over the pages (generator_forward), its products on weights packed once for the GEMM.

#include "gpt2/cpu_layers.h"
#include "gpt2/model.h"
#include "gpt2/kv_pages.h"
#include "gpt2/infer_run.h"

// ---------- the cache and the activations ----------
// One allocation, carved by a table of sizes: the pool of pages, and one pass's scratch
// activations, which every layer reuses (no backward pass).

#define NUM_GENERATOR_TENSORS 13
typedef struct {
    float* key;       // (L, num_pages, NH, KV_PAGE, hs) the pool of pages, keys
    float* value;     // (L, num_pages, NH, KV_PAGE, hs) values
    float* x;         // (rows, C) the residual stream, updated in place
    float* ln;        // (rows, C) layernorm output
    float* ln_mean;   // (rows)
    float* ln_rstd;   // (rows)
    float* qkv;       // (rows, 3*C)
    float* atty;      // (rows, C) attention output
    float* proj;      // (rows, C) attproj's, then fcproj's
    float* fch;       // (rows, 4*C)
    float* fch_gelu;  // (rows, 4*C)
    float* last;      // (slots, C) each sequence's last token
    float* last_ln;   // (slots, C)
} GeneratorTensors;

// A matrix of every layer, packed for the GEMM in the products' precision (the other pointer
// NULL); layer l's lies l * stride values after layer 0's.
typedef struct {
    float* fp32;    // pack_weight's
    bf16_t* bf16;   // pack_weight_bf16's (-w bf16)
    size_t stride;
} PackedMatrix;

typedef struct {
    const GPT2* model;      // its float32 embeddings, layernorms, biases
    int bf16;               // the products in bf16 (-w bf16)
    PackedMatrix qkvw;      // (L, 3*C, C)
    PackedMatrix attprojw;  // (L, C, C)
    PackedMatrix fcw;       // (L, 4*C, C)
    PackedMatrix fcprojw;   // (L, C, 4*C)
    PackedMatrix wte;       // (Vp, C) for the logits
    void* packed;           // the five above, one allocation
    GeneratorTensors t;
    size_t sizes[NUM_GENERATOR_TENSORS];
    float* memory;
    int num_pages;
    int rows;         // tokens in one pass, at most
    int slots;        // sequences in one pass, at most
    float* all_logits; // (B*T, Vp) NULL, or where a pass also writes every token's logits (the tests)
} Generator;

// Bytes of a weight (OC, C) packed in the products' precision, rounded up to whole 64-byte
// lines, so that each packed matrix is aligned as the GEMM needs.
static size_t generator_packed_bytes(const Generator* g, int C, int OC) {
    size_t bytes = g->bf16 ? packed_weight_size_bf16(C, OC) * sizeof(bf16_t) : packed_weight_size(C, OC) * sizeof(float);
    return (bytes + 63) / 64 * 64;
}

// Packs every layer's matrices and wte once, in one precision. The model keeps its float32
// weights: the embedding reads rows of wte, and the tests compare with its forward pass.
static void generator_pack(Generator* g, const GPT2* model) {
    GPT2Config c = model->config;
    int L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size;
    ParameterTensors p = model->params;
    PackedMatrix* matrix[5] = {&g->qkvw, &g->attprojw, &g->fcw, &g->fcprojw, &g->wte};
    const float* from[5] = {p.qkvw, p.attprojw, p.fcw, p.fcprojw, p.wte};
    int rows[5] = {3 * C, C, 4 * C, C, Vp}, cols[5] = {C, C, C, 4 * C, C}, count[5] = {L, L, L, L, 1};
    size_t total = 0;
    for (int m = 0; m < 5; m++) total += count[m] * generator_packed_bytes(g, cols[m], rows[m]);
    g->packed = aligned_alloc_check(64, total);
    char* at = (char*)g->packed;
    for (int m = 0; m < 5; m++) {
        size_t bytes = generator_packed_bytes(g, cols[m], rows[m]);
        matrix[m]->fp32 = g->bf16 ? NULL : (float*)at;
        matrix[m]->bf16 = g->bf16 ? (bf16_t*)at : NULL;
        matrix[m]->stride = bytes / (g->bf16 ? sizeof(bf16_t) : sizeof(float));
        for (int l = 0; l < count[m]; l++) {
            const float* weight = from[m] + (size_t)l * rows[m] * cols[m];
            if (g->bf16) {
                pack_weight_bf16((bf16_t*)at, weight, cols[m], rows[m]);
            } else {
                pack_weight((float*)at, weight, cols[m], rows[m]);
            }
            at += bytes;
        }
    }
}

// The pool is calloc'd: the operating system maps its pages when they are first written, so the
// memory used follows the pages taken (the pool hands out low page ids first).
void generator_build(Generator* g, const GPT2* model, int slots, int num_pages, int bf16) {
    GPT2Config c = model->config;
    memset(g, 0, sizeof(*g));
    g->bf16 = bf16;
    generator_pack(g, model);
    size_t L = c.num_layers, C = c.channels;
    size_t rows = c.max_seq_len > slots ? c.max_seq_len : slots;
    size_t pool = (size_t)num_pages * KV_PAGE * C;  // a layer's pages
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

// out (B,T,OC) = inp (B,T,C) layer l's w^T + bias, in the precision w was packed in.
static void generator_matmul(float* out, const float* inp, PackedMatrix w, int l, const float* bias,
                             int B, int T, int C, int OC) {
    if (w.bf16 != NULL) {
        matmul_forward_packed_bf16(out, inp, w.bf16 + (size_t)l * w.stride, bias, B, T, C, OC);
    } else {
        matmul_forward_packed(out, inp, w.fp32 + (size_t)l * w.stride, bias, B, T, C, OC);
    }
}

// Runs a pass (gpt2/engine.h: T tokens of each of B sequences, sequence b from position pos[b]),
// adding their keys and values to their pages; writes each sequence's last logits to logits
// (B, Vp), and where g->all_logits is set every token's. ctx: the Generator, as the engine's
// device calls it. The engine has checked the tokens and taken the pages.
void generator_forward(void* ctx, const EnginePass* pass, float* logits) {
    Generator* g = (Generator*)ctx;
    float* all_logits = g->all_logits;
    GPT2Config cfg = g->model->config;
    int B = pass->B, T = pass->T, C = cfg.channels, NH = cfg.num_heads, Vp = cfg.padded_vocab_size;
    if ((size_t)B * T > (size_t)g->rows || B > g->slots) fail("generator_forward: a pass larger than built for");
    ParameterTensors p = g->model->params;
    GeneratorTensors t = g->t;
    int BTC = (int)((size_t)B * T * C);
    // sequence b's tokens take rows pos[b].. of wpe
    for (int b = 0; b < B; b++) {
        encoder_forward(t.x + (size_t)b * T * C, pass->tokens + (size_t)b * T, p.wte, p.wpe + (size_t)pass->pos[b] * C,
                        1, T, C);
    }
    LayerCache lc = {.pages = pass->pages, .pos = pass->pos, .max_pages = pass->max_pages, .max_len = pass->max_len,
                     .prefill = pass->prefill};
    size_t layer_pool = (size_t)g->num_pages * KV_PAGE * C;
    for (int l = 0; l < cfg.num_layers; l++) {
        ParameterTensors w = parameters_of_layer(p, cfg, l);
        lc.key = t.key + l * layer_pool;
        lc.value = t.value + l * layer_pool;
        // attention: x += attproj(attention(qkv(layernorm1(x))))
        layernorm_forward(t.ln, t.ln_mean, t.ln_rstd, t.x, w.ln1w, w.ln1b, B, T, C);
        generator_matmul(t.qkv, t.ln, g->qkvw, l, w.qkvb, B, T, C, 3 * C);
        attention_forward_paged(t.atty, &lc, t.qkv, B, T, C, NH);
        generator_matmul(t.proj, t.atty, g->attprojw, l, w.attprojb, B, T, C, C);
        residual_forward(t.x, t.x, t.proj, BTC);
        // MLP: x += fcproj(gelu(fc(layernorm2(x))))
        layernorm_forward(t.ln, t.ln_mean, t.ln_rstd, t.x, w.ln2w, w.ln2b, B, T, C);
        generator_matmul(t.fch, t.ln, g->fcw, l, w.fcb, B, T, C, 4 * C);
        gelu_forward(t.fch_gelu, t.fch, 4 * BTC);
        generator_matmul(t.proj, t.fch_gelu, g->fcprojw, l, w.fcprojb, B, T, 4 * C, C);
        residual_forward(t.x, t.x, t.proj, BTC);
    }
    // the output layer is tied to wte; generation needs only each sequence's last token
    if (all_logits != NULL) {
        layernorm_forward(t.ln, t.ln_mean, t.ln_rstd, t.x, p.lnfw, p.lnfb, B, T, C);
        generator_matmul(all_logits, t.ln, g->wte, 0, NULL, B, T, C, Vp);
    }
    for (int b = 0; b < B; b++) {
        memcpy(t.last + (size_t)b * C, t.x + ((size_t)b * T + T - 1) * C, (size_t)C * sizeof(float));
    }
    layernorm_forward(t.last_ln, t.ln_mean, t.ln_rstd, t.last, p.lnfw, p.lnfb, B, 1, C);
    generator_matmul(logits, t.last_ln, g->wte, 0, NULL, B, 1, C, Vp);
}

// ---------- main ----------
#ifndef INFER_NO_MAIN  // test/infer_check.c defines it to call the functions above

int main(int argc, char** argv) {
    InferConfig cfg = infer_parse_args(argc, argv);
    if (cfg.export_dir != NULL) return infer_export(&cfg);
    infer_prepare(&cfg);
    GPT2 model;
    Tokenizer tok;
    infer_load(&cfg, &model, &tok);
    // float32 by default, bf16 for a model whose weights are bf16 values (a bf16 checkpoint)
    if (cfg.precision == NULL) cfg.precision = weights_are_bf16(&model) ? "bf16" : "fp32";
    int bf16 = strcmp(cfg.precision, "bf16") == 0, slots = infer_slots(&cfg);
    int pages = infer_pool_pages(&cfg, model.config, slots, sizeof(float));  // the cache is float32
    Generator g;
    generator_build(&g, &model, slots, pages, bf16);
    EngineDevice device = {&g, generator_forward};  // the engine runs its passes through it
    char name[256];
    snprintf(name, sizeof(name), "cpu, %d threads, %s%s%s%s", num_threads(), cfg.precision, bf16 ? " (" : "",
             bf16 ? cpu_bf16_arith() : "", bf16 ? ")" : "");
    int status = cfg.serve != NULL      ? infer_serve(&cfg, &model, &tok, device, pages, name)
                 : cfg.requests != NULL ? infer_requests(&cfg, &model, &tok, device, pages, sizeof(float), name)
                                        : infer_one_prompt(&cfg, &model, &tok, device, pages, name);
    generator_free(&g);
    tokenizer_free(&tok);
    gpt2_free(&model);
    return status;
}

#endif // INFER_NO_MAIN
