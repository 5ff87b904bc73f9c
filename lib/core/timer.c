/* Timers: nodes that embed in whatever they time (a connection, an HTTP/2
 * stream), on per-worker lists of one fixed kind each (head, idle, body,
 * write, linger), swept by the worker's tick; and the connection's own
 * timer, whose kind its adapter chooses.
 */
#include "core/worker.h"

/* ---- Timer nodes --------------------------------------------------- */

void tern__timer_init(tern__timer *t, tern__timer_fn fire) {
  tern__list_init(&t->link);
  t->deadline = t->listed = 0;
  t->kind = t->list = TERN__T_NONE;
  t->fire = fire;
}

/* Arming, disarming and re-arming happen several times per keep-alive
 * request (idle while waiting, none while a handler works, idle again),
 * so they move no list node when they can avoid it. Disarming only marks
 * the node; it stays on its list until the sweep meets it. Arming the
 * kind whose list holds the node already only moves the deadline; the
 * sweep, finding a node whose place in the list (`listed`) has passed
 * but whose deadline has not, appends it again. Each list stays sorted
 * by `listed`, since all its entries share one timeout. */
void tern__timer_set(tern__worker *w, tern__timer *t, int kind) {
  t->kind = kind;
  if (kind == TERN__T_NONE)
    return;
  t->deadline = uv_now(w->loop) + w->timeout_ms[kind];
  if (t->list == kind)
    return;
  if (t->list != TERN__T_NONE)
    tern__list_remove(&t->link);
  t->list = kind;
  t->listed = t->deadline;
  tern__list_append(&w->timers[kind], &t->link);
}

void tern__timer_stop(tern__timer *t) {
  t->kind = TERN__T_NONE;
  if (t->list != TERN__T_NONE)
    tern__list_remove(&t->link);
  t->list = TERN__T_NONE;
}

void tern__timer_sweep(tern__worker *w, uint64_t now) {
  int k;

  for (k = 1; k < TERN__T_COUNT; k++) {
    tern__list *list = &w->timers[k];
    /* Each list holds one kind of timeout, appended as armed, so it is
     * sorted by `listed`: only entries at its front are seen. An entry
     * whose kind no longer applies leaves the list; one re-armed since it
     * was listed goes to the back (tern__timer_set is lazy). A firing
     * owner may stop or free any node, this one included, so the list's
     * front is read afresh each time. */
    while (!tern__list_empty(list)) {
      tern__timer *t = TERN__CONTAINER_OF(list->next, tern__timer, link);
      if (t->listed > now)
        break;
      if (t->kind != k) {
        tern__list_remove(&t->link);
        t->list = TERN__T_NONE;
        continue;
      }
      if (t->deadline > now) {
        tern__list_remove(&t->link);
        t->listed = t->deadline;
        tern__list_append(list, &t->link);
        continue;
      }
      tern__timer_stop(t);
      t->fire(t, k);
    }
  }
}

/* ---- The connection's timer --------------------------------------- */

static void conn_fire(tern__timer *t, int kind) {
  tern__conn_timeout(TERN__CONTAINER_OF(t, tern__conn, timer), kind);
}

void tern__conn_timer_init(tern__conn *c) {
  tern__timer_init(&c->timer, conn_fire);
}

void tern__conn_timer(tern__conn *c, int kind) {
  tern__timer_set(c->w, &c->timer, kind);
}

void tern__conn_timer_stop(tern__conn *c) {
  tern__timer_stop(&c->timer);
}

/* The connection's timer fired: the transport's own kinds (a write that
 * made no progress, a linger that ended) go to it, the others to the
 * adapter, which may end the connection its own way (HTTP/1.1's 408). */
void tern__conn_timeout(tern__conn *c, int kind) {
  if (kind == TERN__T_WRITE || kind == TERN__T_LINGER) {
    if (kind == TERN__T_WRITE)
      TERN__STAT_ADD(c->w->stats.rej_timeout, 1);
    c->tp->timeout(c, kind);
    return;
  }
  if (c->proto->timeout != NULL && c->proto->timeout(c, kind))
    return; /* its own answer (HTTP/1.1's 408) counted itself */
  if (kind == TERN__T_HEAD || kind == TERN__T_BODY)
    TERN__STAT_ADD(c->w->stats.rej_timeout, 1);
  tern__conn_close(c);
}
