/* The BPE merge loop: a piece's bytes start as single-byte ids; the adjacent pair of lowest merge
 * rank (leftmost among equals) is merged until no pair has a merge. This is tokenizers'
 * algorithm (a priority queue of candidate merges over a linked list of symbols, stale entries
 * skipped), so its results are the same. Pieces recur (words), so a small cache per encoder
 * remembers recent results. */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

#define CACHE_SLOTS (1u << 15)
#define CACHE_BYTES 30
#define CACHE_IDS 14

typedef struct {
    uint64_t hash;
    uint8_t len, n_ids; /* len 0: empty */
    unsigned char bytes[CACHE_BYTES];
    uint32_t ids[CACHE_IDS];
} cache_slot;

typedef struct {
    uint32_t rank, pos, id;
} cand;

struct tok_bpe_scratch {
    cache_slot *cache;
    uint32_t *sym;      /* symbol ids */
    int32_t *prev, *next;
    unsigned char *dead;
    cand *heap;
    size_t cap, heap_cap;
};

tok_bpe_scratch *tok_bpe_new(void) {
    tok_bpe_scratch *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cache = calloc(CACHE_SLOTS, sizeof *s->cache);
    if (!s->cache) {
        free(s);
        return NULL;
    }
    return s;
}

void tok_bpe_free(tok_bpe_scratch *s) {
    if (!s) return;
    free(s->cache), free(s->sym), free(s->prev), free(s->next), free(s->dead), free(s->heap);
    free(s);
}

int tok_ids_push(io_ids *v, uint32_t id) {
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 256;
        uint32_t *ids = realloc(v->ids, c * sizeof *ids);
        if (!ids) return -1;
        v->ids = ids, v->cap = c;
    }
    v->ids[v->n++] = id;
    return 0;
}

void io_ids_free(io_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static int less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(tok_bpe_scratch *s, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!less(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static cand heap_pop(tok_bpe_scratch *s, size_t *n) {
    cand top = s->heap[0], last = s->heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (*n) s->heap[i] = last;
    return top;
}

static int reserve(tok_bpe_scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t c = s->cap ? s->cap : 64;
    while (c < n) c *= 2;
    uint32_t *sym = realloc(s->sym, c * sizeof *sym);
    if (sym) s->sym = sym;
    int32_t *prev = realloc(s->prev, c * sizeof *prev);
    if (prev) s->prev = prev;
    int32_t *next = realloc(s->next, c * sizeof *next);
    if (next) s->next = next;
    unsigned char *dead = realloc(s->dead, c);
    if (dead) s->dead = dead;
    /* every pair merge pushes at most two candidates: n - 1 initial + 2 per merge */
    cand *heap = realloc(s->heap, 3 * c * sizeof *heap);
    if (heap) s->heap = heap;
    if (!sym || !prev || !next || !dead || !heap) return -1;
    s->cap = c;
    return 0;
}

static void push_pair(const io_tokenizer *t, tok_bpe_scratch *s, size_t *hn, int32_t pos) {
    int32_t nx = s->next[pos];
    if (nx < 0) return;
    const tok_merge *m = tok_merge_find(t, s->sym[pos], s->sym[nx]);
    if (m) heap_push(s, hn, (cand){m->rank, (uint32_t)pos, m->id});
}

static int merge(const io_tokenizer *t, tok_bpe_scratch *s, const unsigned char *p, size_t n,
                 io_ids *out) {
    if (n > INT32_MAX / 4 || reserve(s, n)) return -1;
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = t->byte_id[p[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        s->dead[i] = 0;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, s, &hn, (int32_t)i);
    while (hn) {
        cand c = heap_pop(s, &hn);
        int32_t pos = (int32_t)c.pos, nx = s->next[pos];
        if (s->dead[pos] || nx < 0) continue;
        const tok_merge *m = tok_merge_find(t, s->sym[pos], s->sym[nx]);
        if (!m || m->id != c.id) continue; /* stale: one side has merged since */
        s->sym[pos] = c.id;
        s->dead[nx] = 1;
        s->next[pos] = s->next[nx];
        if (s->next[nx] >= 0) s->prev[s->next[nx]] = pos;
        if (s->prev[pos] >= 0) push_pair(t, s, &hn, s->prev[pos]);
        push_pair(t, s, &hn, pos);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (tok_ids_push(out, s->sym[i])) return -1;
    return 0;
}

int tok_bpe_piece(const io_tokenizer *t, tok_bpe_scratch *s, const unsigned char *p, size_t n,
                  io_ids *out) {
    if (n == 0) return 0;
    if (n == 1) return tok_ids_push(out, t->byte_id[p[0]]);
    cache_slot *slot = NULL;
    uint64_t h = 0;
    if (n <= CACHE_BYTES) {
        h = tok_hash_bytes(p, n);
        slot = &s->cache[h & (CACHE_SLOTS - 1)];
        if (slot->len == n && slot->hash == h && memcmp(slot->bytes, p, n) == 0) {
            for (int i = 0; i < slot->n_ids; i++)
                if (tok_ids_push(out, slot->ids[i])) return -1;
            return 0;
        }
    }
    size_t first = out->n;
    uint32_t whole = t->ignore_merges ? tok_vocab_find(t, p, n) : TOK_NO_ID;
    if (whole != TOK_NO_ID) { /* a piece that is a whole vocabulary entry is that entry */
        if (tok_ids_push(out, whole)) return -1;
    } else if (merge(t, s, p, n, out)) return -1;
    size_t got = out->n - first;
    if (slot && got <= CACHE_IDS) {
        slot->hash = h;
        slot->len = (uint8_t)n;
        slot->n_ids = (uint8_t)got;
        memcpy(slot->bytes, p, n);
        memcpy(slot->ids, out->ids + first, got * sizeof *out->ids);
    }
    return 0;
}
