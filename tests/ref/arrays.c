/* Array helpers of the delta-rule tests (see arrays.h). */
#include "tests/ref/arrays.h"

#include <math.h>

#include "model/check.h"
#include "tests/ref/fd.h"

double *ref_nan_array(size_t n) {
    double *x = GDN_MALLOC(sizeof(double) * (n + 1));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

float *ref_nan_f32(size_t n) {
    float *x = GDN_MALLOC(sizeof(float) * (n + 1));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

double *ref_uniform(size_t n, double lo, double hi, unsigned long long seed) {
    double *x = GDN_MALLOC(sizeof(double) * (n + 1));
    fd_fill_uniform(x, n, lo, hi, seed);
    return x;
}

void ref_round_f32(double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (double)(float)x[i];
}

float *ref_to_f32(const double *x, size_t n) {
    float *y = GDN_MALLOC(sizeof(float) * (n + 1));
    for (size_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

void ref_l2_rows(double *x, size_t rows, int D) {
    for (size_t r = 0; r < rows; r++) {
        double n2 = 0.0;
        for (int i = 0; i < D; i++) n2 += x[r * D + i] * x[r * D + i];
        for (int i = 0; i < D; i++) x[r * D + i] /= sqrt(n2);
    }
}
