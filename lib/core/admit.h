/* Admission per client address (lib/core/admit.c): open connections and
 * a request rate per IPv4 address or IPv6 /64, shared by every worker. */
#ifndef TERN_CORE_ADMIT_H
#define TERN_CORE_ADMIT_H

#include "core/conn.h"

typedef struct tern__admit tern__admit;

/* The table for the settings' limits; NULL (and 0) when there are none.
 * TERN_ENOMEM. */
int tern__admit_new(tern_server *srv, tern__admit **out);
void tern__admit_free(tern_server *srv, tern__admit *a);

/* A connection from `peer` opens: 1 when it may (counted, and to be
 * released with tern__admit_release), 0 when its address has
 * max_connections_per_ip open already. An address of no IP family (a
 * Unix socket) is always let in, uncounted (returns 2: nothing to
 * release). */
int tern__admit_conn(tern__admit *a, const tern__addr *peer);
void tern__admit_release(tern__admit *a, const tern__addr *peer);

/* A request from `peer`: 0 when the rate allows it, else the seconds to
 * wait (Retry-After). */
unsigned tern__admit_request(tern__admit *a, const tern__addr *peer);

/* What the table refused, for tern_server_stats. */
void tern__admit_counts(const tern__admit *a, uint64_t *conns, uint64_t *rate);

#endif
