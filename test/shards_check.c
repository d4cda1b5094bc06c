// test/shards_check.c: what the data loader (gpt2/dataloader.h) promises about the order of a
// data set of shards, checked on shards it writes itself, where every batch and part is told apart
// by its ids: every part of B x T of batch b of shard s starts with 1 + s * 64 + b, then 500 + the
// part's number (the rest is 0).
//
//   ./shards_check DIR
//
// For shard sets with shards of different sizes (one of them too small for a batch), shuffled or
// not, over three passes:
//   - a pass reads every batch of every shard exactly once, and a shard's batches one after the
//     other (one shard in memory at a time); unshuffled, in the order the shards were named and
//     the batches stand in them; shuffled, the passes' orders differ from each other;
//   - the parts of a batch that P ranks x M micro-steps read are disjoint and together the batch;
//   - seeking to a position taken in the middle of a pass and reading on gives what reading on
//     from there gave (resuming);
//   - the data set named as a glob, as a list, and as a list of globs is the same shards.
// Prints one line per check; exit status 1 if any fails.

#include "../gpt2/dataloader.h"

static int failures = 0;

static void check(int ok, const char* what) {
    printf("%s %s\n", ok ? "ok   " : "FAIL:", what);
    if (!ok) failures++;
}

static void write_shard(const char* path, int shard, size_t batches, size_t batch_tokens, size_t part_tokens,
                        size_t extra) {
    size_t n = batches * batch_tokens + 1 + extra;
    uint16_t* ids = (uint16_t*)calloc_check(n, sizeof(uint16_t));
    for (size_t b = 0; b < batches; b++) {
        for (size_t p = 0; p < batch_tokens / part_tokens; p++) {
            ids[b * batch_tokens + p * part_tokens] = (uint16_t)(1 + shard * 64 + b);
            ids[b * batch_tokens + p * part_tokens + 1] = (uint16_t)(500 + p);
        }
    }
    int32_t header[HEADER_INTS];
    header_init(header, TOKENS_MAGIC, TOKENS_VERSION);
    header[2] = (int32_t)n;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, f, path);
    fwrite_check(ids, sizeof(uint16_t), n, f, path);
    fclose_check(f, path);
    free(ids);
}

// Reads `steps` whole batches (every rank's and micro-step's part of each, from loaders that
// differ only in rank), checking that the parts tile the batch; their ids into out.
static int read_batches(DataLoader* dls, int ranks, int steps, int* out) {
    int ok = 1;
    for (int k = 0; k < steps; k++) {
        int M = dls[0].micro_steps, BT = dls[0].B * dls[0].T, first = -1;
        for (int m = 0; m < M; m++) {
            for (int r = 0; r < ranks; r++) {
                dataloader_next_batch(&dls[r]);
                // part m * ranks + r of the batch: the batch's id, then its own number
                const int* in = dls[r].inputs;
                int part = m * ranks + r;
                if (part == 0) first = in[0];
                ok &= in[0] == first && in[1] == 500 + part && dls[r].targets[0] == in[1];
                for (int i = 2; i < BT; i++) ok &= in[i] == 0;
            }
        }
        out[k] = first;
    }
    return ok;
}

int main(int argc, char** argv) {
    if (argc != 2) fail("usage: shards_check DIR");
    const char* dir = argv[1];
    enum { B = 2, T = 4, RANKS = 2, MICRO = 2, SHARDS = 4 };
    size_t batch_tokens = (size_t)B * T * RANKS * MICRO;
    size_t batches[SHARDS] = {3, 5, 0, 2};  // shard 2 holds less than a batch
    char path[4096], spec[4096], list[4 * 4096] = "";
    for (int s = 0; s < SHARDS; s++) {
        snprintf(path, sizeof(path), "%s/set_%06d.bin", dir, s);
        write_shard(path, s, batches[s], batch_tokens, (size_t)B * T, (size_t)s * 3);
        strcat(list, s ? "," : "");
        strcat(list, path);
    }
    int total = 3 + 5 + 2, passes = 3;
    snprintf(spec, sizeof(spec), "%s/set_*.bin", dir);
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        DataLoader dls[RANKS];
        for (int r = 0; r < RANKS; r++) dataloader_init(&dls[r], spec, B, T, r, RANKS, MICRO, 1000, shuffle, 5);
        char what[256];
        snprintf(what, sizeof(what), "%s: %d shards, %zu batches per pass", shuffle ? "shuffled" : "in order",
                 dls[0].num_shards, dls[0].num_batches);
        check(dls[0].num_shards == SHARDS && dls[0].num_batches == (size_t)total, what);
        int ids[3 * 10];
        check(read_batches(dls, RANKS, passes * total, ids),
              "the ranks' and micro-steps' parts of every batch are disjoint and tile it");
        int every = 1, contiguous = 1, named_order = 1, differ = 0, shards_moved = 0;
        for (int p = 0; p < passes; p++) {
            int seen[SHARDS * 64] = {0};
            for (int k = 0; k < total; k++) {
                int id = ids[p * total + k] - 1, s = id / 64;
                every &= id >= 0 && id < SHARDS * 64 && !seen[id]++;
                if (k > 0) {  // a new shard starts only once the previous one is done
                    int prev = ids[p * total + k - 1] - 1;
                    if (prev / 64 != s) {
                        int done = 0;
                        for (int b = 0; b < (int)batches[prev / 64]; b++) done += seen[(prev / 64) * 64 + b];
                        contiguous &= done == (int)batches[prev / 64];
                    }
                }
                named_order &= k == 0 || ids[p * total + k] > ids[p * total + k - 1];
                shards_moved |= k > 0 && (ids[p * total + k] - 1) / 64 < (ids[p * total + k - 1] - 1) / 64;
            }
            if (p > 0) differ |= memcmp(ids, ids + p * total, (size_t)total * sizeof(int)) != 0;
        }
        check(every, "each pass reads every batch of every shard once");
        check(contiguous, "each pass reads a shard's batches one after the other");
        if (!shuffle) check(named_order, "unshuffled: the shards in the order named, their batches in order");
        else check(differ && !named_order && shards_moved,
                   "shuffled: the passes' orders differ, and the shards' is not the named one");
        // resume: a position taken mid-pass, sought by fresh loaders, gives the same batches on
        DataLoader again[RANKS];
        for (int r = 0; r < RANKS; r++) dataloader_reset(&dls[r]);
        int before[10 + 4], after[3 * 10];
        read_batches(dls, RANKS, total + 4, before);
        uint64_t epoch = dls[0].epoch;
        size_t shard_pos = dls[0].shard_pos, batch_index = dls[0].batch_index;
        read_batches(dls, RANKS, total, after);
        for (int r = 0; r < RANKS; r++) {
            dataloader_init(&again[r], list, B, T, r, RANKS, MICRO, 1000, shuffle, 5);
            dataloader_seek(&again[r], epoch, shard_pos, batch_index);
        }
        int resumed[10];
        read_batches(again, RANKS, total, resumed);
        snprintf(what, sizeof(what), "seek to pass %llu, shard %zu of it, batch %zu (named as a list) reads on the same",
                 (unsigned long long)epoch, shard_pos, batch_index);
        check(epoch == 1 && memcmp(after, resumed, sizeof(resumed)) == 0 && memcmp(before, ids, sizeof(before)) == 0, what);
        for (int r = 0; r < RANKS; r++) {
            dataloader_free(&dls[r]);
            dataloader_free(&again[r]);
        }
    }
    // a list of globs and files, each shard named once
    snprintf(spec, sizeof(spec), "%s/set_00000[01].bin,%s/set_000002.bin,%s/set_*3.bin", dir, dir, dir);
    DataLoader dl;
    dataloader_init(&dl, spec, B, T, 0, 1, 1, 1000, 0, 0);
    int ok = dl.num_shards == SHARDS;
    for (int s = 0; ok && s < SHARDS; s++) {
        snprintf(path, sizeof(path), "%s/set_%06d.bin", dir, s);
        ok &= strcmp(dl.shards[s].path, path) == 0;
    }
    check(ok, "a list of globs and files names the shards in its order");
    dataloader_free(&dl);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
