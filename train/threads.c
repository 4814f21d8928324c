/* OpenMP wait policy of the gdn executable (see threads.h). */
#include "train/threads.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The subcommands that run OpenMP-parallel model code; the others (inspect, data, help) are
 * not worth a second start of the program (about 0.6 s with the CUDA libraries loaded). */
static int runs_parallel_code(const char *cmd) {
    static const char *const cmds[] = {"train", "sample", "bench", "op"};
    for (size_t i = 0; cmd && i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(cmd, cmds[i])) return 1;
    return 0;
}

void gdn_threads_set_wait_policy(char **argv) {
    if (!runs_parallel_code(argv[0] ? argv[1] : NULL)) return;
    /* The user's choice wins; having set it ourselves also ends the re-execution. */
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
    /* no /proc (or exec refused): keep the runtime's default policy rather than fail */
    unsetenv("OMP_WAIT_POLICY");
}
