/* libFuzzer target for multipart bodies (lib/handler/multipart.c). The
 * first byte picks a piece size; the rest is a body with the boundary
 * "B". The target traps when the parser breaks its contract (tern.h):
 * - a call takes no more than it is given, and every call either takes
 *   bytes or reports an event (no loop without progress);
 * - DATA is never empty; its views, and a part's fields, lie inside the
 *   bytes given to that call or inside the parser (a held delimiter
 *   prefix: at most the delimiter's 5 bytes);
 * - the body read in pieces gives the same parts, data, ends and error
 *   as the body read whole.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Iinclude -Ilib
 *        lib/handler/multipart.c lib/core/text.c test/fuzz/fuzz_multipart.c
 */
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#include "fuzz.h"

#define CT "multipart/form-data; boundary=B"

typedef struct {
  unsigned char *s;
  size_t n, cap;
} buf;

static void add(buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->s = realloc(b->s, b->cap);
    CHECK(b->s != NULL);
  }
  memcpy(b->s + b->n, p, n);
  b->n += n;
}

/* The transcript of reading `body` in pieces of `piece` bytes. */
static int transcript(const char *body, size_t len, size_t piece, buf *out) {
  tern_multipart *m;
  tern_multipart_event ev;
  size_t off = 0, used, calls = 0;
  int rc;
  CHECK(tern_multipart_new(CT, sizeof(CT) - 1, 0, 0, &m) == 0);
  for (;;) {
    size_t give = len - off < piece ? len - off : piece;
    const char *in = body + off;
    rc = tern_multipart_next(m, in, give, &used, &ev);
    CHECK(++calls <= 4 * len + 16);
    if (rc < 0)
      break;
    CHECK(used <= give);
    CHECK(used > 0 || rc != TERN_MULTIPART_MORE || give == 0);
    off += used;
    if (rc == TERN_MULTIPART_PART) {
      size_t i;
      add(out, "P", 1);
      add(out, &ev.nfields, sizeof ev.nfields);
      CHECK(ev.nfields <= 16);
      for (i = 0; i < ev.nfields; i++) {
        CHECK(ev.fields[i].name_len > 0);
        add(out, ev.fields[i].name, ev.fields[i].name_len);
        add(out, ":", 1);
        add(out, ev.fields[i].value, ev.fields[i].value_len);
      }
      if (ev.name != NULL)
        add(out, ev.name, ev.name_len);
    } else if (rc == TERN_MULTIPART_DATA) {
      CHECK(ev.len > 0);
      CHECK((ev.data >= in && ev.data + ev.len <= in + give) || ev.len <= 5);
      add(out, ev.data, ev.len);
    } else if (rc == TERN_MULTIPART_PART_END) {
      add(out, "|", 1);
    } else if (rc == TERN_MULTIPART_END) {
      add(out, "$", 1);
      break;
    } else if (off == len) {
      break;
    }
  }
  CHECK(rc < 0 || rc == TERN_MULTIPART_END || off == len);
  if (rc >= 0 && !tern_multipart_finished(m))
    rc = 99;
  tern_multipart_free(m);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  buf whole = {0}, pieces = {0};
  int a, b;
  if (size < 1)
    return 0;
  a = transcript((const char *)data + 1, size - 1, size, &whole);
  b = transcript((const char *)data + 1, size - 1, (size_t)data[0] % 16 + 1,
                 &pieces);
  CHECK(a == b);
  CHECK(whole.n == pieces.n &&
        (whole.n == 0 || memcmp(whole.s, pieces.s, whole.n) == 0));
  free(whole.s);
  free(pieces.s);
  return 0;
}
