// test/fuzz/fuzz_state.c: the training-state reader (read_state in gpt2/checkpoint.h, which
// `-y 1` calls beside the checkpoint it resumes) for a model of FUZZ_PARAMS parameters. A state
// it accepts has a usable position: step, batch and the sampling random state within their
// ranges, m and v the file's floats; a data loader seeked to its position reads in bounds.

#include "fuzz.h"
#include "../../gpt2/checkpoint.h"
#include "../../gpt2/dataloader.h"

#define FUZZ_PARAMS 24

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_begin(size);
    fuzz_file(FUZZ_INPUT, data, size);
    if (setjmp(fuzz_jump) == 0) {
        TrainState s;
        float m[FUZZ_PARAMS], v[FUZZ_PARAMS];
        read_state(FUZZ_INPUT, &s, m, v, FUZZ_PARAMS);
        FUZZ_CHECK(s.step >= 0 && s.global_batch >= 1 && s.T >= 1 && s.rng != 0,
                   "accepted step %d, batch %d, T %d, rng %llu",
                   s.step, s.global_batch, s.T, (unsigned long long)s.rng);
        size_t header = HEADER_INTS * sizeof(int32_t);
        FUZZ_CHECK(size == header + 8 * FUZZ_PARAMS && memcmp(m, data + header, sizeof(m)) == 0 &&
                   memcmp(v, data + header + sizeof(m), sizeof(v)) == 0, "m and v are not the file's");
        // a small token file to seek in: 1 + 2 x 3 x 4 tokens, four batches of B=2, T=3
        static uint8_t tokens[HEADER_INTS * 4 + 2 * 25];
        int32_t h[HEADER_INTS];
        header_init(h, TOKENS_MAGIC, TOKENS_VERSION);
        h[2] = 25;
        memcpy(tokens, h, sizeof(h));
        fuzz_file("tokens", tokens, sizeof(tokens));
        DataLoader dl;
        dataloader_init(&dl, "tokens", 2, 3, 0, 1, 1, 1, 1, 7);
        dataloader_seek(&dl, s.epoch, (size_t)s.shard_pos, (size_t)s.batch_index);
        for (int k = 0; k < 6; k++) dataloader_next_batch(&dl);
        dataloader_free(&dl);
    }
    fuzz_end();
    return 0;
}
