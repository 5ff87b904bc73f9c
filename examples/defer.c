/* defer: a handler keeps the request and another thread answers it later.
 *
 *   GET /slow?ms=N    answered "done after N ms" by a worker thread pool of
 *                     this program's own, not by the server's loop
 *
 * Usage: defer [--port N]   (prints "listening on PORT")
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tern.h"

static tern_server *server;

static void on_signal(int sig) {
  (void)sig;
  tern_stop(server, 5000);
}

static void *answer_later(void *arg) {
  tern_request *r = arg;
  size_t qlen;
  const char *q = tern_request_query(r, &qlen);
  long ms = q && qlen > 3 && memcmp(q, "ms=", 3) == 0 ? atol(q + 3) : 100;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  char body[64];
  int n;

  nanosleep(&ts, NULL);
  n = snprintf(body, sizeof(body), "done after %ld ms\n", ms);
  /* Any thread may respond: tern posts it to the request's worker. If the
   * client has gone meanwhile this returns TERN_ECLOSED, nothing more. */
  tern_respond(r, 200, NULL, 0, body, (size_t)n);
  return NULL;
}

static void slow(tern_request *r, void *user) {
  pthread_t t;
  (void)user;
  if (pthread_create(&t, NULL, answer_later, r) != 0) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  pthread_detach(t);
}

int main(int argc, char **argv) {
  int port = argc > 2 && strcmp(argv[1], "--port") == 0 ? atoi(argv[2]) : 0;
  int bound;

  if (tern_server_new(NULL, &server) != 0)
    return 1;
  tern_route(server, "GET", "/slow", slow, NULL);
  if (tern_listen(server, "127.0.0.1", port, &bound) != 0)
    return 1;
  printf("listening on %d\n", bound);
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  tern_run(server);
  tern_server_free(server);
  return 0;
}
