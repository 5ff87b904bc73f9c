/* Tokens, lists and numbers in header values (lib/core/text.c). */
#ifndef TERN_CORE_TEXT_H
#define TERN_CORE_TEXT_H

#include <string.h>

#include "core/base.h"

/* ---- Text (lib/core/text.c) --------------------------------------- */

/* ASCII case-insensitive equality of n bytes. */
int tern__ieq(const char *a, const char *b, size_t n);
/* a[0..n) equals the lower-case C string `lower`, ignoring case. */
int tern__ieq_lit(const char *a, size_t n, const char *lower);
/* n bytes of src into dst with ASCII A-Z lower-cased (every other byte as
 * it is), eight at a time. */
void tern__lower_copy(char *dst, const char *src, size_t n);
/* Decimal / lower-case hex digits of v into buf (20 bytes suffice); returns
 * how many. */
size_t tern__fmt_u64(char *buf, uint64_t v);
size_t tern__fmt_hex(char *buf, uint64_t v);
/* Comma-separated lists (RFC 9110 5.6.1), shared by every protocol's
 * header handling. list_next steps to the next non-empty element,
 * trimming OWS (empty elements are skipped, as the RFC requires), and
 * returns 0 at the end; has_token says whether the list holds `tok`,
 * compared ASCII case-insensitively. */
int tern__list_next(const char *v, size_t n, size_t *pos, const char **e,
                    size_t *elen);
int tern__has_token(const char *v, size_t vlen, const char *tok, size_t toklen);
/* RFC 9110 5.6.2 tchar: a byte of a token (a field or parameter name, a
 * method, a cookie name). */
static inline int tern__is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
         (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}
/* A Host field's (or :authority's) host: its length without the port
 * (an IPv6 literal keeps its brackets) and a final dot. */
size_t tern__host_len(const char *h, size_t n);

/* The reason phrase for a status code ("Not Found"), "Unknown" for an
 * unregistered one (lib/core/status.c, generated from status.txt). */
const char *tern__reason(int status);
/* A status code's three digits (100 to 999) into out[0 .. 3), as the
 * status line and :status carry them. */
static inline void tern__status_digits(char *out, int status) {
  out[0] = (char)('0' + status / 100);
  out[1] = (char)('0' + status / 10 % 10);
  out[2] = (char)('0' + status % 10);
}

#endif
