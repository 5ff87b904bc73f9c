/*
 * arena_h2o.c - the libh2o peer of tern's arena app (HttpArena profiles).
 *
 * libh2o (Debian's libh2o-evloop 0.13.5, from h2o 2.2.5) embedded with its
 * own event loop (h2o_evloop_t), one loop per worker thread.  Each worker
 * has its own listening socket per listener, all bound to the same port
 * with SO_REUSEPORT, so the kernel spreads connections over the workers.
 *
 *   arena_h2o [--host ADDR] [--port N] [--tls-port N] [--h2c-port N]
 *             [--h2-port N] [--cert F] [--key F] [--data DIR]
 *             [--database URL] [--db-max-conn N] [--workers N]
 *
 * Ports: 0 = any free one; -1 or "off" = none.  Defaults as the arena
 * (8080, 8081, 8082, 8443; /data; --workers 1).  --database and
 * --db-max-conn are accepted and ignored (no /async-db here).
 *   --port      HTTP/1.1 in the clear (h2o also takes an h2c Upgrade)
 *   --tls-port  HTTP/1.1 over TLS (ALPN offers http/1.1 only)
 *   --h2c-port  HTTP/2 with prior knowledge only: h2o_http2_accept on
 *               the plain socket, so an HTTP/1.1 request is refused
 *   --h2-port   TLS, ALPN h2 (HTTP/2) or http/1.1
 * The TLS listeners need --cert and --key (default $TLS_CERT/$TLS_KEY,
 * else /certs/server.{crt,key}); without them they are skipped, with a
 * line on stderr.  Prints "listening KIND PORT" per listener that is on,
 * then "ready" once every worker's loop runs.  SIGTERM/SIGINT: exit 0.
 *
 * Routes (a pathconf each; h2o routes by path prefix):
 *   GET  /baseline11?a=&b=   a+b (text/plain)
 *   POST /baseline11?a=&b=   a+b+body (Content-Length or chunked; h2o
 *                            undoes chunked framing)
 *   GET  /baseline2?a=&b=    a+b
 *   GET  /pipeline           ok
 *   GET  /json/COUNT?m=      the first COUNT dataset items with
 *                            total = price*quantity*m, built with jansson
 *                            and serialized per request; gzip (level 6)
 *                            by h2o's compress filter when the client
 *                            accepts it (Debian's libh2o has no brotli)
 *   POST /upload             the body's byte count (h2o buffers the whole
 *                            body: max_request_entity_size 64 MiB)
 *   GET  /static/FILE        h2o's file handler with
 *                            H2O_FILE_FLAG_SEND_COMPRESSED (.br/.gz
 *                            siblings when the client accepts them)
 *   anything else            404 (h2o's own)
 *
 * Build: cc -std=c11 -O2 arena_h2o.c arena_common.c -lh2o-evloop -ljansson
 *        -lssl -lcrypto -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define H2O_USE_EPOLL 1 /* the evloop backend, not libuv */

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <h2o.h>
#include <h2o/http2.h>
#include <openssl/err.h>

#include "arena_common.h"

/* A listener: one socket per worker, all on the same port. */
struct listener {
  int on;
  int port;
  SSL_CTX *ssl;
  int *fds;
};

/* A worker's view of one listener (the h2o socket's data). */
struct wlistener {
  h2o_accept_ctx_t actx;
  int h2c_only;
};

struct worker {
  pthread_t thread;
  h2o_context_t ctx;
  struct wlistener wl[ARENA_KINDS];
  unsigned idx;
};

static h2o_globalconf_t config;
static struct listener listeners[ARENA_KINDS];
static struct worker *workers;
static unsigned nworkers = 1;
static unsigned started;
static pthread_mutex_t started_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;

/* ---- Query strings ---- */

/* The request's query string (without the '?'; "" when none). */
static const char *req_query(h2o_req_t *req, size_t *len) {
  size_t at = req->query_at;
  if (at == SIZE_MAX || at + 1 > req->path.len) {
    *len = 0;
    return "";
  }
  *len = req->path.len - at - 1;
  return req->path.base + at + 1;
}

static int req_query_int(h2o_req_t *req, const char *name, int64_t *out) {
  size_t qlen;
  const char *q = req_query(req, &qlen);
  return arena_query_int(q, qlen, name, out);
}

/* ---- Responses ---- */

static void send_body(h2o_req_t *req, int status, const char *ctype,
                      const char *body, size_t len) {
  req->res.status = status;
  req->res.reason = status == 200   ? "OK"
                    : status == 400 ? "Bad Request"
                    : status == 404 ? "Not Found"
                    : status == 405 ? "Method Not Allowed"
                                    : "Error";
  req->res.content_length = len; /* else it goes out chunked */
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                 ctype, strlen(ctype));
  h2o_send_inline(req, body, len);
}

static void send_text(h2o_req_t *req, int status, const char *msg) {
  send_body(req, status, "text/plain", msg, strlen(msg));
}

static void send_int(h2o_req_t *req, int64_t v) {
  char line[24];
  int n = snprintf(line, sizeof(line), "%lld", (long long)v);
  send_body(req, 200, "text/plain", line, (size_t)n);
}

static int method_is(h2o_req_t *req, const char *m) {
  return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

static int path_is(h2o_req_t *req, const char *p) {
  return h2o_memis(req->path_normalized.base, req->path_normalized.len, p,
                   strlen(p));
}

/* Whether req's method is one the route takes (GET when get, POST when
 * post); else it answers 405 naming them. */
static int method_ok(h2o_req_t *req, int get, int post) {
  if ((get && method_is(req, "GET")) || (post && method_is(req, "POST")))
    return 1;
  send_text(req, 405, get && post ? "GET or POST\n" : get ? "GET\n" : "POST\n");
  return 0;
}

/* ---- /baseline11, /baseline2, /pipeline ---- */

static int sum_ab(h2o_req_t *req, int64_t *sum) {
  size_t qlen;
  const char *q = req_query(req, &qlen);
  if (arena_query_sum(q, qlen, sum) != 0) {
    send_text(req, 400, ARENA_AB_MSG);
    return -1;
  }
  return 0;
}

static int on_baseline11(h2o_handler_t *self, h2o_req_t *req) {
  int64_t sum;
  const char *body = req->entity.base;
  size_t len = req->entity.base != NULL ? req->entity.len : 0;
  (void)self;
  if (!path_is(req, "/baseline11"))
    return -1; /* h2o's 404 */
  if (!method_ok(req, 1, 1) || sum_ab(req, &sum) != 0)
    return 0;
  if (arena_add_body(body, len, &sum) != 0) {
    send_text(req, 400, ARENA_BODY_MSG);
    return 0;
  }
  send_int(req, sum);
  return 0;
}

static int on_baseline2(h2o_handler_t *self, h2o_req_t *req) {
  int64_t sum;
  (void)self;
  if (!path_is(req, "/baseline2"))
    return -1;
  if (method_ok(req, 1, 0) && sum_ab(req, &sum) == 0)
    send_int(req, sum);
  return 0;
}

static int on_pipeline(h2o_handler_t *self, h2o_req_t *req) {
  (void)self;
  if (!path_is(req, "/pipeline"))
    return -1;
  send_body(req, 200, "text/plain", "ok", 2);
  return 0;
}

/* ---- /json ---- */

static int on_json(h2o_handler_t *self, h2o_req_t *req) {
  const char *p = req->path_normalized.base + 5; /* after "/json" */
  size_t plen = req->path_normalized.len - 5;
  int64_t m = 1;
  int m_found, status;
  const char *msg;
  char *out;
  (void)self;
  if (plen < 2 || p[0] != '/' || memchr(p + 1, '/', plen - 1) != NULL)
    return -1;
  if (!method_ok(req, 1, 0))
    return 0;
  m_found = req_query_int(req, "m", &m);
  status = arena_json(p + 1, plen - 1, m_found, m, &out, &msg);
  if (status != 200) {
    send_text(req, status, msg);
    return 0;
  }
  /* h2o_send_inline copies the body into the request's pool. */
  send_body(req, 200, "application/json", out, strlen(out));
  free(out);
  return 0;
}

/* ---- /upload ---- */

static int on_upload(h2o_handler_t *self, h2o_req_t *req) {
  (void)self;
  if (!path_is(req, "/upload"))
    return -1;
  /* h2o has read the whole body into req->entity by now. */
  if (method_ok(req, 0, 1))
    send_int(req, req->entity.base != NULL ? (int64_t)req->entity.len : 0);
  return 0;
}

/* ---- Listeners and workers ---- */

static void on_accept(h2o_socket_t *listener, const char *err) {
  struct wlistener *wl = listener->data;
  h2o_socket_t *sock;
  int i;
  if (err != NULL)
    return;
  for (i = 0; i < 32; i++) {
    if ((sock = h2o_evloop_socket_accept(listener)) == NULL)
      return;
    if (wl->h2c_only) {
      struct timeval now;
      gettimeofday(&now, NULL);
      h2o_http2_accept(&wl->actx, sock, now);
    } else {
      h2o_accept(&wl->actx, sock);
    }
  }
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  int k;
  h2o_context_init(&w->ctx, h2o_evloop_create(), &config);
  for (k = 0; k < ARENA_KINDS; k++) {
    h2o_socket_t *sock;
    if (!listeners[k].on)
      continue;
    w->wl[k].actx.ctx = &w->ctx;
    w->wl[k].actx.hosts = config.hosts;
    w->wl[k].actx.ssl_ctx = listeners[k].ssl;
    w->wl[k].h2c_only = k == ARENA_H2C;
    sock = h2o_evloop_socket_create(w->ctx.loop, listeners[k].fds[w->idx],
                                    H2O_SOCKET_FLAG_DONT_READ);
    sock->data = &w->wl[k];
    h2o_socket_read_start(sock, on_accept);
  }
  pthread_mutex_lock(&started_mu);
  started++;
  pthread_cond_signal(&started_cv);
  pthread_mutex_unlock(&started_mu);
  for (;;) {
    /* A signal interrupting the wait is no reason to stop. */
    if (h2o_evloop_run(w->ctx.loop, INT32_MAX) != 0 && errno != EINTR) {
      perror("arena_h2o: h2o_evloop_run");
      _exit(1);
    }
  }
  return NULL;
}

/* Every worker's socket of listener k; the port it got in l->port. */
static int open_listener(struct listener *l, const char *host) {
  unsigned i;
  int port = l->port, bound;
  if ((l->fds = calloc(nworkers, sizeof(int))) == NULL)
    return -1;
  for (i = 0; i < nworkers; i++) {
    if ((l->fds[i] = arena_listen(host, port, 1, &bound)) == -1)
      return -1;
    port = bound; /* the others join the port the first got */
  }
  l->port = port;
  return 0;
}

static SSL_CTX *make_ssl(const char *cert, const char *key,
                         const h2o_iovec_t *alpn) {
  SSL_CTX *c = SSL_CTX_new(TLS_server_method());
  if (c == NULL)
    return NULL;
  SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
  SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION);
  if (SSL_CTX_use_certificate_chain_file(c, cert) != 1 ||
      SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(c) != 1) {
    ERR_print_errors_fp(stderr);
    SSL_CTX_free(c);
    return NULL;
  }
  h2o_ssl_register_alpn_protocols(c, alpn);
  return c;
}

/* ---- Configuration ---- */

static h2o_pathconf_t *add_path(h2o_hostconf_t *host, const char *path,
                                int (*on_req)(h2o_handler_t *, h2o_req_t *)) {
  h2o_pathconf_t *pc = h2o_config_register_path(host, path, 0);
  h2o_handler_t *h = h2o_create_handler(pc, sizeof(*h));
  h->on_req = on_req;
  return pc;
}

static void configure(const char *data) {
  static const char *no_index[] = {NULL};
  h2o_hostconf_t *host;
  h2o_pathconf_t *pc;
  h2o_compress_args_t comp;
  h2o_mimemap_t *mime;
  char static_dir[4096];
  size_t i;

  h2o_config_init(&config);
  /* h2o's default is 1 GiB; 64 MiB is plenty for the 20 MiB uploads. */
  config.max_request_entity_size = ARENA_UPLOAD_MAX; /* 413 beyond */
  host = h2o_config_register_host(&config,
                                  h2o_iovec_init(H2O_STRLIT("default")), 65535);
  add_path(host, "/baseline11", on_baseline11);
  add_path(host, "/baseline2", on_baseline2);
  add_path(host, "/pipeline", on_pipeline);
  add_path(host, "/upload", on_upload);
  pc = add_path(host, "/json", on_json);
  memset(&comp, 0, sizeof(comp));
  comp.min_size = 100; /* h2o's own default (compress-minimum-size) */
  comp.gzip.quality = 6;
  comp.brotli.quality = -1; /* libh2o-evloop is built without brotli */
  h2o_compress_register(pc, &comp);

  mime = h2o_mimemap_create();
  for (i = 0; arena_types[i].ext != NULL; i++)
    h2o_mimemap_define_mimetype(mime, arena_types[i].ext, arena_types[i].type,
                                NULL);
  snprintf(static_dir, sizeof(static_dir), "%s/static", data);
  if (access(static_dir, R_OK | X_OK) != 0)
    fprintf(stderr, "arena_h2o: %s: %s: /static/ answers 404\n", static_dir,
            strerror(errno));
  pc = h2o_config_register_path(host, "/static", 0);
  h2o_file_register(pc, static_dir, no_index, mime,
                    H2O_FILE_FLAG_SEND_COMPRESSED);
}

/* ---- main ---- */

int main(int argc, char **argv) {
  static const h2o_iovec_t alpn_h2[] = {
      {H2O_STRLIT("h2")}, {H2O_STRLIT("http/1.1")}, {NULL, 0}};
  static const h2o_iovec_t alpn_h1[] = {{H2O_STRLIT("http/1.1")}, {NULL, 0}};
  struct arena_opts o;
  int bound[ARENA_KINDS];
  struct rlimit rl;
  sigset_t set;
  unsigned i;
  int k, rc;

  /* --database and --db-max-conn: no database route here */
  if ((rc = arena_args("arena_h2o", ARENA_USES_WORKERS, argc, argv, &o)) >= 0)
    return rc;
  nworkers = o.workers;
  arena_setup(&rl);
  arena_load_dataset(o.data);
  configure(o.data);

  for (k = 0; k < ARENA_KINDS; k++) {
    listeners[k].on = o.ports[k] != ARENA_PORT_OFF;
    listeners[k].port = o.ports[k];
  }
  if (listeners[ARENA_H1_TLS].on || listeners[ARENA_H2].on) {
    SSL_CTX *h1 = NULL, *h2 = NULL;
    if (access(o.cert, R_OK) != 0 || access(o.key, R_OK) != 0 ||
        (h1 = make_ssl(o.cert, o.key, alpn_h1)) == NULL ||
        (h2 = make_ssl(o.cert, o.key, alpn_h2)) == NULL) {
      fprintf(stderr,
              "arena_h2o: no usable certificate (%s, %s): the TLS "
              "listeners are skipped\n",
              o.cert, o.key);
      if (h1 != NULL)
        SSL_CTX_free(h1);
      listeners[ARENA_H1_TLS].on = listeners[ARENA_H2].on = 0;
    } else {
      listeners[ARENA_H1_TLS].ssl = h1;
      listeners[ARENA_H2].ssl = h2;
    }
  }
  for (k = 0; k < ARENA_KINDS; k++)
    if (listeners[k].on && open_listener(&listeners[k], o.host) != 0)
      return 1;

  /* The workers inherit a mask without the stop signals: only main's
   * sigwait takes them. */
  arena_block_stop(&set);

  if ((workers = calloc(nworkers, sizeof(*workers))) == NULL)
    return 1;
  for (i = 0; i < nworkers; i++) {
    workers[i].idx = i;
    if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) !=
        0) {
      perror("arena_h2o: pthread_create");
      return 1;
    }
  }
  pthread_mutex_lock(&started_mu);
  while (started < nworkers)
    pthread_cond_wait(&started_cv, &started_mu);
  pthread_mutex_unlock(&started_mu);

  for (k = 0; k < ARENA_KINDS; k++)
    bound[k] = listeners[k].on ? listeners[k].port : ARENA_PORT_OFF;
  arena_ready(bound);

  arena_wait_stop(&set);
  /* The loops never return; end the process without tearing them down. */
  _exit(0);
}
