/* The WebSocket handshake's checks (ws/handshake.c), for ws.c. */
#ifndef TERN_WS_HANDSHAKE_H
#define TERN_WS_HANDSHAKE_H

#include "core/request.h"
#include "ws/deflate.h"

/* The longest subprotocol tern_ws_accept takes, its NUL included. */
#define TERN__WS_SUBPROTOCOL_MAX 64

/* 0 when `r` is a valid opening handshake, else the status to answer
 * (400, or 426 for a version other than 13). Over HTTP/1.1 `accept`
 * (at least 29 bytes) receives the Sec-WebSocket-Accept value and
 * `*accept_len` its length. */
int tern__ws_validate(const tern_request *r, char *accept, size_t *accept_len);

/* Read the caller's options (of any version this library knows) into
 * `o`, defaults first, and check them: 1 when usable, else 0 after a log
 * line saying why. */
int tern__ws_read_options(tern_server *srv, const tern_ws_options *in,
                          tern_ws_options *o);

/* The first permessage-deflate offer among the request's
 * Sec-WebSocket-Extensions fields that `pol` accepts: 1 with `prm` and
 * the response's extension value in `resp` (TERN__WS_DEFLATE_RESPONSE_MAX
 * bytes), else 0. */
int tern__ws_deflate_offers(const tern_request *r,
                            const tern__ws_deflate_policy *pol,
                            tern__ws_deflate_params *prm, char *resp,
                            size_t *resp_len);

#endif
