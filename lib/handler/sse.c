/* Server-Sent Events (tern.h, "Server-Sent Events"): event streams on
 * streamed responses, with heartbeats, a bound on what a slow client may
 * have queued, the graceful stop, and hubs that publish one event to
 * every subscriber from any thread.
 *
 * Every stream lives on its request's worker and is touched only there:
 * a hub keeps one list of subscribers per worker, and tern_sse_publish
 * frames the event once and posts it to each worker that has any
 * (tern_worker_call), which writes it to its own. No lock is taken on the
 * way; a stream that ends is unlinked on its worker. The framing itself is
 * in lib/handler/sse_format.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/worker.h"

struct tern_sse_hub {
  tern_server *srv;
  unsigned nworkers;
  _Atomic size_t total;  /* subscribers on every worker */
  _Atomic size_t *count; /* per worker, read by publishers */
  tern__list *lists;     /* per worker, its worker's only */
};

struct tern_sse {
  tern_request *r;
  tern__worker *w;
  tern_sse_hub *hub;
  tern__list link;     /* the worker's open streams */
  tern__list hub_link; /* the hub's list on this worker */
  uint64_t last;       /* loop time (ms) of the last bytes queued */
  uint32_t heartbeat_ms;
  uint32_t high_water;
  tern_sse_close_fn on_close;
  void *user;
  int closing; /* on_close runs: sends and closes are refused */
};

/* The worker's streams, for the heartbeat tick and the graceful stop. */
typedef struct {
  tern__list open;
} sse_worker;

#define SSEW(w) ((sse_worker *)(w)->svc[TERN__SVC_SSE])

/* An event framed once for every worker it is posted to. */
typedef struct {
  _Atomic unsigned refs;
  tern_sse_hub *hub;
  tern_server *srv;
  size_t len;
  char data[];
} sse_event;

static const size_t sse_ends[] = {TERN__END(tern_sse_options, user)};

void tern_sse_options_init_size(tern_sse_options *out, size_t size) {
  tern_sse_options d;
  if (out == NULL)
    return;
  memset(&d, 0, sizeof d);
  d.version = TERN_SSE_OPTIONS_VERSION;
  d.size = sizeof d;
  d.heartbeat_ms = 15000;
  d.high_water = 1u << 20;
  tern__abi_init(out, size, &d, sse_ends, TERN_SSE_OPTIONS_VERSION);
}

static int on_worker(tern__worker *w, const char *call) {
  if (tern__on_worker(w))
    return 1;
  tern__log(w->srv, TERN_LOG_ERROR,
            "%s refused: called from a thread other than the stream's "
            "worker (publish through a hub, or post with tern_worker_call)",
            call);
  return 0;
}

/* The stream ends: unlinked, told, its response finished, freed. */
static void finish(tern_sse *s, int why) {
  tern_request *r = s->r;
  s->closing = 1;
  tern__list_remove(&s->link);
  if (s->hub != NULL) {
    tern__list_remove(&s->hub_link);
    atomic_fetch_sub(&s->hub->count[s->w->id], 1);
    atomic_fetch_sub(&s->hub->total, 1);
  }
  if (s->on_close != NULL)
    s->on_close(s, why, s->user);
  tern_request_on_gone(r, NULL, NULL);
  tern_response_end(r, NULL, 0);
  tern__free(s->w->srv, s);
}

static void gone(tern_request *r, void *user) {
  (void)r;
  finish(user, TERN_SSE_CLIENT_GONE);
}

/* Queue `n` framed bytes, unless the client already has more than the
 * high-water mark waiting: then it is too slow, and its stream ends. */
static int queue(tern_sse *s, const char *p, size_t n) {
  int rc;
  if (s->closing)
    return TERN_ECLOSED;
  if (s->r->ops->pending(s->r) > s->high_water) {
    finish(s, TERN_SSE_TOO_SLOW);
    return TERN_ETOOBIG;
  }
  rc = tern_response_write(s->r, p, n, NULL, NULL);
  if (rc == TERN_ECLOSED || rc == TERN_ENOMEM) {
    finish(s, TERN_SSE_CLIENT_GONE);
    return TERN_ECLOSED;
  }
  s->last = uv_now(s->w->loop);
  return rc;
}

int tern_sse_start(tern_request *r, const tern_sse_options *in,
                   tern_sse **out) {
  static const tern_header fields[] = {
      TERN_HEADER("content-type", "text/event-stream"),
      TERN_HEADER("cache-control", "no-cache"),
      TERN_HEADER("x-accel-buffering", "no")};
  tern_sse_options o;
  tern__worker *w;
  tern_sse *s;
  char why[160], retry[32];
  size_t mlen;
  const char *m;
  int rc, n;

  if (r == NULL || out == NULL)
    return TERN_EINVAL;
  w = r->w;
  if (!on_worker(w, "tern_sse_start"))
    return TERN_ESTATE;
  tern_sse_options_init(&o);
  if (in != NULL &&
      tern__abi_read(&o, sizeof o, in, sse_ends, TERN_SSE_OPTIONS_VERSION, why,
                     sizeof why) != 0) {
    tern__log(w->srv, TERN_LOG_ERROR, "tern_sse_start: %s", why);
    return TERN_EINVAL;
  }
  if (o.heartbeat_ms != 0 && o.heartbeat_ms < 1000) {
    tern__log(w->srv, TERN_LOG_ERROR,
              "tern_sse_start: heartbeat_ms %u is below 1000",
              (unsigned)o.heartbeat_ms);
    return TERN_EINVAL;
  }
  if (o.hub != NULL && o.hub->srv != w->srv) {
    tern__log(w->srv, TERN_LOG_ERROR,
              "tern_sse_start: the hub belongs to another server");
    return TERN_EINVAL;
  }
  if ((s = tern__malloc(w->srv, sizeof *s)) == NULL)
    return TERN_ENOMEM;
  m = tern_request_method(r, &mlen);
  if ((rc = tern_response_start(r, 200, fields, 3, -1)) != 0) {
    tern__free(w->srv, s);
    return rc;
  }
  /* A HEAD gets the head; a stopping server no stream. */
  if ((m != NULL && mlen == 4 && memcmp(m, "HEAD", 4) == 0) || w->stopping) {
    tern__free(w->srv, s);
    tern_response_end(r, NULL, 0);
    return TERN_ECLOSED;
  }
  memset(s, 0, sizeof *s);
  s->r = r;
  s->w = w;
  s->heartbeat_ms = o.heartbeat_ms;
  s->high_water = o.high_water ? o.high_water : 1u << 20;
  s->last = uv_now(w->loop);
  tern__list_append(&SSEW(w)->open, &s->link);
  tern__list_init(&s->hub_link);
  if ((rc = tern_request_on_gone(r, gone, s)) != 0) {
    tern__list_remove(&s->link);
    tern__free(w->srv, s);
    tern_response_end(r, NULL, 0);
    return TERN_ECLOSED;
  }
  if (o.retry_ms > 0) {
    n = snprintf(retry, sizeof retry, "retry: %u\n\n", (unsigned)o.retry_ms);
    if (queue(s, retry, (size_t)n) != 0)
      return TERN_ECLOSED; /* finished; on_close is not set yet */
  }
  s->on_close = o.on_close;
  s->user = o.user;
  if (o.hub != NULL) {
    s->hub = o.hub;
    tern__list_append(&o.hub->lists[w->id], &s->hub_link);
    atomic_fetch_add(&o.hub->count[w->id], 1);
    atomic_fetch_add(&o.hub->total, 1);
  }
  *out = s;
  return 0;
}

/* A call on stream `s` may go on: 0, or why not (a stream closing is
 * being ended by its own on_close). */
static int usable(const tern_sse *s, const char *call) {
  if (s == NULL)
    return TERN_EINVAL;
  if (!on_worker(s->w, call))
    return TERN_ESTATE;
  return s->closing ? TERN_ECLOSED : 0;
}

int tern_sse_send(tern_sse *s, const char *id, const char *event,
                  const char *data, size_t len) {
  char local[1024], *buf = local;
  size_t n;
  int rc;

  if ((rc = usable(s, "tern_sse_send")) != 0)
    return rc;
  rc = tern_sse_format(local, sizeof local, &n, id, event, data, len);
  if (rc == TERN_ETOOBIG) {
    if ((buf = tern__malloc(s->w->srv, n + 1)) == NULL)
      return TERN_ENOMEM;
    rc = tern_sse_format(buf, n + 1, &n, id, event, data, len);
  }
  if (rc == 0)
    rc = queue(s, buf, n);
  if (buf != local)
    tern__free(s->w->srv, buf);
  return rc;
}

int tern_sse_close(tern_sse *s) {
  int rc = usable(s, "tern_sse_close");
  if (rc == 0)
    finish(s, TERN_SSE_CLOSED);
  return rc;
}

/* Run `fn` on each stream of `head` (through the member at `off`), any of
 * them free to end on the way (and its on_close to end others): a marker
 * after the current one says where to go on. */
static void each(tern__list *head, size_t off,
                 void (*fn)(tern_sse *s, void *arg), void *arg) {
  tern__list mark, *l = head->next;
  while (l != head) {
    mark.prev = l;
    mark.next = l->next;
    l->next->prev = &mark;
    l->next = &mark;
    fn((tern_sse *)(void *)((char *)l - off), arg);
    l = mark.next;
    tern__list_remove(&mark);
  }
}

const char *tern_sse_last_event_id(const tern_sse *s, size_t *len) {
  if (s == NULL)
    return NULL;
  return tern_request_header(s->r, "last-event-id", 13, len);
}

tern_request *tern_sse_request(const tern_sse *s) {
  return s != NULL ? s->r : NULL;
}

/* ---- Hubs --------------------------------------------------------------- */

int tern_sse_hub_new(tern_server *srv, tern_sse_hub **out) {
  tern_sse_hub *h;
  unsigned i, n;
  if (srv == NULL || out == NULL)
    return TERN_EINVAL;
  n = tern_server_workers(srv);
  if ((h = tern__malloc(srv, sizeof *h)) == NULL)
    return TERN_ENOMEM;
  memset(h, 0, sizeof *h);
  h->srv = srv;
  h->nworkers = n;
  h->count = tern__malloc(srv, n * sizeof *h->count);
  h->lists = tern__malloc(srv, n * sizeof *h->lists);
  if (h->count == NULL || h->lists == NULL) {
    tern__free(srv, (void *)h->count);
    tern__free(srv, h->lists);
    tern__free(srv, h);
    return TERN_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    atomic_init(&h->count[i], 0);
    tern__list_init(&h->lists[i]);
  }
  *out = h;
  return 0;
}

void tern_sse_hub_free(tern_sse_hub *h) {
  if (h == NULL)
    return;
  if (atomic_load(&h->total) != 0)
    tern__log(h->srv, TERN_LOG_ERROR,
              "tern_sse_hub_free: %zu subscribers still open (free a hub "
              "only once its server has stopped)",
              (size_t)atomic_load(&h->total));
  tern__free(h->srv, (void *)h->count);
  tern__free(h->srv, h->lists);
  tern__free(h->srv, h);
}

size_t tern_sse_hub_subscribers(const tern_sse_hub *h) {
  return h != NULL ? atomic_load(&((tern_sse_hub *)h)->total) : 0;
}

static void event_unref(sse_event *ev) {
  if (atomic_fetch_sub(&ev->refs, 1) == 1)
    tern__free(ev->srv, ev);
}

static void deliver_one(tern_sse *s, void *arg) {
  const sse_event *ev = arg;
  queue(s, ev->data, ev->len);
}

/* On worker `worker`: the event to each of its subscribers (one that
 * ends on the way, too slow or gone, unlinks itself). */
static void deliver(tern_server *srv, unsigned worker, void *loop, void *user) {
  sse_event *ev = user;
  (void)srv;
  if (loop != NULL && worker < ev->hub->nworkers)
    each(&ev->hub->lists[worker], offsetof(tern_sse, hub_link), deliver_one,
         ev);
  event_unref(ev);
}

int tern_sse_publish(tern_sse_hub *h, const char *id, const char *event,
                     const char *data, size_t len) {
  sse_event *ev;
  size_t n;
  unsigned i;
  int rc;

  if (h == NULL)
    return TERN_EINVAL;
  rc = tern_sse_format(NULL, 0, &n, id, event, data, len);
  if (rc != TERN_ETOOBIG)
    return rc; /* TERN_EINVAL */
  if (atomic_load(&h->total) == 0)
    return 0;
  if ((ev = tern__malloc(h->srv, sizeof *ev + n + 1)) == NULL)
    return TERN_ENOMEM;
  tern_sse_format(ev->data, n + 1, &ev->len, id, event, data, len);
  ev->hub = h;
  ev->srv = h->srv;
  atomic_init(&ev->refs, 1);
  for (i = 0; i < h->nworkers; i++) {
    if (atomic_load(&h->count[i]) == 0)
      continue;
    atomic_fetch_add(&ev->refs, 1);
    if ((rc = tern_worker_call(h->srv, i, deliver, ev)) != 0)
      event_unref(ev);
  }
  event_unref(ev);
  return 0;
}

/* ---- The worker's side -------------------------------------------------- */

static int sse_worker_init(tern__worker *w) {
  sse_worker *sw = tern__malloc(w->srv, sizeof *sw);
  if (sw == NULL)
    return TERN_ENOMEM;
  tern__list_init(&sw->open);
  w->svc[TERN__SVC_SSE] = sw;
  return 0;
}

/* The graceful stop: every stream ends now (a client reconnects, to
 * this server's successor or another instance, with its Last-Event-ID),
 * instead of holding the stop until its deadline. */
static void sse_stop(tern__worker *w) {
  sse_worker *sw = SSEW(w);
  while (sw != NULL && !tern__list_empty(&sw->open))
    finish(TERN__CONTAINER_OF(sw->open.next, tern_sse, link),
           TERN_SSE_STOPPING);
}

/* Heartbeats: a comment line to each stream quiet for its interval, so
 * that proxies and the client's own timers see the stream alive. */
static void heartbeat(tern_sse *s, void *arg) {
  uint64_t now = *(const uint64_t *)arg;
  if (s->heartbeat_ms != 0 && now - s->last >= s->heartbeat_ms)
    queue(s, ":\n\n", 3);
}

static void sse_tick(tern__worker *w, uint64_t now) {
  sse_worker *sw = SSEW(w);
  (void)now;
  if (sw == NULL)
    return;
  now = uv_now(w->loop);
  each(&sw->open, offsetof(tern_sse, link), heartbeat, &now);
}

static void sse_cleanup(tern__worker *w) {
  sse_worker *sw = SSEW(w);
  if (sw == NULL)
    return;
  /* The stop ended every stream; one started since is let go with its
   * worker (its request and connection are gone). */
  while (!tern__list_empty(&sw->open)) {
    tern_sse *s = TERN__CONTAINER_OF(sw->open.next, tern_sse, link);
    tern__list_remove(&s->link);
    if (s->hub != NULL) {
      tern__list_remove(&s->hub_link);
      atomic_fetch_sub(&s->hub->count[w->id], 1);
      atomic_fetch_sub(&s->hub->total, 1);
    }
    tern__free(w->srv, s);
  }
  tern__free(w->srv, sw);
  w->svc[TERN__SVC_SSE] = NULL;
}

const tern__service tern__sse_service = {
    .name = "sse",
    .slot = TERN__SVC_SSE,
    .worker_init = sse_worker_init,
    .stop = sse_stop,
    .tick = sse_tick,
    .cleanup = sse_cleanup,
};
