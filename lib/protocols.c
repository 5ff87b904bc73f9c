/* What this build of tern contains: the transports and the protocol
 * adapters. A byte-stream connection switches adapter when its filter
 * (TLS) agrees on one by ALPN, or HTTP/1.1 hands it on (the HTTP/2
 * preface, an h2c upgrade); both look the adapter up here by name, so
 * that no layer below an adapter, and no adapter, names another. This
 * file alone includes every layer.
 */
#include <string.h>

#include "core/worker.h"
#include "net/stream.h"
#include "tls/tls.h"
#ifdef TERN_HAVE_QUIC
#include "quic/quic.h"
#endif

extern const tern__proto tern__http1;
#ifdef TERN_HAVE_HTTP2
extern const tern__proto tern__http2;
#endif
#ifdef TERN_HAVE_HTTP3
extern const tern__proto tern__http3;
extern const tern__quic_app tern__http3_app;
#endif

/* HTTP/1.1 first: every byte-stream connection starts with it. */
const tern__proto *const tern__protocols[] = {
    &tern__http1,
#ifdef TERN_HAVE_HTTP2
    &tern__http2,
#endif
#ifdef TERN_HAVE_HTTP3
    &tern__http3,
#endif
    NULL,
};

#ifdef TERN_HAVE_QUIC
/* QUIC's application: HTTP/3 where it is built (without it, QUIC
 * listeners are refused: TERN_ENOTSUP). */
#ifdef TERN_HAVE_HTTP3
const tern__quic_app *const tern__quic_h3 = &tern__http3_app;
#else
const tern__quic_app *const tern__quic_h3 = NULL;
#endif
#endif

#ifdef TERN_HAVE_MBEDTLS
extern const tern__tls_engine tern__tls_mbedtls;
#endif
#ifdef TERN_HAVE_GNUTLS
extern const tern__tls_engine tern__tls_gnutls;
#endif

/* The TLS engines, by id. */
const tern__tls_engine *const tern__tls_engines[TERN__TLS_ENGINES] = {
#ifdef TERN_HAVE_MBEDTLS
    [TERN__TLS_MBEDTLS] = &tern__tls_mbedtls,
#endif
#ifdef TERN_HAVE_GNUTLS
    [TERN__TLS_GNUTLS] = &tern__tls_gnutls,
#endif
};

extern const tern__service tern__ws_service;
extern const tern__service tern__tls_service;
extern const tern__service tern__access_service;
extern const tern__service tern__sse_service;

/* The per-worker services, in the order the worker calls them: the
 * access log last, so that at the end it writes what the others' last
 * calls logged. */
const tern__service *const tern__services[] = {
    &tern__ws_service,
    &tern__tls_service,
    &tern__sse_service,
    &tern__access_service,
    NULL,
};

extern const tern__resp_filter tern__compress_filter;

/* The response filters a route's options may ask for. */
const tern__resp_filter *const tern__resp_filters[] = {
    &tern__compress_filter,
    NULL,
};

const tern__transport *const tern__transports[] = {
    &tern__stream_transport,
#ifdef TERN_HAVE_QUIC
    &tern__quic_transport,
#endif
    NULL,
};

const tern__proto *tern__proto_find(const char *name, size_t len) {
  const tern__proto *const *p;
  for (p = tern__protocols; *p != NULL; p++)
    if (strlen((*p)->name) == len && memcmp((*p)->name, name, len) == 0)
      return *p;
  return NULL;
}

/* One call for every listener: the options say which transport serves
 * it (QUIC on UDP, else a byte stream: TCP, Unix, or a socket handed
 * over), so that the public API has no call per transport. */
int tern_listen_with(tern_server *srv, const tern_listen_options *opts,
                     int *bound_port) {
  tern_listen_options o;
  int rc = tern__listen_read(srv, opts, &o);
  if (rc != 0)
    return rc;
  if (o.quic) {
#ifdef TERN_HAVE_QUIC
    return tern__listen_quic(srv, &o, bound_port);
#else
    return TERN_ENOTSUP;
#endif
  }
  return tern__listen_stream(srv, &o, bound_port);
}
