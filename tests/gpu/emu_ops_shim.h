/* What model/cuda/ops_util.cuh needs beyond the CPU emulator's headers (tests/gpu/emu): the
 * 16-byte vector types and the bf16 pair conversion (the emulated ops use none of them at run
 * time except through ops_ldv / ops_stv, which the emulated kernels do not call). */
#include <stdlib.h>

#include "cuda_runtime.h"
struct float4 { float x, y, z, w; };
struct uint4 { unsigned x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { float4 r = {a, b, c, d}; return r; }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) {
    return make_float2(__bfloat162float(h.x), __bfloat162float(h.y));
}
static inline double __shfl_xor_sync(unsigned, double, int) { abort(); } /* double sums: not emulated */
