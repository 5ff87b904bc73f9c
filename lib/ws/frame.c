/* WebSocket framing (see frame.h for the contract and the rules).
 *
 * The frame header is read one byte at a time through a small state
 * machine, so that it may arrive split anywhere and every rule is checked
 * at the byte that decides it. Payload is handled a span at a time:
 * unmasked eight bytes per step into the caller's output buffer (the
 * input is never written) and, for text, validated by a DFA whose
 * state survives between calls, frames and fragments.
 */
#include "frame.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* UTF-8                                                                */

/* Byte classes for the validator. Each class groups the bytes that act
 * alike in every state: what may follow a lead byte depends on the lead
 * (RFC 3629 4), which is why E0, ED, F0 and F4 have classes of their own
 * (they exclude overlong forms, surrogates and code points past
 * U+10FFFF) and why continuation bytes split into 80-8F, 90-9F, A0-BF. */
enum {
  K_ASCII, /* 00-7F */
  K_C80,   /* 80-8F */
  K_C90,   /* 90-9F */
  K_CA0,   /* A0-BF */
  K_BAD,   /* C0, C1, F5-FF: never in UTF-8 */
  K_L2,    /* C2-DF: lead of two bytes */
  K_E0,    /* E0: second byte A0-BF */
  K_L3,    /* E1-EC, EE, EF: lead of three bytes */
  K_ED,    /* ED: second byte 80-9F */
  K_F0,    /* F0: second byte 90-BF */
  K_L4,    /* F1-F3: lead of four bytes */
  K_F4,    /* F4: second byte 80-8F */
  K_COUNT
};

/* The table is laid out by hand, 16 bytes a row, so the formatter is kept
 * off it. */
/* clang-format off */
static const unsigned char u8class[256] = {
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x00 */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x10 */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x20 */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x30 */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x40 */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x50 */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x60 */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  /* 0x70 */
  1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  /* 0x80 */
  2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,  /* 0x90 */
  3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,  /* 0xA0 */
  3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,  /* 0xB0 */
  4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,  /* 0xC0 */
  5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,  /* 0xD0 */
  6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 7,  /* 0xE0 */
  9,10,10,10,11, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,  /* 0xF0 */
};
/* clang-format on */

/* Validator states: what the next byte must be. */
enum {
  U_OK,  /* between code points */
  U_1,   /* one more continuation byte */
  U_2,   /* two more */
  U_3,   /* three more */
  U_E0,  /* after E0: A0-BF, then one more */
  U_ED,  /* after ED: 80-9F, then one more */
  U_F0,  /* after F0: 90-BF, then two more */
  U_F4,  /* after F4: 80-8F, then two more */
  U_BAD, /* failed, for good */
  U_COUNT
};

/* Next state by state (rows, in enum order: U_OK, U_1, U_2, U_3, U_E0,
 * U_ED, U_F0, U_F4, U_BAD) and byte class (columns, as headed), aligned
 * by hand. */
#define B U_BAD
/* clang-format off */
static const unsigned char u8next[U_COUNT][K_COUNT] = {
  /*ASC  C80   C90   CA0   BAD   L2    E0    L3    ED    F0    L4    F4 */
  {U_OK, B,    B,    B,    B,    U_1,  U_E0, U_2,  U_ED, U_F0, U_3,  U_F4},
  {B,    U_OK, U_OK, U_OK, B,    B,    B,    B,    B,    B,    B,    B},
  {B,    U_1,  U_1,  U_1,  B,    B,    B,    B,    B,    B,    B,    B},
  {B,    U_2,  U_2,  U_2,  B,    B,    B,    B,    B,    B,    B,    B},
  {B,    B,    B,    U_1,  B,    B,    B,    B,    B,    B,    B,    B},
  {B,    U_1,  U_1,  B,    B,    B,    B,    B,    B,    B,    B,    B},
  {B,    B,    U_2,  U_2,  B,    B,    B,    B,    B,    B,    B,    B},
  {B,    U_2,  B,    B,    B,    B,    B,    B,    B,    B,    B,    B},
  {B,    B,    B,    B,    B,    B,    B,    B,    B,    B,    B,    B},
};
/* clang-format on */
#undef B

size_t tern__ws_utf8_scan(unsigned *state, const unsigned char *p, size_t n) {
  unsigned s = *state;
  size_t i = 0;
  uint64_t w;

  if (s >= U_BAD)
    return 0;
  while (i < n) {
    /* Most text is ASCII: between code points, skip eight bytes at a time
     * while none has its high bit set. */
    if (s == U_OK) {
      while (n - i >= 8) {
        memcpy(&w, p + i, 8);
        if (w & 0x8080808080808080u)
          break;
        i += 8;
      }
      if (i == n)
        break;
    }
    s = u8next[s][u8class[p[i]]];
    if (s == U_BAD) {
      *state = s;
      return i;
    }
    i++;
  }
  *state = s;
  return n;
}

/* ------------------------------------------------------------------ */
/* Decoder                                                              */

enum {
  ST_B0,     /* first header byte: FIN, RSV, opcode */
  ST_B1,     /* second: MASK, 7-bit length */
  ST_LEN,    /* extended length, nlen bytes to go */
  ST_MASK,   /* masking key, nmask bytes seen */
  ST_DATA,   /* data frame payload */
  ST_CTL,    /* control frame payload, gathered into ctl */
  ST_CLOSED, /* a close frame was delivered */
  ST_ERROR,
};

#define IS_CONTROL(op) (((op)&0x8) != 0)

int tern__ws_close_code_valid(int code) {
  /* RFC 6455 7.4: 1004 is reserved, 1005, 1006 and 1015 are for
   * reporting only, and 1012-2999 are left to later revisions of the
   * protocol. IANA has since registered 1012-1014 for servers to send; a
   * client has no use for them, and they are refused like the rest. */
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) ||
         (code >= 3000 && code <= 4999);
}

void tern__ws_decoder_init(tern__ws_decoder *d, uint64_t max_message,
                           int deflate) {
  memset(d, 0, sizeof *d);
  d->max_message = max_message;
  d->deflate = deflate != 0;
  d->state = ST_B0;
}

/* Judge the first header byte against the frame sequence so far. */
static int check_b0(const tern__ws_decoder *d, unsigned char c) {
  int op = c & 0x0f, fin = c & 0x80, rsv1 = c & 0x40;

  if (c & 0x30)
    return TERN__WS_E1002; /* RSV2, RSV3: no extension of ours uses them */
  if ((op > TERN__WS_OP_BINARY && op < TERN__WS_OP_CLOSE) ||
      op > TERN__WS_OP_PONG)
    return TERN__WS_E1002;
  if (IS_CONTROL(op))
    return (!fin || rsv1) ? TERN__WS_E1002 : 0;
  if (op == TERN__WS_OP_CONT)
    /* RFC 7692 6.1: RSV1 marks a message, so it belongs on its first
     * frame only. */
    return (!d->in_msg || rsv1) ? TERN__WS_E1002 : 0;
  if (d->in_msg || (rsv1 && !d->deflate))
    return TERN__WS_E1002;
  return 0;
}

/* Judge a frame's payload length once it is known. */
static int check_len(const tern__ws_decoder *d) {
  int op = d->b0 & 0x0f;
  int compressed;
  uint64_t before;

  if (IS_CONTROL(op))
    /* A close payload is empty or starts with a 2-byte code. */
    return (op == TERN__WS_OP_CLOSE && d->flen == 1) ? TERN__WS_E1002 : 0;
  compressed = op == TERN__WS_OP_CONT ? d->msg_compressed : (d->b0 & 0x40);
  before = op == TERN__WS_OP_CONT ? d->msg_len : 0;
  if (!compressed && d->flen > d->max_message - before)
    return TERN__WS_E1009;
  return 0;
}

/* The header is complete: set up for the payload. Returns BEGIN when the
 * frame opens a message, else NONE. */
static int start_frame(tern__ws_decoder *d, tern__ws_event *ev) {
  int op = d->b0 & 0x0f;

  d->remaining = d->flen;
  d->mpos = 0;
  if (IS_CONTROL(op)) {
    d->state = ST_CTL;
    d->ctl_len = 0;
    d->ctl_utf8 = TERN__WS_UTF8_OK;
    return TERN__WS_EV_NONE;
  }
  d->state = ST_DATA;
  if (op == TERN__WS_OP_CONT) {
    d->msg_len += d->flen;
    return TERN__WS_EV_NONE;
  }
  d->in_msg = 1;
  d->msg_text = op == TERN__WS_OP_TEXT;
  d->msg_compressed = (d->b0 & 0x40) != 0;
  d->msg_len = d->flen;
  d->utf8 = TERN__WS_UTF8_OK;
  ev->opcode = op;
  ev->compressed = d->msg_compressed;
  return TERN__WS_EV_BEGIN;
}

/* Write src[0..n) XORed with the masking key, starting at key index
 * *pos, to dst, which does not overlap it. The source is the carrier's
 * and is only read: under HTTP/3 it is the QUIC stack's memory. An 8-byte
 * copy of the key, rotated to *pos, lets the work go a word at a time,
 * four words per step where it can, since a copy costs a load and a store
 * per word where XOR in place cost one instruction; memcpy keeps that
 * free of alignment and aliasing trouble. */
static void unmask(unsigned char *restrict dst,
                   const unsigned char *restrict src, size_t n,
                   const unsigned char key[4], unsigned char *pos) {
  unsigned char m[8];
  uint64_t w[4], mw;
  size_t i, k;

  for (i = 0; i < 8; i++)
    m[i] = key[(*pos + i) & 3];
  memcpy(&mw, m, 8);
  for (i = 0; n - i >= 32; i += 32) {
    memcpy(w, src + i, 32);
    for (k = 0; k < 4; k++)
      w[k] ^= mw;
    memcpy(dst + i, w, 32);
  }
  for (; n - i >= 8; i += 8) {
    memcpy(w, src + i, 8);
    w[0] ^= mw;
    memcpy(dst + i, w, 8);
  }
  for (; i < n; i++)
    dst[i] = src[i] ^ m[i & 7];
  *pos = (unsigned char)((*pos + n) & 3);
}

/* Take control payload bytes into ctl, checking a close frame's code and
 * reason as they come. Returns 0 or an error, with *i at the offending
 * byte. */
static int take_control(tern__ws_decoder *d, const unsigned char *buf,
                        size_t len, size_t *i) {
  int close = (d->b0 & 0x0f) == TERN__WS_OP_CLOSE;

  while (d->remaining > 0 && *i < len) {
    unsigned char c = buf[*i] ^ d->mask[d->mpos];

    if (close && d->ctl_len == 1) {
      if (!tern__ws_close_code_valid(d->ctl[0] << 8 | c))
        return TERN__WS_E1002;
    } else if (close && d->ctl_len >= 2) {
      if (tern__ws_utf8_scan(&d->ctl_utf8, &c, 1) == 0)
        return TERN__WS_E1007;
    }
    d->mpos = (d->mpos + 1) & 3;
    d->ctl[d->ctl_len++] = c;
    d->remaining--;
    (*i)++;
  }
  return 0;
}

/* A control frame's payload is all here: deliver it. */
static int end_control(tern__ws_decoder *d, tern__ws_event *ev) {
  int op = d->b0 & 0x0f;

  d->state = ST_B0;
  ev->data = d->ctl;
  ev->len = d->ctl_len;
  if (op == TERN__WS_OP_PING)
    return TERN__WS_EV_PING;
  if (op == TERN__WS_OP_PONG)
    return TERN__WS_EV_PONG;
  if (d->ctl_utf8 != TERN__WS_UTF8_OK)
    return TERN__WS_E1007; /* the reason ended inside a code point */
  if (d->ctl_len == 0) {
    ev->code = TERN__WS_CLOSE_NO_STATUS;
  } else {
    ev->code = d->ctl[0] << 8 | d->ctl[1];
    ev->data = d->ctl + 2;
    ev->len = d->ctl_len - 2u;
  }
  d->state = ST_CLOSED;
  return TERN__WS_EV_CLOSE;
}

int tern__ws_decode(tern__ws_decoder *d, const unsigned char *buf, size_t len,
                    size_t *consumed, tern__ws_event *ev) {
  size_t i = 0, n, ok;
  unsigned char c;
  int r;

  memset(ev, 0, sizeof *ev);
  *consumed = 0;
  if (d->state == ST_ERROR)
    return d->result;
  if (d->state == ST_CLOSED) {
    *consumed = len;
    return TERN__WS_EV_NONE;
  }

  for (;;) {
    switch (d->state) {
    case ST_B0:
      if (i == len)
        goto more;
      c = buf[i];
      r = check_b0(d, c);
      if (r < 0)
        goto fail;
      d->b0 = c;
      d->state = ST_B1;
      i++;
      break;

    case ST_B1:
      if (i == len)
        goto more;
      c = buf[i];
      d->len7 = c & 0x7f;
      r = TERN__WS_E1002;
      if (!(c & 0x80) || (IS_CONTROL(d->b0 & 0x0f) && d->len7 > 125))
        goto fail;
      d->nmask = 0;
      d->flen = d->len7;
      if (d->len7 >= 126) {
        d->flen = 0;
        d->nlen = d->len7 == 126 ? 2 : 8;
        d->state = ST_LEN;
      } else {
        r = check_len(d);
        if (r < 0)
          goto fail;
        d->state = ST_MASK;
      }
      i++;
      break;

    case ST_LEN:
      if (i == len)
        goto more;
      c = buf[i];
      r = TERN__WS_E1002;
      if (d->nlen == 8 && (c & 0x80))
        goto fail; /* RFC 6455 5.2: the most significant bit MUST be 0 */
      d->flen = d->flen << 8 | c;
      if (--d->nlen == 0) {
        /* A length that fits a shorter form must use it (RFC 6455 5.2). */
        if (d->flen < (d->len7 == 126 ? 126u : 65536u))
          goto fail;
        r = check_len(d);
        if (r < 0)
          goto fail;
        d->state = ST_MASK;
      }
      i++;
      break;

    case ST_MASK:
      while (d->nmask < 4 && i < len)
        d->mask[d->nmask++] = buf[i++];
      if (d->nmask < 4)
        goto more;
      r = start_frame(d, ev);
      if (r != TERN__WS_EV_NONE) {
        *consumed = i;
        return r;
      }
      break;

    case ST_DATA:
      if (d->remaining == 0) {
        /* The frame is done; a final one also ends the message. */
        d->state = ST_B0;
        if (!(d->b0 & 0x80))
          break;
        d->in_msg = 0;
        r = TERN__WS_E1007;
        if (d->msg_text && !d->msg_compressed && d->utf8 != TERN__WS_UTF8_OK)
          goto fail;
        *consumed = i;
        return TERN__WS_EV_END;
      }
      if (i == len)
        goto more;
      r = TERN__WS_E1002;
      if (d->out_cap == 0)
        goto fail; /* the caller broke the contract: fail, never spin */
      n = len - i;
      if (n > d->remaining)
        n = (size_t)d->remaining;
      if (n > d->out_cap)
        n = d->out_cap;
      unmask(d->out, buf + i, n, d->mask, &d->mpos);
      ok = n;
      if (d->msg_text && !d->msg_compressed)
        ok = tern__ws_utf8_scan(&d->utf8, d->out, n);
      if (ok < n) {
        /* Deliver the valid part now and the error on the next call, so
         * that what the caller sees does not depend on how the input was
         * split. The error stays pinned at the offending byte. */
        d->state = ST_ERROR;
        d->result = TERN__WS_E1007;
        if (ok == 0) {
          *consumed = i;
          return TERN__WS_E1007;
        }
        n = ok;
      }
      d->remaining -= n;
      ev->data = d->out;
      ev->len = n;
      *consumed = i + n;
      return TERN__WS_EV_DATA;

    case ST_CTL:
      r = take_control(d, buf, len, &i);
      if (r < 0)
        goto fail;
      if (d->remaining > 0)
        goto more;
      r = end_control(d, ev);
      if (r < 0)
        goto fail;
      *consumed = i;
      return r;

    default:
      r = TERN__WS_E1002; /* unreachable: a state the decoder never sets */
      goto fail;
    }
  }

more:
  *consumed = len;
  return TERN__WS_EV_NONE;

fail:
  d->state = ST_ERROR;
  d->result = r;
  *consumed = i;
  return r;
}

/* ------------------------------------------------------------------ */
/* Encoder                                                              */

size_t tern__ws_frame_header(unsigned char *out, int opcode, int fin, int rsv1,
                             uint64_t len) {
  size_t n, k;

  out[0] =
      (unsigned char)((fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | (opcode & 0x0f));
  if (len < 126) {
    out[1] = (unsigned char)len;
    return 2;
  }
  n = len < 65536 ? 2 : 8;
  out[1] = n == 2 ? 126 : 127;
  for (k = 0; k < n; k++)
    out[2 + k] = (unsigned char)(len >> (8 * (n - 1 - k)));
  return 2 + n;
}

size_t tern__ws_control_frame(unsigned char *out, int opcode,
                              const unsigned char *p, size_t n) {
  if (!IS_CONTROL(opcode) || opcode > TERN__WS_OP_PONG ||
      n > TERN__WS_MAX_CONTROL)
    return 0;
  tern__ws_frame_header(out, opcode, 1, 0, n);
  if (n > 0)
    memcpy(out + 2, p, n);
  return 2 + n;
}

size_t tern__ws_pong_frame(unsigned char *out, const unsigned char *p,
                           size_t n) {
  return tern__ws_control_frame(out, TERN__WS_OP_PONG, p, n);
}

size_t tern__ws_close_frame(unsigned char *out, int code, const char *reason,
                            size_t reason_len) {
  size_t n = reason_len;

  if (code == 0)
    return tern__ws_control_frame(out, TERN__WS_OP_CLOSE, NULL, 0);
  if (!tern__ws_close_code_valid(code))
    return 0;
  /* Cut the reason to what fits, backing up over continuation bytes so
   * that the peer, which checks the reason, gets whole code points. */
  if (n > TERN__WS_MAX_CONTROL - 2) {
    n = TERN__WS_MAX_CONTROL - 2;
    while (n > 0 && ((unsigned char)reason[n] & 0xc0) == 0x80)
      n--;
  }
  tern__ws_frame_header(out, TERN__WS_OP_CLOSE, 1, 0, 2 + n);
  out[2] = (unsigned char)(code >> 8);
  out[3] = (unsigned char)code;
  if (n > 0)
    memcpy(out + 4, reason, n);
  return 4 + n;
}
