/* HTTP/1.1 request parser (see parse.h for the contract and the rules).
 *
 * Everything here works on caller-owned bytes and returns views into them.
 * Byte classification goes through one 256-entry table so that the inner
 * loops are a load and a mask per byte, with no function calls.
 */
#include "parse.h"

#include "core/text.h"

#include <limits.h>
#include <string.h>

/* Character classes, one bit each in `cls` below. */
enum {
  C_TCHAR = 1u << 0,  /* token character, RFC 9110 5.6.2 */
  C_FVAL = 1u << 1,   /* field-value byte: VCHAR, obs-text, SP, HTAB */
  C_TARGET = 1u << 2, /* request-target byte: VCHAR other than '#' */
  C_AUTH = 1u << 3,   /* reg-name byte: unreserved or sub-delims */
  C_HEX = 1u << 4,    /* HEXDIG */
  C_DIGIT = 1u << 5,  /* DIGIT */
};

/* Generated from the ABNF: tchar = "!#$%&'*+-.^_`|~" / DIGIT / ALPHA;
 * field-vchar = VCHAR / obs-text, plus SP and HTAB inside values; target
 * bytes are the visible ASCII characters a URI may carry ('#' starts a
 * fragment, which never belongs in a request); reg-name bytes exclude '%'
 * because percent-encoding is checked separately. Each entry ORs the C_*
 * bits (63: a digit, 31: a hex letter, 15: another letter). The rows hold
 * 16 byte values each and are aligned by hand, so the formatter is kept
 * off them. */
/* clang-format off */
static const unsigned char cls[256] = {
    0,  0,  0,  0,  0,  0,  0,  0,  0,  2,  0,  0,  0,  0,  0,  0,  /* 0x00 */
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  /* 0x10 */
    2, 15,  6,  3, 15,  7, 15, 15, 14, 14, 15, 15, 14, 15, 15,  6,  /* 0x20 */
   63, 63, 63, 63, 63, 63, 63, 63, 63, 63,  6, 14,  6, 14,  6,  6,  /* 0x30 */
    6, 31, 31, 31, 31, 31, 31, 15, 15, 15, 15, 15, 15, 15, 15, 15,  /* 0x40 */
   15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  6,  6,  6,  7, 15,  /* 0x50 */
    7, 31, 31, 31, 31, 31, 31, 15, 15, 15, 15, 15, 15, 15, 15, 15,  /* 0x60 */
   15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,  6,  7,  6, 15,  0,  /* 0x70 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0x80 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0x90 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xA0 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xB0 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xC0 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xD0 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xE0 */
    2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  2,  /* 0xF0 */
};
/* clang-format on */

#define IS(c, k) (cls[(unsigned char)(c)] & (k))
#define IS_WS(c) ((c) == ' ' || (c) == '\t')

/* Largest Content-Length or chunk size accepted: 2^62 leaves headroom for
 * offset arithmetic by callers and is far beyond any real body. */
#define SIZE_LIMIT ((uint64_t)1 << 62)

/* ASCII lowercase that leaves every other byte alone; comparing with
 * `c | 0x20` would wrongly match bytes such as '\r' against '-'. */
static inline unsigned char lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

/* Does s[0..n) equal the lowercase literal `lit` (also n bytes), ignoring
 * ASCII case in s? */
static int ieq(const char *s, const char *lit, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (lower((unsigned char)s[i]) != (unsigned char)lit[i])
      return 0;
  return 1;
}

#define IEQ_LIT(s, n, lit)                                                     \
  ((n) == sizeof(lit) - 1 && ieq((s), (lit), sizeof(lit) - 1))

static unsigned hexval(unsigned char c) {
  return c <= '9' ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
}

/* ------------------------------------------------------------------ */
/* Head end                                                             */

size_t tern__h1_head_end(const char *buf, size_t len, size_t *scanned) {
  size_t i = *scanned, r;
  const char *p, *q, *end = buf + len;

  /* A stale offset from a buffer that has since shrunk cannot be trusted;
   * rescanning is always correct, only slower. */
  if (i > len)
    i = 0;

  /* Skip empty lines before the request line (RFC 9112 2.2), so that a
   * "\r\n\r\n" made of two such lines is not taken for an empty head. The
   * resume offset never rests on the start of a CRLF pair after this phase
   * (see below), so this loop is a no-op when resuming a later search. */
  while (i + 1 < len && buf[i] == '\r' && buf[i + 1] == '\n')
    i += 2;
  if (i + 1 >= len) {
    /* Either everything so far is empty lines or a lone '\r' waits for
     * its partner: resume right here next time. */
    *scanned = i;
    return 0;
  }

  /* Look for each LF and check the three bytes before it; a match must
   * start at or after i, so the first useful LF is at i + 3. */
  p = buf + i + 3;
  while (p < end) {
    q = memchr(p, '\n', (size_t)(end - p));
    if (q == NULL)
      break;
    if (q[-1] == '\r' && q[-2] == '\n' && q[-3] == '\r')
      return (size_t)(q - buf) + 1;
    p = q + 1;
  }

  /* Not found: only a match starting in the last three bytes can still
   * complete. If that resume point starts a CRLF pair, the empty-line skip
   * above would jump over it next time, so step back one byte (which then
   * cannot start a pair, since it is followed by '\r'). */
  r = (len >= 3 && len - 3 > i) ? len - 3 : i;
  if (r > i && buf[r] == '\r' && buf[r + 1] == '\n')
    r--;
  *scanned = r;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Request line                                                         */

typedef struct {
  size_t method; /* offset of the method */
  size_t method_len;
  size_t target; /* offset of the request-target */
  size_t target_len;
  size_t end; /* offset just past the request line's LF */
  int minor;  /* HTTP/1.minor */
} rline;

/* Scan the request line in buf[0..len), which may be cut short anywhere.
 * Returns 1 when the line is complete and valid, 0 when every byte so far
 * could still begin a valid line, or a TERN__H1_E* code. parse_head and
 * check_partial both use this one scanner so that an early rejection by
 * check_partial always agrees with what parse_head would say about the
 * whole head. */
static int scan_request_line(const char *buf, size_t len,
                             const tern__h1_limits *lim, rline *rl) {
  size_t i = 0, m, t, n;
  const char *v;
  int k;

  /* Empty lines are skipped, but only up to max_head: a head made of
   * nothing but empty lines is as much a flood as any other. */
  while (i + 1 < len && i < lim->max_head && buf[i] == '\r' &&
         buf[i + 1] == '\n')
    i += 2;
  if (i >= lim->max_head && i < len)
    return TERN__H1_E431;
  if (i + 1 == len && buf[i] == '\r')
    return 0;

  /* method = token, bounded so a slow stream of tchars is cut off early;
   * RFC 9112 3 says an over-long method deserves 501. */
  m = i;
  while (i < len && IS(buf[i], C_TCHAR)) {
    if (++i - m > TERN__H1_MAX_METHOD)
      return TERN__H1_E501;
  }
  if (i == len)
    return 0;
  if (i == m || buf[i] != ' ')
    return TERN__H1_E400;
  rl->method = m;
  rl->method_len = i - m;

  t = ++i;
  while (i < len && IS(buf[i], C_TARGET)) {
    if (++i - t > lim->max_uri)
      return TERN__H1_E414;
  }
  if (i == len)
    return 0;
  if (i == t || buf[i] != ' ')
    return TERN__H1_E400;
  rl->target = t;
  rl->target_len = i - t;

  /* HTTP-version = "HTTP/" DIGIT "." DIGIT, then CRLF. A well-formed
   * version we do not speak is 505; anything else is 400. */
  i++;
  v = buf + i;
  n = len - i;
  /* Nearly every request says HTTP/1.1 or HTTP/1.0: one comparison of
   * the eight bytes; anything else, or a line still arriving, takes the
   * byte-by-byte check that tells 400 from 505. */
  if (n >= 8 && memcmp(v, "HTTP/1.", 7) == 0 && IS(v[7], C_DIGIT))
    k = 8;
  else
    k = 0;
  for (; k < 8 && (size_t)k < n; k++) {
    int ok =
        (k == 5 || k == 7) ? IS(v[k], C_DIGIT) != 0 : v[k] == "HTTP/1.x"[k];
    if (!ok)
      return TERN__H1_E400;
  }
  if (n < 9)
    return 0;
  if (v[8] != '\r')
    return TERN__H1_E400;
  /* Within major version 1 a higher minor version is served as the
   * highest one we implement (RFC 9110 2.5); another major is not ours. */
  if (v[5] != '1')
    return TERN__H1_E505;
  if (n < 10)
    return 0;
  if (v[9] != '\n')
    return TERN__H1_E400;
  rl->minor = v[7] == '0' ? 0 : 1;
  rl->end = i + 10;
  return 1;
}

/* authority = host [ ":" port ] where host is an IP-literal in brackets or
 * a reg-name / IPv4address (RFC 3986 3.2). userinfo ('@') is rejected, as
 * RFC 9110 4.2.4 asks. `need_host` refuses an empty host (http URIs, RFC
 * 9110 4.2.1); `need_port` demands a non-empty port (CONNECT). */
static int valid_authority(const char *p, size_t n, int need_host,
                           int need_port) {
  size_t i = 0, port;

  if (n > 0 && p[0] == '[') {
    i = 1;
    while (i < n && (IS(p[i], C_HEX) || p[i] == ':' || p[i] == '.'))
      i++;
    if (i == 1 || i == n || p[i] != ']')
      return 0;
    i++;
  } else {
    /* reg-name bytes (C_AUTH has neither '%' nor ':') in runs, with a
     * percent-encoded byte between runs. */
    for (;;) {
      while (i < n && IS(p[i], C_AUTH))
        i++;
      if (i == n || p[i] != '%')
        break;
      if (i + 2 >= n || !IS(p[i + 1], C_HEX) || !IS(p[i + 2], C_HEX))
        return 0;
      i += 3;
    }
    if (i < n && p[i] != ':')
      return 0;
    if (i == 0 && need_host)
      return 0;
  }
  if (i == n)
    return !need_port;
  if (p[i] != ':')
    return 0;
  port = ++i;
  while (i < n && IS(p[i], C_DIGIT))
    i++;
  return i == n && !(need_port && i == port);
}

/* Split origin-form or an absolute URI's path-and-query at the first '?'. */
static void split_query(tern__h1_head *h, const char *p, size_t n) {
  const char *q = memchr(p, '?', n);

  if (q == NULL) {
    h->path = p;
    h->path_len = n;
    h->query = NULL;
    h->query_len = 0;
  } else {
    h->path = p;
    h->path_len = (size_t)(q - p);
    h->query = q + 1;
    h->query_len = n - h->path_len - 1;
  }
}

/* Work out which of the four request-target forms (RFC 9112 3.2) this is
 * and fill path, query, authority and the form flags. Returns 0 or E400. */
static int classify_target(tern__h1_head *h) {
  const char *t = h->target;
  size_t n = h->target_len, a, e;

  if (h->method_len == 7 && memcmp(h->method, "CONNECT", 7) == 0) {
    /* authority-form, and only that, for CONNECT; its authority is the
     * target itself, so it wins over Host as absolute-form's does. */
    if (!valid_authority(t, n, 1, 1))
      return TERN__H1_E400;
    h->authority = t;
    h->authority_len = n;
    h->path = t;
    h->path_len = 0;
    return 0;
  }
  if (t[0] == '/') {
    split_query(h, t, n);
    return 0;
  }
  if (n == 1 && t[0] == '*') {
    if (!(h->method_len == 7 && memcmp(h->method, "OPTIONS", 7) == 0))
      return TERN__H1_E400;
    h->flags |= TERN__H1_F_ASTERISK;
    h->path = t;
    h->path_len = 1;
    return 0;
  }

  /* absolute-form: a server has no business with schemes other than
   * http and https, and those need "//" and a host. */
  if (n >= 7 && ieq(t, "http://", 7))
    a = 7;
  else if (n >= 8 && ieq(t, "https://", 8))
    a = 8;
  else
    return TERN__H1_E400;
  for (e = a; e < n && t[e] != '/' && t[e] != '?'; e++)
    ;
  if (!valid_authority(t + a, e - a, 1, 0))
    return TERN__H1_E400;
  h->flags |= TERN__H1_F_ABSOLUTE;
  h->authority = t + a;
  h->authority_len = e - a;
  split_query(h, t + e, n - e);
  if (h->path_len == 0) {
    /* RFC 9112 3.2.1: an empty path is sent as "/", which is not in the
     * input, so the view points at a static string instead. */
    h->path = "/";
    h->path_len = 1;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Lists                                                                */

/* Elements and tokens of lists: tern__list_next and tern__has_token, in
 * lib/core/text.c (shared with the other protocols' header handling). */

/* ------------------------------------------------------------------ */
/* Head                                                                 */

/* What the fields said about framing and connection handling, gathered
 * while the fields are walked and judged once the head is complete
 * (fields may come in any order). */
typedef struct {
  int cl_seen, te_seen, te_chunked, te_last_chunked, te_count;
  int close, keepalive, conn_upgrade, expect100;
  const char *host, *upgrade;
  size_t host_len, upgrade_len;
  uint64_t cl;
} hstate;

static int parse_content_length(const char *v, size_t n, uint64_t *out) {
  uint64_t x = 0;
  size_t i;

  /* Only 1*DIGIT: no sign, no inner space, no list. A list of equal values
   * is legal per RFC 9110 8.6 but buys nothing and has been a smuggling
   * vector, so it is refused. */
  if (n == 0)
    return TERN__H1_E400;
  for (i = 0; i < n; i++) {
    unsigned d = (unsigned char)v[i] - '0';
    if (d > 9 || x > (SIZE_LIMIT - d) / 10)
      return TERN__H1_E400;
    x = x * 10 + d;
  }
  *out = x;
  return 0;
}

static int parse_transfer_encoding(hstate *s, const char *v, size_t n) {
  size_t pos = 0, elen, i;
  const char *e;

  s->te_seen = 1;
  while (tern__list_next(v, n, &pos, &e, &elen)) {
    /* transfer-coding = token *( OWS ";" OWS transfer-parameter ). The
     * parameters of codings other than chunked are not ours to judge. */
    size_t tl;

    for (i = 0; i < elen && IS(e[i], C_TCHAR); i++)
      ;
    tl = i;
    while (i < elen && IS_WS(e[i]))
      i++;
    if (tl == 0 || (i < elen && e[i] != ';'))
      return TERN__H1_E400;
    s->te_count++;
    s->te_last_chunked = IEQ_LIT(e, tl, "chunked");
    if (s->te_last_chunked) {
      /* chunked takes no parameters and may be applied only once (RFC
       * 9112 6.1); anything else here is ambiguous framing. */
      if (tl != elen || s->te_chunked)
        return TERN__H1_E400;
      s->te_chunked = 1;
    }
  }
  return 0;
}

static int parse_connection(hstate *s, const char *v, size_t n) {
  size_t pos = 0, elen;
  const char *e;

  while (tern__list_next(v, n, &pos, &e, &elen)) {
    if (IEQ_LIT(e, elen, "close"))
      s->close = 1;
    else if (IEQ_LIT(e, elen, "keep-alive"))
      s->keepalive = 1;
    else if (IEQ_LIT(e, elen, "upgrade"))
      s->conn_upgrade = 1;
  }
  return 0;
}

/* Note what a field means for the head as a whole. Dispatch is on the name
 * length first so that most fields cost one switch and no comparison. */
static int take_field(hstate *s, const char *name, size_t nl, const char *v,
                      size_t vl) {
  switch (nl) {
  case 4:
    if (!ieq(name, "host", 4))
      break;
    /* RFC 9112 3.2: more than one Host, or an invalid one, is a 400. */
    if (s->host != NULL || !valid_authority(v, vl, 0, 0))
      return TERN__H1_E400;
    s->host = v;
    s->host_len = vl;
    break;
  case 6:
    if (ieq(name, "expect", 6) && tern__has_token(v, vl, "100-continue", 12))
      s->expect100 = 1;
    break;
  case 7:
    /* Only the first Upgrade field is kept: a view cannot join several,
     * and a client offering protocols lists them in one field. */
    if (ieq(name, "upgrade", 7) && s->upgrade == NULL) {
      s->upgrade = v;
      s->upgrade_len = vl;
    }
    break;
  case 10:
    if (ieq(name, "connection", 10))
      return parse_connection(s, v, vl);
    break;
  case 14:
    if (!ieq(name, "content-length", 14))
      break;
    if (s->cl_seen)
      return TERN__H1_E400;
    s->cl_seen = 1;
    return parse_content_length(v, vl, &s->cl);
  case 17:
    if (ieq(name, "transfer-encoding", 17))
      return parse_transfer_encoding(s, v, vl);
    break;
  default:
    break;
  }
  return 0;
}

int tern__h1_parse_head(const char *buf, size_t len, tern__h1_head *h,
                        const tern__h1_limits *lim) {
  rline rl;
  hstate s;
  size_t i, cap, nf = 0;
  int r;

  r = scan_request_line(buf, len, lim, &rl);
  if (r < 0)
    return r;
  if (r == 0)
    return TERN__H1_E400; /* the head ended inside its request line */
  if (len > lim->max_head || len > INT_MAX)
    return TERN__H1_E431;

  cap = h->nfields < lim->max_headers ? h->nfields : lim->max_headers;
  h->method = buf + rl.method;
  h->method_len = rl.method_len;
  h->target = buf + rl.target;
  h->target_len = rl.target_len;
  h->path = NULL;
  h->path_len = 0;
  h->query = NULL;
  h->query_len = 0;
  h->authority = NULL;
  h->authority_len = 0;
  h->upgrade = NULL;
  h->upgrade_len = 0;
  h->version_minor = rl.minor;
  h->flags = 0;
  h->body = TERN__H1_BODY_NONE;
  h->content_length = 0;
  h->nfields = 0;
  r = classify_target(h);
  if (r < 0)
    return r;

  memset(&s, 0, sizeof s);
  i = rl.end;
  for (;;) {
    size_t name, nl, val, vend;

    if (i >= len)
      return TERN__H1_E400;
    if (buf[i] == '\r') {
      /* The empty line must end the buffer exactly: bytes after it would
       * mean the caller's length and ours disagree. */
      if (i + 2 != len || buf[i + 1] != '\n')
        return TERN__H1_E400;
      break;
    }

    /* field-name ":" directly; a line opening with SP or HTAB is obs-fold
     * and whitespace before the colon is forbidden (RFC 9112 5.1, 5.2),
     * and both fail here because neither is a tchar. */
    name = i;
    while (i < len && IS(buf[i], C_TCHAR))
      i++;
    if (i == name || i == len || buf[i] != ':')
      return TERN__H1_E400;
    nl = i - name;
    i++;
    while (i < len && IS_WS(buf[i]))
      i++;
    val = i;
    while (i < len && IS(buf[i], C_FVAL))
      i++;
    /* The value ends at the first byte that is not allowed in one, and
     * that byte must begin a CRLF: NUL, bare CR, bare LF and other CTLs
     * all land here. */
    if (i + 1 >= len || buf[i] != '\r' || buf[i + 1] != '\n')
      return TERN__H1_E400;
    vend = i;
    while (vend > val && IS_WS(buf[vend - 1]))
      vend--;
    i += 2;

    if (nf == cap)
      return TERN__H1_E431;
    h->fields[nf].name = buf + name;
    h->fields[nf].name_len = nl;
    h->fields[nf].value = buf + val;
    h->fields[nf].value_len = vend - val;
    nf++;
    r = take_field(&s, buf + name, nl, buf + val, vend - val);
    if (r < 0)
      return r;
  }
  h->nfields = nf;

  if (s.host != NULL) {
    h->flags |= TERN__H1_F_HAS_HOST;
    if (h->authority == NULL) {
      h->authority = s.host;
      h->authority_len = s.host_len;
    }
  } else if (rl.minor == 1) {
    return TERN__H1_E400;
  }

  /* Framing (RFC 9112 6.1-6.3): Transfer-Encoding is HTTP/1.1 only, never
   * goes with Content-Length, and must end in chunked for a request to
   * have a knowable length. */
  if (s.te_seen) {
    if (rl.minor == 0 || s.cl_seen || s.te_count == 0)
      return TERN__H1_E400;
    /* chunked is the only coding we decode: any other one, before it or
     * instead of it, is not implemented (RFC 9112 6.1), and the body it
     * frames cannot be handed on as if it were plain. */
    if (!s.te_last_chunked || s.te_count != 1)
      return TERN__H1_E501;
    h->body = TERN__H1_BODY_CHUNKED;
  } else if (s.cl_seen) {
    h->body = TERN__H1_BODY_LENGTH;
    h->content_length = s.cl;
  }

  if (s.close)
    h->flags |= TERN__H1_F_CLOSE;
  if (s.keepalive)
    h->flags |= TERN__H1_F_KEEPALIVE;
  if (rl.minor == 0 && !s.keepalive)
    h->flags |= TERN__H1_F_CLOSE;
  /* Upgrade and Expect mean nothing in HTTP/1.0 (RFC 9110 7.8, 10.1.1). */
  if (rl.minor == 1 && s.conn_upgrade && s.upgrade_len > 0) {
    h->flags |= TERN__H1_F_UPGRADE;
    h->upgrade = s.upgrade;
    h->upgrade_len = s.upgrade_len;
  }
  if (rl.minor == 1 && s.expect100)
    h->flags |= TERN__H1_F_EXPECT100;
  return (int)len;
}

int tern__h1_check_partial(const char *buf, size_t len,
                           const tern__h1_limits *lim) {
  rline rl;
  int r = scan_request_line(buf, len, lim, &rl);

  if (r < 0)
    return r;
  if (len > lim->max_head)
    return TERN__H1_E431;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Chunked decoder                                                      */

enum {
  CS_SIZE,     /* chunk-size hex digits; line_len counts them */
  CS_SIZE_BWS, /* whitespace after the size, before ';' */
  CS_EXT,      /* chunk extensions, skipped up to CR */
  CS_SIZE_LF,  /* LF ending the size line */
  CS_DATA,     /* chunk data, `remaining` bytes */
  CS_DATA_CR,  /* CR after chunk data */
  CS_DATA_LF,  /* LF after chunk data */
  CS_TRAILER,  /* start of a trailer line (or the final CRLF) */
  CS_TR_NAME,  /* trailer field-name */
  CS_TR_VALUE, /* trailer field-value up to CR */
  CS_TR_LF,    /* LF ending a trailer line */
  CS_END_LF,   /* LF of the final CRLF */
  CS_DONE,
  CS_ERROR,
};

void tern__h1_chunked_init(tern__h1_chunked *c, size_t max_line) {
  c->state = CS_SIZE;
  c->remaining = 0;
  c->line_len = 0;
  c->trailer_len = 0;
  c->max_line = max_line;
}

int tern__h1_chunked_decode(tern__h1_chunked *c, const char *in, size_t len,
                            size_t *consumed, size_t *data_off,
                            size_t *data_len) {
  size_t i, n, tr_start = SIZE_MAX;

  *data_off = 0;
  *data_len = 0;
  *consumed = 0;
  if (c->state == CS_DONE)
    return TERN__H1_CHUNKED_DONE;
  if (c->state == CS_ERROR)
    return TERN__H1_E400;

  /* One byte per step for framing, which is a handful of bytes per chunk;
   * the data itself is handed back as one span without being touched. */
  for (i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)in[i];

    switch (c->state) {
    case CS_DATA:
      n = len - i;
      if (n > c->remaining)
        n = (size_t)c->remaining;
      c->remaining -= n;
      if (c->remaining == 0)
        c->state = CS_DATA_CR;
      *data_off = i;
      *data_len = n;
      *consumed = i + n;
      return TERN__H1_CHUNKED_MORE;

    case CS_SIZE:
      if (IS(ch, C_HEX)) {
        /* The value is bounded, not the digits: leading zeros are valid
         * (the line as a whole is bounded by max_line). Checking before
         * the shift keeps it from overflowing. */
        if (c->remaining > SIZE_LIMIT >> 4)
          goto bad;
        c->remaining = c->remaining * 16 + hexval(ch);
        if (c->remaining > SIZE_LIMIT)
          goto bad;
      } else if (c->line_len == 0) {
        goto bad;
      } else if (ch == ';') {
        c->state = CS_EXT;
      } else if (IS_WS(ch)) {
        c->state = CS_SIZE_BWS;
      } else if (ch == '\r') {
        c->state = CS_SIZE_LF;
        break;
      } else {
        goto bad;
      }
      if (++c->line_len > c->max_line)
        goto bad;
      break;

    case CS_SIZE_BWS:
      /* BWS is only allowed in front of an extension, not before CRLF. */
      if (ch == ';')
        c->state = CS_EXT;
      else if (!IS_WS(ch))
        goto bad;
      if (++c->line_len > c->max_line)
        goto bad;
      break;

    case CS_EXT:
      if (ch == '\r') {
        c->state = CS_SIZE_LF;
        break;
      }
      if (!IS(ch, C_FVAL) || ++c->line_len > c->max_line)
        goto bad;
      break;

    case CS_SIZE_LF:
      if (ch != '\n')
        goto bad;
      if (c->remaining > 0) {
        c->state = CS_DATA;
      } else {
        c->state = CS_TRAILER;
        tr_start = i + 1;
      }
      break;

    case CS_DATA_CR:
      if (ch != '\r')
        goto bad;
      c->state = CS_DATA_LF;
      break;

    case CS_DATA_LF:
      if (ch != '\n')
        goto bad;
      c->state = CS_SIZE;
      c->line_len = 0;
      break;

    case CS_TRAILER:
      if (ch == '\r') {
        c->state = CS_END_LF;
        break;
      }
      /* A trailer line is a field line like those of the head: a name
       * at the very start (no obs-fold), a colon, a value. */
      if (!IS(ch, C_TCHAR))
        goto bad;
      c->state = CS_TR_NAME;
      goto count_trailer;

    case CS_TR_NAME:
      if (ch == ':')
        c->state = CS_TR_VALUE;
      else if (!IS(ch, C_TCHAR))
        goto bad;
      goto count_trailer;

    case CS_TR_VALUE:
      if (ch == '\r')
        c->state = CS_TR_LF;
      else if (!IS(ch, C_FVAL))
        goto bad;
      goto count_trailer;

    case CS_TR_LF:
      if (ch != '\n')
        goto bad;
      c->state = CS_TRAILER;
    count_trailer:
      if (++c->trailer_len > c->max_line)
        goto bad;
      break;

    case CS_END_LF:
      if (ch != '\n')
        goto bad;
      c->state = CS_DONE;
      *consumed = i + 1;
      /* The trailer section is in[tr_start .. final CR) when it began in
       * this call; otherwise only trailer_len says how long it was. */
      if (tr_start != SIZE_MAX) {
        *data_off = tr_start;
        *data_len = i - 1 - tr_start;
      } else {
        *data_off = i + 1;
      }
      return TERN__H1_CHUNKED_DONE;

    default:
      goto bad;
    }
  }
  *consumed = len;
  return TERN__H1_CHUNKED_MORE;

bad:
  c->state = CS_ERROR;
  *consumed = i;
  return TERN__H1_E400;
}
