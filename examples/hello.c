/* hello: the smallest complete tern program, a starting point to copy.
 * GET / answers "Hello, world!"; Ctrl-C stops it gracefully.
 *
 *   build/examples/hello [PORT]   (default 8080; 0: any free port)
 *
 * The server the demo, tests and benchmarks run is examples/reference/. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "tern.h"

static tern_server *srv;

static void on_signal(int sig) {
  (void)sig;
  tern_stop(srv, 5000); /* safe in a signal handler */
}

static void hello(tern_request *req, void *user) {
  (void)user;
  /* Any error here (the client gone, no memory) still finishes req. */
  tern_respond(req, 200, NULL, 0, "Hello, world!\n", 14);
}

int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 8080, rc;

  if ((rc = tern_server_new(NULL, &srv)) != 0) {
    fprintf(stderr, "hello: %s\n", tern_strerror(rc));
    return 1;
  }
  if ((rc = tern_route(srv, "GET", "/", hello, NULL)) != 0 ||
      (rc = tern_listen(srv, "127.0.0.1", port, &port)) != 0) {
    fprintf(stderr, "hello: %s\n", tern_strerror(rc));
    tern_server_free(srv);
    return 1;
  }
  printf("listening on %d\n", port);
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rc = tern_run(srv); /* until tern_stop() */
  if (rc != 0)
    fprintf(stderr, "hello: %s\n", tern_strerror(rc));
  tern_server_free(srv);
  return rc == 0 ? 0 : 1;
}
