/* Cases of tests/gpu/test_gpu_model.c on the CPU emulator, with its own limits (see
 * emu_attn.sh): loss, logits and every parameter gradient against the fp64 CPU model, fp32 and
 * bf16, a second pass bitwise equal. Cases 0..2: attention_cases (two hybrids with delta-rule
 * layers, a softmax-only model, which also runs in segments through the sequence-parallel
 * hooks); 3, 4: cases 0 and 2 with documents packed into the rows (part 1e); 5: the delta rule
 * with its value heads split in two (q, k shared; v and y recomputed in the backward); 6: the
 * GDML mixer pattern; 7: the gated delta rule with documents; 8: the gated delta rule in 3
 * segments through the sequence-parallel hooks, the states arriving late. Then the
 * teacher-forced mixer (case 0's layers). Usage: emu_model [first [end]] (cases 0..8). */
#define main test_gpu_model_main
#include "tests/gpu/test_gpu_model.c"
#undef main
/* The teacher-forced mixer of the CUDA model fed by the teacher model's own stream against the
 * same stream and target through the host, every layer (a delta-rule and an attention layer),
 * fp32 and bf16: test_gpu_model's part 1e check (mixer_teacher_same) through the CUDA backend
 * table. */
static int mixer_teacher_emu(const grad_case *gc) {
    gdn_param_table t;
    gdn_param_table_build(&t, &gc->c);
    const int N = gc->B * gc->T;
    float *p = init_params(&t, 21);
    int *tok = xmalloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (i * 7 + 3) % gc->c.vocab_size;
    int fails = 0;
    for (int pi = 0; pi < 2; pi++) {
        const gdn_model_shape s = {.B = gc->B, .T = gc->T, .precision = pi ? GDN_PRECISION_BF16 : GDN_PRECISION_FP32};
        fails += mixer_teacher_same(gdn_backend_cuda(), &t, &s, p, tok);
    }
    free(p);
    free(tok);
    gdn_param_table_free(&t);
    return fails;
}

int main(int argc, char **argv) {
    grad_case att[3], delta[3], mix[3];
    attention_cases(att);
    delta_cases(delta);
    mixer_cases(delta, mix);
    enum { NCASES = 9 };
    const int first = argc > 1 ? atoi(argv[1]) : 0, end = argc > 2 ? atoi(argv[2]) : NCASES;
    int fails = 0;
    for (int i = first; i < end && i < NCASES; i++) {
        switch (i) {
        case 0: case 1: case 2: fails += grad_check(&att[i]); break;
        case 3: fails += docs_check(&att[0]); break;
        case 4: fails += docs_check(&att[2]); break;
        case 5: fails += grad_check(&delta[2]); break;
        case 6: fails += grad_check(&mix[0]); break;
        case 7: fails += docs_check(&delta[0]); break;
        case 8: /* the delta rule in 3 segments through the sequence-parallel hooks, states late */
            fails += segment_check(delta[0].what, &delta[0].c, 2, 120, 3, 1);
            break;
        }
        /* the softmax-only case in 4 segments through the sequence-parallel hooks */
        if (i == 2) fails += segment_check(att[2].what, &att[2].c, 1, 260, 4, 0);
    }
    if (first == 0) fails += mixer_teacher_emu(&att[0]);
    printf("%s: %d failures\n", fails ? "FAIL" : "PASS", fails);
    return fails != 0;
}
