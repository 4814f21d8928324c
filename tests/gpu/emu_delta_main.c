/* Small cases of tests/gpu/test_gpu_delta.c on the CPU emulator (see emu_delta.sh): every mixer
 * kind in both precisions, host and device paths, with and without documents, and a packed row
 * against its documents one by one, with the test's own comparisons and limits; the gated delta
 * rule also at K = V = 128 and with grouped value heads.
 * Usage: emu_delta [fp32|bf16] (default both). */
#define main test_gpu_delta_main
#include "tests/gpu/test_gpu_delta.c"
#undef main

static const gpu_case emu_plain = {1, 70, 1, 64, 64, 1, 1, -0.2, "emulator, no documents", 0};
/* the gated delta rule alone: K = V = 128 (the state passes' 128-row tiles), and two value heads
 * reading one q/k head (the gradient kernel's per-value-head parts and their group sum) */
static const gpu_case emu_k128 = {1, 130, 1, 128, 128, 1, 1, -0.2, "emulator, K=V=128", 0};
static const gpu_case emu_gva = {1, 100, 2, 64, 64, 1, 1, -0.2, "emulator, GVA 2 per q/k head", 1};
static const int emu_starts[] = {1, 2, 30, 64, 65, 100, 129, -1}; /* h0 enters row 0 */
static const doc_case emu_docs = {{2, 130, 1, 64, 64, 1, 1, -0.2, "emulator, documents", 0}, emu_starts, 0};
static const int emu_packed[] = {64, 64, 20, 0}; /* on the same chunks alone: equal as floats */
static const int emu_packed_free[] = {5, 1, 40, 30, 0};

int main(int argc, char **argv) {
    int fails = 0;
    for (int pi = 0; pi < 2; pi++) {
        if (argc > 1 && strcmp(argv[1], pi ? "bf16" : "fp32")) continue;
        const gdn_cuda_precision p = pi ? GDN_CUDA_BF16 : GDN_CUDA_FP32;
        for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) {
            fails += run_case(&emu_plain, v, p, 300, 0);
            fails += doc_run(&emu_docs, v, p, 310, 0);
            fails += doc_run(&emu_docs, v, p, 320, 1);
            fails += packed_case(emu_packed, 1, 64, 64, v, p, 0, 330);
            if (!pi) fails += packed_case(emu_packed_free, 1, 64, 64, v, p, 1e-4, 340);
        }
        fails += run_case(&emu_k128, GDN_MIXER_G, p, 350, 0);
        fails += run_case(&emu_gva, GDN_MIXER_G, p, 360, 1);
    }
    printf("%s: %d failed comparisons\n", fails ? "FAIL" : "PASS", fails);
    return fails != 0;
}
