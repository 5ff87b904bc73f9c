/* h3core: the HTTP/3 client set-up that tern's two QUIC clients share,
 * perf/load/h3load.c (load) and test/net/http3/h3client.c (tests that
 * misbehave on purpose): a GnuTLS session for QUIC, the ngtcp2 callbacks
 * that the crypto helper and GnuTLS's random numbers fill, the client
 * connection with fresh connection IDs, and the HTTP/3 connection with
 * its control and QPACK streams. Each client adds its own callbacks and
 * transport parameters; nothing here keeps state. ngtcp2 0.12 and
 * nghttp3 0.8, as Debian 12 ships them. */
#ifndef TERN_H3CORE_H
#define TERN_H3CORE_H

#include <gnutls/gnutls.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <sys/socket.h>

/* ngtcp2's log_printf: one line on stderr. */
void h3core_log(void *user, const char *fmt, ...);

/* A client session in *tls: TLS 1.3 only, early data allowed, ALPN h3
 * (mandatory), server name `sni` (`snilen` bytes), credentials `cred`,
 * and `ref` (get_conn and user_data set by the caller) as the session's
 * pointer for the crypto helper. No certificate is verified: the tests
 * and the benchmarks run on self-signed ones. 0 or -1. */
int h3core_tls(gnutls_session_t *tls, gnutls_certificate_credentials_t cred,
               const char *sni, size_t snilen, ngtcp2_crypto_conn_ref *ref);

/* `cb` zeroed, then the crypto helper's callbacks (Retry included),
 * random bytes and new connection IDs from GnuTLS. */
void h3core_quic_callbacks(ngtcp2_callbacks *cb);

/* A client connection in *out to `remote` from `local`, with random
 * connection IDs (18-byte destination, 17-byte source), QUIC v1, `user`
 * as its user data and `tls` as its TLS handle. 0 or -1. */
int h3core_quic_conn(ngtcp2_conn **out, const struct sockaddr *local,
                     socklen_t locallen, const struct sockaddr *remote,
                     socklen_t remotelen, const ngtcp2_callbacks *cb,
                     const ngtcp2_settings *st,
                     const ngtcp2_transport_params *tp, void *user,
                     gnutls_session_t tls);

/* An HTTP/3 client connection in *out over `q`, with a 4 KiB QPACK
 * dynamic table and 100 blocked streams, and its control and QPACK
 * encoder and decoder streams opened and bound. 0 or -1. */
int h3core_h3_conn(nghttp3_conn **out, const nghttp3_callbacks *cb,
                   ngtcp2_conn *q, void *user);

#endif
