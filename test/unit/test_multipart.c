/* multipart/form-data (lib/handler/multipart.c): every body is fed whole
 * and in pieces of every size from 1 byte up, and must read the same:
 * parts, names, filenames, data (a delimiter split across pieces found,
 * a near-delimiter in the data kept), the end. Then the refusals. */
#include <stdio.h>
#include <string.h>

#include "tern.h"
#include "t.h"

#define CT "multipart/form-data; boundary=XyZ"
#define S_CT "multipart/form-data; boundary=b"

/* Feed `body` in pieces of `piece` bytes; a transcript of the events:
 * P(name,filename,nfields) then the data, "|" at a part's end, "$" at
 * the end. Returns the first error, or 0. */
static int run(const char *ct, const char *body, size_t len, size_t piece,
               char *out, size_t cap) {
  tern_multipart *m;
  tern_multipart_event ev;
  size_t off = 0, at = 0, used, n;
  int rc = tern_multipart_new(ct, strlen(ct), 0, 0, &m);
  out[0] = '\0';
  if (rc != 0)
    return rc;
  while (off < len || rc == TERN_MULTIPART_DATA || rc == TERN_MULTIPART_PART ||
         rc == TERN_MULTIPART_PART_END) {
    size_t left = len - off, give = left < piece ? left : piece;
    rc = tern_multipart_next(m, body + off, give, &used, &ev);
    if (rc < 0)
      break;
    T_ASSERT(used <= give);
    off += used;
    switch (rc) {
    case TERN_MULTIPART_PART:
      n = (size_t)snprintf(out + at, cap - at, "P(%.*s,%.*s,%zu)",
                           (int)ev.name_len, ev.name ? ev.name : "",
                           ev.filename ? (int)ev.filename_len : 1,
                           ev.filename ? ev.filename : "-", ev.nfields);
      at += n;
      break;
    case TERN_MULTIPART_DATA:
      T_ASSERT(at + ev.len < cap);
      memcpy(out + at, ev.data, ev.len);
      at += ev.len;
      out[at] = '\0';
      break;
    case TERN_MULTIPART_PART_END:
      out[at++] = '|';
      out[at] = '\0';
      break;
    case TERN_MULTIPART_END:
      out[at++] = '$';
      out[at] = '\0';
      off = len;
      break;
    default:
      break;
    }
    if (rc == TERN_MULTIPART_END || (rc == TERN_MULTIPART_MORE && off == len))
      break;
  }
  if (rc >= 0 && !tern_multipart_finished(m))
    rc = 99; /* incomplete */
  tern_multipart_free(m);
  return rc < 0 || rc == 99 ? rc : 0;
}

/* The same transcript for every piece size. */
static void same(const char *ct, const char *body, size_t len, const char *want,
                 int want_rc) {
  char got[4096];
  size_t piece;
  for (piece = 1; piece <= len + 1; piece++) {
    int rc = run(ct, body, len, piece, got, sizeof(got));
    if (rc != want_rc || (want_rc == 0 && strcmp(got, want) != 0)) {
      printf("# pieces of %zu: rc %d (want %d), got \"%s\"\n", piece, rc,
             want_rc, got);
      T_ASSERT(0);
      return;
    }
  }
}

#define SAME(body, want) same(CT, body, sizeof(body) - 1, want, 0)
#define REFUSED(body, rc) same(CT, body, sizeof(body) - 1, "", rc)

static void test_forms(void) {
  SAME("--XyZ\r\n"
       "Content-Disposition: form-data; name=\"title\"\r\n"
       "\r\n"
       "hello\r\n"
       "--XyZ\r\n"
       "Content-Disposition: form-data; name=\"f\"; filename=\"a b.txt\"\r\n"
       "Content-Type: text/plain\r\n"
       "\r\n"
       "line1\r\nline2\r\n"
       "--XyZ--\r\n",
       "P(title,-,1)hello|P(f,a b.txt,2)line1\r\nline2|$");
  /* A preamble and an epilogue are ignored; an empty part, an empty
   * head; transport padding after a delimiter. */
  SAME("preamble --XyZ not yet\r\n--XyZ  \r\n\r\n\r\n--XyZ\r\n"
       "content-disposition: form-data; name=e\r\n\r\n"
       "\r\n--XyZ--epilogue\r\n--XyZ\r\nignored",
       "P(,-,0)|P(e,-,1)|$");
  /* Near-delimiters in the data stay data. */
  SAME("--XyZ\r\nContent-Disposition: form-data; name=d\r\n\r\n"
       "\r\n--XyA\r\r\n-\r\n--X\r\n\r\r\n--Xy\r\n--XyZ--",
       "P(d,-,1)\r\n--XyA\r\r\n-\r\n--X\r\n\r\r\n--Xy|$");
  /* A delimiter followed by anything but CR LF or "--" is malformed (the
   * boundary must not occur in the data). */
  REFUSED("--XyZ\r\n\r\nab\r\n--XyZZ\r\n--XyZ--", TERN_EINVAL);
}

static void test_refused(void) {
  char out[64];
  REFUSED("--XyZ\r\nno colon here\r\n\r\nx\r\n--XyZ--", TERN_EINVAL);
  REFUSED("--XyZ\r\nA: b\r\n folded\r\n\r\nx\r\n--XyZ--", TERN_EINVAL);
  REFUSED("--XyZ\r\nA: b\x01\r\n\r\nx\r\n--XyZ--", TERN_EINVAL);
  REFUSED("--XyZx\r\n\r\n", TERN_EINVAL); /* not CR LF or "--" */
  REFUSED("--XyZ\r\nContent-Disposition: form-data; name=\"x\r\n\r\n"
          "\r\n--XyZ--",
          TERN_EINVAL);
  /* Incomplete: no closing delimiter. */
  REFUSED("--XyZ\r\nA: b\r\n\r\ndata", 99);
  REFUSED("just a preamble", 99);
  /* 17 fields in a part, a head over 8 KiB. */
  REFUSED("--XyZ\r\na:1\r\nb:1\r\nc:1\r\nd:1\r\ne:1\r\nf:1\r\ng:1\r\nh:1\r\n"
          "i:1\r\nj:1\r\nk:1\r\nl:1\r\nm:1\r\nn:1\r\no:1\r\np:1\r\nq:1\r\n"
          "\r\nx\r\n--XyZ--",
          TERN_ETOOBIG);
  {
    static char big[9000];
    size_t n = (size_t)snprintf(big, sizeof(big), "--XyZ\r\nA: ");
    memset(big + n, 'v', 8500);
    memcpy(big + n + 8500, "\r\n\r\n--XyZ--", 12);
    T_EQ_INT(run(CT, big, n + 8511, 4096, out, sizeof(out)), TERN_ETOOBIG);
  }
  /* Content types. */
  T_EQ_INT(run("text/plain; boundary=a", "", 0, 1, out, sizeof(out)),
           TERN_EINVAL);
  T_EQ_INT(run("multipart/form-data", "", 0, 1, out, sizeof(out)), TERN_EINVAL);
  T_EQ_INT(run("multipart/form-data; boundary=", "", 0, 1, out, sizeof(out)),
           TERN_EINVAL);
  T_EQ_INT(
      run("multipart/form-data; boundary=\"a b \"", "", 0, 1, out, sizeof(out)),
      TERN_EINVAL);
  T_EQ_INT(run("multipart/form-data; boundary=01234567890123456789012345678"
               "9012345678901234567890123456789012345678901",
               "", 0, 1, out, sizeof(out)),
           TERN_EINVAL);
  /* A quoted boundary with a space, a case-insensitive type. */
  same("Multipart/Form-Data; charset=utf-8; boundary=\"a b\"",
       "--a b\r\n\r\nz\r\n--a b--", 20, "P(,-,0)z|$", 0);
}

static void test_limits(void) {
  tern_multipart *m;
  tern_multipart_event ev;
  size_t used;
  const char body[] = "--b\r\n\r\n1\r\n--b\r\n\r\n2\r\n--b\r\n\r\n3\r\n--b--";
  size_t off = 0;
  int rc, parts = 0;
  T_EQ_INT(tern_multipart_new(S_CT, sizeof(S_CT) - 1, 2, 0, &m), 0);
  while ((rc = tern_multipart_next(m, body + off, sizeof(body) - 1 - off, &used,
                                   &ev)) > 0) {
    off += used;
    parts += rc == TERN_MULTIPART_PART;
    if (rc == TERN_MULTIPART_END)
      break;
  }
  T_EQ_INT(rc, TERN_ETOOBIG); /* the third part */
  T_EQ_INT(parts, 2);
  /* The error stays the parser's answer. */
  T_EQ_INT(tern_multipart_next(m, "x", 1, &used, &ev), TERN_ETOOBIG);
  tern_multipart_free(m);
  T_EQ_INT(tern_multipart_new(S_CT, sizeof(S_CT) - 1, 0, 70000, &m),
           TERN_EINVAL);
  tern_multipart_free(NULL);
}

int main(void) {
  T_RUN(test_forms);
  T_RUN(test_refused);
  T_RUN(test_limits);
  return T_DONE();
}
