/* Causal softmax attention on NVIDIA GPUs (sm_90): forward and backward, flash-style (tiled
 * online softmax on tensor cores; no T x T matrix is ever stored). On compute capability 9.0
 * the bf16 kernels are the warpgroup-MMA ones of model/cuda/sm90a/ (built for "90a"); the
 * per-warp mma.sync kernels of attention_fwd.cu / attention_bwd.cu run elsewhere and on request
 * (fwd_algo / bwd_algo 1).
 *
 * Layouts (row-major, D contiguous):
 *   q, o, d_o, dq: [B,T,H,D];  k, v, dk, dv: [B,Tk,Hkv,D] (Tk = T unless set);  lse: [B,H,T]
 *   (float).
 * Grouped-query heads: H % Hkv == 0 and query head h reads key/value head h / (H / Hkv), without
 * copies of K and V; dk and dv sum over the H / Hkv query heads of each group.
 *   o[b,t,h]  = sum_{s <= t} softmax_s(scale * q[b,t,h] . k[b,s,h/G]) v[b,s,h/G]
 *   lse[b,h,t] = log sum_{s <= t} exp(scale * q[b,t,h] . k[b,s,h/G])   (natural log)
 * scale 0 means 1/sqrt(D). D must be 64 or 128; B, T, H, Hkv are free (T any length >= 1).
 *
 * Queries after a prefix, and documents (sequence parallelism; packed documents): with Tk > T
 * the keys and values hold Tk rows per sequence ([B,Tk,Hkv,D], dk and dv too) and query t sits
 * at position Tk - T + t, so it sees keys s <= Tk - T + t. key_lo [B,T] (int, device, or NULL for
 * 0) raises the first key a query sees: query t sees keys key_lo[b,t] <= s <= Tk - T + t (the
 * start of its document). key_lo must be non-decreasing along t with key_lo[b,t] <= Tk - T + t
 * (every query sees at least its own key); the kernels rely on it and do not check it.
 *
 * Precisions (the type of q, k, v, o, d_o, dq, dk, dv; lse and the workspace are always float):
 *   GDN_CUDA_BF16: __nv_bfloat16 storage, bf16 tensor-core products (wgmma or mma.sync) with
 *                  fp32 accumulation; the softmax statistics, the running output and every
 *                  gradient accumulator are fp32; the probabilities and their gradients are
 *                  rounded to bf16 only as operands of the next product (as FlashAttention-2).
 *   GDN_CUDA_FP32: float storage and fp32 arithmetic throughout (simple kernels, one warp per
 *                  row: for tests and small shapes, not fast).
 *
 * Backward: Delta = rowsum(d_o * o) (one small kernel), then dk/dv in a kernel parallel over key
 * tiles (each block loops over the query heads of its group, so no atomics) and dq in a kernel
 * parallel over query tiles. Every sum runs in a fixed order: the results are the same bits on
 * every run. The exception is bwd_algo 2 (one wgmma kernel that adds dq with fp32 atomics).
 *
 * Every CUDA call is checked; on failure the process prints file:line and the CUDA error string
 * and exits with status 1. A bad shape or argument stops with a message naming the field. */
#ifndef GDN_ATTENTION_CUDA_H
#define GDN_ATTENTION_CUDA_H

#include <stddef.h>

#include "model/cuda/delta_cuda.h" /* gdn_cuda_precision */

#ifdef __cplusplus
extern "C" {
#endif

/* Device pointers; asynchronous on `stream` (a cudaStream_t, or NULL). Element pointers must be
 * 16-byte aligned (cudaMalloc'd buffers are). Outputs are overwritten. */
typedef struct {
    int B, T, H, Hkv, D;
    int Tk;                       /* keys per sequence, >= T; 0: T (see above) */
    const int *key_lo;            /* [B,T] first key of each query, or NULL (see above); the host
                                     wrappers take a host array */
    float scale;                  /* 0: 1/sqrt(D) */
    gdn_cuda_precision precision;
    const void *q;                /* [B,T,H,D]   in */
    const void *k;                /* [B,T,Hkv,D] in */
    const void *v;                /* [B,T,Hkv,D] in */
    void *o;                      /* [B,T,H,D]   forward: out; backward: in */
    float *lse;                   /* [B,H,T]     forward: out; backward: in */
    const void *d_o;              /* [B,T,H,D]   backward: in */
    void *dq;                     /* [B,T,H,D]   backward: out */
    void *dk;                     /* [B,T,Hkv,D] backward: out */
    void *dv;                     /* [B,T,Hkv,D] backward: out */
    void *workspace;              /* backward: gdn_cuda_attention_workspace_bytes() bytes */
    void *stream;
    int warps;                    /* bf16 kernels: warps per block, 4 or 8 (16 rows each), or 0
                                     for the default (4); a tuning knob, same results up to the
                                     order of fp32 sums (each choice is bitwise repeatable) */
    int fwd_algo;                 /* bf16 forward kernel: 0 the fastest this GPU runs (on
                                     compute capability 9.0: 3; elsewhere mma.sync), 1 mma.sync,
                                     2 wgmma with cp.async loads, 3 wgmma warp-specialised (a
                                     producer warpgroup streams tiles by TMA; the consumer
                                     warpgroups take turns on the tensor cores), 4 the same
                                     without turns. 2-4 stop with a message where wgmma is not
                                     available; 3 and 4 run 2 where q, k or v is not 16-byte
                                     aligned. 2, 3 and 4 give the same bits */
    int bwd_algo;                 /* bf16 backward: 0 the fastest bitwise repeatable kernels
                                     this GPU runs (on compute capability 9.0: the kernels
                                     of 4; elsewhere mma.sync), 1 mma.sync, 2 wgmma in one kernel with atomic
                                     fp32 dQ sums (dq repeatable to rounding only), 3 wgmma
                                     dK/dV and dQ kernels, warp-specialised with turns, 4 without
                                     turns, 5 the same two with cp.async loads. 2-5 stop with a
                                     message where wgmma is not available; 3 and 4 run the
                                     kernels of 5 where a tensor is not 16-byte aligned (dK/dV:
                                     also where T is not a multiple of 4).
                                     3, 4 and 5 give the same bits */
} gdn_cuda_attention_args;

/* Dies with a message naming the field when the shape or a pointer of `a` is unusable
 * (backward = 1 also checks the backward's pointers). */
void gdn_cuda_attention_check(const gdn_cuda_attention_args *a, int backward);

/* Bytes of device scratch the backward needs (Delta, B*H*T floats; with bwd_algo 2 also the fp32
 * dQ accumulator, B*T*H*D floats); not shared between concurrent calls. */
size_t gdn_cuda_attention_workspace_bytes(const gdn_cuda_attention_args *a);

/* 1 when the current device is compute capability 9.0 and this binary carries its wgmma
 * (sm_90a) kernels (probed once, then cached), else 0. */
int gdn_cuda_attention_sm90a_available(void);

/* Forward: writes o and lse. */
void gdn_cuda_attention_fwd(const gdn_cuda_attention_args *a);
/* Backward: reads q, k, v, o, lse (from the forward on the same inputs), d_o; writes dq, dk, dv. */
void gdn_cuda_attention_bwd(const gdn_cuda_attention_args *a);

/* ---- host convenience: HOST float arrays, same layouts. Copies in (rounding to bf16 in BF16
 * mode), runs, copies out (widening bf16 to float). Synchronous. For tests and `gdn op`.
 * `a` supplies the shape, scale, precision and warps; its pointers are ignored. The backward
 * runs the forward first (o, lse are not inputs) and also returns them where o / lse are not
 * NULL; lse may be NULL in the forward too. */
void gdn_cuda_attention_fwd_host(const gdn_cuda_attention_args *a, const float *q, const float *k,
                                 const float *v, float *o, float *lse);
void gdn_cuda_attention_bwd_host(const gdn_cuda_attention_args *a, const float *q, const float *k,
                                 const float *v, const float *d_o, float *o, float *lse, float *dq,
                                 float *dk, float *dv);

/* ---- timing: forward and forward+backward on random inputs (bf16 or fp32), CUDA events,
 * `warmup` untimed runs then the median of `repeats`. */
typedef struct {
    double fwd_ms, fwdbwd_ms, bwd_ms; /* bwd_ms: the backward alone */
} gdn_cuda_attention_timing;
void gdn_cuda_attention_time(const gdn_cuda_attention_args *shape, int warmup, int repeats,
                             gdn_cuda_attention_timing *out);

#ifdef __cplusplus
}
#endif

#endif
