/* Shared by the MPI test programs (one translation unit each): the start of the world, a check
 * that counts failures with the rank in the message, and a seeded splitmix64 stream. A program
 * calls mpi_test_init first and ends with a nonzero status on every rank when any rank counted
 * a failure. */
#ifndef GDN_TESTS_MPI_TEST_UTIL_H
#define GDN_TESTS_MPI_TEST_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"

static gdn_comm *world;
static int failures;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    if (ok) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL rank %d: ", world->rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    failures++;
}

/* Joins the job's ranks as `world` (a world of one without a launcher); exits 1 with the
 * reason when that fails. */
static void mpi_test_init(int *argc, char ***argv) {
    char err[512];
    world = gdn_comm_init(argc, argv, 1, err, sizeof err);
    if (!world) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

/* Uniform in [0, 1) from the stream rng_state (set it to seed the stream). */
static uint64_t rng_state;
static double uniform(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

#endif
