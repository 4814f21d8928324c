/* gdn tokenize: text -> JSON array of token ids with a BPE tokenizer, or back (--decode). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "io/tokenizer.h"
#include "io/tokens.h"
#include "train/commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn tokenize --tokenizer PATH --in FILE --out FILE [--decode]\n"
            "\n"
            "Encodes a text file into a JSON array of token ids, or with --decode a JSON array\n"
            "of ids back into text (the bytes exactly).\n"
            "\n"
            "  --tokenizer PATH  a tokenizer.json, or a directory holding tokenizer.json or\n"
            "                    vocab.json + merges.txt (GPT-2: no text is special, no prefix\n"
            "                    space); with tokenizer.json its added tokens are matched in\n"
            "                    the text as Hugging Face tokenizers matches them (no template:\n"
            "                    nothing is added around the text)\n"
            "  --in FILE         text (plain or gzip), or with --decode a JSON array of ids\n"
            "  --out FILE        the JSON array of ids, or with --decode the text\n"
            "  --decode          ids -> text\n"
            "  -h, --help        show this text\n");
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "gdn tokenize: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see gdn tokenize --help)\n");
    return 2;
}

/* Writes data (then tail, when not NULL) to path. */
static int write_file(const char *path, const void *data, size_t n, const char *tail) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "gdn tokenize: error: %s: cannot write: %s\n", path, strerror(errno));
        return 1;
    }
    int bad = fwrite(data, 1, n, f) != n || (tail && fputs(tail, f) == EOF);
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (bad) {
        fprintf(stderr, "gdn tokenize: error: %s: cannot write: %s\n", path, strerror(err));
        return 1;
    }
    return 0;
}

static int encode(const io_tokenizer *t, const char *in, const char *out) {
    char err[1024];
    unsigned char *text;
    size_t n;
    if (io_text_read(in, &text, &n, err, sizeof err)) {
        fprintf(stderr, "gdn tokenize: error: %s\n", err);
        return 1;
    }
    io_tok_enc *e = io_tok_enc_new(t);
    io_ids ids = {0};
    int rc = 1;
    if (!e) fprintf(stderr, "gdn tokenize: error: out of memory\n");
    else if (io_tok_encode(e, text, n, &ids, err, sizeof err))
        fprintf(stderr, "gdn tokenize: error: %s: %s\n", in, err);
    else {
        io_jw w;
        io_jw_init(&w, 0);
        io_jw_begin_array(&w);
        for (size_t i = 0; i < ids.n; i++) io_jw_int(&w, ids.ids[i]);
        io_jw_end_array(&w);
        rc = write_file(out, io_jw_text(&w), w.len, "\n");
        io_jw_free(&w);
        if (!rc) printf("%s: %zu bytes -> %zu ids\n", in, n, ids.n);
    }
    io_ids_free(&ids);
    io_tok_enc_free(e);
    free(text);
    return rc;
}

static int decode(const io_tokenizer *t, const char *in, const char *out) {
    char err[1024];
    io_json *arr = io_json_parse_file(in, err, sizeof err);
    if (!arr) {
        fprintf(stderr, "gdn tokenize: error: %s\n", err);
        return 1;
    }
    int rc = 1;
    uint32_t *ids = NULL;
    if (arr->type != IO_JSON_ARRAY) {
        fprintf(stderr, "gdn tokenize: error: %s: expected a JSON array of token ids, found %s\n",
                in, io_json_type_name(arr->type));
        goto done;
    }
    ids = malloc((arr->n_items + 1) * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "gdn tokenize: error: out of memory for %zu ids\n", arr->n_items);
        goto done;
    }
    for (size_t i = 0; i < arr->n_items; i++) {
        const io_json *v = &arr->items[i];
        if (v->type != IO_JSON_NUMBER || v->number < 0 || v->number >= 4294967295.0 ||
            v->number != (double)(uint32_t)v->number) {
            char where[512];
            io_json_where(v, where, sizeof where);
            fprintf(stderr, "gdn tokenize: error: %s: a token id must be a whole number >= 0\n",
                    where);
            goto done;
        }
        ids[i] = (uint32_t)v->number;
    }
    unsigned char *text;
    size_t n;
    if (io_tokenizer_decode(t, ids, arr->n_items, &text, &n, err, sizeof err)) {
        fprintf(stderr, "gdn tokenize: error: %s: %s\n", in, err);
        goto done;
    }
    rc = write_file(out, text, n, NULL);
    if (!rc) printf("%s: %zu ids -> %zu bytes\n", in, arr->n_items, n);
    free(text);
done:
    free(ids);
    io_json_free(arr);
    return rc;
}

int gdn_cmd_tokenize(int argc, char **argv) {
    const char *tok = NULL, *in = NULL, *out = NULL;
    int dec = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--decode")) {
            dec = 1;
            continue;
        }
        static const char *const opts[] = {"--tokenizer", "--in", "--out"};
        const char **dst[] = {&tok, &in, &out};
        int which = -1;
        for (int o = 0; o < 3 && which < 0; o++) {
            size_t n = strlen(opts[o]);
            if (strncmp(a, opts[o], n) != 0) continue;
            if (a[n] == '=') *dst[o] = a + n + 1, which = o;
            else if (a[n] == 0) {
                if (i + 1 >= argc) return usage_error("option %s needs a value", a);
                *dst[o] = argv[++i], which = o;
            }
        }
        if (which < 0) return usage_error("unknown argument '%s'", a);
    }
    if (!tok) return usage_error("%s", "missing --tokenizer PATH");
    if (!in) return usage_error("%s", "missing --in FILE");
    if (!out) return usage_error("%s", "missing --out FILE");
    char err[1024];
    io_tokenizer *t = io_tokenizer_load(tok, err, sizeof err);
    if (!t) {
        fprintf(stderr, "gdn tokenize: error: %s\n", err);
        return 1;
    }
    int rc = dec ? decode(t, in, out) : encode(t, in, out);
    io_tokenizer_free(t);
    return rc;
}
