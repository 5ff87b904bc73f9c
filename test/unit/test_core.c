/* Unit tests for the core's memory pieces: pools, read buffers and the
 * output queue, with a counting allocator that can fail on demand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/proto.h"
#include "core/worker.h"
#include "ws/sha1.h"
#include "count_alloc.h"
#include "t.h"

static tern_server *srv;
static tern__worker w;

static void setup(void) {
  tern_settings s;
  tern_settings_init(&s);
  s.workers = 1;
  ca_use(&s);
  ca_fail_at = -1;
  T_ASSERT(tern_server_new(&s, &srv) == 0);
  memset(&w, 0, sizeof(w));
  w.srv = srv;
  tern__pool_init(&w.rbuf_pool, sizeof(tern__rbuf) + 4096, 4);
  tern__pool_init(&w.wblk_pool, sizeof(tern__wblk) + 256, 4);
  tern__pool_init(&w.seg_pool, 128 * sizeof(tern__seg), 4);
  for (size_t i = 0; i < TERN__SMALL_CLASSES; i++)
    tern__pool_init(&w.small[i], (size_t)64 << i, 4);
}

static void teardown(void) {
  tern__pool_drain(&w, &w.rbuf_pool);
  tern__pool_drain(&w, &w.wblk_pool);
  tern__pool_drain(&w, &w.seg_pool);
  for (size_t i = 0; i < TERN__SMALL_CLASSES; i++)
    tern__pool_drain(&w, &w.small[i]);
  tern_server_free(srv);
  T_EQ_INT(ca_live, 0);
}

static void test_pool_recycles(void) {
  void *a, *b;
  setup();
  a = tern__pool_get(&w, &w.rbuf_pool);
  T_ASSERT(a != NULL);
  tern__pool_put(&w, &w.rbuf_pool, a);
  b = tern__pool_get(&w, &w.rbuf_pool);
#ifndef TERN__ASAN
  T_ASSERT(a == b); /* the free list hands the same object back */
#endif
  tern__pool_put(&w, &w.rbuf_pool, b);
  teardown();
}

/* A pool keeps what comes back: connections cycling between busy and
 * idle reuse what others gave back. A trim frees what stayed free since
 * the trim before, keeping the floor (4 here). */
static void test_pool_bounded(void) {
  void *objs[10];
  int i, round;
  setup();
  for (i = 0; i < 10; i++)
    objs[i] = tern__pool_get(&w, &w.rbuf_pool);
  /* Half go idle and come back, over and over: nothing new is taken. */
  ca_calls = 0;
  ca_fail_at = 1L << 30; /* counts allocations, fails none */
  for (round = 0; round < 3; round++) {
    for (i = 0; i < 5; i++)
      tern__pool_put(&w, &w.rbuf_pool, objs[i]);
    tern__pool_trim(&w, &w.rbuf_pool); /* all 5 were taken again */
    for (i = 0; i < 5; i++)
      objs[i] = tern__pool_get(&w, &w.rbuf_pool);
    tern__pool_trim(&w, &w.rbuf_pool);
  }
  ca_fail_at = -1;
#ifndef TERN__ASAN
  T_EQ_INT(ca_calls, 0);
#endif
  for (i = 0; i < 10; i++)
    tern__pool_put(&w, &w.rbuf_pool, objs[i]);
#ifndef TERN__ASAN
  T_EQ_INT(w.rbuf_pool.nfree, 10); /* kept until a trim */
#endif
  /* Three are taken again. The first trim frees nothing: all ten were
   * out in its round. The next, with nothing taken since, frees what
   * stayed free, down to the floor. */
  for (i = 0; i < 3; i++)
    objs[i] = tern__pool_get(&w, &w.rbuf_pool);
  tern__pool_trim(&w, &w.rbuf_pool);
#ifndef TERN__ASAN
  T_EQ_INT(w.rbuf_pool.nfree, 7);
#endif
  for (i = 0; i < 3; i++)
    tern__pool_put(&w, &w.rbuf_pool, objs[i]);
  tern__pool_trim(&w, &w.rbuf_pool);
#ifndef TERN__ASAN
  T_EQ_INT(w.rbuf_pool.nfree, 4);
#endif
  T_ASSERT(w.rbuf_pool.nfree <= 4); /* the rest went back to the heap */
  teardown();
}

/* Small blocks: recycled by size class, grown in place within a class,
 * moved (contents kept) beyond it, and large ones straight from the
 * allocator; all of it returned. */
static void test_small_blocks(void) {
  unsigned char *p, *q;
  size_t i;
  setup();
  p = tern__small_malloc(&w, 40);
  T_ASSERT(p != NULL && ((uintptr_t)p & 15) == 0);
  memset(p, 7, 40);
  tern__small_free(&w, p);
  q = tern__small_malloc(&w, 48); /* same class: the same block */
#ifndef TERN__ASAN
  T_ASSERT(q == p);
  {
    long before;
    tern__small_free(&w, tern__small_malloc(&w, 30)); /* now pooled */
    before = ca_live;
    tern__small_free(&w, tern__small_malloc(&w, 30));
    T_EQ_INT(ca_live, before); /* from the free list, back to it */
  }
#endif
  for (i = 0; i < 48; i++)
    q[i] = (unsigned char)i;
  p = tern__small_realloc(&w, q, 48); /* fits: stays */
  T_ASSERT(p == q);
  p = tern__small_realloc(&w, p, 3000); /* a larger class */
  T_ASSERT(p != NULL);
  for (i = 0; i < 48; i++)
    T_ASSERT(p[i] == (unsigned char)i);
  p = tern__small_realloc(&w, p, 100000); /* beyond the classes */
  T_ASSERT(p != NULL);
  for (i = 0; i < 48; i++)
    T_ASSERT(p[i] == (unsigned char)i);
  p[99999] = 1;
  q = tern__small_realloc(&w, p, 10); /* shrinking keeps the start */
  T_ASSERT(q != NULL && q[9] == 9);
  tern__small_free(&w, q);
  tern__small_free(&w, NULL);
  ca_calls = 0;
  ca_fail_at = 0;
  T_ASSERT(tern__small_malloc(&w, 5000) == NULL); /* failure reported */
  ca_fail_at = -1;
  teardown();
}

static void test_rbuf_refcount(void) {
  tern__rbuf *b;
  setup();
  b = tern__rbuf_get(&w);
  T_ASSERT(b != NULL);
  T_EQ_INT(b->cap, 4096);
  tern__rbuf_ref(b);
  tern__rbuf_unref(&w, b);
  T_EQ_INT(b->refs, 1); /* still alive for the second holder */
  tern__rbuf_unref(&w, b);
  teardown();
}

static size_t gather(tern__outq *q, char *out, size_t cap) {
  uv_buf_t iov[16];
  size_t n = tern__outq_iov(q, iov, 16), i, len = 0;
  for (i = 0; i < n; i++) {
    T_ASSERT(len + iov[i].len <= cap);
    memcpy(out + len, iov[i].base, iov[i].len);
    len += iov[i].len;
  }
  return len;
}

static void test_outq_coalesces(void) {
  tern__outq q;
  uv_buf_t iov[4];
  setup();
  tern__outq_init(&q);
  T_ASSERT(tern__outq_copy(&w, &q, "HTTP/1.1 ", 9) == 0);
  T_ASSERT(tern__outq_copy(&w, &q, "200 OK\r\n", 8) == 0);
  T_EQ_INT(q.count, 1); /* contiguous copies share one segment */
  T_EQ_INT(tern__outq_iov(&q, iov, 4), 1);
  T_EQ_STR(iov[0].base, iov[0].len, "HTTP/1.1 200 OK\r\n");
  tern__outq_free(&w, &q);
  teardown();
}

static void test_outq_spans_blocks(void) {
  tern__outq q;
  char big[1000], out[1000];
  size_t i;
  setup();
  for (i = 0; i < sizeof(big); i++)
    big[i] = (char)('a' + i % 26);
  tern__outq_init(&q);
  T_ASSERT(tern__outq_copy(&w, &q, big, sizeof(big)) == 0);
  T_ASSERT(q.count >= 4); /* 256-byte blocks */
  T_EQ_INT(gather(&q, out, sizeof(out)), sizeof(big));
  T_ASSERT(memcmp(out, big, sizeof(big)) == 0);
  tern__outq_consume(&w, &q, sizeof(big));
  T_EQ_INT(q.count, 0);
  T_EQ_INT(q.bytes, 0);
  tern__outq_free(&w, &q);
  teardown();
}

static int released, done_status = 99;
static void on_release(void *data, void *user) {
  (void)data;
  (void)user;
  released++;
}
static void on_done(tern_request *r, int status, void *user) {
  (void)r;
  (void)user;
  done_status = status;
}

static void test_outq_ref_and_marks(void) {
  tern__outq q;
  static const char body[] = "0123456789";
  setup();
  released = 0;
  done_status = 99;
  tern__outq_init(&q);
  T_ASSERT(tern__outq_copy(&w, &q, "head", 4) == 0);
  T_ASSERT(tern__outq_ref(&w, &q, body, 10, on_release, NULL) == 0);
  T_ASSERT(tern__outq_mark(&w, &q, TERN__SEG_MARK, NULL, on_done, NULL) == 0);
  T_EQ_INT(q.bytes, 14);
  /* A partial write leaves the rest, and no callback runs early. */
  tern__outq_consume(&w, &q, 7);
  T_EQ_INT(released, 0);
  T_EQ_INT(done_status, 99);
  T_EQ_INT(q.head_off, 3);
  tern__outq_consume(&w, &q, 7);
  T_EQ_INT(released, 1);
  T_EQ_INT(done_status, 0);
  T_EQ_INT(q.count, 0);
  tern__outq_free(&w, &q);
  teardown();
}

/* QUIC hands bytes out before they are acknowledged: vectors start past
 * what was handed out, whatever the segment boundaries, markers and a
 * partly consumed head, and the bytes stay queued until consumed. */
static void test_outq_iov_from(void) {
  tern__outq q;
  uv_buf_t iov[4];
  static const char body[] = "0123456789";
  setup();
  released = 0;
  done_status = 99;
  tern__outq_init(&q);
  T_ASSERT(tern__outq_copy(&w, &q, "head", 4) == 0);
  T_ASSERT(tern__outq_mark(&w, &q, TERN__SEG_MARK, NULL, on_done, NULL) == 0);
  T_ASSERT(tern__outq_ref(&w, &q, body, 10, on_release, NULL) == 0);
  T_EQ_INT(tern__outq_iov_from(&q, 0, iov, 4), 2);
  T_EQ_STR(iov[0].base, iov[0].len, "head");
  T_EQ_STR(iov[1].base, iov[1].len, "0123456789");
  T_EQ_INT(tern__outq_iov_from(&q, 2, iov, 4), 2);
  T_EQ_STR(iov[0].base, iov[0].len, "ad");
  T_EQ_INT(tern__outq_iov_from(&q, 4, iov, 4), 1); /* the marker: skipped */
  T_EQ_STR(iov[0].base, iov[0].len, "0123456789");
  T_EQ_INT(tern__outq_iov_from(&q, 7, iov, 1), 1);
  T_EQ_STR(iov[0].base, iov[0].len, "3456789");
  T_EQ_INT(tern__outq_iov_from(&q, 14, iov, 4), 0); /* all handed out */
  /* Acknowledged bytes leave the front; the skip counts from there. */
  tern__outq_consume(&w, &q, 3);
  T_EQ_INT(done_status, 99);
  T_EQ_INT(tern__outq_iov_from(&q, 0, iov, 4), 2);
  T_EQ_STR(iov[0].base, iov[0].len, "d");
  T_EQ_INT(tern__outq_iov_from(&q, 3, iov, 4), 1);
  T_EQ_STR(iov[0].base, iov[0].len, "23456789");
  tern__outq_consume(&w, &q, 1);
  T_EQ_INT(done_status, 0); /* the marker ran with the bytes before it */
  T_EQ_INT(released, 0);
  /* Copies appended later join the handed-out tail segment's block. */
  T_ASSERT(tern__outq_copy(&w, &q, "tail", 4) == 0);
  T_EQ_INT(tern__outq_iov_from(&q, 10, iov, 4), 1);
  T_EQ_STR(iov[0].base, iov[0].len, "tail");
  tern__outq_consume(&w, &q, 14);
  T_EQ_INT(released, 1);
  T_EQ_INT(q.bytes, 0);
  tern__outq_free(&w, &q);
  teardown();
}

static void test_outq_fail_reports(void) {
  tern__outq q;
  setup();
  released = 0;
  done_status = 99;
  tern__outq_init(&q);
  T_ASSERT(tern__outq_ref(&w, &q, "x", 1, on_release, NULL) == 0);
  T_ASSERT(tern__outq_mark(&w, &q, TERN__SEG_MARK, NULL, on_done, NULL) == 0);
  tern__outq_free(&w, &q);
  T_EQ_INT(released, 1);
  T_EQ_INT(done_status, TERN_ECLOSED);
  teardown();
}

static void test_outq_splice_keeps_order(void) {
  tern__outq a, b;
  char out[64];
  setup();
  tern__outq_init(&a);
  tern__outq_init(&b);
  T_ASSERT(tern__outq_copy(&w, &a, "first;", 6) == 0);
  T_ASSERT(tern__outq_copy(&w, &b, "second;", 7) == 0);
  T_ASSERT(tern__outq_splice(&w, &a, &b) == 0);
  T_EQ_INT(b.count, 0);
  T_ASSERT(tern__outq_copy(&w, &a, "third", 5) == 0);
  T_EQ_STR(out, gather(&a, out, sizeof(out)), "first;second;third");
  tern__outq_consume(&w, &a, 18);
  tern__outq_free(&w, &a);
  tern__outq_free(&w, &b);
  teardown();
}

/* Taking back the tail of a queue: the cut may fall inside a copied
 * segment that merged two answers, markers at the cut stay with what
 * precedes it, and the callbacks of what was cut run only when the caller
 * fails it. */
static void test_outq_cut(void) {
  tern__outq q;
  tern__seg *cut;
  size_t ncut;
  char out[64];
  setup();
  released = 0;
  done_status = 99;
  tern__outq_init(&q);
  T_ASSERT(tern__outq_copy(&w, &q, "prev;", 5) == 0);
  T_ASSERT(tern__outq_copy(&w, &q, "next", 4) == 0); /* merges */
  T_ASSERT(tern__outq_ref(&w, &q, "body", 4, on_release, NULL) == 0);
  T_ASSERT(tern__outq_mark(&w, &q, TERN__SEG_MARK, NULL, on_done, NULL) == 0);
  tern__outq_consume(&w, &q, 2);
  T_EQ_INT(q.consumed, 2);
  /* Refused when there is no memory for the array: nothing changes. */
  ca_calls = 0;
  ca_fail_at = 0;
  T_EQ_INT(tern__outq_cut(&w, &q, 3, &cut, &ncut), TERN_ENOMEM);
  ca_fail_at = -1;
  T_EQ_INT(q.bytes, 11);
  T_ASSERT(tern__outq_cut(&w, &q, 3, &cut, &ncut) == 0);
  T_EQ_INT(ncut, 2);
  T_EQ_INT(q.bytes, 3);
  T_EQ_STR(out, gather(&q, out, sizeof(out)), "ev;");
  T_EQ_INT(released, 0);
  T_EQ_INT(done_status, 99);
  T_ASSERT(tern__outq_copy(&w, &q, "400", 3) == 0);
  tern__outq_fail_cut(&w, &q, cut, ncut, TERN_ECLOSED);
  T_EQ_INT(released, 1);
  T_EQ_INT(done_status, TERN_ECLOSED);
  T_EQ_STR(out, gather(&q, out, sizeof(out)), "ev;400");
  tern__outq_consume(&w, &q, 6);

  /* A marker right at the cut ends what came before: it stays. */
  done_status = 99;
  T_ASSERT(tern__outq_copy(&w, &q, "a", 1) == 0);
  T_ASSERT(tern__outq_mark(&w, &q, TERN__SEG_MARK, NULL, on_done, NULL) == 0);
  T_ASSERT(tern__outq_ref(&w, &q, "b", 1, on_release, NULL) == 0);
  T_ASSERT(tern__outq_cut(&w, &q, 1, &cut, &ncut) == 0);
  T_EQ_INT(ncut, 1);
  T_EQ_INT(q.count, 2);
  tern__outq_fail_cut(&w, &q, cut, ncut, TERN_ECLOSED);
  T_EQ_INT(released, 2);
  T_EQ_INT(done_status, 99);
  tern__outq_consume(&w, &q, 1);
  T_EQ_INT(done_status, 0);
  /* Nothing past the cut: nothing to do. */
  T_ASSERT(tern__outq_cut(&w, &q, 0, &cut, &ncut) == 0);
  T_ASSERT(cut == NULL && ncut == 0);
  tern__outq_free(&w, &q);
  teardown();
}

/* Every allocation the queue makes may fail: the call reports ENOMEM and
 * the queue stays consistent and frees cleanly. */
static void test_outq_alloc_failure(void) {
  long n;
  for (n = 0; n < 8; n++) {
    tern__outq q;
    char data[600];
    int rc;
    memset(data, 'z', sizeof(data));
    setup();
    tern__outq_init(&q);
    ca_calls = 0;
    ca_fail_at = n;
    rc = tern__outq_copy(&w, &q, data, sizeof(data));
    if (rc == 0)
      rc = tern__outq_ref(&w, &q, data, 10, NULL, NULL);
    ca_fail_at = -1;
    T_ASSERT(rc == 0 || rc == TERN_ENOMEM);
    T_ASSERT(q.bytes <= sizeof(data) + 10);
    tern__outq_free(&w, &q);
    teardown();
  }
}

static void sha1_hex(const void *p, size_t n, size_t split, char hex[41]) {
  tern__sha1 s;
  unsigned char d[20];
  size_t i;
  tern__sha1_init(&s);
  tern__sha1_update(&s, p, split);
  tern__sha1_update(&s, (const char *)p + split, n - split);
  tern__sha1_final(&s, d);
  for (i = 0; i < 20; i++)
    sprintf(hex + 2 * i, "%02x", d[i]);
}

/* FIPS 180-4's examples, fed in two parts at every split point, and the
 * one-million-'a' message across many updates. */
static void test_sha1_vectors(void) {
  static const struct {
    const char *in, *out;
  } v[] = {
      {"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
      {"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "84983e441c3bd26ebaae4aa1f95129e5e54670f1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
       "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "a49b2446a02c645bf419f995b67091253a04a259"},
  };
  char hex[41];
  tern__sha1 s;
  unsigned char d[20], a[1000];
  size_t i, k;
  for (i = 0; i < sizeof(v) / sizeof(v[0]); i++)
    for (k = 0; k <= strlen(v[i].in); k++) {
      sha1_hex(v[i].in, strlen(v[i].in), k, hex);
      T_ASSERT(strcmp(hex, v[i].out) == 0);
    }
  memset(a, 'a', sizeof(a));
  tern__sha1_init(&s);
  for (i = 0; i < 1000; i++)
    tern__sha1_update(&s, a, sizeof(a));
  tern__sha1_final(&s, d);
  for (i = 0; i < 20; i++)
    sprintf(hex + 2 * i, "%02x", d[i]);
  T_ASSERT(strcmp(hex, "34aa973cd4c4daa4f61eeb2bdbad27316534016f") == 0);
}

/* RFC 4648 10's vectors both ways, RFC 6455's handshake example, and the
 * non-canonical forms decode refuses. */
static void test_base64(void) {
  static const char *const enc[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                    "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
  static const char *const bad[] = {"Zg=",  "Zg",   "Z===",    "Zm9v=",
                                    "Zh==", "Zm9=", "Zm9v\n",  "Zm=v",
                                    "Zm 9", "====", "Zg==Zg=="};
  unsigned char out[16];
  char buf[16];
  tern__sha1 s;
  unsigned char d[20];
  size_t i, n;
  for (i = 0; i < 7; i++) {
    n = tern__base64_encode(buf, "foobar", i);
    T_ASSERT(n == strlen(enc[i]) && memcmp(buf, enc[i], n) == 0);
    T_ASSERT(tern__base64_decode(out, sizeof(out), enc[i], n) == (long)i);
    T_ASSERT(memcmp(out, "foobar", i) == 0);
  }
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    T_ASSERT(tern__base64_decode(out, sizeof(out), bad[i], strlen(bad[i])) ==
             -1);
  T_ASSERT(tern__base64_decode(out, 5, "Zm9vYmFy", 8) == -1); /* no room */
  /* RFC 6455 1.3: key "dGhlIHNhbXBsZSBub25jZQ==" answers
   * "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=". */
  T_ASSERT(tern__base64_decode(out, sizeof(out),
                               "dGhlIHNhbXBsZSBub25jZQ==", 24) == 16);
  tern__sha1_init(&s);
  tern__sha1_update(&s, "dGhlIHNhbXBsZSBub25jZQ==", 24);
  tern__sha1_update(&s, "258EAFA5-E914-47DA-95CA-C5AB0DC85B11", 36);
  tern__sha1_final(&s, d);
  {
    char acc[28];
    T_ASSERT(tern__base64_encode(acc, d, 20) == 28);
    T_ASSERT(memcmp(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", 28) == 0);
  }
}

/* The inbound window policy: double after a whole window consumed with
 * nothing held back, up to the maximum, and never past it; a stream
 * starts from what its connection earned. */
static void test_window_policy(void) {
  tern__window st, cn, big;
  uint32_t want;

  tern__window_init(&st, 65535, 8u << 20);
  T_EQ_INT(tern__window_consumed(&st, 65534, 0, 0), 0);
  T_EQ_INT(tern__window_consumed(&st, 1, 0, 0), 131070);
  T_EQ_INT(st.consumed, 0);
  /* Held back: no growth, however much went through... */
  T_EQ_INT(tern__window_consumed(&st, 200000, 1, 0), 0);
  T_EQ_INT(st.win, 131070);
  /* ...until the handler has taken it all. */
  T_EQ_INT(tern__window_consumed(&st, 0, 0, 0), 262140);
  for (want = 524280; want <= (8u << 20) / 2; want *= 2)
    T_EQ_INT(tern__window_consumed(&st, st.win, 0, 0), want);
  T_EQ_INT(st.win, 4194240);
  T_EQ_INT(tern__window_consumed(&st, st.win, 0, 0), 8388480);
  /* The last step lands on the maximum itself, then it stays. */
  T_EQ_INT(tern__window_consumed(&st, st.win, 0, 0), 8u << 20);
  T_EQ_INT(tern__window_consumed(&st, 64u << 20, 0, 0), 0);
  T_EQ_INT(st.win, 8u << 20);

  tern__window_init(&cn, 1u << 20, 16u << 20);
  for (want = 2u << 20; want <= 16u << 20; want *= 2)
    T_EQ_INT(tern__window_consumed(&cn, cn.win, 0, 0), want);
  T_EQ_INT(tern__window_consumed(&cn, cn.win, 0, 0), 0);

  /* A maximum of 2^31 - 1 is reached without overflow. */
  tern__window_init(&big, 1u << 30, 0x7fffffff);
  T_EQ_INT(tern__window_consumed(&big, 1u << 30, 0, 0), 0x7fffffff);
  T_EQ_INT(tern__window_consumed(&big, 0x7fffffff, 0, 0), 0);

  /* A new stream adopts what its connection's earlier streams earned on
   * its first consumption, not while bytes are held back, never past its
   * maximum, and grows on from there. */
  tern__window_init(&st, 65535, 8u << 20);
  T_EQ_INT(tern__window_consumed(&st, 100, 1, 4u << 20), 0);
  T_EQ_INT(st.win, 65535);
  T_EQ_INT(tern__window_consumed(&st, 100, 0, 4u << 20), 4u << 20);
  T_EQ_INT(st.consumed, 0);
  T_EQ_INT(tern__window_consumed(&st, 4u << 20, 0, 4u << 20), 8u << 20);
  tern__window_init(&st, 65535, 1u << 20);
  T_EQ_INT(tern__window_consumed(&st, 1, 0, 8u << 20), 1u << 20);
  T_EQ_INT(tern__window_consumed(&st, 1, 0, 8u << 20), 0);
}

/* Pseudo-headers into fields: the Host fallback, the cookie join in the
 * first crumb's place, and nothing changed when memory runs out. */
static void test_request_fields(void) {
  tern_header h[5] = {
      {"cookie", 6, "a=1", 3},   {"x-mid", 5, "m", 1},
      {"cookie", 6, "bb=22", 5}, {"host", 4, "example.test", 12},
      {"cookie", 6, "c=3", 3},
  };
  tern_header copy[5];
  tern_request r;
  char *joined = (char *)1;

  setup();
  memset(&r, 0, sizeof(r));
  r.w = &w;
  r.headers = h;
  r.nheaders = 5;
  memcpy(copy, h, sizeof(h));
  ca_calls = 0;
  ca_fail_at = 0;
  T_EQ_INT(tern__request_fields(&r, 3, &joined), TERN_ENOMEM);
  ca_fail_at = -1;
  T_ASSERT(joined == NULL);
  T_EQ_INT(r.nheaders, 5);
  T_ASSERT(memcmp(h, copy, sizeof(h)) == 0);

  r.authority = NULL;
  T_EQ_INT(tern__request_fields(&r, 3, &joined), 0);
  T_EQ_STR(r.authority, r.authority_len, "example.test");
  T_EQ_INT(r.nheaders, 3);
  T_EQ_STR(h[0].name, h[0].name_len, "cookie");
  T_EQ_STR(h[0].value, h[0].value_len, "a=1; bb=22; c=3");
  T_ASSERT(h[0].value == joined);
  T_EQ_STR(h[1].name, h[1].name_len, "x-mid");
  T_EQ_STR(h[2].name, h[2].name_len, "host");
  tern__small_free(&w, joined);

  /* One crumb and an :authority already set: nothing to do. */
  r.authority = "given";
  r.authority_len = 5;
  T_EQ_INT(tern__request_fields(&r, 1, &joined), 0);
  T_ASSERT(joined == NULL);
  T_EQ_STR(r.authority, r.authority_len, "given");
  teardown();
}

/* Response field values: CR, LF and NUL refused wherever they stand
 * (the check reads eight bytes at a time, then the tail), every other
 * byte taken, the bytes around the three (0x0b, 0x0c, 0x0e, 0x01) and
 * high bytes too; names must be tokens. */
static void test_fields_valid(void) {
  static const unsigned char bad[3] = {'\r', '\n', 0};
  static const unsigned char good[] = {'\t', 0x01, 0x0b, 0x0c, 0x0e, 0x7f,
                                       0x80, 0x8d, 0xff, ' ',  'a'};
  char v[40];
  tern_header h = {"x-a", 3, v, 0};
  for (size_t n = 0; n <= sizeof v; n++) {
    memset(v, 'v', sizeof v);
    h.value_len = n;
    T_ASSERT(tern__fields_valid(&h, 1));
    for (size_t at = 0; at < n; at++) {
      for (size_t b = 0; b < sizeof bad; b++) {
        v[at] = (char)bad[b];
        T_ASSERT(!tern__fields_valid(&h, 1));
      }
      for (size_t g = 0; g < sizeof good; g++) {
        v[at] = (char)good[g];
        T_ASSERT(tern__fields_valid(&h, 1));
      }
    }
  }
  h.value_len = 1;
  h.name = "x a";
  T_ASSERT(!tern__fields_valid(&h, 1));
  h.name = "";
  h.name_len = 0;
  T_ASSERT(!tern__fields_valid(&h, 1));
  h.name = "x-a";
  h.name_len = 3;
  h.value = NULL;
  T_ASSERT(!tern__fields_valid(&h, 1));
  h.value_len = 0;
  T_ASSERT(tern__fields_valid(&h, 1));
  T_ASSERT(!tern__fields_valid(NULL, 1));
  T_ASSERT(tern__fields_valid(NULL, 0));
}

/* ASCII lower-casing eight bytes at a time: every byte value, in every
 * position of the word loop and of the tail, against the byte rule. */
static void test_lower_copy(void) {
  char in[20], out[21];
  for (int b = 0; b < 256; b++) {
    for (size_t n = 1; n <= sizeof in; n++) {
      for (size_t at = 0; at < n; at++) {
        for (size_t i = 0; i < n; i++)
          in[i] = (char)("Az@[`{Zz"[i % 8]);
        in[at] = (char)b;
        out[n] = 'X';
        tern__lower_copy(out, in, n);
        for (size_t i = 0; i < n; i++) {
          unsigned char c = (unsigned char)in[i];
          unsigned char want = c >= 'A' && c <= 'Z' ? c + 32 : c;
          if ((unsigned char)out[i] != want) {
            T_EQ_INT((unsigned char)out[i], want);
            return;
          }
        }
        T_EQ_INT(out[n], 'X'); /* nothing written past n */
      }
    }
  }
}

int main(void) {
  T_RUN(test_pool_recycles);
  T_RUN(test_pool_bounded);
  T_RUN(test_small_blocks);
  T_RUN(test_rbuf_refcount);
  T_RUN(test_outq_coalesces);
  T_RUN(test_outq_spans_blocks);
  T_RUN(test_outq_ref_and_marks);
  T_RUN(test_outq_iov_from);
  T_RUN(test_outq_fail_reports);
  T_RUN(test_outq_splice_keeps_order);
  T_RUN(test_outq_cut);
  T_RUN(test_outq_alloc_failure);
  T_RUN(test_sha1_vectors);
  T_RUN(test_base64);
  T_RUN(test_window_policy);
  T_RUN(test_request_fields);
  T_RUN(test_fields_valid);
  T_RUN(test_lower_copy);
  return T_DONE();
}
