/* Independent fp64 reference for the gated delta rule and the other mixers of model/mixer.h
 * (s->variant): the plain token-by-token recurrence and its hand-written backpropagation
 * through time. Same conventions and shapes as gdn_delta_fwd / gdn_delta_bwd in
 * model/cpu/ops_cpu_decl.h (the chunk field is ignored), including the inputs a variant does
 * not read (may be NULL) and the zero gradients written for them (dg, dbeta may be NULL). */
#ifndef GDN_TEST_DELTA_RECURRENT_H
#define GDN_TEST_DELTA_RECURRENT_H

#include "model/cpu/ops_cpu.h"

void ref_delta_recurrent_fwd(const gdn_delta_shape *s, const double *q, const double *k,
                             const double *v, const double *g, const double *beta, double scale,
                             const double *h0, double *o, double *ht);
void ref_delta_recurrent_bwd(const gdn_delta_shape *s, const double *q, const double *k,
                             const double *v, const double *g, const double *beta, double scale,
                             const double *h0, const double *d_o, const double *dht, double *dq,
                             double *dk, double *dv, double *dg, double *dbeta, double *dh0);

#endif
