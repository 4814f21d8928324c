/* Finite-difference helpers for the gradient tests. */
#include "tests/ref/fd.h"

#include <math.h>

double fd_check(fd_loss_fn f, void *ctx, double *x, const double *analytic, size_t n,
                size_t n_probe, double eps) {
    size_t stride = (n_probe >= n || n_probe == 0) ? 1 : n / n_probe;
    double num2 = 0.0, diff2 = 0.0;
    for (size_t i = 0; i < n; i += stride) {
        double keep = x[i];
        x[i] = keep + eps;
        double fp = f(ctx);
        x[i] = keep - eps;
        double fm = f(ctx);
        x[i] = keep;
        double numeric = (fp - fm) / (2.0 * eps);
        num2 += numeric * numeric;
        diff2 += (analytic[i] - numeric) * (analytic[i] - numeric);
    }
    return sqrt(diff2) / fmax(sqrt(num2), 1e-30);
}

double fd_rel_err(const double *a, const double *b, size_t n) {
    double d2 = 0.0, b2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        d2 += (a[i] - b[i]) * (a[i] - b[i]);
        b2 += b[i] * b[i];
    }
    return sqrt(d2) / fmax(sqrt(b2), 1e-30);
}

double fd_rel_err_f32(const float *a, const double *b, size_t n) {
    double d2 = 0.0, b2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        d2 += d * d;
        b2 += b[i] * b[i];
    }
    return sqrt(d2) / fmax(sqrt(b2), 1e-30);
}

void fd_fill_uniform(double *x, size_t n, double lo, double hi, unsigned long long seed) {
    unsigned long long s = seed;
    for (size_t i = 0; i < n; i++) {
        s += 0x9E3779B97F4A7C15ULL;
        unsigned long long z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        x[i] = lo + (hi - lo) * (double)(z >> 11) * (1.0 / 9007199254740992.0);
    }
}
