/*
 * floor.c - the "floor" peer of perf/perf's HTTP/1.1 rows.
 *
 * A do-nothing, single-threaded, level-triggered epoll loop that answers
 * every "\r\n\r\n" it sees with one canned HTTP/1.1 response.  There is no
 * parsing and no routing: it approximates the physical limit of this
 * machine's loopback path (accept, read, write, epoll), so that a real
 * server can be judged by how much it costs on top of it.
 *
 *   floor --port N        (0 = any; prints "listening on PORT", flushed)
 *
 * Per readable connection: read up to 64 KiB at a time until EAGAIN, count
 * the request terminators (a terminator split across reads is found via a
 * 3-byte per-connection carry), then answer the whole batch with ONE write
 * of N copies of the response.  A partial write leaves the remainder owed
 * (a byte count: the output is just the canned response repeated) and the
 * connection waits for EPOLLOUT, not reading meanwhile.  EOF or error
 * closes.  No per-request allocation; one small struct per connection.
 *
 * Build: cc -std=c11 -O2 -o floor floor.c
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_MAX (64 * 1024)
#define MAX_EVENTS 512
#define COPIES 1024 /* canned responses pre-laid in the output buffer */

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Length: 13\r\n"
                               "Content-Type: text/plain\r\n"
                               "Date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
                               "\r\n"
                               "Hello, World!";
#define RESP_LEN (sizeof(RESPONSE) - 1)

struct conn {
  int fd;
  uint32_t phase; /* offset within RESPONSE of the next byte owed */
  uint64_t owed;  /* bytes of response stream still to send */
  char carry[3];  /* last 3 bytes read, for a split terminator */
};

/* COPIES back-to-back responses; any run of owed bytes starting at offset
 * `phase` (< RESP_LEN) is a prefix of out_buf + phase. */
static char out_buf[COPIES * RESP_LEN];
/* 3 bytes of carry followed by the read area. */
static char in_buf[3 + READ_MAX];
static char listen_tag; /* epoll data.ptr marker for the listening socket */

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void conn_close(int ep, struct conn *c) {
  (void)ep; /* close() drops the epoll registration */
  close(c->fd);
  free(c);
}

/* Send what is owed.  Returns 0 when done, 1 when blocked (EPOLLOUT armed),
 * -1 when the connection must be closed. */
static int conn_flush(int ep, struct conn *c, int armed) {
  while (c->owed > 0) {
    size_t avail = sizeof(out_buf) - c->phase;
    size_t len = c->owed < avail ? (size_t)c->owed : avail;
    ssize_t w = write(c->fd, out_buf + c->phase, len);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return -1;
      w = 0;
    }
    c->owed -= (uint64_t)w;
    c->phase = (uint32_t)((c->phase + (size_t)w) % RESP_LEN);
    if ((size_t)w < len) {
      /* socket buffer full: wait for EPOLLOUT, stop reading */
      if (!armed) {
        struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
          return -1;
      }
      return 1;
    }
  }
  if (armed) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
      return -1;
  }
  return 0;
}

/* Read until EAGAIN, count terminators, answer the batch with one write. */
static void conn_readable(int ep, struct conn *c) {
  uint64_t n = 0;
  for (;;) {
    ssize_t r = read(c->fd, in_buf + 3, READ_MAX);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      conn_close(ep, c);
      return;
    }
    if (r == 0) {
      conn_close(ep, c);
      return;
    }
    /* window = carry (3 bytes) + fresh data; a terminator ends at a
     * '\n' at index >= 3 preceded by "\r\n\r". */
    memcpy(in_buf, c->carry, 3);
    const char *end = in_buf + 3 + r;
    const char *p = in_buf + 3;
    while (p < end) {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      if (!nl)
        break;
      if (nl[-1] == '\r' && nl[-2] == '\n' && nl[-3] == '\r')
        n++;
      p = nl + 1;
    }
    memcpy(c->carry, end - 3, 3);
  }
  if (n == 0)
    return;
  c->owed += n * RESP_LEN;
  if (conn_flush(ep, c, 0) < 0)
    conn_close(ep, c);
}

static void accept_all(int ep, int lfd) {
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        perror("accept4");
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = calloc(1, sizeof(*c));
    if (!c) {
      close(fd);
      continue;
    }
    c->fd = fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
      close(fd);
      free(c);
    }
  }
}

int main(int argc, char **argv) {
  long port = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      char *e;
      port = strtol(argv[++i], &e, 10);
      if (*e || port < 0 || port > 65535) {
        fprintf(stderr, "floor: bad port '%s'\n", argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "usage: %s [--port N]\n", argv[0]);
      return 2;
    }
  }

  signal(SIGPIPE, SIG_IGN);
  for (size_t i = 0; i < COPIES; i++)
    memcpy(out_buf + i * RESP_LEN, RESPONSE, RESP_LEN);

  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0)
    die("socket");
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
    die("bind");
  if (listen(lfd, 4096) < 0)
    die("listen");
  socklen_t slen = sizeof(sa);
  if (getsockname(lfd, (struct sockaddr *)&sa, &slen) < 0)
    die("getsockname");
  printf("listening on %u\n", (unsigned)ntohs(sa.sin_port));
  fflush(stdout);

  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    die("epoll_create1");
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_tag};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0)
    die("epoll_ctl");

  static struct epoll_event evs[MAX_EVENTS];
  for (;;) {
    int k = epoll_wait(ep, evs, MAX_EVENTS, -1);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      die("epoll_wait");
    }
    for (int i = 0; i < k; i++) {
      void *ptr = evs[i].data.ptr;
      if (ptr == &listen_tag) {
        accept_all(ep, lfd);
        continue;
      }
      struct conn *c = ptr;
      uint32_t e = evs[i].events;
      if (c->owed > 0) {
        /* waiting for EPOLLOUT; EPOLLERR/HUP also land here and
         * surface as a write error */
        if (conn_flush(ep, c, 1) < 0)
          conn_close(ep, c);
      } else if (e & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        conn_readable(ep, c);
      }
    }
  }
}
