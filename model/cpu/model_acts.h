/* The CPU model's saved activations and scratch (private to model/cpu/model_*.c), compiled per
 * precision like every file here (model/real.h), and the blocks that live in their own files. */
#ifndef GDN_MODEL_ACTS_H
#define GDN_MODEL_ACTS_H

#include "model/cpu/model_cpu.h"
#include "model/real.h"

typedef R(gdn_cpu_acts) acts_t;
typedef R(gdn_cpu_carry) carry_t;
typedef gdn_seq_hooks hooks_t;
typedef R(gdn_cpu_delta_args) delta_args_t;

/* Activations saved by one block (N = B*T rows). */
typedef struct {
    real *rstd1;   /* [N] */
    real *h1;      /* [N,D] normed block input */
    real *qp, *kp; /* [N,H*K] projections before the convolution */
    real *vp;      /* [N,H*V] */
    real *zp;      /* [N,H*V] output-gate pre-activation */
    real *ap, *bp; /* [N,H] decay and write-strength pre-activations */
    real *qc, *kc; /* [N,H*K] after the convolution, before SiLU */
    real *vc;      /* [N,H*V] */
    real *q, *k;   /* [N,H*K] L2-normalised */
    real *rq, *rk; /* [N*H] their inverse norms */
    real *v;       /* [N,H*V] */
    real *g, *beta;/* [N,H] */
    real *S0;      /* [B,H,K,V] initial state (copy of the carry, or zeros) */
    real *halo_q, *halo_k; /* [B,W-1,H*K] rows before t = 0 */
    real *halo_v;  /* [B,W-1,H*V] */
    real *o;       /* [N,H*V] delta-rule output */
    real *rstd_o;  /* [N*H] */
    real *y;       /* [N,H*V] gated norm output */
    real *rstd2;   /* [N] */
    real *h2;      /* [N,D] */
    real *gp, *up; /* [N,F] */
    real *m;       /* [N,F] silu(gp) * up */
    /* An attention layer uses qp, kp, vp (projections with bias; vp is v), q, k (after the
     * norms and RoPE), rq, rk (the norms' rstd), o [N,H*Da] and lse; none of the rest of the
     * mixer's. A linearized layer (mixer S) uses the same, except lse. */
    real *lse;     /* [B,H,T] */
} layer_acts;

/* Gradient scratch for the backward pass, reused by every block. */
typedef struct {
    real *dx, *dh, *dtmp, *dhf; /* [N,D] */
    real *dm, *dgp, *dup;       /* [N,F] */
    real *dy, *d_o, *dz;        /* [N,H*V] */
    real *dqn, *dkn, *dq1, *dk1;/* [N,H*K] */
    real *dv, *dvp;             /* [N,H*V] */
    real *dg, *dbeta, *dap, *dbp; /* [N,H] */
    /* sequence parallelism: a state and its gradients [B,H,K,V]; tails of q, k, v
     * [B,W-1,H*K] / [B,W-1,H*V] (forward: the rows sent on; backward: the gradients received)
     * and the halo gradients */
    real *S_out, *dS_out, *dS_in;
    real *tail[3], *dhalo[3];
    /* attention layers: gradients of o and q [N,H*Da], of k and v [N,Hkv*Da], and of the
     * projections before the q/k norms */
    real *ado, *adq, *adk, *adv, *adqp, *adkp;
} grad_scratch;

struct R(gdn_cpu_acts) {
    gdn_config cfg;
    int B, T;
    size_t N;
    int *tokens;       /* [N] */
    real *x;           /* [n_layers+1][N,D]: x[l] enters block l, x[n_layers] the final norm */
    real *x_mid;       /* [n_layers][N,D] */
    layer_acts *L;     /* [n_layers] */
    real *rstdf;       /* [N] */
    real *hf;          /* [N,D] */
    real *logits;      /* [N,vocab]; holds dlogits after a forward with grad_scale != 0 */
    int has_grad;
    int seq_parallel;  /* hooks set */
    int pos0;          /* position of the first token (a carried KV cache); the backward needs 0 */
    int n_attn;        /* layers with attention's layout and KV cache (A and S) */
    hooks_t hooks;
    /* documents: the starts set (NULL: none) and, per forward pass, the form the kernels read
     * (model/cpu/doc.h); doc_used is doc when any row has a document boundary, else NULL */
    unsigned char *starts; /* [N] */
    int *doc;              /* [N] */
    const int *doc_used;
    /* sequence parallelism with attention layers: the prefix's keys and values [B,pos0+T,C] per
     * attention layer (k, v; kept for the backward), then the gradients of one layer's (dk, dv) */
    real *sp_kv;
    size_t sp_kv_n;    /* elements of one of those arrays */
    /* optional: called by every attention layer with its attention output L[layer].o computed,
     * before o_proj; it may overwrite that output (forward only: model/cpu/linearize_model.c) */
    void (*attn_out_hook)(void *user, struct R(gdn_cpu_acts) *a, int layer);
    void *attn_out_user;
    grad_scratch s;
    real *arena;
    size_t arena_n;    /* elements of arena */
};

static inline void add_into(real *dst, const real *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* An attention layer's mixer (model/cpu/model_attn.c): forward from x_in[l] to x_mid[l], with
 * the KV cache of the carries; backward from dL/dx_mid in s.dx to dL/dx_in, accumulating into
 * the gradients G. */
void R(gdn_cpu_attn_forward)(acts_t *a, const gdn_param_table *t, const real *P, int l,
                             const carry_t *cin, carry_t *cout);
void R(gdn_cpu_attn_backward)(acts_t *a, const gdn_param_table *t, const real *P, real *G, int l);

#endif
