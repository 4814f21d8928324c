/* The backend of a training run: choice, model, data plane and sequence-parallel exchange (see
 * train_backend.h). */
#include "train/train_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/seqpar.h"
#include "model/check.h"
#include "model/cuda/cuda_mixers.h"
#include "train/trainer.h"
#ifdef GDN_HAVE_NCCL
#include "comm/comm_nccl.h"
#include "comm/seqpar_cuda.h"
#endif

int gdn_train_backend_choose(const gdn_run_config *rc, gdn_comm *comm, const gdn_backend **be) {
    const gdn_backend *cuda = gdn_backend_cuda();
    /* the device query starts the CUDA runtime: only when the run may use it */
    const int n_gpu = cuda && strcmp(rc->backend, "cpu") ? gdn_backend_gpu_count() : 0;
    int have_nccl = 0;
#ifdef GDN_HAVE_NCCL
    have_nccl = 1;
#endif
    const int use_gpu = !strcmp(rc->backend, "cuda") || (!strcmp(rc->backend, "auto") && n_gpu > 0 && comm->size == 1);
    *be = use_gpu ? cuda : &gdn_backend_cpu;
    const char *why = NULL; /* this rank cannot run the cuda backend */
    char why_mixers[512], mixer_err[256];
    if (use_gpu && gdn_cuda_unsupported_layer(&rc->model, mixer_err, sizeof mixer_err) >= 0) {
        /* refused before any GPU memory is touched (model/cuda/cuda_mixers.h) */
        snprintf(why_mixers, sizeof why_mixers, "%s, but --%s: use --backend cpu",
                 strcmp(rc->backend, "cuda") ? "--backend auto chose cuda (a GPU is visible)" : "--backend cuda",
                 mixer_err);
        why = why_mixers;
    } else if (use_gpu && comm->sp > 1 && gdn_config_count_mixer(&rc->model, GDN_MIXER_A) > 0)
        why = "--backend cuda with sp > 1 and attention layers (mixer A): their key/value exchange over NCCL "
              "has not run on several GPUs yet (docs/distributed.md); use --sp 1 or --backend cpu";
    else if (use_gpu && comm->sp > 1 && strcmp(rc->sp_exchange, "pass"))
        why = "--backend cuda with --sp_exchange gather: sequence parallelism on GPUs passes the delta-rule state "
              "rank to rank only; use --sp_exchange pass (the default) or --backend cpu";
    else if (use_gpu && n_gpu == 0)
        why = "--backend cuda needs a CUDA build with a visible GPU (this build or machine has none); use "
              "--backend cpu";
    else if (use_gpu && comm->size > 1 && !have_nccl)
        why = "--backend cuda on several ranks needs NCCL, and this build has none (CMake found no nccl.h and "
              "libnccl; set NCCL_ROOT and reconfigure); use one process or --backend cpu";
    const int first_bad = gdn_comm_agree(comm, why != NULL);
    if (first_bad >= 0) { /* the lowest such rank says why; the others stop with it */
        if (first_bad == comm->rank) fprintf(stderr, "gdn train: %s\n", why);
        return GDN_EXIT_USAGE;
    }
    return 0;
}

/* GDN_GRAD_BUCKET_MB: size of the gradient all-reduces that overlap the backward pass on GPUs
 * (default 64 MB; 0: one all-reduce of the whole gradient after the backward pass). The CPU
 * backward pass completes its gradients at its end: one all-reduce. */
static size_t grad_bucket_elems(const gdn_train_backend *tb, int rank) {
    if (tb->be == &gdn_backend_cpu) return SIZE_MAX;
    const char *s = getenv("GDN_GRAD_BUCKET_MB");
    double mb = 64.0;
    if (s && *s) {
        char *end = NULL;
        double v = strtod(s, &end);
        if (*end || !(v >= 0 && v <= 1e6)) {
            if (rank == 0)
                printf("gdn train: GDN_GRAD_BUCKET_MB must be a number of MB from 0 to 1e6, got '%s'; using 64\n", s);
        } else mb = v;
    }
    if (mb == 0) return SIZE_MAX;
    size_t n = (size_t)(mb * 1e6 / sizeof(float));
    return n ? n : 1;
}

static gdn_sp_exchange sp_mode(const gdn_run_config *rc) {
    gdn_sp_exchange mode = GDN_SP_PASS;
    gdn_sp_exchange_parse(rc->sp_exchange, &mode);
    return mode;
}

int gdn_train_backend_open(gdn_train_backend *tb, const gdn_backend *be, const gdn_run_config *rc, gdn_comm *comm,
                           const gdn_param_table *t, const gdn_zero *z, int T_seg, char *err, size_t errlen) {
    memset(tb, 0, sizeof *tb);
    tb->be = be;
    tb->data = comm;
    err[0] = 0;
    (void)errlen; /* used by the NCCL set-up */
    tb->precision = rc->precision;
#ifdef GDN_HAVE_NCCL
    if (be != &gdn_backend_cpu && comm->size > 1) { /* binds this rank's GPU before the model is made on it */
        tb->data = gdn_nccl_init(comm, err, errlen);
        if (!tb->data) return -1;
        tb->own_data = 1;
    }
#endif
    tb->grad_bucket = grad_bucket_elems(tb, comm->rank);
    gdn_model_shape shape = {.B = rc->batch_size, .T = T_seg, .precision = tb->precision,
                             .lo = z->lo, .hi = z->hi, .padded = z->padded};
    tb->model = be->create(t, &shape);
    gdn_comm_set_stream(tb->data, be->stream(tb->model));
    if (comm->sp > 1) { /* the model runs this rank's segment; T_seg >= conv_width - 1 (run_config) */
        gdn_seq_hooks hooks;
        if (be == &gdn_backend_cpu) {
            gdn_seqpar *s = gdn_seqpar_create(comm, &rc->model, rc->batch_size, T_seg, sp_mode(rc));
            hooks = gdn_seqpar_hooks(s);
            tb->seqpar = s;
        } else {
#ifdef GDN_HAVE_NCCL
            gdn_seqpar_cuda *s = gdn_seqpar_cuda_create(tb->data, &rc->model, rc->batch_size, T_seg,
                                                        tb->precision == GDN_PRECISION_FP32 ? GDN_CUDA_FP32
                                                                                             : GDN_CUDA_BF16,
                                                        be->stream(tb->model));
            hooks = gdn_seqpar_cuda_hooks(s);
            tb->seqpar = s;
#else
            GDN_DIE("sequence parallelism on GPUs needs NCCL"); /* refused by gdn_train_backend_choose */
#endif
        }
        be->set_seq_hooks(tb->model, &hooks);
    }
    return 0;
}

void gdn_train_backend_close(gdn_train_backend *tb) {
    if (tb->be == &gdn_backend_cpu) {
        gdn_seqpar_free(tb->seqpar);
    } else {
#ifdef GDN_HAVE_NCCL
        gdn_seqpar_cuda_free(tb->seqpar);
        if (tb->own_data) gdn_nccl_finalize(tb->data); /* before the model's stream goes */
#endif
    }
    if (tb->model) tb->be->free(tb->model);
    memset(tb, 0, sizeof *tb);
}

const char *gdn_train_backend_describe(const gdn_train_backend *tb) {
    if (tb->be == &gdn_backend_cpu) return "cpu";
    return tb->precision == GDN_PRECISION_FP32 ? "cuda (fp32 activations and matrix inputs, fp32 master weights)"
                                               : "cuda (bf16 activations and matrix inputs, fp32 master weights)";
}

uint64_t gdn_train_backend_sp_bytes(const gdn_train_backend *tb, const gdn_run_config *rc, int sp) {
#ifdef GDN_HAVE_NCCL
    if (tb->be != &gdn_backend_cpu) /* halos in the activation type */
        return gdn_seqpar_cuda_bytes(&rc->model, rc->batch_size, sp,
                                     tb->precision == GDN_PRECISION_FP32 ? 4 : 2, 1);
#endif
    (void)tb;
    return gdn_seqpar_bytes(&rc->model, rc->batch_size, rc->seq_len / sp, sp, sp_mode(rc), 1);
}

void gdn_train_backend_data_line(const gdn_train_backend *tb, int zero, char *out, size_t n) {
    out[0] = 0;
#ifdef GDN_HAVE_NCCL
    if (tb->own_data) {
        char how[128];
        if (zero) snprintf(how, sizeof how, "one reduce-scatter after the backward pass, parameters all-gathered after AdamW");
        else if (tb->grad_bucket == SIZE_MAX) snprintf(how, sizeof how, "one all-reduce after the backward pass");
        else snprintf(how, sizeof how, "all-reduces of %.0f MB buckets overlapping the backward pass",
                      (double)tb->grad_bucket * sizeof(float) / 1e6);
        snprintf(out, n, "GPUs: one per rank (rank 0 on GPU %d), gradients over NCCL %s: %s%s%s%s",
                 gdn_nccl_device(tb->data), gdn_nccl_version(tb->data), how,
                 tb->seqpar ? "; halos (" : "", tb->seqpar ? (tb->precision == GDN_PRECISION_FP32 ? "fp32" : "bf16") : "",
                 tb->seqpar ? ") and states (fp32) rank to rank over NCCL" : "");
    }
#else
    (void)tb;
    (void)zero;
    (void)n;
#endif
}
