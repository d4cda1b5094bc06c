// test/fuzz/fuzz_tokenizer.h: the round trip that every target with a tokenizer checks: the
// bytes of encode(x)'s tokens, one after the other, are x. Include after fuzz.h.

#ifndef FUZZ_TOKENIZER_H
#define FUZZ_TOKENIZER_H

#include "../../gpt2/tokenizer.h"

// Stops the target unless ids[0..n) are tokens of t whose bytes, one after the other, are
// text[0..len). what names the check in the report.
static void fuzz_check_decodes_to(const Tokenizer* t, const int* ids, size_t n, const uint8_t* text,
                                  size_t len, const char* what) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t tl;
        const unsigned char* tb = tokenizer_decode(t, (uint32_t)ids[i], &tl);
        FUZZ_CHECK(tb != NULL, "%s: id %d at %zu is not a token", what, ids[i], i);
        FUZZ_CHECK(at + tl <= len && memcmp(text + at, tb, tl) == 0,
                   "%s: decode(encode(x)) != x at token %zu (id %d, byte %zu)", what, i, ids[i], at);
        at += tl;
    }
    FUZZ_CHECK(at == len, "%s: decode(encode(x)) has %zu bytes, x has %zu", what, at, len);
}

// Encodes text with "<|endoftext|>" ordinary (special 0) or the special token, and checks that
// the tokens decode back to it.
static void fuzz_check_roundtrip(const Tokenizer* t, const uint8_t* text, size_t len, int special) {
    size_t n;
    int* ids = tokenizer_encode(t, text, len, special, &n);
    fuzz_check_decodes_to(t, ids, n, text, len, special ? "with the special token" : "ordinary");
    free(ids);
}

#endif // FUZZ_TOKENIZER_H
