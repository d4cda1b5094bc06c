// tokenizer.c: GPT-2's tokenizer as a program: where its vocabulary comes from, and text to
// token files and back.
//
//   ./tokenizer vocab encoder.json vocab.bpe OUT   OpenAI's two files -> the tokenizer file
//   ./tokenizer encode [FILE] | decode [FILE]       text <-> token ids, exactly as tiktoken
//   ./tokenizer prepare TEXT OUT_PREFIX             a text -> OUT_PREFIX_{val,train}.bin
//
// Read gpt2/tokenizer.h first: it is the byte-pair encoder itself (the pre-tokenizer, merging by
// rank, decoding), kept there because infer.c encodes prompts with it and the trainers decode
// their samples with it. This file is the other half of the lesson: how GPT-2 writes its
// vocabulary down (every byte as a printable character, merges as pairs of such strings, ranked
// by their line in vocab.bpe), the checks that the two files agree, and the commands.

#include <unistd.h>
#include "gpt2/io.h"
#include "gpt2/json.h"
#include "gpt2/tokenizer.h"

#define VAL_TOKENS 32768  // llm.c's split: the first 32,768 tokens are the validation set

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

static void write_token_file(const char* path, const int* ids, size_t n) {
    int32_t header[HEADER_INTS];
    header_init(header, TOKENS_MAGIC, TOKENS_VERSION);
    header[2] = (int32_t)n;
    uint16_t* u16 = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) u16[i] = (uint16_t)ids[i];
    AtomicFile a = atomic_open_check(path);
    fwrite_check(header, sizeof(int32_t), HEADER_INTS, a.f, path);
    fwrite_check(u16, sizeof(uint16_t), n, a.f, path);
    atomic_close_check(&a);
    free(u16);
}

// Progress of a long `prepare` on stderr, so that a person can follow it: nothing for the first
// second (Tiny Shakespeare takes less), then on a terminal one line rewritten in place every
// second, elsewhere (a log) a line every 10 seconds.
typedef struct {
    double start, last;
    int tty, shown;
} Progress;

static void progress_update(Progress* p, size_t done, size_t total, size_t tokens) {
    double now = now_seconds();
    if (now - p->start < 1.0 || now - p->last < (p->tty ? 1.0 : 10.0)) return;
    p->last = now;
    p->shown = 1;
    double rate = done / (now - p->start);
    char eta[32];
    fprintf(stderr, "%sprepare: %.0f%% of %.1f MB, %.1fM tokens, %.1f MB/s, ETA %s%s", p->tty ? "\r" : "",
            100.0 * done / total, total / 1e6, tokens / 1e6, rate / 1e6,
            format_duration(eta, sizeof(eta), (total - done) / rate), p->tty ? "\033[K" : "\n");
    fflush(stderr);
}

// `./tokenizer prepare TEXT OUT_PREFIX`, the way llm.c prepares Tiny Shakespeare: the text is cut
// into sections at each blank line ("\n\n"; every section but the last keeps it), each section
// starts with <|endoftext|>, the first 32,768 tokens are OUT_PREFIX_val.bin, the rest
// OUT_PREFIX_train.bin.
static void cmd_prepare(const Tokenizer* t, const char* text_path, const char* prefix, int eot_is_special) {
    if (t->vocab_size > 65536) fail("token files hold uint16 ids, but the vocabulary has %d tokens", t->vocab_size);
    size_t len;
    unsigned char* text = read_path_check(text_path, &len);
    IdList all = {NULL, 0, 0};
    Progress progress = {now_seconds(), 0.0, isatty(STDERR_FILENO), 0};
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
        progress_update(&progress, end, len, all.n);
        if (end == len) break;
        start = end;
    }
    if (progress.shown) {
        char took[32];
        fprintf(stderr, "%sprepare: encoded %.1f MB into %zu tokens in %s\n", progress.tty ? "\r\033[K" : "",
                len / 1e6, all.n, format_duration(took, sizeof(took), now_seconds() - progress.start));
    }
    free(text);
    if (all.n <= VAL_TOKENS) {
        fail("%s has only %zu tokens: need more than %d (the validation set) to leave some for training",
             text_path, all.n, VAL_TOKENS);
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
        fail("wrong number of arguments for %s (./tokenizer -h for usage)", command);
    }
}

int main(int argc, char** argv) {
    const char* tokenizer_path = "data/gpt2_tokenizer.bin";
    int eot_is_special = 0;
    const char* args[8];
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
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fail("unknown option %s (./tokenizer -h for usage)", argv[i]);
        } else {
            if (nargs == 8) fail("too many arguments");
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
    if (is_prepare) need_args(n, 2, 2, cmd);
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
    if (is_prepare) cmd_prepare(&t, args[1], args[2], eot_is_special);
    if (is_bench) cmd_bench(&t, args[1], repeats, eot_is_special);
    tokenizer_free(&t);
    return 0;
}

#endif // TOKENIZER_NO_MAIN
