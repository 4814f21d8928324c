/* Training-free linearisation of softmax attention (docs/distillation.md, "Training-free
 * linearisation"): per head, three approximations of a causal softmax attention output that a
 * recurrent mixer can compute, and the CPU model's hooks to measure them on a teacher.
 * Declared for both precisions (names end in _f32 / _f64), like model/cpu/ops_cpu.h. */
#ifndef GDN_LINEARIZE_H
#define GDN_LINEARIZE_H

#include <math.h>

#include "model/cpu/model_cpu.h"

/* The approximations. */
typedef enum {
    GDN_LIN_GDN = 0,  /* the gated-delta-rule form as derived (raw q and k) */
    GDN_LIN_BALANCED, /* the same with q scaled up and k down by a per-head factor */
    GDN_LIN_VALA,     /* the first-order (Taylor) baseline */
    GDN_LIN_COUNT
} gdn_lin_method;

/* Short names for tables and JSON: "gdn", "balanced", "vala". */
static inline const char *gdn_lin_method_name(int m) {
    static const char *const names[GDN_LIN_COUNT] = {"gdn", "balanced", "vala"};
    return m >= 0 && m < GDN_LIN_COUNT ? names[m] : "?";
}

/* The balance factor lambda = (sk / sq)^(1/4) from gdn_lin_norms's sums over the same positions:
 * then the root-mean-square norms of lambda q and (k - kbar) / lambda are equal, and softmax
 * attention is unchanged (lambda q . k / lambda = q . k). 1 when either sum is 0 or not finite. */
static inline double gdn_lin_balance_factor(double sq, double sk) {
    if (!(sq > 0) || !(sk > 0) || !isfinite(sq) || !isfinite(sk)) return 1.0;
    return sqrt(sqrt(sk / sq));
}

/* The linearized mixer's core (mixer S, model/cpu/linearized.c): queries [B,T,H,D] (after the
 * q/k norm and RoPE, not yet scaled), keys and values [B,Tk,Hkv,D] of the query heads' groups
 * (query head h reads key/value head h / (H / Hkv)); doc as model/cpu/doc.h (NULL: none). */
typedef struct {
    int B, T, H, Hkv, D;
    int chunk;      /* chunk size of the delta-rule kernel (16, 32 or 64) */
    const int *doc; /* [B,T] or NULL; only with p0 = 0 */
} gdn_linz_shape;

#define GDN_OPS_REAL float
#define GDN_OPS_R(name) name##_f32
#include "model/cpu/linearize_decl.h"
#undef GDN_OPS_REAL
#undef GDN_OPS_R

#define GDN_OPS_REAL double
#define GDN_OPS_R(name) name##_f64
#include "model/cpu/linearize_decl.h"
#undef GDN_OPS_REAL
#undef GDN_OPS_R

#endif
