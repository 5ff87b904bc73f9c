/* The HTTP/1.1 adapter: turns the parser's heads and bodies into requests
 * and the user's response calls into bytes.
 *
 * Pipelining: every parsed request joins the connection's queue. Only the
 * request at the head of the queue writes into the connection's output;
 * the others write into their own queue, which is spliced onto the
 * connection's when they reach the head. So responses leave in request
 * order however the handlers finish.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/types.h>

#include "http1/parse.h"
#include "net/stream.h"

extern const tern__proto tern__http1;

_Static_assert(sizeof(tern__h1_field) == sizeof(tern_header) &&
                   offsetof(tern__h1_field, value_len) ==
                       offsetof(tern_header, value_len),
               "the parser fills the request's header array directly");

/* A request turned into a tunnel (WebSocket): every later byte of the
 * connection is its body. */
enum { H1_BODY_TUNNEL = 3 };

typedef struct {
  tern__h1_chunked dec;
  uint64_t body_left; /* Content-Length bytes still to arrive */
  int body_kind;      /* TERN__H1_BODY_*, or H1_BODY_TUNNEL */
  int version_minor;
  /* Where the response begins in the connection's output stream (counted
   * as c->out.consumed counts), once it is at the head of the queue. */
  uint64_t out_start;
} h1_state;

_Static_assert(sizeof(h1_state) <= sizeof(((tern_request *)0)->proto_buf),
               "adapter state fits in the request");

static h1_state *state(tern_request *r) {
  return (h1_state *)(void *)r->proto_buf;
}

/* A new request's state (the request block is not cleared there). */
static void state_init(tern_request *r) {
  h1_state *st = state(r);
  st->version_minor = 1;
  st->body_kind = TERN__H1_BODY_NONE;
  st->body_left = 0;
}

static const h1_state *cstate(const tern_request *r) {
  return (const h1_state *)(const void *)r->proto_buf;
}

static tern__outq *outq(tern_request *r) {
  tern__stream *c = tern__stream_of(r->conn);
  if (c->q_head == r) {
    tern__conn_mark_dirty(&c->head);
    return &c->out;
  }
  return &r->out;
}

static void enqueue(tern__stream *c, tern_request *r) {
  if (c->q_tail != NULL)
    c->q_tail->next = r;
  else
    c->q_head = r;
  c->q_tail = r;
  c->nq++;
}

static tern_request *dequeue(tern__stream *c) {
  tern_request *r = c->q_head;
  c->q_head = r->next;
  if (c->q_head == NULL)
    c->q_tail = NULL;
  r->next = NULL;
  c->nq--;
  if (c->body_req == r)
    c->body_req = NULL;
  return r;
}

/* Requests queued behind one that closes the connection will never be
 * answered: they are gone, and their handlers learn it when responding. */
static void drop_queue(tern__stream *c) {
  tern_request *r;
  /* All are gone before any callback runs: a callback that answers
   * another request of this connection learns it is gone too. */
  for (r = c->q_head; r != NULL; r = r->next)
    atomic_store_explicit(&r->gone, 1, memory_order_release);
  while (c->q_head != NULL) {
    r = c->q_head;
    if (r == c->body_req && (r->flags & TERN__RQ_READING) &&
        !(r->flags & TERN__RQ_BODY_DONE) && r->body_fn != NULL &&
        !(r->flags & TERN__RQ_ENDED)) {
      r->flags |= TERN__RQ_BODY_DONE;
      r->body_fn(r, TERN_BODY_ERROR, NULL, 0, r->body_user);
    }
    tern__request_gone(r);
    dequeue(c);
    /* A request answered ahead of its turn keeps its output, END marker
     * included, in its own queue; each marker holds a reference to the
     * request, so the request (and through it its read buffer and the
     * connection) would never be freed. That output can never be sent
     * now: fail it, which runs its callbacks with TERN_ECLOSED and drops
     * the references. */
    tern__outq_fail(c->head.w, &r->out, TERN_ECLOSED);
    if (!(r->flags & TERN__RQ_HANDLED) && !(r->flags & TERN__RQ_ENDED)) {
      /* Never handed to the user: drop the user's reference too. */
      r->flags |= TERN__RQ_ENDED;
      tern__request_unref(r);
    }
    tern__request_unref(r);
  }
}

/* Is part of the request body still on the wire? An empty body that a
 * streaming handler never asked for is not. */
static int body_unread(const tern_request *r) {
  return !(r->flags & TERN__RQ_BODY_DONE) &&
         !(cstate(r)->body_kind == TERN__H1_BODY_LENGTH &&
           cstate(r)->body_left == 0);
}

/* Retire finished requests from the head of the queue and let the next
 * one's buffered output follow. */
static void advance(tern__stream *c) {
  tern__worker *w = c->head.w;
  while (c->q_head != NULL && (c->q_head->flags & TERN__RQ_ENDED)) {
    tern_request *r = dequeue(c);
    /* Only a request that ends the connection drops those behind it. The
     * connection's CLOSE_AFTER alone says that nothing more is parsed (a
     * later request asked to close, was rejected, or the client finished
     * sending): the requests already queued before that are answered. */
    int last = (r->flags & TERN__RQ_CLOSE) || body_unread(r);
    if (last)
      c->head.flags |= TERN__C_CLOSE_AFTER;
    if (last &&
        (r->flags & (TERN__RQ_PEER_CLOSE | TERN__RQ_ABORT)) ==
            TERN__RQ_PEER_CLOSE &&
        !body_unread(r))
      c->head.flags |= TERN__C_PEER_DONE;
    tern__request_unref(r);
    if (last) {
      drop_queue(c);
      break;
    }
    if (c->q_head == NULL)
      continue;
    state(c->q_head)->out_start = c->out.consumed + c->out.bytes;
    if (tern__outq_splice(w, &c->out, &c->q_head->out) != 0) {
      tern__conn_close(&c->head);
      return;
    }
  }
  tern__conn_mark_dirty(&c->head);
  if (!(c->head.flags & TERN__C_CLOSE_AFTER) && c->rpos < c->rlen)
    tern__conn_reprocess(&c->head);
}

/* ---- Responses ------------------------------------------------------ */

/* The bytes fields take on the wire. They were validated by the caller
 * (response.c) before anything was queued. */
static size_t fields_size(const tern_header *h, size_t n) {
  size_t i, size = 0;
  for (i = 0; i < n; i++)
    size += h[i].name_len + h[i].value_len + 4;
  return size;
}

/* Fields tern writes itself; a caller's copy of them is dropped. */
static int managed_field(const tern_header *h) {
  switch (h->name_len) {
  case 4:
    return tern__ieq_lit(h->name, 4, "date");
  case 10:
    return tern__ieq_lit(h->name, 10, "connection");
  case 14:
    return tern__ieq_lit(h->name, 14, "content-length");
  case 17:
    return tern__ieq_lit(h->name, 17, "transfer-encoding");
  default:
    return 0;
  }
}

#define PUT(o, s, n) (memcpy((o), (s), (n)), (o) + (n))
#define PUT_LIT(o, lit) PUT(o, lit, sizeof(lit) - 1)

/* `keep_length`: a 304's Content-Length is the caller's, as it describes
 * the representation the 304 stands for (RFC 9110 8.6), not this
 * message, which has no body. */
static char *put_fields(char *o, const tern_header *h, size_t n,
                        int keep_length) {
  size_t i;
  for (i = 0; i < n; i++) {
    if (managed_field(&h[i]) &&
        !(keep_length && h[i].name_len == 14 &&
          tern__ieq_lit(h[i].name, 14, "content-length")))
      continue;
    o = PUT(o, h[i].name, h[i].name_len);
    o = PUT_LIT(o, ": ");
    o = PUT(o, h[i].value, h[i].value_len);
    o = PUT_LIT(o, "\r\n");
  }
  return o;
}

/* A head or trailer section is sized first, then written in one go into
 * the output block (or, when larger than a block, a scratch buffer). */
typedef struct {
  char *base;
  int heap;
} wbuf;

static char *wbuf_open(tern__worker *w, tern__outq *q, size_t need, wbuf *b) {
  size_t room;
  int rc = tern__outq_reserve(w, q, need, &b->base, &room);
  b->heap = 0;
  if (rc == TERN_ETOOBIG) {
    b->base = tern__malloc(w->srv, need);
    b->heap = 1;
  } else if (rc != 0) {
    b->base = NULL;
  }
  return b->base;
}

static int wbuf_close(tern__worker *w, tern__outq *q, wbuf *b, char *end) {
  int rc;
  if (!b->heap)
    return tern__outq_commit(w, q, (size_t)(end - b->base));
  rc = tern__outq_copy(w, q, b->base, (size_t)(end - b->base));
  tern__free(w->srv, b->base);
  return rc;
}

static int h1_start(tern_request *r, int status, const tern_header *h, size_t n,
                    int64_t cl) {
  tern__stream *c = tern__stream_of(r->conn);
  tern__worker *w = c->head.w;
  tern__outq *q;
  int minor = state(r)->version_minor;
  int tunnel = (r->flags & TERN__RQ_TUNNEL) != 0;
  int bodyless = !tunnel && ((r->flags & TERN__RQ_HEAD) || status < 200 ||
                             status == 204 || status == 304);
  /* 1xx and 204 never carry a length (RFC 9110 8.6); a 304's would be
   * the representation's, which only the caller can know. */
  int no_length = tunnel || status < 200 || status == 204 || status == 304;
  /* 200 is nearly every answer: its status line is a literal. */
  static const char ok_line[] = "HTTP/1.1 200 OK\r\n";
  const char *reason = status == 200 ? "OK" : tern__reason(status);
  size_t reason_len = status == 200 ? 2 : strlen(reason),
         need = fields_size(h, n);
  char *o;
  wbuf b;

  if (c->head.flags & TERN__C_STOPPING)
    r->flags |= TERN__RQ_CLOSE;
  if (cl < 0 && !bodyless && !tunnel) {
    if (minor == 0)
      r->flags |= TERN__RQ_CLOSE; /* the body ends with the connection */
    else
      r->flags |= TERN__RQ_CHUNKED;
  }
  /* Status line, Date, framing and Connection fit in 128 bytes more. */
  need += 128 + reason_len + w->date_len + w->srv->alt_svc_len;
  q = outq(r);
  if (q == &c->out)
    state(r)->out_start = c->out.consumed + c->out.bytes;
  if ((o = wbuf_open(w, q, need, &b)) == NULL)
    return TERN_ENOMEM;
  if (status == 200) {
    o = PUT_LIT(o, ok_line);
  } else {
    o = PUT_LIT(o, "HTTP/1.1 ");
    tern__status_digits(o, status);
    o += 3;
    *o++ = ' ';
    o = PUT(o, reason, reason_len);
    o = PUT_LIT(o, "\r\n");
  }
  o = put_fields(o, h, n, status == 304);
  o = PUT(o, w->date, w->date_len);
  /* Over TLS, HTTP/3's address for clients that can use it (RFC 7838). */
  if (c->filter != NULL)
    o = PUT(o, w->srv->alt_svc, w->srv->alt_svc_len);
  if (r->flags & TERN__RQ_CHUNKED) {
    o = PUT_LIT(o, "Transfer-Encoding: chunked\r\n");
  } else if (cl >= 0 && !no_length) {
    o = PUT_LIT(o, "Content-Length: ");
    o += tern__fmt_u64(o, (uint64_t)cl);
    o = PUT_LIT(o, "\r\n");
  }
  if (tunnel)
    o = PUT_LIT(o, "Connection: Upgrade\r\n");
  else if (r->flags & TERN__RQ_CLOSE)
    o = PUT_LIT(o, "Connection: close\r\n");
  else if (minor == 0)
    o = PUT_LIT(o, "Connection: keep-alive\r\n");
  o = PUT_LIT(o, "\r\n");
  if (wbuf_close(w, q, &b, o) != 0)
    return TERN_ENOMEM;
  r->flags |= TERN__RQ_STARTED;
  r->resp_left = bodyless ? 0 : tunnel ? -1 : cl;
  if (bodyless)
    r->flags |= TERN__RQ_HEAD; /* from here on: no body bytes */
  return 0;
}

/* The file's bytes go from the page cache to the socket without passing
 * through the output queue, so only when that queue is empty: whatever
 * was queued before (the head, a multipart boundary) is written first,
 * and a response behind another one in the pipeline waits its turn. */
static int64_t h1_sendfile(tern_request *r, int fd, uint64_t *off, size_t max) {
  tern__stream *c = tern__stream_of(r->conn);
  tern__conn *conn = &c->head;
  uv_os_fd_t sock;
  off_t o;
  ssize_t n;

  if (c->filter != NULL || r->resp_left < 0 ||
      (r->flags & (TERN__RQ_CHUNKED | TERN__RQ_HEAD | TERN__RQ_TUNNEL)))
    return TERN_ENOTSUP;
  if (conn->flags & (TERN__C_CLOSING | TERN__C_LINGER))
    return TERN_ECLOSED;
  if (outq(r) != &c->out)
    return TERN_ESTATE;
  if (c->out.count != 0)
    tern__conn_flush(conn); /* the head, written now rather than later */
  if (conn->flags & TERN__C_CLOSING)
    return TERN_ECLOSED;
  if (c->out.count != 0 || (conn->flags & TERN__C_WRITING))
    return TERN_ESTATE;
  if ((uint64_t)max > (uint64_t)r->resp_left)
    max = (size_t)r->resp_left;
  if (max > (size_t)1 << 30)
    max = (size_t)1 << 30;
  if (max == 0 || *off > (uint64_t)INT64_MAX - max)
    return TERN_ESTATE;
  sock = tern__stream_fd(c);
  tern__stream_before_write(c);
  o = (off_t)*off;
  do
    n = sendfile(sock, fd, &o, max);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return TERN_ESTATE;
    if (errno == EINVAL || errno == ENOSYS || errno == EOVERFLOW)
      return TERN_ENOTSUP; /* a file sendfile cannot read */
    tern__conn_close(conn);
    return TERN_ECLOSED;
  }
  *off = (uint64_t)o;
  r->resp_left -= (int64_t)n;
  TERN__STAT_ADD(conn->w->stats.bytes_out, (uint64_t)n);
  return (int64_t)n;
}

/* An interim answer: status line and the caller's fields only. It goes
 * where the final answer will, so it stays in order with it. */
static int h1_interim(tern_request *r, int status, const tern_header *h,
                      size_t n) {
  tern__worker *w = r->w;
  tern__outq *q = outq(r);
  const char *reason = tern__reason(status);
  size_t reason_len = strlen(reason);
  char *o;
  wbuf b;

  if ((o = wbuf_open(w, q, fields_size(h, n) + 16 + reason_len, &b)) == NULL)
    return TERN_ENOMEM;
  o = PUT_LIT(o, "HTTP/1.1 ");
  tern__status_digits(o, status);
  o += 3;
  *o++ = ' ';
  o = PUT(o, reason, reason_len);
  o = PUT_LIT(o, "\r\n");
  o = put_fields(o, h, n, 0);
  o = PUT_LIT(o, "\r\n");
  return wbuf_close(w, q, &b, o) != 0 ? TERN_ENOMEM : 0;
}

static int h1_write(tern_request *r, const void *p, size_t len, int copy,
                    tern_write_fn done, void *duser, tern_release_fn release,
                    void *ruser) {
  tern__worker *w = r->w;
  tern__outq *q;
  int rc = 0;

  if (!(r->flags & TERN__RQ_HEAD) && r->resp_left >= 0 &&
      (uint64_t)len > (uint64_t)r->resp_left)
    return TERN_EINVAL;
  q = outq(r);
  if (r->flags & TERN__RQ_HEAD)
    len = 0; /* HEAD: the length was announced, the bytes are not sent */
  if (len > 0 && (r->flags & TERN__RQ_CHUNKED)) {
    char line[24];
    size_t n = tern__fmt_hex(line, len);
    line[n++] = '\r';
    line[n++] = '\n';
    rc = tern__outq_copy(w, q, line, n);
  }
  if (rc == 0 && (len > 0 || release != NULL)) {
    if (copy)
      rc = tern__outq_copy(w, q, p, len);
    else
      rc = tern__outq_ref(w, q, p, len, release, ruser);
  }
  if (rc == 0 && len > 0 && (r->flags & TERN__RQ_CHUNKED))
    rc = tern__outq_copy(w, q, "\r\n", 2);
  if (rc == 0 && done != NULL)
    rc = tern__outq_mark(w, q, TERN__SEG_MARK, r, done, duser);
  if (rc != 0)
    return rc;
  if (r->resp_left > 0)
    r->resp_left -= (int64_t)len;
  return 0;
}

static int h1_end(tern_request *r, const tern_header *t, size_t n) {
  tern__worker *w = r->w;
  tern__stream *c = tern__stream_of(r->conn);
  tern__outq *q = outq(r);
  int rc = 0;

  if (r->resp_left > 0) {
    /* Fewer bytes than announced: the client can only tell by a close. */
    tern__log(w->srv, TERN_LOG_WARN, "response shorter than Content-Length");
    r->flags |= TERN__RQ_CLOSE | TERN__RQ_ABORT;
  }
  /* A response cut short (its request body broke, or fewer bytes than
   * announced) must not look complete: no last chunk, just the close. */
  if ((r->flags & TERN__RQ_CHUNKED) && !(r->flags & TERN__RQ_ABORT)) {
    size_t need = fields_size(t, n);
    char *o;
    wbuf b;
    if ((o = wbuf_open(w, q, need + 5, &b)) == NULL) {
      rc = TERN_ENOMEM;
    } else {
      o = PUT_LIT(o, "0\r\n");
      o = put_fields(o, t, n, 0);
      o = PUT_LIT(o, "\r\n");
      rc = wbuf_close(w, q, &b, o);
    }
  }
  if (rc == 0)
    rc = tern__outq_mark(w, q, TERN__SEG_END, r, NULL, NULL);
  if (rc != 0) {
    tern__conn_close(&c->head);
    return rc;
  }
  r->flags |= TERN__RQ_ENDED;
  if (c->q_head == r)
    advance(c);
  return 0;
}

/* ---- Requests -------------------------------------------------------- */

/* Reject before or instead of a request: answer `status` and close. */
static void reject(tern__stream *c, tern_request *r, int status) {
  if (r == NULL) {
    r = tern__request_new(&c->head);
    if (r == NULL) {
      tern__conn_close(&c->head);
      return;
    }
    state_init(r);
    enqueue(c, r);
  }
  r->flags |= TERN__RQ_CLOSE | TERN__RQ_BODY_DONE;
  c->head.flags |= TERN__C_CLOSE_AFTER;
  c->rpos = c->rlen;
  tern__stream_read_stop(c);
  tern__respond_status(r, status, NULL, 0);
}

static void send_continue(tern_request *r) {
  static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
  if (!(r->flags & TERN__RQ_CONTINUE) || (r->flags & TERN__RQ_STARTED))
    return;
  r->flags &= ~(unsigned)TERN__RQ_CONTINUE;
  if (tern__outq_copy(r->w, outq(r), cont, sizeof(cont) - 1) != 0)
    tern__conn_close(r->conn);
}

static void body_complete(tern__stream *c, tern_request *r) {
  r->flags |= TERN__RQ_BODY_DONE;
  c->body_req = NULL;
  if (r->flags & TERN__RQ_STREAM) {
    if (!(r->flags & TERN__RQ_ENDED) && r->body_fn != NULL)
      r->body_fn(r, TERN_BODY_END, NULL, 0, r->body_user);
    return;
  }
  r->body = r->body_buf;
  tern__request_dispatch(r);
}

/* Deliver body bytes to a streaming handler or append them to the
 * collected body. Returns 0, or the status to reject the request with. */
static int deliver(tern_request *r, const char *p, size_t n) {
  if (n == 0)
    return 0;
  if (r->flags & TERN__RQ_STREAM) {
    r->bytes_in += n;
    if (!(r->flags & TERN__RQ_ENDED))
      r->body_fn(r, TERN_BODY_DATA, p, n, r->body_user);
    return 0;
  }
  return tern__request_collect(r, p, n);
}

static int method_is(const tern_request *r, const char *m);

/* A streaming handler's answer has been queued, but the request body
 * turned out broken: if not a byte of the answer has left, it is taken
 * back and a 400 goes in its place, which the client can tell apart from
 * a success. Later body writes of the handler are swallowed (as for a
 * bodyless answer); its end still ends the exchange. Returns 0 when the
 * 400 replaced the answer. */
static int replace_answer(tern__stream *c, tern_request *r, int status) {
  static const tern_header ct = {"Content-Type", 12, "text/plain", 10};
  tern__worker *w = c->head.w;
  tern__outq *q = &r->out;
  size_t keep = 0, ncut;
  tern__seg *cut;
  char body[64];
  int len, rc;

  if ((r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED | TERN__RQ_TUNNEL)) !=
      TERN__RQ_STARTED)
    return -1;
  if (c->q_head == r) {
    /* Bytes handed to the kernel (or to TLS, which has encrypted them)
     * cannot be taken back. */
    q = &c->out;
    if (q->consumed > state(r)->out_start)
      return -1;
    keep = (size_t)(state(r)->out_start - q->consumed);
  }
  if (tern__outq_cut(w, q, keep, &cut, &ncut) != 0)
    return -1;
  r->flags &= ~(unsigned)(TERN__RQ_STARTED | TERN__RQ_CHUNKED | TERN__RQ_HEAD);
  if (method_is(r, "HEAD"))
    r->flags |= TERN__RQ_HEAD;
  len = snprintf(body, sizeof(body), "%d %s\n", status, tern__reason(status));
  rc = h1_start(r, status, &ct, 1, len);
  if (rc == 0)
    rc = h1_write(r, body, (size_t)len, 1, NULL, NULL, NULL, NULL);
  /* From here on the handler's body bytes are not sent. */
  r->flags |= TERN__RQ_HEAD;
  r->resp_left = 0;
  /* The handler's callbacks for what was taken back run now, after the
   * replacement is queued, so that anything they do comes after it. */
  tern__outq_fail_cut(w, q, cut, ncut, TERN_ECLOSED);
  if (rc != 0)
    tern__conn_close(&c->head);
  return 0;
}

static int body_error(tern__stream *c, tern_request *r, int status) {
  if (r->flags & TERN__RQ_HANDLED) {
    /* The handler has the request: answer 400 in its place if its
     * answer has not begun to leave, tell it, then drop the connection
     * once it has answered, since the framing is lost. */
    r->flags |= TERN__RQ_CLOSE | TERN__RQ_BODY_DONE | TERN__RQ_ABORT;
    c->body_req = NULL;
    c->head.flags |= TERN__C_CLOSE_AFTER;
    c->rpos = c->rlen;
    tern__stream_read_stop(c);
    replace_answer(c, r, status);
    if (!(r->flags & TERN__RQ_ENDED) && r->body_fn != NULL)
      r->body_fn(r, TERN_BODY_ERROR, NULL, 0, r->body_user);
    return 0;
  }
  c->body_req = NULL;
  reject(c, r, status);
  return 0;
}

static int copy_trailers(tern_request *r, const char *p, size_t n) {
  tern__h1_field f[32];
  tern__h1_head h;
  char *buf;
  size_t i, size, count;
  /* Reuse the head grammar: a fake request line, then the section. */
  static const char line[] = "GET / HTTP/1.0\r\n";
  char tmp[2048];

  if (n == 0)
    return 0;
  if (sizeof(line) - 1 + n + 4 > sizeof(tmp))
    return 0; /* too large to expose: the body is still fine */
  memcpy(tmp, line, sizeof(line) - 1);
  memcpy(tmp + sizeof(line) - 1, p, n);
  memcpy(tmp + sizeof(line) - 1 + n, "\r\n\r\n", 4);
  memset(&h, 0, sizeof(h));
  h.fields = f;
  h.nfields = 32;
  {
    tern__h1_limits lim = {sizeof(tmp), 32, sizeof(tmp)};
    size_t total = sizeof(line) - 1 + n + 4;
    /* The section may already end in CRLF: allow both shapes. */
    if (tern__h1_parse_head(tmp, total, &h, &lim) < 0 &&
        tern__h1_parse_head(tmp, total - 2, &h, &lim) < 0)
      return 0;
  }
  count = h.nfields;
  size = count * sizeof(tern_header);
  for (i = 0; i < count; i++)
    size += f[i].name_len + f[i].value_len;
  r->trailers = tern__malloc(r->w->srv, size ? size : 1);
  if (r->trailers == NULL)
    return TERN_ENOMEM;
  buf = (char *)(r->trailers + count);
  for (i = 0; i < count; i++) {
    memcpy(buf, f[i].name, f[i].name_len);
    r->trailers[i].name = buf;
    r->trailers[i].name_len = f[i].name_len;
    buf += f[i].name_len;
    memcpy(buf, f[i].value, f[i].value_len);
    r->trailers[i].value = buf;
    r->trailers[i].value_len = f[i].value_len;
    buf += f[i].value_len;
  }
  r->ntrailers = count;
  return 0;
}

/* Feed buffered bytes to the request whose body is arriving. Returns 1 if
 * the body completed (parsing can go on), 0 if more input is needed or
 * delivery is paused. */
static int feed_body(tern__stream *c) {
  tern_request *r = c->body_req;
  const char *buf = c->rbuf ? c->rbuf->data : NULL;
  int rc;

  if (r->flags & TERN__RQ_STREAM) {
    if (r->flags & TERN__RQ_ENDED) {
      /* Answered without reading: an empty body is simply done; else the
       * rest is unread and the connection closes after the answer. */
      c->body_req = NULL;
      if (body_unread(r))
        return 0;
      r->flags |= TERN__RQ_BODY_DONE;
      return 1;
    }
    if (!(r->flags & TERN__RQ_READING) || (r->flags & TERN__RQ_PAUSED))
      return 0;
  }
  if (state(r)->body_kind == H1_BODY_TUNNEL) {
    size_t n = c->rlen - c->rpos;
    c->rpos = c->rlen;
    r->bytes_in += n;
    if (n > 0)
      r->body_fn(r, TERN_BODY_DATA, buf + c->rpos - n, n, r->body_user);
    return 0; /* a tunnel's body ends only with the connection */
  }
  if (state(r)->body_kind == TERN__H1_BODY_LENGTH) {
    size_t avail = c->rlen - c->rpos;
    size_t n =
        avail < state(r)->body_left ? avail : (size_t)state(r)->body_left;
    if (n > 0) {
      c->rpos += n;
      state(r)->body_left -= n;
      rc = deliver(r, buf + c->rpos - n, n);
      if (rc != 0)
        return body_error(c, r, rc);
    }
    if (state(r)->body_left > 0)
      return 0;
    body_complete(c, r);
    return 1;
  }
  for (;;) {
    size_t consumed = 0, off = 0, dlen = 0;
    rc = tern__h1_chunked_decode(&state(r)->dec, buf + c->rpos,
                                 c->rlen - c->rpos, &consumed, &off, &dlen);
    if (rc < 0)
      return body_error(c, r, 400);
    if (rc == TERN__H1_CHUNKED_DONE) {
      if (copy_trailers(r, buf + c->rpos + off, dlen) != 0)
        return body_error(c, r, 503);
      c->rpos += consumed;
      body_complete(c, r);
      return 1;
    }
    c->rpos += consumed;
    if (dlen > 0) {
      rc = deliver(r, buf + c->rpos - consumed + off, dlen);
      if (rc != 0)
        return body_error(c, r, rc);
      if (c->body_req != r || (r->flags & (TERN__RQ_PAUSED | TERN__RQ_ENDED)))
        return 0;
    }
    if (consumed == 0 && dlen == 0)
      return 0;
  }
}

static int method_is(const tern_request *r, const char *m) {
  size_t n = strlen(m);
  return r->method_len == n && memcmp(r->method, m, n) == 0;
}

/* ---- HTTP/2 over cleartext (h2c) --------------------------------------
 * The two ways a plain connection becomes HTTP/2: the client preface as
 * its first bytes (prior knowledge, RFC 9113 3.3; see h1_input), or an
 * Upgrade: h2c request (RFC 7540 3.2), handled here. lib/http2 does the
 * rest. */

/* HTTP/2 once the preface's request line ("PRI * HTTP/2.0\r\n", which no
 * HTTP/1.1 request is) has arrived: the HTTP/2 adapter checks the rest,
 * and a wrong rest gets GOAWAY PROTOCOL_ERROR (RFC 9113 3.4) rather than
 * an HTTP/1.1 answer. 1: it is the preface, 0: it is not, -1: a proper
 * prefix of its line (wait for more). Once a connection's first bytes
 * were seen not to be it (c->not_h2), later requests are HTTP/1.1
 * whatever they hold. */
static int h2_preface(const char *p, size_t n) {
  static const char line[] = "PRI * HTTP/2.0\r\n";
  size_t len = sizeof(line) - 1, m = n < len ? n : len;
  if (memcmp(p, line, m) != 0)
    return 0;
  return n >= len ? 1 : -1;
}

static int conn_has_token(const tern_request *r, const char *tok, size_t n) {
  size_t i;
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *f = &r->headers[i];
    if (tern__ieq_lit(f->name, f->name_len, "connection") &&
        tern__has_token(f->value, f->value_len, tok, n))
      return 1;
  }
  return 0;
}

/* A request asking for h2c: answer 101 and let HTTP/2 serve it as stream
 * 1. Only a GET, HEAD or OPTIONS without a body, alone in the pipeline,
 * on cleartext TCP that is not http1_only; anything else is served as
 * HTTP/1.1 and the upgrade ignored. Returns 1 when the connection is HTTP/2
 * now. */
static int h2c_upgrade(tern__stream *c, tern_request *r,
                       const tern__h1_head *h) {
  const char *settings = NULL;
  size_t i, settings_len = 0;
  const tern__proto *h2;
  tern__h2c_upgrade up;

  if (c->filter != NULL || c->h1_only || (h->flags & TERN__H1_F_CLOSE) ||
      !(r->flags & TERN__RQ_BODY_DONE) || c->q_head != r || r->next != NULL ||
      (c->head.flags & (TERN__C_STOPPING | TERN__C_CLOSE_AFTER)) ||
      !(method_is(r, "GET") || method_is(r, "HEAD") ||
        method_is(r, "OPTIONS")) ||
      !tern__has_token(h->upgrade, h->upgrade_len, "h2c", 3) ||
      !conn_has_token(r, "http2-settings", 14))
    return 0;
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *f = &r->headers[i];
    if (tern__ieq_lit(f->name, f->name_len, "http2-settings")) {
      if (settings != NULL)
        return 0; /* exactly one (RFC 7540 3.2.1) */
      settings = f->value;
      settings_len = f->value_len;
    }
  }
  if (settings == NULL)
    return 0;
  h2 = tern__proto_find("h2", 2);
  if (h2 == NULL)
    return 0;
  up.r = r;
  up.settings = settings;
  up.settings_len = settings_len;
  dequeue(c);
  if (h2->attach(&c->head, &up) != 0) {
    enqueue(c, r);
    return 0;
  }
  return 1;
}

/* A head arrived: build the request, route it, and decide how its body
 * is read. */
static void start_request(tern__stream *c, size_t head_len) {
  tern__worker *w = c->head.w;
  tern_server *srv = w->srv;
  const char *buf = c->rbuf->data + c->rpos;
  tern__h1_limits lim;
  tern__h1_head h;
  tern_request *r;
  const char *allow;
  size_t allow_len;
  size_t avail;
  int rc;

  r = tern__request_new(&c->head);
  if (r == NULL) {
    tern__conn_close(&c->head);
    return;
  }
  enqueue(c, r);
  r->rbuf = c->rbuf;
  tern__rbuf_ref(c->rbuf);
  c->rpos += head_len;
  memset(&h, 0, sizeof(h));
  h.fields = (tern__h1_field *)(void *)r->headers;
  h.nfields = r->headers_cap;
  lim.max_head = srv->s.max_head_size;
  lim.max_headers = srv->s.max_header_count;
  lim.max_uri = srv->s.max_uri_length;
  state_init(r);
  rc = tern__h1_parse_head(buf, head_len, &h, &lim);
  if (rc < 0) {
    reject(c, r, -rc);
    return;
  }
  state(r)->version_minor = h.version_minor;
  r->protocol = h.version_minor ? TERN_PROTO_HTTP11 : TERN_PROTO_HTTP10;
  r->method = h.method;
  r->method_len = h.method_len;
  r->target = h.target;
  r->target_len = h.target_len;
  r->path = h.path;
  r->path_len = h.path_len;
  r->query = h.query;
  r->query_len = h.query_len;
  r->authority = h.authority;
  r->authority_len = h.authority_len;
  r->nheaders = h.nfields;
  state(r)->body_kind = h.body;
  state(r)->body_left = h.content_length;
  if (method_is(r, "HEAD"))
    r->flags |= TERN__RQ_HEAD;
  if (h.flags & TERN__H1_F_CLOSE) {
    r->flags |= TERN__RQ_CLOSE | TERN__RQ_PEER_CLOSE;
    c->head.flags |= TERN__C_CLOSE_AFTER; /* nothing follows this request */
  }
  if ((h.flags & TERN__H1_F_EXPECT100) && h.version_minor == 1)
    r->flags |= TERN__RQ_CONTINUE;
  if (h.body == TERN__H1_BODY_CHUNKED)
    tern__h1_chunked_init(&state(r)->dec, srv->s.max_head_size);
  r->body_declared = h.body == TERN__H1_BODY_NONE ? 0
                     : h.body == TERN__H1_BODY_LENGTH
                         ? (int64_t)h.content_length
                         : -1;
  if (h.body == TERN__H1_BODY_NONE ||
      (h.body == TERN__H1_BODY_LENGTH && h.content_length == 0)) {
    r->flags |= TERN__RQ_BODY_DONE;
    state(r)->body_kind = TERN__H1_BODY_NONE;
  }

  /* h2c upgrade: HTTP/2 takes the request (and the connection). */
  if ((h.flags & TERN__H1_F_UPGRADE) && h2c_upgrade(c, r, &h))
    return;
  /* Any other upgrade (WebSocket) may switch protocols when answered:
   * the bytes after it are not read as requests until then. */
  if (h.flags & TERN__H1_F_UPGRADE)
    r->flags |= TERN__RQ_UPGRADE;

  /* Route. */
  rc = tern__request_route(
      r, (h.flags & TERN__H1_F_ASTERISK) != 0,
      h.body == TERN__H1_BODY_LENGTH ? (int64_t)h.content_length : -1, &allow,
      &allow_len);
  if (rc == 413) {
    reject(c, r, 413);
    return;
  }
  if (rc != 0) {
    /* tern answers itself. A body that is already here is skipped;
     * otherwise the connection closes after the answer. */
    avail = c->rlen - c->rpos;
    if (rc != 204 && h.body == TERN__H1_BODY_LENGTH &&
        state(r)->body_left <= avail) {
      c->rpos += state(r)->body_left;
      r->flags |= TERN__RQ_BODY_DONE;
    } else if (!(r->flags & TERN__RQ_BODY_DONE)) {
      r->flags |= TERN__RQ_CLOSE;
    }
    tern__respond_status(r, rc, allow, allow_len);
    return;
  }
  if (r->flags & TERN__RQ_STREAM) {
    /* Even an empty body is delivered, as TERN_BODY_END, once the
     * handler asks for it. */
    r->flags |= TERN__RQ_STREAM;
    if (r->flags & TERN__RQ_BODY_DONE) {
      r->flags &= ~(unsigned)TERN__RQ_BODY_DONE;
      state(r)->body_kind = TERN__H1_BODY_LENGTH;
      state(r)->body_left = 0;
    }
    c->body_req = r;
    tern__request_dispatch(r);
    return;
  }
  if (r->flags & TERN__RQ_BODY_DONE) {
    tern__request_dispatch(r);
    return;
  }
  /* Collected body. */
  avail = c->rlen - c->rpos;
  if (h.body == TERN__H1_BODY_LENGTH && h.content_length <= avail) {
    /* The whole body is here: hand it over in place. */
    r->body = c->rbuf->data + c->rpos;
    r->body_len = (size_t)h.content_length;
    r->bytes_in = r->body_len;
    c->rpos += r->body_len;
    r->flags |= TERN__RQ_BODY_DONE;
    tern__request_dispatch(r);
    return;
  }
  r->flags |= TERN__RQ_READING;
  c->body_req = r;
  send_continue(r);
}

/* Requests of this connection still allocated: in the pipeline, or
 * answered but not yet written. Bounding them bounds the memory a client
 * can tie up by pipelining many tiny requests. */
static size_t live_requests(const tern__stream *c) {
  return (size_t)c->head.refs - 1;
}

static void h1_input(tern__conn *conn) {
  tern__stream *c = tern__stream_of(conn);
  tern_server *srv = conn->w->srv;
  tern__h1_limits lim;
  int want;

  lim.max_head = srv->s.max_head_size;
  lim.max_headers = srv->s.max_header_count;
  lim.max_uri = srv->s.max_uri_length;
  /* HTTP/2 with prior knowledge (h2c): a cleartext connection whose first
   * bytes are the client preface (or a prefix of it: wait for more). On
   * an http2_only listener, whatever they are: the HTTP/2 adapter judges
   * the preface, and a wrong one is GOAWAY PROTOCOL_ERROR. */
  if (!c->not_h2 && c->rpos < c->rlen) {
    const tern__proto *h2 = NULL;
    int m = c->h2_only ? 1
            : c->filter == NULL
                ? h2_preface(c->rbuf->data + c->rpos, c->rlen - c->rpos)
                : 0;
    if (m < 0 && !(conn->flags & TERN__C_EOF)) {
      tern__stream_read_start(c);
      return;
    }
    if (m > 0 && (h2 = tern__proto_find("h2", 2)) != NULL) {
      if (h2->attach(conn, NULL) != 0)
        tern__conn_close(conn);
      else
        conn->proto->input(conn);
      return;
    }
    c->not_h2 = 1;
  }
  for (;;) {
    size_t end;
    if (c->head.flags & TERN__C_CLOSING)
      return;
    if (c->body_req != NULL) {
      if (!feed_body(c))
        break;
      continue;
    }
    if (c->head.flags & TERN__C_CLOSE_AFTER) {
      c->rpos = c->rlen; /* nothing after a closing request is read */
      break;
    }
    /* Stopping, one more request is taken on a connection that has none
     * (its grace, h1_stop): its answer says Connection: close. */
    if (c->rpos == c->rlen || live_requests(c) >= srv->s.max_pipeline ||
        ((c->head.flags & TERN__C_STOPPING) && live_requests(c) > 0))
      break;
    if (c->q_tail != NULL &&
        (c->q_tail->flags & (TERN__RQ_UPGRADE | TERN__RQ_ENDED)) ==
            TERN__RQ_UPGRADE)
      break; /* an upgrade is pending: what follows may not be HTTP */
    end = tern__h1_head_end(c->rbuf->data + c->rpos, c->rlen - c->rpos,
                            &c->head_scanned);
    if (end == 0) {
      int rc = tern__h1_check_partial(c->rbuf->data + c->rpos,
                                      c->rlen - c->rpos, &lim);
      if (rc < 0)
        reject(c, NULL, -rc);
      break;
    }
    c->head_scanned = 0;
    start_request(c, end);
    if (c->head.proto != &tern__http1) {
      /* upgraded to h2c: the rest is HTTP/2 */
      c->head.proto->input(&c->head);
      return;
    }
  }
  if (c->head.flags & TERN__C_CLOSING)
    return;
  if (c->head.flags & TERN__C_EOF) {
    if (c->body_req != NULL && !(c->body_req->flags & TERN__RQ_BODY_DONE)) {
      tern__conn_close(&c->head); /* the client left in the middle of a body */
      return;
    }
    c->head.flags |= TERN__C_CLOSE_AFTER;
    c->rpos = c->rlen;
    /* A handler still working for a client that has closed would answer
     * nobody (HTTP/1.1 gives a half-closed client no way to ask for it):
     * its request and those behind it are gone. Answers already made are
     * in c->out and still go out before the close. */
    if (c->q_head != NULL && !(c->q_head->flags & TERN__RQ_ENDED))
      drop_queue(c);
    return;
  }
  if (c->body_req != NULL) {
    unsigned f = c->body_req->flags;
    want = (f & TERN__RQ_READING) && !(f & TERN__RQ_PAUSED);
  } else {
    want = !(c->head.flags & TERN__C_CLOSE_AFTER) &&
           live_requests(c) <
               ((c->head.flags & TERN__C_STOPPING) ? 1u : srv->s.max_pipeline);
  }
  if (want)
    tern__stream_read_start(c);
  else
    tern__stream_read_stop(c);
}

static void h1_body_flow(tern_request *r) {
  if (r->flags & TERN__RQ_READING)
    send_continue(r);
  if (tern__stream_of(r->conn)->body_req == r)
    tern__conn_reprocess(r->conn);
}

/* The WebSocket handshake answer: 101, then the connection is the
 * tunnel's. The request's head is no longer needed (the caller has copied
 * what it keeps), so its read buffer can go back once drained. */
static int h1_tunnel(tern_request *r, const tern_header *h, size_t n) {
  tern__stream *c = tern__stream_of(r->conn);
  int rc;

  /* The connection cannot become this request's: it ends after the
   * request (the client said Connection: close, or the server stops), or
   * another request's body is still arriving (a streaming route's own
   * empty one, not yet read, is none). The client's handshake is then
   * unusable; the caller answers it. */
  if ((c->body_req != NULL && (c->body_req != r || body_unread(r))) ||
      (c->head.flags & TERN__C_CLOSE_AFTER))
    return TERN_EHANDSHAKE;
  r->flags |= TERN__RQ_TUNNEL;
  rc = h1_start(r, 101, h, n, -1);
  if (rc != 0) {
    r->flags &= ~(unsigned)TERN__RQ_TUNNEL;
    return rc;
  }
  r->flags |= TERN__RQ_STREAM;
  r->flags &= ~(unsigned)(TERN__RQ_BODY_DONE | TERN__RQ_UPGRADE);
  state(r)->body_kind = H1_BODY_TUNNEL;
  c->body_req = r;
  /* The head is no longer needed: a long-lived tunnel gives its read
   * buffer back, unless the access log will show the head when the
   * tunnel closes. */
  if (c->head.w->srv->access_fn != NULL)
    return 0;
  tern__rbuf_unref(c->head.w, r->rbuf);
  r->rbuf = NULL;
  r->nheaders = 0;
  r->method = r->target = r->path = r->query = r->authority = NULL;
  r->method_len = r->target_len = r->path_len = r->query_len =
      r->authority_len = 0;
  return 0;
}

static size_t h1_pending(const tern_request *r) {
  const tern__stream *c = tern__stream_cof(r->conn);
  size_t n = c->q_head == r ? c->out.bytes : r->out.bytes;
  return n + tern__stream_buffered(c);
}

/* A graceful stop. A connection with requests in flight closes after
 * their answers (which say Connection: close). One with none gets a short
 * grace (TERN__T_GRACE): a keep-alive client may have sent its next
 * request as the stop began, and closing now would lose it in a way the
 * client cannot tell from a failure (RFC 9112 9.6's race); that request
 * is answered with Connection: close, so the client reconnects (to the
 * server that takes over the socket, in a replacement), and a client that
 * sends nothing is closed when the grace ends. */
static void h1_stop(tern__conn *conn) {
  tern__stream *c = tern__stream_of(conn);
  if (c->nq == 0 && !(c->head.flags & TERN__C_WRITING) && c->out.count == 0) {
    tern__conn_timer(&c->head, TERN__T_GRACE);
    return;
  }
  c->head.flags |= TERN__C_CLOSE_AFTER;
  tern__conn_mark_dirty(&c->head);
}

static void h1_close(tern__conn *conn) {
  tern__stream *c = tern__stream_of(conn);
  drop_queue(c);
}

/* The timeout for the connection's state: a request body arriving (while
 * the handler reads), a head being received, or keep-alive idle; none
 * while requests are in flight or a tunnel (WebSocket) has the
 * connection, which has no timeout of its own. */
static int h1_timer(const tern__conn *conn) {
  const tern__stream *c = tern__stream_cof(conn);
  const tern_request *b = c->body_req;
  if (b != NULL && (b->flags & TERN__RQ_TUNNEL))
    return TERN__T_NONE | (c->rpos == c->rlen ? TERN__T_DRAINED : 0);
  if (b != NULL)
    return (b->flags & TERN__RQ_READING) && !(b->flags & TERN__RQ_PAUSED)
               ? TERN__T_BODY
               : TERN__T_NONE;
  if (c->nq > 0)
    return TERN__T_NONE;
  if (c->head.flags & TERN__C_STOPPING)
    return TERN__T_GRACE | (c->rpos == c->rlen ? TERN__T_DRAINED : 0);
  if (c->rpos < c->rlen)
    return TERN__T_HEAD;
  return TERN__T_IDLE | TERN__T_DRAINED;
}

/* A partial head that timed out is told so (408), then the connection
 * closes; any other timeout closes it at once. */
static int h1_timeout(tern__conn *conn, int kind) {
  tern__stream *c = tern__stream_of(conn);
  static const char timeout_408[] =
      "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
      "Content-Length: 0\r\n\r\n";

  /* No answer to a client that never finished its PROXY header: it is
   * the balancer, not an HTTP client; the connection just closes. */
  if (kind != TERN__T_HEAD || c->nq != 0 || c->rpos >= c->rlen ||
      c->proxy_wait || (c->head.flags & TERN__C_WRITING))
    return 0;
  tern__stream_read_stop(c);
  c->rpos = c->rlen;
  if (tern__outq_copy(c->head.w, &c->out, timeout_408,
                      sizeof(timeout_408) - 1) != 0)
    return 0;
  c->head.flags |= TERN__C_CLOSE_AFTER;
  tern__access_no_request(&c->head, 408);
  tern__conn_flush(&c->head);
  return 1;
}

/* One request's answer failed: the connection's framing is lost, so it
 * closes (after nothing more of this answer). */
static void h1_abort(tern_request *r) {
  r->flags |= TERN__RQ_CLOSE | TERN__RQ_ABORT;
  tern__conn_close(r->conn);
}

/* A request is being freed: parsing (or reading) may have stopped at the
 * per-connection request bound, so look again. */
static void h1_release(tern_request *r) {
  tern__stream *c;
  if (r->conn == NULL)
    return; /* cut by the stop deadline: its connection is gone */
  c = tern__stream_of(r->conn);
  if ((c->rpos < c->rlen || !(c->head.flags & TERN__C_READING)) &&
      !(c->head.flags & (TERN__C_IN_READ | TERN__C_CLOSING)))
    tern__conn_reprocess(&c->head);
}

static const tern__req_ops h1_ops = {
    .start = h1_start,
    .write = h1_write,
    .end = h1_end,
    .interim = h1_interim,
    .body_flow = h1_body_flow,
    .tunnel = h1_tunnel,
    .pending = h1_pending,
    .abort = h1_abort,
    .sendfile = h1_sendfile,
    .release = h1_release,
};

/* Requests in the pipeline: answered, or not yet. */
static size_t h1_busy(const tern__conn *conn) {
  return tern__stream_cof(conn)->nq;
}

const tern__proto tern__http1 = {
    .name = "http/1.1",
    .attach = NULL,
    .input = h1_input,
    .output = NULL,
    .stop = h1_stop,
    .close = h1_close,
    .busy = h1_busy,
    .timer = h1_timer,
    .timeout = h1_timeout,
    .ops = &h1_ops,
};
