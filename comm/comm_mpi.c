/* The MPI implementation of comm/comm.h: bootstrap, grid, control calls, and the data-plane
 * collectives on host buffers.
 *
 * Every wait goes through mpi_wait: nonblocking calls polled with MPI_Test and a deadline, so a
 * peer that stopped answering ends the job with a message instead of a hang. Polling backs off
 * to short sleeps after a few hundred tries: with more ranks than cores (CI runs 4 ranks on 2)
 * a waiting rank must leave the core to the rank it waits for. Errors are returned by MPI
 * (MPI_ERRORS_RETURN on every communicator here) and turned into gdn_comm_abort messages. */
#include "comm/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/check.h"

typedef struct {
    MPI_Comm world, dp, sp, node;
    MPI_Request *sends; /* pending sends */
    int n_sends, cap_sends;
    int finalize_mpi;   /* we initialised MPI, so we finalize it */
} mpi_impl;

static const gdn_comm *die_comm; /* for the GDN_DIE handler */

static mpi_impl *impl_of(const gdn_comm *c) { return (mpi_impl *)c->impl; }

size_t gdn_dtype_size(gdn_dtype t) {
    switch (t) {
    case GDN_F32: return 4;
    case GDN_F64: return 8;
    case GDN_I64: return 8;
    case GDN_BF16: return 2;
    }
    return 0;
}

static MPI_Datatype mpi_type(gdn_dtype t) {
    switch (t) {
    case GDN_F32: return MPI_FLOAT;
    case GDN_F64: return MPI_DOUBLE;
    case GDN_I64: return MPI_INT64_T;
    case GDN_BF16: return MPI_UINT16_T; /* raw bits: moved, never reduced */
    }
    return MPI_DATATYPE_NULL;
}

static const char *group_name(gdn_group g) {
    return g == GDN_WORLD ? "world" : g == GDN_DP ? "data-parallel group" : "sequence-parallel group";
}

static MPI_Comm group_comm(const gdn_comm *c, gdn_group g) {
    const mpi_impl *m = impl_of(c);
    return g == GDN_WORLD ? m->world : g == GDN_DP ? m->dp : m->sp;
}

int gdn_comm_group_size(const gdn_comm *c, gdn_group g) {
    return g == GDN_WORLD ? c->size : g == GDN_DP ? c->dp : c->sp;
}

int gdn_comm_group_rank(const gdn_comm *c, gdn_group g) {
    return g == GDN_WORLD ? c->rank : g == GDN_DP ? c->dp_rank : c->sp_rank;
}

/* World rank of group rank r. */
static int world_rank_of(const gdn_comm *c, gdn_group g, int r) {
    return g == GDN_WORLD ? r : g == GDN_DP ? r * c->sp + c->sp_rank : c->dp_rank * c->sp + r;
}

void gdn_comm_abort(const gdn_comm *c, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (c && c->size > 1) fprintf(stderr, "gdn: rank %d: %s\n", c->rank, msg);
    else fprintf(stderr, "gdn: %s\n", msg);
    fflush(stderr);
    fflush(stdout);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void die_to_abort(const char *message) { gdn_comm_abort(die_comm, "%s", message); }

static void check_mpi(const gdn_comm *c, int code, const char *op, const char *what) {
    if (code == MPI_SUCCESS) return;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, s, &len);
    gdn_comm_abort(c, "MPI error in %s of %s: %s", op, what, s);
}

/* Polls req until it completes; past the deadline, aborts naming the operation and peer (-1:
 * a collective). */
static void mpi_wait(gdn_comm *c, MPI_Request *req, const char *op, const char *what, gdn_group g,
                     int peer) {
    const double t0 = MPI_Wtime();
    const struct timespec nap = {0, 50000}; /* 50 us */
    for (long tries = 0;; tries++) {
        int done = 0;
        check_mpi(c, MPI_Test(req, &done, MPI_STATUS_IGNORE), op, what);
        if (done) {
            c->wait_s += MPI_Wtime() - t0;
            return;
        }
        if (tries < 200) continue;
        nanosleep(&nap, NULL);
        if ((tries & 63) == 0 && MPI_Wtime() - t0 > c->timeout_s) {
            if (peer >= 0)
                gdn_comm_abort(c, "no progress for %.0f s in %s of %s with rank %d: that rank stopped "
                               "responding (see its own messages); GDN_COMM_TIMEOUT sets this limit",
                               c->timeout_s, op, what, world_rank_of(c, g, peer));
            gdn_comm_abort(c, "no progress for %.0f s in %s of %s over the %s: a rank stopped "
                           "responding (see its own messages); GDN_COMM_TIMEOUT sets this limit",
                           c->timeout_s, op, what, group_name(g));
        }
    }
}

/* MPI counts are int: long buffers go in pieces. */
#define MAX_PIECE ((size_t)1 << 30)

static void mpi_all_reduce(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, gdn_redop op,
                           const char *what) {
    MPI_Op mop = op == GDN_MAX ? MPI_MAX : op == GDN_MIN ? MPI_MIN : MPI_SUM;
    if (op == GDN_AVG && t == GDN_I64)
        GDN_DIE("all-reduce of %s: average of integers is not supported", what);
    if (t == GDN_BF16)
        GDN_DIE("all-reduce of %s: bf16 reductions need the NCCL data plane (MPI has no bf16 type)", what);
    const size_t es = gdn_dtype_size(t);
    for (size_t off = 0; off < n; off += MAX_PIECE) {
        size_t m = n - off < MAX_PIECE ? n - off : MAX_PIECE;
        MPI_Request req;
        check_mpi(c, MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + off * es, (int)m, mpi_type(t), mop,
                                    group_comm(c, g), &req), "all-reduce", what);
        mpi_wait(c, &req, "all-reduce", what, g, -1);
    }
    if (op == GDN_AVG) {
        const int size = gdn_comm_group_size(c, g);
        if (t == GDN_F32)
            for (size_t i = 0; i < n; i++) ((float *)buf)[i] /= (float)size;
        else
            for (size_t i = 0; i < n; i++) ((double *)buf)[i] /= (double)size;
    }
    c->bytes.all_reduce += n * es;
}

static void mpi_all_gather(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n,
                           gdn_dtype t, const char *what) {
    if (n > (size_t)INT_MAX) GDN_DIE("all-gather of %s: %zu elements per rank is too many", what, n);
    const size_t es = gdn_dtype_size(t);
    /* in place (send is this rank's block of recv): MPI must be told, it forbids aliasing */
    const int in_place = send == (const char *)recv + (size_t)gdn_comm_group_rank(c, g) * n * es;
    MPI_Request req;
    check_mpi(c, MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)n, mpi_type(t), recv, (int)n, mpi_type(t),
                                group_comm(c, g), &req), "all-gather", what);
    mpi_wait(c, &req, "all-gather", what, g, -1);
    c->bytes.all_gather += n * es;
}

static void mpi_reduce_scatter(gdn_comm *c, gdn_group g, const void *send, void *recv, size_t n,
                               gdn_dtype t, gdn_redop op, const char *what) {
    MPI_Op mop = op == GDN_MAX ? MPI_MAX : op == GDN_MIN ? MPI_MIN : MPI_SUM;
    if (op == GDN_AVG && t == GDN_I64)
        GDN_DIE("reduce-scatter of %s: average of integers is not supported", what);
    if (t == GDN_BF16)
        GDN_DIE("reduce-scatter of %s: bf16 reductions need the NCCL data plane (MPI has no bf16 type)", what);
    if (n > (size_t)INT_MAX) GDN_DIE("reduce-scatter of %s: %zu elements per rank is too many", what, n);
    const size_t es = gdn_dtype_size(t);
    const int size = gdn_comm_group_size(c, g), me = gdn_comm_group_rank(c, g);
    const int in_place = recv == (const char *)send + (size_t)me * n * es;
    MPI_Request req;
    /* in place, MPI takes the input from the receive buffer and leaves the result at its start */
    check_mpi(c, MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, in_place ? (void *)send : recv, (int)n,
                                           mpi_type(t), mop, group_comm(c, g), &req), "reduce-scatter", what);
    mpi_wait(c, &req, "reduce-scatter", what, g, -1);
    if (in_place && me > 0) memmove(recv, send, n * es);
    if (op == GDN_AVG) {
        if (t == GDN_F32)
            for (size_t i = 0; i < n; i++) ((float *)recv)[i] /= (float)size;
        else
            for (size_t i = 0; i < n; i++) ((double *)recv)[i] /= (double)size;
    }
    c->bytes.reduce_scatter += (size_t)size * n * es;
}

static void mpi_broadcast(gdn_comm *c, gdn_group g, void *buf, size_t n, gdn_dtype t, int root,
                          const char *what) {
    const size_t es = gdn_dtype_size(t);
    for (size_t off = 0; off < n; off += MAX_PIECE) {
        size_t m = n - off < MAX_PIECE ? n - off : MAX_PIECE;
        MPI_Request req;
        check_mpi(c, MPI_Ibcast((char *)buf + off * es, (int)m, mpi_type(t), root, group_comm(c, g),
                                &req), "broadcast", what);
        mpi_wait(c, &req, "broadcast", what, g, -1);
    }
    if (gdn_comm_group_rank(c, g) == root) c->bytes.broadcast += n * es;
}

static void mpi_send(gdn_comm *c, gdn_group g, int peer, const void *buf, size_t n, gdn_dtype t,
                     int tag, const char *what) {
    if (n > (size_t)INT_MAX) GDN_DIE("send of %s: %zu elements is too many", what, n);
    mpi_impl *m = impl_of(c);
    if (m->n_sends == m->cap_sends) {
        m->cap_sends = m->cap_sends ? 2 * m->cap_sends : 16;
        MPI_Request *r = realloc(m->sends, (size_t)m->cap_sends * sizeof *r);
        if (!r) GDN_DIE("out of memory for pending sends");
        m->sends = r;
    }
    check_mpi(c, MPI_Isend(buf, (int)n, mpi_type(t), peer, tag, group_comm(c, g), &m->sends[m->n_sends]),
              "send", what);
    c->pending_sends = ++m->n_sends;
    c->bytes.send += n * gdn_dtype_size(t);
}

static void mpi_recv(gdn_comm *c, gdn_group g, int peer, void *buf, size_t n, gdn_dtype t, int tag,
                     const char *what) {
    if (n > (size_t)INT_MAX) GDN_DIE("receive of %s: %zu elements is too many", what, n);
    MPI_Request req;
    check_mpi(c, MPI_Irecv(buf, (int)n, mpi_type(t), peer, tag, group_comm(c, g), &req), "receive", what);
    mpi_wait(c, &req, "receive", what, g, peer);
}

static void mpi_wait_sends(gdn_comm *c) {
    mpi_impl *m = impl_of(c);
    for (int i = 0; i < m->n_sends; i++) mpi_wait(c, &m->sends[i], "send", "a tensor", GDN_WORLD, -1);
    m->n_sends = c->pending_sends = 0;
}

static double timeout_from_env(void) {
    const char *s = getenv("GDN_COMM_TIMEOUT");
    if (!s || !*s) return 600.0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (*end || !(v > 0)) {
        fprintf(stderr, "gdn: GDN_COMM_TIMEOUT must be a positive number of seconds, got '%s'; "
                        "using 600\n", s);
        return 600.0;
    }
    return v;
}

static const gdn_comm_ops mpi_ops = {.name = "mpi",
                                     .all_reduce = mpi_all_reduce,
                                     .all_gather = mpi_all_gather,
                                     .reduce_scatter = mpi_reduce_scatter,
                                     .broadcast = mpi_broadcast,
                                     .send = mpi_send,
                                     .recv = mpi_recv,
                                     .wait_sends = mpi_wait_sends};

int gdn_comm_agree(gdn_comm *c, int flag) {
    int64_t v = flag ? c->rank : INT64_MAX;
    c->ops->all_reduce(c, GDN_WORLD, &v, 1, GDN_I64, GDN_MIN, "error and stop flags");
    c->bytes.all_reduce -= sizeof v; /* control traffic: not counted as data */
    return v == INT64_MAX ? -1 : (int)v;
}

/* Whether a parallel launcher started this process: the variables Open MPI's mpiexec, PMIx
 * (srun --mpi=pmix, prterun), PMI-1/2 (srun --mpi=pmi2, MPICH's hydra) and MVAPICH set, or a
 * Slurm step of several tasks (MPI_Init then joins it or explains why it cannot). */
static int launched_by_mpi(void) {
    const char *force = getenv("GDN_MPI");
    if (force && *force) return strcmp(force, "0") != 0;
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                                       "PMI_FD", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS");
    return tasks && atoi(tasks) > 1;
}

static void grid_error(int size, int sp, char *err, size_t errlen) {
    if (size == 1)
        snprintf(err, errlen,
                 "sp = %d needs %d ranks (a multiple of %d), but this process runs alone: start it with "
                 "mpiexec -n N or srun --mpi=pmix -n N", sp, sp, sp);
    else
        snprintf(err, errlen,
                 "sp = %d does not divide the %d ranks of this job: the world is split into dp x sp; "
                 "start a multiple of %d ranks or choose an sp that divides %d", sp, size, sp, size);
}

/* A world of one without MPI. */
static gdn_comm *self_init(int sp, char *err, size_t errlen) {
    if (sp != 1) {
        grid_error(1, sp, err, errlen);
        return NULL;
    }
    gdn_comm *c = GDN_CALLOC(1, sizeof *c);
    c->size = c->local_size = c->dp = c->sp = 1;
    c->ops = &gdn_comm_ops_self;
    c->timeout_s = timeout_from_env();
    return c;
}

gdn_comm *gdn_comm_init(int *argc, char ***argv, int sp, char *err, size_t errlen) {
    err[0] = 0;
    int init = 0, provided = 0;
    MPI_Initialized(&init);
    if (!init && !launched_by_mpi()) return self_init(sp, err, errlen);
    /* Only the main thread calls MPI; OpenMP threads compute between calls. */
    if (!init && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI could not start (MPI_Init_thread failed)");
        return NULL;
    }
    if (!init && provided < MPI_THREAD_FUNNELED) {
        snprintf(err, errlen, "this MPI library cannot be used from a program with threads "
                              "(MPI_THREAD_FUNNELED not provided)");
        MPI_Finalize();
        return NULL;
    }
    gdn_comm *c = GDN_CALLOC(1, sizeof *c);
    mpi_impl *m = GDN_CALLOC(1, sizeof *m);
    m->world = m->dp = m->sp = m->node = MPI_COMM_NULL;
    c->impl = m;
    c->ops = &mpi_ops;
    c->timeout_s = timeout_from_env();
    m->finalize_mpi = !init;
    MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->world, &c->rank);
    MPI_Comm_size(m->world, &c->size);
    if (sp < 1 || c->size % sp != 0) {
        /* Rank 0 prints before anyone returns: a rank that exits first makes the launcher kill
         * the job, which could otherwise cut rank 0 off before its message is out. */
        if (c->rank == 0) {
            grid_error(c->size, sp, err, errlen);
            fprintf(stderr, "gdn: %s\n", err);
            fflush(stderr);
            err[0] = 0;
        }
        MPI_Barrier(m->world);
        c->sp = 1; /* lets finalize free what exists */
        gdn_comm_finalize(c);
        return NULL;
    }
    c->sp = sp;
    c->dp = c->size / sp;
    c->dp_rank = c->rank / sp;
    c->sp_rank = c->rank % sp;
    /* dp group: same sp_rank; sp group: same dp_rank (consecutive ranks). */
    MPI_Comm_split(m->world, c->sp_rank, c->dp_rank, &m->dp);
    MPI_Comm_split(m->world, c->dp_rank, c->sp_rank, &m->sp);
    MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &m->node);
    MPI_Comm_set_errhandler(m->dp, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(m->sp, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->node, &c->local_rank);
    MPI_Comm_size(m->node, &c->local_size);
    if (!die_comm) { /* the first grid of the process reports fatal errors */
        die_comm = c;
        gdn_set_die_handler(die_to_abort);
    }
    return c;
}

void gdn_comm_finalize(gdn_comm *c) {
    if (!c) return;
    if (die_comm == c) {
        gdn_set_die_handler(NULL);
        die_comm = NULL;
    }
    mpi_impl *m = impl_of(c);
    if (!m) { /* a world of one without MPI */
        free(c);
        return;
    }
    if (m->n_sends) mpi_wait_sends(c);
    MPI_Comm *comms[] = {&m->dp, &m->sp, &m->node, &m->world};
    for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++)
        if (*comms[i] != MPI_COMM_NULL) MPI_Comm_free(comms[i]);
    int fin = m->finalize_mpi;
    free(m->sends);
    free(m);
    free(c);
    if (fin) MPI_Finalize();
}
