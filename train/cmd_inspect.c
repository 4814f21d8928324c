/* gdn inspect [--json] FILE.h5: a checkpoint's header, state and every tensor with its shape,
 * L2 norm and checksum status. Exit status 0 when every checksum verifies, 1 when the file is
 * unreadable or any tensor fails (named on stderr), 2 on a usage error. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/checkpoint.h"
#include "train/commands.h"

static void usage(FILE *f) {
    fprintf(f, "usage: gdn inspect [--json] FILE.h5\n"
               "  Prints format version, step, tokens seen, the run configuration and, for every\n"
               "  tensor under /params and /optim, its shape, L2 norm and checksum status.\n"
               "  --json  one JSON object instead of the table\n"
               "  Exit status: 0 all checksums verify, 1 a tensor or the file is bad, 2 usage.\n");
}

/* s as a JSON string literal (quotes included). */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

static double l2_norm(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return sqrt(s);
}

static void shape_str(const ckpt_tensor_view *t, char *out, size_t len) {
    size_t k = (size_t)snprintf(out, len, "[");
    for (int d = 0; d < t->ndim && k < len; d++)
        k += (size_t)snprintf(out + k, len - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < len) snprintf(out + k, len - k, "]");
}

typedef struct {
    int json;
    int count;
    size_t numel;
} inspect_ctx;

static int print_tensor(const ckpt_tensor_view *t, void *user) {
    inspect_ctx *ctx = user;
    char shape[96];
    shape_str(t, shape, sizeof shape);
    double norm = t->data ? l2_norm(t->data, t->numel) : NAN;
    const char *status = t->status == CKPT_OK           ? "ok"
                         : t->status == CKPT_E_CHECKSUM ? "MISMATCH"
                                                        : "UNREADABLE";
    if (ctx->json) {
        printf("%s\n    {\"name\": ", ctx->count ? "," : "");
        json_str(stdout, t->name);
        printf(", \"shape\": %s, \"numel\": %zu, \"l2\": ", shape, t->numel);
        if (isfinite(norm))
            printf("%.17g", norm);
        else
            printf("null");
        printf(", \"crc32\": %u, \"crc32_data\": %u, \"status\": \"%s\"}", t->crc_stored,
               t->crc_actual, status);
    } else {
        printf("%-48s %-16s %14.6e  %s%s%s\n", t->name, shape, norm, status,
               t->status == CKPT_OK ? "" : ": ", t->problem);
    }
    ctx->count++;
    ctx->numel += t->numel;
    return 0;
}

/* Every field of the model configuration: "NAME": VALUE, ... (json) or  NAME=VALUE ... */
static void print_model(const gdn_config *m, int json) {
    for (int i = 0; i < GDN_CONFIG_N_FIELDS; i++) {
        const gdn_config_field *f = &gdn_config_fields[i];
        char num[64];
        if (f->type != GDN_FIELD_STR) gdn_config_format(m, f, json, num, sizeof num);
        const char *v = f->type == GDN_FIELD_STR ? gdn_config_get_str(m, f) : num;
        if (!json) {
            printf(" %s=%s", f->name, v);
            continue;
        }
        printf("%s\"%s\": ", i ? ", " : "", f->name);
        if (f->type == GDN_FIELD_STR) json_str(stdout, v);
        else printf("%s", v);
    }
}

static void print_header(const char *path, const ckpt_info *info, int json) {
    const gdn_config *m = &info->model;
    if (json) {
        printf("{\n  \"file\": ");
        json_str(stdout, path);
        printf(",\n  \"format\": \"%s\", \"format_version\": %lld, \"step\": %lld, "
               "\"tokens_seen\": %lld,\n  \"model\": {",
               CKPT_FORMAT, (long long)info->format_version, (long long)info->step,
               (long long)info->tokens_seen);
        print_model(m, 1);
        printf("},\n  \"rng\": [");
        for (int i = 0; i < info->n_rng; i++)
            printf("%s%llu", i ? ", " : "", (unsigned long long)info->rng[i]);
        printf("],\n  \"state\": {");
        for (int i = 0; i < info->n_state; i++) {
            printf("%s", i ? ", " : "");
            json_str(stdout, info->state[i].name);
            printf(": %lld", (long long)info->state[i].value);
        }
        printf("},\n  \"config\": ");
        json_str(stdout, info->config_json);
        printf(",\n  \"tensors\": [");
        return;
    }
    printf("file            %s\n", path);
    printf("format          %s version %lld\n", CKPT_FORMAT, (long long)info->format_version);
    printf("step            %lld\n", (long long)info->step);
    printf("tokens_seen     %lld\n", (long long)info->tokens_seen);
    printf("model          ");
    print_model(m, 0);
    printf("\n");
    printf("optimizer       %s\n",
           info->has_optim ? "AdamW moments present" : "none (weights only)");
    printf("state           rng[%d]", info->n_rng);
    for (int i = 0; i < info->n_state; i++)
        printf(" %s=%lld", info->state[i].name, (long long)info->state[i].value);
    printf("\nconfig          %s\n\n", info->config_json);
    printf("%-48s %-16s %14s  %s\n", "tensor", "shape", "L2 norm", "checksum");
}

int gdn_cmd_inspect(int argc, char **argv) {
    int json = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "gdn inspect: unexpected argument \"%s\"\n", argv[i]);
            usage(stderr);
            return 2;
        } else
            path = argv[i];
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    char err[2048];
    ckpt_info info;
    if (ckpt_read_info(path, &info, err, sizeof err) != CKPT_OK) {
        fprintf(stderr, "gdn inspect: %s\n", err);
        return 1;
    }
    print_header(path, &info, json);
    ckpt_info_free(&info);

    inspect_ctx ctx = {json, 0, 0};
    int st = ckpt_verify(path, print_tensor, &ctx, err, sizeof err);
    if (json) {
        printf("\n  ],\n  \"n_tensors\": %d, \"numel\": %zu, \"ok\": %s", ctx.count, ctx.numel,
               st == CKPT_OK ? "true" : "false");
        if (st != CKPT_OK) {
            printf(", \"error\": ");
            json_str(stdout, err);
        }
        printf("\n}\n");
    } else {
        printf("\n%d tensors, %zu values: %s\n", ctx.count, ctx.numel,
               st == CKPT_OK ? "all checksums ok" : "FAILED");
    }
    fflush(stdout);
    if (st != CKPT_OK) {
        fprintf(stderr, "gdn inspect: %s\n", err);
        return 1;
    }
    return 0;
}
