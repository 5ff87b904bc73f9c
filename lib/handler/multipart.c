/* multipart/form-data (RFC 7578 over RFC 2046's framing), streaming and
 * sans-I/O (tern.h, "Multipart bodies"): the caller feeds the body in
 * whatever pieces it arrives in and gets events back, one per call: a
 * part's head (its fields, name and filename), its data as views into the
 * caller's bytes, its end, the end of the body. Nothing is copied but a
 * part's head (bounded by max_head); one allocation per body, at
 * tern_multipart_new.
 *
 * The delimiter is CR LF "--" boundary. Data is scanned for it with a
 * KMP automaton, so a delimiter split across pieces is found, and bytes
 * held back as a possible delimiter prefix are handed out from the
 * delimiter itself (they equal its prefix) when it turns out not to be
 * one: no buffer for them. The first delimiter may come without its CR LF
 * (the body's very start), which the automaton starts past. */
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "tern.h"

#define BOUNDARY_MAX 70 /* RFC 2046 5.1.1 */
#define DELIM_MAX (BOUNDARY_MAX + 4)
#define FIELDS_MAX 16

enum { S_PREAMBLE, S_AFTER, S_AFTER_DASH, S_AFTER_CR, S_HEAD, S_BODY, S_END };

struct tern_multipart {
  int state;
  int err; /* sticky: the first error */
  size_t match;
  size_t dlen;
  unsigned char fail[DELIM_MAX + 1];
  char delim[DELIM_MAX];
  size_t parts, max_parts, max_head, hlen;
  int in_part;
  tern_header fields[FIELDS_MAX];
  char head[]; /* max_head bytes */
};

/* RFC 2046 bcharsnospace and space (not last). */
static int bchar(unsigned char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
         (c != 0 && strchr("'()+_,-./:=? ", c) != NULL);
}

/* A parameter `name` of a field value of the form `x; a=b; c="d"`: its
 * value as a view (the inside of a quoted string, escapes left as they
 * are). 1 when found, 0 when not, -1 when the value is malformed. */
static int param(const char *v, size_t n, const char *name, const char **out,
                 size_t *out_len) {
  size_t i = 0, nl = strlen(name);
  while (i < n && v[i] != ';')
    i++;
  while (i < n) {
    size_t k, ks;
    i++; /* the ';' */
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
      i++;
    for (ks = i; i < n && tern__is_tchar((unsigned char)v[i]); i++)
      ;
    k = i - ks;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
      i++;
    if (k == 0 || i >= n || v[i] != '=')
      return k == 0 && i >= n ? 0 : -1;
    i++;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
      i++;
    const char *vs = v + i;
    size_t vl;
    if (i < n && v[i] == '"') {
      vs = v + ++i;
      while (i < n && v[i] != '"')
        i += v[i] == '\\' && i + 1 < n ? 2 : 1;
      if (i >= n)
        return -1;
      vl = (size_t)(v + i - vs);
      i++;
    } else {
      while (i < n && tern__is_tchar((unsigned char)v[i]))
        i++;
      vl = (size_t)(v + i - vs);
    }
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
      i++;
    if (i < n && v[i] != ';')
      return -1;
    if (k == nl && tern__ieq(v + ks, name, nl)) {
      *out = vs;
      *out_len = vl;
      return 1;
    }
  }
  return 0;
}

int tern_multipart_new(const char *content_type, size_t len, size_t max_parts,
                       size_t max_head, tern_multipart **out) {
  const char *b = NULL;
  size_t bl = 0, i, k;
  tern_multipart *m;

  if (out == NULL || content_type == NULL)
    return TERN_EINVAL;
  *out = NULL;
  if (max_head == 0)
    max_head = 8192;
  if (max_parts == 0)
    max_parts = 1000;
  if (max_head > 65536)
    return TERN_EINVAL;
  /* multipart/<subtype>; boundary=... */
  if (len < 11 || !tern__ieq(content_type, "multipart/", 10) ||
      param(content_type, len, "boundary", &b, &bl) != 1 || bl == 0 ||
      bl > BOUNDARY_MAX || b[bl - 1] == ' ')
    return TERN_EINVAL;
  for (i = 0; i < bl; i++)
    if (!bchar((unsigned char)b[i]))
      return TERN_EINVAL;
  if ((m = malloc(sizeof *m + max_head)) == NULL)
    return TERN_ENOMEM;
  memset(m, 0, sizeof *m);
  memcpy(m->delim, "\r\n--", 4);
  memcpy(m->delim + 4, b, bl);
  m->dlen = bl + 4;
  /* KMP failure: fail[j] is the longest proper prefix of delim[0..j)
   * that is also its suffix. */
  m->fail[0] = m->fail[1] = 0;
  for (i = 1, k = 0; i < m->dlen; i++) {
    while (k > 0 && m->delim[i] != m->delim[k])
      k = m->fail[k];
    if (m->delim[i] == m->delim[k])
      k++;
    m->fail[i + 1] = (unsigned char)k;
  }
  m->max_parts = max_parts;
  m->max_head = max_head;
  m->state = S_PREAMBLE;
  m->match = 2; /* the body may start with the delimiter, CR LF aside */
  *out = m;
  return 0;
}

void tern_multipart_free(tern_multipart *m) {
  free(m);
}

int tern_multipart_finished(const tern_multipart *m) {
  return m != NULL && m->state == S_END;
}

/* The part's head, m->head[0..hlen) ending with CR LF CR LF (or just CR
 * LF when empty), as fields. */
static int parse_head(tern_multipart *m, tern_multipart_event *ev) {
  const char *p = m->head, *end = m->head + m->hlen - 2;
  size_t nf = 0, i;
  ev->name = ev->filename = NULL;
  ev->name_len = ev->filename_len = 0;
  while (p < end) {
    const char *eol = p, *colon, *vs, *ve;
    while (eol + 1 < end + 2 && !(eol[0] == '\r' && eol[1] == '\n'))
      eol++;
    for (colon = p; colon < eol && tern__is_tchar((unsigned char)*colon);
         colon++)
      ;
    if (colon == p || colon == eol || *colon != ':')
      return TERN_EINVAL; /* no name, or obs-fold, or a bad byte */
    if (nf == FIELDS_MAX)
      return TERN_ETOOBIG;
    for (vs = colon + 1; vs < eol && (*vs == ' ' || *vs == '\t'); vs++)
      ;
    for (ve = eol; ve > vs && (ve[-1] == ' ' || ve[-1] == '\t'); ve--)
      ;
    for (i = 0; vs + i < ve; i++)
      if ((unsigned char)vs[i] < 0x20 && vs[i] != '\t')
        return TERN_EINVAL;
    m->fields[nf].name = p;
    m->fields[nf].name_len = (size_t)(colon - p);
    m->fields[nf].value = vs;
    m->fields[nf].value_len = (size_t)(ve - vs);
    if (tern__ieq_lit(p, (size_t)(colon - p), "content-disposition")) {
      const char *v = vs;
      size_t vl = (size_t)(ve - vs);
      if (param(v, vl, "name", &ev->name, &ev->name_len) < 0 ||
          param(v, vl, "filename", &ev->filename, &ev->filename_len) < 0)
        return TERN_EINVAL;
    }
    nf++;
    p = eol + 2;
  }
  ev->fields = m->fields;
  ev->nfields = nf;
  return 0;
}

static int fail(tern_multipart *m, int err) {
  m->err = err;
  return err;
}

int tern_multipart_next(tern_multipart *m, const char *in, size_t len,
                        size_t *used, tern_multipart_event *ev) {
  size_t i = 0, run = 0;
  int rc;

  if (m == NULL || used == NULL || ev == NULL || (len > 0 && in == NULL))
    return TERN_EINVAL;
  memset(ev, 0, sizeof *ev);
  *used = 0;
  if (m->err != 0)
    return m->err;
  while (i < len) {
    unsigned char c = (unsigned char)in[i];
    switch (m->state) {
    case S_PREAMBLE:
    case S_BODY:
      if (c == (unsigned char)m->delim[m->match]) {
        if (m->match == 0 && i > run && m->state == S_BODY) {
          /* Data up to a possible delimiter goes out first. */
          ev->type = TERN_MULTIPART_DATA;
          ev->data = in + run;
          ev->len = i - run;
          *used = i;
          return ev->type;
        }
        i++;
        if (++m->match < m->dlen)
          continue;
        m->match = 0;
        run = i;
        m->state = S_AFTER;
        if (m->in_part) {
          m->in_part = 0;
          *used = i;
          return ev->type = TERN_MULTIPART_PART_END;
        }
        continue;
      }
      if (m->match > 0) {
        /* Not the delimiter after all: what was held back (its prefix)
         * is data, but for the part that may still start one. */
        size_t keep = m->fail[m->match], out = m->match - keep;
        m->match = keep;
        if (m->state == S_BODY) {
          ev->type = TERN_MULTIPART_DATA;
          ev->data = m->delim;
          ev->len = out;
          *used = i;
          return ev->type;
        }
        continue; /* c is looked at again against the shorter match */
      }
      i++;
      if (m->state == S_PREAMBLE)
        run = i;
      continue;
    case S_AFTER: /* "--" ends the body; LWSP, then CR LF, a part */
      i++;
      if (c == '-')
        m->state = S_AFTER_DASH;
      else if (c == '\r')
        m->state = S_AFTER_CR;
      else if (c != ' ' && c != '\t')
        return fail(m, TERN_EINVAL);
      continue;
    case S_AFTER_DASH:
      i++;
      if (c != '-')
        return fail(m, TERN_EINVAL);
      m->state = S_END;
      *used = len; /* the epilogue is ignored */
      return ev->type = TERN_MULTIPART_END;
    case S_AFTER_CR:
      i++;
      if (c != '\n')
        return fail(m, TERN_EINVAL);
      if (m->parts == m->max_parts)
        return fail(m, TERN_ETOOBIG);
      m->state = S_HEAD;
      m->hlen = 0;
      continue;
    case S_HEAD:
      if (m->hlen == m->max_head)
        return fail(m, TERN_ETOOBIG);
      m->head[m->hlen++] = (char)c;
      i++;
      if ((m->hlen == 2 && memcmp(m->head, "\r\n", 2) == 0) ||
          (m->hlen >= 4 && memcmp(m->head + m->hlen - 4, "\r\n\r\n", 4) == 0)) {
        if ((rc = parse_head(m, ev)) != 0)
          return fail(m, rc);
        m->parts++;
        m->in_part = 1;
        m->state = S_BODY;
        *used = i;
        return ev->type = TERN_MULTIPART_PART;
      }
      continue;
    case S_END:
      *used = len;
      return ev->type = TERN_MULTIPART_END;
    }
  }
  *used = len;
  /* Data to the end of the piece, but for a possible delimiter's start
   * at its end, held (a match carried over from an earlier piece covers
   * all of this one: then nothing goes out). */
  if (m->state == S_BODY && i - run > m->match) {
    ev->type = TERN_MULTIPART_DATA;
    ev->data = in + run;
    ev->len = i - run - m->match;
    return ev->type;
  }
  return ev->type = TERN_MULTIPART_MORE;
}
