/* OpenMP wait policy of the gdn executable (see threads.h). */
#include "train/threads.h"

#include <stdlib.h>
#include <unistd.h>

void gdn_threads_set_wait_policy(char **argv) {
    /* The user's choice wins; having set it ourselves also ends the re-execution. */
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
    /* no /proc (or exec refused): keep the runtime's default policy rather than fail */
    unsetenv("OMP_WAIT_POLICY");
}
