/* What HTTP/2 and HTTP/3 share (core/mux.h): the out-of-line part, and a
 * request stream's way from its head to its handler. */
#include "core/mux.h"

#include <stdatomic.h>

#include "core/outq.h"
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
  r->body_declared = (s->flags & TERN__MS_REMOTE_DONE) ? 0
                     : s->has_length ? (int64_t)s->content_length
                                     : -1;
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
      if (m->dead)
        break;
      if (!(s->flags & TERN__MS_OPEN)) {
        /* Closed inside the callback: the stream's close gave back what
         * was still held and owed, not these bytes, which were neither. */
        m->ops->release(m, s, n);
        break;
      }
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

int tern__mux_data(tern__mux_conn *m, tern__mux_stream *s, tern__timer *t,
                   const uint8_t *data, size_t len) {
  tern_request *r = s->r;
  int status;

  s->received += len;
  if (len > 0 && t->kind == TERN__T_BODY)
    tern__timer_set(m->w, t, TERN__T_BODY); /* progress re-arms it */
  if ((r->flags & TERN__RQ_ENDED) || s->status != 0 || r->route == NULL ||
      atomic_load_explicit(&r->gone, memory_order_acquire)) {
    m->ops->consume(m, s, len); /* answered already: the bytes are dropped */
    return 0;
  }
  if (!(r->flags & TERN__RQ_STREAM)) {
    status = tern__request_collect(r, data, len);
    m->ops->consume(m, s, len);
    if (status != 0) {
      r->refs++;
      tern__mux_answer(m, s, status, NULL, 0);
      tern__request_unref(r);
    }
    return 0;
  }
  if (s->pend.len == 0 && s->owed == 0 && (r->flags & TERN__RQ_READING) &&
      !(r->flags & TERN__RQ_PAUSED)) {
    r->refs++;
    r->bytes_in += len;
    r->body_fn(r, TERN_BODY_DATA, (const char *)data, len, r->body_user);
    if (!m->dead && (s->flags & TERN__MS_OPEN)) {
      if (r->flags & TERN__RQ_PAUSED)
        s->owed += len; /* credited when the handler resumes */
      else
        m->ops->consume(m, s, len);
    } else if (!m->dead) {
      m->ops->release(m, s, len); /* closed inside the callback */
    }
    tern__request_unref(r);
    return 0;
  }
  /* Not reading (yet) or paused: hold the bytes; the stream's window
   * bounds them. */
  if (tern__mux_hold(m, s, data, len) != 0) {
    m->ops->consume(m, s, len);
    return 1;
  }
  return 0;
}

int tern__mux_write(tern_request *r, int state, const void *p, size_t len,
                    int copy, tern_write_fn done, void *duser,
                    tern_release_fn release, void *ruser) {
  tern__worker *w = r->w;
  int rc = 0;

  if (!(r->flags & TERN__RQ_HEAD) && r->resp_left >= 0 &&
      (uint64_t)len > (uint64_t)r->resp_left)
    return TERN_EINVAL;
  if (r->flags & TERN__RQ_HEAD)
    len = 0; /* HEAD: the length was announced, the bytes are not sent */
  if (state < 0)
    return TERN_ECLOSED;
  if (state == 0) {
    /* A bodyless answer, complete and its stream closed already: there
     * is nothing to send, so the write is done at once. */
    if (release != NULL)
      release((void *)(uintptr_t)p, ruser);
    if (done != NULL) {
      if (tern__outq_mark(w, &r->out, TERN__SEG_MARK, r, done, duser) != 0)
        return TERN_ENOMEM;
      tern__outq_consume(w, &r->out, 0);
    }
    return 0;
  }
  if (len > 0 || release != NULL) {
    if (copy)
      rc = tern__outq_copy(w, &r->out, p, len);
    else
      rc = tern__outq_ref(w, &r->out, p, len, release, ruser);
  }
  if (rc == 0 && done != NULL)
    rc = tern__outq_mark(w, &r->out, TERN__SEG_MARK, r, done, duser);
  if (rc != 0)
    return rc;
  if (r->resp_left > 0)
    r->resp_left -= (int64_t)len;
  return 0;
}

int tern__mux_end(tern__mux_conn *m, tern__mux_stream *s, tern_request *r) {
  r->flags |= TERN__RQ_ENDED;
  if (m == NULL)
    return 0;
  if (r->resp_left > 0) {
    tern__log(m->w->srv, TERN_LOG_WARN, "response shorter than Content-Length");
    r->flags |= TERN__RQ_ABORT;
  }
  tern__mux_uncount(m, s); /* what is left waits for the client's window */
  m->ops->timer(m, s);
  return (r->flags & TERN__RQ_ABORT) ? -1 : 1;
}

void tern__mux_end_queued(tern__mux_conn *m, tern__mux_stream *s) {
  tern_request *r = s->r;
  s->flags |= TERN__MS_RESP_END;
  if ((r->flags & TERN__RQ_STREAM) && !(r->flags & TERN__RQ_BODY_DONE))
    tern__mux_drop_held(m, s); /* the rest of the body is not wanted */
}

void tern__mux_length(tern__mux_stream *s, const uint8_t *v, size_t n) {
  uint64_t cl = 0;
  size_t i;
  for (i = 0; i < n && cl < (1ull << 60); i++)
    cl = cl * 10 + (uint64_t)(v[i] - '0');
  s->content_length = cl;
  s->has_length = 1;
}

int tern__mux_trailer(tern__mux_conn *m, tern__mux_stream *s, const void *name,
                      size_t name_len, const void *value, size_t value_len) {
  tern_request *r = s->r;
  tern_header *t =
      tern__realloc(m->w->srv, r->trailers, (r->ntrailers + 1) * sizeof(*t));
  if (t == NULL)
    return TERN_ENOMEM;
  r->trailers = t;
  t[r->ntrailers].name = name;
  t[r->ntrailers].name_len = name_len;
  t[r->ntrailers].value = value;
  t[r->ntrailers].value_len = value_len;
  r->ntrailers++;
  return 0;
}

int tern__mux_body_timeout(tern__mux_conn *m, tern__mux_stream *s, int *sent) {
  tern_request *r = s->r;
  unsigned started = r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED);

  s->flags |= TERN__MS_TIMEDOUT;
  *sent = (s->flags & TERN__MS_END_SENT) != 0;
  if ((r->flags & TERN__RQ_READING) &&
      !(r->flags & (TERN__RQ_BODY_DONE | TERN__RQ_ENDED)) &&
      r->body_fn != NULL) {
    r->flags |= TERN__RQ_BODY_DONE;
    r->body_fn(r, TERN_BODY_ERROR, NULL, 0, r->body_user);
  }
  if (m->dead || !(s->flags & TERN__MS_OPEN))
    return 0;
  if (started)
    return 1;
  if (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED))
    return 0; /* the handler answered just now: its answer goes out */
  if (!(r->flags & TERN__RQ_HANDLED)) {
    tern__mux_answer(m, s, 408, NULL, 0);
    return 0;
  }
  if (tern__request_answer_held(r, 408) != 0 && !m->dead &&
      (s->flags & TERN__MS_OPEN)) {
    *sent = 0;
    return 1;
  }
  return 0;
}

void tern__mux_closed(tern__worker *w, tern_request *r, int complete) {
  if (complete) {
    TERN__STAT_ADD(w->stats.requests, 1);
    r->flags |= TERN__RQ_WRITTEN;
    return;
  }
  atomic_store_explicit(&r->gone, 1, memory_order_release);
  if ((r->flags & TERN__RQ_READING) && !(r->flags & TERN__RQ_BODY_DONE) &&
      !(r->flags & TERN__RQ_ENDED) && r->body_fn != NULL) {
    r->flags |= TERN__RQ_BODY_DONE;
    r->body_fn(r, TERN_BODY_ERROR, NULL, 0, r->body_user);
  }
  tern__request_gone(r);
}

void tern__mux_unref_closed(tern_request *r) {
  if (!(r->flags & TERN__RQ_HANDLED) && !(r->flags & TERN__RQ_ENDED)) {
    /* Never handed to a handler: the user's reference goes too. */
    r->flags |= TERN__RQ_ENDED;
    tern__request_unref(r);
  }
  tern__request_unref(r); /* the adapter's */
  tern__request_unref(r); /* the one the caller took */
}

void tern__mux_run_flows(tern__mux_conn *m) {
  tern__list *l;
  m->flow = 0;
again:
  for (l = m->streams.next; l != &m->streams && !m->dead; l = l->next) {
    tern__mux_stream *s = TERN__CONTAINER_OF(l, tern__mux_stream, link);
    if (s->flags & TERN__MS_FLOW) {
      s->flags &= ~(unsigned)TERN__MS_FLOW;
      tern__mux_deliver(m, s); /* may change the list: start over */
      goto again;
    }
  }
}
