/* Failure behaviour of comm/ under mpiexec (driven by mpi_fail.sh), one mode per run:
 *   die   the last rank hits a fatal error (GDN_DIE) while the others wait in an all-reduce
 *   hang  the last rank stops answering (sleeps) while the others wait in an all-reduce
 *   peer  rank 0 waits for a message from rank 1, which stops answering
 *   grid  sp = 3 does not divide the world: rank 0 explains, every rank exits with status 2
 *   ok    a normal all-reduce (the harness's control case)
 * The hanging modes rely on GDN_COMM_TIMEOUT being set small by the harness. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "model/check.h"

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    char err[512];
    gdn_comm *c = gdn_comm_init(&argc, &argv, !strcmp(mode, "grid") ? 3 : 1, err, sizeof err);
    if (!c) {
        if (err[0]) fprintf(stderr, "mpi_fail: %s\n", err);
        return 2;
    }
    const int last = c->rank == c->size - 1;
    double x = 1.0;
    gdn_all_reduce(c, GDN_WORLD, &x, 1, GDN_F64, GDN_SUM, "a warm-up value");
    if (!strcmp(mode, "die") && last) GDN_DIE("injected failure on the last rank");
    if ((!strcmp(mode, "hang") && last) || (!strcmp(mode, "peer") && c->rank == 1)) sleep(120);
    if (!strcmp(mode, "peer")) {
        if (c->rank == 0) gdn_recv(c, GDN_WORLD, 1, &x, 1, GDN_F64, 7, "a test message");
    } else {
        gdn_all_reduce(c, GDN_WORLD, &x, 1, GDN_F64, GDN_SUM, "a test value");
    }
    if (c->rank == 0) printf("mpi_fail %s: finished normally (sum %g)\n", mode, x);
    gdn_comm_finalize(c);
    return 0;
}
