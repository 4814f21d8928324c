/* Checked CUDA calls for the .cu files (and the GPU tests): any failure is fatal and goes through
 * gdn_die_at (model/check.h), like every other fatal error: "gdn: error (FILE:LINE): CUDA error
 * in CALL: STRING" and exit status 1, or the installed handler (an MPI job: gdn_comm_abort takes
 * every rank down with the message). A failed launch leaves no state worth recovering. */
#ifndef GDN_CUDA_CHECK_H
#define GDN_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "model/check.h"

#define GDN_CUDA_CHECK(call)                                                                          \
    do {                                                                                              \
        cudaError_t gdn_err_ = (call);                                                                \
        if (gdn_err_ != cudaSuccess)                                                                  \
            gdn_die_at(__FILE__, __LINE__, "CUDA error in %s: %s", #call, cudaGetErrorString(gdn_err_)); \
    } while (0)

/* After a kernel launch: launch-configuration errors surface here, execution errors at the
 * next synchronising call. */
#define GDN_CUDA_CHECK_LAUNCH() GDN_CUDA_CHECK(cudaGetLastError())

/* A fatal error with a printf message (bad input, out of memory). */
#define GDN_CUDA_DIE(...) gdn_die_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
