/* gdn train: resolve the configuration, join the job's ranks, then run the training loop.
 * A plain `gdn train` is a job of one rank; `mpiexec -n N gdn train --sp S` (or srun
 * --mpi=pmix) runs N ranks as N/S data-parallel replicas of S sequence-parallel ranks. */
#include <stdio.h>

#include "comm/comm.h"
#include "train/commands.h"
#include "train/run_config.h"
#include "train/trainer.h"

int gdn_cmd_train(int argc, char **argv) {
    static gdn_run_config rc; /* large (paths): keep it off the stack */
    char err[1024];
    int r = gdn_run_config_parse(&rc, argc, argv, err, sizeof err);
    if (r == 1) return 0;
    if (r < 0) {
        fprintf(stderr, "gdn train: %s\n", err);
        return 2;
    }
    gdn_comm *comm = gdn_comm_init(&argc, &argv, rc.sp, err, sizeof err);
    if (!comm) {
        if (err[0]) fprintf(stderr, "gdn train: %s\n", err);
        return 2;
    }
    int status = gdn_train_run(&rc, comm, argc, argv);
    gdn_comm_finalize(comm);
    return status;
}
