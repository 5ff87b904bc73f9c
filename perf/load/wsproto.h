/* The client side of WebSocket echo load, whatever carries the bytes:
 * wsload's HTTP/1.1 sockets and h3load's HTTP/3 streams (RFC 9220) share
 * it. Masked frames out, frames in, permessage-deflate (RFC 7692) both
 * ways, and every echo checked against the message it answers.
 *
 * Message `seq` of socket `id` carries the sequence number and the
 * socket's number first (hex digits in text mode, little-endian bytes in
 * binary mode), then text cut from a phrase at an offset that moves with
 * seq, so that consecutive messages differ and --deflate has text to
 * compress. Echoes must come back whole and in order: each is compared
 * byte for byte, and by kind, with the oldest message in flight.
 *
 * Deflate as wsload always did it: zlib raw deflate, a sync flush per
 * message, the trailing 00 00 ff ff removed, RSV1 set; a server's
 * no_context_takeover resets the matching side after each message; a
 * client_max_window_bits of 8, which zlib cannot produce, leaves that
 * socket sending uncompressed messages (RSV1 clear, which RFC 7692
 * allows).
 *
 * Single-threaded: the scratch buffers are shared by every socket.
 */
#ifndef TERN_PERF_LOAD_WSPROTO_H
#define TERN_PERF_LOAD_WSPROTO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

enum { WSP_CONT = 0, WSP_TEXT = 1, WSP_BINARY = 2, WSP_CLOSE = 8 };
enum { WSP_PING = 9, WSP_PONG = 10 };

/* What every socket of a run shares: the message shape and scratch. */
typedef struct {
  size_t size;    /* of every message */
  int binary;     /* binary messages, else text */
  int offer;      /* permessage-deflate is offered */
  int level;      /* zlib's compression level */
  size_t limit;   /* the largest frame or message accepted */
  uint64_t rng;   /* xorshift64* state, for masks */
  uint64_t pings; /* Pings answered */
  unsigned char *filler, *tmp, *expect, *zbuf, *ibuf;
  size_t zcap;
  char extension[256]; /* the first Sec-WebSocket-Extensions answered */
} wsp;

/* One WebSocket's framing state. */
typedef struct {
  uint32_t id; /* its number in the payloads */
  /* outgoing bytes, frames appended; the transport sends wbuf[wpos..wlen) */
  unsigned char *wbuf;
  size_t wlen, wpos, wcap;
  /* incoming bytes not yet parsed */
  unsigned char *rbuf;
  size_t rlen, rcap;
  /* messages next_echo .. next_seq - 1 are in flight */
  uint64_t next_seq, next_echo;
  /* a fragmented message being assembled */
  unsigned char *msg;
  size_t mlen, mcap;
  int in_msg, mop, mcomp;
  /* permessage-deflate */
  int deflate;     /* negotiated */
  int send_comp;   /* outgoing messages are compressed */
  int client_bits; /* client_max_window_bits answered, 0 = none */
  int reset_out;   /* client_no_context_takeover */
  int reset_in;    /* server_no_context_takeover */
  int zd_ok, zi_ok;
  z_stream zd, zi;
  const char *why; /* what wsp_frames found wrong */
} wsp_sock;

/* Set up `w` for messages of `size` bytes. Returns 0, or -1 when out of
 * memory. */
int wsp_init(wsp *w, size_t size, int binary, int offer_deflate, int level);

/* Fill p with n random bytes (getrandom, else the mask generator). */
void wsp_random(wsp *w, unsigned char *p, size_t n);

/* Grow *buf to hold `need` bytes; 0, or -1 when out of memory. */
int wsp_reserve(unsigned char **buf, size_t *cap, size_t need);

/* The first len bytes of p, escaped, for a one-line description. */
void wsp_put_escaped(FILE *f, const unsigned char *p, size_t len);

/* The value of the Sec-WebSocket-Extensions field a client offers
 * (permessage-deflate with client_max_window_bits), NULL when deflate is
 * not offered. */
const char *wsp_offer(const wsp *w);

/* The server's Sec-WebSocket-Extensions answer (n bytes at v): at most one
 * extension, permessage-deflate, with parameters RFC 7692 defines; sets
 * s's deflate parameters. Returns NULL, or what is wrong. */
const char *wsp_parse_extension(wsp *w, wsp_sock *s, const char *v, size_t n);

/* The handshake succeeded: start the compressors if deflate was
 * negotiated. Returns NULL, or what failed. */
const char *wsp_open(wsp *w, wsp_sock *s);

/* End s's compressors and empty its buffers (kept for reuse): the socket
 * is gone. Not from inside an event callback of wsp_frames. */
void wsp_sock_reset(wsp_sock *s);

/* Free s's buffers too. */
void wsp_sock_free(wsp_sock *s);

/* Append one masked frame (b0: FIN, RSV and opcode) to s->wbuf. 0, or -1
 * when out of memory. */
int wsp_put_frame(wsp *w, wsp_sock *s, unsigned b0, const unsigned char *p,
                  size_t n);

/* Append message s->next_seq (compressed if so negotiated) and count it in
 * flight. 0, or -1 when it could not be compressed or buffered. */
int wsp_put_message(wsp *w, wsp_sock *s);

/* The Close frame (1000) a client ends with. */
int wsp_put_close(wsp *w, wsp_sock *s);

/* What wsp_frames reports to its caller about each echo. */
typedef struct {
  /* An echo that does not match (why, and what came): counted as a
   * mismatch; when nothing was in flight, no echo follows. */
  void (*mismatch)(void *u, wsp_sock *s, const char *why,
                   const unsigned char *p, size_t n);
  /* The echo of message `seq` came (matching or not). Returns 0 to go
   * on parsing, nonzero when the socket was closed or reset meanwhile. */
  int (*echo)(void *u, wsp_sock *s, uint64_t seq);
} wsp_events;

enum { WSP_MORE = 0, WSP_GOT_CLOSE = 1, WSP_STOPPED = 2, WSP_ERROR = -1 };

/* Parse the frames in s->rbuf, acting on each: echoes are checked and
 * reported, Pings answered (Pongs appended to s->wbuf). *used says how
 * many bytes were consumed (wsp_consume removes them). Returns WSP_MORE
 * when every whole frame was taken; WSP_GOT_CLOSE at a Close frame (its
 * code in *code, 0 if none: the caller answers or ends); WSP_STOPPED
 * when the echo callback asked to stop; WSP_ERROR on a protocol error
 * (s->why says which): the socket must be dropped. */
int wsp_frames(wsp *w, wsp_sock *s, const wsp_events *ev, void *u, size_t *used,
               unsigned *code);

/* Drop the first `used` bytes of s->rbuf. */
void wsp_consume(wsp_sock *s, size_t used);

#endif
