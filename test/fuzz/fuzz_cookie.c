/* libFuzzer target for cookies (lib/handler/cookie.c). The first byte
 * splits the rest into a name and a value; the whole input is also read
 * as a Cookie field. The target traps when the functions break their
 * contract (tern.h):
 * - tern_cookie_next's views lie inside the field, its position only
 *   moves forward, and no name is empty;
 * - tern_cookie_format writes within its buffer, NUL-terminated, and
 *   what it accepts reads back, through tern_cookie_next, as the same
 *   name and value, alone: nothing can split the cookie or the field.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Iinclude -Ilib
 *        lib/handler/cookie.c lib/core/text.c test/fuzz/fuzz_cookie.c
 */
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  size_t pos = 0, last = 0, split, n, cap;
  char *out;
  tern_header p;
  int rc;

  while (tern_cookie_next(s, size, &pos, &p)) {
    CHECK(pos > last && pos <= size);
    CHECK(p.name_len > 0);
    CHECK(p.name >= s && p.name + p.name_len <= s + size);
    CHECK(p.value >= s && p.value + p.value_len <= s + size);
    last = pos;
  }
  if (size < 1)
    return 0;
  split = data[0] % size;
  cap = size + 4;
  out = malloc(cap);
  if (out == NULL)
    return 0;
  rc = tern_cookie_format(out, cap, &n, s + 1, split > 0 ? split - 1 : 0,
                          s + split, size - split, NULL);
  CHECK(rc == 0 || rc == TERN_EINVAL || rc == TERN_ETOOBIG);
  if (rc == 0) {
    CHECK(n < cap && out[n] == '\0');
    pos = 0;
    CHECK(tern_cookie_next(out, n, &pos, &p) == 1);
    CHECK(p.name_len == split - 1 && memcmp(p.name, s + 1, split - 1) == 0);
    CHECK(p.value_len == size - split &&
          memcmp(p.value, s + split, size - split) == 0);
    CHECK(tern_cookie_next(out, n, &pos, &p) == 0);
  }
  free(out);
  return 0;
}
