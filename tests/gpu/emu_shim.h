/* What the model's CUDA sources need beyond the CPU emulator's headers (tests/gpu/emu), for
 * emu_attn.sh: float4, uint2 and bit casts, the double and no-value warp
 * collectives (on the emulator's float shuffle) and the memory query. */
#ifndef GDN_EMU_SHIM_H
#define GDN_EMU_SHIM_H
#include <stdlib.h>
#include <string.h>

#include "cuda_runtime.h"
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { float4 r = {a, b, c, d}; return r; }
/* the delta rule's per-chunk document bounds (delta_common.cuh) */
struct int4 { int x, y, z, w; };
static inline int4 make_int4(int a, int b, int c, int d) { int4 r = {a, b, c, d}; return r; }
/* the short convolution's raw loads (ops_conv.cu) */
struct uint2 { unsigned x, y; };
static inline uint2 make_uint2(unsigned a, unsigned b) { uint2 r = {a, b}; return r; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { uint4 r = {a, b, c, d}; return r; }
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
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
/* what the delta rule's host code asks of the runtime (emu_delta.sh): an H200's limits */
enum cudaDeviceAttr {
    cudaDevAttrMaxSharedMemoryPerBlockOptin,
    cudaDevAttrMultiProcessorCount,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor
};
static inline cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    *v = a == cudaDevAttrMultiProcessorCount ? 132 : a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 232448 : 233472;
    return cudaSuccess;
}
struct cudaFuncAttributes { int numRegs; };
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *fa, const void *) {
    fa->numRegs = 128;
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceGetStreamPriorityRange(int *lo, int *hi) {
    *lo = *hi = 0;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned, int) {
    *s = nullptr;
    return cudaSuccess;
}
#define cudaFuncAttributePreferredSharedMemoryCarveout 1
#define cudaSharedmemCarveoutMaxShared 100
static inline void __syncwarp(unsigned m = 0xffffffffu) { (void)__shfl_xor_sync(m, 0.0f, 0); }
static inline cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    *f = 1;
    *t = 2;
    return cudaSuccess;
}
#endif
