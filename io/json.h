/* JSON for configuration files and logs: a strict RFC 8259 parser into a tree (with the line and
 * column of every value, so errors can point into the file), typed lookups that report wrong
 * types by position, dotted-path overrides (--model.d_model=512), and a small streaming writer
 * (metrics.jsonl lines, the saved resolved config).
 *
 * Strictness: no comments, no trailing commas, no NaN/Infinity, duplicate keys rejected, strings
 * must be valid UTF-8 with no raw control characters, nesting at most IO_JSON_MAX_DEPTH. A UTF-8
 * byte-order mark at the start is skipped. Columns count characters (code points), from 1. */
#ifndef GDN_IO_JSON_H
#define GDN_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#define IO_JSON_MAX_DEPTH 128

typedef enum {
    IO_JSON_NULL,
    IO_JSON_BOOL,
    IO_JSON_NUMBER,
    IO_JSON_STRING,
    IO_JSON_ARRAY,
    IO_JSON_OBJECT
} io_json_type;

typedef struct io_json io_json;
struct io_json {
    io_json_type type;
    int boolean;          /* BOOL: 0 or 1 */
    double number;        /* NUMBER */
    char *string;         /* STRING: UTF-8, NUL-terminated (may also hold \u0000: see string_len) */
    size_t string_len;    /* STRING: bytes, not counting the terminator */
    char *key;            /* member of an OBJECT: its key (NUL-terminated); NULL otherwise */
    io_json *items;       /* ARRAY elements / OBJECT members, in source order */
    size_t n_items;
    const char *source;   /* where the value came from: a file name, or a command-line argument */
    int line, column;     /* position of the value's first character; line 0: not from a file */
};

/* Parses len bytes of text. name (e.g. the file path) prefixes error messages:
 * "config.json:3:14: expected ',' or '}' after an object member, found '\"'".
 * Returns the root value, or NULL with the message in err. Free with io_json_free. */
io_json *io_json_parse(const char *text, size_t len, const char *name, char *err, int err_len);

/* Reads and parses a whole file (errors name the path; a missing file is an error). */
io_json *io_json_parse_file(const char *path, char *err, int err_len);

/* Key comparisons made by duplicate-member detection in this thread so far: lets tests check
 * that parsing an object of n members costs O(n), not O(n^2), without timing anything. */
unsigned long long io_json_key_compares(void);

/* Frees a tree returned by io_json_parse / io_json_parse_file (NULL is fine). */
void io_json_free(io_json *root);

const char *io_json_type_name(io_json_type t);

/* The member called key of an object; NULL when absent or when obj is not an object. */
const io_json *io_json_get(const io_json *obj, const char *key);

/* Writes "FILE:LINE:COL" (or the command-line argument for overrides) for messages. */
void io_json_where(const io_json *v, char *buf, int buf_len);

/* Typed lookups of obj[key]. Return 1 when found (stored in *out), 0 when absent (*out is left
 * alone, so it can hold the default), -1 when present but of the wrong type or out of range,
 * with "config.json:4:10: field 'lr' must be a number, found a string" in err. */
int io_json_get_number(const io_json *obj, const char *key, double *out, char *err, int err_len);
int io_json_get_int(const io_json *obj, const char *key, int *out, char *err, int err_len);
int io_json_get_i64(const io_json *obj, const char *key, int64_t *out, char *err, int err_len);
int io_json_get_bool(const io_json *obj, const char *key, int *out, char *err, int err_len);
int io_json_get_string(const io_json *obj, const char *key, const char **out, char *err,
                       int err_len);

/* Rejects members of obj whose key is not in allowed (a NULL-terminated list), so a misspelt
 * setting is an error rather than silently ignored. Returns 0, or -1 with the message in err. */
int io_json_check_keys(const io_json *obj, const char *const *allowed, char *err, int err_len);

/* Applies one override to the object root: path is a dotted key ("model.d_model"; missing
 * intermediate objects are created), value_text is parsed as JSON ("512", "true", "[1,2]",
 * "\"x\"") and, when it is not valid JSON, taken as a plain string ("data/kjv.txt.gz").
 * origin (e.g. the argv string, which must outlive the tree) is what error messages about this
 * value will name. Returns 0, or -1 with the message in err. */
int io_json_set_path(io_json *root, const char *path, const char *value_text, const char *origin,
                     char *err, int err_len);

/* ---- writer -------------------------------------------------------------------------------
 * Builds JSON text in a growable buffer; commas, colons and (when pretty) newlines and two-space
 * indentation are inserted automatically. Strings are escaped (quote, backslash, control
 * characters; invalid UTF-8 bytes become U+FFFD so the output is always valid). Doubles are
 * written with the fewest of 15, 16 or 17 significant digits that read back to the same double
 * (exact like %.17g, but 0.1 stays "0.1"); non-finite doubles are written as null. Misuse (a
 * value where a key is needed, unbalanced ends) is a programming error and aborts. */
typedef struct {
    char *buf;
    size_t len, cap;
    int pretty;
    int depth;
    unsigned char is_object[IO_JSON_MAX_DEPTH]; /* per open container */
    unsigned char has_items[IO_JSON_MAX_DEPTH]; /* per open container: a comma is due */
    int after_key;                              /* a key was written, its value is due */
} io_jw;

void io_jw_init(io_jw *w, int pretty);
void io_jw_free(io_jw *w);
const char *io_jw_text(const io_jw *w); /* NUL-terminated; valid until the next call */
void io_jw_reset(io_jw *w);             /* empties the buffer for the next document */

void io_jw_begin_object(io_jw *w);
void io_jw_end_object(io_jw *w);
void io_jw_begin_array(io_jw *w);
void io_jw_end_array(io_jw *w);
void io_jw_key(io_jw *w, const char *key);
void io_jw_string(io_jw *w, const char *s);
void io_jw_string_n(io_jw *w, const char *s, size_t n);
void io_jw_number(io_jw *w, double x);
/* x like io_jw_number, always with a decimal point or exponent (10000 -> 10000.0): for readers
 * that tell floats from integers by their text, such as Python's json. */
void io_jw_float(io_jw *w, double x);
void io_jw_int(io_jw *w, long long x);
void io_jw_bool(io_jw *w, int b);
void io_jw_null(io_jw *w);
void io_jw_value(io_jw *w, const io_json *v); /* a whole parsed tree */

/* Key + value in one call, for flat records such as a metrics line. */
void io_jw_kv_string(io_jw *w, const char *key, const char *s);
void io_jw_kv_number(io_jw *w, const char *key, double x);
void io_jw_kv_int(io_jw *w, const char *key, long long x);
void io_jw_kv_bool(io_jw *w, const char *key, int b);

#endif
