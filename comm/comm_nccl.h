/* The NCCL data plane of comm/comm.h for the CUDA backend: one GPU per rank, device buffers.
 *
 * Bootstrap over the control layer (DESIGN 6): each rank binds GPU local_rank, rank 0 makes the
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
 * Groups: the world, and the data-parallel group when it is the world (sp = 1); other groups
 * of more than one rank stop with an error (sequence parallelism on GPUs is not available yet).
 * Sends are enqueued on the NCCL stream in call order and complete when the peer receives: a
 * pattern where two ranks both send to each other before receiving is not supported. */
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

/* This rank's GPU, and the NCCL version as "major.minor.patch". */
int gdn_nccl_device(const gdn_comm *c);
const char *gdn_nccl_version(const gdn_comm *c);

#endif
