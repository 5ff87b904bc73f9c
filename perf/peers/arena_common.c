/*
 * arena_common.c - what the arena peers share (see arena_common.h).
 *
 * Build: linked into arena_h2o, arena_mhd and arena_pgblock; needs
 * jansson (-ljansson).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "arena_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

const char *const arena_kind_names[ARENA_KINDS] = {"h1", "h1-tls", "h2c", "h2"};

static const char *peer = "arena"; /* the name messages start with */

/* ---- Numbers and query strings ---- */

int arena_parse_int(const char *s, size_t n, int64_t *out) {
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

int arena_query_int(const char *q, size_t qlen, const char *name,
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
      return arena_parse_int(eq + 1, (size_t)(pe - eq - 1), out) == 0 ? 1 : -1;
    }
    p = pe + 1;
  }
  return 0;
}

int arena_query_sum(const char *q, size_t qlen, int64_t *sum) {
  int64_t a = 0, b = 0;
  if (arena_query_int(q, qlen, "a", &a) < 0 ||
      arena_query_int(q, qlen, "b", &b) < 0 ||
      __builtin_add_overflow(a, b, sum))
    return -1;
  return 0;
}

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int arena_add_body(const char *body, size_t len, int64_t *sum) {
  int64_t v;
  if (len > ARENA_BASELINE_BODY_MAX)
    return -1;
  while (len > 0 && is_space(body[len - 1]))
    len--;
  while (len > 0 && is_space(body[0]))
    body++, len--;
  if (len > 0 && (arena_parse_int(body, len, &v) != 0 ||
                  __builtin_add_overflow(*sum, v, sum)))
    return -1;
  return 0;
}

/* ---- The command line ---- */

static int parse_port(const char *v, int *out) {
  int64_t p;
  if (strcmp(v, "off") == 0) {
    *out = ARENA_PORT_OFF;
    return 0;
  }
  if (arena_parse_int(v, strlen(v), &p) != 0 || p < -1 || p > 65535)
    return -1;
  *out = (int)p;
  return 0;
}

static int parse_count(const char *v, int64_t lo, int64_t hi, unsigned *out) {
  int64_t n;
  if (arena_parse_int(v, strlen(v), &n) != 0 || n < lo || n > hi)
    return -1;
  *out = (unsigned)n;
  return 0;
}

static void usage(unsigned uses) {
  if (uses & ARENA_USES_DB)
    fprintf(stderr,
            "usage: %s [--host ADDR] [--port N] [--database URL] "
            "[--db-max-conn N] (--tls-port, --h2c-port, --h2-port, --cert, "
            "--key, --data, --workers: ignored)\n",
            peer);
  else
    fprintf(stderr,
            "usage: %s [--host ADDR] [--port N] [--tls-port N] "
            "[--h2c-port N] [--h2-port N] [--cert F] [--key F] [--data DIR] "
            "[--database URL] [--db-max-conn N] [--workers N]\n",
            peer);
}

static const char *env_or(const char *name, const char *dflt) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? v : dflt;
}

int arena_args(const char *name, unsigned uses, int argc, char **argv,
               struct arena_opts *o) {
  static const char *const port_flags[ARENA_KINDS] = {
      "--port", "--tls-port", "--h2c-port", "--h2-port"};
  static const int port_defaults[ARENA_KINDS] = {8080, 8081, 8082, 8443};
  int a, k;
  peer = name;
  o->host = "0.0.0.0";
  o->data = "/data";
  o->cert = env_or("TLS_CERT", "/certs/server.crt");
  o->key = env_or("TLS_KEY", "/certs/server.key");
  o->database = NULL;
  o->db_max_conn = 256;
  o->workers = 1;
  for (k = 0; k < ARENA_KINDS; k++)
    o->ports[k] = port_defaults[k];
  if (uses & ARENA_USES_DB) {
    const char *env = getenv("DATABASE_MAX_CONN");
    o->database = env_or("DATABASE_URL", NULL);
    if (env != NULL && env[0] != '\0' &&
        parse_count(env, 1, 1 << 20, &o->db_max_conn) != 0) {
      fprintf(stderr, "%s: DATABASE_MAX_CONN: 1 to 1048576\n", peer);
      return 2;
    }
  }

  for (a = 1; a < argc; a++) {
    const char *f = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
    int ok = 1, known = 0;
    if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) {
      usage(uses);
      return 0;
    }
    if (v == NULL) {
      usage(uses);
      return 2;
    }
    for (k = 0; k < ARENA_KINDS && !known; k++)
      if (strcmp(f, port_flags[k]) == 0) {
        ok = parse_port(v, &o->ports[k]) == 0;
        known = 1;
      }
    if (known) {
      /* a port */
    } else if (strcmp(f, "--host") == 0)
      o->host = v;
    else if (strcmp(f, "--cert") == 0)
      o->cert = v;
    else if (strcmp(f, "--key") == 0)
      o->key = v;
    else if (strcmp(f, "--data") == 0)
      o->data = v;
    else if (strcmp(f, "--database") == 0) {
      if (uses & ARENA_USES_DB)
        o->database = v[0] != '\0' ? v : NULL;
    } else if (strcmp(f, "--db-max-conn") == 0) {
      if (uses & ARENA_USES_DB)
        ok = parse_count(v, 1, 1 << 20, &o->db_max_conn) == 0;
    } else if (strcmp(f, "--workers") == 0) {
      if (uses & ARENA_USES_WORKERS)
        ok = parse_count(v, 1, ARENA_MAX_WORKERS, &o->workers) == 0;
    } else {
      fprintf(stderr, "%s: unknown option %s\n", peer, f);
      ok = 0;
    }
    if (!ok) {
      fprintf(stderr, "%s: bad value for %s: %s\n", peer, f, v);
      usage(uses);
      return 2;
    }
    a++;
  }
  return -1;
}

/* ---- The process ---- */

int arena_setup(struct rlimit *rl) {
  signal(SIGPIPE, SIG_IGN);
  if (getrlimit(RLIMIT_NOFILE, rl) != 0)
    return -1;
  if (rl->rlim_cur < rl->rlim_max) {
    rl->rlim_cur = rl->rlim_max;
    setrlimit(RLIMIT_NOFILE, rl);
    getrlimit(RLIMIT_NOFILE, rl);
  }
  return 0;
}

void arena_block_stop(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, set, NULL);
}

void arena_wait_stop(const sigset_t *set) {
  int sig;
  sigwait(set, &sig);
}

struct addrinfo *arena_resolve(const char *host, int port) {
  struct addrinfo hints, *ai;
  char portstr[8];
  int rc;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  snprintf(portstr, sizeof(portstr), "%d", port);
  if ((rc = getaddrinfo(host, portstr, &hints, &ai)) != 0) {
    fprintf(stderr, "%s: %s: %s\n", peer, host, gai_strerror(rc));
    return NULL;
  }
  return ai;
}

int arena_listen(const char *host, int port, int reuseport, int *bound) {
  struct addrinfo *ai = arena_resolve(host, port);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  int fd, one = 1;
  if (ai == NULL)
    return -1;
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd == -1 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      (reuseport &&
       setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 65535) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    fprintf(stderr, "%s: listen on %s:%d: %s\n", peer, host, port,
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

void arena_ready(const int bound[ARENA_KINDS]) {
  int k;
  for (k = 0; k < ARENA_KINDS; k++)
    if (bound[k] != ARENA_PORT_OFF)
      printf("listening %s %d\n", arena_kind_names[k], bound[k]);
  printf("ready\n");
  fflush(stdout);
}

/* ---- /json ---- */

static json_t *dataset; /* the array from DIR/dataset.json */
static size_t nitems;   /* its leading items that are usable */

void arena_load_dataset(const char *dir) {
  char path[4096];
  json_error_t err;
  size_t i;
  snprintf(path, sizeof(path), "%s/dataset.json", dir);
  dataset = json_load_file(path, 0, &err);
  if (dataset == NULL || !json_is_array(dataset)) {
    fprintf(stderr, "%s: %s: %s: /json answers 503\n", peer, path,
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

void arena_free_dataset(void) {
  json_decref(dataset);
  dataset = NULL;
  nitems = 0;
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

int arena_json(const char *count, size_t count_len, int m_found, int64_t m,
               char **json, const char **msg) {
  int64_t n;
  int overflow = 0, bad;
  json_t *root, *arr;
  size_t i;
  *json = NULL;
  if (dataset == NULL || nitems == 0) {
    *msg = "no dataset\n";
    return 503;
  }
  if (arena_parse_int(count, count_len, &n) != 0 || n < 1) {
    *msg = "count is a positive integer\n";
    return 400;
  }
  if (m_found < 0) {
    *msg = "m is an integer\n";
    return 400;
  }
  if (m_found == 0)
    m = 1;
  if ((uint64_t)n > nitems)
    n = (int64_t)nitems;
  root = json_object();
  arr = json_array();
  bad = root == NULL || json_object_set_new(root, "items", arr) != 0;
  for (i = 0; !bad && i < (size_t)n; i++)
    bad = json_array_append_new(arr, item_json(i, m, &overflow)) != 0;
  if (!bad)
    bad = json_object_set_new(root, "count", json_integer(n)) != 0;
  *json = bad ? NULL : json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (*json == NULL) {
    *msg = overflow ? "m is too large\n" : "out of memory\n";
    return overflow ? 400 : 503;
  }
  return 200;
}

/* ---- /static ---- */

const struct arena_type arena_types[] = {
    {"css", "text/css"},          {"js", "application/javascript"},
    {"html", "text/html"},        {"woff2", "font/woff2"},
    {"svg", "image/svg+xml"},     {"webp", "image/webp"},
    {"json", "application/json"}, {NULL, NULL}};

const char *arena_content_type(const char *name) {
  const char *dot = strrchr(name, '.');
  size_t i;
  if (dot == NULL)
    return "application/octet-stream";
  for (i = 0; arena_types[i].ext != NULL; i++)
    if (strcmp(dot + 1, arena_types[i].ext) == 0)
      return arena_types[i].type;
  return strcmp(dot, ".txt") == 0 ? "text/plain" : "application/octet-stream";
}
