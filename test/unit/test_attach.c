/* tern_attach on the caller's own libuv loop: a real request over
 * loopback from a client thread, a graceful stop, and every allocation
 * returned once the server is freed. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "count_alloc.h"
#include "sweep.h"
#include "t.h"
#include "tern.h"

static tern_server *srv;
static int port;
static char reply[512];
static size_t reply_len;

static void hello(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 200, NULL, 0, "attached", 8);
}

static void *client(void *arg) {
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n"
                            "Connection: close\r\n\r\n";
  int fd = sweep_connect(port);
  ssize_t n;
  (void)arg;
  reply_len = 0;
  if (fd >= 0 && write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1))
    while ((n = read(fd, reply + reply_len, sizeof(reply) - 1 - reply_len)) > 0)
      reply_len += (size_t)n;
  if (fd >= 0)
    close(fd);
  tern_stop(srv, 1000); /* from a thread that is not the loop's */
  return NULL;
}

static void test_attach_serves_and_frees(void) {
  tern_settings s;
  uv_loop_t loop;
  pthread_t t;

  tern_settings_init(&s);
  s.workers = 1;
  ca_use(&s);
  T_ASSERT(uv_loop_init(&loop) == 0);
  T_ASSERT(tern_server_new(&s, &srv) == 0);
  T_ASSERT(tern_route(srv, "GET", "/", hello, NULL) == 0);
  T_ASSERT(tern_listen(srv, "127.0.0.1", 0, &port) == 0);
  T_ASSERT(port > 0);
  T_EQ_INT(tern_attach(srv, &loop), 0);
  T_EQ_INT(tern_attach(srv, &loop), TERN_ESTATE);
  T_ASSERT(pthread_create(&t, NULL, client, NULL) == 0);
  /* The loop returns once the stop has closed every handle of tern's. */
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  T_ASSERT(reply_len > 12 && memcmp(reply, "HTTP/1.1 200 ", 13) == 0);
  T_ASSERT(strstr(reply, "\r\n\r\nattached") != NULL);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
  T_EQ_INT(uv_loop_close(&loop), 0);
}

/* The cleartext set-up of the sweep (sweep.h): new, route, listen,
 * attach. */
typedef struct {
  const char *pattern;
  tern_handler handler;
} plain_setup;

static int setup_plain(tern_server **out, const tern_settings *s,
                       uv_loop_t *loop, void *user) {
  const plain_setup *p = user;
  int rc = tern_server_new(s, out);
  if (rc == 0)
    rc = tern_route(*out, "GET", p->pattern, p->handler, NULL);
  if (rc == 0)
    rc = tern_listen(*out, "127.0.0.1", 0, &port);
  if (rc == 0)
    rc = tern_attach(*out, loop);
  return rc;
}

/* Fail each allocation in turn across a server that serves `pattern`
 * with `handler` to `client_fn`; `served` says whether the client got
 * its whole answer. */
static void sweep_allocations(const char *pattern, tern_handler handler,
                              void *(*client_fn)(void *), int (*served)(void),
                              long max_n) {
  plain_setup p = {pattern, handler};
  sweep sw = {.what = pattern,
              .setup = setup_plain,
              .user = &p,
              .client = client_fn,
              .served = served};
  sweep_run(&sw, &srv, max_n);
}

static int hello_served(void) {
  return reply_len > 13 && memcmp(reply, "HTTP/1.1 200 ", 13) == 0;
}

static void test_every_allocation_may_fail(void) {
  sweep_allocations("/", hello, client, hello_served, 200);
}

/* ---- A connection refused for memory ---- */

static size_t refused_len;

/* One request whose connection the server cannot take (read to its end:
 * nothing), then `client`'s, which must be answered. */
static void *refused_then_served(void *arg) {
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  char buf[256];
  int fd = sweep_connect(port);
  ssize_t n;
  refused_len = 0;
  if (fd >= 0 && write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1))
    while ((n = read(fd, buf, sizeof(buf))) > 0)
      refused_len += (size_t)n;
  if (fd >= 0)
    close(fd);
  return client(arg);
}

/* With no memory for a connection, the socket libuv accepted is closed at
 * once and the listener goes on accepting: the client is not left hanging
 * and the next connection is served. */
static void test_refused_connection_leaves_listener(void) {
  tern_settings s;
  uv_loop_t loop;
  pthread_t t;
  double t0, took;

  tern_settings_init(&s);
  s.workers = 1;
  ca_use(&s);
  T_ASSERT(uv_loop_init(&loop) == 0);
  ca_calls = 0;
  ca_fail_at = LONG_MAX; /* count only */
  T_ASSERT(tern_server_new(&s, &srv) == 0);
  T_ASSERT(tern_route(srv, "GET", "/", hello, NULL) == 0);
  T_ASSERT(tern_listen(srv, "127.0.0.1", 0, &port) == 0);
  T_EQ_INT(tern_attach(srv, &loop), 0);
  ca_fail_at = ca_calls; /* the next one: the first connection's */
  t0 = sweep_now();
  T_ASSERT(pthread_create(&t, NULL, refused_then_served, NULL) == 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  ca_fail_at = -1;
  took = sweep_now() - t0;
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
  T_EQ_INT(uv_loop_close(&loop), 0);
  T_ASSERT(took < 1.5);
  T_EQ_INT(refused_len, 0);
  T_ASSERT(hello_served());
}

/* ---- WebSocket under allocation failure ---- */

static void ws_echo(tern_ws *ws, int type, const char *data, size_t len,
                    int fin, void *user) {
  (void)fin;
  (void)user;
  tern_ws_send(ws, type, data, len);
}

static void ws_route(tern_request *r, void *user) {
  tern_ws_options o;
  (void)user;
  tern_ws_options_init(&o);
  o.on_message = ws_echo;
  tern_ws_accept(r, &o, NULL, NULL);
}

/* A masked client frame (mask 0: the payload goes as is). */
static size_t client_frame(unsigned char *o, int b0, const void *p, size_t n) {
  size_t h = 0;
  o[h++] = (unsigned char)b0;
  if (n < 126) {
    o[h++] = (unsigned char)(0x80 | n);
  } else {
    o[h++] = 0x80 | 126;
    o[h++] = (unsigned char)(n >> 8);
    o[h++] = (unsigned char)n;
  }
  memset(o + h, 0, 4);
  h += 4;
  memcpy(o + h, p, n);
  return h + n;
}

static int ws_opcodes[8];
static int ws_nops;

/* Handshake offering permessage-deflate, a text message, a binary one in
 * two fragments (12 KiB: assembled in a buffer), a close; then read to
 * EOF and note the opcodes of the server's frames. */
static void *ws_client(void *arg) {
  static unsigned char out[32768], in[65536], part[6000];
  static const char head[] =
      "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
  size_t n = 0, got = 0, at;
  ssize_t k;
  int fd = sweep_connect(port);
  (void)arg;
  ws_nops = 0;
  memset(part, 'b', sizeof(part));
  memcpy(out, head, sizeof(head) - 1);
  n = sizeof(head) - 1;
  n += client_frame(out + n, 0x81, "hi", 2);
  n += client_frame(out + n, 0x02, part, sizeof(part));
  n += client_frame(out + n, 0x80, part, sizeof(part));
  n += client_frame(out + n, 0x88, "\x03\xe8", 2);
  if (fd >= 0 && write(fd, out, n) == (ssize_t)n)
    while (got < sizeof(in) && (k = read(fd, in + got, sizeof(in) - got)) > 0)
      got += (size_t)k;
  if (fd >= 0)
    close(fd);
  /* The head, then frames. */
  for (at = 0; at + 3 < got; at++)
    if (memcmp(in + at, "\r\n\r\n", 4) == 0)
      break;
  if (got < 12 || memcmp(in, "HTTP/1.1 101 ", 13) != 0 || at + 3 >= got)
    goto done;
  for (at += 4; at + 2 <= got && ws_nops < 8;) {
    size_t len = in[at + 1] & 0x7f, hl = 2;
    if (len == 126) {
      if (at + 4 > got)
        break;
      len = (size_t)in[at + 2] << 8 | in[at + 3];
      hl = 4;
    }
    if (at + hl + len > got)
      break;
    ws_opcodes[ws_nops++] = in[at] & 0x7f; /* opcode and RSV1 */
    at += hl + len;
  }
done:
  tern_stop(srv, 1000);
  return NULL;
}

/* Text and binary echoed compressed (RSV1: 0x40), then the close. */
static int ws_served(void) {
  return ws_nops == 3 && ws_opcodes[0] == 0x41 && ws_opcodes[1] == 0x42 &&
         ws_opcodes[2] == 0x08;
}

/* The sweep over a WebSocket's life: handshake, deflate set-up, messages
 * assembled and compressed, close. */
static void test_ws_every_allocation_may_fail(void) {
  sweep_allocations("/ws", ws_route, ws_client, ws_served, 400);
}

/* ---- on_close never runs inside a tern_ws_* call ---- */

/* A chat room: its member list's lock is held across sends and
 * broadcasts, and on_close takes it to remove the member. With an
 * error-checking mutex a re-entrant on_close shows as EDEADLK instead of
 * hanging the test. */
static pthread_mutex_t room;
static int room_held;                   /* the test's own view of the lock */
static long room_opens, room_closes;    /* over one run */
static long room_reentered, room_nomem; /* over the whole sweep */

static void room_open(tern_ws *ws, void *user) {
  (void)ws;
  (void)user;
  room_opens++;
}

static void room_message(tern_ws *ws, int type, const char *data, size_t len,
                         int fin, void *user) {
  int rc;
  (void)fin;
  (void)user;
  pthread_mutex_lock(&room);
  room_held = 1;
  /* Text is sent, binary broadcast (to the room of one). */
  if (type == TERN_WS_TEXT)
    rc = tern_ws_send(ws, type, data, len);
  else
    rc = tern_ws_broadcast(&ws, 1, type, data, len) == 1 ? 0 : TERN_ENOMEM;
  if (rc == TERN_ENOMEM)
    room_nomem++;
  room_held = 0;
  pthread_mutex_unlock(&room);
}

static void room_close(tern_ws *ws, int code, const char *reason, size_t len,
                       void *user) {
  (void)ws;
  (void)code;
  (void)reason;
  (void)len;
  (void)user;
  if (room_held || pthread_mutex_lock(&room) != 0) {
    room_reentered++;
    return;
  }
  room_closes++;
  pthread_mutex_unlock(&room);
}

static void room_route(tern_request *r, void *user) {
  tern_ws_options o;
  (void)user;
  tern_ws_options_init(&o);
  o.on_open = room_open;
  o.on_message = room_message;
  o.on_close = room_close;
  tern_ws_accept(r, &o, NULL, NULL);
}

/* Text echoed compressed, binary broadcast (uncompressed), the close. */
static int room_served(void) {
  /* Every socket that opened closed once, outside the room's lock. */
  T_EQ_INT(room_closes, room_opens);
  room_opens = room_closes = 0;
  return ws_nops == 3 && ws_opcodes[0] == 0x41 && ws_opcodes[1] == 0x02 &&
         ws_opcodes[2] == 0x08;
}

/* Fail each allocation of a WebSocket's life in turn: some fail a send or
 * a broadcast, which ends the socket; its on_close must come after the
 * call has returned (and the room's lock is free), never inside it. */
static void test_ws_close_not_inside_calls(void) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_init(&room, &a);
  pthread_mutexattr_destroy(&a);
  room_reentered = room_nomem = 0;
  sweep_allocations("/ws", room_route, ws_client, room_served, 400);
  T_ASSERT(room_nomem > 0); /* the sweep did fail sends */
  T_EQ_INT(room_reentered, 0);
  pthread_mutex_destroy(&room);
}

/* ---- An inbox message posted at shutdown is freed ---- */

/* Calls posted from another thread race the last connection's close and
 * tern_stop: whatever is still in the worker's inbox when its loop ends,
 * or comes after, must be dropped with everything it holds (the socket's
 * reference, a shared frame, a write's done callback, a referenced body's
 * release), never leaked: tern_server_free then leaves nothing live. */
static pthread_mutex_t race_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t race_cond = PTHREAD_COND_INITIALIZER;
static tern_ws *race_ws;
static tern_request *race_req;
static int race_iter;
static _Atomic long race_done_calls, race_writes_ok, race_releases;

static void race_open(tern_ws *ws, void *user) {
  (void)user;
  tern_ws_ref(ws); /* the poster's, dropped before tern_server_free */
  pthread_mutex_lock(&race_lock);
  race_ws = ws;
  pthread_cond_signal(&race_cond);
  pthread_mutex_unlock(&race_lock);
}

static void race_ws_route(tern_request *r, void *user) {
  tern_ws_options o;
  (void)user;
  tern_ws_options_init(&o);
  o.on_open = race_open;
  tern_ws_accept(r, &o, NULL, NULL);
}

static void race_http_route(tern_request *r, void *user) {
  (void)user;
  pthread_mutex_lock(&race_lock);
  race_req = r;
  pthread_cond_signal(&race_cond);
  pthread_mutex_unlock(&race_lock);
}

static void *race_wait(void **slot) {
  struct timespec ts;
  void *p;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 3;
  pthread_mutex_lock(&race_lock);
  while (*slot == NULL &&
         pthread_cond_timedwait(&race_cond, &race_lock, &ts) == 0)
    ;
  p = *slot;
  pthread_mutex_unlock(&race_lock);
  return p;
}

/* Sends, pings, broadcasts and pauses until the socket or the worker is
 * gone (bounded: a stuck run fails the count, not the test's time). */
static void *ws_poster(void *arg) {
  tern_ws *ws = race_wait((void **)(void *)&race_ws);
  long i;
  (void)arg;
  for (i = 0; ws != NULL && i < 200000; i++) {
    int rc;
    switch (i % 4) {
    case 0:
      rc = tern_ws_send(ws, TERN_WS_TEXT, "tick", 4);
      break;
    case 1:
      rc = tern_ws_ping(ws, "p", 1);
      break;
    case 2:
      rc = tern_ws_broadcast(&ws, 1, TERN_WS_BINARY, "b", 1) == 1
               ? 0
               : TERN_ECLOSED;
      break;
    default:
      rc = i % 8 == 3 ? tern_ws_pause(ws) : tern_ws_resume(ws);
      break;
    }
    if (rc == TERN_ECLOSED)
      break;
  }
  return NULL;
}

static void race_written(tern_request *r, int status, void *user) {
  (void)r;
  (void)status;
  (void)user;
  race_done_calls++;
}

static void race_release(void *data, void *user) {
  (void)data;
  (void)user;
  race_releases++;
}

/* A streamed answer whose writes carry done callbacks, or one answer by
 * reference: each call told 0 must see its callback exactly once. */
static void *http_poster(void *arg) {
  static const char body[] = "referenced body";
  tern_request *r = race_wait((void **)(void *)&race_req);
  int i;
  (void)arg;
  if (r == NULL)
    return NULL;
  if (race_iter % 3 == 0) {
    if (tern_respond_ref(r, 200, NULL, 0, body, sizeof(body) - 1, race_release,
                         NULL) != 0)
      race_releases++; /* refused: never released, the body stays ours */
    return NULL;
  }
  if (tern_response_start(r, 200, NULL, 0, -1) != 0) {
    tern_response_end(r, NULL, 0);
    return NULL;
  }
  for (i = 0; i < 2000; i++) {
    if (tern_response_write(r, "chunk", 5, race_written, NULL) != 0)
      break;
    race_writes_ok++;
    if (i % 2 == 0 && tern_response_write(r, "copy", 4, NULL, NULL) != 0)
      break;
  }
  tern_response_end(r, NULL, 0);
  return NULL;
}

/* Send the opening request, read a little, then (varying the order by
 * iteration) close the connection and stop, or stop with the connection
 * still open, with a deadline of 0 or a short one. */
static void *race_client(void *arg) {
  static const char ws_head[] =
      "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
  static const char get[] = "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n";
  const char *req = arg != NULL ? ws_head : get;
  size_t len = arg != NULL ? sizeof(ws_head) - 1 : sizeof(get) - 1;
  char buf[4096];
  int fd = sweep_connect(port), k;
  if (fd >= 0 && write(fd, req, len) == (ssize_t)len)
    for (k = 0; k < 1 + race_iter % 3; k++)
      if (read(fd, buf, sizeof(buf)) <= 0)
        break;
  if (race_iter % 2 == 0 && fd >= 0) {
    close(fd);
    fd = -1;
  }
  tern_stop(srv, race_iter % 4 < 2 ? 0 : 20);
  if (fd >= 0)
    close(fd);
  return NULL;
}

static void race_run(int ws, int iterations) {
  int it;
  for (it = 0; it < iterations; it++) {
    tern_settings s;
    uv_loop_t loop;
    pthread_t client_t, poster_t;

    race_iter = it;
    race_ws = NULL;
    race_req = NULL;
    tern_settings_init(&s);
    s.workers = 1;
    ca_use(&s);
    T_ASSERT(uv_loop_init(&loop) == 0);
    T_ASSERT(tern_server_new(&s, &srv) == 0);
    T_ASSERT(tern_route(srv, "GET", "/ws", race_ws_route, NULL) == 0);
    T_ASSERT(tern_route(srv, "GET", "/slow", race_http_route, NULL) == 0);
    T_ASSERT(tern_listen(srv, "127.0.0.1", 0, &port) == 0);
    T_EQ_INT(tern_attach(srv, &loop), 0);
    T_ASSERT(pthread_create(&poster_t, NULL, ws ? ws_poster : http_poster,
                            NULL) == 0);
    T_ASSERT(pthread_create(&client_t, NULL, race_client,
                            ws ? (void *)&race_ws : NULL) == 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    pthread_join(client_t, NULL);
    pthread_join(poster_t, NULL);
    T_ASSERT(ws ? race_ws != NULL : race_req != NULL);
    if (race_ws != NULL)
      tern_ws_unref(race_ws);
    tern_server_free(srv);
    T_EQ_INT(ca_live, 0);
    T_EQ_INT(uv_loop_close(&loop), 0);
  }
}

static void test_inbox_message_posted_at_shutdown_freed(void) {
  race_done_calls = race_writes_ok = race_releases = 0;
  race_run(1, 60);
  race_run(0, 60);
  /* Every write told 0 heard its done callback; every referenced body was
   * released, or refused to its caller. */
  T_EQ_INT(race_done_calls, race_writes_ok);
  T_EQ_INT(race_releases, 20);
}

static void test_attach_needs_one_worker(void) {
  tern_settings s;
  tern_server *two;
  uv_loop_t loop;
  tern_settings_init(&s);
  s.workers = 2;
  T_ASSERT(uv_loop_init(&loop) == 0);
  T_ASSERT(tern_server_new(&s, &two) == 0);
  T_EQ_INT(tern_attach(two, &loop), TERN_EINVAL);
  tern_server_free(two);
  T_EQ_INT(uv_loop_close(&loop), 0);
}

static void test_errors_have_messages(void) {
  int e;
  for (e = TERN_ENOTSUP; e <= TERN_OK; e++)
    T_ASSERT(strcmp(tern_strerror(e), "unknown error") != 0);
  T_ASSERT(strcmp(tern_strerror(-999), "unknown error") == 0);
  /* The build's version (meson's project version), not a literal. */
  T_ASSERT(strcmp(tern_version(), TERN_PROJECT_VERSION) == 0);
}

/* ---- A sender on another thread against the high-water mark ---- */

static uv_loop_t *bp_loop;
static tern_ws *bp_ws;
static int bp_pipe[2]; /* the client waits on it, then closes */
static long bp_ok, bp_full;

static void bp_open(tern_ws *ws, void *user) {
  (void)user;
  tern_ws_ref(ws);
  bp_ws = ws;
  uv_stop(bp_loop); /* the worker stops applying posted calls */
}

static void bp_route(tern_request *r, void *user) {
  tern_ws_options o;
  (void)user;
  tern_ws_options_init(&o);
  o.on_open = bp_open;
  o.high_water = 64 << 10;
  o.on_full = TERN_WS_FAIL_SEND;
  tern_ws_accept(r, &o, NULL, NULL);
}

/* Upgrades, reads nothing more, and closes when told. */
static void *bp_client(void *arg) {
  static const char head[] =
      "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
  char c;
  int fd = sweep_connect(port);
  (void)arg;
  if (fd >= 0 && write(fd, head, sizeof(head) - 1) == sizeof(head) - 1)
    (void)!read(bp_pipe[0], &c, 1);
  if (fd >= 0)
    close(fd);
  return NULL;
}

/* 1,000 sends of 1 KiB from a thread that is not the worker's, while the
 * worker applies none of them. */
static void *bp_sender(void *arg) {
  static char msg[1024];
  int i, rc;
  (void)arg;
  for (i = 0; i < 1000; i++) {
    rc = tern_ws_send(bp_ws, TERN_WS_BINARY, msg, sizeof(msg));
    if (rc == 0)
      bp_ok++;
    else if (rc == TERN_ETOOBIG)
      bp_full++;
  }
  return NULL;
}

/* TERN_WS_FAIL_SEND bounds what other threads queue, also while the
 * worker lags behind them: sends posted and not yet applied count
 * against the mark, so the inbox cannot pile up past it. */
static void test_ws_fail_send_bounds_posted_sends(void) {
  tern_settings s;
  uv_loop_t loop;
  pthread_t c, t;

  tern_settings_init(&s);
  s.workers = 1;
  ca_use(&s);
  T_ASSERT(pipe(bp_pipe) == 0);
  T_ASSERT(uv_loop_init(&loop) == 0);
  bp_loop = &loop;
  bp_ws = NULL;
  bp_ok = bp_full = 0;
  T_ASSERT(tern_server_new(&s, &srv) == 0);
  T_ASSERT(tern_route(srv, "GET", "/ws", bp_route, NULL) == 0);
  T_ASSERT(tern_listen(srv, "127.0.0.1", 0, &port) == 0);
  T_EQ_INT(tern_attach(srv, &loop), 0);
  T_ASSERT(pthread_create(&c, NULL, bp_client, NULL) == 0);
  uv_run(&loop, UV_RUN_DEFAULT); /* until on_open stops it */
  T_ASSERT(bp_ws != NULL);
  T_ASSERT(pthread_create(&t, NULL, bp_sender, NULL) == 0);
  pthread_join(t, NULL);
  printf("# 1000 sends of 1 KiB against a 64 KiB mark, the worker "
         "stopped: %ld posted, %ld refused\n",
         bp_ok, bp_full);
  T_ASSERT(bp_ok >= 64 && bp_ok <= 66);
  T_EQ_INT(bp_ok + bp_full, 1000);
  T_ASSERT(tern_ws_buffered(bp_ws) <= (66u << 10));
  /* Let the client go, and the server stop and drain. */
  T_ASSERT(write(bp_pipe[1], "x", 1) == 1);
  pthread_join(c, NULL);
  tern_ws_unref(bp_ws);
  tern_stop(srv, 1000);
  uv_run(&loop, UV_RUN_DEFAULT);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
  T_EQ_INT(uv_loop_close(&loop), 0);
  close(bp_pipe[0]);
  close(bp_pipe[1]);
}

int main(void) {
  T_RUN(test_attach_serves_and_frees);
  T_RUN(test_every_allocation_may_fail);
  T_RUN(test_refused_connection_leaves_listener);
  T_RUN(test_ws_every_allocation_may_fail);
  T_RUN(test_ws_close_not_inside_calls);
  T_RUN(test_ws_fail_send_bounds_posted_sends);
  T_RUN(test_inbox_message_posted_at_shutdown_freed);
  T_RUN(test_attach_needs_one_worker);
  T_RUN(test_errors_have_messages);
  return T_DONE();
}
