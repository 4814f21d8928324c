/* gdn sample: generate text from a trained model by recurrent decoding. The prompt is read in
 * one chunked forward pass; then each new token costs one step of every layer with the
 * delta-rule state and the convolution halos carried from token to token (constant cost per
 * token, no growing cache). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "io/parse_num.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "train/commands.h"
#include "train/sample.h"

/* --bytes: a bound so the count fits every type it meets (about 10^12 tokens). */
#define GDN_SAMPLE_MAX_TOKENS (INT64_C(1) << 40)

static void sample_usage(FILE *f) {
    fprintf(f,
            "usage: gdn sample (--run DIR | --ckpt FILE.h5) [--prompt TEXT] [--bytes N]\n"
            "                  [--temperature T] [--top-k K] [--seed S]\n\n"
            "  --run DIR        use the newest valid checkpoint of a run directory\n"
            "  --ckpt FILE      use this checkpoint\n"
            "  --prompt TEXT    text to continue (default: a newline)\n"
            "  --bytes N        tokens to generate (default 256)\n"
            "  --temperature T  softmax temperature, 0 = greedy, at most 1e6 (default 0.8)\n"
            "  --top-k K        sample among the K most likely tokens, 0 = all (default 40)\n"
            "  --seed S         sampling seed (default 1)\n");
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

int gdn_first_nonfinite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

int gdn_sample_token(const float *logits, int V, double temperature, int top_k, uint64_t *rng,
                     double *probs) {
    if (V < 1) return -1;
    int best = -1, n_posinf = 0;
    for (int i = 0; i < V; i++) {
        if (isnan(logits[i])) return -1;
        if (logits[i] == INFINITY) n_posinf++;
        if (logits[i] > -INFINITY && (best < 0 || logits[i] > logits[best])) best = i;
    }
    if (best < 0) return -1; /* all -inf */
    if (temperature <= 0 || isnan(temperature)) return best;
    double u01 = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
    if (n_posinf) { /* +inf - +inf is NaN: the draw is uniform among the +inf logits */
        int pick = (int)(u01 * n_posinf);
        for (int i = 0; i < V; i++)
            if (logits[i] == INFINITY && pick-- == 0) return i;
        return best;
    }
    /* The k-th largest logit is the cutoff; probs holds a sorted copy for a moment. */
    double cutoff = -INFINITY;
    if (top_k > 0 && top_k < V) {
        for (int i = 0; i < V; i++) probs[i] = logits[i];
        qsort(probs, (size_t)V, sizeof *probs, cmp_desc);
        cutoff = probs[top_k - 1];
    }
    /* best has weight exp(0) = 1, so sum >= 1; a tiny temperature sends the others to 0 and a
     * huge one makes them all 1 (uniform), never NaN since every logit here is finite. */
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        double z = ((double)logits[i] - (double)logits[best]) / temperature;
        probs[i] = logits[i] >= cutoff && logits[i] > -INFINITY ? exp(z) : 0.0;
        if (!(probs[i] >= 0)) probs[i] = 0.0;
        sum += probs[i];
    }
    double u = u01 * sum;
    for (int i = 0; i < V; i++) {
        u -= probs[i];
        if (u < 0 && probs[i] > 0) return i;
    }
    return best; /* rounding left u >= 0 after the last token */
}

static void put_token(int tok, int byte_vocab) {
    if (byte_vocab) fputc(tok, stdout);
    else printf(" %d", tok);
}

/* Refuses logits that are not all finite: a model whose output is NaN or infinite has damaged
 * or diverged weights, and sampling from it would print garbage. */
static int check_logits(const float *logits, int V, const char *ckpt, int64_t step, const char *where,
                        long pos) {
    int bad = gdn_first_nonfinite(logits, V);
    if (bad < 0) return 0;
    fprintf(stderr,
            "gdn sample: %s (step %lld): the model's logits are not finite (%s at vocabulary index %d) "
            "%s %ld: the checkpoint's parameters have diverged or are damaged; sample an earlier "
            "checkpoint\n",
            ckpt, (long long)step, isnan(logits[bad]) ? "NaN" : "infinite", bad, where, pos);
    return -1;
}

int gdn_cmd_sample(int argc, char **argv) {
    const char *run = NULL, *ckpt = NULL, *prompt = "\n";
    int64_t n_bytes = 256;
    int top_k = 40;
    double temperature = 0.8;
    uint64_t seed = 1;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { sample_usage(stdout); return 0; }
        if (i + 1 >= argc) {
            fprintf(stderr, "gdn sample: option '%s' needs a value (see gdn sample --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--run")) run = v;
        else if (!strcmp(a, "--ckpt")) ckpt = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--bytes")) bad = io_parse_i64(a, v, 0, GDN_SAMPLE_MAX_TOKENS, &n_bytes, err, sizeof err);
        else if (!strcmp(a, "--top-k")) bad = io_parse_int(a, v, 0, INT_MAX, &top_k, err, sizeof err);
        else if (!strcmp(a, "--temperature")) bad = io_parse_f64(a, v, 0, 1e6, &temperature, err, sizeof err);
        else if (!strcmp(a, "--seed")) bad = io_parse_u64(a, v, UINT64_MAX, &seed, err, sizeof err);
        else { fprintf(stderr, "gdn sample: unknown option '%s'\n\n", a); sample_usage(stderr); return 2; }
        if (bad) { fprintf(stderr, "gdn sample: %s\n", err); return 2; }
    }
    if (!run == !ckpt) { fprintf(stderr, "gdn sample: give exactly one of --run DIR or --ckpt FILE\n"); return 2; }
    if (!prompt[0]) { fprintf(stderr, "gdn sample: --prompt must not be empty\n"); return 2; }
    char path[4096];
    if (run) {
        int64_t step = 0;
        int r = ckpt_find_resume(run, path, sizeof path, &step, err, sizeof err);
        if (r <= 0) {
            fprintf(stderr, "gdn sample: no usable checkpoint in %s%s%s\n", run, r < 0 ? ": " : "", r < 0 ? err : "");
            return 1;
        }
        ckpt = path;
    }
    ckpt_info info;
    if (ckpt_read_info(ckpt, &info, err, sizeof err)) { fprintf(stderr, "gdn sample: %s\n", err); return 1; }
    const int64_t step = info.step;
    if (gdn_config_validate(&info.model, err, sizeof err)) {
        fprintf(stderr, "gdn sample: %s: the model configuration is invalid: %s\n", ckpt, err);
        ckpt_info_free(&info);
        return 1;
    }
    if (info.model.vocab_size != 256) {
        fprintf(stderr, "gdn sample: %s: sampling text needs the byte-level vocabulary (256), this model has %d\n",
                ckpt, info.model.vocab_size);
        ckpt_info_free(&info);
        return 1;
    }
    gdn_param_table t;
    gdn_param_table_build(&t, &info.model);
    float *params = GDN_MALLOC(t.total * sizeof *params);
    if (ckpt_load(ckpt, &info.model, &t, params, NULL, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "gdn sample: %s\n", err);
        ckpt_info_free(&info);
        free(params);
        gdn_param_table_free(&t);
        return 1;
    }
    ckpt_info_free(&info);
    const gdn_config *c = &t.cfg;
    const int V = c->vocab_size, byte_vocab = V == 256;
    fprintf(stderr, "gdn sample: %s (step %lld), temperature %g, top-k %d, seed %llu\n", ckpt,
            (long long)step, temperature, top_k, (unsigned long long)seed);

    /* Two carries, swapped after every step (a forward pass may not read and write the same one). */
    const size_t L = (size_t)c->n_layers, H = (size_t)c->n_heads, K = (size_t)c->head_dim;
    const size_t Vh = (size_t)gdn_config_head_v(c), W1 = (size_t)c->conv_width - 1;
    gdn_cpu_carry_f32 carry[2];
    for (int i = 0; i < 2; i++) {
        carry[i].S = GDN_CALLOC(L * H * K * Vh, sizeof(float));
        carry[i].halo_q = GDN_CALLOC(L * W1 * H * K, sizeof(float));
        carry[i].halo_k = GDN_CALLOC(L * W1 * H * K, sizeof(float));
        carry[i].halo_v = GDN_CALLOC(L * W1 * H * Vh, sizeof(float));
    }
    int np = (int)strlen(prompt);
    int *ptok = GDN_MALLOC((size_t)np * sizeof(int));
    for (int i = 0; i < np; i++) ptok[i] = (unsigned char)prompt[i];

    int nv = 0, cur = 0, status = 0;
    gdn_cpu_acts_f32 *pa = gdn_cpu_acts_create_f32(&t, 1, np);
    gdn_cpu_forward_f32(pa, &t, params, ptok, NULL, 0.0f, &nv, NULL, &carry[cur]);
    double *probs = GDN_MALLOC((size_t)V * sizeof *probs);
    uint64_t rng = seed;
    int tok = 0;
    if (n_bytes > 0) {
        const float *lg = gdn_cpu_logits_f32(pa) + (size_t)(np - 1) * V;
        if (check_logits(lg, V, ckpt, step, "after the prompt, at position", (long)np - 1)) status = 1;
        else tok = gdn_sample_token(lg, V, temperature, top_k, &rng, probs);
    }
    gdn_cpu_acts_free_f32(pa);
    gdn_cpu_acts_f32 *sa = gdn_cpu_acts_create_f32(&t, 1, 1);
    if (!status) fwrite(prompt, 1, (size_t)np, stdout);
    for (int64_t i = 0; i < n_bytes && !status; i++) {
        put_token(tok, byte_vocab);
        if (i + 1 == n_bytes) break;
        gdn_cpu_forward_f32(sa, &t, params, &tok, NULL, 0.0f, &nv, &carry[cur], &carry[1 - cur]);
        cur = 1 - cur;
        const float *lg = gdn_cpu_logits_f32(sa);
        if (check_logits(lg, V, ckpt, step, "at generated token", (long)i + 1)) status = 1;
        else tok = gdn_sample_token(lg, V, temperature, top_k, &rng, probs);
    }
    if (!status) fputc('\n', stdout);
    if (fflush(stdout)) {
        perror("gdn sample: writing the output");
        status = 1;
    }
    gdn_cpu_acts_free_f32(sa);
    for (int i = 0; i < 2; i++) { free(carry[i].S); free(carry[i].halo_q); free(carry[i].halo_k); free(carry[i].halo_v); }
    free(probs);
    free(ptok);
    free(params);
    gdn_param_table_free(&t);
    return status;
}
