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
 * Build: cc -std=c11 -O2 arena_mhd.c arena_common.c -lmicrohttpd -ljansson
 *        -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#include "arena_common.h"

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
  char body[ARENA_BASELINE_BODY_MAX]; /* /baseline11's POST body */
};

static char static_dir[4096];

/* ---- Query arguments ---- */

/* The integer query argument `name`: 1 found, 0 absent, -1 malformed. */
static int arg_int(struct MHD_Connection *c, const char *name, int64_t *out) {
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
  if (v == NULL)
    return 0;
  return arena_parse_int(v, strlen(v), out) == 0 ? 1 : -1;
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

static enum MHD_Result baseline(struct MHD_Connection *c, struct req *q) {
  int64_t a = 0, b = 0, sum;
  if (arg_int(c, "a", &a) < 0 || arg_int(c, "b", &b) < 0 ||
      __builtin_add_overflow(a, b, &sum))
    return send_text(c, 400, ARENA_AB_MSG);
  /* q->body has the first ARENA_BASELINE_BODY_MAX bytes only. */
  if (q->received > ARENA_BASELINE_BODY_MAX ||
      arena_add_body(q->body, q->blen, &sum) != 0)
    return send_text(c, 400, ARENA_BODY_MSG);
  return send_int(c, sum);
}

/* ---- /json ---- */

static enum MHD_Result json_route(struct MHD_Connection *c, const char *url) {
  const char *p = url + 6; /* after "/json/" */
  int64_t m = 1;
  int m_found = arg_int(c, "m", &m), status;
  const char *msg;
  char *out;
  status = arena_json(p, strlen(p), m_found, m, &out, &msg);
  if (status != 200)
    return send_text(c, (unsigned)status, msg);
  /* MHD frees the string (with free()) when the response goes. */
  return queue(
      c, 200,
      MHD_create_response_from_buffer(strlen(out), out, MHD_RESPMEM_MUST_FREE),
      "application/json");
}

/* ---- /static ---- */

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
               arena_content_type(name));
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
    if (q->route == R_BASELINE11 &&
        q->received + n <= ARENA_BASELINE_BODY_MAX) {
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
    if (q->received > ARENA_UPLOAD_MAX)
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
  struct addrinfo *ai = arena_resolve(host, port);
  struct MHD_Daemon *d;
  const union MHD_DaemonInfo *info;
  struct MHD_OptionItem opts[8];
  unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
  int n = 0;
  if (ai == NULL)
    return NULL;
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

int main(int argc, char **argv) {
  struct arena_opts o;
  int bound[ARENA_KINDS] = {ARENA_PORT_OFF, ARENA_PORT_OFF, ARENA_PORT_OFF,
                            ARENA_PORT_OFF};
  int port, tls_port, rc;
  unsigned conn_limit = 1u << 16;
  struct MHD_Daemon *d = NULL, *tls_d = NULL;
  char *cert_pem = NULL, *key_pem = NULL;
  struct rlimit rl;
  sigset_t set;

  /* --h2c-port, --h2-port: no HTTP/2 in libmicrohttpd; --database and
   * --db-max-conn: no database route here */
  if ((rc = arena_args("arena_mhd", ARENA_USES_WORKERS, argc, argv, &o)) >= 0)
    return rc;
  port = o.ports[ARENA_H1];
  tls_port = o.ports[ARENA_H1_TLS];
  /* MHD's default limit is FD_SETSIZE - 4; leave room for files. */
  if (arena_setup(&rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      rl.rlim_cur < 2 * (rlim_t)conn_limit)
    conn_limit = rl.rlim_cur > 64 ? (unsigned)(rl.rlim_cur / 2) : 16;
  snprintf(static_dir, sizeof(static_dir), "%s/static", o.data);
  arena_load_dataset(o.data);

  if (tls_port != ARENA_PORT_OFF) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
      fprintf(stderr, "arena_mhd: libmicrohttpd has no TLS: no h1-tls\n");
      tls_port = ARENA_PORT_OFF;
    } else if ((cert_pem = read_file(o.cert)) == NULL ||
               (key_pem = read_file(o.key)) == NULL) {
      fprintf(stderr,
              "arena_mhd: no certificate (%s, %s): the TLS listener is "
              "skipped\n",
              o.cert, o.key);
      tls_port = ARENA_PORT_OFF;
    }
  }

  /* The daemons' threads inherit a mask without the stop signals. */
  arena_block_stop(&set);

  if (port != ARENA_PORT_OFF &&
      (d = start(o.host, port, o.workers, conn_limit, NULL, NULL,
                 &bound[ARENA_H1])) == NULL)
    return 1;
  if (tls_port != ARENA_PORT_OFF &&
      (tls_d = start(o.host, tls_port, o.workers, conn_limit, cert_pem, key_pem,
                     &bound[ARENA_H1_TLS])) == NULL)
    return 1;
  arena_ready(bound);

  arena_wait_stop(&set);
  if (d != NULL)
    MHD_stop_daemon(d);
  if (tls_d != NULL)
    MHD_stop_daemon(tls_d);
  free(cert_pem);
  free(key_pem);
  arena_free_dataset();
  return 0;
}
