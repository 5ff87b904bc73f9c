/* Connections: accept, read into refcounted buffers, gather output and
 * write it once per loop turn, lingering close (timeouts: timer.c).
 */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_conn_handle_closed(uv_handle_t *h) {
  tern__conn *c = h->data;
  tern__worker *w = c->w;
  tern__outq_free(w, &c->out);
  if (c->filter != NULL)
    c->filter->detach(c);
  tern__rbuf_unref(w, c->rbuf);
  c->rbuf = NULL;
  TERN__STAT_ADD(w->stats.active, (uint64_t)-1);
  tern__conn_unref(c);
}

void tern__conn_unref(tern__conn *c) {
  tern__worker *w = c->w;
  if (--c->refs > 0)
    return;
  tern__pool_put(w, &w->conn_pool, c);
  w->nconns--;
  tern__worker_maybe_done(w);
}

static void on_rejected_closed(uv_handle_t *h) {
  tern__conn *c = h->data;
  tern__worker *w = c->w;
  tern__pool_put(w, &w->conn_pool, c);
}

/* Accept even when there is no memory or no room, so that the kernel's
 * backlog drains and the client sees a close instead of a hang. */
static void reject_pending(uv_stream_t *l) {
  uv_os_fd_t fd;
  int cfd;
  if (uv_fileno((uv_handle_t *)l, &fd) != 0)
    return;
  cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
  if (cfd >= 0)
    close(cfd);
}

void tern__worker_accept(uv_stream_t *l, int status) {
  tern__worker *w = l->data;
  tern_server *srv = w->srv;
  const tern__listen_addr *la;
  tern__conn *c;

  if (status < 0) {
    /* Out of descriptors the listener stays readable and this runs again
     * at once: say so at most once a second, not once per attempt. */
    if (uv_now(w->loop) - w->accept_warned >= 1000 || w->accept_warned == 0) {
      w->accept_warned = uv_now(w->loop);
      tern__log(srv, TERN_LOG_WARN, "accept: %s", uv_strerror(status));
    }
    return;
  }
  c = tern__pool_get(w, &w->conn_pool);
  if (c == NULL) {
    reject_pending(l);
    return;
  }
  memset(c, 0, sizeof(*c));
  c->w = w;
  uv_tcp_init(w->loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0 || w->stopping ||
      atomic_load_explicit(&w->stats.active, memory_order_relaxed) >=
          w->max_conns) {
    uv_close((uv_handle_t *)&c->tcp, on_rejected_closed);
    return;
  }
  if (srv->s.tcp_nodelay)
    uv_tcp_nodelay(&c->tcp, 1);
  {
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
      tern__addr_set(&c->peer, (struct sockaddr *)&ss);
    len = sizeof(ss);
    if (uv_tcp_getsockname(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
      tern__addr_set(&c->local, (struct sockaddr *)&ss);
  }
  c->proto = &tern__http1;
  c->refs = 1;
  la = &srv->addrs[(uv_tcp_t *)l - w->listeners];
  c->filter = la->filter;
  if (c->filter != NULL && c->filter->attach(c, la->filter_cfg) != 0) {
    uv_close((uv_handle_t *)&c->tcp, on_rejected_closed);
    return;
  }
  tern__conn_timer_init(c);
  tern__list_init(&c->dirty_link);
  tern__outq_init(&c->out);
  tern__list_append(&w->conns, &c->all_link);
  w->nconns++;
  TERN__STAT_ADD(w->stats.connections, 1);
  TERN__STAT_ADD(w->stats.active, 1);
  tern__conn_timer(c, TERN__T_HEAD);
  tern__conn_read_start(c);
}

/* ---- Reading ------------------------------------------------------- */

char *tern__conn_rbuf_room(tern__conn *c, size_t *room) {
  tern__worker *w = c->w;
  tern__rbuf *b = c->rbuf;
  size_t unparsed;

  if (b == NULL) {
    b = c->rbuf = tern__rbuf_get(w);
    c->rpos = c->rlen = 0;
    if (b == NULL) {
      *room = 0;
      return NULL;
    }
  }
  if (c->rpos == c->rlen && b->refs == 1)
    c->rpos = c->rlen = 0;
  if (b->cap - c->rlen < b->cap / 4 && c->rpos > 0) {
    /* Little room left: move the unparsed tail to the front. Requests
     * still point into this buffer when refs > 1; then the tail moves to
     * a fresh buffer and the old one lives until they finish. */
    unparsed = c->rlen - c->rpos;
    if (b->refs == 1) {
      memmove(b->data, b->data + c->rpos, unparsed);
      c->rpos = 0;
      c->rlen = unparsed;
    } else {
      tern__rbuf *nb = tern__rbuf_get(w);
      if (nb != NULL) {
        memcpy(nb->data, b->data + c->rpos, unparsed);
        tern__rbuf_unref(w, b);
        c->rbuf = b = nb;
        c->rpos = 0;
        c->rlen = unparsed;
      }
    }
  }
  *room = b->cap - c->rlen;
  return b->data + c->rlen;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  tern__conn *c = h->data;
  size_t room;
  char *p;

  (void)suggested;
  if (c->filter != NULL) {
    c->filter->read_buf(c, buf);
    return;
  }
  p = tern__conn_rbuf_room(c, &room);
  *buf = uv_buf_init(p, (unsigned)room); /* 0: read_cb gets UV_ENOBUFS */
}

void tern__conn_read_start(tern__conn *c) {
  if (c->flags & (TERN__C_READING | TERN__C_CLOSING | TERN__C_EOF))
    return;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
    c->flags |= TERN__C_READING;
}

void tern__conn_read_stop(tern__conn *c) {
  if (!(c->flags & TERN__C_READING))
    return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->flags &= ~(unsigned)TERN__C_READING;
}

/* The filter's handshake has finished: the protocol it agreed on (ALPN)
 * picks the adapter among those the build has. HTTP/1.1, already in
 * place, serves a client that offered none. */
static void select_protocol(tern__conn *c) {
  const char *alpn = c->filter->alpn(c);
  const tern__proto *const *p;
  if (alpn == NULL)
    return;
  for (p = tern__protocols; *p != NULL; p++)
    if (*p != c->proto && (*p)->attach != NULL &&
        strcmp((*p)->name, alpn) == 0) {
      (*p)->attach(c);
      return;
    }
}

size_t tern__conn_buffered(const tern__conn *c) {
  return c->filter != NULL ? c->filter->buffered(c) : 0;
}

void tern__conn_process(tern__conn *c) {
  /* A lingering connection only drains the client's bytes until its FIN;
   * the adapter has nothing more to do with it (and must not stop the
   * reading that sees the FIN). */
  if (c->flags & (TERN__C_CLOSING | TERN__C_LINGER))
    return;
  if (c->flags & TERN__C_IN_READ) {
    c->flags |= TERN__C_REPROCESS;
    tern__conn_mark_dirty(c);
    return;
  }
  for (;;) {
    size_t before = c->rpos, had = c->rlen;
    if (c->filter != NULL) {
      /* Plaintext first: the adapter may have made room since. */
      int rc = c->filter->input(c);
      if (rc == TERN__F_READY) {
        select_protocol(c);
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
    if (c->filter == NULL || (c->flags & (TERN__C_CLOSING | TERN__C_LINGER)) ||
        !c->filter->has_input(c) || (c->rpos == before && c->rlen == had))
      break;
  }
  if (!(c->flags & TERN__C_CLOSING)) {
    tern__conn_update_timer(c);
    tern__conn_mark_dirty(c);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  tern__conn *c = s->data;
  tern__worker *w = c->w;

  (void)buf;
  if (nread > 0) {
    TERN__STAT_ADD(w->stats.bytes_in, (uint64_t)nread);
    if (c->flags & TERN__C_LINGER) {
      c->rpos = c->rlen = 0; /* closing: the bytes are dropped */
      return;
    }
    if (c->filter != NULL)
      c->filter->received(c, (size_t)nread); /* decrypted below */
    else
      c->rlen += (size_t)nread;
    if (c->timer.kind == TERN__T_BODY)
      tern__conn_timer(c, TERN__T_BODY); /* progress re-arms it */
    tern__conn_process(c);
    /* Everything this read produced leaves now, in one write: waiting for
     * the end of the loop turn would only add latency. */
    if (!(c->flags & (TERN__C_CLOSING | TERN__C_REPROCESS)))
      tern__conn_flush(c);
    return;
  }
  if (nread == 0)
    return;
  if (nread == UV_ENOBUFS) {
    /* No room: the adapter cannot consume now. It restarts reading. */
    tern__conn_read_stop(c);
    return;
  }
  if (nread == UV_EOF && !(c->flags & TERN__C_LINGER)) {
    c->flags |= TERN__C_EOF;
    tern__conn_read_stop(c);
    tern__conn_process(c);
    return;
  }
  tern__conn_close(c);
}

/* ---- Writing ------------------------------------------------------- */

void tern__conn_mark_dirty(tern__conn *c) {
  if (c->flags & (TERN__C_DIRTY | TERN__C_CLOSING))
    return;
  c->flags |= TERN__C_DIRTY;
  tern__list_append(&c->w->dirty, &c->dirty_link);
}

void tern__conn_reprocess(tern__conn *c) {
  c->flags |= TERN__C_REPROCESS;
  tern__conn_mark_dirty(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)req;
  (void)status;
}

/* Close after the last byte has been written: shut down our side and drain
 * what the client still sends for a while. Closing with unread input would
 * make the kernel answer with a reset that can destroy the response before
 * the client has read it. */
static void linger(tern__conn *c) {
  if (c->flags & (TERN__C_EOF | TERN__C_STOPPING) ||
      uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
    tern__conn_close(c);
    return;
  }
  c->flags |= TERN__C_LINGER;
  c->rpos = c->rlen = 0;
  if (c->filter != NULL)
    c->filter->received(c, 0); /* drop buffered ciphertext too */
  tern__conn_read_start(c);
  tern__conn_timer(c, TERN__T_LINGER);
}

#define TERN__IOV_MAX 64

static void on_write(uv_write_t *req, int status);

/* The queue the socket writes from: ciphertext when TLS filters the
 * connection (after encrypting what the adapter produced), else the
 * adapter's own output. */
static tern__outq *wire_queue(tern__conn *c, int *err) {
  *err = 0;
  if (c->filter != NULL)
    return c->filter->output(c, err);
  return &c->out;
}

void tern__conn_flush(tern__conn *c) {
  tern__worker *w = c->w;
  uv_buf_t iov[TERN__IOV_MAX];
  size_t n, i, total;
  tern__outq *q;
  int r, err;

  if (c->flags & (TERN__C_CLOSING | TERN__C_WRITING | TERN__C_LINGER))
    return;
  for (;;) {
    q = wire_queue(c, &err);
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
    r = uv_try_write((uv_stream_t *)&c->tcp, iov, (unsigned)n);
    if (r > 0) {
      TERN__STAT_ADD(w->stats.bytes_out, (uint64_t)r);
      tern__outq_consume(w, q, (size_t)r);
      if (c->flags & TERN__C_CLOSING)
        return;
      continue;
    }
    if (r != UV_EAGAIN) {
      tern__conn_close(c);
      return;
    }
    for (i = 0, total = 0; i < n; i++)
      total += iov[i].len;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, iov, (unsigned)n,
                 on_write) != 0) {
      tern__conn_close(c);
      return;
    }
    c->wlen = total;
    c->flags |= TERN__C_WRITING;
    tern__conn_timer(c, TERN__T_WRITE);
    return;
  }
  if ((c->flags & TERN__C_CLOSE_AFTER) && c->nq == 0 && c->out.count == 0) {
    /* Over TLS, the close_notify alert goes out before our FIN. */
    if (c->filter != NULL && c->filter->shutdown(c)) {
      tern__conn_flush(c);
      return;
    }
    linger(c);
  } else {
    tern__conn_update_timer(c); /* and give back an idle read buffer */
  }
}

static void on_write(uv_write_t *req, int status) {
  tern__conn *c = TERN__CONTAINER_OF(req, tern__conn, wreq);
  tern__worker *w = c->w;

  c->flags &= ~(unsigned)TERN__C_WRITING;
  if (status < 0 || (c->flags & TERN__C_CLOSING)) {
    tern__conn_close(c);
    return;
  }
  TERN__STAT_ADD(w->stats.bytes_out, c->wlen);
  tern__outq_consume(w, c->filter != NULL ? c->filter->wire(c) : &c->out,
                     c->wlen);
  c->wlen = 0;
  if (c->flags & TERN__C_CLOSING)
    return;
  tern__conn_timer(c, TERN__T_NONE);
  tern__conn_flush(c);
}

/* ---- Closing ------------------------------------------------------- */

void tern__conn_close(tern__conn *c) {
  if (c->flags & TERN__C_CLOSING)
    return;
  c->flags |= TERN__C_CLOSING;
  tern__conn_timer_stop(c);
  if (c->flags & TERN__C_DIRTY) {
    tern__list_remove(&c->dirty_link);
    c->flags &= ~(unsigned)TERN__C_DIRTY;
  }
  if (tern__list_linked(&c->all_link))
    tern__list_remove(&c->all_link);
  tern__conn_read_stop(c);
  c->proto->close(c);
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}
