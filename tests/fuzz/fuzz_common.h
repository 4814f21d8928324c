/* What every libFuzzer harness here shares: an internal check (gdn_die) becomes a crash rather
 * than a clean exit, and CHECK(cond) aborts naming the harness and line, so libFuzzer keeps the
 * input. FUZZ_PLAIN_INIT defines LLVMFuzzerInitialize for harnesses that need nothing else. */
#ifndef GDN_FUZZ_COMMON_H
#define GDN_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "model/check.h"

static inline void fuzz_die_abort(const char *message) {
    fprintf(stderr, "gdn: %s\n", message);
    abort();
}

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s: check failed at line %d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define FUZZ_PLAIN_INIT                                                                      \
    int LLVMFuzzerInitialize(int *argc, char ***argv);                                       \
    int LLVMFuzzerInitialize(int *argc, char ***argv) {                                      \
        (void)argc, (void)argv;                                                              \
        gdn_set_die_handler(fuzz_die_abort);                                                 \
        return 0;                                                                            \
    }

#endif
