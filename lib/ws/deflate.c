/* permessage-deflate (see deflate.h for the contract and the decisions).
 */
#include "deflate.h"

#include "core/text.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Policy                                                               */

void tern__ws_deflate_policy_init(tern__ws_deflate_policy *p) {
  p->enable = 1;
  p->server_max_window_bits = 15;
  p->client_max_window_bits = 15;
  p->client_no_context_takeover = 0;
  p->mem_level = 8;
  p->level = Z_DEFAULT_COMPRESSION;
}

static int clamp(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* ------------------------------------------------------------------ */
/* Negotiation                                                          */

static unsigned char lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

/* Does s[0..n) equal the lowercase literal `lit`, ignoring ASCII case? */
static int ieq(const char *s, size_t n, const char *lit) {
  size_t i;

  if (n != strlen(lit))
    return 0;
  for (i = 0; i < n; i++)
    if (lower((unsigned char)s[i]) != (unsigned char)lit[i])
      return 0;
  return 1;
}

typedef struct {
  const char *s;
  size_t n, i;
} cursor;

static void skip_ows(cursor *c) {
  while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t'))
    c->i++;
}

/* Take a token; returns its length (0: none there). */
static size_t take_token(cursor *c, const char **t) {
  size_t start = c->i;

  while (c->i < c->n && tern__is_tchar((unsigned char)c->s[c->i]))
    c->i++;
  *t = c->s + start;
  return c->i - start;
}

/* Take a parameter value: a token or a quoted string (RFC 9110 5.6.4).
 * The value, unescaped, goes to out (cap bytes); a longer one reports
 * length cap + 1 (no value we accept is that long). Returns 0 on a syntax
 * error. */
static int take_value(cursor *c, char *out, size_t cap, size_t *len) {
  const char *t;
  size_t n = 0, k;
  unsigned char ch;

  if (c->i < c->n && c->s[c->i] == '"') {
    for (c->i++;; c->i++) {
      if (c->i == c->n)
        return 0; /* no closing quote */
      ch = (unsigned char)c->s[c->i];
      if (ch == '"')
        break;
      if (ch == '\\') {
        if (++c->i == c->n)
          return 0;
        ch = (unsigned char)c->s[c->i];
        if (ch < 0x20 ? ch != '\t' : ch == 0x7f)
          return 0;
      } else if (ch < 0x20 ? ch != '\t' : ch == 0x7f) {
        return 0;
      }
      if (n < cap)
        out[n] = (char)ch;
      if (n <= cap)
        n++;
    }
    c->i++;
    /* RFC 6455 9.1: once unescaped, a quoted value must still be a
     * token; one that is not (the empty one included) is no value we
     * know, so it reads as too long, which every check refuses. */
    if (n == 0)
      n = cap + 1;
    for (k = 0; k < n && k < cap; k++)
      if (!tern__is_tchar((unsigned char)out[k]))
        n = cap + 1;
    *len = n;
    return 1;
  }
  n = take_token(c, &t);
  if (n == 0)
    return 0;
  memcpy(out, t, n < cap ? n : cap);
  *len = n <= cap ? n : cap + 1;
  return 1;
}

/* A window size: "8" to "15", nothing else (RFC 7692 7.1.2). Returns it,
 * or 0. */
static int window_bits(const char *v, size_t n, int has_value) {
  if (!has_value)
    return 0;
  if (n == 1 && v[0] >= '8' && v[0] <= '9')
    return v[0] - '0';
  if (n == 2 && v[0] == '1' && v[1] >= '0' && v[1] <= '5')
    return 10 + (v[1] - '0');
  return 0;
}

enum {
  P_SNCT = 1u << 0, /* server_no_context_takeover */
  P_CNCT = 1u << 1, /* client_no_context_takeover */
  P_SMWB = 1u << 2, /* server_max_window_bits */
  P_CMWB = 1u << 3, /* client_max_window_bits */
};

typedef struct {
  unsigned seen;
  int smwb; /* server_max_window_bits value */
  int cmwb; /* client_max_window_bits value, 0 if given without one */
  int bad;  /* the offer has a parameter we cannot accept */
} offer;

static void take_param(offer *o, const char *name, size_t nl, int has_value,
                       const char *v, size_t vl) {
  unsigned bit;

  if (ieq(name, nl, "server_no_context_takeover"))
    bit = P_SNCT;
  else if (ieq(name, nl, "client_no_context_takeover"))
    bit = P_CNCT;
  else if (ieq(name, nl, "server_max_window_bits"))
    bit = P_SMWB;
  else if (ieq(name, nl, "client_max_window_bits"))
    bit = P_CMWB;
  else
    bit = 0;
  if (bit == 0 || (o->seen & bit)) {
    o->bad = 1;
    return;
  }
  o->seen |= bit;
  switch (bit) {
  case P_SNCT:
  case P_CNCT:
    if (has_value)
      o->bad = 1;
    break;
  case P_SMWB:
    o->smwb = window_bits(v, vl, has_value);
    if (o->smwb == 0)
      o->bad = 1;
    break;
  default:
    o->cmwb = window_bits(v, vl, has_value);
    if (has_value && o->cmwb == 0)
      o->bad = 1;
    break;
  }
}

static size_t append(char *out, size_t at, const char *s) {
  size_t n = strlen(s);

  memcpy(out + at, s, n + 1);
  return at + n;
}

static size_t append_bits(char *out, size_t at, const char *name, int bits) {
  char num[4];

  at = append(out, at, name);
  num[0] = bits >= 10 ? '1' : (char)('0' + bits);
  num[1] = bits >= 10 ? (char)('0' + bits - 10) : '\0';
  num[2] = '\0';
  return append(out, at, num);
}

/* Settle an acceptable offer against the policy; returns 0 to decline. */
static int settle(const offer *o, const tern__ws_deflate_policy *pol,
                  tern__ws_deflate_params *p, char *resp, size_t *resp_len) {
  int sbits = clamp(pol->server_max_window_bits, 9, 15);
  int cbits = clamp(pol->client_max_window_bits, 8, 15);
  size_t at;

  if (o->seen & P_SMWB) {
    if (o->smwb < 9)
      return 0; /* zlib cannot deflate with a 256-byte window */
    if (o->smwb < sbits)
      sbits = o->smwb;
  }
  if ((o->seen & P_CMWB) && o->cmwb != 0 && o->cmwb < cbits)
    cbits = o->cmwb;
  if (!(o->seen & P_CMWB))
    cbits = 15; /* the client may not know the parameter: it may use all */

  p->server_no_context_takeover = (o->seen & P_SNCT) != 0;
  p->client_no_context_takeover =
      (o->seen & P_CNCT) != 0 || pol->client_no_context_takeover;
  p->server_window_bits = sbits;
  p->client_window_bits = cbits;
  p->mem_level = clamp(pol->mem_level, 1, 9);
  p->level = clamp(pol->level, -1, 9);

  at = append(resp, 0, "permessage-deflate");
  if (p->server_no_context_takeover)
    at = append(resp, at, "; server_no_context_takeover");
  if (p->client_no_context_takeover)
    at = append(resp, at, "; client_no_context_takeover");
  if (o->seen & P_SMWB)
    at = append_bits(resp, at, "; server_max_window_bits=", sbits);
  if ((o->seen & P_CMWB) && cbits < 15)
    at = append_bits(resp, at, "; client_max_window_bits=", cbits);
  *resp_len = at;
  return 1;
}

int tern__ws_deflate_negotiate(const char *v, size_t n,
                               const tern__ws_deflate_policy *pol,
                               tern__ws_deflate_params *out, char *resp,
                               size_t *resp_len) {
  cursor c = {v, n, 0};
  const char *name, *pname;
  size_t nl, pl, vl;
  char val[8];
  offer o;
  int ours;

  if (!pol->enable)
    return 0;
  for (;;) {
    /* extension-list = 1#extension, where empty elements are allowed and
     * skipped (RFC 9110 5.6.1). */
    while (c.i < c.n &&
           (c.s[c.i] == ',' || c.s[c.i] == ' ' || c.s[c.i] == '\t'))
      c.i++;
    if (c.i == c.n)
      return 0;
    nl = take_token(&c, &name);
    if (nl == 0)
      return 0;
    ours = ieq(name, nl, "permessage-deflate");
    memset(&o, 0, sizeof o);
    for (;;) {
      skip_ows(&c);
      if (c.i == c.n || c.s[c.i] == ',')
        break;
      if (c.s[c.i] != ';')
        return 0;
      c.i++;
      skip_ows(&c);
      pl = take_token(&c, &pname);
      if (pl == 0)
        return 0;
      skip_ows(&c);
      vl = 0;
      if (c.i < c.n && c.s[c.i] == '=') {
        c.i++;
        skip_ows(&c);
        if (!take_value(&c, val, sizeof val, &vl))
          return 0;
        if (ours)
          take_param(&o, pname, pl, 1, val, vl);
      } else if (ours) {
        take_param(&o, pname, pl, 0, NULL, 0);
      }
    }
    if (ours && !o.bad && settle(&o, pol, out, resp, resp_len))
      return 1;
  }
}

/* ------------------------------------------------------------------ */
/* zlib memory                                                          */

static void *default_malloc(size_t n, void *user) {
  (void)user;
  return malloc(n);
}

static void default_free(void *p, void *user) {
  (void)user;
  free(p);
}

static voidpf z_alloc(voidpf opaque, uInt items, uInt size) {
  const tern__ws_alloc *a = opaque;

  if (size != 0 && items > SIZE_MAX / size)
    return Z_NULL;
  return a->malloc((size_t)items * size, a->user);
}

static void z_free(voidpf opaque, voidpf p) {
  const tern__ws_alloc *a = opaque;

  a->free(p, a->user);
}

static void setup_stream(z_stream *z, tern__ws_alloc *mine,
                         const tern__ws_alloc *a) {
  memset(z, 0, sizeof *z);
  if (a != NULL && a->malloc != NULL && a->free != NULL) {
    *mine = *a;
  } else {
    mine->malloc = default_malloc;
    mine->free = default_free;
    mine->user = NULL;
  }
  z->zalloc = z_alloc;
  z->zfree = z_free;
  z->opaque = mine;
}

static int init_error(int zr) {
  return zr == Z_MEM_ERROR ? TERN_ENOMEM : TERN_EINVAL;
}

/* ------------------------------------------------------------------ */
/* Deflater                                                             */

int tern__ws_deflater_init(tern__ws_deflater *d,
                           const tern__ws_deflate_params *p,
                           const tern__ws_alloc *a) {
  int zr;

  memset(d, 0, sizeof *d);
  setup_stream(&d->z, &d->alloc, a);
  d->no_context = p->server_no_context_takeover;
  /* A negative windowBits asks for raw deflate: no zlib header or
   * trailer, as RFC 7692 7.2.1 wants. deflateInit2 allocates all of its
   * memory here. */
  zr = deflateInit2(&d->z, p->level, Z_DEFLATED, -p->server_window_bits,
                    p->mem_level, Z_DEFAULT_STRATEGY);
  if (zr != Z_OK)
    return init_error(zr);
  d->ready = 1;
  return 0;
}

void tern__ws_deflater_free(tern__ws_deflater *d) {
  if (d->ready)
    deflateEnd(&d->z);
  d->ready = 0;
}

/* Hand out[0..have) to the sink, except its last four bytes, which are
 * kept: they may be the flush marker that the message's end drops. */
static int deflate_emit(tern__ws_deflater *d, unsigned char *out, size_t have,
                        tern__ws_sink sink, void *user) {
  size_t keep = have < 4 ? have : 4;
  int r = 0;

  if (have > keep)
    r = sink(user, out, have - keep);
  memcpy(d->tail, out + have - keep, keep);
  d->tail_len = (unsigned)keep;
  return r;
}

int tern__ws_deflate(tern__ws_deflater *d, const unsigned char *in, size_t n,
                     int fin, tern__ws_sink sink, void *user) {
  static const unsigned char marker[4] = {0x00, 0x00, 0xff, 0xff};
  unsigned char out[TERN__WS_ZCHUNK];
  size_t have;
  uInt piece;
  int zr, r, flush;

  if (!d->ready)
    return TERN__WS_E1011;
  if (n == 0)
    in = marker; /* any valid pointer: a NULL one may not be stepped */
  do {
    /* zlib counts in uInt; feed a larger message in pieces and flush
     * only with the last one. */
    piece = n > UINT_MAX ? UINT_MAX : (uInt)n;
    d->z.next_in = (z_const Bytef *)in;
    d->z.avail_in = piece;
    in += piece;
    n -= piece;
    flush = (fin && n == 0) ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    do {
      /* The bytes held back last time go first, so that the output
       * stays in order. */
      memcpy(out, d->tail, d->tail_len);
      d->z.next_out = out + d->tail_len;
      d->z.avail_out = (uInt)(sizeof out - d->tail_len);
      zr = deflate(&d->z, flush);
      if (zr != Z_OK && zr != Z_BUF_ERROR)
        return TERN__WS_E1011;
      have = sizeof out - d->z.avail_out;
      r = deflate_emit(d, out, have, sink, user);
      if (r != 0)
        return r;
      if (zr == Z_BUF_ERROR)
        break; /* no progress possible: nothing left to do */
    } while (d->z.avail_out == 0 || d->z.avail_in > 0);
  } while (n > 0);

  if (!fin)
    return 0;
  if (d->tail_len == 0) {
    /* No output at all: an empty message right after a flush, which zlib
     * declines to flush again. Its payload is the empty stored block's
     * first byte (RFC 7692 7.2.3.6), the rest being the marker that RFC
     * 7692 7.2.1 drops; the stream stands on a byte boundary, so this is
     * valid DEFLATE there. */
    r = sink(user, marker, 1);
    if (r != 0)
      return r;
  } else if (d->tail_len != 4 || memcmp(d->tail, marker, 4) != 0) {
    /* Z_SYNC_FLUSH ends with an empty stored block, 0x00 0x00 0xff 0xff
     * after its 3-bit header; RFC 7692 7.2.1 drops those four bytes. */
    return TERN__WS_E1011;
  }
  d->tail_len = 0;
  if (d->no_context && deflateReset(&d->z) != Z_OK)
    return TERN__WS_E1011;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Inflater                                                             */

/* How final blocks are handled. RFC 7692 shares the LZ77 window across a
 * connection's messages, not the DEFLATE stream, and lets a sender end a
 * stream with a final block (BFINAL, 7.2.3.4) and go on, in that message
 * or the next, with a new stream that starts on the next byte and refers
 * back into the window. zlib ends at a final block and takes nothing
 * more. Rather than copy the window into a new zlib stream each time (a
 * client could send nothing but two-byte final blocks and make every two
 * bytes cost 64 KiB of copying), the inflater never lets zlib see a
 * BFINAL bit. inflate runs with Z_BLOCK, which stops at every block
 * boundary, and there the first bit of the next block header, BFINAL, is
 * cleared and remembered. That bit is either among the fewer than eight
 * unused bits of the last byte zlib took (the bit buffer is then emptied
 * and refilled without it, through inflatePrime) or, with none unused,
 * bit 0 of the next input byte (fed through inflatePrime the same way,
 * since the input belongs to the caller). When a block that was final
 * ends, the rest of its byte is padding: it is dropped, and the next
 * byte starts a block header, as it would start a new stream. */

int tern__ws_inflater_init(tern__ws_inflater *f,
                           const tern__ws_deflate_params *p,
                           const tern__ws_alloc *a) {
  static const Bytef none[1] = {0};
  int zr;

  memset(f, 0, sizeof *f);
  setup_stream(&f->z, &f->alloc, a);
  f->no_context = p->client_no_context_takeover;
  f->clear_next = 1; /* the stream starts with a block header */
  if (p->client_window_bits < 8 || p->client_window_bits > 15)
    return TERN_EINVAL; /* not a window a negotiation can settle */
  /* The window is always 32 KiB, whatever client_max_window_bits said.
   * zlib checks a distance against the window plus what the current call
   * has written, so with a smaller window a client that overreaches its
   * own promise would be refused or not depending on how the message was
   * cut into reads. With the full window every distance DEFLATE can
   * express is in reach once 32 KiB were written, and before that one
   * past the start of the context is refused, however the bytes came. */
  zr = inflateInit2(&f->z, -15);
  if (zr != Z_OK)
    return init_error(zr);
  f->ready = 1;
  /* zlib allocates the window on first output, which would make a
   * message fail for want of memory long after setup. Setting an empty
   * dictionary on a raw stream allocates the window now and changes
   * nothing else; inflateReset keeps it. */
  zr = inflateSetDictionary(&f->z, none, 0);
  if (zr != Z_OK) {
    tern__ws_inflater_free(f);
    return init_error(zr);
  }
  return 0;
}

void tern__ws_inflater_free(tern__ws_inflater *f) {
  if (f->ready)
    inflateEnd(&f->z);
  f->ready = 0;
}

void tern__ws_inflate_begin(tern__ws_inflater *f, uint64_t limit, int text) {
  f->limit = limit;
  f->text = text != 0;
  f->utf8 = TERN__WS_UTF8_OK;
  f->out = 0;
  f->in = 0;
}

/* zlib stopped at a block boundary (inflate returned with bit 7 of
 * data_type set, so fewer than eight bits of the last byte are unused). */
static int at_boundary(tern__ws_inflater *f) {
  unsigned k = (unsigned)f->z.data_type & 7, bit;

  if (f->was_final) {
    /* The block that ended closed a DEFLATE stream: the bits left in its
     * last byte are padding, and the next stream starts on a new byte. */
    f->was_final = 0;
    f->stream_end = 1;
    f->clear_next = 1;
    return (k == 0 || inflatePrime(&f->z, -1, 0) == Z_OK) ? 0 : TERN__WS_E1011;
  }
  if (k == 0) {
    f->clear_next = 1;
    return 0;
  }
  /* The k unused bits are the top k bits of the last byte taken, and the
   * lowest of them comes first in the stream. */
  bit = 1u << (8 - k);
  f->was_final = (f->last & bit) != 0;
  f->last &= (unsigned char)~bit;
  if (inflatePrime(&f->z, -1, 0) != Z_OK ||
      inflatePrime(&f->z, (int)k, f->last >> (8 - k)) != Z_OK)
    return TERN__WS_E1011;
  return 0;
}

/* Run in[0..n) through zlib, delivering the output. */
static int inflate_run(tern__ws_inflater *f, const unsigned char *in, size_t n,
                       tern__ws_sink sink, void *user) {
  unsigned char out[TERN__WS_ZCHUNK];
  size_t have;
  uInt piece, before;
  int zr, r;

  if (!f->ready)
    return TERN__WS_E1011;
  do {
    piece = n > UINT_MAX ? UINT_MAX : (uInt)n;
    f->z.next_in = (z_const Bytef *)in;
    f->z.avail_in = piece;
    in += piece;
    n -= piece;
    do {
      if (f->clear_next && f->z.avail_in > 0) {
        f->was_final = *f->z.next_in & 1;
        f->last = *f->z.next_in & 0xfe;
        if (inflatePrime(&f->z, 8, f->last) != Z_OK)
          return TERN__WS_E1011;
        f->z.next_in++;
        f->z.avail_in--;
        f->clear_next = 0;
        f->stream_end = 0;
      }
      before = f->z.avail_in;
      f->z.next_out = out;
      f->z.avail_out = sizeof out;
      zr = inflate(&f->z, Z_BLOCK);
      if (zr == Z_DATA_ERROR || zr == Z_NEED_DICT)
        return TERN__WS_E1007;
      /* Z_STREAM_END cannot happen with every BFINAL bit cleared; should
       * it all the same, the stream is in a state this code cannot use. */
      if (zr != Z_OK && zr != Z_BUF_ERROR)
        return TERN__WS_E1011;
      if (f->z.avail_in != before)
        f->last = f->z.next_in[-1];
      if (zr == Z_OK) {
        /* Z_BUF_ERROR means no progress, and says nothing new about
         * where the stream stands. */
        f->boundary = (f->z.data_type & 128) != 0;
        if (f->boundary && (r = at_boundary(f)) != 0)
          return r;
      }
      have = sizeof out - f->z.avail_out;
      if (have > 0) {
        /* Refuse before delivering, so nothing past the limit leaves. */
        if (have > f->limit - f->out)
          return TERN__WS_E1009;
        if (f->text && tern__ws_utf8_scan(&f->utf8, out, have) < have)
          return TERN__WS_E1007;
        f->out += have;
        r = sink(user, out, have);
        if (r != 0)
          return r;
      }
      if (zr == Z_BUF_ERROR)
        break; /* no progress possible: all input taken, output drained */
    } while (f->z.avail_out == 0 || f->z.avail_in > 0);
  } while (n > 0);
  return 0;
}

int tern__ws_inflate(tern__ws_inflater *f, const unsigned char *in, size_t n,
                     tern__ws_sink sink, void *user) {
  f->in += n;
  return n == 0 ? 0 : inflate_run(f, in, n, sink, user);
}

int tern__ws_inflate_end(tern__ws_inflater *f, tern__ws_sink sink, void *user) {
  static const unsigned char marker[4] = {0x00, 0x00, 0xff, 0xff};
  int r;

  if (!f->ready)
    return TERN__WS_E1011;
  /* An empty payload is an empty message: there is nothing to inflate,
   * and the marker alone would not make a whole block. A payload that
   * ends exactly where a final block closed its stream is complete too:
   * the marker would only open a stream that nothing finishes. */
  if (f->in > 0 && !f->stream_end) {
    r = inflate_run(f, marker, sizeof marker, sink, user);
    if (r != 0)
      return r;
    /* With the marker back, the stream must stand between blocks with
     * every byte used; otherwise the message was cut short, and what is
     * left of it would corrupt the next one. */
    if (f->z.avail_in != 0 || !f->boundary)
      return TERN__WS_E1007;
  }
  if (f->text && f->utf8 != TERN__WS_UTF8_OK)
    return TERN__WS_E1007;
  if (f->no_context) {
    if (inflateReset(&f->z) != Z_OK)
      return TERN__WS_E1011;
    f->clear_next = 1;
    f->was_final = 0;
    f->stream_end = 0;
  }
  return 0;
}
