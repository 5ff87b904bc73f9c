/* TLS over TCP with mbedTLS: a byte-stream filter (internal.h's
 * tern__filter) between a connection's socket and its protocol adapter. mbedTLS
 * never sees the socket: it reads ciphertext from a buffer the connection fills
 * and writes records into an output queue the connection sends, so one loop
 * turn's output still leaves in one write.
 */
#ifndef TERN_TLS_H
#define TERN_TLS_H

#include "internal.h"

/* The TLS filter (mbedTLS); its configuration is a committed tern_tls. */
extern const tern__filter tern__tls_filter;
int tern__tls_ready(const tern_tls *t);
/* Free every tern_tls of the server. */
void tern__tls_free_all(tern_server *srv);

#endif
