/* gdn sample: generate text from a trained model by recurrent decoding. The prompt is read in
 * one chunked forward pass; then each new token costs one step of every layer with the
 * delta-rule state and the convolution halos carried from token to token (constant cost per
 * token, no growing cache). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "train/commands.h"

static void sample_usage(FILE *f) {
    fprintf(f,
            "usage: gdn sample (--run DIR | --ckpt FILE.h5) [--prompt TEXT] [--bytes N]\n"
            "                  [--temperature T] [--top-k K] [--seed S]\n\n"
            "  --run DIR        use the newest valid checkpoint of a run directory\n"
            "  --ckpt FILE      use this checkpoint\n"
            "  --prompt TEXT    text to continue (default: a newline)\n"
            "  --bytes N        tokens to generate (default 256)\n"
            "  --temperature T  softmax temperature, 0 = greedy (default 0.8)\n"
            "  --top-k K        sample among the K most likely tokens, 0 = all (default 40)\n"
            "  --seed S         sampling seed (default 1)\n");
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Draws a token from logits [V] with temperature and top-k. */
static int sample_token(const float *logits, int V, double temperature, int top_k, uint64_t *rng,
                        double *probs /* [V] scratch */) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    double cutoff = -INFINITY;
    if (top_k > 0 && top_k < V) {
        /* The k-th largest logit: count, per candidate, how many are larger (V is small). */
        for (int i = 0; i < V; i++) probs[i] = logits[i];
        for (int k = 0; k < top_k; k++) {
            int m = -1;
            for (int i = 0; i < V; i++)
                if (probs[i] > -INFINITY && (m < 0 || probs[i] > probs[m])) m = i;
            cutoff = probs[m];
            probs[m] = -INFINITY;
        }
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        probs[i] = logits[i] >= cutoff ? exp((logits[i] - logits[best]) / temperature) : 0.0;
        sum += probs[i];
    }
    double u = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    for (int i = 0; i < V; i++) {
        u -= probs[i];
        if (u < 0) return i;
    }
    return best;
}

static void put_token(int tok, int byte_vocab) {
    if (byte_vocab) fputc(tok, stdout);
    else printf(" %d", tok);
}

int gdn_cmd_sample(int argc, char **argv) {
    const char *run = NULL, *ckpt = NULL, *prompt = "\n";
    long n_bytes = 256, top_k = 40;
    double temperature = 0.8;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { sample_usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "gdn sample: option '%s' needs a value\n", a); return 2; }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(a, "--run")) run = v;
        else if (!strcmp(a, "--ckpt")) ckpt = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--bytes")) n_bytes = strtol(v, &end, 10);
        else if (!strcmp(a, "--top-k")) top_k = strtol(v, &end, 10);
        else if (!strcmp(a, "--temperature")) temperature = strtod(v, &end);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, &end, 10);
        else { fprintf(stderr, "gdn sample: unknown option '%s'\n\n", a); sample_usage(stderr); return 2; }
        if (end && *end) { fprintf(stderr, "gdn sample: %s expects a number, got '%s'\n", a, v); return 2; }
    }
    if (!run == !ckpt) { fprintf(stderr, "gdn sample: give exactly one of --run DIR or --ckpt FILE\n"); return 2; }
    if (n_bytes < 0 || top_k < 0 || temperature < 0) {
        fprintf(stderr, "gdn sample: --bytes, --top-k and --temperature must be >= 0\n");
        return 2;
    }
    if (!prompt[0]) { fprintf(stderr, "gdn sample: --prompt must not be empty\n"); return 2; }
    char path[4096], err[1024];
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
    gdn_param_table t;
    gdn_param_table_build(&t, &info.model);
    float *params = GDN_MALLOC(t.total * sizeof *params);
    if (ckpt_load(ckpt, &info.model, &t, params, NULL, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "gdn sample: %s\n", err);
        return 1;
    }
    const gdn_config *c = &t.cfg;
    const int V = c->vocab_size, byte_vocab = V == 256;
    fprintf(stderr, "gdn sample: %s (step %lld), temperature %g, top-k %ld, seed %llu\n", ckpt,
            (long long)info.step, temperature, top_k, (unsigned long long)seed);
    ckpt_info_free(&info);

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
    if (!byte_vocab) GDN_DIE("sampling text needs the byte-level vocabulary (256), this model has %d", V);

    int nv = 0, cur = 0;
    gdn_cpu_acts_f32 *pa = gdn_cpu_acts_create_f32(&t, 1, np);
    gdn_cpu_forward_f32(pa, &t, params, ptok, NULL, 0.0f, &nv, NULL, &carry[cur]);
    double *probs = GDN_MALLOC((size_t)V * sizeof *probs);
    uint64_t rng = seed;
    fwrite(prompt, 1, (size_t)np, stdout);
    int tok = n_bytes > 0 ? sample_token(gdn_cpu_logits_f32(pa) + (size_t)(np - 1) * V, V, temperature,
                                         (int)top_k, &rng, probs)
                          : 0;
    gdn_cpu_acts_free_f32(pa);
    gdn_cpu_acts_f32 *sa = gdn_cpu_acts_create_f32(&t, 1, 1);
    for (long i = 0; i < n_bytes; i++) {
        put_token(tok, byte_vocab);
        if (i + 1 == n_bytes) break;
        gdn_cpu_forward_f32(sa, &t, params, &tok, NULL, 0.0f, &nv, &carry[cur], &carry[1 - cur]);
        cur = 1 - cur;
        tok = sample_token(gdn_cpu_logits_f32(sa), V, temperature, (int)top_k, &rng, probs);
    }
    fputc('\n', stdout);
    fflush(stdout);
    gdn_cpu_acts_free_f32(sa);
    for (int i = 0; i < 2; i++) { free(carry[i].S); free(carry[i].halo_q); free(carry[i].halo_k); free(carry[i].halo_v); }
    free(probs);
    free(ptok);
    free(params);
    gdn_param_table_free(&t);
    return 0;
}
