/* Operations: what each finished request adds to the counters, the access
 * hook, and the built-in access log writer.
 *
 * Every request of every protocol ends in one place, the last reference
 * going (tern__request_unref), or the stop deadline cutting it: that is
 * where it is counted and logged, exactly once (TERN__RQ_LOGGED). A
 * WebSocket session's request lives until the session closes, so the
 * session is one entry, logged when it ends.
 *
 * The counters are the worker's own (tern__wstats): plain relaxed stores,
 * summed by tern_server_stats. The built-in writer formats each line on
 * the worker into the worker's current buffer, with no lock and no
 * allocation; a full buffer (or a non-empty one at the worker's tick) is
 * queued for a thread of the writer's own that does the file I/O. The
 * buffers are allocated once: when none is free, lines are dropped and
 * counted rather than the worker waiting for the disk.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/worker.h"

/* The worker's part (its service slot, TERN__SVC_ACCESS). */
typedef struct {
  /* The wall clock minus the monotonic clock (ns), set each tick: an
   * entry's start time is its monotonic stamp plus this. */
  int64_t wall_offset_ns;
  struct tern__logbuf *logbuf; /* the built-in writer's buffer filling */
  int64_t log_sec;             /* the second log_iso and log_clf show, or -1 */
  char log_iso[24];            /* "2026-12-03T23:50:01" */
  char log_clf[72]; /* "03/Dec/2026:23:50:01 +0000" (room for any int) */
} access_worker;

#define AW(w) ((access_worker *)(w)->svc[TERN__SVC_ACCESS])

/* ---- Counters ------------------------------------------------------- */

static const uint64_t bucket_le[TERN_STATS_BUCKETS] = {
    50000ull,     100000ull,     250000ull,     500000ull,
    1000000ull,   2500000ull,    5000000ull,    10000000ull,
    25000000ull,  50000000ull,   100000000ull,  250000000ull,
    500000000ull, 1000000000ull, 5000000000ull, UINT64_MAX};

uint64_t tern_stats_bucket_le(unsigned i) {
  return i < TERN_STATS_BUCKETS ? bucket_le[i] : 0;
}

int tern__proto_name_index(const char *name) {
  if (name != NULL && name[0] == 'h' && name[2] == 0) {
    if (name[1] == '2')
      return TERN_STATS_H2;
    if (name[1] == '3')
      return TERN_STATS_H3;
  }
  return TERN_STATS_H1;
}

void tern__tls_handshake_done(tern__worker *w, int how) {
  if (how > 0)
    TERN__STAT_ADD(w->stats.tls_resumed, 1);
  else if (how == 0)
    TERN__STAT_ADD(w->stats.tls_full, 1);
  else
    TERN__STAT_ADD(w->stats.tls_failed, 1);
}

static int status_class(int status) {
  return status >= 100 && status < 600 ? status / 100 : 0;
}

static void count_rejected(tern__worker *w, int status) {
  switch (status) {
  case 400:
    TERN__STAT_ADD(w->stats.rej_protocol, 1);
    break;
  case 408:
    TERN__STAT_ADD(w->stats.rej_timeout, 1);
    break;
  case 413:
  case 414:
  case 431:
    TERN__STAT_ADD(w->stats.rej_limit, 1);
    break;
  default:
    break;
  }
}

/* ---- The entry ------------------------------------------------------- */

static void find_field(const tern_request *r, const char *lower, size_t n,
                       const char **v, size_t *vlen) {
  size_t i;
  for (i = 0; i < r->nheaders; i++)
    if (r->headers[i].name_len == n &&
        tern__ieq_lit(r->headers[i].name, n, lower)) {
      *v = r->headers[i].value;
      *vlen = r->headers[i].value_len;
      return;
    }
}

/* Decimal digits of v into b (20 bytes suffice), two at a time: a log
 * line has a dozen numbers. Returns how many. */
static size_t dec(char *b, uint64_t v) {
  static const char pairs[] = "00010203040506070809101112131415161718192021222"
                              "32425262728293031323334353637383940414243444546"
                              "47484950515253545556575859606162636465666768697"
                              "07172737475767778798081828384858687888990919293"
                              "949596979899";
  char t[20];
  size_t n = 20, k;
  while (v >= 100) {
    unsigned d = (unsigned)(v % 100) * 2;
    v /= 100;
    t[--n] = pairs[d + 1];
    t[--n] = pairs[d];
  }
  if (v >= 10) {
    t[--n] = pairs[v * 2 + 1];
    t[--n] = pairs[v * 2];
  } else {
    t[--n] = (char)('0' + v);
  }
  k = 20 - n;
  memcpy(b, t + n, k);
  return k;
}

static void entry_peer(tern_access_entry *e, const tern__conn *c, char *buf,
                       size_t size) {
  e->peer = "-";
  e->peer_port = 0;
  if (c == NULL || c->peer.family == 0)
    return;
  if (c->peer.family == AF_INET) {
    /* inet_ntop formats IPv4 through sprintf: a third of a log line's
     * cost. */
    size_t n = 0;
    int i;
    for (i = 0; i < 4; i++) {
      n += dec(buf + n, c->peer.addr[i]);
      buf[n++] = i < 3 ? '.' : 0;
    }
    e->peer = buf;
    e->peer_port = c->peer.port;
    return;
  }
  if (inet_ntop(c->peer.family, c->peer.addr, buf, (socklen_t)size) != NULL) {
    e->peer = buf;
    e->peer_port = c->peer.port;
  }
}

static int64_t since(uint64_t t, uint64_t t0) {
  return t != 0 && t >= t0 ? (int64_t)(t - t0) : -1;
}

static void log_entry(tern__worker *w, const tern_access_entry *e);
static void alog_hook(const tern_access_entry *e, void *user);

static void run_hook(tern__worker *w, tern_access_entry *e, uint64_t t0) {
  e->start_unix_us = ((int64_t)t0 + AW(w)->wall_offset_ns) / 1000;
  if (w->srv->access_fn == alog_hook)
    log_entry(w, e); /* the built-in writer needs its worker */
  else
    w->srv->access_fn(e, w->srv->access_user);
}

/* The access hook's entry for a finished request; out of line, so that
 * the counting above stays small when no hook is installed. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void
log_request(tern_request *r, unsigned flags, uint64_t d) {
  tern_access_entry e;
  char peer[64];
  memset(&e, 0, sizeof(e));
  e.size = sizeof(e);
  e.protocol = r->protocol != 0 ? r->protocol : TERN_PROTO_HTTP11;
  e.status = r->status;
  if (r->flags & TERN__RQ_SELF)
    flags |= TERN_ACCESS_SELF;
  if (r->flags & TERN__RQ_TUNNEL)
    flags |= TERN_ACCESS_WEBSOCKET;
  if (r->flags & TERN__RQ_EARLY)
    flags |= TERN_ACCESS_EARLY;
  if (r->method == NULL)
    flags |= TERN_ACCESS_NO_REQUEST;
  e.flags = flags;
  e.tls_version = r->conn != NULL ? r->conn->tls_version : 0;
  e.method = r->method != NULL ? r->method : "";
  e.method_len = r->method != NULL ? r->method_len : 0;
  e.target = r->target != NULL ? r->target : "";
  e.target_len = r->target != NULL ? r->target_len : 0;
  e.authority = r->authority;
  e.authority_len = r->authority != NULL ? r->authority_len : 0;
  find_field(r, "referer", 7, &e.referer, &e.referer_len);
  find_field(r, "user-agent", 10, &e.user_agent, &e.user_agent_len);
  entry_peer(&e, r->conn, peer, sizeof(peer));
  e.bytes_in = r->bytes_in;
  e.bytes_out = r->bytes_out;
  e.handler_ns = since(r->t_handler, r->t_head);
  e.first_byte_ns = since(r->t_first, r->t_head);
  e.last_byte_ns = (int64_t)d;
  e.data = r->data;
  run_hook(r->w, &e, r->t_head);
}

void tern__request_finished(tern_request *r) {
  tern__worker *w = r->w;
  tern_server *srv = w->srv;
  uint64_t d = 0;
  int pi = tern__proto_index(r->protocol);
  unsigned flags = 0;

  if (r->flags & TERN__RQ_LOGGED)
    return;
  r->flags |= TERN__RQ_LOGGED;
  if ((r->flags & (TERN__RQ_WRITTEN | TERN__RQ_ABORT)) != TERN__RQ_WRITTEN) {
    flags = TERN_ACCESS_ABORTED;
    TERN__STAT_ADD(w->stats.aborted[pi], 1);
  }
  TERN__STAT_ADD(w->stats.by_class[pi][status_class(r->status)], 1);
  TERN__STAT_ADD(w->stats.streams[r->sidx], (uint64_t)-1);
  if (r->bytes_in != 0)
    TERN__STAT_ADD(w->stats.req_in[pi], r->bytes_in);
  if (r->bytes_out != 0)
    TERN__STAT_ADD(w->stats.req_out[pi], r->bytes_out);
  if (!srv->timing)
    return;
  {
    uint64_t now = tern__now(w);
    d = now > r->t_head ? now - r->t_head : 0;
  }
  if (srv->durations) {
    int i;
    for (i = 0; d > bucket_le[i]; i++)
      ;
    TERN__STAT_ADD(w->stats.buckets[pi][i], 1);
    TERN__STAT_ADD(w->stats.dur_sum[pi], d);
  }
  if (srv->access_fn != NULL)
    log_request(r, flags, d);
}

void tern__access_no_request(tern__conn *c, int status) {
  tern__worker *w = c->w;
  int pi = c->counted_proto >= 0 ? c->counted_proto : TERN_STATS_H1;

  TERN__STAT_ADD(w->stats.by_class[pi][status_class(status)], 1);
  if (w->srv->durations)
    TERN__STAT_ADD(w->stats.buckets[pi][0], 1);
  count_rejected(w, status);
  if (w->srv->access_fn != NULL) {
    tern_access_entry e;
    char peer[64];
    uint64_t now = uv_hrtime();
    memset(&e, 0, sizeof(e));
    e.size = sizeof(e);
    e.protocol = pi == TERN_STATS_H2   ? TERN_PROTO_HTTP2
                 : pi == TERN_STATS_H3 ? TERN_PROTO_HTTP3
                                       : TERN_PROTO_HTTP11;
    e.status = status;
    e.flags = TERN_ACCESS_SELF | TERN_ACCESS_NO_REQUEST;
    e.tls_version = c->tls_version;
    e.method = "";
    e.target = "";
    entry_peer(&e, c, peer, sizeof(peer));
    e.handler_ns = -1;
    e.first_byte_ns = 0;
    e.last_byte_ns = 0;
    run_hook(w, &e, now);
  }
}

/* tern__respond_status's count of the answers tern makes itself. */
void tern__count_self(tern_request *r, int status) {
  r->flags |= TERN__RQ_SELF;
  count_rejected(r->w, status);
}

int tern_server_on_access(tern_server *srv, tern_access_fn fn, void *user) {
  if (srv == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  /* A built-in writer stays open, unused, until tern_server_free. */
  srv->access_fn = fn;
  srv->access_user = fn != NULL ? user : NULL;
  srv->timing = srv->durations || fn != NULL;
  return 0;
}

int tern_server_time_requests(tern_server *srv, int on) {
  if (srv == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  srv->durations = on != 0;
  srv->timing = srv->durations || srv->access_fn != NULL;
  return 0;
}

/* ---- The built-in writer --------------------------------------------- */

typedef struct tern__logbuf {
  struct tern__logbuf *next;
  struct tern__logbuf *extra; /* the next one allocated on demand */
  size_t len;
  char data[];
} tern__logbuf;

typedef struct tern__accesslog {
  tern_server *srv;
  char *path;
  int fd;
  int format;
  size_t bufsize;
  unsigned nbufs;      /* buffers now: queue_buffers, then grown */
  unsigned max_bufs;   /* what a slow disk may grow them to */
  char *block;         /* the first queue_buffers, one allocation */
  tern__logbuf *extra; /* those allocated on demand (freed at the end) */
  uv_mutex_t lock;
  uv_cond_t cond;
  tern__logbuf *free_list;
  tern__logbuf *qhead, *qtail;
  int reopen, closing;
  uv_thread_t thread;
} tern__accesslog;

#define LINE_MAX_BYTES 4096

/* A bounded writer: bytes past the end are dropped, so a line is cut
 * rather than overflowing. */
typedef struct {
  char *p, *end;
} out_t;

static void put(out_t *o, const char *s, size_t n) {
  size_t room = (size_t)(o->end - o->p);
  if (n > room)
    n = room;
  memcpy(o->p, s, n);
  o->p += n;
}
static void put_c(out_t *o, char c) {
  if (o->p < o->end)
    *o->p++ = c;
}
#define PUT_LIT(o, s) put((o), (s), sizeof(s) - 1)
static void put_u64(out_t *o, uint64_t v) {
  char b[24];
  put(o, b, dec(b, v));
}
static void put_i64(out_t *o, int64_t v) {
  if (v < 0) {
    put_c(o, '-');
    put_u64(o, (uint64_t)(-(v + 1)) + 1);
  } else {
    put_u64(o, (uint64_t)v);
  }
}

static const char hexd[] = "0123456789abcdef";

/* A JSON string's content: quote, backslash, control bytes and every
 * byte above 0x7e escaped as \u00XX, so that the line is valid JSON
 * (and ASCII) whatever the client sent. */
static void put_json(out_t *o, const char *s, size_t n) {
  size_t i, run;
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    /* Copy a run of plain bytes at once. */
    for (run = i; run < n; run++) {
      unsigned char c = (unsigned char)s[run];
      if (c == '"' || c == '\\' || c < 0x20 || c > 0x7e)
        break;
    }
    if (run > i) {
      put(o, s + i, run - i);
      i = run - 1;
      continue;
    }
    if (ch == '"' || ch == '\\') {
      put_c(o, '\\');
      put_c(o, (char)ch);
    } else if (ch < 0x20 || ch > 0x7e) {
      char e[6] = {'\\', 'u', '0', '0', hexd[ch >> 4], hexd[ch & 15]};
      put(o, e, 6);
    } else {
      put_c(o, (char)ch);
    }
  }
}

/* A combined-format field inside quotes: quote, backslash, control and
 * non-ASCII bytes as \xHH (nginx's escaping). */
static void put_clf(out_t *o, const char *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\' || ch < 0x20 || ch > 0x7e) {
      char e[4] = {'\\', 'x', hexd[ch >> 4], hexd[ch & 15]};
      put(o, e, 4);
    } else {
      put_c(o, (char)ch);
    }
  }
}

/* ---- Fields cut to fit a line ------------------------------------------
 *
 * A line has LINE_MAX_BYTES (or the buffer's size, if smaller). Its fixed
 * part (time, address, numbers, names) always fits; the client's strings
 * (method, target, authority, referer, user agent) share the rest. When
 * they do not all fit, each gets an equal share, a short one giving what
 * it leaves to the others, and a field over its share is cut between two
 * escapes and ends with "...": the line stays one valid JSON object (or
 * one parsable combined line), with every field present. */

#define NVAR 5
/* The most the fixed part of a line takes, its syntax included. */
#define FIXED_JSON 640
#define FIXED_COMBINED 256

/* Escaped width of byte `ch`: JSON (1 or 2 or 6) or combined (1 or 4). */
static size_t esc_width(unsigned char ch, int json) {
  if (ch == '"' || ch == '\\')
    return json ? 2 : 4;
  if (ch < 0x20 || ch > 0x7e)
    return json ? 6 : 4;
  return 1;
}

static size_t esc_len(const char *s, size_t n, int json) {
  size_t i, len = 0;
  for (i = 0; i < n; i++)
    len += esc_width((unsigned char)s[i], json);
  return len;
}

/* Equal shares of `room` for the fields' escaped lengths `need`: a field
 * that needs less than its share keeps only what it needs. */
static void share(size_t room, const size_t *need, size_t *give) {
  int done[NVAR] = {0}, rest = NVAR, i, changed = 1;
  while (changed && rest > 0) {
    changed = 0;
    for (i = 0; i < NVAR; i++)
      if (!done[i] && need[i] <= room / (size_t)rest) {
        give[i] = need[i];
        room -= need[i];
        done[i] = 1;
        rest--;
        changed = 1;
      }
  }
  for (i = 0; i < NVAR; i++)
    if (!done[i])
      give[i] = room / (size_t)rest;
}

/* A field escaped into at most `budget` bytes: whole if it fits, else
 * the escapes that fit before "..." and then "...". */
static void put_cut(out_t *o, const char *s, size_t n, size_t need,
                    size_t budget, int json) {
  size_t i, used = 0, dots;
  if (need <= budget) {
    if (json)
      put_json(o, s, n);
    else
      put_clf(o, s, n);
    return;
  }
  dots = budget < 3 ? budget : 3;
  budget -= dots;
  for (i = 0; i < n; i++) {
    size_t wdt = esc_width((unsigned char)s[i], json);
    if (used + wdt > budget)
      break;
    used += wdt;
  }
  if (json)
    put_json(o, s, i);
  else
    put_clf(o, s, i);
  put(o, "...", dots);
}

enum { V_METHOD, V_TARGET, V_AUTHORITY, V_REFERER, V_AGENT };

/* The budget of each client string in a line of `max` bytes. */
static void budgets(const tern_access_entry *e, size_t max, int json,
                    size_t *need, size_t *give) {
  size_t fixed = json ? FIXED_JSON : FIXED_COMBINED;
  need[V_METHOD] = esc_len(e->method, e->method_len, json);
  need[V_TARGET] = esc_len(e->target, e->target_len, json);
  need[V_AUTHORITY] =
      e->authority != NULL ? esc_len(e->authority, e->authority_len, json) : 0;
  need[V_REFERER] =
      e->referer != NULL ? esc_len(e->referer, e->referer_len, json) : 0;
  need[V_AGENT] = e->user_agent != NULL
                      ? esc_len(e->user_agent, e->user_agent_len, json)
                      : 0;
  share(max > fixed ? max - fixed : 0, need, give);
}

static const char *proto_text(int p) {
  return p == TERN_PROTO_HTTP10  ? "HTTP/1.0"
         : p == TERN_PROTO_HTTP2 ? "HTTP/2.0"
         : p == TERN_PROTO_HTTP3 ? "HTTP/3.0"
                                 : "HTTP/1.1";
}

/* The worker's formatted time of second `sec` (cached per second). */
static void time_texts(tern__worker *w, int64_t sec) {
  static const char mon[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  struct tm tm;
  time_t t = (time_t)sec;
  access_worker *aw = AW(w);
  if (aw->log_sec == sec)
    return;
  aw->log_sec = sec;
  gmtime_r(&t, &tm);
  strftime(aw->log_iso, sizeof(aw->log_iso), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(aw->log_clf, sizeof(aw->log_clf),
           "%02d/%s/%04d:%02d:%02d:%02d +0000", tm.tm_mday, mon[tm.tm_mon],
           tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static void format_json(tern__worker *w, out_t *o, const tern_access_entry *e,
                        size_t max) {
  int64_t sec = e->start_unix_us / 1000000;
  char us[8];
  int i;
  uint64_t frac = (uint64_t)(e->start_unix_us % 1000000);
  size_t need[NVAR], give[NVAR];

  budgets(e, max, 1, need, give);
  time_texts(w, sec);
  for (i = 5; i >= 0; i--, frac /= 10)
    us[i] = (char)('0' + frac % 10);
  PUT_LIT(o, "{\"time\":\"");
  put(o, AW(w)->log_iso, strlen(AW(w)->log_iso));
  put_c(o, '.');
  put(o, us, 6);
  PUT_LIT(o, "Z\",\"peer\":\"");
  put_json(o, e->peer, strlen(e->peer));
  PUT_LIT(o, "\",\"port\":");
  put_u64(o, (uint64_t)e->peer_port);
  PUT_LIT(o, ",\"protocol\":\"");
  put(o, proto_text(e->protocol), 8);
  PUT_LIT(o, "\",\"tls\":");
  if (e->tls_version == TERN_TLS_1_3)
    PUT_LIT(o, "\"1.3\"");
  else if (e->tls_version == TERN_TLS_1_2)
    PUT_LIT(o, "\"1.2\"");
  else
    PUT_LIT(o, "null");
  PUT_LIT(o, ",\"method\":\"");
  put_cut(o, e->method, e->method_len, need[V_METHOD], give[V_METHOD], 1);
  PUT_LIT(o, "\",\"target\":\"");
  put_cut(o, e->target, e->target_len, need[V_TARGET], give[V_TARGET], 1);
  PUT_LIT(o, "\",\"authority\":");
  if (e->authority != NULL) {
    put_c(o, '"');
    put_cut(o, e->authority, e->authority_len, need[V_AUTHORITY],
            give[V_AUTHORITY], 1);
    put_c(o, '"');
  } else {
    PUT_LIT(o, "null");
  }
  PUT_LIT(o, ",\"status\":");
  put_u64(o, (uint64_t)e->status);
  PUT_LIT(o, ",\"bytes_in\":");
  put_u64(o, e->bytes_in);
  PUT_LIT(o, ",\"bytes_out\":");
  put_u64(o, e->bytes_out);
  PUT_LIT(o, ",\"handler_ns\":");
  put_i64(o, e->handler_ns);
  PUT_LIT(o, ",\"first_byte_ns\":");
  put_i64(o, e->first_byte_ns);
  PUT_LIT(o, ",\"last_byte_ns\":");
  put_i64(o, e->last_byte_ns);
  PUT_LIT(o, ",\"aborted\":");
  if (e->flags & TERN_ACCESS_ABORTED)
    PUT_LIT(o, "true");
  else
    PUT_LIT(o, "false");
  PUT_LIT(o, ",\"self\":");
  if (e->flags & TERN_ACCESS_SELF)
    PUT_LIT(o, "true");
  else
    PUT_LIT(o, "false");
  PUT_LIT(o, ",\"websocket\":");
  if (e->flags & TERN_ACCESS_WEBSOCKET)
    PUT_LIT(o, "true");
  else
    PUT_LIT(o, "false");
  PUT_LIT(o, ",\"referer\":");
  if (e->referer != NULL) {
    put_c(o, '"');
    put_cut(o, e->referer, e->referer_len, need[V_REFERER], give[V_REFERER], 1);
    put_c(o, '"');
  } else {
    PUT_LIT(o, "null");
  }
  PUT_LIT(o, ",\"user_agent\":");
  if (e->user_agent != NULL) {
    put_c(o, '"');
    put_cut(o, e->user_agent, e->user_agent_len, need[V_AGENT], give[V_AGENT],
            1);
    put_c(o, '"');
  } else {
    PUT_LIT(o, "null");
  }
}

static void format_combined(tern__worker *w, out_t *o,
                            const tern_access_entry *e, size_t max) {
  size_t need[NVAR], give[NVAR];
  budgets(e, max, 0, need, give);
  time_texts(w, e->start_unix_us / 1000000);
  put(o, e->peer, strlen(e->peer));
  PUT_LIT(o, " - - [");
  put(o, AW(w)->log_clf, strlen(AW(w)->log_clf));
  PUT_LIT(o, "] \"");
  if (e->method_len > 0) {
    put_cut(o, e->method, e->method_len, need[V_METHOD], give[V_METHOD], 0);
    put_c(o, ' ');
    put_cut(o, e->target, e->target_len, need[V_TARGET], give[V_TARGET], 0);
    put_c(o, ' ');
    put(o, proto_text(e->protocol), 8);
  }
  PUT_LIT(o, "\" ");
  put_u64(o, (uint64_t)e->status);
  put_c(o, ' ');
  put_u64(o, e->bytes_out);
  PUT_LIT(o, " \"");
  if (e->referer != NULL)
    put_cut(o, e->referer, e->referer_len, need[V_REFERER], give[V_REFERER], 0);
  else
    put_c(o, '-');
  PUT_LIT(o, "\" \"");
  if (e->user_agent != NULL)
    put_cut(o, e->user_agent, e->user_agent_len, need[V_AGENT], give[V_AGENT],
            0);
  else
    put_c(o, '-');
  put_c(o, '"');
}

/* The next free buffer, or NULL (the caller drops the line). When none
 * is free, the writer is behind (a disk that stalls, a burst): up to
 * max_bufs more are allocated, so that a stall of a second or so loses
 * no line; they are kept for the next one. */
static tern__logbuf *buf_take(tern__accesslog *al) {
  tern__logbuf *b;
  int grow = 0;
  uv_mutex_lock(&al->lock);
  b = al->free_list;
  if (b != NULL)
    al->free_list = b->next;
  else if (al->nbufs < al->max_bufs)
    grow = 1, al->nbufs++;
  uv_mutex_unlock(&al->lock);
  if (grow) {
    b = tern__malloc(al->srv, sizeof(*b) + al->bufsize);
    uv_mutex_lock(&al->lock);
    if (b != NULL) {
      b->extra = al->extra;
      al->extra = b;
    } else {
      al->nbufs--;
    }
    uv_mutex_unlock(&al->lock);
  }
  if (b != NULL) {
    b->len = 0;
    b->next = NULL;
  }
  return b;
}

static void buf_queue(tern__accesslog *al, tern__logbuf *b) {
  uv_mutex_lock(&al->lock);
  b->next = NULL;
  if (al->qtail != NULL)
    al->qtail->next = b;
  else
    al->qhead = b;
  al->qtail = b;
  uv_cond_signal(&al->cond);
  uv_mutex_unlock(&al->lock);
}

/* Only its address is used: run_hook calls log_entry instead. */
static void alog_hook(const tern_access_entry *e, void *user) {
  (void)e;
  (void)user;
}

static void log_entry(tern__worker *w, const tern_access_entry *e) {
  tern__accesslog *al = w->srv->alog;
  tern__logbuf *b;
  size_t n, max = al->bufsize < LINE_MAX_BYTES ? al->bufsize : LINE_MAX_BYTES;
  out_t o;

  b = AW(w)->logbuf;
  if (b != NULL && al->bufsize - b->len < max) {
    buf_queue(al, b);
    b = AW(w)->logbuf = NULL;
  }
  if (b == NULL && (b = AW(w)->logbuf = buf_take(al)) == NULL) {
    TERN__STAT_ADD(w->stats.log_dropped, 1);
    return;
  }
  o.p = b->data + b->len;
  o.end = o.p + max - 1; /* room for the newline */
  if (al->format == TERN_ACCESS_LOG_COMBINED) {
    format_combined(w, &o, e, max - 1);
  } else {
    format_json(w, &o, e, max - 1);
    /* The fields were cut to leave room for the object's end; a buffer
     * too small even for the fixed part still closes it. */
    if (o.end - o.p < 1)
      o.p = o.end - 1;
    put_c(&o, '}');
  }
  *o.p++ = '\n';
  n = (size_t)(o.p - (b->data + b->len));
  b->len += n;
  TERN__STAT_ADD(w->stats.log_lines, 1);
}

/* Hand a non-empty buffer to the writer thread (the tick); `last` at the
 * worker's end. */
static void access_flush(tern__worker *w, int last) {
  tern__accesslog *al = w->srv->alog;
  tern__logbuf *b = AW(w)->logbuf;
  if (al == NULL || b == NULL)
    return;
  if (b->len > 0 || last) {
    AW(w)->logbuf = NULL;
    if (b->len > 0) {
      buf_queue(al, b);
    } else {
      uv_mutex_lock(&al->lock);
      b->next = al->free_list;
      al->free_list = b;
      uv_mutex_unlock(&al->lock);
    }
  }
}

static int open_log(const char *path) {
  return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static void writer_thread(void *arg) {
  tern__accesslog *al = arg;
  uv_mutex_lock(&al->lock);
  for (;;) {
    tern__logbuf *b;
    while (al->qhead == NULL && !al->reopen && !al->closing)
      uv_cond_wait(&al->cond, &al->lock);
    if (al->reopen) {
      int fd;
      al->reopen = 0;
      uv_mutex_unlock(&al->lock);
      fd = open_log(al->path);
      if (fd < 0) {
        tern__log(al->srv, TERN_LOG_ERROR, "access log: reopen %s: %s",
                  al->path, strerror(errno));
      } else {
        close(al->fd);
        al->fd = fd;
      }
      uv_mutex_lock(&al->lock);
      continue;
    }
    if ((b = al->qhead) == NULL)
      break; /* closing, and nothing left */
    al->qhead = b->next;
    if (al->qhead == NULL)
      al->qtail = NULL;
    uv_mutex_unlock(&al->lock);
    {
      size_t off = 0;
      while (off < b->len) {
        ssize_t n = write(al->fd, b->data + off, b->len - off);
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0) {
          tern__log(al->srv, TERN_LOG_ERROR, "access log: write: %s",
                    strerror(errno));
          break;
        }
        off += (size_t)n;
      }
    }
    uv_mutex_lock(&al->lock);
    b->len = 0;
    b->next = al->free_list;
    al->free_list = b;
  }
  uv_mutex_unlock(&al->lock);
}
static const size_t alog_ends[] = {
    TERN__END(tern_access_log_options, queue_buffers)};

void tern_access_log_options_init_size(tern_access_log_options *out,
                                       size_t size) {
  tern_access_log_options d, *o = &d;
  if (out == NULL)
    return;
  memset(o, 0, sizeof(*o));
  o->version = TERN_ACCESS_LOG_OPTIONS_VERSION;
  o->size = sizeof(*o);
  o->format = TERN_ACCESS_LOG_JSON;
  o->buffer_size = 64 * 1024;
  o->queue_buffers = 0; /* 4 per worker */
  tern__abi_init(out, size, &d, alog_ends, TERN_ACCESS_LOG_OPTIONS_VERSION);
}

int tern_server_access_log(tern_server *srv,
                           const tern_access_log_options *in) {
  tern_access_log_options o;
  tern__accesslog *al;
  char why[160];
  size_t stride, plen;
  unsigned i, minb;

  if (srv == NULL || in == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE || srv->alog != NULL)
    return TERN_ESTATE;
  tern_access_log_options_init_size(&o, sizeof(o));
  if (tern__abi_read(&o, sizeof(o), in, alog_ends,
                     (int)(sizeof(alog_ends) / sizeof(alog_ends[0])), why,
                     sizeof(why)) != 0) {
    tern__log(srv, TERN_LOG_ERROR, "tern_server_access_log: %s", why);
    return TERN_EINVAL;
  }
  minb = srv->nworkers + 1;
  if (o.queue_buffers == 0)
    o.queue_buffers = 4 * srv->nworkers;
  if (o.path == NULL || o.path[0] == 0 ||
      (o.format != TERN_ACCESS_LOG_JSON &&
       o.format != TERN_ACCESS_LOG_COMBINED) ||
      o.buffer_size < 1024 || o.buffer_size > (1u << 30) ||
      o.queue_buffers < minb || o.queue_buffers > 65536) {
    tern__log(srv, TERN_LOG_ERROR,
              "tern_server_access_log: bad options (path, format, "
              "buffer_size >= 1024, queue_buffers >= workers + 1)");
    return TERN_EINVAL;
  }
  al = tern__malloc(srv, sizeof(*al));
  if (al == NULL)
    return TERN_ENOMEM;
  memset(al, 0, sizeof(*al));
  plen = strlen(o.path);
  stride = (sizeof(tern__logbuf) + o.buffer_size + 15) & ~(size_t)15;
  al->path = tern__malloc(srv, plen + 1);
  al->block = tern__malloc(srv, stride * o.queue_buffers);
  if (al->path == NULL || al->block == NULL) {
    tern__free(srv, al->path);
    tern__free(srv, al->block);
    tern__free(srv, al);
    return TERN_ENOMEM;
  }
  memcpy(al->path, o.path, plen + 1);
  al->fd = open_log(al->path);
  if (al->fd < 0) {
    tern__log(srv, TERN_LOG_ERROR, "access log: open %s: %s", al->path,
              strerror(errno));
    tern__free(srv, al->path);
    tern__free(srv, al->block);
    tern__free(srv, al);
    return TERN_EIO;
  }
  al->srv = srv;
  al->format = o.format;
  al->bufsize = o.buffer_size;
  al->nbufs = o.queue_buffers;
  al->max_bufs = o.queue_buffers * 8;
  for (i = 0; i < al->nbufs; i++) {
    tern__logbuf *b = (tern__logbuf *)(void *)(al->block + stride * i);
    b->len = 0;
    b->next = al->free_list;
    al->free_list = b;
  }
  if (uv_mutex_init(&al->lock) != 0) {
    close(al->fd);
    tern__free(srv, al->path);
    tern__free(srv, al->block);
    tern__free(srv, al);
    return TERN_ENOMEM;
  }
  if (uv_cond_init(&al->cond) != 0 ||
      uv_thread_create(&al->thread, writer_thread, al) != 0) {
    uv_mutex_destroy(&al->lock);
    close(al->fd);
    tern__free(srv, al->path);
    tern__free(srv, al->block);
    tern__free(srv, al);
    return TERN_ENOMEM;
  }
  srv->alog = al;
  srv->access_fn = alog_hook;
  srv->access_user = al;
  srv->timing = 1;
  return 0;
}

int tern_server_access_log_reopen(tern_server *srv) {
  tern__accesslog *al;
  if (srv == NULL)
    return TERN_EINVAL;
  if ((al = srv->alog) == NULL)
    return TERN_ESTATE;
  uv_mutex_lock(&al->lock);
  al->reopen = 1;
  uv_cond_signal(&al->cond);
  uv_mutex_unlock(&al->lock);
  return 0;
}

static void access_log_free(tern_server *srv) {
  tern__accesslog *al = srv->alog;
  if (al == NULL)
    return;
  uv_mutex_lock(&al->lock);
  al->closing = 1;
  uv_cond_signal(&al->cond);
  uv_mutex_unlock(&al->lock);
  uv_thread_join(&al->thread);
  uv_cond_destroy(&al->cond);
  uv_mutex_destroy(&al->lock);
  while (al->extra != NULL) {
    tern__logbuf *b = al->extra;
    al->extra = b->extra;
    tern__free(srv, b);
  }
  close(al->fd);
  tern__free(srv, al->path);
  tern__free(srv, al->block);
  tern__free(srv, al);
  srv->alog = NULL;
}

/* ---- The worker service ------------------------------------------------ */

static void wall_offset(access_worker *aw) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
    aw->wall_offset_ns =
        (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - (int64_t)uv_hrtime();
}

static int access_worker_init(tern__worker *w) {
  access_worker *aw = tern__malloc(w->srv, sizeof(*aw));
  if (aw == NULL)
    return TERN_ENOMEM;
  memset(aw, 0, sizeof(*aw));
  aw->log_sec = -1;
  wall_offset(aw);
  w->svc[TERN__SVC_ACCESS] = aw;
  return 0;
}

static void access_tick(tern__worker *w, uint64_t now) {
  (void)now;
  wall_offset(AW(w));
  access_flush(w, 0);
}

static void access_cleanup(tern__worker *w) {
  if (AW(w) == NULL)
    return;
  access_flush(w, 1);
  tern__free(w->srv, AW(w));
  w->svc[TERN__SVC_ACCESS] = NULL;
}

const tern__service tern__access_service = {
    .name = "access log",
    .slot = TERN__SVC_ACCESS,
    .worker_init = access_worker_init,
    .tick = access_tick,
    .cleanup = access_cleanup,
    .server_free = access_log_free,
};
