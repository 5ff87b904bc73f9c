/* Shared parts of the load clients; see common.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

uint64_t lg_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- Histogram ---- */

static size_t hist_index(uint64_t v) {
  int shift;
  if (v < 2 * LG_HIST_SUB)
    return (size_t)v;
  /* v has its top bit at 8 or above; keep its top 8 bits. */
  shift = 63 - __builtin_clzll(v) - 7;
  return 2 * LG_HIST_SUB + (size_t)(shift - 1) * LG_HIST_SUB +
         (size_t)((v >> shift) - LG_HIST_SUB);
}

/* The middle of bucket i: the error is then at most half a bucket. */
static uint64_t hist_value(size_t i) {
  size_t j;
  int shift;
  if (i < 2 * LG_HIST_SUB)
    return i;
  j = i - 2 * LG_HIST_SUB;
  shift = (int)(j / LG_HIST_SUB) + 1;
  return ((uint64_t)(j % LG_HIST_SUB + LG_HIST_SUB) << shift) +
         ((uint64_t)1 << (shift - 1));
}

void lg_hist_record(lg_hist *h, uint64_t us) {
  if (us >= LG_HIST_MAX_US)
    us = LG_HIST_MAX_US - 1;
  h->counts[hist_index(us)]++;
  h->total++;
  if (us > h->max_us)
    h->max_us = us;
}

uint64_t lg_hist_quantile(const lg_hist *h, double q) {
  uint64_t rank, seen = 0;
  size_t i;
  if (h->total == 0)
    return 0;
  rank = (uint64_t)ceil(q * (double)h->total);
  if (rank < 1)
    rank = 1;
  if (rank >= h->total)
    return h->max_us; /* known exactly */
  for (i = 0; i < LG_HIST_BUCKETS; i++) {
    seen += h->counts[i];
    if (seen >= rank) {
      uint64_t v = hist_value(i);
      return v < h->max_us ? v : h->max_us;
    }
  }
  return h->max_us;
}

/* ---- Response parser ---- */

void lg_resp_init(lg_resp *p) {
  memset(p, 0, sizeof(*p));
  p->state = LG_RP_HEAD;
}

static int lower(int c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

int lg_name_is(const char *p, size_t n, const char *want) {
  size_t i;
  if (strlen(want) != n)
    return 0;
  for (i = 0; i < n; i++)
    if (lower((unsigned char)p[i]) != want[i])
      return 0;
  return 1;
}

int lg_has_token(const char *v, size_t n, const char *token) {
  size_t i = 0;
  while (i < n) {
    size_t s, e;
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
      i++;
    s = i;
    while (i < n && v[i] != ',')
      i++;
    e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
      e--;
    if (lg_name_is(v + s, e - s, token))
      return 1;
  }
  return 0;
}

int lg_field_line(const char **line, const char *stop, lg_field *f) {
  const char *l = *line, *eol, *colon, *v, *ve;
  eol = memchr(l, '\n', (size_t)(stop + 2 - l));
  if (eol == NULL || eol == l || eol[-1] != '\r')
    return LG_FIELD_BAD_LINE;
  colon = memchr(l, ':', (size_t)(eol - l));
  if (colon == NULL || colon == l)
    return LG_FIELD_NO_COLON;
  v = colon + 1;
  ve = eol - 1;
  while (v < ve && (*v == ' ' || *v == '\t'))
    v++;
  while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
    ve--;
  f->name = l;
  f->name_len = (size_t)(colon - l);
  f->value = v;
  f->value_len = (size_t)(ve - v);
  *line = eol + 1;
  return 0;
}

/* The last token of a comma-separated list, for Transfer-Encoding. */
static int last_token_is(const char *v, size_t n, const char *token) {
  size_t e = n, s;
  while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
    e--;
  s = e;
  while (s > 0 && v[s - 1] != ',' && v[s - 1] != ' ' && v[s - 1] != '\t')
    s--;
  return lg_name_is(v + s, e - s, token);
}

/* Parse one head (ending at CRLF CRLF, at most LG_HEAD_MAX bytes). Returns
 * bytes consumed, 0 when incomplete, -1 when malformed. */
static long parse_head(lg_resp *p, const char *buf, size_t len) {
  const char *end, *line;
  int minor, status, chunked = 0, close_tok = 0, keep_tok = 0;
  int has_len = 0;
  uint64_t clen = 0;
  size_t head_len;

  end = memmem(buf, len < LG_HEAD_MAX ? len : LG_HEAD_MAX, "\r\n\r\n", 4);
  if (end == NULL)
    return len >= LG_HEAD_MAX ? -1 : 0;
  head_len = (size_t)(end - buf) + 4;
  /* Status line: HTTP/1.x SP 3DIGIT SP reason */
  if (head_len < 16 || memcmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ')
    return -1;
  if (buf[7] != '0' && buf[7] != '1')
    return -1;
  minor = buf[7] - '0';
  if (buf[9] < '1' || buf[9] > '5' || buf[10] < '0' || buf[10] > '9' ||
      buf[11] < '0' || buf[11] > '9' || (buf[12] != ' ' && buf[12] != '\r'))
    return -1;
  status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
  line = (const char *)memchr(buf, '\n', head_len) + 1;
  while (line < end + 2) {
    lg_field f;
    const char *v, *ve;
    if (lg_field_line(&line, end + 2, &f) != 0)
      return -1;
    v = f.value;
    ve = f.value + f.value_len;
    if (lg_name_is(f.name, f.name_len, "content-length")) {
      uint64_t n = 0;
      const char *d;
      if (v == ve)
        return -1;
      for (d = v; d < ve; d++) {
        if (*d < '0' || *d > '9' || n > (UINT64_MAX - 9) / 10)
          return -1;
        n = n * 10 + (uint64_t)(*d - '0');
      }
      if (has_len && n != clen)
        return -1; /* conflicting lengths: framing unknowable */
      has_len = 1;
      clen = n;
    } else if (lg_name_is(f.name, f.name_len, "transfer-encoding")) {
      if (!last_token_is(v, (size_t)(ve - v), "chunked"))
        return -1; /* only chunked can be framed by a client */
      chunked = 1;
    } else if (lg_name_is(f.name, f.name_len, "connection")) {
      close_tok |= lg_has_token(v, (size_t)(ve - v), "close");
      keep_tok |= lg_has_token(v, (size_t)(ve - v), "keep-alive");
    }
  }
  if (status < 200) {
    if (status == 101)
      return -1;           /* never asked for an upgrade */
    return (long)head_len; /* interim: the final response follows */
  }
  p->status = status;
  p->close = close_tok || (minor == 0 && !keep_tok);
  if (status == 204 || status == 304) {
    p->state = LG_RP_DONE;
  } else if (chunked) {
    p->state = LG_RP_CHUNK_SIZE;
  } else if (has_len) {
    p->left = clen;
    p->state = clen ? LG_RP_LENGTH : LG_RP_DONE;
  } else {
    p->state = LG_RP_UNTIL_CLOSE;
    p->close = 1;
  }
  return (long)head_len;
}

/* A CRLF-terminated line starting at buf; returns its length including the
 * CRLF, 0 when incomplete, -1 when too long or a bare LF. */
static long line_len(const char *buf, size_t len) {
  const char *nl = memchr(buf, '\n', len < LG_HEAD_MAX ? len : LG_HEAD_MAX);
  if (nl == NULL)
    return len >= LG_HEAD_MAX ? -1 : 0;
  if (nl == buf || nl[-1] != '\r')
    return -1;
  return (long)(nl - buf) + 1;
}

int lg_resp_feed(lg_resp *p, const char *buf, size_t len, size_t *used) {
  size_t pos = 0;
  for (;;) {
    const char *b = buf + pos;
    size_t n = len - pos;
    long k;
    switch (p->state) {
    case LG_RP_DONE:
      *used = pos;
      return LG_RP_COMPLETE;
    case LG_RP_HEAD:
      k = parse_head(p, b, n);
      if (k <= 0)
        break;
      pos += (size_t)k;
      continue;
    case LG_RP_UNTIL_CLOSE:
      *used = len; /* everything up to EOF is body */
      return LG_RP_MORE;
    case LG_RP_LENGTH:
    case LG_RP_CHUNK_DATA: {
      size_t take = n < p->left ? n : (size_t)p->left;
      pos += take;
      p->left -= take;
      if (p->left > 0) {
        *used = pos;
        return LG_RP_MORE;
      }
      p->state = p->state == LG_RP_LENGTH ? LG_RP_DONE : LG_RP_CHUNK_CRLF;
      continue;
    }
    case LG_RP_CHUNK_SIZE: {
      uint64_t size = 0;
      long i;
      int digits = 0;
      k = line_len(b, n);
      if (k <= 0)
        break;
      for (i = 0; i < k - 2; i++) {
        int c = lower((unsigned char)b[i]), d;
        if (c >= '0' && c <= '9')
          d = c - '0';
        else if (c >= 'a' && c <= 'f')
          d = c - 'a' + 10;
        else
          break;
        if (size > (UINT64_MAX >> 4))
          return LG_RP_ERROR;
        size = size * 16 + (uint64_t)d;
        digits++;
      }
      /* After the digits: only whitespace or a chunk extension. */
      if (digits == 0 ||
          (i < k - 2 && b[i] != ';' && b[i] != ' ' && b[i] != '\t'))
        return LG_RP_ERROR;
      pos += (size_t)k;
      p->left = size;
      p->state = size ? LG_RP_CHUNK_DATA : LG_RP_TRAILER;
      continue;
    }
    case LG_RP_CHUNK_CRLF:
      if (n < 2) {
        k = 0;
        break;
      }
      if (b[0] != '\r' || b[1] != '\n')
        return LG_RP_ERROR;
      pos += 2;
      p->state = LG_RP_CHUNK_SIZE;
      continue;
    case LG_RP_TRAILER:
      k = line_len(b, n);
      if (k <= 0)
        break;
      pos += (size_t)k;
      if (k == 2)
        p->state = LG_RP_DONE;
      continue;
    default:
      return LG_RP_ERROR;
    }
    /* Here k < 0 is malformed input and k == 0 asks for more bytes. */
    if (k < 0)
      return LG_RP_ERROR;
    *used = pos;
    return LG_RP_MORE;
  }
}

int lg_resp_eof(lg_resp *p) {
  if (p->state == LG_RP_UNTIL_CLOSE || p->state == LG_RP_DONE) {
    p->state = LG_RP_DONE;
    return LG_RP_COMPLETE;
  }
  return LG_RP_ERROR;
}

/* ---- Arguments ---- */

double lg_arg_double(const char *prog, const char *name, const char *v,
                     double lo, double hi) {
  char *e;
  double d;
  errno = 0;
  d = strtod(v, &e);
  if (errno != 0 || e == v || *e != '\0' || !(d >= lo && d <= hi)) {
    fprintf(stderr, "%s: %s wants a number in [%g, %g], not '%s'\n", prog, name,
            lo, hi, v);
    exit(2);
  }
  return d;
}

long lg_arg_long(const char *prog, const char *name, const char *v, long lo,
                 long hi) {
  char *e;
  long n;
  errno = 0;
  n = strtol(v, &e, 10);
  if (errno != 0 || e == v || *e != '\0' || n < lo || n > hi) {
    fprintf(stderr, "%s: %s wants an integer in [%ld, %ld], not '%s'\n", prog,
            name, lo, hi, v);
    exit(2);
  }
  return n;
}

const char *lg_arg_value(const char *prog, int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "%s: %s needs a value\n", prog, argv[*i]);
    exit(2);
  }
  return argv[++*i];
}

/* ---- Addresses ---- */

int lg_target_init(lg_target *t, const char *prog, const char *host,
                   long port) {
  struct addrinfo hints, *res;
  char service[16];
  int rc;
  memset(t, 0, sizeof(*t));
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(service, sizeof(service), "%ld", port);
  rc = getaddrinfo(host, service, &hints, &res);
  if (rc != 0) {
    fprintf(stderr, "%s: %s: %s\n", prog, host, gai_strerror(rc));
    return -1;
  }
  memcpy(&t->addr, res->ai_addr, res->ai_addrlen);
  t->len = res->ai_addrlen;
  freeaddrinfo(res);
  if (t->addr.ss_family == AF_INET) {
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&t->addr;
    t->spread = (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
  }
  return 0;
}

int lg_connect(lg_target *t) {
  int one = 1, fd;
  fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (t->spread) {
    struct sockaddr_in src;
    memset(&src, 0, sizeof(src));
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(0x7f000002u + t->next_src);
    t->next_src = (t->next_src + 1) % 253; /* 127.0.0.2 .. 127.0.0.254 */
    /* Without this, bind() would pick the port alone, ignoring the
     * destination, and run out after one range per source address. */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0) {
      int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
  }
  if (connect(fd, (struct sockaddr *)&t->addr, t->len) < 0 &&
      errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

long lg_raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return -1;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur == RLIM_INFINITY ? (long)1 << 30 : (long)rl.rlim_cur;
}

/* ---- Reports ---- */

int lg_check_path(const char *prog, const char *path) {
  if (path[0] == '/' && strpbrk(path, " \r\n") == NULL && strlen(path) <= 256)
    return 0;
  fprintf(stderr, "%s: --path must start with / and hold no spaces\n", prog);
  return -1;
}

FILE *lg_json_open(const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL)
    perror(path);
  return f;
}

void lg_json_latency(FILE *f, const lg_hist *h) {
  fprintf(f,
          "{\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,\"p999\":%llu,"
          "\"max\":%llu,\"count\":%llu}",
          (unsigned long long)lg_hist_quantile(h, 0.50),
          (unsigned long long)lg_hist_quantile(h, 0.90),
          (unsigned long long)lg_hist_quantile(h, 0.99),
          (unsigned long long)lg_hist_quantile(h, 0.999),
          (unsigned long long)h->max_us, (unsigned long long)h->total);
}

void lg_text_latency(FILE *f, const lg_hist *h) {
  fprintf(f, "latency us p50 %llu p90 %llu p99 %llu p99.9 %llu max %llu",
          (unsigned long long)lg_hist_quantile(h, 0.50),
          (unsigned long long)lg_hist_quantile(h, 0.90),
          (unsigned long long)lg_hist_quantile(h, 0.99),
          (unsigned long long)lg_hist_quantile(h, 0.999),
          (unsigned long long)h->max_us);
}
