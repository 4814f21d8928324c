/* The CPU operator set, declared for both precisions: name_f32 (float) and name_f64 (double).
 * See ops_cpu_decl.h for the contract of each op. */
#ifndef GDN_OPS_CPU_H
#define GDN_OPS_CPU_H

#include <stddef.h>

#include "model/mixer.h"
#include "model/cpu/doc.h"

/* Shape of one gated-delta-rule call. */
typedef struct {
    int B, T, H;  /* batch, sequence length, heads */
    int K, V;     /* key and value head dimensions */
    int chunk;    /* chunk size: 16, 32 or 64 */
    int qk_heads; /* 0 or H: q, k have H heads; else H % qk_heads == 0 and value head h reads
                     q, k head h / (H / qk_heads) (grouped value heads; the CUDA path only) */
    int variant;  /* gdn_mixer (model/mixer.h): which rule of the family; 0 = G, the gated delta
                     rule */
    const int *doc; /* [B,T] documents (model/cpu/doc.h) or NULL: the state is zero at every
                       t with doc[b,t] == t (a chunk never spans such a t) */
} gdn_delta_shape;

/* Shape of one causal softmax-attention call (model/cpu/attention.c). */
typedef struct {
    int B, T, H; /* batch, sequence length, query heads */
    int Hkv;     /* key/value heads: H % Hkv == 0, query head h reads kv head h / (H / Hkv) */
    int D;       /* head dimension of q, k and v */
    const int *doc; /* [B,T] documents of the query rows (model/cpu/doc.h) or NULL: query row t
                       reads no key before its document's start doc[b,t] */
} gdn_attn_shape;

#define GDN_OPS_REAL float
#define GDN_OPS_R(name) name##_f32
#include "model/cpu/ops_cpu_decl.h"
#undef GDN_OPS_REAL
#undef GDN_OPS_R

#define GDN_OPS_REAL double
#define GDN_OPS_R(name) name##_f64
#include "model/cpu/ops_cpu_decl.h"
#undef GDN_OPS_REAL
#undef GDN_OPS_R

#endif
