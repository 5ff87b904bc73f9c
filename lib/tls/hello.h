/* The session ticket a TLS ClientHello presents (lib/tls/hello.c): the
 * first PSK identity of TLS 1.3's pre_shared_key extension, else the
 * non-empty contents of TLS 1.2's session_ticket extension. Sans-I/O, on
 * the handshake message's body (after its 4-byte header); the GnuTLS
 * engine uses it to pick the ticket key a resuming client's ticket was
 * made under (tern_tls_set_previous_ticket_key). */
#ifndef TERN_TLS_HELLO_H
#define TERN_TLS_HELLO_H

#include <stddef.h>
#include <stdint.h>

/* 0 with *ticket and *len pointing into p[0 .. n), or -1: no ticket, or
 * a message that does not parse (GnuTLS then refuses it itself). */
int tern__tls_hello_ticket(const uint8_t *p, size_t n, const uint8_t **ticket,
                           size_t *len);

#endif
