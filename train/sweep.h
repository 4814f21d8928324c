/* Scaling sweeps (docs/scaling.md): a JSON sweep definition expanded into one gdn train
 * configuration per run and a job list, then run one after another (gdn sweep run) or as a Slurm
 * job array (jobs/sweep.sbatch).
 *
 * The sweep file (every field is checked; unknown fields are refused):
 *   name        the sweep's name (letters, digits, '-', '_', '.'): the default output directory
 *               sweeps/NAME
 *   corpus      {"data", "val_tokens", "tokenizer", "vocab_size", "max_epochs"}: the run settings
 *               of the same names, and the most passes over the training tokens a run may make
 *               (default 1: no run is planned past one epoch)
 *   base        run settings every run shares (any gdn train setting except those the sweep sets:
 *               out, steps, seed, lr, lr_min, warmup_steps, mixers, the corpus's and the size's)
 *   sizes       a rule {"d_model": [..], "n_layers": [..] or a number, or "aspect": d_model per
 *               layer, "head_dim", "ffn_mult"} or a list of explicit model settings
 *               [{"name": .., "d_model": .., ...}, ...]
 *   tokens      token budgets [..], or tokens_per_param [..]: budgets as multiples of each model's
 *               non-embedding parameters
 *   mixers      mixer patterns ["G", "A", "GGGA", ...] (model/mixer.h)
 *   seeds       [1] by default
 *   lr          {"rule": "width", "base", "base_d_model", "min_ratio"}: lr = base x base_d_model /
 *               d_model; or {"rule": "grid", "values": [..], "min_ratio"}: every run at each value
 *               (the analysis keeps the best per point); lr_min = min_ratio x lr
 *   warmup      warm-up as a fraction of the run's steps (default 0.02)
 *   throughput  measured training tokens/s of the reference run (the cheapest run of the mixer;
 *               gdn bench --what step, or gdn sweep plan --bench): a number, or one per mixer
 *               pattern {"G": .., "A": ..}; turned into FLOP/s with that run's FLOPs per token */
#ifndef GDN_SWEEP_H
#define GDN_SWEEP_H

#include <stddef.h>
#include <stdint.h>

#include "train/run_config.h"
#include "train/run_summary.h"

#define GDN_SWEEP_NAME_MAX 128
#define GDN_SWEEP_MAX_LIST 1024 /* entries of any list of the file */
#define GDN_SWEEP_MAX_RUNS 10000

typedef struct {
    char name[GDN_SWEEP_NAME_MAX]; /* run directory and config file name */
    char size[64];                 /* the size's name */
    int64_t tokens;                /* tokens it trains on (whole steps) */
    gdn_run_config rc;             /* resolved and validated (out: runs/NAME, relative) */
    gdn_flops fl;
    double flops;                  /* fl.per_token x tokens */
    double hours;                  /* estimated device hours (NAN without a throughput) */
} gdn_sweep_run;

typedef struct {
    char name[GDN_SWEEP_NAME_MAX];
    gdn_sweep_run *runs; /* sorted by FLOPs, cheapest first */
    int n_runs;
    double max_epochs;
    int64_t train_tokens; /* of the corpus (gdn_sweep_check_corpus; 0: not checked) */
    int has_throughput;
    char lr_rule[16];
} gdn_sweep;

/* Parses and expands a sweep file's text (source names it in messages). Touches no file except
 * a tokenizer named by the corpus (checked as gdn train checks it). 0, or -1 with a message
 * naming the file, line, field and what to do. */
int gdn_sweep_parse(gdn_sweep *sw, const char *text, size_t len, const char *source, char *err, size_t errlen);
void gdn_sweep_free(gdn_sweep *sw);

/* Opens the corpus as the runs will and checks every run's budget against its training tokens
 * (max_epochs). 0, or -1 with err. */
int gdn_sweep_check_corpus(gdn_sweep *sw, char *err, size_t errlen);

/* Sets the measured training tokens/s of mixer pattern `mixers` (its cheapest run) and every run
 * of that pattern's estimated hours; 0, or -1 when no run has that pattern. */
int gdn_sweep_set_throughput(gdn_sweep *sw, const char *mixers, double tokens_per_s);

/* Writes DIR/sweep.json (the text as given), DIR/configs/NAME.json, DIR/jobs.txt (one
 * "configs/NAME.json NAME" line per run, the list format of jobs/train_array.sbatch) and
 * DIR/plan.json (the runs with their sizes, budgets, FLOPs and estimates), each atomically. */
int gdn_sweep_write(const gdn_sweep *sw, const char *dir, const char *text, size_t len, char *err, size_t errlen);

/* One entry of a job list. */
typedef struct {
    char config[GDN_PATH_MAX];
    char name[GDN_SWEEP_NAME_MAX];
} gdn_sweep_job;

/* Reads a job list (blank lines and '#' comments skipped; "CONFIG [NAME]", NAME defaulting to the
 * config's file name without .json; a relative CONFIG is relative to the list's directory).
 * *jobs is malloc'ed. 0, or -1 with err. */
int gdn_sweep_read_jobs(const char *path, gdn_sweep_job **jobs, int *n, char *err, size_t errlen);

/* 1 when run_dir/summary.json is a finished run's summary for config (its steps), else 0 with
 * the reason in why ("" when there is none). */
int gdn_sweep_run_finished(const char *run_dir, const char *config, char *why, size_t whylen);

#endif
