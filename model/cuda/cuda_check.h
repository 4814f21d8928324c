/* Checked CUDA / cuBLAS calls for the .cu files: any failure prints file:line, the call and the
 * error string, then exits with status 1 (a failed launch leaves no state worth recovering). */
#ifndef GDN_CUDA_CHECK_H
#define GDN_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define GDN_CUDA_CHECK(call)                                                                   \
    do {                                                                                       \
        cudaError_t gdn_err_ = (call);                                                         \
        if (gdn_err_ != cudaSuccess) {                                                         \
            fprintf(stderr, "gdn: CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call,   \
                    cudaGetErrorString(gdn_err_));                                             \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* After a kernel launch: launch-configuration errors surface here, execution errors at the
 * next synchronising call. */
#define GDN_CUDA_CHECK_LAUNCH() GDN_CUDA_CHECK(cudaGetLastError())

#define GDN_CUDA_DIE(...)                                                                      \
    do {                                                                                       \
        fprintf(stderr, "gdn: error at %s:%d: ", __FILE__, __LINE__);                          \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fputc('\n', stderr);                                                                   \
        exit(1);                                                                               \
    } while (0)

#endif
