/* wsload: a closed-loop WebSocket echo load client.
 *
 *   wsload --port P [--host 127.0.0.1] [--path /ws] [--conns 64]
 *          [--depth 8] [--size 128] [--duration 10] [--warmup 0]
 *          [--drain 2] [--text | --binary] [--deflate [--level L]]
 *          [--json FILE]
 *
 * Opens --conns WebSockets (HTTP/1.1 Upgrade over plain TCP) and keeps
 * --depth messages of --size bytes in flight on each: every echo that
 * comes back lets the next message go. The frames that are ready for a
 * socket are gathered into one write. Client frames are masked, with a new
 * random mask per frame (RFC 6455 5.3).
 *
 * Every message carries its socket's sequence number (and the socket's
 * number) in its first bytes, the rest is text cut from a phrase at an
 * offset that moves with the sequence number, so consecutive messages
 * differ. Each echo is compared byte for byte, and by kind (text or
 * binary), with the oldest message in flight on its socket: echoes must
 * come back whole and in order. Latency is from the moment a message was
 * put in its socket's write batch to the moment its echo was read.
 *
 * --deflate offers permessage-deflate (RFC 7692) with
 * "permessage-deflate; client_max_window_bits". When the server accepts,
 * outgoing messages are compressed (zlib raw deflate, a sync flush per
 * message, the trailing 00 00 ff ff removed, RSV1 set) and incoming
 * messages with RSV1 are inflated before they are compared. When it
 * declines, the socket runs uncompressed ("deflate_negotiated" in the
 * report counts the sockets that did compress). The parameters the server
 * answers are honoured: no_context_takeover resets the compressor or the
 * decompressor after each message; a client_max_window_bits of 8, which
 * zlib cannot produce, makes that socket send uncompressed messages (RSV1
 * clear, which RFC 7692 allows).
 *
 * Phases: every socket is connected and upgraded before the clock starts
 * (up to 5 s); then --warmup seconds whose echoes are not counted; when
 * the measured window begins, "wsload: measuring" is printed on stdout and
 * flushed (the benchmark driver takes its snapshots of the server then);
 * after --duration seconds no more messages are sent, the messages still
 * in flight are awaited (up to --drain seconds), and each socket is closed
 * with a Close frame (1000), whose answer is awaited up to 1 s.
 *
 * Counted in the measured window: messages (echoes read in it), their
 * latency, the wire bytes each way. Counted over the whole run, all of
 * them errors: connect_errors, handshake_errors (a status other than 101,
 * a wrong Sec-WebSocket-Accept, a missing Upgrade or Connection, an
 * extension or subprotocol not offered), mismatch (an echo that differs
 * from the message in flight, of the wrong kind, or with nothing in
 * flight), protocol_errors (a masked server frame, reserved bits or
 * opcodes, a bad continuation, an oversized or undecompressable message;
 * the socket is dropped), closed (the server closed a socket, by a Close
 * frame or not, before the client did), unanswered (messages still in
 * flight when the drain ended). Reported besides: starved (sockets that
 * were open through the window but got no echo in it), close_unanswered
 * (sockets whose Close got no Close back within 1 s).
 *
 * The first problem of each kind is described on stderr, with the bytes
 * received (escaped) where they matter.
 *
 * Exit status: 0 when the run happened (even with errors: the caller
 * judges), 1 when it could not start or report, 2 on bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "core/sha1.h"

#define PROG "wsload"
#define MAX_EVENTS 256
#define READ_SIZE (64 * 1024)
#define HEAD_MAX 8192
#define SETUP_NS 5000000000ull /* sockets must be upgraded by then */
#define CLOSE_NS 1000000000ull /* wait for the server's Close */
#define MAX_SIZE (16L << 20)
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* The filler of the payloads: text, so that --text sends valid UTF-8 and
 * --deflate has something to compress, as chat or JSON would. */
static const char phrase[] = "The quick brown fox jumps over the lazy dog; "
                             "pack my box with five dozen liquor jugs. "
                             "{\"user\":\"ada\",\"room\":42,\"typing\":false} ";
#define PHRASE_LEN (sizeof(phrase) - 1)

enum { C_DOWN, C_CONNECTING, C_HANDSHAKE, C_OPEN, C_CLOSING };
enum { P_SETUP, P_RUN, P_DRAIN, P_CLOSE };
enum { OP_CONT = 0, OP_TEXT = 1, OP_BINARY = 2, OP_CLOSE = 8, OP_PING = 9 };
enum { OP_PONG = 10 };

typedef struct {
  int fd;
  int state;
  int out_armed;
  uint32_t id;
  char accept[29]; /* the Sec-WebSocket-Accept expected */
  /* outgoing bytes not yet written */
  unsigned char *wbuf;
  size_t wlen, wpos, wcap;
  /* messages: next_echo .. next_seq - 1 are in flight */
  uint64_t next_seq, next_echo;
  uint64_t *sent_ns; /* indexed by seq % depth */
  uint64_t win_msgs;
  /* incoming bytes not yet parsed */
  unsigned char *rbuf;
  size_t rlen, rcap;
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
  uint64_t close_deadline;
} conn;

static struct {
  lg_target target;
  int ep;
  conn *conns;
  long nconns;
  long depth;
  size_t size;
  int binary;
  int offer_deflate;
  int level;
  const char *host, *path;
  long port;
  int phase;
  uint64_t win_start, win_end;
  int measuring; /* the "measuring" line was printed */
  size_t msg_limit;
  unsigned char *filler; /* the phrase repeated, size + PHRASE_LEN bytes */
  unsigned char *tmp;    /* one payload */
  unsigned char *expect; /* the payload an echo should carry */
  unsigned char *zbuf;   /* one compressed payload */
  size_t zcap;
  unsigned char *ibuf; /* one inflated message */
  lg_hist hist;
  uint64_t rng;
  /* counts */
  uint64_t messages, sent, echoes;
  uint64_t bytes_out_win, bytes_in_win, bytes_out, bytes_in;
  uint64_t connect_errors, handshake_errors, mismatch, protocol_errors;
  uint64_t closed, unanswered, close_unanswered, starved, pings;
  long open, upgraded, deflate_negotiated;
  char extension[256]; /* the first Sec-WebSocket-Extensions answered */
  int said[8];         /* the first problem of each kind was described */
} g;

enum { SAY_CONNECT, SAY_HANDSHAKE, SAY_MISMATCH, SAY_PROTOCOL, SAY_CLOSED };

static void usage(void) {
  fprintf(stderr,
          "usage: " PROG " --port P [--host 127.0.0.1] [--path /ws] "
          "[--conns 64] [--depth 8]\n"
          "       [--size 128] [--duration 10] [--warmup 0] [--drain 2] "
          "[--text | --binary]\n"
          "       [--deflate [--level L]] [--json FILE]\n");
  exit(2);
}

/* accept = base64(SHA-1(key ++ GUID)); key is 24 characters. */
static void ws_accept(const char *key, char out[29]) {
  unsigned char dig[20];
  tern__sha1 s;
  tern__sha1_init(&s);
  tern__sha1_update(&s, key, strlen(key));
  tern__sha1_update(&s, WS_GUID, sizeof(WS_GUID) - 1);
  tern__sha1_final(&s, dig);
  out[tern__base64_encode(out, dig, sizeof(dig))] = '\0';
}

/* ---- Randomness: keys from getrandom, masks from xorshift64* ---- */

static uint64_t rnd64(void) {
  g.rng ^= g.rng >> 12;
  g.rng ^= g.rng << 25;
  g.rng ^= g.rng >> 27;
  return g.rng * 0x2545f4914f6cdd1dull;
}

static void random_bytes(unsigned char *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(p + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      /* Not secret: fall back to the generator. */
      for (; got < n; got++)
        p[got] = (unsigned char)(rnd64() >> 56);
      return;
    }
    got += (size_t)r;
  }
}

/* ---- Reporting problems ---- */

/* The first len bytes of p, escaped, for a one-line description. */
static void put_escaped(FILE *f, const unsigned char *p, size_t len) {
  size_t i;
  for (i = 0; i < len; i++) {
    unsigned c = p[i];
    if (c == '\r')
      fputs("\\r", f);
    else if (c == '\n')
      fputs("\\n", f);
    else if (c == '\\')
      fputs("\\\\", f);
    else if (c >= 32 && c < 127)
      fputc((int)c, f);
    else
      fprintf(f, "\\x%02x", c);
  }
}

static int first_time(int kind) {
  if (g.said[kind])
    return 0;
  g.said[kind] = 1;
  return 1;
}

/* ---- Payloads ---- */

/* Message seq of socket id: the sequence number and the socket's number
 * first (as hex digits in text mode, little-endian bytes in binary mode),
 * then the phrase from an offset that moves with seq. */
static void make_payload(unsigned char *p, uint32_t id, uint64_t seq) {
  unsigned char head[32];
  size_t hl, n = g.size;
  if (g.binary) {
    int i;
    for (i = 0; i < 8; i++)
      head[i] = (unsigned char)(seq >> (8 * i));
    for (i = 0; i < 4; i++)
      head[8 + i] = (unsigned char)(id >> (8 * i));
    hl = 12;
  } else {
    hl = (size_t)snprintf((char *)head, sizeof(head), "%016llx:%08x ",
                          (unsigned long long)seq, (unsigned)id);
  }
  if (hl > n)
    hl = n;
  memcpy(p, head, hl);
  memcpy(p + hl, g.filler + (seq * 7 + id) % PHRASE_LEN, n - hl);
}

/* ---- Connections ---- */

static int reserve(unsigned char **buf, size_t *cap, size_t need) {
  size_t c = *cap ? *cap : 4096;
  unsigned char *nb;
  if (need <= *cap)
    return 0;
  while (c < need)
    c *= 2;
  nb = realloc(*buf, c);
  if (nb == NULL)
    return -1;
  *buf = nb;
  *cap = c;
  return 0;
}

static void set_events(conn *c, int out) {
  struct epoll_event ev;
  if (out == c->out_armed)
    return;
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | (out ? EPOLLOUT : 0);
  ev.data.u64 = c->id;
  epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &ev);
  c->out_armed = out;
}

static void conn_close(conn *c) {
  if (c->fd >= 0) {
    close(c->fd);
    if (c->state == C_OPEN || c->state == C_CLOSING)
      g.open--;
  }
  c->fd = -1;
  c->state = C_DOWN;
  c->wlen = c->wpos = c->rlen = c->mlen = 0;
  c->in_msg = 0;
  if (c->zd_ok)
    deflateEnd(&c->zd);
  if (c->zi_ok)
    inflateEnd(&c->zi);
  c->zd_ok = c->zi_ok = 0;
}

static void protocol_error(conn *c, const char *why) {
  g.protocol_errors++;
  if (first_time(SAY_PROTOCOL))
    fprintf(stderr, PROG ": socket %u: protocol error: %s\n", (unsigned)c->id,
            why);
  conn_close(c);
}

/* The server ended the socket before the client did. */
static void server_closed(conn *c, const char *how) {
  g.closed++;
  if (first_time(SAY_CLOSED))
    fprintf(stderr, PROG ": socket %u: %s, %llu messages in flight\n",
            (unsigned)c->id, how,
            (unsigned long long)(c->next_seq - c->next_echo));
  conn_close(c);
}

static void flush(conn *c) {
  while (c->wpos < c->wlen) {
    ssize_t w = send(c->fd, c->wbuf + c->wpos, c->wlen - c->wpos, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        set_events(c, 1);
        return;
      }
      if (c->state == C_CLOSING)
        conn_close(c);
      else
        server_closed(c, strerror(errno));
      return;
    }
    if (g.phase == P_RUN) {
      uint64_t now = lg_now_ns();
      if (now >= g.win_start && now < g.win_end)
        g.bytes_out_win += (uint64_t)w;
    }
    g.bytes_out += (uint64_t)w;
    c->wpos += (size_t)w;
  }
  c->wlen = c->wpos = 0;
  set_events(c, 0);
}

static void mask_copy(unsigned char *dst, const unsigned char *src, size_t n,
                      const unsigned char m[4]) {
  unsigned char m8b[8];
  uint64_t m8;
  size_t i = 0;
  memcpy(m8b, m, 4);
  memcpy(m8b + 4, m, 4);
  memcpy(&m8, m8b, 8);
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    memcpy(&x, src + i, 8);
    x ^= m8;
    memcpy(dst + i, &x, 8);
  }
  for (; i < n; i++)
    dst[i] = src[i] ^ m[i & 3];
}

/* Append one masked frame (b0: FIN, RSV and opcode) to the write batch. */
static int put_frame(conn *c, unsigned b0, const unsigned char *p, size_t n) {
  unsigned char *o;
  size_t h = 2;
  uint64_t r = rnd64();
  unsigned char mask[4];
  int i;
  if (reserve(&c->wbuf, &c->wcap, c->wlen + n + 14) != 0)
    return -1;
  o = c->wbuf + c->wlen;
  o[0] = (unsigned char)b0;
  if (n < 126) {
    o[1] = (unsigned char)(0x80 | n);
  } else if (n < 65536) {
    o[1] = 0x80 | 126;
    o[2] = (unsigned char)(n >> 8);
    o[3] = (unsigned char)n;
    h = 4;
  } else {
    o[1] = 0x80 | 127;
    for (i = 0; i < 8; i++)
      o[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
    h = 10;
  }
  for (i = 0; i < 4; i++)
    mask[i] = (unsigned char)(r >> (8 * i));
  memcpy(o + h, mask, 4);
  mask_copy(o + h + 4, p, n, mask);
  c->wlen += h + 4 + n;
  return 0;
}

/* Raw deflate with a sync flush, the trailing 00 00 ff ff removed. Returns
 * the compressed length in g.zbuf, or -1. */
static long compress_msg(conn *c, const unsigned char *p, size_t n) {
  size_t out = 0;
  c->zd.next_in = (unsigned char *)p;
  c->zd.avail_in = (uInt)n;
  do {
    int rc;
    if (out + 64 > g.zcap && reserve(&g.zbuf, &g.zcap, out + 64) != 0)
      return -1;
    c->zd.next_out = g.zbuf + out;
    c->zd.avail_out = (uInt)(g.zcap - out);
    rc = deflate(&c->zd, Z_SYNC_FLUSH);
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return -1;
    out = g.zcap - c->zd.avail_out;
    if (c->zd.avail_out == 0 && reserve(&g.zbuf, &g.zcap, g.zcap * 2) != 0)
      return -1;
  } while (c->zd.avail_in > 0 || c->zd.avail_out == 0);
  if (out < 4 || memcmp(g.zbuf + out - 4, "\0\0\xff\xff", 4) != 0)
    return -1;
  if (c->reset_out)
    deflateReset(&c->zd);
  return (long)(out - 4);
}

static int put_message(conn *c, uint64_t seq) {
  unsigned op = g.binary ? OP_BINARY : OP_TEXT;
  make_payload(g.tmp, c->id, seq);
  if (c->send_comp) {
    long n = compress_msg(c, g.tmp, g.size);
    if (n < 0)
      return -1;
    return put_frame(c, 0x80 | 0x40 | op, g.zbuf, (size_t)n);
  }
  return put_frame(c, 0x80 | op, g.tmp, g.size);
}

static void start_close(conn *c) {
  static const unsigned char normal[2] = {0x03, 0xe8}; /* 1000 */
  if (c->state != C_OPEN)
    return;
  c->state = C_CLOSING;
  c->close_deadline = lg_now_ns() + CLOSE_NS;
  if (put_frame(c, 0x80 | OP_CLOSE, normal, 2) != 0) {
    conn_close(c);
    return;
  }
  flush(c);
}

/* Keep depth messages in flight, in one write. */
static void fill(conn *c) {
  uint64_t now;
  if (c->state != C_OPEN || g.phase != P_RUN ||
      c->next_seq - c->next_echo >= (uint64_t)g.depth)
    return;
  now = lg_now_ns();
  while (c->next_seq - c->next_echo < (uint64_t)g.depth) {
    if (put_message(c, c->next_seq) != 0) {
      protocol_error(c, "could not compress or buffer a message");
      return;
    }
    c->sent_ns[c->next_seq % (uint64_t)g.depth] = now;
    c->next_seq++;
    g.sent++;
  }
  flush(c);
}

static void mismatch(conn *c, const char *why, const unsigned char *p,
                     size_t n) {
  g.mismatch++;
  if (first_time(SAY_MISMATCH)) {
    fprintf(stderr, PROG ": socket %u: message %llu: %s; got %zu bytes: ",
            (unsigned)c->id, (unsigned long long)c->next_echo, why, n);
    put_escaped(stderr, p, n < 96 ? n : 96);
    fprintf(stderr, "%s\n", n > 96 ? "..." : "");
  }
}

/* A whole message (inflated) arrived on c. */
static void deliver(conn *c, int op, const unsigned char *p, size_t n,
                    uint64_t now) {
  uint64_t sent;
  if (c->next_echo == c->next_seq) {
    mismatch(c, "an echo with no message in flight", p, n);
    return;
  }
  if (op != (g.binary ? OP_BINARY : OP_TEXT))
    mismatch(c,
             op == OP_TEXT ? "a text echo of a binary message"
                           : "a binary echo of a text message",
             p, n);
  else if (n != g.size)
    mismatch(c, "an echo of another length", p, n);
  else {
    make_payload(g.expect, c->id, c->next_echo);
    if (memcmp(p, g.expect, n) != 0)
      mismatch(c, "an echo that differs from the message sent", p, n);
  }
  sent = c->sent_ns[c->next_echo % (uint64_t)g.depth];
  c->next_echo++;
  g.echoes++;
  if (g.phase == P_RUN && now >= g.win_start && now < g.win_end) {
    lg_hist_record(&g.hist, now > sent ? (now - sent + 500) / 1000 : 0);
    g.messages++;
    c->win_msgs++;
  }
  if (g.phase == P_DRAIN && c->next_echo == c->next_seq)
    start_close(c);
}

/* Inflate one compressed message (the 00 00 ff ff tail added) into
 * g.ibuf; returns its length, or -1. */
static long inflate_msg(conn *c, const unsigned char *p, size_t n) {
  static const unsigned char tail[4] = {0x00, 0x00, 0xff, 0xff};
  size_t out = 0;
  int part;
  for (part = 0; part < 2; part++) {
    c->zi.next_in = (unsigned char *)(part ? tail : p);
    c->zi.avail_in = (uInt)(part ? 4 : n);
    do {
      int rc;
      if (out == g.msg_limit)
        return -1; /* larger than any message sent */
      c->zi.next_out = g.ibuf + out;
      c->zi.avail_out = (uInt)(g.msg_limit - out);
      rc = inflate(&c->zi, Z_SYNC_FLUSH);
      out = g.msg_limit - c->zi.avail_out;
      if (rc == Z_STREAM_END) {
        /* a final block (BFINAL): the next message starts a new stream */
        inflateReset(&c->zi);
        return (long)out;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR)
        return -1;
      if (rc == Z_BUF_ERROR && c->zi.avail_in > 0 && c->zi.avail_out > 0)
        return -1;
    } while (c->zi.avail_in > 0 || c->zi.avail_out == 0);
  }
  if (c->reset_in)
    inflateReset(&c->zi);
  return (long)out;
}

static void deliver_maybe_compressed(conn *c, int op, int comp,
                                     const unsigned char *p, size_t n,
                                     uint64_t now) {
  long m;
  if (!comp) {
    deliver(c, op, p, n, now);
    return;
  }
  m = inflate_msg(c, p, n);
  if (m < 0) {
    protocol_error(c, "a compressed message that does not inflate (or "
                      "inflates past the message size)");
    return;
  }
  deliver(c, op, g.ibuf, (size_t)m, now);
}

/* Parse and act on the frames in c->rbuf; returns bytes consumed. */
static size_t frames(conn *c, uint64_t now) {
  size_t pos = 0;
  while (c->fd >= 0) {
    const unsigned char *b = c->rbuf + pos;
    size_t n = c->rlen - pos, h = 2;
    uint64_t len;
    int fin, rsv, op, i;
    if (n < 2)
      break;
    fin = b[0] >> 7;
    rsv = (b[0] >> 4) & 7;
    op = b[0] & 15;
    if (b[1] & 0x80) {
      protocol_error(c, "a masked frame from the server");
      break;
    }
    len = b[1] & 127;
    if (len == 126) {
      if (n < 4)
        break;
      len = (uint64_t)b[2] << 8 | b[3];
      h = 4;
    } else if (len == 127) {
      if (n < 10)
        break;
      len = 0;
      for (i = 0; i < 8; i++)
        len = len << 8 | b[2 + i];
      h = 10;
    }
    if (len > g.msg_limit) {
      protocol_error(c, "a frame larger than any message sent");
      break;
    }
    if (n < h + len) {
      if (reserve(&c->rbuf, &c->rcap, c->rlen + (h + len - n)) != 0) {
        protocol_error(c, "out of memory");
        break;
      }
      break;
    }
    pos += h + (size_t)len;
    if (op & 8) { /* control */
      if (!fin || len > 125 || rsv) {
        protocol_error(c, "a fragmented, oversized or RSV control frame");
        break;
      }
      if (op == OP_CLOSE) {
        if (c->state == C_CLOSING) {
          conn_close(c); /* the answer to our Close */
        } else {
          char how[160];
          unsigned code = len >= 2 ? (unsigned)b[h] << 8 | b[h + 1] : 0;
          snprintf(how, sizeof(how), "the server sent Close (code %u%s)", code,
                   len >= 2 ? "" : ", none given");
          put_frame(c, 0x80 | OP_CLOSE, b + h, len >= 2 ? 2 : 0);
          flush(c);
          if (c->fd >= 0)
            server_closed(c, how);
        }
      } else if (op == OP_PING) {
        g.pings++;
        if (put_frame(c, 0x80 | OP_PONG, b + h, (size_t)len) == 0)
          flush(c);
      } else if (op != OP_PONG) {
        protocol_error(c, "a reserved control opcode");
      }
      continue;
    }
    if ((rsv & 3) || (rsv && !c->deflate)) {
      protocol_error(c, "reserved bits set that no extension defines");
      break;
    }
    if (op == OP_TEXT || op == OP_BINARY) {
      if (c->in_msg) {
        protocol_error(c, "a new message inside a fragmented one");
        break;
      }
      if (fin) {
        deliver_maybe_compressed(c, op, rsv != 0, b + h, (size_t)len, now);
        continue;
      }
      c->in_msg = 1;
      c->mop = op;
      c->mcomp = rsv != 0;
      c->mlen = 0;
    } else if (op == OP_CONT) {
      if (!c->in_msg || rsv) {
        protocol_error(c, "an unexpected continuation frame");
        break;
      }
    } else {
      protocol_error(c, "a reserved data opcode");
      break;
    }
    if (c->mlen + len > g.msg_limit ||
        reserve(&c->msg, &c->mcap, c->mlen + (size_t)len) != 0) {
      protocol_error(c, "a fragmented message larger than any sent");
      break;
    }
    memcpy(c->msg + c->mlen, b + h, (size_t)len);
    c->mlen += (size_t)len;
    if (fin) {
      c->in_msg = 0;
      deliver_maybe_compressed(c, c->mop, c->mcomp, c->msg, c->mlen, now);
    }
  }
  return pos;
}

/* ---- The handshake ---- */

/* The server's Sec-WebSocket-Extensions answer: at most one extension,
 * permessage-deflate, with parameters RFC 7692 defines. Returns NULL, or
 * what is wrong. */
static const char *parse_extension(conn *c, const char *v, size_t n) {
  char buf[256], *save = NULL, *tok;
  int first = 1;
  if (n >= sizeof(buf))
    return "an overlong Sec-WebSocket-Extensions";
  memcpy(buf, v, n);
  buf[n] = '\0';
  if (g.extension[0] == '\0')
    snprintf(g.extension, sizeof(g.extension), "%s", buf);
  if (!g.offer_deflate)
    return "an extension the client did not offer";
  if (strchr(buf, ',') != NULL)
    return "more than one extension";
  for (tok = strtok_r(buf, ";", &save); tok != NULL;
       tok = strtok_r(NULL, ";", &save)) {
    char *e, *val;
    while (*tok == ' ' || *tok == '\t')
      tok++;
    e = tok + strlen(tok);
    while (e > tok && (e[-1] == ' ' || e[-1] == '\t'))
      *--e = '\0';
    if (first) {
      if (strcasecmp(tok, "permessage-deflate") != 0)
        return "an extension other than permessage-deflate";
      first = 0;
      continue;
    }
    val = strchr(tok, '=');
    if (val != NULL) {
      char *ne = val;
      *val++ = '\0';
      while (ne > tok && (ne[-1] == ' ' || ne[-1] == '\t'))
        *--ne = '\0';
      while (*val == ' ' || *val == '\t')
        val++;
      if (*val == '"' && strlen(val) >= 2 && val[strlen(val) - 1] == '"') {
        val[strlen(val) - 1] = '\0';
        val++;
      }
    }
    if (strcasecmp(tok, "server_no_context_takeover") == 0 && val == NULL) {
      c->reset_in = 1;
    } else if (strcasecmp(tok, "client_no_context_takeover") == 0 &&
               val == NULL) {
      c->reset_out = 1;
    } else if (strcasecmp(tok, "server_max_window_bits") == 0 && val != NULL) {
      long bits = strtol(val, &e, 10);
      if (*e != '\0' || bits < 8 || bits > 15)
        return "a bad server_max_window_bits";
    } else if (strcasecmp(tok, "client_max_window_bits") == 0 && val != NULL) {
      long bits = strtol(val, &e, 10);
      if (*e != '\0' || bits < 8 || bits > 15)
        return "a bad client_max_window_bits";
      c->client_bits = (int)bits;
    } else {
      return "an unknown permessage-deflate parameter";
    }
  }
  if (first)
    return "an empty Sec-WebSocket-Extensions";
  c->deflate = 1;
  return NULL;
}

static int handshake_failed(conn *c, const char *why, size_t head_len) {
  g.handshake_errors++;
  if (first_time(SAY_HANDSHAKE)) {
    fprintf(stderr,
            PROG ": socket %u: handshake: %s; response: ", (unsigned)c->id,
            why);
    put_escaped(stderr, c->rbuf, head_len < 600 ? head_len : 600);
    fprintf(stderr, "\n");
  }
  conn_close(c);
  return -1;
}

/* The response head (head_len bytes, ending in CRLF CRLF) of c's upgrade. */
static int check_upgrade(conn *c, size_t head_len) {
  const char *buf = (const char *)c->rbuf, *end = buf + head_len - 2;
  const char *line, *why;
  int upgrade = 0, connection = 0, accept = 0;
  c->send_comp = c->client_bits = 0;
  if (head_len < 16 || memcmp(buf, "HTTP/1.1 ", 9) != 0)
    return handshake_failed(c, "not an HTTP/1.1 response", head_len);
  if (memcmp(buf + 9, "101", 3) != 0 || (buf[12] != ' ' && buf[12] != '\r'))
    return handshake_failed(c, "status other than 101", head_len);
  line = (const char *)memchr(buf, '\n', head_len) + 1;
  while (line < end) {
    lg_field f;
    int r = lg_field_line(&line, end, &f);
    if (r == LG_FIELD_BAD_LINE)
      return handshake_failed(c, "a malformed header line", head_len);
    if (r == LG_FIELD_NO_COLON)
      return handshake_failed(c, "a header line without a colon", head_len);
    if (lg_name_is(f.name, f.name_len, "upgrade")) {
      upgrade |= lg_name_is(f.value, f.value_len, "websocket");
    } else if (lg_name_is(f.name, f.name_len, "connection")) {
      connection |= lg_has_token(f.value, f.value_len, "upgrade");
    } else if (lg_name_is(f.name, f.name_len, "sec-websocket-accept")) {
      if (f.value_len != 28 || memcmp(f.value, c->accept, 28) != 0)
        return handshake_failed(c, "a wrong Sec-WebSocket-Accept", head_len);
      accept = 1;
    } else if (lg_name_is(f.name, f.name_len, "sec-websocket-extensions")) {
      if (c->deflate)
        return handshake_failed(c, "two Sec-WebSocket-Extensions", head_len);
      why = parse_extension(c, f.value, f.value_len);
      if (why != NULL)
        return handshake_failed(c, why, head_len);
    } else if (lg_name_is(f.name, f.name_len, "sec-websocket-protocol")) {
      return handshake_failed(c, "a subprotocol the client did not offer",
                              head_len);
    }
  }
  if (!upgrade)
    return handshake_failed(c, "no Upgrade: websocket", head_len);
  if (!connection)
    return handshake_failed(c, "no Connection: Upgrade", head_len);
  if (!accept)
    return handshake_failed(c, "no Sec-WebSocket-Accept", head_len);
  if (c->deflate) {
    int bits = c->client_bits ? c->client_bits : 15;
    memset(&c->zd, 0, sizeof(c->zd));
    memset(&c->zi, 0, sizeof(c->zi));
    /* zlib's smallest raw window is 9 bits: with 8, send uncompressed. */
    if (bits > 8) {
      if (deflateInit2(&c->zd, g.level, Z_DEFLATED, -bits, 8,
                       Z_DEFAULT_STRATEGY) != Z_OK)
        return handshake_failed(c, "deflateInit2 failed", head_len);
      c->zd_ok = 1;
      c->send_comp = 1;
    }
    /* 15 bits inflates whatever window the server used. */
    if (inflateInit2(&c->zi, -15) != Z_OK)
      return handshake_failed(c, "inflateInit2 failed", head_len);
    c->zi_ok = 1;
    g.deflate_negotiated++;
  }
  c->state = C_OPEN;
  g.open++;
  g.upgraded++;
  return 0;
}

static void send_upgrade(conn *c) {
  unsigned char raw[16];
  char key[25], req[1024];
  int n;
  random_bytes(raw, sizeof(raw));
  key[tern__base64_encode(key, raw, sizeof(raw))] = '\0';
  ws_accept(key, c->accept);
  n = snprintf(req, sizeof(req),
               "GET %s HTTP/1.1\r\n"
               "Host: %s:%ld\r\n"
               "Upgrade: websocket\r\n"
               "Connection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\n"
               "Sec-WebSocket-Version: 13\r\n"
               "%s"
               "\r\n",
               g.path, g.host, g.port, key,
               g.offer_deflate
                   ? "Sec-WebSocket-Extensions: permessage-deflate; "
                     "client_max_window_bits\r\n"
                   : "");
  c->state = C_HANDSHAKE;
  if (n < 0 || (size_t)n >= sizeof(req) ||
      reserve(&c->wbuf, &c->wcap, c->wlen + (size_t)n) != 0) {
    handshake_failed(c, "request too long", 0);
    return;
  }
  memcpy(c->wbuf + c->wlen, req, (size_t)n);
  c->wlen += (size_t)n;
  flush(c);
}

static void readable(conn *c, uint64_t now) {
  ssize_t r;
  size_t used;
  if (c->rcap - c->rlen < READ_SIZE &&
      reserve(&c->rbuf, &c->rcap, c->rlen + READ_SIZE) != 0) {
    protocol_error(c, "out of memory");
    return;
  }
  r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
      return;
  }
  if (r <= 0) {
    const char *why =
        r == 0 ? "the server closed the connection" : strerror(errno);
    if (c->state == C_HANDSHAKE)
      handshake_failed(c, why, c->rlen);
    else if (c->state == C_CLOSING) {
      g.close_unanswered++; /* closed without a Close frame */
      conn_close(c);
    } else
      server_closed(c, why);
    return;
  }
  if (g.phase == P_RUN && now >= g.win_start && now < g.win_end)
    g.bytes_in_win += (uint64_t)r;
  g.bytes_in += (uint64_t)r;
  c->rlen += (size_t)r;
  if (c->state == C_HANDSHAKE) {
    const unsigned char *e = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
    size_t head_len;
    if (e == NULL) {
      if (c->rlen >= HEAD_MAX)
        handshake_failed(c, "response head too large", c->rlen);
      return;
    }
    head_len = (size_t)(e - c->rbuf) + 4;
    if (check_upgrade(c, head_len) != 0)
      return;
    memmove(c->rbuf, c->rbuf + head_len, c->rlen - head_len);
    c->rlen -= head_len;
    if (g.phase == P_RUN)
      fill(c);
  }
  used = frames(c, now);
  if (c->fd < 0)
    return;
  if (used > 0) {
    memmove(c->rbuf, c->rbuf + used, c->rlen - used);
    c->rlen -= used;
  }
  fill(c);
}

static void on_event(conn *c, uint32_t events, uint64_t now) {
  if (c->state == C_CONNECTING) {
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
      err = errno;
    if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
      err = ECONNRESET;
    if (err != 0) {
      g.connect_errors++;
      if (first_time(SAY_CONNECT))
        fprintf(stderr, PROG ": socket %u: connect: %s\n", (unsigned)c->id,
                strerror(err));
      conn_close(c);
      return;
    }
    set_events(c, 0);
    send_upgrade(c);
    return;
  }
  if ((events & EPOLLOUT) && c->wpos < c->wlen) {
    flush(c);
    if (c->fd < 0)
      return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
    readable(c, now);
}

static void conn_open(conn *c) {
  struct epoll_event ev;
  c->fd = lg_connect(&g.target);
  if (c->fd < 0) {
    g.connect_errors++;
    if (first_time(SAY_CONNECT))
      fprintf(stderr, PROG ": socket %u: connect: %s\n", (unsigned)c->id,
              strerror(errno));
    return;
  }
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.u64 = c->id;
  if (epoll_ctl(g.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    g.connect_errors++;
    close(c->fd);
    c->fd = -1;
    return;
  }
  c->out_armed = 1;
  c->state = C_CONNECTING;
}

static int count_state(int s) {
  long i;
  int n = 0;
  for (i = 0; i < g.nconns; i++)
    n += g.conns[i].state == s;
  return n;
}

static void poll_once(uint64_t until) {
  struct epoll_event ev[MAX_EVENTS];
  uint64_t now = lg_now_ns();
  int n, i, ms;
  ms = until <= now ? 0 : (int)((until - now + 999999u) / 1000000u);
  n = epoll_wait(g.ep, ev, MAX_EVENTS, ms);
  if (n <= 0)
    return;
  now = lg_now_ns();
  for (i = 0; i < n; i++) {
    conn *c = &g.conns[ev[i].data.u64];
    if (c->fd >= 0)
      on_event(c, ev[i].events, now);
  }
}

static void self_test(void) {
  char out[29];
  ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out); /* RFC 6455 1.3 */
  if (strcmp(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") != 0) {
    fprintf(stderr, PROG ": SHA-1 self-test failed (%s)\n", out);
    exit(1);
  }
}

static void report_json(FILE *f, double duration, double warmup, double rate) {
  fprintf(f,
          "{\"requests\":%llu,\"messages\":%llu,\"errors\":%llu,"
          "\"non2xx\":0,\"rate_achieved\":%.3f,\"duration_s\":%.6f,"
          "\"latency_us\":",
          (unsigned long long)g.messages, (unsigned long long)g.messages,
          (unsigned long long)(g.connect_errors + g.handshake_errors +
                               g.mismatch + g.protocol_errors + g.closed +
                               g.unanswered),
          rate, duration);
  lg_json_latency(f, &g.hist);
  fprintf(f,
          ",\"connect_errors\":%llu,\"handshake_errors\":%llu,"
          "\"mismatch\":%llu,\"protocol_errors\":%llu,\"closed\":%llu,"
          "\"unanswered\":%llu,\"starved\":%llu,\"close_unanswered\":%llu,"
          "\"pings\":%llu,\"connections\":%ld,\"upgraded\":%ld,"
          "\"depth\":%ld,\"size\":%zu,\"mode\":\"%s\","
          "\"deflate_offered\":%s,\"deflate_negotiated\":%ld,"
          "\"extension\":\"",
          (unsigned long long)g.connect_errors,
          (unsigned long long)g.handshake_errors,
          (unsigned long long)g.mismatch, (unsigned long long)g.protocol_errors,
          (unsigned long long)g.closed, (unsigned long long)g.unanswered,
          (unsigned long long)g.starved, (unsigned long long)g.close_unanswered,
          (unsigned long long)g.pings, g.nconns, g.upgraded, g.depth, g.size,
          g.binary ? "binary" : "text", g.offer_deflate ? "true" : "false",
          g.deflate_negotiated);
  {
    const char *p;
    for (p = g.extension; *p; p++) {
      if (*p == '"' || *p == '\\')
        fputc('\\', f);
      if ((unsigned char)*p >= 32)
        fputc(*p, f);
    }
  }
  fprintf(f,
          "\",\"sent\":%llu,\"echoes\":%llu,\"bytes_out_window\":%llu,"
          "\"bytes_in_window\":%llu,\"bytes_out\":%llu,\"bytes_in\":%llu,"
          "\"warmup_s\":%.3f}\n",
          (unsigned long long)g.sent, (unsigned long long)g.echoes,
          (unsigned long long)g.bytes_out_win,
          (unsigned long long)g.bytes_in_win, (unsigned long long)g.bytes_out,
          (unsigned long long)g.bytes_in, warmup);
}

int main(int argc, char **argv) {
  const char *json = NULL;
  double duration = 10, warmup = 0, drain = 2, rate;
  uint64_t now, setup_end, drain_end = 0, close_end = 0;
  long i;

  g.host = "127.0.0.1";
  g.path = "/ws";
  g.port = -1;
  g.nconns = 64;
  g.depth = 8;
  g.size = 128;
  g.level = Z_DEFAULT_COMPRESSION;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    int k = (int)i;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
      usage();
    else if (strcmp(a, "--host") == 0)
      g.host = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--port") == 0)
      g.port =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 65535);
    else if (strcmp(a, "--path") == 0)
      g.path = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--conns") == 0 || strcmp(a, "--connections") == 0)
      g.nconns =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 100000);
    else if (strcmp(a, "--depth") == 0)
      g.depth =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 4096);
    else if (strcmp(a, "--size") == 0)
      g.size = (size_t)lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k),
                                   0, MAX_SIZE);
    else if (strcmp(a, "--duration") == 0)
      duration = lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k),
                               0.001, 86400);
    else if (strcmp(a, "--warmup") == 0)
      warmup =
          lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k), 0, 86400);
    else if (strcmp(a, "--drain") == 0)
      drain =
          lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k), 0, 3600);
    else if (strcmp(a, "--text") == 0)
      g.binary = 0;
    else if (strcmp(a, "--binary") == 0)
      g.binary = 1;
    else if (strcmp(a, "--deflate") == 0)
      g.offer_deflate = 1;
    else if (strcmp(a, "--level") == 0)
      g.level =
          (int)lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 0, 9);
    else if (strcmp(a, "--json") == 0)
      json = lg_arg_value(PROG, argc, argv, &k);
    else {
      fprintf(stderr, PROG ": unknown argument '%s'\n", a);
      usage();
    }
    i = k;
  }
  if (g.port < 0)
    usage();
  if (lg_check_path(PROG, g.path) != 0)
    return 2;
  if (strpbrk(g.host, " \r\n") != NULL) {
    fprintf(stderr, PROG ": bad --host\n");
    return 2;
  }
  self_test();
  if (lg_target_init(&g.target, PROG, g.host, g.port) != 0)
    return 2;
  if (lg_raise_nofile() < g.nconns + 16) {
    fprintf(stderr, PROG ": RLIMIT_NOFILE is below %ld connections\n",
            g.nconns);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  random_bytes((unsigned char *)&g.rng, sizeof(g.rng));
  g.rng |= 1;
  /* An echo may not be longer than a message sent; compressed frames may
   * be a little longer than their message. */
  g.msg_limit = g.size + g.size / 8 + 1024;
  g.filler = malloc(g.size + PHRASE_LEN + 1);
  g.tmp = malloc(g.size + 1);
  g.expect = malloc(g.size + 1);
  g.ibuf = malloc(g.msg_limit);
  g.zcap = (size_t)compressBound((uLong)g.size) + 1024;
  g.zbuf = malloc(g.zcap);
  g.conns = calloc((size_t)g.nconns, sizeof(conn));
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  if (g.filler == NULL || g.tmp == NULL || g.expect == NULL || g.ibuf == NULL ||
      g.zbuf == NULL || g.conns == NULL || g.ep < 0) {
    perror(PROG);
    return 1;
  }
  for (i = 0; i < (long)(g.size + PHRASE_LEN); i++)
    g.filler[i] = (unsigned char)phrase[(size_t)i % PHRASE_LEN];

  /* Connect and upgrade every socket before the clock starts. */
  g.phase = P_SETUP;
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    c->fd = -1;
    c->id = (uint32_t)i;
    c->sent_ns = calloc((size_t)g.depth, sizeof(uint64_t));
    if (c->sent_ns == NULL) {
      perror(PROG);
      return 1;
    }
    conn_open(c);
  }
  setup_end = lg_now_ns() + SETUP_NS;
  while (count_state(C_CONNECTING) + count_state(C_HANDSHAKE) > 0 &&
         lg_now_ns() < setup_end)
    poll_once(setup_end);
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    if (c->state == C_CONNECTING || c->state == C_HANDSHAKE)
      handshake_failed(c, "no answer within 5 s", c->rlen);
  }

  now = lg_now_ns();
  g.win_start = now + (uint64_t)(warmup * 1e9);
  g.win_end = g.win_start + (uint64_t)(duration * 1e9);
  g.phase = P_RUN;
  for (i = 0; i < g.nconns; i++)
    fill(&g.conns[i]);
  for (;;) {
    now = lg_now_ns();
    if (!g.measuring && now >= g.win_start) {
      g.measuring = 1;
      printf(PROG ": measuring\n");
      fflush(stdout);
    }
    if (g.phase == P_RUN && now >= g.win_end) {
      g.phase = P_DRAIN;
      drain_end = now + (uint64_t)(drain * 1e9);
      for (i = 0; i < g.nconns; i++) {
        conn *c = &g.conns[i];
        if (c->state == C_OPEN && c->win_msgs == 0)
          g.starved++;
        if (c->state == C_OPEN && c->next_echo == c->next_seq)
          start_close(c);
      }
    }
    if (g.phase == P_DRAIN && now >= drain_end) {
      g.phase = P_CLOSE;
      close_end = now + CLOSE_NS;
      for (i = 0; i < g.nconns; i++) {
        conn *c = &g.conns[i];
        if (c->state == C_OPEN) {
          g.unanswered += c->next_seq - c->next_echo;
          start_close(c);
        }
      }
    }
    if (g.phase >= P_DRAIN && g.open == 0)
      break;
    if (g.phase == P_CLOSE && now >= close_end)
      break;
    if (g.phase == P_RUN && g.open == 0)
      break; /* every socket is gone: nothing left to measure */
    poll_once(g.phase == P_RUN ? (g.measuring ? g.win_end : g.win_start)
                               : (g.phase == P_DRAIN ? drain_end : close_end));
  }
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    if (c->state == C_CLOSING)
      g.close_unanswered++;
    if (c->fd >= 0)
      conn_close(c);
  }
  if (!g.measuring) {
    printf(PROG ": measuring\n"); /* (never reached the window) */
    fflush(stdout);
  }

  rate = (double)g.messages / duration;
  printf(PROG ": %s:%ld%s, %ld sockets x %ld in flight x %zu B %s%s, "
              "%.3f s (+%.3f s warm-up); %ld upgraded%s\n",
         g.host, g.port, g.path, g.nconns, g.depth, g.size,
         g.binary ? "binary" : "text",
         g.offer_deflate ? ", permessage-deflate offered" : "", duration,
         warmup, g.upgraded,
         !g.offer_deflate || g.upgraded == 0  ? ""
         : g.deflate_negotiated == g.upgraded ? ", deflate accepted"
         : g.deflate_negotiated == 0          ? ", deflate DECLINED"
                                              : ", deflate accepted on some");
  printf(PROG ": messages %llu (%.1f msg/s), errors %llu (connect %llu, "
              "handshake %llu, mismatch %llu, protocol %llu, closed %llu, "
              "unanswered %llu), starved %llu; ",
         (unsigned long long)g.messages, rate,
         (unsigned long long)(g.connect_errors + g.handshake_errors +
                              g.mismatch + g.protocol_errors + g.closed +
                              g.unanswered),
         (unsigned long long)g.connect_errors,
         (unsigned long long)g.handshake_errors, (unsigned long long)g.mismatch,
         (unsigned long long)g.protocol_errors, (unsigned long long)g.closed,
         (unsigned long long)g.unanswered, (unsigned long long)g.starved);
  lg_text_latency(stdout, &g.hist);
  printf("\n");
  if (g.messages > 0)
    printf(PROG ": wire bytes per message: %.1f out, %.1f in\n",
           (double)g.bytes_out_win / (double)g.messages,
           (double)g.bytes_in_win / (double)g.messages);
  fflush(stdout);
  if (json != NULL) {
    FILE *f = lg_json_open(json);
    if (f == NULL)
      return 1;
    report_json(f, duration, warmup, rate);
    if (fclose(f) != 0) {
      perror(json);
      return 1;
    }
  }
  return 0;
}
