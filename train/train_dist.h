/* What the training loop needs on top of comm/ when it runs on several ranks: the CPU threads
 * of a rank, the data position of a resumed run under another data-parallel size, and a check
 * that every rank holds the same parameters. */
#ifndef GDN_TRAIN_DIST_H
#define GDN_TRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* CPU threads for this rank: `threads` when > 0, else this process's cores shared among the
 * ranks on its node (at least 1), so that ranks on one machine do not oversubscribe it. */
int gdn_dist_threads(const gdn_comm *c, int threads);

/* The per-rank sample counter that continues a run saved by saved_dp data-parallel ranks at
 * per-rank counter pos, for dp ranks. The saved ranks together consumed the global samples
 * [0, pos * saved_dp) (io/dataset.h); the new ranks continue at the same global sample, which
 * needs dp to divide pos * saved_dp. Returns 0 and *out, or -1 with the reason in err. */
int gdn_dist_map_data_position(uint64_t pos, int64_t saved_dp, int dp, uint64_t *out, char *err,
                               size_t errlen);

/* Aborts the job, naming the ranks, when the parameters [n] differ between ranks (they are
 * updated independently by every rank from identical reduced gradients, so any difference is
 * a bug or a nondeterministic reduction). Collective over the world. */
void gdn_dist_check_same_params(gdn_comm *c, const float *params, size_t n);

#endif
