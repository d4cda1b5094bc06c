// infer.c: GPT-2 text generation with a key-value cache.
//
//   ./infer -e MODEL -p "PROMPT"     prints the continuation token by token; timings on stderr
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
//   prefill  the prompt's P tokens at once: every weight matrix multiplies a (P, C) block,
//            matrix-matrix (matmul_forward), so each weight read from memory is used P times
//            and the FMA units set the pace;
//   decode   one token per step: every weight matrix multiplies one vector, matrix-vector
//            (matvec_forward below). Each weight is read once for 2 floating-point operations,
//            so the speed is set by memory bandwidth: tokens/s <= bandwidth / bytes of weights.
//            dev/bench/bench_infer.sh measures how close we get (doc/infer.md).
//
// Everything else comes from the shared headers: the layers (gpt2/cpu_layers.h: encoder,
// layernorm, gelu, residual, softmax, matmul), the model, its transformer block (block_forward,
// the one training runs, gpt2/model.h) and its loading (gpt2/checkpoint.h), the tokenizer
// (gpt2/tokenizer.h), the random numbers. New here is only what the cache needs: the cache
// itself, attention against it, the matrix-vector product, and the sampler with its top-k /
// top-p filter.

#include "gpt2/cli.h"
#include "gpt2/cpu_layers.h"
#include "gpt2/model.h"
#include "gpt2/checkpoint.h"
#include "gpt2/random.h"
#include "gpt2/tokenizer.h"

// ---------- the cache ----------
// One allocation, carved into tensors by a table of sizes (as the model's activations).
// Besides the keys and values it holds the scratch activations of the tokens being processed,
// sized for up to maxT of them (a whole-context prompt); nothing is kept per layer, since there
// is no backward pass.

#define NUM_CACHE_TENSORS 12
typedef struct {
    float* key;       // (L, NH, maxT, hs) the keys of every position so far, per layer and head
    float* value;     // (L, NH, maxT, hs) the values, the same way
    float* x;         // (T, C) the residual stream of the T tokens being processed
    float* ln;        // (T, C) layernorm output
    float* ln_mean;   // (T)
    float* ln_rstd;   // (T)
    float* qkv;       // (T, 3*C)
    float* atty;      // (T, C) attention output
    float* proj;      // (T, C) output of attproj and of fcproj, before the residual add
    float* fch;       // (T, 4*C)
    float* fch_gelu;  // (T, 4*C)
    float* logits;    // (Vp) of the last position
} CacheTensors;

typedef struct {
    const GPT2* model;
    CacheTensors t;
    size_t sizes[NUM_CACHE_TENSORS];
    float* memory;
    int pos;          // positions filled: the next token goes to position pos
} KVCache;

void kvcache_build(KVCache* cache, const GPT2* model) {
    GPT2Config c = model->config;
    size_t L = c.num_layers, C = c.channels, maxT = c.max_seq_len, Vp = c.padded_vocab_size;
    size_t* s = cache->sizes;
    s[0] = L * maxT * C;   // key: NH heads of hs = C/NH channels each
    s[1] = L * maxT * C;   // value
    s[2] = maxT * C;       // x
    s[3] = maxT * C;       // ln
    s[4] = maxT;           // ln_mean
    s[5] = maxT;           // ln_rstd
    s[6] = maxT * 3 * C;   // qkv
    s[7] = maxT * C;       // atty
    s[8] = maxT * C;       // proj
    s[9] = maxT * 4 * C;   // fch
    s[10] = maxT * 4 * C;  // fch_gelu
    s[11] = Vp;            // logits
    cache->model = model;
    cache->memory = (float*)calloc_check(sum_sizes(s, NUM_CACHE_TENSORS), sizeof(float));
    point_tensors((float**)&cache->t, cache->memory, s, NUM_CACHE_TENSORS);
    cache->pos = 0;
}

// Forget the sequence: the next token goes to position 0 (the old keys are overwritten).
void kvcache_reset(KVCache* cache) {
    cache->pos = 0;
}

void kvcache_free(KVCache* cache) {
    free(cache->memory);
    memset(cache, 0, sizeof(*cache));
}

// ---------- layers the cache needs ----------

// out (OC) = weight (OC, C) . inp (C) + bias (OC); bias may be NULL. The per-token matmul.
// Every weight is used once, so the loop must stream the matrix from memory as fast as the
// memory system delivers it: each thread takes a contiguous block of rows (static schedule:
// long sequential reads that the hardware prefetcher follows), and the dot product is
// vectorised (`omp simd` lets the compiler reorder the sum into vector lanes, which plain C
// forbids without -ffast-math). inp is C floats and stays in L1 for the whole loop.
void matvec_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int C, int OC) {
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        const float* w = weight + (size_t)o * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int i = 0; i < C; i++) sum += w[i] * inp[i];
        out[o] = bias != NULL ? sum + bias[o] : sum;
    }
}

// out (B, T, OC) = inp (B, T, C) . weight (OC, C)^T + bias: matrix-matrix for a block of tokens
// (prefill), matrix-vector for the single token of a decode step.
void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    if ((size_t)B * T == 1) {
        matvec_forward(out, inp, weight, bias, C, OC);
    } else {
        matmul_forward(out, inp, weight, bias, B, T, C, OC);
    }
}

// Causal self-attention of T new tokens at positions pos..pos+T-1, with the keys and values of
// positions 0..pos-1 already in the cache. qkv (T, 3C) holds the new tokens' query, key and
// value; key and value (NH, maxT, hs) are this layer's cache; out (T, C).
// First the new keys and values join the cache, then each (token, head) attends to positions
// 0..its own, the same mask and scale as gpt2/cpu_layers.h's attention_forward. The softmax is the
// one-pass "online" form (Milakov & Gimelshein 2018, the idea behind FlashAttention): a running
// maximum m and sum s, with the output accumulated as we go and rescaled by exp(m_old - m_new)
// whenever the maximum grows. So no buffer of T x maxT scores is needed, and each cached key and
// value row is read once.
void attention_forward_cached(float* out, float* key, float* value, const float* qkv,
                              int pos, int T, int C, int NH, int maxT) {
    int C3 = 3 * C;
    int hs = C / NH;
    float scale = attention_scale(hs);
    // the cache holds each head's rows contiguously: a head's attention reads one block
    #pragma omp parallel for collapse(2)
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < NH; h++) {
            size_t row = ((size_t)h * maxT + pos + t) * hs;
            memcpy(key + row, qkv + (size_t)t * C3 + C + h * hs, hs * sizeof(float));
            memcpy(value + row, qkv + (size_t)t * C3 + 2 * C + h * hs, hs * sizeof(float));
        }
    }
    #pragma omp parallel for collapse(2)
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)t * C3 + h * hs;
            const float* k = key + (size_t)h * maxT * hs;
            const float* v = value + (size_t)h * maxT * hs;
            float* o = out + (size_t)t * C + h * hs;
            for (int i = 0; i < hs; i++) o[i] = 0.0f;
            float maxval = -INFINITY, sum = 0.0f;
            for (int t2 = 0; t2 <= pos + t; t2++) {
                const float* k2 = k + (size_t)t2 * hs;
                const float* v2 = v + (size_t)t2 * hs;
                float s = 0.0f;
                for (int i = 0; i < hs; i++) s += q[i] * k2[i];
                s *= scale;
                if (s > maxval) {  // rescale what we have to the new maximum (exp(-inf) = 0)
                    float r = expf(maxval - s);
                    sum *= r;
                    for (int i = 0; i < hs; i++) o[i] *= r;
                    maxval = s;
                }
                float w = expf(s - maxval);
                sum += w;
                for (int i = 0; i < hs; i++) o[i] += w * v2[i];
            }
            float inv = 1.0f / sum;
            for (int i = 0; i < hs; i++) o[i] *= inv;
        }
    }
}

// ---------- forward with the cache ----------

// The layers of generation: the CPU's, with the product turning into a matrix-vector one for a
// single token and attention against the cache; forward only.
static const Layers LAYERS_INFER = {
    .layernorm_fwd = layernorm_forward,
    .matmul_fwd = linear_forward,
    .gelu_fwd = gelu_forward,
    .residual_fwd = residual_forward,
    .attention_cached_fwd = attention_forward_cached,
};

// The block's activations for the tokens of one pass, in the cache's scratch tensors. Nothing is
// kept for a backward pass, so every layer runs in the same ones: the residual stream is updated
// in place (x is the block's input, residual2 and residual3), and the products before the two
// residual adds share proj.
static ActivationTensors kvcache_activations(const CacheTensors* t) {
    ActivationTensors a;
    memset(&a, 0, sizeof(a));
    a.encoded = a.residual2 = a.residual3 = t->x;
    a.ln1 = a.ln2 = a.lnf = t->ln;
    a.ln1_mean = a.ln2_mean = a.lnf_mean = t->ln_mean;
    a.ln1_rstd = a.ln2_rstd = a.lnf_rstd = t->ln_rstd;
    a.qkv = t->qkv;
    a.atty = t->atty;
    a.attproj = a.fcproj = t->proj;
    a.fch = t->fch;
    a.fch_gelu = t->fch_gelu;
    return a;
}

// Runs T tokens (positions cache->pos .. cache->pos+T-1) through the model, adding their keys
// and values to the cache. Returns the logits (Vp) of the last of them; with all_logits non-NULL
// also writes the logits of every one of the T positions there, (T, Vp) (the tests compare them
// with train_cpu.c's gpt2_forward). The padding logits V..Vp-1 are 0 (zero rows of wte).
// The caller has checked the tokens: ids below V, and pos + T within the context maxT.
float* kvcache_forward(KVCache* cache, const int* tokens, int T, float* all_logits) {
    GPT2Config cfg = cache->model->config;
    int Vp = cfg.padded_vocab_size, maxT = cfg.max_seq_len, C = cfg.channels;
    ParameterTensors p = cache->model->params;
    ActivationTensors a = kvcache_activations(&cache->t);
    size_t layer_cache = (size_t)maxT * C;  // one layer's keys: NH heads x maxT x hs
    // positions pos.. take rows pos.. of wpe
    encoder_forward(a.encoded, tokens, p.wte, p.wpe + (size_t)cache->pos * C, 1, T, C);
    for (int l = 0; l < cfg.num_layers; l++) {
        LayerCache lc = {cache->t.key + l * layer_cache, cache->t.value + l * layer_cache, cache->pos, maxT};
        block_forward(&LAYERS_INFER, parameters_of_layer(p, cfg, l), a, a.residual3, &lc, 1, T, C, cfg.num_heads);
    }
    layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.residual3, p.lnfw, p.lnfb, 1, T, C);
    // the output layer is tied to wte; generation needs only the last position's logits
    if (all_logits != NULL) {
        linear_forward(all_logits, a.lnf, p.wte, NULL, 1, T, C, Vp);
        memcpy(cache->t.logits, all_logits + (size_t)(T - 1) * Vp, (size_t)Vp * sizeof(float));
    } else {
        matvec_forward(cache->t.logits, a.lnf + (size_t)(T - 1) * C, p.wte, NULL, C, Vp);
    }
    cache->pos += T;
    return cache->t.logits;
}

// ---------- sampling ----------
// temperature 0 is greedy (argmax). Otherwise: probabilities = softmax(logits / temperature);
// top-k keeps the k most likely tokens; top-p (nucleus sampling, Holtzman et al. 2019) then
// keeps the smallest set of the most likely tokens whose probability reaches p; the kept
// probabilities are renormalised and sample_mult (gpt2/random.h) draws one with a uniform coin.

typedef struct {
    float prob;
    int id;
} Candidate;

// Most likely first; equal probabilities by lower id, so the order is total and the kept set
// does not depend on the sort algorithm (top-k 1 is then exactly greedy's lowest-id argmax).
static int candidate_before(Candidate a, Candidate b) {
    return a.prob > b.prob || (a.prob == b.prob && a.id < b.id);
}

static int candidate_compare(const void* a, const void* b) {
    Candidate x = *(const Candidate*)a, y = *(const Candidate*)b;
    return candidate_before(x, y) ? -1 : candidate_before(y, x) ? 1 : 0;
}

// Sift heap[i] down a heap of n candidates whose root is the one that comes last in the order.
static void heap_sift_down(Candidate* heap, int n, int i) {
    for (;;) {
        int worst = i, l = 2 * i + 1, r = 2 * i + 2;
        if (l < n && candidate_before(heap[worst], heap[l])) worst = l;
        if (r < n && candidate_before(heap[worst], heap[r])) worst = r;
        if (worst == i) return;
        Candidate tmp = heap[i];
        heap[i] = heap[worst];
        heap[worst] = tmp;
        i = worst;
    }
}

// Keeps in probs[0..n-1] (which sum to 1) only the tokens that top-k and then top-p select,
// renormalised to sum to 1; the others become 0. top_k 0 (or >= n) keeps all; top_p 1 keeps all.
// cand is scratch for n candidates. Returns how many tokens were kept.
int filter_top_k_top_p(float* probs, Candidate* cand, int n, int top_k, float top_p) {
    int m = 0;
    if (top_k > 0 && top_k < n) {
        // the k most likely in one pass, O(n log k): a heap of the best k so far whose root is
        // the least likely of them, replaced whenever a token beats it
        for (int i = 0; i < n; i++) {
            Candidate c;
            c.prob = probs[i];
            c.id = i;
            if (m < top_k) {
                cand[m++] = c;
                if (m == top_k) {
                    for (int j = m / 2 - 1; j >= 0; j--) heap_sift_down(cand, m, j);
                }
            } else if (candidate_before(c, cand[0])) {
                cand[0] = c;
                heap_sift_down(cand, m, 0);
            }
        }
    } else {
        // Sorting all n (50,257) tokens for every sampled token would be slow. A token with
        // probability below (1 - p) / (n - 1) cannot be in the nucleus (the trick of llama2.c):
        // if any token is at least that likely, the ones below number at most n - 1 and hold
        // less than 1 - p together, so the others hold more than p and the nucleus is among them.
        float cutoff = top_p < 1.0f && n > 1 ? (1.0f - top_p) / (float)(n - 1) : 0.0f;
        for (int pass = 0; pass < 2 && m == 0; pass++) {
            for (int i = 0; i < n; i++) {
                if (probs[i] >= cutoff) {
                    cand[m].prob = probs[i];
                    cand[m].id = i;
                    m++;
                }
            }
            cutoff = 0.0f;  // no token reached the cutoff (tiny p): take them all
        }
    }
    qsort(cand, (size_t)m, sizeof(Candidate), candidate_compare);
    // top-p applies to the distribution top-k left, renormalised: the nucleus must reach
    // p times the mass top-k kept (without top-k, the whole mass: 1)
    float target = top_p;
    if (top_k > 0 && top_k < n) {
        float total = 0.0f;
        for (int j = 0; j < m; j++) total += cand[j].prob;
        target = top_p * total;
    }
    int keep = m;
    if (top_p < 1.0f) {
        float cum = 0.0f;
        for (int j = 0; j < m; j++) {
            cum += cand[j].prob;
            if (cum >= target) {
                keep = j + 1;
                break;
            }
        }
    }
    float kept = 0.0f;
    for (int j = 0; j < keep; j++) kept += cand[j].prob;
    for (int i = 0; i < n; i++) probs[i] = 0.0f;
    for (int j = 0; j < keep; j++) probs[cand[j].id] = cand[j].prob / kept;
    return keep;
}

typedef struct {
    float temperature;   // 0: greedy
    int top_k;           // 0: off
    float top_p;         // 1: off
    uint64_t rng;        // state of random_u32 (gpt2/random.h)
    int V, Vp;
    float* scaled;       // (Vp) logits / temperature
    float* probs;        // (Vp)
    Candidate* cand;     // (V) scratch for the filter
} Sampler;

void sampler_build(Sampler* s, int V, int Vp, float temperature, int top_k, float top_p,
                   uint64_t seed) {
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->rng = seed_mix(seed, 0x1f3e, 0);  // not 0 (xorshift would stay 0), apart from dN's weights
    s->V = V;
    s->Vp = Vp;
    s->scaled = (float*)malloc_check((size_t)Vp * sizeof(float));
    s->probs = (float*)malloc_check((size_t)Vp * sizeof(float));
    s->cand = (Candidate*)malloc_check((size_t)V * sizeof(Candidate));
}

void sampler_free(Sampler* s) {
    free(s->scaled);
    free(s->probs);
    free(s->cand);
}

// The index of the largest of x[0..n-1]; the lowest such index on ties.
int argmax(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

// The next token from the logits (Vp) of the last position; only the first V are tokens.
int sampler_sample(Sampler* s, const float* logits) {
    if (s->temperature == 0.0f) return argmax(logits, s->V);
    for (int i = 0; i < s->V; i++) s->scaled[i] = logits[i] / s->temperature;
    softmax_forward(s->probs, s->scaled, 1, 1, s->V, s->Vp);
    if ((s->top_k > 0 && s->top_k < s->V) || s->top_p < 1.0f) {
        filter_top_k_top_p(s->probs, s->cand, s->V, s->top_k, s->top_p);
    }
    return sample_mult(s->probs, s->V, random_f32(&s->rng));
}

// ---------- main ----------
#ifndef INFER_NO_MAIN  // test/infer_check.c defines it to call the functions above

typedef struct {
    const char* model;       // -e
    const char* tokenizer;   // -k
    const char* prompt;      // -p; NULL: read stdin
    int max_new;             // -n; -1: until end-of-text or the context is full
    float temperature;       // -T
    int top_k;               // -K
    float top_p;             // -P
    uint64_t seed;           // -S
    int stop_at_eot;         // -E
} InferConfig;

static void infer_usage(const char* prog) {
    fprintf(stderr,
            "usage: %s -e MODEL [options]\n"
            "  -e MODEL  llm.c checkpoint (.bin, float32 or bfloat16), Hugging Face GPT-2\n"
            "            model.safetensors (dev/data/download_gpt2.sh), or dN: a fresh random model of N layers\n"
            "  -p TEXT   the prompt (default: read standard input)\n"
            "  -k FILE   tokenizer file (default data/gpt2_tokenizer.bin)\n"
            "  -n N      new tokens at most (default: until end-of-text or the context is full)\n"
            "  -T TEMP   temperature; 0 = greedy (default 1)\n"
            "  -K K      top-k: sample among the K most likely tokens; 0 = off (default 0)\n"
            "  -P P      top-p: among the most likely tokens that together reach P; 1 = off (default 1)\n"
            "  -S SEED   random seed for sampling (and for a dN model's weights) (default 1337)\n"
            "  -E 0      do not stop at end-of-text (default 1: stop)\n"
            "  -h        this help\n"
            "The continuation goes to standard output as it is generated; the prompt length and the\n"
            "prefill and generation speeds go to standard error.\n",
            prog);
}

static InferConfig infer_parse_args(int argc, char** argv) {
    InferConfig c;
    c.model = NULL;
    c.tokenizer = "data/gpt2_tokenizer.bin";
    c.prompt = NULL;
    c.max_new = -1;
    c.temperature = 1.0f;
    c.top_k = 0;
    c.top_p = 1.0f;
    c.seed = 1337;
    c.stop_at_eot = 1;
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        const char* val = flag_value(argc, argv, i);
        if (val == NULL) {
            infer_usage(argv[0]);
            exit(0);
        }
        switch (flag[1]) {
            case 'e': c.model = val; break;
            case 'k': c.tokenizer = val; break;
            case 'p': c.prompt = val; break;
            case 'n': c.max_new = parse_int_arg(flag, val, 1); break;
            case 'T': c.temperature = parse_float_arg(flag, val, 0.0f); break;
            case 'K': c.top_k = parse_int_arg(flag, val, 0); break;
            case 'P': c.top_p = parse_float_arg(flag, val, 0.0f); break;
            case 'S': c.seed = (uint64_t)parse_int_arg(flag, val, 0); break;
            case 'E': c.stop_at_eot = parse_int_arg(flag, val, 0); break;
            default: fail("unknown option %s (see -h)", flag);
        }
    }
    if (c.model == NULL) fail("no model: give -e MODEL (see -h)");
    if (c.top_p > 1.0f || c.top_p == 0.0f) fail("-P expects a probability in (0, 1], got %g", c.top_p);
    return c;
}

// All of standard input, as a NUL-terminated string.
static char* read_stdin(void) {
    size_t n = 0, cap = 4096;
    char* buf = (char*)malloc_check(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            cap *= 2;
            buf = (char*)realloc_check(buf, cap);
        }
    }
    if (ferror(stdin)) fail("cannot read the prompt from standard input: %s", strerror(errno));
    buf[n] = '\0';
    return buf;
}

// The prompt's tokens (*P of them, malloc'd): "<|endoftext|>" in it is the end-of-text token,
// and an empty prompt is end-of-text alone, as GPT-2 starts its unconditional samples. At least
// one position of the context must be left for generation.
static int* encode_prompt(const InferConfig* cfg, const Tokenizer* tok, int maxT, int* P) {
    char* text = cfg->prompt != NULL ? NULL : read_stdin();
    const char* prompt = cfg->prompt != NULL ? cfg->prompt : text;
    size_t n = 0;
    int* ids = tokenizer_encode(tok, (const unsigned char*)prompt, strlen(prompt), 1, &n);
    free(text);
    if (n >= (size_t)maxT) {
        fail("the prompt is %zu tokens; the model's context holds %d, and at least one must be left "
             "for generation", n, maxT);
    }
    if (n == 0) {
        free(ids);
        ids = (int*)malloc_check(sizeof(int));
        ids[n++] = tok->eot_token;
    }
    *P = (int)n;
    return ids;
}

// Decode: sample a token, print it, feed it back, each step one token through the model, until
// max_new tokens, or end-of-text when stop_at_eot. Returns how many were generated; *stop says why.
static int generate(KVCache* cache, Sampler* sampler, const Tokenizer* tok, const float* logits,
                    int max_new, int stop_at_eot, const char** stop, int* steps) {
    int generated = 0;
    *steps = 0;
    for (;;) {
        int next = sampler_sample(sampler, logits);
        if (next == tok->eot_token && stop_at_eot) {
            *stop = "end-of-text";
            return generated;
        }
        print_token(tok, next);
        fflush(stdout);
        generated++;
        if (generated == max_new) return generated;
        logits = kvcache_forward(cache, &next, 1, NULL);
        (*steps)++;
    }
}

int main(int argc, char** argv) {
    InferConfig cfg = infer_parse_args(argc, argv);
    GPT2 model;
    gpt2_build(&model, cfg.model, cfg.seed);
    GPT2Config mc = model.config;
    int maxT = mc.max_seq_len, V = mc.vocab_size;
    Tokenizer tok;
    tokenizer_init(&tok, cfg.tokenizer);
    if (tok.vocab_size > V) {
        fail("the tokenizer %s has %d tokens, more than the model's vocabulary (V=%d)", cfg.tokenizer,
             tok.vocab_size, V);
    }
    int P;
    int* tokens = encode_prompt(&cfg, &tok, maxT, &P);
    // the context holds the prompt and every generated token
    if (cfg.max_new > maxT - P) {
        fail("-n %d: the prompt (%d tokens) and %d new tokens exceed the model's context of %d "
             "tokens; use -n %d or less", cfg.max_new, P, cfg.max_new, maxT, maxT - P);
    }
    int max_new = cfg.max_new > 0 ? cfg.max_new : maxT - P;
    KVCache cache;
    kvcache_build(&cache, &model);
    Sampler sampler;
    sampler_build(&sampler, V, mc.padded_vocab_size, cfg.temperature, cfg.top_k, cfg.top_p, cfg.seed);

    double t0 = now_seconds();
    const float* logits = kvcache_forward(&cache, tokens, P, NULL);  // prefill: the whole prompt
    double prefill_time = now_seconds() - t0;
    const char* stop = cfg.max_new < 0 ? "context full" : "-n limit";
    int steps;
    t0 = now_seconds();
    int generated = generate(&cache, &sampler, &tok, logits, max_new, cfg.stop_at_eot, &stop, &steps);
    double decode_time = now_seconds() - t0;
    printf("\n");
    fflush(stdout);

    fprintf(stderr, "model: L=%d NH=%d C=%d V=%d maxT=%d, %zu parameters, %d threads\n", mc.num_layers,
            mc.num_heads, mc.channels, V, maxT, model.num_parameters, num_threads());
    fprintf(stderr, "prompt: %d tokens, prefill %.3f s, %.1f tok/s\n", P, prefill_time, P / prefill_time);
    fprintf(stderr, "generation: %d tokens (stop: %s), %d decode steps in %.3f s, %.2f tok/s\n", generated,
            stop, steps, decode_time, steps > 0 ? steps / decode_time : 0.0);
    sampler_free(&sampler);
    kvcache_free(&cache);
    free(tokens);
    tokenizer_free(&tok);
    gpt2_free(&model);
    return 0;
}

#endif // INFER_NO_MAIN
