/* QUIC listeners (tern_listen_with with quic; lib/quic/quic_int.h has
 * the overview): the options and secrets, the UDP sockets (one per
 * worker, or one given socket that one worker serves), each worker's
 * start and graceful stop, and the 0-RTT anti-replay table each worker
 * keeps for a listener.
 */
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "quic/quic_int.h"

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
  rc = tern__udp_start(&wl->udp, w, l->fds[w->id], &tern__quic_udp_ops, wl);
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
  tern__quic_rand_bytes((uint8_t *)&l->hash_key, sizeof(l->hash_key));
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
