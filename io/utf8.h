/* UTF-8 decoding and encoding shared by the JSON reader and writer (internal to io/). */
#ifndef GDN_IO_UTF8_H
#define GDN_IO_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the well-formed UTF-8 sequence at p (n bytes available), storing the code
 * point in *cp; 0 when the bytes are not well-formed (bad lead byte, missing continuation,
 * overlong form, surrogate, or beyond U+10FFFF). */
static inline int io_utf8_decode(const unsigned char *p, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    unsigned c = p[0];
    int len;
    uint32_t min, v;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* Writes code point cp (<= U+10FFFF, not a surrogate) as UTF-8 into out[4]; returns the length. */
static inline int io_utf8_encode(uint32_t cp, unsigned char *out) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

#endif
