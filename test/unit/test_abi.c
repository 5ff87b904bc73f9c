/* The versioned structs of tern.h, as a program built against an older
 * (or newer) header lays them out: the library must read only the
 * caller's version's fields (defaults for the rest), refuse what it
 * cannot honour with a log line, and write an output struct only up to
 * the caller's end.
 *
 * Input structs are placed so that their last byte is the last one
 * before an inaccessible page: a library that read the fields its own
 * header has but the caller's lacks would fault. Output structs are
 * followed by guard bytes that must stay as they were. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/worker.h"
#include "capture_log.h"
#include "t.h"
#include "test_cert.h"

#include "../common/listen.h"

/* ---- Layouts from "older" and "newer" headers ---------------------- */

/* tern_settings as version 1 laid it out. */
#define SETTINGS_V1_FIELDS                                                     \
  int version;                                                                 \
  uint32_t size;                                                               \
  unsigned workers;                                                            \
  uint32_t max_head_size, max_header_count, max_uri_length;                    \
  uint64_t max_body_size;                                                      \
  uint32_t head_timeout_ms, idle_timeout_ms, body_timeout_ms;                  \
  uint32_t max_connections, max_pipeline;                                      \
  int tcp_nodelay;                                                             \
  uint32_t read_buffer_size;                                                   \
  tern_allocator allocator;                                                    \
  tern_log_fn log;                                                             \
  void *log_user;                                                              \
  int log_level;
typedef struct {
  SETTINGS_V1_FIELDS
} settings_v1;

/* Version 2 put max_stream_window into version 1's tail padding. */
typedef struct {
  SETTINGS_V1_FIELDS
  uint32_t max_stream_window;
  uint32_t max_conn_window;
} settings_v2;

/* Version 3 bounded the streamed compressors (flat: version 2's tail
 * padding holds them). */
#define SETTINGS_V3_FIELDS                                                     \
  SETTINGS_V1_FIELDS                                                           \
  uint32_t max_stream_window;                                                  \
  uint32_t max_conn_window;                                                    \
  uint32_t max_compressors;                                                    \
  uint32_t max_compressors_per_conn;
typedef struct {
  SETTINGS_V3_FIELDS
} settings_v3;

/* Version 4 added the limits per client address (flat: in version 3's
 * tail padding). */
#define SETTINGS_V4_FIELDS                                                     \
  SETTINGS_V3_FIELDS                                                           \
  uint32_t max_connections_per_ip;                                             \
  uint32_t requests_per_ip_per_s;                                              \
  uint32_t request_burst;                                                      \
  uint32_t ip_table_size;
typedef struct {
  SETTINGS_V4_FIELDS
} settings_v4;

/* Version 5 added balance (in version 4's tail padding). */
typedef struct {
  SETTINGS_V4_FIELDS
  int balance;
} settings_v5;

/* A header one version ahead of this library's. */
typedef struct {
  settings_v5 v5;
  uint64_t future;
} settings_v6;

typedef struct {
  int version;
  uint32_t size;
  unsigned flags;
  uint64_t max_body_size;
} route_options_v1;

/* tern_ws_options before deflate_level. */
typedef struct {
  int version;
  uint32_t size;
  tern_ws_open_fn on_open;
  tern_ws_message_fn on_message;
  tern_ws_close_fn on_close;
  tern_ws_drain_fn on_drain;
  uint64_t max_message_size;
  size_t high_water;
  int on_full, stream_messages, deflate, deflate_window_bits;
  int deflate_mem_level;
  uint32_t close_timeout_ms;
  const char *subprotocol;
  size_t subprotocol_len;
} ws_options_v1;

typedef struct {
  int version;
  uint32_t size;
  uint64_t requests, connections, active_connections, bytes_in, bytes_out;
  uint64_t allocations, bytes_allocated, frees;
} stats_v1;

/* Fewer fields than version 1 ever had: must be refused. */
typedef struct {
  int version;
  uint32_t size;
  uint64_t requests, connections;
} stats_short;

/* Version 2 added the QUIC counters. */
typedef struct {
  stats_v1 v1;
  uint64_t quic_forwarded, quic_retries, quic_resets, quic_vn, quic_refused;
} stats_v2;

/* Version 3 added the operations counters (a block of uint64_t). */
typedef struct {
  stats_v2 v2;
  uint64_t ops[(offsetof(tern_stats, access_log_dropped) + sizeof(uint64_t) -
                sizeof(stats_v2)) /
               sizeof(uint64_t)];
} stats_v3;

/* Version 4 counted resizes apart. */
typedef struct {
  stats_v3 v3;
  uint64_t reallocations;
} stats_v4;

/* Version 5 counted what the limits per client address refused. */
typedef struct {
  stats_v4 v4;
  uint64_t rejected_ip_connections, rejected_ip_rate;
} stats_v5;

typedef struct {
  stats_v5 v5;
  uint64_t connections_handed_in, loop_lag_ns;
} stats_v6;

typedef struct {
  stats_v6 v6;
  uint64_t future;
} stats_v7;

/* The old layouts are the current header's prefixes, field for field. */
_Static_assert(offsetof(settings_v1, log_level) ==
                   offsetof(tern_settings, log_level),
               "settings v1");
_Static_assert(offsetof(settings_v3, max_compressors_per_conn) ==
                   offsetof(tern_settings, max_compressors_per_conn),
               "settings v3");
_Static_assert(offsetof(settings_v4, ip_table_size) ==
                   offsetof(tern_settings, ip_table_size),
               "settings v4");
_Static_assert(sizeof(settings_v4) == sizeof(tern_settings) &&
                   sizeof(settings_v5) == sizeof(tern_settings) &&
                   offsetof(settings_v5, balance) ==
                       offsetof(tern_settings, balance),
               "settings v5, in v4's tail padding");
_Static_assert(offsetof(settings_v2, max_conn_window) ==
                   offsetof(tern_settings, max_conn_window),
               "settings v2");
_Static_assert(offsetof(route_options_v1, max_body_size) ==
                   offsetof(tern_route_options, max_body_size),
               "route options v1");
_Static_assert(sizeof(ws_options_v1) ==
                   offsetof(tern_ws_options, deflate_level),
               "ws options v1 ends where deflate_level begins");
_Static_assert(offsetof(stats_v1, frees) == offsetof(tern_stats, frees),
               "stats v1");
_Static_assert(offsetof(stats_v2, quic_refused) ==
                   offsetof(tern_stats, quic_refused),
               "stats v2");
_Static_assert(offsetof(tern_stats, requests_by_class) == sizeof(stats_v2) &&
                   offsetof(tern_stats, access_log_dropped) ==
                       sizeof(stats_v3) - sizeof(uint64_t),
               "stats v3");
_Static_assert(offsetof(stats_v4, reallocations) ==
                   offsetof(tern_stats, reallocations),
               "stats v4");
_Static_assert(offsetof(stats_v5, rejected_ip_rate) ==
                   offsetof(tern_stats, rejected_ip_rate),
               "stats v5");
_Static_assert(sizeof(stats_v6) == sizeof(tern_stats) &&
                   offsetof(stats_v6, loop_lag_ns) ==
                       offsetof(tern_stats, loop_lag_ns),
               "stats v6");

/* `n` bytes whose end is the start of a PROT_NONE page. */
static void *at_page_end(size_t n) {
  long pg = sysconf(_SC_PAGESIZE);
  char *m = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED || mprotect(m + pg, (size_t)pg, PROT_NONE) != 0)
    abort();
  return m + pg - n;
}

static void page_free(void *p) {
  long pg = sysconf(_SC_PAGESIZE);
  munmap((void *)((uintptr_t)p & ~(uintptr_t)(pg - 1)), (size_t)pg * 2);
}

#define T_LOGGED(what)                                                         \
  do {                                                                         \
    if (strstr(last_log, what) == NULL)                                        \
      T_FAIL("log line \"%s\" does not say \"%s\"", last_log, what);           \
  } while (0)

static void old_settings(settings_v1 *o) {
  tern_settings cur;
  tern_settings_init(&cur);
  memcpy(o, &cur, sizeof(*o));
  o->version = 1;
  o->size = sizeof(*o);
  o->workers = 1;
  o->log = capture;
  nlogs = 0;
  last_log[0] = '\0';
}

/* ---- The mechanism, on a struct with three versions ----------------- */

/* Version 3 put `c` into the tail padding of version 2's layout. */
typedef struct {
  int version;
  uint32_t size;
  int a;  /* version 1 */
  char b; /* version 2 */
  char c; /* version 3 */
} lib3;

typedef struct {
  int version;
  uint32_t size;
  int a;
  char b;
} lib3_v2;

static const size_t lib3_ends[] = {TERN__END(lib3, a), TERN__END(lib3, b),
                                   TERN__END(lib3, c)};

static void lib3_defaults(lib3 *d) {
  memset(d, 0, sizeof(*d));
  d->version = 3;
  d->size = sizeof(*d);
  d->a = -1;
  d->b = 'B';
  d->c = 'C';
}

static void test_read_older_versions(void) {
  lib3 d;
  lib3_v2 *v2 = at_page_end(sizeof(lib3_v2));
  char why[160];

  /* Version 2 from an older header, its tail padding not a value: the
   * caller's a and b, and c's default rather than the padding byte. */
  memset(v2, 0xEE, sizeof(*v2));
  v2->version = 2;
  v2->size = sizeof(*v2);
  v2->a = 7;
  v2->b = 'x';
  lib3_defaults(&d);
  T_EQ_INT(tern__abi_read(&d, sizeof(d), v2, lib3_ends, 3, why, sizeof(why)),
           0);
  T_EQ_INT(d.a, 7);
  T_EQ_INT(d.b, 'x');
  T_EQ_INT(d.c, 'C');
  T_EQ_INT(d.version, 3);
  T_EQ_INT(d.size, sizeof(lib3));

  /* Version 1: only a is the caller's. */
  v2->version = 1;
  lib3_defaults(&d);
  T_EQ_INT(tern__abi_read(&d, sizeof(d), v2, lib3_ends, 3, why, sizeof(why)),
           0);
  T_EQ_INT(d.a, 7);
  T_EQ_INT(d.b, 'B');

  /* Refused, the defaults untouched: too small for its version, version
   * 0 (never filled), and a newer version than the library knows. */
  v2->version = 2;
  v2->size = (uint32_t)lib3_ends[1] - 1;
  lib3_defaults(&d);
  T_EQ_INT(tern__abi_read(&d, sizeof(d), v2, lib3_ends, 3, why, sizeof(why)),
           -1);
  T_ASSERT(strstr(why, "smaller than version 2") != NULL);
  T_EQ_INT(d.a, -1);
  v2->version = 0;
  v2->size = sizeof(*v2);
  T_EQ_INT(tern__abi_read(&d, sizeof(d), v2, lib3_ends, 3, why, sizeof(why)),
           -1);
  v2->version = 4;
  T_EQ_INT(tern__abi_read(&d, sizeof(d), v2, lib3_ends, 3, why, sizeof(why)),
           -1);
  T_ASSERT(strstr(why, "version 4 is unknown") != NULL);
  T_EQ_INT(d.a, -1);
  page_free(v2);
}

static void test_write_older_versions(void) {
  union {
    lib3_v2 s;
    unsigned char b[sizeof(lib3_v2) + 16];
  } out;
  lib3 d;
  char why[160];
  size_t i;

  memset(&out, 0xEE, sizeof(out));
  out.s.version = 2;
  out.s.size = sizeof(out.s);
  lib3_defaults(&d);
  d.a = 42;
  T_EQ_INT(tern__abi_write(&out, &d, lib3_ends, 3, why, sizeof(why)), 0);
  T_EQ_INT(out.s.version, 2);
  T_EQ_INT(out.s.size, sizeof(lib3_v2));
  T_EQ_INT(out.s.a, 42);
  T_EQ_INT(out.s.b, 'B');
  /* Version 2's padding (where version 3 put c) and what follows. */
  for (i = TERN__END(lib3_v2, b); i < sizeof(out.b); i++)
    T_EQ_INT(out.b[i], 0xEE);
}

/* ---- tern_settings --------------------------------------------------- */

static void test_settings_v1(void) {
  settings_v1 *o = at_page_end(sizeof(settings_v1));
  tern_server *srv = NULL;
  size_t end = TERN__END(settings_v1, log_level);

  old_settings(o);
  /* Version 1's tail padding is where version 2 keeps max_stream_window:
   * whatever an old caller left there is not a value. */
  memset((char *)o + end, 0x5A, sizeof(*o) - end);
  o->max_head_size = 4096;
  o->max_body_size = 12345;
  o->idle_timeout_ms = 777;
  o->log_level = TERN_LOG_INFO;
  o->log_user = o;
  T_EQ_INT(tern_server_new((const tern_settings *)(void *)o, &srv), 0);
  T_EQ_INT(srv->s.workers, 1);
  T_EQ_INT(srv->s.max_head_size, 4096);
  T_EQ_INT(srv->s.max_body_size, 12345);
  T_EQ_INT(srv->s.idle_timeout_ms, 777);
  T_EQ_INT(srv->s.max_header_count, 100); /* the caller's copy of the default */
  T_ASSERT(srv->s.log == capture && srv->s.log_user == o);
  T_EQ_INT(srv->s.log_level, TERN_LOG_INFO);
  T_EQ_INT(srv->s.version, TERN_SETTINGS_VERSION);
  T_EQ_INT(srv->s.size, sizeof(tern_settings));
  /* Version 2's fields: the defaults. */
  T_EQ_INT(srv->s.max_stream_window, 8u << 20);
  T_EQ_INT(srv->s.max_conn_window, 16u << 20);
  T_EQ_INT(nlogs, 0);
  tern_server_free(srv);
  page_free(o);
}

/* A version 2 caller's window maxima are read (0: the defaults); out of
 * range they are refused, with a log line naming the field. */
static void test_settings_v2(void) {
  static const struct {
    uint32_t stream, conn;
    int rc;
    const char *logged;
  } cases[] = {
      {65536, 1u << 20, 0, NULL},
      {16384, 16384, 0, NULL}, /* the smallest */
      {1u << 30, 1u << 30, 0, NULL},
      {0, 0, 0, NULL},
      {16383, 0, TERN_EINVAL, "max_stream_window = 16383 is outside"},
      {0, 1, TERN_EINVAL, "max_conn_window = 1 is outside"},
      {(1u << 30) + 1, 0, TERN_EINVAL, "max_stream_window"},
      {0, UINT32_MAX, TERN_EINVAL, "max_conn_window"},
  };
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    settings_v2 *o = at_page_end(sizeof(settings_v2));
    tern_server *srv = NULL;
    int rc;
    old_settings((settings_v1 *)(void *)o);
    o->version = 2;
    o->size = sizeof(*o);
    o->max_stream_window = cases[i].stream;
    o->max_conn_window = cases[i].conn;
    rc = tern_server_new((const tern_settings *)(void *)o, &srv);
    T_EQ_INT(rc, cases[i].rc);
    if (rc != 0) {
      T_ASSERT(srv == NULL);
      T_EQ_INT(nlogs, 1);
      T_LOGGED(cases[i].logged);
      T_ASSERT(strcmp(tern_strerror(rc), tern_strerror(TERN_EINVAL)) == 0);
      T_ASSERT(strstr(tern_strerror(rc), "invalid") != NULL);
    } else {
      T_EQ_INT(nlogs, 0);
      T_EQ_INT(srv->s.max_stream_window,
               cases[i].stream ? cases[i].stream : 8u << 20);
      T_EQ_INT(srv->s.max_conn_window,
               cases[i].conn ? cases[i].conn : 16u << 20);
      tern_server_free(srv);
    }
    page_free(o);
  }
}

/* Version 3's compressor bounds: 0 asks for the defaults, more than
 * 65536 is refused with a log line naming the field. */
static void test_settings_v3(void) {
  static const struct {
    uint32_t all, conn;
    int rc;
    const char *logged;
  } cases[] = {
      {0, 0, 0, NULL},
      {1, 1, 0, NULL},
      {65536, 65536, 0, NULL},
      {65537, 0, TERN_EINVAL, "max_compressors = 65537 is outside"},
      {0, UINT32_MAX, TERN_EINVAL, "max_compressors_per_conn"},
  };
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    settings_v3 *o = at_page_end(sizeof(settings_v3));
    tern_server *srv = NULL;
    int rc;
    old_settings((settings_v1 *)(void *)o);
    o->max_stream_window = o->max_conn_window = 0;
    o->version = 3;
    o->size = sizeof(*o);
    o->max_compressors = cases[i].all;
    o->max_compressors_per_conn = cases[i].conn;
    rc = tern_server_new((const tern_settings *)(void *)o, &srv);
    T_EQ_INT(rc, cases[i].rc);
    if (rc != 0) {
      T_ASSERT(srv == NULL);
      T_EQ_INT(nlogs, 1);
      T_LOGGED(cases[i].logged);
    } else {
      T_EQ_INT(nlogs, 0);
      T_EQ_INT(srv->s.max_compressors, cases[i].all ? cases[i].all : 64);
      T_EQ_INT(srv->s.max_compressors_per_conn,
               cases[i].conn ? cases[i].conn : 4);
      tern_server_free(srv);
    }
    page_free(o);
  }
}

static void test_settings_refused(void) {
  settings_v6 n;
  settings_v1 o;
  tern_server *srv = NULL;

  /* From a header newer than the library: its new field would be
   * ignored, so it is refused, logged through its own callback. */
  memset(&n, 0, sizeof(n));
  old_settings((settings_v1 *)(void *)&n.v5);
  n.v5.version = 6;
  n.v5.size = sizeof(n);
  n.future = 1;
  T_EQ_INT(tern_server_new((const tern_settings *)(void *)&n, &srv),
           TERN_EINVAL);
  T_ASSERT(srv == NULL);
  T_EQ_INT(nlogs, 1);
  T_LOGGED("version 6 is unknown");

  /* Version 1 but smaller than its layout (a size set by hand): its log
   * callback cannot be trusted to be where version 1 has it, so the line
   * goes to stderr. */
  old_settings(&o);
  o.size = 16;
  T_EQ_INT(tern_server_new((const tern_settings *)(void *)&o, &srv),
           TERN_EINVAL);
  T_ASSERT(srv == NULL);
  T_EQ_INT(nlogs, 0);
}

/* ---- tern_route_options --------------------------------------------- */

static void nop(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 204, NULL, 0, NULL, 0);
}

static void test_route_options_v1(void) {
  settings_v1 s;
  route_options_v1 *o = at_page_end(sizeof(route_options_v1));
  tern_server *srv = NULL;

  old_settings(&s);
  T_EQ_INT(tern_server_new((const tern_settings *)(void *)&s, &srv), 0);
  o->version = 1;
  o->size = sizeof(*o);
  o->flags = TERN_ROUTE_STREAM_BODY;
  o->max_body_size = 999;
  T_EQ_INT(tern_route_with(srv, "GET", "/a", nop, NULL,
                           (const tern_route_options *)(void *)o),
           0);
  T_EQ_INT(srv->nroutes, 1);
  T_EQ_INT(srv->route_ptrs[0]->flags, TERN_ROUTE_STREAM_BODY);
  T_EQ_INT(srv->route_ptrs[0]->max_body, 999);
  T_EQ_INT(nlogs, 0);
  o->size = 8;
  T_EQ_INT(tern_route_with(srv, "GET", "/b", nop, NULL,
                           (const tern_route_options *)(void *)o),
           TERN_EINVAL);
  T_EQ_INT(nlogs, 1);
  T_LOGGED("route GET /b: tern_route_options size 8 is smaller");
  tern_server_free(srv);
  page_free(o);
}

/* ---- tern_stats ------------------------------------------------------ */

/* A struct with 32 bytes after it, to see that nothing is written past
 * the caller's version. */
#define PADDED(T)                                                              \
  union {                                                                      \
    T s;                                                                       \
    unsigned char b[sizeof(T) + 32];                                           \
  }

static void test_stats(void) {
  settings_v1 s;
  tern_server *srv = NULL;
  PADDED(stats_v1) v1;
  PADDED(stats_short) sh;
  PADDED(stats_v2) v2;
  PADDED(stats_v3) v3;
  PADDED(stats_v4) v4;
  PADDED(stats_v5) v5;
  PADDED(stats_v6) v6;
  PADDED(stats_v7) v7;
  unsigned char ref[sizeof(sh)];
  size_t i;

  old_settings(&s);
  T_EQ_INT(tern_server_new((const tern_settings *)(void *)&s, &srv), 0);

  /* Version 1: every field written, nothing after it. */
  memset(&v1, 0xAB, sizeof(v1));
  v1.s.version = 1;
  v1.s.size = sizeof(v1.s);
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v1), 0);
  T_EQ_INT(v1.s.version, 1);
  T_EQ_INT(v1.s.size, sizeof(stats_v1));
  T_EQ_INT(v1.s.requests, 0);
  T_EQ_INT(v1.s.active_connections, 0);
  T_ASSERT(v1.s.allocations > 0 && v1.s.allocations < 1000);
  for (i = sizeof(stats_v1); i < sizeof(v1.b); i++)
    T_EQ_INT(v1.b[i], 0xAB);

  /* Fewer fields than version 1: refused, nothing written, logged. */
  memset(&sh, 0xAB, sizeof(sh));
  sh.s.version = 1;
  sh.s.size = sizeof(sh.s);
  memcpy(ref, &sh, sizeof(sh));
  nlogs = 0;
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&sh), TERN_EINVAL);
  T_ASSERT(memcmp(ref, &sh, sizeof(sh)) == 0);
  T_EQ_INT(nlogs, 1);
  T_LOGGED("tern_server_stats: size 24 is smaller than version 1");

  /* Never filled (zeroed): refused. */
  memset(&v1, 0, sizeof(v1));
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v1), TERN_EINVAL);
  T_EQ_INT(v1.s.requests, 0);

  /* Version 2: the QUIC counters too (none without QUIC traffic). */
  memset(&v2, 0xAB, sizeof(v2));
  v2.s.v1.version = 2;
  v2.s.v1.size = sizeof(v2.s);
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v2), 0);
  T_EQ_INT(v2.s.v1.version, 2);
  T_EQ_INT(v2.s.quic_forwarded, 0);
  T_EQ_INT(v2.s.quic_refused, 0);
  for (i = sizeof(stats_v2); i < sizeof(v2.b); i++)
    T_EQ_INT(v2.b[i], 0xAB);

  /* Version 3: the operations counters, all 0 on an idle server. */
  memset(&v3, 0xAB, sizeof(v3));
  v3.s.v2.v1.version = 3;
  v3.s.v2.v1.size = sizeof(v3.s);
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v3), 0);
  T_EQ_INT(v3.s.v2.v1.version, 3);
  for (i = 0; i < sizeof(v3.s.ops) / sizeof(v3.s.ops[0]); i++)
    T_EQ_INT(v3.s.ops[i], 0);
  for (i = sizeof(stats_v3); i < sizeof(v3.b); i++)
    T_EQ_INT(v3.b[i], 0xAB);
  T_EQ_INT(tern_stats_bucket_le(0), 50000);
  T_ASSERT(tern_stats_bucket_le(TERN_STATS_BUCKETS - 1) == UINT64_MAX);
  T_EQ_INT(tern_stats_bucket_le(TERN_STATS_BUCKETS), 0);

  /* Version 4: resizes counted apart from new blocks. */
  memset(&v4, 0xAB, sizeof(v4));
  v4.s.v3.v2.v1.version = 4;
  v4.s.v3.v2.v1.size = sizeof(v4.s);
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v4), 0);
  T_EQ_INT(v4.s.v3.v2.v1.version, 4);
  T_ASSERT(v4.s.reallocations != 0xABABABABABABABABu);
  for (i = sizeof(stats_v4); i < sizeof(v4.b); i++)
    T_EQ_INT(v4.b[i], 0xAB);

  /* Version 5: what the limits per client address refused (none here). */
  memset(&v5, 0xAB, sizeof(v5));
  v5.s.v4.v3.v2.v1.version = 5;
  v5.s.v4.v3.v2.v1.size = sizeof(v5.s);
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v5), 0);
  T_EQ_INT(v5.s.v4.v3.v2.v1.version, 5);
  T_EQ_INT(v5.s.rejected_ip_connections, 0);
  T_EQ_INT(v5.s.rejected_ip_rate, 0);
  for (i = sizeof(stats_v5); i < sizeof(v5.b); i++)
    T_EQ_INT(v5.b[i], 0xAB);

  /* Version 6: the spread over the workers (one worker, nothing handed
   * in; the lag is whole milliseconds). */
  memset(&v6, 0xAB, sizeof(v6));
  v6.s.v5.v4.v3.v2.v1.version = 6;
  v6.s.v5.v4.v3.v2.v1.size = sizeof(v6.s);
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v6), 0);
  T_EQ_INT(v6.s.v5.v4.v3.v2.v1.version, 6);
  T_EQ_INT(v6.s.connections_handed_in, 0);
  T_EQ_INT(v6.s.loop_lag_ns % 1000000u, 0);
  for (i = sizeof(stats_v6); i < sizeof(v6.b); i++)
    T_EQ_INT(v6.b[i], 0xAB);

  /* From a newer header: this library's fields, the version it filled
   * written back, the newer field and what follows untouched. */
  memset(&v7, 0xAB, sizeof(v7));
  v7.s.v6.v5.v4.v3.v2.v1.version = 7;
  v7.s.v6.v5.v4.v3.v2.v1.size = sizeof(v7.s);
  T_EQ_INT(tern_server_stats(srv, (tern_stats *)(void *)&v7), 0);
  T_EQ_INT(v7.s.v6.v5.v4.v3.v2.v1.version, 6);
  T_EQ_INT(v7.s.v6.v5.v4.v3.v2.v1.size, sizeof(stats_v7));
  T_EQ_INT(v7.s.v6.v5.v4.v3.v2.v1.frees, v1.s.frees);
  T_EQ_INT(v7.s.v6.v5.v4.v3.v2.quic_resets, 0);
  for (i = sizeof(stats_v6); i < sizeof(v7.b); i++)
    T_EQ_INT(v7.b[i], 0xAB);
  tern_server_free(srv);
}

/* ---- tern_ws_options version 1, over a real socket -------------------- */

static ws_options_v1 *ws_opts;
static _Atomic int accept_rc = 1;
static char big[300];

static void ws_open(tern_ws *ws, void *user) {
  (void)user;
  tern_ws_send(ws, TERN_WS_TEXT, big, sizeof(big));
}

static void ws_route(tern_request *r, void *user) {
  (void)user;
  atomic_store(
      &accept_rc,
      tern_ws_accept(r, (const tern_ws_options *)(void *)ws_opts, NULL, NULL));
}

static void *run_thread(void *arg) {
  tern_run(arg);
  return NULL;
}

static int read_some(int fd, char *buf, size_t cap, size_t *len,
                     const char *until, size_t need_after) {
  ssize_t n;
  while (*len < cap) {
    char *e;
    buf[*len] = '\0';
    e = strstr(buf, until);
    if (e != NULL && (size_t)(buf + *len - (e + strlen(until))) >= need_after)
      return (int)(e + strlen(until) - buf);
    n = read(fd, buf + *len, cap - *len - 1);
    if (n <= 0)
      return -1;
    *len += (size_t)n;
  }
  return -1;
}

static void test_ws_options_v1(void) {
  static const char hs[] =
      "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: other, chat\r\n"
      "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
  settings_v1 s;
  tern_server *srv = NULL;
  struct sockaddr_in sa;
  struct timeval tv = {5, 0};
  pthread_t th;
  char buf[2048];
  size_t len = 0;
  int port, fd, head;

  memset(big, 'a', sizeof(big));
  ws_opts = at_page_end(sizeof(ws_options_v1));
  {
    tern_ws_options cur;
    tern_ws_options_init(&cur);
    memcpy(ws_opts, &cur, sizeof(*ws_opts));
  }
  ws_opts->version = 1;
  ws_opts->size = sizeof(*ws_opts);
  ws_opts->on_open = ws_open;
  ws_opts->subprotocol = "chat";
  ws_opts->subprotocol_len = 4;

  old_settings(&s);
  T_EQ_INT(tern_server_new((const tern_settings *)(void *)&s, &srv), 0);
  T_EQ_INT(tern_route(srv, "GET", "/ws", ws_route, NULL), 0);
  T_EQ_INT(tern_listen(srv, "127.0.0.1", 0, &port), 0);
  T_EQ_INT(pthread_create(&th, NULL, run_thread, srv), 0);

  fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  T_EQ_INT(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  T_EQ_INT(write(fd, hs, sizeof(hs) - 1), (long)(sizeof(hs) - 1));
  head = read_some(fd, buf, sizeof(buf), &len, "\r\n\r\n", 2);
  close(fd);
  tern_stop(srv, 1000);
  pthread_join(th, NULL);
  tern_server_free(srv);
  page_free(ws_opts);

  T_EQ_INT(accept_rc, 0);
  T_ASSERT(head > 0);
  T_ASSERT(strncmp(buf, "HTTP/1.1 101", 12) == 0);
  /* The caller's subprotocol, the last field of version 1. */
  T_ASSERT(strstr(buf, "Sec-WebSocket-Protocol: chat\r\n") != NULL);
  T_ASSERT(strstr(buf, "permessage-deflate") != NULL);
  /* deflate_level, which version 1 lacks, is the default 1: 300 equal
   * bytes compress to a short frame (RSV1 set), where level 0 would
   * store them (over 125 bytes). */
  T_EQ_INT((unsigned char)buf[head], 0xC1);
  T_ASSERT(((unsigned char)buf[head + 1] & 0x7F) < 32);
}

/* tern_quic_options as version 1 of the header had it (no
 * previous_secret). */
typedef struct {
  int version;
  uint32_t size;
  int retry;
  int early_data;
  uint32_t max_streams;
  const void *secret;
  size_t secret_len;
} quic_options_v1;
_Static_assert(offsetof(quic_options_v1, secret_len) ==
                   offsetof(tern_quic_options, secret_len),
               "version 2 only appends");

/* A version 1 caller's struct ends at a page end: reading version 2's
 * previous_secret from it would fault. Version 2 with version 1's size
 * is refused, as is a version this library does not know. */
static void test_quic_options_v1(void) {
  static const uint8_t secret[16] = {1, 2, 3};
  quic_options_v1 *o = at_page_end(sizeof(*o));
  tern_server *srv = NULL;
  tern_tls *tls = NULL;
  int port = 0, rc;

  T_EQ_INT(tern_server_new(NULL, &srv), 0);
  T_EQ_INT(tern_tls_new(srv, &tls), 0);
  T_EQ_INT(tern_tls_add_cert_mem(tls, cert_pem, sizeof(cert_pem) - 1, key_pem,
                                 sizeof(key_pem) - 1),
           0);
  T_EQ_INT(tern_tls_commit(tls), 0);
  memset(o, 0, sizeof(*o));
  o->version = 1;
  o->size = sizeof(*o);
  o->max_streams = 10;
  o->secret = secret;
  o->secret_len = sizeof(secret);
  rc = test_listen_quic(srv, tls, (const tern_quic_options *)(void *)o, &port);
  if (rc == TERN_ENOTSUP) { /* no HTTP/3 or no GnuTLS in this build */
    page_free(o);
    tern_server_free(srv);
    return;
  }
  T_EQ_INT(rc, 0);
  T_ASSERT(port > 0);
  o->version = 2; /* with version 1's size */
  T_EQ_INT(
      test_listen_quic(srv, tls, (const tern_quic_options *)(void *)o, NULL),
      TERN_EINVAL);
  o->version = 3;
  T_EQ_INT(
      test_listen_quic(srv, tls, (const tern_quic_options *)(void *)o, NULL),
      TERN_EINVAL);
  page_free(o);
  tern_server_free(srv);
}

/* 0.1's listener calls, still exported for programs built against 0.1
 * (lib/core/abi_legacy.c), as that header declared them. */
int tern_listen_ex(tern_server *srv, const char *host, int port,
                   const tern_listen_options *opts, int *bound_port);
int tern_listen_unix(tern_server *srv, const char *path,
                     const tern_listen_options *opts);
int tern_listen_fd(tern_server *srv, int fd, const tern_listen_options *opts,
                   int *bound_port);

static void test_listen_0_1_calls(void) {
  struct {
    int version;
    uint32_t size;
    tern_tls *tls;
    int proxy_protocol;
    const char *proxy_trusted;
  } v1 = {1, sizeof(v1), NULL, 1, NULL}; /* 0.1's options: version 1 */
  tern_server *srv = NULL;
  int port = 0;
  char name[64];

  T_EQ_INT(tern_server_new(NULL, &srv), 0);
  T_EQ_INT(tern_listen_ex(srv, "127.0.0.1", 0, NULL, &port), 0);
  T_ASSERT(port > 0);
  port = 0;
  T_EQ_INT(tern_listen_ex(srv, "127.0.0.1", 0,
                          (const tern_listen_options *)(void *)&v1, &port),
           0);
  T_ASSERT(port > 0);
  snprintf(name, sizeof(name), "@tern-abi-%d", (int)getpid());
  T_EQ_INT(tern_listen_unix(srv, name, NULL), 0);
  T_EQ_INT(tern_listen_fd(srv, -1, NULL, NULL), TERN_EINVAL);
  v1.size = 8; /* smaller than version 1: refused */
  T_EQ_INT(tern_listen_ex(srv, "127.0.0.1", 0,
                          (const tern_listen_options *)(void *)&v1, NULL),
           TERN_EINVAL);
  tern_server_free(srv);
}

/* tern_listen_options version 3: http2_only is 0 or 1, on a plain
 * listener only; a version 2 caller's struct (no http2_only) still
 * listens, read no further than its end. */
static void test_listen_options_v3(void) {
  typedef struct {
    int version;
    uint32_t size;
    tern_tls *tls;
    int proxy_protocol;
    const char *proxy_trusted;
    const char *host;
    int port;
    const char *path;
    int fd;
    int quic;
    const tern_quic_options *quic_options;
  } listen_options_v2;
  listen_options_v2 *v2 = at_page_end(sizeof(*v2));
  tern_listen_options o;
  tern_server *srv = NULL;
  tern_tls *tls = NULL;
  int port = 0, rc;

  T_EQ_INT(tern_server_new(NULL, &srv), 0);
  tern_listen_options_init(&o);
  T_EQ_INT(o.http2_only, 0);
  o.host = "127.0.0.1";
  o.http2_only = 2;
  T_EQ_INT(tern_listen_with(srv, &o, NULL), TERN_EINVAL);
  o.http2_only = 1;
  rc = tern_listen_with(srv, &o, &port);
  if (rc == TERN_ENOTSUP) { /* a build without HTTP/2 */
    page_free(v2);
    tern_server_free(srv);
    return;
  }
  T_EQ_INT(rc, 0);
  T_ASSERT(port > 0);
  T_EQ_INT(tern_tls_new(srv, &tls), 0);
  T_EQ_INT(tern_tls_add_cert_mem(tls, cert_pem, sizeof(cert_pem) - 1, key_pem,
                                 sizeof(key_pem) - 1),
           0);
  T_EQ_INT(tern_tls_commit(tls), 0);
  o.tls = tls;
  T_EQ_INT(tern_listen_with(srv, &o, NULL), TERN_EINVAL);
  memset(v2, 0, sizeof(*v2));
  v2->version = 2;
  v2->size = sizeof(*v2);
  v2->host = "127.0.0.1";
  v2->fd = -1;
  port = 0;
  T_EQ_INT(
      tern_listen_with(srv, (const tern_listen_options *)(void *)v2, &port), 0);
  T_ASSERT(port > 0);
  v2->version = 3; /* with version 2's size */
  T_EQ_INT(tern_listen_with(srv, (const tern_listen_options *)(void *)v2, NULL),
           TERN_EINVAL);
  page_free(v2);
  tern_server_free(srv);
}

int main(void) {
  T_RUN(test_read_older_versions);
  T_RUN(test_write_older_versions);
  T_RUN(test_settings_v1);
  T_RUN(test_settings_v2);
  T_RUN(test_settings_v3);
  T_RUN(test_settings_refused);
  T_RUN(test_route_options_v1);
  T_RUN(test_stats);
  T_RUN(test_ws_options_v1);
  T_RUN(test_quic_options_v1);
  T_RUN(test_listen_0_1_calls);
  T_RUN(test_listen_options_v3);
  return T_DONE();
}
