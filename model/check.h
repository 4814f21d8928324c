/* Error handling shared by every module: fatal errors carry file and line, and a hint. */
#ifndef GDN_CHECK_H
#define GDN_CHECK_H

#include <stddef.h>

#ifdef __cplusplus /* the CUDA sources (model/cuda/cuda_check.h) report through the same path */
extern "C" {
#endif

/* Print "gdn: error (FILE:LINE): message" to stderr and exit(1), or hand "error (FILE:LINE):
 * message" to the handler set by gdn_set_die_handler. */
void gdn_die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* Replaces print-and-exit for fatal errors, e.g. to stop every rank of an MPI job. The handler
 * gets "error (FILE:LINE): message" and must not return; NULL restores the default. */
typedef void (*gdn_die_handler)(const char *message);
void gdn_set_die_handler(gdn_die_handler handler);
void *gdn_malloc_at(size_t bytes, const char *file, int line);
void *gdn_calloc_at(size_t count, size_t size, const char *file, int line);

#ifdef __cplusplus
}
#endif

#define GDN_DIE(...) gdn_die_at(__FILE__, __LINE__, __VA_ARGS__)
#define GDN_ASSERT(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) gdn_die_at(__FILE__, __LINE__, "internal check failed: %s", #cond); \
    } while (0)
#define GDN_MALLOC(bytes) gdn_malloc_at((bytes), __FILE__, __LINE__)
#define GDN_CALLOC(count, size) gdn_calloc_at((count), (size), __FILE__, __LINE__)

#endif
