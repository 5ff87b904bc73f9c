/* The request object and its life cycle (lib/core/request.c,
 * response.c). */
#ifndef TERN_CORE_REQUEST_H
#define TERN_CORE_REQUEST_H

#include "core/outq.h"

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

/* tern_request.pins: the user's references (tern_request_ref, and each
 * response call posted from another thread until the worker has handled
 * it), TERN__PIN_ONE each, and TERN__PIN_RETIRED once the worker is done
 * with the request. Its block goes back when both hold, by whichever
 * side makes them so (lib/core/request.c). */
enum { TERN__PIN_RETIRED = 1u, TERN__PIN_ONE = 2u };

struct tern_request {
  tern__conn *conn;
  const tern__req_ops *ops; /* its adapter's request side */
  tern__worker *w;
  tern_request *next; /* the connection's in-flight queue */
  const tern__route *route;
  _Atomic int gone;         /* the client went away */
  _Atomic unsigned ustate;  /* TERN__U_* */
  _Atomic unsigned pins;    /* TERN__PIN_* */
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
  int64_t body_declared; /* tern_request_body_length */
  char *body_buf;
  size_t body_cap;
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

/* ---- What a carrier-neutral layer (WebSocket) asks of a request ----- */

enum {
  TERN__UPGRADE_NONE = 0,
  TERN__UPGRADE_H1 = 1,      /* HTTP/1.1 asked to upgrade (Upgrade field) */
  TERN__UPGRADE_CONNECT = 2, /* an extended CONNECT for websocket (RFC 8441,
                                RFC 9220): the stream is the tunnel */
};
/* Which upgrade the request asked for. */
static inline int tern__request_upgrade(const tern_request *r) {
  return (r->flags & TERN__RQ_WS_CONNECT) ? TERN__UPGRADE_CONNECT
         : (r->flags & TERN__RQ_UPGRADE)  ? TERN__UPGRADE_H1
                                          : TERN__UPGRADE_NONE;
}
/* From now on the request's bytes go to `fn` (a tunnel's, whatever the
 * route asked for), and reading starts. Owning worker. */
void tern__request_read(tern_request *r, tern_body_fn fn, void *user);

#endif
