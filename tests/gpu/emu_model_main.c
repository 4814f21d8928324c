/* The attention cases of tests/gpu/test_gpu_model.c (attention_cases, part 1: loss, logits and
 * every parameter gradient against the fp64 CPU model, fp32 and bf16, a second pass bitwise
 * equal) on the CPU emulator, with every layer an attention layer (the delta-rule kernels are not
 * emulated) and the test's own limits (see emu_attn.sh); then the softmax-only case in segments
 * through the sequence-parallel hooks; then two of the cases with documents packed into the
 * rows (part 1e: key_lo and RoPE positions per document). Usage: emu_model [first [end]]
 * (cases 0..4). */
#define main test_gpu_model_main
#include "tests/gpu/test_gpu_model.c"
#undef main
/* The teacher-forced mixer of the CUDA model (gdn_cuda_model_mixer_mse) fed by the teacher model's
 * own stream against the same stream and target through the host (its download_hidden and
 * download_mid), every layer of an all-attention case, fp32 and bf16: bitwise the same squared
 * error and gradients (test_gpu_model's part 1e through the backend table, here the CUDA model's
 * own entry points: the emulated build has no backend table). */
static int mixer_teacher_emu(const grad_case *gc0) {
    grad_case gc = *gc0;
    memset(gc.c.mixers, 'A', (size_t)gc.c.n_layers);
    gc.c.mixers[gc.c.n_layers] = '\0';
    gdn_param_table t;
    gdn_param_table_build(&t, &gc.c);
    const int N = gc.B * gc.T;
    const size_t nh = (size_t)N * gc.c.d_model;
    float *pt = init_params(&t, 21), *ps = init_params(&t, 22), *g[2] = {xmalloc(t.total * 4), xmalloc(t.total * 4)};
    float *x_in = xmalloc(nh * 4), *mid = xmalloc(nh * 4), *target = xmalloc(nh * 4);
    int *tok = xmalloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (i * 7 + 3) % gc.c.vocab_size;
    int fails = 0;
    for (int pi = 0; pi < 2; pi++) {
        gdn_cuda_model *tm = gdn_cuda_model_create(&t, gc.B, gc.T, pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32);
        gdn_cuda_model *m = gdn_cuda_model_create(&t, gc.B, gc.T, pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32);
        gdn_cuda_model_upload(tm, pt, NULL, NULL);
        gdn_cuda_model_upload(m, ps, NULL, NULL);
        int ok = 1;
        for (int l = 0; l < t.cfg.n_layers; l++) {
            gdn_cuda_model_forward(tm, tok, NULL, 0.0f, NULL);
            gdn_cuda_model_download_hidden(tm, l - 1, x_in);
            gdn_cuda_model_download_mid(tm, l, mid);
            for (size_t i = 0; i < nh; i++) target[i] = mid[i] - x_in[i];
            double sse[2];
            for (int k = 0; k < 2; k++) {
                gdn_cuda_model_zero_grads(m);
                sse[k] = k ? gdn_cuda_model_mixer_mse(m, l, NULL, NULL, tm, 0.01f)
                           : gdn_cuda_model_mixer_mse(m, l, x_in, target, NULL, 0.01f);
                gdn_cuda_model_download_grads(m, g[k]);
            }
            ok &= sse[0] == sse[1] && sse[0] > 0 && memcmp(g[0], g[1], t.total * 4) == 0;
        }
        printf("%-4s %s: mixer_mse with the teacher model's own stream = through the host, bitwise: %s\n",
               pi ? "bf16" : "fp32", gc.what, ok ? "ok" : "FAIL");
        fails += !ok;
        gdn_cuda_model_free(tm);
        gdn_cuda_model_free(m);
    }
    free(pt); free(ps); free(g[0]); free(g[1]); free(x_in); free(mid); free(target); free(tok);
    gdn_param_table_free(&t);
    return fails;
}

int main(int argc, char **argv) {
    grad_case att[3];
    attention_cases(att);
    /* cases 0..2: attention_cases; 3, 4: cases 0 and 2 with documents (part 1e) */
    const int first = argc > 1 ? atoi(argv[1]) : 0, end = argc > 2 ? atoi(argv[2]) : 5;
    int fails = 0;
    for (int i = first; i < end && i < 5; i++) {
        grad_case gc = att[i < 3 ? i : i == 3 ? 0 : 2];
        gdn_config *c = &gc.c;
        char all_a[GDN_MAX_MIXERS + 1];
        const int n = c->n_layers < GDN_MAX_MIXERS ? c->n_layers : GDN_MAX_MIXERS;
        memset(all_a, 'A', (size_t)n);
        all_a[n] = '\0';
        snprintf(c->mixers, sizeof c->mixers, "%s", all_a);
        printf("(as %s)\n", all_a);
        fails += i < 3 ? grad_check(&gc) : docs_check(&gc);
        /* the softmax-only case in 4 segments through the sequence-parallel hooks */
        if (i == 2) fails += segment_check(att[2].what, &att[2].c, 1, 260, 4, 0);
    }
    if (first == 0) fails += mixer_teacher_emu(&att[0]);
    printf("%s: %d failures\n", fails ? "FAIL" : "PASS", fails);
    return fails != 0;
}
