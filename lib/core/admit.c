/* Admission per client address: how many connections one address may
 * hold open and how fast it may send requests (tern_settings version 4).
 *
 * One table for the server, since an address's connections land on any
 * worker: a set-associative hash of SETS x WAYS entries, each set under
 * one of STRIPES mutexes (taken once per accepted connection, close and,
 * with a rate, request). Its size is fixed at start: an address flood
 * cannot grow it. A new address takes a free way, else the way of the
 * address seen longest ago that holds no connection; when every way of
 * its set holds connections it goes untracked (let in, its connection
 * not counted): forgetting is bounded by the table, never by the flood.
 * IPv6 addresses count by /64, what one host or subscriber gets. The
 * rate is a token bucket per address, in thousandths of a request. */
#include <stdatomic.h>
#include <string.h>

#include "core/admit.h"
#include "core/worker.h"

#define WAYS 4
#define STRIPES 64

typedef struct {
  unsigned char key[9]; /* family byte, then 8 address bytes */
  unsigned char used;
  uint32_t conns;
  uint64_t tokens; /* thousandths of a request */
  uint64_t refill; /* ms, monotonic: when tokens were last counted */
  uint64_t seen;   /* ms: the last connection or request (which to forget) */
} entry;

struct tern__admit {
  uint32_t max_conns, rate, burst;
  size_t nsets;
  uv_mutex_t locks[STRIPES];
  _Atomic uint64_t refused_conns, refused_rate;
  entry *sets; /* nsets * WAYS */
};

static uint64_t now_ms(void) {
  return uv_hrtime() / 1000000u;
}

/* The key of an address: IPv4 (also mapped into IPv6) by all of it, IPv6
 * by its /64. 0 for an address of no IP family. */
static int key_of(const tern__addr *p, unsigned char key[9]) {
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0,    0,
                                           0, 0, 0, 0, 0xff, 0xff};
  memset(key, 0, 9);
  if (p->family == AF_INET ||
      (p->family == AF_INET6 && memcmp(p->addr, mapped, 12) == 0)) {
    key[0] = 4;
    memcpy(key + 1, p->family == AF_INET ? p->addr : p->addr + 12, 4);
    return 1;
  }
  if (p->family == AF_INET6) {
    key[0] = 6;
    memcpy(key + 1, p->addr, 8);
    return 1;
  }
  return 0;
}

static size_t set_of(const tern__admit *a, const unsigned char key[9]) {
  uint64_t h = 14695981039346656037ull;
  int i;
  for (i = 0; i < 9; i++)
    h = (h ^ key[i]) * 1099511628211ull;
  return (size_t)(h ^ (h >> 29)) & (a->nsets - 1);
}

int tern__admit_new(tern_server *srv, tern__admit **out) {
  const tern_settings *s = &srv->s;
  tern__admit *a;
  size_t n = 4, i;
  *out = NULL;
  if (s->max_connections_per_ip == 0 && s->requests_per_ip_per_s == 0)
    return 0;
  while (n * WAYS < (s->ip_table_size ? s->ip_table_size : 65536u))
    n <<= 1;
  if ((a = tern__malloc(srv, sizeof *a)) == NULL)
    return TERN_ENOMEM;
  memset(a, 0, sizeof *a);
  if ((a->sets = tern__malloc(srv, n * WAYS * sizeof(entry))) == NULL) {
    tern__free(srv, a);
    return TERN_ENOMEM;
  }
  memset(a->sets, 0, n * WAYS * sizeof(entry));
  a->nsets = n;
  a->max_conns = s->max_connections_per_ip;
  a->rate = s->requests_per_ip_per_s;
  a->burst = s->request_burst ? s->request_burst : s->requests_per_ip_per_s;
  for (i = 0; i < STRIPES; i++)
    uv_mutex_init(&a->locks[i]);
  *out = a;
  return 0;
}

void tern__admit_free(tern_server *srv, tern__admit *a) {
  size_t i;
  if (a == NULL)
    return;
  for (i = 0; i < STRIPES; i++)
    uv_mutex_destroy(&a->locks[i]);
  tern__free(srv, a->sets);
  tern__free(srv, a);
}

/* The address's entry in its (locked) set, made if need be; NULL when
 * every way holds connections of other addresses. */
static entry *find(tern__admit *a, size_t set, const unsigned char key[9],
                   uint64_t now, int make) {
  entry *e = a->sets + set * WAYS, *room = NULL;
  int i;
  for (i = 0; i < WAYS; i++) {
    if (e[i].used && memcmp(e[i].key, key, 9) == 0)
      return &e[i];
    if (!e[i].used)
      room = room != NULL && !room->used ? room : &e[i];
    else if (e[i].conns == 0 &&
             (room == NULL || (room->used && e[i].seen < room->seen)))
      room = &e[i];
  }
  if (!make || room == NULL)
    return NULL;
  memset(room, 0, sizeof *room);
  memcpy(room->key, key, 9);
  room->used = 1;
  room->tokens = (uint64_t)a->burst * 1000u;
  room->refill = room->seen = now;
  return room;
}

int tern__admit_conn(tern__admit *a, const tern__addr *peer) {
  unsigned char key[9];
  size_t set;
  entry *e;
  int ok = 1;
  if (a == NULL || !key_of(peer, key))
    return 2;
  set = set_of(a, key);
  uv_mutex_lock(&a->locks[set % STRIPES]);
  e = find(a, set, key, now_ms(), 1);
  if (e == NULL)
    ok = 2; /* untracked: let in, not counted */
  else if (a->max_conns != 0 && e->conns >= a->max_conns)
    ok = 0;
  else
    e->conns++;
  if (e != NULL)
    e->seen = now_ms();
  uv_mutex_unlock(&a->locks[set % STRIPES]);
  if (ok == 0)
    atomic_fetch_add_explicit(&a->refused_conns, 1, memory_order_relaxed);
  return ok;
}

void tern__admit_release(tern__admit *a, const tern__addr *peer) {
  unsigned char key[9];
  size_t set;
  entry *e;
  if (a == NULL || !key_of(peer, key))
    return;
  set = set_of(a, key);
  uv_mutex_lock(&a->locks[set % STRIPES]);
  /* An entry with connections is never taken by another address. */
  if ((e = find(a, set, key, 0, 0)) != NULL && e->conns > 0)
    e->conns--;
  uv_mutex_unlock(&a->locks[set % STRIPES]);
}

unsigned tern__admit_request(tern__admit *a, const tern__addr *peer) {
  unsigned char key[9];
  uint64_t now, cap;
  size_t set;
  entry *e;
  unsigned wait = 0;
  if (a == NULL || a->rate == 0 || !key_of(peer, key))
    return 0;
  set = set_of(a, key);
  now = now_ms();
  cap = (uint64_t)a->burst * 1000u;
  uv_mutex_lock(&a->locks[set % STRIPES]);
  if ((e = find(a, set, key, now, 1)) != NULL) {
    /* rate requests a second: rate thousandths a millisecond. */
    e->tokens += (now - e->refill) * a->rate;
    if (e->tokens > cap)
      e->tokens = cap;
    e->refill = e->seen = now;
    if (e->tokens >= 1000)
      e->tokens -= 1000;
    else
      wait = (unsigned)((1000 - e->tokens + (uint64_t)a->rate * 1000 - 1) /
                        ((uint64_t)a->rate * 1000));
  }
  uv_mutex_unlock(&a->locks[set % STRIPES]);
  if (wait != 0)
    atomic_fetch_add_explicit(&a->refused_rate, 1, memory_order_relaxed);
  return wait;
}

void tern__admit_counts(const tern__admit *a, uint64_t *conns, uint64_t *rate) {
  *conns = a != NULL ? atomic_load(&((tern__admit *)a)->refused_conns) : 0;
  *rate = a != NULL ? atomic_load(&((tern__admit *)a)->refused_rate) : 0;
}
