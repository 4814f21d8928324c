/* gdn train: resolve the configuration, join the job's ranks, then run the training loop.
 * A plain `gdn train` is a job of one rank; `mpiexec -n N gdn train --sp S` (or srun
 * --mpi=pmix) runs N ranks as N/S data-parallel replicas of S sequence-parallel ranks. */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "train/commands.h"
#include "train/run_config.h"
#include "train/trainer.h"

/* Takes the flags that are not run settings (--overwrite, --eval_only) out of argv. */
static int take_flags(int *argc, char **argv, gdn_train_opts *o) {
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--overwrite")) o->overwrite = 1;
        else if (i > 0 && !strcmp(argv[i], "--eval_only")) o->eval_only = 1;
        else argv[n++] = argv[i];
    }
    *argc = n;
    argv[n] = NULL;
    return 0;
}

static void flags_usage(FILE *f) {
    fprintf(f, "\nflags (not saved with the run):\n"
               "  --overwrite   start afresh in an --out that holds a run: deletes its config.json,\n"
               "                metrics.jsonl and ckpt_*.h5 (nothing else); not with --resume\n"
               "  --eval_only   print the validation loss of the --resume checkpoint (a path, or auto\n"
               "                for the newest in --out) and write nothing\n"
               "\nexit status: 0 done, 1 error, 2 bad settings or an --out holding a different run,\n"
               "3 the loss, gradient or parameters became non-finite (nothing saved), 4 --out is in\n"
               "use by another gdn train, 75 stopped by SIGTERM/SIGUSR1 after a checkpoint (requeue)\n");
}

int gdn_cmd_train(int argc, char **argv) {
    static gdn_run_config rc; /* large (paths): keep it off the stack */
    char err[1024];
    gdn_train_opts opts = {0};
    take_flags(&argc, argv, &opts);
    int r = gdn_run_config_parse(&rc, argc, argv, err, sizeof err);
    if (r == 1) {
        flags_usage(stdout);
        return 0;
    }
    if (r < 0) {
        fprintf(stderr, "gdn train: %s\n", err);
        return GDN_EXIT_USAGE;
    }
    if (opts.overwrite && (rc.resume[0] || opts.eval_only)) {
        fprintf(stderr, "gdn train: --overwrite starts afresh and deletes the run in --out; it cannot be combined "
                        "with %s\n", opts.eval_only ? "--eval_only" : "--resume");
        return GDN_EXIT_USAGE;
    }
    if (opts.eval_only && !rc.resume[0]) {
        fprintf(stderr, "gdn train: --eval_only evaluates a checkpoint: give --resume PATH (or --resume auto for the "
                        "newest in --out)\n");
        return GDN_EXIT_USAGE;
    }
    gdn_comm *comm = gdn_comm_init(&argc, &argv, rc.sp, err, sizeof err);
    if (!comm) {
        if (err[0]) fprintf(stderr, "gdn train: %s\n", err);
        return GDN_EXIT_USAGE;
    }
    int status = gdn_train_run(&rc, &opts, comm, argc, argv);
    gdn_comm_finalize(comm);
    return status;
}
