/* The allocation-failure sweep over a server's whole life, shared by
 * test_attach (cleartext HTTP/1.1 and WebSocket) and test_tls_alloc (TLS
 * with each engine, HTTP/1.1 and HTTP/2): for every N, tern's Nth
 * allocation fails (count_alloc.h) from tern_server_new to
 * tern_server_free. Every call succeeds or reports TERN_ENOMEM or
 * TERN_EIO, the client is answered or its connection closed at once (a
 * client left to its own 2 s timeout fails the sweep), the loop ends, and
 * nothing leaks. Some runs must be answered and some refused. */
#ifndef TERN_TEST_SWEEP_H
#define TERN_TEST_SWEEP_H

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "count_alloc.h"
#include "loopback.h"
#include "t.h"
#include "tern.h"

typedef struct {
  const char *what; /* names the sweep in its summary line */
  /* The server's set-up on `s` (already counting): tern_server_new into
   * *srv, then everything up to tern_attach on `loop`, stopping at the
   * first error, which it returns. */
  int (*setup)(tern_server **srv, const tern_settings *s, uv_loop_t *loop,
               void *user);
  void *user;
  void *(*client)(void *arg); /* talks to the server, then stops it */
  void *client_arg;
  int (*served)(void); /* whether the client got its whole answer */
} sweep;

static void sweep_run(const sweep *sw, tern_server **srv, long max_n) {
  long n, answered = 0, refused = 0, setup = 0, waited = 0, first_wait = -1;
  for (n = 0; n < max_n; n++) {
    tern_settings s;
    uv_loop_t loop;
    pthread_t t;
    double t0;
    int rc;

    tern_settings_init(&s);
    s.workers = 1;
    ca_use(&s);
    T_ASSERT(uv_loop_init(&loop) == 0);
    ca_calls = 0;
    ca_fail_at = n;
    *srv = NULL;
    rc = sw->setup(srv, &s, &loop, sw->user);
    if (rc == 0) {
      t0 = sweep_now();
      T_ASSERT(pthread_create(&t, NULL, sw->client, sw->client_arg) == 0);
      uv_run(&loop, UV_RUN_DEFAULT);
      pthread_join(t, NULL);
      if (sweep_now() - t0 > 1.5) {
        printf("# N=%ld: the client waited %.1f s\n", n, sweep_now() - t0);
        if (waited++ == 0)
          first_wait = n;
      }
      if (sw->served())
        answered++;
      else
        refused++;
    } else {
      if (rc != TERN_ENOMEM && rc != TERN_EIO)
        T_FAIL("N=%ld: set-up returned %d (%s)", n, rc, tern_strerror(rc));
      setup++;
    }
    tern_server_free(*srv);
    ca_fail_at = -1;
    if (ca_live != 0)
      T_FAIL("N=%ld: %ld blocks leaked", n, (long)ca_live);
    T_EQ_INT(uv_loop_close(&loop), 0);
    if (ca_calls <= n)
      break; /* N is past the last allocation: all of them were tried */
  }
  printf("# %s: %ld allocations tried: %ld failed a set-up call, "
         "%ld answered, %ld refused\n",
         sw->what, n, setup, answered, refused);
  if (waited > 0)
    T_FAIL("%ld runs left the client waiting, the first N=%ld", waited,
           first_wait);
  T_ASSERT(n < max_n);
  T_ASSERT(answered > 0 && refused > 0);
}

#endif
