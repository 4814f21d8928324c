/* Shared by the single-GPU test programs (plain C; one translation unit each): checked CUDA
 * calls (CK: model/cuda/cuda_check.h's GDN_CUDA_CHECK), a host malloc that exits when memory
 * runs out, and the round-to-nearest-even bf16 value of a float, as the kernels store it. */
#ifndef GDN_TESTS_GPU_TEST_UTIL_H
#define GDN_TESTS_GPU_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/cuda/cuda_check.h"

#define CK(call) GDN_CUDA_CHECK(call)

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static inline float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even */
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

#endif
