/* libFuzzer target for Server-Sent Events framing
 * (lib/handler/sse_format.c). The first two bytes split the rest into an
 * id, an event type and the data. The target traps when tern_sse_format
 * breaks its contract (tern.h):
 * - the size it reports is the size it writes, NUL-terminated, within
 *   its buffer, and a buffer one byte short is TERN_ETOOBIG;
 * - what it accepts, read back by the WHATWG HTML standard's
 *   event-stream parser (below), is one event with the same id, the same
 *   type (empty: none) and the same data, its line ends made LF: nothing
 *   in the data can end the event or start a field of its own;
 * - it refuses exactly an id or a type with CR or LF.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Iinclude -Ilib
 *        lib/handler/sse_format.c test/fuzz/fuzz_sse.c
 */
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#include "fuzz.h"

typedef struct {
  char *id, *event, *data;
  size_t id_len, event_len, data_len;
  int events; /* events dispatched */
} parsed;

/* The standard's "interpret an event stream", for one stream of LF-ended
 * lines (what tern_sse_format writes). */
static void parse(const char *s, size_t n, parsed *p, char *buf) {
  size_t i = 0, dl = 0;
  while (i < n) {
    size_t end = i, colon, vs;
    while (end < n && s[end] != '\n')
      end++;
    CHECK(end < n); /* every line ends */
    if (end == i) { /* a blank line dispatches */
      if (dl > 0) {
        p->events++;
        p->data = buf;
        p->data_len = dl - 1; /* the last LF goes */
      }
      dl = 0;
    } else if (s[i] != ':') {
      for (colon = i; colon < end && s[colon] != ':'; colon++)
        ;
      vs = colon < end ? colon + 1 : end;
      if (vs < end && s[vs] == ' ')
        vs++;
      if (colon - i == 4 && memcmp(s + i, "data", 4) == 0) {
        memcpy(buf + dl, s + vs, end - vs);
        dl += end - vs;
        buf[dl++] = '\n';
      } else if (colon - i == 5 && memcmp(s + i, "event", 5) == 0) {
        p->event = (char *)s + vs;
        p->event_len = end - vs;
      } else if (colon - i == 2 && memcmp(s + i, "id", 2) == 0) {
        p->id = (char *)s + vs;
        p->id_len = end - vs;
      } else {
        CHECK(0); /* no other field is ever written */
      }
    }
    i = end + 1;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *id, *ev, *out, *buf, *want;
  size_t a, b, n, n2, i, w;
  int rc, bad = 0;
  parsed p;

  if (size < 2)
    return 0;
  a = data[0] % (size - 1);
  b = data[1] % (size - 1 - a + 1);
  id = malloc(a + 1);
  ev = malloc(b + 1);
  memcpy(id, data + 2, a);
  id[a] = '\0';
  memcpy(ev, data + 2 + a, b > size - 2 - a ? size - 2 - a : b);
  b = b > size - 2 - a ? size - 2 - a : b;
  ev[b] = '\0';
  const char *d = (const char *)data + 2 + a + b;
  size_t dlen = size - 2 - a - b;
  for (i = 0; id[i]; i++)
    bad |= id[i] == '\r' || id[i] == '\n';
  for (i = 0; ev[i]; i++)
    bad |= ev[i] == '\r' || ev[i] == '\n';

  rc = tern_sse_format(NULL, 0, &n, id, ev, d, dlen);
  CHECK(rc == (bad ? TERN_EINVAL : TERN_ETOOBIG));
  if (!bad) {
    out = malloc(n + 1);
    CHECK(tern_sse_format(out, n, &n2, id, ev, d, dlen) == TERN_ETOOBIG);
    CHECK(n2 == n);
    CHECK(tern_sse_format(out, n + 1, &n2, id, ev, d, dlen) == 0);
    CHECK(n2 == n && out[n] == '\0');
    buf = malloc(n + 1);
    memset(&p, 0, sizeof p);
    parse(out, n, &p, buf);
    CHECK(p.events == 1);
    CHECK(p.id != NULL && p.id_len == strlen(id) &&
          memcmp(p.id, id, p.id_len) == 0);
    CHECK(p.event_len == strlen(ev) &&
          (p.event_len == 0 || memcmp(p.event, ev, p.event_len) == 0));
    /* The data with CR LF and CR made LF. */
    want = malloc(dlen + 1);
    for (i = w = 0; i < dlen; i++) {
      if (d[i] == '\r') {
        want[w++] = '\n';
        if (i + 1 < dlen && d[i + 1] == '\n')
          i++;
      } else {
        want[w++] = d[i];
      }
    }
    CHECK(p.data_len == w && memcmp(p.data, want, w) == 0);
    free(want);
    free(buf);
    free(out);
  }
  free(id);
  free(ev);
  return 0;
}
