// gpt2/tokenizer.h: GPT-2's byte-level BPE, identical to tiktoken's "gpt2" encoding: read the
// tokenizer file, encode text, decode ids to bytes (tokenizer.c is the program around it).
// Three steps (doc/tokenizer.md): 1. pre-tokenize with GPT-2's regex, written out as a state
// machine over UTF-8 characters and their class (gpt2/unicode.h); 2. a piece that is a token is
// that token; 3. else merge adjacent pairs, lowest rank first (a token's id is its rank).
// Invalid UTF-8 bytes are characters of class "other": every byte string encodes losslessly.

#ifndef GPT2_TOKENIZER_H
#define GPT2_TOKENIZER_H

#include "io.h"
#include "unicode.h"
#include "utf8.h"

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
            fail("%s: tokens %d and %d have the same bytes", what, other, id);
        }
        uint32_t h = hash_bytes(s, len) & t->vocab_mask;
        while (t->vocab_table[h] >= 0) h = (h + 1) & t->vocab_mask;
        t->vocab_table[h] = id;
        if (len == 1) t->byte_token[s[0]] = id;
    }
    for (int b = 0; b < 256; b++) {
        if (t->byte_token[b] < 0) {
            fail("%s has no token for the byte 0x%02x: it cannot encode every text", what, b);
        }
    }
    // Every cut of a token into two tokens is a merge that makes it, as in tiktoken (which looks
    // up the concatenated bytes), not only the pair vocab.bpe lists.
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

// Reads an llm.c tokenizer file (doc/formats.md). Exits with one clear line on a missing,
// foreign, truncated or inconsistent file.
void tokenizer_init(Tokenizer* t, const char* path) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fail("cannot open tokenizer file %s: %s (`make data` writes data/gpt2_tokenizer.bin)",
             path, strerror(errno));
    }
    int32_t header[HEADER_INTS];
    long long file_size = read_header_check(f, path, header);
    if (header[0] != TOKENIZER_MAGIC) {
        fail("%s is not a tokenizer file (magic %d, expected %d); "
             "make it with: ./tokenizer vocab encoder.json vocab.bpe %s", path, header[0], TOKENIZER_MAGIC, path);
    }
    if (header[1] != 1 && header[1] != TOKENIZER_VERSION) {
        fail("%s has tokenizer version %d; this program reads versions 1 and 2", path, header[1]);
    }
    int n = header[2];
    int eot = header[1] == 1 ? GPT2_EOT : header[3];
    if (n < 256 || n > TOKENIZER_MAX_VOCAB || eot < 0 || eot >= n) {
        fail("%s: bad header (%d tokens, end-of-text id %d)", path, n, eot);
    }
    // n records of (uint8 length, bytes), read in one go; a record takes at least 2 bytes, so a
    // header claiming more than the body holds is refused before any allocation.
    size_t body = (size_t)(file_size - (long long)sizeof(header));
    if ((size_t)n > body / 2) {
        fail("%s is truncated: its header says %d tokens, its %zu bytes after the header hold at most %zu",
             path, n, body, body / 2);
    }
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
            fail("%s is truncated: it ends inside token %d of %d", path, id, n);
        }
        size_t len = raw[pos];
        if (len == 0) {
            fail("%s: token %d has length 0", path, id);
        }
        t->offset[id] = (uint32_t)out;
        memcpy(t->bytes + out, raw + pos + 1, len);
        out += len;
        pos += 1 + len;
    }
    t->offset[n] = (uint32_t)out;
    free(raw);
    if (pos != body) {
        fail("%s has %zu unexpected bytes after its last token", path, body - pos);
    }
    // the special token must be <|endoftext|>, so decoding it gives the text back
    size_t eot_len = t->offset[eot + 1] - t->offset[eot];
    if (eot_len != strlen(EOT_TEXT) || memcmp(t->bytes + t->offset[eot], EOT_TEXT, eot_len) != 0) {
        fail("%s: token %d, the end-of-text id of its header, is not " EOT_TEXT, path, eot);
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

// Length and class (UCLASS_*) of the character at s[0]; a byte of invalid UTF-8 is one of class
// "other".
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
    // \s+(?!\S) | \s+ : a run of whitespace; before a non-space the lookahead gives back its
    // last character (so " word" keeps its space), unless the run is one character long
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
    uint64_t* heap;   // min-heap of candidate merges: rank << 32 | start of the left part; it
                      // keeps stale entries, so it holds up to 3 per byte (below)
    size_t cap, heap_n;
} MergeScratch;

static void scratch_reserve(MergeScratch* m, size_t n) {
    if (n <= m->cap) return;
    m->cap = n < 64 ? 64 : 2 * n;
    m->token = (int*)realloc_check(m->token, m->cap * sizeof(int));
    m->next = (uint32_t*)realloc_check(m->next, m->cap * sizeof(uint32_t));
    m->prev = (uint32_t*)realloc_check(m->prev, m->cap * sizeof(uint32_t));
    // n-1 candidates, then at most 2 per merge, n-1 merges: under 3n entries, stale ones included
    m->heap = (uint64_t*)realloc_check(m->heap, 3 * m->cap * sizeof(uint64_t));
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

// Appends the tokens of one piece s[0..n) to out, merging the lowest rank first, leftmost on ties,
// as tiktoken's byte_pair_merge; a heap makes it O(n log n), not O(n^2). An entry goes stale when
// a neighbour merges first: used only if its pair still merges to the same rank, else dropped.
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

// Appends the token ids of text[0..len) to out. eot_is_special: "<|endoftext|>" is eot_token (as
// tiktoken's allowed_special), else ordinary text. m: working memory from call to call (zeroed
// first, scratch_free last); the Tokenizer is only read, so threads may share it.
static void tokenizer_encode_append(const Tokenizer* t, MergeScratch* m, const unsigned char* text, size_t len,
                                    int eot_is_special, IdList* out) {
    size_t eot_len = strlen(EOT_TEXT);
    size_t start = 0;
    if (eot_is_special) {
        for (size_t i = 0; i + eot_len <= len;) {
            const unsigned char* p = (const unsigned char*)memchr(text + i, '<', len - eot_len + 1 - i);
            if (p == NULL) break;
            i = (size_t)(p - text);
            if (memcmp(p, EOT_TEXT, eot_len) == 0) {
                encode_ordinary(t, m, text + start, i - start, out);
                idlist_push(out, t->eot_token);
                i += eot_len;
                start = i;
            } else {
                i++;
            }
        }
    }
    encode_ordinary(t, m, text + start, len - start, out);
}

// Token ids of text[0..len), malloc'd, *n_out of them (the caller frees); eot_is_special as above.
int* tokenizer_encode(const Tokenizer* t, const unsigned char* text, size_t len, int eot_is_special, size_t* n_out) {
    IdList out = {NULL, 0, 0};
    MergeScratch m;
    memset(&m, 0, sizeof(m));
    tokenizer_encode_append(t, &m, text, len, eot_is_special, &out);
    scratch_free(&m);
    *n_out = out.n;
    if (out.data == NULL) out.data = (int*)malloc_check(sizeof(int));
    return out.data;
}

// ---------- printing ----------

// Prints a token's bytes without control bytes but newline and tab (sampled text must not garble
// the terminal); with tok NULL, the id.
static inline void print_token(const Tokenizer* tok, int id) {
    if (tok == NULL) {
        printf("%d ", id);
        return;
    }
    size_t len = 0;
    const unsigned char* bytes = tokenizer_decode(tok, (uint32_t)id, &len);
    if (bytes == NULL) return;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = bytes[i];
        if (c >= 32 || c == '\n' || c == '\t') putchar(c);
    }
}

#endif // GPT2_TOKENIZER_H
