/* The server's own API edges: settings and routes that must be refused
 * (with a log line naming the problem), and tern_stop calls that must be
 * honoured whenever they come, even while tern_run is still starting. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "count_alloc.h"
#include "capture_log.h"
#include "t.h"
#include "tern.h"

static void settings(tern_settings *s) {
  tern_settings_init(s);
  s->workers = 1;
  s->log = capture;
  ca_use(s);
  nlogs = 0;
  last_log[0] = '\0';
}

/* A refused setting: TERN_EINVAL, nothing allocated, and one log line
 * that names the field. */
#define REFUSED(field, value)                                                  \
  do {                                                                         \
    tern_settings s;                                                           \
    tern_server *srv = NULL;                                                   \
    settings(&s);                                                              \
    s.field = value;                                                           \
    T_EQ_INT(tern_server_new(&s, &srv), TERN_EINVAL);                          \
    T_ASSERT(srv == NULL);                                                     \
    T_EQ_INT(nlogs, 1);                                                        \
    if (strstr(last_log, #field) == NULL)                                      \
      T_FAIL("log line \"%s\" does not name %s", last_log, #field);            \
    T_EQ_INT(ca_live, 0);                                                      \
  } while (0)

static void test_settings_out_of_range(void) {
  REFUSED(log_level, 99);
  REFUSED(log_level, -1);
  REFUSED(tcp_nodelay, 2);
  REFUSED(workers, 5000);
  REFUSED(max_head_size, 10);
  REFUSED(max_head_size, 1u << 30);
  REFUSED(max_header_count, 0);
  REFUSED(max_header_count, 1u << 20);
  REFUSED(max_uri_length, 0);
  REFUSED(max_body_size, 0);
  REFUSED(head_timeout_ms, 0);
  REFUSED(idle_timeout_ms, 0);
  REFUSED(body_timeout_ms, 0);
  REFUSED(max_connections, 0);
  REFUSED(max_pipeline, 0);
  REFUSED(max_pipeline, 100000);
  REFUSED(read_buffer_size, 100);
  REFUSED(read_buffer_size, 1u << 30);
  REFUSED(version, 7);
}

static void test_settings_in_range(void) {
  tern_settings s;
  tern_server *srv = NULL;
  settings(&s);
  s.log_level = TERN_LOG_DEBUG;
  s.tcp_nodelay = 0;
  s.max_pipeline = 1024;
  T_EQ_INT(tern_server_new(&s, &srv), 0);
  T_EQ_INT(nlogs, 0);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
}

static void nop(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 204, NULL, 0, NULL, 0);
}

static int route_with(tern_server *srv, const char *pattern, unsigned flags,
                      const char *expect) {
  tern_route_options o;
  int rc;
  tern_route_options_init(&o);
  o.flags = flags;
  nlogs = 0;
  last_log[0] = '\0';
  rc = tern_route_with(srv, "GET", pattern, nop, NULL, &o);
  if (expect != NULL && (nlogs != 1 || strstr(last_log, expect) == NULL))
    return 99;
  if (expect == NULL && nlogs != 0)
    return 98;
  return rc;
}

static void test_routes_refused(void) {
  tern_settings s;
  tern_server *srv;
  tern_route_options o;
  settings(&s);
  T_EQ_INT(tern_server_new(&s, &srv), 0);
  T_EQ_INT(route_with(srv, "/q/:x/:x", 0, "used twice"), TERN_EINVAL);
  T_EQ_INT(route_with(srv, "/q/:x/a/:x/*", 0, "used twice"), TERN_EINVAL);
  T_EQ_INT(route_with(srv, "/q/:x/:xy", 0, NULL), 0);
  T_EQ_INT(route_with(srv, "/f", 1u << 5, "unknown flag"), TERN_EINVAL);
  T_EQ_INT(route_with(srv, "/f", TERN_ROUTE_BLOCKING | TERN_ROUTE_STREAM_BODY,
                      "together"),
           TERN_EINVAL);
  T_EQ_INT(route_with(srv, "/f", TERN_ROUTE_BLOCKING, NULL), 0);
  T_EQ_INT(route_with(srv, "/g", TERN_ROUTE_STREAM_BODY, NULL), 0);
  T_EQ_INT(route_with(srv, "no-slash", 0, "start with '/'"), TERN_EINVAL);
  /* Virtual hosts: names only, the same route twice on one host refused,
   * the same pattern on another host (and on none) taken. */
  {
    static const char *const bad[] = {"",     "*.",         "a b", "a/b",
                                      "a:80", "*x.example", "*"};
    size_t i;
    tern_route_options_init(&o);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
      o.host = bad[i];
      T_EQ_INT(tern_route_with(srv, "GET", "/h", nop, NULL, &o), TERN_EINVAL);
    }
    o.host = "a.example";
    T_EQ_INT(tern_route_with(srv, "GET", "/h", nop, NULL, &o), 0);
    o.host = "A.EXAMPLE";
    T_EQ_INT(tern_route_with(srv, "GET", "/h", nop, NULL, &o), TERN_EEXIST);
    o.host = "*.a.example";
    T_EQ_INT(tern_route_with(srv, "GET", "/h", nop, NULL, &o), 0);
    T_EQ_INT(tern_route(srv, "GET", "/h", nop, NULL), 0);
  }
  /* The default handler takes the same options, with the same checks. */
  tern_route_options_init(&o);
  o.flags = TERN_ROUTE_BLOCKING | TERN_ROUTE_STREAM_BODY;
  nlogs = 0;
  T_EQ_INT(tern_server_set_default_handler(srv, nop, NULL, &o), TERN_EINVAL);
  T_EQ_INT(nlogs, 1);
  o.flags = 0;
  o.version = 42;
  T_EQ_INT(tern_server_set_default_handler(srv, nop, NULL, &o), TERN_EINVAL);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
}

/* ---- tern_stop during start-up ----------------------------------- */

static void *run_thread(void *arg) {
  tern_server *srv = arg;
  static int rc;
  rc = tern_run(srv);
  return &rc;
}

/* Each try starts tern_run on a thread and stops it at once, from the
 * main thread, racing the start-up. The old code lost most such stops
 * (TERN_ESTATE while starting) and tern_run never returned. A try whose
 * server has not returned within 5 s fails the test. */
static void test_stop_while_starting(void) {
  int i;
  for (i = 0; i < 60; i++) {
    tern_settings s;
    tern_server *srv;
    pthread_t t;
    struct timespec until;
    void *res;
    int rc;
    settings(&s);
    s.workers = 1 + (unsigned)(i % 3);
    T_EQ_INT(tern_server_new(&s, &srv), 0);
    T_EQ_INT(tern_listen(srv, "127.0.0.1", 0, NULL), 0);
    T_EQ_INT(pthread_create(&t, NULL, run_thread, srv), 0);
    if (i % 4 == 1) {
      struct timespec ts = {0, (i % 7) * 100000L};
      nanosleep(&ts, NULL);
    }
    T_EQ_INT(tern_stop(srv, 100), 0);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    rc = pthread_timedjoin_np(t, &res, &until);
    if (rc != 0)
      T_FAIL("try %d: tern_run did not return after tern_stop", i);
    T_EQ_INT(*(int *)res, 0);
    tern_server_free(srv);
  }
  T_EQ_INT(ca_live, 0);
}

/* A stop before tern_run is remembered too: tern_run starts, stops at
 * once and returns. A stop after it returned is refused. */
static void test_stop_before_run(void) {
  tern_settings s;
  tern_server *srv;
  settings(&s);
  T_EQ_INT(tern_server_new(&s, &srv), 0);
  T_EQ_INT(tern_listen(srv, "127.0.0.1", 0, NULL), 0);
  T_EQ_INT(tern_stop(srv, 100), 0);
  T_EQ_INT(tern_run(srv), 0);
  T_EQ_INT(tern_stop(srv, 100), TERN_ESTATE);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
}

/* ---- The stop deadline cuts held requests ----------------------------- */

static tern_request *_Atomic held, *_Atomic held_started;
static _Atomic int sleeper_in, sleeper_rc = 1, sleeper_out, sleeper_path;

static void hold(tern_request *r, void *user) {
  (void)user;
  atomic_store(&held, r);
}

static void hold_started(tern_request *r, void *user) {
  (void)user;
  tern_response_start(r, 200, NULL, 0, -1);
  atomic_store(&held_started, r);
}

static void sleeper(tern_request *r, void *user) {
  struct timespec ts = {0, 400 * 1000000L};
  (void)user;
  atomic_store(&sleeper_in, 1);
  nanosleep(&ts, NULL);
  {
    /* Cut meanwhile, the request still reads as it came. */
    size_t len;
    const char *p = tern_request_path(r, &len);
    atomic_store(&sleeper_path, len == 6 && memcmp(p, "/sleep", 6) == 0);
  }
  atomic_store(&sleeper_rc, tern_respond(r, 200, NULL, 0, "late", 4));
  atomic_store(&sleeper_out, 1);
}

static int send_get(int port, const char *target) {
  struct sockaddr_in sa;
  struct timeval tv = {5, 0};
  char req[128];
  int fd = socket(AF_INET, SOCK_STREAM, 0), n;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  return fd;
}

static int read_status(int fd) {
  char buf[256];
  size_t len = 0;
  ssize_t n;
  while (len < sizeof(buf) - 1 &&
         (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
    len += (size_t)n;
  buf[len] = '\0';
  close(fd);
  return len > 12 && memcmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : -1;
}

static void wait_for(_Atomic int *flag, tern_request *_Atomic *req) {
  int i;
  for (i = 0; i < 500; i++) {
    struct timespec ts = {0, 10 * 1000000L};
    if ((flag != NULL && atomic_load(flag)) ||
        (req != NULL && atomic_load(req) != NULL))
      return;
    nanosleep(&ts, NULL);
  }
  T_FAIL("a handler never ran");
}

/* Requests held past the deadline by a handler that never answers, by one
 * that started its response, and by a blocking handler still sleeping:
 * tern_run returns at the deadline anyway, the clients get 503 (a close
 * for the started one), and the late calls (made after tern_server_free,
 * even) return TERN_ECLOSED and give back every byte. */
static void test_deadline_cuts_held_requests(void) {
  tern_settings s;
  tern_server *srv;
  tern_route_options blocking;
  pthread_t t;
  struct timespec until;
  int port, fd1, fd2, fd3, i;
  void *res;

  settings(&s);
  s.log = NULL;
  T_EQ_INT(tern_server_new(&s, &srv), 0);
  tern_route_options_init(&blocking);
  blocking.flags = TERN_ROUTE_BLOCKING;
  T_EQ_INT(tern_route(srv, "GET", "/hold", hold, NULL), 0);
  T_EQ_INT(tern_route(srv, "GET", "/started", hold_started, NULL), 0);
  T_EQ_INT(tern_route_with(srv, "GET", "/sleep", sleeper, NULL, &blocking), 0);
  T_EQ_INT(tern_listen(srv, "127.0.0.1", 0, &port), 0);
  T_EQ_INT(pthread_create(&t, NULL, run_thread, srv), 0);
  fd1 = send_get(port, "/hold");
  fd2 = send_get(port, "/started");
  fd3 = send_get(port, "/sleep");
  T_ASSERT(fd1 >= 0 && fd2 >= 0 && fd3 >= 0);
  wait_for(NULL, &held);
  wait_for(NULL, &held_started);
  wait_for(&sleeper_in, NULL);
  T_EQ_INT(tern_stop(srv, 50), 0);
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5;
  T_EQ_INT(pthread_timedjoin_np(t, &res, &until), 0);
  T_EQ_INT(*(int *)res, 0);
  T_EQ_INT(atomic_load(&sleeper_out), 0); /* it returned before the sleeper */
  T_EQ_INT(read_status(fd1), 503);
  T_EQ_INT(read_status(fd2), 200); /* started: the stream is cut */
  T_EQ_INT(read_status(fd3), 503);
  tern_server_free(srv);
  /* The held requests are still valid for their holders, views included. */
  {
    size_t len;
    const char *p = tern_request_path(held, &len);
    T_EQ_STR(p, len, "/hold");
    p = tern_request_header(held, "host", 4, &len);
    T_EQ_STR(p, len, "x");
  }
  T_EQ_INT(tern_response_write(held_started, "x", 1, NULL, NULL), TERN_ECLOSED);
  T_EQ_INT(tern_response_end(held_started, NULL, 0), TERN_ECLOSED);
  T_EQ_INT(tern_response_start(held, 200, NULL, 0, -1), TERN_ECLOSED);
  T_EQ_INT(tern_respond(held, 200, NULL, 0, "x", 1), TERN_ECLOSED);
  wait_for(&sleeper_out, NULL);
  T_EQ_INT(atomic_load(&sleeper_rc), TERN_ECLOSED);
  T_EQ_INT(atomic_load(&sleeper_path), 1);
  /* The pool thread lets go of the server once its handler returned. */
  for (i = 0; i < 200 && ca_live != 0; i++) {
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  T_EQ_INT(ca_live, 0);
}

/* ---- The access hook ---------------------------------------------- */

/* What the hook saw, copied during the call (the entry is valid only
 * then). */
typedef struct {
  char target[32];
  int status, protocol;
  unsigned flags;
  void *data;
  uint32_t size;
  int64_t handler_ns, last_byte_ns, start_unix_us;
  char peer[64];
} seen_entry;
static seen_entry seen[8];
static _Atomic int nseen;
static int data_marker;

static void on_access(const tern_access_entry *e, void *user) {
  int i = atomic_fetch_add(&nseen, 1);
  size_t n = e->target_len < 31 ? e->target_len : 31;
  T_ASSERT(user == &nseen);
  if (i >= 8)
    return;
  memcpy(seen[i].target, e->target, n);
  seen[i].target[n] = 0;
  seen[i].status = e->status;
  seen[i].protocol = e->protocol;
  seen[i].flags = e->flags;
  seen[i].data = e->data;
  seen[i].size = e->size;
  seen[i].handler_ns = e->handler_ns;
  seen[i].last_byte_ns = e->last_byte_ns;
  seen[i].start_unix_us = e->start_unix_us;
  snprintf(seen[i].peer, sizeof(seen[i].peer), "%s", e->peer);
}

static void with_data(tern_request *r, void *user) {
  (void)user;
  tern_request_set_data(r, &data_marker);
  tern_respond(r, 200, NULL, 0, "ok", 2);
}

static const seen_entry *seen_for(const char *target) {
  int i, n = atomic_load(&nseen);
  for (i = 0; i < n && i < 8; i++)
    if (strcmp(seen[i].target, target) == 0)
      return &seen[i];
  T_FAIL("no access entry for %s", target);
  return NULL;
}

/* The hook runs once per request: a handled one (with the user's data),
 * one tern answers itself, one the stop deadline cuts; installing it is
 * refused while the server runs. */
static void test_access_hook(void) {
  tern_settings s;
  tern_server *srv;
  pthread_t t;
  struct timespec until;
  const seen_entry *e;
  int port, fd;
  void *res;

  settings(&s);
  s.log = NULL;
  s.workers = 2;
  T_EQ_INT(tern_server_new(&s, &srv), 0);
  T_EQ_INT(tern_server_on_access(NULL, on_access, NULL), TERN_EINVAL);
  T_EQ_INT(tern_server_on_access(srv, on_access, &nseen), 0);
  T_EQ_INT(tern_route(srv, "GET", "/data", with_data, NULL), 0);
  T_EQ_INT(tern_route(srv, "GET", "/hold2", hold, NULL), 0);
  T_EQ_INT(tern_listen(srv, "127.0.0.1", 0, &port), 0);
  atomic_store(&held, NULL);
  T_EQ_INT(pthread_create(&t, NULL, run_thread, srv), 0);
  T_EQ_INT(read_status(send_get(port, "/data")), 200);
  T_EQ_INT(read_status(send_get(port, "/nope")), 404);
  fd = send_get(port, "/hold2");
  wait_for(NULL, &held);
  T_EQ_INT(tern_server_on_access(srv, NULL, NULL), TERN_ESTATE);
  T_EQ_INT(tern_stop(srv, 50), 0);
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5;
  T_EQ_INT(pthread_timedjoin_np(t, &res, &until), 0);
  T_EQ_INT(read_status(fd), 503);
  tern_server_free(srv);
  T_EQ_INT(tern_respond(held, 200, NULL, 0, "x", 1), TERN_ECLOSED);

  T_EQ_INT(atomic_load(&nseen), 3);
  e = seen_for("/data");
  T_EQ_INT(e->status, 200);
  T_EQ_INT(e->protocol, TERN_PROTO_HTTP11);
  T_EQ_INT(e->flags, 0);
  T_ASSERT(e->data == &data_marker);
  T_EQ_INT(e->size, sizeof(tern_access_entry));
  T_ASSERT(e->handler_ns >= 0 && e->last_byte_ns >= e->handler_ns);
  T_ASSERT(e->start_unix_us > (int64_t)1700000000 * 1000000);
  T_EQ_STR(e->peer, strlen(e->peer), "127.0.0.1");
  e = seen_for("/nope");
  T_EQ_INT(e->status, 404);
  T_EQ_INT(e->flags, TERN_ACCESS_SELF);
  T_ASSERT(e->data == NULL && e->handler_ns == -1);
  e = seen_for("/hold2");
  T_EQ_INT(e->status, 503);
  T_ASSERT(e->handler_ns >= 0);
  T_EQ_INT(ca_live, 0);
}

/* systemd's LISTEN_FDS with LISTEN_FDNAMES (the descriptors are only
 * numbered here, 3 and 4, and made close-on-exec: harmless in a test). */
static void listen_env(const char *fds, const char *names) {
  char pid[32];
  snprintf(pid, sizeof(pid), "%ld", (long)getpid());
  setenv("LISTEN_PID", pid, 1);
  setenv("LISTEN_FDS", fds, 1);
  if (names != NULL)
    setenv("LISTEN_FDNAMES", names, 1);
  else
    unsetenv("LISTEN_FDNAMES");
}

static void test_listen_fd_names(void) {
  char names[2][TERN_LISTEN_FD_NAME_MAX], longname[300];
  int fds[2];

  listen_env("2", "web:quic");
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), 2);
  T_EQ_INT(fds[0], 3);
  T_EQ_INT(fds[1], 4);
  T_EQ_STR(names[0], strlen(names[0]), "web");
  T_EQ_STR(names[1], strlen(names[1]), "quic");
  T_ASSERT(getenv("LISTEN_FDS") == NULL && getenv("LISTEN_PID") == NULL &&
           getenv("LISTEN_FDNAMES") == NULL);
  /* Gone from the environment: nothing the second time. */
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), 0);

  listen_env("2", NULL);
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), 2);
  T_EQ_STR(names[0], strlen(names[0]), "unknown");
  T_EQ_STR(names[1], strlen(names[1]), "unknown");

  /* Names that do not match the count, or too long, are refused, and
   * the environment stays. */
  listen_env("2", "web");
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), TERN_EINVAL);
  T_ASSERT(getenv("LISTEN_FDS") != NULL);
  listen_env("1", "web:quic");
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), TERN_EINVAL);
  memset(longname, 'a', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  listen_env("1", longname);
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), TERN_EINVAL);
  longname[TERN_LISTEN_FD_NAME_MAX - 1] = '\0'; /* 255: the longest */
  listen_env("1", longname);
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), 1);
  T_EQ_INT(strlen(names[0]), TERN_LISTEN_FD_NAME_MAX - 1);
  /* More descriptors than room. */
  listen_env("3", "a:b:c");
  T_EQ_INT(tern_listen_fds_from_env_named(fds, names, 2), TERN_ENOMEM);
  /* The unnamed call ignores the names, even malformed ones. */
  listen_env("1", "a:b");
  T_EQ_INT(tern_listen_fds_from_env(fds, 2), 1);
  unsetenv("LISTEN_FDNAMES");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_PID");
}

int main(void) {
  T_RUN(test_settings_out_of_range);
  T_RUN(test_settings_in_range);
  T_RUN(test_routes_refused);
  T_RUN(test_stop_while_starting);
  T_RUN(test_stop_before_run);
  T_RUN(test_deadline_cuts_held_requests);
  T_RUN(test_access_hook);
  T_RUN(test_listen_fd_names);
  return T_DONE();
}
