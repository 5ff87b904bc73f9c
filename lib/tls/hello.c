/* The ticket in a ClientHello: see hello.h. Every length is checked
 * against what is left before it is used; nothing is copied. */
#include "tls/hello.h"

#define EXT_SESSION_TICKET 35
#define EXT_PRE_SHARED_KEY 41

static unsigned get16(const uint8_t *p) {
  return (unsigned)p[0] << 8 | p[1];
}

/* Skip a field of `w` length bytes (1 or 2) and that many bytes; the new
 * offset, or 0 when it does not fit (no field ends at offset 0). */
static size_t skip(const uint8_t *p, size_t n, size_t off, unsigned w) {
  size_t len;
  if (n - off < w)
    return 0;
  len = w == 1 ? p[off] : get16(p + off);
  off += w;
  if (n - off < len)
    return 0;
  return off + len;
}

int tern__tls_hello_ticket(const uint8_t *p, size_t n, const uint8_t **ticket,
                           size_t *len) {
  const uint8_t *t12 = NULL;
  size_t off = 2 + 32, end, t12_len = 0;

  if (n < off)
    return -1;
  if ((off = skip(p, n, off, 1)) == 0 || /* legacy_session_id */
      (off = skip(p, n, off, 2)) == 0 || /* cipher_suites */
      (off = skip(p, n, off, 1)) == 0 || /* legacy_compression_methods */
      n - off < 2)
    return -1;
  end = off + 2 + get16(p + off);
  if (end > n)
    return -1;
  off += 2;
  while (end - off >= 4) {
    unsigned type = get16(p + off), elen = get16(p + off + 2);
    const uint8_t *e = p + off + 4;
    off += 4;
    if (end - off < elen)
      return -1;
    off += elen;
    if (type == EXT_PRE_SHARED_KEY) {
      /* identities<7..2^16-1>: { identity<1..2^16-1>, age (4) } ... */
      unsigned ids, id;
      if (elen < 4)
        return -1;
      ids = get16(e);
      id = get16(e + 2);
      if (ids < 2 + id + 4 || ids > elen - 2u || id == 0)
        return -1;
      *ticket = e + 4;
      *len = id;
      return 0;
    }
    if (type == EXT_SESSION_TICKET && elen > 0) {
      t12 = e;
      t12_len = elen;
    }
  }
  if (t12 == NULL)
    return -1;
  *ticket = t12;
  *len = t12_len;
  return 0;
}
