// gpt2/requests.h: requests for text as JSON lines, and the JSON lines that answer them
// (doc/formats.md, section 9), one object a line:
//   {"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0.8, "top_k": 40,
//    "top_p": 0.95, "seed": 7, "stop": ["\n\n", "THE END"]}
// Only "prompt" is required; a field left out or null takes the command line's default; unknown
// fields are ignored (as OpenAI's API does), one of ours given twice is an error. Every request
// gets one answer line, a result or an error, and a bad one never stops those after it.

//   RequestReader rr = request_reader_open(path);   // "-": standard input
//   Request q;
//   while (request_read(&rr, &q, &defaults)) {
//       if (q.error[0] != '\0') request_write_error(stdout, &q);
//       else ...generate from q.prompt with q.params, then request_write_result(stdout, q.id, ...);
//       request_free(&q);
//   }
//   request_reader_close(&rr);
// request_parse reads one request from memory (a server's body).

#ifndef GPT2_REQUESTS_H
#define GPT2_REQUESTS_H

#include <limits.h>
#include "json.h"

#define REQUEST_MAX_LINE (4u << 20)   // bytes in one request's line; a longer one is an error
#define REQUEST_MAX_TOKENS (1 << 20)  // bounds against absurd values, far above GPT-2's
#define REQUEST_MAX_TOP_K (1 << 20)   // context and vocabulary
#define REQUEST_MAX_TEMPERATURE 100.0
#define REQUEST_MAX_STOP 4             // stop strings in one request, as OpenAI's API allows
#define REQUEST_MAX_STOP_BYTES 256     // bytes of one stop string (as UTF-8)
#define REQUEST_SEED_LIMIT 9007199254740992.0  // 2^53: exact in a double, so in any JSON reader

// How to generate: the defaults from the command line, and a request's choices over them.
typedef struct {
    int max_tokens;     // -1 (a default only): until end-of-text or a full context
    float temperature;  // 0: greedy
    int top_k;          // 0: no top-k filter
    float top_p;        // 1: no top-p filter
    uint64_t seed;      // of the request's sampling
} GenParams;

typedef struct {
    int id;             // the requests counted from 0 in input order, bad ones too
    int line;           // where it is in the input, from 1
    char* prompt;       // UTF-8, 0-terminated, malloc'd; NULL when the request is not valid
    size_t prompt_len;  // not strlen: \u0000 is a 0 byte here
    GenParams params;
    char* stop[REQUEST_MAX_STOP];  // the completion ends before the first of these, malloc'd
    size_t stop_len[REQUEST_MAX_STOP];
    int num_stop;
    void* user;         // the caller's, carried along (a server: whom the answer goes to)
    char error[256];    // "" when the request is valid; else what is wrong with it
    const char* error_field;  // the field the error is about, when it is one (OpenAI's "param")
} Request;

// ---------- one request ----------

// The fields a request may set; a bit each in the mask of those seen.
enum {
    REQUEST_FIELD_PROMPT, REQUEST_FIELD_MAX_TOKENS, REQUEST_FIELD_TEMPERATURE, REQUEST_FIELD_TOP_K,
    REQUEST_FIELD_TOP_P, REQUEST_FIELD_SEED, REQUEST_FIELD_STOP, REQUEST_NUM_FIELDS
};
static const char* const request_field_names[REQUEST_NUM_FIELDS] = {
    "prompt", "max_tokens", "temperature", "top_k", "top_p", "seed", "stop"};

// Records what is wrong with q and its field (NULL: none), unless a complaint is there already:
// the first is reported (a later JSON error replaces it, in request_parse).
static inline void request_vcomplain(Request* q, const char* field, const char* fmt, va_list args) {
    if (q->error[0] != '\0') return;
    vsnprintf(q->error, sizeof(q->error), fmt, args);
    q->error_field = field;
}

#if defined(__GNUC__)
static inline void request_complain(Request* q, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void request_complain_about(Request* q, const char* field, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
#endif
static inline void request_complain(Request* q, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    request_vcomplain(q, NULL, fmt, args);
    va_end(args);
}

static inline void request_complain_about(Request* q, const char* field, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    request_vcomplain(q, field, fmt, args);
    va_end(args);
}

// Reads a key into key when it is ASCII and shorter than cap, else "". Compared as decoded:
// "\u0074op_k" is top_k, "top_k\u0000" is not.
static inline void request_key(JsonReader* r, char* key, size_t cap) {
    size_t len = 0;
    int fits = 1;
    uint32_t cp;
    json_string_begin(r);
    while (json_string_char(r, &cp)) {
        if (cp != 0 && cp < 0x80 && len + 1 < cap) key[len++] = (char)cp;
        else fits = 0;
    }
    key[fits ? len : 0] = '\0';
}

// The index of name in names (count of them), or -1.
static inline int request_lookup(const char* name, const char* const* names, int count) {
    for (int i = 0; name[0] != '\0' && i < count; i++) {
        if (strcmp(names[i], name) == 0) return i;
    }
    return -1;
}

// Reads a key and returns the field it names, or -1 for a key that is none of ours.
static inline int request_field(JsonReader* r) {
    char key[16];  // longer than any field's name
    request_key(r, key, sizeof(key));
    return request_lookup(key, request_field_names, REQUEST_NUM_FIELDS);
}

// One stop string (r at it) into q, or a complaint.
static inline void request_stop_string(JsonReader* r, Request* q) {
    if (json_peek(r) != '"') {
        request_complain_about(q, "stop", "\"stop\" must be a string or an array of at most %d strings, got %s",
                               REQUEST_MAX_STOP, json_kind_name(json_peek(r)));
        json_skip_value(r);
        return;
    }
    if (q->num_stop == REQUEST_MAX_STOP) {
        request_complain_about(q, "stop", "\"stop\" holds at most %d strings", REQUEST_MAX_STOP);
        json_skip_value(r);
        return;
    }
    size_t cap = r->n - r->pos;  // as for the prompt: room for any string the text holds
    int k = q->num_stop++;
    q->stop[k] = (char*)malloc_check(cap);  // q's from here, should the reader jump out
    q->stop_len[k] = 0;
    size_t len = json_string(r, q->stop[k], cap);
    if (len == 0 || len > REQUEST_MAX_STOP_BYTES) {
        request_complain_about(q, "stop", "a stop string must have 1 to %d bytes, got %zu", REQUEST_MAX_STOP_BYTES,
                               len);
        free(q->stop[k]);
        q->num_stop--;
    } else {
        q->stop[k] = (char*)realloc_check(q->stop[k], len + 1);
        q->stop_len[k] = len;
    }
}

// "stop": a string, or an array of them (null was taken as none already).
static inline void request_stop_value(JsonReader* r, Request* q) {
    if (json_peek(r) != '[') {
        request_stop_string(r, q);
        return;
    }
    r->pos++;
    for (size_t i = 0; json_next(r, ']', i); i++) request_stop_string(r, q);
}

// A number: its value, its text into got (for a complaint), and whether it is written as an
// integer (64, not 64.0 or 6.4e1).
static inline double request_number(JsonReader* r, char* got, size_t cap, int* is_integer) {
    json_skip_space(r);
    size_t start = r->pos;
    double v = json_number(r);
    size_t len = r->pos - start, shown = len < cap ? len : cap - 4;
    snprintf(got, cap, "%.*s%s", (int)shown, (const char*)r->s + start, shown < len ? "..." : "");
    *is_integer = 1;
    for (size_t i = start; i < r->pos; i++) {
        if (r->s[i] == '.' || r->s[i] == 'e' || r->s[i] == 'E') *is_integer = 0;
    }
    return v;
}

// Any value, a number where it is one (request_number); else got is its kind ("a string").
static inline double request_scalar(JsonReader* r, char* got, size_t cap, int* is_number, int* is_integer) {
    int c = json_peek(r);
    *is_number = c == '-' || (c >= '0' && c <= '9');
    *is_integer = 0;
    if (*is_number) return request_number(r, got, cap, is_integer);
    json_skip_value(r);
    snprintf(got, cap, "%s", json_kind_name(c));
    return 0.0;
}

// The value of a field into q, or a complaint; a wrong value is still read through, so that a
// JSON error after it wins.
static inline void request_field_value(JsonReader* r, Request* q, int field) {
    int c = json_peek(r);
    if (field == REQUEST_FIELD_PROMPT) {
        if (c != '"') {
            json_skip_value(r);
            request_complain_about(q, "prompt", "\"prompt\" must be a string, got %s", json_kind_name(c));
            return;
        }
        size_t cap = r->n - r->pos;  // the string's text, quotes included: room for it and its 0
        q->prompt = (char*)malloc_check(cap);
        q->prompt_len = json_string(r, q->prompt, cap);
        q->prompt = (char*)realloc_check(q->prompt, q->prompt_len + 1);
        return;
    }
    if (json_accept_null(r)) return;  // the default stays
    if (field == REQUEST_FIELD_STOP) {
        request_stop_value(r, q);
        return;
    }
    char got[32];  // the value as written, or its kind
    int is_number, is_integer;
    double v = request_scalar(r, got, sizeof(got), &is_number, &is_integer);
    // checked as a double: converting out of range is undefined behaviour
    const char* name = request_field_names[field];
    switch (field) {
        case REQUEST_FIELD_MAX_TOKENS:
            if (is_integer && v >= 1 && v <= REQUEST_MAX_TOKENS) q->params.max_tokens = (int)v;
            else request_complain_about(q, name, "\"%s\" must be an integer from 1 to %d, got %s", name,
                                  REQUEST_MAX_TOKENS, got);
            break;
        case REQUEST_FIELD_TEMPERATURE:
            if (is_number && v >= 0 && v <= REQUEST_MAX_TEMPERATURE) q->params.temperature = (float)v;
            else request_complain_about(q, name, "\"%s\" must be a number from 0 to %g, got %s", name,
                                  REQUEST_MAX_TEMPERATURE, got);
            break;
        case REQUEST_FIELD_TOP_K:
            if (is_integer && v >= 0 && v <= REQUEST_MAX_TOP_K) q->params.top_k = (int)v;
            else request_complain_about(q, name, "\"%s\" must be an integer from 0 to %d, got %s", name,
                                  REQUEST_MAX_TOP_K, got);
            break;
        case REQUEST_FIELD_TOP_P:  // and not 0 as a float either, as 1e-50 is
            if (is_number && v > 0 && v <= 1 && (float)v > 0) q->params.top_p = (float)v;
            else request_complain_about(q, name, "\"%s\" must be a number in (0, 1], got %s", name, got);
            break;
        case REQUEST_FIELD_SEED:
            if (is_integer && v >= 0 && v < REQUEST_SEED_LIMIT) q->params.seed = (uint64_t)v;
            else request_complain_about(q, name, "\"%s\" must be a non-negative integer below 2^53, got %s", name,
                                        got);
            break;
    }
}

// The request's object, field by field, into q; complaints into q->error; bad JSON jumps out.
static inline void request_object(JsonReader* r, Request* q) {
    int c = json_peek(r);
    if (c != '{') {
        json_skip_value(r);
        json_end(r);
        request_complain(q, "a request must be a JSON object, got %s", json_kind_name(c));
        return;
    }
    r->pos++;
    unsigned seen = 0;  // a bit per field
    for (size_t i = 0; json_next(r, '}', i); i++) {
        int field = request_field(r);
        json_expect(r, ':');
        if (field < 0) {
            json_skip_value(r);
        } else if (seen & (1u << field)) {
            json_skip_value(r);
            const char* name = request_field_names[field];
            request_complain_about(q, name, "\"%s\" is given twice", name);
        } else {
            seen |= 1u << field;
            request_field_value(r, q, field);
        }
    }
    json_end(r);
    if (!(seen & (1u << REQUEST_FIELD_PROMPT))) request_complain_about(q, "prompt", "\"prompt\" is missing");
}

// Reads one request (one JSON object) from n bytes of text into q's prompt, params and error (id
// and line are the caller's). Returns 1 when valid; else 0 with q->error: "not valid JSON: WHAT at
// byte N" before anything else, then the first fault in text order, a missing prompt last.
static inline void request_free(Request* q);

static inline int request_parse(Request* q, const char* text, size_t n, const GenParams* defaults) {
    q->prompt = NULL;
    q->prompt_len = 0;
    q->params = *defaults;
    q->num_stop = 0;
    q->user = NULL;
    q->error[0] = '\0';
    q->error_field = NULL;
    // A JSON error jumps back here; no local the error path needs changes after setjmp (json_catch)
    static const char bad_json[] = "not valid JSON: ";
    const size_t prefix = sizeof(bad_json) - 1;
    JsonReader r = json_reader(text, n, "request", NULL);
    jmp_buf on_error;
    json_catch(&r, &on_error, q->error + prefix, sizeof(q->error) - prefix);
    if (setjmp(on_error) == 0) {
        request_object(&r, q);
    } else {
        memcpy(q->error, bad_json, prefix);
        q->error_field = NULL;
    }
    if (q->error[0] == '\0') return 1;
    request_free(q);
    q->params = *defaults;
    return 0;
}

static inline void request_free(Request* q) {
    free(q->prompt);
    q->prompt = NULL;
    q->prompt_len = 0;
    for (int i = 0; i < q->num_stop; i++) free(q->stop[i]);
    q->num_stop = 0;
}

// ---------- a file of requests ----------

typedef struct {
    FILE* f;
    const char* path;  // for errors
    size_t max_line;   // REQUEST_MAX_LINE; a test may lower it
    char* line;        // the line just read, not 0-terminated
    size_t cap;        // bytes at line, at most max_line
    int line_number;   // of the line just read, from 1
    int next_id;
} RequestReader;

// Opens path ("-": standard input) to read requests from; a file that cannot be opened is an error.
static inline RequestReader request_reader_open(const char* path) {
    RequestReader rr;
    int from_stdin = strcmp(path, "-") == 0;
    rr.f = from_stdin ? stdin : fopen_check(path, "rb");
    rr.path = from_stdin ? "standard input" : path;
    rr.max_line = REQUEST_MAX_LINE;
    rr.line = NULL;
    rr.cap = 0;
    rr.line_number = 0;
    rr.next_id = 0;
    return rr;
}

static inline void request_reader_close(RequestReader* rr) {
    if (rr->f != stdin) fclose_check(rr->f, rr->path);
    free(rr->line);
    rr->line = NULL;
}

// The next line into rr->line, without '\n': 1, or 0 at the end. *len: its length, or max_line + 1
// for a longer line, read through but not kept; *blank: only spaces, tabs and '\r'.
static inline int request_next_line(RequestReader* rr, size_t* len, int* blank) {
    size_t n = 0;
    int c;
    *blank = 1;
    while ((c = getc(rr->f)) != EOF && c != '\n') {
        if (c != ' ' && c != '\t' && c != '\r') *blank = 0;
        if (n == rr->max_line + 1) continue;  // too long: the rest is dropped
        if (n < rr->max_line) {
            if (n == rr->cap) {  // grow by doubling, to max_line bytes at most
                rr->cap = rr->cap == 0 ? 4096 : 2 * rr->cap;
                if (rr->cap > rr->max_line) rr->cap = rr->max_line;
                rr->line = (char*)realloc_check(rr->line, rr->cap);
            }
            rr->line[n] = (char)c;
        }
        n++;
    }
    if (ferror(rr->f)) fail("read error on %s: %s", rr->path, strerror(errno));
    if (c == EOF && n == 0) return 0;
    if (rr->line_number == INT_MAX) fail("%s has more than %d lines", rr->path, INT_MAX);
    rr->line_number++;
    *len = n;
    return 1;
}

// The next request into q (blank lines skipped): 1, or 0 at the end. Valid when q->error is "";
// every line gets an id and an answer. The caller frees q (request_free).
static inline int request_read(RequestReader* rr, Request* q, const GenParams* defaults) {
    size_t len;
    int blank;
    do {
        if (!request_next_line(rr, &len, &blank)) return 0;
    } while (blank);
    if (rr->next_id == INT_MAX) fail("%s has more than %d requests", rr->path, INT_MAX);
    q->id = rr->next_id++;
    q->line = rr->line_number;
    if (len > rr->max_line) {
        q->prompt = NULL;
        q->prompt_len = 0;
        q->params = *defaults;
        q->num_stop = 0;
        q->user = NULL;
        q->error_field = NULL;
        snprintf(q->error, sizeof(q->error), "the line is longer than %zu bytes", rr->max_line);
        return 1;
    }
    request_parse(q, rr->line, len, defaults);
    return 1;
}

// ---------- answers: one JSON line each ----------

// Ends a record: a newline, flushed so that each answer is seen when done.
static inline void request_record_end(FILE* f) {
    fputc('\n', f);
    if (fflush(f) != 0 || ferror(f)) fail("write error on the answers: %s", strerror(errno));
}

// {"id": 3, "line": 4, "error": "\"prompt\" is missing"}
static inline void request_write_error(FILE* f, const Request* q) {
    fprintf(f, "{\"id\": %d, \"line\": %d, \"error\": ", q->id, q->line);
    json_write_string(f, (const unsigned char*)q->error, strlen(q->error));
    fputc('}', f);
    request_record_end(f);
}

// A time in milliseconds; not finite (none to give: NAN) is null, JSON having no NaN.
static inline void request_write_ms(FILE* f, double ms) {
    if (isfinite(ms)) fprintf(f, "%.3f", ms);
    else fputs("null", f);
}

// {"id": 0, "text": "...", "prompt_tokens": 5, "completion_tokens": 64, "finish_reason": "length",
//  "ttft_ms": 12.5, "total_ms": 300.25}: "stop" at end-of-text, "length" at max_tokens or the
// context; text any bytes (json_write_string keeps the record UTF-8).
static inline void request_write_result(FILE* f, int id, const unsigned char* text, size_t n,
                                        int prompt_tokens, int completion_tokens,
                                        const char* finish_reason, double ttft_ms,
                                        double total_ms) {
    fprintf(f, "{\"id\": %d, \"text\": ", id);
    json_write_string(f, text, n);
    fprintf(f, ", \"prompt_tokens\": %d, \"completion_tokens\": %d, \"finish_reason\": ",
            prompt_tokens, completion_tokens);
    json_write_string(f, (const unsigned char*)finish_reason, strlen(finish_reason));
    fputs(", \"ttft_ms\": ", f);
    request_write_ms(f, ttft_ms);
    fputs(", \"total_ms\": ", f);
    request_write_ms(f, total_ms);
    fputc('}', f);
    request_record_end(f);
}

#endif // GPT2_REQUESTS_H
