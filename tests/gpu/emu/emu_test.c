/* The GPU attention test's cases run on the CPU emulator (see run.sh): the test's own fp64
 * reference and checks (its main renamed), on shapes small enough to emulate: T 1, 17, 33, 64, 70,
 * 129, 200 (below, at and past the 32/64-row tiles), D 64 and 128, H = Hkv and grouped-query
 * heads 2:1 and 4:1, the default and a given scale, queries after a prefix of keys and
 * documents (key_lo), both precisions.
 * Usage: emu_test [first [end]] (case indices). */
#define main test_main
#include "tests/gpu/test_gpu_attention.c"
#undef main
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    const att_case cs[] = {
        {1, 1, 2, 2, 64, 0, 0, 0}, {2, 17, 4, 1, 64, 0, 0, 0}, {1, 64, 2, 2, 128, 0, 0, 0},
        {1, 129, 4, 1, 64, 0, 0, 0}, {1, 129, 2, 2, 128, 0, 0, 0}, {1, 70, 4, 2, 128, 0.5f, 0, 0},
        {1, 33, 2, 2, 128, 0, 0, 0}, {1, 200, 4, 2, 64, 0, 0, 0},
        /* queries after a prefix, documents, both */
        {2, 40, 4, 2, 64, 0, 170, 0}, {1, 129, 2, 1, 128, 0, 0, 4}, {1, 70, 2, 2, 64, 0, 200, 5},
    };
    int i0 = argc > 1 ? atoi(argv[1]) : 0, n = argc > 2 ? atoi(argv[2]) : (int)(sizeof cs / sizeof cs[0]);
    for (int i = i0; i < n; i++) check_case(&cs[i]);
    if (argc <= 1) {
        const att_case hw = {1, 70, 4, 2, 64, 0, 0, 0};
        check_host_wrappers(&hw, GDN_CUDA_BF16);
    }
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
