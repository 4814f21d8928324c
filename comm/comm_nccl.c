/* The NCCL implementation of the data plane (comm/comm_nccl.h): device buffers, one stream for
 * NCCL work ordered after a compute stream with events, host waits polled with a deadline.
 * Built only when CMake found nccl.h and libnccl (GDN_HAVE_NCCL). */
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
    ncclComm_t comm;
    cudaStream_t stream;  /* every NCCL operation */
    cudaStream_t compute; /* operations start after its work so far */
    cudaEvent_t ready;    /* recorded on compute, waited for by stream */
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
    }
    return ncclFloat32;
}

/* 1 when the group is this rank alone (a local operation), 0 when it is the world (the NCCL
 * communicator); any other group stops the job. */
static int group_is_self(const gdn_comm *c, gdn_group g, const char *op, const char *what) {
    const int size = gdn_comm_group_size(c, g);
    if (size == 1) return 1;
    if (size == c->size) return 0;
    gdn_comm_abort(c, "%s of %s over the %s (%d of %d ranks): NCCL groups other than the world are not "
                   "available yet (sequence parallelism on GPUs); use --backend cpu or --sp 1",
                   op, what, group_name(g), size, c->size);
}

/* Polls stream until its work is done; past the deadline, or on an asynchronous NCCL error,
 * stops the job naming the operation (peer >= 0: the rank it waits for). */
static void poll_stream(gdn_comm *c, cudaStream_t s, int check_comm, const char *op, const char *what,
                        gdn_group g, int peer) {
    nccl_impl *n = impl_of(c);
    const double t0 = now_s();
    const struct timespec nap = {0, 50000}; /* 50 us */
    for (long tries = 0;; tries++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) check_cuda(c, e, op, what);
        if (tries < 200) continue;
        nanosleep(&nap, NULL);
        if ((tries & 63) != 0) continue;
        if (check_comm) {
            ncclResult_t async = ncclSuccess;
            check_nccl(c, ncclCommGetAsyncError(n->comm, &async), op, what);
            if (async != ncclSuccess && async != ncclInProgress) check_nccl(c, async, op, what);
        }
        if (now_s() - t0 > c->timeout_s) {
            if (peer >= 0)
                gdn_comm_abort(c, "no progress for %.0f s in %s of %s with rank %d (NCCL): that rank stopped "
                               "responding (see its own messages); GDN_COMM_TIMEOUT sets this limit",
                               c->timeout_s, op, what, peer);
            gdn_comm_abort(c, "no progress for %.0f s in %s of %s over the %s (NCCL): a rank stopped "
                           "responding (see its own messages); GDN_COMM_TIMEOUT sets this limit",
                           c->timeout_s, op, what, group_name(g));
        }
    }
}

/* Orders the NCCL stream after the compute stream's work so far. */
static void after_compute(gdn_comm *c, const char *op, const char *what) {
    nccl_impl *n = impl_of(c);
    check_cuda(c, cudaEventRecord(n->ready, n->compute), op, what);
    check_cuda(c, cudaStreamWaitEvent(n->stream, n->ready, 0), op, what);
}

void gdn_nccl_wait(gdn_comm *c, const char *what) {
    nccl_impl *n = impl_of(c);
    /* the compute stream never waits for NCCL work, so it finishes on its own; the time after
     * that is communication the computation did not hide */
    poll_stream(c, n->compute, 0, "computation before the wait for", what, GDN_WORLD, -1);
    const double t0 = now_s();
    poll_stream(c, n->stream, 1, "completion", what, GDN_WORLD, -1);
    c->wait_s += now_s() - t0;
}

void gdn_nccl_all_reduce_start(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                               const char *what) {
    if (op == GDN_AVG && t == GDN_I64) GDN_DIE("all-reduce of %s: average of integers is not supported", what);
    c->bytes.all_reduce += n * gdn_dtype_size(t);
    if (group_is_self(c, g, "all-reduce", what) || n == 0) return;
    nccl_impl *m = impl_of(c);
    const ncclRedOp_t r = op == GDN_SUM ? ncclSum : op == GDN_AVG ? ncclAvg : op == GDN_MAX ? ncclMax : ncclMin;
    after_compute(c, "all-reduce", what);
    check_nccl(c, ncclAllReduce(buf, buf, n, nccl_type(t), r, m->comm, m->stream), "all-reduce", what);
}

static void nccl_all_reduce(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                            const char *what) {
    gdn_nccl_all_reduce_start(c, g, buf, n, t, op, what);
    gdn_nccl_wait(c, what);
}

static void nccl_all_gather(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n, gdn_dtype t,
                            const char *what) {
    nccl_impl *m = impl_of(c);
    const size_t bytes = n * gdn_dtype_size(t);
    c->bytes.all_gather += bytes;
    if (group_is_self(c, g, "all-gather", what)) {
        if (recv != send)
            check_cuda(c, cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, m->compute), "all-gather",
                       what);
        return;
    }
    after_compute(c, "all-gather", what);
    check_nccl(c, ncclAllGather(send, recv, n, nccl_type(t), m->comm, m->stream), "all-gather", what);
    gdn_nccl_wait(c, what);
}

static void nccl_broadcast(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, int root,
                           const char *what) {
    nccl_impl *m = impl_of(c);
    if (gdn_comm_group_rank(c, g) == root) c->bytes.broadcast += n * gdn_dtype_size(t);
    if (group_is_self(c, g, "broadcast", what)) return;
    after_compute(c, "broadcast", what);
    check_nccl(c, ncclBroadcast(buf, buf, n, nccl_type(t), root, m->comm, m->stream), "broadcast", what);
    gdn_nccl_wait(c, what);
}

static void nccl_send(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n, gdn_dtype t, int tag,
                      const char *what) {
    (void)tag; /* NCCL keeps the order of the messages between two ranks */
    nccl_impl *m = impl_of(c);
    if (group_is_self(c, g, "send", what))
        gdn_comm_abort(c, "send of %s to rank %d: the %s is this rank alone", what, peer, group_name(g));
    after_compute(c, "send", what);
    check_nccl(c, ncclSend(buf, n, nccl_type(t), peer, m->comm, m->stream), "send", what);
    c->bytes.send += n * gdn_dtype_size(t);
}

static void nccl_recv(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t, int tag,
                      const char *what) {
    (void)tag;
    nccl_impl *m = impl_of(c);
    if (group_is_self(c, g, "receive", what))
        gdn_comm_abort(c, "receive of %s from rank %d: the %s is this rank alone", what, peer, group_name(g));
    after_compute(c, "receive", what);
    check_nccl(c, ncclRecv(buf, n, nccl_type(t), peer, m->comm, m->stream), "receive", what);
    poll_stream(c, m->compute, 0, "computation before the receive of", what, g, -1);
    const double t0 = now_s();
    poll_stream(c, m->stream, 1, "receive", what, g, peer);
    c->wait_s += now_s() - t0;
}

static void nccl_wait_sends(gdn_comm *c) { gdn_nccl_wait(c, "sent tensors"); }

static const gdn_comm_ops nccl_ops = {"nccl", nccl_all_reduce, nccl_all_gather, nccl_broadcast,
                                      nccl_send, nccl_recv, nccl_wait_sends};

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

gdn_comm *gdn_nccl_init(gdn_comm *ctl, char *err, size_t errlen) {
    err[0] = 0;
    nccl_impl *n = GDN_CALLOC(1, sizeof *n);
    n->device = pick_device(ctl, err, errlen);
    cudaError_t e = cudaSuccess;
    if (n->device >= 0 && (e = cudaSetDevice(n->device)) != cudaSuccess)
        snprintf(err, errlen, "cannot use GPU %d: %s", n->device, cudaGetErrorString(e));
    /* rank 0 makes the id; its failure travels with it in the first word */
    int64_t id_words[1 + (sizeof(ncclUniqueId) + 7) / 8];
    memset(id_words, 0, sizeof id_words);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (ctl->rank == 0 && !err[0]) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) snprintf(err, errlen, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
        memcpy(id_words + 1, &id, sizeof id);
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
    if (bad >= 0) {
        if (!err[0] && ctl->rank == 0)
            snprintf(err, errlen, "rank %d could not join the NCCL communicator (see its message)", bad);
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
    return c;
}

void gdn_nccl_finalize(gdn_comm *c) {
    if (!c) return;
    nccl_impl *n = impl_of(c);
    gdn_nccl_wait(c, "pending operations");
    check_nccl(c, ncclCommDestroy(n->comm), "shutdown", "the NCCL communicator");
    check_cuda(c, cudaEventDestroy(n->ready), "shutdown", "the NCCL stream");
    check_cuda(c, cudaStreamDestroy(n->stream), "shutdown", "the NCCL stream");
    free(n);
    free(c);
}
