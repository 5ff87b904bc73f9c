/* h3load: an HTTP/3 load client, single-threaded, on ngtcp2 0.12 (client
 * side, GnuTLS crypto helper) and nghttp3 0.8.
 *
 *   h3load --port P [--host 127.0.0.1] [--authority localhost] [--path /]
 *          [--conns 4] [--streams 32] [--duration 10] [--warmup 0]
 *          [--drain 2] [--requests N] [--rate R] [--method GET]
 *          [--upload-size N] [--header 'name: value']...
 *          [--expect-status 200] [--expect-body STR | --expect-length N]
 *          [--json FILE] [-v]
 *          [--ws [--depth 8] [--size 128] [--text|--binary] [--deflate]
 *                [--ws-path /ws]]
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
 * dropped). The first error of each kind is described on stderr. A
 * GOAWAY stops new requests on its connection; those in flight may
 * finish. Connections are not reopened.
 *
 * --ws: WebSocket over HTTP/3 (RFC 9220) echo load, as wsload does it
 * over HTTP/1.1 (perf/load/wsproto.c, which both share, frames, deflates
 * and checks). Each of the --conns x --streams sockets is a request
 * stream opened by an extended CONNECT (:protocol websocket, with
 * "permessage-deflate; client_max_window_bits" offered under --deflate);
 * 200 opens it, anything else is a status error, a wrong extension answer
 * a handshake error, and so is each socket the server's MAX_STREAMS did
 * not let open. All are opened before the clock starts (up to 5 s).
 * Then each keeps --depth messages of --size bytes in flight, every echo
 * checked byte for byte and in order (a mismatch is a body error, a
 * framing error a protocol one, a Close or end from the server a closed
 * one); latency is from a message's send to its echo, and "requests" (and
 * "messages") counts the echoes in the window. At the end each socket
 * sends a Close (1000) and its FIN, and waits up to 1 s for the server's
 * Close and end (those that do not come are reported, not counted as
 * errors: close_unanswered). The server must have sent
 * SETTINGS_ENABLE_CONNECT_PROTOCOL; nghttp3 0.8 does not tell a client
 * its peer's settings, so h3load simply tries.
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
#include "h3core.h"
#include "wsproto.h"

#define PROG "h3load"
#define MAX_EVENTS 64
#define MAX_HEADERS 64
#define PKT_MAX 1452              /* ngtcp2's default UDP payload size */
#define BATCH 32                  /* datagrams per sendmmsg */
#define PATTERN_LEN (251 * 256)   /* whole periods of i % 251 */
#define SETUP_NS 5000000000ull    /* handshakes must be done by then */
#define LINGER_NS 60000000ull     /* > the 25 ms ACK delay, see main */
#define STREAM_WINDOW (8u << 20)  /* per stream, each way */
#define CONN_WINDOW (16u << 20)   /* per connection */
#define REQUESTS_LIMIT_S 600.0    /* --requests without --duration */
#define WS_CLOSE_NS 1000000000ull /* the server's Close and end, --ws */
#define WS_SLACK 256              /* ring room kept for Pong and Close */
#define WS_MEMORY (1ull << 30)    /* --ws rings, all sockets together */

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

enum { W_UPGRADING, W_OPEN, W_CLOSING, W_DONE };

/* --ws: one WebSocket on a request stream (RFC 9220). Outgoing frames are
 * built in ws.wbuf and copied into a fixed ring that nghttp3 reads in
 * place: what it was handed stays put until acknowledged, so the ring
 * never moves; a socket sends a message only when the ring has room. */
typedef struct {
  wsp_sock ws;
  int state;
  int blocked;        /* the data reader said WOULDBLOCK: resume on data */
  int eof;            /* the Close was queued: FIN after it */
  int got_close;      /* the server's Close came */
  const char *hs_why; /* what was wrong with the 200's extension */
  uint64_t *sent_ns;  /* indexed by seq % depth */
  unsigned char *ring;
  uint64_t head, handed, tail; /* acknowledged, given to nghttp3, queued */
} wsock;

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
  wsock *k;       /* --ws: the WebSocket on this stream */
  int closing;    /* inside ngtcp2's stream_close callback */
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
  int ws_dirty;     /* --ws: a socket may send more now */
  long ws_opened;   /* --ws: sockets opened (never reopened) */
  int goaway;       /* the server is shutting down: no new streams */
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
  nghttp3_nv *nva, *extra;
  size_t nnv, nextra;
  char clen[24];
  int ep;
  gnutls_certificate_credentials_t cred;
  conn *conns;
  long ready;
  int issuing, measuring;
  int drained; /* the drain is over: answers no longer count */
  uint64_t win_start, win_end;
  uint64_t win_last; /* --requests: the window's end for duration_s */
  double ns_per_req;
  uint64_t sched_t0, sched_total, sched_next, first_measured;
  uint64_t issued, answered_total;
  /* the report */
  lg_hist hist;
  uint64_t requests, errors[K_COUNT], bytes_up, bytes_down, unfinished;
  uint64_t in_window; /* --rate: answers of any request in the window */
  int said[K_COUNT];
  /* --ws */
  int ws, ws_sending;
  wsp w;
  const char *ws_path;
  long depth;
  size_t ring_cap;
  long sockets, upgraded, deflate_negotiated, close_unanswered;
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
          "  [--expect-body STR | --expect-length N] [--json FILE] [-v]\n"
          "  [--ws [--depth 8] [--size 128] [--text|--binary] [--deflate]"
          " [--ws-path /ws]]\n");
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
  if (g.drained)
    return; /* already counted as unanswered */
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

/* ---- WebSocket over HTTP/3 (--ws) ---------------------------------------
 * Each socket is a request stream opened by an extended CONNECT; its DATA
 * carries WebSocket frames both ways. A socket is "in flight" (c->inflight)
 * from its CONNECT until it is done, whatever the reason. */

static uint64_t ring_room(const wsock *k) {
  return g.ring_cap - (k->tail - k->head);
}

/* The socket is finished; `kind` >= 0 counts an error (1 per socket),
 * described by `why`, and resets the stream if it is still open (never
 * from ngtcp2's stream_close callback: the stream is going away). */
static void ws_done(slot *s, int kind, const char *why) {
  wsock *k = s->k;
  conn *c = s->c;
  if (k->state == W_DONE)
    return;
  if (kind >= 0) {
    error(kind, 1, "socket %u: %s", (unsigned)k->ws.id, why);
    if (c->state != C_DEAD && s->used && !s->closing)
      (void)ngtcp2_conn_shutdown_stream(c->q, s->id,
                                        NGHTTP3_H3_REQUEST_CANCELLED);
  }
  k->state = W_DONE;
  if (!s->answered) {
    s->answered = 1;
    c->inflight--;
  }
  c->dirty = 1;
}

/* Move the frames built in ws.wbuf into the ring, if it has room. */
static void ws_flush(slot *s) {
  wsock *k = s->k;
  size_t n = k->ws.wlen - k->ws.wpos, off, first;
  if (n > 0) {
    if (ring_room(k) < n)
      return; /* after the next acknowledgements */
    off = (size_t)(k->tail % g.ring_cap);
    first = g.ring_cap - off < n ? g.ring_cap - off : n;
    memcpy(k->ring + off, k->ws.wbuf + k->ws.wpos, first);
    memcpy(k->ring, k->ws.wbuf + k->ws.wpos + first, n - first);
    k->tail += n;
    k->ws.wlen = k->ws.wpos = 0;
  }
  if (k->state == W_CLOSING)
    k->eof = 1; /* the Close is queued: the FIN may follow it */
  if (k->blocked && (k->tail > k->handed || k->eof)) {
    k->blocked = 0;
    if (nghttp3_conn_resume_stream(s->c->h3, s->id) != 0)
      conn_fail(s->c, K_PROTOCOL, "nghttp3_conn_resume_stream");
    s->c->dirty = 1;
  }
}

/* Keep --depth messages in flight while the ring has room. */
static void ws_fill(slot *s, uint64_t now) {
  wsock *k = s->k;
  uint64_t frame_max = g.w.limit + 14 + WS_SLACK;
  while (g.ws_sending && k->state == W_OPEN && s->c->state == C_READY &&
         k->ws.wlen == 0 &&
         k->ws.next_seq - k->ws.next_echo < (uint64_t)g.depth &&
         ring_room(k) >= frame_max) {
    k->sent_ns[k->ws.next_seq % (uint64_t)g.depth] = now;
    if (wsp_put_message(&g.w, &k->ws) != 0) {
      ws_done(s, K_PROTOCOL, "could not compress or buffer a message");
      return;
    }
    ws_flush(s);
  }
}

/* Send the Close (1000); the FIN follows it. */
static void ws_close(slot *s) {
  wsock *k = s->k;
  if (k->state != W_OPEN)
    return;
  k->state = W_CLOSING;
  if (wsp_put_close(&g.w, &k->ws) != 0) {
    ws_done(s, K_PROTOCOL, "out of memory");
    return;
  }
  ws_flush(s);
}

static void ws_on_mismatch(void *u, wsp_sock *ws, const char *why,
                           const unsigned char *p, size_t n) {
  (void)u;
  g.errors[K_BODY]++;
  if (g.said[K_BODY])
    return;
  g.said[K_BODY] = 1;
  fprintf(stderr,
          PROG ": first body error: socket %u: message %llu: %s; got "
               "%zu bytes: ",
          (unsigned)ws->id, (unsigned long long)ws->next_echo, why, n);
  wsp_put_escaped(stderr, p, n < 96 ? n : 96);
  fprintf(stderr, "%s\n", n > 96 ? "..." : "");
}

static int ws_on_echo(void *u, wsp_sock *ws, uint64_t seq) {
  slot *s = u;
  uint64_t now = lg_now_ns(), sent = s->k->sent_ns[seq % (uint64_t)g.depth];
  (void)ws;
  if (in_window(now) && !g.drained) {
    g.requests++;
    lg_hist_record(&g.hist, now > sent ? (now - sent + 500) / 1000 : 0);
  }
  s->c->ws_dirty = 1;
  return 0;
}

static const wsp_events ws_events = {ws_on_mismatch, ws_on_echo};

/* DATA of a socket's stream: its frames. */
static void ws_recv(slot *s, const uint8_t *data, size_t len) {
  wsock *k = s->k;
  size_t used;
  unsigned code;
  int rc;
  if (k->state == W_DONE)
    return;
  if (k->state == W_UPGRADING) {
    ws_done(s, K_HANDSHAKE, "DATA before the response head");
    return;
  }
  if (wsp_reserve(&k->ws.rbuf, &k->ws.rcap, k->ws.rlen + len) != 0) {
    ws_done(s, K_PROTOCOL, "out of memory");
    return;
  }
  memcpy(k->ws.rbuf + k->ws.rlen, data, len);
  k->ws.rlen += len;
  rc = wsp_frames(&g.w, &k->ws, &ws_events, s, &used, &code);
  if (rc == WSP_ERROR) {
    ws_done(s, K_PROTOCOL, k->ws.why);
    return;
  }
  wsp_consume(&k->ws, used);
  if (rc == WSP_GOT_CLOSE) {
    k->got_close = 1;
    k->ws.rlen = 0; /* nothing may follow a Close */
    if (k->state == W_OPEN) {
      unsigned char echo[2];
      char why[64];
      snprintf(why, sizeof(why), "the server sent Close (code %u)", code);
      error(K_CLOSED, 1, "socket %u: %s", (unsigned)k->ws.id, why);
      echo[0] = (unsigned char)(code >> 8);
      echo[1] = (unsigned char)code;
      k->state = W_CLOSING;
      (void)wsp_put_frame(&g.w, &k->ws, 0x80 | WSP_CLOSE, echo, code ? 2 : 0);
    }
  }
  ws_flush(s); /* Pongs, the Close's answer */
  s->c->ws_dirty = 1;
}

/* The head of the CONNECT's response is complete. */
static void ws_head(slot *s) {
  wsock *k = s->k;
  const char *why;
  char st[48];
  if (k->state != W_UPGRADING || s->status < 200) {
    s->status = 0; /* an interim response */
    return;
  }
  if (s->status != 200) {
    snprintf(st, sizeof(st), "the CONNECT got status %d", s->status);
    ws_done(s, K_STATUS, st);
    return;
  }
  why = k->hs_why != NULL ? k->hs_why : wsp_open(&g.w, &k->ws);
  if (why != NULL) {
    ws_done(s, K_HANDSHAKE, why);
    return;
  }
  k->state = W_OPEN;
  g.upgraded++;
  if (k->ws.deflate)
    g.deflate_negotiated++;
  s->c->ws_dirty = 1;
}

/* The server ended its side of the stream. */
static void ws_end(slot *s) {
  wsock *k = s->k;
  if (k->state == W_CLOSING) {
    if (!k->got_close)
      g.close_unanswered++;
    ws_done(s, -1, NULL);
  } else {
    ws_done(s, K_CLOSED, "the server ended the stream without a Close");
  }
}

/* The stream closed (both ways) or was reset. */
static void ws_gone(slot *s, const char *why) {
  ws_done(s, s->k->state == W_CLOSING ? -1 : K_RESET, why);
}

/* The data reader of a socket's stream: the ring, read in place. */
static nghttp3_ssize ws_read(nghttp3_conn *h3, int64_t id, nghttp3_vec *vec,
                             size_t veccnt, uint32_t *pflags, void *user,
                             void *sdata) {
  slot *s = sdata;
  wsock *k = s->k;
  nghttp3_ssize n = 0;
  (void)h3;
  (void)id;
  (void)user;
  while (k->handed < k->tail && (size_t)n < veccnt) {
    size_t off = (size_t)(k->handed % g.ring_cap);
    size_t len = g.ring_cap - off;
    if (len > k->tail - k->handed)
      len = (size_t)(k->tail - k->handed);
    vec[n].base = k->ring + off;
    vec[n].len = len;
    k->handed += len;
    n++;
  }
  if (k->eof && k->handed == k->tail)
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
  else if (n == 0) {
    k->blocked = 1;
    return NGHTTP3_ERR_WOULDBLOCK;
  }
  return n;
}

/* A slot's WebSocket, made on its first use and reused after. */
static wsock *ws_prepare(slot *s) {
  wsock *k = s->k;
  if (k == NULL) {
    k = calloc(1, sizeof(*k));
    if (k == NULL)
      return NULL;
    k->sent_ns = calloc((size_t)g.depth, sizeof(uint64_t));
    k->ring = malloc(g.ring_cap);
    if (k->sent_ns == NULL || k->ring == NULL) {
      free(k->sent_ns);
      free(k->ring);
      free(k);
      return NULL;
    }
    s->k = k;
  }
  wsp_sock_reset(&k->ws);
  k->ws.id = (uint32_t)g.sockets++;
  k->ws.next_seq = k->ws.next_echo = 0;
  k->state = W_UPGRADING;
  k->blocked = k->eof = k->got_close = 0;
  k->hs_why = NULL;
  k->head = k->handed = k->tail = 0;
  return k;
}

static long ws_count(int state) {
  long i, j, n = 0;
  for (i = 0; i < g.nconns; i++)
    for (j = 0; g.conns[i].slots != NULL && j < 2 * g.streams; j++) {
      slot *s = &g.conns[i].slots[j];
      if (s->k != NULL && s->used && s->k->state == state &&
          g.conns[i].state != C_DEAD)
        n++;
    }
  return n;
}

/* Messages in flight on the open sockets. */
static uint64_t ws_inflight(void) {
  long i, j;
  uint64_t n = 0;
  for (i = 0; i < g.nconns; i++)
    for (j = 0; g.conns[i].slots != NULL && j < 2 * g.streams; j++) {
      slot *s = &g.conns[i].slots[j];
      if (s->k != NULL && s->used && s->k->state == W_OPEN &&
          g.conns[i].state != C_DEAD)
        n += s->k->ws.next_seq - s->k->ws.next_echo;
    }
  return n;
}

/* Every socket's pending frames and messages, on the connections where
 * something changed. */
static void ws_fill_all(uint64_t now) {
  long i, j;
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    if (!c->ws_dirty || c->state != C_READY)
      continue;
    c->ws_dirty = 0;
    for (j = 0; j < 2 * g.streams && c->state == C_READY; j++) {
      slot *s = &c->slots[j];
      if (s->k == NULL || !s->used || s->k->state == W_DONE)
        continue;
      ws_flush(s);
      ws_fill(s, now);
    }
  }
}

/* The end: a Close on every open socket. */
static void ws_close_all(void) {
  long i, j;
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    for (j = 0; c->state == C_READY && j < 2 * g.streams; j++) {
      slot *s = &c->slots[j];
      if (s->k != NULL && s->used && s->k->state == W_OPEN)
        ws_close(s);
    }
  }
}

/* ---- ngtcp2 callbacks ---------------------------------------------------
 * None of them calls ngtcp2_conn_read_pkt or writev_stream: ngtcp2 asserts
 * against re-entry. `user` is the conn. */

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
    if (s->k != NULL) {
      s->closing = 1;
      ws_gone(s, "the stream closed without an end");
      s->closing = 0;
    } else {
      answered(s, K_RESET, lg_now_ns());
    }
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
  if (s != NULL && s->k != NULL)
    ws_gone(s, "reset by the server");
  else if (s != NULL)
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
  slot *s = sdata;
  (void)h3;
  (void)id;
  if (s != NULL && s->k != NULL) {
    s->k->head += len; /* ring room again */
    ((conn *)user)->ws_dirty = 1;
  }
  if (in_window(lg_now_ns()))
    g.bytes_up += len;
  return 0;
}

static int h3_recv_data(nghttp3_conn *h3, int64_t id, const uint8_t *data,
                        size_t len, void *user, void *sdata) {
  conn *c = user;
  slot *s = sdata;
  (void)h3;
  if (s != NULL && s->k != NULL) {
    ws_recv(s, data, len);
  } else if (s != NULL) {
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
  (void)flags;
  (void)user;
  if (s != NULL && token == NGHTTP3_QPACK_TOKEN__STATUS && v.len == 3)
    s->status =
        (v.base[0] - '0') * 100 + (v.base[1] - '0') * 10 + (v.base[2] - '0');
  else if (s != NULL && s->k != NULL && s->k->state == W_UPGRADING &&
           s->k->hs_why == NULL) {
    nghttp3_vec nm = nghttp3_rcbuf_get_buf(name);
    if (lg_name_is((const char *)nm.base, nm.len, "sec-websocket-extensions"))
      s->k->hs_why = s->k->ws.deflate
                         ? "two Sec-WebSocket-Extensions"
                         : wsp_parse_extension(&g.w, &s->k->ws,
                                               (const char *)v.base, v.len);
    else if (lg_name_is((const char *)nm.base, nm.len,
                        "sec-websocket-protocol"))
      s->k->hs_why = "a subprotocol the client did not offer";
  }
  return 0;
}

static int h3_end_headers(nghttp3_conn *h3, int64_t id, int fin, void *user,
                          void *sdata) {
  slot *s = sdata;
  (void)h3;
  (void)id;
  (void)fin;
  (void)user;
  if (s != NULL && s->k != NULL)
    ws_head(s);
  return 0;
}

static int h3_end_stream(nghttp3_conn *h3, int64_t id, void *user,
                         void *sdata) {
  (void)h3;
  (void)id;
  (void)user;
  if (sdata != NULL && ((slot *)sdata)->k != NULL)
    ws_end(sdata);
  else if (sdata != NULL)
    answered(sdata, -1, lg_now_ns());
  return 0;
}

/* GOAWAY: the server takes no new streams on this connection (those in
 * flight may still finish; then it closes, counted once as closed). */
static int h3_shutdown(nghttp3_conn *h3, int64_t id, void *user) {
  conn *c = user;
  (void)h3;
  (void)id;
  if (!c->goaway)
    fprintf(stderr, PROG ": the server sent GOAWAY\n");
  c->goaway = 1;
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

  memset(&cb, 0, sizeof(cb));
  cb.acked_stream_data = h3_acked;
  cb.recv_data = h3_recv_data;
  cb.deferred_consume = h3_deferred;
  cb.recv_header = h3_header;
  cb.end_headers = h3_end_headers;
  cb.end_stream = h3_end_stream;
  cb.stop_sending = h3_stop_sending;
  cb.reset_stream = h3_reset_stream;
  cb.shutdown = h3_shutdown;
  return h3core_h3_conn(&c->h3, &cb, c->q, c);
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
  return c->state == C_READY && c->want_open && !c->goaway &&
         c->inflight < g.streams && c->open < 2 * g.streams;
}

/* Open one request on `c`; 1 if opened, 0 if the server's MAX_STREAMS or
 * the slots are used up (want_open is cleared until that changes), -1 if
 * the connection failed. */
static int submit(conn *c, uint64_t index, uint64_t t0) {
  static const nghttp3_data_reader body = {h3_read_body};
  static const nghttp3_data_reader ws_body = {ws_read};
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
  if (g.ws && ws_prepare(s) == NULL) {
    conn_fail(c, K_PROTOCOL, "out of memory");
    return -1;
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
                                   g.ws           ? &ws_body
                                   : g.upload > 0 ? &body
                                                  : NULL,
                                   s);
  if (rv != 0) {
    conn_fail(c, K_PROTOCOL, nghttp3_strerror(rv));
    return -1;
  }
  c->ws_opened++;
  c->inflight++;
  c->open++;
  c->dirty = 1;
  g.issued++;
  return 1;
}

/* --ws: open each connection's --streams sockets, as MAX_STREAMS allows. */
static void ws_open_more(uint64_t now) {
  long i;
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    while (c->ws_opened < g.streams && has_room(c))
      if (submit(c, 0, now) <= 0)
        break;
  }
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
  if (g.ws) {
    if (g.issuing)
      ws_open_more(now);
    ws_fill_all(now);
  } else if (g.issuing) {
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

static int conn_setup_tls(conn *c) {
  const char *colon = strrchr(g.authority, ':');
  size_t snilen = colon != NULL && g.authority[0] != '['
                      ? (size_t)(colon - g.authority)
                      : strlen(g.authority);
  c->ref.get_conn = get_conn;
  c->ref.user_data = c;
  return h3core_tls(&c->tls, g.cred, g.authority, snilen, &c->ref);
}

static int conn_setup_quic(conn *c, uint64_t now) {
  ngtcp2_callbacks cb;
  ngtcp2_settings st;
  ngtcp2_transport_params tp;

  h3core_quic_callbacks(&cb);
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
    st.log_printf = h3core_log;
  st.max_stream_window = STREAM_WINDOW;
  st.max_window = CONN_WINDOW;
  ngtcp2_transport_params_default(&tp);
  tp.initial_max_streams_uni = 3;
  tp.initial_max_stream_data_bidi_local = STREAM_WINDOW;
  tp.initial_max_stream_data_uni = 256 * 1024;
  tp.initial_max_data = CONN_WINDOW;
  tp.max_idle_timeout = 30 * NGTCP2_SECONDS;

  if (h3core_quic_conn(&c->q, (struct sockaddr *)&c->local, c->locallen,
                       (struct sockaddr *)&g.target.addr, g.target.len, &cb,
                       &st, &tp, c, c->tls) != 0)
    return -1;
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

/* Requests (--ws: messages) in flight. */
static long inflight_total(void) {
  long i, n = 0;
  if (g.ws)
    return (long)ws_inflight();
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
  if (h[0] == ':') {
    fprintf(stderr,
            PROG ": --header cannot set a pseudo-field ('%s'): "
                 "see --method, --path, --authority\n",
            h);
    exit(2);
  }
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
  g.extra[g.nextra++] = nv(h, (size_t)(colon - h), v, (size_t)(e - v));
}

/* The request's fields: the pseudo-fields, then a request body's length
 * or the WebSocket fields, then --header's. */
static void build_fields(void) {
  size_t i;
  if (g.ws) {
    const char *ext = wsp_offer(&g.w);
    g.nva[g.nnv++] = nv(":method", 7, "CONNECT", 7);
    g.nva[g.nnv++] = nv(":protocol", 9, "websocket", 9);
    g.nva[g.nnv++] = nv(":scheme", 7, "https", 5);
    g.nva[g.nnv++] = nv(":authority", 10, g.authority, strlen(g.authority));
    g.nva[g.nnv++] = nv(":path", 5, g.ws_path, strlen(g.ws_path));
    g.nva[g.nnv++] = nv("sec-websocket-version", 21, "13", 2);
    if (ext != NULL)
      g.nva[g.nnv++] = nv("sec-websocket-extensions", 24, ext, strlen(ext));
  } else {
    g.nva[g.nnv++] = nv(":method", 7, g.method, strlen(g.method));
    g.nva[g.nnv++] = nv(":scheme", 7, "https", 5);
    g.nva[g.nnv++] = nv(":authority", 10, g.authority, strlen(g.authority));
    g.nva[g.nnv++] = nv(":path", 5, g.path, strlen(g.path));
    if (g.upload > 0) {
      snprintf(g.clen, sizeof(g.clen), "%llu", (unsigned long long)g.upload);
      g.nva[g.nnv++] = nv("content-length", 14, g.clen, strlen(g.clen));
    }
  }
  for (i = 0; i < g.nextra; i++)
    g.nva[g.nnv++] = g.extra[i];
}

/* A JSON string's contents (the extension the server answered). */
static void json_str(FILE *f, const char *p) {
  for (; *p; p++) {
    if (*p == '"' || *p == '\\')
      fputc('\\', f);
    if ((unsigned char)*p >= 32)
      fputc(*p, f);
  }
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
  if (g.ws) {
    fprintf(f,
            ",\"messages\":%llu,\"sockets\":%ld,\"upgraded\":%ld,"
            "\"depth\":%ld,\"size\":%zu,\"mode\":\"%s\","
            "\"deflate_offered\":%s,\"deflate_negotiated\":%ld,"
            "\"close_unanswered\":%ld,\"pings\":%llu,\"extension\":\"",
            (unsigned long long)g.requests, g.sockets, g.upgraded, g.depth,
            g.w.size, g.w.binary ? "binary" : "text",
            g.w.offer ? "true" : "false", g.deflate_negotiated,
            g.close_unanswered, (unsigned long long)g.w.pings);
    json_str(f, g.w.extension);
    fprintf(f, "\"");
  }
  fprintf(f, "}\n");
}

int main(int argc, char **argv) {
  const char *json = NULL;
  uint64_t now, setup_end, end_by, drain_end, linger_end, wake, k, nerr = 0;
  double secs, rate_achieved;
  long i, size = 128;
  int a, ready_ever, binary = 0, deflate = 0;

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
  g.ws_path = "/ws";
  g.depth = 8;
  g.nva = calloc(MAX_HEADERS + 8, sizeof(nghttp3_nv));
  g.extra = calloc(MAX_HEADERS, sizeof(nghttp3_nv));
  if (g.nva == NULL || g.extra == NULL)
    return 1;
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
      if (g.nextra == MAX_HEADERS) {
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
    else if (strcmp(o, "--ws") == 0)
      g.ws = 1;
    else if (strcmp(o, "--depth") == 0)
      g.depth =
          lg_arg_long(PROG, o, lg_arg_value(PROG, argc, argv, &a), 1, 4096);
    else if (strcmp(o, "--size") == 0)
      size = lg_arg_long(PROG, o, lg_arg_value(PROG, argc, argv, &a), 0,
                         16L << 20);
    else if (strcmp(o, "--text") == 0)
      binary = 0;
    else if (strcmp(o, "--binary") == 0)
      binary = 1;
    else if (strcmp(o, "--deflate") == 0)
      deflate = 1;
    else if (strcmp(o, "--ws-path") == 0)
      g.ws_path = lg_arg_value(PROG, argc, argv, &a);
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
  if (g.ws && (g.rate > 0 || g.requests_limit > 0 || g.upload > 0 ||
               g.method != NULL)) {
    fprintf(stderr, PROG ": --ws runs by the clock, without --rate, "
                         "--requests, --upload-size or --method\n");
    return 2;
  }
  if (lg_check_path(PROG, g.path) != 0 || lg_check_path(PROG, g.ws_path) != 0)
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
  if (g.ws) {
    /* A ring holds depth messages unacknowledged, one more, and room for
     * control frames: it never limits the depth asked for. */
    if (wsp_init(&g.w, (size_t)size, binary, deflate, Z_DEFAULT_COMPRESSION) !=
        0) {
      perror(PROG);
      return 1;
    }
    g.ring_cap = (size_t)(g.depth + 1) * (g.w.limit + 14 + WS_SLACK);
    if ((double)g.ring_cap * (double)g.nconns * (double)g.streams >
        (double)WS_MEMORY) {
      fprintf(stderr,
              PROG ": --conns x --streams x --depth x --size needs over "
                   "%llu MiB of send rings\n",
              (unsigned long long)(WS_MEMORY >> 20));
      return 2;
    }
  }
  build_fields();
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

  /* --ws: every socket's CONNECT answered before the clock starts. */
  if (g.ws && ready_ever) {
    g.issuing = 1;
    g.win_start = UINT64_MAX;
    setup_end = lg_now_ns() + SETUP_NS;
    for (;;) {
      long want = 0, opened = 0;
      for (i = 0; i < g.nconns; i++)
        if (g.conns[i].state == C_READY) {
          want += g.streams;
          opened += g.conns[i].ws_opened;
        }
      if ((opened == want && ws_count(W_UPGRADING) == 0) ||
          lg_now_ns() >= setup_end)
        break;
      step();
      poll_once(setup_end);
    }
    for (i = 0; i < g.nconns; i++) {
      conn *c = &g.conns[i];
      long j;
      for (j = 0; c->state == C_READY && j < 2 * g.streams; j++) {
        slot *s = &c->slots[j];
        if (s->k != NULL && s->used && s->k->state == W_UPGRADING)
          ws_done(s, K_HANDSHAKE, "no response to the CONNECT within 5 s");
      }
      if (c->state == C_READY && c->ws_opened < g.streams)
        error(K_HANDSHAKE, (uint64_t)(g.streams - c->ws_opened),
              "the server's MAX_STREAMS let only %ld sockets open on a "
              "connection",
              c->ws_opened);
      c->ws_dirty = 1; /* every socket starts sending */
    }
    g.ws_sending = 1;
  }

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
    if (g.ws && ws_count(W_OPEN) == 0)
      break; /* every socket is gone */
    if (g.requests_limit > 0 && g.answered_total >= g.requests_limit)
      break;
    step();
    if (!g.issuing)
      break;
    /* The next due time, unless it has passed (then the request waits
     * for room, which only a packet or a timer can make). */
    wake = end_by;
    if (g.rate > 0 && g.sched_next < g.sched_total && due(g.sched_next) > now &&
        due(g.sched_next) < wake)
      wake = due(g.sched_next);
    if (!g.measuring && g.win_start > now && g.win_start < wake)
      wake = g.win_start; /* to say "measuring" on time */
    poll_once(wake);
  }
  g.issuing = 0;
  g.ws_sending = 0;
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
  /* --requests: the window (for duration_s) ends here, but body bytes
   * acknowledged during the linger still count in bytes_up. */
  if (g.requests_limit > 0)
    g.win_last = now;
  g.drained = 1;
  k = (uint64_t)inflight_total();
  if (k > 0)
    error(K_UNANSWERED, k, "%llu %s in flight after the %.1f s drain",
          (unsigned long long)k, g.ws ? "messages" : "requests", g.drain);
  if (g.ws) {
    /* Close every socket, and wait (up to 1 s) for the server's Close and
     * the end of its side of each stream. */
    uint64_t close_end = lg_now_ns() + WS_CLOSE_NS;
    ws_close_all();
    while (ws_count(W_CLOSING) > 0 && lg_now_ns() < close_end) {
      step();
      poll_once(close_end);
    }
    g.close_unanswered += ws_count(W_CLOSING);
  }
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
  /* Whatever the last poll made due (the ACK timer, if this process was
   * descheduled past the linger) goes out before the close. */
  now = lg_now_ns();
  for (i = 0; i < g.nconns; i++)
    expire_conn(&g.conns[i], now);
  step();
  conn_close_all();
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    if (c->h3 != NULL)
      nghttp3_conn_del(c->h3);
    if (c->q != NULL)
      ngtcp2_conn_del(c->q);
    if (c->tls != NULL)
      gnutls_deinit(c->tls);
    for (k = 0; c->slots != NULL && k < (uint64_t)(2 * g.streams); k++) {
      wsock *w = c->slots[k].k;
      if (w != NULL) {
        wsp_sock_free(&w->ws);
        free(w->sent_ns);
        free(w->ring);
        free(w);
      }
    }
    free(c->slots);
  }
  if (!g.measuring) {
    fprintf(stderr, PROG ": measuring\n"); /* (never reached the window) */
    fflush(stderr);
  }

  if (g.requests_limit > 0)
    g.win_end = g.win_last;
  secs =
      g.win_end > g.win_start ? (double)(g.win_end - g.win_start) / 1e9 : 0.0;
  for (a = 0; a < K_COUNT; a++)
    nerr += g.errors[a];
  rate_achieved =
      secs > 0 ? (double)(g.rate > 0 ? g.in_window : g.requests) / secs : 0.0;
  if (g.ws)
    printf(PROG ": %s:%ld%s WebSocket, %ld conns (%ld ready) x %ld sockets x "
                "%ld in flight x %zu B %s, %.3f s; %ld upgraded%s%s\n",
           g.host, g.port, g.ws_path, g.nconns, g.ready, g.streams, g.depth,
           g.w.size, g.w.binary ? "binary" : "text", secs, g.upgraded,
           g.w.offer ? ", deflate on " : "",
           g.w.offer ? (g.deflate_negotiated == g.upgraded ? "all"
                        : g.deflate_negotiated == 0        ? "none (DECLINED)"
                                                           : "some")
                     : "");
  else
    printf(PROG
           ": %s:%ld%s %s, %ld conns (%ld ready) x %ld streams, %.3f s%s\n",
           g.host, g.port, g.path, g.method, g.nconns, g.ready, g.streams, secs,
           g.rate > 0 ? " (open model)" : "");
  printf(PROG ": %s %llu (%.1f %s/s), errors %llu (",
         g.ws ? "messages" : "requests", (unsigned long long)g.requests,
         rate_achieved, g.ws ? "msg" : "req", (unsigned long long)nerr);
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
