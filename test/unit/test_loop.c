/* The worker's loop in the user's hands, over real sockets: a handler
 * that starts a libuv timer on its worker's loop and responds from it,
 * the loop refused where it must be (a blocking handler, another thread),
 * functions posted to a worker from a foreign thread (they run there, in
 * order), the per-worker start and stop hooks, and a request whose client
 * leaves while its timer is pending (dropped, nothing leaks). */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "capture_log.h"
#include "count_alloc.h"
#include "loopback.h"
#include "t.h"
#include "tern.h"

#define NWORKERS 2

static _Atomic int started[NWORKERS], stopped[NWORKERS];
static _Atomic int timers_open, gone_seen, late_answers;
static _Atomic int blocking_loop_null, bad_worker, ws_loop_ok;
static pthread_t main_thread;

/* ---- A server on a thread ---- */

typedef struct {
  tern_server *srv;
  pthread_t t;
  int port;
  int rc;
} server;

static void *run_thread(void *arg) {
  server *s = arg;
  s->rc = tern_run(s->srv);
  return NULL;
}

/* Wait (bounded at 2 s) for *v to reach `want`. */
static int wait_for(_Atomic int *v, int want) {
  double t0 = sweep_now();
  while (atomic_load(v) != want && sweep_now() - t0 < 2.0)
    usleep(1000);
  return atomic_load(v) == want;
}

/* One request on a fresh connection with Connection: close; the whole
 * answer (up to its close) into buf. Returns its length or -1. */
static int get(int port, const char *path, char *buf, size_t size) {
  char req[256];
  size_t got = 0;
  ssize_t n;
  int fd = sweep_connect(port);
  if (fd < 0)
    return -1;
  snprintf(req, sizeof(req),
           "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
  if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
    close(fd);
    return -1;
  }
  while (got + 1 < size && (n = read(fd, buf + got, size - 1 - got)) > 0)
    got += (size_t)n;
  buf[got] = '\0';
  close(fd);
  return (int)got;
}

/* ---- Handlers ---- */

typedef struct {
  uv_timer_t t;
  tern_request *r;
} wait_timer;

static void on_timer_closed(uv_handle_t *h) {
  free(h->data);
  atomic_fetch_sub(&timers_open, 1);
}

static void on_timer(uv_timer_t *t) {
  wait_timer *wt = t->data;
  tern_request *r = wt->r;
  tern_request_on_gone(r, NULL, NULL);
  if (tern_respond(r, 200, NULL, 0, "late", 4) == 0)
    atomic_fetch_add(&late_answers, 1);
  uv_close((uv_handle_t *)&wt->t, on_timer_closed);
}

/* The client left while the timer was pending: stop waiting, finish the
 * request (the call returns TERN_ECLOSED and frees it) and let the timer
 * go. */
static void on_gone(tern_request *r, void *user) {
  wait_timer *wt = user;
  atomic_fetch_add(&gone_seen, 1);
  uv_timer_stop(&wt->t);
  tern_respond(r, 200, NULL, 0, "never", 5);
  uv_close((uv_handle_t *)&wt->t, on_timer_closed);
}

/* GET /wait/:ms: respond after ms milliseconds, from a timer on the
 * worker's loop. */
static void wait_handler(tern_request *r, void *user) {
  tern_server *srv = user;
  uv_loop_t *loop = tern_request_loop(r);
  size_t n;
  const char *ms = tern_request_param(r, "ms", 2, &n);
  int w = tern_request_worker(r);
  wait_timer *wt;

  if (w < 0 || (unsigned)w >= tern_server_workers(srv))
    atomic_fetch_add(&bad_worker, 1);
  wt = malloc(sizeof(*wt));
  if (loop == NULL || wt == NULL || ms == NULL) {
    free(wt);
    tern_respond(r, 500, NULL, 0, NULL, 0);
    return;
  }
  wt->r = r;
  uv_timer_init(loop, &wt->t);
  wt->t.data = wt;
  atomic_fetch_add(&timers_open, 1);
  tern_request_on_gone(r, on_gone, wt);
  uv_timer_start(&wt->t, on_timer, strtoul(ms, NULL, 10), 0);
}

/* A blocking handler may not have the loop (it is not on the worker). */
static void blocking_handler(tern_request *r, void *user) {
  (void)user;
  if (tern_request_loop(r) == NULL && tern_request_worker(r) >= 0)
    atomic_fetch_add(&blocking_loop_null, 1);
  tern_respond(r, 200, NULL, 0, "blocked", 7);
}

/* A WebSocket has its worker's loop too (on that worker). */
static void ws_open(tern_ws *ws, void *user) {
  (void)user;
  if (tern_ws_loop(ws) != NULL && tern_ws_worker(ws) >= 0 &&
      tern_ws_worker(ws) < NWORKERS)
    atomic_fetch_add(&ws_loop_ok, 1);
}

static void ws_handler(tern_request *r, void *user) {
  tern_ws_options o;
  (void)user;
  tern_ws_options_init(&o);
  o.on_open = ws_open;
  tern_ws_accept(r, &o, NULL, NULL);
}

static void on_start(tern_server *srv, unsigned w, void *loop, void *user) {
  (void)srv;
  (void)user;
  if (w < NWORKERS && loop != NULL)
    atomic_fetch_add(&started[w], 1);
}

static void on_stop(tern_server *srv, unsigned w, void *loop, void *user) {
  (void)srv;
  (void)user;
  if (w < NWORKERS && loop != NULL)
    atomic_fetch_add(&stopped[w], 1);
}

static void start(server *s) {
  tern_settings st;
  tern_route_options o;
  tern_settings_init(&st);
  st.workers = NWORKERS;
  st.log = capture;
  ca_use(&st);
  nlogs = 0;
  main_thread = pthread_self();
  T_EQ_INT(tern_server_new(&st, &s->srv), 0);
  T_EQ_INT(tern_server_workers(s->srv), NWORKERS);
  T_EQ_INT(tern_route(s->srv, "GET", "/wait/:ms", wait_handler, s->srv), 0);
  tern_route_options_init(&o);
  o.flags = TERN_ROUTE_BLOCKING;
  T_EQ_INT(
      tern_route_with(s->srv, "GET", "/blocking", blocking_handler, NULL, &o),
      0);
  T_EQ_INT(tern_route(s->srv, "GET", "/ws", ws_handler, NULL), 0);
  T_EQ_INT(tern_server_on_workers(s->srv, on_start, on_stop, NULL), 0);
  T_EQ_INT(tern_listen(s->srv, "127.0.0.1", 0, &s->port), 0);
  for (unsigned w = 0; w < NWORKERS; w++) {
    atomic_store(&started[w], 0);
    atomic_store(&stopped[w], 0);
  }
  T_ASSERT(pthread_create(&s->t, NULL, run_thread, s) == 0);
  /* Running once every worker's on_start has run. */
  for (unsigned w = 0; w < NWORKERS; w++)
    T_ASSERT(wait_for(&started[w], 1));
}

/* Blocking-pool threads hold the server's memory until they end. */
static int no_live_blocks(void) {
  double t0 = sweep_now();
  while (atomic_load(&ca_live) != 0 && sweep_now() - t0 < 2.0)
    usleep(1000);
  return atomic_load(&ca_live) == 0;
}

static void finish(server *s) {
  T_EQ_INT(tern_stop(s->srv, 2000), 0);
  pthread_join(s->t, NULL);
  T_EQ_INT(s->rc, 0);
  tern_server_free(s->srv);
  T_ASSERT(no_live_blocks());
}

/* ---- Tests ---- */

static void test_timer_responds(void) {
  server s;
  char buf[1024];
  int i;
  atomic_store(&late_answers, 0);
  start(&s);
  for (i = 0; i < 4; i++) {
    T_ASSERT(get(s.port, "/wait/20", buf, sizeof(buf)) > 0);
    T_ASSERT(strncmp(buf, "HTTP/1.1 200", 12) == 0);
    T_ASSERT(strstr(buf, "\r\n\r\nlate") != NULL);
  }
  T_EQ_INT(late_answers, 4);
  T_EQ_INT(bad_worker, 0);
  T_ASSERT(wait_for(&timers_open, 0));
  /* From a thread that is no worker: refused, with a log line. */
  T_ASSERT(tern_request_loop(NULL) == NULL);
  T_ASSERT(tern_ws_loop(NULL) == NULL);
  T_EQ_INT(tern_request_worker(NULL), TERN_EINVAL);
  T_EQ_INT(tern_ws_worker(NULL), TERN_EINVAL);
  finish(&s);
}

static void test_blocking_has_no_loop(void) {
  server s;
  char buf[1024];
  atomic_store(&blocking_loop_null, 0);
  start(&s);
  nlogs = 0;
  T_ASSERT(get(s.port, "/blocking", buf, sizeof(buf)) > 0);
  T_ASSERT(strstr(buf, "\r\n\r\nblocked") != NULL);
  T_EQ_INT(blocking_loop_null, 1);
  T_ASSERT(nlogs >= 1 && strstr(last_log, "tern_request_loop") != NULL);
  finish(&s);
}

static void test_ws_has_loop(void) {
  server s;
  const char *req = "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
  char buf[512];
  ssize_t n;
  int fd;
  atomic_store(&ws_loop_ok, 0);
  start(&s);
  fd = sweep_connect(s.port);
  T_ASSERT(fd >= 0);
  T_ASSERT(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
  n = read(fd, buf, sizeof(buf) - 1);
  T_ASSERT(n > 12);
  buf[n] = '\0';
  T_ASSERT(strncmp(buf, "HTTP/1.1 101", 12) == 0);
  T_EQ_INT(ws_loop_ok, 1);
  close(fd);
  finish(&s);
}

/* ---- Calls posted to a worker ---- */

typedef struct {
  _Atomic int ran, on_main, no_loop, out_of_order;
  int next; /* touched on the worker only */
  unsigned worker;
} calls;

static void counted(tern_server *srv, unsigned w, void *loop, void *user) {
  calls *c = user;
  (void)srv;
  if (loop == NULL || w != c->worker)
    atomic_fetch_add(&c->no_loop, 1);
  if (pthread_equal(pthread_self(), main_thread))
    atomic_fetch_add(&c->on_main, 1);
  c->next++;
  atomic_fetch_add(&c->ran, 1);
}

typedef struct {
  calls *c;
  int seq;
} seq_call;

static void in_order(tern_server *srv, unsigned w, void *loop, void *user) {
  seq_call *sc = user;
  (void)srv;
  (void)w;
  (void)loop;
  if (sc->seq != sc->c->next)
    atomic_fetch_add(&sc->c->out_of_order, 1);
  sc->c->next++;
  atomic_fetch_add(&sc->c->ran, 1);
}

static void test_worker_call(void) {
  server s;
  static calls c[NWORKERS];
  static seq_call sc[100];
  tern_server *idle;
  tern_settings st;
  unsigned w;
  int i;

  /* Not running yet: refused with a log line. */
  tern_settings_init(&st);
  st.log = capture;
  T_EQ_INT(tern_server_new(&st, &idle), 0);
  nlogs = 0;
  T_EQ_INT(tern_worker_call(idle, 0, counted, &c[0]), TERN_ESTATE);
  T_EQ_INT(nlogs, 1);
  tern_server_free(idle);

  memset(c, 0, sizeof(c));
  start(&s);
  T_EQ_INT(tern_worker_call(s.srv, NWORKERS, counted, &c[0]), TERN_EINVAL);
  T_EQ_INT(tern_worker_call(s.srv, 0, NULL, &c[0]), TERN_EINVAL);
  T_EQ_INT(tern_worker_call(NULL, 0, counted, &c[0]), TERN_EINVAL);
  for (w = 0; w < NWORKERS; w++) {
    c[w].worker = w;
    T_EQ_INT(tern_worker_call(s.srv, w, counted, &c[w]), 0);
  }
  for (w = 0; w < NWORKERS; w++) {
    T_ASSERT(wait_for(&c[w].ran, 1));
    T_EQ_INT(c[w].no_loop, 0);
    T_EQ_INT(c[w].on_main, 0);
  }
  T_EQ_INT(tern_server_on_workers(s.srv, NULL, NULL, NULL), TERN_ESTATE);
  /* A hundred calls to one worker run in the order they were posted. */
  c[1].next = 0;
  atomic_store(&c[1].ran, 0);
  for (i = 0; i < 100; i++) {
    sc[i].c = &c[1];
    sc[i].seq = i;
    T_EQ_INT(tern_worker_call(s.srv, 1, in_order, &sc[i]), 0);
  }
  T_ASSERT(wait_for(&c[1].ran, 100));
  T_EQ_INT(c[1].out_of_order, 0);
  for (w = 0; w < NWORKERS; w++)
    T_EQ_INT(started[w], 1);
  T_EQ_INT(tern_stop(s.srv, 2000), 0);
  pthread_join(s.t, NULL);
  for (w = 0; w < NWORKERS; w++)
    T_EQ_INT(stopped[w], 1);
  /* Stopped: the workers take no more calls. */
  T_EQ_INT(tern_worker_call(s.srv, 0, counted, &c[0]), TERN_ECLOSED);
  tern_server_free(s.srv);
  T_ASSERT(no_live_blocks());
}

/* A client that leaves while its request's timer is pending: the gone
 * callback runs, stops the timer and finishes the request; nothing of
 * tern's or the handler's is left. */
static void test_client_gone_while_waiting(void) {
  server s;
  const char *req = "GET /wait/5000 HTTP/1.1\r\nHost: x\r\n\r\n";
  int fd, i;
  atomic_store(&gone_seen, 0);
  atomic_store(&late_answers, 0);
  start(&s);
  for (i = 0; i < 3; i++) {
    fd = sweep_connect(s.port);
    T_ASSERT(fd >= 0);
    T_ASSERT(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
    T_ASSERT(wait_for(&timers_open, 1));
    close(fd);
    T_ASSERT(wait_for(&gone_seen, i + 1));
    T_ASSERT(wait_for(&timers_open, 0));
  }
  T_EQ_INT(late_answers, 0);
  finish(&s);
}

int main(void) {
  T_RUN(test_timer_responds);
  T_RUN(test_blocking_has_no_loop);
  T_RUN(test_ws_has_loop);
  T_RUN(test_worker_call);
  T_RUN(test_client_gone_while_waiting);
  return T_DONE();
}
