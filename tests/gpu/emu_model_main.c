/* The attention cases of tests/gpu/test_gpu_model.c (attention_cases, part 1: loss, logits and
 * every parameter gradient against the fp64 CPU model, fp32 and bf16, a second pass bitwise
 * equal) on the CPU emulator, with every layer an attention layer (the delta-rule kernels are not
 * emulated) and the test's own limits (see emu_attn.sh); then the softmax-only case in segments
 * through the sequence-parallel hooks. Usage: emu_model [first [end]]. */
#define main test_gpu_model_main
#include "tests/gpu/test_gpu_model.c"
#undef main
int main(int argc, char **argv) {
    grad_case att[3];
    attention_cases(att);
    const int first = argc > 1 ? atoi(argv[1]) : 0, end = argc > 2 ? atoi(argv[2]) : 3;
    int fails = 0;
    for (int i = first; i < end && i < 3; i++) {
        gdn_config *c = &att[i].c;
        char all_a[GDN_MAX_MIXERS + 1];
        const int n = c->n_layers < GDN_MAX_MIXERS ? c->n_layers : GDN_MAX_MIXERS;
        memset(all_a, 'A', (size_t)n);
        all_a[n] = '\0';
        snprintf(c->mixers, sizeof c->mixers, "%s", all_a);
        printf("(as %s)\n", all_a);
        fails += grad_check(&att[i]);
    }
    /* the softmax-only case in 4 segments through the sequence-parallel hooks */
    if (first == 0) fails += segment_check(att[2].what, &att[2].c, 1, 260, 4, 0);
    printf("%s: %d failures\n", fails ? "FAIL" : "PASS", fails);
    return fails != 0;
}
