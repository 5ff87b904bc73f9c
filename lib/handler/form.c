/* Query strings and urlencoded forms (tern.h, "Query strings and forms"):
 * sans-I/O, no allocation. A string is pairs separated by '&' (empty
 * pieces skipped), each "name=value" or a bare "name" (an empty value);
 * names and values are percent-encoded, '+' standing for a space
 * (application/x-www-form-urlencoded, as the WHATWG URL standard and
 * HTML forms write it). */
#include <string.h>

#include "tern.h"

static int hex(unsigned char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = (unsigned char)(c | 0x20);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The byte at in[*i] decoded, *i past it: 0..255, or -1 for a '%' not
 * followed by two hex digits. */
static int next_byte(const char *in, size_t len, size_t *i) {
  unsigned char c = (unsigned char)in[*i];
  int h, l;
  if (c == '+') {
    (*i)++;
    return ' ';
  }
  if (c != '%') {
    (*i)++;
    return c;
  }
  if (len - *i < 3 || (h = hex((unsigned char)in[*i + 1])) < 0 ||
      (l = hex((unsigned char)in[*i + 2])) < 0)
    return -1;
  *i += 3;
  return h * 16 + l;
}

int tern_form_next(const char *s, size_t len, size_t *pos, tern_header *pair) {
  size_t i, start, eq;
  if (s == NULL || pos == NULL || pair == NULL)
    return 0;
  i = *pos;
  while (i < len && s[i] == '&')
    i++;
  if (i >= len) {
    *pos = len;
    return 0;
  }
  start = eq = i;
  while (i < len && s[i] != '&')
    i++;
  while (eq < i && s[eq] != '=')
    eq++;
  pair->name = s + start;
  pair->name_len = eq - start;
  pair->value = eq < i ? s + eq + 1 : s + i;
  pair->value_len = eq < i ? i - eq - 1 : 0;
  *pos = i;
  return 1;
}

int tern_form_decode(const char *in, size_t len, char *out, size_t cap,
                     size_t *out_len) {
  size_t i = 0, n = 0;
  if ((in == NULL && len > 0) || (out == NULL && cap > 0))
    return TERN_EINVAL;
  while (i < len) {
    int b = next_byte(in, len, &i);
    if (b < 0)
      return TERN_EINVAL;
    if (n == cap)
      return TERN_ETOOBIG;
    out[n++] = (char)b;
  }
  if (n < cap)
    out[n] = '\0';
  if (out_len != NULL)
    *out_len = n;
  return 0;
}

/* Whether encoded `enc` decodes to exactly name[0 .. name_len). */
static int name_eq(const char *enc, size_t len, const char *name,
                   size_t name_len) {
  size_t i = 0, n = 0;
  while (i < len) {
    int b = next_byte(enc, len, &i);
    if (b < 0 || n == name_len || (unsigned char)name[n] != b)
      return 0;
    n++;
  }
  return n == name_len;
}

int tern_form_get(const char *s, size_t len, const char *name, size_t name_len,
                  char *out, size_t cap, size_t *out_len) {
  size_t pos = 0;
  tern_header p;
  if ((s == NULL && len > 0) || (name == NULL && name_len > 0))
    return TERN_EINVAL;
  while (tern_form_next(s, len, &pos, &p))
    if (name_eq(p.name, p.name_len, name, name_len))
      return tern_form_decode(p.value, p.value_len, out, cap, out_len);
  return TERN_ENOTFOUND;
}
