/* TLS in tern: one certificate store (lib/tls/tls.c) and the engines
 * behind it (lib/tls/mbedtls.c: TLS 1.2; lib/tls/gnutls.c: TLS 1.3 and
 * 1.2). Each engine gives a byte-stream filter (net/filter.h's
 * tern__filter) that sits between a connection's socket and its protocol
 * adapter and never sees the socket: it reads ciphertext from a buffer the
 * transport fills and writes records into a queue the transport sends.
 *
 * The store is engine-neutral. A pair (certificate chain and key) is read
 * and checked once, when added, by every engine the build has, so that a
 * bad file is an error at configuration time under either; its names
 * (DNS names of the subject alternative names, else the subject's CN)
 * are taken out once, so SNI picks the same certificate whichever engine
 * serves the connection. tern_tls_commit makes the pairs added since the
 * last commit a generation, with the state its engine needs, and makes it
 * current; a connection keeps the generation its handshake started with
 * (refcounted), so a reload never drops a live connection.
 */
#ifndef TERN_TLS_H
#define TERN_TLS_H

#include "net/filter.h"
#include "core/worker.h"

enum {
  TERN__TLS_MBEDTLS = 0,
  TERN__TLS_GNUTLS = 1,
  TERN__TLS_ENGINES,
};

/* A name a certificate is valid for ("*." wildcards allowed). */
typedef struct {
  char *name;
  size_t len;
} tern__tls_name;

/* A certificate chain and its key, as added. */
typedef struct {
  char *cert, *key;                 /* the file's bytes, NUL added (counted) */
  size_t cert_len, key_len;         /* with the NUL */
  const char *cert_path, *key_path; /* for messages; NULL from memory */
  tern__tls_name *names;
  size_t nnames;
  void *eng[TERN__TLS_ENGINES]; /* each engine's parsed form */
} tern__tls_pair;

typedef struct tern__tls_engine tern__tls_engine;

/* Ciphertext read from the socket and not yet taken by the engine:
 * buf->data[pos .. len). Both engines' filters keep one. */
typedef struct {
  tern__rbuf *buf; /* NULL while nothing is buffered */
  size_t pos, len;
  /* The connection's first record header, as it arrives: a client's
   * first bytes must open a TLS handshake record (tern__tls_in_refused). */
  uint8_t hd[5];
  uint8_t nhd;
} tern__tls_in;

/* Where the next socket read goes (a filter's read_buf): the unread rest
 * moved to the front; an empty buffer when none can be had. */
void tern__tls_in_room(tern__tls_in *in, tern__worker *w, uv_buf_t *out);
/* n bytes arrived there (a filter's received); n == 0, from a lingering
 * close, drops what is buffered. */
void tern__tls_in_received(tern__tls_in *in, size_t n);
/* The connection's first bytes cannot open a TLS 1.2 or 1.3 ClientHello:
 * not a handshake record (type 22, version 3.x) of 1 to 2^14 bytes.
 * Checked before the engine sees them, so that junk is refused at once
 * under both engines: GnuTLS (built with SSL 2.0 hello support) would
 * read a first byte over 127 as an SSL 2.0 header and wait, until the
 * head timeout, for a length the junk never fills. */
int tern__tls_in_refused(const tern__tls_in *in);
/* Up to `len` buffered bytes into dst for the engine; 0 when none. */
size_t tern__tls_in_take(tern__tls_in *in, void *dst, size_t len);
static inline int tern__tls_in_waiting(const tern__tls_in *in) {
  return in->buf != NULL && in->pos < in->len;
}
/* Give an emptied buffer back: an idle connection holds no ciphertext
 * buffer (the caller checks the engine holds nothing either). */
void tern__tls_in_idle(tern__tls_in *in, tern__worker *w);

/* A generation: the pairs of one commit and the engine's configuration. */
typedef struct tern__tls_gen {
  int refs; /* under the owner's lock */
  tern_tls *tls;
  const tern__tls_engine *engine;
  int min_version; /* TERN_TLS_1_2 or TERN_TLS_1_3 */
  int client_mode; /* TERN_TLS_CLIENT_*, as committed */
  tern__tls_pair *pairs;
  size_t npairs;
  void *conf; /* the engine's */
} tern__tls_gen;

struct tern__tls_engine {
  const char *name; /* "mbedtls", "gnutls" */
  int id;           /* TERN__TLS_* */
  int max_version;  /* the highest it speaks */
  /* Per tern_tls state (random generator, session ticket keys). */
  int (*tls_init)(tern_tls *t, void **state);
  void (*tls_free)(tern_tls *t, void *state);
  /* Parse and check p's bytes into p->eng[id]; fill p->names when it is
   * still empty. Errors are logged, naming the file. */
  int (*pair_load)(tern_tls *t, tern__tls_pair *p);
  void (*pair_free)(tern_tls *t, tern__tls_pair *p);
  /* The engine's configuration of a generation (g->conf). */
  int (*gen_build)(tern_tls *t, tern__tls_gen *g);
  void (*gen_free)(tern__tls_gen *g);
  /* Its per-connection filter; the configuration is the tern_tls. */
  const tern__filter *filter;
  /* A server session for a new QUIC connection (a gnutls_session_t in
   * *session, holding a reference on the current generation, *gen, which
   * the caller releases after freeing the session), speaking only `alpn`,
   * TLS 1.3; no ticket is sent by itself. Early data (0-RTT) is accepted
   * when `anti_replay` (a gnutls_anti_replay_t of the caller's worker) is
   * not NULL. NULL: the engine cannot serve QUIC (only GnuTLS can,
   * through ngtcp2's crypto helper). */
  int (*quic_session)(tern_tls *t, void **session, tern__tls_gen **gen,
                      const char *alpn, void *anti_replay);
  /* Replace the session ticket key with the application's `len` bytes
   * (before the server runs), or with `previous` set, the key tickets
   * are still accepted under (rotation). NULL: the engine cannot. */
  int (*set_ticket_key)(tern_tls *t, void *state, const void *key, size_t len,
                        int previous);
};

struct tern_tls {
  tern_server *srv;
  tern_tls *next;
  uv_mutex_t lock;
  tern__tls_gen *current;
  tern__tls_pair *pending;
  size_t npending, cap;
  int engine;      /* the engine serving it: TERN__TLS_* */
  int min_version; /* TERN_TLS_1_* as set */
  char *client_ca; /* tern_tls_set_client_ca_file's file, or NULL */
  int client_mode; /* TERN_TLS_CLIENT_* */
  void *state[TERN__TLS_ENGINES];
};

/* The engines this build has, by id (NULL where one is not built). */
extern const tern__tls_engine *const tern__tls_engines[TERN__TLS_ENGINES];

/* The ALPN ids tern offers, most preferred first, NULL-terminated. */
extern const char *const tern__tls_alpn[];

/* A client certificate the handshake verified, for the connection
 * (c->client_id): its subject DN (NUL-terminated) and its DER bytes in
 * one block from the server's allocator; NULL when the client sent none.
 * GnuTLS sessions (TCP and QUIC) only. */
tern__client_id *tern__tls_gnutls_identity(void *session, tern_server *srv);

/* The current generation, with a reference for a new connection; NULL
 * before the first commit. */
tern__tls_gen *tern__tls_acquire(tern_tls *t);
void tern__tls_release(tern__tls_gen *g);
/* The pair whose names match `host` (SNI), or -1. */
int tern__tls_pick(const tern__tls_gen *g, const char *host, size_t len);
/* Log an engine's error about `what` (and the file, if any); returns
 * TERN_ETLS. */
int tern__tls_error(tern_tls *t, const char *what, const char *path,
                    const char *msg);
/* Add a name to a pair (engines, while loading it). */
int tern__tls_add_name(tern_tls *t, tern__tls_pair *p, const char *name,
                       size_t len);

/* The filter of a listener with `tls` (its engine's), for lib/net. */
const tern__filter *tern__tls_filter_of(const tern_tls *t);
int tern__tls_ready(const tern_tls *t);
/* The engine serving `t` ("gnutls", "mbedtls"): tern_tls_engine_name's,
 * for the library's own messages. */
const char *tern__tls_engine_label(const tern_tls *t);
/* Free every tern_tls of the server. */
void tern__tls_free_all(tern_server *srv);

/* The plaintext of the next record from the pending queue `q`: a piece
 * of a record's size or more as it is, smaller pieces (many HTTP/2
 * frames, a response head and its body) gathered into the worker's
 * scratch so that they make one record rather than one each. 0 with
 * *src and *len set (consume what the engine took); 1 when only markers
 * were pending (consumed: look again); TERN_ENOMEM. q must not be empty. */
int tern__tls_next_record(tern__worker *w, tern__outq *q, const char **src,
                          size_t *len);

/* Encryption stops while this much ciphertext waits for the socket. */
#define TERN__TLS_OUT_HIGH (64u * 1024)
#define TERN__TLS_RECORD 16384

#endif
