// test/fuzz/fuzz_vocab.c: `./tokenizer vocab`'s readers of OpenAI's two files, encoder.json
// (read_encoder_json) and vocab.bpe (check_merges). The input is both: the bytes before its
// first NUL are encoder.json, those after it vocab.bpe (a JSON text cannot hold a raw NUL). A
// pair the readers accept is a working tokenizer: every byte string encodes and decodes back
// to itself; the input's own bytes are tried.

#include "fuzz.h"
#include "fuzz_tokenizer.h"
#define TOKENIZER_NO_MAIN  // tokenizer.c's functions without its main
#include "../../tokenizer.c"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* nul = (const uint8_t*)memchr(data, 0, size);
    size_t json_n = nul ? (size_t)(nul - data) : size;
    fuzz_begin(size);
    fuzz_file("encoder.json", data, json_n);
    fuzz_file("vocab.bpe", nul ? nul + 1 : data + size, nul ? size - json_n - 1 : 0);
    if (setjmp(fuzz_jump) == 0) {
        Tokenizer t;
        read_encoder_json(&t, "encoder.json");
        int merges = check_merges(&t, "vocab.bpe", "encoder.json");
        FUZZ_CHECK(256 + merges == t.eot_token && t.eot_token == t.vocab_size - 1,
                   "accepted %d merges for %d tokens, end-of-text %d", merges, t.vocab_size, t.eot_token);
        fuzz_check_roundtrip(&t, data, size, 0);
        tokenizer_free(&t);
    }
    fuzz_end();
    return 0;
}
