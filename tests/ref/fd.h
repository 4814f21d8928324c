/* Central finite differences in double precision, for gradient tests. */
#ifndef GDN_TEST_FD_H
#define GDN_TEST_FD_H

#include <stddef.h>

/* A scalar loss of the current contents of some buffers, evaluated in fp64. */
typedef double (*fd_loss_fn)(void *ctx);

/* Compares analytic[i] with (f(x+eps e_i) - f(x-eps e_i)) / (2 eps) for n_probe indices of
 * x[0..n) (all of them when n_probe >= n, else evenly strided ones), restoring x afterwards.
 * Returns the norm-wise relative error ||analytic - numeric|| / max(||numeric||, 1e-30) over the
 * probed entries. */
double fd_check(fd_loss_fn f, void *ctx, double *x, const double *analytic, size_t n,
                size_t n_probe, double eps);

/* Norm-wise relative error ||a - b|| / max(||b||, 1e-30) of two float or double arrays. */
double fd_rel_err(const double *a, const double *b, size_t n);
double fd_rel_err_f32(const float *a, const double *b, size_t n);

/* Deterministic pseudo-random fill (splitmix64), uniform in [lo, hi). */
void fd_fill_uniform(double *x, size_t n, double lo, double hi, unsigned long long seed);

#endif
