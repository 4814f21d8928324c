/* Attention: argument checks, the kernel parameter block, the host-array wrappers and the
 * timing helper (see attention_cuda.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <vector>
#include <algorithm>

#include "model/cuda/attention_common.cuh"

#define ATTN_DIE(...) GDN_CUDA_DIE("attention: " __VA_ARGS__)

static void check_ptr(const void *ptr, const char *name) {
    if (!ptr) ATTN_DIE("%s is NULL; pass a device buffer", name);
    if ((uintptr_t)ptr & 15)
        ATTN_DIE("%s is not 16-byte aligned; pass a buffer from cudaMalloc (or offset by a multiple of 16 bytes)", name);
}

extern "C" void gdn_cuda_attention_check(const gdn_cuda_attention_args *a, int backward) {
    if (!a) ATTN_DIE("argument block is NULL");
    if (a->B < 1 || a->T < 1 || a->H < 1 || a->Hkv < 1)
        ATTN_DIE("B=%d T=%d H=%d Hkv=%d: each must be at least 1", a->B, a->T, a->H, a->Hkv);
    if (a->Tk != 0 && a->Tk < a->T)
        ATTN_DIE("Tk=%d keys per sequence is fewer than the T=%d queries (0 means Tk = T)", a->Tk, a->T);
    if (a->H % a->Hkv)
        ATTN_DIE("H=%d is not a multiple of Hkv=%d (query head h reads kv head h / (H / Hkv))", a->H, a->Hkv);
    if (a->D != 64 && a->D != 128) ATTN_DIE("head dim D=%d is not supported; use 64 or 128", a->D);
    if (!(a->scale >= 0.0f) || a->scale > 1e30f)
        ATTN_DIE("scale=%g must be finite and >= 0 (0 means 1/sqrt(D))", (double)a->scale);
    if (a->warps != 0 && a->warps != 4 && a->warps != 8)
        ATTN_DIE("warps=%d: use 4 or 8 warps per block, or 0 for the default", a->warps);
    if (a->precision != GDN_CUDA_BF16 && a->precision != GDN_CUDA_FP32)
        ATTN_DIE("precision %d is neither GDN_CUDA_FP32 nor GDN_CUDA_BF16", (int)a->precision);
    /* the fp32 kernels launch one warp per row, 4 rows per block, on grid x (< 2^31 blocks) */
    if ((double)a->B * a->T * a->H > 4.0 * 2147483647.0)
        ATTN_DIE("B*T*H=%.0f rows is over the launch limit", (double)a->B * a->T * a->H);
    if (a->H > 65535 || a->B > 65535)
        ATTN_DIE("H=%d / B=%d over the grid limit of 65535", a->H, a->B);
    check_ptr(a->q, "q");
    check_ptr(a->k, "k");
    check_ptr(a->v, "v");
    check_ptr(a->o, "o");
    if (!a->lse) ATTN_DIE("lse is NULL; pass a device buffer of B*H*T floats");
    if (backward) {
        check_ptr(a->d_o, "d_o");
        check_ptr(a->dq, "dq");
        check_ptr(a->dk, "dk");
        check_ptr(a->dv, "dv");
        if (!a->workspace) ATTN_DIE("workspace is NULL; pass gdn_cuda_attention_workspace_bytes() bytes");
    }
}

extern "C" size_t gdn_cuda_attention_workspace_bytes(const gdn_cuda_attention_args *a) {
    const size_t dq_acc = a->bwd_algo == 2 ? (size_t)a->B * a->T * a->H * a->D : 0; /* atomic dQ sums */
    return (attn::dq_acc_offset(a) + dq_acc) * sizeof(float);
}

namespace attn {
Params make_params(const gdn_cuda_attention_args *a) {
    Params p;
    memset(&p, 0, sizeof p);
    p.B = a->B;
    p.T = a->T;
    p.Tk = a->Tk ? a->Tk : a->T;
    p.qp = p.Tk - a->T;
    p.key_lo = a->key_lo;
    p.H = a->H;
    p.Hkv = a->Hkv;
    p.G = a->H / a->Hkv;
    p.scale = a->scale > 0.0f ? a->scale : 1.0f / sqrtf((float)a->D);
    p.scale_log2 = p.scale * ATTN_LOG2E;
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.o = a->o;
    p.o_out = a->o;
    p.d_o = a->d_o;
    p.dq = a->dq;
    p.dk = a->dk;
    p.dv = a->dv;
    p.lse = a->lse;
    p.delta = (float *)a->workspace;
    return p;
}
} // namespace attn

/* ---- host wrappers ------------------------------------------------------------------------- */
namespace {

struct DevBuf {
    void *p = nullptr;
    explicit DevBuf(size_t n) { GDN_CUDA_CHECK(cudaMalloc(&p, n ? n : 16)); }
    ~DevBuf() { cudaFree(p); }
    DevBuf(const DevBuf &) = delete;
    DevBuf &operator=(const DevBuf &) = delete;
};

size_t elem_bytes(gdn_cuda_precision p) { return p == GDN_CUDA_BF16 ? 2 : 4; }

/* Element size and element counts of q and o (nq), k and v (nk) and lse (nl) of a call's shape. */
struct Sizes {
    size_t es, nq, nk, nl;
    explicit Sizes(const gdn_cuda_attention_args *a)
        : es(elem_bytes(a->precision)), nq((size_t)a->B * a->T * a->H * a->D),
          nk((size_t)a->B * (a->Tk ? a->Tk : a->T) * a->Hkv * a->D), nl((size_t)a->B * a->H * a->T) {}
};

/* Device buffers of every tensor of a forward + backward call (unwritten). */
struct Buffers : Sizes {
    DevBuf q, k, v, o, lse, d_o, dq, dk, dv, ws;
    explicit Buffers(const gdn_cuda_attention_args *a)
        : Sizes(a), q(nq * es), k(nk * es), v(nk * es), o(nq * es), lse(nl * 4), d_o(nq * es), dq(nq * es),
          dk(nk * es), dv(nk * es), ws(gdn_cuda_attention_workspace_bytes(a)) {}
    /* Points the tensors of d at these buffers. */
    void bind(gdn_cuda_attention_args *d) const {
        d->q = q.p;
        d->k = k.p;
        d->v = v.p;
        d->o = o.p;
        d->lse = (float *)lse.p;
        d->d_o = d_o.p;
        d->dq = dq.p;
        d->dk = dk.p;
        d->dv = dv.p;
        d->workspace = ws.p;
    }
};

/* host float -> device act (bf16 rounded to nearest even in BF16 mode) */
void upload(void *dst, const float *src, size_t n, gdn_cuda_precision p) {
    if (p == GDN_CUDA_FP32) {
        GDN_CUDA_CHECK(cudaMemcpy(dst, src, n * 4, cudaMemcpyHostToDevice));
        return;
    }
    std::vector<__nv_bfloat16> h(n);
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16_rn(src[i]);
    GDN_CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
}
void download(float *dst, const void *src, size_t n, gdn_cuda_precision p) {
    if (p == GDN_CUDA_FP32) {
        GDN_CUDA_CHECK(cudaMemcpy(dst, src, n * 4, cudaMemcpyDeviceToHost));
        return;
    }
    std::vector<__nv_bfloat16> h(n);
    GDN_CUDA_CHECK(cudaMemcpy(h.data(), src, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) dst[i] = __bfloat162float(h[i]);
}

/* key_lo of the host wrappers, a host array [B,T]: checked before any CUDA call (the kernels
 * trust it for their tile ranges), then copied to dst (key_lo_bytes(a) bytes) */
void check_key_lo_host(const gdn_cuda_attention_args *a) {
    if (!a->key_lo) return;
    const int Tk = a->Tk > 0 ? a->Tk : a->T;
    for (int b = 0; b < a->B; b++)
        for (int t = 0; t < a->T; t++) {
            const int lo = a->key_lo[(size_t)b * a->T + t], prev = t ? a->key_lo[(size_t)b * a->T + t - 1] : 0;
            if (lo < 0 || lo > Tk - a->T + t || lo < prev)
                ATTN_DIE("key_lo[%d,%d] = %d; it must be non-decreasing along t and within 0 .. "
                         "Tk - T + t = %d (the first key query t sees)", b, t, lo, Tk - a->T + t);
        }
}

size_t key_lo_bytes(const gdn_cuda_attention_args *a) { return a->key_lo ? (size_t)a->B * a->T * sizeof(int) : 0; }
const int *upload_key_lo(void *dst, const gdn_cuda_attention_args *a) {
    if (!a->key_lo) return NULL;
    GDN_CUDA_CHECK(cudaMemcpy(dst, a->key_lo, key_lo_bytes(a), cudaMemcpyHostToDevice));
    return (const int *)dst;
}

/* every output starts as NaN (all bits set), so an element the kernels skip shows up */
void poison(void *p, size_t bytes) { GDN_CUDA_CHECK(cudaMemset(p, 0xFF, bytes)); }

} // namespace

extern "C" void gdn_cuda_attention_fwd_host(const gdn_cuda_attention_args *a, const float *q,
                                            const float *k, const float *v, float *o, float *lse) {
    check_key_lo_host(a);
    gdn_cuda_attention_args d = *a;
    const Sizes n(a);
    const size_t es = n.es, nq = n.nq, nk = n.nk, nl = n.nl;
    DevBuf bq(nq * es), bk(nk * es), bv(nk * es), bo(nq * es), bl(nl * 4), blo(key_lo_bytes(a));
    d.key_lo = upload_key_lo(blo.p, a);
    upload(bq.p, q, nq, a->precision);
    upload(bk.p, k, nk, a->precision);
    upload(bv.p, v, nk, a->precision);
    poison(bo.p, nq * es);
    poison(bl.p, nl * 4);
    d.q = bq.p;
    d.k = bk.p;
    d.v = bv.p;
    d.o = bo.p;
    d.lse = (float *)bl.p;
    d.stream = NULL;
    gdn_cuda_attention_fwd(&d);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    download(o, bo.p, nq, a->precision);
    if (lse) GDN_CUDA_CHECK(cudaMemcpy(lse, bl.p, nl * 4, cudaMemcpyDeviceToHost));
}

extern "C" void gdn_cuda_attention_bwd_host(const gdn_cuda_attention_args *a, const float *q,
                                            const float *k, const float *v, const float *d_o,
                                            float *o, float *lse, float *dq, float *dk, float *dv) {
    check_key_lo_host(a);
    gdn_cuda_attention_args d = *a;
    const Buffers b(a);
    const size_t es = b.es, nq = b.nq, nk = b.nk, nl = b.nl;
    DevBuf blo(key_lo_bytes(a));
    upload(b.q.p, q, nq, a->precision);
    upload(b.k.p, k, nk, a->precision);
    upload(b.v.p, v, nk, a->precision);
    upload(b.d_o.p, d_o, nq, a->precision);
    poison(b.o.p, nq * es);
    poison(b.lse.p, nl * 4);
    poison(b.dq.p, nq * es);
    poison(b.dk.p, nk * es);
    poison(b.dv.p, nk * es);
    poison(b.ws.p, nl * 4);
    b.bind(&d);
    d.key_lo = upload_key_lo(blo.p, a);
    d.stream = NULL;
    gdn_cuda_attention_fwd(&d);
    gdn_cuda_attention_bwd(&d);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    if (o) download(o, b.o.p, nq, a->precision);
    if (lse) GDN_CUDA_CHECK(cudaMemcpy(lse, b.lse.p, nl * 4, cudaMemcpyDeviceToHost));
    download(dq, b.dq.p, nq, a->precision);
    download(dk, b.dk.p, nk, a->precision);
    download(dv, b.dv.p, nk, a->precision);
}

/* ---- timing -------------------------------------------------------------------------------- */
namespace {
/* random act values in [-1, 1) (a fixed LCG: the same inputs every run) */
void fill_random(void *dst, size_t n, gdn_cuda_precision p, uint64_t seed) {
    std::vector<float> h(n);
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    upload(dst, h.data(), n, p);
}
double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0.0;
}
} // namespace

extern "C" void gdn_cuda_attention_time(const gdn_cuda_attention_args *shape, int warmup, int repeats,
                                        gdn_cuda_attention_timing *out) {
    gdn_cuda_attention_args d = *shape;
    d.key_lo = NULL; /* times causal attention over the whole prefix */
    const gdn_cuda_precision pr = d.precision;
    const Buffers b(&d);
    fill_random(b.q.p, b.nq, pr, 1);
    fill_random(b.k.p, b.nk, pr, 2);
    fill_random(b.v.p, b.nk, pr, 3);
    fill_random(b.d_o.p, b.nq, pr, 4);
    b.bind(&d);
    cudaStream_t st;
    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    d.stream = st;
    cudaEvent_t e0, e1, e2;
    GDN_CUDA_CHECK(cudaEventCreate(&e0));
    GDN_CUDA_CHECK(cudaEventCreate(&e1));
    GDN_CUDA_CHECK(cudaEventCreate(&e2));
    for (int i = 0; i < warmup; i++) {
        gdn_cuda_attention_fwd(&d);
        gdn_cuda_attention_bwd(&d);
    }
    std::vector<float> tf, tfb, tb;
    for (int i = 0; i < repeats; i++) {
        float a = 0, b = 0;
        GDN_CUDA_CHECK(cudaEventRecord(e0, st));
        gdn_cuda_attention_fwd(&d);
        GDN_CUDA_CHECK(cudaEventRecord(e1, st));
        gdn_cuda_attention_bwd(&d);
        GDN_CUDA_CHECK(cudaEventRecord(e2, st));
        GDN_CUDA_CHECK(cudaEventSynchronize(e2));
        GDN_CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1));
        GDN_CUDA_CHECK(cudaEventElapsedTime(&b, e1, e2));
        tf.push_back(a);
        tb.push_back(b);
        tfb.push_back(a + b);
    }
    out->fwd_ms = median(tf);
    out->bwd_ms = median(tb);
    out->fwdbwd_ms = median(tfb);
    GDN_CUDA_CHECK(cudaEventDestroy(e0));
    GDN_CUDA_CHECK(cudaEventDestroy(e1));
    GDN_CUDA_CHECK(cudaEventDestroy(e2));
    GDN_CUDA_CHECK(cudaStreamDestroy(st));
}
