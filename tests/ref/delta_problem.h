/* Delta-rule test problems: seeded inputs of one mixer (model/mixer.h), the NaN-filled outputs
 * and gradients of one run, and the runs compared by the tests (the fp64 reference, the chunked
 * kernels in f64 and f32). Release everything with the matching _free. */
#ifndef GDN_TEST_DELTA_PROBLEM_H
#define GDN_TEST_DELTA_PROBLEM_H

#include <stddef.h>

#include "model/cpu/ops_cpu.h"
#include "model/mixer.h"

/* Log-decays g per token and head. */
enum {
    DELTA_DECAY_MILD,   /* uniform in [-1, 0) */
    DELTA_DECAY_STRONG, /* mild, and about a third of the tokens at -5..-20 (seed + 6) */
    DELTA_DECAY_WIDE,   /* uniform in [-20, 0) */
    DELTA_DECAY_WEAK,   /* uniform in [-0.05, 0): the entering state stays visible */
};

/* How the inputs are drawn. Every array has its own seed (q + 1, k + 2, v + 3, beta + 4, g + 5,
 * then h0, Wo, Wh), so a test's values depend only on its seeds and mode. */
enum {
    DELTA_DRAW_F64,      /* fp64 values, q and k with unit rows; h0 + 7, Wo + 8, Wh + 9 */
    DELTA_DRAW_F32,      /* the same values rounded to float: the fp32 path sees exactly them */
    DELTA_DRAW_F32_EACH, /* rounded as drawn, q and k also before normalising; h0 + 6, Wo + 7,
                          * Wh + 8 (so not with DELTA_DECAY_STRONG) */
};

/* One problem in fp64 plus the loss weights Wo (on o) and Wh (on ht). g_in / beta_in are what
 * the kernels get: g and beta, or NaN arrays where the mixer ignores them, so that a stray read
 * cannot pass. */
typedef struct {
    gdn_delta_shape s;
    const gdn_mixer_info *mx;
    size_t nqk, nv, ng, nst, nm; /* element counts: q/k, v/o, g/beta, K x V states, K x K maps */
    double *q, *k, *v, *g, *beta, *h0, *Wo, *Wh;
    double *g_in, *beta_in;
    double scale;
} delta_problem;

delta_problem delta_problem_make(int variant, int B, int T, int H, int K, int V, int chunk,
                                 int decay, int draw, unsigned long long seed);
void delta_problem_free(delta_problem *p);

/* Rounds every input of p to float. */
void delta_problem_round_f32(delta_problem *p);

/* Outputs and gradients of one run, NaN until written (the f32 run's widened to double). */
typedef struct {
    double *o, *ht, *dq, *dk, *dv, *dg, *dbeta, *dh0;
} delta_result;

delta_result delta_result_alloc(const delta_problem *p);
void delta_result_free(delta_result *r);

/* Forward and backward of p with the loss weights as output gradients; use_h0 / use_dht select
 * h0 and dht = Wh or NULL. The reference gets NULL for the inputs the mixer ignores (it must not
 * read them); the chunked kernels get g_in and beta_in. */
delta_result delta_run_ref(const delta_problem *p, int use_h0, int use_dht);
delta_result delta_run_chunk_f64(const delta_problem *p, int use_h0, int use_dht);
/* The f32 kernels on p's inputs rounded to float (exact when drawn with DELTA_DRAW_F32*). */
delta_result delta_run_chunk_f32(const delta_problem *p, int use_h0, int use_dht);

/* Relative errors of a against ref, in the order of delta_err_names. */
enum { DELTA_N_ERR = 8 };
extern const char *const delta_err_names[DELTA_N_ERR];
void delta_result_errors(const delta_problem *p, const delta_result *a, const delta_result *ref,
                         double err[DELTA_N_ERR]);

/* Prints "  label name err ..." (n errors), folds them into *max_err and returns the index of the
 * first error not below tol, or -1. */
int delta_report(const char *label, const double *err, const char *const *names, int n, double tol,
                 double *max_err);

#endif
