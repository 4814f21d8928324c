/* The NCCL implementation of the data plane (comm/comm_nccl.h): device buffers, one stream for
 * NCCL work ordered after a compute stream with events, host waits polled with a deadline, one
 * communicator per group (the world's, and ncclCommSplit ones for groups between one rank and
 * the world). Built only when CMake found nccl.h and libnccl (GDN_HAVE_NCCL). */
#include "comm/comm_nccl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "model/check.h"

typedef struct {
    ncclComm_t comm;       /* the world */
    ncclComm_t dp, sp;     /* split from the world when the group is neither this rank alone nor the
                              world (or GDN_NCCL_SPLIT=1 and the group is the world); else NULL */
    cudaStream_t stream;   /* every NCCL operation */
    cudaStream_t compute;  /* operations start after its work so far */
    cudaEvent_t ready;     /* recorded on compute, waited for by stream */
    cudaEvent_t received;  /* recorded on stream after a transfer group with receives, waited for by compute */
    int in_group, group_recvs; /* between gdn_nccl_p2p_start and _end; receives in that group */
    int device;
    char version[32];
} nccl_impl;

static nccl_impl *impl_of(const gdn_comm *c) { return (nccl_impl *)c->impl; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *group_name(gdn_group g) {
    return g == GDN_WORLD ? "world" : g == GDN_DP ? "data-parallel group" : "sequence-parallel group";
}

static void check_cuda(const gdn_comm *c, cudaError_t e, const char *op, const char *what) {
    if (e != cudaSuccess)
        gdn_comm_abort(c, "CUDA error in %s of %s on GPU %d: %s", op, what, impl_of(c)->device,
                       cudaGetErrorString(e));
}

static void check_nccl(const gdn_comm *c, ncclResult_t r, const char *op, const char *what) {
    if (r == ncclSuccess) return;
    const char *detail = ncclGetLastError(impl_of(c)->comm);
    gdn_comm_abort(c, "NCCL error in %s of %s: %s%s%s", op, what, ncclGetErrorString(r),
                   detail && *detail ? ": " : "", detail ? detail : "");
}

static ncclDataType_t nccl_type(gdn_dtype t) {
    switch (t) {
    case GDN_F32: return ncclFloat32;
    case GDN_F64: return ncclFloat64;
    case GDN_I64: return ncclInt64;
    case GDN_BF16: return ncclBfloat16;
    }
    return ncclFloat32;
}

/* The communicator of group g (ranks numbered as in the group), or NULL when the group is this
 * rank alone (a local operation). */
static ncclComm_t group_comm(const gdn_comm *c, gdn_group g) {
    const nccl_impl *n = impl_of(c);
    if (gdn_comm_group_size(c, g) == 1) return NULL;
    if (g == GDN_DP && n->dp) return n->dp;
    if (g == GDN_SP && n->sp) return n->sp;
    return n->comm; /* the world, or a group that is the world */
}

/* Checks NCCL's asynchronous error state of every communicator. */
static void check_async(const gdn_comm *c, const char *op, const char *what) {
    const nccl_impl *n = impl_of(c);
    const ncclComm_t comms[3] = {n->comm, n->dp, n->sp};
    for (int i = 0; i < 3; i++) {
        if (!comms[i]) continue;
        ncclResult_t async = ncclSuccess;
        check_nccl(c, ncclCommGetAsyncError(comms[i], &async), op, what);
        if (async != ncclSuccess && async != ncclInProgress) check_nccl(c, async, op, what);
    }
}

/* World rank of group rank r. */
static int world_rank_of(const gdn_comm *c, gdn_group g, int r) {
    return g == GDN_WORLD ? r : g == GDN_DP ? r * c->sp + c->sp_rank : c->dp_rank * c->sp + r;
}

/* Polls stream until its work is done; past the deadline, or on an asynchronous NCCL error,
 * stops the job naming the operation (peer >= 0: the rank it waits for). */
static void poll_stream(gdn_comm *c, cudaStream_t s, int check_comm, const char *op, const char *what,
                        gdn_group g, int peer) {
    const double t0 = now_s();
    const struct timespec nap = {0, 50000}; /* 50 us */
    for (long tries = 0;; tries++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) check_cuda(c, e, op, what);
        if (tries < 200) continue;
        nanosleep(&nap, NULL);
        if ((tries & 63) != 0) continue;
        if (check_comm) check_async(c, op, what);
        if (now_s() - t0 > c->timeout_s) {
            if (peer >= 0)
                gdn_comm_abort(c, "no progress for %.0f s in %s of %s with rank %d (NCCL): that rank stopped "
                               "responding (see its own messages); GDN_COMM_TIMEOUT sets this limit",
                               c->timeout_s, op, what, world_rank_of(c, g, peer));
            gdn_comm_abort(c, "no progress for %.0f s in %s of %s over the %s (NCCL): a rank stopped "
                           "responding (see its own messages); GDN_COMM_TIMEOUT sets this limit",
                           c->timeout_s, op, what, group_name(g));
        }
    }
}

/* Collectives and host waits are not part of a transfer group. */
static void in_no_group(const gdn_comm *c, const char *op, const char *what) {
    if (impl_of(c)->in_group)
        gdn_comm_abort(c, "%s of %s inside an open transfer group (gdn_nccl_p2p_end first)", op, what);
}

/* Orders the NCCL stream after the compute stream's work so far. */
static void after_compute(gdn_comm *c, const char *op, const char *what) {
    nccl_impl *n = impl_of(c);
    check_cuda(c, cudaEventRecord(n->ready, n->compute), op, what);
    check_cuda(c, cudaStreamWaitEvent(n->stream, n->ready, 0), op, what);
}

void gdn_nccl_wait(gdn_comm *c, const char *what) {
    nccl_impl *n = impl_of(c);
    in_no_group(c, "wait", what);
    /* the compute stream waits for NCCL work only after receives (gdn_nccl_p2p_end), which come
     * before the work waited for here; the time after it is communication the computation did
     * not hide */
    poll_stream(c, n->compute, 0, "computation before the wait for", what, GDN_WORLD, -1);
    const double t0 = now_s();
    poll_stream(c, n->stream, 1, "completion", what, GDN_WORLD, -1);
    c->wait_s += now_s() - t0;
}

void gdn_nccl_all_reduce_start(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                               const char *what) {
    if (op == GDN_AVG && t == GDN_I64) GDN_DIE("all-reduce of %s: average of integers is not supported", what);
    in_no_group(c, "all-reduce", what);
    c->bytes.all_reduce += n * gdn_dtype_size(t);
    ncclComm_t comm = group_comm(c, g);
    if (!comm || n == 0) return;
    nccl_impl *m = impl_of(c);
    const ncclRedOp_t r = op == GDN_SUM ? ncclSum : op == GDN_AVG ? ncclAvg : op == GDN_MAX ? ncclMax : ncclMin;
    after_compute(c, "all-reduce", what);
    check_nccl(c, ncclAllReduce(buf, buf, n, nccl_type(t), r, comm, m->stream), "all-reduce", what);
}

static void nccl_all_reduce(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                            const char *what) {
    gdn_nccl_all_reduce_start(c, g, buf, n, t, op, what);
    gdn_nccl_wait(c, what);
}

static void nccl_all_gather(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n, gdn_dtype t,
                            const char *what) {
    nccl_impl *m = impl_of(c);
    in_no_group(c, "all-gather", what);
    const size_t bytes = n * gdn_dtype_size(t);
    c->bytes.all_gather += bytes;
    ncclComm_t comm = group_comm(c, g);
    if (!comm) {
        if (recv != send)
            check_cuda(c, cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, m->compute), "all-gather",
                       what);
        return;
    }
    after_compute(c, "all-gather", what);
    check_nccl(c, ncclAllGather(send, recv, n, nccl_type(t), comm, m->stream), "all-gather", what);
    gdn_nccl_wait(c, what);
}

static void nccl_reduce_scatter(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n, gdn_dtype t,
                                gdn_redop op, const char *what) {
    nccl_impl *m = impl_of(c);
    if (op == GDN_AVG && t == GDN_I64) GDN_DIE("reduce-scatter of %s: average of integers is not supported", what);
    in_no_group(c, "reduce-scatter", what);
    const size_t bytes = n * gdn_dtype_size(t);
    c->bytes.reduce_scatter += (size_t)gdn_comm_group_size(c, g) * bytes;
    ncclComm_t comm = group_comm(c, g);
    if (!comm) { /* over one rank the reduction is the input */
        if (recv != send)
            check_cuda(c, cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, m->compute), "reduce-scatter",
                       what);
        return;
    }
    const ncclRedOp_t r = op == GDN_SUM ? ncclSum : op == GDN_AVG ? ncclAvg : op == GDN_MAX ? ncclMax : ncclMin;
    after_compute(c, "reduce-scatter", what);
    check_nccl(c, ncclReduceScatter(send, recv, n, nccl_type(t), r, comm, m->stream), "reduce-scatter", what);
    gdn_nccl_wait(c, what);
}

static void nccl_broadcast(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, int root,
                           const char *what) {
    nccl_impl *m = impl_of(c);
    in_no_group(c, "broadcast", what);
    if (gdn_comm_group_rank(c, g) == root) c->bytes.broadcast += n * gdn_dtype_size(t);
    ncclComm_t comm = group_comm(c, g);
    if (!comm) return;
    after_compute(c, "broadcast", what);
    check_nccl(c, ncclBroadcast(buf, buf, n, nccl_type(t), root, comm, m->stream), "broadcast", what);
    gdn_nccl_wait(c, what);
}

/* The communicator for a transfer with group rank peer; stops the job when there is none. */
static ncclComm_t peer_comm(const gdn_comm *c, gdn_group g, int peer, const char *op, const char *what) {
    ncclComm_t comm = group_comm(c, g);
    const int size = gdn_comm_group_size(c, g), me = gdn_comm_group_rank(c, g);
    if (!comm)
        gdn_comm_abort(c, "%s of %s with rank %d: the %s is this rank alone", op, what, peer, group_name(g));
    if (peer < 0 || peer >= size || peer == me)
        gdn_comm_abort(c, "%s of %s: rank %d of the %s (%d ranks, this one is %d) is not a peer", op, what, peer,
                       group_name(g), size, me);
    return comm;
}

static void nccl_send(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n, gdn_dtype t, int tag,
                      const char *what) {
    (void)tag; /* NCCL keeps the order of the messages between two ranks */
    nccl_impl *m = impl_of(c);
    in_no_group(c, "send", what);
    ncclComm_t comm = peer_comm(c, g, peer, "send", what);
    after_compute(c, "send", what);
    check_nccl(c, ncclSend(buf, n, nccl_type(t), peer, comm, m->stream), "send", what);
    c->bytes.send += n * gdn_dtype_size(t);
}

static void nccl_recv(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t, int tag,
                      const char *what) {
    (void)tag;
    nccl_impl *m = impl_of(c);
    in_no_group(c, "receive", what);
    ncclComm_t comm = peer_comm(c, g, peer, "receive", what);
    after_compute(c, "receive", what);
    check_nccl(c, ncclRecv(buf, n, nccl_type(t), peer, comm, m->stream), "receive", what);
    poll_stream(c, m->compute, 0, "computation before the receive of", what, g, -1);
    const double t0 = now_s();
    poll_stream(c, m->stream, 1, "receive", what, g, peer);
    c->wait_s += now_s() - t0;
}

static void nccl_wait_sends(gdn_comm *c) { gdn_nccl_wait(c, "sent tensors"); }

/* ---- transfer groups (gdn_nccl_p2p_*) ---- */

void gdn_nccl_p2p_start(gdn_comm *c, const char *what) {
    nccl_impl *m = impl_of(c);
    in_no_group(c, "transfers", what);
    after_compute(c, "transfers", what);
    check_nccl(c, ncclGroupStart(), "transfers", what);
    m->in_group = 1;
    m->group_recvs = 0;
}

static void in_group(const gdn_comm *c, const char *op, const char *what) {
    if (!impl_of(c)->in_group)
        gdn_comm_abort(c, "%s of %s outside a transfer group (gdn_nccl_p2p_start first)", op, what);
}

void gdn_nccl_p2p_send(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n, gdn_dtype t,
                       const char *what) {
    nccl_impl *m = impl_of(c);
    in_group(c, "send", what);
    ncclComm_t comm = peer_comm(c, g, peer, "send", what);
    check_nccl(c, ncclSend(buf, n, nccl_type(t), peer, comm, m->stream), "send", what);
    c->bytes.send += n * gdn_dtype_size(t);
}

void gdn_nccl_p2p_recv(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t,
                       const char *what) {
    nccl_impl *m = impl_of(c);
    in_group(c, "receive", what);
    ncclComm_t comm = peer_comm(c, g, peer, "receive", what);
    check_nccl(c, ncclRecv(buf, n, nccl_type(t), peer, comm, m->stream), "receive", what);
    m->group_recvs++;
}

void gdn_nccl_p2p_end_event(gdn_comm *c, void *done, void *received, const char *what) {
    nccl_impl *m = impl_of(c);
    in_group(c, "end of the transfers", what);
    m->in_group = 0;
    check_nccl(c, ncclGroupEnd(), "transfers", what);
    if (done) check_cuda(c, cudaEventRecord((cudaEvent_t)done, m->stream), "transfers", what);
    if (received) {
        check_cuda(c, cudaEventRecord((cudaEvent_t)received, m->stream), "transfers", what);
    } else if (m->group_recvs) {
        check_cuda(c, cudaEventRecord(m->received, m->stream), "transfers", what);
        check_cuda(c, cudaStreamWaitEvent(m->compute, m->received, 0), "transfers", what);
    }
}

void gdn_nccl_p2p_end(gdn_comm *c, void *done, const char *what) {
    gdn_nccl_p2p_end_event(c, done, NULL, what);
}

void gdn_nccl_sync(gdn_comm *c, const char *what) {
    in_no_group(c, "wait", what);
    poll_stream(c, impl_of(c)->stream, 1, "completion", what, GDN_WORLD, -1);
}

static void nccl_set_stream(gdn_comm *c, void *stream) { gdn_nccl_set_stream(c, stream); }

static const gdn_comm_ops nccl_ops = {.name = "nccl",
                                      .all_reduce = nccl_all_reduce,
                                      .all_gather = nccl_all_gather,
                                      .reduce_scatter = nccl_reduce_scatter,
                                      .broadcast = nccl_broadcast,
                                      .send = nccl_send,
                                      .recv = nccl_recv,
                                      .wait_sends = nccl_wait_sends,
                                      .all_reduce_start = gdn_nccl_all_reduce_start,
                                      .wait = gdn_nccl_wait,
                                      .set_stream = nccl_set_stream};

void gdn_nccl_set_stream(gdn_comm *c, void *stream) { impl_of(c)->compute = (cudaStream_t)stream; }

int gdn_nccl_device(const gdn_comm *c) { return impl_of(c)->device; }

const char *gdn_nccl_version(const gdn_comm *c) { return impl_of(c)->version; }

/* The GPU of this rank: local_rank when the node shows each rank all of its GPUs, 0 when it
 * shows each rank one (a launcher that binds GPUs to ranks); -1 with the reason otherwise. */
static int pick_device(const gdn_comm *ctl, char *err, size_t errlen) {
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "no usable GPU: %s", cudaGetErrorString(e));
        return -1;
    }
    if (n_dev >= ctl->local_size) return ctl->local_rank;
    if (n_dev == 1) return 0;
    snprintf(err, errlen, "this node runs %d ranks but shows %d GPUs: start one rank per GPU", ctl->local_size,
             n_dev);
    return -1;
}

/* Communicators of the data- and sequence-parallel groups that are neither one rank nor the world
 * (split_all: the world too), numbered as in the group. Collective over the world: every rank
 * makes the same calls in the same order. */
static ncclResult_t split_groups(nccl_impl *n, const gdn_comm *ctl, int split_all) {
    ncclResult_t r = ncclSuccess;
    if (ctl->sp > 1 && (ctl->sp < ctl->size || split_all))
        r = ncclCommSplit(n->comm, ctl->dp_rank, ctl->sp_rank, &n->sp, NULL);
    if (r == ncclSuccess && ctl->dp > 1 && (ctl->dp < ctl->size || split_all))
        r = ncclCommSplit(n->comm, ctl->sp_rank, ctl->dp_rank, &n->dp, NULL);
    return r;
}

gdn_comm *gdn_nccl_init(gdn_comm *ctl, char *err, size_t errlen) {
    err[0] = 0;
    nccl_impl *n = GDN_CALLOC(1, sizeof *n);
    n->device = pick_device(ctl, err, errlen);
    cudaError_t e = cudaSuccess;
    if (n->device >= 0 && (e = cudaSetDevice(n->device)) != cudaSuccess)
        snprintf(err, errlen, "cannot use GPU %d: %s", n->device, cudaGetErrorString(e));
    /* rank 0 makes the id and sends it with its GDN_NCCL_SPLIT setting in the first word (the
     * splits are collective: every rank must take the same decision) */
    int64_t id_words[1 + (sizeof(ncclUniqueId) + 7) / 8];
    memset(id_words, 0, sizeof id_words);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (ctl->rank == 0 && !err[0]) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) snprintf(err, errlen, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
        memcpy(id_words + 1, &id, sizeof id);
        const char *split = getenv("GDN_NCCL_SPLIT");
        id_words[0] = split && !strcmp(split, "1");
    }
    int bad = gdn_comm_agree(ctl, err[0] != 0);
    if (bad < 0) {
        gdn_broadcast(ctl, GDN_WORLD, id_words, sizeof id_words / 8, GDN_I64, 0, "NCCL unique id");
        memcpy(&id, id_words + 1, sizeof id);
        ncclResult_t r = ncclCommInitRank(&n->comm, ctl->size, id, ctl->rank);
        if (r != ncclSuccess)
            snprintf(err, errlen, "ncclCommInitRank on GPU %d failed: %s%s%s", n->device, ncclGetErrorString(r),
                     *ncclGetLastError(NULL) ? ": " : "", ncclGetLastError(NULL));
        bad = gdn_comm_agree(ctl, err[0] != 0);
    }
    if (bad < 0) {
        ncclResult_t r = split_groups(n, ctl, (int)id_words[0]);
        if (r != ncclSuccess)
            snprintf(err, errlen, "ncclCommSplit (the %d x %d grid's groups) on GPU %d failed: %s%s%s", ctl->dp,
                     ctl->sp, n->device, ncclGetErrorString(r), *ncclGetLastError(n->comm) ? ": " : "",
                     ncclGetLastError(n->comm));
        bad = gdn_comm_agree(ctl, err[0] != 0);
    }
    if (bad >= 0) {
        if (!err[0] && ctl->rank == 0)
            snprintf(err, errlen, "rank %d could not join the NCCL communicator (see its message)", bad);
        if (n->sp) ncclCommDestroy(n->sp);
        if (n->dp) ncclCommDestroy(n->dp);
        if (n->comm) ncclCommDestroy(n->comm);
        free(n);
        return NULL;
    }
    int v = 0;
    ncclGetVersion(&v); /* major * 10000 + minor * 100 + patch since NCCL 2.9 */
    snprintf(n->version, sizeof n->version, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    gdn_comm *c = GDN_CALLOC(1, sizeof *c);
    c->rank = ctl->rank;
    c->size = ctl->size;
    c->local_rank = ctl->local_rank;
    c->local_size = ctl->local_size;
    c->dp = ctl->dp;
    c->sp = ctl->sp;
    c->dp_rank = ctl->dp_rank;
    c->sp_rank = ctl->sp_rank;
    c->timeout_s = ctl->timeout_s;
    c->ops = &nccl_ops;
    c->impl = n;
    check_cuda(c, cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking), "start", "the NCCL stream");
    check_cuda(c, cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming), "start", "the NCCL stream");
    check_cuda(c, cudaEventCreateWithFlags(&n->received, cudaEventDisableTiming), "start", "the NCCL stream");
    return c;
}

void gdn_nccl_finalize(gdn_comm *c) {
    if (!c) return;
    nccl_impl *n = impl_of(c);
    gdn_nccl_wait(c, "pending operations");
    if (n->sp) check_nccl(c, ncclCommDestroy(n->sp), "shutdown", "the sequence-parallel group's communicator");
    if (n->dp) check_nccl(c, ncclCommDestroy(n->dp), "shutdown", "the data-parallel group's communicator");
    check_nccl(c, ncclCommDestroy(n->comm), "shutdown", "the NCCL communicator");
    check_cuda(c, cudaEventDestroy(n->ready), "shutdown", "the NCCL stream");
    check_cuda(c, cudaEventDestroy(n->received), "shutdown", "the NCCL stream");
    check_cuda(c, cudaStreamDestroy(n->stream), "shutdown", "the NCCL stream");
    free(n);
    free(c);
}
