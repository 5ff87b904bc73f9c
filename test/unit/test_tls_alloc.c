/* The allocation-failure sweep over TLS listeners, once per engine: for
 * every N, tern's Nth allocation fails across a TLS server's whole life
 * (new, the certificate set, route, listen, attach, a GnuTLS client's
 * handshake and request, stop, free). Every call succeeds or reports an
 * error tern.h documents, the client is answered or its connection
 * closed, the loop ends, and nothing leaks. The engines' own allocations
 * (GnuTLS's and mbedTLS's, outside tern's hook) are not failed here:
 * docs/tls-http2.md measures them. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#ifndef TERN_HAVE_GNUTLS
/* The client speaks GnuTLS: a build without it has nothing to run. */
int main(void) {
  printf("1..0 # SKIP the TLS client needs GnuTLS\n");
  return 0;
}
#else

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "count_alloc.h"
#include "t.h"
#include "tern.h"

/* An ECDSA P-256 certificate for "localhost" (self-signed, valid until
 * 2126) and its key, made once with openssl req -x509 -newkey ec. */
static const char cert_pem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkzCCATqgAwIBAgITamonVJJklx6yVDlD37n8EPvrBzAKBggqhkjOPQQDAjAU\n"
    "MRIwEAYDVQQDDAlsb2NhbGhvc3QwIBcNMjYxMjAyMDMxOTI2WhgPMjEyNjExMDgw\n"
    "MzE5MjZaMBQxEjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEGCCqGSM49\n"
    "AwEHA0IABGZ+OjLpjD5rHy5583EhErrtR9kSJGg1AnFNJD6Fu77o4BHYgGMlb/0D\n"
    "X+PX+jSrOsCwGZAvopk4Ds1rTJW0ZLWjaTBnMB0GA1UdDgQWBBRy3YYEdZKOeQF7\n"
    "KIJVmXcGKmtXdzAfBgNVHSMEGDAWgBRy3YYEdZKOeQF7KIJVmXcGKmtXdzAPBgNV\n"
    "HRMBAf8EBTADAQH/MBQGA1UdEQQNMAuCCWxvY2FsaG9zdDAKBggqhkjOPQQDAgNH\n"
    "ADBEAiA/cum553DklMcm1qJcnZ2aqjuMsZ7oxJWfvaT3bfiz+QIgKrLl+KfNs59U\n"
    "dxA96lTXSr1zOB+Qz49W7xBUCaryQVo=\n"
    "-----END CERTIFICATE-----\n";

static const char key_pem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgov1D2TlwChwI9JoB\n"
    "NJb3jBgnOS2OrXafySoX7tuERHahRANCAARmfjoy6Yw+ax8uefNxIRK67UfZEiRo\n"
    "NQJxTSQ+hbu+6OAR2IBjJW/9A1/j1/o0qzrAsBmQL6KZOA7Na0yVtGS1\n"
    "-----END PRIVATE KEY-----\n";

static tern_server *srv;
static int port;
static int want_version; /* GNUTLS_TLS1_3 or GNUTLS_TLS1_2 */
static char reply[1024];
static size_t reply_len;
static int got_version;
static int got_alpn; /* http/1.1 agreed on */

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
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* A TLS client on a blocking socket: handshake (ALPN http/1.1, SNI
 * localhost, the certificate not verified: the sweep is about the
 * server's memory, not trust), one GET, the answer read to its end.
 * Every wait is bounded by 2 s. */
static void *tls_client(void *arg) {
  static const char req[] = "GET / HTTP/1.1\r\nHost: localhost\r\n"
                            "Connection: close\r\n\r\n";
  gnutls_certificate_credentials_t cred = NULL;
  gnutls_session_t s = NULL;
  gnutls_datum_t alpn = {(unsigned char *)"http/1.1", 8}, sel;
  const char *prio = want_version == GNUTLS_TLS1_3
                         ? "NORMAL:-VERS-ALL:+VERS-TLS1.3"
                         : "NORMAL:-VERS-ALL:+VERS-TLS1.2";
  int fd = connect_loopback(), rc, i;
  (void)arg;
  reply_len = 0;
  got_version = 0;
  got_alpn = 0;
  if (fd < 0 || gnutls_certificate_allocate_credentials(&cred) < 0 ||
      gnutls_init(&s, GNUTLS_CLIENT | GNUTLS_NO_SIGNAL) < 0)
    goto done;
  if (gnutls_priority_set_direct(s, prio, NULL) < 0 ||
      gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred) < 0 ||
      gnutls_server_name_set(s, GNUTLS_NAME_DNS, "localhost", 9) < 0 ||
      gnutls_alpn_set_protocols(s, &alpn, 1, 0) < 0)
    goto done;
  gnutls_transport_set_int(s, fd);
  /* The handshake waits with poll for its own timeout, not SO_RCVTIMEO. */
  gnutls_handshake_set_timeout(s, 2000);
  do
    rc = gnutls_handshake(s);
  while (rc == GNUTLS_E_INTERRUPTED);
  if (rc < 0)
    goto done;
  got_version = gnutls_protocol_get_version(s);
  got_alpn = gnutls_alpn_get_selected_protocol(s, &sel) == 0 && sel.size == 8 &&
             memcmp(sel.data, "http/1.1", 8) == 0;
  do
    rc = (int)gnutls_record_send(s, req, sizeof(req) - 1);
  while (rc == GNUTLS_E_INTERRUPTED);
  if (rc != (int)sizeof(req) - 1)
    goto done;
  /* Bounded: the server closes after its answer (Connection: close). With
   * a record timeout GnuTLS waits by poll and says GNUTLS_E_TIMEDOUT;
   * GNUTLS_E_AGAIN is then a TLS 1.3 session ticket taken, not a wait. */
  gnutls_record_set_timeout(s, 2000);
  for (i = 0; i < 64 && reply_len < sizeof(reply) - 1; i++) {
    ssize_t n =
        gnutls_record_recv(s, reply + reply_len, sizeof(reply) - 1 - reply_len);
    if (n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN)
      continue;
    if (n <= 0)
      break; /* close_notify, a close without it, an error or a timeout */
    reply_len += (size_t)n;
  }
  reply[reply_len] = '\0';
done:
  if (s != NULL)
    gnutls_deinit(s);
  if (cred != NULL)
    gnutls_certificate_free_credentials(cred);
  if (fd >= 0)
    close(fd);
  tern_stop(srv, 1000); /* from a thread that is not the loop's */
  return NULL;
}

static int tls_served(void) {
  if (reply_len <= 13 || memcmp(reply, "HTTP/1.1 200 ", 13) != 0 ||
      strstr(reply, "\r\n\r\nattached") == NULL)
    return 0;
  /* Answered means over the version and protocol asked for. */
  T_EQ_INT(got_version, want_version);
  T_ASSERT(got_alpn);
  return 1;
}

/* An error from a call of the sweep: out of memory, or what tern.h
 * documents for the call beside it (TERN_EIO: a system call failed). */
#define SETUP(call)                                                            \
  do {                                                                         \
    if (rc == 0 && (rc = (call)) != 0 && rc != TERN_ENOMEM && rc != TERN_EIO)  \
      T_FAIL("%s returned %d (%s)", #call, rc, tern_strerror(rc));             \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fail the Nth allocation for every N up to `max_n`. A run whose client
 * had to wait for its own timeout (the server neither answered nor
 * closed) is a failure too: a refused connection must be closed at once. */
static void sweep_tls(int engine, int min_version, long max_n) {
  long n, answered = 0, refused = 0, setup = 0, waited = 0, first_wait = -1;
  for (n = 0; n < max_n; n++) {
    tern_settings s;
    tern_tls *tls = NULL;
    uv_loop_t loop;
    pthread_t t;
    double t0;
    int rc = 0;

    tern_settings_init(&s);
    s.workers = 1;
    ca_use(&s);
    T_ASSERT(uv_loop_init(&loop) == 0);
    ca_calls = 0;
    ca_fail_at = n;
    srv = NULL;
    SETUP(tern_server_new(&srv, &s));
    SETUP(tern_tls_new(srv, &tls));
    if (rc == 0) {
      /* Neither allocates: they must not fail. */
      T_EQ_INT(tern_tls_set_engine(tls, engine), 0);
      T_EQ_INT(tern_tls_set_min_version(tls, min_version), 0);
    }
    SETUP(tern_tls_add_cert_mem(tls, cert_pem, sizeof(cert_pem) - 1, key_pem,
                                sizeof(key_pem) - 1));
    SETUP(tern_tls_commit(tls));
    SETUP(tern_route(srv, "GET", "/", hello, NULL));
    SETUP(tern_listen_tls(srv, "127.0.0.1", 0, tls, &port));
    SETUP(tern_attach(srv, &loop));
    if (rc == 0) {
      t0 = now_s();
      T_ASSERT(pthread_create(&t, NULL, tls_client, NULL) == 0);
      uv_run(&loop, UV_RUN_DEFAULT);
      pthread_join(t, NULL);
      if (now_s() - t0 > 1.5) {
        printf("# N=%ld: the client waited %.1f s\n", n, now_s() - t0);
        if (waited++ == 0)
          first_wait = n;
      }
      if (tls_served())
        answered++;
      else
        refused++;
    } else {
      setup++;
    }
    tern_server_free(srv);
    ca_fail_at = -1;
    if (ca_live != 0)
      T_FAIL("N=%ld: %ld blocks leaked", n, (long)ca_live);
    T_EQ_INT(uv_loop_close(&loop), 0);
    if (ca_calls <= n)
      break; /* N is past the last allocation: all of them were tried */
  }
  printf("# %s: %ld allocations tried: %ld failed a setup call, "
         "%ld answered, %ld refused\n",
         engine == TERN_TLS_ENGINE_GNUTLS ? "gnutls" : "mbedtls", n, setup,
         answered, refused);
  if (waited > 0)
    T_FAIL("%ld runs left the client waiting, the first N=%ld", waited,
           first_wait);
  T_ASSERT(n < max_n);
  T_ASSERT(answered > 0 && refused > 0);
}

/* Is the engine built into this library? */
static int have_engine(int engine) {
  tern_server *s;
  tern_tls *tls;
  int rc;
  T_ASSERT(tern_server_new(&s, NULL) == 0);
  T_ASSERT(tern_tls_new(s, &tls) == 0);
  rc = tern_tls_set_engine(tls, engine);
  tern_server_free(s);
  return rc == 0;
}

/* GnuTLS, TLS 1.3 only. */
static void test_gnutls_every_allocation_may_fail(void) {
  if (!have_engine(TERN_TLS_ENGINE_GNUTLS)) {
    printf("# GnuTLS engine not built: skipped\n");
    return;
  }
  want_version = GNUTLS_TLS1_3;
  sweep_tls(TERN_TLS_ENGINE_GNUTLS, TERN_TLS_1_3, 2000);
}

/* mbedTLS, TLS 1.2 (all it speaks). */
static void test_mbedtls_every_allocation_may_fail(void) {
  if (!have_engine(TERN_TLS_ENGINE_MBEDTLS)) {
    printf("# mbedTLS engine not built: skipped\n");
    return;
  }
  want_version = GNUTLS_TLS1_2;
  sweep_tls(TERN_TLS_ENGINE_MBEDTLS, TERN_TLS_1_2, 2000);
}

int main(void) {
  T_RUN(test_gnutls_every_allocation_may_fail);
  T_RUN(test_mbedtls_every_allocation_may_fail);
  return T_DONE();
}

#endif
