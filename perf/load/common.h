/* Shared parts of the load clients (h1rate, churn, idle, wsload): the
 * clock, a latency histogram, an HTTP/1.1 response parser that needs no
 * allocation, header-field helpers, argument parsing, address handling and
 * the JSON report.
 *
 * The clients are single-threaded, so nothing here locks.
 */
#ifndef TERN_PERF_LOAD_COMMON_H
#define TERN_PERF_LOAD_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

/* ---- Time ---- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t lg_now_ns(void);

/* ---- Latency histogram ----------------------------------------------------
 *
 * Log-linear, in the manner of HdrHistogram: values below 256 µs have a
 * bucket each; above that, every power of two is split into 128 equal
 * buckets, so a bucket is at most 1/128 (0.8 %) of its values wide. Values
 * from LG_HIST_MAX_US (about 2.4 hours) up are clamped. The counts live in
 * the struct, so recording never allocates.
 */
#define LG_HIST_SUB 128
#define LG_HIST_TOP_SHIFT 25 /* buckets up to 256 << 25 us */
#define LG_HIST_BUCKETS (2 * LG_HIST_SUB + LG_HIST_TOP_SHIFT * LG_HIST_SUB)
#define LG_HIST_MAX_US ((uint64_t)256 << LG_HIST_TOP_SHIFT)

typedef struct {
  uint64_t counts[LG_HIST_BUCKETS];
  uint64_t total;
  uint64_t max_us; /* exact, not bucketed */
} lg_hist;

void lg_hist_record(lg_hist *h, uint64_t us);
/* The value at quantile q (0..1): the middle of the bucket holding the
 * ceil(q * total)-th smallest value, capped at the exact maximum. 0 when
 * empty. */
uint64_t lg_hist_quantile(const lg_hist *h, double q);

/* ---- HTTP/1.1 response parser ---------------------------------------------
 *
 * Fed the bytes of one connection in order. The head must be contiguous
 * (the caller keeps an incomplete head and feeds it again with more bytes
 * appended); body bytes are skipped as they come, so a body of any size
 * passes through a small buffer.
 */
#define LG_HEAD_MAX 8192 /* response head, or one chunk-size line */

enum {
  LG_RP_HEAD,
  LG_RP_LENGTH,      /* Content-Length body */
  LG_RP_CHUNK_SIZE,  /* expecting a chunk-size line */
  LG_RP_CHUNK_DATA,  /* inside chunk data */
  LG_RP_CHUNK_CRLF,  /* the CRLF after chunk data */
  LG_RP_TRAILER,     /* trailer section, up to the empty line */
  LG_RP_UNTIL_CLOSE, /* no framing: the body ends at EOF */
  LG_RP_DONE
};

typedef struct {
  int state;
  int status;    /* of the final response */
  int close;     /* the server closes after this response */
  uint64_t left; /* bytes left in the body or the chunk */
} lg_resp;

void lg_resp_init(lg_resp *p);

enum { LG_RP_MORE = 0, LG_RP_COMPLETE = 1, LG_RP_ERROR = -1 };

/* Parse up to `len` bytes; *used says how many were consumed. Returns
 * LG_RP_COMPLETE when the response ended (bytes after it are not
 * consumed), LG_RP_MORE when more bytes are needed (unconsumed bytes must
 * be kept and fed again, with more appended), LG_RP_ERROR on a malformed
 * response. Interim (1xx) responses are skipped. */
int lg_resp_feed(lg_resp *p, const char *buf, size_t len, size_t *used);

/* The peer closed. Returns LG_RP_COMPLETE if that ends a close-delimited
 * body, else LG_RP_ERROR (the response was cut short). */
int lg_resp_eof(lg_resp *p);

/* ---- Header fields -------------------------------------------------------
 * For a client that reads a response head itself (wsload's upgrade).
 */

/* Whether the n bytes at p are `want`, ignoring ASCII case (`want` in
 * lower case). */
int lg_name_is(const char *p, size_t n, const char *want);

/* Whether the comma-separated list v (n bytes) holds `token` (in lower
 * case), ignoring case and optional whitespace. */
int lg_has_token(const char *v, size_t n, const char *token);

/* One field line of a head: its name, and its value without the spaces
 * and tabs around it. */
typedef struct {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} lg_field;

enum { LG_FIELD_BAD_LINE = -1, LG_FIELD_NO_COLON = -2 };

/* Parse the field line at *line, in a head whose field lines end at `stop`
 * (where the CRLF of the empty line that ends the head begins). Fills *f,
 * moves *line past the line's CRLF and returns 0. Returns
 * LG_FIELD_BAD_LINE when the line is empty or has no CRLF before the
 * head's end, LG_FIELD_NO_COLON when it has no colon or an empty name. */
int lg_field_line(const char **line, const char *stop, lg_field *f);

/* ---- Arguments ------------------------------------------------------------
 * Each exits with status 2 and a message when the value is malformed or out
 * of range, since a benchmark run on a mistyped argument is worse than none.
 */
double lg_arg_double(const char *prog, const char *name, const char *v,
                     double lo, double hi);
long lg_arg_long(const char *prog, const char *name, const char *v, long lo,
                 long hi);
/* argv[*i + 1], or exit 2 when the option has no value. */
const char *lg_arg_value(const char *prog, int argc, char **argv, int *i);

/* ---- Addresses and sockets ---- */

typedef struct {
  struct sockaddr_storage addr;
  socklen_t len;
  int spread; /* loopback IPv4 target: vary the source address */
  uint32_t next_src;
} lg_target;

/* Resolve host:port (numeric or a name; the first address). Returns 0, or
 * -1 after printing why. */
int lg_target_init(lg_target *t, const char *prog, const char *host, long port);

/* A non-blocking TCP socket with TCP_NODELAY, connect() started. When the
 * target is on IPv4 loopback and spreading is on, the socket is first bound
 * to the next source address of 127.0.0.2..127.0.0.254 (port chosen at
 * connect time, IP_BIND_ADDRESS_NO_PORT), so that closed connections in
 * TIME_WAIT do not exhaust one address's ephemeral ports. Returns the fd
 * (the connection may be in progress), or -1 with errno set. */
int lg_connect(lg_target *t);

/* Raise RLIMIT_NOFILE's soft limit to the hard one; returns the new soft
 * limit. */
long lg_raise_nofile(void);

/* ---- Reports ---- */

/* The latency object of the JSON report, in microseconds. */
/* The request path of --path: starts with '/', holds no space, CR or LF,
 * at most 256 bytes. Returns 0, or -1 after saying why on stderr. */
int lg_check_path(const char *prog, const char *path);
/* Open --json's file for writing; NULL after perror. */
FILE *lg_json_open(const char *path);
void lg_json_latency(FILE *f, const lg_hist *h);
/* The same figures for the human line. */
void lg_text_latency(FILE *f, const lg_hist *h);

#endif
