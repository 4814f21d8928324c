/* A check shared by tests/test_backend.c (the CPU backend) and tests/gpu/test_gpu_model.c (both
 * backends): mixer_mse fed by the teacher model's own stream (gdn_mixer_targets.teacher) against
 * the same stream and target through the host (the teacher's mid-block capture), every layer. */
#ifndef GDN_TESTS_MIXER_TEACHER_CHECK_H
#define GDN_TESTS_MIXER_TEACHER_CHECK_H

#include <stdlib.h>
#include <string.h>

#include "model/backend.h"

/* 1 when, for every layer, the squared error (> 0) and every gradient are bitwise equal on both
 * paths. The teacher holds tparams, the student sparams; tok: [B*T] tokens of shape s. */
static int mixer_teacher_same_bits(const gdn_backend *be, const gdn_param_table *t, const gdn_model_shape *s,
                                   const float *tparams, const float *sparams, const int *tok) {
    const size_t n = t->total, nh = (size_t)s->B * (size_t)s->T * (size_t)t->cfg.d_model;
    float *x_in = malloc(nh * sizeof(float)), *mid = malloc(nh * sizeof(float)), *target = malloc(nh * sizeof(float));
    float *g[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
    if (!x_in || !mid || !target || !g[0] || !g[1]) abort();
    gdn_model *tm = be->create(t, s), *m = be->create(t, s);
    be->upload(tm, tparams, NULL, NULL);
    be->upload(m, sparams, NULL, NULL);
    int ok = 1;
    for (int l = 0; l < t->cfg.n_layers; l++) {
        /* the capture: the stream entering block l (after block l - 1), and block l's mixer output */
        const int layers[2] = {l - 1, l};
        float *out[2] = {x_in, target}, *mids[2] = {NULL, mid};
        const gdn_capture cap = {2, layers, out, mids};
        be->forward(tm, tok, NULL, 0.0f, NULL, &cap);
        for (size_t i = 0; i < nh; i++) target[i] = mid[i] - x_in[i];
        const gdn_mixer_targets host = {.x_in = x_in, .target = target}, own = {.teacher = tm};
        double sse[2];
        for (int k = 0; k < 2; k++) {
            be->zero_grads(m);
            sse[k] = be->mixer_mse(m, l, k ? &own : &host, 0.01f);
            be->download_grads(m, g[k]);
        }
        ok &= sse[0] == sse[1] && sse[0] > 0 && memcmp(g[0], g[1], n * sizeof(float)) == 0;
    }
    be->free(tm);
    be->free(m);
    free(x_in);
    free(mid);
    free(target);
    free(g[0]);
    free(g[1]);
    return ok;
}

#endif
