/* The PROXY protocol header parser (versions 1 and 2) and the trusted
 * source networks of a listener; see proxy.h. Follows HAProxy's
 * specification (doc/proxy-protocol.txt): v1 is one text line of at most
 * 107 bytes, v2 a 16-byte binary head, the addresses and TLVs.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "net/proxy.h"

static const char v1_sig[6] = "PROXY ";
static const unsigned char v2_sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                         0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

#define V1_MAX 107

/* Does buf[0 .. len) agree with sig as far as both go? */
static int prefix_of(const void *buf, size_t len, const void *sig, size_t n) {
  return memcmp(buf, sig, len < n ? len : n) == 0;
}

/* One v1 address token: text[0 .. n) as `family` into sa. */
static int v1_addr(const char *text, size_t n, int family,
                   struct sockaddr_storage *ss, int port) {
  char tmp[INET6_ADDRSTRLEN];
  if (n == 0 || n >= sizeof(tmp))
    return -1;
  memcpy(tmp, text, n);
  tmp[n] = '\0';
  memset(ss, 0, sizeof(*ss));
  if (family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, tmp, &in->sin_addr) == 1 ? 0 : -1;
  }
  {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    return inet_pton(AF_INET6, tmp, &in6->sin6_addr) == 1 ? 0 : -1;
  }
}

/* A v1 port: 1 to 5 digits, no leading zero, at most 65535; -1. */
static int v1_port(const char *p, size_t n) {
  int v = 0;
  size_t i;
  if (n == 0 || n > 5 || (n > 1 && p[0] == '0'))
    return -1;
  for (i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9')
      return -1;
    v = v * 10 + (p[i] - '0');
  }
  return v <= 65535 ? v : -1;
}

static int parse_v1(const char *buf, size_t len, tern__proxy_hdr *h) {
  const char *end, *tok[5];
  size_t toklen[5], i, ntok = 0, lim = len < V1_MAX ? len : V1_MAX;
  const char *p, *eol = NULL;
  int family, sport, dport;

  for (i = sizeof(v1_sig); i + 1 < lim; i++) {
    if (buf[i] == '\r') {
      if (buf[i + 1] != '\n')
        return TERN__PROXY_BAD;
      eol = buf + i;
      break;
    }
    if (buf[i] == '\n' || buf[i] == '\0')
      return TERN__PROXY_BAD;
  }
  if (eol == NULL) {
    if (len >= V1_MAX ||
        (lim > 0 && (buf[lim - 1] == '\n' || buf[lim - 1] == '\0')))
      return TERN__PROXY_BAD;
    return TERN__PROXY_MORE;
  }
  memset(h, 0, sizeof(*h));
  h->version = 1;
  p = buf + sizeof(v1_sig);
  if ((size_t)(eol - p) >= 7 && memcmp(p, "UNKNOWN", 7) == 0) {
    /* The balancer cannot name the client: anything may follow. */
    if (eol - p > 7 && p[7] != ' ')
      return TERN__PROXY_BAD;
    h->local = 1;
    return (int)(eol + 2 - buf);
  }
  /* "TCP4 src dst sport dport": five tokens, single spaces. */
  end = eol;
  while (p < end && ntok < 5) {
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    const char *te = sp != NULL ? sp : end;
    tok[ntok] = p;
    toklen[ntok++] = (size_t)(te - p);
    if (sp == NULL) {
      p = end;
      break;
    }
    p = sp + 1;
    if (p == end)
      return TERN__PROXY_BAD; /* a trailing space */
  }
  if (ntok != 5 || p != end)
    return TERN__PROXY_BAD;
  if (toklen[0] == 4 && memcmp(tok[0], "TCP4", 4) == 0)
    family = AF_INET;
  else if (toklen[0] == 4 && memcmp(tok[0], "TCP6", 4) == 0)
    family = AF_INET6;
  else
    return TERN__PROXY_BAD;
  sport = v1_port(tok[3], toklen[3]);
  dport = v1_port(tok[4], toklen[4]);
  if (sport < 0 || dport < 0 ||
      v1_addr(tok[1], toklen[1], family, &h->src, sport) != 0 ||
      v1_addr(tok[2], toklen[2], family, &h->dst, dport) != 0)
    return TERN__PROXY_BAD;
  return (int)(eol + 2 - buf);
}

/* CRC-32C (Castagnoli), bitwise: a header is checked once per
 * connection, when the balancer sends the TLV at all. */
static uint32_t crc32c(uint32_t crc, const unsigned char *p, size_t n,
                       size_t skip_at) {
  size_t i;
  int k;
  crc = ~crc;
  for (i = 0; i < n; i++) {
    unsigned char b = i >= skip_at && i < skip_at + 4 ? 0 : p[i];
    crc ^= b;
    for (k = 0; k < 8; k++)
      crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

enum {
  PP2_TYPE_ALPN = 0x01,
  PP2_TYPE_AUTHORITY = 0x02,
  PP2_TYPE_CRC32C = 0x03,
  PP2_TYPE_SSL = 0x20,
  PP2_SUBTYPE_SSL_VERSION = 0x21,
  PP2_SUBTYPE_SSL_CN = 0x22,
};

/* The sub-TLVs of an SSL TLV's value after its 5-byte head. */
static int ssl_tlvs(const unsigned char *p, size_t n, tern__proxy_hdr *h) {
  while (n > 0) {
    size_t vlen;
    if (n < 3)
      return -1;
    vlen = (size_t)p[1] << 8 | p[2];
    if (vlen > n - 3)
      return -1;
    if (p[0] == PP2_SUBTYPE_SSL_VERSION) {
      h->ssl_version = (const char *)p + 3;
      h->ssl_version_len = vlen;
    } else if (p[0] == PP2_SUBTYPE_SSL_CN) {
      h->ssl_cn = (const char *)p + 3;
      h->ssl_cn_len = vlen;
    }
    p += 3 + vlen;
    n -= 3 + vlen;
  }
  return 0;
}

static int parse_v2(const unsigned char *buf, size_t len, tern__proxy_hdr *h) {
  size_t total, alen, off;
  int cmd, fam, proto;

  if (len < 16)
    return TERN__PROXY_MORE;
  if ((buf[12] >> 4) != 2)
    return TERN__PROXY_BAD;
  cmd = buf[12] & 0x0F;
  fam = buf[13] >> 4;
  proto = buf[13] & 0x0F;
  if (cmd > 1 || fam > 3 || proto > 2)
    return TERN__PROXY_BAD;
  total = 16 + ((size_t)buf[14] << 8 | buf[15]);
  if (total > TERN__PROXY_MAX)
    return TERN__PROXY_LONG;
  if (len < total)
    return TERN__PROXY_MORE;
  alen = fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0;
  if (total - 16 < alen)
    return TERN__PROXY_BAD;
  memset(h, 0, sizeof(*h));
  h->version = 2;
  if (cmd == 0 || fam == 0 || fam == 3) {
    h->local = 1; /* a health check, or an address tern cannot use */
  } else if (fam == 1) {
    struct sockaddr_in *s = (struct sockaddr_in *)&h->src;
    struct sockaddr_in *d = (struct sockaddr_in *)&h->dst;
    s->sin_family = d->sin_family = AF_INET;
    memcpy(&s->sin_addr, buf + 16, 4);
    memcpy(&d->sin_addr, buf + 20, 4);
    memcpy(&s->sin_port, buf + 24, 2);
    memcpy(&d->sin_port, buf + 26, 2);
  } else {
    struct sockaddr_in6 *s = (struct sockaddr_in6 *)&h->src;
    struct sockaddr_in6 *d = (struct sockaddr_in6 *)&h->dst;
    s->sin6_family = d->sin6_family = AF_INET6;
    memcpy(&s->sin6_addr, buf + 16, 16);
    memcpy(&d->sin6_addr, buf + 32, 16);
    memcpy(&s->sin6_port, buf + 48, 2);
    memcpy(&d->sin6_port, buf + 50, 2);
  }
  for (off = 16 + alen; off < total;) {
    const unsigned char *v;
    size_t vlen;
    if (total - off < 3)
      return TERN__PROXY_BAD;
    vlen = (size_t)buf[off + 1] << 8 | buf[off + 2];
    if (vlen > total - off - 3)
      return TERN__PROXY_BAD;
    v = buf + off + 3;
    switch (buf[off]) {
    case PP2_TYPE_ALPN:
      h->alpn = (const char *)v;
      h->alpn_len = vlen;
      break;
    case PP2_TYPE_AUTHORITY:
      h->authority = (const char *)v;
      h->authority_len = vlen;
      break;
    case PP2_TYPE_CRC32C: {
      uint32_t want;
      if (vlen != 4)
        return TERN__PROXY_BAD;
      want = (uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8 |
             v[3];
      if (crc32c(0, buf, total, (size_t)(v - buf)) != want)
        return TERN__PROXY_BAD;
      break;
    }
    case PP2_TYPE_SSL:
      /* client (1 byte), verify (4), then sub-TLVs. */
      if (vlen < 5 || ssl_tlvs(v + 5, vlen - 5, h) != 0)
        return TERN__PROXY_BAD;
      h->ssl = v[0] & 0x01;
      break;
    default:
      break; /* NOOP, UNIQUE_ID, NETNS and unknown types: ignored */
    }
    off += 3 + vlen;
  }
  return (int)total;
}

int tern__proxy_parse(const char *buf, size_t len, tern__proxy_hdr *h) {
  if (len == 0)
    return TERN__PROXY_MORE;
  if (buf[0] == 'P') {
    if (!prefix_of(buf, len, v1_sig, sizeof(v1_sig)))
      return TERN__PROXY_BAD;
    if (len <= sizeof(v1_sig))
      return TERN__PROXY_MORE;
    return parse_v1(buf, len, h);
  }
  if (buf[0] == 0x0D) {
    if (!prefix_of(buf, len, v2_sig, sizeof(v2_sig)))
      return TERN__PROXY_BAD;
    return parse_v2((const unsigned char *)buf, len, h);
  }
  return TERN__PROXY_BAD;
}

/* ---- Trusted sources ---------------------------------------------- */

int tern__proxy_nets(const char *list, tern__proxy_net *nets, size_t max) {
  size_t n = 0;
  const char *p = list;

  if (list == NULL)
    return -1;
  while (*p != '\0') {
    char tmp[INET6_ADDRSTRLEN + 4];
    const char *e, *slash;
    size_t len;
    long bits = -1;
    tern__proxy_net *net;

    while (*p == ' ' || *p == ',')
      p++;
    if (*p == '\0')
      break;
    e = p;
    while (*e != '\0' && *e != ',' && *e != ' ')
      e++;
    len = (size_t)(e - p);
    if (len >= sizeof(tmp) || n == max)
      return -1;
    memcpy(tmp, p, len);
    tmp[len] = '\0';
    slash = strchr(tmp, '/');
    if (slash != NULL) {
      const char *d = slash + 1;
      if (*d == '\0' || strlen(d) > 3)
        return -1;
      bits = 0;
      for (; *d != '\0'; d++) {
        if (*d < '0' || *d > '9')
          return -1;
        bits = bits * 10 + (*d - '0');
      }
      tmp[slash - tmp] = '\0';
    }
    net = &nets[n];
    memset(net, 0, sizeof(*net));
    if (inet_pton(AF_INET, tmp, net->addr) == 1) {
      net->family = AF_INET;
      if (bits < 0)
        bits = 32;
      if (bits > 32)
        return -1;
    } else if (inet_pton(AF_INET6, tmp, net->addr) == 1) {
      net->family = AF_INET6;
      if (bits < 0)
        bits = 128;
      if (bits > 128)
        return -1;
    } else {
      return -1;
    }
    net->bits = (uint8_t)bits;
    n++;
    p = e;
  }
  return (int)n;
}

static int in_net(const tern__proxy_net *net, const unsigned char *addr) {
  unsigned full = net->bits / 8u, rest = net->bits % 8u;
  if (memcmp(net->addr, addr, full) != 0)
    return 0;
  if (rest == 0)
    return 1;
  return ((net->addr[full] ^ addr[full]) & (0xFFu << (8 - rest)) & 0xFFu) == 0;
}

int tern__proxy_trusted(const tern__proxy_net *nets, size_t n, int family,
                        const unsigned char *addr) {
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0,    0,
                                           0, 0, 0, 0, 0xFF, 0xFF};
  /* An IPv4 client on a dual-stack socket: its IPv4 form counts too. */
  int v4 = family == AF_INET6 && memcmp(addr, mapped, 12) == 0;
  size_t i;
  for (i = 0; i < n; i++) {
    if (nets[i].family == family && in_net(&nets[i], addr))
      return 1;
    if (v4 && nets[i].family == AF_INET && in_net(&nets[i], addr + 12))
      return 1;
  }
  return 0;
}
