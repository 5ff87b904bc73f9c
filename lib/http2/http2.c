/* The HTTP/2 adapter: one nghttp2 server session per connection, driven
 * through memory only. Bytes the core has read are fed to
 * nghttp2_session_mem_recv; frames are pulled with nghttp2_session_mem_send
 * into the connection's output queue, which the core writes once per loop
 * turn. nghttp2 never sees a socket, and its memory comes from tern's
 * allocator hook (an nghttp2_mem over tern__malloc and friends).
 *
 * Streams and requests. A request HEADERS frame creates a tern_request and
 * its stream state (h2_stream, in r->proto_data, and nghttp2's stream user
 * data). Header names and values are views into nghttp2's refcounted
 * header buffers (rcbufs), which the stream keeps alive until the request
 * is freed (the adapter's `release` hook); only joined cookie crumbs are
 * copied. HTTP/2 requests never enter the HTTP/1.1 pipeline queue.
 *
 * References. Like HTTP/1.1, a request has the user's reference (dropped
 * by the finishing response call) and one the adapter holds while its
 * stream is open; a marker of a streamed write holds one until its `done`
 * has run. When the stream closes (nghttp2's on_stream_close) the
 * response is counted if our END_STREAM went out; otherwise the request is
 * marked gone, a reading handler gets TERN_BODY_ERROR and pending `done`
 * callbacks run with TERN_ECLOSED. A request that never reached a handler
 * loses the user's reference then too.
 *
 * Output. A response's body waits in the request's own queue (r->out); the
 * data provider frames it without a copy (NO_COPY: the send callback
 * writes the 9-byte frame header and moves the body's segments, blocks
 * and references alike, into the connection's queue behind it). Markers
 * travel with the bytes they follow, so a write's `done` runs once the
 * socket has taken its bytes, as on HTTP/1.1, and never inside the loop
 * that frames them. Frames are produced only while less than H2_OUT_HIGH
 * bytes wait in the connection's queue (checked after each DATA frame
 * too, since nghttp2 frames NO_COPY DATA in a loop of its own): a client
 * that does not read leaves nghttp2's own queue to fill, which is where
 * its limits (max_outbound_ack) bite.
 * Response calls never pull frames themselves; they ask for output
 * (h2_output, which the check phase runs), so nghttp2 is never
 * re-entered.
 *
 * Flow control (automatic WINDOW_UPDATE is off). Received DATA is
 * "consumed" (nghttp2_session_consume, which sends WINDOW_UPDATE once half
 * a window is used) only when it has left tern's hands: at once for a
 * collected body (up to the route's limit), after the body callback
 * returns for a streamed one, and not while the handler has paused; bytes
 * a handler cannot take yet wait in the stream (at most its window). A
 * stream's receive window starts at 64 KiB and doubles, up to the
 * server's max_stream_window (8 MiB by default), each time a full window
 * has been consumed with nothing held back, so a fast upload is not
 * throttled and a slow one never holds much. The connection window starts
 * at 1 MiB and grows the same way up to max_conn_window (16 MiB); it
 * bounds what all of a connection's paused streams can hold together. A
 * maximum below a starting size lowers the start (the connection's no
 * lower than the protocol's fixed 65535). That
 * policy is the core's (tern__window, lib/core/window.c); this file only
 * announces what it decides (HTTP/3 leaves its windows to ngtcp2's own
 * auto-tuning).
 *
 * The core's view. h->m.nq counts the streams the server is working on:
 * routed to a handler (or answered by tern) and not yet ended by the
 * response calls. The connection's timer (h2_timer) is, in this order:
 * the head timer while a header block is open (from its HEADERS frame to
 * the end of the frame with END_HEADERS: no other frame may come in
 * between, RFC 9113 6.10, so the block holds the whole connection; bytes
 * of the block never re-arm it, a new block after one ended does), and
 * when it fires GOAWAY PROTOCOL_ERROR ends the connection; none while a
 * handler has work (nq > 0) or a stream waits under its own body timer;
 * else idle, re-armed by anything the client sends, which covers a
 * connection whose streams all wait for the client's flow-control window
 * (a finished response held back). The write timeout covers output the
 * socket does not take, and CLOSE_AFTER closes once nq is 0 and the output
 * is written. nghttp2 buffers partial frames, so the read buffer is always
 * consumed whole and HTTP/1.1's 408 for a partial head has no HTTP/2 twin.
 *
 * Stream timers. Each stream embeds a tern__timer, armed BODY while tern
 * waits for its body bytes (wants_body: collecting them for the route, a
 * streaming handler reading and not paused, the short rest of a body read
 * after an early answer to check its length) and re-armed by each DATA
 * frame of that stream only. A stream a handler holds with its body
 * complete, or whose upload the handler paused (flow control then holds
 * the client), has none: the handler owns it, and the stop deadline
 * bounds it. stream_timeout answers 408 or resets the stream; the timer
 * stops when the stream closes (stream_closed), before it can be freed.
 *
 * Defences. nghttp2 enforces SETTINGS_MAX_CONCURRENT_STREAMS (excess
 * streams are refused with REFUSED_STREAM), CONTINUATION floods, SETTINGS
 * entry counts and the queue of outbound acknowledgements (PING / SETTINGS
 * floods). The adapter adds the header list limit (max_head_size and
 * max_header_count: 431), an empty DATA frame limit, its own stream reset
 * bucket (CVE-2023-44487, answered with ENHANCE_YOUR_CALM; nghttp2's says
 * INTERNAL_ERROR), the RFC 9113 checks nghttp2 leaves out with priorities
 * off and closed streams not kept (scan_input follows the input's frames
 * ahead of nghttp2 for them), and closes the connection after any GOAWAY
 * that reports an error. After the client's FIN, streams whose output
 * waits for a window that can no longer open are reset (drop_stuck).
 */
#include <nghttp2/nghttp2.h>
#include <string.h>

#include "core/mux.h"
#include "net/stream.h"

extern const tern__proto tern__http2;

#define H2_MAX_STREAMS 100
/* The receive windows' starting sizes; their maxima are the server's
 * max_stream_window and max_conn_window. A connection window starts at
 * 65535 by the protocol and can only grow from there. */
#define H2_STREAM_WIN_INIT 65535
#define H2_CONN_WIN_INIT (1 << 20)
#define H2_CONN_WIN_FLOOR 65535
#define H2_OUT_HIGH (64 * 1024)
#define H2_HPACK_TABLE 4096
#define H2_MAX_EMPTY_DATA 100
/* Client stream ids remembered after their streams close (RFC 9113 5.1:
 * frames on a closed stream are an error unless the server reset it),
 * as bits over the last H2_CLOSED_IDS odd ids up to the highest opened. */
#define H2_CLOSED_IDS 256
#define H2_CLOSED_WORDS (H2_CLOSED_IDS / 64)
#define H2_MAX_OUTBOUND_ACK 1000
#define H2_MAX_SETTINGS 32
#define H2_MAX_CONTINUATIONS 8
#define H2_MAX_SEND_HEADERS (64 * 1024)
#define H2_DELIVER_MAX (64 * 1024) /* one body callback's largest piece */
/* After an early answer, a body with a length at most this much short of
 * it is read to its end (its length checked) rather than reset. */
#define H2_DRAIN_MAX (64 * 1024)
/* Input is fed to nghttp2 in slices of this size with frames pulled in
 * between, so the acknowledgements a burst of PING or SETTINGS asks for
 * leave as they are made: they only pile up (to max_outbound_ack) when the
 * client does not read. */
#define H2_RECV_SLICE 4096

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

typedef struct h2_conn h2_conn;
typedef struct h2_stream h2_stream;

/* Stream flags: the shared ones (core/mux.h), under short names. */
enum {
  S_OPEN = TERN__MS_OPEN,
  S_COUNTED = TERN__MS_COUNTED,
  S_HEAD_DONE = TERN__MS_HEAD_DONE,
  S_REMOTE_DONE = TERN__MS_REMOTE_DONE,
  S_PROVIDER = TERN__MS_PROVIDER, /* the response has a body to frame */
  S_DEFERRED = TERN__MS_DEFERRED, /* its data provider waits for bytes */
  S_RESP_END = TERN__MS_RESP_END,
  S_END_SENT = TERN__MS_END_SENT, /* our END_STREAM has been framed */
  S_SETTLE = TERN__MS_SETTLE,
  S_FLOW = TERN__MS_FLOW,
  S_WEBSOCKET = TERN__MS_WEBSOCKET, /* :protocol websocket (RFC 8441) */
  S_DRAIN = TERN__MS_DRAIN,
  S_TIMEDOUT = TERN__MS_TIMEDOUT,
};

struct h2_stream {
  tern__mux_stream m; /* first: the shared part (core/mux.h) */
  tern__timer timer;  /* BODY while tern waits for its body (stream_timer) */
  h2_stream *settle_next;
  h2_conn *h; /* NULL once the stream has closed */
  int32_t id;
  size_t head_size;   /* RFC 9113 6.5.2 size of the header list */
  nghttp2_rcbuf **rc; /* header buffers the request points into */
  size_t nrc, rc_cap;
  tern__window rwin;    /* our receive window for the stream */
  nghttp2_nv *trailers; /* response trailers, sent after the last DATA */
  size_t ntrailers;
};

struct h2_conn {
  tern__mux_conn m; /* first: the shared part (core/mux.h) */
  tern__stream *c;
  nghttp2_session *ng;
  h2_stream *settle; /* streams with framed bytes or markers to finish */
  int busy;          /* adapter frames on the stack: free when 0 */
  int in_ng;         /* inside nghttp2: no mem_send now */
  int pumping;
  unsigned want_send : 1; /* frames may be waiting */
  unsigned wake : 1;      /* a drain marker sits in c->out */
  unsigned stopping : 1;  /* graceful stop: shutdown notice sent */
  unsigned final : 1;     /* the last GOAWAY is queued */
  unsigned urgent : 1;    /* terminating: pull past H2_OUT_HIGH */
  unsigned full : 1;      /* send_data paused nghttp2 at H2_OUT_HIGH */
  uint32_t empty_data;
  tern__reset_budget resets; /* RST_STREAM from the client (core/mux.h) */
  int32_t max_id;            /* the highest stream id a client HEADERS used */
  uint64_t opened[H2_CLOSED_WORDS]; /* bit k: id max_id - 2k was opened */
  uint64_t quiet[H2_CLOSED_WORDS];  /* bit k: we reset it: ignore frames */
  /* The input's frame boundaries, followed ahead of nghttp2 (scan_input) */
  uint32_t scan_left; /* bytes of the current payload (or preface) left */
  uint8_t scan_hd[9]; /* the frame header being read */
  uint8_t scan_have;  /* bytes of scan_hd (then of a PRIORITY's first 4) */
  uint8_t scan_pri;   /* the current frame is a PRIORITY on a stream */
  uint8_t scan_check; /* check_stream_frame is due before more input */
  uint8_t scan_type;  /* the current frame's type, flags and stream */
  uint8_t scan_flags;
  int32_t scan_id;
  tern__window rwin;   /* our receive window for the connection */
  uint32_t stream_win; /* the largest window a stream here grew to */
  uint32_t waiting;    /* streams whose body timer is armed */
  /* Header blocks (RFC 9113 4.3), followed by scan_input: one is open
   * from its HEADERS frame's header to the end of the frame that carries
   * END_HEADERS; `blocks` counts those that ended. */
  uint8_t in_block, block_last;
  uint32_t blocks;
};

/* ---- Small helpers --------------------------------------------------- */

static int is_gone(const tern_request *r) {
  return atomic_load_explicit(&r->gone, memory_order_acquire);
}

static h2_stream *stream_of(nghttp2_session *ng, int32_t id) {
  return nghttp2_session_get_stream_user_data(ng, id);
}

static int lit_eq(const uint8_t *p, size_t n, const char *lit) {
  return strlen(lit) == n && memcmp(p, lit, n) == 0;
}

/* Ask for frames to be pulled: at the end of the current h2_input, or by
 * h2_output, which the check phase runs. */
static void schedule(h2_conn *h) {
  tern__stream *c = h->c;
  h->want_send = 1;
  if (!h->pumping && !(c->head.flags & TERN__C_IN_READ))
    tern__conn_want_output(&c->head);
}

static void settle_add(h2_conn *h, h2_stream *s) {
  if (s->m.flags & S_SETTLE)
    return;
  s->m.flags |= S_SETTLE;
  s->settle_next = h->settle;
  h->settle = s;
}

static void settle_remove(h2_conn *h, h2_stream *s) {
  h2_stream **p;
  if (!(s->m.flags & S_SETTLE))
    return;
  for (p = &h->settle; *p != NULL; p = &(*p)->settle_next) {
    if (*p == s) {
      *p = s->settle_next;
      break;
    }
  }
  s->m.flags &= ~(unsigned)S_SETTLE;
}

/* Markers at the front of a response's queue (a write's `done`, with no
 * bytes of its own or behind bytes already framed) move to the
 * connection's queue, behind the frames that carry those bytes: they run
 * when the socket has taken them, as on HTTP/1.1. Nothing runs here, so a
 * `done` that writes again cannot make this loop spin. */
static int settle_one(h2_conn *h, h2_stream *s) {
  settle_remove(h, s);
  return tern__outq_move(h->m.w, &h->c->out, &s->m.r->out, 0, s->m.r);
}

static int settle_all(h2_conn *h) {
  while (h->settle != NULL)
    if (settle_one(h, h->settle) != 0)
      return TERN_ENOMEM;
  return 0;
}

/* ---- Flow control ---------------------------------------------------- */

/* A stream's receive window starts at H2_STREAM_WIN_INIT, or at the
 * server's maximum where that is smaller (so that it stays there). */
static uint32_t stream_win_start(const tern_server *srv) {
  uint32_t max = srv->s.max_stream_window;
  return H2_STREAM_WIN_INIT < max ? H2_STREAM_WIN_INIT : max;
}

static void stream_win_init(h2_conn *h, h2_stream *s) {
  const tern_server *srv = h->m.w->srv;
  tern__window_init(&s->rwin, stream_win_start(srv), srv->s.max_stream_window);
}

/* `n` bytes of the stream's body left tern's hands: let the client send
 * more, growing the windows while the handler keeps up. */
static void consume(h2_conn *h, h2_stream *s, size_t n) {
  uint32_t win;

  if (n == 0 || h->m.dead || h->m.finished)
    return;
  nghttp2_session_consume(h->ng, s->id, n);
  /* The core's policy decides; a stream that holds bytes, or can get no
   * more, does not grow. */
  win = tern__window_consumed(&s->rwin, n,
                              s->m.pend.len > 0 || !(s->m.flags & S_OPEN) ||
                                  (s->m.flags & S_REMOTE_DONE),
                              h->stream_win);
  if (win != 0) {
    nghttp2_session_set_local_window_size(h->ng, NGHTTP2_FLAG_NONE, s->id,
                                          (int32_t)win);
    if (win > h->stream_win)
      h->stream_win = win;
  }
  win = tern__window_consumed(&h->rwin, n, h->m.held > 0, 0);
  if (win != 0)
    nghttp2_session_set_local_window_size(h->ng, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)win);
  /* The credit is a WINDOW_UPDATE nghttp2 now wants to send: a pump must
   * follow, or a client that waits for it (its window spent on bytes a
   * paused handler just took) waits for ever. Delivery that runs at the
   * end of a pump (run_flows) goes round once more for it. */
  if (nghttp2_session_want_write(h->ng))
    schedule(h);
}

/* ---- Closing streams --------------------------------------------------- */

/* ---- Stream timers ---------------------------------------------------- */

/* Arm or disarm the stream's body timer as its state asks, keeping a
 * running one's deadline; h->waiting counts the armed ones. */
static void stream_timer(h2_conn *h, h2_stream *s) {
  int kind = tern__mux_wants_body(&h->m, &s->m) ? TERN__T_BODY : TERN__T_NONE;
  if (kind == s->timer.kind)
    return;
  if (kind == TERN__T_NONE)
    h->waiting--;
  else
    h->waiting++;
  tern__timer_set(h->m.w, &s->timer, kind);
}

static void stream_timer_stop(h2_conn *h, h2_stream *s) {
  if (s->timer.kind != TERN__T_NONE)
    h->waiting--;
  tern__timer_stop(&s->timer);
}

/* ---- The shared stream code's table (core/mux.h) ---------------------- */

static void mux_consume(tern__mux_conn *m, tern__mux_stream *s, size_t n) {
  consume((h2_conn *)m, (h2_stream *)s, n);
}

/* Held bytes dropped unread go back at once, to the stream's window
 * while it is open, else to the connection's. */
static void mux_release(tern__mux_conn *m, tern__mux_stream *s, size_t n) {
  h2_conn *h = (h2_conn *)m;
  if (h->m.dead || h->m.finished)
    return;
  if (s->flags & S_OPEN)
    nghttp2_session_consume(h->ng, ((h2_stream *)s)->id, n);
  else
    nghttp2_session_consume_connection(h->ng, n);
}

static void mux_timer(tern__mux_conn *m, tern__mux_stream *s) {
  stream_timer((h2_conn *)m, (h2_stream *)s);
}

static void mux_schedule(tern__mux_conn *m) {
  schedule((h2_conn *)m);
}

static const tern__mux_ops h2_mux = {mux_consume, mux_release, mux_timer,
                                     mux_schedule};

/* The stream is over (closed by nghttp2, abandoned, or its connection is
 * closing): settle what was framed, fail the rest, drop our reference. */
static void stream_closed(h2_conn *h, h2_stream *s) {
  tern_request *r = s->m.r;
  tern__worker *w = h->m.w;

  if (!(s->m.flags & S_OPEN))
    return;
  stream_timer_stop(h, s); /* before S_OPEN goes: it must never fire now */
  s->m.flags &= ~(unsigned)(S_OPEN | S_FLOW);
  tern__list_remove(&s->m.link);
  tern__mux_uncount(&h->m, &s->m);
  if (h->stopping)
    h->want_send = 1; /* perhaps the last one: time for the last GOAWAY */
  tern__mux_drop_held(&h->m, &s->m);
  r->refs++; /* held across the callbacks below */
  if (!h->m.dead)
    (void)settle_one(h, s); /* on failure they fail below */
  else
    settle_remove(h, s);
  tern__mux_closed(w, r, (s->m.flags & S_END_SENT) != 0);
  tern__outq_fail(w, &r->out, TERN_ECLOSED);
  s->h = NULL;
  tern__mux_unref_closed(r);
}

/* Forget a stream nghttp2 still has open, resetting it with `code`
 * (CANCEL when the connection is ending). */
static void abandon(h2_conn *h, h2_stream *s, uint32_t code) {
  if (!h->m.dead && !h->m.finished) {
    nghttp2_session_set_stream_user_data(h->ng, s->id, NULL);
    nghttp2_submit_rst_stream(h->ng, NGHTTP2_FLAG_NONE, s->id, code);
  }
  stream_closed(h, s);
}

static void drop_streams(h2_conn *h) {
  while (!tern__list_empty(&h->m.streams)) {
    h2_stream *s = TERN__CONTAINER_OF(h->m.streams.next, h2_stream, m.link);
    abandon(h, s, NGHTTP2_CANCEL);
  }
}

static void destroy(h2_conn *h) {
  nghttp2_session_del(h->ng);
  tern__free(h->m.w->srv, h);
}

static void enter(h2_conn *h) {
  h->busy++;
}

static void leave(h2_conn *h) {
  if (--h->busy == 0 && h->m.dead)
    destroy(h);
}

/* ---- Request bodies ---------------------------------------------------- */

/* The stream's body stalled for body_timeout_ms (re-armed by each DATA
 * frame of the stream; the connection's other traffic does not count).
 * A handler reading it hears TERN_BODY_ERROR first and may answer then
 * (its answer goes out). Unanswered, the client gets 408, from tern (with the
 * error hook) when no handler has the request, else on the handler's behalf,
 * whose later calls find the client gone; our END_STREAM is then followed by
 * RST_STREAM NO_ERROR. A started response cannot change any more: the
 * stream is reset, CANCEL (NO_ERROR once the response was complete). */
static void stream_timeout(tern__timer *t, int kind) {
  h2_stream *s = TERN__CONTAINER_OF(t, h2_stream, timer);
  h2_conn *h = s->h;
  tern_request *r = s->m.r;
  int sent;

  (void)kind;
  h->waiting--; /* the sweep disarmed it */
  enter(h);
  r->refs++;
  tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http2: stream %d: body timed out",
            (int)s->id);
  if (tern__mux_body_timeout(&h->m, &s->m, &sent))
    abandon(h, s, sent ? NGHTTP2_NO_ERROR : NGHTTP2_CANCEL);
  tern__request_unref(r);
  if (!h->m.dead)
    schedule(h);
  leave(h);
}

/* ---- Requests ---------------------------------------------------------- */

static int keep_rcbuf(h2_conn *h, h2_stream *s, nghttp2_rcbuf *b) {
  if (nghttp2_rcbuf_is_static(b))
    return 0;
  if (s->nrc == s->rc_cap) {
    size_t cap = s->rc_cap ? s->rc_cap * 2 : 16;
    nghttp2_rcbuf **nb =
        tern__small_realloc(h->m.w, s->rc, cap * sizeof(*s->rc));
    if (nb == NULL)
      return TERN_ENOMEM;
    s->rc = nb;
    s->rc_cap = cap;
  }
  nghttp2_rcbuf_incref(b);
  s->rc[s->nrc++] = b;
  return 0;
}

static int add_trailer(h2_conn *h, h2_stream *s, nghttp2_rcbuf *name,
                       nghttp2_rcbuf *value) {
  tern_request *r = s->m.r;
  nghttp2_vec n = nghttp2_rcbuf_get_buf(name), v = nghttp2_rcbuf_get_buf(value);

  if (r->ntrailers >= h->m.w->srv->s.max_header_count)
    return 0; /* the body is fine; excess trailers are not exposed */
  if (keep_rcbuf(h, s, name) != 0 || keep_rcbuf(h, s, value) != 0)
    return TERN_ENOMEM;
  return tern__mux_trailer(&h->m, &s->m, n.base, n.len, v.base, v.len);
}

/* ---- nghttp2 callbacks ------------------------------------------------- */

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *frame,
                            void *user) {
  h2_conn *h = user;
  tern_request *r;
  h2_stream *s;

  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST)
    return 0;
  s = tern__small_malloc(h->m.w, sizeof(*s));
  if (s == NULL)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  r = tern__request_new(&h->c->head);
  if (r == NULL) {
    tern__small_free(h->m.w, s);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  memset(s, 0, sizeof(*s));
  s->h = h;
  s->m.r = r;
  s->id = frame->hd.stream_id;
  s->m.flags = S_OPEN;
  stream_win_init(h, s);
  tern__timer_init(&s->timer, stream_timeout);
  r->proto_data = s;
  r->protocol = TERN_PROTO_HTTP2;
  tern__list_append(&h->m.streams, &s->m.link);
  nghttp2_session_set_stream_user_data(ng, s->id, s);
  return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *frame,
                     nghttp2_rcbuf *name, nghttp2_rcbuf *value, uint8_t flags,
                     void *user) {
  h2_conn *h = user;
  tern_server *srv = h->m.w->srv;
  h2_stream *s;
  tern_request *r;
  nghttp2_vec n, v;

  (void)flags;
  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  s = stream_of(ng, frame->hd.stream_id);
  if (s == NULL || !(s->m.flags & S_OPEN))
    return 0;
  r = s->m.r;
  n = nghttp2_rcbuf_get_buf(name);
  v = nghttp2_rcbuf_get_buf(value);
  s->head_size += n.len + v.len + 32;
  if (s->head_size > srv->s.max_head_size) {
    /* The client was told SETTINGS_MAX_HEADER_LIST_SIZE: 431. The rest of
     * the block is still decoded (HPACK state) but not kept. */
    if (s->m.status == 0 && !(s->m.flags & S_HEAD_DONE))
      s->m.status = 431;
    return 0;
  }
  if (s->m.status != 0)
    return 0;
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST)
    return add_trailer(h, s, name, value) == 0
               ? 0
               : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (n.len > 0 && n.base[0] == ':') {
    const char *p = (const char *)v.base;
    if (lit_eq(n.base, n.len, ":method")) {
      r->method = p;
      r->method_len = v.len;
    } else if (lit_eq(n.base, n.len, ":path")) {
      r->target = p;
      r->target_len = v.len;
    } else if (lit_eq(n.base, n.len, ":authority")) {
      r->authority = p;
      r->authority_len = v.len;
    } else if (lit_eq(n.base, n.len, ":protocol")) {
      /* nghttp2 lets :protocol through only on a CONNECT, since our
       * SETTINGS enable it. WebSocket is the one protocol served. */
      if (lit_eq(v.base, v.len, "websocket"))
        s->m.flags |= S_WEBSOCKET;
      else
        s->m.status = 501;
      return 0;
    } else {
      return 0; /* :scheme (nghttp2 checked it) */
    }
    if (keep_rcbuf(h, s, value) != 0)
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
  }
  if (r->nheaders >= r->headers_cap) {
    s->m.status = 431;
    return 0;
  }
  if (keep_rcbuf(h, s, name) != 0 || keep_rcbuf(h, s, value) != 0)
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  r->headers[r->nheaders].name = (const char *)n.base;
  r->headers[r->nheaders].name_len = n.len;
  r->headers[r->nheaders].value = (const char *)v.base;
  r->headers[r->nheaders].value_len = v.len;
  r->nheaders++;
  if (lit_eq(n.base, n.len, "cookie")) {
    s->m.ncookie++;
  } else if (lit_eq(n.base, n.len, "content-length")) {
    tern__mux_length(&s->m, v.base, v.len); /* nghttp2 checked it */
  }
  return 0;
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *frame,
                         void *user) {
  h2_conn *h = user;
  tern_request *r;
  h2_stream *s;
  int rc;

  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  switch (frame->hd.type) {
  case NGHTTP2_DATA:
    if (frame->hd.length <= frame->data.padlen &&
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        ++h->empty_data > H2_MAX_EMPTY_DATA) {
      /* Empty DATA frames cost work and move no bytes: a flood. */
      h->urgent = 1;
      return nghttp2_session_terminate_session(ng, NGHTTP2_ENHANCE_YOUR_CALM) ==
                     0
                 ? 0
                 : NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    break;
  case NGHTTP2_HEADERS:
    break;
  default:
    return 0;
  }
  s = stream_of(ng, frame->hd.stream_id);
  if (s == NULL || !(s->m.flags & S_OPEN))
    return 0;
  /* head_done and remote_done may run the handler, whose finishing call
   * can fail (no memory) and abort the stream at once: the request, and
   * with it the stream, would be freed under us. Held until the end. */
  r = s->m.r;
  r->refs++;
  if (frame->hd.type == NGHTTP2_HEADERS &&
      frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
      s->m.flags |= S_REMOTE_DONE;
    tern__mux_head_done(&h->m, &s->m);
  }
  if (!h->m.dead && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
      (s->m.flags & S_OPEN))
    tern__mux_remote_done(&h->m, &s->m);
  if (!h->m.dead && (s->m.flags & S_OPEN))
    stream_timer(h, s); /* the head is routed, or the body complete */
  rc = h->m.dead ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
  tern__request_unref(r);
  return rc;
}

/* ---- Frame checks nghttp2 leaves to us ----------------------------------- */

/* End the connection with `code` (a connection error, RFC 9113 5.4.1):
 * the GOAWAY goes out, and input after it is dropped. */
static int conn_error(h2_conn *h, uint32_t code) {
  h->urgent = 1;
  return nghttp2_session_terminate_session(h->ng, code) == 0
             ? 0
             : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int id_bit(const h2_conn *h, int32_t id, size_t *word, uint64_t *bit) {
  int32_t k = (h->max_id - id) / 2;
  if (id > h->max_id || !(id & 1) || k >= H2_CLOSED_IDS)
    return 0;
  *word = (size_t)k / 64;
  *bit = (uint64_t)1 << (k % 64);
  return 1;
}

/* A client HEADERS opens `id`: the window of remembered ids moves up. */
static void id_opened(h2_conn *h, int32_t id) {
  int32_t shift = h->max_id == 0 ? H2_CLOSED_IDS : (id - h->max_id) / 2;
  size_t i;
  if (shift >= H2_CLOSED_IDS) {
    memset(h->opened, 0, sizeof(h->opened));
    memset(h->quiet, 0, sizeof(h->quiet));
  } else {
    while (shift > 0) {
      int n = shift > 63 ? 63 : shift;
      for (i = H2_CLOSED_WORDS; i-- > 0;) {
        uint64_t carry = i > 0 ? h->opened[i - 1] >> (64 - n) : 0;
        uint64_t qcarry = i > 0 ? h->quiet[i - 1] >> (64 - n) : 0;
        h->opened[i] = (h->opened[i] << n) | carry;
        h->quiet[i] = (h->quiet[i] << n) | qcarry;
      }
      shift -= n;
    }
  }
  h->max_id = id;
  h->opened[0] |= 1;
}

/* RST_STREAM from the client: the reset budget (core/mux.h). nghttp2
 * has a bucket too, but it answers with INTERNAL_ERROR; this one runs
 * first and says ENHANCE_YOUR_CALM (RFC 9113 5.4.1, 7). */
static int reset_allowed(h2_conn *h) {
  return tern__reset_budget_take(&h->resets, uv_now(h->m.w->loop));
}

/* DATA or HEADERS on a stream nghttp2 no longer has (RFC 9113 5.1):
 * nghttp2 drops them unseen (it keeps no closed streams), so tern tells
 * closed from never-used ids itself. They are an error, unless we reset
 * the stream ourselves, when the client's frames may still be on their way
 * and are ignored; beyond the ids remembered they are ignored too. Runs
 * when nghttp2 has taken every frame before this one. */
static void check_stream_frame(h2_conn *h) {
  int32_t id = h->scan_id;
  size_t word;
  uint64_t bit;

  if (h->urgent || h->m.finished ||
      nghttp2_session_find_stream(h->ng, id) != NULL ||
      !id_bit(h, id, &word, &bit))
    return;
  if (h->quiet[word] & bit) {
    /* We reset it (after answering, with NO_ERROR): its frames are
     * ignored, but a second HEADERS without END_STREAM is a malformed
     * trailer section, and its stream error is owed whatever our side's
     * state (RFC 9113 8.1; h2spec 8.1/1 once lost the race to our
     * answer). */
    if (h->scan_type == NGHTTP2_HEADERS &&
        !(h->scan_flags & NGHTTP2_FLAG_END_STREAM))
      (void)nghttp2_submit_rst_stream(h->ng, NGHTTP2_FLAG_NONE, id,
                                      NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  if (!(h->opened[word] & bit) && h->scan_type == NGHTTP2_HEADERS) {
    /* RFC 9113 5.1.1: a new stream's id must be above all used ones. */
    (void)conn_error(h, NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  (void)conn_error(h, NGHTTP2_STREAM_CLOSED);
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

/* A header block (RFC 9113 4.3) opens with a HEADERS (or PUSH_PROMISE)
 * frame; CONTINUATION frames carry it on; it ends with the payload of the
 * frame that has END_HEADERS. No other frame may come in between (6.10),
 * so while one is open the whole connection waits for it. */
static void block_end(h2_conn *h) {
  h->in_block = 0;
  h->block_last = 0;
  h->blocks++;
}

static void block_frame(h2_conn *h, uint8_t type, uint8_t flags, uint32_t len) {
  int part = type == NGHTTP2_HEADERS || type == NGHTTP2_PUSH_PROMISE ||
             (type == NGHTTP2_CONTINUATION && h->in_block);
  h->block_last = part && (flags & NGHTTP2_FLAG_END_HEADERS);
  if (part)
    h->in_block = 1;
  if (h->block_last && len == 0)
    block_end(h);
}

/* The input's frame boundaries, followed ahead of nghttp2, for what its
 * callbacks do not show: the header block in progress (block_frame); a PRIORITY
 * frame's dependency (dropped unread when RFC 7540 priorities are off; RFC
 * 9113 5.3.1 makes depending on itself a PROTOCOL_ERROR) and frames on closed
 * streams. Returns how many of the `n` bytes nghttp2 may take now: all of them,
 * or those before a frame to check first (h->scan_check; the scan resumes past
 * its header), or those before an offending frame (the connection is ending).
 */
static size_t scan_input(h2_conn *h, const uint8_t *p, size_t n) {
  size_t i = 0, start = 0;
  while (i < n) {
    if (h->scan_left > 0 && !h->scan_pri) {
      size_t k = n - i < h->scan_left ? n - i : h->scan_left;
      i += k;
      h->scan_left -= (uint32_t)k;
      if (h->scan_left == 0 && h->block_last)
        block_end(h);
      continue;
    }
    if (h->scan_pri) {
      /* A PRIORITY payload: its first 4 bytes name the dependency. */
      h->scan_hd[h->scan_have++] = p[i++];
      h->scan_left--;
      if (h->scan_have == 4) {
        h->scan_pri = 0;
        h->scan_have = 0;
        if ((be32(h->scan_hd) & 0x7fffffffu) == (uint32_t)h->scan_id) {
          (void)conn_error(h, NGHTTP2_PROTOCOL_ERROR);
          return start;
        }
      }
      continue;
    }
    if (h->scan_have == 0)
      start = i;
    h->scan_hd[h->scan_have++] = p[i++];
    if (h->scan_have == 9) {
      uint32_t len = (uint32_t)h->scan_hd[0] << 16 |
                     (uint32_t)h->scan_hd[1] << 8 | h->scan_hd[2];
      int32_t id = (int32_t)(be32(h->scan_hd + 5) & 0x7fffffffu);
      uint8_t type = h->scan_hd[3];
      h->scan_have = 0;
      h->scan_left = len;
      h->scan_id = id;
      h->scan_type = type;
      h->scan_flags = h->scan_hd[4];
      block_frame(h, type, h->scan_hd[4], len);
      if (type == NGHTTP2_PRIORITY && id != 0 && len == 5) {
        h->scan_pri = 1;
      } else if ((type == NGHTTP2_DATA || type == NGHTTP2_HEADERS) &&
                 (id & 1)) {
        if (type == NGHTTP2_HEADERS && id > h->max_id) {
          id_opened(h, id); /* a new stream */
        } else if (id <= h->max_id) {
          /* Check once nghttp2 has the frames before this one; its
           * header bytes are then passed over like its payload. */
          h->scan_check = 1;
          h->scan_left += (uint32_t)(i - start);
          return start;
        }
      }
    }
  }
  return n;
}

/* Called for each frame header nghttp2 acts on, before it does. */
static int on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd,
                          void *user) {
  h2_conn *h = user;

  (void)ng;
  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (h->urgent || h->m.finished)
    return 0;
  switch (hd->type) {
  case NGHTTP2_RST_STREAM:
    return reset_allowed(h) ? 0 : conn_error(h, NGHTTP2_ENHANCE_YOUR_CALM);
  case NGHTTP2_PRIORITY:
    /* RFC 9113 6.3: PRIORITY on stream 0 is a connection error. */
    return hd->stream_id == 0 ? conn_error(h, NGHTTP2_PROTOCOL_ERROR) : 0;
  default:
    return 0;
  }
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *user) {
  h2_conn *h = user;
  h2_stream *s;

  (void)flags;
  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  h->empty_data = 0;
  s = stream_of(ng, id);
  if (s == NULL || !(s->m.flags & S_OPEN)) {
    nghttp2_session_consume(ng, id, len);
    return 0;
  }
  if (tern__mux_data(&h->m, &s->m, &s->timer, data, len) != 0)
    nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, id,
                              NGHTTP2_INTERNAL_ERROR);
  return h->m.dead ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t code,
                           void *user) {
  h2_conn *h = user;
  h2_stream *s;

  (void)code;
  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  s = stream_of(ng, id);
  if (s != NULL)
    stream_closed(h, s);
  return h->m.dead ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *frame,
                         void *user) {
  h2_conn *h = user;
  h2_stream *s;

  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  switch (frame->hd.type) {
  case NGHTTP2_GOAWAY:
    if (frame->goaway.error_code != NGHTTP2_NO_ERROR) {
      /* An error GOAWAY ends the connection, whether nghttp2 or we sent
       * it (the rapid reset limit sends one and keeps going). */
      h->urgent = 1;
      h->m.finished = 1;
    }
    return 0;
  case NGHTTP2_RST_STREAM: {
    size_t word;
    uint64_t bit;
    if (id_bit(h, frame->hd.stream_id, &word, &bit))
      h->quiet[word] |= bit; /* the client's frames may be in flight */
    return 0;
  }
  case NGHTTP2_DATA:
  case NGHTTP2_HEADERS:
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
      return 0;
    s = stream_of(ng, frame->hd.stream_id);
    if (s == NULL)
      return 0;
    s->m.flags |= S_END_SENT;
    if (s->m.flags & S_REMOTE_DONE)
      return 0;
    if (!(s->m.flags & S_TIMEDOUT) && s->m.has_length &&
        s->m.received <= s->m.content_length &&
        s->m.content_length - s->m.received <= H2_DRAIN_MAX) {
      /* A short rest of a body with a length is read (and dropped), under
       * the body timer, so that nghttp2 can still check the length (RFC
       * 9113 8.1.1: a mismatch is PROTOCOL_ERROR). */
      s->m.flags |= S_DRAIN;
      stream_timer(h, s);
    } else {
      /* The response is complete before the request (RFC 9113 8.1), or
       * the body stalled: ask the client to stop sending, without error. */
      nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                NGHTTP2_NO_ERROR);
    }
    return 0;
  default:
    return 0;
  }
}

static int submit_trailers(h2_conn *h, h2_stream *s) {
  int rc = nghttp2_submit_trailer(h->ng, s->id, s->trailers, s->ntrailers);
  tern__small_free(h->m.w, s->trailers);
  s->trailers = NULL;
  s->ntrailers = 0;
  return rc;
}

static ssize_t read_body(nghttp2_session *ng, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *data_flags,
                         nghttp2_data_source *source, void *user) {
  h2_conn *h = user;
  h2_stream *s = source->ptr;
  size_t avail, n;

  (void)ng;
  (void)id;
  (void)buf;
  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  avail = s->m.r->out.bytes;
  if (avail == 0 && !(s->m.flags & S_RESP_END)) {
    s->m.flags |= S_DEFERRED;
    settle_add(h, s); /* markers waiting at the front move on now */
    return NGHTTP2_ERR_DEFERRED;
  }
  n = avail < length ? avail : length;
  if (n > 0)
    *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == avail && (s->m.flags & S_RESP_END)) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    if (s->trailers != NULL) {
      *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      if (submit_trailers(h, s) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    settle_add(h, s);
  }
  return (ssize_t)n;
}

/* A DATA frame of `length` bytes from the stream's queue: its header is
 * copied into the connection's output and the bytes follow by reference
 * (the response's own segments change queues), with the markers right
 * behind them. Past H2_OUT_HIGH nghttp2 is told to stop framing: one
 * nghttp2_session_mem_send would otherwise frame every stream's window
 * in one go, since a NO_COPY frame returns nothing to the caller. */
static int send_data(nghttp2_session *ng, nghttp2_frame *frame,
                     const uint8_t *framehd, size_t length,
                     nghttp2_data_source *source, void *user) {
  static const uint8_t zeros[256];
  h2_conn *h = user;
  h2_stream *s = source->ptr;
  tern__worker *w = h->m.w;
  tern__outq *out = &h->c->out;
  size_t pad = frame->data.padlen;

  (void)ng;
  if (h->m.dead)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (tern__outq_copy(w, out, framehd, 9) != 0)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (pad > 0) {
    uint8_t b = (uint8_t)(pad - 1);
    if (tern__outq_copy(w, out, &b, 1) != 0)
      return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  if (tern__outq_move(w, out, &s->m.r->out, length, s->m.r) != 0)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (pad > 1 && tern__outq_copy(w, out, zeros, pad - 1) != 0)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (out->bytes >= H2_OUT_HIGH && !h->urgent) {
    h->full = 1;
    return NGHTTP2_ERR_PAUSE;
  }
  return 0;
}

static int on_error(nghttp2_session *ng, int code, const char *msg, size_t len,
                    void *user) {
  h2_conn *h = user;
  (void)ng;
  (void)code;
  tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http2: %.*s", (int)len, msg);
  return 0;
}

/* ---- The session ----------------------------------------------------- */

static uv_once_t ng_once = UV_ONCE_INIT;
static nghttp2_session_callbacks *ng_cbs;
static nghttp2_option *ng_opts;

/* Callbacks and options are the same for every session; nghttp2 copies
 * them into each. They are made once per process (nghttp2 allocates them
 * with malloc, outside tern's hook). */
static void ng_init(void) {
  nghttp2_session_callbacks *cb;
  nghttp2_option *o;

  if (nghttp2_session_callbacks_new(&cb) != 0)
    return;
  if (nghttp2_option_new(&o) != 0) {
    nghttp2_session_callbacks_del(cb);
    return;
  }
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback2(cb, on_header);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
  nghttp2_session_callbacks_set_send_data_callback(cb, send_data);
  nghttp2_session_callbacks_set_error_callback2(cb, on_error);

  nghttp2_option_set_no_auto_window_update(o, 1);
  nghttp2_option_set_max_deflate_dynamic_table_size(o, H2_HPACK_TABLE);
  nghttp2_option_set_max_send_header_block_length(o, H2_MAX_SEND_HEADERS);
  nghttp2_option_set_max_outbound_ack(o, H2_MAX_OUTBOUND_ACK);
  nghttp2_option_set_max_settings(o, H2_MAX_SETTINGS);
  /* A backstop only: on_begin_frame's bucket of the same size runs out
   * first and answers ENHANCE_YOUR_CALM. */
  nghttp2_option_set_stream_reset_rate_limit(o, 2 * TERN__MUX_RESET_BURST,
                                             2 * TERN__MUX_RESET_RATE);
  nghttp2_option_set_max_continuations(o, H2_MAX_CONTINUATIONS);
  nghttp2_option_set_no_closed_streams(o, 1);
  ng_cbs = cb;
  ng_opts = o;
}

static h2_conn *h2_new(tern__stream *c) {
  tern_server *srv = c->head.w->srv;
  nghttp2_settings_entry iv[6];
  uint32_t cmax;
  nghttp2_mem mem;
  h2_conn *h;

  uv_once(&ng_once, ng_init);
  if (ng_cbs == NULL)
    return NULL;
  h = tern__malloc(srv, sizeof(*h));
  if (h == NULL)
    return NULL;
  memset(h, 0, sizeof(*h));
  h->c = c;
  h->m.w = c->head.w;
  h->m.ops = &h2_mux;
  tern__list_init(&h->m.streams);
  /* A session lives on one worker: its small blocks (streams, header
   * buffers, queued frames) come from the worker's size-class pools, so
   * a steady stream of requests does not call the allocator at all. */
  mem.mem_user_data = c->head.w;
  mem.malloc = tern__small_mem_malloc;
  mem.free = tern__small_mem_free;
  mem.calloc = tern__small_mem_calloc;
  mem.realloc = tern__small_mem_realloc;
  if (nghttp2_session_server_new3(&h->ng, ng_cbs, h, ng_opts, &mem) != 0) {
    tern__free(srv, h);
    return NULL;
  }
  iv[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
  iv[0].value = H2_MAX_STREAMS;
  iv[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
  iv[1].value = stream_win_start(srv);
  iv[2].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
  iv[2].value = srv->s.max_head_size;
  iv[3].settings_id = NGHTTP2_SETTINGS_HEADER_TABLE_SIZE;
  iv[3].value = H2_HPACK_TABLE;
  iv[4].settings_id = NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES;
  iv[4].value = 1;
  /* RFC 8441: WebSocket over HTTP/2 (extended CONNECT). */
  iv[5].settings_id = NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL;
  iv[5].value = 1;
  /* A max_conn_window below the protocol's 65535 cannot be announced:
   * the window stays at 65535. */
  cmax = srv->s.max_conn_window > H2_CONN_WIN_FLOOR ? srv->s.max_conn_window
                                                    : H2_CONN_WIN_FLOOR;
  tern__window_init(&h->rwin, H2_CONN_WIN_INIT < cmax ? H2_CONN_WIN_INIT : cmax,
                    cmax);
  tern__reset_budget_init(&h->resets, uv_now(c->head.w->loop));
  h->scan_left = sizeof(preface) - 1; /* the client's magic comes first */
  if (nghttp2_submit_settings(h->ng, NGHTTP2_FLAG_NONE, iv, 6) != 0 ||
      nghttp2_session_set_local_window_size(h->ng, NGHTTP2_FLAG_NONE, 0,
                                            (int32_t)h->rwin.win) != 0) {
    destroy(h);
    return NULL;
  }
  return h;
}

/* Pull frames into the connection's output while it has room, settle
 * what was framed, and repeat while callbacks add more. */
static void on_drained(tern_request *unused, int status, void *user);

/* After the client's FIN no WINDOW_UPDATE can come: a stream with bytes
 * to send and no window left can never deliver them, so it ends now
 * (its writes fail with TERN_ECLOSED) instead of holding the connection,
 * with no timer, until the client's own timeout. */
static void drop_stuck(h2_conn *h) {
  tern__list *l;
  int conn_shut = nghttp2_session_get_remote_window_size(h->ng) <= 0;
again:
  for (l = h->m.streams.next; l != &h->m.streams && !h->m.dead; l = l->next) {
    h2_stream *s = TERN__CONTAINER_OF(l, h2_stream, m.link);
    if (s->m.r->out.bytes == 0 || !(s->m.flags & S_PROVIDER))
      continue;
    if (conn_shut ||
        nghttp2_session_get_stream_remote_window_size(h->ng, s->id) <= 0) {
      abandon(h, s, NGHTTP2_CANCEL);
      goto again;
    }
  }
}

static void pump(h2_conn *h) {
  tern__stream *c = h->c;
  tern__worker *w = h->m.w;
  int blocked;

  if (h->pumping || h->m.dead) {
    h->want_send = 1;
    return;
  }
  enter(h);
  h->pumping = 1;
  blocked = 0;
  do {
    h->want_send = 0;
    if (h->stopping && !h->final && tern__list_empty(&h->m.streams)) {
      /* Graceful stop and nothing in flight: the last GOAWAY. */
      h->final = 1;
      nghttp2_session_terminate_session(h->ng, NGHTTP2_NO_ERROR);
    }
    while (!h->m.finished || h->urgent) {
      const uint8_t *p;
      ssize_t n;
      if (c->out.bytes >= H2_OUT_HIGH && !h->urgent) {
        blocked = 1;
        break;
      }
      h->in_ng++;
      n = nghttp2_session_mem_send(h->ng, &p);
      h->in_ng--;
      if (h->m.dead)
        goto out;
      if (n < 0) {
        tern__log(w->srv, TERN_LOG_DEBUG, "http2: %s",
                  nghttp2_strerror((int)n));
        tern__conn_close(&c->head);
        goto out;
      }
      if (n == 0) {
        if (h->full)
          blocked = 1;
        h->full = 0;
        break;
      }
      if (tern__outq_copy(w, &c->out, p, (size_t)n) != 0) {
        tern__conn_close(&c->head);
        goto out;
      }
    }
    if (settle_all(h) != 0) {
      tern__conn_close(&c->head);
      goto out;
    }
    if (h->m.flow)
      tern__mux_run_flows(&h->m);
    if (h->m.dead)
      goto out;
    if (h->m.eof)
      drop_stuck(h);
    if (h->m.dead)
      goto out;
  } while (h->want_send);
  if (!h->m.finished && !nghttp2_session_want_read(h->ng) &&
      !nghttp2_session_want_write(h->ng))
    h->m.finished = 1; /* GOAWAY both ways, or a terminated session */
  if (h->m.finished) {
    /* Nothing more will be read or framed: what is in flight is gone. */
    h->urgent = 0;
    drop_streams(h);
    if (h->m.dead)
      goto out;
    c->head.flags |= TERN__C_CLOSE_AFTER;
    tern__stream_read_stop(c);
  } else if (blocked && !h->wake) {
    /* Resume when what is queued has been written (on_drained). */
    if (tern__outq_mark(w, &c->out, TERN__SEG_MARK, NULL, on_drained, h) == 0)
      h->wake = 1;
  }
  tern__conn_mark_dirty(&c->head);
out:
  h->pumping = 0;
  if (h->want_send && !h->m.dead && !h->m.finished)
    tern__conn_want_output(&c->head); /* asked for while finishing */
  leave(h);
}

static void on_drained(tern_request *unused, int status, void *user) {
  h2_conn *h = user;
  (void)unused;
  if (status != 0)
    return; /* the connection is closing; h may be gone */
  h->wake = 0;
  pump(h);
}

static void fatal(h2_conn *h, int rv) {
  uint32_t code = NGHTTP2_INTERNAL_ERROR;
  if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS)
    code = NGHTTP2_ENHANCE_YOUR_CALM;
  else if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC)
    code = NGHTTP2_PROTOCOL_ERROR;
  tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http2: %s", nghttp2_strerror(rv));
  if (nghttp2_session_terminate_session(h->ng, code) != 0) {
    tern__conn_close(&h->c->head);
    return;
  }
  h->urgent = 1;
  tern__stream_read_stop(h->c);
}

/* The client finished sending: requests still waiting for body bytes get
 * TERN_BODY_ERROR; the connection closes when the rest is answered. */
static void on_eof(h2_conn *h) {
  tern__list *l;
  h->m.eof = 1;
  h->c->head.flags |= TERN__C_CLOSE_AFTER;
again:
  for (l = h->m.streams.next; l != &h->m.streams && !h->m.dead; l = l->next) {
    h2_stream *s = TERN__CONTAINER_OF(l, h2_stream, m.link);
    tern_request *r = s->m.r;
    /* A handler that has not answered works for a client that has left
     * (HTTP/2 has no half-closed connections): its stream is gone, like
     * a stream the client reset. */
    if ((r->flags & (TERN__RQ_HANDLED | TERN__RQ_ENDED)) == TERN__RQ_HANDLED &&
        !(r->flags & TERN__RQ_TUNNEL)) {
      abandon(h, s, NGHTTP2_CANCEL);
      goto again;
    }
    if (s->m.flags & S_REMOTE_DONE)
      continue;
    if (!(r->flags & (TERN__RQ_HANDLED | TERN__RQ_ENDED))) {
      abandon(h, s, NGHTTP2_CANCEL); /* its body will never come */
      goto again;
    }
    if ((r->flags & TERN__RQ_STREAM) && !(s->m.flags & S_FLOW)) {
      s->m.flags |= S_FLOW;
      h->m.flow = 1;
    }
  }
  /* No more body bytes can come: no stream waits for them any more. */
  for (l = h->m.streams.next; l != &h->m.streams && !h->m.dead; l = l->next)
    stream_timer(h, TERN__CONTAINER_OF(l, h2_stream, m.link));
}

static void h2_input(tern__conn *conn) {
  tern__stream *c = tern__stream_of(conn);
  h2_conn *h = c->h2;
  size_t ok, fed = 0;
  ssize_t n;

  uint32_t blocks;

  if ((c->head.flags & TERN__C_CLOSING) || c->head.proto != &tern__http2 ||
      h == NULL)
    return;
  enter(h);
  blocks = h->blocks;
  if (h->m.flow)
    tern__mux_run_flows(&h->m);
  while (!h->m.dead && c->rpos < c->rlen) {
    size_t len = c->rlen - c->rpos;
    if (h->m.finished || h->urgent) {
      c->rpos = c->rlen; /* ending: input is dropped */
      break;
    }
    if (len > H2_RECV_SLICE)
      len = H2_RECV_SLICE;
    ok = scan_input(h, (const uint8_t *)c->rbuf->data + c->rpos, len);
    h->in_ng++;
    n = nghttp2_session_mem_recv(h->ng,
                                 (const uint8_t *)c->rbuf->data + c->rpos, ok);
    h->in_ng--;
    if (h->m.dead)
      goto out;
    c->rpos += ok;
    if (h->scan_check && n >= 0) {
      h->scan_check = 0;
      check_stream_frame(h);
    }
    if (n < 0) {
      c->rpos = c->rlen;
      fatal(h, (int)n);
      break;
    }
    fed += ok;
    if (fed >= H2_RECV_SLICE && c->rpos < c->rlen) {
      fed = 0;
      pump(h);
    }
  }
  if (!h->m.dead && h->in_block && h->blocks != blocks &&
      c->head.timer.kind == TERN__T_HEAD)
    /* A header block ended and a new one began: the new one's own head
     * time starts now. Bytes of one block never re-arm it. */
    tern__conn_timer(&c->head, TERN__T_HEAD);
  if (!h->m.dead && (c->head.flags & TERN__C_EOF) && !h->m.eof)
    on_eof(h);
  if (!h->m.dead)
    pump(h);
  if (!h->m.dead &&
      !(c->head.flags & (TERN__C_CLOSING | TERN__C_CLOSE_AFTER)) && !h->urgent)
    tern__stream_read_start(c);
out:
  leave(h);
}

static void h2_stop(tern__conn *conn) {
  h2_conn *h = tern__stream_of(conn)->h2;
  if (h == NULL || h->m.dead)
    return;
  h->stopping = 1;
  if (!tern__list_empty(&h->m.streams))
    nghttp2_submit_shutdown_notice(h->ng);
  /* With nothing in flight pump() sends the last GOAWAY at once. */
  schedule(h);
}

static void h2_close(tern__conn *conn) {
  tern__stream *c = tern__stream_of(conn);
  h2_conn *h = c->h2;
  if (h == NULL)
    return;
  c->h2 = NULL;
  h->m.dead = 1;
  enter(h);
  drop_streams(h);
  leave(h); /* frees the session unless an nghttp2 call is on the stack */
}

/* ---- Responses --------------------------------------------------------- */

/* Fill nv from fields: names lower-cased into buf, values trimmed of
 * whitespace (and copied into buf too when copy_values). Returns the
 * number of entries. */
static size_t put_fields(nghttp2_nv *nv, char *buf, const tern_header *f,
                         size_t n, int copy_values) {
  size_t i, k = 0;
  for (i = 0; i < n; i++) {
    char *name = buf;
    const char *v;
    size_t vl;
    if (!tern__mux_field(&f[i], &buf, copy_values, &v, &vl))
      continue;
    nv[k].name = (uint8_t *)name;
    nv[k].namelen = f[i].name_len;
    nv[k].value = (uint8_t *)(uintptr_t)v;
    nv[k].valuelen = vl;
    nv[k].flags = NGHTTP2_NV_FLAG_NONE;
    k++;
  }
  return k;
}

static size_t fields_bytes(const tern_header *f, size_t n, int values) {
  size_t i, size = 0;
  for (i = 0; i < n; i++)
    size += f[i].name_len + (values ? f[i].value_len : 0);
  return size;
}

static h2_conn *live(tern_request *r, h2_stream **sp) {
  h2_stream *s = r->proto_data;
  *sp = s;
  if (s == NULL || !(s->m.flags & S_OPEN) || s->h == NULL || s->h->m.dead ||
      s->h->m.finished)
    return NULL;
  return s->h;
}

/* A head as nghttp2 takes it: :status, then the caller's fields, with
 * room for `extra` more; on the stack when it fits, as nearly every head
 * does. head_close frees what head_open allocated, also after a failure. */
typedef struct {
  nghttp2_nv stack[24], *nv;
  char buf_stack[1024], *buf;
  char st[3];
  size_t k; /* entries filled */
} h2_head;

static int head_open(tern__worker *w, h2_head *hd, int status,
                     const tern_header *f, size_t n, size_t extra) {
  size_t names = fields_bytes(f, n, 0);
  hd->nv = hd->stack;
  hd->buf = hd->buf_stack;
  hd->k = 0;
  if (n + 1 + extra > sizeof(hd->stack) / sizeof(hd->stack[0]))
    hd->nv = tern__malloc(w->srv, (n + 1 + extra) * sizeof(*hd->nv));
  if (names > sizeof(hd->buf_stack))
    hd->buf = tern__malloc(w->srv, names);
  if (hd->nv == NULL || hd->buf == NULL)
    return TERN_ENOMEM;
  tern__status_digits(hd->st, status);
  hd->nv[0].name = (uint8_t *)":status";
  hd->nv[0].namelen = 7;
  hd->nv[0].value = (uint8_t *)hd->st;
  hd->nv[0].valuelen = 3;
  hd->nv[0].flags = NGHTTP2_NV_FLAG_NONE;
  hd->k = 1 + put_fields(hd->nv + 1, hd->buf, f, n, 0);
  return 0;
}

static void head_close(tern__worker *w, h2_head *hd) {
  if (hd->nv != hd->stack)
    tern__free(w->srv, hd->nv);
  if (hd->buf != hd->buf_stack)
    tern__free(w->srv, hd->buf);
}

static int h2_start(tern_request *r, int status, const tern_header *f, size_t n,
                    int64_t cl) {
  h2_stream *s;
  h2_conn *h = live(r, &s);
  tern__worker *w = r->w;
  int bodyless = (r->flags & TERN__RQ_HEAD) || status < 200 || status == 204 ||
                 status == 304;
  int no_length = status < 200 || status == 204 || status == 304;
  h2_head hd;
  nghttp2_nv *nv;
  char len[20];
  size_t k;
  nghttp2_data_provider prd;
  int rc;

  if (h == NULL)
    return TERN_ECLOSED;
  if ((rc = head_open(w, &hd, status, f, n, 3)) != 0)
    goto done;
  nv = hd.nv;
  k = hd.k;
  if (h->c->filter != NULL && w->srv->alt_svc_len > 11) {
    /* "Alt-Svc: " value "\r\n": HTTP/3's address (RFC 7838) */
    nv[k].name = (uint8_t *)"alt-svc";
    nv[k].namelen = 7;
    nv[k].value = (uint8_t *)w->srv->alt_svc + 9;
    nv[k].valuelen = w->srv->alt_svc_len - 11;
    nv[k++].flags = NGHTTP2_NV_FLAG_NONE;
  }
  if (w->date_len > 8) { /* "Date: " value "\r\n" */
    nv[k].name = (uint8_t *)"date";
    nv[k].namelen = 4;
    nv[k].value = (uint8_t *)w->date + 6;
    nv[k].valuelen = w->date_len - 8;
    nv[k++].flags = NGHTTP2_NV_FLAG_NONE;
  }
  if (cl >= 0 && !no_length) {
    nv[k].name = (uint8_t *)"content-length";
    nv[k].namelen = 14;
    nv[k].value = (uint8_t *)len;
    nv[k].valuelen = tern__fmt_u64(len, (uint64_t)cl);
    nv[k++].flags = NGHTTP2_NV_FLAG_NONE;
  }
  prd.source.ptr = s;
  prd.read_callback = read_body;
  rc = nghttp2_submit_response(h->ng, s->id, nv, k,
                               bodyless || cl == 0 ? NULL : &prd);
  if (rc != 0) {
    rc = rc == NGHTTP2_ERR_NOMEM ? TERN_ENOMEM : TERN_ECLOSED;
    goto done;
  }
  r->flags |= TERN__RQ_STARTED;
  r->resp_left = bodyless ? 0 : cl;
  if (bodyless)
    r->flags |= TERN__RQ_HEAD; /* from here on: no body bytes */
  if (!bodyless && cl != 0)
    s->m.flags |= S_PROVIDER;
  tern__mux_count(&h->m, &s->m);
  schedule(h);
done:
  head_close(w, &hd);
  return rc;
}

static void resume(h2_conn *h, h2_stream *s) {
  if (s->m.flags & S_DEFERRED) {
    s->m.flags &= ~(unsigned)S_DEFERRED;
    nghttp2_session_resume_data(h->ng, s->id);
  }
}

static int h2_write(tern_request *r, const void *p, size_t len, int copy,
                    tern_write_fn done, void *duser, tern_release_fn release,
                    void *ruser) {
  h2_stream *s;
  h2_conn *h = live(r, &s);
  int state = h != NULL ? 1 : -1, rc;

  if (h == NULL && s != NULL && !(s->m.flags & S_OPEN) &&
      (s->m.flags & S_END_SENT))
    state = 0; /* a complete bodyless answer, its stream closed */
  rc = tern__mux_write(r, state, p, len, copy, done, duser, release, ruser);
  if (rc != 0 || h == NULL)
    return rc;
  /* Markers and zero-length pieces at the front move to the connection's
   * queue at the next settle; bytes wait for the data provider. */
  settle_add(h, s);
  resume(h, s);
  schedule(h);
  return 0;
}

static int h2_end(tern_request *r, const tern_header *t, size_t n) {
  h2_stream *s;
  h2_conn *h = live(r, &s);
  tern__worker *w = r->w;

  int rc = tern__mux_end(h != NULL ? &h->m : NULL, h != NULL ? &s->m : NULL, r);

  if (rc == 0)
    return 0; /* a bodyless answer whose stream has closed already */
  if (rc < 0) {
    /* Cut short: the stream must not look complete. */
    nghttp2_submit_rst_stream(h->ng, NGHTTP2_FLAG_NONE, s->id,
                              NGHTTP2_INTERNAL_ERROR);
    schedule(h);
    return 0;
  }
  if (n > 0 && (s->m.flags & S_PROVIDER)) {
    size_t k;
    nghttp2_nv *nv =
        tern__small_malloc(w, n * sizeof(*nv) + fields_bytes(t, n, 1) + 1);
    if (nv == NULL)
      return TERN_ENOMEM;
    k = put_fields(nv, (char *)(nv + n), t, n, 1);
    if (k > 0) {
      s->trailers = nv;
      s->ntrailers = k;
    } else {
      tern__small_free(w, nv);
    }
  }
  tern__mux_end_queued(&h->m, &s->m);
  settle_add(h, s);
  resume(h, s);
  schedule(h);
  return 0;
}

static void h2_body_flow(tern_request *r) {
  h2_stream *s;
  h2_conn *h = live(r, &s);
  if (h != NULL && !is_gone(r))
    tern__mux_body_flow(&h->m, &s->m);
}

/* RFC 8441: the answer to an extended CONNECT is a 200 without a length;
 * the stream's DATA frames then carry the tunnel both ways. */
static int h2_tunnel(tern_request *r, const tern_header *h, size_t n) {
  int rc;
  if (!(r->flags & TERN__RQ_WS_CONNECT))
    return TERN_ESTATE;
  r->flags |= TERN__RQ_TUNNEL;
  rc = h2_start(r, 200, h, n, -1);
  if (rc != 0)
    r->flags &= ~(unsigned)TERN__RQ_TUNNEL;
  return rc;
}

static size_t h2_pending(const tern_request *r) {
  const tern__stream *c = tern__stream_cof(r->conn);
  return r->out.bytes + c->out.bytes + tern__stream_buffered(c);
}

static void h2_release(tern_request *r) {
  h2_stream *s = r->proto_data;
  tern__worker *w = r->w;
  size_t i;

  if (s == NULL)
    return; /* an HTTP/1.1 request from before an upgrade */
  for (i = 0; i < s->nrc; i++)
    nghttp2_rcbuf_decref(s->rc[i]);
  tern__small_free(w, s->rc);
  tern__small_free(w, s->m.cookie);
  tern__small_free(w, s->m.pend.p);
  tern__small_free(w, s->trailers);
  tern__small_free(w, s);
  r->proto_data = NULL;
}

/* A 1xx interim answer (103 Early Hints): a HEADERS frame without
 * END_STREAM ahead of the final one (RFC 9113 8.1); nghttp2 copies the
 * fields. */
static int h2_interim(tern_request *r, int status, const tern_header *f,
                      size_t n) {
  h2_stream *s;
  h2_conn *h = live(r, &s);
  tern__worker *w = r->w;
  h2_head hd;
  int rc;

  if (h == NULL)
    return TERN_ECLOSED;
  rc = head_open(w, &hd, status, f, n, 0);
  if (rc == 0) {
    rc = nghttp2_submit_headers(h->ng, NGHTTP2_FLAG_NONE, s->id, NULL, hd.nv,
                                hd.k, NULL);
    if (rc == 0)
      schedule(h);
    else
      rc = rc == NGHTTP2_ERR_NOMEM ? TERN_ENOMEM : TERN_ECLOSED;
  }
  head_close(w, &hd);
  return rc;
}

/* HTTP/2's connection timer (see "The core's view" at the top): the head
 * timer while a header block is open, which stops the whole connection;
 * none while streams are in flight or wait under their own body timers;
 * else keep-alive idle. nghttp2 buffers partial frames, so the read
 * buffer is never needed between reads. */
static int h2_timer(const tern__conn *conn) {
  const h2_conn *h = tern__stream_cof(conn)->h2;
  if (h != NULL && h->in_block)
    return TERN__T_HEAD;
  if (h != NULL && h->m.nq > 0)
    return TERN__T_NONE;
  if (h != NULL && h->waiting > 0)
    return TERN__T_NONE | TERN__T_DRAINED;
  return TERN__T_IDLE | TERN__T_DRAINED;
}

/* A header block that did not end within head_timeout_ms ends the
 * connection with GOAWAY PROTOCOL_ERROR (the block's HPACK state cannot be
 * given up alone); the connection closes once that is written. Any other
 * timeout closes it at once. */
static int h2_timeout(tern__conn *conn, int kind) {
  tern__stream *c = tern__stream_of(conn);
  h2_conn *h = c->h2;
  if (kind != TERN__T_HEAD || h == NULL || h->m.dead || !h->in_block ||
      h->m.finished || h->urgent)
    return 0;
  tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http2: header block timed out");
  if (nghttp2_session_terminate_session(h->ng, NGHTTP2_PROTOCOL_ERROR) != 0)
    return 0;
  h->urgent = 1;
  tern__stream_read_stop(c);
  schedule(h);
  return 1;
}

/* One stream's answer failed (a call the worker could not carry out, no
 * memory): that stream is reset, INTERNAL_ERROR, and the connection's
 * other streams go on. */
static void h2_abort(tern_request *r) {
  h2_stream *s;
  h2_conn *h = live(r, &s);
  r->flags |= TERN__RQ_ABORT;
  if (h == NULL)
    return; /* its stream has ended already */
  enter(h);
  abandon(h, s, NGHTTP2_INTERNAL_ERROR);
  schedule(h);
  leave(h);
}

static const tern__req_ops h2_ops = {
    .start = h2_start,
    .write = h2_write,
    .end = h2_end,
    .interim = h2_interim,
    .body_flow = h2_body_flow,
    .tunnel = h2_tunnel,
    .pending = h2_pending,
    .abort = h2_abort,
    .release = h2_release,
};

/* ---- Starting HTTP/2 on a connection ------------------------------------ */

/* base64url (RFC 4648 5), padding optional; the standard alphabet's two
 * characters are accepted too. */
static int b64url_decode(const char *in, size_t n, uint8_t *out, size_t cap,
                         size_t *outlen) {
  uint32_t acc = 0;
  int bits = 0;
  size_t i, o = 0;
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)in[i];
    uint32_t v;
    if (ch >= 'A' && ch <= 'Z')
      v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z')
      v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9')
      v = ch - '0' + 52;
    else if (ch == '-' || ch == '+')
      v = 62;
    else if (ch == '_' || ch == '/')
      v = 63;
    else if (ch == '=')
      break;
    else
      return -1;
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (o == cap)
        return -1;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  for (; i < n; i++)
    if (in[i] != '=')
      return -1;
  *outlen = o;
  return 0;
}

/* h2c upgrade (RFC 7540 3.2): the request, which the HTTP/1.1 adapter no
 * longer holds, becomes stream 1 and is routed; the 101 answer is queued.
 * On error nothing has changed and the request stays HTTP/1.1. */
static int upgrade(tern__stream *c, const tern__h2c_upgrade *up) {
  tern_request *r = up->r;
  const char *settings = up->settings;
  size_t len = up->settings_len;
  static const char switching[] = "HTTP/1.1 101 Switching Protocols\r\n"
                                  "Connection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
  uint8_t payload[6 * 32];
  size_t plen;
  h2_stream *s;
  h2_conn *h;

  if (b64url_decode(settings, len, payload, sizeof(payload), &plen) != 0 ||
      plen % 6 != 0)
    return TERN_EINVAL;
  h = h2_new(c);
  if (h == NULL)
    return TERN_ENOMEM;
  if (nghttp2_session_upgrade2(h->ng, payload, plen,
                               (r->flags & TERN__RQ_HEAD) != 0, NULL) != 0) {
    destroy(h);
    return TERN_EINVAL;
  }
  s = tern__small_malloc(c->head.w, sizeof(*s));
  if (s == NULL) {
    destroy(h);
    return TERN_ENOMEM;
  }
  if (tern__outq_copy(c->head.w, &c->out, switching, sizeof(switching) - 1) !=
      0) {
    tern__small_free(c->head.w, s);
    destroy(h);
    return TERN_ENOMEM;
  }
  memset(s, 0, sizeof(*s));
  s->h = h;
  s->m.r = r;
  s->id = 1;
  s->m.flags = S_OPEN | S_HEAD_DONE | S_REMOTE_DONE;
  stream_win_init(h, s);
  tern__timer_init(&s->timer, stream_timeout);
  tern__conn_set_proto(&c->head, &tern__http2);
  c->h2 = h;
  /* The HTTP/1.1 adapter's queue reference becomes the stream's, and the
   * request is HTTP/2's from here on. */
  r->proto_data = s;
  r->ops = tern__http2.ops;
  r->protocol = TERN_PROTO_HTTP2;
  tern__list_append(&h->m.streams, &s->m.link);
  nghttp2_session_set_stream_user_data(h->ng, 1, s);
  id_opened(h, 1);
  enter(h);
  tern__mux_route(&h->m, &s->m);
  schedule(h);
  leave(h);
  return 0;
}

/* HTTP/2 takes the connection: prior knowledge (HTTP/1.1 saw the
 * preface), ALPN "h2", or an h2c upgrade (`arg`). Our SETTINGS go out
 * even before the client's arrive. */
static int h2_attach(tern__conn *conn, void *arg) {
  tern__stream *c = tern__stream_of(conn);
  h2_conn *h;
  if (arg != NULL)
    return upgrade(c, arg);
  h = h2_new(c);
  if (h == NULL)
    return TERN_ENOMEM;
  tern__conn_set_proto(conn, &tern__http2);
  c->h2 = h;
  schedule(h);
  return 0;
}

/* Output was asked for outside input (a response call, a drained queue):
 * frame it now, in the check phase, never inside a response call. */
static void h2_output(tern__conn *conn) {
  tern__stream *c = tern__stream_of(conn);
  h2_conn *h = c->h2;
  if (h == NULL || h->m.dead)
    return;
  /* A pump that ends the session (no memory) frees it when it leaves:
   * held here too, for the checks after it, as h2_input holds it. */
  enter(h);
  pump(h);
  if (!h->m.dead && !(conn->flags & (TERN__C_CLOSING | TERN__C_CLOSE_AFTER)) &&
      !h->urgent)
    tern__stream_read_start(c);
  leave(h);
}

/* Streams the server is working on. */
static size_t h2_busy(const tern__conn *conn) {
  const h2_conn *h = tern__stream_cof(conn)->h2;
  return h != NULL ? h->m.nq : 0;
}

const tern__proto tern__http2 = {
    .name = "h2",
    .attach = h2_attach,
    .input = h2_input,
    .output = h2_output,
    .stop = h2_stop,
    .close = h2_close,
    .busy = h2_busy,
    .timer = h2_timer,
    .timeout = h2_timeout,
    .ops = &h2_ops,
};
