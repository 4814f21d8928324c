/* The teacher's mean attention distance per layer and head (train/distill_init.h), from the
 * fp32 CPU forward's hidden states: each softmax layer's q and k are recomputed from the input
 * of the layer (norm, projections, biases, q/k norms, RoPE, as model/cpu/model_attn.c), and the
 * attention probabilities in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"
#include "model/cpu/model_cpu.h"
#include "model/cpu/ops_cpu.h"
#include "model/mixer.h"
#include "train/distill_init.h"

static void add_bias(float *y, const float *b, int N, int C) {
    for (int n = 0; n < N; n++)
        for (int j = 0; j < C; j++) y[(size_t)n * C + j] += b[j];
}

/* Sums sum_t sum_s p(t, s) (t - s) of one layer into acc[h] (H heads), from its input x [T, D]. */
static void layer_distance(const gdn_param_table *t, const float *P, int l, const float *x, int T,
                           double *acc) {
    const gdn_config *c = &t->cfg;
    const gdn_layer_offsets *off = &t->layer[l];
    const int D = c->d_model, H = c->n_heads, Hkv = gdn_config_kv_heads(c), Da = gdn_config_attn_dim(c);
    const int QW = H * Da, KW = Hkv * Da, group = H / Hkv;
    const float eps = (float)c->norm_eps;
    float *h1 = GDN_MALLOC(sizeof(float) * (size_t)T * D), *r = GDN_MALLOC(sizeof(float) * (size_t)T * H);
    float *qp = GDN_MALLOC(sizeof(float) * (size_t)T * QW), *kp = GDN_MALLOC(sizeof(float) * (size_t)T * KW);
    float *q = GDN_MALLOC(sizeof(float) * (size_t)T * QW), *k = GDN_MALLOC(sizeof(float) * (size_t)T * KW);
    double *s = GDN_MALLOC(sizeof(double) * (size_t)T);
    gdn_rmsnorm_fwd_f32(h1, r, x, P + off->attn_norm, T, D, eps);
    gdn_linear_fwd_f32(qp, h1, P + off->q_proj, T, D, QW);
    gdn_linear_fwd_f32(kp, h1, P + off->k_proj, T, D, KW);
    if (c->qkv_bias) {
        add_bias(qp, P + off->q_bias, T, QW);
        add_bias(kp, P + off->k_bias, T, KW);
    }
    if (c->qk_norm) {
        gdn_rmsnorm_fwd_f32(q, r, qp, P + off->q_norm, T * H, Da, eps);
        gdn_rmsnorm_fwd_f32(k, r, kp, P + off->k_norm, T * Hkv, Da, eps);
    } else {
        memcpy(q, qp, sizeof(float) * (size_t)T * QW);
        memcpy(k, kp, sizeof(float) * (size_t)T * KW);
    }
    gdn_rope_fwd_f32(q, q, 1, T, H, Da, 0, gdn_config_rope_theta(c));
    gdn_rope_fwd_f32(k, k, 1, T, Hkv, Da, 0, gdn_config_rope_theta(c));
    const double scale = 1.0 / sqrt((double)Da);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            const float *qi = q + (size_t)i * QW + (size_t)h * Da;
            double mx = -INFINITY, z = 0, dist = 0;
            for (int j = 0; j <= i; j++) {
                const float *kj = k + (size_t)j * KW + (size_t)(h / group) * Da;
                double dot = 0;
                for (int e = 0; e < Da; e++) dot += (double)qi[e] * kj[e];
                s[j] = dot * scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j <= i; j++) {
                const double p = exp(s[j] - mx);
                z += p;
                dist += p * (i - j);
            }
            acc[h] += dist / z;
        }
    free(h1);
    free(r);
    free(qp);
    free(kp);
    free(q);
    free(k);
    free(s);
}

void distill_attention_distance(const gdn_param_table *t, const float *P, const int *tokens, int n,
                                int T, double *dist) {
    const gdn_config *c = &t->cfg;
    const int nL = c->n_layers, H = c->n_heads;
    for (size_t i = 0; i < (size_t)nL * H; i++) dist[i] = 0;
    gdn_cpu_acts_f32 *a = gdn_cpu_acts_create_f32(t, 1, T);
    for (int w = 0; w < n; w++) {
        gdn_cpu_forward_f32(a, t, P, tokens + (size_t)w * T, NULL, 0.0f, NULL, NULL, NULL);
        for (int l = 0; l < nL; l++)
            if (t->layer[l].mixer == GDN_MIXER_A)
                layer_distance(t, P, l, gdn_cpu_hidden_f32(a, l - 1), T, dist + (size_t)l * H);
    }
    gdn_cpu_acts_free_f32(a);
    for (int l = 0; l < nL; l++)
        for (int h = 0; h < H; h++)
            dist[(size_t)l * H + h] = t->layer[l].mixer == GDN_MIXER_A
                                          ? dist[(size_t)l * H + h] / ((double)n * T)
                                          : NAN;
}
