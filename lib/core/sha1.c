/* SHA-1 (FIPS 180-4), for the one place HTTP needs it: the WebSocket
 * handshake's Sec-WebSocket-Accept (RFC 6455 4.2.2), which is a fixed
 * transform, not a security property. It lives in the core so that a
 * WebSocket build needs no TLS library. */
#include <string.h>

#include "internal.h"

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
