/* The GDN language model on one GPU (model_cuda.h), shared by its translation units: the model
 * struct, the saved activations, the delta-rule plan, the profiler and the helpers used by more
 * than one pass. model_cuda_setup.cu: layout, create / free, parameter copies and the
 * sequence-parallel buffers; model_cuda_fwd.cu, model_cuda_bwd.cu: the passes; model_cuda_optim.cu:
 * AdamW (whole or one ZeRO-1 shard); model_cuda_bench.cu: the step benchmark and its profiler.
 *
 * The model is the CPU model (model/cpu/model_cpu.c) block for block, on the CUDA ops
 * (ops_cuda.h), the CUDA delta rule (delta_cuda.h) and cuBLASLt.
 *
 * Block l:  x_mid = x_in + o_proj(gated_norm(delta_rule(q, k, v, g, beta), z))
 *           (the rule of layer l's mixer, model/mixer.h; g only with decay, beta only with beta)
 *           x_in[l+1] = x_mid + down(silu(gate(h2)) * up(h2)),  h2 = rmsnorm(x_mid)
 * with q, k, v = silu(conv4(proj(h1))), q and k L2-normalised per head, h1 = rmsnorm(x_in).
 * An attention layer (mixer A, model_cuda_attn.cu) has the same input norm, MLP and residuals;
 * its mixer is x_mid = x_in + o_proj(attention(rope(qnorm(q)), rope(knorm(k)), v)) with
 * q, k, v = proj(h1) (+ bias).
 *
 * Types: the residual stream x / x_mid, its gradient dx, norm statistics, gate pre-activations
 * (ap, bp), gates (g, beta) and their gradients are fp32; every other activation is `act`
 * (fp32 or bf16 by precision). GEMMs whose output is summed or feeds a norm backward write fp32. */
#ifndef GDN_MODEL_CUDA_INTERNAL_CUH
#define GDN_MODEL_CUDA_INTERNAL_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "model/cuda/cuda_check.h"
#include "model/cuda/model_cuda.h"
#include "model/mixer.h"

#define FP32 GDN_CUDA_FP32

/* Activations saved by one block for its backward pass (N = B*T rows). What is cheap to
 * recompute is not saved: the norm outputs h1, h2 (from x and rstd), the convolution outputs
 * (the convolution backward recomputes them from qp, kp, vp), v = silu(conv(vp)) (recomputed
 * before the delta rule's backward), the gated norm's output y (its backward writes it again for
 * o_proj's weight gradient) and silu(gp) * up. Each recomputation gives the forward's bits. */
typedef struct {
    float *rstd1;            /* [N] */
    void *qp, *kp;           /* [N,HK] act, before the convolution */
    void *vp, *zp;           /* [N,HV] act (zp: output-gate pre-activation) */
    float *ap, *bp;          /* [N,H] decay and write-strength pre-activations (NULL without them) */
    void *q, *k;             /* [N,HK] act, silu(conv(.)) L2-normalised */
    float *rq, *rk;          /* [N*H] inverse norms */
    void *v;                 /* attention layers only (below); a delta-rule layer's v is not kept */
    float *g, *beta;         /* [N,H] (NULL where the layer's mixer has no decay / no beta) */
    void *o;                 /* [N,HV] act, delta-rule output */
    float *rstd_o;           /* [N*H] */
    float *rstd2;            /* [N] */
    void *gp, *up;           /* [N,F] act */
    float *pg, *pbeta;       /* [N,H*S] packed gates (only when the plan packs heads and the mixer has them) */
    /* sequence parallelism (only while hooks are set; in the boundary allocation) */
    void *halo[3], *tail[3], *dhalo[3], *dtail[3]; /* q, k, v: [B,W-1,HK|HV] act */
    float *S_in, *S_out, *dS_in;                    /* [n_state] */
    /* attention layers (model_cuda_attn.cu) use rstd1, qp [N,H*Da], kp [N,Hkv*Da], v [N,Hkv*Da],
     * o [N,H*Da], rq [N*H] and rk [N*Hkv] (with qk_norm), rstd2, gp, up, and: */
    float *lse;              /* [B,H,T] the attention's log-sum-exp */
    void *k_all, *v_all;     /* sequence parallelism: [B,pos0+T,Hkv*Da] act, the keys (after RoPE)
                                and values of the whole prefix (allocation 4) */
} layer_acts;

/* How the delta rule is called: directly, or on packed heads (ops_cuda.h, head packing). */
typedef struct {
    int packed;
    int S, Kp, Vs, Vp;       /* sub-heads per head, padded K, value columns per sub-head, padded */
    int v_same;              /* packed values have the layout of the unpacked ones (V = S * Vp) */
    int qk_shared;           /* the S sub-heads of a head read its q, k in place (shape.qk_heads) */
    gdn_delta_shape shape;   /* the shape the kernels see */
} delta_plan;

/* Time per kind of work, for the benchmark's breakdown (events around each launch). */
enum { PR_GEMM, PR_DELTA, PR_NORM, PR_CONV, PR_ACT, PR_PACK, PR_LOSS, PR_COPY, PR_EMBED, PR_OPT, PR_ATTN, PR_N };
#define PROF_MAX 4096

struct gdn_cuda_model {
    const gdn_param_table *t;
    gdn_config cfg;
    int B, T, N;
    gdn_cuda_precision p;
    cudaStream_t stream;
    cudaStream_t side;       /* work beside the stream's (the backward's recomputed v) */
    cudaEvent_t side_ev[2];  /* [0] side waits for stream, [1] stream waits for side */
    gdn_cuda_blas *blas;

    /* allocation 1: parameters and optimizer state */
    char *pbuf;
    size_t pbytes;
    float *params, *grads;   /* [padded] (the tail past total stays zero) */
    float *adam_m, *adam_v;  /* [hi - lo]: the moments of the elements [lo, hi) */
    size_t lo, hi, padded;   /* ZeRO-1 shard (create_sharded); else 0, total, total */
    void *wact;              /* [wact_n] bf16 copy of params (BF16 mode), else NULL */
    uint64_t *run_end;       /* [n_runs] one run per tensor (AdamW) */
    int *run_decay;          /* [n_runs] */
    uint64_t *run_act;       /* [n_runs] where each tensor starts in wact */
    int n_runs;
    uint64_t *shard_end;     /* [n_shard_runs] the runs cut to [lo, hi), ends relative to lo */
    int *shard_decay;        /* [n_shard_runs] */
    int n_shard_runs;
    uint64_t *act_off_h;     /* host copy of run_act */
    size_t wact_n;

    /* allocation 2: activations and scratch */
    char *abuf;
    size_t abytes;
    float *x;                /* [n_layers+1][N,D] */
    float *x_mid;            /* [n_layers][N,D] */
    layer_acts *L;           /* [n_layers] (host array of device pointers) */
    void *hs;                /* [N,D] act: the current norm output h1 or h2 (recomputed in the backward) */
    float *rstdf;            /* [N] */
    void *hf;                /* [N,D] act */
    void *logits;            /* [N,vocab] act; dlogits after a forward with grad_scale != 0 */
    /* backward scratch, reused by every block */
    float *dx;               /* [N,D] residual gradient */
    void *dx_act;            /* [N,D] act copy of dx (BF16 mode; NULL in FP32 mode) */
    float *dh;               /* [N,D] sum of the projections' input gradients */
    void *dm;                /* [N,F] act (a GEMM's output for SwiGLU's backward) */
    void *dgu;               /* [N,2F] act: the gradients of gate_proj's and up_proj's outputs side by
                                side in each row (their input gradient is one GEMM) */
    void *dproj;             /* [N,ldp] act: a delta-rule layer's projection output gradients side by
                                side, in its weights' order (q, k, v, then a, b where the mixer has
                                them); the same memory as dm and dgu (the MLP's backward), never
                                live at the same time */
    int ldp;                 /* its row length: 2 HK + HV + 2 H rounded up to 16 bytes */
    void *dyo;               /* [N,HV] act (a GEMM's output for the gated norm's backward) */
    void *d_o, *dz;          /* [N,HV] act */
    void *dqn, *dkn, *dq1, *dk1; /* [N,HK] act (dq1 is also the forward's SiLU scratch) */
    void *dv, *dvp;          /* [N,HV] act; dvp also holds a delta-rule layer's v (forward and
                                backward) and y (forward), dv its y in the backward */
    float *dg, *dbeta;       /* [N,H] */
    /* packed heads for the delta rule (when dp.packed) */
    delta_plan dp;
    void *pq, *pk;           /* [N,H*S,Kp] act (unless qk_shared) */
    void *pv, *po;           /* [N,H*S,Vp] act (po: output, then d_o in the backward; unless v_same) */
    void *pdq, *pdk;         /* [N,H*S,Kp] act */
    void *pdv;               /* [N,H*S,Vp] act (unless v_same) */
    float *pdg, *pdbeta;     /* [N,H*S] */
    void *delta_ws;
    void *op_ws;             /* the ops' workspace (also the attention backward's and the q/k prep's) */
    float *rope;             /* [2,T,Da/2] RoPE table of positions 0..T-1 (models with attention layers) */
    int *tokens_d, *targets_d;        /* [N] */
    int *perm_d, *seg_start_d, *seg_token_d; /* embedding backward plan */
    double *loss_d, *gnorm_d;
    int *nvalid_d;

    /* profiler (benchmark only) */
    int prof_on, prof_n, prof_phase;
    cudaEvent_t *prof_ev;    /* [PROF_MAX][2] */
    unsigned char prof_cat[PROF_MAX], prof_ph[PROF_MAX];
    int prof_line[PROF_MAX];         /* source line of the launch (the breakdown's per-site table) */
    const char *prof_file[PROF_MAX]; /* its source file */
    const char *prof_call[PROF_MAX]; /* the launch's source text (its first call names the site) */

    /* host */
    int *perm_h, *seg_start_h, *seg_token_h;
    int n_seg;
    int has_grad, has_logits;
    int has_fwd;             /* a forward pass has run: x holds its residual stream */
    gdn_seq_hooks hooks;
    int seq;                 /* hooks set: this model runs one segment of longer sequences */
    char *sbuf;              /* allocation 3 (first set_seq_hooks): the boundary buffers of L */
    float *dS_out;           /* [n_state] received gradient of the leaving state */
    char *kvbuf;             /* allocation 4 (set_seq_hooks with attention layers): k_all, v_all of
                                every attention layer, then dk_all, dv_all */
    int kv_len;              /* its prefix length pos0 + T (0: none) */
    void *dk_all, *dv_all;   /* [B,pos0+T,Hkv*Da] act: the attention backward's gradients of them */
    float *distill;          /* distillation scratch (first use): the teacher's logits [N,V] or a
                                mixer's target [N,D] */
    size_t n_state, n_halo[3];
    /* documents (gdn_cuda_model_set_doc_starts; docs/design.md section 3.8): device arrays
     * [N], NULL without documents */
    int *doc_d;              /* doc of model/cpu/doc.h: the delta rule and the convolutions */
    int *keylo_d;            /* the first key each query sees, max(doc, 0): attention */
    int *rpos_d;             /* each token's row of the RoPE table: its position in its document */
    int doc_row0;            /* a start at t = 0 of some row (the arrays stay NULL if only there) */
};

/* ---- profiler (model_cuda_bench.cu) ------------------------------------------------------------------ */
/* Events around one launch while the benchmark profiles a step (else nothing). */
void gdn_cuda_model_prof_begin(gdn_cuda_model *m, int cat, const char *file, int line, const char *call);
void gdn_cuda_model_prof_end(gdn_cuda_model *m);
#define PF(cat, ...)                                                          \
    do {                                                                      \
        gdn_cuda_model_prof_begin(m, cat, __FILE__, __LINE__, #__VA_ARGS__); \
        __VA_ARGS__;                                                          \
        gdn_cuda_model_prof_end(m);                                           \
    } while (0)

/* ---- shared helpers ------------------------------------------------------------------------------ */
/* The bf16 copy of every tensor from the fp32 parameters (BF16 mode), on the model's stream
 * (model_cuda_setup.cu). */
void gdn_cuda_model_refresh_act(gdn_cuda_model *m);

/* The GEMM copy of the parameter tensor at offset off (bf16 copy, or the fp32 master). */
static inline const void *wgt(const gdn_cuda_model *m, size_t off) {
    if (!m->wact) return m->params + off;
    int lo = 0, hi = m->t->n - 1; /* tensors are in offset order */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (m->t->p[mid].offset <= off) lo = mid;
        else hi = mid - 1;
    }
    if (m->t->p[lo].offset != off) GDN_CUDA_DIE("model: no parameter tensor starts at offset %zu", off);
    return (const char *)m->wact + m->act_off_h[lo] * 2;
}

/* The mixer of layer l (create checks that the CUDA model runs it). */
static inline const gdn_mixer_info *layer_mixer(const gdn_cuda_model *m, int l) {
    return gdn_mixer_get(m->t->layer[l].mixer);
}

/* The delta-rule shape of layer l: the plan's, with the layer's mixer. */
static inline gdn_delta_shape layer_shape(const gdn_cuda_model *m, int l) {
    gdn_delta_shape s = m->dp.shape;
    s.variant = m->t->layer[l].mixer;
    return s;
}

/* Whether layer l is an attention layer (model_cuda_attn.cu). */
static inline int layer_is_attn(const gdn_cuda_model *m, int l) { return m->t->layer[l].mixer == GDN_MIXER_A; }
/* Whether the table has an attention layer (from the table: model/config.c's functions have C
 * linkage and model/config.h no extern "C" block). */
static inline int table_has_attn(const gdn_param_table *t) {
    for (int l = 0; l < t->cfg.n_layers; l++)
        if (t->layer[l].mixer == GDN_MIXER_A) return 1;
    return 0;
}

static inline float beta_scale(const gdn_config *c) { return c->allow_neg_eigval ? 2.0f : 1.0f; }

/* What the forward and the backward of block l start from: the config, the precision, the
 * dimensions (N = B*T rows, width D, H heads of K key and V value columns, F feed-forward
 * columns, W convolution taps, HK = H*K, HV = H*V), and the layer's parameter offsets, mixer
 * and saved activations. Both take it apart in one structured binding. */
struct block_ctx {
    const gdn_config *c;
    gdn_cuda_precision p;
    int N, D, H, K, B, T, V, F, W, HK, HV;
    const gdn_layer_offsets *off;
    const gdn_mixer_info *mx;
    const layer_acts *L;
};
static inline block_ctx block_ctx_of(const gdn_cuda_model *m, int l) {
    const gdn_config *c = &m->cfg;
    const int H = c->n_heads, K = c->head_dim, V = gdn_config_head_v(c);
    return block_ctx{c, m->p, m->N, c->d_model, H, K, m->B, m->T, V, c->d_ff, c->conv_width, H * K, H * V,
                     &m->t->layer[l], layer_mixer(m, l), &m->L[l]};
}

/* ---- attention layers (model_cuda_attn.cu) -------------------------------------------------------------- */
/* Bytes of op workspace the attention layers need (the model's op_ws is at least this). */
size_t gdn_cuda_model_attn_workspace(const gdn_cuda_model *m);
/* Fills the RoPE table (once, at create; synchronous). */
void gdn_cuda_model_attn_setup(gdn_cuda_model *m);
/* After set_seq_hooks (set or cleared): RoPE at the segment's positions, the prefix buffers. */
void gdn_cuda_model_attn_seq(gdn_cuda_model *m);
/* The mixer of attention layer l: from h1 (in m->hs) and x_in to x_mid. */
void gdn_cuda_model_attn_forward(gdn_cuda_model *m, int l);
/* Its backward: from dL/dx_mid (m->dx, and m->dx_act in BF16 mode) to dL/dx_in in m->dx, with the
 * layer's parameter gradients. */
void gdn_cuda_model_attn_backward(gdn_cuda_model *m, int l);
/* Block l's mixer and input norm backward (either kind), from dL/dx_mid in m->dx (and m->dx_act
 * in BF16 mode): the parameter gradients accumulated, dL/dx_in added to m->dx. */
void gdn_cuda_model_mixer_backward(gdn_cuda_model *m, int l);

/* ---- shared by the mixers' backward passes (model_cuda_bwd.cu) -------------------------------------- */
/* One projection of h1: its output gradient dy [N,out] (act, rows ld apart) and its weight's offset.
 * join: one product with the projection before it, where their weights are adjacent (in the flat
 * buffer and in the GEMM copy) and dy's columns follow the previous dy's in the same rows. */
typedef struct {
    const void *dy;
    int ld;
    size_t w;
    int out;
    int join;
} block_proj;
/* The projections of h1 (input gradients summed into m->dh in the order given, weight gradients
 * added; joined ones as one pair of GEMMs) and the block's input norm: m->dx += dL/dx_in. */
void gdn_cuda_model_input_backward(gdn_cuda_model *m, int l, const block_proj *proj, int n_proj);
/* The projections of h [N,D] alone: m->dh = the sum of their input gradients, weights' += . */
void gdn_cuda_model_proj_backward(gdn_cuda_model *m, const block_proj *proj, int n_proj, const void *h);

#endif
