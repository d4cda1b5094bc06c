// test/fuzz/fuzz_tokenizer_file.c: the tokenizer file reader (tokenizer_init in
// gpt2/tokenizer.h, which every program that prints or encodes text calls). A file it accepts
// is a working tokenizer: every byte string encodes and decodes back to itself, with and without
// the end-of-text token special. The input's own bytes, and a few fixed texts, are tried.

#include "fuzz.h"
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const char* texts[] = {"Hello, world! It's 2024.\n\n", "<|endoftext|>ab<|endoftext|>",
                                  "  \t\xc3\xa9t\xc3\xa9 \xff\xfe caf\xe9  ", ""};
    fuzz_begin(size);
    fuzz_file(FUZZ_INPUT, data, size);
    if (setjmp(fuzz_jump) == 0) {
        Tokenizer t;
        tokenizer_init(&t, FUZZ_INPUT);
        FUZZ_CHECK(t.vocab_size >= 256 && t.eot_token >= 0 && t.eot_token < t.vocab_size,
                   "accepted %d tokens with end-of-text %d", t.vocab_size, t.eot_token);
        for (int special = 0; special <= 1; special++) {
            for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
                fuzz_check_roundtrip(&t, (const uint8_t*)texts[i], strlen(texts[i]), special);
            }
            fuzz_check_roundtrip(&t, data, size, special);
        }
        tokenizer_free(&t);
    }
    fuzz_end();
    return 0;
}
