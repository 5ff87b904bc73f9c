/* Internal declarations shared by tern's core and its protocol adapters.
 * Nothing here is installed; names are tern__ (cross-file) by convention.
 */
#ifndef TERN_INTERNAL_H
#define TERN_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "tern.h"
#include "core/router.h"

#if defined(__SANITIZE_ADDRESS__)
#define TERN__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TERN__ASAN 1
#endif
#endif

#define TERN__CONTAINER_OF(p, type, field)                                     \
  ((type *)(void *)((char *)(p)-offsetof(type, field)))

typedef struct tern__worker tern__worker;
typedef struct tern__conn tern__conn;
typedef struct tern__proto tern__proto;
typedef struct tern__req_ops tern__req_ops;
typedef struct tern__filter tern__filter;

/* ---- Intrusive doubly linked list -------------------------------- */

typedef struct tern__list {
  struct tern__list *prev, *next;
} tern__list;

static inline void tern__list_init(tern__list *l) {
  l->prev = l->next = l;
}
static inline int tern__list_empty(const tern__list *l) {
  return l->next == l;
}
static inline int tern__list_linked(const tern__list *n) {
  return n->next != NULL && n->next != n;
}
static inline void tern__list_append(tern__list *l, tern__list *n) {
  n->prev = l->prev;
  n->next = l;
  l->prev->next = n;
  l->prev = n;
}
static inline void tern__list_remove(tern__list *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->prev = n->next = n;
}

/* ---- Allocation and statistics ----------------------------------- */

/* Counters a worker writes alone; other threads only read them. Relaxed
 * atomics make those reads defined without costing a locked instruction
 * on the hot path. */
typedef struct {
  _Atomic uint64_t requests, connections, active, bytes_in, bytes_out;
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

/* ---- Versioned public structs (lib/core/server.c) ----------------- */

/* The end of field `f` of struct `t`: where a struct version that ends
 * with `f` ends, its minimum size. */
#define TERN__END(t, f) (offsetof(t, f) + sizeof(((t *)0)->f))

/* Read a struct the caller laid out after an older, the same or a newer
 * header (tern.h's ABI rule). `dst` holds the library's defaults and is
 * `dst_size` bytes; `ends[v - 1]` is where version v ends, for the
 * `nversions` versions this library knows. On success the caller's
 * fields of its version replace the defaults, dst's version and size
 * become the library's, and 0 is returned. Otherwise `dst` is untouched,
 * `why` (`why_len` bytes) says what is wrong, and -1 is returned. Every
 * such struct starts with `int version; uint32_t size;`. */
/* An _init for the caller's struct of `size` bytes (its sizeof): `def`
 * holds the library's defaults, version and size aside; the caller gets
 * the newest version that fits in `size` (its fields, that version and
 * `size`), nothing written past `size`. Smaller than version 1: left as
 * it is. */
void tern__abi_init(void *dst, size_t size, void *def, const size_t *ends,
                    int nversions);
/* tern_quic_options' version ends, shared by server.c's _init and quic.c. */
extern const size_t tern__quic_options_ends[];
int tern__abi_read(void *dst, size_t dst_size, const void *src,
                   const size_t *ends, int nversions, char *why,
                   size_t why_len);
/* Write the library's filled-in struct `src` (its version's head is
 * overwritten) into the caller's `dst`, only up to where the caller's
 * version ends, or all of ours for a newer caller; dst's version becomes
 * the one written, its size stays. Returns 0, or -1 with `why` filled and
 * `dst` untouched for a version below 1 or a size too small for it. */
int tern__abi_write(void *dst, void *src, const size_t *ends, int nversions,
                    char *why, size_t why_len);

/* ---- Text (lib/core/text.c) --------------------------------------- */

/* ASCII case-insensitive equality of n bytes. */
int tern__ieq(const char *a, const char *b, size_t n);
/* a[0..n) equals the lower-case C string `lower`, ignoring case. */
int tern__ieq_lit(const char *a, size_t n, const char *lower);
/* Decimal / lower-case hex digits of v into buf (20 bytes suffice); returns
 * how many. */
size_t tern__fmt_u64(char *buf, uint64_t v);
size_t tern__fmt_hex(char *buf, uint64_t v);
/* Comma-separated lists (RFC 9110 5.6.1), shared by every protocol's
 * header handling. list_next steps to the next non-empty element,
 * trimming OWS (empty elements are skipped, as the RFC requires), and
 * returns 0 at the end; has_token says whether the list holds `tok`,
 * compared ASCII case-insensitively. */
int tern__list_next(const char *v, size_t n, size_t *pos, const char **e,
                    size_t *elen);
int tern__has_token(const char *v, size_t vlen, const char *tok, size_t toklen);

/* ---- Fixed-size object pools (per worker, no locks) -------------- */

/* A pool keeps what is given back, so that connections cycling between
 * busy and idle reuse what others returned instead of freeing and
 * allocating it again. tern__pool_trim, once a second from the worker's
 * tick, frees what sat on the free list the whole time since the trim
 * before (its low-water mark), down to no fewer than max_free: under
 * steady load nothing moves, and within two seconds of a burst a pool is
 * back to its floor. Objects that stayed unused through TERN__POOL_IDLE
 * trims in a row go even below the floor: a quiet server does not keep a
 * busy one's working set (after a burst, with malloc_trim, RSS returns to
 * near its start), while a pool in use keeps what it used within the
 * last seconds. */
#define TERN__POOL_IDLE 2
typedef struct {
  size_t size; /* object size */
  void *free;  /* singly linked through the first word */
  size_t nfree;
  size_t max_free; /* the floor; 0 under AddressSanitizer: no free list */
  size_t low;      /* fewest free since the last trim */
  unsigned idle;   /* trims in a row that found objects unused */
} tern__pool;

void tern__pool_init(tern__pool *p, size_t size, size_t max_free);
void *tern__pool_get(tern__worker *w, tern__pool *p);
void tern__pool_put(tern__worker *w, tern__pool *p, void *obj);
void tern__pool_trim(tern__worker *w, tern__pool *p);
void tern__pool_drain(tern__worker *w, tern__pool *p);

/* Small blocks of any size, for objects that come and go with requests
 * (HTTP/2 streams, nghttp2's own per-stream memory): blocks up to
 * TERN__SMALL_MAX bytes come from per-worker pools of size classes, so
 * a steady stream of requests reuses them instead of calling the
 * allocator; larger ones go to it directly. Owning worker only; realloc
 * and free take any block these returned. */
#define TERN__SMALL_CLASSES 8 /* 64 B to 8 KiB, header included */
#define TERN__SMALL_MAX ((size_t)8192 - 16)
/* What each class keeps free after a burst: up to 1 MiB of blocks, and
 * never more than 8192 of them, so at most about 7.5 MiB a worker. A
 * class must hold what a busy connection's peak needs: 128 HTTP/3
 * requests in flight with 16-field heads keep some 2,000 field buffers
 * of nghttp3's alive at once, and ngtcp2's sorted lists take 4 KiB+
 * nodes as its sent packets come and go. */
#define TERN__SMALL_KEEP_BYTES ((size_t)1 << 20)
#define TERN__SMALL_KEEP_MAX 8192
void *tern__small_malloc(tern__worker *w, size_t n);
void *tern__small_realloc(tern__worker *w, void *p, size_t n);
void tern__small_free(tern__worker *w, void *p);
/* The same four calls in the shape nghttp2's, ngtcp2's and nghttp3's
 * memory structs take (the user pointer is the worker), so that each
 * library's per-connection memory comes from its worker's pools. */
void *tern__small_mem_malloc(size_t n, void *w);
void tern__small_mem_free(void *p, void *w);
void *tern__small_mem_calloc(size_t n, size_t size, void *w);
void *tern__small_mem_realloc(void *p, size_t n, void *w);

/* ---- Read buffers: refcounted so that request views stay valid ---- */

typedef struct {
  uint32_t refs;
  uint32_t cap;
  char data[];
} tern__rbuf;

tern__rbuf *tern__rbuf_get(tern__worker *w);
void tern__rbuf_ref(tern__rbuf *b);
void tern__rbuf_unref(tern__worker *w, tern__rbuf *b);

/* ---- Output queue ------------------------------------------------- */

/* A block that copied output bytes are appended to. */
typedef struct tern__wblk {
  struct tern__wblk *next;
  uint32_t refs; /* segments pointing into it */
  uint32_t used;
  char data[];
} tern__wblk;

enum {
  TERN__SEG_COPY = 0, /* bytes in a wblk */
  TERN__SEG_REF = 1,  /* caller's bytes; release/done when written */
  TERN__SEG_END = 2,  /* zero-length marker: the response is written */
  TERN__SEG_MARK = 3, /* zero-length marker: run `done` when written */
};

typedef struct {
  const char *base;
  size_t len;
  int kind;
  tern__wblk *blk;
  tern_request *req;       /* for done callbacks and END */
  tern_release_fn release; /* REF: release(base, ruser) */
  tern_write_fn done;      /* done(req, status, duser) */
  void *ruser, *duser;
} tern__seg;

typedef struct {
  tern__seg *segs;
  size_t head, count, cap; /* segs[head .. head+count) are pending */
  size_t head_off;         /* bytes of segs[head] already written */
  size_t bytes;            /* pending bytes */
  uint64_t consumed;       /* bytes written (consumed) since init */
  tern__wblk *tail;        /* block being appended to */
} tern__outq;

void tern__outq_init(tern__outq *q);
/* Copy bytes; they join the previous segment when contiguous. */
int tern__outq_copy(tern__worker *w, tern__outq *q, const void *p, size_t len);
/* Room to format into: on success *p points at `*room` >= `min` writable
 * bytes at the end of the queue; tern__outq_commit then appends the first
 * `n` of them. Returns TERN_ETOOBIG when `min` exceeds a block. */
int tern__outq_reserve(tern__worker *w, tern__outq *q, size_t min, char **p,
                       size_t *room);
int tern__outq_commit(tern__worker *w, tern__outq *q, size_t n);
int tern__outq_ref(tern__worker *w, tern__outq *q, const void *p, size_t len,
                   tern_release_fn release, void *ruser);
int tern__outq_mark(tern__worker *w, tern__outq *q, int kind, tern_request *req,
                    tern_write_fn done, void *duser);
/* Move everything from `src` to the end of `dst`. */
int tern__outq_splice(tern__worker *w, tern__outq *dst, tern__outq *src);
/* Move the first `n` bytes of `src`, with the zero-length segments right
 * behind them (markers run when dst writes them), to the end of `dst`.
 * Bytes are not copied: blocks and references change queues, and a
 * reference cut in two releases once both pieces are written. Moved
 * references with a release callback hold a reference to `hold` (if not
 * NULL) until then, so the request outlives its releases as on HTTP/1.1. */
int tern__outq_move(tern__worker *w, tern__outq *dst, tern__outq *src, size_t n,
                    tern_request *hold);
/* Fill up to n iovecs from the pending segments; returns how many. */
size_t tern__outq_iov(const tern__outq *q, uv_buf_t *iov, size_t n);
/* The same, for the pending bytes past the first `skip` of them: a
 * transport that hands bytes out before they count as written (QUIC keeps
 * them until the peer acknowledges them) fills vectors from where it left
 * off. Zero-length segments are passed over; the vectors point into the
 * queue's own segments, valid until tern__outq_consume covers them. */
size_t tern__outq_iov_from(const tern__outq *q, size_t skip, uv_buf_t *iov,
                           size_t n);
/* `n` bytes were written: finish segments (status 0). */
void tern__outq_consume(tern__worker *w, tern__outq *q, size_t n);
/* Take back what follows the first `keep` pending bytes, for output that
 * is replaced before any of it was written: those segments move, their
 * callbacks not yet run, into a new array (*cut, *ncut; NULL and 0 when
 * there are none) for tern__outq_fail_cut. Zero-length markers right at
 * the cut stay, as they end what precedes it. The cut may fall inside a
 * copied segment, never inside a referenced one (TERN_EINVAL). Returns
 * TERN_ENOMEM, changing nothing, when the array cannot be had. */
int tern__outq_cut(tern__worker *w, tern__outq *q, size_t keep, tern__seg **cut,
                   size_t *ncut);
/* Finish segments cut from `q`, telling their owners `status`, and free
 * the array. */
void tern__outq_fail_cut(tern__worker *w, tern__outq *q, tern__seg *cut,
                         size_t n, int status);
/* Drop all pending segments, telling their owners `status`. */
void tern__outq_fail(tern__worker *w, tern__outq *q, int status);
void tern__outq_free(tern__worker *w, tern__outq *q);

/* ---- Requests ----------------------------------------------------- */

typedef struct tern__resp_filter tern__resp_filter;

typedef struct {
  tern_handler handler;
  void *user;
  unsigned flags;
  uint64_t max_body;
  /* A response filter the route's options asked for (compression), with
   * its configuration; NULL: none. */
  const tern__resp_filter *filter;
  void *filter_conf;
} tern__route;

enum {
  TERN__RQ_HANDLED = 1u << 0,     /* handler called */
  TERN__RQ_STARTED = 1u << 1,     /* response head produced */
  TERN__RQ_ENDED = 1u << 2,       /* user finished the response */
  TERN__RQ_HEAD = 1u << 3,        /* HEAD request: no response body */
  TERN__RQ_CHUNKED = 1u << 4,     /* response uses chunked encoding */
  TERN__RQ_CLOSE = 1u << 5,       /* close the connection after it */
  TERN__RQ_BODY_DONE = 1u << 6,   /* request body fully received */
  TERN__RQ_READING = 1u << 7,     /* tern_request_read called */
  TERN__RQ_PAUSED = 1u << 8,      /* body delivery paused */
  TERN__RQ_CONTINUE = 1u << 9,    /* client waits for 100 Continue */
  TERN__RQ_STREAM = 1u << 10,     /* streaming body route */
  TERN__RQ_WRITTEN = 1u << 11,    /* END marker reached the socket */
  TERN__RQ_ABORT = 1u << 12,      /* cut short: never send a clean end */
  TERN__RQ_TUNNEL = 1u << 13,     /* raw bytes both ways after the answer */
  TERN__RQ_UPGRADE = 1u << 14,    /* HTTP/1.1 Upgrade: parse nothing after it
                                     until it is answered */
  TERN__RQ_WS_CONNECT = 1u << 15, /* HTTP/2 extended CONNECT, websocket */
  TERN__RQ_CUT = 1u << 16,        /* the stop deadline took the user's
                                     reference (tern__request_cut) */
  TERN__RQ_EARLY = 1u << 17,      /* the head came in 0-RTT (TLS early data):
                                     the client may have sent it before, so
                                     it is replayable (HTTP/3) */
  TERN__RQ_SELF = 1u << 18,       /* tern answered it (respond_status) */
  TERN__RQ_LOGGED = 1u << 19,     /* counted and logged (access.c) */
  TERN__RQ_PEER_CLOSE = 1u << 20, /* the client said it sends no more
                                     (HTTP/1.1 Connection: close, or 1.0
                                     without keep-alive) */
};

/* The user's side of a request, in tern_request.ustate: what the response
 * calls have done so far, checked and changed atomically at call time on
 * whichever thread calls, so that a call in the wrong order is refused
 * there (TERN_ESTATE) instead of being found, or missed, on the worker.
 * CUT and GAVE_UP hand a request cut by the stop deadline over to whoever
 * comes second (see tern__request_cut). */
enum {
  TERN__U_STARTED = 1u << 0, /* tern_response_start or tern_respond called */
  TERN__U_DONE = 1u << 1,    /* a finishing call was accepted */
  TERN__U_CUT = 1u << 2,     /* the stop deadline cut the request: the
                                worker has let go of it */
  TERN__U_GAVE_UP = 1u << 3, /* a finishing call found the inbox closed */
};

struct tern_request {
  tern__conn *conn;
  const tern__req_ops *ops; /* its adapter's request side */
  tern__worker *w;
  tern_request *next; /* the connection's in-flight queue */
  const tern__route *route;
  _Atomic int gone;         /* the client went away */
  _Atomic unsigned ustate;  /* TERN__U_* */
  int refs;                 /* user (until end) + connection (until written) */
  tern__list held_link;     /* the worker's `held` list, while the user has
                               it (handed to a handler, not yet finished) */
  tern_request *pool_next;  /* the blocking pool's queue (srv->bp_lock) */
  tern_request *abort_next; /* the worker's aborts list (inbox_lock) */
  int pool_queued;          /* in that queue, handler not started yet */
  int late_done;            /* cut, finished before the worker cleaned up
                               (w->inbox_lock) */
  unsigned flags;
  int protocol;

  const char *method, *target, *path, *query, *authority;
  size_t method_len, target_len, path_len, query_len, authority_len;
  tern_header *headers;
  size_t nheaders, headers_cap;
  tern_header *trailers;
  size_t ntrailers;
  tern__rbuf *rbuf; /* holds the head (and maybe the body) */

  /* Body: a view into rbuf, or collected into `body_buf`. */
  const char *body;
  size_t body_len;
  char *body_buf;
  size_t body_cap;
  uint64_t body_left; /* Content-Length bytes still to arrive */
  int body_kind;      /* TERN__H1_BODY_* */
  tern_body_fn body_fn;
  void *body_user;
  tern_gone_fn gone_fn; /* tern_request_on_gone */
  void *gone_user;

  /* Response. */
  int64_t resp_left; /* declared length still to write; -1 unknown */
  tern__outq out;    /* pending output while not at the queue head */
  void *data;        /* tern_request_set_data */
  void *proto_data;  /* adapter state (chunked decoder, h2 stream) */
  /* A response filter at work on this response (r->route->filter): its
   * state, and the adapter's ops its own r->ops wrap meanwhile. */
  void *filter_state;
  const tern__req_ops *inner;

  /* Operations (lib/handler/access.c): the status sent, body bytes both
   * ways, and monotonic times (ns; 0: not reached). t_handler and
   * t_first are taken only while an access hook is installed. */
  int status;
  int sidx; /* the protocol index its open-stream count went to */
  uint64_t bytes_in, bytes_out;
  uint64_t t_head, t_handler, t_first;

  /* Fields below are not zeroed for each request: the router fills the
   * match, the adapter its state. That saves clearing most of a KiB per
   * request. */
  tern__route_match match;
  char proto_buf[64];
};

tern_request *tern__request_new(tern__conn *c);
void tern__request_unref(tern_request *r);

/* ---- Operations: metrics and the access log (lib/handler/access.c) ---- */

/* The stats index of a protocol (TERN_PROTO_*) or of an adapter's
 * name (ALPN id). */
static inline int tern__proto_index(int protocol) {
  return protocol == TERN_PROTO_HTTP2   ? TERN_STATS_H2
         : protocol == TERN_PROTO_HTTP3 ? TERN_STATS_H3
                                        : TERN_STATS_H1;
}
int tern__proto_name_index(const char *name);
/* The request is finished (its last reference went, or the stop deadline
 * cut it): count it, and log it once. Owning worker. */
void tern__request_finished(tern_request *r);
/* tern__respond_status answers `status` itself: flag and count it. */
void tern__count_self(tern_request *r, int status);
/* An answer without a request (HTTP/1.1's 408 for a partial head): count
 * it and log it as such. */
void tern__access_no_request(tern__conn *c, int status);
/* The response head goes out now with `status` (defined at the end). */
static inline void tern__request_started(tern_request *r, int status);
/* A TLS handshake ended: 0 full, 1 resumed, -1 failed. */
void tern__tls_handshake_done(tern__worker *w, int how);
/* The user's part ended (a finishing call, or tern_ws_accept): the
 * request leaves the worker's `held` list. */
static inline void tern__request_unhold(tern_request *r) {
  if (tern__list_linked(&r->held_link))
    tern__list_remove(&r->held_link);
}
/* On the worker, for a handler that holds `r` and has not started its
 * response: answer `status` (a small text body) through the adapter in
 * its stead. From then on the client is gone for the user, whose calls
 * return TERN_ECLOSED (the finishing one still finishes). Returns 0 once
 * answered, else the adapter's error, or TERN_ESTATE when the response
 * started already or the client or connection is gone. */
int tern__request_answer_held(tern_request *r, int status);
/* Stop deadline, on the worker: answer 503 to a held request that has not
 * started its response (tern__request_answer_held). */
void tern__request_cut_answer(tern_request *r);
/* Stop deadline, on the worker, after the request's connection closed:
 * let go of a held request. Its views stay valid for its holder until the
 * finishing call, which returns TERN_ECLOSED and frees what is left (or
 * leaves that to the worker's cleanup while the worker still exists). */
void tern__request_cut(tern_request *r);
/* The finishing call on a cut request (any thread). */
void tern__request_free_cut(tern_request *r);
/* A finishing call on a cut request whose block the worker may still
 * hold: whichever side comes second frees it. */
void tern__request_give_up(tern_request *r);
/* tern_request_pause/resume from another thread: posted to the worker
 * (lib/core/response.c). */
int tern__request_post_flow(tern_request *r, int paused);
/* Worker cleanup, after its loop: free the cut requests already finished;
 * later finishing calls free theirs themselves. */
void tern__request_cut_cleanup(tern__worker *w);
/* Shut the blocking pool: idle threads end now, busy ones after their
 * handler returns. */
void tern__pool_threads_close(tern_server *srv);
/* Drop a reference on the server; the last one frees what
 * tern_server_free left for the threads still using it. */
void tern__server_unref(tern_server *srv);
/* Pseudo-headers into fields, for adapters whose requests arrive as a
 * list of fields (HTTP/2, HTTP/3; their field names are lower case, as
 * both protocols require). Without :authority, the Host field gives
 * r->authority. Cookie crumbs (RFC 9113 8.2.3, RFC 9114 4.2.1) are
 * joined with "; " into one cookie field, in the place of the first: the
 * adapter passes how many cookie fields it counted (`ncookie`; below 2
 * nothing is joined). The joined value comes from tern__small_malloc of
 * the request's worker and is returned in *joined, which the adapter
 * frees with tern__small_free when the request is released (NULL when
 * nothing was joined). Owning worker. Returns 0, or TERN_ENOMEM with the
 * fields unchanged (the adapter answers 503). */
int tern__request_fields(tern_request *r, size_t ncookie, char **joined);
/* Append to a collected body within the route's limit: 0, 413 or 503. */
int tern__request_collect(tern_request *r, const void *p, size_t n);
/* Run the route's handler (on the worker or the blocking pool). */
void tern__request_dispatch(tern_request *r);

/* Is the calling thread the request's worker? */
int tern__on_worker(const tern__worker *w);
/* Finish the user's part of a request whose answer cannot be queued: the
 * connection closes. Returns rc. */

/* Send up to `max` bytes of file `fd` from *off straight from the page
 * cache to the request's socket (sendfile(2)), when its protocol can: an
 * HTTP/1.1 response with a Content-Length on plain TCP, at the head of
 * its pipeline, once everything queued before has been written. On the
 * worker, between start and end. Returns the bytes sent (*off advanced;
 * the connection's write side may then be full), 0 when the file ends at
 * *off, TERN_ESTATE when not now (output still queued or being written,
 * or the socket is full: write the next piece the usual way, whose
 * completion means the socket drained), TERN_ENOTSUP when never for this
 * request (TLS, HTTP/2, HTTP/3, a file sendfile cannot read), or
 * TERN_ECLOSED when the connection failed (it is closing). */
int64_t tern__response_sendfile(tern_request *r, int fd, uint64_t *off,
                                size_t max);
int tern__request_fail(tern_request *r, int rc);
/* The request is aborted (its client went away, its stream was reset, or
 * its connection is closing): mark it gone and, unless its response is
 * finished, run the handler's gone callback once. Owning worker. */
void tern__request_gone(tern_request *r);
/* Answer an error status on behalf of tern (small text body). */
void tern__respond_status(tern_request *r, int status, const char *allow,
                          size_t allow_len);

/* ---- Response filters ---------------------------------------------- *
 *
 * A feature that reshapes a route's responses (compression, in
 * lib/handler/compress.c): the engine asks it at the response's start
 * and for whole answers, and never names it; lib/protocols.c lists the
 * filters of the build. One that works on a response wraps r->ops (the
 * adapter's move to r->inner) until the response ends. */
struct tern__resp_filter {
  const char *name;
  /* A route is added: read what this filter takes from the route's
   * options into *conf (NULL: the route does not ask for it). 0, or
   * TERN_EINVAL (a bad field, logged naming `what`, the route), or
   * TERN_ENOMEM. */
  int (*conf_new)(tern_server *srv, const tern_route_options *o,
                  const char *what, void **conf);
  void (*conf_free)(tern_server *srv, void *conf);
  /* A streamed response starts: in place of the adapter's start. */
  int (*start)(tern_request *r, int status, const tern_header *h, size_t n,
               int64_t content_length);
  /* A whole answer (tern_respond*, tern's own): in place of
   * tern__respond_whole, with its arguments and *took. */
  int (*respond)(tern_request *r, int status, const tern_header *h, size_t n,
                 const void *body, size_t len, int copy,
                 tern_release_fn release, void *ruser, int *took);
  /* The request's last reference goes (r->conn still valid): drop its
   * state and give r->ops back to the adapter. */
  void (*release)(tern_request *r);
};
/* The filters of this build (NULL-ended; lib/protocols.c). */
extern const tern__resp_filter *const tern__resp_filters[];

/* Start, write and end a whole answer through the adapter
 * (lib/core/response.c); *took (if not NULL) is set once the adapter
 * took `release` on, to be called when the bytes are written or dropped,
 * even when a later step fails. Returns 0 or the adapter's error. */
int tern__respond_whole(tern_request *r, int status, const tern_header *h,
                        size_t n, const void *body, size_t len, int copy,
                        tern_release_fn release, void *ruser, int *took);

/* ---- The inbound window policy (lib/core/window.c) ------------------ */

/* A receive window that starts small and grows while the handler keeps
 * up: each time a whole window has been consumed with nothing held back,
 * it doubles, up to `max`. A client that uploads fast is then not
 * throttled by round trips, and one whose handler is slow (or paused)
 * never has more than a small window in flight. The policy only: the
 * adapter announces a new size its own way (HTTP/2 through nghttp2,
 * HTTP/3 through ngtcp2). */
typedef struct {
  uint32_t win;      /* the window now */
  uint32_t max;      /* the most it grows to (at most 2^31 - 1) */
  uint64_t consumed; /* bytes consumed since it last grew */
} tern__window;

static inline void tern__window_init(tern__window *w, uint32_t initial,
                                     uint32_t max) {
  w->win = initial;
  w->max = max;
  w->consumed = 0;
}
/* `n` bytes left tern's hands; `held_back` when some are still held for
 * a handler that has not taken them (or no more can come). `earned` is
 * the size a stream's window may jump to at once, the largest its
 * connection's earlier streams grew to (0: none; the connection's own
 * window passes 0): without it every upload on a connection would start
 * again from the initial window and spend its first megabytes on round
 * trips. Returns the new window size when the window should grow now,
 * else 0. */
uint32_t tern__window_consumed(tern__window *w, size_t n, int held_back,
                               uint32_t earned);

/* ---- Protocol adapters ------------------------------------------- */

/* A protocol adapter has two tables. The connection side is called by
 * the transport for the connection as a whole; the request side is each
 * request's `r->ops`, called by request.c, response.c and ws.c, which so
 * never look at the connection a request rides on (an HTTP/3 request
 * will have none of its own). */
struct tern__req_ops {
  /* Status and headers, with the content length if known (-1 if not). */
  int (*start)(tern_request *r, int status, const tern_header *h, size_t n,
               int64_t content_length);
  /* A body piece, copied or referenced, with done and release. */
  int (*write)(tern_request *r, const void *p, size_t len, int copy,
               tern_write_fn done, void *duser, tern_release_fn release,
               void *ruser);
  /* Finish, with trailers where the protocol has them. */
  int (*end)(tern_request *r, const tern_header *t, size_t n);
  /* Queue a 1xx interim answer (status 102..199 but 101) before the
   * final one; the caller has checked the state and the fields. */
  int (*interim)(tern_request *r, int status, const tern_header *h, size_t n);
  /* Body flow control changed (read/pause/resume). */
  void (*body_flow)(tern_request *r);
  /* Answer the request with `h` as a tunnel (HTTP/1.1: 101 Switching
   * Protocols with Upgrade; HTTP/2: 200 to an extended CONNECT) and from
   * then on carry raw bytes both ways: the client's through the streaming
   * body callback (never ending on its own), ours through write. End
   * closes the tunnel. NULL: the protocol has none. TERN_EHANDSHAKE: not
   * now (the connection cannot become this request's). */
  int (*tunnel)(tern_request *r, const tern_header *h, size_t n);
  /* Bytes queued for the request's client and not yet written. */
  size_t (*pending)(const tern_request *r);
  /* The response failed and cannot be finished cleanly: end this request
   * so that its client cannot take it for complete. HTTP/1.1 closes the
   * connection (its framing is lost); HTTP/2 resets the stream alone. */
  void (*abort)(tern_request *r);
  /* Send up to `max` bytes of file `fd` from *off straight to the socket
   * (sendfile(2)), advancing *off: see tern__response_sendfile. NULL: the
   * protocol never can (HTTP/2, HTTP/3: framed streams). */
  int64_t (*sendfile)(tern_request *r, int fd, uint64_t *off, size_t max);
  /* The request is being freed, and its connection may have more to do
   * now (an HTTP/1.1 pipeline below its bound reads on): drop adapter
   * state it holds, look again. r->conn is NULL for a request the stop
   * deadline cut, whose connection is gone. */
  void (*release)(tern_request *r);
};

struct tern__proto {
  const char *name; /* also the ALPN id */
  /* Take over connection `c` (its transport and the protocol's own
   * switch: ALPN, the HTTP/2 preface, an h2c upgrade request in `arg`).
   * 0, or an error with nothing changed. NULL for HTTP/1.1, which every
   * byte-stream connection starts with. */
  int (*attach)(tern__conn *c, void *arg);
  /* New input is waiting in the transport: consume what you can. */
  void (*input)(tern__conn *c);
  /* The adapter asked for output (TERN__C_OUTPUT) and the check phase
   * has come: produce what it has, before the transport writes. NULL:
   * the adapter writes as it goes. */
  void (*output)(tern__conn *c);
  /* Graceful stop: finish what is in flight, accept nothing new. */
  void (*stop)(tern__conn *c);
  /* The connection is closing: fail requests in flight. */
  void (*close)(tern__conn *c);
  /* Requests still being answered: a connection marked
   * TERN__C_CLOSE_AFTER closes once there are none and its output is
   * written. */
  size_t (*busy)(const tern__conn *c);
  /* Which fixed-kind timer applies now (TERN__T_*), with TERN__T_DRAINED
   * added when nothing buffered is needed any more, so that a waiting
   * connection gives it back. The core keeps a timer of the same kind
   * running rather than re-arming it; a transport's own need (a TLS
   * handshake under the head timer) comes first. */
  int (*timer)(const tern__conn *c);
  /* A timer of the kind the adapter chose fired. Return 1 when the
   * adapter ends the connection its own way (HTTP/1.1's 408, then a
   * close), 0 to have it closed now. */
  int (*timeout)(tern__conn *c, int kind);
  /* The request side of the requests this adapter creates. */
  const tern__req_ops *ops;
};

/* The adapters the build has, NULL-terminated (lib/protocols.c), and the
 * one of them called `name` (an ALPN id), or NULL. */
extern const tern__proto *const tern__protocols[];
const tern__proto *tern__proto_find(const char *name, size_t len);

/* What an HTTP/1.1 request that asked for h2c hands the HTTP/2 adapter's
 * attach: the request, no longer HTTP/1.1's, becomes stream 1; `settings`
 * is its HTTP2-Settings value. */
typedef struct {
  tern_request *r;
  const char *settings;
  size_t settings_len;
} tern__h2c_upgrade;

/* ---- Byte-stream filters (TLS; later the PROXY protocol) -------------
 *
 * A filter sits between a byte-stream connection's socket and its
 * adapter (in the spirit of curl's connection filters). It sees neither
 * the connection nor the adapter: it is handed its own state and the
 * buffers it works on, and answers by return value. The byte-stream
 * transport (lib/net) drives it; the adapter reads and writes plaintext
 * as on plain TCP. */
enum { TERN__F_READY = 1 }; /* input(): the handshake has just finished */

struct tern__filter {
  const char *name;
  /* Per-connection state (*st) from the listener's configuration. */
  int (*attach)(void **st, tern__worker *w, void *cfg);
  void (*detach)(void *st, tern__worker *w);
  /* Where the socket's next read goes, and how much arrived there;
   * received(st, 0) drops what is buffered (a lingering close). */
  void (*read_buf)(void *st, tern__worker *w, uv_buf_t *buf);
  void (*received)(void *st, size_t n);
  /* Run the handshake, then put plaintext into dst[0 .. room), *got
   * bytes of it. 0, TERN__F_READY (the handshake finished now: the
   * transport picks the adapter by alpn()), TERN_ECLOSED (the end of the
   * peer's input) or another error (the connection must close). */
  int (*input)(void *st, tern__worker *w, char *dst, size_t room, size_t *got);
  /* Is there input for another input() without a socket read? */
  int (*has_input)(void *st);
  /* Turn pending plaintext of `plain` into the wire queue and return it
   * (bounded, so that a client that does not read holds little). */
  tern__outq *(*output)(void *st, tern__worker *w, tern__outq *plain, int *err);
  /* The wire queue the socket writes from, and its size. */
  tern__outq *(*wire)(void *st);
  size_t (*buffered)(const void *st);
  /* Is the handshake still running? */
  int (*handshaking)(const void *st);
  /* Before a graceful close: queue the filter's goodbye (TLS
   * close_notify) once. 1 if something was queued (flush first). */
  int (*shutdown)(void *st);
  /* The protocol the handshake chose (ALPN), or NULL. */
  const char *(*alpn)(const void *st);
  /* The TLS version the handshake agreed (TERN_TLS_*), or 0; NULL for a
   * filter that is not TLS. */
  int (*tls_version)(const void *st);
};

/* ---- Connections: the head every transport's connection embeds ---- */

enum {
  TERN__T_NONE = 0,
  TERN__T_HEAD,   /* waiting for (the rest of) a request head */
  TERN__T_IDLE,   /* keep-alive, nothing pending */
  TERN__T_BODY,   /* waiting for request body bytes */
  TERN__T_WRITE,  /* output pending, no progress (the transport's) */
  TERN__T_LINGER, /* closing: drain the peer's bytes (the transport's) */
  TERN__T_COUNT,
  TERN__T_DRAINED = 0x100, /* with a kind, from an adapter's timer() */
};

/* A timer: a node that embeds in what it times (a connection, an HTTP/2
 * stream) and sits on its worker's list for one fixed kind, whose timeout
 * is w->timeout_ms[kind]; the worker's tick sweeps the lists
 * (lib/core/timer.c). Timers are lazy: `kind` is the kind that applies
 * (TERN__T_NONE: disarmed); the node sits on the list of `list` (or none)
 * at the position `listed` gave it, and `deadline` is when the applying
 * kind expires. Arming the kind whose list holds the node only moves the
 * deadline; disarming only marks it. When it expires the node is stopped,
 * then `fire` runs with the kind, on the worker, outside any adapter
 * call; it may free the node's owner. All of it is the worker's alone. */
typedef struct tern__timer tern__timer;
typedef void (*tern__timer_fn)(tern__timer *t, int kind);
struct tern__timer {
  tern__list link;
  uint64_t deadline, listed;
  int kind, list;
  tern__timer_fn fire;
};

void tern__timer_init(tern__timer *t, tern__timer_fn fire);
/* Arm `t` with `kind` for w->timeout_ms[kind] from now (re-arming moves
 * the deadline), or disarm it with TERN__T_NONE. */
void tern__timer_set(tern__worker *w, tern__timer *t, int kind);
/* Off every list: it will not fire. Before its owner is freed. */
void tern__timer_stop(tern__timer *t);
/* Fire the timers that expired by `now` (the worker's tick). */
void tern__timer_sweep(tern__worker *w, uint64_t now);

/* The head's flags. The low byte is the core's; bits from
 * TERN__C_TRANSPORT up are the transport's own (lib/net/stream.h). */
enum {
  TERN__C_CLOSING = 1u << 0,     /* closing: nothing more happens */
  TERN__C_DIRTY = 1u << 1,       /* on the worker's dirty list */
  TERN__C_CLOSE_AFTER = 1u << 2, /* close once output is written */
  TERN__C_STOPPING = 1u << 3,    /* graceful stop seen */
  TERN__C_REPROCESS = 1u << 4,   /* run the adapter's input again */
  TERN__C_IN_READ = 1u << 5,     /* inside the adapter's input */
  TERN__C_OUTPUT = 1u << 6,      /* run the adapter's output */
  TERN__C_EOF = 1u << 7,         /* the peer finished sending */
  TERN__C_TRANSPORT = 1u << 8,
};

/* A socket address kept small (an idle connection holds two): the family
 * (AF_INET, AF_INET6, or 0 when unknown), the port in host order and the
 * address bytes. */
typedef struct {
  uint16_t family;
  uint16_t port;
  unsigned char addr[16];
} tern__addr;

void tern__addr_set(tern__addr *a, const struct sockaddr *sa);

/* A transport family (lib/net: a byte stream over TCP; later QUIC over
 * UDP): what the core asks of a connection it counts, times, flushes and
 * closes without knowing how its bytes move. */
typedef struct {
  const char *name; /* "tcp" */
  /* Its connections come from the worker's pool `pool` (tern__transports
   * lists them, for the worker to set its pools up). */
  unsigned pool;
  size_t conn_size;
  /* Run the adapter over input waiting below it (TERN__C_REPROCESS). */
  void (*process)(tern__conn *c);
  /* Run the adapter's output (TERN__C_OUTPUT), unless the connection is
   * past it (a lingering close, whose reading the adapter must not stop). */
  void (*output)(tern__conn *c);
  /* Put pending output on the wire (from the check phase). */
  void (*flush)(tern__conn *c);
  /* Start (on) or stop reading. */
  void (*input)(tern__conn *c, int on);
  /* Bytes below the adapter not yet on the wire. */
  size_t (*buffered)(const tern__conn *c);
  /* One of the transport's own timers (WRITE, LINGER) fired. */
  void (*timeout)(tern__conn *c, int kind);
  /* Close now: the core has failed what was in flight. */
  void (*close)(tern__conn *c);
  /* The last reference went: back to the pool. */
  void (*free)(tern__conn *c);
} tern__transport;

enum { TERN__POOL_STREAM = 0, TERN__POOL_QUIC, TERN__POOL_COUNT };

/* The transports the build has, NULL-terminated (lib/protocols.c). */
extern const tern__transport *const tern__transports[];

/* The connection head. The core counts, refcounts, times, flushes and
 * closes connections through it and never reads or writes their bytes. */
struct tern__conn {
  tern__worker *w;
  const tern__transport *tp;
  const tern__proto *proto;
  unsigned flags;
  int refs;          /* the connection itself + each live request */
  tern__timer timer; /* the kind its adapter chooses (timer.c) */
  tern__list dirty_link;
  tern__list all_link;
  int tls_version;      /* TERN_TLS_1_2 / _1_3 once a handshake finished */
  uint32_t compressors; /* its streamed compressors open (compress.c) */
  int counted_proto;    /* its index in the open-connection counts, or -1 */
  /* Stored at accept: any thread holding a request may read them, also
   * after the socket has closed (and its descriptor been reused). */
  tern__addr peer, local;
  /* A PROXY v2 header's TLVs, kept as long as the connection (NULL when
   * it had none): read like peer and local. */
  struct tern__proxy_tlvs *proxy;
};

/* One block: this struct, then the TLV values it points to. */
typedef struct tern__proxy_tlvs {
  int ssl; /* the client spoke TLS to the balancer */
  const char *alpn, *authority, *ssl_version, *ssl_cn;
  size_t alpn_len, authority_len, ssl_version_len, ssl_cn_len;
} tern__proxy_tlvs;

/* A new connection of transport `tp` on worker `w`, taken into the
 * worker's counts (NULL: no memory). The transport fills in the rest
 * and starts it with tern__conn_start. */
tern__conn *tern__conn_new(tern__worker *w, const tern__transport *tp);
/* Give back a connection that never started. */
void tern__conn_discard(tern__conn *c);
/* The connection is ready: count it, start its head timer. */
void tern__conn_start(tern__conn *c);
void tern__conn_mark_dirty(tern__conn *c);
/* The transport is flushing now: a connection marked dirty only to be
 * flushed leaves the dirty list. */
static inline void tern__conn_clean(tern__conn *c) {
  if ((c->flags & (TERN__C_DIRTY | TERN__C_REPROCESS | TERN__C_OUTPUT)) ==
      TERN__C_DIRTY) {
    tern__list_remove(&c->dirty_link);
    c->flags &= ~(unsigned)TERN__C_DIRTY;
  }
}
/* Ask for the adapter's input (REPROCESS) or output to run soon. */
void tern__conn_reprocess(tern__conn *c);
void tern__conn_want_output(tern__conn *c);
static inline void tern__conn_process(tern__conn *c) {
  c->tp->process(c);
}
static inline void tern__conn_flush(tern__conn *c) {
  c->tp->flush(c);
}
static inline size_t tern__conn_buffered(const tern__conn *c) {
  return c->tp->buffered(c);
}
/* Close now: the adapter fails what is in flight, the transport lets go
 * of the socket. */
void tern__conn_close(tern__conn *c);
/* The transport has let go of the closed connection's socket: it no
 * longer counts as active, and drops its own reference. */
void tern__conn_closed(tern__conn *c);
/* The connection speaks `p` from now on (an adapter's attach): its
 * open-connection count moves with it. */
void tern__conn_set_proto(tern__conn *c, const tern__proto *p);
/* Is a connection marked TERN__C_CLOSE_AFTER done (nothing in flight)? */
static inline int tern__conn_done(const tern__conn *c) {
  return (c->flags & TERN__C_CLOSE_AFTER) && c->proto->busy(c) == 0;
}
/* The connection's timer (c->timer) as a node (tern__conn_new), armed
 * with `kind` or disarmed (TERN__T_NONE), or taken off its list
 * (closing: nothing may fire). */
void tern__conn_timer_init(tern__conn *c);
void tern__conn_timer(tern__conn *c, int kind);
/* Arm `kind`, as an adapter's timer() chose it for the connection's
 * state, unless a timer of that kind runs already and must not be
 * re-armed: HEAD runs from the head's first byte (a client trickling a
 * head must not extend it), BODY re-arms only on data. 1 when it was
 * armed. */
static inline int tern__conn_timer_choose(tern__conn *c, int kind) {
  if (kind == c->timer.kind && (kind == TERN__T_HEAD || kind == TERN__T_BODY))
    return 0;
  tern__conn_timer(c, kind);
  return 1;
}
/* The connection's timer fired: the transport's own kinds go to it, the
 * others to the adapter's timeout, or a close. */
void tern__conn_timeout(tern__conn *c, int kind);
void tern__conn_timer_stop(tern__conn *c);
void tern__conn_unref(tern__conn *c);

/* ---- Listeners ----------------------------------------------------- */

/* An address tern accepts on, and the transport that serves it (lib/net:
 * TCP). The transport embeds this first in its own listener. */
typedef struct tern__listener tern__listener;
typedef struct {
  const char *name;
  /* Start accepting on worker `w`. A handle it opens on w's loop counts
   * in w->handles_open and is closed with tern__worker_close_handle. */
  int (*start)(tern__listener *l, tern__worker *w);
  /* Stop accepting on `w` (graceful stop, cleanup); again is harmless. */
  void (*stop)(tern__listener *l, tern__worker *w);
  /* Free the listener once no worker uses it. */
  void (*free)(tern__listener *l, tern_server *srv);
  /* A QUIC listener's UDP port (for Alt-Svc); NULL for the others. */
  int (*quic_port)(const tern__listener *l);
} tern__listener_ops;

struct tern__listener {
  const tern__listener_ops *ops;
};

/* A QUIC listener on `port` exists: the automatic Alt-Svc names it (the
 * first one's; not when the user set the field). */
void tern__server_quic_port(tern_server *srv, int port);

/* Take `l` into the server (idle only); TERN_ENOMEM leaves it the
 * caller's. */
int tern__server_add_listener(tern_server *srv, tern__listener *l);
/* tern_listen_with's parts (lib/protocols.c calls them): the options
 * read and checked (lib/net/tcp.c), then a byte-stream listener
 * (lib/net/tcp.c) or a QUIC one (lib/quic/quic.c). */
int tern__listen_read(tern_server *srv, const tern_listen_options *in,
                      tern_listen_options *o);
int tern__listen_stream(tern_server *srv, const tern_listen_options *o,
                        int *bound_port);
int tern__listen_quic(tern_server *srv, const tern_listen_options *o,
                      int *bound_port);

/* ---- Per-worker services ------------------------------------------ *
 *
 * What a feature needs from each worker's life (h2o's handler, filter
 * and logger contexts, in spirit): state of its own, a word at the
 * graceful stop, the tick, the check phase and the end. The engine calls
 * the services lib/protocols.c lists and names none of them. Each with
 * state has a slot in tern__worker.svc. */
enum {
  TERN__SVC_WS,     /* lib/ws/ws.c: open sockets, deferred closes, scratch */
  TERN__SVC_ACCESS, /* lib/handler/access.c: the access log's buffer */
  TERN__SVC_TLS,    /* lib/tls/tls.c: the record gathering buffer */
  TERN__SVC_COUNT
};
typedef struct tern__service {
  const char *name;
  int slot; /* TERN__SVC_*: its state in w->svc, its bit in check_due */
  /* The worker starts (its loop exists, it runs nothing yet): set up
   * w->svc[slot]. 0, or TERN_ENOMEM (the server does not start). */
  int (*worker_init)(tern__worker *w);
  /* The graceful stop begins (before the listeners stop). */
  void (*stop)(tern__worker *w);
  /* The worker's tick (about once a second). */
  void (*tick)(tern__worker *w, uint64_t now);
  /* The check phase, when the service set its bit in w->check_due. */
  void (*check)(tern__worker *w);
  /* The worker has ended: last calls, then free w->svc[slot]. */
  void (*cleanup)(tern__worker *w);
  /* tern_server_free. */
  void (*server_free)(tern_server *srv);
} tern__service;
/* The services of this build, in the order they are called (NULL-ended;
 * lib/protocols.c). */
extern const tern__service *const tern__services[];
/* Ask for `slot`'s check callback in this loop turn's check phase. */
#define TERN__CHECK_DUE(w, slot) ((w)->check_due |= 1u << (slot))

/* ---- Workers and the server --------------------------------------- */

typedef struct tern__msg tern__msg;

struct tern__worker {
  tern_server *srv;
  unsigned id;
  uv_loop_t *loop;
  uv_loop_t own_loop;
  uv_thread_t thread;
  uv_thread_t thread_id;
  int attached;
  uv_async_t async;
  uv_check_t check;
  uv_timer_t timer;
  uv_timer_t deadline_timer;
  int thread_started;
  int handles_open; /* worker handles not yet closed */
  size_t nconns;    /* connection objects alive (open or referenced) */

  uv_mutex_t inbox_lock; /* lives until the server's last reference */
  int inbox_ready;       /* inbox_lock initialised */
  int inbox_closed;      /* posts are refused (the loop is ending) */
  int inbox_dropping;    /* shutting down: messages are dropped, not applied
                            (the worker's own) */
  tern__msg *inbox_head, *inbox_tail;
  tern_request *aborts; /* finishing calls that had no memory to post */
  tern__list held;      /* requests a handler holds (tern_request.held_link) */
  tern__list cut;       /* requests cut by the deadline and not yet freed
                           (held_link; inbox_lock once the loop is gone) */
  int cleaned;          /* the worker is gone: late frees are the caller's */
  uint32_t cut_answered, cut_total; /* requests cut at the deadline */

  tern__list timers[TERN__T_COUNT];
  uint32_t timeout_ms[TERN__T_COUNT];
  tern__list dirty;
  tern__list conns;
  int stopping;

  char date[40];
  size_t date_len;
  time_t date_sec;
  uint32_t max_conns;     /* max_connections, fitted to the fd limit */
  uint64_t accept_warned; /* loop time of the last accept warning */

  tern__pool rbuf_pool, wblk_pool, req_pool, seg_pool;
  tern__pool conn_pools[TERN__POOL_COUNT]; /* one per transport */
  uint64_t pools_trimmed; /* uv_now of the last tern__pool_trim round */
  tern__pool small[TERN__SMALL_CLASSES];
  void *svc[TERN__SVC_COUNT]; /* each service's state (tern__services) */
  unsigned check_due;         /* services whose check is due (bit: slot) */
  tern__wstats stats;
  /* The monotonic clock read once per loop turn (tern__now), valid until
   * the check phase. */
  uint64_t now_ns;
  int now_valid;
};

struct tern_server {
  tern_settings s;
  tern__router *router;
  tern__route *routes;
  size_t nroutes, routes_cap;
  tern__route **route_ptrs; /* stable pointers handed to the router */
  tern__route default_route;
  int has_default;
  tern_error_fn error_fn; /* tern_server_on_error */
  void *error_user;
  tern_access_fn access_fn; /* tern_server_on_access, or the writer's */
  void *access_user;
  int durations; /* tern_server_time_requests */
  int timing;    /* durations or an access hook: requests are timed */
  struct tern__accesslog *alog; /* the built-in writer, or NULL */
  char allow_all[128];          /* union of route methods, for OPTIONS * */
  size_t allow_all_len;

  tern__listener **listeners;
  size_t nlisteners;
  tern__worker *workers;
  unsigned nworkers;
  _Atomic int state; /* 0 idle, 1 running, 2 stopping, 3 done */
  _Atomic uint32_t stop_deadline_ms;
  _Atomic int stop_wanted; /* tern_stop was called (in any state) */

  _Atomic uint64_t allocs, alloc_bytes, frees, reallocs;
  _Atomic uint32_t compressors; /* streamed compressors open (compress.c) */
  _Atomic uint64_t trims;       /* malloc_trim calls (alloc.c) */
  /* The Alt-Svc line of responses over TLS ("Alt-Svc: VALUE\r\n"; empty:
   * none), and whether the user set it (tern_server_set_alt_svc). */
  char alt_svc[280];
  size_t alt_svc_len;
  int alt_svc_user;
  tern_tls *tls_list;
  /* Frees tls_list (set by lib/tls once a tern_tls exists), so that the
   * core names no TLS code. */
  void (*tls_free)(tern_server *srv);
  /* tern_server_on_workers: run on each worker as its loop starts and as
   * its graceful stop begins. */
  tern_worker_fn worker_start, worker_stop;
  void *worker_user;

  /* tern_server_free drops one reference; each blocking-pool thread and
   * each request cut by the stop deadline holds one, so that the memory
   * they still use outlives tern_run and tern_server_free. */
  _Atomic int refs;
  /* The blocking-route pool (lib/core/request.c): tern's own threads, so
   * that a handler still blocking at the stop deadline does not keep any
   * loop alive. */
  uv_mutex_t bp_lock;
  uv_cond_t bp_cond;
  tern_request *bp_head, *bp_tail;
  unsigned bp_threads, bp_idle, bp_max;
  size_t bp_queued; /* requests in the queue */
  int bp_closing;
};

enum {
  TERN__S_IDLE = 0,
  TERN__S_STARTING,
  TERN__S_RUNNING,
  TERN__S_STOPPING,
  TERN__S_DONE,
};

int tern__worker_init(tern__worker *w, tern_server *srv, unsigned id,
                      uv_loop_t *loop);
void tern__worker_run_thread(void *arg);
/* Run the user's on_start hook (tern_server_on_workers) on the worker. */
void tern__worker_started(tern__worker *w);
/* Close the worker's handles, run its loop dry, free its pools. */
void tern__worker_cleanup(tern__worker *w);
/* Post a cross-thread message to the worker. It always takes ownership:
 * once the worker's loop is ending the post is refused, the message is
 * dropped (m->ops->drop with `refused` set) and TERN_ECLOSED returned. */
int tern__worker_post(tern__worker *w, tern__msg *m);
/* Close a handle of the worker's loop, counted in handles_open. */
void tern__worker_close_handle(tern__worker *w, uv_handle_t *h);
void tern__worker_maybe_done(tern__worker *w);
/* Wake the worker's loop (on the worker), so that a check phase follows
 * even when the call came from a timer of an attached loop, before its
 * poll. */
void tern__worker_wake(tern__worker *w);
void tern__date_update(tern__worker *w);

/* A message to a worker's inbox: a call made on another thread, to be
 * carried out on the worker. The inbox knows no kinds of message: each
 * brings its own operations. This header comes first in the message's one
 * allocation, which also holds the kind's own fields and copied bytes
 * (response calls: lib/core/response.c; WebSocket calls: lib/ws/ws.c). */
typedef struct {
  /* On the worker, in posting order: carry the call out, then free the
   * message (or hand it to whatever now references its bytes). */
  void (*apply)(tern__msg *m);
  /* Let the message go without carrying it out: release what it holds
   * and free it. `refused`: the post itself was refused (on the posting
   * thread), so the call returns TERN_ECLOSED and the caller keeps what
   * it passed. Otherwise the worker's loop is ending (on the worker, or
   * on the thread cleaning it up): the caller was told the call was taken,
   * so whatever it handed over is released as for a client gone. Never
   * touches a connection or the loop. */
  void (*drop)(tern__msg *m, int refused);
} tern__msg_ops;

struct tern__msg {
  tern__msg *next;
  const tern__msg_ops *ops;
};

/* Close the connections of requests on an aborts list (their finishing
 * call found no memory to post itself). */
void tern__request_abort_all(tern_request *r);
/* End a started response on the worker, without the user-side check. */
int tern__response_end(tern_request *r, const tern_header *trailers,
                       size_t ntrailers);

/* The reason phrase for a status code ("Not Found"), "Unknown" for an
 * unregistered one (lib/core/status.c, generated from status.txt). */
const char *tern__reason(int status);

/* ---- The routing decision ---------------------------------------- */

/* The routing decision every adapter makes once a request's head is
 * complete: `asterisk` is OPTIONS with the target "*"; `length` the
 * body's declared length (-1 when unknown or none). Returns 0 with
 * r->route set (and TERN__RQ_STREAM when its body goes to the handler as
 * it arrives: a streaming route or a WebSocket extended CONNECT), or the
 * status tern answers itself: 204 for OPTIONS * and 404 or 405 when no
 * route or default handler takes it, with the Allow list in *allow, or
 * 413 when a collected body is declared larger than the route takes.
 * Inline: it runs once per request on every protocol. */
static inline int tern__request_route(tern_request *r, int asterisk,
                                      int64_t length, const char **allow,
                                      size_t *allow_len) {
  tern_server *srv = r->w->srv;
  const tern__route *rt;

  *allow = NULL;
  *allow_len = 0;
  if (asterisk) {
    *allow = srv->allow_all;
    *allow_len = srv->allow_all_len;
    return 204;
  }
  tern__router_match(srv->router, r->method, r->method_len, r->path,
                     r->path_len, &r->match);
  if (r->match.status == 0) {
    rt = r->match.route;
  } else if (srv->has_default) {
    rt = &srv->default_route;
  } else {
    if (r->match.status == 405) {
      *allow = r->match.allow;
      *allow_len = r->match.allow_len;
    }
    return r->match.status;
  }
  r->route = rt;
  if ((rt->flags & TERN_ROUTE_STREAM_BODY) || (r->flags & TERN__RQ_WS_CONNECT))
    r->flags |= TERN__RQ_STREAM;
  else if (!(r->flags & TERN__RQ_BODY_DONE) && length >= 0 &&
           (uint64_t)length > rt->max_body)
    return 413;
  return 0;
}

/* The monotonic time in ns, read once per loop turn: the stamps of the
 * counters' duration histogram cost a clock read per batch of requests,
 * not per request; they measure from the turn that read a request's head
 * to the turn that wrote its last byte. With an access hook installed
 * every stamp reads the clock, for the entry's finer timings. */
static inline uint64_t tern__now(tern__worker *w) {
  if (w->srv->access_fn != NULL)
    return uv_hrtime();
  if (!w->now_valid) {
    w->now_ns = uv_hrtime();
    w->now_valid = 1;
  }
  return w->now_ns;
}

/* The response head goes out now with `status`. */
static inline void tern__request_started(tern_request *r, int status) {
  r->status = status;
  if (r->w->srv->access_fn != NULL)
    r->t_first = uv_hrtime();
}

#endif
