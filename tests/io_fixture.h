/* Shared by the io tests: a temporary directory per test program (made by the group setup,
 * removed with its contents by the teardown), paths and files in it, sample text. */
#ifndef GDN_TESTS_IO_FIXTURE_H
#define GDN_TESTS_IO_FIXTURE_H

#include <stddef.h>
#include <string.h>

#define ASSERT_CONTAINS(hay, needle)                                                  \
    do {                                                                              \
        if (!strstr((hay), (needle)))                                                 \
            fail_msg("message \"%s\"\n  does not contain \"%s\"", (hay), (needle));   \
    } while (0)

extern char g_dir[64]; /* per-run temporary directory */

/* g_dir/name; the last 8 results stay valid. */
const char *tmp_path(const char *name);
void write_file(const char *path, const void *data, size_t n);
/* Every byte value, then some text, so the tokenizer sees 0 and 255 too. */
size_t sample_text(unsigned char *buf, size_t cap);
void write_gzip(const char *path, const void *data, size_t n);

/* cmocka group setup and teardown: make and remove g_dir. */
int io_fixture_setup(void **state);
int io_fixture_teardown(void **state);

#endif
