/* The HTTP/3 adapter: one nghttp3 server connection per QUIC connection,
 * driven through lib/quic's glue (quic/quic.h) and nothing else: this
 * file sees no ngtcp2, no socket and no libuv handle. lib/quic hands us
 * stream bytes as packets are read (tern__quic_app.recv), asks us for the
 * next bytes to send in its write loop (next / written), and reports
 * acknowledgements, resets and closes; we answer with credit, stream
 * shutdowns and a close. nghttp3's memory comes from the worker's small
 * block pools (an nghttp3_mem over tern__small_malloc), as nghttp2's does.
 *
 * Streams and requests. A HEADERS frame on a client bidi stream creates a
 * tern_request and its stream state (h3_stream, in r->proto_data and
 * nghttp3's stream user data), exactly as an HTTP/2 HEADERS frame does,
 * and from there the request runs through the same core helpers
 * (tern__request_fields, _route, _collect, _dispatch, tern__respond_status)
 * so that a handler cannot tell the carriers apart but by
 * tern_request_protocol(). Header names and values are views into
 * nghttp3's refcounted buffers (rcbufs), kept alive until the request is
 * released; only joined cookie crumbs are copied. The stream's own
 * structure keeps the connection's state (h3_conn) alive by a reference,
 * since those rcbufs free themselves through the nghttp3_mem that lives
 * there, possibly after the QUIC connection is gone.
 *
 * References. As on HTTP/2: the user's reference (dropped by the
 * finishing response call), one the adapter holds while the stream is
 * open, and one per marker (a write's `done`) until it has run. When
 * nghttp3 closes the stream (both directions done, everything we sent
 * acknowledged) the response counts if it was complete; otherwise the
 * request is gone: a reading handler gets TERN_BODY_ERROR and pending
 * `done` callbacks run with TERN_ECLOSED.
 *
 * Output. A response's body waits in the request's own queue (r->out).
 * nghttp3's data reader (read_body) gets vectors that point INTO that
 * queue, starting past the bytes it was handed before (s->handed): bytes
 * are never copied, and they stay in the queue until the peer has
 * acknowledged them (acked_stream_data), when tern__outq_consume finishes
 * them, so on QUIC a write's `done` means "acknowledged by the peer".
 * With nothing to hand out, the reader says WOULDBLOCK and the stream is
 * resumed (nghttp3_conn_resume_stream, then quic's write loop) when bytes
 * arrive. nghttp3 0.8 asks for data only while a stream has less than 4
 * KiB unsent and keeps at most 1024 unacknowledged pieces per stream, so
 * the reader hands out whole segments, up to 8 at a time. Acknowledgements
 * arrive inside ngtcp2's packet callbacks: they are only recorded there
 * (s->acked) and the queue is consumed in the next pump (after the packet
 * batch, or the check phase), so that no `done` runs, and no response
 * call comes back into nghttp3, while nghttp3 walks its own queues.
 * Everything a response call changes in nghttp3's send state (resuming a
 * stream) also waits for the pump. What a stream holds is its response's
 * unacknowledged bytes, which the peer's flow-control window and
 * acknowledgements bound, plus whatever the handler writes ahead: `pending`
 * reports all of it, so streamed writes and WebSocket see backpressure as
 * on HTTP/2. A stream we end early (a reset either way, an abort) keeps
 * the bytes it handed out, in limbo, until QUIC closes the stream: ngtcp2
 * 0.12 may still resend lost pieces of them after our RESET_STREAM.
 *
 * Flow control. The QUIC windows are the only ones. The non-DATA bytes
 * nghttp3 reports consumed (frame headers, HEADERS, unknown frames, the
 * control and QPACK streams) are credited at once; body bytes are
 * credited only when they have left tern's hands: at once for a collected
 * body, after the body callback returns for a streamed one, and not while
 * the handler has paused (the bytes it cannot take wait in the stream, at
 * most its window). The windows grow by ngtcp2's own auto-tuning, up to
 * the maxima lib/quic sets (as HTTP/2's: 8 MiB a stream, 16 MiB the
 * connection), and only while credit comes back within a couple of round
 * trips: a fast handler gets a wide window, a slow or paused one keeps a
 * small one, the same policy as tern__window on HTTP/2.
 *
 * The core's view. h->m.nq (h3_busy) counts the streams the server is
 * working on: routed to a handler (or answered by tern) and not yet ended
 * by the response calls. The connection's timer is idle while no request
 * stream is open, else none: each stream times itself.
 *
 * Stream timers. Each stream embeds a tern__timer: HEAD from its HEADERS
 * frame's start until the head is complete (never re-armed by its bytes),
 * then BODY while tern waits for body bytes (collecting them, a streaming
 * handler reading and not paused, or the short rest of a body read after
 * an early answer), re-armed by each DATA payload. A head that times out
 * resets the stream (H3_REQUEST_REJECTED: nothing was processed); a body
 * that times out answers 408 or, once a response started, resets the
 * stream (H3_REQUEST_CANCELLED). Then WRITE (body_timeout_ms, as the
 * byte-stream transports' write timer) while response bytes wait for the
 * client, re-armed by each acknowledgement: a client that withholds its
 * flow-control credit cannot hold a response forever; the stream is
 * reset (H3_REQUEST_CANCELLED).
 *
 * Defences. QUIC bounds the streams a client may open (we grant one more
 * as each closes) and nghttp3 checks the framing and the fields' form.
 * nghttp3 0.8 only advertises SETTINGS_MAX_FIELD_SECTION_SIZE: the adapter
 * counts each field (name + value + 32, RFC 9114 4.2.2) against
 * max_head_size and the fields against max_header_count and answers 431,
 * as on HTTP/2. The QPACK tables are kept at 4 KiB. Client stream resets
 * draw on a token bucket like HTTP/2's (CVE-2023-44487); when it is empty
 * the connection closes with H3_EXCESSIVE_LOAD. A head that came in 0-RTT
 * is marked replayable and answered 425 unless its method is safe. After
 * a complete response to a request still uploading, a short rest of a body
 * with a length is read and dropped; otherwise STOP_SENDING (H3_NO_ERROR)
 * tells the client to stop (RFC 9114 4.1.1).
 *
 * Graceful stop: GOAWAY with the notice id, then after a probe timeout
 * the real GOAWAY (nghttp3_conn_shutdown, once: a second one aborts the
 * process), then CONNECTION_CLOSE with H3_NO_ERROR once no request stream
 * is left. Neither GOAWAY may be queued before the control stream is
 * bound (app->start), and a stop before then closes at once.
 */
#include <nghttp3/nghttp3.h>
#include <string.h>

#include "core/mux.h"
#include "core/worker.h"
#include "http3/check.h"
#include "quic/quic.h"

extern const tern__proto tern__http3;
extern const tern__quic_app tern__http3_app;

#define H3_QPACK_TABLE 4096
/* No field section may wait on the encoder stream: nghttp3 then decodes
 * each one in the call that brings its end, where the field check
 * (http3/check.h) has its count. */
#define H3_QPACK_BLOCKED 0
#define H3_DELIVER_MAX (64 * 1024) /* one body callback's largest piece */
/* After an early answer, a body with a length at most this much short of
 * it is read to its end (its length checked) rather than stopped. */
#define H3_DRAIN_MAX (64 * 1024)
#define H3_VECS 8 /* nghttp3 0.8 asks for at most 8 vectors at a time */

/* quic.h's tern__qvec passes for nghttp3_vec unchanged. */
_Static_assert(sizeof(tern__qvec) == sizeof(nghttp3_vec) &&
                   offsetof(tern__qvec, base) == offsetof(nghttp3_vec, base) &&
                   offsetof(tern__qvec, len) == offsetof(nghttp3_vec, len),
               "tern__qvec must be laid out as nghttp3_vec");

typedef struct h3_conn h3_conn;
typedef struct h3_stream h3_stream;

/* Stream flags: the shared ones (core/mux.h), under short names, then
 * HTTP/3's own. */
enum {
  S_OPEN = TERN__MS_OPEN,
  S_COUNTED = TERN__MS_COUNTED,
  S_HEAD_DONE = TERN__MS_HEAD_DONE,
  S_REMOTE_DONE = TERN__MS_REMOTE_DONE, /* the client's FIN arrived */
  S_PROVIDER = TERN__MS_PROVIDER,       /* the response has a body reader */
  S_DEFERRED = TERN__MS_DEFERRED,       /* its reader said WOULDBLOCK */
  S_RESP_END = TERN__MS_RESP_END,
  S_END_SENT = TERN__MS_END_SENT, /* nghttp3 has the end of our response */
  S_SETTLE = TERN__MS_SETTLE,
  S_FLOW = TERN__MS_FLOW,
  S_WEBSOCKET = TERN__MS_WEBSOCKET, /* :protocol websocket (RFC 9220) */
  S_DRAIN = TERN__MS_DRAIN,
  S_TIMEDOUT = TERN__MS_TIMEDOUT,
  S_EARLY = TERN__MS_OWN << 0,     /* head bytes came in 0-RTT */
  S_TRAILERS = TERN__MS_OWN << 1,  /* response trailers are submitted */
  S_STOP_READ = TERN__MS_OWN << 2, /* STOP_SENDING (H3_NO_ERROR) is due */
  S_LIMBO = TERN__MS_OWN << 3,     /* closed for us; bytes wait for QUIC */
  S_PEER_STOP = TERN__MS_OWN << 4, /* the client's STOP_SENDING: abandon */
  S_TUNNEL = TERN__MS_OWN << 5,    /* answered 200 to an extended CONNECT */
};

struct h3_stream {
  tern__mux_stream m; /* first: the shared part (core/mux.h) */
  tern__timer timer;  /* HEAD, BODY or WRITE (stream_timer) */
  h3_stream *settle_next;
  h3_conn *h; /* referenced until the stream is freed */
  int64_t id;
  size_t head_size; /* RFC 9114 4.2.2 size of the field section */
  uint64_t nfields; /* fields nghttp3 handed over, of the head or trailers */
  nghttp3_rcbuf **rc;
  size_t nrc, rc_cap;
  size_t handed;  /* bytes of r->out handed to nghttp3, not yet acked */
  uint64_t acked; /* acknowledged bytes not yet consumed from r->out */
};

/* Request streams refused before nghttp3 saw them (refuse_oversized), by
 * id: their later bytes are dropped here, not fed to nghttp3. */
#define H3_REFUSED 32

struct h3_conn {
  tern__mux_conn m; /* first: the shared part (core/mux.h) */
  tern__quic *q;
  nghttp3_conn *ng;
  int64_t refused[H3_REFUSED]; /* -1: empty */
  int64_t max_first;           /* the highest request stream seen */
  nghttp3_mem mem;     /* nghttp3 keeps a pointer to it, as its rcbufs do */
  int refs;            /* quic's (until app->free) + one per h3_stream */
  tern__list limbo;    /* streams ended early, bytes still with QUIC */
  h3_stream *settle;   /* streams with work for the next pump */
  h3_stream *settling; /* those the pump running now takes, in turn */
  size_t nopen;        /* streams on `streams` */
  size_t tunnels;      /* open S_TUNNEL streams: QUIC keep-alive is on */
  uint32_t waiting;    /* streams whose stream timer is armed */
  unsigned stopping : 1;
  unsigned noticed : 1;    /* the GOAWAY notice is queued */
  unsigned final : 1;      /* nghttp3_conn_shutdown was called (once!) */
  unsigned goaway_out : 1; /* the final GOAWAY went into packets */
  unsigned closed : 1;     /* tern__quic_close was called */
  unsigned rx_early : 1;   /* the bytes being read came in 0-RTT */
  unsigned pumping : 1;
  uint64_t stop_at;          /* loop time for the final GOAWAY */
  int64_t ctrl;              /* our control stream */
  tern__reset_budget resets; /* client stream resets (core/mux.h) */
  tern__h3_check check;      /* field lines per section (http3/check.h) */
  int64_t poisoned; /* a malformed request being read now: not routed */
};

/* ---- Small helpers --------------------------------------------------- */

static int is_gone(const tern_request *r) {
  return atomic_load_explicit(&r->gone, memory_order_acquire);
}

static int is_bidi(int64_t id) {
  return (id & 0x2) == 0;
}

static void conn_unref(h3_conn *h) {
  if (--h->refs > 0)
    return;
  tern__free(h->m.w->srv, h);
}

/* Something for the next pump: it runs after the packet batch (input) or
 * in the check phase (output), before quic's write loop. */
static void schedule(h3_conn *h) {
  if (!h->m.dead)
    tern__conn_want_output(tern__quic_head(h->q));
}

static void settle_add(h3_conn *h, h3_stream *s) {
  if (!(s->m.flags & S_SETTLE)) {
    s->m.flags |= S_SETTLE;
    s->settle_next = h->settle;
    h->settle = s;
  }
  schedule(h);
}

static int unlink_from(h3_stream **p, h3_stream *s) {
  for (; *p != NULL; p = &(*p)->settle_next) {
    if (*p == s) {
      *p = s->settle_next;
      return 1;
    }
  }
  return 0;
}

/* Off both lists: a stream the running pump has yet to take may end (and
 * be freed) while it settles another. */
static void settle_remove(h3_conn *h, h3_stream *s) {
  if (!(s->m.flags & S_SETTLE))
    return;
  if (!unlink_from(&h->settle, s))
    (void)unlink_from(&h->settling, s);
  s->m.flags &= ~(unsigned)S_SETTLE;
}

/* An nghttp3 call failed fatally: the connection closes with the error
 * nghttp3 maps it to. Returns the negative value the glue passes on. */
static int fail(h3_conn *h, int rv) {
  tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http3: %s", nghttp3_strerror(rv));
  tern__quic_set_app_error(h->q, nghttp3_err_infer_quic_app_error_code(rv));
  return rv < 0 ? rv : NGHTTP3_ERR_CALLBACK_FAILURE;
}

/* ---- Flow control ---------------------------------------------------- */

/* `n` bytes of the stream's body left tern's hands: credit them. ngtcp2
 * grows the windows itself (lib/quic sets its auto-tuning maxima), and only
 * while credit comes back quickly, that is while the handler keeps up. */
static void consume(h3_conn *h, h3_stream *s, size_t n) {
  if (n == 0 || h->m.dead)
    return;
  (void)tern__quic_credit(h->q, (s->m.flags & S_OPEN) ? s->id : -1, n);
}

/* ---- Counting and timers --------------------------------------------- */

/* Arm or disarm the stream's timer as its state asks, keeping a running
 * one's deadline; h->waiting counts the armed ones. */
static void stream_timer(h3_conn *h, h3_stream *s) {
  int kind = TERN__T_NONE;
  if ((s->m.flags & (S_OPEN | S_HEAD_DONE)) == S_OPEN)
    kind = TERN__T_HEAD;
  else if (tern__mux_wants_body(&s->h->m, &s->m))
    kind = TERN__T_BODY;
  else if ((s->m.flags & S_OPEN) && s->m.r->out.bytes > 0 &&
           !(s->m.r->flags & TERN__RQ_TUNNEL))
    kind = TERN__T_WRITE; /* the client must take (and acknowledge) them */
  if (kind == s->timer.kind)
    return;
  if (s->timer.kind == TERN__T_NONE)
    h->waiting++;
  else if (kind == TERN__T_NONE)
    h->waiting--;
  tern__timer_set(h->m.w, &s->timer, kind);
}

static void stream_timer_stop(h3_conn *h, h3_stream *s) {
  if (s->timer.kind != TERN__T_NONE)
    h->waiting--;
  tern__timer_stop(&s->timer);
}

/* ---- The shared stream code's table (core/mux.h) ---------------------- */

static void mux_consume(tern__mux_conn *m, tern__mux_stream *s, size_t n) {
  consume((h3_conn *)m, (h3_stream *)s, n);
}

static void mux_timer(tern__mux_conn *m, tern__mux_stream *s) {
  stream_timer((h3_conn *)m, (h3_stream *)s);
}

static void mux_schedule(tern__mux_conn *m) {
  schedule((h3_conn *)m);
}

/* QUIC credits a stream's bytes to the stream while it is open, else to
 * the connection (consume does both): held bytes dropped go back so. */
static const tern__mux_ops h3_mux = {mux_consume, mux_consume, mux_timer,
                                     mux_schedule};

/* ---- Closing streams ------------------------------------------------- */

/* The bytes nghttp3 was handed for a stream we end early stay where
 * they are until QUIC has closed the stream: ngtcp2 0.12 keeps pointers
 * to them for retransmission, and it may resend lost pieces even after
 * our RESET_STREAM (its loss recovery does not look at the reset). The
 * request stays alive for them (s->m.link on h->limbo, a reference of its
 * own); nghttp3's stream_close, or the connection's end, lets go. */
static void limbo_end(h3_conn *h, h3_stream *s) {
  tern_request *r = s->m.r;
  s->m.flags &= ~(unsigned)S_LIMBO;
  tern__list_remove(&s->m.link);
  tern__outq_fail(h->m.w, &r->out, TERN_ECLOSED);
  tern__request_unref(r);
}

static void limbo_drop(h3_conn *h) {
  while (!tern__list_empty(&h->limbo))
    limbo_end(h, TERN__CONTAINER_OF(h->limbo.next, h3_stream, m.link));
}

/* The stream is over (nghttp3 closed it, we abandoned it, or the
 * connection is closing): finish what the peer acknowledged, fail the
 * rest, drop our reference. `keep`: QUIC still has the stream, so the
 * bytes handed out wait in limbo. Returns whether they do: if not, `s`
 * may be gone. */
static int stream_closed(h3_conn *h, h3_stream *s, int keep) {
  tern_request *r = s->m.r;
  tern__worker *w = h->m.w;
  uint64_t acked;
  size_t handed;
  int kept = 0;

  if (!(s->m.flags & S_OPEN))
    return 0;
  stream_timer_stop(h, s); /* before S_OPEN goes: it must never fire now */
  tern__mux_drop_held(&h->m, &s->m);
  if ((s->m.flags & S_TUNNEL) && --h->tunnels == 0 && !h->m.dead)
    tern__quic_keep_alive(h->q, 0);
  s->m.flags &= ~(unsigned)(S_OPEN | S_FLOW);
  tern__list_remove(&s->m.link);
  h->nopen--;
  tern__mux_uncount(&h->m, &s->m);
  settle_remove(h, s);
  if (h->stopping)
    schedule(h); /* perhaps the last one: time to close */
  r->refs++;     /* held across the callbacks below */
  acked = s->acked < s->handed ? s->acked : s->handed;
  handed = s->handed - (size_t)acked;
  s->acked = 0;
  s->handed = 0;
  /* The peer has these bytes: their writes are done. */
  tern__outq_consume(w, &r->out, (size_t)acked);
  tern__mux_closed(w, r, (s->m.flags & S_END_SENT) && r->out.bytes == 0);
  if (keep && !h->m.dead && handed > 0 && handed <= r->out.bytes) {
    /* Only what follows the handed-out bytes fails now. read_body hands
     * out whole segments, so the cut never falls inside a reference. */
    tern__seg *cut = NULL;
    size_t ncut = 0;
    if (tern__outq_cut(w, &r->out, handed, &cut, &ncut) == 0) {
      tern__outq_fail_cut(w, &r->out, cut, ncut, TERN_ECLOSED);
      s->m.flags |= S_LIMBO;
      r->refs++; /* limbo's */
      tern__list_append(&h->limbo, &s->m.link);
      kept = 1;
    }
  }
  if (!kept)
    tern__outq_fail(w, &r->out, TERN_ECLOSED);
  tern__mux_unref_closed(r);
  return kept;
}

/* Forget a stream that is still open, ending it both ways with `code`
 * (RESET_STREAM and STOP_SENDING). Safe inside nghttp3's receive
 * callbacks; never called from its data reader. nghttp3 keeps the
 * stream's user data only while bytes wait in limbo. */
static void abandon(h3_conn *h, h3_stream *s, uint64_t code) {
  int64_t id = s->id;
  if (!(s->m.flags & S_OPEN))
    return;
  if (!h->m.dead) {
    nghttp3_conn_shutdown_stream_write(h->ng, id);
    (void)nghttp3_conn_shutdown_stream_read(h->ng, id);
    (void)tern__quic_shut(h->q, id, code);
    tern__quic_want_write(h->q);
  }
  if (!stream_closed(h, s, 1) && !h->m.dead)
    nghttp3_conn_set_stream_user_data(h->ng, id, NULL);
}

static void drop_streams(h3_conn *h, uint64_t code) {
  while (!tern__list_empty(&h->m.streams)) {
    h3_stream *s = TERN__CONTAINER_OF(h->m.streams.next, h3_stream, m.link);
    abandon(h, s, code);
  }
  limbo_drop(h);
}

/* ---- Request bodies ---------------------------------------------------- */

/* The stream's timer fired (see "Stream timers" at the top). */
static void stream_timeout(tern__timer *t, int kind) {
  h3_stream *s = TERN__CONTAINER_OF(t, h3_stream, timer);
  h3_conn *h = s->h;
  tern_request *r = s->m.r;
  int sent;

  h->waiting--; /* the sweep disarmed it */
  r->refs++;
  if (kind == TERN__T_HEAD) {
    tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http3: stream %lld: head timed out",
              (long long)s->id);
    abandon(h, s, NGHTTP3_H3_REQUEST_REJECTED);
    goto out;
  }
  if (kind == TERN__T_WRITE) {
    /* No acknowledgement for a whole timeout: a client that holds back
     * its flow-control credit (or its ACKs) holds the response for
     * nothing. */
    tern__log(h->m.w->srv, TERN_LOG_DEBUG,
              "http3: stream %lld: response not taken", (long long)s->id);
    abandon(h, s, NGHTTP3_H3_REQUEST_CANCELLED);
    goto out;
  }
  tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http3: stream %lld: body timed out",
            (long long)s->id);
  if (tern__mux_body_timeout(&h->m, &s->m, &sent)) {
    if (sent) {
      /* The answer is out: only the client's upload is stopped. */
      s->m.flags |= S_STOP_READ;
      settle_add(h, s);
    } else {
      abandon(h, s, NGHTTP3_H3_REQUEST_CANCELLED);
    }
  }
out:
  tern__request_unref(r);
  schedule(h);
}

/* ---- Requests ---------------------------------------------------------- */

static int keep_rcbuf(h3_conn *h, h3_stream *s, nghttp3_rcbuf *b) {
  if (nghttp3_rcbuf_is_static(b))
    return 0;
  if (s->nrc == s->rc_cap) {
    size_t cap = s->rc_cap ? s->rc_cap * 2 : 16;
    nghttp3_rcbuf **nb =
        tern__small_realloc(h->m.w, s->rc, cap * sizeof(*s->rc));
    if (nb == NULL)
      return TERN_ENOMEM;
    s->rc = nb;
    s->rc_cap = cap;
  }
  nghttp3_rcbuf_incref(b);
  s->rc[s->nrc++] = b;
  return 0;
}

static int lit_eq(const uint8_t *p, size_t n, const char *lit) {
  return strlen(lit) == n && memcmp(p, lit, n) == 0;
}

/* Methods a replayed request cannot harm (RFC 8470 5.2: the server
 * answers 425 to the others when they came in early data). */
static int safe_method(const tern_request *r) {
  return (r->method_len == 3 && memcmp(r->method, "GET", 3) == 0) ||
         (r->method_len == 4 && memcmp(r->method, "HEAD", 4) == 0) ||
         (r->method_len == 7 && memcmp(r->method, "OPTIONS", 7) == 0);
}

/* HTTP/3's part of a complete head, then the shared part: nghttp3 checked
 * the head, so a missing method is never seen; a head that began in
 * 0-RTT is marked replayable and, unless its method is safe, answered
 * 425 (RFC 8470). */
static void head_done(h3_conn *h, h3_stream *s) {
  tern_request *r = s->m.r;
  if (r->method == NULL)
    r->method = "";
  if (s->m.flags & S_EARLY) {
    r->flags |= TERN__RQ_EARLY;
    if (s->m.status == 0 && !safe_method(r))
      s->m.status = 425; /* RFC 8470: it may be a replay */
  }
  tern__mux_head_done(&h->m, &s->m);
}

/* ---- nghttp3 callbacks ------------------------------------------------- */

static int on_begin_headers(nghttp3_conn *ng, int64_t id, void *cu, void *su) {
  h3_conn *h = cu;
  tern_request *r;
  h3_stream *s;

  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (su != NULL || !is_bidi(id) || id == h->poisoned)
    return 0;
  s = tern__small_malloc(h->m.w, sizeof(*s));
  r = s != NULL ? tern__request_new(tern__quic_head(h->q)) : NULL;
  if (r == NULL) {
    tern__small_free(h->m.w, s);
    /* No memory for a request: this stream alone is refused. */
    nghttp3_conn_shutdown_stream_write(ng, id);
    (void)nghttp3_conn_shutdown_stream_read(ng, id);
    (void)tern__quic_shut(h->q, id, NGHTTP3_H3_REQUEST_REJECTED);
    return 0;
  }
  memset(s, 0, sizeof(*s));
  s->h = h;
  h->refs++;
  s->m.r = r;
  s->id = id;
  s->m.flags = S_OPEN;
  tern__timer_init(&s->timer, stream_timeout);
  r->proto_data = s;
  r->protocol = TERN_PROTO_HTTP3;
  tern__list_append(&h->m.streams, &s->m.link);
  h->nopen++;
  if (h->rx_early)
    s->m.flags |= S_EARLY; /* the head began in 0-RTT */
  nghttp3_conn_set_stream_user_data(ng, id, s);
  stream_timer(h, s); /* HEAD until the head is complete */
  return 0;
}

static int on_header(nghttp3_conn *ng, int64_t id, int32_t token,
                     nghttp3_rcbuf *name, nghttp3_rcbuf *value, uint8_t flags,
                     void *cu, void *su) {
  h3_conn *h = cu;
  tern_server *srv = h->m.w->srv;
  h3_stream *s = su;
  tern_request *r;
  nghttp3_vec n, v;
  const char *p;

  (void)ng;
  (void)id;
  (void)flags;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s == NULL || !(s->m.flags & S_OPEN))
    return 0;
  r = s->m.r;
  s->nfields++;
  if (h->rx_early)
    s->m.flags |= S_EARLY;
  n = nghttp3_rcbuf_get_buf(name);
  v = nghttp3_rcbuf_get_buf(value);
  /* nghttp3 0.8 only announces SETTINGS_MAX_FIELD_SECTION_SIZE: the
   * limit is ours to keep. The rest of the section is still decoded
   * (QPACK state) but not kept. */
  s->head_size += n.len + v.len + 32;
  if (s->head_size > srv->s.max_head_size) {
    if (s->m.status == 0)
      s->m.status = 431;
    return 0;
  }
  if (s->m.status != 0)
    return 0;
  p = (const char *)v.base;
  switch (token) {
  case NGHTTP3_QPACK_TOKEN__METHOD:
    r->method = p;
    r->method_len = v.len;
    break;
  case NGHTTP3_QPACK_TOKEN__PATH:
    r->target = p;
    r->target_len = v.len;
    break;
  case NGHTTP3_QPACK_TOKEN__AUTHORITY:
    r->authority = p;
    r->authority_len = v.len;
    break;
  case NGHTTP3_QPACK_TOKEN__PROTOCOL:
    /* nghttp3 lets :protocol through only on a CONNECT, since our
     * SETTINGS enable it. WebSocket is the one protocol served. */
    if (lit_eq(v.base, v.len, "websocket"))
      s->m.flags |= S_WEBSOCKET;
    else
      s->m.status = 501;
    return 0;
  case NGHTTP3_QPACK_TOKEN__SCHEME:
    return 0; /* nghttp3 checked it */
  default:
    if (n.len > 0 && n.base[0] == ':')
      return 0; /* other pseudo-fields (nghttp3 refuses unknown ones) */
    if (r->nheaders >= r->headers_cap) {
      s->m.status = 431;
      return 0;
    }
    if (keep_rcbuf(h, s, name) != 0)
      return NGHTTP3_ERR_CALLBACK_FAILURE;
    r->headers[r->nheaders].name = (const char *)n.base;
    r->headers[r->nheaders].name_len = n.len;
    r->headers[r->nheaders].value = p;
    r->headers[r->nheaders].value_len = v.len;
    r->nheaders++;
    if (token == NGHTTP3_QPACK_TOKEN_COOKIE) {
      s->m.ncookie++;
    } else if (token == NGHTTP3_QPACK_TOKEN_CONTENT_LENGTH) {
      tern__mux_length(&s->m, v.base, v.len); /* nghttp3 checked it */
    }
    break;
  }
  return keep_rcbuf(h, s, value) == 0 ? 0 : NGHTTP3_ERR_CALLBACK_FAILURE;
}

static int on_end_headers(nghttp3_conn *ng, int64_t id, int fin, void *cu,
                          void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  tern_request *r;
  uint64_t lines;
  int known = tern__h3_check_take(&h->check, &lines);

  (void)ng;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s == NULL || !(s->m.flags & S_OPEN) || (s->m.flags & S_HEAD_DONE) ||
      id == h->poisoned)
    return 0;
  if (!known || lines != s->nfields) {
    /* nghttp3 dropped a field of the head without a word (an invalid
     * name or value, http3/check.h): the request is malformed, and is
     * reset once nghttp3 returns (q_recv). */
    h->poisoned = id;
    return 0;
  }
  s->nfields = 0; /* the trailers' count starts */
  if (h->rx_early)
    s->m.flags |= S_EARLY;
  /* The handler may run and finish (or fail) the request at once. */
  r = s->m.r;
  r->refs++;
  if (fin)
    s->m.flags |= S_REMOTE_DONE;
  head_done(h, s);
  if (!h->m.dead && (s->m.flags & S_OPEN))
    stream_timer(h, s);
  tern__request_unref(r);
  return h->m.dead ? NGHTTP3_ERR_CALLBACK_FAILURE : 0;
}

static int on_trailer(nghttp3_conn *ng, int64_t id, int32_t token,
                      nghttp3_rcbuf *name, nghttp3_rcbuf *value, uint8_t flags,
                      void *cu, void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  tern_request *r;
  nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);

  (void)ng;
  (void)token;
  (void)flags;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s == NULL || !(s->m.flags & S_OPEN) || id == h->poisoned)
    return 0;
  r = s->m.r;
  s->nfields++;
  /* The body is fine; trailers past the limits are not exposed. */
  s->head_size += n.len + v.len + 32;
  if (r->ntrailers >= h->m.w->srv->s.max_header_count ||
      s->head_size > 2 * (size_t)h->m.w->srv->s.max_head_size)
    return 0;
  if (keep_rcbuf(h, s, name) != 0 || keep_rcbuf(h, s, value) != 0 ||
      tern__mux_trailer(&h->m, &s->m, n.base, n.len, v.base, v.len) != 0)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  return 0;
}

/* The trailers are in: as for the head, none may have been dropped. */
static int on_end_trailers(nghttp3_conn *ng, int64_t id, int fin, void *cu,
                           void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  uint64_t lines;
  int known = tern__h3_check_take(&h->check, &lines);

  (void)ng;
  (void)fin;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s != NULL && (s->m.flags & S_OPEN) && id != h->poisoned &&
      (!known || lines != s->nfields))
    h->poisoned = id;
  return 0;
}

static int on_data(nghttp3_conn *ng, int64_t id, const uint8_t *data,
                   size_t len, void *cu, void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;

  (void)ng;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s == NULL || !(s->m.flags & S_OPEN)) {
    (void)tern__quic_credit(h->q, id, len);
    return 0;
  }
  if (tern__mux_data(&h->m, &s->m, &s->timer, data, len) != 0)
    abandon(h, s, NGHTTP3_H3_INTERNAL_ERROR);
  return h->m.dead ? NGHTTP3_ERR_CALLBACK_FAILURE : 0;
}

static int on_deferred_consume(nghttp3_conn *ng, int64_t id, size_t n, void *cu,
                               void *su) {
  h3_conn *h = cu;
  (void)ng;
  (void)su;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  return tern__quic_credit(h->q, id, n) == 0 ? 0 : NGHTTP3_ERR_CALLBACK_FAILURE;
}

static int on_end_stream(nghttp3_conn *ng, int64_t id, void *cu, void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  tern_request *r;

  (void)ng;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s == NULL || !(s->m.flags & S_OPEN) || id == h->poisoned)
    return 0; /* a malformed request does not end: it is reset */
  r = s->m.r;
  r->refs++;
  tern__mux_remote_done(&h->m, &s->m);
  if (!h->m.dead && (s->m.flags & S_OPEN))
    stream_timer(h, s);
  tern__request_unref(r);
  return h->m.dead ? NGHTTP3_ERR_CALLBACK_FAILURE : 0;
}

/* The peer acknowledged `n` more bytes of what read_body handed out. The
 * queue is consumed at the next pump, outside nghttp3. */
static int on_acked(nghttp3_conn *ng, int64_t id, uint64_t n, void *cu,
                    void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  (void)ng;
  (void)id;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s == NULL || !(s->m.flags & S_OPEN) || n == 0)
    return 0;
  s->acked += n;
  settle_add(h, s);
  return 0;
}

static int on_stream_close(nghttp3_conn *ng, int64_t id, uint64_t code,
                           void *cu, void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  (void)ng;
  (void)code;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s != NULL && (s->m.flags & S_LIMBO))
    limbo_end(h, s);
  else if (s != NULL)
    stream_closed(h, s, 0);
  if (is_bidi(id))
    tern__quic_more_streams(h->q, 1);
  return 0;
}

/* nghttp3 asks us to act on QUIC (a malformed request, a stream beyond
 * our GOAWAY): the stream is no longer ours either. */
static int on_stop_sending(nghttp3_conn *ng, int64_t id, uint64_t code,
                           void *cu, void *su) {
  h3_conn *h = cu;
  (void)ng;
  (void)su;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  return tern__quic_shut_read(h->q, id, code) == 0
             ? 0
             : NGHTTP3_ERR_CALLBACK_FAILURE;
}

static int on_reset_stream(nghttp3_conn *ng, int64_t id, uint64_t code,
                           void *cu, void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (tern__quic_shut_write(h->q, id, code) != 0)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  tern__quic_want_write(h->q);
  if (s != NULL && (s->m.flags & S_OPEN)) {
    if (!stream_closed(h, s, 1))
      nghttp3_conn_set_stream_user_data(ng, id, NULL);
  }
  return h->m.dead ? NGHTTP3_ERR_CALLBACK_FAILURE : 0;
}

/* The client sent GOAWAY: for a server its id is a push id, and tern
 * pushes nothing. */
static int on_shutdown(nghttp3_conn *ng, int64_t id, void *cu) {
  (void)ng;
  (void)id;
  (void)cu;
  return 0;
}

/* The response's end is with nghttp3 now. A request whose upload goes on
 * is read to its end when only a little of a declared length is left
 * (nghttp3 checks the length), else the client is asked to stop sending,
 * without error (RFC 9114 4.1.1). */
static void end_sent(h3_conn *h, h3_stream *s) {
  s->m.flags |= S_END_SENT;
  if (s->m.flags & S_REMOTE_DONE)
    return;
  if (!(s->m.flags & S_TIMEDOUT) && s->m.has_length &&
      s->m.received <= s->m.content_length &&
      s->m.content_length - s->m.received <= H3_DRAIN_MAX) {
    s->m.flags |= S_DRAIN;
    stream_timer(h, s);
  } else {
    s->m.flags |= S_STOP_READ;
    settle_add(h, s);
  }
}

/* nghttp3's data reader: vectors into the request's queue, past what was
 * handed out before; the bytes stay there until acknowledged. */
static nghttp3_ssize read_body(nghttp3_conn *ng, int64_t id, nghttp3_vec *vec,
                               size_t veccnt, uint32_t *pflags, void *cu,
                               void *su) {
  h3_conn *h = cu;
  h3_stream *s = su;
  tern_request *r;
  uv_buf_t iov[H3_VECS];
  size_t i, k, sum = 0;

  (void)ng;
  (void)id;
  if (h->m.dead)
    return NGHTTP3_ERR_CALLBACK_FAILURE;
  if (s == NULL || !(s->m.flags & S_OPEN))
    return NGHTTP3_ERR_WOULDBLOCK; /* abandoned: its write side is shut */
  r = s->m.r;
  if (r->out.bytes == s->handed && !(s->m.flags & S_RESP_END)) {
    s->m.flags |= S_DEFERRED;
    return NGHTTP3_ERR_WOULDBLOCK;
  }
  k = tern__outq_iov_from(&r->out, s->handed, iov,
                          veccnt < H3_VECS ? veccnt : H3_VECS);
  for (i = 0; i < k; i++) {
    vec[i].base = (uint8_t *)iov[i].base;
    vec[i].len = iov[i].len;
    sum += iov[i].len;
  }
  s->handed += sum;
  if (s->handed == r->out.bytes && (s->m.flags & S_RESP_END)) {
    *pflags |= NGHTTP3_DATA_FLAG_EOF;
    if (s->m.flags & S_TRAILERS)
      *pflags |= NGHTTP3_DATA_FLAG_NO_END_STREAM;
    end_sent(h, s);
  }
  return (nghttp3_ssize)k;
}

/* ---- The pump: what waits for a moment outside nghttp3 ----------------- */

static void count_reset(h3_conn *h);

/* A stream's recorded work: acknowledged bytes finish their writes (a
 * `done` may write again: it only queues), zero-length markers at the
 * front run, a reader that waited is resumed, a STOP_SENDING goes out. */
static void settle_one(h3_conn *h, h3_stream *s) {
  tern_request *r = s->m.r;
  uint64_t acked = s->acked;

  r->refs++;
  s->acked = 0;
  if (acked > s->handed)
    acked = s->handed; /* never past what nghttp3 was given */
  s->handed -= (size_t)acked;
  tern__outq_consume(h->m.w, &r->out, (size_t)acked);
  if (acked > 0 && s->timer.kind == TERN__T_WRITE && (s->m.flags & S_OPEN))
    tern__timer_set(h->m.w, &s->timer, TERN__T_WRITE); /* progress re-arms */
  if (!h->m.dead && (s->m.flags & S_PEER_STOP) && (s->m.flags & S_OPEN)) {
    count_reset(h);
    abandon(h, s, NGHTTP3_H3_REQUEST_CANCELLED);
  }
  if (!h->m.dead && (s->m.flags & S_OPEN)) {
    if ((s->m.flags & S_DEFERRED) &&
        (r->out.bytes > s->handed || (s->m.flags & S_RESP_END))) {
      s->m.flags &= ~(unsigned)S_DEFERRED;
      (void)nghttp3_conn_resume_stream(h->ng, s->id);
      tern__quic_want_write(h->q);
    }
    if (s->m.flags & S_STOP_READ) {
      s->m.flags &= ~(unsigned)S_STOP_READ;
      if (!(s->m.flags & S_REMOTE_DONE)) {
        tern__mux_drop_held(&h->m, &s->m);
        (void)nghttp3_conn_shutdown_stream_read(h->ng, s->id);
        (void)tern__quic_shut_read(h->q, s->id, NGHTTP3_H3_NO_ERROR);
        tern__quic_want_write(h->q);
      }
    }
    stream_timer(h, s); /* output waiting for the client: WRITE */
  }
  tern__request_unref(r);
}

/* Graceful stop: the notice, a probe timeout later the final GOAWAY (once),
 * and the close when no request stream is left. */
static void stop_step(h3_conn *h) {
  uint64_t now = uv_now(h->m.w->loop);
  int rv;

  if (!h->noticed) {
    uint64_t pto = tern__quic_pto_ms(h->q);
    h->noticed = 1;
    rv = nghttp3_conn_submit_shutdown_notice(h->ng);
    if (rv != 0) {
      tern__quic_close(h->q, NGHTTP3_H3_INTERNAL_ERROR, "no memory");
      h->closed = 1;
      return;
    }
    h->stop_at = now + pto;
    tern__quic_wake_after(h->q, pto);
    tern__quic_want_write(h->q);
    return;
  }
  if (!h->final) {
    if (now < h->stop_at)
      return; /* the wake-up calls output again */
    h->final = 1;
    rv = nghttp3_conn_shutdown(h->ng);
    if (rv != 0) {
      tern__quic_close(h->q, NGHTTP3_H3_INTERNAL_ERROR, "no memory");
      h->closed = 1;
      return;
    }
    tern__quic_want_write(h->q);
  }
  /* Closed once the final GOAWAY is out: a CONNECTION_CLOSE written in
   * the same pass would go first and the GOAWAY never. */
  if (h->goaway_out && h->nopen == 0 && !h->closed) {
    h->closed = 1;
    tern__quic_close(h->q, NGHTTP3_H3_NO_ERROR, "");
  }
}

static void pump(h3_conn *h) {
  h3_stream *s;

  if (h->pumping)
    return;
  h->pumping = 1;
  h->refs++;
  /* Only what was recorded before this pass: a `done` that writes again
   * is settled in the next one. */
  h->settling = h->settle;
  h->settle = NULL;
  while ((s = h->settling) != NULL && !h->m.dead) {
    h->settling = s->settle_next;
    s->m.flags &= ~(unsigned)S_SETTLE;
    settle_one(h, s);
  }
  while ((s = h->settling) != NULL) { /* the connection closed under us */
    h->settling = s->settle_next;
    s->m.flags &= ~(unsigned)S_SETTLE;
  }
  if (!h->m.dead && h->m.flow)
    tern__mux_run_flows(&h->m);
  if (!h->m.dead && h->stopping && !h->closed)
    stop_step(h);
  h->pumping = 0;
  conn_unref(h);
}

/* ---- The glue: tern__quic_app ------------------------------------------ */

static int q_start(tern__quic *q) {
  tern__conn *head = tern__quic_head(q);
  tern_server *srv = head->w->srv;
  nghttp3_callbacks cb;
  nghttp3_settings settings;
  int64_t ctrl, qenc, qdec;
  h3_conn *h;
  int rv;

  if (tern__quic_uni_left(q) < 3)
    return TERN_ETOOBIG; /* the client allows too few streams for HTTP/3 */
  h = tern__malloc(srv, sizeof(*h));
  if (h == NULL)
    return TERN_ENOMEM;
  memset(h, 0, sizeof(*h));
  memset(h->refused, 0xff, sizeof(h->refused));
  h->max_first = -1;
  h->poisoned = -1;
  h->q = q;
  h->m.w = head->w;
  h->m.ops = &h3_mux;
  h->refs = 1;
  tern__list_init(&h->m.streams);
  tern__list_init(&h->limbo);
  h->mem.user_data = head->w;
  h->mem.malloc = tern__small_mem_malloc;
  h->mem.free = tern__small_mem_free;
  h->mem.calloc = tern__small_mem_calloc;
  h->mem.realloc = tern__small_mem_realloc;
  memset(&cb, 0, sizeof(cb));
  cb.acked_stream_data = on_acked;
  cb.stream_close = on_stream_close;
  cb.recv_data = on_data;
  cb.deferred_consume = on_deferred_consume;
  cb.begin_headers = on_begin_headers;
  cb.recv_header = on_header;
  cb.end_headers = on_end_headers;
  cb.recv_trailer = on_trailer;
  cb.end_trailers = on_end_trailers;
  cb.stop_sending = on_stop_sending;
  cb.end_stream = on_end_stream;
  cb.reset_stream = on_reset_stream;
  cb.shutdown = on_shutdown;
  nghttp3_settings_default(&settings);
  settings.max_field_section_size = srv->s.max_head_size;
  settings.qpack_max_dtable_capacity = H3_QPACK_TABLE;
  settings.qpack_encoder_max_dtable_capacity = H3_QPACK_TABLE;
  settings.qpack_blocked_streams = H3_QPACK_BLOCKED;
  settings.enable_connect_protocol = 1; /* RFC 9220 */
  tern__h3_check_init(&h->check,
                      &(tern__h3_check_mem){tern__small_mem_malloc,
                                            tern__small_mem_free, head->w});
  if (nghttp3_conn_server_new(&h->ng, &cb, &settings, &h->mem, h) != 0) {
    tern__free(srv, h);
    return TERN_ENOMEM;
  }
  if ((rv = tern__quic_open_uni(q, &ctrl)) != 0 ||
      (rv = tern__quic_open_uni(q, &qenc)) != 0 ||
      (rv = tern__quic_open_uni(q, &qdec)) != 0 ||
      (rv = nghttp3_conn_bind_control_stream(h->ng, ctrl)) != 0 ||
      (rv = nghttp3_conn_bind_qpack_streams(h->ng, qenc, qdec)) != 0) {
    nghttp3_conn_del(h->ng);
    tern__h3_check_free(&h->check);
    tern__free(srv, h);
    return rv == NGHTTP3_ERR_NOMEM ? TERN_ENOMEM : rv;
  }
  nghttp3_conn_set_max_client_streams_bidi(h->ng, tern__quic_max_bidi(q));
  h->ctrl = ctrl;
  tern__reset_budget_init(&h->resets, uv_now(h->m.w->loop));
  tern__quic_set_app(q, h);
  if (head->flags & TERN__C_STOPPING)
    h->stopping = 1;        /* the stop came during the handshake */
  tern__quic_want_write(q); /* our SETTINGS */
  schedule(h);
  return 0;
}

static h3_conn *app_of(tern__quic *q) {
  h3_conn *h = tern__quic_app_data(q);
  return h != NULL && !h->m.dead ? h : NULL;
}

/* An HTTP/3 variable-length integer at p[0 .. n): its length, or 0 when
 * n is too short. */
static size_t varint(const uint8_t *p, size_t n, uint64_t *v) {
  size_t len, i;
  if (n == 0)
    return 0;
  len = (size_t)1 << (p[0] >> 6);
  if (n < len)
    return 0;
  *v = p[0] & 0x3f;
  for (i = 1; i < len; i++)
    *v = (*v << 8) | p[i];
  return len;
}

/* The first bytes of a request stream: a HEADERS frame too large for
 * any head within max_head_size is refused here, before nghttp3 sees
 * it. nghttp3 0.8 fails the whole connection for a compressed value over
 * 64 KiB (NGHTTP3_ERR_QPACK_HEADER_TOO_LARGE), where one stream's error
 * must cost that stream only (RFC 9114 4.2.2). The bound is twice
 * max_head_size plus room for the fields' framing (QPACK never needs
 * more than a few bytes over the raw size: Huffman is used only where it
 * is shorter), and below 64 KiB, so no value nghttp3 is given can reach
 * its cap. Returns 1 when the stream was refused (reset and stopped with
 * H3_EXCESSIVE_LOAD; nothing was processed). Checked: the first bytes of
 * each request stream that appears after every lower one (nghttp3 0.8
 * cannot say whether it knows a stream), with the frame header whole in
 * them; a client that reorders its streams' first bytes or splits a
 * frame header that finely meets nghttp3's own limit instead. */
static int refuse_oversized(h3_conn *h, int64_t id, const uint8_t *p,
                            size_t n) {
  uint64_t type, len, max = 2 * (uint64_t)h->m.w->srv->s.max_head_size + 4096;
  size_t a, b;
  if (max > 65535 - 16)
    max = 65535 - 16;
  if ((a = varint(p, n, &type)) == 0 || (b = varint(p + a, n - a, &len)) == 0)
    return 0;
  if (type != 0x01 || len <= max)
    return 0;
  h->refused[(uint64_t)id / 4 % H3_REFUSED] = id;
  (void)tern__quic_shut(h->q, id, NGHTTP3_H3_EXCESSIVE_LOAD);
  return 1;
}

static int was_refused(const h3_conn *h, int64_t id) {
  return h->refused[(uint64_t)id / 4 % H3_REFUSED] == id;
}

static int q_recv(tern__quic *q, int64_t id, uint64_t off, const uint8_t *p,
                  size_t n, int fin, int early) {
  h3_conn *h = app_of(q);
  nghttp3_ssize rv;
  int bad = 0;

  if (h == NULL)
    return 0;
  if (is_bidi(id) && id > h->max_first) {
    h->max_first = id;
    if (!h->m.dead && refuse_oversized(h, id, p, n)) {
      (void)tern__quic_credit(q, -1, n);
      return 0;
    }
  } else if (is_bidi(id) && was_refused(h, id)) {
    /* The refused stream's bytes still count against the connection's
     * window: credit them back, drop them. */
    (void)tern__quic_credit(q, -1, n);
    return 0;
  }
  /* The field lines of the sections these bytes end, for end_headers
   * and end_trailers to hold against what nghttp3 handed over
   * (http3/check.h). */
  if (is_bidi(id))
    bad = tern__h3_check_request(&h->check, id, off, p, n, fin);
  else
    tern__h3_check_clear(&h->check);
  h->refs++;
  h->rx_early = early != 0;
  /* A malformed request's bytes still go to nghttp3, so that its QPACK
   * state stays the client's, but its head is not routed and its end not
   * taken (the callbacks look at `poisoned`, and set it where a field was
   * dropped). */
  h->poisoned = bad ? id : -1;
  rv = nghttp3_conn_read_stream(h->ng, id, p, n, fin);
  if (h->poisoned != id)
    bad = 0;
  else if (bad == 0)
    bad = 1;
  h->poisoned = -1;
  h->rx_early = 0;
  if ((rv == NGHTTP3_ERR_MALFORMED_HTTP_MESSAGING || (bad && rv >= 0)) &&
      is_bidi(id) && !h->m.dead) {
    /* A malformed request (its DATA does not match its Content-Length,
     * RFC 9114 4.1.2; a field with an invalid name or value, 4.2) is a
     * stream error: that stream is reset with H3_MESSAGE_ERROR both ways
     * (H3_INTERNAL_ERROR when the check ran out of memory), its later
     * bytes are dropped like a refused stream's (and credited), and the
     * connection's other requests go on. */
    h->refused[(uint64_t)id / 4 % H3_REFUSED] = id;
    tern__h3_check_forget(&h->check, id);
    (void)tern__quic_credit(q, -1, n);
    (void)tern__quic_shut(
        q, id, bad < 0 ? NGHTTP3_H3_INTERNAL_ERROR : NGHTTP3_H3_MESSAGE_ERROR);
    conn_unref(h);
    return 0;
  }
  if (rv < 0) {
    int e = fail(h, (int)rv);
    conn_unref(h);
    return e;
  }
  if (rv > 0 && !h->m.dead)
    (void)tern__quic_credit(q, id, (uint64_t)rv);
  conn_unref(h);
  return 0;
}

static int q_acked(tern__quic *q, int64_t id, uint64_t n) {
  h3_conn *h = app_of(q);
  int rv;
  if (h == NULL)
    return 0;
  rv = nghttp3_conn_add_ack_offset(h->ng, id, n);
  return rv == 0 ? 0 : fail(h, rv);
}

static int q_closed(tern__quic *q, int64_t id, uint64_t code) {
  h3_conn *h = app_of(q);
  int rv;
  if (h == NULL)
    return 0;
  tern__h3_check_forget(&h->check, id);
  h->refs++;
  rv = nghttp3_conn_close_stream(h->ng, id,
                                 code != 0 ? code : NGHTTP3_H3_NO_ERROR);
  if (rv == NGHTTP3_ERR_STREAM_NOT_FOUND) {
    /* A stream nghttp3 never saw (reset before any byte arrived). */
    if (is_bidi(id) && !h->m.dead)
      tern__quic_more_streams(q, 1);
    rv = 0;
  }
  if (rv != 0)
    rv = fail(h, rv);
  conn_unref(h);
  return rv;
}

/* A client stream reset: the reset budget (core/mux.h). */
static int reset_allowed(h3_conn *h) {
  return tern__reset_budget_take(&h->resets, uv_now(h->m.w->loop));
}

/* The stream nghttp3 knows as `id`, ours, or NULL. nghttp3 0.8 has no
 * getter for a stream's user data: the open streams are looked through
 * (resets are rare, and bounded by the bucket). */
static h3_stream *find_stream(h3_conn *h, int64_t id) {
  tern__list *l;
  for (l = h->m.streams.next; l != &h->m.streams; l = l->next) {
    h3_stream *s = TERN__CONTAINER_OF(l, h3_stream, m.link);
    if (s->id == id)
      return s;
  }
  return NULL;
}

/* A client that ends streams abruptly, again and again, makes work for
 * nothing (CVE-2023-44487): past the bucket the connection closes. */
static void count_reset(h3_conn *h) {
  if (!reset_allowed(h) && !h->closed) {
    tern__log(h->m.w->srv, TERN_LOG_DEBUG, "http3: too many stream resets");
    tern__quic_close(h->q, NGHTTP3_H3_EXCESSIVE_LOAD, "too many resets");
    h->closed = 1;
  }
}

/* RESET_STREAM from the client: it cancels the request, unless our
 * complete response is out already, when it only ends an upload we asked
 * it to stop (RFC 9114 4.1.1). */
static int q_reset(tern__quic *q, int64_t id, uint64_t code) {
  h3_conn *h = app_of(q);
  h3_stream *s;
  int rv;

  (void)code;
  if (h == NULL)
    return 0;
  tern__h3_check_forget(&h->check, id); /* no more bytes come */
  rv = nghttp3_conn_shutdown_stream_read(h->ng, id);
  if (rv != 0 && rv != NGHTTP3_ERR_STREAM_NOT_FOUND)
    return fail(h, rv);
  if (!is_bidi(id) || (s = find_stream(h, id)) == NULL)
    return 0;
  if (s->m.flags & S_END_SENT) {
    s->m.flags |= S_REMOTE_DONE;
    tern__mux_drop_held(&h->m, &s->m);
    stream_timer(h, s);
    return 0;
  }
  count_reset(h);
  h->refs++;
  abandon(h, s, NGHTTP3_H3_REQUEST_CANCELLED);
  conn_unref(h);
  return 0;
}

/* ngtcp2 0.12's stream_stop_sending: OUR read side was shut (by us, with
 * STOP_SENDING); nghttp3 forgets what it buffered for the stream. */
static int q_stop_sending(tern__quic *q, int64_t id, uint64_t code) {
  h3_conn *h = app_of(q);
  int rv;
  (void)code;
  if (h == NULL)
    return 0;
  rv = nghttp3_conn_shutdown_stream_read(h->ng, id);
  return rv == 0 || rv == NGHTTP3_ERR_STREAM_NOT_FOUND ? 0 : fail(h, rv);
}

static int q_unblocked(tern__quic *q, int64_t id) {
  h3_conn *h = app_of(q);
  int rv;
  if (h == NULL)
    return 0;
  rv = nghttp3_conn_unblock_stream(h->ng, id);
  return rv == 0 || rv == NGHTTP3_ERR_STREAM_NOT_FOUND ? 0 : fail(h, rv);
}

static int q_max_streams(tern__quic *q, uint64_t max) {
  h3_conn *h = app_of(q);
  if (h != NULL)
    nghttp3_conn_set_max_client_streams_bidi(h->ng, max);
  return 0;
}

static int q_next(tern__quic *q, int64_t *id, int *fin, tern__qvec *v,
                  size_t n) {
  h3_conn *h = app_of(q);
  nghttp3_ssize k;

  *id = -1;
  *fin = 0;
  if (h == NULL)
    return 0;
  k = nghttp3_conn_writev_stream(h->ng, id, fin, (nghttp3_vec *)(void *)v, n);
  if (k < 0)
    return fail(h, (int)k);
  return (int)k;
}

static int q_written(tern__quic *q, int64_t id, size_t n) {
  h3_conn *h = app_of(q);
  int rv;
  if (h == NULL)
    return 0;
  rv = nghttp3_conn_add_write_offset(h->ng, id, n);
  if (rv != 0)
    return fail(h, rv);
  if (h->final && !h->goaway_out && id == h->ctrl && n > 0) {
    h->goaway_out = 1; /* the last thing queued on the control stream */
    schedule(h);
  }
  return 0;
}

static int q_blocked(tern__quic *q, int64_t id) {
  h3_conn *h = app_of(q);
  if (h != NULL)
    nghttp3_conn_block_stream(h->ng, id);
  return 0;
}

/* The stream can no longer send: the client's STOP_SENDING (ngtcp2 0.12
 * reset our side itself and says so only now, at the next write). It
 * wants no more of the response: the request is cancelled, at the next
 * pump (this runs inside quic's write loop). */
static int q_shut_wr(tern__quic *q, int64_t id) {
  h3_conn *h = app_of(q);
  h3_stream *s;
  if (h == NULL)
    return 0;
  nghttp3_conn_shutdown_stream_write(h->ng, id);
  if (is_bidi(id) && (s = find_stream(h, id)) != NULL) {
    s->m.flags |= S_PEER_STOP;
    settle_add(h, s);
  }
  return 0;
}

static void q_free(tern__quic *q) {
  h3_conn *h = tern__quic_app_data(q);
  if (h == NULL)
    return;
  tern__quic_set_app(q, NULL);
  if (!h->m.dead) {
    h->m.dead = 1;
    drop_streams(h, NGHTTP3_H3_NO_ERROR);
  }
  nghttp3_conn_del(h->ng);
  h->ng = NULL;
  tern__h3_check_free(&h->check);
  conn_unref(h); /* the rcbufs requests still hold keep h->mem alive */
}

const tern__quic_app tern__http3_app = {
    .alpn = "h3",
    .code_none = NGHTTP3_H3_NO_ERROR,
    .code_internal = NGHTTP3_H3_INTERNAL_ERROR,
    .start = q_start,
    .recv = q_recv,
    .acked = q_acked,
    .closed = q_closed,
    .reset = q_reset,
    .stop_sending = q_stop_sending,
    .unblocked = q_unblocked,
    .max_streams = q_max_streams,
    .next = q_next,
    .written = q_written,
    .blocked = q_blocked,
    .shut_wr = q_shut_wr,
    .free = q_free,
};

/* ---- The connection side ------------------------------------------------ */

static void h3_input(tern__conn *c) {
  h3_conn *h = app_of(tern__quic_of(c));
  if (h != NULL)
    pump(h);
}

static void h3_output(tern__conn *c) {
  h3_conn *h = app_of(tern__quic_of(c));
  if (h != NULL)
    pump(h);
}

static void h3_stop(tern__conn *c) {
  h3_conn *h = app_of(tern__quic_of(c));
  /* Still in the handshake: app->start sees TERN__C_STOPPING and begins
   * the stop there (the head timer bounds a handshake that never ends). */
  if (h == NULL)
    return;
  h->stopping = 1;
  schedule(h);
}

/* The connection is closing: fail what is in flight. No call goes to
 * nghttp3 or quic any more; app->free deletes nghttp3's state. */
static void h3_close(tern__conn *c) {
  h3_conn *h = app_of(tern__quic_of(c));
  if (h == NULL)
    return;
  h->m.dead = 1;
  h->refs++;
  drop_streams(h, NGHTTP3_H3_NO_ERROR);
  conn_unref(h);
}

static size_t h3_busy(const tern__conn *c) {
  const h3_conn *h = tern__quic_app_data((const tern__quic *)(const void *)c);
  return h != NULL ? h->m.nq : 0;
}

/* Idle while no request stream is open; each open one times itself. */
static int h3_timer(const tern__conn *c) {
  const h3_conn *h = tern__quic_app_data((const tern__quic *)(const void *)c);
  return h != NULL && h->nopen > 0 ? TERN__T_NONE : TERN__T_IDLE;
}

/* ---- Responses --------------------------------------------------------- */

/* Fill nv from fields: names lower-cased into buf, values trimmed of
 * whitespace. nghttp3 copies both. Returns the number of entries. */
static size_t put_fields(nghttp3_nv *nv, char *buf, const tern_header *f,
                         size_t n) {
  size_t i, k = 0;
  for (i = 0; i < n; i++) {
    char *name = buf;
    const char *v;
    size_t vl;
    if (!tern__mux_field(&f[i], &buf, 0, &v, &vl))
      continue;
    nv[k].name = (uint8_t *)name;
    nv[k].namelen = f[i].name_len;
    nv[k].value = (uint8_t *)(uintptr_t)v;
    nv[k].valuelen = vl;
    nv[k].flags = NGHTTP3_NV_FLAG_NONE;
    k++;
  }
  return k;
}

static size_t names_bytes(const tern_header *f, size_t n) {
  size_t i, size = 0;
  for (i = 0; i < n; i++)
    size += f[i].name_len;
  return size;
}

static h3_conn *live(tern_request *r, h3_stream **sp) {
  h3_stream *s = r->proto_data;
  *sp = s;
  if (s == NULL || !(s->m.flags & S_OPEN) || s->h->m.dead)
    return NULL;
  return s->h;
}

/* Fields as nghttp3 takes them, with `first` entries of our own in front
 * (:status) and room for `extra` more behind; on the stack when they fit,
 * as nearly every head does. fields_close frees what fields_open took. */
typedef struct {
  nghttp3_nv stack[24], *nv;
  char buf_stack[1024], *buf;
  char st[3];
  size_t k; /* entries filled */
} h3_fields;

static int fields_open(tern__worker *w, h3_fields *hd, int status,
                       const tern_header *f, size_t n, size_t extra) {
  size_t names = names_bytes(f, n);
  size_t first = status != 0 ? 1 : 0;
  hd->nv = hd->stack;
  hd->buf = hd->buf_stack;
  hd->k = 0;
  if (n + first + extra > sizeof(hd->stack) / sizeof(hd->stack[0]))
    hd->nv = tern__malloc(w->srv, (n + first + extra) * sizeof(*hd->nv));
  if (names > sizeof(hd->buf_stack))
    hd->buf = tern__malloc(w->srv, names);
  if (hd->nv == NULL || hd->buf == NULL)
    return TERN_ENOMEM;
  if (status != 0) {
    tern__status_digits(hd->st, status);
    hd->nv[0].name = (uint8_t *)":status";
    hd->nv[0].namelen = 7;
    hd->nv[0].value = (uint8_t *)hd->st;
    hd->nv[0].valuelen = 3;
    hd->nv[0].flags = NGHTTP3_NV_FLAG_NONE;
  }
  hd->k = first + put_fields(hd->nv + first, hd->buf, f, n);
  return 0;
}

static void fields_close(tern__worker *w, h3_fields *hd) {
  if (hd->nv != NULL && hd->nv != hd->stack)
    tern__free(w->srv, hd->nv);
  if (hd->buf != NULL && hd->buf != hd->buf_stack)
    tern__free(w->srv, hd->buf);
}

static int ng_error(int rv) {
  return rv == NGHTTP3_ERR_NOMEM ? TERN_ENOMEM : TERN_ECLOSED;
}

static const nghttp3_data_reader body_reader = {read_body};

static int h3_start(tern_request *r, int status, const tern_header *f, size_t n,
                    int64_t cl) {
  h3_stream *s;
  h3_conn *h = live(r, &s);
  tern__worker *w = r->w;
  int bodyless = (r->flags & TERN__RQ_HEAD) || status < 200 || status == 204 ||
                 status == 304;
  int no_length = status < 200 || status == 204 || status == 304;
  h3_fields hd;
  nghttp3_nv *nv;
  char len[20];
  size_t k;
  int rc;

  if (h == NULL)
    return TERN_ECLOSED;
  if ((rc = fields_open(w, &hd, status, f, n, 2)) != 0)
    goto done;
  nv = hd.nv;
  k = hd.k;
  if (w->date_len > 8) { /* "Date: " value "\r\n" */
    nv[k].name = (uint8_t *)"date";
    nv[k].namelen = 4;
    nv[k].value = (uint8_t *)w->date + 6;
    nv[k].valuelen = w->date_len - 8;
    nv[k++].flags = NGHTTP3_NV_FLAG_NONE;
  }
  if (cl >= 0 && !no_length) {
    nv[k].name = (uint8_t *)"content-length";
    nv[k].namelen = 14;
    nv[k].value = (uint8_t *)len;
    nv[k].valuelen = tern__fmt_u64(len, (uint64_t)cl);
    nv[k++].flags = NGHTTP3_NV_FLAG_NONE;
  }
  rc = nghttp3_conn_submit_response(h->ng, s->id, nv, k,
                                    bodyless || cl == 0 ? NULL : &body_reader);
  if (rc != 0) {
    rc = ng_error(rc);
    goto done;
  }
  r->flags |= TERN__RQ_STARTED;
  r->resp_left = bodyless ? 0 : cl;
  if (bodyless)
    r->flags |= TERN__RQ_HEAD; /* from here on: no body bytes */
  tern__mux_count(&h->m, &s->m);
  if (!bodyless && cl != 0)
    s->m.flags |= S_PROVIDER;
  else
    end_sent(h, s); /* the FIN follows the head */
  tern__quic_want_write(h->q);
done:
  fields_close(w, &hd);
  return rc;
}

static int h3_write(tern_request *r, const void *p, size_t len, int copy,
                    tern_write_fn done, void *duser, tern_release_fn release,
                    void *ruser) {
  h3_stream *s;
  h3_conn *h = live(r, &s);
  int state = h != NULL ? 1 : -1, rc;

  if (h == NULL && s != NULL && !(s->m.flags & S_OPEN) &&
      (s->m.flags & S_END_SENT) && (r->flags & TERN__RQ_HEAD))
    state = 0; /* a complete bodyless answer, its stream closed */
  rc = tern__mux_write(r, state, p, len, copy, done, duser, release, ruser);
  if (rc != 0 || h == NULL)
    return rc;
  /* The reader is resumed, and markers with nothing unacknowledged before
   * them run, at the next pump. */
  settle_add(h, s);
  return 0;
}

static int h3_end(tern_request *r, const tern_header *t, size_t n) {
  h3_stream *s;
  h3_conn *h = live(r, &s);
  tern__worker *w = r->w;

  int rc = tern__mux_end(h != NULL ? &h->m : NULL, h != NULL ? &s->m : NULL, r);

  if (rc == 0)
    return 0; /* a bodyless answer whose stream has closed already */
  if (rc < 0) {
    /* Cut short: the stream must not look complete. */
    abandon(h, s, NGHTTP3_H3_INTERNAL_ERROR);
    return 0;
  }
  if (n > 0 && (s->m.flags & S_PROVIDER)) {
    /* Submitted now, sent after the body (the reader's last vectors say
     * NO_END_STREAM): nghttp3 copies the fields. */
    h3_fields hd;
    int rc = fields_open(w, &hd, 0, t, n, 0);
    if (rc == 0 && hd.k > 0) {
      rc = nghttp3_conn_submit_trailers(h->ng, s->id, hd.nv, hd.k);
      if (rc != 0)
        rc = ng_error(rc);
      else
        s->m.flags |= S_TRAILERS;
    }
    fields_close(w, &hd);
    if (rc != 0)
      return rc;
  }
  tern__mux_end_queued(&h->m, &s->m);
  settle_add(h, s);
  return 0;
}

static void h3_body_flow(tern_request *r) {
  h3_stream *s;
  h3_conn *h = live(r, &s);
  if (h != NULL && !is_gone(r))
    tern__mux_body_flow(&h->m, &s->m);
}

/* RFC 9220: the answer to an extended CONNECT is a 200 without a length;
 * the stream's DATA frames then carry the tunnel both ways. */
static int h3_tunnel(tern_request *r, const tern_header *f, size_t n) {
  h3_stream *s;
  h3_conn *h = live(r, &s);
  int rc;
  if (!(r->flags & TERN__RQ_WS_CONNECT))
    return TERN_ESTATE;
  r->flags |= TERN__RQ_TUNNEL;
  rc = h3_start(r, 200, f, n, -1);
  if (rc != 0) {
    r->flags &= ~(unsigned)TERN__RQ_TUNNEL;
    return rc;
  }
  /* A WebSocket may stay quiet for longer than QUIC's idle timeout; over
   * TCP an open socket holds its connection, so here QUIC's keep-alive
   * does, while any tunnel is open (stream_closed turns it off). */
  s->m.flags |= S_TUNNEL;
  if (h->tunnels++ == 0)
    tern__quic_keep_alive(h->q, 1);
  return 0;
}

/* Everything not yet acknowledged: what the peer's window and ACKs hold
 * back is what a streaming writer must see. */
static size_t h3_pending(const tern_request *r) {
  return r->out.bytes;
}

static void h3_release(tern_request *r) {
  h3_stream *s = r->proto_data;
  tern__worker *w = r->w;
  h3_conn *h;
  size_t i;

  if (s == NULL)
    return;
  h = s->h;
  for (i = 0; i < s->nrc; i++)
    nghttp3_rcbuf_decref(s->rc[i]);
  tern__small_free(w, s->rc);
  tern__small_free(w, s->m.cookie);
  tern__small_free(w, s->m.pend.p);
  tern__small_free(w, s);
  r->proto_data = NULL;
  conn_unref(h);
}

/* A 1xx interim answer (103 Early Hints) ahead of the final one. */
static int h3_interim(tern_request *r, int status, const tern_header *f,
                      size_t n) {
  h3_stream *s;
  h3_conn *h = live(r, &s);
  tern__worker *w = r->w;
  h3_fields hd;
  int rc;

  if (h == NULL)
    return TERN_ECLOSED;
  rc = fields_open(w, &hd, status, f, n, 0);
  if (rc == 0) {
    rc = nghttp3_conn_submit_info(h->ng, s->id, hd.nv, hd.k);
    if (rc == 0)
      tern__quic_want_write(h->q);
    else
      rc = ng_error(rc);
  }
  fields_close(w, &hd);
  return rc;
}

/* One stream's answer failed: that stream ends, RESET_STREAM and
 * STOP_SENDING with H3_INTERNAL_ERROR; the connection's others go on. */
static void h3_abort(tern_request *r) {
  h3_stream *s;
  h3_conn *h = live(r, &s);
  r->flags |= TERN__RQ_ABORT;
  if (h == NULL)
    return; /* its stream has ended already */
  h->refs++;
  abandon(h, s, NGHTTP3_H3_INTERNAL_ERROR);
  conn_unref(h);
}

static const tern__req_ops h3_ops = {
    .start = h3_start,
    .write = h3_write,
    .end = h3_end,
    .interim = h3_interim,
    .body_flow = h3_body_flow,
    .tunnel = h3_tunnel,
    .pending = h3_pending,
    .abort = h3_abort,
    .release = h3_release,
};

const tern__proto tern__http3 = {
    .name = "h3",
    .input = h3_input,
    .output = h3_output,
    .stop = h3_stop,
    .close = h3_close,
    .busy = h3_busy,
    .timer = h3_timer,
    .ops = &h3_ops,
};
