// gpt2/kv_pages.h: the paged key-value cache of generation (vLLM's PagedAttention, Kwon et al.
// 2023): the pool of pages, its bookkeeping, and attention against the pages on the CPU (the GPU
// kernels' reference). Keys and values live in pages of KV_PAGE positions from one pool, so memory
// follows the tokens held; position t of a sequence is row t % KV_PAGE of page table[t / KV_PAGE].
// A sequence is admitted only when the pool can promise the pages of its whole length, so growing
// sequences never deadlock waiting for each other's pages. doc/infer.md, "The paged cache".

#ifndef GPT2_KV_PAGES_H
#define GPT2_KV_PAGES_H

#include <math.h>
#include <string.h>
#include "io.h"
#include "model.h"
#include "arithmetic.h"  // HOST_DEVICE: kv_row serves the GPU too

// Pages a sequence of n positions needs.
static inline int kv_pages_for(int n) {
    return (n + KV_PAGE - 1) / KV_PAGE;
}

// Offset of head h's row for position t in a layer's pool: (page, head, row, channel).
static inline HOST_DEVICE size_t kv_row(const int* table, int t, int h, int NH, int hs) {
    return (((size_t)table[t / KV_PAGE] * NH + h) * KV_PAGE + t % KV_PAGE) * hs;
}

// ---------- the pool's bookkeeping (the host's, for both devices) ----------

typedef struct {
    int num_pages;
    int* free_list;  // (num_pages) a stack of the free pages' ids
    int num_free;
    int promised;    // promised and not yet taken
    int in_use;      // taken and not given back
    int peak;        // the most ever in use at once
} PagePool;

static inline void page_pool_build(PagePool* p, int num_pages) {
    p->num_pages = num_pages;
    p->free_list = (int*)malloc_check((size_t)num_pages * sizeof(int));
    // page 0 popped first: a small load touches only the start of the pool
    for (int i = 0; i < num_pages; i++) p->free_list[i] = num_pages - 1 - i;
    p->num_free = num_pages;
    p->promised = 0;
    p->in_use = 0;
    p->peak = 0;
}

static inline void page_pool_free(PagePool* p) {
    free(p->free_list);
    memset(p, 0, sizeof(*p));
}

// Promises n pages if the pool can keep every promise: 1, else 0 (the caller waits).
static inline int page_pool_reserve(PagePool* p, int n) {
    if (n > p->num_free - p->promised) return 0;
    p->promised += n;
    return 1;
}

// Takes one promised page: its id.
static inline int page_pool_take(PagePool* p) {
    if (p->promised <= 0 || p->num_free <= 0) fail("page_pool_take: no page was promised (a bug)");
    p->promised--;
    int page = p->free_list[--p->num_free];
    p->in_use++;
    if (p->in_use > p->peak) p->peak = p->in_use;
    return page;
}

// Gives back n pages and the promise of `unused` pages never taken.
static inline void page_pool_release(PagePool* p, const int* pages, int n, int unused) {
    for (int i = 0; i < n; i++) p->free_list[p->num_free++] = pages[i];
    p->in_use -= n;
    p->promised -= unused;
}

// ---------- attention against the pages (CPU) ----------

// Causal self-attention of T new tokens of each of B sequences, qkv (B, T, 3C), against their
// pages, into out (B, T, C): the new keys and values join the pages at pos[b] + t, then each
// (sequence, token, head) attends to positions 0..its own. The online softmax (Milakov &
// Gimelshein 2018): a running max and sum, the output rescaled when the max grows, each cached
// row read once. One thread per output, in an order of its own sequence's: batch invariant.
static inline void attention_forward_paged(float* out, const LayerCache* cache, const float* qkv, int B, int T, int C,
                                    int NH) {
    int C3 = 3 * C, hs = C / NH;
    float scale = attention_scale(hs);
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const int* table = cache->pages + (size_t)b * cache->max_pages;
                const float* x = qkv + ((size_t)b * T + t) * C3;
                size_t row = kv_row(table, cache->pos[b] + t, h, NH, hs);
                memcpy(cache->key + row, x + C + h * hs, hs * sizeof(float));
                memcpy(cache->value + row, x + 2 * C + h * hs, hs * sizeof(float));
            }
        }
    }
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const int* table = cache->pages + (size_t)b * cache->max_pages;
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                float maxval = -INFINITY, sum = 0.0f;
                int last = cache->pos[b] + t;
                for (int t2 = 0; t2 <= last; t2++) {
                    size_t row = kv_row(table, t2, h, NH, hs);
                    const float* k2 = cache->key + row;
                    const float* v2 = cache->value + row;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k2[i];
                    s *= scale;
                    if (s > maxval) {  // rescale to the new maximum (exp(-inf) = 0)
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
}

#endif // GPT2_KV_PAGES_H
