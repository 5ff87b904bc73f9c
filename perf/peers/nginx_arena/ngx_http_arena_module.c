/*
 * ngx_http_arena_module.c - the arena endpoints that need code, as an nginx
 * dynamic module, so that Debian's nginx (nginx-light or nginx-core 1.22)
 * can be measured on HttpArena's baseline, limited-conn, pipelined and
 * upload profiles (perf/driver/arena_bench.py, the "nginx" entry).
 *
 * One directive, in a location:
 *
 *   arena baseline;   GET|HEAD|POST /baseline11?a=A&b=B: 200 text/plain,
 *                     the decimal A+B, plus for a POST the integer in its
 *                     body (Content-Length or chunked; white space around
 *                     it allowed; an empty body adds nothing).  A missing
 *                     a or b counts 0; a malformed one, a malformed body
 *                     or a sum that overflows is 400.  The body is read
 *                     into memory with ngx_http_read_client_request_body
 *                     (the location's client_max_body_size bounds it).
 *   arena pipeline;   200 text/plain "ok" (the request body discarded).
 *   arena upload;     POST: 200 text/plain, the number of body bytes read.
 *                     The body is streamed (request_body_no_buffering):
 *                     each buffer nginx reads is counted and handed back,
 *                     nothing goes to a temporary file.
 *
 * Other methods get 405.  It is the same contract as examples/arena and
 * the arena peers (perf/peers/arena_common.c), written against nginx's
 * module API; see perf/peers/README.md, "The nginx arena module".
 *
 * Build: perf/peers/nginx_arena/build (nginx-dev's configure with
 * --with-compat and Debian's flags, then `make modules`).
 */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#define ARENA_BODY_MAX 1024

static char *ngx_http_arena(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_arena_baseline(ngx_http_request_t *r);
static ngx_int_t ngx_http_arena_pipeline(ngx_http_request_t *r);
static ngx_int_t ngx_http_arena_upload(ngx_http_request_t *r);

static ngx_command_t ngx_http_arena_commands[] = {
    {ngx_string("arena"), NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1, ngx_http_arena, 0,
     0, NULL},
    ngx_null_command};

static ngx_http_module_t ngx_http_arena_module_ctx = {
    NULL, /* preconfiguration */
    NULL, /* postconfiguration */
    NULL, /* create main configuration */
    NULL, /* init main configuration */
    NULL, /* create server configuration */
    NULL, /* merge server configuration */
    NULL, /* create location configuration */
    NULL  /* merge location configuration */
};

ngx_module_t ngx_http_arena_module = {NGX_MODULE_V1,
                                      &ngx_http_arena_module_ctx,
                                      ngx_http_arena_commands,
                                      NGX_HTTP_MODULE,
                                      NULL,
                                      NULL,
                                      NULL,
                                      NULL,
                                      NULL,
                                      NULL,
                                      NULL,
                                      NGX_MODULE_V1_PADDING};

/* The per-request state of /upload. */
typedef struct {
  off_t bytes;
  ngx_uint_t done;
} ngx_http_arena_upload_ctx_t;

static char *ngx_http_arena(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
  static const struct {
    const char *name;
    ngx_http_handler_pt handler;
  } kinds[] = {{"baseline", ngx_http_arena_baseline},
               {"pipeline", ngx_http_arena_pipeline},
               {"upload", ngx_http_arena_upload}};
  ngx_str_t *value = cf->args->elts;
  ngx_http_core_loc_conf_t *clcf;
  ngx_uint_t i;

  (void)cmd;
  (void)conf;
  for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    if (value[1].len == ngx_strlen(kinds[i].name) &&
        ngx_strncmp(value[1].data, kinds[i].name, value[1].len) == 0) {
      clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
      clcf->handler = kinds[i].handler;
      return NGX_CONF_OK;
    }
  }
  ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                     "arena: \"%V\" is not baseline, pipeline or upload",
                     &value[1]);
  return NGX_CONF_ERROR;
}

/* ---- Numbers ---- */

/* A decimal integer: optional sign, then digits.  NGX_OK with *out set,
 * or NGX_ERROR (empty, a stray byte, out of int64_t's range). */
static ngx_int_t arena_parse_int(const u_char *p, size_t n, int64_t *out) {
  uint64_t v = 0, limit;
  int neg = 0;
  size_t i = 0;

  if (n > 0 && (p[0] == '-' || p[0] == '+')) {
    neg = p[0] == '-';
    i = 1;
  }
  if (i == n) {
    return NGX_ERROR;
  }
  limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') {
      return NGX_ERROR;
    }
    if (v > (limit - (uint64_t)(p[i] - '0')) / 10) {
      return NGX_ERROR;
    }
    v = v * 10 + (uint64_t)(p[i] - '0');
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return NGX_OK;
}

/* Adds the query argument `name` (absent: 0) to *sum. */
static ngx_int_t arena_add_arg(ngx_http_request_t *r, const char *name,
                               int64_t *sum) {
  ngx_str_t v;
  int64_t x;

  if (ngx_http_arg(r, (u_char *)name, ngx_strlen(name), &v) != NGX_OK) {
    return NGX_OK;
  }
  if (arena_parse_int(v.data, v.len, &x) != NGX_OK ||
      __builtin_add_overflow(*sum, x, sum)) {
    return NGX_ERROR;
  }
  return NGX_OK;
}

/* ---- Answers ---- */

/* 200 (or status) text/plain with len bytes of text, which must live as
 * long as the request (the pool, or static storage). */
static ngx_int_t arena_send(ngx_http_request_t *r, ngx_uint_t status,
                            u_char *text, size_t len) {
  ngx_buf_t *b;
  ngx_chain_t out;
  ngx_int_t rc;

  r->headers_out.status = status;
  r->headers_out.content_length_n = (off_t)len;
  ngx_str_set(&r->headers_out.content_type, "text/plain");
  r->headers_out.content_type_len = r->headers_out.content_type.len;
  r->headers_out.content_type_lowcase = NULL;
  rc = ngx_http_send_header(r);
  if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
    return rc;
  }
  b = ngx_calloc_buf(r->pool);
  if (b == NULL) {
    return NGX_ERROR;
  }
  b->pos = text;
  b->last = text + len;
  b->memory = 1;
  b->last_buf = r == r->main;
  b->last_in_chain = 1;
  out.buf = b;
  out.next = NULL;
  return ngx_http_output_filter(r, &out);
}

static ngx_int_t arena_send_int(ngx_http_request_t *r, int64_t v) {
  u_char *p = ngx_pnalloc(r->pool, NGX_INT64_LEN);

  if (p == NULL) {
    return NGX_HTTP_INTERNAL_SERVER_ERROR;
  }
  return arena_send(r, NGX_HTTP_OK, p, (size_t)(ngx_sprintf(p, "%L", v) - p));
}

static ngx_int_t arena_bad(ngx_http_request_t *r, const char *msg) {
  return arena_send(r, NGX_HTTP_BAD_REQUEST, (u_char *)msg, ngx_strlen(msg));
}

/* ---- baseline ---- */

/* The query's a+b into *sum, or a 400 sent (its status returned). */
static ngx_int_t arena_query_sum(ngx_http_request_t *r, int64_t *sum) {
  *sum = 0;
  if (arena_add_arg(r, "a", sum) != NGX_OK ||
      arena_add_arg(r, "b", sum) != NGX_OK) {
    return NGX_HTTP_BAD_REQUEST;
  }
  return NGX_OK;
}

static int arena_space(u_char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The POST's body has been read (r->request_body->bufs, in memory: it is
 * at most client_max_body_size, which the location keeps under the body
 * buffer): answer with the sum. */
static void arena_baseline_body(ngx_http_request_t *r) {
  u_char body[ARENA_BODY_MAX];
  size_t len = 0, n, i = 0;
  ngx_chain_t *cl;
  int64_t sum, x;
  ngx_int_t rc;

  if (arena_query_sum(r, &sum) != NGX_OK) {
    ngx_http_finalize_request(r, arena_bad(r, "a and b are integers\n"));
    return;
  }
  for (cl = r->request_body ? r->request_body->bufs : NULL; cl; cl = cl->next) {
    if (ngx_buf_special(cl->buf)) {
      continue; /* the end of a chunked body: no data */
    }
    if (!ngx_buf_in_memory(cl->buf)) {
      /* in a temporary file: larger than any body this answers */
      ngx_http_finalize_request(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE);
      return;
    }
    n = (size_t)(cl->buf->last - cl->buf->pos);
    if (n > sizeof(body) - len) {
      ngx_http_finalize_request(r, NGX_HTTP_REQUEST_ENTITY_TOO_LARGE);
      return;
    }
    ngx_memcpy(body + len, cl->buf->pos, n);
    len += n;
  }
  while (i < len && arena_space(body[i])) {
    i++;
  }
  while (len > i && arena_space(body[len - 1])) {
    len--;
  }
  if (len > i) {
    if (arena_parse_int(body + i, len - i, &x) != NGX_OK ||
        __builtin_add_overflow(sum, x, &sum)) {
      ngx_http_finalize_request(r, arena_bad(r, "the body is an integer\n"));
      return;
    }
  }
  rc = arena_send_int(r, sum);
  ngx_http_finalize_request(r, rc);
}

static ngx_int_t ngx_http_arena_baseline(ngx_http_request_t *r) {
  ngx_int_t rc;
  int64_t sum;

  if (r->method & NGX_HTTP_POST) {
    rc = ngx_http_read_client_request_body(r, arena_baseline_body);
    if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
      return rc;
    }
    return NGX_DONE;
  }
  if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) {
    return NGX_HTTP_NOT_ALLOWED;
  }
  rc = ngx_http_discard_request_body(r);
  if (rc != NGX_OK) {
    return rc;
  }
  if (arena_query_sum(r, &sum) != NGX_OK) {
    return arena_bad(r, "a and b are integers\n");
  }
  return arena_send_int(r, sum);
}

/* ---- pipeline ---- */

static ngx_int_t ngx_http_arena_pipeline(ngx_http_request_t *r) {
  static u_char ok[] = "ok";
  ngx_int_t rc;

  if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD | NGX_HTTP_POST))) {
    return NGX_HTTP_NOT_ALLOWED;
  }
  rc = ngx_http_discard_request_body(r);
  if (rc != NGX_OK) {
    return rc;
  }
  return arena_send(r, NGX_HTTP_OK, ok, 2);
}

/* ---- upload ---- */

/* Counts the buffers nginx has read so far and hands them back (pos =
 * last: the body filters reuse a consumed buffer). */
static void arena_upload_take(ngx_http_request_t *r,
                              ngx_http_arena_upload_ctx_t *ctx) {
  ngx_chain_t *cl;

  for (cl = r->request_body->bufs; cl; cl = cl->next) {
    if (ngx_buf_in_memory(cl->buf)) {
      ctx->bytes += cl->buf->last - cl->buf->pos;
      cl->buf->pos = cl->buf->last;
    } else if (cl->buf->in_file) {
      ctx->bytes += cl->buf->file_last - cl->buf->file_pos;
      cl->buf->file_pos = cl->buf->file_last;
    }
  }
  r->request_body->bufs = NULL;
}

/* Reads and counts until nginx has no more to give now; answers once the
 * body is complete. */
static void arena_upload_read(ngx_http_request_t *r) {
  ngx_http_arena_upload_ctx_t *ctx;
  ngx_int_t rc;
  off_t before;

  ctx = ngx_http_get_module_ctx(r, ngx_http_arena_module);
  if (ctx == NULL || ctx->done) {
    return;
  }
  for (;;) {
    before = ctx->bytes;
    if (r->reading_body) {
      rc = ngx_http_read_unbuffered_request_body(r);
      if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
        ctx->done = 1;
        r->read_event_handler = ngx_http_block_reading;
        ngx_http_finalize_request(r, rc);
        return;
      }
    }
    if (r->request_body != NULL) {
      arena_upload_take(r, ctx);
    }
    if (!r->reading_body) {
      break;
    }
    /* nginx waits for the socket (its read event is armed) when it read
     * nothing new; a full buffer that was just handed back, with the
     * socket still readable, is read again at once */
    if (ctx->bytes == before || !r->connection->read->ready) {
      return;
    }
  }
  ctx->done = 1;
  r->read_event_handler = ngx_http_block_reading;
  ngx_http_finalize_request(r, arena_send_int(r, (int64_t)ctx->bytes));
}

/* ngx_http_read_client_request_body's post handler: called once, with
 * what was read so far (r->reading_body: more is to come). */
static void arena_upload_first(ngx_http_request_t *r) {
  r->read_event_handler = arena_upload_read;
  arena_upload_read(r);
}

static ngx_int_t ngx_http_arena_upload(ngx_http_request_t *r) {
  ngx_http_arena_upload_ctx_t *ctx;
  ngx_int_t rc;

  if (!(r->method & NGX_HTTP_POST)) {
    return NGX_HTTP_NOT_ALLOWED;
  }
  ctx = ngx_pcalloc(r->pool, sizeof(*ctx));
  if (ctx == NULL) {
    return NGX_HTTP_INTERNAL_SERVER_ERROR;
  }
  ngx_http_set_ctx(r, ctx, ngx_http_arena_module);
  r->request_body_no_buffering = 1;
  rc = ngx_http_read_client_request_body(r, arena_upload_first);
  if (rc >= NGX_HTTP_SPECIAL_RESPONSE) {
    return rc;
  }
  return NGX_DONE;
}
