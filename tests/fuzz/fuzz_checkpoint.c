/* libFuzzer harness for the checkpoint readers: the input is written to a file and read
 * through the same child-isolated path the commands use (ckpt_verify, ckpt_read_info, then
 * ckpt_load with the model the file declares). libhdf5 may crash on damaged metadata, but
 * only inside the checking child: this process must never crash, and a file the readers
 * accept must load with every tensor matching its checksum. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "model/params.h"

/* A libhdf5 hang in the checking child must end as "damaged" well inside libFuzzer's per-input
 * limit (run_fuzz.sh: 10 s), not after the readers' default bound of minutes. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    setenv("GDN_CKPT_CHECK_TIMEOUT", "3", 0);
    return 0;
}

/* libhdf5 1.10 itself loses a few hundred bytes of its metadata cache on some damaged files
 * (H5O_protect -> H5C_protect fails; corpus/checkpoint/regress_hdf5_cache_leak.h5): memory that
 * libhdf5 allocated is exempt from the leak check, gdn's own allocations are not (and gdn's
 * handling of damaged files is also leak-checked by test_checkpoint under AddressSanitizer). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_checkpoint_%ld.h5", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t wrote = fwrite(data, 1, size, f);
    if (fclose(f) != 0 || wrote != size) return 0;
    char err[2048];
    (void)ckpt_verify(path, NULL, NULL, err, sizeof err);
    ckpt_info info;
    if (ckpt_read_info(path, &info, err, sizeof err) == CKPT_OK) {
        gdn_config c = info.model;
        /* Only models small enough to load quickly (a fuzzed header may claim any size). */
        if (c.vocab_size > 0 && c.vocab_size <= 4096 && c.d_model > 0 && c.d_model <= 256 &&
            c.n_layers > 0 && c.n_layers <= 4 && c.n_heads > 0 && c.n_heads <= 16 &&
            c.head_dim > 0 && c.head_dim <= 64 && c.expand_v > 0 && c.expand_v <= 4 &&
            c.d_ff > 0 && c.d_ff <= 1024 && c.conv_width > 0 && c.conv_width <= 8 &&
            gdn_config_validate(&c, err, (int)sizeof err) == 0) {
            gdn_param_table t;
            gdn_param_table_build(&t, &c);
            float *p = malloc(t.total * sizeof(float));
            if (p) (void)ckpt_load(path, &c, &t, p, NULL, NULL, NULL, err, sizeof err);
            free(p);
            gdn_param_table_free(&t);
        }
        ckpt_info_free(&info);
    }
    unlink(path);
    return 0;
}
