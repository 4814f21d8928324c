/* metrics.jsonl of a run: one JSON object per line, appended by rank 0. Every line goes out in
 * one write(2) on an O_APPEND descriptor and is checked; a failed or short write (disk full,
 * file size limit) is reported and the file is cut back to its last complete line, so that a
 * reader never sees half a line and a resumed run rewrites what is missing. */
#ifndef GDN_METRICS_LOG_H
#define GDN_METRICS_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd; /* -1 when closed */
    char path[4200];
} gdn_metrics_log;

/* Opens path for appending. keep_through < 0: starts an empty file. keep_through >= 0 (a
 * resumed run at that step): keeps the complete lines of steps <= keep_through (the rest was
 * written after the checkpoint and is written again) by rewriting the file through a temp
 * file and a rename. Returns 0, or -1 with the reason in err (nothing left open). */
int gdn_metrics_open(gdn_metrics_log *m, const char *path, int64_t keep_through, char *err, size_t errlen);

/* Appends line (no newline in it) and a newline. Returns 0, or -1 with the reason in err; the
 * file then ends with its previous last line. */
int gdn_metrics_append(gdn_metrics_log *m, const char *line, char *err, size_t errlen);

/* Closes the file; returns 0, or -1 with the reason in err (the descriptor is closed anyway). */
int gdn_metrics_close(gdn_metrics_log *m, char *err, size_t errlen);

#endif
