/* reference: tern's reference server, the one the demo (examples/demo.sh),
 * the tests (test/net) and the benchmarks (perf/perf) run: routes and
 * flags for what they exercise, not a program to start from (that is
 * examples/hello.c).
 *
 *   GET  /              200 "Hello, World!" (text/plain)
 *   POST /echo          the request body, streamed back (any size)
 *   POST /collect       the request body, collected first (--max-body)
 *   POST /upload        reads the body to its end (streamed, any size) and
 *                       answers its length in bytes, as text; pause=1
 *                       pauses reading after the first piece, for good;
 *                       pause=2 pauses after each piece and resumes from
 *                       another thread 1 ms later, writing nothing;
 *                       late=1 answers a failed body not in the body
 *                       callback but from another thread after ms=N ms;
 *                       abort=1 cuts the request short with
 *                       tern_response_abort inside the body callback
 *                       that gets its first bytes
 *   GET  /stream        a chunked body written in pieces
 *   GET  /form?PAIRS    (and POST /form with an urlencoded body) each pair
 *                       decoded, "name=value" a line; "?" for a bad escape
 *   GET  /cookie?name=N the value of cookie N (404: none), and a Set-Cookie
 *                       "seen=1" made by tern_cookie_format
 *   GET  /private       Basic authentication as admin:s3cret ("hello
 *                       admin"), else 401 with WWW-Authenticate
 *   GET  /whoami        "tls V host H proto P": tern_request_tls (hex),
 *                       the host (Host, or :authority on HTTP/2 and 3) and
 *                       tern_request_protocol
 *   GET  /trailers      a streamed body followed by two trailer fields
 *   GET  /big?bytes=N   N bytes of 'x' (at most 64 MiB; 1 MiB without
 *                       bytes=), referenced from static memory
 *   GET  /block?ms=N    sleeps N ms on the blocking pool, then answers
 *   GET  /block-runs    how many /block handlers have started
 *   GET  /stall?ms=N    sleeps N ms on the worker itself (holding its loop),
 *                       then answers
 *   GET  /peer-block?ms=N  the same, then answers (and logs) the client's
 *                       address and port as tern_request_peer gives them
 *   GET  /peer          the client's address and port as tern_request_peer
 *                       gives them ("ADDR PORT"), at once: behind a load
 *                       balancer with --proxy-protocol, the client's
 *                       that the PROXY header names
 *   GET  /local         the server's own address and port of the
 *                       connection as tern_request_local gives them
 *                       ("ADDR PORT")
 *   GET  /proxy-tlvs    the PROXY v2 header's TLVs as tern_request_proxy_tlv
 *                       gives them, "NAME: VALUE" a line ("none" without)
 *   GET  /defer?ms=N    answered from another thread after N ms; with
 *                       &bad=1 it first tries a header with a CR LF in it,
 *                       which must fail with TERN_EINVAL
 *   GET  /tick?n=N&ms=M another thread streams N chunks, one per M ms
 *   GET  /overrun       another thread announces 5 bytes and writes 10: the
 *                       worker aborts that request (a stream reset on
 *                       HTTP/2, a close on HTTP/1.1)
 *   GET  /status?code=N answers status N ("status N"); &cl=L adds a
 *                       Content-Length: L field of its own (for 304s);
 *                       &thread=1 answers from another thread. A 1xx is
 *                       refused (TERN_EINVAL): then a 200 says so
 *   GET  /early-hints   103 Early Hints (a Link field), then a 200 that
 *                       gives tern_respond_interim's result; &code=N sends
 *                       N instead of 103, &thread=1 from another thread
 *   GET  /stats         the server's counters as JSON (and "gone":
 *                       /longpoll's gone callbacks, "gone_eclosed": how
 *                       many of them saw tern_respond say TERN_ECLOSED)
 *   GET  /longpoll      never answers; the client going away runs its
 *                       gone callback (now=1: answers at once; thread=1:
 *                       subscribing from another thread is refused)
 *   GET  /worker        which worker thread answered (an opaque token, the
 *                       same for every request that thread answers)
 *   GET  /never         a handler that never answers: only the stop
 *                       deadline ends it (the client gets 503)
 *   GET  /misuse        another thread makes response calls out of order
 *                       (while the worker waits for it, so the request
 *                       surely lives) and answers with their return codes;
 *                       /misuse?report=1 then gives the codes of the calls
 *                       it made after finishing
 *   GET  /ws            WebSocket echo (HTTP/1.1 Upgrade, or extended
 *                       CONNECT over HTTP/2 and HTTP/3; permessage-deflate when
 *                       offered; subprotocol "echo" when offered). Query
 *                       knobs for the tests: stream=1 receives pieces and
 *                       echoes them as fragments; max=N caps messages at N
 *                       bytes; hw=N sets the send high-water mark (fail=1:
 *                       refuse sends past it); deflate=0 declines
 *                       compression; cmds=1 makes the text messages
 *                       "close" (close 4000 "bye"), "ping" (a ping "hi"),
 *                       "thread:TEXT" (TEXT echoed from another thread)
 *                       and "pause:MS" (stop reading; another thread
 *                       resumes after MS ms) commands
 *   GET  /metrics       tern_metrics_handler: the counters in Prometheus'
 *                       text format
 *   GET  /db/:key       one Redis GET (--redis PATH, Redis's Unix socket),
 *                       asynchronously on the worker's loop (hiredis's
 *                       libuv adapter, a connection per worker); the
 *                       value, 404 for no such key, 502 when Redis fails
 *   GET  /db-blocking/:key  the same on the blocking lane (synchronous
 *                       hiredis, a connection per pool thread); both 501
 *                       without --redis or hiredis (reference_db.c)
 *   GET  /compress      (--compress) a route that compresses (gzip, br
 *                       and zstd where built, tern_compress_options'
 *                       defaults): bytes=N of
 *                       text (default 4096, at most 1 MiB); type=json,
 *                       png or none instead of text/plain; ce=1 says
 *                       Content-Encoding: gzip itself (the bytes are not
 *                       gzip: tern must leave them alone); nt=1 adds
 *                       Cache-Control: no-transform; etag=1 a strong
 *                       ETag "v1"; code=N the status; stream=1 answers
 *                       with tern_response_start (its length, or -1 with
 *                       cl=-1) and one write instead of tern_respond;
 *                       with over=1 a first write one byte past the
 *                       length must be refused (else "OVERRUN" is sent)
 *   GET  /ctick?n=N&ms=M  /tick on a compressing route: another thread
 *                       streams N chunks, one per M ms
 *   GET  /cstatic/...   (--compress with --static DIR) DIR's files on a
 *                       compressing route (no precompressed siblings)
 *   POST /multipart     (streamed) a multipart/form-data body read with
 *                       tern_multipart as it arrives: one line per part,
 *                       "NAME FILENAME BYTES FNV1A64" ("-" for none), then
 *                       "end"; 400 malformed or incomplete, 413 past the
 *                       parser's limits, 415 not multipart
 *   GET  /write-ref?n=N streams N pieces of 1000 bytes, each in a block of
 *                       its own, with tern_response_write_ref (thread=1:
 *                       from another thread); each release checks that
 *                       it got back the pointer written
 *   GET  /write-ref-stats  "RELEASED MISMATCHED" since the start
 *   GET  /pinned?n=N&ms=M&end=K  a streamed response two threads hold
 *                       with tern_request_ref: one writes N lines
 *                       "piece I", one per M ms, the other ends the
 *                       response after K ms and writes once more;
 *                       extra=1 first unrefs without a reference
 *   GET  /pinned-stats  "DONE OK ESTATE ECLOSED OTHER LOST": threads
 *                       done, their calls' return codes, and how many saw
 *                       tern_request_data change
 *   GET  /client-cert   the verified TLS client certificate's subject and
 *                       DER size ("SUBJECT BYTES"), or "none"
 *   GET  /sse           a Server-Sent Events stream in the server's hub:
 *                       an event "hello" (data: the Last-Event-ID the
 *                       client sent, or "none"), then n=K events ids 1..K
 *                       ("event K"); heartbeat=MS, hw=BYTES, retry=MS set
 *                       its options, close=1 ends it after them
 *   GET  /sse-publish   (another thread: a blocking route) publishes
 *                       data=TEXT (id=I, event=E, size=N: N bytes of 'x'
 *                       instead) to the hub; answers the subscriber count
 *   GET  /sse-stats     the hub's subscribers and the streams ended by
 *                       reason, as JSON
 *   GET  /api/v1/R/:id[/detail]   the benchmarks' routed app: 25
 *                       resources R, 50 routes; answers "R ID [detail ]RID"
 *                       with RID the X-Request-Id header
 *
 * Options: --port N (0: any; prints "listening on PORT"), --host H ("*":
 * every IPv6 and IPv4 address),
 * --tls-port N --cert FILE --key FILE (HTTP/1.1 over TLS, and HTTP/2 where
 * it is built, on that port; prints "tls listening on PORT"; up to four
 * --cert/--key pairs, chosen by SNI; SIGHUP reloads them from the same
 * files, for new handshakes), --tls-engine auto|gnutls|mbedtls (the TLS
 * engine; its name goes to stderr as "tls engine NAME"), --tls-min 1.2|1.3
 * (the lowest TLS version accepted), --client-ca FILE (ask TLS and QUIC
 * clients for a certificate signed by FILE's CAs; --client-cert-required:
 * refuse those without one; GET /client-cert answers its subject or
 * "none"), --quic-port N (HTTP/3 on UDP port N
 * with the certificates of --tls-port, which it needs; N may equal the TLS
 * port; 0: any; prints "quic listening on PORT"), --quic-retry (validate
 * every new QUIC client with a Retry), --quic-early-data (accept 0-RTT),
 * --quic-secret HEX (the token and stateless-reset secret, 16 to 64 bytes
 * in hex: the same across restarts), --quic-previous-secret HEX (the one
 * being rotated out, still accepted), --quic-fd N (HTTP/3 on UDP socket
 * N, bound by the parent; prints "fd N quic listening on PORT"; needs
 * --tls-port),
 * --workers N, and the limits: --max-head, --max-headers, --max-uri,
 * --max-body, --head-timeout-ms, --idle-timeout-ms, --body-timeout-ms,
 * --max-conns, --max-stream-window, --max-conn-window (the largest HTTP/2
 * and HTTP/3 receive windows, per stream and per connection, in bytes),
 * --max-compressors, --max-compressors-per-conn (streamed responses
 * compressed at once, in the server and on one connection),
 * --max-conns-per-ip, --requests-per-ip, --request-burst, --ip-table-size
 * (the limits per client address). --balance kernel|least|reuseport: how
 * connections spread over the workers (tern_settings.balance).
 * --processes N serves from N processes (tern_server_fork, after the
 * listeners); the first passes SIGINT/SIGTERM on to the others and waits
 * for them.
 * --error-hook answers tern's own error answers (404, 405, 413, 414, 431,
 * 400, ...) with the server's JSON {"error":S,"reason":"...",
 * "method":"M" or null} and an X-Error-Hook: 1 field; --default-handler
 * routes unmatched requests to a handler answering {"default":404 or 405,
 * "allow":"..."} (405 with Allow). --access-log FILE logs every request
 * through tern's built-in writer (JSON lines; --access-log-format combined
 * for the combined format; --access-log-buffers N and
 * --access-log-buffer-size N set its queue); SIGHUP reopens the file.
 * --static-fallback NAME serves NAME (below --static's DIR) for a path under
 * /static/ that does not exist, and --static-header 'N: V' (up to 16) adds
 * a field to every answer made from a file (tern_static_options version 2).
 * --vhosts adds virtual hosts (tern_route_options.host): GET /site on
 * a.example answers "site a", on *.b.example "site b" and on x.b.example
 * "site x"; POST /only-post on a.example answers "posted"; other paths
 * on those hosts fall through to the routes above.
 * --response-hook adds fields to every answer (tern_server_on_response):
 * X-Hooked: the status; X-Content-Type-Options: nosniff unless the answer
 * has one; with an Origin field, Access-Control-Allow-Origin: that origin
 * and Vary: Origin. Paths under /hook- try the hook's limits and misuse:
 * /hook-big adds a 5000-byte value, /hook-bad one with a CR LF, and
 * /hook-respond calls tern_respond from the hook; each refusal (TERN_ENOMEM,
 * TERN_EINVAL, TERN_ESTATE) shows as X-Hook-Refused: its code.
 * --metrics also keeps /metrics' request duration histogram
 * (tern_server_time_requests). --redis PATH: the /db routes' Redis
 * (a Unix socket). --proxy-protocol: every TCP listener
 * (plain and TLS) expects a PROXY protocol v1 or v2 header from a load
 * balancer on loopback first (tern_listen_options); --proxy-trusted LIST
 * trusts LIST's networks instead. --unix PATH also serves HTTP/1.1 and
 * h2c on a Unix socket (a file, or "@name": abstract), printed as "unix
 * listening on PATH" after the other listeners. --h2c-port N also listens
 * for HTTP/2 alone in the clear (http2_only: prior knowledge, no
 * HTTP/1.1), printed as "h2c listening on PORT" after the unix line.
 * --http1-port N also listens for HTTP/1.1 alone (http1_only: no h2c),
 * printed as "http1 listening on PORT", and with a certificate on a second
 * port of the kernel's choice for HTTP/1.1 alone over TLS (ALPN offers
 * http/1.1 only), printed as "tls-http1 listening on PORT".
 * --listen-fds serves the sockets systemd's LISTEN_PID/LISTEN_FDS hand over:
 * stream ones (TCP or Unix) each printed as "fd N listening on PORT" (0 for
 * Unix) after the first line, UDP ones with HTTP/3 as --quic-fd does (after the
 * TLS and QUIC lines; they need --tls-port); each one's LISTEN_FDNAMES name
 * goes to stderr as "reference: fd N named NAME". --ticket-key HEX (128 digits)
 * sets the TLS session-ticket key (tern_tls_set_ticket_key), the same on every
 * instance of a fleet; --previous-ticket-key HEX the one being rotated
 * out, whose tickets still resume (tern_tls_set_previous_ticket_key).
 * --compress adds the compressing routes above (docs/compression.md).
 * SIGINT/SIGTERM stop gracefully (5 s deadline).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tern.h"

static tern_server *server;
static tern_tls *tls;
static const char *cert_files[4], *key_files[4];
static int ncerts, nkeys;
static volatile sig_atomic_t reload_wanted, reopen_wanted;
static char big[1 << 20];

static void sleep_ms(long ms);

static const tern_header text_plain[] = {
    {"content-type", 12, "text/plain", 10}};

/* --processes N: the children the first process made (tern_server_fork),
 * which it passes its stop signals on to and waits for. */
static int children[64];
static unsigned nchildren;

static void on_signal(int sig) {
  unsigned i;
  tern_stop(server, 5000);
  for (i = 0; i < nchildren; i++)
    kill(children[i], sig);
}

static void on_hup(int sig) {
  (void)sig;
  reload_wanted = 1;
  reopen_wanted = 1;
}

static int add_certs(void) {
  int i, rc;
  for (i = 0; i < ncerts; i++)
    if ((rc = tern_tls_add_cert_file(tls, cert_files[i], key_files[i])) != 0)
      return rc;
  return 0;
}

/* Certificates are reloaded off the signal handler, by a thread of the
 * example's own: parsing files is no work for a signal handler. */
static void *reloader(void *arg) {
  (void)arg;
  for (;;) {
    sleep_ms(50);
    if (reopen_wanted) {
      reopen_wanted = 0;
      if (tern_server_access_log_reopen(server) == 0)
        fprintf(stderr, "reference: access log reopened\n");
    }
    if (!reload_wanted || tls == NULL)
      continue;
    reload_wanted = 0;
    if (add_certs() == 0 && tern_tls_commit(tls) == 0)
      fprintf(stderr, "reference: certificates reloaded\n");
    else
      fprintf(stderr, "reference: reload failed, the old ones stay\n");
  }
  return NULL;
}

/* The value of query parameter `key` (*len bytes), or NULL. */
static const char *query_value(tern_request *r, const char *key, size_t *len) {
  size_t qlen, klen = strlen(key);
  const char *q = tern_request_query(r, &qlen), *end = q + qlen;
  while (q != NULL && q < end) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    size_t n = amp ? (size_t)(amp - q) : (size_t)(end - q);
    if (n > klen && memcmp(q, key, klen) == 0 && q[klen] == '=') {
      *len = n - klen - 1;
      return q + klen + 1;
    }
    q = amp ? amp + 1 : end;
  }
  return NULL;
}

static long query_num(tern_request *r, const char *key) {
  size_t n;
  const char *v = query_value(r, key, &n);
  char buf[24];
  if (v == NULL || n >= sizeof(buf))
    return 0;
  memcpy(buf, v, n);
  buf[n] = 0;
  return strtol(buf, NULL, 10);
}

static void hello(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 200, text_plain, 1, "Hello, World!", 13);
}

/* The request's authority and fields as the application sees them, one
 * per line ("name: value"), the authority first: shows how a protocol's
 * pseudo-headers and split fields (HTTP/2 cookie crumbs) arrive. */
static void fields(tern_request *r, void *user) {
  char body[2048];
  size_t i, n, len = 0, alen;
  const char *a = tern_request_authority(r, &alen);
  const tern_header *f;
  int k;
  (void)user;
  k = snprintf(body, sizeof(body), "authority: %.*s\n", a ? (int)alen : 6,
               a ? a : "(none)");
  len = k > 0 && (size_t)k < sizeof(body) ? (size_t)k : 0;
  n = tern_request_header_count(r);
  for (i = 0; i < n && (f = tern_request_header_at(r, i)) != NULL; i++) {
    k = snprintf(body + len, sizeof(body) - len, "%.*s: %.*s\n",
                 (int)f->name_len, f->name, (int)f->value_len, f->value);
    if (k < 0 || (size_t)k >= sizeof(body) - len)
      break; /* the rest does not fit: what fits is shown */
    len += (size_t)k;
  }
  tern_respond(r, 200, text_plain, 1, body, len);
}

/* The pairs of the query (GET) or of the urlencoded body (POST), one
 * "name=value" line each, decoded (tern_form_next, tern_form_decode); a
 * bad escape shows as "?". */
static void form(tern_request *r, void *user) {
  char out[4096], name[256], value[1024];
  size_t pos = 0, len = 0, slen = 0, nl, vl;
  const char *s;
  tern_header p;
  (void)user;
  tern_request_method(r, &nl);
  s = nl == 4 ? tern_request_body(r, &slen) : tern_request_query(r, &slen);
  while (tern_form_next(s, slen, &pos, &p)) {
    int k;
    if (tern_form_decode(p.name, p.name_len, name, sizeof(name), &nl) != 0) {
      name[0] = '?'; /* a bad escape */
      nl = 1;
    }
    if (tern_form_decode(p.value, p.value_len, value, sizeof(value), &vl) !=
        0) {
      value[0] = '?';
      vl = 1;
    }
    k = snprintf(out + len, sizeof(out) - len, "%.*s=%.*s\n", (int)nl, name,
                 (int)vl, value);
    if (k < 0 || (size_t)k >= sizeof(out) - len)
      break;
    len += (size_t)k;
  }
  tern_respond(r, 200, text_plain, 1, out, len);
}

/* GET /cookie?name=N: the value of the request's cookie N (404 when it
 * has none), and a Set-Cookie "seen=1" built by tern_cookie_format. */
static void cookie(tern_request *r, void *user) {
  char name[64], set[128];
  size_t qlen, nl = 0, vl, sl, nh = 1;
  const char *q = tern_request_query(r, &qlen), *v;
  tern_header h[2] = {TERN_HEADER("content-type", "text/plain"),
                      TERN_HEADER("set-cookie", "")};
  (void)user;
  if (tern_form_get(q, qlen, "name", 4, name, sizeof(name), &nl) != 0 ||
      (v = tern_request_cookie(r, name, nl, &vl)) == NULL) {
    tern_respond(r, 404, h, 1, "no such cookie\n", 15);
    return;
  }
  if (tern_cookie_format(set, sizeof(set), &sl, "seen", 4, "1", 1,
                         "Path=/; HttpOnly; SameSite=Lax") == 0) {
    h[1].value = set;
    h[1].value_len = sl;
    nh = 2;
  }
  tern_respond(r, 200, h, nh, v, vl);
}

/* GET /private: Basic authentication as user "admin", password
 * "s3cret" (tern_request_basic_auth, tern_equal_secret); 401 with
 * WWW-Authenticate otherwise. */
static void private_area(tern_request *r, void *user) {
  static const tern_header challenge[] = {TERN_HEADER(
      "www-authenticate", "Basic realm=\"tern\", charset=\"UTF-8\"")};
  char buf[256], msg[300];
  tern_header c;
  int n;
  (void)user;
  if (tern_request_basic_auth(r, buf, sizeof(buf), &c) != 0 ||
      !tern_equal_secret(c.name, c.name_len, "admin", 5) ||
      !tern_equal_secret(c.value, c.value_len, "s3cret", 6)) {
    tern_respond(r, 401, challenge, 1, "who are you?\n", 13);
    return;
  }
  n = snprintf(msg, sizeof(msg), "hello %.*s\n", (int)c.name_len, c.name);
  tern_respond(r, 200, text_plain, 1, msg,
               n > 0 && (size_t)n < sizeof(msg) ? (size_t)n : 0);
}

/* What a handler knows of where the request came from, the same on
 * every protocol: "tls V host H proto P" (V: tern_request_tls, in hex;
 * H: tern_request_header(r, "host"), which answers :authority on HTTP/2
 * and HTTP/3). */
static void whoami(tern_request *r, void *user) {
  static const tern_header plain[] = {
      TERN_HEADER("content-type", "text/plain")};
  char body[400];
  size_t hl = 0, nl = 0;
  const char *h = tern_request_header(r, "host", 4, &hl);
  const char *name = tern_request_host(r, &nl);
  const char *cipher = tern_request_tls_cipher(r);
  int n = snprintf(body, sizeof(body),
                   "tls %x host %.*s proto %d name %.*s cipher %s",
                   (unsigned)tern_request_tls(r), h ? (int)hl : 1, h ? h : "-",
                   tern_request_protocol(r), name ? (int)nl : 1,
                   name ? name : "-", cipher ? cipher : "-");
  (void)user;
  tern_respond(r, 200, plain, 1, body,
               n > 0 && (size_t)n < sizeof(body) ? (size_t)n : 0);
}

/* Echo: each piece is copied and written; reading pauses while more than
 * 1 MiB is waiting to be written, so a slow reader bounds the memory. */
typedef struct {
  size_t pending;
  int ended;
} echo_state;

typedef struct {
  size_t len;
  char data[];
} piece;

static void echo_finish(tern_request *r, echo_state *e) {
  tern_response_end(r, NULL, 0);
  free(e);
}

static void echo_written(tern_request *r, int status, void *user) {
  echo_state *e = tern_request_data(r);
  piece *p = user;
  (void)status;
  e->pending -= p->len;
  free(p);
  if (e->ended && e->pending == 0)
    echo_finish(r, e);
  else if (!e->ended && e->pending < (1u << 20))
    tern_request_resume(r);
}

static void echo_body(tern_request *r, int event, const char *data, size_t len,
                      void *user) {
  echo_state *e = tern_request_data(r);
  piece *p;
  (void)user;
  if (event == TERN_BODY_DATA) {
    p = malloc(sizeof(*p) + len);
    if (p == NULL)
      return;
    p->len = len;
    memcpy(p->data, data, len);
    e->pending += len;
    if (tern_response_write(r, p->data, len, echo_written, p) != 0) {
      e->pending -= len;
      free(p);
    } else if (e->pending >= (1u << 20)) {
      tern_request_pause(r);
    }
    return;
  }
  e->ended = 1;
  if (e->pending == 0)
    echo_finish(r, e);
}

static void echo(tern_request *r, void *user) {
  echo_state *e = calloc(1, sizeof(*e));
  (void)user;
  if (e == NULL) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  tern_request_set_data(r, e);
  /* Reading first lets a client that sent Expect: 100-continue get its
   * 100 before the response starts. */
  tern_request_read(r, echo_body, NULL);
  tern_response_start(r, 200, NULL, 0, -1);
}

static void collect(tern_request *r, void *user) {
  size_t len;
  const char *body = tern_request_body(r, &len);
  (void)user;
  tern_respond(r, 200, text_plain, 1, body, len);
}

enum { UPLOAD_PAUSE = 1, UPLOAD_LATE = 2, UPLOAD_RESUME = 4, UPLOAD_ABORT = 8 };

/* pause=2: the reading is resumed from another thread a millisecond after
 * each pause, and nothing is written until the end: a handler that
 * throttles its reading (tern must send the window credit itself). */
static void *resume_thread(void *arg) {
  sleep_ms(1);
  tern_request_resume(arg);
  return NULL;
}

static void hand_off(tern_request *r, void *(*fn)(void *));
static void *defer_thread(void *arg);

/* Upload sink: the body is read as fast as it comes and dropped; the
 * benchmarks' upload scenarios measure exactly this. `user` holds the
 * UPLOAD_* knobs. */
static void upload_body(tern_request *r, int event, const char *data,
                        size_t len, void *user) {
  uint64_t *total = tern_request_data(r);
  unsigned knobs = (unsigned)(uintptr_t)user;
  char line[32];
  int n;
  (void)data;
  if (total == NULL)
    return; /* aborted: the request is finished */
  if (event == TERN_BODY_DATA) {
    *total += len;
    if (knobs & UPLOAD_ABORT) {
      tern_request_set_data(r, NULL);
      free(total);
      tern_response_abort(r);
      return;
    }
    if (knobs & (UPLOAD_PAUSE | UPLOAD_RESUME))
      tern_request_pause(r);
    if (knobs & UPLOAD_RESUME) {
      pthread_t t;
      if (pthread_create(&t, NULL, resume_thread, r) == 0)
        pthread_detach(t);
      else
        tern_request_resume(r);
    }
    return;
  }
  if (event == TERN_BODY_ERROR && (knobs & UPLOAD_LATE)) {
    free(total);
    hand_off(r, defer_thread);
    return;
  }
  if (event == TERN_BODY_END) {
    n = snprintf(line, sizeof(line), "%llu", (unsigned long long)*total);
    tern_respond(r, 200, text_plain, 1, line, (size_t)n);
  } else {
    tern_respond(r, 400, NULL, 0, NULL, 0);
  }
  free(total);
}

static void upload(tern_request *r, void *user) {
  uint64_t *total = calloc(1, sizeof(*total));
  unsigned knobs = (query_num(r, "pause") == 1   ? UPLOAD_PAUSE
                    : query_num(r, "pause") == 2 ? UPLOAD_RESUME
                                                 : 0u) |
                   (query_num(r, "late") == 1 ? UPLOAD_LATE : 0u) |
                   (query_num(r, "abort") == 1 ? UPLOAD_ABORT : 0u);
  (void)user;
  if (total == NULL) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  tern_request_set_data(r, total);
  if (tern_request_read(r, upload_body, (void *)(uintptr_t)knobs) != 0) {
    free(total);
    tern_respond(r, 500, NULL, 0, NULL, 0);
  }
}

static void stream(tern_request *r, void *user) {
  char line[32];
  int i;
  (void)user;
  tern_response_start(r, 200, text_plain, 1, -1);
  for (i = 0; i < 5; i++) {
    int n = snprintf(line, sizeof(line), "chunk %d\n", i);
    tern_response_write(r, line, (size_t)n, NULL, NULL);
  }
  tern_response_end(r, NULL, 0);
}

/* A streamed body with trailers: the same answer on every protocol
 * (chunked trailers on HTTP/1.1, a trailing HEADERS frame on HTTP/2 and
 * HTTP/3). */
static void trailers_route(tern_request *r, void *user) {
  static const tern_header t[] = {{"x-checksum", 10, "abc123", 6},
                                  {"x-rows", 6, "2", 1}};
  (void)user;
  tern_response_start(r, 200, text_plain, 1, -1);
  tern_response_write(r, "row 1\nrow 2\n", 12, NULL, NULL);
  tern_response_end(r, t, 2);
}

static void big_written(tern_request *r, int status, void *user) {
  (void)r;
  (void)status;
  (void)user; /* static bytes: nothing to release */
}

/* Up to 1 MiB in one call; more (to 64 MiB) as 1 MiB references of the
 * same static block, streamed with a Content-Length. */
static void big_body(tern_request *r, void *user) {
  long n = query_num(r, "bytes");
  long left;
  (void)user;
  if (n < 0)
    n = sizeof(big);
  if (n > 64L << 20)
    n = 64L << 20;
  if (n <= (long)sizeof(big)) {
    tern_respond_ref(r, 200, text_plain, 1, big, (size_t)n, NULL, NULL);
    return;
  }
  if (tern_response_start(r, 200, text_plain, 1, n) != 0)
    return;
  for (left = n; left > 0; left -= (long)sizeof(big)) {
    size_t piece = left < (long)sizeof(big) ? (size_t)left : sizeof(big);
    if (tern_response_write(r, big, piece, big_written, NULL) != 0)
      break;
  }
  tern_response_end(r, NULL, 0);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* How many /block handlers have started: a request whose client left
 * while it waited for a pool thread never runs. */
static atomic_long block_runs;

static void block_count(tern_request *r, void *user) {
  char body[32];
  int n = snprintf(body, sizeof(body), "%ld", atomic_load(&block_runs));
  (void)user;
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

static void block(tern_request *r, void *user) {
  (void)user;
  atomic_fetch_add(&block_runs, 1);
  sleep_ms(query_num(r, "ms"));
  tern_respond(r, 200, text_plain, 1, "blocked", 7);
}

/* /stall: a handler that holds its worker (sleeps on it), as a slow
 * synchronous handler on the wrong lane would. */
static void stall(tern_request *r, void *user) {
  (void)user;
  sleep_ms(query_num(r, "ms"));
  tern_respond(r, 200, text_plain, 1, "stalled", 7);
}

/* "ADDR PORT" into body (96 bytes) as tern_request_peer, or with `local`
 * tern_request_local, gives them (the error's text instead of ADDR). */
static int address_line(tern_request *r, int local, char *body, size_t size) {
  char addr[64];
  int port = 0;
  int rc = local ? tern_request_local(r, addr, sizeof(addr), &port)
                 : tern_request_peer(r, addr, sizeof(addr), &port);
  return snprintf(body, size, "%s %d", rc == 0 ? addr : tern_strerror(rc),
                  port);
}

/* The client's address, read after sleeping on the blocking pool, when the
 * client may long have gone; it is logged too, since such a client never
 * sees the answer. */
static void peer_block(tern_request *r, void *user) {
  char body[96];
  int n;
  (void)user;
  sleep_ms(query_num(r, "ms"));
  n = address_line(r, 0, body, sizeof(body));
  fprintf(stderr, "reference: peer-block: %s\n", body);
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

/* GET /peer (user NULL): the client's address, as tern sees it (the PROXY
 * header's, behind a balancer). GET /local (user non-NULL): the address
 * the client reached, the listener's own or, on a wildcard listener, the
 * one the connection arrived at (the PROXY header's destination). */
static void address(tern_request *r, void *user) {
  char body[96];
  int n = address_line(r, user != NULL, body, sizeof(body));
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

/* The PROXY v2 header's TLVs, "NAME: VALUE" a line ("none" without). */
static void proxy_tlvs(tern_request *r, void *user) {
  static const struct {
    int type;
    const char *name;
  } t[] = {{TERN_PROXY_ALPN, "alpn"},
           {TERN_PROXY_AUTHORITY, "authority"},
           {TERN_PROXY_SSL, "ssl"},
           {TERN_PROXY_SSL_VERSION, "ssl_version"},
           {TERN_PROXY_SSL_CN, "ssl_cn"}};
  char body[1400];
  size_t i, len = 0, vl;
  const char *v;
  int k;
  (void)user;
  for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    if ((v = tern_request_proxy_tlv(r, t[i].type, &vl)) == NULL)
      continue;
    k = snprintf(body + len, sizeof(body) - len, "%s: %.*s\n", t[i].name,
                 (int)(vl > 256 ? 256 : vl), v);
    if (k > 0 && (size_t)k < sizeof(body) - len)
      len += (size_t)k;
  }
  if (len == 0)
    len = (size_t)snprintf(body, sizeof(body), "none\n");
  tern_respond(r, 200, text_plain, 1, body, len);
}

/* Work handed to a thread of the server's own, which then answers. */
typedef struct {
  tern_request *r;
  long ms, n, bad, code, cl;
} deferred;

static void answer_status(tern_request *r, long code, long cl) {
  tern_header h[2] = {{"Content-Type", 12, "text/plain", 10}};
  char body[80], len[24];
  size_t nh = 1;
  int n, rc;
  if (cl > 0) {
    h[1].name = "Content-Length";
    h[1].name_len = 14;
    h[1].value = len;
    h[1].value_len = (size_t)snprintf(len, sizeof(len), "%ld", cl);
    nh = 2;
  }
  n = snprintf(body, sizeof(body), "status %ld\n", code);
  rc = tern_respond(r, (int)code, h, nh, body, (size_t)n);
  if (rc == TERN_EINVAL) {
    n = snprintf(body, sizeof(body), "status %ld refused: %s\n", code,
                 tern_strerror(rc));
    tern_respond(r, 200, text_plain, 1, body, (size_t)n);
  }
}

static void early_hints(tern_request *r, long code) {
  static const tern_header link[] = {
      {"Link", 4, "</style.css>; rel=preload; as=style", 35}};
  char body[80];
  int rc = tern_respond_interim(r, code ? (int)code : 103, link, 1);
  int n = snprintf(body, sizeof(body), "interim: %d %s\n", rc,
                   rc ? tern_strerror(rc) : "ok");
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

static void *status_thread(void *arg) {
  deferred *d = arg;
  answer_status(d->r, d->code, d->cl);
  free(d);
  return NULL;
}

static void *early_hints_thread(void *arg) {
  deferred *d = arg;
  early_hints(d->r, d->code);
  free(d);
  return NULL;
}

static void *defer_thread(void *arg) {
  static const tern_header evil[] = {{"x-evil", 6, "a\r\nInjected: 1", 15}};
  deferred *d = arg;
  sleep_ms(d->ms);
  if (d->bad && tern_respond(d->r, 200, evil, 1, "no", 2) == TERN_EINVAL)
    tern_respond(d->r, 200, text_plain, 1, "deferred, bad header refused", 28);
  else
    tern_respond(d->r, 200, text_plain, 1, "deferred", 8);
  free(d);
  return NULL;
}

/* Streams from the thread; once the client has gone each write says
 * TERN_ECLOSED, and the end still finishes the request. */
static void *tick_thread(void *arg) {
  deferred *d = arg;
  char line[32];
  long i;
  tern_response_start(d->r, 200, text_plain, 1, -1);
  for (i = 0; i < d->n; i++) {
    int len = snprintf(line, sizeof(line), "tick %ld\n", i);
    tern_response_write(d->r, line, (size_t)len, NULL, NULL);
    sleep_ms(d->ms);
  }
  tern_response_end(d->r, NULL, 0);
  free(d);
  return NULL;
}

static void hand_off(tern_request *r, void *(*fn)(void *)) {
  deferred *d = malloc(sizeof(*d));
  pthread_t t;
  if (d == NULL) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  d->r = r;
  d->ms = query_num(r, "ms");
  d->n = query_num(r, "n");
  d->bad = query_num(r, "bad");
  d->code = query_num(r, "code");
  d->cl = query_num(r, "cl");
  if (pthread_create(&t, NULL, fn, d) != 0) {
    free(d);
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  pthread_detach(t);
}

static void defer(tern_request *r, void *user) {
  (void)user;
  hand_off(r, defer_thread);
}

static void tick(tern_request *r, void *user) {
  (void)user;
  hand_off(r, tick_thread);
}

/* /compress: text that compresses well, the same bytes every time. */
static char ctext[1 << 20];

static void compress_route(tern_request *r, void *user) {
  tern_header h[4];
  size_t n = 0, tl;
  long bytes = query_num(r, "bytes"), code = query_num(r, "code");
  const char *type = query_value(r, "type", &tl);
  (void)user;
  if (query_value(r, "bytes", &tl) == NULL)
    bytes = 4096;
  if (bytes < 0 || bytes > (long)sizeof(ctext))
    bytes = sizeof(ctext);
  if (code < 200 || code > 599)
    code = 200;
  type = query_value(r, "type", &tl);
  if (type == NULL || tl == 0) {
    h[n++] = (tern_header){"Content-Type", 12, "text/plain; charset=utf-8", 25};
  } else if (tl == 4 && memcmp(type, "json", 4) == 0) {
    h[n++] = (tern_header){"Content-Type", 12, "application/json", 16};
  } else if (tl == 3 && memcmp(type, "png", 3) == 0) {
    h[n++] = (tern_header){"Content-Type", 12, "image/png", 9};
  }
  if (query_num(r, "ce") == 1)
    h[n++] = (tern_header){"Content-Encoding", 16, "gzip", 4};
  if (query_num(r, "nt") == 1)
    h[n++] = (tern_header){"Cache-Control", 13, "no-transform", 12};
  if (query_num(r, "etag") == 1)
    h[n++] = (tern_header){"ETag", 4, "\"v1\"", 4};
  if (query_num(r, "stream") == 1) {
    tern_response_start(r, (int)code, h, n,
                        query_num(r, "cl") == -1 ? -1 : (int64_t)bytes);
    if (query_num(r, "over") == 1 &&
        tern_response_write(r, ctext, (size_t)bytes + 1, NULL, NULL) !=
            TERN_EINVAL)
      tern_response_write(r, "OVERRUN", 7, NULL, NULL);
    tern_response_write(r, ctext, (size_t)bytes, NULL, NULL);
    tern_response_end(r, NULL, 0);
    return;
  }
  tern_respond(r, (int)code, h, n, ctext, (size_t)bytes);
}

/* A buggy handler: another thread announces 5 bytes and writes 10. The
 * write is accepted when posted; the worker then finds it past the length
 * and aborts this request alone (HTTP/2 resets its stream; HTTP/1.1 must
 * close the connection). */
static void *overrun_thread(void *arg) {
  deferred *d = arg;
  tern_response_start(d->r, 200, text_plain, 1, 5);
  tern_response_write(d->r, "0123456789", 10, NULL, NULL);
  tern_response_end(d->r, NULL, 0);
  free(d);
  return NULL;
}

static void overrun(tern_request *r, void *user) {
  (void)user;
  hand_off(r, overrun_thread);
}

static void status_route(tern_request *r, void *user) {
  (void)user;
  if (query_num(r, "thread"))
    hand_off(r, status_thread);
  else
    answer_status(r, query_num(r, "code"), query_num(r, "cl"));
}

static void early_hints_route(tern_request *r, void *user) {
  (void)user;
  if (query_num(r, "thread"))
    hand_off(r, early_hints_thread);
  else
    early_hints(r, query_num(r, "code"));
}

/* Long poll: waits for an answer that never comes, until the client
 * goes away; the gone callback counts it (see /stats) and finishes the
 * request, which must report TERN_ECLOSED. now=1 answers at once after
 * subscribing (a callback after that would be a bug); thread=1 subscribes
 * from another thread, which must be refused with TERN_ESTATE. */
static _Atomic unsigned long gone_seen, gone_eclosed;

static void longpoll_gone(tern_request *r, void *user) {
  (void)user;
  gone_seen++;
  if (tern_respond(r, 200, text_plain, 1, "too late", 8) == TERN_ECLOSED)
    gone_eclosed++;
}

static void *longpoll_thread(void *arg) {
  deferred *d = arg;
  char body[48];
  int rc = tern_request_on_gone(d->r, longpoll_gone, NULL);
  int n = snprintf(body, sizeof(body), "on_gone from a thread: %d\n", rc);
  tern_respond(d->r, 200, text_plain, 1, body, (size_t)n);
  free(d);
  return NULL;
}

static void longpoll(tern_request *r, void *user) {
  (void)user;
  if (query_num(r, "thread") == 1) {
    hand_off(r, longpoll_thread);
    return;
  }
  if (tern_request_on_gone(r, longpoll_gone, NULL) != 0) {
    tern_respond(r, 500, text_plain, 1, "on_gone failed\n", 15);
    return;
  }
  if (query_num(r, "now") == 1)
    tern_respond(r, 200, text_plain, 1, "answered\n", 9);
}

static void stats(tern_request *r, void *user) {
  static const tern_header json[] = {
      {"content-type", 12, "application/json", 16}};
  tern_stats s;
  char body[512];
  int n;
  (void)user;
  tern_stats_init(&s);
  tern_server_stats(server, &s);
  n = snprintf(
      body, sizeof(body),
      "{\"requests\":%llu,\"connections\":%llu,"
      "\"active_connections\":%llu,\"bytes_in\":%llu,"
      "\"bytes_out\":%llu,\"allocations\":%llu,"
      "\"bytes_allocated\":%llu,\"frees\":%llu,\"reallocations\":%llu,"
      "\"gone\":%lu,"
      "\"gone_eclosed\":%lu,\"quic_forwarded\":%llu,\"quic_retries\":%llu,"
      "\"quic_resets\":%llu,\"quic_version_negotiations\":%llu,"
      "\"quic_refused\":%llu}\n",
      (unsigned long long)s.requests, (unsigned long long)s.connections,
      (unsigned long long)s.active_connections, (unsigned long long)s.bytes_in,
      (unsigned long long)s.bytes_out, (unsigned long long)s.allocations,
      (unsigned long long)s.bytes_allocated, (unsigned long long)s.frees,
      (unsigned long long)s.reallocations, (unsigned long)gone_seen,
      (unsigned long)gone_eclosed, (unsigned long long)s.quic_forwarded,
      (unsigned long long)s.quic_retries, (unsigned long long)s.quic_resets,
      (unsigned long long)s.quic_version_negotiations,
      (unsigned long long)s.quic_refused);
  tern_respond(r, 200, json, 1, body, (size_t)n);
}

/* ---- multipart/form-data: /multipart ------------------------------------ */

typedef struct {
  tern_multipart *m;
  char out[4096];
  size_t at;
  uint64_t bytes, hash;
  int failed; /* the status answered, once the body has ended */
} mp_state;

static void mp_line(mp_state *st, const char *fmt, const char *a, size_t al,
                    const char *b, size_t bl) {
  if (st->at < sizeof(st->out))
    st->at += (size_t)snprintf(st->out + st->at, sizeof(st->out) - st->at, fmt,
                               (int)al, a, (int)bl, b);
}

static void mp_body(tern_request *r, int event, const char *data, size_t len,
                    void *user) {
  mp_state *st = user;
  tern_multipart_event ev;
  size_t used, i;
  int rc = 0;
  while (event == TERN_BODY_DATA && st->failed == 0) {
    rc = tern_multipart_next(st->m, data, len, &used, &ev);
    data += used;
    len -= used;
    if (rc < 0) {
      st->failed = rc == TERN_ETOOBIG ? 413 : 400;
    } else if (rc == TERN_MULTIPART_PART) {
      mp_line(st, "%.*s %.*s", ev.name ? ev.name : "-",
              ev.name ? ev.name_len : 1, ev.filename ? ev.filename : "-",
              ev.filename ? ev.filename_len : 1);
      st->bytes = 0;
      st->hash = 14695981039346656037ull; /* FNV-1a 64 */
    } else if (rc == TERN_MULTIPART_DATA) {
      for (i = 0; i < ev.len; i++)
        st->hash = (st->hash ^ (unsigned char)ev.data[i]) * 1099511628211ull;
      st->bytes += ev.len;
    } else if (rc == TERN_MULTIPART_PART_END) {
      char tail[48];
      int n =
          snprintf(tail, sizeof(tail), " %llu %016llx\n",
                   (unsigned long long)st->bytes, (unsigned long long)st->hash);
      mp_line(st, "%.*s%.*s", tail, (size_t)n, "", 0);
    } else if (rc == TERN_MULTIPART_MORE || rc == TERN_MULTIPART_END) {
      break;
    }
  }
  if (event == TERN_BODY_DATA)
    return;
  if (event == TERN_BODY_END && st->failed == 0) {
    if (tern_multipart_finished(st->m)) {
      mp_line(st, "end%.*s%.*s\n", "", 0, "", 0);
      tern_respond(r, 200, text_plain, 1, st->out, st->at);
    } else {
      tern_respond(r, 400, text_plain, 1, "incomplete\n", 11);
    }
  } else if (event == TERN_BODY_END) {
    tern_respond(r, st->failed, text_plain, 1,
                 st->failed == 413 ? "too big\n" : "malformed\n",
                 st->failed == 413 ? 8 : 10);
  } else {
    tern_respond(r, 400, NULL, 0, NULL, 0);
  }
  tern_multipart_free(st->m);
  free(st);
}

static void multipart_route(tern_request *r, void *user) {
  size_t n = 0;
  const char *ct = tern_request_header(r, "content-type", 12, &n);
  mp_state *st = calloc(1, sizeof(*st));
  (void)user;
  if (st == NULL) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  if (ct == NULL || tern_multipart_new(ct, n,
                                       (size_t)query_num(r, "parts") > 0
                                           ? (size_t)query_num(r, "parts")
                                           : 0,
                                       0, &st->m) != 0) {
    free(st);
    tern_respond(r, 415, text_plain, 1, "not multipart\n", 14);
    return;
  }
  if (tern_request_read(r, mp_body, st) != 0) {
    tern_multipart_free(st->m);
    free(st);
    tern_respond(r, 500, NULL, 0, NULL, 0);
  }
}

/* ---- Server-Sent Events: /sse, /sse-publish, /sse-stats ---------------- */

static tern_sse_hub *hub;
static atomic_ulong sse_ended[5]; /* by on_close's why */

static void sse_closed(tern_sse *s, int why, void *user) {
  (void)s;
  (void)user;
  if (why >= 1 && why <= 4)
    atomic_fetch_add(&sse_ended[why], 1);
}

static void sse_route(tern_request *r, void *user) {
  tern_sse_options o;
  tern_sse *s;
  char id[24], data[64];
  size_t len = 0;
  const char *last;
  long i, n = query_num(r, "n");
  (void)user;
  tern_sse_options_init(&o);
  if (query_num(r, "heartbeat") >= 0)
    o.heartbeat_ms = (uint32_t)query_num(r, "heartbeat");
  if (query_num(r, "hw") > 0)
    o.high_water = (uint32_t)query_num(r, "hw");
  if (query_num(r, "retry") > 0)
    o.retry_ms = (uint32_t)query_num(r, "retry");
  o.hub = hub;
  o.on_close = sse_closed;
  if (tern_sse_start(r, &o, &s) != 0)
    return;
  last = tern_sse_last_event_id(s, &len);
  if (tern_sse_send(s, NULL, "hello", last != NULL ? last : "none",
                    last != NULL ? len : 4) != 0)
    return;
  for (i = 1; i <= n; i++) {
    snprintf(id, sizeof(id), "%ld", i);
    snprintf(data, sizeof(data), "event %ld", i);
    if (tern_sse_send(s, id, NULL, data, strlen(data)) != 0)
      return;
  }
  if (query_num(r, "close") == 1)
    tern_sse_close(s);
}

static void sse_publish(tern_request *r, void *user) {
  char id[64], event[64], body[32];
  size_t n, len = 0, idl = 0, evl = 0;
  const char *v;
  char *data = NULL;
  long size = query_num(r, "size");
  int rc, blen;
  (void)user;
  id[0] = event[0] = '\0';
  if ((v = query_value(r, "id", &len)) != NULL &&
      tern_form_decode(v, len, id, sizeof(id), &idl) != 0)
    idl = 0;
  if ((v = query_value(r, "event", &len)) != NULL &&
      tern_form_decode(v, len, event, sizeof(event), &evl) != 0)
    evl = 0;
  if (size > 0 && size <= (16L << 20) && (data = malloc((size_t)size))) {
    memset(data, 'x', (size_t)size);
    n = (size_t)size;
  } else {
    v = query_value(r, "data", &len);
    n = 0;
    data = malloc(len + 1);
    if (data != NULL && v != NULL &&
        tern_form_decode(v, len, data, len + 1, &n))
      n = 0;
  }
  rc = data == NULL ? TERN_ENOMEM
                    : tern_sse_publish(hub, idl > 0 ? id : NULL,
                                       evl > 0 ? event : NULL, data, n);
  free(data);
  blen =
      snprintf(body, sizeof(body), "%d %zu", rc, tern_sse_hub_subscribers(hub));
  tern_respond(r, 200, text_plain, 1, body, (size_t)blen);
}

static void sse_stats(tern_request *r, void *user) {
  char body[160];
  int n;
  (void)user;
  n = snprintf(body, sizeof(body),
               "{\"subscribers\":%zu,\"gone\":%lu,\"slow\":%lu,"
               "\"closed\":%lu,\"stopping\":%lu}",
               tern_sse_hub_subscribers(hub), atomic_load(&sse_ended[1]),
               atomic_load(&sse_ended[2]), atomic_load(&sse_ended[3]),
               atomic_load(&sse_ended[4]));
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

/* ---- Referenced pieces: /write-ref ------------------------------------- */

static atomic_ulong ref_released, ref_mismatched;

/* `user` is the block's own address, as written: the pointer handed back
 * must be it. */
static void piece_released(void *data, void *user) {
  if (data != user)
    atomic_fetch_add(&ref_mismatched, 1);
  atomic_fetch_add(&ref_released, 1);
  free(data);
}

static void write_pieces(tern_request *r, long n) {
  long i;
  tern_response_start(r, 200, text_plain, 1, n * 1000);
  for (i = 0; i < n; i++) {
    char *b = malloc(1000);
    if (b == NULL)
      break;
    memset(b, 'a' + (int)(i % 26), 1000);
    if (tern_response_write_ref(r, b, 1000, piece_released, b) != 0)
      free(b); /* not taken: still ours */
  }
  tern_response_end(r, NULL, 0);
}

static void *write_ref_thread(void *arg) {
  tern_request *r = arg;
  write_pieces(r, query_num(r, "n"));
  return NULL;
}

static void write_ref_route(tern_request *r, void *user) {
  pthread_t t;
  (void)user;
  if (query_num(r, "thread") == 1 &&
      pthread_create(&t, NULL, write_ref_thread, r) == 0) {
    pthread_detach(t);
    return;
  }
  write_pieces(r, query_num(r, "n"));
}

static void write_ref_stats(tern_request *r, void *user) {
  char body[48];
  int n = snprintf(body, sizeof(body), "%lu %lu", atomic_load(&ref_released),
                   atomic_load(&ref_mismatched));
  (void)user;
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

/* ---- Holding a request: /pinned --------------------------------------- */

/* Two threads hold the request through tern_request_ref: a writer and
 * one that ends the response while the writer is still at work, so that
 * the writer's later calls come after the finish (and, once the worker
 * let go of the request, after it was retired). Every call's return code
 * is counted; the per-request pointer must still answer throughout. */
static atomic_long pin_done, pin_ok, pin_state, pin_closed, pin_other, pin_lost;
static int pin_marker;

typedef struct {
  tern_request *r;
  long n, ms, end;
} pin_job;

static void pin_count(int rc) {
  atomic_fetch_add(rc == 0              ? &pin_ok
                   : rc == TERN_ESTATE  ? &pin_state
                   : rc == TERN_ECLOSED ? &pin_closed
                                        : &pin_other,
                   1);
}

static void pin_release(pin_job *j) {
  if (tern_request_data(j->r) != &pin_marker)
    atomic_fetch_add(&pin_lost, 1);
  tern_request_unref(j->r);
  free(j);
  atomic_fetch_add(&pin_done, 1);
}

static void *pin_writer(void *arg) {
  pin_job *j = arg;
  char line[32];
  long i;
  for (i = 0; i < j->n; i++) {
    int len = snprintf(line, sizeof(line), "piece %ld\n", i);
    pin_count(tern_response_write(j->r, line, (size_t)len, NULL, NULL));
    sleep_ms(j->ms);
  }
  pin_release(j);
  return NULL;
}

static void *pin_ender(void *arg) {
  pin_job *j = arg;
  sleep_ms(j->end);
  pin_count(tern_response_end(j->r, NULL, 0));
  pin_count(tern_response_write(j->r, "late", 4, NULL, NULL));
  pin_release(j);
  return NULL;
}

static void pinned_route(tern_request *r, void *user) {
  pin_job *j[2];
  void *(*fn[2])(void *) = {pin_writer, pin_ender};
  int i;
  (void)user;
  if (query_num(r, "extra") == 1)
    tern_request_unref(r); /* none taken: refused, logged */
  tern_request_set_data(r, &pin_marker);
  if (tern_response_start(r, 200, text_plain, 1, -1) != 0) {
    tern_response_end(r, NULL, 0);
    return;
  }
  for (i = 0; i < 2; i++) {
    pthread_t t;
    j[i] = malloc(sizeof(*j[i]));
    if (j[i] == NULL)
      abort();
    *j[i] = (pin_job){r, query_num(r, "n"), query_num(r, "ms"),
                      query_num(r, "end")};
    tern_request_ref(r);
    if (pthread_create(&t, NULL, fn[i], j[i]) != 0)
      abort();
    pthread_detach(t);
  }
}

static void pinned_stats(tern_request *r, void *user) {
  char body[128];
  int n = snprintf(body, sizeof(body), "%ld %ld %ld %ld %ld %ld",
                   atomic_load(&pin_done), atomic_load(&pin_ok),
                   atomic_load(&pin_state), atomic_load(&pin_closed),
                   atomic_load(&pin_other), atomic_load(&pin_lost));
  (void)user;
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

/* ---- Client certificates: /client-cert ------------------------------- */

static void client_cert(tern_request *r, void *user) {
  char body[600];
  size_t dn_len = 0, der_len = 0;
  const char *dn = tern_request_tls_client_subject(r, &dn_len);
  int n;
  (void)user;
  (void)tern_request_tls_client_cert(r, &der_len);
  n = dn != NULL
          ? snprintf(body, sizeof(body), "%.*s %zu", (int)dn_len, dn, der_len)
          : snprintf(body, sizeof(body), "none");
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

/* ---- Virtual hosts: --vhosts -------------------------------------------- */

static void site(tern_request *r, void *user) {
  tern_respond(r, 200, text_plain, 1, user, strlen(user));
}

static int add_vhosts(void) {
  static const struct {
    const char *host, *method, *path, *text;
  } v[] = {{"a.example", "GET", "/site", "site a"},
           {"*.b.example", "GET", "/site", "site b"},
           {"x.b.example", "GET", "/site", "site x"},
           {"A.Example", "POST", "/only-post", "posted"}};
  tern_route_options o;
  size_t i;
  int rc;
  for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    tern_route_options_init(&o);
    o.host = v[i].host;
    if ((rc = tern_route_with(server, v[i].method, v[i].path, site,
                              (void *)v[i].text, &o)) != 0)
      return rc;
  }
  return 0;
}

/* ---- Fields on every answer: --response-hook --------------------------- */

static void response_hook(const tern_request *r, int status,
                          tern_response_head *head, void *user) {
  char code[16];
  size_t plen = 0, olen = 0;
  const char *path = r != NULL ? tern_request_path(r, &plen) : NULL;
  const char *origin =
      r != NULL ? tern_request_header(r, "origin", 6, &olen) : NULL;
  int n, rc = 0;
  (void)user;
  n = snprintf(code, sizeof(code), "%d", status);
  tern_response_head_add(head, "x-hooked", 8, code, (size_t)n);
  if (tern_response_head_get(head, "x-content-type-options", 22, NULL) == NULL)
    tern_response_head_add(head, "x-content-type-options", 22, "nosniff", 7);
  if (origin != NULL) {
    tern_response_head_add(head, "access-control-allow-origin", 27, origin,
                           olen);
    tern_response_head_add(head, "vary", 4, "origin", 6);
  }
  if (path != NULL && plen > 6 && memcmp(path, "/hook-", 6) == 0) {
    static char big[5000];
    if (plen == 9 && memcmp(path + 6, "big", 3) == 0) {
      memset(big, 'b', sizeof(big));
      rc = tern_response_head_add(head, "x-big", 5, big, sizeof(big));
    } else if (plen == 9 && memcmp(path + 6, "bad", 3) == 0) {
      rc = tern_response_head_add(head, "x-bad", 5, "a\r\nb", 4);
    } else if (plen == 13 && memcmp(path + 6, "respond", 7) == 0) {
      rc = tern_respond((tern_request *)r, 500, NULL, 0, "no", 2);
    }
    if (rc != 0) {
      n = snprintf(code, sizeof(code), "%d", rc);
      tern_response_head_add(head, "x-hook-refused", 14, code, (size_t)n);
    }
  }
}

/* ---- tern's own answers, the application's way ------------------------ */

/* --error-hook: every answer tern makes itself (404, 405, 413, 414, 431,
 * 400, ...) carries a JSON body of the server's instead of tern's text. The
 * Connection field it tries to set is ignored, as for any response. */
static void error_hook(const tern_error_info *e, void *user) {
  static const tern_header fields[] = {
      {"content-type", 12, "application/json", 16},
      {"x-error-hook", 12, "1", 1},
      {"connection", 10, "keep-alive", 10}};
  static const tern_header evil = {"x-evil", 6, "a\r\nInjected: 1", 15};
  char body[256];
  size_t mlen = 0, plen = 0;
  const char *m = e->request ? tern_request_method(e->request, &mlen) : NULL;
  const char *p = e->request ? tern_request_path(e->request, &plen) : NULL;
  int n, bad;
  (void)user;
  /* Paths under /plain are left to tern: its text answer must follow. */
  if (p != NULL && plen >= 6 && memcmp(p, "/plain", 6) == 0)
    return;
  /* A field tern_respond would refuse is refused here too (TERN_EINVAL),
   * and the hook may answer after that. */
  bad = tern_error_respond(e->reply, &evil, 1, "x", 1);
  if (m == NULL)
    mlen = 4; /* "null" */
  else if (mlen > 32)
    mlen = 32;
  n = snprintf(body, sizeof(body),
               "{\"error\":%d,\"reason\":\"%s\",\"method\":%s%.*s%s,"
               "\"bad\":%d}\n",
               e->status, e->reason, m ? "\"" : "", (int)mlen, m ? m : "null",
               m ? "\"" : "", bad);
  if (tern_error_respond(e->reply, fields, 3, body, (size_t)n) == 0 &&
      tern_error_respond(e->reply, fields, 3, body, (size_t)n) != TERN_ESTATE)
    fprintf(stderr, "reference: a second tern_error_respond was not refused\n");
}

/* --default-handler: requests no route answers come here; the handler
 * tells 404 from 405 and answers the latter with Allow itself. */
static void default_handler(tern_request *r, void *user) {
  static const tern_header json = {"content-type", 12, "application/json", 16};
  tern_header h[2];
  size_t alen = 0;
  const char *allow = tern_request_allow(r, &alen);
  int status = tern_request_route_status(r), n;
  char body[160];
  (void)user;
  h[0] = json;
  if (status == 405) {
    h[1].name = "allow";
    h[1].name_len = 5;
    h[1].value = allow;
    h[1].value_len = alen;
  }
  n = snprintf(body, sizeof(body), "{\"default\":%d,\"allow\":\"%.*s\"}\n",
               status, (int)alen, allow ? allow : "");
  tern_respond(r, status == 405 ? 405 : 404, h, status == 405 ? 2 : 1, body,
               (size_t)n);
}

static void worker_id(tern_request *r, void *user) {
  static _Thread_local char tag; /* its address names the thread */
  char body[48];
  int n =
      snprintf(body, sizeof(body), "%p %ld\n", (void *)&tag, (long)getpid());
  (void)user;
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

/* Response calls in the wrong order from another thread: each must be
 * refused with TERN_ESTATE at once. The handler waits (on the worker)
 * until the thread is done, so that no posted call can have finished the
 * request before the calls after it are made. */
typedef struct {
  tern_request *r;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;
} misuse_state;

static char misuse_after[128];

static void *misuse_thread(void *arg) {
  misuse_state *m = arg;
  tern_request *r = m->r;
  char body[128];
  int e1, w1, s1, s2, r2, n;
  e1 = tern_response_end(r, NULL, 0);
  w1 = tern_response_write(r, "x", 1, NULL, NULL);
  s1 = tern_response_start(r, 200, text_plain, 1, -1);
  s2 = tern_response_start(r, 200, text_plain, 1, -1);
  r2 = tern_respond(r, 200, text_plain, 1, "twice", 5);
  n = snprintf(body, sizeof(body),
               "end-before-start %d write-before-start %d start %d "
               "start-again %d respond-after-start %d\n",
               e1, w1, s1, s2, r2);
  tern_response_write(r, body, (size_t)n, NULL, NULL);
  tern_response_end(r, NULL, 0);
  snprintf(misuse_after, sizeof(misuse_after),
           "end-again %d write-after-end %d respond-after-end %d\n",
           tern_response_end(r, NULL, 0),
           tern_response_write(r, "x", 1, NULL, NULL),
           tern_respond(r, 200, text_plain, 1, "late", 4));
  pthread_mutex_lock(&m->lock);
  m->done = 1;
  pthread_cond_signal(&m->cond);
  pthread_mutex_unlock(&m->lock);
  return NULL;
}

static void misuse(tern_request *r, void *user) {
  misuse_state m;
  pthread_t t;
  (void)user;
  if (query_num(r, "report")) {
    tern_respond(r, 200, text_plain, 1, misuse_after, strlen(misuse_after));
    return;
  }
  m.r = r;
  m.done = 0;
  pthread_mutex_init(&m.lock, NULL);
  pthread_cond_init(&m.cond, NULL);
  if (pthread_create(&t, NULL, misuse_thread, &m) != 0) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  pthread_mutex_lock(&m.lock);
  while (!m.done)
    pthread_cond_wait(&m.cond, &m.lock);
  pthread_mutex_unlock(&m.lock);
  pthread_join(t, NULL);
  pthread_mutex_destroy(&m.lock);
  pthread_cond_destroy(&m.cond);
}

/* Keeps the request and never answers, as a buggy handler would. The
 * pointer is kept (the last one) so that a sanitizer build sees the block
 * of a request the stop deadline cut as still reachable: a program that
 * drops a request unanswered leaks that block, since only its finishing
 * call may free it. */
static tern_request *never_held;

static void never(tern_request *r, void *user) {
  (void)user;
  never_held = r;
}

/* ---- WebSocket echo ---------------------------------------------------- */

enum { WS_STREAM = 1, WS_CMDS = 2 };

typedef struct {
  tern_ws *ws;
  long pause_ms; /* > 0: resume after this long; else send the text */
  size_t len;
  char text[];
} ws_job;

static void *ws_thread(void *arg) {
  ws_job *j = arg;
  if (j->pause_ms > 0) {
    sleep_ms(j->pause_ms);
    tern_ws_resume(j->ws);
  } else {
    tern_ws_send(j->ws, TERN_WS_TEXT, j->text, j->len);
  }
  tern_ws_unref(j->ws);
  free(j);
  return NULL;
}

static int ws_command(tern_ws *ws, const char *data, size_t len) {
  pthread_t t;
  ws_job *j;
  size_t i;
  if (len == 5 && memcmp(data, "close", 5) == 0) {
    tern_ws_close(ws, 4000, "bye", 3);
    return 1;
  }
  if (len == 4 && memcmp(data, "ping", 4) == 0) {
    tern_ws_ping(ws, "hi", 2);
    return 1;
  }
  if (len > 6 && memcmp(data, "bcast:", 6) == 0) {
    /* A broadcast to a list whose NULL entries (the first one too) are
     * skipped: the rest of the text comes back once. */
    tern_ws *const list[3] = {NULL, ws, NULL};
    tern_ws_broadcast(list, 3, TERN_WS_TEXT, data + 6, len - 6);
    return 1;
  }
  if (len > 6 && memcmp(data, "pause:", 6) == 0) {
    /* Stop reading; another thread resumes after the given ms. */
    if ((j = malloc(sizeof(*j))) == NULL)
      return 1;
    j->pause_ms = 0;
    for (i = 6; i < len && data[i] >= '0' && data[i] <= '9' && i < 12; i++)
      j->pause_ms = j->pause_ms * 10 + (data[i] - '0');
    j->len = 0;
    tern_ws_pause(ws);
  } else if (len > 7 && memcmp(data, "thread:", 7) == 0) {
    if ((j = malloc(sizeof(*j) + len - 7)) == NULL)
      return 1;
    j->pause_ms = 0;
    j->len = len - 7;
    memcpy(j->text, data + 7, len - 7);
  } else {
    return 0;
  }
  j->ws = ws;
  tern_ws_ref(ws); /* the thread may outlive the socket */
  if (pthread_create(&t, NULL, ws_thread, j) != 0) {
    tern_ws_unref(ws);
    free(j);
    return 1;
  }
  pthread_detach(t);
  return 1;
}

static void ws_message(tern_ws *ws, int type, const char *data, size_t len,
                       int fin, void *user) {
  uintptr_t f = (uintptr_t)tern_ws_data(ws);
  (void)user;
  if ((f & WS_CMDS) && type == TERN_WS_TEXT && ws_command(ws, data, len))
    return;
  if (f & WS_STREAM)
    tern_ws_send_fragment(ws, type, data, len, fin);
  else
    tern_ws_send(ws, type, data, len);
}

static void ws_route(tern_request *r, void *user) {
  tern_ws_options o;
  tern_ws *ws;
  uintptr_t f = 0;
  size_t n;
  const char *v;
  (void)user;
  tern_ws_options_init(&o);
  o.on_message = ws_message;
  if (query_num(r, "stream") == 1) {
    o.stream_messages = 1;
    f |= WS_STREAM;
  }
  if (query_num(r, "cmds") == 1)
    f |= WS_CMDS;
  if (query_num(r, "max") > 0)
    o.max_message_size = (uint64_t)query_num(r, "max");
  if (query_num(r, "hw") > 0)
    o.high_water = (size_t)query_num(r, "hw");
  if (query_num(r, "fail") == 1)
    o.on_full = TERN_WS_FAIL_SEND;
  if ((v = query_value(r, "deflate", &n)) != NULL && n == 1 && v[0] == '0')
    o.deflate = 0;
  if (tern_ws_protocol_offered(r, "echo", 4)) {
    o.subprotocol = "echo";
    o.subprotocol_len = 4;
  }
  if (tern_ws_accept(r, &o, NULL, &ws) == 0)
    tern_ws_set_data(ws, (void *)f);
}

/* The routed tier of the benchmarks (app-routed): 50 routes with a path
 * parameter, the handler reading it and a header. */
static const char *const resources[25] = {
    "users",    "orders",   "items",   "carts",    "payments",
    "invoices", "products", "reviews", "sessions", "tokens",
    "teams",    "projects", "tasks",   "comments", "files",
    "folders",  "tags",     "events",  "alerts",   "reports",
    "metrics",  "logs",     "jobs",    "queues",   "webhooks"};

static void app(tern_request *r, void *user) {
  const char *name = user;
  size_t id_len, rid_len, plen;
  const char *id = tern_request_param(r, "id", 2, &id_len);
  const char *rid = tern_request_header(r, "x-request-id", 12, &rid_len);
  const char *path = tern_request_path(r, &plen);
  int detail = plen > 7 && memcmp(path + plen - 7, "/detail", 7) == 0;
  char body[256];
  int n =
      snprintf(body, sizeof(body), "%s %.*s %s%.*s", name, (int)id_len, id,
               detail ? "detail " : "", rid ? (int)rid_len : 0, rid ? rid : "");
  if (n < 0 || n >= (int)sizeof(body))
    n = 0;
  tern_respond(r, 200, text_plain, 1, body, (size_t)n);
}

static int add_app_routes(void) {
  char pattern[64];
  size_t i;
  for (i = 0; i < 25; i++) {
    snprintf(pattern, sizeof(pattern), "/api/v1/%s/:id", resources[i]);
    if (tern_route(server, "GET", pattern, app, (void *)resources[i]) != 0)
      return -1;
    snprintf(pattern, sizeof(pattern), "/api/v1/%s/:id/detail", resources[i]);
    if (tern_route(server, "GET", pattern, app, (void *)resources[i]) != 0)
      return -1;
  }
  return 0;
}

/* reference_db.c: GET /db/:key and /db-blocking/:key. */
int reference_db_routes(tern_server *srv, const char *redis_path);

static int option(int argc, char **argv, int *i, const char *name,
                  unsigned long long *out) {
  if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc)
    return 0;
  *out = strtoull(argv[++*i], NULL, 10);
  return 1;
}

/* A --quic-secret style option: 32 to 128 hex digits into `out`. */
static int hex_secret(const char *opt, const char *hx, unsigned char *out,
                      size_t *len) {
  size_t k, n = strlen(hx) / 2;
  if (n < 16 || n > 64 || strlen(hx) % 2 != 0) {
    fprintf(stderr, "reference: %s wants 32 to 128 hex digits\n", opt);
    return -1;
  }
  for (k = 0; k < n; k++) {
    unsigned v;
    if (sscanf(hx + 2 * k, "%2x", &v) != 1) {
      fprintf(stderr, "reference: %s: not hex\n", opt);
      return -1;
    }
    out[k] = (unsigned char)v;
  }
  *len = n;
  return 0;
}

/* One listener through tern_listen_with: the PROXY protocol settings of
 * `base` (NULL: none), where (host and port, a Unix path, or a socket
 * handed over), TLS, and QUIC when `quic` is not NULL. */
static int listen_one(const tern_listen_options *base, const char *host,
                      int port, const char *path, int fd, tern_tls *t,
                      const tern_quic_options *quic, int *bound) {
  tern_listen_options o;
  tern_listen_options_init(&o);
  if (base != NULL) {
    o.proxy_protocol = base->proxy_protocol;
    o.proxy_trusted = base->proxy_trusted;
  }
  o.host = host;
  o.port = port;
  o.path = path;
  o.fd = fd;
  o.tls = t;
  o.quic = quic != NULL;
  o.quic_options = quic;
  return tern_listen_with(server, &o, bound);
}

int main(int argc, char **argv) {
  tern_settings s;
  tern_route_options stream_opts, blocking_opts, compress_opts;
  tern_compress_options compress;
  int want_compress = 0;
  tern_access_log_options log_opts;
  const char *host = "127.0.0.1", *redis_path = NULL;
  unsigned long long v, port = 8080, tls_port = 0, quic_port = 0, h2c_port = 0,
                        http1_port = 0, processes = 1;
  tern_quic_options quic_opts;
  tern_listen_options listen_opts;
  const char *unix_path = NULL;
  static unsigned char ticket_key[TERN_TLS_TICKET_KEY_SIZE];
  static unsigned char prev_ticket_key[TERN_TLS_TICKET_KEY_SIZE];
  int have_ticket_key = 0, have_prev_ticket_key = 0;
  int want_listen_fds = 0;
  int quic_fds[16], nquic_fds = 0;
  int i, bound, rc, want_error_hook = 0, want_default = 0, want_durations = 0;
  int want_response_hook = 0, want_vhosts = 0;
  int tls_engine = TERN_TLS_ENGINE_AUTO, tls_min = TERN_TLS_1_2;
  const char *client_ca = NULL;
  int client_mode = TERN_TLS_CLIENT_NONE;
  const char *static_dir = NULL, *static_fallback = NULL;
  tern_header static_fields[16];
  size_t nstatic_fields = 0;
  tern_static *files = NULL;

  memset(big, 'x', sizeof(big));
  tern_settings_init(&s);
  tern_quic_options_init(&quic_opts);
  tern_access_log_options_init(&log_opts);
  tern_listen_options_init(&listen_opts);
  for (i = 1; i < argc; i++) {
    if (option(argc, argv, &i, "--port", &port))
      continue;
    if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) {
      host = argv[++i];
      if (strcmp(host, "*") == 0)
        host = NULL; /* every IPv6 and IPv4 address */
      continue;
    }
    if (strcmp(argv[i], "--redis") == 0 && i + 1 < argc) {
      redis_path = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--cert") == 0 && i + 1 < argc && ncerts < 4) {
      cert_files[ncerts++] = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--key") == 0 && i + 1 < argc && nkeys < 4) {
      key_files[nkeys++] = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--tls-engine") == 0 && i + 1 < argc) {
      const char *e = argv[++i];
      tls_engine = strcmp(e, "gnutls") == 0    ? TERN_TLS_ENGINE_GNUTLS
                   : strcmp(e, "mbedtls") == 0 ? TERN_TLS_ENGINE_MBEDTLS
                                               : TERN_TLS_ENGINE_AUTO;
      continue;
    }
    if (strcmp(argv[i], "--client-ca") == 0 && i + 1 < argc) {
      client_ca = argv[++i];
      if (client_mode == TERN_TLS_CLIENT_NONE)
        client_mode = TERN_TLS_CLIENT_OPTIONAL;
      continue;
    }
    if (strcmp(argv[i], "--client-cert-required") == 0) {
      client_mode = TERN_TLS_CLIENT_REQUIRED;
      continue;
    }
    if (strcmp(argv[i], "--tls-min") == 0 && i + 1 < argc) {
      tls_min = strcmp(argv[++i], "1.3") == 0 ? TERN_TLS_1_3 : TERN_TLS_1_2;
      continue;
    }
    if (option(argc, argv, &i, "--tls-port", &tls_port)) {
      tls_port = tls_port ? tls_port : 65536; /* 0 means any port */
      continue;
    }
    if (option(argc, argv, &i, "--quic-port", &quic_port)) {
      quic_port = quic_port ? quic_port : 65536; /* 0 means any port */
      continue;
    }
    if (option(argc, argv, &i, "--processes", &processes))
      continue;
    if (option(argc, argv, &i, "--h2c-port", &h2c_port)) {
      h2c_port = h2c_port ? h2c_port : 65536; /* 0 means any port */
      continue;
    }
    if (option(argc, argv, &i, "--http1-port", &http1_port)) {
      http1_port = http1_port ? http1_port : 65536; /* 0 means any port */
      continue;
    }
    if (strcmp(argv[i], "--quic-retry") == 0) {
      quic_opts.retry = TERN_QUIC_RETRY_ALWAYS;
      continue;
    }
    if (strcmp(argv[i], "--quic-secret") == 0 && i + 1 < argc) {
      /* Hex; the same secret across restarts keeps tokens valid and lets
       * the new process reset the old one's connections. */
      static unsigned char secret[64];
      if (hex_secret(argv[i], argv[i + 1], secret, &quic_opts.secret_len) != 0)
        return 2;
      quic_opts.secret = secret;
      i++;
      continue;
    }
    if (strcmp(argv[i], "--quic-previous-secret") == 0 && i + 1 < argc) {
      /* The secret being rotated out: its tokens and CIDs still hold. */
      static unsigned char prev[64];
      if (hex_secret(argv[i], argv[i + 1], prev,
                     &quic_opts.previous_secret_len) != 0)
        return 2;
      quic_opts.previous_secret = prev;
      i++;
      continue;
    }
    if (option(argc, argv, &i, "--quic-fd", &v)) {
      /* A UDP socket from a supervisor that is not systemd. */
      if (nquic_fds == sizeof(quic_fds) / sizeof(quic_fds[0])) {
        fprintf(stderr, "reference: too many UDP sockets\n");
        return 2;
      }
      quic_fds[nquic_fds++] = (int)v;
      continue;
    }
    if ((strcmp(argv[i], "--ticket-key") == 0 ||
         strcmp(argv[i], "--previous-ticket-key") == 0) &&
        i + 1 < argc) {
      /* Hex, 128 digits: the same key on every instance of a fleet lets a
       * client resume its TLS session on any of them; the previous one is
       * the key being rotated out. */
      int prev = argv[i][2] == 'p';
      const char *hx = argv[++i];
      unsigned char *out = prev ? prev_ticket_key : ticket_key;
      size_t k;
      if (strlen(hx) != 2 * TERN_TLS_TICKET_KEY_SIZE) {
        fprintf(stderr, "reference: %s wants %d hex digits\n", argv[i - 1],
                2 * TERN_TLS_TICKET_KEY_SIZE);
        return 2;
      }
      for (k = 0; k < TERN_TLS_TICKET_KEY_SIZE; k++) {
        unsigned v;
        if (sscanf(hx + 2 * k, "%2x", &v) != 1) {
          fprintf(stderr, "reference: %s: not hex\n", argv[i - 1]);
          return 2;
        }
        out[k] = (unsigned char)v;
      }
      if (prev)
        have_prev_ticket_key = 1;
      else
        have_ticket_key = 1;
      continue;
    }
    if (strcmp(argv[i], "--quic-early-data") == 0) {
      quic_opts.early_data = 1;
      continue;
    }
    if (strcmp(argv[i], "--compress") == 0) {
      want_compress = 1;
      continue;
    }
    if (strcmp(argv[i], "--static") == 0 && i + 1 < argc) {
      static_dir = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--static-fallback") == 0 && i + 1 < argc) {
      static_fallback = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--static-header") == 0 && i + 1 < argc &&
        nstatic_fields < 16) {
      const char *f = argv[++i], *colon = strchr(f, ':');
      tern_header *h = &static_fields[nstatic_fields++];
      h->name = f;
      h->name_len = colon != NULL ? (size_t)(colon - f) : strlen(f);
      h->value = colon != NULL ? colon + 1 + (colon[1] == ' ') : "";
      h->value_len = strlen(h->value);
      continue;
    }
    if (strcmp(argv[i], "--error-hook") == 0) {
      want_error_hook = 1;
      continue;
    }
    if (strcmp(argv[i], "--response-hook") == 0) {
      want_response_hook = 1;
      continue;
    }
    if (strcmp(argv[i], "--vhosts") == 0) {
      want_vhosts = 1;
      continue;
    }
    if (strcmp(argv[i], "--listen-fds") == 0) {
      want_listen_fds = 1;
      continue;
    }
    if (strcmp(argv[i], "--unix") == 0 && i + 1 < argc) {
      unix_path = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--proxy-trusted") == 0 && i + 1 < argc) {
      listen_opts.proxy_trusted = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--proxy-protocol") == 0) {
      listen_opts.proxy_protocol = 1; /* trusting loopback, the default */
      continue;
    }
    if (strcmp(argv[i], "--default-handler") == 0) {
      want_default = 1;
      continue;
    }
    if (strcmp(argv[i], "--metrics") == 0) {
      want_durations = 1;
      continue;
    }
    if (strcmp(argv[i], "--access-log") == 0 && i + 1 < argc) {
      log_opts.path = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--access-log-format") == 0 && i + 1 < argc) {
      log_opts.format = strcmp(argv[++i], "combined") == 0
                            ? TERN_ACCESS_LOG_COMBINED
                            : TERN_ACCESS_LOG_JSON;
      continue;
    }
    if (option(argc, argv, &i, "--access-log-buffers", &v)) {
      log_opts.queue_buffers = (uint32_t)v;
      continue;
    }
    if (option(argc, argv, &i, "--access-log-buffer-size", &v)) {
      log_opts.buffer_size = (uint32_t)v;
      continue;
    }
    if (strcmp(argv[i], "--balance") == 0 && i + 1 < argc) {
      const char *b = argv[++i];
      s.balance = strcmp(b, "kernel") == 0      ? TERN_BALANCE_KERNEL
                  : strcmp(b, "least") == 0     ? TERN_BALANCE_LEAST_CONNECTIONS
                  : strcmp(b, "reuseport") == 0 ? TERN_BALANCE_REUSEPORT
                                                : -1; /* tern refuses it */
      continue;
    }
    if (option(argc, argv, &i, "--workers", &v))
      s.workers = (unsigned)v;
    else if (option(argc, argv, &i, "--max-head", &v))
      s.max_head_size = (uint32_t)v;
    else if (option(argc, argv, &i, "--max-headers", &v))
      s.max_header_count = (uint32_t)v;
    else if (option(argc, argv, &i, "--max-uri", &v))
      s.max_uri_length = (uint32_t)v;
    else if (option(argc, argv, &i, "--max-body", &v))
      s.max_body_size = v;
    else if (option(argc, argv, &i, "--head-timeout-ms", &v))
      s.head_timeout_ms = (uint32_t)v;
    else if (option(argc, argv, &i, "--idle-timeout-ms", &v))
      s.idle_timeout_ms = (uint32_t)v;
    else if (option(argc, argv, &i, "--body-timeout-ms", &v))
      s.body_timeout_ms = (uint32_t)v;
    else if (option(argc, argv, &i, "--max-conns", &v))
      s.max_connections = (uint32_t)v;
    /* Past 32 bits: UINT32_MAX, which tern refuses, rather than wrapped
     * into a value it might take. */
    else if (option(argc, argv, &i, "--max-stream-window", &v))
      s.max_stream_window = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else if (option(argc, argv, &i, "--max-conn-window", &v))
      s.max_conn_window = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else if (option(argc, argv, &i, "--max-compressors", &v))
      s.max_compressors = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else if (option(argc, argv, &i, "--max-compressors-per-conn", &v))
      s.max_compressors_per_conn = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else if (option(argc, argv, &i, "--max-conns-per-ip", &v))
      s.max_connections_per_ip = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else if (option(argc, argv, &i, "--requests-per-ip", &v))
      s.requests_per_ip_per_s = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else if (option(argc, argv, &i, "--request-burst", &v))
      s.request_burst = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else if (option(argc, argv, &i, "--ip-table-size", &v))
      s.ip_table_size = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    else {
      fprintf(stderr, "reference: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if ((rc = tern_server_new(&s, &server)) != 0) {
    fprintf(stderr, "reference: %s\n", tern_strerror(rc));
    return 1;
  }
  if (log_opts.path != NULL &&
      (rc = tern_server_access_log(server, &log_opts)) != 0) {
    fprintf(stderr, "reference: access log: %s\n", tern_strerror(rc));
    return 1;
  }
  tern_route(server, "GET", "/metrics", tern_metrics_handler, NULL);
  if (want_durations)
    tern_server_time_requests(server, 1);
  tern_route_options_init(&stream_opts);
  stream_opts.flags = TERN_ROUTE_STREAM_BODY;
  tern_route_options_init(&blocking_opts);
  blocking_opts.flags = TERN_ROUTE_BLOCKING;
  tern_route(server, "GET", "/", hello, NULL);
  if (static_dir != NULL) {
    tern_static_options so;
    tern_static_options_init(&so);
    so.root = static_dir;
    so.cache_control = "no-cache";
    so.flags = TERN_STATIC_PRECOMPRESSED;
    so.fallback = static_fallback;
    so.headers = static_fields;
    so.nheaders = nstatic_fields;
    if ((rc = tern_static_new(server, &so, &files)) != 0 ||
        (rc = tern_static_mount(server, "/static/", files)) != 0) {
      fprintf(stderr, "--static %s: %s\n", static_dir, tern_strerror(rc));
      return 1;
    }
  }
  if (want_compress) {
    size_t off = 0;
    long line = 0;
    while (off < sizeof(ctext)) {
      char l[80];
      int len = snprintf(l, sizeof(l),
                         "line %06ld: the quick brown fox jumps over the "
                         "lazy dog\n",
                         line++);
      size_t take =
          (size_t)len < sizeof(ctext) - off ? (size_t)len : sizeof(ctext) - off;
      memcpy(ctext + off, l, take);
      off += take;
    }
    tern_compress_options_init(&compress);
    tern_route_options_init(&compress_opts);
    compress_opts.compress = &compress;
    tern_route_with(server, "GET", "/compress", compress_route, NULL,
                    &compress_opts);
    tern_route_with(server, "GET", "/ctick", tick, NULL, &compress_opts);
    if (files != NULL)
      tern_route_with(server, "GET", "/cstatic/*", tern_static_handler, files,
                      &compress_opts);
  }
  if (tern_sse_hub_new(server, &hub) != 0)
    return 1;
  tern_route_with(server, "POST", "/multipart", multipart_route, NULL,
                  &stream_opts);
  tern_route(server, "GET", "/write-ref", write_ref_route, NULL);
  tern_route(server, "GET", "/write-ref-stats", write_ref_stats, NULL);
  tern_route(server, "GET", "/pinned", pinned_route, NULL);
  tern_route(server, "GET", "/pinned-stats", pinned_stats, NULL);
  tern_route(server, "GET", "/client-cert", client_cert, NULL);
  tern_route(server, "GET", "/sse", sse_route, NULL);
  tern_route_with(server, "GET", "/sse-publish", sse_publish, NULL,
                  &blocking_opts);
  tern_route(server, "GET", "/sse-stats", sse_stats, NULL);
  tern_route(server, "GET", "/fields", fields, NULL);
  tern_route(server, "GET", "/whoami", whoami, NULL);
  tern_route(server, "GET", "/form", form, NULL);
  tern_route(server, "GET", "/cookie", cookie, NULL);
  tern_route(server, "GET", "/private", private_area, NULL);
  tern_route(server, "POST", "/form", form, NULL);
  tern_route_with(server, "POST", "/echo", echo, NULL, &stream_opts);
  tern_route_with(server, "POST", "/upload", upload, NULL, &stream_opts);
  tern_route(server, "POST", "/collect", collect, NULL);
  tern_route(server, "GET", "/stream", stream, NULL);
  tern_route(server, "GET", "/big", big_body, NULL);
  tern_route(server, "GET", "/trailers", trailers_route, NULL);
  tern_route_with(server, "GET", "/block", block, NULL, &blocking_opts);
  tern_route(server, "GET", "/stall", stall, NULL);
  tern_route(server, "GET", "/block-runs", block_count, NULL);
  tern_route_with(server, "GET", "/peer-block", peer_block, NULL,
                  &blocking_opts);
  tern_route(server, "GET", "/peer", address, NULL);
  tern_route(server, "GET", "/local", address, (void *)"local");
  tern_route(server, "GET", "/proxy-tlvs", proxy_tlvs, NULL);
  tern_route(server, "GET", "/defer", defer, NULL);
  tern_route(server, "GET", "/tick", tick, NULL);
  tern_route(server, "GET", "/overrun", overrun, NULL);
  tern_route(server, "GET", "/stats", stats, NULL);
  tern_route(server, "GET", "/status", status_route, NULL);
  tern_route(server, "GET", "/early-hints", early_hints_route, NULL);
  tern_route(server, "GET", "/longpoll", longpoll, NULL);
  tern_route(server, "GET", "/worker", worker_id, NULL);
  tern_route(server, "GET", "/never", never, NULL);
  tern_route(server, "GET", "/misuse", misuse, NULL);
  tern_route(server, "GET", "/ws", ws_route, NULL);
  if (want_error_hook)
    tern_server_on_error(server, error_hook, NULL);
  if (want_response_hook)
    tern_server_on_response(server, response_hook, NULL);
  if (want_vhosts && (rc = add_vhosts()) != 0) {
    fprintf(stderr, "reference: --vhosts: %s\n", tern_strerror(rc));
    return 1;
  }
  if (want_default)
    tern_server_set_default_handler(server, default_handler, NULL, NULL);
  if (reference_db_routes(server, redis_path) != 0) {
    fprintf(stderr, "reference: cannot add the database routes\n");
    return 1;
  }
  if (add_app_routes() != 0) {
    fprintf(stderr, "reference: cannot add the app routes\n");
    return 1;
  }
  if ((rc = listen_one(&listen_opts, host, (int)port, NULL, -1, NULL, NULL,
                       &bound)) != 0) {
    fprintf(stderr, "reference: listen %s:%llu: %s\n", host ? host : "*", port,
            tern_strerror(rc));
    return 1;
  }
  printf("listening on %d\n", bound);
  if (want_listen_fds) {
    /* Sockets the parent bound (systemd's LISTEN_FDS protocol). */
    static char names[16][TERN_LISTEN_FD_NAME_MAX];
    int fds[16], n = tern_listen_fds_from_env_named(fds, names, 16), k;
    if (n < 0) {
      fprintf(stderr, "reference: LISTEN_FDS: %s\n", tern_strerror(n));
      return 1;
    }
    for (k = 0; k < n; k++) {
      int p = 0, type = 0;
      socklen_t tlen = sizeof(type);
      fprintf(stderr, "reference: fd %d named %s\n", fds[k], names[k]);
      if (getsockopt(fds[k], SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 &&
          type == SOCK_DGRAM) {
        /* UDP: HTTP/3, once the certificates are in (below). */
        if (nquic_fds == sizeof(quic_fds) / sizeof(quic_fds[0])) {
          fprintf(stderr, "reference: too many UDP sockets\n");
          return 1;
        }
        quic_fds[nquic_fds++] = fds[k];
        continue;
      }
      if ((rc = listen_one(&listen_opts, NULL, 0, NULL, fds[k], NULL, NULL,
                           &p)) != 0) {
        fprintf(stderr, "reference: fd %d: %s\n", fds[k], tern_strerror(rc));
        return 1;
      }
      printf("fd %d listening on %d\n", fds[k], p);
    }
  }
  if ((quic_port != 0 || nquic_fds > 0) && tls_port == 0) {
    if (nquic_fds > 0)
      fprintf(stderr,
              "reference: fd %d: a UDP socket serves HTTP/3, which needs "
              "--tls-port (its certificates)\n",
              quic_fds[0]);
    else
      fprintf(stderr,
              "reference: --quic-port needs --tls-port (its certificates)\n");
    return 2;
  }
  if (tls_port != 0) {
    if (ncerts == 0 || ncerts != nkeys) {
      fprintf(stderr, "reference: --tls-port needs --cert and --key pairs\n");
      return 2;
    }
    if ((rc = tern_tls_new(server, &tls)) != 0 ||
        (rc = tern_tls_set_engine(tls, tls_engine)) != 0 ||
        (rc = tern_tls_set_min_version(tls, tls_min)) != 0 ||
        (client_ca != NULL && (rc = tern_tls_set_client_ca_file(
                                   tls, client_ca, client_mode)) != 0) ||
        (have_ticket_key && (rc = tern_tls_set_ticket_key(
                                 tls, ticket_key, sizeof(ticket_key))) != 0) ||
        (have_prev_ticket_key &&
         (rc = tern_tls_set_previous_ticket_key(
              tls, prev_ticket_key, sizeof(prev_ticket_key))) != 0) ||
        (rc = add_certs()) != 0 || (rc = tern_tls_commit(tls)) != 0 ||
        (rc = listen_one(&listen_opts, host,
                         tls_port == 65536 ? 0 : (int)tls_port, NULL, -1, tls,
                         NULL, &bound)) != 0) {
      fprintf(stderr, "reference: tls: %s\n", tern_strerror(rc));
      return 1;
    }
    printf("tls listening on %d\n", bound);
    fprintf(stderr, "tls engine %s\n", tern_tls_engine_name(tls));
    if (quic_port != 0) {
      rc = listen_one(NULL, host, quic_port == 65536 ? 0 : (int)quic_port, NULL,
                      -1, tls, &quic_opts, &bound);
      if (rc != 0) {
        fprintf(stderr, "reference: quic: %s\n", tern_strerror(rc));
        return 1;
      }
      printf("quic listening on %d\n", bound);
    }
    for (i = 0; i < nquic_fds; i++) {
      if ((rc = listen_one(NULL, NULL, 0, NULL, quic_fds[i], tls, &quic_opts,
                           &bound)) != 0) {
        fprintf(stderr, "reference: fd %d: %s\n", quic_fds[i],
                tern_strerror(rc));
        return 1;
      }
      printf("fd %d quic listening on %d\n", quic_fds[i], bound);
    }
  }
  if (tls != NULL || log_opts.path != NULL) {
    pthread_t t;
    signal(SIGHUP, on_hup);
    if (pthread_create(&t, NULL, reloader, NULL) == 0)
      pthread_detach(t);
  }
  if (unix_path != NULL) {
    /* Plain HTTP/1.1 and h2c; no PROXY header on it. */
    if ((rc = listen_one(NULL, NULL, 0, unix_path, -1, NULL, NULL, NULL)) !=
        0) {
      fprintf(stderr, "reference: unix %s: %s\n", unix_path, tern_strerror(rc));
      return 1;
    }
    printf("unix listening on %s\n", unix_path);
  }
  if (h2c_port != 0) {
    tern_listen_options o;
    int bound = 0;
    tern_listen_options_init(&o);
    o.host = host;
    o.port = h2c_port == 65536 ? 0 : (int)h2c_port;
    o.http2_only = 1;
    if ((rc = tern_listen_with(server, &o, &bound)) != 0) {
      fprintf(stderr, "reference: h2c port: %s\n", tern_strerror(rc));
      return 1;
    }
    printf("h2c listening on %d\n", bound);
  }
  /* HTTP/1.1 alone (http1_only): in the clear, and over TLS when there is
   * a certificate (ALPN offers http/1.1 only). */
  if (http1_port != 0) {
    tern_listen_options o;
    int bound = 0, k;
    for (k = 0; k < (tls != NULL ? 2 : 1); k++) {
      tern_listen_options_init(&o);
      o.host = host;
      o.port = http1_port == 65536 || k == 1 ? 0 : (int)http1_port;
      o.http1_only = 1;
      o.tls = k == 1 ? tls : NULL;
      if ((rc = tern_listen_with(server, &o, &bound)) != 0) {
        fprintf(stderr, "reference: http1 port: %s\n", tern_strerror(rc));
        return 1;
      }
      printf("%s listening on %d\n", k == 1 ? "tls-http1" : "http1", bound);
    }
  }
  fflush(stdout);
  fflush(stderr);
  if (processes > 1) {
    unsigned index;
    if (processes > sizeof(children) / sizeof(children[0]) ||
        (rc = tern_server_fork(server, (unsigned)processes, &index,
                               children)) != 0) {
      fprintf(stderr, "reference: --processes: %s\n",
              processes > 64 ? "at most 64" : tern_strerror(rc));
      return 1;
    }
    nchildren = index == 0 ? (unsigned)processes - 1 : 0;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  rc = tern_run(server);
  /* What /longpoll's gone callback saw, for the stop-deadline test. */
  if (gone_seen > 0)
    fprintf(stderr,
            "reference: %lu gone callbacks, %lu finished with "
            "TERN_ECLOSED\n",
            (unsigned long)gone_seen, (unsigned long)gone_eclosed);
  for (i = 0; i < (int)nchildren; i++) {
    int status = 0;
    if (waitpid(children[i], &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      rc = rc != 0 ? rc : TERN_EIO; /* a child that failed fails us */
  }
  tern_sse_hub_free(hub); /* the server has stopped: no stream is left */
  tern_server_free(server);
  tern_static_free(files);
  return rc == 0 ? 0 : 1;
}
