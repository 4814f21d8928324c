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
/* The teacher-forced mixer of the CUDA model fed by the teacher model's own stream against the
 * same stream and target through the host, every layer of an all-attention case, fp32 and
 * bf16: test_gpu_model's part 1e check (mixer_teacher_same) through the CUDA backend table. */
static int mixer_teacher_emu(const grad_case *gc0) {
    grad_case gc = *gc0;
    memset(gc.c.mixers, 'A', (size_t)gc.c.n_layers);
    gc.c.mixers[gc.c.n_layers] = '\0';
    gdn_param_table t;
    gdn_param_table_build(&t, &gc.c);
    const int N = gc.B * gc.T;
    float *p = init_params(&t, 21);
    int *tok = xmalloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (i * 7 + 3) % gc.c.vocab_size;
    int fails = 0;
    for (int pi = 0; pi < 2; pi++) {
        const gdn_model_shape s = {.B = gc.B, .T = gc.T, .precision = pi ? GDN_PRECISION_BF16 : GDN_PRECISION_FP32};
        fails += mixer_teacher_same(gdn_backend_cuda(), &t, &s, p, tok);
    }
    free(p);
    free(tok);
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
