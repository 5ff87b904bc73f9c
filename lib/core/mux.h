/* What HTTP/2 and HTTP/3, the two multiplexing adapters, share and write
 * once. Today: the client's stream-reset budget. */
#ifndef TERN_CORE_MUX_H
#define TERN_CORE_MUX_H

#include "core/base.h"

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

#endif
