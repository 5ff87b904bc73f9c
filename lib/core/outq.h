/* The output queue: segments, blocks and markers (lib/core/outq.c). */
#ifndef TERN_CORE_OUTQ_H
#define TERN_CORE_OUTQ_H

#include "core/pool.h"

/* ---- Output queue ------------------------------------------------- */

/* A block that copied output bytes are appended to. */
typedef struct tern__wblk {
  struct tern__wblk *next;
  uint32_t refs; /* segments pointing into it */
  uint32_t used;
  char data[];
} tern__wblk;

enum {
  TERN__SEG_COPY = 0, /* bytes in a wblk */
  TERN__SEG_REF = 1,  /* caller's bytes; release/done when written */
  TERN__SEG_END = 2,  /* zero-length marker: the response is written */
  TERN__SEG_MARK = 3, /* zero-length marker: run `done` when written */
};

typedef struct {
  const char *base;
  size_t len;
  int kind;
  tern__wblk *blk;
  tern_request *req;       /* for done callbacks and END */
  tern_release_fn release; /* REF: release(base, ruser) */
  tern_write_fn done;      /* done(req, status, duser) */
  void *ruser, *duser;
} tern__seg;

typedef struct {
  tern__seg *segs;
  size_t head, count, cap; /* segs[head .. head+count) are pending */
  size_t head_off;         /* bytes of segs[head] already written */
  size_t bytes;            /* pending bytes */
  uint64_t consumed;       /* bytes written (consumed) since init */
  tern__wblk *tail;        /* block being appended to */
} tern__outq;

void tern__outq_init(tern__outq *q);
/* Copy bytes; they join the previous segment when contiguous. */
int tern__outq_copy(tern__worker *w, tern__outq *q, const void *p, size_t len);
/* Room to format into: on success *p points at `*room` >= `min` writable
 * bytes at the end of the queue; tern__outq_commit then appends the first
 * `n` of them. Returns TERN_ETOOBIG when `min` exceeds a block. */
int tern__outq_reserve(tern__worker *w, tern__outq *q, size_t min, char **p,
                       size_t *room);
int tern__outq_commit(tern__worker *w, tern__outq *q, size_t n);
int tern__outq_ref(tern__worker *w, tern__outq *q, const void *p, size_t len,
                   tern_release_fn release, void *ruser);
int tern__outq_mark(tern__worker *w, tern__outq *q, int kind, tern_request *req,
                    tern_write_fn done, void *duser);
/* Move everything from `src` to the end of `dst`. */
int tern__outq_splice(tern__worker *w, tern__outq *dst, tern__outq *src);
/* Move the first `n` bytes of `src`, with the zero-length segments right
 * behind them (markers run when dst writes them), to the end of `dst`.
 * Bytes are not copied: blocks and references change queues, and a
 * reference cut in two releases once both pieces are written. Moved
 * references with a release callback hold a reference to `hold` (if not
 * NULL) until then, so the request outlives its releases as on HTTP/1.1. */
int tern__outq_move(tern__worker *w, tern__outq *dst, tern__outq *src, size_t n,
                    tern_request *hold);
/* Fill up to n iovecs from the pending segments; returns how many. */
size_t tern__outq_iov(const tern__outq *q, uv_buf_t *iov, size_t n);
/* The same, for the pending bytes past the first `skip` of them: a
 * transport that hands bytes out before they count as written (QUIC keeps
 * them until the peer acknowledges them) fills vectors from where it left
 * off. Zero-length segments are passed over; the vectors point into the
 * queue's own segments, valid until tern__outq_consume covers them. */
size_t tern__outq_iov_from(const tern__outq *q, size_t skip, uv_buf_t *iov,
                           size_t n);
/* `n` bytes were written: finish segments (status 0). */
void tern__outq_consume(tern__worker *w, tern__outq *q, size_t n);
/* Take back what follows the first `keep` pending bytes, for output that
 * is replaced before any of it was written: those segments move, their
 * callbacks not yet run, into a new array (*cut, *ncut; NULL and 0 when
 * there are none) for tern__outq_fail_cut. Zero-length markers right at
 * the cut stay, as they end what precedes it. The cut may fall inside a
 * copied segment, never inside a referenced one (TERN_EINVAL). Returns
 * TERN_ENOMEM, changing nothing, when the array cannot be had. */
int tern__outq_cut(tern__worker *w, tern__outq *q, size_t keep, tern__seg **cut,
                   size_t *ncut);
/* Finish segments cut from `q`, telling their owners `status`, and free
 * the array. */
void tern__outq_fail_cut(tern__worker *w, tern__outq *q, tern__seg *cut,
                         size_t n, int status);
/* Drop all pending segments, telling their owners `status`. */
void tern__outq_fail(tern__worker *w, tern__outq *q, int status);
void tern__outq_free(tern__worker *w, tern__outq *q);

#endif
