/* TLS 1.2 over TCP with mbedTLS 2.28, driven through memory callbacks.
 *
 * Certificates live in generations: tern_tls_commit() turns the pairs
 * added since the last commit into a new mbedtls_ssl_config and makes it
 * current. A connection keeps the generation it started its handshake
 * with (refcounted), so replacing certificates at run time affects new
 * handshakes only and never drops a live connection.
 */
#include <string.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/x509_crt.h>

#include "tls/tls.h"

typedef struct {
  mbedtls_x509_crt crt;
  mbedtls_pk_context key;
} cert_pair;

typedef struct tls_cfg {
  int refs; /* under the owner's lock */
  tern_tls *tls;
  mbedtls_ssl_config conf;
  cert_pair *certs;
  size_t ncerts;
} tls_cfg;

struct tern_tls {
  tern_server *srv;
  tern_tls *next;
  uv_mutex_t lock;
  tls_cfg *current;
  cert_pair *pending;
  size_t npending, cap;
  mbedtls_entropy_context entropy;
  mbedtls_ctr_drbg_context drbg;
  mbedtls_ssl_ticket_context ticket;
};

typedef struct tls_conn {
  mbedtls_ssl_context ssl;
  tls_cfg *cfg;
  tern__worker *w;
  tern__rbuf *in; /* ciphertext read from the socket */
  size_t in_pos, in_len;
  tern__outq out; /* records to write */
  int hs_done;
  int notified; /* close_notify queued */
} tls_conn;

/* Encryption stops while this much ciphertext waits for the socket. */
#define TLS_OUT_HIGH (64u * 1024)
#define TLS_RECORD 16384

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

#ifdef TERN_HAVE_HTTP2
static const char *alpn[] = {"h2", "http/1.1", NULL};
#else
static const char *alpn[] = {"http/1.1", NULL};
#endif

static int log_mbedtls(tern_server *srv, int rc, const char *what,
                       const char *path) {
  char msg[160];
  mbedtls_strerror(rc, msg, sizeof(msg));
  tern__log(srv, TERN_LOG_ERROR, "tls: %s%s%s: %s", what, path ? " " : "",
            path ? path : "", msg);
  return TERN_ETLS;
}

/* ---- Configuration ------------------------------------------------- */

int tern_tls_new(tern_server *srv, tern_tls **out) {
  static const char pers[] = "tern tls";
  tern_tls *t;
  int rc;

  if (srv == NULL || out == NULL)
    return TERN_EINVAL;
  t = tern__malloc(srv, sizeof(*t));
  if (t == NULL)
    return TERN_ENOMEM;
  memset(t, 0, sizeof(*t));
  t->srv = srv;
  if (uv_mutex_init(&t->lock) != 0) {
    tern__free(srv, t);
    return TERN_EIO;
  }
  mbedtls_entropy_init(&t->entropy);
  mbedtls_ctr_drbg_init(&t->drbg);
  mbedtls_ssl_ticket_init(&t->ticket);
  rc = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy,
                             (const unsigned char *)pers, sizeof(pers) - 1);
  if (rc == 0)
    rc = mbedtls_ssl_ticket_setup(&t->ticket, mbedtls_ctr_drbg_random, &t->drbg,
                                  MBEDTLS_CIPHER_AES_256_GCM, 86400);
  if (rc != 0) {
    log_mbedtls(srv, rc, "random generator or ticket keys", NULL);
    mbedtls_ssl_ticket_free(&t->ticket);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    uv_mutex_destroy(&t->lock);
    tern__free(srv, t);
    return TERN_ETLS;
  }
  t->next = srv->tls_list;
  srv->tls_list = t;
  srv->tls_free = tern__tls_free_all; /* the server frees what it owns */
  *out = t;
  return 0;
}

static void pair_free(cert_pair *p) {
  mbedtls_x509_crt_free(&p->crt);
  mbedtls_pk_free(&p->key);
}

/* Parse and check one pair now, so that a bad file is an error at
 * configuration time and never at the first handshake. */
static int add_pair(tern_tls *t, const char *cert, size_t cert_len,
                    const char *key, size_t key_len, const char *cert_path,
                    const char *key_path) {
  tern_server *srv = t->srv;
  cert_pair *p;
  int rc;

  if (t->npending == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 4;
    cert_pair *n = tern__realloc(srv, t->pending, cap * sizeof(*n));
    if (n == NULL)
      return TERN_ENOMEM;
    t->pending = n;
    t->cap = cap;
  }
  p = &t->pending[t->npending];
  mbedtls_x509_crt_init(&p->crt);
  mbedtls_pk_init(&p->key);
  rc = cert_path ? mbedtls_x509_crt_parse_file(&p->crt, cert_path)
                 : mbedtls_x509_crt_parse(&p->crt, (const unsigned char *)cert,
                                          cert_len);
  if (rc != 0) {
    pair_free(p);
    return log_mbedtls(srv, rc, "certificate", cert_path);
  }
  rc = key_path ? mbedtls_pk_parse_keyfile(&p->key, key_path, NULL)
                : mbedtls_pk_parse_key(&p->key, (const unsigned char *)key,
                                       key_len, NULL, 0);
  if (rc != 0) {
    pair_free(p);
    return log_mbedtls(srv, rc, "private key", key_path);
  }
  rc = mbedtls_pk_check_pair(&p->crt.pk, &p->key);
  if (rc != 0) {
    pair_free(p);
    return log_mbedtls(srv, rc, "certificate and key do not match", key_path);
  }
  t->npending++;
  return 0;
}

int tern_tls_add_cert_file(tern_tls *t, const char *cert_file,
                           const char *key_file) {
  if (t == NULL || cert_file == NULL || key_file == NULL)
    return TERN_EINVAL;
  return add_pair(t, NULL, 0, NULL, 0, cert_file, key_file);
}

/* mbedTLS wants PEM text NUL-terminated, the NUL counted. */
static char *pem_copy(tern_server *srv, const char *p, size_t n) {
  char *s = tern__malloc(srv, n + 1);
  if (s != NULL) {
    memcpy(s, p, n);
    s[n] = '\0';
  }
  return s;
}

int tern_tls_add_cert_mem(tern_tls *t, const char *cert_pem, size_t cert_len,
                          const char *key_pem, size_t key_len) {
  char *c, *k;
  int rc;
  if (t == NULL || cert_pem == NULL || key_pem == NULL)
    return TERN_EINVAL;
  c = pem_copy(t->srv, cert_pem, cert_len);
  k = pem_copy(t->srv, key_pem, key_len);
  rc = c && k ? add_pair(t, c, cert_len + 1, k, key_len + 1, NULL, NULL)
              : TERN_ENOMEM;
  if (k != NULL)
    memset(k, 0, key_len); /* no key material left in freed memory */
  tern__free(t->srv, c);
  tern__free(t->srv, k);
  return rc;
}

/* Does the certificate name `host` (a dNSName or the subject CN), with
 * "*." wildcards matching exactly one label? */
static int name_matches(const unsigned char *pat, size_t plen,
                        const unsigned char *host, size_t hlen) {
  if (plen > 2 && pat[0] == '*' && pat[1] == '.') {
    const unsigned char *dot = memchr(host, '.', hlen);
    if (dot == NULL || dot == host)
      return 0;
    hlen -= (size_t)(dot - host);
    host = dot;
    pat++;
    plen--;
  }
  return plen == hlen && tern__ieq((const char *)pat, (const char *)host, plen);
}

static int cert_names(const mbedtls_x509_crt *crt, const unsigned char *host,
                      size_t hlen) {
  const mbedtls_x509_sequence *s = &crt->subject_alt_names;
  const mbedtls_x509_name *n;
  for (; s != NULL && s->buf.p != NULL; s = s->next)
    if (s->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 2) &&
        name_matches(s->buf.p, s->buf.len, host, hlen))
      return 1;
  for (n = &crt->subject; n != NULL; n = n->next)
    if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0 &&
        name_matches(n->val.p, n->val.len, host, hlen))
      return 1;
  return 0;
}

/* SNI: the first certificate naming the host; none named, the default
 * list (mbedTLS then picks by key type). */
static int on_sni(void *arg, mbedtls_ssl_context *ssl,
                  const unsigned char *host, size_t len) {
  tls_cfg *cfg = arg;
  size_t i;
  for (i = 0; i < cfg->ncerts; i++)
    if (cert_names(&cfg->certs[i].crt, host, len))
      return mbedtls_ssl_set_hs_own_cert(ssl, &cfg->certs[i].crt,
                                         &cfg->certs[i].key);
  return 0;
}

static void cfg_release(tls_cfg *cfg) {
  tern_tls *t;
  size_t i;
  int last;
  if (cfg == NULL)
    return;
  t = cfg->tls;
  uv_mutex_lock(&t->lock);
  last = --cfg->refs == 0;
  uv_mutex_unlock(&t->lock);
  if (!last)
    return;
  mbedtls_ssl_config_free(&cfg->conf);
  for (i = 0; i < cfg->ncerts; i++)
    pair_free(&cfg->certs[i]);
  tern__free(t->srv, cfg->certs);
  tern__free(t->srv, cfg);
}

int tern_tls_commit(tern_tls *t) {
  tern_server *srv;
  tls_cfg *cfg, *old;
  size_t i;
  int rc;

  if (t == NULL)
    return TERN_EINVAL;
  srv = t->srv;
  if (t->npending == 0)
    return TERN_ESTATE;
  cfg = tern__malloc(srv, sizeof(*cfg));
  if (cfg == NULL)
    return TERN_ENOMEM;
  memset(cfg, 0, sizeof(*cfg));
  cfg->tls = t;
  cfg->refs = 1; /* the tern_tls's own */
  mbedtls_ssl_config_init(&cfg->conf);
  rc = mbedtls_ssl_config_defaults(&cfg->conf, MBEDTLS_SSL_IS_SERVER,
                                   MBEDTLS_SSL_TRANSPORT_STREAM,
                                   MBEDTLS_SSL_PRESET_DEFAULT);
  if (rc != 0) {
    mbedtls_ssl_config_free(&cfg->conf);
    tern__free(srv, cfg);
    return log_mbedtls(srv, rc, "configuration", NULL);
  }
  mbedtls_ssl_conf_rng(&cfg->conf, mbedtls_ctr_drbg_random, &t->drbg);
  mbedtls_ssl_conf_min_version(&cfg->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                               MBEDTLS_SSL_MINOR_VERSION_3);
  mbedtls_ssl_conf_ciphersuites(&cfg->conf, suites);
  mbedtls_ssl_conf_curves(&cfg->conf, curves);
  mbedtls_ssl_conf_alpn_protocols(&cfg->conf, alpn);
  mbedtls_ssl_conf_session_tickets_cb(&cfg->conf, mbedtls_ssl_ticket_write,
                                      mbedtls_ssl_ticket_parse, &t->ticket);
  mbedtls_ssl_conf_sni(&cfg->conf, on_sni, cfg);
  /* The pending pairs move into the generation; they never move again,
   * so the pointers mbedTLS keeps stay valid. */
  cfg->certs = t->pending;
  cfg->ncerts = t->npending;
  t->pending = NULL;
  t->npending = t->cap = 0;
  for (i = 0; i < cfg->ncerts; i++) {
    rc = mbedtls_ssl_conf_own_cert(&cfg->conf, &cfg->certs[i].crt,
                                   &cfg->certs[i].key);
    if (rc != 0) {
      cfg_release(cfg);
      return log_mbedtls(srv, rc, "certificate list", NULL);
    }
  }
  uv_mutex_lock(&t->lock);
  old = t->current;
  t->current = cfg;
  uv_mutex_unlock(&t->lock);
  cfg_release(old);
  return 0;
}

/* A listener whose connections this filter serves with `tls`. */
int tern__tls_ready(const tern_tls *t) {
  return t->current != NULL;
}

void tern__tls_free_all(tern_server *srv) {
  while (srv->tls_list != NULL) {
    tern_tls *t = srv->tls_list;
    size_t i;
    srv->tls_list = t->next;
    cfg_release(t->current);
    for (i = 0; i < t->npending; i++)
      pair_free(&t->pending[i]);
    tern__free(srv, t->pending);
    mbedtls_ssl_ticket_free(&t->ticket);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    uv_mutex_destroy(&t->lock);
    tern__free(srv, t);
  }
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
  size_t avail = t->in_len - t->in_pos;
  if (avail == 0)
    return MBEDTLS_ERR_SSL_WANT_READ;
  if (len > avail)
    len = avail;
  memcpy(buf, t->in->data + t->in_pos, len);
  t->in_pos += len;
  return (int)len;
}

static int tls_attach(void **st, tern__worker *w, void *cfg_arg) {
  tern_tls *tls = cfg_arg;
  tern_server *srv = w->srv;
  tls_conn *t;
  tls_cfg *cfg;

  t = tern__malloc(srv, sizeof(*t));
  if (t == NULL)
    return TERN_ENOMEM;
  memset(t, 0, sizeof(*t));
  t->w = w;
  tern__outq_init(&t->out);
  uv_mutex_lock(&tls->lock);
  cfg = tls->current;
  cfg->refs++;
  uv_mutex_unlock(&tls->lock);
  t->cfg = cfg;
  mbedtls_ssl_init(&t->ssl);
  if (mbedtls_ssl_setup(&t->ssl, &cfg->conf) != 0) {
    mbedtls_ssl_free(&t->ssl);
    cfg_release(cfg);
    tern__free(srv, t);
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
  tern__rbuf_unref(w, t->in);
  mbedtls_ssl_free(&t->ssl);
  cfg_release(t->cfg);
  tern__free(w->srv, t);
}

static void tls_read_buf(void *st, tern__worker *w, uv_buf_t *buf) {
  tls_conn *t = st;
  if (t->in == NULL) {
    t->in = tern__rbuf_get(w);
    t->in_pos = t->in_len = 0;
    if (t->in == NULL) {
      *buf = uv_buf_init(NULL, 0);
      return;
    }
  }
  if (t->in_pos > 0) {
    memmove(t->in->data, t->in->data + t->in_pos, t->in_len - t->in_pos);
    t->in_len -= t->in_pos;
    t->in_pos = 0;
  }
  *buf =
      uv_buf_init(t->in->data + t->in_len, (unsigned)(t->in->cap - t->in_len));
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
    rc = mbedtls_ssl_handshake(&t->ssl);
    if (rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE)
      return 0;
    if (rc != 0) {
      char msg[120];
      mbedtls_strerror(rc, msg, sizeof(msg));
      tern__log(w->srv, TERN_LOG_DEBUG, "tls handshake: %s", msg);
      return TERN_ETLS;
    }
    t->hs_done = 1;
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
  if (t->in != NULL && t->in_pos == t->in_len &&
      mbedtls_ssl_get_bytes_avail(&t->ssl) == 0) {
    /* Nothing buffered: an idle connection holds no ciphertext buffer. */
    tern__rbuf_unref(t->w, t->in);
    t->in = NULL;
    t->in_pos = t->in_len = 0;
  }
  return 0;
}

static tern__outq *tls_output(void *st, tern__worker *w, tern__outq *q,
                              int *err) {
  tls_conn *t = st;

  *err = 0;
  while (t->hs_done && q->count > 0 && t->out.bytes < TLS_OUT_HIGH) {
    uv_buf_t iov[16];
    size_t n = tern__outq_iov(q, iov, 16), i, len = 0;
    const char *src;
    int rc;

    if (n == 0) {
      tern__outq_consume(w, q, 0); /* markers only */
      continue;
    }
    /* Gather small pieces into one record rather than one record each:
     * many small HTTP/2 frames then cost few records. */
    if (iov[0].len >= TLS_RECORD || n == 1) {
      src = iov[0].base;
      len = iov[0].len < TLS_RECORD ? iov[0].len : TLS_RECORD;
    } else {
      if (w->scratch == NULL &&
          (w->scratch = tern__malloc(w->srv, TLS_RECORD)) == NULL) {
        *err = TERN_ENOMEM;
        break;
      }
      for (i = 0; i < n && len < TLS_RECORD; i++) {
        size_t k = iov[i].len;
        if (k > TLS_RECORD - len)
          k = TLS_RECORD - len;
        memcpy(w->scratch + len, iov[i].base, k);
        len += k;
      }
      src = w->scratch;
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
  return t->hs_done && ((t->in != NULL && t->in_pos < t->in_len) ||
                        mbedtls_ssl_get_bytes_avail(&t->ssl) > 0);
}

static void tls_received(void *st, size_t n) {
  tls_conn *t = st;
  if (t == NULL)
    return;
  if (n == 0)
    t->in_pos = t->in_len = 0; /* a lingering close drops it */
  t->in_len += n;
}

static int tls_handshaking(const void *st) {
  return !((const tls_conn *)st)->hs_done;
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

const tern__filter tern__tls_filter = {
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
};
