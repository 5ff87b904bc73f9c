/* idle: hold many idle keep-alive connections open.
 *
 *   idle --host H --port P --connections N --hold S [--batch B]
 *        [--setup-timeout S] [--path /] [--no-spread] [--json FILE]
 *
 * Opens N connections, sends one "GET <path>" (keep-alive) on each and
 * reads its response, so that the server has gone through everything it
 * does for a connection that has served a request (its buffers may have
 * grown, then shrunk back); then holds all of them idle for S seconds and
 * exits. The driver measures the server's memory meanwhile, so the line
 * "idle: ready ..." is printed (and flushed) as soon as the connections
 * are set up, and the hold starts after it.
 *
 * At most B (default 256) connections are being set up at once: opening
 * thousands at the same instant would overflow the server's listen backlog
 * and measure SYN retransmission timers instead. A connection that fails
 * during setup is retried twice, then counted as failed; the setup gives
 * up after --setup-timeout seconds (default 60). During the hold the
 * client only watches: a connection the server closes is counted in
 * closed_during_hold (e.g. an idle timeout shorter than the hold).
 *
 * RLIMIT_NOFILE is raised to the hard limit (and, when N needs more and
 * the process may, the hard limit too). On 127.0.0.1 the source address
 * rotates over 127.0.0.2..127.0.0.254, so that N may exceed one address's
 * ephemeral port range.
 *
 * Exit status: 0 when the run happened (even if connections failed), 1
 * when it could not start or report, 2 on bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"

#define PROG "idle"
#define MAX_EVENTS 512
#define READ_SIZE (16 * 1024)
#define TRIES 3

enum { I_QUEUED, I_CONNECTING, I_SENDING, I_READING, I_READY, I_GONE };

typedef struct {
  int fd;
  int state;
  int tries;
  int slot; /* setup slot while being set up */
} iconn;

/* Parser state for a connection being set up; only B of these exist. */
typedef struct {
  size_t wpos;
  lg_resp rp;
  size_t npend;
  char pend[LG_HEAD_MAX];
} setup_slot;

static struct {
  lg_target target;
  int ep;
  iconn *conns;
  long n;
  setup_slot *slots;
  int *free_slots; /* stack of unused slot numbers */
  int nfree;
  long *queue; /* connections to (re)start, as a ring */
  long qhead, qlen;
  char req[512];
  size_t req_len;
  long ready, failed, in_setup;
  uint64_t errors, addrnotavail, closed_in_hold, unexpected;
} g;

static char scratch[LG_HEAD_MAX + READ_SIZE];

static void usage(void) {
  fprintf(stderr, "usage: " PROG " --host H --port P --connections N "
                  "--hold S [--batch B]\n"
                  "       [--setup-timeout S] [--path /] [--no-spread] "
                  "[--json FILE]\n");
  exit(2);
}

static void enqueue(long i) {
  g.queue[(g.qhead + g.qlen) % g.n] = i;
  g.qlen++;
}

static void release_slot(iconn *c) {
  g.free_slots[g.nfree++] = c->slot;
  c->slot = -1;
  g.in_setup--;
}

static void setup_fail(iconn *c, int err) {
  g.errors++;
  if (err == EADDRNOTAVAIL)
    g.addrnotavail++;
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  release_slot(c);
  if (++c->tries < TRIES) {
    c->state = I_QUEUED;
    enqueue(c - g.conns);
  } else {
    c->state = I_GONE;
    g.failed++;
  }
}

static void setup_start(iconn *c) {
  struct epoll_event ev;
  setup_slot *s;
  c->slot = g.free_slots[--g.nfree];
  g.in_setup++;
  s = &g.slots[c->slot];
  s->wpos = 0;
  s->npend = 0;
  lg_resp_init(&s->rp);
  c->fd = lg_connect(&g.target);
  if (c->fd < 0) {
    setup_fail(c, errno);
    return;
  }
  /* Edge-triggered, and left so for the hold: the registration needs no
   * change when the connection turns idle. */
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = (uint64_t)(c - g.conns);
  if (epoll_ctl(g.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
    setup_fail(c, errno);
    return;
  }
  c->state = I_CONNECTING;
}

static void setup_read(iconn *c) {
  setup_slot *s = &g.slots[c->slot];
  for (;;) {
    size_t len, used = 0;
    ssize_t r;
    int rc;
    memcpy(scratch, s->pend, s->npend);
    r = recv(c->fd, scratch + s->npend, READ_SIZE, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        setup_fail(c, errno);
      return;
    }
    if (r == 0) {
      setup_fail(c, ECONNRESET);
      return;
    }
    len = s->npend + (size_t)r;
    rc = lg_resp_feed(&s->rp, scratch, len, &used);
    if (rc == LG_RP_ERROR || (rc == LG_RP_COMPLETE && used < len) ||
        (rc == LG_RP_COMPLETE && s->rp.close)) {
      /* Malformed, or the server will not keep it open: not idle. */
      setup_fail(c, EPROTO);
      return;
    }
    if (rc == LG_RP_COMPLETE) {
      c->state = I_READY;
      release_slot(c);
      g.ready++;
      return;
    }
    s->npend = len - used;
    memmove(s->pend, scratch + used, s->npend);
  }
}

static void setup_event(iconn *c, uint32_t events) {
  setup_slot *s = &g.slots[c->slot];
  if (c->state == I_CONNECTING) {
    int err = 0;
    socklen_t elen = sizeof(err);
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
      return;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
      err = errno;
    if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
      err = ECONNRESET;
    if (err != 0) {
      setup_fail(c, err);
      return;
    }
    c->state = I_SENDING;
  }
  if (c->state == I_SENDING) {
    while (s->wpos < g.req_len) {
      ssize_t w =
          send(c->fd, g.req + s->wpos, g.req_len - s->wpos, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR)
          continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          setup_fail(c, errno);
        return;
      }
      s->wpos += (size_t)w;
    }
    c->state = I_READING;
  }
  if (c->state == I_READING)
    setup_read(c);
}

/* During the hold: anything but silence is worth counting. */
static void hold_event(iconn *c) {
  for (;;) {
    ssize_t r = recv(c->fd, scratch, sizeof(scratch), 0);
    if (r > 0) {
      g.unexpected += (uint64_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    close(c->fd);
    c->fd = -1;
    c->state = I_GONE;
    g.ready--;
    g.closed_in_hold++;
    return;
  }
}

/* Enough descriptors for N connections, raising the hard limit too when
 * allowed (root). */
static int enough_files(long n) {
  struct rlimit rl;
  long want = n + 64;
  if (lg_raise_nofile() >= want)
    return 1;
  rl.rlim_cur = rl.rlim_max = (rlim_t)want;
  return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

int main(int argc, char **argv) {
  const char *host = NULL, *path = "/", *json = NULL;
  long port = -1, batch = 256, i;
  long ready0;
  double hold = -1, setup_timeout = 60, setup_s;
  int spread = 1, n, k;
  uint64_t t_start, setup_end, hold_end, now;
  struct epoll_event ev[MAX_EVENTS];

  for (k = 1; k < argc; k++) {
    const char *a = argv[k];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
      usage();
    else if (strcmp(a, "--host") == 0)
      host = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--port") == 0)
      port = lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 65535);
    else if (strcmp(a, "--connections") == 0)
      g.n =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 10000000);
    else if (strcmp(a, "--hold") == 0)
      hold =
          lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k), 0, 86400);
    else if (strcmp(a, "--batch") == 0)
      batch =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 100000);
    else if (strcmp(a, "--setup-timeout") == 0)
      setup_timeout = lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k),
                                    0.001, 86400);
    else if (strcmp(a, "--path") == 0)
      path = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--no-spread") == 0)
      spread = 0;
    else if (strcmp(a, "--json") == 0)
      json = lg_arg_value(PROG, argc, argv, &k);
    else {
      fprintf(stderr, PROG ": unknown argument '%s'\n", a);
      usage();
    }
  }
  if (host == NULL || port < 0 || g.n <= 0 || hold < 0)
    usage();
  if (lg_check_path(PROG, path) != 0)
    return 2;
  if (lg_target_init(&g.target, PROG, host, port) != 0)
    return 2;
  g.target.spread &= spread;
  if (!enough_files(g.n)) {
    fprintf(stderr, PROG ": RLIMIT_NOFILE cannot hold %ld connections\n", g.n);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  g.req_len = (size_t)snprintf(g.req, sizeof(g.req),
                               strchr(host, ':')
                                   ? "GET %s HTTP/1.1\r\nHost: [%s]:%ld\r\n\r\n"
                                   : "GET %s HTTP/1.1\r\nHost: %s:%ld\r\n\r\n",
                               path, host, port);
  if (g.req_len >= sizeof(g.req)) {
    fprintf(stderr, PROG ": host or path too long\n");
    return 2;
  }
  if (batch > g.n)
    batch = g.n;
  g.conns = calloc((size_t)g.n, sizeof(*g.conns));
  g.queue = calloc((size_t)g.n, sizeof(*g.queue));
  g.slots = calloc((size_t)batch, sizeof(*g.slots));
  g.free_slots = calloc((size_t)batch, sizeof(*g.free_slots));
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  if (g.conns == NULL || g.queue == NULL || g.slots == NULL ||
      g.free_slots == NULL || g.ep < 0) {
    perror(PROG);
    return 1;
  }
  for (i = 0; i < batch; i++)
    g.free_slots[g.nfree++] = (int)i;
  for (i = 0; i < g.n; i++) {
    g.conns[i].fd = -1;
    g.conns[i].slot = -1;
    enqueue(i);
  }

  t_start = lg_now_ns();
  setup_end = t_start + (uint64_t)(setup_timeout * 1e9);
  for (;;) {
    while (g.qlen > 0 && g.nfree > 0) {
      long c = g.queue[g.qhead];
      g.qhead = (g.qhead + 1) % g.n;
      g.qlen--;
      setup_start(&g.conns[c]);
    }
    now = lg_now_ns();
    if (g.in_setup == 0 && g.qlen == 0)
      break;
    if (now >= setup_end)
      break;
    n = epoll_wait(g.ep, ev, MAX_EVENTS,
                   (int)((setup_end - now + 999999u) / 1000000u));
    for (k = 0; k < n; k++) {
      iconn *c = &g.conns[ev[k].data.u64];
      if (c->fd < 0)
        continue;
      if (c->state == I_READY)
        hold_event(c); /* closed before the hold even began */
      else
        setup_event(c, ev[k].events);
    }
  }
  /* Whatever is still being set up at the deadline has failed. */
  for (i = 0; i < g.n; i++) {
    iconn *c = &g.conns[i];
    if (c->state != I_READY && c->state != I_GONE) {
      if (c->fd >= 0)
        close(c->fd);
      c->fd = -1;
      c->state = I_GONE;
      g.failed++;
    }
  }
  setup_s = (double)(lg_now_ns() - t_start) / 1e9;
  /* Closed before the hold: not part of what is held. */
  g.closed_in_hold = 0;
  ready0 = g.ready;
  printf(PROG ": ready %ld of %ld connections (failed %ld, errors %llu) "
              "in %.3f s; holding %.3f s\n",
         g.ready, g.n, g.failed, (unsigned long long)g.errors, setup_s, hold);
  fflush(stdout);

  hold_end = lg_now_ns() + (uint64_t)(hold * 1e9);
  for (;;) {
    now = lg_now_ns();
    if (now >= hold_end)
      break;
    n = epoll_wait(g.ep, ev, MAX_EVENTS,
                   (int)((hold_end - now + 999999u) / 1000000u));
    for (k = 0; k < n; k++) {
      iconn *c = &g.conns[ev[k].data.u64];
      if (c->fd >= 0 && c->state == I_READY)
        hold_event(c);
    }
  }
  printf(PROG ": held %ld connections for %.3f s; closed by the server "
              "during the hold: %llu\n",
         ready0, hold, (unsigned long long)g.closed_in_hold);
  if (g.addrnotavail > 0)
    printf(PROG ": warning: %llu connects failed with EADDRNOTAVAIL "
                "(ephemeral ports exhausted)\n",
           (unsigned long long)g.addrnotavail);
  if (g.unexpected > 0)
    printf(PROG ": warning: %llu unexpected bytes from the server during "
                "the hold\n",
           (unsigned long long)g.unexpected);
  fflush(stdout);
  if (json != NULL) {
    FILE *f = lg_json_open(json);
    if (f == NULL)
      return 1;
    fprintf(f,
            "{\"connections\":%ld,\"ready\":%ld,\"open_at_end\":%ld,"
            "\"failed\":%ld,\"errors\":%llu,\"closed_during_hold\":%llu,"
            "\"unexpected_bytes\":%llu,\"addrnotavail\":%llu,"
            "\"setup_s\":%.6f,\"hold_s\":%.3f}\n",
            g.n, ready0, g.ready, g.failed, (unsigned long long)g.errors,
            (unsigned long long)g.closed_in_hold,
            (unsigned long long)g.unexpected,
            (unsigned long long)g.addrnotavail, setup_s, hold);
    if (fclose(f) != 0) {
      perror(json);
      return 1;
    }
  }
  return 0;
}
