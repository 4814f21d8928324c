/* The model's operators on NVIDIA GPUs, all but the gated delta rule (model/cuda/delta_cuda.h):
 * embedding, linear layers (cuBLASLt), norms, short convolution, activations and gates, fused
 * softmax cross-entropy, AdamW, gradient norm and clipping.
 *
 * Same math and the same overwrite/accumulate rules as the CPU contract in
 * model/cpu/ops_cpu_decl.h, on DEVICE pointers, asynchronous on `stream` (a cudaStream_t, or
 * NULL for the default stream). Differences from the CPU contract are named at each op.
 *
 * Element types. A tensor documented as `act` is float in GDN_CUDA_FP32 mode and __nv_bfloat16
 * in GDN_CUDA_BF16 mode (activations and matrix-product inputs, docs/design.md section 4.2); everything typed
 * float is fp32 in both modes (the residual stream, norm statistics, gates, every parameter and
 * parameter gradient). Arithmetic is fp32 throughout; sums over many terms that must not depend
 * on the launch (parameter gradients, the gradient norm, the loss) are reduced in a fixed order,
 * so every op gives bitwise the same result run after run.
 *
 * Workspaces: ops that reduce over rows take `ws`, device scratch of the size the matching
 * *_workspace() function returns; it must not be shared with an op running concurrently. */
#ifndef GDN_OPS_CUDA_H
#define GDN_OPS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "model/adamw_hparams.h"
#include "model/cuda/delta_cuda.h" /* gdn_cuda_precision */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element conversion ---------------------------------------------------------------------- */
/* Bytes of one `act` element: 4 (FP32) or 2 (BF16). */
size_t gdn_cuda_act_bytes(gdn_cuda_precision p);
/* dst[n] (act) = src[n] (float), rounded to nearest even in BF16 mode. */
void gdn_cuda_to_act(gdn_cuda_precision p, void *dst, const float *src, size_t n, void *stream);
/* dst[n] (float) = src[n] (act). */
void gdn_cuda_from_act(gdn_cuda_precision p, float *dst, const void *src, size_t n, void *stream);
/* dst[n] = value (e.g. NaN to poison an output before a test). */
void gdn_cuda_fill_f32(float *dst, float value, size_t n, void *stream);
/* dst[b * dst_stride + r * ldd + c] += src[(b * rows + r) * C + c] for b < B, r < rows, c < C (act;
 * the sum in fp32, one rounding): e.g. the gradient of each sequence's last rows arriving from the
 * next segment, added to rows ldd apart. */
void gdn_cuda_add_strided(gdn_cuda_precision p, void *dst, size_t dst_stride, size_t ldd, const void *src,
                          size_t C, size_t rows, int B, void *stream);

/* ---- linear layers: y = x W^T with W [out, in] (cuBLASLt, fp32 accumulation) ----------------
 * x, W and dy share the input type `in` (act): fp32 GEMMs in FP32 mode (no TF32), bf16 tensor-core
 * GEMMs in BF16 mode. Outputs y and dx have the type `out_p` (FP32: float, BF16: bf16) chosen per
 * call, so a GEMM can write straight into an fp32 buffer. `beta` 0 overwrites y / dx, 1 adds to
 * them (a residual connection, or a sum of several products). dW is always float and += .
 * The gdn_cuda_blas object caches one algorithm per call shape (types, sizes, pointer alignment),
 * so repeated calls give bitwise the same result; it is not for concurrent use from several host
 * threads. */
typedef struct gdn_cuda_blas gdn_cuda_blas;
/* cuBLASLt is opened at the first gdn_cuda_blas_create (model/cuda/cublaslt_load.cu). This opens
 * it as that would, without a GPU: 0 and the path that opened, or -1 and every path's reason. */
int gdn_cuda_cublaslt_probe(char *path, size_t path_len, char *err, size_t err_len);
gdn_cuda_blas *gdn_cuda_blas_create(void *stream);
void gdn_cuda_blas_free(gdn_cuda_blas *b);
void gdn_cuda_linear_fwd(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                         void *y,        /* [N,n_out] out_p */
                         const void *x,  /* [N,n_in] in */
                         const void *W,  /* [n_out,n_in] in */
                         int N, int n_in, int n_out, float beta);
/* y = residual + x W^T, residual read from its own buffer (no copy into y first); residual may
 * also be y itself, which is gdn_cuda_linear_fwd with beta 1. Other overlaps are an error. */
void gdn_cuda_linear_fwd_add(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                             void *y,              /* [N,n_out] out_p */
                             const void *x,        /* [N,n_in] in */
                             const void *W,        /* [n_out,n_in] in */
                             const void *residual, /* [N,n_out] out_p */
                             int N, int n_in, int n_out);
/* dx = dy W (+ beta dx). dy's rows are ldy >= n_out elements apart: n_out where dy is a tensor of
 * its own, more where it is a column block of a wider buffer (several projections' output
 * gradients side by side, whose weights are adjacent: one product over all of them). */
void gdn_cuda_linear_bwd_dx(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                            void *dx,       /* [N,n_in] out_p */
                            const void *dy, /* [N,ldy] in, columns [0, n_out) read */
                            int ldy,
                            const void *W,  /* [n_out,n_in] in */
                            int N, int n_in, int n_out, float beta);
/* dW += dy^T x. */
void gdn_cuda_linear_bwd_dw(gdn_cuda_blas *b, gdn_cuda_precision in,
                            float *dW,      /* [n_out,n_in] */
                            const void *dy, /* [N,ldy] in, columns [0, n_out) read */
                            int ldy,
                            const void *x,  /* [N,n_in] in */
                            int N, int n_in, int n_out);

/* ---- embedding ------------------------------------------------------------------------------- */
/* out[n, :] = table[tokens[n], :]; token ids must be in [0, vocab) (checked by the caller). */
void gdn_cuda_embed_fwd(float *out,          /* [N,D] */
                        const int *tokens,   /* [N] */
                        const float *table,  /* [vocab,D] */
                        int N, int D, void *stream);
/* HOST helper for the backward: groups the positions by token, positions ascending within a
 * group (a stable counting sort). perm [N]: positions; seg_start [N+1]: group g is
 * perm[seg_start[g] .. seg_start[g+1]); seg_token [N]: the token of group g. Returns the number
 * of groups. Dies naming the position when a token is outside [0, vocab). */
int gdn_cuda_embed_plan(const int *tokens, int N, int vocab, int *perm, int *seg_start,
                        int *seg_token);
/* dtable[tokens[n], :] += dout[n, :], from the plan above (in device memory). Each row of dtable
 * is owned by one group and summed in ascending n, so the result is the CPU's, bit for bit. */
void gdn_cuda_embed_bwd(float *dtable,        /* [vocab,D] */
                        const int *perm,      /* [N] */
                        const int *seg_start, /* [n_seg+1] */
                        const int *seg_token, /* [n_seg] */
                        int n_seg, const float *dout /* [N,D] */, int D, void *stream);

/* ---- norms ----------------------------------------------------------------------------------- */
/* Bytes of workspace for the backward of a row norm with N rows of length D. */
size_t gdn_cuda_norm_workspace(int N, int D);
/* RMSNorm: y = x rstd w, rstd = 1/sqrt(mean(x^2) + eps). */
void gdn_cuda_rmsnorm_fwd(gdn_cuda_precision p,
                          void *y,          /* [N,D] act */
                          float *rstd,      /* [N] */
                          const float *x,   /* [N,D] */
                          const float *w,   /* [D] */
                          int N, int D, float eps, void *stream);
/* dx = RMSNorm backward, written (accumulate 0) or added (accumulate 1) to dx; when dx_act is
 * not NULL it also receives the final dx as act (the residual gradient, ready for a GEMM).
 * dw += (fixed-order sum over rows). */
void gdn_cuda_rmsnorm_bwd(gdn_cuda_precision p,
                          float *dx,        /* [N,D] */
                          int accumulate,
                          void *dx_act,     /* [N,D] act, or NULL */
                          float *dw,        /* [D] */
                          const float *dy,  /* [N,D] */
                          const float *x,   /* [N,D] */
                          const float *w,   /* [D] */
                          const float *rstd,/* [N] */
                          int N, int D, void *ws, void *stream);
/* Per-row L2 norm: y = x r, r = 1/sqrt(sum(x^2) + 1e-6). */
void gdn_cuda_l2norm_fwd(gdn_cuda_precision p,
                         void *y,           /* [N,D] act */
                         float *r,          /* [N] */
                         const void *x,     /* [N,D] act */
                         int N, int D, void *stream);
void gdn_cuda_l2norm_bwd(gdn_cuda_precision p,
                         void *dx,          /* [N,D] act */
                         const void *dy,    /* [N,D] act */
                         const void *y,     /* [N,D] act */
                         const float *r,    /* [N] */
                         int N, int D, void *stream);
/* Gated output norm: y = x rstd w silu(z) (N = tokens*heads rows, D = head_dim_v). */
void gdn_cuda_gated_rmsnorm_fwd(gdn_cuda_precision p,
                                void *y,        /* [N,D] act */
                                float *rstd,    /* [N] */
                                const void *x,  /* [N,D] act */
                                const void *z,  /* [N,D] act */
                                const float *w, /* [D] */
                                int N, int D, float eps, void *stream);
/* dx, dz overwritten; dw += . y: NULL, or the forward's output written again, bit for bit (so a
 * caller can recompute it instead of keeping it). */
void gdn_cuda_gated_rmsnorm_bwd(gdn_cuda_precision p,
                                void *dx,          /* [N,D] act */
                                void *dz,          /* [N,D] act */
                                void *y,           /* [N,D] act or NULL */
                                float *dw,         /* [D] */
                                const void *dy,    /* [N,D] act */
                                const void *x,     /* [N,D] act */
                                const void *z,     /* [N,D] act */
                                const float *w,    /* [D] */
                                const float *rstd, /* [N] */
                                int N, int D, void *ws, void *stream);

/* ---- short convolution (depthwise, causal, width W <= 8, no bias) ---------------------------
 * y = act(conv(x)), act = identity or SiLU (GDN_CUDA_CONV_SILU: the model's q, k, v path).
 * Rows before t = 0 of each sequence come from halo [B,W-1,C] (act; the previous segment's last
 * W-1 rows, oldest first: sequence parallelism) or are zero when halo is NULL.
 * The backward takes dy = dL/dy and recomputes conv(x) where SiLU needs it, so the forward
 * saves nothing but x (and the halo).
 * Documents (docs/design.md section 3.8): doc [B,T] int device array (model/cpu/doc.h) or NULL;
 * output row t reads only input rows >= doc[b,t] (halo rows are at -(W-1) .. -1), and the
 * backward drops the same taps from dx, dw and dhalo. */
typedef enum { GDN_CUDA_CONV_LINEAR = 0, GDN_CUDA_CONV_SILU = 1 } gdn_cuda_conv_act;
size_t gdn_cuda_conv_workspace(int B, int T, int C, int W);
void gdn_cuda_conv_fwd(gdn_cuda_precision p, gdn_cuda_conv_act act,
                       void *y,           /* [B,T,C] act */
                       const void *x,     /* [B,T,C] act */
                       const float *w,    /* [C,W] */
                       const void *halo,  /* [B,W-1,C] act or NULL */
                       const int *doc,    /* [B,T] or NULL */
                       int B, int T, int C, int W, void *stream);
/* dx overwritten, dw += , dhalo overwritten (NULL: not wanted). dx's rows are ldx >= C apart (a
 * column block of a wider buffer: gdn_cuda_linear_bwd_dx). */
void gdn_cuda_conv_bwd(gdn_cuda_precision p, gdn_cuda_conv_act act,
                       void *dx,          /* [B,T,ldx] act, columns [0, C) written */
                       int ldx,
                       float *dw,         /* [C,W] */
                       void *dhalo,       /* [B,W-1,C] act or NULL */
                       const void *dy,    /* [B,T,C] act: gradient of the output y */
                       const void *x,     /* [B,T,C] act */
                       const float *w,    /* [C,W] */
                       const void *halo,  /* [B,W-1,C] act or NULL (as in the forward) */
                       const int *doc,    /* [B,T] or NULL (as in the forward) */
                       int B, int T, int C, int W, void *ws, void *stream);

/* ---- elementwise ----------------------------------------------------------------------------- */
/* h = silu(a) b. */
void gdn_cuda_swiglu_fwd(gdn_cuda_precision p, void *h /* [n] act */, const void *a /* [n] act */,
                         const void *b /* [n] act */, size_t n, void *stream);
/* da, db from dh (the output of a GEMM); da, db rows ldd >= F apart (e.g. side by side in the rows
 * of one [rows, 2F] buffer, as one GEMM's operand: gdn_cuda_linear_bwd_dx). */
void gdn_cuda_swiglu_bwd(gdn_cuda_precision p, void *da /* [rows,ldd] act */, void *db /* [rows,ldd] act */,
                         int ldd, const void *dh /* [rows,F] act */, const void *a /* [rows,F] act */,
                         const void *b /* [rows,F] act */, int rows, int F, void *stream);
/* g = -exp(A_log[h]) softplus(a + dt_bias[h]). */
void gdn_cuda_decay_gate_fwd(float *g,             /* [N,H] */
                             const float *a,       /* [N,H] */
                             const float *A_log,   /* [H] */
                             const float *dt_bias, /* [H] */
                             int N, int H, void *stream);
size_t gdn_cuda_decay_gate_workspace(int N, int H);
/* da overwritten; dA_log, ddt_bias += . da's rows are ldd >= H apart (a column block of a wider
 * buffer: gdn_cuda_linear_bwd_dx). */
void gdn_cuda_decay_gate_bwd(gdn_cuda_precision p,
                             void *da,             /* [N,ldd] act, columns [0, H) written */
                             int ldd,
                             float *dA_log,        /* [H] */
                             float *ddt_bias,      /* [H] */
                             const float *dg,      /* [N,H] */
                             const float *a,       /* [N,H] */
                             const float *A_log,   /* [H] */
                             const float *dt_bias, /* [H] */
                             int N, int H, void *ws, void *stream);
/* beta = scale sigmoid(b). */
void gdn_cuda_beta_fwd(float *beta /* [n] */, const float *b /* [n] */, float scale, size_t n,
                       void *stream);
/* db[n, h] at n * ldd + h (ldd >= H, as da above). */
void gdn_cuda_beta_bwd(gdn_cuda_precision p, void *db /* [N,ldd] act */, int ldd, const float *dbeta /* [N,H] */,
                       const float *beta /* [N,H] */, float scale, int N, int H, void *stream);

/* ---- attention layers: projection biases, q/k norm and RoPE ---------------------------------- */
/* y[n, j] += b[j] for every row n (act; the sum in fp32, one rounding). */
void gdn_cuda_bias_add(gdn_cuda_precision p, void *y /* [N,C] act */, const float *b /* [C] */, int N, int C,
                       void *stream);
size_t gdn_cuda_bias_grad_workspace(int N, int C);
/* db[j] += sum over rows n of dy[n, j]: fp32 sums over fixed chunks of rows, the chunks added in
 * order in double (the same bits on every run). */
void gdn_cuda_bias_grad(gdn_cuda_precision p, float *db /* [C] */, const void *dy /* [N,C] act */, int N, int C,
                        void *ws, void *stream);

/* The RoPE table of positions pos0 .. pos0+T-1 for head dim D (even): cs[t * D/2 + i] = cos and
 * cs[(T + t) * D/2 + i] = sin of (pos0 + t) theta^(-2i/D), computed in double and rounded to
 * float exactly as the CPU's rope.c does. HOST memory, T * D floats; the model uploads it once. */
void gdn_cuda_rope_table(float *cs, int T, int D, int pos0, double theta);

/* The query/key preparation of an attention layer, one launch for q and k (rows [B,T,heads,D]):
 *   u = x + b          (b: the projection's bias, or NULL)
 *   n = u r w          r = 1/sqrt(mean(u^2) + eps), per (token, head) row   (only with norm)
 *   y = rope(n)        y_i = n_i c_i - n_{i+D/2} s_i,  y_{i+D/2} = n_{i+D/2} c_i + n_i s_i
 * with c, s from the table of positions 0 .. T-1 (gdn_cuda_rope_table). */
typedef struct {
    int B, T, H, Hkv, D;   /* D even, at most 512 */
    int norm;              /* 1: per-head RMSNorm with weights wq, wk (Qwen3); 0: none */
    float eps;
    const float *rope;     /* [2,T,D/2] device table */
    const int *pos;        /* [B*T] row of the table for each token (documents: its position in its
                              document), or NULL: row t for token t */
    const float *bq, *bk;  /* [H*D], [Hkv*D] biases, or NULL */
    const float *wq, *wk;  /* [D] norm weights (read only with norm) */
} gdn_cuda_qk_prep;
/* q, k overwritten; rq, rk (the norms' r) written when norm and not NULL (a recomputation in the
 * backward passes NULL). The same inputs give the same bits. */
void gdn_cuda_qk_prep_fwd(gdn_cuda_precision p, const gdn_cuda_qk_prep *s,
                          void *q,         /* [B,T,H,D] act */
                          float *rq,       /* [B*T*H] or NULL */
                          void *k,         /* [B,T,Hkv,D] act */
                          float *rk,       /* [B*T*Hkv] or NULL */
                          const void *qp,  /* [B,T,H,D] act: the projection before the bias */
                          const void *kp,  /* [B,T,Hkv,D] act */
                          void *stream);
size_t gdn_cuda_qk_prep_workspace(const gdn_cuda_qk_prep *s);
/* The backward from dq, dk (gradients of the outputs q, k): dqp, dkp (gradients of the
 * projections, i.e. of u; also the biases' per-row terms) overwritten; with norm dwq, dwk += the
 * norm weights' gradients (fixed-order sums). qp, kp, rq, rk as saved by the forward. dqp may
 * alias dq and dkp dk (each row is read whole before it is written). */
void gdn_cuda_qk_prep_bwd(gdn_cuda_precision p, const gdn_cuda_qk_prep *s,
                          void *dqp, void *dkp,        /* act, as qp, kp */
                          float *dwq, float *dwk,      /* [D] (only with norm) */
                          const void *dq, const void *dk,
                          const void *qp, const void *kp,
                          const float *rq, const float *rk,
                          void *ws, void *stream);

/* ---- loss ------------------------------------------------------------------------------------ */
size_t gdn_cuda_cross_entropy_workspace(int N);
/* Fused softmax + cross-entropy, one pass per row. targets[n] < 0 marks an ignored row; every
 * target must be < V (checked by the caller). Writes the SUM of -log p[target] over valid rows
 * to *loss_sum and their count to *n_valid (both device pointers). When dlogits is not NULL it
 * receives (softmax - onehot) * grad_scale (0 on ignored rows); it may alias logits. */
void gdn_cuda_cross_entropy(gdn_cuda_precision p,
                            void *dlogits,       /* [N,V] act, or NULL */
                            const void *logits,  /* [N,V] act */
                            const int *targets,  /* [N] */
                            int N, int V, float grad_scale,
                            double *loss_sum,    /* [1] */
                            int *n_valid,        /* [1] */
                            void *ws, void *stream);

/* ---- distillation (ops_distill.cu) ------------------------------------------------------------ */
size_t gdn_cuda_distill_loss_workspace(int N);
/* Per valid row n (targets[n] >= 0): KL(softmax(z/tau) || softmax(l/tau)) with z = teacher's row
 * (fp32) and l = logits' row, and the cross-entropy of l at the target, their sums over the rows
 * to *kl_sum, *ce_sum and the count to *n_valid (device pointers). With dlogits (may alias logits):
 * grad_scale (tau (softmax(l/tau) - softmax(z/tau)) + ce_weight (softmax(l) - onehot)); 0 on
 * ignored rows. The caller's loss is tau^2 KL + ce_weight CE (model/cpu/loss_distill.c). */
void gdn_cuda_distill_loss(gdn_cuda_precision p, void *dlogits, const void *logits, const float *teacher,
                           const int *targets, int N, int V, float tau, float ce_weight, float grad_scale,
                           double *kl_sum, double *ce_sum, int *n_valid, void *ws, void *stream);
/* e[i] = (x_mid[i] - x_in[i]) - target[i]: a teacher-forced mixer's error (fp32, [n]); with target
 * NULL, target[i] = t_mid[i] - t_in[i] (the teacher's own mixer output and input). */
void gdn_cuda_mixer_error(float *e, const float *x_mid, const float *x_in, const float *target, const float *t_mid,
                          const float *t_in, size_t n, void *stream);

/* ---- optimizer ------------------------------------------------------------------------------- */
size_t gdn_cuda_grad_norm_workspace(size_t n);
/* *out = sqrt(sum g^2), partial sums in double over fixed blocks, added in a fixed order. */
void gdn_cuda_grad_norm(double *out /* [1] device */, const float *g /* [n] */, size_t n, void *ws,
                        void *stream);
/* *out = sum g^2, the same sum without the root (a shard's part of a global norm). */
void gdn_cuda_grad_sumsq(double *out /* [1] device */, const float *g /* [n] */, size_t n, void *ws,
                         void *stream);
/* g *= scale. */
void gdn_cuda_grad_scale(float *g /* [n] */, size_t n, float scale, void *stream);


/* AdamW exactly as train/optim.c's gdn_adamw_update (fp32 moments, bias correction, decoupled
 * decay), over the whole flat buffer in one launch. step is 1-based. The gradient is first
 * multiplied by clip / *gnorm when clip > 0 and *gnorm > clip (gnorm: a device pointer, may be
 * NULL for no clipping), as gdn_grad_scale would.
 * The buffer is cut into runs (e.g. one per tensor): run r covers [run_end[r-1], run_end[r])
 * (run_end[-1] = 0, run_end[n_runs-1] = n) and decays when run_decay[r] != 0. When p_act is not
 * NULL it receives the updated parameters rounded to bf16, run r's elements starting at
 * p_act[run_act[r]] (so each tensor of the copy can start on an aligned address for the GEMMs).
 * run_end, run_decay, run_act: DEVICE arrays of n_runs entries. */
void gdn_cuda_adamw(float *params,            /* [n] */
                    const float *grads,       /* [n] */
                    float *m, float *v,       /* [n] */
                    void *p_act,              /* bf16, or NULL */
                    size_t n, const uint64_t *run_end, const int *run_decay, const uint64_t *run_act,
                    int n_runs, const gdn_adamw_hparams *h, int64_t step, const double *gnorm,
                    double clip, void *stream);

/* ---- head packing for the delta rule ----------------------------------------------------------
 * The delta-rule kernels take head dims K, V in {64, 128, 256}. Other shapes run on packed heads:
 * every head h becomes S sub-heads h*S + s; a head's row of D elements is zero-padded to Dp and,
 * for values, split into S pieces of Ds columns (piece s holds columns s*Ds .. s*Ds+Ds-1).
 * Zero padding is exact: padded key/query columns add nothing to k^T k, S^T q or the state,
 * and the state's value columns evolve independently, so splitting V is exact too.
 * split 0: dst[n, h*S+s, i] = src[n, h, i] for every s (queries, keys, gates; Ds = D).
 * split 1: dst[n, h*S+s, i] = src[n, h, s*Ds + i]   (values).
 * Padding (i >= Ds, or past D) is written as 0. Gates use p = GDN_CUDA_FP32 with D = Dp = 1. */
void gdn_cuda_heads_pack(gdn_cuda_precision p,
                         void *dst,        /* [N, H*S, Dp] act */
                         const void *src,  /* [N, H, D] act */
                         int N, int H, int D, int S, int Ds, int Dp, int split, void *stream);
/* The inverse, for outputs and gradients. split 1: dst[n, h, j] = src[n, h*S + j/Ds, j%Ds].
 * split 0: dst[n, h, i] = sum over s (in order) of src[n, h*S+s, i] (the gradient of a copy). */
void gdn_cuda_heads_unpack(gdn_cuda_precision p,
                           void *dst,       /* [N, H, D] act */
                           const void *src, /* [N, H*S, Dp] act */
                           int N, int H, int D, int S, int Ds, int Dp, int split, void *stream);

#ifdef __cplusplus
}
#endif

#endif
