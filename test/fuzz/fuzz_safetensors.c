// test/fuzz/fuzz_safetensors.c: the safetensors reader (gpt2/safetensors.h: the JSON header, the
// tensors' byte ranges) and the GPT-2 loader on top of it (gpt2_build_from_file, as infer -e
// model.safetensors calls it). Every tensor of a header the reader accepts lies inside the file,
// and every float tensor reads; then the file goes through the model loader, whose checks
// (names, shapes, the tied lm_head) must refuse it or give a model whose padded vocabulary rows
// are zero.

#include "fuzz.h"
#include "../../gpt2/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_begin(size);
    fuzz_file(FUZZ_INPUT, data, size);
    if (setjmp(fuzz_jump) == 0) {
        Safetensors st;
        char why[200];
        if (!safetensors_open(&st, FUZZ_INPUT, why, sizeof(why))) {
            fuzz_end();
            return 0;
        }
        long long data_size = (long long)size - st.data_start;
        for (int i = 0; i < st.num_entries; i++) {
            SafetensorsEntry* e = &st.entries[i];
            FUZZ_CHECK(e->begin >= 0 && e->begin <= e->end && e->end <= data_size,
                       "tensor %s at [%lld, %lld] outside %lld bytes", e->name, e->begin, e->end, data_size);
            if (strcmp(e->dtype, "F32") != 0 && strcmp(e->dtype, "F16") != 0 && strcmp(e->dtype, "BF16") != 0) continue;
            size_t n = (size_t)(e->end - e->begin) / (strcmp(e->dtype, "F32") == 0 ? 4 : 2);
            float* buf = (float*)malloc_check(n * sizeof(float));
            safetensors_read(&st, e, buf, n);
            free(buf);
        }
        safetensors_close(&st);
        GPT2 model;
        gpt2_build_from_file(&model, FUZZ_INPUT);
        GPT2Config c = model.config;
        for (size_t i = (size_t)c.vocab_size * c.channels; i < (size_t)c.padded_vocab_size * c.channels; i++) {
            FUZZ_CHECK(model.params.wte[i] == 0.0f, "padded vocabulary row not zero at %zu", i);
        }
        gpt2_free(&model);
    }
    fuzz_end();
    return 0;
}
