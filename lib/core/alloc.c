/* Allocation through the embedder's hook, counted for the statistics.
 *
 * The counters are server-wide atomics rather than per-worker because
 * allocations also happen on threads tern does not own (the blocking pool,
 * callers responding from their own threads). In steady state a keep-alive
 * request allocates nothing, so the locked add costs nothing where it
 * matters.
 */
#include <stdlib.h>
#if defined(__GLIBC__) &&                                                      \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
#include <malloc.h>
#define TERN__GLIBC_TRIM 1
#endif

#include "core/worker.h"

/* The default allocator (tern_settings_init). */
void *tern__std_malloc(size_t n, void *u) {
  (void)u;
  return malloc(n);
}
void *tern__std_realloc(void *p, size_t n, void *u) {
  (void)u;
  return realloc(p, n);
}
void tern__std_free(void *p, void *u) {
  (void)u;
  free(p);
}

/* Free memory glibc's malloc keeps inside its heaps above which it is
 * handed back to the system. */
#define TRIM_ABOVE ((size_t)8 << 20)

/* After a burst, what tern freed stays inside malloc's heaps: glibc gives
 * back only the free top of a heap, and a heap whose top is still in use
 * keeps every freed page resident (a process would hold its peak for
 * ever, which operators of long-running servers report as a leak).
 * Once a second, after the pools gave back what they did not need,
 * worker 0 looks at what malloc holds free and, past TRIM_ABOVE, asks it
 * to release the free pages of every heap (malloc_trim). Only with the
 * default allocator: an embedder's own is its own business. */
void tern__allocator_release(tern_server *srv) {
#ifdef TERN__GLIBC_TRIM
  struct mallinfo2 mi;
  if (srv->s.allocator.malloc != tern__std_malloc)
    return;
  mi = mallinfo2();
  if (mi.fordblks < TRIM_ABOVE)
    return;
  malloc_trim(0);
  atomic_fetch_add_explicit(&srv->trims, 1, memory_order_relaxed);
#else
  (void)srv;
#endif
}

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
