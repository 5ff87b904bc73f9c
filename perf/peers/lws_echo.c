/*
 * lws_echo.c - the libwebsockets peer for the tern benchmarks (ws-echo).
 *
 * libwebsockets (Debian's 4.1.6) on its own poll loop, one service thread
 * (the process has one thread), like tern's `reference --workers 1`.
 *
 *   lws_echo --port N [--max-conns M]
 *       N: 0 = any; prints "listening on PORT", flushed.  Listens on
 *          127.0.0.1 only.  SIGINT or SIGTERM stops it.
 *       M: accepted for the driver's sake; does nothing.
 *
 *   GET /    200 "Hello, World!" (text/plain), HTTP/1.1 keep-alive
 *   /ws      WebSocket echo: each message comes back whole, text as text,
 *            binary as binary; permessage-deflate (RFC 7692) when the
 *            client offers it, through lws's own extension
 *            (lws_extension_callback_pm_deflate: its defaults, zlib
 *            level 1, but for the buffer sizes, see RX_BUFFER)
 *   anything else: 404 (an upgrade to another path is refused)
 *
 * Messages are assembled whole: lws hands a message to LWS_CALLBACK_RECEIVE
 * in pieces (per frame, per rx buffer, per inflated chunk), and the last
 * piece is the one for which lws_is_final_fragment() holds (lws counts the
 * frame's remaining payload and the extension's pending output in it).
 * Each assembled message is one allocation (LWS_PRE bytes of headroom for
 * lws's frame header, then the payload) that goes on the connection's
 * queue; LWS_CALLBACK_SERVER_WRITEABLE writes one message per call, as lws
 * requires, and asks for another call while the queue is not empty.
 * Backpressure: when a connection's queue holds more than QUEUE_HIGH bytes
 * (the client sends faster than it reads), reading from it stops
 * (lws_rx_flow_control) until the queue drains below QUEUE_LOW.
 *
 * Build: cc -std=c11 -O2 lws_echo.c -lwebsockets
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <libwebsockets.h>

/* lws's permessage-deflate, with its defaults (1 KiB inflate and deflate
 * buffers, capped by the protocol's rx buffer, 4 KiB by default), aborts
 * on an assertion (extension-permessage-deflate.c:351, priv->rx.avail_out)
 * once a compressed message inflates past about 4 KiB (seen with 5000-byte
 * messages; upstream issue #2120). 64 KiB buffers (2^16, the pmd options
 * rx_buf_size and tx_buf_size, set per connection) avoid it for every size
 * tried, up to 100 kB; the 128-byte messages of ws-echo never came near. */
#define RX_BUFFER 65536
#define PMD_BUF_POWER "16"

#define QUEUE_HIGH (1u << 20)
#define QUEUE_LOW (QUEUE_HIGH / 4)

static const char hello_body[] = "Hello, World!";

struct msg {
  struct msg *next;
  size_t len, cap;
  int binary;
  unsigned char buf[]; /* LWS_PRE, then the payload */
};

/* Per connection (HTTP or WebSocket). */
struct pss {
  struct msg *head, *tail; /* whole messages waiting to be echoed */
  size_t queued;           /* their payload bytes */
  struct msg *cur;         /* the message being assembled */
  struct msg *written;     /* the last one passed to lws_write */
  int throttled;           /* rx flow control is off */
  int hello_pending;       /* GET /: the body is still to be written */
};

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static void free_queue(struct pss *p) {
  while (p->head != NULL) {
    struct msg *m = p->head;
    p->head = m->next;
    free(m);
  }
  p->tail = NULL;
  p->queued = 0;
  free(p->cur);
  p->cur = NULL;
  free(p->written);
  p->written = NULL;
}

/* Append len bytes to the message being assembled. */
static int append(struct pss *p, const void *in, size_t len) {
  struct msg *m = p->cur;
  if (m->len + len > m->cap) {
    size_t cap = m->cap * 2;
    while (cap < m->len + len)
      cap *= 2;
    m = realloc(m, sizeof(*m) + LWS_PRE + cap);
    if (m == NULL)
      return -1;
    m->cap = cap;
    p->cur = m;
  }
  memcpy(m->buf + LWS_PRE + m->len, in, len);
  m->len += len;
  return 0;
}

static int on_http(struct lws *wsi, struct pss *p, const char *uri) {
  unsigned char buf[LWS_PRE + 512];
  unsigned char *start = buf + LWS_PRE, *q = start, *end = buf + sizeof(buf);
  if (strcmp(uri, "/") != 0) {
    if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL))
      return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
  }
  if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, "text/plain",
                                  sizeof(hello_body) - 1, &q, end) ||
      lws_finalize_write_http_header(wsi, start, &q, end))
    return -1;
  p->hello_pending = 1;
  lws_callback_on_writable(wsi);
  return 0;
}

static int on_http_writeable(struct lws *wsi, struct pss *p) {
  unsigned char buf[LWS_PRE + sizeof(hello_body)];
  if (!p->hello_pending)
    return 0;
  p->hello_pending = 0;
  memcpy(buf + LWS_PRE, hello_body, sizeof(hello_body) - 1);
  if (lws_write(wsi, buf + LWS_PRE, sizeof(hello_body) - 1,
                LWS_WRITE_HTTP_FINAL) != (int)sizeof(hello_body) - 1)
    return -1;
  return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int on_receive(struct lws *wsi, struct pss *p, const void *in,
                      size_t len) {
  if (p->cur == NULL) { /* the first piece of a message */
    size_t cap = len > 256 ? len : 256;
    p->cur = malloc(sizeof(*p->cur) + LWS_PRE + cap);
    if (p->cur == NULL)
      return -1;
    p->cur->next = NULL;
    p->cur->len = 0;
    p->cur->cap = cap;
    p->cur->binary = lws_frame_is_binary(wsi);
  }
  if (len > 0 && append(p, in, len) != 0)
    return -1;
  if (!lws_is_final_fragment(wsi))
    return 0;
  /* Whole: queue it for the echo. */
  if (p->tail != NULL)
    p->tail->next = p->cur;
  else
    p->head = p->cur;
  p->tail = p->cur;
  p->queued += p->cur->len;
  p->cur = NULL;
  if (!p->throttled && p->queued > QUEUE_HIGH) {
    p->throttled = 1;
    lws_rx_flow_control(wsi, 0);
  }
  lws_callback_on_writable(wsi);
  return 0;
}

static int on_writeable(struct lws *wsi, struct pss *p) {
  struct msg *m = p->head;
  int n;
  /* With permessage-deflate, lws compresses a message larger than its
   * 1 KiB deflate buffer in several goes, reading from the caller's
   * buffer after lws_write has returned; it calls back writeable only
   * once that is done (upstream issue #1362): free it then. */
  free(p->written);
  p->written = NULL;
  if (m == NULL)
    return 0;
  n = lws_write(wsi, m->buf + LWS_PRE, m->len,
                m->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
  if (n < (int)m->len)
    return -1; /* lws buffers partial sends itself: this is a failure */
  p->head = m->next;
  if (p->head == NULL)
    p->tail = NULL;
  p->queued -= m->len;
  p->written = m;
  if (p->throttled && p->queued < QUEUE_LOW) {
    p->throttled = 0;
    lws_rx_flow_control(wsi, 1);
  }
  if (p->head != NULL)
    lws_callback_on_writable(wsi);
  return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason,
                    void *user, void *in, size_t len) {
  struct pss *p = user;
  char uri[64];
  switch (reason) {
  case LWS_CALLBACK_HTTP:
    return on_http(wsi, p, in);
  case LWS_CALLBACK_HTTP_WRITEABLE:
    return on_http_writeable(wsi, p);
  case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
    /* lws binds upgrades by subprotocol, not path: only /ws is ours. */
    if (lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI) < 0 ||
        strcmp(uri, "/ws") != 0)
      return 1;
    return 0;
  case LWS_CALLBACK_ESTABLISHED:
    memset(p, 0, sizeof(*p));
    /* (fails harmlessly when permessage-deflate was not negotiated) */
    lws_set_extension_option(wsi, "permessage-deflate", "rx_buf_size",
                             PMD_BUF_POWER);
    lws_set_extension_option(wsi, "permessage-deflate", "tx_buf_size",
                             PMD_BUF_POWER);
    return 0;
  case LWS_CALLBACK_RECEIVE:
    return on_receive(wsi, p, in, len);
  case LWS_CALLBACK_SERVER_WRITEABLE:
    return on_writeable(wsi, p);
  case LWS_CALLBACK_CLOSED:
    free_queue(p);
    return 0;
  default:
    return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
}

static const struct lws_protocols protocols[] = {
    {"echo", callback, sizeof(struct pss), RX_BUFFER, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0}};

static const struct lws_extension extensions[] = {
    {"permessage-deflate", lws_extension_callback_pm_deflate,
     "permessage-deflate; client_max_window_bits"},
    {NULL, NULL, NULL}};

static void usage(void) {
  fprintf(stderr, "usage: lws_echo --port N [--max-conns M]\n");
  exit(2);
}

int main(int argc, char **argv) {
  struct lws_context_creation_info info;
  struct lws_context *ctx;
  struct lws_vhost *vh;
  struct sigaction sa;
  struct rlimit rl;
  long port = -1;
  int i;

  for (i = 1; i < argc; i++) {
    char *e;
    if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      errno = 0;
      port = strtol(argv[++i], &e, 10);
      if (errno != 0 || *e != '\0' || port < 0 || port > 65535)
        usage();
    } else if (strcmp(argv[i], "--max-conns") == 0 && i + 1 < argc) {
      i++; /* accepted, does nothing */
    } else {
      usage();
    }
  }
  if (port < 0)
    usage();
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  /* No SA_RESTART: the signal ends lws's poll, and the loop sees stop. */
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  lws_set_log_level(LLL_ERR | LLL_WARN, NULL);
  memset(&info, 0, sizeof(info));
  info.port = (int)port;
  info.iface = "127.0.0.1";
  info.protocols = protocols;
  info.extensions = extensions;
  info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
  info.gid = -1;
  info.uid = -1;
  info.count_threads = 1;
  ctx = lws_create_context(&info);
  if (ctx == NULL) {
    fprintf(stderr, "lws_create_context failed\n");
    return 1;
  }
  vh = lws_get_vhost_by_name(ctx, "default");
  if (vh == NULL || lws_get_vhost_listen_port(vh) <= 0) {
    fprintf(stderr, "no bound port\n");
    lws_context_destroy(ctx);
    return 1;
  }
  printf("listening on %d\n", lws_get_vhost_listen_port(vh));
  fflush(stdout);
  while (!stop)
    if (lws_service(ctx, 0) < 0)
      break;
  lws_context_destroy(ctx);
  return 0;
}
