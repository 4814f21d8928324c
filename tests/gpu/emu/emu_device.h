/* Device side of the CPU emulator (see run.sh): the CUDA keywords as host C++, threadIdx per
 * coroutine, bf16 with round-to-nearest-even, and the barrier / warp-collective entry points
 * implemented in emu_rt.cpp. */
#ifndef EMU_DEVICE_H
#define EMU_DEVICE_H
#include <string.h>
#include <functional>
#include <algorithm>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__

struct uint3_ { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct EmuThread;
extern EmuThread *emu_cur;
uint3_ &emu_tid();
#define threadIdx (emu_tid())
extern uint3_ blockIdx, gridDim, blockDim;
static inline int min(int a, int b) { return a < b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
template <typename V> static inline V __ldg(const V *p) { return *p; }

/* bf16 */
struct __nv_bfloat16 { uint16_t x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { __nv_bfloat16 r; r.x = 0x7fc0; return r; }
    u += 0x7FFFu + ((u >> 16) & 1u);
    __nv_bfloat16 r; r.x = (uint16_t)(u >> 16); return r;
}
static inline float __bfloat162float(__nv_bfloat16 h) { uint32_t u = (uint32_t)h.x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { __nv_bfloat162 r; r.x = __float2bfloat16_rn(a); r.y = __float2bfloat16_rn(b); return r; }

struct float2 { float x, y; };
static inline float2 make_float2(float a, float b) { float2 r; r.x = a; r.y = b; return r; }
struct uint4 { unsigned x, y, z, w; };
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2(__bfloat162float(h.x), __bfloat162float(h.y)); }
void __syncthreads();
float __shfl_xor_sync(unsigned mask, float x, int o);
float __shfl_up_sync(unsigned mask, float x, int o);
int __shfl_up_sync(unsigned mask, int x, int o);
static inline int __ffs(int x) { return __builtin_ffs(x); }
void emu_ldsm(unsigned (&r)[4], const void *p, bool trans);
void emu_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
void emu_cp16(void *s, const void *g, bool valid);
unsigned char *emu_smem();
void emu_run_grid(dim3 grid, dim3 block, size_t smem, std::function<void()> fn);
template <typename K> cudaError_t cudaFuncSetAttribute(K, int, int) { return cudaSuccess; }
#define cudaFuncAttributeMaxDynamicSharedMemorySize 0
#define EMU_LAUNCH(kern, grid, block, smem, st, arg) emu_run_grid(dim3(grid), dim3(block), smem, [&]() { kern(arg); })
#endif
