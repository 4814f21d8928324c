/* A world of one process without MPI: what a plain `gdn train` runs on. Collectives over one
 * rank are copies or nothing; there is no peer to send to. */
#include <string.h>

#include "comm/comm.h"
#include "model/check.h"

static void self_all_reduce(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                            const char *what) {
    (void)g, (void)buf, (void)op, (void)what;
    c->bytes.all_reduce += n * gdn_dtype_size(t);
}

static void self_all_gather(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n,
                            gdn_dtype t, const char *what) {
    (void)g, (void)what;
    if (recv != send) memcpy(recv, send, n * gdn_dtype_size(t));
    c->bytes.all_gather += n * gdn_dtype_size(t);
}

/* Over one rank the reduction of send [1, n] is send itself. */
static void self_reduce_scatter(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n,
                                gdn_dtype t, gdn_redop op, const char *what) {
    (void)g, (void)op, (void)what;
    if (recv != send) memcpy(recv, send, n * gdn_dtype_size(t));
    c->bytes.reduce_scatter += n * gdn_dtype_size(t);
}

static void self_broadcast(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, int root,
                           const char *what) {
    (void)c, (void)g, (void)buf, (void)n, (void)t, (void)root, (void)what;
}

static void self_send(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n, gdn_dtype t,
                      int tag, const char *what) {
    (void)c, (void)g, (void)buf, (void)n, (void)t, (void)tag;
    GDN_DIE("send of %s to rank %d: this process runs alone (no MPI launcher)", what, peer);
}

static void self_recv(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t, int tag,
                      const char *what) {
    (void)c, (void)g, (void)buf, (void)n, (void)t, (void)tag;
    GDN_DIE("receive of %s from rank %d: this process runs alone (no MPI launcher)", what, peer);
}

static void self_wait_sends(gdn_comm *c) { (void)c; }

const gdn_comm_ops gdn_comm_ops_self = {.name = "self",
                                        .all_reduce = self_all_reduce,
                                        .all_gather = self_all_gather,
                                        .reduce_scatter = self_reduce_scatter,
                                        .broadcast = self_broadcast,
                                        .send = self_send,
                                        .recv = self_recv,
                                        .wait_sends = self_wait_sends};
