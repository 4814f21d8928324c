/* The Hopper-only (sm_90a: wgmma) attention kernels, compiled for the "90a" architecture when
 * the build targets 90 (CMakeLists.txt). Everything else reaches them through
 * gdn_cuda_attention_fwd / _bwd, which ask gdn_cuda_attention_sm90a_available() first
 * (attention_cuda.h). */
#ifndef GDN_ATTENTION_SM90A_H
#define GDN_ATTENTION_SM90A_H

#include "model/cuda/attention_common.cuh"

namespace attn {
/* Block order of the wgmma kernels: blocks run in sections of `heads` (b, head) pairs whose keys
 * and values fit in the L2 cache together; within a section the longest tiles come first
 * (causal attention: tile lengths differ up to T / 128 times), so the last blocks of the grid
 * are short and the section's keys and values stay in the cache. */
struct BlockOrder {
    int tiles, heads, n_heads; /* tiles per head, heads per section, (b, head) pairs in all */
    /* block `bid` -> its tile rank (0: the longest) and its (b, head) pair */
    __device__ __forceinline__ void map(int bid, int &rank, int &pair) const {
        const int per = heads * tiles, sec = bid / per, r = bid % per;
        const int in_sec = min(heads, n_heads - sec * heads);
        rank = r / in_sec;
        pair = sec * heads + r % in_sec;
    }
};
/* The query tile of block `bid` in a kernel with one block per BMQ-row query tile (later tiles,
 * which are longer, first): sequence b, query head h, rows q0 .. q0 + BMQ - 1, and the key tiles
 * of BNK rows that those rows see, j0 .. j0 + nt - 1 (from key_lo of its first row to the last
 * row's causal limit). */
template <int BMQ, int BNK>
__device__ __forceinline__ void query_tile(const Params &p, const BlockOrder &order, int bid, int &b, int &h, int &q0,
                                           int &j0, int &nt) {
    int rank, pair;
    order.map(bid, rank, pair);
    const int qt = order.tiles - 1 - rank;
    h = pair % p.H;
    b = pair / p.H;
    q0 = qt * BMQ;
    j0 = key_lo_at(p, b, q0) / BNK;
    nt = (p.qp + min(p.T, q0 + BMQ) + BNK - 1) / BNK - j0;
}
/* The order for n_heads pairs of `tiles` tiles whose keys and values take kv_bytes each. */
BlockOrder block_order(int tiles, int n_heads, size_t kv_bytes);
/* bf16 forward, D 64 or 128, asynchronous on stream (a cudaStream_t). kernel 0: every thread
 * loads tiles (cp.async) between block barriers; 1: warp-specialised (a producer warp streams
 * tiles by TMA into mbarrier stages) with the consumer warpgroups taking turns on the tensor
 * cores; 2: the same without turns. 1 and 2 need sm90a_ws_usable(p, WS_FWD). */
void sm90a_fwd(const Params &p, int D, int kernel, void *stream);
/* The warp-specialised kernels, by what their bulk tensor copies read. */
enum WsKernel { WS_FWD, WS_DQ, WS_DKDV };
/* Whether the tensors suit the bulk tensor copies of kernel `k`: q, k, v (WS_DQ, WS_DKDV: also
 * d_o; WS_DKDV: also lse and Delta) 16-byte aligned; WS_DKDV also needs T a multiple of 4 (the
 * rows of lse and Delta). */
bool sm90a_ws_usable(const Params &p, WsKernel k);
/* bf16 backward, D 64 or 128: reads p.delta (rowsum(d_o * o), computed by the caller); writes
 * p.dq, p.dk, p.dv. dq_acc NULL: two kernels (dK, dV per key tile, then dQ per query tile),
 * bitwise repeatable. Else one kernel that adds dQ into dq_acc (B*T*H*D floats of scratch,
 * zeroed here) with atomics: faster, dq repeatable only to rounding. */
/* kv_kernel and dq_kernel (the two-kernel path: the dK/dV kernel, then the dQ kernel): 0 every
 * thread loads tiles between block barriers; 1 and 2 warp-specialised as in sm90a_fwd (with and
 * without turns; need sm90a_ws_usable(p, WS_DKDV) and (p, WS_DQ)). Every choice gives the same
 * bits. */
void sm90a_bwd(const Params &p, int D, float *dq_acc, int kv_kernel, int dq_kernel, void *stream);
} // namespace attn

#endif
