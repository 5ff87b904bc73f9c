/* UDP sockets for QUIC (lib/net/udp.c): one non-blocking socket per
 * worker per QUIC listener, in one SO_REUSEPORT group, watched by a
 * uv_poll_t and driven with recvmmsg and sendmsg directly, because
 * libuv 1.44's uv_udp_t gives neither the local address a datagram was
 * sent to (IP_PKTINFO, needed on a wildcard bind and for migration), nor
 * its ECN bits (IP_RECVTOS), nor UDP_SEGMENT (GSO) on the way out.
 */
#ifndef TERN_NET_UDP_H
#define TERN_NET_UDP_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "core/worker.h"
#include "net/net.h"

/* The two ends of a datagram: the peer's address and ours (the one it was
 * sent to, from IP_PKTINFO; a datagram sent on the path leaves from it). */
typedef struct {
  struct sockaddr_storage local, remote;
  socklen_t local_len, remote_len;
} tern__udp_path;

typedef struct tern__udp tern__udp;

/* A batch of datagrams arrived: each one in turn, then done() once. */
typedef struct {
  void (*datagram)(tern__udp *u, uint8_t *p, size_t n,
                   const tern__udp_path *path, unsigned ecn);
  void (*done)(tern__udp *u);
  /* The socket can take datagrams again after a send said TERN__UDP_AGAIN. */
  void (*writable)(tern__udp *u);
} tern__udp_ops;

struct tern__udp {
  tern__worker *w;
  const tern__udp_ops *ops;
  void *user; /* the owner's (the QUIC listener) */
  int fd;
  int family;
  int gso; /* the kernel takes UDP_SEGMENT (cleared on its first EIO) */
  int polling;
  int want_write;
  uv_poll_t poll;
  uint8_t *rbuf;    /* UDP_BATCH datagrams of UDP_DGRAM_MAX bytes */
  uint64_t dropped; /* datagrams too large for a receive buffer */
};

/* A socket bound to `addr` with SO_REUSEPORT, every option QUIC needs,
 * non-blocking: the descriptor, or a negative tern error (TERN_EADDRINUSE
 * when another socket without SO_REUSEPORT holds the port). `dual`: an
 * IPv6 wildcard also takes IPv4. */
int tern__udp_socket(const struct sockaddr_storage *addr, int dual);
/* Take `fd`, a UDP socket another process bound (tern_listen_with, quic = 1 and
 * fd): check it, make it non-blocking and close-on-exec and set the options
 * QUIC needs, as tern__udp_socket does (no SO_REUSEPORT: it is bound
 * already). NULL with its address in *addr, or why it cannot serve. */
const char *tern__udp_adopt(int fd, struct sockaddr_storage *addr);
/* Start watching `fd` (taken over) on worker w; TERN_EIO or TERN_ENOMEM
 * (the descriptor is then closed). The handle counts in w->handles_open. */
int tern__udp_start(tern__udp *u, tern__worker *w, int fd,
                    const tern__udp_ops *ops, void *user);
/* Stop and close (the handle closes on the loop; the socket with it). */
void tern__udp_close(tern__udp *u);
/* Send `n` bytes as datagrams of `seg` bytes each (the last may be
 * shorter; seg == n for one datagram) on `path` (its local address as the
 * source) with ECN codepoint `ecn`: one sendmsg with UDP_SEGMENT where the
 * kernel has it. Returns 0, TERN__UDP_AGAIN (nothing was sent: the socket is
 * full; ops->writable follows) or TERN_EIO (dropped: QUIC recovers). */
int tern__udp_send(tern__udp *u, const tern__udp_path *path, unsigned ecn,
                   const uint8_t *p, size_t n, size_t seg);

/* The most bytes one GSO send carries, and the datagram size received. */
#define TERN__UDP_GSO_MAX 64
#define TERN__UDP_DGRAM_MAX 2048
#define TERN__UDP_AGAIN 1

#endif
