/* gdn op attention: runs the bare causal softmax attention op (forward and backward) on arrays
 * from an HDF5 file, so the kernels can be checked against other implementations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5util.h"
#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "train/commands.h"
#include "train/op_io.h"
#ifdef GDN_HAVE_CUDA
#include "model/cuda/attention_cuda.h"
#endif

static void attn_usage(FILE *f) {
    fprintf(f,
            "usage: gdn op attention --in IN.h5 --out OUT.h5 [--backend cpu|cuda] [--precision P]\n\n"
            "Causal softmax attention with grouped kv heads, per batch b and query head h:\n"
            "  o_t = sum_{t'<=t} softmax_t'(scale q_t . k_t') v_t',  k and v of kv head h / (H/Hkv)\n"
            "Input datasets (fp32 or fp64): q [B,T,H,D]; k, v [B,T,Hkv,D] (H a multiple of Hkv);\n"
            "optional do [B,T,H,D]. Optional root attribute 'scale' (default 1/sqrt(D)). No rotary\n"
            "embedding or norm is applied inside the op. Outputs (fp32): o [B,T,H,D], lse [B,H,T]\n"
            "(log-sum-exp of each row of scaled scores) and, when do is given, the gradients of\n"
            "sum(o * do): dq [B,T,H,D], dk, dv [B,T,Hkv,D].\n"
            "Precision: cpu computes in fp32 (default) or fp64; cuda in bf16 (default: bf16 inputs\n"
            "and outputs, fp32 accumulation, flash-style tensor-core kernels) or fp32. The cuda\n"
            "backend takes head dims 64 and 128.\n"
            "Documents: an optional integer dataset cu_seqlens [n+1] = 0, ..., T splits every\n"
            "batch row into the documents [c_i, c_i+1) (B = 1 is the packed varlen layout): a query\n"
            "attends only to the keys of its own document (block-diagonal causal).\n");
}

typedef struct {
    gdn_attn_shape s;
    double scale;
    double *q, *k, *v, *d_o;       /* inputs (fp64 copies) */
    float *o, *lse, *dq, *dk, *dv; /* outputs */
    size_t nq, nkv, nl;            /* elements of q (o, do, dq), k (v, dk, dv), lse */
    int *doc;                      /* documents from cu_seqlens (model/cpu/doc.h), or NULL */
} attn_arrays;

static float *attn_alloc_f32(size_t n) { return GDN_MALLOC(n * sizeof(float)); }

static void run_cpu(attn_arrays *a, int fp64, int want_grad) {
    const gdn_attn_shape *s = &a->s;
    a->o = attn_alloc_f32(a->nq);
    a->lse = attn_alloc_f32(a->nl);
    if (want_grad) {
        a->dq = attn_alloc_f32(a->nq);
        a->dk = attn_alloc_f32(a->nkv);
        a->dv = attn_alloc_f32(a->nkv);
    }
    if (fp64) {
        double *o = GDN_MALLOC(a->nq * sizeof *o), *lse = GDN_MALLOC(a->nl * sizeof *lse);
        gdn_attn_fwd_f64(s, a->q, a->k, a->v, a->scale, o, lse);
        for (size_t i = 0; i < a->nq; i++) a->o[i] = (float)o[i];
        for (size_t i = 0; i < a->nl; i++) a->lse[i] = (float)lse[i];
        if (want_grad) {
            double *dq = GDN_MALLOC(a->nq * sizeof *dq), *dk = GDN_MALLOC(a->nkv * sizeof *dk);
            double *dv = GDN_MALLOC(a->nkv * sizeof *dv);
            gdn_attn_bwd_f64(s, a->q, a->k, a->v, o, lse, a->scale, a->d_o, dq, dk, dv);
            for (size_t i = 0; i < a->nq; i++) a->dq[i] = (float)dq[i];
            for (size_t i = 0; i < a->nkv; i++) {
                a->dk[i] = (float)dk[i];
                a->dv[i] = (float)dv[i];
            }
            free(dq);
            free(dk);
            free(dv);
        }
        free(o);
        free(lse);
        return;
    }
    float *q = op_to_f32(a->q, a->nq), *k = op_to_f32(a->k, a->nkv), *v = op_to_f32(a->v, a->nkv);
    gdn_attn_fwd_f32(s, q, k, v, (float)a->scale, a->o, a->lse);
    if (want_grad) {
        float *d_o = op_to_f32(a->d_o, a->nq);
        gdn_attn_bwd_f32(s, q, k, v, a->o, a->lse, (float)a->scale, d_o, a->dq, a->dk, a->dv);
        free(d_o);
    }
    free(q);
    free(k);
    free(v);
}

#ifdef GDN_HAVE_CUDA
/* The CUDA kernels on the host arrays (copied in, rounded to bf16 in bf16 mode; copied out). */
static void run_cuda(attn_arrays *a, gdn_cuda_precision p, int want_grad) {
    const gdn_attn_shape *s = &a->s;
    /* documents: a query's first key is its document's start; the first document of a row begins
     * at 0 (in doc it reads as begun before the call, a negative value) */
    int *key_lo = NULL;
    if (a->doc) {
        key_lo = GDN_MALLOC((size_t)s->B * s->T * sizeof *key_lo);
        for (size_t i = 0; i < (size_t)s->B * s->T; i++) key_lo[i] = a->doc[i] < 0 ? 0 : a->doc[i];
    }
    const gdn_cuda_attention_args args = {.B = s->B, .T = s->T, .H = s->H, .Hkv = s->Hkv, .D = s->D,
                                          .key_lo = key_lo, .scale = (float)a->scale, .precision = p};
    float *q = op_to_f32(a->q, a->nq), *k = op_to_f32(a->k, a->nkv), *v = op_to_f32(a->v, a->nkv);
    a->o = attn_alloc_f32(a->nq);
    a->lse = attn_alloc_f32(a->nl);
    if (want_grad) {
        float *d_o = op_to_f32(a->d_o, a->nq);
        a->dq = attn_alloc_f32(a->nq);
        a->dk = attn_alloc_f32(a->nkv);
        a->dv = attn_alloc_f32(a->nkv);
        gdn_cuda_attention_bwd_host(&args, q, k, v, d_o, a->o, a->lse, a->dq, a->dk, a->dv);
        free(d_o);
    } else {
        gdn_cuda_attention_fwd_host(&args, q, k, v, a->o, a->lse);
    }
    free(q);
    free(k);
    free(v);
    free(key_lo);
}
#endif

/* Finite inputs can still overflow: an fp64 value beyond fp32's range, scale q.k beyond the
 * computing precision, or an lse beyond the fp32 output. Name the first output that is not
 * finite instead of writing it. */
static int check_finite(const char *name, const float *x, size_t n, const char *precision) {
    for (size_t i = 0; x && i < n; i++)
        if (!isfinite(x[i])) {
            fprintf(stderr, "gdn op attention: output '%s' is not finite at flat index %zu: the inputs "
                            "are too large for computing in %s or for the fp32 output (values or "
                            "scale * q.k beyond ~3e38); scale them down\n", name, i, precision);
            return -1;
        }
    return 0;
}

static void free_arrays(attn_arrays *a) {
    double *in[] = {a->q, a->k, a->v, a->d_o};
    float *out[] = {a->o, a->lse, a->dq, a->dk, a->dv};
    for (size_t i = 0; i < 4; i++) free(in[i]);
    for (size_t i = 0; i < 5; i++) free(out[i]);
    free(a->doc);
}

int gdn_cmd_op_attention(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *backend = "cpu", *precision = NULL;
    for (int i = 1; i < argc; i += 2) { /* OPTION VALUE pairs */
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { attn_usage(stdout); return 0; }
        if (!val) { fprintf(stderr, "gdn op attention: option '%s' needs a value\n", a); return 2; }
        if (!strcmp(a, "--in")) in = val;
        else if (!strcmp(a, "--out")) out = val;
        else if (!strcmp(a, "--backend")) backend = val;
        else if (!strcmp(a, "--precision")) precision = val;
        else {
            fprintf(stderr, "gdn op attention: unknown option '%s'\n\n", a);
            attn_usage(stderr);
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "gdn op attention: --in and --out are required\n\n");
        attn_usage(stderr);
        return 2;
    }
    const int use_cuda = !strcmp(backend, "cuda");
    if (!use_cuda && strcmp(backend, "cpu")) {
        fprintf(stderr, "gdn op attention: --backend must be cpu or cuda (got '%s')\n", backend);
        return 2;
    }
    if (!precision) precision = use_cuda ? "bf16" : "fp32";
    if (use_cuda ? strcmp(precision, "bf16") && strcmp(precision, "fp32")
                 : strcmp(precision, "fp32") && strcmp(precision, "fp64")) {
        fprintf(stderr, "gdn op attention: --precision %s is not available on %s (cpu: fp32, fp64; cuda: bf16, "
                        "fp32)\n", precision, backend);
        return 2;
    }
#ifndef GDN_HAVE_CUDA
    if (use_cuda) { /* refused before any input is read */
        fprintf(stderr, "gdn op attention: this build has no CUDA backend (rebuild where nvcc is installed); use "
                        "--backend cpu\n");
        return 2;
    }
#endif
    if (op_same_file(in, out)) {
        fprintf(stderr, "gdn op attention: --out %s is the input file %s (the same file): writing it would "
                        "destroy the input; choose another output path\n", out, in);
        return 2;
    }
    io_h5_quiet();
    char err[512];
    hid_t f = H5Fopen(in, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) GDN_DIE("cannot open %s as HDF5: %s", in, io_h5_last_error(err, sizeof err));

    attn_arrays a;
    memset(&a, 0, sizeof a);
    long long dq[4], dk[4], dd[4], any[4] = {-1, -1, -1, -1};
    char want[160];
    a.q = op_read_array(f, in, "q", 4, any, "[B,T,H,D]", dq, 0);
    long long ek[4] = {dq[0], dq[1], -1, dq[3]};
    snprintf(want, sizeof want, "[B,T,Hkv,D] = [%lld,%lld,Hkv,%lld] (B, T and D of q)", dq[0], dq[1], dq[3]);
    a.k = op_read_array(f, in, "k", 4, ek, want, dk, 0);
    if (dq[2] % dk[2])
        GDN_DIE("%s: q has %lld heads and k has %lld: the query heads must be a multiple of the kv heads "
                "(query head h reads kv head h / (H/Hkv))", in, dq[2], dk[2]);
    snprintf(want, sizeof want, "[%lld,%lld,%lld,%lld] (the shape of k)", dk[0], dk[1], dk[2], dk[3]);
    a.v = op_read_array(f, in, "v", 4, dk, want, dd, 0);
    snprintf(want, sizeof want, "[%lld,%lld,%lld,%lld] (the shape of q)", dq[0], dq[1], dq[2], dq[3]);
    a.d_o = op_read_array(f, in, "do", 4, dq, want, dd, 1);
    a.s = (gdn_attn_shape){(int)dq[0], (int)dq[1], (int)dq[2], (int)dk[2], (int)dq[3], NULL};
    a.scale = 1.0 / sqrt((double)a.s.D);
    a.doc = op_read_cu_seqlens(f, in, a.s.B, a.s.T);
    a.s.doc = a.doc;
    if (op_read_scale(f, in, &a.scale)) {
        io_h5_close(f);
        free_arrays(&a);
        return 1;
    }
    io_h5_close(f);
    a.nq = (size_t)a.s.B * a.s.T * a.s.H * a.s.D;
    a.nkv = (size_t)a.s.B * a.s.T * a.s.Hkv * a.s.D;
    a.nl = (size_t)a.s.B * a.s.H * a.s.T;
    int want_grad = a.d_o != NULL;
    if (use_cuda) {
#ifdef GDN_HAVE_CUDA
        if (gdn_cuda_device_count() == 0) {
            fprintf(stderr, "gdn op attention: --backend cuda: no CUDA device is available\n");
            free_arrays(&a);
            return 1;
        }
        if (a.s.D != 64 && a.s.D != 128) {
            fprintf(stderr, "gdn op attention: --backend cuda takes head dims 64 and 128, and %s has D=%d; use "
                            "--backend cpu\n", in, a.s.D);
            free_arrays(&a);
            return 2;
        }
        run_cuda(&a, !strcmp(precision, "bf16") ? GDN_CUDA_BF16 : GDN_CUDA_FP32, want_grad);
#endif
    } else {
        run_cpu(&a, !strcmp(precision, "fp64"), want_grad);
    }

    if (check_finite("o", a.o, a.nq, precision) || check_finite("lse", a.lse, a.nl, precision) ||
        check_finite("dq", a.dq, a.nq, precision) || check_finite("dk", a.dk, a.nkv, precision) ||
        check_finite("dv", a.dv, a.nkv, precision)) {
        free_arrays(&a);
        return 1;
    }
    hid_t o = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (o < 0) GDN_DIE("cannot create %s: %s", out, io_h5_last_error(err, sizeof err));
    long long shq[4] = {a.s.B, a.s.T, a.s.H, a.s.D}, shk[4] = {a.s.B, a.s.T, a.s.Hkv, a.s.D};
    long long shl[3] = {a.s.B, a.s.H, a.s.T};
    op_write_f32(o, out, "o", 4, shq, a.o);
    op_write_f32(o, out, "lse", 3, shl, a.lse);
    if (want_grad) {
        op_write_f32(o, out, "dq", 4, shq, a.dq);
        op_write_f32(o, out, "dk", 4, shk, a.dk);
        op_write_f32(o, out, "dv", 4, shk, a.dv);
    }
    if (H5Fclose(o) < 0) GDN_DIE("cannot close %s: %s", out, io_h5_last_error(err, sizeof err));
    printf("gdn op attention: B=%d T=%d H=%d Hkv=%d D=%d scale=%g backend=%s precision=%s%s%s -> %s\n",
           a.s.B, a.s.T, a.s.H, a.s.Hkv, a.s.D, a.scale, backend, precision,
           a.doc ? " documents=cu_seqlens" : "", want_grad ? " (with gradients)" : "", out);
    free_arrays(&a);
    return 0;
}
