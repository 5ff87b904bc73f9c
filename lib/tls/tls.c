/* The certificate store: the public tern_tls calls, pairs read and checked
 * once by every engine built, their names for SNI, and generations (see
 * tls.h). The engines are lib/tls/mbedtls.c and lib/tls/gnutls.c.
 */
#include <stdio.h>
#include <string.h>

#include "tls/tls.h"

#ifdef TERN_HAVE_HTTP2
const char *const tern__tls_alpn[] = {"h2", "http/1.1", NULL};
#else
const char *const tern__tls_alpn[] = {"http/1.1", NULL};
#endif

int tern__tls_error(tern_tls *t, const char *what, const char *path,
                    const char *msg) {
  tern__log(t->srv, TERN_LOG_ERROR, "tls: %s%s%s: %s", what, path ? " " : "",
            path ? path : "", msg);
  return TERN_ETLS;
}

static const tern__tls_engine *engine_of(const tern_tls *t) {
  return tern__tls_engines[t->engine];
}

/* ---- Configuration ------------------------------------------------- */

static void free_state(tern_tls *t) {
  int i;
  for (i = 0; i < TERN__TLS_ENGINES; i++)
    if (t->state[i] != NULL)
      tern__tls_engines[i]->tls_free(t, t->state[i]);
}

int tern_tls_new(tern_server *srv, tern_tls **out) {
  tern_tls *t;
  int i, rc;

  if (srv == NULL || out == NULL)
    return TERN_EINVAL;
  t = tern__malloc(srv, sizeof(*t));
  if (t == NULL)
    return TERN_ENOMEM;
  memset(t, 0, sizeof(*t));
  t->srv = srv;
  t->min_version = TERN_TLS_1_2;
  /* The default engine: GnuTLS where built (TLS 1.3, faster records and
   * handshakes), else mbedTLS. */
  t->engine = tern__tls_engines[TERN__TLS_GNUTLS] != NULL ? TERN__TLS_GNUTLS
                                                          : TERN__TLS_MBEDTLS;
  if (uv_mutex_init(&t->lock) != 0) {
    tern__free(srv, t);
    return TERN_EIO;
  }
  for (i = 0; i < TERN__TLS_ENGINES; i++) {
    if (tern__tls_engines[i] == NULL)
      continue;
    rc = tern__tls_engines[i]->tls_init(t, &t->state[i]);
    if (rc != 0) {
      free_state(t);
      uv_mutex_destroy(&t->lock);
      tern__free(srv, t);
      return rc;
    }
  }
  t->next = srv->tls_list;
  srv->tls_list = t;
  srv->tls_free = tern__tls_free_all; /* the server frees what it owns */
  *out = t;
  return 0;
}

int tern_tls_set_engine(tern_tls *t, int engine) {
  int id;
  if (t == NULL)
    return TERN_EINVAL;
  switch (engine) {
  case TERN_TLS_ENGINE_AUTO:
    id = tern__tls_engines[TERN__TLS_GNUTLS] != NULL ? TERN__TLS_GNUTLS
                                                     : TERN__TLS_MBEDTLS;
    break;
  case TERN_TLS_ENGINE_MBEDTLS:
    id = TERN__TLS_MBEDTLS;
    break;
  case TERN_TLS_ENGINE_GNUTLS:
    id = TERN__TLS_GNUTLS;
    break;
  default:
    return TERN_EINVAL;
  }
  if (tern__tls_engines[id] == NULL)
    return TERN_ENOTSUP;
  if (t->current != NULL)
    return TERN_ESTATE;
  if (t->min_version > tern__tls_engines[id]->max_version)
    return TERN_ENOTSUP;
  t->engine = id;
  return 0;
}

const char *tern__tls_engine_label(const tern_tls *t) {
  return engine_of(t)->name;
}

const char *tern_tls_engine_name(const tern_tls *t) {
  return t != NULL ? tern__tls_engine_label(t) : "none";
}

static int set_ticket_key(tern_tls *t, const void *key, size_t len,
                          int previous) {
  const tern__tls_engine *e;
  if (t == NULL || key == NULL || len != TERN_TLS_TICKET_KEY_SIZE)
    return TERN_EINVAL;
  if (atomic_load(&t->srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  e = engine_of(t);
  if (e->set_ticket_key == NULL)
    return TERN_ENOTSUP;
  return e->set_ticket_key(t, t->state[e->id], key, len, previous);
}

int tern_tls_set_ticket_key(tern_tls *t, const void *key, size_t len) {
  return set_ticket_key(t, key, len, 0);
}

int tern_tls_set_previous_ticket_key(tern_tls *t, const void *key, size_t len) {
  return set_ticket_key(t, key, len, 1);
}

int tern_tls_set_min_version(tern_tls *t, int version) {
  if (t == NULL || (version != TERN_TLS_1_2 && version != TERN_TLS_1_3))
    return TERN_EINVAL;
  if (version > engine_of(t)->max_version)
    return TERN_ENOTSUP;
  t->min_version = version;
  return 0;
}

int tern_tls_set_client_ca_file(tern_tls *t, const char *ca_file, int mode) {
  char *copy = NULL;
  if (t == NULL || mode < TERN_TLS_CLIENT_NONE ||
      mode > TERN_TLS_CLIENT_REQUIRED ||
      (mode != TERN_TLS_CLIENT_NONE && ca_file == NULL))
    return TERN_EINVAL;
  if (mode != TERN_TLS_CLIENT_NONE && engine_of(t)->id != TERN__TLS_GNUTLS) {
    tern__log(t->srv, TERN_LOG_ERROR,
              "tern_tls_set_client_ca_file: client certificates are "
              "verified by the GnuTLS engine only");
    return TERN_ENOTSUP;
  }
  if (mode != TERN_TLS_CLIENT_NONE) {
    size_t n = strlen(ca_file);
    if ((copy = tern__malloc(t->srv, n + 1)) == NULL)
      return TERN_ENOMEM;
    memcpy(copy, ca_file, n + 1);
  }
  uv_mutex_lock(&t->lock);
  tern__free(t->srv, t->client_ca);
  t->client_ca = copy;
  t->client_mode = mode;
  uv_mutex_unlock(&t->lock);
  return 0;
}

static void pair_free(tern_tls *t, tern__tls_pair *p) {
  tern_server *srv = t->srv;
  size_t i;
  int e;
  for (e = 0; e < TERN__TLS_ENGINES; e++)
    if (p->eng[e] != NULL)
      tern__tls_engines[e]->pair_free(t, p);
  for (i = 0; i < p->nnames; i++)
    tern__free(srv, p->names[i].name);
  tern__free(srv, p->names);
  if (p->key != NULL)
    memset(p->key, 0, p->key_len); /* no key material in freed memory */
  tern__free(srv, p->cert);
  tern__free(srv, p->key);
  tern__free(srv, (char *)p->cert_path);
  tern__free(srv, (char *)p->key_path);
  memset(p, 0, sizeof(*p));
}

int tern__tls_add_name(tern_tls *t, tern__tls_pair *p, const char *name,
                       size_t len) {
  tern__tls_name *n;
  if (len == 0)
    return 0;
  n = tern__realloc(t->srv, p->names, (p->nnames + 1) * sizeof(*n));
  if (n == NULL)
    return TERN_ENOMEM;
  p->names = n;
  n = &p->names[p->nnames];
  n->name = tern__malloc(t->srv, len);
  if (n->name == NULL)
    return TERN_ENOMEM;
  memcpy(n->name, name, len);
  n->len = len;
  p->nnames++;
  return 0;
}

static char *copy_bytes(tern_server *srv, const char *p, size_t n) {
  char *s = tern__malloc(srv, n + 1);
  if (s != NULL) {
    memcpy(s, p, n);
    s[n] = '\0';
  }
  return s;
}

/* A file's bytes with a NUL added (PEM parsers want text; DER is read as
 * it is), or NULL with the reason logged. */
static char *read_file(tern_tls *t, const char *what, const char *path,
                       size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long n;
  if (f == NULL) {
    tern__tls_error(t, what, path, "cannot be opened");
    return NULL;
  }
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (64L << 20) &&
      fseek(f, 0, SEEK_SET) == 0) {
    buf = tern__malloc(t->srv, (size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
      tern__free(t->srv, buf);
      buf = NULL;
    }
    if (buf != NULL) {
      buf[n] = '\0';
      *len = (size_t)n + 1;
    }
  }
  fclose(f);
  if (buf == NULL)
    tern__tls_error(t, what, path, "cannot be read");
  return buf;
}

/* Read and check one pair now, with every engine the build has, so that
 * a bad file is an error at configuration time and never at the first
 * handshake, whichever engine serves it later. */
static int add_pair(tern_tls *t, tern__tls_pair *p) {
  tern_server *srv = t->srv;
  int e, rc;

  if (t->npending == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 4;
    tern__tls_pair *n = tern__realloc(srv, t->pending, cap * sizeof(*n));
    if (n == NULL) {
      pair_free(t, p);
      return TERN_ENOMEM;
    }
    t->pending = n;
    t->cap = cap;
  }
  for (e = 0; e < TERN__TLS_ENGINES; e++) {
    if (tern__tls_engines[e] == NULL)
      continue;
    rc = tern__tls_engines[e]->pair_load(t, p);
    if (rc != 0) {
      pair_free(t, p);
      return rc;
    }
  }
  t->pending[t->npending++] = *p;
  return 0;
}

int tern_tls_add_cert_file(tern_tls *t, const char *cert_file,
                           const char *key_file) {
  tern__tls_pair p;
  if (t == NULL || cert_file == NULL || key_file == NULL)
    return TERN_EINVAL;
  memset(&p, 0, sizeof(p));
  p.cert_path = copy_bytes(t->srv, cert_file, strlen(cert_file));
  p.key_path = copy_bytes(t->srv, key_file, strlen(key_file));
  if (p.cert_path == NULL || p.key_path == NULL) {
    pair_free(t, &p);
    return TERN_ENOMEM;
  }
  p.cert = read_file(t, "certificate", cert_file, &p.cert_len);
  p.key = p.cert ? read_file(t, "private key", key_file, &p.key_len) : NULL;
  if (p.key == NULL) {
    pair_free(t, &p);
    return TERN_ETLS;
  }
  return add_pair(t, &p);
}

int tern_tls_add_cert_mem(tern_tls *t, const char *cert_pem, size_t cert_len,
                          const char *key_pem, size_t key_len) {
  tern__tls_pair p;
  if (t == NULL || cert_pem == NULL || key_pem == NULL)
    return TERN_EINVAL;
  memset(&p, 0, sizeof(p));
  p.cert = copy_bytes(t->srv, cert_pem, cert_len);
  p.key = copy_bytes(t->srv, key_pem, key_len);
  if (p.cert == NULL || p.key == NULL) {
    pair_free(t, &p);
    return TERN_ENOMEM;
  }
  p.cert_len = cert_len + 1;
  p.key_len = key_len + 1;
  return add_pair(t, &p);
}

/* Does the certificate name `pat` (a DNS name or the subject CN, with
 * "*." wildcards matching exactly one label) match `host`? */
static int name_matches(const char *pat, size_t plen, const char *host,
                        size_t hlen) {
  if (plen > 2 && pat[0] == '*' && pat[1] == '.') {
    const char *dot = memchr(host, '.', hlen);
    if (dot == NULL || dot == host)
      return 0;
    hlen -= (size_t)(dot - host);
    host = dot;
    pat++;
    plen--;
  }
  return plen == hlen && tern__ieq(pat, host, plen);
}

int tern__tls_pick(const tern__tls_gen *g, const char *host, size_t len) {
  size_t i, j;
  for (i = 0; i < g->npairs; i++)
    for (j = 0; j < g->pairs[i].nnames; j++)
      if (name_matches(g->pairs[i].names[j].name, g->pairs[i].names[j].len,
                       host, len))
        return (int)i;
  return -1;
}

static void gen_free(tern__tls_gen *g) {
  tern_server *srv = g->tls->srv;
  size_t i;
  if (g->conf != NULL)
    g->engine->gen_free(g);
  for (i = 0; i < g->npairs; i++)
    pair_free(g->tls, &g->pairs[i]);
  tern__free(srv, g->pairs);
  tern__free(srv, g);
}

tern__tls_gen *tern__tls_acquire(tern_tls *t) {
  tern__tls_gen *g;
  uv_mutex_lock(&t->lock);
  g = t->current;
  if (g != NULL)
    g->refs++;
  uv_mutex_unlock(&t->lock);
  return g;
}

void tern__tls_release(tern__tls_gen *g) {
  int last;
  if (g == NULL)
    return;
  uv_mutex_lock(&g->tls->lock);
  last = --g->refs == 0;
  uv_mutex_unlock(&g->tls->lock);
  if (last)
    gen_free(g);
}

int tern_tls_commit(tern_tls *t) {
  tern_server *srv;
  tern__tls_gen *g, *old;
  int rc;

  if (t == NULL)
    return TERN_EINVAL;
  srv = t->srv;
  if (t->npending == 0)
    return TERN_ESTATE;
  g = tern__malloc(srv, sizeof(*g));
  if (g == NULL)
    return TERN_ENOMEM;
  memset(g, 0, sizeof(*g));
  g->tls = t;
  g->refs = 1; /* the tern_tls's own */
  g->engine = engine_of(t);
  g->min_version = t->min_version;
  g->client_mode = t->client_mode;
  /* The pending pairs move into the generation; they never move again,
   * so pointers an engine keeps into them stay valid. */
  g->pairs = t->pending;
  g->npairs = t->npending;
  t->pending = NULL;
  t->npending = t->cap = 0;
  rc = g->engine->gen_build(t, g);
  if (rc != 0) {
    gen_free(g);
    return rc;
  }
  uv_mutex_lock(&t->lock);
  old = t->current;
  t->current = g;
  uv_mutex_unlock(&t->lock);
  tern__tls_release(old);
  return 0;
}

int tern__tls_ready(const tern_tls *t) {
  return t->current != NULL;
}

const tern__filter *tern__tls_filter_of(const tern_tls *t) {
  return engine_of(t)->filter;
}

void tern__tls_free_all(tern_server *srv) {
  while (srv->tls_list != NULL) {
    tern_tls *t = srv->tls_list;
    size_t i;
    srv->tls_list = t->next;
    tern__tls_release(t->current);
    for (i = 0; i < t->npending; i++)
      pair_free(t, &t->pending[i]);
    tern__free(srv, t->pending);
    tern__free(srv, t->client_ca);
    free_state(t);
    uv_mutex_destroy(&t->lock);
    tern__free(srv, t);
  }
}

int tern__tls_next_record(tern__worker *w, tern__outq *q, const char **src,
                          size_t *len) {
  uv_buf_t iov[16];
  size_t n = tern__outq_iov(q, iov, 16), i;

  if (n == 0) {
    tern__outq_consume(w, q, 0); /* markers only */
    return 1;
  }
  if (iov[0].len >= TERN__TLS_RECORD || n == 1) {
    *src = iov[0].base;
    *len = iov[0].len < TERN__TLS_RECORD ? iov[0].len : TERN__TLS_RECORD;
    return 0;
  }
  /* The worker's gathering buffer: the TLS service's slot. */
  if (w->svc[TERN__SVC_TLS] == NULL &&
      (w->svc[TERN__SVC_TLS] = tern__malloc(w->srv, TERN__TLS_RECORD)) == NULL)
    return TERN_ENOMEM;
  *len = 0;
  for (i = 0; i < n && *len < TERN__TLS_RECORD; i++) {
    size_t k = iov[i].len;
    if (k > TERN__TLS_RECORD - *len)
      k = TERN__TLS_RECORD - *len;
    memcpy((char *)w->svc[TERN__SVC_TLS] + *len, iov[i].base, k);
    *len += k;
  }
  *src = w->svc[TERN__SVC_TLS];
  return 0;
}

/* The TLS service: one record's worth of gathering room per worker, got
 * on first use, freed when the worker ends. */
static void tls_cleanup(tern__worker *w) {
  tern__free(w->srv, w->svc[TERN__SVC_TLS]);
  w->svc[TERN__SVC_TLS] = NULL;
}

const tern__service tern__tls_service = {
    .name = "tls",
    .slot = TERN__SVC_TLS,
    .cleanup = tls_cleanup,
};

void tern__tls_in_room(tern__tls_in *in, tern__worker *w, uv_buf_t *out) {
  if (in->buf == NULL) {
    in->buf = tern__rbuf_get(w);
    in->pos = in->len = 0;
    if (in->buf == NULL) {
      *out = uv_buf_init(NULL, 0);
      return;
    }
  }
  if (in->pos > 0) {
    memmove(in->buf->data, in->buf->data + in->pos, in->len - in->pos);
    in->len -= in->pos;
    in->pos = 0;
  }
  *out =
      uv_buf_init(in->buf->data + in->len, (unsigned)(in->buf->cap - in->len));
}

void tern__tls_in_received(tern__tls_in *in, size_t n) {
  size_t i;
  if (n == 0)
    in->pos = in->len = 0;
  for (i = 0; i < n && in->nhd < sizeof(in->hd); i++)
    in->hd[in->nhd++] = (uint8_t)in->buf->data[in->len + i];
  in->len += n;
}

int tern__tls_in_refused(const tern__tls_in *in) {
  size_t len;
  if ((in->nhd > 0 && in->hd[0] != 22) || (in->nhd > 1 && in->hd[1] != 3))
    return 1;
  if (in->nhd < 5)
    return 0;
  len = (size_t)in->hd[3] << 8 | in->hd[4];
  return len == 0 || len > 16384;
}

size_t tern__tls_in_take(tern__tls_in *in, void *dst, size_t len) {
  size_t avail = in->buf != NULL ? in->len - in->pos : 0;
  if (len > avail)
    len = avail;
  if (len > 0) {
    memcpy(dst, in->buf->data + in->pos, len);
    in->pos += len;
  }
  return len;
}

void tern__tls_in_idle(tern__tls_in *in, tern__worker *w) {
  if (in->buf != NULL && in->pos == in->len) {
    tern__rbuf_unref(w, in->buf);
    in->buf = NULL;
    in->pos = in->len = 0;
  }
}
