/* Unit tests for the segment-tree router (lib/core/router.c). */
#include "core/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "tern.h"

/* Route values are the addresses of these, so a test can tell which route
 * matched by pointer. */
static int R[32];

/* A counting allocator: it can fail the Nth allocation (malloc or a
 * realloc that allocates), and it tracks live blocks so a test can check
 * that everything was given back. */
typedef struct {
  long calls;   /* allocations attempted so far */
  long fail_at; /* fail the allocation with this number (1-based); 0 none */
  long live;    /* blocks allocated and not yet freed */
  long failed;  /* allocations refused */
} counter;

static void *c_malloc(size_t size, void *user) {
  counter *c = user;
  void *p;
  c->calls++;
  if (c->fail_at && c->calls == c->fail_at) {
    c->failed++;
    return NULL;
  }
  p = malloc(size);
  if (p)
    c->live++;
  return p;
}

static void *c_realloc(void *p, size_t size, void *user) {
  counter *c = user;
  void *q;
  c->calls++;
  if (c->fail_at && c->calls == c->fail_at) {
    c->failed++;
    return NULL;
  }
  q = realloc(p, size);
  if (q && !p)
    c->live++;
  return q;
}

static void c_free(void *p, void *user) {
  counter *c = user;
  if (p) {
    c->live--;
    free(p);
  }
}

static tern__router *mk(void) {
  tern__router *r = NULL;
  int rc = tern__router_new(&r, NULL);
  if (rc != 0 || !r) {
    printf("# tern__router_new failed: %d\n", rc);
    exit(1);
  }
  return r;
}

static void match(const tern__router *r, const char *method, const char *path,
                  tern__route_match *m) {
  tern__router_match(r, method, method ? strlen(method) : 0, path, strlen(path),
                     m);
}

/* Assert that `method path` finds route `want` (NULL: expect 404). */
#define T_ROUTE(r, method, path, want)                                         \
  do {                                                                         \
    tern__route_match t__m;                                                    \
    match((r), (method), (path), &t__m);                                       \
    if ((want) == NULL) {                                                      \
      T_EQ_INT(t__m.status, 404);                                              \
    } else {                                                                   \
      T_EQ_INT(t__m.status, 0);                                                \
    }                                                                          \
    T_ASSERT(t__m.route == (void *)(want));                                    \
  } while (0)

static void test_new_free(void) {
  tern__router *r = NULL;
  counter c = {0, 0, 0, 0};
  tern__router_alloc a = {c_malloc, c_realloc, c_free, &c};
  tern__router_alloc bad = {c_malloc, NULL, c_free, &c};
  T_EQ_INT(tern__router_new(NULL, &a), TERN_EINVAL);
  T_EQ_INT(tern__router_new(&r, &bad), TERN_EINVAL);
  T_ASSERT(r == NULL);
  T_EQ_INT(tern__router_new(&r, &a), 0);
  T_ASSERT(r != NULL);
  T_ASSERT(c.live > 0);
  tern__router_free(r);
  T_EQ_INT(c.live, 0);
  tern__router_free(NULL);
}

static void test_literal(void) {
  tern__router *r = mk();
  T_EQ_INT(tern__router_add(r, "GET", "/a", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/a/b", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/abc/def/ghi", &R[2]), 0);
  T_ROUTE(r, "GET", "/a", &R[0]);
  T_ROUTE(r, "GET", "/a/b", &R[1]);
  T_ROUTE(r, "GET", "/abc/def/ghi", &R[2]);
  T_ROUTE(r, "GET", "/abc/def", NULL);
  T_ROUTE(r, "GET", "/abc/def/ghij", NULL);
  T_ROUTE(r, "GET", "/b", NULL);
  T_ROUTE(r, "GET", "/a/b/c", NULL);
  T_ROUTE(r, "GET", "/A", NULL);
  /* Segments that share a length and their first bytes. */
  T_EQ_INT(tern__router_add(r, "GET", "/s/abcdefgh", &R[3]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/s/abcdefgx", &R[4]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/s/abcdxfgh", &R[5]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/s/abc", &R[6]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/s/abce", &R[7]), 0);
  T_ROUTE(r, "GET", "/s/abcdefgh", &R[3]);
  T_ROUTE(r, "GET", "/s/abcdefgx", &R[4]);
  T_ROUTE(r, "GET", "/s/abcdxfgh", &R[5]);
  T_ROUTE(r, "GET", "/s/abc", &R[6]);
  T_ROUTE(r, "GET", "/s/abce", &R[7]);
  T_ROUTE(r, "GET", "/s/abcd", NULL);
  T_ROUTE(r, "GET", "/s/abcdefgy", NULL);
  T_ROUTE(r, "GET", "/s/abcdefg", NULL);
  {
    tern__route_match m;
    match(r, "GET", "/a/b", &m);
    T_EQ_INT(m.nparams, 0);
  }
  tern__router_free(r);
}

/* "/" is one empty segment: it matches only the path "/". Paths that do
 * not start with '/' match nothing. */
static void test_root(void) {
  tern__router *r = mk();
  tern__route_match m;
  T_ROUTE(r, "GET", "/", NULL);
  T_EQ_INT(tern__router_add(r, "GET", "/", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/x", &R[1]), 0);
  T_ROUTE(r, "GET", "/", &R[0]);
  T_ROUTE(r, "GET", "//", NULL);
  T_ROUTE(r, "GET", "", NULL);
  T_ROUTE(r, "GET", "x", NULL);
  T_ROUTE(r, "GET", "*", NULL);
  T_EQ_INT(tern__router_add(r, "GET", "/", &R[2]), TERN_EEXIST);
  tern__router_match(r, "GET", 3, NULL, 0, &m);
  T_EQ_INT(m.status, 404);
  tern__router_free(r);
}

static void test_trailing_slash(void) {
  tern__router *r = mk();
  T_EQ_INT(tern__router_add(r, "GET", "/a", &R[0]), 0);
  T_ROUTE(r, "GET", "/a/", NULL);
  T_EQ_INT(tern__router_add(r, "GET", "/a/", &R[1]), 0);
  T_ROUTE(r, "GET", "/a", &R[0]);
  T_ROUTE(r, "GET", "/a/", &R[1]);
  T_ROUTE(r, "GET", "/a//", NULL);
  /* A parameter never matches the empty segment after a trailing slash. */
  T_EQ_INT(tern__router_add(r, "GET", "/p/:id", &R[2]), 0);
  T_ROUTE(r, "GET", "/p/", NULL);
  T_ROUTE(r, "GET", "/p", NULL);
  T_ROUTE(r, "GET", "/p/1", &R[2]);
  T_ROUTE(r, "GET", "/p/1/", NULL);
  tern__router_free(r);
}

/* Empty segments in the middle of a path match only empty literals. */
static void test_empty_segments(void) {
  tern__router *r = mk();
  T_EQ_INT(tern__router_add(r, "GET", "/a//b", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/:x/:y/b", &R[1]), 0);
  T_ROUTE(r, "GET", "/a//b", &R[0]);
  T_ROUTE(r, "GET", "/a/b", NULL);
  T_ROUTE(r, "GET", "/c//b", NULL);
  T_ROUTE(r, "GET", "/c/d/b", &R[1]);
  tern__router_free(r);
}

static void test_params(void) {
  tern__router *r = mk();
  tern__route_match m;
  const char *path = "/users/42/posts/hello%20world";
  T_EQ_INT(tern__router_add(r, "GET", "/users/:uid/posts/:pid", &R[0]), 0);
  tern__router_match(r, "GET", 3, path, strlen(path), &m);
  T_EQ_INT(m.status, 0);
  T_ASSERT(m.route == &R[0]);
  T_EQ_INT(m.nparams, 2);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "uid");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "42");
  T_EQ_STR(m.params[1].name, m.params[1].name_len, "pid");
  /* Values are raw (not decoded) and point into the path. */
  T_EQ_STR(m.params[1].value, m.params[1].value_len, "hello%20world");
  T_ASSERT(m.params[0].value == path + 7);
  T_ASSERT(m.params[1].value == path + 16);
  /* The path need not be NUL-terminated: only path_len bytes count. */
  tern__router_match(r, "GET", 3, path, 18, &m);
  T_EQ_INT(m.status, 0);
  T_EQ_STR(m.params[1].value, m.params[1].value_len, "he");
  /* A parameter matches a whole segment, never part or more of one. */
  T_ROUTE(r, "GET", "/users/42/posts", NULL);
  T_ROUTE(r, "GET", "/users/42/posts/a/b", NULL);
  T_ROUTE(r, "GET", "/users//posts/a", NULL);
  tern__router_free(r);
}

/* Routes sharing a parameter node may name it differently; each match
 * reports the names of the route that matched. */
static void test_param_names_per_route(void) {
  tern__router *r = mk();
  tern__route_match m;
  T_EQ_INT(tern__router_add(r, "GET", "/u/:id", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/u/:name/x", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "POST", "/u/:uid", &R[2]), 0);
  match(r, "GET", "/u/7", &m);
  T_ASSERT(m.route == &R[0]);
  T_EQ_INT(m.nparams, 1);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "id");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "7");
  match(r, "GET", "/u/bob/x", &m);
  T_ASSERT(m.route == &R[1]);
  T_EQ_INT(m.nparams, 1);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "name");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "bob");
  match(r, "POST", "/u/7", &m);
  T_ASSERT(m.route == &R[2]);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "uid");
  tern__router_free(r);
}

static void test_specificity(void) {
  tern__router *r = mk();
  T_EQ_INT(tern__router_add(r, "GET", "/f/*", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/f/:x", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/f/new", &R[2]), 0);
  T_ROUTE(r, "GET", "/f/new", &R[2]);
  T_ROUTE(r, "GET", "/f/old", &R[1]);
  T_ROUTE(r, "GET", "/f/a/b", &R[0]);
  T_ROUTE(r, "GET", "/f/new/b", &R[0]);
  T_ROUTE(r, "GET", "/f/", &R[0]);
  tern__router_free(r);
}

static void test_backtracking(void) {
  tern__router *r = mk();
  tern__route_match m;
  T_EQ_INT(tern__router_add(r, "GET", "/a/b/c", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/a/:x/d", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/a/*", &R[2]), 0);
  T_ROUTE(r, "GET", "/a/b/c", &R[0]);
  match(r, "GET", "/a/b/d", &m);
  T_EQ_INT(m.status, 0);
  T_ASSERT(m.route == &R[1]);
  T_EQ_INT(m.nparams, 1);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "x");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "b");
  /* Neither the literal nor the parameter branch goes on: the wildcard
   * takes it, and the parameter value tried on the way is gone. */
  match(r, "GET", "/a/b/e", &m);
  T_EQ_INT(m.status, 0);
  T_ASSERT(m.route == &R[2]);
  T_EQ_INT(m.nparams, 1);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "*");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "b/e");
  tern__router_free(r);
}

static void test_wildcard(void) {
  tern__router *r = mk();
  tern__route_match m;
  T_EQ_INT(tern__router_add(r, "GET", "/static/*", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/u/:id/*", &R[1]), 0);
  match(r, "GET", "/static/a/b", &m);
  T_ASSERT(m.route == &R[0]);
  T_EQ_INT(m.nparams, 1);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "*");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "a/b");
  match(r, "GET", "/static/a/b/", &m);
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "a/b/");
  match(r, "GET", "/static//x", &m);
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "/x");
  match(r, "GET", "/static/", &m);
  T_ASSERT(m.route == &R[0]);
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "");
  /* The bare prefix matches too, with an empty value. */
  match(r, "GET", "/static", &m);
  T_EQ_INT(m.status, 0);
  T_ASSERT(m.route == &R[0]);
  T_EQ_INT(m.nparams, 1);
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "");
  T_ROUTE(r, "GET", "/statics", NULL);
  T_ROUTE(r, "GET", "/stati", NULL);
  match(r, "GET", "/u/5/x/y", &m);
  T_ASSERT(m.route == &R[1]);
  T_EQ_INT(m.nparams, 2);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "id");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "5");
  T_EQ_STR(m.params[1].name, m.params[1].name_len, "*");
  T_EQ_STR(m.params[1].value, m.params[1].value_len, "x/y");
  match(r, "GET", "/u/5", &m);
  T_ASSERT(m.route == &R[1]);
  T_EQ_STR(m.params[1].value, m.params[1].value_len, "");
  /* Routes of their own for the prefix beat the wildcard. */
  T_EQ_INT(tern__router_add(r, "GET", "/static", &R[2]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/static/", &R[3]), 0);
  T_ROUTE(r, "GET", "/static", &R[2]);
  T_ROUTE(r, "GET", "/static/", &R[3]);
  T_ROUTE(r, "GET", "/static/x", &R[0]);
  tern__router_free(r);
}

static void test_root_wildcard(void) {
  tern__router *r = mk();
  tern__route_match m;
  T_EQ_INT(tern__router_add(r, "GET", "/*", &R[0]), 0);
  match(r, "GET", "/", &m);
  T_ASSERT(m.route == &R[0]);
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "");
  match(r, "GET", "/a/b", &m);
  T_ASSERT(m.route == &R[0]);
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "a/b");
  T_ROUTE(r, "GET", "", NULL);
  T_EQ_INT(tern__router_add(r, "GET", "/", &R[1]), 0);
  T_ROUTE(r, "GET", "/", &R[1]);
  tern__router_free(r);
}

static void test_methods(void) {
  tern__router *r = mk();
  T_EQ_INT(tern__router_add(r, NULL, "/x", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "POST", "/x", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "*", "/y", &R[2]), 0);
  T_ROUTE(r, "POST", "/x", &R[1]);
  T_ROUTE(r, "GET", "/x", &R[0]);
  T_ROUTE(r, "BREW", "/x", &R[0]);
  /* Methods are case-sensitive. */
  T_ROUTE(r, "post", "/x", &R[0]);
  T_ROUTE(r, "DELETE", "/y", &R[2]);
  T_ROUTE(r, NULL, "/y", &R[2]);
  /* An exact route added after the any-method one still wins. */
  T_EQ_INT(tern__router_add(r, "DELETE", "/y", &R[3]), 0);
  T_ROUTE(r, "DELETE", "/y", &R[3]);
  T_ROUTE(r, "PUT", "/y", &R[2]);
  tern__router_free(r);
}

static void test_head(void) {
  tern__router *r = mk();
  T_EQ_INT(tern__router_add(r, "GET", "/g", &R[0]), 0);
  T_ROUTE(r, "HEAD", "/g", &R[0]);
  T_EQ_INT(tern__router_add(r, "GET", "/h", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "HEAD", "/h", &R[2]), 0);
  T_ROUTE(r, "HEAD", "/h", &R[2]);
  T_ROUTE(r, "GET", "/h", &R[1]);
  /* HEAD prefers the GET route to the any-method route. */
  T_EQ_INT(tern__router_add(r, "GET", "/a", &R[3]), 0);
  T_EQ_INT(tern__router_add(r, NULL, "/a", &R[4]), 0);
  T_ROUTE(r, "HEAD", "/a", &R[3]);
  T_ROUTE(r, "PUT", "/a", &R[4]);
  /* A HEAD-only route does not answer GET. */
  T_EQ_INT(tern__router_add(r, "HEAD", "/only", &R[5]), 0);
  {
    tern__route_match m;
    match(r, "GET", "/only", &m);
    T_EQ_INT(m.status, 405);
    T_EQ_STR(m.allow, m.allow_len, "HEAD");
  }
  tern__router_free(r);
}

static void test_405(void) {
  tern__router *r = mk();
  tern__route_match m;
  T_EQ_INT(tern__router_add(r, "POST", "/x", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/x", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "DELETE", "/x", &R[2]), 0);
  T_EQ_INT(tern__router_add(r, "PUT", "/y/:id", &R[3]), 0);
  match(r, "PATCH", "/x", &m);
  T_EQ_INT(m.status, 405);
  T_ASSERT(m.route == NULL);
  T_EQ_INT(m.nparams, 0);
  T_EQ_STR(m.allow, m.allow_len, "DELETE, GET, HEAD, POST");
  T_EQ_INT(strlen(m.allow), m.allow_len);
  match(r, "GET", "/y/1", &m);
  T_EQ_INT(m.status, 405);
  T_EQ_INT(m.nparams, 0);
  T_EQ_STR(m.allow, m.allow_len, "PUT");
  /* A path that matches no node is a 404 with an empty Allow. */
  match(r, "GET", "/z", &m);
  T_EQ_INT(m.status, 404);
  T_EQ_INT(m.allow_len, 0);
  /* A node on the way to routes, with none of its own, is a 404. */
  match(r, "PUT", "/y", &m);
  T_EQ_INT(m.status, 404);
  /* HEAD, added for GET, is not listed twice when it has its own route. */
  T_EQ_INT(tern__router_add(r, "HEAD", "/x", &R[4]), 0);
  match(r, "PATCH", "/x", &m);
  T_EQ_STR(m.allow, m.allow_len, "DELETE, GET, HEAD, POST");
  tern__router_free(r);
}

/* A less specific node that has the method beats a more specific one that
 * lacks it; a 405 lists what every matching node offers. */
static void test_405_backtracking(void) {
  tern__router *r = mk();
  tern__route_match m;
  T_EQ_INT(tern__router_add(r, "GET", "/a/b", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "POST", "/a/:x", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "PUT", "/a/*", &R[2]), 0);
  T_ROUTE(r, "GET", "/a/b", &R[0]);
  match(r, "POST", "/a/b", &m);
  T_EQ_INT(m.status, 0);
  T_ASSERT(m.route == &R[1]);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "x");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "b");
  match(r, "PUT", "/a/b", &m);
  T_ASSERT(m.route == &R[2]);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "*");
  T_EQ_STR(m.params[0].value, m.params[0].value_len, "b");
  match(r, "DELETE", "/a/b", &m);
  T_EQ_INT(m.status, 405);
  T_EQ_STR(m.allow, m.allow_len, "GET, HEAD, POST, PUT");
  match(r, "DELETE", "/a/c", &m);
  T_EQ_INT(m.status, 405);
  T_EQ_STR(m.allow, m.allow_len, "POST, PUT");
  match(r, "GET", "/a/c/d", &m);
  T_EQ_INT(m.status, 405);
  T_EQ_STR(m.allow, m.allow_len, "PUT");
  tern__router_free(r);
}

/* A too-long Allow list is cut after the last method that fits. */
static void test_allow_truncation(void) {
  tern__router *r = mk();
  tern__route_match m;
  char meth[64];
  int i;
  /* Twenty 8-byte methods make 20 * 10 - 2 = 198 bytes, over 95. */
  for (i = 0; i < 20; i++) {
    snprintf(meth, sizeof(meth), "METHOD%02d", i);
    T_EQ_INT(tern__router_add(r, meth, "/t", &R[0]), 0);
  }
  match(r, "GET", "/t", &m);
  T_EQ_INT(m.status, 405);
  T_ASSERT(m.allow_len < sizeof(m.allow));
  T_EQ_INT(strlen(m.allow), m.allow_len);
  /* 9 methods take 9 * 10 - 2 = 88 bytes; a tenth would need 98. */
  T_EQ_STR(m.allow, m.allow_len,
           "METHOD00, METHOD01, METHOD02, METHOD03, METHOD04, METHOD05, "
           "METHOD06, METHOD07, METHOD08");
  /* A single method longer than the buffer leaves the list empty. */
  memset(meth, 'X', 63);
  meth[63] = '\0';
  T_EQ_INT(tern__router_add(r, meth, "/long", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "AXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
                            "/long", &R[0]),
           0);
  match(r, "GET", "/long", &m);
  T_EQ_INT(m.status, 405);
  T_EQ_STR(m.allow, m.allow_len, "AXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX");
  tern__router_free(r);
}

static void test_invalid(void) {
  tern__router *r = mk();
  static const char *const bad_patterns[] = {
      "",     "a",    "a/b", "/*/a",  "/a/*/", "/:",     "/a/:/b",
      "/a b", "/a?b", "/a#", "/a\tb", "/\x7f", "/a/*/*",
  };
  static const char *const bad_methods[] = {
      "", "G T", "GET\r\n", "(GET)", "G/T", "GE:T",
  };
  size_t i;
  for (i = 0; i < sizeof(bad_patterns) / sizeof(bad_patterns[0]); i++) {
    int rc = tern__router_add(r, "GET", bad_patterns[i], &R[0]);
    if (rc != TERN_EINVAL)
      T_FAIL("pattern \"%s\" gave %d", bad_patterns[i], rc);
  }
  for (i = 0; i < sizeof(bad_methods) / sizeof(bad_methods[0]); i++) {
    int rc = tern__router_add(r, bad_methods[i], "/ok", &R[0]);
    if (rc != TERN_EINVAL)
      T_FAIL("method \"%s\" gave %d", bad_methods[i], rc);
  }
  T_EQ_INT(tern__router_add(NULL, "GET", "/", &R[0]), TERN_EINVAL);
  T_EQ_INT(tern__router_add(r, "GET", NULL, &R[0]), TERN_EINVAL);
  /* Nothing was added by the failures. */
  T_ROUTE(r, "GET", "/ok", NULL);
  /* These are fine: '*' or ':' inside a literal, odd tchar methods. */
  T_EQ_INT(tern__router_add(r, "GET", "/a*b/c:d/*", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "M-SEARCH", "/ok", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, "X!#$%&'*+.^_`|~9", "/ok", &R[2]), 0);
  T_ROUTE(r, "GET", "/a*b/c:d/e", &R[0]);
  T_ROUTE(r, "M-SEARCH", "/ok", &R[1]);
  tern__router_free(r);
}

static void test_duplicates(void) {
  tern__router *r = mk();
  T_EQ_INT(tern__router_add(r, "GET", "/u/:id", &R[0]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/u/:name", &R[1]), TERN_EEXIST);
  T_EQ_INT(tern__router_add(r, "POST", "/u/:name", &R[1]), 0);
  T_EQ_INT(tern__router_add(r, NULL, "/u/:x", &R[2]), 0);
  T_EQ_INT(tern__router_add(r, "*", "/u/:y", &R[3]), TERN_EEXIST);
  T_EQ_INT(tern__router_add(r, NULL, "/u/:y", &R[3]), TERN_EEXIST);
  T_EQ_INT(tern__router_add(r, "GET", "/s/*", &R[4]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/s/*", &R[4]), TERN_EEXIST);
  /* Different shapes are not duplicates. */
  T_EQ_INT(tern__router_add(r, "GET", "/u/id", &R[5]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/u/:id/", &R[6]), 0);
  T_EQ_INT(tern__router_add(r, "GET", "/s/:p", &R[7]), 0);
  /* The first route stays in place. */
  T_ROUTE(r, "GET", "/u/1", &R[0]);
  T_ROUTE(r, "PUT", "/u/1", &R[2]);
  tern__router_free(r);
}

static void test_max_params(void) {
  tern__router *r = mk();
  char pat[256], path[256];
  tern__route_match m;
  size_t i, n = 0, pn = 0;
  for (i = 0; i < TERN__ROUTER_MAX_PARAMS; i++) {
    n += (size_t)snprintf(pat + n, sizeof(pat) - n, "/:p%zu", i);
    pn += (size_t)snprintf(path + pn, sizeof(path) - pn, "/v%zu", i);
  }
  T_EQ_INT(tern__router_add(r, "GET", pat, &R[0]), 0);
  match(r, "GET", path, &m);
  T_EQ_INT(m.status, 0);
  T_EQ_INT(m.nparams, TERN__ROUTER_MAX_PARAMS);
  T_EQ_STR(m.params[15].name, m.params[15].name_len, "p15");
  T_EQ_STR(m.params[15].value, m.params[15].value_len, "v15");
  /* One more parameter, or a wildcard after the last, is too many. */
  snprintf(pat + n, sizeof(pat) - n, "/:extra");
  T_EQ_INT(tern__router_add(r, "GET", pat, &R[1]), TERN_EINVAL);
  snprintf(pat + n, sizeof(pat) - n, "/*");
  T_EQ_INT(tern__router_add(r, "GET", pat, &R[1]), TERN_EINVAL);
  /* Fifteen parameters and a wildcard fit. */
  n = 0;
  for (i = 0; i + 1 < TERN__ROUTER_MAX_PARAMS; i++)
    n += (size_t)snprintf(pat + n, sizeof(pat) - n, "/:q%zu", i);
  snprintf(pat + n, sizeof(pat) - n, "/*");
  T_EQ_INT(tern__router_add(r, "POST", pat, &R[2]), 0);
  match(r, "POST", "/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/rest/of/it", &m);
  T_EQ_INT(m.status, 0);
  T_ASSERT(m.route == &R[2]);
  T_EQ_INT(m.nparams, 16);
  T_EQ_STR(m.params[14].name, m.params[14].name_len, "q14");
  T_EQ_STR(m.params[14].value, m.params[14].value_len, "15");
  T_EQ_STR(m.params[15].name, m.params[15].name_len, "*");
  T_EQ_STR(m.params[15].value, m.params[15].value_len, "rest/of/it");
  tern__router_free(r);
}

/* The router keeps its own copies of the pattern and method. */
static void test_strings_copied(void) {
  tern__router *r = mk();
  tern__route_match m;
  char meth[8], pat[32];
  strcpy(meth, "GET");
  strcpy(pat, "/c/:name");
  T_EQ_INT(tern__router_add(r, meth, pat, &R[0]), 0);
  memset(meth, 'Z', sizeof(meth) - 1);
  memset(pat, 'Z', sizeof(pat) - 1);
  match(r, "GET", "/c/v", &m);
  T_ASSERT(m.route == &R[0]);
  T_EQ_STR(m.params[0].name, m.params[0].name_len, "name");
  tern__router_free(r);
}

static void test_many_routes(void) {
  counter c = {0, 0, 0, 0};
  tern__router_alloc a = {c_malloc, c_realloc, c_free, &c};
  tern__router *r = NULL;
  tern__route_match m;
  static int vals[10000];
  char pat[64];
  long before;
  int i;
  T_EQ_INT(tern__router_new(&r, &a), 0);
  for (i = 0; i < 10000; i++) {
    snprintf(pat, sizeof(pat), "/r/%d/:id", i);
    T_EQ_INT(tern__router_add(r, "GET", pat, &vals[i]), 0);
  }
  snprintf(pat, sizeof(pat), "/r/%d/:other", 1234);
  T_EQ_INT(tern__router_add(r, "GET", pat, &R[0]), TERN_EEXIST);
  before = c.calls;
  {
    static const int probe[] = {0, 1, 9, 10, 99, 100, 1234, 5000, 9999};
    size_t k;
    for (k = 0; k < sizeof(probe) / sizeof(probe[0]); k++) {
      char path[64], want[32];
      snprintf(path, sizeof(path), "/r/%d/item%d", probe[k], probe[k]);
      match(r, "GET", path, &m);
      T_EQ_INT(m.status, 0);
      T_ASSERT(m.route == &vals[probe[k]]);
      T_EQ_INT(m.nparams, 1);
      T_EQ_STR(m.params[0].name, m.params[0].name_len, "id");
      snprintf(want, sizeof(want), "item%d", probe[k]);
      T_EQ_STR(m.params[0].value, m.params[0].value_len, want);
    }
  }
  T_ROUTE(r, "GET", "/r/10000/x", NULL);
  T_ROUTE(r, "GET", "/r/01/x", NULL);
  T_ROUTE(r, "GET", "/r/5", NULL);
  match(r, "POST", "/r/42/x", &m);
  T_EQ_INT(m.status, 405);
  T_EQ_STR(m.allow, m.allow_len, "GET, HEAD");
  /* Lookups, 404s and 405s included, never allocate. */
  T_EQ_INT(c.calls, before);
  tern__router_free(r);
  T_EQ_INT(c.live, 0);
}

/* Build a small router; returns the first error, or 0. With `again`,
 * routes already there (TERN_EEXIST) are skipped, to finish a build that
 * an error cut short. */
static int build_small(tern__router *r, int again) {
  static const struct {
    const char *method, *pattern;
  } routes[] = {
      {"GET", "/"},         {"GET", "/users"},
      {"POST", "/users"},   {"GET", "/users/:id"},
      {NULL, "/users/:id"}, {"GET", "/users/:id/posts/:pid"},
      {"GET", "/static/*"}, {"GET", "/a/b/c"},
      {"PUT", "/a/:x/d"},   {"DELETE", "/a/b/"},
      {"GET", "/users/me"},
  };
  size_t i;
  for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
    int rc = tern__router_add(r, routes[i].method, routes[i].pattern, &R[i]);
    if (rc != 0 && !(again && rc == TERN_EEXIST))
      return rc;
  }
  return 0;
}

static void check_small(const tern__router *r) {
  tern__route_match m;
  T_ROUTE(r, "GET", "/", &R[0]);
  T_ROUTE(r, "POST", "/users", &R[2]);
  T_ROUTE(r, "PATCH", "/users/3", &R[4]);
  T_ROUTE(r, "GET", "/users/3/posts/4", &R[5]);
  T_ROUTE(r, "GET", "/static/x/y", &R[6]);
  T_ROUTE(r, "PUT", "/a/b/d", &R[8]);
  T_ROUTE(r, "GET", "/users/me", &R[10]);
  match(r, "PUT", "/a/b/c", &m);
  T_EQ_INT(m.status, 405);
  T_EQ_STR(m.allow, m.allow_len, "GET, HEAD");
}

/* Fail each allocation in turn while building: every failure must report
 * TERN_ENOMEM, leave the router usable and freeable, and leak nothing. */
static void test_alloc_failure(void) {
  counter c = {0, 0, 0, 0};
  tern__router_alloc a = {c_malloc, c_realloc, c_free, &c};
  tern__router *r = NULL;
  long total, n;
  /* Count the allocations a full build makes. */
  T_EQ_INT(tern__router_new(&r, &a), 0);
  T_EQ_INT(build_small(r, 0), 0);
  check_small(r);
  total = c.calls;
  tern__router_free(r);
  T_EQ_INT(c.live, 0);
  T_ASSERT(total > 10);

  for (n = 1; n <= total; n++) {
    int rc;
    c.calls = 0;
    c.fail_at = n;
    c.failed = 0;
    r = NULL;
    rc = tern__router_new(&r, &a);
    if (rc != 0) {
      T_EQ_INT(rc, TERN_ENOMEM);
      T_ASSERT(r == NULL);
      T_EQ_INT(c.live, 0);
      continue;
    }
    rc = build_small(r, 0);
    T_EQ_INT(rc, TERN_ENOMEM);
    T_EQ_INT(c.failed, 1);
    /* The failed add left the tree as it was: finishing the build without
     * failures gives a router that answers like a clean one. */
    c.fail_at = 0;
    T_EQ_INT(build_small(r, 1), 0);
    check_small(r);
    tern__router_free(r);
    T_EQ_INT(c.live, 0);
  }
  /* Past the last allocation nothing fails. */
  c.calls = 0;
  c.fail_at = total + 1;
  T_EQ_INT(tern__router_new(&r, &a), 0);
  T_EQ_INT(build_small(r, 0), 0);
  tern__router_free(r);
  T_EQ_INT(c.live, 0);
}

int main(void) {
  T_RUN(test_new_free);
  T_RUN(test_literal);
  T_RUN(test_root);
  T_RUN(test_trailing_slash);
  T_RUN(test_empty_segments);
  T_RUN(test_params);
  T_RUN(test_param_names_per_route);
  T_RUN(test_specificity);
  T_RUN(test_backtracking);
  T_RUN(test_wildcard);
  T_RUN(test_root_wildcard);
  T_RUN(test_methods);
  T_RUN(test_head);
  T_RUN(test_405);
  T_RUN(test_405_backtracking);
  T_RUN(test_allow_truncation);
  T_RUN(test_invalid);
  T_RUN(test_duplicates);
  T_RUN(test_max_params);
  T_RUN(test_strings_copied);
  T_RUN(test_many_routes);
  T_RUN(test_alloc_failure);
  return T_DONE();
}
