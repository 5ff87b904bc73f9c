/*
 * libh2o_hello.c - the libh2o peer for the tern benchmarks.
 *
 * libh2o (Debian's libh2o-evloop, h2o 2.2.5) embedded with its own event
 * loop (h2o_evloop_t): one thread, one loop, one listening socket.
 *
 *   libh2o_hello --port N [--max-conns M]
 *       N: 0 = any; prints "listening on PORT", flushed.
 *       M: accepted for the benchmark driver's sake and ignored: libh2o
 *          sets no connection limit of its own (the file descriptor limit,
 *          raised to its hard limit at start, is the only one).
 *
 *   GET /                    200 "Hello, World!" (text/plain)
 *   GET /api/v1/R/:id        200 "R ID RID"         (text/plain)
 *   GET /api/v1/R/:id/detail 200 "R ID detail RID"  (text/plain)
 *   anything else            404
 *
 * R is one of 25 resources and RID the X-Request-Id header: the app-routed
 * scenario, 50 routes.  libh2o routes by path prefix only (pathconf), so
 * each resource gets a pathconf "/api/v1/R" with its own handler, and the
 * handler parses the rest of the path (":id" and an optional "/detail"),
 * which is how a libh2o application expresses such routes.
 *
 * Build: cc -std=c11 -O2 libh2o_hello.c -lh2o-evloop -lssl -lcrypto
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define H2O_USE_EPOLL 1 /* the evloop backend, not libuv */

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <h2o.h>

/* A handler for one resource: its pathconf is "/api/v1/<name>". */
struct app_handler {
  h2o_handler_t super;
  const char *name;
  size_t name_len;
};

static const char *const resources[25] = {
    "users",    "orders",   "items",   "carts",    "payments",
    "invoices", "products", "reviews", "sessions", "tokens",
    "teams",    "projects", "tasks",   "comments", "files",
    "folders",  "tags",     "events",  "alerts",   "reports",
    "metrics",  "logs",     "jobs",    "queues",   "webhooks"};

static h2o_globalconf_t config;
static h2o_context_t ctx;
static h2o_accept_ctx_t accept_ctx;

static int is_get(h2o_req_t *req) {
  return h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET"));
}

static void send_text(h2o_req_t *req, const char *body, size_t len) {
  req->res.status = 200;
  req->res.reason = "OK";
  req->res.content_length = len; /* else it goes out chunked */
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                 H2O_STRLIT("text/plain"));
  h2o_send_inline(req, body, len);
}

static void send_404(h2o_req_t *req) {
  h2o_send_error_404(req, "Not Found", "Not Found", 0);
}

static int on_hello(h2o_handler_t *self, h2o_req_t *req) {
  (void)self;
  /* The "/" pathconf sees every path no other pathconf took. */
  if (!is_get(req) || !h2o_memis(req->path_normalized.base,
                                 req->path_normalized.len, H2O_STRLIT("/"))) {
    send_404(req);
    return 0;
  }
  send_text(req, H2O_STRLIT("Hello, World!"));
  return 0;
}

static int on_app(h2o_handler_t *self, h2o_req_t *req) {
  struct app_handler *h = (struct app_handler *)self;
  const char *p = req->path_normalized.base;
  const char *end = p + req->path_normalized.len;
  const char *id, *rid = "";
  size_t id_len, rid_len = 0;
  int detail = 0, n;
  ssize_t hi;
  char body[256];

  /* The pathconf matched "/api/v1/<name>" followed by "/" or the end. */
  p += sizeof("/api/v1/") - 1 + h->name_len;
  if (!is_get(req) || p == end || *p != '/')
    goto not_found;
  id = ++p;
  while (p < end && *p != '/')
    p++;
  id_len = (size_t)(p - id);
  if (id_len == 0)
    goto not_found;
  if (p < end) {
    if (!h2o_memis(p, (size_t)(end - p), H2O_STRLIT("/detail")))
      goto not_found;
    detail = 1;
  }
  hi = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
  if (hi != -1) {
    rid = req->headers.entries[hi].value.base;
    rid_len = req->headers.entries[hi].value.len;
  }
  n = snprintf(body, sizeof(body), "%s %.*s %s%.*s", h->name, (int)id_len, id,
               detail ? "detail " : "", (int)rid_len, rid);
  if (n < 0 || n >= (int)sizeof(body))
    n = 0;
  send_text(req, body, (size_t)n);
  return 0;
not_found:
  send_404(req);
  return 0;
}

static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static void on_accept(h2o_socket_t *listener, const char *err) {
  h2o_socket_t *sock;
  if (err != NULL)
    return;
  if ((sock = h2o_evloop_socket_accept(listener)) == NULL)
    return;
  h2o_accept(&accept_ctx, sock);
}

static int listen_on(h2o_loop_t *loop, unsigned port) {
  struct sockaddr_in addr;
  socklen_t alen = sizeof(addr);
  h2o_socket_t *sock;
  int fd, one = 1;

  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((uint16_t)port);
  if ((fd = socket(AF_INET, SOCK_STREAM, 0)) == -1 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
      listen(fd, 4096) != 0 ||
      getsockname(fd, (struct sockaddr *)&addr, &alen) != 0) {
    perror("listen");
    return -1;
  }
  sock = h2o_evloop_socket_create(loop, fd, H2O_SOCKET_FLAG_DONT_READ);
  h2o_socket_read_start(sock, on_accept);
  printf("listening on %u\n", (unsigned)ntohs(addr.sin_port));
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  h2o_hostconf_t *host;
  h2o_pathconf_t *path;
  h2o_handler_t *hello;
  unsigned long port = 8080;
  char prefix[64];
  size_t i;
  int a;

  for (a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--port") == 0 && a + 1 < argc) {
      port = strtoul(argv[++a], NULL, 10);
    } else if (strcmp(argv[a], "--max-conns") == 0 && a + 1 < argc) {
      a++;
    } else {
      fprintf(stderr, "usage: %s [--port N] [--max-conns M]\n", argv[0]);
      return 2;
    }
  }
  if (port > 65535) {
    fprintf(stderr, "bad port\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  raise_nofile();

  h2o_config_init(&config);
  host = h2o_config_register_host(&config,
                                  h2o_iovec_init(H2O_STRLIT("default")), 65535);
  /* Longer prefixes first: pathconfs are tried in registration order. */
  for (i = 0; i < 25; i++) {
    struct app_handler *h;
    snprintf(prefix, sizeof(prefix), "/api/v1/%s", resources[i]);
    path = h2o_config_register_path(host, prefix, 0);
    h = (struct app_handler *)h2o_create_handler(path, sizeof(*h));
    h->super.on_req = on_app;
    h->name = resources[i];
    h->name_len = strlen(resources[i]);
  }
  path = h2o_config_register_path(host, "/", 0);
  hello = h2o_create_handler(path, sizeof(*hello));
  hello->on_req = on_hello;

  h2o_context_init(&ctx, h2o_evloop_create(), &config);
  accept_ctx.ctx = &ctx;
  accept_ctx.hosts = config.hosts;
  if (listen_on(ctx.loop, (unsigned)port) != 0)
    return 1;
  /* A signal (the allocation shim's, for one) interrupts the loop's wait:
   * that is no reason to stop serving. */
  for (;;) {
    if (h2o_evloop_run(ctx.loop, INT32_MAX) != 0 && errno != EINTR) {
      perror("libh2o_hello: h2o_evloop_run");
      return 1;
    }
  }
}
