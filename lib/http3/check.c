/* The field count of HTTP/3 requests (check.h): a reader of
 * request-stream frames that counts the field lines of each HEADERS
 * frame's field section.
 *
 * Frames are read as RFC 9114 7.1 lays them out: a type and a length,
 * each a variable-length integer, then the payload. Only HEADERS
 * payloads are looked into; DATA and the rest are stepped over by their
 * length. nghttp3 judges the frames themselves (order, types, sizes) and
 * ends the connection or the stream where they are wrong; this reader
 * only needs to stay in step with it.
 *
 * A field section (RFC 9204 4.5) is a prefix of two integers (Required
 * Insert Count, then the sign bit and Delta Base) and field lines, each
 * told apart by its first bits: an indexed line (1, or 0001 post-base) is
 * one integer; a line with a name reference (01, or 0000 post-base) an
 * integer and a value string; a line with a literal name (001) a name
 * string and a value string. A string is a length (RFC 7541 5.1 integer
 * after its Huffman bit) and that many bytes, stepped over unread.
 *
 * A request whose bytes all arrive in one call (a GET with its FIN) is
 * read with state on the stack. A stream read over several calls keeps
 * its place in a small table by stream id (open addressing, grown by
 * doubling, never per request). */
#include "http3/check.h"

#include <stdlib.h>
#include <string.h>

/* Where in the frames. */
enum { SC_TYPE, SC_LEN, SC_PAYLOAD, SC_DONE };
/* Where in a field section: the next byte starts its Required Insert
 * Count, its Delta Base, a field line or a value string; or it goes on
 * an integer; or it is part of a string being stepped over. */
enum { Q_RIC, Q_BASE, Q_LINE, Q_VALUE, Q_INT, Q_SKIP };
/* What an integer is, so what follows it. */
enum { W_RIC, W_BASE, W_INDEX, W_NAMEREF, W_NAMELEN, W_VALUELEN };

struct tern__h3_scan {
  int64_t id;     /* -1: a free slot */
  uint64_t v;     /* the frame's type or length being read */
  uint64_t left;  /* payload bytes of the current frame still to come */
  uint64_t qv;    /* the section's integer being read */
  uint64_t skip;  /* string bytes still to step over */
  uint64_t lines; /* field lines of the section so far */
  uint8_t state;  /* SC_* */
  uint8_t need;   /* bytes of the frame's integer still to read; 0: none */
  uint8_t fields; /* the current frame is HEADERS */
  uint8_t q;      /* Q_* */
  uint8_t what;   /* W_*: the integer being read */
  uint8_t shift;  /* of its next continuation byte */
  uint8_t then;   /* Q_VALUE or Q_LINE: after the string being skipped */
};

static void *std_malloc(size_t n, void *ctx) {
  (void)ctx;
  return malloc(n);
}

static void std_free(void *p, void *ctx) {
  (void)ctx;
  free(p);
}

void tern__h3_check_init(tern__h3_check *c, const tern__h3_check_mem *mem) {
  memset(c, 0, sizeof(*c));
  if (mem != NULL) {
    c->mem = *mem;
  } else {
    c->mem.malloc = std_malloc;
    c->mem.free = std_free;
  }
}

void tern__h3_check_free(tern__h3_check *c) {
  if (c->tab != NULL)
    c->mem.free(c->tab, c->mem.ctx);
  c->tab = NULL;
  c->cap = c->n = 0;
}

/* An integer of the section is whole: what comes next. */
static void int_done(tern__h3_scan *st, uint64_t v) {
  switch (st->what) {
  case W_RIC:
    st->q = Q_BASE;
    break;
  case W_BASE:
  case W_INDEX:
    st->q = Q_LINE;
    break;
  case W_NAMEREF:
    st->q = Q_VALUE;
    break;
  default: /* a string's length */
    st->skip = v;
    st->then = st->what == W_NAMELEN ? Q_VALUE : Q_LINE;
    st->q = v > 0 ? Q_SKIP : st->then;
    break;
  }
}

/* The first byte of an integer with an n-bit prefix (RFC 7541 5.1). */
static void int_start(tern__h3_scan *st, uint8_t b, unsigned n, int what) {
  uint8_t mask = (uint8_t)((1u << n) - 1);
  st->what = (uint8_t)what;
  if ((b & mask) < mask) {
    int_done(st, b & mask);
  } else {
    st->qv = mask;
    st->shift = 0;
    st->q = Q_INT;
  }
}

/* p[0 .. n) of a field section: 0, or 1 when it cannot be one. */
static int section(tern__h3_scan *st, const uint8_t *p, size_t n) {
  while (n > 0) {
    uint8_t b = *p;
    if (st->q == Q_SKIP) {
      size_t k = st->skip < n ? (size_t)st->skip : n;
      p += k;
      n -= k;
      st->skip -= k;
      if (st->skip == 0)
        st->q = st->then;
      continue;
    }
    p++;
    n--;
    switch (st->q) {
    case Q_RIC:
      int_start(st, b, 8, W_RIC);
      break;
    case Q_BASE:
      int_start(st, b, 7, W_BASE);
      break;
    case Q_VALUE:
      int_start(st, b, 7, W_VALUELEN);
      break;
    case Q_LINE:
      st->lines++;
      if (b & 0x80)
        int_start(st, b, 6, W_INDEX); /* indexed */
      else if (b & 0x40)
        int_start(st, b, 4, W_NAMEREF); /* literal, name reference */
      else if (b & 0x20)
        int_start(st, b, 3, W_NAMELEN); /* literal name */
      else if (b & 0x10)
        int_start(st, b, 4, W_INDEX); /* indexed, post-base */
      else
        int_start(st, b, 3, W_NAMEREF); /* name reference, post-base */
      break;
    default: /* Q_INT: a continuation byte */
      if (st->shift > 56)
        return 1; /* past 64 bits: no decoder takes it */
      st->qv += (uint64_t)(b & 0x7f) << st->shift;
      st->shift = (uint8_t)(st->shift + 7);
      if (!(b & 0x80))
        int_done(st, st->qv);
      break;
    }
  }
  return 0;
}

/* The section's last byte was read: its count is queued. 0, or 1 when
 * it ends inside a line (or is a third section in one call). */
static int section_end(tern__h3_check *c, tern__h3_scan *st) {
  int bad = st->q != Q_LINE || c->ndone == TERN__H3_CHECK_DONE;
  if (!bad)
    c->done[c->ndone++] = st->lines;
  st->q = Q_RIC;
  st->lines = 0;
  return bad;
}

/* The stream's frames in p[0 .. n): 0 or 1 as section(). */
static int scan(tern__h3_check *c, tern__h3_scan *st, const uint8_t *p,
                size_t n) {
  while (n > 0 && st->state != SC_DONE) {
    if (st->state == SC_PAYLOAD) {
      size_t k = st->left < n ? (size_t)st->left : n;
      if (st->fields && section(st, p, k) != 0)
        goto bad;
      p += k;
      n -= k;
      st->left -= k;
      if (st->left == 0) {
        st->state = SC_TYPE;
        if (st->fields && section_end(c, st) != 0)
          goto bad;
      }
      continue;
    }
    /* A byte of the frame's type or length. */
    if (st->need == 0) {
      st->need = (uint8_t)(1u << (p[0] >> 6));
      st->v = p[0] & 0x3f;
    } else {
      st->v = (st->v << 8) | p[0];
    }
    p++;
    n--;
    if (--st->need > 0)
      continue;
    if (st->state == SC_TYPE) {
      st->fields = st->v == 0x01;
      st->state = SC_LEN;
    } else {
      st->left = st->v;
      st->state = SC_PAYLOAD;
      if (st->left == 0) {
        if (st->fields)
          goto bad; /* a HEADERS frame with no section prefix */
        st->state = SC_TYPE;
      }
    }
  }
  return 0;
bad:
  st->state = SC_DONE;
  return 1;
}

static size_t home(const tern__h3_check *c, int64_t id) {
  return (size_t)((uint64_t)id >> 2) & (c->cap - 1);
}

static tern__h3_scan *find(tern__h3_check *c, int64_t id) {
  size_t i;
  if (c->cap == 0)
    return NULL;
  for (i = home(c, id); c->tab[i].id >= 0; i = (i + 1) & (c->cap - 1))
    if (c->tab[i].id == id)
      return &c->tab[i];
  return NULL;
}

static tern__h3_scan *slot_for(tern__h3_check *c, int64_t id) {
  size_t i;
  for (i = home(c, id); c->tab[i].id >= 0; i = (i + 1) & (c->cap - 1))
    ;
  return &c->tab[i];
}

/* A new stream's state, the table kept at most half full; NULL: no
 * memory. */
static tern__h3_scan *add(tern__h3_check *c, int64_t id) {
  tern__h3_scan *s;
  if (2 * (c->n + 1) > c->cap) {
    size_t cap = c->cap != 0 ? 2 * c->cap : 8, old = c->cap, i;
    tern__h3_scan *tab = c->mem.malloc(cap * sizeof(*tab), c->mem.ctx);
    tern__h3_scan *prev = c->tab;
    if (tab == NULL)
      return NULL;
    for (i = 0; i < cap; i++)
      tab[i].id = -1;
    c->tab = tab;
    c->cap = cap;
    for (i = 0; i < old; i++)
      if (prev[i].id >= 0)
        *slot_for(c, prev[i].id) = prev[i];
    if (prev != NULL)
      c->mem.free(prev, c->mem.ctx);
  }
  s = slot_for(c, id);
  memset(s, 0, sizeof(*s));
  s->id = id;
  c->n++;
  return s;
}

/* Linear probing's deletion: the entries after the hole that may sit in
 * it move back, so that no search stops short of them. */
static void del(tern__h3_check *c, tern__h3_scan *s) {
  size_t i = (size_t)(s - c->tab), j = i, mask = c->cap - 1;
  for (;;) {
    size_t k;
    j = (j + 1) & mask;
    if (c->tab[j].id < 0)
      break;
    k = home(c, c->tab[j].id);
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
      continue;
    c->tab[i] = c->tab[j];
    i = j;
  }
  c->tab[i].id = -1;
  c->n--;
}

int tern__h3_check_request(tern__h3_check *c, int64_t id, uint64_t off,
                           const uint8_t *p, size_t n, int fin) {
  tern__h3_scan *st, one;
  int rv;

  c->ndone = c->took = 0;
  if (off == 0 && fin) {
    /* The whole request in one call. */
    memset(&one, 0, sizeof(one));
    st = &one;
  } else {
    st = off == 0 ? add(c, id) : find(c, id);
    if (st == NULL)
      return off == 0 ? -1 : 0; /* not followed: forgotten, or no memory */
  }
  rv = scan(c, st, p, n);
  if (rv == 0 && fin && st->state == SC_PAYLOAD && st->fields)
    rv = 1; /* the stream ends inside a field section */
  if (st != &one && (fin || rv != 0))
    del(c, st);
  return rv;
}

int tern__h3_check_take(tern__h3_check *c, uint64_t *count) {
  if (c->took == c->ndone)
    return 0;
  *count = c->done[c->took++];
  return 1;
}

void tern__h3_check_forget(tern__h3_check *c, int64_t id) {
  tern__h3_scan *s = find(c, id);
  if (s != NULL)
    del(c, s);
}
