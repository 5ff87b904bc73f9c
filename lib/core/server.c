/* The server object: settings, routes, listening sockets, run and stop. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/worker.h"

/* The header's version macros; meson.build checks at configure time that
 * they are the project's version, so the string cannot drift from the
 * release it is built as. */
#define STR2(x) #x
#define STR(x) STR2(x)
const char *tern_version(void) {
  return STR(TERN_VERSION_MAJOR) "." STR(TERN_VERSION_MINOR) "." STR(
      TERN_VERSION_PATCH);
}

unsigned tern_version_number(void) {
  return TERN_VERSION_NUMBER;
}

const char *tern_strerror(int err) {
  switch (err) {
  case TERN_OK:
    return "success";
  case TERN_EINVAL:
    return "invalid argument";
  case TERN_ENOMEM:
    return "out of memory";
  case TERN_ESTATE:
    return "not allowed in the current state";
  case TERN_EEXIST:
    return "already exists";
  case TERN_EADDRINUSE:
    return "address already in use";
  case TERN_EADDR:
    return "address cannot be used";
  case TERN_ECLOSED:
    return "the peer went away";
  case TERN_EIO:
    return "input/output error";
  case TERN_ETOOBIG:
    return "limit exceeded";
  case TERN_ENOTFOUND:
    return "not found";
  case TERN_ETLS:
    return "TLS certificate, key or handshake error";
  case TERN_EHANDSHAKE:
    return "not a valid WebSocket handshake";
  case TERN_ENOTSUP:
    return "not built into this library";
  default:
    return "unknown error";
  }
}

/* ---- Versioned structs ------------------------------------------- */

/* Every versioned public struct begins like this, so that its version
 * and size can be read before anything else of it is known. */
typedef struct {
  int version;
  uint32_t size;
} abi_head;

#define SAME_HEAD(t)                                                           \
  _Static_assert(offsetof(t, version) == offsetof(abi_head, version) &&        \
                     offsetof(t, size) == offsetof(abi_head, size),            \
                 #t " must begin with version and size")
SAME_HEAD(tern_settings);
SAME_HEAD(tern_route_options);
SAME_HEAD(tern_ws_options);
SAME_HEAD(tern_stats);
#undef SAME_HEAD

/* Where each version of a struct ends (tern.h lists them beside the
 * structs). A new field gets a new entry here, never a longer old one. */
static const size_t settings_ends[] = {
    TERN__END(tern_settings, log_level),
    TERN__END(tern_settings, max_conn_window),
    TERN__END(tern_settings, max_compressors_per_conn),
    TERN__END(tern_settings, ip_table_size), TERN__END(tern_settings, balance)};
static const size_t route_ends[] = {
    TERN__END(tern_route_options, max_body_size),
    TERN__END(tern_route_options, compress),
    TERN__END(tern_route_options, host)};
static const size_t stats_ends[] = {TERN__END(tern_stats, frees),
                                    TERN__END(tern_stats, quic_refused),
                                    TERN__END(tern_stats, access_log_dropped),
                                    TERN__END(tern_stats, reallocations),
                                    TERN__END(tern_stats, rejected_ip_rate),
                                    TERN__END(tern_stats, loop_lag_ns)};
const size_t tern__quic_options_ends[TERN_QUIC_OPTIONS_VERSION] = {
    TERN__END(tern_quic_options, secret_len),
    TERN__END(tern_quic_options, previous_secret_len)};
#define NVERSIONS(a) ((int)(sizeof(a) / sizeof((a)[0])))
_Static_assert(NVERSIONS(settings_ends) == TERN_SETTINGS_VERSION,
               "one end per tern_settings version");
_Static_assert(NVERSIONS(route_ends) == TERN_ROUTE_OPTIONS_VERSION,
               "one end per tern_route_options version");
_Static_assert(NVERSIONS(stats_ends) == TERN_STATS_VERSION,
               "one end per tern_stats version");

static void read_head(const void *p, int *version, uint32_t *size) {
  memcpy(version, (const char *)p + offsetof(abi_head, version),
         sizeof(*version));
  memcpy(size, (const char *)p + offsetof(abi_head, size), sizeof(*size));
}

/* Only the caller's version's fields are read, not min(its size, ours):
 * the trailing padding of an older layout may be where a newer version
 * put a field, and the older caller's bytes there are not a value. A
 * newer version is refused, since the caller set fields this library
 * would silently ignore. */
/* A struct of `version` must hold at least that version's fields. */
static int too_small(uint32_t size, int version, const size_t *ends, char *why,
                     size_t why_len) {
  if (size >= ends[version - 1])
    return 0;
  snprintf(why, why_len,
           "size %lu is smaller than version %d's %lu bytes (fill the "
           "struct with its _init function)",
           (unsigned long)size, version, (unsigned long)ends[version - 1]);
  return 1;
}

int tern__abi_read(void *dst, size_t dst_size, const void *src,
                   const size_t *ends, int nversions, char *why,
                   size_t why_len) {
  int version;
  uint32_t size;

  read_head(src, &version, &size);
  if (version < 1 || version > nversions) {
    snprintf(why, why_len, "version %d is unknown (this library knows 1 to %d)",
             version, nversions);
    return -1;
  }
  if (too_small(size, version, ends, why, why_len))
    return -1;
  memcpy(dst, src, ends[version - 1]);
  version = nversions;
  size = (uint32_t)dst_size;
  memcpy((char *)dst + offsetof(abi_head, version), &version, sizeof(version));
  memcpy((char *)dst + offsetof(abi_head, size), &size, sizeof(size));
  return 0;
}

void tern__abi_init(void *dst, size_t size, void *def, const size_t *ends,
                    int nversions) {
  int version = nversions;
  uint32_t sz = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
  while (version > 0 && ends[version - 1] > size)
    version--;
  if (version == 0)
    return;
  memcpy((char *)def + offsetof(abi_head, version), &version, sizeof(version));
  memcpy((char *)def + offsetof(abi_head, size), &sz, sizeof(sz));
  memcpy(dst, def, ends[version - 1]);
  /* A newer header's fields, and any padding: zero, as its _init's memset
   * would leave them. */
  if (size > ends[version - 1])
    memset((char *)dst + ends[version - 1], 0, size - ends[version - 1]);
}

/* The caller's struct may be an older, shorter one: nothing past the end
 * of its version is ours to write. A newer caller gets what this library
 * has and learns which part from the version written back, which an
 * output struct can tell it, unlike an input one. */
int tern__abi_write(void *dst, void *src, const size_t *ends, int nversions,
                    char *why, size_t why_len) {
  int version;
  uint32_t size;

  read_head(dst, &version, &size);
  if (version < 1) {
    snprintf(why, why_len,
             "version %d is unknown (fill the struct with its _init "
             "function)",
             version);
    return -1;
  }
  if (version > nversions)
    version = nversions;
  if (too_small(size, version, ends, why, why_len))
    return -1;
  memcpy((char *)src + offsetof(abi_head, version), &version, sizeof(version));
  memcpy((char *)src + offsetof(abi_head, size), &size, sizeof(size));
  memcpy(dst, src, ends[version - 1]);
  return 0;
}

void tern_settings_init_size(tern_settings *out, size_t size) {
  tern_settings d, *s = &d;
  if (out == NULL)
    return;
  memset(s, 0, sizeof(*s));
  s->version = TERN_SETTINGS_VERSION;
  s->size = sizeof(*s);
  s->workers = 0;
  s->max_head_size = 16384;
  s->max_header_count = 100;
  s->max_uri_length = 8192;
  s->max_body_size = 8u << 20;
  s->head_timeout_ms = 10000;
  s->idle_timeout_ms = 60000;
  s->body_timeout_ms = 30000;
  s->max_connections = 10000;
  s->max_pipeline = 32;
  s->tcp_nodelay = 1;
  s->read_buffer_size = 16384;
  s->allocator.malloc = tern__std_malloc;
  s->allocator.realloc = tern__std_realloc;
  s->allocator.free = tern__std_free;
  s->log_level = TERN_LOG_WARN;
  tern__abi_init(out, size, &d, settings_ends, NVERSIONS(settings_ends));
}

void tern_route_options_init_size(tern_route_options *out, size_t size) {
  tern_route_options d, *o = &d;
  if (out == NULL)
    return;
  memset(o, 0, sizeof(*o));
  o->version = TERN_ROUTE_OPTIONS_VERSION;
  o->size = sizeof(*o);
  tern__abi_init(out, size, &d, route_ends, NVERSIONS(route_ends));
}

/* Here, not in lib/quic, so that a build without QUIC fills in the same
 * defaults. */
void tern_quic_options_init_size(tern_quic_options *out, size_t size) {
  tern_quic_options d, *o = &d;
  if (out == NULL)
    return;
  memset(o, 0, sizeof(*o));
  o->version = TERN_QUIC_OPTIONS_VERSION;
  o->size = sizeof(*o);
  o->retry = TERN_QUIC_RETRY_LOAD;
  o->early_data = 0;
  o->max_streams = 100;
  tern__abi_init(out, size, &d, tern__quic_options_ends,
                 TERN_QUIC_OPTIONS_VERSION);
}

void tern_stats_init_size(tern_stats *out, size_t size) {
  tern_stats d, *st = &d;
  if (out == NULL)
    return;
  memset(st, 0, sizeof(*st));
  st->version = TERN_STATS_VERSION;
  st->size = sizeof(*st);
  tern__abi_init(out, size, &d, stats_ends, NVERSIONS(stats_ends));
}

static void *router_malloc(size_t n, void *u) {
  return tern__malloc(u, n);
}
static void *router_realloc(void *p, size_t n, void *u) {
  return tern__realloc(u, p, n);
}
static void router_free(void *p, void *u) {
  tern__free(u, p);
}

/* max_stream_window and max_conn_window: their defaults (what 0 asks
 * for) and their range. */
#define STREAM_WINDOW_DEFAULT (8u << 20)
#define CONN_WINDOW_DEFAULT (16u << 20)
#define WINDOW_MIN (16u << 10)
#define WINDOW_MAX (1u << 30)
/* max_compressors and max_compressors_per_conn: defaults and ceiling. */
#define COMPRESSORS_DEFAULT 64
#define COMPRESSORS_PER_CONN_DEFAULT 4
#define COMPRESSORS_MAX 65536

/* A log line before a server exists: through the settings' callback. */
static void settings_log(const tern_settings *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void settings_log(const tern_settings *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tern__vlog(s->log, s->log_user, TERN_LOG_ERROR, fmt, ap);
  va_end(ap);
}

/* Every field is checked against the range that makes sense for it: a
 * value outside it is a mistake of the embedder's, and running with a
 * silently clamped or ignored value would hide it. The upper bounds keep
 * per-connection and per-request allocations (which some of these size)
 * reasonable. Returns 1, after a log line naming the field, when one is
 * out of range. */
static int settings_problem(const tern_settings *s) {
  static const struct {
    const char *name;
    size_t off;
    uint32_t min, max;
  } u32[] = {
#define F(f, lo, hi) {#f, offsetof(tern_settings, f), lo, hi}
      F(max_head_size, 64, 1u << 24),      F(max_header_count, 1, 65535),
      F(max_uri_length, 1, 1u << 24),      F(head_timeout_ms, 1, UINT32_MAX),
      F(idle_timeout_ms, 1, UINT32_MAX),   F(body_timeout_ms, 1, UINT32_MAX),
      F(max_connections, 1, 1u << 24),     F(max_pipeline, 1, 1024),
      F(read_buffer_size, 1024, 1u << 24),
#undef F
  };
  size_t i;

  for (i = 0; i < sizeof(u32) / sizeof(u32[0]); i++) {
    uint32_t v;
    memcpy(&v, (const char *)s + u32[i].off, sizeof(v));
    if (v < u32[i].min || v > u32[i].max) {
      settings_log(s, "settings: %s = %lu is outside %lu..%lu", u32[i].name,
                   (unsigned long)v, (unsigned long)u32[i].min,
                   (unsigned long)u32[i].max);
      return 1;
    }
  }
  if (s->workers > 1024) {
    settings_log(s, "settings: workers = %u is outside 0..1024", s->workers);
    return 1;
  }
  if (s->max_body_size == 0) {
    settings_log(s, "settings: max_body_size = 0 (at least 1 byte)");
    return 1;
  }
  if (s->tcp_nodelay != 0 && s->tcp_nodelay != 1) {
    settings_log(s, "settings: tcp_nodelay = %d is neither 0 nor 1",
                 s->tcp_nodelay);
    return 1;
  }
  if (s->log_level < TERN_LOG_ERROR || s->log_level > TERN_LOG_DEBUG) {
    settings_log(s, "settings: log_level = %d is outside %d..%d", s->log_level,
                 TERN_LOG_ERROR, TERN_LOG_DEBUG);
    return 1;
  }
  if (s->allocator.malloc == NULL || s->allocator.realloc == NULL ||
      s->allocator.free == NULL) {
    settings_log(s, "settings: the allocator needs malloc, realloc and free");
    return 1;
  }
  /* 0 asks for the default. Below a frame's worth (16 KiB) every DATA
   * frame would wait a round trip; above 1 GiB a window is no longer a
   * memory bound anyone means (HTTP/2's own ceiling is 2^31 - 1). */
  for (i = 0; i < 2; i++) {
    uint32_t v = i == 0 ? s->max_stream_window : s->max_conn_window;
    if (v != 0 && (v < WINDOW_MIN || v > WINDOW_MAX)) {
      settings_log(s, "settings: %s = %lu is outside %lu..%lu (or 0)",
                   i == 0 ? "max_stream_window" : "max_conn_window",
                   (unsigned long)v, (unsigned long)WINDOW_MIN,
                   (unsigned long)WINDOW_MAX);
      return 1;
    }
  }
  for (i = 0; i < 2; i++) {
    uint32_t v = i == 0 ? s->max_compressors : s->max_compressors_per_conn;
    if (v > COMPRESSORS_MAX) {
      settings_log(s, "settings: %s = %lu is outside 1..%u (or 0)",
                   i == 0 ? "max_compressors" : "max_compressors_per_conn",
                   (unsigned long)v, COMPRESSORS_MAX);
      return 1;
    }
  }
  if (s->requests_per_ip_per_s > 1000000 || s->request_burst > 1000000 ||
      s->ip_table_size > (1u << 24)) {
    settings_log(s, "settings: requests_per_ip_per_s and request_burst are "
                    "at most 1000000, ip_table_size 16777216");
    return 1;
  }
  if (s->balance < 0 || s->balance > TERN_BALANCE_REUSEPORT) {
    settings_log(s,
                 "settings: balance = %d is not a TERN_BALANCE_* value "
                 "(or 0)",
                 s->balance);
    return 1;
  }
  return 0;
}

/* Threads for blocking routes: UV_THREADPOOL_SIZE, as libuv's pool (which
 * tern used before) reads it, 4 by default, 1 to 1024. */
static unsigned pool_size(void) {
  const char *v = getenv("UV_THREADPOOL_SIZE");
  long n = v != NULL ? strtol(v, NULL, 10) : 0;
  return n < 1 ? 4 : n > 1024 ? 1024 : (unsigned)n;
}

/* The caller's settings refused by the ABI rule: the log line goes through
 * the caller's log callback when its struct has version 1's fields (every
 * version has them, where version 1 put them), else to stderr. */
static void settings_refused(const tern_settings *caller, const char *why) {
  tern_settings l;
  int version;
  uint32_t size;
  tern_settings_init_size(&l, sizeof(l));
  read_head(caller, &version, &size);
  if (version >= 1 && size >= settings_ends[0])
    memcpy(&l, caller, settings_ends[0]);
  settings_log(&l, "settings: %s", why);
}

int tern_server_new(const tern_settings *caller, tern_server **out) {
  tern_settings def;
  const tern_settings *s = &def;
  tern_server *srv;
  tern__router_alloc ra;
  char why[160];
  unsigned i;

  if (out == NULL)
    return TERN_EINVAL;
  /* The caller's struct may be shorter or longer than ours: it is read
   * into the defaults, and only the library's copy is used after. */
  tern_settings_init_size(&def, sizeof(def));
  if (caller != NULL &&
      tern__abi_read(&def, sizeof(def), caller, settings_ends,
                     NVERSIONS(settings_ends), why, sizeof(why)) != 0) {
    settings_refused(caller, why);
    return TERN_EINVAL;
  }
  if (settings_problem(s))
    return TERN_EINVAL;
  srv = s->allocator.malloc(sizeof(*srv), s->allocator.user);
  if (srv == NULL)
    return TERN_ENOMEM;
  memset(srv, 0, sizeof(*srv));
  srv->s = *s;
  srv->nprocs = 1;
  if (srv->s.workers == 0)
    srv->s.workers = uv_available_parallelism();
  if (srv->s.balance == 0)
    srv->s.balance = TERN_BALANCE_LEAST_CONNECTIONS;
  /* The adapters read the maxima from here, defaults filled in. */
  if (srv->s.max_stream_window == 0)
    srv->s.max_stream_window = STREAM_WINDOW_DEFAULT;
  if (srv->s.max_conn_window == 0)
    srv->s.max_conn_window = CONN_WINDOW_DEFAULT;
  if (srv->s.max_compressors == 0)
    srv->s.max_compressors = COMPRESSORS_DEFAULT;
  if (srv->s.max_compressors_per_conn == 0)
    srv->s.max_compressors_per_conn = COMPRESSORS_PER_CONN_DEFAULT;
  atomic_store(&srv->allocs, 1);
  atomic_store(&srv->alloc_bytes, sizeof(*srv));
  ra.malloc = router_malloc;
  ra.realloc = router_realloc;
  ra.free = router_free;
  ra.user = srv;
  srv->nworkers = srv->s.workers;
  srv->workers = tern__malloc(srv, srv->nworkers * sizeof(*srv->workers));
  if (srv->workers == NULL || tern__router_new(&srv->router, &ra) != 0) {
    tern__free(srv, srv->workers);
    s->allocator.free(srv, s->allocator.user);
    return TERN_ENOMEM;
  }
  memset(srv->workers, 0, srv->nworkers * sizeof(*srv->workers));
  for (i = 0; i < srv->nworkers; i++)
    srv->workers[i].srv = srv;
  if (uv_mutex_init(&srv->bp_lock) != 0) {
    tern__router_free(srv->router);
    tern__free(srv, srv->workers);
    s->allocator.free(srv, s->allocator.user);
    return TERN_ENOMEM;
  }
  if (uv_cond_init(&srv->bp_cond) != 0) {
    uv_mutex_destroy(&srv->bp_lock);
    tern__router_free(srv->router);
    tern__free(srv, srv->workers);
    s->allocator.free(srv, s->allocator.user);
    return TERN_ENOMEM;
  }
  if (tern__admit_new(srv, &srv->admit) != 0) {
    uv_cond_destroy(&srv->bp_cond);
    uv_mutex_destroy(&srv->bp_lock);
    tern__router_free(srv->router);
    tern__free(srv, srv->workers);
    s->allocator.free(srv, s->allocator.user);
    return TERN_ENOMEM;
  }
  srv->bp_max = pool_size();
  atomic_init(&srv->refs, 1);
  *out = srv;
  return 0;
}

static void route_filter_free(tern_server *srv, tern__route *r);

void tern_server_free(tern_server *srv) {
  size_t i;

  if (srv == NULL)
    return;
  /* An attached worker's handles were closed on the caller's loop; what it
   * still holds (pools, listener array) goes now. */
  for (i = 0; i < srv->nworkers; i++)
    if (srv->workers[i].loop != NULL)
      tern__worker_cleanup(&srv->workers[i]);
  for (i = 0; i < srv->nlisteners; i++)
    srv->listeners[i]->ops->free(srv->listeners[i], srv);
  tern__free(srv, srv->listeners);
  for (i = 0; i < srv->nroutes; i++) {
    route_filter_free(srv, srv->route_ptrs[i]);
    tern__free(srv, srv->route_ptrs[i]);
  }
  route_filter_free(srv, &srv->default_route);
  tern__free(srv, srv->route_ptrs);
  tern__router_free(srv->router);
  for (i = 0; i < srv->nvhosts; i++) {
    tern__router_free(srv->vhosts[i].router);
    tern__free(srv, srv->vhosts[i].name);
  }
  tern__free(srv, srv->vhosts);
  if (srv->tls_free != NULL)
    srv->tls_free(srv);
  for (i = 0; tern__services[i] != NULL; i++)
    if (tern__services[i]->server_free != NULL)
      tern__services[i]->server_free(srv);
  tern__pool_threads_close(srv);
  tern__server_unref(srv);
}

/* The last reference: what threads that outlived tern_run and
 * tern_server_free (blocking-pool threads, handlers of requests cut by the
 * stop deadline) may still have used. */
void tern__server_unref(tern_server *srv) {
  tern_allocator a;
  unsigned i;
  if (atomic_fetch_sub(&srv->refs, 1) != 1)
    return;
  for (i = 0; i < srv->nworkers; i++) {
    if (srv->workers[i].inbox_ready)
      uv_mutex_destroy(&srv->workers[i].inbox_lock);
    tern__free(srv, srv->workers[i].handoff);
  }
  tern__balance_free(srv);
  uv_cond_destroy(&srv->bp_cond);
  uv_mutex_destroy(&srv->bp_lock);
  tern__admit_free(srv, srv->admit);
  tern__free(srv, srv->workers);
  a = srv->s.allocator;
  a.free(srv, a.user);
}

/* ---- Listeners ------------------------------------------------- */

void tern__server_quic_port(tern_server *srv, int port) {
  int n;
  if (srv->alt_svc_user || srv->alt_svc_len > 0)
    return;
  n = snprintf(srv->alt_svc, sizeof(srv->alt_svc), "Alt-Svc: h3=\":%d\"\r\n",
               port);
  srv->alt_svc_len = n > 0 ? (size_t)n : 0;
}

int tern_server_set_alt_svc(tern_server *srv, const char *value) {
  size_t n;
  if (srv == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  if (value == NULL) { /* automatic: the first QUIC listener's port */
    size_t i;
    srv->alt_svc_user = 0;
    srv->alt_svc_len = 0;
    for (i = 0; i < srv->nlisteners; i++)
      if (srv->listeners[i]->ops->quic_port != NULL) {
        tern__server_quic_port(
            srv, srv->listeners[i]->ops->quic_port(srv->listeners[i]));
        break;
      }
    return 0;
  }
  n = strlen(value);
  if (n > 255 || strpbrk(value, "\r\n") != NULL)
    return TERN_EINVAL;
  srv->alt_svc_user = 1;
  srv->alt_svc_len = 0;
  if (n > 0) {
    memcpy(srv->alt_svc, "Alt-Svc: ", 9);
    memcpy(srv->alt_svc + 9, value, n);
    memcpy(srv->alt_svc + 9 + n, "\r\n", 2);
    srv->alt_svc_len = n + 11;
  }
  return 0;
}

int tern__server_add_listener(tern_server *srv, tern__listener *l) {
  tern__listener **ls =
      tern__realloc(srv, srv->listeners, (srv->nlisteners + 1) * sizeof(*ls));
  if (ls == NULL)
    return TERN_ENOMEM;
  srv->listeners = ls;
  ls[srv->nlisteners++] = l;
  return 0;
}

/* ---- Routes ------------------------------------------------------ */

/* Read the caller's route options (NULL: the defaults) into `o`, the
 * library's layout. Options the router would otherwise reinterpret or
 * ignore are refused, with a log line naming the problem and the route. */
static int route_opts_read(tern_server *srv, const char *method,
                           const char *pattern, const tern_route_options *in,
                           tern_route_options *o) {
  const unsigned known = TERN_ROUTE_BLOCKING | TERN_ROUTE_STREAM_BODY;
  const char *why = NULL;
  char abi[160];
  tern_route_options_init_size(o, sizeof(*o));
  if (in == NULL)
    return 0;
  if (tern__abi_read(o, sizeof(*o), in, route_ends, NVERSIONS(route_ends), abi,
                     sizeof(abi)) != 0) {
    tern__log(srv, TERN_LOG_ERROR, "route %s %s: tern_route_options %s",
              method ? method : "*", pattern ? pattern : "(default)", abi);
    return 1;
  }
  if (o->flags & ~known)
    why = "unknown flag bits";
  else if ((o->flags & known) == known)
    /* A blocking handler cannot pace a streamed body from its thread. */
    why = "TERN_ROUTE_BLOCKING and TERN_ROUTE_STREAM_BODY together";
  if (why == NULL)
    return 0;
  tern__log(srv, TERN_LOG_ERROR, "route %s %s: %s", method ? method : "*",
            pattern ? pattern : "(default)", why);
  return 1;
}

/* The route's response filter, the first of the build's that its
 * options ask for (tern__resp_filters: compression), with its
 * configuration (logged when the options are bad). */
typedef struct {
  const tern__resp_filter *filter;
  void *conf;
} route_filter;

static int route_filter_new(tern_server *srv, const char *method,
                            const char *pattern, const tern_route_options *o,
                            route_filter *out) {
  char what[160];
  size_t i;
  int rc;
  out->filter = NULL;
  out->conf = NULL;
  snprintf(what, sizeof(what), "route %s %s", method ? method : "*",
           pattern ? pattern : "(default)");
  for (i = 0; tern__resp_filters[i] != NULL; i++) {
    rc = tern__resp_filters[i]->conf_new(srv, o, what, &out->conf);
    if (rc != 0)
      return rc;
    if (out->conf != NULL) {
      out->filter = tern__resp_filters[i];
      return 0;
    }
  }
  return 0;
}

static void route_filter_drop(tern_server *srv, route_filter *f) {
  if (f->filter != NULL)
    f->filter->conf_free(srv, f->conf);
}

static void route_filter_free(tern_server *srv, tern__route *r) {
  route_filter f = {r->filter, r->filter_conf};
  route_filter_drop(srv, &f);
}

static void fill_route(tern_server *srv, tern__route *r, tern_handler h,
                       void *user, const tern_route_options *o,
                       const route_filter *f) {
  r->handler = h;
  r->user = user;
  r->flags = o->flags;
  r->max_body = o->max_body_size ? o->max_body_size : srv->s.max_body_size;
  r->filter = f->filter;
  r->filter_conf = f->conf;
}

static void note_method(tern_server *srv, const char *method) {
  size_t n, cur = srv->allow_all_len;
  const char *p = srv->allow_all;

  if (method == NULL || strcmp(method, "*") == 0)
    method = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS";
  else if (strcmp(method, "GET") == 0)
    note_method(srv, "HEAD"); /* a GET route answers HEAD too */
  n = strlen(method);
  /* Skip exact duplicates; the list is short. */
  while (p < srv->allow_all + cur) {
    const char *e = memchr(p, ',', (size_t)(srv->allow_all + cur - p));
    size_t l = e ? (size_t)(e - p) : (size_t)(srv->allow_all + cur - p);
    if (l == n && memcmp(p, method, n) == 0)
      return;
    p = e ? e + 2 : srv->allow_all + cur;
  }
  if (cur + n + 2 >= sizeof(srv->allow_all))
    return;
  if (cur > 0) {
    memcpy(srv->allow_all + cur, ", ", 2);
    cur += 2;
  }
  memcpy(srv->allow_all + cur, method, n);
  srv->allow_all_len = cur + n;
}

/* ---- Virtual hosts ------------------------------------------------ */

/* A host name as routes name it: letters, digits, '-' and '.', with an
 * optional leading "*." ; 0 when it is not one. */
static int host_valid(const char *h) {
  size_t i = h[0] == '*' && h[1] == '.' ? 2 : 0, n = 0;
  for (; h[i] != '\0'; i++, n++)
    if (!((h[i] >= 'a' && h[i] <= 'z') || (h[i] >= 'A' && h[i] <= 'Z') ||
          (h[i] >= '0' && h[i] <= '9') || h[i] == '-' || h[i] == '.'))
      return 0;
  return n > 0 && n <= 253;
}

static tern__router *vhost_router(tern_server *srv, const char *host) {
  int wild = host[0] == '*';
  const char *name = host + (wild ? 2 : 0);
  size_t len = strlen(name), i;
  tern__router_alloc ra = {router_malloc, router_realloc, router_free, srv};
  tern__vhost *v, *grown;

  for (i = 0; i < srv->nvhosts; i++) {
    v = &srv->vhosts[i];
    if (v->wildcard == wild && v->len == len && tern__ieq(v->name, name, len))
      return v->router;
  }
  grown = tern__realloc(srv, srv->vhosts, (srv->nvhosts + 1) * sizeof(*v));
  if (grown == NULL)
    return NULL;
  srv->vhosts = grown;
  /* Exact hosts before wildcards: the first that matches wins. */
  for (i = srv->nvhosts; i > 0 && !wild && srv->vhosts[i - 1].wildcard; i--)
    srv->vhosts[i] = srv->vhosts[i - 1];
  v = &srv->vhosts[i];
  memset(v, 0, sizeof(*v));
  if ((v->name = tern__malloc(srv, len + 1)) == NULL ||
      tern__router_new(&v->router, &ra) != 0) {
    tern__free(srv, v->name);
    memmove(v, v + 1, (srv->nvhosts - i) * sizeof(*v));
    return NULL;
  }
  for (i = 0; i < len; i++)
    v->name[i] =
        (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
  v->name[len] = '\0';
  v->len = len;
  v->wildcard = wild;
  srv->nvhosts++;
  return v->router;
}

int tern__vhost_match(tern_request *r) {
  tern_server *srv = r->w->srv;
  size_t n = 0, i;
  const char *h = tern_request_header(r, "host", 4, &n);
  if (h == NULL)
    return 0;
  n = tern__host_len(h, n);
  for (i = 0; i < srv->nvhosts; i++) {
    const tern__vhost *v = &srv->vhosts[i];
    if (v->wildcard ? !(n > v->len + 1 && h[n - v->len - 1] == '.' &&
                        tern__ieq(h + n - v->len, v->name, v->len))
                    : !(n == v->len && tern__ieq(h, v->name, n)))
      continue;
    tern__router_match(v->router, r->method, r->method_len, r->path,
                       r->path_len, &r->match);
    return r->match.status != 404;
  }
  return 0;
}

int tern_route_with(tern_server *srv, const char *method, const char *pattern,
                    tern_handler handler, void *user,
                    const tern_route_options *opts) {
  tern__router *router;
  tern__route *r, **ptrs;
  tern_route_options o;
  route_filter comp;
  const char *why;
  int rc;

  if (srv == NULL || pattern == NULL || handler == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  if (route_opts_read(srv, method, pattern, opts, &o))
    return TERN_EINVAL;
  if ((why = tern__router_problem(method, pattern)) != NULL ||
      (o.host != NULL && !host_valid(o.host) &&
       (why = "host is not a name (letters, digits, '-', '.', an optional "
              "leading \"*.\")") != NULL)) {
    tern__log(srv, TERN_LOG_ERROR, "route %s %s: %s", method ? method : "*",
              pattern, why);
    return TERN_EINVAL;
  }
  router = o.host != NULL ? vhost_router(srv, o.host) : srv->router;
  if (router == NULL)
    return TERN_ENOMEM;
  if (srv->nroutes == srv->routes_cap) {
    size_t cap = srv->routes_cap ? srv->routes_cap * 2 : 16;
    ptrs = tern__realloc(srv, srv->route_ptrs, cap * sizeof(*ptrs));
    if (ptrs == NULL)
      return TERN_ENOMEM;
    srv->route_ptrs = ptrs;
    srv->routes_cap = cap;
  }
  if ((rc = route_filter_new(srv, method, pattern, &o, &comp)) != 0)
    return rc;
  r = tern__malloc(srv, sizeof(*r));
  if (r == NULL) {
    route_filter_drop(srv, &comp);
    return TERN_ENOMEM;
  }
  fill_route(srv, r, handler, user, &o, &comp);
  rc = tern__router_add(router, method, pattern, r);
  if (rc != 0) {
    route_filter_drop(srv, &comp);
    tern__free(srv, r);
    return rc;
  }
  srv->route_ptrs[srv->nroutes++] = r;
  note_method(srv, method);
  return 0;
}

int tern_route(tern_server *srv, const char *method, const char *pattern,
               tern_handler handler, void *user) {
  return tern_route_with(srv, method, pattern, handler, user, NULL);
}

int tern_server_set_default_handler(tern_server *srv, tern_handler handler,
                                    void *user,
                                    const tern_route_options *opts) {
  tern_route_options o;
  route_filter comp;
  int rc;
  if (srv == NULL || handler == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  if (route_opts_read(srv, NULL, NULL, opts, &o))
    return TERN_EINVAL;
  if ((rc = route_filter_new(srv, NULL, NULL, &o, &comp)) != 0)
    return rc;
  /* A later call replaces the handler, and its filter. */
  route_filter_free(srv, &srv->default_route);
  fill_route(srv, &srv->default_route, handler, user, &o, &comp);
  srv->has_default = 1;
  return 0;
}

int tern_server_on_error(tern_server *srv, tern_error_fn fn, void *user) {
  if (srv == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  srv->error_fn = fn;
  srv->error_user = fn != NULL ? user : NULL;
  return 0;
}

int tern_server_on_response(tern_server *srv, tern_response_fn fn, void *user) {
  if (srv == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  srv->response_fn = fn;
  srv->response_user = fn != NULL ? user : NULL;
  return 0;
}

/* ---- Run, attach, stop ------------------------------------------- */

/* Connections beyond the descriptors the process may open would make
 * accept fail over and over (EMFILE) instead of being refused cleanly:
 * raise the soft limit to the hard one, then fit max_connections into it,
 * keeping some descriptors for the embedding program. */
static uint32_t fit_connections(tern_server *srv) {
  struct rlimit rl;
  uint64_t fit;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return srv->s.max_connections;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur == RLIM_INFINITY)
    return srv->s.max_connections;
  fit = rl.rlim_cur > 128 ? (rl.rlim_cur - 64) / srv->nworkers : 16;
  if (fit < srv->s.max_connections) {
    tern__log(srv, TERN_LOG_INFO,
              "max_connections %u per worker lowered to %llu to fit the "
              "descriptor limit %llu",
              srv->s.max_connections, (unsigned long long)fit,
              (unsigned long long)rl.rlim_cur);
    return (uint32_t)fit;
  }
  return srv->s.max_connections;
}

static int start_workers(tern_server *srv, uv_loop_t *loop) {
  struct sigaction sa;
  uint32_t max_conns = fit_connections(srv);
  unsigned i;
  int rc;

  /* A peer that resets while we write must give EPIPE, not kill the
   * process; an embedder who installed its own handler keeps it. */
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
  }

  if (srv->nlisteners == 0)
    return TERN_ESTATE;
  for (i = 0; i < srv->nworkers; i++) {
    srv->workers[i].max_conns = max_conns;
    rc = tern__worker_init(&srv->workers[i], srv, i, loop);
    if (rc != 0) {
      tern__log(srv, TERN_LOG_ERROR, "worker %u: %s", i, tern_strerror(rc));
      while (i + 1 > 0)
        tern__worker_cleanup(&srv->workers[i--]);
      return rc;
    }
  }
  return 0;
}

/* Move a running server to stopping and wake its workers. Only one
 * caller wins the exchange; the others find it done. */
static void stop_running(tern_server *srv) {
  int expected = TERN__S_RUNNING;
  unsigned i;
  if (!atomic_compare_exchange_strong(&srv->state, &expected, TERN__S_STOPPING))
    return;
  /* uv_async_send is async-signal-safe, so this path is too. */
  for (i = 0; i < srv->nworkers; i++)
    uv_async_send(&srv->workers[i].async);
}

int tern_run(tern_server *srv) {
  int expected = TERN__S_IDLE;
  unsigned i;
  int rc;

  if (srv == NULL)
    return TERN_EINVAL;
  if (!atomic_compare_exchange_strong(&srv->state, &expected, TERN__S_STARTING))
    return TERN_ESTATE;
  rc = start_workers(srv, NULL);
  if (rc != 0) {
    atomic_store(&srv->state, TERN__S_DONE);
    return rc;
  }
  /* Only now may tern_stop() wake the workers: their handles exist. A
   * stop that came earlier was remembered and is carried out now. */
  atomic_store(&srv->state, TERN__S_RUNNING);
  if (atomic_load(&srv->stop_wanted))
    stop_running(srv);
  /* Worker 0 runs on the caller's thread; the others get their own. */
  for (i = 1; i < srv->nworkers; i++) {
    if (uv_thread_create(&srv->workers[i].thread, tern__worker_run_thread,
                         &srv->workers[i]) != 0) {
      tern__log(srv, TERN_LOG_ERROR, "cannot start worker thread %u", i);
      atomic_store(&srv->stop_deadline_ms, 0);
      stop_running(srv);
      break;
    }
    srv->workers[i].thread_started = 1;
  }
  tern__worker_run_thread(&srv->workers[0]);
  for (i = 1; i < srv->nworkers; i++)
    if (srv->workers[i].thread_started)
      uv_thread_join(&srv->workers[i].thread);
  atomic_store(&srv->state, TERN__S_DONE);
  /* Idle pool threads go now; one still in a handler (of a request the
   * deadline cut) ends when the handler returns. */
  tern__pool_threads_close(srv);
  return 0;
}

int tern_attach(tern_server *srv, void *uv_loop) {
  int expected = TERN__S_IDLE;
  int rc;

  if (srv == NULL || uv_loop == NULL || srv->nworkers != 1)
    return TERN_EINVAL;
  if (!atomic_compare_exchange_strong(&srv->state, &expected, TERN__S_STARTING))
    return TERN_ESTATE;
  rc = start_workers(srv, uv_loop);
  atomic_store(&srv->state, rc != 0 ? TERN__S_DONE : TERN__S_RUNNING);
  if (rc == 0)
    tern__worker_started(&srv->workers[0]);
  if (rc == 0 && atomic_load(&srv->stop_wanted))
    stop_running(srv);
  return rc;
}

/* A stop that finds the server not yet running (before tern_run, or while
 * it starts its workers) is remembered in stop_wanted; tern_run and
 * tern_attach look at it right after they enter the running state, so
 * whichever of the two sides comes second acts on it (both atomics are
 * sequentially consistent). */
int tern_stop(tern_server *srv, uint32_t deadline_ms) {
  int state;

  if (srv == NULL)
    return TERN_EINVAL;
  state = atomic_load(&srv->state);
  if (state == TERN__S_DONE)
    return TERN_ESTATE;
  /* Before the workers began stopping the shortest deadline asked for
   * counts; after, they have armed their timers and it changes nothing. */
  if (state != TERN__S_STOPPING &&
      (!atomic_load(&srv->stop_wanted) ||
       deadline_ms < atomic_load(&srv->stop_deadline_ms)))
    atomic_store(&srv->stop_deadline_ms, deadline_ms);
  atomic_store(&srv->stop_wanted, 1);
  stop_running(srv);
  return 0;
}

/* The counters are summed into the library's own struct and only the
 * caller's version's part is copied out (tern__abi_write). */
#define LOAD(f) atomic_load_explicit(&(f), memory_order_relaxed)
/* One worker's counters added into st-> */
static void add_worker(tern_stats *st, const tern__worker *wk) {
  const tern__wstats *w = &wk->stats;
  uint64_t lag;
  unsigned p, k;
  {
    st->requests += atomic_load_explicit(&w->requests, memory_order_relaxed);
    if (wk->slot != NULL) { /* none before the worker started */
      st->connections += LOAD(wk->slot->taken);
      st->active_connections += LOAD(wk->slot->active);
    }
    st->bytes_in += atomic_load_explicit(&w->bytes_in, memory_order_relaxed);
    st->bytes_out += atomic_load_explicit(&w->bytes_out, memory_order_relaxed);
    st->quic_forwarded +=
        atomic_load_explicit(&w->quic_forwarded, memory_order_relaxed);
    st->quic_retries +=
        atomic_load_explicit(&w->quic_retries, memory_order_relaxed);
    st->quic_resets +=
        atomic_load_explicit(&w->quic_resets, memory_order_relaxed);
    st->quic_version_negotiations +=
        atomic_load_explicit(&w->quic_vn, memory_order_relaxed);
    st->quic_refused +=
        atomic_load_explicit(&w->quic_refused, memory_order_relaxed);
    for (p = 0; p < TERN_STATS_PROTOCOLS; p++) {
      for (k = 0; k < TERN_STATS_CLASSES; k++)
        st->requests_by_class[p][k] += LOAD(w->by_class[p][k]);
      for (k = 0; k < TERN_STATS_BUCKETS; k++)
        st->duration_buckets[p][k] += LOAD(w->buckets[p][k]);
      st->requests_aborted[p] += LOAD(w->aborted[p]);
      st->request_bytes_in[p] += LOAD(w->req_in[p]);
      st->request_bytes_out[p] += LOAD(w->req_out[p]);
      st->duration_sum_ns[p] += LOAD(w->dur_sum[p]);
      st->open_connections[p] += LOAD(w->conns[p]);
      st->open_streams[p] += LOAD(w->streams[p]);
    }
    st->tls_handshakes_full += LOAD(w->tls_full);
    st->tls_handshakes_resumed += LOAD(w->tls_resumed);
    st->tls_handshakes_failed += LOAD(w->tls_failed);
    st->ws_open += LOAD(w->ws_open);
    st->ws_messages_in += LOAD(w->ws_in);
    st->ws_messages_out += LOAD(w->ws_out);
    st->rejected_limit += LOAD(w->rej_limit);
    st->rejected_timeout += LOAD(w->rej_timeout);
    st->rejected_protocol += LOAD(w->rej_protocol);
    st->access_log_lines += LOAD(w->log_lines);
    st->access_log_dropped += LOAD(w->log_dropped);
    st->connections_handed_in += LOAD(w->handed_in);
    lag = LOAD(w->loop_lag);
    if (lag > st->loop_lag_ns)
      st->loop_lag_ns = lag;
  }
}

/* The counters of every worker and the server-wide ones (worker < 0),
 * or of one worker alone, written back the caller's way. */
static int stats_out(const tern_server *srv, tern_stats *out, int worker) {
  tern_stats st;
  char why[160];
  unsigned i;

  if (srv == NULL || out == NULL ||
      (worker >= 0 && (unsigned)worker >= srv->nworkers))
    return TERN_EINVAL;
  memset(&st, 0, sizeof(st));
  for (i = 0; i < srv->nworkers; i++)
    if (worker < 0 || (unsigned)worker == i)
      add_worker(&st, &srv->workers[i]);
  if (worker < 0) {
    st.allocations = atomic_load(&srv->allocs);
    st.bytes_allocated = atomic_load(&srv->alloc_bytes);
    st.frees = atomic_load(&srv->frees);
    st.reallocations = atomic_load(&srv->reallocs);
    tern__admit_counts(srv->admit, &st.rejected_ip_connections,
                       &st.rejected_ip_rate);
  }
  if (tern__abi_write(out, &st, stats_ends, NVERSIONS(stats_ends), why,
                      sizeof(why)) != 0) {
    tern__log((tern_server *)srv, TERN_LOG_ERROR, "tern_server_stats: %s", why);
    return TERN_EINVAL;
  }
  return 0;
}

int tern_server_stats(const tern_server *srv, tern_stats *out) {
  return stats_out(srv, out, -1);
}

int tern_server_worker_stats(const tern_server *srv, unsigned worker,
                             tern_stats *out) {
  return stats_out(srv, out, worker > INT32_MAX ? INT32_MAX : (int)worker);
}
