/* Basic authentication and the secret comparison (lib/handler/auth.c). */
#include <string.h>

#include "tern.h"
#include "t.h"

#define S(lit) lit, sizeof(lit) - 1

static void test_parse(void) {
  char buf[64];
  tern_header c;
  /* "Aladdin:open sesame", RFC 7617's example. */
  T_EQ_INT(tern_basic_auth_parse(S("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="), buf,
                                 sizeof(buf), &c),
           0);
  T_EQ_STR(c.name, c.name_len, "Aladdin");
  T_EQ_STR(c.value, c.value_len, "open sesame");
  /* The scheme is case-insensitive; padding is optional; spaces around. */
  T_EQ_INT(tern_basic_auth_parse(S("bAsIc   QWxhZGRpbjpvcGVuIHNlc2FtZQ  "), buf,
                                 sizeof(buf), &c),
           0);
  T_EQ_STR(c.value, c.value_len, "open sesame");
  /* An empty password, a password with ':'. */
  T_EQ_INT(tern_basic_auth_parse(S("Basic dTo="), buf, sizeof(buf), &c), 0);
  T_EQ_STR(c.name, c.name_len, "u");
  T_EQ_INT(c.value_len, 0);
  T_EQ_INT(tern_basic_auth_parse(S("Basic dTphOmI="), buf, sizeof(buf), &c), 0);
  T_EQ_STR(c.value, c.value_len, "a:b");
  T_EQ_INT(tern_basic_auth_parse(S("Bearer abc"), buf, sizeof(buf), &c),
           TERN_ENOTFOUND);
  T_EQ_INT(tern_basic_auth_parse(S("Basic dXNlcg=="), buf, sizeof(buf), &c),
           TERN_EINVAL); /* "user": no ':' */
  T_EQ_INT(tern_basic_auth_parse(S("Basic d*Xz"), buf, sizeof(buf), &c),
           TERN_EINVAL);
  T_EQ_INT(tern_basic_auth_parse(S("Basic dTp4="), buf, sizeof(buf), &c),
           TERN_EINVAL); /* bad padding */
  T_EQ_INT(tern_basic_auth_parse(S("Basic dToKeA=="), buf, sizeof(buf), &c),
           TERN_EINVAL); /* "u:\nx": a control character */
  T_EQ_INT(tern_basic_auth_parse(S("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="), buf,
                                 8, &c),
           TERN_ETOOBIG);
}

static void test_equal_secret(void) {
  T_EQ_INT(tern_equal_secret(S("hunter2"), S("hunter2")), 1);
  T_EQ_INT(tern_equal_secret(S("hunter2"), S("hunter3")), 0);
  T_EQ_INT(tern_equal_secret(S("hunter2"), S("hunter")), 0);
  T_EQ_INT(tern_equal_secret(S(""), S("")), 1);
  T_EQ_INT(tern_equal_secret(S(""), S("x")), 0);
  T_EQ_INT(tern_equal_secret("a\0b", 3, "a\0c", 3), 0);
}

int main(void) {
  T_RUN(test_parse);
  T_RUN(test_equal_secret);
  return T_DONE();
}
