/* libFuzzer target for the PROXY protocol parser and the trusted source
 * list (lib/net/proxy.c).
 *
 * The first byte picks what the rest is: even, the first bytes of a
 * connection (a header, maybe followed by a request); odd, a network
 * list (a C string). The target traps when the parser breaks its
 * contract (proxy.h):
 * - a header's length is at most the input's and TERN__PROXY_MAX, and
 *   the same header alone parses to the same length and addresses;
 * - every TLV view lies inside the header;
 * - a header is only MORE while it is shorter than TERN__PROXY_MAX, and
 *   every prefix of a whole header is MORE;
 * - a version is 1 or 2, and an address taken has family IPv4 or IPv6;
 * - a parsed network list has valid prefixes, and each network contains
 *   its own address.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Ilib -Iinclude
 *        lib/net/proxy.c test/fuzz/fuzz_proxy.c
 */
#include "net/proxy.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static void view_inside(const char *v, size_t n, const char *buf, size_t len) {
  if (v == NULL) {
    CHECK(n == 0);
    return;
  }
  CHECK(v >= buf && n <= len && v - buf <= (ptrdiff_t)(len - n));
}

static void header(const char *buf, size_t len) {
  tern__proxy_hdr h, h2;
  int rc = tern__proxy_parse(buf, len, &h), rc2;
  size_t i;

  CHECK(rc >= TERN__PROXY_LONG);
  if (rc == TERN__PROXY_MORE) {
    CHECK(len < TERN__PROXY_MAX);
    return;
  }
  if (rc < 0)
    return;
  CHECK((size_t)rc <= len && rc <= TERN__PROXY_MAX);
  CHECK(h.version == 1 || h.version == 2);
  if (!h.local) {
    CHECK(h.src.ss_family == AF_INET || h.src.ss_family == AF_INET6);
    CHECK(h.dst.ss_family == h.src.ss_family);
  }
  view_inside(h.alpn, h.alpn_len, buf, (size_t)rc);
  view_inside(h.authority, h.authority_len, buf, (size_t)rc);
  view_inside(h.ssl_version, h.ssl_version_len, buf, (size_t)rc);
  view_inside(h.ssl_cn, h.ssl_cn_len, buf, (size_t)rc);
  CHECK(h.version == 2 || (h.alpn == NULL && h.authority == NULL));
  /* The header alone: the same answer, whatever followed it. */
  {
    char *copy = malloc((size_t)rc);
    CHECK(copy != NULL);
    memcpy(copy, buf, (size_t)rc);
    rc2 = tern__proxy_parse(copy, (size_t)rc, &h2);
    CHECK(rc2 == rc && h2.local == h.local && h2.version == h.version);
    CHECK(memcmp(&h2.src, &h.src, sizeof(h.src)) == 0);
    for (i = 0; i < (size_t)rc; i++)
      CHECK(tern__proxy_parse(copy, i, &h2) == TERN__PROXY_MORE);
    free(copy);
  }
}

static void nets(const char *list) {
  tern__proxy_net n[8];
  int k = tern__proxy_nets(list, n, 8), i;
  CHECK(k >= -1 && k <= 8);
  for (i = 0; i < k; i++) {
    CHECK(n[i].family == AF_INET || n[i].family == AF_INET6);
    CHECK(n[i].bits <= (n[i].family == AF_INET ? 32 : 128));
    CHECK(tern__proxy_trusted(n, (size_t)k, n[i].family, n[i].addr));
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf;
  if (size == 0)
    return 0;
  /* An exact-size copy, so that ASan sees any read past the input. */
  buf = malloc(size);
  if (buf == NULL)
    return 0;
  memcpy(buf, data + 1, size - 1);
  if (data[0] & 1) {
    buf[size - 1] = '\0';
    nets(buf);
  } else {
    header(buf, size - 1);
  }
  free(buf);
  return 0;
}
