/* The connection head every transport's connection embeds
 * (lib/core/conn.c). */
#ifndef TERN_CORE_CONN_H
#define TERN_CORE_CONN_H

#include "core/timer.h"
#include "core/proto.h"

/* ---- Connections: the head every transport's connection embeds ---- */

/* The head's flags. The low byte is the core's; bits from
 * TERN__C_TRANSPORT up are the transport's own (lib/net/stream.h). */
enum {
  TERN__C_CLOSING = 1u << 0,     /* closing: nothing more happens */
  TERN__C_DIRTY = 1u << 1,       /* on the worker's dirty list */
  TERN__C_CLOSE_AFTER = 1u << 2, /* close once output is written */
  TERN__C_STOPPING = 1u << 3,    /* graceful stop seen */
  TERN__C_REPROCESS = 1u << 4,   /* run the adapter's input again */
  TERN__C_IN_READ = 1u << 5,     /* inside the adapter's input */
  TERN__C_OUTPUT = 1u << 6,      /* run the adapter's output */
  TERN__C_EOF = 1u << 7,         /* the peer finished sending */
  TERN__C_TRANSPORT = 1u << 8,
};

/* A verified TLS client certificate (lib/tls): its subject, then its DER
 * bytes, in this one block. */
typedef struct tern__client_id {
  size_t dn_len, der_len;
  char *dn;           /* NUL-terminated, in data */
  unsigned char *der; /* in data, after the DN */
  char data[];
} tern__client_id;

/* A socket address kept small (an idle connection holds two): the family
 * (AF_INET, AF_INET6, or 0 when unknown), the port in host order and the
 * address bytes. */
typedef struct {
  uint16_t family;
  uint16_t port;
  unsigned char addr[16];
} tern__addr;

void tern__addr_set(tern__addr *a, const struct sockaddr *sa);

/* A transport family (lib/net: a byte stream over TCP; later QUIC over
 * UDP): what the core asks of a connection it counts, times, flushes and
 * closes without knowing how its bytes move. */
typedef struct {
  const char *name; /* "tcp" */
  /* Its connections come from the worker's pool `pool` (tern__transports
   * lists them, for the worker to set its pools up). */
  unsigned pool;
  size_t conn_size;
  /* Run the adapter over input waiting below it (TERN__C_REPROCESS). */
  void (*process)(tern__conn *c);
  /* Run the adapter's output (TERN__C_OUTPUT), unless the connection is
   * past it (a lingering close, whose reading the adapter must not stop). */
  void (*output)(tern__conn *c);
  /* Put pending output on the wire (from the check phase). */
  void (*flush)(tern__conn *c);
  /* Start (on) or stop reading. */
  void (*input)(tern__conn *c, int on);
  /* Bytes below the adapter not yet on the wire. */
  size_t (*buffered)(const tern__conn *c);
  /* One of the transport's own timers (WRITE, LINGER) fired. */
  void (*timeout)(tern__conn *c, int kind);
  /* Close now: the core has failed what was in flight. */
  void (*close)(tern__conn *c);
  /* The last reference went: back to the pool. */
  void (*free)(tern__conn *c);
  /* A close left for later (tern__conn_close_later) completes. */
  void (*closed)(tern__conn *c);
} tern__transport;

enum { TERN__POOL_STREAM = 0, TERN__POOL_QUIC, TERN__POOL_COUNT };

/* The transports the build has, NULL-terminated (lib/protocols.c). */
extern const tern__transport *const tern__transports[];

/* The connection head. The core counts, refcounts, times, flushes and
 * closes connections through it and never reads or writes their bytes. */
struct tern__conn {
  tern__worker *w;
  const tern__transport *tp;
  const tern__proto *proto;
  unsigned flags;
  int refs;          /* the connection itself + each live request */
  tern__timer timer; /* the kind its adapter chooses (timer.c) */
  tern__list dirty_link;
  tern__list all_link;
  int tls_version;      /* TERN_TLS_1_2 / _1_3 once a handshake finished */
  uint32_t compressors; /* its streamed compressors open (compress.c) */
  int counted_proto;    /* its index in the open-connection counts, or -1 */
  int admitted;         /* counted against its address's limit (admit.c) */
  tern__client_id *client_id; /* a verified client certificate, or NULL */
  const char *tls_cipher;     /* the engine's static name, or NULL */
  /* Stored at accept: any thread holding a request may read them, also
   * after the socket has closed (and its descriptor been reused). */
  tern__addr peer, local;
  /* A PROXY v2 header's TLVs, kept as long as the connection (NULL when
   * it had none): read like peer and local. */
  struct tern__proxy_tlvs *proxy;
};

/* One block: this struct, then the TLV values it points to. */
typedef struct tern__proxy_tlvs {
  int ssl; /* the client spoke TLS to the balancer */
  const char *alpn, *authority, *ssl_version, *ssl_cn;
  size_t alpn_len, authority_len, ssl_version_len, ssl_cn_len;
} tern__proxy_tlvs;

/* A new connection of transport `tp` on worker `w`, taken into the
 * worker's counts (NULL: no memory). The transport fills in the rest
 * and starts it with tern__conn_start. */
tern__conn *tern__conn_new(tern__worker *w, const tern__transport *tp);
/* Give back a connection that never started. */
void tern__conn_discard(tern__conn *c);
/* The connection is ready: count it, start its head timer. */
void tern__conn_start(tern__conn *c);
void tern__conn_mark_dirty(tern__conn *c);
/* The transport is flushing now: a connection marked dirty only to be
 * flushed leaves the dirty list. */
static inline void tern__conn_clean(tern__conn *c) {
  if ((c->flags & (TERN__C_DIRTY | TERN__C_REPROCESS | TERN__C_OUTPUT)) ==
      TERN__C_DIRTY) {
    tern__list_remove(&c->dirty_link);
    c->flags &= ~(unsigned)TERN__C_DIRTY;
  }
}
/* Ask for the adapter's input (REPROCESS) or output to run soon. */
void tern__conn_reprocess(tern__conn *c);
void tern__conn_want_output(tern__conn *c);
static inline void tern__conn_process(tern__conn *c) {
  c->tp->process(c);
}
static inline void tern__conn_flush(tern__conn *c) {
  c->tp->flush(c);
}
static inline size_t tern__conn_buffered(const tern__conn *c) {
  return c->tp->buffered(c);
}
/* Close now: the adapter fails what is in flight, the transport lets go
 * of the socket. */
void tern__conn_close(tern__conn *c);
/* The connection's client address (c->peer) is final: count it against
 * that address's open connections (tern_settings'
 * max_connections_per_ip); 0 when it is over the limit: close it. */
int tern__conn_admit(tern__conn *c);
/* The transport has let go of the closed connection's socket: it no
 * longer counts as active, and drops its own reference. */
void tern__conn_closed(tern__conn *c);
/* The transport closed a connection that had no libuv handle to close
 * (its socket never waited in epoll): the transport's `closed` runs once
 * the calls that closed it have returned, in this loop turn's check
 * phase (or the next turn's), as a handle's close callback would. */
void tern__conn_close_later(tern__conn *c);
/* The connection speaks `p` from now on (an adapter's attach): its
 * open-connection count moves with it. */
void tern__conn_set_proto(tern__conn *c, const tern__proto *p);
/* Is a connection marked TERN__C_CLOSE_AFTER done (nothing in flight)? */
static inline int tern__conn_done(const tern__conn *c) {
  return (c->flags & TERN__C_CLOSE_AFTER) && c->proto->busy(c) == 0;
}
/* The connection's timer (c->timer) as a node (tern__conn_new), armed
 * with `kind` or disarmed (TERN__T_NONE), or taken off its list
 * (closing: nothing may fire). */
void tern__conn_timer_init(tern__conn *c);
void tern__conn_timer(tern__conn *c, int kind);
/* Arm `kind`, as an adapter's timer() chose it for the connection's
 * state, unless a timer of that kind runs already and must not be
 * re-armed: HEAD runs from the head's first byte (a client trickling a
 * head must not extend it), BODY re-arms only on data. 1 when it was
 * armed. */
static inline int tern__conn_timer_choose(tern__conn *c, int kind) {
  if (kind == c->timer.kind && (kind == TERN__T_HEAD || kind == TERN__T_BODY))
    return 0;
  tern__conn_timer(c, kind);
  return 1;
}
/* The connection's timer fired: the transport's own kinds go to it, the
 * others to the adapter's timeout, or a close. */
void tern__conn_timeout(tern__conn *c, int kind);
void tern__conn_timer_stop(tern__conn *c);
void tern__conn_unref(tern__conn *c);

#endif
