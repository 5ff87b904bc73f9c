/* Cookies (lib/handler/cookie.c): a Cookie field's pairs, and Set-Cookie
 * values built with their name and value checked. */
#include <string.h>

#include "tern.h"
#include "t.h"

#define S(lit) lit, sizeof(lit) - 1

static void test_next(void) {
  const char c[] = " a=1; b=\"two\";c=;  novalue ; =x; d = 4 ;e=f=g;";
  const char *want[][2] = {
      {"a", "1"}, {"b", "two"}, {"c", ""}, {"d", "4"}, {"e", "f=g"}};
  size_t pos = 0, k = 0;
  tern_header p;
  while (tern_cookie_next(c, sizeof(c) - 1, &pos, &p)) {
    T_ASSERT(k < 5);
    T_EQ_STR(p.name, p.name_len, want[k][0]);
    T_EQ_STR(p.value, p.value_len, want[k][1]);
    k++;
  }
  T_EQ_INT(k, 5);
  T_EQ_INT(pos, sizeof(c) - 1);
  pos = 0;
  T_EQ_INT(tern_cookie_next("", 0, &pos, &p), 0);
  T_EQ_INT(tern_cookie_next(NULL, 0, &pos, &p), 0);
}

static void test_format(void) {
  char out[64];
  size_t n;
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("sid"), S("abc123"),
                              "Path=/; HttpOnly"),
           0);
  T_EQ_STR(out, n, "sid=abc123; Path=/; HttpOnly");
  T_EQ_INT(out[n], 0);
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("e"), NULL, 0, NULL), 0);
  T_EQ_STR(out, n, "e=");
  /* What could split the field or the cookie is refused. */
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("s id"), S("1"), NULL),
           TERN_EINVAL);
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("a=b"), S("1"), NULL),
           TERN_EINVAL);
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("a"), S("1;2"), NULL),
           TERN_EINVAL);
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("a"), S("x y"), NULL),
           TERN_EINVAL);
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("a"), S("\"q\""), NULL),
           TERN_EINVAL);
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, S("a"), S("1"),
                              "Path=/\r\nSet-Cookie: evil=1"),
           TERN_EINVAL);
  T_EQ_INT(tern_cookie_format(out, sizeof(out), &n, "", 0, S("1"), NULL),
           TERN_EINVAL);
  /* The NUL counts: exactly the length is one short. */
  T_EQ_INT(tern_cookie_format(out, 5, &n, S("ab"), S("12"), NULL),
           TERN_ETOOBIG);
  T_EQ_INT(tern_cookie_format(out, 6, &n, S("ab"), S("12"), NULL), 0);
}

int main(void) {
  T_RUN(test_next);
  T_RUN(test_format);
  return T_DONE();
}
