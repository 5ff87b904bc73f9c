/* rest: a JSON REST service with CORS, the way a web app needs it.
 *
 *   GET    /todos       the list, as a JSON array
 *   POST   /todos       body {"title":"..."}: 201 with the new todo and a
 *                       Location field
 *   GET    /todos/:id   one todo, or 404
 *   DELETE /todos/:id   204, or 404
 *   OPTIONS on both     the CORS preflight: 204 with the allowed methods
 *
 * Every answer, tern's own 404 and 405 included, is JSON (the error
 * hook) and carries the CORS fields for an allowed Origin, with
 * X-Request-Id and X-Content-Type-Options (the response hook).
 *
 *   build/examples/rest [PORT] [ORIGIN]   (8080; https://app.example)
 *
 * The todos live in memory under a mutex: handlers run on several
 * workers. Titles are kept as the client sent them inside its JSON
 * string (escapes and all), so they go back out as valid JSON. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#define MAX_TODOS 256
#define MAX_TITLE 200

static tern_server *srv;
static const char *allowed_origin = "https://app.example";
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  unsigned long id;
  char title[MAX_TITLE + 1];
} todos[MAX_TODOS];
static size_t ntodos;
static unsigned long next_id = 1;
static atomic_ulong request_ids;
static const tern_header json[] = {
    TERN_HEADER("content-type", "application/json")};

static void on_signal(int sig) {
  (void)sig;
  tern_stop(srv, 5000);
}

/* The response hook: on every answer, tern's own included. */
static void common_fields(const tern_request *r, int status,
                          tern_response_head *head, void *user) {
  size_t n = 0;
  const char *origin = r ? tern_request_header(r, "origin", 6, &n) : NULL;
  char id[24];
  int len = snprintf(id, sizeof(id), "%lu", atomic_fetch_add(&request_ids, 1));
  (void)status;
  (void)user;
  tern_response_head_add(head, "x-request-id", 12, id, (size_t)len);
  tern_response_head_add(head, "x-content-type-options", 22, "nosniff", 7);
  if (origin != NULL && n == strlen(allowed_origin) &&
      memcmp(origin, allowed_origin, n) == 0) {
    tern_response_head_add(head, "access-control-allow-origin", 27, origin, n);
    tern_response_head_add(head, "vary", 4, "origin", 6);
  }
}

/* The error hook: tern's own answers (404, 405, 413, ...) in JSON. */
static void json_errors(const tern_error_info *e, void *user) {
  char body[96];
  int n = snprintf(body, sizeof(body), "{\"error\":%d,\"reason\":\"%s\"}\n",
                   e->status, e->reason);
  (void)user;
  tern_error_respond(e->reply, json, 1, body, (size_t)n);
}

static void answer(tern_request *r, int status, const char *body) {
  tern_respond(r, status, json, 1, body, strlen(body));
}

static void preflight(tern_request *r, void *user) {
  static const tern_header h[] = {
      TERN_HEADER("access-control-allow-methods", "GET, POST, DELETE"),
      TERN_HEADER("access-control-allow-headers", "content-type"),
      TERN_HEADER("access-control-max-age", "600")};
  (void)user;
  tern_respond(r, 204, h, 3, NULL, 0);
}

/* The title inside {"title":"..."}: its raw JSON string contents. */
static int title_of(const char *b, size_t n, char *out) {
  const char *k = NULL, *end = b + n, *p;
  size_t len;
  for (p = b; p + 7 <= end; p++)
    if (memcmp(p, "\"title\"", 7) == 0) {
      k = p + 7;
      break;
    }
  while (k != NULL && k < end && (*k == ' ' || *k == ':'))
    k++;
  if (k == NULL || k >= end || *k++ != '"')
    return -1;
  for (p = k; p < end && *p != '"'; p++)
    if (*p == '\\' && ++p == end)
      return -1;
    else if ((unsigned char)*p < 0x20)
      return -1;
  len = (size_t)(p - k);
  if (p >= end || len == 0 || len > MAX_TITLE)
    return -1;
  memcpy(out, k, len);
  out[len] = '\0';
  return 0;
}

static void list(tern_request *r, void *user) {
  char body[MAX_TODOS * (MAX_TITLE + 32) + 4];
  size_t i, at = 0;
  (void)user;
  body[at++] = '[';
  pthread_mutex_lock(&lock);
  for (i = 0; i < ntodos; i++)
    at += (size_t)snprintf(body + at, sizeof(body) - at,
                           "%s{\"id\":%lu,\"title\":\"%s\"}", i ? "," : "",
                           todos[i].id, todos[i].title);
  pthread_mutex_unlock(&lock);
  body[at++] = ']';
  body[at++] = '\n';
  tern_respond(r, 200, json, 1, body, at);
}

static void create(tern_request *r, void *user) {
  char title[MAX_TITLE + 1], body[MAX_TITLE + 48], loc[32];
  size_t n = 0;
  const char *b = tern_request_body(r, &n);
  unsigned long id = 0;
  (void)user;
  if (title_of(b, n, title) != 0) {
    answer(r, 400,
           "{\"error\":400,\"reason\":\"want {\\\"title\\\":\\\"...\\\"}\"}\n");
    return;
  }
  pthread_mutex_lock(&lock);
  if (ntodos < MAX_TODOS) {
    id = todos[ntodos].id = next_id++;
    memcpy(todos[ntodos++].title, title, strlen(title) + 1);
  }
  pthread_mutex_unlock(&lock);
  if (id == 0) {
    answer(r, 507, "{\"error\":507,\"reason\":\"full\"}\n");
    return;
  }
  snprintf(body, sizeof(body), "{\"id\":%lu,\"title\":\"%s\"}\n", id, title);
  tern_header h[2] = {TERN_HEADER("content-type", "application/json"),
                      {"location", 8, loc, 0}};
  h[1].value_len = (size_t)snprintf(loc, sizeof(loc), "/todos/%lu", id);
  tern_respond(r, 201, h, 2, body, strlen(body));
}

/* The index of todo :id, with the lock held; -1 when there is none. */
static long find(tern_request *r) {
  size_t n = 0, i;
  const char *p = tern_request_param(r, "id", 2, &n);
  char *end, buf[24];
  unsigned long id;
  if (n == 0 || n >= sizeof(buf))
    return -1;
  memcpy(buf, p, n);
  buf[n] = '\0';
  id = strtoul(buf, &end, 10);
  for (i = 0; *end == '\0' && i < ntodos; i++)
    if (todos[i].id == id)
      return (long)i;
  return -1;
}

static void get_one(tern_request *r, void *user) {
  char body[MAX_TITLE + 48];
  long i;
  (void)user;
  pthread_mutex_lock(&lock);
  i = find(r);
  if (i >= 0)
    snprintf(body, sizeof(body), "{\"id\":%lu,\"title\":\"%s\"}\n", todos[i].id,
             todos[i].title);
  pthread_mutex_unlock(&lock);
  answer(r, i >= 0 ? 200 : 404,
         i >= 0 ? body : "{\"error\":404,\"reason\":\"no such todo\"}\n");
}

static void delete_one(tern_request *r, void *user) {
  long i;
  (void)user;
  pthread_mutex_lock(&lock);
  if ((i = find(r)) >= 0)
    todos[i] = todos[--ntodos];
  pthread_mutex_unlock(&lock);
  if (i >= 0)
    tern_respond(r, 204, NULL, 0, NULL, 0);
  else
    answer(r, 404, "{\"error\":404,\"reason\":\"no such todo\"}\n");
}

int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 8080, rc;
  if (argc > 2)
    allowed_origin = argv[2];
  if ((rc = tern_server_new(NULL, &srv)) != 0) {
    fprintf(stderr, "rest: %s\n", tern_strerror(rc));
    return 1;
  }
  if ((rc = tern_server_on_response(srv, common_fields, NULL)) != 0 ||
      (rc = tern_server_on_error(srv, json_errors, NULL)) != 0 ||
      (rc = tern_route(srv, "GET", "/todos", list, NULL)) != 0 ||
      (rc = tern_route(srv, "POST", "/todos", create, NULL)) != 0 ||
      (rc = tern_route(srv, "OPTIONS", "/todos", preflight, NULL)) != 0 ||
      (rc = tern_route(srv, "GET", "/todos/:id", get_one, NULL)) != 0 ||
      (rc = tern_route(srv, "DELETE", "/todos/:id", delete_one, NULL)) != 0 ||
      (rc = tern_route(srv, "OPTIONS", "/todos/:id", preflight, NULL)) != 0 ||
      (rc = tern_listen(srv, "127.0.0.1", port, &port)) != 0) {
    fprintf(stderr, "rest: %s\n", tern_strerror(rc));
    tern_server_free(srv);
    return 1;
  }
  printf("listening on %d\n", port);
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rc = tern_run(srv);
  tern_server_free(srv);
  return rc == 0 ? 0 : 1;
}
