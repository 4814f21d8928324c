/* The ops of tests/gpu/test_gpu_ops.c on the CPU emulator (see emu_attn.sh), both precisions,
 * with the test's own comparisons and limits against the fp64 CPU ops: the attention layers' ops
 * (attention_layer_ops: the q/k bias + norm + RoPE prep and the bias ops), the embedding, the
 * row norms (rows held in registers and walked), the gated output norm (its backward writing y
 * again, bitwise), SwiGLU, the gates, cross-entropy, the gradient norm, the head packing, and the
 * short convolution's generic kernels with and without documents. Not here: the GEMMs (cuBLASLt)
 * and AdamW (its reference lives in the trainer's library). */
#define main test_gpu_ops_main
#include "tests/gpu/test_gpu_ops.c"
#undef main
int main(void) {
    for (int pi = 0; pi < 2; pi++) {
        P = pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32;
        BF = pi;
        TOL = BF ? 1e-2 : 1e-5;
        attention_layer_ops();
        test_embed(61, 17, 45);
        test_rmsnorm(77, 133);
        test_rmsnorm(70, 1024);
        test_rmsnorm(130, 256);
        test_rmsnorm(20, 512);
        test_l2norm(91, 64);
        test_l2norm(13, 37);
        test_l2norm(45, 256);
        test_gated(70, 96);
        test_gated(20, 512);
        test_gated(30, 256);
        test_gated(9, 1024);
        test_swiglu(7, 143);
        test_swiglu(8, 512);
        test_gates(300, 3, 1.0);
        test_gates(77, 6, 2.0);
        test_cross_entropy(19, 1007);
        test_grad_norm(100003);
        test_pack(37, 3, 32, 2, 32, 64, 0);
        test_pack(37, 3, 96, 2, 48, 64, 1);
        test_pack(7, 3, 36, 2, 36, 64, 0);
        test_conv_all(3, 21, 45, 3);
        test_conv_all(2, 40, 64, 4); /* the vector paths (W 4), dx also as a column block */
        test_conv_docs(6, 40, 13, 3);
        test_conv_docs(8, 7, 16, 4);
        test_conv_docs(2, 12, 13, 8);
    }
    printf("%s: %d failed comparisons\n", FAILS ? "FAIL" : "PASS", FAILS);
    return FAILS ? 1 : 0;
}
