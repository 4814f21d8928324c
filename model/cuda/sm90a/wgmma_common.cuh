/* Hopper (sm_90a) building blocks shared by the wgmma attention kernels: shared-memory matrix
 * descriptors for the 128-byte swizzle, the wgmma instructions they use, the fences around
 * them, and the swizzled tile loader.
 *
 * Swizzled tiles: a tile of R rows x C columns (bf16) is stored as C/64 column blocks of R rows x
 * 64 elements (128 bytes per row); the 16-byte chunk c of row r sits at chunk c ^ (r % 8) of
 * that row, and blocks start on 1024-byte boundaries (the pattern repeats every 8 rows). Such a
 * tile is a K-major operand when its columns are the reduction dimension (step to the next 8
 * rows: 1024 bytes) and an MN-major (transposed) one when its rows are (step to the next
 * 64-column block: R * 128 bytes).
 *
 * wgmma: a warpgroup (4 consecutive warps, 128 threads) computes a 64 x N fp32 product; warp w
 * of the group owns rows 16w..16w+15 and its accumulators follow the mma.sync m16n8 layout per
 * 8 columns: element 4n + e sits at row lane/4 + 8(e/2), column 8n + 2(lane%4) + e%2. An A
 * operand from registers (16 x 16 per warp per step) has the layout of those accumulators for
 * 16 consecutive columns, so a product's result (rounded to bf16) feeds the next product. */
#ifndef GDN_WGMMA_COMMON_CUH
#define GDN_WGMMA_COMMON_CUH

#include <cudaTypedefs.h> /* CUtensorMap and the driver's cuTensorMapEncodeTiled signature */
#include <type_traits>
#include "model/cuda/attention_common.cuh"

namespace attn {
namespace sm90a {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride byte
 * offsets (16-byte units). K-major: sbo = 1024 (lbo unused). MN-major: lbo = the step between
 * 64-column blocks, sbo = 1024 between 8-row groups along K. */
__device__ __forceinline__ uint64_t desc_sw128(const void *smem, unsigned lbo, unsigned sbo) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | (uint64_t)1 << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared memory written by cp.async or ordinary stores is read next by the tensor cores (the
 * async proxy): each writing thread fences before the barrier. */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Register operands of an asynchronous wgmma, fenced after its wait: the compiler must neither
 * read accumulators before the wait nor reuse the registers of A fragments until then. */
template <int N> __device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N> __device__ __forceinline__ void fence_regs_u(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[i][e])::"memory");
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* d (64 x N fp32) = (acc ? d : 0) + A (64 x 16) * B (16 x N), A and B from shared memory
 * (descriptors da, db; TA / TB 1: the operand is MN-major, i.e. read transposed). */
/* d (64 x N) = (acc ? d : 0) + A (64 x 16, registers) * B (16 x N, shared, MN-major). */
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
}
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
}
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss(float (&d)[16], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
}
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const unsigned (&a)[4], uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const unsigned (&a)[4], uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

/* A 64 x COLS fp32 accumulator (this thread's COLS/2 values) rounded to bf16 as the A operand of
 * the next product: its 16-column block kk is A fragment kk (P for P V, dS for dS K, ...). */
template <int COLS>
__device__ __forceinline__ void acc_to_frags(unsigned (&a)[COLS / 16][4], const float (&x)[COLS / 2]) {
#pragma unroll
    for (int kk = 0; kk < COLS / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[kk][i] = pack_bf16(x[8 * kk + 2 * i], x[8 * kk + 2 * i + 1]);
}

/* ROWS x COLS bf16 tile from global rows row0.. (row stride ldg elements) into the swizzled
 * layout; rows >= T are zero-filled. All NTH threads take part; the caller commits and waits. */
template <int ROWS, int COLS, int NTH>
__device__ __forceinline__ void load_sw(bf16 *s, const bf16 *g, long ldg, int row0, int T) {
    constexpr int CPR = COLS / 8, TOTAL = ROWS * CPR;
    static_assert(TOTAL % NTH == 0, "tile and block shapes must divide");
#pragma unroll
    for (int i = 0; i < TOTAL / NTH; ++i) {
        const int idx = threadIdx.x + i * NTH;
        const int r = idx / CPR, c = idx % CPR;
        const bool ok = row0 + r < T;
        bf16 *dst = s + (c >> 3) * (ROWS * 64) + r * 64 + (((c & 7) ^ (r & 7)) << 3);
        cp_async16(dst, ok ? (const void *)(g + (long)(row0 + r) * ldg + c * 8) : (const void *)g, ok);
    }
}
/* One float from global memory into shared memory (zero-filled when !valid). */
__device__ __forceinline__ void cp_async4(float *smem, const float *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0) : "memory");
}
/* mbarriers (64-bit shared-memory barriers that count arrivals and transferred bytes) and the
 * bulk tensor copy (TMA) that signals them: the producer/consumer pipeline of the
 * warp-specialised forward. A barrier's phase completes when its arrival count and expected
 * bytes are reached; waiters name the phase by its parity (0 for the first, 1 for the next). */
__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
/* After initialising barriers, before the block barrier that publishes them to the async proxy. */
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
/* One arrival that also expects `bytes` more from bulk copies in this phase. */
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/* Thread 0 initialises n_full "full" barriers (one arrival: the producer's expect_tx) followed by
 * n_empty "empty" ones (one arrival per consumer warp of two warpgroups), then the block
 * synchronises: the last block-wide barrier of a warp-specialised kernel. */
__device__ __forceinline__ void init_pipeline(uint64_t *bars, int n_full, int n_empty) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < n_full + n_empty; ++i) mbar_init(bars + i, i < n_full ? 1 : 8);
        mbar_fence_init();
    }
    __syncthreads();
}
/* Until the phase of parity `parity` has completed (on a fresh barrier, parity 1 passes at once). */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}
/* A consumer warp is done with a stage: every lane's reads of it are ordered before the warp's one
 * arrival on the stage's "empty" barrier (count: consumer warps). */
__device__ __forceinline__ void mbar_release_warp(uint64_t *bar) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(bar);
}
/* The box at coordinates (c0, c1, c2, c3) of a 4-d tensor map into shared memory, counted on bar. */
__device__ __forceinline__ void tma_load_4d(void *dst, const void *map, uint64_t *bar, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
                 ::"r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
/* A tile of ROWS x D bf16 (rows row.., head, batch b of a [B, T, heads, D] tensor map with
 * 64-column boxes) as D/64 column blocks of [ROWS][64], the layout the wgmma descriptors read. */
template <int ROWS, int D>
__device__ __forceinline__ void tma_load_tile(__nv_bfloat16 *dst, const void *map, uint64_t *bar, int head, int row,
                                              int b) {
#pragma unroll
    for (int c = 0; c < D / 64; ++c) tma_load_4d(dst + c * ROWS * 64, map, bar, 64 * c, head, row, b);
}
/* The same for a 2-d tensor map. */
__device__ __forceinline__ void tma_load_2d(void *dst, const void *map, uint64_t *bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
                 ::"r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
                 : "memory");
}
/* Registers per thread of the executing warpgroup, lowered or raised (a multiple of 8, 24..256):
 * a producer warpgroup hands registers to the consumers. */
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
/* Named block barriers 1..15 over n threads (a multiple of 32): sync waits, arrive does not. */
__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

/* Turns on the tensor cores for the two consumer warpgroups of a warp-specialised kernel
 * (threads 0..255; named barriers 1 and 2): warpgroup w waits on barrier 1 + w before it issues
 * products, and the other warpgroup arrives there once it has issued its own. Warpgroup 1 lets
 * warpgroup 0 start and skips its last arrival, so that each barrier sees as many arrivals as
 * waits. ON false: every call does nothing. */
template <bool ON> struct Turns {
    int wg, left; /* this warpgroup; its turns still to end */
    __device__ __forceinline__ Turns(int wg_, int turns) : wg(wg_), left(turns) {
        if (ON && wg == 1 && turns > 0) bar_arrive(1, 256);
    }
    __device__ __forceinline__ void begin() const {
        if (ON) bar_sync(1 + wg, 256);
    }
    __device__ __forceinline__ void end() {
        --left;
        if (ON && !(wg == 1 && left == 0)) bar_arrive(2 - wg, 256);
    }
};
/* Element (r, c) of a swizzled tile of ROWS rows. */
template <int ROWS> __device__ __forceinline__ int sw_index(int r, int c) {
    return (c >> 6) * (ROWS * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}
#endif

/* Dynamic shared memory aligned to 1024 bytes (the swizzle pattern's period). */
__device__ __forceinline__ unsigned char *smem_1024(unsigned char *raw) {
    const unsigned s0 = (unsigned)__cvta_generic_to_shared(raw);
    return raw + ((1024 - (s0 & 1023)) & 1023);
}

} // namespace sm90a

/* A bf16 tensor [B, rows, heads, D] as a 4-d tensor map for the bulk tensor copy (TMA): its box is
 * 64 columns of `box_rows` rows of one head, 128-byte swizzled (the layout of the wgmma tiles);
 * rows past the end read as zeros. */
CUtensorMap tile_map(const void *base, int B, int rows, int heads, int D, int box_rows);
/* An fp32 matrix [n, T] (lse, Delta) as a 2-d tensor map whose box is `box` consecutive entries of
 * one row; entries past T read as zeros. T must be a multiple of 4 (16-byte row strides). */
CUtensorMap row_map(const float *base, int n, int T, int box);

/* Raises `kernel`'s dynamic shared memory to smem bytes and returns its grid: `tiles` blocks for
 * each of `pairs` (batch, head) pairs, stopping with a message past the grid limit (what: the
 * tiled count, rows: the rows per tile, both for the message). */
template <class K>
inline unsigned tile_grid(K kernel, size_t smem, int tiles, int pairs, const char *what, int rows) {
    GDN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if ((double)tiles * pairs > 2147483647.0) GDN_CUDA_DIE("attention: %s/%d blocks over the grid limit", what, rows);
    return (unsigned)((long)tiles * pairs);
}

/* f(D, GEN) with head dim d (64 or 128) and gen as compile-time constants
 * (std::integral_constant), for the launchers of the kernel instantiations. */
template <class F> inline void dispatch(int d, bool gen, F &&f) {
    using std::integral_constant;
    if (d == 64) {
        if (gen) f(integral_constant<int, 64>{}, integral_constant<bool, true>{});
        else f(integral_constant<int, 64>{}, integral_constant<bool, false>{});
    } else {
        if (gen) f(integral_constant<int, 128>{}, integral_constant<bool, true>{});
        else f(integral_constant<int, 128>{}, integral_constant<bool, false>{});
    }
}

} // namespace attn

#endif
