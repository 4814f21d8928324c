/* gdn op gated-delta: runs the bare chunked gated delta rule on arrays from an HDF5 file, so
 * the kernels can be checked against other implementations. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/h5util.h"
#include "io/parse_num.h"
#include "model/check.h"
#include "model/cpu/ops_cpu.h"
#include "model/mixer.h"
#include "train/commands.h"
#include "train/op_io.h"
#ifdef GDN_HAVE_CUDA
#include "model/cuda/delta_cuda.h"
#endif

static void op_usage(FILE *f) {
    fprintf(f,
            "usage: gdn op gated-delta --in IN.h5 --out OUT.h5 [--chunk 16|32|64] [--backend cpu|cuda]\n"
            "                          [--precision fp32|fp64|bf16] [--variant gdn|deltanet|gla|linear]\n\n"
            "Input datasets (fp32 or fp64): q, k [B,T,H,K]; v [B,T,H,V]; g, beta [B,T,H] (g is the\n"
            "natural-log decay); optional h0 [B,H,K,V]; optional do [B,T,H,V] and dht [B,H,K,V].\n"
            "Optional root attribute 'scale' (default 1/sqrt(K)). q and k are used as given (no\n"
            "normalisation). Outputs (fp32): o, ht, and when do or dht is given dq, dk, dv, dg,\n"
            "dbeta, dh0 (a missing do or dht counts as zeros).\n"
            "Variant: the state update (S [K,V], o_t = scale * S_t^T q_t), default gdn:\n"
            "  gdn       S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T\n"
            "  deltanet  the same with g_t = 0 (g is not needed)\n"
            "  gla       S_t = exp(g_t) S_{t-1} + k_t v_t^T (beta is not needed)\n"
            "  linear    S_t = S_{t-1} + k_t v_t^T (neither g nor beta is needed)\n"
            "An input the variant ignores may be absent; when present it is checked like the others\n"
            "and its gradient (dg or dbeta) is written as zeros. Both backends run every variant.\n"
            "Precision: cpu computes in fp32 (default) or fp64; cuda in fp32 or bf16 (default).\n"
            "Documents: an optional integer dataset cu_seqlens [n+1] = 0, ..., T splits every\n"
            "batch row into the documents [c_i, c_i+1) (B = 1 is the packed varlen layout): the state\n"
            "is zero at each later document's start; h0 enters the first document of a row and ht\n"
            "(and dht) is the state leaving its last one.\n"
            "Softmax attention: gdn op attention --help. A model's logits: gdn op logits --help.\n");
}

/* The valid --variant words, "gdn, deltanet, gla, linear", from the mixer table. */
static void variant_names(char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT && used < n; v++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", v ? ", " : "", gdn_mixer_get(v)->name);
}

/* The op's arrays, all fp32 at the interface (outputs are written as fp32). */
typedef struct {
    gdn_delta_shape s;
    double scale;
    double *q, *k, *v, *g, *beta, *h0, *d_o, *dht;               /* inputs (fp64 copies) */
    float *o, *ht, *dq, *dk, *dv, *dg, *dbeta, *dh0;            /* outputs */
} op_arrays;

static void run_cpu(op_arrays *a, int fp64, int want_grad) {
    const gdn_delta_shape *s = &a->s;
    const size_t nqk = (size_t)s->B * s->T * s->H * s->K, nv = (size_t)s->B * s->T * s->H * s->V;
    const size_t ng = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    if (fp64) {
        double *o = GDN_MALLOC(nv * sizeof *o), *ht = GDN_MALLOC(nst * sizeof *ht);
        gdn_delta_fwd_f64(s, a->q, a->k, a->v, a->g, a->beta, a->scale, a->h0, o, ht);
        a->o = op_to_f32(o, nv);
        a->ht = op_to_f32(ht, nst);
        free(o);
        free(ht);
        if (want_grad) {
            double *dq = GDN_MALLOC(nqk * sizeof *dq), *dk = GDN_MALLOC(nqk * sizeof *dk);
            double *dv = GDN_MALLOC(nv * sizeof *dv), *dg = GDN_MALLOC(ng * sizeof *dg);
            double *db = GDN_MALLOC(ng * sizeof *db), *dh0 = GDN_MALLOC(nst * sizeof *dh0);
            gdn_delta_bwd_f64(s, a->q, a->k, a->v, a->g, a->beta, a->scale, a->h0, a->d_o, a->dht,
                              dq, dk, dv, dg, db, dh0);
            a->dq = op_to_f32(dq, nqk); a->dk = op_to_f32(dk, nqk); a->dv = op_to_f32(dv, nv);
            a->dg = op_to_f32(dg, ng); a->dbeta = op_to_f32(db, ng); a->dh0 = op_to_f32(dh0, nst);
            free(dq); free(dk); free(dv); free(dg); free(db); free(dh0);
        }
        return;
    }
    float *q = op_to_f32(a->q, nqk), *k = op_to_f32(a->k, nqk), *v = op_to_f32(a->v, nv);
    float *g = op_to_f32(a->g, ng), *beta = op_to_f32(a->beta, ng), *h0 = op_to_f32(a->h0, nst);
    a->o = GDN_MALLOC(nv * sizeof(float));
    a->ht = GDN_MALLOC(nst * sizeof(float));
    gdn_delta_fwd_f32(s, q, k, v, g, beta, (float)a->scale, h0, a->o, a->ht);
    if (want_grad) {
        float *d_o = op_to_f32(a->d_o, nv), *dht = op_to_f32(a->dht, nst);
        a->dq = GDN_MALLOC(nqk * sizeof(float)); a->dk = GDN_MALLOC(nqk * sizeof(float));
        a->dv = GDN_MALLOC(nv * sizeof(float)); a->dg = GDN_MALLOC(ng * sizeof(float));
        a->dbeta = GDN_MALLOC(ng * sizeof(float)); a->dh0 = GDN_MALLOC(nst * sizeof(float));
        gdn_delta_bwd_f32(s, q, k, v, g, beta, (float)a->scale, h0, d_o, dht, a->dq, a->dk, a->dv,
                          a->dg, a->dbeta, a->dh0);
        free(d_o);
        free(dht);
    }
    free(q); free(k); free(v); free(g); free(beta); free(h0);
}

#ifdef GDN_HAVE_CUDA
static void run_cuda(op_arrays *a, gdn_cuda_precision p, int want_grad) {
    /* the CUDA calls take the documents in gdn_cuda_delta_in.doc, the shape without them */
    gdn_delta_shape cs = a->s;
    cs.doc = NULL;
    const gdn_delta_shape *s = &cs;
    const size_t nqk = (size_t)s->B * s->T * s->H * s->K, nv = (size_t)s->B * s->T * s->H * s->V;
    const size_t ng = (size_t)s->B * s->T * s->H, nst = (size_t)s->B * s->H * s->K * s->V;
    gdn_cuda_delta_check_shape(s);
    float *q = op_to_f32(a->q, nqk), *k = op_to_f32(a->k, nqk), *v = op_to_f32(a->v, nv);
    float *g = op_to_f32(a->g, ng), *beta = op_to_f32(a->beta, ng), *h0 = op_to_f32(a->h0, nst);
    a->o = GDN_MALLOC(nv * sizeof(float));
    a->ht = GDN_MALLOC(nst * sizeof(float));
    /* host arrays: the wrappers copy them in and out; the gates a variant ignores are not read */
    const gdn_cuda_delta_in in = {.shape = *s, .prec = p, .q = q, .k = k, .v = v, .g = g,
                                  .beta = beta, .scale = (float)a->scale, .h0 = h0, .doc = a->s.doc};
    gdn_cuda_delta_fwd_host(&(gdn_cuda_delta_fwd_args){.in = in, .o = a->o, .ht = a->ht});
    if (want_grad) {
        float *d_o = op_to_f32(a->d_o, nv), *dht = op_to_f32(a->dht, nst);
        a->dq = GDN_MALLOC(nqk * sizeof(float)); a->dk = GDN_MALLOC(nqk * sizeof(float));
        a->dv = GDN_MALLOC(nv * sizeof(float)); a->dg = GDN_MALLOC(ng * sizeof(float));
        a->dbeta = GDN_MALLOC(ng * sizeof(float)); a->dh0 = GDN_MALLOC(nst * sizeof(float));
        gdn_cuda_delta_bwd_host(&(gdn_cuda_delta_bwd_args){
            .in = in, .d_o = d_o, .dht = dht, .dq = a->dq, .dk = a->dk, .dv = a->dv, .dg = a->dg,
            .dbeta = a->dbeta, .dh0 = a->dh0});
        free(d_o);
        free(dht);
    }
    free(q); free(k); free(v); free(g); free(beta); free(h0);
}
#endif

static int cmd_gated_delta(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *backend = "cpu", *precision = NULL, *variant_name = "gdn";
    int chunk = 64;
    for (int i = 1; i < argc; i += 2) { /* OPTION VALUE pairs */
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { op_usage(stdout); return 0; }
        if (!val) { fprintf(stderr, "gdn op: option '%s' needs a value\n", a); return 2; }
        if (!strcmp(a, "--in")) in = val;
        else if (!strcmp(a, "--out")) out = val;
        else if (!strcmp(a, "--backend")) backend = val;
        else if (!strcmp(a, "--precision")) precision = val;
        else if (!strcmp(a, "--variant")) variant_name = val;
        else if (!strcmp(a, "--chunk")) {
            char err[256];
            if (io_parse_int("--chunk", val, 16, 64, &chunk, err, sizeof err)) {
                fprintf(stderr, "gdn op: %s\n", err);
                return 2;
            }
        } else { fprintf(stderr, "gdn op: unknown option '%s'\n\n", a); op_usage(stderr); return 2; }
    }
    if (!in || !out) { fprintf(stderr, "gdn op: --in and --out are required\n\n"); op_usage(stderr); return 2; }
    if (chunk != 16 && chunk != 32 && chunk != 64) {
        fprintf(stderr, "gdn op: --chunk must be 16, 32 or 64 (got %d)\n", chunk);
        return 2;
    }
    int use_cuda = !strcmp(backend, "cuda");
    if (!use_cuda && strcmp(backend, "cpu")) {
        fprintf(stderr, "gdn op: --backend must be cpu or cuda (got '%s')\n", backend);
        return 2;
    }
    int variant = gdn_mixer_from_name(variant_name);
    if (variant < 0 || !gdn_mixer_get(variant)->is_delta) {
        char names[128];
        variant_names(names, sizeof names);
        fprintf(stderr, "gdn op: unknown --variant '%s' (valid: %s)\n", variant_name, names);
        return 2;
    }
    const gdn_mixer_info *mx = gdn_mixer_get(variant);
    if (!precision) precision = use_cuda ? "bf16" : "fp32";
    int ok_prec = use_cuda ? (!strcmp(precision, "bf16") || !strcmp(precision, "fp32"))
                           : (!strcmp(precision, "fp32") || !strcmp(precision, "fp64"));
    if (!ok_prec) {
        fprintf(stderr, "gdn op: --precision %s is not available on %s (cpu: fp32, fp64; cuda: fp32, bf16)\n",
                precision, backend);
        return 2;
    }
    if (op_same_file(in, out)) {
        fprintf(stderr, "gdn op: --out %s is the input file %s (the same file): writing it would destroy "
                        "the input; choose another output path\n", out, in);
        return 2;
    }
    io_h5_quiet();
    char err[512];
    hid_t f = H5Fopen(in, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) GDN_DIE("cannot open %s as HDF5: %s", in, io_h5_last_error(err, sizeof err));

    op_arrays a;
    memset(&a, 0, sizeof a);
    long long dq[4], dv[4], dg[3], dh[4], any[4] = {-1, -1, -1, -1};
    a.q = op_read_array(f, in, "q", 4, any, "[B,T,H,K]", dq, 0);
    a.k = op_read_array(f, in, "k", 4, dq, "[B,T,H,K] (same as q)", dv, 0);
    long long ev[4] = {dq[0], dq[1], dq[2], -1};
    a.v = op_read_array(f, in, "v", 4, ev, "[B,T,H,V] (B, T, H as q)", dv, 0);
    long long eg[3] = {dq[0], dq[1], dq[2]};
    /* an input the variant ignores may be absent; present, it is still checked */
    a.g = op_read_array(f, in, "g", 3, eg, "[B,T,H] (as q)", dg, !mx->has_decay);
    a.beta = op_read_array(f, in, "beta", 3, eg, "[B,T,H] (as q)", dg, !mx->has_beta);
    long long es[4] = {dq[0], dq[2], dq[3], dv[3]};
    a.h0 = op_read_array(f, in, "h0", 4, es, "[B,H,K,V]", dh, 1);
    a.d_o = op_read_array(f, in, "do", 4, dv, "[B,T,H,V] (as v)", dh, 1);
    a.dht = op_read_array(f, in, "dht", 4, es, "[B,H,K,V]", dh, 1);
    a.s = (gdn_delta_shape){(int)dq[0], (int)dq[1], (int)dq[2], (int)dq[3], (int)dv[3], chunk, 0, variant, NULL};
    a.scale = 1.0 / sqrt((double)a.s.K);
    int *doc = op_read_cu_seqlens(f, in, a.s.B, a.s.T);
    a.s.doc = doc;
    if (op_read_scale(f, in, &a.scale)) {
        free(doc);
        io_h5_close(f);
        double *in_arrays[] = {a.q, a.k, a.v, a.g, a.beta, a.h0, a.d_o, a.dht};
        for (size_t i = 0; i < 8; i++) free(in_arrays[i]);
        return 1;
    }
    io_h5_close(f);
    int want_grad = a.d_o || a.dht;
    const size_t nv = (size_t)a.s.B * a.s.T * a.s.H * a.s.V;
    if (want_grad && !a.d_o) a.d_o = GDN_CALLOC(nv, sizeof(double));

    if (use_cuda) {
#ifdef GDN_HAVE_CUDA
        if (gdn_cuda_device_count() == 0) {
            fprintf(stderr, "gdn op: --backend cuda: no CUDA device is available\n");
            return 1;
        }
        run_cuda(&a, !strcmp(precision, "bf16") ? GDN_CUDA_BF16 : GDN_CUDA_FP32, want_grad);
#else
        fprintf(stderr, "gdn op: this build has no CUDA backend (rebuild where nvcc is installed)\n");
        return 2;
#endif
    } else {
        run_cpu(&a, !strcmp(precision, "fp64"), want_grad);
    }

    hid_t o = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (o < 0) GDN_DIE("cannot create %s: %s", out, io_h5_last_error(err, sizeof err));
    long long shv[4] = {a.s.B, a.s.T, a.s.H, a.s.V}, shk[4] = {a.s.B, a.s.T, a.s.H, a.s.K};
    long long shg[3] = {a.s.B, a.s.T, a.s.H}, shs[4] = {a.s.B, a.s.H, a.s.K, a.s.V};
    op_write_f32(o, out, "o", 4, shv, a.o);
    op_write_f32(o, out, "ht", 4, shs, a.ht);
    if (want_grad) {
        op_write_f32(o, out, "dq", 4, shk, a.dq);
        op_write_f32(o, out, "dk", 4, shk, a.dk);
        op_write_f32(o, out, "dv", 4, shv, a.dv);
        op_write_f32(o, out, "dg", 3, shg, a.dg);
        op_write_f32(o, out, "dbeta", 3, shg, a.dbeta);
        op_write_f32(o, out, "dh0", 4, shs, a.dh0);
    }
    if (H5Fclose(o) < 0) GDN_DIE("cannot close %s: %s", out, io_h5_last_error(err, sizeof err));
    printf("gdn op gated-delta: B=%d T=%d H=%d K=%d V=%d chunk=%d scale=%g variant=%s backend=%s "
           "precision=%s%s%s -> %s\n",
           a.s.B, a.s.T, a.s.H, a.s.K, a.s.V, chunk, a.scale, mx->name, backend, precision,
           doc ? " documents=cu_seqlens" : "", want_grad ? " (with gradients)" : "", out);
    free(doc);
    double *in_arrays[] = {a.q, a.k, a.v, a.g, a.beta, a.h0, a.d_o, a.dht};
    float *out_arrays[] = {a.o, a.ht, a.dq, a.dk, a.dv, a.dg, a.dbeta, a.dh0};
    for (size_t i = 0; i < 8; i++) { free(in_arrays[i]); free(out_arrays[i]); }
    return 0;
}

int gdn_cmd_op(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        op_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "gated-delta")) return cmd_gated_delta(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attention")) return gdn_cmd_op_attention(argc - 1, argv + 1);
    if (!strcmp(argv[1], "logits")) return gdn_cmd_op_logits(argc - 1, argv + 1);
    fprintf(stderr, "gdn op: unknown operator '%s' (available: gated-delta, attention, logits)\n", argv[1]);
    return 2;
}
