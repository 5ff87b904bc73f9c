/* Unit tests for the WebSocket codec (lib/ws/frame.c) and permessage-
 * deflate (lib/ws/deflate.c).
 *
 * Every rejection is checked against its exact close code and against
 * the offset where the decoder stopped, because the code is what the
 * client is told and the offset shows that the error was caught at the
 * byte that caused it. Every decoder case also runs whole, one byte at a
 * time and split in two at every point, and all of those must agree.
 */
#include "ws/deflate.h"
#include "ws/frame.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "count_alloc.h"
#include "ref_utf8.h"
#include "t.h"

/* ------------------------------------------------------------------ */
/* Building client frames                                               */

static const unsigned char KEY[4] = {0x37, 0xfa, 0x21, 0x3d};
static const unsigned char *key = KEY; /* the key addf masks with */

/* The input under construction: masked client frames, appended. */
static unsigned char IN[1 << 21];
static size_t INLEN;

enum { LEN_MIN = 0, LEN_16 = 2, LEN_64 = 8 };

/* Append a frame with first byte b0 (FIN, RSV, opcode), masked with KEY,
 * its length written in the given form (LEN_MIN: the shortest). */
static void addf(int b0, const void *payload, size_t n, int form) {
  unsigned char *o = IN + INLEN;
  const unsigned char *p = payload;
  size_t h = 2, i;

  o[0] = (unsigned char)b0;
  if (form == LEN_MIN && n < 126) {
    o[1] = (unsigned char)(0x80 | n);
  } else if (form != LEN_64 && n < 65536) {
    o[1] = 0x80 | 126;
    o[2] = (unsigned char)(n >> 8);
    o[3] = (unsigned char)n;
    h = 4;
  } else {
    o[1] = 0x80 | 127;
    for (i = 0; i < 8; i++)
      o[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
    h = 10;
  }
  memcpy(o + h, key, 4);
  for (i = 0; i < n; i++)
    o[h + 4 + i] = p[i] ^ key[i & 3];
  INLEN += h + 4 + n;
}

/* Append raw bytes. */
static void addraw(const void *p, size_t n) {
  memcpy(IN + INLEN, p, n);
  INLEN += n;
}

#define ADD(b0, lit) addf((b0), (lit), sizeof(lit) - 1, LEN_MIN)
#define RAW(lit) addraw((lit), sizeof(lit) - 1)

/* ------------------------------------------------------------------ */
/* Running the decoder                                                  */

/* What a run produced: a log of events (DATA spans merged, since how
 * data is cut depends on how the input arrived), the final result and
 * the absolute offset where decoding stopped. */
typedef struct {
  unsigned char log[1 << 21];
  size_t len;
  int result; /* 0: all input used; else the error */
  size_t at;
  unsigned char data[1 << 21]; /* DATA not yet logged */
  size_t dlen;
} run_t;

static run_t R1, R2;
static unsigned char WORK[1 << 21];
/* When set, run() decodes from here (holding a copy of its input)
 * instead of from a copy in WORK. */
static const unsigned char *FROM;
/* Where the decoder unmasks payload, and how much of it a run offers. */
static unsigned char OUT[1 << 21];
static size_t OCAP = sizeof OUT;

static void log_bytes(run_t *r, const void *p, size_t n) {
  memcpy(r->log + r->len, p, n);
  r->len += n;
}

/* Log "[" + the formatted text + n bytes from p + "]". */
static void log_ev(run_t *r, const unsigned char *p, size_t n, const char *fmt,
                   ...) {
  char tmp[64];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  log_bytes(r, "[", 1);
  log_bytes(r, tmp, strlen(tmp));
  if (n > 0)
    log_bytes(r, p, n);
  log_bytes(r, "]", 1);
}

static void flush_data(run_t *r) {
  if (r->dlen > 0)
    log_ev(r, r->data, r->dlen, "D%zu:", r->dlen);
  r->dlen = 0;
}

/* Decode in[0..n) arriving `step` bytes at a time (0: all at once) or, if
 * split > 0, in two parts cut there. */
static void run(run_t *r, const unsigned char *in, size_t n, size_t step,
                size_t split, uint64_t max, int deflate) {
  tern__ws_decoder d;
  tern__ws_event ev;
  size_t pos = 0, lim, used;
  int e;

  const unsigned char *src = FROM != NULL ? FROM : WORK;

  if (FROM == NULL)
    memcpy(WORK, in, n);
  r->len = r->dlen = 0;
  r->result = 0;
  tern__ws_decoder_init(&d, max, deflate);
  tern__ws_decoder_output(&d, OUT, OCAP);
  lim = split > 0 ? split : step > 0 && step < n ? step : n;
  for (;;) {
    e = tern__ws_decode(&d, src + pos, lim - pos, &used, &ev);
    T_ASSERT(used <= lim - pos);
    pos += used;
    if (e == TERN__WS_EV_NONE) {
      T_ASSERT(pos == lim);
      if (lim == n)
        break;
      lim = split > 0 || step == 0 || n - lim < step ? n : lim + step;
      continue;
    }
    if (e < 0) {
      /* Errors stick and use nothing more. */
      size_t again;
      T_EQ_INT(tern__ws_decode(&d, src + pos, lim - pos, &again, &ev), e);
      T_EQ_INT(again, 0);
      r->result = e;
      break;
    }
    switch (e) {
    case TERN__WS_EV_DATA:
      T_ASSERT(ev.data == OUT && ev.len > 0 && ev.len <= OCAP);
      memcpy(r->data + r->dlen, ev.data, ev.len);
      r->dlen += ev.len;
      break;
    case TERN__WS_EV_BEGIN:
      flush_data(r);
      log_ev(r, NULL, 0, "B%d%s", ev.opcode, ev.compressed ? "z" : "");
      break;
    case TERN__WS_EV_END:
      flush_data(r);
      log_bytes(r, "[E]", 3);
      break;
    case TERN__WS_EV_PING:
      flush_data(r);
      log_ev(r, ev.data, ev.len, "P%zu:", ev.len);
      break;
    case TERN__WS_EV_PONG:
      flush_data(r);
      log_ev(r, ev.data, ev.len, "O%zu:", ev.len);
      break;
    case TERN__WS_EV_CLOSE:
      flush_data(r);
      log_ev(r, ev.data, ev.len, "C%d:%zu:", ev.code, ev.len);
      break;
    default:
      T_FAIL("unexpected event %d", e);
    }
  }
  flush_data(r);
  r->at = pos;
  /* The decoder only reads its input: carrier memory is not its own. */
  T_ASSERT(memcmp(src, in, n) == 0);
}

/* Run IN whole, then one byte at a time, in threes and in two parts at
 * every point, checking that all agree; R1 keeps the whole run. */
static void run_all(uint64_t max, int deflate) {
  size_t k;

  run(&R1, IN, INLEN, 0, 0, max, deflate);
  run(&R2, IN, INLEN, 1, 0, max, deflate);
  T_EQ_INT(R2.result, R1.result);
  T_EQ_INT(R2.at, R1.at);
  T_ASSERT(R2.len == R1.len && memcmp(R2.log, R1.log, R1.len) == 0);
  run(&R2, IN, INLEN, 3, 0, max, deflate);
  T_ASSERT(R2.len == R1.len && memcmp(R2.log, R1.log, R1.len) == 0);
  T_EQ_INT(R2.at, R1.at);
  for (k = 1; k < INLEN && INLEN < 4096; k++) {
    run(&R2, IN, INLEN, 0, k, max, deflate);
    T_EQ_INT(R2.result, R1.result);
    T_EQ_INT(R2.at, R1.at);
    T_ASSERT(R2.len == R1.len && memcmp(R2.log, R1.log, R1.len) == 0);
  }
  /* Output buffers of one and five bytes cut DATA spans as small reads
   * do, and change nothing else. */
  for (k = 1; k <= 5; k += 4) {
    OCAP = k;
    run(&R2, IN, INLEN, 0, 0, max, deflate);
    OCAP = sizeof OUT;
    T_EQ_INT(R2.result, R1.result);
    T_EQ_INT(R2.at, R1.at);
    T_ASSERT(R2.len == R1.len && memcmp(R2.log, R1.log, R1.len) == 0);
  }
}

#define NOLIMIT UINT64_MAX

/* The input decodes to exactly `log` with all of it used. */
#define EXPECT_LOG(max, deflate, lit)                                          \
  do {                                                                         \
    run_all((max), (deflate));                                                 \
    T_EQ_INT(R1.result, 0);                                                    \
    T_EQ_INT(R1.at, INLEN);                                                    \
    T_EQ_STR((const char *)R1.log, R1.len, (lit));                             \
  } while (0)

/* The input fails with `code`, stopping at offset `at`. */
#define EXPECT_ERR(max, deflate, code, where)                                  \
  do {                                                                         \
    run_all((max), (deflate));                                                 \
    T_EQ_INT(R1.result, -(code));                                              \
    T_EQ_INT(R1.at, (where));                                                  \
  } while (0)

#define RESET() (INLEN = 0)

/* ------------------------------------------------------------------ */
/* RFC 6455 5.7 examples                                                */

static void t_rfc_masked_hello(void) {
  static const unsigned char ex[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                     0x7f, 0x9f, 0x4d, 0x51, 0x58};
  RESET();
  addraw(ex, sizeof ex);
  EXPECT_LOG(NOLIMIT, 0, "[B1][D5:Hello][E]");
  /* Our builder makes the same bytes. */
  RESET();
  ADD(0x81, "Hello");
  T_ASSERT(INLEN == sizeof ex && memcmp(IN, ex, sizeof ex) == 0);
}

static void t_rfc_unmasked_rejected(void) {
  /* The RFC's unmasked "Hello" is a server's frame; from a client it
   * breaks RFC 6455 5.1 and fails at the byte with the MASK bit. */
  RESET();
  RAW("\x81\x05Hello");
  EXPECT_ERR(NOLIMIT, 0, 1002, 1);
}

static void t_rfc_fragmented(void) {
  RESET();
  ADD(0x01, "Hel");
  ADD(0x80, "lo");
  EXPECT_LOG(NOLIMIT, 0, "[B1][D5:Hello][E]");
}

static void t_rfc_ping_pong(void) {
  static const unsigned char pong[] = {0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                       0x7f, 0x9f, 0x4d, 0x51, 0x58};
  RESET();
  ADD(0x89, "Hello");
  addraw(pong, sizeof pong);
  EXPECT_LOG(NOLIMIT, 0, "[P5:Hello][O5:Hello]");
}

static unsigned char BIG[1 << 20];

static void fill_big(size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    BIG[i] = (unsigned char)(i * 7 + (i >> 8));
}

static void t_lengths(void) {
  static const size_t sizes[] = {0, 1, 125, 126, 127, 256, 65535, 65536, 70000};
  size_t i;

  fill_big(70000);
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    RESET();
    addf(0x82, BIG, sizes[i], LEN_MIN);
    run(&R1, IN, INLEN, 0, 0, NOLIMIT, 0);
    T_EQ_INT(R1.result, 0);
    T_EQ_INT(R1.at, INLEN);
    run(&R2, IN, INLEN, 1, 0, NOLIMIT, 0);
    T_ASSERT(R2.len == R1.len && memcmp(R2.log, R1.log, R1.len) == 0);
    if (sizes[i] > 0) {
      char head[64];
      size_t hl = (size_t)snprintf(head, sizeof head, "[B2][D%zu:", sizes[i]);
      T_ASSERT(memcmp(R1.log, head, hl) == 0);
      T_ASSERT(memcmp(R1.log + hl, BIG, sizes[i]) == 0);
    }
  }
  /* The RFC's 256-byte binary header, and the 64 KiB one. */
  RESET();
  addf(0x82, BIG, 256, LEN_MIN);
  T_ASSERT(memcmp(IN, "\x82\xfe\x01\x00", 4) == 0);
  RESET();
  addf(0x82, BIG, 65536, LEN_MIN);
  T_ASSERT(memcmp(IN, "\x82\xff\x00\x00\x00\x00\x00\x01\x00\x00", 10) == 0);
}

static void t_masks(void) {
  static const unsigned char keys[][4] = {
      {0, 0, 0, 0}, {0xff, 0xff, 0xff, 0xff}, {1, 2, 3, 4}, {0x80, 0, 0, 1}};
  size_t k, n;
  char want[128];

  /* Payloads of every length up to 40, so that the word-at-a-time loop
   * starts at every key offset once the input is split. */
  fill_big(40);
  for (k = 0; k < 4; k++)
    for (n = 1; n <= 40; n++) {
      key = keys[k];
      RESET();
      addf(0x82, BIG, n, LEN_MIN);
      key = KEY;
      snprintf(want, sizeof want, "[B2][D%zu:", n);
      run_all(NOLIMIT, 0);
      T_EQ_INT(R1.result, 0);
      T_ASSERT(memcmp(R1.log, want, strlen(want)) == 0);
      T_ASSERT(memcmp(R1.log + strlen(want), BIG, n) == 0);
    }
}

/* ------------------------------------------------------------------ */
/* Sequences                                                            */

static void t_control_between_fragments(void) {
  RESET();
  ADD(0x01, "Hel");
  ADD(0x89, "p1");
  ADD(0x00, "");
  ADD(0x8a, "");
  ADD(0x00, "l");
  ADD(0x89, "");
  ADD(0x80, "o");
  ADD(0x82, "");
  ADD(0x88, "\x03\xe8"
            "bye");
  EXPECT_LOG(NOLIMIT, 0,
             "[B1][D3:Hel][P2:p1][O0:][D1:l][P0:]"
             "[D1:o][E][B2][E][C1000:3:bye]");
}

static void t_mixed_stream_splits(void) {
  size_t i;

  fill_big(65836);
  RESET();
  ADD(0x01, "\xce\xba\xe1");
  ADD(0x89, "ping");
  ADD(0x00, "\xbd\xb9");
  ADD(0x00, "\xcf\x83\xce\xbc\xce\xb5");
  ADD(0x80, "");
  addf(0x02, BIG, 300, LEN_16);
  addf(0x80, BIG + 300, 65536, LEN_64);
  for (i = 0; i < 5; i++)
    ADD(0x81, "");
  ADD(0x8a, "pong");
  ADD(0x88, "\x0f\xa0");
  run_all(NOLIMIT, 0); /* all the ways of splitting it agree */
  T_EQ_INT(R1.result, 0);
  T_EQ_INT(R1.at, INLEN);
  {
    static const char want[] =
        "[B1][D3:\xce\xba\xe1][P4:ping]"
        "[D8:\xbd\xb9\xcf\x83\xce\xbc\xce\xb5][E][B2][D65836:";
    T_ASSERT(R1.len > sizeof want - 1);
    T_ASSERT(memcmp(R1.log, want, sizeof want - 1) == 0);
    T_ASSERT(memcmp(R1.log + sizeof want - 1, BIG, 65836) == 0);
    T_ASSERT(memcmp(R1.log + sizeof want - 1 + 65836,
                    "][E][B1][E][B1][E][B1][E][B1][E][B1][E][O4:pong]"
                    "[C4000:0:]",
                    58) == 0);
  }
}

static void t_after_close(void) {
  RESET();
  ADD(0x88, "");
  RAW("\xff\xff garbage after close is not read");
  EXPECT_LOG(NOLIMIT, 0, "[C1005:0:]");
}

static void t_empty_input(void) {
  tern__ws_decoder d;
  tern__ws_event ev;
  size_t used = 99;

  tern__ws_decoder_init(&d, NOLIMIT, 0);
  tern__ws_decoder_output(&d, OUT, OCAP);
  T_EQ_INT(tern__ws_decode(&d, WORK, 0, &used, &ev), TERN__WS_EV_NONE);
  T_EQ_INT(used, 0);
}

static void t_end_needs_no_input(void) {
  /* An empty final frame: BEGIN uses its header, END then comes from a
   * call with no bytes at all. */
  tern__ws_decoder d;
  tern__ws_event ev;
  size_t used;

  RESET();
  ADD(0x81, "");
  memcpy(WORK, IN, INLEN);
  tern__ws_decoder_init(&d, NOLIMIT, 0);
  tern__ws_decoder_output(&d, OUT, OCAP);
  T_EQ_INT(tern__ws_decode(&d, WORK, INLEN, &used, &ev), TERN__WS_EV_BEGIN);
  T_EQ_INT(used, INLEN);
  T_EQ_INT(ev.opcode, TERN__WS_OP_TEXT);
  T_EQ_INT(tern__ws_decode(&d, WORK + used, 0, &used, &ev), TERN__WS_EV_END);
  T_EQ_INT(used, 0);
  T_EQ_INT(tern__ws_decode(&d, WORK, 0, &used, &ev), TERN__WS_EV_NONE);
}

static void t_input_read_only(void) {
  /* The bytes a carrier hands over are not the codec's to write: under
   * HTTP/3 they are the QUIC stack's memory. Decoding from pages the
   * process may only read would fault at the first write; the payload
   * must arrive unmasked all the same, in a bounded output buffer. */
  static unsigned char big[3000];
  size_t i, sz, pg = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char *ro;

  for (i = 0; i < sizeof big; i++)
    big[i] = (unsigned char)(i * 7);
  RESET();
  ADD(0x01, "Hel");
  ADD(0x89, "ping");
  ADD(0x80, "lo");
  addf(0x82, big, sizeof big, LEN_MIN);
  ADD(0x88, "\x03\xe8"
            "bye");
  run(&R2, IN, INLEN, 0, 0, NOLIMIT, 0); /* from a writable copy */
  T_EQ_INT(R2.result, 0);
  T_ASSERT(R2.len > 3000);
  T_EQ_STR((const char *)R2.log, 31, "[B1][D3:Hel][P4:ping][D2:lo][E]");
  sz = (INLEN + pg - 1) / pg * pg;
  ro = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
            0);
  T_ASSERT(ro != MAP_FAILED);
  memcpy(ro, IN, INLEN);
  T_ASSERT(mprotect(ro, sz, PROT_READ) == 0);
  FROM = ro;
  for (OCAP = 7; OCAP <= sizeof OUT; OCAP = OCAP * 64) {
    run(&R1, IN, INLEN, 0, 0, NOLIMIT, 0);
    T_EQ_INT(R1.result, 0);
    T_EQ_INT(R1.at, INLEN);
    T_ASSERT(R1.len == R2.len && memcmp(R1.log, R2.log, R2.len) == 0);
    run(&R1, IN, INLEN, 1, 0, NOLIMIT, 0);
    T_ASSERT(R1.len == R2.len && memcmp(R1.log, R2.log, R2.len) == 0);
  }
  FROM = NULL;
  OCAP = sizeof OUT;
  T_ASSERT(memcmp(ro, IN, INLEN) == 0);
  munmap(ro, sz);
}

/* ------------------------------------------------------------------ */
/* Protocol errors                                                      */

static void t_err_rsv(void) {
  RESET();
  ADD(0xa1, "x"); /* RSV2 */
  EXPECT_ERR(NOLIMIT, 1, 1002, 0);
  RESET();
  ADD(0x91, "x"); /* RSV3 */
  EXPECT_ERR(NOLIMIT, 1, 1002, 0);
  RESET();
  ADD(0xc1, "x"); /* RSV1 without permessage-deflate */
  EXPECT_ERR(NOLIMIT, 0, 1002, 0);
  RESET();
  ADD(0xc1, "x"); /* with it: a compressed message */
  EXPECT_LOG(NOLIMIT, 1, "[B1z][D1:x][E]");
  RESET();
  ADD(0x41, "x"); /* RSV1 on a continuation frame */
  ADD(0xc0, "y");
  EXPECT_ERR(NOLIMIT, 1, 1002, 7);
  RESET();
  ADD(0xc9, ""); /* RSV1 on a control frame */
  EXPECT_ERR(NOLIMIT, 1, 1002, 0);
  RESET();
  ADD(0x01, "a"); /* a continuation inherits compression from BEGIN */
  ADD(0x80, "b");
  EXPECT_LOG(NOLIMIT, 1, "[B1][D2:ab][E]");
}

static void t_err_opcodes(void) {
  int op;

  for (op = 0; op < 16; op++) {
    RESET();
    addf(0x80 | op, "", 0, LEN_MIN);
    if (op == 0x0) {
      EXPECT_ERR(NOLIMIT, 0, 1002, 0); /* nothing to continue */
    } else if ((op >= 3 && op <= 7) || op >= 0xb) {
      EXPECT_ERR(NOLIMIT, 0, 1002, 0);
    } else {
      run_all(NOLIMIT, 0);
      T_EQ_INT(R1.result, 0);
    }
  }
}

static void t_err_control(void) {
  static unsigned char p[126];

  RESET();
  ADD(0x09, "x"); /* ping without FIN */
  EXPECT_ERR(NOLIMIT, 0, 1002, 0);
  RESET();
  ADD(0x08, ""); /* close without FIN */
  EXPECT_ERR(NOLIMIT, 0, 1002, 0);
  RESET();
  addf(0x89, p, 126, LEN_MIN); /* over 125 */
  EXPECT_ERR(NOLIMIT, 0, 1002, 1);
  RESET();
  addf(0x89, p, 125, LEN_MIN); /* the most allowed */
  run_all(NOLIMIT, 0);
  T_EQ_INT(R1.result, 0);
  RESET();
  addf(0x8a, p, 5, LEN_16); /* a small length in 16 bits still fails */
  EXPECT_ERR(NOLIMIT, 0, 1002, 1);
}

static void t_err_sequence(void) {
  RESET();
  ADD(0x80, "x"); /* continuation with no message */
  EXPECT_ERR(NOLIMIT, 0, 1002, 0);
  RESET();
  ADD(0x81, "a");
  ADD(0x00, "x"); /* the message was over */
  EXPECT_ERR(NOLIMIT, 0, 1002, 7);
  RESET();
  ADD(0x01, "a");
  ADD(0x81, "b"); /* a new message inside one */
  EXPECT_ERR(NOLIMIT, 0, 1002, 7);
  RESET();
  ADD(0x02, "a");
  ADD(0x89, "");
  ADD(0x02, "b");
  EXPECT_ERR(NOLIMIT, 0, 1002, 13);
}

static void t_err_length(void) {
  /* 64-bit length with its top bit set: caught at that byte. */
  RESET();
  RAW("\x82\xff\x80\x00\x00\x00\x00\x00\x00\x01");
  EXPECT_ERR(NOLIMIT, 0, 1002, 2);
  /* Not minimal: 5 in 16 bits, 125 in 16 bits, 65535 in 64 bits. */
  RESET();
  addf(0x82, BIG, 5, LEN_16);
  EXPECT_ERR(NOLIMIT, 0, 1002, 3);
  RESET();
  addf(0x82, BIG, 125, LEN_16);
  EXPECT_ERR(NOLIMIT, 0, 1002, 3);
  RESET();
  addf(0x82, BIG, 65535, LEN_64);
  EXPECT_ERR(NOLIMIT, 0, 1002, 9);
  RESET();
  addf(0x82, BIG, 0, LEN_64);
  EXPECT_ERR(NOLIMIT, 0, 1002, 9);
  /* The smallest lengths of each form are fine. */
  RESET();
  addf(0x82, BIG, 126, LEN_16);
  addf(0x82, BIG, 65536, LEN_64);
  run(&R1, IN, INLEN, 0, 0, NOLIMIT, 0);
  T_EQ_INT(R1.result, 0);
}

static void t_limit(void) {
  RESET();
  ADD(0x81, "0123456789");
  EXPECT_LOG(10, 0, "[B1][D10:0123456789][E]");
  RESET();
  ADD(0x81, "0123456789A"); /* caught at the length, before any data */
  EXPECT_ERR(10, 0, 1009, 1);
  RESET();
  ADD(0x01, "012345");
  ADD(0x89, "control frames do not count");
  ADD(0x80, "6789A");
  EXPECT_ERR(10, 0, 1009, (2 + 4 + 6) + (2 + 4 + 27) + 1);
  RESET();
  fill_big(300);
  addf(0x82, BIG, 300, LEN_MIN);
  EXPECT_ERR(299, 0, 1009, 3);
  /* Compressed messages are the inflater's to count. */
  RESET();
  addf(0xc2, BIG, 300, LEN_MIN);
  run_all(10, 1);
  T_EQ_INT(R1.result, 0);
  /* Each message starts from zero. */
  RESET();
  ADD(0x81, "0123456789");
  ADD(0x81, "0123456789");
  run_all(10, 0);
  T_EQ_INT(R1.result, 0);
}

/* ------------------------------------------------------------------ */
/* UTF-8                                                                */

static void t_utf8_split_across_frames(void) {
  /* "κόσμε", then U+1F600, cut into two frames at every byte. */
  static const char s[] = "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
                          "\xf0\x9f\x98\x80";
  size_t n = sizeof s - 1, k;
  char want[64];

  snprintf(want, sizeof want, "[B1][D%zu:%s][E]", n, s);
  for (k = 0; k <= n; k++) {
    RESET();
    addf(0x01, s, k, LEN_MIN);
    addf(0x80, s + k, n - k, LEN_MIN);
    EXPECT_LOG(NOLIMIT, 0, want);
  }
  /* One byte a frame, with a ping between each. */
  RESET();
  for (k = 0; k < n; k++) {
    addf(k == 0 ? 0x01 : 0x00, s + k, 1, LEN_MIN);
    ADD(0x89, "");
  }
  ADD(0x80, "");
  run_all(NOLIMIT, 0);
  T_EQ_INT(R1.result, 0);
}

static void t_utf8_fail_fast(void) {
  static char p[1000];

  /* The bad byte is 500 bytes into a 1000-byte frame, and only 501 bytes
   * of it have arrived: the error comes now, at the bad byte, after the
   * 500 good ones. */
  memset(p, 'a', sizeof p);
  p[500] = (char)0xff;
  RESET();
  addf(0x81, p, sizeof p, LEN_MIN);
  INLEN = 4 + 4 + 501;
  run_all(NOLIMIT, 0);
  T_EQ_INT(R1.result, -1007);
  T_EQ_INT(R1.at, 8 + 500);
  T_ASSERT(memcmp(R1.log, "[B1][D500:aaa", 13) == 0);
  /* A code point left open by one frame and broken in the next: the
   * error is at the first byte of the second frame's payload. */
  RESET();
  ADD(0x01, "ab\xe2\x82");
  ADD(0x80, "A");
  EXPECT_ERR(NOLIMIT, 0, 1007, 10 + 6);
  /* Overlong and surrogate forms fail at the second byte. */
  RESET();
  ADD(0x81, "ok\xe0\x80\x80");
  EXPECT_ERR(NOLIMIT, 0, 1007, 6 + 3);
  RESET();
  ADD(0x81, "\xed\xa0\x80");
  EXPECT_ERR(NOLIMIT, 0, 1007, 6 + 1);
}

static void t_utf8_end_inside(void) {
  RESET();
  ADD(0x81, "ab\xce");
  EXPECT_ERR(NOLIMIT, 0, 1007, 9);
  RESET();
  ADD(0x01, "ab\xf0\x9f\x98");
  ADD(0x80, ""); /* the message ends with an empty frame */
  EXPECT_ERR(NOLIMIT, 0, 1007, 11 + 6);
  RESET();
  ADD(0x82, "\xff\xfe\xce"); /* binary is not text */
  EXPECT_LOG(NOLIMIT, 0, "[B2][D3:\xff\xfe\xce][E]");
  RESET();
  ADD(0xc1, "\xff"); /* compressed text is checked after inflation */
  EXPECT_LOG(NOLIMIT, 1, "[B1z][D1:\xff][E]");
}

static void t_utf8_table(void) {
  static const struct {
    const char *s;
    int bad_at; /* -1: valid and complete */
  } cases[] = {
      {"", -1},
      {"\x00\x7f", -1},
      {"\xc2\x80", -1},
      {"\xdf\xbf", -1},
      {"\xe0\xa0\x80", -1},
      {"\xed\x9f\xbf", -1},
      {"\xee\x80\x80", -1},
      {"\xef\xbf\xbf", -1},
      {"\xf0\x90\x80\x80", -1},
      {"\xf4\x8f\xbf\xbf", -1},
      {"\xc0\x80", 0},
      {"\xc1\xbf", 0},
      {"\x80", 0},
      {"\xbf", 0},
      {"\xf5\x80\x80\x80", 0},
      {"\xff", 0},
      {"\xe0\x80\x80", 1},
      {"\xe0\x9f\xbf", 1},
      {"\xed\xa0\x80", 1},
      {"\xed\xbf\xbf", 1},
      {"\xf0\x80\x80\x80", 1},
      {"\xf0\x8f\xbf\xbf", 1},
      {"\xf4\x90\x80\x80", 1},
      {"\xc2\x41", 1},
      {"\xe1\x80\x41", 2},
      {"\xf1\x80\x80\xc0", 3},
      {"abcdefgh\xc0", 8},
      {"abcdefghijklmno\x80", 15},
  };
  size_t i, n, r;
  unsigned st;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    n = i == 1 ? 2 : strlen(cases[i].s);
    st = TERN__WS_UTF8_OK;
    r = tern__ws_utf8_scan(&st, (const unsigned char *)cases[i].s, n);
    if (cases[i].bad_at < 0) {
      T_EQ_INT(r, n);
      T_EQ_INT(st, TERN__WS_UTF8_OK);
    } else {
      T_EQ_INT(r, cases[i].bad_at);
      /* Failure sticks. */
      T_EQ_INT(tern__ws_utf8_scan(&st, (const unsigned char *)"a", 1), 0);
    }
  }
  /* Incomplete is not failed. */
  st = TERN__WS_UTF8_OK;
  T_EQ_INT(tern__ws_utf8_scan(&st, (const unsigned char *)"\xf0\x9f", 2), 2);
  T_ASSERT(st != TERN__WS_UTF8_OK);
  T_EQ_INT(tern__ws_utf8_scan(&st, (const unsigned char *)"\x98\x80", 2), 2);
  T_EQ_INT(st, TERN__WS_UTF8_OK);
}

static int dfa_utf8(const unsigned char *p, size_t n) {
  unsigned st = TERN__WS_UTF8_OK;
  return tern__ws_utf8_scan(&st, p, n) == n && st == TERN__WS_UTF8_OK;
}

static void t_utf8_exhaustive(void) {
  static const unsigned char tails[] = {0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90,
                                        0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xe0,
                                        0xed, 0xf0, 0xf4, 0xf5, 0xff};
  unsigned char b[4];
  unsigned a, c, d, e;

  /* Every sequence of one, two and three bytes. */
  for (a = 0; a < 256; a++) {
    b[0] = (unsigned char)a;
    T_EQ_INT(dfa_utf8(b, 1), ref_utf8(b, 1));
    for (c = 0; c < 256; c++) {
      b[1] = (unsigned char)c;
      T_EQ_INT(dfa_utf8(b, 2), ref_utf8(b, 2));
      if (a < 0xc0)
        continue; /* a one-byte start: covered by shorter sequences */
      for (d = 0; d < 256; d++) {
        b[2] = (unsigned char)d;
        if (dfa_utf8(b, 3) != ref_utf8(b, 3))
          T_FAIL("%02x %02x %02x", a, c, d);
      }
    }
  }
  /* Four bytes: every lead and second byte, sampled third and fourth. */
  for (a = 0xf0; a < 0x100; a++)
    for (c = 0; c < 256; c++)
      for (d = 0; d < sizeof tails; d++)
        for (e = 0; e < sizeof tails; e++) {
          b[0] = (unsigned char)a;
          b[1] = (unsigned char)c;
          b[2] = tails[d];
          b[3] = tails[e];
          if (dfa_utf8(b, 4) != ref_utf8(b, 4))
            T_FAIL("%02x %02x %02x %02x", a, c, b[2], b[3]);
        }
}

/* ------------------------------------------------------------------ */
/* Close frames                                                         */

static void close_with(int code, const char *reason, size_t rl) {
  unsigned char p[128];

  p[0] = (unsigned char)(code >> 8);
  p[1] = (unsigned char)code;
  memcpy(p + 2, reason, rl);
  RESET();
  addf(0x88, p, 2 + rl, LEN_MIN);
}

static void t_close_codes(void) {
  static const int valid[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009,
                              1010, 1011, 3000, 3999, 4000, 4999};
  static const int invalid[] = {0,    1,    999,  1004, 1005, 1006,
                                1012, 1013, 1014, 1015, 1016, 1100,
                                2000, 2999, 5000, 65535};
  size_t i;
  int code, count = 0;
  char want[32];

  for (i = 0; i < sizeof valid / sizeof valid[0]; i++) {
    close_with(valid[i], "", 0);
    snprintf(want, sizeof want, "[C%d:0:]", valid[i]);
    EXPECT_LOG(NOLIMIT, 0, want);
  }
  for (i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    close_with(invalid[i], "why", 3);
    EXPECT_ERR(NOLIMIT, 0, 1002, 7); /* at the code's second byte */
    T_ASSERT(!tern__ws_close_code_valid(invalid[i]));
  }
  for (code = 0; code < 65536; code++)
    count += tern__ws_close_code_valid(code);
  T_EQ_INT(count, 4 + 5 + 2000);
}

static void t_close_payloads(void) {
  RESET();
  ADD(0x88, "");
  EXPECT_LOG(NOLIMIT, 0, "[C1005:0:]");
  RESET();
  ADD(0x88, "\x03"); /* one byte: caught at the length */
  EXPECT_ERR(NOLIMIT, 0, 1002, 1);
  close_with(1001, "going \xce\xba", 8);
  EXPECT_LOG(NOLIMIT, 0, "[C1001:8:going \xce\xba]");
  close_with(1000, "ab\xff", 3);
  EXPECT_ERR(NOLIMIT, 0, 1007, 6 + 4);
  close_with(1000, "ab\xce", 3); /* ends inside a code point */
  EXPECT_ERR(NOLIMIT, 0, 1007, 6 + 5);
  /* Close in the middle of a fragmented message. */
  RESET();
  ADD(0x01, "part");
  ADD(0x88, "\x03\xe8");
  EXPECT_LOG(NOLIMIT, 0, "[B1][D4:part][C1000:0:]");
}

/* ------------------------------------------------------------------ */
/* Encoder                                                              */

static void t_encoder_headers(void) {
  unsigned char h[TERN__WS_MAX_HEADER];

  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_TEXT, 1, 0, 5), 2);
  T_ASSERT(memcmp(h, "\x81\x05", 2) == 0); /* RFC 6455 5.7 */
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_TEXT, 0, 0, 3), 2);
  T_ASSERT(memcmp(h, "\x01\x03", 2) == 0);
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_CONT, 1, 0, 2), 2);
  T_ASSERT(memcmp(h, "\x80\x02", 2) == 0);
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_BINARY, 1, 0, 125), 2);
  T_ASSERT(memcmp(h, "\x82\x7d", 2) == 0);
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_BINARY, 1, 0, 126), 4);
  T_ASSERT(memcmp(h, "\x82\x7e\x00\x7e", 4) == 0);
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_BINARY, 1, 0, 256), 4);
  T_ASSERT(memcmp(h, "\x82\x7e\x01\x00", 4) == 0);
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_BINARY, 1, 0, 65535), 4);
  T_ASSERT(memcmp(h, "\x82\x7e\xff\xff", 4) == 0);
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_BINARY, 1, 0, 65536), 10);
  T_ASSERT(memcmp(h, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10) == 0);
  T_EQ_INT(tern__ws_frame_header(h, TERN__WS_OP_TEXT, 1, 1, (uint64_t)1 << 40),
           10);
  T_ASSERT(memcmp(h, "\xc1\x7f\x00\x00\x01\x00\x00\x00\x00\x00", 10) == 0);
}

static void t_encoder_control(void) {
  unsigned char f[TERN__WS_MAX_CONTROL_FRAME];
  char reason[200];

  T_EQ_INT(tern__ws_control_frame(f, TERN__WS_OP_PING,
                                  (const unsigned char *)"Hello", 5),
           7);
  T_ASSERT(memcmp(f, "\x89\x05Hello", 7) == 0); /* RFC 6455 5.7 */
  T_EQ_INT(tern__ws_pong_frame(f, (const unsigned char *)"Hello", 5), 7);
  T_ASSERT(memcmp(f, "\x8a\x05Hello", 7) == 0);
  T_EQ_INT(tern__ws_pong_frame(f, NULL, 0), 2);
  T_ASSERT(memcmp(f, "\x8a\x00", 2) == 0);
  T_EQ_INT(
      tern__ws_control_frame(f, TERN__WS_OP_PING, (unsigned char *)BIG, 125),
      127);
  T_EQ_INT(
      tern__ws_control_frame(f, TERN__WS_OP_PING, (unsigned char *)BIG, 126),
      0);
  T_EQ_INT(tern__ws_control_frame(f, TERN__WS_OP_TEXT, NULL, 0), 0);
  T_EQ_INT(tern__ws_control_frame(f, 0xb, NULL, 0), 0);

  T_EQ_INT(tern__ws_close_frame(f, 0, "ignored", 7), 2);
  T_ASSERT(memcmp(f, "\x88\x00", 2) == 0);
  T_EQ_INT(tern__ws_close_frame(f, 1000, NULL, 0), 4);
  T_ASSERT(memcmp(f, "\x88\x02\x03\xe8", 4) == 0);
  T_EQ_INT(tern__ws_close_frame(f, 1009, "too big", 7), 11);
  T_ASSERT(memcmp(f, "\x88\x09\x03\xf1too big", 11) == 0);
  T_EQ_INT(tern__ws_close_frame(f, 1005, NULL, 0), 0);
  T_EQ_INT(tern__ws_close_frame(f, 1006, NULL, 0), 0);
  /* A long reason is cut to 123 bytes... */
  memset(reason, 'a', sizeof reason);
  T_EQ_INT(tern__ws_close_frame(f, 1000, reason, sizeof reason), 127);
  T_EQ_INT(f[1], 125);
  /* ...but not inside a code point: "é" at 122-123 is dropped whole. */
  memcpy(reason + 122, "\xc3\xa9", 2);
  T_EQ_INT(tern__ws_close_frame(f, 1000, reason, sizeof reason), 126);
  T_EQ_INT(f[1], 124);
  T_EQ_INT(f[125], 'a');
}

/* Encode server frames, mask them as a client would and decode them. */
static void t_encoder_round_trip(void) {
  static const uint64_t sizes[] = {0, 5, 125, 126, 65535, 65536, 100000};
  unsigned char h[TERN__WS_MAX_HEADER];
  size_t i, hl, k;

  fill_big(100000);
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    hl = tern__ws_frame_header(h, TERN__WS_OP_BINARY, 1, 0, sizes[i]);
    RESET();
    h[1] |= 0x80;
    addraw(h, hl);
    addraw(KEY, 4);
    for (k = 0; k < sizes[i]; k++)
      IN[INLEN + k] = BIG[k] ^ KEY[k & 3];
    INLEN += (size_t)sizes[i];
    run(&R1, IN, INLEN, 0, 0, NOLIMIT, 0);
    T_EQ_INT(R1.result, 0);
    T_EQ_INT(R1.at, INLEN);
  }
}

/* ------------------------------------------------------------------ */
/* Negotiation                                                          */

static tern__ws_deflate_policy POL;
static tern__ws_deflate_params PAR;
static char RESP[TERN__WS_DEFLATE_RESPONSE_MAX];
static size_t RESPLEN;

static int neg(const char *v) {
  memset(&PAR, 0x55, sizeof PAR);
  memset(RESP, 0, sizeof RESP);
  RESPLEN = 0;
  return tern__ws_deflate_negotiate(v, strlen(v), &POL, &PAR, RESP, &RESPLEN);
}

#define ACCEPT(v, resp)                                                        \
  do {                                                                         \
    T_EQ_INT(neg(v), 1);                                                       \
    T_EQ_STR(RESP, RESPLEN, (resp));                                           \
    T_EQ_INT(strlen(RESP), RESPLEN);                                           \
  } while (0)
#define DECLINE(v) T_EQ_INT(neg(v), 0)

static void t_neg_plain(void) {
  tern__ws_deflate_policy_init(&POL);
  ACCEPT("permessage-deflate", "permessage-deflate");
  T_EQ_INT(PAR.server_no_context_takeover, 0);
  T_EQ_INT(PAR.client_no_context_takeover, 0);
  T_EQ_INT(PAR.server_window_bits, 15);
  T_EQ_INT(PAR.client_window_bits, 15);
  T_EQ_INT(PAR.mem_level, 8);
  T_EQ_INT(PAR.level, -1);
  ACCEPT("  PerMessage-Deflate  ", "permessage-deflate");
  DECLINE("");
  DECLINE("x-webkit-deflate-frame");
  DECLINE("permessage-deflat");
  DECLINE("permessage-deflatex");
  POL.enable = 0;
  DECLINE("permessage-deflate");
}

static void t_neg_params(void) {
  tern__ws_deflate_policy_init(&POL);
  ACCEPT("permessage-deflate; server_no_context_takeover; "
         "client_no_context_takeover; server_max_window_bits=10; "
         "client_max_window_bits=12",
         "permessage-deflate; server_no_context_takeover; "
         "client_no_context_takeover; server_max_window_bits=10; "
         "client_max_window_bits=12");
  T_EQ_INT(PAR.server_no_context_takeover, 1);
  T_EQ_INT(PAR.client_no_context_takeover, 1);
  T_EQ_INT(PAR.server_window_bits, 10);
  T_EQ_INT(PAR.client_window_bits, 12);
  /* Any case, tight or loose spacing, quoted values. */
  ACCEPT("PERMESSAGE-DEFLATE;Server_No_Context_Takeover;"
         "SERVER_MAX_WINDOW_BITS = \"9\"",
         "permessage-deflate; server_no_context_takeover; "
         "server_max_window_bits=9");
  T_EQ_INT(PAR.server_window_bits, 9);
  ACCEPT("permessage-deflate; client_max_window_bits=\"1\\1\"",
         "permessage-deflate; client_max_window_bits=11");
  T_EQ_INT(PAR.client_window_bits, 11);
  ACCEPT("permessage-deflate;\tserver_max_window_bits=15\t",
         "permessage-deflate; server_max_window_bits=15");
  T_EQ_INT(PAR.server_window_bits, 15);
}

static void t_neg_client_window(void) {
  tern__ws_deflate_policy_init(&POL);
  /* Without a value, and nothing to limit: nothing to say. */
  ACCEPT("permessage-deflate; client_max_window_bits", "permessage-deflate");
  T_EQ_INT(PAR.client_window_bits, 15);
  /* The policy limits the client when the client says it can be. */
  POL.client_max_window_bits = 10;
  ACCEPT("permessage-deflate; client_max_window_bits",
         "permessage-deflate; client_max_window_bits=10");
  T_EQ_INT(PAR.client_window_bits, 10);
  ACCEPT("permessage-deflate; client_max_window_bits=9",
         "permessage-deflate; client_max_window_bits=9");
  T_EQ_INT(PAR.client_window_bits, 9);
  ACCEPT("permessage-deflate; client_max_window_bits=8",
         "permessage-deflate; client_max_window_bits=8");
  T_EQ_INT(PAR.client_window_bits, 8);
  /* ...and cannot when it does not: the inflater must take 15. */
  ACCEPT("permessage-deflate", "permessage-deflate");
  T_EQ_INT(PAR.client_window_bits, 15);
  POL.client_max_window_bits = 2; /* clamped to 8 */
  ACCEPT("permessage-deflate; client_max_window_bits",
         "permessage-deflate; client_max_window_bits=8");
}

static void t_neg_server_window(void) {
  tern__ws_deflate_policy_init(&POL);
  POL.server_max_window_bits = 10;
  /* Not offered: used quietly (any smaller window can be read). */
  ACCEPT("permessage-deflate", "permessage-deflate");
  T_EQ_INT(PAR.server_window_bits, 10);
  ACCEPT("permessage-deflate; server_max_window_bits=12",
         "permessage-deflate; server_max_window_bits=10");
  ACCEPT("permessage-deflate; server_max_window_bits=9",
         "permessage-deflate; server_max_window_bits=9");
  T_EQ_INT(PAR.server_window_bits, 9);
  /* 8 cannot be honoured with zlib: declined, and the next one taken. */
  DECLINE("permessage-deflate; server_max_window_bits=8");
  ACCEPT("permessage-deflate; server_max_window_bits=8, permessage-deflate",
         "permessage-deflate");
  POL.server_max_window_bits = 99; /* clamped to 15 */
  ACCEPT("permessage-deflate", "permessage-deflate");
  T_EQ_INT(PAR.server_window_bits, 15);
  POL.server_max_window_bits = 8; /* clamped to 9 */
  ACCEPT("permessage-deflate", "permessage-deflate");
  T_EQ_INT(PAR.server_window_bits, 9);
}

static void t_neg_policy(void) {
  tern__ws_deflate_policy_init(&POL);
  POL.client_no_context_takeover = 1;
  POL.mem_level = 4;
  POL.level = 3;
  ACCEPT("permessage-deflate",
         "permessage-deflate; client_no_context_takeover");
  T_EQ_INT(PAR.client_no_context_takeover, 1);
  T_EQ_INT(PAR.mem_level, 4);
  T_EQ_INT(PAR.level, 3);
  POL.mem_level = 0;
  POL.level = 12;
  ACCEPT("permessage-deflate",
         "permessage-deflate; client_no_context_takeover");
  T_EQ_INT(PAR.mem_level, 1);
  T_EQ_INT(PAR.level, 9);
}

static void t_neg_bad_offers(void) {
  static const char *bad[] = {
      "permessage-deflate; server_max_window_bits",
      "permessage-deflate; server_max_window_bits=7",
      "permessage-deflate; server_max_window_bits=16",
      "permessage-deflate; server_max_window_bits=08",
      "permessage-deflate; server_max_window_bits=+9",
      "permessage-deflate; server_max_window_bits=9a",
      "permessage-deflate; server_max_window_bits=\"\"",
      "permessage-deflate; server_max_window_bits=\"1 0\"",
      "permessage-deflate; server_max_window_bits=100000000000000000009",
      "permessage-deflate; client_max_window_bits=0",
      "permessage-deflate; client_max_window_bits=16",
      "permessage-deflate; server_no_context_takeover=1",
      "permessage-deflate; client_no_context_takeover=\"\"",
      "permessage-deflate; server_no_context_takeover; "
      "server_no_context_takeover",
      "permessage-deflate; client_no_context_takeover; "
      "Client_No_Context_Takeover",
      "permessage-deflate; server_max_window_bits=10; "
      "server_max_window_bits=10",
      "permessage-deflate; client_max_window_bits; client_max_window_bits=9",
      "permessage-deflate; unknown",
      "permessage-deflate; unknown=1",
      "permessage-deflate; x-server_max_window_bits=9",
  };
  char buf[256];
  size_t i;

  tern__ws_deflate_policy_init(&POL);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    DECLINE(bad[i]);
    /* Declining one offer moves on to the next. */
    snprintf(buf, sizeof buf,
             "%s, permessage-deflate; "
             "server_no_context_takeover",
             bad[i]);
    ACCEPT(buf, "permessage-deflate; server_no_context_takeover");
  }
  /* The first acceptable offer wins, later ones are not read. */
  ACCEPT("foo; bar=\"a,b\", permessage-deflate; server_max_window_bits=11, "
         "permessage-deflate",
         "permessage-deflate; server_max_window_bits=11");
  ACCEPT("permessage-deflate, permessage-deflate; oops=", "permessage-deflate");
}

static void t_neg_syntax(void) {
  static const char *bad[] = {
      ";",
      "permessage-deflate;",
      "permessage-deflate; ",
      "permessage-deflate;; server_no_context_takeover",
      "permessage-deflate; =1",
      "permessage-deflate; server_max_window_bits=",
      "permessage-deflate; server_max_window_bits=\"10",
      "permessage-deflate; server_max_window_bits=\"10\\",
      "permessage-deflate server_no_context_takeover",
      "permessage-deflate; a=b c",
      "\"permessage-deflate\"",
      "foo; x=\"\x01\", permessage-deflate",
  };
  size_t i;

  tern__ws_deflate_policy_init(&POL);
  /* A malformed list stops the negotiation where it breaks. */
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
    DECLINE(bad[i]);
  ACCEPT(", ,permessage-deflate,,", "permessage-deflate");
  ACCEPT("foo;a=\"x\\\"y\";b, permessage-deflate", "permessage-deflate");
}

/* ------------------------------------------------------------------ */
/* Deflate and inflate                                                  */

/* Sink gathering output into a buffer. */
typedef struct {
  unsigned char *p;
  size_t len, cap, calls;
} sinkbuf;

static int sink_cat(void *user, const unsigned char *p, size_t n) {
  sinkbuf *s = user;

  T_ASSERT(n > 0 && n <= TERN__WS_ZCHUNK);
  T_ASSERT(s->len + n <= s->cap);
  memcpy(s->p + s->len, p, n);
  s->len += n;
  s->calls++;
  return 0;
}

static unsigned char ZBUF[1 << 21], OBUF[1 << 21];

static void params(int snct, int cnct, int sbits, int cbits) {
  PAR.server_no_context_takeover = snct;
  PAR.client_no_context_takeover = cnct;
  PAR.server_window_bits = sbits;
  PAR.client_window_bits = cbits;
  PAR.mem_level = 8;
  PAR.level = -1;
}

/* Inflate one message of n bytes from p, fed `step` bytes at a time (0:
 * at once), into OBUF. Returns the result; *out the length. */
static int inflate_msg(tern__ws_inflater *f, const unsigned char *p, size_t n,
                       size_t step, uint64_t limit, int text, size_t *out) {
  sinkbuf s = {OBUF, 0, sizeof OBUF, 0};
  size_t pos = 0, k;
  int r = 0;

  tern__ws_inflate_begin(f, limit, text);
  while (pos < n && r == 0) {
    k = step == 0 || n - pos < step ? n - pos : step;
    r = tern__ws_inflate(f, p + pos, k, sink_cat, &s);
    pos += k;
  }
  if (r == 0)
    r = tern__ws_inflate_end(f, sink_cat, &s);
  *out = s.len;
  return r;
}

/* Inflate a message whole and byte by byte (with fresh inflaters) and
 * check it gives `want`. */
static void inflate_expect(const unsigned char *p, size_t n, const char *want) {
  tern__ws_inflater f;
  size_t got, step;

  params(0, 0, 15, 15);
  for (step = 0; step < 2; step++) {
    T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
    T_EQ_INT(inflate_msg(&f, p, n, step, NOLIMIT, 1, &got), 0);
    T_EQ_STR((const char *)OBUF, got, want);
    tern__ws_inflater_free(&f);
  }
}

static void t_inflate_rfc7692(void) {
  /* 7.2.3.1: one compressed block. */
  inflate_expect((const unsigned char *)"\xf2\x48\xcd\xc9\xc9\x07\x00", 7,
                 "Hello");
  /* 7.2.3.3: a block with no compression. */
  inflate_expect(
      (const unsigned char *)"\x00\x05\x00\xfa\xff\x48\x65\x6c\x6c\x6f\x00", 11,
      "Hello");
  /* 7.2.3.4: a final block, then an empty stored block's header. */
  inflate_expect((const unsigned char *)"\xf3\x48\xcd\xc9\xc9\x07\x00\x00", 8,
                 "Hello");
  /* 7.2.3.5: two blocks in one message. */
  inflate_expect((const unsigned char *)"\xf2\x48\x05\x00\x00\x00\xff\xff"
                                        "\xca\xc9\xc9\x07\x00",
                 13, "Hello");
}

static void t_inflate_shared_window(void) {
  /* 7.2.3.2: the second "Hello" is a back-reference into the first. */
  static const unsigned char m1[] = {0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00};
  static const unsigned char m2[] = {0xf2, 0x00, 0x11, 0x00, 0x00};
  static const unsigned char fin[] = {0xf3, 0x48, 0xcd, 0xc9,
                                      0xc9, 0x07, 0x00, 0x00};
  tern__ws_inflater f;
  size_t got;

  params(0, 0, 15, 15);
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, m1, sizeof m1, 0, NOLIMIT, 1, &got), 0);
  T_EQ_STR((const char *)OBUF, got, "Hello");
  T_EQ_INT(inflate_msg(&f, m2, sizeof m2, 1, NOLIMIT, 1, &got), 0);
  T_EQ_STR((const char *)OBUF, got, "Hello");
  /* The window survives a final block too (RFC 7692 7.2.3.4 then
   * 7.2.3.2's back-reference). */
  T_EQ_INT(inflate_msg(&f, fin, sizeof fin, 0, NOLIMIT, 1, &got), 0);
  T_EQ_STR((const char *)OBUF, got, "Hello");
  T_EQ_INT(inflate_msg(&f, m2, sizeof m2, 0, NOLIMIT, 1, &got), 0);
  T_EQ_STR((const char *)OBUF, got, "Hello");
  tern__ws_inflater_free(&f);

  /* With client_no_context_takeover the window is gone: the reference
   * reaches too far back and the data is invalid. */
  params(0, 1, 15, 15);
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, m1, sizeof m1, 0, NOLIMIT, 1, &got), 0);
  T_EQ_INT(inflate_msg(&f, m2, sizeof m2, 0, NOLIMIT, 1, &got), -1007);
  tern__ws_inflater_free(&f);
}

/* A raw zlib stream of our own, to make messages that end with a final
 * block, as some senders do. */
static size_t zfinal(const char *dict, const char *text, unsigned char *out) {
  z_stream z;
  size_t n;

  memset(&z, 0, sizeof z);
  T_EQ_INT(deflateInit2(&z, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  if (dict != NULL)
    T_EQ_INT(deflateSetDictionary(&z, (const Bytef *)dict, (uInt)strlen(dict)),
             Z_OK);
  z.next_in = (Bytef *)(uintptr_t)text;
  z.avail_in = (uInt)strlen(text);
  z.next_out = out;
  z.avail_out = 4096;
  T_EQ_INT(deflate(&z, Z_FINISH), Z_STREAM_END);
  n = 4096 - z.avail_out;
  deflateEnd(&z);
  return n;
}

static void t_inflate_final_blocks(void) {
  static const char t1[] = "the quick brown fox jumps over the lazy dog; ";
  tern__ws_inflater f;
  unsigned char msg[8192];
  size_t n, got, step;

  for (step = 0; step < 3; step++) {
    params(0, 0, 15, 15);
    T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
    /* Message 1: a whole stream with a final block, and nothing after. */
    n = zfinal(NULL, t1, msg);
    T_EQ_INT(inflate_msg(&f, msg, n, step, NOLIMIT, 1, &got), 0);
    T_EQ_STR((const char *)OBUF, got, t1);
    /* Message 2: two streams, each ending in a final block, the second
     * referring back into the window, then an empty stored block. */
    n = zfinal(t1, t1, msg);
    n += zfinal(t1, "the lazy dog", msg + n);
    msg[n++] = 0x00;
    T_ASSERT(n < 40); /* back-references, not literals */
    T_EQ_INT(inflate_msg(&f, msg, n, step, NOLIMIT, 1, &got), 0);
    T_EQ_STR((const char *)OBUF, got,
             "the quick brown fox jumps over the lazy dog; the lazy dog");
    /* Message 3: the next message still sees the window, which now
     * holds everything inflated so far. */
    n = zfinal("the quick brown fox jumps over the lazy dog; "
               "the quick brown fox jumps over the lazy dog; the lazy dog",
               "quick brown", msg);
    T_EQ_INT(inflate_msg(&f, msg, n, step, NOLIMIT, 1, &got), 0);
    T_EQ_STR((const char *)OBUF, got, "quick brown");
    tern__ws_inflater_free(&f);
  }
}

static void t_inflate_corrupt(void) {
  tern__ws_inflater f;
  size_t got;

  params(0, 0, 15, 15);
  /* A reserved block type. */
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, (const unsigned char *)"\xff\xff\xff", 3, 0, NOLIMIT,
                       0, &got),
           -1007);
  tern__ws_inflater_free(&f);
  /* Cut short: half of 7.2.3.1. */
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, (const unsigned char *)"\xf2\x48\xcd", 3, 0, NOLIMIT,
                       0, &got),
           -1007);
  tern__ws_inflater_free(&f);
  /* Bytes left over after the restored marker. */
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, (const unsigned char *)"\xf2\x48\xcd\xc9\xc9\x07", 6,
                       0, NOLIMIT, 0, &got),
           -1007);
  tern__ws_inflater_free(&f);
  /* An empty message is fine and delivers nothing. */
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, NULL, 0, 0, NOLIMIT, 1, &got), 0);
  T_EQ_INT(got, 0);
  /* ...and so is the single 0x00 of RFC 7692 7.2.3.6's empty payload. */
  T_EQ_INT(inflate_msg(&f, (const unsigned char *)"", 1, 0, NOLIMIT, 1, &got),
           0);
  T_EQ_INT(got, 0);
  tern__ws_inflater_free(&f);
}

/* Deflate a message (in pieces of `piece` bytes, 0: at once) into ZBUF. */
static size_t deflate_msg(tern__ws_deflater *d, const unsigned char *p,
                          size_t n, size_t piece) {
  sinkbuf s = {ZBUF, 0, sizeof ZBUF, 0};
  size_t pos = 0, k;

  do {
    k = piece == 0 || n - pos < piece ? n - pos : piece;
    T_EQ_INT(tern__ws_deflate(d, p + pos, k, pos + k == n, sink_cat, &s), 0);
    pos += k;
  } while (pos < n);
  return s.len;
}

/* A client that offered a small window but reaches past it: zlib would
 * take such a distance when the match lands in output of the same call
 * and refuse it otherwise, so its verdict followed how the message was
 * split into reads (found by fuzz_ws). The inflater reads with the full
 * window: the same message inflates the same, whole or byte by byte. A
 * distance past everything written so far is refused at every split. */
static void t_inflate_window_overreach(void) {
  static unsigned char msg[3000];
  tern__ws_deflater d;
  tern__ws_inflater f;
  size_t i, z, got, step;
  unsigned seed = 7;

  for (i = 0; i < 1000; i++) {
    seed = seed * 1103515245u + 12345u;
    msg[i] = (unsigned char)(seed >> 16);
  }
  for (; i < sizeof msg; i++)
    msg[i] = msg[i - 1000]; /* matches 1000 bytes back, past 256 */
  params(0, 0, 15, 15);
  T_EQ_INT(tern__ws_deflater_init(&d, &PAR, NULL), 0);
  z = deflate_msg(&d, msg, sizeof msg, 0);
  tern__ws_deflater_free(&d);
  T_ASSERT(z < 1500); /* the repeats were matched, not stored */
  params(0, 0, 15, 8);
  for (step = 0; step < 3; step++) {
    T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
    T_EQ_INT(inflate_msg(&f, ZBUF, z, step == 2 ? 7 : step, NOLIMIT, 0, &got),
             0);
    T_EQ_INT(got, sizeof msg);
    T_ASSERT(memcmp(OBUF, msg, sizeof msg) == 0);
    tern__ws_inflater_free(&f);
  }
  /* Fixed Huffman: literal 'a', then length 3 at distance 1 ("aaaa"),
   * and the same at distance 2, one byte before the start of the
   * context. */
  for (step = 0; step < 2; step++) {
    T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
    T_EQ_INT(inflate_msg(&f, (const unsigned char *)"\x4a\x04\x02\x00\x00", 5,
                         step, NOLIMIT, 0, &got),
             0);
    T_EQ_STR((const char *)OBUF, got, "aaaa");
    tern__ws_inflater_free(&f);
    T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
    T_EQ_INT(inflate_msg(&f, (const unsigned char *)"\x4a\x04\x42\x00\x00", 5,
                         step, NOLIMIT, 0, &got),
             -1007);
    tern__ws_inflater_free(&f);
  }
}

static void make_text(unsigned char *p, size_t n, unsigned seed) {
  static const char *words[] = {"lorem ", "ipsum ", "κόσμε ", "dolor ",
                                "€ ",     "sit ",   "😀 ",     "amet\n"};
  size_t i = 0, w;

  while (i < n) {
    seed = seed * 1103515245u + 12345u;
    w = strlen(words[(seed >> 16) & 7]);
    if (i + w > n) {
      memset(p + i, 'x', n - i);
      break;
    }
    memcpy(p + i, words[(seed >> 16) & 7], w);
    i += w;
  }
}

static void t_round_trip(void) {
  static const size_t sizes[] = {0, 1,    0,    5,      100,    8191,
                                 0, 8192, 8193, 100000, 1000000};
  static const int bits[] = {9, 12, 15};
  tern__ws_deflater d;
  tern__ws_inflater f;
  size_t i, b, z, got, piece;
  int snct;

  for (b = 0; b < 3; b++)
    for (snct = 0; snct < 2; snct++) {
      params(snct, snct, bits[b], bits[b]);
      PAR.mem_level = 1 + (int)b * 4;
      T_EQ_INT(tern__ws_deflater_init(&d, &PAR, NULL), 0);
      T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
      for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        make_text(BIG, sizes[i], (unsigned)i);
        piece = i % 3 == 0 ? 0 : i * 977;
        z = deflate_msg(&d, BIG, sizes[i], piece);
        T_ASSERT(z >= 1);
        T_EQ_INT(inflate_msg(&f, ZBUF, z, i % 2 ? 1000 : 0, NOLIMIT, 1, &got),
                 0);
        T_EQ_INT(got, sizes[i]);
        T_ASSERT(memcmp(OBUF, BIG, got) == 0);
      }
      tern__ws_deflater_free(&d);
      tern__ws_inflater_free(&f);
    }
}

static void t_deflate_rfc_and_context(void) {
  tern__ws_deflater d;
  size_t z1, z2;
  unsigned char first[64];

  /* Context takeover: the second "Hello" is a back-reference, exactly as
   * in RFC 7692 7.2.3.2. */
  params(0, 0, 15, 15);
  T_EQ_INT(tern__ws_deflater_init(&d, &PAR, NULL), 0);
  z1 = deflate_msg(&d, (const unsigned char *)"Hello", 5, 0);
  T_EQ_INT(z1, 7);
  T_ASSERT(memcmp(ZBUF, "\xf2\x48\xcd\xc9\xc9\x07\x00", 7) == 0);
  z2 = deflate_msg(&d, (const unsigned char *)"Hello", 5, 0);
  T_EQ_INT(z2, 5);
  T_ASSERT(memcmp(ZBUF, "\xf2\x00\x11\x00\x00", 5) == 0);
  /* The empty message is the single 0x00 of RFC 7692 7.2.3.6. */
  z2 = deflate_msg(&d, (const unsigned char *)"", 0, 0);
  T_EQ_INT(z2, 1);
  T_EQ_INT(ZBUF[0], 0);
  tern__ws_deflater_free(&d);

  /* server_no_context_takeover: every message stands alone. */
  params(1, 0, 15, 15);
  T_EQ_INT(tern__ws_deflater_init(&d, &PAR, NULL), 0);
  z1 = deflate_msg(&d, (const unsigned char *)"Hello", 5, 0);
  memcpy(first, ZBUF, z1);
  z2 = deflate_msg(&d, (const unsigned char *)"Hello", 5, 0);
  T_EQ_INT(z2, z1);
  T_ASSERT(memcmp(first, ZBUF, z1) == 0);
  tern__ws_deflater_free(&d);
}

static int sink_stop(void *user, const unsigned char *p, size_t n) {
  (void)user;
  (void)p;
  (void)n;
  return 42;
}

static void t_bomb(void) {
  tern__ws_deflater d;
  tern__ws_inflater f;
  sinkbuf s = {OBUF, 0, sizeof OBUF, 0};
  size_t z, got;

  /* A megabyte of zeros deflates to about a kilobyte. */
  memset(BIG, 0, sizeof BIG);
  params(0, 0, 15, 15);
  T_EQ_INT(tern__ws_deflater_init(&d, &PAR, NULL), 0);
  z = deflate_msg(&d, BIG, sizeof BIG, 0);
  T_ASSERT(z < 2048);
  tern__ws_deflater_free(&d);

  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, ZBUF, z, 0, 65536, 0, &got), -1009);
  T_ASSERT(got <= 65536); /* nothing past the limit left */
  tern__ws_inflater_free(&f);

  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, ZBUF, z, 7, sizeof BIG - 1, 0, &got), -1009);
  tern__ws_inflater_free(&f);

  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  T_EQ_INT(inflate_msg(&f, ZBUF, z, 0, sizeof BIG, 0, &got), 0);
  T_EQ_INT(got, sizeof BIG);
  tern__ws_inflater_free(&f);

  /* A sink's refusal comes back as it is. */
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  tern__ws_inflate_begin(&f, NOLIMIT, 0);
  T_EQ_INT(tern__ws_inflate(&f, ZBUF, z, sink_stop, &s), 42);
  tern__ws_inflater_free(&f);
}

static void t_inflate_text(void) {
  tern__ws_deflater d;
  tern__ws_inflater f;
  size_t z, got;

  params(0, 0, 15, 15);
  T_EQ_INT(tern__ws_deflater_init(&d, &PAR, NULL), 0);
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  /* Multi-byte characters across 8 KiB output chunks are fine. */
  make_text(BIG, 50000, 7);
  z = deflate_msg(&d, BIG, 50000, 0);
  T_EQ_INT(inflate_msg(&f, ZBUF, z, 0, NOLIMIT, 1, &got), 0);
  T_EQ_INT(got, 50000);
  /* Invalid UTF-8 in a text message: 1007 (as binary it is fine). */
  z = deflate_msg(&d, (const unsigned char *)"ab\xc0\x80", 4, 0);
  T_EQ_INT(inflate_msg(&f, ZBUF, z, 0, NOLIMIT, 1, &got), -1007);
  tern__ws_inflater_free(&f);
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, NULL), 0);
  tern__ws_deflater_free(&d);
  T_EQ_INT(tern__ws_deflater_init(&d, &PAR, NULL), 0);
  z = deflate_msg(&d, (const unsigned char *)"ab\xc0\x80", 4, 0);
  T_EQ_INT(inflate_msg(&f, ZBUF, z, 0, NOLIMIT, 0, &got), 0);
  /* Text ending inside a code point. */
  z = deflate_msg(&d, (const unsigned char *)"ab\xe2\x82", 4, 0);
  T_EQ_INT(inflate_msg(&f, ZBUF, z, 0, NOLIMIT, 1, &got), -1007);
  tern__ws_inflater_free(&f);
  tern__ws_deflater_free(&d);
}

/* ------------------------------------------------------------------ */
/* Memory                                                               */

static size_t mem_now, mem_peak;

static void *sum_malloc(size_t n, void *u) {
  size_t *p;

  (void)u;
  p = malloc(n + sizeof(size_t) * 2);
  if (p == NULL)
    return NULL;
  p[0] = n;
  mem_now += n;
  if (mem_now > mem_peak)
    mem_peak = mem_now;
  return p + 2;
}

static void sum_free(void *q, void *u) {
  size_t *p = q;

  (void)u;
  if (p == NULL)
    return;
  mem_now -= p[-2];
  free(p - 2);
}

static void t_memory_bound(void) {
  static const int wb[] = {9, 12, 15}, ml[] = {1, 8, 9};
  tern__ws_alloc a = {sum_malloc, sum_free, NULL};
  tern__ws_deflater d;
  tern__ws_inflater f;
  size_t i, j, at_init, z, got;

  for (i = 0; i < 3; i++)
    for (j = 0; j < 3; j++) {
      params(0, 0, wb[i], wb[i]);
      PAR.mem_level = ml[j];
      mem_now = mem_peak = 0;
      T_EQ_INT(tern__ws_deflater_init(&d, &PAR, &a), 0);
      T_EQ_INT(tern__ws_inflater_init(&f, &PAR, &a), 0);
      at_init = mem_now;
      /* The documented bound, with 16 KiB for the two state structs. */
      T_ASSERT(at_init <= ((size_t)1 << (wb[i] + 2)) +
                              ((size_t)1 << (ml[j] + 9)) + ((size_t)1 << 15) +
                              16384);
      /* Working allocates nothing more: all of it was taken at init. */
      make_text(BIG, 200000, 3);
      z = deflate_msg(&d, BIG, 200000, 0);
      T_EQ_INT(inflate_msg(&f, ZBUF, z, 0, NOLIMIT, 1, &got), 0);
      T_EQ_INT(got, 200000);
      T_EQ_INT(mem_peak, at_init);
      tern__ws_deflater_free(&d);
      tern__ws_inflater_free(&f);
      T_EQ_INT(mem_now, 0);
    }
}

static void t_alloc_failures(void) {
  tern__ws_alloc a = {ca_malloc, ca_free, NULL};
  tern__ws_deflater d;
  tern__ws_inflater f;
  long n, calls;
  int r, ok = 0;
  size_t z, got;

  (void)ca_realloc;
  (void)ca_use;
  params(0, 0, 15, 15);
  /* Fail the nth allocation for n = 0, 1, ... until init succeeds: each
   * failure is TERN_ENOMEM, leaves nothing allocated and frees safely. */
  for (n = 0; n < 64 && !ok; n++) {
    ca_calls = 0;
    ca_fail_at = n;
    r = tern__ws_deflater_init(&d, &PAR, &a);
    calls = ca_calls;
    ca_fail_at = -1;
    if (r == 0) {
      T_ASSERT(calls <= n); /* it needed no more than n */
      z = deflate_msg(&d, (const unsigned char *)"Hello", 5, 0);
      T_EQ_INT(z, 7);
      ok = 1;
    } else {
      T_EQ_INT(r, TERN_ENOMEM);
      T_EQ_INT(ca_live, 0);
    }
    tern__ws_deflater_free(&d);
    tern__ws_deflater_free(&d); /* twice is harmless */
    T_EQ_INT(ca_live, 0);
  }
  T_ASSERT(ok && n > 1);

  ok = 0;
  for (n = 0; n < 64 && !ok; n++) {
    ca_calls = 0;
    ca_fail_at = n;
    r = tern__ws_inflater_init(&f, &PAR, &a);
    ca_fail_at = -1;
    if (r == 0) {
      T_EQ_INT(inflate_msg(&f,
                           (const unsigned char *)"\xf2\x48\xcd\xc9\xc9"
                                                  "\x07\x00",
                           7, 0, NOLIMIT, 1, &got),
               0);
      T_EQ_STR((const char *)OBUF, got, "Hello");
      ok = 1;
    } else {
      T_EQ_INT(r, TERN_ENOMEM);
      T_EQ_INT(ca_live, 0);
    }
    tern__ws_inflater_free(&f);
    T_EQ_INT(ca_live, 0);
  }
  /* The window is one of the allocations made at init (state, window). */
  T_ASSERT(ok && n >= 2);

  /* Bad parameters are TERN_EINVAL, and hold nothing. */
  params(0, 0, 8, 7);
  T_EQ_INT(tern__ws_deflater_init(&d, &PAR, &a), TERN_EINVAL);
  T_EQ_INT(tern__ws_inflater_init(&f, &PAR, &a), TERN_EINVAL);
  tern__ws_deflater_free(&d);
  tern__ws_inflater_free(&f);
  T_EQ_INT(ca_live, 0);
  /* A freed object refuses work instead of crashing. */
  T_EQ_INT(tern__ws_inflate_end(&f, sink_cat, NULL), -1011);
}

int main(void) {
  T_RUN(t_rfc_masked_hello);
  T_RUN(t_rfc_unmasked_rejected);
  T_RUN(t_rfc_fragmented);
  T_RUN(t_rfc_ping_pong);
  T_RUN(t_lengths);
  T_RUN(t_masks);
  T_RUN(t_control_between_fragments);
  T_RUN(t_mixed_stream_splits);
  T_RUN(t_after_close);
  T_RUN(t_empty_input);
  T_RUN(t_end_needs_no_input);
  T_RUN(t_input_read_only);
  T_RUN(t_err_rsv);
  T_RUN(t_err_opcodes);
  T_RUN(t_err_control);
  T_RUN(t_err_sequence);
  T_RUN(t_err_length);
  T_RUN(t_limit);
  T_RUN(t_utf8_split_across_frames);
  T_RUN(t_utf8_fail_fast);
  T_RUN(t_utf8_end_inside);
  T_RUN(t_utf8_table);
  T_RUN(t_utf8_exhaustive);
  T_RUN(t_close_codes);
  T_RUN(t_close_payloads);
  T_RUN(t_encoder_headers);
  T_RUN(t_encoder_control);
  T_RUN(t_encoder_round_trip);
  T_RUN(t_neg_plain);
  T_RUN(t_neg_params);
  T_RUN(t_neg_client_window);
  T_RUN(t_neg_server_window);
  T_RUN(t_neg_policy);
  T_RUN(t_neg_bad_offers);
  T_RUN(t_neg_syntax);
  T_RUN(t_inflate_rfc7692);
  T_RUN(t_inflate_shared_window);
  T_RUN(t_inflate_final_blocks);
  T_RUN(t_inflate_corrupt);
  T_RUN(t_inflate_window_overreach);
  T_RUN(t_deflate_rfc_and_context);
  T_RUN(t_round_trip);
  T_RUN(t_bomb);
  T_RUN(t_inflate_text);
  T_RUN(t_memory_bound);
  T_RUN(t_alloc_failures);
  return T_DONE();
}
