/* Allocation through the embedder's hook, counted for the statistics.
 *
 * The counters are server-wide atomics rather than per-worker because
 * allocations also happen on threads tern does not own (the blocking pool,
 * callers responding from their own threads). In steady state a keep-alive
 * request allocates nothing, so the locked add costs nothing where it
 * matters.
 */
#include "internal.h"

void *tern__malloc(tern_server *srv, size_t size) {
  void *p = srv->s.allocator.malloc(size, srv->s.allocator.user);
  if (p != NULL) {
    atomic_fetch_add_explicit(&srv->allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&srv->alloc_bytes, size, memory_order_relaxed);
  }
  return p;
}

/* A resize counts apart from new blocks, so that allocs - frees stays
 * the number of blocks held. */
void *tern__realloc(tern_server *srv, void *p, size_t size) {
  void *q = srv->s.allocator.realloc(p, size, srv->s.allocator.user);
  if (q != NULL) {
    atomic_fetch_add_explicit(p != NULL ? &srv->reallocs : &srv->allocs, 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&srv->alloc_bytes, size, memory_order_relaxed);
  }
  return q;
}

void tern__free(tern_server *srv, void *p) {
  if (p == NULL)
    return;
  atomic_fetch_add_explicit(&srv->frees, 1, memory_order_relaxed);
  srv->s.allocator.free(p, srv->s.allocator.user);
}
