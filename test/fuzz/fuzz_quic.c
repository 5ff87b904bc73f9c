/* libFuzzer target for tern's QUIC packet path: the bytes of one input
 * are datagrams that clients send to a QUIC listener, and everything
 * behind the UDP socket is the real library (lib/net/udp.c, lib/quic's
 * dispatch, Version Negotiation, Retry, stateless resets and connections
 * on ngtcp2 with GnuTLS, the HTTP/3 adapter, the core), on a loop this
 * program runs.
 *
 * The input: byte 0 picks the listener (bit 0: 0 the one that never
 * sends Retry, with 0-RTT allowed; 1 the one that always does). Then
 * records: a control byte, a 2-byte big-endian length, that many bytes
 * (cut at the input's end and at DGRAM_CAP). The control byte:
 * - bit 0 picks the source: two client sockets on addresses of their
 *   own (a second source is a NAT rebinding, or an attacker aiming at a
 *   connection);
 * - bit 1 aims the datagram at the server: its destination CID (an
 *   18-byte one, long or short header) is replaced by the last server CID
 *   seen in an answer, so that Handshake and 1-RTT packets reach their
 *   connection;
 * - bits 2-3 add loop turns after it;
 * - bit 4 seals it: the bytes are a SCID and the plaintext frames of a
 *   client Initial, which this program protects with keys of its own
 *   DCID (see "Sealed Initials" below: the fuzzer then mutates the
 *   ClientHello, not ciphertext); bit 5 leaves out the padding to 1200
 *   bytes; bit 6 uses the token and DCID of the last Retry.
 * Every input gets new client addresses (127.x.y.z, never reused in a
 * process) and a new DCID for its sealed Initials, so that a connection
 * of an earlier input, which lives on until its handshake timeout and
 * closing period, can neither answer into this input's counts nor take
 * its packets. gen_quic_corpus.py writes the seeds (corpus_quic/).
 *
 * Invariants, checked for every input (a failure names its line, then
 * traps):
 * - the server stays alive: after the datagrams, a probe from a third
 *   socket (a 1200-byte packet of an unknown version) must get its
 *   Version Negotiation back within a bounded time; as the server reads
 *   one socket in order, it also proves every datagram before it was
 *   handled, and the turn that answers it runs the connections' writes;
 * - amplification (RFC 9000 8.1): no source completes a handshake here
 *   (its keys would have to come from the server's), so every byte the
 *   server sends to a source falls under the limit, until the source
 *   sends back a Retry token the server gave it: at most three times the
 *   bytes of that source's datagrams the server could read (at most
 *   TERN__UDP_DGRAM_MAX bytes; larger ones are dropped unread). No
 *   allowance is needed for the stateless answers: intake.c sends Version
 *   Negotiation (at most 256 bytes) only to datagrams of at least 1200
 *   bytes, a Retry only within three times its trigger, a refusal
 *   (CONNECTION_CLOSE, at most 256 bytes) only to an Initial that
 *   ngtcp2_accept took (1200 bytes or more), and a stateless reset only
 *   shorter than its trigger;
 * - every answer datagram is well-formed at its start: long-header
 *   packets of version 1 or v2draft (the fixed bit may be greased), CIDs
 *   of at most 20 bytes, no token in a server's Initial, no 0-RTT packet,
 *   lengths that fit the datagram (coalesced packets are walked), Retry
 *   only from the Retry listener; Version Negotiation (version 0) alone
 *   in its datagram, listing version 1, only to a source that sent 1200
 *   bytes at once; short-header packets of at least 21 bytes. One
 *   defect of ngtcp2 0.12.1 is tolerated (see check_answer) unless
 *   FUZZ_QUIC_STRICT is set in the environment;
 * - stateless resets (a short-header datagram that is no 1-RTT packet
 *   for this source's CIDs) are smaller than the largest datagram the
 *   source sent, at most 80 bytes (intake.c's random part is capped), and
 *   rate-limited: no more in all than the two listeners' buckets allow
 *   since the start;
 * - memory: whenever the server has no connection left, tern holds
 *   exactly what it held at the last such moment (two levels: before
 *   the first connection, and after it, which allocated the CID map),
 *   and never more than a bounded amount per live connection. At exit
 *   (libFuzzer's end, or the end of a reproduction run) the server is
 *   stopped and freed, and every block must be back; LSan then checks
 *   what the TLS and QUIC libraries allocated themselves. A connection
 *   lives for its handshake timeout plus a closing period of up to 3 s,
 *   so a per-input wait for it would cost seconds per input, and
 *   libFuzzer's own per-input leak check is off (quic.options).
 *
 * Build (test/fuzz/run.sh does this): clang -fsanitize=fuzzer,address,
 * undefined -Iinclude -Ilib -DTERN_HAVE_QUIC -DTERN_HAVE_HTTP3 ..., the
 * library sources, fuzz_quic.c, -luv -lnghttp2, the TLS engines'
 * libraries, -lngtcp2 -lngtcp2_crypto_gnutls -lnghttp3 -lz -lpthread
 */
#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "../unit/count_alloc.h"
#include "fuzz_cert.h"
#include "tern.h"
#include "../common/listen.h"

#include "fuzz.h"

#define DGRAM_CAP 4096    /* a datagram of the input, at most */
#define SERVER_READS 2048 /* TERN__UDP_DGRAM_MAX: larger ones are dropped */
#define MAX_DGRAMS 64
#define SERVER_CIDLEN 18 /* QUIC_CIDLEN */
#define V2DRAFT 0x709a50c4u
#define RESET_MAX 80 /* 1 + 63 random bytes + 16 (intake.c's rnd[64]) */
#define RESET_BURST 64
#define RESET_RATE 64
#define NLISTENERS 2
/* Blocks a live connection may hold from tern's allocator (ngtcp2's
 * come through the worker's pools): far above what one takes. */
#define CONN_BLOCKS_MAX 4096

typedef struct {
  int fd;
  uint64_t sent, readable, recv; /* bytes */
  size_t max_sent;
  int sent_1200;
  /* The source CIDs of its long-header datagrams (the server's 1-RTT
   * packets carry one of them first); short ones make resets unknowable. */
  uint8_t scid[8][20];
  uint8_t scid_len[8];
  int nscid, scid_short;
  int validated; /* sent back a Retry token the server gave it */
} source;

static uv_loop_t loop;
static tern_server *srv;
static int port_never, port_retry, probe_fd = -1;
static long base[2] = {-1, -1};
static uint32_t addr_seq;
static uint64_t resets, probe_seq, ninputs, v0_handshakes;
static int strict; /* FUZZ_QUIC_STRICT: no tolerance for ngtcp2's defect */
static double t_start;
static int retry_mode, to_port;
static uint8_t learned[SERVER_CIDLEN];
static int have_learned;
static uint8_t dcid[16];   /* the DCID of this input's sealed Initials */
static uint16_t sealed_pn; /* their packet numbers */
/* The last Retry of this input: its token, its SCID (the DCID the
 * client uses next) and the source it went to (the token binds it). */
static uint8_t retry_token[256], retry_scid[20];
static size_t retry_token_len, retry_scid_len;
static const void *retry_to;
static uint8_t rbuf[65536];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void root(tern_request *r, void *u) {
  (void)u;
  tern_respond(r, 200, NULL, 0, "Hello, World!", 13);
}

static void quiet(int level, const char *msg, size_t len, void *user) {
  (void)level;
  (void)msg;
  (void)len;
  (void)user;
}

/* ---- Teardown at exit --------------------------------------------------- */

/* Stop the server, let its connections finish their closing periods,
 * free it: every block it took must be back. Runs from exit(), which
 * libFuzzer calls at the end of a campaign or a reproduction run, before
 * LSan's own check at exit. */
static void teardown(void) {
  double t0;
  if (srv == NULL)
    return;
  CHECK(tern_stop(srv, 0) == 0);
  t0 = now_s();
  while (uv_run(&loop, UV_RUN_NOWAIT) != 0) {
    struct pollfd p = {probe_fd, POLLIN, 0};
    poll(&p, 1, 5);
    CHECK(now_s() - t0 < 10.0); /* the closing periods are 3 s at most */
  }
  tern_server_free(srv);
  srv = NULL;
  CHECK(uv_loop_close(&loop) == 0);
  close(probe_fd);
  CHECK(ca_live == 0); /* nothing of any connection is left */
  if (v0_handshakes > 0)
    fprintf(stderr,
            "fuzz_quic: %llu Handshake packets of version 0 (ngtcp2 "
            "0.12.1), tolerated\n",
            (unsigned long long)v0_handshakes);
}

static int open_udp(uint32_t addr) {
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  CHECK(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(addr);
  CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
  return fd;
}

static void start_server(void) {
  tern_settings s;
  tern_tls *tls;
  tern_quic_options o;

  tern_settings_init(&s);
  s.workers = 1;
  /* The handshake timeout (QUIC's is the head timeout): short, so that
   * the connections inputs start do not pile up. */
  s.head_timeout_ms = 100;
  s.idle_timeout_ms = 200;
  s.body_timeout_ms = 200;
  s.max_connections = 1024;
  s.log = quiet;
  ca_use(&s);
  CHECK(uv_loop_init(&loop) == 0);
  CHECK(tern_server_new(&s, &srv) == 0);
  CHECK(tern_route(srv, "GET", "/", root, NULL) == 0);
  CHECK(tern_tls_new(srv, &tls) == 0);
  CHECK(tern_tls_add_cert_mem(tls, fuzz_cert, sizeof(fuzz_cert) - 1, fuzz_key,
                              sizeof(fuzz_key) - 1) == 0);
  CHECK(tern_tls_commit(tls) == 0);
  tern_quic_options_init(&o);
  o.retry = TERN_QUIC_RETRY_NEVER;
  o.early_data = 1;
  CHECK(test_listen_quic(srv, tls, &o, &port_never) == 0);
  tern_quic_options_init(&o);
  o.retry = TERN_QUIC_RETRY_ALWAYS;
  CHECK(test_listen_quic(srv, tls, &o, &port_retry) == 0);
  CHECK(tern_attach(srv, &loop) == 0);
  probe_fd = open_udp(INADDR_LOOPBACK);
  strict = getenv("FUZZ_QUIC_STRICT") != NULL;
  CHECK(gnutls_rnd(GNUTLS_RND_NONCE, dcid, 8) == 0);
  t_start = now_s();
  atexit(teardown);
}

/* ---- Answers ------------------------------------------------------------ */

static int varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *v) {
  size_t len, i;
  if (*pos >= n)
    return 0;
  len = (size_t)1 << (p[*pos] >> 6);
  if (len > n - *pos)
    return 0;
  *v = p[*pos] & 0x3f;
  for (i = 1; i < len; i++)
    *v = (*v << 8) | p[*pos + i];
  *pos += len;
  return 1;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

/* Is a short-header datagram a stateless reset (and not a 1-RTT packet
 * of a connection, which starts with one of the source's CIDs)? -1: it
 * cannot be told (the source used CIDs too short to recognise). */
static int is_reset(const source *s, const uint8_t *p, size_t n) {
  int i;
  if (s->scid_short)
    return -1;
  for (i = 0; i < s->nscid; i++)
    if (n > (size_t)s->scid_len[i] &&
        memcmp(p + 1, s->scid[i], s->scid_len[i]) == 0)
      return 0;
  return 1;
}

static void check_answer(source *s, const uint8_t *p, size_t n) {
  size_t pos = 0;
  CHECK(n > 0);
  if (!(p[0] & 0x80)) {
    CHECK(n >= 21);
    if (is_reset(s, p, n) == 1) {
      /* ngtcp2 sets a reset's first two bits to 01. */
      resets++;
      CHECK((p[0] & 0x40) && n <= RESET_MAX && n < s->max_sent);
      CHECK(resets <= NLISTENERS * (RESET_BURST + 1 +
                                    RESET_RATE * (now_s() - t_start + 1)));
    }
    return;
  }
  while (pos < n) {
    const uint8_t *h = p + pos;
    size_t left = n - pos, off;
    unsigned type, dcil, scil;
    uint32_t version;
    uint64_t v, len;

    if (!(h[0] & 0x80)) {
      /* A 1-RTT packet coalesced after the long ones takes the rest. */
      CHECK(left >= 1 + 1 + 16);
      return;
    }
    CHECK(left >= 7);
    version = be32(h + 1);
    dcil = h[5];
    CHECK(6 + dcil + 1 <= left);
    scil = h[6 + dcil];
    off = 7 + dcil + scil;
    CHECK(off <= left);
    if (version == 0 && pos > 0) {
      /* A known defect of ngtcp2 0.12.1, tolerated unless
       * FUZZ_QUIC_STRICT is set: a server that has Handshake keys but no
       * transport parameters (a ClientHello without the
       * quic_transport_parameters extension) writes its CONNECTION_CLOSE
       * in a Handshake packet of version conn->negotiated_version, still
       * 0 (ngtcp2_conn_write_single_frame_pkt). It is walked as the
       * Handshake packet it is. */
      CHECK(!strict);
      v0_handshakes++;
      CHECK(dcil <= 20 && scil <= 20);
      CHECK(varint(h, left, &off, &len));
      CHECK(len >= 1 + 16 && len <= left - off);
      pos += off + (size_t)len;
      continue;
    }
    if (version == 0) {
      /* Version Negotiation: alone, a list of versions that has ours. */
      int found = 0;
      size_t i;
      CHECK(s->sent_1200);
      CHECK(left > off && (left - off) % 4 == 0);
      for (i = off; i < left; i += 4)
        found |= be32(h + i) == 1;
      CHECK(found);
      return;
    }
    /* The fixed bit may be 0: the client may have offered
     * grease_quic_bit (RFC 9287), as gtlsclient does. */
    CHECK(version == 1 || version == V2DRAFT);
    CHECK(dcil <= 20 && scil <= 20);
    /* The v1 types: 0 Initial, 1 0-RTT, 2 Handshake, 3 Retry; v2draft
     * shifts them by one. */
    type = (h[0] >> 4) & 3;
    if (version == V2DRAFT)
      type = (type + 3) & 3;
    if (scil == SERVER_CIDLEN) {
      memcpy(learned, h + 7 + dcil, SERVER_CIDLEN);
      have_learned = 1;
    }
    if (type == 3) {
      /* Retry: a token and the 16-byte integrity tag, to the end. */
      CHECK(retry_mode && pos == 0);
      CHECK(left >= off + 1 + 16 && scil >= 1);
      if (left - off - 16 <= sizeof(retry_token)) {
        retry_token_len = left - off - 16;
        memcpy(retry_token, h + off, retry_token_len);
        retry_scid_len = scil;
        memcpy(retry_scid, h + 7 + dcil, scil);
        retry_to = s;
      }
      return;
    }
    CHECK(type != 1); /* a server sends no 0-RTT */
    if (type == 0) {
      CHECK(varint(h, left, &off, &v));
      CHECK(v == 0); /* a server's Initial has no token (RFC 9000 17.2.2) */
    }
    CHECK(varint(h, left, &off, &len));
    /* A packet number and the AEAD tag at least. */
    CHECK(len >= 1 + 16 && len <= left - off);
    pos += off + (size_t)len;
  }
}

/* Before a failed amplification check: what the source sent and got,
 * and the answer that went over the limit, for the report. */
static void dump(const source *s, const uint8_t *p, size_t n) {
  size_t i;
  fprintf(stderr,
          "fuzz_quic: source sent %llu bytes (%llu readable), got %llu; "
          "the last answer, %zu bytes:",
          (unsigned long long)s->sent, (unsigned long long)s->readable,
          (unsigned long long)s->recv, n);
  for (i = 0; i < n; i++)
    fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", p[i]);
  fprintf(stderr, "\n");
}

/* What the server sent to `s` (from its listener's port, nowhere else). */
static void drain(source *s) {
  for (;;) {
    struct sockaddr_in from;
    socklen_t fl = sizeof(from);
    ssize_t n =
        recvfrom(s->fd, rbuf, sizeof(rbuf), 0, (struct sockaddr *)&from, &fl);
    if (n < 0) {
      CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
      if (errno == EINTR)
        continue;
      return;
    }
    CHECK(from.sin_port == htons((uint16_t)to_port));
    s->recv += (uint64_t)n;
    check_answer(s, rbuf, (size_t)n);
    /* RFC 9000 8.1: three times what the server could read from it,
     * until it proved its address with a Retry token. */
    if (!s->validated && s->recv > 3 * s->readable)
      dump(s, rbuf, (size_t)n);
    CHECK(s->validated || s->recv <= 3 * s->readable);
  }
}

static source src[2];

static void turn(void) {
  uv_run(&loop, UV_RUN_NOWAIT);
  drain(&src[0]);
  drain(&src[1]);
}

/* A new address for a source: 127.x.y.z outside 127.0.0.0/16, never the
 * same twice in a process. */
static void open_source(source *s) {
  uint32_t a;
  memset(s, 0, sizeof(*s));
  do
    a = 0x7f010000u + addr_seq++;
  while ((a & 0xff) == 0 || (a & 0xff) == 0xff);
  CHECK(a < 0x80000000u);
  s->fd = open_udp(a);
}

/* ---- Sealed Initials ------------------------------------------------------
 *
 * A replayed Initial starts a handshake, but its bytes are encrypted: a
 * mutation of them only fails the AEAD, and its DCID (from which the
 * keys derive) stays that of the capture, so that a replay while an
 * earlier input's connection lives finds that connection instead of a
 * new one. A sealed record therefore holds the plaintext frames of a v1
 * Initial (CRYPTO with a ClientHello, ACK, PADDING, ...), and this
 * program protects it as a client would (RFC 9001 5): keys from this
 * input's own DCID, the SCID the record starts with (a length byte and
 * the CID), padding to 1200 bytes unless asked not to, and, when asked,
 * the token and DCID of the last Retry. */

static int expand_label(const uint8_t *secret, const char *label, uint8_t *out,
                        size_t n) {
  uint8_t info[64];
  size_t l = strlen(label);
  gnutls_datum_t k = {(unsigned char *)secret, 32}, i = {info, 0};
  info[0] = (uint8_t)(n >> 8);
  info[1] = (uint8_t)n;
  info[2] = (uint8_t)(6 + l);
  memcpy(info + 3, "tls13 ", 6);
  memcpy(info + 9, label, l);
  info[9 + l] = 0; /* no context */
  i.size = (unsigned)(10 + l);
  return gnutls_hkdf_expand(GNUTLS_MAC_SHA256, &k, &i, out, n);
}

/* Protect the Initial in p[0..n) (its packet number at pn_off, 2
 * bytes, the rest plaintext) with the client keys of `cid`. */
static size_t protect(uint8_t *p, size_t n, size_t pn_off, const uint8_t *cid,
                      size_t cidlen) {
  static const uint8_t salt_v1[] = {0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34,
                                    0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8,
                                    0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a};
  uint8_t initial[32], secret[32], key[16], iv[12], hp[16], mask[16],
      zero[16] = {0}, nonce[12], ct[DGRAM_CAP + 16];
  gnutls_datum_t ikm = {(unsigned char *)cid, (unsigned)cidlen},
                 salt = {(unsigned char *)salt_v1, sizeof(salt_v1)}, kd, ivd;
  gnutls_aead_cipher_hd_t aead;
  gnutls_cipher_hd_t ecb;
  size_t ctlen = sizeof(ct), i, hlen = pn_off + 2;

  CHECK(gnutls_hkdf_extract(GNUTLS_MAC_SHA256, &ikm, &salt, initial) == 0);
  CHECK(expand_label(initial, "client in", secret, 32) == 0);
  CHECK(expand_label(secret, "quic key", key, 16) == 0);
  CHECK(expand_label(secret, "quic iv", iv, 12) == 0);
  CHECK(expand_label(secret, "quic hp", hp, 16) == 0);
  memcpy(nonce, iv, 12);
  nonce[10] ^= p[pn_off];
  nonce[11] ^= p[pn_off + 1];
  kd.data = key;
  kd.size = 16;
  CHECK(gnutls_aead_cipher_init(&aead, GNUTLS_CIPHER_AES_128_GCM, &kd) == 0);
  CHECK(gnutls_aead_cipher_encrypt(aead, nonce, 12, p, hlen, 16, p + hlen,
                                   n - hlen, ct, &ctlen) == 0);
  gnutls_aead_cipher_deinit(aead);
  memcpy(p + hlen, ct, ctlen);
  n = hlen + ctlen;
  /* Header protection: AES-ECB of the sample, as CBC of one block with
   * a zero IV. */
  kd.data = hp;
  ivd.data = zero;
  ivd.size = 16;
  CHECK(gnutls_cipher_init(&ecb, GNUTLS_CIPHER_AES_128_CBC, &kd, &ivd) == 0);
  CHECK(gnutls_cipher_encrypt2(ecb, p + pn_off + 4, 16, mask, 16) == 0);
  gnutls_cipher_deinit(ecb);
  p[0] ^= mask[0] & 0x0f;
  for (i = 0; i < 2; i++)
    p[pn_off + i] ^= mask[1 + i];
  return n;
}

/* Build a client Initial around the plaintext frames pt[0..n) into out
 * (DGRAM_CAP bytes): the datagram's length. */
static size_t seal(uint8_t *out, const uint8_t *pt, size_t n, int pad,
                   int with_retry) {
  const uint8_t *cid = dcid, *tok = NULL, *scid = pt;
  size_t cidlen = sizeof(dcid), toklen = 0, pos = 0, len, pn_off, scidlen;

  /* The record starts with the SCID (the one the ClientHello's transport
   * parameters name as initial_source_connection_id). */
  scidlen = n > 0 ? pt[0] : 0;
  if (scidlen > 20)
    scidlen = 20;
  if (scidlen > n - (n > 0))
    scidlen = n - (n > 0);
  scid = pt + (n > 0);
  pt = scid + scidlen;
  n -= (n > 0) + scidlen;

  if (with_retry && retry_scid_len > 0) {
    cid = retry_scid;
    cidlen = retry_scid_len;
    tok = retry_token;
    toklen = retry_token_len;
  }
  out[pos++] = 0xc1; /* long, fixed bit, Initial, 2-byte packet number */
  memcpy(out + pos, "\0\0\0\1", 4);
  pos += 4;
  out[pos++] = (uint8_t)cidlen;
  memcpy(out + pos, cid, cidlen);
  pos += cidlen;
  out[pos++] = (uint8_t)scidlen;
  memcpy(out + pos, scid, scidlen);
  pos += scidlen;
  out[pos++] = (uint8_t)(0x40 | toklen >> 8); /* 2-byte varint */
  out[pos++] = (uint8_t)toklen;
  if (toklen > 0)
    memcpy(out + pos, tok, toklen);
  pos += toklen;
  /* The payload: at least enough for the header protection sample, at
   * most what fits, padded (PADDING frames are zeros) to 1200 bytes. */
  if (n > DGRAM_CAP - pos - 4 - 16)
    n = DGRAM_CAP - pos - 4 - 16;
  len = n < 2 ? 2 : n;
  if (pad && pos + 4 + len + 16 < 1200)
    len = 1200 - pos - 4 - 16;
  out[pos++] = (uint8_t)(0x40 | (len + 2 + 16) >> 8);
  out[pos++] = (uint8_t)(len + 2 + 16);
  pn_off = pos;
  out[pos++] = (uint8_t)(sealed_pn >> 8);
  out[pos++] = (uint8_t)sealed_pn;
  sealed_pn++;
  memcpy(out + pos, pt, n);
  memset(out + pos + n, 0, len - n);
  return protect(out, pos + len, pn_off, cid, cidlen);
}

static void send_dgram(source *s, const uint8_t *p, size_t n) {
  struct sockaddr_in sa;
  int tries;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)to_port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* The source CIDs of a long header: see is_reset. */
  if (n >= 7 && (p[0] & 0x80) && 7u + p[5] <= n &&
      7u + p[5] + p[6 + p[5]] <= n) {
    unsigned l = p[6 + p[5]];
    if (l < 4 || l > 20 || s->nscid == 8) {
      s->scid_short = 1;
    } else {
      memcpy(s->scid[s->nscid], p + 7 + p[5], l);
      s->scid_len[s->nscid++] = (uint8_t)l;
    }
  } else if (n >= 7 && (p[0] & 0x80)) {
    s->scid_short = 1;
  }
  for (tries = 0; tries < 100; tries++) {
    if (sendto(s->fd, p, n, 0, (struct sockaddr *)&sa, sizeof(sa)) ==
        (ssize_t)n)
      break;
    CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS ||
          errno == EINTR);
    turn(); /* the server's socket is full: let it read */
  }
  if (tries == 100)
    return; /* not sent: nothing counts */
  s->sent += n;
  if (n <= SERVER_READS)
    s->readable += n;
  if (n > s->max_sent)
    s->max_sent = n;
  if (n >= 1200)
    s->sent_1200 = 1;
}

/* Replace the destination CID with the server's last one. */
static void aim(uint8_t *p, size_t n) {
  if (!have_learned || n == 0)
    return;
  if (p[0] & 0x80) {
    if (n >= 6 + SERVER_CIDLEN && p[5] == SERVER_CIDLEN)
      memcpy(p + 6, learned, SERVER_CIDLEN);
  } else if (n >= 1 + SERVER_CIDLEN) {
    memcpy(p + 1, learned, SERVER_CIDLEN);
  }
}

/* The probe: a packet of an unknown version that must be answered with
 * Version Negotiation echoing its sequence number as the DCID. */
static void probe(void) {
  uint8_t p[1200], *q = p;
  struct sockaddr_in sa;
  double t0 = now_s();
  long turns;
  uint64_t seq = ++probe_seq;

  memset(p, 0, sizeof(p));
  *q++ = 0xc0;
  memcpy(q, "\x0a\x1a\x2a\x3a", 4);
  q += 4;
  *q++ = 8;
  memcpy(q, "tern-prb", 8);
  q += 8;
  *q++ = 8;
  memcpy(q, &seq, 8);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)to_port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (turns = 0;; turns++) {
    ssize_t n =
        sendto(probe_fd, p, sizeof(p), 0, (struct sockaddr *)&sa, sizeof(sa));
    if (n == (ssize_t)sizeof(p))
      break;
    CHECK(errno == EAGAIN || errno == ENOBUFS || errno == EINTR);
    turn();
    CHECK(now_s() - t0 < 5.0);
  }
  for (turns = 0;; turns++) {
    ssize_t n;
    turn();
    while ((n = recv(probe_fd, rbuf, sizeof(rbuf), 0)) > 0) {
      /* VN: DCID = the probe's SCID, SCID = its DCID. */
      CHECK(n >= 7 + 8 + 1 + 8 + 4 && (rbuf[0] & 0x80) && be32(rbuf + 1) == 0);
      CHECK(rbuf[5] == 8 && rbuf[14] == 8 &&
            memcmp(rbuf + 15, "tern-prb", 8) == 0);
      if (memcmp(rbuf + 6, &seq, 8) == 0) {
        /* Everything sent before the probe was read; the connections
         * wrote in the same turn. What is on its way is read now. */
        turn();
        return;
      }
    }
    if (turns > 1000) {
      struct pollfd pf = {probe_fd, POLLIN, 0};
      poll(&pf, 1, 1);
      CHECK(now_s() - t0 < 5.0); /* the server no longer answers */
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t buf[DGRAM_CAP];
  size_t pos = 1, nd = 0;
  tern_stats st;
  int i;

  if (srv == NULL)
    start_server();
  if (size < 1)
    return 0;
  retry_mode = data[0] & 1;
  to_port = retry_mode ? port_retry : port_never;
  have_learned = 0;
  retry_scid_len = retry_token_len = 0;
  retry_to = NULL;
  sealed_pn = 0;
  ninputs++;
  memcpy(dcid + 8, &ninputs, 8); /* a new DCID for every input */
  open_source(&src[0]);
  open_source(&src[1]);
  while (pos + 3 <= size && nd++ < MAX_DGRAMS) {
    unsigned ctl = data[pos];
    size_t len = (size_t)data[pos + 1] << 8 | data[pos + 2];
    source *s = &src[ctl & 1];
    int t;
    pos += 3;
    if (len > size - pos)
      len = size - pos;
    if (len > DGRAM_CAP)
      len = DGRAM_CAP;
    if (ctl & 16) {
      int with_retry = (ctl & 64) && retry_scid_len > 0;
      if (with_retry && retry_to == s)
        s->validated = 1;
      pos += len;
      len = seal(buf, data + pos - len, len, !(ctl & 32), with_retry);
    } else {
      memcpy(buf, data + pos, len);
      pos += len;
    }
    if (ctl & 2)
      aim(buf, len);
    send_dgram(s, buf, len);
    for (t = 0; t <= (int)((ctl >> 2) & 3); t++)
      turn();
  }
  probe();
  for (i = 0; i < 2; i++)
    close(src[i].fd);

  /* Memory: exact whenever no connection is left, bounded while some
   * live on. */
  tern_stats_init(&st);
  CHECK(tern_server_stats(srv, &st) == 0);
  if (st.active_connections == 0) {
    long *b = &base[st.connections > 0];
    for (i = 0; i < 64 && *b >= 0 && ca_live != *b; i++)
      uv_run(&loop, UV_RUN_NOWAIT);
    if (*b < 0)
      *b = ca_live;
    CHECK(ca_live == *b);
  } else {
    long b = base[1] >= 0 ? base[1] : base[0];
    CHECK(b < 0 ||
          ca_live - b <= (long)st.active_connections * CONN_BLOCKS_MAX);
  }
  return 0;
}
