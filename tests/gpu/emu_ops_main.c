/* The attention layers' ops of tests/gpu/test_gpu_ops.c (attention_layer_ops: the q/k bias +
 * norm + RoPE prep and the bias ops, against the fp64 CPU ops) on the CPU emulator, both
 * precisions, with the test's own comparisons and limits (see emu_ops.sh). */
#define main test_gpu_ops_main
#include "tests/gpu/test_gpu_ops.c"
#undef main
int main(void) {
    for (int pi = 0; pi < 2; pi++) {
        P = pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32;
        BF = pi;
        TOL = BF ? 1e-2 : 1e-5;
        attention_layer_ops();
    }
    printf("%s: %d failed comparisons\n", FAILS ? "FAIL" : "PASS", FAILS);
    return FAILS ? 1 : 0;
}
