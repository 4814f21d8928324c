/* gdn op logits: a checkpoint's logits for token ids from an HDF5 file, to compare the model with
 * other implementations (an imported Hugging Face model with transformers, for one). Each
 * sequence runs as one forward pass of the CPU model from position 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5util.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "train/commands.h"
#include "train/model_load.h"
#include "train/op_io.h"

static void logits_usage(FILE *f) {
    fprintf(f,
            "usage: gdn op logits --ckpt FILE.h5 --in IDS.h5 --out LOGITS.h5 [--precision fp32|fp64]\n\n"
            "Input: dataset 'ids' [B,T] of token ids (int32, or any integer type), each in\n"
            "[0, vocab_size). Output: dataset 'logits' [B,T,V] (float32): row t holds the logits of\n"
            "the token after ids[b, 0..t], as one forward pass per sequence from position 0 (what\n"
            "transformers' model(input_ids).logits gives). The CPU model computes in fp32 (default)\n"
            "or fp64 (the parameters widened from the checkpoint's fp32).\n");
}

/* Reads the integer dataset 'ids' [B,T]; fatal on anything else. */
static int *read_ids(const char *path, int vocab, int *B, int *T) {
    char err[512];
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) GDN_DIE("gdn op logits: cannot open %s as HDF5: %s", path, io_h5_last_error(err, sizeof err));
    if (io_h5_exists(f, "ids") <= 0) GDN_DIE("gdn op logits: %s: missing dataset 'ids' (token ids, shape [B,T])", path);
    hid_t ds = H5Dopen2(f, "ids", H5P_DEFAULT);
    if (ds < 0) GDN_DIE("gdn op logits: %s: cannot open dataset 'ids': %s", path, io_h5_last_error(err, sizeof err));
    hid_t ty = H5Dget_type(ds), sp = H5Dget_space(ds);
    if (H5Tget_class(ty) != H5T_INTEGER)
        GDN_DIE("gdn op logits: %s: dataset 'ids' must hold integers (token ids)", path);
    hsize_t d[2];
    if (H5Sget_simple_extent_ndims(sp) != 2)
        GDN_DIE("gdn op logits: %s: dataset 'ids' must have shape [B,T] (2 dimensions)", path);
    H5Sget_simple_extent_dims(sp, d, NULL);
    if (d[0] < 1 || d[1] < 1 || d[0] > (1u << 20) || d[1] > (1u << 24) || d[0] * d[1] > OP_MAX_ELEMS / (hsize_t)vocab)
        GDN_DIE("gdn op logits: %s: dataset 'ids' has shape [%llu,%llu]: need B, T >= 1 and at most %llu "
                "logits in all", path, (unsigned long long)d[0], (unsigned long long)d[1],
                (unsigned long long)OP_MAX_ELEMS);
    size_t n = (size_t)(d[0] * d[1]);
    long long *raw = GDN_MALLOC(n * sizeof *raw);
    if (H5Dread(ds, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0)
        GDN_DIE("gdn op logits: %s: cannot read dataset 'ids': %s", path, io_h5_last_error(err, sizeof err));
    int *ids = GDN_MALLOC(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        if (raw[i] < 0 || raw[i] >= vocab)
            GDN_DIE("gdn op logits: %s: ids[%zu,%zu] = %lld is outside the model's vocabulary [0, %d)", path,
                    i / (size_t)d[1], i % (size_t)d[1], raw[i], vocab);
        ids[i] = (int)raw[i];
    }
    free(raw);
    io_h5_close(sp);
    io_h5_close(ty);
    io_h5_close(ds);
    io_h5_close(f);
    *B = (int)d[0];
    *T = (int)d[1];
    return ids;
}

int gdn_cmd_op_logits(int argc, char **argv) {
    const char *ckpt = NULL, *in = NULL, *out = NULL, *precision = "fp32";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            logits_usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gdn op logits: option '%s' needs a value (see gdn op logits --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--ckpt")) ckpt = v;
        else if (!strcmp(a, "--in")) in = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--precision")) precision = v;
        else {
            fprintf(stderr, "gdn op logits: unknown option '%s'\n\n", a);
            logits_usage(stderr);
            return 2;
        }
    }
    if (!ckpt || !in || !out) {
        fprintf(stderr, "gdn op logits: --ckpt, --in and --out are required (see gdn op logits --help)\n");
        return 2;
    }
    if (strcmp(precision, "fp32") && strcmp(precision, "fp64")) {
        fprintf(stderr, "gdn op logits: --precision must be fp32 or fp64 (got '%s')\n", precision);
        return 2;
    }
    if (op_same_file(in, out) || op_same_file(ckpt, out)) {
        fprintf(stderr, "gdn op logits: --out %s is an input file; writing it would destroy it\n", out);
        return 2;
    }
    io_h5_quiet();
    char err[2048];
    gdn_param_table t;
    float *params;
    if (gdn_model_load(ckpt, &t, &params, NULL, err, sizeof err)) {
        fprintf(stderr, "gdn op logits: %s\n", err);
        return 1;
    }
    const int V = t.cfg.vocab_size;
    int B, T;
    int *ids = read_ids(in, V, &B, &T);
    const size_t row = (size_t)T * V;
    float *logits = GDN_MALLOC((size_t)B * row * sizeof *logits);
    if (!strcmp(precision, "fp32")) {
        gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(&t, 1, T);
        for (int b = 0; b < B; b++) {
            gdn_cpu_forward_f32(a, &t, params, ids + (size_t)b * T, NULL, 0.0f, NULL, NULL, NULL);
            memcpy(logits + (size_t)b * row, gdn_cpu_logits_f32(a), row * sizeof *logits);
        }
        gdn_cpu_acts_free_f32(a);
    } else {
        double *p64 = GDN_MALLOC(t.total * sizeof *p64);
        for (size_t i = 0; i < t.total; i++) p64[i] = params[i];
        gdn_cpu_acts_f64 *a = gdn_cpu_acts_create_f64(&t, 1, T);
        for (int b = 0; b < B; b++) {
            gdn_cpu_forward_f64(a, &t, p64, ids + (size_t)b * T, NULL, 0.0, NULL, NULL, NULL);
            const double *l = gdn_cpu_logits_f64(a);
            for (size_t i = 0; i < row; i++) logits[(size_t)b * row + i] = (float)l[i];
        }
        gdn_cpu_acts_free_f64(a);
        free(p64);
    }
    hid_t o = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (o < 0) GDN_DIE("gdn op logits: cannot create %s: %s", out, io_h5_last_error(err, sizeof err));
    const long long dims[3] = {B, T, V};
    op_write_f32(o, out, "logits", 3, dims, logits);
    if (H5Fclose(o) < 0) GDN_DIE("gdn op logits: cannot close %s: %s", out, io_h5_last_error(err, sizeof err));
    printf("gdn op logits: %s, B=%d T=%d V=%d, %s -> %s\n", ckpt, B, T, V, precision, out);
    free(logits);
    free(ids);
    free(params);
    gdn_param_table_free(&t);
    return 0;
}
