// test/fuzz/fuzz_request.c: the reader of requests and the writers of answers (gpt2/requests.h).
// The input is a file of requests, read as infer -f reads one (request_reader_open, request_read),
// twice: with the line limit of 4 MiB, and with a limit of 64 bytes so that inputs of a few KiB
// reach the path of a line too long. A plain splitter here finds the lines. Then:
//   - the reader never stops the program (fail) and never leaks, whatever the bytes;
//   - it gives one request per line that is not blank, ids 0, 1, ... and the splitter's line
//     numbers; each is what request_parse gives for that line alone, or, past the limit, the
//     error of a line too long;
//   - a valid request's fields are in their documented ranges (or the defaults), its prompt is
//     valid UTF-8 no longer than its line; a bad one has no prompt, the defaults and a message in
//     printable ASCII;
//   - its answer (request_write_error, or request_write_result with the prompt as text) is one
//     line of valid UTF-8 that gpt2/json.h reads back as JSON (errors caught) with the same id
//     and the same message or text.
// The whole input goes through request_parse too, as one request (a server's body may hold
// newlines), and through json_write_string as generated text: it must read back as the input
// with each invalid sequence replaced by U+FFFD as a second, plain implementation here replaces
// it (Unicode's maximal subparts, found by trying completions).

#include "fuzz.h"
#include "../../gpt2/requests.h"

#define SMALL_LIMIT 64

static const GenParams defaults = {-1, 1.0f, 0, 1.0f, 1337};

static int same_params(const GenParams* a, const GenParams* b) {
    return a->max_tokens == b->max_tokens && a->temperature == b->temperature &&
           a->top_k == b->top_k && a->top_p == b->top_p && a->seed == b->seed;
}

static int valid_utf8(const uint8_t* s, size_t n) {
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        int len = utf8_decode(s + i, n - i, &cp);
        if (len == 0) return 0;
        i += (size_t)len;
    }
    return 1;
}

// ---------- what a JSON string of any bytes reads back as ----------

// Whether the k bytes at p begin some character: completed with continuation bytes 0x80 to the
// length their first byte says, they decode. (The second byte's range is the only constraint
// that depends on the first byte, and a prefix of two or more bytes has its second byte already.)
static int begins_character(const uint8_t* p, int k) {
    int len = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC0 ? 2 : 1;
    if (k > len) return 0;
    uint8_t bytes[4] = {0x80, 0x80, 0x80, 0x80};
    memcpy(bytes, p, (size_t)k);
    uint32_t cp;
    return utf8_decode(bytes, (size_t)len, &cp) == len;
}

// s with each invalid sequence (the longest run of bytes that begins a character and is not
// one, else one byte) as U+FFFD, into out (3n bytes of room); returns its length.
static size_t plain_replaced(const uint8_t* s, size_t n, uint8_t* out) {
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = utf8_decode(s + i, n - i, &cp);
        if (k > 0) {
            memcpy(out + len, s + i, (size_t)k);
            len += (size_t)k;
            i += (size_t)k;
            continue;
        }
        k = 1;
        while (i + (size_t)k < n && begins_character(s + i, k + 1)) k++;
        memcpy(out + len, "\xEF\xBF\xBD", 3);
        len += 3;
        i += (size_t)k;
    }
    return len;
}

// ---------- answers, read back ----------

// A record as written: the bytes, and what gpt2/json.h reads from them.
typedef struct {
    char* bytes;
    size_t n;
    long long id;
    char* text;        // the "text" or "error" string, decoded (room: the record's length + 1)
    size_t text_n;
    char complaint[160];  // the JSON reader's, if it refused the record
} Record;

// Reads the record back; returns 0 with r->complaint set if it is not one JSON object with an
// "id" and a string "text" or "error".
static int read_back(Record* rec) {
    rec->text = (char*)malloc(rec->n + 1);
    rec->text_n = 0;
    rec->id = -1;
    int has_text = 0;
    JsonReader r = json_reader(rec->bytes, rec->n, "record", NULL);
    jmp_buf on_error;
    json_catch(&r, &on_error, rec->complaint, sizeof(rec->complaint));
    if (setjmp(on_error) != 0) return 0;
    json_expect(&r, '{');
    for (size_t i = 0; json_next(&r, '}', i); i++) {
        char key[32];
        json_string(&r, key, sizeof(key));
        json_expect(&r, ':');
        if (strcmp(key, "id") == 0) {
            rec->id = json_int(&r, INT_MAX, "id");
        } else if (strcmp(key, "text") == 0 || strcmp(key, "error") == 0) {
            rec->text_n = json_string(&r, rec->text, rec->n + 1);
            has_text = 1;
        } else {
            json_skip_value(&r);
        }
    }
    json_end(&r);
    snprintf(rec->complaint, sizeof(rec->complaint), "no id or no text");
    return rec->id >= 0 && has_text;
}

// Writes q's answer, as infer would, and reads it back.
static void check_answer(const Request* q) {
    Record rec;
    FILE* f = open_memstream(&rec.bytes, &rec.n);
    FUZZ_CHECK(f != NULL, "open_memstream");
    if (q->error[0] != '\0') {
        request_write_error(f, q);
    } else {
        request_write_result(f, q->id, (const unsigned char*)q->prompt, q->prompt_len, 3, 4, "stop", 1.5, 2.5);
    }
    fclose(f);
    FUZZ_CHECK(rec.n > 0 && memchr(rec.bytes, '\n', rec.n) == rec.bytes + rec.n - 1,
               "the record is not one line");
    FUZZ_CHECK(valid_utf8((const uint8_t*)rec.bytes, rec.n), "the record is not UTF-8");
    FUZZ_CHECK(read_back(&rec), "the record does not read back: %s", rec.complaint);
    FUZZ_CHECK(rec.id == q->id, "the record's id is %lld, not %d", rec.id, q->id);
    if (q->error[0] != '\0') {
        FUZZ_CHECK(rec.text_n == strlen(q->error) && memcmp(rec.text, q->error, rec.text_n) == 0,
                   "the error reads back otherwise");
    } else {
        FUZZ_CHECK(rec.text_n == q->prompt_len && memcmp(rec.text, q->prompt, rec.text_n) == 0,
                   "the text reads back otherwise");
    }
    free(rec.text);
    free(rec.bytes);
}

// ---------- a request ----------

// What every request read from a line of line_n bytes must be.
static void check_request(const Request* q, size_t line_n) {
    if (q->error[0] != '\0') {
        FUZZ_CHECK(q->prompt == NULL && q->prompt_len == 0 && same_params(&q->params, &defaults),
                   "a bad request has a prompt or other parameters");
        for (const char* c = q->error; *c != '\0'; c++) {
            FUZZ_CHECK(*c >= 0x20 && *c < 0x7f, "the message has byte 0x%02x: %s", (unsigned char)*c, q->error);
        }
    } else {
        const GenParams* p = &q->params;
        FUZZ_CHECK(q->prompt != NULL && q->prompt_len <= line_n && q->prompt[q->prompt_len] == '\0',
                   "a valid request's prompt is missing or too long");
        FUZZ_CHECK(valid_utf8((const uint8_t*)q->prompt, q->prompt_len), "the prompt is not UTF-8");
        FUZZ_CHECK(p->max_tokens == defaults.max_tokens || (p->max_tokens >= 1 && p->max_tokens <= REQUEST_MAX_TOKENS),
                   "max_tokens %d", p->max_tokens);
        FUZZ_CHECK(p->temperature >= 0.0f && p->temperature <= REQUEST_MAX_TEMPERATURE, "temperature %g",
                   p->temperature);
        FUZZ_CHECK(p->top_k >= 0 && p->top_k <= REQUEST_MAX_TOP_K, "top_k %d", p->top_k);
        FUZZ_CHECK(p->top_p > 0.0f && p->top_p <= 1.0f, "top_p %g", p->top_p);
        FUZZ_CHECK(p->seed == defaults.seed || (double)p->seed < REQUEST_SEED_LIMIT, "seed %llu",
                   (unsigned long long)p->seed);
    }
    check_answer(q);
}

// ---------- the file of requests ----------

static int blank(const uint8_t* s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    }
    return 1;
}

// The next line of the input after *pos that is not blank: its start and length, its number in
// *line (counting from the line *pos is in, number *line + 1). Returns 0 if there is none.
static int plain_next_line(const uint8_t* data, size_t size, size_t* pos, int* line, size_t* start,
                           size_t* n) {
    while (*pos < size) {
        const uint8_t* nl = (const uint8_t*)memchr(data + *pos, '\n', size - *pos);
        size_t end = nl != NULL ? (size_t)(nl - data) : size;
        *start = *pos;
        *n = end - *pos;
        *pos = nl != NULL ? end + 1 : size;
        (*line)++;
        if (!blank(data + *start, *n)) return 1;
    }
    return 0;
}

// Reads the input as a file with the given line limit, and checks each request against its line.
static void read_file(const uint8_t* data, size_t size, size_t limit) {
    RequestReader rr = request_reader_open(FUZZ_INPUT);
    rr.max_line = limit;
    size_t pos = 0, start, n;
    int line = 0, id = 0;
    Request q, alone;
    while (request_read(&rr, &q, &defaults)) {
        FUZZ_CHECK(plain_next_line(data, size, &pos, &line, &start, &n), "request %d from no line", q.id);
        FUZZ_CHECK(q.id == id && q.line == line, "request %d of line %d, not %d of line %d", q.id, q.line,
                   id, line);
        if (n > limit) {
            snprintf(alone.error, sizeof(alone.error), "the line is longer than %zu bytes", limit);
            FUZZ_CHECK(strcmp(q.error, alone.error) == 0, "line %d of %zu bytes, over %zu, gave: %s", line, n,
                       limit, q.error);
        } else {
            request_parse(&alone, (const char*)data + start, n, &defaults);
            FUZZ_CHECK(strcmp(q.error, alone.error) == 0 && q.prompt_len == alone.prompt_len &&
                       (q.prompt_len == 0 || memcmp(q.prompt, alone.prompt, q.prompt_len) == 0) &&
                       same_params(&q.params, &alone.params),
                       "line %d read from the file differs from the line alone", line);
            request_free(&alone);
        }
        check_request(&q, n);
        request_free(&q);
        id++;
    }
    FUZZ_CHECK(!plain_next_line(data, size, &pos, &line, &start, &n), "line %d was not read", line);
    request_reader_close(&rr);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_begin(size);
    fuzz_file(FUZZ_INPUT, data, size);
    if (setjmp(fuzz_jump) == 0) {
        read_file(data, size, REQUEST_MAX_LINE);
        read_file(data, size, SMALL_LIMIT);

        // the whole input as one request
        Request q;
        request_parse(&q, (const char*)data, size, &defaults);
        q.id = 0;
        q.line = 1;
        check_request(&q, size);
        request_free(&q);

        // the whole input as generated text
        Record rec;
        FILE* f = open_memstream(&rec.bytes, &rec.n);
        FUZZ_CHECK(f != NULL, "open_memstream");
        request_write_result(f, 0, data, size, 0, 0, "length", 0.0, 0.0);
        fclose(f);
        uint8_t* want = (uint8_t*)malloc(3 * size + 1);
        size_t want_n = plain_replaced(data, size, want);
        FUZZ_CHECK(valid_utf8((const uint8_t*)rec.bytes, rec.n), "the record is not UTF-8");
        FUZZ_CHECK(read_back(&rec), "the text's record does not read back: %s", rec.complaint);
        FUZZ_CHECK(rec.text_n == want_n && memcmp(rec.text, want, want_n) == 0,
                   "the text reads back otherwise than with U+FFFD for each invalid sequence");
        free(want);
        free(rec.text);
        free(rec.bytes);
    }
    FUZZ_CHECK(!fuzz_refused, "the reader stopped the program (fail) on this input");
    fuzz_end();
    return 0;
}
