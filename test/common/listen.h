/* Listening on 127.0.0.1 (an ephemeral port when *port is 0), as the
 * unit tests and fuzz targets that need a real listener do: over TLS,
 * or on QUIC with its options. Header-only: each test is its own
 * program. */
#ifndef TERN_TEST_LISTEN_H
#define TERN_TEST_LISTEN_H

#include "tern.h"

static inline int test_listen_tls(tern_server *srv, tern_tls *tls, int *port) {
  tern_listen_options lo;
  tern_listen_options_init(&lo);
  lo.host = "127.0.0.1";
  lo.tls = tls;
  return tern_listen_with(srv, &lo, port);
}

static inline int test_listen_quic(tern_server *srv, tern_tls *tls,
                                   const tern_quic_options *q, int *port) {
  tern_listen_options lo;
  tern_listen_options_init(&lo);
  lo.host = "127.0.0.1";
  lo.tls = tls;
  lo.quic = 1;
  lo.quic_options = q;
  return tern_listen_with(srv, &lo, port);
}

#endif
