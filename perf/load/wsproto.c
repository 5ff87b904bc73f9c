/* The client side of WebSocket echo load; see wsproto.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "wsproto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

/* The filler of the payloads: text, so that --text sends valid UTF-8 and
 * --deflate has something to compress, as chat or JSON would. */
static const char phrase[] = "The quick brown fox jumps over the lazy dog; "
                             "pack my box with five dozen liquor jugs. "
                             "{\"user\":\"ada\",\"room\":42,\"typing\":false} ";
#define PHRASE_LEN (sizeof(phrase) - 1)

/* ---- Randomness: masks from xorshift64* ---- */

static uint64_t rnd64(wsp *w) {
  w->rng ^= w->rng >> 12;
  w->rng ^= w->rng << 25;
  w->rng ^= w->rng >> 27;
  return w->rng * 0x2545f4914f6cdd1dull;
}

void wsp_random(wsp *w, unsigned char *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      /* Not secret: fall back to the generator. */
      for (; got < n; got++)
        p[got] = (unsigned char)(rnd64(w) >> 56);
      return;
    }
    got += (size_t)r;
  }
}

int wsp_init(wsp *w, size_t size, int binary, int offer_deflate, int level) {
  size_t i;
  memset(w, 0, sizeof(*w));
  w->size = size;
  w->binary = binary;
  w->offer = offer_deflate;
  w->level = level;
  w->rng = 0x9e3779b97f4a7c15ull;
  wsp_random(w, (unsigned char *)&w->rng, sizeof(w->rng));
  w->rng |= 1;
  /* An echo may not be longer than a message sent; compressed frames may
   * be a little longer than their message. */
  w->limit = size + size / 8 + 1024;
  w->filler = malloc(size + PHRASE_LEN + 1);
  w->tmp = malloc(size + 1);
  w->expect = malloc(size + 1);
  w->ibuf = malloc(w->limit);
  w->zcap = (size_t)compressBound((uLong)size) + 1024;
  w->zbuf = malloc(w->zcap);
  if (w->filler == NULL || w->tmp == NULL || w->expect == NULL ||
      w->ibuf == NULL || w->zbuf == NULL)
    return -1;
  for (i = 0; i < size + PHRASE_LEN; i++)
    w->filler[i] = (unsigned char)phrase[i % PHRASE_LEN];
  return 0;
}

int wsp_reserve(unsigned char **buf, size_t *cap, size_t need) {
  size_t c = *cap ? *cap : 4096;
  unsigned char *nb;
  if (need <= *cap)
    return 0;
  while (c < need)
    c *= 2;
  nb = realloc(*buf, c);
  if (nb == NULL)
    return -1;
  *buf = nb;
  *cap = c;
  return 0;
}

void wsp_put_escaped(FILE *f, const unsigned char *p, size_t len) {
  size_t i;
  for (i = 0; i < len; i++) {
    unsigned c = p[i];
    if (c == '\r')
      fputs("\\r", f);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c == '\\')
      fputs("\\\\", f);
    else if (c >= 32 && c < 127)
      fputc((int)c, f);
    else
      fprintf(f, "\\x%02x", c);
  }
}

/* ---- Payloads ---- */

static void make_payload(const wsp *w, unsigned char *p, uint32_t id,
                         uint64_t seq) {
  unsigned char head[32];
  size_t hl, n = w->size;
  if (w->binary) {
    int i;
    for (i = 0; i < 8; i++)
      head[i] = (unsigned char)(seq >> (8 * i));
    for (i = 0; i < 4; i++)
      head[8 + i] = (unsigned char)(id >> (8 * i));
    hl = 12;
  } else {
    hl = (size_t)snprintf((char *)head, sizeof(head), "%016llx:%08x ",
                          (unsigned long long)seq, (unsigned)id);
  }
  if (hl > n)
    hl = n;
  memcpy(p, head, hl);
  memcpy(p + hl, w->filler + (seq * 7 + id) % PHRASE_LEN, n - hl);
}

/* ---- Negotiation ---- */

const char *wsp_offer(const wsp *w) {
  return w->offer ? "permessage-deflate; client_max_window_bits" : NULL;
}

const char *wsp_parse_extension(wsp *w, wsp_sock *s, const char *v, size_t n) {
  char buf[256], *save = NULL, *tok;
  int first = 1;
  if (n >= sizeof(buf))
    return "an overlong Sec-WebSocket-Extensions";
  memcpy(buf, v, n);
  buf[n] = '\0';
  if (w->extension[0] == '\0')
    snprintf(w->extension, sizeof(w->extension), "%s", buf);
  if (!w->offer)
    return "an extension the client did not offer";
  if (strchr(buf, ',') != NULL)
    return "more than one extension";
  for (tok = strtok_r(buf, ";", &save); tok != NULL;
       tok = strtok_r(NULL, ";", &save)) {
    char *e, *val;
    while (*tok == ' ' || *tok == '\t')
      tok++;
    e = tok + strlen(tok);
    while (e > tok && (e[-1] == ' ' || e[-1] == '\t'))
      *--e = '\0';
    if (first) {
      if (strcasecmp(tok, "permessage-deflate") != 0)
        return "an extension other than permessage-deflate";
      first = 0;
      continue;
    }
    val = strchr(tok, '=');
    if (val != NULL) {
      char *ne = val;
      *val++ = '\0';
      while (ne > tok && (ne[-1] == ' ' || ne[-1] == '\t'))
        *--ne = '\0';
      while (*val == ' ' || *val == '\t')
        val++;
      if (*val == '"' && strlen(val) >= 2 && val[strlen(val) - 1] == '"') {
        val[strlen(val) - 1] = '\0';
        val++;
      }
    }
    if (strcasecmp(tok, "server_no_context_takeover") == 0 && val == NULL) {
      s->reset_in = 1;
    } else if (strcasecmp(tok, "client_no_context_takeover") == 0 &&
               val == NULL) {
      s->reset_out = 1;
    } else if (strcasecmp(tok, "server_max_window_bits") == 0 && val != NULL) {
      long bits = strtol(val, &e, 10);
      if (*e != '\0' || bits < 8 || bits > 15)
        return "a bad server_max_window_bits";
    } else if (strcasecmp(tok, "client_max_window_bits") == 0 && val != NULL) {
      long bits = strtol(val, &e, 10);
      if (*e != '\0' || bits < 8 || bits > 15)
        return "a bad client_max_window_bits";
      s->client_bits = (int)bits;
    } else {
      return "an unknown permessage-deflate parameter";
    }
  }
  if (first)
    return "an empty Sec-WebSocket-Extensions";
  s->deflate = 1;
  return NULL;
}

const char *wsp_open(wsp *w, wsp_sock *s) {
  int bits;
  if (!s->deflate)
    return NULL;
  bits = s->client_bits ? s->client_bits : 15;
  memset(&s->zd, 0, sizeof(s->zd));
  memset(&s->zi, 0, sizeof(s->zi));
  /* zlib's smallest raw window is 9 bits: with 8, send uncompressed. */
  if (bits > 8) {
    if (deflateInit2(&s->zd, w->level, Z_DEFLATED, -bits, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
      return "deflateInit2 failed";
    s->zd_ok = 1;
    s->send_comp = 1;
  }
  /* 15 bits inflates whatever window the server used. */
  if (inflateInit2(&s->zi, -15) != Z_OK)
    return "inflateInit2 failed";
  s->zi_ok = 1;
  return NULL;
}

void wsp_sock_reset(wsp_sock *s) {
  if (s->zd_ok)
    deflateEnd(&s->zd);
  if (s->zi_ok)
    inflateEnd(&s->zi);
  s->zd_ok = s->zi_ok = 0;
  s->wlen = s->wpos = s->rlen = s->mlen = 0;
  s->in_msg = 0;
  s->deflate = s->send_comp = s->client_bits = 0;
  s->reset_in = s->reset_out = 0;
}

void wsp_sock_free(wsp_sock *s) {
  wsp_sock_reset(s);
  free(s->wbuf);
  free(s->rbuf);
  free(s->msg);
  s->wbuf = s->rbuf = s->msg = NULL;
  s->wcap = s->rcap = s->mcap = 0;
}

/* ---- Frames out ---- */

static void mask_copy(unsigned char *dst, const unsigned char *src, size_t n,
                      const unsigned char m[4]) {
  unsigned char m8b[8];
  uint64_t m8;
  size_t i = 0;
  memcpy(m8b, m, 4);
  memcpy(m8b + 4, m, 4);
  memcpy(&m8, m8b, 8);
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, src + i, 8);
    x ^= m8;
    memcpy(dst + i, &x, 8);
  }
  for (; i < n; i++)
    dst[i] = src[i] ^ m[i & 3];
}

int wsp_put_frame(wsp *w, wsp_sock *s, unsigned b0, const unsigned char *p,
                  size_t n) {
  unsigned char *o;
  size_t h = 2;
  uint64_t r = rnd64(w);
  unsigned char mask[4];
  int i;
  if (wsp_reserve(&s->wbuf, &s->wcap, s->wlen + n + 14) != 0)
    return -1;
  o = s->wbuf + s->wlen;
  o[0] = (unsigned char)b0;
  if (n < 126) {
    o[1] = (unsigned char)(0x80 | n);
  } else if (n < 65536) {
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
  /* A new mask per frame (RFC 6455 5.3). */
  for (i = 0; i < 4; i++)
    mask[i] = (unsigned char)(r >> (8 * i));
  memcpy(o + h, mask, 4);
  mask_copy(o + h + 4, p, n, mask);
  s->wlen += h + 4 + n;
  return 0;
}

/* Raw deflate with a sync flush, the trailing 00 00 ff ff removed. Returns
 * the compressed length in w->zbuf, or -1. */
static long compress_msg(wsp *w, wsp_sock *s, const unsigned char *p,
                         size_t n) {
  size_t out = 0;
  s->zd.next_in = (unsigned char *)p;
  s->zd.avail_in = (uInt)n;
  do {
    int rc;
    if (out + 64 > w->zcap && wsp_reserve(&w->zbuf, &w->zcap, out + 64) != 0)
      return -1;
    s->zd.next_out = w->zbuf + out;
    s->zd.avail_out = (uInt)(w->zcap - out);
    rc = deflate(&s->zd, Z_SYNC_FLUSH);
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return -1;
    out = w->zcap - s->zd.avail_out;
    if (s->zd.avail_out == 0 &&
        wsp_reserve(&w->zbuf, &w->zcap, w->zcap * 2) != 0)
      return -1;
  } while (s->zd.avail_in > 0 || s->zd.avail_out == 0);
  if (out < 4 || memcmp(w->zbuf + out - 4, "\0\0\xff\xff", 4) != 0)
    return -1;
  if (s->reset_out)
    deflateReset(&s->zd);
  return (long)(out - 4);
}

int wsp_put_message(wsp *w, wsp_sock *s) {
  unsigned op = w->binary ? WSP_BINARY : WSP_TEXT;
  int rc;
  make_payload(w, w->tmp, s->id, s->next_seq);
  if (s->send_comp) {
    long n = compress_msg(w, s, w->tmp, w->size);
    if (n < 0)
      return -1;
    rc = wsp_put_frame(w, s, 0x80 | 0x40 | op, w->zbuf, (size_t)n);
  } else {
    rc = wsp_put_frame(w, s, 0x80 | op, w->tmp, w->size);
  }
  if (rc == 0)
    s->next_seq++;
  return rc;
}

int wsp_put_close(wsp *w, wsp_sock *s) {
  static const unsigned char normal[2] = {0x03, 0xe8}; /* 1000 */
  return wsp_put_frame(w, s, 0x80 | WSP_CLOSE, normal, 2);
}

/* ---- Frames in ---- */

/* A whole message (inflated) arrived on s. Returns the echo callback's
 * answer. */
static int deliver(wsp *w, wsp_sock *s, const wsp_events *ev, void *u, int op,
                   const unsigned char *p, size_t n) {
  if (s->next_echo == s->next_seq) {
    ev->mismatch(u, s, "an echo with no message in flight", p, n);
    return 0;
  }
  if (op != (w->binary ? WSP_BINARY : WSP_TEXT))
    ev->mismatch(u, s,
                 op == WSP_TEXT ? "a text echo of a binary message"
                                : "a binary echo of a text message",
                 p, n);
  else if (n != w->size)
    ev->mismatch(u, s, "an echo of another length", p, n);
  else {
    make_payload(w, w->expect, s->id, s->next_echo);
    if (memcmp(p, w->expect, n) != 0)
      ev->mismatch(u, s, "an echo that differs from the message sent", p, n);
  }
  s->next_echo++;
  return ev->echo(u, s, s->next_echo - 1);
}

/* Inflate one compressed message (the 00 00 ff ff tail added) into
 * w->ibuf; returns its length, or -1. */
static long inflate_msg(wsp *w, wsp_sock *s, const unsigned char *p, size_t n) {
  static const unsigned char tail[4] = {0x00, 0x00, 0xff, 0xff};
  size_t out = 0;
  int part;
  for (part = 0; part < 2; part++) {
    s->zi.next_in = (unsigned char *)(part ? tail : p);
    s->zi.avail_in = (uInt)(part ? 4 : n);
    do {
      int rc;
      if (out == w->limit)
        return -1; /* larger than any message sent */
      s->zi.next_out = w->ibuf + out;
      s->zi.avail_out = (uInt)(w->limit - out);
      rc = inflate(&s->zi, Z_SYNC_FLUSH);
      out = w->limit - s->zi.avail_out;
      if (rc == Z_STREAM_END) {
        /* a final block (BFINAL): the next message starts a new stream */
        inflateReset(&s->zi);
        return (long)out;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR)
        return -1;
      if (rc == Z_BUF_ERROR && s->zi.avail_in > 0 && s->zi.avail_out > 0)
        return -1;
    } while (s->zi.avail_in > 0 || s->zi.avail_out == 0);
  }
  if (s->reset_in)
    inflateReset(&s->zi);
  return (long)out;
}

/* 0, WSP_STOPPED or WSP_ERROR. */
static int deliver_maybe_compressed(wsp *w, wsp_sock *s, const wsp_events *ev,
                                    void *u, int op, int comp,
                                    const unsigned char *p, size_t n) {
  long m;
  if (!comp)
    return deliver(w, s, ev, u, op, p, n) ? WSP_STOPPED : 0;
  m = inflate_msg(w, s, p, n);
  if (m < 0) {
    s->why = "a compressed message that does not inflate (or inflates past "
             "the message size)";
    return WSP_ERROR;
  }
  return deliver(w, s, ev, u, op, w->ibuf, (size_t)m) ? WSP_STOPPED : 0;
}

static int fail(wsp_sock *s, const char *why) {
  s->why = why;
  return WSP_ERROR;
}

int wsp_frames(wsp *w, wsp_sock *s, const wsp_events *ev, void *u, size_t *used,
               unsigned *code) {
  size_t pos = 0;
  *used = 0;
  for (;;) {
    const unsigned char *b = s->rbuf + pos;
    size_t n = s->rlen - pos, h = 2;
    uint64_t len;
    int fin, rsv, op, i;
    *used = pos;
    if (n < 2)
      return WSP_MORE;
    fin = b[0] >> 7;
    rsv = (b[0] >> 4) & 7;
    op = b[0] & 15;
    if (b[1] & 0x80)
      return fail(s, "a masked frame from the server");
    len = b[1] & 127;
    if (len == 126) {
      if (n < 4)
        return WSP_MORE;
      len = (uint64_t)b[2] << 8 | b[3];
      h = 4;
    } else if (len == 127) {
      if (n < 10)
        return WSP_MORE;
      len = 0;
      for (i = 0; i < 8; i++)
        len = len << 8 | b[2 + i];
      h = 10;
    }
    if (len > w->limit)
      return fail(s, "a frame larger than any message sent");
    if (n < h + len) {
      /* Room for the rest of the frame, read in place. */
      if (wsp_reserve(&s->rbuf, &s->rcap, s->rlen + (h + len - n)) != 0)
        return fail(s, "out of memory");
      return WSP_MORE;
    }
    pos += h + (size_t)len;
    if (op & 8) { /* control */
      if (!fin || len > 125 || rsv)
        return fail(s, "a fragmented, oversized or RSV control frame");
      if (op == WSP_CLOSE) {
        *used = pos;
        *code = len >= 2 ? (unsigned)b[h] << 8 | b[h + 1] : 0;
        return WSP_GOT_CLOSE;
      }
      if (op == WSP_PING) {
        w->pings++;
        if (wsp_put_frame(w, s, 0x80 | WSP_PONG, b + h, (size_t)len) != 0)
          return fail(s, "out of memory");
      } else if (op != WSP_PONG) {
        return fail(s, "a reserved control opcode");
      }
      continue;
    }
    if ((rsv & 3) || (rsv && !s->deflate))
      return fail(s, "reserved bits set that no extension defines");
    if (op == WSP_TEXT || op == WSP_BINARY) {
      if (s->in_msg)
        return fail(s, "a new message inside a fragmented one");
      if (fin) {
        int rc = deliver_maybe_compressed(w, s, ev, u, op, rsv != 0, b + h,
                                          (size_t)len);
        if (rc != 0) {
          *used = pos;
          return rc;
        }
        continue;
      }
      s->in_msg = 1;
      s->mop = op;
      s->mcomp = rsv != 0;
      s->mlen = 0;
    } else if (op == WSP_CONT) {
      if (!s->in_msg || rsv)
        return fail(s, "an unexpected continuation frame");
    } else {
      return fail(s, "a reserved data opcode");
    }
    if (s->mlen + len > w->limit ||
        wsp_reserve(&s->msg, &s->mcap, s->mlen + (size_t)len) != 0)
      return fail(s, "a fragmented message larger than any sent");
    memcpy(s->msg + s->mlen, b + h, (size_t)len);
    s->mlen += (size_t)len;
    if (fin) {
      int rc;
      s->in_msg = 0;
      rc = deliver_maybe_compressed(w, s, ev, u, s->mop, s->mcomp, s->msg,
                                    s->mlen);
      if (rc != 0) {
        *used = pos;
        return rc;
      }
    }
  }
}

void wsp_consume(wsp_sock *s, size_t used) {
  if (used == 0)
    return;
  memmove(s->rbuf, s->rbuf + used, s->rlen - used);
  s->rlen -= used;
}
