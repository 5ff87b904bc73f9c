/* What lib/net's listeners share, TCP (tcp.c) and UDP (udp.c): the
 * address a listener is given, and the port it was bound to. Defined in
 * tcp.c, which every build has (UDP only comes with QUIC).
 */
#ifndef TERN_NET_NET_H
#define TERN_NET_NET_H

#include <netinet/in.h>
#include <sys/socket.h>

#include "core/base.h"

/* A listener's address: an IPv4 or IPv6 literal, "localhost" (IPv4's),
 * or NULL for the IPv6 wildcard (which takes IPv4 too); TERN_EADDR. */
int tern__net_addr(const char *host, int port, struct sockaddr_storage *ss);
/* The port of an IPv4 or IPv6 address, in host order. */
int tern__net_port(const struct sockaddr_storage *ss);

#endif
