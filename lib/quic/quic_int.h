/* QUIC connections on ngtcp2 0.12 (server side), over the UDP sockets of
 * lib/net/udp.c, with TLS 1.3 from the GnuTLS engine of lib/tls through
 * ngtcp2's GnuTLS crypto helper. The application on top (HTTP/3) is
 * reached only through lib/quic/quic.h's glue table.
 *
 * The pieces, cut along the transport's seams: cid.c, the per-worker
 * CID maps and the CIDs the server makes; intake.c, each datagram from
 * the socket to its connection (or to a stateless answer, a forward to
 * the owning worker, a new connection); conn.c, a connection's life in
 * ngtcp2 (its callbacks, the write loop, the timer, closing), the
 * transport table the core drives and the glue calls of quic.h;
 * listen.c, QUIC listeners, their sockets and 0-RTT anti-replay. This
 * header, which only they include, holds what they share: the limits,
 * the listener and connection structs, a few small helpers and the
 * calls that cross from one file to another.
 *
 * Listeners. A QUIC listener has one UDP socket per worker in one
 * SO_REUSEPORT group, and per worker a map from connection ID to
 * connection. Every CID the server chooses is QUIC_CIDLEN bytes whose
 * first byte is the owning worker's index: a packet that reaches another
 * worker (the kernel spreads flows by 4-tuple, so a client that migrates
 * or is rebound by a NAT may land anywhere) is forwarded, copied, through
 * the owner's inbox. Client-chosen DCIDs (a first Initial's) are random
 * and never forwarded: the worker that gets a first Initial owns the
 * connection, and the kernel keeps that client's retransmits on it. A
 * socket the parent bound (tern_listen_with, quic = 1 and fd) is one socket, so
 * one worker serves it and nothing is forwarded (two workers reading one socket
 * would each take some of a client's first-flight retransmits). A CID's second
 * byte tags the secret its stateless-reset token came from (the current one, or
 * the previous one while a fleet rotates).
 *
 * Memory. ngtcp2's allocations come from the worker's small-block pools
 * through an ngtcp2_mem, so a connection's steady state allocates
 * nothing from tern's allocator hook (GnuTLS's session is GnuTLS's own).
 */
#ifndef TERN_QUIC_QUIC_INT_H
#define TERN_QUIC_QUIC_INT_H

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <string.h>
#include <time.h>

#include "net/udp.h"
#include "quic/quic.h"
#include "tls/tls.h"

#define QUIC_CIDLEN 18
#define QUIC_SECRET 32
#define QUIC_MAX_UDP 1452 /* ngtcp2's largest datagram (PMTUD's ceiling) */
#define QUIC_RETRY_TIMEOUT (10 * NGTCP2_SECONDS)
#define QUIC_TOKEN_TIMEOUT (3600 * NGTCP2_SECONDS)
/* Address validation under load: a worker with this many handshakes in
 * progress validates new clients with Retry first. */
#define QUIC_RETRY_LOAD 64
/* Stateless resets: a bucket of this many, refilled at this rate a
 * second, per worker and listener. */
#define QUIC_RESET_BURST 64
#define QUIC_RESET_RATE 64
#define QUIC_CLOSE_MAX_MS 3000 /* a closing or draining period's cap */
#define QUIC_CLOSE_STOP_MS 500 /* the same while the server stops */
#define QUIC_FWD_MAX 4096      /* forwarded datagrams in flight, per listener */
/* The receive windows' starting sizes; ngtcp2 grows them up to the
 * server's max_stream_window and max_conn_window (see win_start). */
#define QUIC_STREAM_WIN_INIT (64 * 1024)
#define QUIC_CONN_WIN_INIT (1u << 20)

typedef struct quic_listener quic_listener;
typedef struct quic_wl quic_wl;

/* A CID in a worker's map: chained in its bucket, and on its
 * connection's list (to take them all out when it is freed). */
typedef struct cid_node {
  struct cid_node *next, *conn_next;
  tern__quic *q;
  uint8_t len;
  uint8_t data[NGTCP2_MAX_CIDLEN];
} cid_node;

/* One listener on one worker: its socket, its CID map, its counts. */
struct quic_wl {
  tern__udp udp;
  quic_listener *l;
  tern__worker *w;
  cid_node **buckets;
  size_t nbuckets, ncids;
  size_t nconns;      /* connections alive (closing ones included) */
  size_t handshaking; /* of them, still in the handshake */
  int open;           /* the socket is open */
  int stopping;       /* graceful stop: no new connections */
  uint8_t *sbuf;      /* the write loop's datagrams */
  tern__list blocked; /* connections waiting for the socket */
  uint32_t reset_tokens;
  uint64_t reset_time;
  /* 0-RTT (opt-in): GnuTLS's anti-replay window and the ClientHellos it
   * has seen in it (replay_seen), per worker: the object is not
   * thread-safe, and a replayed Initial reaches the worker its DCID's
   * first flight did (the kernel keys on the 4-tuple; a replay from
   * elsewhere finds another worker's table, a limit the docs state). */
  gnutls_anti_replay_t ar;
  struct replay_slot *replay_seen;
};

struct quic_listener {
  tern__listener base;
  tern_server *srv;
  tern_tls *tls;
  quic_wl *wls; /* one per worker */
  int *fds;     /* one per worker until its socket owns it */
  tern_quic_options o;
  int port;
  /* Datagrams forwarded to another worker and not yet handled there: a
   * flood of packets naming other workers' CIDs must not grow inboxes
   * without bound. */
  _Atomic uint32_t fwd_inflight;
  uint64_t hash_key;
  /* A socket the parent bound (tern_listen_with, quic = 1 and fd): the one
   * worker that serves it; -1: every worker, each with its own socket. */
  int only;
  /* Token and reset keys: the current one, which makes every token and
   * reset token, and the previous one (has_prev), still accepted and used
   * for the CIDs it made, told apart by a tag byte in each CID. */
  uint8_t secret[QUIC_SECRET], prev[QUIC_SECRET];
  uint8_t tag, prev_tag;
  int has_prev;
};

enum {
  Q_IN_NG = 1u << 0,      /* inside an ngtcp2 call: no re-entry */
  Q_STARTED = 1u << 1,    /* the application started */
  Q_HANDSHAKE = 1u << 2,  /* counted in wl->handshaking */
  Q_CLOSE_WANT = 1u << 3, /* the app asked for a close (close_code) */
  Q_CLOSE_DUE = 1u << 4,  /* tern__conn_close came inside ngtcp2 */
  Q_CLOSING = 1u << 5,    /* closing period: resend the close packet */
  Q_DRAINING = 1u << 6,   /* draining: send nothing */
  Q_FREEING = 1u << 7,    /* the timer handle is closing */
  Q_APP_ERR = 1u << 8,    /* app_error is set */
  Q_IDLE = 1u << 9,       /* ended by the idle timeout: send nothing */
  Q_FATAL = 1u << 10,     /* ngtcp2 failed: close with its error */
};

struct tern__quic {
  tern__conn head; /* first: the core's part */
  void *app;
  const tern__quic_app *ops;
  quic_wl *wl;
  ngtcp2_conn *ng;
  ngtcp2_mem mem;
  ngtcp2_crypto_conn_ref ref;
  gnutls_session_t tls;
  tern__tls_gen *gen;
  uv_timer_t timer;
  unsigned flags;
  cid_node *cids;
  tern__udp_path path; /* the current path (ngtcp2's, as last sent on) */
  ngtcp2_connection_close_error ccerr;
  uint64_t app_error, close_code;
  uint64_t wake_at; /* loop ms of the application's wake-up, 0: none */
  uint64_t end_at;  /* closing/draining: when to free (loop ms) */
  uint8_t *close_pkt;
  size_t close_len;
  uint32_t close_seen;   /* packets received while closing */
  uint64_t close_budget; /* bytes the close may still be resent with */
  /* Datagrams the socket did not take (UDP_AGAIN), sent first. */
  uint8_t *pend;
  size_t pend_len, pend_seg;
  unsigned pend_ecn;
  tern__udp_path pend_path;
  tern__list blocked_link;
  int early;
};

/* ---- Small things ---------------------------------------------------- */

static inline ngtcp2_tstamp tern__quic_now_ns(void) {
  return uv_hrtime();
}

/* Token timestamps cross restarts and instances: the wall clock. */
static inline ngtcp2_tstamp tern__quic_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (ngtcp2_tstamp)ts.tv_sec * NGTCP2_SECONDS + (ngtcp2_tstamp)ts.tv_nsec;
}

static inline void tern__quic_rand_bytes(uint8_t *p, size_t n) {
  if (gnutls_rnd(GNUTLS_RND_NONCE, p, n) != 0)
    memset(p, 0, n); /* never in practice; a CID stays unique by chance */
}

static inline int tern__quic_path_eq(const tern__udp_path *a,
                                     const tern__udp_path *b) {
  return a->local_len == b->local_len && a->remote_len == b->remote_len &&
         memcmp(&a->local, &b->local, a->local_len) == 0 &&
         memcmp(&a->remote, &b->remote, a->remote_len) == 0;
}

/* ---- Across the files ------------------------------------------------ */

/* cid.c: the CID map (a worker's, for one listener) and the CIDs of ours. */
tern__quic *tern__quic_cid_find(const quic_wl *wl, const uint8_t *p, size_t n);
int tern__quic_cid_add(tern__quic *q, const uint8_t *p, size_t n);
void tern__quic_cid_remove(tern__quic *q, const uint8_t *p, size_t n);
void tern__quic_cid_remove_all(tern__quic *q);
void tern__quic_new_cid(const quic_wl *wl, ngtcp2_cid *cid);
const uint8_t *tern__quic_reset_key(const quic_listener *l, const uint8_t *cid,
                                    size_t len);

/* conn.c: ngtcp2's callbacks and the connection ref's, a failed call
 * into ngtcp2, what follows every call into it, and the socket's
 * writable callback (the connections blocked on it write on). */
extern const ngtcp2_callbacks tern__quic_callbacks;
ngtcp2_conn *tern__quic_get_conn(ngtcp2_crypto_conn_ref *ref);
void tern__quic_ng_failed(tern__quic *q, int rv);
void tern__quic_after_ng(tern__quic *q);
void tern__quic_on_writable(tern__udp *u);

/* intake.c: the listener socket's callbacks (listen.c starts it). */
extern const tern__udp_ops tern__quic_udp_ops;

#endif
