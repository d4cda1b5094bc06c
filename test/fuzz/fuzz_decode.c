// test/fuzz/fuzz_decode.c: `./tokenizer decode`'s reader of token-id lists (decode_ids_check in
// tokenizer.c), with GPT-2's vocabulary. A second, plain parser here decides what the input is:
// whitespace-separated decimal ids below the vocabulary size, or not. The reader must refuse
// exactly the inputs it refuses, and on the others give the ids' bytes; those bytes must then
// encode and decode back to themselves.
// FUZZ_TOKENIZER names the tokenizer file (default data/gpt2_tokenizer.bin).

#include "fuzz.h"
#include "fuzz_tokenizer.h"
#define TOKENIZER_NO_MAIN  // tokenizer.c's functions without its main
#include "../../tokenizer.c"

static Tokenizer gpt2;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* path = getenv("FUZZ_TOKENIZER");
    tokenizer_init(&gpt2, path ? path : "data/gpt2_tokenizer.bin");
    return 0;
}

// The bytes of the ids in text (a malloc'd buffer, *n of them), or NULL if text is not a list of
// ids: split at ' ', '\n', '\t', '\r'; each word all digits, its value below the vocabulary size.
static unsigned char* plain_decode(const uint8_t* text, size_t len, size_t* n) {
    unsigned char* out = (unsigned char*)malloc(len * 256 + 1);
    *n = 0;
    for (size_t i = 0; i < len;) {
        if (strchr(" \n\t\r", text[i]) != NULL && text[i] != 0) { i++; continue; }
        size_t j = i;
        while (j < len && (text[j] == 0 || strchr(" \n\t\r", text[j]) == NULL)) j++;
        int digits = 1;
        for (size_t k = i; k < j; k++) digits &= text[k] >= '0' && text[k] <= '9';
        // leading zeros are allowed: the value is what counts
        size_t first = i;
        while (first + 1 < j && text[first] == '0') first++;
        if (!digits || j - first > 6) { free(out); return NULL; }
        long id = 0;
        for (size_t k = first; k < j; k++) id = id * 10 + (text[k] - '0');
        if (id >= gpt2.vocab_size) { free(out); return NULL; }
        size_t tl;
        const unsigned char* tb = tokenizer_decode(&gpt2, (uint32_t)id, &tl);
        memcpy(out + *n, tb, tl);
        *n += tl;
        i = j;
    }
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    size_t want_n;
    unsigned char* want = plain_decode(data, size, &want_n);
    fuzz_begin(size);
    if (setjmp(fuzz_jump) == 0) {
        size_t n;
        unsigned char* got = decode_ids_check(&gpt2, data, size, "input", &n);
        FUZZ_CHECK(want != NULL, "decode accepted an input that is not a list of token ids");
        FUZZ_CHECK(n == want_n && memcmp(got, want, n) == 0, "decode gave other bytes than the ids stand for");
        fuzz_check_roundtrip(&gpt2, got, n, 0);
        free(got);
    }
    FUZZ_CHECK(!(fuzz_refused && want != NULL), "decode refused a valid list of token ids");
    fuzz_end();
    free(want);
    return 0;
}
