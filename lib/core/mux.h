/* What HTTP/2 and HTTP/3, the two multiplexing adapters, share and write
 * once (lib/core/mux.c): the client's stream-reset budget, the body bytes
 * a stream holds for its handler, and how a response field is put on the
 * wire. */
#ifndef TERN_CORE_MUX_H
#define TERN_CORE_MUX_H

#include <string.h>

#include "core/base.h"
#include "core/pool.h"
#include "core/text.h"

/* Client stream resets (RST_STREAM, RESET_STREAM/STOP_SENDING): a
 * bucket of TERN__MUX_RESET_BURST tokens refilled at
 * TERN__MUX_RESET_RATE a second, against a client that opens and resets
 * streams without end (CVE-2023-44487, "rapid reset"). Each adapter
 * decides what an empty bucket costs the connection (HTTP/2: GOAWAY
 * ENHANCE_YOUR_CALM; HTTP/3: H3_EXCESSIVE_LOAD). */
#define TERN__MUX_RESET_BURST 400
#define TERN__MUX_RESET_RATE 33

typedef struct {
  uint32_t tokens;
  uint64_t time; /* when it was last refilled (loop ms) */
} tern__reset_budget;

static inline void tern__reset_budget_init(tern__reset_budget *b,
                                           uint64_t now_ms) {
  b->tokens = TERN__MUX_RESET_BURST;
  b->time = now_ms;
}

/* One reset at `now_ms`: 1 when the budget allows it (a token taken),
 * 0 when it is spent. */
static inline int tern__reset_budget_take(tern__reset_budget *b,
                                          uint64_t now_ms) {
  uint64_t add = (now_ms - b->time) * TERN__MUX_RESET_RATE / 1000;
  if (add > 0) {
    b->tokens = add >= TERN__MUX_RESET_BURST - b->tokens
                    ? TERN__MUX_RESET_BURST
                    : b->tokens + (uint32_t)add;
    b->time = now_ms;
  }
  if (b->tokens == 0)
    return 0;
  b->tokens--;
  return 1;
}

/* Request body bytes a stream holds while its handler cannot take them
 * (paused, or not reading yet): [off, off + len) of p, cap bytes from the
 * worker's small blocks. */
typedef struct {
  char *p;
  size_t off, len, cap;
} tern__mux_pend;

/* Append n bytes, growing (doubling from 16 KiB) or sliding the buffer
 * down as needed: 0, or TERN_ENOMEM with nothing appended. */
int tern__mux_hold(tern__worker *w, tern__mux_pend *b, const void *p, size_t n);

/* A response field that HTTP/2 and HTTP/3 never send: the connection-
 * specific ones (RFC 9113 8.2.2, RFC 9114 4.2), and Date and
 * Content-Length, which the adapter writes itself. */
static inline int tern__mux_dropped_field(const tern_header *f) {
  switch (f->name_len) {
  case 2:
    return tern__ieq_lit(f->name, 2, "te");
  case 4:
    return tern__ieq_lit(f->name, 4, "date");
  case 7:
    return tern__ieq_lit(f->name, 7, "upgrade");
  case 10:
    return tern__ieq_lit(f->name, 10, "connection") ||
           tern__ieq_lit(f->name, 10, "keep-alive");
  case 14:
    return tern__ieq_lit(f->name, 14, "content-length");
  case 16:
    return tern__ieq_lit(f->name, 16, "proxy-connection");
  case 17:
    return tern__ieq_lit(f->name, 17, "transfer-encoding");
  default:
    return 0;
  }
}

/* Field `f` as both protocols send it: 0 when it is dropped (above);
 * else 1, with its name lower-cased into *buf (f->name_len bytes; *buf
 * moves past them) and *v, *vl its value trimmed of spaces and tabs,
 * copied into *buf as well (after the name) when `copy`. */
static inline int tern__mux_field(const tern_header *f, char **buf, int copy,
                                  const char **v, size_t *vl) {
  const char *p = f->value;
  size_t n = f->value_len, j;
  char *b = *buf;
  if (tern__mux_dropped_field(f))
    return 0;
  while (n > 0 && (p[0] == ' ' || p[0] == '\t')) {
    p++;
    n--;
  }
  while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
    n--;
  for (j = 0; j < f->name_len; j++) {
    unsigned char ch = (unsigned char)f->name[j];
    *b++ = (char)((unsigned)(ch - 'A') < 26u ? ch | 0x20 : ch);
  }
  if (copy && n > 0) {
    memcpy(b, p, n);
    p = b;
    b += n;
  }
  *buf = b;
  *v = p;
  *vl = n;
  return 1;
}

#endif
