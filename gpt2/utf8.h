// gpt2/utf8.h: UTF-8 (RFC 3629), a character at a time, for the pre-tokenizer (gpt2/tokenizer.h)
// and the JSON reader and writer (gpt2/json.h).

#ifndef GPT2_UTF8_H
#define GPT2_UTF8_H

#include <stddef.h>
#include <stdint.h>

// Decodes the character at s[0] (n >= 1 bytes) into *cp and returns its length 1..4, or 0 where
// it is not well-formed (overlong, a surrogate, past U+10FFFF, a continuation missing).
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

// The length 1..3 of the invalid sequence at s[0]: Unicode's "maximal subpart" (chapter 3), so a
// character cut short is one U+FFFD, as browsers and Python's errors="replace" give.
static inline int utf8_invalid_length(const unsigned char* s, size_t n) {
    unsigned c = s[0];
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
    // the second byte's range: E0, F0 overlong below it, ED a surrogate and F4 past U+10FFFF above
    unsigned low = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned high = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    int i = 1;
    while (i < len && (size_t)i < n && s[i] >= low && s[i] <= high) {
        i++;
        low = 0x80;
        high = 0xBF;
    }
    return i;
}

// Writes cp (a scalar value, as utf8_decode gives) as UTF-8 into out; returns its length 1..4.
static inline int utf8_encode(uint32_t cp, unsigned char out[4]) {
    static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    int len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    for (int i = len - 1; i > 0; i--, cp >>= 6) out[i] = (unsigned char)(0x80 | (cp & 0x3F));
    out[0] = (unsigned char)(lead[len] | cp);
    return len;
}

#endif // GPT2_UTF8_H
