/* The NCCL data plane of comm/comm.h for the CUDA backend: one GPU per rank, device buffers.
 *
 * Bootstrap over the control layer (docs/design.md section 6): each rank binds GPU local_rank, rank 0 makes the
 * ncclUniqueId, gdn_broadcast over MPI hands it to the others, and every rank joins one NCCL
 * communicator over the world. MPI keeps bootstrap, agreement, stop flags and host-side metrics;
 * NCCL carries only device buffers.
 *
 * The NCCL grid is a gdn_comm of its own (same ranks and grid as the control one, ops over
 * device buffers), so code written against gdn_comm_ops runs on it unchanged. Its operations run
 * on a stream of their own, ordered after the work enqueued so far on a compute stream
 * (gdn_nccl_set_stream), and the compute stream's next work is ordered after them. Host waits
 * poll with the control grid's deadline (GDN_COMM_TIMEOUT) and check NCCL's asynchronous errors,
 * so a peer that stopped answering ends the job with a message instead of a hang.
 *
 * Groups: the world has one NCCL communicator; a data- or sequence-parallel group that is
 * neither this rank alone nor the world (a dp x sp grid with both > 1) gets one of its own, split
 * from the world's at start (ncclCommSplit, NCCL >= 2.18) and numbered as in the group, so the
 * group operations and the peers of transfers take group ranks as with MPI. GDN_NCCL_SPLIT=1 (read
 * on rank 0) splits a group that is the world too, which tests the split on two GPUs.
 *
 * Transfers: the data-plane send / recv of gdn_comm_ops are enqueued in call order and recv waits
 * on the host; a pattern where two ranks both send to each other before receiving is not
 * supported. Sequence parallelism uses transfer groups instead (gdn_nccl_p2p_*): sends and
 * receives enqueued together (ncclGroupStart / End, so neighbours that both send and receive
 * cannot deadlock), ordered after the compute stream's work so far, with the compute stream's
 * next work ordered after the group when it receives; nothing waits on the host (beyond NCCL's
 * own set-up of a connection at the first transfer between two ranks). */
#ifndef GDN_COMM_NCCL_H
#define GDN_COMM_NCCL_H

#include <stddef.h>

#include "comm/comm.h"

/* Binds this rank to its GPU and joins the NCCL communicator of ctl's world (collective over
 * ctl). Returns the NCCL grid, or NULL with the reason in err (then every rank returns NULL:
 * the ranks agree over ctl). ctl must outlive the result. */
gdn_comm *gdn_nccl_init(gdn_comm *ctl, char *err, size_t errlen);
/* Waits for pending work, destroys the communicator and frees the grid (not gdn_comm_finalize). */
void gdn_nccl_finalize(gdn_comm *c);

/* The compute stream (a cudaStream_t; NULL: the legacy default stream) that operations are
 * ordered after and before. */
void gdn_nccl_set_stream(gdn_comm *c, void *stream);

/* Starts an in-place all-reduce of the device buffer buf [n] after the work enqueued so far on
 * the compute stream, and returns without waiting. */
void gdn_nccl_all_reduce_start(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t,
                               gdn_redop op, const char *what);
/* Waits (on the host, with the deadline) until every operation started is complete, and orders
 * the compute stream's next work after them. */
void gdn_nccl_wait(gdn_comm *c, const char *what);

/* A group of point-to-point transfers on the NCCL stream, enqueued without waiting on the host:
 * start (the group sees the compute stream's work so far: sends read what it wrote, receives
 * overwrite what it read), any number of send / recv with group ranks as peers, end. When the
 * group holds a receive, the compute stream's next work waits for the whole group. Peers must
 * post the matching operations (same count and type, in the same order between two ranks). */
void gdn_nccl_p2p_start(gdn_comm *c, const char *what);
/* Sends the device buffer buf [n] to group rank peer; buf must stay unchanged until the group
 * completes (the event passed to gdn_nccl_p2p_end). */
void gdn_nccl_p2p_send(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n, gdn_dtype t,
                       const char *what);
/* Receives the device buffer buf [n] from group rank peer. */
void gdn_nccl_p2p_recv(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t,
                       const char *what);
/* Ends the group; done (a cudaEvent_t, or NULL) is recorded after it on the NCCL stream. */
void gdn_nccl_p2p_end(gdn_comm *c, void *done, const char *what);
/* As gdn_nccl_p2p_end, but the compute stream does not wait for the group's receives: received
 * (a cudaEvent_t) is recorded after the group on the NCCL stream instead, and the caller orders
 * the work that reads the received buffers after it (e.g. only the kernel that needs them). */
void gdn_nccl_p2p_end_event(gdn_comm *c, void *done, void *received, const char *what);
/* Waits on the host, with the deadline, until the NCCL stream's work so far is complete (the
 * compute stream is not waited for, and the time does not count as waiting in c->wait_s). */
void gdn_nccl_sync(gdn_comm *c, const char *what);

/* This rank's GPU, and the NCCL version as "major.minor.patch". */
int gdn_nccl_device(const gdn_comm *c);
const char *gdn_nccl_version(const gdn_comm *c);

#endif
