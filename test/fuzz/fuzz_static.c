/* libFuzzer target for the static-file handler's parsers
 * (lib/handler/static_parse.c, lib/handler/mime.c).
 *
 * The first byte picks a parser, the rest is its input. Each result is
 * checked against the contract in handler/static.h, trapping on a breach:
 * - path: the output has no NUL, '\\' or control byte, no leading or
 *   trailing '/', no empty, "." or ".." segment, no hidden segment
 *   unless allowed, and its length is the value returned;
 * - Range: the ranges lie within the size, sorted, apart (not even
 *   adjacent), at most `max`;
 * - If-Match & co.: the evaluation is 0, 304 or 412; If-Range 0 or 1;
 * - dates: a parsed date formats and parses back to itself;
 * - Accept-Encoding: q-values within 0..1000; MIME: a non-empty type.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Ilib -Iinclude
 *        lib/handler/static_parse.c lib/handler/mime.c test/fuzz/fuzz_static.c
 */
#include "handler/static.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static void check_path(const char *p, size_t n, int hidden) {
  char out[512];
  int dir;
  int rc = tern__static_path(p, n, hidden, out, sizeof out, &dir);
  if (rc < 0) {
    CHECK(rc >= TERN__SP_LONG);
    return;
  }
  CHECK((size_t)rc == strlen(out));
  CHECK(rc == 0 || (out[0] != '/' && out[rc - 1] != '/'));
  for (int i = 0; i < rc; i++) {
    unsigned char c = (unsigned char)out[i];
    CHECK(c >= 0x20 && c != 0x7f && c != '\\');
  }
  /* Segments. */
  const char *s = out, *e = out + rc;
  while (rc > 0 && s <= e) {
    const char *t = memchr(s, '/', (size_t)(e - s));
    size_t l = t ? (size_t)(t - s) : (size_t)(e - s);
    CHECK(l > 0);
    CHECK(!(l == 1 && s[0] == '.'));
    CHECK(!(l == 2 && s[0] == '.' && s[1] == '.'));
    CHECK(hidden || s[0] != '.');
    if (t == NULL)
      break;
    s = t + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data + 1;
  size_t n;
  if (size < 1)
    return 0;
  n = size - 1;
  switch (data[0] % 6) {
  case 0:
    check_path(p, n, data[0] & 0x80);
    break;
  case 1: {
    tern__range g[TERN__MAX_RANGES];
    uint64_t sz = n > 0 ? (uint64_t)(unsigned char)p[0] * 977 : 0;
    if (data[0] & 0x40)
      sz <<= 24;
    int rc = tern__static_ranges(p, n, sz, g, TERN__MAX_RANGES);
    CHECK(rc >= -1 && rc <= TERN__MAX_RANGES);
    for (int i = 0; i < rc; i++) {
      CHECK(g[i].first <= g[i].last && g[i].last < sz);
      CHECK(i == 0 || g[i].first > g[i - 1].last + 1);
    }
    break;
  }
  case 2: {
    /* The input split at its first '\n' into fields. */
    tern__conds c;
    const char *nl = memchr(p, '\n', n);
    size_t a = nl ? (size_t)(nl - p) : n;
    const char *rest = nl ? nl + 1 : p + n;
    size_t rl = nl ? n - a - 1 : 0;
    memset(&c, 0, sizeof c);
    c.if_match = (data[0] & 0x10) ? p : NULL;
    c.if_match_len = a;
    c.if_none_match = (data[0] & 0x20) ? p : NULL;
    c.if_none_match_len = a;
    c.if_modified_since = rest;
    c.if_modified_since_len = rl;
    c.if_unmodified_since = (data[0] & 0x40) ? rest : NULL;
    c.if_unmodified_since_len = rl;
    c.if_range = (data[0] & 0x80) ? p : rest;
    c.if_range_len = (data[0] & 0x80) ? a : rl;
    int rc = tern__static_conds(&c, "\"e\"", 3, 784111777);
    CHECK(rc == 0 || rc == 304 || rc == 412);
    rc = tern__static_if_range(&c, "\"e\"", 3, 784111777);
    CHECK(rc == 0 || rc == 1);
    break;
  }
  case 3: {
    int64_t t, t2;
    char out[30];
    if (tern__http_date_parse(p, n, &t) == 0) {
      tern__http_date_format(t, out);
      CHECK(strlen(out) == 29);
      if (t >= 0 && t < 253402300800) { /* years 1970..9999 */
        CHECK(tern__http_date_parse(out, 29, &t2) == 0);
        CHECK(t2 == t);
      }
    }
    break;
  }
  case 4: {
    int q[TERN__ENC_N];
    tern__static_accept(p, n, q);
    for (int i = 0; i < TERN__ENC_N; i++)
      CHECK(q[i] >= 0 && q[i] <= 1000);
    break;
  }
  default: {
    const char *t = tern__mime_type(p, n);
    CHECK(t != NULL && t[0] != '\0');
    break;
  }
  }
  return 0;
}
