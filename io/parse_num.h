/* Strict number parsing for every command-line option and setting. A number is the whole
 * string, nothing else: no leading or trailing space, no '+', no hex or octal prefixes, no
 * "inf"/"nan", and it must lie in the range the caller gives. Integers are plain decimal digits
 * with an optional '-' ("1e3", "16x", "0x10", "5.0" are errors); reals are decimal with an
 * optional fraction and exponent ("1e-3", "-0.5", ".5", "5.") and must be finite.
 *
 * Each function returns 0 with the value in *out, or -1 with a message naming `what` (e.g.
 * "--chunk") in err: "--chunk expects an integer from 16 to 64, got '16x'". *out is left alone
 * on error. */
#ifndef GDN_IO_PARSE_NUM_H
#define GDN_IO_PARSE_NUM_H

#include <stddef.h>
#include <stdint.h>

int io_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err,
                 size_t err_len);
int io_parse_int(const char *what, const char *s, int lo, int hi, int *out, char *err,
                 size_t err_len);
int io_parse_u64(const char *what, const char *s, uint64_t hi, uint64_t *out, char *err,
                 size_t err_len);
int io_parse_f64(const char *what, const char *s, double lo, double hi, double *out, char *err,
                 size_t err_len);

#endif
