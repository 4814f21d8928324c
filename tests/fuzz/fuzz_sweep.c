/* libFuzzer harness: the sweep-file reader (train/sweep_plan.c): parsing, checking and expanding
 * a sweep into runs resolved as gdn train resolves them.
 *
 * A rejected input must come with a message naming the file; an accepted one must expand into
 * at least one run, cheapest first, each with a distinct file-safe name, at least one step, a
 * positive FLOP count and a model gdn train accepts. Any crash, leak, sanitizer report or broken
 * invariant is a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"
#include "train/sweep.h"

FUZZ_PLAIN_INIT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static gdn_sweep sw;
    char err[2048];
    err[0] = 0;
    if (gdn_sweep_parse(&sw, (const char *)data, size, "fuzz.json", err, sizeof err)) {
        CHECK(strncmp(err, "fuzz.json", 9) == 0);
        CHECK(sw.runs == NULL && sw.n_runs == 0);
        return 0;
    }
    CHECK(sw.n_runs >= 1 && sw.n_runs <= GDN_SWEEP_MAX_RUNS);
    for (int i = 0; i < sw.n_runs; i++) {
        const gdn_sweep_run *r = &sw.runs[i];
        CHECK(r->name[0] && !strchr(r->name, '/') && r->name[0] != '.');
        CHECK(r->rc.steps >= 1 && r->tokens >= r->rc.steps);
        CHECK(r->flops > 0 && isfinite(r->flops));
        CHECK(r->fl.total > 0 && r->fl.non_embedding >= 0);
        if (i > 0) CHECK(sw.runs[i - 1].flops <= r->flops);
        char e[512];
        CHECK(gdn_config_validate(&r->rc.model, e, sizeof e) == 0);
    }
    gdn_sweep_free(&sw);
    return 0;
}
