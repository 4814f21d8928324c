/* OpenMP wait policy of the gdn executable.
 *
 * With the default (active) policy, OpenMP threads spin at every barrier. On a machine whose
 * cores are shared with other busy processes, the spinning threads take the time slices that the
 * thread being waited for needs, and training slows far beyond its share of the cores
 * (docs/performance.md, "On a loaded machine"). gdn therefore runs with OMP_WAIT_POLICY=passive
 * unless the user chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT set in the environment); the
 * commands that run no parallel model code (inspect, data) start once, unchanged. */
#ifndef GDN_THREADS_H
#define GDN_THREADS_H

/* Call first in main, before any OpenMP call and before MPI starts. libgomp reads its
 * environment when the library is loaded, before main, so when no policy is set this sets
 * OMP_WAIT_POLICY=passive and re-executes the program (same PID, arguments and descriptors).
 * Returns only when no re-execution was needed or it failed (then the run goes on unchanged). */
void gdn_threads_set_wait_policy(char **argv);

#endif
