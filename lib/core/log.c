/* Logging: format into a stack buffer and hand it to the embedder. */
#include <stdio.h>

#include "internal.h"

static const char *level_name(int level) {
  switch (level) {
  case TERN_LOG_ERROR:
    return "error";
  case TERN_LOG_WARN:
    return "warn";
  case TERN_LOG_INFO:
    return "info";
  default:
    return "debug";
  }
}

void tern__log(tern_server *srv, int level, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  int n;

  if (level > srv->s.log_level)
    return;
  va_start(ap, fmt);
  n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n >= sizeof(buf))
    n = sizeof(buf) - 1;
  if (srv->s.log != NULL)
    srv->s.log(level, buf, (size_t)n, srv->s.log_user);
  else
    fprintf(stderr, "tern %s: %.*s\n", level_name(level), n, buf);
}
