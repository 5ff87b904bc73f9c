/* libFuzzer target for Basic authentication (lib/handler/auth.c). The
 * input is an Authorization value. The target traps when
 * tern_basic_auth_parse breaks its contract (tern.h):
 * - it answers 0, TERN_ENOTFOUND, TERN_EINVAL or TERN_ETOOBIG;
 * - on success the user-id and password are views into the buffer,
 *   without ':' in the user-id and without control characters;
 * - the same input with a buffer of exactly the decoded length parses the
 *   same, and one byte shorter is TERN_ETOOBIG or TERN_EINVAL, never an
 *   overrun (ASan);
 * - tern_equal_secret finds the password equal to itself and to nothing
 *   one byte longer.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Iinclude -Ilib
 *        lib/handler/auth.c lib/core/text.c test/fuzz/fuzz_auth.c
 */
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1), *tight, *longer;
  tern_header c, d;
  size_t n, i;
  int rc;

  if (buf == NULL)
    return 0;
  rc = tern_basic_auth_parse((const char *)data, size, buf, size + 1, &c);
  CHECK(rc == 0 || rc == TERN_ENOTFOUND || rc == TERN_EINVAL ||
        rc == TERN_ETOOBIG);
  if (rc == 0) {
    CHECK(c.name >= buf && c.value + c.value_len <= buf + size + 1);
    CHECK(memchr(c.name, ':', c.name_len) == NULL);
    for (i = 0; i < c.value_len; i++)
      CHECK((unsigned char)c.value[i] >= 0x20 && c.value[i] != 0x7f);
    n = c.name_len + 1 + c.value_len;
    tight = malloc(n);
    if (tight != NULL) {
      CHECK(tern_basic_auth_parse((const char *)data, size, tight, n, &d) == 0);
      CHECK(d.name_len == c.name_len && d.value_len == c.value_len);
      rc = tern_basic_auth_parse((const char *)data, size, tight, n - 1, &d);
      CHECK(rc == TERN_ETOOBIG || rc == TERN_EINVAL);
      free(tight);
    }
    CHECK(tern_equal_secret(c.value, c.value_len, c.value, c.value_len) == 1);
    longer = malloc(c.value_len + 1);
    if (longer != NULL) {
      memcpy(longer, c.value, c.value_len);
      longer[c.value_len] = 'x';
      CHECK(tern_equal_secret(c.value, c.value_len, longer, c.value_len + 1) ==
            0);
      free(longer);
    }
  }
  free(buf);
  return 0;
}
