/* relay: a delaying TCP and UDP forwarder, the long round trip that
 * loopback lacks.
 *
 *   relay --listen 127.0.0.1:LPORT --to 127.0.0.1:TPORT --delay-ms D
 *         [--tcp] [--udp] [--loss PCT] [--seed N] [--max-queue BYTES]
 *         [--json FILE]
 *
 * Every byte (TCP) and every datagram (UDP) is forwarded in both
 * directions after a fixed one-way delay of D ms, in order, so a path
 * through the relay has a round trip 2 D longer than without it. The
 * kernel here has no netem qdisc, and receive windows that grow only
 * matter when round trips are long: this is the benchmarks' stand-in.
 *
 * Neither --tcp nor --udp relays both, on the same port number (tern
 * serves TLS over TCP and QUIC over UDP on one number). LPORT 0 picks a
 * free port. Once listening it prints (and flushes)
 *   relay: listening TCP PORT UDP PORT
 * where a protocol that is not relayed shows port 0.
 *
 * TCP: each accepted connection gets its own upstream connection to TO.
 * Each direction has a queue of at most --max-queue bytes (default
 * 64 MiB, enough for 100+ MiB/s over a 25 ms delay); when it is full the
 * relay stops reading that side, so the sender feels backpressure rather
 * than loss. A FIN is passed on after the delay, once the bytes before it
 * are written (half-closes work); a reset or an error on either side
 * resets both.
 *
 * UDP: each client address gets its own upstream socket connected to TO
 * (so replies find their way back); datagrams are kept whole and delayed
 * each way. --loss PCT drops that percentage of datagrams at random in
 * each direction, from a generator seeded with --seed (default 1), so a
 * run can be repeated. A datagram that does not fit its queue is dropped
 * too (a router would), and counted apart. A session idle for 60 s ends.
 *
 * Memory is bounded: a queue grows by doubling up to --max-queue, all the
 * queues together to 4 x --max-queue, at most MAX_FLOWS TCP connections
 * and MAX_SESSIONS UDP sessions exist at once (beyond: the connection is
 * refused, the datagram dropped). Queues keep their buffers until their
 * connection ends, so the steady state allocates nothing per packet.
 *
 * One thread, epoll, level-triggered. A timerfd armed (absolute,
 * nanoseconds) at the earliest due time of any queue wakes the loop; a
 * chunk is due D ms after the read that got it returned, so every byte is
 * delayed at least D. Finding the earliest due time scans the queues that
 * hold undue data: a benchmark has few connections.
 *
 * SIGTERM or SIGINT: a JSON summary (bytes and datagrams each way,
 * drops, the largest queue, the relay's CPU time) goes to --json FILE or
 * stderr, and the relay exits 0. "up" is client to TO, "down" the reply.
 * Exit status 1 when it cannot start, 2 on bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define PROG "relay"
#define MAX_EVENTS 256
#define MAX_FLOWS 1024
#define MAX_SESSIONS 1024
#define SESSION_IDLE_NS (60ull * 1000000000ull)
#define QUEUE_MIN (64 * 1024)         /* a queue's first buffer */
#define READ_MAX (256 * 1024)         /* largest TCP read into a queue */
#define CHUNKS_MAX (128 * 1024)       /* chunk records per queue */
#define MERGE_NS 100000               /* chunks read this close merge */
#define DGRAM_MAX 65536               /* largest UDP datagram */
#define BATCH 64                      /* recvmmsg / sendmmsg batch */
#define DEFAULT_MAX_QUEUE (64u << 20) /* bytes per direction */

/* ---- Time ---- */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- Settings and totals ---- */

static struct {
  uint64_t delay_ns;
  size_t max_queue;
  size_t budget; /* all queue buffers together */
  double loss;   /* percent */
  uint64_t rng;
} cfg;

static struct {
  uint64_t tcp_conns, tcp_refused, tcp_resets;
  uint64_t tcp_bytes[2];
  uint64_t udp_sessions, udp_bytes[2], udp_dgrams[2];
  uint64_t udp_lost[2];     /* --loss */
  uint64_t udp_overflow[2]; /* a full queue, or no session to be had */
  size_t max_queue;         /* most bytes one queue held */
  size_t allocated;         /* queue buffers now */
} st;

/* splitmix64: small, seeded, good enough to pick drops. */
static uint64_t rng_next(void) {
  uint64_t z = (cfg.rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int lose(void) {
  if (cfg.loss <= 0)
    return 0;
  return (double)(rng_next() >> 11) * (100.0 / 9007199254740992.0) < cfg.loss;
}

/* What an epoll event's endpoint is; a queue's owner is a flow or a
 * session. */
enum { EP_TCP_LISTEN, EP_UDP_LISTEN, EP_FLOW, EP_SESSION, EP_TIMER, EP_SIG };

/* ---- Delay queue ----------------------------------------------------------
 *
 * A byte ring plus a ring of chunk records {due, offset, length}. A chunk
 * is contiguous in the byte ring (a datagram stays whole; a TCP read goes
 * straight into the free space it is given), so the free space is the gap
 * after the newest chunk, or at the start once the ring has wrapped.
 * Chunks leave in order; the first `due` of them have reached their time
 * and may be sent. A zero-length chunk with `fin` set carries a TCP FIN.
 */
typedef struct {
  uint64_t due;
  uint32_t off, len;
  int fin;
} chunk;

typedef struct dqueue {
  char *buf;
  size_t cap, rpos, wpos, bytes;
  chunk *ch;
  uint32_t ccap, chead, count, ndue;
  /* Link in the list of queues holding chunks not yet due. */
  struct dqueue *next, *prev;
  int listed;
  int kind, idx; /* its owner: an EP_FLOW or EP_SESSION, and which queue */
  int stream;    /* a byte stream (TCP): chunks may merge */
  void *owner;
} dqueue;

static dqueue waiting; /* list head */

static void dq_unlist(dqueue *q) {
  if (q->listed) {
    q->prev->next = q->next;
    q->next->prev = q->prev;
    q->listed = 0;
  }
}

static void dq_init(dqueue *q, int kind, void *owner, int idx) {
  memset(q, 0, sizeof *q);
  q->kind = kind;
  q->stream = kind == EP_FLOW;
  q->owner = owner;
  q->idx = idx;
}

static void dq_free(dqueue *q) {
  dq_unlist(q);
  st.allocated -= q->cap;
  free(q->buf);
  free(q->ch);
  q->buf = NULL;
  q->ch = NULL;
  q->cap = q->ccap = q->count = 0;
}

static chunk *dq_at(dqueue *q, uint32_t i) {
  return &q->ch[(q->chead + i) % q->ccap];
}

/* The largest contiguous free space and where it starts. */
static size_t dq_gap(const dqueue *q, size_t *off) {
  if (q->count == 0) {
    *off = 0;
    return q->cap;
  }
  if (q->wpos >= q->rpos) {
    size_t end = q->cap - q->wpos;
    /* At the start, stop one short of rpos: wpos == rpos means empty. */
    size_t front = q->rpos > 0 ? q->rpos - 1 : 0;
    if (end >= front) {
      *off = q->wpos;
      return end;
    }
    *off = 0;
    return front;
  }
  *off = q->wpos;
  return q->rpos - q->wpos - 1;
}

/* Double the byte ring (up to the limits), packing the chunks at its
 * start. Returns 0 when it may not grow. */
static int dq_grow(dqueue *q) {
  size_t ncap = q->cap ? q->cap * 2 : QUEUE_MIN;
  if (ncap > cfg.max_queue)
    ncap = cfg.max_queue;
  if (ncap <= q->cap || st.allocated - q->cap + ncap > cfg.budget)
    return 0;
  char *nb = malloc(ncap);
  if (!nb)
    return 0;
  size_t pos = 0;
  for (uint32_t i = 0; i < q->count; i++) {
    chunk *c = dq_at(q, i);
    memcpy(nb + pos, q->buf + c->off, c->len);
    c->off = (uint32_t)pos;
    pos += c->len;
  }
  free(q->buf);
  st.allocated += ncap - q->cap;
  q->buf = nb;
  q->cap = ncap;
  q->rpos = 0;
  q->wpos = pos;
  return 1;
}

/* Room for at least `min` bytes (up to `want`): a pointer into the ring
 * and its length, or NULL when the queue is full. Nothing changes until
 * dq_commit. */
static char *dq_reserve(dqueue *q, size_t min, size_t want, size_t *len) {
  size_t off, gap = dq_gap(q, &off);
  while (gap < want && dq_grow(q))
    gap = dq_gap(q, &off);
  if (gap < min || q->count == CHUNKS_MAX)
    return NULL;
  *len = gap < want ? gap : want;
  return q->buf + off;
}

static int dq_chunks_grow(dqueue *q) {
  uint32_t ncap = q->ccap ? q->ccap * 2 : 64;
  chunk *n = malloc(sizeof *n * ncap);
  if (!n)
    return 0;
  for (uint32_t i = 0; i < q->count; i++)
    n[i] = *dq_at(q, i);
  free(q->ch);
  q->ch = n;
  q->ccap = ncap;
  q->chead = 0;
  return 1;
}

/* Append `len` bytes written at `p` (from dq_reserve; len may be 0 with
 * fin), due at `due`. Returns 0 when out of memory for the record. */
static int dq_commit(dqueue *q, const char *p, size_t len, uint64_t due,
                     int fin) {
  uint32_t off = q->buf ? (uint32_t)(p - q->buf) : 0;
  if (q->stream && q->count > q->ndue && !fin) {
    /* A read right behind an undue one joins it, delaying the older bytes
     * by at most MERGE_NS more: fewer records, never less delay. */
    chunk *last = dq_at(q, q->count - 1);
    if (!last->fin && last->off + last->len == off &&
        due - last->due <= MERGE_NS) {
      last->len += (uint32_t)len;
      last->due = due;
      goto done;
    }
  }
  if (q->count == q->ccap && !dq_chunks_grow(q))
    return 0;
  q->ch[(q->chead + q->count) % q->ccap] =
      (chunk){.due = due, .off = off, .len = (uint32_t)len, .fin = fin};
  if (q->count++ == 0)
    q->rpos = off;
done:
  q->wpos = off + len;
  q->bytes += len;
  if (q->bytes > st.max_queue)
    st.max_queue = q->bytes;
  if (!q->listed) {
    q->next = &waiting;
    q->prev = waiting.prev;
    waiting.prev->next = q;
    waiting.prev = q;
    q->listed = 1;
  }
  return 1;
}

/* Mark the chunks due by `now`. Returns the next due time, or 0. */
static uint64_t dq_release(dqueue *q, uint64_t now) {
  while (q->ndue < q->count) {
    chunk *c = dq_at(q, q->ndue);
    if (c->due > now)
      return c->due;
    q->ndue++;
  }
  dq_unlist(q);
  return 0;
}

/* Drop `n` bytes from the front of the first chunk, which is due; the
 * chunk goes when it is empty (a FIN chunk: when n is 0). */
static void dq_consume(dqueue *q, size_t n) {
  chunk *c = dq_at(q, 0);
  c->off += (uint32_t)n;
  c->len -= (uint32_t)n;
  q->bytes -= n;
  q->rpos = c->off;
  if (c->len > 0)
    return;
  q->chead = (q->chead + 1) % q->ccap;
  q->count--;
  q->ndue--;
  if (q->count == 0)
    q->rpos = q->wpos = 0;
  else
    q->rpos = dq_at(q, 0)->off;
}

/* ---- Event loop plumbing ---- */

/* What an epoll event points at: a socket and its owner. */
typedef struct {
  int kind;
  int fd;
  int side; /* EP_FLOW: 0 client, 1 upstream */
  int registered;
  uint32_t events;
  void *owner;
} endpoint;

static int epfd;
static struct sockaddr_storage to_addr;
static socklen_t to_len;

static void watch(endpoint *e, uint32_t events) {
  if (e->registered && events == e->events)
    return;
  struct epoll_event ev = {.events = events, .data.ptr = e};
  epoll_ctl(epfd, e->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, e->fd, &ev);
  e->registered = 1;
  e->events = events;
}

static void unwatch(endpoint *e) {
  if (e->registered)
    epoll_ctl(epfd, EPOLL_CTL_DEL, e->fd, NULL);
  e->registered = 0;
}

/* ---- TCP ---------------------------------------------------------------
 *
 * A flow is a client connection and its upstream one. q[i] holds what was
 * read from side i, to be written to side 1 - i.
 */
typedef struct flow {
  endpoint ep[2];
  dqueue q[2];
  int connecting;
  int eof[2];     /* read EOF from side i (queued as a FIN chunk) */
  int shut[2];    /* sent the FIN to side i */
  int full[2];    /* q[i] is full: not reading side i */
  int blocked[2]; /* writing side i would block: waiting for EPOLLOUT */
  int dead;
  struct flow *next, *prev;
} flow;

static flow flows; /* list head: open flows */
static flow dead;  /* closed, freed after the events in hand */
static unsigned nflows;

static void list_move(flow *f, flow *head) {
  f->prev->next = f->next;
  f->next->prev = f->prev;
  f->next = head;
  f->prev = head->prev;
  head->prev->next = f;
  head->prev = f;
}

/* Close both sides (`reset`: with an RST). The flow's memory stays until
 * flows_reap, as events already taken from epoll may point at it. */
static void flow_close(flow *f, int reset) {
  for (int i = 0; i < 2; i++) {
    if (reset) {
      struct linger lg = {.l_onoff = 1, .l_linger = 0};
      setsockopt(f->ep[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(f->ep[i].fd);
  }
  if (reset)
    st.tcp_resets++;
  f->dead = 1;
  list_move(f, &dead);
  nflows--;
}

static void flows_reap(void) {
  while (dead.next != &dead) {
    flow *f = dead.next;
    dq_free(&f->q[0]);
    dq_free(&f->q[1]);
    f->prev->next = f->next;
    f->next->prev = f->prev;
    free(f);
  }
}

static void flow_update(flow *f) {
  for (int i = 0; i < 2; i++) {
    uint32_t ev = 0;
    if (f->eof[i] && f->shut[i]) {
      /* Both ways shut: only EPOLLHUP is left to report, again and again,
       * while the other side's FIN waits out its delay. */
      unwatch(&f->ep[i]);
      continue;
    }
    if (!f->eof[i] && !f->full[i] && !(i == 1 && f->connecting))
      ev |= EPOLLIN;
    if (f->blocked[i] || (i == 1 && f->connecting))
      ev |= EPOLLOUT;
    watch(&f->ep[i], ev);
  }
}

/* Write what is due from q[1 - side] to `side`. Returns -1 when the flow
 * was reset, 1 when it ended, 0 otherwise. */
static int flow_flush(flow *f, int side) {
  dqueue *q = &f->q[1 - side];
  int fd = f->ep[side].fd;
  if (side == 1 && f->connecting)
    return 0;
  f->blocked[side] = 0;
  while (q->ndue > 0) {
    chunk *c = dq_at(q, 0);
    if (c->fin) {
      shutdown(fd, SHUT_WR);
      f->shut[side] = 1;
      dq_consume(q, 0);
      continue;
    }
    ssize_t n = send(fd, q->buf + c->off, c->len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        f->blocked[side] = 1;
        break;
      }
      if (errno == EINTR)
        continue;
      return -1;
    }
    st.tcp_bytes[1 - side] += (uint64_t)n;
    dq_consume(q, (size_t)n);
    f->full[1 - side] = 0;
  }
  if (f->shut[0] && f->shut[1])
    return 1;
  return 0;
}

/* Read from `side` into q[side]. Returns -1 when the flow was reset. */
static int flow_read(flow *f, int side) {
  dqueue *q = &f->q[side];
  size_t room;
  char *p = dq_reserve(q, 1, READ_MAX, &room);
  if (!p) {
    f->full[side] = 1;
    return 0;
  }
  ssize_t n = recv(f->ep[side].fd, p, room, 0);
  if (n < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  uint64_t due = now_ns() + cfg.delay_ns;
  if (n == 0) {
    f->eof[side] = 1;
    return dq_commit(q, p, 0, due, 1) ? 0 : -1;
  }
  return dq_commit(q, p, (size_t)n, due, 0) ? 0 : -1;
}

static void tcp_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void tcp_accept(int lfd) {
  for (;;) {
    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0)
      return;
    if (nflows >= MAX_FLOWS) {
      st.tcp_refused++;
      close(cfd);
      continue;
    }
    int ufd = socket(to_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    flow *f = ufd >= 0 ? calloc(1, sizeof *f) : NULL;
    if (!f) {
      st.tcp_refused++;
      close(cfd);
      if (ufd >= 0)
        close(ufd);
      continue;
    }
    tcp_nodelay(cfd);
    tcp_nodelay(ufd);
    for (int i = 0; i < 2; i++) {
      f->ep[i] = (endpoint){
          .kind = EP_FLOW, .fd = i ? ufd : cfd, .side = i, .owner = f};
      dq_init(&f->q[i], EP_FLOW, f, i);
    }
    f->next = &flows;
    f->prev = flows.prev;
    flows.prev->next = f;
    flows.prev = f;
    nflows++;
    st.tcp_conns++;
    if (connect(ufd, (struct sockaddr *)&to_addr, to_len) < 0) {
      if (errno != EINPROGRESS) {
        flow_close(f, 1);
        continue;
      }
      f->connecting = 1;
    }
    flow_update(f);
  }
}

static void flow_event(flow *f, int side, uint32_t events) {
  int r = 0;
  if (side == 1 && f->connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(f->ep[1].fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) {
      flow_close(f, 1);
      return;
    }
    if (!(events & EPOLLOUT))
      return;
    f->connecting = 0;
    events |= EPOLLOUT;
  }
  if (events & EPOLLERR) {
    flow_close(f, 1);
    return;
  }
  if (events & EPOLLOUT)
    r = flow_flush(f, side);
  if (r == 0 && (events & (EPOLLIN | EPOLLHUP)) && !f->eof[side])
    r = flow_read(f, side);
  if (r < 0) {
    flow_close(f, 1);
    return;
  }
  if (r > 0) {
    flow_close(f, 0);
    return;
  }
  flow_update(f);
}

/* ---- UDP ---------------------------------------------------------------
 *
 * A session is one client address and its upstream socket. q[0] holds
 * datagrams to send upstream, q[1] replies to send to the client from the
 * listening socket.
 */
typedef struct session {
  endpoint ep;
  struct sockaddr_storage peer;
  socklen_t peer_len;
  dqueue q[2];
  uint64_t last;
  int blocked; /* upstream send would block */
  struct session *hnext, *next, *prev;
} session;

#define HASH_SIZE 2048 /* a power of two, >= MAX_SESSIONS */
static session *table[HASH_SIZE];
static session sessions; /* list head */
static unsigned nsessions;
static endpoint udp_ep;
static int udp_blocked; /* the listening socket's sends would block */

static char dgram_buf[BATCH][DGRAM_MAX];

static uint32_t addr_hash(const void *a, socklen_t len) {
  uint32_t h = 2166136261u;
  for (socklen_t i = 0; i < len; i++)
    h = (h ^ ((const unsigned char *)a)[i]) * 16777619u;
  return h & (HASH_SIZE - 1);
}

static void session_free(session *s) {
  session **pp = &table[addr_hash(&s->peer, s->peer_len)];
  while (*pp != s)
    pp = &(*pp)->hnext;
  *pp = s->hnext;
  close(s->ep.fd);
  dq_free(&s->q[0]);
  dq_free(&s->q[1]);
  s->prev->next = s->next;
  s->next->prev = s->prev;
  nsessions--;
  free(s);
}

static void udp_buffers(int fd) {
  int size = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
}

static session *session_get(const struct sockaddr_storage *peer,
                            socklen_t len) {
  uint32_t h = addr_hash(peer, len);
  for (session *s = table[h]; s; s = s->hnext)
    if (s->peer_len == len && memcmp(&s->peer, peer, len) == 0)
      return s;
  if (nsessions >= MAX_SESSIONS)
    return NULL;
  int fd = socket(to_addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return NULL;
  session *s = calloc(1, sizeof *s);
  if (!s || connect(fd, (struct sockaddr *)&to_addr, to_len) < 0) {
    free(s);
    close(fd);
    return NULL;
  }
  udp_buffers(fd);
  s->ep = (endpoint){.kind = EP_SESSION, .fd = fd, .owner = s};
  dq_init(&s->q[0], EP_SESSION, s, 0);
  dq_init(&s->q[1], EP_SESSION, s, 1);
  memcpy(&s->peer, peer, len);
  s->peer_len = len;
  s->hnext = table[h];
  table[h] = s;
  s->next = &sessions;
  s->prev = sessions.prev;
  sessions.prev->next = s;
  sessions.prev = s;
  nsessions++;
  st.udp_sessions++;
  watch(&s->ep, EPOLLIN);
  return s;
}

/* Queue one datagram going `dir` (0 up, 1 down). */
static void udp_queue(session *s, int dir, const char *d, size_t len) {
  st.udp_dgrams[dir]++;
  st.udp_bytes[dir] += len;
  if (lose()) {
    st.udp_lost[dir]++;
    return;
  }
  size_t room;
  char *p = dq_reserve(&s->q[dir], len, len, &room);
  if (!p) {
    st.udp_overflow[dir]++;
    return;
  }
  memcpy(p, d, len);
  if (!dq_commit(&s->q[dir], p, len, now_ns() + cfg.delay_ns, 0))
    st.udp_overflow[dir]++;
}

/* Send what is due in s->q[dir]. Returns 0 when it would block. */
static int udp_flush(session *s, int dir) {
  dqueue *q = &s->q[dir];
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  while (q->ndue > 0) {
    unsigned n = q->ndue < BATCH ? q->ndue : BATCH;
    for (unsigned i = 0; i < n; i++) {
      chunk *c = dq_at(q, i);
      iov[i] = (struct iovec){.iov_base = q->buf + c->off, .iov_len = c->len};
      msgs[i] =
          (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
      if (dir == 1) {
        msgs[i].msg_hdr.msg_name = &s->peer;
        msgs[i].msg_hdr.msg_namelen = s->peer_len;
      }
    }
    int sent = sendmmsg(dir ? udp_ep.fd : s->ep.fd, msgs, n, 0);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return 0;
      if (errno == EINTR)
        continue;
      /* ECONNREFUSED and the like: nobody at TO just now; the datagram
       * is lost, as it would be on a network. */
      st.udp_overflow[dir]++;
      sent = 1;
    }
    for (int i = 0; i < sent; i++)
      dq_consume(q, dq_at(q, 0)->len);
  }
  return 1;
}

/* Read a batch from `fd`: the listening socket (dir 0, s NULL) or a
 * session's upstream socket (dir 1). */
static void udp_read(int fd, session *s, int dir) {
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  struct sockaddr_storage from[BATCH];
  for (int i = 0; i < BATCH; i++) {
    iov[i] = (struct iovec){.iov_base = dgram_buf[i], .iov_len = DGRAM_MAX};
    msgs[i] = (struct mmsghdr){.msg_hdr = {.msg_name = &from[i],
                                           .msg_namelen = sizeof from[i],
                                           .msg_iov = &iov[i],
                                           .msg_iovlen = 1}};
  }
  int n = recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
  uint64_t now = now_ns();
  for (int i = 0; i < n; i++) {
    session *t = s;
    if (!t) {
      t = session_get(&from[i], msgs[i].msg_hdr.msg_namelen);
      if (!t) {
        st.udp_dgrams[0]++;
        st.udp_overflow[0]++;
        continue;
      }
    }
    t->last = now;
    udp_queue(t, dir, dgram_buf[i], msgs[i].msg_len);
  }
}

static void session_update(session *s) {
  watch(&s->ep, EPOLLIN | (s->blocked ? EPOLLOUT : 0));
}

/* ---- Setup ---- */

static void set_port(struct sockaddr_storage *ss, int port) {
  if (ss->ss_family == AF_INET)
    ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
  else
    ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
}

static int parse_addr(const char *arg, struct sockaddr_storage *ss,
                      socklen_t *len) {
  char host[256];
  const char *colon = strrchr(arg, ':');
  if (!colon || (size_t)(colon - arg) >= sizeof host)
    return -1;
  memcpy(host, arg, (size_t)(colon - arg));
  host[colon - arg] = 0;
  char *h = host;
  if (h[0] == '[' && h[strlen(h) - 1] == ']') {
    h[strlen(h) - 1] = 0;
    h++;
  }
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end || end == colon + 1 || port < 0 || port > 65535)
    return -1;
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *ai;
  if (getaddrinfo(h, NULL, &hints, &ai) != 0)
    return -1;
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  *len = ai->ai_addrlen;
  freeaddrinfo(ai);
  set_port(ss, (int)port);
  return 0;
}

static int port_of(const struct sockaddr_storage *ss) {
  return ntohs(ss->ss_family == AF_INET
                   ? ((const struct sockaddr_in *)ss)->sin_port
                   : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

static int get_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &len);
  return port_of(&ss);
}

static int bind_one(int type, struct sockaddr_storage *ss, socklen_t len) {
  int fd = socket(ss->ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0)
    return -1;
  if (type == SOCK_STREAM)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)ss, len) < 0 ||
      (type == SOCK_STREAM && listen(fd, 1024) < 0)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Bind TCP and/or UDP on one port number; with port 0 try free ones until
 * both protocols get the same. */
static int bind_both(struct sockaddr_storage *ss, socklen_t len, int tcp,
                     int udp, int *tfd, int *ufd) {
  int want = port_of(ss);
  for (int tries = 0; tries < 100; tries++) {
    set_port(ss, want);
    *tfd = tcp ? bind_one(SOCK_STREAM, ss, len) : -1;
    if (tcp && *tfd < 0)
      return -1;
    if (tcp)
      set_port(ss, get_port(*tfd));
    *ufd = udp ? bind_one(SOCK_DGRAM, ss, len) : -1;
    if (!udp || *ufd >= 0)
      return 0;
    if (*tfd >= 0)
      close(*tfd);
    if (want != 0 || !tcp)
      return -1;
  }
  return -1;
}

static int usage(void) {
  fprintf(stderr,
          "usage: " PROG " --listen HOST:PORT --to HOST:PORT --delay-ms D\n"
          "       [--tcp] [--udp] [--loss PCT] [--seed N]\n"
          "       [--max-queue BYTES] [--json FILE]\n");
  return 2;
}

/* A byte count, optionally with a binary suffix k, m or g. */
static int parse_size(const char *s, size_t *out) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s)
    return -1;
  switch (*end) {
  case 'k':
  case 'K':
    v <<= 10;
    end++;
    break;
  case 'm':
  case 'M':
    v <<= 20;
    end++;
    break;
  case 'g':
  case 'G':
    v <<= 30;
    end++;
    break;
  default:
    break;
  }
  if (*end || v < 4096 || v > (1ull << 31))
    return -1;
  *out = (size_t)v;
  return 0;
}

static double cpu_seconds(struct timeval tv) {
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static void report(FILE *out) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  fprintf(out,
          "{\"tcp\":{\"connections\":%" PRIu64 ",\"refused\":%" PRIu64
          ",\"resets\":%" PRIu64 ",\"bytes_up\":%" PRIu64
          ",\"bytes_down\":%" PRIu64 "},\n"
          " \"udp\":{\"sessions\":%" PRIu64 ",\"datagrams_up\":%" PRIu64
          ",\"datagrams_down\":%" PRIu64 ",\"bytes_up\":%" PRIu64
          ",\"bytes_down\":%" PRIu64 ",\"lost_up\":%" PRIu64
          ",\"lost_down\":%" PRIu64 ",\"overflow_up\":%" PRIu64
          ",\"overflow_down\":%" PRIu64 "},\n"
          " \"max_queue_bytes\":%zu,\"cpu_user_s\":%.3f,\"cpu_sys_s\":%.3f}\n",
          st.tcp_conns, st.tcp_refused, st.tcp_resets, st.tcp_bytes[0],
          st.tcp_bytes[1], st.udp_sessions, st.udp_dgrams[0], st.udp_dgrams[1],
          st.udp_bytes[0], st.udp_bytes[1], st.udp_lost[0], st.udp_lost[1],
          st.udp_overflow[0], st.udp_overflow[1], st.max_queue,
          cpu_seconds(ru.ru_utime), cpu_seconds(ru.ru_stime));
}

/* Send what has come due: a pass over the queues holding undue chunks.
 * Returns the earliest due time left, or 0. */
static uint64_t release_due(uint64_t now) {
  uint64_t next = 0;
  for (dqueue *q = waiting.next, *nx; q != &waiting; q = nx) {
    nx = q->next;
    uint32_t before = q->ndue;
    uint64_t due = dq_release(q, now);
    if (due && (!next || due < next))
      next = due;
    if (q->ndue == before)
      continue;
    if (q->kind == EP_FLOW) {
      flow *f = q->owner;
      int side = 1 - q->idx;
      if (f->dead || f->blocked[side])
        continue;
      int r = flow_flush(f, side);
      if (r != 0)
        flow_close(f, r < 0);
      else
        flow_update(f);
    } else {
      session *s = q->owner;
      if (q->idx == 0 && !s->blocked && !udp_flush(s, 0)) {
        s->blocked = 1;
        session_update(s);
      } else if (q->idx == 1 && !udp_blocked && !udp_flush(s, 1)) {
        udp_blocked = 1;
        watch(&udp_ep, EPOLLIN | EPOLLOUT);
      }
    }
  }
  return next;
}

/* The listening UDP socket can send again: every session's due replies. */
static void udp_unblock(void) {
  udp_blocked = 0;
  for (session *s = sessions.next; s != &sessions; s = s->next)
    if (s->q[1].ndue > 0 && !udp_flush(s, 1)) {
      udp_blocked = 1;
      break;
    }
  watch(&udp_ep, EPOLLIN | (udp_blocked ? EPOLLOUT : 0));
}

static void sweep_sessions(uint64_t now) {
  for (session *s = sessions.next, *nx; s != &sessions; s = nx) {
    nx = s->next;
    if (now - s->last >= SESSION_IDLE_NS && s->q[0].count == 0 &&
        s->q[1].count == 0)
      session_free(s);
  }
}

static void arm(int tfd, uint64_t at) {
  struct itimerspec its = {0};
  if (at) {
    its.it_value.tv_sec = (time_t)(at / 1000000000ull);
    its.it_value.tv_nsec = (long)(at % 1000000000ull);
  }
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

int main(int argc, char **argv) {
  const char *listen_arg = NULL, *to_arg = NULL, *json = NULL;
  long delay_ms = -1;
  int tcp = 0, udp = 0;
  cfg.max_queue = DEFAULT_MAX_QUEUE;
  cfg.rng = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (strcmp(a, "--tcp") == 0) {
      tcp = 1;
      continue;
    }
    if (strcmp(a, "--udp") == 0) {
      udp = 1;
      continue;
    }
    if (!v)
      return usage();
    i++;
    if (strcmp(a, "--listen") == 0) {
      listen_arg = v;
    } else if (strcmp(a, "--to") == 0) {
      to_arg = v;
    } else if (strcmp(a, "--json") == 0) {
      json = v;
    } else if (strcmp(a, "--delay-ms") == 0) {
      delay_ms = strtol(v, &end, 10);
      if (*end || end == v || delay_ms < 0 || delay_ms > 60000)
        return usage();
    } else if (strcmp(a, "--loss") == 0) {
      cfg.loss = strtod(v, &end);
      if (*end || end == v || !(cfg.loss >= 0 && cfg.loss <= 100))
        return usage();
    } else if (strcmp(a, "--seed") == 0) {
      cfg.rng = strtoull(v, &end, 10);
      if (*end || end == v)
        return usage();
    } else if (strcmp(a, "--max-queue") == 0) {
      if (parse_size(v, &cfg.max_queue) < 0)
        return usage();
    } else {
      return usage();
    }
  }
  struct sockaddr_storage laddr;
  socklen_t llen;
  if (!listen_arg || !to_arg || delay_ms < 0 ||
      parse_addr(listen_arg, &laddr, &llen) < 0 ||
      parse_addr(to_arg, &to_addr, &to_len) < 0)
    return usage();
  if (!tcp && !udp)
    tcp = udp = 1;
  cfg.delay_ns = (uint64_t)delay_ms * 1000000ull;
  cfg.budget = cfg.max_queue * 4;

  signal(SIGPIPE, SIG_IGN);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigprocmask(SIG_BLOCK, &sigs, NULL);
  int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  epfd = epoll_create1(EPOLL_CLOEXEC);
  int lfd, ufd;
  if (sfd < 0 || tfd < 0 || epfd < 0 ||
      bind_both(&laddr, llen, tcp, udp, &lfd, &ufd) < 0) {
    fprintf(stderr, PROG ": cannot listen on %s: %s\n", listen_arg,
            strerror(errno));
    return 1;
  }
  waiting.next = waiting.prev = &waiting;
  flows.next = flows.prev = &flows;
  dead.next = dead.prev = &dead;
  sessions.next = sessions.prev = &sessions;
  endpoint sig_ep = {.kind = EP_SIG, .fd = sfd};
  endpoint timer_ep = {.kind = EP_TIMER, .fd = tfd};
  endpoint tcp_ep = {.kind = EP_TCP_LISTEN, .fd = lfd};
  watch(&sig_ep, EPOLLIN);
  watch(&timer_ep, EPOLLIN);
  if (tcp)
    watch(&tcp_ep, EPOLLIN);
  if (udp) {
    udp_ep = (endpoint){.kind = EP_UDP_LISTEN, .fd = ufd};
    udp_buffers(ufd);
    watch(&udp_ep, EPOLLIN);
  }
  printf(PROG ": listening TCP %d UDP %d\n", tcp ? get_port(lfd) : 0,
         udp ? get_port(ufd) : 0);
  fflush(stdout);

  uint64_t next_sweep = 0;
  for (;;) {
    struct epoll_event evs[MAX_EVENTS];
    int n = epoll_wait(epfd, evs, MAX_EVENTS, -1);
    if (n < 0 && errno != EINTR) {
      perror(PROG ": epoll_wait");
      return 1;
    }
    for (int i = 0; i < n; i++) {
      endpoint *e = evs[i].data.ptr;
      uint32_t ev = evs[i].events;
      switch (e->kind) {
      case EP_SIG: {
        FILE *out = json ? fopen(json, "w") : stderr;
        if (!out) {
          perror(json);
          return 1;
        }
        report(out);
        return fclose(out) == 0 ? 0 : 1;
      }
      case EP_TIMER: {
        uint64_t ticks;
        if (read(tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
          return 1;
        break;
      }
      case EP_TCP_LISTEN:
        tcp_accept(lfd);
        break;
      case EP_FLOW: {
        flow *f = e->owner;
        if (!f->dead)
          flow_event(f, e->side, ev);
        break;
      }
      case EP_UDP_LISTEN:
        if (ev & EPOLLOUT)
          udp_unblock();
        if (ev & EPOLLIN)
          udp_read(ufd, NULL, 0);
        break;
      case EP_SESSION: {
        session *s = e->owner;
        if (ev & EPOLLOUT) {
          s->blocked = !udp_flush(s, 0);
          session_update(s);
        }
        if (ev & (EPOLLIN | EPOLLERR))
          udp_read(s->ep.fd, s, 1);
        break;
      }
      }
    }
    uint64_t now = now_ns();
    uint64_t at = release_due(now);
    flows_reap();
    if (nsessions > 0) {
      if (now >= next_sweep) {
        sweep_sessions(now);
        next_sweep = now + 1000000000ull;
      }
      if (!at || next_sweep < at)
        at = next_sweep;
    }
    arm(tfd, at);
  }
}
