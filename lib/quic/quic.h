/* QUIC connections (lib/quic, on ngtcp2) as the HTTP/3 adapter sees them.
 * HTTP/3 (lib/http3, on nghttp3) sees only this header, and lib/quic sees
 * no nghttp3: the two pre-1.0 libraries stay one folder each. The
 * connection's head (tern__conn) comes first, so the core counts, times,
 * flushes and closes a QUIC connection like any other; its adapter
 * (head.proto) is the HTTP/3 one, which gets its connection-side calls
 * (stop, close, busy, timer, output) from the core as usual and its
 * stream events from lib/quic through tern__quic_app below.
 *
 * The core's calls on the head, for HTTP/3: proto->input after each batch
 * of packets was read (deliver what the packets made ready); proto->output
 * from the check phase when the app asked (tern__conn_want_output) or its
 * wake-up came, before the write loop; proto->timer after each batch and
 * each write loop (the head timer covers the handshake until then);
 * proto->stop on a graceful stop (the app sends GOAWAY and calls
 * tern__quic_close with code_none once its streams are done);
 * proto->close when the connection closes (fail what is in flight), then
 * app->free when lib/quic lets go of the ngtcp2 connection.
 *
 * Threads: everything here runs on the connection's worker; ngtcp2 is
 * not thread-safe. Re-entry: the app's callbacks run inside ngtcp2's
 * callbacks (reading a packet, or the write loop); from there the app may
 * call the tern__quic_* functions below, which never read or write
 * packets themselves (they record, credit, or mark the connection dirty).
 */
#ifndef TERN_QUIC_QUIC_H
#define TERN_QUIC_QUIC_H

#include "core/conn.h"

typedef struct tern__quic tern__quic;

/* A piece of bytes to send: the layout of both ngtcp2_vec and
 * nghttp3_vec (each file checks it), so vectors pass through unchanged. */
typedef struct {
  uint8_t *base;
  size_t len;
} tern__qvec;

/* The application on a QUIC connection: HTTP/3's side of the glue. Each
 * callback returns 0, or a negative value that ends the connection (the
 * app has set the error with tern__quic_set_app_error first; otherwise
 * it is an internal error). */
typedef struct {
  const char *alpn; /* "h3" */
  /* The app's error codes for a clean close and for an abrupt one (the
   * core closed the connection: a timeout, the stop deadline, no memory). */
  uint64_t code_none, code_internal;
  /* The 1-RTT keys are in (from the handshake, before any stream data):
   * open the app's own streams, make its state (tern__quic_set_app). */
  int (*start)(tern__quic *q);
  /* Stream bytes in order, from stream offset `off`, `fin` on the last;
   * `early` when they came in 0-RTT (replayable). */
  int (*recv)(tern__quic *q, int64_t id, uint64_t off, const uint8_t *p,
              size_t n, int fin, int early);
  /* The peer acknowledged `n` more bytes of stream `id` (in order). */
  int (*acked)(tern__quic *q, int64_t id, uint64_t n);
  /* Stream `id` is closed both ways (code: the app error, if any). */
  int (*closed)(tern__quic *q, int64_t id, uint64_t code);
  /* The peer reset its sending side (RESET_STREAM). */
  int (*reset)(tern__quic *q, int64_t id, uint64_t code);
  /* Our own read side of stream `id` was shut (ngtcp2 0.12's
   * stream_stop_sending: we sent STOP_SENDING, or a reset made ngtcp2
   * send it). The peer's STOP_SENDING reaches the app as shut_wr from
   * the write loop. */
  int (*stop_sending)(tern__quic *q, int64_t id, uint64_t code);
  /* Flow-control credit arrived for stream `id`: it may send again. */
  int (*unblocked)(tern__quic *q, int64_t id);
  /* The peer may now open client bidi streams up to `max` in all. */
  int (*max_streams)(tern__quic *q, uint64_t max);
  /* The write loop: the next stream bytes to send (up to n vectors),
   * their stream in *id (-1: none now) and *fin when they end it.
   * Returns the vectors filled, or a negative error. */
  int (*next)(tern__quic *q, int64_t *id, int *fin, tern__qvec *v, size_t n);
  /* `n` bytes of what next() gave for `id` went into packets (n may be 0
   * with fin alone). */
  int (*written)(tern__quic *q, int64_t id, size_t n);
  /* Stream `id` cannot send now (its flow-control window is full), or
   * can no longer send (its write side was shut). */
  int (*blocked)(tern__quic *q, int64_t id);
  int (*shut_wr)(tern__quic *q, int64_t id);
  /* The connection is gone (closed, drained, timed out or failed): free
   * the app's state. The head's proto->close has failed the requests. */
  void (*free)(tern__quic *q);
} tern__quic_app;

/* The QUIC transport (lib/quic/conn.c), listed in lib/protocols.c. */
extern const tern__transport tern__quic_transport;

/* The HTTP/3 adapter's glue table (lib/http3; bound in lib/protocols.c). */
extern const tern__quic_app *const tern__quic_h3;

static inline tern__conn *tern__quic_head(tern__quic *q) {
  return (tern__conn *)(void *)q;
}
static inline tern__quic *tern__quic_of(tern__conn *c) {
  return (tern__quic *)(void *)c;
}
void *tern__quic_app_data(const tern__quic *q);
void tern__quic_set_app(tern__quic *q, void *app);

/* Open a unidirectional stream of ours (HTTP/3's control and QPACK
 * streams): 0 with its id, or TERN_ENOMEM / TERN_ETOOBIG (the peer's
 * stream limit). */
int tern__quic_open_uni(tern__quic *q, int64_t *id);
/* The most unidirectional streams we may open now. */
uint64_t tern__quic_uni_left(tern__quic *q);
/* The client bidi stream limit we announced (initial_max_streams_bidi). */
uint64_t tern__quic_max_bidi(tern__quic *q);
/* `n` bytes of stream `id` were consumed: give the peer that much credit
 * on the stream and on the connection (stream -1, or a stream ngtcp2 has
 * already closed: the connection only). */
int tern__quic_credit(tern__quic *q, int64_t id, uint64_t n);
/* Let the peer open `n` more bidi streams (a request stream finished). */
void tern__quic_more_streams(tern__quic *q, uint64_t n);
/* End stream `id` abruptly with app error `code`: RESET_STREAM on our
 * side (write), STOP_SENDING on theirs (read), or both. */
int tern__quic_shut_read(tern__quic *q, int64_t id, uint64_t code);
int tern__quic_shut_write(tern__quic *q, int64_t id, uint64_t code);
int tern__quic_shut(tern__quic *q, int64_t id, uint64_t code);
/* The app has bytes to send: run the write loop in the check phase. */
void tern__quic_want_write(tern__quic *q);
/* Close the connection with app error `code` (CONNECTION_CLOSE); a
 * graceful end passes the app's "no error". Safe inside callbacks: the
 * close is written from the check phase. */
void tern__quic_close(tern__quic *q, uint64_t code, const char *reason);
/* Record the app error the connection closes with when a callback then
 * fails. */
void tern__quic_set_app_error(tern__quic *q, uint64_t code);
/* Call the adapter's output (head.proto->output) again in about `ms`
 * milliseconds, even if nothing arrives (a graceful stop's pause between
 * GOAWAYs). One pending wake-up per connection; a later call replaces it. */
void tern__quic_wake_after(tern__quic *q, uint64_t ms);
/* While `on`, the connection sends a PING after half the idle timeout
 * without traffic, so that QUIC's idle timeout does not end it: the app
 * holds a stream that may stay quiet for long (a WebSocket), as a TCP
 * connection with an open socket is not timed out either. */
void tern__quic_keep_alive(tern__quic *q, int on);
/* The probe timeout now, in ms (at least 1): a graceful stop waits about
 * this long between the GOAWAY notice and the final GOAWAY. */
uint64_t tern__quic_pto_ms(tern__quic *q);
/* Was 0-RTT accepted on this connection? */
int tern__quic_early(tern__quic *q);

#endif
