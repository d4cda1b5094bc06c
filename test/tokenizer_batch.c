// Encodes a batch of strings through the C API (tokenizer_encode, tokenizer_decode), for the
// tests that compare with tiktoken. Input on stdin: records of a uint32 little-endian byte length
// and then the bytes. Output: one line per record, its token ids separated by spaces. Every
// record is also decoded again: if the bytes differ from the input (the round trip is not
// exact), it says which record and exits 1.
// Usage: tokenizer_batch TOKENIZER_FILE [-s]   (-s: "<|endoftext|>" is the special token)
#include "../gpt2/tokenizer.h"

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "-s") != 0)) {
        fprintf(stderr, "usage: tokenizer_batch TOKENIZER_FILE [-s] < records > lines\n");
        return 1;
    }
    int eot_is_special = argc == 3;
    Tokenizer t;
    tokenizer_init(&t, argv[1]);
    size_t cap = 1 << 16;
    unsigned char* text = (unsigned char*)malloc_check(cap);
    unsigned char* back = (unsigned char*)malloc_check(cap);
    for (size_t record = 0;; record++) {
        uint32_t len;
        size_t got = fread(&len, 1, 4, stdin);
        if (got == 0) break;
        if (got != 4) { fprintf(stderr, "error: record %zu: truncated length\n", record); return 1; }
        if (len > cap) {
            cap = len;
            text = (unsigned char*)realloc_check(text, cap);
            back = (unsigned char*)realloc_check(back, cap);
        }
        fread_check(text, 1, len, stdin, "standard input");
        size_t n;
        int* ids = tokenizer_encode(&t, text, len, eot_is_special, &n);
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            size_t tl;
            const unsigned char* tb = tokenizer_decode(&t, (uint32_t)ids[i], &tl);
            if (tb == NULL || at + tl > len) { at = len + 1; break; }
            memcpy(back + at, tb, tl);
            at += tl;
            printf(i + 1 < n ? "%d " : "%d", ids[i]);
        }
        printf("\n");
        if (at != len || memcmp(back, text, len) != 0) {
            fprintf(stderr, "error: record %zu: decode(encode(x)) != x\n", record);
            return 1;
        }
        free(ids);
    }
    free(text);
    free(back);
    tokenizer_free(&t);
    return 0;
}
