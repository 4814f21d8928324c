/* export_case_logits CKPT OUT.json [B T SEED]: gdn's own fp32 logits of a checkpoint for B
 * sequences of T token ids drawn from SEED, as the JSON the export checks read:
 *   {"ids": [[...], ...], "logits_shape": [B, T, V], "logits": [...] (row-major)}
 * (the layout of tests/interop/fixtures/<name>/expected.json). Used by export_case.sh when the
 * gdn binary has no `gdn op logits`, and by the export end-to-end test. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/checkpoint.h"
#include "model/cpu/model_cpu.h"
#include "model/params.h"

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    int B = 2, T = 70, seed = 7;
    if ((argc != 3 && argc != 6) ||
        (argc == 6 && (parse_int(argv[3], 1, 64, &B) || parse_int(argv[4], 1, 4096, &T) ||
                       parse_int(argv[5], 0, 1 << 30, &seed)))) {
        fprintf(stderr, "usage: export_case_logits CKPT OUT.json [B (1..64) T (1..4096) SEED]\n");
        return 2;
    }
    char err[2048];
    ckpt_info info;
    if (ckpt_read_info(argv[1], &info, err, sizeof err)) {
        fprintf(stderr, "export_case_logits: %s\n", err);
        return 1;
    }
    gdn_config cfg = info.model;
    ckpt_info_free(&info);
    if (gdn_config_validate(&cfg, err, sizeof err)) {
        fprintf(stderr, "export_case_logits: %s: %s\n", argv[1], err);
        return 1;
    }
    gdn_param_table t;
    gdn_param_table_build(&t, &cfg);
    float *P = malloc(t.total * sizeof *P);
    int *ids = malloc((size_t)B * T * sizeof *ids);
    FILE *f = NULL;
    int rc = 1;
    if (!P || !ids) goto done;
    if (ckpt_load(argv[1], &cfg, &t, P, NULL, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "export_case_logits: %s\n", err);
        goto done;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(seed + 1);
    for (int i = 0; i < B * T; i++) { /* splitmix64: the same ids on every machine */
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        ids[i] = (int)((z ^ (z >> 31)) % (uint64_t)cfg.vocab_size);
    }
    gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(&t, B, T);
    gdn_cpu_forward_f32(a, &t, P, ids, NULL, 0.0f, NULL, NULL, NULL);
    const float *lg = gdn_cpu_logits_f32(a);
    f = fopen(argv[2], "w");
    if (!f) {
        perror(argv[2]);
        gdn_cpu_acts_free_f32(a);
        goto done;
    }
    fprintf(f, "{\"ids\": [");
    for (int b = 0; b < B; b++) {
        fprintf(f, "%s[", b ? ", " : "");
        for (int i = 0; i < T; i++) fprintf(f, "%s%d", i ? ", " : "", ids[b * T + i]);
        fprintf(f, "]");
    }
    const size_t n = (size_t)B * T * cfg.vocab_size;
    fprintf(f, "], \"logits_shape\": [%d, %d, %d], \"logits\": [", B, T, cfg.vocab_size);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%.9g", i ? ", " : "", lg[i]);
    fprintf(f, "], \"source\": \"gdn CPU forward (fp32)\"}\n");
    gdn_cpu_acts_free_f32(a);
    rc = fclose(f) ? 1 : 0;
    f = NULL;
    if (rc) perror(argv[2]);
done:
    free(ids);
    free(P);
    gdn_param_table_free(&t);
    return rc;
}
