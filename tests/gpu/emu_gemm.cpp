/* The linear layers of model/cuda/ops_cuda.h on the host, in place of cuBLASLt, for the CPU
 * emulator (emu_attn.sh): act operands (bf16 or fp32), fp32 sums, the output rounded to its type
 * once. Not cuBLASLt's order of sums, so bf16 results differ from the GPU's in the last bits. */
#include "tests/gpu/emu_shim.h"
#include "model/cuda/ops_util.cuh"
struct gdn_cuda_blas { int dummy; };
extern "C" gdn_cuda_blas *gdn_cuda_blas_create(void *) { return new gdn_cuda_blas(); }
extern "C" void gdn_cuda_blas_free(gdn_cuda_blas *b) { delete b; }
static float ld(gdn_cuda_precision p, const void *a, size_t i) {
    return p == GDN_CUDA_BF16 ? __bfloat162float(((const __nv_bfloat16 *)a)[i]) : ((const float *)a)[i];
}
static void st(gdn_cuda_precision p, void *a, size_t i, float v) {
    if (p == GDN_CUDA_BF16) ((__nv_bfloat16 *)a)[i] = __float2bfloat16_rn(v);
    else ((float *)a)[i] = v;
}
/* y[N,O] = beta y (or residual) + x[N,I] W[O,I]^T */
extern "C" void gdn_cuda_linear_fwd(gdn_cuda_blas *, gdn_cuda_precision in, gdn_cuda_precision out_p, void *y,
                                    const void *x, const void *W, int N, int I, int O, float beta) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            float s = 0;
            for (int i = 0; i < I; i++) s += ld(in, x, (size_t)n * I + i) * ld(in, W, (size_t)o * I + i);
            const size_t k = (size_t)n * O + o;
            st(out_p, y, k, beta != 0.0f ? beta * ld(out_p, y, k) + s : s);
        }
}
extern "C" void gdn_cuda_linear_fwd_add(gdn_cuda_blas *, gdn_cuda_precision in, gdn_cuda_precision out_p, void *y,
                                        const void *x, const void *W, const void *res, int N, int I, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            float s = 0;
            for (int i = 0; i < I; i++) s += ld(in, x, (size_t)n * I + i) * ld(in, W, (size_t)o * I + i);
            const size_t k = (size_t)n * O + o;
            st(out_p, y, k, ld(out_p, res, k) + s);
        }
}
/* dx[N,I] = dy[N,O] W[O,I] (+ beta dx), dy's rows ldy apart */
extern "C" void gdn_cuda_linear_bwd_dx(gdn_cuda_blas *, gdn_cuda_precision in, gdn_cuda_precision out_p, void *dx,
                                       const void *dy, int ldy, const void *W, int N, int I, int O, float beta) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            float s = 0;
            for (int o = 0; o < O; o++) s += ld(in, dy, (size_t)n * ldy + o) * ld(in, W, (size_t)o * I + i);
            const size_t k = (size_t)n * I + i;
            st(out_p, dx, k, beta != 0.0f ? beta * ld(out_p, dx, k) + s : s);
        }
}
/* dW[O,I] += dy^T x, dy's rows ldy apart */
extern "C" void gdn_cuda_linear_bwd_dw(gdn_cuda_blas *, gdn_cuda_precision in, float *dW, const void *dy, int ldy,
                                       const void *x, int N, int I, int O) {
    for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) {
            float s = 0;
            for (int n = 0; n < N; n++) s += ld(in, dy, (size_t)n * ldy + o) * ld(in, x, (size_t)n * I + i);
            dW[(size_t)o * I + i] += s;
        }
}
