// gpt2/dataloader.h: batches from token files (doc/formats.md): one file, or shards named by a
// list and/or a glob. Every shard is checked when the loader opens (header, size, every id below
// the vocabulary), so bad data stops the run before its first step; then one shard at a time is
// in memory, mapped.
//
// A batch is consecutive tokens of one shard, the targets the inputs shifted by one; a pass takes
// the shards and their whole batches in order, or shuffled from the seed. A batch is one optimizer
// step's tokens: micro-step m of rank r of P reads its part m x P + r (as llm.c), so a split run
// reads the data in the undivided run's order (doc/parallel.md, "What a step computes").

#ifndef GPT2_DATALOADER_H
#define GPT2_DATALOADER_H

#include <glob.h>
#include <sys/mman.h>
#include "io.h"
#include "random.h"

typedef struct {
    char* path;
    size_t num_tokens;
    size_t num_batches;     // whole batches in it
} TokenShard;

typedef struct {
    int B, T;               // this process's part of a batch, B rows of T tokens
    int rank, ranks;        // this process among the ranks that share each batch
    int micro_steps;        // its parts per batch, one per micro-step
    int micro;              // the next micro-step within the current batch
    size_t batch_tokens;    // B x T x ranks x micro_steps
    TokenShard* shards;     // in the order they were named (a glob's matches sorted by name)
    int num_shards;
    size_t num_tokens;      // in all shards
    size_t num_batches;     // whole batches per pass, over all shards
    // the position: batch `batch_index` of the shard at `shard_pos` of pass `epoch`
    uint64_t epoch;         // passes completed
    size_t shard_pos;
    size_t batch_index;     // == the shard's num_batches: the shard is done
    int shuffle;
    uint64_t shuffle_seed;
    size_t* shard_order;    // the shards of this pass (num_shards)
    size_t* order;          // the batches of the current shard (as many as the largest shard has)
    // the shard being read: mapped, or (a stream that cannot be mapped) read into memory
    long loaded;            // its index in shards, or -1
    const uint16_t* tokens; // its ids
    void* map;              // the mapping (header and ids), or NULL when read into memory
    size_t map_bytes;
    int* inputs;            // (B, T)
    int* targets;           // (B, T)
} DataLoader;

// ---------- the shards: named, and checked ----------

static int has_glob_chars(const char* s) {
    return strpbrk(s, "*?[") != NULL;
}

static void dataloader_add_shard(DataLoader* dl, const char* path) {
    dl->shards = (TokenShard*)realloc_check(dl->shards, (size_t)(dl->num_shards + 1) * sizeof(TokenShard));
    TokenShard* s = &dl->shards[dl->num_shards++];
    memset(s, 0, sizeof(*s));
    size_t n = strlen(path) + 1;
    s->path = (char*)malloc_check(n);
    memcpy(s->path, path, n);
}

// spec: paths separated by commas, each a file or a glob pattern that must match at least one.
static void dataloader_name_shards(DataLoader* dl, const char* spec) {
    size_t len = strlen(spec);
    char* copy = (char*)malloc_check(len + 1);
    memcpy(copy, spec, len + 1);
    char* item = copy;
    for (;;) {
        char* comma = strchr(item, ',');
        if (comma != NULL) *comma = '\0';
        if (*item == '\0') fail("'%s': an empty name in the list of token files", spec);
        if (has_glob_chars(item)) {
            glob_t g;
            int rc = glob(item, 0, NULL, &g);
            if (rc == GLOB_NOMATCH) fail("no token file matches %s", item);
            if (rc != 0) fail("%s: could not list the files it matches (glob error %d)", item, rc);
            for (size_t i = 0; i < g.gl_pathc; i++) dataloader_add_shard(dl, g.gl_pathv[i]);
            globfree(&g);
        } else {
            dataloader_add_shard(dl, item);
        }
        if (comma == NULL) break;
        item = comma + 1;
    }
    free(copy);
}

// The bytes a shard of n tokens is.
static size_t shard_bytes(size_t n) {
    return HEADER_INTS * sizeof(int32_t) + n * sizeof(uint16_t);
}

// Opens a shard, checks its header against its size, and returns its token count (f positioned at
// its ids).
static FILE* shard_open_check(const char* path, size_t* num_tokens) {
    FILE* f = fopen_check(path, "rb");
    int32_t header[HEADER_INTS];
    long long size = read_header_check(f, path, header);
    if (header[0] == TOKENS_MAGIC_LLAMA3) {
        fail("%s holds llm.c's llama-3 tokens (magic %d, uint32 ids of another vocabulary); GPT-2 trains on "
             "GPT-2's (magic %d)", path, header[0], TOKENS_MAGIC);
    }
    if (header[0] != TOKENS_MAGIC) {
        fail("%s is not a token file (magic %d, expected %d)", path, header[0], TOKENS_MAGIC);
    }
    if (header[1] != TOKENS_VERSION) {
        fail("%s: token file version %d; this project reads version %d, GPT-2's ids as uint16", path, header[1],
             TOKENS_VERSION);
    }
    long long n = (uint32_t)header[2];
    long long expected = (long long)shard_bytes((size_t)n);
    if (size != expected) {
        fail("%s is %s: %lld bytes, but its header says %lld tokens (%lld bytes)", path,
             size < expected ? "truncated" : "longer than its header says", size, n, expected);
    }
    *num_tokens = (size_t)n;
    return f;
}

// Checks a shard: header and size, and every id below the vocabulary, read a block at a time.
static void shard_check(TokenShard* s, int vocab_size) {
    FILE* f = shard_open_check(s->path, &s->num_tokens);
    enum { BLOCK = 1 << 18 };
    uint16_t* buf = (uint16_t*)malloc_check(BLOCK * sizeof(uint16_t));
    for (size_t done = 0; done < s->num_tokens;) {
        size_t n = s->num_tokens - done < BLOCK ? s->num_tokens - done : BLOCK;
        fread_check(buf, sizeof(uint16_t), n, f, s->path);
        uint16_t top = 0;
        for (size_t i = 0; i < n; i++) top = buf[i] > top ? buf[i] : top;
        if (top >= vocab_size) {
            for (size_t i = 0; i < n; i++) {
                if (buf[i] >= vocab_size) {
                    fail("%s: token id %d at position %zu is not below the model's vocabulary size %d", s->path,
                         buf[i], done + i, vocab_size);
                }
            }
        }
        done += n;
    }
    free(buf);
    fclose(f);
}

// ---------- the order of a pass ----------

// A random permutation of 0..n-1 into order (Fisher-Yates), from rng.
static void shuffle_indices(size_t* order, size_t n, uint64_t rng) {
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)(((uint64_t)random_u32(&rng) << 32 | random_u32(&rng)) % (i + 1));
        size_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
}

static void dataloader_order_shards(DataLoader* dl) {
    size_t n = (size_t)dl->num_shards;
    for (size_t i = 0; i < n; i++) dl->shard_order[i] = i;
    if (dl->shuffle) shuffle_indices(dl->shard_order, n, seed_mix(dl->shuffle_seed, dl->epoch, 0x5a4d));
}

// The batch order of the current shard. Shard s's seed differs from shard 0's by s, and shard 0's
// is the one a single file has always had.
static void dataloader_order_batches(DataLoader* dl) {
    size_t s = dl->shard_order[dl->shard_pos];
    size_t n = dl->shards[s].num_batches;
    for (size_t i = 0; i < n; i++) dl->order[i] = i;
    if (dl->shuffle) shuffle_indices(dl->order, n, seed_mix(dl->shuffle_seed, dl->epoch, 0x5eed + (uint64_t)s));
}

// ---------- the shard in memory ----------

static void dataloader_unload(DataLoader* dl) {
    if (dl->loaded < 0) return;
    if (dl->map != NULL) munmap(dl->map, dl->map_bytes);
    else free((void*)dl->tokens);
    dl->map = NULL;
    dl->tokens = NULL;
    dl->loaded = -1;
}

// Makes shard s the one in memory: mapped, or read from a stream that cannot be (the fuzz
// targets'). Its size is checked again: a file shrunk under a mapping kills the run on a read.
static void dataloader_load(DataLoader* dl, size_t s) {
    if (dl->loaded == (long)s) return;
    dataloader_unload(dl);
    TokenShard* shard = &dl->shards[s];
    size_t n;
    FILE* f = shard_open_check(shard->path, &n);
    if (n != shard->num_tokens) {
        fail("%s changed while the run was reading it: it held %zu tokens, now %zu", shard->path,
             shard->num_tokens, n);
    }
    int fd = fileno(f);
    void* map = fd >= 0 ? mmap(NULL, shard_bytes(n), PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (map != MAP_FAILED) {
        madvise(map, shard_bytes(n), dl->shuffle ? MADV_RANDOM : MADV_SEQUENTIAL);
        dl->map = map;
        dl->map_bytes = shard_bytes(n);
        dl->tokens = (const uint16_t*)((const char*)map + HEADER_INTS * sizeof(int32_t));
    } else {
        uint16_t* ids = (uint16_t*)malloc_check(n * sizeof(uint16_t));
        fread_check(ids, sizeof(uint16_t), n, f, shard->path);
        dl->tokens = ids;
    }
    fclose(f);
    dl->loaded = (long)s;
}

// ---------- the loader ----------

// Opens the token files spec names (paths and globs, comma-separated) for parts of B x T, this
// process `rank` of `ranks`, `micro_steps` parts each per batch; vocab_size is the model's V.
static inline void dataloader_init(DataLoader* dl, const char* spec, int B, int T, int rank, int ranks,
                                   int micro_steps, int vocab_size, int shuffle, uint64_t seed) {
    memset(dl, 0, sizeof(*dl));
    dl->B = B;
    dl->T = T;
    dl->rank = rank;
    dl->ranks = ranks;
    dl->micro_steps = micro_steps;
    dl->batch_tokens = (size_t)B * T * ranks * micro_steps;
    dl->loaded = -1;
    dataloader_name_shards(dl, spec);
    size_t need = dl->batch_tokens + 1, most = 0, largest = 0;  // most batches, most tokens in a shard
    for (int s = 0; s < dl->num_shards; s++) {
        TokenShard* shard = &dl->shards[s];
        shard_check(shard, vocab_size);
        shard->num_batches = shard->num_tokens >= need ? (shard->num_tokens - 1) / dl->batch_tokens : 0;
        dl->num_tokens += shard->num_tokens;
        dl->num_batches += shard->num_batches;
        most = shard->num_batches > most ? shard->num_batches : most;
        largest = shard->num_tokens > largest ? shard->num_tokens : largest;
    }
    if (dl->num_batches == 0) {
        const char* what = dl->num_shards == 1 ? dl->shards[0].path : spec;
        const char* holds = dl->num_shards == 1 ? "holds" : "has no shard that holds a batch: the largest holds";
        if (ranks * micro_steps == 1) fail("%s %s %zu tokens, fewer than one batch needs (B*T+1 = %zu)", what, holds, largest, need);
        fail("%s %s %zu tokens, fewer than one step's batch needs (B*T x %d processes x %d micro-steps + 1 = %zu)",
             what, holds, largest, ranks, micro_steps, need);
    }
    dl->shuffle = shuffle;
    dl->shuffle_seed = seed;
    dl->shard_order = (size_t*)malloc_check((size_t)dl->num_shards * sizeof(size_t));
    dl->order = (size_t*)malloc_check((most > 0 ? most : 1) * sizeof(size_t));
    dataloader_order_shards(dl);
    dataloader_order_batches(dl);
    dl->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    dl->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
}

// Sets the position (resuming); batch_index == the shard's batches: the next shard is next.
static inline void dataloader_seek(DataLoader* dl, uint64_t epoch, size_t shard_pos, size_t batch_index) {
    dl->epoch = epoch;
    dl->micro = 0;
    dataloader_order_shards(dl);
    if (shard_pos >= (size_t)dl->num_shards ||
        batch_index > dl->shards[dl->shard_order[shard_pos]].num_batches) {
        fail("the position to resume at (pass %llu, shard %zu of the pass, batch %zu) is not in the %d token "
             "file%s named", (unsigned long long)epoch, shard_pos, batch_index, dl->num_shards,
             dl->num_shards == 1 ? "" : "s");
    }
    dl->shard_pos = shard_pos;
    dataloader_order_batches(dl);
    dl->batch_index = batch_index;
}

static inline void dataloader_reset(DataLoader* dl) {
    dataloader_seek(dl, 0, 0, 0);
}

// The next part of B x T into inputs and targets: this process's part for the next micro-step.
static inline void dataloader_next_batch(DataLoader* dl) {
    if (dl->micro == 0) {
        // past the current shard's last batch: the next shard with batches, wrapping into the next pass
        while (dl->batch_index >= dl->shards[dl->shard_order[dl->shard_pos]].num_batches) {
            dl->batch_index = 0;
            if (++dl->shard_pos == (size_t)dl->num_shards) {
                dl->shard_pos = 0;
                dl->epoch++;
                dataloader_order_shards(dl);
            }
            dataloader_order_batches(dl);
        }
    }
    dataloader_load(dl, dl->shard_order[dl->shard_pos]);
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
    dataloader_unload(dl);
    for (int s = 0; s < dl->num_shards; s++) free(dl->shards[s].path);
    free(dl->shards);
    free(dl->shard_order);
    free(dl->order);
    free(dl->inputs);
    free(dl->targets);
    memset(dl, 0, sizeof(*dl));
}

#endif // GPT2_DATALOADER_H
