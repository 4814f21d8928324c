/* GPT-2's bytes_to_unicode for the tokenizer tests and fuzzers that write byte-level vocabularies. */
#ifndef GDN_TESTS_TOKENIZER_BYTE_CP_H
#define GDN_TESTS_TOKENIZER_BYTE_CP_H

/* The code point that stands for byte b, written out as the Python original does it: printable
 * bytes keep their code point, the others get 256, 257, ... in byte order. */
static inline unsigned byte_cp(unsigned b) {
    int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    if (keep) return b;
    unsigned k = 0;
    for (unsigned i = 0; i < b; i++)
        k += !((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255));
    return 256 + k;
}

#endif
