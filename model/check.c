/* Fatal-error reporting and checked allocation. */
#include "model/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void gdn_die_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gdn: error (%s:%d): ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void *gdn_malloc_at(size_t bytes, const char *file, int line) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) gdn_die_at(file, line, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *gdn_calloc_at(size_t count, size_t size, const char *file, int line) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) gdn_die_at(file, line, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}
