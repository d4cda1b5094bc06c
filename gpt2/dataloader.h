// gpt2/dataloader.h: batches from a token file (doc/formats.md). The file is read whole into
// memory and checked once: every id must be below the model's vocabulary, so the model never
// sees an id it has no embedding for. Batches are B*T+1 consecutive tokens (targets are the
// inputs shifted by one: each position predicts the next token), taken in order from the start
// and wrapping at the end; or, with shuffle, the batches of each pass over the file in a random
// order drawn from the seed.
//
// A batch here is a whole optimizer step's worth of tokens: every process (rank) of a
// data-parallel run and every micro-step of gradient accumulation reads its own B x T part of it.
// With P ranks and M micro-steps, the step's batch holds P x M parts, and micro-step m of rank r
// reads part m x P + r, so rank r starts at r x B x T and strides by P x B x T, as llm.c's loader
// does. The tokens a step reads are those of one batch of B x P x M rows: a run split over ranks
// and micro-steps takes its data in the order the undivided run does, and its position in the
// file (epoch, batch_index) does not depend on how the batch is split.

#ifndef GPT2_DATALOADER_H
#define GPT2_DATALOADER_H

#include "io.h"
#include "random.h"

typedef struct {
    int B, T;               // this process's part of a batch, B rows of T tokens
    int rank, ranks;        // this process among the ranks that share each batch
    int micro_steps;        // its parts per batch, one per micro-step
    int micro;              // the next micro-step within the current batch
    size_t batch_tokens;    // B x T x ranks x micro_steps
    uint16_t* tokens;
    size_t num_tokens;
    size_t num_batches;     // whole batches per pass over the file
    size_t batch_index;     // the batch of this pass that the next part is read from
    int shuffle;
    uint64_t shuffle_seed;
    uint64_t epoch;         // passes completed
    size_t* order;          // batch order of this pass (shuffle only)
    int* inputs;            // (B, T)
    int* targets;           // (B, T)
} DataLoader;

static void dataloader_make_order(DataLoader* dl) {
    for (size_t i = 0; i < dl->num_batches; i++) dl->order[i] = i;
    if (!dl->shuffle) return;
    uint64_t rng = seed_mix(dl->shuffle_seed, dl->epoch, 0x5eed);
    for (size_t i = dl->num_batches - 1; i > 0; i--) {  // Fisher-Yates
        size_t j = (size_t)(((uint64_t)random_u32(&rng) << 32 | random_u32(&rng)) % (i + 1));
        size_t tmp = dl->order[i];
        dl->order[i] = dl->order[j];
        dl->order[j] = tmp;
    }
}

// Opens the token file at path for parts of B x T, this process being `rank` of `ranks`, each
// taking `micro_steps` parts of every batch; vocab_size is the model's V.
static inline void dataloader_init(DataLoader* dl, const char* path, int B, int T, int rank, int ranks,
                                   int micro_steps, int vocab_size, int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B;
    dl->T = T;
    dl->rank = rank;
    dl->ranks = ranks;
    dl->micro_steps = micro_steps;
    dl->batch_tokens = (size_t)B * T * ranks * micro_steps;
    FILE* f = fopen_check(path, "rb");
    int32_t header[HEADER_INTS];
    long long size = read_header_check(f, path, header);
    if (header[0] != TOKENS_MAGIC) {
        fail("%s is not a token file (magic %d, expected %d)", path, header[0], TOKENS_MAGIC);
    }
    if (header[1] != TOKENS_VERSION) {
        fail("%s: unsupported token file version %d (expected %d)", path, header[1], TOKENS_VERSION);
    }
    long long n = (uint32_t)header[2];
    long long expected = (long long)sizeof(header) + 2 * n;
    if (size != expected) {
        fail("%s is %s: %lld bytes, but its header says %lld tokens (%lld bytes)", path,
             size < expected ? "truncated" : "longer than its header says", size, n, expected);
    }
    size_t need = dl->batch_tokens + 1;
    if ((size_t)n < need) {
        if (ranks * micro_steps == 1) fail("%s holds %lld tokens, fewer than one batch needs (B*T+1 = %zu)", path, n, need);
        fail("%s holds %lld tokens, fewer than one step's batch needs (B*T x %d processes x %d micro-steps + 1 = %zu)",
             path, n, ranks, micro_steps, need);
    }
    dl->num_tokens = (size_t)n;
    dl->tokens = (uint16_t*)malloc_check(dl->num_tokens * sizeof(uint16_t));
    fread_check(dl->tokens, sizeof(uint16_t), dl->num_tokens, f, path);
    fclose(f);
    for (size_t i = 0; i < dl->num_tokens; i++) {
        if (dl->tokens[i] >= vocab_size) {
            fail("%s: token id %d at position %zu is not below the model's vocabulary size %d", path,
                 dl->tokens[i], i, vocab_size);
        }
    }
    dl->num_batches = (dl->num_tokens - 1) / dl->batch_tokens;
    dl->shuffle = shuffle;
    dl->shuffle_seed = seed;
    dl->order = (size_t*)malloc_check(dl->num_batches * sizeof(size_t));
    dataloader_make_order(dl);
    dl->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    dl->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
}

static inline void dataloader_reset(DataLoader* dl) {
    dl->batch_index = 0;
    dl->micro = 0;
    dl->epoch = 0;
    dataloader_make_order(dl);
}

// Sets the position: batch `batch_index` of pass `epoch` (used when resuming). batch_index ==
// num_batches means the pass is complete: the next batch wraps into pass epoch+1.
static inline void dataloader_seek(DataLoader* dl, uint64_t epoch, size_t batch_index) {
    dl->epoch = epoch;
    dl->micro = 0;
    dataloader_make_order(dl);
    dl->batch_index = batch_index <= dl->num_batches ? batch_index : 0;
}

// The next part of B x T into inputs and targets: this process's part for the next micro-step.
static inline void dataloader_next_batch(DataLoader* dl) {
    if (dl->micro == 0 && dl->batch_index >= dl->num_batches) {  // wrap around: the next pass
        dl->batch_index = 0;
        dl->epoch++;
        dataloader_make_order(dl);
    }
    size_t BT = (size_t)dl->B * dl->T;
    size_t part = (size_t)dl->micro * dl->ranks + dl->rank;
    const uint16_t* src = dl->tokens + dl->order[dl->batch_index] * dl->batch_tokens + part * BT;
    for (size_t i = 0; i < BT; i++) {
        dl->inputs[i] = src[i];
        dl->targets[i] = src[i + 1];
    }
    if (++dl->micro == dl->micro_steps) {  // the batch is done
        dl->micro = 0;
        dl->batch_index++;
    }
}

static inline void dataloader_free(DataLoader* dl) {
    free(dl->tokens);
    free(dl->order);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}

#endif // GPT2_DATALOADER_H
