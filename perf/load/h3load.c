/* h3load: an HTTP/3 load client, single-threaded, on ngtcp2 0.12 (client
 * side, GnuTLS crypto helper) and nghttp3 0.8.
 *
 *   h3load --port P [--host 127.0.0.1] [--authority localhost] [--path /]
 *          [--conns 4] [--streams 32] [--duration 10] [--warmup 0]
 *          [--drain 2] [--requests N] [--rate R] [--method GET]
 *          [--upload-size N] [--header 'name: value']...
 *          [--expect-status 200] [--expect-body STR | --expect-length N]
 *          [--json FILE] [-v]
 *
 * Debian 12 has no HTTP/3 load generator (h2load and curl lack HTTP/3
 * there); this one exists so that tern's HTTP/3 can be measured against
 * ngtcp2's gtlsserver and against tern's own HTTP/2.
 *
 * --conns QUIC connections, each on its own connected UDP socket, all
 * handshake first (up to 5 s; a failure is counted, the run goes on with
 * the others). Then each connection keeps --streams requests in flight
 * (as far as the server's MAX_STREAMS allows: more are opened as it grants
 * them). Closed loop: an answered request lets the next one go, and its
 * latency is from its stream's opening to the end of its response. With
 * --rate R the load is open: request i is due at t0 + i / R and goes to
 * the next connection with room; its latency is measured from when it was
 * due (as perf/load/h1rate.c does, so that a stalled server is not hidden
 * by the client waiting for it).
 *
 * Every response is checked: :status against --expect-status, the body
 * against --expect-body (compared as it arrives) or --expect-length. A
 * request body (--upload-size N bytes, POST unless --method says
 * otherwise) is a fixed pattern that nghttp3 reads in place: nothing is
 * copied per request. The client's flow-control windows (8 MiB a stream,
 * 16 MiB the connection, credited back as data is consumed) are wide
 * enough never to limit the server.
 *
 * Phases: handshakes; --warmup seconds not counted; the measured window
 * of --duration seconds (its start is announced by "h3load: measuring" on
 * stderr, flushed: the benchmark driver snapshots the server then); a
 * drain of up to --drain seconds for the requests in flight, after which
 * the rest count as unanswered; then each connection lingers until its
 * last ACKs have gone out and closes with CONNECTION_CLOSE (H3_NO_ERROR),
 * so that a server counting responses on acknowledgement counts them all.
 * --requests N replaces the clock: exactly N requests, measured from the
 * end of the handshakes to the last answer (bounded by --duration when it
 * is given, else by 600 s).
 *
 * Counts (the measured window): requests (responses complete and
 * correct), errors by kind: connect (the socket failed or the port was
 * unreachable), handshake (no QUIC/TLS handshake), status, body, reset
 * (the server reset a request stream), closed (requests lost with a
 * connection the server closed, or 1 for a closed idle one), unanswered,
 * protocol (a QUIC or HTTP/3 error on this side; the connection is
 * dropped). The first error of each kind is described on stderr.
 *
 * Exit status: 0 when the run happened (the caller judges the counts), 1
 * when it could not start (no connection completed its handshake, or the
 * report could not be written), 2 on bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <limits.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#define PROG "h3load"
#define MAX_EVENTS 64
#define MAX_HEADERS 64
#define PKT_MAX 1452             /* ngtcp2's default UDP payload size */
#define BATCH 32                 /* datagrams per sendmmsg */
#define PATTERN_LEN (251 * 256)  /* whole periods of i % 251 */
#define SETUP_NS 5000000000ull   /* handshakes must be done by then */
#define LINGER_NS 60000000ull    /* > the 25 ms ACK delay, see finish */
#define STREAM_WINDOW (8u << 20) /* per stream, each way */
#define CONN_WINDOW (16u << 20)  /* per connection */
#define REQUESTS_LIMIT_S 600.0   /* --requests without --duration */

enum {
  K_CONNECT,
  K_HANDSHAKE,
  K_STATUS,
  K_BODY,
  K_RESET,
  K_CLOSED,
  K_UNANSWERED,
  K_PROTOCOL,
  K_COUNT
};
static const char *const kind_name[K_COUNT] = {
    "connect", "handshake", "status",     "body",
    "reset",   "closed",    "unanswered", "protocol"};

enum { C_HANDSHAKE, C_READY, C_DEAD };

typedef struct conn conn;

/* One request in flight. Slots are reused: nothing is allocated per
 * request by this client. */
typedef struct {
  conn *c;
  int64_t id;
  int used;       /* a stream is open on it */
  int answered;   /* its response ended (or failed): no longer in flight */
  int status;     /* :status, 0 before the final head */
  int bad_body;   /* a body byte differed, or there were too many */
  uint64_t index; /* its number in the --rate schedule */
  uint64_t t0;    /* latency origin: opened, or due (--rate) */
  uint64_t got;   /* response body bytes */
  uint64_t sent;  /* request body bytes handed to nghttp3 */
} slot;

struct conn {
  int fd;
  int state;
  int dirty;     /* something may be waiting to be written */
  int want_open; /* the server may have granted more streams */
  ngtcp2_conn *q;
  nghttp3_conn *h3;
  gnutls_session_t tls;
  ngtcp2_crypto_conn_ref ref;
  struct sockaddr_storage local;
  socklen_t locallen;
  slot *slots;
  long inflight;    /* requests sent, not answered */
  long open;        /* streams open (answered ones may wait for ACKs) */
  uint64_t last_rx; /* when a packet last came in */
};

static struct {
  lg_target target;
  const char *host, *authority, *path, *method;
  long port, nconns, streams;
  double duration, warmup, drain, rate;
  int duration_given, verbose;
  uint64_t requests_limit; /* --requests; 0: run by the clock */
  uint64_t upload;
  int expect_status;
  const char *expect_body;
  size_t expect_body_len;
  int64_t expect_length; /* -1: not checked */
  nghttp3_nv *nva;
  size_t nnv;
  char clen[24];
  int ep;
  gnutls_certificate_credentials_t cred;
  conn *conns;
  long ready;
  int issuing, measuring;
  uint64_t win_start, win_end;
  double ns_per_req;
  uint64_t sched_t0, sched_total, sched_next, first_measured;
  uint64_t issued, answered_total;
  /* the report */
  lg_hist hist;
  uint64_t requests, errors[K_COUNT], bytes_up, bytes_down, unfinished;
  uint64_t in_window; /* --rate: answers of any request in the window */
  int said[K_COUNT];
} g;

static uint8_t pattern[PATTERN_LEN];

static void usage(void) {
  fprintf(stderr,
          "usage: " PROG " --port P [--host 127.0.0.1] [--authority localhost]"
          " [--path /]\n"
          "  [--conns 4] [--streams 32] [--duration 10] [--warmup 0]"
          " [--drain 2]\n"
          "  [--requests N] [--rate R] [--method GET] [--upload-size N]\n"
          "  [--header 'name: value']... [--expect-status 200]\n"
          "  [--expect-body STR | --expect-length N] [--json FILE] [-v]\n");
  exit(2);
}

static int in_window(uint64_t now) {
  return g.measuring && now < g.win_end;
}

/* Count an error of `kind` (n of them), describing the first of each kind
 * on stderr. */
static void error(int kind, uint64_t n, const char *fmt, ...) {
  va_list ap;
  g.errors[kind] += n;
  if (g.said[kind])
    return;
  g.said[kind] = 1;
  fprintf(stderr, PROG ": first %s error: ", kind_name[kind]);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

/* The connection is unusable: its requests in flight are lost (counted as
 * `kind`, at least once for the connection itself). */
static void conn_fail(conn *c, int kind, const char *why) {
  long i, lost = 0;
  if (c->state == C_DEAD)
    return;
  for (i = 0; c->slots != NULL && i < g.streams * 2; i++)
    if (c->slots[i].used && !c->slots[i].answered) {
      c->slots[i].answered = 1;
      lost++;
    }
  if (c->state == C_READY)
    g.ready--;
  g.answered_total += (uint64_t)lost;
  c->inflight = 0;
  c->state = C_DEAD;
  error(kind, lost > 0 ? (uint64_t)lost : 1, "%s", why);
  if (c->fd >= 0) {
    close(c->fd); /* also leaves the epoll set */
    c->fd = -1;
  }
}

/* ---- one response ------------------------------------------------------ */

/* The response on `s` ended (end of stream) or failed. */
static void answered(slot *s, int kind, uint64_t now) {
  conn *c = s->c;
  if (s->answered)
    return;
  s->answered = 1;
  c->inflight--;
  c->want_open = 1;
  g.answered_total++;
  if (g.rate > 0 && now >= g.win_start && now < g.win_end)
    g.in_window++;
  /* Closed loop: what ends in the window counts. --rate: what was due in
   * it (h1rate's rule), so that queued warm-up requests do not count. */
  if (g.rate > 0 ? s->index < g.first_measured || s->index >= g.sched_total
                 : !in_window(now))
    return;
  if (kind >= 0) {
    error(kind, 1, "stream %lld", (long long)s->id);
    return;
  }
  if (s->status != g.expect_status) {
    error(K_STATUS, 1, "stream %lld: status %d, expected %d", (long long)s->id,
          s->status, g.expect_status);
    return;
  }
  if (s->bad_body || (g.expect_body != NULL && s->got != g.expect_body_len) ||
      (g.expect_length >= 0 && s->got != (uint64_t)g.expect_length)) {
    error(K_BODY, 1, "stream %lld: %llu body bytes%s", (long long)s->id,
          (unsigned long long)s->got,
          s->bad_body ? ", not the expected ones" : ", not the expected count");
    return;
  }
  g.requests++;
  lg_hist_record(&g.hist, now > s->t0 ? (now - s->t0 + 500) / 1000 : 0);
}

/* ---- ngtcp2 callbacks ---------------------------------------------------
 * None of them calls ngtcp2_conn_read_pkt or writev_stream: ngtcp2 asserts
 * against re-entry. `user` is the conn. */

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  (void)ctx;
  (void)gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

static int new_cid_cb(ngtcp2_conn *q, ngtcp2_cid *cid, uint8_t *token,
                      size_t cidlen, void *user) {
  (void)q;
  (void)user;
  if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen) != 0 ||
      gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN))
    return NGTCP2_ERR_CALLBACK_FAILURE;
  cid->datalen = cidlen;
  return 0;
}

static int setup_h3(conn *c);

/* The 1-RTT keys are in: the server's transport parameters are known, so
 * the control and QPACK streams can be opened. */
static int rx_key_cb(ngtcp2_conn *q, ngtcp2_crypto_level level, void *user) {
  (void)q;
  if (level != NGTCP2_CRYPTO_LEVEL_APPLICATION)
    return 0;
  return setup_h3(user) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int handshake_done_cb(ngtcp2_conn *q, void *user) {
  conn *c = user;
  (void)q;
  c->state = C_READY;
  c->want_open = 1;
  g.ready++;
  return 0;
}

static int recv_stream_cb(ngtcp2_conn *q, uint32_t flags, int64_t id,
                          uint64_t offset, const uint8_t *data, size_t len,
                          void *user, void *sdata) {
  conn *c = user;
  nghttp3_ssize n;
  (void)offset;
  (void)sdata;
  if (c->h3 == NULL)
    return 0;
  n = nghttp3_conn_read_stream(c->h3, id, data, len,
                               (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0);
  if (n < 0) {
    error(K_PROTOCOL, 0, "nghttp3: %s", nghttp3_strerror((int)n));
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  /* Frame headers and fields are consumed at once; DATA payloads are
   * credited in h3_recv_data. */
  ngtcp2_conn_extend_max_stream_offset(q, id, (uint64_t)n);
  ngtcp2_conn_extend_max_offset(q, (uint64_t)n);
  return 0;
}

static int acked_cb(ngtcp2_conn *q, int64_t id, uint64_t offset, uint64_t len,
                    void *user, void *sdata) {
  conn *c = user;
  (void)q;
  (void)offset;
  (void)sdata;
  return c->h3 != NULL && nghttp3_conn_add_ack_offset(c->h3, id, len) != 0
             ? NGTCP2_ERR_CALLBACK_FAILURE
             : 0;
}

static int stream_close_cb(ngtcp2_conn *q, uint32_t flags, int64_t id,
                           uint64_t code, void *user, void *sdata) {
  conn *c = user;
  slot *s = sdata;
  int rv;
  (void)q;
  if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
    code = NGHTTP3_H3_NO_ERROR;
  if (c->h3 != NULL) {
    rv = nghttp3_conn_close_stream(c->h3, id, code);
    if (rv != 0 && rv != NGHTTP3_ERR_STREAM_NOT_FOUND)
      return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  if (s != NULL && s->used) {
    /* Closed without an end of stream: the server reset it. */
    answered(s, K_RESET, lg_now_ns());
    s->used = 0;
    c->open--;
    c->want_open = 1;
  }
  return 0;
}

static int stream_reset_cb(ngtcp2_conn *q, int64_t id, uint64_t final_size,
                           uint64_t code, void *user, void *sdata) {
  conn *c = user;
  slot *s = sdata;
  (void)q;
  (void)final_size;
  if (s != NULL && !s->answered)
    error(K_RESET, 0, "stream %lld reset by the server, code 0x%llx",
          (long long)id, (unsigned long long)code);
  if (s != NULL)
    answered(s, K_RESET, lg_now_ns());
  if (c->h3 != NULL && nghttp3_conn_shutdown_stream_read(c->h3, id) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

static int stop_sending_cb(ngtcp2_conn *q, int64_t id, uint64_t code,
                           void *user, void *sdata) {
  conn *c = user;
  (void)q;
  (void)code;
  (void)sdata;
  if (c->h3 != NULL && nghttp3_conn_shutdown_stream_read(c->h3, id) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

static int more_streams_cb(ngtcp2_conn *q, uint64_t max, void *user) {
  conn *c = user;
  (void)q;
  (void)max;
  c->want_open = 1; /* opened from the main loop */
  return 0;
}

static int extend_data_cb(ngtcp2_conn *q, int64_t id, uint64_t max, void *user,
                          void *sdata) {
  conn *c = user;
  (void)q;
  (void)max;
  (void)sdata;
  return c->h3 != NULL && nghttp3_conn_unblock_stream(c->h3, id) != 0
             ? NGTCP2_ERR_CALLBACK_FAILURE
             : 0;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) {
  return ((conn *)ref->user_data)->q;
}

/* ---- nghttp3 callbacks ------------------------------------------------- */

static int h3_acked(nghttp3_conn *h3, int64_t id, uint64_t len, void *user,
                    void *sdata) {
  (void)h3;
  (void)id;
  (void)user;
  (void)sdata;
  if (in_window(lg_now_ns()))
    g.bytes_up += len;
  return 0;
}

static int h3_recv_data(nghttp3_conn *h3, int64_t id, const uint8_t *data,
                        size_t len, void *user, void *sdata) {
  conn *c = user;
  slot *s = sdata;
  (void)h3;
  if (s != NULL) {
    if (g.expect_body != NULL && !s->bad_body) {
      if (s->got + len > g.expect_body_len ||
          memcmp(data, g.expect_body + s->got, len) != 0)
        s->bad_body = 1;
    }
    s->got += len;
  }
  if (in_window(lg_now_ns()))
    g.bytes_down += len;
  ngtcp2_conn_extend_max_offset(c->q, len);
  ngtcp2_conn_extend_max_stream_offset(c->q, id, len);
  return 0;
}

static int h3_deferred(nghttp3_conn *h3, int64_t id, size_t n, void *user,
                       void *sdata) {
  conn *c = user;
  (void)h3;
  (void)sdata;
  ngtcp2_conn_extend_max_stream_offset(c->q, id, n);
  ngtcp2_conn_extend_max_offset(c->q, n);
  return 0;
}

static int h3_header(nghttp3_conn *h3, int64_t id, int32_t token,
                     nghttp3_rcbuf *name, nghttp3_rcbuf *value, uint8_t flags,
                     void *user, void *sdata) {
  slot *s = sdata;
  nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
  (void)h3;
  (void)id;
  (void)name;
  (void)flags;
  (void)user;
  if (s != NULL && token == NGHTTP3_QPACK_TOKEN__STATUS && v.len == 3)
    s->status =
        (v.base[0] - '0') * 100 + (v.base[1] - '0') * 10 + (v.base[2] - '0');
  return 0;
}

static int h3_end_stream(nghttp3_conn *h3, int64_t id, void *user,
                         void *sdata) {
  (void)h3;
  (void)id;
  (void)user;
  if (sdata != NULL)
    answered(sdata, -1, lg_now_ns());
  return 0;
}

static int h3_stop_sending(nghttp3_conn *h3, int64_t id, uint64_t code,
                           void *user, void *sdata) {
  conn *c = user;
  (void)h3;
  (void)sdata;
  return ngtcp2_conn_shutdown_stream_read(c->q, id, code) != 0
             ? NGHTTP3_ERR_CALLBACK_FAILURE
             : 0;
}

static int h3_reset_stream(nghttp3_conn *h3, int64_t id, uint64_t code,
                           void *user, void *sdata) {
  conn *c = user;
  (void)h3;
  (void)sdata;
  return ngtcp2_conn_shutdown_stream_write(c->q, id, code) != 0
             ? NGHTTP3_ERR_CALLBACK_FAILURE
             : 0;
}

/* A request body from the static pattern, which outlives every
 * acknowledgement (nghttp3 does not copy bodies). */
static nghttp3_ssize h3_read_body(nghttp3_conn *h3, int64_t id,
                                  nghttp3_vec *vec, size_t veccnt,
                                  uint32_t *pflags, void *user, void *sdata) {
  slot *s = sdata;
  uint64_t left = g.upload - s->sent;
  size_t off = (size_t)(s->sent % PATTERN_LEN);
  size_t k = PATTERN_LEN - off;
  (void)h3;
  (void)id;
  (void)veccnt;
  (void)user;
  if (left == 0) {
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
    return 0;
  }
  if (k > left)
    k = (size_t)left;
  vec[0].base = pattern + off;
  vec[0].len = k;
  s->sent += k;
  if (s->sent == g.upload)
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
  return 1;
}

static int setup_h3(conn *c) {
  nghttp3_callbacks cb;
  nghttp3_settings st;
  int64_t ctrl, qenc, qdec;

  memset(&cb, 0, sizeof(cb));
  cb.acked_stream_data = h3_acked;
  cb.recv_data = h3_recv_data;
  cb.deferred_consume = h3_deferred;
  cb.recv_header = h3_header;
  cb.end_stream = h3_end_stream;
  cb.stop_sending = h3_stop_sending;
  cb.reset_stream = h3_reset_stream;
  nghttp3_settings_default(&st);
  st.qpack_max_dtable_capacity = 4096;
  st.qpack_blocked_streams = 100;
  if (nghttp3_conn_client_new(&c->h3, &cb, &st, NULL, c) != 0)
    return -1;
  if (ngtcp2_conn_open_uni_stream(c->q, &ctrl, NULL) != 0 ||
      nghttp3_conn_bind_control_stream(c->h3, ctrl) != 0 ||
      ngtcp2_conn_open_uni_stream(c->q, &qenc, NULL) != 0 ||
      ngtcp2_conn_open_uni_stream(c->q, &qdec, NULL) != 0 ||
      nghttp3_conn_bind_qpack_streams(c->h3, qenc, qdec) != 0)
    return -1;
  return 0;
}

/* ---- requests ---------------------------------------------------------- */

static nghttp3_nv nv(const char *n, size_t nlen, const char *v, size_t vlen) {
  nghttp3_nv x;
  x.name = (uint8_t *)n;
  x.namelen = nlen;
  x.value = (uint8_t *)v;
  x.valuelen = vlen;
  x.flags = NGHTTP3_NV_FLAG_NONE;
  return x;
}

/* Whether `c` can take one more request now. */
static int has_room(const conn *c) {
  return c->state == C_READY && c->want_open && c->inflight < g.streams &&
         c->open < 2 * g.streams;
}

/* Open one request on `c`; 1 if opened, 0 if the server's MAX_STREAMS or
 * the slots are used up (want_open is cleared until that changes), -1 if
 * the connection failed. */
static int submit(conn *c, uint64_t index, uint64_t t0) {
  static const nghttp3_data_reader body = {h3_read_body};
  slot *s = NULL;
  long i;
  int rv;

  for (i = 0; i < 2 * g.streams; i++)
    if (!c->slots[i].used) {
      s = &c->slots[i];
      break;
    }
  if (s == NULL) {
    c->want_open = 0;
    return 0;
  }
  rv = ngtcp2_conn_open_bidi_stream(c->q, &s->id, s);
  if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED) {
    c->want_open = 0;
    return 0;
  }
  if (rv != 0) {
    conn_fail(c, K_PROTOCOL, ngtcp2_strerror(rv));
    return -1;
  }
  s->c = c;
  s->used = 1;
  s->answered = 0;
  s->status = 0;
  s->bad_body = 0;
  s->index = index;
  s->t0 = t0;
  s->got = 0;
  s->sent = 0;
  rv = nghttp3_conn_submit_request(c->h3, s->id, g.nva, g.nnv,
                                   g.upload > 0 ? &body : NULL, s);
  if (rv != 0) {
    conn_fail(c, K_PROTOCOL, nghttp3_strerror(rv));
    return -1;
  }
  c->inflight++;
  c->open++;
  c->dirty = 1;
  g.issued++;
  return 1;
}

/* Closed loop: fill every connection up to --streams in flight. */
static void fill_closed(uint64_t now) {
  long i;
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    while (g.issuing && has_room(c)) {
      if (g.requests_limit > 0 && g.issued >= g.requests_limit) {
        g.issuing = 0;
        break;
      }
      if (submit(c, 0, now) <= 0)
        break;
    }
  }
}

static uint64_t due(uint64_t i) {
  return g.sched_t0 + (uint64_t)((double)i * g.ns_per_req);
}

/* --rate: send every request that is due, each to the next connection with
 * room (round robin); those that find none wait, their latency running. */
static void fill_rate(uint64_t now) {
  static long rr;
  while (g.issuing && g.sched_next < g.sched_total &&
         due(g.sched_next) <= now) {
    long k;
    int sent = 0;
    for (k = 0; k < g.nconns && !sent; k++) {
      conn *c = &g.conns[(rr + k) % g.nconns];
      if (has_room(c) && submit(c, g.sched_next, due(g.sched_next)) > 0) {
        sent = 1;
        rr = (rr + k + 1) % g.nconns;
      }
    }
    if (!sent)
      return;
    g.sched_next++;
  }
  if (g.sched_next >= g.sched_total)
    g.issuing = 0;
}

/* ---- packets ----------------------------------------------------------- */

static uint8_t txbuf[BATCH][PKT_MAX];

/* Steps of docs/http3.md's write loop: everything `c` has to send, in
 * batches of datagrams. */
static void write_conn(conn *c, uint64_t now) {
  struct mmsghdr mm[BATCH];
  struct iovec iov[BATCH];
  ngtcp2_path_storage ps;
  ngtcp2_pkt_info pi;
  size_t n = 0;

  if (c->state == C_DEAD)
    return;
  c->dirty = 0;
  ngtcp2_path_storage_zero(&ps);
  for (;;) {
    int64_t sid = -1;
    int fin = 0;
    nghttp3_vec vec[16];
    nghttp3_ssize nvec = 0;
    ngtcp2_ssize nwrite, ndata = -1;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;

    if (c->h3 != NULL && ngtcp2_conn_get_max_data_left(c->q) > 0) {
      nvec = nghttp3_conn_writev_stream(c->h3, &sid, &fin, vec, 16);
      if (nvec < 0) {
        conn_fail(c, K_PROTOCOL, nghttp3_strerror((int)nvec));
        return;
      }
    }
    if (fin)
      flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
    nwrite = ngtcp2_conn_writev_stream(
        c->q, &ps.path, &pi, txbuf[n], PKT_MAX, &ndata, flags, sid,
        (const ngtcp2_vec *)vec, (size_t)nvec, now);
    if (nwrite < 0) {
      if (nwrite == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
        nghttp3_conn_block_stream(c->h3, sid);
        continue;
      }
      if (nwrite == NGTCP2_ERR_STREAM_SHUT_WR) {
        nghttp3_conn_shutdown_stream_write(c->h3, sid);
        continue;
      }
      if (nwrite == NGTCP2_ERR_WRITE_MORE) {
        if (nghttp3_conn_add_write_offset(c->h3, sid, (uint64_t)ndata) != 0) {
          conn_fail(c, K_PROTOCOL, "nghttp3_conn_add_write_offset");
          return;
        }
        continue;
      }
      conn_fail(c, K_PROTOCOL, ngtcp2_strerror((int)nwrite));
      return;
    }
    if (ndata >= 0 && sid >= 0 &&
        nghttp3_conn_add_write_offset(c->h3, sid, (uint64_t)ndata) != 0) {
      conn_fail(c, K_PROTOCOL, "nghttp3_conn_add_write_offset");
      return;
    }
    if (nwrite > 0) {
      memset(&mm[n], 0, sizeof(mm[n]));
      iov[n].iov_base = txbuf[n];
      iov[n].iov_len = (size_t)nwrite;
      mm[n].msg_hdr.msg_iov = &iov[n];
      mm[n].msg_hdr.msg_iovlen = 1;
      n++;
    }
    if (n == BATCH || (nwrite == 0 && n > 0)) {
      size_t done = 0;
      while (done < n) {
        int r = sendmmsg(c->fd, mm + done, (unsigned)(n - done), 0);
        if (r < 0) {
          if (errno == EINTR)
            continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            break; /* dropped: QUIC's loss recovery resends what matters */
          conn_fail(c, c->state == C_HANDSHAKE ? K_CONNECT : K_CLOSED,
                    strerror(errno));
          return;
        }
        done += (size_t)r;
      }
      n = 0;
    }
    if (nwrite == 0)
      break;
  }
  ngtcp2_conn_update_pkt_tx_time(c->q, now);
}

/* Read what the socket holds. */
static void read_conn(conn *c) {
  static uint8_t buf[65536];
  ngtcp2_path path;
  ngtcp2_pkt_info pi;
  memset(&pi, 0, sizeof(pi));
  path.local.addr = (ngtcp2_sockaddr *)&c->local;
  path.local.addrlen = c->locallen;
  path.remote.addr = (ngtcp2_sockaddr *)&g.target.addr;
  path.remote.addrlen = g.target.len;
  path.user_data = NULL;
  while (c->state != C_DEAD) {
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    int rv;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      /* On a connected UDP socket, ICMP port unreachable shows here. */
      conn_fail(c, c->state == C_HANDSHAKE ? K_CONNECT : K_CLOSED,
                strerror(errno));
      return;
    }
    c->last_rx = lg_now_ns();
    c->dirty = 1;
    rv = ngtcp2_conn_read_pkt(c->q, &path, &pi, buf, (size_t)n, c->last_rx);
    if (rv == NGTCP2_ERR_DRAINING) {
      ngtcp2_connection_close_error ce;
      char why[96];
      ngtcp2_conn_get_connection_close_error(c->q, &ce);
      snprintf(why, sizeof(why), "the server closed the connection (%s 0x%llx)",
               ce.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION
                   ? "application"
                   : "transport",
               (unsigned long long)ce.error_code);
      conn_fail(c, c->state == C_HANDSHAKE ? K_HANDSHAKE : K_CLOSED, why);
      return;
    }
    if (rv != 0) {
      conn_fail(c, c->state == C_HANDSHAKE ? K_HANDSHAKE : K_PROTOCOL,
                ngtcp2_strerror(rv));
      return;
    }
  }
}

static void expire_conn(conn *c, uint64_t now) {
  int rv;
  if (c->state == C_DEAD || ngtcp2_conn_get_expiry(c->q) > now)
    return;
  c->dirty = 1;
  rv = ngtcp2_conn_handle_expiry(c->q, now);
  if (rv == NGTCP2_ERR_IDLE_CLOSE)
    conn_fail(c, c->state == C_HANDSHAKE ? K_HANDSHAKE : K_CLOSED,
              "idle timeout");
  else if (rv != 0)
    conn_fail(c, K_PROTOCOL, ngtcp2_strerror(rv));
}

/* Wait for packets or the earliest timer (never past `until`), then do
 * what is due on every connection. */
static void poll_once(uint64_t until) {
  struct epoll_event ev[MAX_EVENTS];
  uint64_t now = lg_now_ns(), wake = until;
  long i;
  int n, ms;

  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    if (c->state != C_DEAD) {
      uint64_t e = ngtcp2_conn_get_expiry(c->q);
      if (e < wake)
        wake = e;
    }
  }
  /* Round up: a timer that fires early finds nothing due and spins. */
  ms = wake <= now ? 0
       : (wake - now) / 1000000u >= INT_MAX
           ? INT_MAX
           : (int)((wake - now + 999999u) / 1000000u);
  n = epoll_wait(g.ep, ev, MAX_EVENTS, ms);
  for (i = 0; i < n; i++) {
    conn *c = &g.conns[ev[i].data.u64];
    if (c->state != C_DEAD)
      read_conn(c);
  }
  now = lg_now_ns();
  for (i = 0; i < g.nconns; i++)
    expire_conn(&g.conns[i], now);
}

/* Open, fill and write: the work after each poll. */
static void step(void) {
  uint64_t now = lg_now_ns();
  long i;
  if (!g.measuring && g.ready > 0 && g.issuing && now >= g.win_start) {
    g.measuring = 1;
    fprintf(stderr, PROG ": measuring\n");
    fflush(stderr);
  }
  if (g.issuing) {
    if (g.rate > 0)
      fill_rate(now);
    else
      fill_closed(now);
  }
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    if (c->dirty)
      write_conn(c, now);
  }
}

/* ---- setup ------------------------------------------------------------- */

static void log_cb(void *user, const char *fmt, ...) {
  va_list ap;
  (void)user;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static int conn_setup_tls(conn *c) {
  static const char prio[] = "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:"
                             "+VERS-TLS1.3";
  gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
  const char *colon = strrchr(g.authority, ':');
  size_t snilen = colon != NULL && g.authority[0] != '['
                      ? (size_t)(colon - g.authority)
                      : strlen(g.authority);
  if (gnutls_init(&c->tls, GNUTLS_CLIENT | GNUTLS_ENABLE_EARLY_DATA |
                               GNUTLS_NO_END_OF_EARLY_DATA) != 0 ||
      gnutls_priority_set_direct(c->tls, prio, NULL) != 0 ||
      ngtcp2_crypto_gnutls_configure_client_session(c->tls) != 0 ||
      gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, g.cred) != 0 ||
      gnutls_alpn_set_protocols(c->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) != 0 ||
      gnutls_server_name_set(c->tls, GNUTLS_NAME_DNS, g.authority, snilen) != 0)
    return -1;
  /* No gnutls_session_set_verify_cert: benchmark servers run on
   * self-signed certificates. */
  c->ref.get_conn = get_conn;
  c->ref.user_data = c;
  gnutls_session_set_ptr(c->tls, &c->ref);
  return 0;
}

static int conn_setup_quic(conn *c, uint64_t now) {
  ngtcp2_callbacks cb;
  ngtcp2_settings st;
  ngtcp2_transport_params tp;
  ngtcp2_cid dcid, scid;
  ngtcp2_path path;

  memset(&cb, 0, sizeof(cb));
  cb.client_initial = ngtcp2_crypto_client_initial_cb;
  cb.recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb.encrypt = ngtcp2_crypto_encrypt_cb;
  cb.decrypt = ngtcp2_crypto_decrypt_cb;
  cb.hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb.recv_retry = ngtcp2_crypto_recv_retry_cb;
  cb.update_key = ngtcp2_crypto_update_key_cb;
  cb.delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb.delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb.get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb.version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb.rand = rand_cb;
  cb.get_new_connection_id = new_cid_cb;
  cb.handshake_completed = handshake_done_cb;
  cb.recv_rx_key = rx_key_cb;
  cb.recv_stream_data = recv_stream_cb;
  cb.acked_stream_data_offset = acked_cb;
  cb.stream_close = stream_close_cb;
  cb.stream_reset = stream_reset_cb;
  cb.stream_stop_sending = stop_sending_cb;
  cb.extend_max_local_streams_bidi = more_streams_cb;
  cb.extend_max_stream_data = extend_data_cb;

  ngtcp2_settings_default(&st);
  st.initial_ts = now;
  if (g.verbose)
    st.log_printf = log_cb;
  st.max_stream_window = STREAM_WINDOW;
  st.max_window = CONN_WINDOW;
  ngtcp2_transport_params_default(&tp);
  tp.initial_max_streams_uni = 3;
  tp.initial_max_stream_data_bidi_local = STREAM_WINDOW;
  tp.initial_max_stream_data_uni = 256 * 1024;
  tp.initial_max_data = CONN_WINDOW;
  tp.max_idle_timeout = 30 * NGTCP2_SECONDS;

  dcid.datalen = 18;
  scid.datalen = 17;
  if (gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, dcid.datalen) != 0 ||
      gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen) != 0)
    return -1;
  path.local.addr = (ngtcp2_sockaddr *)&c->local;
  path.local.addrlen = c->locallen;
  path.remote.addr = (ngtcp2_sockaddr *)&g.target.addr;
  path.remote.addrlen = g.target.len;
  path.user_data = NULL;
  if (ngtcp2_conn_client_new(&c->q, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1,
                             &cb, &st, &tp, NULL, c) != 0)
    return -1;
  ngtcp2_conn_set_tls_native_handle(c->q, c->tls);
  return 0;
}

/* A connected, non-blocking UDP socket for `c`; -1 with errno set. */
static int conn_socket(conn *c) {
  struct epoll_event ev;
  int fd = socket(g.target.addr.ss_family,
                  SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  c->fd = fd;
  c->locallen = sizeof(c->local);
  if (connect(fd, (struct sockaddr *)&g.target.addr, g.target.len) != 0 ||
      getsockname(fd, (struct sockaddr *)&c->local, &c->locallen) != 0)
    return -1;
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN;
  ev.data.u64 = (uint64_t)(c - g.conns);
  return epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev);
}

static void conn_start(conn *c, uint64_t now) {
  c->state = C_HANDSHAKE;
  c->fd = -1;
  c->slots = calloc((size_t)(2 * g.streams), sizeof(slot));
  if (c->slots == NULL || conn_socket(c) != 0) {
    conn_fail(c, K_CONNECT, strerror(errno));
    return;
  }
  if (conn_setup_tls(c) != 0 || conn_setup_quic(c, now) != 0) {
    conn_fail(c, K_HANDSHAKE, "TLS or QUIC setup failed");
    return;
  }
  c->dirty = 1;
}

/* The end: a CONNECTION_CLOSE (H3_NO_ERROR) on every live connection. */
static void conn_close_all(void) {
  long i;
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    ngtcp2_path_storage ps;
    ngtcp2_pkt_info pi;
    ngtcp2_connection_close_error ce;
    ngtcp2_ssize n;
    if (c->state == C_DEAD)
      continue;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_connection_close_error_default(&ce);
    ngtcp2_connection_close_error_set_application_error(
        &ce, NGHTTP3_H3_NO_ERROR, NULL, 0);
    n = ngtcp2_conn_write_connection_close(c->q, &ps.path, &pi, txbuf[0],
                                           PKT_MAX, &ce, lg_now_ns());
    if (n > 0)
      (void)send(c->fd, txbuf[0], (size_t)n, 0);
    close(c->fd);
    c->fd = -1;
    c->state = C_DEAD;
  }
}

static long inflight_total(void) {
  long i, n = 0;
  for (i = 0; i < g.nconns; i++)
    if (g.conns[i].state != C_DEAD)
      n += g.conns[i].inflight;
  return n;
}

/* ---- arguments and report ---------------------------------------------- */

/* --header 'name: value': the name lowercased (HTTP/3 requires it), the
 * value without the spaces around it. */
static void add_header(char *h) {
  char *colon = strchr(h, ':'), *v, *e, *p;
  if (colon == NULL || colon == h || strpbrk(h, "\r\n") != NULL) {
    fprintf(stderr, PROG ": --header needs 'name: value', not '%s'\n", h);
    exit(2);
  }
  for (p = h; p < colon; p++) {
    if (*p >= 'A' && *p <= 'Z')
      *p = (char)(*p + 32);
    if (*p == ' ' || *p == '\t') {
      fprintf(stderr, PROG ": bad header name in '%s'\n", h);
      exit(2);
    }
  }
  v = colon + 1;
  while (*v == ' ' || *v == '\t')
    v++;
  e = v + strlen(v);
  while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
    e--;
  g.nva[g.nnv++] = nv(h, (size_t)(colon - h), v, (size_t)(e - v));
}

static void report_json(FILE *f, double secs, double rate_achieved,
                        uint64_t nerr) {
  int k;
  fprintf(f, "{\"requests\":%llu,\"errors\":%llu,\"error_kinds\":{",
          (unsigned long long)g.requests, (unsigned long long)nerr);
  for (k = 0; k < K_COUNT; k++)
    fprintf(f, "%s\"%s\":%llu", k ? "," : "", kind_name[k],
            (unsigned long long)g.errors[k]);
  fprintf(f, "},\"rate_achieved\":%.3f,\"latency_us\":", rate_achieved);
  lg_json_latency(f, &g.hist);
  fprintf(f,
          ",\"duration_s\":%.6f,\"conns\":%ld,\"conns_ready\":%ld,"
          "\"streams\":%ld,\"bytes_up\":%llu,\"bytes_down\":%llu,"
          "\"mib_per_s_up\":%.3f,\"mib_per_s_down\":%.3f,\"warmup_s\":%.3f",
          secs, g.nconns, g.ready, g.streams, (unsigned long long)g.bytes_up,
          (unsigned long long)g.bytes_down,
          secs > 0 ? (double)g.bytes_up / 1048576.0 / secs : 0.0,
          secs > 0 ? (double)g.bytes_down / 1048576.0 / secs : 0.0,
          g.requests_limit > 0 ? 0.0 : g.warmup);
  if (g.rate > 0)
    fprintf(f, ",\"rate_offered\":%.3f,\"unfinished\":%llu", g.rate,
            (unsigned long long)g.unfinished);
  fprintf(f, "}\n");
}

int main(int argc, char **argv) {
  const char *json = NULL;
  uint64_t now, setup_end, end_by, drain_end, linger_end, k, nerr = 0;
  double secs, rate_achieved;
  long i;
  int a, ready_ever;

  g.host = "127.0.0.1";
  g.authority = "localhost";
  g.path = "/";
  g.method = NULL;
  g.port = -1;
  g.nconns = 4;
  g.streams = 32;
  g.duration = 10;
  g.drain = 2;
  g.expect_status = 200;
  g.expect_length = -1;
  g.nva = calloc(MAX_HEADERS + 8, sizeof(nghttp3_nv));
  if (g.nva == NULL)
    return 1;
  g.nnv = 5; /* the pseudo-fields and content-length, filled below */
  for (a = 1; a < argc; a++) {
    const char *o = argv[a];
    if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0)
      usage();
    else if (strcmp(o, "--port") == 0)
      g.port =
          lg_arg_long(PROG, o, lg_arg_value(PROG, argc, argv, &a), 1, 65535);
    else if (strcmp(o, "--host") == 0)
      g.host = lg_arg_value(PROG, argc, argv, &a);
    else if (strcmp(o, "--authority") == 0)
      g.authority = lg_arg_value(PROG, argc, argv, &a);
    else if (strcmp(o, "--path") == 0)
      g.path = lg_arg_value(PROG, argc, argv, &a);
    else if (strcmp(o, "--conns") == 0)
      g.nconns =
          lg_arg_long(PROG, o, lg_arg_value(PROG, argc, argv, &a), 1, 10000);
    else if (strcmp(o, "--streams") == 0)
      g.streams =
          lg_arg_long(PROG, o, lg_arg_value(PROG, argc, argv, &a), 1, 10000);
    else if (strcmp(o, "--duration") == 0) {
      g.duration = lg_arg_double(PROG, o, lg_arg_value(PROG, argc, argv, &a),
                                 0.001, 86400);
      g.duration_given = 1;
    } else if (strcmp(o, "--warmup") == 0)
      g.warmup =
          lg_arg_double(PROG, o, lg_arg_value(PROG, argc, argv, &a), 0, 86400);
    else if (strcmp(o, "--drain") == 0)
      g.drain =
          lg_arg_double(PROG, o, lg_arg_value(PROG, argc, argv, &a), 0, 3600);
    else if (strcmp(o, "--requests") == 0)
      g.requests_limit = (uint64_t)lg_arg_long(
          PROG, o, lg_arg_value(PROG, argc, argv, &a), 1, LONG_MAX);
    else if (strcmp(o, "--rate") == 0)
      g.rate = lg_arg_double(PROG, o, lg_arg_value(PROG, argc, argv, &a), 0.001,
                             1e8);
    else if (strcmp(o, "--method") == 0)
      g.method = lg_arg_value(PROG, argc, argv, &a);
    else if (strcmp(o, "--upload-size") == 0)
      g.upload = (uint64_t)lg_arg_long(
          PROG, o, lg_arg_value(PROG, argc, argv, &a), 0, LONG_MAX);
    else if (strcmp(o, "--header") == 0) {
      if (g.nnv == MAX_HEADERS + 5) {
        fprintf(stderr, PROG ": at most %d --header options\n", MAX_HEADERS);
        return 2;
      }
      add_header((char *)lg_arg_value(PROG, argc, argv, &a));
    } else if (strcmp(o, "--expect-status") == 0)
      g.expect_status = (int)lg_arg_long(
          PROG, o, lg_arg_value(PROG, argc, argv, &a), 100, 599);
    else if (strcmp(o, "--expect-body") == 0) {
      g.expect_body = lg_arg_value(PROG, argc, argv, &a);
      g.expect_body_len = strlen(g.expect_body);
    } else if (strcmp(o, "--expect-length") == 0)
      g.expect_length =
          lg_arg_long(PROG, o, lg_arg_value(PROG, argc, argv, &a), 0, LONG_MAX);
    else if (strcmp(o, "--json") == 0)
      json = lg_arg_value(PROG, argc, argv, &a);
    else if (strcmp(o, "-v") == 0)
      g.verbose = 1;
    else {
      fprintf(stderr, PROG ": unknown argument '%s'\n", o);
      usage();
    }
  }
  if (g.port < 0)
    usage();
  if (g.expect_body != NULL && g.expect_length >= 0) {
    fprintf(stderr, PROG ": --expect-body and --expect-length exclude each "
                         "other\n");
    return 2;
  }
  if (g.rate > 0 && g.requests_limit > 0) {
    fprintf(stderr, PROG ": --rate runs by the clock, not --requests\n");
    return 2;
  }
  if (lg_check_path(PROG, g.path) != 0)
    return 2;
  if (g.authority[0] == '\0' || strpbrk(g.authority, " \r\n/") != NULL) {
    fprintf(stderr, PROG ": bad --authority\n");
    return 2;
  }
  if (g.method == NULL)
    g.method = g.upload > 0 ? "POST" : "GET";
  if (g.method[0] == '\0' || strpbrk(g.method, " \r\n:") != NULL) {
    fprintf(stderr, PROG ": bad --method\n");
    return 2;
  }
  if (lg_target_init(&g.target, PROG, g.host, g.port) != 0)
    return 2;
  if (lg_raise_nofile() < g.nconns + 16) {
    fprintf(stderr, PROG ": RLIMIT_NOFILE is below %ld connections\n",
            g.nconns);
    return 1;
  }
  g.nva[0] = nv(":method", 7, g.method, strlen(g.method));
  g.nva[1] = nv(":scheme", 7, "https", 5);
  g.nva[2] = nv(":authority", 10, g.authority, strlen(g.authority));
  g.nva[3] = nv(":path", 5, g.path, strlen(g.path));
  snprintf(g.clen, sizeof(g.clen), "%llu", (unsigned long long)g.upload);
  g.nva[4] = nv("content-length", 14, g.clen, strlen(g.clen));
  if (g.upload == 0) {
    /* No content-length on a bodiless request: the slot goes to the last
     * extra field, if any. */
    g.nva[4] = g.nva[--g.nnv];
  }
  for (k = 0; k < PATTERN_LEN; k++)
    pattern[k] = (uint8_t)(k % 251);

  g.ep = epoll_create1(EPOLL_CLOEXEC);
  g.conns = calloc((size_t)g.nconns, sizeof(conn));
  if (g.ep < 0 || g.conns == NULL ||
      gnutls_certificate_allocate_credentials(&g.cred) != 0) {
    perror(PROG);
    return 1;
  }

  /* Every handshake first, before any clock starts. */
  now = lg_now_ns();
  for (i = 0; i < g.nconns; i++)
    conn_start(&g.conns[i], now);
  setup_end = now + SETUP_NS;
  for (;;) {
    long pending = 0;
    for (i = 0; i < g.nconns; i++)
      pending += g.conns[i].state == C_HANDSHAKE;
    if (pending == 0 || lg_now_ns() >= setup_end)
      break;
    step();
    poll_once(setup_end);
  }
  for (i = 0; i < g.nconns; i++)
    if (g.conns[i].state == C_HANDSHAKE)
      conn_fail(&g.conns[i], K_HANDSHAKE, "no handshake within 5 s");
  ready_ever = g.ready > 0;

  /* The run. */
  now = lg_now_ns();
  g.issuing = ready_ever;
  if (g.requests_limit > 0) {
    g.win_start = now;
    end_by =
        now +
        (uint64_t)((g.duration_given ? g.duration : REQUESTS_LIMIT_S) * 1e9);
    g.win_end = UINT64_MAX;
  } else {
    g.win_start = now + (uint64_t)(g.warmup * 1e9);
    g.win_end = g.win_start + (uint64_t)(g.duration * 1e9);
    end_by = g.win_end;
  }
  if (g.rate > 0) {
    g.ns_per_req = 1e9 / g.rate;
    g.sched_t0 = now;
    g.sched_total = (uint64_t)((g.warmup + g.duration) * g.rate);
    g.first_measured = (uint64_t)(g.warmup * g.rate);
  }
  while (g.issuing && g.ready > 0) {
    now = lg_now_ns();
    if (now >= end_by)
      break;
    if (g.requests_limit > 0 && g.answered_total >= g.requests_limit)
      break;
    step();
    if (!g.issuing)
      break;
    /* The next due time, unless it has passed (then the request waits
     * for room, which only a packet or a timer can make). */
    poll_once(g.rate > 0 && g.sched_next < g.sched_total &&
                      due(g.sched_next) > now && due(g.sched_next) < end_by
                  ? due(g.sched_next)
                  : end_by);
  }
  g.issuing = 0;
  now = lg_now_ns();
  if (g.requests_limit == 0 && now < g.win_end)
    g.win_end = now; /* every connection was lost: the window ends here */

  /* The drain: what is in flight may still finish. */
  drain_end = lg_now_ns() + (uint64_t)(g.drain * 1e9);
  while (inflight_total() > 0 && lg_now_ns() < drain_end) {
    step();
    poll_once(drain_end);
  }
  now = lg_now_ns();
  if (g.requests_limit > 0)
    g.win_end = now;
  k = (uint64_t)inflight_total();
  if (k > 0)
    error(K_UNANSWERED, k, "%llu requests in flight after the %.1f s drain",
          (unsigned long long)k, g.drain);
  if (g.rate > 0) {
    /* Due in the window, not answered: in flight, or never sent. */
    for (i = 0; i < g.nconns; i++) {
      long j;
      for (j = 0; g.conns[i].slots != NULL && j < 2 * g.streams; j++) {
        slot *s = &g.conns[i].slots[j];
        if (s->used && !s->answered && s->index >= g.first_measured &&
            g.conns[i].state != C_DEAD) {
          g.unfinished++;
          lg_hist_record(&g.hist, (now - s->t0 + 500) / 1000);
        }
      }
    }
    for (k = g.sched_next > g.first_measured ? g.sched_next : g.first_measured;
         k < g.sched_total; k++) {
      g.unfinished++;
      lg_hist_record(&g.hist, now > due(k) ? (now - due(k) + 500) / 1000 : 0);
    }
  }

  /* Linger: the last responses' ACKs (delayed up to 25 ms by default) go
   * out before the close, so that a server that counts a response when it
   * is acknowledged counts every one. */
  linger_end = lg_now_ns() + LINGER_NS;
  while (g.ready > 0 && lg_now_ns() < linger_end) {
    step();
    poll_once(linger_end);
  }
  conn_close_all();
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    if (c->h3 != NULL)
      nghttp3_conn_del(c->h3);
    if (c->q != NULL)
      ngtcp2_conn_del(c->q);
    if (c->tls != NULL)
      gnutls_deinit(c->tls);
    free(c->slots);
  }
  if (!g.measuring) {
    fprintf(stderr, PROG ": measuring\n"); /* (never reached the window) */
    fflush(stderr);
  }

  secs =
      g.win_end > g.win_start ? (double)(g.win_end - g.win_start) / 1e9 : 0.0;
  for (a = 0; a < K_COUNT; a++)
    nerr += g.errors[a];
  rate_achieved =
      secs > 0 ? (double)(g.rate > 0 ? g.in_window : g.requests) / secs : 0.0;
  printf(PROG ": %s:%ld%s %s, %ld conns (%ld ready) x %ld streams, %.3f s%s\n",
         g.host, g.port, g.path, g.method, g.nconns, g.ready, g.streams, secs,
         g.rate > 0 ? " (open model)" : "");
  printf(PROG ": requests %llu (%.1f req/s), errors %llu (",
         (unsigned long long)g.requests, rate_achieved,
         (unsigned long long)nerr);
  for (a = 0; a < K_COUNT; a++)
    printf("%s%s %llu", a ? ", " : "", kind_name[a],
           (unsigned long long)g.errors[a]);
  printf("); ");
  lg_text_latency(stdout, &g.hist);
  printf("\n");
  if (g.rate > 0)
    printf(PROG ": offered %.1f req/s, unfinished %llu\n", g.rate,
           (unsigned long long)g.unfinished);
  if (g.bytes_up > 0 || g.bytes_down > 0)
    printf(PROG ": body bytes up %llu (%.2f MiB/s), down %llu\n",
           (unsigned long long)g.bytes_up,
           secs > 0 ? (double)g.bytes_up / 1048576.0 / secs : 0.0,
           (unsigned long long)g.bytes_down);
  fflush(stdout);
  if (json != NULL) {
    FILE *f = lg_json_open(json);
    if (f == NULL)
      return 1;
    report_json(f, secs, rate_achieved, nerr);
    if (fclose(f) != 0) {
      perror(json);
      return 1;
    }
  }
  return ready_ever ? 0 : 1;
}
