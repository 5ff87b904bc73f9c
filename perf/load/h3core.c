/* h3core: see h3core.h. */
#include "h3core.h"

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void h3core_log(void *user, const char *fmt, ...) {
  va_list ap;
  (void)user;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int h3core_tls(gnutls_session_t *tls, gnutls_certificate_credentials_t cred,
               const char *sni, size_t snilen, ngtcp2_crypto_conn_ref *ref) {
  static const char prio[] = "%DISABLE_TLS13_COMPAT_MODE:NORMAL:-VERS-ALL:"
                             "+VERS-TLS1.3";
  gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
  if (gnutls_init(tls, GNUTLS_CLIENT | GNUTLS_ENABLE_EARLY_DATA |
                           GNUTLS_NO_END_OF_EARLY_DATA) != 0)
    return -1;
  if (gnutls_priority_set_direct(*tls, prio, NULL) != 0 ||
      ngtcp2_crypto_gnutls_configure_client_session(*tls) != 0 ||
      gnutls_credentials_set(*tls, GNUTLS_CRD_CERTIFICATE, cred) != 0 ||
      gnutls_alpn_set_protocols(*tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) != 0 ||
      gnutls_server_name_set(*tls, GNUTLS_NAME_DNS, sni, snilen) != 0) {
    gnutls_deinit(*tls);
    *tls = NULL;
    return -1;
  }
  gnutls_session_set_ptr(*tls, ref);
  return 0;
}

static void rand_cb(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx) {
  (void)ctx;
  (void)gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

static int new_cid_cb(ngtcp2_conn *q, ngtcp2_cid *cid, uint8_t *token,
                      size_t cidlen, void *user) {
  (void)q;
  (void)user;
  if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, cidlen) != 0 ||
      gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN))
    return NGTCP2_ERR_CALLBACK_FAILURE;
  cid->datalen = cidlen;
  return 0;
}

void h3core_quic_callbacks(ngtcp2_callbacks *cb) {
  memset(cb, 0, sizeof(*cb));
  cb->client_initial = ngtcp2_crypto_client_initial_cb;
  cb->recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb->encrypt = ngtcp2_crypto_encrypt_cb;
  cb->decrypt = ngtcp2_crypto_decrypt_cb;
  cb->hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb->recv_retry = ngtcp2_crypto_recv_retry_cb;
  cb->update_key = ngtcp2_crypto_update_key_cb;
  cb->delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb->delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb->get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb->version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb->rand = rand_cb;
  cb->get_new_connection_id = new_cid_cb;
}

int h3core_quic_conn(ngtcp2_conn **out, const struct sockaddr *local,
                     socklen_t locallen, const struct sockaddr *remote,
                     socklen_t remotelen, const ngtcp2_callbacks *cb,
                     const ngtcp2_settings *st,
                     const ngtcp2_transport_params *tp, void *user,
                     gnutls_session_t tls) {
  ngtcp2_cid dcid, scid;
  ngtcp2_path path;

  dcid.datalen = 18;
  scid.datalen = 17;
  if (gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, dcid.datalen) != 0 ||
      gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen) != 0)
    return -1;
  path.local.addr = (ngtcp2_sockaddr *)(uintptr_t)local;
  path.local.addrlen = locallen;
  path.remote.addr = (ngtcp2_sockaddr *)(uintptr_t)remote;
  path.remote.addrlen = remotelen;
  path.user_data = NULL;
  if (ngtcp2_conn_client_new(out, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1, cb,
                             st, tp, NULL, user) != 0)
    return -1;
  ngtcp2_conn_set_tls_native_handle(*out, tls);
  return 0;
}

int h3core_h3_conn(nghttp3_conn **out, const nghttp3_callbacks *cb,
                   ngtcp2_conn *q, void *user) {
  nghttp3_settings st;
  int64_t ctrl, qenc, qdec;

  nghttp3_settings_default(&st);
  st.qpack_max_dtable_capacity = 4096;
  st.qpack_blocked_streams = 100;
  if (nghttp3_conn_client_new(out, cb, &st, NULL, user) != 0)
    return -1;
  if (ngtcp2_conn_open_uni_stream(q, &ctrl, NULL) != 0 ||
      nghttp3_conn_bind_control_stream(*out, ctrl) != 0 ||
      ngtcp2_conn_open_uni_stream(q, &qenc, NULL) != 0 ||
      ngtcp2_conn_open_uni_stream(q, &qdec, NULL) != 0 ||
      nghttp3_conn_bind_qpack_streams(*out, qenc, qdec) != 0)
    return -1;
  return 0;
}
