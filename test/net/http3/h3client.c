/* h3client: tern's own HTTP/3 test client, one connection, on ngtcp2 0.12
 * (client side, GnuTLS crypto helper) and nghttp3 0.8.
 *
 * Debian 12's HTTP/3 clients (gtlsclient, Chromium) cannot misbehave on
 * purpose; this one can, chosen by options, so that test_h3_defences.py
 * can check tern's HTTP/3 defences over real sockets, and test_ws_h3.py
 * can run raw WebSocket frames over RFC 9220 (--tunnel). It verifies no
 * certificate (the tests use self-signed ones) and offers ALPN h3 only.
 *
 *   h3client [options] METHOD https://HOST:PORT/PATH
 *
 *   -n N, --streams N N requests, all opened at once as far as the
 *                     server's MAX_STREAMS lets (more as it grants them)
 *   --body-size N     a POST body of N bytes (byte i is i % 251)
 *   --header-bytes N  one extra field of N bytes (x-big: aaa...)
 *   --headers N       N extra small fields (x-h-I: v)
 *   --reset-mid-body K  POST sending K body bytes, reset the stream once
 *                     the server acknowledged them (H3_REQUEST_CANCELLED),
 *                     then GET / on the same connection
 *   --cancel-all      reset every request's stream (H3_REQUEST_CANCELLED,
 *                     both directions) as soon as the server acknowledged
 *                     its head: a client that asks and leaves at once
 *   --rapid-reset     as --cancel-all, but each stream is reset as soon as
 *                     its HEADERS went out, without waiting for the
 *                     server: the rapid-reset attack (CVE-2023-44487)
 *   --no-read         a 1 KiB stream window that is never extended for
 *                     response bodies (ACKs still flow)
 *   --stall-ms N      as --no-read for the first N ms, then the stream
 *                     windows open by what came meanwhile and move on as
 *                     usual: a reader that pauses, then resumes
 *   --idle            after the requests, stay idle until the server closes
 *   --serial          open each request once the one before has finished
 *                     (its QPACK encoder may then refer to the fields the
 *                     earlier ones put in the dynamic table)
 *   --header 'N: V'   an extra request field (repeatable); the name may
 *                     start with ':' (a pseudo-field), and the value may
 *                     hold escapes \r, \n, \0 (a field nghttp3 sends as
 *                     it is, however invalid)
 *   --first-header 'N: V'  the same, on the first request only
 *   --tunnel PROTO    one extended CONNECT (RFC 9220 / 8441, :protocol
 *                     PROTO, METHOD must be CONNECT), then relay bytes:
 *                     fd 0 -> the stream's DATA, DATA -> fd 1 (below)
 *   --omit FIELD      leave the pseudo-field :path or :scheme out of the
 *                     request (the server must refuse such a CONNECT)
 *   --on-eof ACTION   tunnel: at EOF on fd 0, "fin" (default) ends our
 *                     side with FIN; "reset" resets the stream (RESET_
 *                     STREAM and STOP_SENDING, H3_REQUEST_CANCELLED);
 *                     "stop" only sends STOP_SENDING; "close" closes the
 *                     whole QUIC connection (the client vanishes)
 *   --token-file PATH a token from an earlier connection (NEW_TOKEN, the
 *                     file's raw bytes) goes into the first Initial if
 *                     the file is not empty; the token the server sends
 *                     now replaces it
 *   --rebind-after N  once N response body bytes came, move to a new UDP
 *                     socket (a new local port) and tell ngtcp2 only the
 *                     new local address, with no migration of its own: the
 *                     server sees what a NAT rebinding looks like
 *   --body-out PATH   write the response bodies' bytes to PATH, as they
 *                     come (one stream's body, with the default -n 1)
 *   --timeout-ms N    give up after N ms (default 15000; exit status 3)
 *   -v                ngtcp2's debug log on stderr
 *
 * Output, one fact a line, on stdout:
 *   connected
 *   retry                     the server sent a Retry
 *   new-token LEN             the server sent a NEW_TOKEN (--token-file)
 *   blocked after K           the first open refused with STREAM_ID_BLOCKED
 *   stream ID sent LEN sha256 HEX     (a POST's whole body)
 *   stream ID status CODE
 *   stream ID body LEN sha256 HEX     (at the end of the response)
 *   stream ID reset 0xCODE bytes LEN  (the server reset it; bytes so far)
 *   stream ID stop 0xCODE             (the server sent STOP_SENDING)
 *   stream ID cancelled               (this client reset it)
 *   stream ID stopped                 (this client sent STOP_SENDING)
 *   closed TYPE 0xCODE        the server closed (TYPE: transport or app)
 *   idle-close                QUIC's idle timeout ended the connection
 *   done requests N finished M max-open X
 *
 *   stream ID header NAME: VALUE      (--tunnel: each response field)
 *   stream ID fin             (--tunnel: the server ended its side)
 *   stream ID closed          (--tunnel: QUIC closed the stream)
 *
 * Every stream's fields follow its own method: METHOD for the requests
 * of -n, GET for --reset-mid-body's second one.
 *
 * CONNECT without --tunnel is a plain CONNECT: :method and :authority
 * only (RFC 9114 4.4), with nothing sent after it.
 *
 * Tunnel mode. fd 1 carries the stream's bytes, so the facts above go to
 * stderr instead (one a line, interleaved with -v's log). Both fds are
 * made non-blocking and served from the one poll loop, so QUIC's timers
 * and ACKs go on while a reader is slow. fd 0 is read only while the send
 * ring (1 MiB) has room; its bytes stay in the ring until the server has
 * acknowledged them, since nghttp3 keeps pointers to them. Bytes from the
 * server are written to fd 1 as it takes them, and the stream's flow-
 * control window is extended only by what fd 1 took: a reader that stops
 * stops the server at our window (real backpressure); with --no-read the
 * 1 KiB window is never extended at all. When the server ends the stream
 * (FIN or RESET_STREAM) what is buffered is written, fd 1 is closed, and
 * the client exits, so the reader sees EOF where a TCP client would. A
 * reader that hangs up while the ring is full is noticed all the same
 * (POLLHUP), so --on-eof reset/stop/close act against a stalled server.
 *
 * Exit status: 0 done, 1 the connection failed, 2 usage, 3 timed out.
 * Each run is bounded by --timeout-ms and talks to one address only.
 */
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "h3core.h"

#define PATTERN_LEN (251 * 256) /* whole periods of i % 251 */
#define MAX_EXTRA 4096          /* --headers' ceiling */
#define MAX_FIELDS 32           /* --header's ceiling */
#define RING (1u << 20)         /* tunnel: fd 0's bytes until acknowledged */

enum { EOF_FIN, EOF_RESET, EOF_STOP, EOF_CLOSE };

typedef struct {
  int64_t id;
  int is_post;
  int cancel;          /* --reset-mid-body: this one is reset by us */
  int opened;          /* a QUIC stream exists */
  int finished;        /* nothing more is expected on it */
  int closed;          /* ngtcp2 closed it */
  int status;          /* :status, 0 before the head */
  uint64_t sent;       /* body bytes handed to nghttp3 */
  uint64_t acked;      /* body bytes the server acknowledged */
  uint64_t head_acked; /* stream bytes (head first) acknowledged */
  uint64_t limit;      /* body bytes to send */
  uint64_t got;        /* response body bytes */
  uint64_t owed;       /* --stall-ms: window credit held back while stalled */
  const char *path;
  gnutls_hash_hd_t hash;
} req;

static struct {
  ngtcp2_conn *conn;
  nghttp3_conn *h3;
  gnutls_session_t tls;
  gnutls_certificate_credentials_t cred;
  ngtcp2_crypto_conn_ref ref;
  int fd;
  struct sockaddr_storage local, remote;
  socklen_t locallen, remotelen;
  char authority[300];
  const char *method;
  const char *path;
  req *reqs;
  size_t nreqs, next, finished, open_now, max_open;
  uint64_t body_size, header_bytes, nheaders, reset_k;
  int no_read, idle, serial, verbose, connected, blocked_seen, closed,
      cancel_all;
  int rapid_reset;   /* --rapid-reset (with cancel_all set) */
  int print_headers; /* --print-headers: every answer's fields */
  uint64_t stall_ms;
  uint64_t rebind_after, got_total; /* --rebind-after; 0 once done */
  ngtcp2_tstamp stall_until;        /* --stall-ms: 0 once the stall is over */
  int want_open;                    /* more streams may be opened now */
  char *big;
  nghttp3_nv *extra;
  size_t nextra;
  nghttp3_nv fields[MAX_FIELDS]; /* --header, --first-header */
  int first_only[MAX_FIELDS];    /* --first-header: the first request's */
  size_t nfields;
  int omit_path, omit_scheme;
  /* --tunnel: the relay's state (see "Tunnel mode" at the top). */
  const char *tunnel;
  FILE *body_out; /* --body-out */
  int on_eof;
  uint8_t *ring;   /* RING bytes; index = count % RING */
  uint64_t filled; /* bytes read from fd 0; r->sent / r->acked follow */
  int in_eof;      /* fd 0 said EOF */
  int in_hup;      /* fd 0's writer left while the ring was full */
  int deferred;    /* the data reader said WOULDBLOCK */
  int ended;       /* the server ended the stream (FIN or reset) */
  int out_closed;  /* fd 1 is closed (or its reader left) */
  uint8_t *obuf;   /* bytes from the server: [ooff, olen) for fd 1 */
  size_t ooff, olen, ocap;
  const char *token_file; /* --token-file */
  uint8_t token[512];
  size_t token_len;
} cl;

static uint8_t pattern[PATTERN_LEN];

static ngtcp2_tstamp now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (ngtcp2_tstamp)ts.tv_sec * 1000000000u + (ngtcp2_tstamp)ts.tv_nsec;
}

/* One fact: on stdout, or on stderr when stdout carries a tunnel. */
static void out(const char *fmt, ...) {
  FILE *f = cl.tunnel != NULL ? stderr : stdout;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fflush(f);
}

static void hex_digest(gnutls_hash_hd_t h, char *hex) {
  unsigned char d[32];
  int i;
  gnutls_hash_deinit(h, d);
  for (i = 0; i < 32; i++)
    sprintf(hex + 2 * i, "%02x", d[i]);
}

/* The SHA-256 of a POST body of `n` bytes of the pattern. */
static void pattern_digest(uint64_t n, char *hex) {
  gnutls_hash_hd_t h;
  gnutls_hash_init(&h, GNUTLS_DIG_SHA256);
  while (n > 0) {
    size_t k = n < PATTERN_LEN ? (size_t)n : PATTERN_LEN;
    gnutls_hash(h, pattern, k);
    n -= k;
  }
  hex_digest(h, hex);
}

static void finish(req *r) {
  if (r->finished)
    return;
  r->finished = 1;
  cl.finished++;
  if (cl.serial)
    cl.want_open = 1; /* the next one may go */
}

/* ---- ngtcp2 callbacks ---------------------------------------------------
 * None of them calls ngtcp2_conn_read_pkt or writev_stream: ngtcp2 asserts
 * against re-entry. */

static int setup_h3(void);

/* The 1-RTT keys are in: the server's transport parameters are known, so
 * the control and QPACK streams can be opened (as ngtcp2's client does). */
static int rx_key_cb(ngtcp2_conn *conn, ngtcp2_crypto_level level, void *user) {
  (void)conn;
  (void)user;
  if (level != NGTCP2_CRYPTO_LEVEL_APPLICATION)
    return 0;
  return setup_h3() == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

static int handshake_done_cb(ngtcp2_conn *conn, void *user) {
  (void)conn;
  (void)user;
  cl.connected = 1;
  cl.want_open = 1;
  out("connected");
  return 0;
}

static int recv_stream_cb(ngtcp2_conn *conn, uint32_t flags, int64_t id,
                          uint64_t offset, const uint8_t *data, size_t len,
                          void *user, void *sdata) {
  nghttp3_ssize n;
  (void)offset;
  (void)user;
  (void)sdata;
  if (cl.h3 == NULL)
    return 0;
  n = nghttp3_conn_read_stream(cl.h3, id, data, len,
                               (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0);
  if (n < 0) {
    out("h3-error %s", nghttp3_strerror((int)n));
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  /* Frame headers and fields are consumed at once; DATA payloads are
   * credited in recv_data, or never (--no-read). */
  ngtcp2_conn_extend_max_stream_offset(conn, id, (uint64_t)n);
  ngtcp2_conn_extend_max_offset(conn, (uint64_t)n);
  return 0;
}

static int acked_cb(ngtcp2_conn *conn, int64_t id, uint64_t offset,
                    uint64_t len, void *user, void *sdata) {
  req *r = sdata;
  (void)conn;
  (void)user;
  if (r != NULL && offset + len > r->head_acked)
    r->head_acked = offset + len; /* the server has read this far */
  return cl.h3 != NULL && nghttp3_conn_add_ack_offset(cl.h3, id, len) != 0
             ? NGTCP2_ERR_CALLBACK_FAILURE
             : 0;
}

static int stream_close_cb(ngtcp2_conn *conn, uint32_t flags, int64_t id,
                           uint64_t code, void *user, void *sdata) {
  req *r = sdata;
  int rv;
  (void)conn;
  (void)user;
  if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
    code = NGHTTP3_H3_NO_ERROR;
  if (cl.h3 != NULL) {
    rv = nghttp3_conn_close_stream(cl.h3, id, code);
    if (rv != 0 && rv != NGHTTP3_ERR_STREAM_NOT_FOUND)
      return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  if (r != NULL && !r->closed) {
    r->closed = 1;
    cl.open_now--;
    if (cl.tunnel != NULL) {
      out("stream %lld closed", (long long)id);
      cl.ended = 1; /* finished once fd 1 has what was buffered */
    } else {
      finish(r);
    }
  }
  return 0;
}

static int stream_reset_cb(ngtcp2_conn *conn, int64_t id, uint64_t final_size,
                           uint64_t code, void *user, void *sdata) {
  req *r = sdata;
  (void)conn;
  (void)final_size;
  (void)user;
  if (r != NULL) {
    out("stream %lld reset 0x%llx bytes %llu", (long long)id,
        (unsigned long long)code, (unsigned long long)r->got);
    if (cl.tunnel != NULL)
      cl.ended = 1;
    else
      finish(r);
  }
  if (cl.h3 != NULL && nghttp3_conn_shutdown_stream_read(cl.h3, id) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

static int stop_sending_cb(ngtcp2_conn *conn, int64_t id, uint64_t code,
                           void *user, void *sdata) {
  (void)conn;
  (void)user;
  if (sdata != NULL)
    out("stream %lld stop 0x%llx", (long long)id, (unsigned long long)code);
  if (cl.h3 != NULL && nghttp3_conn_shutdown_stream_read(cl.h3, id) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

static int more_streams_cb(ngtcp2_conn *conn, uint64_t max, void *user) {
  (void)conn;
  (void)max;
  (void)user;
  cl.want_open = 1; /* opened from the main loop */
  return 0;
}

static int extend_data_cb(ngtcp2_conn *conn, int64_t id, uint64_t max,
                          void *user, void *sdata) {
  (void)conn;
  (void)max;
  (void)user;
  (void)sdata;
  return cl.h3 != NULL && nghttp3_conn_unblock_stream(cl.h3, id) != 0
             ? NGTCP2_ERR_CALLBACK_FAILURE
             : 0;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) {
  (void)ref;
  return cl.conn;
}

/* ---- nghttp3 callbacks ------------------------------------------------- */

static int h3_acked(nghttp3_conn *c, int64_t id, uint64_t len, void *u,
                    void *sdata) {
  req *r = sdata;
  (void)c;
  (void)id;
  (void)u;
  if (r != NULL)
    r->acked += len; /* --tunnel: frees that much of the ring */
  return 0;
}

static int h3_recv_data(nghttp3_conn *c, int64_t id, const uint8_t *data,
                        size_t len, void *u, void *sdata) {
  req *r = sdata;
  (void)c;
  (void)u;
  if (r != NULL) {
    gnutls_hash(r->hash, data, len);
    r->got += len;
    cl.got_total += len;
    if (cl.body_out != NULL && fwrite(data, 1, len, cl.body_out) != len)
      return NGHTTP3_ERR_CALLBACK_FAILURE;
  }
  /* The connection's window always moves; the stream's does not under
   * --no-read, which is the point of that option. */
  ngtcp2_conn_extend_max_offset(cl.conn, len);
  if (cl.tunnel != NULL && r != NULL) {
    /* For fd 1; the stream's window moves as fd 1 takes them, so the
     * buffer never holds more than the window. */
    if (cl.out_closed)
      return 0;
    if (cl.ooff > 0 && cl.olen + len > cl.ocap) {
      memmove(cl.obuf, cl.obuf + cl.ooff, cl.olen - cl.ooff);
      cl.olen -= cl.ooff;
      cl.ooff = 0;
    }
    if (cl.olen + len > cl.ocap) {
      size_t cap = cl.ocap ? cl.ocap : 65536;
      uint8_t *nb;
      while (cap < cl.olen + len)
        cap *= 2;
      if ((nb = realloc(cl.obuf, cap)) == NULL)
        return NGHTTP3_ERR_CALLBACK_FAILURE;
      cl.obuf = nb;
      cl.ocap = cap;
    }
    memcpy(cl.obuf + cl.olen, data, len);
    cl.olen += len;
    return 0;
  }
  if (cl.stall_until != 0 && r != NULL)
    r->owed += len;
  else if (!cl.no_read)
    ngtcp2_conn_extend_max_stream_offset(cl.conn, id, len);
  return 0;
}

/* --stall-ms: once the stall is over, give the streams what they were
 * owed; from then on recv_data credits as it goes. */
static void stall_check(ngtcp2_tstamp t) {
  size_t i;
  if (cl.stall_until == 0 || t < cl.stall_until)
    return;
  cl.stall_until = 0;
  for (i = 0; i < cl.nreqs; i++)
    if (cl.reqs[i].opened && !cl.reqs[i].finished && cl.reqs[i].owed > 0) {
      ngtcp2_conn_extend_max_stream_offset(cl.conn, cl.reqs[i].id,
                                           cl.reqs[i].owed);
      cl.reqs[i].owed = 0;
    }
}

static int h3_deferred(nghttp3_conn *c, int64_t id, size_t n, void *u,
                       void *sdata) {
  (void)c;
  (void)u;
  (void)sdata;
  ngtcp2_conn_extend_max_stream_offset(cl.conn, id, n);
  ngtcp2_conn_extend_max_offset(cl.conn, n);
  return 0;
}

static int h3_header(nghttp3_conn *c, int64_t id, int32_t token,
                     nghttp3_rcbuf *name, nghttp3_rcbuf *value, uint8_t flags,
                     void *u, void *sdata) {
  req *r = sdata;
  nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
  (void)c;
  (void)flags;
  (void)u;
  if (r != NULL && token == NGHTTP3_QPACK_TOKEN__STATUS && v.len == 3)
    r->status =
        (v.base[0] - '0') * 100 + (v.base[1] - '0') * 10 + (v.base[2] - '0');
  else if (r != NULL && (cl.tunnel != NULL || cl.print_headers)) {
    nghttp3_vec n = nghttp3_rcbuf_get_buf(name);
    out("stream %lld header %.*s: %.*s", (long long)id, (int)n.len, n.base,
        (int)v.len, v.base);
  }
  return 0;
}

static int h3_end_headers(nghttp3_conn *c, int64_t id, int fin, void *u,
                          void *sdata) {
  req *r = sdata;
  (void)c;
  (void)fin;
  (void)u;
  if (r != NULL && r->status >= 200)
    out("stream %lld status %d", (long long)id, r->status);
  return 0;
}

static int h3_end_stream(nghttp3_conn *c, int64_t id, void *u, void *sdata) {
  req *r = sdata;
  char hex[65];
  (void)c;
  (void)u;
  if (r == NULL)
    return 0;
  if (cl.tunnel != NULL) {
    out("stream %lld fin", (long long)id);
    cl.ended = 1;
    return 0;
  }
  hex_digest(r->hash, hex);
  r->hash = NULL;
  out("stream %lld body %llu sha256 %s", (long long)id,
      (unsigned long long)r->got, hex);
  finish(r);
  return 0;
}

static int h3_stop_sending(nghttp3_conn *c, int64_t id, uint64_t code, void *u,
                           void *sdata) {
  (void)c;
  (void)u;
  (void)sdata;
  return ngtcp2_conn_shutdown_stream_read(cl.conn, id, code) != 0
             ? NGHTTP3_ERR_CALLBACK_FAILURE
             : 0;
}

static int h3_reset_stream(nghttp3_conn *c, int64_t id, uint64_t code, void *u,
                           void *sdata) {
  (void)c;
  (void)u;
  (void)sdata;
  return ngtcp2_conn_shutdown_stream_write(cl.conn, id, code) != 0
             ? NGHTTP3_ERR_CALLBACK_FAILURE
             : 0;
}

/* A POST body from the static pattern, which outlives every
 * acknowledgement (nghttp3 does not copy bodies). --reset-mid-body stops
 * at K bytes without an end: the stream stays open for the reset. */
static nghttp3_ssize h3_read_body(nghttp3_conn *c, int64_t id, nghttp3_vec *vec,
                                  size_t veccnt, uint32_t *pflags, void *u,
                                  void *sdata) {
  req *r = sdata;
  uint64_t left = r->limit - r->sent;
  size_t off = (size_t)(r->sent % PATTERN_LEN);
  size_t k = PATTERN_LEN - off;
  (void)c;
  (void)id;
  (void)u;
  (void)veccnt;
  if (left == 0) {
    if (r->cancel)
      return NGHTTP3_ERR_WOULDBLOCK;
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
    return 0;
  }
  if (k > left)
    k = (size_t)left;
  vec[0].base = pattern + off;
  vec[0].len = k;
  r->sent += k;
  if (r->sent == r->limit && !r->cancel)
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
  return 1;
}

/* --tunnel: fd 0's bytes from the ring, in place (at most two pieces, the
 * ring's end and its start); they stay there until acknowledged. */
static nghttp3_ssize t_read(nghttp3_conn *c, int64_t id, nghttp3_vec *vec,
                            size_t veccnt, uint32_t *pflags, void *u,
                            void *sdata) {
  req *r = sdata;
  size_t k = 0;
  (void)c;
  (void)id;
  (void)u;
  while (r->sent < cl.filled && k < veccnt && k < 2) {
    size_t off = (size_t)(r->sent % RING);
    uint64_t left = cl.filled - r->sent;
    size_t len = RING - off;
    if (len > left)
      len = (size_t)left;
    vec[k].base = cl.ring + off;
    vec[k].len = len;
    r->sent += len;
    k++;
  }
  if (r->sent == cl.filled && cl.in_eof && cl.on_eof == EOF_FIN) {
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
    return (nghttp3_ssize)k;
  }
  if (k == 0) {
    cl.deferred = 1;
    return NGHTTP3_ERR_WOULDBLOCK;
  }
  return (nghttp3_ssize)k;
}

static int setup_h3(void) {
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
  return h3core_h3_conn(&cl.h3, &cb, cl.conn, NULL);
}

/* ---- requests ---------------------------------------------------------- */

static nghttp3_nv nv(const char *n, const char *v, size_t vlen) {
  nghttp3_nv x;
  x.name = (uint8_t *)n;
  x.namelen = strlen(n);
  x.value = (uint8_t *)v;
  x.valuelen = vlen;
  x.flags = NGHTTP3_NV_FLAG_NONE;
  return x;
}

/* Open the next request's stream; 1 if opened, 0 if blocked or none is
 * left, -1 on error. */
static int open_one(void) {
  static const nghttp3_data_reader body = {h3_read_body};
  static const nghttp3_data_reader relay = {t_read};
  nghttp3_nv hd[5 + MAX_EXTRA + 1 + MAX_FIELDS];
  int connect = strcmp(cl.method, "CONNECT") == 0;
  size_t n = 0, i;
  req *r;
  char hex[65];
  int rv;

  if (cl.next == cl.nreqs)
    return 0;
  r = &cl.reqs[cl.next];
  rv = ngtcp2_conn_open_bidi_stream(cl.conn, &r->id, r);
  if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED) {
    if (!cl.blocked_seen)
      out("blocked after %zu", cl.next);
    cl.blocked_seen = 1;
    return 0;
  }
  if (rv != 0)
    return -1;
  cl.next++;
  r->opened = 1;
  if (++cl.open_now > cl.max_open)
    cl.max_open = cl.open_now;
  gnutls_hash_init(&r->hash, GNUTLS_DIG_SHA256);
  if (connect)
    hd[n++] = nv(":method", "CONNECT", 7);
  else
    hd[n++] = nv(":method", r->is_post ? "POST" : "GET", r->is_post ? 4 : 3);
  if (cl.tunnel != NULL)
    hd[n++] = nv(":protocol", cl.tunnel, strlen(cl.tunnel));
  /* A plain CONNECT names only its authority (RFC 9114 4.4). */
  if ((!connect || cl.tunnel != NULL) && !cl.omit_scheme)
    hd[n++] = nv(":scheme", "https", 5);
  hd[n++] = nv(":authority", cl.authority, strlen(cl.authority));
  if ((!connect || cl.tunnel != NULL) && !cl.omit_path)
    hd[n++] = nv(":path", r->path, strlen(r->path));
  for (i = 0; i < cl.nfields; i++)
    if (!cl.first_only[i] || r == &cl.reqs[0])
      hd[n++] = cl.fields[i];
  if (r == &cl.reqs[0]) {
    if (cl.big != NULL)
      hd[n++] = nv("x-big", cl.big, (size_t)cl.header_bytes);
    for (i = 0; i < cl.nextra; i++)
      hd[n++] = cl.extra[i];
  }
  if (r->is_post && !r->cancel) {
    pattern_digest(r->limit, hex);
    out("stream %lld sent %llu sha256 %s", (long long)r->id,
        (unsigned long long)r->limit, hex);
  }
  rv = nghttp3_conn_submit_request(cl.h3, r->id, hd, n,
                                   cl.tunnel != NULL ? &relay
                                   : r->is_post      ? &body
                                                     : NULL,
                                   r);
  return rv == 0 ? 1 : -1;
}

/* ---- I/O --------------------------------------------------------------- */

static int send_pkt(const uint8_t *p, size_t n) {
  while (send(cl.fd, p, n, 0) < 0) {
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      struct pollfd pf = {cl.fd, POLLOUT, 0};
      (void)poll(&pf, 1, 100);
      continue;
    }
    return -1;
  }
  return 0;
}

/* Steps 1-3 of the write loop of docs/http3.md, one datagram at a time. */
static int write_all(void) {
  uint8_t buf[1500];
  ngtcp2_path_storage ps;
  ngtcp2_pkt_info pi;
  ngtcp2_tstamp ts = now_ns();

  ngtcp2_path_storage_zero(&ps);
  for (;;) {
    int64_t sid = -1;
    int fin = 0;
    nghttp3_vec vec[16];
    nghttp3_ssize nvec = 0;
    ngtcp2_ssize nwrite, ndata = -1;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;

    if (cl.h3 != NULL && ngtcp2_conn_get_max_data_left(cl.conn) > 0) {
      nvec = nghttp3_conn_writev_stream(cl.h3, &sid, &fin, vec, 16);
      if (nvec < 0) {
        out("h3-error %s", nghttp3_strerror((int)nvec));
        return -1;
      }
    }
    if (fin)
      flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
    nwrite = ngtcp2_conn_writev_stream(
        cl.conn, &ps.path, &pi, buf, sizeof(buf), &ndata, flags, sid,
        (const ngtcp2_vec *)vec, (size_t)nvec, ts);
    if (nwrite < 0) {
      if (nwrite == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
        nghttp3_conn_block_stream(cl.h3, sid);
        continue;
      }
      if (nwrite == NGTCP2_ERR_STREAM_SHUT_WR) {
        nghttp3_conn_shutdown_stream_write(cl.h3, sid);
        continue;
      }
      if (nwrite == NGTCP2_ERR_WRITE_MORE) {
        if (nghttp3_conn_add_write_offset(cl.h3, sid, (uint64_t)ndata) != 0)
          return -1;
        continue;
      }
      out("quic-error %s", ngtcp2_strerror((int)nwrite));
      return -1;
    }
    if (ndata >= 0 && sid >= 0 &&
        nghttp3_conn_add_write_offset(cl.h3, sid, (uint64_t)ndata) != 0)
      return -1;
    if (nwrite == 0)
      break;
    if (send_pkt(buf, (size_t)nwrite) != 0)
      return -1;
  }
  ngtcp2_conn_update_pkt_tx_time(cl.conn, ts);
  return 0;
}

/* Read what the socket holds; 1 if the server closed (draining). */
static int read_all(void) {
  uint8_t buf[65536];
  for (;;) {
    ngtcp2_path path;
    ngtcp2_pkt_info pi;
    ssize_t n = recv(cl.fd, buf, sizeof(buf), MSG_DONTWAIT);
    int rv;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return 0;
    }
    memset(&pi, 0, sizeof(pi));
    path.local.addr = (ngtcp2_sockaddr *)&cl.local;
    path.local.addrlen = cl.locallen;
    path.remote.addr = (ngtcp2_sockaddr *)&cl.remote;
    path.remote.addrlen = cl.remotelen;
    path.user_data = NULL;
    rv = ngtcp2_conn_read_pkt(cl.conn, &path, &pi, buf, (size_t)n, now_ns());
    if (rv == NGTCP2_ERR_DRAINING) {
      ngtcp2_connection_close_error ce;
      ngtcp2_conn_get_connection_close_error(cl.conn, &ce);
      out("closed %s 0x%llx",
          ce.type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION
              ? "app"
              : "transport",
          (unsigned long long)ce.error_code);
      return 1;
    }
    if (rv != 0) {
      out("quic-error %s", ngtcp2_strerror(rv));
      return -1;
    }
  }
}

static void send_close(void) {
  uint8_t buf[1500];
  ngtcp2_path_storage ps;
  ngtcp2_pkt_info pi;
  ngtcp2_connection_close_error ce;
  ngtcp2_ssize n;

  ngtcp2_path_storage_zero(&ps);
  ngtcp2_connection_close_error_default(&ce);
  ngtcp2_connection_close_error_set_application_error(&ce, NGHTTP3_H3_NO_ERROR,
                                                      NULL, 0);
  n = ngtcp2_conn_write_connection_close(cl.conn, &ps.path, &pi, buf,
                                         sizeof(buf), &ce, now_ns());
  if (n > 0)
    (void)send_pkt(buf, (size_t)n);
}

/* ---- the tunnel's relay ------------------------------------------------ */

/* fd 0 said EOF: do what --on-eof asks. 1: leave now (close). */
static int t_eof(req *r) {
  switch (cl.on_eof) {
  case EOF_FIN:
    if (cl.deferred) { /* the reader gives the end now */
      cl.deferred = 0;
      (void)nghttp3_conn_resume_stream(cl.h3, r->id);
    }
    return 0;
  case EOF_RESET:
    if (ngtcp2_conn_shutdown_stream(cl.conn, r->id,
                                    NGHTTP3_H3_REQUEST_CANCELLED) != 0)
      return -1;
    out("stream %lld cancelled", (long long)r->id);
    return 0;
  case EOF_STOP:
    if (ngtcp2_conn_shutdown_stream_read(cl.conn, r->id,
                                         NGHTTP3_H3_REQUEST_CANCELLED) != 0)
      return -1;
    out("stream %lld stopped", (long long)r->id);
    return 0;
  default:
    return 1;
  }
}

/* fd 0 into the ring while it has room (bytes the server has not
 * acknowledged stay). 0, 1 (leave: --on-eof close) or -1. */
static int t_in(int revents) {
  req *r = &cl.reqs[0];
  if (cl.filled - r->acked >= RING) {
    /* No room, and the writer has gone: an abort (reset, stop, close)
     * need not wait for room that a stalled server may never make. */
    if (!(revents & (POLLHUP | POLLERR)))
      return 0;
    if (cl.on_eof == EOF_FIN) {
      cl.in_hup = 1; /* the rest is read once there is room */
      return 0;
    }
    cl.in_eof = 1;
    return t_eof(r);
  }
  for (;;) {
    uint64_t used = cl.filled - r->acked;
    size_t off = (size_t)(cl.filled % RING), room = RING - off;
    ssize_t n;
    if (cl.in_eof || used >= RING)
      return 0;
    if (room > RING - used)
      room = (size_t)(RING - used);
    n = read(0, cl.ring + off, room);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (n <= 0) { /* an error reads as the end */
      cl.in_eof = 1;
      return t_eof(r);
    }
    cl.filled += (uint64_t)n;
    if (cl.deferred) {
      cl.deferred = 0;
      (void)nghttp3_conn_resume_stream(cl.h3, r->id);
    }
  }
}

/* What fd 1 takes of the server's bytes; the stream's window grows by as
 * much (never under --no-read). A reader that left drops the rest. */
static void t_out(void) {
  while (cl.ooff < cl.olen && !cl.out_closed) {
    ssize_t n = write(1, cl.obuf + cl.ooff, cl.olen - cl.ooff);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      cl.out_closed = 1;
      break;
    }
    cl.ooff += (size_t)n;
    if (!cl.no_read)
      ngtcp2_conn_extend_max_stream_offset(cl.conn, cl.reqs[0].id, (uint64_t)n);
  }
  if (cl.ooff == cl.olen || cl.out_closed)
    cl.ooff = cl.olen = 0;
}

/* ---- setup ------------------------------------------------------------- */

static int parse_url(const char *url, char *host, size_t hostlen, char *port,
                     size_t portlen) {
  const char *p, *colon, *slash;
  if (strncmp(url, "https://", 8) != 0)
    return -1;
  p = url + 8;
  slash = strchr(p, '/');
  if (slash == NULL)
    slash = p + strlen(p);
  colon = memchr(p, ':', (size_t)(slash - p));
  if (colon == NULL || (size_t)(colon - p) >= hostlen ||
      (size_t)(slash - colon - 1) >= portlen)
    return -1;
  memcpy(host, p, (size_t)(colon - p));
  host[colon - p] = '\0';
  memcpy(port, colon + 1, (size_t)(slash - colon - 1));
  port[slash - colon - 1] = '\0';
  snprintf(cl.authority, sizeof(cl.authority), "%s:%s", host, port);
  cl.path = *slash ? slash : "/";
  return 0;
}

static int setup_tls(void) {
  if (gnutls_certificate_allocate_credentials(&cl.cred) != 0)
    return -1;
  cl.ref.get_conn = get_conn;
  cl.ref.user_data = NULL;
  return h3core_tls(&cl.tls, cl.cred, "localhost", 9, &cl.ref);
}

static int retry_cb(ngtcp2_conn *conn, const ngtcp2_pkt_hd *hd, void *user) {
  printf("retry\n");
  return ngtcp2_crypto_recv_retry_cb(conn, hd, user);
}

static int new_token_cb(ngtcp2_conn *conn, const ngtcp2_vec *token,
                        void *user) {
  FILE *f = fopen(cl.token_file, "wb");
  (void)conn;
  (void)user;
  if (f != NULL) {
    fwrite(token->base, 1, token->len, f);
    fclose(f);
  }
  printf("new-token %zu\n", token->len);
  return 0;
}

static void read_token(void) {
  FILE *f = fopen(cl.token_file, "rb");
  if (f != NULL) {
    cl.token_len = fread(cl.token, 1, sizeof(cl.token), f);
    fclose(f);
  }
}

static int setup_quic(void) {
  ngtcp2_callbacks cb;
  ngtcp2_settings st;
  ngtcp2_transport_params tp;

  h3core_quic_callbacks(&cb);
  cb.recv_retry = retry_cb;
  if (cl.token_file != NULL)
    cb.recv_new_token = new_token_cb;
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
  st.initial_ts = now_ns();
  if (cl.verbose)
    st.log_printf = h3core_log;
  if (cl.token_file != NULL) {
    read_token();
    st.token.base = cl.token;
    st.token.len = cl.token_len;
  }
  ngtcp2_transport_params_default(&tp);
  tp.initial_max_streams_uni = 3;
  tp.initial_max_stream_data_bidi_local =
      cl.no_read || cl.stall_ms > 0 ? 1024 : 256 * 1024;
  tp.initial_max_stream_data_uni = 256 * 1024;
  tp.initial_max_data = 16 * 1024 * 1024;
  /* Longer than any server's in the tests: the server's idle timeout is
   * the one that shows. */
  tp.max_idle_timeout = 120 * NGTCP2_SECONDS;
  if (!cl.no_read)
    st.max_stream_window = 8 * 1024 * 1024;
  st.max_window = 24 * 1024 * 1024;

  if (h3core_quic_conn(&cl.conn, (struct sockaddr *)&cl.local, cl.locallen,
                       (struct sockaddr *)&cl.remote, cl.remotelen, &cb, &st,
                       &tp, NULL, cl.tls) != 0)
    return -1;
  return 0;
}

static int setup_socket(const char *host, const char *port) {
  struct addrinfo hints, *ai;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  if (getaddrinfo(host, port, &hints, &ai) != 0)
    return -1;
  cl.fd = socket(ai->ai_family, SOCK_DGRAM, 0);
  if (cl.fd < 0 || connect(cl.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    freeaddrinfo(ai);
    return -1;
  }
  memcpy(&cl.remote, ai->ai_addr, ai->ai_addrlen);
  cl.remotelen = ai->ai_addrlen;
  freeaddrinfo(ai);
  cl.locallen = sizeof(cl.local);
  return getsockname(cl.fd, (struct sockaddr *)&cl.local, &cl.locallen);
}

/* --rebind-after: a new socket to the same server; ngtcp2 learns the new
 * local address as a NAT would hide it, without a migration. */
static int rebind(void) {
  struct sockaddr_storage local;
  socklen_t locallen = sizeof(local);
  ngtcp2_addr a;
  int fd = socket(cl.remote.ss_family, SOCK_DGRAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&cl.remote, cl.remotelen) != 0 ||
      getsockname(fd, (struct sockaddr *)&local, &locallen) != 0) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  close(cl.fd);
  cl.fd = fd;
  cl.local = local;
  cl.locallen = locallen;
  ngtcp2_conn_set_local_addr(
      cl.conn, ngtcp2_addr_init(&a, (ngtcp2_sockaddr *)&cl.local, cl.locallen));
  out("rebound to port %u",
      (unsigned)ntohs(local.ss_family == AF_INET6
                          ? ((struct sockaddr_in6 *)&local)->sin6_port
                          : ((struct sockaddr_in *)&local)->sin_port));
  return 0;
}

static int usage(void) {
  fprintf(
      stderr,
      "usage: h3client [-n|--streams N] [--body-size N] [--header-bytes N]\n"
      "  [--headers N] [--reset-mid-body K] [--no-read] [--stall-ms N]\n"
      "  [--idle] [--serial] [--print-headers]\n"
      "  [--header 'N: V']... [--tunnel PROTO] [--omit :path|:scheme]\n"
      "  [--on-eof fin|reset|stop|close] [--body-out PATH]\n"
      "  [--timeout-ms N] [-v] GET|POST|CONNECT https://HOST:PORT/PATH\n");
  return 2;
}

static int num(const char *s, uint64_t *v) {
  char *end;
  unsigned long long x;
  errno = 0;
  x = strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0')
    return -1;
  *v = x;
  return 0;
}

/* A --header value with \r, \n and \0 made the bytes they name (kept
 * for the whole run). */
static uint8_t *unescape(const char *v, size_t *len) {
  size_t n = strlen(v), i, k = 0;
  uint8_t *out = malloc(n + 1);
  if (out == NULL)
    exit(1);
  for (i = 0; i < n; i++) {
    if (v[i] == '\\' && i + 1 < n &&
        (v[i + 1] == 'r' || v[i + 1] == 'n' || v[i + 1] == '0')) {
      i++;
      out[k++] = v[i] == 'r' ? '\r' : v[i] == 'n' ? '\n' : 0;
    } else {
      out[k++] = (uint8_t)v[i];
    }
  }
  *len = k;
  return out;
}

int main(int argc, char **argv) {
  uint64_t n = 1, timeout_ms = 15000;
  char host[256], port[16];
  ngtcp2_tstamp deadline;
  size_t i;
  int a, rc = 0, posargs = 0;
  const char *url = NULL;

  for (a = 1; a < argc; a++) {
    const char *o = argv[a];
    uint64_t *dst = NULL;
    if (strcmp(o, "-n") == 0 || strcmp(o, "--streams") == 0)
      dst = &n;
    else if (strcmp(o, "--body-size") == 0)
      dst = &cl.body_size;
    else if (strcmp(o, "--header-bytes") == 0)
      dst = &cl.header_bytes;
    else if (strcmp(o, "--headers") == 0)
      dst = &cl.nheaders;
    else if (strcmp(o, "--reset-mid-body") == 0)
      dst = &cl.reset_k;
    else if (strcmp(o, "--timeout-ms") == 0)
      dst = &timeout_ms;
    else if (strcmp(o, "--stall-ms") == 0)
      dst = &cl.stall_ms;
    else if (strcmp(o, "--rebind-after") == 0)
      dst = &cl.rebind_after;
    else if (strcmp(o, "--no-read") == 0)
      cl.no_read = 1;
    else if (strcmp(o, "--cancel-all") == 0)
      cl.cancel_all = 1;
    else if (strcmp(o, "--rapid-reset") == 0)
      cl.cancel_all = cl.rapid_reset = 1;
    else if (strcmp(o, "--idle") == 0)
      cl.idle = 1;
    else if (strcmp(o, "--serial") == 0)
      cl.serial = 1;
    else if (strcmp(o, "-v") == 0)
      cl.verbose = 1;
    else if (strcmp(o, "--print-headers") == 0)
      cl.print_headers = 1;
    else if (a + 1 < argc && strcmp(o, "--token-file") == 0)
      cl.token_file = argv[++a];
    else if (a + 1 < argc && strcmp(o, "--tunnel") == 0)
      cl.tunnel = argv[++a];
    else if (a + 1 < argc && strcmp(o, "--body-out") == 0) {
      cl.body_out = fopen(argv[++a], "wb");
      if (cl.body_out == NULL) {
        perror(argv[a]);
        return 2;
      }
    } else if (a + 1 < argc && strcmp(o, "--omit") == 0) {
      const char *f = argv[++a];
      if (strcmp(f, ":path") == 0)
        cl.omit_path = 1;
      else if (strcmp(f, ":scheme") == 0)
        cl.omit_scheme = 1;
      else
        return usage();
    } else if (a + 1 < argc && strcmp(o, "--on-eof") == 0) {
      static const char *const acts[] = {"fin", "reset", "stop", "close"};
      const char *v = argv[++a];
      size_t k;
      for (k = 0; k < 4 && strcmp(v, acts[k]) != 0; k++)
        ;
      if (k == 4)
        return usage();
      cl.on_eof = (int)k;
    } else if (a + 1 < argc && (strcmp(o, "--header") == 0 ||
                                strcmp(o, "--first-header") == 0)) {
      const char *f = argv[++a], *colon = strchr(f + 1, ':');
      nghttp3_nv *x;
      if (colon == NULL || cl.nfields == MAX_FIELDS)
        return usage();
      cl.first_only[cl.nfields] = o[2] == 'f';
      x = &cl.fields[cl.nfields++];
      x->name = (uint8_t *)(uintptr_t)f;
      x->namelen = (size_t)(colon - f);
      colon++;
      while (*colon == ' ')
        colon++;
      x->value = unescape(colon, &x->valuelen);
      x->flags = NGHTTP3_NV_FLAG_NONE;
    } else if (posargs == 0 && o[0] != '-') {
      cl.method = o;
      posargs++;
    } else if (posargs == 1 && o[0] != '-') {
      url = o;
      posargs++;
    } else
      return usage();
    if (dst != NULL && (a + 1 >= argc || num(argv[++a], dst) != 0))
      return usage();
  }
  if (url == NULL ||
      (strcmp(cl.method, "GET") != 0 && strcmp(cl.method, "POST") != 0 &&
       strcmp(cl.method, "CONNECT") != 0) ||
      (cl.tunnel != NULL && (n != 1 || cl.body_size > 0 || cl.reset_k > 0)) ||
      n == 0 || n > 1000000 || cl.nheaders > MAX_EXTRA ||
      cl.header_bytes > 16 * 1024 * 1024 ||
      parse_url(url, host, sizeof(host), port, sizeof(port)) != 0)
    return usage();

  for (i = 0; i < PATTERN_LEN; i++)
    pattern[i] = (uint8_t)(i % 251);
  if (cl.tunnel != NULL) {
    if ((cl.ring = malloc(RING)) == NULL)
      return 1;
    /* Both served from the poll loop; a reader that leaves is EPIPE. */
    if (fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK) != 0 ||
        fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK) != 0)
      return 1;
    signal(SIGPIPE, SIG_IGN);
  }
  if (cl.header_bytes > 0) {
    cl.big = malloc((size_t)cl.header_bytes);
    if (cl.big == NULL)
      return 1;
    memset(cl.big, 'a', (size_t)cl.header_bytes);
  }
  if (cl.nheaders > 0) {
    static char names[MAX_EXTRA][24];
    cl.extra = calloc((size_t)cl.nheaders, sizeof(*cl.extra));
    if (cl.extra == NULL)
      return 1;
    for (i = 0; i < cl.nheaders; i++) {
      snprintf(names[i], sizeof(names[i]), "x-h-%u", (unsigned)i);
      cl.extra[i] = nv(names[i], "v", 1);
    }
    cl.nextra = (size_t)cl.nheaders;
  }
  /* --reset-mid-body: the cancelled upload, then GET / after it. */
  cl.nreqs = cl.reset_k > 0 ? 2 : (size_t)n;
  cl.reqs = calloc(cl.nreqs, sizeof(*cl.reqs));
  if (cl.reqs == NULL)
    return 1;
  for (i = 0; i < cl.nreqs; i++) {
    req *r = &cl.reqs[i];
    r->path = cl.path;
    r->is_post = strcmp(cl.method, "POST") == 0;
    r->limit = cl.body_size;
  }
  if (cl.reset_k > 0) {
    cl.reqs[0].path = "/upload";
    cl.reqs[0].is_post = 1;
    cl.reqs[0].cancel = 1;
    cl.reqs[0].limit = cl.reset_k;
    cl.reqs[1].path = "/";
    cl.reqs[1].is_post = 0;
  }

  if (setup_socket(host, port) != 0 || setup_tls() != 0 || setup_quic() != 0) {
    fprintf(stderr, "h3client: setup failed\n");
    return 1;
  }
  deadline = now_ns() + timeout_ms * 1000000u;
  if (cl.stall_ms > 0)
    cl.stall_until = now_ns() + cl.stall_ms * 1000000u;
  for (;;) {
    ngtcp2_tstamp t, exp;
    struct pollfd pf[3];
    int ms, r, npf = 1, k;

    /* Open what may be opened; the second request of --reset-mid-body
     * waits for the first one's reset. */
    while (cl.connected && cl.want_open) {
      if (cl.reset_k > 0 && cl.next == 1 && !cl.reqs[0].finished)
        break;
      if (cl.serial && cl.next > 0 && !cl.reqs[cl.next - 1].finished)
        break;
      r = open_one();
      if (r < 0) {
        out("open-error");
        rc = 1;
        goto end;
      }
      if (r == 0)
        cl.want_open = 0;
    }
    stall_check(now_ns());
    if (cl.rebind_after > 0 && cl.got_total >= cl.rebind_after) {
      cl.rebind_after = 0;
      if (rebind() != 0) {
        out("rebind-error");
        rc = 1;
        goto end;
      }
    }
    if (write_all() != 0) {
      rc = 1;
      goto end;
    }
    if (cl.cancel_all) {
      /* A head the server has acknowledged was read: reset it now. */
      for (i = 0; i < cl.next; i++) {
        req *q = &cl.reqs[i];
        if (q->finished || (q->head_acked == 0 && !cl.rapid_reset))
          continue;
        if (ngtcp2_conn_shutdown_stream(cl.conn, q->id,
                                        NGHTTP3_H3_REQUEST_CANCELLED) != 0) {
          rc = 1;
          goto end;
        }
        out("stream %lld cancelled", (long long)q->id);
        finish(q);
      }
      if (write_all() != 0) {
        rc = 1;
        goto end;
      }
    }
    if (cl.reset_k > 0 && cl.next >= 1 && !cl.reqs[0].finished &&
        cl.reqs[0].acked >= cl.reset_k) {
      /* All K bytes reached the server: now the reset (both directions,
       * as a client that gives up on an upload does). */
      if (ngtcp2_conn_shutdown_stream(cl.conn, cl.reqs[0].id,
                                      NGHTTP3_H3_REQUEST_CANCELLED) != 0) {
        rc = 1;
        goto end;
      }
      out("stream %lld cancelled", (long long)cl.reqs[0].id);
      finish(&cl.reqs[0]);
      cl.want_open = 1;
      continue;
    }
    if (cl.tunnel != NULL && cl.ended && cl.olen == 0 && !cl.reqs[0].finished) {
      /* The reader sees EOF, as after a TCP server's FIN, even when fd 0
       * is the same socket and stays open. */
      (void)shutdown(1, SHUT_WR);
      close(1);
      cl.out_closed = 1;
      finish(&cl.reqs[0]);
    }
    if (cl.finished == cl.nreqs && !cl.idle)
      break;
    t = now_ns();
    if (t >= deadline) {
      out("timeout");
      rc = 3;
      goto end;
    }
    exp = ngtcp2_conn_get_expiry(cl.conn);
    if (exp > deadline)
      exp = deadline;
    if (cl.stall_until != 0 && exp > cl.stall_until)
      exp = cl.stall_until;
    /* Round up: a timer that fires early finds nothing due and spins. */
    ms = exp <= t ? 0 : (int)((exp - t + 999999) / 1000000);
    pf[0].fd = cl.fd;
    pf[0].events = POLLIN;
    if (cl.tunnel != NULL && cl.reqs[0].opened && !cl.in_eof) {
      /* Without room only a hang-up is watched for (events 0). */
      int room = cl.filled - cl.reqs[0].acked < RING;
      if (room || !cl.in_hup) {
        pf[npf].fd = 0;
        pf[npf++].events = room ? POLLIN : 0;
      }
    }
    if (cl.tunnel != NULL && cl.olen > 0 && !cl.out_closed) {
      pf[npf].fd = 1;
      pf[npf++].events = POLLOUT;
    }
    for (k = 0; k < npf; k++)
      pf[k].revents = 0;
    if (poll(pf, (nfds_t)npf, ms) > 0) {
      if (pf[0].revents != 0) {
        r = read_all();
        if (r != 0) {
          cl.closed = 1;
          rc = r > 0 && cl.idle && cl.finished == cl.nreqs ? 0 : 1;
          goto end;
        }
      }
      for (k = 1; k < npf; k++) {
        if (pf[k].revents == 0)
          continue;
        if (pf[k].fd == 1) {
          t_out();
        } else if ((r = t_in(pf[k].revents)) != 0) {
          rc = r > 0 ? 0 : 1;
          goto end;
        }
      }
    }
    t = now_ns();
    if (ngtcp2_conn_get_expiry(cl.conn) <= t) {
      r = ngtcp2_conn_handle_expiry(cl.conn, t);
      if (r == NGTCP2_ERR_IDLE_CLOSE) {
        out("idle-close");
        cl.closed = 1;
        rc = cl.idle && cl.finished == cl.nreqs ? 0 : 1;
        goto end;
      }
      if (r != 0) {
        out("quic-error %s", ngtcp2_strerror(r));
        rc = 1;
        goto end;
      }
    }
  }
end:
  if (cl.tunnel != NULL && !cl.out_closed) {
    /* The connection ended with bytes still for fd 1: they are the
     * server's last words (a close frame before CONNECTION_CLOSE). */
    (void)fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK);
    t_out();
    (void)shutdown(1, SHUT_WR);
    close(1);
  }
  if (!cl.closed && cl.conn != NULL &&
      !ngtcp2_conn_is_in_closing_period(cl.conn) &&
      !ngtcp2_conn_is_in_draining_period(cl.conn))
    send_close();
  out("done requests %zu finished %zu max-open %zu", cl.nreqs, cl.finished,
      cl.max_open);
  for (i = 0; i < cl.nreqs; i++)
    if (cl.reqs[i].hash != NULL)
      gnutls_hash_deinit(cl.reqs[i].hash, NULL);
  if (cl.h3 != NULL)
    nghttp3_conn_del(cl.h3);
  if (cl.conn != NULL)
    ngtcp2_conn_del(cl.conn);
  if (cl.tls != NULL)
    gnutls_deinit(cl.tls);
  if (cl.cred != NULL)
    gnutls_certificate_free_credentials(cl.cred);
  if (cl.fd > 0)
    close(cl.fd);
  free(cl.reqs);
  free(cl.ring);
  free(cl.obuf);
  free(cl.big);
  free(cl.extra);
  if (cl.body_out != NULL && fclose(cl.body_out) != 0 && rc == 0)
    rc = 1;
  return rc;
}
