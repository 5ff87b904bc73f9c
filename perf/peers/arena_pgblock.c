/*
 * arena_pgblock.c - the async-db profile's naive peer: a plain HTTP/1.1
 * server on POSIX sockets with one thread per client connection, each
 * thread querying PostgreSQL through its own blocking libpq connection.
 *
 *   arena_pgblock [--host ADDR] [--port N] [--database URL]
 *                 [--db-max-conn N] [--tls-port N] [--h2c-port N]
 *                 [--h2-port N] [--cert F] [--key F] [--data DIR]
 *                 [--workers N]
 *
 * --port (8080; 0 = any free one; -1 or "off" = none) is the only
 * listener; the TLS, h2c and h2 flags, --cert, --key, --data and
 * --workers are accepted and ignored.  --database (default
 * $DATABASE_URL) is a libpq connection string or URL; without it
 * /async-db answers the empty result.  --db-max-conn (default
 * $DATABASE_MAX_CONN, else 256) caps the connection threads, and with
 * them the database connections: a connection accepted beyond the cap is
 * answered 503 and closed.  Prints "listening h1 PORT", then "ready".
 * SIGTERM/SIGINT: exit 0.
 *
 * The accept loop runs on a thread of its own and starts a detached
 * thread per connection.  That thread reads requests into a 16 KiB
 * buffer (a request head must fit in it: else 431), parses the request
 * line and the headers (Content-Length bodies are read and dropped;
 * Transfer-Encoding gets 501; anything malformed 400, then close), and
 * answers the requests of a pipelined batch in order, written together.
 * Keep-alive as HTTP/1.1 says (Connection: close, HTTP/1.0); a connection
 * idle for 30 s is closed.
 *
 * The database: a thread opens its connection (PQconnectdb) on its first
 * /async-db request and prepares the query there (PQprepare), then runs
 * PQexecPrepared once per request, waiting for the rows.  When the thread
 * ends, its open connection is parked for the next thread to take (there
 * are never more connections than threads), so that clients that
 * reconnect every 25 requests (the benchmark's -r 25) do not cost a
 * database connect each time.  A failed connect makes every thread skip
 * connecting for 500 ms; a broken connection is dropped and reopened on
 * a later request.  On any database failure the answer is 200 with
 * {"items":[],"count":0}.
 *
 * Routes:
 *   GET /async-db?min=&max=&limit=  (10, 50, 50; limit clamped to 1..50)
 *       {"items":[{"id","name","category","price","quantity","active",
 *       "tags":[...],"rating":{"score","count"}}...],"count":N}
 *   GET /baseline11?a=&b=           a+b (text/plain)
 *   GET /pipeline                   ok
 *   anything else                   404 (405 for another method)
 *
 * Build: cc -std=c11 -O2 arena_pgblock.c arena_common.c -lpq -ljansson
 *        -lpthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "arena_common.h"

#define BUF_SIZE (16u << 10) /* a connection's input buffer */
#define MAX_HEADERS 64       /* per request */
#define BODY_MAX (1u << 20)  /* a request body larger than this: 413 */
#define IDLE_SECONDS 30      /* SO_RCVTIMEO / SO_SNDTIMEO */
#define THREAD_STACK (256u << 10)
#define BACKOFF_NS 500000000LL /* after a failed connect */

static const char QUERY[] =
    "SELECT id, name, category, price, quantity, active, tags, "
    "rating_score, rating_count FROM items WHERE price BETWEEN $1 AND $2 "
    "LIMIT $3";

static const char *database; /* NULL: no database */
static unsigned max_threads = 256;
static atomic_uint nthreads;       /* connection threads alive */
static atomic_llong backoff_until; /* CLOCK_MONOTONIC ns */
static int listen_fd = -1;

/* Idle database connections left by threads that ended. */
static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static PGconn **parked;
static unsigned nparked;

/* ---- Small helpers ---- */

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* RFC 9110 token characters (method and header names). */
static int is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

static int ieq(const char *a, size_t n, const char *b) {
  return strlen(b) == n && strncasecmp(a, b, n) == 0;
}

/* Does the comma-separated header value contain the token t? */
static int has_token(const char *v, size_t n, const char *t) {
  const char *p = v, *end = v + n;
  while (p < end) {
    const char *c = memchr(p, ',', (size_t)(end - p)), *e;
    e = c != NULL ? c : end;
    while (p < e && (*p == ' ' || *p == '\t'))
      p++;
    while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
      e--;
    if (ieq(p, (size_t)(e - p), t))
      return 1;
    p = (c != NULL ? c : end) + 1;
  }
  return 0;
}

/* ---- Output ---- */

struct out {
  char *buf;
  size_t len, cap;
  int failed;
};

static void out_add(struct out *o, const char *s, size_t n) {
  if (o->failed)
    return;
  if (o->len + n > o->cap) {
    size_t cap = o->cap ? o->cap : 4096;
    char *b;
    while (cap < o->len + n)
      cap *= 2;
    if ((b = realloc(o->buf, cap)) == NULL) {
      o->failed = 1;
      return;
    }
    o->buf = b;
    o->cap = cap;
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
}

static void respond(struct out *o, int status, const char *ctype,
                    const char *body, size_t len, int close) {
  const char *reason = status == 200   ? "OK"
                       : status == 400 ? "Bad Request"
                       : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed"
                       : status == 413 ? "Content Too Large"
                       : status == 431 ? "Request Header Fields Too Large"
                       : status == 501 ? "Not Implemented"
                       : status == 503 ? "Service Unavailable"
                                       : "Error";
  char head[256];
  int n = snprintf(head, sizeof(head),
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
                   "Content-Length: %zu\r\n%s\r\n",
                   status, reason, ctype, len,
                   close ? "Connection: close\r\n" : "");
  out_add(o, head, (size_t)n);
  out_add(o, body, len);
}

static void respond_text(struct out *o, int status, const char *msg,
                         int close) {
  respond(o, status, "text/plain", msg, strlen(msg), close);
}

/* Write everything; 0, or -1 when the peer is gone or too slow. */
static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* ---- The database ---- */

static PGconn *db_open(void) {
  PGconn *pg;
  PGresult *res;
  if (database == NULL || now_ns() < atomic_load(&backoff_until))
    return NULL;
  pthread_mutex_lock(&park_mu);
  pg = nparked > 0 ? parked[--nparked] : NULL;
  pthread_mutex_unlock(&park_mu);
  if (pg != NULL)
    return pg;
  pg = PQconnectdb(database);
  if (PQstatus(pg) != CONNECTION_OK) {
    fprintf(stderr, "arena_pgblock: connect: %s", PQerrorMessage(pg));
    PQfinish(pg);
    atomic_store(&backoff_until, now_ns() + BACKOFF_NS);
    return NULL;
  }
  res = PQprepare(pg, "q", QUERY, 3, NULL);
  if (PQresultStatus(res) != PGRES_COMMAND_OK) {
    fprintf(stderr, "arena_pgblock: prepare: %s", PQerrorMessage(pg));
    PQclear(res);
    PQfinish(pg);
    atomic_store(&backoff_until, now_ns() + BACKOFF_NS);
    return NULL;
  }
  PQclear(res);
  return pg;
}

/* A thread that ends leaves its healthy connection for the next one. */
static void db_park(PGconn *pg) {
  if (pg == NULL)
    return;
  if (PQstatus(pg) == CONNECTION_OK &&
      PQtransactionStatus(pg) == PQTRANS_IDLE) {
    pthread_mutex_lock(&park_mu);
    if (nparked < max_threads) {
      parked[nparked++] = pg;
      pg = NULL;
    }
    pthread_mutex_unlock(&park_mu);
  }
  if (pg != NULL)
    PQfinish(pg);
}

static json_int_t cell_int(const PGresult *res, int row, int col) {
  return (json_int_t)strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static json_t *cell_str(const PGresult *res, int row, int col) {
  json_t *s = json_stringn(PQgetvalue(res, row, col),
                           (size_t)PQgetlength(res, row, col));
  return s != NULL ? s : json_string("");
}

/* The rows as the arena's JSON; NULL when out of memory. */
static char *rows_json(const PGresult *res) {
  json_t *root = json_object(), *items = json_array();
  int n = PQntuples(res), i, bad;
  char *s;
  bad = root == NULL || json_object_set_new(root, "items", items) != 0;
  for (i = 0; !bad && i < n; i++) {
    json_t *o = json_object(), *rating = json_object(), *tags;
    tags = json_loadb(PQgetvalue(res, i, 6), (size_t)PQgetlength(res, i, 6), 0,
                      NULL);
    if (tags == NULL || !json_is_array(tags)) {
      json_decref(tags);
      tags = json_array();
    }
    bad |=
        json_object_set_new(rating, "score", json_integer(cell_int(res, i, 7)));
    bad |=
        json_object_set_new(rating, "count", json_integer(cell_int(res, i, 8)));
    bad |= json_object_set_new(o, "id", json_integer(cell_int(res, i, 0)));
    bad |= json_object_set_new(o, "name", cell_str(res, i, 1));
    bad |= json_object_set_new(o, "category", cell_str(res, i, 2));
    bad |= json_object_set_new(o, "price", json_integer(cell_int(res, i, 3)));
    bad |=
        json_object_set_new(o, "quantity", json_integer(cell_int(res, i, 4)));
    bad |= json_object_set_new(o, "active",
                               json_boolean(PQgetvalue(res, i, 5)[0] == 't'));
    bad |= json_object_set_new(o, "tags", tags);
    bad |= json_object_set_new(o, "rating", rating);
    bad |= json_array_append_new(items, o);
  }
  if (!bad)
    bad = json_object_set_new(root, "count", json_integer(n)) != 0;
  s = bad ? NULL : json_dumps(root, JSON_COMPACT);
  json_decref(root);
  return s;
}

static void async_db(PGconn **pg, const char *q, size_t qlen, struct out *o,
                     int close) {
  static const char empty[] = ARENA_DB_EMPTY;
  int64_t min = 10, max = 50, limit = 50;
  char smin[24], smax[24], slimit[24];
  const char *values[3] = {smin, smax, slimit};
  PGresult *res;
  char *body;
  if (arena_query_int(q, qlen, "min", &min) < 0 ||
      arena_query_int(q, qlen, "max", &max) < 0 ||
      arena_query_int(q, qlen, "limit", &limit) < 0) {
    respond_text(o, 400, "min, max and limit are integers\n", close);
    return;
  }
  limit = limit < 1 ? 1 : limit > 50 ? 50 : limit;
  min = min < INT_MIN ? INT_MIN : min > INT_MAX ? INT_MAX : min;
  max = max < INT_MIN ? INT_MIN : max > INT_MAX ? INT_MAX : max;
  snprintf(smin, sizeof(smin), "%lld", (long long)min);
  snprintf(smax, sizeof(smax), "%lld", (long long)max);
  snprintf(slimit, sizeof(slimit), "%lld", (long long)limit);
  if (*pg == NULL && (*pg = db_open()) == NULL) {
    respond(o, 200, "application/json", empty, sizeof(empty) - 1, close);
    return;
  }
  res = PQexecPrepared(*pg, "q", 3, values, NULL, NULL, 0);
  if (PQresultStatus(res) != PGRES_TUPLES_OK) {
    fprintf(stderr, "arena_pgblock: query: %s", PQerrorMessage(*pg));
    PQclear(res);
    if (PQstatus(*pg) != CONNECTION_OK) { /* reopened on a later request */
      PQfinish(*pg);
      *pg = NULL;
    }
    respond(o, 200, "application/json", empty, sizeof(empty) - 1, close);
    return;
  }
  body = rows_json(res);
  PQclear(res);
  if (body == NULL) {
    respond_text(o, 503, "out of memory\n", close);
    return;
  }
  respond(o, 200, "application/json", body, strlen(body), close);
  free(body);
}

/* ---- HTTP/1.1 ---- */

struct request {
  const char *method, *target, *path, *query;
  size_t method_len, target_len, path_len, query_len;
  int64_t content_length; /* -1: none */
  int close;   /* Connection: close, or HTTP/1.0 without keep-alive */
  int chunked; /* any Transfer-Encoding */
};

/* The next line of [p, end): its length without CRLF (or a bare LF), and
 * *next after it; -1 when there is no line end. */
static ssize_t line_at(const char *p, const char *end, const char **next) {
  const char *lf = memchr(p, '\n', (size_t)(end - p));
  if (lf == NULL)
    return -1;
  *next = lf + 1;
  return lf > p && lf[-1] == '\r' ? lf - 1 - p : lf - p;
}

/* Parses the head in [p, p + n) (the blank line included): 0, or the
 * status to answer before closing. */
static int parse_head(const char *p, size_t n, struct request *r) {
  const char *end = p + n, *next, *sp1, *sp2, *q;
  ssize_t ll = line_at(p, end, &next);
  int minor, have_cl = 0, keep_alive = 0, count = 0;
  memset(r, 0, sizeof(*r));
  r->content_length = -1;
  if (ll <= 0)
    return 400;
  /* METHOD SP request-target SP HTTP/1.x */
  sp1 = memchr(p, ' ', (size_t)ll);
  if (sp1 == NULL || sp1 == p)
    return 400;
  sp2 = memchr(sp1 + 1, ' ', (size_t)(p + ll - sp1 - 1));
  if (sp2 == NULL || sp2 == sp1 + 1 || p + ll - sp2 - 1 != 8 ||
      memcmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
    return 400;
  minor = sp2[8] - '0';
  for (q = p; q < sp1; q++)
    if (!is_tchar((unsigned char)*q))
      return 400;
  for (q = sp1 + 1; q < sp2; q++)
    if ((unsigned char)*q <= ' ' || *q == 0x7f)
      return 400;
  r->method = p;
  r->method_len = (size_t)(sp1 - p);
  r->target = sp1 + 1;
  r->target_len = (size_t)(sp2 - sp1 - 1);
  if (r->target[0] != '/')
    return 400;
  q = memchr(r->target, '?', r->target_len);
  r->path = r->target;
  r->path_len = q != NULL ? (size_t)(q - r->target) : r->target_len;
  r->query = q != NULL ? q + 1 : "";
  r->query_len = q != NULL ? r->target_len - r->path_len - 1 : 0;

  /* Header fields, up to the blank line. */
  for (p = next;; p = next) {
    const char *colon, *v, *ve;
    ll = line_at(p, end, &next);
    if (ll < 0)
      return 400;
    if (ll == 0)
      break;
    if (++count > MAX_HEADERS)
      return 431;
    colon = memchr(p, ':', (size_t)ll);
    if (colon == NULL || colon == p)
      return 400;
    for (q = p; q < colon; q++)
      if (!is_tchar((unsigned char)*q))
        return 400; /* also: white space before the colon */
    v = colon + 1;
    ve = p + ll;
    while (v < ve && (*v == ' ' || *v == '\t'))
      v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
      ve--;
    if (ieq(p, (size_t)(colon - p), "content-length")) {
      int64_t cl;
      if (arena_parse_int(v, (size_t)(ve - v), &cl) != 0 || cl < 0 ||
          v[0] == '+' || (have_cl && cl != r->content_length))
        return 400;
      r->content_length = cl;
      have_cl = 1;
    } else if (ieq(p, (size_t)(colon - p), "transfer-encoding")) {
      r->chunked = 1;
    } else if (ieq(p, (size_t)(colon - p), "connection")) {
      if (has_token(v, (size_t)(ve - v), "close"))
        r->close = 1;
      if (has_token(v, (size_t)(ve - v), "keep-alive"))
        keep_alive = 1;
    }
  }
  if (minor == 0 && !keep_alive)
    r->close = 1;
  if (r->chunked && have_cl)
    return 400;
  return 0;
}

static void dispatch(const struct request *r, PGconn **pg, struct out *o) {
  int get = r->method_len == 3 && memcmp(r->method, "GET", 3) == 0;
  int known = 1;
  if (r->path_len == 9 && memcmp(r->path, "/async-db", 9) == 0) {
    if (get)
      async_db(pg, r->query, r->query_len, o, r->close);
  } else if (r->path_len == 11 && memcmp(r->path, "/baseline11", 11) == 0) {
    int64_t sum;
    if (get) {
      if (arena_query_sum(r->query, r->query_len, &sum) != 0) {
        respond_text(o, 400, ARENA_AB_MSG, r->close);
      } else {
        char line[24];
        int n = snprintf(line, sizeof(line), "%lld", (long long)sum);
        respond(o, 200, "text/plain", line, (size_t)n, r->close);
      }
    }
  } else if (r->path_len == 9 && memcmp(r->path, "/pipeline", 9) == 0) {
    if (get)
      respond(o, 200, "text/plain", "ok", 2, r->close);
  } else {
    known = 0;
    respond_text(o, 404, "not found\n", r->close);
  }
  if (known && !get)
    respond_text(o, 405, "GET only\n", r->close);
}

/* Reads and drops n body bytes, first those in the buffer.  0, or -1. */
static int skip_body(int fd, size_t len, size_t *off, uint64_t n) {
  char sink[4096];
  size_t have = len - *off, take = have < n ? have : (size_t)n;
  *off += take;
  n -= take;
  while (n > 0) {
    ssize_t got =
        recv(fd, sink, n < sizeof(sink) ? (size_t)n : sizeof(sink), 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return -1;
    n -= (uint64_t)got;
  }
  return 0;
}

static void serve(int fd) {
  char *buf = malloc(BUF_SIZE);
  size_t len = 0, off;
  struct out o = {NULL, 0, 0, 0};
  PGconn *pg = NULL;
  int open = buf != NULL;
  while (open) {
    ssize_t got = recv(fd, buf + len, BUF_SIZE - len, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break; /* EOF, error, or idle too long */
    len += (size_t)got;
    /* Every complete request in the buffer, in order. */
    off = 0;
    o.len = 0;
    while (open) {
      const char *head, *e, *e2;
      struct request r;
      size_t hlen;
      int status;
      /* Blank lines before a request line are allowed (RFC 9112 2.2). */
      while (off < len && (buf[off] == '\r' || buf[off] == '\n'))
        off++;
      head = buf + off;
      /* The head ends at the first blank line (CRLF, or a bare LF). */
      e = memmem(head, len - off, "\n\r\n", 3);
      e2 = memmem(head, len - off, "\n\n", 2);
      if (e == NULL || (e2 != NULL && e2 < e))
        e = e2;
      if (e == NULL) {
        if (off == 0 && len == BUF_SIZE) { /* a head too large */
          respond_text(&o, 431, "request head too large\n", 1);
          open = 0;
        }
        break;
      }
      hlen = (size_t)(e - head) + (e[1] == '\r' ? 3 : 2);
      status = parse_head(head, hlen, &r);
      off += hlen;
      if (status == 0 && r.chunked)
        status = 501;
      if (status == 0 && r.content_length > (int64_t)BODY_MAX)
        status = 413;
      if (status != 0) {
        respond_text(&o, status, "bad request\n", 1);
        open = 0;
        break;
      }
      if (r.content_length > 0 &&
          skip_body(fd, len, &off, (uint64_t)r.content_length) != 0) {
        open = 0;
        break;
      }
      dispatch(&r, &pg, &o);
      if (r.close)
        open = 0;
    }
    if (o.failed || (o.len > 0 && write_all(fd, o.buf, o.len) != 0))
      break;
    /* Keep the unparsed rest at the start of the buffer. */
    memmove(buf, buf + off, len - off);
    len -= off;
  }
  db_park(pg);
  free(o.buf);
  free(buf);
}

/* Closing with unread input would reset the connection and could take
 * the last answer with it: stop writing, then read what the client still
 * sends (1 s, 1 MiB at most) before closing. */
static void linger_close(int fd) {
  struct timeval tv = {1, 0};
  char sink[4096];
  size_t total = 0;
  ssize_t got;
  shutdown(fd, SHUT_WR);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  while (total < (1u << 20) && ((got = recv(fd, sink, sizeof(sink), 0)) > 0 ||
                                (got < 0 && errno == EINTR)))
    total += got > 0 ? (size_t)got : 0;
  close(fd);
}

static void *conn_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  serve(fd);
  linger_close(fd);
  atomic_fetch_sub(&nthreads, 1);
  return NULL;
}

/* Over the thread cap: 503, then close (the request, if any, drained
 * first so that the close does not reset the answer away). */
static void refuse(int fd) {
  static const char busy[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
      "Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n";
  char sink[4096];
  (void)write_all(fd, busy, sizeof(busy) - 1);
  shutdown(fd, SHUT_WR);
  while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
    ;
  close(fd);
}

static void *accept_main(void *arg) {
  pthread_attr_t attr;
  struct timeval tv = {IDLE_SECONDS, 0};
  int one = 1;
  (void)arg;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, THREAD_STACK);
  for (;;) {
    pthread_t t;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM ||
          errno == ENOBUFS)
        usleep(10000);
      continue;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (atomic_fetch_add(&nthreads, 1) >= max_threads) {
      atomic_fetch_sub(&nthreads, 1);
      refuse(fd);
      continue;
    }
    if (pthread_create(&t, &attr, conn_main, (void *)(intptr_t)fd) != 0) {
      atomic_fetch_sub(&nthreads, 1);
      refuse(fd);
    }
  }
  return NULL;
}

/* ---- main ---- */

int main(int argc, char **argv) {
  struct arena_opts o;
  int bound[ARENA_KINDS] = {ARENA_PORT_OFF, ARENA_PORT_OFF, ARENA_PORT_OFF,
                            ARENA_PORT_OFF};
  int rc;
  struct rlimit rl;
  pthread_t acceptor;
  sigset_t set;

  /* --tls-port, --h2c-port, --h2-port, --cert, --key, --data and
   * --workers: nothing here uses them */
  if ((rc = arena_args("arena_pgblock", ARENA_USES_DB, argc, argv, &o)) >= 0)
    return rc;
  database = o.database;
  max_threads = o.db_max_conn;
  if (database == NULL)
    fprintf(stderr, "arena_pgblock: no database: /async-db answers the "
                    "empty result\n");
  if ((parked = calloc(max_threads, sizeof(*parked))) == NULL)
    return 1;

  arena_setup(&rl);
  arena_block_stop(&set);

  if (o.ports[ARENA_H1] != ARENA_PORT_OFF) {
    if ((listen_fd =
             arena_listen(o.host, o.ports[ARENA_H1], 0, &bound[ARENA_H1])) < 0)
      return 1;
    if (pthread_create(&acceptor, NULL, accept_main, NULL) != 0) {
      perror("arena_pgblock: pthread_create");
      return 1;
    }
  }
  arena_ready(bound);
  arena_wait_stop(&set);
  /* Connection threads may be inside libpq: end without tearing down. */
  _exit(0);
}
