/* UTF-8 helpers shared by the tokenizers and the detokenizer. Input text is never trusted to be
 * valid UTF-8: every helper here is defined for arbitrary bytes. */
#ifndef FX_TOK_UTF8_H
#define FX_TOK_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point at s[0..n) (n >= 1). Returns the number of bytes consumed; *cp receives
 * the code point, or 0xFFFD for an invalid, overlong, surrogate or truncated sequence, in which
 * case exactly one byte is consumed. */
static inline size_t fx_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t len;
    uint32_t c, min;
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2, c = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3, c = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4, c = b & 0x07, min = 0x10000;
    } else {
        *cp = 0xFFFD;
        return 1;
    }
    if (n < len) {
        *cp = 0xFFFD;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return 1;
        }
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return len;
}

/* Encodes cp (<= 0x10FFFF) into out[0..4); returns the byte count. */
static inline size_t fx_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the incomplete character at the end of s[0..n): the number of trailing bytes that
 * form a valid but unfinished prefix of a multi-byte character (0 to 3). Bytes that can never
 * become part of a valid character do not count, so holding back exactly this many bytes never
 * delays output that is already final. */
size_t fx_utf8_incomplete_tail(const char *s, size_t n);

#endif
