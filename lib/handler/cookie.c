/* Cookies (tern.h, "Cookies"): the pairs of a Cookie field read as
 * views, and a Set-Cookie value built with its name and value checked
 * (RFC 6265 4.1.1), sans-I/O, no allocation. */
#include <string.h>

#include "core/request.h"
#include "core/text.h"

/* RFC 6265 4.1.1 cookie-octet: US-ASCII but CTLs, whitespace, DQUOTE,
 * comma, semicolon and backslash. */
static int cookie_octet(unsigned char c) {
  return c == 0x21 || (c >= 0x23 && c <= 0x2b) || (c >= 0x2d && c <= 0x3a) ||
         (c >= 0x3c && c <= 0x5b) || (c >= 0x5d && c <= 0x7e);
}

int tern_cookie_next(const char *s, size_t len, size_t *pos,
                     tern_header *pair) {
  size_t i, start, end, eq;
  if (s == NULL || pos == NULL || pair == NULL)
    return 0;
  for (i = *pos; i < len;) {
    while (i < len && (s[i] == ';' || s[i] == ' ' || s[i] == '\t'))
      i++;
    start = i;
    while (i < len && s[i] != ';')
      i++;
    end = i;
    while (end > start && (s[end - 1] == ' ' || s[end - 1] == '\t'))
      end--;
    for (eq = start; eq < end && s[eq] != '='; eq++)
      ;
    if (eq == end || eq == start)
      continue; /* no '=', or no name: not a cookie-pair, passed over */
    pair->name = s + start;
    pair->name_len = eq - start;
    while (pair->name_len > 0 && (pair->name[pair->name_len - 1] == ' ' ||
                                  pair->name[pair->name_len - 1] == '\t'))
      pair->name_len--;
    pair->value = s + eq + 1;
    pair->value_len = end - eq - 1;
    /* RFC 6265 5.2: whitespace around the name and the value goes. */
    while (pair->value_len > 0 &&
           (pair->value[0] == ' ' || pair->value[0] == '\t')) {
      pair->value++;
      pair->value_len--;
    }
    if (pair->value_len >= 2 && pair->value[0] == '"' &&
        pair->value[pair->value_len - 1] == '"') {
      pair->value++; /* a quoted value: the quotes are not part of it */
      pair->value_len -= 2;
    }
    *pos = i;
    return 1;
  }
  *pos = len;
  return 0;
}

const char *tern_request_cookie(const tern_request *r, const char *name,
                                size_t name_len, size_t *len) {
  size_t i;
  if (r == NULL || name == NULL)
    return NULL;
  /* Every Cookie field (HTTP/1.1 may repeat it; HTTP/2 and HTTP/3 crumbs
   * arrive joined into one). */
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *h = &r->headers[i];
    size_t pos = 0;
    tern_header p;
    if (h->name_len != 6 || !tern__ieq_lit(h->name, 6, "cookie"))
      continue;
    while (tern_cookie_next(h->value, h->value_len, &pos, &p))
      if (p.name_len == name_len && memcmp(p.name, name, name_len) == 0) {
        if (len != NULL)
          *len = p.value_len;
        return p.value;
      }
  }
  return NULL;
}

int tern_cookie_format(char *out, size_t cap, size_t *out_len, const char *name,
                       size_t name_len, const char *value, size_t value_len,
                       const char *attrs) {
  size_t i, alen = attrs != NULL ? strlen(attrs) : 0;
  size_t need = name_len + 1 + value_len + (alen > 0 ? 2 + alen : 0);
  if (out == NULL || name == NULL || (value == NULL && value_len > 0) ||
      name_len == 0)
    return TERN_EINVAL;
  for (i = 0; i < name_len; i++) /* a token (RFC 9110 5.6.2) */
    if (!tern__is_tchar((unsigned char)name[i]))
      return TERN_EINVAL;
  for (i = 0; i < value_len; i++)
    if (!cookie_octet((unsigned char)value[i]))
      return TERN_EINVAL;
  for (i = 0; i < alen; i++) /* no CR, LF or other control in a field */
    if ((unsigned char)attrs[i] < 0x20 || attrs[i] == 0x7f)
      return TERN_EINVAL;
  if (need >= cap)
    return TERN_ETOOBIG;
  memcpy(out, name, name_len);
  out[name_len] = '=';
  if (value_len > 0)
    memcpy(out + name_len + 1, value, value_len);
  if (alen > 0) {
    memcpy(out + name_len + 1 + value_len, "; ", 2);
    memcpy(out + name_len + 3 + value_len, attrs, alen);
  }
  out[need] = '\0';
  if (out_len != NULL)
    *out_len = need;
  return 0;
}
