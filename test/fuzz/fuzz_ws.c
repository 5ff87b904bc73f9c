/* libFuzzer target for the WebSocket codec (lib/ws/frame.c) and
 * permessage-deflate (lib/ws/deflate.c).
 *
 * Besides looking for crashes under the sanitizers, it checks properties
 * that must hold for every input and traps when one fails:
 * - frames and close frames from the encoder decode to what was encoded;
 * - the decoder gives the same events, data, result and stopping offset
 *   whether the input arrives whole, one byte at a time, in two parts or
 *   in chunks, and it keeps its own contract on every call (consumption,
 *   event order, sticky errors, valid close codes, UTF-8 text and close
 *   reasons, the size limit);
 * - the inflater, given part of the input as a compressed message with a
 *   small limit, succeeds or fails alike whole and in pieces, with the
 *   same output when it succeeds and never more than the limit;
 * - deflating part of the input and inflating it again gives it back,
 *   under window sizes, memory levels and context modes chosen by hash;
 * - negotiation answers with a well-formed response that it would accept
 *   itself as an offer;
 * - the UTF-8 validator agrees with a naive decoder, however split.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Iinclude -Ilib
 *        lib/ws/frame.c lib/ws/deflate.c test/fuzz/fuzz_ws.c -lz
 * Run:   ./a.out -dict=test/fuzz/ws.dict test/fuzz/corpus_ws
 */
#include "ws/deflate.h"
#include "ws/frame.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/ref_utf8.h"

#include "fuzz.h"

/* FNV-1a, so that limits, modes and split points follow from the input
 * alone and every run of an input behaves the same. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211u;
  return h;
}

#define FNV0 14695981039346656037u

/* ------------------------------------------------------------------ */
/* Decoder                                                              */

/* What a run saw. Events are hashed with their fields; DATA adds only its
 * bytes, so that spans merge and the hash does not depend on how the
 * data was cut, and the next event records how many bytes came before
 * it. */
typedef struct {
  uint64_t h;
  int result;
  size_t at, events;
} dec_run;

typedef struct {
  int in_msg, text, compressed;
  uint64_t msg_len, pending;
  unsigned char *msg; /* the open uncompressed text message, for ref_utf8 */
  size_t cap;
} dec_check;

static void note_event(dec_run *r, dec_check *c, int e,
                       const tern__ws_event *ev) {
  uint64_t f[4];

  f[0] = (uint64_t)e;
  f[1] = c->pending;
  f[2] = (uint64_t)ev->code;
  f[3] = (uint64_t)(ev->opcode * 2 + ev->compressed);
  r->h = fnv(r->h, f, sizeof f);
  if (e == TERN__WS_EV_PING || e == TERN__WS_EV_PONG || e == TERN__WS_EV_CLOSE)
    r->h = fnv(r->h, ev->data, ev->len);
  c->pending = 0;
  r->events++;
}

/* Decode in[0..n) `step` bytes at a time (0: all at once) or in two parts
 * cut at `split`, unmasking into an output buffer of `ocap` bytes (0: as
 * large as the input). The input must come out unchanged. */
static void run_decoder(dec_run *r, const uint8_t *in, size_t n, size_t step,
                        size_t split, size_t ocap, uint64_t max, int deflate) {
  unsigned char *buf = malloc(n + 1);
  unsigned char *out;
  tern__ws_decoder d;
  tern__ws_event ev;
  dec_check c;
  size_t pos = 0, lim, used;
  int e;

  CHECK(buf != NULL);
  memcpy(buf, in, n);
  if (ocap == 0)
    ocap = n + 1;
  out = malloc(ocap);
  CHECK(out != NULL);
  memset(&c, 0, sizeof c);
  c.cap = n + 1;
  c.msg = malloc(c.cap);
  CHECK(c.msg != NULL);
  r->h = FNV0;
  r->result = 0;
  r->events = 0;
  tern__ws_decoder_init(&d, max, deflate);
  tern__ws_decoder_output(&d, out, ocap);
  lim = split > 0 ? split : (step > 0 && step < n ? step : n);
  for (;;) {
    e = tern__ws_decode(&d, buf + pos, lim - pos, &used, &ev);
    CHECK(used <= lim - pos);
    pos += used;
    if (e == TERN__WS_EV_NONE) {
      CHECK(pos == lim);
      if (lim == n)
        break;
      lim = (split > 0 || step == 0 || n - lim < step) ? n : lim + step;
      continue;
    }
    if (e < 0) {
      size_t again;

      CHECK(e == TERN__WS_E1002 || e == TERN__WS_E1007 || e == TERN__WS_E1009);
      CHECK(tern__ws_decode(&d, buf + pos, lim - pos, &again, &ev) == e);
      CHECK(again == 0);
      r->result = e;
      break;
    }
    switch (e) {
    case TERN__WS_EV_BEGIN:
      CHECK(!c.in_msg);
      CHECK(ev.opcode == TERN__WS_OP_TEXT || ev.opcode == TERN__WS_OP_BINARY);
      CHECK(!ev.compressed || deflate);
      c.in_msg = 1;
      c.text = ev.opcode == TERN__WS_OP_TEXT;
      c.compressed = ev.compressed;
      c.msg_len = 0;
      break;
    case TERN__WS_EV_DATA:
      CHECK(c.in_msg && ev.len > 0 && ev.len <= used && ev.len <= ocap);
      CHECK(ev.data == out);
      r->h = fnv(r->h, ev.data, ev.len);
      if (c.text && !c.compressed)
        memcpy(c.msg + c.msg_len, ev.data, ev.len);
      c.msg_len += ev.len;
      c.pending += ev.len;
      CHECK(c.compressed || c.msg_len <= max);
      break;
    case TERN__WS_EV_END:
      CHECK(c.in_msg);
      if (c.text && !c.compressed)
        CHECK(ref_utf8(c.msg, (size_t)c.msg_len));
      c.in_msg = 0;
      break;
    case TERN__WS_EV_PING:
    case TERN__WS_EV_PONG:
      CHECK(ev.len <= TERN__WS_MAX_CONTROL);
      break;
    case TERN__WS_EV_CLOSE:
      CHECK(ev.len <= TERN__WS_MAX_CONTROL - 2);
      CHECK(ev.code == TERN__WS_CLOSE_NO_STATUS ||
            tern__ws_close_code_valid(ev.code));
      CHECK(ev.code != TERN__WS_CLOSE_NO_STATUS || ev.len == 0);
      CHECK(ref_utf8(ev.data, ev.len));
      break;
    default:
      CHECK(0);
    }
    if (e != TERN__WS_EV_DATA)
      note_event(r, &c, e, &ev);
  }
  /* After a close the rest of the input is used and ignored. */
  r->h = fnv(r->h, &c.pending, sizeof c.pending);
  r->at = pos;
  CHECK(memcmp(buf, in, n) == 0); /* the decoder only reads its input */
  free(c.msg);
  free(out);
  free(buf);
}

static void check_decoder(const uint8_t *in, size_t n, uint64_t h) {
  uint64_t max = (h >> 8 & 3) == 0 ? (h >> 16 & 1023) : UINT64_MAX;
  int deflate = (int)(h >> 10 & 1);
  size_t split = n > 1 ? 1 + (size_t)(h >> 20) % (n - 1) : 0;
  size_t step = 2 + (size_t)(h >> 40 & 31);
  dec_run a, b;

  size_t ocap = 1 + (size_t)(h >> 48 & 15);

  run_decoder(&a, in, n, 0, 0, 0, max, deflate);
  CHECK(a.at <= n);
  CHECK(a.result != 0 || a.at == n);

  run_decoder(&b, in, n, 1, 0, 0, max, deflate);
  CHECK(a.h == b.h && a.result == b.result && a.at == b.at);
  CHECK(a.events == b.events);
  if (split > 0) {
    run_decoder(&b, in, n, 0, split, 0, max, deflate);
    CHECK(a.h == b.h && a.result == b.result && a.at == b.at);
  }
  run_decoder(&b, in, n, step, 0, 0, max, deflate);
  CHECK(a.h == b.h && a.result == b.result && a.at == b.at);
  /* A small output buffer cuts DATA spans as small reads do. */
  run_decoder(&b, in, n, 0, 0, ocap, max, deflate);
  CHECK(a.h == b.h && a.result == b.result && a.at == b.at);
}

/* Encode a frame and a close frame from the input, mask them as a client
 * would, and decode them: the decoder must read back what was written. */
static void check_encoder(const uint8_t *in, size_t n, uint64_t h) {
  static const unsigned char key[4] = {0x5a, 0x01, 0xc3, 0x7e};
  unsigned char *f = malloc(n + TERN__WS_MAX_HEADER + 4);
  unsigned char cf[TERN__WS_MAX_CONTROL_FRAME + 4];
  unsigned char *out = malloc(n + 1);
  unsigned char one[1]; /* a close frame's payload stays in the decoder */
  tern__ws_decoder d;
  tern__ws_event ev;
  size_t hl, used, k, cl, pos;
  int code = 1000 + (int)((h >> 3) % 4000), r;

  CHECK(f != NULL && out != NULL);
  hl = tern__ws_frame_header(f, TERN__WS_OP_BINARY, 1, 0, n);
  CHECK(hl == (n < 126 ? 2u : n < 65536 ? 4u : 10u));
  f[1] |= 0x80;
  memcpy(f + hl, key, 4);
  for (k = 0; k < n; k++)
    f[hl + 4 + k] = in[k] ^ key[k & 3];
  tern__ws_decoder_init(&d, UINT64_MAX, 0);
  tern__ws_decoder_output(&d, out, n + 1);
  CHECK(tern__ws_decode(&d, f, hl + 4 + n, &used, &ev) == TERN__WS_EV_BEGIN);
  CHECK(used == hl + 4 && ev.opcode == TERN__WS_OP_BINARY);
  pos = used;
  if (n > 0) {
    r = tern__ws_decode(&d, f + pos, n, &used, &ev);
    CHECK(r == TERN__WS_EV_DATA && used == n && ev.len == n);
    CHECK(memcmp(ev.data, in, n) == 0);
    pos += used;
  }
  CHECK(tern__ws_decode(&d, f + pos, 0, &used, &ev) == TERN__WS_EV_END);
  free(out);
  free(f);

  cl = tern__ws_close_frame(cf, code, (const char *)in, n);
  CHECK(tern__ws_close_code_valid(code) == (cl > 0));
  if (cl == 0)
    return;
  CHECK(cl >= 4 && cl <= TERN__WS_MAX_CONTROL_FRAME && cf[1] == cl - 2);
  CHECK(memcmp(cf + 4, in, cl - 4) == 0);
  memmove(cf + 6, cf + 2, cl - 2);
  cf[1] |= 0x80;
  memset(cf + 2, 0, 4); /* a zero key leaves the payload as it is */
  tern__ws_decoder_init(&d, UINT64_MAX, 0);
  tern__ws_decoder_output(&d, one, sizeof one);
  r = tern__ws_decode(&d, cf, cl + 4, &used, &ev);
  if (ref_utf8(in, cl - 4)) {
    CHECK(r == TERN__WS_EV_CLOSE && ev.code == code);
    CHECK(ev.len == cl - 4 && used == cl + 4);
    /* The cut fell on a code point boundary of valid text. */
    CHECK(cl - 4 == n || ref_utf8(in, n) == 0 || (in[cl - 4] & 0xc0) != 0x80);
  } else {
    CHECK(r == TERN__WS_E1007);
  }
}

/* ------------------------------------------------------------------ */
/* Inflate and deflate                                                  */

typedef struct {
  uint64_t h, len;
} zsink;

static int sink_hash(void *user, const unsigned char *p, size_t n) {
  zsink *s = user;

  CHECK(n > 0 && n <= TERN__WS_ZCHUNK);
  s->h = fnv(s->h, p, n);
  s->len += n;
  return 0;
}

/* Inflate in[0..n) as one message in pieces of `step` (0: whole). */
static int run_inflate(const tern__ws_deflate_params *p, const uint8_t *in,
                       size_t n, size_t step, uint64_t limit, int text,
                       zsink *out) {
  tern__ws_inflater f;
  size_t pos = 0, k;
  int r = 0;

  out->h = FNV0;
  out->len = 0;
  CHECK(tern__ws_inflater_init(&f, p, NULL) == 0);
  tern__ws_inflate_begin(&f, limit, text);
  while (pos < n && r == 0) {
    k = (step == 0 || n - pos < step) ? n - pos : step;
    r = tern__ws_inflate(&f, in + pos, k, sink_hash, out);
    pos += k;
  }
  if (r == 0)
    r = tern__ws_inflate_end(&f, sink_hash, out);
  tern__ws_inflater_free(&f);
  CHECK(r == 0 || r == TERN__WS_E1007 || r == TERN__WS_E1009);
  CHECK(out->len <= limit);
  return r;
}

static void check_inflate(const uint8_t *in, size_t n, uint64_t h) {
  tern__ws_deflate_params p;
  uint64_t limit = 1 + (h >> 24 & 0xffff);
  int text = (int)(h >> 45 & 1), r1, r2;
  size_t split = 1 + (size_t)(h >> 50 & 63);
  zsink a, b;

  memset(&p, 0, sizeof p);
  p.client_window_bits = 8 + (int)(h >> 56 & 7);
  r1 = run_inflate(&p, in, n, 0, limit, text, &a);
  r2 = run_inflate(&p, in, n, split, limit, text, &b);
  CHECK((r1 == 0) == (r2 == 0));
  if (r1 == 0)
    CHECK(a.h == b.h && a.len == b.len);
  if (n <= 512) {
    r2 = run_inflate(&p, in, n, 1, limit, text, &b);
    CHECK((r1 == 0) == (r2 == 0));
    if (r1 == 0)
      CHECK(a.h == b.h && a.len == b.len);
  }
}

typedef struct {
  unsigned char *p;
  size_t len, cap;
} zbuf;

static int sink_cat(void *user, const unsigned char *p, size_t n) {
  zbuf *z = user;

  CHECK(n > 0 && z->len + n <= z->cap);
  memcpy(z->p + z->len, p, n);
  z->len += n;
  return 0;
}

/* Deflate the input as three messages cut at hashed points, each in
 * pieces, and inflate them back with a matching inflater. */
static void check_round_trip(const uint8_t *in, size_t n, uint64_t h) {
  tern__ws_deflate_params p;
  tern__ws_deflater d;
  tern__ws_inflater f;
  size_t cut[4], m, pos, k, piece;
  zbuf z, o;
  int r;

  memset(&p, 0, sizeof p);
  p.server_window_bits = 9 + (int)(h % 7);
  p.client_window_bits = p.server_window_bits;
  p.server_no_context_takeover = (int)(h >> 3 & 1);
  p.client_no_context_takeover = p.server_no_context_takeover;
  p.mem_level = 1 + (int)(h >> 4 & 7);
  p.level = (int)(h >> 7 & 15) % 11 - 1;
  cut[0] = 0;
  cut[1] = n ? (size_t)(h >> 12) % (n + 1) : 0;
  cut[2] = cut[1] + (n - cut[1] ? (size_t)(h >> 30) % (n - cut[1] + 1) : 0);
  cut[3] = n;
  piece = 1 + (size_t)(h >> 48 & 4095);

  z.cap = n + n / 8 + 64 * 3 + 64;
  z.p = malloc(z.cap);
  o.cap = n + 1;
  o.p = malloc(o.cap);
  CHECK(z.p != NULL && o.p != NULL);
  CHECK(tern__ws_deflater_init(&d, &p, NULL) == 0);
  CHECK(tern__ws_inflater_init(&f, &p, NULL) == 0);
  for (m = 0; m < 3; m++) {
    z.len = 0;
    o.len = 0;
    pos = cut[m];
    do {
      k = cut[m + 1] - pos < piece ? cut[m + 1] - pos : piece;
      r = tern__ws_deflate(&d, in + pos, k, pos + k == cut[m + 1], sink_cat,
                           &z);
      CHECK(r == 0);
      pos += k;
    } while (pos < cut[m + 1]);
    CHECK(z.len >= 1);
    tern__ws_inflate_begin(&f, cut[m + 1] - cut[m], 0);
    CHECK(tern__ws_inflate(&f, z.p, z.len, sink_cat, &o) == 0);
    CHECK(tern__ws_inflate_end(&f, sink_cat, &o) == 0);
    CHECK(o.len == cut[m + 1] - cut[m]);
    CHECK(o.len == 0 || memcmp(o.p, in + cut[m], o.len) == 0);
  }
  tern__ws_deflater_free(&d);
  tern__ws_inflater_free(&f);
  free(z.p);
  free(o.p);
}

/* ------------------------------------------------------------------ */
/* Negotiation and UTF-8                                                */

static void check_negotiate(const uint8_t *in, size_t n, uint64_t h) {
  tern__ws_deflate_policy pol;
  tern__ws_deflate_params p, q;
  char resp[TERN__WS_DEFLATE_RESPONSE_MAX],
      again[TERN__WS_DEFLATE_RESPONSE_MAX];
  size_t rl, al;
  int r;

  tern__ws_deflate_policy_init(&pol);
  pol.server_max_window_bits = (int)(h >> 5 & 15);
  pol.client_max_window_bits = (int)(h >> 9 & 15);
  pol.client_no_context_takeover = (int)(h >> 13 & 1);
  r = tern__ws_deflate_negotiate((const char *)in, n, &pol, &p, resp, &rl);
  CHECK(r == 0 || r == 1);
  if (r == 0)
    return;
  CHECK(rl < sizeof resp && resp[rl] == '\0' && strlen(resp) == rl);
  CHECK(p.server_window_bits >= 9 && p.server_window_bits <= 15);
  CHECK(p.client_window_bits >= 8 && p.client_window_bits <= 15);
  CHECK(p.mem_level >= 1 && p.mem_level <= 9);
  /* The response reads as an offer that the same policy accepts. */
  CHECK(tern__ws_deflate_negotiate(resp, rl, &pol, &q, again, &al) == 1);
}

static void check_utf8(const uint8_t *in, size_t n, uint64_t h) {
  size_t split = n ? (size_t)(h >> 33) % (n + 1) : 0, r1, r2;
  unsigned s1 = TERN__WS_UTF8_OK, s2 = TERN__WS_UTF8_OK;
  int ok;

  r1 = tern__ws_utf8_scan(&s1, in, n);
  ok = r1 == n && s1 == TERN__WS_UTF8_OK;
  CHECK(ok == ref_utf8(in, n));
  r2 = tern__ws_utf8_scan(&s2, in, split);
  if (r2 == split)
    r2 = split + tern__ws_utf8_scan(&s2, in + split, n - split);
  CHECK(r1 == r2 && s1 == s2);
  /* Fail fast: everything before the failing byte is a valid prefix. */
  if (r1 < n) {
    unsigned s3 = TERN__WS_UTF8_OK;
    CHECK(tern__ws_utf8_scan(&s3, in, r1) == r1);
  }
}

/* ------------------------------------------------------------------ */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t none[1];
  uint64_t h, off;

  /* Stepping a NULL pointer, even by 0, is undefined. */
  if (size == 0)
    data = none;
  h = fnv(FNV0, data, size);
  off = size ? (h >> 4) % (size + 1) : 0;

  if (size > 1 << 16)
    return 0; /* the checks are several passes each: keep them quick */
  check_decoder(data, size, h);
  check_encoder(data, size, h);
  check_inflate(data + off, size - (size_t)off, h);
  check_round_trip(data, size, h);
  check_negotiate(data, size, h);
  check_utf8(data, size, h);
  return 0;
}
