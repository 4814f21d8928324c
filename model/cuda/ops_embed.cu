/* Token embedding lookup and its deterministic backward: positions are grouped by token on the
 * host (a stable counting sort), and one thread owns each (token, column) of the table gradient,
 * adding that token's rows in ascending position order, exactly as the CPU does. No atomics. */
#include <stdlib.h>
#include <string.h>

#include "model/cuda/ops_util.cuh"

#define EMBED_THREADS 128

__global__ void k_embed_fwd(float *out, const int *tokens, const float *table, int D) {
    const size_t n = blockIdx.x;
    const float *src = table + (size_t)tokens[n] * D;
    float *dst = out + n * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) dst[c] = src[c];
}

/* grid (groups, column tiles) */
__global__ void k_embed_bwd(float *dtable, const int *perm, const int *seg_start, const int *seg_token,
                            const float *dout, int D) {
    const int g = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= D) return;
    float *dst = dtable + (size_t)seg_token[g] * D + c;
    float acc = *dst;
    for (int i = seg_start[g]; i < seg_start[g + 1]; i++) acc += dout[(size_t)perm[i] * D + c];
    *dst = acc;
}

extern "C" void gdn_cuda_embed_fwd(float *out, const int *tokens, const float *table, int N, int D,
                                   void *stream) {
    if (N <= 0 || D <= 0) return;
    k_embed_fwd<<<N, EMBED_THREADS, 0, OPS_STREAM(stream)>>>(out, tokens, table, D);
    GDN_CUDA_CHECK_LAUNCH();
}

extern "C" int gdn_cuda_embed_plan(const int *tokens, int N, int vocab, int *perm, int *seg_start,
                                   int *seg_token) {
    int *count = (int *)calloc((size_t)vocab + 1, sizeof(int));
    if (!count) GDN_CUDA_DIE("out of host memory planning the embedding backward (vocab %d)", vocab);
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= vocab) {
            free(count);
            GDN_CUDA_DIE("embedding: token id %d at position %d is outside the vocabulary [0, %d)",
                         tokens[n], n, vocab);
        }
        count[tokens[n] + 1]++;
    }
    for (int v = 0; v < vocab; v++) count[v + 1] += count[v]; /* count[v]: first slot of token v */
    int n_seg = 0;
    for (int v = 0; v < vocab; v++)
        if (count[v + 1] > count[v]) {
            seg_start[n_seg] = count[v];
            seg_token[n_seg] = v;
            n_seg++;
        }
    seg_start[n_seg] = N;
    for (int n = 0; n < N; n++) perm[count[tokens[n]]++] = n; /* ascending n within a token */
    free(count);
    return n_seg;
}

extern "C" void gdn_cuda_embed_bwd(float *dtable, const int *perm, const int *seg_start,
                                   const int *seg_token, int n_seg, const float *dout, int D,
                                   void *stream) {
    if (n_seg <= 0 || D <= 0) return;
    dim3 grid((unsigned)n_seg, (unsigned)((D + EMBED_THREADS - 1) / EMBED_THREADS));
    k_embed_bwd<<<grid, EMBED_THREADS, 0, OPS_STREAM(stream)>>>(dtable, perm, seg_start, seg_token, dout, D);
    GDN_CUDA_CHECK_LAUNCH();
}
