/* What every finished request adds to the counters and the access
 * hook (lib/handler/access.c keeps them). */
#ifndef TERN_CORE_STATS_H
#define TERN_CORE_STATS_H

#include "core/request.h"

/* ---- Operations: metrics and the access log (lib/handler/access.c) ---- */

/* The stats index of a protocol (TERN_PROTO_*) or of an adapter's
 * name (ALPN id). */
static inline int tern__proto_index(int protocol) {
  return protocol == TERN_PROTO_HTTP2   ? TERN_STATS_H2
         : protocol == TERN_PROTO_HTTP3 ? TERN_STATS_H3
                                        : TERN_STATS_H1;
}
int tern__proto_name_index(const char *name);
/* The request is finished (its last reference went, or the stop deadline
 * cut it): count it, and log it once. Owning worker. */
void tern__request_finished(tern_request *r);
/* tern__respond_status answers `status` itself: flag and count it. */
void tern__count_self(tern_request *r, int status);
/* An answer without a request (HTTP/1.1's 408 for a partial head): count
 * it and log it as such. */
void tern__access_no_request(tern__conn *c, int status);
/* The response head goes out now with `status` (defined at the end). */
static inline void tern__request_started(tern_request *r, int status);
/* A TLS handshake ended: 0 full, 1 resumed, -1 failed. */
void tern__tls_handshake_done(tern__worker *w, int how);
/* The user's part ended (a finishing call, or tern_ws_accept): the
 * request leaves the worker's `held` list. */
static inline void tern__request_unhold(tern_request *r) {
  if (tern__list_linked(&r->held_link))
    tern__list_remove(&r->held_link);
}
/* On the worker, for a handler that holds `r` and has not started its
 * response: answer `status` (a small text body) through the adapter in
 * its stead. From then on the client is gone for the user, whose calls
 * return TERN_ECLOSED (the finishing one still finishes). Returns 0 once
 * answered, else the adapter's error, or TERN_ESTATE when the response
 * started already or the client or connection is gone. */
int tern__request_answer_held(tern_request *r, int status);
/* Stop deadline, on the worker: answer 503 to a held request that has not
 * started its response (tern__request_answer_held). */
void tern__request_cut_answer(tern_request *r);
/* Stop deadline, on the worker, after the request's connection closed:
 * let go of a held request. Its views stay valid for its holder until the
 * finishing call, which returns TERN_ECLOSED and frees what is left (or
 * leaves that to the worker's cleanup while the worker still exists). */
void tern__request_cut(tern_request *r);
/* The finishing call on a cut request (any thread). */
void tern__request_free_cut(tern_request *r);
/* A finishing call on a cut request whose block the worker may still
 * hold: whichever side comes second frees it. */
void tern__request_give_up(tern_request *r);
/* tern_request_pause/resume from another thread: posted to the worker
 * (lib/core/response.c). */
int tern__request_post_flow(tern_request *r, int paused);
/* Worker cleanup, after its loop: free the cut requests already finished;
 * later finishing calls free theirs themselves. */
void tern__request_cut_cleanup(tern__worker *w);
/* Shut the blocking pool: idle threads end now, busy ones after their
 * handler returns. */
void tern__pool_threads_close(tern_server *srv);
/* Drop a reference on the server; the last one frees what
 * tern_server_free left for the threads still using it. */
void tern__server_unref(tern_server *srv);
/* Pseudo-headers into fields, for adapters whose requests arrive as a
 * list of fields (HTTP/2, HTTP/3; their field names are lower case, as
 * both protocols require). Without :authority, the Host field gives
 * r->authority. Cookie crumbs (RFC 9113 8.2.3, RFC 9114 4.2.1) are
 * joined with "; " into one cookie field, in the place of the first: the
 * adapter passes how many cookie fields it counted (`ncookie`; below 2
 * nothing is joined). The joined value comes from tern__small_malloc of
 * the request's worker and is returned in *joined, which the adapter
 * frees with tern__small_free when the request is released (NULL when
 * nothing was joined). Owning worker. Returns 0, or TERN_ENOMEM with the
 * fields unchanged (the adapter answers 503). */
int tern__request_fields(tern_request *r, size_t ncookie, char **joined);
/* Append to a collected body within the route's limit: 0, 413 or 503. */
int tern__request_collect(tern_request *r, const void *p, size_t n);
/* Run the route's handler (on the worker or the blocking pool). */
void tern__request_dispatch(tern_request *r);

/* Is the calling thread the request's worker? */
int tern__on_worker(const tern__worker *w);
/* Finish the user's part of a request whose answer cannot be queued: the
 * connection closes. Returns rc. */

/* Send up to `max` bytes of file `fd` from *off straight from the page
 * cache to the request's socket (sendfile(2)), when its protocol can: an
 * HTTP/1.1 response with a Content-Length on plain TCP, at the head of
 * its pipeline, once everything queued before has been written. On the
 * worker, between start and end. Returns the bytes sent (*off advanced;
 * the connection's write side may then be full), 0 when the file ends at
 * *off, TERN_ESTATE when not now (output still queued or being written,
 * or the socket is full: write the next piece the usual way, whose
 * completion means the socket drained), TERN_ENOTSUP when never for this
 * request (TLS, HTTP/2, HTTP/3, a file sendfile cannot read), or
 * TERN_ECLOSED when the connection failed (it is closing). */
int64_t tern__response_sendfile(tern_request *r, int fd, uint64_t *off,
                                size_t max);
/* tern_response_start for fields tern made itself (the file handler's),
 * which are valid by construction: they are not scanned again. */
int tern__response_start_own(tern_request *r, int status,
                             const tern_header *headers, size_t nheaders,
                             int64_t content_length);
/* tern_respond for such fields, on the owning worker: head, body (copied)
 * and end in one call. */
int tern__respond_own(tern_request *r, int status, const tern_header *headers,
                      size_t nheaders, const void *body, size_t len);
int tern__request_fail(tern_request *r, int rc);
/* The request is aborted (its client went away, its stream was reset, or
 * its connection is closing): mark it gone and, unless its response is
 * finished, run the handler's gone callback once. Owning worker. */
void tern__request_gone(tern_request *r);
/* Answer an error status on behalf of tern (small text body), with the
 * Allow field of a 405 (NULL: none). */
void tern__respond_status(tern_request *r, int status, const char *allow,
                          size_t allow_len);
/* The same with one field of tern's (`name`: Allow, Retry-After), kept
 * when the error hook answers unless the hook sets one of that name. */
void tern__respond_status_with(tern_request *r, int status, const char *name,
                               const char *value, size_t len);

#endif
