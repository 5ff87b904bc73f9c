/* libFuzzer target for query strings and urlencoded forms
 * (lib/handler/form.c). The input is the string. The target traps when
 * the functions break their contract (tern.h):
 * - tern_form_next's views lie inside the input, its position only moves
 *   forward, and it gives at most one pair per '&'-separated piece;
 * - tern_form_decode never writes more than the input's length, and
 *   fails only with TERN_EINVAL (a bad escape) or TERN_ETOOBIG (cap);
 * - tern_form_get, asked for the decoded name of the first pair whose
 *   name decodes, answers that pair's value decoded the same way.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Iinclude
 *        lib/handler/form.c test/fuzz/fuzz_form.c
 */
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  char *name = malloc(size + 1), *v1 = malloc(size + 1), *v2 = malloc(size + 1);
  size_t pos = 0, last = 0, pieces = 1, pairs = 0, i, nl, l1, l2;
  int first = 1, r1, r2;
  tern_header p;

  if (name == NULL || v1 == NULL || v2 == NULL)
    goto out;
  for (i = 0; i < size; i++)
    pieces += s[i] == '&';
  while (tern_form_next(s, size, &pos, &p)) {
    CHECK(pos > last || (pos == last && pairs == 0 && pos > 0));
    CHECK(pos <= size);
    CHECK(p.name >= s && p.name + p.name_len <= s + size);
    CHECK(p.value >= s && p.value + p.value_len <= s + size);
    last = pos;
    pairs++;
    r1 = tern_form_decode(p.value, p.value_len, v1, size + 1, &l1);
    CHECK(r1 == 0 || r1 == TERN_EINVAL);
    CHECK(r1 != 0 || l1 <= p.value_len);
    if (first &&
        tern_form_decode(p.name, p.name_len, name, size + 1, &nl) == 0) {
      first = 0;
      r2 = tern_form_get(s, size, name, nl, v2, size + 1, &l2);
      CHECK(r2 == r1);
      CHECK(r1 != 0 || (l2 == l1 && memcmp(v1, v2, l1) == 0));
    }
    /* A cap of one byte less than needed is refused, not overrun. */
    if (r1 == 0 && l1 > 0)
      CHECK(tern_form_decode(p.value, p.value_len, v2, l1 - 1, &l2) ==
            TERN_ETOOBIG);
  }
  CHECK(pairs <= pieces);
out:
  free(name);
  free(v1);
  free(v2);
  return 0;
}
