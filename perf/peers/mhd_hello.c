/*
 * mhd_hello.c - the libmicrohttpd peer for the tern benchmarks.
 *
 * GNU libmicrohttpd (Debian's 0.9.75) in epoll mode (MHD_USE_EPOLL) with
 * the application's own event loop: main() waits on libmicrohttpd's epoll
 * descriptor (MHD_DAEMON_INFO_EPOLL_FD) and a signalfd with poll(), for no
 * longer than MHD_get_timeout() says, then calls MHD_run().  All
 * connections are served by that one thread.
 *
 * Not MHD_USE_INTERNAL_POLLING_THREAD: 0.9.75's internal thread computes
 * its epoll_wait() timeout once (-1 when no connection timeout is set),
 * then calls epoll_wait() again with that same timeout as long as the
 * previous call filled its 128 events, before it processes any of them.
 * When exactly 128 events were pending (e.g. 127 new connections whose
 * requests have all arrived), the second epoll_wait() sleeps forever
 * while those requests wait, unread, in the daemon's ready list (the
 * sockets are edge-triggered, so no new event comes).  The idle-conns
 * scenario (256 connections set up at a time) hit it every time.  MHD_run()
 * makes that drain loop use a timeout of 0, and MHD_get_timeout() is 0
 * while the ready list is not empty.
 *
 *   mhd_hello --port N [--max-conns M]
 *       N: 0 = any; prints "listening on PORT", flushed.
 *       M: MHD_OPTION_CONNECTION_LIMIT; libmicrohttpd's default is
 *          FD_SETSIZE - 4 (1020).  The file descriptor limit is raised to
 *          its hard limit at start.
 *
 *   GET /                    200 "Hello, World!" (text/plain)
 *   GET /api/v1/R/:id        200 "R ID RID"         (text/plain)
 *   GET /api/v1/R/:id/detail 200 "R ID detail RID"  (text/plain)
 *   anything else            404
 *
 * R is one of 25 resources and RID the X-Request-Id header: the app-routed
 * scenario, 50 routes.  libmicrohttpd has no router, so the 50 patterns
 * live in a table that is scanned in order, each compared segment by
 * segment (":id" takes one non-empty segment), as a libmicrohttpd
 * application would do it.  "Hello, World!" and the 404 are responses made
 * once from static memory (MHD_RESPMEM_PERSISTENT) and queued again and
 * again; the routed bodies vary and are copied (MHD_RESPMEM_MUST_COPY).
 *
 * Build: cc -std=c11 -O2 mhd_hello.c -lmicrohttpd
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#define NROUTES 50

static const char *const resources[25] = {
    "users",    "orders",   "items",   "carts",    "payments",
    "invoices", "products", "reviews", "sessions", "tokens",
    "teams",    "projects", "tasks",   "comments", "files",
    "folders",  "tags",     "events",  "alerts",   "reports",
    "metrics",  "logs",     "jobs",    "queues",   "webhooks"};

struct route {
  char pattern[64]; /* "/api/v1/<resource>/:id" or ".../:id/detail" */
  const char *name; /* the resource */
  int detail;
};

static struct route routes[NROUTES];
static char hello_body[] = "Hello, World!";
static char not_found_body[] = "Not Found";
static struct MHD_Response *hello_resp, *not_found_resp;
static char headers_seen; /* *con_cls after the first call of a request */

/* Matches path against a pattern of literal and ":name" segments; the
 * first ":" segment's value is returned through id/id_len. */
static int route_match(const char *pat, const char *path, const char **id,
                       size_t *id_len) {
  while (*pat == '/' && *path == '/') {
    const char *pe, *se;
    pat++;
    path++;
    pe = pat + strcspn(pat, "/");
    se = path + strcspn(path, "/");
    if (*pat == ':') {
      if (se == path)
        return 0;
      *id = path;
      *id_len = (size_t)(se - path);
    } else if (pe - pat != se - path ||
               memcmp(pat, path, (size_t)(pe - pat)) != 0) {
      return 0;
    }
    pat = pe;
    path = se;
  }
  return *pat == '\0' && *path == '\0';
}

static struct MHD_Response *text_response(size_t len, void *body,
                                          enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
  if (r != NULL && MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                           "text/plain") != MHD_YES) {
    MHD_destroy_response(r);
    r = NULL;
  }
  return r;
}

static enum MHD_Result app(struct MHD_Connection *conn, const struct route *rt,
                           const char *id, size_t id_len) {
  const char *rid =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
  struct MHD_Response *resp;
  enum MHD_Result ret;
  char body[256];
  int n = snprintf(body, sizeof(body), "%s %.*s %s%s", rt->name, (int)id_len,
                   id, rt->detail ? "detail " : "", rid ? rid : "");
  if (n < 0 || n >= (int)sizeof(body))
    n = 0;
  resp = text_response((size_t)n, body, MHD_RESPMEM_MUST_COPY);
  if (resp == NULL)
    return MHD_NO;
  ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp); /* dropped once sent */
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  const char *id = NULL;
  size_t id_len = 0, i;
  (void)cls;
  (void)version;
  (void)upload;
  /* The first call only announces the request (headers parsed).  A
   * response queued then makes libmicrohttpd 0.9.75 discard the rest of
   * the connection's input and answer "Connection: close"; so answer on
   * the second call, once the (empty) request body has been read. */
  if (*con_cls == NULL) {
    *con_cls = &headers_seen;
    return MHD_YES;
  }
  if (*upload_size != 0) { /* a body: ignore it */
    *upload_size = 0;
    return MHD_YES;
  }
  if (strcmp(method, MHD_HTTP_METHOD_GET) == 0) {
    if (strcmp(url, "/") == 0)
      return MHD_queue_response(conn, MHD_HTTP_OK, hello_resp);
    for (i = 0; i < NROUTES; i++)
      if (route_match(routes[i].pattern, url, &id, &id_len))
        return app(conn, &routes[i], id, id_len);
  }
  return MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, not_found_resp);
}

int main(int argc, char **argv) {
  struct MHD_Daemon *d;
  const union MHD_DaemonInfo *info;
  struct sockaddr_in addr;
  unsigned long port = 8080;
  unsigned max_conns = 0; /* 0: libmicrohttpd's default */
  struct MHD_OptionItem opts[4];
  struct rlimit rl;
  struct pollfd pfd[2];
  sigset_t set;
  size_t i;
  int a;

  for (a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--port") == 0 && a + 1 < argc) {
      port = strtoul(argv[++a], NULL, 10);
    } else if (strcmp(argv[a], "--max-conns") == 0 && a + 1 < argc) {
      max_conns = (unsigned)strtoul(argv[++a], NULL, 10);
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
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  for (i = 0; i < 25; i++) {
    struct route *r = &routes[2 * i];
    snprintf(r[0].pattern, sizeof(r[0].pattern), "/api/v1/%s/:id",
             resources[i]);
    snprintf(r[1].pattern, sizeof(r[1].pattern), "/api/v1/%s/:id/detail",
             resources[i]);
    r[0].name = r[1].name = resources[i];
    r[1].detail = 1;
  }
  hello_resp =
      text_response(sizeof(hello_body) - 1, hello_body, MHD_RESPMEM_PERSISTENT);
  not_found_resp = text_response(sizeof(not_found_body) - 1, not_found_body,
                                 MHD_RESPMEM_PERSISTENT);
  if (hello_resp == NULL || not_found_resp == NULL)
    return 1;

  /* SIGINT/SIGTERM arrive through a signalfd, polled with the daemon. */
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  pfd[1].fd = signalfd(-1, &set, SFD_CLOEXEC);
  pfd[1].events = POLLIN;
  if (pfd[1].fd < 0) {
    perror("signalfd");
    return 1;
  }

  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons((uint16_t)port);
  opts[0].option = MHD_OPTION_SOCK_ADDR;
  opts[0].value = 0;
  opts[0].ptr_value = &addr;
  opts[1].option = MHD_OPTION_LISTEN_BACKLOG_SIZE;
  opts[1].value = 4096;
  opts[1].ptr_value = NULL;
  opts[2].option = max_conns ? MHD_OPTION_CONNECTION_LIMIT : MHD_OPTION_END;
  opts[2].value = (intptr_t)max_conns;
  opts[2].ptr_value = NULL;
  opts[3].option = MHD_OPTION_END;
  opts[3].value = 0;
  opts[3].ptr_value = NULL;
  d = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, (uint16_t)port, NULL,
                       NULL, on_request, NULL, MHD_OPTION_ARRAY, opts,
                       MHD_OPTION_END);
  if (d == NULL) {
    fprintf(stderr, "MHD_start_daemon failed\n");
    return 1;
  }
  info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  if (info == NULL || info->port == 0) {
    fprintf(stderr, "no bound port\n");
    return 1;
  }
  printf("listening on %u\n", (unsigned)info->port);
  fflush(stdout);
  info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
  if (info == NULL || info->epoll_fd < 0) {
    fprintf(stderr, "no epoll descriptor\n");
    return 1;
  }
  pfd[0].fd = info->epoll_fd;
  pfd[0].events = POLLIN;

  /* The event loop, until SIGINT/SIGTERM.  A timeout of 0 means that
   * connections have data ready already: MHD_run() at once, no poll(). */
  for (;;) {
    MHD_UNSIGNED_LONG_LONG t;
    int ms = -1;
    if (MHD_get_timeout(d, &t) == MHD_YES)
      ms = t > INT_MAX ? INT_MAX : (int)t;
    if (ms != 0) {
      if (poll(pfd, 2, ms) < 0 && errno != EINTR) {
        perror("poll");
        break;
      }
      if (pfd[1].revents & POLLIN)
        break;
    }
    if (MHD_run(d) != MHD_YES) {
      fprintf(stderr, "MHD_run failed\n");
      break;
    }
  }
  MHD_stop_daemon(d);
  MHD_destroy_response(hello_resp);
  MHD_destroy_response(not_found_resp);
  return 0;
}
