/* WebSocket framing (RFC 6455), server side: sans-I/O, never allocates.
 *
 * Decoding is a pull API in the manner of the chunked decoder in
 * http1/parse.h. The caller hands over the bytes it has; each call returns
 * at most one event and says how many bytes it used:
 *
 *   for (;;) {
 *     r = tern__ws_decode(&d, buf + off, len - off, &used, &ev);
 *     off += used;
 *     if (r == TERN__WS_EV_NONE) break;   all bytes used, need more
 *     if (r < 0) { close with code -r; break; }
 *     handle ev;
 *   }
 *
 * Keep calling until NONE, even when no bytes are left: an event can be
 * due without any further input (the end of an empty message right after
 * its header, for instance). NONE always means *consumed == len.
 *
 * A data message arrives as BEGIN (opcode, compressed flag), any number
 * of DATA spans and END. Control frames (PING, PONG, CLOSE) may come
 * between the events of a fragmented message. The input is only read: it
 * may be memory the carrier must not have written (under HTTP/3, the
 * QUIC stack's). DATA spans are unmasked into the caller's output buffer
 * (tern__ws_decoder_output) and point at its start; a span is at most as
 * long as that buffer, so a large frame comes as several DATA events,
 * exactly as if its bytes had arrived in pieces, and a bounded buffer
 * serves any message. The span stays valid until the caller next writes
 * to the buffer or gives another.
 * PING, PONG and CLOSE payloads point into the decoder itself (a control
 * frame may arrive in pieces) and stay valid until the next call.
 *
 * Rules enforced, each failing with the close code the server sends:
 * - RSV2 or RSV3 set; RSV1 set without permessage-deflate, on a control
 *   frame or on a continuation frame: 1002.
 * - Reserved opcodes 0x3-0x7 and 0xB-0xF: 1002.
 * - An unmasked frame: 1002 (client frames must be masked, RFC 6455 5.1).
 * - A control frame with FIN clear or a payload over 125 bytes: 1002.
 * - A continuation frame with no message open, or a text or binary frame
 *   while one is: 1002.
 * - A 64-bit length with its high bit set, or a length not in its minimal
 *   encoding (RFC 6455 5.2 says the minimal number of bytes MUST be
 *   used): 1002.
 * - A text message that is not UTF-8 (RFC 3629): 1007, as soon as the
 *   first byte that cannot continue a valid sequence is seen, and at the
 *   end of the message if it ends inside a code point. Compressed text is
 *   checked by the inflater (ws/deflate.h) instead, after inflation.
 * - A close payload of one byte, or a close code outside 1000-1003,
 *   1007-1011 and 3000-4999: 1002. A close reason that is not UTF-8: 1007.
 * - An uncompressed message whose payload would exceed max_message bytes:
 *   1009, as soon as a frame header announces it (no need to wait for the
 *   bytes). Compressed messages are bounded by the inflater instead,
 *   because the limit is on the bytes delivered after inflation.
 *
 * On an error, *consumed is the offset of the byte that broke the rule
 * (that byte and everything after it is left unused); every byte of the
 * message before it has been delivered as DATA. Errors found only when a
 * frame ends (a message or close reason ending inside a code point) are
 * reported with the whole frame used. Where the offending byte is inside
 * a DATA span, the valid part of the span comes first as DATA and the
 * error on the next call, with *consumed 0. The offset is therefore the
 * same however the input was split. After an error every call returns the
 * same error and uses nothing. After CLOSE the decoder is finished: later
 * calls use all their input and return NONE, since RFC 6455 5.5.1 has
 * the peer send nothing after a close frame.
 */
#ifndef TERN_WS_FRAME_H
#define TERN_WS_FRAME_H

#include <stddef.h>
#include <stdint.h>

enum {
  TERN__WS_OP_CONT = 0x0,
  TERN__WS_OP_TEXT = 0x1,
  TERN__WS_OP_BINARY = 0x2,
  TERN__WS_OP_CLOSE = 0x8,
  TERN__WS_OP_PING = 0x9,
  TERN__WS_OP_PONG = 0xA,
};

/* Close codes (RFC 6455 7.4.1) the server uses or reports. */
enum {
  TERN__WS_CLOSE_NORMAL = 1000,
  TERN__WS_CLOSE_GOING_AWAY = 1001,
  TERN__WS_CLOSE_PROTOCOL = 1002,
  TERN__WS_CLOSE_UNSUPPORTED = 1003,
  TERN__WS_CLOSE_NO_STATUS = 1005, /* reported only: never on the wire */
  TERN__WS_CLOSE_INVALID_DATA = 1007,
  TERN__WS_CLOSE_POLICY = 1008,
  TERN__WS_CLOSE_TOO_BIG = 1009,
  TERN__WS_CLOSE_INTERNAL = 1011,
};

/* Decoder results: events (>= 0) or errors (the negated close code). */
enum {
  TERN__WS_EV_NONE = 0,   /* all input used; more is needed */
  TERN__WS_EV_BEGIN = 1,  /* a data message starts: opcode, compressed */
  TERN__WS_EV_DATA = 2,   /* message payload: data, len (in the input) */
  TERN__WS_EV_END = 3,    /* the message is complete */
  TERN__WS_EV_PING = 4,   /* data, len: the payload to echo in a pong */
  TERN__WS_EV_PONG = 5,   /* data, len */
  TERN__WS_EV_CLOSE = 6,  /* code (1005 if none), data, len: the reason */
  TERN__WS_E1002 = -1002, /* protocol error */
  TERN__WS_E1007 = -1007, /* invalid UTF-8 in text or a close reason */
  TERN__WS_E1009 = -1009, /* message over max_message */
};

typedef struct {
  int opcode;                /* BEGIN: TERN__WS_OP_TEXT or _BINARY */
  int compressed;            /* BEGIN: 1 if RSV1 was set */
  const unsigned char *data; /* DATA, PING, PONG; CLOSE: the reason */
  size_t len;
  int code; /* CLOSE: the status code, or 1005 when there was none */
} tern__ws_event;

/* Largest control frame payload (RFC 6455 5.5). */
#define TERN__WS_MAX_CONTROL 125

/* The decoder's state. Fields are private; it is a plain struct so that a
 * connection can embed it. */
typedef struct {
  uint64_t max_message; /* per message payload limit (UINT64_MAX: none) */
  uint64_t flen;        /* length of the frame whose header is read */
  uint64_t remaining;   /* payload bytes left in the current frame */
  uint64_t msg_len;     /* payload bytes of the open message so far */
  int deflate;          /* permessage-deflate negotiated: RSV1 allowed */
  int state;
  int result; /* the sticky error, once there is one */
  int in_msg, msg_text, msg_compressed;
  unsigned utf8;       /* UTF-8 state of the open text message */
  unsigned ctl_utf8;   /* UTF-8 state of a close reason */
  unsigned char b0;    /* first header byte of the current frame */
  unsigned char len7;  /* the 7-bit length code: 126 or 127 if extended */
  unsigned char nlen;  /* extended length bytes still to come */
  unsigned char nmask; /* masking key bytes seen */
  unsigned char mpos;  /* masking key index of the next payload byte */
  unsigned char mask[4];
  unsigned char ctl_len;
  unsigned char ctl[TERN__WS_MAX_CONTROL];
  unsigned char *out; /* where DATA is unmasked (tern__ws_decoder_output) */
  size_t out_cap;
} tern__ws_decoder;

/* Start decoding a connection's client-to-server stream. max_message is
 * the largest message payload accepted, counted in delivered bytes;
 * deflate is nonzero when permessage-deflate was negotiated. */
void tern__ws_decoder_init(tern__ws_decoder *d, uint64_t max_message,
                           int deflate);

/* Where the following calls unmask DATA: out[0..cap), which must not
 * overlap their input. The caller may give another buffer (or another
 * part of this one) before any call; a kept span stays valid only while
 * its bytes are not given again. A cap of 0 (or no call at all) makes the
 * first DATA fail with TERN__WS_E1002 rather than spin. It is a field
 * setter, not a call into the codec, so that setting it costs nothing. */
static inline void tern__ws_decoder_output(tern__ws_decoder *d,
                                           unsigned char *out, size_t cap) {
  d->out = out;
  d->out_cap = cap;
}

/* Decode from buf[0..len), which is never written, unmasking payload into
 * the output buffer. Returns an event (filling *ev) or an error, with
 * *consumed as described above. */
int tern__ws_decode(tern__ws_decoder *d, const unsigned char *buf, size_t len,
                    size_t *consumed, tern__ws_event *ev);

/* Incremental UTF-8 validation, as the decoder does it, for callers with
 * text of their own (inflated messages, outgoing text). *state starts at
 * TERN__WS_UTF8_OK. Returns n if every byte may belong to valid UTF-8 so
 * far, else the index of the first byte that cannot (*state then stays
 * failed). Text is complete and valid when *state is TERN__WS_UTF8_OK. */
#define TERN__WS_UTF8_OK 0u
size_t tern__ws_utf8_scan(unsigned *state, const unsigned char *p, size_t n);

/* Is `code` acceptable in a close frame on the wire (RFC 6455 7.4)? */
int tern__ws_close_code_valid(int code);

/* Encoding, server to client (never masked). */

/* Longest frame header: 2 bytes plus a 64-bit length. */
#define TERN__WS_MAX_HEADER 10
/* Longest control frame: a 2-byte header and a full payload. */
#define TERN__WS_MAX_CONTROL_FRAME (2 + TERN__WS_MAX_CONTROL)

/* Write the header of a frame with the given opcode, FIN and RSV1 bits
 * and payload length into out (TERN__WS_MAX_HEADER bytes). Returns the
 * header's size: 2, 4 or 10 bytes. The length must be below 2^63. */
size_t tern__ws_frame_header(unsigned char *out, int opcode, int fin, int rsv1,
                             uint64_t len);

/* Write a whole control frame (header and payload) into out
 * (TERN__WS_MAX_CONTROL_FRAME bytes). Returns its size, or 0 if the
 * opcode is not a control opcode or n is over TERN__WS_MAX_CONTROL. */
size_t tern__ws_control_frame(unsigned char *out, int opcode,
                              const unsigned char *p, size_t n);

/* A pong echoing a ping's payload (n <= TERN__WS_MAX_CONTROL). */
size_t tern__ws_pong_frame(unsigned char *out, const unsigned char *p,
                           size_t n);

/* Write a close frame into out (TERN__WS_MAX_CONTROL_FRAME bytes) and
 * return its size. code 0 sends an empty payload (no status, no reason);
 * otherwise the code, then the reason cut to the 123 bytes that fit,
 * without splitting a UTF-8 sequence. Returns 0 for a code that may not
 * go on the wire (see tern__ws_close_code_valid). */
size_t tern__ws_close_frame(unsigned char *out, int code, const char *reason,
                            size_t reason_len);

#endif
