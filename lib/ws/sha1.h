/* SHA-1 (FIPS 180-4) and base64 (RFC 4648): what the WebSocket handshake's
 * Sec-WebSocket-Accept needs (RFC 6455 4.2.2). They depend on nothing but
 * the C library, so that a WebSocket build needs no TLS library and the
 * benchmarks' WebSocket client (perf/load/wsload.c) uses the same code. */
#ifndef TERN_CORE_SHA1_H
#define TERN_CORE_SHA1_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t h[5];
  uint64_t len;
  unsigned char buf[64];
  size_t used;
} tern__sha1;

void tern__sha1_init(tern__sha1 *s);
void tern__sha1_update(tern__sha1 *s, const void *data, size_t n);
void tern__sha1_final(tern__sha1 *s, unsigned char out[20]);

/* Base64 (the standard alphabet, with padding). encode writes
 * 4 * ceil(n / 3) bytes and returns that; decode accepts only canonical
 * input (length a multiple of 4, padding only at the end, unused bits
 * zero), writes at most `cap` bytes and returns how many, or -1. */
size_t tern__base64_encode(char *out, const void *p, size_t n);
long tern__base64_decode(unsigned char *out, size_t cap, const char *p,
                         size_t n);

#endif
