/* Fatal-error reporting and checked allocation. */
#include "model/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static gdn_die_handler die_handler = NULL;

void gdn_set_die_handler(gdn_die_handler handler) { die_handler = handler; }

void gdn_die_at(const char *file, int line, const char *fmt, ...) {
    char msg[2048];
    int n = snprintf(msg, sizeof msg, "error (%s:%d): ", file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (die_handler) die_handler(msg);
    fprintf(stderr, "gdn: %s\n", msg);
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
