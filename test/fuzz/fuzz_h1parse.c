/* libFuzzer target for the HTTP/1.1 request parser (lib/http1/parse.c).
 *
 * Besides looking for crashes under the sanitizers, it checks properties
 * that must hold for every input and traps when one fails:
 * - head_end agrees with a naive reference scan, and finds the same end
 *   whether the bytes arrive at once, in two parts or one at a time;
 * - parse_head either fails with a known code or returns views that lie in
 *   the head and obey the grammar, and it reads nothing past `len`;
 * - check_partial never rejects a prefix of a head that parses, and once
 *   it rejects a prefix it rejects every longer one;
 * - the chunked decoder gives the same result, data and consumption no
 *   matter how the input is split;
 * - has_token agrees with a naive reference.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Ilib -Iinclude
 *        lib/http1/parse.c test/fuzz/fuzz_h1parse.c
 * Run:   ./a.out -dict=test/fuzz/h1.dict test/fuzz/corpus_h1
 */
#include "http1/parse.h"
#include "core/text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static int is_error(int r) {
  return r == TERN__H1_E400 || r == TERN__H1_E414 || r == TERN__H1_E431 ||
         r == TERN__H1_E501 || r == TERN__H1_E505;
}

/* FNV-1a, so that limits and split points follow from the input alone and
 * every run of an input behaves the same. */
static uint64_t hash(const uint8_t *p, size_t n) {
  uint64_t h = 14695981039346656037u;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211u;
  return h;
}

/* ------------------------------------------------------------------ */
/* Head end                                                             */

/* The definition, spelled out slowly: skip CRLF pairs, then the first
 * CRLFCRLF at or after that point ends the head. */
static size_t ref_head_end(const char *b, size_t n) {
  size_t s = 0, p;

  while (s + 1 < n && b[s] == '\r' && b[s + 1] == '\n')
    s += 2;
  for (p = s; p + 4 <= n; p++)
    if (memcmp(b + p, "\r\n\r\n", 4) == 0)
      return p + 4;
  return 0;
}

static size_t check_head_end(const char *b, size_t n, size_t split) {
  size_t whole, sc = 0, k, r;

  whole = tern__h1_head_end(b, n, &sc);
  CHECK(whole == ref_head_end(b, n));
  CHECK(whole == 0 || (whole >= 4 && whole <= n));

  /* One byte at a time: the end shows up exactly when its last byte does,
   * and the resume offset never runs ahead of the data. */
  sc = 0;
  for (k = 0; k <= n; k++) {
    r = tern__h1_head_end(b, k, &sc);
    CHECK(sc <= k);
    if (r != 0) {
      CHECK(r == k && r == whole);
      break;
    }
  }
  CHECK(k <= n || whole == 0);

  /* Two parts. */
  sc = 0;
  r = tern__h1_head_end(b, split, &sc);
  if (r == 0)
    r = tern__h1_head_end(b, n, &sc);
  CHECK(r == whole);
  return whole;
}

/* ------------------------------------------------------------------ */
/* Head                                                                 */

static int within(const char *p, size_t n, const char *b, size_t len) {
  return p >= b && p <= b + len && n <= (size_t)(b + len - p);
}

static void check_parsed(const tern__h1_head *h, const char *b, size_t n,
                         size_t cap, const tern__h1_limits *lim) {
  size_t i, j;

  CHECK(h->method_len >= 1 && h->method_len <= TERN__H1_MAX_METHOD);
  CHECK(within(h->method, h->method_len, b, n));
  CHECK(h->target_len >= 1 && h->target_len <= lim->max_uri);
  CHECK(within(h->target, h->target_len, b, n));
  CHECK(h->path != NULL);
  CHECK(within(h->path, h->path_len, b, n) ||
        (h->path_len == 1 && h->path[0] == '/' &&
         (h->flags & TERN__H1_F_ABSOLUTE)));
  CHECK(h->query == NULL || within(h->query, h->query_len, b, n));
  CHECK(h->query != NULL || h->query_len == 0);
  CHECK(h->authority == NULL || within(h->authority, h->authority_len, b, n));
  CHECK(h->version_minor == 0 || h->version_minor == 1);
  CHECK(h->version_minor == 0 || (h->flags & TERN__H1_F_HAS_HOST));
  CHECK(h->version_minor == 1 || (h->flags & TERN__H1_F_KEEPALIVE) ||
        (h->flags & TERN__H1_F_CLOSE));
  CHECK(!(h->flags & TERN__H1_F_UPGRADE) ||
        (h->upgrade_len > 0 && within(h->upgrade, h->upgrade_len, b, n)));
  CHECK(!(h->flags & TERN__H1_F_ASTERISK) ||
        (h->target_len == 1 && h->target[0] == '*'));
  CHECK(h->body >= TERN__H1_BODY_NONE && h->body <= TERN__H1_BODY_CHUNKED);
  CHECK(h->body != TERN__H1_BODY_CHUNKED || h->version_minor == 1);
  CHECK(h->body == TERN__H1_BODY_LENGTH || h->content_length == 0);
  CHECK(h->content_length <= (uint64_t)1 << 62);
  CHECK(h->nfields <= cap && h->nfields <= lim->max_headers);
  for (i = 0; i < h->nfields; i++) {
    const tern__h1_field *f = &h->fields[i];

    CHECK(f->name_len > 0 && within(f->name, f->name_len, b, n));
    CHECK(within(f->value, f->value_len, b, n));
    for (j = 0; j < f->name_len; j++)
      CHECK(f->name[j] > ' ' && f->name[j] != ':' && f->name[j] < 0x7f);
    for (j = 0; j < f->value_len; j++) {
      unsigned char c = (unsigned char)f->value[j];
      CHECK(c >= ' ' || c == '\t');
      CHECK(c != 0x7f);
    }
    if (f->value_len > 0) {
      CHECK(f->value[0] != ' ' && f->value[0] != '\t');
      CHECK(f->value[f->value_len - 1] != ' ' &&
            f->value[f->value_len - 1] != '\t');
    }
  }
}

/* parse_head on an exact-size copy (so that ASan sees any read past len),
 * twice with the same answer. */
static int check_head(const char *b, size_t n, const tern__h1_limits *lim,
                      size_t cap) {
  tern__h1_field f1[64], f2[64];
  tern__h1_head h1, h2;
  char *copy = malloc(n);
  int r1, r2;

  CHECK(copy != NULL);
  memcpy(copy, b, n);
  memset(&h1, 0, sizeof h1);
  memset(&h2, 0, sizeof h2);
  h1.fields = f1;
  h1.nfields = cap;
  h2.fields = f2;
  h2.nfields = cap;
  r1 = tern__h1_parse_head(copy, n, &h1, lim);
  r2 = tern__h1_parse_head(b, n, &h2, lim);
  CHECK(r1 == r2);
  CHECK(r1 == (int)n || is_error(r1));
  if (r1 > 0) {
    check_parsed(&h1, copy, n, cap, lim);
    CHECK(h1.flags == h2.flags && h1.body == h2.body);
    CHECK(h1.nfields == h2.nfields && h1.target_len == h2.target_len);
    CHECK(h1.content_length == h2.content_length);
  }
  free(copy);
  return r1;
}

/* check_partial over prefixes: no false alarms before a head that parses,
 * and a rejection is never withdrawn by more bytes. */
static void check_partials(const char *b, size_t n, int parsed,
                           const tern__h1_limits *lim) {
  size_t k, step = n > 2048 ? n / 512 : 1;
  int seen_error = 0, r;

  for (k = 0; k < n; k += step) {
    r = tern__h1_check_partial(b, k, lim);
    CHECK(r == 0 || is_error(r));
    if (r != 0)
      CHECK(parsed < 0);
    CHECK(!seen_error || r != 0);
    seen_error = r != 0;
  }
}

/* ------------------------------------------------------------------ */
/* Chunked                                                              */

typedef struct {
  int result;
  size_t used, outlen;
} chunk_run;

/* Feed in[0..len) in pieces of `step` bytes (step 0: two pieces split at
 * `split`), collecting data into out. */
static chunk_run run_chunked(const char *in, size_t len, size_t split,
                             size_t step, size_t max_line, char *out) {
  tern__h1_chunked c;
  chunk_run cr = {TERN__H1_CHUNKED_MORE, 0, 0};
  size_t pos = 0, end, got, off, dl;
  int r;

  tern__h1_chunked_init(&c, max_line);
  while (pos < len) {
    end = step ? pos + step : (pos < split ? split : len);
    if (end > len)
      end = len;
    while (pos < end) {
      r = tern__h1_chunked_decode(&c, in + pos, end - pos, &got, &off, &dl);
      CHECK(got <= end - pos);
      cr.result = r;
      if (r == TERN__H1_CHUNKED_DONE) {
        /* A non-empty trailer span is the whole trailer section and lies
         * just before the final CRLF, whose LF was the last byte used. */
        CHECK(off <= got && dl <= got - off);
        if (dl > 0) {
          CHECK(dl == c.trailer_len);
          CHECK(off + dl + 2 == got);
          CHECK(memcmp(in + pos + off + dl, "\r\n", 2) == 0);
        }
        cr.used = pos + got;
        /* DONE sticks and takes nothing more. */
        r = tern__h1_chunked_decode(&c, in + cr.used, end - cr.used, &got, &off,
                                    &dl);
        CHECK(r == TERN__H1_CHUNKED_DONE && got == 0 && dl == 0);
        return cr;
      }
      if (r < 0) {
        /* *consumed on error points at the offending byte, which is the
         * same byte however the input was split. */
        CHECK(r == TERN__H1_E400);
        cr.used = pos + got;
        r = tern__h1_chunked_decode(&c, in + pos, end - pos, &got, &off, &dl);
        CHECK(r == TERN__H1_E400 && got == 0);
        return cr;
      }
      if (dl > 0) {
        CHECK(off + dl == got);
        memcpy(out + cr.outlen, in + pos + off, dl);
        cr.outlen += dl;
      } else {
        CHECK(got == end - pos);
      }
      pos += got;
      cr.used = pos;
    }
  }
  return cr;
}

static void check_chunked(const char *in, size_t len, size_t split,
                          size_t max_line) {
  char *o1 = malloc(len + 1), *o2 = malloc(len + 1), *o3 = malloc(len + 1);
  chunk_run a, b, c;

  CHECK(o1 && o2 && o3);
  a = run_chunked(in, len, len, 0, max_line, o1);
  b = run_chunked(in, len, split, 0, max_line, o2);
  c = run_chunked(in, len, 0, 1, max_line, o3);
  CHECK(a.result == b.result && a.result == c.result);
  CHECK(a.outlen == b.outlen && a.outlen == c.outlen);
  CHECK(a.used == b.used && a.used == c.used);
  CHECK(memcmp(o1, o2, a.outlen) == 0 && memcmp(o1, o3, a.outlen) == 0);
  CHECK(a.outlen <= len);
  free(o1);
  free(o2);
  free(o3);
}

/* ------------------------------------------------------------------ */
/* Token lists                                                          */

static int ref_lower(int c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static int ref_has_token(const char *v, size_t n, const char *t, size_t tn) {
  size_t s = 0, e, a, z, i;

  while (s <= n) {
    for (e = s; e < n && v[e] != ','; e++)
      ;
    a = s;
    z = e;
    while (a < z && (v[a] == ' ' || v[a] == '\t'))
      a++;
    while (z > a && (v[z - 1] == ' ' || v[z - 1] == '\t'))
      z--;
    if (z > a && z - a == tn) {
      for (i = 0; i < tn; i++)
        if (ref_lower((unsigned char)v[a + i]) !=
            ref_lower((unsigned char)t[i]))
          break;
      if (i == tn)
        return 1;
    }
    s = e + 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *b = (const char *)data;
  uint64_t h = hash(data, size);
  size_t split = (size_t)(h % (size + 1)), end, cap, max_line;
  tern__h1_limits lim = {4096, 32, 1024};
  int r = -1;

  /* One input in four gets small limits, so that 414 and 431 are met. */
  if ((h >> 32 & 3) == 0) {
    lim.max_head = 32 + (size_t)(h >> 40 & 255);
    lim.max_headers = (size_t)(h >> 48 & 7);
    lim.max_uri = 1 + (size_t)(h >> 52 & 63);
  }
  cap = (h >> 36 & 1) ? 64 : 1 + (size_t)(h >> 56 & 15);
  max_line = (h >> 37 & 1) ? 4096 : 4 + (size_t)(h >> 58 & 63);

  end = check_head_end(b, size, split);
  if (end > 0) {
    r = check_head(b, end, &lim, cap);
    check_partials(b, end, r, &lim);
  } else {
    check_partials(b, size, -1, &lim);
  }

  check_chunked(b, size, split, max_line);
  if (end > 0 && end < size)
    check_chunked(b + end, size - end, (split > end ? split - end : 0),
                  max_line);

  CHECK(tern__has_token(b + split, size - split, b, split) ==
        ref_has_token(b + split, size - split, b, split));
  return 0;
}
