/*
 * mhd_db.c - the libmicrohttpd peer of the db-* benchmarks.
 *
 * GNU libmicrohttpd (Debian's 0.9.75) in its thread-per-connection mode
 * (MHD_USE_THREAD_PER_CONNECTION with its internal polling thread): each
 * connection has a thread of its own, which waits while Redis answers.
 * Each thread keeps one synchronous hiredis connection (thread-local,
 * opened on its first request and freed when the thread ends).
 *
 *   mhd_db --port N --redis PATH|HOST:PORT [--max-conns M]
 *       N: 0 = any; prints "listening on PORT", flushed.
 *       PATH: Redis's Unix socket (starts with '/'); HOST:PORT: TCP.
 *       M: MHD_OPTION_CONNECTION_LIMIT.
 *
 *   GET /db/KEY, GET /db-blocking/KEY   one Redis GET: 200 with the value
 *                                       (text/plain), 404 for no such key,
 *                                       502 when Redis fails
 *
 * Build: cc -std=c11 -O2 mhd_db.c -lmicrohttpd -lhiredis -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <hiredis/hiredis.h>
#include <microhttpd.h>

static const char *redis_at;
static pthread_key_t conn_key;

static void free_conn(void *c) {
  redisFree(c);
}

static redisContext *redis_connect(void) {
  struct timeval tv = {2, 0};
  const char *colon = strrchr(redis_at, ':');
  char host[256];
  if (redis_at[0] == '/' || colon == NULL)
    return redisConnectUnixWithTimeout(redis_at, tv);
  snprintf(host, sizeof(host), "%.*s", (int)(colon - redis_at), redis_at);
  return redisConnectWithTimeout(host, atoi(colon + 1), tv);
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status,
                              const char *body, size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  enum MHD_Result ret;
  if (r == NULL)
    return MHD_NO;
  MHD_add_response_header(r, "Content-Type", "text/plain");
  ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  static int marker;
  redisContext *c;
  redisReply *reply;
  const char *key;
  enum MHD_Result ret;
  (void)cls;
  (void)version;
  (void)upload;
  (void)upload_size;
  if (*con_cls == NULL) { /* the head: answer on the next call */
    *con_cls = &marker;
    return MHD_YES;
  }
  if (strcmp(method, "GET") != 0 ||
      (strncmp(url, "/db/", 4) != 0 && strncmp(url, "/db-blocking/", 13) != 0))
    return answer(conn, 404, "not found\n", 10);
  key = strrchr(url, '/') + 1;
  c = pthread_getspecific(conn_key);
  if (c == NULL) {
    c = redis_connect();
    if (c == NULL || c->err) {
      redisFree(c);
      return answer(conn, 502, "redis unavailable\n", 18);
    }
    pthread_setspecific(conn_key, c);
  }
  reply = redisCommand(c, "GET %s", key);
  if (reply == NULL) {
    redisFree(c);
    pthread_setspecific(conn_key, NULL);
    return answer(conn, 502, "redis failed\n", 13);
  }
  if (reply->type == REDIS_REPLY_STRING)
    ret = answer(conn, 200, reply->str, (size_t)reply->len);
  else if (reply->type == REDIS_REPLY_NIL)
    ret = answer(conn, 404, "no such key\n", 12);
  else
    ret = answer(conn, 502, "redis failed\n", 13);
  freeReplyObject(reply);
  return ret;
}

int main(int argc, char **argv) {
  struct MHD_Daemon *d;
  const union MHD_DaemonInfo *info;
  unsigned long port = 8080, max_conns = 0;
  struct rlimit rl;
  sigset_t set;
  int a, sig;

  for (a = 1; a < argc; a++) {
    if (strcmp(argv[a], "--port") == 0 && a + 1 < argc)
      port = strtoul(argv[++a], NULL, 10);
    else if (strcmp(argv[a], "--max-conns") == 0 && a + 1 < argc)
      max_conns = strtoul(argv[++a], NULL, 10);
    else if (strcmp(argv[a], "--redis") == 0 && a + 1 < argc)
      redis_at = argv[++a];
    else {
      fprintf(stderr,
              "usage: %s --redis PATH|HOST:PORT [--port N] [--max-conns M]\n",
              argv[0]);
      return 2;
    }
  }
  if (redis_at == NULL) {
    fprintf(stderr, "%s: --redis is required\n", argv[0]);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  pthread_key_create(&conn_key, free_conn);
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  d = MHD_start_daemon(
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
          MHD_USE_POLL | MHD_USE_ERROR_LOG,
      (uint16_t)port, NULL, NULL, on_request, NULL, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned int)(max_conns ? max_conns : 10000),
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)300, MHD_OPTION_END);
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
  sigwait(&set, &sig);
  MHD_stop_daemon(d);
  return 0;
}
