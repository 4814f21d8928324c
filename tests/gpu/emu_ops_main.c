/* The attention layers' ops of tests/gpu/test_gpu_ops.c (attention_layer_ops: the q/k bias +
 * norm + RoPE prep and the bias ops, against the fp64 CPU ops) and the short convolution's
 * generic kernels with and without documents on the CPU emulator, both precisions, with the
 * test's own comparisons and limits (see emu_attn.sh). */
#define main test_gpu_ops_main
#include "tests/gpu/test_gpu_ops.c"
#undef main
int main(void) {
    for (int pi = 0; pi < 2; pi++) {
        P = pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32;
        BF = pi;
        TOL = BF ? 1e-2 : 1e-5;
        attention_layer_ops();
        test_conv_all(3, 21, 45, 3);
        test_conv_docs(6, 40, 13, 3);
        test_conv_docs(8, 7, 16, 4);
        test_conv_docs(2, 12, 13, 8);
    }
    printf("%s: %d failed comparisons\n", FAILS ? "FAIL" : "PASS", FAILS);
    return FAILS ? 1 : 0;
}
