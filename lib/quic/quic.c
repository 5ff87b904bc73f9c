/* QUIC connections on ngtcp2 0.12 (server side), over the UDP sockets of
 * lib/net/udp.c, with TLS 1.3 from the GnuTLS engine of lib/tls through
 * ngtcp2's GnuTLS crypto helper. The application on top (HTTP/3) is
 * reached only through lib/quic/quic.h's glue table.
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
 * Intake, per datagram: decode the version and CIDs; an unsupported
 * version gets Version Negotiation; a known DCID goes to its connection;
 * a DCID naming another worker is forwarded; a first Initial is accepted
 * (after address validation where the listener asks for it: a stateless
 * Retry with an authenticated token, spared a client that brings a
 * NEW_TOKEN token from an earlier connection); a short-header packet for
 * an unknown CID gets a stateless reset (rate-limited, always shorter
 * than what triggered it); anything else is dropped. Token and reset
 * secrets are the server's (every QUIC listener of a server shares the
 * first one's), so a reset still works for CIDs this process issued.
 *
 * Output. After a batch of datagrams, an expiry or the application's
 * progress, the connection is marked dirty and the check phase runs the
 * write loop once: ngtcp2 packs stream data the application hands out
 * (app->next) with ACKs and control frames into datagrams, which go out
 * in GSO batches of equal size (up to ngtcp2's send quantum) on the path
 * ngtcp2 names, followed by ngtcp2_conn_update_pkt_tx_time (pacing). A
 * socket that is full keeps the unsent rest (one buffer per blocked
 * connection) and the connection waits for it to drain.
 *
 * Timers. Each connection has one uv_timer_t at ngtcp2's expiry (loss
 * recovery, ACK delay, idle, handshake, pacing), rounded up to the next
 * millisecond, merged with the application's wake-up. The core's head
 * timer covers the handshake (ngtcp2's own handshake timeout too); after
 * it the adapter chooses (per-stream timers on HTTP/3).
 *
 * Closing. tern__conn_close (any reason) fails what is in flight through
 * the adapter, then writes CONNECTION_CLOSE (the application's code, or
 * ngtcp2's transport error) and keeps the connection in its closing
 * period: its CIDs stay mapped, packets that arrive are answered with the
 * saved close packet (at exponentially spaced intervals), and after three
 * probe timeouts it is freed. A peer's close puts it into draining (send
 * nothing, then the same wait); an idle timeout frees it silently. A call
 * into ngtcp2 is never made from inside one of its callbacks: a close
 * asked for there is carried out when ngtcp2 returns.
 *
 * Memory. ngtcp2's allocations come from the worker's small-block pools
 * through an ngtcp2_mem, so a connection's steady state allocates
 * nothing from tern's allocator hook (GnuTLS's session is GnuTLS's own).
 */
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/udp.h"
#include "quic/quic.h"
#include "tls/tls.h"

_Static_assert(sizeof(tern__qvec) == sizeof(ngtcp2_vec) &&
                   offsetof(tern__qvec, base) == offsetof(ngtcp2_vec, base) &&
                   offsetof(tern__qvec, len) == offsetof(ngtcp2_vec, len),
               "tern__qvec must have ngtcp2_vec's layout");

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

static void write_loop(tern__quic *q);
static void arm_timer(tern__quic *q);
static void quic_output(tern__conn *c);
static void quic_flush(tern__conn *c);
static void after_ng(tern__quic *q);

/* ---- Small things ---------------------------------------------------- */

static ngtcp2_tstamp now_ns(void) {
  return uv_hrtime();
}

/* Token timestamps cross restarts and instances: the wall clock. */
static ngtcp2_tstamp wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (ngtcp2_tstamp)ts.tv_sec * NGTCP2_SECONDS + (ngtcp2_tstamp)ts.tv_nsec;
}

static void rand_bytes(uint8_t *p, size_t n) {
  if (gnutls_rnd(GNUTLS_RND_NONCE, p, n) != 0)
    memset(p, 0, n); /* never in practice; a CID stays unique by chance */
}

static void on_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  (void)ctx;
  rand_bytes(dest, len);
}

static void path_of(ngtcp2_path *np, const tern__udp_path *p) {
  np->local.addr = (ngtcp2_sockaddr *)&p->local;
  np->local.addrlen = p->local_len;
  np->remote.addr = (ngtcp2_sockaddr *)&p->remote;
  np->remote.addrlen = p->remote_len;
  np->user_data = NULL;
}

static void path_from(tern__udp_path *p, const ngtcp2_path *np) {
  memset(p, 0, sizeof(*p));
  memcpy(&p->local, np->local.addr, np->local.addrlen);
  p->local_len = np->local.addrlen;
  memcpy(&p->remote, np->remote.addr, np->remote.addrlen);
  p->remote_len = np->remote.addrlen;
}

static int path_eq(const tern__udp_path *a, const tern__udp_path *b) {
  return a->local_len == b->local_len && a->remote_len == b->remote_len &&
         memcmp(&a->local, &b->local, a->local_len) == 0 &&
         memcmp(&a->remote, &b->remote, a->remote_len) == 0;
}

/* ---- 0-RTT anti-replay -----------------------------------------------------
 */

/* A ClientHello GnuTLS has accepted early data for, until its window
 * ends: its key's hash and when it expires. */
struct replay_slot {
  uint64_t hash;
  time_t exp;
};
#define QUIC_REPLAY_SLOTS 4096 /* per worker and listener */
#define QUIC_REPLAY_PROBE 8

/* GnuTLS asks whether a ClientHello's key (window start and binder) is
 * new: 0 accepts its early data, GNUTLS_E_DB_ENTRY_EXISTS refuses it (the
 * handshake goes on without 0-RTT). A full table refuses too: safe, only
 * slower. */
static int replay_add(void *ptr, time_t exp, const gnutls_datum_t *key,
                      const gnutls_datum_t *data) {
  quic_wl *wl = ptr;
  uint64_t h = wl->l->hash_key ^ 0x9e3779b97f4a7c15ull;
  time_t now = time(NULL);
  size_t i, free_slot = SIZE_MAX;
  (void)data;
  for (i = 0; i < key->size; i++) {
    h ^= key->data[i];
    h *= 0x100000001b3ull;
    h ^= h >> 31;
  }
  if (h == 0)
    h = 1;
  for (i = 0; i < QUIC_REPLAY_PROBE; i++) {
    struct replay_slot *s = &wl->replay_seen[(h + i) & (QUIC_REPLAY_SLOTS - 1)];
    if (s->hash == h && s->exp >= now)
      return GNUTLS_E_DB_ENTRY_EXISTS;
    if ((s->hash == 0 || s->exp < now) && free_slot == SIZE_MAX)
      free_slot = (h + i) & (QUIC_REPLAY_SLOTS - 1);
  }
  if (free_slot == SIZE_MAX)
    return GNUTLS_E_DB_ENTRY_EXISTS;
  wl->replay_seen[free_slot].hash = h;
  wl->replay_seen[free_slot].exp = exp;
  return 0;
}

/* ---- The CID map ------------------------------------------------------ */

/* Client-chosen CIDs (a first Initial's DCID) are the peer's choice:
 * keyed with the listener's random key, so a client cannot aim them all
 * at one bucket. */
static size_t cid_hash(const quic_wl *wl, const uint8_t *p, size_t n) {
  uint64_t h = wl->l->hash_key ^ n;
  size_t i;
  for (i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return (size_t)(h & (wl->nbuckets - 1));
}

static tern__quic *cid_find(const quic_wl *wl, const uint8_t *p, size_t n) {
  cid_node *c;
  if (wl->nbuckets == 0 || n == 0 || n > NGTCP2_MAX_CIDLEN)
    return NULL;
  for (c = wl->buckets[cid_hash(wl, p, n)]; c != NULL; c = c->next)
    if (c->len == n && memcmp(c->data, p, n) == 0)
      return c->q;
  return NULL;
}

static int cid_grow(quic_wl *wl) {
  size_t nb = wl->nbuckets ? wl->nbuckets * 2 : 64, i;
  cid_node **b = tern__malloc(wl->w->srv, nb * sizeof(*b)), **old;
  size_t oldn = wl->nbuckets;
  if (b == NULL)
    return TERN_ENOMEM;
  memset(b, 0, nb * sizeof(*b));
  old = wl->buckets;
  wl->buckets = b;
  wl->nbuckets = nb;
  for (i = 0; i < oldn; i++) {
    cid_node *c = old[i], *next;
    for (; c != NULL; c = next) {
      size_t h = cid_hash(wl, c->data, c->len);
      next = c->next;
      c->next = b[h];
      b[h] = c;
    }
  }
  tern__free(wl->w->srv, old);
  return 0;
}

static int cid_add(tern__quic *q, const uint8_t *p, size_t n) {
  quic_wl *wl = q->wl;
  cid_node *c;
  size_t h;
  if (n == 0 || n > NGTCP2_MAX_CIDLEN)
    return TERN_EINVAL;
  if (cid_find(wl, p, n) != NULL)
    return TERN_EEXIST;
  if (wl->ncids >= wl->nbuckets && cid_grow(wl) != 0 && wl->nbuckets == 0)
    return TERN_ENOMEM;
  c = tern__small_malloc(wl->w, sizeof(*c));
  if (c == NULL)
    return TERN_ENOMEM;
  c->q = q;
  c->len = (uint8_t)n;
  memcpy(c->data, p, n);
  h = cid_hash(wl, p, n);
  c->next = wl->buckets[h];
  wl->buckets[h] = c;
  c->conn_next = q->cids;
  q->cids = c;
  wl->ncids++;
  return 0;
}

static void cid_unlink(quic_wl *wl, cid_node *c) {
  cid_node **pp = &wl->buckets[cid_hash(wl, c->data, c->len)];
  while (*pp != NULL && *pp != c)
    pp = &(*pp)->next;
  if (*pp == c)
    *pp = c->next;
  wl->ncids--;
}

static void cid_remove(tern__quic *q, const uint8_t *p, size_t n) {
  cid_node **pp = &q->cids;
  while (*pp != NULL) {
    cid_node *c = *pp;
    if (c->len == n && memcmp(c->data, p, n) == 0) {
      *pp = c->conn_next;
      cid_unlink(q->wl, c);
      tern__small_free(q->wl->w, c);
      return;
    }
    pp = &c->conn_next;
  }
}

static void cid_remove_all(tern__quic *q) {
  while (q->cids != NULL) {
    cid_node *c = q->cids;
    q->cids = c->conn_next;
    cid_unlink(q->wl, c);
    tern__small_free(q->wl->w, c);
  }
}

/* A CID of ours: the worker's index first, then the tag of the key its
 * reset token comes from, the rest random. */
static void new_cid(const quic_wl *wl, ngtcp2_cid *cid) {
  uint8_t b[QUIC_CIDLEN];
  rand_bytes(b, sizeof(b));
  b[0] = (uint8_t)wl->w->id;
  b[1] = wl->l->tag;
  ngtcp2_cid_init(cid, b, sizeof(b));
}

/* The key a CID's reset token was derived from: the previous one for a
 * CID that carries its tag (and not the current one's: on a clash, the
 * current key wins). */
static const uint8_t *reset_key(const quic_listener *l, const uint8_t *cid,
                                size_t len) {
  if (l->has_prev && len == QUIC_CIDLEN && cid[1] == l->prev_tag &&
      cid[1] != l->tag)
    return l->prev;
  return l->secret;
}

/* ---- Sending ----------------------------------------------------------- */

static void send_raw(quic_wl *wl, const tern__udp_path *path, const uint8_t *p,
                     size_t n) {
  /* Stateless answers are not worth a queue: a full socket drops them,
   * and the client's retransmission asks again. */
  (void)tern__udp_send(&wl->udp, path, 0, p, n, n);
}

/* Send a batch; what the socket does not take waits in q->pend. */
static int send_batch(tern__quic *q, const tern__udp_path *path, unsigned ecn,
                      const uint8_t *p, size_t n, size_t seg) {
  int rc = tern__udp_send(&q->wl->udp, path, ecn, p, n, seg);
  if (rc != TERN__UDP_AGAIN)
    return 0; /* sent, or lost (QUIC recovers) */
  q->pend = tern__malloc(q->head.w->srv, n);
  if (q->pend == NULL)
    return 0; /* dropped: recovered as a loss */
  memcpy(q->pend, p, n);
  q->pend_len = n;
  q->pend_seg = seg;
  q->pend_ecn = ecn;
  q->pend_path = *path;
  tern__list_append(&q->wl->blocked, &q->blocked_link);
  return TERN__UDP_AGAIN;
}

static int send_pending(tern__quic *q) {
  int rc;
  if (q->pend == NULL)
    return 0;
  rc = tern__udp_send(&q->wl->udp, &q->pend_path, q->pend_ecn, q->pend,
                      q->pend_len, q->pend_seg);
  if (rc == TERN__UDP_AGAIN)
    return rc;
  tern__free(q->head.w->srv, q->pend);
  q->pend = NULL;
  if (tern__list_linked(&q->blocked_link))
    tern__list_remove(&q->blocked_link);
  return 0;
}

static void drop_pending(tern__quic *q) {
  if (q->pend != NULL) {
    tern__free(q->head.w->srv, q->pend);
    q->pend = NULL;
  }
  if (tern__list_linked(&q->blocked_link))
    tern__list_remove(&q->blocked_link);
}

static void on_writable(tern__udp *u) {
  quic_wl *wl = u->user;
  while (!tern__list_empty(&wl->blocked)) {
    tern__quic *q =
        TERN__CONTAINER_OF(wl->blocked.next, tern__quic, blocked_link);
    if (send_pending(q) != 0)
      return;
    tern__conn_mark_dirty(&q->head); /* and write on */
  }
}

/* ---- Closing ----------------------------------------------------------- */

static void on_timer_closed(uv_handle_t *h) {
  tern__quic *q = h->data;
  tern__conn_closed(&q->head);
}

/* Let go of everything: the ngtcp2 connection, the session, the CIDs;
 * the head follows once the timer handle has closed. */
static void finish(tern__quic *q) {
  quic_wl *wl = q->wl;
  if (q->flags & Q_FREEING)
    return;
  q->flags |= Q_FREEING;
  if (q->flags & Q_HANDSHAKE) {
    q->flags &= ~(unsigned)Q_HANDSHAKE;
    wl->handshaking--;
    tern__tls_handshake_done(wl->w, -1);
  }
  cid_remove_all(q);
  drop_pending(q);
  if (q->ops != NULL && q->app != NULL)
    q->ops->free(q);
  q->app = NULL;
  if (q->ng != NULL)
    ngtcp2_conn_del(q->ng);
  q->ng = NULL;
  if (q->tls != NULL)
    gnutls_deinit(q->tls);
  q->tls = NULL;
  if (q->gen != NULL)
    tern__tls_release(q->gen);
  q->gen = NULL;
  tern__free(q->head.w->srv, q->close_pkt);
  q->close_pkt = NULL;
  wl->nconns--;
  uv_close((uv_handle_t *)&q->timer, on_timer_closed);
  /* The worker's socket may close once its last connection is gone
   * (a graceful stop keeps it open until then). */
  if (wl->stopping && wl->nconns == 0 && wl->open) {
    wl->open = 0;
    tern__udp_close(&wl->udp);
  }
}

/* Three probe timeouts (RFC 9000 10.2), capped; shorter once the server
 * stops, so that closing connections do not hold its exit: a packet that
 * comes later gets a stateless reset, or nothing, which is all the
 * closing period would have told it. */
static uint64_t close_period_ms(tern__quic *q) {
  uint64_t ms = 3 * ngtcp2_conn_get_pto(q->ng) / NGTCP2_MILLISECONDS + 1;
  uint64_t max = q->wl->stopping ? QUIC_CLOSE_STOP_MS : QUIC_CLOSE_MAX_MS;
  return ms > max ? max : ms;
}

/* Write CONNECTION_CLOSE and enter the closing period (or, when nothing
 * can be sent, finish now). */
static void do_close(tern__quic *q) {
  tern__worker *w = q->head.w;
  ngtcp2_path_storage ps;
  ngtcp2_pkt_info pi;
  ngtcp2_ssize n;
  uint8_t buf[QUIC_MAX_UDP];

  drop_pending(q);
  if (q->ng == NULL || (q->flags & Q_IDLE) ||
      ngtcp2_conn_is_in_draining_period(q->ng)) {
    if (q->ng != NULL && ngtcp2_conn_is_in_draining_period(q->ng) &&
        !(q->flags & Q_IDLE)) {
      q->flags |= Q_DRAINING;
      q->end_at = uv_now(w->loop) + close_period_ms(q);
      arm_timer(q);
      return;
    }
    finish(q);
    return;
  }
  if (!(q->flags & Q_FATAL)) {
    if (q->flags & Q_CLOSE_WANT)
      ngtcp2_connection_close_error_set_application_error(
          &q->ccerr, q->close_code, NULL, 0);
    else
      ngtcp2_connection_close_error_set_application_error(
          &q->ccerr,
          (q->flags & Q_APP_ERR) ? q->app_error
          : q->ops != NULL       ? q->ops->code_internal
                                 : 0,
          NULL, 0);
  }
  ngtcp2_path_storage_zero(&ps);
  memset(&pi, 0, sizeof(pi));
  q->flags |= Q_IN_NG;
  n = ngtcp2_conn_write_connection_close(q->ng, &ps.path, &pi, buf, sizeof(buf),
                                         &q->ccerr, now_ns());
  q->flags &= ~(unsigned)Q_IN_NG;
  if (n <= 0) {
    finish(q);
    return;
  }
  q->close_pkt = tern__malloc(w->srv, (size_t)n);
  if (q->close_pkt != NULL) {
    memcpy(q->close_pkt, buf, (size_t)n);
    q->close_len = (size_t)n;
  }
  path_from(&q->path, &ps.path);
  (void)tern__udp_send(&q->wl->udp, &q->path, 0, buf, (size_t)n, (size_t)n);
  q->flags |= Q_CLOSING;
  q->end_at = uv_now(w->loop) + close_period_ms(q);
  arm_timer(q);
}

/* The transport's close: after the adapter failed what was in flight. */
static void quic_close(tern__conn *c) {
  tern__quic *q = tern__quic_of(c);
  if (q->flags & (Q_CLOSING | Q_DRAINING | Q_FREEING))
    return;
  if (q->flags & Q_IN_NG) {
    q->flags |= Q_CLOSE_DUE;
    return;
  }
  do_close(q);
}

/* A call into ngtcp2 failed with `rv`: the connection ends. */
static void ng_failed(tern__quic *q, int rv) {
  switch (rv) {
  case NGTCP2_ERR_DRAINING:
    break; /* the peer closed: draining (do_close sees it) */
  case NGTCP2_ERR_IDLE_CLOSE:
  case NGTCP2_ERR_DROP_CONN:
  case NGTCP2_ERR_RETRY:
    q->flags |= Q_IDLE; /* leave without a word */
    break;
  case NGTCP2_ERR_CRYPTO:
    ngtcp2_connection_close_error_set_transport_error_tls_alert(
        &q->ccerr, ngtcp2_conn_get_tls_alert(q->ng), NULL, 0);
    q->flags |= Q_FATAL;
    break;
  case NGTCP2_ERR_CALLBACK_FAILURE:
    if (q->flags & Q_APP_ERR)
      break; /* the application's code */
    /* fall through */
  default:
    ngtcp2_connection_close_error_set_transport_error_liberr(&q->ccerr, rv,
                                                             NULL, 0);
    q->flags |= Q_FATAL;
    break;
  }
  tern__conn_close(&q->head);
}

/* After every call into ngtcp2: a close asked for inside it. */
static void after_ng(tern__quic *q) {
  if (q->flags & Q_CLOSE_DUE) {
    q->flags &= ~(unsigned)Q_CLOSE_DUE;
    do_close(q);
  }
}

/* ---- ngtcp2 callbacks ---------------------------------------------------- */

static int app_rc(tern__quic *q, int rc) {
  (void)q;
  return rc < 0 ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_recv_stream_data(ngtcp2_conn *ng, uint32_t flags, int64_t id,
                               uint64_t offset, const uint8_t *data, size_t len,
                               void *user, void *sud) {
  tern__quic *q = user;
  (void)ng;
  (void)offset;
  (void)sud;
  if (!(q->flags & Q_STARTED))
    return NGTCP2_ERR_CALLBACK_FAILURE;
  if (flags & NGTCP2_STREAM_DATA_FLAG_EARLY)
    q->early = 1;
  return app_rc(q, q->ops->recv(q, id, data, len,
                                (flags & NGTCP2_STREAM_DATA_FLAG_FIN) != 0,
                                (flags & NGTCP2_STREAM_DATA_FLAG_EARLY) != 0));
}

static int on_acked(ngtcp2_conn *ng, int64_t id, uint64_t offset, uint64_t len,
                    void *user, void *sud) {
  tern__quic *q = user;
  (void)ng;
  (void)offset;
  (void)sud;
  return (q->flags & Q_STARTED) ? app_rc(q, q->ops->acked(q, id, len)) : 0;
}

static int on_stream_close(ngtcp2_conn *ng, uint32_t flags, int64_t id,
                           uint64_t code, void *user, void *sud) {
  tern__quic *q = user;
  (void)ng;
  (void)sud;
  if (!(q->flags & Q_STARTED))
    return 0;
  if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
    code = q->ops->code_none;
  return app_rc(q, q->ops->closed(q, id, code));
}

static int on_stream_reset(ngtcp2_conn *ng, int64_t id, uint64_t final_size,
                           uint64_t code, void *user, void *sud) {
  tern__quic *q = user;
  (void)ng;
  (void)final_size;
  (void)sud;
  return (q->flags & Q_STARTED) ? app_rc(q, q->ops->reset(q, id, code)) : 0;
}

static int on_stop_sending(ngtcp2_conn *ng, int64_t id, uint64_t code,
                           void *user, void *sud) {
  tern__quic *q = user;
  (void)ng;
  (void)sud;
  return (q->flags & Q_STARTED) ? app_rc(q, q->ops->stop_sending(q, id, code))
                                : 0;
}

static int on_max_streams(ngtcp2_conn *ng, uint64_t max, void *user) {
  tern__quic *q = user;
  (void)ng;
  return (q->flags & Q_STARTED) ? app_rc(q, q->ops->max_streams(q, max)) : 0;
}

static int on_max_stream_data(ngtcp2_conn *ng, int64_t id, uint64_t max,
                              void *user, void *sud) {
  tern__quic *q = user;
  (void)ng;
  (void)max;
  (void)sud;
  return (q->flags & Q_STARTED) ? app_rc(q, q->ops->unblocked(q, id)) : 0;
}

static int on_new_cid(ngtcp2_conn *ng, ngtcp2_cid *cid, uint8_t *token,
                      size_t cidlen, void *user) {
  tern__quic *q = user;
  int tries;
  (void)ng;
  if (cidlen != QUIC_CIDLEN)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  for (tries = 0; tries < 4; tries++) {
    int rc;
    new_cid(q->wl, cid);
    rc = cid_add(q, cid->data, cid->datalen);
    if (rc == 0)
      break;
    if (rc != TERN_EEXIST)
      return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  if (tries == 4)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  if (ngtcp2_crypto_generate_stateless_reset_token(token, q->wl->l->secret,
                                                   QUIC_SECRET, cid) != 0)
    return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

static int on_remove_cid(ngtcp2_conn *ng, const ngtcp2_cid *cid, void *user) {
  tern__quic *q = user;
  (void)ng;
  cid_remove(q, cid->data, cid->datalen);
  return 0;
}

/* The handshake is done: a session ticket for resumption, and a token
 * that spares this client's next connection the Retry. */
static int on_handshake_completed(ngtcp2_conn *ng, void *user) {
  tern__quic *q = user;
  uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN];
  const ngtcp2_path *p = ngtcp2_conn_get_path(ng);
  ngtcp2_ssize n;

  if (q->flags & Q_HANDSHAKE) {
    q->flags &= ~(unsigned)Q_HANDSHAKE;
    q->wl->handshaking--;
  }
  tern__quic_head(q)->tls_version = TERN_TLS_1_3;
  tern__tls_handshake_done(q->wl->w, gnutls_session_is_resumed(q->tls) != 0);
  (void)gnutls_session_ticket_send(q->tls, 1, 0);
  n = ngtcp2_crypto_generate_regular_token(token, q->wl->l->secret, QUIC_SECRET,
                                           p->remote.addr, p->remote.addrlen,
                                           wall_ns());
  if (n > 0)
    (void)ngtcp2_conn_submit_new_token(ng, token, (size_t)n);
  return 0;
}

static int on_tx_key(ngtcp2_conn *ng, ngtcp2_crypto_level level, void *user) {
  tern__quic *q = user;
  (void)ng;
  if (level != NGTCP2_CRYPTO_LEVEL_APPLICATION || (q->flags & Q_STARTED))
    return 0;
  q->flags |= Q_STARTED;
  return app_rc(q, q->ops->start(q));
}

static const ngtcp2_callbacks callbacks = {
    .recv_client_initial = ngtcp2_crypto_recv_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .handshake_completed = on_handshake_completed,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_stream_data = on_recv_stream_data,
    .acked_stream_data_offset = on_acked,
    .stream_close = on_stream_close,
    .rand = on_rand,
    .get_new_connection_id = on_new_cid,
    .remove_connection_id = on_remove_cid,
    .update_key = ngtcp2_crypto_update_key_cb,
    .stream_reset = on_stream_reset,
    .extend_max_remote_streams_bidi = on_max_streams,
    .extend_max_stream_data = on_max_stream_data,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .stream_stop_sending = on_stop_sending,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
    .recv_tx_key = on_tx_key,
};

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref) {
  tern__quic *q = ref->user_data;
  return q->ng;
}

/* ---- The write loop --------------------------------------------------------
 */

/* The application failed inside the write loop: the connection closes
 * with its code, or an internal error. */
static void app_failed(tern__quic *q) {
  q->flags &= ~(unsigned)Q_IN_NG;
  if (!(q->flags & Q_APP_ERR)) {
    q->flags |= Q_APP_ERR;
    q->app_error = q->ops->code_internal;
  }
  tern__conn_close(&q->head);
  after_ng(q);
}

/* Is a long-header packet an Initial? Its type bits differ by version. */
static int is_initial(const uint8_t *p, uint32_t version) {
  unsigned type = (p[0] & 0x30u) >> 4;
  return version == NGTCP2_PROTO_VER_V2_DRAFT ? type == 1 : type == 0;
}

static void write_loop(tern__quic *q) {
  quic_wl *wl = q->wl;
  ngtcp2_tstamp ts = now_ns();
  size_t max_udp, quantum, off = 0, seg = 0, count = 0;
  tern__udp_path bpath;
  unsigned becn = 0;
  uint8_t *buf = wl->sbuf;

  if (q->ng == NULL ||
      (q->flags & (Q_CLOSING | Q_DRAINING | Q_FREEING | Q_IN_NG)) ||
      (q->head.flags & TERN__C_CLOSING))
    return;
  if (send_pending(q) != 0)
    return;
  max_udp = ngtcp2_conn_get_max_tx_udp_payload_size(q->ng);
  if (max_udp > QUIC_MAX_UDP)
    max_udp = QUIC_MAX_UDP;
  quantum = ngtcp2_conn_get_send_quantum(q->ng) / max_udp;
  if (quantum < 1)
    quantum = 1;
  if (quantum > TERN__UDP_GSO_MAX)
    quantum = TERN__UDP_GSO_MAX;
  memset(&bpath, 0, sizeof(bpath));
  q->flags |= Q_IN_NG;
  for (;;) {
    tern__qvec v[16];
    int64_t sid = -1;
    int fin = 0, nv = 0;
    ngtcp2_ssize n, ndata = -1;
    ngtcp2_path_storage ps;
    ngtcp2_pkt_info pi;
    tern__udp_path p;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;

    if ((q->flags & Q_STARTED) && q->app != NULL &&
        ngtcp2_conn_get_max_data_left(q->ng) > 0) {
      nv = q->ops->next(q, &sid, &fin, v, 16);
      if (nv < 0) {
        app_failed(q);
        return;
      }
    }
    if (fin)
      flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
    ngtcp2_path_storage_zero(&ps);
    memset(&pi, 0, sizeof(pi));
    n = ngtcp2_conn_writev_stream(q->ng, &ps.path, &pi, buf + off, max_udp,
                                  &ndata, flags, sid, (const ngtcp2_vec *)v,
                                  (size_t)nv, ts);
    if (n < 0) {
      int rc = 0;
      switch (n) {
      case NGTCP2_ERR_STREAM_DATA_BLOCKED:
        rc = q->ops->blocked(q, sid);
        break;
      case NGTCP2_ERR_STREAM_SHUT_WR:
        rc = q->ops->shut_wr(q, sid);
        break;
      case NGTCP2_ERR_WRITE_MORE:
        rc = q->ops->written(q, sid, (size_t)ndata);
        break;
      default:
        q->flags &= ~(unsigned)Q_IN_NG;
        if (off > 0)
          (void)send_batch(q, &bpath, becn, buf, off, seg);
        ng_failed(q, (int)n);
        after_ng(q);
        return;
      }
      if (rc < 0) {
        app_failed(q);
        return;
      }
      continue;
    }
    if (ndata >= 0 && sid >= 0 && q->ops->written(q, sid, (size_t)ndata) < 0) {
      app_failed(q);
      return;
    }
    if (n == 0)
      break;
    path_from(&p, &ps.path);
    if (off > 0 &&
        (!path_eq(&p, &bpath) || pi.ecn != becn || (size_t)n > seg)) {
      /* Another path or marking, or a larger datagram: the batch so far
       * leaves first, and this datagram starts the next. */
      int rc = send_batch(q, &bpath, becn, buf, off, seg);
      memmove(buf, buf + off, (size_t)n);
      off = 0;
      count = 0;
      if (rc != 0) {
        /* The socket is full: what ngtcp2 just wrote is lost (it is
         * recovered as a loss) and writing waits. */
        break;
      }
    }
    if (off == 0) {
      bpath = p;
      becn = pi.ecn;
      seg = (size_t)n;
    }
    off += (size_t)n;
    count++;
    if ((size_t)n < seg || count >= quantum) {
      int rc = send_batch(q, &bpath, becn, buf, off, seg);
      off = 0;
      count = 0;
      if (rc != 0 || (size_t)n < seg)
        break;
      /* A full quantum: pacing decides when the next one goes. */
      break;
    }
  }
  if (off > 0)
    (void)send_batch(q, &bpath, becn, buf, off, seg);
  if (bpath.remote_len != 0)
    q->path = bpath;
  ngtcp2_conn_update_pkt_tx_time(q->ng, ts);
  q->flags &= ~(unsigned)Q_IN_NG;
  after_ng(q);
  if (!(q->head.flags & TERN__C_CLOSING))
    arm_timer(q);
}

/* ---- Timers ----------------------------------------------------------------
 */

static void update_timer(tern__quic *q) {
  tern__conn *c = &q->head;
  int kind;
  if (c->flags & TERN__C_CLOSING)
    return;
  kind = (q->flags & Q_HANDSHAKE) || !(q->flags & Q_STARTED)
             ? TERN__T_HEAD
             : c->proto->timer(c);
  tern__conn_timer_choose(c, kind & ~TERN__T_DRAINED);
}

static void on_timer(uv_timer_t *t) {
  tern__quic *q = t->data;
  tern__worker *w = q->head.w;
  uint64_t now = uv_now(w->loop);
  int rv;

  if (q->flags & Q_FREEING)
    return;
  if (q->flags & (Q_CLOSING | Q_DRAINING)) {
    if (now >= q->end_at)
      finish(q);
    else
      arm_timer(q);
    return;
  }
  if (q->wake_at != 0 && now >= q->wake_at) {
    q->wake_at = 0;
    tern__conn_want_output(&q->head);
  }
  if (ngtcp2_conn_get_expiry(q->ng) <= now_ns()) {
    q->flags |= Q_IN_NG;
    rv = ngtcp2_conn_handle_expiry(q->ng, now_ns());
    q->flags &= ~(unsigned)Q_IN_NG;
    if (rv != 0) {
      ng_failed(q, rv);
      after_ng(q);
      return;
    }
    after_ng(q);
  }
  /* Write now, as the check phase would: a timer runs before the loop's
   * poll, and the check phase comes only after it, which may wait for
   * the next datagram or timer (pacing would stall for that long). */
  if ((q->head.flags & (TERN__C_OUTPUT | TERN__C_CLOSING)) == TERN__C_OUTPUT) {
    q->head.flags &= ~(unsigned)TERN__C_OUTPUT;
    quic_output(&q->head);
  }
  if (!(q->head.flags & TERN__C_CLOSING))
    quic_flush(&q->head);
  if (!(q->head.flags & TERN__C_CLOSING))
    arm_timer(q);
}

static void arm_timer(tern__quic *q) {
  uint64_t ms, now = uv_now(q->head.w->loop);
  if (q->flags & Q_FREEING)
    return;
  if (q->flags & (Q_CLOSING | Q_DRAINING)) {
    ms = q->end_at > now ? q->end_at - now : 0;
  } else {
    ngtcp2_tstamp exp = ngtcp2_conn_get_expiry(q->ng), t = now_ns();
    if (exp == UINT64_MAX)
      ms = UINT64_MAX;
    else if (exp <= t)
      ms = 0;
    else /* rounded up: a timer that fires early only spins */
      ms = (exp - t + NGTCP2_MILLISECONDS - 1) / NGTCP2_MILLISECONDS;
    if (q->wake_at != 0) {
      uint64_t wm = q->wake_at > now ? q->wake_at - now : 0;
      if (wm < ms)
        ms = wm;
    }
  }
  if (ms == UINT64_MAX)
    uv_timer_stop(&q->timer);
  else
    uv_timer_start(&q->timer, on_timer, ms, 0);
}

/* ---- Reading
 * ------------------------------------------------------------------ */

static void feed(tern__quic *q, const uint8_t *p, size_t n,
                 const tern__udp_path *path, unsigned ecn) {
  ngtcp2_path np;
  ngtcp2_pkt_info pi;
  int rv;

  if (q->flags & Q_FREEING)
    return;
  if (q->flags & Q_CLOSING) {
    /* Answer with the close again, ever more rarely (1, 2, 4, ...), and
     * only on the connection's own path and within three times what
     * arrived there meanwhile (RFC 9000 10.2.1 and 8.1): a packet that
     * names the connection's CID from another address must not make it
     * a reflector. */
    if (!path_eq(path, &q->path))
      return;
    q->close_seen++;
    q->close_budget += 3 * n;
    if (q->close_pkt != NULL && (q->close_seen & (q->close_seen - 1)) == 0 &&
        q->close_budget >= q->close_len) {
      q->close_budget -= q->close_len;
      (void)tern__udp_send(&q->wl->udp, path, 0, q->close_pkt, q->close_len,
                           q->close_len);
    }
    return;
  }
  if ((q->flags & Q_DRAINING) || (q->head.flags & TERN__C_CLOSING))
    return;
  path_of(&np, path);
  memset(&pi, 0, sizeof(pi));
  pi.ecn = ecn & NGTCP2_ECN_MASK;
  q->flags |= Q_IN_NG;
  rv = ngtcp2_conn_read_pkt(q->ng, &np, &pi, p, n, now_ns());
  q->flags &= ~(unsigned)Q_IN_NG;
  if (rv != 0) {
    ng_failed(q, rv);
    after_ng(q);
    return;
  }
  after_ng(q);
  if (!(q->head.flags & TERN__C_CLOSING))
    tern__conn_reprocess(&q->head); /* the adapter, then the write loop */
}

static void send_version_negotiation(quic_wl *wl, const ngtcp2_version_cid *vc,
                                     const tern__udp_path *path) {
  uint8_t buf[256], r;
  uint32_t sv[2];
  ngtcp2_ssize n;
  rand_bytes(&r, 1);
  sv[0] = NGTCP2_PROTO_VER_V1;
  sv[1] = NGTCP2_PROTO_VER_V2_DRAFT;
  n = ngtcp2_pkt_write_version_negotiation(
      buf, sizeof(buf), r, vc->scid, vc->scidlen, vc->dcid, vc->dcidlen, sv, 2);
  if (n > 0) {
    send_raw(wl, path, buf, (size_t)n);
    TERN__STAT_ADD(wl->w->stats.quic_vn, 1);
  }
}

static void send_stateless_reset(quic_wl *wl, const ngtcp2_version_cid *vc,
                                 size_t pktlen, const tern__udp_path *path) {
  uint8_t token[NGTCP2_STATELESS_RESET_TOKENLEN], rnd[64], buf[128];
  uint64_t now = uv_now(wl->w->loop);
  size_t randlen;
  ngtcp2_cid cid;
  ngtcp2_ssize n;

  /* RFC 9000 10.3: only packets that could hold a reset themselves, and
   * the reset smaller than what triggered it, so that two servers cannot
   * loop resets at each other. */
  if (pktlen < QUIC_CIDLEN + 22)
    return;
  if (now - wl->reset_time >= 1000 / QUIC_RESET_RATE) {
    uint64_t add = (now - wl->reset_time) * QUIC_RESET_RATE / 1000;
    wl->reset_tokens = add + wl->reset_tokens > QUIC_RESET_BURST
                           ? QUIC_RESET_BURST
                           : wl->reset_tokens + (uint32_t)add;
    wl->reset_time = now;
  }
  if (wl->reset_tokens == 0)
    return;
  wl->reset_tokens--;
  randlen = pktlen - 1 - NGTCP2_STATELESS_RESET_TOKENLEN;
  if (randlen > sizeof(rnd))
    randlen = sizeof(rnd);
  if (randlen < NGTCP2_MIN_STATELESS_RESET_RANDLEN)
    return;
  ngtcp2_cid_init(&cid, vc->dcid, vc->dcidlen);
  if (ngtcp2_crypto_generate_stateless_reset_token(
          token, reset_key(wl->l, vc->dcid, vc->dcidlen), QUIC_SECRET, &cid) !=
      0)
    return;
  rand_bytes(rnd, randlen);
  n = ngtcp2_pkt_write_stateless_reset(buf, sizeof(buf), token, rnd, randlen);
  if (n > 0) {
    send_raw(wl, path, buf, (size_t)n);
    TERN__STAT_ADD(wl->w->stats.quic_resets, 1);
  }
}

static void send_retry(quic_wl *wl, const ngtcp2_pkt_hd *hd,
                       const tern__udp_path *path, size_t pktlen) {
  uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], buf[256];
  ngtcp2_cid scid;
  ngtcp2_ssize tl, n;

  new_cid(wl, &scid);
  tl = ngtcp2_crypto_generate_retry_token(
      token, wl->l->secret, QUIC_SECRET, hd->version,
      (const ngtcp2_sockaddr *)&path->remote, path->remote_len, &scid,
      &hd->dcid, wall_ns());
  if (tl < 0)
    return;
  n = ngtcp2_crypto_write_retry(buf, sizeof(buf), hd->version, &hd->scid, &scid,
                                &hd->dcid, token, (size_t)tl);
  /* Within the amplification limit of what the client sent. */
  if (n > 0 && (size_t)n <= 3 * pktlen) {
    send_raw(wl, path, buf, (size_t)n);
    TERN__STAT_ADD(wl->w->stats.quic_retries, 1);
  }
}

static void send_refusal(quic_wl *wl, const ngtcp2_pkt_hd *hd,
                         const tern__udp_path *path, uint64_t code) {
  uint8_t buf[256];
  ngtcp2_ssize n = ngtcp2_crypto_write_connection_close(
      buf, sizeof(buf), hd->version, &hd->scid, &hd->dcid, code, NULL, 0);
  TERN__STAT_ADD(wl->w->stats.quic_refused, 1);
  if (n > 0)
    send_raw(wl, path, buf, (size_t)n);
}

static int conn_limit_reached(const tern__worker *w) {
  uint32_t max = w->max_conns ? w->max_conns : w->srv->s.max_connections;
  return w->nconns >= max;
}

/* A window's starting size: QUIC's default, or the server's maximum for
 * it where that is smaller (which then pins it). */
static uint32_t win_start(uint32_t initial, uint32_t max) {
  return initial < max ? initial : max;
}

/* A client's token, made under the current key or the previous one. */
static int verify_retry(const quic_listener *l, ngtcp2_cid *odcid,
                        const ngtcp2_pkt_hd *hd, const tern__udp_path *path) {
  int i;
  for (i = 0; i < 1 + l->has_prev; i++)
    if (ngtcp2_crypto_verify_retry_token(
            odcid, hd->token.base, hd->token.len, i ? l->prev : l->secret,
            QUIC_SECRET, hd->version, (const ngtcp2_sockaddr *)&path->remote,
            path->remote_len, &hd->dcid, QUIC_RETRY_TIMEOUT, wall_ns()) == 0)
      return 0;
  return -1;
}

static int verify_regular(const quic_listener *l, const ngtcp2_pkt_hd *hd,
                          const tern__udp_path *path) {
  int i;
  for (i = 0; i < 1 + l->has_prev; i++)
    if (ngtcp2_crypto_verify_regular_token(
            hd->token.base, hd->token.len, i ? l->prev : l->secret, QUIC_SECRET,
            (const ngtcp2_sockaddr *)&path->remote, path->remote_len,
            QUIC_TOKEN_TIMEOUT, wall_ns()) == 0)
      return 0;
  return -1;
}

/* A first Initial: validate the address where asked, then create. */
static void accept_initial(quic_wl *wl, const uint8_t *p, size_t n,
                           const tern__udp_path *path, unsigned ecn) {
  quic_listener *l = wl->l;
  tern__worker *w = wl->w;
  tern_server *srv = w->srv;
  ngtcp2_pkt_hd hd;
  ngtcp2_cid odcid, scid;
  ngtcp2_settings settings;
  ngtcp2_transport_params params;
  ngtcp2_path np;
  const ngtcp2_cid *orig;
  int validated = 0, retried = 0, rc;
  tern__conn *c;
  tern__quic *q;

  if (ngtcp2_accept(&hd, p, n) != 0)
    return; /* not a first Initial we can take (or too short) */
  if (wl->stopping) {
    send_refusal(wl, &hd, path, NGTCP2_CONNECTION_REFUSED);
    return;
  }
  if (hd.token.len > 0) {
    if (hd.token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) {
      if (verify_retry(l, &odcid, &hd, path) != 0) {
        /* RFC 9000 8.1.3: a bad Retry token ends the attempt. */
        send_refusal(wl, &hd, path, NGTCP2_INVALID_TOKEN);
        return;
      }
      validated = retried = 1;
    } else if (hd.token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR &&
               verify_regular(l, &hd, path) == 0) {
      validated = 1; /* a NEW_TOKEN token from an earlier connection */
    }
  }
  if (!validated && (l->o.retry == TERN_QUIC_RETRY_ALWAYS ||
                     (l->o.retry == TERN_QUIC_RETRY_LOAD &&
                      wl->handshaking >= QUIC_RETRY_LOAD))) {
    send_retry(wl, &hd, path, n);
    return;
  }
  if (conn_limit_reached(w)) {
    send_refusal(wl, &hd, path, NGTCP2_CONNECTION_REFUSED);
    return;
  }
  c = tern__conn_new(w, &tern__quic_transport);
  if (c == NULL)
    return;
  q = tern__quic_of(c);
  memset((char *)q + sizeof(tern__conn), 0, sizeof(*q) - sizeof(tern__conn));
  c->proto = tern__proto_find(tern__quic_h3->alpn, strlen(tern__quic_h3->alpn));
  if (c->proto == NULL) {
    tern__conn_discard(c);
    return;
  }
  q->ops = tern__quic_h3;
  q->wl = wl;
  tern__list_init(&q->blocked_link);
  q->path = *path;
  q->mem.user_data = w;
  q->mem.malloc = tern__small_mem_malloc;
  q->mem.free = tern__small_mem_free;
  q->mem.calloc = tern__small_mem_calloc;
  q->mem.realloc = tern__small_mem_realloc;
  q->ref.get_conn = get_conn;
  q->ref.user_data = q;
  ngtcp2_connection_close_error_default(&q->ccerr);

  ngtcp2_settings_default(&settings);
  settings.initial_ts = now_ns();
  /* ngtcp2's auto-tuning (0.12: ngtcp2_conn.c, where it frames
   * MAX_STREAM_DATA and MAX_DATA) doubles a window only while it is below
   * these, and 0 would turn it off: a maximum equal to the start pins. */
  settings.max_window = srv->s.max_conn_window;
  settings.max_stream_window = srv->s.max_stream_window;
  settings.handshake_timeout =
      (ngtcp2_duration)srv->s.head_timeout_ms * NGTCP2_MILLISECONDS;
  settings.max_tx_udp_payload_size = QUIC_MAX_UDP;
  if (validated)
    settings.token = hd.token;
  ngtcp2_transport_params_default(&params);
  params.initial_max_stream_data_bidi_remote =
      win_start(QUIC_STREAM_WIN_INIT, srv->s.max_stream_window);
  params.initial_max_stream_data_bidi_local =
      params.initial_max_stream_data_bidi_remote;
  params.initial_max_stream_data_uni =
      params.initial_max_stream_data_bidi_remote;
  params.initial_max_data =
      win_start(QUIC_CONN_WIN_INIT, srv->s.max_conn_window);
  params.initial_max_streams_bidi = l->o.max_streams;
  /* The client's control and QPACK streams; ngtcp2 0.12 never frees a
   * remote uni stream, so no more than needed. */
  params.initial_max_streams_uni = 3;
  params.max_idle_timeout =
      (ngtcp2_duration)srv->s.idle_timeout_ms * NGTCP2_MILLISECONDS;
  params.active_connection_id_limit = 7;
  orig = retried ? &odcid : &hd.dcid;
  params.original_dcid = *orig;
  if (retried) {
    params.retry_scid = hd.dcid;
    params.retry_scid_present = 1;
  }
  new_cid(wl, &scid);
  /* Derived, not random: a restarted server (same secret) can still
   * reset a client of the old one. */
  if (ngtcp2_crypto_generate_stateless_reset_token(
          params.stateless_reset_token, l->secret, QUIC_SECRET, &scid) == 0)
    params.stateless_reset_token_present = 1;

  path_of(&np, path);
  rc = ngtcp2_conn_server_new(&q->ng, &hd.scid, &scid, &np, hd.version,
                              &callbacks, &settings, &params, &q->mem, q);
  if (rc != 0) {
    q->ng = NULL;
    tern__conn_discard(c);
    return;
  }
  rc = tern__tls_engines[TERN__TLS_GNUTLS]->quic_session(
      l->tls, (void **)&q->tls, &q->gen, q->ops->alpn, wl->ar);
  if (rc == 0 && ngtcp2_crypto_gnutls_configure_server_session(q->tls) != 0)
    rc = TERN_ETLS;
  if (rc == 0 && (cid_add(q, scid.data, scid.datalen) != 0 ||
                  cid_add(q, hd.dcid.data, hd.dcid.datalen) != 0))
    rc = TERN_ENOMEM;
  if (rc != 0) {
    cid_remove_all(q);
    if (q->tls != NULL)
      gnutls_deinit(q->tls);
    if (q->gen != NULL)
      tern__tls_release(q->gen);
    ngtcp2_conn_del(q->ng);
    tern__conn_discard(c);
    return;
  }
  gnutls_session_set_ptr(q->tls, &q->ref);
  ngtcp2_conn_set_tls_native_handle(q->ng, q->tls);
  uv_timer_init(w->loop, &q->timer);
  q->timer.data = q;
  wl->nconns++;
  q->flags |= Q_HANDSHAKE;
  wl->handshaking++;
  tern__addr_set(&c->peer, (const struct sockaddr *)&path->remote);
  tern__addr_set(&c->local, (const struct sockaddr *)&path->local);
  tern__conn_start(c);
  feed(q, p, n, path, ecn);
}

/* A forwarded datagram, on its owner worker. */
typedef struct {
  tern__msg m;
  quic_listener *l;
  unsigned wid;
  tern__udp_path path;
  unsigned ecn;
  size_t len;
  uint8_t data[];
} fwd_msg;

static void dispatch(quic_wl *wl, uint8_t *p, size_t n,
                     const tern__udp_path *path, unsigned ecn, int forwarded);

static void fwd_apply(tern__msg *m) {
  fwd_msg *f = (fwd_msg *)m;
  quic_wl *wl = &f->l->wls[f->wid];
  atomic_fetch_sub(&f->l->fwd_inflight, 1);
  if (wl->open)
    dispatch(wl, f->data, f->len, &f->path, f->ecn, 1);
  tern__free(f->l->srv, f);
}

static void fwd_drop(tern__msg *m, int refused) {
  fwd_msg *f = (fwd_msg *)m;
  (void)refused;
  atomic_fetch_sub(&f->l->fwd_inflight, 1);
  tern__free(f->l->srv, f);
}

static const tern__msg_ops fwd_ops = {.apply = fwd_apply, .drop = fwd_drop};

static void forward(quic_wl *wl, unsigned to, const uint8_t *p, size_t n,
                    const tern__udp_path *path, unsigned ecn) {
  fwd_msg *f;
  /* Past the bound the datagram is dropped, as a full socket would:
   * QUIC takes it for a loss. */
  if (atomic_fetch_add(&wl->l->fwd_inflight, 1) >= QUIC_FWD_MAX) {
    atomic_fetch_sub(&wl->l->fwd_inflight, 1);
    return;
  }
  f = tern__malloc(wl->l->srv, sizeof(*f) + n);
  if (f == NULL) {
    atomic_fetch_sub(&wl->l->fwd_inflight, 1);
    return;
  }
  f->m.ops = &fwd_ops;
  f->l = wl->l;
  f->wid = to;
  f->path = *path;
  f->ecn = ecn;
  f->len = n;
  memcpy(f->data, p, n);
  TERN__STAT_ADD(wl->w->stats.quic_forwarded, 1);
  (void)tern__worker_post(&wl->l->srv->workers[to], &f->m);
}

static void dispatch(quic_wl *wl, uint8_t *p, size_t n,
                     const tern__udp_path *path, unsigned ecn, int forwarded) {
  ngtcp2_version_cid vc;
  tern__quic *q;
  int rv = ngtcp2_pkt_decode_version_cid(&vc, p, n, QUIC_CIDLEN);
  int is_long = (p[0] & 0x80) != 0;

  if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
    /* Only for what could be a client's first packet (RFC 9000 6.1). */
    if (n >= 1200)
      send_version_negotiation(wl, &vc, path);
    return;
  }
  if (rv != 0)
    return;
  q = cid_find(wl, vc.dcid, vc.dcidlen);
  if (q != NULL) {
    feed(q, p, n, path, ecn);
    return;
  }
  /* A CID of ours names its worker; a client's first DCID is random and
   * stays where it landed. */
  if (!forwarded && wl->l->only < 0 && vc.dcidlen == QUIC_CIDLEN &&
      vc.dcid[0] < wl->l->srv->nworkers && vc.dcid[0] != wl->w->id &&
      (!is_long || !is_initial(p, vc.version))) {
    forward(wl, vc.dcid[0], p, n, path, ecn);
    return;
  }
  if (!is_long) {
    send_stateless_reset(wl, &vc, n, path);
    return;
  }
  if (!is_initial(p, vc.version))
    return; /* a long header other than Initial for no connection */
  accept_initial(wl, p, n, path, ecn);
}

static void on_datagram(tern__udp *u, uint8_t *p, size_t n,
                        const tern__udp_path *path, unsigned ecn) {
  if (n == 0)
    return;
  dispatch(u->user, p, n, path, ecn, 0);
}

static void on_batch_done(tern__udp *u) {
  (void)u; /* the touched connections are dirty: the check phase writes */
}

static const tern__udp_ops udp_ops = {
    .datagram = on_datagram,
    .done = on_batch_done,
    .writable = on_writable,
};

/* ---- The transport ---------------------------------------------------------
 */

static void quic_process(tern__conn *c) {
  if (c->flags & TERN__C_CLOSING)
    return;
  if (c->flags & TERN__C_IN_READ) {
    tern__conn_reprocess(c);
    return;
  }
  c->flags |= TERN__C_IN_READ;
  if (tern__quic_of(c)->flags & Q_STARTED)
    c->proto->input(c);
  c->flags &= ~(unsigned)TERN__C_IN_READ;
  if (!(c->flags & TERN__C_CLOSING)) {
    update_timer(tern__quic_of(c));
    tern__conn_mark_dirty(c);
  }
}

static void quic_output(tern__conn *c) {
  if (!(c->flags & TERN__C_CLOSING) && (tern__quic_of(c)->flags & Q_STARTED) &&
      c->proto->output != NULL)
    c->proto->output(c);
}

static void quic_flush(tern__conn *c) {
  tern__quic *q = tern__quic_of(c);
  if (c->flags & TERN__C_CLOSING)
    return;
  tern__conn_clean(c);
  if (q->flags & Q_CLOSE_WANT) {
    tern__conn_close(c);
    return;
  }
  if (tern__conn_done(c)) {
    q->flags |= Q_CLOSE_WANT;
    q->close_code = q->ops->code_none;
    tern__conn_close(c);
    return;
  }
  write_loop(q);
  if (!(c->flags & TERN__C_CLOSING))
    update_timer(q);
}

static void quic_input(tern__conn *c, int on) {
  (void)c; /* QUIC's backpressure is credit, which the adapter gives */
  (void)on;
}

static size_t quic_buffered(const tern__conn *c) {
  const tern__quic *q = (const tern__quic *)(const void *)c;
  return q->pend_len;
}

static void quic_timeout(tern__conn *c, int kind) {
  (void)kind;
  tern__conn_close(c);
}

static void quic_free(tern__conn *c) {
  tern__worker *w = c->w;
  tern__pool_put(w, &w->conn_pools[TERN__POOL_QUIC], c);
}

const tern__transport tern__quic_transport = {
    .name = "quic",
    .pool = TERN__POOL_QUIC,
    .conn_size = sizeof(tern__quic),
    .process = quic_process,
    .output = quic_output,
    .flush = quic_flush,
    .input = quic_input,
    .buffered = quic_buffered,
    .timeout = quic_timeout,
    .close = quic_close,
    .free = quic_free,
};

/* ---- The glue for the application
 * ------------------------------------------------ */

void *tern__quic_app_data(const tern__quic *q) {
  return q->app;
}

void tern__quic_set_app(tern__quic *q, void *app) {
  q->app = app;
}

int tern__quic_open_uni(tern__quic *q, int64_t *id) {
  int rv = ngtcp2_conn_open_uni_stream(q->ng, id, NULL);
  return rv == 0                              ? 0
         : rv == NGTCP2_ERR_STREAM_ID_BLOCKED ? TERN_ETOOBIG
                                              : TERN_ENOMEM;
}

uint64_t tern__quic_uni_left(tern__quic *q) {
  return ngtcp2_conn_get_streams_uni_left(q->ng);
}

uint64_t tern__quic_max_bidi(tern__quic *q) {
  return ngtcp2_conn_get_local_transport_params(q->ng)
      ->initial_max_streams_bidi;
}

int tern__quic_credit(tern__quic *q, int64_t id, uint64_t n) {
  int rv = 0;
  if (q->ng == NULL || n == 0)
    return 0;
  /* A stream already gone (reset, closed) needs no credit, but its bytes
   * counted against the connection's window all the same. */
  if (id >= 0)
    rv = ngtcp2_conn_extend_max_stream_offset(q->ng, id, n);
  ngtcp2_conn_extend_max_offset(q->ng, n);
  if (!(q->flags & Q_IN_NG))
    tern__conn_mark_dirty(&q->head); /* MAX_DATA goes out */
  return rv == NGTCP2_ERR_NOMEM ? TERN_ENOMEM : 0;
}

void tern__quic_more_streams(tern__quic *q, uint64_t n) {
  if (q->ng != NULL)
    ngtcp2_conn_extend_max_streams_bidi(q->ng, n);
}

int tern__quic_shut_read(tern__quic *q, int64_t id, uint64_t code) {
  int rv = q->ng ? ngtcp2_conn_shutdown_stream_read(q->ng, id, code) : 0;
  tern__conn_mark_dirty(&q->head);
  return rv == 0 || rv == NGTCP2_ERR_STREAM_NOT_FOUND ? 0 : TERN_ENOMEM;
}

int tern__quic_shut_write(tern__quic *q, int64_t id, uint64_t code) {
  int rv = q->ng ? ngtcp2_conn_shutdown_stream_write(q->ng, id, code) : 0;
  tern__conn_mark_dirty(&q->head);
  return rv == 0 || rv == NGTCP2_ERR_STREAM_NOT_FOUND ? 0 : TERN_ENOMEM;
}

int tern__quic_shut(tern__quic *q, int64_t id, uint64_t code) {
  int rv = q->ng ? ngtcp2_conn_shutdown_stream(q->ng, id, code) : 0;
  tern__conn_mark_dirty(&q->head);
  return rv == 0 || rv == NGTCP2_ERR_STREAM_NOT_FOUND ? 0 : TERN_ENOMEM;
}

void tern__quic_want_write(tern__quic *q) {
  tern__conn_mark_dirty(&q->head);
}

void tern__quic_close(tern__quic *q, uint64_t code, const char *reason) {
  (void)reason;
  if (q->flags & Q_CLOSE_WANT)
    return;
  q->flags |= Q_CLOSE_WANT;
  q->close_code = code;
  tern__conn_mark_dirty(&q->head);
}

void tern__quic_set_app_error(tern__quic *q, uint64_t code) {
  q->flags |= Q_APP_ERR;
  q->app_error = code;
}

void tern__quic_wake_after(tern__quic *q, uint64_t ms) {
  q->wake_at = uv_now(q->head.w->loop) + (ms ? ms : 1);
  if (!(q->flags & Q_IN_NG))
    arm_timer(q);
}

void tern__quic_keep_alive(tern__quic *q, int on) {
  ngtcp2_duration idle = 0;
  if (q->ng == NULL)
    return;
  if (on) {
    /* The idle timeout in force is the smaller of the two announced (0:
     * none); a PING at half of it keeps both ends' timers from firing. */
    const ngtcp2_transport_params *rp =
        ngtcp2_conn_get_remote_transport_params(q->ng);
    idle = ngtcp2_conn_get_local_transport_params(q->ng)->max_idle_timeout;
    if (rp != NULL && rp->max_idle_timeout != 0 &&
        (idle == 0 || rp->max_idle_timeout < idle))
      idle = rp->max_idle_timeout;
  }
  ngtcp2_conn_set_keep_alive_timeout(q->ng, idle / 2);
  if (!(q->flags & Q_IN_NG))
    arm_timer(q);
}

uint64_t tern__quic_pto_ms(tern__quic *q) {
  uint64_t ms = ngtcp2_conn_get_pto(q->ng) / NGTCP2_MILLISECONDS;
  return ms ? ms : 1;
}

int tern__quic_early(tern__quic *q) {
  return q->early;
}

/* ---- Listeners
 * --------------------------------------------------------------- */

static int quic_start(tern__listener *base, tern__worker *w) {
  quic_listener *l = (quic_listener *)base;
  quic_wl *wl = &l->wls[w->id];
  int rc;

  wl->l = l;
  wl->w = w;
  tern__list_init(&wl->blocked);
  if (l->only >= 0 && (unsigned)l->only != w->id)
    return 0; /* one socket, served by another worker */
  wl->reset_tokens = QUIC_RESET_BURST;
  wl->sbuf = tern__malloc(w->srv, (size_t)TERN__UDP_GSO_MAX * QUIC_MAX_UDP);
  if (wl->sbuf == NULL)
    return TERN_ENOMEM;
  if (l->o.early_data) {
    wl->replay_seen =
        tern__malloc(w->srv, QUIC_REPLAY_SLOTS * sizeof(struct replay_slot));
    if (wl->replay_seen == NULL || gnutls_anti_replay_init(&wl->ar) < 0) {
      wl->ar = NULL;
      return TERN_ENOMEM;
    }
    memset(wl->replay_seen, 0, QUIC_REPLAY_SLOTS * sizeof(struct replay_slot));
    gnutls_anti_replay_set_add_function(wl->ar, replay_add);
    gnutls_anti_replay_set_ptr(wl->ar, wl);
  }
  rc = tern__udp_start(&wl->udp, w, l->fds[w->id], &udp_ops, wl);
  l->fds[w->id] = -1; /* the socket owns it now, or closed it */
  if (rc != 0)
    return rc;
  wl->open = 1;
  return 0;
}

/* A graceful stop refuses new connections and keeps the socket open for
 * the ones still closing; at cleanup (none left) it closes. */
static void quic_stop(tern__listener *base, tern__worker *w) {
  quic_listener *l = (quic_listener *)base;
  quic_wl *wl = &l->wls[w->id];
  tern__list *e, *next;
  wl->stopping = 1;
  /* A connection still in its handshake carries no request: it closes
   * now, as a byte-stream connection without one does, rather than hold
   * the stop until a client that may never finish does. */
  for (e = w->conns.next; e != &w->conns; e = next) {
    tern__conn *c = TERN__CONTAINER_OF(e, tern__conn, all_link);
    next = e->next;
    if (c->tp == &tern__quic_transport && tern__quic_of(c)->wl == wl &&
        (tern__quic_of(c)->flags & Q_HANDSHAKE))
      tern__conn_close(c);
  }
  if (wl->open && wl->nconns == 0) {
    wl->open = 0;
    tern__udp_close(&wl->udp);
  }
}

static void quic_free_listener(tern__listener *base, tern_server *srv) {
  quic_listener *l = (quic_listener *)base;
  unsigned i;
  for (i = 0; i < srv->nworkers; i++) {
    if (l->fds[i] >= 0)
      close(l->fds[i]);
    tern__free(srv, l->wls[i].sbuf);
    tern__free(srv, l->wls[i].buckets);
    tern__free(srv, l->wls[i].replay_seen);
    if (l->wls[i].ar != NULL)
      gnutls_anti_replay_deinit(l->wls[i].ar);
  }
  gnutls_memset(l->secret, 0, sizeof(l->secret));
  gnutls_memset(l->prev, 0, sizeof(l->prev));
  tern__free(srv, l->fds);
  tern__free(srv, l->wls);
  tern__free(srv, l);
}

static int quic_port(const tern__listener *base) {
  return ((const quic_listener *)base)->port;
}

static const tern__listener_ops quic_ops = {
    .name = "quic",
    .quic_port = quic_port,
    .start = quic_start,
    .stop = quic_stop,
    .free = quic_free_listener,
};

/* A key of the caller's, hashed to the key size; and its tag (the byte
 * that marks the CIDs it makes), from a hash of its own so that the CIDs
 * tell nothing of the key. */
static int key_tag(const uint8_t *key, uint8_t *tag) {
  uint8_t h[32];
  if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, QUIC_SECRET, "tern cid tag", 12,
                       h) != 0)
    return -1;
  *tag = h[0];
  return 0;
}

static int take_key(const void *key, size_t len, uint8_t *out, uint8_t *tag) {
  if (gnutls_hash_fast(GNUTLS_DIG_SHA256, key, len, out) != 0)
    return -1;
  return key_tag(out, tag);
}

/* A QUIC listener: bind host:port (fd < 0), or serve a UDP socket given. */
static int listen_quic(tern_server *srv, const char *what, const char *host,
                       int port, int given_fd, tern_tls *tls,
                       const tern_quic_options *opts, int *bound_port) {
  struct sockaddr_storage ss;
  socklen_t slen = sizeof(ss);
  quic_listener *l;
  char why[128];
  size_t i;
  int rc, fd;

  if (srv == NULL || tls == NULL || port < 0 || port > 65535)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  if (tern__quic_h3 == NULL || tern__tls_engines[TERN__TLS_GNUTLS] == NULL ||
      tls->engine != TERN__TLS_GNUTLS)
    return TERN_ENOTSUP; /* QUIC's TLS is GnuTLS's (ngtcp2's helper) */
  if (!tern__tls_ready(tls))
    return TERN_ESTATE;
  if (given_fd < 0 && (rc = tern__net_addr(host, port, &ss)) != 0)
    return rc;
  l = tern__malloc(srv, sizeof(*l));
  if (l == NULL)
    return TERN_ENOMEM;
  memset(l, 0, sizeof(*l));
  l->only = -1;
  tern_quic_options_init_size(&l->o, sizeof(l->o));
  if (opts != NULL &&
      tern__abi_read(&l->o, sizeof(l->o), opts, tern__quic_options_ends, 2, why,
                     sizeof(why)) != 0) {
    tern__log(srv, TERN_LOG_ERROR, "%s: %s", what, why);
    tern__free(srv, l);
    return TERN_EINVAL;
  }
  if (l->o.retry < TERN_QUIC_RETRY_LOAD || l->o.retry > TERN_QUIC_RETRY_NEVER ||
      (l->o.early_data != 0 && l->o.early_data != 1) || l->o.max_streams < 1 ||
      l->o.max_streams > 1000 ||
      (l->o.secret != NULL && (l->o.secret_len < 16 || l->o.secret_len > 64)) ||
      (l->o.previous_secret != NULL &&
       (l->o.secret == NULL || l->o.previous_secret_len < 16 ||
        l->o.previous_secret_len > 64))) {
    tern__log(srv, TERN_LOG_ERROR,
              "%s: retry, early_data, max_streams or a secret out of range "
              "(a previous_secret needs a secret)",
              what);
    tern__free(srv, l);
    return TERN_EINVAL;
  }
  if (given_fd >= 0) {
    const char *bad = tern__udp_adopt(given_fd, &ss);
    if (bad != NULL) {
      tern__log(srv, TERN_LOG_ERROR, "%s: fd %d: %s", what, given_fd, bad);
      tern__free(srv, l);
      return TERN_EINVAL;
    }
  }
  l->base.ops = &quic_ops;
  l->srv = srv;
  l->tls = tls;
  /* The server's secrets: the caller's, else the first QUIC listener's,
   * shared by the others, so that tokens and resets hold across its
   * ports. A caller's secret of any length is hashed to the key size. */
  rc = 0;
  if (l->o.secret != NULL) {
    rc = take_key(l->o.secret, l->o.secret_len, l->secret, &l->tag);
    if (rc == 0 && l->o.previous_secret != NULL) {
      rc = take_key(l->o.previous_secret, l->o.previous_secret_len, l->prev,
                    &l->prev_tag);
      l->has_prev = 1;
    }
  } else {
    for (i = 0; i < srv->nlisteners; i++)
      if (srv->listeners[i]->ops == &quic_ops)
        break;
    if (i < srv->nlisteners) {
      quic_listener *first = (quic_listener *)srv->listeners[i];
      memcpy(l->secret, first->secret, QUIC_SECRET);
      memcpy(l->prev, first->prev, QUIC_SECRET);
      l->tag = first->tag;
      l->prev_tag = first->prev_tag;
      l->has_prev = first->has_prev;
    } else {
      rc = gnutls_rnd(GNUTLS_RND_KEY, l->secret, QUIC_SECRET);
      if (rc == 0)
        rc = key_tag(l->secret, &l->tag);
    }
  }
  /* Not the caller's memory past this call. */
  l->o.secret = l->o.previous_secret = NULL;
  if (rc != 0) {
    tern__free(srv, l);
    return TERN_ETLS;
  }
  rand_bytes((uint8_t *)&l->hash_key, sizeof(l->hash_key));
  l->fds = tern__malloc(srv, srv->nworkers * sizeof(int));
  l->wls = tern__malloc(srv, srv->nworkers * sizeof(quic_wl));
  if (l->fds == NULL || l->wls == NULL) {
    tern__free(srv, l->fds);
    tern__free(srv, l->wls);
    tern__free(srv, l);
    return TERN_ENOMEM;
  }
  memset(l->wls, 0, srv->nworkers * sizeof(quic_wl));
  for (i = 0; i < srv->nworkers; i++)
    l->fds[i] = -1;
  if (given_fd >= 0) {
    /* One socket: one worker serves it (its connections all live there,
     * so nothing is forwarded), the next one for each such listener. */
    unsigned k = 0;
    for (i = 0; i < srv->nlisteners; i++)
      if (srv->listeners[i]->ops == &quic_ops &&
          ((quic_listener *)srv->listeners[i])->only >= 0)
        k++;
    l->only = (int)(k % srv->nworkers);
    l->fds[l->only] = given_fd;
    rc = tern__server_add_listener(srv, &l->base);
    if (rc != 0) {
      l->fds[l->only] = -1; /* the caller's again */
      quic_free_listener(&l->base, srv);
      return rc;
    }
  } else {
    for (i = 0; i < srv->nworkers && rc == 0; i++) {
      fd = tern__udp_socket(&ss, host == NULL);
      if (fd < 0) {
        rc = fd;
        break;
      }
      l->fds[i] = fd;
      if (i == 0) {
        /* Port 0: the first bind picked it; the others join it. */
        if (getsockname(fd, (struct sockaddr *)&ss, &slen) != 0)
          rc = TERN_EIO;
      }
    }
    if (rc == 0)
      rc = tern__server_add_listener(srv, &l->base);
    if (rc != 0) {
      quic_free_listener(&l->base, srv);
      return rc;
    }
  }
  l->port = tern__net_port(&ss);
  if (bound_port != NULL)
    *bound_port = l->port;
  tern__server_quic_port(srv, l->port);
  return 0;
}

/* tern_listen_with's QUIC listener, from read options (lib/net/tcp.c
 * checked them). */
int tern__listen_quic(tern_server *srv, const tern_listen_options *o,
                      int *bound_port) {
  return listen_quic(srv, "tern_listen_with", o->host, o->port, o->fd, o->tls,
                     o->quic_options, bound_port);
}
