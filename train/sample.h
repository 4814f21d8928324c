/* Drawing one token from a model's logits (gdn sample). */
#ifndef GDN_TRAIN_SAMPLE_H
#define GDN_TRAIN_SAMPLE_H

#include <stdint.h>

/* Draws a token in [0, V) from logits [V]: greedy (the first largest) when temperature <= 0,
 * otherwise softmax(logits / temperature) restricted to the top_k largest logits (top_k <= 0 or
 * >= V: all; ties at the k-th value are all kept). -inf logits have probability 0; when some
 * logits are +inf the draw is uniform among them. Returns -1, drawing nothing, when a logit is
 * NaN or every logit is -inf (no distribution to draw from), or when V < 1. probs is scratch of
 * V doubles; rng is the generator state, advanced by one draw. */
int gdn_sample_token(const float *logits, int V, double temperature, int top_k, uint64_t *rng,
                     double *probs);

/* The index of the first logit that is NaN or infinite, or -1 when all are finite. */
int gdn_first_nonfinite(const float *x, int n);

#endif
