// gpt2/engine.h: generation for many requests at once, the same on every device (infer.c,
// infer_gpu.cu): continuous batching (Yu et al. 2022, "Orca"), the page tables of the paged
// key-value cache, sampling, and the results in the order asked. doc/infer.md, "How it works".

// Why batch: a decode step of one sequence reads every weight for one multiply-add; n sequences
// share each read, so up to the arithmetic's limit they cost about what one does. Every step
// admits waiting requests into free slots (their prompts prefilled alone, B = 1), then decodes
// the last token of each active sequence (T = 1) in one batched product per weight; the engine
// samples each from its own sampler and seed.

// Batch invariance: a request's tokens never depend on what else runs: its prefill is alone, each
// row of a decode step is computed in an order of its own (the CPU promises it bit for bit,
// gpt2/cpu_math.h), and its sampler is its own.

#ifndef GPT2_ENGINE_H
#define GPT2_ENGINE_H

#include "io.h"
#include "model.h"
#include "kv_pages.h"
#include "requests.h"
#include "sampler.h"
#include "tokenizer.h"

// What the device runs: T tokens of each of B sequences (see the header comment).
typedef struct {
    int B, T;
    const int* tokens;   // (B, T)
    const int* pos;      // (B) positions each sequence holds before this pass
    const int* pages;    // (B, max_pages) their page tables
    int max_pages;
    int max_len;         // the largest pos[b] + T
    int prefill;         // 1: every pos[b] is 0, whole prompts
} EnginePass;

// The pass of T tokens of each of B sequences at positions pos (B), with their page tables
// (B, max_pages); how far it reaches and whether it is a prefill follow from pos.
static inline EnginePass engine_pass(int B, int T, const int* tokens, const int* pos, const int* pages,
                                     int max_pages) {
    EnginePass p = {.B = B, .T = T, .tokens = tokens, .pos = pos, .pages = pages, .max_pages = max_pages,
                    .max_len = 0, .prefill = 1};
    for (int b = 0; b < B; b++) {
        if (pos[b] + T > p.max_len) p.max_len = pos[b] + T;
        if (pos[b] != 0) p.prefill = 0;
    }
    return p;
}

// A device: its forward pass over the pages it holds, writing each sequence's last logits,
// (B, Vp) floats, to logits in host memory.
typedef struct {
    void* ctx;
    void (*forward)(void* ctx, const EnginePass* pass, float* logits);
} EngineDevice;

// A request in a slot, from admission to its end.
typedef struct {
    Request req;
    Sampler sampler;
    int P;               // prompt tokens
    int max_new;         // tokens it may generate
    int len;             // positions in its cache
    int* pages;          // (max_pages) its page table: kv_pages_for(len) of them taken
    int promised;        // pages promised and not yet taken
    int next;            // the token sampled last, not yet run through the model
    int generated;
    unsigned char* text; // its completion so far, the bytes of its tokens
    size_t text_len, text_cap;
    double first_token;  // seconds since the start, when its first token was sampled
} Sequence;

// A request's answer; in order (Engine.in_order), kept until every request before it has been
// answered.
typedef struct {
    int done;
    int failed;
    Request req;         // the error record's line and message when failed
    unsigned char* text;
    size_t text_len;
    int prompt_tokens, completion_tokens;
    const char* finish_reason;  // "stop" (end-of-text or a stop string), "length" (max_tokens or
                                // the context), or "cancelled" (engine_cancel)
    double ttft_ms, total_ms;
} EngineResult;

// Called with every token a sequence generates, as it is generated (the single-prompt mode
// prints them; a token that completes a stop string is not handed on), and with every answer,
// in the order of the requests or as each is done (in_order); NULL: none.
typedef void (*EngineTokenFn)(void* user, const Request* req, int token);
typedef void (*EngineResultFn)(void* user, const EngineResult* result);

typedef struct {
    const GPT2Config* config;
    const Tokenizer* tok;
    EngineDevice device;
    int slots;               // sequences decoded together at most (-b)
    int max_pages;           // pages of one whole context
    int stop_at_eot;         // -E
    int in_order;            // 1 (the default): answers handed on in the order of the requests'
                             // ids (a file's); 0: each as soon as it is done (a server's)
    PagePool pool;
    Sequence* seq;           // (slots); seq[i].req.prompt == NULL: the slot is free
    int active;
    // the pass handed to the device, and the logits it returns
    int* pass_tokens;        // (max(slots, maxT))
    int* pass_pos;           // (slots)
    int* pass_pages;         // (slots, max_pages)
    int* pass_slot;          // (slots) the slot of each sequence in the pass
    float* logits;           // (slots, Vp)
    // answers in input order
    EngineResult* results;   // results[id - first_pending] for the requests read, not yet written
    int first_pending, num_pending, results_cap;
    EngineTokenFn on_token;
    EngineResultFn on_result;
    void* user;
    double start;
    // counts for the report
    int requests, failed, prompt_tokens, completion_tokens, decode_steps, prefills;
    double prefill_seconds, decode_seconds;
    int peak_batch;
} Engine;

// The pool's default size: every slot can hold a whole context, unless that is more than
// ENGINE_DEFAULT_POOL_BYTES of keys and values; but always at least one whole context, so that
// any request that fits the model fits the pool.
#define ENGINE_DEFAULT_POOL_BYTES ((size_t)2 << 30)

static inline size_t engine_page_bytes(GPT2Config c, size_t value_bytes) {
    return 2 * (size_t)c.num_layers * KV_PAGE * c.channels * value_bytes;  // keys and values
}

static inline int engine_default_pages(GPT2Config c, int slots, size_t value_bytes) {
    int context = kv_pages_for(c.max_seq_len);
    size_t fit = ENGINE_DEFAULT_POOL_BYTES / engine_page_bytes(c, value_bytes);
    size_t want = (size_t)slots * context;
    if (want > fit) want = fit;
    if (want < (size_t)context) want = context;
    return (int)want;
}

static inline void engine_build(Engine* e, const GPT2Config* config, const Tokenizer* tok, EngineDevice device,
                         int slots, int num_pages, int stop_at_eot) {
    memset(e, 0, sizeof(*e));
    e->config = config;
    e->tok = tok;
    e->device = device;
    e->slots = slots;
    e->max_pages = kv_pages_for(config->max_seq_len);
    e->stop_at_eot = stop_at_eot;
    e->in_order = 1;
    page_pool_build(&e->pool, num_pages);
    e->seq = (Sequence*)calloc_check((size_t)slots, sizeof(Sequence));
    for (int i = 0; i < slots; i++) {
        e->seq[i].pages = (int*)malloc_check((size_t)e->max_pages * sizeof(int));
    }
    int rows = slots > config->max_seq_len ? slots : config->max_seq_len;
    e->pass_tokens = (int*)malloc_check((size_t)rows * sizeof(int));
    e->pass_pos = (int*)malloc_check((size_t)slots * sizeof(int));
    e->pass_pages = (int*)malloc_check((size_t)slots * e->max_pages * sizeof(int));
    e->pass_slot = (int*)malloc_check((size_t)slots * sizeof(int));
    e->logits = (float*)malloc_check((size_t)slots * config->padded_vocab_size * sizeof(float));
    e->start = now_seconds();
}

static inline void engine_free(Engine* e) {
    for (int i = 0; i < e->slots; i++) {
        free(e->seq[i].pages);
        free(e->seq[i].text);
        if (e->seq[i].req.prompt != NULL) {
            request_free(&e->seq[i].req);
            sampler_free(&e->seq[i].sampler);
        }
    }
    for (int i = 0; i < e->num_pending; i++) {
        request_free(&e->results[i].req);
        free(e->results[i].text);
    }
    free(e->seq);
    free(e->pass_tokens);
    free(e->pass_pos);
    free(e->pass_pages);
    free(e->pass_slot);
    free(e->logits);
    free(e->results);
    page_pool_free(&e->pool);
    memset(e, 0, sizeof(*e));
}

// ---------- answers, in the order asked ----------

static inline EngineResult* engine_result(Engine* e, int id) {
    return &e->results[id - e->first_pending];
}

// A place for the answer of request id (ids come in order).
static inline void engine_expect(Engine* e, int id) {
    if (id != e->first_pending + e->num_pending) fail("engine: request %d out of order (a bug)", id);
    if (e->num_pending == e->results_cap) {
        e->results_cap = e->results_cap == 0 ? 16 : 2 * e->results_cap;
        e->results = (EngineResult*)realloc_check(e->results, (size_t)e->results_cap * sizeof(EngineResult));
    }
    memset(&e->results[e->num_pending++], 0, sizeof(EngineResult));
}

// Hands on the answers that are complete and have no unanswered request before them.
static inline void engine_flush(Engine* e) {
    int n = 0;
    while (n < e->num_pending && e->results[n].done) {
        EngineResult* r = &e->results[n];
        if (e->on_result != NULL) e->on_result(e->user, r);
        request_free(&r->req);
        free(r->text);
        n++;
    }
    memmove(e->results, e->results + n, (size_t)(e->num_pending - n) * sizeof(EngineResult));
    e->num_pending -= n;
    e->first_pending += n;
}

// A request that cannot run: its error record, in its turn. Takes over req.
// An answer is complete: in order, it waits for those before it; else it is handed on now.
static inline void engine_done(Engine* e, const EngineResult* result) {
    if (e->in_order) {
        *engine_result(e, result->req.id) = *result;
        engine_flush(e);
        return;
    }
    EngineResult r = *result;
    if (e->on_result != NULL) e->on_result(e->user, &r);
    request_free(&r.req);
    free(r.text);
}

static inline void engine_reject(Engine* e, Request* req) {
    if (e->in_order) engine_expect(e, req->id);
    EngineResult r;
    memset(&r, 0, sizeof(r));
    r.done = 1;
    r.failed = 1;
    r.req = *req;
    memset(req, 0, sizeof(*req));
    e->requests++;
    e->failed++;
    engine_done(e, &r);
}

// ---------- sequences ----------

// The bytes of token join the sequence's text; a token of the model's vocabulary that the
// tokenizer does not have (a model with a larger V) has none.
static inline void sequence_append_text(Sequence* s, const Tokenizer* tok, int token) {
    size_t n;
    const unsigned char* bytes = tokenizer_decode(tok, (uint32_t)token, &n);
    if (bytes == NULL || n == 0) return;
    if (s->text_len + n > s->text_cap) {
        s->text_cap = 2 * (s->text_len + n) + 64;
        s->text = (unsigned char*)realloc_check(s->text, s->text_cap);
    }
    memcpy(s->text + s->text_len, bytes, n);
    s->text_len += n;
}

// Positions len..len+T-1 are about to be filled: take the pages they cross into.
static inline void sequence_grow(Engine* e, Sequence* s, int T) {
    int have = kv_pages_for(s->len), need = kv_pages_for(s->len + T);
    for (int i = have; i < need; i++) {
        s->pages[i] = page_pool_take(&e->pool);
        s->promised--;
    }
}

// The sequence in slot i has ended: its answer is complete, its pages go back to the pool.
static inline void engine_finish(Engine* e, int i, const char* finish_reason) {
    Sequence* s = &e->seq[i];
    EngineResult r;
    memset(&r, 0, sizeof(r));
    r.done = 1;
    r.req = s->req;
    r.text = s->text;
    r.text_len = s->text_len;
    r.prompt_tokens = s->P;
    r.completion_tokens = s->generated;
    r.finish_reason = finish_reason;
    r.ttft_ms = 1000.0 * s->first_token;
    r.total_ms = 1000.0 * (now_seconds() - e->start);
    e->completion_tokens += s->generated;
    page_pool_release(&e->pool, s->pages, kv_pages_for(s->len), s->promised);
    sampler_free(&s->sampler);
    s->text = NULL;
    s->text_len = s->text_cap = 0;
    memset(&s->req, 0, sizeof(s->req));
    e->active--;
    engine_done(e, &r);
}

// Ends the sequence in slot i before its time (a server's client has gone): its slot and pages
// are free for the next step; its answer, what it has so far, says "cancelled".
static inline void engine_cancel(Engine* e, int i) {
    engine_finish(e, i, "cancelled");
}

// Where the first of the sequence's stop strings begins in its text, if one ends after byte
// `before` (the text's length before its last token); -1 if none does. Every stop string was
// looked for after the tokens before, so only one that the last token completes can be new.
static inline long sequence_stop_at(const Sequence* s, size_t before) {
    long at = -1;
    for (int k = 0; k < s->req.num_stop; k++) {
        size_t n = s->req.stop_len[k];
        if (n > s->text_len) continue;
        size_t first = before >= n ? before - n + 1 : 0;
        for (size_t j = first; j + n <= s->text_len && (at < 0 || j < (size_t)at); j++) {
            if (memcmp(s->text + j, s->req.stop[k], n) == 0) {
                at = (long)j;
                break;
            }
        }
    }
    return at;
}

// A token sampled for the sequence in slot i: it ends the sequence (end-of-text, or the last
// it may generate) or waits to be run through the model at the next step.
static inline void engine_take_token(Engine* e, int i, int token) {
    Sequence* s = &e->seq[i];
    if (s->generated == 0) s->first_token = now_seconds() - e->start;
    if (token == e->tok->eot_token && e->stop_at_eot) {
        engine_finish(e, i, "stop");
        return;
    }
    s->generated++;
    size_t before = s->text_len;
    sequence_append_text(s, e->tok, token);
    long stop = sequence_stop_at(s, before);
    if (stop >= 0) {  // the completion ends before its stop string
        s->text_len = (size_t)stop;
        engine_finish(e, i, "stop");
        return;
    }
    if (e->on_token != NULL) e->on_token(e->user, &s->req, token);
    if (s->generated == s->max_new) {
        engine_finish(e, i, "length");
        return;
    }
    s->next = token;
}

// ---------- admission and prefill ----------

// The prompt of req as tokens (*n of them, malloc'd): "<|endoftext|>" in it is the end-of-text
// token, and an empty prompt is end-of-text alone, as GPT-2 starts its unconditional samples.
static inline int* engine_encode(const Engine* e, const Request* req, size_t* n) {
    int* ids = tokenizer_encode(e->tok, (const unsigned char*)req->prompt, req->prompt_len, 1, n);
    if (*n == 0) {
        free(ids);
        ids = (int*)malloc_check(sizeof(int));
        ids[(*n)++] = e->tok->eot_token;
    }
    return ids;
}

// Whether a prompt of n tokens and its max_tokens fit the model's context; if not, says why in
// req->error.
static inline int engine_fits_context(const Engine* e, Request* req, size_t n) {
    int maxT = e->config->max_seq_len, max_tokens = req->params.max_tokens;
    if (n >= (size_t)maxT) {
        snprintf(req->error, sizeof(req->error), "the prompt is %zu tokens; the model's context holds %d, "
                 "and at least one must be left for generation", n, maxT);
        return 0;
    }
    if (max_tokens > maxT - (int)n) {
        snprintf(req->error, sizeof(req->error), "the prompt (%zu tokens) and %d new tokens exceed the model's "
                 "context of %d tokens; ask for %d or fewer", n, max_tokens, maxT, maxT - (int)n);
        return 0;
    }
    return 1;
}

// Starts req, whose prompt is ids (P tokens, within the context), in a free slot if the pool can
// promise the pages of its whole length, and sets *pass to the prompt's prefill, which the caller
// runs on the device and hands back to engine_admitted. Returns 1 with req taken over; 0 when the
// pool cannot promise the pages yet (req waits).
static inline int engine_admit(Engine* e, Request* req, const int* ids, int P, EnginePass* pass) {
    GPT2Config c = *e->config;
    int max_new = req->params.max_tokens > 0 ? req->params.max_tokens : c.max_seq_len - P;
    // positions used: the prompt and every generated token but the last, which is never run
    int pages = kv_pages_for(P + max_new - 1);
    if (!page_pool_reserve(&e->pool, pages)) return 0;
    int i = 0;
    while (e->seq[i].req.prompt != NULL) i++;
    Sequence* s = &e->seq[i];
    if (e->in_order) engine_expect(e, req->id);
    s->req = *req;
    memset(req, 0, sizeof(*req));
    GenParams g = s->req.params;
    sampler_build(&s->sampler, c.vocab_size, c.padded_vocab_size, g.temperature, g.top_k, g.top_p, g.seed);
    s->P = P;
    s->max_new = max_new;
    s->len = 0;
    s->promised = pages;
    s->generated = 0;
    s->first_token = 0.0;
    e->active++;
    e->requests++;
    e->prompt_tokens += P;
    // prefill: the whole prompt in one pass, alone
    sequence_grow(e, s, P);
    e->pass_pos[0] = 0;
    e->pass_slot[0] = i;
    *pass = engine_pass(1, P, ids, e->pass_pos, s->pages, e->max_pages);
    return 1;
}

// After the device ran an admission's prefill (in `seconds`), its logits in e->logits: the
// sequence samples its first token.
static inline void engine_admitted(Engine* e, double seconds) {
    int i = e->pass_slot[0];
    Sequence* s = &e->seq[i];
    e->prefill_seconds += seconds;
    e->prefills++;
    s->len = s->P;
    engine_take_token(e, i, sampler_sample(&s->sampler, e->logits));
}

// ---------- decode ----------

// One decode step of every active sequence: their last tokens as one batch (B = 0: none).
static inline EnginePass engine_decode_pass(Engine* e) {
    int B = 0;
    for (int i = 0; i < e->slots; i++) {
        Sequence* s = &e->seq[i];
        if (s->req.prompt == NULL) continue;
        sequence_grow(e, s, 1);
        e->pass_slot[B] = i;
        e->pass_tokens[B] = s->next;
        e->pass_pos[B] = s->len;
        memcpy(e->pass_pages + (size_t)B * e->max_pages, s->pages, (size_t)kv_pages_for(s->len + 1) * sizeof(int));
        B++;
    }
    if (B > e->peak_batch) e->peak_batch = B;
    return engine_pass(B, 1, e->pass_tokens, e->pass_pos, e->pass_pages, e->max_pages);
}

// After the device ran a decode step of B sequences (in `seconds`): one new token each, every
// sequence sampling with its own sampler (in parallel: the same as one by one).
static inline void engine_decoded(Engine* e, int B, double seconds) {
    e->decode_seconds += seconds;
    e->decode_steps++;
    int Vp = e->config->padded_vocab_size;
    int* next = e->pass_tokens;  // reused: the tokens sampled, one per sequence
    #pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        Sequence* s = &e->seq[e->pass_slot[b]];
        next[b] = sampler_sample(&s->sampler, e->logits + (size_t)b * Vp);
    }
    for (int b = 0; b < B; b++) {
        Sequence* s = &e->seq[e->pass_slot[b]];
        s->len++;
        engine_take_token(e, e->pass_slot[b], next[b]);
    }
}

// ---------- the loop ----------

// Where requests come from: the next one into *req (valid, or with its error set), returning 1;
// 0 when there are no more.
typedef int (*EngineSource)(void* src, Request* req);

// Answers every request of the source, at most `slots` sequences at a time: each step admits
// the waiting requests that fit (a free slot, and pages the pool can promise), in order, then
// runs one decode step of all active sequences. A request that does not fit the pool now waits
// for pages to come back, and the ones behind it wait with it (first come, first served).
static inline void engine_run(Engine* e, EngineSource source, void* src) {
    Request next;
    int* ids = NULL;  // next's prompt, once tokenized
    size_t n = 0;
    int have = source(src, &next);
    while (have || e->active > 0) {
        while (have && e->active < e->slots) {
            if (next.error[0] == '\0' && ids == NULL) {
                ids = engine_encode(e, &next, &n);
                if (!engine_fits_context(e, &next, n)) {
                    free(ids);
                    ids = NULL;
                }
            }
            EnginePass pass;
            if (next.error[0] != '\0') {
                engine_reject(e, &next);
            } else if (engine_admit(e, &next, ids, (int)n, &pass)) {
                double t0 = now_seconds();
                e->device.forward(e->device.ctx, &pass, e->logits);  // the prompt's prefill
                engine_admitted(e, now_seconds() - t0);
                free(ids);
                ids = NULL;
            } else {
                if (e->active == 0) fail("engine: a request that fits the model does not fit an empty pool (a bug)");
                break;
            }
            have = source(src, &next);
        }
        EnginePass pass = engine_decode_pass(e);
        if (pass.B == 0) continue;
        double t0 = now_seconds();
        e->device.forward(e->device.ctx, &pass, e->logits);  // one token of every active sequence
        engine_decoded(e, pass.B, now_seconds() - t0);
    }
    engine_flush(e);
}

#endif // GPT2_ENGINE_H
