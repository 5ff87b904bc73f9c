/* The HTTP/3 adapter (lib/http3/http3.c) against an nghttp3 client, with
 * a fake QUIC layer in between: stream bytes pass in memory, and the
 * test decides when the server's bytes are acknowledged and streams
 * close. What needs real packets (loss, flow control, the handshake) is
 * test/net's; this covers the adapter's own logic: header accounting
 * (431), 0-RTT (425), trailers, markers and acknowledgements, paused
 * bodies and their credit, early answers (413 then STOP_SENDING), resets,
 * limbo, the per-stream WRITE timer, graceful stop and requests that
 * outlive their connection.
 *
 * The adapter is compiled in here with its quic.h calls renamed to this
 * file's fakes, so the library's own QUIC layer and adapter stay as they
 * are in libtern.a.
 */
#define tern__quic_app_data fake_quic_app_data
#define tern__quic_set_app fake_quic_set_app
#define tern__quic_open_uni fake_quic_open_uni
#define tern__quic_uni_left fake_quic_uni_left
#define tern__quic_max_bidi fake_quic_max_bidi
#define tern__quic_credit fake_quic_credit
#define tern__quic_more_streams fake_quic_more_streams
#define tern__quic_shut_read fake_quic_shut_read
#define tern__quic_shut_write fake_quic_shut_write
#define tern__quic_shut fake_quic_shut
#define tern__quic_want_write fake_quic_want_write
#define tern__quic_close fake_quic_close
#define tern__quic_set_app_error fake_quic_set_app_error
#define tern__quic_wake_after fake_quic_wake_after
#define tern__quic_pto_ms fake_quic_pto_ms
#define tern__quic_early fake_quic_early
#define tern__quic_keep_alive fake_quic_keep_alive
#define tern__http3 fake_http3
#define tern__http3_app fake_http3_app
#define tern__quic fake_quic

#include "http3/http3.c"

#include <stdlib.h>

#include "fake_transport.h"
#include "t.h"

struct fake_quic {
  tern__conn head;
  void *app;
  int64_t next_uni;
  int want_write;
  uint64_t credited, conn_credited, more;
  int closed;
  uint64_t close_code;
  uint64_t app_error;
  uint64_t shut_rd_code[256], shut_wr_code[256];
  int nshut_rd, nshut_wr;
  int hold_acks;   /* do not acknowledge the server's bytes */
  int keep_alive;  /* tern__quic_keep_alive's last word */
  int keep_alives; /* how often it was turned on */
  int ctrl_writes, ctrl_writes_at_close; /* our control stream (id 3) */
  int64_t stopping[16]; /* STOP_SENDINGs to write (ngtcp2 tells the app) */
  int nstopping;
  uint64_t unacked[64];
  uint64_t rx_off[4096]; /* bytes handed to recv, by client stream id / 2 */
  int early;
  int freed;
};

static fake_quic *Q;
static nghttp3_conn *cl;

void *fake_quic_app_data(const fake_quic *q) {
  return q->app;
}
void fake_quic_set_app(fake_quic *q, void *app) {
  q->app = app;
}
int fake_quic_open_uni(fake_quic *q, int64_t *id) {
  *id = q->next_uni;
  q->next_uni += 4;
  return 0;
}
uint64_t fake_quic_uni_left(fake_quic *q) {
  (void)q;
  return 3;
}
uint64_t fake_quic_max_bidi(fake_quic *q) {
  (void)q;
  return 100;
}
int fake_quic_credit(fake_quic *q, int64_t id, uint64_t n) {
  if (id < 0)
    q->conn_credited += n;
  else
    q->credited += n;
  return 0;
}
void fake_quic_more_streams(fake_quic *q, uint64_t n) {
  q->more += n;
}
int fake_quic_shut_read(fake_quic *q, int64_t id, uint64_t code) {
  q->shut_rd_code[q->nshut_rd++ % 256] = code;
  if (q->nstopping < 16)
    q->stopping[q->nstopping++] = id;
  return 0;
}
int fake_quic_shut_write(fake_quic *q, int64_t id, uint64_t code) {
  (void)id;
  q->shut_wr_code[q->nshut_wr++ % 256] = code;
  return 0;
}
int fake_quic_shut(fake_quic *q, int64_t id, uint64_t code) {
  fake_quic_shut_read(q, id, code);
  return fake_quic_shut_write(q, id, code);
}
void fake_quic_want_write(fake_quic *q) {
  q->want_write = 1;
}
void fake_quic_close(fake_quic *q, uint64_t code, const char *reason) {
  (void)reason;
  q->closed++;
  q->close_code = code;
  q->ctrl_writes_at_close = q->ctrl_writes;
}
void fake_quic_set_app_error(fake_quic *q, uint64_t code) {
  q->app_error = code;
}
void fake_quic_wake_after(fake_quic *q, uint64_t ms) {
  (void)q;
  (void)ms;
}
/* Long enough that the exchange right after a stop never spans it, even
 * on a loaded machine: the final GOAWAY must wait for the next pass. */
#define FAKE_PTO_MS 200
uint64_t fake_quic_pto_ms(fake_quic *q) {
  (void)q;
  return FAKE_PTO_MS;
}
int fake_quic_early(fake_quic *q) {
  return q->early;
}
/* Only WebSocket tunnels turn it on; test_ws_h3.py checks the PINGs. */
void fake_quic_keep_alive(fake_quic *q, int on) {
  q->keep_alive = on;
  q->keep_alives += on;
}

/* ---- The fake transport under the head ---- */

static void tp_close(tern__conn *c) {
  fake_quic *q = (fake_quic *)(void *)c;
  fake_http3_app.free(q);
  q->freed = 1;
  tern__conn_closed(c);
}
static void tp_free(tern__conn *c) {
  free(c);
}
static const tern__transport fake_tp =
    FAKE_TRANSPORT(sizeof(fake_quic), tp_close, tp_free);

/* ---- The client's view of each stream ---- */

typedef struct {
  char body[1 << 19];
  size_t len;
  int status;
  int ended;
  char trailer[256];
  int srv_fin, cl_fin, closed;
} resp;
static resp R[64];
static resp *resp_of(int64_t id) {
  return &R[(id / 4) % 64];
}

static int c_header(nghttp3_conn *c, int64_t id, int32_t token,
                    nghttp3_rcbuf *name, nghttp3_rcbuf *value, uint8_t flags,
                    void *u, void *su) {
  nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
  (void)c;
  (void)name;
  (void)flags;
  (void)u;
  (void)su;
  if (token == NGHTTP3_QPACK_TOKEN__STATUS)
    resp_of(id)->status = atoi((const char *)v.base);
  return 0;
}
static int c_trailer(nghttp3_conn *c, int64_t id, int32_t token,
                     nghttp3_rcbuf *name, nghttp3_rcbuf *value, uint8_t flags,
                     void *u, void *su) {
  nghttp3_vec n = nghttp3_rcbuf_get_buf(name), v = nghttp3_rcbuf_get_buf(value);
  resp *p = resp_of(id);
  size_t l = strlen(p->trailer);
  (void)c;
  (void)flags;
  (void)u;
  (void)su;
  (void)token;
  snprintf(p->trailer + l, sizeof(p->trailer) - l, "%.*s=%.*s;", (int)n.len,
           (const char *)n.base, (int)v.len, (const char *)v.base);
  return 0;
}
static int c_data(nghttp3_conn *c, int64_t id, const uint8_t *d, size_t n,
                  void *u, void *su) {
  resp *p = resp_of(id);
  (void)c;
  (void)u;
  (void)su;
  if (p->len + n <= sizeof(p->body))
    memcpy(p->body + p->len, d, n);
  p->len += n;
  return 0;
}
static int c_end(nghttp3_conn *c, int64_t id, void *u, void *su) {
  (void)c;
  (void)u;
  (void)su;
  resp_of(id)->ended = 1;
  return 0;
}

/* The client's request body. */
static const char *upload;
static size_t upload_len, upload_off;
static int upload_more; /* 0: the body ends where it is */
static nghttp3_ssize c_read(nghttp3_conn *c, int64_t id, nghttp3_vec *vec,
                            size_t cnt, uint32_t *flags, void *u, void *su) {
  (void)c;
  (void)id;
  (void)cnt;
  (void)u;
  (void)su;
  if (upload_off == upload_len) {
    if (upload_more)
      return NGHTTP3_ERR_WOULDBLOCK;
    *flags |= NGHTTP3_DATA_FLAG_EOF;
    return 0;
  }
  vec[0].base = (uint8_t *)(uintptr_t)upload + upload_off;
  vec[0].len = upload_len - upload_off;
  upload_off = upload_len;
  if (!upload_more)
    *flags |= NGHTTP3_DATA_FLAG_EOF;
  return 1;
}

static uv_loop_t loop;
static tern_server *srv;

/* A request stream both sides have finished and the client has all of
 * closes, as QUIC would close it. */
static void close_stream(int64_t id, uint64_t code) {
  resp *p = resp_of(id);
  p->closed = 1;
  nghttp3_conn_close_stream(cl, id, code);
  fake_http3_app.closed(Q, id, code);
}

static void check_close(int64_t id) {
  resp *p = resp_of(id);
  if ((id & 3) == 0 && p->srv_fin && p->cl_fin && !p->closed && !Q->hold_acks)
    close_stream(id, 0);
}

/* Move bytes both ways (and run the worker's loop) until nothing moves. */
static void exchange(void) {
  int moved, rounds = 0;
  do {
    int64_t id;
    int fin;
    moved = 0;
    uv_run(&loop, UV_RUN_NOWAIT);
    if (Q->freed)
      return;
    /* ngtcp2 0.12 calls stream_stop_sending as our STOP_SENDING goes
     * into a packet. */
    while (Q->nstopping > 0) {
      int64_t sid = Q->stopping[--Q->nstopping];
      T_EQ_INT(fake_http3_app.stop_sending(Q, sid, 0), 0);
      moved = 1;
    }
    for (;;) {
      tern__qvec qv[16];
      size_t i, n = 0;
      int k = fake_http3_app.next(Q, &id, &fin, qv, 16);
      T_ASSERT(k >= 0);
      if (id < 0)
        break;
      for (i = 0; i < (size_t)k; i++) {
        T_ASSERT(nghttp3_conn_read_stream(cl, id, qv[i].base, qv[i].len,
                                          fin && i + 1 == (size_t)k) >= 0);
        n += qv[i].len;
      }
      if (k == 0 && fin)
        nghttp3_conn_read_stream(cl, id, NULL, 0, 1);
      fake_http3_app.written(Q, id, n);
      if (id == 3 && n > 0)
        Q->ctrl_writes++;
      if (fin)
        resp_of(id)->srv_fin = 1;
      if (!Q->hold_acks)
        fake_http3_app.acked(Q, id, n);
      else if ((id & 3) == 0)
        Q->unacked[(id / 4) % 64] += n;
      check_close(id);
      moved = 1;
    }
    for (;;) {
      nghttp3_vec v[16];
      size_t i, n = 0;
      nghttp3_ssize k = nghttp3_conn_writev_stream(cl, &id, &fin, v, 16);
      if (k < 0 || id < 0)
        break;
      T_ASSERT(id / 2 < 4096);
      for (i = 0; i < (size_t)k; i++) {
        fake_http3_app.recv(Q, id, Q->rx_off[id / 2], v[i].base, v[i].len,
                            fin && i + 1 == (size_t)k, Q->early);
        Q->rx_off[id / 2] += v[i].len;
        n += v[i].len;
      }
      if (k == 0 && fin)
        fake_http3_app.recv(Q, id, Q->rx_off[id / 2], NULL, 0, 1, Q->early);
      nghttp3_conn_add_write_offset(cl, id, n);
      nghttp3_conn_add_ack_offset(cl, id, n);
      if (fin)
        resp_of(id)->cl_fin = 1;
      check_close(id);
      moved = 1;
    }
    if (!Q->freed)
      Q->head.proto->input(&Q->head);
    uv_run(&loop, UV_RUN_NOWAIT);
  } while ((moved || Q->want_write-- > 0) && ++rounds < 10000);
  Q->want_write = 0;
}

static void ack_all(void) {
  int i;
  Q->hold_acks = 0;
  for (i = 0; i < 64; i++) {
    if (Q->unacked[i]) {
      fake_http3_app.acked(Q, i * 4, Q->unacked[i]);
      Q->unacked[i] = 0;
      check_close(i * 4);
    }
  }
}

/* A fresh QUIC connection on the worker, its HTTP/3 started, and a client
 * for it. */
static void conn_open(void) {
  static const nghttp3_callbacks ccb = {
      .recv_header = c_header,
      .recv_trailer = c_trailer,
      .recv_data = c_data,
      .end_stream = c_end,
  };
  nghttp3_settings cs;
  tern__conn *c;

  memset(R, 0, sizeof(R));
  Q = calloc(1, sizeof(*Q));
  T_ASSERT(Q != NULL);
  c = &Q->head;
  c->w = &srv->workers[0];
  c->tp = &fake_tp;
  c->refs = 1;
  tern__conn_timer_init(c);
  tern__list_init(&c->dirty_link);
  tern__list_init(&c->all_link);
  Q->next_uni = 3;
  c->proto = &fake_http3;
  tern__conn_start(c);
  T_EQ_INT(fake_http3_app.start(Q), 0);
  nghttp3_settings_default(&cs);
  T_EQ_INT(nghttp3_conn_client_new(&cl, &ccb, &cs, NULL, NULL), 0);
  nghttp3_conn_bind_control_stream(cl, 2);
  nghttp3_conn_bind_qpack_streams(cl, 6, 10);
}

/* Q may be freed by the close (its last reference goes): not used after. */
static void conn_close(void) {
  if (Q != NULL && !Q->freed)
    tern__conn_close(&Q->head);
  Q = NULL;
  uv_run(&loop, UV_RUN_NOWAIT);
  nghttp3_conn_del(cl);
  cl = NULL;
}

static void submit(int64_t id, const char *method, const char *path,
                   const nghttp3_nv *extra, size_t nextra, int body) {
  nghttp3_nv nv[40];
  size_t n = 0, i;
  static const nghttp3_data_reader dr = {c_read};
#define NV(a, b)                                                               \
  nv[n].name = (uint8_t *)(uintptr_t)(a);                                      \
  nv[n].namelen = strlen(a);                                                   \
  nv[n].value = (uint8_t *)(uintptr_t)(b);                                     \
  nv[n].valuelen = strlen(b);                                                  \
  nv[n++].flags = 0
  NV(":method", method);
  NV(":scheme", "https");
  NV(":authority", "localhost");
  NV(":path", path);
  for (i = 0; i < nextra; i++)
    nv[n++] = extra[i];
  memset(resp_of(id), 0, sizeof(resp));
  T_EQ_INT(nghttp3_conn_submit_request(cl, id, nv, n, body ? &dr : NULL, NULL),
           0);
}

/* ---- Routes ---- */

static const tern_header tp[] = {{"Content-Type", 12, "text/plain", 10}};
static int wrong_protocol, early_seen;
static void h_hello(tern_request *r, void *u) {
  (void)u;
  if (tern_request_protocol(r) != TERN_PROTO_HTTP3)
    wrong_protocol++;
  early_seen += tern_request_early(r);
  tern_respond(r, 200, tp, 1, "hello\n", 6);
}
static void h_trailers(tern_request *r, void *u) {
  static const tern_header t[] = {{"x-checksum", 10, "abc123", 6}};
  (void)u;
  tern_response_start(r, 200, tp, 1, -1);
  tern_response_write(r, "row 1\nrow 2\n", 12, NULL, NULL);
  tern_response_end(r, t, 1);
}
static char big[300000];
static int big_released;
static void big_release(void *p, void *u) {
  (void)p;
  (void)u;
  big_released++;
}
static void h_big(tern_request *r, void *u) {
  (void)u;
  tern_respond_ref(r, 200, tp, 1, big, sizeof(big), big_release, NULL);
}
static int echo_errors;
static void echo_body(tern_request *r, int ev, const char *p, size_t n,
                      void *u) {
  (void)u;
  if (ev == TERN_BODY_DATA) {
    tern_response_write(r, p, n, NULL, NULL);
    return;
  }
  if (ev == TERN_BODY_ERROR)
    echo_errors++;
  tern_response_end(r, NULL, 0);
}
static void h_echo(tern_request *r, void *u) {
  (void)u;
  tern_response_start(r, 200, tp, 1, -1);
  tern_request_read(r, echo_body, NULL);
}
static void h_collect(tern_request *r, void *u) {
  size_t n;
  const char *b = tern_request_body(r, &n);
  (void)u;
  tern_respond(r, 200, tp, 1, b, n);
}
static int dones, done_failed;
static void on_done(tern_request *r, int st, void *u) {
  (void)r;
  (void)u;
  dones++;
  done_failed += st != 0;
}
static void h_marks(tern_request *r, void *u) {
  (void)u;
  tern_response_start(r, 200, tp, 1, -1);
  tern_response_write(r, "aaaa", 4, on_done, NULL);
  tern_response_write(r, NULL, 0, on_done, NULL);
  tern_response_end(r, NULL, 0);
}
static void h_interim(tern_request *r, void *u) {
  static const tern_header l[] = {{"link", 4, "</a.css>; rel=preload", 21}};
  (void)u;
  tern_respond_interim(r, 103, l, 1);
  tern_respond(r, 200, tp, 1, "ok", 2);
}
static void h_abort(tern_request *r, void *u) {
  (void)u;
  tern_response_start(r, 200, tp, 1, 10);
  tern_response_write(r, "abc", 3, NULL, NULL);
  tern_response_end(r, NULL, 0); /* short of its length: aborted */
}
static int ws_seen;
static void h_ws(tern_request *r, void *u) {
  size_t n;
  const char *m = tern_request_method(r, &n);
  (void)u;
  if ((r->flags & TERN__RQ_WS_CONNECT) && n == 3 && memcmp(m, "GET", 3) == 0 &&
      r->ops->tunnel(r, NULL, 0) == 0)
    ws_seen++;
  tern__response_end(r, NULL, 0);
}
static tern_request *paused_req;
static size_t pause_total;
static void pause_body(tern_request *r, int ev, const char *p, size_t n,
                       void *u) {
  (void)p;
  (void)u;
  if (ev == TERN_BODY_DATA) {
    pause_total += n;
    if (paused_req == NULL) {
      paused_req = r;
      tern_request_pause(r);
    }
  } else {
    tern_respond(r, 200, tp, 1, "done", 4);
  }
}
static void h_pause(tern_request *r, void *u) {
  (void)u;
  tern_request_read(r, pause_body, NULL);
}
static tern_request *held[2];
static int nheld, gone_calls;
static void on_gone(tern_request *r, void *u) {
  (void)r;
  (void)u;
  gone_calls++;
}
static void h_hold(tern_request *r, void *u) {
  (void)u;
  held[nheld++] = r;
  tern_request_on_gone(r, on_gone, NULL);
}

/* ---- Cases ---- */

static void test_get_trailers_404(void) {
  conn_open();
  submit(0, "GET", "/", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(0)->status, 200);
  T_EQ_STR(resp_of(0)->body, resp_of(0)->len, "hello\n");
  T_ASSERT(resp_of(0)->ended && resp_of(0)->closed);
  T_EQ_INT(Q->more, 1); /* the closed stream is granted again */
  T_EQ_INT(wrong_protocol, 0);
  submit(4, "GET", "/trailers", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(4)->status, 200);
  T_EQ_STR(resp_of(4)->body, resp_of(4)->len, "row 1\nrow 2\n");
  T_ASSERT(strcmp(resp_of(4)->trailer, "x-checksum=abc123;") == 0);
  submit(8, "GET", "/nope", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(8)->status, 404);
  submit(12, "GET", "/interim", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(12)->status, 200); /* after the 103 */
  T_EQ_INT(Q->head.proto->busy(&Q->head), 0);
  conn_close();
}

/* nghttp3 0.8 only announces the field section size: tern counts. */
static void test_header_limits(void) {
  static char longv[3000];
  nghttp3_nv nv[40];
  size_t i;
  conn_open();
  memset(longv, 'v', sizeof(longv) - 1);
  nv[0].name = (uint8_t *)"x-long";
  nv[0].namelen = 6;
  nv[0].value = (uint8_t *)longv;
  nv[0].valuelen = sizeof(longv) - 1; /* past max_head_size (2000) */
  nv[0].flags = 0;
  submit(0, "GET", "/", nv, 1, 0);
  exchange();
  T_EQ_INT(resp_of(0)->status, 431);
  for (i = 0; i < 40; i++) { /* past max_header_count (30) */
    static char names[40][8];
    snprintf(names[i], sizeof(names[i]), "x-%zu", i);
    nv[i].name = (uint8_t *)names[i];
    nv[i].namelen = strlen(names[i]);
    nv[i].value = (uint8_t *)"v";
    nv[i].valuelen = 1;
    nv[i].flags = 0;
  }
  submit(4, "GET", "/", nv, 36, 0);
  exchange();
  T_EQ_INT(resp_of(4)->status, 431);
  submit(8, "GET", "/", nv, 20, 0); /* within both */
  exchange();
  T_EQ_INT(resp_of(8)->status, 200);
  conn_close();
}

/* A head from 0-RTT may be a replay: 425 unless the method is safe. */
static void test_early_data(void) {
  conn_open();
  early_seen = 0;
  Q->early = 1;
  submit(0, "POST", "/", NULL, 0, 0);
  submit(4, "GET", "/", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(0)->status, 425);
  T_EQ_INT(resp_of(4)->status, 200);
  T_EQ_INT(early_seen, 1); /* the GET, marked replayable */
  Q->early = 0;
  submit(8, "POST", "/", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(8)->status, 200);
  T_EQ_INT(early_seen, 1);
  conn_close();
}

/* Response bytes stay queued until acknowledged; a write's done runs
 * then. */
static void test_acks_and_markers(void) {
  conn_open();
  Q->hold_acks = 1;
  big_released = 0;
  submit(0, "GET", "/big", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(0)->len, sizeof(big));
  T_EQ_INT(big_released, 0); /* sent, not yet acknowledged */
  T_ASSERT(!resp_of(0)->closed);
  ack_all();
  exchange();
  T_EQ_INT(big_released, 1);
  T_ASSERT(resp_of(0)->closed);
  dones = done_failed = 0;
  submit(4, "GET", "/marks", NULL, 0, 0);
  exchange();
  T_EQ_INT(dones, 2);
  T_EQ_INT(done_failed, 0);
  conn_close();
}

static void test_bodies(void) {
  static char up[100000];
  size_t i;
  uint64_t before;
  for (i = 0; i < sizeof(up); i++)
    up[i] = (char)('a' + i % 26);
  conn_open();
  upload = up;
  upload_len = sizeof(up);
  upload_off = 0;
  upload_more = 0;
  before = Q->credited;
  submit(0, "POST", "/echo", NULL, 0, 1);
  exchange();
  T_EQ_INT(resp_of(0)->status, 200);
  T_EQ_INT(resp_of(0)->len, sizeof(up));
  T_ASSERT(memcmp(resp_of(0)->body, up, sizeof(up)) == 0);
  T_ASSERT(Q->credited - before >= sizeof(up)); /* all of it consumed */
  upload_off = 0;
  submit(4, "POST", "/collect", NULL, 0, 1);
  exchange();
  T_EQ_INT(resp_of(4)->status, 200);
  T_EQ_INT(resp_of(4)->len, sizeof(up));

  /* Paused: what arrives is held, not credited; resumed, it is. */
  paused_req = NULL;
  pause_total = 0;
  upload_off = 0;
  upload_len = 50000;
  upload_more = 1;
  submit(8, "POST", "/pause", NULL, 0, 1);
  exchange();
  T_ASSERT(paused_req != NULL);
  before = Q->credited;
  upload_len = 60000;
  nghttp3_conn_resume_stream(cl, 8);
  exchange();
  T_ASSERT(Q->credited - before < 100); /* frame headers only */
  upload_more = 0;
  nghttp3_conn_resume_stream(cl, 8);
  tern_request_resume(paused_req);
  exchange();
  T_EQ_INT(resp_of(8)->status, 200);
  T_EQ_INT(pause_total, 60000);
  T_ASSERT(Q->credited - before >= 10000);

  /* An early answer (413): the client is asked to stop, without error. */
  {
    int n = Q->nshut_rd;
    upload_off = 0;
    upload_len = sizeof(up);
    upload_more = 1;
    submit(12, "POST", "/small", NULL, 0, 1);
    exchange();
    T_EQ_INT(resp_of(12)->status, 413);
    T_EQ_INT(Q->nshut_rd, n + 1);
    T_EQ_INT(Q->shut_rd_code[n], NGHTTP3_H3_NO_ERROR);
    T_EQ_INT(Q->nshut_wr, 0); /* the answer itself is not reset */
    upload_more = 0;
    fake_http3_app.reset(Q, 12, NGHTTP3_H3_NO_ERROR);
    close_stream(12, 0);
    exchange();
  }
  conn_close();
}

static void test_resets(void) {
  static char up[1000];
  conn_open();
  /* A reset mid-upload: the reading handler hears TERN_BODY_ERROR. */
  upload = up;
  upload_off = 0;
  upload_len = sizeof(up);
  upload_more = 1;
  echo_errors = 0;
  submit(0, "POST", "/echo", NULL, 0, 1);
  exchange();
  T_EQ_INT(resp_of(0)->len, sizeof(up));
  fake_http3_app.reset(Q, 0, NGHTTP3_H3_REQUEST_CANCELLED);
  exchange();
  T_EQ_INT(echo_errors, 1);
  T_EQ_INT(Q->nshut_wr, 1);
  T_EQ_INT(Q->shut_wr_code[0], NGHTTP3_H3_REQUEST_CANCELLED);
  upload_more = 0;

  /* An aborted response resets its stream alone. */
  submit(4, "GET", "/abort", NULL, 0, 0);
  exchange();
  T_EQ_INT(Q->nshut_wr, 2);
  T_EQ_INT(Q->shut_wr_code[1], NGHTTP3_H3_INTERNAL_ERROR);
  submit(8, "GET", "/", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(8)->status, 200);

  /* Limbo: what ngtcp2 may still resend stays until QUIC's close. */
  Q->hold_acks = 1;
  big_released = 0;
  submit(12, "GET", "/big", NULL, 0, 0);
  exchange();
  T_EQ_INT(resp_of(12)->len, sizeof(big));
  fake_http3_app.shut_wr(Q, 12); /* the client's STOP_SENDING */
  exchange();
  T_EQ_INT(Q->nshut_wr, 3);
  T_EQ_INT(big_released, 0);
  memset(Q->unacked, 0, sizeof(Q->unacked));
  Q->hold_acks = 0;
  close_stream(12, NGHTTP3_H3_REQUEST_CANCELLED);
  exchange();
  T_EQ_INT(big_released, 1);
  T_EQ_INT(Q->head.proto->busy(&Q->head), 0);
  conn_close();
}

/* RFC 9220: routed like HTTP/2's extended CONNECT. */
static void test_extended_connect(void) {
  nghttp3_nv nv;
  conn_open();
  nv.name = (uint8_t *)":protocol";
  nv.namelen = 9;
  nv.value = (uint8_t *)"websocket";
  nv.valuelen = 9;
  nv.flags = 0;
  ws_seen = 0;
  submit(0, "GET", "/", NULL, 0, 0);
  exchange();
  T_EQ_INT(Q->keep_alives, 0); /* requests alone keep QUIC's idle rule */
  submit(4, "CONNECT", "/ws", &nv, 1, 0);
  exchange();
  T_EQ_INT(ws_seen, 1);
  T_EQ_INT(resp_of(4)->status, 200);
  /* While the tunnel was open an idle WebSocket could not let QUIC's idle
   * timeout end the connection; both sides ended it, so that is over. */
  T_EQ_INT(Q->keep_alives, 1);
  T_EQ_INT(Q->keep_alive, 0);
  conn_close();
}

/* A client that acknowledges nothing cannot hold a response for good. */
static void test_write_timer(void) {
  int k;
  conn_open();
  Q->hold_acks = 1;
  submit(0, "GET", "/big", NULL, 0, 0);
  exchange();
  for (k = 0; k < 100 && Q->nshut_wr == 0; k++) {
    uv_sleep(10);
    exchange();
  }
  T_EQ_INT(Q->nshut_wr, 1);
  T_EQ_INT(Q->shut_wr_code[0], NGHTTP3_H3_REQUEST_CANCELLED);
  T_ASSERT(k >= 15); /* not before body_timeout_ms (200) */
  conn_close();
}

/* Notice, final GOAWAY, and only once that is out, the close. */
static void test_graceful_stop(void) {
  int base;
  conn_open();
  submit(0, "GET", "/", NULL, 0, 0);
  exchange();
  base = Q->ctrl_writes;
  Q->head.proto->stop(&Q->head);
  exchange();
  T_EQ_INT(Q->closed, 0); /* the notice; the final GOAWAY a PTO later */
  uv_sleep(FAKE_PTO_MS + 10);
  tern__conn_want_output(&Q->head);
  exchange();
  exchange();
  T_EQ_INT(Q->closed, 1);
  T_EQ_INT(Q->close_code, NGHTTP3_H3_NO_ERROR);
  T_EQ_INT(Q->ctrl_writes_at_close - base, 2); /* both GOAWAYs first */
  conn_close();
}

/* Requests a handler holds outlive their connection, and with it
 * nghttp3's: their fields (in nghttp3's buffers) stay readable. */
static void test_held_after_close(void) {
  nghttp3_nv nv;
  size_t n;
  const char *v;
  conn_open();
  nheld = gone_calls = 0;
  nv.name = (uint8_t *)"x-custom-field";
  nv.namelen = 14;
  nv.value = (uint8_t *)"some value that is indexed";
  nv.valuelen = 26;
  nv.flags = 0;
  submit(0, "GET", "/hold", &nv, 1, 0);
  exchange();
  submit(4, "GET", "/hold", &nv, 1, 0);
  exchange();
  T_EQ_INT(nheld, 2);
  T_EQ_INT(Q->head.proto->busy(&Q->head), 2);
  tern__conn_close(&Q->head); /* Q lives while the requests do */
  Q = NULL;
  T_EQ_INT(gone_calls, 2);
  v = tern_request_header(held[1], "x-custom-field", 14, &n);
  T_ASSERT(v != NULL);
  T_EQ_STR(v, n, "some value that is indexed");
  T_EQ_INT(tern_respond(held[0], 200, NULL, 0, "late", 4), TERN_ECLOSED);
  T_EQ_INT(tern_respond(held[1], 200, NULL, 0, "late", 4), TERN_ECLOSED);
  conn_close();
}

int main(void) {
  tern_settings s;
  tern_route_options so;
  int port;

  memset(big, 'x', sizeof(big));
  tern_settings_init(&s);
  s.workers = 1;
  s.max_head_size = 2000;
  s.max_header_count = 30;
  s.body_timeout_ms = 200;
  if (uv_loop_init(&loop) != 0 || tern_server_new(&s, &srv) != 0)
    return 1;
  tern_route(srv, "GET", "/", h_hello, NULL);
  tern_route(srv, "POST", "/", h_hello, NULL);
  tern_route(srv, "GET", "/trailers", h_trailers, NULL);
  tern_route(srv, "GET", "/big", h_big, NULL);
  tern_route(srv, "GET", "/marks", h_marks, NULL);
  tern_route(srv, "GET", "/interim", h_interim, NULL);
  tern_route(srv, "GET", "/abort", h_abort, NULL);
  tern_route(srv, "GET", "/ws", h_ws, NULL);
  tern_route(srv, "GET", "/hold", h_hold, NULL);
  tern_route(srv, "POST", "/collect", h_collect, NULL);
  tern_route_options_init(&so);
  so.flags = TERN_ROUTE_STREAM_BODY;
  tern_route_with(srv, "POST", "/echo", h_echo, NULL, &so);
  tern_route_with(srv, "POST", "/pause", h_pause, NULL, &so);
  tern_route_options_init(&so);
  so.max_body_size = 10;
  tern_route_with(srv, "POST", "/small", h_collect, NULL, &so);
  /* A listener only so that the worker runs as usual. */
  if (tern_listen(srv, "127.0.0.1", 0, &port) != 0 ||
      tern_attach(srv, &loop) != 0)
    return 1;
  uv_run(&loop, UV_RUN_NOWAIT);

  T_RUN(test_get_trailers_404);
  T_RUN(test_header_limits);
  T_RUN(test_early_data);
  T_RUN(test_acks_and_markers);
  T_RUN(test_bodies);
  T_RUN(test_resets);
  T_RUN(test_extended_connect);
  T_RUN(test_write_timer);
  T_RUN(test_graceful_stop);
  T_RUN(test_held_after_close);

  tern_stop(srv, 100);
  uv_run(&loop, UV_RUN_DEFAULT);
  tern_server_free(srv);
  uv_loop_close(&loop);
  return T_DONE();
}
