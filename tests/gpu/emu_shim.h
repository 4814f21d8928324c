/* What the model's CUDA sources need beyond the CPU emulator's headers (tests/gpu/emu), for
 * emu_attn.sh: the 16-byte vector types, the bf16 pair conversion, the double and no-value warp
 * collectives (on the emulator's float shuffle), and the asynchronous copies as synchronous ones
 * (the emulator runs everything in order on the host). */
#ifndef GDN_EMU_SHIM_H
#define GDN_EMU_SHIM_H
#include <stdlib.h>
#include <string.h>

#include "cuda_runtime.h"
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { float4 r = {a, b, c, d}; return r; }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) {
    return make_float2(__bfloat162float(h.x), __bfloat162float(h.y));
}
/* a double as two floats' bits (moves keep every bit pattern) */
static inline double __shfl_xor_sync(unsigned m, double x, int o) {
    float a[2], r[2];
    memcpy(a, &x, 8);
    r[0] = __shfl_xor_sync(m, a[0], o);
    r[1] = __shfl_xor_sync(m, a[1], o);
    double y;
    memcpy(&y, r, 8);
    return y;
}
static inline void __syncwarp(unsigned m = 0xffffffffu) { (void)__shfl_xor_sync(m, 0.0f, 0); }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t) {
    return cudaMemcpy(d, s, n, k);
}
static inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { return cudaMemset(d, v, n); }
static inline cudaError_t cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind,
                                            cudaStream_t) {
    abort(); /* sequence parallelism: not emulated */
}
static inline cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    *f = 1;
    *t = 2;
    return cudaSuccess;
}
#endif
