/* What this build of tern contains: the protocol adapters a byte-stream
 * connection can switch to when its filter (TLS) agrees on one by ALPN.
 * The transport looks them up by name (lib/core/conn.c), so that no layer
 * below an adapter names it. */
#include "internal.h"

const tern__proto *const tern__protocols[] = {
    &tern__http1,
#ifdef TERN_HAVE_HTTP2
    &tern__http2,
#endif
    NULL,
};
