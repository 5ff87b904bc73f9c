/* h1rate: an open-model HTTP/1.1 load client (in the manner of wrk2).
 *
 *   h1rate --host H --port P --connections C --rate R --duration S
 *          [--warmup S] [--drain S] [--path /] [--header 'Name: value']...
 *          [--alt-path PATH --alt-every N] [--json FILE]
 *
 * The offered load does not depend on how fast the server answers: request
 * i (0, 1, 2, ...) is due at t0 + i / R and belongs to connection i mod C,
 * so request k of connection c is due at t0 + (k * C + c) / R and the
 * connections take turns evenly. A request is sent when it is due if its
 * connection is free; one request is in flight per connection (no
 * pipelining), so when the previous response is late the request waits,
 * and is sent as soon as that response has arrived.
 *
 * Latency is measured from when the request was due, not from when it was
 * sent. A client that measured from the send would not see the time
 * requests spent queued behind a stalled server ("coordinated omission"):
 * during a 400 ms stall it would record one slow request per connection
 * instead of every request that the stall delayed.
 *
 * Requests due during the warm-up are sent but not recorded. After the
 * last due time the client waits up to --drain seconds (default 2) for the
 * requests still queued or in flight; those still unanswered then are
 * recorded with their latency so far (a lower bound) and reported as
 * "unfinished", so a saturated server shows up in the percentiles instead
 * of vanishing from them.
 *
 * Counts, for requests due in the measured window: requests (complete
 * responses), non2xx (of those), unfinished; for the whole run: errors
 * (failed connects, connections that broke with a request in flight,
 * malformed or unsolicited responses) and dropped (requests failed without
 * a send because their connection could not be opened: a refused connect
 * fails the requests already due, so that a dead server is not hammered).
 * rate_achieved is the responses (to any request) that arrived within the
 * measured window, divided by its length: the throughput, which stays
 * right when a saturated server is still answering warm-up requests.
 *
 * --alt-path PATH --alt-every N: every Nth request (i = N-1, 2N-1, ...)
 * asks for PATH instead of --path, with the same headers. Those requests
 * are counted and timed apart (alt_requests, alt_non2xx, alt_unfinished,
 * alt_latency_us), and requests, non2xx, unfinished and latency_us then
 * cover the others only: the latency of ordinary requests beside slow
 * ones (perf's balance-stall: GET /stall?ms=50 among GET /). With N
 * prime to C the alternate requests rotate over every connection.
 * rate_achieved still counts every response.
 *
 * Exit status: 0 when the run happened (even with errors: the caller
 * judges), 1 when it could not start or report, 2 on bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define PROG "h1rate"
#define MAX_EVENTS 256
#define READ_SIZE (64 * 1024)
#define MAX_HEADERS 64         /* --header options */
#define SETUP_NS 5000000000ull /* connections must be open by then */

enum { C_DOWN, C_CONNECTING, C_IDLE, C_BUSY };

typedef struct {
  int fd;
  int state;
  int out_armed;   /* EPOLLOUT is in the registration */
  uint64_t next;   /* index of its oldest request not yet finished */
  size_t wpos;     /* request bytes written, while C_BUSY */
  const char *req; /* the request in flight (g.req or g.alt_req) */
  size_t req_len;
  lg_resp rp;
  size_t npend; /* bytes of an incomplete head or chunk line */
  char pend[LG_HEAD_MAX];
} conn;

static struct {
  lg_target target;
  int ep;
  conn *conns;
  uint64_t nconns;
  double ns_per_req;
  uint64_t t0;             /* the schedule's origin */
  uint64_t total;          /* requests scheduled, warm-up included */
  uint64_t first_measured; /* index of the first one after the warm-up */
  char *req;
  size_t req_len;
  char *alt_req; /* --alt-path's request, every alt_every-th (0: none) */
  size_t alt_req_len;
  uint64_t alt_every;
  lg_hist hist;
  uint64_t requests, non2xx, unfinished; /* measured window */
  lg_hist alt_hist;                      /* the --alt-path requests, apart */
  uint64_t alt_requests, alt_non2xx, alt_unfinished;
  uint64_t errors, dropped, connect_errors, addrnotavail;
  uint64_t finished; /* scheduled requests done, any outcome */
  uint64_t waiting;  /* connections idle or down: they need the timer */
  uint64_t win_start, win_end; /* the measured window, as times */
  uint64_t in_window;          /* responses of any request completed in it */
} g;

/* Bytes kept from earlier reads, then the new ones. */
static char scratch[LG_HEAD_MAX + READ_SIZE];

static uint64_t due(uint64_t i) {
  return g.t0 + (uint64_t)((double)i * g.ns_per_req);
}

/* Whether request i asks for --alt-path. */
static int is_alt(uint64_t i) {
  return g.alt_every > 0 && i % g.alt_every == g.alt_every - 1;
}

static void usage(void) {
  fprintf(stderr, "usage: " PROG " --host H --port P --connections C --rate R "
                  "--duration S\n"
                  "       [--warmup S] [--drain S] [--path /] "
                  "[--header 'Name: value']...\n"
                  "       [--alt-path PATH --alt-every N] [--json FILE]\n");
  exit(2);
}

static int is_waiting(int state) {
  return state == C_IDLE || state == C_DOWN;
}

static void set_state(conn *c, int state) {
  g.waiting += (uint64_t)is_waiting(state) - (uint64_t)is_waiting(c->state);
  c->state = state;
}

static void set_events(conn *c, int out) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | (out ? EPOLLOUT : 0);
  ev.data.u64 = (uint64_t)(c - g.conns);
  if (out != c->out_armed) {
    epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->out_armed = out;
  }
}

static void conn_close(conn *c) {
  if (c->fd >= 0)
    close(c->fd); /* also leaves the epoll set */
  c->fd = -1;
  set_state(c, C_DOWN);
  c->npend = 0;
  c->out_armed = 0;
}

/* A connect failed: count it, and fail the requests already due on this
 * connection, so that the next attempt waits for the next due time instead
 * of spinning against a server that refuses. */
static void connect_failed(conn *c, int err, uint64_t now) {
  g.errors++;
  g.connect_errors++;
  if (err == EADDRNOTAVAIL)
    g.addrnotavail++;
  conn_close(c);
  while (c->next < g.total && due(c->next) <= now) {
    g.dropped++;
    g.finished++;
    c->next += g.nconns;
  }
}

static void conn_open(conn *c, uint64_t now) {
  struct epoll_event ev;
  c->fd = lg_connect(&g.target);
  if (c->fd < 0) {
    connect_failed(c, errno, now);
    return;
  }
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.u64 = (uint64_t)(c - g.conns);
  if (epoll_ctl(g.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    connect_failed(c, errno, now);
    return;
  }
  c->out_armed = 1;
  set_state(c, C_CONNECTING);
}

/* Reopen a connection that closed, if it has requests left. Eagerly, so
 * that the connect is not charged to the next request's latency. */
static void conn_reopen(conn *c, uint64_t now) {
  conn_close(c);
  if (c->next < g.total)
    conn_open(c, now);
}

static void conn_fail(conn *c, uint64_t now);

static void flush(conn *c, uint64_t now) {
  while (c->wpos < c->req_len) {
    ssize_t w =
        send(c->fd, c->req + c->wpos, c->req_len - c->wpos, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        set_events(c, 1);
        return;
      }
      conn_fail(c, now);
      return;
    }
    c->wpos += (size_t)w;
  }
  set_events(c, 0);
}

/* Send this connection's next request if it is due and the connection can
 * take it; open the connection if it is down. */
static void kick(conn *c, uint64_t now) {
  if (c->next >= g.total || due(c->next) > now)
    return;
  if (c->state == C_DOWN) {
    conn_open(c, now);
  } else if (c->state == C_IDLE) {
    set_state(c, C_BUSY);
    c->wpos = 0;
    if (is_alt(c->next)) {
      c->req = g.alt_req;
      c->req_len = g.alt_req_len;
    } else {
      c->req = g.req;
      c->req_len = g.req_len;
    }
    lg_resp_init(&c->rp);
    flush(c, now);
  }
}

/* The request in flight failed (the connection broke or the response was
 * malformed): count it and start over on a new connection. */
static void conn_fail(conn *c, uint64_t now) {
  g.errors++;
  if (c->state == C_BUSY) {
    g.finished++;
    c->next += g.nconns;
  }
  conn_reopen(c, now);
}

static void complete(conn *c, uint64_t now, int extra_bytes) {
  uint64_t i = c->next;
  if (now >= g.win_start && now < g.win_end)
    g.in_window++;
  if (i >= g.first_measured) {
    uint64_t t = due(i);
    int alt = is_alt(i);
    lg_hist_record(alt ? &g.alt_hist : &g.hist,
                   now > t ? (now - t + 500) / 1000 : 0);
    if (alt)
      g.alt_requests++;
    else
      g.requests++;
    if (c->rp.status < 200 || c->rp.status > 299) {
      if (alt)
        g.alt_non2xx++;
      else
        g.non2xx++;
    }
  }
  g.finished++;
  c->next += g.nconns;
  set_state(c, C_IDLE);
  c->npend = 0;
  if (extra_bytes) {
    g.errors++; /* bytes nobody asked for: the framing is off */
    conn_reopen(c, now);
  } else if (c->rp.close || c->wpos < c->req_len) {
    conn_reopen(c, now);
  } else {
    kick(c, now);
  }
}

static void readable(conn *c, uint64_t now) {
  size_t len, used = 0;
  ssize_t r;
  int rc;
  memcpy(scratch, c->pend, c->npend);
  r = recv(c->fd, scratch + c->npend, READ_SIZE, 0);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
      return;
    if (c->state == C_BUSY)
      conn_fail(c, now);
    else
      conn_reopen(c, now); /* an idle connection went away */
    return;
  }
  if (r == 0) {
    if (c->state != C_BUSY)
      conn_reopen(c, now); /* e.g. the server's keep-alive timeout */
    else if (c->npend == 0 && lg_resp_eof(&c->rp) == LG_RP_COMPLETE)
      complete(c, now, 0); /* a close-delimited body ended */
    else
      conn_fail(c, now);
    return;
  }
  if (c->state != C_BUSY) {
    g.errors++; /* a response to nothing */
    conn_reopen(c, now);
    return;
  }
  len = c->npend + (size_t)r;
  rc = lg_resp_feed(&c->rp, scratch, len, &used);
  if (rc == LG_RP_ERROR) {
    conn_fail(c, now);
  } else if (rc == LG_RP_COMPLETE) {
    complete(c, now, used < len);
  } else {
    c->npend = len - used; /* < LG_HEAD_MAX: the parser says so */
    memmove(c->pend, scratch + used, c->npend);
  }
}

static void on_event(conn *c, uint32_t events, uint64_t now) {
  if (c->state == C_CONNECTING) {
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
      err = errno;
    if (err == 0 && !(events & (EPOLLERR | EPOLLHUP))) {
      set_state(c, C_IDLE);
      set_events(c, 0);
      kick(c, now);
    } else if (err != 0 || (events & EPOLLERR)) {
      connect_failed(c, err ? err : ECONNREFUSED, now);
    } else {
      connect_failed(c, ECONNRESET, now);
    }
    return;
  }
  if ((events & EPOLLOUT) && c->state == C_BUSY && c->wpos < g.req_len) {
    flush(c, now);
    if (c->state != C_BUSY)
      return;
  }
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
    readable(c, now);
}

/* epoll_wait with a nanosecond timeout where the kernel has epoll_pwait2
 * (5.11); otherwise milliseconds, rounded up, which only makes sends up to
 * a millisecond late: latency is still measured from the due time. */
static int wait_events(struct epoll_event *ev, uint64_t ns) {
  int n;
#ifdef SYS_epoll_pwait2
  static int have_pwait2 = 1;
  if (have_pwait2) {
    struct timespec ts;
    long r;
    ts.tv_sec = (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    r = syscall(SYS_epoll_pwait2, g.ep, ev, MAX_EVENTS, &ts, NULL, 0);
    if (r >= 0 || errno != ENOSYS)
      return r < 0 ? 0 : (int)r;
    have_pwait2 = 0;
  }
#endif
  n = epoll_wait(g.ep, ev, MAX_EVENTS,
                 ns / 1000000u >= INT_MAX ? INT_MAX
                                          : (int)((ns + 999999u) / 1000000u));
  return n < 0 ? 0 : n;
}

static void dispatch(struct epoll_event *ev, int n, uint64_t now) {
  int i;
  for (i = 0; i < n; i++) {
    conn *c = &g.conns[ev[i].data.u64];
    if (c->fd >= 0)
      on_event(c, ev[i].events, now);
  }
}

static char *build_request(const char *host, long port, const char *path,
                           char **hdrs, int nhdrs) {
  size_t cap = strlen(host) + strlen(path) + 64, len;
  int i, has_host = 0;
  char *req;
  for (i = 0; i < nhdrs; i++) {
    cap += strlen(hdrs[i]) + 2;
    if (strncasecmp(hdrs[i], "host:", 5) == 0)
      has_host = 1;
  }
  req = malloc(cap);
  if (req == NULL)
    return NULL;
  len = (size_t)snprintf(req, cap, "GET %s HTTP/1.1\r\n", path);
  if (!has_host)
    len += (size_t)snprintf(req + len, cap - len,
                            strchr(host, ':') ? "Host: [%s]:%ld\r\n"
                                              : "Host: %s:%ld\r\n",
                            host, port);
  for (i = 0; i < nhdrs; i++)
    len += (size_t)snprintf(req + len, cap - len, "%s\r\n", hdrs[i]);
  snprintf(req + len, cap - len, "\r\n");
  return req;
}

int main(int argc, char **argv) {
  const char *host = NULL, *path = "/", *json = NULL, *alt_path = NULL;
  long alt_every = 0;
  long port = -1, nconns = -1;
  double rate = -1, duration = -1, warmup = 0, drain = 2;
  static char *hdrs[MAX_HEADERS];
  int nhdrs = 0, i, n;
  uint64_t now, setup_end, t_end, drain_end, sweep = 0, measured, j;
  double achieved;
  struct epoll_event ev[MAX_EVENTS];

  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
      usage();
    else if (strcmp(a, "--host") == 0)
      host = lg_arg_value(PROG, argc, argv, &i);
    else if (strcmp(a, "--port") == 0)
      port = lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &i), 1, 65535);
    else if (strcmp(a, "--connections") == 0)
      nconns =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &i), 1, 1000000);
    else if (strcmp(a, "--rate") == 0)
      rate = lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &i), 0.001,
                           1e8);
    else if (strcmp(a, "--duration") == 0)
      duration = lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &i),
                               0.001, 86400);
    else if (strcmp(a, "--warmup") == 0)
      warmup =
          lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &i), 0, 86400);
    else if (strcmp(a, "--drain") == 0)
      drain =
          lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &i), 0, 3600);
    else if (strcmp(a, "--path") == 0)
      path = lg_arg_value(PROG, argc, argv, &i);
    else if (strcmp(a, "--alt-path") == 0)
      alt_path = lg_arg_value(PROG, argc, argv, &i);
    else if (strcmp(a, "--alt-every") == 0)
      alt_every = lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &i), 2,
                              1000000000);
    else if (strcmp(a, "--header") == 0) {
      if (nhdrs == MAX_HEADERS) {
        fprintf(stderr, PROG ": at most %d --header options\n", MAX_HEADERS);
        return 2;
      }
      hdrs[nhdrs++] = (char *)lg_arg_value(PROG, argc, argv, &i);
    } else if (strcmp(a, "--json") == 0)
      json = lg_arg_value(PROG, argc, argv, &i);
    else {
      fprintf(stderr, PROG ": unknown argument '%s'\n", a);
      usage();
    }
  }
  if (host == NULL || port < 0 || nconns < 0 || rate < 0 || duration < 0)
    usage();
  if (lg_check_path(PROG, path) != 0)
    return 2;
  if ((alt_path == NULL) != (alt_every == 0)) {
    fprintf(stderr, PROG ": --alt-path and --alt-every go together\n");
    return 2;
  }
  if (alt_path != NULL && lg_check_path(PROG, alt_path) != 0)
    return 2;
  for (i = 0; i < nhdrs; i++) {
    const char *colon = strchr(hdrs[i], ':');
    if (colon == NULL || colon == hdrs[i] || strpbrk(hdrs[i], "\r\n") != NULL) {
      fprintf(stderr, PROG ": bad --header '%s' (want 'Name: value')\n",
              hdrs[i]);
      return 2;
    }
  }
  if (rate * (warmup + duration) > 1e12) {
    fprintf(stderr, PROG ": rate x time is too large\n");
    return 2;
  }
  if (lg_target_init(&g.target, PROG, host, port) != 0)
    return 2;
  /* The client's own connections, plus a few for epoll and stdio. */
  if (lg_raise_nofile() < nconns + 16) {
    fprintf(stderr, PROG ": RLIMIT_NOFILE is below %ld connections\n", nconns);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  /* The kernel may wake a timed wait up to the timer slack late (50 us by
   * default), and a late send counts as latency: ask for 1 ns. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  g.req = build_request(host, port, path, hdrs, nhdrs);
  if (alt_path != NULL) {
    g.alt_req = build_request(host, port, alt_path, hdrs, nhdrs);
    g.alt_every = (uint64_t)alt_every;
  }
  g.conns = calloc((size_t)nconns, sizeof(conn));
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  if (g.req == NULL || g.conns == NULL || g.ep < 0 ||
      (alt_path != NULL && g.alt_req == NULL)) {
    perror(PROG);
    return 1;
  }
  g.req_len = strlen(g.req);
  if (g.alt_req != NULL)
    g.alt_req_len = strlen(g.alt_req);
  g.nconns = (uint64_t)nconns;
  g.ns_per_req = 1e9 / rate;
  g.total = (uint64_t)ceil(rate * (warmup + duration) - 1e-9);
  g.first_measured = (uint64_t)ceil(rate * warmup - 1e-9);

  /* Open every connection before the clock starts, so that the first
   * requests are not charged for the handshakes. Nothing is due yet. */
  g.t0 = UINT64_MAX / 2;
  now = lg_now_ns();
  g.waiting = g.nconns; /* all start down */
  for (i = 0; i < nconns; i++) {
    g.conns[i].fd = -1;
    g.conns[i].next = (uint64_t)i;
    conn_open(&g.conns[i], now);
  }
  setup_end = now + SETUP_NS;
  for (;;) {
    int pending = 0;
    for (i = 0; i < nconns; i++)
      pending += g.conns[i].state == C_CONNECTING;
    now = lg_now_ns();
    if (pending == 0 || now >= setup_end)
      break;
    n = wait_events(ev, setup_end - now);
    dispatch(ev, n, lg_now_ns());
  }

  g.t0 = lg_now_ns();
  t_end = g.t0 + (uint64_t)((warmup + duration) * 1e9);
  g.win_start = g.t0 + (uint64_t)(warmup * 1e9);
  g.win_end = t_end;
  drain_end = t_end + (uint64_t)(drain * 1e9);
  for (;;) {
    uint64_t wake;
    now = lg_now_ns();
    /* Visit each request as it falls due. If its connection is still busy
     * with an earlier one, the completion of that one sends it. */
    while (sweep < g.total && due(sweep) <= now) {
      conn *c = &g.conns[sweep % g.nconns];
      if (c->next == sweep)
        kick(c, now);
      sweep++;
    }
    if (g.finished >= g.total || now >= drain_end)
      break;
    /* Wake for the first request whose connection waits for its due
     * time; busy connections are woken by their responses. Without this,
     * a saturated run would poll at the schedule's pace for nothing. */
    wake = drain_end;
    for (j = sweep; g.waiting > 0 && j < g.total && j < sweep + g.nconns; j++) {
      conn *c = &g.conns[j % g.nconns];
      if (c->next == j && is_waiting(c->state)) {
        wake = due(j);
        break;
      }
    }
    n = wait_events(ev, wake > now ? wake - now : 0);
    dispatch(ev, n, lg_now_ns());
  }

  /* Requests of the window still queued or in flight: their latency so
   * far is a lower bound, and leaving them out would flatter the server. */
  now = lg_now_ns();
  for (i = 0; i < nconns; i++) {
    uint64_t k;
    for (k = g.conns[i].next; k < g.total; k += g.nconns) {
      if (k >= g.first_measured) {
        uint64_t t = due(k);
        int alt = is_alt(k);
        lg_hist_record(alt ? &g.alt_hist : &g.hist,
                       now > t ? (now - t) / 1000 : 0);
        if (alt)
          g.alt_unfinished++;
        else
          g.unfinished++;
      }
    }
  }

  measured = g.first_measured < g.total ? g.total - g.first_measured : 0;
  achieved = (double)g.in_window / duration;
  printf(PROG ": %s:%ld, %ld connections, target %.1f req/s for %.3f s "
              "(+%.3f s warm-up), %llu requests scheduled\n",
         host, port, nconns, rate, duration, warmup,
         (unsigned long long)measured);
  printf(PROG ": requests %llu (%.1f req/s), errors %llu, non2xx %llu, "
              "dropped %llu, unfinished %llu; ",
         (unsigned long long)g.requests, achieved, (unsigned long long)g.errors,
         (unsigned long long)g.non2xx, (unsigned long long)g.dropped,
         (unsigned long long)g.unfinished);
  lg_text_latency(stdout, &g.hist);
  printf("\n");
  if (g.alt_every > 0) {
    printf(PROG ": 1 in %llu to %s: requests %llu, non2xx %llu, "
                "unfinished %llu; ",
           (unsigned long long)g.alt_every, alt_path,
           (unsigned long long)g.alt_requests, (unsigned long long)g.alt_non2xx,
           (unsigned long long)g.alt_unfinished);
    lg_text_latency(stdout, &g.alt_hist);
    printf("\n");
  }
  if (g.addrnotavail > 0)
    printf(PROG ": warning: %llu connects failed with EADDRNOTAVAIL "
                "(ephemeral ports exhausted)\n",
           (unsigned long long)g.addrnotavail);
  fflush(stdout);
  if (json != NULL) {
    FILE *f = lg_json_open(json);
    if (f == NULL)
      return 1;
    fprintf(f,
            "{\"requests\":%llu,\"errors\":%llu,\"non2xx\":%llu,"
            "\"rate_target\":%.3f,\"rate_achieved\":%.3f,"
            "\"duration_s\":%.6f,\"latency_us\":",
            (unsigned long long)g.requests, (unsigned long long)g.errors,
            (unsigned long long)g.non2xx, rate, achieved, duration);
    lg_json_latency(f, &g.hist);
    fprintf(f,
            ",\"scheduled\":%llu,\"unfinished\":%llu,\"dropped\":%llu,"
            "\"connect_errors\":%llu,\"addrnotavail\":%llu,"
            "\"connections\":%ld,\"warmup_s\":%.3f",
            (unsigned long long)measured, (unsigned long long)g.unfinished,
            (unsigned long long)g.dropped, (unsigned long long)g.connect_errors,
            (unsigned long long)g.addrnotavail, nconns, warmup);
    if (g.alt_every > 0) {
      fprintf(f,
              ",\"alt_path\":\"%s\",\"alt_every\":%llu,"
              "\"alt_requests\":%llu,\"alt_non2xx\":%llu,"
              "\"alt_unfinished\":%llu,\"alt_latency_us\":",
              alt_path, (unsigned long long)g.alt_every,
              (unsigned long long)g.alt_requests,
              (unsigned long long)g.alt_non2xx,
              (unsigned long long)g.alt_unfinished);
      lg_json_latency(f, &g.alt_hist);
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0) {
      perror(json);
      return 1;
    }
  }
  return 0;
}
