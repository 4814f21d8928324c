/* Timing of the CUDA causal attention (bf16): forward, backward and forward+backward, medians of
 * repeats with CUDA events after warm-up, at the shapes (B4 T4096 H16 D128 and
 * B2 T16384 H16 D128) and a few neighbours (grouped-query heads, head dim 64). The rate counts
 * the causal half of the products: forward 4*B*H*T*T*D/2 flops, backward 2.5 times that. Each
 * shape runs with both block shapes of the bf16 kernels (4 and 8 warps per block; column w).
 * PyTorch's SDPA at the same shapes: tests/gpu/bench_sdpa.py (run beside it by tests/gpu/run.sh).
 * Exit 77 without a CUDA device.
 * Usage: bench_attention [repeats [B T H Hkv D [warmup]]]  (one shape; warmup 0 for profilers) */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "model/cuda/attention_cuda.h"
#include "tests/gpu/attention_case.h"

int main(int argc, char **argv) {
    if (gdn_cuda_device_count() == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const int repeats = argc > 1 ? atoi(argv[1]) : 20;
    int warmup = 3;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        fprintf(stderr, "bench_attention: cudaGetDeviceProperties failed\n");
        return 1;
    }
    att_case shapes[] = {
        {4, 4096, 16, 16, 128, 0, 0, 0},
        {2, 16384, 16, 16, 128, 0, 0, 0},
        {4, 4096, 16, 4, 128, 0, 0, 0},
        {4, 4096, 16, 16, 64, 0, 0, 0},
    };
    int n = (int)(sizeof shapes / sizeof shapes[0]);
    if (argc >= 7) {
        const att_case one = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), 0, 0, 0};
        shapes[0] = one;
        n = 1;
        if (argc >= 8) warmup = atoi(argv[7]);
    }
    if (repeats < 1) {
        fprintf(stderr, "bench_attention: repeats must be >= 1\n");
        return 1;
    }
    printf("causal attention, CUDA bf16, %s (%d SMs), median of %d after %d warm-up\n", prop.name,
           prop.multiProcessorCount, repeats, warmup);
    printf("%-26s %2s %9s %9s %9s %9s %9s\n", "shape", "w", "fwd ms", "bwd ms", "f+b ms", "fwd TF/s", "f+b TF/s");
    /* per shape: the mma.sync kernels with 4 and 8 warps per block (w 4, 8); on compute capability
     * 9.0 the wgmma kernels: with cp.async loads ("cp": fwd_algo 2, bwd_algo 5), the backward with
     * atomic dQ sums ("at"), warp-specialised with the warpgroups taking turns ("ws": 3, 3) and
     * without ("wn": 4, 4), and the defaults ("df": 0, 0, what the model runs) */
    static const char *const names[] = {"4", "8", "cp", "at", "ws", "wn", "df"};
    static const int fwd[] = {1, 1, 2, 2, 3, 4, 0}, bwd[] = {1, 1, 5, 2, 3, 4, 0};
    const int variants = gdn_cuda_attention_sm90a_available() ? 7 : 2;
    for (int i = 0; i < n; i++)
        for (int variant = 0; variant < variants; variant++) {
            const int w = variant == 1 ? 8 : 4;
            const att_case *s = &shapes[i];
            gdn_cuda_attention_args a = att_args(s, GDN_CUDA_BF16, w);
            a.fwd_algo = fwd[variant];
            a.bwd_algo = bwd[variant];
            gdn_cuda_attention_timing tm;
            gdn_cuda_attention_time(&a, warmup, repeats, &tm);
            const double fl = 2.0 * s->B * s->H * (double)s->T * s->T * s->D; /* causal forward */
            char name[64];
            snprintf(name, sizeof name, "B%d T%d H%d Hkv%d D%d", s->B, s->T, s->H, s->Hkv, s->D);
            printf("%-26s %2s %9.3f %9.3f %9.3f %9.1f %9.1f\n", name, names[variant], tm.fwd_ms, tm.bwd_ms, tm.fwdbwd_ms,
                   fl / (tm.fwd_ms * 1e9), 3.5 * fl / (tm.fwdbwd_ms * 1e9));
        }
    return 0;
}
