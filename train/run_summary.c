/* summary.json of a finished run and the FLOP count behind it (formulas: train/run_summary.h,
 * docs/scaling.md). */
#include "train/run_summary.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "io/json.h"
#include "model/mixer.h"
#include "model/params.h"
#ifdef GDN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

double gdn_mixer_fwd_flops_per_token(const gdn_config *c, int mixer, int seq_len) {
    const gdn_mixer_info *mi = gdn_mixer_get(mixer);
    if (!mi || seq_len < 1) return 0.0;
    const double T = seq_len, H = c->n_heads, Da = gdn_config_attn_dim(c);
    /* S: attention's tensors, the gated delta rule's chunk work on heads of Da keys and values */
    const int linearized = mixer == GDN_MIXER_S, has_delta = mi->has_delta || linearized;
    if (!mi->is_delta && !linearized) /* causal softmax attention: q k^T and p v over T (T + 1) / 2 pairs */
        return 2.0 * H * Da * (T + 1.0);
    const double K = linearized ? Da : c->head_dim, V = linearized ? Da : gdn_config_head_v(c);
    /* the chunks of a sequence: floor(T / C) of C tokens and one of the remaining r < C */
    const int C = c->chunk_size, full = seq_len / C, r = seq_len % C;
    double sum = 0.0;
    for (int i = 0; i < 2; i++) {
        const double n = i == 0 ? full : (r > 0), x = i == 0 ? C : r;
        sum += n * (has_delta ? 3 * x * x * K + 2 * x * x * V + x * x * x / 3 + 3 * x * K * V
                                  : x * x * K + x * x * V + 2 * x * K * V);
    }
    return 2.0 * H * sum / T;
}

int gdn_flops_of(const gdn_config *c, int seq_len, gdn_flops *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char verr[512];
    if (gdn_config_validate(c, verr, sizeof verr)) {
        snprintf(err, errlen, "invalid model: %s", verr);
        return -1;
    }
    gdn_param_table t;
    gdn_param_table_build(&t, c);
    const int64_t vd = (int64_t)c->vocab_size * c->d_model;
    out->total = (int64_t)t.total;
    out->embedding = c->tie_embeddings ? vd : 2 * vd;
    out->non_embedding = out->total - out->embedding;
    out->matmul = (int64_t)gdn_param_matmul_count(&t);
    gdn_param_table_free(&t);
    double mix = 0.0;
    for (int l = 0; l < c->n_layers; l++) mix += gdn_mixer_fwd_flops_per_token(c, gdn_config_layer_mixer(c, l), seq_len);
    out->per_token_params = 6.0 * (double)out->matmul;
    out->per_token_mixers = 3.0 * mix; /* backward ~ twice the forward, as for 6N */
    out->per_token = out->per_token_params + out->per_token_mixers;
    return 0;
}

int gdn_metrics_stats_read(const char *path, gdn_metrics_stats *s, char *err, size_t errlen) {
    s->last_step = 0;
    s->final_val = s->best_val = NAN;
    s->best_step = -1;
    s->wall_s = 0.0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, failed = 0;
    double seg_last = 0.0; /* time_s restarts at 0 when a run resumes: sum each stretch's last */
    while (!failed && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len == 0 || (len == 1 && line[0] == '\n')) continue;
        char where[4300], perr[512];
        snprintf(where, sizeof where, "%s:%d", path, lineno);
        io_json *o = io_json_parse(line, (size_t)len, where, perr, sizeof perr);
        if (!o || o->type != IO_JSON_OBJECT) {
            if (o) snprintf(err, errlen, "%s: not a JSON object", where);
            else snprintf(err, errlen, "%s", perr);
            io_json_free(o);
            failed = 1;
            break;
        }
        int64_t step = 0;
        double t = 0.0, v = NAN;
        const io_json *vj = io_json_get(o, "val_loss");
        if (io_json_get_i64(o, "step", &step, perr, sizeof perr) < 0 ||
            io_json_get_number(o, "time_s", &t, perr, sizeof perr) < 0) {
            snprintf(err, errlen, "%s", perr);
            failed = 1;
        } else {
            s->last_step = step;
            if (t < seg_last) s->wall_s += seg_last;
            seg_last = t;
            if (vj && vj->type == IO_JSON_NUMBER) v = vj->number;
            if (isfinite(v)) {
                s->final_val = v;
                if (!(v >= s->best_val)) {
                    s->best_val = v;
                    s->best_step = step;
                }
            }
        }
        io_json_free(o);
    }
    s->wall_s += seg_last;
    free(line);
    fclose(f);
    return failed ? -1 : 0;
}

/* The processor's name from /proc/cpuinfo ("" when unknown). */
static void cpu_model(char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v += strspn(v + 1, " \t") + 1;
        snprintf(out, n, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

/* The name of the GPU this process uses ("" without one). */
static void gpu_model(const char *backend, char *out, size_t n) {
    out[0] = 0;
#ifdef GDN_HAVE_CUDA
    int dev = 0;
    struct cudaDeviceProp prop;
    if (!strcmp(backend, "cuda") && cudaGetDevice(&dev) == cudaSuccess &&
        cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(out, n, "%s", prop.name);
#else
    (void)backend;
    (void)n;
#endif
}

int gdn_run_summary_write(const gdn_run_config *rc, int64_t tokens, const gdn_hardware *hw, char *err,
                          size_t errlen) {
    gdn_flops fl;
    if (gdn_flops_of(&rc->model, rc->seq_len, &fl, err, errlen)) return -1;
    char path[GDN_PATH_MAX + 32], tmp[GDN_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/metrics.jsonl", rc->out);
    gdn_metrics_stats ms;
    if (gdn_metrics_stats_read(path, &ms, err, errlen)) return -1;
    char cpu[256], gpu[256], host[256] = "";
    cpu_model(cpu, sizeof cpu);
    gpu_model(hw->backend, gpu, sizeof gpu);
    struct utsname un;
    if (!uname(&un)) snprintf(host, sizeof host, "%s", un.nodename);
    char when[64] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);

    io_jw w;
    io_jw_init(&w, 1);
    io_jw_begin_object(&w);
    io_jw_kv_int(&w, "summary_version", 1);
    io_jw_kv_string(&w, "mixers", gdn_config_mixers(&rc->model));
    io_jw_kv_int(&w, "d_model", rc->model.d_model);
    io_jw_kv_int(&w, "n_layers", rc->model.n_layers);
    io_jw_kv_int(&w, "vocab_size", rc->model.vocab_size);
    io_jw_kv_int(&w, "seq_len", rc->seq_len);
    io_jw_kv_int(&w, "seed", rc->seed);
    io_jw_kv_number(&w, "lr", rc->lr);
    io_jw_kv_int(&w, "steps", ms.last_step);
    io_jw_kv_int(&w, "params_total", fl.total);
    io_jw_kv_int(&w, "params_embedding", fl.embedding);
    io_jw_kv_int(&w, "params_non_embedding", fl.non_embedding);
    io_jw_kv_int(&w, "params_matmul", fl.matmul);
    io_jw_kv_int(&w, "tokens", tokens);
    io_jw_kv_number(&w, "flops_per_token", fl.per_token);
    io_jw_kv_number(&w, "flops_per_token_mixers", fl.per_token_mixers);
    io_jw_kv_number(&w, "flops", fl.per_token * (double)tokens);
    io_jw_kv_number(&w, "final_val_loss", ms.final_val); /* null without validation data */
    io_jw_kv_number(&w, "best_val_loss", ms.best_val);
    io_jw_kv_int(&w, "best_step", ms.best_step);
    io_jw_kv_number(&w, "wall_s", ms.wall_s);
    io_jw_key(&w, "hardware");
    io_jw_begin_object(&w);
    io_jw_kv_string(&w, "backend", hw->backend);
    io_jw_kv_string(&w, "describe", hw->describe);
    io_jw_kv_string(&w, "gpu", gpu);
    io_jw_kv_string(&w, "cpu", cpu);
    io_jw_kv_int(&w, "ranks", hw->ranks);
    io_jw_kv_int(&w, "threads", hw->threads);
    io_jw_kv_string(&w, "host", host);
    io_jw_end_object(&w);
    io_jw_kv_string(&w, "finished_utc", when);
    io_jw_end_object(&w);

    snprintf(path, sizeof path, "%s/summary.json", rc->out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int bad = !f || fprintf(f, "%s\n", io_jw_text(&w)) < 0;
    if (f && fclose(f)) bad = 1;
    io_jw_free(&w);
    if (bad || rename(tmp, path)) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int gdn_run_summary_remove(const char *dir, char *err, size_t errlen) {
    char path[GDN_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    if (unlink(path) && errno != ENOENT) {
        snprintf(err, errlen, "cannot remove %s (left by a finished run; this run is not finished): %s", path,
                 strerror(errno));
        return -1;
    }
    return 0;
}
