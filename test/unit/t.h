/* A tiny TAP test harness for tern's unit tests.
 *
 *   static void test_something(void) { T_ASSERT(x == 1); T_EQ_INT(a, b); }
 *   int main(void) { T_RUN(test_something); return T_DONE(); }
 *
 * Each T_RUN prints "ok N - name" or "not ok N - name"; a failed assertion
 * prints a "# file:line: expr" diagnostic and ends that test case.
 */
#ifndef TERN_TEST_T_H
#define TERN_TEST_T_H

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

static int t__count, t__failed;
static jmp_buf t__jmp;

#define T_FAIL(...)                                                            \
  do {                                                                         \
    printf("# %s:%d: ", __FILE__, __LINE__);                                   \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    longjmp(t__jmp, 1);                                                        \
  } while (0)

#define T_ASSERT(e)                                                            \
  do {                                                                         \
    if (!(e))                                                                  \
      T_FAIL("assertion failed: %s", #e);                                      \
  } while (0)

#define T_EQ_INT(a, b)                                                         \
  do {                                                                         \
    long long t__a = (long long)(a), t__b = (long long)(b);                    \
    if (t__a != t__b)                                                          \
      T_FAIL("%s == %lld, expected %s == %lld", #a, t__a, #b, t__b);           \
  } while (0)

/* Compare a (pointer, length) view with a C string. */
#define T_EQ_STR(p, n, s)                                                      \
  do {                                                                         \
    const char *t__p = (p);                                                    \
    size_t t__n = (n);                                                         \
    if (t__n != strlen(s) || (t__n && memcmp(t__p, (s), t__n) != 0))           \
      T_FAIL("%s == \"%.*s\", expected \"%s\"", #p, (int)t__n,                 \
             t__p ? t__p : "", (s));                                           \
  } while (0)

#define T_RUN(fn)                                                              \
  do {                                                                         \
    int t__ok = 1;                                                             \
    fflush(stdout);                                                            \
    if (setjmp(t__jmp) == 0)                                                   \
      fn();                                                                    \
    else                                                                       \
      t__ok = 0;                                                               \
    t__count++;                                                                \
    if (!t__ok)                                                                \
      t__failed++;                                                             \
    printf("%s %d - %s\n", t__ok ? "ok" : "not ok", t__count, #fn);            \
  } while (0)

#define T_DONE() (printf("1..%d\n", t__count), t__failed ? 1 : 0)

#endif
