/* What HTTP/2 and HTTP/3 share (core/mux.h): the out-of-line part. */
#include "core/mux.h"

int tern__mux_hold(tern__worker *w, tern__mux_pend *b, const void *p,
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
