// test/fuzz/fuzz_tokens.c: the token-file loader (dataloader_init in gpt2/dataloader.h, which
// the trainers call for -i and -j), with the batch shapes of a one-process run and of one rank
// of a split run (2 ranks, 2 micro-steps, shuffled). A file it accepts gives batches, wrapping
// past the end and after a seek, whose inputs and targets are the file's ids, all below the
// model's vocabulary size, the targets being the inputs shifted by one.

#include "fuzz.h"
#include "../../gpt2/dataloader.h"

#define FUZZ_VOCAB 50  // the model's V: the seeds hold ids on both sides of it

static void check_loader(const char* path, const uint8_t* data, size_t size, int B, int T, int rank,
                         int ranks, int micro, int shuffle) {
    DataLoader dl;
    dataloader_init(&dl, path, B, T, rank, ranks, micro, FUZZ_VOCAB, shuffle, 1234);
    size_t header = HEADER_INTS * sizeof(int32_t);
    FUZZ_CHECK(size == header + 2 * dl.num_tokens && dl.num_tokens >= dl.batch_tokens + 1,
               "accepted %zu bytes holding %zu tokens", size, dl.num_tokens);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) dataloader_seek(&dl, 3, 0, dl.num_batches);  // the end of a pass: wraps
        size_t parts = dl.num_batches * (size_t)micro + 1;
        for (size_t k = 0; k < parts && k < 64; k++) {
            dataloader_next_batch(&dl);
            for (int i = 0; i < B * T; i++) {
                FUZZ_CHECK(dl.inputs[i] >= 0 && dl.inputs[i] < FUZZ_VOCAB && dl.targets[i] >= 0 &&
                           dl.targets[i] < FUZZ_VOCAB, "id out of range in a batch");
                if (i % T != T - 1) FUZZ_CHECK(dl.targets[i] == dl.inputs[i + 1], "targets are not the inputs shifted");
            }
        }
    }
    dataloader_free(&dl);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    for (int config = 0; config < 2; config++) {
        fuzz_begin(size);
        fuzz_file(FUZZ_INPUT, data, size);
        if (setjmp(fuzz_jump) == 0) {
            if (config == 0) check_loader(FUZZ_INPUT, data, size, 2, 4, 0, 1, 1, 0);
            else check_loader(FUZZ_INPUT, data, size, 1, 3, 1, 2, 2, 1);
        }
        fuzz_end();
    }
    return 0;
}
