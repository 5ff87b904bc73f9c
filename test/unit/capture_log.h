/* A log callback for unit tests: it keeps the last line tern logged and
 * counts the lines, so that a test can check a refusal was explained. */
#ifndef TERN_TEST_CAPTURE_LOG_H
#define TERN_TEST_CAPTURE_LOG_H

#include <string.h>

static char last_log[512];
static int nlogs;

static void capture(int level, const char *msg, size_t len, void *user) {
  (void)level;
  (void)user;
  if (len >= sizeof(last_log))
    len = sizeof(last_log) - 1;
  memcpy(last_log, msg, len);
  last_log[len] = '\0';
  nlogs++;
}

#endif
