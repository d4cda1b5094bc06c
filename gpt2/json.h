// gpt2/json.h: a reader of JSON (RFC 8259) over text in memory (encoder.json, safetensors
// headers, requests) and a writer of JSON strings. Nothing is built: the caller asks for what it
// expects next and skips the rest; JSON's grammar is checked here, a format's own rules by its
// reader. Bad input stops the program with one line naming the file and the byte, or, caught
// (json_catch), returns to the caller's setjmp.

//   JsonReader r = json_reader(text, n, path, NULL);
//   json_expect(&r, '{');
//   for (size_t i = 0; json_next(&r, '}', i); i++) {   // each member, "key": value
//       char key[32];
//       json_string(&r, key, sizeof(key));
//       json_expect(&r, ':');
//       if (strcmp(key, "top_p") == 0) top_p = json_number(&r); else json_skip_value(&r);
//   }
//   json_end(&r);

#ifndef GPT2_JSON_H
#define GPT2_JSON_H

#include <math.h>
#include <setjmp.h>
#include "io.h"
#include "utf8.h"

#define JSON_MAX_DEPTH 16  // arrays and objects in one another, in a value that is skipped

typedef struct {
    const unsigned char* s;  // the JSON text (not 0-terminated)
    size_t n, pos;           // its length in bytes; the next byte to read
    const char* path;        // the file it comes from, first in every error
    const char* part;        // NULL: the whole file; else which part ("safetensors header")
    jmp_buf* on_error;       // NULL: an error stops the program; else where it jumps (json_catch)
    char* error;             // then gets the message, error_cap bytes with the 0
    size_t error_cap;
} JsonReader;

static inline JsonReader json_reader(const void* text, size_t n, const char* path, const char* part) {
    JsonReader r;
    r.s = (const unsigned char*)text;
    r.n = n;
    r.pos = 0;
    r.path = path;
    r.part = part;
    r.on_error = NULL;
    r.error = NULL;
    r.error_cap = 0;
    return r;
}

// From now on an error in r writes "MSG at byte N" into error (cap bytes) and jumps to on_error,
// where the caller's setjmp returns 1. The reader leaks nothing; what the caller allocated since
// its setjmp is its own to free. Locals changed after setjmp are undefined after the jump unless
// volatile (C11 7.13.2.1): keep what the error path needs outside them.
static inline void json_catch(JsonReader* r, jmp_buf* on_error, char* error, size_t cap) {
    r->on_error = on_error;
    r->error = error;
    r->error_cap = cap;
}

// Stops with "PATH: MSG at byte N (line L)" (a part: "PATH: malformed PART: MSG at byte N of the
// JSON"), or caught, jumps back. A caller's own complaint sets r->pos to the value's start first.
static inline void json_fail(const JsonReader* r, const char* msg) GPT2_NORETURN;
static inline void json_fail(const JsonReader* r, const char* msg) {
    if (r->on_error != NULL) {
        snprintf(r->error, r->error_cap, "%s at byte %zu", msg, r->pos);
        longjmp(*r->on_error, 1);
    }
    if (r->part == NULL) fail("%s: %s at byte %zu (line %d)", r->path, msg, r->pos, line_of(r->s, r->pos));
    fail("%s: malformed %s: %s at byte %zu of the JSON", r->path, r->part, msg, r->pos);
}

// ---------- punctuation ----------

// The byte at r->pos, or -1 at the end of the text.
static inline int json_byte(const JsonReader* r) {
    return r->pos < r->n ? r->s[r->pos] : -1;
}

static inline void json_skip_space(JsonReader* r) {
    int c;
    while ((c = json_byte(r)) == ' ' || c == '\n' || c == '\r' || c == '\t') r->pos++;
}

// The first byte after whitespace (not consumed), or -1 at the end: what kind of value comes.
static inline int json_peek(JsonReader* r) {
    json_skip_space(r);
    return json_byte(r);
}

// What kind of value begins with byte c, for a complaint: "a string", ..., "a number" for any
// other byte (reading it finds out).
static inline const char* json_kind_name(int c) {
    switch (c) {
        case '"': return "a string";
        case '{': return "an object";
        case '[': return "an array";
        case 't': return "true";
        case 'f': return "false";
        case 'n': return "null";
        default: return "a number";
    }
}

// Consumes c (after whitespace) if it is next; returns whether it was.
static inline int json_accept(JsonReader* r, char c) {
    if (json_peek(r) != (unsigned char)c) return 0;
    r->pos++;
    return 1;
}

static inline void json_expect(JsonReader* r, char c) {
    if (!json_accept(r, c)) {
        char msg[32];
        snprintf(msg, sizeof(msg), "expected '%c'", c);
        json_fail(r, msg);
    }
}

// Between the items of an open object or array: 1 when item `index` follows (its ',' consumed),
// 0 at the close (consumed).
static inline int json_next(JsonReader* r, char close, size_t index) {
    if (json_accept(r, close)) return 0;
    if (index > 0 && !json_accept(r, ',')) {
        char msg[32];
        snprintf(msg, sizeof(msg), "expected ',' or '%c'", close);
        json_fail(r, msg);
    }
    return 1;
}

// Only whitespace may follow the value just read.
static inline void json_end(JsonReader* r) {
    if (json_peek(r) != -1) json_fail(r, "unexpected text after the JSON value");
}

// ---------- strings ----------

static inline uint32_t json_hex4(JsonReader* r) {
    if (r->pos + 4 > r->n) json_fail(r, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int c = r->s[r->pos++], d = 0;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else json_fail(r, "bad hex digit in \\u escape");
        v = v * 16 + (uint32_t)d;
    }
    return v;
}

// The code point of the escape after a backslash; beyond U+FFFF a UTF-16 surrogate pair, whose
// half alone is no character.
static inline uint32_t json_escape(JsonReader* r) {
    int c = json_byte(r);
    if (c == -1) json_fail(r, "unterminated string");
    r->pos++;
    switch (c) {
        case '"': return '"';
        case '\\': return '\\';
        case '/': return '/';
        case 'b': return '\b';
        case 'f': return '\f';
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'u': break;
        default: r->pos--; json_fail(r, "unknown escape");  // at the letter
    }
    uint32_t cp = json_hex4(r);
    if (cp >= 0xDC00 && cp <= 0xDFFF) json_fail(r, "lone surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (r->pos + 2 > r->n || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u') {
            json_fail(r, "lone surrogate in \\u escape");
        }
        r->pos += 2;
        uint32_t low = json_hex4(r);
        if (low < 0xDC00 || low > 0xDFFF) json_fail(r, "bad surrogate pair in \\u escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    return cp;
}

// Opens a string, for json_string_char to read a character at a time.
static inline void json_string_begin(JsonReader* r) {
    if (json_peek(r) != '"') json_fail(r, "expected a string");
    r->pos++;
}

// The next character of the open string as a code point in *cp, escapes decoded: returns 1, or 0
// at the closing '"' (consumed). Raw control characters and invalid UTF-8 are refused.
static inline int json_string_char(JsonReader* r, uint32_t* cp) {
    int c = json_byte(r);
    if (c == -1) json_fail(r, "unterminated string");
    if (c == '"') {
        r->pos++;
        return 0;
    }
    if (c == '\\') {
        r->pos++;
        *cp = json_escape(r);
        return 1;
    }
    if (c < 0x20) json_fail(r, "control character in string");
    int len = utf8_decode(r->s + r->pos, r->n - r->pos, cp);
    if (len == 0) json_fail(r, "invalid UTF-8 in string");
    r->pos += (size_t)len;
    return 1;
}

// Moves past a string, checked as json_string_char checks it.
static inline void json_skip_string(JsonReader* r) {
    uint32_t cp;
    json_string_begin(r);
    while (json_string_char(r, &cp)) {}
}

// A string as UTF-8 into out, 0-terminated, at most cap - 1 bytes; returns its length (\u0000
// may be inside). No string decodes longer than its text, so the bytes left + 1 always fit.
static inline size_t json_string(JsonReader* r, char* out, size_t cap) {
    json_string_begin(r);
    size_t len = 0;
    uint32_t cp;
    while (json_string_char(r, &cp)) {
        unsigned char bytes[4];
        int nb = utf8_encode(cp, bytes);
        if (len + (size_t)nb >= cap) {
            char msg[64];
            snprintf(msg, sizeof(msg), "string too long (more than %zu bytes)", cap - 1);
            json_fail(r, msg);
        }
        memcpy(out + len, bytes, (size_t)nb);
        len += (size_t)nb;
    }
    out[len] = '\0';
    return len;
}

// ---------- numbers, true, false, null ----------

// The number of decimal digits at r->pos, consumed.
static inline size_t json_digits(JsonReader* r) {
    size_t start = r->pos;
    while (json_byte(r) >= '0' && json_byte(r) <= '9') r->pos++;
    return r->pos - start;
}

// Moves past a number, -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?, not +1, 01, .5, 1.,
// NaN or Infinity; returns where it starts.
static inline size_t json_number_text(JsonReader* r) {
    json_skip_space(r);
    size_t start = r->pos;
    if (json_byte(r) == '-') r->pos++;
    size_t first = r->pos, digits = json_digits(r);
    if (digits == 0) json_fail(r, first == start ? "expected a number" : "expected a digit after '-'");
    if (r->s[first] == '0' && digits > 1) {
        r->pos = first;
        json_fail(r, "number with a leading zero");
    }
    if (json_byte(r) == '.') {
        r->pos++;
        if (json_digits(r) == 0) json_fail(r, "expected a digit after the decimal point");
    }
    if (json_byte(r) == 'e' || json_byte(r) == 'E') {
        r->pos++;
        if (json_byte(r) == '+' || json_byte(r) == '-') r->pos++;
        if (json_digits(r) == 0) json_fail(r, "expected a digit in the exponent");
    }
    return start;
}

// A number, the nearest double; 1e400 is an error, 1e-400 is 0 (as Python and JavaScript).
static inline double json_number(JsonReader* r) {
    size_t start = json_number_text(r), len = r->pos - start;
    char small[64];  // strtod wants a 0-terminated copy; numbers are short, but need not be
    char* text = len < sizeof(small) ? small : (char*)malloc_check(len + 1);
    memcpy(text, r->s + start, len);
    text[len] = '\0';
    double v = strtod(text, NULL);  // the text is checked above, so strtod reads all of it
    if (text != small) free(text);
    if (v == HUGE_VAL || v == -HUGE_VAL) {  // strtod's answer to a number beyond the doubles
        r->pos = start;
        json_fail(r, "number out of range (beyond 1.8e308)");
    }
    return v;
}

// A non-negative integer of at most max, digits alone (no '-', fraction or exponent).
static inline long long json_int(JsonReader* r, long long max, const char* what) {
    char msg[160];
    int c = json_peek(r);
    size_t start = r->pos, end = start;
    if (c >= '0' && c <= '9') json_number_text(r);  // the number's grammar is checked there
    while (end < r->pos && r->s[end] >= '0' && r->s[end] <= '9') end++;
    if (end == start || end != r->pos) {
        snprintf(msg, sizeof(msg), "expected a non-negative integer %s", what);
        r->pos = start;
        json_fail(r, msg);
    }
    long long v = 0;
    for (size_t i = start; i < end; i++) {
        int d = r->s[i] - '0';
        if (d > max || v > (max - d) / 10) {  // v * 10 + d > max, without overflow
            snprintf(msg, sizeof(msg), "%s too large (more than %lld)", what, max);
            r->pos = start;
            json_fail(r, msg);
        }
        v = v * 10 + d;
    }
    return v;
}

// Consumes word (after whitespace) if it is next; returns whether it was.
static inline int json_accept_word(JsonReader* r, const char* word) {
    size_t len = strlen(word);
    json_skip_space(r);
    if (r->n - r->pos < len || memcmp(r->s + r->pos, word, len) != 0) return 0;
    r->pos += len;
    return 1;
}

static inline int json_bool(JsonReader* r) {
    if (json_accept_word(r, "true")) return 1;
    if (!json_accept_word(r, "false")) json_fail(r, "expected true or false");
    return 0;
}

// Consumes null if it is next (a field that may be left unset); returns whether it was.
static inline int json_accept_null(JsonReader* r) {
    return json_accept_word(r, "null");
}

// ---------- any value ----------

// Reads and drops one value, checked as above; at most JSON_MAX_DEPTH deep, so that bad input
// cannot exhaust the stack.
static inline void json_skip_nested(JsonReader* r, int depth) {
    int c = json_peek(r);
    if (c == '{' || c == '[') {
        if (depth > JSON_MAX_DEPTH) {
            char msg[64];
            snprintf(msg, sizeof(msg), "nested too deeply (more than %d levels)", JSON_MAX_DEPTH);
            json_fail(r, msg);
        }
        r->pos++;
        for (size_t i = 0; json_next(r, c == '{' ? '}' : ']', i); i++) {
            if (c == '{') {
                json_skip_string(r);  // the key
                json_expect(r, ':');
            }
            json_skip_nested(r, depth + 1);
        }
    } else if (c == '"') {
        json_skip_string(r);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        json_number(r);
    } else if (c == 't' || c == 'f') {
        json_bool(r);
    } else if (!json_accept_null(r)) {
        json_fail(r, "expected a value");
    }
}

static inline void json_skip_value(JsonReader* r) {
    json_skip_nested(r, 1);
}

// ---------- writing ----------

// Writes any n bytes of s to f as a JSON string: escapes as needed, and each invalid UTF-8
// sequence (generated text can end mid-character) as U+FFFD, since JSON is UTF-8 (RFC 8259, 8.1).
// The caller checks ferror(f).
static inline void json_write_string(FILE* f, const unsigned char* s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        uint32_t cp;
        int len = utf8_decode(s + i, n - i, &cp);
        if (len == 0) {
            fputs("\xEF\xBF\xBD", f);  // U+FFFD in UTF-8
            i += (size_t)utf8_invalid_length(s + i, n - i);
            continue;
        }
        switch (c) {
            case '"': fputs("\\\"", f); break;
            case '\\': fputs("\\\\", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            default:
                if (c < 0x20) fprintf(f, "\\u%04x", c);
                else fwrite(s + i, 1, (size_t)len, f);
        }
        i += (size_t)len;
    }
    fputc('"', f);
}

#endif // GPT2_JSON_H
