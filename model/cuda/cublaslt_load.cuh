/* cuBLASLt, opened with dlopen when the first GEMM handle is made instead of linked: the
 * library's load-time initialisers take about half a second, which every gdn command paid at
 * start, on machines without a GPU too (inspect, eval, the CPU backend). The functions gdn calls,
 * one list, without their common prefix: cublasLtMatmul is gdn_cublaslt()->Matmul, with the
 * library's own signature. */
#ifndef GDN_CUBLASLT_LOAD_CUH
#define GDN_CUBLASLT_LOAD_CUH

#include <cublasLt.h>

#define GDN_CUBLASLT_FUNCS(X)                                                                      \
    X(Create)                                                                                      \
    X(Destroy)                                                                                     \
    X(GetStatusString)                                                                             \
    X(Matmul)                                                                                      \
    X(MatmulAlgoGetHeuristic)                                                                      \
    X(MatmulDescCreate)                                                                            \
    X(MatmulDescDestroy)                                                                           \
    X(MatmulDescSetAttribute)                                                                      \
    X(MatmulPreferenceCreate)                                                                      \
    X(MatmulPreferenceDestroy)                                                                     \
    X(MatmulPreferenceSetAttribute)                                                                \
    X(MatrixLayoutCreate)                                                                          \
    X(MatrixLayoutDestroy)

typedef struct {
#define GDN_CUBLASLT_MEMBER(name) decltype(&::cublasLt##name) name;
    GDN_CUBLASLT_FUNCS(GDN_CUBLASLT_MEMBER)
#undef GDN_CUBLASLT_MEMBER
} gdn_cublaslt_api;

/* The library's functions, loaded on the first call (thread-safe); a library that cannot be
 * opened, or lacks one of them, stops the program with a message naming every path tried. */
const gdn_cublaslt_api *gdn_cublaslt(void);

#endif
