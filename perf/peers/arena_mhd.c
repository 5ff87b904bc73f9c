/*
 * arena_mhd.c - the libmicrohttpd peer of tern's arena app (HttpArena
 * profiles), HTTP/1.1 only.
 *
 * GNU libmicrohttpd (Debian's 0.9.75) with its internal polling threads:
 * MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, and a pool of
 * --workers threads (MHD_OPTION_THREAD_POOL_SIZE; default 1), each with
 * its own epoll set, sharing the listening socket.
 *
 *   arena_mhd [--host ADDR] [--port N] [--tls-port N] [--h2c-port N]
 *             [--h2-port N] [--cert F] [--key F] [--data DIR]
 *             [--database URL] [--db-max-conn N] [--workers N]
 *
 * Ports: 0 = any free one; -1 or "off" = none.  --port (8080) is HTTP/1.1
 * in the clear; --tls-port (8081) HTTP/1.1 over TLS when libmicrohttpd was
 * built with GnuTLS (MHD_FEATURE_TLS, checked at run time) and --cert and
 * --key (default $TLS_CERT/$TLS_KEY, else /certs/server.{crt,key}) can be
 * read.  --h2c-port, --h2-port, --database and --db-max-conn are accepted
 * and ignored: libmicrohttpd speaks no HTTP/2, and there is no /async-db.
 * Prints "listening h1 PORT" (and "listening h1-tls PORT"), then "ready".
 * SIGTERM/SIGINT stop the daemons: exit 0.
 *
 * Routes (libmicrohttpd has no router: the access handler compares the
 * path, which libmicrohttpd hands over without the query string):
 *   GET  /baseline11?a=&b=   a+b (text/plain)
 *   POST /baseline11?a=&b=   a+b+body (libmicrohttpd undoes chunked)
 *   GET  /baseline2?a=&b=    a+b (over HTTP/1.1 here)
 *   GET  /pipeline           ok
 *   GET  /json/COUNT?m=      the first COUNT dataset items with
 *                            total = price*quantity*m, built with jansson
 *                            and serialized per request; never compressed
 *                            (libmicrohttpd has no compression)
 *   POST /upload             the body's byte count, counted as the body
 *                            streams through the handler's upload_data
 *   GET  /static/FILE        DIR/static/FILE opened per request and sent
 *                            with MHD_create_response_from_fd, with the
 *                            Content-Type from a table; no .br/.gz
 *   anything else            404
 *
 * Build: cc -std=c11 -O2 arena_mhd.c -lmicrohttpd -ljansson -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
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
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#define PORT_OFF (-1)
#define MAX_WORKERS 1024
#define UPLOAD_MAX (64u << 20) /* /upload: larger bodies get 413 */
#define BASELINE_BODY_MAX 1024

enum route {
  R_NONE,
  R_BASELINE11,
  R_BASELINE2,
  R_PIPELINE,
  R_JSON,
  R_UPLOAD,
  R_STATIC
};

/* One request's state, from the first call of the handler to the
 * completion callback. */
struct req {
  enum route route;
  uint64_t received; /* body bytes seen */
  size_t blen;
  char body[BASELINE_BODY_MAX]; /* /baseline11's POST body */
};

static char static_dir[4096];
static json_t *dataset;
static size_t nitems;

/* ---- Numbers ---- */

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

/* The integer query argument `name`: 1 found, 0 absent, -1 malformed. */
static int arg_int(struct MHD_Connection *c, const char *name, int64_t *out) {
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
  if (v == NULL)
    return 0;
  return parse_int(v, strlen(v), out) == 0 ? 1 : -1;
}

/* ---- Responses ---- */

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r, const char *ctype) {
  enum MHD_Result ret;
  if (r == NULL)
    return MHD_NO;
  if (ctype != NULL)
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status,
                                 const char *msg) {
  return queue(c, status,
               MHD_create_response_from_buffer(strlen(msg), (void *)msg,
                                               MHD_RESPMEM_PERSISTENT),
               "text/plain");
}

static enum MHD_Result send_int(struct MHD_Connection *c, int64_t v) {
  char line[24];
  int n = snprintf(line, sizeof(line), "%lld", (long long)v);
  return queue(
      c, 200,
      MHD_create_response_from_buffer((size_t)n, line, MHD_RESPMEM_MUST_COPY),
      "text/plain");
}

/* ---- /baseline11, /baseline2 ---- */

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static enum MHD_Result baseline(struct MHD_Connection *c, struct req *q) {
  int64_t a = 0, b = 0, sum, v;
  const char *body = q->body;
  size_t len = q->blen;
  if (arg_int(c, "a", &a) < 0 || arg_int(c, "b", &b) < 0 ||
      __builtin_add_overflow(a, b, &sum))
    return send_text(c, 400, "a and b are integers\n");
  if (q->received > BASELINE_BODY_MAX)
    return send_text(c, 400, "the body is an integer\n");
  while (len > 0 && is_space(body[len - 1]))
    len--;
  while (len > 0 && is_space(body[0]))
    body++, len--;
  if (len > 0 &&
      (parse_int(body, len, &v) != 0 || __builtin_add_overflow(sum, v, &sum)))
    return send_text(c, 400, "the body is an integer\n");
  return send_int(c, sum);
}

/* ---- /json ---- */

static void load_dataset(const char *dir) {
  char path[4096];
  json_error_t err;
  size_t i;
  snprintf(path, sizeof(path), "%s/dataset.json", dir);
  dataset = json_load_file(path, 0, &err);
  if (dataset == NULL || !json_is_array(dataset)) {
    fprintf(stderr, "arena_mhd: %s: %s: /json answers 503\n", path,
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

/* A fresh copy of item i with "total" appended; NULL on overflow (with
 * *overflow set) or out of memory. */
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

static enum MHD_Result json_route(struct MHD_Connection *c, const char *url) {
  const char *p = url + 6; /* after "/json/" */
  int64_t count, m = 1;
  int overflow = 0, bad;
  json_t *root, *arr;
  char *out;
  size_t i;
  if (dataset == NULL || nitems == 0)
    return send_text(c, 503, "no dataset\n");
  if (parse_int(p, strlen(p), &count) != 0 || count < 1)
    return send_text(c, 400, "count is a positive integer\n");
  if (arg_int(c, "m", &m) < 0)
    return send_text(c, 400, "m is an integer\n");
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
  if (out == NULL)
    return overflow ? send_text(c, 400, "m is too large\n")
                    : send_text(c, 503, "out of memory\n");
  /* MHD frees the string (with free()) when the response goes. */
  return queue(
      c, 200,
      MHD_create_response_from_buffer(strlen(out), out, MHD_RESPMEM_MUST_FREE),
      "application/json");
}

/* ---- /static ---- */

static const char *content_type(const char *name) {
  static const struct {
    const char *ext, *type;
  } types[] = {{".css", "text/css"},          {".js", "application/javascript"},
               {".html", "text/html"},        {".woff2", "font/woff2"},
               {".svg", "image/svg+xml"},     {".webp", "image/webp"},
               {".json", "application/json"}, {".txt", "text/plain"}};
  const char *dot = strrchr(name, '.');
  size_t i;
  if (dot != NULL)
    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
      if (strcmp(dot, types[i].ext) == 0)
        return types[i].type;
  return "application/octet-stream";
}

static enum MHD_Result static_route(struct MHD_Connection *c, const char *url) {
  const char *name = url + 8; /* after "/static/" */
  char path[8192];
  struct stat st;
  int fd;
  /* One plain file name: no directories, no dot files (so no ".."). */
  if (name[0] == '\0' || name[0] == '.' || strchr(name, '/') != NULL ||
      (size_t)snprintf(path, sizeof(path), "%s/%s", static_dir, name) >=
          sizeof(path))
    return send_text(c, 404, "not found\n");
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
    return send_text(c, 404, "not found\n");
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return send_text(c, 404, "not found\n");
  }
  /* MHD closes fd when the response is destroyed. */
  return queue(c, 200, MHD_create_response_from_fd((uint64_t)st.st_size, fd),
               content_type(name));
}

/* ---- The access handler ---- */

static enum route route_of(const char *url) {
  if (strcmp(url, "/baseline11") == 0)
    return R_BASELINE11;
  if (strcmp(url, "/baseline2") == 0)
    return R_BASELINE2;
  if (strcmp(url, "/pipeline") == 0)
    return R_PIPELINE;
  if (strncmp(url, "/json/", 6) == 0)
    return R_JSON;
  if (strcmp(url, "/upload") == 0)
    return R_UPLOAD;
  if (strncmp(url, "/static/", 8) == 0)
    return R_STATIC;
  return R_NONE;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  struct req *q = *con_cls;
  int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
  (void)cls;
  (void)version;
  if (q == NULL) {
    /* The head has just been parsed.  Answering now would make MHD
     * 0.9.75 drop the connection's further input (and keep-alive), so
     * the answer waits for the call after the body. */
    if ((q = malloc(sizeof(*q))) == NULL)
      return MHD_NO;
    q->route = route_of(url);
    q->received = 0;
    q->blen = 0;
    *con_cls = q;
    return MHD_YES;
  }
  if (*upload_size > 0) { /* a piece of the body */
    size_t n = *upload_size;
    if (q->route == R_BASELINE11 && q->received + n <= BASELINE_BODY_MAX) {
      memcpy(q->body + q->blen, upload, n);
      q->blen += n;
    }
    q->received += n; /* counted, then dropped */
    *upload_size = 0;
    return MHD_YES;
  }
  switch (q->route) {
  case R_BASELINE11:
    return get || post ? baseline(c, q) : send_text(c, 405, "GET or POST\n");
  case R_BASELINE2:
    return get ? baseline(c, q) : send_text(c, 405, "GET\n");
  case R_PIPELINE:
    return get ? queue(c, 200,
                       MHD_create_response_from_buffer(2, (void *)"ok",
                                                       MHD_RESPMEM_PERSISTENT),
                       "text/plain")
               : send_text(c, 405, "GET\n");
  case R_JSON:
    return get ? json_route(c, url) : send_text(c, 405, "GET\n");
  case R_UPLOAD:
    if (!post)
      return send_text(c, 405, "POST\n");
    if (q->received > UPLOAD_MAX)
      return send_text(c, 413, "body too large\n");
    return send_int(c, (int64_t)q->received);
  case R_STATIC:
    return get ? static_route(c, url) : send_text(c, 405, "GET\n");
  case R_NONE:
  default:
    return send_text(c, 404, "not found\n");
  }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  free(*con_cls);
  *con_cls = NULL;
}

/* ---- Daemons ---- */

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long n;
  if (f == NULL)
    return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
      fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    } else {
      buf[n] = '\0';
    }
  }
  fclose(f);
  return buf;
}

/* A daemon on host:port (TLS when cert_pem is set); its port in *bound. */
static struct MHD_Daemon *start(const char *host, int port, unsigned nworkers,
                                unsigned conn_limit, const char *cert_pem,
                                const char *key_pem, int *bound) {
  struct addrinfo hints, *ai;
  struct MHD_Daemon *d;
  const union MHD_DaemonInfo *info;
  struct MHD_OptionItem opts[8];
  unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  char portstr[8];
  int rc, n = 0;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  snprintf(portstr, sizeof(portstr), "%d", port);
  if ((rc = getaddrinfo(host, portstr, &hints, &ai)) != 0) {
    fprintf(stderr, "arena_mhd: %s: %s\n", host, gai_strerror(rc));
    return NULL;
  }
  if (ai->ai_family == AF_INET6)
    flags |= MHD_USE_IPv6;
  if (cert_pem != NULL) {
    flags |= MHD_USE_TLS;
    opts[n++] =
        (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert_pem};
    opts[n++] =
        (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key_pem};
  }
  if (nworkers > 1)
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE,
                                        (intptr_t)nworkers, NULL};
  opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, NULL,
                       MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                       MHD_OPTION_CONNECTION_LIMIT, conn_limit,
                       MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)65535,
                       MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                       MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (d == NULL) {
    fprintf(stderr, "arena_mhd: cannot start the daemon on %s:%d\n", host,
            port);
    return NULL;
  }
  info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  if (info == NULL || info->port == 0) {
    fprintf(stderr, "arena_mhd: no bound port\n");
    MHD_stop_daemon(d);
    return NULL;
  }
  *bound = info->port;
  return d;
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
          "usage: arena_mhd [--host ADDR] [--port N] [--tls-port N] "
          "[--h2c-port N] [--h2-port N] [--cert F] [--key F] [--data DIR] "
          "[--database URL] [--db-max-conn N] [--workers N]\n");
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? v : dflt;
}

int main(int argc, char **argv) {
  const char *host = "0.0.0.0", *data = "/data";
  const char *cert = env_or("TLS_CERT", "/certs/server.crt");
  const char *key = env_or("TLS_KEY", "/certs/server.key");
  int port = 8080, tls_port = 8081, ignored, bound = 0, tls_bound = 0;
  unsigned nworkers = 1, conn_limit = 1u << 16;
  struct MHD_Daemon *d = NULL, *tls_d = NULL;
  char *cert_pem = NULL, *key_pem = NULL;
  struct rlimit rl;
  sigset_t set;
  int a, sig;

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
      ok = parse_port(v, &port) == 0;
    else if (strcmp(o, "--tls-port") == 0)
      ok = parse_port(v, &tls_port) == 0;
    else if (strcmp(o, "--h2c-port") == 0 || strcmp(o, "--h2-port") == 0)
      ok = parse_port(v, &ignored) == 0; /* no HTTP/2 in libmicrohttpd */
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
      fprintf(stderr, "arena_mhd: unknown option %s\n", o);
      ok = 0;
    }
    if (!ok) {
      fprintf(stderr, "arena_mhd: bad value for %s: %s\n", o, v);
      usage();
      return 2;
    }
    a++;
  }

  signal(SIGPIPE, SIG_IGN);
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
      getrlimit(RLIMIT_NOFILE, &rl);
    }
    /* MHD's default limit is FD_SETSIZE - 4; leave room for files. */
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 2 * (rlim_t)conn_limit)
      conn_limit = rl.rlim_cur > 64 ? (unsigned)(rl.rlim_cur / 2) : 16;
  }
  snprintf(static_dir, sizeof(static_dir), "%s/static", data);
  load_dataset(data);

  if (tls_port != PORT_OFF) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
      fprintf(stderr, "arena_mhd: libmicrohttpd has no TLS: no h1-tls\n");
      tls_port = PORT_OFF;
    } else if ((cert_pem = read_file(cert)) == NULL ||
               (key_pem = read_file(key)) == NULL) {
      fprintf(stderr,
              "arena_mhd: no certificate (%s, %s): the TLS listener is "
              "skipped\n",
              cert, key);
      tls_port = PORT_OFF;
    }
  }

  /* The daemons' threads inherit a mask without the stop signals. */
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);

  if (port != PORT_OFF &&
      (d = start(host, port, nworkers, conn_limit, NULL, NULL, &bound)) == NULL)
    return 1;
  if (tls_port != PORT_OFF &&
      (tls_d = start(host, tls_port, nworkers, conn_limit, cert_pem, key_pem,
                     &tls_bound)) == NULL)
    return 1;
  if (d != NULL)
    printf("listening h1 %d\n", bound);
  if (tls_d != NULL)
    printf("listening h1-tls %d\n", tls_bound);
  printf("ready\n");
  fflush(stdout);

  sigwait(&set, &sig);
  if (d != NULL)
    MHD_stop_daemon(d);
  if (tls_d != NULL)
    MHD_stop_daemon(tls_d);
  free(cert_pem);
  free(key_pem);
  json_decref(dataset);
  return 0;
}
