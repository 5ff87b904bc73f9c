/* Query strings and urlencoded forms (lib/handler/form.c): pairs,
 * percent-decoding, lookup by decoded name, and the refusals. */
#include <string.h>

#include "tern.h"
#include "t.h"

#define S(lit) lit, sizeof(lit) - 1

static void test_next(void) {
  const char q[] = "a=1&&b=&c&=d&e=x=y&";
  const char *want[][2] = {
      {"a", "1"}, {"b", ""}, {"c", ""}, {"", "d"}, {"e", "x=y"}};
  size_t pos = 0, k = 0;
  tern_header p;
  while (tern_form_next(q, sizeof(q) - 1, &pos, &p)) {
    T_ASSERT(k < 5);
    T_EQ_INT(p.name_len, strlen(want[k][0]));
    T_EQ_INT(memcmp(p.name, want[k][0], p.name_len), 0);
    T_EQ_INT(p.value_len, strlen(want[k][1]));
    T_EQ_INT(memcmp(p.value, want[k][1], p.value_len), 0);
    /* Views into the string itself. */
    T_ASSERT(p.name >= q && p.value + p.value_len <= q + sizeof(q) - 1);
    k++;
  }
  T_EQ_INT(k, 5);
  T_EQ_INT(pos, sizeof(q) - 1);
  T_EQ_INT(tern_form_next(q, sizeof(q) - 1, &pos, &p), 0); /* stays done */
  pos = 0;
  T_EQ_INT(tern_form_next("", 0, &pos, &p), 0);
  T_EQ_INT(tern_form_next(NULL, 0, &pos, &p), 0);
}

static void test_decode(void) {
  char out[32];
  size_t n = 99;
  T_EQ_INT(tern_form_decode(S("a+b%20c%2Bd%e2%82%AC"), out, sizeof(out), &n),
           0);
  T_EQ_INT(n, 10);
  T_EQ_STR(out, n, "a b c+d\xe2\x82\xac");
  T_EQ_INT(tern_form_decode(S("%"), out, sizeof(out), &n), TERN_EINVAL);
  T_EQ_INT(tern_form_decode(S("%4"), out, sizeof(out), &n), TERN_EINVAL);
  T_EQ_INT(tern_form_decode(S("%G1"), out, sizeof(out), &n), TERN_EINVAL);
  T_EQ_INT(tern_form_decode(S("%00"), out, sizeof(out), &n), 0);
  T_EQ_INT(n, 1);
  T_EQ_INT(out[0], 0);
  /* Exactly the room: no NUL written, none needed. */
  memset(out, 'x', sizeof(out));
  T_EQ_INT(tern_form_decode(S("abc"), out, 3, &n), 0);
  T_EQ_INT(n, 3);
  T_EQ_INT(out[3], 'x');
  T_EQ_INT(tern_form_decode(S("abcd"), out, 3, &n), TERN_ETOOBIG);
  T_EQ_INT(tern_form_decode(S("ab"), NULL, 3, &n), TERN_EINVAL);
}

static void test_get(void) {
  const char q[] = "q=tern%20http&page=2&x%20y=sp&page=3&bad=%zz";
  char out[16];
  size_t n;
  T_EQ_INT(tern_form_get(q, sizeof(q) - 1, S("q"), out, sizeof(out), &n), 0);
  T_EQ_STR(out, n, "tern http");
  T_EQ_INT(tern_form_get(q, sizeof(q) - 1, S("page"), out, sizeof(out), &n), 0);
  T_EQ_STR(out, n, "2"); /* the first of a repeated name */
  T_EQ_INT(tern_form_get(q, sizeof(q) - 1, S("x y"), out, sizeof(out), &n), 0);
  T_EQ_STR(out, n, "sp");
  T_EQ_INT(tern_form_get(q, sizeof(q) - 1, S("x"), out, sizeof(out), &n),
           TERN_ENOTFOUND);
  T_EQ_INT(tern_form_get(q, sizeof(q) - 1, S("pag"), out, sizeof(out), &n),
           TERN_ENOTFOUND);
  T_EQ_INT(tern_form_get(q, sizeof(q) - 1, S("bad"), out, sizeof(out), &n),
           TERN_EINVAL);
  T_EQ_INT(tern_form_get(q, sizeof(q) - 1, S("q"), out, 4, &n), TERN_ETOOBIG);
  T_EQ_INT(tern_form_get(NULL, 0, S("q"), out, sizeof(out), &n),
           TERN_ENOTFOUND);
}

int main(void) {
  T_RUN(test_next);
  T_RUN(test_decode);
  T_RUN(test_get);
  return T_DONE();
}
