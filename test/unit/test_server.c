/* The server's own API edges: settings and routes that must be refused
 * (with a log line naming the problem), and tern_stop calls that must be
 * honoured whenever they come, even while tern_run is still starting. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "count_alloc.h"
#include "t.h"
#include "tern.h"

static char last_log[512];
static int nlogs;

static void capture(int level, const char *msg, size_t len, void *user) {
  (void)level;
  (void)user;
  if (len >= sizeof(last_log))
    len = sizeof(last_log) - 1;
  memcpy(last_log, msg, len);
  last_log[len] = '\0';
  nlogs++;
}

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
    T_EQ_INT(tern_server_new(&srv, &s), TERN_EINVAL);                          \
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
  T_EQ_INT(tern_server_new(&srv, &s), 0);
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
  T_EQ_INT(tern_server_new(&srv, &s), 0);
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
  /* The default handler takes the same options, with the same checks. */
  tern_route_options_init(&o);
  o.flags = TERN_ROUTE_BLOCKING | TERN_ROUTE_STREAM_BODY;
  nlogs = 0;
  T_EQ_INT(tern_set_default_handler(srv, nop, NULL, &o), TERN_EINVAL);
  T_EQ_INT(nlogs, 1);
  o.flags = 0;
  o.version = 42;
  T_EQ_INT(tern_set_default_handler(srv, nop, NULL, &o), TERN_EINVAL);
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
    T_EQ_INT(tern_server_new(&srv, &s), 0);
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
  T_EQ_INT(tern_server_new(&srv, &s), 0);
  T_EQ_INT(tern_listen(srv, "127.0.0.1", 0, NULL), 0);
  T_EQ_INT(tern_stop(srv, 100), 0);
  T_EQ_INT(tern_run(srv), 0);
  T_EQ_INT(tern_stop(srv, 100), TERN_ESTATE);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
}

int main(void) {
  T_RUN(test_settings_out_of_range);
  T_RUN(test_settings_in_range);
  T_RUN(test_routes_refused);
  T_RUN(test_stop_while_starting);
  T_RUN(test_stop_before_run);
  return T_DONE();
}
