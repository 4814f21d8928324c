/* Sequence-parallel hooks of the CUDA model over NCCL transfer groups (see seqpar_cuda.h). */
#include "comm/seqpar_cuda.h"

#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "comm/comm_nccl.h"
#include "model/check.h"

/* What this rank sends: forward to the next rank, backward to the previous one. */
enum { SEND_HALO, SEND_STATE, SEND_DSTATE, SEND_DHALO, SEND_KINDS };
/* Send buffers per kind, used by alternate layers. */
#define SLOTS 2

struct gdn_seqpar_cuda {
    gdn_comm *c;
    cudaStream_t stream; /* the model's */
    gdn_dtype act;       /* halos: GDN_BF16 or GDN_F32 */
    size_t act_bytes;
    int L, prev, next;   /* layers; group ranks of the neighbours (-1: none) */
    size_t n_halo[3];    /* elements of the q, k, v halos, as the model passes them (0: not seen yet) */
    size_t n_state;      /* floats of a state (0: not seen yet) */
    void *buf[SEND_KINDS][SLOTS];       /* device; allocated at the first send of the kind */
    size_t buf_bytes[SEND_KINDS];
    cudaEvent_t sent[SEND_KINDS][SLOTS]; /* recorded on the NCCL stream after the send from the slot */
    cudaEvent_t state_in, dstate_out;    /* recorded after the receive of the state / its gradient */
    /* attention layers: B x T_seg tokens per rank; kv [sp][k | v] (act-typed, device; allocated at
     * the first attention layer) gathered in the forward pass, reduced in the backward; n_kv the
     * elements of one segment's keys (0: not seen yet) */
    int B, T;
    size_t n_kv;
    char *kv;
};

static const char *kind_name[SEND_KINDS] = {"convolution halo", "delta-rule state", "delta-rule state gradient",
                                            "convolution halo gradient"};

static void check(const gdn_seqpar_cuda *s, cudaError_t e, const char *op, const char *what) {
    if (e != cudaSuccess)
        gdn_comm_abort(s->c, "sequence parallelism: CUDA error in %s of the %s: %s", op, what, cudaGetErrorString(e));
}

uint64_t gdn_seqpar_cuda_bytes(const gdn_config *cfg, int B, int sp, size_t act_bytes, int with_backward) {
    if (sp <= 1) return 0;
    const uint64_t H = (uint64_t)cfg->n_heads, K = (uint64_t)cfg->head_dim;
    const uint64_t V = (uint64_t)gdn_config_head_v(cfg);
    const uint64_t halo = (uint64_t)B * (uint64_t)(cfg->conv_width - 1) * H * (2 * K + V) * act_bytes;
    const uint64_t state = (uint64_t)B * H * K * V * 4;
    /* forward traffic goes to the next rank, backward traffic to the previous one: only a middle
     * rank (sp > 2) sends both; with sp = 2 the first rank sends the forward part, the second the
     * backward part (the same size) */
    const uint64_t one_way = halo + state;
    const uint64_t n_delta = (uint64_t)(cfg->n_layers - gdn_config_count_mixer(cfg, GDN_MIXER_A));
    return n_delta * (with_backward && sp > 2 ? 2 * one_way : one_way);
}

gdn_seqpar_cuda *gdn_seqpar_cuda_create(gdn_comm *nccl, const gdn_config *cfg, int B, int T_seg,
                                        gdn_cuda_precision p, void *stream) {
    if (T_seg < cfg->conv_width - 1)
        GDN_DIE("sequence parallelism needs at least conv_width - 1 = %d tokens per rank, got %d: use a "
                "smaller sp or a longer seq_len", cfg->conv_width - 1, T_seg);
    if (B < 1) GDN_DIE("sequence parallelism: batch size %d (must be >= 1)", B);
    gdn_seqpar_cuda *s = GDN_CALLOC(1, sizeof *s);
    s->c = nccl;
    s->stream = (cudaStream_t)stream;
    s->act = p == GDN_CUDA_BF16 ? GDN_BF16 : GDN_F32;
    s->act_bytes = gdn_dtype_size(s->act);
    s->L = cfg->n_layers;
    s->B = B;
    s->T = T_seg;
    s->prev = nccl->sp_rank > 0 ? nccl->sp_rank - 1 : -1;
    s->next = nccl->sp_rank + 1 < nccl->sp ? nccl->sp_rank + 1 : -1;
    for (int k = 0; k < SEND_KINDS; k++)
        for (int j = 0; j < SLOTS; j++)
            check(s, cudaEventCreateWithFlags(&s->sent[k][j], cudaEventDisableTiming), "start", kind_name[k]);
    check(s, cudaEventCreateWithFlags(&s->state_in, cudaEventDisableTiming), "start", kind_name[SEND_STATE]);
    check(s, cudaEventCreateWithFlags(&s->dstate_out, cudaEventDisableTiming), "start", kind_name[SEND_DSTATE]);
    gdn_nccl_set_stream(nccl, stream);
    return s;
}

void gdn_seqpar_cuda_free(gdn_seqpar_cuda *s) {
    if (!s) return;
    gdn_nccl_sync(s->c, "pending sequence-parallel transfers");
    for (int k = 0; k < SEND_KINDS; k++)
        for (int j = 0; j < SLOTS; j++) {
            check(s, cudaEventDestroy(s->sent[k][j]), "shutdown", kind_name[k]);
            if (s->buf[k][j]) check(s, cudaFree(s->buf[k][j]), "shutdown", kind_name[k]);
        }
    check(s, cudaEventDestroy(s->state_in), "shutdown", kind_name[SEND_STATE]);
    check(s, cudaEventDestroy(s->dstate_out), "shutdown", kind_name[SEND_DSTATE]);
    if (s->kv) check(s, cudaFree(s->kv), "shutdown", "attention keys and values");
    free(s);
}

/* The model passes the same sizes at every call; the first call fixes them. */
static void check_halo_sizes(gdn_seqpar_cuda *s, const size_t n[3]) {
    if (!s->n_halo[0] && !s->n_halo[1] && !s->n_halo[2])
        for (int i = 0; i < 3; i++) s->n_halo[i] = n[i];
    for (int i = 0; i < 3; i++)
        if (n[i] != s->n_halo[i])
            GDN_DIE("sequence parallelism: halo %d of %zu elements, earlier %zu (the model changed shape)", i, n[i],
                    s->n_halo[i]);
}

static void check_state_size(gdn_seqpar_cuda *s, size_t n) {
    if (!s->n_state) s->n_state = n;
    if (n != s->n_state)
        GDN_DIE("sequence parallelism: a state of %zu floats, earlier %zu (the model changed shape)", n, s->n_state);
}

static size_t halo_total(const gdn_seqpar_cuda *s) { return s->n_halo[0] + s->n_halo[1] + s->n_halo[2]; }

/* The send buffer of this kind for layer l, once the model's stream has waited for the send that
 * last read it (two layers before; the first time, no wait). */
static char *stage(gdn_seqpar_cuda *s, int kind, int l, size_t bytes) {
    if (!s->buf[kind][0]) {
        for (int j = 0; j < SLOTS; j++)
            if (cudaMalloc(&s->buf[kind][j], bytes ? bytes : 1) != cudaSuccess) {
                size_t free_b = 0, total_b = 0;
                (void)cudaGetLastError();
                cudaMemGetInfo(&free_b, &total_b);
                gdn_comm_abort(s->c, "sequence parallelism: cannot allocate %zu bytes for the %s send buffers; "
                               "the device has %.2f GiB free of %.2f GiB: use a smaller batch or sequence",
                               2 * bytes, kind_name[kind], free_b / 1073741824.0, total_b / 1073741824.0);
            }
        s->buf_bytes[kind] = bytes;
    }
    if (bytes != s->buf_bytes[kind])
        GDN_DIE("sequence parallelism: %zu bytes of %s, earlier %zu", bytes, kind_name[kind], s->buf_bytes[kind]);
    const int j = l % SLOTS;
    check(s, cudaStreamWaitEvent(s->stream, s->sent[kind][j], 0), "reuse of a send buffer", kind_name[kind]);
    return (char *)s->buf[kind][j];
}

/* Packs the three arrays src[i] [n_halo[i]] into the send buffer of kind for layer l. */
static char *stage_halo(gdn_seqpar_cuda *s, int kind, int l, const void *const src[3]) {
    const size_t es = s->act_bytes;
    char *out = stage(s, kind, l, halo_total(s) * es);
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        if (s->n_halo[i])
            check(s, cudaMemcpyAsync(out + off, src[i], s->n_halo[i] * es, cudaMemcpyDeviceToDevice, s->stream),
                  "copy", kind_name[kind]);
        off += s->n_halo[i] * es;
    }
    return out;
}

static void zero_halo(gdn_seqpar_cuda *s, void *const dst[3], const char *what) {
    for (int i = 0; i < 3; i++)
        if (s->n_halo[i])
            check(s, cudaMemsetAsync(dst[i], 0, s->n_halo[i] * s->act_bytes, s->stream), "zero fill", what);
}

/* One transfer group: the packed halo `out` of kind to group rank `to` and the three arrays
 * in[i] from group rank `from` (either -1: none). */
static void halo_transfer(gdn_seqpar_cuda *s, int kind, int l, const char *out, int to, void *const in[3], int from,
                          const char *what) {
    if (to < 0 && from < 0) return;
    gdn_nccl_p2p_start(s->c, what);
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        if (to >= 0 && s->n_halo[i]) gdn_nccl_p2p_send(s->c, GDN_SP, to, out + off, s->n_halo[i], s->act, what);
        if (from >= 0 && s->n_halo[i]) gdn_nccl_p2p_recv(s->c, GDN_SP, from, in[i], s->n_halo[i], s->act, what);
        off += s->n_halo[i] * s->act_bytes;
    }
    gdn_nccl_p2p_end(s->c, to >= 0 ? s->sent[kind][l % SLOTS] : NULL, what);
}

/* The state src [n_state] of kind to group rank `to`, through the send buffer of layer l. */
static void state_send(gdn_seqpar_cuda *s, int kind, int l, const float *src, int to) {
    const size_t bytes = s->n_state * sizeof(float);
    char *out = stage(s, kind, l, bytes);
    check(s, cudaMemcpyAsync(out, src, bytes, cudaMemcpyDeviceToDevice, s->stream), "copy", kind_name[kind]);
    gdn_nccl_p2p_start(s->c, kind_name[kind]);
    gdn_nccl_p2p_send(s->c, GDN_SP, to, out, s->n_state, GDN_F32, kind_name[kind]);
    gdn_nccl_p2p_end(s->c, s->sent[kind][l % SLOTS], kind_name[kind]);
}

/* dst [n_state] from group rank `from`, or zeros when from < 0 (on the model's stream: returns
 * NULL). A receive does not hold up the model's stream: it returns the event `received`,
 * recorded after it, for the model to order only the state pass after (the intra-chunk work
 * overlaps the transfer). */
static void *state_recv(gdn_seqpar_cuda *s, float *dst, int from, cudaEvent_t received, const char *what) {
    if (from < 0) {
        check(s, cudaMemsetAsync(dst, 0, s->n_state * sizeof(float), s->stream), "zero fill", what);
        return NULL;
    }
    gdn_nccl_p2p_start(s->c, what);
    gdn_nccl_p2p_recv(s->c, GDN_SP, from, dst, s->n_state, GDN_F32, what);
    gdn_nccl_p2p_end_event(s->c, NULL, received, what);
    return received;
}

static void hook_fwd_halo(void *user, int l, void *const halo[3], const void *const tail[3], const size_t n[3]) {
    gdn_seqpar_cuda *s = user;
    check_halo_sizes(s, n);
    const char *out = s->next >= 0 ? stage_halo(s, SEND_HALO, l, tail) : NULL;
    if (s->prev < 0) zero_halo(s, halo, kind_name[SEND_HALO]);
    halo_transfer(s, SEND_HALO, l, out, s->next, halo, s->prev, kind_name[SEND_HALO]);
}

static void *hook_fwd_state_in(void *user, int l, const void *delta, void *S_in, size_t n_state) {
    gdn_seqpar_cuda *s = user;
    (void)l;
    (void)delta; /* the pass exchange needs only the state */
    check_state_size(s, n_state);
    return state_recv(s, S_in, s->prev, s->state_in, kind_name[SEND_STATE]);
}

static void hook_fwd_state_out(void *user, int l, const void *S_out, size_t n_state) {
    gdn_seqpar_cuda *s = user;
    check_state_size(s, n_state);
    if (s->next >= 0) state_send(s, SEND_STATE, l, S_out, s->next);
    /* the end of the forward pass: every transfer of it completes within the deadline before the
     * model waits for its stream without one */
    if (l == s->L - 1) gdn_nccl_sync(s->c, "the forward pass's sequence-parallel transfers");
}

static void *hook_bwd_state_out(void *user, int l, const void *delta, void *dS_out, size_t n_state) {
    gdn_seqpar_cuda *s = user;
    (void)l;
    (void)delta;
    check_state_size(s, n_state);
    return state_recv(s, dS_out, s->next, s->dstate_out, kind_name[SEND_DSTATE]);
}

static void hook_bwd_state_in(void *user, int l, const void *dS_in, size_t n_state) {
    gdn_seqpar_cuda *s = user;
    check_state_size(s, n_state);
    if (s->prev >= 0) state_send(s, SEND_DSTATE, l, dS_in, s->prev);
}

static void hook_bwd_halo(void *user, int l, void *const dtail[3], const void *const dhalo[3], const size_t n[3]) {
    gdn_seqpar_cuda *s = user;
    check_halo_sizes(s, n);
    const char *out = s->prev >= 0 ? stage_halo(s, SEND_DHALO, l, dhalo) : NULL;
    if (s->next < 0) zero_halo(s, dtail, kind_name[SEND_DHALO]);
    halo_transfer(s, SEND_DHALO, l, out, s->prev, dtail, s->next, kind_name[SEND_DHALO]);
}

/* ---- attention layers: the prefix's keys and values (all-gather), their gradients back to their
 * owners (reduce-scatter); both collectives of the NCCL grid, ordered after the model's work so far
 * and before its next work ---- */

static const char *const kv_what = "attention keys and values", *const dkv_what = "attention key and value gradients";

/* The first attention layer fixes the size of a segment's keys, [B,T,C], and allocates kv. */
static void kv_prepare(gdn_seqpar_cuda *s, size_t n) {
    const size_t rows = (size_t)s->B * (size_t)s->T;
    if (!s->n_kv) {
        if (n == 0 || n % rows)
            GDN_DIE("sequence parallelism: attention keys of %zu elements are not [%d, %d, C]", n, s->B, s->T);
        const size_t bytes = (size_t)s->c->sp * 2 * n * s->act_bytes;
        if (cudaMalloc((void **)&s->kv, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            gdn_comm_abort(s->c, "sequence parallelism: cannot allocate %zu bytes for the %s of the group: use a "
                           "smaller batch or sequence", bytes, kv_what);
        }
        s->n_kv = n;
    }
    if (n != s->n_kv)
        GDN_DIE("sequence parallelism: attention keys of %zu elements, earlier %zu (the model changed shape)", n,
                s->n_kv);
}

/* Segment j's rows of a prefix array [B,Tk,C] (Tk = (sp_rank + 1) * T) <-> a block [B,T,C], on the
 * model's stream. */
static void segment_rows(gdn_seqpar_cuda *s, char *prefix, char *block, int j, int to_prefix, const char *what) {
    const size_t es = s->act_bytes, C = s->n_kv / ((size_t)s->B * (size_t)s->T);
    const size_t seg = (size_t)s->T * C * es, pitch = (size_t)(s->c->sp_rank + 1) * seg;
    char *p = prefix + (size_t)j * seg;
    check(s, to_prefix ? cudaMemcpy2DAsync(p, pitch, block, seg, seg, (size_t)s->B, cudaMemcpyDeviceToDevice, s->stream)
                       : cudaMemcpy2DAsync(block, seg, p, pitch, seg, (size_t)s->B, cudaMemcpyDeviceToDevice, s->stream),
          "copy", what);
}

static void hook_attn_kv_fwd(void *user, int l, void *const all[2], const void *const own[2], size_t n) {
    gdn_seqpar_cuda *s = user;
    (void)l;
    kv_prepare(s, n);
    const size_t blk = n * s->act_bytes;
    char *mine = s->kv + (size_t)s->c->sp_rank * 2 * blk;
    for (int i = 0; i < 2; i++)
        check(s, cudaMemcpyAsync(mine + i * blk, own[i], blk, cudaMemcpyDeviceToDevice, s->stream), "copy", kv_what);
    gdn_all_gather(s->c, GDN_SP, mine, s->kv, 2 * n, s->act, kv_what);
    for (int j = 0; j <= s->c->sp_rank; j++)
        for (int i = 0; i < 2; i++) segment_rows(s, all[i], s->kv + ((size_t)j * 2 + i) * blk, j, 1, kv_what);
}

static void hook_attn_kv_bwd(void *user, int l, void *const dkv[2], void *const dkv_all[2], size_t n) {
    gdn_seqpar_cuda *s = user;
    (void)l;
    kv_prepare(s, n);
    const size_t blk = n * s->act_bytes;
    for (int j = 0; j < s->c->sp; j++)
        for (int i = 0; i < 2; i++) {
            char *block = s->kv + ((size_t)j * 2 + i) * blk;
            if (j <= s->c->sp_rank) segment_rows(s, dkv_all[i], block, j, 0, dkv_what);
            else check(s, cudaMemsetAsync(block, 0, blk, s->stream), "zero fill", dkv_what);
        }
    char *mine = s->kv + (size_t)s->c->sp_rank * 2 * blk;
    gdn_reduce_scatter(s->c, GDN_SP, s->kv, mine, 2 * n, s->act, GDN_SUM, dkv_what);
    for (int i = 0; i < 2; i++)
        check(s, cudaMemcpyAsync(dkv[i], mine + i * blk, blk, cudaMemcpyDeviceToDevice, s->stream), "copy", dkv_what);
}

gdn_seq_hooks gdn_seqpar_cuda_hooks(gdn_seqpar_cuda *s) {
    gdn_seq_hooks h = {.user = s,
                       .fwd_halo = hook_fwd_halo,
                       .fwd_state_in = hook_fwd_state_in,
                       .fwd_state_out = hook_fwd_state_out,
                       .bwd_state_out = hook_bwd_state_out,
                       .bwd_state_in = hook_bwd_state_in,
                       .bwd_halo = hook_bwd_halo,
                       .attn_kv_fwd = hook_attn_kv_fwd,
                       .attn_kv_bwd = hook_attn_kv_bwd,
                       .pos0 = s->c->sp_rank * s->T};
    return h;
}
