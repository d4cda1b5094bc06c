// tokenizer.c: GPT-2's tokenizer as a program: where its vocabulary comes from, and text to
// token files and back.
//
//   ./tokenizer vocab encoder.json vocab.bpe OUT   OpenAI's two files -> the tokenizer file
//   ./tokenizer encode [FILE] | decode [FILE]       text <-> token ids, exactly as tiktoken
//   ./tokenizer prepare [-n TOKENS] TEXT... OUT_PREFIX
//                                                   texts -> OUT_PREFIX_{val,train}.bin, or shards

// Read gpt2/tokenizer.h first: the byte-pair encoder itself, shared with infer.c and the
// trainers. This file is the other half: how GPT-2 writes its vocabulary down (every byte as a
// printable character, merges as pairs of such strings ranked by their line in vocab.bpe), the
// checks that the two files agree, and the commands.

#include <dirent.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "gpt2/io.h"
#include "gpt2/json.h"
#include "gpt2/tokenizer.h"

// ---------- reading whole files ----------

// Reads all of f (a file or stdin) into a malloc'd buffer.
static unsigned char* read_all_check(FILE* f, const char* what, size_t* len) {
    size_t cap = 1 << 16, n = 0;
    unsigned char* buf = (unsigned char*)malloc_check(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (ferror(f)) fail("cannot read %s: %s", what, strerror(errno));
        if (n < cap) break;
        cap *= 2;
        buf = (unsigned char*)realloc_check(buf, cap);
    }
    *len = n;
    return buf;
}

// All of the file at path, or of standard input when path is NULL.
static unsigned char* read_path_check(const char* path, size_t* len) {
    if (path == NULL) return read_all_check(stdin, "standard input", len);
    FILE* f = fopen_check(path, "rb");
    unsigned char* buf = read_all_check(f, path, len);
    fclose_check(f, path);
    return buf;
}

// ---------- GPT-2's byte mapping ----------

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

// ---------- encoder.json: a JSON object {"token": id, ...} ----------
// The JSON is read by gpt2/json.h; what encoder.json asks on top of it is checked here: a token
// is at most 255 characters of GPT-2's byte mapping, and the ids are 0..n-1, each given once.

// The tokens of encoder.json, as read: the bytes of token id are pool[at[id] .. at[id] + len[id]).
typedef struct {
    unsigned char* pool;
    size_t pool_n, pool_cap;
    int64_t* at;            // (ids) -1 where no token has that id
    unsigned char* len;     // (ids)
    size_t ids;             // entries of at and len: grown to cover the largest id read so far
    size_t count;
    int eot;                // the id of "<|endoftext|>", or -1
} EncoderTokens;

// One "token": id entry (r at its key) into e.
static void read_encoder_entry(JsonReader* r, const int u2b[512], EncoderTokens* e) {
    uint32_t cps[256], cp;
    unsigned char tok[256];
    size_t key_pos = r->pos;
    int ncp = 0;
    json_string_begin(r);
    while (json_string_char(r, &cp)) {
        if (ncp == 255) json_fail(r, "string too long for a token (more than 255 characters)");
        cps[ncp++] = cp;
    }
    json_expect(r, ':');
    long id = (long)json_int(r, TOKENIZER_MAX_VOCAB - 1, "token id");
    // ids must be 0..n-1, and each of n entries takes more than 4 bytes ("x":0,): an id beyond
    // that cannot be right, and the tables are never made larger than the file can fill
    if ((size_t)id >= r->n / 4) {
        r->pos = key_pos;
        json_fail(r, "token id too large for the size of the file");
    }
    if ((size_t)id >= e->ids) {  // grown as ids come, so a small file gets small tables
        size_t ids = e->ids ? e->ids : 1024;
        while (ids <= (size_t)id) ids *= 2;
        e->at = (int64_t*)realloc_check(e->at, ids * sizeof(int64_t));
        e->len = (unsigned char*)realloc_check(e->len, ids);
        for (size_t i = e->ids; i < ids; i++) e->at[i] = -1;
        e->ids = ids;
    }
    if (e->at[id] >= 0) {
        char msg[64];
        snprintf(msg, sizeof(msg), "token id %ld given twice", id);
        r->pos = key_pos;
        json_fail(r, msg);
    }
    int nb = token_text_to_bytes(u2b, cps, ncp, tok);
    if (nb <= 0) {
        r->pos = key_pos;
        json_fail(r, "token has a character outside GPT-2's byte mapping, or is empty");
    }
    if (nb == 13 && memcmp(tok, EOT_TEXT, 13) == 0) e->eot = (int)id;
    if (e->pool_n + (size_t)nb > e->pool_cap) {
        e->pool_cap *= 2;
        e->pool = (unsigned char*)realloc_check(e->pool, e->pool_cap);
    }
    memcpy(e->pool + e->pool_n, tok, (size_t)nb);
    e->at[id] = (int64_t)e->pool_n;
    e->len[id] = (unsigned char)nb;
    e->pool_n += (size_t)nb;
    e->count++;
}

// Reads encoder.json into a tokenizer (its tables built) and checks it: ids 0..n-1 each given
// once, ids 0..255 the single bytes, <|endoftext|> the last id.
static void read_encoder_json(Tokenizer* t, const char* json_path) {
    int u2b[512];
    gpt2_unicode_to_byte(u2b);
    size_t json_len;
    unsigned char* json = read_path_check(json_path, &json_len);
    JsonReader r = json_reader(json, json_len, json_path, NULL);
    EncoderTokens e;
    e.pool_cap = 1 << 16;  // doubled as needed
    e.pool_n = 0;
    e.pool = (unsigned char*)malloc_check(e.pool_cap);
    e.at = NULL;
    e.len = NULL;
    e.ids = 0;
    e.count = 0;
    e.eot = -1;
    json_expect(&r, '{');
    while (json_next(&r, '}', e.count)) read_encoder_entry(&r, u2b, &e);
    if (e.count == 0) json_fail(&r, "empty encoder");
    json_end(&r);
    free(json);

    size_t n = e.count;
    if (n < 257) fail("%s: only %zu tokens", json_path, n);
    t->vocab_size = (int)n;
    t->offset = (uint32_t*)malloc_check((n + 1) * sizeof(uint32_t));
    t->bytes = (unsigned char*)malloc_check(e.pool_n);
    size_t out = 0;
    for (size_t id = 0; id < n; id++) {
        if (id >= e.ids || e.at[id] < 0) fail("%s has %zu tokens but no id %zu: ids must be 0..%zu", json_path, n, id, n - 1);
        if (id < 256 && e.len[id] != 1) {
            fail("%s: id %zu is not a single byte: ids 0..255 must be the 256 bytes", json_path, id);
        }
        t->offset[id] = (uint32_t)out;
        memcpy(t->bytes + out, e.pool + e.at[id], e.len[id]);
        out += e.len[id];
    }
    t->offset[n] = (uint32_t)out;
    free(e.pool);
    free(e.at);
    free(e.len);
    if (e.eot != (int)n - 1) fail("%s: <|endoftext|> must be the last id, %zu", json_path, n - 1);
    t->eot_token = e.eot;
    tokenizer_build_tables(t, json_path);  // also checks: no two ids with the same bytes
}

// ---------- vocab.bpe: the merges, one a line, in rank order ----------

// Checks one line "left right" of vocab.bpe: merge number `merge` must join two tokens of t into
// token 256 + merge.
static void check_merge_line(const Tokenizer* t, const int u2b[512], const unsigned char* l, size_t ll,
                             int merge, const char* bpe_path, int line, const char* json_path) {
    // the two halves, as code points, split at the one space
    int half[2] = {0, 0}, side = 0;
    uint32_t hcps[2][256];
    for (size_t i = 0; i < ll;) {
        uint32_t cp;
        int len = utf8_decode(l + i, ll - i, &cp);
        if (len == 0) fail("%s line %d: invalid UTF-8", bpe_path, line);
        i += (size_t)len;
        if (cp == ' ' && side == 0) {
            side = 1;
            continue;
        }
        if (cp == ' ') fail("%s line %d: expected two tokens separated by one space", bpe_path, line);
        if (half[side] == 255) fail("%s line %d: token too long", bpe_path, line);
        hcps[side][half[side]++] = cp;
    }
    if (side != 1 || half[0] == 0 || half[1] == 0) {
        fail("%s line %d: expected two tokens separated by one space", bpe_path, line);
    }
    unsigned char lb[512], rb[256];
    int ln = token_text_to_bytes(u2b, hcps[0], half[0], lb);
    int rn = token_text_to_bytes(u2b, hcps[1], half[1], rb);
    if (ln < 0 || rn < 0) fail("%s line %d: a character outside GPT-2's byte mapping", bpe_path, line);
    int expect = 256 + merge;
    if (expect >= t->eot_token) {
        fail("%s line %d: more merges than %s has tokens (%d merges fit)", bpe_path, line, json_path,
             t->eot_token - 256);
    }
    if (tokenizer_lookup(t, lb, (size_t)ln) < 0 || tokenizer_lookup(t, rb, (size_t)rn) < 0) {
        fail("%s line %d: merge %d joins a token that is not in %s", bpe_path, line, merge, json_path);
    }
    size_t elen;
    const unsigned char* eb = tokenizer_decode(t, (uint32_t)expect, &elen);
    if (elen != (size_t)(ln + rn) || memcmp(eb, lb, (size_t)ln) != 0 || memcmp(eb + ln, rb, (size_t)rn) != 0) {
        memcpy(lb + ln, rb, (size_t)rn);
        fail("%s line %d: merge %d should make id %d of %s, but its result has id %d there", bpe_path,
             line, merge, expect, json_path, tokenizer_lookup(t, lb, (size_t)(ln + rn)));
    }
}

// Checks every merge of vocab.bpe ("#version: 0.2", then "left right" lines) against t; returns
// how many there are, which must be every token between the bytes and <|endoftext|>.
static int check_merges(const Tokenizer* t, const char* bpe_path, const char* json_path) {
    int u2b[512];
    gpt2_unicode_to_byte(u2b);
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
        check_merge_line(t, u2b, l, ll, merges, bpe_path, line, json_path);
        merges++;
    }
    free(bpe);
    if (256 + merges != t->eot_token) {
        fail("%s has %d merges, but %s has %d tokens between the bytes and <|endoftext|>", bpe_path,
             merges, json_path, t->eot_token - 256);
    }
    return merges;
}

// `./tokenizer vocab ENCODER_JSON VOCAB_BPE OUT`: checks that the two files agree (ids 0..255
// are the single bytes, merge i of vocab.bpe makes id 256+i, the last id is <|endoftext|>) and
// writes the llm.c tokenizer file (version 2).
static void cmd_vocab(const char* json_path, const char* bpe_path, const char* out_path) {
    Tokenizer t;
    read_encoder_json(&t, json_path);
    int merges = check_merges(&t, bpe_path, json_path);
    AtomicFile a = atomic_open_check(out_path);
    int32_t header[HEADER_INTS];
    header_init(header, TOKENIZER_MAGIC, TOKENIZER_VERSION);
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

// ---------- encode, decode ----------

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

static int is_space(unsigned char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

// The bytes that in[0..len), whitespace-separated decimal token ids, stand for: malloc'd, *n_out
// of them. Anything that is not an id below the vocabulary size is an error naming it. what names
// the source in messages.
static unsigned char* decode_ids_check(const Tokenizer* t, const unsigned char* in, size_t len,
                                       const char* what, size_t* n_out) {
    size_t cap = 1 << 16, n = 0, count = 0;
    unsigned char* out = (unsigned char*)malloc_check(cap);
    size_t i = 0;
    for (;;) {
        while (i < len && is_space(in[i])) i++;
        if (i == len) break;
        size_t start = i;
        uint64_t id = 0;
        while (i < len && in[i] >= '0' && in[i] <= '9') {
            if (id <= UINT32_MAX) id = id * 10 + (in[i] - '0');
            i++;
        }
        count++;
        int shown = (int)(i - start > 40 ? 40 : i - start);
        if (i == start || (i < len && !is_space(in[i]))) {
            while (i < len && !is_space(in[i])) i++;
            shown = (int)(i - start > 40 ? 40 : i - start);
            fail("%s: \"%.*s\" (id number %zu, line %d) is not a token id", what, shown,
                 (const char*)in + start, count, line_of(in, start));
        }
        size_t tl;
        const unsigned char* tb = id <= UINT32_MAX ? tokenizer_decode(t, (uint32_t)id, &tl) : NULL;
        if (tb == NULL) {
            fail("%s: token id %.*s (id number %zu, line %d) is out of range: ids are 0..%d", what,
                 shown, (const char*)in + start, count, line_of(in, start), t->vocab_size - 1);
        }
        if (n + tl > cap) {
            cap *= 2;
            out = (unsigned char*)realloc_check(out, cap);
        }
        memcpy(out + n, tb, tl);
        n += tl;
    }
    *n_out = n;
    return out;
}

// `./tokenizer decode [FILE]`: whitespace-separated ids back to the bytes they stand for.
static void cmd_decode(const Tokenizer* t, const char* path) {
    size_t len, n;
    unsigned char* in = read_path_check(path, &len);
    unsigned char* out = decode_ids_check(t, in, len, path ? path : "standard input", &n);
    fwrite_check(out, 1, n, stdout, "standard output");
    fflush(stdout);
    free(out);
    free(in);
}

// ---------- prepare: text to token files ----------
//
// `prepare` streams. It reads the text a chunk at a time, cuts the chunk into pieces at the ends
// of sections (a blank line ends a section) or, inside a long section, where no id can change
// (below), encodes the pieces on all cores, and writes their ids in order to token files filled
// one after another. Its memory is a chunk of text and its ids, whatever the size of the text:
// only a stretch longer than a chunk with no place to cut it makes the buffer grow.

#define VAL_TOKENS 32768  // llm.c's split: the first 32,768 tokens are the validation set
#ifndef PREPARE_CHUNK_BYTES  // both can be set when compiling: a test makes them small
#define PREPARE_CHUNK_BYTES ((size_t)32 << 20)  // text read at a time
#endif
#ifndef PREPARE_PIECE_BYTES
#define PREPARE_PIECE_BYTES ((size_t)256 << 10)  // the work of a thread at a time: this much or a
                                                 // little more, many per chunk for an even share
#endif

// A piece of the text, the work of one thread: whole sections, or a part of a long one.
typedef struct {
    size_t start, end;  // bytes of the chunk
    int mid;            // it starts inside a section, at a cut: no <|endoftext|> before it
} Piece;

typedef struct {
    Piece* data;
    size_t n, cap;
} PieceList;

static void piece_push(PieceList* l, size_t start, size_t end, int mid) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->data = (Piece*)realloc_check(l->data, l->cap * sizeof(Piece));
    }
    l->data[l->n].start = start;
    l->data[l->n].end = end;
    l->data[l->n].mid = mid;
    l->n++;
}

// Just past the first "\n\n" of text[from..end), or 0 if there is none: where the section that
// from is in ends, when from is the section's start or a place where no "\n\n" begins a byte
// earlier (then the pairs found are those that a search from the section's start finds).
static size_t section_end(const unsigned char* text, size_t from, size_t end) {
    while (from + 1 < end) {
        const unsigned char* nl = (const unsigned char*)memchr(text + from, '\n', end - 1 - from);
        if (nl == NULL) break;
        size_t i = (size_t)(nl - text);
        if (text[i + 1] == '\n') return i + 2;
        from = i + 1;
    }
    return 0;
}

// Where a piece may end. Sections end after "\n\n", the pairs taken from the left: in a run of
// '\n' that starts at r (text[r-1] is not '\n'), at r+2, r+4, ... So just past a "\n\n" that
// starts such a run, a section ends, whatever came before.
// Inside a section, a piece may end where the two halves encode to the ids of the whole: just
// before a lone '\n' followed by a character that is not whitespace (with -s, nor '<'). The proof
// from GPT-2's regex, for any vocabulary: doc/tokenizer.md, "Where a chunk may be cut".
// Returns the first such place at or after from (> 0: it looks a byte back), or 0 if there is
// none in text[..have) that can be told yet: unless at_end, the text goes on past have.
static size_t next_piece_end(const unsigned char* text, size_t from, size_t have, int at_end, int eot_is_special,
                             int* mid) {
    for (size_t i = from; i < have;) {
        const unsigned char* nl = (const unsigned char*)memchr(text + i, '\n', have - i);
        if (nl == NULL) break;
        size_t r = (size_t)(nl - text);
        i = r + 1;
        if (text[r - 1] == '\n') continue;  // not the start of its run
        if (r + 1 == have) break;           // what follows is not read yet, or the text ends
        if (text[r + 1] == '\n') {
            *mid = 0;
            return r + 2;
        }
        if (!at_end && r + 5 > have) break;  // the character after it may not be whole yet
        int cls;
        utf8_char(text + r + 1, have - r - 1, &cls);
        if (cls != UCLASS_SPACE && !(eot_is_special && text[r + 1] == '<')) {
            *mid = 1;
            return r;
        }
    }
    return 0;
}

// Cuts text[0..have) into pieces of PREPARE_PIECE_BYTES or a little more, each ending where
// next_piece_end allows. *mid says that text[0] is inside a section begun in an earlier chunk,
// at_end that the text ends at have. Returns how many bytes went into pieces: the rest waits
// for the next chunk.
static size_t plan_pieces(const unsigned char* text, size_t have, int at_end, int eot_is_special, int* mid,
                          PieceList* out) {
    size_t start = 0;
    for (;;) {
        int next_mid = 0;
        size_t end = start + PREPARE_PIECE_BYTES < have
            ? next_piece_end(text, start + PREPARE_PIECE_BYTES, have, at_end, eot_is_special, &next_mid) : 0;
        if (end == 0) {
            if (!at_end) return start;
            if (start < have) piece_push(out, start, have, *mid);
            *mid = 0;
            return have;
        }
        piece_push(out, start, end, *mid);
        *mid = next_mid;
        start = end;
    }
}

// Appends the ids of a piece to out: each section in it encoded on its own, after <|endoftext|>
// (but for a part of a section that an earlier piece began).
static void encode_piece(const Tokenizer* t, MergeScratch* m, const unsigned char* text, const Piece* p,
                         int eot_is_special, IdList* out) {
    if (p->start == p->end) {  // an empty text: one empty section
        idlist_push(out, t->eot_token);
        return;
    }
    int new_section = !p->mid;
    for (size_t start = p->start; start < p->end;) {
        size_t end = section_end(text, start, p->end);
        if (end == 0) end = p->end;
        if (new_section) idlist_push(out, t->eot_token);
        tokenizer_encode_append(t, m, text + start, end - start, eot_is_special, out);
        new_section = 1;
        start = end;
    }
}

// Progress of a long `prepare` on stderr, so that a person can follow it: nothing for the first
// second (Tiny Shakespeare takes less), then on a terminal one line rewritten in place every
// second, elsewhere (a log) a line every 10 seconds.
typedef struct {
    double start, last;
    int tty, shown;
    long long total;  // bytes of all the texts, or -1 when not known (standard input): no ETA
} Progress;

static void progress_update(Progress* p, size_t done, size_t tokens, int shards) {
    double now = now_seconds();
    if (now - p->start < 1.0 || now - p->last < (p->tty ? 1.0 : 10.0)) return;
    p->last = now;
    p->shown = 1;
    double rate = done / (now - p->start);
    char line[256], eta[32];
    int n = p->total >= 0
        ? snprintf(line, sizeof(line), "prepare: %.0f%% of %.1f MB", 100.0 * done / (p->total > 0 ? p->total : 1),
                   p->total / 1e6)
        : snprintf(line, sizeof(line), "prepare: %.1f MB", done / 1e6);
    n += snprintf(line + n, sizeof(line) - n, ", %.1fM tokens", tokens / 1e6);
    if (shards >= 0) n += snprintf(line + n, sizeof(line) - n, ", %d shards", shards);
    n += snprintf(line + n, sizeof(line) - n, ", %.1f MB/s", rate / 1e6);
    if (p->total >= 0 && (long long)done <= p->total) {
        snprintf(line + n, sizeof(line) - n, ", ETA %s", format_duration(eta, sizeof(eta), (p->total - done) / rate));
    }
    fprintf(stderr, "%s%s%s", p->tty ? "\r" : "", line, p->tty ? "\033[K" : "\n");
    fflush(stderr);
}

// Clears the progress line of a terminal before a line of stdout.
static void progress_clear(Progress* p) {
    if (p->tty && p->shown) fputs("\r\033[K", stderr);
}

// Token files filled one after another. Each is written to PATH.tmp as its ids come, and renamed
// to PATH once full and more ids follow, or at the end. With shards (-n), every file holds
// shard_tokens ids (the last one fewer): PREFIX_val_000000.bin, then PREFIX_train_000001.bin, ...,
// llm.c's names, the first shard being the validation set. Without, llm.c's two files:
// PREFIX_val.bin with the first VAL_TOKENS ids, PREFIX_train.bin with the rest.
typedef struct {
    const char* prefix;
    size_t shard_tokens;  // ids per shard; 0: the two files
    AtomicFile file;      // the file being written
    char* path;
    size_t in_file;       // ids in it so far
    int done;             // files complete
    size_t total;         // ids so far
    Progress* progress;
} TokenWriter;

// The .tmp of the token file being written: a run that fails removes it (through fail_stop of
// gpt2/io.h), so that no half-written file is left.
static const char* writing_tmp = NULL;

static void remove_writing_tmp(void) {
    if (writing_tmp != NULL) remove(writing_tmp);
}

static size_t writer_capacity(const TokenWriter* w) {
    if (w->shard_tokens) return w->shard_tokens;
    return w->done == 0 ? VAL_TOKENS : (size_t)INT32_MAX;  // the header counts in an int32
}

static void writer_open(TokenWriter* w) {
    size_t size = strlen(w->prefix) + 32;
    w->path = (char*)malloc_check(size);
    const char* split = w->done == 0 ? "val" : "train";
    if (w->shard_tokens) snprintf(w->path, size, "%s_%s_%06d.bin", w->prefix, split, w->done);
    else snprintf(w->path, size, "%s_%s.bin", w->prefix, split);
    w->file = atomic_open_check(w->path);
    writing_tmp = w->file.tmp_path;
    fail_stop = remove_writing_tmp;
    int32_t header[HEADER_INTS];
    header_init(header, TOKENS_MAGIC, TOKENS_VERSION);  // the count is written when the file is complete
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, w->file.f, w->file.tmp_path);
    w->in_file = 0;
}

static void writer_close(TokenWriter* w) {
    int32_t header[HEADER_INTS];
    header_init(header, TOKENS_MAGIC, TOKENS_VERSION);
    header[2] = (int32_t)w->in_file;
    if (fseek(w->file.f, 0, SEEK_SET) != 0) fail("cannot seek in %s: %s", w->file.tmp_path, strerror(errno));
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, w->file.f, w->file.tmp_path);
    writing_tmp = NULL;  // atomic_close_check removes it itself if it fails
    atomic_close_check(&w->file);
    progress_clear(w->progress);
    printf("wrote %s: %zu tokens\n", w->path, w->in_file);
    fflush(stdout);
    free(w->path);
    w->done++;
}

// Appends ids[0..n) to the files, starting the next file when one is full.
static void writer_push(TokenWriter* w, const uint16_t* ids, size_t n) {
    while (n > 0) {
        if (w->in_file == writer_capacity(w)) {
            if (!w->shard_tokens && w->done == 1) {
                fail("%s would hold more than %d tokens, more than its header can count: write shards (-n)",
                     w->path, INT32_MAX);
            }
            writer_close(w);
            writer_open(w);
        }
        size_t take = writer_capacity(w) - w->in_file;
        if (take > n) take = n;
        fwrite_check(ids, sizeof(uint16_t), take, w->file.f, w->file.tmp_path);
        w->in_file += take;
        w->total += take;
        ids += take;
        n -= take;
    }
}

// Completes the last file. A text too short to leave any ids after the validation file is an
// error (its .tmp is removed: no file is left). what: "the 3 texts have", ..., or NULL for the
// one text path.
static void writer_finish(TokenWriter* w, const char* what, const char* path) {
    if (w->done == 0) {
        char has[4096];
        snprintf(has, sizeof(has), "%s%s", what ? what : path, what ? "" : " has");
        if (w->shard_tokens) {
            fail("%s only %zu tokens: need more than one shard of %zu (the validation set) to leave some "
                 "for training; a smaller -n makes smaller shards", has, w->total, w->shard_tokens);
        }
        fail("%s only %zu tokens: need more than %d (the validation set) to leave some for training",
             has, w->total, VAL_TOKENS);
    }
    writer_close(w);
}

// Encodes the pieces on all threads and writes their ids in order. A thread takes the next piece
// when it is done with one (a dynamic schedule: the cost of a byte varies with the text). The ids
// of a piece wait until those of the pieces before it are written; the thread that finishes the
// last one missing writes them, one thread at a time, while the others go on encoding. So the
// files are the same for any number of threads, and writing overlaps encoding.
static void encode_pieces(const Tokenizer* t, const unsigned char* text, const PieceList* pieces,
                          int eot_is_special, TokenWriter* w) {
    size_t n = pieces->n;
    uint16_t** ids = (uint16_t**)calloc_check(n, sizeof(uint16_t*));  // of a piece encoded, not yet written
    size_t* counts = (size_t*)calloc_check(n, sizeof(size_t));
    char* encoded = (char*)calloc_check(n, 1);
    size_t next = 0;  // the first piece not written yet
    #pragma omp parallel
    {
        MergeScratch m;  // each thread its own working memory; the tokenizer is shared, read only
        memset(&m, 0, sizeof(m));
        IdList out = {NULL, 0, 0};
        #pragma omp for schedule(dynamic, 1)
        for (size_t j = 0; j < n; j++) {
            out.n = 0;
            encode_piece(t, &m, text, &pieces->data[j], eot_is_special, &out);
            uint16_t* u = (uint16_t*)malloc_check(out.n * sizeof(uint16_t));
            for (size_t k = 0; k < out.n; k++) u[k] = (uint16_t)out.data[k];
            #pragma omp critical(prepare_write)
            {
                ids[j] = u;
                counts[j] = out.n;
                encoded[j] = 1;
                for (; next < n && encoded[next]; next++) {
                    writer_push(w, ids[next], counts[next]);
                    free(ids[next]);
                }
            }
        }
        scratch_free(&m);
        free(out.data);
    }
    free(encoded);
    free(ids);
    free(counts);
}

// Checks before any work that every text can be read (a file, or "-" for standard input, once)
// and returns their total size in bytes, or -1 when one is standard input or a pipe.
static long long check_texts(const char* const* texts, int n) {
    long long total = 0;
    int stdin_seen = 0, unknown = 0;
    for (int k = 0; k < n; k++) {
        if (strcmp(texts[k], "-") == 0) {
            if (stdin_seen) fail("standard input (-) is given twice: it can be read only once");
            stdin_seen = unknown = 1;
            continue;
        }
        struct stat st;
        if (stat(texts[k], &st) != 0 || access(texts[k], R_OK) != 0) {  // not opened: a pipe is read once
            fail("cannot open text %s: %s", texts[k], strerror(errno));
        }
        if (S_ISDIR(st.st_mode)) fail("text %s is a folder, not a file", texts[k]);
        if (S_ISREG(st.st_mode)) total += (long long)st.st_size;
        else unknown = 1;
    }
    return unknown ? -1 : total;
}

// Refuses shards of OUT_PREFIX that are already there: the trainer's glob (PREFIX_train_*.bin)
// would mix them with this run's, and they would be overwritten.
static void refuse_existing_shards(const char* prefix) {
    const char* slash = strrchr(prefix, '/');
    size_t dir_len = slash ? (size_t)(slash - prefix) + 1 : 0;  // with its '/'
    char* dir = (char*)malloc_check(dir_len + 2);
    if (slash) memcpy(dir, prefix, dir_len);
    else dir[dir_len++] = '.';
    dir[dir_len] = '\0';
    const char* base = prefix + (slash ? dir_len : 0);
    size_t base_len = strlen(base);
    DIR* d = opendir(dir);
    if (d == NULL) fail("cannot write shards into %s: %s", dir, strerror(errno));
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        const char* name = e->d_name;
        size_t len = strlen(name);
        if (len < base_len + 4 || strncmp(name, base, base_len) != 0 || strcmp(name + len - 4, ".bin") != 0) continue;
        const char* rest = name + base_len;
        if (strncmp(rest, "_val_", 5) == 0 || strncmp(rest, "_train_", 7) == 0) {
            fail("%.*s%s exists: shards of an earlier run would mix with this run's (%s_train_*.bin takes "
                 "both); remove them or choose another OUT_PREFIX", (int)(slash ? dir_len : 0), prefix, name, prefix);
        }
    }
    closedir(d);
    free(dir);
}

// `./tokenizer prepare [-n TOKENS] TEXT... OUT_PREFIX`, the way llm.c prepares its data: each
// text is cut into sections at each blank line ("\n\n"; every section but a text's last keeps
// it), each section starts with <|endoftext|>, and the texts follow one another (the end of a
// text ends its last section). Without -n, the first 32,768 tokens are OUT_PREFIX_val.bin and
// the rest OUT_PREFIX_train.bin, as llm.c's tinyshakespeare.py; with -n, shards of TOKENS tokens,
// the first for validation, as llm.c's fineweb.py.
static void cmd_prepare(const Tokenizer* t, const char* const* texts, int ntexts, const char* prefix,
                        size_t shard_tokens, long long total, int eot_is_special) {
    if (t->vocab_size > 65536) fail("token files hold uint16 ids, but the vocabulary has %d tokens", t->vocab_size);
    Progress progress = {now_seconds(), 0.0, isatty(STDERR_FILENO), 0, total};
    TokenWriter w;
    memset(&w, 0, sizeof(w));
    w.prefix = prefix;
    w.shard_tokens = shard_tokens;
    w.progress = &progress;
    writer_open(&w);
    size_t cap = PREPARE_CHUNK_BYTES + 2 * PREPARE_PIECE_BYTES;
    unsigned char* buf = (unsigned char*)malloc_check(cap);
    PieceList pieces = {NULL, 0, 0};
    size_t done = 0;  // bytes read, all texts
    for (int k = 0; k < ntexts; k++) {
        int is_stdin = strcmp(texts[k], "-") == 0;
        const char* what = is_stdin ? "standard input" : texts[k];
        FILE* f = is_stdin ? stdin : fopen_check(texts[k], "rb");
        size_t have = 0, text_read = 0;  // bytes in buf; bytes of this text read
        int mid = 0, at_end = 0;
        while (!at_end) {
            if (cap - have < PREPARE_CHUNK_BYTES) {  // a stretch with no cut longer than a chunk
                cap = have + PREPARE_CHUNK_BYTES;
                buf = (unsigned char*)realloc_check(buf, cap);
            }
            size_t got = fread(buf + have, 1, PREPARE_CHUNK_BYTES, f);
            if (ferror(f)) fail("cannot read %s: %s", what, strerror(errno));
            at_end = got < PREPARE_CHUNK_BYTES;
            have += got;
            text_read += got;
            done += got;
            pieces.n = 0;
            size_t used = plan_pieces(buf, have, at_end, eot_is_special, &mid, &pieces);
            if (at_end && text_read == 0) piece_push(&pieces, 0, 0, 0);  // an empty text: one empty section
            encode_pieces(t, buf, &pieces, eot_is_special, &w);
            memmove(buf, buf + used, have - used);
            have -= used;
            progress_update(&progress, done, w.total, shard_tokens ? w.done : -1);
        }
        if (!is_stdin) fclose_check(f, what);
    }
    free(buf);
    free(pieces.data);
    char what[64];  // the text(s), for the message of a text too short
    if (ntexts > 1) snprintf(what, sizeof(what), "the %d texts have", ntexts);
    writer_finish(&w, ntexts > 1 ? what : strcmp(texts[0], "-") == 0 ? "standard input has" : NULL, texts[0]);
    if (progress.shown || shard_tokens) {  // with shards always: `make bench-tokenizer` reads the rate
        double secs = now_seconds() - progress.start;
#ifdef _OPENMP
        int threads = omp_get_max_threads();
#else
        int threads = 1;
#endif
        progress_clear(&progress);
        fprintf(stderr, "prepare: %.1f MB -> %zu tokens", done / 1e6, w.total);
        if (shard_tokens) fprintf(stderr, ", %d shards", w.done);
        fprintf(stderr, ", %.2f s: %.1f MB/s on %d thread%s\n", secs, done / 1e6 / secs, threads, threads > 1 ? "s" : "");
    }
}

// ---------- bench ----------

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

// ---------- main ----------
#ifndef TOKENIZER_NO_MAIN  // the fuzz targets (test/fuzz/) that call the readers above define it

static void usage(FILE* f) {
    fprintf(f,
        "usage: ./tokenizer [-k TOKENIZER_FILE] [-s] COMMAND ARGS\n"
        "GPT-2 byte-level BPE, identical to tiktoken's gpt2 encoding.\n"
        "commands:\n"
        "  encode [FILE]                      token ids of FILE (default stdin), space-separated, on stdout\n"
        "  decode [FILE]                      ids (whitespace-separated) from FILE or stdin back to bytes\n"
        "  prepare TEXT... OUT_PREFIX         llm.c token files OUT_PREFIX_val.bin (first 32,768 tokens)\n"
        "                                     and OUT_PREFIX_train.bin; <|endoftext|> before each section\n"
        "                                     of the text that a blank line (\"\\n\\n\") or the text's end\n"
        "                                     ends; TEXT \"-\" is stdin; several texts follow one another;\n"
        "                                     read as a stream, encoded on all cores (OMP_NUM_THREADS)\n"
        "  prepare -n TOKENS TEXT... OUT_PREFIX\n"
        "                                     the same in shards of TOKENS tokens (the last one fewer):\n"
        "                                     OUT_PREFIX_val_000000.bin first, then OUT_PREFIX_train_000001.bin,\n"
        "                                     ...; refused if shards of OUT_PREFIX exist\n"
        "  vocab ENCODER_JSON VOCAB_BPE OUT   write the tokenizer file OUT from GPT-2's encoder.json and\n"
        "                                     vocab.bpe, checking that they agree\n"
        "  bench FILE [REPEATS]               time encoding FILE REPEATS times (default 10), one thread\n"
        "options:\n"
        "  -k PATH   tokenizer file (default data/gpt2_tokenizer.bin)\n"
        "  -s        the text \"<|endoftext|>\" is the special token; by default it is ordinary text,\n"
        "            as in tiktoken's encode_ordinary\n"
        "  -n TOKENS prepare: tokens per shard, 1..2147483647 (llm.c's fineweb.py writes 100000000);\n"
        "            default: no shards, the two files above\n"
        "  -h        this help\n");
}

// The TOKENS of -n: a whole number from 1 to 2^31 - 1 (a token file's header counts in an int32).
static size_t parse_shard_tokens(const char* s) {
    char* end;
    errno = 0;
    long long v = s[0] >= '0' && s[0] <= '9' ? strtoll(s, &end, 10) : 0;
    if (v < 1 || v > INT32_MAX || errno != 0 || *end != '\0') {
        fail("-n %s: tokens per shard must be a whole number from 1 to 2147483647", s);
    }
    return (size_t)v;
}

static void need_args(int have, int want_min, int want_max, const char* command) {
    if (have < want_min || have > want_max) {
        fail("wrong number of arguments for %s (./tokenizer -h for usage)", command);
    }
}

int main(int argc, char** argv) {
    const char* tokenizer_path = "data/gpt2_tokenizer.bin";
    int eot_is_special = 0;
    size_t shard_tokens = 0;  // -n
    const char** args = (const char**)malloc_check((size_t)argc * sizeof(const char*));
    int nargs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "-s") == 0) {
            eot_is_special = 1;
        } else if (strcmp(argv[i], "-k") == 0) {
            if (i + 1 >= argc) fail("-k needs a path");
            tokenizer_path = argv[++i];
        } else if (strcmp(argv[i], "-n") == 0) {
            if (i + 1 >= argc) fail("-n needs a number of tokens per shard");
            shard_tokens = parse_shard_tokens(argv[++i]);
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fail("unknown option %s (./tokenizer -h for usage)", argv[i]);
        } else {
            args[nargs++] = argv[i];
        }
    }
    if (nargs == 0) {
        usage(stderr);
        return 1;
    }
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
        fail("unknown command %s (./tokenizer -h for usage)", cmd);
    }
    if (is_encode || is_decode) need_args(n, 0, 1, cmd);
    if (is_prepare) need_args(n, 2, n, cmd);
    if (shard_tokens && !is_prepare) fail("-n is an option of prepare (./tokenizer -h for usage)");
    long long text_bytes = 0;
    if (is_prepare) {  // bad input is refused before the tokenizer is read and any work is done
        text_bytes = check_texts(args + 1, n - 1);
        if (shard_tokens) refuse_existing_shards(args[n]);
    }
    if (is_bench) need_args(n, 1, 2, cmd);
    int repeats = 10;
    if (is_bench && n == 2) {
        repeats = atoi(args[2]);
        if (repeats < 1 || repeats > 100000) fail("REPEATS must be 1..100000");
    }
    Tokenizer t;
    tokenizer_init(&t, tokenizer_path);
    const char* file = n >= 1 && strcmp(args[1], "-") != 0 ? args[1] : NULL;
    if (is_encode) cmd_encode(&t, file, eot_is_special);
    if (is_decode) cmd_decode(&t, file);
    if (is_prepare) cmd_prepare(&t, args + 1, n - 1, args[n], shard_tokens, text_bytes, eot_is_special);
    if (is_bench) cmd_bench(&t, args[1], repeats, eot_is_special);
    tokenizer_free(&t);
    free(args);
    return 0;
}

#endif // TOKENIZER_NO_MAIN
