/* Distributed-training helpers of the training loop (see train_dist.h). */
#include "train/train_dist.h"

#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "model/check.h"

int gdn_dist_threads(const gdn_comm *c, int threads) {
    if (threads > 0) return threads;
    /* omp_get_num_procs honours the CPU binding the launcher gave this rank */
    int cores = omp_get_num_procs(), n = cores / (c->local_size > 0 ? c->local_size : 1);
    return n >= 1 ? n : 1;
}

int gdn_dist_map_data_position(uint64_t pos, int64_t saved_dp, int dp, uint64_t *out, char *err,
                               size_t errlen) {
    if (saved_dp < 1 || dp < 1) {
        snprintf(err, errlen, "bad data-parallel sizes (saved %" PRId64 ", now %d)", saved_dp, dp);
        return -1;
    }
    if (saved_dp == dp) {
        *out = pos;
        return 0;
    }
    const uint64_t global = pos * (uint64_t)saved_dp;
    if (global % (uint64_t)dp) {
        snprintf(err, errlen,
                 "the data position cannot be mapped: the checkpoint's %" PRId64 " data-parallel "
                 "ranks consumed %" PRIu64 " training samples together (%" PRIu64 " each), which %d "
                 "ranks cannot split evenly; resume with a data-parallel size (ranks / sp) that "
                 "divides %" PRIu64 ", e.g. %" PRId64,
                 saved_dp, global, pos, dp, global, saved_dp);
        return -1;
    }
    *out = global / (uint64_t)dp;
    return 0;
}

void gdn_dist_check_same_params(gdn_comm *c, const float *params, size_t n) {
    if (c->size == 1) return;
    /* crc32 over the bytes, in pieces (zlib takes unsigned int lengths) */
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *p = (const unsigned char *)params;
    size_t left = n * sizeof(float);
    while (left) {
        unsigned int piece = left > (1u << 30) ? (1u << 30) : (unsigned int)left;
        crc = crc32(crc, p, piece);
        p += piece;
        left -= piece;
    }
    int64_t mine = (int64_t)crc;
    int64_t *all = GDN_MALLOC((size_t)c->size * sizeof *all);
    gdn_all_gather(c, GDN_WORLD, &mine, all, 1, GDN_I64, "parameter checksums");
    for (int r = 1; r < c->size; r++)
        if (all[r] != all[0])
            gdn_comm_abort(c, "the parameters of rank %d differ from those of rank 0 (crc32 %08" PRIx64
                           " vs %08" PRIx64 "): the ranks have diverged; not writing a checkpoint",
                           r, all[r], all[0]);
    free(all);
}
