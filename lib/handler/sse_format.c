/* Server-Sent Events framing (tern.h, "Server-Sent Events"): one event
 * as the WHATWG HTML standard's event-stream format reads it, sans-I/O,
 * no allocation. The streams and hubs are in lib/handler/sse.c. */
#include <string.h>

#include "tern.h"

/* A field value that cannot end its line early: no CR, LF or NUL. */
static int one_line(const char *s, size_t *len) {
  size_t i;
  for (i = 0; s[i] != '\0'; i++)
    if (s[i] == '\r' || s[i] == '\n')
      return 0;
  *len = i;
  return 1;
}

/* Append `n` bytes at *at when they fit below `cap`; count them always. */
static void put(char *out, size_t cap, size_t *at, const char *p, size_t n) {
  if (out != NULL && *at + n < cap)
    memcpy(out + *at, p, n);
  *at += n;
}

int tern_sse_format(char *out, size_t cap, size_t *len, const char *id,
                    const char *event, const char *data, size_t data_len) {
  size_t at = 0, idl = 0, evl = 0, i, start;

  if (len == NULL || (data_len > 0 && data == NULL) ||
      (id != NULL && !one_line(id, &idl)) ||
      (event != NULL && !one_line(event, &evl)))
    return TERN_EINVAL;
  if (id != NULL) {
    put(out, cap, &at, "id: ", 4);
    put(out, cap, &at, id, idl);
    put(out, cap, &at, "\n", 1);
  }
  if (event != NULL && evl > 0) {
    put(out, cap, &at, "event: ", 7);
    put(out, cap, &at, event, evl);
    put(out, cap, &at, "\n", 1);
  }
  /* Each line of the data is a data field; CR LF, CR and LF all end a
   * line, and the reader joins the fields with LF. */
  for (i = start = 0;; i++) {
    if (i == data_len || data[i] == '\r' || data[i] == '\n') {
      put(out, cap, &at, "data: ", 6);
      put(out, cap, &at, data + start, i - start);
      put(out, cap, &at, "\n", 1);
      if (i == data_len)
        break;
      if (data[i] == '\r' && i + 1 < data_len && data[i + 1] == '\n')
        i++;
      start = i + 1;
    }
  }
  put(out, cap, &at, "\n", 1);
  *len = at;
  if (out == NULL || at >= cap)
    return TERN_ETOOBIG;
  out[at] = '\0';
  return 0;
}
