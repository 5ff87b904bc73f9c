/* The reference server's database routes: one Redis GET per request,
 * answered with the value (200), 404 for a missing key, 502 when Redis
 * fails or is gone.
 *
 *   GET /db/:key           asynchronously on the worker's own loop, through
 *                          hiredis's libuv adapter: one connection per
 *                          worker, opened in the on_start hook and closed
 *                          in on_stop (tern_server_on_workers); the
 *                          handler returns at once and the reply callback
 *                          responds. No thread waits.
 *   GET /db-blocking/:key  on the blocking lane (TERN_ROUTE_BLOCKING) with
 *                          synchronous hiredis: one connection per pool
 *                          thread, opened on the thread's first request.
 *
 * --redis PATH names Redis's Unix socket (or HOST:PORT, over TCP). hiredis is
 * optional: built without it (or run without --redis) both routes answer 501.
 *
 * A client that leaves while its query is in flight: the request stays
 * valid until it is finished, so the reply callback finishes it as usual;
 * the response call returns TERN_ECLOSED and frees it, and the answer is
 * dropped. Nothing else to undo: a hiredis query cannot be cancelled,
 * and its reply is freed by hiredis after the callback.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

int reference_db_routes(tern_server *srv, const char *redis_path);

static const tern_header db_text[] = {
    {"content-type", 12, "text/plain", 10},
};

#ifdef REFERENCE_HIREDIS
#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <uv.h>

static const char *db_path;
/* One async connection per worker, touched only on that worker. */
static redisAsyncContext **db_async;

static void answer(tern_request *r, const redisReply *reply) {
  if (reply == NULL || reply->type == REDIS_REPLY_ERROR)
    tern_respond(r, 502, db_text, 1, "redis failed\n", 13);
  else if (reply->type == REDIS_REPLY_NIL)
    tern_respond(r, 404, db_text, 1, "no such key\n", 12);
  else if (reply->type == REDIS_REPLY_STRING)
    tern_respond(r, 200, db_text, 1, reply->str, (size_t)reply->len);
  else
    tern_respond(r, 502, db_text, 1, "unexpected reply\n", 17);
}

/* ---- (a) On the worker's loop ---- */

static void on_disconnect(const redisAsyncContext *ac, int status) {
  unsigned w = (unsigned)(uintptr_t)ac->data;
  (void)status;
  /* hiredis frees the context after this returns. */
  if (db_async[w] == ac)
    db_async[w] = NULL;
}

static void on_connect(const redisAsyncContext *ac, int status) {
  unsigned w = (unsigned)(uintptr_t)ac->data;
  if (status != REDIS_OK) {
    fprintf(stderr, "reference: worker %u: redis: %s\n", w, ac->errstr);
    if (db_async[w] == ac)
      db_async[w] = NULL; /* hiredis frees it */
  }
}

/* db_path: a Unix socket ("/..."), or HOST:PORT over TCP (the
 * benchmarks' db-slow rows reach Redis through a delaying relay). */
static int db_tcp(char *host, size_t size, int *port) {
  const char *colon = strrchr(db_path, ':');
  if (db_path[0] == '/' || colon == NULL)
    return 0;
  snprintf(host, size, "%.*s", (int)(colon - db_path), db_path);
  *port = atoi(colon + 1);
  return 1;
}

static redisAsyncContext *db_connect(unsigned w, uv_loop_t *loop) {
  char host[256];
  int port;
  redisAsyncContext *ac = db_tcp(host, sizeof(host), &port)
                              ? redisAsyncConnect(host, port)
                              : redisAsyncConnectUnix(db_path);
  if (ac == NULL)
    return NULL;
  if (ac->err != 0 || redisLibuvAttach(ac, loop) != REDIS_OK) {
    fprintf(stderr, "reference: worker %u: redis: %s\n", w,
            ac->err ? ac->errstr : "cannot attach to the loop");
    redisAsyncFree(ac);
    return NULL;
  }
  ac->data = (void *)(uintptr_t)w;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  return ac;
}

static void worker_start(tern_server *srv, unsigned w, void *loop, void *user) {
  (void)srv;
  (void)user;
  db_async[w] = db_connect(w, loop);
}

static void worker_stop(tern_server *srv, unsigned w, void *loop, void *user) {
  (void)srv;
  (void)loop;
  (void)user;
  /* Replies still due arrive first; then the connection closes and its
   * poll handle leaves the loop, so that tern_run can return. */
  if (db_async[w] != NULL)
    redisAsyncDisconnect(db_async[w]);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata) {
  (void)ac;
  /* reply NULL: the connection went away before answering. */
  answer(privdata, reply);
}

static void db_route(tern_request *r, void *user) {
  unsigned w = (unsigned)tern_request_worker(r);
  size_t n;
  const char *key = tern_request_param(r, "key", 3, &n);
  (void)user;
  if (db_async[w] == NULL) /* lost: try again, on this worker's loop */
    db_async[w] = db_connect(w, tern_request_loop(r));
  if (db_async[w] == NULL ||
      redisAsyncCommand(db_async[w], on_reply, r, "GET %b", key, n) != REDIS_OK)
    tern_respond(r, 502, db_text, 1, "redis unavailable\n", 18);
}

/* ---- (b) On the blocking lane ---- */

static pthread_key_t db_key;

static void free_sync(void *c) {
  redisFree(c);
}

static void db_blocking_route(tern_request *r, void *user) {
  redisContext *c = pthread_getspecific(db_key);
  redisReply *reply;
  size_t n;
  const char *key = tern_request_param(r, "key", 3, &n);
  (void)user;
  if (c == NULL) {
    struct timeval tv = {2, 0};
    char host[256];
    int port;
    c = db_tcp(host, sizeof(host), &port)
            ? redisConnectWithTimeout(host, port, tv)
            : redisConnectUnixWithTimeout(db_path, tv);
    if (c == NULL || c->err) {
      redisFree(c);
      tern_respond(r, 502, db_text, 1, "redis unavailable\n", 18);
      return;
    }
    pthread_setspecific(db_key, c);
  }
  reply = redisCommand(c, "GET %b", key, n);
  answer(r, reply);
  if (reply != NULL) {
    freeReplyObject(reply);
  } else { /* the connection is broken: a new one next time */
    redisFree(c);
    pthread_setspecific(db_key, NULL);
  }
}

static int db_init(tern_server *srv, const char *redis_path) {
  tern_route_options o;
  unsigned n = tern_server_workers(srv);
  if (redis_path == NULL)
    return 0;
  db_path = redis_path;
  db_async = calloc(n, sizeof(*db_async));
  if (db_async == NULL || pthread_key_create(&db_key, free_sync) != 0)
    return -1;
  tern_route_options_init(&o);
  o.flags = TERN_ROUTE_BLOCKING;
  if (tern_server_on_workers(srv, worker_start, worker_stop, NULL) != 0 ||
      tern_route(srv, "GET", "/db/:key", db_route, NULL) != 0 ||
      tern_route_with(srv, "GET", "/db-blocking/:key", db_blocking_route, NULL,
                      &o) != 0)
    return -1;
  return 1;
}

#else

static int db_init(tern_server *srv, const char *redis_path) {
  (void)srv;
  (void)redis_path;
  return 0;
}

#endif

/* Without hiredis or --redis: the routes exist and say so. Returns 0, or
 * -1 when a route or the hooks cannot be set. */
static void db_unavailable(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 501, db_text, 1, "no database (--redis)\n", 22);
}

int reference_db_routes(tern_server *srv, const char *redis_path) {
  int rc = db_init(srv, redis_path);
  if (rc != 0)
    return rc < 0 ? -1 : 0;
  if (tern_route(srv, "GET", "/db/:key", db_unavailable, NULL) != 0 ||
      tern_route(srv, "GET", "/db-blocking/:key", db_unavailable, NULL) != 0)
    return -1;
  return 0;
}
