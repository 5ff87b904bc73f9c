/* Workers, their services and the server (lib/core/worker.c,
 * server.c); the routing decision every adapter makes. */
#ifndef TERN_CORE_WORKER_H
#define TERN_CORE_WORKER_H

#include "core/conn.h"
#include "core/listener.h"
#include "core/stats.h"
#include "core/window.h"
#include "core/text.h"
#include "core/abi.h"
#include "core/admit.h"

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
  TERN__SVC_SSE,    /* lib/handler/sse.c: open event streams */
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

/* How a worker takes in a connection's socket (a listener's accept, with
 * its configuration). */
typedef void (*tern__adopt_fn)(tern__worker *w, int fd, const void *cfg);

/* A connection accepted by one worker and handed to another of the same
 * process (TERN_BALANCE_LEAST_CONNECTIONS, lib/core/balance.c). */
typedef struct {
  int fd;
  tern__adopt_fn adopt;
  const void *cfg;
} tern__handoff;
/* A worker's ring holds this many; past it, the acceptor keeps the
 * connection. */
#define TERN__HANDOFF_CAP 256
/* A connection handed to a worker that has waited this long, with nothing
 * taken in meanwhile: that worker is held up (a handler blocking its
 * loop), and is handed no more. */
#define TERN__HANDOFF_STALL_MS 10

/* A worker's load, as every worker of every process sees it
 * (lib/core/balance.c): in shared memory across tern_server_fork. */
typedef struct {
  _Atomic uint64_t active;      /* open connections (the worker's alone
                                   writes these two: TERN__STAT_ADD) */
  _Atomic uint64_t taken;       /* connections taken in so far */
  _Atomic uint32_t incoming;    /* handed to it, not yet taken in */
  _Atomic uint32_t stopping;    /* its loop is ending: hand it nothing */
  _Atomic uint64_t progress_ms; /* a first one handed, or one taken in */
} tern__slot;

struct tern__worker {
  tern_server *srv;
  unsigned id;
  /* The request whose response hook runs now: its response calls are
   * refused meanwhile (lib/core/response.c). */
  const tern_request *hooked;
  uv_loop_t *loop;
  uv_loop_t own_loop;
  uv_thread_t thread;
  uv_thread_t thread_id;
  int attached;
  uv_async_t async;
  uv_check_t check;
  uv_prepare_t prepare; /* the loop's lag: each turn's start */
  uint64_t polled_ms;   /* uv_now when the last poll returned */
  uint64_t lag_ms, lag_prev_ms, lag_window_ms; /* the longest busy turn in
                                                  this window and the last,
                                                  and this one's start */
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
  tern_request *aborts;   /* finishing calls that had no memory to post */
  tern__handoff *handoff; /* connections handed to it: a ring of
                             TERN__HANDOFF_CAP (inbox_lock; NULL without
                             hand-offs) */
  unsigned handoff_head, handoff_len;
  tern__slot *slot; /* its load (srv->slots) */
  int recv_fd;      /* connections from other processes (or -1) */
  uv_poll_t recv;
  tern__list held; /* requests a handler holds (tern_request.held_link) */
  tern__list cut;  /* requests cut by the deadline and not yet freed
                      (held_link; inbox_lock once the loop is gone) */
  int cleaned;     /* the worker is gone: late frees are the caller's */
  uint32_t cut_answered, cut_total; /* requests cut at the deadline */

  tern__list timers[TERN__T_COUNT];
  uint32_t timeout_ms[TERN__T_COUNT];
  tern__list dirty;
  /* Connections closed without a handle, whose transport's `closed` is
   * still to run (tern__conn_close_later); `idle` runs the loop on while
   * there are any. */
  tern__list closed;
  uv_idle_t idle;
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
  tern__pool big[TERN__BIG_CLASSES];
  void *svc[TERN__SVC_COUNT]; /* each service's state (tern__services) */
  unsigned check_due;         /* services whose check is due (bit: slot) */
  tern__wstats stats;
  /* The monotonic clock read once per loop turn (tern__now), valid until
   * the check phase. */
  uint64_t now_ns;
  int now_valid;
};

/* A virtual host's routes (tern_route_options.host). */
typedef struct {
  char *name; /* lower case, without the "*." of a wildcard */
  size_t len;
  int wildcard; /* "*.name": any name below `name` */
  tern__router *router;
} tern__vhost;

struct tern_server {
  tern_settings s;
  tern__router *router;
  tern__vhost *vhosts; /* exact hosts first, then wildcards */
  size_t nvhosts;
  tern__route *routes;
  size_t nroutes, routes_cap;
  tern__route **route_ptrs; /* stable pointers handed to the router */
  tern__route default_route;
  int has_default;
  tern_error_fn error_fn; /* tern_server_on_error */
  void *error_user;
  tern_response_fn response_fn; /* tern_server_on_response */
  void *response_user;
  struct tern__admit *admit; /* limits per client address, or NULL */
  tern_access_fn access_fn;  /* tern_server_on_access, or the writer's */
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
  /* lib/core/balance.c: every worker's load (nslots = nprocs * nworkers,
   * mapped shared when slots_mapped), this process's index among the
   * nprocs of tern_server_fork, and per slot the end of its pair this
   * process sends on or receives from (-1: none; NULL with one process). */
  tern__slot *slots;
  unsigned nslots, nprocs, proc;
  int slots_mapped;
  int *send_fds, *recv_fds;
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
/* lib/core/balance.c. Whether connections are handed between workers
 * (least connections, more than one worker in all). */
int tern__balance_enabled(const tern_server *srv);
/* A worker starts: its slot, its ring, its end of the pairs from other
 * processes. */
int tern__balance_worker_init(tern__worker *w);
/* Worker `w` accepted socket `fd`: serve it (adopt) here, or hand it to
 * the least loaded worker of any process. */
void tern__balance_accept(tern__worker *w, int fd, tern__adopt_fn adopt,
                          const void *cfg);
/* Take in what other workers of this process handed over (the ring). */
void tern__balance_take(tern__worker *w);
/* The worker's graceful stop begins: hand it nothing more. */
void tern__balance_stop(tern__worker *w);
/* The worker's loop ends: close what other processes handed over and it
 * did not take in, and its end of their pairs. */
void tern__balance_close(tern__worker *w);
/* The server's last reference: the slots and the pairs. */
void tern__balance_free(tern_server *srv);
/* Close a handle of the worker's loop, counted in handles_open. */
void tern__worker_close_handle(tern__worker *w, uv_handle_t *h);
void tern__worker_maybe_done(tern__worker *w);
/* The idle callback that completes closes left for later. */
void tern__worker_on_idle(uv_idle_t *h);
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

/* ---- The routing decision ---------------------------------------- */

/* Match `r` against the routes of its Host's virtual host (server.c):
 * 1 with r->match filled when that host has the path (a route, or 405),
 * 0 when no virtual host is its or it lacks the path. */
int tern__vhost_match(tern_request *r);

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
  /* A virtual host's routes first; a path it lacks falls through. */
  if (srv->nvhosts == 0 || !tern__vhost_match(r))
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
