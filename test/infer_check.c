// test/infer_check.c: checks infer.c against train_cpu.c and against PyTorch; exits non-zero on
// the first failed check, naming it.
//
//   infer_check kv              the KV-cache path against train_cpu.c's full forward on a random
//                               small model: logits at every position (prefill, single tokens,
//                               chunks), greedy and seeded generation, top-k 1 = greedy, the
//                               top-k / top-p filter; then the same in bf16 (-w bf16)
//   infer_check hf MODEL EXPECT a safetensors file written by dev/reference/hf_ref.py: the logits
//                               of both paths against PyTorch's (EXPECT)
//   infer_check same A B        two model files (anything -e reads) hold the same parameters,
//                               bit for bit: an export (infer --export) against its checkpoint

#define INFER_NO_MAIN
#include "../infer.c"        // the generator over a paged cache, the sampler
#define TRAIN_CPU_NO_MAIN
#include "../train_cpu.c"    // the full forward pass the cache must agree with

static int failures = 0;

static void check(int ok, const char* what) {
    printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

// max |a - b| / max |b| over n values: the error relative to the scale of the logits, so that
// logits near 0 do not make a meaningless per-element ratio. NaN never passes.
static double rel_err(const float* a, const float* b, size_t n) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= diff)) diff = d;  // NaN-safe: a NaN d replaces diff
        if (fabs((double)b[i]) > scale) scale = fabs((double)b[i]);
    }
    return scale > 0.0 ? diff / scale : diff;
}

// A random model whose every parameter matters: matrices std 0.1 (peaked attention), biases and
// layernorm parameters not 0 or 1. maxT 40, V 211 (padded to 256), 3 layers, 4 heads of 16.
static void build_random_model(GPT2* model, uint64_t seed) {
    GPT2Config c = gpt2_config(40, 211, 3, 4, 64, 256);  // maxT V L NH C Vp
    gpt2_build_fresh(model, c, seed);
    uint64_t rng = seed_mix(seed, 7, 7);
    for (size_t i = 0; i < model->num_parameters; i++) {
        model->params_memory[i] += 0.2f * (random_f32(&rng) - 0.5f) * 1.7f;
    }
    // wte's padding rows stay zero, as in every real checkpoint
    memset(model->params.wte + (size_t)c.vocab_size * c.channels, 0,
           (size_t)(c.padded_vocab_size - c.vocab_size) * c.channels * sizeof(float));
}

// One sequence in a generator of its own, through the pass the engine hands a device: its page
// table is a shuffled set of the pool's pages, so that positions that follow one another are
// never in pages that do.
typedef struct {
    Generator g;
    int pages[64];
    int pos;
    float* logits;  // (Vp)
} KVCache;

// bf16: the products in bf16, as infer -w bf16.
static void kvcache_build(KVCache* cache, const GPT2* model, int bf16) {
    GPT2Config c = model->config;
    int n = kv_pages_for(c.max_seq_len);
    if (n > 64) fail("kvcache_build: a test model of at most 64 pages");
    generator_build(&cache->g, model, 1, n + 3, bf16);
    uint64_t rng = 99;
    for (int i = 0; i < n; i++) cache->pages[i] = n + 2 - i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(random_u32(&rng) % (uint32_t)(i + 1)), tmp = cache->pages[i];
        cache->pages[i] = cache->pages[j];
        cache->pages[j] = tmp;
    }
    cache->pos = 0;
    cache->logits = (float*)malloc_check((size_t)c.padded_vocab_size * sizeof(float));
}

// Back to position 0, every key and value of the pool set to NaN: a pass that reads a position
// of the cache it has not written (a stale key or value left by the pass before, or one a step
// forgot to store) then gives NaN logits, which no check below lets through.
static void kvcache_reset(KVCache* cache) {
    cache->pos = 0;
    for (size_t i = 0; i < cache->g.sizes[0]; i++) cache->g.t.key[i] = NAN;
    for (size_t i = 0; i < cache->g.sizes[1]; i++) cache->g.t.value[i] = NAN;
}

static void kvcache_free(KVCache* cache) {
    generator_free(&cache->g);
    free(cache->logits);
}

// Runs tokens[0..T-1] at positions pos..pos+T-1; the logits of the last, and of all of them in
// all_logits (T, Vp) when not NULL.
static const float* kvcache_forward(KVCache* cache, const int* tokens, int T, float* all_logits) {
    EnginePass pass = engine_pass(1, T, tokens, &cache->pos, cache->pages, 64);
    cache->g.all_logits = all_logits;
    generator_forward(&cache->g, &pass, cache->logits);
    cache->pos += T;
    return cache->logits;
}

// Generates tokens[P..T-1] after the prompt tokens[0..P-1] with the cache (reset first) and a
// sampler, as infer's main does.
static void generate_tokens(KVCache* cache, Sampler* s, int* tokens, int P, int T) {
    kvcache_reset(cache);
    const float* l = kvcache_forward(cache, tokens, P, NULL);
    for (int t = P; t < T; t++) {
        tokens[t] = sampler_sample(s, l);
        if (t + 1 < T) l = kvcache_forward(cache, tokens + t, 1, NULL);
    }
}

// Logits (T, Vp) of train_cpu.c's full forward on tokens[0..T-1].
static const float* full_forward(GPT2* model, const int* tokens, int T) {
    gpt2_forward(model, tokens, NULL, 1, T);
    return model->acts.logits;
}

// The same with the products in bf16 (matmul_forward_bf16, bit for bit the rows of
// matmul_forward_packed_bf16): the pass without a cache that infer -w bf16 must agree with,
// written out as train_cpu.c's gpt2_forward runs it, over the activations that lays out.
static const float* full_forward_bf16(GPT2* model, const int* tokens, int T) {
    gpt2_forward(model, tokens, NULL, 1, T);  // lays the activations out for (1, T)
    GPT2Config c = model->config;
    int C = c.channels;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    encoder_forward(a.encoded, tokens, p.wte, p.wpe, 1, T, C);
    const float* x = a.encoded;
    for (int l = 0; l < c.num_layers; l++) {
        ParameterTensors w = parameters_of_layer(p, c, l);
        ActivationTensors al = activations_of_layer(a, c, 1, T, l);
        layernorm_forward(al.ln1, al.ln1_mean, al.ln1_rstd, x, w.ln1w, w.ln1b, 1, T, C);
        matmul_forward_bf16(al.qkv, al.ln1, w.qkvw, w.qkvb, 1, T, C, 3 * C);
        attention_forward(al.atty, al.preatt, al.att, al.qkv, 1, T, C, c.num_heads);
        matmul_forward_bf16(al.attproj, al.atty, w.attprojw, w.attprojb, 1, T, C, C);
        residual_forward(al.residual2, x, al.attproj, T * C);
        layernorm_forward(al.ln2, al.ln2_mean, al.ln2_rstd, al.residual2, w.ln2w, w.ln2b, 1, T, C);
        matmul_forward_bf16(al.fch, al.ln2, w.fcw, w.fcb, 1, T, C, 4 * C);
        gelu_forward(al.fch_gelu, al.fch, T * 4 * C);
        matmul_forward_bf16(al.fcproj, al.fch_gelu, w.fcprojw, w.fcprojb, 1, T, 4 * C, C);
        residual_forward(al.residual3, al.residual2, al.fcproj, T * C);
        x = al.residual3;
    }
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, x, p.lnfw, p.lnfb, 1, T, C);
    matmul_forward_bf16(a.logits, a.lnf, p.wte, NULL, 1, T, C, c.padded_vocab_size);
    return a.logits;
}

typedef const float* (*FullForward)(GPT2* model, const int* tokens, int T);

// 1-3: the cache's logits at every position against the full forward's (full, (T, Vp)), within
// tol, for a whole-sequence prefill, prefill then single tokens, and uneven chunks; and the last
// two against the first bit for bit (a position's logits are the same arithmetic whatever pass
// it comes in: batch-invariant products, attention one position at a time). name: the precision.
static void check_kv_logits(KVCache* cache, const int* tokens, const float* full, int T, int Vp, const char* name,
                            double tol) {
    float* kv = (float*)malloc_check((size_t)T * Vp * sizeof(float));
    float* prefill = (float*)malloc_check((size_t)T * Vp * sizeof(float));
    char what[256];
    // 1. prefill of the whole sequence: logits at every position
    kvcache_reset(cache);
    kvcache_forward(cache, tokens, T, prefill);
    double e = rel_err(prefill, full, (size_t)T * Vp);
    snprintf(what, sizeof(what), "%s: prefill of %d tokens = full forward at every position (rel err %.2e, allowed %.0e)",
             name, T, e, tol);
    check(e <= tol, what);

    // 2. prefill of P tokens, then one token at a time to the end of the context
    int prefixes[3] = {1, 7, T - 1};
    for (int k = 0; k < 3; k++) {
        int P = prefixes[k];
        kvcache_reset(cache);
        kvcache_forward(cache, tokens, P, kv);
        for (int t = P; t < T; t++) {
            const float* l = kvcache_forward(cache, tokens + t, 1, NULL);
            memcpy(kv + (size_t)t * Vp, l, (size_t)Vp * sizeof(float));
        }
        e = rel_err(kv, full, (size_t)T * Vp);
        int same = memcmp(kv, prefill, (size_t)T * Vp * sizeof(float)) == 0;
        snprintf(what, sizeof(what), "%s: prefill %d then %d single-token steps = full forward at every position (rel err %.2e), "
                 "= the whole prefill bit for bit (%s)", name, P, T - P, e, same ? "yes" : "no");
        check(e <= tol && same, what);
        check(cache->pos == T, "the cache counts its positions");
    }

    // 3. uneven chunks: 3, 5, 1, 9, ... tokens per call
    kvcache_reset(cache);
    int chunks[6] = {3, 5, 1, 9, 2, 20};
    for (int k = 0, t = 0; k < 6 && t < T; k++) {
        int n = chunks[k] < T - t ? chunks[k] : T - t;
        kvcache_forward(cache, tokens + t, n, kv + (size_t)t * Vp);
        t += n;
    }
    e = rel_err(kv, full, (size_t)T * Vp);
    int same = memcmp(kv, prefill, (size_t)T * Vp * sizeof(float)) == 0;
    snprintf(what, sizeof(what), "%s: chunks of 3, 5, 1, 9, 2, 20 tokens = full forward (rel err %.2e), = the whole "
             "prefill bit for bit (%s)", name, e, same ? "yes" : "no");
    check(e <= tol && same, what);
    free(kv);
    free(prefill);
}

// 4-5: generation after a 4-token prompt, greedy and sampled, against the argmax of the full
// forward (full) of the cache's precision (name).
static void check_kv_generation(GPT2* model, KVCache* cache, const int* tokens, int T, FullForward full,
                                const char* name) {
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    char what[256];
    // 4. greedy generation: deterministic, and each token the argmax of the full forward
    int P = 4, n = T - P;
    int* gen = (int*)malloc_check((size_t)T * sizeof(int));
    int* gen2 = (int*)malloc_check((size_t)T * sizeof(int));
    Sampler greedy;
    sampler_build(&greedy, V, Vp, 0.0f, 0, 1.0f, 1);
    for (int run = 0; run < 2; run++) {
        int* out = run == 0 ? gen : gen2;
        memcpy(out, tokens, (size_t)P * sizeof(int));
        generate_tokens(cache, &greedy, out, P, T);
    }
    snprintf(what, sizeof(what), "%s: greedy generation is deterministic", name);
    check(memcmp(gen, gen2, (size_t)T * sizeof(int)) == 0, what);
    int agree = 1;
    for (int t = P; t < T; t++) {
        const float* l = full(model, gen, t) + (size_t)(t - 1) * Vp;
        int best = argmax(l, V);
        // a different argmax is acceptable only for a tie within float rounding
        if (best != gen[t] && l[best] - l[gen[t]] > 1e-5f * fabsf(l[best])) {
            printf("  step %d: KV cache chose %d (logit %.7f), full forward argmax %d (%.7f)\n",
                   t, gen[t], l[gen[t]], best, l[best]);
            agree = 0;
        }
    }
    snprintf(what, sizeof(what), "%s: greedy generation of %d tokens = argmax of the full forward at each step", name, n);
    check(agree, what);

    // 5. seeded sampling: the same seed gives the same tokens, another seed others;
    //    top-k 1 at temperature 1 (any seed) gives exactly the greedy tokens
    int* s1 = (int*)malloc_check((size_t)T * sizeof(int));
    int* s2 = (int*)malloc_check((size_t)T * sizeof(int));
    int* s3 = (int*)malloc_check((size_t)T * sizeof(int));
    int* s4 = (int*)malloc_check((size_t)T * sizeof(int));
    int* outs[4] = {s1, s2, s3, s4};
    uint64_t seeds[4] = {5, 5, 6, 77};
    int top_ks[4] = {0, 0, 0, 1};
    for (int run = 0; run < 4; run++) {
        Sampler s;
        sampler_build(&s, V, Vp, 1.0f, top_ks[run], run == 1 ? 0.95f : 1.0f, seeds[run]);
        if (run == 1) s.top_p = 1.0f;  // same settings as run 0 (built through another path)
        int* out = outs[run];
        memcpy(out, tokens, (size_t)P * sizeof(int));
        generate_tokens(cache, &s, out, P, T);
        sampler_free(&s);
    }
    check(memcmp(s1, s2, (size_t)T * sizeof(int)) == 0, "sampling with the same seed gives the same tokens");
    check(memcmp(s1, s3, (size_t)T * sizeof(int)) != 0, "sampling with another seed gives other tokens");
    check(memcmp(s1, gen, (size_t)T * sizeof(int)) != 0, "sampling at temperature 1 is not greedy");
    check(memcmp(s4, gen, (size_t)T * sizeof(int)) == 0, "top-k 1 at temperature 1 = greedy");
    sampler_free(&greedy);
    free(s1); free(s2); free(s3); free(s4);
    free(gen); free(gen2);
}

// The cache in float32 against train_cpu.c's forward, then in bf16 against the same forward with
// its products in bf16; and bf16's logits against float32's: not equal (the products are bf16),
// within bf16's rounding.
static void check_kv(void) {
    GPT2 model;
    build_random_model(&model, 42);
    GPT2Config c = model.config;
    int T = c.max_seq_len, Vp = c.padded_vocab_size, V = c.vocab_size;
    int* tokens = (int*)malloc_check((size_t)T * sizeof(int));
    uint64_t rng = 99;
    for (int i = 0; i < T; i++) tokens[i] = (int)(random_u32(&rng) % (uint32_t)V);
    float* full = (float*)malloc_check((size_t)T * Vp * sizeof(float));
    float* full16 = (float*)malloc_check((size_t)T * Vp * sizeof(float));
    memcpy(full, full_forward(&model, tokens, T), (size_t)T * Vp * sizeof(float));
    memcpy(full16, full_forward_bf16(&model, tokens, T), (size_t)T * Vp * sizeof(float));
    KVCache cache;
    kvcache_build(&cache, &model, 0);
    check_kv_logits(&cache, tokens, full, T, Vp, "fp32", 1e-5);
    check_kv_generation(&model, &cache, tokens, T, full_forward, "fp32");
    kvcache_free(&cache);

    kvcache_build(&cache, &model, 1);
    // The cache's attention (attention_forward_paged: one pass, running maximum) and the full
    // forward's (two passes over the scores) differ in float32's last bits; in bf16 such a
    // difference can move an input of the next product across a bf16 rounding boundary, a
    // change of 2^-8 in one value that the layers after it carry to every later position (seen
    // on AMX's products: from the 8th position on, 3e-3 relative). So in bf16 the cache is held
    // to the full forward within bf16's rounding, and to its own prefill bit for bit.
    check_kv_logits(&cache, tokens, full16, T, Vp, "bf16", 1e-2);
    check_kv_generation(&model, &cache, tokens, T, full_forward_bf16, "bf16");
    // bf16 keeps 8 bits of significand: each rounding errs by up to 2^-9 relative, and the
    // logits pass through 2L+1 products of them
    double e = rel_err(full16, full, (size_t)T * Vp);
    char what[256];
    snprintf(what, sizeof(what), "bf16 logits differ from float32's, within 2e-2 (rel err %.2e)", e);
    check(e > 0.0 && e <= 2e-2, what);
    kvcache_free(&cache);
    free(full);
    free(full16);
    free(tokens);
    gpt2_free(&model);
}

// Which ids a filter kept, as a bitmask over n <= 32, with the kept probabilities summing to 1.
static unsigned kept_mask(const float* probs, int n, double* sum) {
    unsigned mask = 0;
    *sum = 0.0;
    for (int i = 0; i < n; i++) {
        if (probs[i] > 0.0f) mask |= 1u << i;
        *sum += probs[i];
    }
    return mask;
}

static void check_filter_case(const float* p, int n, int top_k, float top_p, unsigned expect,
                              const char* why) {
    float probs[32];
    Candidate cand[32];
    memcpy(probs, p, (size_t)n * sizeof(float));
    int kept = filter_top_k_top_p(probs, cand, n, top_k, top_p);
    double sum;
    unsigned mask = kept_mask(probs, n, &sum);
    int expect_count = 0;
    for (int i = 0; i < n; i++) expect_count += (expect >> i) & 1;
    int ok = mask == expect && kept == expect_count && fabs(sum - 1.0) < 1e-6;
    // the kept tokens keep their relative probabilities
    for (int i = 0; i < n && ok; i++) {
        for (int j = 0; j < n && ok; j++) {
            if (probs[i] > 0.0f && probs[j] > 0.0f) ok = fabsf(probs[i] * p[j] - probs[j] * p[i]) < 1e-6f;
        }
    }
    char what[256];
    snprintf(what, sizeof(what), "filter top_k=%d top_p=%g keeps %#x (got %#x): %s", top_k,
             top_p, expect, mask, why);
    check(ok, what);
}

// The nucleus by brute force: sort everything, take the smallest prefix reaching p.
static void check_filter_large(int n, float top_p, uint64_t seed) {
    float* p = (float*)malloc_check((size_t)n * sizeof(float));
    float* probs = (float*)malloc_check((size_t)n * sizeof(float));
    Candidate* cand = (Candidate*)malloc_check((size_t)n * sizeof(Candidate));
    Candidate* all = (Candidate*)malloc_check((size_t)n * sizeof(Candidate));
    uint64_t rng = seed;
    double total = 0.0;
    for (int i = 0; i < n; i++) {  // a long-tailed distribution, like a language model's
        float u = random_f32(&rng);
        p[i] = expf(12.0f * u * u * u);
        total += p[i];
    }
    for (int i = 0; i < n; i++) p[i] = (float)(p[i] / total);
    memcpy(probs, p, (size_t)n * sizeof(float));
    int kept = filter_top_k_top_p(probs, cand, n, 0, top_p);
    for (int i = 0; i < n; i++) { all[i].prob = p[i]; all[i].id = i; }
    qsort(all, (size_t)n, sizeof(Candidate), candidate_compare);
    float cum = 0.0f;
    int expect = n;
    for (int i = 0; i < n; i++) {
        cum += all[i].prob;
        if (cum >= top_p) { expect = i + 1; break; }
    }
    int ok = kept == expect;
    for (int i = 0; i < expect && ok; i++) ok = probs[all[i].id] > 0.0f;
    char what[256];
    snprintf(what, sizeof(what), "filter on %d tokens, top_p=%g: the brute-force nucleus (%d tokens, got %d)",
             n, top_p, expect, kept);
    check(ok, what);
    free(p); free(probs); free(cand); free(all);
}

static void check_filter(void) {
    // five tokens, shuffled so the filter must sort: by probability 3 > 0 > 4 > 1 > 2
    const float p[5] = {0.2f, 0.1f, 0.05f, 0.5f, 0.15f};
    check_filter_case(p, 5, 0, 1.0f, 0x1f, "top_p 1 keeps all");
    check_filter_case(p, 5, 0, 0.5f, 1u << 3, "0.5 alone reaches p = 0.5");
    check_filter_case(p, 5, 0, 0.4f, 1u << 3, "the most likely token alone exceeds p");
    check_filter_case(p, 5, 0, 0.6f, (1u << 3) | 1u, "0.5 + 0.2 is the smallest set reaching 0.6");
    check_filter_case(p, 5, 0, 0.8f, (1u << 3) | 1u | (1u << 4), "0.5 + 0.2 + 0.15 reaches 0.8");
    check_filter_case(p, 5, 0, 0.99f, 0x1f, "the four most likely hold 0.95 < 0.99: all five");
    check_filter_case(p, 5, 0, 1e-6f, 1u << 3, "a tiny p keeps the most likely token");
    check_filter_case(p, 5, 1, 1.0f, 1u << 3, "top-k 1 is the argmax");
    check_filter_case(p, 5, 2, 1.0f, (1u << 3) | 1u, "top-k 2");
    check_filter_case(p, 5, 5, 1.0f, 0x1f, "top-k n keeps all");
    // top-k 3 leaves 0.5, 0.2, 0.15 (sum 0.85): renormalised 0.588, 0.235, 0.176; p = 0.8
    // is reached by the first two (0.824), where without top-k it needs three (0.5+0.2 < 0.8)
    check_filter_case(p, 5, 3, 0.8f, (1u << 3) | 1u, "top-p applies after top-k, renormalised");
    const float tie[4] = {0.25f, 0.25f, 0.25f, 0.25f};
    check_filter_case(tie, 4, 2, 1.0f, 0x3, "ties go to the lower ids");
    check_filter_case(tie, 4, 0, 0.5f, 0x3, "ties go to the lower ids (top-p)");
    check_filter_large(50257, 0.9f, 1);
    check_filter_large(50257, 0.5f, 2);
    check_filter_large(1000, 0.999f, 3);
}

// ---------- Hugging Face safetensors against PyTorch ----------

static void check_hf(const char* model_path, const char* expect_path) {
    const double tol = 1e-4;  // float32 C against float32 PyTorch: different summation orders
    GPT2 model;
    gpt2_build_from_file(&model, model_path);
    GPT2Config c = model.config;
    printf("loaded %s: maxT=%d V=%d Vp=%d L=%d NH=%d C=%d\n", model_path, c.max_seq_len,
           c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
    FILE* f = fopen_check(expect_path, "rb");
    int32_t tv[2];
    fread_check(tv, sizeof(int32_t), 2, f, expect_path);
    int T = tv[0], V = tv[1], Vp = c.padded_vocab_size;
    check(V == c.vocab_size, "V from the file = V of the PyTorch model");
    if (V != c.vocab_size || T > c.max_seq_len) exit(1);
    int* tokens = (int*)malloc_check((size_t)T * sizeof(int));
    float* ref = (float*)malloc_check((size_t)T * V * sizeof(float));
    fread_check(tokens, sizeof(int32_t), (size_t)T, f, expect_path);
    fread_check(ref, sizeof(float), (size_t)T * V, f, expect_path);
    fclose(f);

    // compare the first V columns of (T, Vp) logits
    float* got = (float*)malloc_check((size_t)T * V * sizeof(float));
    const float* full = full_forward(&model, tokens, T);
    for (int t = 0; t < T; t++) memcpy(got + (size_t)t * V, full + (size_t)t * Vp, (size_t)V * sizeof(float));
    double e = rel_err(got, ref, (size_t)T * V);
    char what[256];
    snprintf(what, sizeof(what), "train_cpu.c full forward = PyTorch on %d tokens (rel err %.2e)", T, e);
    check(e <= tol, what);

    KVCache cache;
    kvcache_build(&cache, &model, 0);
    kvcache_forward(&cache, tokens, T / 2, NULL);
    for (int t = T / 2; t < T; t++) {
        const float* l = kvcache_forward(&cache, tokens + t, 1, NULL);
        memcpy(got + (size_t)t * V, l, (size_t)V * sizeof(float));
    }
    e = rel_err(got + (size_t)(T / 2) * V, ref + (size_t)(T / 2) * V, (size_t)(T - T / 2) * V);
    snprintf(what, sizeof(what), "KV-cache decode steps = PyTorch (rel err %.2e)", e);
    check(e <= tol, what);
    // the padding rows of wte must be zero: their logits are exactly 0
    int pad_zero = 1;
    for (int i = V; i < Vp; i++) pad_zero &= full[i] == 0.0f;
    check(pad_zero, "wte padded with zero rows up to Vp");
    kvcache_free(&cache);
    free(tokens); free(ref); free(got);
    gpt2_free(&model);
}

// ---------- two files, one model ----------

static void check_same(const char* a_path, const char* b_path) {
    GPT2 a, b;
    gpt2_build_from_file(&a, a_path);
    gpt2_build_from_file(&b, b_path);
    GPT2Config x = a.config, y = b.config;
    char what[512];
    snprintf(what, sizeof(what), "the same shape: maxT=%d/%d V=%d/%d Vp=%d/%d L=%d/%d NH=%d/%d C=%d/%d", x.max_seq_len,
             y.max_seq_len, x.vocab_size, y.vocab_size, x.padded_vocab_size, y.padded_vocab_size, x.num_layers,
             y.num_layers, x.num_heads, y.num_heads, x.channels, y.channels);
    check(memcmp(&x, &y, sizeof(x)) == 0, what);
    if (memcmp(&x, &y, sizeof(x)) == 0) {
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            const float* p = ((float* const*)&a.params)[i];
            const float* q = ((float* const*)&b.params)[i];
            size_t n = a.param_sizes[i], differ = 0;
            for (size_t j = 0; j < n; j++) differ += memcmp(&p[j], &q[j], sizeof(float)) != 0;
            if (differ) snprintf(what, sizeof(what), "%s: %zu of %zu values differ", PARAMETERS[i].name, differ, n);
            else snprintf(what, sizeof(what), "%s: all %zu values the same bit for bit", PARAMETERS[i].name, n);
            check(differ == 0, what);
        }
    }
    gpt2_free(&a);
    gpt2_free(&b);
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "kv") == 0) {
        check_kv();
        check_filter();
    } else if (argc == 4 && strcmp(argv[1], "hf") == 0) {
        check_hf(argv[2], argv[3]);
    } else if (argc == 4 && strcmp(argv[1], "same") == 0) {
        check_same(argv[2], argv[3]);
    } else {
        fprintf(stderr, "usage: infer_check kv | infer_check hf MODEL.safetensors EXPECT | infer_check same A B\n");
        return 2;
    }
    printf("%s\n", failures == 0 ? "all checks passed" : "SOME CHECKS FAILED");
    return failures == 0 ? 0 : 1;
}
