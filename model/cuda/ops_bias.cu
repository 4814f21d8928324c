/* Projection biases (attention layers with qkv_bias): the forward's broadcast add and the
 * gradient's column sums.
 *
 * Column sums: a block of 32 x BIAS_TY threads owns 32 columns of one chunk of rows (BIAS_ROWS);
 * thread (x, y) = (threadIdx.x % 32, threadIdx.x / 32) sums rows y, y + BIAS_TY, .. of the chunk
 * in order, the BIAS_TY sums are added
 * in y order into the chunk's partial, and the chunks' partials in chunk order
 * (ops_reduce_partials, in double). The same bits on every run. */
#include "model/cuda/ops_util.cuh"

#define BIAS_TY 8
#define BIAS_ROWS 256

template <typename T> __global__ void k_bias_add(T *y, const float *b, size_t n, int C) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        ops_st(y, i, ops_ld(y, i) + b[i % (size_t)C]);
}

template <typename T> __global__ void k_bias_grad(float *part, const T *dy, int N, int C, int rows) {
    __shared__ float red[BIAS_TY][32];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, j = blockIdx.x * 32 + tx, chunk = blockIdx.y;
    const long r0l = (long)chunk * rows;
    const int r0 = (int)r0l, r1 = r0l + rows < N ? (int)(r0l + rows) : N;
    float acc = 0.0f;
    if (j < C)
        for (int r = r0 + ty; r < r1; r += BIAS_TY) acc += ops_ld(dy, (size_t)r * C + j);
    red[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && j < C) {
        float s = 0.0f;
        for (int v = 0; v < BIAS_TY; v++) s += red[v][tx];
        part[(size_t)chunk * C + j] = s;
    }
}

extern "C" void gdn_cuda_bias_add(gdn_cuda_precision p, void *y, const float *b, int N, int C, void *stream) {
    const size_t n = (size_t)(N > 0 ? N : 0) * (size_t)(C > 0 ? C : 0);
    if (!n) return;
    OPS_DISPATCH(p, T, k_bias_add<T><<<ops_grid(n, 256), 256, 0, OPS_STREAM(stream)>>>((T *)y, b, n, C));
    GDN_CUDA_CHECK_LAUNCH();
}

/* Rows per chunk: BIAS_ROWS, doubled until the chunks fit the grid's y dimension. */
static int bias_rows(int N) {
    int rows = BIAS_ROWS;
    while ((N + (long)rows - 1) / rows > 65535) rows *= 2;
    return rows;
}

extern "C" size_t gdn_cuda_bias_grad_workspace(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    const int rows = bias_rows(N);
    return (size_t)((N + (long)rows - 1) / rows) * (size_t)C * sizeof(float);
}

extern "C" void gdn_cuda_bias_grad(gdn_cuda_precision p, float *db, const void *dy, int N, int C, void *ws,
                                   void *stream) {
    if (N <= 0 || C <= 0) return;
    const int rows = bias_rows(N), chunks = (int)((N + (long)rows - 1) / rows);
    const dim3 grid((unsigned)((C + 31) / 32), (unsigned)chunks);
    const int block = 32 * BIAS_TY;
    float *part = (float *)ws;
    OPS_DISPATCH(p, T, k_bias_grad<T><<<grid, block, 0, OPS_STREAM(stream)>>>(part, (const T *)dy, N, C, rows));
    GDN_CUDA_CHECK_LAUNCH();
    ops_reduce_partials(db, part, chunks, C, OPS_STREAM(stream));
}
