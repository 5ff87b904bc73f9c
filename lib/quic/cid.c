/* The CID maps of lib/quic (quic_int.h has the overview): per QUIC
 * listener and worker, a hash table from connection ID to connection,
 * with each connection's CIDs also on a list of its own; and the CIDs
 * the server makes, whose first byte names the owning worker and whose
 * second tags the key their stateless-reset token comes from.
 */
#include <string.h>

#include "quic/quic_int.h"

/* ---- The CID map ------------------------------------------------------ */

/* Client-chosen CIDs (a first Initial's DCID) are the peer's choice:
 * keyed with the listener's random key, so a client cannot aim them all
 * at one bucket. */
static size_t cid_hash(const quic_wl *wl, const uint8_t *p, size_t n) {
  uint64_t h = wl->l->hash_key ^ n;
  size_t i;
  for (i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return (size_t)(h & (wl->nbuckets - 1));
}

tern__quic *tern__quic_cid_find(const quic_wl *wl, const uint8_t *p, size_t n) {
  cid_node *c;
  if (wl->nbuckets == 0 || n == 0 || n > NGTCP2_MAX_CIDLEN)
    return NULL;
  for (c = wl->buckets[cid_hash(wl, p, n)]; c != NULL; c = c->next)
    if (c->len == n && memcmp(c->data, p, n) == 0)
      return c->q;
  return NULL;
}

static int cid_grow(quic_wl *wl) {
  size_t nb = wl->nbuckets ? wl->nbuckets * 2 : 64, i;
  cid_node **b = tern__malloc(wl->w->srv, nb * sizeof(*b)), **old;
  size_t oldn = wl->nbuckets;
  if (b == NULL)
    return TERN_ENOMEM;
  memset(b, 0, nb * sizeof(*b));
  old = wl->buckets;
  wl->buckets = b;
  wl->nbuckets = nb;
  for (i = 0; i < oldn; i++) {
    cid_node *c = old[i], *next;
    for (; c != NULL; c = next) {
      size_t h = cid_hash(wl, c->data, c->len);
      next = c->next;
      c->next = b[h];
      b[h] = c;
    }
  }
  tern__free(wl->w->srv, old);
  return 0;
}

int tern__quic_cid_add(tern__quic *q, const uint8_t *p, size_t n) {
  quic_wl *wl = q->wl;
  cid_node *c;
  size_t h;
  if (n == 0 || n > NGTCP2_MAX_CIDLEN)
    return TERN_EINVAL;
  if (tern__quic_cid_find(wl, p, n) != NULL)
    return TERN_EEXIST;
  if (wl->ncids >= wl->nbuckets && cid_grow(wl) != 0 && wl->nbuckets == 0)
    return TERN_ENOMEM;
  c = tern__small_malloc(wl->w, sizeof(*c));
  if (c == NULL)
    return TERN_ENOMEM;
  c->q = q;
  c->len = (uint8_t)n;
  memcpy(c->data, p, n);
  h = cid_hash(wl, p, n);
  c->next = wl->buckets[h];
  wl->buckets[h] = c;
  c->conn_next = q->cids;
  q->cids = c;
  wl->ncids++;
  return 0;
}

static void cid_unlink(quic_wl *wl, cid_node *c) {
  cid_node **pp = &wl->buckets[cid_hash(wl, c->data, c->len)];
  while (*pp != NULL && *pp != c)
    pp = &(*pp)->next;
  if (*pp == c)
    *pp = c->next;
  wl->ncids--;
}

void tern__quic_cid_remove(tern__quic *q, const uint8_t *p, size_t n) {
  cid_node **pp = &q->cids;
  while (*pp != NULL) {
    cid_node *c = *pp;
    if (c->len == n && memcmp(c->data, p, n) == 0) {
      *pp = c->conn_next;
      cid_unlink(q->wl, c);
      tern__small_free(q->wl->w, c);
      return;
    }
    pp = &c->conn_next;
  }
}

void tern__quic_cid_remove_all(tern__quic *q) {
  while (q->cids != NULL) {
    cid_node *c = q->cids;
    q->cids = c->conn_next;
    cid_unlink(q->wl, c);
    tern__small_free(q->wl->w, c);
  }
}

/* A CID of ours: the worker's index first, then the tag of the key its
 * reset token comes from, the rest random. */
void tern__quic_new_cid(const quic_wl *wl, ngtcp2_cid *cid) {
  uint8_t b[QUIC_CIDLEN];
  tern__quic_rand_bytes(b, sizeof(b));
  b[0] = (uint8_t)wl->w->id;
  b[1] = wl->l->tag;
  ngtcp2_cid_init(cid, b, sizeof(b));
}

/* The key a CID's reset token was derived from: the previous one for a
 * CID that carries its tag (and not the current one's: on a clash, the
 * current key wins). */
const uint8_t *tern__quic_reset_key(const quic_listener *l, const uint8_t *cid,
                                    size_t len) {
  if (l->has_prev && len == QUIC_CIDLEN && cid[1] == l->prev_tag &&
      cid[1] != l->tag)
    return l->prev;
  return l->secret;
}
