/* Checks the tokenizers against reference ids from Hugging Face tokenizers.
 *
 *   tok_reference REFERENCE.json NAME=TOKENIZER_PATH...
 *
 * REFERENCE.json (tests/tokenizer/reference_ids.json): {"texts": [...], "ids": {NAME: [[...]]}}.
 * Each NAME's tokenizer encodes every text; the ids must equal the reference id for id, and
 * decoding them must give the text back (normalized: for a tokenizer that normalizes, the
 * text's NFC form, which is what the reference ids decode to). Prints each mismatch (the text,
 * the first differing position, both id sequences around it) and exits 1 if there is any. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/json.h"
#include "io/tokenizer.h"

static void show(const char *what, const uint32_t *ids, size_t n, size_t at) {
    size_t lo = at > 4 ? at - 4 : 0, hi = at + 6 < n ? at + 6 : n;
    fprintf(stderr, "    %s (%zu ids) [%zu..%zu):", what, n, lo, hi);
    for (size_t i = lo; i < hi; i++) fprintf(stderr, " %u", ids[i]);
    fprintf(stderr, "\n");
}

static int check(const char *name, const char *path, const io_json *texts, const io_json *ids) {
    char err[1024];
    io_tokenizer *t = io_tokenizer_load(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "%s: %s\n", name, err);
        return 1;
    }
    io_tok_enc *e = io_tok_enc_new(t);
    int bad = 0;
    for (size_t k = 0; k < texts->n_items; k++) {
        const io_json *text = &texts->items[k], *want = &ids->items[k];
        io_ids got = {0};
        if (io_tok_encode(e, (const unsigned char *)text->string, text->string_len, &got, err,
                          sizeof err)) {
            fprintf(stderr, "%s: text %zu: %s\n", name, k, err);
            bad++;
            continue;
        }
        size_t at = 0;
        while (at < got.n && at < want->n_items && got.ids[at] == (uint32_t)want->items[at].number)
            at++;
        if (at != got.n || at != want->n_items) {
            uint32_t *w = malloc((want->n_items + 1) * sizeof *w);
            for (size_t i = 0; i < want->n_items; i++) w[i] = (uint32_t)want->items[i].number;
            fprintf(stderr, "%s: text %zu (\"%.60s\"): ids differ at %zu\n", name, k, text->string, at);
            show("got ", got.ids, got.n, at);
            show("want", w, want->n_items, at);
            free(w);
            bad++;
        }
        unsigned char *back;
        size_t back_len;
        if (io_tokenizer_decode(t, got.ids, got.n, &back, &back_len, err, sizeof err)) {
            fprintf(stderr, "%s: text %zu: decode: %s\n", name, k, err);
            bad++;
        } else {
            /* the normalized text: what NFC makes of it (the reference vocabularies normalize
             * with NFC or not at all) */
            utf8proc_uint8_t *nfc = NULL;
            const char *expect = text->string;
            size_t expect_len = text->string_len;
            if (strstr(io_tokenizer_describe(t), "normalized")) {
                utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)text->string,
                                                  (utf8proc_ssize_t)text->string_len, &nfc,
                                                  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
                if (r >= 0) expect = (const char *)nfc, expect_len = (size_t)r;
            }
            if (back_len != expect_len || memcmp(back, expect, back_len) != 0) {
                fprintf(stderr, "%s: text %zu: decoding does not give the text back\n", name, k);
                bad++;
            }
            free(nfc);
            free(back);
        }
        io_ids_free(&got);
    }
    printf("%s: %s: %zu texts, %d mismatches\n", name, io_tokenizer_describe(t), texts->n_items,
           bad);
    io_tok_enc_free(e);
    io_tokenizer_free(t);
    return bad != 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_reference REFERENCE.json NAME=TOKENIZER_PATH...\n");
        return 2;
    }
    char err[1024];
    io_json *ref = io_json_parse_file(argv[1], err, sizeof err);
    if (!ref) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const io_json *texts = io_json_get(ref, "texts"), *all = io_json_get(ref, "ids");
    int bad = 0;
    for (int i = 2; i < argc; i++) {
        char *name = argv[i], *eq = strchr(name, '=');
        if (!eq) {
            fprintf(stderr, "tok_reference: expected NAME=PATH, got '%s'\n", name);
            bad = 1;
            continue;
        }
        *eq = 0;
        const io_json *ids = io_json_get(all, name);
        if (!texts || !ids || ids->n_items != texts->n_items) {
            fprintf(stderr, "%s: no reference ids for '%s'\n", argv[1], name);
            bad = 1;
            continue;
        }
        bad |= check(name, eq + 1, texts, ids);
    }
    io_json_free(ref);
    return bad;
}
