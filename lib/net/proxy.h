/* The PROXY protocol (HAProxy's, versions 1 and 2), sans I/O: a load
 * balancer in front of tern opens each connection with a header that
 * names the client it accepted. tern__proxy_parse reads that header from
 * the first bytes of a connection; lib/net/stream.c feeds it and applies
 * what it found (the peer address), lib/net/tcp.c keeps a listener's
 * trusted sources (tern__proxy_trusted). Neither touches a socket, so
 * the unit tests and the fuzz target drive them directly.
 */
#ifndef TERN_NET_PROXY_H
#define TERN_NET_PROXY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The longest header tern takes: a v1 line is at most 107 bytes; a v2
 * header carries TLVs, which a load balancer keeps small (the SSL TLV
 * with a client certificate's CN, an ALPN id, an authority). A longer one
 * closes the connection. */
#define TERN__PROXY_MAX 1024
/* The most trusted networks a listener keeps. */
#define TERN__PROXY_NETS 64

enum {
  TERN__PROXY_MORE = 0,  /* a prefix of a header: read more */
  TERN__PROXY_BAD = -1,  /* not a header, or a malformed one */
  TERN__PROXY_LONG = -2, /* longer than TERN__PROXY_MAX */
};

/* What a header says. Views point into the parsed bytes. */
typedef struct {
  int version; /* 1 or 2 */
  /* 1: keep the connection's own addresses (v2 LOCAL, a v1 UNKNOWN, a
   * v2 PROXY of an unspecified or Unix family). */
  int local;
  struct sockaddr_storage src, dst; /* the client's and the one it reached */
  /* v2 TLVs, NULL/0 when absent. */
  const char *alpn, *authority, *ssl_version, *ssl_cn;
  size_t alpn_len, authority_len, ssl_version_len, ssl_cn_len;
  int ssl; /* the SSL TLV says the client spoke TLS to the balancer */
} tern__proxy_hdr;

/* Parse the header at the start of buf[0 .. len): its length (> 0),
 * TERN__PROXY_MORE when buf is a proper prefix of one (len < MAX), or
 * TERN__PROXY_BAD / TERN__PROXY_LONG. A first byte that can open neither
 * version is BAD at once. */
int tern__proxy_parse(const char *buf, size_t len, tern__proxy_hdr *h);

/* A trusted source network: address bytes (4 or 16) and prefix bits. */
typedef struct {
  uint16_t family;
  uint8_t bits;
  unsigned char addr[16];
} tern__proxy_net;

/* Parse a comma-separated list of CIDRs ("127.0.0.1/32, ::1, 10.0.0.0/8";
 * a bare address is a host) into nets[0 .. max); the count, or -1. */
int tern__proxy_nets(const char *list, tern__proxy_net *nets, size_t max);
/* Is the address (family, bytes) inside one of nets[0 .. n)? An IPv4
 * address mapped into IPv6 (::ffff:a.b.c.d) is checked as IPv4 too. */
int tern__proxy_trusted(const tern__proxy_net *nets, size_t n, int family,
                        const unsigned char *addr);

/* A listener's PROXY configuration: the sources it takes a header from;
 * a connection from any other is closed at accept. */
typedef struct {
  tern__proxy_net *nets;
  size_t nnets;
} tern__proxy_cfg;

#endif
