/* The CUDA model's step benchmark, and the profiler it runs for one more step (events around
 * every launch, summed per kind of work and per launch site). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/cuda/model_cuda_internal.cuh"

static const char *const prof_names[PR_N] = {"gemm", "delta", "norms", "conv", "act+gates", "pack", "loss",
                                             "copies", "embed", "optim", "attention"};

/* ---- profiler --------------------------------------------------------------------------------------------- */
void gdn_cuda_model_prof_begin(gdn_cuda_model *m, int cat, const char *file, int line, const char *call) {
    if (!m->prof_on || m->prof_n >= PROF_MAX) return;
    m->prof_line[m->prof_n] = line;
    m->prof_file[m->prof_n] = file;
    m->prof_call[m->prof_n] = call;
    GDN_CUDA_CHECK(cudaEventRecord(m->prof_ev[2 * m->prof_n], m->stream));
    m->prof_cat[m->prof_n] = (unsigned char)cat;
    m->prof_ph[m->prof_n] = (unsigned char)m->prof_phase;
}

void gdn_cuda_model_prof_end(gdn_cuda_model *m) {
    if (!m->prof_on || m->prof_n >= PROF_MAX) return;
    GDN_CUDA_CHECK(cudaEventRecord(m->prof_ev[2 * m->prof_n + 1], m->stream));
    m->prof_n++;
}

/* ---- benchmark -------------------------------------------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

extern "C" void gdn_cuda_model_bench(const gdn_param_table *t, const float *params, size_t matmul_params, int B,
                                     int T, gdn_cuda_precision p, int warmup, int repeats, gdn_cuda_step_bench *out) {
    if (repeats < 1) GDN_CUDA_DIE("benchmark: repeats must be >= 1");
    memset(out, 0, sizeof *out);
    gdn_cuda_model *m = gdn_cuda_model_create(t, B, T, p);
    gdn_cuda_model_upload(m, params, NULL, NULL);
    const int N = B * T, Vv = t->cfg.vocab_size;
    int *tok = (int *)malloc((size_t)N * sizeof(int)), *tgt = (int *)malloc((size_t)N * sizeof(int));
    double *ts = (double *)malloc((size_t)repeats * 4 * sizeof(double));
    if (!tok || !tgt || !ts) GDN_CUDA_DIE("out of host memory");
    unsigned long long st = 12345;
    for (int i = 0; i < N; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        tok[i] = (int)((st >> 33) % (unsigned long long)Vv);
    }
    for (int i = 0; i < N; i++) tgt[i] = (i % T == T - 1) ? -1 : tok[i + 1];
    gdn_adamw_hparams h = {1e-4, 0.9, 0.95, 1e-8, 0.1};
    cudaEvent_t ev[4];
    for (int i = 0; i < 4; i++) GDN_CUDA_CHECK(cudaEventCreate(&ev[i]));
    double *t_step = ts, *t_fwd = ts + repeats, *t_bwd = ts + 2 * repeats, *t_opt = ts + 3 * repeats;
    for (int r = -warmup; r < repeats; r++) {
        const double t0 = now_s();
        int nv = 0;
        GDN_CUDA_CHECK(cudaEventRecord(ev[0], m->stream));
        gdn_cuda_model_zero_grads(m);
        const double loss = gdn_cuda_model_forward(m, tok, tgt, 1.0f / (float)N, &nv);
        GDN_CUDA_CHECK(cudaEventRecord(ev[1], m->stream));
        gdn_cuda_model_backward(m);
        GDN_CUDA_CHECK(cudaEventRecord(ev[2], m->stream));
        gdn_cuda_model_adamw_step(m, &h, r + warmup + 1, 1.0);
        GDN_CUDA_CHECK(cudaEventRecord(ev[3], m->stream));
        GDN_CUDA_CHECK(cudaEventSynchronize(ev[3]));
        const double t1 = now_s();
        if (r < 0) continue;
        float a, b, c;
        GDN_CUDA_CHECK(cudaEventElapsedTime(&a, ev[0], ev[1]));
        GDN_CUDA_CHECK(cudaEventElapsedTime(&b, ev[1], ev[2]));
        GDN_CUDA_CHECK(cudaEventElapsedTime(&c, ev[2], ev[3]));
        t_step[r] = (t1 - t0) * 1e3;
        t_fwd[r] = a;
        t_bwd[r] = b;
        t_opt[r] = c;
        if (r == 0) out->first_loss = loss / (nv ? nv : 1);
        out->last_loss = loss / (nv ? nv : 1);
    }
    /* one more step with events around every launch: where the time goes */
    m->prof_ev = (cudaEvent_t *)malloc(2 * PROF_MAX * sizeof(cudaEvent_t));
    if (!m->prof_ev) GDN_CUDA_DIE("out of host memory");
    for (int i = 0; i < 2 * PROF_MAX; i++) GDN_CUDA_CHECK(cudaEventCreate(&m->prof_ev[i]));
    m->prof_on = 1;
    m->prof_n = 0;
    gdn_cuda_model_zero_grads(m);
    gdn_cuda_model_forward(m, tok, tgt, 1.0f / (float)N, NULL);
    gdn_cuda_model_backward(m);
    gdn_cuda_model_adamw_step(m, &h, warmup + repeats + 1, 1.0);
    m->prof_on = 0;
    double cat_ms[3][PR_N];
    memset(cat_ms, 0, sizeof cat_ms);
    for (int i = 0; i < m->prof_n; i++) {
        float ms = 0.0f;
        GDN_CUDA_CHECK(cudaEventElapsedTime(&ms, m->prof_ev[2 * i], m->prof_ev[2 * i + 1]));
        cat_ms[m->prof_ph[i]][m->prof_cat[i]] += ms;
    }
    int len = snprintf(out->breakdown, sizeof out->breakdown, "%-10s %9s %9s %9s\n", "", "forward", "backward", "optim");
    for (int c = 0; c < PR_N && len < (int)sizeof out->breakdown; c++)
        len += snprintf(out->breakdown + len, sizeof out->breakdown - (size_t)len, "%-10s %9.2f %9.2f %9.2f\n",
                        prof_names[c], cat_ms[0][c], cat_ms[1][c], cat_ms[2][c]);
    /* the launch sites (source file and line) that take the most time, summed over layers */
    enum { SITES = 256 };
    int site_line[SITES], nsite = 0;
    const char *site_file[SITES], *site_call[SITES];
    double site_ms[SITES];
    for (int i = 0; i < m->prof_n; i++) {
        float ms = 0.0f;
        GDN_CUDA_CHECK(cudaEventElapsedTime(&ms, m->prof_ev[2 * i], m->prof_ev[2 * i + 1]));
        int j = 0;
        while (j < nsite && (site_line[j] != m->prof_line[i] || strcmp(site_file[j], m->prof_file[i]))) j++;
        if (j == nsite) {
            if (nsite == SITES) continue;
            site_line[nsite] = m->prof_line[i];
            site_file[nsite] = m->prof_file[i];
            site_call[nsite] = m->prof_call[i];
            site_ms[nsite++] = 0.0;
        }
        site_ms[j] += ms;
    }
    if (len < (int)sizeof out->breakdown)
        len += snprintf(out->breakdown + len, sizeof out->breakdown - (size_t)len,
                        "top launch sites (ms per step; source line, first call)\n");
    for (int k = 0; k < 16 && k < nsite && len < (int)sizeof out->breakdown; k++) {
        int best = k;
        for (int j = k + 1; j < nsite; j++)
            if (site_ms[j] > site_ms[best]) best = j;
        const double tm = site_ms[best];
        const int tl = site_line[best];
        const char *tf = site_file[best];
        const char *tc = site_call[best];
        site_ms[best] = site_ms[k];
        site_line[best] = site_line[k];
        site_file[best] = site_file[k];
        site_call[best] = site_call[k];
        site_ms[k] = tm;
        site_line[k] = tl;
        site_file[k] = tf;
        site_call[k] = tc;
        const int name_len = (int)strcspn(tc, "(");
        const char *base = strrchr(tf, '/');
        len += snprintf(out->breakdown + len, sizeof out->breakdown - (size_t)len, "  %7.2f  %s:%-4d  %.*s\n", tm,
                        base ? base + 1 : tf, tl, name_len < 48 ? name_len : 48, tc);
    }
    out->gemm_ms = cat_ms[0][PR_GEMM] + cat_ms[1][PR_GEMM];
    out->step_ms = median(t_step, repeats);
    out->fwd_ms = median(t_fwd, repeats);
    out->bwd_ms = median(t_bwd, repeats);
    out->opt_ms = median(t_opt, repeats);
    out->tokens_per_s = (double)N / (out->step_ms * 1e-3);
    out->matmul_params = matmul_params;
    out->mfu = 6.0 * (double)matmul_params * out->tokens_per_s / 701e12;
    gdn_cuda_model_memory(m, &out->param_bytes, &out->act_bytes);
    size_t free_b = 0, total_b = 0;
    GDN_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    out->device_used = total_b - free_b;
    out->device_total = total_b;
    const gdn_delta_shape shape = m->dp.shape;
    int n_of[GDN_MIXER_COUNT] = {0}; /* layers per mixer */
    for (int l = 0; l < t->cfg.n_layers; l++) n_of[t->layer[l].mixer]++;
    for (int i = 0; i < 4; i++) GDN_CUDA_CHECK(cudaEventDestroy(ev[i]));
    gdn_cuda_model_free(m);
    free(tok);
    free(tgt);
    free(ts);
    out->delta_ms = 0.0;
    for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) { /* each delta-rule mixer of the pattern once, times its
                                                         layers (attention layers: the breakdown's "attention") */
        if (!n_of[v]) continue;
        gdn_delta_shape sv = shape;
        sv.variant = v;
        gdn_cuda_delta_timing tm;
        gdn_cuda_delta_time(&sv, p, 2, repeats < 5 ? 5 : repeats, &tm);
        out->delta_ms += tm.fwdbwd_ms * n_of[v];
    }
}
