/* The sans-I/O parts of the static-file handler (lib/handler/static.c):
 * path normalisation, Range parsing, conditional requests, HTTP dates,
 * Accept-Encoding q-values and the MIME table. Pure functions over
 * buffers, unit-tested (test/unit/test_static.c) and fuzzed
 * (test/fuzz/fuzz_static.c). */
#ifndef TERN_CORE_STATIC_H
#define TERN_CORE_STATIC_H

#include <stddef.h>
#include <stdint.h>

/* tern__static_path's results besides a length. */
enum {
  TERN__SP_BAD = -1,    /* malformed: bad escape, NUL, backslash, control */
  TERN__SP_ESCAPE = -2, /* a ".." segment: it would leave the root */
  TERN__SP_HIDDEN = -3, /* a segment starting with '.', hidden not allowed */
  TERN__SP_LONG = -4,   /* longer than `cap` */
};

/* Percent-decode `in` (`len` bytes, the path below the mount) once and
 * normalise it into `out` (`cap` bytes, NUL-terminated): empty and "."
 * segments dropped, no leading '/', segments joined by one '/'. A
 * decoded '/' ("%2f") separates segments like a literal one, so "..%2f"
 * is a ".." segment. Refused: NUL (literal or "%00"), '\\', bytes below
 * 0x20 and 0x7f, a bad escape, any ".." segment, and with `hidden` 0 any
 * segment starting with '.'. Returns the length (0: the root itself) or
 * TERN__SP_*. *dir is set to 1 when the path ended with '/'. */
int tern__static_path(const char *in, size_t len, int hidden, char *out,
                      size_t cap, int *dir);

typedef struct {
  uint64_t first, last; /* inclusive */
} tern__range;

#define TERN__MAX_RANGES 16

/* Parse a Range field value against a representation of `size` bytes
 * (RFC 9110 14.2). Returns the count of satisfiable ranges put in `out`
 * (sorted, overlapping and adjacent ones merged; at most `max`), 0 when
 * the field is to be ignored (not "bytes=", malformed, more than `max`
 * ranges: the whole body is sent with 200), or -1 when none is
 * satisfiable (416). */
int tern__static_ranges(const char *v, size_t len, uint64_t size,
                        tern__range *out, int max);

/* Does the entity-tag list `v` ("*" or a comma-separated list of tags,
 * as in If-Match / If-None-Match) match `etag` (a strong tag, quotes
 * included)? `weak` selects weak comparison (If-None-Match), else strong
 * (If-Match: a W/ tag never matches). Returns 1 or 0. */
int tern__static_etag_match(const char *v, size_t len, const char *etag,
                            size_t etag_len, int weak);

/* Parse an HTTP-date (IMF-fixdate, RFC 850 or asctime) into seconds since
 * the epoch. Returns 0, or -1 when it is not a valid date. */
int tern__http_date_parse(const char *v, size_t len, int64_t *t);
/* Format `t` as an IMF-fixdate into `out` (29 bytes and a NUL). */
void tern__http_date_format(int64_t t, char out[30]);

/* The request's conditional fields, as found (NULL when absent). */
typedef struct {
  const char *if_match, *if_none_match, *if_modified_since,
      *if_unmodified_since, *if_range, *range;
  size_t if_match_len, if_none_match_len, if_modified_since_len,
      if_unmodified_since_len, if_range_len, range_len;
} tern__conds;

/* Evaluate the preconditions in RFC 9110 13.2.2's order for a GET or HEAD
 * of a representation with `etag` (strong) and modification time
 * `mtime`. Returns 0 (proceed), 304 or 412. */
int tern__static_conds(const tern__conds *c, const char *etag, size_t etag_len,
                       int64_t mtime);

/* Does If-Range allow the Range to be honoured (1) or is the whole body
 * sent (0)? Absent If-Range is 1. A date matches only when it equals
 * `mtime` exactly (a strong validator, RFC 9110 13.1.5). */
int tern__static_if_range(const tern__conds *c, const char *etag,
                          size_t etag_len, int64_t mtime);

/* Content codings the handler can serve precompressed. */
enum {
  TERN__ENC_BR = 0,
  TERN__ENC_ZSTD = 1,
  TERN__ENC_GZIP = 2,
  TERN__ENC_N = 3,
};

/* The q-values (0..1000) an Accept-Encoding value gives br, zstd and gzip
 * ("*" covers the ones not named; "x-gzip" counts as gzip), into q[]. A
 * NULL value gives 0 to all. */
void tern__static_accept(const char *v, size_t len, int q[TERN__ENC_N]);

/* The media type for a file name (by its extension, ASCII
 * case-insensitive), "application/octet-stream" when unknown. Generated
 * from lib/handler/mime.txt (lib/handler/mime.c). */
const char *tern__mime_type(const char *name, size_t len);

#endif
