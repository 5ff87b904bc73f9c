/* churn: connection churn, one request per connection.
 *
 *   churn --host H --port P --concurrency C --duration S [--warmup S]
 *         [--path /] [--no-spread] [--json FILE]
 *
 * C slots, each in a loop: open a connection (non-blocking), send
 * "GET <path> HTTP/1.1" with "Connection: close", read the whole response,
 * close, start over. This is a closed model (a slot starts its next
 * connection when the last one is done), so it measures how many
 * connections per second the server sets up and tears down; latency is
 * from the start of the connect to the end of the response.
 *
 * Counted over the measured window (after --warmup): connections that
 * completed in it, their latency, non2xx among them; errors counts every
 * failed connection of the run (refused, reset, timed out, malformed).
 * After an error the slot waits 10 ms, so that a dead server does not turn
 * the client into a busy loop.
 *
 * Ports: on 127.0.0.1 every closed connection leaves a TIME_WAIT entry for
 * a minute, and one source address has only ~28000 ephemeral ports, which
 * a few hundred connections per second would exhaust. Closing with a RST
 * (SO_LINGER 0) would avoid that but changes what the server sees, so
 * instead the source address rotates over 127.0.0.2..127.0.0.254 (bind
 * before connect; --no-spread turns it off). If the ports run out anyway,
 * connect fails with EADDRNOTAVAIL: that is counted and reported, since
 * the rate is then the client's limit, not the server's.
 *
 * Exit status: 0 when the run happened (even with errors), 1 when it could
 * not start or report, 2 on bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common.h"

#define PROG "churn"
#define MAX_EVENTS 256
#define READ_SIZE (64 * 1024)
#define RETRY_NS 10000000ull /* pause after an error */

enum { S_RETRY, S_CONNECTING, S_SENDING, S_READING };

typedef struct {
  int fd;
  int state;
  uint64_t start;    /* connect began */
  uint64_t retry_at; /* S_RETRY: when to try again */
  size_t wpos;
  lg_resp rp;
  size_t npend;
  char pend[LG_HEAD_MAX];
} slot;

static struct {
  lg_target target;
  int ep;
  slot *slots;
  long nslots;
  char req[512];
  size_t req_len;
  uint64_t win_start, win_end;
  lg_hist hist;
  uint64_t conns, non2xx, errors, addrnotavail, retrying;
} g;

static char scratch[LG_HEAD_MAX + READ_SIZE];

static void usage(void) {
  fprintf(stderr, "usage: " PROG " --host H --port P --concurrency C "
                  "--duration S [--warmup S] [--path /]\n"
                  "       [--no-spread] [--json FILE]\n");
  exit(2);
}

static void slot_close(slot *s) {
  if (s->fd >= 0)
    close(s->fd);
  s->fd = -1;
  s->npend = 0;
}

static void slot_fail(slot *s, int err, uint64_t now) {
  g.errors++;
  if (err == EADDRNOTAVAIL)
    g.addrnotavail++;
  slot_close(s);
  s->state = S_RETRY;
  s->retry_at = now + RETRY_NS;
  g.retrying++;
}

static void slot_start(slot *s, uint64_t now) {
  struct epoll_event ev;
  s->start = now;
  s->wpos = 0;
  s->npend = 0;
  lg_resp_init(&s->rp);
  s->fd = lg_connect(&g.target);
  if (s->fd < 0) {
    slot_fail(s, errno, now);
    return;
  }
  /* Edge-triggered: one registration serves the connect, the send and
   * the reads, with no epoll_ctl between them. */
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = (uint64_t)(s - g.slots);
  if (epoll_ctl(g.ep, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
    slot_fail(s, errno, now);
    return;
  }
  s->state = S_CONNECTING;
}

static void slot_done(slot *s, uint64_t now) {
  if (now >= g.win_start && now < g.win_end) {
    lg_hist_record(&g.hist, (now - s->start + 500) / 1000);
    g.conns++;
    if (s->rp.status < 200 || s->rp.status > 299)
      g.non2xx++;
  }
  slot_close(s);
  if (now < g.win_end)
    slot_start(s, now);
}

/* Read until EAGAIN (edge-triggered), parsing as the bytes come. */
static void slot_read(slot *s, uint64_t now) {
  for (;;) {
    size_t len, used = 0;
    ssize_t r;
    int rc;
    memcpy(scratch, s->pend, s->npend);
    r = recv(s->fd, scratch + s->npend, READ_SIZE, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        slot_fail(s, errno, now);
      return;
    }
    if (r == 0) {
      if (s->npend == 0 && lg_resp_eof(&s->rp) == LG_RP_COMPLETE)
        slot_done(s, now);
      else
        slot_fail(s, ECONNRESET, now);
      return;
    }
    len = s->npend + (size_t)r;
    rc = lg_resp_feed(&s->rp, scratch, len, &used);
    if (rc == LG_RP_ERROR || (rc == LG_RP_COMPLETE && used < len)) {
      slot_fail(s, EPROTO, now); /* malformed, or bytes after the end */
      return;
    }
    if (rc == LG_RP_COMPLETE) {
      slot_done(s, now);
      return;
    }
    s->npend = len - used;
    memmove(s->pend, scratch + used, s->npend);
  }
}

static void slot_event(slot *s, uint32_t events, uint64_t now) {
  if (s->state == S_CONNECTING) {
    int err = 0;
    socklen_t elen = sizeof(err);
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
      return;
    if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
      err = errno;
    if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
      err = ECONNRESET;
    if (err != 0) {
      slot_fail(s, err, now);
      return;
    }
    s->state = S_SENDING;
  }
  if (s->state == S_SENDING) {
    while (s->wpos < g.req_len) {
      ssize_t w =
          send(s->fd, g.req + s->wpos, g.req_len - s->wpos, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR)
          continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          return; /* the next EPOLLOUT edge resumes */
        slot_fail(s, errno, now);
        return;
      }
      s->wpos += (size_t)w;
    }
    s->state = S_READING;
  }
  /* Read even without EPOLLIN in this event: with edge triggering, data
   * that came with the connect's event would otherwise never be seen. */
  if (s->state == S_READING)
    slot_read(s, now);
}

int main(int argc, char **argv) {
  const char *host = NULL, *path = "/", *json = NULL;
  long port = -1, i;
  double duration = -1, warmup = 0;
  int spread = 1, n, k;
  uint64_t now, t_start;
  struct epoll_event ev[MAX_EVENTS];

  for (k = 1; k < argc; k++) {
    const char *a = argv[k];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
      usage();
    else if (strcmp(a, "--host") == 0)
      host = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--port") == 0)
      port = lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 65535);
    else if (strcmp(a, "--concurrency") == 0)
      g.nslots =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 100000);
    else if (strcmp(a, "--duration") == 0)
      duration = lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k),
                               0.001, 86400);
    else if (strcmp(a, "--warmup") == 0)
      warmup =
          lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k), 0, 86400);
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
  if (host == NULL || port < 0 || g.nslots <= 0 || duration < 0)
    usage();
  if (lg_check_path(PROG, path) != 0)
    return 2;
  if (lg_target_init(&g.target, PROG, host, port) != 0)
    return 2;
  g.target.spread &= spread;
  if (lg_raise_nofile() < g.nslots + 16) {
    fprintf(stderr, PROG ": RLIMIT_NOFILE is below %ld connections\n",
            g.nslots);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  g.req_len = (size_t)snprintf(g.req, sizeof(g.req),
                               strchr(host, ':')
                                   ? "GET %s HTTP/1.1\r\nHost: [%s]:%ld\r\n"
                                     "Connection: close\r\n\r\n"
                                   : "GET %s HTTP/1.1\r\nHost: %s:%ld\r\n"
                                     "Connection: close\r\n\r\n",
                               path, host, port);
  if (g.req_len >= sizeof(g.req)) {
    fprintf(stderr, PROG ": host or path too long\n");
    return 2;
  }
  g.slots = calloc((size_t)g.nslots, sizeof(slot));
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  if (g.slots == NULL || g.ep < 0) {
    perror(PROG);
    return 1;
  }

  t_start = lg_now_ns();
  g.win_start = t_start + (uint64_t)(warmup * 1e9);
  g.win_end = g.win_start + (uint64_t)(duration * 1e9);
  for (i = 0; i < g.nslots; i++) {
    g.slots[i].fd = -1;
    slot_start(&g.slots[i], t_start);
  }
  for (;;) {
    uint64_t wake;
    now = lg_now_ns();
    if (now >= g.win_end)
      break;
    wake = g.win_end;
    if (g.retrying > 0) {
      for (i = 0; i < g.nslots; i++) {
        slot *s = &g.slots[i];
        if (s->state != S_RETRY)
          continue;
        if (s->retry_at <= now) {
          g.retrying--;
          slot_start(s, now);
        } else if (s->retry_at < wake) {
          wake = s->retry_at;
        }
      }
    }
    n = epoll_wait(g.ep, ev, MAX_EVENTS,
                   (int)((wake - now + 999999u) / 1000000u));
    now = lg_now_ns();
    for (k = 0; k < n; k++) {
      slot *s = &g.slots[ev[k].data.u64];
      if (s->fd >= 0 && s->state != S_RETRY)
        slot_event(s, ev[k].events, now);
    }
  }
  /* Connections still open are abandoned: they did not finish in the
   * window and are not counted either way. */
  for (i = 0; i < g.nslots; i++)
    slot_close(&g.slots[i]);

  printf(PROG ": %s:%ld, concurrency %ld, %.3f s (+%.3f s warm-up)\n", host,
         port, g.nslots, duration, warmup);
  printf(PROG ": connections %llu (%.1f/s), errors %llu, non2xx %llu; ",
         (unsigned long long)g.conns, (double)g.conns / duration,
         (unsigned long long)g.errors, (unsigned long long)g.non2xx);
  lg_text_latency(stdout, &g.hist);
  printf("\n");
  if (g.addrnotavail > 0)
    printf(PROG ": warning: %llu connects failed with EADDRNOTAVAIL "
                "(ephemeral ports exhausted: the client is the limit)\n",
           (unsigned long long)g.addrnotavail);
  fflush(stdout);
  if (json != NULL) {
    FILE *f = lg_json_open(json);
    if (f == NULL)
      return 1;
    fprintf(f,
            "{\"connections\":%llu,\"requests\":%llu,\"errors\":%llu,"
            "\"non2xx\":%llu,\"rate_achieved\":%.3f,\"duration_s\":%.6f,"
            "\"latency_us\":",
            (unsigned long long)g.conns, (unsigned long long)g.conns,
            (unsigned long long)g.errors, (unsigned long long)g.non2xx,
            (double)g.conns / duration, duration);
    lg_json_latency(f, &g.hist);
    fprintf(f,
            ",\"addrnotavail\":%llu,\"concurrency\":%ld,\"warmup_s\":%.3f,"
            "\"source_spread\":%s}\n",
            (unsigned long long)g.addrnotavail, g.nslots, warmup,
            g.target.spread ? "true" : "false");
    if (fclose(f) != 0) {
      perror(json);
      return 1;
    }
  }
  return 0;
}
