/* SHA-1 and base64 for the WebSocket handshake (sha1.h). SHA-1 here is a
 * fixed transform the protocol names, not a security property. */
#include "ws/sha1.h"

#include <string.h>

static uint32_t rol(uint32_t x, unsigned n) {
  return (x << n) | (x >> (32 - n));
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

static void block(tern__sha1 *s, const unsigned char *p) {
  uint32_t w[80], a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3],
                  e = s->h[4], f, k, t;
  unsigned i;

  for (i = 0; i < 16; i++)
    w[i] = be32(p + 4 * i);
  for (; i < 80; i++)
    w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
  for (i = 0; i < 80; i++) {
    if (i < 20) {
      f = (b & c) | (~b & d);
      k = 0x5a827999u;
    } else if (i < 40) {
      f = b ^ c ^ d;
      k = 0x6ed9eba1u;
    } else if (i < 60) {
      f = (b & c) | (b & d) | (c & d);
      k = 0x8f1bbcdcu;
    } else {
      f = b ^ c ^ d;
      k = 0xca62c1d6u;
    }
    t = rol(a, 5) + f + e + k + w[i];
    e = d;
    d = c;
    c = rol(b, 30);
    b = a;
    a = t;
  }
  s->h[0] += a;
  s->h[1] += b;
  s->h[2] += c;
  s->h[3] += d;
  s->h[4] += e;
}

void tern__sha1_init(tern__sha1 *s) {
  s->h[0] = 0x67452301u;
  s->h[1] = 0xefcdab89u;
  s->h[2] = 0x98badcfeu;
  s->h[3] = 0x10325476u;
  s->h[4] = 0xc3d2e1f0u;
  s->len = 0;
  s->used = 0;
}

void tern__sha1_update(tern__sha1 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->len += (uint64_t)n;
  while (n > 0) {
    size_t k = 64 - s->used < n ? 64 - s->used : n;
    memcpy(s->buf + s->used, p, k);
    s->used += k;
    p += k;
    n -= k;
    if (s->used == 64) {
      block(s, s->buf);
      s->used = 0;
    }
  }
}

void tern__sha1_final(tern__sha1 *s, unsigned char out[20]) {
  uint64_t bits = s->len * 8;
  unsigned i;

  /* 0x80, zeros to 56 mod 64, then the length in bits, big-endian. */
  s->buf[s->used++] = 0x80;
  if (s->used > 56) {
    memset(s->buf + s->used, 0, 64 - s->used);
    block(s, s->buf);
    s->used = 0;
  }
  memset(s->buf + s->used, 0, 56 - s->used);
  for (i = 0; i < 8; i++)
    s->buf[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
  block(s, s->buf);
  for (i = 0; i < 20; i++)
    out[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t tern__base64_encode(char *out, const void *data, size_t n) {
  const unsigned char *p = data;
  size_t i, o = 0;
  for (i = 0; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    out[o++] = b64[v >> 18];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = b64[(v >> 6) & 63];
    out[o++] = b64[v & 63];
  }
  if (i < n) {
    uint32_t v =
        (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
    out[o++] = b64[v >> 18];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
    out[o++] = '=';
  }
  return o;
}

static int b64_value(char c) {
  const char *q = c != '\0' ? strchr(b64, c) : NULL;
  return q != NULL ? (int)(q - b64) : -1;
}

long tern__base64_decode(unsigned char *out, size_t cap, const char *p,
                         size_t n) {
  size_t i, o = 0;
  if (n % 4 != 0)
    return -1;
  for (i = 0; i < n; i += 4) {
    int v[4], k, pad = 0;
    uint32_t x = 0;
    for (k = 0; k < 4; k++) {
      if (p[i + k] == '=' && i + 4 == n && k >= 2) {
        v[k] = 0;
        pad++;
      } else if (pad > 0 || (v[k] = b64_value(p[i + k])) < 0) {
        return -1; /* a bad byte, or data after padding */
      }
      x = x << 6 | (uint32_t)v[k];
    }
    /* The bits padding leaves unused must be zero (canonical form). */
    if ((pad == 1 && (x & 0xff) != 0) || (pad == 2 && (x & 0xffff) != 0))
      return -1;
    if (o + 3 - (size_t)pad > cap)
      return -1;
    out[o++] = (unsigned char)(x >> 16);
    if (pad < 2)
      out[o++] = (unsigned char)(x >> 8);
    if (pad < 1)
      out[o++] = (unsigned char)x;
  }
  return (long)o;
}
