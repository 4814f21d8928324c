/* Sequence-parallel hooks over a gdn_comm group: halos and states passed between neighbours,
 * or affine maps all-gathered and folded (see seqpar.h). */
#include "comm/seqpar.h"

#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/mixer.h"

/* After the model headers: OpenBLAS's cblas.h pulls in <complex.h>, whose macro I would clash
 * with parameters named I in model/cpu/ops_cpu_decl.h. */
#include <cblas.h>

/* Message tags: layer * TAG_KINDS + kind. */
enum { TAG_HALO, TAG_STATE, TAG_DHALO, TAG_DSTATE, TAG_KINDS };

struct gdn_seqpar {
    gdn_comm *c;
    gdn_sp_exchange mode;
    int L, B, T, H, K, V, Wm1, HK, HV;
    int first_delta, last_delta; /* the delta-rule layers where a pass starts its sends (-1: none) */
    size_t n_state, n_map, n_halo; /* B*H*K*V, B*H*K*K, B*(W-1)*(2HK+HV) */
    /* PASS: per-layer send buffers (the model's buffers change before the send completes) */
    float *send_halo, *send_state, *send_dhalo, *send_dstate; /* [L][n_halo] or [L][n_state] */
    float *recv_halo;                                         /* [n_halo] */
    /* GATHER: per-layer gathered maps [L][sp][M | H], this rank's map and E */
    float *maps, *my_map, *my_E, *all_E, *tmp; /* tmp [n_state] */
    /* attention layers: C = n_kv_heads * attn_head_dim; n_kv = B*T*C, one segment's keys (or
     * values); kv [sp][k | v] of every segment, gathered (forward) or reduced (backward) */
    int C;
    size_t n_kv;
    float *kv;
    int64_t *docs; /* [sp][B]: every segment's last document start per row */
};

int gdn_sp_exchange_parse(const char *name, gdn_sp_exchange *out) {
    if (!strcmp(name, "pass")) *out = GDN_SP_PASS;
    else if (!strcmp(name, "gather")) *out = GDN_SP_GATHER;
    else return -1;
    return 0;
}

const char *gdn_sp_exchange_name(gdn_sp_exchange mode) { return mode == GDN_SP_PASS ? "pass" : "gather"; }

uint64_t gdn_seqpar_bytes(const gdn_config *cfg, int B, int T_seg, int sp, gdn_sp_exchange mode,
                          int with_backward) {
    if (sp <= 1) return 0;
    /* attention layers: this rank's keys and values into the all-gather; backward the whole
     * reduce-scatter input, the gradients of every segment's (zeros for the later ones) */
    const uint64_t n_attn = (uint64_t)gdn_config_count_mixer(cfg, GDN_MIXER_A);
    const uint64_t kv = 2 * (uint64_t)B * (uint64_t)T_seg * (uint64_t)gdn_config_kv_heads(cfg) *
                        (uint64_t)gdn_config_attn_dim(cfg);
    const uint64_t attn = n_attn * (kv + (with_backward ? (uint64_t)sp * kv : 0));
    const uint64_t H = (uint64_t)cfg->n_heads, K = (uint64_t)cfg->head_dim;
    const uint64_t V = (uint64_t)gdn_config_head_v(cfg);
    const uint64_t halo = (uint64_t)B * (uint64_t)(cfg->conv_width - 1) * H * (2 * K + V);
    const uint64_t state = (uint64_t)B * H * K * V, map = (uint64_t)B * H * K * (K + V);
    /* Point-to-point traffic goes forward to the next rank and backward to the previous one:
     * only a middle rank (sp > 2) sends both ways; with sp = 2 the first rank sends the forward
     * part, the second the backward part. */
    const uint64_t p2p_fwd = mode == GDN_SP_PASS ? halo + state : halo, p2p_bwd = p2p_fwd;
    const uint64_t gathered = mode == GDN_SP_PASS ? 0 : map + (with_backward ? state : 0);
    uint64_t p2p = with_backward ? (sp > 2 ? p2p_fwd + p2p_bwd : p2p_fwd) : p2p_fwd;
    /* documents: each segment's last start per row, once per forward pass (B int64) */
    return 4 * (((uint64_t)cfg->n_layers - n_attn) * (p2p + gathered) + attn) + 8 * (uint64_t)B;
}

static float *alloc_f(size_t n) { return GDN_CALLOC(n ? n : 1, sizeof(float)); }

gdn_seqpar *gdn_seqpar_create(gdn_comm *c, const gdn_config *cfg, int B, int T_seg,
                              gdn_sp_exchange mode) {
    if (T_seg < cfg->conv_width - 1)
        GDN_DIE("sequence parallelism needs at least conv_width - 1 = %d tokens per rank, got %d: use a "
                "smaller sp or a longer seq_len", cfg->conv_width - 1, T_seg);
    gdn_seqpar *s = GDN_CALLOC(1, sizeof *s);
    s->c = c;
    s->mode = mode;
    s->L = cfg->n_layers;
    s->first_delta = s->last_delta = -1;
    for (int l = 0; l < s->L; l++)
        if (gdn_mixer_get(gdn_config_layer_mixer(cfg, l))->is_delta) {
            if (s->first_delta < 0) s->first_delta = l;
            s->last_delta = l;
        }
    s->B = B;
    s->T = T_seg;
    s->H = cfg->n_heads;
    s->K = cfg->head_dim;
    s->V = gdn_config_head_v(cfg);
    s->Wm1 = cfg->conv_width - 1;
    s->HK = s->H * s->K;
    s->HV = s->H * s->V;
    s->n_state = (size_t)B * s->H * s->K * s->V;
    s->n_map = (size_t)B * s->H * s->K * s->K;
    s->n_halo = (size_t)B * s->Wm1 * (2 * (size_t)s->HK + s->HV);
    const size_t L = (size_t)s->L, sp = (size_t)c->sp;
    s->send_halo = alloc_f(L * s->n_halo);
    s->send_dhalo = alloc_f(L * s->n_halo);
    s->recv_halo = alloc_f(s->n_halo);
    s->tmp = alloc_f(s->n_state);
    if (mode == GDN_SP_PASS) {
        s->send_state = alloc_f(L * s->n_state);
        s->send_dstate = alloc_f(L * s->n_state);
    } else {
        s->maps = alloc_f(L * sp * (s->n_map + s->n_state));
        s->my_map = alloc_f(s->n_map + s->n_state);
        s->my_E = alloc_f(s->n_state);
        s->all_E = alloc_f(sp * s->n_state);
    }
    s->C = gdn_config_kv_heads(cfg) * gdn_config_attn_dim(cfg);
    s->n_kv = (size_t)B * (size_t)T_seg * (size_t)s->C;
    if (gdn_config_count_mixer(cfg, GDN_MIXER_A)) s->kv = alloc_f(sp * 2 * s->n_kv);
    s->docs = GDN_CALLOC(sp * (size_t)B, sizeof *s->docs);
    return s;
}

void gdn_seqpar_free(gdn_seqpar *s) {
    if (!s) return;
    gdn_wait_sends(s->c);
    float *all[] = {s->send_halo, s->send_dhalo, s->recv_halo, s->tmp, s->send_state,
                    s->send_dstate, s->maps, s->my_map, s->my_E, s->all_E, s->kv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free(s->docs);
    free(s);
}

/* The three [B,W-1,C] arrays of q, k, v in one message and back. */
static void halo_pack(const gdn_seqpar *s, float *dst, const float *const src[3]) {
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        size_t n = (size_t)s->B * s->Wm1 * (i < 2 ? s->HK : s->HV);
        memcpy(dst + off, src[i], n * sizeof(float));
        off += n;
    }
}

static void halo_unpack(const gdn_seqpar *s, float *const dst[3], const float *src) {
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        size_t n = (size_t)s->B * s->Wm1 * (i < 2 ? s->HK : s->HV);
        if (src) memcpy(dst[i], src + off, n * sizeof(float));
        else memset(dst[i], 0, n * sizeof(float));
        off += n;
    }
}

/* The model's halo and state sizes are the ones this object was made for. */
static void check_halo_sizes(const gdn_seqpar *s, const size_t n[3]) {
    for (int i = 0; i < 3; i++)
        if (n[i] != (size_t)s->B * s->Wm1 * (i < 2 ? s->HK : s->HV))
            GDN_DIE("sequence parallelism: the model's halo %d has %zu elements, the hooks were made for %zu "
                    "(batch %d, conv_width %d): attach to a model of the same shape", i, n[i],
                    (size_t)s->B * s->Wm1 * (i < 2 ? s->HK : s->HV), s->B, s->Wm1 + 1);
}

static void check_state_size(const gdn_seqpar *s, size_t n) {
    if (n != s->n_state)
        GDN_DIE("sequence parallelism: the model's state has %zu elements, the hooks were made for %zu "
                "(batch %d): attach to a model of the same shape", n, s->n_state, s->B);
}

/* Sends started in the previous pass must be complete before their buffers are reused: called at
 * the first point-to-point hook of a pass, the first delta-rule layer of a forward and the last
 * one of a backward (attention layers exchange through collectives, which complete in the call). */
static void pass_begins(gdn_seqpar *s) { gdn_wait_sends(s->c); }

static int tag(int layer, int kind) { return layer * TAG_KINDS + kind; }

static void hook_fwd_halo(void *user, int l, void *const halo_v[3], const void *const tail_v[3], const size_t n[3]) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    check_halo_sizes(s, n);
    float *const halo[3] = {halo_v[0], halo_v[1], halo_v[2]};
    const float *const tail[3] = {tail_v[0], tail_v[1], tail_v[2]};
    if (l == s->first_delta) pass_begins(s);
    if (c->sp_rank + 1 < c->sp) {
        float *buf = s->send_halo + (size_t)l * s->n_halo;
        halo_pack(s, buf, tail);
        gdn_send(c, GDN_SP, c->sp_rank + 1, buf, s->n_halo, GDN_F32, tag(l, TAG_HALO),
                 "convolution halo");
    }
    if (c->sp_rank > 0) {
        gdn_recv(c, GDN_SP, c->sp_rank - 1, s->recv_halo, s->n_halo, GDN_F32, tag(l, TAG_HALO),
                 "convolution halo");
        halo_unpack(s, halo, s->recv_halo);
    } else {
        halo_unpack(s, halo, NULL);
    }
}

/* y = M x (transpose: M^T x) per (b, h); M [BH,K,K], x, y [BH,K,V]. */
static void map_apply(const gdn_seqpar *s, const float *M, const float *x, int transpose, float *y) {
    const int K = s->K, V = s->V;
    for (int bh = 0; bh < s->B * s->H; bh++)
        cblas_sgemm(CblasRowMajor, transpose ? CblasTrans : CblasNoTrans, CblasNoTrans, K, V, K, 1.0f,
                    M + (size_t)bh * K * K, K, x + (size_t)bh * K * V, V, 0.0f,
                    y + (size_t)bh * K * V, V);
}

static void *hook_fwd_state_in(void *user, int l, const void *delta, void *S_in_v, size_t n_state) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    const gdn_cpu_delta_args_f32 *d = delta;
    float *S_in = S_in_v;
    check_state_size(s, n_state);
    if (s->mode == GDN_SP_PASS) {
        if (c->sp_rank > 0)
            gdn_recv(c, GDN_SP, c->sp_rank - 1, S_in, s->n_state, GDN_F32, tag(l, TAG_STATE),
                     "delta-rule state");
        else
            memset(S_in, 0, s->n_state * sizeof(float));
        return NULL;
    }
    /* This rank's map [M | H], gathered in rank order; S_in = fold of the maps before it. */
    const size_t per = s->n_map + s->n_state;
    float *maps = s->maps + (size_t)l * c->sp * per;
    gdn_delta_transition_f32(d->shape, d->k, d->v, d->g, d->beta, s->my_map, s->my_map + s->n_map);
    gdn_all_gather(c, GDN_SP, s->my_map, maps, per, GDN_F32, "affine maps of the delta-rule state");
    memset(S_in, 0, s->n_state * sizeof(float));
    for (int j = 0; j < c->sp_rank; j++) {
        const float *M = maps + (size_t)j * per, *Hj = M + s->n_map;
        map_apply(s, M, S_in, 0, s->tmp);
        for (size_t i = 0; i < s->n_state; i++) S_in[i] = s->tmp[i] + Hj[i];
    }
    return NULL;
}

static void hook_fwd_state_out(void *user, int l, const void *S_out, size_t n_state) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    check_state_size(s, n_state);
    if (s->mode != GDN_SP_PASS || c->sp_rank + 1 == c->sp) return;
    float *buf = s->send_state + (size_t)l * s->n_state;
    memcpy(buf, S_out, s->n_state * sizeof(float));
    gdn_send(c, GDN_SP, c->sp_rank + 1, buf, s->n_state, GDN_F32, tag(l, TAG_STATE), "delta-rule state");
}

static void *hook_bwd_state_out(void *user, int l, const void *delta, void *dS_out_v, size_t n_state) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    const gdn_cpu_delta_args_f32 *d = delta;
    float *dS_out = dS_out_v;
    check_state_size(s, n_state);
    if (l == s->last_delta) pass_begins(s);
    if (s->mode == GDN_SP_PASS) {
        if (c->sp_rank + 1 < c->sp)
            gdn_recv(c, GDN_SP, c->sp_rank + 1, dS_out, s->n_state, GDN_F32, tag(l, TAG_DSTATE),
                     "delta-rule state gradient");
        else
            memset(dS_out, 0, s->n_state * sizeof(float));
        return NULL;
    }
    /* dS_out = fold, from the last rank down to the next one, of dS <- M_j^T dS + E_j. */
    const size_t per = s->n_map + s->n_state;
    const float *maps = s->maps + (size_t)l * c->sp * per;
    gdn_delta_transition_adjoint_f32(d->shape, d->q, d->k, d->g, d->beta, d->scale, d->d_o, s->my_E);
    gdn_all_gather(c, GDN_SP, s->my_E, s->all_E, s->n_state, GDN_F32, "delta-rule state gradients");
    memset(dS_out, 0, s->n_state * sizeof(float));
    for (int j = c->sp - 1; j > c->sp_rank; j--) {
        const float *Ej = s->all_E + (size_t)j * s->n_state;
        map_apply(s, maps + (size_t)j * per, dS_out, 1, s->tmp);
        for (size_t i = 0; i < s->n_state; i++) dS_out[i] = s->tmp[i] + Ej[i];
    }
    return NULL;
}

static void hook_bwd_state_in(void *user, int l, const void *dS_in, size_t n_state) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    check_state_size(s, n_state);
    if (s->mode != GDN_SP_PASS || c->sp_rank == 0) return;
    float *buf = s->send_dstate + (size_t)l * s->n_state;
    memcpy(buf, dS_in, s->n_state * sizeof(float));
    gdn_send(c, GDN_SP, c->sp_rank - 1, buf, s->n_state, GDN_F32, tag(l, TAG_DSTATE),
             "delta-rule state gradient");
}

static void hook_bwd_halo(void *user, int l, void *const dtail_v[3], const void *const dhalo_v[3], const size_t n[3]) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    check_halo_sizes(s, n);
    float *const dtail[3] = {dtail_v[0], dtail_v[1], dtail_v[2]};
    const float *const dhalo[3] = {dhalo_v[0], dhalo_v[1], dhalo_v[2]};
    if (c->sp_rank > 0) {
        float *buf = s->send_dhalo + (size_t)l * s->n_halo;
        halo_pack(s, buf, dhalo);
        gdn_send(c, GDN_SP, c->sp_rank - 1, buf, s->n_halo, GDN_F32, tag(l, TAG_DHALO),
                 "convolution halo gradient");
    }
    if (c->sp_rank + 1 < c->sp) {
        gdn_recv(c, GDN_SP, c->sp_rank + 1, s->recv_halo, s->n_halo, GDN_F32, tag(l, TAG_DHALO),
                 "convolution halo gradient");
        halo_unpack(s, dtail, s->recv_halo);
    } else {
        halo_unpack(s, dtail, NULL);
    }
}

/* ---- attention layers: the prefix's keys and values, their gradients back to their owners ---- */

static void check_kv_size(const gdn_seqpar *s, size_t n) {
    if (!s->kv)
        GDN_DIE("sequence parallelism: an attention layer's keys reached hooks made for a model without "
                "attention layers: attach to a model of the same configuration");
    if (n != s->n_kv)
        GDN_DIE("sequence parallelism: the model's attention keys have %zu elements, the hooks were made for "
                "%zu (batch %d, %d tokens, %d per row): attach to a model of the same shape", n, s->n_kv, s->B,
                s->T, s->C);
}

/* Segment j's rows of a prefix array [B,Tk,C] (Tk = (sp_rank + 1) * T) <-> a block [B,T,C]. */
static void segment_rows(const gdn_seqpar *s, float *prefix, float *block, int j, int to_prefix) {
    const int Tk = (s->c->sp_rank + 1) * s->T;
    const size_t rows = (size_t)s->T * s->C;
    for (int b = 0; b < s->B; b++) {
        float *p = prefix + ((size_t)b * Tk + (size_t)j * s->T) * s->C, *q = block + (size_t)b * rows;
        if (to_prefix) memcpy(p, q, rows * sizeof(float));
        else memcpy(q, p, rows * sizeof(float));
    }
}

/* Every segment's keys and values gathered in rank order; those of segments 0 .. sp_rank laid out
 * as the prefix. The later segments' arrive too (an all-gather is one collective). */
static void hook_attn_kv_fwd(void *user, int l, void *const all[2], const void *const own[2], size_t n) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    (void)l;
    check_kv_size(s, n);
    float *mine = s->kv + (size_t)c->sp_rank * 2 * n;
    memcpy(mine, own[0], n * sizeof(float));
    memcpy(mine + n, own[1], n * sizeof(float));
    gdn_all_gather(c, GDN_SP, mine, s->kv, 2 * n, GDN_F32, "attention keys and values");
    for (int j = 0; j <= c->sp_rank; j++)
        for (int i = 0; i < 2; i++) segment_rows(s, all[i], s->kv + ((size_t)j * 2 + i) * n, j, 1);
}

/* Block j of the reduce-scatter input: this rank's gradient of segment j's keys and values (zeros
 * for the segments after it, which it did not read); block sp_rank of the sum is ours. */
static void hook_attn_kv_bwd(void *user, int l, void *const dkv[2], void *const dkv_all[2], size_t n) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    (void)l;
    check_kv_size(s, n);
    for (int j = 0; j < c->sp; j++)
        for (int i = 0; i < 2; i++) {
            float *block = s->kv + ((size_t)j * 2 + i) * n;
            if (j <= c->sp_rank) segment_rows(s, dkv_all[i], block, j, 0);
            else memset(block, 0, n * sizeof(float));
        }
    float *mine = s->kv + (size_t)c->sp_rank * 2 * n;
    gdn_reduce_scatter(c, GDN_SP, s->kv, mine, 2 * n, GDN_F32, GDN_SUM, "attention key and value gradients");
    memcpy(dkv[0], mine, n * sizeof(float));
    memcpy(dkv[1], mine + n, n * sizeof(float));
}

/* ---- documents: the start of the document open at each segment's first token ---------------- */

/* Every segment's last start per row, all-gathered (B int64 per rank); prev = the largest of the
 * segments before this one. */
static void hook_doc_prev(void *user, const int *last, int *prev, int B) {
    gdn_seqpar *s = user;
    gdn_comm *c = s->c;
    if (B != s->B)
        GDN_DIE("sequence parallelism: the model's batch of %d rows reached hooks made for %d: attach to a "
                "model of the same shape", B, s->B);
    int64_t *mine = s->docs + (size_t)c->sp_rank * B;
    for (int b = 0; b < B; b++) mine[b] = last[b];
    gdn_all_gather(c, GDN_SP, mine, s->docs, (size_t)B, GDN_I64, "document starts");
    for (int b = 0; b < B; b++) {
        int64_t p = -1;
        for (int j = 0; j < c->sp_rank; j++)
            if (s->docs[(size_t)j * B + b] > p) p = s->docs[(size_t)j * B + b];
        prev[b] = (int)p;
    }
}

gdn_seq_hooks gdn_seqpar_hooks(gdn_seqpar *s) {
    const gdn_seq_hooks h = {.user = s,
                             .fwd_halo = hook_fwd_halo,
                             .fwd_state_in = hook_fwd_state_in,
                             .fwd_state_out = hook_fwd_state_out,
                             .bwd_state_out = hook_bwd_state_out,
                             .bwd_state_in = hook_bwd_state_in,
                             .bwd_halo = hook_bwd_halo,
                             .attn_kv_fwd = hook_attn_kv_fwd,
                             .attn_kv_bwd = hook_attn_kv_bwd,
                             .doc_prev = hook_doc_prev,
                             .pos0 = s->c->sp_rank * s->T};
    return h;
}
