/* gdn data: text (plain or gzip; files, comma lists, globs) -> training and validation shards,
 * byte-level or with a BPE tokenizer (on every core), plus PREFIX_data.json recording the
 * tokenizer and the text's byte counts (for bits per byte). */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/json.h"
#include "io/parse_num.h"
#include "io/tokenizer.h"
#include "io/tokens.h"
#include "train/commands.h"
#include "train/data_docs.h"

#define DEFAULT_SHARD_TOKENS 100000000ull /* as llm.c's data scripts */
#define DEFAULT_VAL_FRACTION 0.01

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn data --in TEXT[.gz] --out PREFIX [--tokenizer PATH] [options]\n"
            "\n"
            "Tokenizes text with the byte-level tokenizer (token = byte value, vocabulary 256)\n"
            "or a BPE tokenizer (--tokenizer) and writes token shards in the llm.c .bin format:\n"
            "  PREFIX_train_000000.bin, PREFIX_train_000001.bin, ...  (the text minus its end)\n"
            "  PREFIX_val_000000.bin, ...                             (the last --val-tokens)\n"
            "Token sources may name them with patterns: \"PREFIX_train_*.bin\" for training,\n"
            "\"PREFIX_val_*.bin\" for validation. PREFIX_data.json records the tokenizer (path\n"
            "and hash), the vocabulary size and the bytes of text behind each part.\n"
            "\n"
            "options:\n"
            "  --in SPEC          input text, plain or gzip-compressed (detected from its bytes):\n"
            "                     a file, or a comma-separated list of files and glob patterns\n"
            "                     (each pattern's matches in name order); files are joined in order\n"
            "  --tokenizer PATH   BPE tokenizer: a tokenizer.json, or a directory holding\n"
            "                     tokenizer.json or vocab.json + merges.txt (each file is encoded\n"
            "                     on its own, as gdn tokenize encodes it)\n"
            "  --threads N        threads for --tokenizer (default: all cores)\n"
            "  --out PREFIX       output path prefix; its directory must exist\n"
            "  --val-tokens N     hold out the last N tokens for validation\n"
            "                     (default: 1%% of the text; 0: no validation shard); with\n"
            "                     documents, from the first document that starts in them\n"
            "  --shard-tokens N   tokens per shard (default %llu)\n"
            "  --dtype u16|u32    token type: u16 = shard version 1 (llm.c), u32 = version 2\n"
            "                     (default u16; with --tokenizer, u32 when its ids need it)\n"
            "  --documents        each input file is a document: write the end-of-document\n"
            "                     token before each one (README, \"Data format\")\n"
            "  --doc_sep LINE     also cut files into documents at every line equal to LINE (the\n"
            "                     line is dropped; empty documents are left out); implies\n"
            "                     --documents\n"
            "  --eod_token ID     the end-of-document token (implies --documents); default: the\n"
            "                     tokenizer's <|endoftext|>, <|end_of_text|> or </s>; byte-level:\n"
            "                     256, one id past the bytes (vocabulary 257)\n"
            "  -h, --help         show this text\n",
            DEFAULT_SHARD_TOKENS);
}

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "gdn data: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see gdn data --help)\n");
    return 2;
}

/* A non-negative decimal integer, all of s (io/parse_num.h rules; the callers word the error). */
static int parse_count(const char *s, unsigned long long *out) {
    uint64_t v;
    if (io_parse_u64("count", s, UINT64_MAX, &v, NULL, 0)) return -1;
    *out = v;
    return 0;
}

/* Writes tokens [0, n) (width bytes each) as shards PREFIX_kind_%06d.bin; returns shards
 * written or -1. */
static int write_shards(const char *prefix, const char *kind, const void *tokens, int width,
                        size_t n, size_t per_shard, int version) {
    const unsigned char *text = tokens;
    int k = 0;
    size_t path_len = strlen(prefix) + strlen(kind) + 32;
    char *path = malloc(path_len);
    char err[1024];
    if (!path) return -1;
    for (size_t pos = 0; pos < n; pos += per_shard, k++) {
        size_t m = n - pos < per_shard ? n - pos : per_shard;
        snprintf(path, path_len, "%s_%s_%06d.bin", prefix, kind, k);
        if (io_shard_write(path, version, text + pos * (size_t)width, width, m, err, sizeof err)) {
            fprintf(stderr, "gdn data: error: %s\n", err);
            free(path);
            return -1;
        }
        printf("wrote %s: %zu tokens (%s, %zu bytes)\n", path, m,
               version == IO_SHARD_U16 ? "uint16" : "uint32",
               IO_SHARD_HEADER_BYTES + m * (version == IO_SHARD_U16 ? 2u : 4u));
    }
    /* a glob over the prefix would also pick up shards left from an earlier, longer run */
    snprintf(path, path_len, "%s_%s_%06d.bin", prefix, kind, k);
    struct stat st;
    if (stat(path, &st) == 0)
        fprintf(stderr,
                "gdn data: warning: %s is left from an earlier run and is not part of this "
                "output; delete it (and any later %s shards) before reading %s_%s_*.bin\n",
                path, kind, prefix, kind);
    free(path);
    return k;
}

/* The directory part of prefix must exist: saying so beats an error about a temp file. */
static int check_out_dir(const char *prefix) {
    const char *slash = strrchr(prefix, '/');
    if (!slash) return 0;
    size_t n = slash == prefix ? 1 : (size_t)(slash - prefix);
    char *dir = malloc(n + 1);
    if (!dir) return -1;
    memcpy(dir, prefix, n);
    dir[n] = 0;
    struct stat st;
    int ok = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    if (!ok)
        fprintf(stderr, "gdn data: error: output directory '%s' (of --out %s) does not exist\n",
                dir, prefix);
    free(dir);
    return ok ? 0 : -1;
}

/* The files of a spec: comma-separated items, each a path or a glob pattern (its matches in name
 * order). Returns the count (paths in *out, free with free_list), or -1 after a message. */
static int expand(const char *spec, char ***out) {
    char *copy = strdup(spec), *save = NULL;
    char **list = NULL;
    int n = 0, cap = 0, rc = 0;
    if (!copy) return -1;
    for (char *item = strtok_r(copy, ",", &save); item && rc == 0;
         item = strtok_r(NULL, ",", &save)) {
        glob_t g;
        int wild = strpbrk(item, "*?[") != NULL;
        size_t m = 1;
        if (wild) {
            int gr = glob(item, 0, NULL, &g);
            if (gr != 0) {
                fprintf(stderr, "gdn data: error: --in %s: no file matches '%s'\n", spec, item);
                if (gr == GLOB_NOMATCH) globfree(&g);
                rc = -1;
                break;
            }
            m = g.gl_pathc;
        }
        for (size_t k = 0; k < m && rc == 0; k++) {
            if (n == cap) {
                char **nl = realloc(list, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *list);
                if (!nl) rc = -1;
                else list = nl;
            }
            if (rc == 0 && !(list[n++] = strdup(wild ? g.gl_pathv[k] : item))) rc = -1;
        }
        if (wild) globfree(&g);
    }
    free(copy);
    if (rc == 0 && n == 0) {
        fprintf(stderr, "gdn data: error: --in '%s' names no file\n", spec);
        rc = -1;
    }
    if (rc) {
        for (int k = 0; k < n; k++) free(list[k]);
        free(list);
        return -1;
    }
    *out = list;
    return n;
}

static void free_list(char **list, int n) {
    for (int k = 0; k < n; k++) free(list[k]);
    free(list);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The progress line (a terminal only: logs get the summary line). */
typedef struct {
    const char *file;
    size_t before; /* bytes of earlier files */
    size_t all;    /* bytes of every file read so far */
    double t0, last;
    int tty;
} progress;

static void show_progress(void *user, size_t done, size_t total) {
    progress *p = user;
    double t = now_s();
    if (!p->tty || (t - p->last < 0.25 && done < total)) return;
    p->last = t;
    double mb = (double)(p->before + done) / 1e6;
    fprintf(stderr, "\rgdn data: %s: %.0f%% (%.1f MB of text, %.1f MB/s)   ", p->file,
            100.0 * (double)done / (double)(total ? total : 1), mb, mb / (t - p->t0 + 1e-9));
    fflush(stderr);
}

/* Bytes of text behind ids[0, n); with documents (eod >= 0) the delimiters count none. */
static size_t text_bytes(const io_tokenizer *t, const uint32_t *ids, size_t n, int64_t eod) {
    size_t b = 0, len;
    for (size_t i = 0; i < n; i++)
        if ((int64_t)ids[i] == eod) continue;
        else if (!t) b++;
        else if (io_tokenizer_id_bytes(t, ids[i], &len)) b += len;
    return b;
}

/* PREFIX_data.json: what the shards hold and how they were made. */
static int write_record(const char *prefix, const io_tokenizer *t, uint32_t vocab, int version,
                        int64_t eod, long long n_docs,
                        char **files, int n_files, size_t source_bytes, size_t train_tokens,
                        size_t train_bytes,
                        int train_shards, size_t val_tokens, size_t val_bytes, int val_shards) {
    io_jw w;
    io_jw_init(&w, 1);
    io_jw_begin_object(&w);
    if (t) {
        uint64_t hash;
        const char *src = io_tokenizer_source(t, &hash);
        char abs[8192], hex[32];
        const char *rp = realpath(src, abs) ? abs : src; /* a "vocab + merges" pair stays as is */
        snprintf(hex, sizeof hex, "fnv1a64:%016" PRIx64, hash);
        io_jw_kv_string(&w, "tokenizer", rp);
        io_jw_kv_string(&w, "tokenizer_hash", hex);
    } else {
        io_jw_kv_string(&w, "tokenizer", "bytes");
    }
    io_jw_kv_int(&w, "vocab_size", vocab);
    io_jw_kv_string(&w, "dtype", version == IO_SHARD_U16 ? "u16" : "u32");
    if (eod >= 0) { /* documents: the delimiter and how many were written */
        io_jw_kv_int(&w, "eod_token", eod);
        io_jw_kv_int(&w, "documents", n_docs);
    }
    io_jw_key(&w, "sources");
    io_jw_begin_array(&w);
    for (int k = 0; k < n_files; k++) io_jw_string(&w, files[k]);
    io_jw_end_array(&w);
    io_jw_kv_int(&w, "source_bytes", (long long)source_bytes);
    io_jw_key(&w, "train");
    io_jw_begin_object(&w);
    io_jw_kv_int(&w, "tokens", (long long)train_tokens);
    io_jw_kv_int(&w, "bytes", (long long)train_bytes);
    io_jw_kv_int(&w, "shards", train_shards);
    io_jw_end_object(&w);
    io_jw_key(&w, "val");
    io_jw_begin_object(&w);
    io_jw_kv_int(&w, "tokens", (long long)val_tokens);
    io_jw_kv_int(&w, "bytes", (long long)val_bytes);
    io_jw_kv_int(&w, "shards", val_shards);
    io_jw_end_object(&w);
    io_jw_end_object(&w);
    size_t n = strlen(prefix) + 16;
    char *path = malloc(n), *tmp = malloc(n + 4);
    int rc = -1;
    if (path && tmp) {
        snprintf(path, n, "%s_data.json", prefix);
        snprintf(tmp, n + 4, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        int ok = f && fwrite(io_jw_text(&w), 1, w.len, f) == w.len && fputc('\n', f) != EOF;
        int err = errno;
        if (f && fclose(f) != 0 && ok) ok = 0, err = errno; /* closed either way */
        if (ok && rename(tmp, path) != 0) ok = 0, err = errno;
        if (ok) {
            printf("wrote %s\n", path);
            rc = 0;
        } else {
            fprintf(stderr, "gdn data: error: %s: cannot write: %s\n", path, strerror(err));
            remove(tmp);
        }
    }
    free(path), free(tmp);
    io_jw_free(&w);
    return rc;
}

int gdn_cmd_data(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *dtype = NULL, *tok_path = NULL, *doc_sep = NULL;
    unsigned long long val_tokens = 0, shard_tokens = DEFAULT_SHARD_TOKENS, threads = 0;
    unsigned long long eod_arg = 0;
    int val_given = 0, documents = 0, eod_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--documents") == 0) {
            documents = 1;
            continue;
        }
        static const char *const opts[] = {"--in", "--out", "--val-tokens", "--shard-tokens",
                                           "--dtype", "--tokenizer", "--threads", "--doc_sep",
                                           "--eod_token"};
        const char *value = NULL;
        int which = -1;
        for (int o = 0; o < 9 && which < 0; o++) {
            size_t n = strlen(opts[o]);
            if (strncmp(a, opts[o], n) != 0) continue;
            if (a[n] == '=') value = a + n + 1, which = o;
            else if (a[n] == 0) {
                if (i + 1 >= argc) return usage_error("option %s needs a value", a);
                value = argv[++i], which = o;
            }
        }
        if (which < 0) return usage_error("unknown argument '%s'", a);
        switch (which) {
        case 0: in = value; break;
        case 1: out = value; break;
        case 2:
            if (parse_count(value, &val_tokens))
                return usage_error("--val-tokens needs a count of tokens (0 or more), got '%s'",
                                   value);
            val_given = 1;
            break;
        case 3:
            if (parse_count(value, &shard_tokens) || shard_tokens == 0 ||
                shard_tokens > IO_SHARD_MAX_TOKENS)
                return usage_error("--shard-tokens needs a count from 1 to 2147483647, got '%s'",
                                   value);
            break;
        case 4:
            if (strcmp(value, "u16") && strcmp(value, "u32"))
                return usage_error("--dtype must be u16 or u32, got '%s'", value);
            dtype = value;
            break;
        case 5: tok_path = value; break;
        case 6:
            if (parse_count(value, &threads) || threads == 0 || threads > 4096)
                return usage_error("--threads needs a count from 1 to 4096, got '%s'", value);
            break;
        case 7:
            if (!*value || strchr(value, '\n'))
                return usage_error("--doc_sep needs the separator line's text (not empty, one "
                                   "line), got '%s'", value);
            doc_sep = value, documents = 1;
            break;
        case 8:
            if (parse_count(value, &eod_arg) || eod_arg > UINT32_MAX)
                return usage_error("--eod_token needs a token id, got '%s'", value);
            eod_given = 1, documents = 1;
            break;
        }
    }
    if (!in) return usage_error("%s", "missing --in TEXT");
    if (!out || !*out) return usage_error("%s", "missing --out PREFIX");
    if (check_out_dir(out)) return 1;

    char err[1024];
    io_tokenizer *tok = NULL;
    if (tok_path && !(tok = io_tokenizer_load(tok_path, err, sizeof err))) {
        fprintf(stderr, "gdn data: error: --tokenizer: %s\n", err);
        return 1;
    }
    uint32_t vocab = tok ? io_tokenizer_vocab_size(tok) : IO_BYTE_VOCAB;
    int64_t eod = -1; /* documents: the delimiter */
    if (documents) {
        eod = eod_given ? (int64_t)eod_arg : tok ? gdn_data_default_eod(tok) : IO_BYTE_VOCAB;
        if (!tok && eod > IO_BYTE_VOCAB) {
            char id[32];
            snprintf(id, sizeof id, "%lld", (long long)eod);
            return usage_error("--eod_token %s: byte-level data take a byte (0-255) or 256, the "
                               "id past the bytes", id);
        }
        if (tok && eod < 0) {
            fprintf(stderr, "gdn data: error: --tokenizer %s has no end-of-text token "
                    "(<|endoftext|>, <|end_of_text|> or </s>): give --eod_token ID\n", tok_path);
            io_tokenizer_free(tok);
            return 1;
        }
        if (tok && eod >= (int64_t)vocab) {
            fprintf(stderr, "gdn data: --eod_token %lld is outside the vocabulary of --tokenizer "
                    "%s (ids 0 to %u) (see gdn data --help)\n", (long long)eod, tok_path, vocab - 1);
            io_tokenizer_free(tok);
            return 2;
        }
        if (!tok && eod == IO_BYTE_VOCAB) vocab = IO_BYTE_VOCAB + 1;
    }
    if (!dtype) dtype = vocab > 65536 ? "u32" : "u16";
    if (strcmp(dtype, "u16") == 0 && vocab > 65536) {
        fprintf(stderr, "gdn data: error: --tokenizer %s has ids up to %u, which do not fit u16 "
                "shards (ids below 65536): use --dtype u32\n", tok_path, vocab - 1);
        io_tokenizer_free(tok);
        return 1;
    }
    char **files = NULL;
    int n_files = expand(in, &files);
    if (n_files < 0) {
        io_tokenizer_free(tok);
        return 1;
    }
    /* every file's tokens, back to back: bytes (width 1) or ids (width 4) */
    unsigned char *bytes = NULL;
    size_t n = 0, n_text = 0;
    io_ids ids = {0};
    long long n_docs = 0;
    size_t literal = 0; /* delimiters inside the text */
    int rc = 1;
    progress prog = {0};
    prog.tty = isatty(2);
    prog.t0 = now_s();
    for (int k = 0; k < n_files; k++) {
        unsigned char *text;
        size_t len;
        if (io_text_read(files[k], &text, &len, err, sizeof err)) {
            fprintf(stderr, "gdn data: error: %s\n", err);
            goto done;
        }
        if (documents) {
            long long d = gdn_data_append_docs(tok, (int)threads, text, len, doc_sep, (uint32_t)eod,
                                               &ids, &literal, err, sizeof err);
            free(text);
            if (d < 0) {
                fprintf(stderr, "gdn data: error: %s: %s\n", files[k], err);
                goto done;
            }
            n_docs += d;
            n = ids.n;
        } else if (!tok) {
            unsigned char *nb = n_files == 1 ? text : realloc(bytes, n + len + 1);
            if (!nb) {
                fprintf(stderr, "gdn data: error: out of memory reading %s\n", files[k]);
                free(text);
                goto done;
            }
            if (nb != text) memcpy(nb + n, text, len), free(text);
            bytes = nb;
            n += len;
        } else {
            prog.file = files[k];
            prog.before = n_text;
            int r = io_tokenizer_encode_parallel(tok, text, len, (int)threads, &ids, show_progress,
                                                 &prog, err, sizeof err);
            free(text);
            if (r) {
                fprintf(stderr, "%sgdn data: error: %s: %s\n", prog.tty ? "\n" : "", files[k], err);
                goto done;
            }
            n = ids.n;
        }
        n_text += len;
    }
    if (prog.tty && tok) fputc('\n', stderr);
    if (n == 0) {
        fprintf(stderr, "gdn data: error: %s: the input is empty\n", in);
        goto done;
    }
    if (literal)
        fprintf(stderr, "gdn data: warning: the text holds the end-of-document token %lld itself "
                "%zu time%s (e.g. a literal end-of-text marker): each starts a document where it "
                "stands\n", (long long)eod, literal, literal == 1 ? "" : "s");
    size_t hold = val_given ? (size_t)val_tokens
                            : (size_t)llround(DEFAULT_VAL_FRACTION * (double)n);
    if (hold >= n) {
        fprintf(stderr,
                "gdn data: error: --val-tokens %zu leaves no training data: %s has %zu tokens\n",
                hold, in, n);
        goto done;
    }
    if (documents && hold > 0) { /* validation starts at a document: the first start in the part */
        size_t p = n - hold;
        while (p < n && ids.ids[p] != (uint32_t)eod) p++;
        if (p < n) hold = n - p;
    }
    if (tok) {
        double sec = now_s() - prog.t0;
        int nt = threads ? (int)threads : omp_get_max_threads();
        printf("read %s: %zu bytes = %zu tokens (%s: %s); %.2f s, %.1f MB/s on %d thread%s\n",
               in, n_text, n, tok_path, io_tokenizer_describe(tok), sec,
               (double)n_text / 1e6 / (sec > 0 ? sec : 1e-9), nt, nt == 1 ? "" : "s");
    } else {
        printf("read %s: %zu bytes = %zu tokens (byte tokenizer, vocab %u)\n", in, n_text, n,
               vocab);
    }
    if (documents)
        printf("documents: %lld, each opened by token %lld%s\n", n_docs, (long long)eod,
               doc_sep ? " (files and separator lines)" : " (one per file)");
    int version = strcmp(dtype, "u16") == 0 ? IO_SHARD_U16 : IO_SHARD_U32;
    const void *data = tok || documents ? (const void *)ids.ids : (const void *)bytes;
    int width = tok || documents ? 4 : 1;
    int n_train = write_shards(out, "train", data, width, n - hold, (size_t)shard_tokens, version);
    int n_val = n_train < 0 ? -1 : write_shards(out, "val", (const unsigned char *)data +
                                                (n - hold) * (size_t)width, width, hold,
                                                (size_t)shard_tokens, version);
    if (n_train < 0 || n_val < 0) goto done;
    /* the bytes each part decodes to: the source's, unless a normalizer changed the text */
    const int by_ids = tok || documents;
    size_t val_bytes = by_ids ? text_bytes(tok, ids.ids + (n - hold), hold, eod) : hold;
    size_t train_bytes = by_ids ? text_bytes(tok, ids.ids, n - hold, eod) : n - hold;
    if (write_record(out, tok, vocab, version, eod, n_docs, files, n_files, n_text, n - hold, train_bytes,
                     n_train, hold, val_bytes, n_val))
        goto done;
    printf("train: %zu tokens in %d shard%s; val: %zu tokens in %d shard%s\n", n - hold, n_train,
           n_train == 1 ? "" : "s", hold, n_val, n_val == 1 ? "" : "s");
    if (documents)
        printf("train with: gdn train --data '%s_train_*.bin' --vocab_size %u%s%s --documents true "
               "--eod_token %lld\n", out, vocab, tok ? " --tokenizer " : "", tok ? tok_path : "",
               (long long)eod);
    else if (tok)
        printf("train with: gdn train --data '%s_train_*.bin' --vocab_size %u --tokenizer %s\n",
               out, vocab, tok_path);
    rc = 0;
done:
    free(bytes);
    io_ids_free(&ids);
    free_list(files, n_files);
    io_tokenizer_free(tok);
    return rc;
}
