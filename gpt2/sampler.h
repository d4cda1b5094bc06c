// gpt2/sampler.h: the next token from a position's logits (gpt2/engine.h): greedy, temperature,
// top-k and top-p, from a random state of its own: a request's tokens depend on its logits and
// seed alone.

#ifndef GPT2_SAMPLER_H
#define GPT2_SAMPLER_H

#include <stdlib.h>
#include <string.h>
#include "io.h"
#include "random.h"
#include "cpu_layers.h"  // softmax_forward

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
static inline int candidate_before(Candidate a, Candidate b) {
    return a.prob > b.prob || (a.prob == b.prob && a.id < b.id);
}

static inline int candidate_compare(const void* a, const void* b) {
    Candidate x = *(const Candidate*)a, y = *(const Candidate*)b;
    return candidate_before(x, y) ? -1 : candidate_before(y, x) ? 1 : 0;
}

// Sift heap[i] down a heap of n candidates whose root is the one that comes last in the order.
static inline void heap_sift_down(Candidate* heap, int n, int i) {
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
static inline int filter_top_k_top_p(float* probs, Candidate* cand, int n, int top_k, float top_p) {
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
        // A token below (1 - p) / (n - 1) cannot be in the nucleus (llama2.c's trick): those
        // hold less than 1 - p together, so only the others need sorting.
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

static inline void sampler_build(Sampler* s, int V, int Vp, float temperature, int top_k, float top_p,
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

static inline void sampler_free(Sampler* s) {
    free(s->scaled);
    free(s->probs);
    free(s->cand);
}

// The index of the largest of x[0..n-1]; the lowest such index on ties.
static inline int argmax(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return best;
}

// The next token from the logits (Vp) of the last position; only the first V are tokens.
static inline int sampler_sample(Sampler* s, const float* logits) {
    if (s->temperature == 0.0f) return argmax(logits, s->V);
    for (int i = 0; i < s->V; i++) s->scaled[i] = logits[i] / s->temperature;
    softmax_forward(s->probs, s->scaled, 1, 1, s->V, s->Vp);
    if ((s->top_k > 0 && s->top_k < s->V) || s->top_p < 1.0f) {
        filter_top_k_top_p(s->probs, s->cand, s->V, s->top_k, s->top_p);
    }
    return sample_mult(s->probs, s->V, random_f32(&s->rng));
}

#endif // GPT2_SAMPLER_H
