/* summary.json of a finished run: what a scaling analysis needs from it (jobs/scaling/analyze.py,
 * docs/scaling.md): parameter counts, tokens, training FLOPs, final and best validation loss,
 * wall time and hardware. Written by rank 0 after the last step (a temp file renamed over it),
 * removed when a run (re)starts in the directory, so its presence means "finished". */
#ifndef GDN_RUN_SUMMARY_H
#define GDN_RUN_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "train/run_config.h"

/* Parameter counts and training FLOPs per token of a model (gdn_flops_of).
 *
 *   N_total        every parameter
 *   N_embedding    the embedding table (vocab x d_model) and an untied LM head (vocab x d_model)
 *   N_non_emb      N_total - N_embedding: the count scaling laws are usually fitted on
 *   N_matmul       parameters used in matrix products per token (every 2-D weight, the LM head
 *                  included, the embedding lookup excluded): gdn_param_matmul_count
 *
 *   FLOPs per token = 6 N_matmul + 3 sum over layers of the mixer's forward term F(layer)
 * (forward 2 N_matmul, backward twice the forward; the mixer terms are the products of
 * activations with activations, which no parameter count sees). With T = seq_len, H = n_heads,
 * K = head_dim, V = expand_v K and the chunks of a sequence (floor(T / C) of C = chunk_size
 * tokens and one of the r = T mod C left), each a sum over the chunks x (of x tokens) / T:
 *   A  (softmax attention, causal, Da = attn_head_dim):  F = 2 H Da (T + 1)
 *      (q k^T and p v over the T (T + 1) / 2 causal pairs, 2 FLOPs per multiply-add)
 *   G, D (chunked delta rule): F = 2 H sum_x (3 x^2 K + 2 x^2 V + x^3 / 3 + 3 x K V) / T
 *      (per chunk: K K^T, the triangular inverse by substitution, W, U, W S, Q S, Q K^T,
 *      (Q K^T) U, K^T U; the same count gdn bench uses)
 *   M, L (chunked linear attention, no delta correction): F = 2 H sum_x (x^2 K + x^2 V + 2 x K V) / T
 *      (per chunk: Q K^T, (Q K^T) V, Q S, K^T V)
 * Left out (each well under 1% of the total at the sizes here): norms, gates, the short
 * convolutions, the softmax and the loss. */
typedef struct {
    int64_t total, embedding, non_embedding, matmul;
    double per_token_params; /* 6 N_matmul */
    double per_token_mixers; /* 3 sum F(layer) */
    double per_token;        /* the sum */
} gdn_flops;

/* The forward FLOPs per token F of one layer of mixer kind `mixer` (model/mixer.h) in model c
 * with sequences of seq_len tokens (formulas above); 0 for an unknown kind. */
double gdn_mixer_fwd_flops_per_token(const gdn_config *c, int mixer, int seq_len);

/* Counts and FLOPs per token of model c at seq_len. 0, or -1 with the reason in err (a model
 * gdn_config_validate refuses). */
int gdn_flops_of(const gdn_config *c, int seq_len, gdn_flops *out, char *err, size_t errlen);

/* What metrics.jsonl of a run says about its validation losses and time. */
typedef struct {
    int64_t last_step;
    double final_val;  /* the val_loss of the last line that has one (NAN: none) */
    double best_val;   /* the lowest val_loss (NAN: none) */
    int64_t best_step;
    double wall_s;     /* the time_s of the recorded steps, summed over the run's restarts */
} gdn_metrics_stats;

/* Reads metrics.jsonl at path. 0, or -1 with the reason in err (unreadable file or a line
 * that is no JSON object). */
int gdn_metrics_stats_read(const char *path, gdn_metrics_stats *s, char *err, size_t errlen);

/* The machine a run trained on. */
typedef struct {
    const char *backend; /* "cpu" or "cuda" */
    const char *describe; /* gdn_train_backend_describe */
    int ranks;
    int threads;
} gdn_hardware;

/* Writes DIR/summary.json for the finished run rc (tokens seen over all ranks), reading
 * DIR/metrics.jsonl; atomically (DIR/summary.json.tmp renamed over it). 0, or -1 with err. */
int gdn_run_summary_write(const gdn_run_config *rc, int64_t tokens, const gdn_hardware *hw, char *err,
                          size_t errlen);

/* Removes DIR/summary.json (a run starting or resuming there is not finished); 0, or -1 with err
 * when it exists and cannot be removed. */
int gdn_run_summary_remove(const char *dir, char *err, size_t errlen);

#endif
