/* The gated delta rule on NVIDIA GPUs (sm_90): chunked forward and backward (docs/design.md section 3.6, section 4.2),
 * for every mixer of the family (section 2.6, shape.variant).
 *
 * Same math, layouts and NULL conventions as gdn_delta_fwd_f32 / gdn_delta_bwd_f32 in
 * model/cpu/ops_cpu_decl.h, with Hq = s->qk_heads (or H where it is 0):
 *   q, k, dq, dk: [B,T,Hq,K]; v, o, dv: [B,T,H,V]; g, beta, dg, dbeta: [B,T,H];
 *   states h0, ht, dht, dh0: [B,H,K,V].
 * Grouped value heads: where Hq < H (H % Hq == 0), value head h reads q, k head h / (H / Hq),
 * so that several value heads share one q/k head without copies; dq and dk are then summed over
 * the H / Hq value heads of each group (in fp32, in a fixed order, rounded once: the same bits
 * on every run). The result equals the H-head op on q, k with each q/k head repeated H / Hq
 * times, with dq, dk summed over the repeats. Where Hq == H nothing changes.
 * The GPU path always uses chunk 64 internally (the result does not depend on the chunk size up
 * to rounding), so s->chunk is ignored. K and V must be 64, 128 or 256; T and B*H are free.
 *
 * Precisions:
 *   GDN_CUDA_FP32: every tensor and every product in fp32 (relative error vs fp64 ~1e-6).
 *   GDN_CUDA_BF16: q, k, v, o and dq, dk, dv, d_o stored as bf16 (__nv_bfloat16); products take
 *                  bf16 operands and accumulate in fp32; g, beta, dg, dbeta, the gate cumulative
 *                  sums, the running state of the state passes (and h0, ht, dht, dh0, the state
 *                  carried between the forward's two halves) stay fp32, and the triangular
 *                  inverse is computed in fp32. What the per-chunk kernels hand each other
 *                  through the workspace as tensor-core operands is stored in bf16, as in the
 *                  open-source Triton kernels: T, W, U, v_new, the per-chunk states h and their
 *                  gradients dh, D (relative error ~5e-3).
 * In both precisions g, beta, dg, dbeta, h0, ht, dht, dh0 are float arrays.
 *
 * Every CUDA call is checked; on failure the process prints file:line and the CUDA error string
 * and exits with status 1. */
#ifndef GDN_DELTA_CUDA_H
#define GDN_DELTA_CUDA_H

#include <stddef.h>

#include "model/cpu/ops_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GDN_CUDA_FP32 = 0, GDN_CUDA_BF16 = 1 } gdn_cuda_precision;

/* Number of CUDA devices usable by this process (0 when there is no driver or no GPU). */
int gdn_cuda_device_count(void);

/* Dies with a message naming the offending field when the shape is not supported. */
void gdn_cuda_delta_check_shape(const gdn_delta_shape *s);

/* Bytes of device scratch memory that gdn_cuda_delta_fwd / _bwd need for this shape (with
 * grouped value heads 8*B*T*H*K bytes more: the backward's fp32 per-value-head dq, dk). */
size_t gdn_cuda_delta_workspace_bytes(const gdn_delta_shape *s, gdn_cuda_precision p);

/* ---- the arguments of a call ----------------------------------------------------------------
 * shape.variant picks the mixer (model/mixer.h; docs/design.md section 2.6): G the gated delta
 * rule, D without decay, M without the delta term (S_t = exp(g_t) S_{t-1} + k_t v_t^T), L with
 * neither. An input the variant ignores (g for D and L, beta for M and L) is not read and may be
 * NULL; an input it reads must not be NULL. */
typedef struct {
    gdn_delta_shape shape;
    gdn_cuda_precision prec;
    const void *q;    /* [B,T,Hq,K] */
    const void *k;    /* [B,T,Hq,K] */
    const void *v;    /* [B,T,H,V] */
    const float *g;   /* [B,T,H] log decay (G, M) */
    const float *beta; /* [B,T,H] write strength (G, D) */
    float scale;
    const float *h0;  /* [B,H,K,V] entering state, or NULL (zero) */
    void *workspace;  /* gdn_cuda_delta_workspace_bytes(&shape, prec) bytes; unused by _host */
    void *stream;     /* cudaStream_t or NULL; unused by _host */
    /* Documents packed into the rows (docs/design.md section 3.8): doc [B,T] int device array
     * (a host array for the _host calls), doc[b,t] == t where row b starts a document at t, in
     * the form of model/cpu/doc.h (gdn_doc_build); NULL: none, the kernels run exactly as
     * without documents. The state is zero at every start whatever enters (h0 reaches only the
     * rows before a row's first start), ht is the state of a row's last document, dh0 the
     * gradient reaching the row's entry through the rows before its first start. shape.doc
     * (the CPU kernels' host pointer) must be NULL: the CUDA calls read this one. */
    const int *doc;
} gdn_cuda_delta_in;

typedef struct {
    gdn_cuda_delta_in in;
    void *h0_ready; /* cudaEvent_t or NULL, see below; unused by _host */
    void *o;        /* [B,T,H,V] */
    float *ht;      /* [B,H,K,V] leaving state, or NULL */
} gdn_cuda_delta_fwd_args;

typedef struct {
    gdn_cuda_delta_in in; /* the forward's inputs */
    const void *d_o;      /* [B,T,H,V] */
    const float *dht;     /* [B,H,K,V] gradient of ht, or NULL (zero) */
    void *dht_ready;      /* cudaEvent_t or NULL, see below; unused by _host */
    void *dq, *dk;        /* [B,T,Hq,K] */
    void *dv;             /* [B,T,H,V] */
    float *dg, *dbeta;    /* [B,T,H] or NULL; zeros where the variant ignores g / beta */
    float *dh0;           /* [B,H,K,V] or NULL */
} gdn_cuda_delta_bwd_args;

/* ---- device-pointer launchers (asynchronous on in.stream) ------------------------------------
 * q, k, v, o, d_o, dq, dk, dv point to float (FP32) or __nv_bfloat16 (BF16) device arrays; the
 * rest are float device arrays. The workspace is not shared between concurrent calls. Outputs
 * are overwritten.
 * Internally the calls fork part of their work onto a second (high-priority) stream of the
 * current device and join it back into the stream before returning, so ordering against other
 * work on the stream is as for a single kernel; calls for one device should come from one host
 * thread at a time.
 * A late state: where h0 (forward) or dht (backward) is filled by work outside the stream,
 * h0_ready / dht_ready is a cudaEvent_t recorded after that fill (NULL: the fill is ordered on
 * the stream). Only the state pass that reads it waits, so the kernels that do not need it run
 * while it arrives (forward: the intra-chunk kernels of every chunk; backward: the recomputed
 * intra-chunk kernels, the local dv_new, the recomputed forward state pass and the D^T kernel).
 * For sequence parallelism: the state that crosses a segment boundary from another GPU overlaps
 * this work. The event is waited for before the call returns (its current record counts; it may
 * be recorded again afterwards). */
void gdn_cuda_delta_fwd(const gdn_cuda_delta_fwd_args *a);

/* Backward of gdn_cuda_delta_fwd; recomputes the forward intermediates it needs. */
void gdn_cuda_delta_bwd(const gdn_cuda_delta_bwd_args *a);

/* The same backward when the workspace still holds the intermediates of a gdn_cuda_delta_fwd call
 * on the same shape, precision and inputs (q, k, v, g, beta, h0), made since with this
 * workspace: it skips recomputing them (about a third of the backward's time) at the price of
 * keeping the workspace alive between the two calls. */
void gdn_cuda_delta_bwd_saved(const gdn_cuda_delta_bwd_args *a);

/* ---- host convenience: HOST float arrays in and out, exactly the CPU semantics --------------
 * Every pointer of the arguments is a host float array (q, k, dq, dk with Hq heads); workspace,
 * stream and the ready events are not used. Copies the inputs to the device (rounding q, k, v,
 * d_o to bf16 in BF16 mode), runs, copies the results back (widening bf16 to float).
 * Synchronous. For tests and the `gdn op` command. */
void gdn_cuda_delta_fwd_host(const gdn_cuda_delta_fwd_args *a);
void gdn_cuda_delta_bwd_host(const gdn_cuda_delta_bwd_args *a);

/* ---- timing ---------------------------------------------------------------------------------
 * Times forward and forward+backward at shape s on random inputs (with h0 and dht; with s->doc,
 * a HOST doc array [B,T] as gdn_cuda_delta_in.doc, timed with those documents), with CUDA
 * events: `warmup` untimed runs, then the median of `repeats` timed runs. Also times each
 * kernel phase on its own (median) so the slowest one can be found. The backward runs the
 * reverse state pass on a second stream beside the recomputed forward state pass and the D^T
 * kernel (they are independent), so its time is less than the sum of its phases. */
enum {
    GDN_CUDA_PHASE_INTRA,      /* gate cumsum, A, T = (I+A)^-1, W, U (per chunk) */
    GDN_CUDA_PHASE_STATE_FWD,  /* sequential state pass: h per chunk, v_new */
    GDN_CUDA_PHASE_OUTPUT,     /* o (per chunk) */
    GDN_CUDA_PHASE_DV_LOCAL,   /* intra-chunk part of dv_new (per chunk) */
    GDN_CUDA_PHASE_STATE_BWD,  /* reverse state pass: dh per chunk, dv_new, dh0 */
    GDN_CUDA_PHASE_DT,         /* D^T and the intra-chunk gate term (per chunk; overlaps the
                                  reverse state pass) */
    GDN_CUDA_PHASE_GRAD,       /* dq, dk, dv, dbeta, dg incl. the WY backward (per chunk), and
                                  with grouped value heads the group sum of dq, dk */
    GDN_CUDA_PHASES
};
typedef struct {
    double fwd_ms;                    /* forward */
    double fwdbwd_ms;                 /* forward followed by backward (which recomputes) */
    double fwdbwd_saved_ms;           /* forward then gdn_cuda_delta_bwd_saved */
    double phase_ms[GDN_CUDA_PHASES]; /* each kernel alone */
} gdn_cuda_delta_timing;

/* Returns the name of a phase (for tables). */
const char *gdn_cuda_delta_phase_name(int phase);
void gdn_cuda_delta_time(const gdn_delta_shape *s, gdn_cuda_precision p, int warmup, int repeats,
                         gdn_cuda_delta_timing *out);

#ifdef __cplusplus
}
#endif

#endif
