/* Per-worker free lists and refcounted read buffers.
 *
 * Only the owning worker touches a pool, so there are no locks. Under
 * AddressSanitizer the free lists are switched off so that a use after
 * free is reported instead of being hidden by recycling.
 */
#include <string.h>

#include "core/worker.h"

void tern__pool_init(tern__pool *p, size_t size, size_t max_free) {
  p->size = size < sizeof(void *) ? sizeof(void *) : size;
  p->free = NULL;
  p->nfree = 0;
  p->low = 0;
  p->idle = 0;
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
    if (--p->nfree < p->low)
      p->low = p->nfree;
    return obj;
  }
  p->low = 0;
  return tern__malloc(w->srv, p->size);
}

void tern__pool_put(tern__worker *w, tern__pool *p, void *obj) {
  if (p->max_free == 0) {
    tern__free(w->srv, obj);
    return;
  }
  *(void **)obj = p->free;
  p->free = obj;
  p->nfree++;
}

void tern__pool_trim(tern__worker *w, tern__pool *p) {
  size_t idle = p->low; /* free all along: not needed this round */

  p->idle = idle > 0 ? p->idle + 1 : 0;
  /* Below the floor only what stayed unused for a while. */
  if (p->idle < TERN__POOL_IDLE && p->nfree - idle < p->max_free)
    idle = p->nfree > p->max_free ? p->nfree - p->max_free : 0;
  while (idle-- > 0) {
    void *obj = p->free;
    p->free = *(void **)obj;
    p->nfree--;
    tern__free(w->srv, obj);
  }
  p->low = p->nfree;
}

void tern__pool_drain(tern__worker *w, tern__pool *p) {
  while (p->free != NULL) {
    void *obj = p->free;
    p->free = *(void **)obj;
    tern__free(w->srv, obj);
  }
  p->nfree = 0;
}

/* ---- Small blocks ---------------------------------------------------- */

/* Before each block: its class (TERN__SMALL_CLASSES for a large block)
 * and the size asked for. 16 bytes keep the block 16-byte aligned. */
typedef struct {
  size_t cls;
  size_t size;
} small_hdr;

_Static_assert(sizeof(small_hdr) == 16, "small blocks stay aligned");

static size_t class_size(size_t cls) {
  return (size_t)64 << cls;
}

void *tern__small_malloc(tern__worker *w, size_t n) {
  size_t cls = 0;
  small_hdr *h;
  while (cls < TERN__SMALL_CLASSES && n + sizeof(small_hdr) > class_size(cls))
    cls++;
  if (cls < TERN__SMALL_CLASSES)
    h = tern__pool_get(w, &w->small[cls]);
  else if (n > SIZE_MAX - sizeof(small_hdr))
    h = NULL;
  else
    h = tern__malloc(w->srv, n + sizeof(small_hdr));
  if (h == NULL)
    return NULL;
  h->cls = cls;
  h->size = n;
  return h + 1;
}

void tern__small_free(tern__worker *w, void *p) {
  small_hdr *h;
  if (p == NULL)
    return;
  h = (small_hdr *)p - 1;
  if (h->cls < TERN__SMALL_CLASSES)
    tern__pool_put(w, &w->small[h->cls], h);
  else
    tern__free(w->srv, h);
}

void *tern__small_realloc(tern__worker *w, void *p, size_t n) {
  small_hdr *h;
  void *q;
  if (p == NULL)
    return tern__small_malloc(w, n);
  h = (small_hdr *)p - 1;
  if (h->cls < TERN__SMALL_CLASSES &&
      n + sizeof(small_hdr) <= class_size(h->cls)) {
    h->size = n; /* fits where it is */
    return p;
  }
  if ((q = tern__small_malloc(w, n)) == NULL)
    return NULL;
  memcpy(q, p, h->size < n ? h->size : n);
  tern__small_free(w, p);
  return q;
}

/* ---- Large blocks ---------------------------------------------------- */

void *tern__big_get(tern__worker *w, size_t n, size_t *cap) {
  size_t cls = 0;
  while (cls < TERN__BIG_CLASSES && n > TERN__BIG_MIN << cls)
    cls++;
  if (cls == TERN__BIG_CLASSES) {
    *cap = n;
    return tern__malloc(w->srv, n);
  }
  *cap = TERN__BIG_MIN << cls;
  return tern__pool_get(w, &w->big[cls]);
}

void tern__big_put(tern__worker *w, void *p, size_t cap) {
  size_t cls = 0;
  if (p == NULL)
    return;
  while (cls < TERN__BIG_CLASSES && cap != TERN__BIG_MIN << cls)
    cls++;
  if (cls < TERN__BIG_CLASSES)
    tern__pool_put(w, &w->big[cls], p);
  else
    tern__free(w->srv, p);
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

void *tern__small_mem_malloc(size_t n, void *w) {
  return tern__small_malloc(w, n);
}

void tern__small_mem_free(void *p, void *w) {
  tern__small_free(w, p);
}

void *tern__small_mem_calloc(size_t n, size_t size, void *w) {
  void *p;
  if (size != 0 && n > SIZE_MAX / size)
    return NULL;
  p = tern__small_malloc(w, n * size);
  if (p != NULL)
    memset(p, 0, n * size);
  return p;
}

void *tern__small_mem_realloc(void *p, size_t n, void *w) {
  return tern__small_realloc(w, p, n);
}
