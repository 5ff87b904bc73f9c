/* The inbound window policy (see tern__window in core/window.h): HTTP/2
 * credits the window it decides through nghttp2. HTTP/3 leaves its
 * windows to ngtcp2's auto-tuning.
 */
#include "core/window.h"

uint32_t tern__window_consumed(tern__window *w, size_t n, int held_back,
                               uint32_t earned) {
  w->consumed += n;
  /* Growing while bytes are held back would only let a handler that
   * does not keep up hold more; a window at its maximum stays. A handler
   * that has taken bytes keeps up for now, so a stream adopts what its
   * connection earned on its first consumption. */
  if (held_back)
    return 0;
  if (earned > w->max)
    earned = w->max;
  if (w->win < earned) {
    w->win = earned;
    w->consumed = 0;
    return w->win;
  }
  if (w->consumed < w->win || w->win >= w->max)
    return 0;
  w->win = w->win > w->max / 2 ? w->max : w->win * 2;
  w->consumed = 0;
  return w->win;
}
