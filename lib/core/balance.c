/* Spreading new connections over the workers (tern_settings.balance):
 * each worker's load in a slot, the pick of the least loaded, and the
 * hand-off of an accepted socket to the worker picked: through a ring
 * beside its inbox when it is in this process, over a socket pair
 * (SCM_RIGHTS) when it is in another one (tern_server_fork).
 *
 * The slots are an array over every worker of every process, worker `i`
 * of process `p` at p * nworkers + i: plain memory with one process,
 * shared memory (mapped before the fork) with several. A worker alone
 * writes its slot's `active` and `taken`; any worker that hands it a
 * connection counts it in `incoming`, and the worker takes it out once
 * the connection is in. Pointers (an accepted socket's listener
 * configuration, its accept function) cross to another process as they
 * are: the processes are forks of one, made after every listener existed,
 * so their addresses are the same in each.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/listener.h"
#include "core/worker.h"

static uint64_t now_ms(void) {
  return uv_hrtime() / 1000000u;
}

static unsigned slot_index(const tern__worker *w) {
  return w->srv->proc * w->srv->nworkers + w->id;
}

int tern__balance_enabled(const tern_server *srv) {
  return srv->s.balance == TERN_BALANCE_LEAST_CONNECTIONS &&
         srv->nprocs * srv->nworkers > 1;
}

/* ---- Set-up ------------------------------------------------------- */

static void on_recv(uv_poll_t *h, int status, int events);

int tern__balance_worker_init(tern__worker *w) {
  tern_server *srv = w->srv;
  if (srv->slots == NULL) {
    /* One process: plain memory, made with the first worker. */
    srv->slots = tern__malloc(srv, srv->nworkers * sizeof(*srv->slots));
    if (srv->slots == NULL)
      return TERN_ENOMEM;
    memset(srv->slots, 0, srv->nworkers * sizeof(*srv->slots));
    srv->nslots = srv->nworkers;
  }
  w->slot = &srv->slots[slot_index(w)];
  atomic_store(&w->slot->stopping, 0);
  if (!tern__balance_enabled(srv))
    return 0;
  if (srv->nworkers > 1 &&
      (w->handoff =
           tern__malloc(srv, TERN__HANDOFF_CAP * sizeof(*w->handoff))) == NULL)
    return TERN_ENOMEM;
  if (srv->recv_fds != NULL && srv->recv_fds[slot_index(w)] >= 0) {
    if (uv_poll_init(w->loop, &w->recv, srv->recv_fds[slot_index(w)]) != 0)
      return TERN_EIO;
    w->recv_fd = srv->recv_fds[slot_index(w)];
    w->recv.data = w;
    w->handles_open++;
    uv_poll_start(&w->recv, UV_READABLE, on_recv);
  }
  return 0;
}

void tern__balance_free(tern_server *srv) {
  unsigned i;
  if (srv->slots_mapped)
    munmap(srv->slots, srv->nslots * sizeof(*srv->slots));
  else
    tern__free(srv, srv->slots);
  srv->slots = NULL;
  for (i = 0; srv->send_fds != NULL && i < srv->nslots; i++) {
    if (srv->send_fds[i] >= 0)
      close(srv->send_fds[i]);
    if (srv->recv_fds[i] >= 0)
      close(srv->recv_fds[i]);
  }
  tern__free(srv, srv->send_fds);
  tern__free(srv, srv->recv_fds);
  srv->send_fds = srv->recv_fds = NULL;
}

/* ---- Picking ------------------------------------------------------ */

static uint64_t load_of(tern__slot *s) {
  return atomic_load_explicit(&s->active, memory_order_relaxed) +
         atomic_load_explicit(&s->incoming, memory_order_relaxed);
}

/* The slot with the fewest open connections (those on their way to it
 * counted), and between equals the fewest taken in so far: short
 * connections (one request each) often leave every worker with as many
 * open, and the kernel would then choose, mostly the worker already
 * awake. Skipped: a worker whose loop is ending, and one held up (a
 * connection handed to it has waited TERN__HANDOFF_STALL_MS without
 * anything being taken in: a handler blocks its loop; a connection handed
 * to it now would wait as long). -1: the acceptor keeps it. */
static int pick(tern__worker *w) {
  tern_server *srv = w->srv;
  unsigned self = slot_index(w), i;
  tern__slot *me = w->slot;
  uint64_t least = load_of(me),
           taken = atomic_load_explicit(&me->taken, memory_order_relaxed),
           now = 0;
  int best = -1;
  for (i = 0; i < srv->nslots; i++) {
    tern__slot *s = &srv->slots[i];
    uint64_t n, t;
    if (i == self || (n = load_of(s)) > least ||
        atomic_load_explicit(&s->stopping, memory_order_relaxed))
      continue;
    t = atomic_load_explicit(&s->taken, memory_order_relaxed);
    if (n == least && t >= taken)
      continue;
    if (atomic_load_explicit(&s->incoming, memory_order_relaxed) > 0) {
      if (now == 0)
        now = now_ms();
      if (now - atomic_load_explicit(&s->progress_ms, memory_order_relaxed) >=
          TERN__HANDOFF_STALL_MS)
        continue;
    }
    best = (int)i;
    least = n;
    taken = t;
  }
  return best;
}

/* ---- Handing over ------------------------------------------------- */

/* In this process: the ring beside the worker's inbox. */
static int hand_local(tern__worker *to, int fd, tern__adopt_fn adopt,
                      const void *cfg) {
  tern__handoff *h;
  uv_mutex_lock(&to->inbox_lock);
  if (to->inbox_closed || to->handoff == NULL ||
      to->handoff_len == TERN__HANDOFF_CAP) {
    uv_mutex_unlock(&to->inbox_lock);
    return TERN_ECLOSED;
  }
  h = &to->handoff[(to->handoff_head + to->handoff_len++) % TERN__HANDOFF_CAP];
  h->fd = fd;
  h->adopt = adopt;
  h->cfg = cfg;
  uv_async_send(&to->async);
  uv_mutex_unlock(&to->inbox_lock);
  return 0;
}

/* What crosses to another process with the socket. */
typedef struct {
  tern__adopt_fn adopt;
  const void *cfg;
} remote_msg;

/* A message of one remote_msg and room for one descriptor. */
typedef struct {
  remote_msg m;
  struct iovec iov;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    size_t align; /* a cmsghdr's (its first member is a size_t) */
  } c;
  struct msghdr mh;
} pair_msg;

static void pair_msg_init(pair_msg *p) {
  memset(p, 0, sizeof(*p));
  p->iov.iov_base = &p->m;
  p->iov.iov_len = sizeof(p->m);
  p->mh.msg_iov = &p->iov;
  p->mh.msg_iovlen = 1;
  p->mh.msg_control = p->c.buf;
  p->mh.msg_controllen = sizeof(p->c.buf);
}

/* In another process: the socket over the pair to that worker (without
 * waiting: a full pair leaves the connection with the acceptor). The
 * descriptor is the receiver's once sent; ours is closed. */
static int hand_remote(tern_server *srv, unsigned s, int fd,
                       tern__adopt_fn adopt, const void *cfg) {
  pair_msg p;
  struct cmsghdr *cm;

  pair_msg_init(&p);
  p.m.adopt = adopt;
  p.m.cfg = cfg;
  cm = CMSG_FIRSTHDR(&p.mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  if (sendmsg(srv->send_fds[s], &p.mh, MSG_DONTWAIT | MSG_NOSIGNAL) !=
      (ssize_t)sizeof(p.m)) {
    /* Its process is gone (the pair's other end closed): hand it no more
     * (a full pair, EAGAIN, only means not now). */
    if (errno == EPIPE || errno == ECONNREFUSED || errno == ECONNRESET)
      atomic_store(&srv->slots[s].stopping, 1);
    return TERN_ECLOSED;
  }
  close(fd);
  return 0;
}

void tern__balance_accept(tern__worker *w, int fd, tern__adopt_fn adopt,
                          const void *cfg) {
  tern_server *srv = w->srv;
  tern__slot *s;
  int to, rc;

  if (!tern__balance_enabled(srv) || w->stopping || (to = pick(w)) < 0) {
    adopt(w, fd, cfg);
    return;
  }
  s = &srv->slots[to];
  /* Counted before it is sent, so that the receiver never counts it out
   * first; a first one on its way starts the held-up clock. */
  if (atomic_fetch_add(&s->incoming, 1) == 0)
    atomic_store_explicit(&s->progress_ms, now_ms(), memory_order_relaxed);
  rc = (unsigned)to / srv->nworkers == srv->proc
           ? hand_local(&srv->workers[(unsigned)to % srv->nworkers], fd, adopt,
                        cfg)
           : hand_remote(srv, (unsigned)to, fd, adopt, cfg);
  if (rc != 0) {
    atomic_fetch_sub(&s->incoming, 1);
    adopt(w, fd, cfg);
  }
}

/* ---- Taking in ---------------------------------------------------- */

/* One connection handed over is in (or refused): no longer on its way. */
static void taken_in(tern__worker *w, int fd, tern__adopt_fn adopt,
                     const void *cfg) {
  TERN__STAT_ADD(w->stats.handed_in, 1);
  adopt(w, fd, cfg);
  atomic_fetch_sub(&w->slot->incoming, 1);
  atomic_store_explicit(&w->slot->progress_ms, now_ms(), memory_order_relaxed);
}

void tern__balance_take(tern__worker *w) {
  tern__handoff batch[32];
  unsigned n, i;
  if (w->handoff == NULL)
    return;
  do {
    uv_mutex_lock(&w->inbox_lock);
    for (n = 0; n < 32 && w->handoff_len > 0; n++, w->handoff_len--) {
      batch[n] = w->handoff[w->handoff_head];
      w->handoff_head = (w->handoff_head + 1) % TERN__HANDOFF_CAP;
    }
    uv_mutex_unlock(&w->inbox_lock);
    for (i = 0; i < n; i++)
      taken_in(w, batch[i].fd, batch[i].adopt, batch[i].cfg);
  } while (n == 32);
}

/* One message from another process: the socket; -2 for a message that
 * was not ours (dropped); -1 when there is none now; -3 when there will be
 * none again (every other process closed its end, or the pair failed). */
static int recv_one(int pair, remote_msg *m) {
  pair_msg p;
  struct cmsghdr *cm;
  ssize_t n;
  int fd = -1;

  pair_msg_init(&p);
  do
    n = recvmsg(pair, &p.mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return -1;
  if (n <= 0)
    return -3;
  cm = CMSG_FIRSTHDR(&p.mh);
  if (cm != NULL && cm->cmsg_level == SOL_SOCKET &&
      cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  if (fd < 0 || n != (ssize_t)sizeof(p.m)) {
    if (fd >= 0)
      close(fd);
    fd = -2; /* not one of ours: dropped, go on */
  }
  *m = p.m;
  return fd;
}

/* The pair is readable: take in up to 64 connections a loop turn, so
 * that a flood from other processes cannot hold this worker's loop. A
 * socket from another process on a worker that is stopping is refused by
 * the accept function, as one accepted here would be. */
static void on_recv(uv_poll_t *h, int status, int events) {
  tern__worker *w = h->data;
  unsigned i;
  (void)status;
  (void)events;
  for (i = 0; i < 64; i++) {
    remote_msg m;
    int fd = recv_one(w->recv_fd, &m);
    if (fd == -1)
      break;
    if (fd == -3) {
      /* No other process is left to hand anything over: an end of file
       * would keep the pair readable, and the loop spinning. */
      uv_poll_stop(&w->recv);
      break;
    }
    if (fd >= 0)
      taken_in(w, fd, m.adopt, m.cfg);
  }
}

void tern__balance_stop(tern__worker *w) {
  if (w->slot != NULL)
    atomic_store(&w->slot->stopping, 1);
}

void tern__balance_close(tern__worker *w) {
  remote_msg m;
  int fd;
  if (w->slot != NULL)
    atomic_store(&w->slot->stopping, 1);
  /* Connections handed over and not taken in: their clients see a close,
   * as for any connection the stop refuses. (The ring's are closed with
   * the inbox.) */
  if (w->recv_fd >= 0) {
    while ((fd = recv_one(w->recv_fd, &m)) != -1 && fd != -3)
      if (fd >= 0) {
        close(fd);
        atomic_fetch_sub(&w->slot->incoming, 1);
      }
    tern__worker_close_handle(w, (uv_handle_t *)&w->recv);
  }
}

/* ---- Several processes -------------------------------------------- */

int tern_server_fork(tern_server *srv, unsigned processes, unsigned *index,
                     int *pids) {
  unsigned n, i, p = 0;
  tern__slot *slots;
  int *send_fds = NULL, *recv_fds = NULL, *kids = NULL, rc = TERN_ENOMEM;

  if (srv == NULL || index == NULL || processes == 0 || processes > 1024)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE || srv->nprocs > 1 ||
      srv->slots != NULL || srv->nlisteners == 0) {
    tern__log(srv, TERN_LOG_ERROR,
              "tern_server_fork refused: call it once, after the listeners "
              "and before tern_run");
    return TERN_ESTATE;
  }
  for (i = 0; i < srv->nlisteners; i++)
    if (srv->listeners[i]->ops->quic_port != NULL) {
      tern__log(srv, TERN_LOG_ERROR,
                "tern_server_fork refused: a QUIC listener's connections "
                "are routed within one process (serve HTTP/3 from one)");
      return TERN_ENOTSUP;
    }
  if (srv->s.balance == TERN_BALANCE_REUSEPORT || srv->alog != NULL) {
    tern__log(srv, TERN_LOG_ERROR, "tern_server_fork refused: %s",
              srv->alog != NULL
                  ? "the access log's writer thread would not be in the "
                    "other processes (call tern_server_access_log after it)"
                  : "balance REUSEPORT's sockets are per worker of one "
                    "process");
    return srv->alog != NULL ? TERN_ESTATE : TERN_ENOTSUP;
  }
  if (processes == 1) {
    *index = 0;
    return 0;
  }
  n = processes * srv->nworkers;
  slots = mmap(NULL, n * sizeof(*slots), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (slots == MAP_FAILED)
    return TERN_ENOMEM;
  if ((kids = tern__malloc(srv, processes * sizeof(int))) == NULL)
    goto fail;
  rc = TERN_EIO;
  if (srv->s.balance == TERN_BALANCE_LEAST_CONNECTIONS) {
    send_fds = tern__malloc(srv, n * sizeof(int));
    recv_fds = tern__malloc(srv, n * sizeof(int));
    if (send_fds == NULL || recv_fds == NULL) {
      rc = TERN_ENOMEM;
      goto fail;
    }
    for (i = 0; i < n; i++)
      send_fds[i] = recv_fds[i] = -1;
    for (i = 0; i < n; i++) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        goto fail;
      send_fds[i] = sv[0];
      recv_fds[i] = sv[1];
    }
  }
  for (p = 1; p < processes; p++) {
    pid_t pid = fork();
    if (pid == 0)
      break;
    if (pid < 0) {
      /* The ones made die before they serve anything. */
      while (--p > 0) {
        kill(kids[p], SIGKILL);
        waitpid(kids[p], NULL, 0);
      }
      goto fail;
    }
    kids[p] = (int)pid;
  }
  if (p == processes) {
    p = 0; /* the caller's process */
    for (i = 1; pids != NULL && i < processes; i++)
      pids[i - 1] = kids[i];
  }
  tern__free(srv, kids);
  /* Each process keeps the receiving ends of its own workers and the
   * sending ends of the others'. */
  for (i = 0; send_fds != NULL && i < n; i++) {
    if (i / srv->nworkers == p) {
      close(send_fds[i]);
      send_fds[i] = -1;
    } else {
      close(recv_fds[i]);
      recv_fds[i] = -1;
    }
  }
  srv->slots = slots;
  srv->slots_mapped = 1;
  srv->nslots = n;
  srv->nprocs = processes;
  srv->proc = p;
  srv->send_fds = send_fds;
  srv->recv_fds = recv_fds;
  *index = p;
  return 0;
fail:
  tern__log(srv, TERN_LOG_ERROR, "tern_server_fork: %s", strerror(errno));
  for (i = 0; send_fds != NULL && recv_fds != NULL && i < n; i++) {
    if (send_fds[i] >= 0)
      close(send_fds[i]);
    if (recv_fds[i] >= 0)
      close(recv_fds[i]);
  }
  tern__free(srv, send_fds);
  tern__free(srv, recv_fds);
  tern__free(srv, kids);
  munmap(slots, n * sizeof(*slots));
  return rc;
}
