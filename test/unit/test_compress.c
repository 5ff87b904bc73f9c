/* Response compression (lib/handler/compress.c): its options checked when a
 * route is added, and the allocation-failure sweep over a server whose
 * route compresses (sweep.h): for every N the Nth allocation fails, and
 * each answer the client gets whole is right, in its coding or, when
 * the compressor could not be had, identity; nothing leaks. For br the
 * failures land inside libbrotlienc, whose own answer to one is exit():
 * the process must live on, and free all the encoder held. */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#ifdef TERN_TEST_BROTLIDEC
#include <brotli/decode.h>
#endif

#include "capture_log.h"
#include "count_alloc.h"
#include "sweep.h"
#include "t.h"
#include "tern.h"

static tern_server *srv;
static int port;
static char reply[16384];
static size_t reply_len;
static char body[4096];
static long coded_answers, identity_answers;

static void fill_body(void) {
  for (size_t i = 0; i < sizeof(body); i++)
    body[i] = "the quick brown fox jumps over the lazy dog\n"[i % 44];
}

static void nop(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 204, NULL, 0, NULL, 0);
}

static void text(tern_request *r, void *user) {
  static const tern_header h[] = {{"Content-Type", 12, "text/plain", 10}};
  (void)user;
  tern_respond(r, 200, h, 1, body, sizeof(body));
}

/* The same body streamed in three writes of unknown total length: each
 * is compressed and flushed on its own, so an allocation can fail in
 * the middle of the compressed stream. After an error the handler still
 * ends the response, as tern.h asks. */
static void text_streamed(tern_request *r, void *user) {
  static const tern_header h[] = {{"Content-Type", 12, "text/plain", 10}};
  size_t third = sizeof(body) / 3;
  (void)user;
  tern_response_start(r, 200, h, 1, -1);
  tern_response_write(r, body, third, NULL, NULL);
  tern_response_write(r, body + third, third, NULL, NULL);
  tern_response_write(r, body + 2 * third, sizeof(body) - 2 * third, NULL,
                      NULL);
  tern_response_end(r, NULL, 0);
}

/* ---- Options --------------------------------------------------------- */

static int add(tern_server *s, const char *path, tern_compress_options *c) {
  tern_route_options o;
  tern_route_options_init(&o);
  o.compress = c;
  return tern_route_with(s, "GET", path, nop, NULL, &o);
}

static void test_options(void) {
  tern_settings s;
  tern_compress_options c;
  tern_server *sv = NULL;
  char longtypes[1100];

  tern_compress_options_init(&c);
  T_EQ_INT(c.version, TERN_COMPRESS_OPTIONS_VERSION);
  T_ASSERT(c.encodings & TERN_COMPRESS_GZIP);
  T_EQ_INT(c.gzip_level, 5);
  T_EQ_INT(c.zstd_level, 3);
  T_EQ_INT(c.zstd_window_log, 18);
  T_EQ_INT(c.br_quality, 4);
  T_EQ_INT(c.br_window, 18);
  T_EQ_INT(c.gzip_window_bits, 15);
  T_EQ_INT(c.gzip_mem_level, 8);
  T_EQ_INT(c.min_size, 1024);
  T_ASSERT(c.types == NULL);

  tern_settings_init(&s);
  ca_use(&s);
  s.log = capture;
  T_EQ_INT(tern_server_new(&s, &sv), 0);
  T_EQ_INT(add(sv, "/ok", &c), 0);
  c.gzip_level = 10;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  T_ASSERT(strstr(last_log, "route GET /a: tern_compress_options "
                            "gzip_level") != NULL);
  c.gzip_level = 0;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.gzip_window_bits = 8;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.gzip_mem_level = 10;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.encodings = 0;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  c.encodings = 1u << 7;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.zstd_level = 0;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.zstd_window_log = 28;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.br_quality = 12;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  T_ASSERT(strstr(last_log, "br_quality outside 0 to 11") != NULL);
  c.br_quality = -1;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.br_window = 9;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  c.br_window = 25;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  /* A version-1 caller's struct ends at types: br's fields are the
   * defaults. */
  c.version = 1;
  c.size = (uint32_t)(offsetof(tern_compress_options, types) + sizeof(c.types));
  c.br_quality = 99;
  T_EQ_INT(add(sv, "/v1", &c), 0);
  tern_compress_options_init(&c);
  /* A coding this build lacks is TERN_ENOTSUP. */
  {
    int all = c.encodings == TERN_COMPRESS_ALL;
    c.encodings = TERN_COMPRESS_ALL;
    T_EQ_INT(add(sv, "/c", &c), all ? 0 : TERN_ENOTSUP);
  }
  tern_compress_options_init(&c);
  c.types = "";
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  memset(longtypes, 'a', sizeof(longtypes) - 1);
  longtypes[sizeof(longtypes) - 1] = '\0';
  c.types = longtypes;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  tern_compress_options_init(&c);
  c.version = 3; /* a newer header than this library's */
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  T_ASSERT(strstr(last_log, "version 3 is unknown") != NULL);
  tern_compress_options_init(&c);
  c.size = 8;
  T_EQ_INT(add(sv, "/a", &c), TERN_EINVAL);
  /* The copy is the library's: the caller's struct and string may go. */
  tern_compress_options_init(&c);
  c.types = "text/html, application/*";
  T_EQ_INT(add(sv, "/b", &c), 0);
  T_EQ_INT(tern_server_set_default_handler(sv, nop, NULL, NULL), 0);
  {
    tern_route_options o;
    tern_route_options_init(&o);
    o.compress = &c;
    T_EQ_INT(tern_server_set_default_handler(sv, nop, NULL, &o), 0);
    T_EQ_INT(tern_server_set_default_handler(sv, nop, NULL, &o), 0);
  }
  tern_server_free(sv);
  T_EQ_INT(ca_live, 0);
}

/* ---- The allocation-failure sweep ---------------------------------- */

static const char *coding = "gzip"; /* the client's Accept-Encoding */
static const char *target = "/t";   /* what the client asks for */

static void *client(void *arg) {
  char req[128];
  int fd = sweep_connect(port), len;
  ssize_t n;
  (void)arg;
  len = snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: x\r\nAccept-Encoding: %s\r\n"
                 "Connection: close\r\n\r\n",
                 target, coding);
  reply_len = 0;
  if (fd >= 0 && write(fd, req, (size_t)len) == (ssize_t)len)
    while ((n = read(fd, reply + reply_len, sizeof(reply) - 1 - reply_len)) > 0)
      reply_len += (size_t)n;
  if (fd >= 0)
    close(fd);
  reply[reply_len] = '\0';
  tern_stop(srv, 1000);
  return NULL;
}

/* A whole 200 must be right, in either coding; anything else is a
 * refusal (the connection closed, or a 503). */
static int served(void) {
  char *end = strstr(reply, "\r\n\r\n"), *cl;
  size_t len;
  if (reply_len < 13 || memcmp(reply, "HTTP/1.1 200 ", 13) != 0 || !end)
    return 0;
  *end = '\0';
  cl = strstr(reply, "Content-Length: ");
  T_ASSERT(strstr(reply, "vary: Accept-Encoding") != NULL);
  if (cl == NULL)
    return 0;
  len = (size_t)strtoul(cl + 16, NULL, 10);
  if ((size_t)(reply + reply_len - (end + 4)) != len)
    return 0; /* cut short */
  if (strstr(reply, "content-encoding: gzip") != NULL) {
    static char out[sizeof(body) + 1];
    z_stream z;
    memset(&z, 0, sizeof(z));
    T_ASSERT(inflateInit2(&z, 16 + 15) == Z_OK);
    z.next_in = (Bytef *)end + 4;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)out;
    z.avail_out = sizeof(out);
    T_EQ_INT(inflate(&z, Z_FINISH), Z_STREAM_END);
    T_EQ_INT((long)z.total_out, (long)sizeof(body));
    T_ASSERT(memcmp(out, body, sizeof(body)) == 0);
    inflateEnd(&z);
    coded_answers++;
#ifdef TERN_TEST_BROTLIDEC
  } else if (strstr(reply, "content-encoding: br") != NULL) {
    static uint8_t out[sizeof(body) + 1];
    size_t olen = sizeof(out);
    T_EQ_INT(BrotliDecoderDecompress(len, (const uint8_t *)end + 4, &olen, out),
             BROTLI_DECODER_RESULT_SUCCESS);
    T_EQ_INT((long)olen, (long)sizeof(body));
    T_ASSERT(memcmp(out, body, sizeof(body)) == 0);
    coded_answers++;
#endif
  } else if (strstr(reply, "content-encoding: ") != NULL) {
    /* zstd: whole (test_compress.py decodes it). */
    T_ASSERT(strstr(reply, coding) != NULL);
    coded_answers++;
  } else {
    T_EQ_INT((long)len, (long)sizeof(body));
    T_ASSERT(memcmp(end + 4, body, sizeof(body)) == 0);
    identity_answers++;
  }
  return 1;
}

/* The body `p` (n bytes) in coding `enc` ("" for identity) decodes to
 * `body`. */
static void check_decoded(const char *enc, const uint8_t *p, size_t n) {
  static uint8_t out[sizeof(body) + 1];
  size_t olen = sizeof(out);
  if (strcmp(enc, "gzip") == 0) {
    z_stream z;
    memset(&z, 0, sizeof(z));
    T_ASSERT(inflateInit2(&z, 16 + 15) == Z_OK);
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = sizeof(out);
    T_EQ_INT(inflate(&z, Z_FINISH), Z_STREAM_END);
    olen = z.total_out;
    inflateEnd(&z);
#ifdef TERN_TEST_BROTLIDEC
  } else if (strcmp(enc, "br") == 0) {
    T_EQ_INT(BrotliDecoderDecompress(n, p, &olen, out),
             BROTLI_DECODER_RESULT_SUCCESS);
#endif
  } else {
    T_EQ_INT(enc[0], '\0');
    T_ASSERT(n <= sizeof(out));
    memcpy(out, p, n);
    olen = n;
  }
  T_EQ_INT((long)olen, (long)sizeof(body));
  T_ASSERT(memcmp(out, body, sizeof(body)) == 0);
}

/* A streamed answer: chunked, and whole only with its last chunk; then
 * it must decode to the body. One cut short (the request aborted when
 * the compressor failed mid-stream) counts as refused. */
static int served_streamed(void) {
  static uint8_t raw[sizeof(reply)];
  char *end = strstr(reply, "\r\n\r\n"), *p, *ce;
  char enc[16] = "";
  size_t n = 0;
  if (reply_len < 13 || memcmp(reply, "HTTP/1.1 200 ", 13) != 0 || !end)
    return 0;
  *end = '\0';
  T_ASSERT(strstr(reply, "vary: Accept-Encoding") != NULL);
  T_ASSERT(strstr(reply, "Transfer-Encoding: chunked") != NULL);
  if ((ce = strstr(reply, "content-encoding: ")) != NULL)
    sscanf(ce + 18, "%15[a-z]", enc);
  for (p = end + 4;;) {
    char *q;
    unsigned long k = strtoul(p, &q, 16);
    if (q == p || (size_t)(q - reply) + 2 > reply_len || q[0] != '\r')
      return 0; /* cut short */
    p = q + 2;
    if (k == 0)
      break;
    if ((size_t)(p - reply) + k + 2 > reply_len)
      return 0;
    memcpy(raw + n, p, k);
    n += k;
    p += k + 2;
  }
  check_decoded(enc, raw, n);
  if (enc[0] != '\0')
    coded_answers++;
  else
    identity_answers++;
  return 1;
}

static int setup(tern_server **out, const tern_settings *s, uv_loop_t *loop,
                 void *user) {
  tern_compress_options c;
  tern_route_options o;
  int rc = tern_server_new(s, out);
  (void)user;
  tern_compress_options_init(&c);
  tern_route_options_init(&o);
  o.compress = &c;
  if (rc == 0)
    rc = tern_route_with(*out, "GET", "/t", text, NULL, &o);
  if (rc == 0)
    rc = tern_route_with(*out, "GET", "/s", text_streamed, NULL, &o);
  if (rc == 0)
    rc = tern_listen(*out, "127.0.0.1", 0, &port);
  if (rc == 0)
    rc = tern_attach(*out, loop);
  return rc;
}

static void sweep_coding(const char *c, int streamed) {
  sweep sw = {.what = c, .setup = setup, .client = client, .served = served};
  if (streamed)
    sw.served = served_streamed;
  target = streamed ? "/s" : "/t";
  coding = c;
  coded_answers = identity_answers = 0;
  sweep_run(&sw, &srv, 400);
  /* The compressor's own allocations failing leave the answer in
   * identity, never fail it. */
  T_ASSERT(coded_answers > 0);
  T_ASSERT(identity_answers > 0);
  printf("# %s%s: %ld answers compressed, %ld in identity\n", c,
         streamed ? " streamed" : "", coded_answers, identity_answers);
}

static void test_every_allocation_may_fail(void) {
  tern_compress_options c;
  sweep_coding("gzip", 0);
  sweep_coding("gzip", 1);
  tern_compress_options_init(&c);
  if (c.encodings & TERN_COMPRESS_ZSTD)
    sweep_coding("zstd", 0);
  if (c.encodings & TERN_COMPRESS_BR) {
    sweep_coding("br", 0);
    sweep_coding("br", 1);
  }
}

int main(void) {
  fill_body();
  T_RUN(test_options);
  T_RUN(test_every_allocation_may_fail);
  return T_DONE();
}
