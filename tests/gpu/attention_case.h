/* One attention shape of the GPU attention programs (test_gpu_attention.c, bench_attention.c)
 * and the launcher argument block it makes (plain C). */
#ifndef GDN_TESTS_GPU_ATTENTION_CASE_H
#define GDN_TESTS_GPU_ATTENTION_CASE_H

#include <string.h>

#include "model/cuda/attention_cuda.h"

typedef struct {
    int B, T, H, Hkv, D;
    float scale; /* 0: default */
    int Tk;      /* keys per sequence (queries are the last T of them); 0: T */
    int docs;    /* documents: this many starts per sequence (test_gpu_attention draws them) */
} att_case;

/* The argument block of case c in precision p with `warps` warps per block (0: the default);
 * every tensor pointer NULL and the default stream, for the caller to set. */
static inline gdn_cuda_attention_args att_args(const att_case *c, gdn_cuda_precision p, int warps) {
    gdn_cuda_attention_args a;
    memset(&a, 0, sizeof a);
    a.B = c->B;
    a.T = c->T;
    a.Tk = c->Tk;
    a.H = c->H;
    a.Hkv = c->Hkv;
    a.D = c->D;
    a.scale = c->scale;
    a.precision = p;
    a.warps = warps;
    return a;
}

#endif
