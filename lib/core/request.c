/* The request object every adapter produces, and its accessors.
 *
 * A request is recycled through the worker's pool. Its header array is
 * part of the same allocation, sized by max_header_count, and its strings
 * are views into a refcounted read buffer, so a keep-alive request costs
 * no heap allocation at all.
 *
 * Lifetime: the user holds one reference until the response is finished;
 * the connection holds one while the request is in its pipeline; the
 * end-of-response marker in the output holds one until it is written.
 */
#include <arpa/inet.h>
#include <string.h>

#include "internal.h"

tern_request *tern__request_new(tern__conn *c) {
  tern__worker *w = c->w;
  tern_request *r = tern__pool_get(w, &w->req_pool);
  if (r == NULL)
    return NULL;
  memset(r, 0, offsetof(tern_request, match));
  r->match.nparams = 0;
  r->match.status = 404;
  r->conn = c;
  r->w = w;
  r->refs = 2;
  r->headers = (tern_header *)(void *)(r + 1);
  r->headers_cap = w->srv->s.max_header_count;
  r->resp_left = -1;
  c->refs++;
  return r;
}

void tern__request_unref(tern_request *r) {
  tern__worker *w = r->w;
  tern__conn *c = r->conn;
  if (--r->refs > 0)
    return;
  if (c->proto->release != NULL)
    c->proto->release(r);
  tern__rbuf_unref(w, r->rbuf);
  tern__free(w->srv, r->body_buf);
  tern__free(w->srv, r->trailers);
  tern__outq_free(w, &r->out);
  tern__pool_put(w, &w->req_pool, r);
  /* Parsing (or reading) may have stopped at the per-connection request
   * bound: let the adapter look again. */
  if ((c->rpos < c->rlen || !(c->flags & TERN__C_READING)) &&
      !(c->flags & (TERN__C_IN_READ | TERN__C_CLOSING)))
    tern__conn_reprocess(c);
  tern__conn_unref(c);
}

void tern__request_gone(tern_request *r) {
  tern_gone_fn fn = r->gone_fn;
  atomic_store_explicit(&r->gone, 1, memory_order_release);
  r->gone_fn = NULL; /* at most once */
  /* A request that became a WebSocket was finished by tern_ws_accept;
   * its socket reports the end through on_close instead. */
  if (fn == NULL || (r->flags & (TERN__RQ_ENDED | TERN__RQ_TUNNEL)))
    return;
  /* The callback may finish the request; the caller's loop still uses it
   * afterwards. */
  r->refs++;
  fn(r, r->gone_user);
  tern__request_unref(r);
}

static void blocking_work(uv_work_t *work) {
  tern_request *r = work->data;
  r->route->handler(r, r->route->user);
}

static void blocking_done(uv_work_t *work, int status) {
  (void)work;
  (void)status;
}

void tern__request_dispatch(tern_request *r) {
  const tern__route *route = r->route;
  r->flags |= TERN__RQ_HANDLED;
  if (route->flags & TERN_ROUTE_BLOCKING) {
    r->work.data = r;
    if (uv_queue_work(r->w->loop, &r->work, blocking_work, blocking_done) == 0)
      return;
    tern__respond_status(r, 503, NULL, 0);
    return;
  }
  route->handler(r, route->user);
}

/* Append to a collected body, within the route's limit; the buffer grows
 * by doubling. Returns 0, or the status to answer (413, or 503 when out
 * of memory). Every adapter collects through this. */
int tern__request_collect(tern_request *r, const void *p, size_t n) {
  tern_server *srv = r->w->srv;
  if (r->body_len + n > r->route->max_body)
    return 413;
  if (r->body_len + n > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap * 2 : 4096;
    char *nb;
    while (cap < r->body_len + n)
      cap *= 2;
    if (cap > r->route->max_body)
      cap = r->route->max_body;
    nb = tern__realloc(srv, r->body_buf, cap);
    if (nb == NULL)
      return 503;
    r->body_buf = nb;
    r->body_cap = cap;
  }
  memcpy(r->body_buf + r->body_len, p, n);
  r->body_len += n;
  return 0;
}

/* ---- Accessors ----------------------------------------------------- */

#define VIEW(field)                                                            \
  do {                                                                         \
    if (len != NULL)                                                           \
      *len = r->field##_len;                                                   \
    return r->field;                                                           \
  } while (0)

const char *tern_request_method(const tern_request *r, size_t *len) {
  VIEW(method);
}
const char *tern_request_target(const tern_request *r, size_t *len) {
  VIEW(target);
}
const char *tern_request_path(const tern_request *r, size_t *len) {
  VIEW(path);
}
const char *tern_request_query(const tern_request *r, size_t *len) {
  VIEW(query);
}
const char *tern_request_authority(const tern_request *r, size_t *len) {
  VIEW(authority);
}

int tern_request_protocol(const tern_request *r) {
  return r->protocol;
}

const char *tern_request_param(const tern_request *r, const char *name,
                               size_t name_len, size_t *len) {
  size_t i;
  for (i = 0; i < r->match.nparams; i++) {
    const tern__route_param *p = &r->match.params[i];
    if (p->name_len == name_len && memcmp(p->name, name, name_len) == 0) {
      if (len != NULL)
        *len = p->value_len;
      return p->value;
    }
  }
  return NULL;
}

const char *tern_request_header(const tern_request *r, const char *name,
                                size_t name_len, size_t *len) {
  size_t i;
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *h = &r->headers[i];
    if (h->name_len == name_len && tern__ieq(h->name, name, name_len)) {
      if (len != NULL)
        *len = h->value_len;
      return h->value;
    }
  }
  return NULL;
}

size_t tern_request_header_count(const tern_request *r) {
  return r->nheaders;
}

const tern_header *tern_request_header_at(const tern_request *r, size_t i) {
  return i < r->nheaders ? &r->headers[i] : NULL;
}

size_t tern_request_trailer_count(const tern_request *r) {
  return r->ntrailers;
}

const tern_header *tern_request_trailer_at(const tern_request *r, size_t i) {
  return i < r->ntrailers ? &r->trailers[i] : NULL;
}

const char *tern_request_body(const tern_request *r, size_t *len) {
  if (len != NULL)
    *len = r->body_len;
  return r->body != NULL ? r->body : "";
}

void tern__addr_set(tern__addr *a, const struct sockaddr *sa) {
  memset(a, 0, sizeof(*a));
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)(void *)sa;
    a->family = AF_INET;
    a->port = ntohs(in->sin_port);
    memcpy(a->addr, &in->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(void *)sa;
    a->family = AF_INET6;
    a->port = ntohs(in6->sin6_port);
    memcpy(a->addr, &in6->sin6_addr, 16);
  }
}

/* The addresses were stored at accept, so this reads no socket: it is
 * safe from any thread while the request is held, also after the client
 * has gone and its descriptor was reused. */
static int format_addr(const tern__addr *a, char *buf, size_t size, int *port) {
  if (buf == NULL || size < 46)
    return TERN_EINVAL;
  if (a->family != AF_INET && a->family != AF_INET6)
    return TERN_EIO;
  if (inet_ntop(a->family, a->addr, buf, (socklen_t)size) == NULL)
    return TERN_EIO;
  if (port != NULL)
    *port = a->port;
  return 0;
}

int tern_request_peer(const tern_request *r, char *buf, size_t size,
                      int *port) {
  if (r == NULL)
    return TERN_EINVAL;
  return format_addr(&r->conn->peer, buf, size, port);
}

int tern_request_local(const tern_request *r, char *buf, size_t size,
                       int *port) {
  if (r == NULL)
    return TERN_EINVAL;
  return format_addr(&r->conn->local, buf, size, port);
}

int tern_request_route_status(const tern_request *r) {
  return r->match.status;
}

const char *tern_request_allow(const tern_request *r, size_t *len) {
  int has = r->match.status == 405;
  if (len != NULL)
    *len = has ? r->match.allow_len : 0;
  return has ? r->match.allow : NULL;
}

void tern_request_set_data(tern_request *r, void *data) {
  r->data = data;
}
void *tern_request_data(const tern_request *r) {
  return r->data;
}

int tern_request_on_gone(tern_request *r, tern_gone_fn fn, void *user) {
  if (r == NULL)
    return TERN_EINVAL;
  if (!tern__on_worker(r->w) || (r->flags & TERN__RQ_ENDED))
    return TERN_ESTATE;
  if (atomic_load_explicit(&r->gone, memory_order_acquire))
    return TERN_ECLOSED;
  r->gone_fn = fn;
  r->gone_user = fn != NULL ? user : NULL;
  return 0;
}

/* ---- Streaming bodies ---------------------------------------------- */

int tern_request_read(tern_request *r, tern_body_fn fn, void *user) {
  if (r == NULL || fn == NULL)
    return TERN_EINVAL;
  if (!(r->flags & TERN__RQ_STREAM) || (r->flags & TERN__RQ_READING) ||
      !tern__on_worker(r->w))
    return TERN_ESTATE;
  if (atomic_load(&r->gone))
    return TERN_ECLOSED;
  r->body_fn = fn;
  r->body_user = user;
  r->flags |= TERN__RQ_READING;
  r->conn->proto->body_flow(r);
  return 0;
}

int tern_request_pause(tern_request *r) {
  if (r == NULL)
    return TERN_EINVAL;
  if (!(r->flags & TERN__RQ_READING) || !tern__on_worker(r->w))
    return TERN_ESTATE;
  r->flags |= TERN__RQ_PAUSED;
  r->conn->proto->body_flow(r);
  return 0;
}

int tern_request_resume(tern_request *r) {
  if (r == NULL)
    return TERN_EINVAL;
  if (!(r->flags & TERN__RQ_READING) || !tern__on_worker(r->w))
    return TERN_ESTATE;
  r->flags &= ~(unsigned)TERN__RQ_PAUSED;
  r->conn->proto->body_flow(r);
  return 0;
}
