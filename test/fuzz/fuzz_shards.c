// test/fuzz/fuzz_shards.c: the loader over a data set of shards (gpt2/dataloader.h, which the
// trainers call for -i and -j with a list or a glob). The input is cut into one to three token
// files: its first byte picks how many, the next four are the byte lengths of the first two
// (uint16, cut short where the input is), and the rest is the files' bytes, end to end, which
// the loader opens as the list "s0,s1,s2". A set it accepts must read, over
// two passes of one rank of a split run (2 ranks, 2 micro-steps, shuffled), whole batches of ids
// below the model's vocabulary size, the targets being the inputs shifted by one, each pass as
// many batches as its shards hold; and seeking to where it was gives the same batches again.

#include "fuzz.h"
#include "../../gpt2/dataloader.h"

#define FUZZ_VOCAB 50
enum { B = 1, T = 3, RANK = 1, RANKS = 2, MICRO = 2 };

static void read_parts(DataLoader* dl, size_t parts, int* out) {
    for (size_t k = 0; k < parts; k++) {
        dataloader_next_batch(dl);
        for (int i = 0; i < B * T; i++) {
            FUZZ_CHECK(dl->inputs[i] >= 0 && dl->inputs[i] < FUZZ_VOCAB && dl->targets[i] >= 0 &&
                       dl->targets[i] < FUZZ_VOCAB, "id out of range in a batch");
            if (i % T != T - 1) FUZZ_CHECK(dl->targets[i] == dl->inputs[i + 1], "targets are not the inputs shifted");
            if (out != NULL) out[k * B * T + i] = dl->inputs[i];
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 5) return 0;
    int files = 1 + data[0] % 3;
    const uint8_t* rest = data + 5;
    size_t n = size - 5, len0 = data[1] | (size_t)data[2] << 8, len1 = data[3] | (size_t)data[4] << 8;
    size_t cut1 = len0 < n ? len0 : n, cut2 = cut1 + (len1 < n - cut1 ? len1 : n - cut1);
    size_t begin[3] = {0, cut1, cut2}, end[3] = {cut1, cut2, n};
    if (files == 1) end[0] = n;
    if (files == 2) end[1] = n;
    static const char* names[3] = {"s0", "s1", "s2"};
    static const char* lists[3] = {"s0", "s0,s1", "s0,s1,s2"};
    fuzz_begin(size);
    for (int f = 0; f < files; f++) fuzz_file(names[f], rest + begin[f], end[f] - begin[f]);
    if (setjmp(fuzz_jump) == 0) {
        DataLoader dl;
        dataloader_init(&dl, lists[files - 1], B, T, RANK, RANKS, MICRO, FUZZ_VOCAB, 1, 99);
        size_t batches = 0, bytes = 0;
        for (int s = 0; s < dl.num_shards; s++) {
            batches += dl.shards[s].num_batches;
            bytes += HEADER_INTS * sizeof(int32_t) + 2 * dl.shards[s].num_tokens;
        }
        FUZZ_CHECK(dl.num_shards == files && batches == dl.num_batches && batches >= 1 && bytes == n,
                   "accepted %d files of %zu bytes as %d shards of %zu batches", files, n, dl.num_shards, batches);
        // a pass and a bit, then a seek back to a position within it, then the same parts again
        size_t parts = dl.num_batches * MICRO;
        if (parts > 64) parts = 64;
        read_parts(&dl, parts / 2 * 2, NULL);
        uint64_t epoch = dl.epoch;
        size_t shard_pos = dl.shard_pos, batch_index = dl.batch_index;
        int* first = (int*)malloc(parts * B * T * sizeof(int));
        int* again = (int*)malloc(parts * B * T * sizeof(int));
        read_parts(&dl, parts, first);
        dataloader_seek(&dl, epoch, shard_pos, batch_index);
        read_parts(&dl, parts, again);
        FUZZ_CHECK(memcmp(first, again, parts * B * T * sizeof(int)) == 0, "a seek does not read the same batches");
        free(first);
        free(again);
        dataloader_free(&dl);
    }
    fuzz_end();
    return 0;
}
