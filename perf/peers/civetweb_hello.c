/*
 * civetweb_hello.c - the CivetWeb peer for the tern benchmarks.
 *
 * CivetWeb (Debian's libcivetweb 1.15) with one worker thread
 * (num_threads 1) and keep-alive on.  CivetWeb serves each connection on
 * a worker thread from its first request until it closes, so with one
 * worker, connections are served one after the other, not side by side:
 * other connections wait in the accept queue meanwhile.  CivetWeb also runs
 * its own master (accept) thread and a timer thread.  All num_threads
 * workers are started by mg_start().
 *
 * keep_alive_timeout_ms is 300000 (nginx's keepalive_timeout in the
 * benchmarks): CivetWeb's default, 500 ms, closes a keep-alive connection
 * half a second after its last request, so no idle connection would stay.
 *
 *   civetweb_hello --port N [--threads T] [--max-conns M]
 *       N: 0 = any; prints "listening on PORT", flushed.
 *       T: num_threads, 1 by default (the benchmarks' setting).
 *       M: accepted for the benchmark driver's sake and ignored: the
 *          connections served at once are bounded by num_threads (the
 *          driver gives idle-conns one thread per connection, plus 64).
 *          The file descriptor limit is raised to its hard limit at start.
 *
 *   GET /                    200 "Hello, World!" (text/plain)
 *   GET /api/v1/R/:id        200 "R ID RID"         (text/plain)
 *   GET /api/v1/R/:id/detail 200 "R ID detail RID"  (text/plain)
 *   anything else            404
 *
 * R is one of 25 resources and RID the X-Request-Id header: the app-routed
 * scenario, 50 routes.  Each route is a CivetWeb request handler on a URI
 * pattern: "/api/v1/R/" then "*$" for ":id", or "*" "/detail$" for
 * ":id/detail" ("*" matches within one segment, "$" anchors the end; the
 * match ignores case).  CivetWeb does not capture, so the handler takes
 * ":id" from the segment after "/api/v1/R/".  An unknown path gets
 * CivetWeb's own 404 (with no document_root it serves no files).
 *
 * Build: cc -std=c11 -O2 civetweb_hello.c -lcivetweb
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <civetweb.h>

static const char *const resources[25] = {
    "users",    "orders",   "items",   "carts",    "payments",
    "invoices", "products", "reviews", "sessions", "tokens",
    "teams",    "projects", "tasks",   "comments", "files",
    "folders",  "tags",     "events",  "alerts",   "reports",
    "metrics",  "logs",     "jobs",    "queues",   "webhooks"};

struct route {
  char pattern[64];
  const char *name; /* the resource */
  size_t prefix;    /* strlen("/api/v1/<name>/"): where ":id" starts */
  int detail;
};

static struct route routes[50];

static int send_text(struct mg_connection *conn, const char *body, size_t len) {
  mg_send_http_ok(conn, "text/plain", (long long)len);
  mg_write(conn, body, len);
  return 200;
}

static int on_hello(struct mg_connection *conn, void *cbdata) {
  const struct mg_request_info *ri = mg_get_request_info(conn);
  (void)cbdata;
  if (strcmp(ri->request_method, "GET") != 0)
    return 0; /* not handled: CivetWeb answers 404 */
  return send_text(conn, "Hello, World!", 13);
}

static int on_app(struct mg_connection *conn, void *cbdata) {
  const struct route *rt = cbdata;
  const struct mg_request_info *ri = mg_get_request_info(conn);
  const char *id = ri->local_uri + rt->prefix;
  const char *rid = mg_get_header(conn, "X-Request-Id");
  size_t id_len = strcspn(id, "/");
  char body[256];
  int n;
  if (strcmp(ri->request_method, "GET") != 0 || id_len == 0)
    return 0;
  n = snprintf(body, sizeof(body), "%s %.*s %s%s", rt->name, (int)id_len, id,
               rt->detail ? "detail " : "", rid ? rid : "");
  if (n < 0 || n >= (int)sizeof(body))
    n = 0;
  return send_text(conn, body, (size_t)n);
}

int main(int argc, char **argv) {
  struct mg_callbacks callbacks;
  struct mg_context *ctx;
  struct mg_server_port ports[4];
  const char *port = "8080", *threads = "1";
  char listen_on[64];
  const char *options[] = {"listening_ports",
                           listen_on,
                           "num_threads",
                           threads,
                           "enable_keep_alive",
                           "yes",
                           "keep_alive_timeout_ms",
                           "300000",
                           "tcp_nodelay",
                           "1",
                           NULL};
  struct rlimit rl;
  sigset_t set;
  size_t i;
  int a, n, sig;

  for (a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--port") == 0 && a + 1 < argc) {
      port = argv[++a];
    } else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
      threads = argv[++a];
    } else if (strcmp(argv[a], "--max-conns") == 0 && a + 1 < argc) {
      a++;
    } else {
      fprintf(stderr, "usage: %s [--port N] [--threads T] [--max-conns M]\n",
              argv[0]);
      return 2;
    }
  }
  options[3] = threads;
  snprintf(listen_on, sizeof(listen_on), "127.0.0.1:%s", port);
  signal(SIGPIPE, SIG_IGN);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  /* Blocked before CivetWeb's threads start, so that only sigwait()
   * below takes SIGINT/SIGTERM. */
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);

  mg_init_library(0);
  memset(&callbacks, 0, sizeof(callbacks));
  ctx = mg_start(&callbacks, NULL, options);
  if (ctx == NULL) {
    fprintf(stderr, "mg_start failed\n");
    return 1;
  }

  mg_set_request_handler(ctx, "/$", on_hello, NULL);
  for (i = 0; i < 25; i++) {
    struct route *r = &routes[2 * i];
    snprintf(r[0].pattern, sizeof(r[0].pattern), "/api/v1/%s/*$", resources[i]);
    snprintf(r[1].pattern, sizeof(r[1].pattern), "/api/v1/%s/*/detail$",
             resources[i]);
    r[0].name = r[1].name = resources[i];
    r[0].prefix = r[1].prefix = strlen("/api/v1//") + strlen(resources[i]);
    r[1].detail = 1;
    mg_set_request_handler(ctx, r[0].pattern, on_app, &r[0]);
    mg_set_request_handler(ctx, r[1].pattern, on_app, &r[1]);
  }

  n = mg_get_server_ports(ctx, 4, ports);
  if (n < 1) {
    fprintf(stderr, "no listening port\n");
    mg_stop(ctx);
    return 1;
  }
  printf("listening on %d\n", ports[0].port);
  fflush(stdout);

  sigwait(&set, &sig);
  mg_stop(ctx);
  mg_exit_library();
  return 0;
}
