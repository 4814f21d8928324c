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
    printf("%s: %d failures\n", fails ? "FAIL" : "PASS", fails);
    return fails != 0;
}
