/* Byte-stream filters (TLS): what lib/net drives between a socket and
 * its adapter, and lib/tls implements. */
#ifndef TERN_NET_FILTER_H
#define TERN_NET_FILTER_H

#include "core/outq.h"

/* ---- Byte-stream filters (TLS; later the PROXY protocol) -------------
 *
 * A filter sits between a byte-stream connection's socket and its
 * adapter (in the spirit of curl's connection filters). It sees neither
 * the connection nor the adapter: it is handed its own state and the
 * buffers it works on, and answers by return value. The byte-stream
 * transport (lib/net) drives it; the adapter reads and writes plaintext
 * as on plain TCP. */
enum { TERN__F_READY = 1 }; /* input(): the handshake has just finished */

struct tern__filter {
  const char *name;
  /* Per-connection state (*st) from the listener's configuration. */
  int (*attach)(void **st, tern__worker *w, void *cfg);
  void (*detach)(void *st, tern__worker *w);
  /* Offer HTTP/1.1 alone in the handshake (an http1_only listener),
   * right after attach; 0 or an error (the connection closes). NULL: an
   * engine that cannot (its listeners refuse http1_only). */
  int (*alpn_http1)(void *st);
  /* Where the socket's next read goes, and how much arrived there;
   * received(st, 0) drops what is buffered (a lingering close). */
  void (*read_buf)(void *st, tern__worker *w, uv_buf_t *buf);
  void (*received)(void *st, size_t n);
  /* Run the handshake, then put plaintext into dst[0 .. room), *got
   * bytes of it. 0, TERN__F_READY (the handshake finished now: the
   * transport picks the adapter by alpn()), TERN_ECLOSED (the end of the
   * peer's input) or another error (the connection must close). */
  int (*input)(void *st, tern__worker *w, char *dst, size_t room, size_t *got);
  /* Is there input for another input() without a socket read? */
  int (*has_input)(void *st);
  /* Turn pending plaintext of `plain` into the wire queue and return it
   * (bounded, so that a client that does not read holds little). */
  tern__outq *(*output)(void *st, tern__worker *w, tern__outq *plain, int *err);
  /* The wire queue the socket writes from, and its size. */
  tern__outq *(*wire)(void *st);
  size_t (*buffered)(const void *st);
  /* Is the handshake still running? */
  int (*handshaking)(const void *st);
  /* Before a graceful close: queue the filter's goodbye (TLS
   * close_notify) once. 1 if something was queued (flush first). */
  int (*shutdown)(void *st);
  /* The protocol the handshake chose (ALPN), or NULL. */
  const char *(*alpn)(const void *st);
  /* The client certificate the handshake verified, allocated for the
   * connection (NULL: none, or not asked for). May be NULL. */
  struct tern__client_id *(*client_id)(const void *st, tern_server *srv);
  /* The cipher suite the handshake chose (a static string), or NULL. */
  const char *(*cipher)(const void *st);
  /* The TLS version the handshake agreed (TERN_TLS_*), or 0; NULL for a
   * filter that is not TLS. */
  int (*tls_version)(const void *st);
};

#endif
