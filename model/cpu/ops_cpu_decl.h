/* CPU operator declarations, included twice by model/cpu/ops_cpu.h (once per precision) with
 * GDN_OPS_REAL set to the scalar type and GDN_OPS_R(name) to the suffixed name.
 *
 * Conventions for every op:
 * - Row-major, time-major tensors; N = B*T rows when the op is per token.
 * - Forward functions overwrite their outputs.
 * - Backward functions OVERWRITE gradients of inputs/activations (dx, ...) and ACCUMULATE (+=)
 *   into gradients of parameters (dW, dw, ...). Any input-gradient pointer documented as
 *   "may be NULL" is skipped when NULL.
 * - Linear weights use the [out, in] layout (as in PyTorch / Hugging Face). */

#define real_ GDN_OPS_REAL
#define R_ GDN_OPS_R

/* ---- gated delta rule (model/cpu/delta_rule.c) -------------------------------------------- */
/* Chunked gated delta rule (docs/design.md section 3.1-3.3), per batch b and head h:
 *   S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,  o_t = scale * S_t^T q_t
 * q, k: [B,T,H,K]; v, o: [B,T,H,V]; g, beta: [B,T,H] (g = natural-log decay, <= 0);
 * states h0, ht: [B,H,K,V]. chunk in {16, 32, 64}; T need not be a multiple of chunk.
 * h0 may be NULL (zero initial state); ht may be NULL (final state not wanted).
 * s->variant picks the mixer (model/mixer.h): G as above; D with g_t = 0; M with
 * S_t = exp(g_t) S_{t-1} + k_t v_t^T; L with S_t = S_{t-1} + k_t v_t^T. An input the mixer
 * ignores (g for D and L, beta for M and L) is not read and may be NULL; an unknown variant is
 * a fatal error. */
void R_(gdn_delta_fwd)(const gdn_delta_shape *s, const real_ *q, const real_ *k, const real_ *v,
                       const real_ *g, const real_ *beta, real_ scale, const real_ *h0, real_ *o,
                       real_ *ht);
/* Backward of gdn_delta_fwd (recomputes what it needs from the inputs), for the same variant.
 * d_o: [B,T,H,V]; dht: [B,H,K,V] or NULL (no gradient on the final state).
 * Writes dq, dk [B,T,H,K], dv [B,T,H,V], dg, dbeta [B,T,H], dh0 [B,H,K,V] (dh0, dg and dbeta
 * may be NULL). The gradient of an input the variant ignores is written as exact zeros. */
void R_(gdn_delta_bwd)(const gdn_delta_shape *s, const real_ *q, const real_ *k, const real_ *v,
                       const real_ *g, const real_ *beta, real_ scale, const real_ *h0,
                       const real_ *d_o, const real_ *dht, real_ *dq, real_ *dk, real_ *dv,
                       real_ *dg, real_ *dbeta, real_ *dh0);

/* ---- the delta rule as an affine map of its state (model/cpu/delta_transition.c) ----------- */
/* For sequence parallelism (docs/design.md section 3.4). Per batch b and head h, gdn_delta_fwd on the same
 * inputs gives ht = M h0 + H for every h0. M [B,H,K,K] = product over the chunks, in order, of
 * gamma_C I - K^T diag(gamma_C / gamma) W; H [B,H,K,V] = ht from h0 = 0 (H may be NULL).
 * k: [B,T,H,K]; v: [B,T,H,V]; g, beta: [B,T,H]. Every variant: without the delta term W = 0,
 * so M = prod gamma_C I (exactly diagonal); without decay gamma = 1. Ignored inputs may be NULL. */
void R_(gdn_delta_transition)(const gdn_delta_shape *s, const real_ *k, const real_ *v,
                              const real_ *g, const real_ *beta, real_ *M, real_ *H);
/* The adjoint counterpart: gdn_delta_bwd's dh0 = M^T dht + E for every dht and h0, where
 * E [B,H,K,V] = dh0 at dht = 0 (it depends on neither v nor h0).
 * q, k: [B,T,H,K]; g, beta: [B,T,H]; d_o: [B,T,H,V]. Every variant, as above. */
void R_(gdn_delta_transition_adjoint)(const gdn_delta_shape *s, const real_ *q, const real_ *k,
                                      const real_ *g, const real_ *beta, real_ scale,
                                      const real_ *d_o, real_ *E);

/* ---- causal softmax attention (model/cpu/attention.c; docs/design.md section 2.7) ---------- */
/* Per batch b and query head h, with kv head g = h / (H / Hkv) and t' <= t:
 *   p_tt' = exp(scale q_t . k_t' - lse_t),  lse_t = log sum_{t'<=t} exp(scale q_t . k_t'),
 *   o_t = sum_{t'<=t} p_tt' v_t'.
 * q, o: [B,T,H,D]; k, v: [B,T,Hkv,D]; lse: [B,H,T] (what the backward needs; may be NULL).
 * Any T >= 0. No T x T matrix is stored: each thread holds one block of query rows.
 * With s->doc (model/cpu/doc.h) the sums run over doc[b,t] <= t' <= t only (block-diagonal). */
void R_(gdn_attn_fwd)(const gdn_attn_shape *s, const real_ *q, const real_ *k, const real_ *v,
                      real_ scale, real_ *o, real_ *lse);
/* Backward of gdn_attn_fwd from its inputs, its output o and lse (probabilities recomputed).
 * d_o: [B,T,H,D]. Writes dq [B,T,H,D], dk, dv [B,T,Hkv,D] (summed over the query heads of a
 * group). Bitwise the same for any thread count. */
void R_(gdn_attn_bwd)(const gdn_attn_shape *s, const real_ *q, const real_ *k, const real_ *v,
                      const real_ *o, const real_ *lse, real_ scale, const real_ *d_o, real_ *dq,
                      real_ *dk, real_ *dv);

/* The same with Tk >= T keys and values [B,Tk,Hkv,D] of which the T query rows are the last T
 * positions (query row t sees keys 0 .. Tk-T+t): a segment of a longer sequence whose earlier
 * keys and values come from elsewhere (sequence parallelism). lse [B,H,T]. Tk = T is
 * gdn_attn_fwd / gdn_attn_bwd; dk, dv [B,Tk,Hkv,D] are overwritten (zero where no query reads).
 * s->doc is relative to the first query row: row t reads keys from Tk-T+doc[b,t] (at least 0). */
void R_(gdn_attn_fwd_kv)(const gdn_attn_shape *s, int Tk, const real_ *q, const real_ *k, const real_ *v,
                         real_ scale, real_ *o, real_ *lse);
void R_(gdn_attn_bwd_kv)(const gdn_attn_shape *s, int Tk, const real_ *q, const real_ *k, const real_ *v,
                         const real_ *o, const real_ *lse, real_ scale, const real_ *d_o, real_ *dq,
                         real_ *dk, real_ *dv);

/* Decoding form of gdn_attn_fwd: T new query rows at positions pos0 .. pos0+T-1 against the
 * keys and values of positions 0 .. pos0+T-1, held in caches k, v [B,len,Hkv,D]
 * (len >= pos0 + T). q, o [B,T,H,D]; lse [B,H,T] (may be NULL). At pos0 = 0 it equals
 * gdn_attn_fwd up to rounding (scores and sums in double; no blocks, no BLAS). */
void R_(gdn_attn_fwd_cached)(const gdn_attn_shape *s, const real_ *q, const real_ *k, const real_ *v,
                             int len, int pos0, real_ scale, real_ *o, real_ *lse);

/* ---- rotary position embedding (model/cpu/rope.c) ------------------------------------------- */
/* Full rotary, half-split pairs (i, i + D/2), i < D/2, at position p = pos0 + t:
 *   y_i = x_i cos(p w_i) - x_{i+D/2} sin(p w_i),  y_{i+D/2} = x_{i+D/2} cos(p w_i) + x_i sin(p w_i),
 * w_i = theta^(-2i/D) (angles in double). x, y: [B,T,H,D], D even; y may alias x. */
void R_(gdn_rope_fwd)(real_ *y, const real_ *x, int B, int T, int H, int D, int pos0, double theta);
/* dx = the inverse rotation of dy (overwrite; dx may alias dy). */
void R_(gdn_rope_bwd)(real_ *dx, const real_ *dy, int B, int T, int H, int D, int pos0,
                      double theta);
/* The same with documents: token t of row b at position gdn_doc_pos(doc, b, t, T, pos0)
 * (model/cpu/doc.h: counted from its document's start); doc NULL is gdn_rope_fwd / _bwd. */
void R_(gdn_rope_fwd_doc)(real_ *y, const real_ *x, int B, int T, int H, int D, int pos0,
                          const int *doc, double theta);
void R_(gdn_rope_bwd_doc)(real_ *dx, const real_ *dy, int B, int T, int H, int D, int pos0,
                          const int *doc, double theta);

/* ---- embedding (model/cpu/embed.c) --------------------------------------------------------- */
/* out[N,D] = table[tokens[n], :]; table [vocab, D]. */
void R_(gdn_embed_fwd)(real_ *out, const int *tokens, const real_ *table, int N, int D);
/* dtable[tokens[n], :] += dout[n, :]. */
void R_(gdn_embed_bwd)(real_ *dtable, const int *tokens, const real_ *dout, int N, int D);

/* ---- linear (model/cpu/linear.c) ------------------------------------------------------------ */
/* y[N,n_out] = x[N,n_in] W[n_out,n_in]^T. */
void R_(gdn_linear_fwd)(real_ *y, const real_ *x, const real_ *W, int N, int n_in, int n_out);
/* dx[N,n_in] = dy W (overwrite; dx may be NULL); dW[n_out,n_in] += dy^T x. */
void R_(gdn_linear_bwd)(real_ *dx, real_ *dW, const real_ *dy, const real_ *x, const real_ *W, int N,
                        int n_in, int n_out);

/* ---- norms (model/cpu/norm.c) ----------------------------------------------------------------- */
/* RMSNorm over the last dim: y = x * rstd * w, rstd[n] = 1/sqrt(mean(x^2) + eps). x,y [N,D].
 * Also the per-head q/k norm of attention: N = tokens * heads rows of D = head_dim, w [D]. */
void R_(gdn_rmsnorm_fwd)(real_ *y, real_ *rstd, const real_ *x, const real_ *w, int N, int D, real_ eps);
void R_(gdn_rmsnorm_bwd)(real_ *dx, real_ *dw, const real_ *dy, const real_ *x, const real_ *w,
                         const real_ *rstd, int N, int D);
/* Per-row L2 norm: y = x * r, r[n] = 1/sqrt(sum(x^2) + 1e-6); rows of length D (a head). */
void R_(gdn_l2norm_fwd)(real_ *y, real_ *r, const real_ *x, int N, int D);
void R_(gdn_l2norm_bwd)(real_ *dx, const real_ *dy, const real_ *y, const real_ *r, int N, int D);
/* Gated output norm per head: y = x * rstd * w * silu(z); x, z, y [N,D] (N = tokens*heads,
 * D = head_dim_v), w [D] shared across heads, rstd [N]. */
void R_(gdn_gated_rmsnorm_fwd)(real_ *y, real_ *rstd, const real_ *x, const real_ *z, const real_ *w,
                               int N, int D, real_ eps);
void R_(gdn_gated_rmsnorm_bwd)(real_ *dx, real_ *dz, real_ *dw, const real_ *dy, const real_ *x,
                               const real_ *z, const real_ *w, const real_ *rstd, int N, int D);

/* ---- short convolution (model/cpu/conv.c) --------------------------------------------------- */
/* Depthwise causal convolution, width W (4), no bias, per sequence:
 *   y[b,t,c] = sum_{j=0}^{W-1} w[c,j] * x[b, t-(W-1)+j, c]
 * x, y: [B,T,C]; w: [C,W]. Rows before t=0 come from halo [B,W-1,C] (the previous segment's
 * last W-1 rows, oldest first) or are zero when halo is NULL. doc [B,T] (model/cpu/doc.h; may
 * be NULL): rows before doc[b,t] read as zero for output row t (no tap crosses a document
 * start). */
void R_(gdn_conv_fwd)(real_ *y, const real_ *x, const real_ *w, const real_ *halo, const int *doc,
                      int B, int T, int C, int W);
/* dx [B,T,C] (overwrite), dw [C,W] (+=), dhalo [B,W-1,C] (overwrite; may be NULL). */
void R_(gdn_conv_bwd)(real_ *dx, real_ *dw, real_ *dhalo, const real_ *dy, const real_ *x,
                      const real_ *w, const real_ *halo, const int *doc, int B, int T, int C, int W);

/* ---- elementwise (model/cpu/act.c) ------------------------------------------------------------ */
/* y = x * sigmoid(x), n elements. y may alias x. */
void R_(gdn_silu_fwd)(real_ *y, const real_ *x, size_t n);
/* dx = dy * silu'(x); dx may alias dy. */
void R_(gdn_silu_bwd)(real_ *dx, const real_ *dy, const real_ *x, size_t n);
/* SwiGLU: h = silu(a) * b; a, b, h [n]. */
void R_(gdn_swiglu_fwd)(real_ *h, const real_ *a, const real_ *b, size_t n);
void R_(gdn_swiglu_bwd)(real_ *da, real_ *db, const real_ *dh, const real_ *a, const real_ *b, size_t n);
/* Decay gate: g[n,h] = -exp(A_log[h]) * softplus(a[n,h] + dt_bias[h]); a, g [N,H]. */
void R_(gdn_decay_gate_fwd)(real_ *g, const real_ *a, const real_ *A_log, const real_ *dt_bias, int N,
                            int H);
/* da [N,H] (overwrite), dA_log [H] (+=), ddt_bias [H] (+=). */
void R_(gdn_decay_gate_bwd)(real_ *da, real_ *dA_log, real_ *ddt_bias, const real_ *dg, const real_ *a,
                            const real_ *A_log, const real_ *dt_bias, int N, int H);
/* Write strength: beta = scale * sigmoid(b), scale 1 (or 2 to allow negative eigenvalues). */
void R_(gdn_beta_fwd)(real_ *beta, const real_ *b, real_ scale, size_t n);
void R_(gdn_beta_bwd)(real_ *db, const real_ *dbeta, const real_ *beta, real_ scale, size_t n);

/* ---- loss (model/cpu/loss.c) -------------------------------------------------------------------- */
/* Fused softmax + cross-entropy over rows of logits [N,V]. targets[n] < 0 marks an ignored row.
 * Returns the SUM of -log p[target] over valid rows; writes the count of valid rows to *n_valid.
 * When dlogits is not NULL it receives d(sum_loss * grad_scale)/dlogits, i.e.
 * (softmax - onehot) * grad_scale on valid rows and 0 on ignored rows (dlogits may alias logits). */
double R_(gdn_cross_entropy)(real_ *dlogits, const real_ *logits, const int *targets, int N, int V,
                             real_ grad_scale, int *n_valid);

#undef real_
#undef R_
