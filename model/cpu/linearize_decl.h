/* Declarations of model/cpu/linearize*.c for one precision, included twice by
 * model/cpu/linearize.h with GDN_OPS_REAL / GDN_OPS_R set.
 *
 * One head of one sequence: q [T,D] (already multiplied by the softmax scale, so that the exact
 * output is o_t = sum_{i<=t} softmax_i(q_t . k_i) v_i), k [T,D], v [T,Dv], o [T,Dv], all
 * contiguous; positions t = 1..T. kbar_t and vbar_t are the means of k_1..k_t and v_1..v_t. */
#define real_ GDN_OPS_REAL
#define R_ GDN_OPS_R

/* The gated-delta-rule form of softmax attention, through the chunked delta rule
 * (gdn_delta_fwd, chunk 16/32/64) with keys ktil_t = (k_t - kbar_t) / lambda, queries
 * lambda q_t, decay exp(g_t) = 1 - 1/t, write strength beta_t = 1/(t-1), values
 * (1 - 1/t) (v_t - vbar_{t-1}) and vbar_t added to the output (t = 1: state and write zero).
 * lambda = 1 is the form as derived; gdn_lin_balance_factor gives the balanced form.
 * Writes o; returns 0, or -1 when an output is not finite (the state diverged; o holds it). */
int R_(gdn_lin_gdn)(int T, int D, int Dv, const real_ *q, const real_ *k, const real_ *v, real_ lambda,
                    int chunk, real_ *o);
/* The first-order baseline: o_t = vbar_t + C_t q_t with C_t = mean_{i<=t} (v_i - vbar_t)(k_i - kbar_t)^T,
 * updated by Welford's co-moment recurrence (no cancellation of large means). */
void R_(gdn_lin_vala)(int T, int D, int Dv, const real_ *q, const real_ *k, const real_ *v, real_ *o);
/* Adds sum_t |q_t|^2 to *sq and sum_t |k_t - kbar_t|^2 to *sk (for gdn_lin_balance_factor). */
void R_(gdn_lin_norms)(int T, int D, const real_ *q, const real_ *k, double *sq, double *sk);

/* ---- the linearized mixer (mixer S, model/cpu/linearized.c) -------------------------------- */
/* Per query head h with lambda_h = exp(log_lambda[h]) and positions p = 1, 2, ... counted from
 * the start of each document (of the sequence without documents):
 *   o_t = S_t^T (lambda_h scale q_t) + vbar_t,
 *   S_t = (1 - 1/p)(I - ktil_t ktil_t^T / (p - 1)) S_{t-1} + ktil_t ((1 - 1/p)(v_t - vbar_{t-1}))^T / (p - 1)
 * with ktil_t = (k_t - kbar_t) / lambda_h, kbar_t, vbar_t the running means of the document's
 * keys and values (state and write zero at p = 1), run on the chunked delta rule (gdn_delta_fwd).
 * The first p0 rows of each sequence of k and v (of kv_len rows; kv_len >= p0 + T) are earlier
 * positions whose queries are not asked (decoding from a KV cache); the last T rows belong to the
 * queries q. p0 > 0 needs doc = NULL. Writes o [B,T,H,D]. */
void R_(gdn_linz_fwd)(const gdn_linz_shape *s, int p0, int kv_len, const real_ *q, const real_ *k,
                      const real_ *v, const real_ *log_lambda, real_ scale, real_ *o);
/* Backward of gdn_linz_fwd at p0 = 0 (kv_len = T): from d_o [B,T,H,D] writes dq [B,T,H,D], dk,
 * dv [B,T,Hkv,D] and ADDS the gradient of log_lambda into dlog_lambda [H]. */
void R_(gdn_linz_bwd)(const gdn_linz_shape *s, const real_ *q, const real_ *k, const real_ *v,
                      const real_ *log_lambda, real_ scale, const real_ *d_o, real_ *dq, real_ *dk, real_ *dv,
                      real_ *dlog_lambda);

/* ---- the CPU model (model/cpu/linearize_model.c) ------------------------------------------- */
/* After a gdn_cpu_forward on a (no carry, no sequence parallelism), for attention layer l and
 * each query head h: adds the sums of gdn_lin_norms over every sequence of the batch into
 * sq[h], sk[h] (the queries scaled by the softmax scale, the keys of the head's kv head). */
void R_(gdn_lin_layer_norms)(const R_(gdn_cpu_acts) *a, const gdn_param_table *t, int l, double *sq,
                             double *sk);
/* After such a forward: for attention layer l, each method m and query head h, adds
 * |approx - exact|^2 summed over positions into err2[m * H + h] and |exact|^2 into ref2[h];
 * lambda[h] is the balance factor of each head. An output that is not finite (a diverged state)
 * sets err2[m * H + h] to +inf and adds 1 to diverged[m] (per sequence and head). */
void R_(gdn_lin_layer_errors)(const R_(gdn_cpu_acts) *a, const gdn_param_table *t, int l,
                              const double *lambda, double *err2, double *ref2, int *diverged);
/* gdn_cpu_forward (no carry) with the attention output (before o_proj) of every layer l with
 * replace[l] != 0 replaced by method m's approximation, computed from that layer's own q, k
 * and v in this pass; lambda [n_layers * n_heads] the balance factors (read for
 * GDN_LIN_BALANCED). Forward only: the acts hold no gradient afterwards. Returns the loss sum
 * (not finite when an approximation diverged) and sets *n_valid. */
double R_(gdn_lin_forward_replaced)(R_(gdn_cpu_acts) *a, const gdn_param_table *t, const real_ *params,
                                    const int *tokens, const int *targets, int *n_valid,
                                    const unsigned char *replace, int m, const double *lambda);

#undef real_
#undef R_
