/* Naive fp64 references for the attention tests: causal softmax attention that materialises
 * the whole T x T probability matrix of each (batch, head), its backward through the textbook
 * softmax Jacobian, and rotary embedding written as Hugging Face writes it. */
#ifndef GDN_TEST_ATTENTION_REF_H
#define GDN_TEST_ATTENTION_REF_H

#include "model/cpu/ops_cpu.h"

/* o [B,T,H,D] and lse [B,H,T] (lse may be NULL) of q [B,T,H,D], k, v [B,T,Hkv,D]. */
void attn_ref_fwd(const gdn_attn_shape *s, const double *q, const double *k, const double *v,
                  double scale, double *o, double *lse);

/* dq [B,T,H,D], dk, dv [B,T,Hkv,D] of L = sum(o * d_o), from the inputs alone. */
void attn_ref_bwd(const gdn_attn_shape *s, const double *q, const double *k, const double *v,
                  double scale, const double *d_o, double *dq, double *dk, double *dv);

/* y [B,T,H,D] = x cos(emb) + rotate_half(x) sin(emb), emb = cat(freqs, freqs),
 * freqs_i = p / theta^(2i/D), p = pos0 + t, rotate_half(x) = cat(-x2, x1). */
void rope_ref(double *y, const double *x, int B, int T, int H, int D, int pos0, double theta);

#endif
