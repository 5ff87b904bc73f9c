/* TLS over TCP with mbedTLS: a transport filter between a connection's
 * socket and its protocol adapter. mbedTLS never sees the socket: it reads
 * ciphertext from a buffer the connection fills and writes records into an
 * output queue the connection sends, so one loop turn's output still
 * leaves in one write.
 */
#ifndef TERN_TLS_H
#define TERN_TLS_H

#include "internal.h"

typedef struct tern__tls_conn tern__tls_conn;

/* Per-connection state, taken when a TLS listener accepts. */
int tern__tls_conn_new(tern__conn *c, tern_tls *tls);
void tern__tls_conn_free(tern__conn *c);

/* Where the socket's next read should go (ciphertext). */
void tern__tls_read_buf(tern__conn *c, uv_buf_t *buf);
/* Run the handshake, then decrypt what is buffered into c->rbuf, as far
 * as it has room. Returns 0, TERN_ECLOSED (the peer sent close_notify:
 * end of input) or TERN_ETLS (the connection must close). */
int tern__tls_decrypt(tern__conn *c);
/* Encrypt pending plaintext from c->out into records. Returns the queue
 * of ciphertext to write; it stops at a bound so that a client that does
 * not read holds little memory. */
tern__outq *tern__tls_encrypt(tern__conn *c, int *err);
/* Is the connection's TLS handshake still under way? 0 without TLS. */
int tern__tls_handshaking(const tern__conn *c);
/* Does TLS hold input not yet decrypted (ciphertext or a record's rest)? */
int tern__tls_pending(tern__conn *c);
/* The ciphertext queue the socket writes from. */
tern__outq *tern__tls_wire(tern__conn *c);
/* `n` ciphertext bytes were read into the buffer tern__tls_read_buf gave;
 * with n == 0 on a lingering connection, what is buffered is dropped. A
 * no-op without TLS. */
void tern__tls_received(tern__conn *c, size_t n);
/* Queue a close_notify alert (best effort, before a graceful close). */
void tern__tls_close_notify(tern__conn *c);
/* Free every tern_tls of the server. */
void tern__tls_free_all(tern_server *srv);

#endif
