/* HTTP Basic authentication (tern.h, "Basic authentication"): the
 * credentials of an Authorization field (RFC 7617), base64 decoded with
 * no allocation, and a comparison whose time does not depend on where
 * two secrets differ. */
#include <string.h>

#include "core/request.h"
#include "core/text.h"

static int b64(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Base64 (RFC 4648 4, padding optional) into out: the length, or -1 for
 * a character outside the alphabet, bad padding, or no room. */
static long unbase64(const char *in, size_t len, char *out, size_t cap) {
  size_t i, n = 0, pad = 0;
  unsigned acc = 0, bits = 0;
  while (len > 0 && in[len - 1] == '=' && pad < 2) {
    len--;
    pad++;
  }
  if (pad > 0 && (len + pad) % 4 != 0)
    return -1;
  if (len % 4 == 1)
    return -1; /* six bits cannot end a byte */
  for (i = 0; i < len; i++) {
    int v = b64((unsigned char)in[i]);
    if (v < 0)
      return -1;
    acc = (acc << 6) | (unsigned)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (n == cap)
        return -1;
      out[n++] = (char)((acc >> bits) & 0xff);
    }
  }
  return (long)n;
}

int tern_basic_auth_parse(const char *v, size_t len, char *buf, size_t cap,
                          tern_header *cred) {
  size_t i = 0, j;
  long n;
  char *colon;
  if (v == NULL || buf == NULL || cred == NULL)
    return TERN_EINVAL;
  /* auth-scheme, case-insensitive, then one or more spaces. */
  if (len < 6 || (v[0] | 0x20) != 'b' || (v[1] | 0x20) != 'a' ||
      (v[2] | 0x20) != 's' || (v[3] | 0x20) != 'i' || (v[4] | 0x20) != 'c' ||
      v[5] != ' ')
    return TERN_ENOTFOUND;
  i = 6;
  while (i < len && v[i] == ' ')
    i++;
  j = len;
  while (j > i && (v[j - 1] == ' ' || v[j - 1] == '\t'))
    j--;
  {
    size_t k = j, bytes;
    while (k > i && v[k - 1] == '=')
      k--;
    bytes = (k - i) * 6 / 8; /* what the characters decode to, at most */
    if (bytes > cap)
      return TERN_ETOOBIG;
  }
  n = unbase64(v + i, j - i, buf, cap);
  if (n < 0)
    return TERN_EINVAL;
  colon = memchr(buf, ':', (size_t)n);
  if (colon == NULL)
    return TERN_EINVAL; /* RFC 7617: user-id ":" password */
  for (i = 0; i < (size_t)n; i++)
    if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
      return TERN_EINVAL; /* RFC 7617 2: no control characters */
  cred->name = buf;
  cred->name_len = (size_t)(colon - buf);
  cred->value = colon + 1;
  cred->value_len = (size_t)n - cred->name_len - 1;
  return 0;
}

int tern_request_basic_auth(const tern_request *r, char *buf, size_t cap,
                            tern_header *cred) {
  size_t i;
  if (r == NULL)
    return TERN_EINVAL;
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *h = &r->headers[i];
    if (h->name_len == 13 && tern__ieq_lit(h->name, 13, "authorization"))
      return tern_basic_auth_parse(h->value, h->value_len, buf, cap, cred);
  }
  return TERN_ENOTFOUND;
}

int tern_equal_secret(const void *a, size_t alen, const void *b, size_t blen) {
  const unsigned char *x = a, *y = b;
  unsigned diff = alen != blen;
  size_t i;
  if (x == NULL || y == NULL)
    return x == y && alen == blen;
  /* Every byte of the longer is looked at, whatever differs where: the
   * time tells the length at most. */
  for (i = 0; i < (alen > blen ? alen : blen); i++) {
    unsigned char p = i < alen ? x[i] : 0, q = i < blen ? y[i] : 0;
    diff |= (unsigned)(p ^ q);
  }
  return diff == 0;
}
