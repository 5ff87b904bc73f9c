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
 * Build: cc -std=c11 -O2 arena_h2o.c -lh2o-evloop -ljansson -lssl -lcrypto
 *        -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define H2O_USE_EPOLL 1 /* the evloop backend, not libuv */

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <h2o.h>
#include <h2o/http2.h>
#include <openssl/err.h>

#define PORT_OFF (-1)
#define MAX_WORKERS 1024
#define UPLOAD_MAX (64u << 20) /* h2o answers 413 beyond it */
#define BASELINE_BODY_MAX 1024

enum { L_H1, L_H1_TLS, L_H2C, L_H2, L_COUNT };
static const char *const kind_names[L_COUNT] = {"h1", "h1-tls", "h2c", "h2"};

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
  struct wlistener wl[L_COUNT];
  unsigned idx;
};

static h2o_globalconf_t config;
static struct listener listeners[L_COUNT];
static struct worker *workers;
static unsigned nworkers = 1;
static unsigned started;
static pthread_mutex_t started_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;

/* ---- Numbers and query strings ---- */

/* A decimal integer of n bytes: optional sign, digits (leading zeros
 * fine).  0 with *out set, or -1. */
static int parse_int(const char *s, size_t n, int64_t *out) {
  size_t i = 0;
  int neg = 0;
  uint64_t v = 0, lim;
  if (n > 0 && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    i = 1;
  }
  if (i == n)
    return -1;
  lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < n; i++) {
    unsigned d = (unsigned)(unsigned char)s[i] - '0';
    if (d > 9 || v > (lim - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return 0;
}

/* The integer query parameter `name` of q (without the '?'): 1 found,
 * 0 absent, -1 malformed.  The first occurrence counts. */
static int query_int(const char *q, size_t qlen, const char *name,
                     int64_t *out) {
  size_t nlen = strlen(name);
  const char *p = q, *end = q + qlen;
  while (p < end) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    const char *pe = amp != NULL ? amp : end;
    const char *eq = memchr(p, '=', (size_t)(pe - p));
    const char *ke = eq != NULL ? eq : pe;
    if ((size_t)(ke - p) == nlen && memcmp(p, name, nlen) == 0) {
      if (eq == NULL)
        return -1;
      return parse_int(eq + 1, (size_t)(pe - eq - 1), out) == 0 ? 1 : -1;
    }
    p = pe + 1;
  }
  return 0;
}

static int req_query_int(h2o_req_t *req, const char *name, int64_t *out) {
  size_t at = req->query_at;
  if (at == SIZE_MAX || at + 1 > req->path.len)
    return 0;
  return query_int(req->path.base + at + 1, req->path.len - at - 1, name, out);
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

/* ---- /baseline11, /baseline2, /pipeline ---- */

static int sum_ab(h2o_req_t *req, int64_t *sum) {
  int64_t a = 0, b = 0;
  if (req_query_int(req, "a", &a) < 0 || req_query_int(req, "b", &b) < 0 ||
      __builtin_add_overflow(a, b, sum)) {
    send_text(req, 400, "a and b are integers\n");
    return -1;
  }
  return 0;
}

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int on_baseline11(h2o_handler_t *self, h2o_req_t *req) {
  int64_t sum, v;
  const char *body = req->entity.base;
  size_t len = req->entity.base != NULL ? req->entity.len : 0;
  (void)self;
  if (!path_is(req, "/baseline11"))
    return -1; /* h2o's 404 */
  if (!method_is(req, "GET") && !method_is(req, "POST")) {
    send_text(req, 405, "GET or POST\n");
    return 0;
  }
  if (sum_ab(req, &sum) != 0)
    return 0;
  if (len > BASELINE_BODY_MAX) {
    send_text(req, 400, "the body is an integer\n");
    return 0;
  }
  while (len > 0 && is_space(body[len - 1]))
    len--;
  while (len > 0 && is_space(body[0]))
    body++, len--;
  if (len > 0 &&
      (parse_int(body, len, &v) != 0 || __builtin_add_overflow(sum, v, &sum))) {
    send_text(req, 400, "the body is an integer\n");
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
  if (!method_is(req, "GET")) {
    send_text(req, 405, "GET\n");
    return 0;
  }
  if (sum_ab(req, &sum) == 0)
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

static json_t *dataset; /* the array from DIR/dataset.json */
static size_t nitems;   /* its leading items that are usable */

static void load_dataset(const char *dir) {
  char path[4096];
  json_error_t err;
  size_t i;
  snprintf(path, sizeof(path), "%s/dataset.json", dir);
  dataset = json_load_file(path, 0, &err);
  if (dataset == NULL || !json_is_array(dataset)) {
    fprintf(stderr, "arena_h2o: %s: %s: /json answers 503\n", path,
            dataset != NULL ? "not an array" : err.text);
    json_decref(dataset);
    dataset = NULL;
    return;
  }
  for (i = 0; i < json_array_size(dataset); i++) {
    json_t *it = json_array_get(dataset, i);
    if (!json_is_object(it) || !json_is_integer(json_object_get(it, "price")) ||
        !json_is_integer(json_object_get(it, "quantity")))
      break;
  }
  nitems = i;
}

/* A fresh copy of item i with "total" appended; NULL on overflow or
 * out of memory (*overflow says which). */
static json_t *item_json(size_t i, json_int_t m, int *overflow) {
  json_t *src = json_array_get(dataset, i), *o, *v;
  json_int_t total;
  const char *key;
  if (__builtin_mul_overflow(
          json_integer_value(json_object_get(src, "price")),
          json_integer_value(json_object_get(src, "quantity")), &total) ||
      __builtin_mul_overflow(total, m, &total)) {
    *overflow = 1;
    return NULL;
  }
  if ((o = json_object()) == NULL)
    return NULL;
  json_object_foreach(src, key, v) {
    if (json_object_set_new(o, key, json_deep_copy(v)) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  if (json_object_set_new(o, "total", json_integer(total)) != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static int on_json(h2o_handler_t *self, h2o_req_t *req) {
  const char *p = req->path_normalized.base + 5; /* after "/json" */
  size_t plen = req->path_normalized.len - 5, i;
  int64_t count, m = 1;
  int overflow = 0, bad;
  json_t *root, *arr;
  char *out;
  (void)self;
  if (plen < 2 || p[0] != '/' || memchr(p + 1, '/', plen - 1) != NULL)
    return -1;
  if (!method_is(req, "GET")) {
    send_text(req, 405, "GET\n");
    return 0;
  }
  if (dataset == NULL || nitems == 0) {
    send_text(req, 503, "no dataset\n");
    return 0;
  }
  if (parse_int(p + 1, plen - 1, &count) != 0 || count < 1) {
    send_text(req, 400, "count is a positive integer\n");
    return 0;
  }
  if (req_query_int(req, "m", &m) < 0) {
    send_text(req, 400, "m is an integer\n");
    return 0;
  }
  if ((uint64_t)count > nitems)
    count = (int64_t)nitems;
  root = json_object();
  arr = json_array();
  bad = root == NULL || json_object_set_new(root, "items", arr) != 0;
  for (i = 0; !bad && i < (size_t)count; i++)
    bad = json_array_append_new(arr, item_json(i, m, &overflow)) != 0;
  if (!bad)
    bad = json_object_set_new(root, "count", json_integer(count)) != 0;
  out = bad ? NULL : json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (out == NULL) {
    send_text(req, overflow ? 400 : 503,
              overflow ? "m is too large\n" : "out of memory\n");
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
  if (!method_is(req, "POST")) {
    send_text(req, 405, "POST\n");
    return 0;
  }
  /* h2o has read the whole body into req->entity by now. */
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
  for (k = 0; k < L_COUNT; k++) {
    h2o_socket_t *sock;
    if (!listeners[k].on)
      continue;
    w->wl[k].actx.ctx = &w->ctx;
    w->wl[k].actx.hosts = config.hosts;
    w->wl[k].actx.ssl_ctx = listeners[k].ssl;
    w->wl[k].h2c_only = k == L_H2C;
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

/* One listening socket on host:port with SO_REUSEPORT; its port in *bound. */
static int bind_one(const char *host, int port, int *bound) {
  struct addrinfo hints, *ai;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  char portstr[8];
  int fd, one = 1, rc;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  snprintf(portstr, sizeof(portstr), "%d", port);
  if ((rc = getaddrinfo(host, portstr, &hints, &ai)) != 0) {
    fprintf(stderr, "arena_h2o: %s: %s\n", host, gai_strerror(rc));
    return -1;
  }
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 65535) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    fprintf(stderr, "arena_h2o: listen on %s:%d: %s\n", host, port,
            strerror(errno));
    if (fd != -1)
      close(fd);
    freeaddrinfo(ai);
    return -1;
  }
  freeaddrinfo(ai);
  *bound =
      ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* Every worker's socket of listener k; the port it got in l->port. */
static int open_listener(struct listener *l, const char *host) {
  unsigned i;
  int port = l->port, bound;
  if ((l->fds = calloc(nworkers, sizeof(int))) == NULL)
    return -1;
  for (i = 0; i < nworkers; i++) {
    if ((l->fds[i] = bind_one(host, port, &bound)) == -1)
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
  static const struct {
    const char *ext, *type;
  } types[] = {{"css", "text/css"},         {"js", "application/javascript"},
               {"html", "text/html"},       {"woff2", "font/woff2"},
               {"svg", "image/svg+xml"},    {"webp", "image/webp"},
               {"json", "application/json"}};
  h2o_hostconf_t *host;
  h2o_pathconf_t *pc;
  h2o_compress_args_t comp;
  h2o_mimemap_t *mime;
  char static_dir[4096];
  size_t i;

  h2o_config_init(&config);
  /* h2o's default is 1 GiB; 64 MiB is plenty for the 20 MiB uploads. */
  config.max_request_entity_size = UPLOAD_MAX;
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
  for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
    h2o_mimemap_define_mimetype(mime, types[i].ext, types[i].type, NULL);
  snprintf(static_dir, sizeof(static_dir), "%s/static", data);
  if (access(static_dir, R_OK | X_OK) != 0)
    fprintf(stderr, "arena_h2o: %s: %s: /static/ answers 404\n", static_dir,
            strerror(errno));
  pc = h2o_config_register_path(host, "/static", 0);
  h2o_file_register(pc, static_dir, no_index, mime,
                    H2O_FILE_FLAG_SEND_COMPRESSED);
}

/* ---- main ---- */

static int parse_port(const char *v, int *out) {
  int64_t p;
  if (strcmp(v, "off") == 0) {
    *out = PORT_OFF;
    return 0;
  }
  if (parse_int(v, strlen(v), &p) != 0 || p < -1 || p > 65535)
    return -1;
  *out = (int)p;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: arena_h2o [--host ADDR] [--port N] [--tls-port N] "
          "[--h2c-port N] [--h2-port N] [--cert F] [--key F] [--data DIR] "
          "[--database URL] [--db-max-conn N] [--workers N]\n");
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? v : dflt;
}

int main(int argc, char **argv) {
  static const h2o_iovec_t alpn_h2[] = {
      {H2O_STRLIT("h2")}, {H2O_STRLIT("http/1.1")}, {NULL, 0}};
  static const h2o_iovec_t alpn_h1[] = {{H2O_STRLIT("http/1.1")}, {NULL, 0}};
  const char *host = "0.0.0.0", *data = "/data";
  const char *cert = env_or("TLS_CERT", "/certs/server.crt");
  const char *key = env_or("TLS_KEY", "/certs/server.key");
  int ports[L_COUNT] = {8080, 8081, 8082, 8443};
  struct rlimit rl;
  sigset_t set;
  unsigned i;
  int a, k, sig;

  for (a = 1; a < argc; a++) {
    const char *o = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
    int ok = 1;
    int64_t n;
    if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
      usage();
      return 0;
    }
    if (v == NULL) {
      usage();
      return 2;
    }
    if (strcmp(o, "--host") == 0)
      host = v;
    else if (strcmp(o, "--port") == 0)
      ok = parse_port(v, &ports[L_H1]) == 0;
    else if (strcmp(o, "--tls-port") == 0)
      ok = parse_port(v, &ports[L_H1_TLS]) == 0;
    else if (strcmp(o, "--h2c-port") == 0)
      ok = parse_port(v, &ports[L_H2C]) == 0;
    else if (strcmp(o, "--h2-port") == 0)
      ok = parse_port(v, &ports[L_H2]) == 0;
    else if (strcmp(o, "--cert") == 0)
      cert = v;
    else if (strcmp(o, "--key") == 0)
      key = v;
    else if (strcmp(o, "--data") == 0)
      data = v;
    else if (strcmp(o, "--database") == 0 || strcmp(o, "--db-max-conn") == 0) {
      /* no database route here */
    } else if (strcmp(o, "--workers") == 0) {
      ok = parse_int(v, strlen(v), &n) == 0 && n >= 1 && n <= MAX_WORKERS;
      if (ok)
        nworkers = (unsigned)n;
    } else {
      fprintf(stderr, "arena_h2o: unknown option %s\n", o);
      ok = 0;
    }
    if (!ok) {
      fprintf(stderr, "arena_h2o: bad value for %s: %s\n", o, v);
      usage();
      return 2;
    }
    a++;
  }

  signal(SIGPIPE, SIG_IGN);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  load_dataset(data);
  configure(data);

  for (k = 0; k < L_COUNT; k++) {
    listeners[k].on = ports[k] != PORT_OFF;
    listeners[k].port = ports[k];
  }
  if (listeners[L_H1_TLS].on || listeners[L_H2].on) {
    SSL_CTX *h1 = NULL, *h2 = NULL;
    if (access(cert, R_OK) != 0 || access(key, R_OK) != 0 ||
        (h1 = make_ssl(cert, key, alpn_h1)) == NULL ||
        (h2 = make_ssl(cert, key, alpn_h2)) == NULL) {
      fprintf(stderr,
              "arena_h2o: no usable certificate (%s, %s): the TLS "
              "listeners are skipped\n",
              cert, key);
      if (h1 != NULL)
        SSL_CTX_free(h1);
      listeners[L_H1_TLS].on = listeners[L_H2].on = 0;
    } else {
      listeners[L_H1_TLS].ssl = h1;
      listeners[L_H2].ssl = h2;
    }
  }
  for (k = 0; k < L_COUNT; k++)
    if (listeners[k].on && open_listener(&listeners[k], host) != 0)
      return 1;

  /* The workers inherit a mask without the stop signals: only main's
   * sigwait takes them. */
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);

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

  for (k = 0; k < L_COUNT; k++)
    if (listeners[k].on)
      printf("listening %s %d\n", kind_names[k], listeners[k].port);
  printf("ready\n");
  fflush(stdout);

  sigwait(&set, &sig);
  /* The loops never return; end the process without tearing them down. */
  _exit(0);
}
