/* Test arrays shared by the delta-rule tests: NaN-filled outputs (an entry a kernel fails to
 * write cannot pass), seeded uniform inputs, fp32 copies and unit-norm rows. Every allocation
 * has one spare element, so n = 0 still gives a valid pointer; release with free(). */
#ifndef GDN_TEST_ARRAYS_H
#define GDN_TEST_ARRAYS_H

#include <stddef.h>

double *ref_nan_array(size_t n);
float *ref_nan_f32(size_t n);

/* n values uniform in [lo, hi) from fd_fill_uniform(seed). */
double *ref_uniform(size_t n, double lo, double hi, unsigned long long seed);

/* Rounds every value to float, so that fp64 code sees exactly what the fp32 path gets. */
void ref_round_f32(double *x, size_t n);

/* A float copy of x [n]. */
float *ref_to_f32(const double *x, size_t n);

/* Scales each of the rows of x [rows,D] to unit L2 norm, as the model feeds q and k. */
void ref_l2_rows(double *x, size_t rows, int D);

#endif
