/* What HTTP/2 and HTTP/3, the two multiplexing adapters, share and write
 * once (lib/core/mux.c): the client's stream-reset budget, the body bytes
 * a stream holds for its handler, how a response field is put on the
 * wire, and a request stream's way from its head to its handler: the
 * stream and connection state both keep (tern__mux_stream and
 * tern__mux_conn, the first member of each adapter's own), and the
 * routing, answering, counting and body delivery written once over them,
 * with a small table per adapter (tern__mux_ops) for what only it can do:
 * give window credit back, re-arm a stream's timer, schedule its pump. */
#ifndef TERN_CORE_MUX_H
#define TERN_CORE_MUX_H

#include <string.h>

#include "core/base.h"
#include "core/pool.h"
#include "core/request.h"
#include "core/text.h"
#include "core/timer.h"

/* Client stream resets (RST_STREAM, RESET_STREAM/STOP_SENDING): a
 * bucket of TERN__MUX_RESET_BURST tokens refilled at
 * TERN__MUX_RESET_RATE a second, against a client that opens and resets
 * streams without end (CVE-2023-44487, "rapid reset"). Each adapter
 * decides what an empty bucket costs the connection (HTTP/2: GOAWAY
 * ENHANCE_YOUR_CALM; HTTP/3: H3_EXCESSIVE_LOAD). */
#define TERN__MUX_RESET_BURST 400
#define TERN__MUX_RESET_RATE 33

typedef struct {
  uint32_t tokens;
  uint64_t time; /* when it was last refilled (loop ms) */
} tern__reset_budget;

static inline void tern__reset_budget_init(tern__reset_budget *b,
                                           uint64_t now_ms) {
  b->tokens = TERN__MUX_RESET_BURST;
  b->time = now_ms;
}

/* One reset at `now_ms`: 1 when the budget allows it (a token taken),
 * 0 when it is spent. */
static inline int tern__reset_budget_take(tern__reset_budget *b,
                                          uint64_t now_ms) {
  uint64_t add = (now_ms - b->time) * TERN__MUX_RESET_RATE / 1000;
  if (add > 0) {
    b->tokens = add >= TERN__MUX_RESET_BURST - b->tokens
                    ? TERN__MUX_RESET_BURST
                    : b->tokens + (uint32_t)add;
    b->time = now_ms;
  }
  if (b->tokens == 0)
    return 0;
  b->tokens--;
  return 1;
}

/* Request body bytes a stream holds while its handler cannot take them
 * (paused, or not reading yet): [off, off + len) of p, cap bytes from the
 * worker's small blocks. */
typedef struct {
  char *p;
  size_t off, len, cap;
} tern__mux_pend;

/* Append n bytes, growing (doubling from 16 KiB) or sliding the buffer
 * down as needed: 0, or TERN_ENOMEM with nothing appended. */
int tern__mux_pend_add(tern__worker *w, tern__mux_pend *b, const void *p,
                       size_t n);

/* ---- Request streams ------------------------------------------------ */

/* A stream's flags both adapters keep; an adapter's own begin at
 * TERN__MS_OWN. */
enum {
  TERN__MS_OPEN = 1u << 0,        /* the stream is ours; we hold a ref */
  TERN__MS_COUNTED = 1u << 1,     /* counted in the connection's nq */
  TERN__MS_HEAD_DONE = 1u << 2,   /* the request head is complete */
  TERN__MS_REMOTE_DONE = 1u << 3, /* the client's end of stream arrived */
  TERN__MS_PROVIDER = 1u << 4,    /* the response has a body to send */
  TERN__MS_DEFERRED = 1u << 5,    /* its body reader waits for bytes */
  TERN__MS_RESP_END = 1u << 6,    /* the response's last byte is queued */
  TERN__MS_END_SENT = 1u << 7,    /* our end of stream is with the library */
  TERN__MS_SETTLE = 1u << 8,      /* on the connection's settle list */
  TERN__MS_FLOW = 1u << 9,        /* body delivery to retry */
  TERN__MS_WEBSOCKET = 1u << 10,  /* :protocol websocket (RFC 8441, 9220) */
  TERN__MS_DRAIN = 1u << 11,      /* answered: the body's rest is dropped */
  TERN__MS_TIMEDOUT = 1u << 12,   /* its body timer fired */
  TERN__MS_OWN = 1u << 13
};

/* A request stream, as both adapters keep it: the first member of
 * h2_stream and h3_stream. */
typedef struct {
  tern__list link; /* the connection\'s streams, while TERN__MS_OPEN */
  tern_request *r;
  unsigned flags;          /* TERN__MS_* and the adapter's own */
  int status;              /* a status tern answers instead of routing */
  int has_length;          /* content_length was given */
  size_t ncookie;          /* cookie crumbs in the head */
  char *cookie;            /* those crumbs joined with "; " */
  uint64_t content_length; /* the head's Content-Length */
  uint64_t received;       /* request body bytes that arrived */
  tern__mux_pend pend;     /* body bytes the handler cannot take yet */
  size_t owed;             /* delivered while paused: credited on resume */
} tern__mux_stream;

typedef struct tern__mux_conn tern__mux_conn;

/* What only the adapter can do for the shared code. */
typedef struct {
  /* n body bytes reached the handler: give the client window credit as
   * the adapter's policy says. */
  void (*consume)(tern__mux_conn *m, tern__mux_stream *s, size_t n);
  /* n held bytes were dropped unread: credit them back at once (to the
   * stream while it is open, else to the connection). */
  void (*release)(tern__mux_conn *m, tern__mux_stream *s, size_t n);
  /* Arm or disarm the stream's timer as its state asks. */
  void (*timer)(tern__mux_conn *m, tern__mux_stream *s);
  /* Run the connection's pump soon (a stream has S_FLOW). */
  void (*schedule)(tern__mux_conn *m);
} tern__mux_ops;

/* A multiplexed connection, as both adapters keep it: the first member
 * of h2_conn and h3_conn. */
struct tern__mux_conn {
  const tern__mux_ops *ops;
  tern__worker *w;
  tern__list streams;    /* the open streams (each holds a request) */
  size_t nq;             /* streams the server is working on (COUNTED) */
  size_t held;           /* bytes in all streams' pend buffers */
  unsigned dead : 1;     /* the connection closed: no more calls out */
  unsigned eof : 1;      /* no more bytes come (HTTP/2: the client's FIN) */
  unsigned finished : 1; /* the session is over (HTTP/2) */
  unsigned flow : 1;     /* some stream has TERN__MS_FLOW */
};

/* The stream counts among the requests the server works on (a stop
 * waits for them), once. */
static inline void tern__mux_count(tern__mux_conn *m, tern__mux_stream *s) {
  if (!(s->flags & TERN__MS_COUNTED)) {
    s->flags |= TERN__MS_COUNTED;
    m->nq++;
  }
}

static inline void tern__mux_uncount(tern__mux_conn *m, tern__mux_stream *s) {
  if (s->flags & TERN__MS_COUNTED) {
    s->flags &= ~(unsigned)TERN__MS_COUNTED;
    m->nq--;
  }
}

/* Hold n body bytes for the stream's handler: 0, or TERN_ENOMEM. */
int tern__mux_hold(tern__mux_conn *m, tern__mux_stream *s, const void *p,
                   size_t n);
/* Drop what the stream holds (answered without reading the rest), its
 * bytes credited back at once. */
void tern__mux_drop_held(tern__mux_conn *m, tern__mux_stream *s);
/* tern answers the request itself (404, 413, 431, ...), unless it was
 * answered or started already. */
void tern__mux_answer(tern__mux_conn *m, tern__mux_stream *s, int status,
                      const char *allow, size_t allow_len);
/* Route a complete head (tern__mux_head_done does): the handler runs now
 * when it streams the body or the body is complete, else once it is
 * collected; tern answers what no route takes. */
void tern__mux_route(tern__mux_conn *m, tern__mux_stream *s);
/* The head is complete: path and query split, HEAD and an extended
 * CONNECT for WebSocket marked, cookies joined, then routed. */
void tern__mux_head_done(tern__mux_conn *m, tern__mux_stream *s);
/* The client's end of stream arrived: a collected body goes to its
 * handler, a streamed one hears TERN_BODY_END. */
void tern__mux_remote_done(tern__mux_conn *m, tern__mux_stream *s);
/* Held bytes to a reading handler, as much as it takes. */
void tern__mux_deliver(tern__mux_conn *m, tern__mux_stream *s);
/* Request body bytes of an open stream, in order: counted, its body timer
 * `t` re-armed, then collected, handed to a reading handler, held, or
 * dropped (answered already), window credit given as each case says.
 * 0, or 1 when they could not be held (no memory: the adapter resets the
 * stream). */
int tern__mux_data(tern__mux_conn *m, tern__mux_stream *s, tern__timer *t,
                   const uint8_t *data, size_t len);
/* tern_request_write's part both adapters share: the length held to what
 * the response announced (TERN_EINVAL), HEAD's bytes not sent, then the
 * bytes (copied, or referenced until `release`) and the `done` marker
 * queued in r->out. `state`: 1, the stream is live (the adapter sends
 * them); 0, a complete bodyless answer whose stream closed already (the
 * write is done at once); -1, gone (TERN_ECLOSED). */
int tern__mux_write(tern_request *r, int state, const void *p, size_t len,
                    int copy, tern_write_fn done, void *duser,
                    tern_release_fn release, void *ruser);
/* tern_request_end's part both adapters share, on the stream `s` of the
 * live connection `m` (NULL: a bodyless answer whose stream closed
 * already: 0, nothing to do). A response shorter than its Content-Length
 * is cut short (logged, TERN__RQ_ABORT): -1, the adapter resets the
 * stream. Else 1: the adapter queues the trailers, then calls
 * tern__mux_end_queued. */
int tern__mux_end(tern__mux_conn *m, tern__mux_stream *s, tern_request *r);
/* The response's end is queued: a streamed body's unread rest is not
 * wanted any more. */
void tern__mux_end_queued(tern__mux_conn *m, tern__mux_stream *s);
/* A head's Content-Length (its syntax checked by the library): kept, so
 * that an oversized body is refused before it arrives. */
void tern__mux_length(tern__mux_stream *s, const uint8_t *v, size_t n);
/* One request trailer, viewing bytes the adapter keeps alive: appended
 * (the array grows by one): 0, or TERN_ENOMEM. */
int tern__mux_trailer(tern__mux_conn *m, tern__mux_stream *s, const void *name,
                      size_t name_len, const void *value, size_t value_len);
/* The stream's body timer fired: a reading handler hears TERN_BODY_ERROR,
 * then an unanswered request gets 408 (from tern, or on its handler's
 * behalf). 0 when that is all; 1 when the adapter must reset the stream
 * instead (a response had started: *sent says whether it had ended). */
int tern__mux_body_timeout(tern__mux_conn *m, tern__mux_stream *s, int *sent);
/* A stream closed for good: its request counts as served when
 * `complete` (its response wholly taken by the client); else it is
 * gone: a reading handler hears TERN_BODY_ERROR, and the request's gone
 * hook runs. */
void tern__mux_closed(tern__worker *w, tern_request *r, int complete);
/* The last of a closed stream: the adapter's reference and the one the
 * caller took go, and the user's too when no handler ever had it. */
void tern__mux_unref_closed(tern_request *r);
/* Delivery to retry on each stream marked TERN__MS_FLOW (the pump runs
 * it when m->flow is set). */
void tern__mux_run_flows(tern__mux_conn *m);
/* The handler started or stopped reading (tern_request_pause/resume):
 * delivery is retried at the next pump. */
void tern__mux_body_flow(tern__mux_conn *m, tern__mux_stream *s);
/* Whether tern waits for the stream's body (its body timer runs): inline,
 * as the adapters ask at every change of a stream's state. */
static inline int tern__mux_wants_body(const tern__mux_conn *m,
                                       const tern__mux_stream *s) {
  unsigned rf = s->r->flags;
  if ((s->flags & (TERN__MS_OPEN | TERN__MS_HEAD_DONE | TERN__MS_REMOTE_DONE |
                   TERN__MS_TIMEDOUT)) !=
          (TERN__MS_OPEN | TERN__MS_HEAD_DONE) ||
      m->eof || m->finished || (rf & (TERN__RQ_TUNNEL | TERN__RQ_WS_CONNECT)))
    return 0;
  if (rf & TERN__RQ_ENDED)
    return (s->flags & TERN__MS_DRAIN) != 0;
  if (rf & TERN__RQ_STREAM)
    return (rf & (TERN__RQ_READING | TERN__RQ_PAUSED | TERN__RQ_BODY_DONE)) ==
           TERN__RQ_READING;
  return s->r->route != NULL && s->status == 0 && !(rf & TERN__RQ_HANDLED);
}

/* A response field that HTTP/2 and HTTP/3 never send: the connection-
 * specific ones (RFC 9113 8.2.2, RFC 9114 4.2), and Date and
 * Content-Length, which the adapter writes itself. */
static inline int tern__mux_dropped_field(const tern_header *f) {
  switch (f->name_len) {
  case 2:
    return tern__ieq_lit(f->name, 2, "te");
  case 4:
    return tern__ieq_lit(f->name, 4, "date");
  case 7:
    return tern__ieq_lit(f->name, 7, "upgrade");
  case 10:
    return tern__ieq_lit(f->name, 10, "connection") ||
           tern__ieq_lit(f->name, 10, "keep-alive");
  case 14:
    return tern__ieq_lit(f->name, 14, "content-length");
  case 16:
    return tern__ieq_lit(f->name, 16, "proxy-connection");
  case 17:
    return tern__ieq_lit(f->name, 17, "transfer-encoding");
  default:
    return 0;
  }
}

/* Field `f` as both protocols send it: 0 when it is dropped (above);
 * else 1, with its name lower-cased into *buf (f->name_len bytes; *buf
 * moves past them) and *v, *vl its value trimmed of spaces and tabs,
 * copied into *buf as well (after the name) when `copy`. */
static inline int tern__mux_field(const tern_header *f, char **buf, int copy,
                                  const char **v, size_t *vl) {
  const char *p = f->value;
  size_t n = f->value_len;
  char *b = *buf;
  if (tern__mux_dropped_field(f))
    return 0;
  while (n > 0 && (p[0] == ' ' || p[0] == '\t')) {
    p++;
    n--;
  }
  while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
    n--;
  tern__lower_copy(b, f->name, f->name_len);
  b += f->name_len;
  if (copy && n > 0) {
    memcpy(b, p, n);
    p = b;
    b += n;
  }
  *buf = b;
  *v = p;
  *vl = n;
  return 1;
}

#endif
