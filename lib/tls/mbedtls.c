/* The mbedTLS engine (2.28): TLS 1.2 over memory callbacks. mbedTLS
 * never sees the socket: it reads ciphertext from a buffer the transport
 * fills and writes records into the filter's wire queue, so one loop
 * turn's output still leaves in one write.
 */
#include <string.h>
#include <time.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/x509_crt.h>

#include "tls/tls.h"

/* Per tern_tls: the random generator and the session ticket keys. */
typedef struct {
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_ssl_ticket_context ticket;
  int fleet; /* the ticket keys are the application's */
} mbed_state;

/* How long a ticket resumes (and, with mbedTLS's own keys, how long each
 * key is used before the next is drawn). */
#define TICKET_LIFETIME 86400

/* A pair, parsed. */
typedef struct {
  mbedtls_x509_crt crt;
  mbedtls_pk_context key;
} mbed_pair;

/* A generation's configuration. */
typedef struct {
  mbedtls_ssl_config conf;
  tern__tls_gen *gen;
} mbed_conf;

typedef struct tls_conn {
  mbedtls_ssl_context ssl;
  tern__tls_gen *gen;
  tern__worker *w;
  tern__tls_in in; /* ciphertext read from the socket */
  tern__outq out;  /* records to write */
  int hs_done;
  int notified; /* close_notify queued */
} tls_conn;

/* TLS 1.2 with forward secrecy and AEAD only. */
static const int suites[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    0};

/* Key exchange groups, fastest first. mbedTLS's default order starts with
 * P-521, whose ECDHE costs several milliseconds a handshake. */
static const mbedtls_ecp_group_id curves[] = {
    MBEDTLS_ECP_DP_CURVE25519, MBEDTLS_ECP_DP_SECP256R1,
    MBEDTLS_ECP_DP_SECP384R1, MBEDTLS_ECP_DP_NONE};

static mbed_conf *conf_of(const tern__tls_gen *g) {
  return g->conf;
}

static int mbed_error(tern_tls *t, int rc, const char *what, const char *path) {
  char msg[160];
  mbedtls_strerror(rc, msg, sizeof(msg));
  return tern__tls_error(t, what, path, msg);
}

/* ---- Per tern_tls -------------------------------------------------- */

static int mbed_tls_init(tern_tls *t, void **out) {
  static const char pers[] = "tern tls";
  mbed_state *st = tern__malloc(t->srv, sizeof(*st));
  int rc;
  if (st == NULL)
    return TERN_ENOMEM;
  mbedtls_entropy_init(&st->entropy);
  mbedtls_ctr_drbg_init(&st->drbg);
  mbedtls_ssl_ticket_init(&st->ticket);
  rc = mbedtls_ctr_drbg_seed(&st->drbg, mbedtls_entropy_func, &st->entropy,
                             (const unsigned char *)pers, sizeof(pers) - 1);
  if (rc == 0)
    rc = mbedtls_ssl_ticket_setup(&st->ticket, mbedtls_ctr_drbg_random,
                                  &st->drbg, MBEDTLS_CIPHER_AES_256_GCM,
                                  TICKET_LIFETIME);
  if (rc != 0) {
    mbed_error(t, rc, "random generator or ticket keys", NULL);
    mbedtls_ssl_ticket_free(&st->ticket);
    mbedtls_ctr_drbg_free(&st->drbg);
    mbedtls_entropy_free(&st->entropy);
    tern__free(t->srv, st);
    return TERN_ETLS;
  }
  *out = st;
  return 0;
}

static void mbed_tls_free(tern_tls *t, void *state) {
  mbed_state *st = state;
  mbedtls_ssl_ticket_free(&st->ticket);
  mbedtls_ctr_drbg_free(&st->drbg);
  mbedtls_entropy_free(&st->entropy);
  tern__free(t->srv, st);
}

/* Fleet ticket keys. mbedTLS 2.28 has no call to set them, but its
 * ticket context is a public struct: two slots, each a 4-byte name that
 * every ticket carries in the clear (so a ticket finds its slot) and an
 * AES-256-GCM context. The application's 64 bytes give the name (bytes
 * 0-3) and the AES key (bytes 32-63); the current key goes in the active
 * slot, the previous one in the other. Tickets still expire after
 * TICKET_LIFETIME (mbedTLS checks each one's age against it), but
 * mbedTLS would also replace the active key with a random one once the
 * key is that old, which would split the fleet: the callbacks below keep
 * the application's key young instead. */
static int mbed_set_ticket_key(tern_tls *t, void *state, const void *key,
                               size_t len, int previous) {
  mbed_state *st = state;
  const unsigned char *k = key;
  mbedtls_ssl_ticket_key *slot;
  int rc;

  if (len != TERN_TLS_TICKET_KEY_SIZE)
    return TERN_EINVAL;
  slot = &st->ticket.keys[previous ? 1 - st->ticket.active : st->ticket.active];
  rc = mbedtls_cipher_setkey(&slot->ctx, k + 32, 256, MBEDTLS_ENCRYPT);
  if (rc != 0)
    return mbed_error(t, rc, "ticket key", NULL);
  memcpy(slot->name, k, sizeof(slot->name));
  slot->generation_time = (uint32_t)time(NULL);
  st->fleet = 1;
  return 0;
}

static mbed_state *state_of_ticket(void *p) {
  return (mbed_state *)(void *)((char *)p - offsetof(mbed_state, ticket));
}

/* Before mbedTLS looks at its keys (it rotates inside write and parse,
 * under the context's lock): the application's key is never a lifetime
 * old, so it stays the active one. */
static void keep_fleet_key(mbed_state *st) {
  if (!st->fleet)
    return;
#if defined(MBEDTLS_THREADING_C)
  if (mbedtls_mutex_lock(&st->ticket.mutex) != 0)
    return;
#endif
  st->ticket.keys[st->ticket.active].generation_time = (uint32_t)time(NULL);
#if defined(MBEDTLS_THREADING_C)
  mbedtls_mutex_unlock(&st->ticket.mutex);
#endif
}

static int ticket_write(void *p, const mbedtls_ssl_session *s,
                        unsigned char *start, const unsigned char *end,
                        size_t *tlen, uint32_t *lifetime) {
  keep_fleet_key(state_of_ticket(p));
  return mbedtls_ssl_ticket_write(p, s, start, end, tlen, lifetime);
}

static int ticket_parse(void *p, mbedtls_ssl_session *s, unsigned char *buf,
                        size_t len) {
  keep_fleet_key(state_of_ticket(p));
  return mbedtls_ssl_ticket_parse(p, s, buf, len);
}

/* ---- Pairs --------------------------------------------------------- */

static void mbed_pair_free(tern_tls *t, tern__tls_pair *p) {
  mbed_pair *m = p->eng[TERN__TLS_MBEDTLS];
  mbedtls_x509_crt_free(&m->crt);
  mbedtls_pk_free(&m->key);
  tern__free(t->srv, m);
  p->eng[TERN__TLS_MBEDTLS] = NULL;
}

/* The names SNI matches: the DNS names among the subject alternative
 * names, and the subject's CN. */
static int take_names(tern_tls *t, tern__tls_pair *p,
                      const mbedtls_x509_crt *crt) {
  const mbedtls_x509_sequence *s = &crt->subject_alt_names;
  const mbedtls_x509_name *n;
  int rc = 0;
  for (; rc == 0 && s != NULL && s->buf.p != NULL; s = s->next)
    if (s->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 2))
      rc = tern__tls_add_name(t, p, (const char *)s->buf.p, s->buf.len);
  for (n = &crt->subject; rc == 0 && n != NULL; n = n->next)
    if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0)
      rc = tern__tls_add_name(t, p, (const char *)n->val.p, n->val.len);
  return rc;
}

static int mbed_pair_load(tern_tls *t, tern__tls_pair *p) {
  mbed_pair *m = tern__malloc(t->srv, sizeof(*m));
  int rc;

  if (m == NULL)
    return TERN_ENOMEM;
  mbedtls_x509_crt_init(&m->crt);
  mbedtls_pk_init(&m->key);
  p->eng[TERN__TLS_MBEDTLS] = m;
  rc = mbedtls_x509_crt_parse(&m->crt, (const unsigned char *)p->cert,
                              p->cert_len);
  if (rc != 0)
    return mbed_error(t, rc, "certificate", p->cert_path);
  rc = mbedtls_pk_parse_key(&m->key, (const unsigned char *)p->key, p->key_len,
                            NULL, 0);
  if (rc != 0)
    return mbed_error(t, rc, "private key", p->key_path);
  rc = mbedtls_pk_check_pair(&m->crt.pk, &m->key);
  if (rc != 0)
    return mbed_error(t, rc, "certificate and key do not match", p->key_path);
  return p->nnames == 0 ? take_names(t, p, &m->crt) : 0;
}

/* ---- Generations --------------------------------------------------- */

/* SNI: the first certificate naming the host; none named, the default
 * list (mbedTLS then picks by key type). */
static int on_sni(void *arg, mbedtls_ssl_context *ssl,
                  const unsigned char *host, size_t len) {
  const tern__tls_gen *g = arg;
  int i = tern__tls_pick(g, (const char *)host, len);
  mbed_pair *m;
  if (i < 0)
    return 0;
  m = g->pairs[i].eng[TERN__TLS_MBEDTLS];
  return mbedtls_ssl_set_hs_own_cert(ssl, &m->crt, &m->key);
}

static void mbed_gen_free(tern__tls_gen *g) {
  mbed_conf *c = g->conf;
  mbedtls_ssl_config_free(&c->conf);
  tern__free(g->tls->srv, c);
  g->conf = NULL;
}

static int mbed_gen_build(tern_tls *t, tern__tls_gen *g) {
  mbed_state *st = t->state[TERN__TLS_MBEDTLS];
  mbed_conf *c = tern__malloc(t->srv, sizeof(*c));
  size_t i;
  int rc;

  if (c == NULL)
    return TERN_ENOMEM;
  c->gen = g;
  g->conf = c;
  mbedtls_ssl_config_init(&c->conf);
  if (g->client_mode != TERN_TLS_CLIENT_NONE) {
    tern__log(t->srv, TERN_LOG_ERROR,
              "tls: client certificates are verified by the GnuTLS engine "
              "only, not by mbedTLS");
    return TERN_ENOTSUP;
  }
  rc = mbedtls_ssl_config_defaults(&c->conf, MBEDTLS_SSL_IS_SERVER,
                                   MBEDTLS_SSL_TRANSPORT_STREAM,
                                   MBEDTLS_SSL_PRESET_DEFAULT);
  if (rc != 0)
    return mbed_error(t, rc, "configuration", NULL);
  mbedtls_ssl_conf_rng(&c->conf, mbedtls_ctr_drbg_random, &st->drbg);
  mbedtls_ssl_conf_min_version(&c->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                               MBEDTLS_SSL_MINOR_VERSION_3);
  mbedtls_ssl_conf_ciphersuites(&c->conf, suites);
  mbedtls_ssl_conf_curves(&c->conf, curves);
  mbedtls_ssl_conf_alpn_protocols(&c->conf, (const char **)tern__tls_alpn);
  mbedtls_ssl_conf_session_tickets_cb(&c->conf, ticket_write, ticket_parse,
                                      &st->ticket);
  mbedtls_ssl_conf_sni(&c->conf, on_sni, g);
  for (i = 0; i < g->npairs; i++) {
    mbed_pair *m = g->pairs[i].eng[TERN__TLS_MBEDTLS];
    rc = mbedtls_ssl_conf_own_cert(&c->conf, &m->crt, &m->key);
    if (rc != 0)
      return mbed_error(t, rc, "certificate list", NULL);
  }
  return 0;
}

/* ---- The filter ---------------------------------------------------- */

static int bio_send(void *ctx, const unsigned char *buf, size_t len) {
  tls_conn *t = ctx;
  if (tern__outq_copy(t->w, &t->out, buf, len) != 0)
    return MBEDTLS_ERR_SSL_ALLOC_FAILED;
  return (int)len;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len) {
  tls_conn *t = ctx;
  size_t n = tern__tls_in_take(&t->in, buf, len);
  return n > 0 ? (int)n : MBEDTLS_ERR_SSL_WANT_READ;
}

static int tls_attach(void **st, tern__worker *w, void *cfg_arg) {
  tern_tls *tls = cfg_arg;
  tls_conn *t;
  tern__tls_gen *g;

  /* From the worker's pool where it fits: mbedTLS's own buffers are
   * allocated by mbedTLS. */
  t = tern__small_malloc(w, sizeof(*t));
  if (t == NULL)
    return TERN_ENOMEM;
  memset(t, 0, sizeof(*t));
  t->w = w;
  tern__outq_init(&t->out);
  g = t->gen = tern__tls_acquire(tls);
  mbedtls_ssl_init(&t->ssl);
  if (g == NULL || mbedtls_ssl_setup(&t->ssl, &conf_of(g)->conf) != 0) {
    mbedtls_ssl_free(&t->ssl);
    tern__tls_release(g);
    tern__small_free(w, t);
    return TERN_ENOMEM;
  }
  mbedtls_ssl_set_bio(&t->ssl, t, bio_send, bio_recv, NULL);
  *st = t;
  return 0;
}

static void tls_detach(void *st, tern__worker *w) {
  tls_conn *t = st;
  if (t == NULL)
    return;
  tern__outq_free(w, &t->out);
  tern__rbuf_unref(w, t->in.buf);
  mbedtls_ssl_free(&t->ssl);
  tern__tls_release(t->gen);
  tern__small_free(w, t);
}

static void tls_read_buf(void *st, tern__worker *w, uv_buf_t *buf) {
  tern__tls_in_room(&((tls_conn *)st)->in, w, buf);
}

/* The protocol the client and we agreed on (NULL: none offered); the
 * transport picks the adapter by it. */
static const char *tls_alpn(const void *st) {
  return mbedtls_ssl_get_alpn_protocol(&((const tls_conn *)st)->ssl);
}

static int tls_decrypt(tls_conn *t, char *dst, size_t room, size_t *got);

/* The handshake records it produces wait in the wire queue, which the
 * transport writes after input. */
static int tls_input(void *st, tern__worker *w, char *dst, size_t room,
                     size_t *got) {
  tls_conn *t = st;
  int rc;

  *got = 0;
  if (!t->hs_done) {
    if (tern__tls_in_refused(&t->in)) {
      tern__log(w->srv, TERN_LOG_DEBUG, "tls handshake: not a TLS record");
      tern__tls_handshake_done(w, -1);
      return TERN_ETLS;
    }
    rc = mbedtls_ssl_handshake(&t->ssl);
    if (rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE)
      return 0;
    if (rc != 0) {
      char msg[120];
      mbedtls_strerror(rc, msg, sizeof(msg));
      tern__log(w->srv, TERN_LOG_DEBUG, "tls handshake: %s", msg);
      tern__tls_handshake_done(w, -1);
      return TERN_ETLS;
    }
    t->hs_done = 1;
    /* mbedTLS 2.28 does not say whether a session was resumed. */
    tern__tls_handshake_done(w, 0);
    rc = tls_decrypt(t, dst, room, got);
    return rc == 0 ? TERN__F_READY : rc;
  }
  return tls_decrypt(t, dst, room, got);
}

/* Decrypt what is buffered into dst, as far as it has room. */
static int tls_decrypt(tls_conn *t, char *dst, size_t room, size_t *got) {
  int rc;

  for (;;) {
    if (dst == NULL || *got == room)
      break; /* the adapter must consume first */
    rc = mbedtls_ssl_read(&t->ssl, (unsigned char *)dst + *got, room - *got);
    if (rc > 0) {
      *got += (size_t)rc;
      continue;
    }
    if (rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE)
      break;
    if (rc == 0 || rc == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
      return TERN_ECLOSED;
    return TERN_ETLS;
  }
  if (mbedtls_ssl_get_bytes_avail(&t->ssl) == 0)
    tern__tls_in_idle(&t->in, t->w);
  return 0;
}

static tern__outq *tls_output(void *st, tern__worker *w, tern__outq *q,
                              int *err) {
  tls_conn *t = st;

  *err = 0;
  while (t->hs_done && q->count > 0 && t->out.bytes < TERN__TLS_OUT_HIGH) {
    const char *src;
    size_t len;
    int rc = tern__tls_next_record(w, q, &src, &len);

    if (rc == 1)
      continue;
    if (rc != 0) {
      *err = rc;
      break;
    }
    rc = mbedtls_ssl_write(&t->ssl, (const unsigned char *)src, len);
    if (rc < 0) {
      *err = rc == MBEDTLS_ERR_SSL_ALLOC_FAILED ? TERN_ENOMEM : TERN_ETLS;
      break;
    }
    /* The plaintext is in records now: for the writer it is written. */
    tern__outq_consume(w, q, (size_t)rc);
  }
  return &t->out;
}

static tern__outq *tls_wire(void *st) {
  return &((tls_conn *)st)->out;
}

static size_t tls_buffered(const void *st) {
  return ((const tls_conn *)st)->out.bytes;
}

static int tls_has_input(void *st) {
  tls_conn *t = st;
  return t->hs_done && (tern__tls_in_waiting(&t->in) ||
                        mbedtls_ssl_get_bytes_avail(&t->ssl) > 0);
}

static void tls_received(void *st, size_t n) {
  if (st != NULL)
    tern__tls_in_received(&((tls_conn *)st)->in, n);
}

static int tls_handshaking(const void *st) {
  return !((const tls_conn *)st)->hs_done;
}

/* mbedTLS 2.28 speaks TLS 1.2 only (tern's build of it). */
static int mtls_version(const void *st) {
  return ((const tls_conn *)st)->hs_done ? TERN_TLS_1_2 : 0;
}

static const char *mtls_cipher(const void *st) {
  const tls_conn *t = st;
  return t->hs_done ? mbedtls_ssl_get_ciphersuite(&t->ssl) : NULL;
}

static int tls_shutdown(void *st) {
  tls_conn *t = st;
  if (t == NULL || !t->hs_done || t->notified)
    return 0;
  t->notified = 1;
  /* The alert goes into the wire queue through bio_send; a failure to
   * queue it leaves a close without it, as before. */
  mbedtls_ssl_close_notify(&t->ssl);
  return t->out.count > 0;
}

const tern__filter tern__tls_mbedtls_filter = {
    .name = "tls-mbedtls",
    .attach = tls_attach,
    .detach = tls_detach,
    .read_buf = tls_read_buf,
    .received = tls_received,
    .input = tls_input,
    .has_input = tls_has_input,
    .output = tls_output,
    .wire = tls_wire,
    .buffered = tls_buffered,
    .handshaking = tls_handshaking,
    .shutdown = tls_shutdown,
    .alpn = tls_alpn,
    .tls_version = mtls_version,
    .cipher = mtls_cipher,
};

const tern__tls_engine tern__tls_mbedtls = {
    .name = "mbedtls",
    .id = TERN__TLS_MBEDTLS,
    .max_version = TERN_TLS_1_2,
    .tls_init = mbed_tls_init,
    .tls_free = mbed_tls_free,
    .pair_load = mbed_pair_load,
    .pair_free = mbed_pair_free,
    .gen_build = mbed_gen_build,
    .gen_free = mbed_gen_free,
    .filter = &tern__tls_mbedtls_filter,
    .set_ticket_key = mbed_set_ticket_key,
};
