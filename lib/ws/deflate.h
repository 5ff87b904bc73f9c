/* permessage-deflate (RFC 7692) for the WebSocket server: negotiation of
 * the extension and a per-connection deflater and inflater over zlib.
 *
 * Negotiation. tern__ws_deflate_negotiate reads the value of a
 * Sec-WebSocket-Extensions request field: a comma-separated list of
 * offers, each a name and ';'-separated parameters whose values are
 * tokens or quoted strings (RFC 6455 9.1). Names are compared ignoring
 * ASCII case. It accepts the first permessage-deflate offer that it can
 * honour and writes the response value. An offer is declined (and the
 * next one tried) when it has an unknown parameter, a parameter twice, a
 * value where none belongs, or a window size that is not 8 to 15 written
 * plainly (no sign, no leading zero: RFC 7692 7.1.2 gives 1*DIGIT and
 * that range). An offer with server_max_window_bits=8 is declined too:
 * the server must then compress with a 256-byte window, which zlib cannot
 * do (it refuses windowBits 8 for raw deflate). Where the list itself is
 * malformed, nothing from that point on is accepted. A request with
 * several Sec-WebSocket-Extensions fields is handled by calling once per
 * field, in order, until one accepts.
 *
 * What the response says, parameter by parameter:
 * - server_no_context_takeover: echoed when offered; the deflater then
 *   starts each message afresh.
 * - client_no_context_takeover: sent when offered or when the policy asks
 *   for it; the inflater then starts each message afresh.
 * - server_max_window_bits=N: sent only when offered (RFC 7692 7.1.2.1),
 *   with N the smaller of the offer and the policy. When it is not
 *   offered, the deflater still uses the policy's window: any smaller
 *   window can be read by the client's inflater.
 * - client_max_window_bits=N: sent when offered (with or without a value)
 *   and N, the smaller of the offer's value and the policy, is under 15
 *   (without the parameter in the offer the client may use any window,
 *   RFC 7692 7.1.2.2). The inflater's window is 15 all the same: with a
 *   smaller one, zlib would take or refuse a distance past it depending
 *   on how the message was split into reads, so a client breaking its
 *   own promise is read as if it had offered 15, the most it costs.
 *
 * Compression. A message is deflated with Z_SYNC_FLUSH at its end and the
 * final 0x00 0x00 0xff 0xff dropped (RFC 7692 7.2.1); an empty one is the
 * single byte 0x00 (7.2.3.6). A message is inflated with those four bytes
 * put back (7.2.2). Output goes to a sink callback in chunks of at most
 * TERN__WS_ZCHUNK bytes. The inflater counts what it delivers and stops
 * at the message limit (decompression bombs: 1009); for text it also
 * validates the inflated UTF-8 (1007). It is strict about the end of a
 * message: once the four bytes are back the stream must sit at a block
 * boundary, or the message was truncated and is refused (1007), since its
 * leftovers would corrupt the next message. A message of no bytes at all
 * is taken as empty. A final block (BFINAL, RFC 7692 7.2.3.4) ends
 * neither the message nor the context: what follows it, in the same
 * message or the next ones, is read on with the same sliding window
 * (deflate.c says how, given that zlib would stop).
 *
 * Memory. zlib's memory comes from the caller's allocator, all of it at
 * init, so a connection's cost is known when it is set up and a failure
 * shows there (never an abort). Per connection, from zlib's zconf.h:
 * the deflater takes (1 << (windowBits + 2)) + (1 << (memLevel + 9))
 * bytes plus about 6 KiB of state (256 KiB + 6 KiB at 15 and 8); the
 * inflater takes 32 KiB plus about 7 KiB, 39 KiB for any window.
 * A lower server window and memLevel cut the deflater's share and cost
 * compression ratio.
 *
 * Both objects hold a pointer to themselves inside zlib's stream, so they
 * must not move between init and free.
 */
#ifndef TERN_WS_DEFLATE_H
#define TERN_WS_DEFLATE_H

#include <stddef.h>
#include <stdint.h>
/* zlib's input pointers const: the inflater reads bytes it must not
 * write (the socket's scratch buffer, once carrier memory), and no cast
 * needs to drop const to hand them over. */
#ifndef ZLIB_CONST
#define ZLIB_CONST
#endif
#include <zlib.h>

#include "tern.h"
#include "ws/frame.h"

/* A tern-style allocator. malloc may return NULL; free(NULL) is allowed.
 * A NULL allocator pointer means the C library's malloc and free. */
typedef struct {
  void *(*malloc)(size_t size, void *user);
  void (*free)(void *ptr, void *user);
  void *user;
} tern__ws_alloc;

/* Server policy for the extension. Start from tern__ws_deflate_policy_init
 * and change what is needed; out-of-range values are clamped. */
typedef struct {
  int enable;                     /* accept the extension at all (1) */
  int server_max_window_bits;     /* deflater window, 9-15 (15) */
  int client_max_window_bits;     /* client window to ask, 8-15 (15) */
  int client_no_context_takeover; /* ask the client to reset (0) */
  int mem_level;                  /* zlib memLevel for deflate, 1-9 (8) */
  int level; /* zlib compression level, 0-9, -1 for its default (-1) */
} tern__ws_deflate_policy;

void tern__ws_deflate_policy_init(tern__ws_deflate_policy *p);

/* What a negotiation settled: everything the deflater and inflater need. */
typedef struct {
  int server_no_context_takeover; /* the deflater resets per message */
  int client_no_context_takeover; /* the inflater resets per message */
  int server_window_bits;         /* the deflater's window, 9-15 */
  int client_window_bits;         /* the client's window, 8-15 (the
                                     inflater takes 15: deflate.c) */
  int mem_level;
  int level;
} tern__ws_deflate_params;

/* Room for the longest response value and its NUL. */
#define TERN__WS_DEFLATE_RESPONSE_MAX 160

/* Negotiate from the Sec-WebSocket-Extensions value v[0..n). Returns 1
 * when an offer was accepted: *out is filled and resp (of
 * TERN__WS_DEFLATE_RESPONSE_MAX bytes) holds the NUL-terminated response
 * value, *resp_len bytes long. Returns 0 when no offer was acceptable (or
 * the policy disables the extension): the response then carries no
 * Sec-WebSocket-Extensions field. */
int tern__ws_deflate_negotiate(const char *v, size_t n,
                               const tern__ws_deflate_policy *pol,
                               tern__ws_deflate_params *out, char *resp,
                               size_t *resp_len);

/* Output callback: n > 0 bytes at p, valid during the call only. Return
 * 0 to go on; anything else stops the work and is returned as is. */
typedef int (*tern__ws_sink)(void *user, const unsigned char *p, size_t n);

/* Largest piece handed to a sink; the work buffer lives on the stack. */
#define TERN__WS_ZCHUNK 8192

/* Errors of the message functions beyond the decoder's: zlib failed in a
 * way that is not the peer's doing. Close with 1011. */
enum { TERN__WS_E1011 = -1011 };

typedef struct {
  z_stream z;
  tern__ws_alloc alloc;
  int ready;      /* deflateInit2 succeeded */
  int no_context; /* reset after every message */
  unsigned tail_len;
  unsigned char tail[4]; /* output held back: it may be the flush marker */
} tern__ws_deflater;

typedef struct {
  z_stream z;
  tern__ws_alloc alloc;
  int ready;          /* inflateInit2 succeeded */
  int no_context;     /* reset after every message */
  int clear_next;     /* the next input byte starts a block header */
  int boundary;       /* the stream stands between two blocks */
  int was_final;      /* the block being read had BFINAL set (now cleared) */
  int stream_end;     /* the input so far ends where a final block did */
  unsigned char last; /* the last input byte zlib took (as it saw it) */
  int text;           /* validate the output as UTF-8 */
  unsigned utf8;
  uint64_t limit; /* most bytes the message may inflate to */
  uint64_t out;   /* bytes delivered in this message */
  uint64_t in;    /* compressed bytes taken in this message */
} tern__ws_inflater;

/* Set up a deflater for server-to-client messages. Returns 0,
 * TERN_ENOMEM when memory ran out or TERN_EINVAL when zlib refused the
 * parameters. On failure nothing is held and free is still safe. */
int tern__ws_deflater_init(tern__ws_deflater *d,
                           const tern__ws_deflate_params *p,
                           const tern__ws_alloc *a);
void tern__ws_deflater_free(tern__ws_deflater *d);

/* Compress the next piece of a message; fin marks its last piece (a whole
 * message is one call with fin set). The compressed payload goes to the
 * sink; its pieces joined are the payload of the message's frames, the
 * first of them with RSV1 set. Returns 0, the sink's nonzero result, or
 * TERN__WS_E1011. After an error the deflater may only be freed. */
int tern__ws_deflate(tern__ws_deflater *d, const unsigned char *in, size_t n,
                     int fin, tern__ws_sink sink, void *user);

/* Set up an inflater for client-to-server messages; returns as
 * tern__ws_deflater_init does. */
int tern__ws_inflater_init(tern__ws_inflater *f,
                           const tern__ws_deflate_params *p,
                           const tern__ws_alloc *a);
void tern__ws_inflater_free(tern__ws_inflater *f);

/* Start a compressed message (at the decoder's BEGIN with compressed set):
 * limit is the most bytes it may inflate to, text whether to validate it
 * as UTF-8. */
void tern__ws_inflate_begin(tern__ws_inflater *f, uint64_t limit, int text);

/* Inflate one DATA span of the message, then finish at END. Both return 0,
 * the sink's nonzero result, TERN__WS_E1007 (corrupt data or, for text,
 * invalid UTF-8), TERN__WS_E1009 (over the limit: nothing past it is
 * delivered) or TERN__WS_E1011. After an error the inflater may only be
 * freed. */
int tern__ws_inflate(tern__ws_inflater *f, const unsigned char *in, size_t n,
                     tern__ws_sink sink, void *user);
int tern__ws_inflate_end(tern__ws_inflater *f, tern__ws_sink sink, void *user);

#endif
