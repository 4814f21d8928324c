/* Host side of the CUDA gated delta rule: device queries, shape checks, the workspace, the
 * state-pass variant choice, and the launch sequences of the forward and the backward. */
#include <math.h>
#include <string.h>

#include "model/cuda/delta_common.cuh"
#include "model/mixer.h"

/* ---- small utilities ------------------------------------------------------------------------ */
int gdn_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not an error for the caller */
        return 0;
    }
    return n;
}

void gdn_cuda_set_smem(const void *kernel, size_t bytes, const char *name) {
    int dev = 0, limit = 0;
    GDN_CUDA_CHECK(cudaGetDevice(&dev));
    GDN_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (bytes > (size_t)limit)
        GDN_CUDA_DIE("%s needs %zu bytes of shared memory per block, the device allows %d", name,
                     bytes, limit);
    GDN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    /* all of the unified L1/shared array as shared memory, so that the backward's concurrent
     * kernels (two state passes, or a state pass and a per-chunk kernel) fit on one
     * multiprocessor together; the kernels stage their data in shared memory, not in L1 */
    GDN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
}

static gdn_state_choice pick_state_variant(const gdn_state_variant *v, int n, int BH, int V, int min_slots,
                                           int max_slots, int share) {
    int dev = 0, sms = 0, smem_sm = 0, smem_blk = 0;
    GDN_CUDA_CHECK(cudaGetDevice(&dev));
    GDN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    GDN_CUDA_CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    GDN_CUDA_CHECK(cudaDeviceGetAttribute(&smem_blk, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    /* beside a concurrent kernel: plan for half of each multiprocessor */
    const int regs_sm = share ? 32768 : 65536, warps_sm = share ? 32 : 64;
    if (share) smem_sm /= 2;
    if (smem_blk > smem_sm) smem_blk = smem_sm - 1024;
    gdn_state_choice best = {0, 0, share};
    double best_cost = -1;
    const size_t reserve = 1024; /* per-block shared memory the runtime keeps */
    for (int i = 0; i < n; ++i) {
        if (v[i].bv > V) continue;
        struct cudaFuncAttributes fa;
        GDN_CUDA_CHECK(cudaFuncGetAttributes(&fa, (const void *)v[i].kernel));
        const int threads = v[i].bv * 4, warps = threads / 32;
        const long blocks = (long)BH * (V / v[i].bv);
        const size_t sm_min = v[i].smem(min_slots);
        if (sm_min > (size_t)smem_blk) continue;
        const int regs_warp = ((fa.numRegs * 32 + 255) / 256) * 256;
        int bps = (int)((size_t)smem_sm / (sm_min + reserve));
        bps = bps < regs_sm / (regs_warp * warps) ? bps : regs_sm / (regs_warp * warps);
        bps = bps < warps_sm / warps ? bps : warps_sm / warps;
        if (bps < 1) continue;
        const long need = (blocks + sms - 1) / sms;
        const int use = need < bps ? (int)need : bps;
        const long waves = (blocks + (long)sms * use - 1) / ((long)sms * use);
        /* a block walks its chunks one after another: its time grows with the warps resident
         * on its multiprocessor (both passes' when sharing), but far slower than in proportion
         * (B1 T8192 H96 D128, H200: 4 warps x 2 blocks per SM in 1.45 waves 1.01 ms, 8 x 2 in
         * one wave 0.72, 4 x 3 in one wave 0.70) */
        const double cost = (double)waves * sqrt((double)use * warps * (share ? 2 : 1));
        if (best_cost < 0 || cost < best_cost - 1e-9 || (cost < best_cost + 1e-9 && v[i].bv > best.bv)) {
            best_cost = cost;
            best.bv = v[i].bv;
            best.slots = min_slots;
            for (int s = max_slots; s > min_slots; --s) {
                const size_t sm = v[i].smem(s);
                if (sm <= (size_t)smem_blk && (sm + reserve) * use <= (size_t)smem_sm) {
                    best.slots = s;
                    break;
                }
            }
        }
    }
    if (best_cost < 0) {
        /* too big to share a multiprocessor (fp32, K = 256): run it on whole ones */
        if (share) return pick_state_variant(v, n, BH, V, min_slots, max_slots, 0);
        GDN_CUDA_DIE("gated delta rule: no state-pass variant fits this device");
    }
    return best;
}

gdn_state_choice gdn_state_pass_choice(const gdn_state_variant *v, const gdn_delta_args *a, int max_slots,
                                       int share) {
    const int nv = a->V >= 128 ? 3 : 2, BH = a->B * a->H;
    const gdn_state_choice whole = pick_state_variant(v, nv, BH, a->V, 2, max_slots, 0);
    if (!share) return whole;
    const gdn_state_choice half = pick_state_variant(v, nv, BH, a->V, 2, max_slots, 1);
    return half.bv < whole.bv ? whole : half;
}

void gdn_launch_state_pass(const gdn_state_variant *v, const gdn_delta_args *a, int max_slots,
                           int share, const char *name, cudaStream_t st) {
    const gdn_state_choice ch = gdn_state_pass_choice(v, a, max_slots, share);
    int i = 0;
    while (v[i].bv != ch.bv) ++i;
    const size_t sm = v[i].smem(ch.slots);
    gdn_cuda_set_smem((const void *)v[i].kernel, sm, name);
    v[i].kernel<<<dim3(a->V / ch.bv, a->B * a->H), ch.bv * 4, sm, st>>>(*a, ch.slots);
    GDN_CUDA_CHECK_LAUNCH();
}

void gdn_cuda_delta_check_shape(const gdn_delta_shape *s) {
    if (!s) GDN_CUDA_DIE("gated delta rule (cuda): shape is NULL");
    if (s->B < 1 || s->T < 0 || s->H < 1)
        GDN_CUDA_DIE("gated delta rule (cuda): bad shape B=%d T=%d H=%d (need B,H >= 1, T >= 0)",
                     s->B, s->T, s->H);
    if (s->K != 64 && s->K != 128 && s->K != 256)
        GDN_CUDA_DIE("gated delta rule (cuda): key head dim K=%d is not supported; use 64, 128 or 256",
                     s->K);
    if (s->V != 64 && s->V != 128 && s->V != 256)
        GDN_CUDA_DIE("gated delta rule (cuda): value head dim V=%d is not supported; use 64, 128 or 256",
                     s->V);
    if (s->qk_heads < 0 || (s->qk_heads > 0 && s->H % s->qk_heads != 0))
        GDN_CUDA_DIE("gated delta rule (cuda): qk_heads=%d is neither 0 (q, k with one head per "
                     "value head) nor a divisor of the value heads H=%d", s->qk_heads, s->H);
    const gdn_mixer_info *mx = gdn_mixer_get(s->variant);
    if (!mx || !mx->is_delta)
        GDN_CUDA_DIE("gated delta rule (cuda): mixer variant %d is not of the delta-rule family (use a gdn_mixer "
                     "value from model/mixer.h, 0..%d)", s->variant, GDN_MIXER_DELTA_COUNT - 1);
    if (mx->has_beta != mx->has_delta)
        GDN_CUDA_DIE("gated delta rule (cuda): mixer '%s' has beta without the delta term (or the "
                     "reverse), which the kernels do not implement", mx->name);
    if (s->doc)
        GDN_CUDA_DIE("gated delta rule (cuda): shape.doc is set; the CUDA calls take the documents as a "
                     "device array in gdn_cuda_delta_in.doc (shape.doc must be NULL)");
    if ((long)s->B * s->H > 65535)
        GDN_CUDA_DIE("gated delta rule (cuda): B*H=%ld exceeds the grid limit 65535; split the batch",
                     (long)s->B * s->H);
}

size_t gdn_delta_elem_size(gdn_cuda_precision p) { return p == GDN_CUDA_BF16 ? 2 : 4; }

size_t gdn_cuda_delta_workspace_bytes(const gdn_delta_shape *s, gdn_cuda_precision p) {
    gdn_cuda_delta_check_shape(s);
    return gdn_delta_ws_layout(s, gdn_delta_elem_size(p)).total;
}

void gdn_delta_args_init(gdn_delta_args *a, const gdn_delta_shape *s, gdn_cuda_precision p,
                         float scale, void *workspace) {
    memset(a, 0, sizeof(*a));
    a->B = s->B;
    a->T = s->T;
    a->H = s->H;
    a->K = s->K;
    a->V = s->V;
    a->group = gdn_delta_group(s);
    a->Hq = s->H / a->group;
    a->NT = (s->T + GDN_CHUNK - 1) / GDN_CHUNK;
    a->c0 = 0;
    a->c1 = a->NT;
    a->delta = gdn_mixer_get(s->variant)->has_delta;
    a->scale = scale;
    const gdn_delta_ws w = gdn_delta_ws_layout(s, gdn_delta_elem_size(p));
    unsigned char *base = (unsigned char *)workspace;
    a->G = (float *)(base + w.G);
    a->Tm = base + w.Tm;
    a->W = base + w.W;
    a->U = base + w.U;
    a->Vn = base + w.Vn;
    a->h = base + w.h;
    a->dVl = base + w.dVl;
    a->dVn = base + w.dVn;
    a->dh = base + w.dh;
    a->Dm = base + w.Dm;
    a->dG1 = (float *)(base + w.dG1);
    a->carry = (float *)(base + w.carry);
    a->fl = (int4 *)(base + w.fl);
    if (a->group > 1) {
        a->dq_part = (float *)(base + w.dq_part);
        a->dk_part = (float *)(base + w.dk_part);
    }
}

/* ---- device-pointer launchers --------------------------------------------------------------- */
/* The second stream and its events (fork/join of the forward's and backward's concurrent
 * kernels), one set per device, made on first use
 * and kept for the life of the process (the calls on one device are not meant to run
 * concurrently from several host threads). */
#define GDN_MAX_DEVICES 64
static void side_stream(cudaStream_t *aux, cudaEvent_t *ev /* [4] */) {
    static cudaStream_t streams[GDN_MAX_DEVICES];
    static cudaEvent_t events[GDN_MAX_DEVICES][4];
    int dev = 0;
    GDN_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= GDN_MAX_DEVICES) GDN_CUDA_DIE("device index %d out of range", dev);
    if (!streams[dev]) {
        /* high priority: its blocks (a long sequential pass) get placed before the per-chunk
         * kernels queued beside it take every multiprocessor */
        int lo = 0, hi = 0;
        GDN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
        GDN_CUDA_CHECK(cudaStreamCreateWithPriority(&streams[dev], cudaStreamNonBlocking, hi));
        for (int i = 0; i < 4; ++i)
            GDN_CUDA_CHECK(cudaEventCreateWithFlags(&events[dev][i], cudaEventDisableTiming));
    }
    *aux = streams[dev];
    for (int i = 0; i < 4; ++i) ev[i] = events[dev][i];
}

/* The argument block of a call: shape, workspace and the forward inputs. The inputs the mixer
 * ignores are not passed on (g NULL: no decay; beta is not read without the delta term). */
static gdn_delta_args delta_args(const gdn_cuda_delta_in *in, const char *who) {
    const gdn_delta_shape *s = &in->shape;
    gdn_cuda_delta_check_shape(s);
    const gdn_mixer_info *mx = gdn_mixer_get(s->variant);
    if (mx->has_decay && !in->g)
        GDN_CUDA_DIE("%s: mixer '%s' reads the log decay g, which is NULL", who, mx->name);
    if (mx->has_beta && !in->beta)
        GDN_CUDA_DIE("%s: mixer '%s' reads the write strength beta, which is NULL", who, mx->name);
    if (!in->workspace && s->T > 0) GDN_CUDA_DIE("%s: workspace is NULL", who);
    gdn_delta_args a;
    gdn_delta_args_init(&a, s, in->prec, in->scale, in->workspace);
    a.q = in->q;
    a.k = in->k;
    a.v = in->v;
    a.g = mx->has_decay ? in->g : NULL;
    a.beta = mx->has_beta ? in->beta : NULL;
    a.h0 = in->h0;
    a.doc = in->doc;
    return a;
}

/* No tokens: the state passes through, dst [B,H,K,V] = src, or zero where src is NULL. */
static void state_passthrough(float *dst, const float *src, const gdn_delta_shape *s, cudaStream_t st) {
    const size_t nst = (size_t)s->B * s->H * s->K * s->V * sizeof(float);
    if (dst && src) GDN_CUDA_CHECK(cudaMemcpyAsync(dst, src, nst, cudaMemcpyDeviceToDevice, st));
    else if (dst) GDN_CUDA_CHECK(cudaMemsetAsync(dst, 0, nst, st));
}

/* Orders `st` after `ready` (a cudaEvent_t; NULL: nothing to wait for). */
static void wait_ready(cudaStream_t st, void *ready) {
    if (ready) GDN_CUDA_CHECK(cudaStreamWaitEvent(st, (cudaEvent_t)ready, 0));
}

void gdn_cuda_delta_fwd(const gdn_cuda_delta_fwd_args *fa) {
    gdn_delta_args a = delta_args(&fa->in, "gdn_cuda_delta_fwd");
    const gdn_delta_shape *s = &fa->in.shape;
    const gdn_cuda_precision p = fa->in.prec;
    const float *h0 = fa->in.h0;
    void *h0_ready = fa->h0_ready;
    float *ht = fa->ht;
    a.o = fa->o;
    a.ht = ht;
    cudaStream_t st = (cudaStream_t)fa->in.stream;
    if (s->T == 0) {
        wait_ready(st, h0_ready);
        state_passthrough(ht, h0, s, st);
        return;
    }
    /* One pass where there is nothing to pipeline: a single chunk, or a state pass that takes
     * whole multiprocessors and so cannot run beside the other half's kernels */
    if (a.NT < 2 || !gdn_delta_state_fwd_shares(&a, p)) {
        gdn_delta_launch_intra(&a, p, st);
        wait_ready(st, h0_ready);
        gdn_delta_launch_state_fwd(&a, p, st, 0);
        gdn_delta_launch_output(&a, p, st);
        return;
    }
    /* Two halves of the chunks, pipelined: the state pass over the first half (on the second
     * stream) runs beside the intra kernel of the second half, and the second half's state pass
     * beside the first half's output; the state crosses the split in fp32 (workspace carry). */
    cudaStream_t aux;
    cudaEvent_t ev[4];
    side_stream(&aux, ev);
    gdn_delta_args lo = a, hi = a;
    lo.c1 = hi.c0 = a.NT / 2;
    gdn_delta_launch_intra(&lo, p, st);
    GDN_CUDA_CHECK(cudaEventRecord(ev[0], st));
    GDN_CUDA_CHECK(cudaStreamWaitEvent(aux, ev[0], 0));
    wait_ready(aux, h0_ready); /* only this pass reads h0; both intra kernels run before it */
    gdn_delta_launch_state_fwd(&lo, p, aux, 1);
    GDN_CUDA_CHECK(cudaEventRecord(ev[2], aux));
    gdn_delta_launch_intra(&hi, p, st);
    GDN_CUDA_CHECK(cudaEventRecord(ev[1], st));
    GDN_CUDA_CHECK(cudaStreamWaitEvent(aux, ev[1], 0));
    gdn_delta_launch_state_fwd(&hi, p, aux, 1);
    GDN_CUDA_CHECK(cudaEventRecord(ev[3], aux));
    GDN_CUDA_CHECK(cudaStreamWaitEvent(st, ev[2], 0));
    gdn_delta_launch_output(&lo, p, st);
    GDN_CUDA_CHECK(cudaStreamWaitEvent(st, ev[3], 0));
    gdn_delta_launch_output(&hi, p, st);
}

static void delta_bwd(const gdn_cuda_delta_bwd_args *ba, int recompute) {
    gdn_delta_args a = delta_args(&ba->in, recompute ? "gdn_cuda_delta_bwd" : "gdn_cuda_delta_bwd_saved");
    const gdn_delta_shape *s = &ba->in.shape;
    const gdn_cuda_precision p = ba->in.prec;
    const float *dht = ba->dht;
    float *dh0 = ba->dh0;
    void *dht_ready = ba->dht_ready;
    a.d_o = ba->d_o;
    a.dht = dht;
    a.dq = ba->dq;
    a.dk = ba->dk;
    a.dv = ba->dv;
    a.dg = ba->dg;
    a.dbeta = ba->dbeta;
    a.dh0 = dh0;
    cudaStream_t st = (cudaStream_t)ba->in.stream;
    if (s->T == 0) {
        wait_ready(st, dht_ready);
        state_passthrough(dh0, dht, s, st);
        return;
    }
    /* The dVl kernel (which needs only q, k, g, dO) runs on a second stream beside the
     * recomputed intra kernel, then the reverse state pass (which needs G, W and dVl) beside the
     * recomputed forward state pass (h, v_new) and the D^T kernel, which need neither. The
     * reverse pass alone reads dht, so a late dht delays nothing else. */
    cudaStream_t aux;
    cudaEvent_t ev[4];
    side_stream(&aux, ev);
    cudaEvent_t fork = ev[0], join = ev[1], intra_done = ev[2];
    GDN_CUDA_CHECK(cudaEventRecord(fork, st));
    GDN_CUDA_CHECK(cudaStreamWaitEvent(aux, fork, 0));
    gdn_delta_launch_dv_local(&a, p, aux, recompute ? 1 | 4 : 1); /* dVl (G from g if recomputing) */
    if (recompute) {
        gdn_delta_launch_intra(&a, p, st); /* G, T, W, U */
        GDN_CUDA_CHECK(cudaEventRecord(intra_done, st));
        GDN_CUDA_CHECK(cudaStreamWaitEvent(aux, intra_done, 0));
    }
    wait_ready(aux, dht_ready);
    /* beside the recomputed forward state pass, each sized for half a multiprocessor; on saved
     * intermediates it runs beside the D^T kernel only, with the whole ring depth (B4 T4096
     * H16 D128: fwd+bwd saved 1.53 -> 1.47 ms) */
    gdn_delta_launch_state_bwd(&a, p, aux, recompute);  /* dh, dv_new, dh0 */
    GDN_CUDA_CHECK(cudaEventRecord(join, aux));
    if (recompute) gdn_delta_launch_state_fwd(&a, p, st, 1); /* h, v_new (ht not needed) */
    gdn_delta_launch_dv_local(&a, p, st, 2);                 /* D^T, intra gate term */
    GDN_CUDA_CHECK(cudaStreamWaitEvent(st, join, 0));
    gdn_delta_launch_grad(&a, p, st);
}

void gdn_cuda_delta_bwd(const gdn_cuda_delta_bwd_args *a) { delta_bwd(a, 1); }

void gdn_cuda_delta_bwd_saved(const gdn_cuda_delta_bwd_args *a) { delta_bwd(a, 0); }
