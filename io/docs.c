/* Documents: scanning a region for document starts and masked stretches, the greedy window
 * layout, filling a window, and the per-epoch permutation of windows (io/docs.h). */
#include "io/docs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/check.h"

/* realloc or a fatal error (as GDN_MALLOC). */
static void *grow_to(void *p, size_t bytes) {
    void *q = realloc(p, bytes);
    if (!q) GDN_DIE("out of memory (%zu bytes) laying out documents", bytes);
    return q;
}

int io_doc_opts_check(const io_doc_opts *o, int vocab_size, char *err, int err_len) {
    const int64_t ids[3] = {o->eod, o->mask_begin, o->mask_end};
    static const char *const names[3] = {"eod_token", "mask_begin", "mask_end"};
    for (int i = 0; i < 3; i++)
        if (ids[i] < -1 || (vocab_size > 0 && ids[i] >= vocab_size)) {
            snprintf(err, (size_t)err_len,
                     "%s %lld is outside the vocabulary (ids 0 to %d; -1 = none): use the id "
                     "the data were written with",
                     names[i], (long long)ids[i], vocab_size - 1);
            return -1;
        }
    if ((o->mask_begin < 0) != (o->mask_end < 0)) {
        snprintf(err, (size_t)err_len,
                 "mask_begin and mask_end go together (got %lld and %lld): give both ids, or -1 "
                 "for both (no masking)",
                 (long long)o->mask_begin, (long long)o->mask_end);
        return -1;
    }
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (ids[i] >= 0 && ids[i] == ids[j]) {
                snprintf(err, (size_t)err_len, "%s and %s are both %lld: each needs its own id",
                         names[i], names[j], (long long)ids[i]);
                return -1;
            }
    return 0;
}

/* Growable arrays. */
#define GROW(p, n, cap)                                                                            \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? 2 * (cap) : 64;                                                        \
            (p) = grow_to((p), (cap) * sizeof *(p));                                           \
        }                                                                                          \
    } while (0)

void io_doc_layout_free(io_doc_layout *L) {
    free(L->span);
    free(L->off);
    free(L->len);
    free(L->count);
    free(L->mlo);
    free(L->mhi);
    free(L->mfirst);
    memset(L, 0, sizeof *L);
}

typedef struct {
    uint64_t *v;
    size_t n, cap;
} u64_list;

static void push_mask(io_doc_layout *L, size_t *cap, uint64_t lo, uint64_t hi) {
    if (L->n_mask == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        L->mlo = grow_to(L->mlo, *cap * sizeof *L->mlo);
        L->mhi = grow_to(L->mhi, *cap * sizeof *L->mhi);
    }
    L->mlo[L->n_mask] = lo;
    L->mhi[L->n_mask++] = hi;
}

/* Pass 1 over span s: document starts into st, masked stretches into L. */
static int scan_span(io_doc_layout *L, size_t *mcap, u64_list *st, const io_token_span *sp,
                     size_t base, int tail_cut, const io_doc_opts *o, char *err, int err_len) {
    const int64_t eod = o->eod, mb = o->mask_begin, me = o->mask_end;
    int open = 0, boundary = 0; /* a stretch is open; a start or marker was seen */
    uint64_t open_at = 0;
    st->n = 0;
    GROW(st->v, st->n, st->cap);
    st->v[st->n++] = 0;
    for (size_t q = 0; q < sp->n; q++) {
        const int64_t v = io_span_at(sp, q);
        if (v == eod) {
            if (open) {
                snprintf(err, (size_t)err_len,
                         "%s: the masked stretch opened at token %zu (mask_begin %lld) is not "
                         "closed (mask_end %lld) before the document that starts at token %zu: "
                         "close every stretch inside its document",
                         sp->name, base + (size_t)open_at, (long long)mb, (long long)me, base + q);
                return -1;
            }
            if (q > 0) {
                GROW(st->v, st->n, st->cap);
                st->v[st->n++] = q;
            }
            boundary = 1;
        } else if (v == mb) {
            if (open) {
                snprintf(err, (size_t)err_len,
                         "%s: token %zu opens a masked stretch (mask_begin %lld) inside the one "
                         "opened at token %zu: stretches do not nest; close it (mask_end %lld) "
                         "first",
                         sp->name, base + q, (long long)mb, base + (size_t)open_at, (long long)me);
                return -1;
            }
            open = 1, open_at = q, boundary = 1;
        } else if (v == me) {
            if (open) {
                push_mask(L, mcap, open_at, q);
                open = 0;
            } else if (base > 0 && !boundary) {
                push_mask(L, mcap, 0, q); /* the region cut the file inside this stretch */
            } else {
                snprintf(err, (size_t)err_len,
                         "%s: token %zu closes a masked stretch (mask_end %lld) that was never "
                         "opened (mask_begin %lld) in its document",
                         sp->name, base + q, (long long)me, (long long)mb);
                return -1;
            }
            boundary = 1;
        }
    }
    if (open) {
        if (!tail_cut) {
            snprintf(err, (size_t)err_len,
                     "%s: the masked stretch opened at token %zu (mask_begin %lld) is not closed "
                     "(mask_end %lld) before the end of the file",
                     sp->name, base + (size_t)open_at, (long long)mb, (long long)me);
            return -1;
        }
        push_mask(L, mcap, open_at, sp->n - 1);
    }
    L->n_docs += st->n;
    return 0;
}

/* Masked targets among positions [a, b] of a span whose stretches are [first, last); *mi is a
 * cursor that only moves forward (windows come in order). */
static uint64_t masked_in(const io_doc_layout *L, size_t *mi, size_t last, uint64_t a, uint64_t b) {
    while (*mi < last && L->mhi[*mi] < a) (*mi)++;
    uint64_t n = 0;
    for (size_t i = *mi; i < last && L->mlo[i] <= b; i++) {
        uint64_t lo = L->mlo[i] > a ? L->mlo[i] : a, hi = L->mhi[i] < b ? L->mhi[i] : b;
        n += hi - lo + 1;
    }
    return n;
}

int io_doc_layout_build(io_doc_layout *L, const io_token_span *spans, int n_spans,
                        const size_t *file_off, const unsigned char *tail_cut, int T,
                        const io_doc_opts *o, char *err, int err_len) {
    memset(L, 0, sizeof *L);
    GDN_ASSERT(T >= 1);
    L->mfirst = GDN_CALLOC((size_t)n_spans + 1, sizeof *L->mfirst);
    u64_list st = {0};
    size_t mcap = 0, wcap = 0;
    for (int s = 0; s < n_spans; s++) {
        const io_token_span *sp = &spans[s];
        L->mfirst[s] = L->n_mask;
        if (scan_span(L, &mcap, &st, sp, file_off[s], tail_cut[s], o, err, err_len)) {
            free(st.v);
            io_doc_layout_free(L);
            return -1;
        }
        L->mfirst[s + 1] = L->n_mask;
        const uint64_t n = sp->n;
        size_t j = 0, mi = L->mfirst[s];
        for (uint64_t p = 0; p + 1 < n;) {
            uint64_t len, next;
            if (n - 1 - p <= (uint64_t)T) {
                len = n - 1 - p, next = n; /* the rest of the file */
            } else if (o->fill) {
                len = (uint64_t)T, next = p + (uint64_t)T; /* every window full */
            } else {
                while (j + 1 < st.n && st.v[j + 1] <= p + (uint64_t)T) j++;
                if (st.v[j] > p) len = st.v[j] - p, next = st.v[j]; /* whole documents */
                else len = (uint64_t)T, next = p + (uint64_t)T;     /* a split document */
            }
            uint64_t count = len - masked_in(L, &mi, L->mfirst[s + 1], p + 1, p + len);
            if (count > 0) {
                if (L->n == wcap) {
                    wcap = wcap ? 2 * wcap : 64;
                    L->span = grow_to(L->span, wcap * sizeof *L->span);
                    L->off = grow_to(L->off, wcap * sizeof *L->off);
                    L->len = grow_to(L->len, wcap * sizeof *L->len);
                    L->count = grow_to(L->count, wcap * sizeof *L->count);
                }
                L->span[L->n] = s;
                L->off[L->n] = p;
                L->len[L->n] = (uint32_t)len;
                L->count[L->n++] = (uint32_t)count;
                L->counted += count;
            }
            p = next;
        }
    }
    free(st.v);
    return 0;
}

void io_doc_window(const io_doc_layout *L, const io_token_span *spans, uint64_t k, int T,
                   const io_doc_opts *o, int *tokens, int *targets, unsigned char *starts) {
    GDN_ASSERT(k < L->n);
    const int s = L->span[k];
    const io_token_span *sp = &spans[s];
    const uint64_t off = L->off[k], len = L->len[k];
    const size_t have = sp->n - off, m = have < (size_t)T + 1 ? have : (size_t)T + 1;
    io_span_copy(sp, (size_t)off, m, tokens);
    for (size_t i = m; i <= (size_t)T; i++) tokens[i] = o->eod >= 0 ? (int)o->eod : 0;
    for (int i = 0; i < T; i++) {
        targets[i] = (uint64_t)i < len ? tokens[i + 1] : -1;
        starts[i] = i == 0 || (size_t)i == m || ((size_t)i < m && o->eod >= 0 && tokens[i] == o->eod);
    }
    /* masked stretches: the first whose end reaches the window's first target, onwards */
    size_t lo = L->mfirst[s], hi = L->mfirst[s + 1];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (L->mhi[mid] < off + 1) lo = mid + 1;
        else hi = mid;
    }
    for (size_t i = lo; i < L->mfirst[s + 1] && L->mlo[i] <= off + len; i++) {
        uint64_t a = L->mlo[i] > off + 1 ? L->mlo[i] : off + 1;
        uint64_t b = L->mhi[i] < off + len ? L->mhi[i] : off + len;
        for (uint64_t q = a; q <= b; q++) targets[q - off - 1] = -1;
    }
}

/* splitmix64's output function: a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t io_doc_permute(uint64_t seed, uint64_t g, uint64_t n) {
    GDN_ASSERT(n >= 1);
    const uint64_t epoch = g / n;
    uint64_t x = g % n;
    if (n == 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1);
    if (bits & 1) bits++;
    const int half = bits / 2;
    const uint64_t mask = (UINT64_C(1) << half) - 1;
    uint64_t key[4];
    for (int r = 0; r < 4; r++)
        key[r] = mix64(mix64(seed ^ 0x6A09E667F3BCC909ull) + epoch * 4 + (uint64_t)r + 1);
    /* a 4-round Feistel network on 2^bits values, walked until it lands below n (a bijection
     * of [0, n): every step of the walk stays on x's cycle) */
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int k = 0; k < 4; k++) {
            uint64_t f = mix64(r ^ key[k]) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}
