/* libFuzzer target for the router (lib/core/router.c).
 *
 * The input is a list of lines: the first `n` (n from the first byte) are
 * routes to add, the rest are requests to match; each line's first byte
 * picks a method and the rest is the pattern or the path. Every match is
 * checked against a slow reference matcher written from router.h's
 * contract, and the target traps when they disagree:
 * - 404 exactly when no added pattern matches the path;
 * - a route is found exactly when some matching pattern has a route for
 *   the method (HEAD is served by GET, any method by NULL or "*"), and the
 *   route found is one of those, with parameter values that are the path's
 *   segments in the pattern's order (the wildcard's is the rest);
 * - 405 otherwise, with an Allow list that is sorted, has no duplicates,
 *   holds only methods of matching patterns (HEAD where GET is), and is
 *   the whole list whenever that fits;
 * - parameter views lie inside the path.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Ilib -Iinclude
 *        lib/core/router.c test/fuzz/fuzz_router.c
 */
#include "core/router.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define MAX_ROUTES 24
#define MAX_SEGS 4096 /* more than a 4 KiB input can hold */

static const char *const methods[] = {"GET",    "HEAD",  "POST", "PUT",
                                      "DELETE", "PATCH", "*",    NULL};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))

typedef struct {
  const char *p;
  size_t n;
} span;

typedef struct {
  const char *method; /* NULL or "*": any */
  char pattern[256];
  span segs[256]; /* a 255-byte pattern has at most 255 */
  size_t nsegs;
} route;

/* Split "/a/b" into "a", "b"; "/" is one empty segment. Returns 0 when
 * there are more than `cap` segments or no leading '/'. */
static int split(const char *p, size_t n, span *segs, size_t cap,
                 size_t *nsegs) {
  size_t i = 1, start = 1;

  *nsegs = 0;
  if (n == 0 || p[0] != '/')
    return 0;
  for (;; i++) {
    if (i == n || p[i] == '/') {
      if (*nsegs == cap)
        return 0;
      segs[*nsegs].p = p + start;
      segs[(*nsegs)++].n = i - start;
      if (i == n)
        return 1;
      start = i + 1;
    }
  }
}

/* The reference: does `rt` match the path segments, and with which
 * parameter values (in pattern order)? */
static int ref_match(const route *rt, const char *path, size_t path_len,
                     const span *ps, size_t nps, span *vals, size_t *nvals) {
  size_t i;

  *nvals = 0;
  for (i = 0; i < rt->nsegs; i++) {
    const span *s = &rt->segs[i];
    if (s->n == 1 && s->p[0] == '*' && i + 1 == rt->nsegs) {
      /* The rest of the path, possibly empty; also the bare prefix. */
      if (i < nps) {
        vals[*nvals].p = ps[i].p;
        vals[*nvals].n = (size_t)(path + path_len - ps[i].p);
      } else if (i == nps) {
        vals[*nvals].p = path + path_len;
        vals[*nvals].n = 0;
      } else {
        return 0;
      }
      (*nvals)++;
      return 1;
    }
    if (i >= nps)
      return 0;
    if (s->n > 0 && s->p[0] == ':') {
      if (ps[i].n == 0)
        return 0;
      vals[(*nvals)++] = ps[i];
    } else if (s->n != ps[i].n || memcmp(s->p, ps[i].p, s->n) != 0) {
      return 0;
    }
  }
  return i == nps;
}

static int any_method(const char *m) {
  return m == NULL || strcmp(m, "*") == 0;
}

static int serves(const char *rm, const char *m) {
  if (any_method(rm))
    return 1;
  if (strcmp(rm, m) == 0)
    return 1;
  return strcmp(m, "HEAD") == 0 && strcmp(rm, "GET") == 0;
}

static int in_list(const char *list, size_t len, const char *m) {
  size_t ml = strlen(m), i = 0;

  while (i < len) {
    size_t j = i;
    while (j < len && list[j] != ',')
      j++;
    if (j - i == ml && memcmp(list + i, m, ml) == 0)
      return 1;
    i = j + 2; /* ", " */
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static route routes[MAX_ROUTES];
  size_t nroutes = 0, want, pos = 1;
  tern__router *r;
  tern__route_match m;
  const char *in = (const char *)data;

  if (size < 1)
    return 0;
  want = data[0] % (MAX_ROUTES + 1);
  CHECK(tern__router_new(&r, NULL) == 0);
  while (pos < size) {
    size_t end = pos;
    const char *method;
    while (end < size && in[end] != '\n')
      end++;
    method = methods[(unsigned char)in[pos] % NMETHODS];
    if (want > 0) {
      /* A route: the pattern is the rest of the line. */
      route *rt = &routes[nroutes];
      size_t n = end - pos - 1 < sizeof(rt->pattern) - 1
                     ? end - pos - 1
                     : sizeof(rt->pattern) - 1;
      want--;
      if (end == pos) {
        pos = end + 1;
        continue;
      }
      memcpy(rt->pattern, in + pos + 1, n);
      rt->pattern[n] = '\0';
      rt->method = method;
      /* A pattern with a NUL in it stops at the NUL, as C strings do. */
      n = strlen(rt->pattern);
      if (tern__router_add(r, method, rt->pattern, rt) == 0) {
        /* The router accepted it: it must be a path the reference can
         * split (a leading '/', segments within bounds). */
        CHECK(split(rt->pattern, n, rt->segs, 256, &rt->nsegs));
        nroutes++;
      }
    } else if (end > pos) {
      /* A request: the path is the rest of the line. */
      const char *path = in + pos + 1;
      size_t plen = end - pos - 1, nps, i, nvals;
      static span ps[MAX_SEGS];
      span vals[TERN__ROUTER_MAX_PARAMS + 1];
      int any = 0, ok = 0;
      const char *rm = method ? method : "GET";
      if (strcmp(rm, "*") == 0)
        rm = "OPTIONS";
      tern__router_match(r, rm, strlen(rm), path, plen, &m);
      CHECK(m.nparams <= TERN__ROUTER_MAX_PARAMS);
      CHECK(m.allow_len <= sizeof(m.allow));
      for (i = 0; i < m.nparams; i++)
        CHECK(m.params[i].value_len == 0 ||
              (m.params[i].value >= path &&
               m.params[i].value + m.params[i].value_len <= path + plen));
      if (!split(path, plen, ps, MAX_SEGS, &nps)) {
        /* Not a path: it matches nothing. */
        CHECK(m.status == 404 && m.route == NULL);
        pos = end + 1;
        continue;
      }
      for (i = 0; i < nroutes; i++) {
        if (!ref_match(&routes[i], path, plen, ps, nps, vals, &nvals))
          continue;
        any = 1;
        if (serves(routes[i].method, rm))
          ok = 1;
      }
      if (!any) {
        CHECK(m.status == 404 && m.route == NULL);
      } else if (ok) {
        route *rt = m.route;
        CHECK(m.status == 0 && rt != NULL);
        CHECK(rt >= routes && rt < routes + nroutes);
        CHECK(ref_match(rt, path, plen, ps, nps, vals, &nvals));
        CHECK(serves(rt->method, rm));
        CHECK(nvals == m.nparams);
        for (i = 0; i < nvals; i++)
          CHECK(vals[i].n == m.params[i].value_len &&
                (vals[i].n == 0 ||
                 memcmp(vals[i].p, m.params[i].value, vals[i].n) == 0));
      } else {
        size_t total = 0, k;
        int has[NMETHODS] = {0};
        CHECK(m.status == 405 && m.route == NULL);
        /* The methods of the matching patterns, HEAD where GET is. */
        for (k = 0; k < NMETHODS; k++) {
          if (any_method(methods[k]))
            continue;
          for (i = 0; i < nroutes; i++)
            if (!any_method(routes[i].method) &&
                ref_match(&routes[i], path, plen, ps, nps, vals, &nvals) &&
                (strcmp(routes[i].method, methods[k]) == 0 ||
                 (strcmp(methods[k], "HEAD") == 0 &&
                  strcmp(routes[i].method, "GET") == 0)))
              has[k] = 1;
          if (has[k])
            total += strlen(methods[k]) + (total ? 2 : 0);
          /* Listed only if it belongs; all of them if the list fits. */
          if (in_list(m.allow, m.allow_len, methods[k]))
            CHECK(has[k]);
        }
        if (total <= sizeof(m.allow)) {
          CHECK(m.allow_len == total);
          for (k = 0; k < NMETHODS; k++)
            if (has[k])
              CHECK(in_list(m.allow, m.allow_len, methods[k]));
        }
        /* Sorted by bytes, no duplicates. */
        for (i = 0, k = 0; i < m.allow_len; i++) {
          if (m.allow[i] != ',')
            continue;
          CHECK(i + 2 < m.allow_len && m.allow[i + 1] == ' ');
          {
            size_t a = k, al = i - k, b = i + 2, bl = b;
            int c;
            while (bl < m.allow_len && m.allow[bl] != ',')
              bl++;
            bl -= b;
            c = memcmp(m.allow + a, m.allow + b, al < bl ? al : bl);
            CHECK(c < 0 || (c == 0 && al < bl));
          }
          k = i + 2;
        }
      }
    }
    pos = end + 1;
  }
  tern__router_free(r);
  return 0;
}
