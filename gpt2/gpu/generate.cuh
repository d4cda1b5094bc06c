// gpt2/gpu/generate.cuh: generation's forward pass on the GPU over a paged key-value cache, in
// float32 or bf16: infer.c's generator_forward with the GPU's launchers, written once as a
// template over floatX. infer_gpu.cu's device for the engine (gpt2/engine.h), and train_gpu's
// samples. It reads weights already on the GPU; the pool of pages and one pass's activations
// are its own, in floatX; each sequence's last logits go back to the host as float32.

#ifndef GPT2_GPU_GENERATE_CUH
#define GPT2_GPU_GENERATE_CUH

#include "../model.h"
#include "../engine.h"
#include "layers.cuh"  // every layer's launchers, both precisions

template <typename floatX>
struct GeneratorGPU {
    GPT2Config config;
    ParameterTensors params;      // float32, on the GPU: embeddings, layernorms, biases
    ParameterTensorsOf<floatX> w; // what the layers read: params, or with the bf16 copy's matrices
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

// A generator over a whole model's weights on the GPU: its float32 tensors `params` and the
// weights the layers read, w (params itself, or a bf16 copy's matrices: weights_over_copy), for
// passes of up to `slots` sequences and a pool of num_pages pages.
template <typename floatX>
static void generator_gpu_build(GeneratorGPU<floatX>* g, GPT2Config c, ParameterTensors params,
                                ParameterTensorsOf<floatX> w, int slots, int num_pages) {
    memset(g, 0, sizeof(*g));
    g->config = c;
    g->params = params;
    g->w = w;
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
                        (void**)&g->fch, (void**)&g->fch_gelu, (void**)&g->logits,
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

// ---------- forward over the pages ----------

// As infer.c's generator_forward, with the engine's device signature (ctx: a GeneratorGPU):
// runs the pass and writes each sequence's last logits to logits (B, Vp) on the host. The
// engine's passes are one whole prompt (B = 1) or one token of each sequence (T = 1), so those
// last tokens are consecutive rows. The stream alternates between x and x2, so that no product
// adds its residual in place.
template <typename floatX>
static void generator_gpu_forward(void* ctx, const EnginePass* pass, float* logits) {
    GeneratorGPU<floatX>* g = (GeneratorGPU<floatX>*)ctx;
    GPT2Config c = g->config;
    int B = pass->B, T = pass->T, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
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
    encoder_forward_at_gpu(g->x, g->tokens, g->pos, g->params.wte, g->params.wpe, B, T, C);
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
        ParameterTensorsOf<floatX> w = parameters_of_layer(g->w, c, l);
        lc.key = g->key + l * layer_pool;
        lc.value = g->value + l * layer_pool;
        // attention: x2 = x + attproj(attention(qkv(layernorm1(x))))
        layernorm_forward_gpu<floatX>(g->ln, g->ln_mean, g->ln_rstd, g->x, w.ln1w, w.ln1b, B, T, C);
        matmul_forward_gpu(g->qkv, g->ln, w.qkvw, w.qkvb, B, T, C, 3 * C);
        attention_paged_forward_gpu<floatX>(g->atty, &lc, g->qkv, B, T, C, NH);
        matmul_residual_forward_gpu(g->x2, g->atty, w.attprojw, w.attprojb, g->x, B, T, C, C);
        // MLP: x = x2 + fcproj(gelu(fc(layernorm2(x2))))
        layernorm_forward_gpu<floatX>(g->ln, g->ln_mean, g->ln_rstd, g->x2, w.ln2w, w.ln2b, B, T, C);
        matmul_gelu_forward_gpu(g->fch_gelu, g->fch, g->ln, w.fcw, w.fcb, B, T, C, 4 * C);
        matmul_residual_forward_gpu(g->x, g->fch_gelu, w.fcprojw, w.fcprojb, g->x2, B, T, 4 * C, C);
    }
    // the last token of each sequence: row T-1 of the one sequence, or every row
    const floatX* last = g->x + (size_t)(T - 1) * C;
    layernorm_forward_gpu<floatX>(g->ln, g->ln_mean, g->ln_rstd, last, g->params.lnfw, g->params.lnfb, B, 1, C);
    matmul_forward_gpu(g->logits, g->ln, g->w.wte, NULL, B, 1, C, Vp);  // tied to wte
    size_t n = (size_t)B * Vp;
    if (sizeof(floatX) == sizeof(float)) {
        cuda_check(cudaMemcpy(logits, g->logits, n * sizeof(float), cudaMemcpyDeviceToHost));
    } else {
        cuda_check(cudaMemcpy(g->logits_host, g->logits, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) logits[i] = bf16_to_float(g->logits_host[i]);
    }
}

// ---------- the generator as the engine's device ----------

// A generator (generator_gpu_build's arguments) as the engine's device (gpt2/engine.h): what
// infer_gpu runs and train_gpu's samples call. generator_gpu_device_free frees it.
template <typename floatX>
static EngineDevice generator_gpu_device(GPT2Config c, ParameterTensors params, ParameterTensorsOf<floatX> w,
                                         int slots, int num_pages) {
    GeneratorGPU<floatX>* g = (GeneratorGPU<floatX>*)malloc_check(sizeof(GeneratorGPU<floatX>));
    generator_gpu_build(g, c, params, w, slots, num_pages);
    EngineDevice device;
    device.ctx = g;
    device.forward = generator_gpu_forward<floatX>;
    return device;
}

template <typename floatX>
static void generator_gpu_device_free(EngineDevice* device) {
    generator_gpu_free((GeneratorGPU<floatX>*)device->ctx);
    free(device->ctx);
}

#endif // GPT2_GPU_GENERATE_CUH
