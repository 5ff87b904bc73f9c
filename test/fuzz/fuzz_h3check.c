/* libFuzzer target for the HTTP/3 field count (lib/http3/check.c): its
 * frame reader, its reading of QPACK field sections and its table of
 * streams, held against nghttp3's own QPACK decoder.
 *
 * Input: one byte that picks the chunk sizes, a 16-bit big-endian length
 * L, L bytes of QPACK encoder-stream instructions, then one field
 * section. The target puts the section in a HEADERS frame, follows it
 * with a DATA frame, and gives the check that request on stream 0 in
 * chunks (FIN on the last) and on stream 4 whole. It traps when the
 * check breaks its contract (check.h):
 * - the verdict and the counts do not depend on how the bytes are cut;
 * - a verdict is 0 or 1 (memory does not run out here), and a request
 *   with a verdict of 0 has exactly one section count;
 * - where nghttp3's decoder, fed the same encoder stream, decodes the
 *   section whole, the verdict is 0 and the count is the number of fields
 *   it gave (the count is what the adapter holds nghttp3's fields to);
 * - no stream stays in the table once it ended.
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Ilib -Iinclude
 *        lib/http3/check.c test/fuzz/fuzz_h3check.c -lnghttp3
 */
#include "http3/check.h"

#include <nghttp3/nghttp3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* The next chunk's size from the seed: 1 to 16 bytes, or all. */
static size_t cut(unsigned *seed, size_t left) {
  size_t k;
  *seed = *seed * 1103515245u + 12345u;
  k = (*seed >> 16) % 20;
  return k >= 16 || k + 1 > left ? left : k + 1;
}

/* The request on stream `id`, cut by `seed` (0: whole): the verdict, and
 * the counts of the sections in *counts (at most 4). */
static int request(tern__h3_check *c, int64_t id, const uint8_t *p, size_t n,
                   unsigned seed, uint64_t *counts, size_t *ncounts) {
  uint64_t off = 0, v;
  int rv;
  *ncounts = 0;
  do {
    size_t k = seed != 0 ? cut(&seed, n) : n;
    rv = tern__h3_check_request(c, id, off, p, k, k == n);
    CHECK(rv == 0 || rv == 1);
    while (tern__h3_check_take(c, &v)) {
      CHECK(*ncounts < 4);
      counts[(*ncounts)++] = v;
    }
    p += k;
    n -= k;
    off += k;
  } while (rv == 0 && n > 0);
  return rv;
}

/* nghttp3's decoder on the section: the fields it gave, or -1 when it
 * did not decode the section whole (an error, or blocked). */
static long decode(nghttp3_qpack_decoder *dec, const uint8_t *p, size_t n) {
  nghttp3_qpack_stream_context *sx;
  long fields = 0;
  if (nghttp3_qpack_stream_context_new(&sx, 0, nghttp3_mem_default()) != 0)
    return -1;
  for (;;) {
    nghttp3_qpack_nv nv;
    uint8_t flags = 0;
    nghttp3_ssize rv =
        nghttp3_qpack_decoder_read_request(dec, sx, &nv, &flags, p, n, 1);
    if (rv < 0) {
      fields = -1;
      break;
    }
    p += rv;
    n -= (size_t)rv;
    if (flags & NGHTTP3_QPACK_DECODE_FLAG_EMIT) {
      fields++;
      nghttp3_rcbuf_decref(nv.name);
      nghttp3_rcbuf_decref(nv.value);
    }
    if (flags & NGHTTP3_QPACK_DECODE_FLAG_FINAL)
      break;
    if ((flags & NGHTTP3_QPACK_DECODE_FLAG_BLOCKED) ||
        (rv == 0 && !(flags & NGHTTP3_QPACK_DECODE_FLAG_EMIT))) {
      fields = -1;
      break;
    }
  }
  nghttp3_qpack_stream_context_del(sx);
  return fields;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t body[] = {0x00, 0x03, 'a', 'b', 'c'};
  tern__h3_check c;
  nghttp3_qpack_decoder *dec;
  uint64_t ca[4], cb[4];
  size_t len, slen, na, nb, hdr;
  uint8_t *req;
  unsigned seed;
  long fields;
  int a, b;

  if (size < 3)
    return 0;
  seed = data[0] | 0x100u; /* never 0: stream 0 is cut */
  len = (size_t)data[1] << 8 | data[2];
  data += 3;
  size -= 3;
  if (len > size)
    len = size;
  slen = size - len;
  if (slen > 16383)
    return 0;
  /* HEADERS (type 0x01, a two-byte length), the section, then DATA. */
  hdr = 3;
  req = malloc(hdr + slen + sizeof(body));
  if (req == NULL)
    return 0;
  req[0] = 0x01;
  req[1] = (uint8_t)(0x40 | slen >> 8);
  req[2] = (uint8_t)slen;
  memcpy(req + hdr, data + len, slen);
  memcpy(req + hdr + slen, body, sizeof(body));

  tern__h3_check_init(&c, NULL);
  a = request(&c, 0, req, hdr + slen + sizeof(body), seed, ca, &na);
  b = request(&c, 4, req, hdr + slen + sizeof(body), 0, cb, &nb);
  CHECK(a == b && na == nb && memcmp(ca, cb, na * sizeof(*ca)) == 0);
  CHECK(a != 0 || na == 1);
  CHECK(c.n == 0);

  if (nghttp3_qpack_decoder_new(&dec, 4096, 100, nghttp3_mem_default()) == 0) {
    if (nghttp3_qpack_decoder_read_encoder(dec, data, len) ==
            (nghttp3_ssize)len &&
        (fields = decode(dec, data + len, slen)) >= 0) {
      CHECK(a == 0);
      CHECK(ca[0] == (uint64_t)fields);
    }
    nghttp3_qpack_decoder_del(dec);
  }
  tern__h3_check_free(&c);
  free(req);
  return 0;
}
