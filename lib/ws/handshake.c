/* The WebSocket handshake's checks, apart from the socket: is a request
 * an upgrade, which subprotocols and extensions it offers, whether it is
 * a valid opening handshake (RFC 6455 4.2.1 over HTTP/1.1, RFC 8441 4
 * over HTTP/2 and RFC 9220 over HTTP/3) and its Sec-WebSocket-Accept,
 * and the caller's tern_ws_options read at any version. ws.c builds the
 * socket on top (tern_ws_accept). */
#include <string.h>

#include "core/abi.h"
#include "core/alloc.h"
#include "core/request.h"
#include "core/text.h"
#include "ws/handshake.h"
#include "ws/sha1.h"

static const size_t options_ends[] = {
    TERN__END(tern_ws_options, subprotocol_len),
    TERN__END(tern_ws_options, deflate_level)};

void tern_ws_options_init_size(tern_ws_options *out, size_t size) {
  tern_ws_options d, *o = &d;
  if (out == NULL)
    return;
  memset(o, 0, sizeof(*o));
  o->version = TERN_WS_OPTIONS_VERSION;
  o->size = sizeof(*o);
  o->max_message_size = 16u << 20;
  o->high_water = 1u << 20;
  o->on_full = TERN_WS_PAUSE_READING;
  o->deflate = 1;
  o->deflate_window_bits = 15;
  o->deflate_mem_level = 8;
  o->deflate_level = 1;
  o->close_timeout_ms = 5000;
  tern__abi_init(out, size, &d, options_ends, TERN_WS_OPTIONS_VERSION);
}

static int header_has_token(const tern_request *r, const char *name,
                            const char *tok) {
  size_t i, nl = strlen(name), tl = strlen(tok);
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *f = &r->headers[i];
    if (f->name_len == nl && tern__ieq_lit(f->name, nl, name) &&
        tern__has_token(f->value, f->value_len, tok, tl))
      return 1;
  }
  return 0;
}

/* The one field named `name`: 1 and its value, 0 if absent, -1 if there
 * are several. */
static int single_field(const tern_request *r, const char *name, const char **v,
                        size_t *vlen) {
  size_t i, nl = strlen(name);
  int found = 0;
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *f = &r->headers[i];
    if (f->name_len == nl && tern__ieq_lit(f->name, nl, name)) {
      if (found)
        return -1;
      found = 1;
      *v = f->value;
      *vlen = f->value_len;
    }
  }
  return found;
}

int tern_ws_is_upgrade(const tern_request *r) {
  if (r == NULL)
    return 0;
  if (tern__request_upgrade(r) == TERN__UPGRADE_CONNECT)
    return 1;
  return tern__request_upgrade(r) == TERN__UPGRADE_H1 &&
         header_has_token(r, "upgrade", "websocket");
}

int tern_ws_protocol_offered(const tern_request *r, const char *name,
                             size_t len) {
  size_t i;
  if (r == NULL || name == NULL || len == 0)
    return 0;
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *f = &r->headers[i];
    if (f->name_len == 22 &&
        tern__ieq_lit(f->name, 22, "sec-websocket-protocol") &&
        tern__has_token(f->value, f->value_len, name, len))
      return 1;
  }
  return 0;
}

/* 0 when `r` is a valid handshake, else the status to answer. On
 * HTTP/1.1, `accept` receives the Sec-WebSocket-Accept value. */
int tern__ws_validate(const tern_request *r, char *accept, size_t *accept_len) {
  static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  const char *v;
  size_t vlen;
  unsigned char key[18], digest[20];
  tern__sha1 sha;

  switch (single_field(r, "sec-websocket-version", &v, &vlen)) {
  case 0:
  case -1:
    return 400;
  default:
    if (vlen != 2 || memcmp(v, "13", 2) != 0)
      return 426;
  }
  if (tern__request_upgrade(r) == TERN__UPGRADE_CONNECT)
    return 0; /* RFC 8441 4: no key, no Upgrade, no Connection */
  if (r->protocol != TERN_PROTO_HTTP11 || r->method_len != 3 ||
      memcmp(r->method, "GET", 3) != 0 ||
      tern__request_upgrade(r) != TERN__UPGRADE_H1 ||
      /* A body (a streaming route has not read an empty one yet) */
      (!(r->flags & TERN__RQ_BODY_DONE) && r->body_declared != 0) ||
      !header_has_token(r, "upgrade", "websocket") ||
      !header_has_token(r, "connection", "upgrade"))
    return 400;
  /* Sec-WebSocket-Key: base64 of exactly 16 bytes (RFC 6455 4.2.1). */
  if (single_field(r, "sec-websocket-key", &v, &vlen) != 1 || vlen != 24 ||
      tern__base64_decode(key, sizeof(key), v, vlen) != 16)
    return 400;
  tern__sha1_init(&sha);
  tern__sha1_update(&sha, v, vlen);
  tern__sha1_update(&sha, guid, sizeof(guid) - 1);
  tern__sha1_final(&sha, digest);
  *accept_len = tern__base64_encode(accept, digest, sizeof(digest));
  return 0;
}

/* Where each version of tern_ws_options ends (tern.h lists them): 2
 * added deflate_level. A new field gets a new entry, never a longer old
 * one. */
_Static_assert(sizeof(options_ends) / sizeof(options_ends[0]) ==
                   TERN_WS_OPTIONS_VERSION,
               "one end per tern_ws_options version");

/* Read the caller's options (of any version this library knows) into
 * `o`, which holds the defaults, and check them: 1 when usable, else 0
 * after a log line saying why. */
int tern__ws_read_options(tern_server *srv, const tern_ws_options *in,
                          tern_ws_options *o) {
  char why[160];
  tern_ws_options_init_size(o, sizeof(*o));
  if (in == NULL)
    return 1;
  if (tern__abi_read(o, sizeof(*o), in, options_ends, TERN_WS_OPTIONS_VERSION,
                     why, sizeof(why)) != 0) {
    tern__log(srv, TERN_LOG_ERROR, "tern_ws_accept: tern_ws_options %s", why);
    return 0;
  }
  if (o->max_message_size > 0 && o->high_water > 0 &&
      (o->on_full == TERN_WS_PAUSE_READING ||
       o->on_full == TERN_WS_FAIL_SEND) &&
      o->deflate_window_bits >= 9 && o->deflate_window_bits <= 15 &&
      o->deflate_mem_level >= 1 && o->deflate_mem_level <= 9 &&
      o->deflate_level >= 0 && o->deflate_level <= 9 &&
      (o->subprotocol_len == 0 || o->subprotocol != NULL) &&
      o->subprotocol_len < TERN__WS_SUBPROTOCOL_MAX)
    return 1;
  tern__log(srv, TERN_LOG_ERROR,
            "tern_ws_accept: tern_ws_options has a value out of range");
  return 0;
}

int tern__ws_deflate_offers(const tern_request *r,
                            const tern__ws_deflate_policy *pol,
                            tern__ws_deflate_params *prm, char *resp,
                            size_t *resp_len) {
  size_t i;
  for (i = 0; i < r->nheaders; i++) {
    const tern_header *f = &r->headers[i];
    if (f->name_len == 24 &&
        tern__ieq_lit(f->name, 24, "sec-websocket-extensions") &&
        tern__ws_deflate_negotiate(f->value, f->value_len, pol, prm, resp,
                                   resp_len))
      return 1;
  }
  return 0;
}
