/* A reference UTF-8 validator for the WebSocket tests and fuzz target:
 * the definition (RFC 3629 3) spelled out slowly, to check the codec's
 * fast incremental DFA against. Returns 1 if p[0..n) is valid UTF-8. */
#ifndef TERN_TEST_REF_UTF8_H
#define TERN_TEST_REF_UTF8_H

#include <stddef.h>
#include <stdint.h>

static int ref_utf8(const unsigned char *p, size_t n) {
  size_t i = 0, k, len;
  uint32_t cp, min;

  while (i < n) {
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    if ((p[i] & 0xe0) == 0xc0) {
      len = 2, cp = p[i] & 0x1f, min = 0x80;
    } else if ((p[i] & 0xf0) == 0xe0) {
      len = 3, cp = p[i] & 0x0f, min = 0x800;
    } else if ((p[i] & 0xf8) == 0xf0) {
      len = 4, cp = p[i] & 0x07, min = 0x10000;
    } else {
      return 0;
    }
    if (n - i < len)
      return 0;
    for (k = 1; k < len; k++) {
      if ((p[i + k] & 0xc0) != 0x80)
        return 0;
      cp = cp << 6 | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += len;
  }
  return 1;
}

#endif
