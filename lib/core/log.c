/* Logging: format into a stack buffer and hand it to the embedder. */
#include <stdio.h>

#include "core/worker.h"

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

void tern__vlog(tern_log_fn fn, void *user, int level, const char *fmt,
                va_list ap) {
  char buf[512];
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  if (n < 0)
    return;
  if ((size_t)n >= sizeof(buf))
    n = sizeof(buf) - 1;
  if (fn != NULL)
    fn(level, buf, (size_t)n, user);
  else
    fprintf(stderr, "tern %s: %.*s\n", level_name(level), n, buf);
}

void tern__log(tern_server *srv, int level, const char *fmt, ...) {
  va_list ap;
  if (level > srv->s.log_level)
    return;
  va_start(ap, fmt);
  tern__vlog(srv->s.log, srv->s.log_user, level, fmt, ap);
  va_end(ap);
}
