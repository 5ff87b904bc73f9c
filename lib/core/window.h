/* The inbound window policy (lib/core/window.c). */
#ifndef TERN_CORE_WINDOW_H
#define TERN_CORE_WINDOW_H

#include "core/base.h"

/* ---- The inbound window policy (lib/core/window.c) ------------------ */

/* A receive window that starts small and grows while the handler keeps
 * up: each time a whole window has been consumed with nothing held back,
 * it doubles, up to `max`. A client that uploads fast is then not
 * throttled by round trips, and one whose handler is slow (or paused)
 * never has more than a small window in flight. The policy only: HTTP/2
 * announces what it decides through nghttp2. (HTTP/3 leaves its windows
 * to ngtcp2's own auto-tuning, bounded by the same settings.) */
typedef struct {
  uint32_t win;      /* the window now */
  uint32_t max;      /* the most it grows to (at most 2^31 - 1) */
  uint64_t consumed; /* bytes consumed since it last grew */
} tern__window;

static inline void tern__window_init(tern__window *w, uint32_t initial,
                                     uint32_t max) {
  w->win = initial;
  w->max = max;
  w->consumed = 0;
}
/* `n` bytes left tern's hands; `held_back` when some are still held for
 * a handler that has not taken them (or no more can come). `earned` is
 * the size a stream's window may jump to at once, the largest its
 * connection's earlier streams grew to (0: none; the connection's own
 * window passes 0): without it every upload on a connection would start
 * again from the initial window and spend its first megabytes on round
 * trips. Returns the new window size when the window should grow now,
 * else 0. */
uint32_t tern__window_consumed(tern__window *w, size_t n, int held_back,
                               uint32_t earned);

#endif
