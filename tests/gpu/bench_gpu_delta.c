/* Timing of the CUDA gated delta rule at the shapes of docs/design.md section 9 (bf16): forward,
 * forward+backward (the backward recomputing the forward intermediates, and reusing them),
 * medians of repeats with CUDA events after warm-up, and each kernel phase alone. Prints one
 * table. Also the 512M model's delta layer (6 heads of K 256, V 512, each split into 2 value
 * heads of 256 columns) twice: with its own q/k per value head (the packed copies) and with the
 * 2 value heads of a head sharing one q/k head (qk_heads 6, no copies). Then each mixer kind
 * (model/mixer.h, docs/design.md section 2.6) at the first shape. Exit 77 without a CUDA device.
 * Documents (docs/design.md section 3.8): the first shape with 64 documents per row (random
 * lengths, starts mostly inside chunks) against the same shape as one sequence per row, and the
 * cost of the resets as the ratio (target: within 5%).
 * Usage: bench_gpu_delta [repeats [B T H D [warmup [qk_heads]]]]  (one shape; warmup 0 for
 * profilers); bench_gpu_delta --docs [repeats]: the documents case only. */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include <string.h>

#include "model/cpu/doc.h"
#include "model/cuda/delta_cuda.h"
#include "model/mixer.h"

/* Times shape s packed with ndocs documents per row (starts drawn by a fixed generator, the
 * first at 0) against s as one sequence per row; prints both and the ratio. */
static void bench_docs(const gdn_delta_shape *s, int ndocs, int warmup, int repeats) {
    unsigned char *st = calloc((size_t)s->B * s->T, 1);
    int *doc = malloc((size_t)s->B * s->T * sizeof(int));
    if (!st || !doc) {
        fprintf(stderr, "bench_gpu_delta: out of memory\n");
        exit(1);
    }
    unsigned long long x = 88172645463325252ull;
    for (int b = 0; b < s->B; b++) {
        st[(size_t)b * s->T] = 1;
        for (int n = 1; n < ndocs;) { /* ndocs distinct starts per row */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            const size_t i = (size_t)b * s->T + (size_t)(x % (unsigned long long)s->T);
            if (!st[i]) {
                st[i] = 1;
                n++;
            }
        }
    }
    gdn_doc_build(doc, st, NULL, s->B, s->T);
    gdn_delta_shape sd = *s;
    sd.doc = doc;
    gdn_cuda_delta_timing one, packed;
    gdn_cuda_delta_time(s, GDN_CUDA_BF16, warmup, repeats, &one);
    gdn_cuda_delta_time(&sd, GDN_CUDA_BF16, warmup, repeats, &packed);
    printf("\ndocuments at B%d T%d H%d D%d (CUDA bf16, median of %d)\n", s->B, s->T, s->H, s->K,
           repeats);
    printf("%-28s %9s %9s %9s\n", "", "fwd ms", "f+b ms", "f+b saved");
    printf("%-28s %9.3f %9.3f %9.3f\n", "one sequence per row", one.fwd_ms, one.fwdbwd_ms,
           one.fwdbwd_saved_ms);
    char name[48];
    snprintf(name, sizeof name, "%d documents per row", ndocs);
    printf("%-28s %9.3f %9.3f %9.3f\n", name, packed.fwd_ms, packed.fwdbwd_ms,
           packed.fwdbwd_saved_ms);
    printf("%-28s %9.3f %9.3f %9.3f   (target <= 1.05)\n", "ratio", packed.fwd_ms / one.fwd_ms,
           packed.fwdbwd_ms / one.fwdbwd_ms, packed.fwdbwd_saved_ms / one.fwdbwd_saved_ms);
    free(st);
    free(doc);
}

int main(int argc, char **argv) {
    if (gdn_cuda_device_count() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const gdn_delta_shape docs_shape = {4, 4096, 16, 128, 128, 64, 0, GDN_MIXER_G, NULL};
    if (argc > 1 && strcmp(argv[1], "--docs") == 0) {
        bench_docs(&docs_shape, 64, 5, argc > 2 ? atoi(argv[2]) : 20);
        return 0;
    }
    const int repeats = argc > 1 ? atoi(argv[1]) : 20;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        fprintf(stderr, "bench_gpu_delta: cudaGetDeviceProperties failed\n");
        return 1;
    }
    enum { NSHAPES = 5 };
    gdn_delta_shape shapes[NSHAPES] = {
        {4, 4096, 16, 128, 128, 64, 0, GDN_MIXER_G, NULL},
        {2, 16384, 16, 128, 128, 64, 0, GDN_MIXER_G, NULL},
        {1, 8192, 96, 128, 128, 64, 0, GDN_MIXER_G, NULL},
        {16, 2048, 12, 256, 256, 64, 0, GDN_MIXER_G, NULL}, /* 512M layer, q/k copied per value head */
        {16, 2048, 12, 256, 256, 64, 6, GDN_MIXER_G, NULL}, /* 512M layer, 2 value heads per q/k head */
    };
    int n = NSHAPES, warmup = 5;
    if (argc >= 6) {
        const int D = atoi(argv[5]);
        gdn_delta_shape one = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), D, D, 64,
                               argc >= 8 ? atoi(argv[7]) : 0, GDN_MIXER_G, NULL};
        shapes[0] = one;
        n = 1;
        if (argc >= 7) warmup = atoi(argv[6]);
    }
    gdn_cuda_delta_timing tm[NSHAPES];
    for (int i = 0; i < n; i++) gdn_cuda_delta_time(&shapes[i], GDN_CUDA_BF16, warmup, repeats, &tm[i]);

    printf("\ngated delta rule, CUDA bf16, %s (%d SMs), median of %d\n", prop.name,
           prop.multiProcessorCount, repeats);
    printf("%-28s %9s %9s %9s", "shape", "fwd ms", "f+b ms", "f+b saved");
    for (int p = 0; p < GDN_CUDA_PHASES; p++) printf(" %9s", gdn_cuda_delta_phase_name(p));
    printf("\n");
    for (int i = 0; i < n; i++) {
        char name[64], qk[24] = "";
        if (shapes[i].qk_heads > 0 && shapes[i].qk_heads != shapes[i].H)
            snprintf(qk, sizeof qk, " qk%d", shapes[i].qk_heads);
        snprintf(name, sizeof name, "B%d T%d H%d D%d%s", shapes[i].B, shapes[i].T, shapes[i].H,
                 shapes[i].K, qk);
        printf("%-28s %9.3f %9.3f %9.3f", name, tm[i].fwd_ms, tm[i].fwdbwd_ms, tm[i].fwdbwd_saved_ms);
        for (int p = 0; p < GDN_CUDA_PHASES; p++) printf(" %9.3f", tm[i].phase_ms[p]);
        printf("\n");
    }
    if (n == NSHAPES) {
        const gdn_delta_shape *s0 = &shapes[0];
        printf("\nmixer kinds at B%d T%d H%d D%d (CUDA bf16, median of %d)\n", s0->B, s0->T, s0->H,
               s0->K, repeats);
        printf("%-28s %9s %9s %9s\n", "kind", "fwd ms", "f+b ms", "f+b saved");
        for (int v = 0; v < GDN_MIXER_DELTA_COUNT; v++) {
            gdn_delta_shape s = *s0;
            s.variant = v;
            gdn_cuda_delta_timing t;
            gdn_cuda_delta_time(&s, GDN_CUDA_BF16, warmup, repeats, &t);
            printf("%c %-26s %9.3f %9.3f %9.3f\n", gdn_mixer_get(v)->kind, gdn_mixer_get(v)->name,
                   t.fwd_ms, t.fwdbwd_ms, t.fwdbwd_saved_ms);
        }
        bench_docs(&docs_shape, 64, warmup, repeats);
    }
    return 0;
}
