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
#include <unistd.h>

#include "common.h"
#include "ws/sha1.h"
#include "wsproto.h"

#define PROG "wsload"
#define MAX_EVENTS 256
#define READ_SIZE (64 * 1024)
#define HEAD_MAX 8192
#define SETUP_NS 5000000000ull /* sockets must be upgraded by then */
#define CLOSE_NS 1000000000ull /* wait for the server's Close */
#define MAX_SIZE (16L << 20)
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

enum { C_DOWN, C_CONNECTING, C_HANDSHAKE, C_OPEN, C_CLOSING };
enum { P_SETUP, P_RUN, P_DRAIN, P_CLOSE };

typedef struct {
  int fd;
  int state;
  int out_armed;
  uint32_t id;
  char accept[29];   /* the Sec-WebSocket-Accept expected */
  wsp_sock ws;       /* framing, the messages in flight, deflate */
  uint64_t *sent_ns; /* indexed by seq % depth */
  uint64_t win_msgs;
  uint64_t close_deadline;
} conn;

static struct {
  lg_target target;
  int ep;
  conn *conns;
  long nconns;
  long depth;
  wsp w; /* the messages' shape, shared scratch */
  const char *host, *path;
  long port;
  int phase;
  uint64_t win_start, win_end;
  int measuring; /* the "measuring" line was printed */
  lg_hist hist;
  /* counts */
  uint64_t messages, sent, echoes;
  uint64_t bytes_out_win, bytes_in_win, bytes_out, bytes_in;
  uint64_t connect_errors, handshake_errors, mismatch, protocol_errors;
  uint64_t closed, unanswered, close_unanswered, starved;
  long open, upgraded, deflate_negotiated;
  int said[8]; /* the first problem of each kind was described */
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

static int first_time(int kind) {
  if (g.said[kind])
    return 0;
  g.said[kind] = 1;
  return 1;
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
  wsp_sock_reset(&c->ws);
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
            (unsigned long long)(c->ws.next_seq - c->ws.next_echo));
  conn_close(c);
}

static void flush(conn *c) {
  wsp_sock *s = &c->ws;
  while (s->wpos < s->wlen) {
    ssize_t w = send(c->fd, s->wbuf + s->wpos, s->wlen - s->wpos, MSG_NOSIGNAL);
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
    s->wpos += (size_t)w;
  }
  s->wlen = s->wpos = 0;
  set_events(c, 0);
}

static void start_close(conn *c) {
  if (c->state != C_OPEN)
    return;
  c->state = C_CLOSING;
  c->close_deadline = lg_now_ns() + CLOSE_NS;
  if (wsp_put_close(&g.w, &c->ws) != 0) {
    conn_close(c);
    return;
  }
  flush(c);
}

/* Keep depth messages in flight, in one write. */
static void fill(conn *c) {
  uint64_t now;
  wsp_sock *s = &c->ws;
  if (c->state != C_OPEN || g.phase != P_RUN ||
      s->next_seq - s->next_echo >= (uint64_t)g.depth)
    return;
  now = lg_now_ns();
  while (s->next_seq - s->next_echo < (uint64_t)g.depth) {
    c->sent_ns[s->next_seq % (uint64_t)g.depth] = now;
    if (wsp_put_message(&g.w, s) != 0) {
      protocol_error(c, "could not compress or buffer a message");
      return;
    }
    g.sent++;
  }
  flush(c);
}

/* wsp_frames' events; u is the conn. */
static void on_mismatch(void *u, wsp_sock *s, const char *why,
                        const unsigned char *p, size_t n) {
  conn *c = u;
  g.mismatch++;
  if (first_time(SAY_MISMATCH)) {
    fprintf(stderr, PROG ": socket %u: message %llu: %s; got %zu bytes: ",
            (unsigned)c->id, (unsigned long long)s->next_echo, why, n);
    wsp_put_escaped(stderr, p, n < 96 ? n : 96);
    fprintf(stderr, "%s\n", n > 96 ? "..." : "");
  }
}

static int on_echo(void *u, wsp_sock *s, uint64_t seq) {
  conn *c = u;
  uint64_t sent = c->sent_ns[seq % (uint64_t)g.depth], now = lg_now_ns();
  g.echoes++;
  if (g.phase == P_RUN && now >= g.win_start && now < g.win_end) {
    lg_hist_record(&g.hist, now > sent ? (now - sent + 500) / 1000 : 0);
    g.messages++;
    c->win_msgs++;
  }
  if (g.phase == P_DRAIN && s->next_echo == s->next_seq) {
    start_close(c);
    return c->fd < 0;
  }
  return 0;
}

static const wsp_events ws_events = {on_mismatch, on_echo};

/* Parse and act on the frames in c->ws.rbuf, then drop what was used. */
static void frames(conn *c) {
  size_t used;
  unsigned code;
  int rc = wsp_frames(&g.w, &c->ws, &ws_events, c, &used, &code);
  if (c->fd < 0)
    return;
  if (rc == WSP_ERROR) {
    protocol_error(c, c->ws.why);
    return;
  }
  wsp_consume(&c->ws, used);
  if (rc == WSP_GOT_CLOSE) {
    if (c->state == C_CLOSING) {
      conn_close(c); /* the answer to our Close */
    } else {
      char how[160];
      unsigned char echo[2];
      echo[0] = (unsigned char)(code >> 8);
      echo[1] = (unsigned char)code;
      snprintf(how, sizeof(how), "the server sent Close (code %u%s)", code,
               code ? "" : ", none given");
      wsp_put_frame(&g.w, &c->ws, 0x80 | WSP_CLOSE, echo, code ? 2 : 0);
      flush(c);
      if (c->fd >= 0)
        server_closed(c, how);
    }
    return;
  }
  if (c->ws.wlen > c->ws.wpos)
    flush(c); /* Pongs */
}

/* ---- The handshake ---- */

static int handshake_failed(conn *c, const char *why, size_t head_len) {
  g.handshake_errors++;
  if (first_time(SAY_HANDSHAKE)) {
    fprintf(stderr,
            PROG ": socket %u: handshake: %s; response: ", (unsigned)c->id,
            why);
    wsp_put_escaped(stderr, c->ws.rbuf, head_len < 600 ? head_len : 600);
    fprintf(stderr, "\n");
  }
  conn_close(c);
  return -1;
}

/* The response head (head_len bytes, ending in CRLF CRLF) of c's upgrade. */
static int check_upgrade(conn *c, size_t head_len) {
  const char *buf = (const char *)c->ws.rbuf, *end = buf + head_len - 2;
  const char *line, *why;
  int upgrade = 0, connection = 0, accept = 0;
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
      if (c->ws.deflate)
        return handshake_failed(c, "two Sec-WebSocket-Extensions", head_len);
      why = wsp_parse_extension(&g.w, &c->ws, f.value, f.value_len);
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
  why = wsp_open(&g.w, &c->ws);
  if (why != NULL)
    return handshake_failed(c, why, head_len);
  if (c->ws.deflate)
    g.deflate_negotiated++;
  c->state = C_OPEN;
  g.open++;
  g.upgraded++;
  return 0;
}

static void send_upgrade(conn *c) {
  unsigned char raw[16];
  char key[25], req[1024];
  int n;
  wsp_random(&g.w, raw, sizeof(raw));
  key[tern__base64_encode(key, raw, sizeof(raw))] = '\0';
  ws_accept(key, c->accept);
  n = snprintf(req, sizeof(req),
               "GET %s HTTP/1.1\r\n"
               "Host: %s:%ld\r\n"
               "Upgrade: websocket\r\n"
               "Connection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\n"
               "Sec-WebSocket-Version: 13\r\n"
               "%s%s%s"
               "\r\n",
               g.path, g.host, g.port, key,
               g.w.offer ? "Sec-WebSocket-Extensions: " : "",
               g.w.offer ? wsp_offer(&g.w) : "", g.w.offer ? "\r\n" : "");
  c->state = C_HANDSHAKE;
  if (n < 0 || (size_t)n >= sizeof(req) ||
      wsp_reserve(&c->ws.wbuf, &c->ws.wcap, c->ws.wlen + (size_t)n) != 0) {
    handshake_failed(c, "request too long", 0);
    return;
  }
  memcpy(c->ws.wbuf + c->ws.wlen, req, (size_t)n);
  c->ws.wlen += (size_t)n;
  flush(c);
}

static void readable(conn *c, uint64_t now) {
  wsp_sock *s = &c->ws;
  ssize_t r;
  if (s->rcap - s->rlen < READ_SIZE &&
      wsp_reserve(&s->rbuf, &s->rcap, s->rlen + READ_SIZE) != 0) {
    protocol_error(c, "out of memory");
    return;
  }
  r = recv(c->fd, s->rbuf + s->rlen, s->rcap - s->rlen, 0);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
      return;
  }
  if (r <= 0) {
    const char *why =
        r == 0 ? "the server closed the connection" : strerror(errno);
    if (c->state == C_HANDSHAKE)
      handshake_failed(c, why, s->rlen);
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
  s->rlen += (size_t)r;
  if (c->state == C_HANDSHAKE) {
    const unsigned char *e = memmem(s->rbuf, s->rlen, "\r\n\r\n", 4);
    size_t head_len;
    if (e == NULL) {
      if (s->rlen >= HEAD_MAX)
        handshake_failed(c, "response head too large", s->rlen);
      return;
    }
    head_len = (size_t)(e - s->rbuf) + 4;
    if (check_upgrade(c, head_len) != 0)
      return;
    wsp_consume(s, head_len);
    if (g.phase == P_RUN)
      fill(c);
  }
  frames(c);
  if (c->fd >= 0)
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
  if ((events & EPOLLOUT) && c->ws.wpos < c->ws.wlen) {
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
          (unsigned long long)g.w.pings, g.nconns, g.upgraded, g.depth,
          g.w.size, g.w.binary ? "binary" : "text",
          g.w.offer ? "true" : "false", g.deflate_negotiated);
  {
    const char *p;
    for (p = g.w.extension; *p; p++) {
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
  size_t size = 128;
  int binary = 0, offer_deflate = 0, level = Z_DEFAULT_COMPRESSION;

  g.host = "127.0.0.1";
  g.path = "/ws";
  g.port = -1;
  g.nconns = 64;
  g.depth = 8;
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
      size = (size_t)lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 0,
                                 MAX_SIZE);
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
      binary = 0;
    else if (strcmp(a, "--binary") == 0)
      binary = 1;
    else if (strcmp(a, "--deflate") == 0)
      offer_deflate = 1;
    else if (strcmp(a, "--level") == 0)
      level =
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
  g.conns = calloc((size_t)g.nconns, sizeof(conn));
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  if (wsp_init(&g.w, size, binary, offer_deflate, level) != 0 ||
      g.conns == NULL || g.ep < 0) {
    perror(PROG);
    return 1;
  }

  /* Connect and upgrade every socket before the clock starts. */
  g.phase = P_SETUP;
  for (i = 0; i < g.nconns; i++) {
    conn *c = &g.conns[i];
    c->fd = -1;
    c->id = (uint32_t)i;
    c->ws.id = (uint32_t)i;
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
      handshake_failed(c, "no answer within 5 s", c->ws.rlen);
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
        if (c->state == C_OPEN && c->ws.next_echo == c->ws.next_seq)
          start_close(c);
      }
    }
    if (g.phase == P_DRAIN && now >= drain_end) {
      g.phase = P_CLOSE;
      close_end = now + CLOSE_NS;
      for (i = 0; i < g.nconns; i++) {
        conn *c = &g.conns[i];
        if (c->state == C_OPEN) {
          g.unanswered += c->ws.next_seq - c->ws.next_echo;
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
         g.host, g.port, g.path, g.nconns, g.depth, g.w.size,
         g.w.binary ? "binary" : "text",
         g.w.offer ? ", permessage-deflate offered" : "", duration, warmup,
         g.upgraded,
         !g.w.offer || g.upgraded == 0        ? ""
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
