/* Unit tests for the PROXY protocol header parser and the trusted source
 * networks (lib/net/proxy.c), written from HAProxy's specification
 * (doc/proxy-protocol.txt). */
#include "net/proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "t.h"

/* Every proper prefix of a whole header asks for more. */
static void all_prefixes_more(const char *buf, size_t len) {
  tern__proxy_hdr h;
  size_t i;
  for (i = 0; i < len; i++) {
    int rc = tern__proxy_parse(buf, i, &h);
    if (rc != TERN__PROXY_MORE)
      T_FAIL("prefix %zu of %zu: %d", i, len, rc);
  }
}

static int port_of(const struct sockaddr_storage *ss) {
  return ss->ss_family == AF_INET
             ? ntohs(((const struct sockaddr_in *)ss)->sin_port)
             : ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

static const char *addr_of(const struct sockaddr_storage *ss, char *buf) {
  const void *a =
      ss->ss_family == AF_INET
          ? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
          : (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
  return inet_ntop(ss->ss_family, a, buf, INET6_ADDRSTRLEN);
}

static void test_v1_tcp4(void) {
  static const char hdr[] = "PROXY TCP4 192.0.2.7 198.51.100.1 5555 443\r\n";
  char buf[128], a[INET6_ADDRSTRLEN];
  tern__proxy_hdr h;
  size_t n = strlen(hdr);
  memcpy(buf, hdr, n);
  memcpy(buf + n, "GET / HTTP/1.1\r\n", 16);
  T_EQ_INT(tern__proxy_parse(buf, n + 16, &h), (int)n); /* the rest stays */
  T_EQ_INT(h.version, 1);
  T_EQ_INT(h.local, 0);
  T_EQ_INT(h.src.ss_family, AF_INET);
  T_ASSERT(strcmp(addr_of(&h.src, a), "192.0.2.7") == 0);
  T_ASSERT(strcmp(addr_of(&h.dst, a), "198.51.100.1") == 0);
  T_EQ_INT(port_of(&h.src), 5555);
  T_EQ_INT(port_of(&h.dst), 443);
  all_prefixes_more(hdr, n);
}

static void test_v1_tcp6_unknown(void) {
  static const char hdr[] = "PROXY TCP6 2001:db8::1 ::1 65535 1\r\n";
  static const char unk[] = "PROXY UNKNOWN ffff::1 ::1 1 2\r\n";
  char a[INET6_ADDRSTRLEN];
  tern__proxy_hdr h;
  T_EQ_INT(tern__proxy_parse(hdr, strlen(hdr), &h), (int)strlen(hdr));
  T_EQ_INT(h.src.ss_family, AF_INET6);
  T_ASSERT(strcmp(addr_of(&h.src, a), "2001:db8::1") == 0);
  T_EQ_INT(port_of(&h.src), 65535);
  T_EQ_INT(tern__proxy_parse(unk, strlen(unk), &h), (int)strlen(unk));
  T_EQ_INT(h.local, 1);
  T_EQ_INT(tern__proxy_parse("PROXY UNKNOWN\r\n", 15, &h), 15);
  T_EQ_INT(h.local, 1);
}

static void test_v1_bad(void) {
  static const char *const bad[] = {
      "GET / HTTP/1.1\r\n",
      "PROXX TCP4 1.2.3.4 1.2.3.4 1 2\r\n",
      "PROXY TCP4 1.2.3.4 1.2.3.4 1 2 \r\n", /* trailing space */
      "PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n", /* double space */
      "PROXY TCP4 1.2.3.4 1.2.3.4 1 65536\r\n",
      "PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n", /* leading zero */
      "PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n",    /* a port missing */
      "PROXY TCP4 ::1 ::1 1 2\r\n",          /* family mismatch */
      "PROXY TCP6 1.2.3.4 1.2.3.4 1 2\r\n",
      "PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n",
      "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\n", /* LF alone */
      "PROXY TCP4 1.2.3.4 1.2.3.4 1 2\rX",
      "PROXY UNKNOWNX\r\n",
      "PROXY TCP4 1.2.3.400 1.2.3.4 1 2\r\n",
  };
  tern__proxy_hdr h;
  char longline[200];
  size_t i;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    if (tern__proxy_parse(bad[i], strlen(bad[i]), &h) >= 0)
      T_FAIL("accepted %s", bad[i]);
  /* No CR LF within 107 bytes: refused, not waited for. */
  memset(longline, 'a', sizeof(longline));
  memcpy(longline, "PROXY UNKNOWN ", 14);
  T_EQ_INT(tern__proxy_parse(longline, 106, &h), TERN__PROXY_MORE);
  T_ASSERT(tern__proxy_parse(longline, 107, &h) < 0);
  T_ASSERT(tern__proxy_parse(longline, sizeof(longline), &h) < 0);
  /* One wrong byte is enough to refuse a prefix. */
  T_ASSERT(tern__proxy_parse("PRX", 3, &h) < 0);
  T_ASSERT(tern__proxy_parse("\x16\x03\x01", 3, &h) < 0); /* a ClientHello */
}

static const unsigned char sig[12] = {0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                      0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A};

/* A v2 header: command, family byte, addresses and TLVs appended. */
typedef struct {
  unsigned char b[2048];
  size_t n;
} v2;

static void v2_start(v2 *v, int cmd, int fam) {
  memcpy(v->b, sig, 12);
  v->b[12] = (unsigned char)(0x20 | cmd);
  v->b[13] = (unsigned char)fam;
  v->n = 16;
}
static void v2_put(v2 *v, const void *p, size_t n) {
  memcpy(v->b + v->n, p, n);
  v->n += n;
}
static void v2_tlv(v2 *v, int type, const void *p, size_t n) {
  unsigned char t[3] = {(unsigned char)type, (unsigned char)(n >> 8),
                        (unsigned char)n};
  v2_put(v, t, 3);
  v2_put(v, p, n);
}
static void v2_end(v2 *v) {
  v->b[14] = (unsigned char)((v->n - 16) >> 8);
  v->b[15] = (unsigned char)(v->n - 16);
}

static void v2_tcp4(v2 *v) {
  unsigned char a[12] = {192, 0, 2, 7, 127, 0, 0, 1, 0x15, 0xB3, 0x01, 0xBB};
  v2_start(v, 1, 0x11);
  v2_put(v, a, sizeof(a));
}

static void test_v2_tcp4_tlvs(void) {
  v2 v;
  tern__proxy_hdr h;
  char a[INET6_ADDRSTRLEN];
  unsigned char ssl[64];
  size_t sn = 0;
  v2_tcp4(&v);
  v2_tlv(&v, 0x01, "h2", 2);
  v2_tlv(&v, 0x02, "example.com", 11);
  v2_tlv(&v, 0x04, "\0\0\0", 3); /* NOOP */
  ssl[sn++] = 0x01;              /* client used SSL */
  memset(ssl + sn, 0, 4);
  sn += 4;
  memcpy(ssl + sn, "\x21\x00\x07TLSv1.3", 10);
  sn += 10;
  memcpy(ssl + sn,
         "\x22\x00\x03"
         "bob",
         6);
  sn += 6;
  v2_tlv(&v, 0x20, ssl, sn);
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), (int)v.n);
  T_EQ_INT(h.version, 2);
  T_EQ_INT(h.local, 0);
  T_ASSERT(strcmp(addr_of(&h.src, a), "192.0.2.7") == 0);
  T_EQ_INT(port_of(&h.src), 5555);
  T_EQ_INT(port_of(&h.dst), 443);
  T_EQ_STR(h.alpn, h.alpn_len, "h2");
  T_EQ_STR(h.authority, h.authority_len, "example.com");
  T_EQ_INT(h.ssl, 1);
  T_EQ_STR(h.ssl_version, h.ssl_version_len, "TLSv1.3");
  T_EQ_STR(h.ssl_cn, h.ssl_cn_len, "bob");
  all_prefixes_more((char *)v.b, v.n);
}

static void test_v2_tcp6_local_unix(void) {
  v2 v;
  tern__proxy_hdr h;
  char a[INET6_ADDRSTRLEN];
  unsigned char a6[36] = {0x20, 0x01, 0x0d, 0xb8};
  unsigned char un[216] = {0};
  a6[15] = 1;
  a6[31] = 1;
  a6[32] = 0x30;
  a6[33] = 0x39;
  v2_start(&v, 1, 0x21);
  v2_put(&v, a6, sizeof(a6));
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), 52);
  T_EQ_INT(h.src.ss_family, AF_INET6);
  T_ASSERT(strcmp(addr_of(&h.src, a), "2001:db8::1") == 0);
  T_EQ_INT(port_of(&h.src), 12345);
  /* LOCAL (a health check): the socket's own addresses stay. */
  v2_start(&v, 0, 0x00);
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), 16);
  T_EQ_INT(h.local, 1);
  /* LOCAL with addresses: ignored, still LOCAL. */
  v2_tcp4(&v);
  v.b[12] = 0x20;
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), 28);
  T_EQ_INT(h.local, 1);
  /* A Unix-socket client: no address tern can use. */
  v2_start(&v, 1, 0x31);
  v2_put(&v, un, sizeof(un));
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), 232);
  T_EQ_INT(h.local, 1);
}

/* CRC-32C, written here from its definition, checked on the standard
 * check value before it checks the parser. */
static unsigned crc(const unsigned char *p, size_t n) {
  unsigned c = 0xFFFFFFFFu;
  size_t i;
  int k;
  for (i = 0; i < n; i++) {
    c ^= p[i];
    for (k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

static void test_v2_crc(void) {
  v2 v;
  tern__proxy_hdr h;
  unsigned c;
  size_t at;
  T_EQ_INT(crc((const unsigned char *)"123456789", 9), 0xE3069283u);
  v2_tcp4(&v);
  at = v.n + 3;
  v2_tlv(&v, 0x03, "\0\0\0\0", 4);
  v2_end(&v);
  c = crc(v.b, v.n);
  v.b[at] = (unsigned char)(c >> 24);
  v.b[at + 1] = (unsigned char)(c >> 16);
  v.b[at + 2] = (unsigned char)(c >> 8);
  v.b[at + 3] = (unsigned char)c;
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), (int)v.n);
  v.b[16] ^= 1; /* the client address changed in transit */
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
}

static void test_v2_bad(void) {
  v2 v;
  tern__proxy_hdr h;
  /* Version nibble 1, command 2, family 4, protocol 3. */
  v2_tcp4(&v);
  v2_end(&v);
  v.b[12] = 0x11;
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  v.b[12] = 0x22;
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  v.b[12] = 0x21;
  v.b[13] = 0x41;
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  v.b[13] = 0x13;
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  /* A length too short for the family's addresses. */
  v2_start(&v, 1, 0x21);
  v2_put(&v, "0123456789ab", 12);
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  /* A TLV that runs past the header, and one cut in its head. */
  v2_tcp4(&v);
  v2_tlv(&v, 0x02, "abcd", 4);
  v.b[v.n - 5] = 9;
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  v2_tcp4(&v);
  v2_put(&v, "\x02\x00", 2);
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  /* An SSL TLV shorter than its head, and one whose sub-TLV overruns. */
  v2_tcp4(&v);
  v2_tlv(&v, 0x20, "\x01\0\0", 3);
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  v2_tcp4(&v);
  v2_tlv(&v, 0x20, "\x01\0\0\0\0\x21\x00\x09TLS", 11);
  v2_end(&v);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  /* A wrong signature byte. */
  v2_tcp4(&v);
  v2_end(&v);
  v.b[7] = 'q';
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_BAD);
  T_EQ_INT(tern__proxy_parse((char *)v.b, 8, &h), TERN__PROXY_BAD);
}

static void test_v2_long(void) {
  v2 v;
  tern__proxy_hdr h;
  static unsigned char pad[1100];
  v2_tcp4(&v);
  v2_tlv(&v, 0x04, pad, TERN__PROXY_MAX - 28 - 3); /* exactly the most */
  v2_end(&v);
  T_EQ_INT(v.n, TERN__PROXY_MAX);
  T_EQ_INT(tern__proxy_parse((char *)v.b, v.n, &h), TERN__PROXY_MAX);
  v2_tcp4(&v);
  v2_tlv(&v, 0x04, pad, TERN__PROXY_MAX - 28 - 2);
  v2_end(&v);
  /* Known from the first 16 bytes: refused before it arrives. */
  T_EQ_INT(tern__proxy_parse((char *)v.b, 16, &h), TERN__PROXY_LONG);
}

static void test_nets(void) {
  tern__proxy_net nets[8];
  unsigned char a4[4] = {10, 1, 2, 3}, b4[4] = {11, 0, 0, 1};
  unsigned char lo[4] = {127, 0, 0, 1};
  unsigned char m6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 9};
  unsigned char v6[16] = {0xfd, 0x12}, o6[16] = {0xfe};
  int n = tern__proxy_nets("10.0.0.0/8, 127.0.0.1,fd00::/9", nets, 8);
  T_EQ_INT(n, 3);
  T_ASSERT(tern__proxy_trusted(nets, 3, AF_INET, a4));
  T_ASSERT(!tern__proxy_trusted(nets, 3, AF_INET, b4));
  T_ASSERT(tern__proxy_trusted(nets, 3, AF_INET, lo));
  lo[3] = 2;
  T_ASSERT(!tern__proxy_trusted(nets, 3, AF_INET, lo));
  T_ASSERT(tern__proxy_trusted(nets, 3, AF_INET6, m6)); /* ::ffff:10.9.0.0 */
  T_ASSERT(tern__proxy_trusted(nets, 3, AF_INET6, v6));
  v6[1] = 0x80; /* outside fd00::/9 */
  T_ASSERT(!tern__proxy_trusted(nets, 3, AF_INET6, v6));
  T_ASSERT(!tern__proxy_trusted(nets, 3, AF_INET6, o6));
  T_EQ_INT(tern__proxy_nets("0.0.0.0/0", nets, 8), 1);
  T_ASSERT(tern__proxy_trusted(nets, 1, AF_INET, b4));
  T_ASSERT(!tern__proxy_trusted(nets, 1, AF_INET6, o6));
  T_EQ_INT(tern__proxy_nets("10.0.0.0/33", nets, 8), -1);
  T_EQ_INT(tern__proxy_nets("::/129", nets, 8), -1);
  T_EQ_INT(tern__proxy_nets("10.0.0.0/", nets, 8), -1);
  T_EQ_INT(tern__proxy_nets("10.0.0.0/a", nets, 8), -1);
  T_EQ_INT(tern__proxy_nets("localhost", nets, 8), -1);
  T_EQ_INT(tern__proxy_nets("1.1.1.1,2.2.2.2,3.3.3.3", nets, 2), -1);
  T_EQ_INT(tern__proxy_nets("", nets, 8), 0);
}

int main(void) {
  T_RUN(test_v1_tcp4);
  T_RUN(test_v1_tcp6_unknown);
  T_RUN(test_v1_bad);
  T_RUN(test_v2_tcp4_tlvs);
  T_RUN(test_v2_tcp6_local_unix);
  T_RUN(test_v2_crc);
  T_RUN(test_v2_bad);
  T_RUN(test_v2_long);
  T_RUN(test_nets);
  return T_DONE();
}
