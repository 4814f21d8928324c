/* A GDN student made from a softmax-attention teacher (gdn distill init, docs/distillation.md
 * "Student initialisation"): which layers change, the student's configuration, the mapping of
 * the teacher's tensors onto it and the decay set from the teacher's attention distances. */
#ifndef GDN_TRAIN_DISTILL_INIT_H
#define GDN_TRAIN_DISTILL_INIT_H

#include <stdint.h>

#include "model/params.h"

/* The clamp of a measured mean attention distance before it becomes a decay (tokens): below the
 * lower bound the rate ln(1 + 1/d) grows without limit, above the upper one it is ~0. */
#define DISTILL_DIST_MIN 0.05
#define DISTILL_DIST_MAX 1e5

/* The student's mixer of each layer, letters[0 .. n_layers-1] (+ terminator; letters holds
 * n_layers + 1 chars): by default every softmax layer (A) of the teacher becomes G; keep (a
 * comma-separated list of layer indices, or NULL) keeps those softmax; pattern (or NULL) gives
 * the student's mixers as a layer pattern (repeated to n_layers) in which only the teacher's A
 * layers may differ. Returns 0, or -1 with a message naming the option and the layer in err:
 * a teacher without softmax layers, a bad pattern or index, a layer kept that is not softmax,
 * a pattern that changes a non-softmax layer, or a student that would keep every softmax layer. */
int distill_student_mixers(const gdn_config *teacher, const char *pattern, const char *keep,
                           char *letters, char *err, int err_len);

/* The student's configuration: the teacher's with the mixers letters and the delta-rule heads
 * shaped as the attention heads (head_dim = attn_head_dim, expand_v = 1, n_heads the query
 * heads), so that the teacher's q/k/v/o projections fit. Returns 0, or -1 with the reason in
 * err (a teacher whose own delta-rule layers have another head shape, a pattern longer than
 * GDN_MAX_MIXERS letters, a configuration out of range). */
int distill_student_config(const gdn_config *teacher, const char *letters, gdn_config *student,
                           char *err, int err_len);

/* The output gate of a converted layer (g_proj [n_heads*Da, d_model]) at the start. */
typedef enum {
    DISTILL_GATE_ZERO,    /* 0: each new mixer outputs exactly 0 */
    DISTILL_GATE_DEFAULT, /* the fresh random initialisation */
    DISTILL_GATE_VALUE    /* DISTILL_GATE_VALUE_SCALE * v_proj (after the head repeat): a small
                           * gate, open where the value is, so each mixer starts slightly on */
} distill_gate;
#define DISTILL_GATE_VALUE_SCALE 0.01f

typedef struct {
    distill_gate gate;
    int conv_identity;    /* short convolutions pass q, k, v through (else their fresh init) */
    const double *dist;   /* [n_layers * n_heads] mean attention distances, or NULL: fresh decay */
} distill_init_opts;

/* Fills the student's parameters sp (already initialised by gdn_params_init) from the teacher's:
 * every tensor of an unchanged layer and the embeddings, final norm and head bit for bit; in a
 * converted layer the norms, MLP, q_proj and o_proj bit for bit, k_proj and v_proj with each
 * key/value head repeated for its query heads, g_proj as o->gate says, the short convolutions
 * the identity (last tap 1; conv_identity), and with dist the decay of distill_decay_params and a_proj zero. */
void distill_map_params(const gdn_param_table *tt, const float *tp, const gdn_param_table *st,
                        float *sp, const distill_init_opts *o);

/* The decay of a mean attention distance d (clamped to [DISTILL_DIST_MIN, DISTILL_DIST_MAX]):
 * per-token decay r = d / (1 + d), whose weights r^k (k = t - s) have mean distance exactly d,
 * i.e. g = ln r = -ln(1 + 1/d); with A_log = 0 and a_proj = 0 the layer's g = -softplus(dt_bias),
 * so dt_bias = softplus^-1(ln(1 + 1/d)) = ln(expm1(ln(1 + 1/d))) = ln(1/d) = -ln d. */
void distill_decay_params(double d, double *A_log, double *dt_bias);

/* The teacher's mean attention distance per layer and query head, dist[l * n_heads + h] =
 * mean over the n windows [n, T] of tokens and over positions t of sum_s p(t, s) (t - s), with
 * p the attention probabilities of the fp32 CPU forward; NaN for layers that are not softmax. */
void distill_attention_distance(const gdn_param_table *t, const float *P, const int *tokens, int n,
                                int T, double *dist);

#endif
