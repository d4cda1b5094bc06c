// test/fuzz/fuzz_json.c: the JSON reader alone (gpt2/json.h), with what neither file format
// that uses it reads: numbers as doubles, true, false, null, strings as UTF-8, any value skipped.
// The input is one JSON text. A second, plain validator here decides what it is: one JSON value
// (RFC 8259: objects and arrays nested at most JSON_MAX_DEPTH deep, numbers within the doubles'
// range, strings of valid UTF-8 with no lone surrogate), then only whitespace, or not. Then
//   - json_skip_value and json_end must refuse exactly the inputs it refuses;
//   - the typed readers (json_string, json_number, json_int, json_bool, json_accept_null, chosen
//     by each value's first byte) must too, and give back what the text says: a string's bytes as
//     the validator decodes them, true for true, a number's digits as json_int reads them.

#include <ctype.h>
#include "fuzz.h"
#include "../../gpt2/json.h"

// ---------- the validator: returns the index just past what it matched at i, or -1 ----------

static const uint8_t* in;
static long in_n;

static long plain_space(long i) {  // -1 stays -1
    while (i >= 0 && i < in_n && (in[i] == ' ' || in[i] == '\t' || in[i] == '\n' || in[i] == '\r')) i++;
    return i;
}

static long plain_digits(long i) {
    while (i < in_n && in[i] >= '0' && in[i] <= '9') i++;
    return i;
}

static long plain_number(long i) {
    long start = i;
    if (i < in_n && in[i] == '-') i++;
    if (i < in_n && in[i] == '0') i++;
    else if (i < in_n && in[i] >= '1' && in[i] <= '9') i = plain_digits(i);
    else return -1;
    if (i < in_n && in[i] == '.') {
        if (plain_digits(i + 1) == i + 1) return -1;
        i = plain_digits(i + 1);
    }
    if (i < in_n && (in[i] == 'e' || in[i] == 'E')) {
        if (i + 1 < in_n && (in[i + 1] == '+' || in[i + 1] == '-')) i++;
        if (plain_digits(i + 1) == i + 1) return -1;
        i = plain_digits(i + 1);
    }
    char* text = (char*)malloc((size_t)(i - start) + 1);
    memcpy(text, in + start, (size_t)(i - start));
    text[i - start] = '\0';
    double v = strtod(text, NULL);
    free(text);
    return v == HUGE_VAL || v == -HUGE_VAL ? -1 : i;
}

// The value of the 4 hex digits at i, or -1.
static long plain_hex4(long i) {
    if (i + 4 > in_n) return -1;
    char text[5] = {0};
    for (int k = 0; k < 4; k++) {
        if (!isxdigit(in[i + k])) return -1;
        text[k] = (char)in[i + k];
    }
    return strtol(text, NULL, 16);
}

// A string at i; its bytes, decoded, into out (*len of them) when out is not NULL.
static long plain_string(long i, unsigned char* out, size_t* len) {
    static const char letters[] = "\"\\/bfnrt", stands_for[] = "\"\\/\b\f\n\r\t";
    size_t n = 0;
    if (i < 0 || i >= in_n || in[i] != '"') return -1;
    for (i++; i < in_n && in[i] != '"';) {
        unsigned char bytes[4];
        int nb = 0;
        uint32_t cp;
        if (in[i] == '\\' && i + 1 < in_n && in[i + 1] == 'u') {
            long high = plain_hex4(i + 2), low = -1;
            i += 6;
            if (high >= 0xD800 && high <= 0xDBFF && i + 1 < in_n && in[i] == '\\' && in[i + 1] == 'u') {
                low = plain_hex4(i + 2);
                i += 6;
            }
            if (high < 0 || (high >= 0xDC00 && high <= 0xDFFF)) return -1;
            if (high >= 0xD800 && high <= 0xDBFF && (low < 0xDC00 || low > 0xDFFF)) return -1;
            cp = low >= 0 ? 0x10000 + (uint32_t)((high - 0xD800) * 1024 + (low - 0xDC00)) : (uint32_t)high;
            nb = utf8_encode(cp, bytes);
        } else if (in[i] == '\\') {
            const char* e = i + 1 < in_n && in[i + 1] != 0 ? strchr(letters, in[i + 1]) : NULL;
            if (e == NULL) return -1;
            bytes[nb++] = (unsigned char)stands_for[e - letters];
            i += 2;
        } else {
            nb = in[i] < 0x20 ? 0 : utf8_decode(in + i, (size_t)(in_n - i), &cp);
            if (nb == 0) return -1;
            memcpy(bytes, in + i, (size_t)nb);
            i += nb;
        }
        if (out != NULL) memcpy(out + n, bytes, (size_t)nb);
        n += (size_t)nb;
    }
    if (len != NULL) *len = n;
    return i < in_n ? i + 1 : -1;
}

static long plain_word(long i, const char* word) {
    long k = (long)strlen(word);
    return i + k <= in_n && memcmp(in + i, word, (size_t)k) == 0 ? i + k : -1;
}

static long plain_value(long i, int depth) {
    i = plain_space(i);
    if (i >= in_n) return -1;
    if (in[i] == '"') return plain_string(i, NULL, NULL);
    if (in[i] == 't') return plain_word(i, "true");
    if (in[i] == 'f') return plain_word(i, "false");
    if (in[i] == 'n') return plain_word(i, "null");
    if (in[i] != '{' && in[i] != '[') return plain_number(i);
    if (depth > JSON_MAX_DEPTH) return -1;
    uint8_t close = in[i] == '{' ? '}' : ']';
    i = plain_space(i + 1);
    if (i < in_n && in[i] == close) return i + 1;
    for (;;) {
        if (close == '}') {
            i = plain_space(plain_string(plain_space(i), NULL, NULL));
            if (i < 0 || i >= in_n || in[i] != ':') return -1;
            i++;
        }
        i = plain_space(plain_value(i, depth + 1));
        if (i < 0 || i >= in_n) return -1;
        if (in[i] == close) return i + 1;
        if (in[i] != ',') return -1;
        i++;
    }
}

// ---------- the typed readers ----------

static unsigned char* got;   // room for any string of the input, as json_string gives it
static unsigned char* want;  // and as plain_string does
static size_t room;

static void read_string(JsonReader* r) {
    json_skip_space(r);
    size_t start = r->pos, n = json_string(r, (char*)got, room), want_n;
    FUZZ_CHECK(plain_string((long)start, want, &want_n) == (long)r->pos, "a string ends elsewhere");
    FUZZ_CHECK(n == want_n && memcmp(got, want, n) == 0 && got[n] == 0, "a string decodes otherwise");
}

static void read_value(JsonReader* r, int depth) {
    int c = json_peek(r);
    size_t start = r->pos;
    if (c == '{' || c == '[') {
        if (depth > JSON_MAX_DEPTH) json_fail(r, "nested too deeply");
        r->pos++;
        for (size_t i = 0; json_next(r, c == '{' ? '}' : ']', i); i++) {
            if (c == '{') {
                read_string(r);
                json_expect(r, ':');
            }
            read_value(r, depth + 1);
        }
    } else if (c == '"') {
        read_string(r);
    } else if (c == 't' || c == 'f') {
        FUZZ_CHECK(json_bool(r) == (c == 't'), "true or false misread");
    } else if (!json_accept_null(r)) {
        double v = json_number(r);
        if (r->pos - start <= 15 && plain_digits((long)start) == (long)r->pos) {  // digits alone
            JsonReader again = *r;
            again.pos = start;
            long long k = json_int(&again, 999999999999999LL, "integer");
            FUZZ_CHECK((double)k == v && again.pos == r->pos, "json_int reads %lld, json_number %g", k, v);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    in = data;
    in_n = (long)size;
    long end = plain_value(0, 1);
    int valid = end >= 0 && plain_space(end) == in_n;
    room = size + 1;
    got = (unsigned char*)malloc(room);
    want = (unsigned char*)malloc(room);
    volatile int skipped = 0, typed = 0;  // set only when no error came (setjmp: volatile)
    volatile long skip_end = -1, typed_end = -1;
    fuzz_begin(size);
    if (setjmp(fuzz_jump) == 0) {
        JsonReader r = json_reader(data, size, FUZZ_INPUT, NULL);
        json_skip_value(&r);
        skip_end = (long)r.pos;
        json_end(&r);
        skipped = 1;
    }
    if (setjmp(fuzz_jump) == 0) {
        JsonReader r = json_reader(data, size, FUZZ_INPUT, NULL);
        read_value(&r, 1);
        typed_end = (long)r.pos;
        json_end(&r);
        typed = 1;
    }
    FUZZ_CHECK(skipped == valid, "json_skip_value %s", valid ? "refused a JSON value" : "accepted what is not JSON");
    FUZZ_CHECK(typed == valid, "the typed readers %s", valid ? "refused a JSON value" : "accepted what is not JSON");
    FUZZ_CHECK(!valid || (skip_end == end && typed_end == end), "a value read to byte %ld or %ld, not %ld",
               skip_end, typed_end, end);
    fuzz_end();
    free(got);
    free(want);
    return 0;
}
