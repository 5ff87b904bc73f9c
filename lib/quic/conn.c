/* A QUIC connection's life on ngtcp2 (lib/quic/quic_int.h has the
 * overview): sending and its blocked list, closing and draining,
 * ngtcp2's callbacks into the application's glue, the write loop, the
 * timer, the transport table the core drives, and the glue calls of
 * quic.h. Packets come in through intake.c.
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
 */
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <gnutls/gnutls.h>
#include <string.h>

#include "quic/quic_int.h"

_Static_assert(sizeof(tern__qvec) == sizeof(ngtcp2_vec) &&
                   offsetof(tern__qvec, base) == offsetof(ngtcp2_vec, base) &&
                   offsetof(tern__qvec, len) == offsetof(ngtcp2_vec, len),
               "tern__qvec must have ngtcp2_vec's layout");

static void write_loop(tern__quic *q);
static void arm_timer(tern__quic *q);
static void quic_output(tern__conn *c);
static void quic_flush(tern__conn *c);

/* ---- Small things ---------------------------------------------------- */

static void on_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  (void)ctx;
  tern__quic_rand_bytes(dest, len);
}

static void path_from(tern__udp_path *p, const ngtcp2_path *np) {
  memset(p, 0, sizeof(*p));
  memcpy(&p->local, np->local.addr, np->local.addrlen);
  p->local_len = np->local.addrlen;
  memcpy(&p->remote, np->remote.addr, np->remote.addrlen);
  p->remote_len = np->remote.addrlen;
}

/* ---- Sending ----------------------------------------------------------- */

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

void tern__quic_on_writable(tern__udp *u) {
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
  tern__quic_cid_remove_all(q);
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
                                         &q->ccerr, tern__quic_now_ns());
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
void tern__quic_ng_failed(tern__quic *q, int rv) {
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
void tern__quic_after_ng(tern__quic *q) {
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
  (void)sud;
  if (!(q->flags & Q_STARTED))
    return NGTCP2_ERR_CALLBACK_FAILURE;
  if (flags & NGTCP2_STREAM_DATA_FLAG_EARLY)
    q->early = 1;
  return app_rc(q, q->ops->recv(q, id, offset, data, len,
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
    tern__quic_new_cid(q->wl, cid);
    rc = tern__quic_cid_add(q, cid->data, cid->datalen);
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
  tern__quic_cid_remove(q, cid->data, cid->datalen);
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
  tern__quic_head(q)->tls_cipher = gnutls_ciphersuite_get(q->tls);
  if (tern__quic_head(q)->client_id == NULL)
    tern__quic_head(q)->client_id =
        tern__tls_gnutls_identity(q->tls, q->wl->w->srv);
  tern__tls_handshake_done(q->wl->w, gnutls_session_is_resumed(q->tls) != 0);
  (void)gnutls_session_ticket_send(q->tls, 1, 0);
  n = ngtcp2_crypto_generate_regular_token(token, q->wl->l->secret, QUIC_SECRET,
                                           p->remote.addr, p->remote.addrlen,
                                           tern__quic_wall_ns());
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

const ngtcp2_callbacks tern__quic_callbacks = {
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

ngtcp2_conn *tern__quic_get_conn(ngtcp2_crypto_conn_ref *ref) {
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
  tern__quic_after_ng(q);
}

static void write_loop(tern__quic *q) {
  quic_wl *wl = q->wl;
  ngtcp2_tstamp ts = tern__quic_now_ns();
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
        tern__quic_ng_failed(q, (int)n);
        tern__quic_after_ng(q);
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
    if (off > 0 && (!tern__quic_path_eq(&p, &bpath) || pi.ecn != becn ||
                    (size_t)n > seg)) {
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
  tern__quic_after_ng(q);
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
  if (ngtcp2_conn_get_expiry(q->ng) <= tern__quic_now_ns()) {
    q->flags |= Q_IN_NG;
    rv = ngtcp2_conn_handle_expiry(q->ng, tern__quic_now_ns());
    q->flags &= ~(unsigned)Q_IN_NG;
    if (rv != 0) {
      tern__quic_ng_failed(q, rv);
      tern__quic_after_ng(q);
      return;
    }
    tern__quic_after_ng(q);
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
    ngtcp2_tstamp exp = ngtcp2_conn_get_expiry(q->ng), t = tern__quic_now_ns();
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
