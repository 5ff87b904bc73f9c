/* tls: HTTPS and HTTP/3 with a certificate chain, and client
 * certificates when asked for.
 *
 *   build/examples/tls CHAIN.pem KEY.pem [PORT] [CLIENT_CA.pem]
 *
 * CHAIN.pem holds the server's certificate followed by the intermediates
 * that lead to a root the clients trust (the order a CA delivers them
 * in); tern sends them all. The same port serves HTTP/1.1 and HTTP/2
 * over TLS (ALPN) on TCP and HTTP/3 on UDP, announced to TCP clients with
 * Alt-Svc. With CLIENT_CA.pem, clients must present a certificate signed
 * by it (mutual TLS) and GET / names them. PORT is 8443 by default, 0
 * picks one. (Renewing certificates without a restart: add the new pair
 * and tern_tls_commit again, off the workers; the reference server does
 * it on SIGHUP.) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "tern.h"

static tern_server *srv;

static void on_signal(int sig) {
  (void)sig;
  tern_stop(srv, 5000);
}

static void hello(tern_request *r, void *user) {
  char body[400];
  size_t n = 0;
  const char *who = tern_request_tls_client_subject(r, &n);
  int p = tern_request_protocol(r), len;
  const char *proto = p == TERN_PROTO_HTTP3   ? "HTTP/3"
                      : p == TERN_PROTO_HTTP2 ? "HTTP/2"
                                              : "HTTP/1.1";
  (void)user;
  len = snprintf(body, sizeof(body), "hello over %s with %s%s%.*s\n", proto,
                 tern_request_tls_cipher(r), who ? ", client " : "", (int)n,
                 who ? who : "");
  tern_respond(r, 200, NULL, 0, body, (size_t)len);
}

int main(int argc, char **argv) {
  tern_listen_options lo;
  tern_tls *tls;
  int port = argc > 3 ? atoi(argv[3]) : 8443, rc;

  if (argc < 3) {
    fprintf(stderr, "usage: tls CHAIN.pem KEY.pem [PORT] [CLIENT_CA.pem]\n");
    return 2;
  }
  if ((rc = tern_server_new(NULL, &srv)) != 0 ||
      (rc = tern_tls_new(srv, &tls)) != 0 ||
      (rc = tern_tls_add_cert_file(tls, argv[1], argv[2])) != 0 ||
      (argc > 4 && (rc = tern_tls_set_client_ca_file(
                        tls, argv[4], TERN_TLS_CLIENT_REQUIRED)) != 0) ||
      (rc = tern_tls_commit(tls)) != 0 ||
      (rc = tern_route(srv, "GET", "/", hello, NULL)) != 0) {
    fprintf(stderr, "tls: %s\n", tern_strerror(rc));
    tern_server_free(srv);
    return 1;
  }
  tern_listen_options_init(&lo);
  lo.host = "127.0.0.1";
  lo.port = port;
  lo.tls = tls;
  if ((rc = tern_listen_with(srv, &lo, &port)) != 0) {
    fprintf(stderr, "tls: %s\n", tern_strerror(rc));
    tern_server_free(srv);
    return 1;
  }
  /* HTTP/3 on the UDP port of the same number: what Alt-Svc announces. */
  lo.port = port;
  lo.quic = 1;
  if ((rc = tern_listen_with(srv, &lo, NULL)) != 0)
    fprintf(stderr, "tls: no HTTP/3 (%s)\n", tern_strerror(rc));
  printf("listening on %d\n", port);
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rc = tern_run(srv);
  tern_server_free(srv);
  return rc == 0 ? 0 : 1;
}
