/* Whether a run directory may be written by this run, checked before anything in it changes.
 *
 * A run's own files are config.json, metrics.jsonl (and its metrics.jsonl.tmp), summary.json
 * (and summary.json.tmp, train/run_summary.h), the checkpoints ckpt_<8-digit step>.h5 and their temp files ckpt_*.h5.tmp.<pid>; the lock file
 * .lock belongs to whichever trainer holds it. The rule:
 *  - a directory whose config.json or checkpoints describe another model shape (or whose
 *    config.json cannot be read) holds a different run: refused, naming the field;
 *  - a fresh start (no --resume) into a directory that already holds checkpoints or metrics
 *    lines is refused too: starting over there would lose the old run's metrics and mix two
 *    runs' checkpoints; continue it with --resume auto;
 *  - --overwrite (fresh starts only) deletes the run's own files listed above and nothing else,
 *    then starts afresh. */
#ifndef GDN_RUN_DIR_H
#define GDN_RUN_DIR_H

#include <stddef.h>

#include "train/run_config.h"

/* Checks directory dir for this run rc (fresh: no --resume). Returns 0 when it may go on
 * (overwrite: the old files are to be deleted with gdn_run_dir_clear), 2 when the directory
 * holds another run (err says which field differs and what to do), 1 when it cannot be read. */
int gdn_run_dir_check(const char *dir, const gdn_run_config *rc, int fresh, int overwrite, char *err,
                      size_t errlen);

/* Deletes the run's own files in dir (see above); *removed counts them. 0, or -1 with err. */
int gdn_run_dir_clear(const char *dir, int *removed, char *err, size_t errlen);

#endif
