/* The bytes per token of shards made by gdn data, from the PREFIX_data.json beside them. */
#include "train/eval_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"

static const char *const kinds[2] = {"train", "val"};

/* "PREFIX_KIND_NNNNNN.bin" as gdn data names shards: the prefix's length, the kind (0 train,
 * 1 val) and N; -1 when the name is not of that form. */
static int shard_name(const char *name, size_t *prefix_len, int *kind, long *index) {
    size_t n = strlen(name);
    if (n < 4 || strcmp(name + n - 4, ".bin")) return -1;
    size_t end = n - 4, d = end;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') d--;
    if (end - d < 6 || end - d > 9 || d == 0 || name[d - 1] != '_') return -1;
    long v = 0;
    for (size_t i = d; i < end; i++) v = v * 10 + (name[i] - '0');
    size_t us = d - 1; /* the '_' before the number */
    for (int k = 0; k < 2; k++) {
        size_t m = strlen(kinds[k]);
        if (us >= m + 1 && !strncmp(name + us - m, kinds[k], m) && name[us - m - 1] == '_') {
            *prefix_len = us - m - 1;
            *kind = k;
            *index = v;
            return 0;
        }
    }
    return -1;
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* A part's counts: {tokens, bytes, shards}, each a non-negative integer. */
static int read_part(const io_json *root, const char *path, int k, int64_t v[3], char *why,
                     int why_len) {
    static const char *const keys[3] = {"tokens", "bytes", "shards"};
    const io_json *p = io_json_get(root, kinds[k]);
    if (!p || p->type != IO_JSON_OBJECT) {
        snprintf(why, (size_t)why_len, "%s: no '%s' object", path, kinds[k]);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        char err[512];
        int r = io_json_get_i64(p, keys[i], &v[i], err, sizeof err);
        if (r == 0) snprintf(why, (size_t)why_len, "%s: '%s' has no '%s'", path, kinds[k], keys[i]);
        else if (r < 0) snprintf(why, (size_t)why_len, "%s", err);
        else if (v[i] < 0)
            snprintf(why, (size_t)why_len, "%s: %s.%s is negative (%lld)", path, kinds[k], keys[i],
                     (long long)v[i]);
        if (r != 1 || v[i] < 0) return -1;
    }
    return 0;
}

/* Checks the shards of tok against the parsed record: fills out or writes the warning. */
static int match(const io_tokens *tok, const io_json *root, const char *path, int model_vocab,
                 const int *kind, const long *index, gdn_eval_bytes *out, char *why, int why_len) {
    char err[512];
    int vocab = 0;
    const char *dtype = NULL;
    int r = io_json_get_int(root, "vocab_size", &vocab, err, sizeof err);
    if (r != 1 || vocab < 1) {
        if (r < 0) snprintf(why, (size_t)why_len, "%s", err);
        else snprintf(why, (size_t)why_len, "%s: no positive vocab_size", path);
        return -1;
    }
    if (vocab > model_vocab) {
        snprintf(why, (size_t)why_len, "%s: the shards' tokenizer has %d ids but the model only %d: "
                 "the data were not made for this model", path, vocab, model_vocab);
        return -1;
    }
    r = io_json_get_string(root, "dtype", &dtype, err, sizeof err);
    if (r != 1 || (strcmp(dtype, "u16") && strcmp(dtype, "u32"))) {
        if (r < 0) snprintf(why, (size_t)why_len, "%s", err);
        else snprintf(why, (size_t)why_len, "%s: dtype must be \"u16\" or \"u32\"", path);
        return -1;
    }
    int width = dtype[1] == '1' ? 2 : 4;
    int64_t part[2][3], sum[2] = {0, 0};
    int used[2] = {0, 0};
    for (int s = 0; s < tok->n_spans; s++) used[kind[s]] = 1;
    for (int k = 0; k < 2; k++)
        if (used[k] && read_part(root, path, k, part[k], why, why_len)) return -1;
    for (int s = 0; s < tok->n_spans; s++) {
        const io_token_span *sp = &tok->spans[s];
        if (sp->width != width) {
            snprintf(why, (size_t)why_len, "%s: dtype %s, but %s holds %d-byte tokens", path, dtype,
                     sp->name, sp->width);
            return -1;
        }
        if (index[s] >= part[kind[s]][2]) {
            snprintf(why, (size_t)why_len, "%s: %s is shard %ld of '%s', which has %lld shards: the "
                     "shards and the record are from different runs", path, sp->name, index[s],
                     kinds[kind[s]], (long long)part[kind[s]][2]);
            return -1;
        }
        sum[kind[s]] += (int64_t)sp->n;
    }
    /* every shard of a part, each once: its tokens are the record's; a subset: at most those */
    long *idx = malloc((size_t)tok->n_spans * sizeof *idx);
    if (!idx) {
        snprintf(why, (size_t)why_len, "out of memory");
        return -1;
    }
    int whole = 1;
    for (int k = 0; k < 2; k++) {
        if (!used[k]) continue;
        int m = 0, distinct = 0;
        for (int s = 0; s < tok->n_spans; s++)
            if (kind[s] == k) idx[m++] = index[s];
        qsort(idx, (size_t)m, sizeof *idx, cmp_long);
        for (int i = 0; i < m; i++) distinct += i == 0 || idx[i] != idx[i - 1];
        int all = distinct == m && distinct == part[k][2];
        if (all ? sum[k] != part[k][0] : (distinct == m && sum[k] > part[k][0])) {
            snprintf(why, (size_t)why_len, "%s: the %s shards given hold %lld tokens but the record "
                     "says '%s' has %s%lld: the shards and the record are from different runs",
                     path, kinds[k], (long long)sum[k], kinds[k], all ? "" : "only ",
                     (long long)part[k][0]);
            free(idx);
            return -1;
        }
        whole &= all;
    }
    free(idx);
    int64_t tokens = 0, bytes = 0;
    for (int k = 0; k < 2; k++)
        if (used[k]) tokens += part[k][0], bytes += part[k][1];
    if (tokens <= 0 || bytes <= 0) {
        snprintf(why, (size_t)why_len, "%s: '%s' records %lld tokens and %lld bytes: no ratio", path,
                 used[0] && used[1] ? "train+val" : kinds[used[1]], (long long)tokens,
                 (long long)bytes);
        return -1;
    }
    out->tokens = tokens;
    out->bytes = bytes;
    out->bytes_per_token = (double)bytes / (double)tokens;
    out->whole = whole;
    snprintf(out->part, sizeof out->part, "%s", used[0] && used[1] ? "train+val" : kinds[used[1]]);
    return 1;
}

int gdn_eval_bytes_find(const io_tokens *tok, int model_vocab, gdn_eval_bytes *out, char *why,
                        int why_len) {
    memset(out, 0, sizeof *out);
    if (tok->is_text || tok->n_spans == 0) {
        snprintf(why, (size_t)why_len, "not token shards");
        return 0;
    }
    int *kind = malloc((size_t)tok->n_spans * sizeof *kind);
    long *index = malloc((size_t)tok->n_spans * sizeof *index);
    if (!kind || !index) {
        free(kind), free(index);
        snprintf(why, (size_t)why_len, "out of memory");
        return -1;
    }
    size_t plen = 0;
    int rc = 0;
    for (int s = 0; s < tok->n_spans && rc == 0; s++) {
        size_t len;
        const char *name = tok->spans[s].name;
        if (shard_name(name, &len, &kind[s], &index[s])) {
            snprintf(why, (size_t)why_len, "%s is not named PREFIX_train_NNNNNN.bin or "
                     "PREFIX_val_NNNNNN.bin as gdn data names shards", name);
            rc = 2;
        } else if (s > 0 && (len != plen || strncmp(name, tok->spans[0].name, len))) {
            snprintf(why, (size_t)why_len, "the shards come from more than one gdn data prefix");
            rc = 2;
        }
        plen = len;
    }
    struct stat st;
    if (rc == 0 && plen + 11 > sizeof out->path) {
        snprintf(why, (size_t)why_len, "the shards' prefix is too long");
        rc = 2;
    }
    if (rc == 0) {
        snprintf(out->path, sizeof out->path, "%.*s_data.json", (int)plen, tok->spans[0].name);
        if (stat(out->path, &st) != 0) {
            snprintf(why, (size_t)why_len, "no %s beside the shards", out->path);
            rc = 2;
        }
    }
    if (rc == 0) {
        char err[1024];
        io_json *root = io_json_parse_file(out->path, err, sizeof err);
        if (!root) {
            snprintf(why, (size_t)why_len, "%s", err);
            rc = -1;
        } else if (root->type != IO_JSON_OBJECT) {
            snprintf(why, (size_t)why_len, "%s: not a JSON object", out->path);
            rc = -1;
        } else {
            rc = match(tok, root, out->path, model_vocab, kind, index, out, why, why_len);
        }
        io_json_free(root);
    }
    free(kind), free(index);
    return rc == 2 ? 0 : rc;
}
