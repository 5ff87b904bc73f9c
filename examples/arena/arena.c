/* arena: the HttpArena benchmark's endpoints on tern's public API
 * (docs/arena.md has the whole story: endpoints, flags, what is left out).
 *
 *   arena [--host ADDR] [--port N] [--tls-port N] [--h2c-port N]
 *         [--h2-port N] [--cert FILE] [--key FILE] [--data DIR]
 *         [--database URL] [--db-max-conn N] [--workers N]
 *         [--read-buffer BYTES]
 *
 * Listeners (a port of 0: any free one; -1 or "off": none):
 *   --port 8080      HTTP/1.1 in the clear (and WebSocket)
 *   --tls-port 8081  HTTP/1.1 over TLS (http1_only: ALPN offers http/1.1)
 *   --h2c-port 8082  HTTP/2 with prior knowledge only (http2_only)
 *   --h2-port 8443   TLS with ALPN h2 and http/1.1, and HTTP/3 over QUIC on
 *                    the same port number (UDP), advertised with Alt-Svc
 * --cert and --key (default $TLS_CERT and $TLS_KEY, else /certs/server.crt
 * and /certs/server.key): without them the TLS and QUIC listeners are
 * skipped, with a log line. --data DIR (default /data): DIR/dataset.json
 * and DIR/static/. --database (default $DATABASE_URL): a libpq connection
 * string or URL; --db-max-conn (default $DATABASE_MAX_CONN, else 256): the
 * database connections of all workers together. --workers (default: the
 * CPUs this process may run on, sched_getaffinity). --read-buffer (default
 * 131072): tern_settings.read_buffer_size, the most one recv takes. tern's
 * own default (16 KiB) suits small requests; /upload's bodies of 0.5 to
 * 20 MB are read in a quarter of the recv calls with 128 KiB (nginx's
 * client_body_buffer_size in the arena's nginx configuration is the same),
 * and a connection holds the buffer only while it reads.
 *
 * Once every listener is up it prints "listening h1 PORT", "listening
 * h1-tls PORT", "listening h2c PORT", "listening h2 PORT", "listening h3
 * PORT" (those that are on), and "ready" once every worker runs. SIGINT and
 * SIGTERM stop it gracefully (exit 0).
 *
 * Routes (on every listener):
 *   GET  /baseline11?a=&b=      a+b, text/plain
 *   POST /baseline11?a=&b=      a+b+body (the body is an integer)
 *   GET  /baseline2?a=&b=       a+b
 *   GET  /pipeline              ok
 *   GET  /json/:count?m=        the first count items of the dataset with
 *                               total = price*quantity*m, built and
 *                               serialized per request, compressed (gzip,
 *                               br) by tern's route compression
 *   POST /upload                the body's byte count, streamed
 *   GET  /static/FILE           DIR/static through tern_static, with the
 *                               .br and .gz siblings
 *   GET  /ws                    WebSocket echo
 *   GET  /async-db?min=&max=&limit=   PostgreSQL (arena_db.c)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena_db.h"
#include "tern.h"

#define ARENA_PORT_OFF (-1)
#define ARENA_UPLOAD_MAX (64u << 20) /* /upload: larger bodies get 413 */
#define ARENA_BASELINE_BODY 1024     /* /baseline11's POST body */
#define ARENA_JSON_BUF (64u << 10)   /* the worker's serialization buffer */

static tern_server *server;
static atomic_uint workers_started;
static unsigned nworkers;

static const tern_header text_plain[] = {
    {"content-type", 12, "text/plain", 10}};
static const tern_header app_json[] = {
    {"content-type", 12, "application/json", 16}};

void arena_log(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "arena: %s\n", line);
}

/* ---- Numbers ---- */

/* A decimal integer, `n` bytes: an optional sign, then digits (leading
 * zeros allowed). 0 with *out set, or -1 (empty, not a number, or out of
 * int64's range). */
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

int arena_query_int(tern_request *r, const char *name, int64_t *out) {
  char buf[64];
  size_t qlen, n;
  const char *q = tern_request_query(r, &qlen);
  int rc;
  if (q == NULL)
    return 0;
  rc = tern_form_get(q, qlen, name, strlen(name), buf, sizeof(buf), &n);
  if (rc == TERN_ENOTFOUND)
    return 0;
  if (rc != 0 || parse_int(buf, n, out) != 0)
    return -1;
  return 1;
}

static void respond_text(tern_request *r, int status, const char *msg) {
  tern_respond(r, status, text_plain, 1, msg, strlen(msg));
}

static void respond_int(tern_request *r, int64_t v) {
  char line[24];
  int n = snprintf(line, sizeof(line), "%lld", (long long)v);
  tern_respond(r, 200, text_plain, 1, line, (size_t)n);
}

/* ---- /baseline11, /baseline2, /pipeline ---- */

/* a + b (a missing one counts 0); 0, or -1 after answering 400. */
static int sum_ab(tern_request *r, int64_t *sum) {
  int64_t a = 0, b = 0;
  if (arena_query_int(r, "a", &a) < 0 || arena_query_int(r, "b", &b) < 0 ||
      __builtin_add_overflow(a, b, sum)) {
    respond_text(r, 400, "a and b are integers\n");
    return -1;
  }
  return 0;
}

static void baseline(tern_request *r, void *user) {
  int64_t sum, v;
  size_t len;
  const char *body = tern_request_body(r, &len);
  (void)user;
  if (sum_ab(r, &sum) != 0)
    return;
  /* A POST's body is an integer, white space around it allowed; an empty
   * one counts 0 (tern has already undone chunked framing). */
  while (len > 0 && (body[len - 1] == '\n' || body[len - 1] == '\r' ||
                     body[len - 1] == ' ' || body[len - 1] == '\t'))
    len--;
  while (len > 0 && (body[0] == '\n' || body[0] == '\r' || body[0] == ' ' ||
                     body[0] == '\t')) {
    body++;
    len--;
  }
  if (len > 0 &&
      (parse_int(body, len, &v) != 0 || __builtin_add_overflow(sum, v, &sum))) {
    respond_text(r, 400, "the body is an integer\n");
    return;
  }
  respond_int(r, sum);
}

static void pipeline(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 200, text_plain, 1, "ok", 2);
}

/* ---- JSON ---- */

int arena_respond_json(tern_request *r, const json_t *root) {
  /* Each worker's own buffer: the body is copied (or compressed) by
   * tern_respond before it returns, so one per thread suffices. */
  static _Thread_local char buf[ARENA_JSON_BUF];
  size_t n;
  char *big;
  int rc;
  if (root == NULL ||
      (n = json_dumpb(root, buf, sizeof(buf), JSON_COMPACT)) == 0)
    return tern_respond(r, 503, text_plain, 1, "out of memory\n", 14);
  if (n <= sizeof(buf))
    return tern_respond(r, 200, app_json, 1, buf, n);
  big = malloc(n);
  if (big == NULL || json_dumpb(root, big, n, JSON_COMPACT) != n) {
    free(big);
    return tern_respond(r, 503, text_plain, 1, "out of memory\n", 14);
  }
  rc = tern_respond(r, 200, app_json, 1, big, n);
  free(big);
  return rc;
}

int arena_respond_empty(tern_request *r) {
  static const char empty[] = "{\"items\":[],\"count\":0}";
  return tern_respond(r, 200, app_json, 1, empty, sizeof(empty) - 1);
}

/* The dataset, loaded once and only read afterwards (from every worker):
 * the strings point into `dataset_doc`, which lives until the end. */
typedef struct {
  json_int_t id, price, quantity, score, count;
  int active;
  const char *name, *category;
  size_t name_len, category_len;
  const json_t *tags; /* an array of strings */
} item;

static json_t *dataset_doc;
static item *items;
static size_t nitems;

static int item_from_json(const json_t *o, item *it) {
  const json_t *name = json_object_get(o, "name"),
               *category = json_object_get(o, "category"),
               *rating = json_object_get(o, "rating"),
               *active = json_object_get(o, "active");
  size_t i;
  if (!json_is_integer(json_object_get(o, "id")) || !json_is_string(name) ||
      !json_is_string(category) ||
      !json_is_integer(json_object_get(o, "price")) ||
      !json_is_integer(json_object_get(o, "quantity")) ||
      !json_is_boolean(active) || !json_is_array(json_object_get(o, "tags")) ||
      !json_is_object(rating) ||
      !json_is_integer(json_object_get(rating, "score")) ||
      !json_is_integer(json_object_get(rating, "count")))
    return -1;
  it->id = json_integer_value(json_object_get(o, "id"));
  it->name = json_string_value(name);
  it->name_len = json_string_length(name);
  it->category = json_string_value(category);
  it->category_len = json_string_length(category);
  it->price = json_integer_value(json_object_get(o, "price"));
  it->quantity = json_integer_value(json_object_get(o, "quantity"));
  it->active = json_is_true(active);
  it->tags = json_object_get(o, "tags");
  for (i = 0; i < json_array_size(it->tags); i++)
    if (!json_is_string(json_array_get(it->tags, i)))
      return -1;
  it->score = json_integer_value(json_object_get(rating, "score"));
  it->count = json_integer_value(json_object_get(rating, "count"));
  return 0;
}

static void load_dataset(const char *dir) {
  char path[4096];
  json_error_t err;
  size_t i;
  snprintf(path, sizeof(path), "%s/dataset.json", dir);
  dataset_doc = json_load_file(path, 0, &err);
  if (dataset_doc == NULL || !json_is_array(dataset_doc)) {
    arena_log("%s: %s (line %d): /json answers 503", path,
              dataset_doc ? "not an array" : err.text, err.line);
    return;
  }
  items = calloc(json_array_size(dataset_doc) + 1, sizeof(*items));
  if (items == NULL)
    return;
  for (i = 0; i < json_array_size(dataset_doc); i++) {
    if (item_from_json(json_array_get(dataset_doc, i), &items[nitems]) != 0) {
      arena_log("%s: item %zu lacks a field or has the wrong type: skipped",
                path, i);
      continue;
    }
    nitems++;
  }
  arena_log("%s: %zu items", path, nitems);
}

/* One item as a fresh object, with total = price * quantity * m. NULL when
 * out of memory or when total overflows (*overflow set). */
static json_t *item_json(const item *it, json_int_t m, int *overflow) {
  json_t *o = json_object(), *tags = json_array(), *rating = json_object();
  json_int_t total;
  size_t i;
  int bad = o == NULL || tags == NULL || rating == NULL;
  if (__builtin_mul_overflow(it->price, it->quantity, &total) ||
      __builtin_mul_overflow(total, m, &total)) {
    *overflow = 1;
    bad = 1;
  }
  for (i = 0; !bad && i < json_array_size(it->tags); i++) {
    const json_t *t = json_array_get(it->tags, i);
    bad |= json_array_append_new(
               tags, json_stringn_nocheck(json_string_value(t),
                                          json_string_length(t))) != 0;
  }
  if (bad) {
    json_decref(o);
    json_decref(tags);
    json_decref(rating);
    return NULL;
  }
  bad |= json_object_set_new_nocheck(rating, "score",
                                     json_integer(it->score)) != 0;
  bad |= json_object_set_new_nocheck(rating, "count",
                                     json_integer(it->count)) != 0;
  bad |= json_object_set_new_nocheck(o, "id", json_integer(it->id)) != 0;
  bad |= json_object_set_new_nocheck(
             o, "name", json_stringn_nocheck(it->name, it->name_len)) != 0;
  bad |= json_object_set_new_nocheck(
             o, "category",
             json_stringn_nocheck(it->category, it->category_len)) != 0;
  bad |= json_object_set_new_nocheck(o, "price", json_integer(it->price)) != 0;
  bad |= json_object_set_new_nocheck(o, "quantity",
                                     json_integer(it->quantity)) != 0;
  bad |=
      json_object_set_new_nocheck(o, "active", json_boolean(it->active)) != 0;
  bad |= json_object_set_new_nocheck(o, "tags", tags) != 0;
  bad |= json_object_set_new_nocheck(o, "rating", rating) != 0;
  bad |= json_object_set_new_nocheck(o, "total", json_integer(total)) != 0;
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* GET /json/:count?m= : the first `count` items (clamped to the dataset),
 * m defaulting to 1. A count that is not a positive integer is 400. */
static void json_route(tern_request *r, void *user) {
  size_t len, i;
  const char *p = tern_request_param(r, "count", 5, &len);
  int64_t count, m = 1;
  int overflow = 0, bad = 0;
  json_t *root, *arr;
  (void)user;
  if (nitems == 0) {
    respond_text(r, 503, "no dataset\n");
    return;
  }
  if (p == NULL || parse_int(p, len, &count) != 0 || count < 1) {
    respond_text(r, 400, "count is a positive integer\n");
    return;
  }
  if (arena_query_int(r, "m", &m) < 0) {
    respond_text(r, 400, "m is an integer\n");
    return;
  }
  if ((uint64_t)count > nitems)
    count = (int64_t)nitems;
  /* The array joins the root first, so that the root owns everything. */
  root = json_object();
  arr = json_array();
  bad = json_object_set_new_nocheck(root, "items", arr) != 0;
  for (i = 0; !bad && i < (size_t)count; i++)
    bad |= json_array_append_new(arr, item_json(&items[i], m, &overflow)) != 0;
  if (bad ||
      json_object_set_new_nocheck(root, "count", json_integer(count)) != 0) {
    json_decref(root);
    if (overflow)
      respond_text(r, 400, "m is too large\n");
    else
      arena_respond_json(r, NULL);
    return;
  }
  arena_respond_json(r, root);
  json_decref(root);
}

/* ---- /upload ---- */

/* The count so far lives in the request's data pointer (no allocation). */
static void upload_body(tern_request *r, int event, const char *data,
                        size_t len, void *user) {
  uintptr_t total = (uintptr_t)tern_request_data(r);
  char line[24];
  int n;
  (void)data;
  (void)user;
  if (event == TERN_BODY_DATA) {
    total += len;
    tern_request_set_data(r, (void *)total);
    if (total > ARENA_UPLOAD_MAX) {
      /* Finished before the body ended: tern closes the connection. */
      tern_request_pause(r);
      respond_text(r, 413, "body too large\n");
    }
    return;
  }
  if (event == TERN_BODY_END) {
    n = snprintf(line, sizeof(line), "%llu", (unsigned long long)total);
    tern_respond(r, 200, text_plain, 1, line, (size_t)n);
  } else { /* the client went away or sent bad framing */
    respond_text(r, 400, "bad body\n");
  }
}

static void upload(tern_request *r, void *user) {
  int64_t declared = tern_request_body_length(r);
  int rc;
  (void)user;
  if (declared > (int64_t)ARENA_UPLOAD_MAX) {
    tern_request_close_after(r);
    respond_text(r, 413, "body too large\n");
    return;
  }
  tern_request_set_data(r, (void *)(uintptr_t)0);
  /* On HTTP/1.1 this sends "100 Continue" to a client that asked for it. */
  if ((rc = tern_request_read(r, upload_body, NULL)) != 0)
    respond_text(r, rc == TERN_ECLOSED ? 400 : 500, "cannot read the body\n");
}

/* ---- /ws ---- */

static void ws_message(tern_ws *ws, int type, const char *data, size_t len,
                       int fin, void *user) {
  (void)fin; /* whole messages: fin is always 1 */
  (void)user;
  tern_ws_send(ws, type, data, len);
}

/* A WebSocket handshake on any carrier (HTTP/1.1 Upgrade, or HTTP/2 and
 * HTTP/3 extended CONNECT) becomes an echo; anything else is answered by
 * tern_ws_accept itself (400, or 426 for another version). */
static void ws_route(tern_request *r, void *user) {
  tern_ws_options o;
  (void)user;
  tern_ws_options_init(&o);
  o.on_message = ws_message;
  o.deflate = 0; /* echo the very bytes; no permessage-deflate */
  tern_ws_accept(r, &o, NULL, NULL);
}

/* ---- Listeners, workers, signals ---- */

static void worker_start(tern_server *srv, unsigned worker, void *loop,
                         void *user) {
  (void)srv;
  (void)user;
  arena_db_worker_start(worker, loop);
  if (atomic_fetch_add(&workers_started, 1) + 1 == nworkers) {
    printf("ready\n");
    fflush(stdout);
  }
}

static void worker_stop(tern_server *srv, unsigned worker, void *loop,
                        void *user) {
  (void)srv;
  (void)user;
  arena_db_worker_stop(worker, loop);
}

static void on_signal(int sig) {
  (void)sig;
  tern_stop(server, ARENA_STOP_MS);
}

static unsigned affinity_cpus(void) {
  cpu_set_t set;
  long n;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    return (unsigned)CPU_COUNT(&set);
  n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1;
}

/* A port: 0 to 65535, or -1 / "off" for none. */
static int parse_port(const char *opt, const char *v, int *out) {
  int64_t p;
  if (strcmp(v, "off") == 0) {
    *out = ARENA_PORT_OFF;
    return 0;
  }
  if (parse_int(v, strlen(v), &p) != 0 || p < -1 || p > 65535) {
    arena_log("%s: a port number, 0 (any), or -1 / off (none): %s", opt, v);
    return -1;
  }
  *out = (int)p;
  return 0;
}

static int parse_count(const char *opt, const char *v, unsigned max,
                       unsigned *out) {
  int64_t n;
  if (parse_int(v, strlen(v), &n) != 0 || n < 1 || n > (int64_t)max) {
    arena_log("%s: an integer from 1 to %u: %s", opt, max, v);
    return -1;
  }
  *out = (unsigned)n;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: arena [--host ADDR] [--port N] [--tls-port N] "
          "[--h2c-port N] [--h2-port N] [--cert FILE] [--key FILE] "
          "[--data DIR] [--database URL] [--db-max-conn N] [--workers N]\n"
          "             [--read-buffer BYTES]\n");
}

/* `only`: 1 for HTTP/1.1 alone (http1_only), 2 for HTTP/2 alone
 * (http2_only), 0 for what the listener's kind offers. */
static int listen_on(const char *what, const char *host, int port,
                     tern_tls *tls, int quic, int only, int *bound) {
  tern_listen_options o;
  int rc;
  tern_listen_options_init(&o);
  o.host = host;
  o.port = port;
  o.tls = tls;
  o.quic = quic;
  o.http1_only = only == 1;
  o.http2_only = only == 2;
  if ((rc = tern_listen_with(server, &o, bound)) != 0)
    arena_log("%s listener on %s:%d: %s", what, host, port, tern_strerror(rc));
  return rc;
}

static int env_or(const char *name, const char *dflt, const char **out) {
  const char *v = getenv(name);
  *out = v != NULL && v[0] != '\0' ? v : dflt;
  return v != NULL && v[0] != '\0';
}

int main(int argc, char **argv) {
  const char *host = "0.0.0.0", *cert, *key, *data = "/data", *database;
  const char *max_conn_env;
  int port = 8080, tls_port = 8081, h2c_port = 8082, h2_port = 8443;
  int bound[5] = {0, 0, 0, 0, 0}, have[5] = {0, 0, 0, 0, 0};
  static const char *const names[5] = {"h1", "h1-tls", "h2c", "h2", "h3"};
  unsigned workers = affinity_cpus(), db_max_conn = 256, read_buffer = 131072;
  int explicit_max = 0, rc, i;
  tern_settings s;
  tern_tls *tls = NULL;
  tern_route_options body_opts, stream_opts, json_opts;
  tern_compress_options comp;
  tern_static *files = NULL;
  struct sigaction sa;
  char static_dir[4096];

  env_or("TLS_CERT", "/certs/server.crt", &cert);
  env_or("TLS_KEY", "/certs/server.key", &key);
  env_or("DATABASE_URL", NULL, &database);
  if (env_or("DATABASE_MAX_CONN", NULL, &max_conn_env) &&
      parse_count("DATABASE_MAX_CONN", max_conn_env, 1u << 20, &db_max_conn) !=
          0)
    return 2;
  for (i = 1; i < argc; i++) {
    const char *opt = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 0;
    if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
      usage();
      return 0;
    }
    if (v == NULL) {
      usage();
      return 2;
    }
    if (strcmp(opt, "--host") == 0)
      host = v, ok = 1;
    else if (strcmp(opt, "--port") == 0)
      ok = parse_port(opt, v, &port) == 0;
    else if (strcmp(opt, "--tls-port") == 0)
      ok = parse_port(opt, v, &tls_port) == 0;
    else if (strcmp(opt, "--h2c-port") == 0)
      ok = parse_port(opt, v, &h2c_port) == 0;
    else if (strcmp(opt, "--h2-port") == 0)
      ok = parse_port(opt, v, &h2_port) == 0;
    else if (strcmp(opt, "--cert") == 0)
      cert = v, ok = 1;
    else if (strcmp(opt, "--key") == 0)
      key = v, ok = 1;
    else if (strcmp(opt, "--data") == 0)
      data = v, ok = 1;
    else if (strcmp(opt, "--database") == 0)
      database = v, ok = 1;
    else if (strcmp(opt, "--db-max-conn") == 0)
      ok = parse_count(opt, v, 1u << 20, &db_max_conn) == 0, explicit_max = 1;
    else if (strcmp(opt, "--workers") == 0)
      ok = parse_count(opt, v, 1024, &workers) == 0;
    else if (strcmp(opt, "--read-buffer") == 0)
      ok = parse_count(opt, v, 1u << 24, &read_buffer) == 0;
    else
      arena_log("unknown option %s", opt);
    if (!ok) {
      usage();
      return 2;
    }
    i++;
  }

  tern_settings_init(&s);
  s.workers = workers;
  s.max_connections = 1u << 16; /* per worker; lowered to RLIMIT_NOFILE */
  s.read_buffer_size = read_buffer;
  if ((rc = tern_server_new(&s, &server)) != 0) {
    arena_log("%s", tern_strerror(rc));
    return 1;
  }
  nworkers = tern_server_workers(server);
  load_dataset(data);
  if (arena_db_init(nworkers, database, db_max_conn, explicit_max) != 0) {
    arena_log("database: out of memory");
    return 1;
  }

  /* Routes. */
  tern_route_options_init(&body_opts);
  body_opts.max_body_size = ARENA_BASELINE_BODY;
  tern_route_options_init(&stream_opts);
  stream_opts.flags = TERN_ROUTE_STREAM_BODY;
  stream_opts.max_body_size = ARENA_UPLOAD_MAX; /* streamed: we count */
  tern_compress_options_init(&comp);
  comp.encodings = TERN_COMPRESS_GZIP | TERN_COMPRESS_BR;
  comp.gzip_level = 6;
  comp.br_quality = 5;
  tern_route_options_init(&json_opts);
  json_opts.compress = &comp;
  rc = tern_route_with(server, "GET", "/json/:count", json_route, NULL,
                       &json_opts);
  if (rc == TERN_ENOTSUP) {
    arena_log("tern built without brotli: /json compresses with gzip only");
    comp.encodings = TERN_COMPRESS_GZIP;
    rc = tern_route_with(server, "GET", "/json/:count", json_route, NULL,
                         &json_opts);
  }
  if (rc != 0 ||
      (rc = tern_route(server, "GET", "/baseline11", baseline, NULL)) != 0 ||
      (rc = tern_route_with(server, "POST", "/baseline11", baseline, NULL,
                            &body_opts)) != 0 ||
      (rc = tern_route(server, "GET", "/baseline2", baseline, NULL)) != 0 ||
      (rc = tern_route(server, "GET", "/pipeline", pipeline, NULL)) != 0 ||
      (rc = tern_route_with(server, "POST", "/upload", upload, NULL,
                            &stream_opts)) != 0 ||
      (rc = tern_route(server, "GET", "/ws", ws_route, NULL)) != 0 ||
      (rc = tern_route(server, "GET", "/async-db", arena_db_handler, NULL)) !=
          0 ||
      (rc = tern_server_on_workers(server, worker_start, worker_stop, NULL)) !=
          0) {
    arena_log("routes: %s", tern_strerror(rc));
    return 1;
  }
  snprintf(static_dir, sizeof(static_dir), "%s/static", data);
  if (access(static_dir, R_OK | X_OK) != 0) {
    arena_log("%s: %s: /static/ answers 404", static_dir, strerror(errno));
  } else {
    tern_static_options so;
    tern_static_options_init(&so);
    so.root = static_dir;
    so.index = NULL;
    so.flags = TERN_STATIC_PRECOMPRESSED;
    if ((rc = tern_static_new(server, &so, &files)) != 0 ||
        (rc = tern_static_mount(server, "/static/", files)) != 0) {
      arena_log("%s: %s", static_dir, tern_strerror(rc));
      return 1;
    }
  }

  /* Listeners: the clear ones, then TLS with what the certificate allows. */
  if (port != ARENA_PORT_OFF) {
    if (listen_on("h1", host, port, NULL, 0, 0, &bound[0]) != 0)
      return 1;
    have[0] = 1;
  }
  if (h2c_port != ARENA_PORT_OFF) {
    if (listen_on("h2c", host, h2c_port, NULL, 0, 2, &bound[2]) != 0)
      return 1;
    have[2] = 1;
  }
  if (tls_port != ARENA_PORT_OFF || h2_port != ARENA_PORT_OFF) {
    if (access(cert, R_OK) != 0 || access(key, R_OK) != 0) {
      arena_log("no certificate (%s, %s): the TLS and QUIC listeners are "
                "skipped",
                cert, key);
    } else if ((rc = tern_tls_new(server, &tls)) != 0 ||
               (rc = tern_tls_add_cert_file(tls, cert, key)) != 0 ||
               (rc = tern_tls_commit(tls)) != 0) {
      arena_log("TLS (%s, %s): %s: the TLS and QUIC listeners are skipped",
                cert, key, tern_strerror(rc));
      tls = NULL;
    }
  }
  if (tls != NULL && tls_port != ARENA_PORT_OFF) {
    if (listen_on("h1-tls", host, tls_port, tls, 0, 1, &bound[1]) != 0)
      return 1;
    have[1] = 1;
  }
  if (tls != NULL && h2_port != ARENA_PORT_OFF) {
    if (listen_on("h2", host, h2_port, tls, 0, 0, &bound[3]) != 0)
      return 1;
    have[3] = 1;
    /* HTTP/3 on the UDP port of the number TCP got (Alt-Svc follows). */
    rc = listen_on("h3", host, bound[3], tls, 1, 0, &bound[4]);
    if (rc == TERN_ENOTSUP)
      arena_log("tern built without HTTP/3: no QUIC listener");
    else if (rc != 0)
      return 1;
    else
      have[4] = 1;
  }
  for (i = 0; i < 5; i++)
    if (have[i])
      printf("listening %s %d\n", names[i], bound[i]);
  fflush(stdout);

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  rc = tern_run(server);
  if (rc != 0)
    arena_log("run: %s", tern_strerror(rc));
  tern_server_free(server);
  tern_static_free(files);
  arena_db_free();
  free(items);
  json_decref(dataset_doc);
  return rc == 0 ? 0 : 1;
}
