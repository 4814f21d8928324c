/* Checks shared by the delta-rule tests on a delta_problem: the affine maps of sequence
 * parallelism (M [BH,K,K], H and E [BH,K,V] per segment) composed with a state and compared with
 * the runs, and the gradients of a run against central finite differences. */
#ifndef GDN_TEST_DELTA_CHECKS_H
#define GDN_TEST_DELTA_CHECKS_H

#include <stddef.h>

#include "tests/ref/delta_problem.h"

/* y = M x + c per (b, h) (transpose: M^T x + c); M [BH,K,K], x, c, y [BH,K,V]. */
void delta_apply_map(const delta_problem *p, const double *M, const double *x, const double *c,
                     int transpose, double *y);

/* The maps of p: H from the forward, E from the adjoint with d_o = Wo. */
typedef struct {
    double *M, *H, *E;
} delta_maps;

delta_maps delta_maps_f64(const delta_problem *p);
void delta_maps_free(delta_maps *m);

/* The maps composed with h0 and dht = Wh, fwd = M h0 + H and bwd = M^T Wh + E, against the
 * fp64 reference from h0 with dht: err[0] fwd vs ht, err[1] bwd vs dh0; then against the chunked
 * f64 kernels: [2] fwd vs ht, [3] bwd vs dh0, [4] H vs ht from h0 = 0, [5] E vs dh0 at dht = 0. */
void delta_map_errors(const delta_problem *p, const delta_maps *m, double err[6]);

/* The fp32 maps of p composed in fp64 with h0 and Wh against the fp64 reference: the larger of
 * the forward and backward relative errors. M on its own is a product of up to T contracting
 * factors whose entries decay towards 0; its elementwise relative error grows with T while its
 * contribution to the state shrinks, so the composed states are the meaningful measure. */
double delta_map_error_f32(const delta_problem *p);
/* The gradients r.dq, dk, dv, dg, dbeta, dh0 of the loss sum(o*Wo) + sum(ht*Wh) against central
 * differences of that loss at n_probe entries each, by the reference (chunked 0) or the chunked
 * f64 forward (chunked 1). use_h0 0 starts from h0 = NULL (err[5] = 0), with_ht 0 drops the ht
 * term. The loss sees the real g and beta, even for mixers that ignore them: their differences
 * are then exactly 0. */
void delta_fd_errors(delta_problem *p, const delta_result *r, int chunked, int use_h0, int with_ht,
                     size_t n_probe, double err[6]);
extern const char *const delta_fd_names[6];

#endif
