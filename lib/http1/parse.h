/* HTTP/1.1 request parser: sans-I/O, zero-copy, strict per RFC 9110/9112.
 *
 * The parser never allocates and never sees a socket. It takes bytes and
 * fills views (pointer + length) into those same bytes. Callers keep the
 * bytes alive for as long as they use the views.
 *
 * The rules enforced (each names the result code it produces):
 *
 * Request line. Empty lines (CRLF) before it are skipped (RFC 9112 2.2).
 * method = token of at most TERN__H1_MAX_METHOD bytes (longer: 501, as RFC
 * 9112 3 suggests); exactly one SP; a non-empty request-target of visible
 * ASCII other than '#' (CTLs, SP, DEL, obs-text, a fragment: 400; longer
 * than max_uri: 414); exactly one SP; "HTTP/1." DIGIT, where a minor
 * version above 1 is taken as 1 (RFC 9110 2.5; another major version:
 * 505; anything else: 400); CRLF. A bare CR or
 * bare LF anywhere in the head is 400.
 *
 * Target forms (RFC 9112 3.2), else 400. origin-form "/...", split into
 * path and query at the first '?'. absolute-form "http://" or "https://"
 * (any case) with a non-empty host: F_ABSOLUTE, its authority overrides
 * Host, path "/" (a static string) when empty. asterisk-form "*" with
 * OPTIONS only: F_ASTERISK, path "*". authority-form "host:port" with
 * CONNECT only (and CONNECT takes no other form): the authority is the
 * target, path is empty (non-NULL, length 0).
 *
 * Fields. field-name = token immediately followed by ':'; a line starting
 * with SP or HTAB (obs-fold) is 400. Values hold VCHAR, obs-text, SP, HTAB
 * (any other byte: 400) and are trimmed of OWS. More than min(nfields,
 * max_headers) fields, or a head over max_head bytes: 431.
 *
 * Host: required in HTTP/1.1, at most one, and a valid uri-host [":" port]
 * without userinfo (else 400); an empty value is allowed (RFC 9112 3.2).
 * Content-Length: 1*DIGIT up to 2^62, one field only (lists, repeats, signs,
 * overflow: 400). Transfer-Encoding: HTTP/1.1 only, not with
 * Content-Length, not empty, chunked at most once and without parameters
 * (all 400); it must be exactly one coding, chunked (else 501: no other
 * coding is decoded, RFC 9112 6.1).
 * Connection tokens (any case, across fields): close -> F_CLOSE,
 * keep-alive -> F_KEEPALIVE (both may be set; close wins); HTTP/1.0 without
 * keep-alive -> F_CLOSE. In HTTP/1.1 only: "upgrade" plus a non-empty
 * Upgrade field -> F_UPGRADE with the first Upgrade field's value, and an
 * Expect list holding 100-continue -> F_EXPECT100. Other expectations are
 * left for the caller to see in the fields.
 *
 * Where a head breaks several rules the first one met, reading left to
 * right, decides the code, except that the request line is judged before
 * max_head and that Host and framing are judged after all fields.
 */
#ifndef TERN_HTTP1_PARSE_H
#define TERN_HTTP1_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Longest method accepted; real ones are under 20 bytes. */
#define TERN__H1_MAX_METHOD 32

typedef struct {
  const char *name;
  size_t name_len;
  const char *value; /* leading and trailing OWS removed */
  size_t value_len;
} tern__h1_field;

/* Framing of the request body, decided from the head. */
enum {
  TERN__H1_BODY_NONE = 0,    /* no Content-Length, no Transfer-Encoding */
  TERN__H1_BODY_LENGTH = 1,  /* Content-Length: content_length bytes */
  TERN__H1_BODY_CHUNKED = 2, /* Transfer-Encoding ending in chunked */
};

/* Flags set from the head. */
enum {
  TERN__H1_F_CLOSE = 1u << 0,     /* Connection: close (or 1.0 w/o k-a) */
  TERN__H1_F_KEEPALIVE = 1u << 1, /* Connection: keep-alive token seen */
  TERN__H1_F_EXPECT100 = 1u << 2, /* Expect: 100-continue */
  TERN__H1_F_UPGRADE = 1u << 3,   /* Connection: upgrade + Upgrade: ... */
  TERN__H1_F_HAS_HOST = 1u << 4,  /* a Host field was present */
  TERN__H1_F_ASTERISK = 1u << 5,  /* request-target is "*" */
  TERN__H1_F_ABSOLUTE = 1u << 6,  /* absolute-form request-target */
};

typedef struct {
  size_t max_head;    /* whole head incl. CRLFCRLF; over it: 431 (or 414) */
  size_t max_headers; /* header fields; over it: 431 */
  size_t max_uri;     /* request-target length; over it: 414 */
} tern__h1_limits;

typedef struct {
  const char *method;
  size_t method_len;
  const char *target; /* request-target as sent */
  size_t target_len;
  const char *path;  /* origin path: for absolute-form, the part after the
                        authority ("/" if empty); for "*", "*" */
  size_t path_len;   /* path excludes the query */
  const char *query; /* after '?', excluding '?'; NULL if no '?' */
  size_t query_len;
  const char *authority; /* Host value, or the authority of an absolute
                            target (which then wins, RFC 9112 3.2.2) */
  size_t authority_len;
  const char *upgrade; /* value of Upgrade when F_UPGRADE */
  size_t upgrade_len;
  int version_minor; /* 0 or 1 (HTTP/1.2 and up count as 1) */
  unsigned flags;
  int body;                /* TERN__H1_BODY_* */
  uint64_t content_length; /* for TERN__H1_BODY_LENGTH */
  tern__h1_field *fields;  /* caller-provided array */
  size_t nfields;          /* in: capacity; out: count */
} tern__h1_head;

/* Parser results (negative = reject; the value maps to a status). */
enum {
  TERN__H1_INCOMPLETE = 0,
  TERN__H1_E400 = -400, /* malformed: bad grammar, smuggling vectors */
  TERN__H1_E414 = -414, /* request-target over max_uri */
  TERN__H1_E431 = -431, /* head over max_head or too many fields */
  TERN__H1_E501 = -501, /* unknown transfer coding / not implemented */
  TERN__H1_E505 = -505, /* HTTP major version other than 1 */
};

/* Scan for the end of a head. `*scanned` is how far an earlier call got
 * (start at 0) so that a head trickled one byte at a time costs O(n) in
 * total. Returns the head length including the final CRLFCRLF, 0 if not
 * complete yet. Leading empty lines (CRLF) before the request line are
 * allowed by RFC 9112 2.2 and count as part of the head: "\r\n\r\n" at
 * the start is two such lines, not an empty head. Bare "\n\n" never ends a
 * head. Reset `*scanned` to 0 whenever the bytes move in the buffer. */
size_t tern__h1_head_end(const char *buf, size_t len, size_t *scanned);

/* Parse one complete request head (buf[0..len) ends with CRLFCRLF; len as
 * returned by tern__h1_head_end). Fills `h`. Returns len on success or a
 * TERN__H1_E* code. Enforces every rule in the parser's documentation,
 * including Host presence for HTTP/1.1 and CL/TE rules. The empty line
 * must end buf exactly (else 400). `h` is unspecified after an error. */
int tern__h1_parse_head(const char *buf, size_t len, tern__h1_head *h,
                        const tern__h1_limits *lim);

/* Check a request-line prefix before the head is complete so that an
 * over-long URI or head is rejected before it is all buffered. Returns 0
 * (fine so far) or a TERN__H1_E* code. It applies parse_head's request-line
 * rules to the bytes so far (so garbage, a bad method, an over-long method
 * or target, a bad version fail at once) and then len > max_head -> 431.
 * It never rejects a prefix of a head that parse_head would accept. Its
 * cost is bounded by the request line, about max_uri + 45 bytes plus any
 * leading empty lines, so call it when head_end returns 0. */
int tern__h1_check_partial(const char *buf, size_t len,
                           const tern__h1_limits *lim);

/* Chunked transfer-coding decoder (RFC 9112 7.1). Sans-I/O and in place:
 * feed bytes, get data spans that point into the input. */
typedef struct {
  int state;
  uint64_t remaining; /* bytes left in the current chunk */
  size_t line_len;    /* bytes in the current size/ext or trailer line */
  size_t trailer_len; /* total trailer bytes seen (bounded by max) */
  size_t max_line;    /* limit for chunk-size lines and trailer section */
} tern__h1_chunked;

void tern__h1_chunked_init(tern__h1_chunked *c, size_t max_line);

/* Decode from in[0..len). On return *consumed is how many input bytes were
 * used; if *data_len > 0, in[*data_off .. *data_off + *data_len) is body
 * data (the caller consumes it and calls again with the rest). Trailer
 * fields are collected raw into the trailer section: when the call returns
 * TERN__H1_CHUNKED_DONE, in[*data_off .. *data_off + *data_len) is then the
 * raw trailer section (possibly empty, excluding the final CRLF) if it was
 * contiguous in this call's input; callers that need trailers keep the
 * bytes (most do not). The section includes each trailer line's CRLF, and
 * trailer_len holds its total length, so *data_len != trailer_len means it
 * was split across calls. After DONE or an error, further calls return the
 * same result and consume nothing. Chunk sizes take any number of hex
 * digits (leading zeros included) up to the value 2^62; a size line (digits and
 * extensions) and the trailer section are each at most max_line bytes. Returns
 * TERN__H1_CHUNKED_MORE (need more input or data returned),
 * TERN__H1_CHUNKED_DONE (last-chunk and trailers consumed), or
 * TERN__H1_E400 (bad framing, chunk-size overflow, bad trailer line). With
 * MORE and no data, *consumed == len. With E400, *consumed is the offset of
 * the offending byte. */
enum { TERN__H1_CHUNKED_MORE = 0, TERN__H1_CHUNKED_DONE = 1 };
int tern__h1_chunked_decode(tern__h1_chunked *c, const char *in, size_t len,
                            size_t *consumed, size_t *data_off,
                            size_t *data_len);

#endif
