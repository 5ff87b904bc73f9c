/* Allocation through the embedder's allocator, counted; the worker's
 * counters; logging (lib/core/alloc.c, log.c). */
#ifndef TERN_CORE_ALLOC_H
#define TERN_CORE_ALLOC_H

#include "core/base.h"

/* ---- Allocation and statistics ----------------------------------- */

/* Counters a worker writes alone; other threads only read them. Relaxed
 * atomics make those reads defined without costing a locked instruction
 * on the hot path. */
typedef struct {
  /* Connections taken in and open are the worker's slot's (taken, active:
   * lib/core/balance.c), which the other workers read too. */
  _Atomic uint64_t requests, bytes_in, bytes_out;
  _Atomic uint64_t quic_forwarded, quic_retries, quic_resets, quic_vn,
      quic_refused;
  /* tern_stats version 3 (lib/handler/access.c), by protocol index. */
  _Atomic uint64_t by_class[TERN_STATS_PROTOCOLS][TERN_STATS_CLASSES];
  _Atomic uint64_t aborted[TERN_STATS_PROTOCOLS];
  _Atomic uint64_t req_in[TERN_STATS_PROTOCOLS], req_out[TERN_STATS_PROTOCOLS];
  _Atomic uint64_t buckets[TERN_STATS_PROTOCOLS][TERN_STATS_BUCKETS];
  _Atomic uint64_t dur_sum[TERN_STATS_PROTOCOLS];
  _Atomic uint64_t conns[TERN_STATS_PROTOCOLS], streams[TERN_STATS_PROTOCOLS];
  _Atomic uint64_t tls_full, tls_resumed, tls_failed;
  _Atomic uint64_t ws_open, ws_in, ws_out;
  _Atomic uint64_t rej_limit, rej_timeout, rej_protocol;
  _Atomic uint64_t log_lines, log_dropped;
  /* tern_stats version 6: connections handed in by another worker, and
   * the loop's lag (ns; lib/core/worker.c). */
  _Atomic uint64_t handed_in, loop_lag;
} tern__wstats;

#define TERN__STAT_ADD(field, n)                                               \
  atomic_store_explicit(                                                       \
      &(field), atomic_load_explicit(&(field), memory_order_relaxed) + (n),    \
      memory_order_relaxed)

/* The default allocator's three calls (tern_settings_init). */
void *tern__std_malloc(size_t n, void *u);
void *tern__std_realloc(void *p, size_t n, void *u);
void tern__std_free(void *p, void *u);
/* Worker 0's tick, after the pools were trimmed: hand what malloc keeps
 * free back to the system (alloc.c). */
void tern__allocator_release(tern_server *srv);
void *tern__malloc(tern_server *srv, size_t size);
void *tern__realloc(tern_server *srv, void *p, size_t size);
void tern__free(tern_server *srv, void *p);

/* Format a line and hand it to `fn` (stderr when NULL): tern__log for a
 * server, or with a settings struct's callback before a server exists. */
void tern__vlog(tern_log_fn fn, void *user, int level, const char *fmt,
                va_list ap);
void tern__log(tern_server *srv, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
