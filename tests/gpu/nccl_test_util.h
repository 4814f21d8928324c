/* Shared by the multi-rank GPU test programs (one translation unit each, run under mpiexec):
 * this process's rank (set it after joining the job) and a check that counts failures, naming
 * the rank, file and line. A program ends with a nonzero status when any check failed. */
#ifndef GDN_TESTS_GPU_NCCL_TEST_UTIL_H
#define GDN_TESTS_GPU_NCCL_TEST_UTIL_H

#include <stdio.h>

static int failures = 0;
static int rank;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            failures++;                                                         \
        }                                                                       \
    } while (0)

#endif
