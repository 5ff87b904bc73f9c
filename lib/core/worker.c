/* Workers: one libuv loop per thread, its listeners, its timers, and the
 * inbox through which other threads hand it responses.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/worker.h"

static void on_async(uv_async_t *a);
static void on_check(uv_check_t *h);
static void on_prepare(uv_prepare_t *h);
static void flush_dirty(tern__worker *w);
static void run_closed(tern__worker *w);
static void on_tick(uv_timer_t *t);

static void on_handle_closed(uv_handle_t *h) {
  tern__worker *w = h->data;
  w->handles_open--;
}

void tern__worker_close_handle(tern__worker *w, uv_handle_t *h) {
  if (h->loop != NULL && !uv_is_closing(h)) {
    h->data = w;
    uv_close(h, on_handle_closed);
  }
}

/* The tick interval bounds how late a timeout fires; a fraction of the
 * shortest timeout keeps that lateness proportionate. */
static uint64_t tick_ms(const tern_settings *s) {
  uint64_t m = s->head_timeout_ms;
  if (s->idle_timeout_ms < m)
    m = s->idle_timeout_ms;
  if (s->body_timeout_ms < m)
    m = s->body_timeout_ms;
  m /= 8;
  return m < 20 ? 20 : m > 1000 ? 1000 : m;
}

void tern__date_update(tern__worker *w) {
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed",
                                  "Thu", "Fri", "Sat"};
  static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  time_t now = time(NULL);
  struct tm tm;
  int n;

  if (now == w->date_sec && w->date_len > 0)
    return;
  w->date_sec = now;
  gmtime_r(&now, &tm);
  n = snprintf(w->date, sizeof(w->date),
               "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
               days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon],
               tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  w->date_len = n > 0 ? (size_t)n : 0;
}

int tern__worker_init(tern__worker *w, tern_server *srv, unsigned id,
                      uv_loop_t *loop) {
  size_t i, rbuf_size;
  int rc;

  w->srv = srv;
  w->id = id;
  w->recv_fd = -1; /* before anything can fail: the cleanup reads it */
  if (loop != NULL) {
    w->loop = loop;
    w->attached = 1;
    w->thread_id = uv_thread_self();
  } else {
    if (uv_loop_init(&w->own_loop) != 0)
      return TERN_EIO;
    w->loop = &w->own_loop;
  }
  if (uv_mutex_init(&w->inbox_lock) != 0)
    return TERN_EIO;
  w->inbox_ready = 1;
  tern__list_init(&w->held);
  tern__list_init(&w->cut);
  for (i = 0; i < TERN__T_COUNT; i++)
    tern__list_init(&w->timers[i]);
  tern__list_init(&w->dirty);
  tern__list_init(&w->closed);
  tern__list_init(&w->conns);
  w->timeout_ms[TERN__T_HEAD] = srv->s.head_timeout_ms;
  w->timeout_ms[TERN__T_IDLE] = srv->s.idle_timeout_ms;
  w->timeout_ms[TERN__T_BODY] = srv->s.body_timeout_ms;
  w->timeout_ms[TERN__T_WRITE] = srv->s.body_timeout_ms;
  w->timeout_ms[TERN__T_LINGER] = 2000;
  w->timeout_ms[TERN__T_GRACE] = 300;

  rbuf_size = srv->s.read_buffer_size;
  if (rbuf_size < srv->s.max_head_size + 1024u)
    rbuf_size = srv->s.max_head_size + 1024u;
  tern__pool_init(&w->rbuf_pool, sizeof(tern__rbuf) + rbuf_size, 256);
  tern__pool_init(&w->wblk_pool, sizeof(tern__wblk) + 16384, 256);
  /* Room for max_pipeline requests of a few segments each. */
  tern__pool_init(&w->seg_pool, 128 * sizeof(tern__seg), 1024);
  tern__pool_init(&w->req_pool,
                  sizeof(tern_request) +
                      srv->s.max_header_count * sizeof(tern_header),
                  1024);
  for (i = 0; tern__transports[i] != NULL; i++)
    tern__pool_init(&w->conn_pools[tern__transports[i]->pool],
                    tern__transports[i]->conn_size, 1024);
  for (i = 0; i < TERN__SMALL_CLASSES; i++) {
    size_t keep = TERN__SMALL_KEEP_BYTES / ((size_t)64 << i);
    tern__pool_init(&w->small[i], (size_t)64 << i,
                    keep < TERN__SMALL_KEEP_MAX ? keep : TERN__SMALL_KEEP_MAX);
  }
  for (i = 0; i < TERN__BIG_CLASSES; i++)
    tern__pool_init(&w->big[i], TERN__BIG_MIN << i,
                    TERN__BIG_KEEP_BYTES / (TERN__BIG_MIN << i));
  tern__date_update(w);

  uv_async_init(w->loop, &w->async, on_async);
  w->async.data = w;
  w->handles_open++;
  uv_check_init(w->loop, &w->check);
  w->check.data = w;
  uv_check_start(&w->check, on_check);
  uv_unref((uv_handle_t *)&w->check);
  w->handles_open++;
  uv_idle_init(w->loop, &w->idle);
  w->idle.data = w;
  w->handles_open++;
  uv_prepare_init(w->loop, &w->prepare);
  w->prepare.data = w;
  uv_prepare_start(&w->prepare, on_prepare);
  uv_unref((uv_handle_t *)&w->prepare);
  w->handles_open++;
  w->polled_ms = w->lag_window_ms = uv_now(w->loop);
  if ((rc = tern__balance_worker_init(w)) != 0)
    return rc;
  uv_timer_init(w->loop, &w->timer);
  w->timer.data = w;
  uv_timer_start(&w->timer, on_tick, tick_ms(&srv->s), tick_ms(&srv->s));
  w->handles_open++;
  uv_timer_init(w->loop, &w->deadline_timer);
  w->deadline_timer.data = w;
  w->handles_open++;

  /* The services' state (a failure is cleaned up with the worker). */
  for (i = 0; tern__services[i] != NULL; i++)
    if (tern__services[i]->worker_init != NULL &&
        (rc = tern__services[i]->worker_init(w)) != 0)
      return rc;
  for (i = 0; i < srv->nlisteners; i++) {
    rc = srv->listeners[i]->ops->start(srv->listeners[i], w);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* Carry out a list taken from the inbox, in order. Once the worker is
 * shutting down what is left is dropped instead: a message applied then
 * could find its socket or request torn down. The check is per message
 * because applying one may itself end the worker's last connection. */
static void run_msgs(tern__worker *w, tern__msg *m) {
  tern__msg *next;
  for (; m != NULL; m = next) {
    next = m->next;
    if (w->inbox_dropping)
      m->ops->drop(m, 0);
    else
      m->ops->apply(m);
  }
}

/* From here on posts are refused (their callers hear TERN_ECLOSED), so no
 * thread touches the async handle once it is closing. What was posted
 * before is applied now at the stop deadline (the loop still runs the
 * connections it concerns), and dropped at shutdown: then no connection
 * is left to carry it out, and every message still holds something (a
 * socket reference, a body to release) that must not leak. */
static void close_inbox(tern__worker *w, int shutdown) {
  tern__msg *m;
  tern_request *aborts;
  if (!w->inbox_ready)
    return;
  uv_mutex_lock(&w->inbox_lock);
  w->inbox_closed = 1;
  m = w->inbox_head;
  w->inbox_head = w->inbox_tail = NULL;
  aborts = w->aborts;
  w->aborts = NULL;
  /* Connections handed over and not taken in: their clients see a close,
   * as for any connection the stop refuses. */
  for (; w->handoff_len > 0; w->handoff_len--) {
    close(w->handoff[w->handoff_head].fd);
    w->handoff_head = (w->handoff_head + 1) % TERN__HANDOFF_CAP;
    atomic_fetch_sub(&w->slot->incoming, 1);
  }
  uv_mutex_unlock(&w->inbox_lock);
  if (shutdown)
    w->inbox_dropping = 1;
  run_msgs(w, m);
  tern__request_abort_all(aborts);
}

static void close_worker_handles(tern__worker *w) {
  size_t i;
  close_inbox(w, 1);
  tern__worker_close_handle(w, (uv_handle_t *)&w->async);
  tern__worker_close_handle(w, (uv_handle_t *)&w->check);
  tern__worker_close_handle(w, (uv_handle_t *)&w->prepare);
  tern__worker_close_handle(w, (uv_handle_t *)&w->idle);
  tern__worker_close_handle(w, (uv_handle_t *)&w->timer);
  tern__worker_close_handle(w, (uv_handle_t *)&w->deadline_timer);
  tern__balance_close(w);
  for (i = 0; i < w->srv->nlisteners; i++)
    w->srv->listeners[i]->ops->stop(w->srv->listeners[i], w);
}

void tern__worker_cleanup(tern__worker *w) {
  size_t i;
  if (w->loop == NULL)
    return;
  if (!w->attached) {
    close_worker_handles(w);
    uv_run(w->loop, UV_RUN_DEFAULT);
    uv_loop_close(w->loop);
  } else if (w->handles_open > 0) {
    /* A failed attach: close what was opened on the caller's loop. Only
     * the closing phase has work, so the loop does not block. */
    close_worker_handles(w);
    while (w->handles_open > 0 && uv_run(w->loop, UV_RUN_NOWAIT) != 0)
      ;
  }
  /* Closing the handles closed the inbox; this finds it empty, and is
   * here so that no path out of the loop can leave a message behind. */
  close_inbox(w, 1);
  tern__request_cut_cleanup(w);
  /* The services' last calls, in their order (the access log last, so
   * that it writes what the others' last calls logged). */
  for (i = 0; tern__services[i] != NULL; i++)
    if (tern__services[i]->cleanup != NULL)
      tern__services[i]->cleanup(w);
  tern__pool_drain(w, &w->rbuf_pool);
  tern__pool_drain(w, &w->wblk_pool);
  tern__pool_drain(w, &w->req_pool);
  for (i = 0; i < TERN__POOL_COUNT; i++)
    tern__pool_drain(w, &w->conn_pools[i]);
  tern__pool_drain(w, &w->seg_pool);
  for (i = 0; i < TERN__SMALL_CLASSES; i++)
    tern__pool_drain(w, &w->small[i]);
  for (i = 0; i < TERN__BIG_CLASSES; i++)
    tern__pool_drain(w, &w->big[i]);
  /* inbox_lock stays: a thread may still try to post (and be refused)
   * until the server's last reference goes. */
  w->loop = NULL;
}

void tern__worker_run_thread(void *arg) {
  tern__worker *w = arg;
  w->thread_id = uv_thread_self();
  tern__worker_started(w);
  uv_run(w->loop, UV_RUN_DEFAULT);
  tern__worker_cleanup(w);
}

int tern__on_worker(const tern__worker *w) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &w->thread_id);
}

/* ---- Graceful stop ----------------------------------------------- */

void tern__worker_maybe_done(tern__worker *w) {
  if (!w->stopping || w->nconns > 0 || w->handles_open == 0)
    return;
  close_worker_handles(w);
}

/* The second half of the deadline, one loop turn after the first (whose
 * 503 answers the check phase has written meanwhile): whatever is still
 * open is closed, and the requests handlers still hold are let go of, so
 * that neither a client nor a handler that never finishes keeps the loop
 * (and tern_run) alive. */
static void on_deadline_close(uv_timer_t *t) {
  tern__worker *w = t->data;
  tern__list *l;
  uint32_t nconns = 0, unread = 0, body = 0, busy = 0;
  while (!tern__list_empty(&w->conns)) {
    tern__conn *c;
    l = w->conns.next;
    tern__list_remove(l);
    c = TERN__CONTAINER_OF(l, tern__conn, all_link);
    /* Why it was still open: its timer says what it waited for. */
    if (c->timer.kind == TERN__T_WRITE)
      unread++; /* output the client was not reading */
    else if (c->timer.kind == TERN__T_BODY)
      body++; /* a request body the client was not sending */
    else if (c->refs > 1)
      busy++; /* requests in flight (a handler's, or a WebSocket's) */
    tern__conn_close(c);
    nconns++;
  }
  /* Closing ended every WebSocket and failed every queued request; what
   * is left on the list is held by a handler. */
  while (!tern__list_empty(&w->held))
    tern__request_cut(
        TERN__CONTAINER_OF(w->held.next, tern_request, held_link));
  if (w->cut_total > 0 || nconns > 0)
    tern__log(w->srv, TERN_LOG_WARN,
              "worker %u: stop deadline passed: %u connections closed (%u "
              "with output their clients were not reading, %u waiting for "
              "a request body, %u with requests in flight, %u other), %u "
              "requests cut (%u answered 503); their handlers' finishing "
              "calls will return TERN_ECLOSED",
              w->id, nconns, unread, body, busy, nconns - unread - body - busy,
              w->cut_total, w->cut_answered);
  tern__worker_maybe_done(w);
}

/* The deadline: no more calls from other threads are taken (what they
 * posted before is applied now), and every request a handler still holds
 * without having started its response is answered 503. */
static void on_deadline(uv_timer_t *t) {
  tern__worker *w = t->data;
  tern__list todo, *l;
  close_inbox(w, 0);
  /* Through a list of its own: an answer may run callbacks that finish
   * (unlink) any held request, the current one included. */
  tern__list_init(&todo);
  while (!tern__list_empty(&w->held)) {
    l = w->held.next;
    tern__list_remove(l);
    tern__list_append(&todo, l);
  }
  while (!tern__list_empty(&todo)) {
    l = todo.next;
    tern__list_remove(l);
    tern__list_append(&w->held, l);
    tern__request_cut_answer(TERN__CONTAINER_OF(l, tern_request, held_link));
  }
  /* 1 ms, not 0: libuv may run a timer due now within this same timers
   * phase, before the check phase has written the answers. */
  uv_timer_start(&w->deadline_timer, on_deadline_close, 1, 0);
}

static void begin_stop(tern__worker *w) {
  tern__list *l, *next;
  size_t i;

  w->stopping = 1;
  tern__balance_stop(w);
  /* First, so that the user closes the handles it keeps on the loop (a
   * client library's connection) while tern closes its own. */
  if (w->srv->worker_stop != NULL)
    w->srv->worker_stop(w->srv, w->id, w->loop, w->srv->worker_user);
  for (i = 0; tern__services[i] != NULL; i++)
    if (tern__services[i]->stop != NULL)
      tern__services[i]->stop(w);
  for (i = 0; i < w->srv->nlisteners; i++)
    w->srv->listeners[i]->ops->stop(w->srv->listeners[i], w);
  for (l = w->conns.next; l != &w->conns; l = next) {
    tern__conn *c = TERN__CONTAINER_OF(l, tern__conn, all_link);
    next = l->next;
    c->flags |= TERN__C_STOPPING;
    c->proto->stop(c);
  }
  /* The timeouts left (the grace of idle connections) are short: sweep
   * them often until the loop ends. */
  uv_timer_start(&w->timer, on_tick, 50, 50);
  uv_timer_start(&w->deadline_timer, on_deadline,
                 atomic_load(&w->srv->stop_deadline_ms), 0);
  tern__worker_maybe_done(w);
}

/* ---- Inbox --------------------------------------------------------- */

void tern__worker_wake(tern__worker *w) {
  if (!uv_is_closing((uv_handle_t *)&w->async))
    uv_async_send(&w->async);
}

int tern__worker_post(tern__worker *w, tern__msg *m) {
  m->next = NULL;
  uv_mutex_lock(&w->inbox_lock);
  if (w->inbox_closed) {
    uv_mutex_unlock(&w->inbox_lock);
    /* Outside the lock: a drop may hand a request over, which takes the
     * lock itself. */
    m->ops->drop(m, 1);
    return TERN_ECLOSED;
  }
  if (w->inbox_tail != NULL)
    w->inbox_tail->next = m;
  else
    w->inbox_head = m;
  w->inbox_tail = m;
  /* Inside the lock: close_inbox (before the handle closes) waits. */
  uv_async_send(&w->async);
  uv_mutex_unlock(&w->inbox_lock);
  return 0;
}

static void on_async(uv_async_t *a) {
  tern__worker *w = a->data;
  tern__msg *m;
  tern_request *aborts;

  uv_mutex_lock(&w->inbox_lock);
  m = w->inbox_head;
  w->inbox_head = w->inbox_tail = NULL;
  aborts = w->aborts;
  w->aborts = NULL;
  uv_mutex_unlock(&w->inbox_lock);
  /* Messages first: an abort comes after everything its request posted. */
  run_msgs(w, m);
  tern__request_abort_all(aborts);
  tern__balance_take(w);
  if (!w->stopping && atomic_load(&w->srv->state) == TERN__S_STOPPING)
    begin_stop(w);
}

/* After every loop turn's I/O: let adapters resume parsing where a
 * handler resumed a body, then write everything produced in this turn. */
static void on_check(uv_check_t *h) {
  tern__worker *w = h->data;
  w->now_valid = 0;               /* the next stamp is of the next batch */
  w->polled_ms = uv_now(w->loop); /* libuv's clock when the poll returned */
  for (;;) {
    /* Services that asked for it (a WebSocket that ended inside a
     * tern_ws_* call hears of it now, outside every call); what they
     * send is written below. */
    while (w->check_due != 0) {
      unsigned due = w->check_due;
      size_t i;
      w->check_due = 0;
      for (i = 0; tern__services[i] != NULL; i++)
        if ((due >> tern__services[i]->slot & 1u) &&
            tern__services[i]->check != NULL)
          tern__services[i]->check(w);
    }
    if (tern__list_empty(&w->dirty) && tern__list_empty(&w->closed))
      break;
    flush_dirty(w);
    run_closed(w);
  }
}

/* Complete the closes left for later (tern__conn_close_later). */
static void run_closed(tern__worker *w) {
  while (!tern__list_empty(&w->closed)) {
    tern__list *l = w->closed.next;
    tern__conn *c = TERN__CONTAINER_OF(l, tern__conn, dirty_link);
    tern__list_remove(l);
    c->tp->closed(c);
  }
  uv_idle_stop(&w->idle);
}

void tern__worker_on_idle(uv_idle_t *h) {
  run_closed(h->data);
}

/* At the start of each loop turn, before the poll: the previous turn
 * was busy from its poll's return (polled_ms, libuv's clock read then)
 * to this turn's start (libuv's clock, read again): its I/O callbacks,
 * check and closing phases. The longest over a window of a second, kept
 * for the window after it too, is the worker's loop lag: how long an
 * event that arrived meanwhile waited at most. Reads no clock itself. */
static void on_prepare(uv_prepare_t *h) {
  tern__worker *w = h->data;
  uint64_t now = uv_now(w->loop), busy = now - w->polled_ms, lag;
  if (busy > w->lag_ms)
    w->lag_ms = busy;
  if (now - w->lag_window_ms >= 1000) {
    w->lag_prev_ms = w->lag_ms;
    w->lag_ms = 0;
    w->lag_window_ms = now;
  }
  lag = (w->lag_ms > w->lag_prev_ms ? w->lag_ms : w->lag_prev_ms) * 1000000u;
  if (atomic_load_explicit(&w->stats.loop_lag, memory_order_relaxed) != lag)
    atomic_store_explicit(&w->stats.loop_lag, lag, memory_order_relaxed);
}

static void flush_dirty(tern__worker *w) {
  while (!tern__list_empty(&w->dirty)) {
    tern__list *l = w->dirty.next;
    tern__conn *c = TERN__CONTAINER_OF(l, tern__conn, dirty_link);
    tern__list_remove(l);
    c->flags &= ~(unsigned)TERN__C_DIRTY;
    if (c->flags & TERN__C_CLOSING)
      continue;
    if (c->flags & TERN__C_REPROCESS) {
      c->flags &= ~(unsigned)TERN__C_REPROCESS;
      tern__conn_process(c);
    }
    if ((c->flags & (TERN__C_OUTPUT | TERN__C_CLOSING)) == TERN__C_OUTPUT) {
      c->flags &= ~(unsigned)TERN__C_OUTPUT;
      c->tp->output(c);
    }
    if (!(c->flags & TERN__C_CLOSING))
      tern__conn_flush(c);
  }
}

/* ---- Timeouts ------------------------------------------------------ */

static void trim_pools(tern__worker *w) {
  size_t i;

  tern__pool_trim(w, &w->rbuf_pool);
  tern__pool_trim(w, &w->wblk_pool);
  tern__pool_trim(w, &w->seg_pool);
  tern__pool_trim(w, &w->req_pool);
  for (i = 0; i < TERN__POOL_COUNT; i++)
    tern__pool_trim(w, &w->conn_pools[i]);
  for (i = 0; i < TERN__SMALL_CLASSES; i++)
    tern__pool_trim(w, &w->small[i]);
  for (i = 0; i < TERN__BIG_CLASSES; i++)
    tern__pool_trim(w, &w->big[i]);
}

static void on_tick(uv_timer_t *t) {
  tern__worker *w = t->data;
  uint64_t now = uv_now(w->loop);

  if (now - w->pools_trimmed >= 1000) {
    w->pools_trimmed = now;
    trim_pools(w);
    if (w->id == 0)
      tern__allocator_release(w->srv);
  }
  tern__date_update(w);
  {
    size_t i;
    for (i = 0; tern__services[i] != NULL; i++)
      if (tern__services[i]->tick != NULL)
        tern__services[i]->tick(w, now);
  }
  tern__timer_sweep(w, now);
  on_check(&w->check);
}

/* ---- The worker's loop for the user ------------------------------- */

void tern__worker_started(tern__worker *w) {
  if (w->srv->worker_start != NULL)
    w->srv->worker_start(w->srv, w->id, w->loop, w->srv->worker_user);
}

unsigned tern_server_workers(const tern_server *srv) {
  return srv != NULL ? srv->nworkers : 0;
}

int tern_server_on_workers(tern_server *srv, tern_worker_fn on_start,
                           tern_worker_fn on_stop, void *user) {
  if (srv == NULL)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE) {
    tern__log(srv, TERN_LOG_ERROR,
              "tern_server_on_workers refused: the server has started");
    return TERN_ESTATE;
  }
  srv->worker_start = on_start;
  srv->worker_stop = on_stop;
  srv->worker_user = on_start != NULL || on_stop != NULL ? user : NULL;
  return 0;
}

/* A tern_worker_call: the function and its pointer, nothing else. */
typedef struct {
  tern__msg m;
  tern_server *srv;
  unsigned id;
  tern_worker_fn fn;
  void *user;
} call_msg;

static void call_apply(tern__msg *m) {
  call_msg *c = (call_msg *)m;
  tern_server *srv = c->srv;
  tern__worker *w = &srv->workers[c->id];
  tern_worker_fn fn = c->fn;
  void *user = c->user;
  /* Freed first, so that fn may stop the server or post again. */
  tern__free(srv, c);
  fn(srv, w->id, w->loop, user);
}

static void call_drop(tern__msg *m, int refused) {
  call_msg *c = (call_msg *)m;
  tern_server *srv = c->srv;
  tern_worker_fn fn = c->fn;
  unsigned id = c->id;
  void *user = c->user;
  tern__free(srv, c);
  /* Taken, then never applied: fn still runs once, without a loop, so
   * that it can let go of `user`. Refused: the caller keeps it. */
  if (!refused)
    fn(srv, id, NULL, user);
}

static const tern__msg_ops call_ops = {call_apply, call_drop};

int tern_worker_call(tern_server *srv, unsigned worker, tern_worker_fn fn,
                     void *user) {
  call_msg *c;
  int state;

  if (srv == NULL || fn == NULL)
    return TERN_EINVAL;
  if (worker >= srv->nworkers) {
    tern__log(srv, TERN_LOG_ERROR, "tern_worker_call refused: worker %u of %u",
              worker, srv->nworkers);
    return TERN_EINVAL;
  }
  state = atomic_load(&srv->state);
  if (state == TERN__S_DONE)
    return TERN_ECLOSED;
  if (state != TERN__S_RUNNING && state != TERN__S_STOPPING) {
    tern__log(srv, TERN_LOG_ERROR,
              "tern_worker_call refused: the server is not running");
    return TERN_ESTATE;
  }
  c = tern__malloc(srv, sizeof(*c));
  if (c == NULL)
    return TERN_ENOMEM;
  c->m.ops = &call_ops;
  c->srv = srv;
  c->id = worker;
  c->fn = fn;
  c->user = user;
  return tern__worker_post(&srv->workers[worker], &c->m);
}
