/* What this build of tern contains: the transports and the protocol
 * adapters. A byte-stream connection switches adapter when its filter
 * (TLS) agrees on one by ALPN, or HTTP/1.1 hands it on (the HTTP/2
 * preface, an h2c upgrade); both look the adapter up here by name, so
 * that no layer below an adapter, and no adapter, names another. This
 * file alone includes every layer.
 */
#include <string.h>

#include "internal.h"
#include "net/stream.h"

extern const tern__proto tern__http1;
#ifdef TERN_HAVE_HTTP2
extern const tern__proto tern__http2;
#endif

/* HTTP/1.1 first: every byte-stream connection starts with it. */
const tern__proto *const tern__protocols[] = {
    &tern__http1,
#ifdef TERN_HAVE_HTTP2
    &tern__http2,
#endif
    NULL,
};

const tern__transport *const tern__transports[] = {
    &tern__stream_transport,
    NULL,
};

const tern__proto *tern__proto_find(const char *name, size_t len) {
  const tern__proto *const *p;
  for (p = tern__protocols; *p != NULL; p++)
    if (strlen((*p)->name) == len && memcmp((*p)->name, name, len) == 0)
      return *p;
  return NULL;
}
