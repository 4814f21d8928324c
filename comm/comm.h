/* Processes of a distributed run: MPI bootstrap, the process grid world = dp x sp, the
 * collectives training needs, and failure handling.
 *
 * Grid: consecutive ranks form a sequence-parallel group (docs/design.md section 6): world rank
 * r = dp_rank * sp + sp_rank. The dp group of a rank holds the ranks with its sp_rank (one per
 * data-parallel replica); its sp group holds the sp ranks that split one sequence.
 *
 * Two layers:
 * - Control (always MPI, host memory): bootstrap, local rank for one-GPU-per-rank placement,
 *   agreement on errors and stop requests, abort. A NCCL build still bootstraps here (rank 0
 *   makes the ncclUniqueId and broadcasts it with gdn_comm_broadcast).
 * - Data (gdn_comm_ops): all-reduce, all-gather, reduce-scatter, broadcast and point-to-point
 *   transfers of tensors. The MPI implementation works on host buffers; a NCCL implementation provides the
 *   same table over device buffers and a stream, and the trainer does not change.
 *
 * Failures: no call here hangs forever. A rank that dies is reported by the launcher (mpiexec
 * and srun name the rank and end the job). A rank that
 * hits an error calls gdn_comm_abort (fatal GDN_DIE errors are routed there too), which prints
 * "gdn: rank R: <cause>" and takes the whole job down. Every wait on another rank polls with
 * a deadline (GDN_COMM_TIMEOUT seconds, default 600): a peer that stopped answering without
 * dying ends the job with a message naming the operation and the peer. */
#ifndef GDN_COMM_H
#define GDN_COMM_H

#include <stddef.h>
#include <stdint.h>

/* GDN_BF16 (bfloat16, 2 bytes): moved as raw bits by every backend; only NCCL reduces it (the MPI
 * data plane has no bf16 arithmetic and stops with a message). */
typedef enum { GDN_F32, GDN_F64, GDN_I64, GDN_BF16 } gdn_dtype;
typedef enum { GDN_SUM, GDN_AVG, GDN_MAX, GDN_MIN } gdn_redop;
typedef enum { GDN_WORLD, GDN_DP, GDN_SP } gdn_group;

typedef struct gdn_comm gdn_comm;

/* The data-plane collectives of one backend. Buffers are host memory for MPI (device memory
 * for a NCCL backend). Every call involves all ranks of the group, in the same order. */
typedef struct {
    const char *name;
    /* In place: buf [n] becomes the reduction over the group, identical on every rank. */
    void (*all_reduce)(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                       const char *what);
    /* recv [group size, n] = every rank's send [n], in group-rank order. In place when send is
     * recv + group rank * n (this rank's block of recv). */
    void (*all_gather)(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n,
                       gdn_dtype t, const char *what);
    /* recv [n] = block (group rank) of the reduction over the group of every rank's
     * send [group size, n] (sum, average, max, min; float, double, int64): the reduction of a
     * buffer of which each rank keeps only its own block. In place when recv is
     * send + group rank * n; send's other blocks are then undefined afterwards. */
    void (*reduce_scatter)(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n,
                           gdn_dtype t, gdn_redop op, const char *what);
    /* buf [n] of group rank root to every rank of the group. */
    void (*broadcast)(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, int root,
                      const char *what);
    /* Starts sending buf [n] to group rank peer and returns; buf must stay unchanged until
     * wait_sends. Messages between two ranks with the same tag arrive in order. */
    void (*send)(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n, gdn_dtype t,
                 int tag, const char *what);
    /* Receives buf [n] from group rank peer (blocks, with the deadline). */
    void (*recv)(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t, int tag,
                 const char *what);
    /* Completes every send started by this rank. */
    void (*wait_sends)(gdn_comm *c);
    /* Optional (NULL: all_reduce, which completes before returning): starts an in-place
     * all-reduce ordered after the work enqueued so far on the buffers' device and returns;
     * the result is there after wait. */
    void (*all_reduce_start)(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                             const char *what);
    /* Optional (NULL: nothing to wait for): completes every operation started, and orders the
     * device work that follows after them. */
    void (*wait)(gdn_comm *c, const char *what);
    /* Optional: the stream (a cudaStream_t) whose work operations are ordered after and before. */
    void (*set_stream)(gdn_comm *c, void *stream);
} gdn_comm_ops;

/* The data plane of a world of one process (comm/comm_self.c). */
extern const gdn_comm_ops gdn_comm_ops_self;

/* Bytes this rank handed to each kind of operation (payload sizes, not wire bytes): the buffer
 * of an all-reduce, this rank's block of an all-gather, the whole input of a reduce-scatter. */
typedef struct {
    uint64_t all_reduce, all_gather, reduce_scatter, broadcast, send;
} gdn_comm_bytes;

struct gdn_comm {
    int rank, size;             /* world */
    int local_rank, local_size; /* ranks on this node: pick GPU local_rank */
    int dp, sp;                 /* grid: size = dp * sp */
    int dp_rank, sp_rank;       /* rank = dp_rank * sp + sp_rank */
    const gdn_comm_ops *ops;    /* data plane */
    gdn_comm_bytes bytes;
    int pending_sends;          /* point-to-point sends started and not yet waited for (MPI) */
    double wait_s;              /* time spent in data-plane calls waiting for other ranks */
    double timeout_s;           /* deadline of any single wait */
    void *impl;                 /* backend state (NULL for a world of one without MPI) */
};

/* Joins the job's ranks and builds the grid with sequence-parallel groups of sp ranks.
 * Started by a launcher (mpiexec, srun --mpi=pmix, ...: recognised by its environment), this
 * initialises MPI; a plain run is a world of one without MPI (gdn_comm_ops_self), so that it
 * starts no MPI runtime. GDN_MPI=1 forces MPI (a launcher not recognised), GDN_MPI=0 forbids
 * it. When the world size is not a multiple of sp, every rank returns NULL with err empty:
 * rank 0 has printed the reason to stderr before any rank returns (once, and never lost to
 * the launcher killing the job); a world of one returns the reason in err. From the first
 * successful call on, GDN_DIE goes to gdn_comm_abort. */
gdn_comm *gdn_comm_init(int *argc, char ***argv, int sp, char *err, size_t errlen);
/* Completes pending sends, frees the grid and finalizes MPI. */
void gdn_comm_finalize(gdn_comm *c);

/* Prints "gdn: rank R: <message>" (alone: "gdn: <message>") to stderr and ends every rank of
 * the job (exit status 1). */
void gdn_comm_abort(const gdn_comm *c, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

/* Collective over the world: every rank passes its own flag (0 = fine); returns the lowest rank
 * whose flag is set, or -1 when none is. Used to stop all ranks together on an error that one
 * of them met and reported, or on a signal that reached only some of them. */
int gdn_comm_agree(gdn_comm *c, int flag);

/* Group size and this rank's position in it. */
int gdn_comm_group_size(const gdn_comm *c, gdn_group g);
int gdn_comm_group_rank(const gdn_comm *c, gdn_group g);

/* Size in bytes of one element. */
size_t gdn_dtype_size(gdn_dtype t);

/* Data-plane calls through c->ops (see gdn_comm_ops). `what` names the tensor in messages. */
static inline void gdn_all_reduce(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t,
                                  gdn_redop op, const char *what) {
    c->ops->all_reduce(c, g, buf, n, t, op, what);
}
static inline void gdn_all_gather(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n,
                                  gdn_dtype t, const char *what) {
    c->ops->all_gather(c, g, send, recv, n, t, what);
}
static inline void gdn_reduce_scatter(gdn_comm *c, gdn_group g, const void *send, void *recv,
                                      size_t n, gdn_dtype t, gdn_redop op, const char *what) {
    c->ops->reduce_scatter(c, g, send, recv, n, t, op, what);
}
static inline void gdn_broadcast(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t,
                                 int root, const char *what) {
    c->ops->broadcast(c, g, buf, n, t, root, what);
}
static inline void gdn_send(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n,
                            gdn_dtype t, int tag, const char *what) {
    c->ops->send(c, g, peer, buf, n, t, tag, what);
}
static inline void gdn_recv(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t,
                            int tag, const char *what) {
    c->ops->recv(c, g, peer, buf, n, t, tag, what);
}
static inline void gdn_wait_sends(gdn_comm *c) { c->ops->wait_sends(c); }
static inline void gdn_all_reduce_start(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t,
                                        gdn_redop op, const char *what) {
    if (c->ops->all_reduce_start) c->ops->all_reduce_start(c, g, buf, n, t, op, what);
    else c->ops->all_reduce(c, g, buf, n, t, op, what);
}
static inline void gdn_comm_wait(gdn_comm *c, const char *what) {
    if (c->ops->wait) c->ops->wait(c, what);
}
static inline void gdn_comm_set_stream(gdn_comm *c, void *stream) {
    if (c->ops->set_stream) c->ops->set_stream(c, stream);
}

#endif
