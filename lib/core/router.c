/* Router: a segment tree keyed by path segments (see router.h).
 *
 * Decisions that router.h leaves open, made here:
 *
 * - The root pattern "/" is one empty segment, like the last segment of
 *   "/a/". So the root node itself never holds routes: "/" is its empty
 *   literal child, and "/" matches only the path "/".
 * - A trailing slash is significant: "/a" and "/a/" are different routes,
 *   and the path "/a/" reaches the empty literal segment after "a".
 * - A wildcard also matches when the path ends right before it. The
 *   pattern "/static/" "*" (split in two only to keep this comment closed)
 *   matches "/static" with an empty value, as well as "/static/" (empty)
 *   and "/static/a/b" ("a/b"). A route of its own for "/static" (or for
 *   "/static/") is more specific and wins over the wildcard.
 * - The wildcard counts as one of the TERN__ROUTER_MAX_PARAMS parameters,
 *   because its value is returned in the same params array.
 * - Parameter names are stored per route, in pattern order, so two routes
 *   that share a node may name its parameter differently ("/u/:id" and
 *   "/u/:name/x"); a match reports the names of the route it found.
 * - For HEAD, a route for HEAD itself beats the GET route, which beats the
 *   any-method route on the same node: HEAD is GET without the body, so
 *   the GET handler is the closer fit.
 * - A 405 happens only when no node that matches the path has a route for
 *   the method. Its Allow list is then the union of the methods of all
 *   nodes that match the path (any of them would succeed), sorted by
 *   bytes, without duplicates, with HEAD added wherever GET is. When the
 *   list does not fit in allow[] it is cut after the last method that
 *   fits, so it stays a well-formed list.
 * - Literal pattern segments may not contain bytes that a request path
 *   cannot (controls, space, DEL, '?', '#'): such a route could never
 *   match, so adding it is a mistake worth reporting as TERN_EINVAL.
 * - There is no escaping: a segment that starts with ':' is always a
 *   parameter and a segment that is exactly "*" always a wildcard. A ':' or
 *   '*' elsewhere in a segment ("a:b", "v*") is literal.
 * - A path that does not start with '/' matches nothing (404).
 * - Matching recurses once per segment of the deepest pattern, never per
 *   route, so its stack use is bounded by the patterns the program adds.
 * - A NULL allocator in tern__router_new means the C library's.
 */
#include "core/router.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"
#include "core/text.h"

/* One route on a node. A single allocation holds the method (if any) and
 * the parameter names, each NUL-terminated, back to back in `data`. */
typedef struct {
  void *route;
  const char *method; /* into data; NULL for the any-method route */
  size_t method_len;
  size_t nnames; /* ":name" parameters, not counting a wildcard */
  char data[];
} rentry;

typedef struct rnode rnode;

/* A literal child as its parent lists it. The length and the first bytes
 * of the segment are kept in the array itself, so that most steps of a
 * binary search compare them without following the pointer (a likely
 * cache miss with thousands of children). */
typedef struct {
  rnode *node;
  uint32_t len;
  char head[4]; /* the segment's first bytes, zero-padded */
} rlit;

/* A node is reached from its parent by one segment. Literal children are
 * kept sorted by (length, bytes) so that lookup is a binary search, which
 * stays fast with thousands of children; the segment text lives at the end
 * of the child's own allocation. */
struct rnode {
  rlit *lits;
  rnode *param;
  rnode *wild;
  rentry **entries; /* exactly nentries long; routes are added rarely */
  uint32_t nlits;
  uint32_t caplits;
  uint32_t nentries;
  uint32_t seg_len;
  char seg[];
};

struct tern__router {
  tern__router_alloc a;
  rnode *root;
};

/* ---------------------------------------------------------------------
 * Allocation
 * ------------------------------------------------------------------ */

static void *libc_malloc(size_t size, void *user) {
  (void)user;
  return malloc(size);
}

static void *libc_realloc(void *p, size_t size, void *user) {
  (void)user;
  return realloc(p, size);
}

static void libc_free(void *p, void *user) {
  (void)user;
  free(p);
}

static void *r_malloc(const tern__router *r, size_t n) {
  return r->a.malloc(n, r->a.user);
}

static void *r_realloc(const tern__router *r, void *p, size_t n) {
  return r->a.realloc(p, n, r->a.user);
}

static void r_free(const tern__router *r, void *p) {
  if (p)
    r->a.free(p, r->a.user);
}

static rnode *node_new(const tern__router *r, const char *seg, size_t len) {
  rnode *n;
  /* Segment lengths are stored in 32 bits to keep nodes small. */
  if ((uint32_t)len != len || len > SIZE_MAX - sizeof(rnode) - 1)
    return NULL;
  n = r_malloc(r, sizeof(rnode) + len + 1);
  if (!n)
    return NULL;
  memset(n, 0, sizeof(rnode));
  if (len)
    memcpy(n->seg, seg, len);
  n->seg[len] = '\0';
  n->seg_len = (uint32_t)len;
  return n;
}

static void node_free(const tern__router *r, rnode *n) {
  uint32_t i;
  if (!n)
    return;
  for (i = 0; i < n->nlits; i++)
    node_free(r, n->lits[i].node);
  node_free(r, n->param);
  node_free(r, n->wild);
  for (i = 0; i < n->nentries; i++)
    r_free(r, n->entries[i]);
  r_free(r, n->lits);
  r_free(r, n->entries);
  r_free(r, n);
}

int tern__router_new(tern__router **out, const tern__router_alloc *a) {
  tern__router_alloc def = {libc_malloc, libc_realloc, libc_free, NULL};
  tern__router tmp, *r;
  if (!out)
    return TERN_EINVAL;
  if (!a)
    a = &def;
  if (!a->malloc || !a->realloc || !a->free)
    return TERN_EINVAL;
  tmp.a = *a;
  tmp.root = NULL;
  r = r_malloc(&tmp, sizeof(*r));
  if (!r)
    return TERN_ENOMEM;
  *r = tmp;
  r->root = node_new(r, "", 0);
  if (!r->root) {
    r_free(&tmp, r);
    return TERN_ENOMEM;
  }
  *out = r;
  return 0;
}

void tern__router_free(tern__router *r) {
  tern__router_alloc a;
  if (!r)
    return;
  node_free(r, r->root);
  a = r->a;
  a.free(r, a.user);
}

/* ---------------------------------------------------------------------
 * Literal children
 * ------------------------------------------------------------------ */

/* Order by length first: most comparisons then end without touching the
 * bytes, and any total order serves a binary search. */
static int seg_cmp(const rlit *l, const char *s, size_t len) {
  size_t i, h = len < sizeof(l->head) ? len : sizeof(l->head);
  if (l->len != len)
    return l->len < len ? -1 : 1;
  for (i = 0; i < h; i++)
    if (l->head[i] != s[i])
      return (unsigned char)l->head[i] < (unsigned char)s[i] ? -1 : 1;
  if (len <= h)
    return 0;
  return memcmp(l->node->seg + h, s + h, len - h);
}

/* The index of the child for segment s, or where it would be inserted;
 * *found says which. */
static uint32_t lit_find(const rnode *n, const char *s, size_t len,
                         int *found) {
  uint32_t lo = 0, hi = n->nlits;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    int c = seg_cmp(&n->lits[mid], s, len);
    if (c == 0) {
      *found = 1;
      return mid;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  *found = 0;
  return lo;
}

static int lit_insert(const tern__router *r, rnode *n, uint32_t at,
                      rnode *child) {
  if (n->nlits == n->caplits) {
    uint32_t cap = n->caplits ? n->caplits * 2 : 4;
    size_t bytes = (size_t)cap * sizeof(rlit);
    rlit *p;
    /* Refuse counts whose doubling or byte size would wrap around. */
    if (n->caplits > UINT32_MAX / 2 || bytes / sizeof(rlit) != cap)
      return TERN_ENOMEM;
    p = r_realloc(r, n->lits, bytes);
    if (!p)
      return TERN_ENOMEM;
    n->lits = p;
    n->caplits = cap;
  }
  memmove(n->lits + at + 1, n->lits + at,
          (size_t)(n->nlits - at) * sizeof(*n->lits));
  n->lits[at].node = child;
  n->lits[at].len = child->seg_len;
  memset(n->lits[at].head, 0, sizeof(n->lits[at].head));
  memcpy(n->lits[at].head, child->seg,
         child->seg_len < sizeof(n->lits[at].head) ? child->seg_len
                                                   : sizeof(n->lits[at].head));
  n->nlits++;
  return 0;
}

static void lit_remove(rnode *n, uint32_t at) {
  memmove(n->lits + at, n->lits + at + 1,
          (size_t)(n->nlits - at - 1) * sizeof(*n->lits));
  n->nlits--;
}

/* ---------------------------------------------------------------------
 * Adding routes
 * ------------------------------------------------------------------ */

/* Bytes that never occur in a request path as the router sees it. */
static int is_path_byte(unsigned char c) {
  return c > 0x20 && c != 0x7f && c != '?' && c != '#';
}

/* Segment kinds. */
enum { SEG_LIT, SEG_PARAM, SEG_WILD };

static int seg_kind(const char *s, size_t len) {
  if (len == 1 && s[0] == '*')
    return SEG_WILD;
  if (len >= 1 && s[0] == ':')
    return SEG_PARAM;
  return SEG_LIT;
}

/* Check the pattern, counting its parameters (wildcard included) against
 * the limit, and measure the bytes its route entry needs for their names.
 * Returns NULL, or what is wrong with it (for the caller's log line).
 */
static const char *pattern_problem(const char *p, size_t *names_sz) {
  const char *names[TERN__ROUTER_MAX_PARAMS];
  size_t lens[TERN__ROUTER_MAX_PARAMS];
  size_t np = 0, nsz = 0;
  const char *s;
  if (p[0] != '/')
    return "it does not start with '/'";
  s = p + 1;
  for (;;) {
    size_t len = strcspn(s, "/");
    int last = s[len] == '\0';
    size_t i;
    switch (seg_kind(s, len)) {
    case SEG_WILD:
      if (!last)
        return "'*' is not its last segment";
      if (++np > TERN__ROUTER_MAX_PARAMS)
        return "too many parameters";
      break;
    case SEG_PARAM:
      if (len < 2)
        return "a parameter has no name";
      if (np >= TERN__ROUTER_MAX_PARAMS)
        return "too many parameters";
      /* tern_request_param finds the first of two equal names only, so
       * the second could never be read: a mistake, not a route. */
      for (i = 0; i < np; i++)
        if (names[i] != NULL && lens[i] == len - 1 &&
            memcmp(names[i], s + 1, len - 1) == 0)
          return "a parameter name is used twice";
      names[np] = s + 1;
      lens[np++] = len - 1;
      nsz += len; /* the name without ':', plus its NUL */
      break;
    default:
      for (i = 0; i < len; i++)
        if (!is_path_byte((unsigned char)s[i]))
          return "a literal segment has a byte no path can contain";
      break;
    }
    if (last)
      break;
    s += len + 1;
  }
  *names_sz = nsz;
  return NULL;
}

static int method_check(const char *m) {
  size_t i;
  if (!m[0])
    return TERN_EINVAL;
  for (i = 0; m[i]; i++)
    if (!tern__is_tchar((unsigned char)m[i]))
      return TERN_EINVAL;
  return 0;
}

static rentry *entry_new(const tern__router *r, const char *method,
                         const char *pattern, size_t names_sz, void *route) {
  size_t mlen = method ? strlen(method) : 0;
  size_t sz = sizeof(rentry) + (method ? mlen + 1 : 0) + names_sz;
  rentry *e;
  char *w;
  const char *s;
  e = r_malloc(r, sz);
  if (!e)
    return NULL;
  e->route = route;
  e->method = NULL;
  e->method_len = 0;
  e->nnames = 0;
  w = e->data;
  if (method) {
    memcpy(w, method, mlen + 1);
    e->method = w;
    e->method_len = mlen;
    w += mlen + 1;
  }
  for (s = pattern + 1;; s++) {
    size_t len = strcspn(s, "/");
    if (seg_kind(s, len) == SEG_PARAM) {
      memcpy(w, s + 1, len - 1);
      w[len - 1] = '\0';
      w += len;
      e->nnames++;
    }
    s += len;
    if (!*s)
      break;
  }
  return e;
}

const char *tern__router_problem(const char *method, const char *pattern) {
  size_t names_sz;
  if (pattern == NULL)
    return "there is no pattern";
  if (method != NULL && strcmp(method, "*") != 0 && method_check(method) != 0)
    return "the method is not a token";
  return pattern_problem(pattern, &names_sz);
}

static int method_eq(const rentry *e, const char *m, size_t len) {
  return e->method && e->method_len == len && memcmp(e->method, m, len) == 0;
}

int tern__router_add(tern__router *r, const char *method, const char *pattern,
                     void *route) {
  size_t names_sz;
  rentry *e, **ents;
  rnode *n, *fresh = NULL, *fresh_parent = NULL;
  const char *s;
  uint32_t i;

  if (!r || !pattern)
    return TERN_EINVAL;
  if (method && strcmp(method, "*") == 0)
    method = NULL;
  if (method && method_check(method) != 0)
    return TERN_EINVAL;
  if (pattern_problem(pattern, &names_sz) != NULL)
    return TERN_EINVAL;
  e = entry_new(r, method, pattern, names_sz, route);
  if (!e)
    return TERN_ENOMEM;

  /* Walk down, creating missing nodes. New nodes form one chain below the
   * first one created (`fresh`), so a failure can undo them all by
   * unlinking that one node, which leaves the tree as it was. */
  n = r->root;
  for (s = pattern + 1;; s++) {
    size_t len = strcspn(s, "/");
    rnode **slot = NULL, *child;
    int kind = seg_kind(s, len), found = 0;
    uint32_t at = 0;
    if (kind == SEG_LIT) {
      at = lit_find(n, s, len, &found);
      child = found ? n->lits[at].node : NULL;
    } else {
      slot = kind == SEG_PARAM ? &n->param : &n->wild;
      child = *slot;
    }
    if (!child) {
      /* Parameter and wildcard nodes need no segment text. */
      child = node_new(r, s, kind == SEG_LIT ? len : 0);
      if (!child)
        goto nomem;
      if (slot) {
        *slot = child;
      } else if (lit_insert(r, n, at, child) != 0) {
        r_free(r, child);
        goto nomem;
      }
      if (!fresh) {
        fresh = child;
        fresh_parent = n;
      }
    }
    n = child;
    s += len;
    if (!*s)
      break;
  }

  for (i = 0; i < n->nentries; i++) {
    const rentry *o = n->entries[i];
    if (method ? method_eq(o, method, e->method_len) : !o->method) {
      /* An existing node was reached, so nothing new was created. */
      r_free(r, e);
      return TERN_EEXIST;
    }
  }
  if (n->nentries == UINT32_MAX ||
      (size_t)n->nentries + 1 > SIZE_MAX / sizeof(*ents))
    goto nomem;
  ents = r_realloc(r, n->entries, ((size_t)n->nentries + 1) * sizeof(*ents));
  if (!ents)
    goto nomem;
  n->entries = ents;
  n->entries[n->nentries++] = e;
  return 0;

nomem:
  if (fresh) {
    if (fresh_parent->param == fresh) {
      fresh_parent->param = NULL;
    } else if (fresh_parent->wild == fresh) {
      fresh_parent->wild = NULL;
    } else {
      int found;
      uint32_t at = lit_find(fresh_parent, fresh->seg, fresh->seg_len, &found);
      if (found)
        lit_remove(fresh_parent, at);
    }
    node_free(r, fresh);
  }
  r_free(r, e);
  return TERN_ENOMEM;
}

/* ---------------------------------------------------------------------
 * Matching
 * ------------------------------------------------------------------ */

/* The walk visits, in order of preference, every node whose pattern
 * matches the path. In the tree each node sits at one depth, so a walk
 * visits each node at most once and backtracking cannot blow up. */
typedef struct {
  const char *method;
  size_t method_len;
  const char *path;
  size_t path_len;
  tern__route_match *m;
  int collect;             /* 0: find a route; 1: find the next Allow method */
  int seen;                /* some node with routes matched the path */
  const char *prev, *best; /* collect: last method emitted, next one */
  size_t prev_len, best_len;
} mctx;

/* Byte order of method names, shorter first on a common prefix. */
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen) {
  size_t n = alen < blen ? alen : blen;
  int c = n ? memcmp(a, b, n) : 0;
  if (c)
    return c;
  return alen < blen ? -1 : alen > blen;
}

static void collect_one(mctx *c, const char *name, size_t len) {
  if (c->prev && name_cmp(name, len, c->prev, c->prev_len) <= 0)
    return;
  if (!c->best || name_cmp(name, len, c->best, c->best_len) < 0) {
    c->best = name;
    c->best_len = len;
  }
}

static const rentry *pick(const rnode *n, const char *m, size_t len) {
  const rentry *any = NULL, *get = NULL;
  int head = len == 4 && memcmp(m, "HEAD", 4) == 0;
  uint32_t i;
  for (i = 0; i < n->nentries; i++) {
    const rentry *e = n->entries[i];
    if (!e->method)
      any = e;
    else if (method_eq(e, m, len))
      return e;
    else if (head && method_eq(e, "GET", 3))
      get = e;
  }
  return get ? get : any;
}

/* Called on a node the whole path matched; np values are in m->params.
 * Returns 1 to stop the walk. */
static int visit(mctx *c, const rnode *n, size_t np, int wild) {
  const rentry *e;
  const char *names;
  size_t i;
  if (!n->nentries)
    return 0;
  c->seen = 1;
  if (c->collect) {
    for (i = 0; i < n->nentries; i++) {
      e = n->entries[i];
      if (e->method)
        collect_one(c, e->method, e->method_len);
      if (method_eq(e, "GET", 3))
        collect_one(c, "HEAD", 4);
    }
    return 0;
  }
  e = pick(n, c->method, c->method_len);
  if (!e)
    return 0;
  names = e->data + (e->method ? e->method_len + 1 : 0);
  for (i = 0; i < e->nnames; i++) {
    size_t len = strlen(names);
    c->m->params[i].name = names;
    c->m->params[i].name_len = len;
    names += len + 1;
  }
  if (wild) {
    c->m->params[np - 1].name = "*";
    c->m->params[np - 1].name_len = 1;
  }
  c->m->nparams = np;
  c->m->route = e->route;
  c->m->status = 0;
  return 1;
}

static void set_value(mctx *c, size_t np, const char *v, size_t len) {
  c->m->params[np].value = v;
  c->m->params[np].value_len = len;
}

/* `pos` is where the next segment starts; past path_len when the path is
 * used up (a path ending in '/' still has one empty segment left). */
static int walk(mctx *c, const rnode *n, size_t pos, size_t np) {
  const char *seg;
  size_t len, next;
  if (pos > c->path_len) {
    if (visit(c, n, np, 0))
      return 1;
    /* A wildcard right after the end matches with an empty value. */
    if (n->wild && np < TERN__ROUTER_MAX_PARAMS) {
      set_value(c, np, c->path + c->path_len, 0);
      return visit(c, n->wild, np + 1, 1);
    }
    return 0;
  }
  seg = c->path + pos;
  {
    const char *slash = memchr(seg, '/', c->path_len - pos);
    len = slash ? (size_t)(slash - seg) : c->path_len - pos;
  }
  next = pos + len + 1;
  if (n->nlits) {
    int found;
    uint32_t at = lit_find(n, seg, len, &found);
    if (found && walk(c, n->lits[at].node, next, np))
      return 1;
  }
  /* The limit is enforced when routes are added; checking it again keeps
   * a write past params[] impossible whatever the tree holds. */
  if (n->param && len > 0 && np < TERN__ROUTER_MAX_PARAMS) {
    set_value(c, np, seg, len);
    if (walk(c, n->param, next, np + 1))
      return 1;
  }
  if (n->wild && np < TERN__ROUTER_MAX_PARAMS) {
    set_value(c, np, seg, c->path_len - pos);
    return visit(c, n->wild, np + 1, 1);
  }
  return 0;
}

static void allow_build(mctx *c, const rnode *root) {
  tern__route_match *m = c->m;
  size_t cap = sizeof(m->allow) - 1; /* keep room for the NUL */
  c->collect = 1;
  c->prev = NULL;
  c->prev_len = 0;
  /* Emit the methods in order, one walk each finding the smallest method
   * above the previous one. That needs no memory, and only 405 answers
   * pay for it. */
  for (;;) {
    size_t sep = m->allow_len ? 2 : 0;
    c->best = NULL;
    c->best_len = 0;
    walk(c, root, 1, 0);
    if (!c->best)
      break;
    /* Stop at the first method that does not fit, rather than skip it,
     * so that a cut list is always a prefix of the full one. */
    if (sep + c->best_len > cap - m->allow_len)
      break;
    if (sep)
      memcpy(m->allow + m->allow_len, ", ", 2);
    memcpy(m->allow + m->allow_len + sep, c->best, c->best_len);
    m->allow_len += sep + c->best_len;
    c->prev = c->best;
    c->prev_len = c->best_len;
  }
  m->allow[m->allow_len] = '\0';
  m->nparams = 0;
}

void tern__router_match(const tern__router *r, const char *method,
                        size_t method_len, const char *path, size_t path_len,
                        tern__route_match *m) {
  mctx c;
  m->route = NULL;
  m->status = 404;
  m->allow[0] = '\0';
  m->allow_len = 0;
  m->nparams = 0;
  if (!r || !path || path_len == 0 || path[0] != '/')
    return;
  if (!method)
    method_len = 0;
  memset(&c, 0, sizeof(c));
  c.method = method ? method : "";
  c.method_len = method_len;
  c.path = path;
  c.path_len = path_len;
  c.m = m;
  if (walk(&c, r->root, 1, 0))
    return;
  m->nparams = 0;
  if (!c.seen)
    return;
  m->status = 405;
  allow_build(&c, r->root);
}
