/* On-the-fly response compression for the routes that ask for it
 * (tern_route_options.compress; docs/compression.md).
 *
 * The seam is the adapter's start, write and end: response.c sends a
 * compressing route's responses through here, and only here is decided
 * whether one is compressed (its status, type, length, fields and the
 * client's Accept-Encoding) and is its head rewritten (Vary,
 * Content-Encoding, a weak ETag). A whole body is compressed in one go
 * and keeps an exact Content-Length; a streamed one gets a compressor of
 * its own (Z(r)) that flushes at every write, so that what the
 * handler writes reaches the client when it writes it. Everything comes
 * from the server's allocator, and only for a response being compressed.
 */
#include <limits.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#ifdef TERN_HAVE_BROTLI
#include <brotli/encode.h>
#endif
#ifdef TERN_HAVE_ZSTD
/* ZSTD_createCCtx_advanced (the allocator hook) is in the part of zstd.h
 * marked experimental; libzstd 1.5 exports it. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#endif

#include "handler/static.h"
#include "core/worker.h"

typedef struct tern__compress_conf tern__compress_conf;
typedef struct tern__compress tern__compress;

struct tern__compress_conf {
  unsigned encodings; /* TERN_COMPRESS_* */
  int level, wbits, memlevel;
  int zstd_level, zstd_wlog;
  int br_quality, br_lgwin;
  uint32_t min_size;
  size_t types_len;
  char types[]; /* the type list, copied */
};

#ifdef TERN_HAVE_BROTLI
/* Debian 12's libbrotlienc 1.0.9 is built to call exit() when its
 * allocator returns NULL (BROTLI_ENCODER_EXIT_ON_OOM, the default), and
 * a library must not end its host's process. So its allocator never
 * returns NULL: a failed allocation longjmps back to the call into
 * brotli (the setjmp in br_open and in br_step), which then frees every
 * block the encoder holds, found on this list, and drops the encoder
 * without calling into it again. Brotli keeps no state outside these
 * blocks and holds no lock, so nothing else is left behind. */
typedef union br_block {
  struct {
    union br_block *prev, *next;
  } link;
  max_align_t align; /* what follows is aligned for anything */
} br_block;

typedef struct {
  tern_server *srv;
  BrotliEncoderState *s; /* NULL once an allocation failed */
  br_block live;         /* the blocks held: a ring through this one */
  jmp_buf oom;
} br_enc;
#endif

/* One coding's compressor. */
struct tern__compress {
  int enc;      /* ENC_* */
  int64_t left; /* of the length the handler declared; -1: none */
  union {
    z_stream z;
#ifdef TERN_HAVE_ZSTD
    ZSTD_CCtx *zs;
#endif
#ifdef TERN_HAVE_BROTLI
    br_enc br;
#endif
  } u;
};

enum { ENC_NONE = 0, ENC_GZIP = 1, ENC_ZSTD = 2, ENC_BR = 3 };

/* A response head as a compressing route sends it: the caller's fields
 * with Vary added and, when compressing, Content-Encoding added,
 * Content-Length and Accept-Ranges dropped and a strong ETag made weak.
 * `h` points to `local` or, for more than FIELDS caller fields, to an
 * array from the allocator that head_done frees. */
#define FIELDS 32
typedef struct {
  const tern_header *h;
  size_t n;
  tern_header *heap;
  tern_header local[FIELDS + 2];
  char etag[260];
} comp_head;

/* The codings this build has. */
static const unsigned built = TERN_COMPRESS_GZIP
#ifdef TERN_HAVE_ZSTD
                              | TERN_COMPRESS_ZSTD
#endif
#ifdef TERN_HAVE_BROTLI
                              | TERN_COMPRESS_BR
#endif
    ;

/* Text and the text-like application types; images, audio, video, fonts
 * and archives are compressed already. */
static const char default_types[] =
    "text/*, application/json, application/javascript, application/xml, "
    "application/wasm, image/svg+xml, application/manifest+json, "
    "application/ld+json";

#define MAX_TYPES 1024

static const size_t compress_ends[] = {
    TERN__END(tern_compress_options, types),
    TERN__END(tern_compress_options, br_window)};
_Static_assert(sizeof(compress_ends) / sizeof(compress_ends[0]) ==
                   TERN_COMPRESS_OPTIONS_VERSION,
               "one end per tern_compress_options version");

void tern_compress_options_init_size(tern_compress_options *out, size_t size) {
  tern_compress_options d, *o = &d;
  if (out == NULL)
    return;
  memset(o, 0, sizeof(*o));
  o->version = TERN_COMPRESS_OPTIONS_VERSION;
  o->size = sizeof(*o);
  o->encodings = built;
  o->gzip_level = 5;
  o->gzip_window_bits = 15;
  o->gzip_mem_level = 8;
  o->zstd_level = 3;
  o->zstd_window_log = 18;
  o->br_quality = 4;
  o->br_window = 18;
  o->min_size = 1024;
  o->types = NULL;
  tern__abi_init(out, size, &d, compress_ends, TERN_COMPRESS_OPTIONS_VERSION);
}

/* The route's options: its tern_compress_options, when it has some,
 * read into a configuration of its own (with a copy of the type list). */
static int conf_new(tern_server *srv, const tern_route_options *ro,
                    const char *what, void **out) {
  tern_compress_options o;
  const tern_compress_options *in = ro->compress;
  tern__compress_conf *c;
  const char *types, *why = NULL;
  char abi[160];
  size_t tl;

  *out = NULL;
  if (in == NULL)
    return 0;
  tern_compress_options_init_size(&o, sizeof(o));
  if (tern__abi_read(&o, sizeof(o), in, compress_ends,
                     TERN_COMPRESS_OPTIONS_VERSION, abi, sizeof(abi)) != 0) {
    tern__log(srv, TERN_LOG_ERROR, "%s: tern_compress_options %s", what, abi);
    return TERN_EINVAL;
  }
  types = o.types != NULL ? o.types : default_types;
  tl = strnlen(types, MAX_TYPES + 1);
  if ((o.encodings & ~(unsigned)TERN_COMPRESS_ALL) == 0 &&
      (o.encodings & ~built) != 0) {
    tern__log(srv, TERN_LOG_ERROR,
              "%s: tern_compress_options encodings: a coding not built "
              "into this library",
              what);
    return TERN_ENOTSUP;
  }
  if (o.encodings == 0 || (o.encodings & ~(unsigned)TERN_COMPRESS_ALL))
    why = "encodings: no TERN_COMPRESS_* bit, or an unknown one";
  else if (o.gzip_level < 1 || o.gzip_level > 9)
    why = "gzip_level outside 1 to 9";
  else if (o.gzip_window_bits < 9 || o.gzip_window_bits > 15)
    why = "gzip_window_bits outside 9 to 15";
  else if (o.gzip_mem_level < 1 || o.gzip_mem_level > 9)
    why = "gzip_mem_level outside 1 to 9";
  else if (o.zstd_level < 1 || o.zstd_level > 19)
    why = "zstd_level outside 1 to 19";
  else if (o.zstd_window_log < 10 || o.zstd_window_log > 27)
    why = "zstd_window_log outside 10 to 27";
  else if (o.br_quality < 0 || o.br_quality > 11)
    why = "br_quality outside 0 to 11";
  else if (o.br_window < 10 || o.br_window > 24)
    why = "br_window outside 10 to 24";
  else if (tl > MAX_TYPES)
    why = "types longer than 1024 bytes";
  else if (tl == 0)
    why = "types is empty";
  if (why != NULL) {
    tern__log(srv, TERN_LOG_ERROR, "%s: tern_compress_options %s", what, why);
    return TERN_EINVAL;
  }
  c = tern__malloc(srv, sizeof(*c) + tl + 1);
  if (c == NULL)
    return TERN_ENOMEM;
  c->encodings = o.encodings;
  c->level = o.gzip_level;
  c->wbits = o.gzip_window_bits;
  c->memlevel = o.gzip_mem_level;
  c->zstd_level = o.zstd_level;
  c->zstd_wlog = o.zstd_window_log;
  c->br_quality = o.br_quality;
  c->br_lgwin = o.br_window;
  c->min_size = o.min_size;
  c->types_len = tl;
  memcpy(c->types, types, tl);
  c->types[tl] = '\0';
  *out = c;
  return 0;
}

static void conf_free(tern_server *srv, void *c) {
  tern__free(srv, c);
}

/* ---- The decision ---------------------------------------------------- */

static const tern_header *field(const tern_header *h, size_t n,
                                const char *lower) {
  for (size_t i = 0; i < n; i++)
    if (tern__ieq_lit(h[i].name, h[i].name_len, lower))
      return &h[i];
  return NULL;
}

/* Is the media type of Content-Type value `v` in the route's list? */
/* The compressor of the response in progress. */
#define Z(r) ((tern__compress *)(r)->filter_state)

static int type_listed(const tern__compress_conf *c, const char *v, size_t n) {
  const char *semi = memchr(v, ';', n), *e;
  size_t pos = 0, elen;
  if (semi != NULL)
    n = (size_t)(semi - v);
  while (n > 0 && (*v == ' ' || *v == '\t')) {
    v++;
    n--;
  }
  while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
    n--;
  if (n == 0)
    return 0;
  while (tern__list_next(c->types, c->types_len, &pos, &e, &elen)) {
    if (elen >= 2 && e[elen - 1] == '*' && e[elen - 2] == '/') {
      if (n > elen - 1 && tern__ieq(v, e, elen - 1))
        return 1;
    } else if (elen == n && tern__ieq(v, e, n)) {
      return 1;
    }
  }
  return 0;
}

/* The coding this response goes out in (ENC_*). `length` is the body's,
 * or -1 when unknown. */
static int wanted(tern_request *r, const tern__compress_conf *c, int status,
                  const tern_header *h, size_t n, int64_t length) {
  const tern_header *f;
  const char *ae;
  size_t ae_len;
  int q[TERN__ENC_N];

  /* No body (HEAD, 204, 304), or a part of one (206): a Content-Encoding
   * would describe bytes that are not sent, or not these. */
  if (status < 200 || status == 204 || status == 206 || status == 304 ||
      (r->flags & TERN__RQ_HEAD))
    return ENC_NONE;
  if (length >= 0 && (uint64_t)length < c->min_size)
    return ENC_NONE;
  if (field(h, n, "content-encoding") != NULL ||
      field(h, n, "content-range") != NULL)
    return ENC_NONE;
  f = field(h, n, "cache-control");
  if (f != NULL && tern__has_token(f->value, f->value_len, "no-transform", 12))
    return ENC_NONE;
  f = field(h, n, "content-type");
  if (f == NULL || !type_listed(c, f->value, f->value_len))
    return ENC_NONE;
  /* The static handler's Accept-Encoding parser: the same q-values and
   * the same "*" rule for both. A coding at q=0, or absent without "*",
   * is refused. */
  ae = tern_request_header(r, "accept-encoding", 15, &ae_len);
  if (ae == NULL)
    return ENC_NONE;
  tern__static_accept(ae, ae_len, q);
  /* The highest q-value among the route's codings; ties go to br, then
   * zstd, then gzip, as for the static handler's siblings. */
  {
    static const struct {
      int idx, enc;
      unsigned bit;
    } order[] = {{TERN__ENC_BR, ENC_BR, TERN_COMPRESS_BR},
                 {TERN__ENC_ZSTD, ENC_ZSTD, TERN_COMPRESS_ZSTD},
                 {TERN__ENC_GZIP, ENC_GZIP, TERN_COMPRESS_GZIP}};
    int best = ENC_NONE, bq = 0;
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
      if ((c->encodings & order[i].bit) && q[order[i].idx] > bq) {
        bq = q[order[i].idx];
        best = order[i].enc;
      }
    return best;
  }
}

/* The head: the caller's fields, Vary for every answer of the route
 * (caches must key on Accept-Encoding, compressed or not), and when
 * compressing Content-Encoding, no Content-Length (tern computes its own
 * or sends none) and a weak ETag. */
static int build_head(tern_request *r, const tern_header *h, size_t n, int enc,
                      comp_head *o) {
  const tern_header *vary;
  tern_header *d = o->local;
  size_t i, k = 0;

  o->heap = NULL;
  if (n > FIELDS) {
    d = tern__malloc(r->w->srv, (n + 2) * sizeof(*d));
    if (d == NULL)
      return TERN_ENOMEM;
    o->heap = d;
  }
  for (i = 0; i < n; i++) {
    /* Ranges of the compressed bytes are not offered: a Range request
     * is answered from the identity representation (206 is never
     * compressed). */
    if (enc != ENC_NONE &&
        (tern__ieq_lit(h[i].name, h[i].name_len, "content-length") ||
         tern__ieq_lit(h[i].name, h[i].name_len, "accept-ranges")))
      continue;
    d[k] = h[i];
    if (enc != ENC_NONE && tern__ieq_lit(h[i].name, h[i].name_len, "etag") &&
        h[i].value_len > 0 && h[i].value[0] == '"') {
      /* A strong validator promises these exact bytes; the compressed
       * ones are another representation, equivalent only weakly. */
      if (h[i].value_len + 2 > sizeof(o->etag))
        continue;
      memcpy(o->etag, "W/", 2);
      memcpy(o->etag + 2, h[i].value, h[i].value_len);
      d[k].value = o->etag;
      d[k].value_len = h[i].value_len + 2;
    }
    k++;
  }
  vary = field(h, n, "vary");
  if (vary == NULL ||
      (!tern__has_token(vary->value, vary->value_len, "accept-encoding", 15) &&
       !tern__has_token(vary->value, vary->value_len, "*", 1))) {
    d[k].name = "vary";
    d[k].name_len = 4;
    d[k].value = "Accept-Encoding";
    d[k++].value_len = 15;
  }
  if (enc != ENC_NONE) {
    static const char *const names[] = {"", "gzip", "zstd", "br"};
    d[k].name = "content-encoding";
    d[k].name_len = 16;
    d[k].value = names[enc];
    d[k++].value_len = strlen(names[enc]);
  }
  o->h = d;
  o->n = k;
  return 0;
}

static void head_done(tern_request *r, comp_head *head) {
  tern__free(r->w->srv, head->heap);
  head->heap = NULL;
}

/* ---- The compressors, through the server's allocator ----------------- */

static voidpf z_alloc(voidpf opaque, uInt items, uInt size) {
  return tern__malloc(opaque, (size_t)items * size);
}

static void z_free(voidpf opaque, voidpf p) {
  tern__free(opaque, p);
}

#ifdef TERN_HAVE_ZSTD
static void *any_alloc(void *opaque, size_t size) {
  return tern__malloc(opaque, size);
}

static void any_free(void *opaque, void *p) {
  tern__free(opaque, p);
}
#endif

#ifdef TERN_HAVE_BROTLI
static void br_link(br_block *at, br_block *b) {
  b->link.prev = at;
  b->link.next = at->link.next;
  at->link.next->link.prev = b;
  at->link.next = b;
}

static void br_unlink(br_block *b) {
  b->link.prev->link.next = b->link.next;
  b->link.next->link.prev = b->link.prev;
}

/* Brotli's allocator: a block, or no return at all (see br_enc). */
static void *br_alloc(void *opaque, size_t size) {
  br_enc *e = opaque;
  br_block *b = NULL;
  if (size <= SIZE_MAX - sizeof(*b))
    b = tern__malloc(e->srv, sizeof(*b) + size);
  if (b == NULL)
    longjmp(e->oom, 1);
  br_link(&e->live, b);
  return b + 1;
}

static void br_free(void *opaque, void *p) {
  br_block *b;
  if (p == NULL)
    return;
  b = (br_block *)p - 1;
  br_unlink(b);
  tern__free(((br_enc *)opaque)->srv, b);
}

/* After an allocation failed inside brotli: every block it held goes,
 * and the encoder with them. */
static void br_drop(br_enc *e) {
  while (e->live.link.next != &e->live) {
    br_block *b = e->live.link.next;
    br_unlink(b);
    tern__free(e->srv, b);
  }
  e->s = NULL;
}

/* The smallest window that holds a body of `size` bytes whole (brotli's
 * window is 2^lgwin - 16 bytes), within the route's: a short body needs
 * no more ring buffer than itself. */
static int br_window(int64_t size, int lgwin) {
  int w = 10;
  if (size < 0)
    return lgwin;
  while (w < lgwin && ((int64_t)1 << w) - 16 < size)
    w++;
  return w;
}

static int br_open(tern_server *srv, const tern__compress_conf *c, int64_t size,
                   br_enc *e) {
  e->srv = srv;
  e->s = NULL;
  e->live.link.prev = e->live.link.next = &e->live;
  if (setjmp(e->oom) != 0) {
    br_drop(e);
    return TERN_ENOMEM;
  }
  e->s = BrotliEncoderCreateInstance(br_alloc, br_free, e);
  if (e->s == NULL)
    return TERN_ENOMEM;
  BrotliEncoderSetParameter(e->s, BROTLI_PARAM_QUALITY,
                            (uint32_t)c->br_quality);
  BrotliEncoderSetParameter(e->s, BROTLI_PARAM_LGWIN,
                            (uint32_t)br_window(size, c->br_lgwin));
  /* The hint is capped under 1 MiB: from 1 MiB up, quality 4 takes a
   * hasher that more than doubles its state (6.4 MiB instead of 2.9 for
   * a whole 1 MiB body), for a better ratio on such bodies (18 KiB
   * instead of 22 KiB for 8 MiB of repetitive text). */
  if (size >= 0)
    BrotliEncoderSetParameter(e->s, BROTLI_PARAM_SIZE_HINT,
                              size < (int64_t)(1u << 20) ? (uint32_t)size
                                                         : (1u << 20) - 1);
  return 0;
}

/* One brotli call (see c_step). */
static int br_step(br_enc *e, const uint8_t **in, size_t *il, uint8_t **out,
                   size_t *ol, int finish) {
  const BrotliEncoderOperation op =
      finish ? BROTLI_OPERATION_FINISH : BROTLI_OPERATION_FLUSH;
  if (e->s == NULL)
    return -1; /* an allocation failed before: the stream is lost */
  if (setjmp(e->oom) != 0) {
    br_drop(e);
    return -1;
  }
  if (!BrotliEncoderCompressStream(e->s, op, il, in, ol, out, NULL))
    return -1;
  if (BrotliEncoderHasMoreOutput(e->s))
    return 0;
  if (finish)
    return BrotliEncoderIsFinished(e->s) ? 1 : 0;
  /* A flush is complete once the input is taken and nothing waits. */
  return *il == 0;
}
#endif

/* Make a compressor for `enc`, for a body of `size` bytes (-1: not
 * known): 0, or TERN_ENOMEM with nothing held. */
static int c_open(tern_server *srv, const tern__compress_conf *c, int enc,
                  int64_t size, tern__compress *z) {
  memset(z, 0, sizeof(*z));
  z->enc = enc;
  (void)size; /* only zstd and br use it */
  switch (enc) {
  case ENC_GZIP:
    z->u.z.zalloc = z_alloc;
    z->u.z.zfree = z_free;
    z->u.z.opaque = srv;
    /* windowBits + 16: the gzip wrapper (RFC 1952). */
    return deflateInit2(&z->u.z, c->level, Z_DEFLATED, c->wbits + 16,
                        c->memlevel, Z_DEFAULT_STRATEGY) == Z_OK
               ? 0
               : TERN_ENOMEM;
#ifdef TERN_HAVE_ZSTD
  case ENC_ZSTD: {
    ZSTD_customMem mem = {any_alloc, any_free, srv};
    z->u.zs = ZSTD_createCCtx_advanced(mem);
    if (z->u.zs == NULL)
      return TERN_ENOMEM;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(z->u.zs, ZSTD_c_compressionLevel,
                                            c->zstd_level)) ||
        ZSTD_isError(
            ZSTD_CCtx_setParameter(z->u.zs, ZSTD_c_windowLog, c->zstd_wlog)) ||
        /* A known size lets zstd fit its tables and window to the body
         * (and puts the size in the frame). */
        (size >= 0 && ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(
                          z->u.zs, (unsigned long long)size)))) {
      ZSTD_freeCCtx(z->u.zs);
      return TERN_ENOMEM;
    }
    return 0;
  }
#endif
#ifdef TERN_HAVE_BROTLI
  case ENC_BR:
    return br_open(srv, c, size, &z->u.br);
#endif
  }
  return TERN_ENOMEM;
}

static void c_close(tern__compress *z) {
  switch (z->enc) {
  case ENC_GZIP:
    deflateEnd(&z->u.z);
    break;
#ifdef TERN_HAVE_ZSTD
  case ENC_ZSTD:
    ZSTD_freeCCtx(z->u.zs);
    break;
#endif
#ifdef TERN_HAVE_BROTLI
  case ENC_BR:
    if (z->u.br.s != NULL)
      BrotliEncoderDestroyInstance(z->u.br.s);
    break;
#endif
  }
  z->enc = ENC_NONE;
}

/* One step of `z` from *in (*il bytes) to *out (*ol bytes), both moved
 * on: 1 when all the input is consumed and flushed (`finish`: the
 * stream ended), 0 when it needs more room, -1 on an error. */
static int c_step(tern__compress *z, const uint8_t **in, size_t *il,
                  uint8_t **out, size_t *ol, int finish) {
  switch (z->enc) {
  case ENC_GZIP: {
    z_stream *s = &z->u.z;
    uInt ai = *il > UINT_MAX ? UINT_MAX : (uInt)*il;
    uInt ao = *ol > UINT_MAX ? UINT_MAX : (uInt)*ol;
    int f = *il > ai ? Z_NO_FLUSH : finish ? Z_FINISH : Z_SYNC_FLUSH, rc;
    s->next_in = (Bytef *)(uintptr_t)*in;
    s->avail_in = ai;
    s->next_out = *out;
    s->avail_out = ao;
    rc = deflate(s, f);
    *in += ai - s->avail_in;
    *il -= ai - s->avail_in;
    *out += ao - s->avail_out;
    *ol -= ao - s->avail_out;
    if (rc == Z_STREAM_ERROR)
      return -1;
    if (f == Z_FINISH)
      return rc == Z_STREAM_END;
    /* A sync flush is complete once it leaves room unused. */
    return f == Z_SYNC_FLUSH && s->avail_out > 0;
  }
#ifdef TERN_HAVE_ZSTD
  case ENC_ZSTD: {
    ZSTD_inBuffer ib = {*in, *il, 0};
    ZSTD_outBuffer ob = {*out, *ol, 0};
    size_t left = ZSTD_compressStream2(z->u.zs, &ob, &ib,
                                       finish ? ZSTD_e_end : ZSTD_e_flush);
    if (ZSTD_isError(left))
      return -1;
    *in += ib.pos;
    *il -= ib.pos;
    *out += ob.pos;
    *ol -= ob.pos;
    return left == 0 && *il == 0;
  }
#endif
#ifdef TERN_HAVE_BROTLI
  case ENC_BR:
    return br_step(&z->u.br, in, il, out, ol, finish);
#endif
  }
  return -1;
}

/* Compress `len` bytes of `in` and flush them (`finish`: end the stream)
 * into a buffer from the allocator, *out (`*out_len` bytes). 0, or
 * TERN_ENOMEM with nothing allocated. */
static int c_run(tern_server *srv, tern__compress *z, const void *in,
                 size_t len, int finish, char **out, size_t *out_len) {
  /* The end of a stream has no input: point at something all the same,
   * since moving a null pointer on, even by 0, is undefined. */
  static const uint8_t none[1];
  const uint8_t *ip = in != NULL ? in : none;
  size_t il = len, used = 0, cap = len + (len >> 4) + 256;
  char *buf = tern__malloc(srv, cap);

  if (buf == NULL)
    return TERN_ENOMEM;
  for (;;) {
    uint8_t *op;
    size_t ol;
    int rc;
    if (cap - used < 64) {
      char *nb = tern__realloc(srv, buf, cap * 2);
      if (nb == NULL) {
        tern__free(srv, buf);
        return TERN_ENOMEM;
      }
      buf = nb;
      cap *= 2;
    }
    op = (uint8_t *)buf + used;
    ol = cap - used;
    rc = c_step(z, &ip, &il, &op, &ol, finish);
    used = (size_t)((char *)op - buf);
    if (rc < 0) {
      tern__free(srv, buf);
      return TERN_ENOMEM;
    }
    if (rc == 1)
      break;
  }
  *out = buf;
  *out_len = used;
  return 0;
}

/* The release function of the compressed buffers handed to the
 * adapter. */
static void buf_free(void *data, void *user) {
  tern__free(user, data);
}

/* ---- Responses -------------------------------------------------------- */

/* A whole body: fill `head`; when the answer is compressed, *out and
 * *out_len are the compressed body (free it with buf_free), else *out
 * is NULL. Returns 0 or TERN_ENOMEM (only when the head cannot be
 * built). */
static int compress_whole(tern_request *r, int status, const tern_header *h,
                          size_t n, const void *body, size_t len,
                          comp_head *head, void **out, size_t *out_len) {
  tern_server *srv = r->w->srv;
  const tern__compress_conf *c = r->route->filter_conf;
  int enc = wanted(r, c, status, h, n, (int64_t)len);
  char *buf = NULL;

  if (enc != ENC_NONE) {
    tern__compress z;
    /* No memory for the compressor: the answer goes out as it is. */
    if (c_open(srv, c, enc, (int64_t)len, &z) != 0)
      enc = ENC_NONE;
    else {
      if (c_run(srv, &z, body, len, 1, &buf, out_len) != 0)
        enc = ENC_NONE;
      c_close(&z);
    }
  }
  if (build_head(r, h, n, enc, head) != 0) {
    tern__free(srv, buf);
    return TERN_ENOMEM;
  }
  *out = buf;
  return 0;
}

static int f_respond(tern_request *r, int status, const tern_header *h,
                     size_t n, const void *body, size_t len, int copy,
                     tern_release_fn release, void *ruser, int *took) {
  tern_server *srv = r->w->srv;
  comp_head head;
  void *z = NULL;
  size_t zlen = 0;
  int rc = compress_whole(r, status, h, n, body, len, &head, &z, &zlen);

  if (rc != 0)
    return rc;
  if (z == NULL) {
    rc = tern__respond_whole(r, status, head.h, head.n, body, len, copy,
                             release, ruser, took);
  } else {
    int zt = 0;
    rc = tern__respond_whole(r, status, head.h, head.n, z, zlen, 0, buf_free,
                             srv, &zt);
    if (!zt)
      buf_free(z, srv);
    /* The caller's body was consumed: it is released now, as once
     * written. */
    if (rc == 0) {
      if (release != NULL)
        release((void *)(uintptr_t)body, ruser);
      if (took != NULL)
        *took = 1;
    }
  }
  head_done(r, &head);
  return rc;
}

/* A streamed compressor holds its memory until its response ends, so
 * their number is bounded per connection and per server (tern_settings):
 * 1 and a place taken, or 0 past a bound. */
static int compressor_take(tern_request *r) {
  tern_server *srv = r->w->srv;
  if (r->conn->compressors >= srv->s.max_compressors_per_conn)
    return 0;
  if (atomic_fetch_add(&srv->compressors, 1) >= srv->s.max_compressors) {
    atomic_fetch_sub(&srv->compressors, 1);
    return 0;
  }
  r->conn->compressors++;
  return 1;
}

static void compressor_give(tern_request *r) {
  r->conn->compressors--;
  atomic_fetch_sub(&r->w->srv->compressors, 1);
}

/* Free the compressor, if any, and give r->ops back to the adapter. */
static void f_release(tern_request *r) {
  tern__compress *c = Z(r);
  if (c == NULL)
    return;
  c_close(c);
  tern__free(r->w->srv, c);
  r->filter_state = NULL;
  r->ops = r->inner;
  r->inner = NULL;
  compressor_give(r);
}

/* ---- The compressing request side ------------------------------------ *
 *
 * While a streamed body is compressed, r->ops is this table: write and
 * end go through the compressor, the rest straight to the adapter's
 * (r->inner). sendfile is NULL: the file's bytes must be compressed. */

static int z_write(tern_request *r, const void *p, size_t len, int copy,
                   tern_write_fn done, void *duser, tern_release_fn release,
                   void *ruser) {
  tern_server *srv = r->w->srv;
  char *out;
  size_t n;
  int rc;

  if (len == 0)
    return r->inner->write(r, p, len, copy, done, duser, release, ruser);
  /* The adapter sees no length, so the declared one is held here: a
   * write past it is refused as it would be uncompressed. */
  if (Z(r)->left >= 0) {
    if ((uint64_t)Z(r)->left < len)
      return TERN_EINVAL;
    Z(r)->left -= (int64_t)len;
  }
  rc = c_run(srv, Z(r), p, len, 0, &out, &n);
  if (rc != 0)
    return rc;
  rc = r->inner->write(r, out, n, 0, done, duser, buf_free, srv);
  if (rc != 0) {
    tern__free(srv, out);
    return rc;
  }
  /* The input is in the compressor now. */
  if (release != NULL)
    release((void *)(uintptr_t)p, ruser);
  return 0;
}

/* Finish the compressed stream, then the adapter's end. */
static int z_end(tern_request *r, const tern_header *t, size_t n) {
  tern_server *srv = r->w->srv;
  char *out;
  size_t len;
  int rc = c_run(srv, Z(r), NULL, 0, 1, &out, &len);

  f_release(r); /* r->ops is the adapter's from here on */
  if (rc != 0)
    return rc;
  rc = r->ops->write(r, out, len, 0, NULL, NULL, buf_free, srv);
  if (rc != 0) {
    tern__free(srv, out);
    return rc;
  }
  return r->ops->end(r, t, n);
}

static int z_start(tern_request *r, int status, const tern_header *h, size_t n,
                   int64_t content_length) {
  return r->inner->start(r, status, h, n, content_length);
}

static int z_interim(tern_request *r, int status, const tern_header *h,
                     size_t n) {
  return r->inner->interim(r, status, h, n);
}

static void z_body_flow(tern_request *r) {
  r->inner->body_flow(r);
}

static int z_tunnel(tern_request *r, const tern_header *h, size_t n) {
  return r->inner->tunnel != NULL ? r->inner->tunnel(r, h, n) : TERN_ESTATE;
}

static size_t z_pending(const tern_request *r) {
  return r->inner->pending(r);
}

static void z_abort(tern_request *r) {
  r->inner->abort(r);
}

static void z_release(tern_request *r) {
  const tern__req_ops *inner = r->inner;
  f_release(r);
  if (inner != NULL && inner->release != NULL)
    inner->release(r);
}

static const tern__req_ops z_ops = {
    .start = z_start,
    .write = z_write,
    .end = z_end,
    .interim = z_interim,
    .body_flow = z_body_flow,
    .tunnel = z_tunnel,
    .pending = z_pending,
    .abort = z_abort,
    .sendfile = NULL,
    .release = z_release,
};

/* A streamed response on a compressing route: decide, rewrite the head
 * and call the adapter's start (with an unknown length when
 * compressing, when r->ops becomes z_ops until the response ends). */
static int f_start(tern_request *r, int status, const tern_header *h, size_t n,
                   int64_t content_length) {
  tern_server *srv = r->w->srv;
  const tern__compress_conf *c = r->route->filter_conf;
  int enc = wanted(r, c, status, h, n, content_length);
  comp_head head;
  int rc;

  if (enc != ENC_NONE && !compressor_take(r))
    enc = ENC_NONE; /* past a bound: identity */
  if (enc != ENC_NONE) {
    tern__compress *z = tern__malloc(srv, sizeof(*z));
    if (z == NULL || c_open(srv, c, enc, -1, z) != 0) {
      tern__free(srv, z);
      compressor_give(r);
      enc = ENC_NONE;
    } else {
      z->left = content_length;
      r->filter_state = z;
      r->inner = r->ops;
      r->ops = &z_ops;
    }
  }
  rc = build_head(r, h, n, enc, &head);
  if (rc != 0) {
    f_release(r);
    return rc;
  }
  rc = r->ops->start(r, status, head.h, head.n,
                     enc != ENC_NONE ? -1 : content_length);
  head_done(r, &head);
  if (rc != 0)
    f_release(r); /* nothing will be compressed */
  return rc;
}

const tern__resp_filter tern__compress_filter = {
    .name = "compress",
    .conf_new = conf_new,
    .conf_free = conf_free,
    .start = f_start,
    .respond = f_respond,
    .release = f_release,
};
