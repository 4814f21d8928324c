/* Linear layers on cuBLASLt: row-major y = x W^T and its two backward products, with bf16 or fp32
 * operands and fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 for fp32 operands, tensor cores
 * for bf16 ones), and y = residual + x W^T with the residual read from a separate buffer
 * (cuBLASLt's D = alpha A B + beta C with C != D), which saves a copy of the residual stream.
 *
 * Descriptors and the heuristic's algorithm are built once per call shape and kept in a small
 * table in the gdn_cuda_blas object, so a shape always runs the same algorithm: repeated calls
 * give bitwise the same result, and the per-call cost is a table lookup. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/cublaslt_load.cuh"
#include "model/cuda/ops_util.cuh"

#define LT (gdn_cublaslt()) /* cuBLASLt, opened at first use */

/* A failed cuBLASLt call is fatal, reported as every other one (model/check.h). */
#define GDN_CUBLASLT_CHECK(call)                                                                  \
    do {                                                                                          \
        cublasStatus_t gdn_st_ = (call);                                                          \
        if (gdn_st_ != CUBLAS_STATUS_SUCCESS)                                                     \
            gdn_die_at(__FILE__, __LINE__, "cuBLASLt error in %s: %s", #call,                     \
                       LT->GetStatusString(gdn_st_));                                         \
    } while (0)

/* cuBLAS's recommended workspace on Hopper; with it the library needs no allocation per call. */
#define GEMM_WORKSPACE_BYTES ((size_t)32 << 20)
/* Cached call shapes. The model uses a few dozen (shape x types x pointer alignments); past this
 * the oldest entry is rebuilt, which costs a heuristic query but changes no result. */
#define GEMM_PLANS 128

/* One call in cuBLASLt's column-major terms (gemm_rm): D[m,n] = op(A) op(B) + beta C, op(A)
 * m x k, op(B) k x n. Zeroed before it is filled, so it compares with memcmp. */
typedef struct {
    int trans_a, trans_b;   /* op = transpose */
    int m, n, k;
    int lda, ldb, ldc;      /* ldc is also D's */
    int in_t, out_t;        /* cudaDataType_t of A, B and of C, D */
    int c_ne_d;             /* C and D are different buffers */
    uint32_t align[4];      /* byte alignment of the A, B, C, D pointers (a power of 2, <= 256) */
} gemm_key;

typedef struct {
    int used;
    gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c; /* c describes D too */
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

struct gdn_cuda_blas {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace;
    gemm_plan plan[GEMM_PLANS];
    int next; /* the slot the next new shape takes (round robin) */
};

static cudaDataType_t gemm_type(gdn_cuda_precision p) { return p == GDN_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* The largest power of 2 (up to 256, cuBLASLt's default assumption) that divides the address:
 * what the heuristic may assume about the pointer. */
static uint32_t ptr_align(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al) al /= 2;
    return al;
}

extern "C" gdn_cuda_blas *gdn_cuda_blas_create(void *stream) {
    gdn_cuda_blas *b = (gdn_cuda_blas *)calloc(1, sizeof *b);
    if (!b) GDN_CUDA_DIE("out of host memory creating the cuBLASLt context");
    b->stream = OPS_STREAM(stream);
    GDN_CUBLASLT_CHECK(LT->Create(&b->lt));
    GDN_CUDA_CHECK(cudaMalloc(&b->workspace, GEMM_WORKSPACE_BYTES));
    return b;
}

static void plan_destroy(gemm_plan *p) {
    if (!p->used) return;
    GDN_CUBLASLT_CHECK(LT->MatrixLayoutDestroy(p->a));
    GDN_CUBLASLT_CHECK(LT->MatrixLayoutDestroy(p->b));
    GDN_CUBLASLT_CHECK(LT->MatrixLayoutDestroy(p->c));
    GDN_CUBLASLT_CHECK(LT->MatmulDescDestroy(p->op));
    p->used = 0;
}

extern "C" void gdn_cuda_blas_free(gdn_cuda_blas *b) {
    if (!b) return;
    for (int i = 0; i < GEMM_PLANS; i++) plan_destroy(&b->plan[i]);
    GDN_CUBLASLT_CHECK(LT->Destroy(b->lt));
    GDN_CUDA_CHECK(cudaFree(b->workspace));
    free(b);
}

static const char *type_name(int t) { return t == CUDA_R_16BF ? "bf16" : "fp32"; }

/* Descriptors and the heuristic's first algorithm for key k. */
static void plan_build(gdn_cuda_blas *b, gemm_plan *p, const gemm_key *k) {
    const cublasOperation_t ta = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t in_t = (cudaDataType_t)k->in_t, out_t = (cudaDataType_t)k->out_t;
    GDN_CUBLASLT_CHECK(LT->MatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    GDN_CUBLASLT_CHECK(LT->MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    GDN_CUBLASLT_CHECK(LT->MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    /* layouts describe the stored (untransposed) matrices */
    GDN_CUBLASLT_CHECK(LT->MatrixLayoutCreate(&p->a, in_t, k->trans_a ? k->k : k->m, k->trans_a ? k->m : k->k, k->lda));
    GDN_CUBLASLT_CHECK(LT->MatrixLayoutCreate(&p->b, in_t, k->trans_b ? k->n : k->k, k->trans_b ? k->k : k->n, k->ldb));
    GDN_CUBLASLT_CHECK(LT->MatrixLayoutCreate(&p->c, out_t, k->m, k->n, k->ldc));

    cublasLtMatmulPreference_t pref;
    GDN_CUBLASLT_CHECK(LT->MatmulPreferenceCreate(&pref));
    const uint64_t ws = GEMM_WORKSPACE_BYTES;
    GDN_CUBLASLT_CHECK(LT->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        GDN_CUBLASLT_CHECK(LT->MatmulPreferenceSetAttribute(pref, align_attr[i], &k->align[i], sizeof k->align[i]));
    if (out_t == CUDA_R_16BF) { /* split-K partial sums stay fp32: no reduction in the bf16 output type */
        const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        GDN_CUBLASLT_CHECK(
            LT->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof mask));
    }
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int n_res = 0;
    const cublasStatus_t st = LT->MatmulAlgoGetHeuristic(b->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &res, &n_res);
    GDN_CUBLASLT_CHECK(LT->MatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS || n_res < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        GDN_CUDA_DIE("cuBLASLt has no algorithm for the column-major product D[%d,%d] = op%s(A) op%s(B) + beta C, "
                     "K %d, lda %d ldb %d ldc %d, %s operands, %s output, C %s D, alignment A %u B %u C %u D %u "
                     "bytes (%s)",
                     k->m, k->n, k->trans_a ? "^T" : "", k->trans_b ? "^T" : "", k->k, k->lda, k->ldb, k->ldc,
                     type_name(k->in_t), type_name(k->out_t), k->c_ne_d ? "!=" : "==", k->align[0], k->align[1],
                     k->align[2], k->align[3],
                     st != CUBLAS_STATUS_SUCCESS ? LT->GetStatusString(st) : "no heuristic result");
    p->algo = res.algo;
    p->key = *k;
    p->used = 1;
}

/* The cached plan for k, built on first use. */
static const gemm_plan *plan_get(gdn_cuda_blas *b, const gemm_key *k) {
    for (int i = 0; i < GEMM_PLANS; i++)
        if (b->plan[i].used && !memcmp(&b->plan[i].key, k, sizeof *k)) return &b->plan[i];
    gemm_plan *p = &b->plan[b->next];
    b->next = (b->next + 1) % GEMM_PLANS;
    plan_destroy(p);
    plan_build(b, p, k);
    return p;
}

/* Row-major D[M,N] = op(A) op(B) + beta C, C [M,N] with D's leading dimension (C may be D).
 * cuBLASLt is column-major, and a row-major matrix is its transpose in column-major, so this
 * computes D^T = op(B)^T op(A)^T: the row-major B is cuBLASLt's A and vice versa. */
static void gemm_rm(gdn_cuda_blas *b, int transA, int transB, int M, int N, int K,
                    const void *A, int lda, const void *B, int ldb, cudaDataType_t in_t, float beta,
                    const void *C, void *D, int ldd, cudaDataType_t out_t) {
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.trans_a = transB;
    k.trans_b = transA;
    k.m = N;
    k.n = M;
    k.k = K;
    k.lda = ldb;
    k.ldb = lda;
    k.ldc = ldd;
    k.in_t = in_t;
    k.out_t = out_t;
    k.c_ne_d = C != D;
    k.align[0] = ptr_align(B);
    k.align[1] = ptr_align(A);
    k.align[2] = ptr_align(C);
    k.align[3] = ptr_align(D);
    const gemm_plan *p = plan_get(b, &k);
    const float alpha = 1.0f;
    GDN_CUBLASLT_CHECK(LT->Matmul(b->lt, p->op, &alpha, B, p->a, A, p->b, &beta, C, p->c, D, p->c, &p->algo,
                                      b->workspace, GEMM_WORKSPACE_BYTES, b->stream));
}

/* An empty inner dimension: C = beta C, which is 0 or C itself. */
static void gemm_empty(gdn_cuda_blas *b, void *C, size_t n, gdn_cuda_precision out_p, float beta) {
    if (beta == 0.0f) GDN_CUDA_CHECK(cudaMemsetAsync(C, 0, n * gdn_cuda_act_bytes(out_p), b->stream));
}

extern "C" void gdn_cuda_linear_fwd(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                                    void *y, const void *x, const void *W, int N, int I, int O,
                                    float beta) {
    if (N <= 0 || O <= 0) return;
    if (I <= 0) return gemm_empty(b, y, (size_t)N * O, out_p, beta);
    gemm_rm(b, 0, 1, N, O, I, x, I, W, I, gemm_type(in), beta, y, y, O, gemm_type(out_p));
}

extern "C" void gdn_cuda_linear_fwd_add(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                                        void *y, const void *x, const void *W, const void *residual, int N, int I,
                                        int O) {
    if (N <= 0 || O <= 0) return;
    const size_t bytes = (size_t)N * O * gdn_cuda_act_bytes(out_p);
    const char *r = (const char *)residual, *yc = (const char *)y;
    if (r != yc && r < yc + bytes && yc < r + bytes)
        GDN_CUDA_DIE("gdn_cuda_linear_fwd_add: the residual [%d,%d] and the output overlap without being the same "
                     "buffer; pass distinct buffers, or the same one to add in place", N, O);
    if (I <= 0) {
        if (r != yc) GDN_CUDA_CHECK(cudaMemcpyAsync(y, residual, bytes, cudaMemcpyDeviceToDevice, b->stream));
        return;
    }
    gemm_rm(b, 0, 1, N, O, I, x, I, W, I, gemm_type(in), 1.0f, residual, y, O, gemm_type(out_p));
}

extern "C" void gdn_cuda_linear_bwd_dx(gdn_cuda_blas *b, gdn_cuda_precision in, gdn_cuda_precision out_p,
                                       void *dx, const void *dy, int ldy, const void *W, int N, int I, int O,
                                       float beta) {
    if (N <= 0 || I <= 0) return;
    if (O <= 0) return gemm_empty(b, dx, (size_t)N * I, out_p, beta);
    if (ldy < O) GDN_CUDA_DIE("gdn_cuda_linear_bwd_dx: dy's rows are %d apart, fewer than its %d columns", ldy, O);
    gemm_rm(b, 0, 0, N, I, O, dy, ldy, W, I, gemm_type(in), beta, dx, dx, I, gemm_type(out_p));
}

extern "C" void gdn_cuda_linear_bwd_dw(gdn_cuda_blas *b, gdn_cuda_precision in, float *dW,
                                       const void *dy, int ldy, const void *x, int N, int I, int O) {
    if (N <= 0 || I <= 0 || O <= 0) return;
    if (ldy < O) GDN_CUDA_DIE("gdn_cuda_linear_bwd_dw: dy's rows are %d apart, fewer than its %d columns", ldy, O);
    gemm_rm(b, 1, 0, O, I, N, dy, ldy, x, I, gemm_type(in), 1.0f, dW, dW, I, CUDA_R_32F);
}
