/* libFuzzer target for a whole tern connection: the bytes of one input are
 * what a client sends on one connection, and everything behind the socket
 * is the real library (adapter, core, output queue, timers, routing,
 * handlers, WebSocket), on a loop this program runs.
 *
 * The first byte picks the protocol:
 * - 0 (modulo 4): HTTP/1.1 as it arrives on a plain port (pipelining, bodies,
 *   h2c upgrade and WebSocket upgrade all reachable from the bytes);
 * - 1: HTTP/2 by prior knowledge: the client preface and an empty
 *   SETTINGS frame are sent first, the input's frames after them;
 * - 2: TLS records to a TLS port (ClientHellos in the corpus; the
 *   handshake cannot complete, so this reaches record framing, alerts and
 *   the filter's buffering, not the protocols behind it), served by the
 *   library's default TLS engine (GnuTLS where built);
 * - 3: the same to a TLS port served by the other engine (mbedTLS), when
 *   the build has both (else the default's port).
 * The rest is sent in pieces whose sizes follow from the input, with loop
 * turns between them, then the client shuts its side down and reads until
 * the server closes.
 *
 * Invariants, checked for every input (a failure traps):
 * - the connection ends: after the client's FIN every answer is given and
 *   the server closes within a budget of loop turns and wall time (a
 *   stuck or spinning connection is a finding);
 * - nothing leaks: once the connection is gone, tern holds exactly the
 *   allocations it held before it (free lists are off under ASan, so a
 *   request, buffer or stream that was never finished shows here), and
 *   the server counts no open connection;
 * - output is bounded (at most OUT_MAX bytes for an input of 4 KiB);
 * - output is well-formed at its start: HTTP/1.1 answers begin with a
 *   status line; HTTP/2 output begins with a SETTINGS frame and is a
 *   sequence of whole frames; TLS output is a sequence of whole records.
 *
 * The routes: GET / (a fixed body), POST /echo (a collected body echoed),
 * POST /up (a streamed body counted), GET /later (answered on a later loop
 * turn, so that pipelined answers finish out of order), GET /chunks (a
 * streamed answer with trailers), GET /ws (a WebSocket echo, deflate
 * allowed), and on a compressing route (tern_compress_options' defaults)
 * GET /z (1500 bytes of text, compressed whole when Accept-Encoding
 * allows) and GET /zchunks (/chunks compressed as it streams). Limits are small
 * so that inputs reach them.
 *
 * Build (test/fuzz/run.sh does this): clang -fsanitize=fuzzer,address,
 * undefined -Iinclude -Ilib -DTERN_HAVE_HTTP2, the library sources,
 * fuzz_conn.c, -luv -lnghttp2, the TLS engines' libraries (-lgnutls,
 * -lmbedtls -lmbedx509 -lmbedcrypto), -lz -lpthread
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "../unit/count_alloc.h"
#include "fuzz_cert.h"
#include "tern.h"
#include "../common/listen.h"

#include "fuzz.h"

#define OUT_MAX (16u << 20)
#define LATER_MAX 64

static uv_loop_t loop;
static tern_server *srv;
static int port, tls_port, tls_port2;
static long baseline = -1;
static tern_request *later[LATER_MAX];
static size_t nlater;
static char *out;
static size_t out_len;

static const tern_header text[] = {{"content-type", 12, "text/plain", 10}};

/* ---- Handlers --------------------------------------------------------- */

static void root(tern_request *r, void *u) {
  (void)u;
  tern_respond(r, 200, text, 1, "Hello, World!", 13);
}

static void echo(tern_request *r, void *u) {
  size_t n;
  const char *b = tern_request_body(r, &n);
  (void)u;
  tern_respond(r, 200, text, 1, b, n);
}

static void up_body(tern_request *r, int ev, const char *d, size_t n, void *u) {
  (void)d;
  (void)u;
  if (ev == TERN_BODY_DATA)
    return;
  (void)n;
  tern_respond(r, ev == TERN_BODY_END ? 200 : 400, NULL, 0, "ok", 2);
}

static void up(tern_request *r, void *u) {
  (void)u;
  if (tern_request_read(r, up_body, NULL) != 0)
    tern_respond(r, 500, NULL, 0, NULL, 0);
}

static void answer_later(tern_request *r, void *u) {
  (void)u;
  if (nlater == LATER_MAX) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  later[nlater++] = r;
}

static void chunks(tern_request *r, void *u) {
  static const tern_header trailer[] = {{"x-sum", 5, "42", 2}};
  int i;
  (void)u;
  tern_response_start(r, 200, text, 1, -1);
  for (i = 0; i < 3; i++)
    tern_response_write(r, "piece\n", 6, NULL, NULL);
  tern_response_end(r, trailer, 1);
}

/* On the compressing route: above its 1 KiB threshold. */
static void zipped(tern_request *r, void *u) {
  static char body[1500];
  (void)u;
  if (body[0] == 0)
    for (size_t i = 0; i < sizeof(body); i++)
      body[i] = "compressible text\n"[i % 18];
  tern_respond(r, 200, text, 1, body, sizeof(body));
}

static void ws_message(tern_ws *ws, int type, const char *d, size_t n, int fin,
                       void *u) {
  (void)fin;
  (void)u;
  tern_ws_send(ws, type, d, n);
}

static void ws(tern_request *r, void *u) {
  tern_ws_options o;
  tern_ws *w;
  int rc;
  (void)u;
  tern_ws_options_init(&o);
  o.on_message = ws_message;
  o.max_message_size = 64 << 10;
  /* TERN_ESTATE / TERN_EINVAL leave the request to us (tern.h). */
  rc = tern_ws_accept(r, &o, NULL, &w);
  if (rc == TERN_ESTATE || rc == TERN_EINVAL)
    tern_respond(r, 500, NULL, 0, NULL, 0);
}

static void quiet(int level, const char *msg, size_t len, void *user) {
  (void)level;
  (void)msg;
  (void)len;
  (void)user;
}

/* Answer what /later held back (on the loop, a turn after it came). */
static void answer_held(void) {
  size_t i, n = nlater;
  nlater = 0;
  for (i = 0; i < n; i++)
    tern_respond(later[i], 200, text, 1, "later", 5);
}

static void start_server(void) {
  tern_settings s;
  tern_route_options ro;
  tern_compress_options co;
  tern_tls *tls;

  tern_settings_init(&s);
  s.workers = 1;
  s.max_head_size = 4096;
  s.max_header_count = 32;
  s.max_uri_length = 1024;
  s.max_body_size = 64 << 10;
  s.head_timeout_ms = 200;
  s.idle_timeout_ms = 200;
  s.body_timeout_ms = 200;
  s.max_pipeline = 8;
  s.log = quiet;
  ca_use(&s);
  CHECK(uv_loop_init(&loop) == 0);
  CHECK(tern_server_new(&s, &srv) == 0);
  CHECK(tern_route(srv, "GET", "/", root, NULL) == 0);
  CHECK(tern_route(srv, "POST", "/echo", echo, NULL) == 0);
  tern_route_options_init(&ro);
  ro.flags = TERN_ROUTE_STREAM_BODY;
  CHECK(tern_route_with(srv, "POST", "/up", up, NULL, &ro) == 0);
  CHECK(tern_route(srv, "GET", "/later", answer_later, NULL) == 0);
  CHECK(tern_route(srv, "GET", "/chunks", chunks, NULL) == 0);
  CHECK(tern_route(srv, "GET", "/ws", ws, NULL) == 0);
  tern_compress_options_init(&co);
  tern_route_options_init(&ro);
  ro.compress = &co;
  CHECK(tern_route_with(srv, "GET", "/z", zipped, NULL, &ro) == 0);
  CHECK(tern_route_with(srv, "GET", "/zchunks", chunks, NULL, &ro) == 0);
  /* Every request (hostile heads, aborts, tern's own answers) goes
   * through the access log's counting and JSON formatting; the lines go
   * to /dev/null through the writer thread. */
  {
    tern_access_log_options lo;
    tern_access_log_options_init(&lo);
    lo.path = "/dev/null";
    CHECK(tern_server_access_log(srv, &lo) == 0);
  }
  CHECK(tern_listen(srv, "127.0.0.1", 0, &port) == 0);
  CHECK(tern_tls_new(srv, &tls) == 0);
  CHECK(tern_tls_add_cert_mem(tls, fuzz_cert, sizeof(fuzz_cert) - 1, fuzz_key,
                              sizeof(fuzz_key) - 1) == 0);
  CHECK(tern_tls_commit(tls) == 0);
  CHECK(test_listen_tls(srv, tls, &tls_port) == 0);
  /* The other engine, when the build has both. */
  tls_port2 = tls_port;
  CHECK(tern_tls_new(srv, &tls) == 0);
  if (tern_tls_set_engine(tls, TERN_TLS_ENGINE_MBEDTLS) == 0 &&
      strcmp(tern_tls_engine_name(tls), "mbedtls") == 0) {
    CHECK(tern_tls_add_cert_mem(tls, fuzz_cert, sizeof(fuzz_cert) - 1, fuzz_key,
                                sizeof(fuzz_key) - 1) == 0);
    CHECK(tern_tls_commit(tls) == 0);
    CHECK(test_listen_tls(srv, tls, &tls_port2) == 0);
  }
  CHECK(tern_attach(srv, &loop) == 0);
  out = malloc(OUT_MAX);
  CHECK(out != NULL);
}

/* ---- The client ------------------------------------------------------- */

static uint64_t hash(const uint8_t *p, size_t n) {
  uint64_t h = 14695981039346656037u;
  size_t i;
  for (i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211u;
  return h;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One loop turn, then what the server sent. Returns 1 once the server
 * has closed (EOF or reset). */
static int turn(int fd) {
  ssize_t n;
  uv_run(&loop, UV_RUN_NOWAIT);
  answer_held();
  for (;;) {
    n = recv(fd, out + out_len, OUT_MAX - out_len, 0);
    if (n > 0) {
      out_len += (size_t)n;
      CHECK(out_len < OUT_MAX); /* output bounded */
      continue;
    }
    if (n == 0)
      return 1;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    if (errno == EINTR)
      continue;
    return 1; /* ECONNRESET: the server cut the connection */
  }
}

static int client_connect(int to) {
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct pollfd p;
  int i, err = 0;
  socklen_t el = sizeof(err);

  CHECK(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)to);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
    CHECK(errno == EINPROGRESS);
  for (i = 0; i < 1000; i++) {
    p.fd = fd;
    p.events = POLLOUT;
    if (poll(&p, 1, 1) == 1)
      break;
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0);
  return fd;
}

/* Send all of p[0..n), turning the loop while the socket is full. Returns
 * 0 if the server closed first. */
static int send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= (size_t)w;
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return 0;
    }
    if (turn(fd))
      return 0;
  }
  return 1;
}

static int is_h1_answer(void) {
  return out_len >= 9 &&
         (memcmp(out, "HTTP/1.1 ", 9) == 0 || memcmp(out, "HTTP/1.0 ", 9) == 0);
}

static void check_h1(void) {
  size_t i;
  if (out_len == 0)
    return;
  CHECK(is_h1_answer());
  /* A status line: three digits, then a space. */
  CHECK(out_len >= 13);
  for (i = 9; i < 12; i++)
    CHECK(out[i] >= '0' && out[i] <= '9');
  CHECK(out[12] == ' ');
}

static void check_h2(void) {
  size_t pos = 0;
  if (out_len == 0)
    return;
  /* The server's connection preface is a SETTINGS frame on stream 0. */
  CHECK(out_len >= 9 && (unsigned char)out[3] == 4 &&
        (out[5] | out[6] | out[7] | out[8]) == 0);
  while (pos + 9 <= out_len) {
    size_t len = ((size_t)(unsigned char)out[pos] << 16) |
                 ((size_t)(unsigned char)out[pos + 1] << 8) |
                 (unsigned char)out[pos + 2];
    pos += 9 + len;
  }
  CHECK(pos == out_len); /* whole frames only */
}

/* TLS output is a sequence of whole records (alerts included). */
static void check_tls(void) {
  size_t pos = 0;
  while (pos + 5 <= out_len) {
    CHECK(out[pos] >= 20 && out[pos] <= 23 && out[pos + 1] == 3);
    pos += 5 + (((size_t)(unsigned char)out[pos + 3] << 8) |
                (unsigned char)out[pos + 4]);
  }
  CHECK(pos == out_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                "\0\0\0\4\0\0\0\0\0";
  uint64_t h;
  int fd, closed = 0, mode, h2;
  size_t pos = 1;
  long turns;
  double t0;
  tern_stats st;

  tern_stats_init(&st);
  if (srv == NULL)
    start_server();
  if (size < 1)
    return 0;
  mode = data[0] % 4;
  h2 = mode == 1;
  h = hash(data, size);
  out_len = 0;
  fd = client_connect(mode == 2 ? tls_port : mode == 3 ? tls_port2 : port);
  if (h2 && !send_all(fd, preface, sizeof(preface) - 1))
    closed = 1;
  while (!closed && pos < size) {
    /* Pieces of 1 to 64 bytes, or the rest at once. */
    size_t piece = (h & 7) == 0 ? size - pos : 1 + (size_t)((h >> 3) & 63);
    h = h * 6364136223846793005u + 1442695040888963407u;
    if (piece > size - pos)
      piece = size - pos;
    if (!send_all(fd, (const char *)data + pos, piece))
      closed = 1;
    pos += piece;
  }
  shutdown(fd, SHUT_WR);
  /* The server must end the connection by itself: every answer is due
   * (the handlers answer at once or a turn later, and the client's FIN
   * ends any body), and the timeouts are 200 ms. */
  t0 = now_s();
  for (turns = 0; !closed; turns++) {
    closed = turn(fd);
    if (!closed && turns > 2000) {
      struct pollfd p = {fd, POLLIN, 0};
      poll(&p, 1, 1);
      CHECK(now_s() - t0 < 5.0); /* stuck */
    }
  }
  close(fd);
  /* Let the server finish closing (close callbacks, deferred frees). */
  for (turns = 0; turns < 64; turns++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    answer_held();
    tern_server_stats(srv, &st);
    if (st.active_connections == 0 && nlater == 0 &&
        (baseline < 0 || ca_live == baseline))
      break;
  }
  t0 = now_s();
  while (st.active_connections != 0 && now_s() - t0 < 2.0) {
    uv_run(&loop, UV_RUN_NOWAIT);
    tern_server_stats(srv, &st);
  }
  CHECK(st.active_connections == 0);
  CHECK(nlater == 0);
  if (baseline < 0)
    baseline = ca_live;
  CHECK(ca_live == baseline); /* nothing of this connection is left */
  /* A plain port also takes HTTP/2 by prior knowledge from the bytes: a
   * client that starts like the preface gets HTTP/2 frames (a GOAWAY for
   * a bad preface) or, if it is no preface at all, an HTTP/1.1 answer. */
  if (mode >= 2)
    check_tls();
  else if (h2 ||
           (!is_h1_answer() && size > 4 && memcmp(data + 1, "PRI ", 4) == 0))
    check_h2();
  else
    check_h1();
  return 0;
}
