/* Per-worker free lists and refcounted read buffers.
 *
 * Only the owning worker touches a pool, so there are no locks. Under
 * AddressSanitizer the free lists are switched off so that a use after
 * free is reported instead of being hidden by recycling.
 */
#include "internal.h"

void tern__pool_init(tern__pool *p, size_t size, size_t max_free) {
  p->size = size < sizeof(void *) ? sizeof(void *) : size;
  p->free = NULL;
  p->nfree = 0;
#ifdef TERN__ASAN
  (void)max_free;
  p->max_free = 0;
#else
  p->max_free = max_free;
#endif
}

void *tern__pool_get(tern__worker *w, tern__pool *p) {
  void *obj = p->free;
  if (obj != NULL) {
    p->free = *(void **)obj;
    p->nfree--;
    return obj;
  }
  return tern__malloc(w->srv, p->size);
}

void tern__pool_put(tern__worker *w, tern__pool *p, void *obj) {
  if (p->nfree >= p->max_free) {
    tern__free(w->srv, obj);
    return;
  }
  *(void **)obj = p->free;
  p->free = obj;
  p->nfree++;
}

void tern__pool_drain(tern__worker *w, tern__pool *p) {
  while (p->free != NULL) {
    void *obj = p->free;
    p->free = *(void **)obj;
    tern__free(w->srv, obj);
  }
  p->nfree = 0;
}

tern__rbuf *tern__rbuf_get(tern__worker *w) {
  tern__rbuf *b = tern__pool_get(w, &w->rbuf_pool);
  if (b == NULL)
    return NULL;
  b->refs = 1;
  b->cap = (uint32_t)(w->rbuf_pool.size - sizeof(tern__rbuf));
  return b;
}

void tern__rbuf_ref(tern__rbuf *b) {
  b->refs++;
}

void tern__rbuf_unref(tern__worker *w, tern__rbuf *b) {
  if (b != NULL && --b->refs == 0)
    tern__pool_put(w, &w->rbuf_pool, b);
}
