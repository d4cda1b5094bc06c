// test/fuzz/fuzz_checkpoint.c: the model loader (gpt2_build_from_file in gpt2/checkpoint.h,
// which train_cpu, train_gpu and infer call for -e FILE) on llm.c checkpoints, float32 (version
// 3) and bfloat16 (version 5). A checkpoint it accepts must hold exactly the model its header
// describes: the header, then every parameter, each read back as the float the file stores.
// (The same function reads safetensors files; fuzz_safetensors covers those.)

#include "fuzz.h"
#include "../../gpt2/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_begin(size);
    fuzz_file(FUZZ_INPUT, data, size);
    if (setjmp(fuzz_jump) == 0) {
        GPT2 model;
        gpt2_build_from_file(&model, FUZZ_INPUT);
        int32_t magic = 0;
        if (size >= 4) memcpy(&magic, data, 4);
        if (magic == CHECKPOINT_MAGIC) {
            int32_t version;
            memcpy(&version, data + 4, 4);
            size_t elem = version == CHECKPOINT_VERSION_F32 ? 4 : 2;
            size_t header = HEADER_INTS * sizeof(int32_t);
            FUZZ_CHECK(size == header + model.num_parameters * elem, "accepted %zu bytes for %zu parameters "
                       "of %zu bytes", size, model.num_parameters, elem);
            for (size_t i = 0; i < model.num_parameters; i++) {
                float want;
                if (elem == 4) {
                    memcpy(&want, data + header + 4 * i, 4);
                } else {
                    uint16_t h;
                    memcpy(&h, data + header + 2 * i, 2);
                    want = bf16_to_float(h);
                }
                FUZZ_CHECK(memcmp(&want, &model.params_memory[i], 4) == 0, "parameter %zu differs from the file", i);
            }
        }
        gpt2_free(&model);
    }
    fuzz_end();
    return 0;
}
