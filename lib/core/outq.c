/* The output queue: what a connection (or a request waiting for its turn
 * in a pipeline) has to send, as a list of segments.
 *
 * Small pieces (status lines, headers, small bodies) are copied into
 * pooled blocks and merge into one segment while they are contiguous, so
 * that sixteen pipelined responses usually leave as a single iovec.
 * Caller-owned bodies are referenced and released once written. Marker
 * segments of length zero carry completion events (a streamed write is
 * done, a response is fully written) in order with the bytes.
 */
#include <string.h>

#include "core/worker.h"

void tern__outq_init(tern__outq *q) {
  memset(q, 0, sizeof(*q));
}

static size_t blk_cap(tern__worker *w) {
  return w->wblk_pool.size - sizeof(tern__wblk);
}

/* Segment arrays come from the worker's pool at the standard size and go
 * back whenever their queue empties, so an idle connection holds none and
 * a busy one allocates nothing. Only a queue that outgrows the standard
 * size reallocates, and that array is freed when it empties. */
static size_t std_segs(tern__worker *w) {
  return w->seg_pool.size / sizeof(tern__seg);
}

static int reserve_segs(tern__worker *w, tern__outq *q, size_t more) {
  size_t need = q->count + more;
  tern__seg *segs;
  size_t cap;

  if (q->head + need <= q->cap)
    return 0;
  if (need <= q->cap) {
    memmove(q->segs, q->segs + q->head, q->count * sizeof(*q->segs));
    q->head = 0;
    return 0;
  }
  if (q->segs == NULL && need <= std_segs(w)) {
    q->segs = tern__pool_get(w, &w->seg_pool);
    if (q->segs == NULL)
      return TERN_ENOMEM;
    q->cap = std_segs(w);
    q->head = 0;
    return 0;
  }
  cap = q->cap ? q->cap * 2 : std_segs(w);
  while (cap < need)
    cap *= 2;
  if (q->cap == std_segs(w)) {
    /* Leaving the pool's size: move to a heap array of our own. */
    segs = tern__malloc(w->srv, cap * sizeof(*segs));
    if (segs != NULL) {
      memcpy(segs, q->segs + q->head, q->count * sizeof(*segs));
      tern__pool_put(w, &w->seg_pool, q->segs);
      q->head = 0;
    }
  } else {
    segs = tern__realloc(w->srv, q->segs, cap * sizeof(*segs));
  }
  if (segs == NULL)
    return TERN_ENOMEM;
  if (q->head > 0)
    memmove(segs, segs + q->head, q->count * sizeof(*segs));
  q->segs = segs;
  q->cap = cap;
  q->head = 0;
  return 0;
}

/* An empty queue gives its segment array and block back. */
static void release_storage(tern__worker *w, tern__outq *q) {
  if (q->count > 0)
    return;
  if (q->segs != NULL) {
    if (q->cap == std_segs(w))
      tern__pool_put(w, &w->seg_pool, q->segs);
    else
      tern__free(w->srv, q->segs);
    q->segs = NULL;
    q->cap = q->head = 0;
  }
  if (q->tail != NULL && q->tail->refs == 0) {
    tern__pool_put(w, &w->wblk_pool, q->tail);
    q->tail = NULL;
  }
}

static tern__seg *push(tern__outq *q) {
  tern__seg *s = &q->segs[q->head + q->count++];
  memset(s, 0, sizeof(*s));
  return s;
}

static void blk_release(tern__worker *w, tern__outq *q, tern__wblk *b) {
  if (--b->refs > 0)
    return;
  if (b == q->tail)
    b->used = 0; /* nothing points into it: start again at the front */
  else
    tern__pool_put(w, &w->wblk_pool, b);
}

/* Make sure the tail block has at least `min` free bytes. */
static int tail_room(tern__worker *w, tern__outq *q, size_t min) {
  tern__wblk *b = q->tail, *nb;
  if (b != NULL && blk_cap(w) - b->used >= min)
    return 0;
  nb = tern__pool_get(w, &w->wblk_pool);
  if (nb == NULL)
    return TERN_ENOMEM;
  nb->refs = 0;
  nb->used = 0;
  nb->next = NULL;
  if (b != NULL && b->refs == 0)
    tern__pool_put(w, &w->wblk_pool, b);
  q->tail = nb;
  return 0;
}

int tern__outq_reserve(tern__worker *w, tern__outq *q, size_t min, char **p,
                       size_t *room) {
  int rc;
  if (min > blk_cap(w))
    return TERN_ETOOBIG;
  if ((rc = tail_room(w, q, min)) != 0)
    return rc;
  *p = q->tail->data + q->tail->used;
  *room = blk_cap(w) - q->tail->used;
  return 0;
}

/* Append the `n` bytes already written at the tail block's end. */
int tern__outq_commit(tern__worker *w, tern__outq *q, size_t n) {
  tern__wblk *b = q->tail;
  tern__seg *last = q->count ? &q->segs[q->head + q->count - 1] : NULL;

  if (n == 0)
    return 0;
  if (last != NULL && last->kind == TERN__SEG_COPY && last->blk == b &&
      last->base + last->len == b->data + b->used) {
    last->len += n;
  } else {
    tern__seg *s;
    if (reserve_segs(w, q, 1) != 0)
      return TERN_ENOMEM;
    s = push(q);
    s->kind = TERN__SEG_COPY;
    s->base = b->data + b->used;
    s->len = n;
    s->blk = b;
    b->refs++;
  }
  b->used += (uint32_t)n;
  q->bytes += n;
  return 0;
}

int tern__outq_copy(tern__worker *w, tern__outq *q, const void *p, size_t len) {
  const char *src = p;

  while (len > 0) {
    size_t n;
    int rc = tail_room(w, q, 1);
    if (rc != 0)
      return rc;
    n = blk_cap(w) - q->tail->used;
    if (n > len)
      n = len;
    memcpy(q->tail->data + q->tail->used, src, n);
    if ((rc = tern__outq_commit(w, q, n)) != 0)
      return rc;
    src += n;
    len -= n;
  }
  return 0;
}

int tern__outq_ref(tern__worker *w, tern__outq *q, const void *p, size_t len,
                   tern_release_fn release, void *ruser) {
  tern__seg *s;
  if (reserve_segs(w, q, 1) != 0)
    return TERN_ENOMEM;
  s = push(q);
  s->kind = TERN__SEG_REF;
  s->base = p;
  s->len = len;
  s->release = release;
  s->ruser = ruser;
  q->bytes += len;
  return 0;
}

int tern__outq_mark(tern__worker *w, tern__outq *q, int kind, tern_request *req,
                    tern_write_fn done, void *duser) {
  tern__seg *s;
  if (reserve_segs(w, q, 1) != 0)
    return TERN_ENOMEM;
  s = push(q);
  s->kind = kind;
  s->req = req;
  s->done = done;
  s->duser = duser;
  if (req != NULL)
    req->refs++; /* the request outlives its markers */
  return 0;
}

int tern__outq_splice(tern__worker *w, tern__outq *dst, tern__outq *src) {
  if (src->count > 0) {
    if (reserve_segs(w, dst, src->count) != 0)
      return TERN_ENOMEM;
    memcpy(dst->segs + dst->head + dst->count, src->segs + src->head,
           src->count * sizeof(*src->segs));
    dst->count += src->count;
    dst->bytes += src->bytes;
  }
  /* The source's blocks now belong to the segments that point into them;
   * the last one is freed by the destination once its refs drop to 0. */
  src->count = src->head_off = src->bytes = 0;
  release_storage(w, src);
  src->tail = NULL; /* a block with segments is the destination's now */
  return 0;
}

static void pop(tern__outq *q) {
  q->head++;
  q->count--;
  q->head_off = 0;
  if (q->count == 0)
    q->head = 0;
}

/* A caller's release callback shared by the pieces of a referenced
 * segment that now sit in two queues: it runs once, when the last piece
 * is finished, with the base the caller gave. */
typedef struct {
  tern__worker *w;
  tern_release_fn release;
  void *ruser;
  const char *base;
  unsigned refs;
} ref_share;

static void share_release(void *data, void *user) {
  ref_share *h = user;
  (void)data;
  if (--h->refs > 0)
    return;
  h->release((void *)(uintptr_t)h->base, h->ruser);
  tern__small_free(h->w, h);
}

/* The segment at src's head is about to be cut at head_off or into two:
 * make its release run only once both pieces are finished. */
static int share_ref(tern__worker *w, tern__seg *s, int pieces) {
  ref_share *h;
  if (s->release == NULL)
    return 0;
  if (s->release == share_release) {
    ((ref_share *)s->ruser)->refs += (unsigned)pieces - 1;
    return 0;
  }
  h = tern__small_malloc(w, sizeof(*h));
  if (h == NULL)
    return TERN_ENOMEM;
  h->w = w;
  h->release = s->release;
  h->ruser = s->ruser;
  h->base = s->base;
  h->refs = (unsigned)pieces;
  s->release = share_release;
  s->ruser = h;
  return 0;
}

int tern__outq_move(tern__worker *w, tern__outq *dst, tern__outq *src, size_t n,
                    tern_request *hold) {
  while (src->count > 0) {
    tern__seg *s = &src->segs[src->head];
    size_t avail = s->len - src->head_off;
    size_t m = avail < n ? avail : n;
    int split = m < avail;
    tern__seg *d;

    if (n == 0 && avail > 0)
      break; /* the next bytes are not part of this move */
    if (reserve_segs(w, dst, 1) != 0)
      return TERN_ENOMEM;
    if (s->kind == TERN__SEG_REF && (split || src->head_off > 0) &&
        share_ref(w, s, split ? 2 : 1) != 0)
      return TERN_ENOMEM;
    d = push(dst);
    *d = *s;
    d->base = s->base + src->head_off;
    d->len = m;
    if (d->kind == TERN__SEG_REF && d->release != NULL && hold != NULL) {
      d->req = hold; /* finish() drops it after the release */
      hold->refs++;
    }
    if (s->kind == TERN__SEG_COPY && s->blk == src->tail) {
      /* Its block now has segments in dst: src appends elsewhere. */
      src->tail = NULL;
    }
    if (split) {
      if (s->kind == TERN__SEG_COPY)
        s->blk->refs++;
      src->head_off += m;
    } else {
      pop(src);
    }
    src->bytes -= m;
    dst->bytes += m;
    n -= m;
  }
  release_storage(w, src);
  return 0;
}

size_t tern__outq_iov(const tern__outq *q, uv_buf_t *iov, size_t n) {
  size_t i, k = 0, off = q->head_off;
  for (i = 0; i < q->count && k < n; i++) {
    const tern__seg *s = &q->segs[q->head + i];
    if (s->len > off) {
      iov[k].base = (char *)s->base + off;
      iov[k].len = s->len - off;
      k++;
    }
    off = 0;
  }
  return k;
}

size_t tern__outq_iov_from(const tern__outq *q, size_t skip, uv_buf_t *iov,
                           size_t n) {
  size_t i, k = 0, off = q->head_off;
  for (i = 0; i < q->count && k < n; i++) {
    const tern__seg *s = &q->segs[q->head + i];
    size_t avail = s->len > off ? s->len - off : 0;
    if (skip >= avail) {
      skip -= avail; /* handed out already (or a marker) */
    } else {
      iov[k].base = (char *)s->base + off + skip;
      iov[k].len = avail - skip;
      skip = 0;
      k++;
    }
    off = 0;
  }
  return k;
}

static void finish(tern__worker *w, tern__outq *q, tern__seg *s, int status) {
  switch (s->kind) {
  case TERN__SEG_COPY:
    blk_release(w, q, s->blk);
    break;
  case TERN__SEG_REF:
    if (s->release != NULL)
      s->release((void *)s->base, s->ruser);
    break;
  default:
    break;
  }
  if (s->done != NULL)
    s->done(s->req, status, s->duser);
  if (s->kind == TERN__SEG_END) {
    if (status == 0)
      TERN__STAT_ADD(w->stats.requests, 1);
    s->req->flags |= TERN__RQ_WRITTEN;
  }
  if (s->req != NULL)
    tern__request_unref(s->req);
}

void tern__outq_consume(tern__worker *w, tern__outq *q, size_t n) {
  q->bytes -= n;
  q->consumed += n;
  while (q->count > 0) {
    tern__seg s = q->segs[q->head];
    size_t avail = s.len - q->head_off;
    if (n < avail) {
      q->head_off += n;
      return;
    }
    n -= avail;
    pop(q);
    /* Callbacks may append to this queue: the copy in `s` stays valid. */
    finish(w, q, &s, 0);
  }
  release_storage(w, q);
}

int tern__outq_cut(tern__worker *w, tern__outq *q, size_t keep, tern__seg **cut,
                   size_t *ncut) {
  size_t i, k, n, pos = 0, off = 0;
  tern__seg *s = NULL;

  *cut = NULL;
  *ncut = 0;
  for (i = 0; i < q->count; i++) {
    size_t len;
    s = &q->segs[q->head + i];
    off = i == 0 ? q->head_off : 0;
    len = s->len - off;
    if (len > 0 && pos + len > keep)
      break;
    pos += len;
  }
  if (i == q->count)
    return 0;
  /* A segment the cut falls inside stays, shortened; it can only be a
   * copied one, where several answers' bytes may have merged. */
  if (pos < keep && s->kind != TERN__SEG_COPY)
    return TERN_EINVAL;
  k = pos < keep ? i + 1 : i;
  n = q->count - k;
  if (n > 0) {
    *cut = tern__malloc(w->srv, n * sizeof(**cut));
    if (*cut == NULL)
      return TERN_ENOMEM;
    memcpy(*cut, q->segs + q->head + k, n * sizeof(**cut));
  }
  if (pos < keep)
    s->len = off + (keep - pos);
  q->count = k;
  q->bytes = keep;
  *ncut = n;
  if (q->count == 0)
    q->head = q->head_off = 0;
  return 0;
}

void tern__outq_fail_cut(tern__worker *w, tern__outq *q, tern__seg *cut,
                         size_t n, int status) {
  size_t i;
  for (i = 0; i < n; i++)
    finish(w, q, &cut[i], status);
  tern__free(w->srv, cut);
}

void tern__outq_fail(tern__worker *w, tern__outq *q, int status) {
  while (q->count > 0) {
    tern__seg s = q->segs[q->head];
    q->bytes -= s.len - q->head_off;
    pop(q);
    finish(w, q, &s, status);
  }
  q->bytes = 0;
  release_storage(w, q);
}

void tern__outq_free(tern__worker *w, tern__outq *q) {
  tern__outq_fail(w, q, TERN_ECLOSED);
  tern__outq_init(q);
}
