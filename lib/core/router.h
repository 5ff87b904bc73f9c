/* Router: a segment tree keyed by path segments.
 *
 * Patterns are absolute paths made of '/'-separated segments. A segment is
 * a literal ("users"), a parameter (":id", matching one non-empty segment),
 * or, as the last segment only, a wildcard "*" matching the rest of the
 * path (possibly empty). Lookup walks one node per path segment, so its
 * cost grows with the path's depth, never with the number of routes.
 *
 * Specificity: at each segment a literal child beats a parameter child,
 * which beats a wildcard; the router backtracks when the more specific
 * branch fails further down. Among routes on the same node, an exact
 * method match beats the any-method route (method NULL or "*").
 *
 * The router is built before the server runs and read-only afterwards, so
 * lookups from many worker threads need no lock.
 */
#ifndef TERN_CORE_ROUTER_H
#define TERN_CORE_ROUTER_H

#include <stddef.h>

typedef struct tern__router tern__router;

/* Allocation goes through these (tern's allocator hook). */
typedef struct {
  void *(*malloc)(size_t size, void *user);
  void *(*realloc)(void *p, size_t size, void *user);
  void (*free)(void *p, void *user);
  void *user;
} tern__router_alloc;

/* A captured parameter: name from the pattern, value from the path. */
typedef struct {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len; /* for the wildcard: the rest of the path, name "*" */
} tern__route_param;

#define TERN__ROUTER_MAX_PARAMS 16

typedef struct {
  void *route;    /* the value given to tern__router_add; NULL if none */
  int status;     /* 0 found, 404 no path matched, 405 path but no method */
  char allow[96]; /* for 405: "GET, HEAD, POST" (the methods the path has;
                     HEAD is listed when GET is) */
  size_t allow_len;
  tern__route_param params[TERN__ROUTER_MAX_PARAMS];
  size_t nparams;
} tern__route_match;

/* Error codes returned are tern's public ones (TERN_EINVAL for a bad
 * pattern or method, TERN_EEXIST for a duplicate method+pattern,
 * TERN_ENOMEM). */
int tern__router_new(tern__router **out, const tern__router_alloc *a);
void tern__router_free(tern__router *r);

/* method: NULL or "*" for any method, else a token ("GET"). A route for GET
 * also answers HEAD unless HEAD has its own route. The pattern and method
 * strings are copied. `route` is an opaque pointer returned on match. */
int tern__router_add(tern__router *r, const char *method, const char *pattern,
                     void *route);

/* What tern__router_add would refuse in `method` and `pattern` as
 * TERN_EINVAL, as a static phrase ("a parameter name is used twice"), or
 * NULL when both are acceptable. Duplicates (TERN_EEXIST) are not seen. */
const char *tern__router_problem(const char *method, const char *pattern);

/* Match a request. `path` is the raw path without the query; it is not
 * decoded (parameters are returned as the raw bytes of their segment).
 * Empty segments ("//") match nothing but an empty literal. Parameter
 * values point into `path`.
 *
 * The pattern "/" is one empty segment and matches only the path "/"; a
 * trailing slash is significant ("/a" and "/a/" differ). A wildcard also
 * matches the bare prefix before it, with an empty value: "/s/" + "*"
 * matches "/s", "/s/" and "/s/a/b". When several nodes match the path, the
 * first in order of specificity that has a route for the method wins, and
 * a 405's Allow lists the methods of all of them (sorted, HEAD with GET),
 * cut after the last method that fits. Matching never allocates. */
void tern__router_match(const tern__router *r, const char *method,
                        size_t method_len, const char *path, size_t path_len,
                        tern__route_match *m);

#endif
