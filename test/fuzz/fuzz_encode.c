// test/fuzz/fuzz_encode.c: the tokenizer's encode on any bytes, with GPT-2's own vocabulary.
// Checks, for every input, beyond "no crash":
//   - decode(encode(x)) == x, with <|endoftext|> ordinary text and with it the special token;
//   - every id is a token; ordinary text never gives the end-of-text id, and the special
//     encoding gives it once per "<|endoftext|>" in the text;
//   - byte-pair merging ran to the end: within each pre-tokenizer piece, no two neighbouring
//     tokens merge into a token (BPE stops only when no pair does).
// FUZZ_TOKENIZER names the tokenizer file (default data/gpt2_tokenizer.bin, made by `make data`).

#include "fuzz.h"
#include "fuzz_tokenizer.h"

static Tokenizer gpt2;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* path = getenv("FUZZ_TOKENIZER");
    tokenizer_init(&gpt2, path ? path : "data/gpt2_tokenizer.bin");
    return 0;
}

// The end-of-text ids among ids: one per "<|endoftext|>" in text with the special token, else none.
static void check_eot_count(const int* ids, size_t n, const uint8_t* text, size_t len, int special) {
    size_t eots = 0;
    for (size_t i = 0; i < n; i++) eots += ids[i] == gpt2.eot_token;
    size_t occurrences = 0;
    for (size_t i = 0; i + 13 <= len;) {
        if (memcmp(text + i, EOT_TEXT, 13) == 0) { occurrences++; i += 13; }
        else i++;
    }
    FUZZ_CHECK(eots == (special ? occurrences : 0), "%zu end-of-text ids for %zu occurrences, special=%d",
               eots, occurrences, special);
}

// Each piece encoded alone: no neighbours that merge, and the pieces' tokens are encode's.
static void check_merged_fully(const uint8_t* text, size_t len, const int* ids, size_t n) {
    MergeScratch m;
    memset(&m, 0, sizeof(m));
    IdList piece = {NULL, 0, 0};
    size_t at = 0;
    for (size_t i = 0; i < len;) {
        size_t plen = pretoken_length(text + i, len - i);
        FUZZ_CHECK(plen >= 1 && plen <= len - i, "piece of length %zu at byte %zu", plen, i);
        piece.n = 0;
        bpe_piece(&gpt2, &m, text + i, plen, &piece);
        for (size_t k = 0; k + 1 < piece.n; k++) {
            int merged = tokenizer_pair(&gpt2, (uint32_t)piece.data[k], (uint32_t)piece.data[k + 1]);
            FUZZ_CHECK(merged < 0, "tokens %d and %d are left unmerged (they make %d) in the piece at byte %zu",
                       piece.data[k], piece.data[k + 1], merged, i);
        }
        FUZZ_CHECK(at + piece.n <= n && memcmp(ids + at, piece.data, piece.n * sizeof(int)) == 0,
                   "encode differs from its pieces at byte %zu", i);
        at += piece.n;
        i += plen;
    }
    FUZZ_CHECK(at == n, "encode gave %zu ids, its pieces %zu", n, at);
    free(piece.data);
    scratch_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_begin(size);
    if (setjmp(fuzz_jump) == 0) {
        for (int special = 0; special <= 1; special++) {
            size_t n;
            int* ids = tokenizer_encode(&gpt2, data, size, special, &n);
            fuzz_check_decodes_to(&gpt2, ids, n, data, size, special ? "with the special token" : "ordinary");
            check_eot_count(ids, n, data, size, special);
            if (!special) check_merged_fully(data, size, ids, n);
            free(ids);
        }
    }
    FUZZ_CHECK(!fuzz_refused, "encode refused an input: every byte string encodes");
    fuzz_end();
    return 0;
}
