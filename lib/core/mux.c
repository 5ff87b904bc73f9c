/* What HTTP/2 and HTTP/3 share (core/mux.h): the out-of-line part, and a
 * request stream's way from its head to its handler. */
#include "core/mux.h"

#include "core/request.h"
#include "core/stats.h"
#include "core/worker.h"

/* One body callback's largest piece. */
#define MUX_DELIVER_MAX (64 * 1024)

int tern__mux_pend_add(tern__worker *w, tern__mux_pend *b, const void *p,
                       size_t n) {
  if (b->off > 0 && b->off + b->len + n > b->cap) {
    memmove(b->p, b->p + b->off, b->len);
    b->off = 0;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 16384;
    char *nb;
    while (cap < b->len + n)
      cap *= 2;
    nb = tern__small_realloc(w, b->p, cap);
    if (nb == NULL)
      return TERN_ENOMEM;
    b->p = nb;
    b->cap = cap;
  }
  memcpy(b->p + b->off + b->len, p, n);
  b->len += n;
  return 0;
}

int tern__mux_hold(tern__mux_conn *m, tern__mux_stream *s, const void *p,
                   size_t n) {
  int rc = tern__mux_pend_add(m->w, &s->pend, p, n);
  if (rc == 0)
    m->held += n;
  return rc;
}

void tern__mux_drop_held(tern__mux_conn *m, tern__mux_stream *s) {
  size_t n = s->pend.len + s->owed;
  m->held -= s->pend.len;
  s->pend.len = s->pend.off = 0;
  s->owed = 0;
  if (n > 0)
    m->ops->release(m, s, n);
}

void tern__mux_answer(tern__mux_conn *m, tern__mux_stream *s, int status,
                      const char *allow, size_t allow_len) {
  tern_request *r = s->r;
  if (r->flags & (TERN__RQ_ENDED | TERN__RQ_STARTED))
    return;
  tern__mux_count(m, s);
  tern__respond_status(r, status, allow, allow_len);
}

void tern__mux_route(tern__mux_conn *m, tern__mux_stream *s) {
  tern_server *srv = m->w->srv;
  tern_request *r = s->r;
  const char *allow;
  size_t allow_len;
  int rc;

  if (s->status != 0) {
    tern__mux_answer(m, s, s->status, NULL, 0);
    return;
  }
  if (r->target_len > srv->s.max_uri_length) {
    tern__mux_answer(m, s, 414, NULL, 0);
    return;
  }
  rc = tern__request_route(r,
                           r->path_len == 1 && r->path[0] == '*' &&
                               r->method_len == 7 &&
                               memcmp(r->method, "OPTIONS", 7) == 0,
                           s->has_length && !(s->flags & TERN__MS_REMOTE_DONE)
                               ? (int64_t)s->content_length
                               : -1,
                           &allow, &allow_len);
  if (rc != 0) {
    tern__mux_answer(m, s, rc, allow, allow_len);
    return;
  }
  if (r->flags & TERN__RQ_STREAM) {
    /* Even an empty body is delivered, as TERN_BODY_END, once the handler
     * reads. */
    tern__mux_count(m, s);
    tern__request_dispatch(r);
    return;
  }
  if (s->flags & TERN__MS_REMOTE_DONE) {
    r->flags |= TERN__RQ_BODY_DONE;
    tern__mux_count(m, s);
    tern__request_dispatch(r);
    return;
  }
  /* Otherwise the body is collected as DATA arrives. */
}

void tern__mux_head_done(tern__mux_conn *m, tern__mux_stream *s) {
  tern_request *r = s->r;
  const char *q;

  s->flags |= TERN__MS_HEAD_DONE;
  if (r->target != NULL) {
    r->path = r->target;
    q = memchr(r->target, '?', r->target_len);
    if (q != NULL) {
      r->path_len = (size_t)(q - r->target);
      r->query = q + 1;
      r->query_len = r->target_len - r->path_len - 1;
    } else {
      r->path_len = r->target_len;
    }
  } else {
    r->path = r->target = ""; /* CONNECT */
  }
  if (r->method_len == 4 && memcmp(r->method, "HEAD", 4) == 0)
    r->flags |= TERN__RQ_HEAD;
  if (s->flags & TERN__MS_WEBSOCKET) {
    /* An extended CONNECT (RFC 8441, RFC 9220) is routed as the GET of an
     * HTTP/1.1 WebSocket handshake, so one route serves every carrier;
     * its DATA is the WebSocket stream, so the handler runs at once. */
    r->method = "GET";
    r->method_len = 3;
    r->flags |= TERN__RQ_WS_CONNECT;
  }
  /* Host fallback and the cookie join are the core's; a request already
   * failed is answered without joining. */
  if (tern__request_fields(r, s->status == 0 ? s->ncookie : 0, &s->cookie) != 0)
    s->status = 503;
  tern__mux_route(m, s);
}

void tern__mux_remote_done(tern__mux_conn *m, tern__mux_stream *s) {
  tern_request *r = s->r;
  s->flags |= TERN__MS_REMOTE_DONE;
  if ((r->flags & TERN__RQ_ENDED) || !(s->flags & TERN__MS_HEAD_DONE))
    return;
  if (r->flags & TERN__RQ_STREAM) {
    tern__mux_deliver(m, s);
    return;
  }
  if (!(r->flags & TERN__RQ_HANDLED) && r->route != NULL && s->status == 0) {
    r->body = r->body_buf;
    r->flags |= TERN__RQ_BODY_DONE;
    tern__mux_count(m, s);
    tern__request_dispatch(r);
  }
}

void tern__mux_deliver(tern__mux_conn *m, tern__mux_stream *s) {
  tern_request *r = s->r;

  r->refs++;
  for (;;) {
    unsigned f = r->flags;
    if (m->dead || !(s->flags & TERN__MS_OPEN) || (f & TERN__RQ_BODY_DONE))
      break;
    if (f & TERN__RQ_ENDED) {
      tern__mux_drop_held(m, s); /* answered without reading the rest */
      break;
    }
    if (!(f & TERN__RQ_READING) || (f & TERN__RQ_PAUSED))
      break;
    if (s->owed > 0) {
      size_t n = s->owed;
      s->owed = 0;
      m->ops->consume(m, s, n);
    }
    if (s->pend.len > 0) {
      size_t n = s->pend.len < MUX_DELIVER_MAX ? s->pend.len : MUX_DELIVER_MAX;
      const char *p = s->pend.p + s->pend.off;
      s->pend.off += n;
      s->pend.len -= n;
      r->bytes_in += n;
      m->held -= n;
      r->body_fn(r, TERN_BODY_DATA, p, n, r->body_user);
      if (s->pend.len == 0)
        s->pend.off = 0;
      if (m->dead || !(s->flags & TERN__MS_OPEN))
        break;
      if (r->flags & TERN__RQ_PAUSED)
        s->owed += n;
      else
        m->ops->consume(m, s, n);
      continue;
    }
    if (s->flags & TERN__MS_REMOTE_DONE) {
      r->flags |= TERN__RQ_BODY_DONE;
      r->body_fn(r, TERN_BODY_END, NULL, 0, r->body_user);
    } else if (m->eof) {
      r->flags |= TERN__RQ_BODY_DONE | TERN__RQ_ABORT;
      r->body_fn(r, TERN_BODY_ERROR, NULL, 0, r->body_user);
    }
    break;
  }
  if (!m->dead && (s->flags & TERN__MS_OPEN))
    m->ops->timer(m, s);
  tern__request_unref(r);
}

void tern__mux_body_flow(tern__mux_conn *m, tern__mux_stream *s) {
  tern_request *r = s->r;
  if ((r->flags & TERN__RQ_READING) && !(r->flags & TERN__RQ_PAUSED)) {
    s->flags |= TERN__MS_FLOW;
    m->flow = 1;
    m->ops->schedule(m);
  }
  m->ops->timer(m, s); /* reading: the body timer; paused: none */
}
