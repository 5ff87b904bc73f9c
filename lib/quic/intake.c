/* Datagrams in, for QUIC listeners (lib/quic/quic_int.h has the
 * overview): each one from the socket's callbacks to the connection its
 * DCID names, or to a stateless answer, a forward to the owning worker
 * or a new connection.
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
 */
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include <string.h>

#include "quic/quic_int.h"

/* ---- Small things ---------------------------------------------------- */

static void path_of(ngtcp2_path *np, const tern__udp_path *p) {
  np->local.addr = (ngtcp2_sockaddr *)&p->local;
  np->local.addrlen = p->local_len;
  np->remote.addr = (ngtcp2_sockaddr *)&p->remote;
  np->remote.addrlen = p->remote_len;
  np->user_data = NULL;
}

static void send_raw(quic_wl *wl, const tern__udp_path *path, const uint8_t *p,
                     size_t n) {
  /* Stateless answers are not worth a queue: a full socket drops them,
   * and the client's retransmission asks again. */
  (void)tern__udp_send(&wl->udp, path, 0, p, n, n);
}

/* Is a long-header packet an Initial? Its type bits differ by version. */
static int is_initial(const uint8_t *p, uint32_t version) {
  unsigned type = (p[0] & 0x30u) >> 4;
  return version == NGTCP2_PROTO_VER_V2_DRAFT ? type == 1 : type == 0;
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
    if (!tern__quic_path_eq(path, &q->path))
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
  rv = ngtcp2_conn_read_pkt(q->ng, &np, &pi, p, n, tern__quic_now_ns());
  q->flags &= ~(unsigned)Q_IN_NG;
  if (rv != 0) {
    tern__quic_ng_failed(q, rv);
    tern__quic_after_ng(q);
    return;
  }
  tern__quic_after_ng(q);
  if (!(q->head.flags & TERN__C_CLOSING))
    tern__conn_reprocess(&q->head); /* the adapter, then the write loop */
}

static void send_version_negotiation(quic_wl *wl, const ngtcp2_version_cid *vc,
                                     const tern__udp_path *path) {
  uint8_t buf[256], r;
  uint32_t sv[2];
  ngtcp2_ssize n;
  tern__quic_rand_bytes(&r, 1);
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
          token, tern__quic_reset_key(wl->l, vc->dcid, vc->dcidlen),
          QUIC_SECRET, &cid) != 0)
    return;
  tern__quic_rand_bytes(rnd, randlen);
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

  tern__quic_new_cid(wl, &scid);
  tl = ngtcp2_crypto_generate_retry_token(
      token, wl->l->secret, QUIC_SECRET, hd->version,
      (const ngtcp2_sockaddr *)&path->remote, path->remote_len, &scid,
      &hd->dcid, tern__quic_wall_ns());
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
            path->remote_len, &hd->dcid, QUIC_RETRY_TIMEOUT,
            tern__quic_wall_ns()) == 0)
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
            QUIC_TOKEN_TIMEOUT, tern__quic_wall_ns()) == 0)
      return 0;
  return -1;
}

/* A connection made for a first Initial that cannot go on: its
 * admission given back, then the block. */
static void discard_new(tern__conn *c) {
  if (c->admitted)
    tern__admit_release(c->w->srv->admit, &c->peer);
  tern__conn_discard(c);
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
  c->tls_version = TERN_TLS_1_3; /* QUIC is TLS 1.3 (RFC 9001) */
  tern__addr_set(&c->peer, (const struct sockaddr *)&path->remote);
  tern__addr_set(&c->local, (const struct sockaddr *)&path->local);
  if (!tern__conn_admit(c)) { /* its address is over its limit */
    tern__conn_discard(c);
    send_refusal(wl, &hd, path, NGTCP2_CONNECTION_REFUSED);
    return;
  }
  q = tern__quic_of(c);
  memset((char *)q + sizeof(tern__conn), 0, sizeof(*q) - sizeof(tern__conn));
  c->proto = tern__proto_find(tern__quic_h3->alpn, strlen(tern__quic_h3->alpn));
  if (c->proto == NULL) {
    discard_new(c);
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
  q->ref.get_conn = tern__quic_get_conn;
  q->ref.user_data = q;
  ngtcp2_connection_close_error_default(&q->ccerr);

  ngtcp2_settings_default(&settings);
  settings.initial_ts = tern__quic_now_ns();
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
  tern__quic_new_cid(wl, &scid);
  /* Derived, not random: a restarted server (same secret) can still
   * reset a client of the old one. */
  if (ngtcp2_crypto_generate_stateless_reset_token(
          params.stateless_reset_token, l->secret, QUIC_SECRET, &scid) == 0)
    params.stateless_reset_token_present = 1;

  path_of(&np, path);
  rc = ngtcp2_conn_server_new(&q->ng, &hd.scid, &scid, &np, hd.version,
                              &tern__quic_callbacks, &settings, &params,
                              &q->mem, q);
  if (rc != 0) {
    q->ng = NULL;
    discard_new(c);
    return;
  }
  rc = tern__tls_engines[TERN__TLS_GNUTLS]->quic_session(
      l->tls, (void **)&q->tls, &q->gen, q->ops->alpn, wl->ar);
  if (rc == 0 && ngtcp2_crypto_gnutls_configure_server_session(q->tls) != 0)
    rc = TERN_ETLS;
  if (rc == 0 && (tern__quic_cid_add(q, scid.data, scid.datalen) != 0 ||
                  tern__quic_cid_add(q, hd.dcid.data, hd.dcid.datalen) != 0))
    rc = TERN_ENOMEM;
  if (rc != 0) {
    tern__quic_cid_remove_all(q);
    if (q->tls != NULL)
      gnutls_deinit(q->tls);
    if (q->gen != NULL)
      tern__tls_release(q->gen);
    ngtcp2_conn_del(q->ng);
    discard_new(c);
    return;
  }
  gnutls_session_set_ptr(q->tls, &q->ref);
  ngtcp2_conn_set_tls_native_handle(q->ng, q->tls);
  uv_timer_init(w->loop, &q->timer);
  q->timer.data = q;
  wl->nconns++;
  q->flags |= Q_HANDSHAKE;
  wl->handshaking++;
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

  /* ngtcp2 0.12 also speaks the drafts 29 to 32, which tern's Version
   * Negotiation does not list: a long header of any version but the two
   * it lists is treated as unknown, and no connection (nor Retry) of
   * another version starts. */
  if (rv == 0 && is_long && vc.version != NGTCP2_PROTO_VER_V1 &&
      vc.version != NGTCP2_PROTO_VER_V2_DRAFT)
    rv = NGTCP2_ERR_VERSION_NEGOTIATION;
  if (rv == NGTCP2_ERR_VERSION_NEGOTIATION) {
    /* Only for what could be a client's first packet (RFC 9000 6.1). */
    if (n >= 1200)
      send_version_negotiation(wl, &vc, path);
    return;
  }
  if (rv != 0)
    return;
  q = tern__quic_cid_find(wl, vc.dcid, vc.dcidlen);
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

const tern__udp_ops tern__quic_udp_ops = {
    .datagram = on_datagram,
    .done = on_batch_done,
    .writable = tern__quic_on_writable,
};
