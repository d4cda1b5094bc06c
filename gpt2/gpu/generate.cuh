// gpt2/gpu/generate.cuh: generation's forward pass on the GPU over a paged key-value cache, in
// float32 or bf16: infer_gpu.cu's device for the engine (gpt2/engine.h), and train_gpu's samples.
// It is infer.c's generator_forward with the GPU's layers: the transformer block of gpt2/model.h
// with the tables LAYERS_GPU_INFER and LAYERS_BF16_INFER (gpt2/gpu/layers.cuh), whose attention
// stores each new token's key and value in its page and attends over the pages
// (gpt2/gpu/attention_paged.cuh; a whole prompt in bf16 through flash attention).
//
// It reads weights already on the GPU (train_gpu's own, or infer_gpu's upload): the float32
// parameters, and in bf16 the bf16 copy of the matrices, which the products read. The pool of
// pages and the activations of one pass (up to `rows` tokens) are its own, in floatX; the logits
// of each sequence's last token come back to the host as float32 for the sampler.

#ifndef GPT2_GPU_GENERATE_CUH
#define GPT2_GPU_GENERATE_CUH

#include "../model.h"
#include "../engine.h"
#include "cuda_utils.cuh"
#include "layers.cuh"

template <typename floatX>
struct GeneratorGPU {
    GPT2Config config;
    ParameterTensors params;      // float32, on the GPU: embeddings, layernorms, biases
    ParameterTensorsOf<floatX> w; // what the layers read: params, or with the bf16 copy's matrices
    const LayersOf<floatX>* layers;
    int num_pages, rows, slots;
    floatX* key;                  // (L, num_pages, NH, KV_PAGE, hs)
    floatX* value;                // (L, num_pages, NH, KV_PAGE, hs)
    floatX* x;                    // (rows, C) the residual stream entering a block (and leaving it)
    floatX* x2;                   // (rows, C) the stream between its two halves (residual2)
    floatX* ln;                   // (rows, C)
    float* ln_mean;               // (rows)
    float* ln_rstd;               // (rows)
    floatX* qkv;                  // (rows, 3*C)
    floatX* atty;                 // (rows, C)
    floatX* proj;                 // (rows, C) the float32 path's products before the residual add
    floatX* fch;                  // (rows, 4*C)
    floatX* fch_gelu;             // (rows, 4*C)
    floatX* logits;               // (slots, Vp)
    float* scratch;               // the paged attention's
    size_t scratch_size;
    int* tokens;                  // (rows) the pass, copied to the GPU
    int* pos;                     // (slots)
    int* pages;                   // (slots, max_pages)
    int max_pages;
    uint16_t* logits_host;        // (slots, Vp) raw floatX bits, or float32
    void* memory;                 // everything above, one allocation
    size_t bytes;
};

// A generator over a whole model's weights on the GPU: its float32 tensors `params` (in float32
// all of them; in bf16 the embeddings, layernorms and biases) and the weights the layers read, w
// (params itself, or weights_over_copy's), for passes of up to `slots` sequences and a pool of
// num_pages pages.
template <typename floatX>
static void generator_gpu_build(GeneratorGPU<floatX>* g, GPT2Config c, ParameterTensors params,
                                ParameterTensorsOf<floatX> w, const LayersOf<floatX>* layers, int slots, int num_pages) {
    memset(g, 0, sizeof(*g));
    g->config = c;
    g->params = params;
    g->w = w;
    g->layers = layers;
    g->num_pages = num_pages;
    g->rows = c.max_seq_len > slots ? c.max_seq_len : slots;
    g->slots = slots;
    g->max_pages = kv_pages_for(c.max_seq_len);
    size_t L = c.num_layers, C = c.channels, R = g->rows, Vp = c.padded_vocab_size;
    size_t pool = L * num_pages * KV_PAGE * C;
    // the attention's scratch for the larger of the two passes the engine runs: one token of each
    // slot, or one whole prompt
    int NH = c.num_heads, hs = (int)C / NH;
    size_t decode = attention_paged_scratch_floats(slots, 1, NH, hs, c.max_seq_len);
    size_t prefill = attention_paged_scratch_floats(1, c.max_seq_len, NH, hs, c.max_seq_len);
    g->scratch_size = decode > prefill ? decode : prefill;
    // the pieces, each on a 256-byte boundary
    size_t piece[16], n = 0;
    piece[n++] = pool * sizeof(floatX);               // key
    piece[n++] = pool * sizeof(floatX);               // value
    piece[n++] = R * C * sizeof(floatX);              // x
    piece[n++] = R * C * sizeof(floatX);              // x2
    piece[n++] = R * C * sizeof(floatX);              // ln
    piece[n++] = R * sizeof(float);                   // ln_mean
    piece[n++] = R * sizeof(float);                   // ln_rstd
    piece[n++] = R * 3 * C * sizeof(floatX);          // qkv
    piece[n++] = R * C * sizeof(floatX);              // atty
    piece[n++] = R * C * sizeof(floatX);              // proj
    piece[n++] = R * 4 * C * sizeof(floatX);          // fch
    piece[n++] = R * 4 * C * sizeof(floatX);          // fch_gelu
    piece[n++] = (size_t)slots * Vp * sizeof(floatX); // logits
    piece[n++] = g->scratch_size * sizeof(float);     // scratch
    piece[n++] = R * sizeof(int);                     // tokens
    piece[n++] = (size_t)slots * (1 + g->max_pages) * sizeof(int);  // pos, pages
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += (piece[i] + 255) / 256 * 256;
    cuda_check(cudaMalloc(&g->memory, total));
    g->bytes = total;
    char* at = (char*)g->memory;
    void** field[16] = {(void**)&g->key, (void**)&g->value, (void**)&g->x, (void**)&g->x2, (void**)&g->ln,
                        (void**)&g->ln_mean, (void**)&g->ln_rstd, (void**)&g->qkv, (void**)&g->atty,
                        (void**)&g->proj, (void**)&g->fch, (void**)&g->fch_gelu, (void**)&g->logits,
                        (void**)&g->scratch, (void**)&g->tokens, (void**)&g->pos};
    for (size_t i = 0; i < n; i++) {
        *field[i] = at;
        at += (piece[i] + 255) / 256 * 256;
    }
    g->pages = g->pos + slots;
    g->logits_host = (uint16_t*)malloc_check((size_t)slots * Vp * sizeof(floatX));
}

template <typename floatX>
static void generator_gpu_free(GeneratorGPU<floatX>* g) {
    cuda_check(cudaFree(g->memory));
    free(g->logits_host);
    memset(g, 0, sizeof(*g));
}

// The block's activations for one pass: the stream alternates between x (entering a block,
// residual3 leaving it) and x2 (residual2), so that no product adds its residual in place.
template <typename floatX>
static ActivationTensorsOf<floatX> generator_gpu_activations(const GeneratorGPU<floatX>* g) {
    ActivationTensorsOf<floatX> a;
    memset(&a, 0, sizeof(a));
    a.encoded = a.residual3 = g->x;
    a.residual2 = g->x2;
    a.ln1 = a.ln2 = a.lnf = g->ln;
    a.ln1_mean = a.ln2_mean = a.lnf_mean = g->ln_mean;
    a.ln1_rstd = a.ln2_rstd = a.lnf_rstd = g->ln_rstd;
    a.qkv = g->qkv;
    a.atty = g->atty;
    a.attproj = a.fcproj = g->proj;
    a.fch = g->fch;
    a.fch_gelu = g->fch_gelu;
    a.logits = g->logits;
    return a;
}

// As infer.c's generator_forward: runs the pass (gpt2/engine.h) and writes the logits of each
// sequence's last token to logits (B, Vp) on the host, as float32. The engine's passes are one
// whole prompt (B = 1) or one token of each sequence (T = 1), so those last tokens are
// consecutive rows.
template <typename floatX>
static void generator_gpu_forward(GeneratorGPU<floatX>* g, const EnginePass* pass, float* logits) {
    GPT2Config c = g->config;
    int B = pass->B, T = pass->T, C = c.channels, Vp = c.padded_vocab_size;
    if ((size_t)B * T > (size_t)g->rows || B > g->slots || (B > 1 && T > 1)) {
        fail("generator_gpu_forward: a pass of %d x %d tokens, built for %d sequences of one token or one of %d",
             B, T, g->slots, g->rows);
    }
    cuda_check(cudaMemcpy(g->tokens, pass->tokens, (size_t)B * T * sizeof(int), cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(g->pos, pass->pos, (size_t)B * sizeof(int), cudaMemcpyHostToDevice));
    for (int b = 0; b < B; b++) {
        cuda_check(cudaMemcpy(g->pages + (size_t)b * g->max_pages, pass->pages + (size_t)b * pass->max_pages,
                              (size_t)kv_pages_for(pass->pos[b] + T) * sizeof(int), cudaMemcpyHostToDevice));
    }
    ActivationTensorsOf<floatX> a = generator_gpu_activations(g);
    encoder_forward_at_gpu(a.encoded, g->tokens, g->pos, g->params.wte, g->params.wpe, B, T, C);
    LayerCacheOf<floatX> lc;
    lc.pages = g->pages;
    lc.pos = g->pos;
    lc.max_pages = g->max_pages;
    lc.max_len = pass->max_len;
    lc.prefill = pass->prefill;
    lc.scratch = g->scratch;
    lc.scratch_size = g->scratch_size;
    size_t layer_pool = (size_t)g->num_pages * KV_PAGE * C;
    for (int l = 0; l < c.num_layers; l++) {
        lc.key = g->key + l * layer_pool;
        lc.value = g->value + l * layer_pool;
        block_forward(g->layers, parameters_of_layer(g->w, c, l), a, a.encoded, &lc, B, T, C, c.num_heads,
                      (const TensorGroupOf<floatX>*)NULL);
    }
    // the last token of each sequence: row T-1 of the one sequence, or every row
    const floatX* last = a.residual3 + (size_t)(T - 1) * C;
    layernorm_forward_gpu<floatX>(a.lnf, a.lnf_mean, a.lnf_rstd, last, g->params.lnfw, g->params.lnfb, B, 1, C);
    g->layers->matmul_fwd(a.logits, a.lnf, g->w.wte, NULL, B, 1, C, Vp);
    size_t n = (size_t)B * Vp;
    if (sizeof(floatX) == sizeof(float)) {
        cuda_check(cudaMemcpy(logits, a.logits, n * sizeof(float), cudaMemcpyDeviceToHost));
    } else {
        cuda_check(cudaMemcpy(g->logits_host, a.logits, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) logits[i] = bf16_to_float(g->logits_host[i]);
    }
}

// ---------- the generator as the engine's device ----------

template <typename floatX>
static void generator_gpu_device_forward(void* ctx, const EnginePass* pass, float* logits) {
    generator_gpu_forward((GeneratorGPU<floatX>*)ctx, pass, logits);
}

// A generator (generator_gpu_build's arguments) as the engine's device (gpt2/engine.h): what
// infer_gpu runs and train_gpu's samples call. generator_gpu_device_free frees it.
template <typename floatX>
static EngineDevice generator_gpu_device(GPT2Config c, ParameterTensors params, ParameterTensorsOf<floatX> w,
                                         const LayersOf<floatX>* layers, int slots, int num_pages) {
    GeneratorGPU<floatX>* g = (GeneratorGPU<floatX>*)malloc_check(sizeof(GeneratorGPU<floatX>));
    generator_gpu_build(g, c, params, w, layers, slots, num_pages);
    EngineDevice device;
    device.ctx = g;
    device.forward = generator_gpu_device_forward<floatX>;
    return device;
}

template <typename floatX>
static void generator_gpu_device_free(EngineDevice* device) {
    generator_gpu_free((GeneratorGPU<floatX>*)device->ctx);
    free(device->ctx);
}

#endif // GPT2_GPU_GENERATE_CUH
