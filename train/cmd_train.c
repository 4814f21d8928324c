/* gdn train: resolve the configuration, then run the training loop. */
#include <stdio.h>

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
    return gdn_train_run(&rc, argc, argv);
}
