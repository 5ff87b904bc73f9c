/* The HTTP/2 adapter and the stream code it shares with HTTP/3
 * (lib/core/mux.c) against an nghttp2 client, with no socket: http2.c is
 * compiled in with its byte-stream calls renamed to fakes, the
 * connection is a tern__stream under a fake transport, the client's bytes
 * go straight into its read buffer and the server's output queue straight
 * into the client. What a socket test cannot see is checked here: the
 * shared counts (requests in progress, body bytes held) and the window
 * credit given back are at rest once each exchange is over. */
#include <nghttp2/nghttp2.h> /* first: its own names stay */

#include "net/stream.h"

void fake_read_start(tern__stream *s);
void fake_read_stop(tern__stream *s);
size_t fake_buffered(const tern__stream *s);
int counted_consume(nghttp2_session *s, int32_t id, size_t n);
int counted_consume_connection(nghttp2_session *s, size_t n);

#define tern__stream_read_start fake_read_start
#define tern__stream_read_stop fake_read_stop
#define tern__stream_buffered fake_buffered
#define nghttp2_session_consume counted_consume
#define nghttp2_session_consume_connection counted_consume_connection
#include "http2/http2.c"
#undef tern__stream_read_start
#undef tern__stream_read_stop
#undef tern__stream_buffered
#undef nghttp2_session_consume
#undef nghttp2_session_consume_connection

#include <stdlib.h>

#include "fake_transport.h"
#include "t.h"

void fake_read_start(tern__stream *s) {
  (void)s;
}
void fake_read_stop(tern__stream *s) {
  (void)s;
}
size_t fake_buffered(const tern__stream *s) {
  (void)s;
  return 0;
}

/* The connection-level window credit the adapter gives back, against
 * the DATA bytes the client sent. */
static uint64_t consumed, data_sent;
int counted_consume(nghttp2_session *s, int32_t id, size_t n) {
  consumed += n;
  return nghttp2_session_consume(s, id, n);
}
int counted_consume_connection(nghttp2_session *s, size_t n) {
  consumed += n;
  return nghttp2_session_consume_connection(s, n);
}

static uv_loop_t loop;
static tern_server *srv;
static tern__stream *S;    /* the server's connection */
static nghttp2_session *C; /* the client */

/* ---- The fake transport under the head --------------------------------- */

static void tp_close(tern__conn *c) {
  tern__stream *s = tern__stream_of(c);
  tern__outq_free(c->w, &s->out);
  if (s->rbuf != NULL)
    tern__rbuf_unref(c->w, s->rbuf);
  s->rbuf = NULL;
  tern__conn_closed(c);
}
static void tp_free(tern__conn *c) {
  free(tern__stream_of(c));
}
static const tern__transport fake_tp =
    FAKE_TRANSPORT(sizeof(tern__stream), tp_close, tp_free);

/* ---- The client ------------------------------------------------------- */

typedef struct {
  char body[1 << 17];
  size_t len;
  int status;
  int closed;
  uint32_t rst;
} resp;
static resp R[16];

static resp *resp_of(int32_t id) {
  return &R[(id / 2) % 16];
}

static int c_header(nghttp2_session *s, const nghttp2_frame *f,
                    const uint8_t *name, size_t nl, const uint8_t *value,
                    size_t vl, uint8_t flags, void *u) {
  (void)s;
  (void)flags;
  (void)u;
  (void)vl;
  if (nl == 7 && memcmp(name, ":status", 7) == 0)
    resp_of(f->hd.stream_id)->status = atoi((const char *)value);
  return 0;
}
static int c_data(nghttp2_session *s, uint8_t flags, int32_t id,
                  const uint8_t *d, size_t n, void *u) {
  resp *p = resp_of(id);
  (void)s;
  (void)flags;
  (void)u;
  if (p->len + n <= sizeof(p->body))
    memcpy(p->body + p->len, d, n);
  p->len += n;
  return 0;
}
static int c_sent(nghttp2_session *s, const nghttp2_frame *f, void *u) {
  (void)s;
  (void)u;
  if (f->hd.type == NGHTTP2_DATA)
    data_sent += f->hd.length;
  return 0;
}
static int c_close(nghttp2_session *s, int32_t id, uint32_t code, void *u) {
  (void)s;
  (void)u;
  resp_of(id)->closed = 1;
  resp_of(id)->rst = code;
  return 0;
}

/* The client's request body: `upload_len` bytes of a pattern. */
static size_t upload_len, upload_off;
static ssize_t c_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
                      uint32_t *flags, nghttp2_data_source *src, void *u) {
  size_t i, n = upload_len - upload_off;
  (void)s;
  (void)id;
  (void)src;
  (void)u;
  if (n > len)
    n = len;
  for (i = 0; i < n; i++)
    buf[i] = (uint8_t)('a' + (upload_off + i) % 26);
  upload_off += n;
  if (upload_off == upload_len)
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

/* Bytes both ways until neither side has more. */
static void exchange(void) {
  int rounds = 0, moved;
  do {
    const uint8_t *out;
    ssize_t n;
    uv_buf_t iov[16];
    size_t k, i, sent = 0;
    moved = 0;
    while ((n = nghttp2_session_mem_send(C, &out)) > 0) {
      while (n > 0) {
        size_t room;
        char *p = tern__stream_rbuf_room(S, &room);
        T_ASSERT(p != NULL);
        if (room > (size_t)n)
          room = (size_t)n;
        memcpy(p, out, room);
        S->rlen += room;
        out += room;
        n -= (ssize_t)room;
        S->head.proto->input(&S->head);
      }
      moved = 1;
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    k = tern__outq_iov(&S->out, iov, 16);
    for (i = 0; i < k; i++) {
      T_ASSERT(nghttp2_session_mem_recv(C, (const uint8_t *)iov[i].base,
                                        iov[i].len) == (ssize_t)iov[i].len);
      sent += iov[i].len;
    }
    if (sent > 0 || k > 0) {
      tern__outq_consume(S->head.w, &S->out, sent);
      moved = 1;
    }
  } while ((moved || (S->head.flags & TERN__C_DIRTY)) && ++rounds < 10000);
}

static void conn_open(void) {
  static const nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 65535}};
  nghttp2_session_callbacks *cb;
  tern__conn *c;

  memset(R, 0, sizeof(R));
  consumed = data_sent = 0;
  S = calloc(1, sizeof(*S));
  T_ASSERT(S != NULL);
  c = &S->head;
  c->w = &srv->workers[0];
  c->tp = &fake_tp;
  c->refs = 1;
  c->proto = tern__protocols[0];
  tern__conn_timer_init(c);
  tern__list_init(&c->dirty_link);
  tern__list_init(&c->all_link);
  tern__outq_init(&S->out);
  tern__conn_start(c);
  T_EQ_INT(tern__http2.attach(c, NULL), 0);
  T_EQ_INT(nghttp2_session_callbacks_new(&cb), 0);
  nghttp2_session_callbacks_set_on_header_callback(cb, c_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, c_sent);
  T_EQ_INT(nghttp2_session_client_new(&C, cb, NULL), 0);
  nghttp2_session_callbacks_del(cb);
  T_EQ_INT(nghttp2_submit_settings(C, NGHTTP2_FLAG_NONE, iv, 1), 0);
  exchange();
}

static void conn_close(void) {
  tern__conn_close(&S->head);
  uv_run(&loop, UV_RUN_NOWAIT);
  S = NULL;
  nghttp2_session_del(C);
  C = NULL;
}

static int32_t submit(const char *method, const char *path, size_t body) {
  nghttp2_nv nv[4];
  nghttp2_data_provider dp;
  const char *f[][2] = {{":method", method},
                        {":scheme", "http"},
                        {":authority", "t"},
                        {":path", path}};
  size_t i;
  for (i = 0; i < 4; i++) {
    nv[i].name = (uint8_t *)(uintptr_t)f[i][0];
    nv[i].namelen = strlen(f[i][0]);
    nv[i].value = (uint8_t *)(uintptr_t)f[i][1];
    nv[i].valuelen = strlen(f[i][1]);
    nv[i].flags = NGHTTP2_NV_FLAG_NONE;
  }
  upload_len = body;
  upload_off = 0;
  dp.source.ptr = NULL;
  dp.read_callback = c_read;
  return nghttp2_submit_request(C, NULL, nv, 4, body > 0 ? &dp : NULL, NULL);
}

/* The shared counts of the connection at rest: no request in progress,
 * no body byte held, nothing owed to the client's windows. */
static void at_rest(void) {
  h2_conn *h = (h2_conn *)S->h2;
  T_EQ_INT(h->m.nq, 0);
  T_EQ_INT(h->m.held, 0);
  T_EQ_INT(tern__list_empty(&h->m.streams), 1);
  /* Every DATA byte the client sent was credited back to the connection
   * (nghttp2 sends the WINDOW_UPDATE once half its window is used). */
  T_EQ_INT(consumed, data_sent);
}

/* ---- Handlers ---------------------------------------------------------- */

static const tern_header text = {"content-type", 12, "text/plain", 10};
static tern_request *parked; /* a paused reader, resumed by the test */
static size_t got;

static void h_hello(tern_request *r, void *u) {
  (void)u;
  tern_respond(r, 200, &text, 1, "hello", 5);
}

/* Reads the body; pauses after the first piece until the test resumes
 * it; answers with the byte count. */
static void count_body(tern_request *r, int ev, const char *p, size_t n,
                       void *u) {
  char msg[32];
  int len;
  (void)p;
  (void)u;
  if (ev == TERN_BODY_DATA) {
    got += n;
    if (parked == NULL) {
      parked = r;
      tern_request_pause(r);
    }
    return;
  }
  len = snprintf(msg, sizeof(msg), "%zu", got);
  tern_respond(r, 200, &text, 1, msg, (size_t)len);
}
static void h_count(tern_request *r, void *u) {
  (void)u;
  tern_request_read(r, count_body, NULL);
}

/* Answers before reading: the body's rest is dropped, and credited. */
static void h_early(tern_request *r, void *u) {
  (void)u;
  tern_respond(r, 200, &text, 1, "early", 5);
}

/* ---- Tests ------------------------------------------------------------- */

static void test_get(void) {
  int32_t id;
  conn_open();
  id = submit("GET", "/", 0);
  exchange();
  T_EQ_INT(resp_of(id)->status, 200);
  T_EQ_INT(resp_of(id)->len, 5);
  T_EQ_INT(memcmp(resp_of(id)->body, "hello", 5), 0);
  T_EQ_INT(resp_of(id)->closed, 1);
  at_rest();
  conn_close();
}

/* 200 kB, more than the stream's 64 KiB window, to a reader that pauses
 * after its first piece: the rest is held, the window closes, nothing is
 * credited until the handler resumes; then every byte arrives and the
 * counts come back to rest. */
static void test_paused_reader(void) {
  int32_t id;
  conn_open();
  got = 0;
  parked = NULL;
  id = submit("POST", "/count", 200000);
  exchange();
  T_ASSERT(parked != NULL);
  T_ASSERT(((h2_conn *)S->h2)->m.held > 0); /* held while paused */
  T_ASSERT(upload_off < upload_len);        /* the window stopped the client */
  T_EQ_INT(resp_of(id)->status, 0);
  T_EQ_INT(tern_request_resume(parked), 0);
  exchange();
  T_EQ_INT(resp_of(id)->status, 200);
  T_EQ_INT(got, 200000);
  T_EQ_INT(atoi(resp_of(id)->body), 200000);
  at_rest();
  conn_close();
}

/* A body nobody reads: answered first, its bytes dropped and credited,
 * so the client sends it all and the connection goes on. */
static void test_answered_early(void) {
  int32_t id, id2;
  conn_open();
  id = submit("POST", "/early", 150000);
  exchange();
  T_EQ_INT(resp_of(id)->status, 200);
  T_EQ_INT(resp_of(id)->closed, 1);
  id2 = submit("GET", "/", 0);
  exchange();
  T_EQ_INT(resp_of(id2)->status, 200);
  at_rest();
  conn_close();
}

int main(void) {
  tern_settings s;
  tern_route_options so;
  int port;

  tern_settings_init(&s);
  s.workers = 1;
  if (uv_loop_init(&loop) != 0 || tern_server_new(&s, &srv) != 0)
    return 1;
  tern_route(srv, "GET", "/", h_hello, NULL);
  tern_route(srv, "POST", "/early", h_early, NULL);
  tern_route_options_init(&so);
  so.flags = TERN_ROUTE_STREAM_BODY;
  tern_route_with(srv, "POST", "/count", h_count, NULL, &so);
  /* A listener only so that the worker runs as usual. */
  if (tern_listen(srv, "127.0.0.1", 0, &port) != 0 ||
      tern_attach(srv, &loop) != 0)
    return 1;
  uv_run(&loop, UV_RUN_NOWAIT);

  T_RUN(test_get);
  T_RUN(test_paused_reader);
  T_RUN(test_answered_early);

  tern_stop(srv, 100);
  uv_run(&loop, UV_RUN_DEFAULT);
  tern_server_free(srv);
  uv_loop_close(&loop);
  return T_DONE();
}
