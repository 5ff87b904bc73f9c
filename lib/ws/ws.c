/* WebSocket sockets: accepting the handshake, the public tern_ws_* calls,
 * and the
 * glue between the frame codec (ws/frame.h), permessage-deflate
 * (ws/deflate.h) and a carrier.
 *
 * A WebSocket rides on the request that opened it. The carrier (the
 * HTTP/1.1 or HTTP/2 adapter) answers the handshake through its `tunnel`
 * operation and then moves raw bytes: the client's arrive through the
 * request's streaming body callback, ours leave through the adapter's
 * write, which appends to the connection's output. The output is written
 * once per loop turn, so every frame a batch of input produced leaves in
 * one write. Closing the socket ends the response.
 *
 * Lifetime. The socket holds the user's reference on its request until
 * on_close. The tern_ws object itself is reference counted with atomics:
 * the worker holds one reference while the socket is open, every posted
 * call and queued drain marker one, and the user may take more
 * (tern_ws_ref). Fields other than `refs`, `closed` and `hint` belong to
 * the owning worker.
 */
#include <string.h>

#include "core/worker.h"
#include "ws/deflate.h"
#include "ws/frame.h"
#include "ws/handshake.h"

/* The worker's WebSocket state (its service slot, TERN__SVC_WS). */
typedef struct {
  tern__list open;    /* open sockets */
  tern__list closing; /* sockets waiting for the client's close */
  tern__list ended;   /* sockets whose on_close is due (check phase) */
  unsigned calls;     /* tern_ws_* calls on the stack of this worker */
  /* Where client payload is unmasked (16 KiB, got on first use), since
   * the carrier's bytes are read-only here; scratch_busy while a
   * delivery is decoded into it. */
  unsigned char *scratch;
  int scratch_busy;
} ws_worker;

#define WSW(w) ((ws_worker *)(w)->svc[TERN__SVC_WS])

enum {
  WS_OPEN = 0,    /* messages flow both ways */
  WS_CLOSING = 1, /* our close frame is sent; waiting for the client's */
  WS_DONE = 2,    /* on_close has run; the request is let go */
};

enum {
  PAUSE_USER = 1u << 0, /* tern_ws_pause */
  PAUSE_FULL = 1u << 1, /* the send queue is over high_water */
};

/* Kinds of posted calls (ws_msg.kind). */
enum { P_SEND = 1, P_FRAGMENT, P_PING, P_CLOSE, P_SHARED, P_PAUSE };

/* Whole messages larger than this do not keep their buffer afterwards:
 * an idle socket holds no large buffer. */
#define WS_KEEP_BUF 16384

/* The worker's buffer that client payload is unmasked into: the
 * carrier's bytes are read-only (under HTTP/3 they are the QUIC stack's
 * memory). One per worker, reused by every socket, so the steady state
 * allocates nothing; a frame larger than it is decoded in pieces. A
 * delivery decoded while the worker's buffer is in use (a nested feed,
 * which no carrier does today) or could not be had uses a small one on
 * the stack instead, only slower. */
#define WS_SCRATCH 16384
#define WS_SCRATCH_LOCAL 512

/* A growable byte buffer (a message being assembled or compressed). */
typedef struct {
  char *p;
  size_t len, cap;
} ws_buf;

struct tern_ws {
  _Atomic int refs;
  _Atomic int closed;  /* on_close ran or is running: calls fail */
  _Atomic size_t hint; /* tern_ws_buffered for other threads */
  /* Bytes other threads' sends have posted and the worker has not yet
   * queued: counted against high_water with `hint`, so that a thread
   * sending faster than the worker applies cannot pile up messages in the
   * inbox past the mark. */
  _Atomic size_t posted;
  tern__worker *w;
  tern_request *r; /* NULL once closed */
  int protocol;
  int state;
  unsigned pause;
  int over;      /* went over high_water: on_drain is due */
  int marked;    /* a drain marker is queued */
  int send_type; /* type of a fragmented send in progress, or 0 */
  unsigned send_utf8;
  int in_type; /* the message being received */
  int in_compressed;
  int in_skip;       /* drop it (we are closing) */
  uint64_t deadline; /* WS_CLOSING: when to give up on the client */
  tern__list link;   /* its worker's open or closing list */
  tern_ws_options o;
  void *user, *data;
  tern__ws_decoder dec;
  /* A whole message being assembled. `span` is unmasked payload still in
   * the scratch buffer of the delivery being decoded, appended to `msg`
   * only if the message does not end within that delivery. */
  ws_buf msg;
  const unsigned char *span;
  size_t span_len;
  /* permessage-deflate, when negotiated. */
  tern__ws_deflater *def;
  tern__ws_inflater *inf;
  ws_buf z; /* a compressed message being framed */
  char subprotocol[TERN__WS_SUBPROTOCOL_MAX];
  /* on_close's arguments while it waits for the check phase. */
  int close_code;
  size_t close_reason_len;
  char close_reason[TERN__WS_MAX_CONTROL];
};

/* The shared frame of tern_ws_broadcast. */
typedef struct {
  _Atomic size_t refs;
  tern_server *srv;
  size_t len;
  unsigned char data[];
} shared_frame;

/* ---- Small helpers ---------------------------------------------------- */

static tern_server *srv_of(const tern_ws *ws) {
  return ws->w->srv;
}

static int buf_append(tern_server *srv, ws_buf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    char *nb;
    while (cap < b->len + n)
      cap *= 2;
    nb = tern__realloc(srv, b->p, cap);
    if (nb == NULL)
      return TERN_ENOMEM;
    b->p = nb;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

/* Between messages: empty, and no large buffer kept by an idle socket. */
static void buf_reset(tern_server *srv, ws_buf *b) {
  b->len = 0;
  if (b->cap > WS_KEEP_BUF) {
    tern__free(srv, b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

static void ws_free(tern_ws *ws) {
  tern_server *srv = srv_of(ws);
  if (ws->def != NULL) {
    tern__ws_deflater_free(ws->def);
    tern__free(srv, ws->def);
  }
  if (ws->inf != NULL) {
    tern__ws_inflater_free(ws->inf);
    tern__free(srv, ws->inf);
  }
  tern__free(srv, ws->msg.p);
  tern__free(srv, ws->z.p);
  tern__free(srv, ws);
}

void tern_ws_ref(tern_ws *ws) {
  if (ws != NULL)
    atomic_fetch_add(&ws->refs, 1);
}

void tern_ws_unref(tern_ws *ws) {
  if (ws != NULL && atomic_fetch_sub(&ws->refs, 1) == 1)
    ws_free(ws);
}

static int is_open(const tern_ws *ws) {
  return ws->state == WS_OPEN && ws->r != NULL &&
         !atomic_load_explicit(&ws->r->gone, memory_order_acquire);
}

static size_t pending(const tern_ws *ws) {
  return ws->r != NULL ? ws->r->ops->pending(ws->r) : 0;
}

static void set_hint(tern_ws *ws) {
  atomic_store_explicit(&ws->hint, pending(ws), memory_order_relaxed);
}

static void apply_pause(tern_ws *ws) {
  tern_request *r = ws->r;
  int want = ws->pause != 0;
  if (r == NULL || !(r->flags & TERN__RQ_READING))
    return;
  if (want && !(r->flags & TERN__RQ_PAUSED))
    tern_request_pause(r);
  else if (!want && (r->flags & TERN__RQ_PAUSED))
    tern_request_resume(r);
}

/* ---- Output ------------------------------------------------------------- */

static int put(tern_ws *ws, const void *p, size_t n) {
  tern_request *r = ws->r;
  r->bytes_out += n;
  return r->ops->write(r, p, n, 1, NULL, NULL, NULL, NULL);
}

/* A frame whose payload is at most this long goes to the adapter in one
 * write with its header: one copy into the output queue, not two. */
#define SMALL_FRAME 512

static int put_frame(tern_ws *ws, int opcode, int fin, int rsv1, const void *p,
                     size_t n) {
  unsigned char f[TERN__WS_MAX_HEADER + SMALL_FRAME];
  size_t hl = tern__ws_frame_header(f, opcode, fin, rsv1, n);
  int rc;
  if (n <= SMALL_FRAME) {
    if (n > 0)
      memcpy(f + hl, p, n);
    return put(ws, f, hl + n);
  }
  rc = put(ws, f, hl);
  if (rc == 0)
    rc = put(ws, p, n);
  return rc;
}

static void on_mark(tern_request *r, int status, void *user);

/* Queue a marker behind what is queued now: when it is written, look at
 * the queue again (drain). */
static void arm_drain(tern_ws *ws) {
  tern_request *r = ws->r;
  if (ws->marked || r == NULL)
    return;
  tern_ws_ref(ws);
  if (r->ops->write(r, NULL, 0, 0, on_mark, ws, NULL, NULL) != 0) {
    tern_ws_unref(ws);
    return;
  }
  ws->marked = 1;
}

static void on_mark(tern_request *r, int status, void *user) {
  tern_ws *ws = user;
  (void)r;
  ws->marked = 0;
  if (status == 0 && ws->state != WS_DONE) {
    set_hint(ws);
    if (pending(ws) <= ws->o.high_water / 2) {
      ws->over = 0;
      if (ws->pause & PAUSE_FULL) {
        ws->pause &= ~(unsigned)PAUSE_FULL;
        apply_pause(ws);
      }
      if (ws->o.on_drain != NULL)
        ws->o.on_drain(ws, ws->user);
    } else {
      arm_drain(ws);
    }
  }
  tern_ws_unref(ws);
}

/* After queuing: past the mark, pause reading (if so configured) and
 * watch for the drain. */
static void after_send(tern_ws *ws) {
  size_t n = pending(ws);
  atomic_store_explicit(&ws->hint, n, memory_order_relaxed);
  if (n <= ws->o.high_water)
    return;
  ws->over = 1;
  if (ws->o.on_full == TERN_WS_PAUSE_READING && !(ws->pause & PAUSE_FULL)) {
    ws->pause |= PAUSE_FULL;
    apply_pause(ws);
  }
  arm_drain(ws);
}

static int refuse_full(tern_ws *ws) {
  if (ws->o.on_full != TERN_WS_FAIL_SEND || pending(ws) <= ws->o.high_water)
    return 0;
  ws->over = 1;
  arm_drain(ws);
  return 1;
}

static int z_collect(void *user, const unsigned char *p, size_t n) {
  tern_ws *ws = user;
  return buf_append(srv_of(ws), &ws->z, p, n);
}

static void fail(tern_ws *ws, int code);

/* Frame (and compress) a data message or one piece of it. `first` says
 * whether this piece opens the message. */
static int send_data(tern_ws *ws, int type, const void *p, size_t n, int first,
                     int fin) {
  int opcode = first ? type : TERN__WS_OP_CONT;
  int rc;

  if (ws->def == NULL)
    return put_frame(ws, opcode, fin, 0, p, n);
  rc = tern__ws_deflate(ws->def, p, n, fin, z_collect, ws);
  if (rc == 0)
    rc = put_frame(ws, opcode, fin, first, ws->z.p, ws->z.len);
  buf_reset(srv_of(ws), &ws->z);
  return rc < 0 ? rc : rc != 0 ? TERN_ENOMEM : 0;
}

static int text_valid(unsigned *state, const void *p, size_t n, int fin) {
  if (tern__ws_utf8_scan(state, p, n) != n)
    return 0;
  return !fin || *state == TERN__WS_UTF8_OK;
}

/* The calls, on the owning worker. A failure to queue (out of memory)
 * ends the socket. */
static int do_send(tern_ws *ws, int type, const void *p, size_t n, int frag,
                   int fin) {
  int first, rc;
  unsigned utf8;

  if (!is_open(ws))
    return TERN_ECLOSED;
  if (frag ? (ws->send_type != 0 && ws->send_type != type) : ws->send_type != 0)
    return TERN_EINVAL;
  first = ws->send_type == 0;
  utf8 = first ? TERN__WS_UTF8_OK : ws->send_utf8;
  if (type == TERN_WS_TEXT && !text_valid(&utf8, p, n, fin))
    return TERN_EINVAL;
  if (refuse_full(ws))
    return TERN_ETOOBIG;
  rc = send_data(ws, type, p, n, first, fin);
  if (rc != 0) {
    fail(ws, TERN__WS_CLOSE_INTERNAL);
    return TERN_ENOMEM;
  }
  ws->send_type = fin ? 0 : type;
  ws->send_utf8 = utf8;
  if (fin)
    TERN__STAT_ADD(ws->w->stats.ws_out, 1);
  after_send(ws);
  return 0;
}

static int do_control(tern_ws *ws, int opcode, const void *p, size_t n) {
  unsigned char f[TERN__WS_MAX_CONTROL_FRAME];
  size_t len = tern__ws_control_frame(f, opcode, p, n);
  if (len == 0)
    return TERN_EINVAL;
  if (put(ws, f, len) != 0) {
    fail(ws, TERN__WS_CLOSE_INTERNAL);
    return TERN_ENOMEM;
  }
  after_send(ws);
  return 0;
}

static void release_shared(void *data, void *user) {
  shared_frame *f = user;
  (void)data;
  if (atomic_fetch_sub(&f->refs, 1) == 1)
    tern__free(f->srv, f);
}

static int do_shared(tern_ws *ws, shared_frame *f) {
  tern_request *r = ws->r;
  if (!is_open(ws) || ws->send_type != 0 || refuse_full(ws))
    return TERN_ECLOSED;
  atomic_fetch_add(&f->refs, 1);
  r->bytes_out += f->len;
  TERN__STAT_ADD(ws->w->stats.ws_out, 1);
  if (r->ops->write(r, f->data, f->len, 0, NULL, NULL, release_shared, f) !=
      0) {
    release_shared(f->data, f);
    fail(ws, TERN__WS_CLOSE_INTERNAL);
    return TERN_ENOMEM;
  }
  after_send(ws);
  return 0;
}

/* ---- Closing ------------------------------------------------------------ */

/* The end: tell the user, let the request go (which ends the HTTP/1.1
 * connection or the HTTP/2 stream) and drop the worker's reference.
 *
 * A socket can end inside one of the user's own tern_ws_* calls (a send
 * that cannot queue its frame for lack of memory, a connection that
 * fails under a write). on_close must not run there: a caller that holds
 * its own lock across tern_ws_send or tern_ws_broadcast, as a chat room
 * holds its member list's, would deadlock when on_close takes that lock to
 * remove the member. Then the socket is ended at once (calls return
 * TERN_ECLOSED) and on_close waits on the worker's ended list for the
 * check phase of this loop turn, outside every call. */
static void finish(tern_ws *ws, int code, const char *reason, size_t len) {
  tern_request *r = ws->r;
  tern__worker *w = ws->w;
  int defer = WSW(w)->calls > 0;

  if (ws->state == WS_DONE)
    return;
  ws->state = WS_DONE;
  atomic_store(&ws->closed, 1);
  tern__list_remove(&ws->link);
  TERN__STAT_ADD(w->stats.ws_open, (uint64_t)-1);
  if (defer) {
    ws->close_code = code;
    ws->close_reason_len =
        len < sizeof(ws->close_reason) ? len : sizeof(ws->close_reason);
    if (ws->close_reason_len > 0)
      memcpy(ws->close_reason, reason, ws->close_reason_len);
    tern__list_append(&WSW(w)->ended, &ws->link);
    TERN__CHECK_DUE(w, TERN__SVC_WS);
    /* The check phase follows this turn's callbacks; the wake-up covers
     * a call made from a timer of an attached loop, before the poll. */
    tern__worker_wake(w);
  } else if (ws->o.on_close != NULL) {
    ws->o.on_close(ws, code, reason, len, ws->user);
  }
  ws->r = NULL;
  if (r != NULL) {
    r->flags |= TERN__RQ_CLOSE;
    tern__response_end(r, NULL, 0);
  }
  if (!defer)
    tern_ws_unref(ws); /* else run_closes drops it */
}

static void run_closes(tern__worker *w) {
  ws_worker *ww = WSW(w);
  while (!tern__list_empty(&ww->ended)) {
    tern_ws *ws = TERN__CONTAINER_OF(ww->ended.next, tern_ws, link);
    tern__list_remove(&ws->link);
    if (ws->o.on_close != NULL)
      ws->o.on_close(ws, ws->close_code, ws->close_reason, ws->close_reason_len,
                     ws->user);
    tern_ws_unref(ws); /* the worker's, kept for on_close */
  }
}

/* Send our close frame (code 0: none). */
static int send_close(tern_ws *ws, int code, const char *reason, size_t len) {
  unsigned char f[TERN__WS_MAX_CONTROL_FRAME];
  size_t n = tern__ws_close_frame(f, code, reason, len);
  if (n == 0)
    return TERN_EINVAL;
  return put(ws, f, n);
}

/* A protocol error or an internal failure: say why and end. */
static void fail(tern_ws *ws, int code) {
  if (ws->state == WS_DONE)
    return;
  if (ws->state == WS_OPEN && ws->r != NULL)
    send_close(ws, code, NULL, 0);
  finish(ws, code, NULL, 0);
}

/* The client's close frame: answer it (unless we started) and end. */
static void peer_close(tern_ws *ws, int code, const char *reason, size_t len) {
  if (ws->state == WS_OPEN)
    send_close(ws, code == TERN__WS_CLOSE_NO_STATUS ? 0 : code, NULL, 0);
  finish(ws, code, reason, len);
}

static int do_close(tern_ws *ws, int code, const char *reason, size_t len) {
  if (!is_open(ws))
    return TERN_ECLOSED;
  if (send_close(ws, code, reason, len) != 0) {
    fail(ws, TERN__WS_CLOSE_INTERNAL);
    return TERN_ENOMEM;
  }
  ws->state = WS_CLOSING;
  ws->deadline = uv_now(ws->w->loop) + ws->o.close_timeout_ms;
  tern__list_remove(&ws->link);
  tern__list_append(&WSW(ws->w)->closing, &ws->link);
  /* The client's close frame must still be read. */
  ws->pause = 0;
  apply_pause(ws);
  return 0;
}

static void stop_all(tern__worker *w) {
  ws_worker *ww = WSW(w);
  while (!tern__list_empty(&ww->open)) {
    tern_ws *ws = TERN__CONTAINER_OF(ww->open.next, tern_ws, link);
    if (do_close(ws, TERN__WS_CLOSE_GOING_AWAY, "server stopping", 15) != 0 &&
        ws->state == WS_OPEN)
      finish(ws, TERN__WS_CLOSE_GOING_AWAY, NULL, 0);
  }
}

static void sweep(tern__worker *w, uint64_t now) {
  /* One timeout per server setting would keep this list sorted; with
   * per-socket timeouts it is scanned, and it only holds sockets in
   * their close handshake. */
  tern__list *l, *next;
  ws_worker *ww = WSW(w);
  for (l = ww->closing.next; l != &ww->closing; l = next) {
    tern_ws *ws = TERN__CONTAINER_OF(l, tern_ws, link);
    next = l->next;
    if (ws->deadline <= now)
      finish(ws, 1006, NULL, 0);
  }
}

/* ---- Input -------------------------------------------------------------- */

static int msg_append(tern_ws *ws, const void *p, size_t n) {
  return buf_append(srv_of(ws), &ws->msg, p, n);
}

/* Message bytes (plain, or inflated): to the user now when streaming,
 * else gathered until the end. */
static int take(tern_ws *ws, const unsigned char *p, size_t n) {
  if (ws->in_skip || n == 0)
    return 0;
  if (ws->o.stream_messages) {
    if (ws->o.on_message != NULL)
      ws->o.on_message(ws, ws->in_type, (const char *)p, n, 0, ws->user);
    return 0;
  }
  if (ws->span != NULL) {
    int rc = msg_append(ws, ws->span, ws->span_len);
    ws->span = NULL;
    if (rc != 0)
      return rc;
  }
  return msg_append(ws, p, n);
}

static int z_take(void *user, const unsigned char *p, size_t n) {
  return take(user, p, n);
}

/* Plain DATA in the scratch buffer: keep a view while it may be the
 * whole message. */
static int take_span(tern_ws *ws, const unsigned char *p, size_t n) {
  if (ws->in_skip || ws->o.stream_messages || ws->msg.len > 0 ||
      ws->span != NULL)
    return take(ws, p, n);
  ws->span = p;
  ws->span_len = n;
  return 0;
}

static void message_end(tern_ws *ws) {
  const char *p = ws->msg.p != NULL ? ws->msg.p : "";
  size_t n = ws->msg.len;

  if (ws->span != NULL) {
    p = (const char *)ws->span;
    n = ws->span_len;
    ws->span = NULL;
  }
  TERN__STAT_ADD(ws->w->stats.ws_in, 1);
  if (!ws->in_skip && ws->o.on_message != NULL)
    ws->o.on_message(ws, ws->in_type, ws->o.stream_messages ? "" : p,
                     ws->o.stream_messages ? 0 : n, 1, ws->user);
  buf_reset(srv_of(ws), &ws->msg);
}

/* Append the span kept in the scratch buffer to the message. */
static int span_flush(tern_ws *ws) {
  const unsigned char *p = ws->span;
  ws->span = NULL;
  return p != NULL ? msg_append(ws, p, ws->span_len) : 0;
}

/* Decode a delivery of client bytes. They are the carrier's and only
 * read: payload is unmasked into the scratch buffer. */
static void feed(tern_ws *ws, const unsigned char *buf, size_t len) {
  tern__worker *w = ws->w;
  unsigned char local[WS_SCRATCH_LOCAL];
  unsigned char *start = local, *o, *end;
  int own = 0;

  ws_worker *ww = WSW(w);

  if (!ww->scratch_busy &&
      (ww->scratch != NULL ||
       (ww->scratch = tern__malloc(w->srv, WS_SCRATCH)) != NULL)) {
    start = ww->scratch;
    ww->scratch_busy = own = 1;
  }
  o = start;
  end = start + (own ? WS_SCRATCH : sizeof local);
  tern__ws_decoder_output(&ws->dec, o, (size_t)(end - o));
  while (ws->state != WS_DONE) {
    tern__ws_event ev;
    size_t used;
    int rc;

    /* Payload is unmasked at o, behind the previous span, so that a span
     * kept as the possible whole message stays where it is. Once the
     * buffer is full it starts over, the kept span moving into the
     * message buffer first. */
    if (o == end) {
      o = start;
      tern__ws_decoder_output(&ws->dec, o, (size_t)(end - o));
      if (span_flush(ws) != 0) {
        fail(ws, TERN__WS_CLOSE_INTERNAL);
        break;
      }
    }
    rc = tern__ws_decode(&ws->dec, buf, len, &used, &ev);
    buf += used;
    len -= used;
    if (rc == TERN__WS_EV_NONE)
      break;
    if (rc < 0) {
      fail(ws, -rc);
      break;
    }
    switch (rc) {
    case TERN__WS_EV_BEGIN:
      ws->in_type =
          ev.opcode == TERN__WS_OP_TEXT ? TERN_WS_TEXT : TERN_WS_BINARY;
      ws->in_compressed = ev.compressed;
      ws->in_skip = ws->state != WS_OPEN;
      ws->msg.len = 0;
      if (ev.compressed)
        tern__ws_inflate_begin(ws->inf, ws->o.max_message_size,
                               ws->in_type == TERN_WS_TEXT);
      break;
    case TERN__WS_EV_DATA:
      o += ev.len;
      tern__ws_decoder_output(&ws->dec, o, (size_t)(end - o));
      rc = ws->in_compressed
               ? tern__ws_inflate(ws->inf, ev.data, ev.len, z_take, ws)
               : take_span(ws, ev.data, ev.len);
      break;
    case TERN__WS_EV_END:
      if (ws->in_compressed)
        rc = tern__ws_inflate_end(ws->inf, z_take, ws);
      else
        rc = 0;
      if (rc == 0)
        message_end(ws);
      break;
    case TERN__WS_EV_PING:
      rc = ws->state == WS_OPEN
               ? do_control(ws, TERN__WS_OP_PONG, ev.data, ev.len)
               : 0;
      break;
    case TERN__WS_EV_PONG:
      rc = 0;
      break;
    case TERN__WS_EV_CLOSE:
      peer_close(ws, ev.code, (const char *)ev.data, ev.len);
      goto done; /* the socket has ended */
    }
    if (rc == TERN_ENOMEM || rc == TERN__WS_E1011) {
      fail(ws, TERN__WS_CLOSE_INTERNAL);
      break;
    }
    if (rc < 0) {
      fail(ws, -rc);
      break;
    }
  }
done:
  /* A message still open keeps its bytes: the scratch buffer is reused
   * by the next delivery. */
  if (ws->state != WS_DONE && span_flush(ws) != 0)
    fail(ws, TERN__WS_CLOSE_INTERNAL);
  ws->span = NULL;
  /* The buffer may be this call's stack: no later call may write there. */
  tern__ws_decoder_output(&ws->dec, NULL, 0);
  if (own) {
    ww->scratch_busy = 0;
#ifdef TERN__ASAN
    /* As with the pools, nothing is kept for reuse under AddressSanitizer:
     * a read through a stale span then shows, and a per-connection leak
     * check (fuzz_conn) sees the worker as it was. */
    tern__free(w->srv, ww->scratch);
    ww->scratch = NULL;
#endif
  }
}

static void on_body(tern_request *r, int event, const char *data, size_t len,
                    void *user) {
  tern_ws *ws = user;
  (void)r;
  if (ws->state == WS_DONE)
    return;
  tern_ws_ref(ws);
  if (event == TERN_BODY_DATA)
    feed(ws, (const unsigned char *)data, len);
  else
    finish(ws, 1006, NULL, 0); /* the client went away */
  tern_ws_unref(ws);
}

/* ---- The handshake (its checks are in ws/handshake.c) ------------------ */
static void *z_malloc(size_t n, void *user) {
  return tern__malloc(user, n);
}
static void z_free(void *p, void *user) {
  tern__free(user, p);
}

/* Negotiate permessage-deflate from the offers; on acceptance set up the
 * deflater and inflater and fill `resp`. Returns 1 (accepted), 0 (not
 * used) or TERN_ENOMEM. */
static int setup_deflate(tern_ws *ws, const tern_request *r, char *resp,
                         size_t *resp_len) {
  tern__ws_deflate_policy pol;
  tern__ws_deflate_params prm;
  tern__ws_alloc a;
  int ok;

  if (!ws->o.deflate)
    return 0;
  tern__ws_deflate_policy_init(&pol);
  pol.server_max_window_bits = ws->o.deflate_window_bits;
  pol.mem_level = ws->o.deflate_mem_level;
  pol.level = ws->o.deflate_level;
  ok = tern__ws_deflate_offers(r, &pol, &prm, resp, resp_len);
  if (!ok)
    return 0;
  a.malloc = z_malloc;
  a.free = z_free;
  a.user = srv_of(ws);
  /* Zeroed first: ws_free may free one that was never set up. */
  ws->def = tern__malloc(srv_of(ws), sizeof(*ws->def));
  if (ws->def != NULL)
    memset(ws->def, 0, sizeof(*ws->def));
  ws->inf = tern__malloc(srv_of(ws), sizeof(*ws->inf));
  if (ws->inf != NULL)
    memset(ws->inf, 0, sizeof(*ws->inf));
  if (ws->def == NULL || ws->inf == NULL ||
      tern__ws_deflater_init(ws->def, &prm, &a) != 0 ||
      tern__ws_inflater_init(ws->inf, &prm, &a) != 0)
    return TERN_ENOMEM; /* ws_free releases what was set up */
  return 1;
}

int tern_ws_accept(tern_request *r, const tern_ws_options *opts, void *user,
                   tern_ws **out) {
  tern_ws_options o;
  tern__worker *w;
  tern_ws *ws;
  tern_header h[4];
  char accept[32], ext[TERN__WS_DEFLATE_RESPONSE_MAX];
  size_t accept_len = 0, ext_len = 0, nh = 0;
  int status, rc;

  if (r == NULL)
    return TERN_EINVAL;
  /* From here on only the library's own copy is read: the caller's struct
   * may be an older, shorter layout. */
  if (!tern__ws_read_options(r->w->srv, opts, &o))
    return TERN_EINVAL;
  opts = &o;
  w = r->w;
  if (!tern__on_worker(w) || (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)))
    return TERN_ESTATE;
  status = tern__ws_validate(r, accept, &accept_len);
  if (status == 0 && r->ops->tunnel == NULL)
    status = 400;
  if (status == 426) {
    static const tern_header v13 = {"Sec-WebSocket-Version", 21, "13", 2};
    static const char body[] = "426 Upgrade Required\n";
    rc = tern_respond(r, 426, &v13, 1, body, sizeof(body) - 1);
    return rc == TERN_ECLOSED ? rc : TERN_EHANDSHAKE;
  }
  if (status != 0) {
    tern__respond_status(r, status, NULL, 0);
    return TERN_EHANDSHAKE;
  }

  ws = tern__malloc(w->srv, sizeof(*ws));
  if (ws == NULL) {
    tern__respond_status(r, 503, NULL, 0);
    return TERN_ENOMEM;
  }
  memset(ws, 0, sizeof(*ws));
  atomic_init(&ws->refs, 1);
  atomic_init(&ws->closed, 0);
  atomic_init(&ws->hint, 0);
  atomic_init(&ws->posted, 0);
  ws->w = w;
  ws->o = *opts;
  ws->user = user;
  ws->protocol = r->protocol;
  tern__list_init(&ws->link);
  if (opts->subprotocol_len > 0) {
    memcpy(ws->subprotocol, opts->subprotocol, opts->subprotocol_len);
    ws->o.subprotocol = ws->subprotocol;
  }
  rc = setup_deflate(ws, r, ext, &ext_len);
  if (rc < 0) {
    ws_free(ws);
    tern__respond_status(r, 503, NULL, 0);
    return TERN_ENOMEM;
  }
  tern__ws_decoder_init(&ws->dec, opts->max_message_size, rc == 1);

  if (tern__request_upgrade(r) != TERN__UPGRADE_CONNECT) {
    h[nh].name = "Upgrade";
    h[nh].name_len = 7;
    h[nh].value = "websocket";
    h[nh++].value_len = 9;
    h[nh].name = "Sec-WebSocket-Accept";
    h[nh].name_len = 20;
    h[nh].value = accept;
    h[nh++].value_len = accept_len;
  }
  if (opts->subprotocol_len > 0) {
    h[nh].name = "Sec-WebSocket-Protocol";
    h[nh].name_len = 22;
    h[nh].value = ws->subprotocol;
    h[nh++].value_len = opts->subprotocol_len;
  }
  if (ext_len > 0) {
    h[nh].name = "Sec-WebSocket-Extensions";
    h[nh].name_len = 24;
    h[nh].value = ext;
    h[nh++].value_len = ext_len;
  }
  tern__request_started(r, r->protocol == TERN_PROTO_HTTP11 ? 101 : 200);
  {
    /* The response hook's fields go on the handshake's answer too. */
    struct tern_response_head head;
    const tern_header *all = h;
    size_t nall = nh;
    rc = tern__response_hook(r, r->status, &all, &nall, &head);
    if (rc == 0)
      rc = r->ops->tunnel(r, all, nall);
    tern__response_hook_done(r, &head);
  }
  if (rc != 0) {
    r->status = 0;
    ws_free(ws);
    if (rc == TERN_EHANDSHAKE) {
      /* The carrier cannot turn into a tunnel now (a Connection: close
       * in the handshake, a stopping server): the handshake is refused
       * like an invalid one, answered, and the request finished. */
      tern__respond_status(r, w->stopping ? 503 : 400, NULL, 0);
      return rc;
    }
    if (rc == TERN_ESTATE)
      return rc;
    return tern__request_fail(r, rc);
  }
  ws->r = r;
  /* The socket owns the request from here on and ends it itself (with
   * tern_response_end, on the worker): it is no longer the user's. */
  atomic_fetch_or(&r->ustate, TERN__U_STARTED | TERN__U_DONE);
  tern__request_unhold(r);
  TERN__STAT_ADD(w->stats.ws_open, 1);
  tern__list_append(&WSW(w)->open, &ws->link);
  tern__request_read(r, on_body, ws);
  if (out != NULL)
    *out = ws;
  if (opts->on_open != NULL)
    opts->on_open(ws, user);
  return 0;
}

/* ---- Calls from any thread ---------------------------------------------- */

/* A posted call: the inbox's header, the call, and (in the same
 * allocation) its copied bytes. It holds a reference on the socket, and
 * a P_SHARED one on the shared frame, until it is applied or dropped. */
typedef struct {
  tern__msg base;
  tern_ws *ws;
  int kind; /* P_* */
  int type; /* TERN_WS_TEXT or TERN_WS_BINARY */
  int64_t arg;
  shared_frame *f; /* P_SHARED */
  size_t len;
  size_t counted; /* its share of ws->posted */
  /* the bytes follow */
} ws_msg;

static void msg_apply(tern__msg *base);
static void msg_drop(tern__msg *base, int refused);
static const tern__msg_ops ws_msg_ops = {.apply = msg_apply, .drop = msg_drop};

static int post(tern_ws *ws, int kind, int type, int64_t arg, const void *p,
                size_t n, shared_frame *f) {
  ws_msg *m;
  if (atomic_load(&ws->closed))
    return TERN_ECLOSED;
  m = tern__malloc(ws->w->srv, sizeof(*m) + n);
  if (m == NULL)
    return TERN_ENOMEM;
  memset(m, 0, sizeof(*m));
  m->base.ops = &ws_msg_ops;
  m->ws = ws;
  m->kind = kind;
  m->type = type;
  m->arg = arg;
  if (n > 0)
    memcpy(m + 1, p, n);
  m->len = n;
  m->f = f;
  if (f != NULL)
    atomic_fetch_add(&f->refs, 1);
  if (kind == P_SEND || kind == P_FRAGMENT || kind == P_SHARED) {
    m->counted = f != NULL ? f->len : n;
    atomic_fetch_add_explicit(&ws->posted, m->counted, memory_order_relaxed);
  }
  tern_ws_ref(ws);
  /* A worker whose loop is ending refuses the call and drops it: the
   * socket is as good as closed. */
  return tern__worker_post(ws->w, &m->base);
}

/* What the message holds goes; nothing else is to be told (a posted
 * WebSocket call has no callback), whether the post was refused or the
 * worker shut down with the message still queued. */
static void msg_drop(tern__msg *base, int refused) {
  ws_msg *m = (ws_msg *)(void *)base;
  tern_ws *ws = m->ws;
  (void)refused;
  /* Applied (queued, and counted in `hint`) or dropped. */
  atomic_fetch_sub_explicit(&ws->posted, m->counted, memory_order_relaxed);
  if (m->f != NULL)
    release_shared(m->f->data, m->f);
  tern__free(srv_of(ws), m);
  tern_ws_unref(ws);
}

static int set_user_pause(tern_ws *ws, int on);

static void msg_apply(tern__msg *base) {
  ws_msg *m = (ws_msg *)(void *)base;
  tern_ws *ws = m->ws;
  const void *p = m + 1;

  switch (m->kind) {
  case P_SEND:
    do_send(ws, m->type, p, m->len, 0, 1);
    break;
  case P_FRAGMENT:
    do_send(ws, m->type, p, m->len, 1, (int)m->arg);
    break;
  case P_PING:
    if (is_open(ws))
      do_control(ws, TERN__WS_OP_PING, p, m->len);
    break;
  case P_CLOSE:
    do_close(ws, (int)m->arg, p, m->len);
    break;
  case P_PAUSE:
    set_user_pause(ws, (int)m->arg);
    break;
  case P_SHARED:
    do_shared(ws, m->f);
    break;
  }
  msg_drop(base, 0);
}

/* The public calls on the owning worker count themselves in calls
 * while they run: an end of a socket (this one or another of the
 * worker's) meanwhile defers its on_close (see finish). */
#define IN_CALL(ws, expr, rc)                                                  \
  do {                                                                         \
    tern__worker *w_ = (ws)->w;                                                \
    WSW(w_)->calls++;                                                          \
    (rc) = (expr);                                                             \
    WSW(w_)->calls--;                                                          \
  } while (0)

static int check_type(int type) {
  return type == TERN_WS_TEXT || type == TERN_WS_BINARY;
}

/* What is queued, seen from another thread: the worker's last word on
 * its queue and what other threads have posted since. */
static size_t buffered_hint(const tern_ws *ws) {
  return atomic_load_explicit(&ws->hint, memory_order_relaxed) +
         atomic_load_explicit(&ws->posted, memory_order_relaxed);
}

/* Over the mark, seen from another thread. Threads that check at once
 * may each still post one message past it. */
static int full_hint(const tern_ws *ws) {
  return ws->o.on_full == TERN_WS_FAIL_SEND &&
         buffered_hint(ws) > ws->o.high_water;
}

int tern_ws_send(tern_ws *ws, int type, const void *data, size_t len) {
  int rc;
  if (ws == NULL || !check_type(type) || (len > 0 && data == NULL))
    return TERN_EINVAL;
  if (tern__on_worker(ws->w)) {
    IN_CALL(ws, do_send(ws, type, data, len, 0, 1), rc);
    return rc;
  }
  if (type == TERN_WS_TEXT) {
    unsigned st = TERN__WS_UTF8_OK;
    if (!text_valid(&st, data, len, 1))
      return TERN_EINVAL;
  }
  if (full_hint(ws))
    return TERN_ETOOBIG;
  return post(ws, P_SEND, type, 0, data, len, NULL);
}

int tern_ws_send_fragment(tern_ws *ws, int type, const void *data, size_t len,
                          int fin) {
  int rc;
  if (ws == NULL || !check_type(type) || (len > 0 && data == NULL))
    return TERN_EINVAL;
  if (tern__on_worker(ws->w)) {
    IN_CALL(ws, do_send(ws, type, data, len, 1, fin != 0), rc);
    return rc;
  }
  if (full_hint(ws))
    return TERN_ETOOBIG;
  return post(ws, P_FRAGMENT, type, fin != 0, data, len, NULL);
}

int tern_ws_ping(tern_ws *ws, const void *data, size_t len) {
  int rc;
  if (ws == NULL || len > TERN__WS_MAX_CONTROL || (len > 0 && data == NULL))
    return TERN_EINVAL;
  if (tern__on_worker(ws->w)) {
    if (!is_open(ws))
      return TERN_ECLOSED;
    IN_CALL(ws, do_control(ws, TERN__WS_OP_PING, data, len), rc);
    return rc;
  }
  return post(ws, P_PING, 0, 0, data, len, NULL);
}

int tern_ws_close(tern_ws *ws, int code, const char *reason, size_t len) {
  unsigned st = TERN__WS_UTF8_OK;
  int rc;
  if (ws == NULL || (code != 0 && !tern__ws_close_code_valid(code)) ||
      (code == 0 && len > 0) || (len > 0 && reason == NULL) ||
      !text_valid(&st, reason, len, 1))
    return TERN_EINVAL;
  if (tern__on_worker(ws->w)) {
    IN_CALL(ws, do_close(ws, code, reason, len), rc);
    return rc;
  }
  return post(ws, P_CLOSE, 0, code, reason, len, NULL);
}

int tern_ws_broadcast(tern_ws *const *list, size_t n, int type,
                      const void *data, size_t len) {
  unsigned char hdr[TERN__WS_MAX_HEADER];
  shared_frame *f;
  tern_server *srv;
  size_t i, hl;
  int sent = 0;

  if ((n > 0 && list == NULL) || !check_type(type) || (len > 0 && data == NULL))
    return TERN_EINVAL;
  if (type == TERN_WS_TEXT) {
    unsigned st = TERN__WS_UTF8_OK;
    if (!text_valid(&st, data, len, 1))
      return TERN_EINVAL;
  }
  /* NULL entries are skipped, the first one included. */
  for (i = 0; i < n && list[i] == NULL; i++)
    ;
  if (i == n)
    return 0;
  srv = srv_of(list[i]);
  hl = tern__ws_frame_header(hdr, type, 1, 0, len);
  f = tern__malloc(srv, sizeof(*f) + hl + len);
  if (f == NULL)
    return TERN_ENOMEM;
  atomic_init(&f->refs, 1);
  f->srv = srv;
  f->len = hl + len;
  memcpy(f->data, hdr, hl);
  if (len > 0)
    memcpy(f->data + hl, data, len);
  for (i = 0; i < n; i++) {
    tern_ws *ws = list[i];
    if (ws == NULL)
      continue;
    if (tern__on_worker(ws->w)) {
      int rc;
      IN_CALL(ws, do_shared(ws, f), rc);
      if (rc == 0)
        sent++;
    } else if (!full_hint(ws) && post(ws, P_SHARED, type, 0, NULL, 0, f) == 0) {
      sent++;
    }
  }
  release_shared(f->data, f);
  return sent;
}

/* ---- Accessors ---------------------------------------------------------- */

size_t tern_ws_buffered(const tern_ws *ws) {
  if (ws == NULL)
    return 0;
  if (tern__on_worker(ws->w))
    return pending(ws) +
           atomic_load_explicit(&ws->posted, memory_order_relaxed);
  return buffered_hint(ws);
}

static int post(tern_ws *ws, int kind, int type, int64_t arg, const void *p,
                size_t n, shared_frame *f);

/* The user's pause bit; from another thread, posted. */
static int set_user_pause(tern_ws *ws, int on) {
  if (ws == NULL)
    return TERN_EINVAL;
  if (!tern__on_worker(ws->w))
    return post(ws, P_PAUSE, 0, on, NULL, 0, NULL);
  if (ws->state == WS_DONE)
    return TERN_ECLOSED;
  if (on)
    ws->pause |= PAUSE_USER;
  else
    ws->pause &= ~(unsigned)PAUSE_USER;
  WSW(ws->w)->calls++; /* as IN_CALL: the carrier may end the socket */
  apply_pause(ws);
  WSW(ws->w)->calls--;
  return 0;
}

int tern_ws_pause(tern_ws *ws) {
  return set_user_pause(ws, 1);
}

int tern_ws_resume(tern_ws *ws) {
  return set_user_pause(ws, 0);
}

int tern_ws_protocol(const tern_ws *ws) {
  return ws != NULL ? ws->protocol : TERN_EINVAL;
}

int tern_ws_worker(const tern_ws *ws) {
  if (ws == NULL)
    return TERN_EINVAL;
  return (int)ws->w->id;
}

void *tern_ws_loop(const tern_ws *ws) {
  if (ws == NULL)
    return NULL;
  if (!tern__on_worker(ws->w) || ws->w->loop == NULL) {
    tern__log(ws->w->srv, TERN_LOG_ERROR,
              "tern_ws_loop refused: not on the owning worker");
    return NULL;
  }
  return ws->w->loop;
}

void tern_ws_set_data(tern_ws *ws, void *data) {
  if (ws != NULL)
    ws->data = data;
}

void *tern_ws_data(const tern_ws *ws) {
  return ws != NULL ? ws->data : NULL;
}

/* ---- The worker service ------------------------------------------------ */

static int ws_worker_init(tern__worker *w) {
  ws_worker *ww = tern__malloc(w->srv, sizeof(*ww));
  if (ww == NULL)
    return TERN_ENOMEM;
  memset(ww, 0, sizeof(*ww));
  tern__list_init(&ww->open);
  tern__list_init(&ww->closing);
  tern__list_init(&ww->ended);
  w->svc[TERN__SVC_WS] = ww;
  return 0;
}

/* A graceful stop: 1001 to every open socket. */
static void ws_stop(tern__worker *w) {
  stop_all(w);
}

/* Close handshakes that timed out. */
static void ws_tick(tern__worker *w, uint64_t now) {
  sweep(w, now);
}

/* A socket that ended inside a tern_ws_* call hears of it now, outside
 * every call; what its on_close sends is written in the same phase. */
static void ws_check(tern__worker *w) {
  run_closes(w);
}

static void ws_cleanup(tern__worker *w) {
  ws_worker *ww = WSW(w);
  if (ww == NULL)
    return;
  run_closes(w); /* (none left once the loop ran a check phase) */
  tern__free(w->srv, ww->scratch);
  tern__free(w->srv, ww);
  w->svc[TERN__SVC_WS] = NULL;
}

const tern__service tern__ws_service = {
    .name = "websocket",
    .slot = TERN__SVC_WS,
    .worker_init = ws_worker_init,
    .stop = ws_stop,
    .tick = ws_tick,
    .check = ws_check,
    .cleanup = ws_cleanup,
};
