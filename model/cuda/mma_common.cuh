/* Warp-level building blocks shared by the attention kernels (attention_common.cuh) and the
 * gated-delta-rule kernels (delta_common.cuh): asynchronous 16-byte copies into shared memory,
 * ldmatrix loads of bf16 fragments, the mma.sync m16n8k16 bf16 product (fp32 accumulate) and
 * the sum over the 4 lanes of a quad (the lanes that share an accumulator row).
 *
 * Global scope, so both headers can be included from one file. The inline PTX of this header
 * is what tests/gpu/emu/gen.py replaces for the CPU emulation of the attention kernels. */
#ifndef GDN_MMA_COMMON_CUH
#define GDN_MMA_COMMON_CUH

#include <cuda_runtime.h>

/* ---- asynchronous copies -------------------------------------------------------------------- */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0; /* 0 source bytes: the 16 destination bytes are zero-filled */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ---- tensor-core fragments ------------------------------------------------------------------ */
/* Four 8x8 b16 matrices from shared memory (p: this lane's row address), plain or transposed. */
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
/* c (16x8 fp32) += a (16x16 bf16) * b (16x8 bf16, fragments b0 b1). */
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Sum over the 4 lanes that share a fragment row. */
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

#endif
