/* The byte-stream transport (lib/net): a connection over TCP or a Unix
 * socket, with an
 * optional filter (TLS) between its socket and its adapter. Only the
 * byte-stream adapters (HTTP/1.1, HTTP/2) and the transport itself see
 * this struct; the core sees its head.
 */
#ifndef TERN_NET_STREAM_H
#define TERN_NET_STREAM_H

#include "internal.h"
#include "net/proxy.h"

/* The transport's flags, in the head's flags word. */
enum {
  TERN__C_READING = TERN__C_TRANSPORT << 0, /* uv_read_start active */
  TERN__C_WRITING = TERN__C_TRANSPORT << 1, /* a uv_write is in flight */
  TERN__C_LINGER = TERN__C_TRANSPORT << 2,  /* shut down, draining */
};

typedef struct tern__stream {
  tern__conn head; /* first: the core's part */
  union {
    uv_tcp_t tcp;   /* from a TCP listener */
    uv_pipe_t pipe; /* from a Unix-socket listener */
  } io;

  /* Plaintext input, consumed from rpos, filled up to rlen. */
  tern__rbuf *rbuf;
  size_t rpos, rlen;

  /* A PROXY protocol header is still awaited: the socket's bytes go
   * into the read buffer until it is whole, before the filter or the
   * adapter sees any. */
  int proxy_wait;
  const tern__filter *filter; /* NULL on plain TCP */
  void *filt;                 /* the filter's state */
  tern__outq out;             /* plaintext from the adapter */
  /* The uv_write in flight (NULL: none). Most writes finish at once in
   * uv_try_write; only one the socket could not take needs a request,
   * taken from the worker's small blocks then, so an idle connection
   * does not carry one (nor a uv_shutdown_t, taken at linger). */
  struct tern__swrite *wr;

  /* The HTTP/1.1 adapter's state, in place: every connection starts
   * with it. */
  tern_request *q_head, *q_tail; /* in-flight requests, in order */
  size_t nq;
  tern_request *body_req; /* request whose body is arriving */
  size_t head_scanned;
  int not_h2; /* the first bytes were not the HTTP/2 preface */

  /* The HTTP/2 adapter's state once it has the connection. */
  void *h2;
} tern__stream;

extern const tern__transport tern__stream_transport;

static inline tern__stream *tern__stream_of(tern__conn *c) {
  return TERN__CONTAINER_OF(c, tern__stream, head);
}
static inline const tern__stream *tern__stream_cof(const tern__conn *c) {
  return TERN__CONTAINER_OF(c, const tern__stream, head);
}

/* Free space at the end of the read buffer (getting or compacting it);
 * NULL when no buffer can be had. */
char *tern__stream_rbuf_room(tern__stream *s, size_t *room);
void tern__stream_read_start(tern__stream *s);
void tern__stream_read_stop(tern__stream *s);
/* Bytes of the uv_write in flight (0: none). */
size_t tern__stream_writing(const tern__stream *s);
/* Bytes below the adapter not yet on the wire (a filter's queue). */
size_t tern__stream_buffered(const tern__stream *s);
/* Accept a connection from TCP listener `l` on worker `w` through
 * `filter` (NULL: plain TCP) with `cfg`, first reading a PROXY protocol
 * header when `proxy` is not NULL (lib/net/tcp.c calls it). */
void tern__stream_accept(tern__worker *w, uv_stream_t *l,
                         const tern__filter *filter, void *cfg,
                         const tern__proxy_cfg *proxy);

#endif
