/* The GnuTLS engine (3.7): TLS 1.3 and 1.2 over memory. GnuTLS never
 * sees the socket: its pull function reads the ciphertext the transport
 * put in the filter's buffer and its push function appends records to
 * the filter's wire queue, so one loop turn's output still leaves in one
 * write. SNI picks the pair by the store's names (tern__tls_pick) in the
 * post-client-hello hook, as the mbedTLS engine does.
 *
 * GnuTLS allocates with its own allocator (gnutls_global_set_mem_functions
 * is a no-op since 3.3), so its memory is not in tern's counts: per
 * connection its session state (a few KiB, and its record buffers while a
 * record is in flight), per pair the parsed certificates and key.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include <gnutls/abstract.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "tls/hello.h"
#include "tls/tls.h"

/* Per tern_tls: the session ticket key (GnuTLS rotates the keys it
 * derives from it by itself). */
typedef struct {
  gnutls_datum_t ticket_key;
  /* tern_tls_set_previous_ticket_key: the key being rotated out (its
   * data allocated by the first call), and whether it is set. */
  gnutls_datum_t prev_key;
  int has_prev;
} gtls_state;

/* A pair, parsed: its own credentials, chosen per session by SNI. */
typedef struct {
  gnutls_certificate_credentials_t cred;
} gtls_pair;

/* A generation: the priorities of its minimum version, and credentials
 * holding every pair, for clients that name no host or an unknown one
 * (GnuTLS then picks a pair by key type). */
typedef struct {
  gnutls_priority_t prio;
  gnutls_priority_t quic_prio; /* TLS 1.3 only, no compatibility mode */
  gnutls_certificate_credentials_t all;
  gnutls_x509_trust_list_t trust; /* the client CAs, or NULL */
  int client_mode;                /* TERN_TLS_CLIENT_* */
} gtls_conf;

typedef struct {
  gnutls_session_t s;
  tern__tls_gen *gen;
  tern__worker *w;
  tern__tls_in in; /* ciphertext read from the socket */
  tern__outq out;  /* records to write */
  int hs_done;
  int notified;  /* close_notify queued */
  int push_fail; /* the wire queue refused bytes (no memory) */
  char alpn[32]; /* the protocol agreed on, NUL-terminated */
} gtls_conn;

/* Forward secrecy and AEAD only, X25519 first; the server's order. */
static const char prio_12[] =
    "NONE:+VERS-TLS1.3:+VERS-TLS1.2:+ECDHE-ECDSA:+ECDHE-RSA:+AES-128-GCM:"
    "+CHACHA20-POLY1305:+AES-256-GCM:+AEAD:+SIGN-ALL:+GROUP-X25519:"
    "+GROUP-SECP256R1:+GROUP-SECP384R1:+COMP-NULL:+CTYPE-X509:"
    "%SERVER_PRECEDENCE";
static const char prio_13[] =
    "NONE:+VERS-TLS1.3:+AES-128-GCM:+CHACHA20-POLY1305:+AES-256-GCM:+AEAD:"
    "+SIGN-ALL:+GROUP-X25519:+GROUP-SECP256R1:+GROUP-SECP384R1:+COMP-NULL:"
    "+CTYPE-X509:%SERVER_PRECEDENCE";

/* QUIC (RFC 9001): TLS 1.3 only, and without the middlebox compatibility
 * mode (no ChangeCipherSpec, no fake session id), which QUIC forbids. */
static const char prio_quic[] =
    "NONE:+VERS-TLS1.3:+AES-128-GCM:+CHACHA20-POLY1305:+AES-256-GCM:"
    "+AES-128-CCM:+AEAD:+SIGN-ALL:+GROUP-X25519:+GROUP-SECP256R1:"
    "+GROUP-SECP384R1:+COMP-NULL:+CTYPE-X509:%SERVER_PRECEDENCE:"
    "%DISABLE_TLS13_COMPAT_MODE";

static int gtls_error(tern_tls *t, int rc, const char *what, const char *path) {
  return tern__tls_error(t, what, path, gnutls_strerror(rc));
}

/* ---- Per tern_tls -------------------------------------------------- */

static int gtls_tls_init(tern_tls *t, void **out) {
  gtls_state *st = tern__malloc(t->srv, sizeof(*st));
  int rc;
  if (st == NULL)
    return TERN_ENOMEM;
  memset(st, 0, sizeof(*st));
  rc = gnutls_session_ticket_key_generate(&st->ticket_key);
  if (rc < 0) {
    tern__free(t->srv, st);
    return gtls_error(t, rc, "session ticket key", NULL);
  }
  *out = st;
  return 0;
}

/* GnuTLS derives the keys that encrypt tickets from this master key and
 * the time, rotating them by itself (each ticket key is used for a
 * period and still accepted for the next): instances given the same
 * master key, with clocks that agree, derive the same keys. */
static int gtls_set_ticket_key(tern_tls *t, void *state, const void *key,
                               size_t len, int previous) {
  gtls_state *st = state;
  (void)t;
  if (st->ticket_key.size != len)
    return TERN_EINVAL;
  if (!previous) {
    memcpy(st->ticket_key.data, key, len);
    return 0;
  }
  if (st->prev_key.data == NULL) {
    st->prev_key.data = gnutls_malloc(len);
    if (st->prev_key.data == NULL)
      return TERN_ENOMEM;
    st->prev_key.size = (unsigned)len;
  }
  memcpy(st->prev_key.data, key, len);
  st->has_prev = 1;
  return 0;
}

static void gtls_tls_free(tern_tls *t, void *state) {
  gtls_state *st = state;
  gnutls_memset(st->ticket_key.data, 0, st->ticket_key.size);
  gnutls_free(st->ticket_key.data);
  if (st->prev_key.data != NULL) {
    gnutls_memset(st->prev_key.data, 0, st->prev_key.size);
    gnutls_free(st->prev_key.data);
  }
  tern__free(t->srv, st);
}

/* Rotation. GnuTLS 3.7.9 takes one master key per session and derives
 * the key that protects tickets from it and the time (lib/stek.c): the
 * period is T = now / (3 x the cache expiration, 6 h by default), the key
 * SHA3-512(T as 8 big-endian bytes || master key), and its first 16 bytes
 * are the key name that starts every ticket it makes; a ticket of the
 * current period or the previous one is accepted. The master key may be
 * set again until the session first uses it, which is after the
 * ClientHello arrives. So a hook before GnuTLS reads the ClientHello
 * looks at the ticket it presents: when its name is one the previous
 * master key gives for this period or the last, the session takes the
 * previous master key instead (and so issues its next ticket under it:
 * a client that keeps resuming keeps the old key alive until its ticket
 * expires or the previous key is dropped). */
static int prev_key_made(const gtls_state *st, const uint8_t *ticket,
                         size_t len) {
  uint8_t in[8 + TERN_TLS_TICKET_KEY_SIZE], out[64];
  uint64_t t = (uint64_t)time(NULL) /
               ((uint64_t)gnutls_db_get_default_cache_expiration() * 3);
  int k, i;
  if (len < 16 || st->prev_key.size != TERN_TLS_TICKET_KEY_SIZE)
    return 0;
  memcpy(in + 8, st->prev_key.data, TERN_TLS_TICKET_KEY_SIZE);
  for (k = 0; k < 2 && t > 0; k++, t--) {
    for (i = 0; i < 8; i++)
      in[i] = (uint8_t)(t >> (56 - 8 * i));
    if (gnutls_hash_fast(GNUTLS_DIG_SHA3_512, in, sizeof(in), out) == 0 &&
        memcmp(out, ticket, 16) == 0) {
      gnutls_memset(in, 0, sizeof(in));
      gnutls_memset(out, 0, sizeof(out));
      return 1;
    }
  }
  gnutls_memset(in, 0, sizeof(in));
  gnutls_memset(out, 0, sizeof(out));
  return 0;
}

/* Both kinds of session carry their generation in the database pointer
 * (see the QUIC part), which the hook reads. */
static int on_hello_hook(gnutls_session_t s, unsigned htype, unsigned when,
                         unsigned incoming, const gnutls_datum_t *msg) {
  tern__tls_gen *g = gnutls_db_get_ptr(s);
  const gtls_state *st;
  const uint8_t *ticket;
  size_t len;
  if (htype != GNUTLS_HANDSHAKE_CLIENT_HELLO || when != GNUTLS_HOOK_PRE ||
      !incoming || g == NULL || msg == NULL)
    return 0;
  st = g->tls->state[TERN__TLS_GNUTLS];
  if (st->has_prev &&
      tern__tls_hello_ticket(msg->data, msg->size, &ticket, &len) == 0 &&
      prev_key_made(st, ticket, len))
    /* Refused once the session has used its key (a second ClientHello
     * after a HelloRetryRequest): it then keeps the current one. */
    (void)gnutls_session_ticket_enable_server(s, &st->prev_key);
  return 0;
}

static void watch_hello(gnutls_session_t s, const gtls_state *st,
                        tern__tls_gen *g) {
  gnutls_db_set_ptr(s, g);
  if (st->has_prev)
    gnutls_handshake_set_hook_function(s, GNUTLS_HANDSHAKE_CLIENT_HELLO,
                                       GNUTLS_HOOK_PRE, on_hello_hook);
}

/* ---- Pairs --------------------------------------------------------- */

static void gtls_pair_free(tern_tls *t, tern__tls_pair *p) {
  gtls_pair *g = p->eng[TERN__TLS_GNUTLS];
  if (g->cred != NULL)
    gnutls_certificate_free_credentials(g->cred);
  tern__free(t->srv, g);
  p->eng[TERN__TLS_GNUTLS] = NULL;
}

/* A datum over a pair's bytes: PEM without the NUL the store added, DER
 * as it is. */
static gnutls_datum_t datum_of(const char *p, size_t len,
                               gnutls_x509_crt_fmt_t *fmt) {
  gnutls_datum_t d;
  d.data = (unsigned char *)p;
  d.size = (unsigned)(len > 0 ? len - 1 : 0);
  *fmt = memmem(p, d.size, "-----BEGIN", 10) != NULL ? GNUTLS_X509_FMT_PEM
                                                     : GNUTLS_X509_FMT_DER;
  return d;
}

/* The names SNI matches, taken from the first certificate of the chain
 * when no other engine took them: its DNS names, and the subject's CN. */
static int take_names(tern_tls *t, tern__tls_pair *p, gnutls_x509_crt_t crt) {
  char buf[256];
  unsigned i;
  int rc;
  for (i = 0;; i++) {
    size_t len = sizeof(buf);
    unsigned critical;
    rc = gnutls_x509_crt_get_subject_alt_name(crt, i, buf, &len, &critical);
    if (rc == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
      break;
    if (rc == GNUTLS_SAN_DNSNAME &&
        (rc = tern__tls_add_name(t, p, buf, len)) != 0)
      return rc;
  }
  for (i = 0;; i++) {
    size_t len = sizeof(buf);
    rc = gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, i, 0,
                                       buf, &len);
    if (rc < 0)
      break;
    if ((rc = tern__tls_add_name(t, p, buf, len)) != 0)
      return rc;
  }
  return 0;
}

/* Read the chain and the key apart first, so that the message says which
 * one is bad, then both into the pair's credentials, which checks that
 * they belong together. */
static int gtls_pair_load(tern_tls *t, tern__tls_pair *p) {
  gtls_pair *g = tern__malloc(t->srv, sizeof(*g));
  gnutls_x509_crt_t *crts = NULL;
  gnutls_x509_privkey_t key = NULL;
  gnutls_x509_crt_fmt_t cfmt, kfmt;
  gnutls_datum_t cd, kd;
  unsigned n = 0, i;
  int rc;

  if (g == NULL)
    return TERN_ENOMEM;
  memset(g, 0, sizeof(*g));
  p->eng[TERN__TLS_GNUTLS] = g;
  cd = datum_of(p->cert, p->cert_len, &cfmt);
  kd = datum_of(p->key, p->key_len, &kfmt);
  rc = gnutls_x509_crt_list_import2(&crts, &n, &cd, cfmt, 0);
  if (rc < 0)
    return gtls_error(t, rc, "certificate", p->cert_path);
  rc = p->nnames == 0 ? take_names(t, p, crts[0]) : 0;
  for (i = 0; i < n; i++)
    gnutls_x509_crt_deinit(crts[i]);
  gnutls_free(crts);
  if (rc != 0)
    return rc;
  rc = gnutls_x509_privkey_init(&key);
  if (rc >= 0)
    rc = gnutls_x509_privkey_import2(key, &kd, kfmt, NULL, 0);
  if (key != NULL)
    gnutls_x509_privkey_deinit(key);
  if (rc < 0)
    return gtls_error(t, rc, "private key", p->key_path);
  rc = gnutls_certificate_allocate_credentials(&g->cred);
  if (rc < 0)
    return gtls_error(t, rc, "credentials", NULL);
  rc = gnutls_certificate_set_x509_key_mem2(g->cred, &cd, &kd, cfmt, NULL, 0);
  if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
    return gtls_error(t, rc, "certificate and key do not match", p->key_path);
  if (rc < 0)
    return gtls_error(t, rc, "certificate", p->cert_path);
  return 0;
}

/* ---- Generations --------------------------------------------------- */

static void gtls_gen_free(tern__tls_gen *g) {
  gtls_conf *c = g->conf;
  if (c->prio != NULL)
    gnutls_priority_deinit(c->prio);
  if (c->quic_prio != NULL)
    gnutls_priority_deinit(c->quic_prio);
  if (c->all != NULL)
    gnutls_certificate_free_credentials(c->all);
  if (c->trust != NULL)
    gnutls_x509_trust_list_deinit(c->trust, 1);
  tern__free(g->tls->srv, c);
  g->conf = NULL;
}

static int gtls_gen_build(tern_tls *t, tern__tls_gen *g) {
  gtls_conf *c = tern__malloc(t->srv, sizeof(*c));
  const char *err = NULL;
  size_t i;
  int rc;

  if (c == NULL)
    return TERN_ENOMEM;
  memset(c, 0, sizeof(*c));
  g->conf = c;
  rc = gnutls_priority_init(
      &c->prio, g->min_version >= TERN_TLS_1_3 ? prio_13 : prio_12, &err);
  if (rc < 0)
    return gtls_error(t, rc, "priorities", err);
  rc = gnutls_priority_init(&c->quic_prio, prio_quic, &err);
  if (rc < 0)
    return gtls_error(t, rc, "QUIC priorities", err);
  rc = gnutls_certificate_allocate_credentials(&c->all);
  if (rc < 0)
    return gtls_error(t, rc, "credentials", NULL);
  for (i = 0; i < g->npairs; i++) {
    const tern__tls_pair *p = &g->pairs[i];
    gnutls_x509_crt_fmt_t cfmt, kfmt;
    gnutls_datum_t cd = datum_of(p->cert, p->cert_len, &cfmt);
    gnutls_datum_t kd = datum_of(p->key, p->key_len, &kfmt);
    rc = gnutls_certificate_set_x509_key_mem2(c->all, &cd, &kd, cfmt, NULL, 0);
    if (rc < 0)
      return gtls_error(t, rc, "certificate list", p->cert_path);
  }
  /* Client certificates: the CAs read now, at the commit (a reload reads
   * the file again). */
  c->client_mode = g->client_mode;
  if (g->client_mode != TERN_TLS_CLIENT_NONE) {
    rc = gnutls_x509_trust_list_init(&c->trust, 0);
    if (rc < 0)
      return gtls_error(t, rc, "client CA list", NULL);
    rc = gnutls_x509_trust_list_add_trust_file(c->trust, t->client_ca, NULL,
                                               GNUTLS_X509_FMT_PEM, 0, 0);
    if (rc <= 0)
      return gtls_error(t, rc < 0 ? rc : GNUTLS_E_NO_CERTIFICATE_FOUND,
                        "client CA file (no certificate read)", t->client_ca);
  }
  return 0;
}

/* ---- Client certificates ---------------------------------------------- */

/* The handshake's check of a client certificate against the generation's
 * CAs (GnuTLS verifies none on a server by itself): 0 to go on, -1 to
 * fail the handshake. A client that sent none passes here; where one is
 * required, GnuTLS has refused it already. */
static int verify_client(gnutls_session_t s, const gtls_conf *conf) {
  unsigned n = 0, i, status = 1;
  const gnutls_datum_t *peers = gnutls_certificate_get_peers(s, &n);
  gnutls_x509_crt_t crts[16];
  gnutls_typed_vdata_st purpose;
  int ok;

  if (peers == NULL || n == 0)
    return conf->client_mode == TERN_TLS_CLIENT_REQUIRED ? -1 : 0;
  if (n > 16)
    return -1;
  for (i = 0; i < n; i++) {
    if (gnutls_x509_crt_init(&crts[i]) < 0)
      break;
    if (gnutls_x509_crt_import(crts[i], &peers[i], GNUTLS_X509_FMT_DER) < 0) {
      gnutls_x509_crt_deinit(crts[i]);
      break;
    }
  }
  /* For client authentication: a certificate whose Extended Key Usage
   * leaves clientAuth out (a server's) is refused; one without the
   * extension may serve any purpose (RFC 5280 4.2.1.12). */
  purpose.type = GNUTLS_DT_KEY_PURPOSE_OID;
  purpose.data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT;
  purpose.size = 0;
  ok = i == n &&
       gnutls_x509_trust_list_verify_crt2(conf->trust, crts, n, &purpose, 1,
                                          GNUTLS_VERIFY_DISABLE_CRL_CHECKS,
                                          &status, NULL) == 0 &&
       status == 0;
  while (i > 0)
    gnutls_x509_crt_deinit(crts[--i]);
  return ok ? 0 : -1;
}

static int on_verify_tcp(gnutls_session_t s);
static int on_verify_quic(gnutls_session_t s);

/* Ask for a client certificate where the generation wants one. */
static void ask_client(gnutls_session_t s, const gtls_conf *conf, int quic) {
  if (conf->client_mode == TERN_TLS_CLIENT_NONE)
    return;
  gnutls_certificate_server_set_request(
      s, conf->client_mode == TERN_TLS_CLIENT_REQUIRED ? GNUTLS_CERT_REQUIRE
                                                       : GNUTLS_CERT_REQUEST);
  gnutls_session_set_verify_function(s, quic ? on_verify_quic : on_verify_tcp);
}

tern__client_id *tern__tls_gnutls_identity(void *session, tern_server *srv) {
  unsigned n = 0;
  const gnutls_datum_t *peers =
      gnutls_certificate_get_peers((gnutls_session_t)session, &n);
  gnutls_x509_crt_t crt;
  gnutls_datum_t dn = {NULL, 0};
  tern__client_id *id = NULL;

  if (peers == NULL || n == 0 || gnutls_x509_crt_init(&crt) < 0)
    return NULL;
  if (gnutls_x509_crt_import(crt, &peers[0], GNUTLS_X509_FMT_DER) >= 0 &&
      gnutls_x509_crt_get_dn3(crt, &dn, 0) >= 0 &&
      (id = tern__malloc(srv, sizeof(*id) + dn.size + 1 + peers[0].size)) !=
          NULL) {
    id->dn = id->data;
    id->dn_len = dn.size;
    memcpy(id->dn, dn.data, dn.size);
    id->dn[dn.size] = '\0';
    id->der = (unsigned char *)id->data + dn.size + 1;
    id->der_len = peers[0].size;
    memcpy(id->der, peers[0].data, peers[0].size);
  }
  gnutls_free(dn.data);
  gnutls_x509_crt_deinit(crt);
  return id;
}

/* ---- The filter ---------------------------------------------------- */

static ssize_t on_push(gnutls_transport_ptr_t ptr, const giovec_t *iov, int n) {
  gtls_conn *c = ptr;
  ssize_t total = 0;
  int i;
  for (i = 0; i < n; i++) {
    if (tern__outq_copy(c->w, &c->out, iov[i].iov_base, iov[i].iov_len) != 0) {
      c->push_fail = 1;
      gnutls_transport_set_errno(c->s, ENOMEM);
      return -1;
    }
    total += (ssize_t)iov[i].iov_len;
  }
  return total;
}

static ssize_t on_pull(gnutls_transport_ptr_t ptr, void *buf, size_t len) {
  gtls_conn *c = ptr;
  size_t n = tern__tls_in_take(&c->in, buf, len);
  if (n == 0) {
    gnutls_transport_set_errno(c->s, EAGAIN);
    return -1;
  }
  return (ssize_t)n;
}

/* Only asked when GnuTLS would wait; tern never waits. */
static int on_pull_timeout(gnutls_transport_ptr_t ptr, unsigned ms) {
  gtls_conn *c = ptr;
  (void)ms;
  return tern__tls_in_waiting(&c->in);
}

/* SNI: the pair naming the host; none named, every pair (GnuTLS picks
 * one by key type). */
static int pick_credentials(gnutls_session_t s, const tern__tls_gen *g) {
  gtls_conf *conf = g->conf;
  gnutls_certificate_credentials_t cred = conf->all;
  char host[256];
  size_t len = sizeof(host);
  unsigned type;
  if (gnutls_server_name_get(s, host, &len, &type, 0) == 0 &&
      type == GNUTLS_NAME_DNS) {
    int i = tern__tls_pick(g, host, strnlen(host, len));
    if (i >= 0)
      cred = ((gtls_pair *)g->pairs[i].eng[TERN__TLS_GNUTLS])->cred;
  }
  return gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred);
}

static int on_client_hello(gnutls_session_t s) {
  gtls_conn *c = gnutls_session_get_ptr(s);
  return pick_credentials(s, c->gen);
}

static int on_verify_tcp(gnutls_session_t s) {
  gtls_conn *c = gnutls_session_get_ptr(s);
  return verify_client(s, c->gen->conf);
}

static int on_verify_quic(gnutls_session_t s) {
  const tern__tls_gen *g = gnutls_db_get_ptr(s);
  return verify_client(s, g->conf);
}

static const char *gtls_cipher(const void *st) {
  const gtls_conn *c = st;
  return c->hs_done ? gnutls_ciphersuite_get(c->s) : NULL;
}

static tern__client_id *gtls_client_id(const void *st, tern_server *srv) {
  const gtls_conn *c = st;
  if (!c->hs_done ||
      ((gtls_conf *)c->gen->conf)->client_mode == TERN_TLS_CLIENT_NONE)
    return NULL;
  return tern__tls_gnutls_identity(c->s, srv);
}

static void gtls_detach(void *st, tern__worker *w) {
  gtls_conn *c = st;
  if (c == NULL)
    return;
  if (c->s != NULL)
    gnutls_deinit(c->s);
  tern__outq_free(w, &c->out);
  tern__rbuf_unref(w, c->in.buf);
  tern__tls_release(c->gen);
  tern__small_free(w, c);
}

static int gtls_attach(void **st, tern__worker *w, void *cfg) {
  tern_tls *tls = cfg;
  gtls_state *ts = tls->state[TERN__TLS_GNUTLS];
  gnutls_datum_t protos[4];
  gtls_conf *conf;
  gtls_conn *c;
  unsigned np = 0;
  int rc;

  /* From the worker's pool: a new connection allocates nothing through
   * tern's hook (GnuTLS's session is GnuTLS's own). */
  c = tern__small_malloc(w, sizeof(*c));
  if (c == NULL)
    return TERN_ENOMEM;
  memset(c, 0, sizeof(*c));
  c->w = w;
  tern__outq_init(&c->out);
  c->gen = tern__tls_acquire(tls);
  if (c->gen == NULL || gnutls_init(&c->s, GNUTLS_SERVER | GNUTLS_NONBLOCK |
                                               GNUTLS_NO_SIGNAL) < 0) {
    c->s = NULL;
    gtls_detach(c, w);
    return TERN_ENOMEM;
  }
  conf = c->gen->conf;
  while (tern__tls_alpn[np] != NULL && np < 4) {
    protos[np].data = (unsigned char *)tern__tls_alpn[np];
    protos[np].size = (unsigned)strlen(tern__tls_alpn[np]);
    np++;
  }
  rc = gnutls_priority_set(c->s, conf->prio);
  if (rc >= 0)
    rc = gnutls_credentials_set(c->s, GNUTLS_CRD_CERTIFICATE, conf->all);
  if (rc >= 0)
    rc = gnutls_alpn_set_protocols(c->s, protos, np,
                                   GNUTLS_ALPN_SERVER_PRECEDENCE);
  if (rc >= 0)
    rc = gnutls_session_ticket_enable_server(c->s, &ts->ticket_key);
  if (rc < 0) {
    gtls_detach(c, w);
    return rc == GNUTLS_E_MEMORY_ERROR ? TERN_ENOMEM : TERN_ETLS;
  }
  gnutls_session_set_ptr(c->s, c);
  ask_client(c->s, conf, 0);
  watch_hello(c->s, ts, c->gen);
  gnutls_handshake_set_post_client_hello_function(c->s, on_client_hello);
  /* tern's head timer bounds the handshake, not GnuTLS's clock. */
  gnutls_handshake_set_timeout(c->s, 0);
  gnutls_transport_set_ptr(c->s, c);
  gnutls_transport_set_vec_push_function(c->s, on_push);
  gnutls_transport_set_pull_function(c->s, on_pull);
  gnutls_transport_set_pull_timeout_function(c->s, on_pull_timeout);
  *st = c;
  return 0;
}

static void gtls_read_buf(void *st, tern__worker *w, uv_buf_t *buf) {
  tern__tls_in_room(&((gtls_conn *)st)->in, w, buf);
}

static void gtls_received(void *st, size_t n) {
  if (st != NULL)
    tern__tls_in_received(&((gtls_conn *)st)->in, n);
}

/* Decrypt what is buffered into dst, as far as it has room. */
static int decrypt(gtls_conn *c, char *dst, size_t room, size_t *got) {
  for (;;) {
    ssize_t rc;
    if (dst == NULL || *got == room)
      break; /* the adapter must consume first */
    rc = gnutls_record_recv(c->s, dst + *got, room - *got);
    if (rc > 0) {
      *got += (size_t)rc;
      continue;
    }
    if (rc == GNUTLS_E_AGAIN)
      break;
    if (rc == GNUTLS_E_INTERRUPTED)
      continue;
    if (rc == 0)
      return TERN_ECLOSED; /* close_notify */
    /* A client's renegotiation request (TLS 1.2) is refused with a
     * warning alert and the connection goes on. */
    if (rc == GNUTLS_E_REHANDSHAKE) {
      gnutls_alert_send(c->s, GNUTLS_AL_WARNING, GNUTLS_A_NO_RENEGOTIATION);
      continue;
    }
    if (rc == GNUTLS_E_PREMATURE_TERMINATION)
      return TERN_ECLOSED;
    if (!gnutls_error_is_fatal((int)rc))
      continue;
    tern__log(c->w->srv, TERN_LOG_DEBUG, "tls: %s", gnutls_strerror((int)rc));
    return TERN_ETLS;
  }
  if (gnutls_record_check_pending(c->s) == 0)
    tern__tls_in_idle(&c->in, c->w);
  return 0;
}

/* The handshake records it produces wait in the wire queue, which the
 * transport writes after input. */
static int gtls_input(void *st, tern__worker *w, char *dst, size_t room,
                      size_t *got) {
  gtls_conn *c = st;
  int rc;

  *got = 0;
  if (!c->hs_done) {
    if (tern__tls_in_refused(&c->in)) {
      tern__log(w->srv, TERN_LOG_DEBUG, "tls handshake: not a TLS record");
      tern__tls_handshake_done(w, -1);
      return TERN_ETLS;
    }
    do
      rc = gnutls_handshake(c->s);
    while (rc == GNUTLS_E_INTERRUPTED ||
           (rc < 0 && rc != GNUTLS_E_AGAIN && !gnutls_error_is_fatal(rc)));
    if (rc == GNUTLS_E_AGAIN)
      return c->push_fail ? TERN_ENOMEM : 0;
    if (rc < 0) {
      tern__log(w->srv, TERN_LOG_DEBUG, "tls handshake: %s",
                gnutls_strerror(rc));
      tern__tls_handshake_done(w, -1);
      return TERN_ETLS;
    }
    c->hs_done = 1;
    tern__tls_handshake_done(w, gnutls_session_is_resumed(c->s) != 0);
    rc = decrypt(c, dst, room, got);
    return rc == 0 ? TERN__F_READY : rc;
  }
  return decrypt(c, dst, room, got);
}

static int gtls_has_input(void *st) {
  gtls_conn *c = st;
  return c->hs_done && (tern__tls_in_waiting(&c->in) ||
                        gnutls_record_check_pending(c->s) > 0);
}

/* Plaintext into records of up to 16 KiB (tern__tls_next_record), sent
 * one at a time: GnuTLS's cork would gather them too but allocates a
 * buffer per uncork. */
static tern__outq *gtls_output(void *st, tern__worker *w, tern__outq *q,
                               int *err) {
  gtls_conn *c = st;

  *err = 0;
  while (c->hs_done && q->count > 0 && c->out.bytes < TERN__TLS_OUT_HIGH) {
    const char *src;
    size_t len;
    ssize_t rc = tern__tls_next_record(w, q, &src, &len);

    if (rc == 1)
      continue;
    if (rc != 0) {
      *err = (int)rc;
      break;
    }
    do
      rc = gnutls_record_send(c->s, src, len);
    while (rc == GNUTLS_E_INTERRUPTED);
    if (rc < 0 || c->push_fail) {
      *err =
          c->push_fail || rc == GNUTLS_E_MEMORY_ERROR ? TERN_ENOMEM : TERN_ETLS;
      break;
    }
    /* The plaintext is in records now: for the writer it is written. */
    tern__outq_consume(w, q, (size_t)rc);
  }
  return &c->out;
}

static tern__outq *gtls_wire(void *st) {
  return &((gtls_conn *)st)->out;
}

static size_t gtls_buffered(const void *st) {
  return ((const gtls_conn *)st)->out.bytes;
}

static int gtls_handshaking(const void *st) {
  return !((const gtls_conn *)st)->hs_done;
}

static int gtls_version(const void *st) {
  const gtls_conn *c = st;
  if (!c->hs_done)
    return 0;
  switch (gnutls_protocol_get_version(c->s)) {
  case GNUTLS_TLS1_3:
    return TERN_TLS_1_3;
  case GNUTLS_TLS1_2:
    return TERN_TLS_1_2;
  default:
    return 0;
  }
}

static int gtls_shutdown(void *st) {
  gtls_conn *c = st;
  if (c == NULL || !c->hs_done || c->notified)
    return 0;
  c->notified = 1;
  /* The alert goes into the wire queue through on_push; a failure to
   * queue it leaves a close without it. */
  gnutls_bye(c->s, GNUTLS_SHUT_WR);
  return c->out.count > 0;
}

/* An http1_only listener's connection: "http/1.1" replaces the list set
 * at attach, before the handshake has begun. */
static int gtls_alpn_http1(void *st) {
  gtls_conn *c = st;
  gnutls_datum_t p = {(unsigned char *)"http/1.1", 8};
  return gnutls_alpn_set_protocols(c->s, &p, 1, GNUTLS_ALPN_SERVER_PRECEDENCE) <
                 0
             ? TERN_ETLS
             : 0;
}

static const char *gtls_alpn(const void *st) {
  gtls_conn *c = (gtls_conn *)st;
  gnutls_datum_t d;
  if (gnutls_alpn_get_selected_protocol(c->s, &d) < 0 ||
      d.size >= sizeof(c->alpn))
    return NULL;
  memcpy(c->alpn, d.data, d.size);
  c->alpn[d.size] = '\0';
  return c->alpn;
}

/* ---- QUIC ----------------------------------------------------------- */

/* A QUIC session's pointer is ngtcp2's (its crypto helper finds the
 * connection through it), so the generation rides in the session's
 * database pointer (watch_hello sets it on every session), which tern
 * uses for nothing else (tickets need no session database). */
static int on_quic_client_hello(gnutls_session_t s) {
  return pick_credentials(s, gnutls_db_get_ptr(s));
}

static int gtls_quic_session(tern_tls *tls, void **session, tern__tls_gen **gen,
                             const char *alpn, void *anti_replay) {
  gtls_state *ts = tls->state[TERN__TLS_GNUTLS];
  unsigned flags = GNUTLS_SERVER | GNUTLS_NO_AUTO_SEND_TICKET |
                   GNUTLS_NO_END_OF_EARLY_DATA | GNUTLS_NO_SIGNAL;
  gnutls_datum_t proto;
  gnutls_session_t s;
  tern__tls_gen *g = tern__tls_acquire(tls);
  gtls_conf *conf;
  int rc;

  if (g == NULL)
    return TERN_ESTATE;
  if (anti_replay != NULL)
    flags |= GNUTLS_ENABLE_EARLY_DATA;
  if (gnutls_init(&s, flags) < 0) {
    tern__tls_release(g);
    return TERN_ENOMEM;
  }
  conf = g->conf;
  proto.data = (unsigned char *)alpn;
  proto.size = (unsigned)strlen(alpn);
  rc = gnutls_priority_set(s, conf->quic_prio);
  if (rc >= 0)
    rc = gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, conf->all);
  /* QUIC requires ALPN: a client offering none of ours is refused. */
  if (rc >= 0)
    rc = gnutls_alpn_set_protocols(s, &proto, 1, GNUTLS_ALPN_MANDATORY);
  if (rc >= 0)
    rc = gnutls_session_ticket_enable_server(s, &ts->ticket_key);
  if (rc < 0) {
    gnutls_deinit(s);
    tern__tls_release(g);
    return rc == GNUTLS_E_MEMORY_ERROR ? TERN_ENOMEM : TERN_ETLS;
  }
  if (anti_replay != NULL) {
    /* GnuTLS takes early data only with anti-replay on; RFC 9001 4.6.1
     * requires this size in a QUIC ticket. */
    gnutls_anti_replay_enable(s, anti_replay);
    gnutls_record_set_max_early_data_size(s, 0xffffffffu);
  }
  watch_hello(s, ts, g);
  ask_client(s, conf, 1);
  gnutls_handshake_set_post_client_hello_function(s, on_quic_client_hello);
  /* ngtcp2's handshake timeout bounds the handshake. */
  gnutls_handshake_set_timeout(s, 0);
  *session = s;
  *gen = g;
  return 0;
}

const tern__filter tern__tls_gnutls_filter = {
    .name = "tls-gnutls",
    .attach = gtls_attach,
    .alpn_http1 = gtls_alpn_http1,
    .detach = gtls_detach,
    .read_buf = gtls_read_buf,
    .received = gtls_received,
    .input = gtls_input,
    .has_input = gtls_has_input,
    .output = gtls_output,
    .wire = gtls_wire,
    .buffered = gtls_buffered,
    .handshaking = gtls_handshaking,
    .shutdown = gtls_shutdown,
    .alpn = gtls_alpn,
    .tls_version = gtls_version,
    .client_id = gtls_client_id,
    .cipher = gtls_cipher,
};

const tern__tls_engine tern__tls_gnutls = {
    .name = "gnutls",
    .id = TERN__TLS_GNUTLS,
    .max_version = TERN_TLS_1_3,
    .tls_init = gtls_tls_init,
    .tls_free = gtls_tls_free,
    .pair_load = gtls_pair_load,
    .pair_free = gtls_pair_free,
    .gen_build = gtls_gen_build,
    .gen_free = gtls_gen_free,
    .filter = &tern__tls_gnutls_filter,
    .quic_session = gtls_quic_session,
    .set_ticket_key = gtls_set_ticket_key,
};
