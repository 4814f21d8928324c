/* The GDN language model on one GPU: the CPU model (model/cpu/model_cpu.c) block for block, on
 * the CUDA ops (ops_cuda.h), the CUDA delta rule (delta_cuda.h) and cuBLASLt.
 *
 * Block l:  x_mid = x_in + o_proj(gated_norm(delta_rule(q, k, v, g, beta), z))
 *           x_in[l+1] = x_mid + down(silu(gate(h2)) * up(h2)),  h2 = rmsnorm(x_mid)
 * with q, k, v = silu(conv4(proj(h1))), q and k L2-normalised per head, h1 = rmsnorm(x_in).
 *
 * Types: the residual stream x / x_mid, its gradient dx, norm statistics, gate pre-activations
 * (ap, bp), gates (g, beta) and their gradients are fp32; every other activation is `act`
 * (fp32 or bf16 by precision). GEMMs whose output is summed or feeds a norm backward write fp32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "model/cuda/cuda_check.h"
#include "model/cuda/model_cuda.h"

#define FP32 GDN_CUDA_FP32
#define ALIGN 256

/* Activations saved by one block for its backward pass (N = B*T rows). What is cheap to
 * recompute is not saved: the norm outputs h1, h2 (from x and rstd), the convolution outputs
 * (the convolution backward recomputes them from qp, kp, vp) and silu(gp) * up. */
typedef struct {
    float *rstd1;            /* [N] */
    void *qp, *kp;           /* [N,HK] act, before the convolution */
    void *vp, *zp;           /* [N,HV] act (zp: output-gate pre-activation) */
    float *ap, *bp;          /* [N,H] decay and write-strength pre-activations */
    void *q, *k;             /* [N,HK] act, silu(conv(.)) L2-normalised */
    float *rq, *rk;          /* [N*H] inverse norms */
    void *v;                 /* [N,HV] act, silu(conv(vp)) */
    float *g, *beta;         /* [N,H] */
    void *o;                 /* [N,HV] act, delta-rule output */
    float *rstd_o;           /* [N*H] */
    void *y;                 /* [N,HV] act, gated norm output */
    float *rstd2;            /* [N] */
    void *gp, *up;           /* [N,F] act */
    float *pg, *pbeta;       /* [N,H*S] packed gates (only when the plan packs heads) */
    /* sequence parallelism (only while hooks are set; in the boundary allocation) */
    void *halo[3], *tail[3], *dhalo[3], *dtail[3]; /* q, k, v: [B,W-1,HK|HV] act */
    float *S_in, *S_out, *dS_in;                    /* [n_state] */
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
enum { PR_GEMM, PR_DELTA, PR_NORM, PR_CONV, PR_ACT, PR_PACK, PR_LOSS, PR_COPY, PR_EMBED, PR_OPT, PR_N };
static const char *const prof_names[PR_N] = {"gemm", "delta", "norms", "conv", "act+gates", "pack", "loss",
                                             "copies", "embed", "optim"};
#define PROF_MAX 4096

struct gdn_cuda_model {
    const gdn_param_table *t;
    gdn_config cfg;
    int B, T, N;
    gdn_cuda_precision p;
    cudaStream_t stream;
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
    float *dm;               /* [N,F] */
    void *dgp, *dup;         /* [N,F] act */
    float *dyo;              /* [N,HV] */
    void *d_o, *dz;          /* [N,HV] act */
    void *dqn, *dkn, *dq1, *dk1; /* [N,HK] act (dq1 is also the forward's SiLU scratch) */
    void *dv, *dvp;          /* [N,HV] act */
    float *dg, *dbeta;       /* [N,H] */
    void *dap, *dbp;         /* [N,H] act */
    /* packed heads for the delta rule (when dp.packed) */
    delta_plan dp;
    void *pq, *pk;           /* [N,H*S,Kp] act (unless qk_shared) */
    void *pv, *po;           /* [N,H*S,Vp] act (po: output, then d_o in the backward; unless v_same) */
    void *pdq, *pdk;         /* [N,H*S,Kp] act */
    void *pdv;               /* [N,H*S,Vp] act (unless v_same) */
    float *pdg, *pdbeta;     /* [N,H*S] */
    void *delta_ws;
    void *op_ws;
    int *tokens_d, *targets_d;        /* [N] */
    int *perm_d, *seg_start_d, *seg_token_d; /* embedding backward plan */
    double *loss_d, *gnorm_d;
    int *nvalid_d;

    /* profiler (benchmark only) */
    int prof_on, prof_n, prof_phase;
    cudaEvent_t *prof_ev;    /* [PROF_MAX][2] */
    unsigned char prof_cat[PROF_MAX], prof_ph[PROF_MAX];
    int prof_line[PROF_MAX];         /* source line of the launch (the breakdown's per-site table) */
    const char *prof_call[PROF_MAX]; /* the launch's source text (its first call names the site) */

    /* host */
    int *perm_h, *seg_start_h, *seg_token_h;
    int n_seg;
    int has_grad, has_logits;
    gdn_cuda_seq_hooks hooks;
    int seq;                 /* hooks set: this model runs one segment of longer sequences */
    char *sbuf;              /* allocation 3 (first set_seq_hooks): the boundary buffers of L */
    float *dS_out;           /* [n_state] received gradient of the leaving state */
    size_t n_state, n_halo[3];
};

/* ---- layout ------------------------------------------------------------------------------------ */
/* Carves `bytes` from base (aligned); with base == NULL only counts. */
static void *take(char *base, size_t *used, size_t bytes) {
    void *p = base ? base + *used : NULL;
    *used += (bytes + ALIGN - 1) / ALIGN * ALIGN;
    return p;
}

static size_t params_layout(gdn_cuda_model *m, char *base) {
    size_t used = 0;
    m->params = (float *)take(base, &used, m->padded * 4);
    m->grads = (float *)take(base, &used, m->padded * 4);
    m->adam_m = (float *)take(base, &used, (m->hi - m->lo) * 4);
    m->adam_v = (float *)take(base, &used, (m->hi - m->lo) * 4);
    m->wact = m->p == GDN_CUDA_BF16 ? take(base, &used, m->wact_n * 2) : NULL;
    if (!base) m->wact = NULL;
    m->run_end = (uint64_t *)take(base, &used, (size_t)m->n_runs * sizeof(uint64_t));
    m->run_decay = (int *)take(base, &used, (size_t)m->n_runs * sizeof(int));
    m->run_act = (uint64_t *)take(base, &used, (size_t)m->n_runs * sizeof(uint64_t));
    m->shard_end = (uint64_t *)take(base, &used, (size_t)m->n_runs * sizeof(uint64_t));
    m->shard_decay = (int *)take(base, &used, (size_t)m->n_runs * sizeof(int));
    return used;
}

static size_t acts_layout(gdn_cuda_model *m, char *base) {
    const gdn_config *c = &m->cfg;
    const size_t N = (size_t)m->N, D = (size_t)c->d_model, H = (size_t)c->n_heads, K = (size_t)c->head_dim;
    const size_t V = (size_t)gdn_config_head_v(c), F = (size_t)c->d_ff, HK = H * K, HV = H * V;
    const size_t es = gdn_cuda_act_bytes(m->p), f4 = sizeof(float);
    const int bf = m->p == GDN_CUDA_BF16;
    size_t used = 0;
#define A(ptr, n) (ptr) = take(base, &used, (n) * es)
#define F32(ptr, n) (ptr) = (float *)take(base, &used, (n) * f4)
    F32(m->x, (size_t)(c->n_layers + 1) * N * D);
    F32(m->x_mid, (size_t)c->n_layers * N * D);
    for (int l = 0; l < c->n_layers; l++) {
        layer_acts *L = &m->L[l];
        F32(L->rstd1, N);
        A(L->qp, N * HK); A(L->kp, N * HK); A(L->vp, N * HV); A(L->zp, N * HV);
        F32(L->ap, N * H); F32(L->bp, N * H);
        A(L->q, N * HK); A(L->k, N * HK); F32(L->rq, N * H); F32(L->rk, N * H);
        A(L->v, N * HV); F32(L->g, N * H); F32(L->beta, N * H);
        A(L->o, N * HV); F32(L->rstd_o, N * H); A(L->y, N * HV);
        F32(L->rstd2, N);
        A(L->gp, N * F); A(L->up, N * F);
        if (m->dp.packed) {
            const size_t HS = H * (size_t)m->dp.S;
            F32(L->pg, N * HS); F32(L->pbeta, N * HS);
        }
    }
    A(m->hs, N * D);
    F32(m->rstdf, N); A(m->hf, N * D); A(m->logits, N * (size_t)c->vocab_size);
    F32(m->dx, N * D);
    if (bf) A(m->dx_act, N * D);
    else m->dx_act = NULL;
    F32(m->dh, N * D);
    F32(m->dm, N * F); A(m->dgp, N * F); A(m->dup, N * F);
    F32(m->dyo, N * HV); A(m->d_o, N * HV); A(m->dz, N * HV);
    A(m->dqn, N * HK); A(m->dkn, N * HK); A(m->dq1, N * HK); A(m->dk1, N * HK);
    A(m->dv, N * HV); A(m->dvp, N * HV);
    F32(m->dg, N * H); F32(m->dbeta, N * H); A(m->dap, N * H); A(m->dbp, N * H);
    if (m->dp.packed) {
        const size_t HS = H * (size_t)m->dp.S, nk = N * HS * (size_t)m->dp.Kp, nv = N * HS * (size_t)m->dp.Vp;
        if (!m->dp.qk_shared) {
            A(m->pq, nk); A(m->pk, nk); A(m->pdq, nk); A(m->pdk, nk);
        }
        if (!m->dp.v_same) {
            A(m->pv, nv); A(m->po, nv); A(m->pdv, nv);
        }
        F32(m->pdg, N * HS); F32(m->pdbeta, N * HS);
    }
#undef A
#undef F32
    m->delta_ws = take(base, &used, gdn_cuda_delta_workspace_bytes(&m->dp.shape, m->p));
    size_t ws = gdn_cuda_norm_workspace(m->N, c->d_model);
    size_t w2 = gdn_cuda_norm_workspace(m->N * c->n_heads, (int)V);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_conv_workspace(m->B, m->T, (int)(HK > HV ? HK : HV), c->conv_width);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_decay_gate_workspace(m->N, c->n_heads);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_cross_entropy_workspace(m->N);
    if (w2 > ws) ws = w2;
    w2 = gdn_cuda_grad_norm_workspace(m->t->total);
    if (w2 > ws) ws = w2;
    m->op_ws = take(base, &used, ws);
    m->tokens_d = (int *)take(base, &used, N * sizeof(int));
    m->targets_d = (int *)take(base, &used, N * sizeof(int));
    m->perm_d = (int *)take(base, &used, N * sizeof(int));
    m->seg_start_d = (int *)take(base, &used, (N + 1) * sizeof(int));
    m->seg_token_d = (int *)take(base, &used, N * sizeof(int));
    m->loss_d = (double *)take(base, &used, sizeof(double));
    m->gnorm_d = (double *)take(base, &used, sizeof(double));
    m->nvalid_d = (int *)take(base, &used, sizeof(int));
    return used;
}

/* ---- setup ---------------------------------------------------------------------------------------- */
static int delta_dim_ok(int d) { return d == 64 || d == 128 || d == 256; }
static int delta_pad(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

/* Direct call when K and V are kernel sizes; else zero-pad K and split V into the fewest padded
 * columns (S sub-heads of Vs <= 256 columns each). */
static delta_plan plan_delta(const gdn_config *c, int B, int T) {
    const int K = c->head_dim, V = gdn_config_head_v(c), H = c->n_heads;
    if (K > 256)
        GDN_CUDA_DIE("model: head_dim %d is not supported by the CUDA delta rule (at most 256)", K);
    delta_plan d;
    memset(&d, 0, sizeof d);
    d.Kp = delta_pad(K);
    int best = -1;
    for (int S = (V + 255) / 256; S <= (V + 63) / 64; S++) {
        const int Vs = (V + S - 1) / S, Vp = delta_pad(Vs);
        if (best < 0 || S * Vp < best) {
            best = S * Vp;
            d.S = S;
            d.Vs = Vs;
            d.Vp = Vp;
        }
    }
    d.packed = !(delta_dim_ok(K) && d.S == 1 && delta_dim_ok(V));
    d.v_same = d.Vp == d.Vs && d.S * d.Vs == V;
    d.qk_shared = d.packed && d.Kp == K;
    d.shape.B = B;
    d.shape.T = T;
    d.shape.H = d.packed ? H * d.S : H;
    d.shape.qk_heads = d.qk_shared ? H : 0;
    d.shape.K = d.packed ? d.Kp : K;
    d.shape.V = d.packed ? d.Vp : V;
    d.shape.chunk = c->chunk_size;
    gdn_cuda_delta_check_shape(&d.shape);
    return d;
}

/* One AdamW run per tensor, in buffer order: where it ends in the flat buffer, whether it
 * decays, and where it starts in the bf16 copy (every tensor on a 128-byte boundary, so the GEMMs
 * get aligned operands). Returns the elements of the copy. */
#define WACT_ALIGN 64
static size_t build_runs(const gdn_param_table *t, uint64_t *end, int *decay, uint64_t *act) {
    size_t at = 0;
    for (int i = 0; i < t->n; i++) {
        const gdn_param *p = &t->p[i];
        if (p->offset != (i ? end[i - 1] : 0))
            GDN_CUDA_DIE("parameter table: tensor %s starts at %zu, not where the previous one ends", p->name,
                         p->offset);
        end[i] = p->offset + p->numel;
        decay[i] = !p->no_decay;
        act[i] = at;
        at += (p->numel + WACT_ALIGN - 1) / WACT_ALIGN * WACT_ALIGN;
    }
    if (t->n < 1 || end[t->n - 1] != t->total) GDN_CUDA_DIE("parameter table: tensors do not cover the flat buffer");
    return at;
}

/* The runs of [lo, hi) (ZeRO-1 shard): each tensor's part inside it, ends relative to lo, with
 * its tensor's decay. Returns the number of runs (0 for an empty shard). */
static int build_shard_runs(const uint64_t *end, const int *decay, int n_runs, size_t lo, size_t hi,
                            uint64_t *s_end, int *s_decay) {
    int k = 0;
    for (int i = 0; i < n_runs; i++) {
        const size_t a = i ? end[i - 1] : 0, b = end[i];
        if (b <= lo || a >= hi) continue;
        s_end[k] = (b < hi ? b : hi) - lo;
        s_decay[k] = decay[i];
        k++;
    }
    return k;
}

extern "C" gdn_cuda_model *gdn_cuda_model_create(const gdn_param_table *t, int B, int T, gdn_cuda_precision p) {
    return gdn_cuda_model_create_sharded(t, B, T, p, 0, t->total, t->total);
}

extern "C" gdn_cuda_model *gdn_cuda_model_create_sharded(const gdn_param_table *t, int B, int T, gdn_cuda_precision p,
                                                         size_t lo, size_t hi, size_t padded) {
    if (B < 1 || T < 1) GDN_CUDA_DIE("model: batch %d x length %d (both must be >= 1)", B, T);
    if (!gdn_config_all_gdn(&t->cfg)) /* the kernels have the G rule only (model/mixer.h) */
        GDN_CUDA_DIE("model: mixers \"%s\" has layers other than G, which the CUDA backend does not "
                     "implement yet; use the cpu backend", gdn_config_mixers(&t->cfg));
    if (lo > hi || hi > t->total || padded < t->total)
        GDN_CUDA_DIE("model: optimizer shard [%zu, %zu) with buffers of %zu elements does not fit %zu parameters", lo,
                     hi, padded, t->total);
    if ((long long)B * T > 0x7fffffffLL / 64) GDN_CUDA_DIE("model: %d x %d tokens per micro-batch is too many", B, T);
    gdn_cuda_model *m = (gdn_cuda_model *)calloc(1, sizeof *m);
    if (!m) GDN_CUDA_DIE("out of host memory");
    m->t = t;
    m->cfg = t->cfg;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->p = p;
    m->lo = lo;
    m->hi = hi;
    m->padded = padded;
    m->dp = plan_delta(&m->cfg, B, T);
    m->L = (layer_acts *)calloc((size_t)m->cfg.n_layers, sizeof *m->L);
    uint64_t *end = (uint64_t *)malloc((size_t)t->n * sizeof *end);
    int *decay = (int *)malloc((size_t)t->n * sizeof *decay);
    uint64_t *s_end = (uint64_t *)malloc((size_t)t->n * sizeof *s_end);
    int *s_decay = (int *)malloc((size_t)t->n * sizeof *s_decay);
    m->act_off_h = (uint64_t *)malloc((size_t)t->n * sizeof *m->act_off_h);
    m->perm_h = (int *)malloc((size_t)m->N * sizeof(int));
    m->seg_start_h = (int *)malloc(((size_t)m->N + 1) * sizeof(int));
    m->seg_token_h = (int *)malloc((size_t)m->N * sizeof(int));
    if (!m->L || !end || !decay || !s_end || !s_decay || !m->act_off_h || !m->perm_h || !m->seg_start_h || !m->seg_token_h)
        GDN_CUDA_DIE("out of host memory");
    m->wact_n = build_runs(t, end, decay, m->act_off_h);
    m->n_runs = t->n;
    m->n_shard_runs = build_shard_runs(end, decay, m->n_runs, lo, hi, s_end, s_decay);

    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    m->blas = gdn_cuda_blas_create(m->stream);
    m->pbytes = params_layout(m, NULL);
    m->abytes = acts_layout(m, NULL);
    cudaError_t e1 = cudaMalloc((void **)&m->pbuf, m->pbytes);
    cudaError_t e2 = e1 == cudaSuccess ? cudaMalloc((void **)&m->abuf, m->abytes) : e1;
    if (e1 != cudaSuccess || e2 != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        GDN_CUDA_DIE("model: cannot allocate %.2f GiB for parameters/optimizer and %.2f GiB for activations "
                     "(B=%d, T=%d); the device has %.2f GiB free of %.2f GiB: use a smaller batch or sequence",
                     m->pbytes / 1073741824.0, m->abytes / 1073741824.0, B, T, free_b / 1073741824.0,
                     total_b / 1073741824.0);
    }
    params_layout(m, m->pbuf);
    acts_layout(m, m->abuf);
    GDN_CUDA_CHECK(cudaMemsetAsync(m->pbuf, 0, (size_t)((char *)m->run_end - m->pbuf), m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->run_end, end, (size_t)m->n_runs * sizeof *end, cudaMemcpyHostToDevice,
                                   m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->run_decay, decay, (size_t)m->n_runs * sizeof *decay, cudaMemcpyHostToDevice,
                                   m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->run_act, m->act_off_h, (size_t)m->n_runs * sizeof *m->act_off_h,
                                   cudaMemcpyHostToDevice, m->stream));
    if (m->n_shard_runs) {
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->shard_end, s_end, (size_t)m->n_shard_runs * sizeof *s_end,
                                       cudaMemcpyHostToDevice, m->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->shard_decay, s_decay, (size_t)m->n_shard_runs * sizeof *s_decay,
                                       cudaMemcpyHostToDevice, m->stream));
    }
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    free(end);
    free(decay);
    free(s_end);
    free(s_decay);
    return m;
}

extern "C" void gdn_cuda_model_free(gdn_cuda_model *m) {
    if (!m) return;
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    gdn_cuda_blas_free(m->blas);
    GDN_CUDA_CHECK(cudaFree(m->pbuf));
    GDN_CUDA_CHECK(cudaFree(m->abuf));
    if (m->sbuf) GDN_CUDA_CHECK(cudaFree(m->sbuf));
    if (m->prof_ev) {
        for (int i = 0; i < 2 * PROF_MAX; i++) GDN_CUDA_CHECK(cudaEventDestroy(m->prof_ev[i]));
        free(m->prof_ev);
    }
    GDN_CUDA_CHECK(cudaStreamDestroy(m->stream));
    free(m->L);
    free(m->act_off_h);
    free(m->perm_h);
    free(m->seg_start_h);
    free(m->seg_token_h);
    free(m);
}

extern "C" void gdn_cuda_model_memory(const gdn_cuda_model *m, size_t *param_bytes, size_t *act_bytes) {
    if (param_bytes) *param_bytes = m->pbytes;
    if (act_bytes) *act_bytes = m->abytes;
}

/* ---- parameters ------------------------------------------------------------------------------------- */
/* The bf16 copy of every tensor from the fp32 parameters (BF16 mode), on the model's stream. */
static void refresh_act(gdn_cuda_model *m) {
    if (m->wact)
        for (int i = 0; i < m->t->n; i++)
            gdn_cuda_to_act(GDN_CUDA_BF16, (char *)m->wact + m->act_off_h[i] * 2, m->params + m->t->p[i].offset,
                            m->t->p[i].numel, m->stream);
}

extern "C" void gdn_cuda_model_upload(gdn_cuda_model *m, const float *params, const float *adam_m,
                                      const float *adam_v) {
    const size_t bytes = m->t->total * sizeof(float), mbytes = (m->hi - m->lo) * sizeof(float);
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->params, params, bytes, cudaMemcpyHostToDevice, m->stream));
    if (adam_m) GDN_CUDA_CHECK(cudaMemcpyAsync(m->adam_m, adam_m, mbytes, cudaMemcpyHostToDevice, m->stream));
    else GDN_CUDA_CHECK(cudaMemsetAsync(m->adam_m, 0, mbytes, m->stream));
    if (adam_v) GDN_CUDA_CHECK(cudaMemcpyAsync(m->adam_v, adam_v, mbytes, cudaMemcpyHostToDevice, m->stream));
    else GDN_CUDA_CHECK(cudaMemsetAsync(m->adam_v, 0, mbytes, m->stream));
    refresh_act(m);
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_download(gdn_cuda_model *m, float *params, float *adam_m, float *adam_v) {
    const size_t bytes = m->t->total * sizeof(float), mbytes = (m->hi - m->lo) * sizeof(float);
    if (params) GDN_CUDA_CHECK(cudaMemcpyAsync(params, m->params, bytes, cudaMemcpyDeviceToHost, m->stream));
    if (adam_m) GDN_CUDA_CHECK(cudaMemcpyAsync(adam_m, m->adam_m, mbytes, cudaMemcpyDeviceToHost, m->stream));
    if (adam_v) GDN_CUDA_CHECK(cudaMemcpyAsync(adam_v, m->adam_v, mbytes, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_download_grads(gdn_cuda_model *m, float *grads) {
    GDN_CUDA_CHECK(cudaMemcpyAsync(grads, m->grads, m->t->total * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_zero_grads(gdn_cuda_model *m) {
    GDN_CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->padded * sizeof(float), m->stream));
}

/* ---- sequence parallelism ------------------------------------------------------------------------- */
/* The boundary buffers of every layer (allocation 3, made once). */
static void seq_alloc(gdn_cuda_model *m) {
    const gdn_config *c = &m->cfg;
    const delta_plan *d = &m->dp;
    const size_t W1 = (size_t)c->conv_width - 1, B = (size_t)m->B, es = gdn_cuda_act_bytes(m->p);
    const size_t HK = (size_t)c->n_heads * c->head_dim, HV = (size_t)c->n_heads * gdn_config_head_v(c);
    m->n_state = B * (size_t)d->shape.H * (size_t)d->shape.K * (size_t)d->shape.V;
    m->n_halo[0] = m->n_halo[1] = B * W1 * HK;
    m->n_halo[2] = B * W1 * HV;
    const size_t halo_bytes = (m->n_halo[0] + m->n_halo[1] + m->n_halo[2]) * es;
    for (int pass = 0; pass < 2; pass++) { /* count, then carve */
        size_t used = 0;
        char *base = pass ? m->sbuf : NULL;
        for (int l = 0; l < c->n_layers; l++) {
            layer_acts *L = &m->L[l];
            void **sets[4] = {L->halo, L->tail, L->dhalo, L->dtail};
            for (int k = 0; k < 4; k++)
                for (int i = 0; i < 3; i++) sets[k][i] = take(base, &used, m->n_halo[i] * es);
            L->S_in = (float *)take(base, &used, m->n_state * sizeof(float));
            L->S_out = (float *)take(base, &used, m->n_state * sizeof(float));
            L->dS_in = (float *)take(base, &used, m->n_state * sizeof(float));
        }
        m->dS_out = (float *)take(base, &used, m->n_state * sizeof(float));
        if (!pass && cudaMalloc((void **)&m->sbuf, used) != cudaSuccess) {
            (void)cudaGetLastError();
            GDN_CUDA_DIE("sequence parallelism: cannot allocate %.2f GiB for the boundary states and halos "
                         "(%d layers x (3 states of %zu floats + 4 x %zu bytes of halos))",
                         used / 1073741824.0, c->n_layers, m->n_state, halo_bytes);
        }
    }
}

extern "C" void gdn_cuda_model_set_seq_hooks(gdn_cuda_model *m, const gdn_cuda_seq_hooks *hooks) {
    if (!hooks) {
        m->seq = 0;
        return;
    }
    if (m->T < m->cfg.conv_width - 1)
        GDN_CUDA_DIE("sequence parallelism: segments of %d tokens are shorter than the convolution halo (%d rows)",
                     m->T, m->cfg.conv_width - 1);
    if (!hooks->fwd_halo || !hooks->fwd_state_in || !hooks->fwd_state_out || !hooks->bwd_state_out ||
        !hooks->bwd_state_in || !hooks->bwd_halo)
        GDN_CUDA_DIE("sequence parallelism: every hook must be set");
    if (!m->sbuf) seq_alloc(m);
    m->hooks = *hooks;
    m->seq = 1;
}

/* ---- profiler --------------------------------------------------------------------------------------------- */
static void prof_begin(gdn_cuda_model *m, int cat, int line, const char *call) {
    if (!m->prof_on || m->prof_n >= PROF_MAX) return;
    m->prof_line[m->prof_n] = line;
    m->prof_call[m->prof_n] = call;
    GDN_CUDA_CHECK(cudaEventRecord(m->prof_ev[2 * m->prof_n], m->stream));
    m->prof_cat[m->prof_n] = (unsigned char)cat;
    m->prof_ph[m->prof_n] = (unsigned char)m->prof_phase;
}
static void prof_end(gdn_cuda_model *m) {
    if (!m->prof_on || m->prof_n >= PROF_MAX) return;
    GDN_CUDA_CHECK(cudaEventRecord(m->prof_ev[2 * m->prof_n + 1], m->stream));
    m->prof_n++;
}
#define PF(cat, ...)             \
    do {                         \
        prof_begin(m, cat, __LINE__, #__VA_ARGS__); \
        __VA_ARGS__;             \
        prof_end(m);             \
    } while (0)

/* ---- forward ------------------------------------------------------------------------------------------ */
/* The GEMM copy of the parameter tensor at offset off (bf16 copy, or the fp32 master). */
static const void *wgt(const gdn_cuda_model *m, size_t off) {
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

static float beta_scale(const gdn_config *c) { return c->allow_neg_eigval ? 2.0f : 1.0f; }

/* The delta rule forward of layer l: o from q, k, v, g, beta (and the entering state from the
 * previous segment under sequence parallelism). */
static void delta_forward(gdn_cuda_model *m, const layer_acts *L, int l) {
    const gdn_config *c = &m->cfg;
    const int N = m->N, H = c->n_heads, K = c->head_dim, V = gdn_config_head_v(c);
    const float scale = (float)(1.0 / sqrt((double)K));
    const delta_plan *d = &m->dp;
    const void *q = L->q, *k = L->k, *v = L->v;
    const float *g = L->g, *beta = L->beta;
    void *o = L->o;
    if (d->packed) {
        if (!d->qk_shared) {
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pq, L->q, N, H, K, d->S, K, d->Kp, 0, m->stream);
                        gdn_cuda_heads_pack(m->p, m->pk, L->k, N, H, K, d->S, K, d->Kp, 0, m->stream));
            q = m->pq;
            k = m->pk;
        }
        if (!d->v_same) {
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pv, L->v, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream));
            v = m->pv;
            o = m->po;
        }
        PF(PR_PACK, gdn_cuda_heads_pack(FP32, L->pg, L->g, N, H, 1, d->S, 1, 1, 0, m->stream);
                    gdn_cuda_heads_pack(FP32, L->pbeta, L->beta, N, H, 1, d->S, 1, 1, 0, m->stream));
        g = L->pg;
        beta = L->pbeta;
    }
    void *S_in_ready = m->seq ? m->hooks.fwd_state_in(m->hooks.user, l, L->S_in, m->n_state) : NULL;
    gdn_cuda_delta_fwd_args da = {};
    da.in = gdn_cuda_delta_in{d->shape, m->p, q, k, v, g, beta, scale, m->seq ? L->S_in : NULL, m->delta_ws, m->stream};
    da.h0_ready = S_in_ready;
    da.o = o;
    da.ht = m->seq ? L->S_out : NULL;
    PF(PR_DELTA, gdn_cuda_delta_fwd(&da));
    if (m->seq) m->hooks.fwd_state_out(m->hooks.user, l, L->S_out, m->n_state);
    if (d->packed && !d->v_same)
        PF(PR_PACK, gdn_cuda_heads_unpack(m->p, L->o, m->po, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream));
}

/* Sequence parallelism, forward: this segment's last W-1 pre-convolution rows of q, k, v go to
 * the hooks, the previous segment's come back as the convolution halo. */
static void seq_halo_forward(gdn_cuda_model *m, const layer_acts *L, int l) {
    const int W1 = m->cfg.conv_width - 1, T = m->T;
    const size_t es = gdn_cuda_act_bytes(m->p);
    const void *src[3] = {L->qp, L->kp, L->vp};
    for (int i = 0; i < 3 && W1 > 0; i++) {
        const size_t row = m->n_halo[i] / ((size_t)m->B * W1) * es; /* one row of C elements */
        PF(PR_COPY, GDN_CUDA_CHECK(cudaMemcpy2DAsync(L->tail[i], W1 * row, (const char *)src[i] + (size_t)(T - W1) * row,
                                                     (size_t)T * row, W1 * row, (size_t)m->B,
                                                     cudaMemcpyDeviceToDevice, m->stream)));
    }
    m->hooks.fwd_halo(m->hooks.user, l, L->halo, L->tail, m->n_halo);
}

static void block_forward(gdn_cuda_model *m, int l) {
    const gdn_config *c = &m->cfg;
    const gdn_cuda_precision p = m->p;
    const int N = m->N, D = c->d_model, H = c->n_heads, K = c->head_dim, B = m->B, T = m->T;
    const int V = gdn_config_head_v(c), F = c->d_ff, W = c->conv_width, HK = H * K, HV = H * V;
    const gdn_layer_offsets *off = &m->t->layer[l];
    const layer_acts *L = &m->L[l];
    const float *P = m->params, eps = (float)c->norm_eps;
    const float *x = m->x + (size_t)l * N * D;
    float *xm = m->x_mid + (size_t)l * N * D, *xo = m->x + (size_t)(l + 1) * N * D;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream;

    void *h1 = m->hs;
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, h1, L->rstd1, x, P + off->attn_norm, N, D, eps, s));
    PF(PR_GEMM, gdn_cuda_linear_fwd(bl, p, p, L->qp, h1, wgt(m, off->q_proj), N, D, HK, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->kp, h1, wgt(m, off->k_proj), N, D, HK, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->vp, h1, wgt(m, off->v_proj), N, D, HV, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->zp, h1, wgt(m, off->g_proj), N, D, HV, 0.0f);
                gdn_cuda_linear_fwd(bl, p, FP32, L->ap, h1, wgt(m, off->a_proj), N, D, H, 0.0f);
                gdn_cuda_linear_fwd(bl, p, FP32, L->bp, h1, wgt(m, off->b_proj), N, D, H, 0.0f));

    if (m->seq) seq_halo_forward(m, L, l);
    const void *const *halo = m->seq ? (const void *const *)L->halo : NULL;
    void *tmp = m->dq1; /* backward scratch, free during the forward pass */
    PF(PR_CONV, gdn_cuda_conv_fwd(p, GDN_CUDA_CONV_SILU, tmp, L->qp, P + off->q_conv, halo ? halo[0] : NULL, B, T, HK, W, s));
    PF(PR_NORM, gdn_cuda_l2norm_fwd(p, L->q, L->rq, tmp, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_fwd(p, GDN_CUDA_CONV_SILU, tmp, L->kp, P + off->k_conv, halo ? halo[1] : NULL, B, T, HK, W, s));
    PF(PR_NORM, gdn_cuda_l2norm_fwd(p, L->k, L->rk, tmp, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_fwd(p, GDN_CUDA_CONV_SILU, L->v, L->vp, P + off->v_conv, halo ? halo[2] : NULL, B, T, HV, W, s));
    PF(PR_ACT, gdn_cuda_decay_gate_fwd(L->g, L->ap, P + off->A_log, P + off->dt_bias, N, H, s);
               gdn_cuda_beta_fwd(L->beta, L->bp, beta_scale(c), (size_t)N * H, s));

    delta_forward(m, L, l);

    PF(PR_NORM, gdn_cuda_gated_rmsnorm_fwd(p, L->y, L->rstd_o, L->o, L->zp, P + off->o_norm, N * H, V, eps, s));
    PF(PR_GEMM, gdn_cuda_linear_fwd_add(bl, p, FP32, xm, L->y, wgt(m, off->o_proj), x, N, HV, D));

    void *h2 = m->hs, *mm = m->dup; /* mm: backward scratch, free during the forward pass */
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, h2, L->rstd2, xm, P + off->mlp_norm, N, D, eps, s));
    PF(PR_GEMM, gdn_cuda_linear_fwd(bl, p, p, L->gp, h2, wgt(m, off->gate_proj), N, D, F, 0.0f);
                gdn_cuda_linear_fwd(bl, p, p, L->up, h2, wgt(m, off->up_proj), N, D, F, 0.0f));
    PF(PR_ACT, gdn_cuda_swiglu_fwd(p, mm, L->gp, L->up, (size_t)N * F, s));
    PF(PR_GEMM, gdn_cuda_linear_fwd_add(bl, p, FP32, xo, mm, wgt(m, off->down_proj), xm, N, F, D));
}

extern "C" double gdn_cuda_model_forward(gdn_cuda_model *m, const int *tokens, const int *targets, float grad_scale,
                                         int *n_valid) {
    const gdn_config *c = &m->cfg;
    const int N = m->N, D = c->d_model, nL = c->n_layers, Vv = c->vocab_size;
    for (int i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= Vv)
            GDN_CUDA_DIE("token id %d at position %d is outside the vocabulary [0, %d)", tokens[i], i, Vv);
        if (targets && targets[i] >= Vv)
            GDN_CUDA_DIE("cross-entropy: target %d of row %d is outside the vocabulary [0, %d); check that the "
                         "data was tokenised with the model's vocab_size", targets[i], i, Vv);
    }
    m->has_grad = 0;
    m->has_logits = 0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->tokens_d, tokens, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    m->prof_phase = 0;
    PF(PR_EMBED, gdn_cuda_embed_fwd(m->x, m->tokens_d, m->params + m->t->embed, N, D, m->stream));
    for (int l = 0; l < nL; l++) block_forward(m, l);
    const float *xf = m->x + (size_t)nL * N * D;
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(m->p, m->hf, m->rstdf, xf, m->params + m->t->final_norm, N, D,
                                     (float)c->norm_eps, m->stream));
    PF(PR_GEMM, gdn_cuda_linear_fwd(m->blas, m->p, m->p, m->logits, m->hf, wgt(m, m->t->lm_head), N, D, Vv, 0.0f));
    if (n_valid) *n_valid = 0;
    if (!targets) {
        GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
        m->has_logits = 1;
        return 0.0;
    }
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->targets_d, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    if (grad_scale != 0.0f) { /* the embedding backward's plan, while the GPU runs */
        m->n_seg = gdn_cuda_embed_plan(tokens, N, Vv, m->perm_h, m->seg_start_h, m->seg_token_h);
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->perm_d, m->perm_h, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, m->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->seg_start_d, m->seg_start_h, ((size_t)m->n_seg + 1) * sizeof(int),
                                       cudaMemcpyHostToDevice, m->stream));
        GDN_CUDA_CHECK(cudaMemcpyAsync(m->seg_token_d, m->seg_token_h, (size_t)m->n_seg * sizeof(int),
                                       cudaMemcpyHostToDevice, m->stream));
    }
    PF(PR_LOSS, gdn_cuda_cross_entropy(m->p, grad_scale != 0.0f ? m->logits : NULL, m->logits, m->targets_d, N, Vv,
                                       grad_scale, m->loss_d, m->nvalid_d, m->op_ws, m->stream));
    double loss = 0.0;
    int nv = 0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&loss, m->loss_d, sizeof loss, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaMemcpyAsync(&nv, m->nvalid_d, sizeof nv, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    if (n_valid) *n_valid = nv;
    m->has_grad = grad_scale != 0.0f;
    m->has_logits = !m->has_grad;
    return loss;
}

extern "C" void gdn_cuda_model_download_logits(gdn_cuda_model *m, float *logits) {
    if (!m->has_logits) GDN_CUDA_DIE("gdn_cuda_model_download_logits needs a forward pass run with grad_scale = 0");
    const size_t n = (size_t)m->N * m->cfg.vocab_size;
    if (m->p == FP32) {
        GDN_CUDA_CHECK(cudaMemcpy(logits, m->logits, n * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    /* widen bf16 on the host: a bf16 is the top half of a float */
    uint16_t *tmp = (uint16_t *)malloc(n * sizeof(uint16_t));
    if (!tmp) GDN_CUDA_DIE("out of host memory");
    GDN_CUDA_CHECK(cudaMemcpy(tmp, m->logits, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)tmp[i] << 16;
        memcpy(&logits[i], &u, sizeof u);
    }
    free(tmp);
}

/* ---- backward ------------------------------------------------------------------------------------------ */
/* The delta rule backward of layer l: dqn, dkn, dv (act), dg, dbeta from d_o (and the gradient of
 * the leaving state from the next segment under sequence parallelism). */
static void delta_backward(gdn_cuda_model *m, const layer_acts *L, int l) {
    const gdn_config *c = &m->cfg;
    const int N = m->N, H = c->n_heads, K = c->head_dim, V = gdn_config_head_v(c);
    const float scale = (float)(1.0 / sqrt((double)K));
    const delta_plan *d = &m->dp;
    const void *q = L->q, *k = L->k, *v = L->v, *d_o = m->d_o;
    const float *g = L->g, *beta = L->beta;
    void *dq = m->dqn, *dk = m->dkn, *dv = m->dv;
    float *dg = m->dg, *dbeta = m->dbeta;
    if (d->packed) {
        if (!d->qk_shared) { /* repacked: cheaper than keeping the padded copies of every layer */
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pq, L->q, N, H, K, d->S, K, d->Kp, 0, m->stream);
                        gdn_cuda_heads_pack(m->p, m->pk, L->k, N, H, K, d->S, K, d->Kp, 0, m->stream));
            q = m->pq;
            k = m->pk;
            dq = m->pdq;
            dk = m->pdk;
        }
        if (!d->v_same) {
            PF(PR_PACK, gdn_cuda_heads_pack(m->p, m->pv, L->v, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream);
                        gdn_cuda_heads_pack(m->p, m->po, m->d_o, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream));
            v = m->pv;
            d_o = m->po;
            dv = m->pdv;
        }
        g = L->pg; /* packed gates: saved by the forward */
        beta = L->pbeta;
        dg = m->pdg;
        dbeta = m->pdbeta;
    }
    void *dS_out_ready = m->seq ? m->hooks.bwd_state_out(m->hooks.user, l, m->dS_out, m->n_state) : NULL;
    gdn_cuda_delta_bwd_args da = {};
    da.in = gdn_cuda_delta_in{d->shape, m->p, q, k, v, g, beta, scale, m->seq ? L->S_in : NULL, m->delta_ws, m->stream};
    da.d_o = d_o;
    da.dht = m->seq ? m->dS_out : NULL;
    da.dht_ready = dS_out_ready;
    da.dq = dq;
    da.dk = dk;
    da.dv = dv;
    da.dg = dg;
    da.dbeta = dbeta;
    da.dh0 = m->seq ? L->dS_in : NULL;
    PF(PR_DELTA, gdn_cuda_delta_bwd(&da));
    if (m->seq) m->hooks.bwd_state_in(m->hooks.user, l, L->dS_in, m->n_state);
    if (!d->packed) return;
    PF(PR_PACK, if (!d->qk_shared) {
                    gdn_cuda_heads_unpack(m->p, m->dqn, m->pdq, N, H, K, d->S, K, d->Kp, 0, m->stream);
                    gdn_cuda_heads_unpack(m->p, m->dkn, m->pdk, N, H, K, d->S, K, d->Kp, 0, m->stream);
                }
                if (!d->v_same) gdn_cuda_heads_unpack(m->p, m->dv, m->pdv, N, H, V, d->S, d->Vs, d->Vp, 1, m->stream);
                gdn_cuda_heads_unpack(FP32, m->dg, m->pdg, N, H, 1, d->S, 1, 1, 0, m->stream);
                gdn_cuda_heads_unpack(FP32, m->dbeta, m->pdbeta, N, H, 1, d->S, 1, 1, 0, m->stream));
}

/* Sequence parallelism, backward: the gradients of the halo rows go to the hooks, and those of
 * this segment's tail rows (from the next segment) are added to dqp, dkp, dvp. */
static void seq_halo_backward(gdn_cuda_model *m, const layer_acts *L, int l, void *const dx[3]) {
    const int W1 = m->cfg.conv_width - 1;
    m->hooks.bwd_halo(m->hooks.user, l, L->dtail, L->dhalo, m->n_halo);
    for (int i = 0; i < 3 && W1 > 0; i++) {
        const size_t C = m->n_halo[i] / ((size_t)m->B * W1), es = gdn_cuda_act_bytes(m->p);
        PF(PR_COPY, gdn_cuda_add_strided(m->p, (char *)dx[i] + (size_t)(m->T - W1) * C * es, (size_t)m->T * C,
                                         L->dtail[i], (size_t)W1 * C, m->B, m->stream));
    }
}

static void block_backward(gdn_cuda_model *m, int l) {
    const gdn_config *c = &m->cfg;
    const gdn_cuda_precision p = m->p;
    const int N = m->N, D = c->d_model, H = c->n_heads, K = c->head_dim, B = m->B, T = m->T;
    const int V = gdn_config_head_v(c), F = c->d_ff, W = c->conv_width, HK = H * K, HV = H * V;
    const gdn_layer_offsets *off = &m->t->layer[l];
    const layer_acts *L = &m->L[l];
    const float *P = m->params;
    float *G = m->grads;
    const float *x = m->x + (size_t)l * N * D, *xm = m->x_mid + (size_t)l * N * D;
    gdn_cuda_blas *bl = m->blas;
    void *s = m->stream, *ws = m->op_ws;
    const void *dres = m->dx_act ? m->dx_act : (const void *)m->dx; /* the residual gradient as act */

    /* MLP: dx holds dL/dx_in[l+1] = dL/dx_mid through the residual. mm = silu(gp) up and h2 are
     * recomputed (bitwise as in the forward) into scratch. */
    void *mm = m->dup, *hs = m->hs;
    PF(PR_ACT, gdn_cuda_swiglu_fwd(p, mm, L->gp, L->up, (size_t)N * F, s));
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(bl, p, FP32, m->dm, dres, wgt(m, off->down_proj), N, F, D, 0.0f);
                gdn_cuda_linear_bwd_dw(bl, p, G + off->down_proj, dres, mm, N, F, D));
    PF(PR_ACT, gdn_cuda_swiglu_bwd(p, m->dgp, m->dup, m->dm, L->gp, L->up, (size_t)N * F, s));
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, hs, L->rstd2, xm, P + off->mlp_norm, N, D, (float)c->norm_eps, s));
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(bl, p, FP32, m->dh, m->dgp, wgt(m, off->gate_proj), N, D, F, 0.0f);
                gdn_cuda_linear_bwd_dw(bl, p, G + off->gate_proj, m->dgp, hs, N, D, F);
                gdn_cuda_linear_bwd_dx(bl, p, FP32, m->dh, m->dup, wgt(m, off->up_proj), N, D, F, 1.0f);
                gdn_cuda_linear_bwd_dw(bl, p, G + off->up_proj, m->dup, hs, N, D, F));
    PF(PR_NORM, gdn_cuda_rmsnorm_bwd(p, m->dx, 1, m->dx_act, G + off->mlp_norm, m->dh, xm, P + off->mlp_norm,
                                     L->rstd2, N, D, ws, s));

    /* Mixer output: o_proj, gated norm. */
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(bl, p, FP32, m->dyo, dres, wgt(m, off->o_proj), N, HV, D, 0.0f);
                gdn_cuda_linear_bwd_dw(bl, p, G + off->o_proj, dres, L->y, N, HV, D));
    PF(PR_NORM, gdn_cuda_gated_rmsnorm_bwd(p, m->d_o, m->dz, G + off->o_norm, m->dyo, L->o, L->zp, P + off->o_norm,
                                           L->rstd_o, N * H, V, ws, s));

    delta_backward(m, L, l);

    /* q, k: L2 norm, then SiLU and convolution (one op, recomputing the convolution); v: SiLU and
     * convolution; then the gates. */
    const int sq = m->seq;
    PF(PR_NORM, gdn_cuda_l2norm_bwd(p, m->dq1, m->dqn, L->q, L->rq, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_bwd(p, GDN_CUDA_CONV_SILU, m->dqn, G + off->q_conv, sq ? L->dhalo[0] : NULL, m->dq1,
                                  L->qp, P + off->q_conv, sq ? L->halo[0] : NULL, B, T, HK, W, ws, s));
    PF(PR_NORM, gdn_cuda_l2norm_bwd(p, m->dk1, m->dkn, L->k, L->rk, N * H, K, s));
    PF(PR_CONV, gdn_cuda_conv_bwd(p, GDN_CUDA_CONV_SILU, m->dkn, G + off->k_conv, sq ? L->dhalo[1] : NULL, m->dk1,
                                  L->kp, P + off->k_conv, sq ? L->halo[1] : NULL, B, T, HK, W, ws, s));
    PF(PR_CONV, gdn_cuda_conv_bwd(p, GDN_CUDA_CONV_SILU, m->dvp, G + off->v_conv, sq ? L->dhalo[2] : NULL, m->dv,
                                  L->vp, P + off->v_conv, sq ? L->halo[2] : NULL, B, T, HV, W, ws, s));
    if (sq) {
        void *const dx[3] = {m->dqn, m->dkn, m->dvp};
        seq_halo_backward(m, L, l, dx);
    }
    PF(PR_ACT, gdn_cuda_decay_gate_bwd(p, m->dap, G + off->A_log, G + off->dt_bias, m->dg, L->ap, P + off->A_log,
                                       P + off->dt_bias, N, H, ws, s);
               gdn_cuda_beta_bwd(p, m->dbp, m->dbeta, L->beta, beta_scale(c), (size_t)N * H, s));

    /* The six projections of h1 (input gradients summed into dh), then the block's input norm. */
    struct { const void *dy; size_t w; int out; } proj[6] = {
        {m->dqn, off->q_proj, HK}, {m->dkn, off->k_proj, HK}, {m->dvp, off->v_proj, HV},
        {m->dz, off->g_proj, HV},  {m->dap, off->a_proj, H},  {m->dbp, off->b_proj, H},
    };
    PF(PR_NORM, gdn_cuda_rmsnorm_fwd(p, hs, L->rstd1, x, P + off->attn_norm, N, D, (float)c->norm_eps, s));
    for (int i = 0; i < 6; i++)
        PF(PR_GEMM, gdn_cuda_linear_bwd_dx(bl, p, FP32, m->dh, proj[i].dy, wgt(m, proj[i].w), N, D, proj[i].out,
                                           i ? 1.0f : 0.0f);
                    gdn_cuda_linear_bwd_dw(bl, p, G + proj[i].w, proj[i].dy, hs, N, D, proj[i].out));
    PF(PR_NORM, gdn_cuda_rmsnorm_bwd(p, m->dx, 1, m->dx_act, G + off->attn_norm, m->dh, x, P + off->attn_norm,
                                     L->rstd1, N, D, ws, s));
}

/* Where block l's tensors start in the flat buffer (the table adds a block's tensors together). */
static size_t layer_start(const gdn_param_table *t, int l) {
    const gdn_layer_offsets *o = &t->layer[l];
    const size_t f[] = {o->attn_norm, o->q_proj, o->k_proj, o->v_proj, o->g_proj, o->a_proj, o->b_proj,
                        o->q_conv, o->k_conv, o->v_conv, o->A_log, o->dt_bias, o->o_norm, o->o_proj,
                        o->mlp_norm, o->gate_proj, o->up_proj, o->down_proj};
    size_t lo = f[0];
    for (size_t i = 1; i < sizeof f / sizeof f[0]; i++) lo = f[i] < lo ? f[i] : lo;
    return lo;
}

/* Whether the table is laid out as embedding | block 0 | ... | block L-1 | final norm [| head],
 * which the backward's completed ranges assume (otherwise all of it is reported at the end). */
static int grads_in_order(const gdn_param_table *t) {
    size_t prev = 0;
    if (t->embed != 0) return 0;
    for (int l = 0; l < t->cfg.n_layers; l++) {
        size_t s = layer_start(t, l);
        if (s <= prev) return 0;
        prev = s;
    }
    return t->final_norm > prev && (t->lm_head == t->embed || t->lm_head > t->final_norm);
}

extern "C" void gdn_cuda_model_backward(gdn_cuda_model *m) { gdn_cuda_model_backward_ready(m, NULL, NULL); }

extern "C" void *gdn_cuda_model_stream(gdn_cuda_model *m) { return (void *)m->stream; }

extern "C" void gdn_cuda_model_backward_ready(gdn_cuda_model *m, gdn_cuda_grads_ready_fn ready, void *ctx) {
    if (!m->has_grad) GDN_CUDA_DIE("gdn_cuda_model_backward needs a forward pass run with targets and grad_scale != 0");
    const gdn_config *c = &m->cfg;
    const int N = m->N, D = c->d_model;
    const gdn_param_table *t = m->t;
    const int ordered = grads_in_order(t);
    size_t done = t->total; /* [done, total) is complete */
    m->prof_phase = 1;
    PF(PR_GEMM, gdn_cuda_linear_bwd_dx(m->blas, m->p, FP32, m->dh, m->logits, wgt(m, m->t->lm_head), N, D,
                                       c->vocab_size, 0.0f);
                gdn_cuda_linear_bwd_dw(m->blas, m->p, m->grads + m->t->lm_head, m->logits, m->hf, N, D, c->vocab_size));
    PF(PR_NORM, gdn_cuda_rmsnorm_bwd(m->p, m->dx, 0, m->dx_act, m->grads + m->t->final_norm, m->dh,
                                     m->x + (size_t)c->n_layers * N * D, m->params + m->t->final_norm, m->rstdf, N, D,
                                     m->op_ws, m->stream));
    /* a tied head is the embedding, which the last op adds to: only the final norm (and an untied
     * head) are complete here */
    if (ready && ordered) {
        ready(ctx, m->grads, t->final_norm, done);
        done = t->final_norm;
    }
    for (int l = c->n_layers - 1; l >= 0; l--) {
        block_backward(m, l);
        if (ready && ordered) {
            ready(ctx, m->grads, layer_start(t, l), done);
            done = layer_start(t, l);
        }
    }
    PF(PR_EMBED, gdn_cuda_embed_bwd(m->grads + m->t->embed, m->perm_d, m->seg_start_d, m->seg_token_d, m->n_seg,
                                    m->dx, D, m->stream));
    if (ready) ready(ctx, m->grads, 0, done);
    m->has_grad = 0;
}

/* ---- optimizer ------------------------------------------------------------------------------------------ */
extern "C" double gdn_cuda_model_adamw_step(gdn_cuda_model *m, const gdn_adamw_hparams *h, int64_t step,
                                            double grad_clip) {
    const size_t n = m->t->total;
    if (m->lo != 0 || m->hi != n)
        GDN_CUDA_DIE("gdn_cuda_model_adamw_step on a model with a sharded optimizer state: use "
                     "gdn_cuda_model_adamw_shard");
    m->prof_phase = 2;
    PF(PR_OPT, gdn_cuda_grad_norm(m->gnorm_d, m->grads, n, m->op_ws, m->stream);
               gdn_cuda_adamw(m->params, m->grads, m->adam_m, m->adam_v, m->wact, n, m->run_end, m->run_decay,
                              m->run_act, m->n_runs, h, step, m->gnorm_d, grad_clip, m->stream));
    double gnorm = 0.0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&gnorm, m->gnorm_d, sizeof gnorm, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return gnorm;
}

/* ---- ZeRO-1: the optimizer step of a shard ------------------------------------------------------------- */
extern "C" float *gdn_cuda_model_params(gdn_cuda_model *m) { return m->params; }

extern "C" float *gdn_cuda_model_grads(gdn_cuda_model *m) { return m->grads; }

extern "C" double gdn_cuda_model_grad_sumsq(gdn_cuda_model *m) {
    gdn_cuda_grad_sumsq(m->gnorm_d, m->grads + m->lo, m->hi - m->lo, m->op_ws, m->stream);
    double s = 0.0;
    GDN_CUDA_CHECK(cudaMemcpyAsync(&s, m->gnorm_d, sizeof s, cudaMemcpyDeviceToHost, m->stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return s;
}

extern "C" void gdn_cuda_model_adamw_shard(gdn_cuda_model *m, const gdn_adamw_hparams *h, int64_t step,
                                           double gnorm, double grad_clip) {
    /* the kernel reads the norm from the device, as gdn_cuda_model_adamw_step's */
    GDN_CUDA_CHECK(cudaMemcpyAsync(m->gnorm_d, &gnorm, sizeof gnorm, cudaMemcpyHostToDevice, m->stream));
    gdn_cuda_adamw(m->params + m->lo, m->grads + m->lo, m->adam_m, m->adam_v, NULL, m->hi - m->lo, m->shard_end,
                   m->shard_decay, NULL, m->n_shard_runs, h, step, m->gnorm_d, grad_clip, m->stream);
    GDN_CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

extern "C" void gdn_cuda_model_params_changed(gdn_cuda_model *m) { refresh_act(m); }

/* ---- benchmark -------------------------------------------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

extern "C" void gdn_cuda_model_bench(const gdn_param_table *t, const float *params, size_t matmul_params, int B,
                                     int T, gdn_cuda_precision p, int warmup, int repeats, gdn_cuda_step_bench *out) {
    if (repeats < 1) GDN_CUDA_DIE("benchmark: repeats must be >= 1");
    memset(out, 0, sizeof *out);
    gdn_cuda_model *m = gdn_cuda_model_create(t, B, T, p);
    gdn_cuda_model_upload(m, params, NULL, NULL);
    const int N = B * T, Vv = t->cfg.vocab_size;
    int *tok = (int *)malloc((size_t)N * sizeof(int)), *tgt = (int *)malloc((size_t)N * sizeof(int));
    double *ts = (double *)malloc((size_t)repeats * 4 * sizeof(double));
    if (!tok || !tgt || !ts) GDN_CUDA_DIE("out of host memory");
    unsigned long long st = 12345;
    for (int i = 0; i < N; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (int)((st >> 33) % (unsigned long long)Vv);
    }
    for (int i = 0; i < N; i++) tgt[i] = (i % T == T - 1) ? -1 : tok[i + 1];
    gdn_adamw_hparams h = {1e-4, 0.9, 0.95, 1e-8, 0.1};
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) GDN_CUDA_CHECK(cudaEventCreate(&ev[i]));
    double *t_step = ts, *t_fwd = ts + repeats, *t_bwd = ts + 2 * repeats, *t_opt = ts + 3 * repeats;
    for (int r = -warmup; r < repeats; r++) {
        const double t0 = now_s();
        int nv = 0;
        GDN_CUDA_CHECK(cudaEventRecord(ev[0], m->stream));
        gdn_cuda_model_zero_grads(m);
        const double loss = gdn_cuda_model_forward(m, tok, tgt, 1.0f / (float)N, &nv);
        GDN_CUDA_CHECK(cudaEventRecord(ev[1], m->stream));
        gdn_cuda_model_backward(m);
        GDN_CUDA_CHECK(cudaEventRecord(ev[2], m->stream));
        gdn_cuda_model_adamw_step(m, &h, r + warmup + 1, 1.0);
        GDN_CUDA_CHECK(cudaEventRecord(ev[3], m->stream));
        GDN_CUDA_CHECK(cudaEventSynchronize(ev[3]));
        const double t1 = now_s();
        if (r < 0) continue;
        float a, b, c;
        GDN_CUDA_CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
        GDN_CUDA_CHECK(cudaEventElapsedTime(&b, ev[1], ev[2]));
        GDN_CUDA_CHECK(cudaEventElapsedTime(&c, ev[2], ev[3]));
        t_step[r] = (t1 - t0) * 1e3;
        t_fwd[r] = a;
        t_bwd[r] = b;
        t_opt[r] = c;
        if (r == 0) out->first_loss = loss / (nv ? nv : 1);
        out->last_loss = loss / (nv ? nv : 1);
    }
    /* one more step with events around every launch: where the time goes */
    m->prof_ev = (cudaEvent_t *)malloc(2 * PROF_MAX * sizeof(cudaEvent_t));
    if (!m->prof_ev) GDN_CUDA_DIE("out of host memory");
    for (int i = 0; i < 2 * PROF_MAX; i++) GDN_CUDA_CHECK(cudaEventCreate(&m->prof_ev[i]));
    m->prof_on = 1;
    m->prof_n = 0;
    gdn_cuda_model_zero_grads(m);
    gdn_cuda_model_forward(m, tok, tgt, 1.0f / (float)N, NULL);
    gdn_cuda_model_backward(m);
    gdn_cuda_model_adamw_step(m, &h, warmup + repeats + 1, 1.0);
    m->prof_on = 0;
    double cat_ms[3][PR_N];
    memset(cat_ms, 0, sizeof cat_ms);
    for (int i = 0; i < m->prof_n; i++) {
        float ms = 0.0f;
        GDN_CUDA_CHECK(cudaEventElapsedTime(&ms, m->prof_ev[2 * i], m->prof_ev[2 * i + 1]));
        cat_ms[m->prof_ph[i]][m->prof_cat[i]] += ms;
    }
    int len = snprintf(out->breakdown, sizeof out->breakdown, "%-10s %9s %9s %9s\n", "", "forward", "backward", "optim");
    for (int c = 0; c < PR_N && len < (int)sizeof out->breakdown; c++)
        len += snprintf(out->breakdown + len, sizeof out->breakdown - (size_t)len, "%-10s %9.2f %9.2f %9.2f\n",
                        prof_names[c], cat_ms[0][c], cat_ms[1][c], cat_ms[2][c]);
    /* the launch sites (source lines of this file) that take the most time, summed over layers */
    enum { SITES = 256 };
    int site_line[SITES], nsite = 0;
    const char *site_call[SITES];
    double site_ms[SITES];
    for (int i = 0; i < m->prof_n; i++) {
        float ms = 0.0f;
        GDN_CUDA_CHECK(cudaEventElapsedTime(&ms, m->prof_ev[2 * i], m->prof_ev[2 * i + 1]));
        int j = 0;
        while (j < nsite && site_line[j] != m->prof_line[i]) j++;
        if (j == nsite) {
            if (nsite == SITES) continue;
            site_line[nsite] = m->prof_line[i];
            site_call[nsite] = m->prof_call[i];
            site_ms[nsite++] = 0.0;
        }
        site_ms[j] += ms;
    }
    if (len < (int)sizeof out->breakdown)
        len += snprintf(out->breakdown + len, sizeof out->breakdown - (size_t)len,
                        "top launch sites (ms per step; model_cuda.cu line, first call)\n");
    for (int k = 0; k < 16 && k < nsite && len < (int)sizeof out->breakdown; k++) {
        int best = k;
        for (int j = k + 1; j < nsite; j++)
            if (site_ms[j] > site_ms[best]) best = j;
        const double tm = site_ms[best];
        const int tl = site_line[best];
        const char *tc = site_call[best];
        site_ms[best] = site_ms[k];
        site_line[best] = site_line[k];
        site_call[best] = site_call[k];
        site_ms[k] = tm;
        site_line[k] = tl;
        site_call[k] = tc;
        const int name_len = (int)strcspn(tc, "(");
        len += snprintf(out->breakdown + len, sizeof out->breakdown - (size_t)len, "  %7.2f  line %4d  %.*s\n", tm,
                        tl, name_len < 48 ? name_len : 48, tc);
    }
    out->gemm_ms = cat_ms[0][PR_GEMM] + cat_ms[1][PR_GEMM];
    out->step_ms = median(t_step, repeats);
    out->fwd_ms = median(t_fwd, repeats);
    out->bwd_ms = median(t_bwd, repeats);
    out->opt_ms = median(t_opt, repeats);
    out->tokens_per_s = (double)N / (out->step_ms * 1e-3);
    out->matmul_params = matmul_params;
    out->mfu = 6.0 * (double)matmul_params * out->tokens_per_s / 701e12;
    gdn_cuda_model_memory(m, &out->param_bytes, &out->act_bytes);
    size_t free_b = 0, total_b = 0;
    GDN_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    out->device_used = total_b - free_b;
    out->device_total = total_b;
    const gdn_delta_shape shape = m->dp.shape;
    for (int i = 0; i < 4; i++) GDN_CUDA_CHECK(cudaEventDestroy(ev[i]));
    gdn_cuda_model_free(m);
    free(tok);
    free(tgt);
    free(ts);
    gdn_cuda_delta_timing tm;
    gdn_cuda_delta_time(&shape, p, 2, repeats < 5 ? 5 : repeats, &tm);
    out->delta_ms = tm.fwdbwd_ms * t->cfg.n_layers;
}
