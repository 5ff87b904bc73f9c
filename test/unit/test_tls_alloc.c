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
#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "count_alloc.h"
#include "sweep.h"
#include "t.h"
#include "test_cert.h"
#include "tern.h"
#include "../common/listen.h"

static tern_server *srv;
static int port;
static int want_version; /* GNUTLS_TLS1_3 or GNUTLS_TLS1_2 */
static char reply[1024];
static size_t reply_len;
static int got_version;
static int got_alpn; /* the protocol asked for agreed on */
static int h2_status;
static int h2_closed; /* the stream ended */

static int no_body; /* answer with an empty body */

static void hello(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 200, NULL, 0, "attached", no_body ? 0 : 8);
}

/* HTTP/2 from the client side with nghttp2's client session (its own
 * malloc, not tern's): one GET, whose status and body are noted. */
static ssize_t h2_send(nghttp2_session *h, const uint8_t *data, size_t len,
                       int flags, void *user) {
  ssize_t n;
  (void)h;
  (void)flags;
  do
    n = gnutls_record_send(user, data, len);
  while (n == GNUTLS_E_INTERRUPTED);
  return n < 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : n;
}

static int h2_header(nghttp2_session *h, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user) {
  (void)h;
  (void)flags;
  (void)user;
  if (f->hd.type == NGHTTP2_HEADERS && namelen == 7 &&
      memcmp(name, ":status", 7) == 0 && valuelen == 3)
    h2_status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + value[2] - '0';
  return 0;
}

static int h2_data(nghttp2_session *h, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *user) {
  (void)h;
  (void)flags;
  (void)id;
  (void)user;
  if (len > sizeof(reply) - 1 - reply_len)
    len = sizeof(reply) - 1 - reply_len;
  memcpy(reply + reply_len, data, len);
  reply_len += len;
  return 0;
}

static int h2_close(nghttp2_session *h, int32_t id, uint32_t code, void *user) {
  (void)h;
  (void)id;
  (void)code;
  (void)user;
  h2_closed = 1;
  return 0;
}

#define H2_NV(n, v)                                                            \
  {                                                                            \
    (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1,              \
        NGHTTP2_NV_FLAG_NONE                                                   \
  }

static void h2_exchange(gnutls_session_t s) {
  nghttp2_nv nv[] = {H2_NV(":method", "GET"), H2_NV(":scheme", "https"),
                     H2_NV(":authority", "localhost"), H2_NV(":path", "/")};
  nghttp2_session_callbacks *cb;
  nghttp2_session *h;
  uint8_t buf[4096];
  int i;
  if (nghttp2_session_callbacks_new(&cb) != 0)
    return;
  nghttp2_session_callbacks_set_send_callback(cb, h2_send);
  nghttp2_session_callbacks_set_on_header_callback(cb, h2_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_close);
  if (nghttp2_session_client_new(&h, cb, s) == 0) {
    nghttp2_submit_settings(h, NGHTTP2_FLAG_NONE, NULL, 0);
    nghttp2_submit_request(h, NULL, nv, sizeof(nv) / sizeof(nv[0]), NULL, NULL);
    /* Bounded, as the HTTP/1.1 exchange is. */
    for (i = 0; i < 64 && !h2_closed; i++) {
      ssize_t n;
      if (nghttp2_session_send(h) != 0)
        break;
      n = gnutls_record_recv(s, buf, sizeof(buf));
      if (n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN)
        continue;
      if (n <= 0 || nghttp2_session_mem_recv(h, buf, (size_t)n) < 0)
        break;
    }
    nghttp2_session_del(h);
  }
  nghttp2_session_callbacks_del(cb);
}

/* A TLS client on a blocking socket: handshake (ALPN http/1.1, or h2
 * when `arg` is not NULL; SNI localhost; the certificate not verified:
 * the sweep is about the server's memory, not trust), one GET, the
 * answer read to its end. Every wait is bounded by 2 s. */
static void *tls_client(void *arg) {
  static const char req[] = "GET / HTTP/1.1\r\nHost: localhost\r\n"
                            "Connection: close\r\n\r\n";
  gnutls_certificate_credentials_t cred = NULL;
  gnutls_session_t s = NULL;
  gnutls_datum_t alpn = {(unsigned char *)"http/1.1", 8}, sel;
  const int h2 = arg != NULL;
  const char *prio = want_version == GNUTLS_TLS1_3
                         ? "NORMAL:-VERS-ALL:+VERS-TLS1.3"
                         : "NORMAL:-VERS-ALL:+VERS-TLS1.2";
  int fd = sweep_connect(port), rc, i;
  reply_len = 0;
  got_version = 0;
  got_alpn = 0;
  h2_status = h2_closed = 0;
  if (h2)
    alpn = (gnutls_datum_t){(unsigned char *)"h2", 2};
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
  got_alpn = gnutls_alpn_get_selected_protocol(s, &sel) == 0 &&
             sel.size == alpn.size &&
             memcmp(sel.data, alpn.data, sel.size) == 0;
  /* With a record timeout GnuTLS waits by poll and says
   * GNUTLS_E_TIMEDOUT; GNUTLS_E_AGAIN is then a TLS 1.3 session ticket
   * taken, not a wait. */
  gnutls_record_set_timeout(s, 2000);
  if (h2) {
    h2_exchange(s);
    goto done;
  }
  do
    rc = (int)gnutls_record_send(s, req, sizeof(req) - 1);
  while (rc == GNUTLS_E_INTERRUPTED);
  if (rc != (int)sizeof(req) - 1)
    goto done;
  /* Bounded: the server closes after its answer (Connection: close). */
  for (i = 0; i < 64 && reply_len < sizeof(reply) - 1; i++) {
    ssize_t n =
        gnutls_record_recv(s, reply + reply_len, sizeof(reply) - 1 - reply_len);
    if (n == GNUTLS_E_INTERRUPTED || n == GNUTLS_E_AGAIN)
      continue;
    if (n <= 0)
      break; /* close_notify, a close without it, an error or a timeout */
    reply_len += (size_t)n;
  }
done:
  reply[reply_len] = '\0';
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

static int h2_served(void) {
  if (!h2_closed || h2_status != 200 || reply_len != (no_body ? 0 : 8) ||
      memcmp(reply, "attached", reply_len) != 0)
    return 0;
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

/* nghttp2 before 1.65.0 frees a DATA frame's queue item when the
 * allocation that schedules it fails, but leaves the stream pointing at
 * it (with RFC 7540 priorities off, as tern has them), so the session's
 * end frees it again. Over HTTP/2 the sweep answers without a body
 * there: the failure is nghttp2's and is fixed upstream. */
static int nghttp2_frees_data_twice(void) {
  return nghttp2_version(0)->version_num < 0x014100;
}

/* The TLS set-up of the sweep (sweep.h): new, the certificate set on
 * the engine asked for, route, listen, attach. */
typedef struct {
  int engine, min_version;
} tls_setup;

static int setup_tls(tern_server **out, const tern_settings *st,
                     uv_loop_t *loop, void *user) {
  const tls_setup *p = user;
  tern_tls *tls = NULL;
  int rc = 0;
  SETUP(tern_server_new(st, out));
  SETUP(tern_tls_new(*out, &tls));
  if (rc == 0) {
    /* Neither allocates: they must not fail. */
    T_EQ_INT(tern_tls_set_engine(tls, p->engine), 0);
    T_EQ_INT(tern_tls_set_min_version(tls, p->min_version), 0);
  }
  SETUP(tern_tls_add_cert_mem(tls, cert_pem, sizeof(cert_pem) - 1, key_pem,
                              sizeof(key_pem) - 1));
  SETUP(tern_tls_commit(tls));
  SETUP(tern_route(*out, "GET", "/", hello, NULL));
  SETUP(test_listen_tls(*out, tls, &port));
  SETUP(tern_attach(*out, loop));
  return rc;
}

static void sweep_tls(int engine, int min_version, int h2, long max_n) {
  tls_setup p = {engine, min_version};
  char what[64];
  sweep sw = {.what = what,
              .setup = setup_tls,
              .user = &p,
              .client = tls_client,
              .client_arg = h2 ? &port : NULL,
              .served = h2 ? h2_served : tls_served};
  no_body = h2 && nghttp2_frees_data_twice();
  snprintf(what, sizeof(what), "%s, %s",
           engine == TERN_TLS_ENGINE_GNUTLS ? "gnutls" : "mbedtls",
           h2 ? (no_body ? "h2 (no body)" : "h2") : "http/1.1");
  sweep_run(&sw, &srv, max_n);
}

/* Is the engine built into this library? */
static int have_engine(int engine) {
  tern_server *s;
  tern_tls *tls;
  int rc;
  T_ASSERT(tern_server_new(NULL, &s) == 0);
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
  sweep_tls(TERN_TLS_ENGINE_GNUTLS, TERN_TLS_1_3, 0, 2000);
  sweep_tls(TERN_TLS_ENGINE_GNUTLS, TERN_TLS_1_3, 1, 2000);
}

/* mbedTLS, TLS 1.2 (all it speaks). */
static void test_mbedtls_every_allocation_may_fail(void) {
  if (!have_engine(TERN_TLS_ENGINE_MBEDTLS)) {
    printf("# mbedTLS engine not built: skipped\n");
    return;
  }
  want_version = GNUTLS_TLS1_2;
  sweep_tls(TERN_TLS_ENGINE_MBEDTLS, TERN_TLS_1_2, 0, 2000);
  sweep_tls(TERN_TLS_ENGINE_MBEDTLS, TERN_TLS_1_2, 1, 2000);
}

int main(void) {
  T_RUN(test_gnutls_every_allocation_may_fail);
  T_RUN(test_mbedtls_every_allocation_may_fail);
  return T_DONE();
}

#endif
