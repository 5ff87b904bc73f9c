/* tern_attach on the caller's own libuv loop: a real request over
 * loopback from a client thread, a graceful stop, and every allocation
 * returned once the server is freed. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "count_alloc.h"
#include "t.h"
#include "tern.h"

static tern_server *srv;
static int port;
static char reply[512];
static size_t reply_len;

static void hello(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 200, NULL, 0, "attached", 8);
}

static int connect_loopback(void) {
  struct sockaddr_in sa;
  struct timeval tv = {2, 0};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* A failure inside the server must never leave the client hanging. */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void *client(void *arg) {
  static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n"
                            "Connection: close\r\n\r\n";
  int fd = connect_loopback();
  ssize_t n;
  (void)arg;
  reply_len = 0;
  if (fd >= 0 && write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1))
    while ((n = read(fd, reply + reply_len, sizeof(reply) - 1 - reply_len)) > 0)
      reply_len += (size_t)n;
  if (fd >= 0)
    close(fd);
  tern_stop(srv, 1000); /* from a thread that is not the loop's */
  return NULL;
}

static void test_attach_serves_and_frees(void) {
  tern_settings s;
  uv_loop_t loop;
  pthread_t t;

  tern_settings_init(&s);
  s.workers = 1;
  ca_use(&s);
  T_ASSERT(uv_loop_init(&loop) == 0);
  T_ASSERT(tern_server_new(&srv, &s) == 0);
  T_ASSERT(tern_route(srv, "GET", "/", hello, NULL) == 0);
  T_ASSERT(tern_listen(srv, "127.0.0.1", 0, &port) == 0);
  T_ASSERT(port > 0);
  T_EQ_INT(tern_attach(srv, &loop), 0);
  T_EQ_INT(tern_attach(srv, &loop), TERN_ESTATE);
  T_ASSERT(pthread_create(&t, NULL, client, NULL) == 0);
  /* The loop returns once the stop has closed every handle of tern's. */
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  T_ASSERT(reply_len > 12 && memcmp(reply, "HTTP/1.1 200 ", 13) == 0);
  T_ASSERT(strstr(reply, "\r\n\r\nattached") != NULL);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
  T_EQ_INT(uv_loop_close(&loop), 0);
}

/* Fail the Nth allocation for every N across a server's whole life (new,
 * route, listen, attach, one request, stop, free): each call either
 * succeeds or reports an error, the request is answered or its
 * connection closed, the loop ends, and nothing leaks. */
static void test_every_allocation_may_fail(void) {
  long n, answered = 0, refused = 0;
  for (n = 0; n < 200; n++) {
    tern_settings s;
    uv_loop_t loop;
    pthread_t t;
    int rc;

    tern_settings_init(&s);
    s.workers = 1;
    ca_use(&s);
    T_ASSERT(uv_loop_init(&loop) == 0);
    ca_calls = 0;
    ca_fail_at = n;
    srv = NULL;
    rc = tern_server_new(&srv, &s);
    if (rc == 0)
      rc = tern_route(srv, "GET", "/", hello, NULL);
    if (rc == 0)
      rc = tern_listen(srv, "127.0.0.1", 0, &port);
    if (rc == 0)
      rc = tern_attach(srv, &loop);
    if (rc == 0) {
      T_ASSERT(pthread_create(&t, NULL, client, NULL) == 0);
      uv_run(&loop, UV_RUN_DEFAULT);
      pthread_join(t, NULL);
      if (reply_len > 13 && memcmp(reply, "HTTP/1.1 200 ", 13) == 0)
        answered++;
      else
        refused++;
    } else {
      T_ASSERT(rc == TERN_ENOMEM || rc == TERN_EIO);
    }
    tern_server_free(srv);
    ca_fail_at = -1;
    T_EQ_INT(ca_live, 0);
    T_EQ_INT(uv_loop_close(&loop), 0);
    if (ca_calls <= n)
      break; /* N is past the last allocation: all of them were tried */
  }
  T_ASSERT(n < 200);
  T_ASSERT(answered > 0 && refused > 0);
}

static void test_attach_needs_one_worker(void) {
  tern_settings s;
  tern_server *two;
  uv_loop_t loop;
  tern_settings_init(&s);
  s.workers = 2;
  T_ASSERT(uv_loop_init(&loop) == 0);
  T_ASSERT(tern_server_new(&two, &s) == 0);
  T_EQ_INT(tern_attach(two, &loop), TERN_EINVAL);
  tern_server_free(two);
  T_EQ_INT(uv_loop_close(&loop), 0);
}

static void test_errors_have_messages(void) {
  int e;
  for (e = TERN_ENOTFOUND; e <= TERN_OK; e++)
    T_ASSERT(strcmp(tern_strerror(e), "unknown error") != 0);
  T_ASSERT(strcmp(tern_strerror(-999), "unknown error") == 0);
  T_ASSERT(strcmp(tern_version(), "0.1.0") == 0);
}

int main(void) {
  T_RUN(test_attach_serves_and_frees);
  T_RUN(test_every_allocation_may_fail);
  T_RUN(test_attach_needs_one_worker);
  T_RUN(test_errors_have_messages);
  return T_DONE();
}
