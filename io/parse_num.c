/* Strict number parsing: the grammar is checked by hand, so strtoull/strtod only ever see text
 * that is a plain decimal number (they would otherwise accept spaces, '+', hex and "inf"). */
#include "io/parse_num.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Quotes s for a message, cut short so a huge argument cannot flood the terminal. */
static void fail(char *err, size_t err_len, const char *what, const char *kind, const char *s) {
    if (!err || !err_len) return;
    if (!s) snprintf(err, err_len, "%s expects %s, got nothing", what, kind);
    else snprintf(err, err_len, "%s expects %s, got '%.80s%s'", what, kind, s, strlen(s) > 80 ? "..." : "");
}

/* Unsigned magnitude of "[-]digits"; -1 on bad syntax, 1 on overflow of uint64. */
static int parse_magnitude(const char *s, int *neg, uint64_t *mag) {
    *neg = *s == '-';
    const char *p = s + *neg;
    if (!is_digit(*p)) return -1;
    uint64_t v = 0;
    int overflow = 0;
    for (; is_digit(*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) overflow = 1;
        else v = v * 10 + d;
    }
    if (*p) return -1;
    *mag = v;
    return overflow;
}

int io_parse_i64(const char *what, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err,
                 size_t err_len) {
    char kind[96];
    snprintf(kind, sizeof kind, "an integer from %lld to %lld", (long long)lo, (long long)hi);
    int neg;
    uint64_t mag;
    int r = s ? parse_magnitude(s, &neg, &mag) : -1;
    if (r != 0) {
        fail(err, err_len, what, kind, s);
        return -1;
    }
    /* |INT64_MIN| = INT64_MAX + 1 */
    if ((!neg && mag > (uint64_t)INT64_MAX) || (neg && mag > (uint64_t)INT64_MAX + 1)) {
        fail(err, err_len, what, kind, s);
        return -1;
    }
    int64_t v = neg ? (mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag) : (int64_t)mag;
    if (v < lo || v > hi) {
        fail(err, err_len, what, kind, s);
        return -1;
    }
    *out = v;
    return 0;
}

int io_parse_int(const char *what, const char *s, int lo, int hi, int *out, char *err,
                 size_t err_len) {
    int64_t v;
    if (io_parse_i64(what, s, lo, hi, &v, err, err_len)) return -1;
    *out = (int)v;
    return 0;
}

int io_parse_u64(const char *what, const char *s, uint64_t hi, uint64_t *out, char *err,
                 size_t err_len) {
    char kind[96];
    snprintf(kind, sizeof kind, "an integer from 0 to %llu", (unsigned long long)hi);
    int neg;
    uint64_t mag;
    if (!s || parse_magnitude(s, &neg, &mag) != 0 || (neg && mag != 0) || mag > hi) {
        fail(err, err_len, what, kind, s);
        return -1;
    }
    *out = mag;
    return 0;
}

/* "[-]digits[.digits][(e|E)[+|-]digits]" with at least one digit before the exponent. */
static int real_syntax_ok(const char *s) {
    const char *p = s;
    if (*p == '-') p++;
    int digits = 0;
    while (is_digit(*p)) p++, digits++;
    if (*p == '.') {
        p++;
        while (is_digit(*p)) p++, digits++;
    }
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!is_digit(*p)) return 0;
        while (is_digit(*p)) p++;
    }
    return *p == 0;
}

int io_parse_f64(const char *what, const char *s, double lo, double hi, double *out, char *err,
                 size_t err_len) {
    char kind[128];
    snprintf(kind, sizeof kind, "a finite number from %g to %g", lo, hi);
    if (!s || !real_syntax_ok(s)) {
        fail(err, err_len, what, kind, s);
        return -1;
    }
    errno = 0;
    double v = strtod(s, NULL);
    /* ERANGE: overflow to +-HUGE_VAL, or underflow (a value written with digits that is not 0
     * but reads as 0 or a denormal would silently be something else) */
    if (errno == ERANGE || !isfinite(v) || v < lo || v > hi) {
        fail(err, err_len, what, kind, s);
        return -1;
    }
    *out = v;
    return 0;
}
