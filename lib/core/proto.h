/* Response filters and protocol adapters: the tables a feature or an
 * adapter gives the engine (lib/protocols.c lists them). */
#ifndef TERN_CORE_PROTO_H
#define TERN_CORE_PROTO_H

#include "core/request.h"

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

/* Header injection defence: 1 when every name is a token and no value
 * has CR, LF or NUL (lib/core/response.c). */
int tern__fields_valid(const tern_header *h, size_t n);

/* The response hook (tern_server_on_response) for a head about to be
 * produced: with no hook, *h and *n are left alone; with one, they become
 * the fields plus those the hook added, valid until
 * tern__response_hook_done. 0, or TERN_ENOMEM (more fields than fit on
 * the stack and no memory for them: the answer fails as if queuing had). */
#define TERN__HOOK_FIELDS 32  /* fields the hook may add to one head */
#define TERN__HOOK_BYTES 4096 /* and their names and values, together */
struct tern_response_head {
  const tern_request *r;
  tern_header *h; /* the answer's fields, then the added ones */
  size_t n, cap;
  char bytes[TERN__HOOK_BYTES]; /* the added names and values */
  size_t used;
  tern_header local[16 + TERN__HOOK_FIELDS];
};
int tern__response_hook(tern_request *r, int status, const tern_header **h,
                        size_t *n, struct tern_response_head *head);
void tern__response_hook_done(tern_request *r, struct tern_response_head *head);

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

#endif
