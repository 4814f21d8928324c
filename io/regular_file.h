/* Opening input files that must be regular files (token shards, text corpora, configs).
 *
 * A named pipe passed as a file would block open() until a writer appears (forever, when none
 * does), and directories, devices and sockets are not data. The path's type is checked before
 * opening, the open itself never blocks (O_NONBLOCK), and the type is checked again on the open
 * descriptor, so a path swapped in between cannot block or slip through either. */
#ifndef GDN_IO_REGULAR_FILE_H
#define GDN_IO_REGULAR_FILE_H

/* Opens path read-only (close-on-exec, blocking reads as usual). what, when not NULL, names the
 * file's role in messages. Returns the descriptor, or -1 with the message in err:
 * "PATH: cannot open token shard: No such file or directory" (what = "token shard"),
 * "PATH: cannot open: Permission denied" (what = NULL), or
 * "PATH: not a regular file (a named pipe (FIFO)): give the path of a regular file". */
int io_open_regular(const char *path, const char *what, char *err, int err_len);

#endif
