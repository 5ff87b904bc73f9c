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
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/worker.h"

tern_request *tern__request_new(tern__conn *c) {
  tern__worker *w = c->w;
  tern_request *r = tern__pool_get(w, &w->req_pool);
  if (r == NULL)
    return NULL;
  memset(r, 0, offsetof(tern_request, match));
  r->match.nparams = 0;
  r->match.status = 404;
  r->conn = c;
  r->ops = c->proto->ops;
  r->w = w;
  r->refs = 2;
  r->headers = (tern_header *)(void *)(r + 1);
  r->headers_cap = w->srv->s.max_header_count;
  r->resp_left = -1;
  if (w->srv->timing)
    r->t_head = tern__now(w);
  r->sidx = c->counted_proto >= 0 ? c->counted_proto : TERN_STATS_H1;
  TERN__STAT_ADD(w->stats.streams[r->sidx], 1);
  c->refs++;
  return r;
}

static void cut_keep(tern_request *r);
static void block_retire(tern_request *r, int to_pool);

/* A collected body's buffer: up to TERN__SMALL_MAX bytes from the worker's
 * small pools, so that the common small body (a form, a JSON document, a
 * chunked one that could not be viewed in place) costs no allocation; a
 * larger one from the allocator, grown with realloc. Which of the two
 * follows from body_cap. On the worker, or serialised with it. */
static void body_free(tern__worker *w, tern_request *r) {
  if (r->body_cap <= TERN__SMALL_MAX)
    tern__small_free(w, r->body_buf);
  else
    tern__free(w->srv, r->body_buf);
}

void tern__request_unref(tern_request *r) {
  tern__worker *w = r->w;
  tern__conn *c = r->conn;
  if (--r->refs > 0)
    return;
  tern__request_finished(r);
  if (r->filter_state != NULL)
    r->route->filter->release(r); /* r->ops is the adapter's again */
  if (r->flags & TERN__RQ_CUT) {
    tern__outq_free(w, &r->out);
    cut_keep(r); /* the rest stays the holder's */
  } else {
    if (r->ops->release != NULL)
      r->ops->release(r);
    tern__rbuf_unref(w, r->rbuf);
    body_free(w, r);
    tern__free(w->srv, r->trailers);
    tern__outq_free(w, &r->out);
    block_retire(r, 1);
  }
  tern__conn_unref(c);
}

/* ---- The block and the user's pins (tern_request_ref) -------------- *
 *
 * Everything a request holds but its block goes when the worker is done
 * with it; the block itself goes when, besides, no pin is left. A pin is
 * only taken by someone who holds the request already (the user before
 * the finishing call, or another pin), so a request found unpinned when
 * the worker is done can never be pinned again: that common case costs
 * one load. */

/* The worker is done with `r` (everything else was let go of): hand its
 * block back (to the worker's pool when `to_pool`), or leave it to the
 * last tern_request_unref. What a holder may still call then finds the
 * request finished: the response calls see TERN__U_DONE, the body and
 * gone calls its flags, and the views are emptied. On the worker, or
 * serialised with it (a cut request). */
static void block_retire(tern_request *r, int to_pool) {
  tern__worker *w = r->w;
  if (atomic_load_explicit(&r->pins, memory_order_acquire) != 0) {
    r->conn = NULL;
    r->flags =
        (r->flags | TERN__RQ_ENDED) &
        ~(unsigned)(TERN__RQ_READING | TERN__RQ_STREAM | TERN__RQ_PAUSED);
    atomic_store_explicit(&r->gone, 1, memory_order_release);
    r->body_fn = NULL;
    r->gone_fn = NULL;
    r->method = r->target = r->path = r->query = r->authority = NULL;
    r->method_len = r->target_len = r->path_len = r->query_len =
        r->authority_len = 0;
    r->nheaders = r->ntrailers = 0;
    r->trailers = NULL;
    r->rbuf = NULL;
    r->body = r->body_buf = NULL;
    r->body_len = r->body_cap = 0;
    r->match.nparams = 0;
    /* The last unref frees the block with the server's allocator. */
    atomic_fetch_add(&w->srv->refs, 1);
    if (atomic_fetch_or_explicit(&r->pins, TERN__PIN_RETIRED,
                                 memory_order_acq_rel) >= TERN__PIN_ONE)
      return;
    atomic_fetch_sub(&w->srv->refs, 1); /* the pins went meanwhile */
  }
  if (to_pool)
    tern__pool_put(w, &w->req_pool, r);
  else
    tern__free(w->srv, r);
}

void tern_request_ref(tern_request *r) {
  if (r != NULL)
    atomic_fetch_add_explicit(&r->pins, TERN__PIN_ONE, memory_order_relaxed);
}

void tern_request_unref(tern_request *r) {
  unsigned old;
  tern__worker *w;
  tern_server *srv;
  if (r == NULL)
    return;
  old = atomic_load_explicit(&r->pins, memory_order_relaxed);
  do {
    if (old < TERN__PIN_ONE) {
      tern__log(r->w->srv, TERN_LOG_ERROR,
                "tern_request_unref refused: the request holds no "
                "reference from tern_request_ref");
      return;
    }
  } while (!atomic_compare_exchange_weak_explicit(
      &r->pins, &old, old - TERN__PIN_ONE, memory_order_acq_rel,
      memory_order_relaxed));
  if (old != (TERN__PIN_ONE | TERN__PIN_RETIRED))
    return;
  /* The last pin of a request the worker is done with. */
  w = r->w;
  srv = w->srv;
  if (tern__on_worker(w) && !w->cleaned)
    tern__pool_put(w, &w->req_pool, r);
  else
    tern__free(srv, r);
  tern__server_unref(srv);
}

static int pool_unqueue(tern_request *r);

void tern__request_gone(tern_request *r) {
  tern_gone_fn fn = r->gone_fn;
  atomic_store_explicit(&r->gone, 1, memory_order_release);
  r->gone_fn = NULL; /* at most once */
  /* A blocking request still waiting for a pool thread is dropped from
   * the queue: running it would answer nobody, and a client that sends
   * and leaves would keep every thread busy for clients that stay. No
   * handler ever saw it, so it ends like an unhandled request. */
  if ((r->flags & (TERN__RQ_HANDLED | TERN__RQ_ENDED)) == TERN__RQ_HANDLED &&
      (r->route->flags & TERN_ROUTE_BLOCKING) && pool_unqueue(r)) {
    tern__request_unhold(r);
    r->flags |= TERN__RQ_ENDED;
    tern__request_unref(r);
    return;
  }
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

/* ---- The blocking pool ---------------------------------------------- *
 *
 * Blocking handlers run on threads of tern's own rather than on libuv's
 * pool: a uv_work_t keeps its loop alive until the work returns, so one
 * handler blocking past the stop deadline would keep tern_run from
 * returning. These threads belong to no loop. They are detached and each
 * holds a reference on the server, so whatever they touch after tern_run
 * returned (the pool's lock, a request cut by the deadline) stays valid
 * until they are done. Started on demand, up to bp_max
 * (UV_THREADPOOL_SIZE, 4 by default); idle ones wait on bp_cond. */

static void *pool_thread(void *arg) {
  tern_server *srv = arg;
  uv_mutex_lock(&srv->bp_lock);
  for (;;) {
    tern_request *r;
    tern__route route;
    while (srv->bp_head == NULL && !srv->bp_closing) {
      srv->bp_idle++;
      uv_cond_wait(&srv->bp_cond, &srv->bp_lock);
      srv->bp_idle--;
    }
    if ((r = srv->bp_head) == NULL)
      break;
    srv->bp_head = r->pool_next;
    if (srv->bp_head == NULL)
      srv->bp_tail = NULL;
    srv->bp_queued--;
    r->pool_queued = 0;
    /* Copied under the lock: tern_server_free may free the routes while
     * this handler still runs. */
    route = *r->route;
    uv_mutex_unlock(&srv->bp_lock);
    route.handler(r, route.user);
    uv_mutex_lock(&srv->bp_lock);
  }
  srv->bp_threads--;
  uv_mutex_unlock(&srv->bp_lock);
  tern__server_unref(srv);
  return NULL;
}

static int pool_submit(tern_request *r) {
  tern_server *srv = r->w->srv;
  int rc = 0;
  uv_mutex_lock(&srv->bp_lock);
  if (srv->bp_closing) {
    uv_mutex_unlock(&srv->bp_lock);
    return TERN_ESTATE;
  }
  r->pool_next = NULL;
  r->pool_queued = 1;
  if (srv->bp_tail != NULL)
    srv->bp_tail->pool_next = r;
  else
    srv->bp_head = r;
  srv->bp_tail = r;
  srv->bp_queued++;
  /* Idle threads that were signalled may not have woken yet: a new one
   * is due whenever the queue outgrows them. */
  if (srv->bp_queued > srv->bp_idle && srv->bp_threads < srv->bp_max) {
    pthread_attr_t attr;
    pthread_t t;
    atomic_fetch_add(&srv->refs, 1);
    if (pthread_attr_init(&attr) != 0 ||
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) != 0 ||
        pthread_create(&t, &attr, pool_thread, srv) != 0) {
      atomic_fetch_sub(&srv->refs, 1);
      if (srv->bp_threads == 0)
        rc = TERN_EIO; /* no thread will ever take it */
    } else {
      srv->bp_threads++;
    }
    pthread_attr_destroy(&attr);
  }
  if (rc != 0) {
    srv->bp_head = srv->bp_tail = NULL; /* r was the only one */
    srv->bp_queued = 0;
    r->pool_queued = 0;
  } else {
    uv_cond_signal(&srv->bp_cond);
  }
  uv_mutex_unlock(&srv->bp_lock);
  return rc;
}

/* Take a request that no thread has started out of the queue; 1 if it
 * was there. */
static int pool_unqueue(tern_request *r) {
  tern_server *srv = r->w->srv;
  tern_request **pp, *prev = NULL;
  int found = 0;
  uv_mutex_lock(&srv->bp_lock);
  if (r->pool_queued) {
    for (pp = &srv->bp_head; *pp != NULL; prev = *pp, pp = &(*pp)->pool_next)
      if (*pp == r) {
        *pp = r->pool_next;
        if (srv->bp_tail == r)
          srv->bp_tail = prev;
        srv->bp_queued--;
        break;
      }
    r->pool_queued = 0;
    found = 1;
  }
  uv_mutex_unlock(&srv->bp_lock);
  return found;
}

void tern__pool_threads_close(tern_server *srv) {
  uv_mutex_lock(&srv->bp_lock);
  srv->bp_closing = 1;
  uv_cond_broadcast(&srv->bp_cond);
  uv_mutex_unlock(&srv->bp_lock);
}

void tern__request_dispatch(tern_request *r) {
  const tern__route *route = r->route;
  unsigned wait;
  r->flags |= TERN__RQ_HANDLED;
  if (r->w->srv->access_fn != NULL)
    r->t_handler = uv_hrtime();
  tern__list_append(&r->w->held, &r->held_link);
  /* Past its address's request rate: 429, its connection kept. */
  if (r->w->srv->admit != NULL &&
      (wait = tern__admit_request(r->w->srv->admit, &r->conn->peer)) != 0) {
    char v[12];
    int n = snprintf(v, sizeof(v), "%u", wait);
    tern__respond_status_with(r, 429, "Retry-After", v, (size_t)n);
    return;
  }
  if (route->flags & TERN_ROUTE_BLOCKING) {
    if (pool_submit(r) == 0)
      return;
    tern__respond_status(r, 503, NULL, 0);
    return;
  }
  route->handler(r, route->user);
}

/* ---- The stop deadline ------------------------------------------------ */

int tern__request_answer_held(tern_request *r, int status) {
  static const tern_header text = {"content-type", 12, "text/plain", 10};
  const tern__req_ops *p = r->ops;
  char body[64];
  int len =
      snprintf(body, sizeof(body), "%d %s\n", status, tern__reason(status));
  int rc = TERN_ESTATE;

  if (!(r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED | TERN__RQ_TUNNEL)) &&
      !atomic_load(&r->gone) && !(r->conn->flags & TERN__C_CLOSING) &&
      len > 0) {
    struct tern_response_head head;
    const tern_header *h = &text;
    size_t n = 1;
    tern__request_started(r, status);
    rc = tern__response_hook(r, status, &h, &n, &head);
    if (rc == 0)
      rc = p->start(r, status, h, n, (int64_t)len);
    tern__response_hook_done(r, &head);
    r->bytes_out += (uint64_t)len;
    if (rc == 0)
      rc = p->write(r, body, (size_t)len, 1, NULL, NULL, NULL, NULL);
    if (rc == 0)
      rc = p->end(r, NULL, 0);
  }
  /* Whatever the user calls from now on finds the client gone. */
  atomic_store_explicit(&r->gone, 1, memory_order_release);
  return rc;
}

void tern__request_cut_answer(tern_request *r) {
  tern__worker *w = r->w;
  tern_gone_fn fn = r->gone_fn;
  w->cut_total++;
  if (tern__request_answer_held(r, 503) == 0)
    w->cut_answered++;
  /* The deadline counts as the client gone (tern.h): the handler hears it
   * now, while its loop still runs, and can let go of what it holds for
   * the request (a timer, a database query's poll handle) instead of
   * keeping the loop, and tern_run, alive. At most once, as for a client
   * that leaves; a tunnel's end is its on_close. */
  r->gone_fn = NULL;
  if (fn == NULL || (r->flags & TERN__RQ_TUNNEL))
    return;
  r->refs++;
  fn(r, r->gone_user);
  tern__request_unref(r);
}

/* The deadline takes over the user's reference: once the last other one
 * goes too (at once, or when the closed connection's output is dropped),
 * tern__request_unref gives back all but the block (cut_keep). */
void tern__request_cut(tern_request *r) {
  tern__request_unhold(r);
  if (pool_unqueue(r)) {
    /* No handler ever saw it: it ends like any unhandled request. */
    r->flags |= TERN__RQ_ENDED;
    tern__request_unref(r);
    return;
  }
  r->flags |= TERN__RQ_CUT | TERN__RQ_ENDED;
  atomic_store_explicit(&r->gone, 1, memory_order_release);
  tern__request_unref(r);
}

/* The last reference of a cut request went (on the worker). Its output
 * is dropped and its connection let go of, so that the worker can finish;
 * what the holder can still see (the head's read buffer, the body, the
 * adapter's state) stays until its finishing call. Whoever comes second
 * frees it: that call if it comes later, or this worker if it came first
 * (it found the inbox closed, or ran on this worker meanwhile). */
static void cut_keep(tern_request *r) {
  tern__worker *w = r->w;
  r->conn = NULL;
  r->flags = (r->flags | TERN__RQ_ENDED | TERN__RQ_CUT) &
             ~(unsigned)(TERN__RQ_READING | TERN__RQ_STREAM);
  r->body_fn = NULL;
  tern__list_append(&w->cut, &r->held_link);
  atomic_fetch_add(&w->srv->refs, 1); /* dropped with the block */
  if (atomic_fetch_or(&r->ustate, TERN__U_CUT) & TERN__U_GAVE_UP)
    tern__request_free_cut(r);
}

/* Give back what a cut request kept, then the block. The caller
 * serialises it with the worker: on the worker itself, or after the
 * worker is gone under its inbox_lock (then the pools it returns to are
 * emptied again at once, since nobody else will). */
static void cut_release(tern_request *r, int worker_gone) {
  tern__worker *w = r->w;
  tern_server *srv = w->srv;
  size_t i;
  tern__list_remove(&r->held_link);
  if (r->ops->release != NULL)
    r->ops->release(r);
  tern__rbuf_unref(w, r->rbuf);
  body_free(w, r);
  tern__free(srv, r->trailers);
  block_retire(r, 0);
  if (worker_gone) {
    tern__pool_drain(w, &w->rbuf_pool);
    for (i = 0; i < TERN__SMALL_CLASSES; i++)
      tern__pool_drain(w, &w->small[i]);
  }
}

void tern__request_give_up(tern_request *r) {
  if (atomic_fetch_or(&r->ustate, TERN__U_GAVE_UP) & TERN__U_CUT)
    tern__request_free_cut(r);
}

void tern__request_free_cut(tern_request *r) {
  tern__worker *w = r->w;
  tern_server *srv = w->srv;
  if (tern__on_worker(w) && !w->cleaned) {
    cut_release(r, 0);
  } else {
    uv_mutex_lock(&w->inbox_lock);
    if (!w->cleaned) {
      r->late_done = 1; /* the worker's cleanup frees it */
      uv_mutex_unlock(&w->inbox_lock);
      return;
    }
    cut_release(r, 1);
    uv_mutex_unlock(&w->inbox_lock);
  }
  tern__server_unref(srv);
}

void tern__request_cut_cleanup(tern__worker *w) {
  tern__list *l, *next;
  unsigned n = 0;
  uv_mutex_lock(&w->inbox_lock);
  w->cleaned = 1;
  for (l = w->cut.next; l != &w->cut; l = next) {
    tern_request *r = TERN__CONTAINER_OF(l, tern_request, held_link);
    next = l->next;
    if (r->late_done) {
      cut_release(r, 0);
      n++;
    }
  }
  uv_mutex_unlock(&w->inbox_lock);
  /* The server outlives this: tern_server_free holds its own reference
   * until after every worker's cleanup. */
  while (n-- > 0)
    atomic_fetch_sub(&w->srv->refs, 1);
}

/* Append to a collected body, within the route's limit; the buffer grows
 * by doubling. Returns 0, or the status to answer (413, or 503 when out
 * of memory). Every adapter collects through this. */
int tern__request_fields(tern_request *r, size_t ncookie, char **joined) {
  tern_header *h = r->headers;
  size_t i, k = 0, size = 0, first = SIZE_MAX;
  char *p;

  *joined = NULL;
  if (r->authority == NULL) {
    for (i = 0; i < r->nheaders; i++) {
      if (h[i].name_len == 4 && memcmp(h[i].name, "host", 4) == 0) {
        r->authority = h[i].value;
        r->authority_len = h[i].value_len;
        break;
      }
    }
  }
  if (ncookie < 2)
    return 0;
  /* The crumbs are the application's one Cookie field, as HTTP/1.1
   * would have sent it: joined, in order, where the first one was. */
  for (i = 0; i < r->nheaders; i++)
    if (h[i].name_len == 6 && memcmp(h[i].name, "cookie", 6) == 0)
      size += h[i].value_len + 2;
  p = tern__small_malloc(r->w, size);
  if (p == NULL)
    return TERN_ENOMEM;
  *joined = p;
  for (i = 0; i < r->nheaders; i++) {
    tern_header *f = &h[i];
    if (f->name_len == 6 && memcmp(f->name, "cookie", 6) == 0) {
      if (first != SIZE_MAX) {
        *p++ = ';';
        *p++ = ' ';
      } else {
        first = k;
        h[k++] = *f;
      }
      memcpy(p, f->value, f->value_len);
      p += f->value_len;
      continue;
    }
    h[k++] = *f;
  }
  r->nheaders = k;
  if (first != SIZE_MAX) {
    h[first].value = *joined;
    h[first].value_len = (size_t)(p - *joined);
  }
  return 0;
}

int tern__request_collect(tern_request *r, const void *p, size_t n) {
  tern__worker *w = r->w;
  if (r->body_len + n > r->route->max_body)
    return 413;
  if (r->body_len + n > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap * 2 : TERN__SMALL_MAX;
    char *nb;
    while (cap < r->body_len + n)
      cap *= 2;
    if (cap > r->route->max_body)
      cap = r->route->max_body;
    if (cap <= TERN__SMALL_MAX) { /* see body_free */
      nb = tern__small_realloc(w, r->body_buf, cap);
    } else if (r->body_cap <= TERN__SMALL_MAX) {
      if ((nb = tern__malloc(w->srv, cap)) != NULL && r->body_len > 0)
        memcpy(nb, r->body_buf, r->body_len);
      if (nb != NULL)
        tern__small_free(w, r->body_buf);
    } else {
      nb = tern__realloc(w->srv, r->body_buf, cap);
    }
    if (nb == NULL)
      return 503;
    r->body_buf = nb;
    r->body_cap = cap;
  }
  memcpy(r->body_buf + r->body_len, p, n);
  r->body_len += n;
  r->bytes_in += n;
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

int tern_request_tls(const tern_request *r) {
  /* Set once the handshake is done, before the connection's first
   * request: read-only from then on. */
  return r != NULL && r->conn != NULL ? r->conn->tls_version : 0;
}

const char *tern_request_tls_cipher(const tern_request *r) {
  return r != NULL && r->conn != NULL ? r->conn->tls_cipher : NULL;
}

const char *tern_request_host(const tern_request *r, size_t *len) {
  size_t n = 0;
  const char *h = tern_request_header(r, "host", 4, &n);
  if (len != NULL)
    *len = h != NULL ? tern__host_len(h, n) : 0;
  return h;
}

const void *tern_request_tls_client_cert(const tern_request *r, size_t *len) {
  const tern__client_id *id =
      r != NULL && r->conn != NULL ? r->conn->client_id : NULL;
  if (len != NULL)
    *len = id != NULL ? id->der_len : 0;
  return id != NULL ? id->der : NULL;
}

const char *tern_request_tls_client_subject(const tern_request *r,
                                            size_t *len) {
  const tern__client_id *id =
      r != NULL && r->conn != NULL ? r->conn->client_id : NULL;
  if (len != NULL)
    *len = id != NULL ? id->dn_len : 0;
  return id != NULL ? id->dn : NULL;
}

int tern_request_early(const tern_request *r) {
  return (r->flags & TERN__RQ_EARLY) != 0;
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
  /* HTTP/2 and HTTP/3 carry the host as :authority (RFC 9113 8.3.1, RFC
   * 9114 4.3.1): "host" answers it. */
  if (r->protocol >= TERN_PROTO_HTTP2 && r->authority != NULL &&
      name_len == 4 && tern__ieq(name, "host", 4)) {
    if (len != NULL)
      *len = r->authority_len;
    return r->authority;
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

int64_t tern_request_body_length(const tern_request *r) {
  return r != NULL ? r->body_declared : -1;
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
  if (a->family == AF_INET) {
    /* By hand: glibc's inet_ntop goes through sprintf, which a binding
     * that asks for both addresses of every request feels. */
    char *p = buf;
    int i;
    for (i = 0; i < 4; i++) {
      unsigned v = a->addr[i];
      if (i > 0)
        *p++ = '.';
      if (v >= 100)
        *p++ = (char)('0' + v / 100);
      if (v >= 10)
        *p++ = (char)('0' + v / 10 % 10);
      *p++ = (char)('0' + v % 10);
    }
    *p = 0;
  } else if (inet_ntop(a->family, a->addr, buf, (socklen_t)size) == NULL) {
    return TERN_EIO;
  }
  if (port != NULL)
    *port = a->port;
  return 0;
}

int tern_request_peer(const tern_request *r, char *buf, size_t size,
                      int *port) {
  if (r == NULL)
    return TERN_EINVAL;
  if (r->conn == NULL) /* cut by the stop deadline, or finished */
    return TERN_ECLOSED;
  return format_addr(&r->conn->peer, buf, size, port);
}

const char *tern_request_proxy_tlv(const tern_request *r, int type,
                                   size_t *len) {
  const tern__proxy_tlvs *t;
  const char *v = NULL;
  size_t n = 0;

  if (len != NULL)
    *len = 0;
  if (r == NULL || r->conn == NULL || (t = r->conn->proxy) == NULL)
    return NULL;
  switch (type) {
  case TERN_PROXY_ALPN:
    v = t->alpn, n = t->alpn_len;
    break;
  case TERN_PROXY_AUTHORITY:
    v = t->authority, n = t->authority_len;
    break;
  case TERN_PROXY_SSL:
    v = t->ssl ? "1" : NULL, n = 1;
    break;
  case TERN_PROXY_SSL_VERSION:
    v = t->ssl_version, n = t->ssl_version_len;
    break;
  case TERN_PROXY_SSL_CN:
    v = t->ssl_cn, n = t->ssl_cn_len;
    break;
  default:
    break;
  }
  if (v != NULL && len != NULL)
    *len = n;
  return v;
}

int tern_request_local(const tern_request *r, char *buf, size_t size,
                       int *port) {
  if (r == NULL)
    return TERN_EINVAL;
  if (r->conn == NULL)
    return TERN_ECLOSED;
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

int tern_request_worker(const tern_request *r) {
  if (r == NULL)
    return TERN_EINVAL;
  return (int)r->w->id;
}

void *tern_request_loop(const tern_request *r) {
  if (r == NULL)
    return NULL;
  if (!tern__on_worker(r->w) || r->w->loop == NULL) {
    tern__log(r->w->srv, TERN_LOG_ERROR,
              "tern_request_loop refused: not on the owning worker");
    return NULL;
  }
  return r->w->loop;
}

/* ---- Streaming bodies ---------------------------------------------- */

/* The body calls belong to the owning worker (r->flags is its alone, so
 * that is checked first); misuse is refused with a log line. */
static int body_call_refused(const tern_request *r, const char *call,
                             int on_worker) {
  tern__log(r->w->srv, TERN_LOG_ERROR, "%s refused: %s", call,
            on_worker ? "not allowed in the request's state"
                      : "not on the owning worker");
  return TERN_ESTATE;
}

int tern_request_read(tern_request *r, tern_body_fn fn, void *user) {
  if (r == NULL || fn == NULL)
    return TERN_EINVAL;
  if (!tern__on_worker(r->w))
    return body_call_refused(r, "tern_request_read", 0);
  if (!(r->flags & TERN__RQ_STREAM) || (r->flags & TERN__RQ_READING))
    return body_call_refused(r, "tern_request_read", 1);
  if (atomic_load(&r->gone))
    return TERN_ECLOSED;
  tern__request_read(r, fn, user);
  return 0;
}

void tern__request_read(tern_request *r, tern_body_fn fn, void *user) {
  r->body_fn = fn;
  r->body_user = user;
  r->flags |= TERN__RQ_READING;
  r->ops->body_flow(r);
}

int tern_request_pause(tern_request *r) {
  if (r == NULL)
    return TERN_EINVAL;
  if (!tern__on_worker(r->w))
    return tern__request_post_flow(r, 1);
  if (!(r->flags & TERN__RQ_READING))
    return body_call_refused(r, "tern_request_pause", 1);
  r->flags |= TERN__RQ_PAUSED;
  r->ops->body_flow(r);
  return 0;
}

int tern_request_resume(tern_request *r) {
  if (r == NULL)
    return TERN_EINVAL;
  if (!tern__on_worker(r->w))
    return tern__request_post_flow(r, 0);
  if (!(r->flags & TERN__RQ_READING))
    return body_call_refused(r, "tern_request_resume", 1);
  r->flags &= ~(unsigned)TERN__RQ_PAUSED;
  r->ops->body_flow(r);
  return 0;
}
