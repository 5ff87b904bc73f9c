/* The byte-stream transport: a TCP connection's socket, its read buffer
 * and output queue, the filter between them (TLS), and lingering close.
 * Input is read into refcounted buffers that requests may keep viewing;
 * output is gathered through the loop turn and written at once.
 *
 * libuv watches the socket (a uv_poll_t: readable, and writable while
 * output waits); tern reads and writes it with recv and sendmsg itself.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/proxy.h"
#include "net/stream.h"

static void on_poll(uv_poll_t *h, int status, int events);
static void on_read(tern__stream *s, ssize_t nread, const uv_buf_t *buf);
static void read_some(tern__stream *s);
static void poll_sync(tern__stream *s, int lazy);

/* The socket is let go of: its poll handle closed, or (never polled)
 * the close left for later has come. */
static void stream_closed(tern__conn *c) {
  tern__stream *s = tern__stream_of(c);
  tern__worker *w = c->w;
  tern__outq_free(w, &s->out);
  if (s->filter != NULL)
    s->filter->detach(s->filt, w);
  s->filt = NULL;
  tern__rbuf_unref(w, s->rbuf);
  s->rbuf = NULL;
  tern__conn_closed(&s->head);
}

static void on_handle_closed(uv_handle_t *h) {
  tern__stream *s = h->data;
  stream_closed(&s->head);
}

/* Refuse a connection before it starts (nothing watches its socket yet):
 * it closes, and the connection goes back unstarted. */
static void reject(tern__stream *s) {
  close(s->fd);
  tern__conn_discard(&s->head);
}

/* The socket libuv accepted for the listener's connection callback.
 * libuv's Unix streams accept before calling it and keep the descriptor
 * in accepted_fd for uv_accept (uv/unix.h, the same since libuv 1.0;
 * tern runs on Unix only); taking it from there, and leaving -1, is what
 * uv_accept does, and libuv goes on accepting. The descriptor is
 * non-blocking and close-on-exec (accept4). */
static int take_accepted(uv_stream_t *l) {
  int fd = l->accepted_fd;
  l->accepted_fd = -1;
  return fd;
}

/* Serve the connection on socket `fd` on worker `w` (the one that
 * accepted it, or the one it was handed to). */
static void adopt(tern__worker *w, int fd, const void *cfg) {
  const tern__accept_cfg *a = cfg;
  tern_server *srv = w->srv;
  tern__conn *c;
  tern__stream *s;

  /* No memory for the connection: the client sees a close instead of a
   * hang, and the listener goes on accepting. */
  if ((c = tern__conn_new(w, &tern__stream_transport)) == NULL) {
    close(fd);
    return;
  }
  s = tern__stream_of(c);
  memset((char *)s + sizeof(s->head), 0, sizeof(*s) - sizeof(s->head));
  s->fd = fd;
  if (w->stopping ||
      atomic_load_explicit(&w->slot->active, memory_order_relaxed) >=
          w->max_conns) {
    reject(s);
    return;
  }
  /* A Unix socket's client has no IP address: its peer stays unknown
   * (family 0) until a PROXY header names it. */
  if (!a->unix_socket) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    s->nodelay_due = srv->s.tcp_nodelay != 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
      tern__addr_set(&c->peer, (struct sockaddr *)&ss);
    len = sizeof(ss);
    if (a->local_known)
      c->local = a->local;
    else if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
      tern__addr_set(&c->local, (struct sockaddr *)&ss);
  }
  /* PROXY: only a trusted balancer may name the client; anyone else is
   * refused before a byte is read. On a Unix socket the socket file's
   * permissions decide who may connect. */
  if (a->proxy != NULL) {
    if (!a->unix_socket && !tern__proxy_trusted(a->proxy->nets, a->proxy->nnets,
                                                c->peer.family, c->peer.addr)) {
      reject(s);
      return;
    }
    s->proxy_wait = 1;
  } else if (!tern__conn_admit(c)) {
    /* Past its address's connection limit: closed before a byte is read.
     * (Behind a PROXY balancer the address is known with the header.) */
    reject(s);
    return;
  }
  c->proto = tern__protocols[0]; /* HTTP/1.1 */
  s->h2_only = a->h2_only != 0;  /* ... until the first bytes (h1_input) */
  s->h1_only = a->h1_only != 0;
  s->not_h2 = s->h1_only; /* no look for the h2c preface */
  s->filter = a->filter;
  if (a->filter != NULL &&
      (a->filter->attach(&s->filt, w, a->cfg) != 0 ||
       (s->h1_only && a->filter->alpn_http1(s->filt) != 0))) {
    if (c->admitted)
      tern__admit_release(srv->admit, &c->peer);
    reject(s);
    return;
  }
  tern__outq_init(&s->out);
  tern__conn_start(c);
  /* Read at once: a client usually sends its request right after the
   * handshake, so it is most often here already, and a connection that
   * is answered and closed within this call never enters epoll. When it
   * is not here, the recv that says so is the cost. */
  c->flags |= TERN__C_READING;
  read_some(s);
  poll_sync(s, 1);
}

void tern__stream_accept(tern__worker *w, uv_stream_t *l,
                         const tern__accept_cfg *a) {
  int fd = take_accepted(l);
  /* Here, or (least connections) on the least loaded worker's loop. */
  if (fd >= 0)
    tern__balance_accept(w, fd, adopt, a);
}

/* ---- Reading ------------------------------------------------------- */

char *tern__stream_rbuf_room(tern__stream *s, size_t *room) {
  tern__worker *w = s->head.w;
  tern__rbuf *b = s->rbuf;
  size_t unparsed;

  if (b == NULL) {
    b = s->rbuf = tern__rbuf_get(w);
    s->rpos = s->rlen = 0;
    if (b == NULL) {
      *room = 0;
      return NULL;
    }
  }
  if (s->rpos == s->rlen && b->refs == 1)
    s->rpos = s->rlen = 0;
  if (b->cap - s->rlen < b->cap / 4 && s->rpos > 0) {
    /* Little room left: move the unparsed tail to the front. Requests
     * still point into this buffer when refs > 1; then the tail moves to
     * a fresh buffer and the old one lives until they finish. */
    unparsed = s->rlen - s->rpos;
    if (b->refs == 1) {
      memmove(b->data, b->data + s->rpos, unparsed);
      s->rpos = 0;
      s->rlen = unparsed;
    } else {
      tern__rbuf *nb = tern__rbuf_get(w);
      if (nb != NULL) {
        memcpy(nb->data, b->data + s->rpos, unparsed);
        tern__rbuf_unref(w, b);
        s->rbuf = b = nb;
        s->rpos = 0;
        s->rlen = unparsed;
      }
    }
  }
  *room = b->cap - s->rlen;
  return b->data + s->rlen;
}

/* Where the next read goes: the filter's ciphertext buffer under TLS,
 * else the read buffer. A length of 0: no room (the adapter has not
 * consumed), or with a NULL base no memory for a buffer. */
static void read_room(tern__stream *s, uv_buf_t *buf) {
  size_t room;
  char *p;
  if (s->filter != NULL && !s->proxy_wait) {
    s->filter->read_buf(s->filt, s->head.w, buf);
    return;
  }
  p = tern__stream_rbuf_room(s, &room);
  *buf = uv_buf_init(p, (unsigned)room);
}

/* Watch for what the connection waits for: input while it reads (and
 * while it lingers), the socket draining while output waits. */
static void poll_update(tern__stream *s, unsigned want) {
  tern__conn *c = &s->head;
  unsigned have = c->flags & (TERN__C_POLL_IN | TERN__C_POLL_OUT);
  int ev = 0;
  if (want == have)
    return;
  c->flags =
      (c->flags & ~(unsigned)(TERN__C_POLL_IN | TERN__C_POLL_OUT)) | want;
  if (want == 0) {
    uv_poll_stop(&s->io);
    return;
  }
  if (!s->polled) {
    if (uv_poll_init(c->w->loop, &s->io, s->fd) != 0) {
      tern__conn_close(c);
      return;
    }
    s->io.data = s;
    s->polled = 1;
  }
  if (want & TERN__C_POLL_IN)
    ev |= UV_READABLE;
  if (want & TERN__C_POLL_OUT)
    ev |= UV_WRITABLE;
  if (uv_poll_start(&s->io, ev, on_poll) != 0)
    tern__conn_close(c);
}

/* The watch the flags ask for; `lazy`: keep watching input that nobody
 * reads until it arrives (read_stop then read_start costs nothing). */
static void poll_sync(tern__stream *s, int lazy) {
  unsigned f = s->head.flags, want = 0;
  if (f & TERN__C_CLOSING)
    return;
  if ((f & TERN__C_READING) || (lazy && (f & TERN__C_POLL_IN)))
    want |= TERN__C_POLL_IN;
  if (f & TERN__C_WRITING)
    want |= TERN__C_POLL_OUT;
  poll_update(s, want);
}

void tern__stream_read_start(tern__stream *s) {
  if (s->head.flags & (TERN__C_READING | TERN__C_CLOSING | TERN__C_EOF))
    return;
  s->head.flags |= TERN__C_READING;
  poll_sync(s, 1);
}

void tern__stream_read_stop(tern__stream *s) {
  s->head.flags &= ~(unsigned)TERN__C_READING;
}

static void stream_input(tern__conn *c, int on) {
  if (on)
    tern__stream_read_start(tern__stream_of(c));
  else
    tern__stream_read_stop(tern__stream_of(c));
}

/* The filter's handshake has finished: the protocol it agreed on (ALPN)
 * picks the adapter among those the build has. HTTP/1.1, already in
 * place, serves a client that offered none. */
static void select_protocol(tern__stream *s) {
  const char *alpn = s->filter->alpn(s->filt);
  const tern__proto *p;
  if (alpn == NULL)
    return;
  p = tern__proto_find(alpn, strlen(alpn));
  if (p != NULL && p != s->head.proto && p->attach != NULL &&
      p->attach(&s->head, NULL) != 0)
    tern__conn_close(&s->head);
}

size_t tern__stream_buffered(const tern__stream *s) {
  return s->filter != NULL ? s->filter->buffered(s->filt) : 0;
}

static size_t stream_buffered(const tern__conn *c) {
  return tern__stream_buffered(tern__stream_cof(c));
}

/* Arm the timeout that fits the connection's state: the adapter's
 * choice, but the head timer while a TLS handshake runs (it is part of the
 * head: its bytes do not re-arm it, so a client trickling handshake
 * records is closed like one trickling a head), and nothing over the
 * transport's own write and linger timers. A waiting connection (idle
 * keep-alive, a drained tunnel) gives its read buffer back. */
static void update_timer(tern__stream *s) {
  tern__conn *c = &s->head;
  int kind;

  if (c->flags & (TERN__C_CLOSING | TERN__C_LINGER | TERN__C_WRITING))
    return;
  kind = s->filter != NULL && s->filter->handshaking(s->filt)
             ? TERN__T_HEAD
             : c->proto->timer(c);
  if (tern__conn_timer_choose(c, kind & ~TERN__T_DRAINED) &&
      (kind & TERN__T_DRAINED) && s->rbuf != NULL && s->rbuf->refs == 1) {
    tern__rbuf_unref(c->w, s->rbuf);
    s->rbuf = NULL;
    s->rpos = s->rlen = 0;
  }
}

/* Decrypt into the read buffer as far as it has room. Without memory for
 * a read buffer the handshake may still progress, but past it there is
 * nowhere to decrypt to and nothing would try again: the connection
 * cannot go on (TERN_ENOMEM closes it). */
static int filter_input(tern__stream *s) {
  size_t room, got = 0;
  char *p = tern__stream_rbuf_room(s, &room);
  int rc;
  if (p == NULL) {
    if (!s->filter->handshaking(s->filt))
      return TERN_ENOMEM;
    room = 0;
  }
  rc = s->filter->input(s->filt, s->head.w, p, room, &got);
  s->rlen += got;
  return p == NULL && rc == TERN__F_READY ? TERN_ENOMEM : rc;
}

static void stream_process(tern__conn *c) {
  tern__stream *s = tern__stream_of(c);
  /* A lingering connection only drains the client's bytes until its FIN;
   * the adapter has nothing more to do with it (and must not stop the
   * reading that sees the FIN). */
  if (c->flags & (TERN__C_CLOSING | TERN__C_LINGER))
    return;
  if (c->flags & TERN__C_IN_READ) {
    tern__conn_reprocess(c);
    return;
  }
  for (;;) {
    size_t before = s->rpos, had = s->rlen;
    if (s->filter != NULL) {
      /* Plaintext first: the adapter may have made room since. */
      int rc = filter_input(s);
      if (rc == TERN__F_READY) {
        if (s->filter->tls_version != NULL)
          c->tls_version = s->filter->tls_version(s->filt);
        if (s->filter->client_id != NULL && c->client_id == NULL)
          c->client_id = s->filter->client_id(s->filt, c->w->srv);
        if (s->filter->cipher != NULL)
          c->tls_cipher = s->filter->cipher(s->filt);
        select_protocol(s);
        if (c->flags & TERN__C_CLOSING)
          return;
      } else if (rc == TERN_ECLOSED) {
        c->flags |= TERN__C_EOF;
      } else if (rc != 0) {
        tern__conn_close(c);
        return;
      }
    }
    c->flags |= TERN__C_IN_READ;
    c->proto->input(c);
    c->flags &= ~(unsigned)TERN__C_IN_READ;
    /* TLS may hold more than the read buffer had room for: once the
     * adapter has made room, decrypt again, or those bytes wait for socket
     * input that a client blocked on flow control never sends. */
    if (s->filter == NULL || (c->flags & (TERN__C_CLOSING | TERN__C_LINGER)) ||
        !s->filter->has_input(s->filt) || (s->rpos == before && s->rlen == had))
      break;
  }
  if (!(c->flags & TERN__C_CLOSING)) {
    update_timer(s);
    tern__conn_mark_dirty(c);
  }
}

/* The adapter's output outside input (HTTP/2 framing responses). Not once
 * lingering: like input, it has nothing more to do then, and it must not
 * stop the reading that sees the client's FIN. */
static void stream_output(tern__conn *c) {
  if (!(c->flags & (TERN__C_CLOSING | TERN__C_LINGER)))
    c->proto->output(c);
}

static void stream_flush(tern__conn *c);

/* The PROXY header, from the read buffer: 0 once it has been taken (its
 * addresses become the connection's, the bytes after it go on to the
 * filter or stay for the adapter), 1 while it is incomplete, -1 when
 * the connection was closed (a malformed or oversized header). The head
 * timer, armed at accept, bounds how long a header may take. */
/* Copy the TLVs a handler may ask for out of the read buffer (which is
 * reused) into one block the connection keeps. 0, or TERN_ENOMEM. */
static int keep_tlvs(tern__conn *c, const tern__proxy_hdr *h) {
  size_t n =
      h->alpn_len + h->authority_len + h->ssl_version_len + h->ssl_cn_len;
  tern__proxy_tlvs *t;
  char *o;

  if (h->alpn == NULL && h->authority == NULL && !h->ssl &&
      h->ssl_version == NULL && h->ssl_cn == NULL)
    return 0;
  if ((t = tern__malloc(c->w->srv, sizeof(*t) + n + 4)) == NULL)
    return TERN_ENOMEM;
  o = (char *)(t + 1);
  t->ssl = h->ssl;
#define KEEP(f)                                                                \
  do {                                                                         \
    t->f = h->f != NULL ? o : NULL;                                            \
    t->f##_len = h->f##_len;                                                   \
    if (h->f != NULL)                                                          \
      memcpy(o, h->f, h->f##_len);                                             \
    o += h->f##_len;                                                           \
    *o++ = '\0';                                                               \
  } while (0)
  KEEP(alpn);
  KEEP(authority);
  KEEP(ssl_version);
  KEEP(ssl_cn);
#undef KEEP
  c->proxy = t;
  return 0;
}

static int proxy_input(tern__stream *s) {
  tern__conn *c = &s->head;
  tern__proxy_hdr h;
  int n = tern__proxy_parse(s->rbuf->data + s->rpos, s->rlen - s->rpos, &h);

  if (n == TERN__PROXY_MORE && s->rlen - s->rpos < TERN__PROXY_MAX)
    return 1;
  if (n <= 0) {
    tern__conn_close(c);
    return -1;
  }
  s->proxy_wait = 0;
  if (!h.local) {
    tern__addr_set(&c->peer, (const struct sockaddr *)&h.src);
    tern__addr_set(&c->local, (const struct sockaddr *)&h.dst);
  }
  if (!tern__conn_admit(c)) {
    tern__conn_close(c); /* the address is over its connection limit */
    return -1;
  }
  if (keep_tlvs(c, &h) != 0) {
    tern__conn_close(c); /* a handler must not see them missing */
    return -1;
  }
  s->rpos += (size_t)n; /* the views in h stay valid until here */
  /* Under TLS, what followed the header is ciphertext: hand it to the
   * filter as if the socket had read it (once per connection). */
  while (s->filter != NULL && s->rpos < s->rlen) {
    uv_buf_t b;
    size_t k = s->rlen - s->rpos;
    s->filter->read_buf(s->filt, c->w, &b);
    if (b.len == 0) {
      tern__conn_close(c);
      return -1;
    }
    if (k > b.len)
      k = b.len;
    memcpy(b.base, s->rbuf->data + s->rpos, k);
    s->filter->received(s->filt, k);
    s->rpos += k;
  }
  return 0;
}

static void on_read(tern__stream *s, ssize_t nread, const uv_buf_t *buf) {
  tern__conn *c = &s->head;

  if (nread > 0) {
    TERN__STAT_ADD(c->w->stats.bytes_in, (uint64_t)nread);
    if (c->flags & TERN__C_LINGER) {
      s->rpos = s->rlen = 0; /* closing: the bytes are dropped */
      return;
    }
    if (s->filter != NULL && !s->proxy_wait)
      s->filter->received(s->filt, (size_t)nread); /* decrypted below */
    else
      s->rlen += (size_t)nread;
    if (s->proxy_wait && proxy_input(s) != 0)
      return;
    if (c->timer.kind == TERN__T_BODY)
      tern__conn_timer(c, TERN__T_BODY); /* progress re-arms it */
    stream_process(c);
    /* Everything this read produced leaves now, in one write: waiting for
     * the end of the loop turn would only add latency. */
    if (!(c->flags & (TERN__C_CLOSING | TERN__C_REPROCESS)))
      stream_flush(c);
    return;
  }
  if (nread == 0)
    return;
  if (nread == UV_ENOBUFS) {
    /* No buffer at all: there was no memory for one, and nothing would
     * restart reading, so the connection is closed. */
    if (buf->base == NULL) {
      tern__conn_close(c);
      return;
    }
    /* No room: the adapter cannot consume now. It restarts reading; until
     * then the socket is not watched for input. */
    tern__stream_read_stop(s);
    poll_sync(s, 0);
    return;
  }
  if (nread == UV_EOF && s->proxy_wait) {
    /* a truncated header */
    tern__conn_close(c);
    return;
  }
  if (nread == UV_EOF && !(c->flags & TERN__C_LINGER)) {
    c->flags |= TERN__C_EOF;
    tern__stream_read_stop(s);
    stream_process(c);
    return;
  }
  tern__conn_close(c);
}

/* Read while the socket has input and the adapter reads: at most 32
 * times in one go (as libuv's streams), so that one busy client does
 * not hold the worker; a short read means the socket is drained. */
static void read_some(tern__stream *s) {
  tern__conn *c = &s->head;
  int fd = tern__stream_fd(s);
  for (int k = 0; k < 32; k++) {
    uv_buf_t b;
    ssize_t n;
    read_room(s, &b);
    if (b.len == 0) {
      on_read(s, UV_ENOBUFS, &b);
      return;
    }
    do
      n = recv(fd, b.base, b.len, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    on_read(s, n > 0 ? n : n == 0 ? UV_EOF : UV_ECONNRESET, &b);
    if ((size_t)n < b.len || (c->flags & TERN__C_CLOSING) ||
        !(c->flags & (TERN__C_READING | TERN__C_LINGER)))
      return;
  }
}

static void write_ready(tern__stream *s);

static void on_poll(uv_poll_t *h, int status, int events) {
  tern__stream *s = h->data;
  tern__conn *c = &s->head;
  int read = 1;
  if (status < 0) {
    /* A socket error (libuv reports EPOLLERR so, and stops the handle):
     * the peer reset it, or it failed. */
    tern__conn_close(c);
    return;
  }
  if ((events & UV_WRITABLE) && (c->flags & TERN__C_WRITING)) {
    write_ready(s);
    if (c->flags & TERN__C_CLOSING)
      return;
  }
  if (events & UV_READABLE) {
    read = (c->flags & (TERN__C_READING | TERN__C_LINGER)) != 0;
    if (read)
      read_some(s);
    if (c->flags & TERN__C_CLOSING)
      return;
  }
  /* Input that arrived while nobody reads stops being watched now (see
   * poll_sync), or it would wake the loop at every turn. Input this call
   * read is kept watched lazily even if reading stopped since: at the
   * client's FIN the connection usually closes within this loop turn,
   * and the poll goes with it. */
  poll_sync(s, read);
}

/* Close after the last byte has been written: shut down our side and drain
 * what the client still sends for a while. Closing with unread input would
 * make the kernel answer with a reset that can destroy the response before
 * the client has read it. Not when the client said it sends no more
 * (TERN__C_PEER_DONE) and left nothing unread: then it closes at once. */
static void linger(tern__stream *s) {
  tern__conn *c = &s->head;
  /* Not over TLS: a client may answer our close_notify with its own,
   * and a reset for those bytes could destroy the end of the response
   * before the client has read it. */
  int peer_done =
      (c->flags & TERN__C_PEER_DONE) && s->filter == NULL && s->rpos == s->rlen;
  if (c->flags & (TERN__C_EOF | TERN__C_STOPPING) || peer_done ||
      shutdown(tern__stream_fd(s), SHUT_WR) != 0) {
    tern__conn_close(c);
    return;
  }
  c->flags |= TERN__C_LINGER;
  s->rpos = s->rlen = 0;
  if (s->filter != NULL)
    s->filter->received(s->filt, 0); /* drop buffered ciphertext too */
  tern__stream_read_start(s);
  tern__conn_timer(c, TERN__T_LINGER);
}

#define TERN__IOV_MAX 64

void tern__stream_before_write(tern__stream *s) {
  int one = 1;
  if (!s->nodelay_due)
    return;
  if (!s->wrote) {
    s->wrote = 1;
    return;
  }
  s->nodelay_due = 0;
  (void)setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Write what the socket takes of `iov`: the bytes written, 0 when it is
 * full, -1 when it failed. sendmsg, for MSG_NOSIGNAL: a closed peer is
 * an error, not a SIGPIPE. uv_buf_t is laid out as struct iovec on Unix
 * (libuv's uv-unix.h says so), which is what lets it through. */
static ssize_t write_iov(int fd, uv_buf_t *iov, size_t n) {
  struct msghdr m;
  ssize_t r;
  memset(&m, 0, sizeof(m));
  m.msg_iov = (struct iovec *)(void *)iov;
  m.msg_iovlen = n;
  do
    r = sendmsg(fd, &m, MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  if (r >= 0)
    return r;
  return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
}

/* The queue the socket writes from: ciphertext when TLS filters the
 * connection (after encrypting what the adapter produced), else the
 * adapter's own output. */
static tern__outq *wire_queue(tern__stream *s, int *err) {
  *err = 0;
  if (s->filter != NULL)
    return s->filter->output(s->filt, s->head.w, &s->out, err);
  return &s->out;
}

static void stream_flush(tern__conn *c) {
  tern__stream *s = tern__stream_of(c);
  tern__worker *w = c->w;
  uv_buf_t iov[TERN__IOV_MAX];
  size_t n, i, total;
  tern__outq *q;
  ssize_t r;
  int err;

  if (c->flags & (TERN__C_CLOSING | TERN__C_WRITING | TERN__C_LINGER))
    return;
  /* This flush does what the check phase would: no need to come again. */
  tern__conn_clean(c);
  for (;;) {
    q = wire_queue(s, &err);
    if (err != 0) {
      tern__conn_close(c);
      return;
    }
    if (q->count == 0)
      break;
    n = tern__outq_iov(q, iov, TERN__IOV_MAX);
    if (n == 0) {
      tern__outq_consume(w, q, 0); /* markers only */
      continue;
    }
    tern__stream_before_write(s);
    r = write_iov(tern__stream_fd(s), iov, n);
    if (r > 0) {
      TERN__STAT_ADD(w->stats.bytes_out, (uint64_t)r);
      s->wr_left -= (size_t)r < s->wr_left ? (size_t)r : s->wr_left;
      tern__outq_consume(w, q, (size_t)r);
      if (c->flags & TERN__C_CLOSING)
        return;
      continue;
    }
    if (r < 0) {
      tern__conn_close(c);
      return;
    }
    /* Full: wait for it to drain. A new batch starts the write timer; a
     * batch still being written keeps the deadline it had. */
    if (s->wr_left == 0) {
      for (i = 0, total = 0; i < n; i++)
        total += iov[i].len;
      s->wr_left = total;
      tern__conn_timer(c, TERN__T_WRITE);
    }
    c->flags |= TERN__C_WRITING;
    poll_sync(s, 1);
    return;
  }
  s->wr_left = 0;
  if (s->out.count == 0 && tern__conn_done(c)) {
    /* Over TLS, the close_notify alert goes out before our FIN. */
    if (s->filter != NULL && s->filter->shutdown(s->filt)) {
      stream_flush(c);
      return;
    }
    linger(s);
  } else {
    update_timer(s); /* and give back an idle read buffer */
  }
}

/* The socket has room again: write on (what queued meanwhile too). */
static void write_ready(tern__stream *s) {
  tern__conn *c = &s->head;
  c->flags &= ~(unsigned)TERN__C_WRITING;
  stream_flush(c);
  if (!(c->flags & (TERN__C_CLOSING | TERN__C_WRITING)) &&
      c->timer.kind == TERN__T_WRITE)
    tern__conn_timer(c, TERN__T_NONE); /* drained, and nothing re-armed */
}

/* ---- Timers, closing ---------------------------------------------- */

static void stream_timeout(tern__conn *c, int kind) {
  (void)kind; /* a write that made no progress, or a linger that ended */
  tern__conn_close(c);
}

/* uv_close stops the poll (the descriptor leaves epoll) before the
 * descriptor closes; a connection that was never polled has no handle to
 * close, and its close completes in the check phase instead. */
static void stream_close(tern__conn *c) {
  tern__stream *s = tern__stream_of(c);
  tern__stream_read_stop(s);
  c->flags &= ~(unsigned)(TERN__C_POLL_IN | TERN__C_POLL_OUT);
  if (s->polled)
    uv_close((uv_handle_t *)&s->io, on_handle_closed);
  else
    tern__conn_close_later(c);
  close(s->fd);
}

static void stream_free(tern__conn *c) {
  tern__worker *w = c->w;
  tern__pool_put(w, &w->conn_pools[TERN__POOL_STREAM], tern__stream_of(c));
}

const tern__transport tern__stream_transport = {
    .name = "tcp",
    .pool = TERN__POOL_STREAM,
    .conn_size = sizeof(tern__stream),
    .process = stream_process,
    .output = stream_output,
    .flush = stream_flush,
    .input = stream_input,
    .buffered = stream_buffered,
    .timeout = stream_timeout,
    .close = stream_close,
    .free = stream_free,
    .closed = stream_closed,
};
