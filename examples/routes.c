/* routes: path parameters, wildcards, JSON, and tern's own 404 and 405.
 *
 *   GET    /users/:id         {"id":"<id>"}
 *   DELETE /users/:id         204
 *   GET    /files/<rest>      the rest of the path, as text (a wildcard)
 *   anything else             404, or 405 with Allow when the path exists
 *
 * Usage: routes [--port N]   (prints "listening on PORT")
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

static tern_server *server;

static void on_signal(int sig) {
  (void)sig;
  tern_stop(server, 1000);
}

static void get_user(tern_request *r, void *user) {
  static const tern_header json[] = {
      {"content-type", 12, "application/json", 16}};
  char body[256];
  size_t len;
  const char *id = tern_request_param(r, "id", 2, &len);
  int n = snprintf(body, sizeof(body), "{\"id\":\"%.*s\"}", (int)len, id);
  (void)user;
  /* Keep the JSON valid: ids are plain segment bytes, quotes refused. */
  if (memchr(id, '"', len) || memchr(id, '\\', len) || n >= (int)sizeof(body))
    tern_respond(r, 400, NULL, 0, NULL, 0);
  else
    tern_respond(r, 200, json, 1, body, (size_t)n);
}

static void delete_user(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 204, NULL, 0, NULL, 0);
}

static void get_file(tern_request *r, void *user) {
  size_t len;
  const char *rest = tern_request_param(r, "*", 1, &len);
  (void)user;
  tern_respond(r, 200, NULL, 0, rest, len);
}

int main(int argc, char **argv) {
  int port = argc > 2 && strcmp(argv[1], "--port") == 0 ? atoi(argv[2]) : 0;
  int bound;

  if (tern_server_new(NULL, &server) != 0)
    return 1;
  tern_route(server, "GET", "/users/:id", get_user, NULL);
  tern_route(server, "DELETE", "/users/:id", delete_user, NULL);
  tern_route(server, "GET", "/files/*", get_file, NULL);
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
