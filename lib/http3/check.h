/* The fields of HTTP/3 requests counted, so that none is lost without a
 * word (lib/http3/check.c). nghttp3 0.8 drops a regular field whose name
 * is not a token or whose value holds CR, LF, NUL, another control
 * character or whitespace at an end, and tells the application nothing
 * (nghttp3_http_on_header answers NGHTTP3_ERR_REMOVE_HTTP_HEADER, which
 * conn_decode_headers swallows): the request would run without the field
 * where RFC 9114 4.2 and 10.3 call it malformed. The only other field
 * nghttp3 drops from a request is a Content-Length among trailers, which
 * no sender may put there (RFC 9110 6.5.1).
 *
 * So the adapter counts. This reader follows each request stream's
 * frames before nghttp3 sees the bytes and counts the field lines of each
 * field section (RFC 9204 4.5: their layout alone, no decoding, no
 * table); nghttp3 hands the adapter every field it keeps; when a section
 * ends with fewer fields handed over than it holds, one was dropped and
 * the request is malformed: the adapter resets the stream with
 * H3_MESSAGE_ERROR and never routes it.
 *
 * The counts of the sections that end in one call are queued for that
 * call's end_headers and end_trailers callbacks, in order. That holds
 * because nghttp3 decodes a section in the call that brings its last
 * byte, never later: the adapter advertises SETTINGS_QPACK_BLOCKED_STREAMS
 * 0, so no section may wait on the encoder stream (nghttp3 ends the
 * connection when one would). A section whose count is unknown (memory
 * ran out) is malformed too: the check fails closed. */
#ifndef TERN_HTTP3_CHECK_H
#define TERN_HTTP3_CHECK_H

#include <stddef.h>
#include <stdint.h>

/* The most sections one call can end on one stream: a request's fields
 * and its trailers (a HEADERS frame after those is an error nghttp3
 * ends the connection over). */
#define TERN__H3_CHECK_DONE 2

/* Where a request stream read over several calls has got to. */
typedef struct tern__h3_scan tern__h3_scan;

/* Memory for the table of streams: malloc and free with a context. */
typedef struct {
  void *(*malloc)(size_t n, void *ctx);
  void (*free)(void *p, void *ctx);
  void *ctx;
} tern__h3_check_mem;

typedef struct {
  tern__h3_check_mem mem;
  tern__h3_scan *tab; /* open addressing by stream id; NULL until needed */
  size_t cap, n;
  /* The field counts of the sections that ended in the last call, in
   * order, and how many of them are left to take. */
  uint64_t done[TERN__H3_CHECK_DONE];
  size_t ndone, took;
} tern__h3_check;

/* A check taking its table's memory from `mem` (NULL: malloc). */
void tern__h3_check_init(tern__h3_check *c, const tern__h3_check_mem *mem);
void tern__h3_check_free(tern__h3_check *c);

/* Bytes of client request stream `id` at stream offset `off`, in order,
 * `fin` on the last. Returns 0, or 1 when they cannot be a request nghttp3
 * accepts (a field section cut short or not laid out as RFC 9204 says;
 * nghttp3 then ends the connection), or -1 when memory ran out (the
 * stream's later sections have no count). Afterwards the sections that
 * ended in these bytes wait to be taken, in order. */
int tern__h3_check_request(tern__h3_check *c, int64_t id, uint64_t off,
                           const uint8_t *p, size_t n, int fin);

/* The field count of the next section that ended in the last call: 1
 * and *count, or 0 when there is none (the check fails closed). */
int tern__h3_check_take(tern__h3_check *c, uint64_t *count);

/* Bytes of another stream are read: no section ends in them. */
static inline void tern__h3_check_clear(tern__h3_check *c) {
  c->ndone = c->took = 0;
}

/* Stream `id` is closed or reset: its reading state, if any, goes. */
void tern__h3_check_forget(tern__h3_check *c, int64_t id);

#endif
