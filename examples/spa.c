/* spa: a single-page application's server: its files, its client-side
 * routes, and the fields browsers want on every answer.
 *
 *   build/examples/spa DIR [PORT]   (DIR: the app's build output, with an
 *                                    index.html; PORT 8080 by default)
 *
 * Every file under DIR is served with its type, validators, ranges and
 * precompressed siblings (tern_static); a path that is no file, such as
 * /settings/profile, gets index.html (the fallback), so the app's router
 * takes it from there; hidden files and paths outside DIR are refused.
 * Security fields go on every answer from a file, and the response hook
 * adds the ones every answer needs, tern's own 404 included. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "tern.h"

static tern_server *srv;

static void on_signal(int sig) {
  (void)sig;
  tern_stop(srv, 5000);
}

static void every_answer(const tern_request *r, int status,
                         tern_response_head *head, void *user) {
  (void)status;
  (void)user;
  tern_response_head_add(head, "x-content-type-options", 22, "nosniff", 7);
  /* Over TLS, browsers should come back over TLS only. */
  if (r != NULL && tern_request_tls(r) != 0)
    tern_response_head_add(head, "strict-transport-security", 25,
                           "max-age=63072000", 16);
}

int main(int argc, char **argv) {
  static const tern_header file_fields[] = {
      TERN_HEADER("content-security-policy", "default-src 'self'"),
      TERN_HEADER("x-frame-options", "DENY"),
      TERN_HEADER("referrer-policy", "same-origin")};
  tern_static_options so;
  tern_static *files = NULL;
  int port = argc > 2 ? atoi(argv[2]) : 8080, rc;

  if (argc < 2) {
    fprintf(stderr, "usage: spa DIR [PORT]\n");
    return 2;
  }
  if ((rc = tern_server_new(NULL, &srv)) != 0) {
    fprintf(stderr, "spa: %s\n", tern_strerror(rc));
    return 1;
  }
  tern_static_options_init(&so);
  so.root = argv[1];
  so.cache_control = "no-cache"; /* revalidate: ETags make it cheap */
  so.flags = TERN_STATIC_PRECOMPRESSED;
  so.fallback = "index.html";
  so.headers = file_fields;
  so.nheaders = 3;
  if ((rc = tern_server_on_response(srv, every_answer, NULL)) != 0 ||
      (rc = tern_static_new(srv, &so, &files)) != 0 ||
      (rc = tern_static_mount(srv, "/", files)) != 0 ||
      (rc = tern_listen(srv, "127.0.0.1", port, &port)) != 0) {
    fprintf(stderr, "spa: %s\n", tern_strerror(rc));
    tern_server_free(srv);
    tern_static_free(files);
    return 1;
  }
  printf("listening on %d\n", port);
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rc = tern_run(srv);
  tern_server_free(srv);
  tern_static_free(files); /* after the server */
  return rc == 0 ? 0 : 1;
}
