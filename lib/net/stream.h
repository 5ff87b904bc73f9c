/* The byte-stream transport (lib/net): a connection over TCP or a Unix
 * socket, with an
 * optional filter (TLS) between its socket and its adapter. Only the
 * byte-stream adapters (HTTP/1.1, HTTP/2) and the transport itself see
 * this struct; the core sees its head.
 */
#ifndef TERN_NET_STREAM_H
#define TERN_NET_STREAM_H

#include "net/filter.h"
#include "core/worker.h"
#include "net/proxy.h"

/* The transport's flags, in the head's flags word. */
enum {
  TERN__C_READING = TERN__C_TRANSPORT << 0, /* the adapter wants input */
  TERN__C_WRITING = TERN__C_TRANSPORT << 1, /* the socket is full: output
                                               waits for it to drain */
  TERN__C_LINGER = TERN__C_TRANSPORT << 2,  /* shut down, draining */
  /* What the poll handle watches now. Reading stops lazily: a socket
   * that turns readable while nobody reads is dropped from the poll
   * then, so a stop followed by a start costs no system call. */
  TERN__C_POLL_IN = TERN__C_TRANSPORT << 3,
  TERN__C_POLL_OUT = TERN__C_TRANSPORT << 4,
  /* The connection ends at the client's own word (its last request said
   * Connection: close, and its body was read whole): lingering waits for
   * bytes the client said it will not send, so on plain TCP with nothing
   * left unread it closes at once, as nginx does. */
  TERN__C_PEER_DONE = TERN__C_TRANSPORT << 5,
};

/* The socket (TCP or a Unix socket) is the connection's own descriptor,
 * watched by a uv_poll_t and read and written by tern directly: a
 * uv_tcp_t carries a stream's write queues, connect and shutdown
 * requests and accept state that an accepted connection never uses
 * (248 bytes against 160), and an idle connection is mostly this
 * struct. */
typedef struct tern__stream {
  tern__conn head; /* first: the core's part */
  /* libuv's watch on the socket, set up the first time the connection
   * waits for it (`polled`): a connection whose first read finds its
   * whole request, and which closes after the answer (a client that
   * sends Connection: close), never enters epoll at all. */
  uv_poll_t io;

  /* Plaintext input, consumed from rpos, filled up to rlen. */
  tern__rbuf *rbuf;
  size_t rpos, rlen;

  const tern__filter *filter; /* NULL on plain TCP */
  void *filt;                 /* the filter's state */
  tern__outq out;             /* plaintext from the adapter */
  /* While TERN__C_WRITING: what is left of the bytes the socket could
   * not take when it filled. The write timer runs until they are all
   * written, so a client that reads a byte now and then cannot hold the
   * connection for longer than one write timeout per batch. */
  size_t wr_left;

  /* The HTTP/1.1 adapter's state, in place: every connection starts
   * with it. */
  tern_request *q_head, *q_tail; /* in-flight requests, in order */
  tern_request *body_req;        /* request whose body is arriving */
  size_t head_scanned;
  uint16_t nq; /* at most max_pipeline (1024) */
  /* A PROXY protocol header is still awaited: the socket's bytes go
   * into the read buffer until it is whole, before the filter or the
   * adapter sees any. */
  unsigned proxy_wait : 1;
  unsigned not_h2 : 1;  /* the first bytes were not the HTTP/2 preface */
  unsigned h2_only : 1; /* a plain listener's http2_only: no HTTP/1.1 */
  unsigned h1_only : 1; /* the listener's http1_only: no h2c (nor h2 by
                           ALPN) */
  unsigned polled : 1;  /* `io` is initialised (and must be closed) */
  /* TCP_NODELAY is wanted (the settings' tcp_nodelay) and not yet set:
   * it is set before the connection's second write. Nagle's algorithm
   * holds a small segment back only while earlier data is unacknowledged,
   * so the first write never waits for it, and a connection that answers
   * once and closes saves the system call. */
  unsigned nodelay_due : 1;
  unsigned wrote : 1; /* a write has gone out */
  int fd;             /* the socket */

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
static inline int tern__stream_fd(const tern__stream *s) {
  return s->fd;
}
/* Before a write to the socket other than through the output queue
 * (sendfile): what the queue's writes do first. */
void tern__stream_before_write(tern__stream *s);
/* Bytes below the adapter not yet on the wire (a filter's queue). */
size_t tern__stream_buffered(const tern__stream *s);
/* How a listener's connections are taken in: through `filter` (NULL:
 * plain TCP) with `cfg`, first reading a PROXY protocol header when
 * `proxy` is not NULL; `h2_only`: HTTP/2 with prior knowledge alone;
 * `h1_only`: HTTP/1.1 alone (no h2c; over TLS, ALPN offers http/1.1);
 * `unix_socket`: the client has no IP address; `local_known`: the
 * listener is bound to one address (not a wildcard), `local`, which is
 * then every connection's own (no getsockname per connection). Lives as
 * long as its listener. */
typedef struct {
  const tern__filter *filter;
  void *cfg;
  const tern__proxy_cfg *proxy;
  int h2_only;
  int h1_only;
  int unix_socket;
  int local_known;
  tern__addr local;
} tern__accept_cfg;
/* Accept a connection from stream listener `l` on worker `w`, and serve
 * it there, or hand it to a worker with fewer connections
 * (TERN_BALANCE_LEAST_CONNECTIONS). lib/net/tcp.c calls it. */
void tern__stream_accept(tern__worker *w, uv_stream_t *l,
                         const tern__accept_cfg *a);

#endif
