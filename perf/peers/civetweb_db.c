/*
 * civetweb_db.c - the CivetWeb peer of the db-* benchmarks.
 *
 * CivetWeb (Debian's libcivetweb 1.15) in its own model: a worker thread
 * serves each connection from its first request until it closes, so the
 * thread waits while Redis answers.  Each thread keeps one synchronous
 * hiredis connection (thread-local, opened on its first request), as a
 * CivetWeb application would.
 *
 *   civetweb_db --port N --redis PATH|HOST:PORT [--threads T]
 *       N: 0 = any; prints "listening on PORT", flushed.
 *       PATH: Redis's Unix socket (starts with '/'); HOST:PORT: TCP.
 *       T: num_threads (64 by default; the driver gives the scenario's
 *          connection count, as CivetWeb needs a thread per connection).
 *
 *   GET /db/KEY, GET /db-blocking/KEY   one Redis GET: 200 with the value
 *                                       (text/plain), 404 for no such key,
 *                                       502 when Redis fails
 *   GET /                               404 (with a length)
 *
 * Build: cc -std=c11 -O2 civetweb_db.c -lcivetweb -lhiredis
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
#include <hiredis/hiredis.h>

static const char *redis_at;
static __thread redisContext *rc_conn;

static redisContext *redis_connect(void) {
  struct timeval tv = {2, 0};
  const char *colon = strrchr(redis_at, ':');
  char host[256];
  if (redis_at[0] == '/' || colon == NULL)
    return redisConnectUnixWithTimeout(redis_at, tv);
  snprintf(host, sizeof(host), "%.*s", (int)(colon - redis_at), redis_at);
  return redisConnectWithTimeout(host, atoi(colon + 1), tv);
}

static int send_status(struct mg_connection *conn, int status, const char *body,
                       size_t len) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
            "Content-Length: %zu\r\n\r\n",
            status,
            status == 200   ? "OK"
            : status == 404 ? "Not Found"
                            : "Bad Gateway",
            len);
  mg_write(conn, body, len);
  return status;
}

static int on_db(struct mg_connection *conn, void *cbdata) {
  const struct mg_request_info *ri = mg_get_request_info(conn);
  const char *key = strrchr(ri->local_uri, '/') + 1;
  redisReply *reply;
  int status;
  (void)cbdata;
  if (rc_conn == NULL) {
    rc_conn = redis_connect();
    if (rc_conn == NULL || rc_conn->err) {
      redisFree(rc_conn);
      rc_conn = NULL;
      return send_status(conn, 502, "redis unavailable\n", 18);
    }
  }
  reply = redisCommand(rc_conn, "GET %s", key);
  if (reply == NULL) {
    redisFree(rc_conn);
    rc_conn = NULL;
    return send_status(conn, 502, "redis failed\n", 13);
  }
  if (reply->type == REDIS_REPLY_STRING)
    status = send_status(conn, 200, reply->str, (size_t)reply->len);
  else if (reply->type == REDIS_REPLY_NIL)
    status = send_status(conn, 404, "no such key\n", 12);
  else
    status = send_status(conn, 502, "redis failed\n", 13);
  freeReplyObject(reply);
  return status;
}

/* GET /: a 404 with a length (CivetWeb's own has none, which the
 * driver's readiness probe of "/" cannot read). */
static int on_other(struct mg_connection *conn, void *cbdata) {
  (void)cbdata;
  return send_status(conn, 404, "not found\n", 10);
}

int main(int argc, char **argv) {
  struct mg_callbacks callbacks;
  struct mg_context *ctx;
  struct mg_server_port ports[4];
  const char *port = "8080", *threads = "64";
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
  int a, n, sig;

  for (a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--port") == 0 && a + 1 < argc) {
      port = argv[++a];
    } else if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
      threads = argv[++a];
    } else if (strcmp(argv[a], "--redis") == 0 && a + 1 < argc) {
      redis_at = argv[++a];
    } else if (strcmp(argv[a], "--max-conns") == 0 && a + 1 < argc) {
      a++;
    } else {
      fprintf(stderr,
              "usage: %s --redis PATH|HOST:PORT [--port N] [--threads T]\n",
              argv[0]);
      return 2;
    }
  }
  if (redis_at == NULL) {
    fprintf(stderr, "%s: --redis is required\n", argv[0]);
    return 2;
  }
  options[3] = threads;
  snprintf(listen_on, sizeof(listen_on), "127.0.0.1:%s", port);
  signal(SIGPIPE, SIG_IGN);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
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
  mg_set_request_handler(ctx, "/$", on_other, NULL);
  mg_set_request_handler(ctx, "/db/*$", on_db, NULL);
  mg_set_request_handler(ctx, "/db-blocking/*$", on_db, NULL);
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
