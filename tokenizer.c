// tokenizer.c: GPT-2 byte-level BPE, encode and decode, identical to tiktoken's GPT-2 encoding.
//
// The first stage of the project, and the one every other stage includes: its top section holds
// the small utilities that all stages share (checked I/O and allocation, the file-format
// constants), so that train_cpu.c, infer.c and train_gpu.cu include this file instead of pasting
// them. Define TOKENIZER_NO_MAIN before including it to leave out its main().
//
// The code is C99 that also compiles as C++ (nvcc includes it through train_cpu.c), so every
// malloc result is cast and no C-only syntax is used.

#ifndef TOKENIZER_C
#define TOKENIZER_C

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

// ---------- file formats (../shared/FORMATS.md) ----------

#define HEADER_INTS 256              // every file starts with 256 int32 (1,024 bytes)
#define CHECKPOINT_MAGIC 20240326
#define CHECKPOINT_VERSION_F32 3
#define CHECKPOINT_VERSION_BF16 5
#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define GPT2_EOT 50256               // <|endoftext|>
#define GPT2_VOCAB 50257

// ---------- checked I/O and allocation ----------
// Every call that can fail goes through one of these: on failure they print one line naming what
// failed and where (file:line of the caller), then exit(1). Callers never see a failed result.

#define fail_at(file, line, ...)                                              \
    do {                                                                      \
        fprintf(stderr, "error: ");                                           \
        fprintf(stderr, __VA_ARGS__);                                         \
        fprintf(stderr, " (%s:%d)\n", file, line);                            \
        exit(1);                                                              \
    } while (0)

static inline FILE* fopen_check_(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (f == NULL) {
        fail_at(file, line, "cannot open %s for %s: %s", path,
                mode[0] == 'r' ? "reading" : "writing", strerror(errno));
    }
    return f;
}
#define fopen_check(path, mode) fopen_check_(path, mode, __FILE__, __LINE__)

// Reads exactly n items or stops with an error that says the file is short (truncated).
static inline void fread_check_(void* ptr, size_t size, size_t n, FILE* f, const char* what,
                                const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        if (ferror(f)) fail_at(file, line, "read error in %s: %s", what, strerror(errno));
        fail_at(file, line, "%s is truncated: expected %zu items of %zu bytes, got %zu",
                what, n, size, got);
    }
}
#define fread_check(ptr, size, n, f, what) fread_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fwrite_check_(const void* ptr, size_t size, size_t n, FILE* f, const char* what,
                                 const char* file, int line) {
    if (fwrite(ptr, size, n, f) != n) {
        fail_at(file, line, "write error on %s: %s", what, strerror(errno));
    }
}
#define fwrite_check(ptr, size, n, f, what) fwrite_check_(ptr, size, n, f, what, __FILE__, __LINE__)

static inline void fclose_check_(FILE* f, const char* what, const char* file, int line) {
    if (fclose(f) != 0) fail_at(file, line, "cannot close %s: %s", what, strerror(errno));
}
#define fclose_check(f, what) fclose_check_(f, what, __FILE__, __LINE__)

static inline void* malloc_check_(size_t size, const char* file, int line) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == NULL) fail_at(file, line, "out of memory allocating %zu bytes", size);
    return p;
}
#define malloc_check(size) malloc_check_(size, __FILE__, __LINE__)

static inline void* calloc_check_(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) fail_at(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}
#define calloc_check(n, size) calloc_check_(n, size, __FILE__, __LINE__)

static inline void* realloc_check_(void* old, size_t size, const char* file, int line) {
    void* p = realloc(old, size == 0 ? 1 : size);
    if (p == NULL) fail_at(file, line, "out of memory reallocating %zu bytes", size);
    return p;
}
#define realloc_check(old, size) realloc_check_(old, size, __FILE__, __LINE__)

// Size of an open file in bytes (the file position is restored).
static inline long long file_size_check_(FILE* f, const char* what, const char* file, int line) {
    long pos = ftell(f);
    if (pos < 0 || fseek(f, 0, SEEK_END) != 0) fail_at(file, line, "cannot seek in %s", what);
    long long size = ftell(f);
    if (size < 0 || fseek(f, pos, SEEK_SET) != 0) fail_at(file, line, "cannot seek in %s", what);
    return size;
}
#define file_size_check(f, what) file_size_check_(f, what, __FILE__, __LINE__)

// Reads the 1,024-byte header that every file of ours starts with (an error if the file is
// shorter) and returns the file's size in bytes.
static inline long long read_header_check(FILE* f, const char* path, int32_t header[HEADER_INTS]) {
    long long size = file_size_check(f, path);
    if (size < (long long)(HEADER_INTS * sizeof(int32_t))) {
        fprintf(stderr, "error: %s is truncated: %lld bytes, shorter than the 1,024-byte header\n", path, size);
        exit(1);
    }
    fread_check(header, sizeof(int32_t), HEADER_INTS, f, path);
    return size;
}

// Writes go to PATH.tmp and are renamed over PATH only once complete, so an interrupted write
// never leaves a half-written file where a good one was.
typedef struct {
    FILE* f;
    char* path;
    char* tmp_path;
} AtomicFile;

static inline AtomicFile atomic_open_check_(const char* path, const char* file, int line) {
    AtomicFile a;
    size_t n = strlen(path);
    a.path = (char*)malloc_check_(n + 1, file, line);
    memcpy(a.path, path, n + 1);
    a.tmp_path = (char*)malloc_check_(n + 5, file, line);
    memcpy(a.tmp_path, path, n);
    memcpy(a.tmp_path + n, ".tmp", 5);
    a.f = fopen_check_(a.tmp_path, "wb", file, line);
    return a;
}
#define atomic_open_check(path) atomic_open_check_(path, __FILE__, __LINE__)

static inline void atomic_close_check_(AtomicFile* a, const char* file, int line) {
    if (fflush(a->f) != 0 || ferror(a->f)) {
        fclose(a->f);
        remove(a->tmp_path);
        fail_at(file, line, "write error on %s: %s", a->tmp_path, strerror(errno));
    }
    if (fclose(a->f) != 0) {
        remove(a->tmp_path);
        fail_at(file, line, "cannot close %s: %s", a->tmp_path, strerror(errno));
    }
    if (rename(a->tmp_path, a->path) != 0) {
        remove(a->tmp_path);
        fail_at(file, line, "cannot rename %s to %s: %s", a->tmp_path, a->path, strerror(errno));
    }
    free(a->path);
    free(a->tmp_path);
}
#define atomic_close_check(a) atomic_close_check_(a, __FILE__, __LINE__)

// ---------- tokenizer ----------
// GPT-2's tokenizer in three steps (doc/tokenizer.md has the full story):
//   1. pre-tokenize: split the text into pieces with GPT-2's regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      written out by hand as a small state machine over UTF-8 characters and their class
//      (letter, number, whitespace, other) from the generated table dev/unicode_tables.h;
//   2. a piece that is itself a token becomes that token, as in tiktoken (for GPT-2 a shortcut:
//      merging a token's bytes always gives back that token);
//   3. otherwise byte-pair merging: start from one token per byte and repeatedly merge the
//      adjacent pair whose concatenation is the token of lowest rank (leftmost on ties). In GPT-2
//      a token's id is its rank, so the tokenizer file alone is enough to encode.
// Bytes that are not valid UTF-8 are each one character of class "other", so every byte string
// encodes, and decoding (concatenating the tokens' bytes) gives it back exactly.

#include "dev/unicode_tables.h"

#define TOKENIZER_MAX_VOCAB (1 << 20)  // sanity bound on the token count read from a file
#define EOT_TEXT "<|endoftext|>"

typedef struct {
    uint32_t left, right;  // the two tokens ...
    int32_t merged;        // ... whose bytes, one after the other, are this token (-1: empty slot)
} TokenPair;

typedef struct {
    int vocab_size;             // number of tokens n (GPT-2: 50257)
    int eot_token;              // id of <|endoftext|> (GPT-2: 50256)
    unsigned char* bytes;       // all tokens' bytes back to back
    uint32_t* offset;           // (vocab_size + 1) token i is bytes[offset[i] .. offset[i+1])
    int byte_token[256];        // id of the one-byte token for each byte value
    int32_t* vocab_table;       // open-addressing hash table: token bytes -> id (-1: empty slot)
    uint32_t vocab_mask;        // table size - 1 (a power of two)
    TokenPair* pair_table;      // open-addressing hash table: (left, right) -> merged id
    uint32_t pair_mask;
} Tokenizer;

// ---------- hash tables ----------
// Open addressing with linear probing, kept at most half full, so a lookup is a hash and one or
// two probes. Token ids are their own merge ranks, so the tables map straight to ids.

static uint32_t hash_bytes(const unsigned char* s, size_t n) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(uint32_t left, uint32_t right) {
    uint64_t x = ((uint64_t)left << 32 | right) * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing
    return (uint32_t)(x >> 32);
}

static uint32_t table_size_for(size_t n) {  // power of two >= 2n
    uint32_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

// Id of the token whose bytes are s[0..n), or -1. The end-of-text token is not in the table: it
// is never the result of a merge.
static int tokenizer_lookup(const Tokenizer* t, const unsigned char* s, size_t n) {
    for (uint32_t h = hash_bytes(s, n) & t->vocab_mask;; h = (h + 1) & t->vocab_mask) {
        int id = t->vocab_table[h];
        if (id < 0) return -1;
        if (t->offset[id + 1] - t->offset[id] == n && memcmp(t->bytes + t->offset[id], s, n) == 0) return id;
    }
}

// Id of the token that merging left and right makes (its rank), or -1 if they do not merge.
static int tokenizer_pair(const Tokenizer* t, uint32_t left, uint32_t right) {
    for (uint32_t h = hash_pair(left, right) & t->pair_mask;; h = (h + 1) & t->pair_mask) {
        const TokenPair* p = &t->pair_table[h];
        if (p->merged < 0) return -1;
        if (p->left == left && p->right == right) return p->merged;
    }
}

static void pair_insert(Tokenizer* t, uint32_t left, uint32_t right, int merged) {
    uint32_t h = hash_pair(left, right) & t->pair_mask;
    while (t->pair_table[h].merged >= 0) {
        if (t->pair_table[h].left == left && t->pair_table[h].right == right) return;
        h = (h + 1) & t->pair_mask;
    }
    t->pair_table[h].left = left;
    t->pair_table[h].right = right;
    t->pair_table[h].merged = merged;
}

// Builds the lookup tables from t->bytes and t->offset (vocab_size, eot_token set). what names
// the source in error messages.
static void tokenizer_build_tables(Tokenizer* t, const char* what) {
    int n = t->vocab_size;
    for (int b = 0; b < 256; b++) t->byte_token[b] = -1;
    t->vocab_mask = table_size_for((size_t)n) - 1;
    t->vocab_table = (int32_t*)malloc_check(((size_t)t->vocab_mask + 1) * sizeof(int32_t));
    memset(t->vocab_table, 0xff, ((size_t)t->vocab_mask + 1) * sizeof(int32_t));  // all -1
    for (int id = 0; id < n; id++) {
        if (id == t->eot_token) continue;
        const unsigned char* s = t->bytes + t->offset[id];
        size_t len = t->offset[id + 1] - t->offset[id];
        int other = tokenizer_lookup(t, s, len);
        if (other >= 0) {
            fprintf(stderr, "error: %s: tokens %d and %d have the same bytes\n", what, other, id);
            exit(1);
        }
        uint32_t h = hash_bytes(s, len) & t->vocab_mask;
        while (t->vocab_table[h] >= 0) h = (h + 1) & t->vocab_mask;
        t->vocab_table[h] = id;
        if (len == 1) t->byte_token[s[0]] = id;
    }
    for (int b = 0; b < 256; b++) {
        if (t->byte_token[b] < 0) {
            fprintf(stderr, "error: %s has no token for the byte 0x%02x: it cannot encode every text\n", what, b);
            exit(1);
        }
    }
    // Every way to cut a token in two whose halves are both tokens is a merge that makes it.
    // tiktoken merges exactly these (it looks up the concatenated bytes), not only the one pair
    // vocab.bpe lists, so we do the same.
    size_t n_pairs = 0;
    for (int pass = 0; pass < 2; pass++) {  // pass 0 counts, pass 1 inserts
        if (pass == 1) {
            t->pair_mask = table_size_for(n_pairs) - 1;
            t->pair_table = (TokenPair*)malloc_check(((size_t)t->pair_mask + 1) * sizeof(TokenPair));
            for (uint32_t i = 0; i <= t->pair_mask; i++) t->pair_table[i].merged = -1;
        }
        for (int id = 0; id < n; id++) {
            if (id == t->eot_token) continue;
            const unsigned char* s = t->bytes + t->offset[id];
            size_t len = t->offset[id + 1] - t->offset[id];
            for (size_t cut = 1; cut < len; cut++) {
                int left = tokenizer_lookup(t, s, cut);
                if (left < 0) continue;
                int right = tokenizer_lookup(t, s + cut, len - cut);
                if (right < 0) continue;
                if (pass == 0) n_pairs++;
                else pair_insert(t, (uint32_t)left, (uint32_t)right, id);
            }
        }
    }
}

// Reads an llm.c tokenizer file (../shared/FORMATS.md). Exits with one clear line on a missing,
// foreign, truncated or inconsistent file.
void tokenizer_init(Tokenizer* t, const char* path) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "error: cannot open tokenizer file %s: %s (`make data` writes data/gpt2_tokenizer.bin)\n",
                path, strerror(errno));
        exit(1);
    }
    int32_t header[HEADER_INTS];
    long long file_size = read_header_check(f, path, header);
    if (header[0] != TOKENIZER_MAGIC) {
        fprintf(stderr, "error: %s is not a tokenizer file (magic %d, expected %d); "
                "make it with: ./tokenizer vocab encoder.json vocab.bpe %s\n", path, header[0], TOKENIZER_MAGIC, path);
        exit(1);
    }
    if (header[1] != 1 && header[1] != TOKENIZER_VERSION) {
        fprintf(stderr, "error: %s has tokenizer version %d; this program reads versions 1 and 2\n", path, header[1]);
        exit(1);
    }
    int n = header[2];
    int eot = header[1] == 1 ? GPT2_EOT : header[3];
    if (n < 256 || n > TOKENIZER_MAX_VOCAB || eot < 0 || eot >= n) {
        fprintf(stderr, "error: %s: bad header (%d tokens, end-of-text id %d)\n", path, n, eot);
        exit(1);
    }
    // The rest of the file is n records of (uint8 length, bytes): read it in one go and walk it.
    size_t body = (size_t)(file_size - (long long)sizeof(header));
    unsigned char* raw = (unsigned char*)malloc_check(body);
    fread_check(raw, 1, body, f, path);
    fclose_check(f, path);
    t->vocab_size = n;
    t->eot_token = eot;
    t->offset = (uint32_t*)malloc_check(((size_t)n + 1) * sizeof(uint32_t));
    t->bytes = (unsigned char*)malloc_check(body);
    size_t pos = 0, out = 0;
    for (int id = 0; id < n; id++) {
        if (pos >= body || pos + 1 + raw[pos] > body) {
            fprintf(stderr, "error: %s is truncated: it ends inside token %d of %d\n", path, id, n);
            exit(1);
        }
        size_t len = raw[pos];
        if (len == 0) {
            fprintf(stderr, "error: %s: token %d has length 0\n", path, id);
            exit(1);
        }
        t->offset[id] = (uint32_t)out;
        memcpy(t->bytes + out, raw + pos + 1, len);
        out += len;
        pos += 1 + len;
    }
    t->offset[n] = (uint32_t)out;
    free(raw);
    if (pos != body) {
        fprintf(stderr, "error: %s has %zu unexpected bytes after its last token\n", path, body - pos);
        exit(1);
    }
    tokenizer_build_tables(t, path);
}

void tokenizer_free(Tokenizer* t) {
    free(t->bytes);
    free(t->offset);
    free(t->vocab_table);
    free(t->pair_table);
}

// The bytes of token id (*len of them, not 0-terminated), or NULL if id is out of range.
const unsigned char* tokenizer_decode(const Tokenizer* t, uint32_t id, size_t* len) {
    if (id >= (uint32_t)t->vocab_size) { *len = 0; return NULL; }
    *len = t->offset[id + 1] - t->offset[id];
    return t->bytes + t->offset[id];
}

// ---------- pre-tokenizer ----------

// Decodes the UTF-8 character at s[0] (n >= 1 bytes available) into *cp and returns its length
// 1..4, or 0 if s[0] does not start a well-formed sequence (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF, no missing continuation byte).
static inline int utf8_decode(const unsigned char* s, size_t n, uint32_t* cp) {
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

// Length and class (UCLASS_*) of the character at s[0]. A byte that does not start a
// well-formed UTF-8 sequence is a character of its own, of class "other": so any byte string
// splits into pieces, and encoding stays lossless.
static inline int utf8_char(const unsigned char* s, size_t n, int* cls) {
    if (s[0] < 0x80) {  // ASCII: the first block of the table
        *cls = unicode_blocks[unicode_block_index[0]][s[0]];
        return 1;
    }
    uint32_t cp;
    int len = utf8_decode(s, n, &cp);
    if (len == 0) { *cls = UCLASS_OTHER; return 1; }
    *cls = unicode_blocks[unicode_block_index[cp >> UNICODE_BLOCK_SHIFT]][cp & ((1u << UNICODE_BLOCK_SHIFT) - 1)];
    return len;
}

// End of the run of characters of class cls that starts at s[i].
static size_t run_end(const unsigned char* s, size_t n, size_t i, int cls) {
    while (i < n) {
        int c;
        int len = utf8_char(s + i, n - i, &c);
        if (c != cls) break;
        i += len;
    }
    return i;
}

// Length in bytes of the piece that GPT-2's regex matches at s[0] (n >= 1). The alternatives are
// tried in the regex's order; the first that matches wins (leftmost-first, as in Rust's regex).
static size_t pretoken_length(const unsigned char* s, size_t n) {
    // 's|'t|'re|'ve|'m|'ll|'d  (lower case only, as in GPT-2's pattern)
    if (s[0] == '\'' && n >= 2) {
        unsigned char a = s[1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if (n >= 3 && ((a == 'r' && s[2] == 'e') || (a == 'v' && s[2] == 'e') || (a == 'l' && s[2] == 'l'))) return 3;
    }
    int cls;
    int len = utf8_char(s, n, &cls);
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional space, then a run of one class
    if (s[0] == ' ' && n >= 2) {
        int next;
        utf8_char(s + 1, n - 1, &next);
        if (next != UCLASS_SPACE) return run_end(s, n, 1, next);
    }
    if (cls != UCLASS_SPACE) return run_end(s, n, (size_t)len, cls);
    // \s+(?!\S) | \s+ : a run of whitespace. At the end of the text, all of it. Before a
    // non-space character, the lookahead makes the regex give back the run's last character
    // (which then starts the next piece, so " word" keeps its space), unless the run is one
    // character long, which \s+ then takes alone.
    size_t i = 0, last = 0;
    while (i < n) {
        int c;
        int l = utf8_char(s + i, n - i, &c);
        if (c != UCLASS_SPACE) break;
        last = i;
        i += l;
    }
    if (i == n || last == 0) return i;
    return last;
}

// ---------- byte-pair merging ----------

// A growable array of token ids.
typedef struct {
    int* data;
    size_t n, cap;
} IdList;

static void idlist_push(IdList* l, int id) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->data = (int*)realloc_check(l->data, l->cap * sizeof(int));
    }
    l->data[l->n++] = id;
}

// Working memory of the merge loop, reused from piece to piece and grown as needed.
typedef struct {
    int* token;       // token[i]: the part that starts at byte i of the piece, or -1 inside a part
    uint32_t* next;   // next[i]: start of the part after the one at i (piece length at the end)
    uint32_t* prev;   // prev[i]: start of the part before (UINT32_MAX for the first)
    uint64_t* heap;   // min-heap of candidate merges: rank << 32 | start of the left part
    size_t cap, heap_n;
} MergeScratch;

static void scratch_reserve(MergeScratch* m, size_t n) {
    if (n <= m->cap) return;
    m->cap = n < 64 ? 64 : 2 * n;
    m->token = (int*)realloc_check(m->token, m->cap * sizeof(int));
    m->next = (uint32_t*)realloc_check(m->next, m->cap * sizeof(uint32_t));
    m->prev = (uint32_t*)realloc_check(m->prev, m->cap * sizeof(uint32_t));
    m->heap = (uint64_t*)realloc_check(m->heap, m->cap * sizeof(uint64_t));
}

static void scratch_free(MergeScratch* m) {
    free(m->token);
    free(m->next);
    free(m->prev);
    free(m->heap);
}

static void heap_push(MergeScratch* m, uint64_t key) {
    size_t i = m->heap_n++;
    while (i > 0 && m->heap[(i - 1) / 2] > key) {
        m->heap[i] = m->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->heap[i] = key;
}

static uint64_t heap_pop(MergeScratch* m) {
    uint64_t top = m->heap[0];
    uint64_t last = m->heap[--m->heap_n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= m->heap_n) break;
        if (child + 1 < m->heap_n && m->heap[child + 1] < m->heap[child]) child++;
        if (m->heap[child] >= last) break;
        m->heap[i] = m->heap[child];
        i = child;
    }
    m->heap[i] = last;
    return top;
}

// Pushes the merge of the part at left with the part after it, if those two tokens merge.
static void push_candidate(const Tokenizer* t, MergeScratch* m, uint32_t left, size_t n) {
    uint32_t right = m->next[left];
    if (right >= n) return;
    int merged = tokenizer_pair(t, (uint32_t)m->token[left], (uint32_t)m->token[right]);
    if (merged >= 0) heap_push(m, (uint64_t)merged << 32 | left);
}

// Appends the tokens of one piece s[0..n) to out. Merging always takes the candidate of lowest
// rank, leftmost first, exactly as tiktoken's byte_pair_merge; the heap makes that O(n log n)
// where a scan for the minimum after every merge would be O(n^2) on a long piece. Heap entries
// go stale when a neighbour merges first: an entry is used only if its pair still merges to the
// same rank, else dropped (a still-valid pair always has an up-to-date entry in the heap).
static void bpe_piece(const Tokenizer* t, MergeScratch* m, const unsigned char* s, size_t n, IdList* out) {
    if (n == 1) { idlist_push(out, t->byte_token[s[0]]); return; }
    int whole = tokenizer_lookup(t, s, n);
    if (whole >= 0) { idlist_push(out, whole); return; }
    scratch_reserve(m, n);
    m->heap_n = 0;
    for (size_t i = 0; i < n; i++) {
        m->token[i] = t->byte_token[s[i]];
        m->next[i] = (uint32_t)(i + 1);
        m->prev[i] = i == 0 ? UINT32_MAX : (uint32_t)(i - 1);
    }
    for (size_t i = 0; i + 1 < n; i++) push_candidate(t, m, (uint32_t)i, n);
    while (m->heap_n > 0) {
        uint64_t key = heap_pop(m);
        uint32_t left = (uint32_t)key, rank = (uint32_t)(key >> 32);
        if (m->token[left] < 0) continue;  // the left part was merged into its left neighbour
        uint32_t right = m->next[left];
        if (right >= n || tokenizer_pair(t, (uint32_t)m->token[left], (uint32_t)m->token[right]) != (int)rank) continue;
        m->token[left] = (int)rank;
        m->token[right] = -1;
        m->next[left] = m->next[right];
        if (m->next[right] < n) m->prev[m->next[right]] = left;
        if (m->prev[left] != UINT32_MAX) push_candidate(t, m, m->prev[left], n);
        push_candidate(t, m, left, n);
    }
    for (size_t i = 0; i < n; i = m->next[i]) idlist_push(out, m->token[i]);
}

// ---------- encode ----------

// Encodes s[0..n) with no special tokens, appending to out.
static void encode_ordinary(const Tokenizer* t, MergeScratch* m, const unsigned char* s, size_t n, IdList* out) {
    size_t i = 0;
    while (i < n) {
        size_t len = pretoken_length(s + i, n - i);
        bpe_piece(t, m, s + i, len, out);
        i += len;
    }
}

// Token ids of text[0..len), malloc'd, *n_out of them (the caller frees). With eot_is_special,
// each "<|endoftext|>" in the text is the token eot_token and the text between is encoded on its
// own (as tiktoken's encode with allowed_special); otherwise it is ordinary text, as tiktoken's
// encode_ordinary.
int* tokenizer_encode(const Tokenizer* t, const unsigned char* text, size_t len, int eot_is_special, size_t* n_out) {
    IdList out = {NULL, 0, 0};
    MergeScratch m;
    memset(&m, 0, sizeof(m));
    size_t eot_len = strlen(EOT_TEXT);
    size_t start = 0;
    if (eot_is_special) {
        for (size_t i = 0; i + eot_len <= len;) {
            const unsigned char* p = (const unsigned char*)memchr(text + i, '<', len - eot_len + 1 - i);
            if (p == NULL) break;
            i = (size_t)(p - text);
            if (memcmp(p, EOT_TEXT, eot_len) == 0) {
                encode_ordinary(t, &m, text + start, i - start, &out);
                idlist_push(&out, t->eot_token);
                i += eot_len;
                start = i;
            } else {
                i++;
            }
        }
    }
    encode_ordinary(t, &m, text + start, len - start, &out);
    scratch_free(&m);
    *n_out = out.n;
    if (out.data == NULL) out.data = (int*)malloc_check(sizeof(int));
    return out.data;
}

// ---------- command line ----------
#ifndef TOKENIZER_NO_MAIN

#include <time.h>

#define VAL_TOKENS 32768  // llm.c's split: the first 32,768 tokens are the validation set

// Reads all of f (a file or stdin) into a malloc'd buffer.
static unsigned char* read_all_check(FILE* f, const char* what, size_t* len) {
    size_t cap = 1 << 16, n = 0;
    unsigned char* buf = (unsigned char*)malloc_check(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (ferror(f)) { fprintf(stderr, "error: cannot read %s: %s\n", what, strerror(errno)); exit(1); }
        if (n < cap) break;
        cap *= 2;
        buf = (unsigned char*)realloc_check(buf, cap);
    }
    *len = n;
    return buf;
}

static unsigned char* read_path_check(const char* path, size_t* len) {
    if (path == NULL) return read_all_check(stdin, "standard input", len);
    FILE* f = fopen_check(path, "rb");
    unsigned char* buf = read_all_check(f, path, len);
    fclose_check(f, path);
    return buf;
}

// Line number (from 1) of byte pos of s, for error messages.
static int line_of(const unsigned char* s, size_t pos) {
    int line = 1;
    for (size_t i = 0; i < pos; i++) line += s[i] == '\n';
    return line;
}

// ---------- tokenizer file from encoder.json + vocab.bpe ----------

// GPT-2 stores tokens as printable text: each byte stands for one character (bytes_to_unicode in
// OpenAI's encoder.py). Printable bytes stand for themselves; the other 68 (control characters,
// space, 0x7F-0xA0, 0xAD) stand for U+0100, U+0101, ... in byte order, so a space is 'Ġ' (U+0120).
static void gpt2_unicode_to_byte(int table[512]) {
    for (int c = 0; c < 512; c++) table[c] = -1;
    int shifted = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        table[printable ? b : 256 + shifted++] = b;
    }
}

// Converts the code points of a GPT-2 token string to the token's bytes; returns the byte
// count, or -1 if a code point stands for no byte.
static int token_text_to_bytes(const int u2b[512], const uint32_t* cps, int n, unsigned char* out) {
    for (int i = 0; i < n; i++) {
        if (cps[i] >= 512 || u2b[cps[i]] < 0) return -1;
        out[i] = (unsigned char)u2b[cps[i]];
    }
    return n;
}

typedef struct {
    const unsigned char* s;
    size_t n, pos;
    const char* path;
} JsonReader;

static void json_fail(const JsonReader* r, const char* msg) {
    fprintf(stderr, "error: %s: %s at byte %zu (line %d)\n", r->path, msg, r->pos, line_of(r->s, r->pos));
    exit(1);
}

static void json_skip_space(JsonReader* r) {
    while (r->pos < r->n && (r->s[r->pos] == ' ' || r->s[r->pos] == '\n' || r->s[r->pos] == '\r' || r->s[r->pos] == '\t')) r->pos++;
}

static int json_hex4(JsonReader* r) {
    if (r->pos + 4 > r->n) json_fail(r, "truncated \\u escape");
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = r->s[r->pos++], d = 0;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else json_fail(r, "bad hex digit in \\u escape");
        v = v * 16 + d;
    }
    return v;
}

// Reads a JSON string into code points; returns how many (at most max).
static int json_string(JsonReader* r, uint32_t* cps, int max) {
    json_skip_space(r);
    if (r->pos >= r->n || r->s[r->pos] != '"') json_fail(r, "expected a string");
    r->pos++;
    int n = 0;
    for (;;) {
        if (r->pos >= r->n) json_fail(r, "unterminated string");
        unsigned char c = r->s[r->pos];
        uint32_t cp;
        if (c == '"') { r->pos++; return n; }
        if (c == '\\') {
            r->pos++;
            if (r->pos >= r->n) json_fail(r, "unterminated string");
            c = r->s[r->pos++];
            switch (c) {
                case '"': cp = '"'; break;
                case '\\': cp = '\\'; break;
                case '/': cp = '/'; break;
                case 'b': cp = '\b'; break;
                case 'f': cp = '\f'; break;
                case 'n': cp = '\n'; break;
                case 'r': cp = '\r'; break;
                case 't': cp = '\t'; break;
                case 'u':
                    cp = (uint32_t)json_hex4(r);
                    if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair: \uD83D\uDE00
                        if (r->pos + 2 > r->n || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u') json_fail(r, "lone surrogate in \\u escape");
                        r->pos += 2;
                        uint32_t low = (uint32_t)json_hex4(r);
                        if (low < 0xDC00 || low > 0xDFFF) json_fail(r, "bad surrogate pair in \\u escape");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    }
                    break;
                default: json_fail(r, "unknown escape"); cp = 0;
            }
        } else if (c < 0x20) {
            json_fail(r, "control character in string");
            cp = 0;
        } else {
            int len = utf8_decode(r->s + r->pos, r->n - r->pos, &cp);
            if (len == 0) json_fail(r, "invalid UTF-8 in string");
            r->pos += (size_t)len;
        }
        if (n == max) json_fail(r, "string too long for a token (more than 255 characters)");
        cps[n++] = cp;
    }
}

static long json_int(JsonReader* r) {
    json_skip_space(r);
    size_t start = r->pos;
    long v = 0;
    while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9') {
        v = v * 10 + (r->s[r->pos++] - '0');
        if (v > TOKENIZER_MAX_VOCAB) json_fail(r, "token id too large");
    }
    if (r->pos == start) json_fail(r, "expected a non-negative integer token id");
    return v;
}

static void json_expect(JsonReader* r, char c) {
    json_skip_space(r);
    if (r->pos >= r->n || r->s[r->pos] != (unsigned char)c) {
        char msg[32];
        snprintf(msg, sizeof(msg), "expected '%c'", c);
        json_fail(r, msg);
    }
    r->pos++;
}

// `./tokenizer vocab ENCODER_JSON VOCAB_BPE OUT`: checks that the two files agree (ids 0..255
// are the single bytes, merge i of vocab.bpe makes id 256+i, the last id is <|endoftext|>) and
// writes the llm.c tokenizer file (version 2).
static void cmd_vocab(const char* json_path, const char* bpe_path, const char* out_path) {
    int u2b[512];
    gpt2_unicode_to_byte(u2b);
    uint32_t cps[256];
    unsigned char tok[256];

    // encoder.json: {"token": id, ...} -> bytes of each id
    size_t json_len;
    unsigned char* json = read_path_check(json_path, &json_len);
    JsonReader r = {json, json_len, 0, json_path};
    size_t n = 0, pool_cap = 1 << 20, pool_n = 0;
    unsigned char* pool = (unsigned char*)malloc_check(pool_cap);     // the tokens' bytes, as read
    int64_t* tok_at = (int64_t*)malloc_check(TOKENIZER_MAX_VOCAB * sizeof(int64_t));  // id -> pool offset
    unsigned char* tok_len = (unsigned char*)malloc_check(TOKENIZER_MAX_VOCAB);
    for (int i = 0; i < TOKENIZER_MAX_VOCAB; i++) tok_at[i] = -1;
    int eot = -1;
    json_expect(&r, '{');
    json_skip_space(&r);
    if (r.pos < r.n && r.s[r.pos] == '}') json_fail(&r, "empty encoder");
    for (;;) {
        size_t key_pos = r.pos;
        int ncp = json_string(&r, cps, 255);
        json_expect(&r, ':');
        long id = json_int(&r);
        if (tok_at[id] >= 0) {
            char msg[64];
            snprintf(msg, sizeof(msg), "token id %ld given twice", id);
            r.pos = key_pos;
            json_fail(&r, msg);
        }
        int nb = token_text_to_bytes(u2b, cps, ncp, tok);
        if (ncp == 13 && nb == 13 && memcmp(tok, EOT_TEXT, 13) == 0) eot = (int)id;
        if (nb <= 0) { r.pos = key_pos; json_fail(&r, "token has a character outside GPT-2's byte mapping, or is empty"); }
        if (pool_n + (size_t)nb > pool_cap) { pool_cap *= 2; pool = (unsigned char*)realloc_check(pool, pool_cap); }
        memcpy(pool + pool_n, tok, (size_t)nb);
        tok_at[id] = (int64_t)pool_n;
        tok_len[id] = (unsigned char)nb;
        pool_n += (size_t)nb;
        n++;
        json_skip_space(&r);
        if (r.pos < r.n && r.s[r.pos] == ',') { r.pos++; continue; }
        json_expect(&r, '}');
        break;
    }
    json_skip_space(&r);
    if (r.pos != r.n) json_fail(&r, "unexpected text after the closing '}'");
    free(json);

    if (n < 257) { fprintf(stderr, "error: %s: only %zu tokens\n", json_path, n); exit(1); }
    Tokenizer t;
    t.vocab_size = (int)n;
    t.offset = (uint32_t*)malloc_check((n + 1) * sizeof(uint32_t));
    t.bytes = (unsigned char*)malloc_check(pool_n);
    size_t out = 0;
    for (size_t id = 0; id < n; id++) {
        if (tok_at[id] < 0) { fprintf(stderr, "error: %s has %zu tokens but no id %zu: ids must be 0..%zu\n", json_path, n, id, n - 1); exit(1); }
        if (id < 256 && tok_len[id] != 1) { fprintf(stderr, "error: %s: id %zu is not a single byte: ids 0..255 must be the 256 bytes\n", json_path, id); exit(1); }
        t.offset[id] = (uint32_t)out;
        memcpy(t.bytes + out, pool + tok_at[id], tok_len[id]);
        out += tok_len[id];
    }
    t.offset[n] = (uint32_t)out;
    free(pool);
    free(tok_at);
    free(tok_len);
    if (eot != (int)n - 1) { fprintf(stderr, "error: %s: <|endoftext|> must be the last id, %zu\n", json_path, n - 1); exit(1); }
    t.eot_token = eot;
    tokenizer_build_tables(&t, json_path);  // also checks: no two ids with the same bytes

    // vocab.bpe: "#version: 0.2", then one merge per line, "left right", rank order
    size_t bpe_len;
    unsigned char* bpe = read_path_check(bpe_path, &bpe_len);
    size_t pos = 0;
    int line = 0, merges = 0;
    while (pos < bpe_len) {
        size_t end = pos;
        while (end < bpe_len && bpe[end] != '\n') end++;
        size_t stop = end > pos && bpe[end - 1] == '\r' ? end - 1 : end;
        line++;
        const unsigned char* l = bpe + pos;
        size_t ll = stop - pos;
        pos = end + 1;
        if (ll == 0 || (line == 1 && ll >= 8 && memcmp(l, "#version", 8) == 0)) continue;
        // the two halves, as code points, split at the one space
        int half[2] = {0, 0}, side = 0;
        uint32_t hcps[2][256];
        for (size_t i = 0; i < ll;) {
            uint32_t cp;
            int len = utf8_decode(l + i, ll - i, &cp);
            if (len == 0) { fprintf(stderr, "error: %s line %d: invalid UTF-8\n", bpe_path, line); exit(1); }
            i += (size_t)len;
            if (cp == ' ') {
                if (side == 1) { fprintf(stderr, "error: %s line %d: expected two tokens separated by one space\n", bpe_path, line); exit(1); }
                side = 1;
                continue;
            }
            if (half[side] == 255) { fprintf(stderr, "error: %s line %d: token too long\n", bpe_path, line); exit(1); }
            hcps[side][half[side]++] = cp;
        }
        if (side != 1 || half[0] == 0 || half[1] == 0) { fprintf(stderr, "error: %s line %d: expected two tokens separated by one space\n", bpe_path, line); exit(1); }
        unsigned char lb[256], rb[256];
        int ln = token_text_to_bytes(u2b, hcps[0], half[0], lb);
        int rn = token_text_to_bytes(u2b, hcps[1], half[1], rb);
        if (ln < 0 || rn < 0) { fprintf(stderr, "error: %s line %d: a character outside GPT-2's byte mapping\n", bpe_path, line); exit(1); }
        int expect = 256 + merges;
        if (expect >= eot) { fprintf(stderr, "error: %s line %d: more merges than %s has tokens (%d merges fit)\n", bpe_path, line, json_path, eot - 256); exit(1); }
        if (tokenizer_lookup(&t, lb, (size_t)ln) < 0 || tokenizer_lookup(&t, rb, (size_t)rn) < 0) {
            fprintf(stderr, "error: %s line %d: merge %d joins a token that is not in %s\n", bpe_path, line, merges, json_path);
            exit(1);
        }
        size_t elen;
        const unsigned char* eb = tokenizer_decode(&t, (uint32_t)expect, &elen);
        if (elen != (size_t)(ln + rn) || memcmp(eb, lb, (size_t)ln) != 0 || memcmp(eb + ln, rb, (size_t)rn) != 0) {
            memcpy(lb + ln, rb, (size_t)rn);
            fprintf(stderr, "error: %s line %d: merge %d should make id %d of %s, but its result has id %d there\n",
                    bpe_path, line, merges, expect, json_path, tokenizer_lookup(&t, lb, (size_t)(ln + rn)));
            exit(1);
        }
        merges++;
    }
    free(bpe);
    if (256 + merges != eot) {
        fprintf(stderr, "error: %s has %d merges, but %s has %d tokens between the bytes and <|endoftext|>\n",
                bpe_path, merges, json_path, eot - 256);
        exit(1);
    }

    AtomicFile a = atomic_open_check(out_path);
    int32_t header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = TOKENIZER_MAGIC;
    header[1] = TOKENIZER_VERSION;
    header[2] = t.vocab_size;
    header[3] = t.eot_token;
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, a.f, out_path);
    for (int id = 0; id < t.vocab_size; id++) {
        size_t len;
        const unsigned char* b = tokenizer_decode(&t, (uint32_t)id, &len);
        unsigned char len8 = (unsigned char)len;
        fwrite_check(&len8, 1, 1, a.f, out_path);
        fwrite_check(b, 1, len, a.f, out_path);
    }
    atomic_close_check(&a);
    printf("wrote %s: %d tokens (%d merges), end-of-text %d\n", out_path, t.vocab_size, merges, t.eot_token);
    tokenizer_free(&t);
}

// ---------- encode, decode, prepare, bench ----------

static void cmd_encode(const Tokenizer* t, const char* path, int eot_is_special) {
    size_t len, n;
    unsigned char* text = read_path_check(path, &len);
    int* ids = tokenizer_encode(t, text, len, eot_is_special, &n);
    char* buf = (char*)malloc_check(n * 8 + 2);  // ids < 2^20: at most 7 digits and a space
    size_t b = 0;
    for (size_t i = 0; i < n; i++) b += (size_t)sprintf(buf + b, i + 1 < n ? "%d " : "%d", ids[i]);
    buf[b++] = '\n';
    fwrite_check(buf, 1, b, stdout, "standard output");
    fflush(stdout);
    free(buf);
    free(ids);
    free(text);
}

static void cmd_decode(const Tokenizer* t, const char* path) {
    size_t len;
    const char* what = path ? path : "standard input";
    unsigned char* in = read_path_check(path, &len);
    size_t cap = 1 << 16, n = 0, count = 0;
    unsigned char* out = (unsigned char*)malloc_check(cap);
    size_t i = 0;
    for (;;) {
        while (i < len && (in[i] == ' ' || in[i] == '\n' || in[i] == '\t' || in[i] == '\r')) i++;
        if (i == len) break;
        size_t start = i;
        uint64_t id = 0;
        while (i < len && in[i] >= '0' && in[i] <= '9') {
            if (id <= UINT32_MAX) id = id * 10 + (in[i] - '0');
            i++;
        }
        count++;
        if (i == start || (i < len && in[i] != ' ' && in[i] != '\n' && in[i] != '\t' && in[i] != '\r')) {
            while (i < len && in[i] != ' ' && in[i] != '\n' && in[i] != '\t' && in[i] != '\r') i++;
            fprintf(stderr, "error: %s: \"%.*s\" (id number %zu, line %d) is not a token id\n",
                    what, (int)(i - start > 40 ? 40 : i - start), (const char*)in + start, count, line_of(in, start));
            exit(1);
        }
        size_t tl;
        const unsigned char* tb = id <= UINT32_MAX ? tokenizer_decode(t, (uint32_t)id, &tl) : NULL;
        if (tb == NULL) {
            fprintf(stderr, "error: %s: token id %.*s (id number %zu, line %d) is out of range: ids are 0..%d\n",
                    what, (int)(i - start > 40 ? 40 : i - start), (const char*)in + start, count, line_of(in, start), t->vocab_size - 1);
            exit(1);
        }
        if (n + tl > cap) { cap *= 2; out = (unsigned char*)realloc_check(out, cap); }
        memcpy(out + n, tb, tl);
        n += tl;
    }
    fwrite_check(out, 1, n, stdout, "standard output");
    fflush(stdout);
    free(out);
    free(in);
}

static void write_token_file(const char* path, const int* ids, size_t n) {
    int32_t header[HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = TOKENS_MAGIC;
    header[1] = TOKENS_VERSION;
    header[2] = (int32_t)n;
    uint16_t* u16 = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) u16[i] = (uint16_t)ids[i];
    AtomicFile a = atomic_open_check(path);
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, a.f, path);
    fwrite_check(u16, sizeof(uint16_t), n, a.f, path);
    atomic_close_check(&a);
    free(u16);
}

// `./tokenizer prepare TEXT OUT_PREFIX`, the way llm.c prepares Tiny Shakespeare: the text is cut
// into sections at each blank line ("\n\n"; every section but the last keeps it), each section
// starts with <|endoftext|>, the first 32,768 tokens are OUT_PREFIX_val.bin, the rest
// OUT_PREFIX_train.bin.
static void cmd_prepare(const Tokenizer* t, const char* text_path, const char* prefix, int eot_is_special) {
    if (t->vocab_size > 65536) { fprintf(stderr, "error: token files hold uint16 ids, but the vocabulary has %d tokens\n", t->vocab_size); exit(1); }
    size_t len;
    unsigned char* text = read_path_check(text_path, &len);
    IdList all = {NULL, 0, 0};
    size_t start = 0;
    while (start <= len) {
        size_t end = start;
        while (end + 1 < len && !(text[end] == '\n' && text[end + 1] == '\n')) end++;
        end = end + 1 < len ? end + 2 : len;  // keep the "\n\n"; the last section runs to the end
        size_t n;
        int* ids = tokenizer_encode(t, text + start, end - start, eot_is_special, &n);
        idlist_push(&all, t->eot_token);
        for (size_t i = 0; i < n; i++) idlist_push(&all, ids[i]);
        free(ids);
        if (end == len) break;
        start = end;
    }
    free(text);
    if (all.n <= VAL_TOKENS) {
        fprintf(stderr, "error: %s has only %zu tokens: need more than %d (the validation set) to leave some for training\n",
                text_path, all.n, VAL_TOKENS);
        exit(1);
    }
    size_t plen = strlen(prefix);
    char* path = (char*)malloc_check(plen + 16);
    snprintf(path, plen + 16, "%s_val.bin", prefix);
    write_token_file(path, all.data, VAL_TOKENS);
    printf("wrote %s: %d tokens\n", path, VAL_TOKENS);
    snprintf(path, plen + 16, "%s_train.bin", prefix);
    write_token_file(path, all.data + VAL_TOKENS, all.n - VAL_TOKENS);
    printf("wrote %s: %zu tokens\n", path, all.n - VAL_TOKENS);
    free(path);
    free(all.data);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int compare_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// `./tokenizer bench FILE [REPEATS]`: encode only (the file and the tokenizer are loaded before
// the clock starts), REPEATS times on one thread; prints the median throughput.
static void cmd_bench(const Tokenizer* t, const char* path, int repeats, int eot_is_special) {
    size_t len, n = 0;
    unsigned char* text = read_path_check(path, &len);
    double* secs = (double*)malloc_check((size_t)repeats * sizeof(double));
    for (int r = 0; r < repeats; r++) {
        double t0 = now_seconds();
        int* ids = tokenizer_encode(t, text, len, eot_is_special, &n);
        secs[r] = now_seconds() - t0;
        free(ids);
    }
    qsort(secs, (size_t)repeats, sizeof(double), compare_double);
    double median = secs[repeats / 2];
    printf("ours: %s: %zu bytes -> %zu tokens, median of %d runs %.4f s, %.2f MB/s\n",
           path, len, n, repeats, median, len / median / 1e6);
    free(secs);
    free(text);
}

static void usage(FILE* f) {
    fprintf(f,
        "usage: ./tokenizer [-k TOKENIZER_FILE] [-s] COMMAND ARGS\n"
        "GPT-2 byte-level BPE, identical to tiktoken's gpt2 encoding.\n"
        "commands:\n"
        "  encode [FILE]                      token ids of FILE (default stdin), space-separated, on stdout\n"
        "  decode [FILE]                      ids (whitespace-separated) from FILE or stdin back to bytes\n"
        "  prepare TEXT_FILE OUT_PREFIX       llm.c token files OUT_PREFIX_val.bin (first 32,768 tokens)\n"
        "                                     and OUT_PREFIX_train.bin; <|endoftext|> before each section\n"
        "                                     of the text that a blank line (\"\\n\\n\") ends\n"
        "  vocab ENCODER_JSON VOCAB_BPE OUT   write the tokenizer file OUT from GPT-2's encoder.json and\n"
        "                                     vocab.bpe, checking that they agree\n"
        "  bench FILE [REPEATS]               time encoding FILE REPEATS times (default 10), one thread\n"
        "options:\n"
        "  -k PATH   tokenizer file (default data/gpt2_tokenizer.bin)\n"
        "  -s        the text \"<|endoftext|>\" is the special token; by default it is ordinary text,\n"
        "            as in tiktoken's encode_ordinary\n"
        "  -h        this help\n");
}

static void need_args(int have, int want_min, int want_max, const char* command) {
    if (have < want_min || have > want_max) {
        fprintf(stderr, "error: wrong number of arguments for %s (./tokenizer -h for usage)\n", command);
        exit(1);
    }
}

int main(int argc, char** argv) {
    const char* tokenizer_path = "data/gpt2_tokenizer.bin";
    int eot_is_special = 0;
    const char* args[8];
    int nargs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) { usage(stdout); return 0; }
        else if (strcmp(argv[i], "-s") == 0) eot_is_special = 1;
        else if (strcmp(argv[i], "-k") == 0) {
            if (i + 1 >= argc) { fprintf(stderr, "error: -k needs a path\n"); return 1; }
            tokenizer_path = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "error: unknown option %s (./tokenizer -h for usage)\n", argv[i]);
            return 1;
        } else {
            if (nargs == 8) { fprintf(stderr, "error: too many arguments\n"); return 1; }
            args[nargs++] = argv[i];
        }
    }
    if (nargs == 0) { usage(stderr); return 1; }
    const char* cmd = args[0];
    int n = nargs - 1;
    if (strcmp(cmd, "vocab") == 0) {
        need_args(n, 3, 3, cmd);
        cmd_vocab(args[1], args[2], args[3]);
        return 0;
    }
    int is_encode = strcmp(cmd, "encode") == 0, is_decode = strcmp(cmd, "decode") == 0;
    int is_prepare = strcmp(cmd, "prepare") == 0, is_bench = strcmp(cmd, "bench") == 0;
    if (!is_encode && !is_decode && !is_prepare && !is_bench) {
        fprintf(stderr, "error: unknown command %s (./tokenizer -h for usage)\n", cmd);
        return 1;
    }
    if (is_encode || is_decode) need_args(n, 0, 1, cmd);
    if (is_prepare) need_args(n, 2, 2, cmd);
    if (is_bench) need_args(n, 1, 2, cmd);
    int repeats = 10;
    if (is_bench && n == 2) {
        repeats = atoi(args[2]);
        if (repeats < 1 || repeats > 100000) { fprintf(stderr, "error: REPEATS must be 1..100000\n"); return 1; }
    }
    Tokenizer t;
    tokenizer_init(&t, tokenizer_path);
    const char* file = n >= 1 && strcmp(args[1], "-") != 0 ? args[1] : NULL;
    if (is_encode) cmd_encode(&t, file, eot_is_special);
    if (is_decode) cmd_decode(&t, file);
    if (is_prepare) cmd_prepare(&t, args[1], args[2], eot_is_special);
    if (is_bench) cmd_bench(&t, args[1], repeats, eot_is_special);
    tokenizer_free(&t);
    return 0;
}

#endif // TOKENIZER_NO_MAIN

#endif // TOKENIZER_C
