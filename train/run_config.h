/* The resolved settings of a run: model shape, data, optimiser, schedule, logging and
 * checkpointing. Resolution order: built-in defaults, a named preset, a JSON file (--config),
 * then --key=value overrides on the command line. Keys are flat ("d_model", "lr", ...). */
#ifndef GDN_RUN_CONFIG_H
#define GDN_RUN_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "io/json.h"
#include "model/backend.h"
#include "model/config.h"

#define GDN_PATH_MAX 1024

typedef struct {
    gdn_config model;
    /* data */
    char data[GDN_PATH_MAX];   /* text file (.txt or .gz) or token shards */
    int64_t val_tokens;        /* tokens held out at the end of the corpus for validation */
    int documents;             /* pack documents, reset at their starts (io/docs.h) */
    int64_t eod_token;         /* the token opening each document; -1: files are documents */
    int64_t mask_begin, mask_end; /* masked stretches' markers; -1: none */
    int doc_fill;              /* documents: fill every window, splitting documents at its end */
    char tokenizer[GDN_PATH_MAX]; /* BPE tokenizer of the shards ("" = byte-level); absolute */
    /* run */
    char out[GDN_PATH_MAX];    /* run directory */
    int64_t steps;             /* optimizer steps */
    int64_t seed;
    char backend[16];          /* auto | cpu | cuda */
    gdn_precision precision;   /* training on the GPU: bf16 | fp32 (the CPU computes in fp32) */
    int threads;               /* CPU threads; 0 = all cores */
    /* batch */
    int batch_size;            /* sequences per micro-batch (per rank) */
    int seq_len;               /* tokens per sequence */
    int64_t batch_tokens;      /* tokens per optimizer step (all ranks); 0 = one micro-batch */
    /* optimiser and schedule */
    double lr, lr_min;         /* peak and floor learning rate */
    int64_t warmup_steps;
    int64_t decay_steps;       /* length of the LR schedule; 0 = steps */
    double weight_decay, beta1, beta2, adam_eps, grad_clip;
    /* evaluation, logging, checkpoints */
    int64_t eval_every;        /* steps between validation passes (0 = only at the end) */
    int eval_batches;          /* validation micro-batches per pass */
    int64_t log_every;         /* steps between progress lines */
    int64_t ckpt_every;        /* steps between checkpoints (0 = only at the end) */
    int keep;                  /* newest checkpoints kept */
    char resume[GDN_PATH_MAX]; /* "" (fresh), "auto", or a checkpoint path */
    char init_from[GDN_PATH_MAX]; /* weights-only start from a checkpoint */
    int sp;                    /* sequence-parallel group size */
    char sp_exchange[16];      /* how states cross sp ranks: pass | gather (comm/seqpar.h) */
    int zero;                  /* ZeRO stage: 1 shards the AdamW moments over the ranks (train/zero.h) */
} gdn_run_config;

/* Fills *rc from argv (after the subcommand name). Handles --config FILE, --preset NAME,
 * --key=value and --key value. Returns 0, 1 when --help was printed, or -1 with a message in
 * err (unknown key, wrong type, invalid model, missing required setting). */
int gdn_run_config_parse(gdn_run_config *rc, int argc, char **argv, char *err, int err_len);

/* The full resolved configuration as a JSON object (pretty: one key per line). */
void gdn_run_config_to_json(const gdn_run_config *rc, io_jw *w);
/* Reads a config saved by gdn_run_config_to_json (checkpoints, run directories). */
int gdn_run_config_from_json_text(gdn_run_config *rc, const char *text, char *err, int err_len);
/* The run configuration of base_json (the defaults when it is NULL or unreadable) with its model
 * replaced by *model and, when tokenizer is not NULL, its tokenizer: the config stored with a
 * checkpoint written from another's (an import, a student). Returns malloc'd JSON text. */
char *gdn_run_config_json_with_model(const char *base_json, const gdn_config *model, const char *tokenizer);

/* Prints every resolved setting, one per line. */
void gdn_run_config_print(const gdn_run_config *rc, FILE *f);
void gdn_run_config_usage(FILE *f);

#endif
