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
#include "core/sha1.h"

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
} tern__wstats;

#define TERN__STAT_ADD(field, n)                                               \
  atomic_store_explicit(                                                       \
      &(field), atomic_load_explicit(&(field), memory_order_relaxed) + (n),    \
      memory_order_relaxed)

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

typedef struct {
  size_t size; /* object size */
  void *free;  /* singly linked through the first word */
  size_t nfree;
  size_t max_free; /* 0 under AddressSanitizer: every put is a free */
} tern__pool;

void tern__pool_init(tern__pool *p, size_t size, size_t max_free);
void *tern__pool_get(tern__worker *w, tern__pool *p);
void tern__pool_put(tern__worker *w, tern__pool *p, void *obj);
void tern__pool_drain(tern__worker *w, tern__pool *p);

/* Small blocks of any size, for objects that come and go with requests
 * (HTTP/2 streams, nghttp2's own per-stream memory): blocks up to
 * TERN__SMALL_MAX bytes come from per-worker pools of size classes, so
 * a steady stream of requests reuses them instead of calling the
 * allocator; larger ones go to it directly. Owning worker only; realloc
 * and free take any block these returned. */
#define TERN__SMALL_CLASSES 7 /* 64 B to 4 KiB, header included */
#define TERN__SMALL_MAX ((size_t)4096 - 16)
void *tern__small_malloc(tern__worker *w, size_t n);
void *tern__small_realloc(tern__worker *w, void *p, size_t n);
void tern__small_free(tern__worker *w, void *p);

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

typedef struct {
  tern_handler handler;
  void *user;
  unsigned flags;
  uint64_t max_body;
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

  /* Fields below are not zeroed for each request: the router fills the
   * match, the adapter its state. That saves clearing most of a KiB per
   * request. */
  tern__route_match match;
  char proto_buf[64];
};

tern_request *tern__request_new(tern__conn *c);
void tern__request_unref(tern_request *r);
/* The user's part ended (a finishing call, or tern_ws_accept): the
 * request leaves the worker's `held` list. */
static inline void tern__request_unhold(tern_request *r) {
  if (tern__list_linked(&r->held_link))
    tern__list_remove(&r->held_link);
}
/* Stop deadline, on the worker: answer 503 to a held request that has not
 * started its response (the client is then gone for the user). */
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
int tern__request_fail(tern_request *r, int rc);
/* The request is aborted (its client went away, its stream was reset, or
 * its connection is closing): mark it gone and, unless its response is
 * finished, run the handler's gone callback once. Owning worker. */
void tern__request_gone(tern_request *r);
/* Answer an error status on behalf of tern (small text body). */
void tern__respond_status(tern_request *r, int status, const char *allow,
                          size_t allow_len);

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
 * a handler that has not taken them (or no more can come). Returns the
 * new window size when the window should grow now, else 0. */
uint32_t tern__window_consumed(tern__window *w, size_t n, int held_back);

/* ---- Protocol adapters ------------------------------------------- */

/* A protocol adapter has two tables. The connection side is called by
 * the transport (lib/core/conn.c) for the connection as a whole; the
 * request side is each request's `r->ops`, called by request.c,
 * response.c and ws.c, which so never look at the connection a request
 * rides on (an HTTP/3 request will have none of its own). */
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
  /* The request is being freed: drop adapter state it holds (NULL:
   * none). */
  void (*release)(tern_request *r);
};

struct tern__proto {
  const char *name; /* also the ALPN id */
  /* New bytes are in c->rbuf[c->rpos .. c->rlen). Consume what you can. */
  void (*input)(tern__conn *c);
  /* Graceful stop: finish what is in flight, accept nothing new. */
  void (*stop)(tern__conn *c);
  /* The connection is closing: fail requests in flight. */
  void (*close)(tern__conn *c);
  /* Which fixed-kind timer applies now (TERN__T_*), with TERN__T_DRAINED
   * added when nothing in the read buffer is needed any more, so that a
   * waiting connection gives it back. The transport keeps a timer of the
   * same kind running rather than re-arming it, and runs a TLS handshake
   * under the head timer before asking. */
  int (*timer)(const tern__conn *c);
  /* A timer of the kind the adapter chose fired. Return 1 when the
   * adapter ends the connection its own way (HTTP/1.1's 408, then a
   * close), 0 to have it closed now. */
  int (*timeout)(tern__conn *c, int kind);
  /* Take over a connection whose filter chose this protocol (ALPN); NULL
   * for HTTP/1.1, which every connection starts with. */
  void (*attach)(tern__conn *c);
  /* The request side of the requests this adapter creates. */
  const tern__req_ops *ops;
};

extern const tern__proto tern__http1;
/* The adapters the build has, NULL-terminated (lib/protocols.c). */
extern const tern__proto *const tern__protocols[];

/* ---- Byte-stream filters (TLS; later the PROXY protocol) -------------
 *
 * A filter sits between a connection's socket and its adapter (in the
 * spirit of curl's connection filters): it is handed the connection's
 * buffers and answers by return value, never calling the adapter. The
 * transport (conn.c) drives it; the adapter sees plaintext in c->rbuf
 * and writes plaintext to c->out as on plain TCP. */
enum { TERN__F_READY = 1 }; /* input(): the handshake has just finished */

struct tern__filter {
  const char *name;
  /* Per-connection state (c->filt) from the listener's configuration. */
  int (*attach)(tern__conn *c, void *cfg);
  void (*detach)(tern__conn *c);
  /* Where the socket's next read goes, and how much arrived there; with
   * n == 0 on a lingering connection, what is buffered is dropped. */
  void (*read_buf)(tern__conn *c, uv_buf_t *buf);
  void (*received)(tern__conn *c, size_t n);
  /* Run the handshake, then put plaintext into c->rbuf as far as it has
   * room. 0, TERN__F_READY (the handshake finished now: the transport
   * picks the adapter by alpn()), TERN_ECLOSED (the end of the peer's
   * input) or another error (the connection must close). */
  int (*input)(tern__conn *c);
  /* Is there input for another input() without a socket read? */
  int (*has_input)(tern__conn *c);
  /* Turn pending plaintext of c->out into the wire queue and return it
   * (bounded, so that a client that does not read holds little). */
  tern__outq *(*output)(tern__conn *c, int *err);
  /* The wire queue the socket writes from, and its size. */
  tern__outq *(*wire)(tern__conn *c);
  size_t (*buffered)(const tern__conn *c);
  /* Is the handshake still running? */
  int (*handshaking)(const tern__conn *c);
  /* Before a graceful close: queue the filter's goodbye (TLS
   * close_notify) once. 1 if something was queued (flush first). */
  int (*shutdown)(tern__conn *c);
  /* The protocol the handshake chose (ALPN), or NULL. */
  const char *(*alpn)(const tern__conn *c);
};

/* Listen on host:port, each connection through `filter` (NULL: plain
 * TCP) with `filter_cfg`; tern_listen and tern_listen_tls's body. */
int tern__listen_on(tern_server *srv, const char *host, int port,
                    const tern__filter *filter, void *filter_cfg,
                    int *bound_port);
/* Bytes below the adapter not yet on the wire (a filter's queue). */
size_t tern__conn_buffered(const tern__conn *c);

/* HTTP/2 (lib/http2/http2.c). */
extern const tern__proto tern__http2;
/* Does p[0..n) open with the HTTP/2 client preface? 1: yes, 0: no, -1: it
 * is a proper prefix of the preface (wait for more bytes). */
int tern__http2_preface(const char *p, size_t n);
/* Switch the connection to HTTP/2 (prior knowledge or ALPN "h2"); the
 * preface and what follows are read from c->rbuf by its on_read. Closes the
 * connection when the session cannot be created. */
void tern__http2_start(tern__conn *c);
/* h2c upgrade (RFC 7540 3.2): `r`, an HTTP/1.1 request without a body that
 * the HTTP/1.1 adapter no longer holds, becomes stream 1 and is routed;
 * `settings` is the HTTP2-Settings value. Queues the 101 answer. On error
 * nothing has changed and the request stays HTTP/1.1. */
int tern__http2_upgrade(tern__conn *c, tern_request *r, const char *settings,
                        size_t len);

/* ---- Connections -------------------------------------------------- */

enum {
  TERN__T_NONE = 0,
  TERN__T_HEAD,   /* waiting for (the rest of) a request head */
  TERN__T_IDLE,   /* keep-alive, nothing pending */
  TERN__T_BODY,   /* waiting for request body bytes */
  TERN__T_WRITE,  /* output pending, no progress */
  TERN__T_LINGER, /* closing: drain the peer's bytes after shutdown */
  TERN__T_COUNT,
  TERN__T_DRAINED = 0x100, /* with a kind, from an adapter's timer() */
};

enum {
  TERN__C_CLOSING = 1u << 0,     /* uv_close called */
  TERN__C_READING = 1u << 1,     /* uv_read_start active */
  TERN__C_WRITING = 1u << 2,     /* a uv_write is in flight */
  TERN__C_DIRTY = 1u << 3,       /* on the worker's dirty list */
  TERN__C_CLOSE_AFTER = 1u << 4, /* close once output is written */
  TERN__C_EOF = 1u << 5,         /* the peer finished sending */
  TERN__C_REPROCESS = 1u << 6,   /* run on_read again from the check cb */
  TERN__C_IN_READ = 1u << 7,     /* inside the adapter's on_read */
  TERN__C_STOPPING = 1u << 8,    /* graceful stop seen */
  TERN__C_LINGER = 1u << 9,      /* shut down for writing, draining */
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

struct tern__conn {
  uv_tcp_t tcp;
  tern__worker *w;
  const tern__proto *proto;
  unsigned flags;
  int refs; /* the connection itself + each live request */

  tern__rbuf *rbuf;
  size_t rpos, rlen; /* consumed / filled */

  const tern__filter *filter; /* NULL on plain TCP */
  void *filt;                 /* the filter's state */
  tern__outq out;             /* plaintext from the adapter */
  uv_write_t wreq;
  uv_shutdown_t sreq;
  size_t wlen; /* bytes in the uv_write in flight */

  tern__list timer_link;
  /* Timers are lazy (conn.c, tern__conn_timer): timer_kind is the kind
   * that applies; the node sits on the list of timer_list (or none,
   * TERN__T_NONE) at the position `listed` gave it, and `deadline` is
   * when the applying kind expires. */
  uint64_t deadline, listed;
  int timer_kind, timer_list;
  tern__list dirty_link;
  tern__list all_link;
  /* Stored at accept: any thread holding a request may read them, also
   * after the socket has closed (and its descriptor been reused). */
  tern__addr peer, local;

  /* HTTP/1.1 adapter state. */
  tern_request *q_head, *q_tail; /* in-flight requests, in order */
  size_t nq;
  tern_request *body_req; /* request whose body is arriving */
  size_t head_scanned;

  /* HTTP/2 adapter state while proto is &tern__http2; before that the
   * HTTP/1.1 adapter may leave a marker here (see h1_on_read). */
  void *h2;
};

void tern__conn_mark_dirty(tern__conn *c);
/* Free space at the end of the read buffer (getting or compacting it);
 * NULL when no buffer can be had. */
char *tern__conn_rbuf_room(tern__conn *c, size_t *room);
/* Run the adapter over buffered input (not re-entrantly). */
void tern__conn_process(tern__conn *c);
void tern__conn_update_timer(tern__conn *c);
void tern__conn_timeout(tern__conn *c, int kind);
/* Ask for on_read to run again soon (after resume). */
void tern__conn_reprocess(tern__conn *c);
void tern__conn_read_start(tern__conn *c);
void tern__conn_read_stop(tern__conn *c);
void tern__conn_close(tern__conn *c);
void tern__conn_flush(tern__conn *c);
void tern__conn_timer(tern__conn *c, int kind);
/* Take the connection off its timer list (closing: nothing may fire). */
void tern__conn_timer_stop(tern__conn *c);
void tern__conn_unref(tern__conn *c);

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
  uv_tcp_t *listeners;
  size_t nlisteners;
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

  tern__pool rbuf_pool, wblk_pool, req_pool, conn_pool, seg_pool;
  tern__pool small[TERN__SMALL_CLASSES];
  tern__list ws_open;    /* open WebSockets (lib/ws/ws.c) */
  tern__list ws_closing; /* WebSockets waiting for the client's close */
  tern__list ws_ended;   /* WebSockets whose on_close is due (check phase) */
  unsigned ws_calls;     /* tern_ws_* calls on the stack of this worker */
  char *scratch;         /* one TLS record's worth, for gathering */
  /* Where ws.c unmasks client payload (16 KiB, got on first use), since
   * the carrier's bytes are read-only to it; ws_scratch_busy while a
   * delivery is decoded into it. */
  unsigned char *ws_scratch;
  int ws_scratch_busy;
  tern__wstats stats;
};

typedef struct {
  int fd_family;
  struct sockaddr_storage addr;
  int *fds;                   /* one per worker */
  const tern__filter *filter; /* NULL: plain TCP */
  void *filter_cfg;           /* its configuration (a tern_tls) */
} tern__listen_addr;

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
  char allow_all[128]; /* union of route methods, for OPTIONS * */
  size_t allow_all_len;

  tern__listen_addr *addrs;
  size_t naddrs;
  tern__worker *workers;
  unsigned nworkers;
  _Atomic int state; /* 0 idle, 1 running, 2 stopping, 3 done */
  _Atomic uint32_t stop_deadline_ms;
  _Atomic int stop_wanted; /* tern_stop was called (in any state) */

  _Atomic uint64_t allocs, alloc_bytes, frees;
  tern_tls *tls_list;
  /* Frees tls_list (set by lib/tls once a tern_tls exists), so that the
   * core names no TLS code. */
  void (*tls_free)(tern_server *srv);

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
/* Close the worker's handles, run its loop dry, free its pools. */
void tern__worker_cleanup(tern__worker *w);
/* Post a cross-thread message to the worker. It always takes ownership:
 * once the worker's loop is ending the post is refused, the message is
 * dropped (m->ops->drop with `refused` set) and TERN_ECLOSED returned. */
int tern__worker_post(tern__worker *w, tern__msg *m);
void tern__worker_accept(uv_stream_t *listener, int status);
void tern__worker_maybe_done(tern__worker *w);
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

/* WebSocket (lib/ws/ws.c), on the worker: send 1001 to every open socket
 * (graceful stop); end close handshakes that timed out; run deferred
 * on_close callbacks. */
void tern__ws_stop_all(tern__worker *w);
void tern__ws_sweep(tern__worker *w, uint64_t now);
/* Run the on_close callbacks that ended inside a tern_ws_* call. */
void tern__ws_run_closes(tern__worker *w);
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

#endif
