/* gdn data: text (plain or gzip) -> byte-tokenized training and validation shards. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/parse_num.h"
#include "io/tokens.h"
#include "train/commands.h"

#define DEFAULT_SHARD_TOKENS 100000000ull /* as llm.c's data scripts */
#define DEFAULT_VAL_FRACTION 0.01

static void usage(FILE *f) {
    fprintf(f,
            "usage: gdn data --in TEXT[.gz] --out PREFIX [options]\n"
            "\n"
            "Tokenizes a text file with the byte-level tokenizer (token = byte value, vocabulary\n"
            "256) and writes token shards in the llm.c .bin format:\n"
            "  PREFIX_train_000000.bin, PREFIX_train_000001.bin, ...  (the text minus its end)\n"
            "  PREFIX_val_000000.bin, ...                             (the last --val-tokens)\n"
            "Token sources may name them with patterns: \"PREFIX_train_*.bin\" for training,\n"
            "\"PREFIX_val_*.bin\" for validation.\n"
            "\n"
            "options:\n"
            "  --in PATH          input text, plain or gzip-compressed (detected from its bytes)\n"
            "  --out PREFIX       output path prefix; its directory must exist\n"
            "  --val-tokens N     hold out the last N tokens for validation\n"
            "                     (default: 1%% of the text; 0: no validation shard)\n"
            "  --shard-tokens N   tokens per shard (default %llu)\n"
            "  --dtype u16|u32    token type: u16 = shard version 1 (llm.c), u32 = version 2\n"
            "                     (default u16)\n"
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

/* Writes tokens [0, n) of text as shards PREFIX_kind_%06d.bin; returns shards written or -1. */
static int write_shards(const char *prefix, const char *kind, const unsigned char *text, size_t n,
                        size_t per_shard, int version) {
    int k = 0;
    size_t path_len = strlen(prefix) + strlen(kind) + 32;
    char *path = malloc(path_len);
    char err[1024];
    if (!path) return -1;
    for (size_t pos = 0; pos < n; pos += per_shard, k++) {
        size_t m = n - pos < per_shard ? n - pos : per_shard;
        snprintf(path, path_len, "%s_%s_%06d.bin", prefix, kind, k);
        if (io_shard_write(path, version, text + pos, 1, m, err, sizeof err)) {
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

int gdn_cmd_data(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *dtype = "u16";
    unsigned long long val_tokens = 0, shard_tokens = DEFAULT_SHARD_TOKENS;
    int val_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        static const char *const opts[] = {"--in", "--out", "--val-tokens", "--shard-tokens",
                                           "--dtype"};
        const char *value = NULL;
        int which = -1;
        for (int o = 0; o < 5 && which < 0; o++) {
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
        }
    }
    if (!in) return usage_error("%s", "missing --in TEXT");
    if (!out || !*out) return usage_error("%s", "missing --out PREFIX");
    if (check_out_dir(out)) return 1;

    char err[1024];
    unsigned char *text;
    size_t n;
    if (io_text_read(in, &text, &n, err, sizeof err)) {
        fprintf(stderr, "gdn data: error: %s\n", err);
        return 1;
    }
    if (n == 0) {
        fprintf(stderr, "gdn data: error: %s: the input is empty\n", in);
        free(text);
        return 1;
    }
    size_t hold = val_given ? (size_t)val_tokens
                            : (size_t)llround(DEFAULT_VAL_FRACTION * (double)n);
    if (hold >= n) {
        fprintf(stderr,
                "gdn data: error: --val-tokens %zu leaves no training data: %s has %zu tokens\n",
                hold, in, n);
        free(text);
        return 1;
    }
    printf("read %s: %zu bytes = %zu tokens (byte tokenizer, vocab %d)\n", in, n, n,
           IO_BYTE_VOCAB);
    int version = strcmp(dtype, "u16") == 0 ? IO_SHARD_U16 : IO_SHARD_U32;
    int n_train = write_shards(out, "train", text, n - hold, (size_t)shard_tokens, version);
    int n_val = n_train < 0 ? -1 : write_shards(out, "val", text + (n - hold), hold,
                                                 (size_t)shard_tokens, version);
    free(text);
    if (n_train < 0 || n_val < 0) return 1;
    printf("train: %zu tokens in %d shard%s; val: %zu tokens in %d shard%s\n", n - hold, n_train,
           n_train == 1 ? "" : "s", hold, n_val, n_val == 1 ? "" : "s");
    return 0;
}
