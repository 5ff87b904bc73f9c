/* Timers: nodes on per-kind worker lists (lib/core/timer.c). */
#ifndef TERN_CORE_TIMER_H
#define TERN_CORE_TIMER_H

#include "core/base.h"

/* ---- Timers ------------------------------------------------------- */

enum {
  TERN__T_NONE = 0,
  TERN__T_HEAD,   /* waiting for (the rest of) a request head */
  TERN__T_IDLE,   /* keep-alive, nothing pending */
  TERN__T_BODY,   /* waiting for request body bytes */
  TERN__T_WRITE,  /* output pending, no progress (the transport's) */
  TERN__T_LINGER, /* closing: drain the peer's bytes (the transport's) */
  TERN__T_GRACE,  /* stopping: an idle HTTP/1.1 connection's last chance
                     for one more request, answered with Connection: close */
  TERN__T_COUNT,
  TERN__T_DRAINED = 0x100, /* with a kind, from an adapter's timer() */
};

/* A timer: a node that embeds in what it times (a connection, an HTTP/2
 * stream) and sits on its worker's list for one fixed kind, whose timeout
 * is w->timeout_ms[kind]; the worker's tick sweeps the lists
 * (lib/core/timer.c). Timers are lazy: `kind` is the kind that applies
 * (TERN__T_NONE: disarmed); the node sits on the list of `list` (or none)
 * at the position `listed` gave it, and `deadline` is when the applying
 * kind expires. Arming the kind whose list holds the node only moves the
 * deadline; disarming only marks it. When it expires the node is stopped,
 * then `fire` runs with the kind, on the worker, outside any adapter
 * call; it may free the node's owner. All of it is the worker's alone. */
typedef struct tern__timer tern__timer;
typedef void (*tern__timer_fn)(tern__timer *t, int kind);
struct tern__timer {
  tern__list link;
  uint64_t deadline, listed;
  int kind, list;
  tern__timer_fn fire;
};

void tern__timer_init(tern__timer *t, tern__timer_fn fire);
/* Arm `t` with `kind` for w->timeout_ms[kind] from now (re-arming moves
 * the deadline), or disarm it with TERN__T_NONE. */
void tern__timer_set(tern__worker *w, tern__timer *t, int kind);
/* Off every list: it will not fire. Before its owner is freed. */
void tern__timer_stop(tern__timer *t);
/* Fire the timers that expired by `now` (the worker's tick). */
void tern__timer_sweep(tern__worker *w, uint64_t now);

#endif
