/* The static-file handler's sans-I/O parts (lib/handler/static_parse.c and
 * the generated lib/handler/mime.c): paths, Range, entity tags, dates,
 * conditionals, Accept-Encoding and MIME types. */
#include "t.h"

#include "handler/static.h"
#include "tern.h"

#include <stdio.h>
#include <string.h>

static int path(const char *in, int hidden, char *out, int *dir) {
  return tern__static_path(in, strlen(in), hidden, out, 256, dir);
}

static void test_path(void) {
  char o[256];
  int dir;
  T_EQ_INT(path("a/b.txt", 0, o, &dir), 7);
  T_EQ_STR(o, strlen(o), "a/b.txt");
  T_EQ_INT(dir, 0);
  T_EQ_INT(path("/a//./b/", 0, o, &dir), 3);
  T_EQ_STR(o, strlen(o), "a/b");
  T_EQ_INT(dir, 1);
  T_EQ_INT(path("", 0, o, &dir), 0);
  T_EQ_INT(dir, 1);
  T_EQ_INT(path("a%20b", 0, o, &dir), 3);
  T_EQ_STR(o, 3, "a b");
  /* Decoded once: %252e stays "%2e", a literal name. */
  T_EQ_INT(path("%252e%252e/x", 0, o, &dir), 8);
  T_EQ_STR(o, 8, "%2e%2e/x");
  T_EQ_INT(path("../x", 0, o, &dir), TERN__SP_ESCAPE);
  T_EQ_INT(path("a/../../x", 0, o, &dir), TERN__SP_ESCAPE);
  T_EQ_INT(path("%2e%2e/x", 0, o, &dir), TERN__SP_ESCAPE);
  T_EQ_INT(path("..%2fx", 0, o, &dir), TERN__SP_ESCAPE);
  T_EQ_INT(path("a/..", 0, o, &dir), TERN__SP_ESCAPE);
  T_EQ_INT(path("a%00b", 0, o, &dir), TERN__SP_BAD);
  T_EQ_INT(path("a\\b", 0, o, &dir), TERN__SP_BAD);
  T_EQ_INT(path("a%5cb", 0, o, &dir), TERN__SP_BAD);
  T_EQ_INT(path("a%0a", 0, o, &dir), TERN__SP_BAD);
  T_EQ_INT(path("a%2", 0, o, &dir), TERN__SP_BAD);
  T_EQ_INT(path("a%zz", 0, o, &dir), TERN__SP_BAD);
  T_EQ_INT(path(".env", 0, o, &dir), TERN__SP_HIDDEN);
  T_EQ_INT(path("a/.git/config", 0, o, &dir), TERN__SP_HIDDEN);
  T_EQ_INT(path(".env", 1, o, &dir), 4);
  T_EQ_INT(path("..", 1, o, &dir), TERN__SP_ESCAPE);
  T_EQ_INT(tern__static_path("abcdef", 6, 0, o, 4, &dir), TERN__SP_LONG);
}

static int ranges(const char *v, uint64_t size, tern__range *out) {
  return tern__static_ranges(v, strlen(v), size, out, 4);
}

static void test_ranges(void) {
  tern__range g[4];
  T_EQ_INT(ranges("bytes=0-4", 13, g), 1);
  T_EQ_INT(g[0].first, 0);
  T_EQ_INT(g[0].last, 4);
  T_EQ_INT(ranges("bytes=5-", 13, g), 1);
  T_EQ_INT(g[0].first, 5);
  T_EQ_INT(g[0].last, 12);
  T_EQ_INT(ranges("bytes=-3", 13, g), 1); /* suffix */
  T_EQ_INT(g[0].first, 10);
  T_EQ_INT(g[0].last, 12);
  T_EQ_INT(ranges("bytes=-100", 13, g), 1);
  T_EQ_INT(g[0].first, 0);
  T_EQ_INT(ranges("bytes=0-100", 13, g), 1);
  T_EQ_INT(g[0].last, 12);
  T_EQ_INT(ranges("bytes=0-1, 4-5", 13, g), 2);
  T_EQ_INT(g[1].first, 4);
  /* Overlapping and adjacent ones merge; order does not matter. */
  T_EQ_INT(ranges("bytes=4-6,0-2,2-3", 13, g), 1);
  T_EQ_INT(g[0].first, 0);
  T_EQ_INT(g[0].last, 6);
  T_EQ_INT(ranges("bytes=8-9,0-1", 13, g), 2);
  T_EQ_INT(g[0].first, 0);
  T_EQ_INT(g[1].first, 8);
  /* Unsatisfiable: 416. */
  T_EQ_INT(ranges("bytes=13-", 13, g), -1);
  T_EQ_INT(ranges("bytes=20-30,40-", 13, g), -1);
  T_EQ_INT(ranges("bytes=-0", 13, g), -1);
  T_EQ_INT(ranges("bytes=0-", 0, g), -1);
  /* One satisfiable among unsatisfiable ones. */
  T_EQ_INT(ranges("bytes=20-30,1-1", 13, g), 1);
  /* Ignored (200): malformed, other units, too many. */
  T_EQ_INT(ranges("bytes=5-1", 13, g), 0);
  T_EQ_INT(ranges("bytes=a-b", 13, g), 0);
  T_EQ_INT(ranges("bytes=-", 13, g), 0);
  T_EQ_INT(ranges("bytes=", 13, g), 0);
  T_EQ_INT(ranges("items=0-1", 13, g), 0);
  T_EQ_INT(ranges("bytes=0-1x", 13, g), 0);
  T_EQ_INT(ranges("bytes=0-0,2-2,4-4,6-6,8-8", 13, g), 0);
  T_EQ_INT(ranges("bytes=99999999999999999999-", 13, g), 0);
  /* Beyond 4 GiB. */
  T_EQ_INT(ranges("bytes=-10", 5ull << 30, g), 1);
  T_ASSERT(g[0].first == (5ull << 30) - 10);
}

static void test_etag(void) {
  const char *e = "\"abc\"";
  T_EQ_INT(tern__static_etag_match("\"abc\"", 5, e, 5, 0), 1);
  T_EQ_INT(tern__static_etag_match("\"x\", \"abc\"", 10, e, 5, 0), 1);
  T_EQ_INT(tern__static_etag_match("*", 1, e, 5, 0), 1);
  T_EQ_INT(tern__static_etag_match("W/\"abc\"", 7, e, 5, 0), 0);
  T_EQ_INT(tern__static_etag_match("W/\"abc\"", 7, e, 5, 1), 1);
  T_EQ_INT(tern__static_etag_match("\"abcd\"", 6, e, 5, 1), 0);
  T_EQ_INT(tern__static_etag_match("abc", 3, e, 5, 1), 0);
  T_EQ_INT(tern__static_etag_match("\"abc", 4, e, 5, 1), 0);
}

static void test_dates(void) {
  int64_t t;
  char out[30];
  const char *f = "Sun, 06 Nov 1994 08:49:37 GMT";
  T_EQ_INT(tern__http_date_parse(f, strlen(f), &t), 0);
  T_EQ_INT(t, 784111777);
  tern__http_date_format(t, out);
  T_EQ_STR(out, strlen(out), f);
  f = "Sunday, 06-Nov-94 08:49:37 GMT";
  T_EQ_INT(tern__http_date_parse(f, strlen(f), &t), 0);
  T_EQ_INT(t, 784111777);
  f = "Sun Nov  6 08:49:37 1994";
  T_EQ_INT(tern__http_date_parse(f, strlen(f), &t), 0);
  T_EQ_INT(t, 784111777);
  tern__http_date_format(0, out);
  T_EQ_STR(out, strlen(out), "Thu, 01 Jan 1970 00:00:00 GMT");
  tern__http_date_format(951782400, out); /* a leap day */
  T_EQ_STR(out, strlen(out), "Tue, 29 Feb 2000 00:00:00 GMT");
  f = "Sun, 06 Nov 1994 08:49:37 UTC";
  T_EQ_INT(tern__http_date_parse(f, strlen(f), &t), -1);
  f = "Sun, 06 Nov 1994 25:49:37 GMT";
  T_EQ_INT(tern__http_date_parse(f, strlen(f), &t), -1);
  T_EQ_INT(tern__http_date_parse("yesterday", 9, &t), -1);
}

#define SET(c, f, v) ((c).f = (v), (c).f##_len = strlen(v))

static void test_conds(void) {
  const char *e = "\"v1\"";
  char lm[30];
  int64_t mt = 784111777;
  tern__conds c;
  tern__http_date_format(mt, lm);
  memset(&c, 0, sizeof c);
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 0);
  SET(c, if_none_match, "\"v1\"");
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 304);
  SET(c, if_none_match, "\"v0\"");
  SET(c, if_modified_since, lm); /* ignored when If-None-Match is there */
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 0);
  memset(&c, 0, sizeof c);
  SET(c, if_modified_since, lm);
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 304);
  T_EQ_INT(tern__static_conds(&c, e, 4, mt + 1), 0);
  memset(&c, 0, sizeof c);
  SET(c, if_match, "\"v0\"");
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 412);
  SET(c, if_match, "W/\"v1\""); /* If-Match compares strongly */
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 412);
  SET(c, if_match, "\"v1\"");
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 0);
  memset(&c, 0, sizeof c);
  SET(c, if_unmodified_since, lm);
  T_EQ_INT(tern__static_conds(&c, e, 4, mt), 0);
  T_EQ_INT(tern__static_conds(&c, e, 4, mt + 1), 412);
  /* If-Range. */
  memset(&c, 0, sizeof c);
  T_EQ_INT(tern__static_if_range(&c, e, 4, mt), 1);
  SET(c, if_range, "\"v1\"");
  T_EQ_INT(tern__static_if_range(&c, e, 4, mt), 1);
  SET(c, if_range, "\"stale\"");
  T_EQ_INT(tern__static_if_range(&c, e, 4, mt), 0);
  SET(c, if_range, "W/\"v1\"");
  T_EQ_INT(tern__static_if_range(&c, e, 4, mt), 0);
  SET(c, if_range, lm);
  T_EQ_INT(tern__static_if_range(&c, e, 4, mt), 1);
  T_EQ_INT(tern__static_if_range(&c, e, 4, mt + 1), 0);
}

static void accept(const char *v, int br, int zstd, int gz) {
  int q[TERN__ENC_N];
  tern__static_accept(v, v ? strlen(v) : 0, q);
  T_EQ_INT(q[TERN__ENC_BR], br);
  T_EQ_INT(q[TERN__ENC_ZSTD], zstd);
  T_EQ_INT(q[TERN__ENC_GZIP], gz);
}

static void test_accept(void) {
  accept(NULL, 0, 0, 0);
  accept("gzip, deflate, br", 1000, 0, 1000);
  accept("gzip;q=0.8, br;q=0.5, zstd", 500, 1000, 800);
  accept("br;q=0, *;q=0.3", 0, 300, 300);
  accept("GZIP ; Q=1.0", 0, 0, 1000);
  accept("x-gzip", 0, 0, 1000);
  accept("br;q=2, gzip;q=0.x, zstd;q=0.001", 0, 1, 0);
  accept("identity", 0, 0, 0);
}

static void mime(const char *name, const char *want) {
  const char *t = tern__mime_type(name, strlen(name));
  T_EQ_STR(t, strlen(t), want);
}

static void test_mime(void) {
  mime("a/index.html", "text/html; charset=utf-8");
  mime("X.PNG", "image/png");
  mime("app.js", "text/javascript; charset=utf-8");
  mime("noext", "application/octet-stream");
  mime("dir.d/noext", "application/octet-stream");
  mime("trailing.", "application/octet-stream");
  mime("f.woff2", "font/woff2");
}

static void test_options(void) {
  tern_static_options o;
  tern_static *st = (tern_static *)1, *keep;
  tern_server *srv = NULL;
  T_EQ_INT(tern_server_new(NULL, &srv), 0);
  tern_static_options_init(&o);
  T_EQ_INT(o.version, TERN_STATIC_OPTIONS_VERSION);
  T_EQ_INT(o.size, sizeof o);
  /* On failure *out is left as it was (the header's rule). */
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL); /* no root */
  T_ASSERT(st == (tern_static *)1);
  o.root = "/nonexistent-tern-root";
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EIO);
  o.root = "/";
  o.flags = 1u << 7;
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
  o.flags = TERN_STATIC_HIDDEN | TERN_STATIC_PRECOMPRESSED |
            TERN_STATIC_NO_SENDFILE; /* every known flag */
  T_EQ_INT(tern_static_new(srv, &o, &st), 0);
  tern_static_free(st);
  st = NULL;
  o.flags = 0;
  o.index = "a/b.html";
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
  o.index = "index.html";
  o.cache_control = "x\r\nSet-Cookie: y";
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
  o.cache_control = NULL;
  /* A block size out of range is refused, not clamped. */
  o.block_size = 1024;
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
  o.block_size = (16u << 20) + 1;
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
  o.block_size = 0; /* the default */
  o.version = 0;
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
  o.version = TERN_STATIC_OPTIONS_VERSION + 1; /* newer than this library */
  T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
  o.version = TERN_STATIC_OPTIONS_VERSION;
  {
    /* Version 2's fields: at most 16 extra fields, each one a valid
     * field; a fallback that names a file below the root. */
    static const tern_header ok = TERN_HEADER("x-frame-options", "DENY");
    static const tern_header bad_name = TERN_HEADER("x frame", "DENY");
    static const tern_header bad_value = TERN_HEADER("x-a", "a\r\nb: c");
    tern_header many[17];
    static const char *const bad_fallbacks[] = {"",   "/",    "../x",
                                                "a/", "a\\b", ".env"};
    size_t i;
    for (i = 0; i < 17; i++)
      many[i] = ok;
    o.headers = many;
    o.nheaders = 17;
    T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
    o.headers = NULL;
    o.nheaders = 1;
    T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
    o.headers = &bad_name;
    T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
    o.headers = &bad_value;
    T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
    o.headers = many;
    o.nheaders = 16;
    for (i = 0; i < sizeof bad_fallbacks / sizeof bad_fallbacks[0]; i++) {
      o.fallback = bad_fallbacks[i];
      T_EQ_INT(tern_static_new(srv, &o, &st), TERN_EINVAL);
    }
    o.fallback = "app/index.html";
    T_EQ_INT(tern_static_new(srv, &o, &st), 0);
    tern_static_free(st);
    st = NULL;
    /* A program built against version 1 (its size, its version) is
     * served as before. */
    o.version = 1;
    o.size = (uint32_t)(offsetof(tern_static_options, block_size) +
                        sizeof o.block_size);
    T_EQ_INT(tern_static_new(srv, &o, &st), 0);
    tern_static_free(st);
    st = NULL;
    tern_static_options_init(&o);
    o.root = "/";
  }
  T_EQ_INT(tern_static_new(srv, NULL, &st), TERN_EINVAL);
  T_EQ_INT(tern_static_new(NULL, &o, &st), TERN_EINVAL);
  T_ASSERT(st == NULL);
  T_EQ_INT(tern_static_new(srv, &o, &st), 0);
  T_ASSERT(st != NULL);
  keep = st;
  T_EQ_INT(tern_static_mount(NULL, "/s", st), TERN_EINVAL);
  /* It outlives its server: freed after it, with the server's
   * allocator's functions. */
  tern_server_free(srv);
  tern_static_free(keep);
  tern_static_free(NULL);
}

int main(void) {
  T_RUN(test_options);
  T_RUN(test_path);
  T_RUN(test_ranges);
  T_RUN(test_etag);
  T_RUN(test_dates);
  T_RUN(test_conds);
  T_RUN(test_accept);
  T_RUN(test_mime);
  return T_DONE();
}
