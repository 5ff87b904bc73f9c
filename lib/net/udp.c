/* UDP sockets for QUIC: see udp.h. Reading drains the socket in batches
 * of recvmmsg, bounded per wake-up so that one busy socket cannot starve
 * the loop's other work; each datagram goes to the owner with its path
 * and ECN bits, and done() follows the batch, so that what the batch
 * made ready leaves together (the owner writes from the check phase).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/udp.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

#define UDP_BATCH 32
#define UDP_BATCHES 8 /* per wake-up: then the loop's other work runs */

static void on_poll(uv_poll_t *h, int status, int events);

/* The options QUIC needs on a socket of family v6 or IPv4 (`dual`: an
 * IPv6 socket that also takes IPv4). */
static void quic_options(int fd, int v6, int dual) {
  int one = 1, rcvbuf = 4 << 20;
  /* One socket takes every datagram of the worker's connections, and a
   * client's burst at a long round trip (a window's worth, sent at once)
   * overflows the system default of about 208 KiB: the losses then cut
   * the sender's congestion window. Ask for 4 MiB (the kernel caps it at
   * net.core.rmem_max; docs/http3.md). */
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  if (v6) {
    int pmtu = IPV6_PMTUDISC_DO;
    setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu));
  }
  if (!v6 || dual) {
    /* Datagrams carry DF, so that path MTU probes mean what they say. */
    int pmtu = IP_PMTUDISC_DO;
    setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
  }
}

int tern__udp_socket(const struct sockaddr_storage *addr, int dual) {
  int one = 1, fd;
  int v6 = addr->ss_family == AF_INET6;
  socklen_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

  fd = socket(addr->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return TERN_EIO;
  /* Every worker's socket joins one group; the kernel spreads flows over
   * them by 4-tuple, and a packet that lands on the wrong worker (a new
   * path) is forwarded by connection ID (lib/quic). */
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (v6) {
    int zero = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual ? &zero : &one, sizeof(one));
  }
  quic_options(fd, v6, dual);
  if (bind(fd, (const struct sockaddr *)addr, len) != 0) {
    int e = errno;
    close(fd);
    return e == EADDRINUSE ? TERN_EADDRINUSE : TERN_EADDR;
  }
  return fd;
}

const char *tern__udp_adopt(int fd, struct sockaddr_storage *addr) {
  socklen_t len = sizeof(int);
  int type = 0, v6only = 1, flags;

  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
    return "not a socket";
  if (type != SOCK_DGRAM)
    return "not a datagram (UDP) socket";
  len = sizeof(*addr);
  memset(addr, 0, sizeof(*addr));
  if (getsockname(fd, (struct sockaddr *)addr, &len) != 0 ||
      (addr->ss_family != AF_INET && addr->ss_family != AF_INET6))
    return "not an IPv4 or IPv6 socket";
  if (tern__net_port(addr) == 0)
    return "not bound to a port";
  flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return "cannot be made non-blocking";
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (addr->ss_family == AF_INET6) {
    len = sizeof(int);
    if (getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len) != 0)
      v6only = 1;
  }
  quic_options(fd, addr->ss_family == AF_INET6, !v6only);
  return NULL;
}

int tern__udp_start(tern__udp *u, tern__worker *w, int fd,
                    const tern__udp_ops *ops, void *user) {
  struct sockaddr_storage ss;
  socklen_t slen = sizeof(ss);
  int seg = 1200, rc;

  memset(u, 0, sizeof(*u));
  u->w = w;
  u->ops = ops;
  u->user = user;
  u->fd = fd;
  if (getsockname(fd, (struct sockaddr *)&ss, &slen) == 0)
    u->family = ss.ss_family;
  /* Probe for GSO: setting the option on the socket is refused by
   * kernels without it; each send then sets its own size. */
  u->gso = setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg)) == 0;
  if (u->gso) {
    seg = 0;
    setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg));
  }
  u->rbuf = tern__malloc(w->srv, (size_t)UDP_BATCH * TERN__UDP_DGRAM_MAX);
  rc = u->rbuf == NULL                                   ? TERN_ENOMEM
       : uv_poll_init_socket(w->loop, &u->poll, fd) != 0 ? TERN_EIO
                                                         : 0;
  if (rc != 0) {
    tern__free(w->srv, u->rbuf);
    u->rbuf = NULL;
    close(fd);
    u->fd = -1;
    return rc;
  }
  u->poll.data = u;
  w->handles_open++;
  u->polling = 1;
  uv_poll_start(&u->poll, UV_READABLE, on_poll);
  return 0;
}

static void on_closed(uv_handle_t *h) {
  tern__udp *u = h->data;
  tern__worker *w = u->w;
  close(u->fd);
  u->fd = -1;
  tern__free(w->srv, u->rbuf);
  u->rbuf = NULL;
  w->handles_open--;
}

void tern__udp_close(tern__udp *u) {
  if (!u->polling)
    return;
  u->polling = 0;
  uv_close((uv_handle_t *)&u->poll, on_closed);
}

/* The local address and ECN bits of a datagram, from its control data.
 * Without IP_PKTINFO (it always comes when asked) the bound address. */
static unsigned take_cmsg(tern__udp *u, struct msghdr *mh,
                          tern__udp_path *path) {
  struct cmsghdr *cm;
  unsigned ecn = 0;
  int have_local = 0;
  for (cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
    if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO) {
      struct in_pktinfo pi;
      struct sockaddr_in *sin = (struct sockaddr_in *)&path->local;
      memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
      if (path->local.ss_family == AF_INET6) {
        /* An IPv4 datagram on a dual-stack socket: its local address as
         * a mapped one, like the peer's. */
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&path->local;
        memset(&s6->sin6_addr, 0, 10);
        memset((char *)&s6->sin6_addr + 10, 0xff, 2);
        memcpy((char *)&s6->sin6_addr + 12, &pi.ipi_addr, 4);
      } else {
        sin->sin_addr = pi.ipi_addr;
      }
      have_local = 1;
    } else if (cm->cmsg_level == IPPROTO_IPV6 &&
               cm->cmsg_type == IPV6_PKTINFO) {
      struct in6_pktinfo pi;
      memcpy(&pi, CMSG_DATA(cm), sizeof(pi));
      ((struct sockaddr_in6 *)&path->local)->sin6_addr = pi.ipi6_addr;
      have_local = 1;
    } else if (cm->cmsg_level == IPPROTO_IP &&
               (cm->cmsg_type == IP_TOS || cm->cmsg_type == IP_RECVTOS)) {
      ecn = *(unsigned char *)CMSG_DATA(cm) & 3u;
    } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_TCLASS) {
      int tc;
      memcpy(&tc, CMSG_DATA(cm), sizeof(tc));
      ecn = (unsigned)tc & 3u;
    }
  }
  (void)u;
  (void)have_local;
  return ecn;
}

static void read_batch(tern__udp *u) {
  struct mmsghdr mm[UDP_BATCH];
  struct iovec iov[UDP_BATCH];
  struct sockaddr_storage from[UDP_BATCH];
  char ctl[UDP_BATCH][128];
  struct sockaddr_storage bound;
  socklen_t blen = sizeof(bound);
  tern__udp_path path;
  int i, n, round;

  if (getsockname(u->fd, (struct sockaddr *)&bound, &blen) != 0)
    return;
  for (round = 0; round < UDP_BATCHES && u->polling; round++) {
    memset(mm, 0, sizeof(mm));
    for (i = 0; i < UDP_BATCH; i++) {
      iov[i].iov_base = u->rbuf + (size_t)i * TERN__UDP_DGRAM_MAX;
      iov[i].iov_len = TERN__UDP_DGRAM_MAX;
      mm[i].msg_hdr.msg_iov = &iov[i];
      mm[i].msg_hdr.msg_iovlen = 1;
      mm[i].msg_hdr.msg_name = &from[i];
      mm[i].msg_hdr.msg_namelen = sizeof(from[i]);
      mm[i].msg_hdr.msg_control = ctl[i];
      mm[i].msg_hdr.msg_controllen = sizeof(ctl[i]);
    }
    n = recvmmsg(u->fd, mm, UDP_BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0)
      break;
    for (i = 0; i < n && u->polling; i++) {
      unsigned ecn;
      if (mm[i].msg_hdr.msg_flags & MSG_TRUNC) {
        u->dropped++;
        continue;
      }
      memset(&path, 0, sizeof(path));
      memcpy(&path.local, &bound, blen);
      path.local_len = blen;
      memcpy(&path.remote, &from[i], mm[i].msg_hdr.msg_namelen);
      path.remote_len = mm[i].msg_hdr.msg_namelen;
      ecn = take_cmsg(u, &mm[i].msg_hdr, &path);
      TERN__STAT_ADD(u->w->stats.bytes_in, mm[i].msg_len);
      u->ops->datagram(u, (uint8_t *)iov[i].iov_base, mm[i].msg_len, &path,
                       ecn);
    }
    if (n < UDP_BATCH)
      break;
  }
  if (u->polling)
    u->ops->done(u);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  tern__udp *u = h->data;
  if (status < 0)
    events = UV_READABLE; /* an error is read (and cleared) by recvmmsg */
  if ((events & UV_WRITABLE) && u->want_write) {
    u->want_write = 0;
    uv_poll_start(&u->poll, UV_READABLE, on_poll);
    u->ops->writable(u);
  }
  if ((events & UV_READABLE) && u->polling)
    read_batch(u);
}

int tern__udp_send(tern__udp *u, const tern__udp_path *path, unsigned ecn,
                   const uint8_t *p, size_t n, size_t seg) {
  union {
    char buf[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(int)) +
             CMSG_SPACE(sizeof(uint16_t))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
  struct msghdr mh;
  struct cmsghdr *cm;
  size_t clen = 0;
  ssize_t rc;
  int tos = (int)ecn;
  const struct sockaddr *local = (const struct sockaddr *)&path->local;

  if (!u->polling)
    return TERN_EIO;
  memset(&mh, 0, sizeof(mh));
  memset(&ctl, 0, sizeof(ctl));
  mh.msg_name = (void *)&path->remote;
  mh.msg_namelen = path->remote_len;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = sizeof(ctl.buf);
  cm = CMSG_FIRSTHDR(&mh);
  /* The source address: the one the peer sent to, so that a server bound
   * to a wildcard answers from the address the client knows. */
  if (local->sa_family == AF_INET) {
    struct in_pktinfo pi;
    memset(&pi, 0, sizeof(pi));
    pi.ipi_spec_dst = ((const struct sockaddr_in *)local)->sin_addr;
    cm->cmsg_level = IPPROTO_IP;
    cm->cmsg_type = IP_PKTINFO;
    cm->cmsg_len = CMSG_LEN(sizeof(pi));
    memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
    clen += CMSG_SPACE(sizeof(pi));
    cm = CMSG_NXTHDR(&mh, cm);
    cm->cmsg_level = IPPROTO_IP;
    cm->cmsg_type = IP_TOS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &tos, sizeof(int));
    clen += CMSG_SPACE(sizeof(int));
  } else {
    const struct sockaddr_in6 *l6 = (const struct sockaddr_in6 *)local;
    struct in6_pktinfo pi;
    memset(&pi, 0, sizeof(pi));
    pi.ipi6_addr = l6->sin6_addr;
    cm->cmsg_level = IPPROTO_IPV6;
    cm->cmsg_type = IPV6_PKTINFO;
    cm->cmsg_len = CMSG_LEN(sizeof(pi));
    memcpy(CMSG_DATA(cm), &pi, sizeof(pi));
    clen += CMSG_SPACE(sizeof(pi));
    cm = CMSG_NXTHDR(&mh, cm);
    cm->cmsg_level = IPPROTO_IPV6;
    cm->cmsg_type = IPV6_TCLASS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &tos, sizeof(int));
    clen += CMSG_SPACE(sizeof(int));
  }
  if (seg < n && u->gso) {
    uint16_t s16 = (uint16_t)seg;
    cm = CMSG_NXTHDR(&mh, cm);
    cm->cmsg_level = SOL_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(s16));
    memcpy(CMSG_DATA(cm), &s16, sizeof(s16));
    clen += CMSG_SPACE(sizeof(s16));
  } else if (seg < n) {
    /* No GSO: one datagram per call. */
    size_t off;
    for (off = 0; off < n; off += seg) {
      size_t len = n - off < seg ? n - off : seg;
      int r = tern__udp_send(u, path, ecn, p + off, len, len);
      if (r != 0)
        return off == 0 ? r : TERN_EIO;
    }
    return 0;
  }
  mh.msg_controllen = clen;
  do
    rc = sendmsg(u->fd, &mh, 0);
  while (rc < 0 && errno == EINTR);
  if (rc >= 0) {
    TERN__STAT_ADD(u->w->stats.bytes_out, (uint64_t)rc);
    return 0;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    if (!u->want_write) {
      u->want_write = 1;
      uv_poll_start(&u->poll, UV_READABLE | UV_WRITABLE, on_poll);
    }
    return TERN__UDP_AGAIN;
  }
  if (errno == EIO && seg < n && u->gso) {
    /* The device cannot segment (checksum offload off): no GSO from now
     * on, and this batch one datagram at a time. */
    u->gso = 0;
    return tern__udp_send(u, path, ecn, p, n, seg);
  }
  return TERN_EIO;
}
