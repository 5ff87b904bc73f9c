/* The connection head: what the core does with every connection, whatever
 * its transport: counting, references, the dirty list, closing (its
 * timer: timer.c). Bytes are the transport's (lib/net for TCP).
 */
#include <string.h>

#include "core/worker.h"

tern__conn *tern__conn_new(tern__worker *w, const tern__transport *tp) {
  tern__conn *c = tern__pool_get(w, &w->conn_pools[tp->pool]);
  if (c == NULL)
    return NULL;
  memset(c, 0, sizeof(*c));
  c->w = w;
  c->tp = tp;
  c->refs = 1;
  c->counted_proto = -1;
  tern__conn_timer_init(c);
  tern__list_init(&c->dirty_link);
  tern__list_init(&c->all_link);
  return c;
}

void tern__conn_discard(tern__conn *c) {
  tern__worker *w = c->w;
  tern__pool_put(w, &w->conn_pools[c->tp->pool], c);
}

void tern__conn_start(tern__conn *c) {
  tern__worker *w = c->w;
  tern__list_append(&w->conns, &c->all_link);
  w->nconns++;
  /* Counted in the worker's slot, which its stats and the other workers'
   * balancing (lib/core/balance.c) both read. */
  TERN__STAT_ADD(w->slot->taken, 1);
  TERN__STAT_ADD(w->slot->active, 1);
  c->counted_proto = tern__proto_name_index(c->proto->name);
  TERN__STAT_ADD(w->stats.conns[c->counted_proto], 1);
  tern__conn_timer(c, TERN__T_HEAD);
}

void tern__conn_unref(tern__conn *c) {
  tern__worker *w = c->w;
  if (--c->refs > 0)
    return;
  tern__free(w->srv, c->proxy);
  tern__free(w->srv, c->client_id);
  c->tp->free(c);
  w->nconns--;
  tern__worker_maybe_done(w);
}

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

void tern__conn_want_output(tern__conn *c) {
  c->flags |= TERN__C_OUTPUT;
  tern__conn_mark_dirty(c);
}

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
  c->proto->close(c);
  c->tp->close(c);
}

void tern__conn_close_later(tern__conn *c) {
  tern__worker *w = c->w;
  /* dirty_link is free: a closing connection is never marked dirty. */
  if (tern__list_empty(&w->closed))
    uv_idle_start(&w->idle, tern__worker_on_idle);
  tern__list_append(&w->closed, &c->dirty_link);
}

void tern__conn_set_proto(tern__conn *c, const tern__proto *p) {
  c->proto = p;
  if (c->counted_proto >= 0) {
    int i = tern__proto_name_index(p->name);
    TERN__STAT_ADD(c->w->stats.conns[c->counted_proto], (uint64_t)-1);
    TERN__STAT_ADD(c->w->stats.conns[i], 1);
    c->counted_proto = i;
  }
}

int tern__conn_admit(tern__conn *c) {
  int ok = tern__admit_conn(c->w->srv->admit, &c->peer);
  c->admitted = ok == 1;
  return ok != 0;
}

void tern__conn_closed(tern__conn *c) {
  TERN__STAT_ADD(c->w->slot->active, (uint64_t)-1);
  if (c->admitted) {
    tern__admit_release(c->w->srv->admit, &c->peer);
    c->admitted = 0;
  }
  if (c->counted_proto >= 0) {
    TERN__STAT_ADD(c->w->stats.conns[c->counted_proto], (uint64_t)-1);
    c->counted_proto = -1;
  }
  tern__conn_unref(c);
}
