/* Per-worker pools, small blocks and refcounted read buffers
 * (lib/core/pool.c). */
#ifndef TERN_CORE_POOL_H
#define TERN_CORE_POOL_H

#include "core/alloc.h"

/* ---- Fixed-size object pools (per worker, no locks) -------------- */

/* A pool keeps what is given back, so that connections cycling between
 * busy and idle reuse what others returned instead of freeing and
 * allocating it again. tern__pool_trim, once a second from the worker's
 * tick, frees what sat on the free list the whole time since the trim
 * before (its low-water mark), down to no fewer than max_free: under
 * steady load nothing moves, and within two seconds of a burst a pool is
 * back to its floor. Objects that stayed unused through TERN__POOL_IDLE
 * trims in a row go even below the floor: a quiet server does not keep a
 * busy one's working set (after a burst, with malloc_trim, RSS returns to
 * near its start), while a pool in use keeps what it used within the
 * last seconds. */
#define TERN__POOL_IDLE 2
typedef struct {
  size_t size; /* object size */
  void *free;  /* singly linked through the first word */
  size_t nfree;
  size_t max_free; /* the floor; 0 under AddressSanitizer: no free list */
  size_t low;      /* fewest free since the last trim */
  unsigned idle;   /* trims in a row that found objects unused */
} tern__pool;

void tern__pool_init(tern__pool *p, size_t size, size_t max_free);
void *tern__pool_get(tern__worker *w, tern__pool *p);
void tern__pool_put(tern__worker *w, tern__pool *p, void *obj);
void tern__pool_trim(tern__worker *w, tern__pool *p);
void tern__pool_drain(tern__worker *w, tern__pool *p);

/* Small blocks of any size, for objects that come and go with requests
 * (HTTP/2 streams, nghttp2's own per-stream memory): blocks up to
 * TERN__SMALL_MAX bytes come from per-worker pools of size classes, so
 * a steady stream of requests reuses them instead of calling the
 * allocator; larger ones go to it directly. Owning worker only; realloc
 * and free take any block these returned. */
#define TERN__SMALL_CLASSES 8 /* 64 B to 8 KiB, header included */
#define TERN__SMALL_MAX ((size_t)8192 - 16)
/* What each class keeps free after a burst: up to 1 MiB of blocks, and
 * never more than 8192 of them, so at most about 7.5 MiB a worker. A
 * class must hold what a busy connection's peak needs: 128 HTTP/3
 * requests in flight with 16-field heads keep some 2,000 field buffers
 * of nghttp3's alive at once, and ngtcp2's sorted lists take 4 KiB+
 * nodes as its sent packets come and go. */
#define TERN__SMALL_KEEP_BYTES ((size_t)1 << 20)
#define TERN__SMALL_KEEP_MAX 8192
void *tern__small_malloc(tern__worker *w, size_t n);
void *tern__small_realloc(tern__worker *w, void *p, size_t n);
void tern__small_free(tern__worker *w, void *p);
/* The same four calls in the shape nghttp2's, ngtcp2's and nghttp3's
 * memory structs take (the user pointer is the worker), so that each
 * library's per-connection memory comes from its worker's pools. */
void *tern__small_mem_malloc(size_t n, void *w);
void tern__small_mem_free(void *p, void *w);
void *tern__small_mem_calloc(size_t n, size_t size, void *w);
void *tern__small_mem_realloc(void *p, size_t n, void *w);

/* ---- Large blocks: buffers that live as long as a response --------- */

/* Blocks of 16 KiB to 1 MiB in power-of-two classes, from per-worker
 * pools, for a buffer a response holds from its first byte to its last
 * (the file handler's block over TLS, HTTP/2 and HTTP/3): a steady
 * stream of such responses reuses them instead of calling the allocator
 * for each. tern__big_get gives a block of at least n bytes and its size
 * in *cap; tern__big_put takes it back with that size. A request over
 * 1 MiB goes to the allocator directly (and back to it). Each class keeps
 * up to TERN__BIG_KEEP_BYTES free after a burst, so at most 14 MiB a
 * worker, and what stays unused goes back as the other pools' does.
 * Owning worker only. */
#define TERN__BIG_CLASSES 7 /* 16 KiB to 1 MiB */
#define TERN__BIG_MIN ((size_t)16384)
#define TERN__BIG_KEEP_BYTES ((size_t)2 << 20)
void *tern__big_get(tern__worker *w, size_t n, size_t *cap);
void tern__big_put(tern__worker *w, void *p, size_t cap);

/* ---- Read buffers: refcounted so that request views stay valid ---- */

typedef struct {
  uint32_t refs;
  uint32_t cap;
  char data[];
} tern__rbuf;

tern__rbuf *tern__rbuf_get(tern__worker *w);
void tern__rbuf_ref(tern__rbuf *b);
void tern__rbuf_unref(tern__worker *w, tern__rbuf *b);

#endif
