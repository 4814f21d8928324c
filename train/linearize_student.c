/* gdn linearize --out: the student's layers, configuration and parameters
 * (train/linearize_student.h). */
#include "train/linearize_student.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/mixer.h"

int lin_student_keep(const gdn_config *t, const char *keep, unsigned char *kept, char *err, size_t err_len) {
    const char *p = keep;
    if (!*p) {
        snprintf(err, err_len, "--keep-softmax: empty list (give layer indices such as 5,11)");
        return -1;
    }
    for (;;) {
        char *end;
        errno = 0;
        const long l = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || *p == '+' || *p == ' ') {
            snprintf(err, err_len, "--keep-softmax '%.200s': '%.40s' is not a layer index (give comma-separated "
                     "integers such as 5,11)", keep, p);
            return -1;
        }
        if (l < 0 || l >= t->n_layers) {
            snprintf(err, err_len, "--keep-softmax: layer %ld is out of range: the teacher has %d layers (0..%d)", l,
                     t->n_layers, t->n_layers - 1);
            return -1;
        }
        if (gdn_config_layer_mixer(t, (int)l) != GDN_MIXER_A) {
            snprintf(err, err_len, "--keep-softmax: layer %ld of the teacher is not softmax attention (A) (mixers "
                     "\"%.64s\"): only softmax layers can be kept", l, gdn_config_mixers(t));
            return -1;
        }
        kept[l] = 1;
        if (!*end) return 0;
        p = end + 1;
    }
}

int lin_student_config(const gdn_config *t, const unsigned char *to_s, gdn_config *s, char *err, size_t err_len) {
    const int nL = t->n_layers;
    char *letters = GDN_MALLOC((size_t)nL + 1);
    for (int l = 0; l < nL; l++) {
        letters[l] = gdn_mixer_get(gdn_config_layer_mixer(t, l))->kind;
        if (to_s[l]) letters[l] = gdn_mixer_get(GDN_MIXER_S)->kind;
    }
    int period = 0;
    for (int pass = 0; pass < 2 && !period; pass++)
        for (int p = 1; p <= nL && p <= GDN_MAX_MIXERS && !period; p++) {
            if (pass == 0 && nL % p) continue;
            int ok = 1;
            for (int l = p; ok && l < nL; l++) ok = letters[l] == letters[l % p];
            if (ok) period = p;
        }
    int status = -1;
    if (!period) {
        snprintf(err, err_len, "the student's mixers do not repeat with a period of at most %d layers (the longest "
                 "pattern a configuration holds): keep other layers softmax (--keep-softmax)", GDN_MAX_MIXERS);
        goto done;
    }
    *s = *t;
    memcpy(s->mixers, letters, (size_t)period);
    s->mixers[period] = 0;
    char sub[512];
    if (gdn_config_validate(s, sub, sizeof sub)) {
        snprintf(err, err_len, "the student's configuration is out of range: %s", sub);
        goto done;
    }
    status = 0;
done:
    free(letters);
    return status;
}

void lin_student_params(const gdn_param_table *tt, const float *tp, const gdn_param_table *st, float *sp,
                        const double *lambda) {
    for (int i = 0; i < st->n; i++) {
        const gdn_param *d = &st->p[i];
        const gdn_param *s = gdn_param_find(tt, d->name);
        if (!s) { /* only the balance factors are new */
            if (!strstr(d->name, ".attn.log_lambda")) GDN_DIE("linearize --out: the teacher has no tensor %s", d->name);
            continue;
        }
        if (s->numel != d->numel)
            GDN_DIE("linearize --out: %s has %zu elements in the student, %zu in the teacher", d->name, d->numel,
                    s->numel);
        memcpy(sp + d->offset, tp + s->offset, sizeof *sp * d->numel);
    }
    const int H = st->cfg.n_heads;
    for (int l = 0; l < st->cfg.n_layers; l++) {
        const size_t off = st->layer[l].log_lambda;
        if (off == GDN_NO_TENSOR) continue;
        for (int h = 0; h < H; h++) sp[off + (size_t)h] = (float)log(lambda[(size_t)l * H + h]);
    }
}
