/* The public response calls. On the owning worker they go straight to the
 * connection's adapter; from any other thread they are packed into a
 * message (headers and copied bytes in one allocation) and posted to the
 * worker's inbox, which applies them in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/worker.h"

/* The user's reference ends with a finishing call: tern_respond,
 * tern_respond_ref or tern_response_end. */
static void finish_user(tern_request *r) {
  if (r->flags & TERN__RQ_CUT) {
    /* The deadline took the user's reference already (a callback on the
     * worker finishing it before the block was handed over). */
    tern__request_give_up(r);
    return;
  }
  r->flags |= TERN__RQ_ENDED;
  tern__request_unhold(r);
  tern__request_unref(r);
}

/* ---- The user's side: order checked at call time --------------------- */

enum { CALL_RESPOND, CALL_START, CALL_WRITE, CALL_END, CALL_ABORT };

static const char *const call_names[] = {
    "tern_respond", "tern_response_start", "tern_response_write",
    "tern_response_end", "tern_response_abort"};

/* The calls after the stop deadline cut the request: start and write
 * report the client gone; the finishing call does too and frees the
 * block (the worker let go of everything else). */
static int cut_call(tern_request *r, int call) {
  unsigned old = atomic_load(&r->ustate);
  if (call == CALL_START || call == CALL_WRITE)
    return TERN_ECLOSED;
  while (!(old & TERN__U_DONE))
    if (atomic_compare_exchange_weak(&r->ustate, &old, old | TERN__U_DONE)) {
      tern__request_free_cut(r);
      return TERN_ECLOSED;
    }
  return TERN_ESTATE;
}

/* Check that `call` may come now and record it, atomically, so that two
 * threads racing (or one thread calling twice) cannot both pass: a
 * second finishing call, a write or end before start, or any call after
 * the finishing one is TERN_ESTATE, with a log line, and changes nothing.
 * (A call made after the finishing call's request was retired uses freed
 * memory, which no check can catch; this one catches every such call that
 * comes while the worker still has the request.) */
static int user_step(tern_request *r, int call) {
  /* Per call: the bits that must be set, those that must be clear, and
   * those it sets. */
  static const unsigned char need[] = {0, 0, TERN__U_STARTED, TERN__U_STARTED,
                                       0};
  static const unsigned char clear[] = {
      TERN__U_STARTED | TERN__U_DONE, TERN__U_STARTED | TERN__U_DONE,
      TERN__U_DONE, TERN__U_DONE, TERN__U_DONE};
  static const unsigned char add[] = {TERN__U_STARTED | TERN__U_DONE,
                                      TERN__U_STARTED, 0, TERN__U_DONE,
                                      TERN__U_STARTED | TERN__U_DONE};
  unsigned old = atomic_load_explicit(&r->ustate, memory_order_acquire);
  const char *why;
  for (;;) {
    if (old & TERN__U_CUT)
      return cut_call(r, call);
    if ((old & need[call]) != need[call] || (old & clear[call]) != 0)
      break;
    if (add[call] == 0 || atomic_compare_exchange_weak_explicit(
                              &r->ustate, &old, old | add[call],
                              memory_order_acq_rel, memory_order_acquire))
      return 0;
  }
  why = old & TERN__U_DONE      ? "the response is already finished"
        : old & TERN__U_STARTED ? "a response was already started"
                                : "no response was started";
  tern__log(r->w->srv, TERN_LOG_ERROR, "%s refused: %s", call_names[call], why);
  return TERN_ESTATE;
}

static int is_gone(const tern_request *r) {
  return atomic_load_explicit(&r->gone, memory_order_acquire);
}

/* A finishing call that cannot queue its bytes: the client learns it by
 * the adapter's abort (the connection closing on HTTP/1.1, the stream
 * reset on HTTP/2), never by an answer that looks complete. */
int tern__request_fail(tern_request *r, int rc) {
  r->flags |= TERN__RQ_ABORT;
  r->ops->abort(r);
  finish_user(r);
  return rc;
}

/* The adapter's start, through the route's response filter when it has
 * one (compression, which may then wrap r->ops until the response
 * ends); write and end go through r->ops, wrapped or not. */
static int resp_start(tern_request *r, int status, const tern_header *h,
                      size_t n, int64_t content_length) {
  struct tern_response_head head;
  int rc;
  if (r->w->srv->response_fn != NULL &&
      (rc = tern__response_hook(r, status, &h, &n, &head)) != 0)
    return rc;
  if (r->route != NULL && r->route->filter != NULL)
    rc = r->route->filter->start(r, status, h, n, content_length);
  else
    rc = r->ops->start(r, status, h, n, content_length);
  if (r->w->srv->response_fn != NULL)
    tern__response_hook_done(r, &head);
  return rc;
}

static int resp_write(tern_request *r, const void *p, size_t len, int copy,
                      tern_write_fn done, void *duser, tern_release_fn release,
                      void *ruser) {
  return r->ops->write(r, p, len, copy, done, duser, release, ruser);
}

static int resp_end(tern_request *r, const tern_header *t, size_t n) {
  return r->ops->end(r, t, n);
}

/* ---- The response hook ------------------------------------------------ */

int tern__response_hook(tern_request *r, int status, const tern_header **h,
                        size_t *n, struct tern_response_head *head) {
  tern_server *srv = r->w->srv;
  const tern_request *outer = r->w->hooked;

  head->h = NULL;
  if (srv->response_fn == NULL)
    return 0;
  head->r = r;
  head->n = *n;
  head->used = 0;
  head->cap = *n + TERN__HOOK_FIELDS;
  head->h = head->local;
  if (head->cap > sizeof(head->local) / sizeof(head->local[0]) &&
      (head->h = tern__malloc(srv, head->cap * sizeof(*head->h))) == NULL)
    return TERN_ENOMEM;
  if (*n > 0)
    memcpy(head->h, *h, *n * sizeof(*head->h));
  /* Only a request whose head parsed is shown (as to the error hook). */
  r->w->hooked = r;
  srv->response_fn(r->method != NULL ? r : NULL, status, head,
                   srv->response_user);
  r->w->hooked = outer;
  *h = head->h;
  *n = head->n;
  return 0;
}

void tern__response_hook_done(tern_request *r,
                              struct tern_response_head *head) {
  if (head->h != NULL && head->h != head->local)
    tern__free(r->w->srv, head->h);
  head->h = NULL;
}

/* The hook is running for `r`: its response calls would start the answer
 * inside its own start. */
static int hook_running(tern_request *r, const char *call) {
  if (r->w->hooked != r)
    return 0;
  tern__log(r->w->srv, TERN_LOG_ERROR,
            "%s refused: called from the response hook", call);
  return 1;
}

/* Start, write and end a whole answer. */
static inline int whole(tern_request *r, int status, const tern_header *h,
                        size_t n, const void *body, size_t len, int copy,
                        tern_release_fn release, void *ruser, int *took) {
  const tern__req_ops *p = r->ops;
  int rc = p->start(r, status, h, n, (int64_t)len);
  if (rc == 0 && (len > 0 || release != NULL)) {
    rc = p->write(r, body, len, copy, NULL, NULL, release, ruser);
    if (rc == 0 && took != NULL)
      *took = 1;
  }
  if (rc == 0)
    rc = p->end(r, NULL, 0);
  return rc;
}

/* A whole answer with the response hook's fields, out of line: only a
 * server with a hook pays for it. */
static int whole_hooked(tern_request *r, int status, const tern_header *h,
                        size_t n, const void *body, size_t len, int copy,
                        tern_release_fn release, void *ruser, int *took) {
  struct tern_response_head head;
  int rc = tern__response_hook(r, status, &h, &n, &head);
  if (rc == 0)
    rc = whole(r, status, h, n, body, len, copy, release, ruser, took);
  tern__response_hook_done(r, &head);
  return rc;
}

/* tern__respond_whole's body, inline in respond_now: the answer of every
 * request that is not compressed goes through it. */
static inline int respond_whole(tern_request *r, int status,
                                const tern_header *h, size_t n,
                                const void *body, size_t len, int copy,
                                tern_release_fn release, void *ruser,
                                int *took) {
  if (r->w->srv->response_fn != NULL)
    return whole_hooked(r, status, h, n, body, len, copy, release, ruser, took);
  return whole(r, status, h, n, body, len, copy, release, ruser, took);
}

int tern__respond_whole(tern_request *r, int status, const tern_header *h,
                        size_t n, const void *body, size_t len, int copy,
                        tern_release_fn release, void *ruser, int *took) {
  return respond_whole(r, status, h, n, body, len, copy, release, ruser, took);
}

/* Respond on the worker. *took (if not NULL) says whether the adapter
 * took `release` on, to be called when the bytes are written or dropped:
 * even when a later step fails. */
static int respond_now(tern_request *r, int status, const tern_header *h,
                       size_t n, const void *body, size_t len, int copy,
                       tern_release_fn release, void *ruser, int *took) {
  int rc;

  if (is_gone(r)) {
    finish_user(r);
    return TERN_ECLOSED;
  }
  if ((r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)) ||
      hook_running(r, "tern_respond"))
    return TERN_ESTATE;
  tern__request_started(r, status);
  r->bytes_out += len;
  /* A filtering route's answer goes through its filter, out of line,
   * so that the others pay one test for it. */
  if (r->route != NULL && r->route->filter != NULL)
    rc = r->route->filter->respond(r, status, h, n, body, len, copy, release,
                                   ruser, took);
  else
    rc = respond_whole(r, status, h, n, body, len, copy, release, ruser, took);
  if (rc != 0)
    return tern__request_fail(r, rc);
  finish_user(r);
  return 0;
}

/* Header injection defence, for every protocol: names are tokens and
 * values carry no CR, LF or NUL. Checked before anything is queued or
 * posted, so a bad field fails the call itself. */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
    ['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
    ['`'] = 1, ['|'] = 1, ['~'] = 1, ['0'] = 1, ['1'] = 1, ['2'] = 1,
    ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1,
    ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1,
    ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1,
    ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1,
    ['X'] = 1, ['Y'] = 1, ['Z'] = 1, ['a'] = 1, ['b'] = 1, ['c'] = 1,
    ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1,
    ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* A field value holds no CR, LF or NUL (RFC 9110 5.5). Eight bytes at a
 * time: a word has a zero byte when (x - 0x01..01) & ~x & 0x80..80 is not
 * zero, and one equal to c when x ^ (c repeated) has a zero byte. Every
 * response's fields pass here, on every protocol. */
static int value_valid(const char *v, size_t n) {
  const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    uint64_t x, cr, lf;
    memcpy(&x, v + j, 8);
    cr = x ^ (ones * '\r');
    lf = x ^ (ones * '\n');
    if ((((x - ones) & ~x) | ((cr - ones) & ~cr) | ((lf - ones) & ~lf)) & highs)
      return 0;
  }
  for (; j < n; j++) {
    unsigned char ch = (unsigned char)v[j];
    if (ch == '\r' || ch == '\n' || ch == 0)
      return 0;
  }
  return 1;
}

int tern__fields_valid(const tern_header *h, size_t n) {
  size_t i, j;
  if (n > 0 && h == NULL)
    return 0;
  for (i = 0; i < n; i++) {
    if (h[i].name_len == 0 || h[i].name == NULL ||
        (h[i].value_len > 0 && h[i].value == NULL))
      return 0;
    for (j = 0; j < h[i].name_len; j++)
      if (!tchar[(unsigned char)h[i].name[j]])
        return 0;
    if (!value_valid(h[i].value, h[i].value_len))
      return 0;
  }
  return 1;
}

/* ---- The response hook's calls ---------------------------------------- */

int tern_response_head_add(tern_response_head *head, const char *name,
                           size_t name_len, const char *value,
                           size_t value_len) {
  tern_header f;
  tern_header *h;

  f.name = name;
  f.name_len = name_len;
  f.value = value;
  f.value_len = value_len;
  if (head == NULL || head->h == NULL || !tern__fields_valid(&f, 1))
    return TERN_EINVAL;
  if (head->n >= head->cap ||
      name_len + value_len > sizeof(head->bytes) - head->used) {
    tern__log(head->r->w->srv, TERN_LOG_ERROR,
              "tern_response_head_add refused: more than %d fields or %d "
              "bytes added to one answer",
              TERN__HOOK_FIELDS, TERN__HOOK_BYTES);
    return TERN_ENOMEM;
  }
  h = &head->h[head->n++];
  h->name = head->bytes + head->used;
  memcpy(head->bytes + head->used, name, name_len);
  head->used += name_len;
  h->name_len = name_len;
  h->value = head->bytes + head->used;
  if (value_len > 0)
    memcpy(head->bytes + head->used, value, value_len);
  head->used += value_len;
  h->value_len = value_len;
  return 0;
}

const char *tern_response_head_get(const tern_response_head *head,
                                   const char *name, size_t name_len,
                                   size_t *value_len) {
  size_t i;
  if (head == NULL || head->h == NULL || name == NULL)
    return NULL;
  for (i = 0; i < head->n; i++)
    if (head->h[i].name_len == name_len &&
        tern__ieq(head->h[i].name, name, name_len)) {
      if (value_len != NULL)
        *value_len = head->h[i].value_len;
      return head->h[i].value_len > 0 ? head->h[i].value : "";
    }
  return NULL;
}

/* The error hook's view of one answer. It lives on the stack of
 * tern__respond_status_with for the duration of the hook. */
struct tern_error_reply {
  tern_request *r;
  const tern_error_info *info;
  const char *keep;   /* tern's own field (Allow, Retry-After) or NULL */
  const char *keep_v; /* its value */
  size_t keep_len;
  int used; /* tern_error_respond took over the answer */
};

/* Room for the hook's fields plus the one tern keeps; more than this many
 * fields are gathered on the heap, which only such an answer pays for. */
#define ERROR_FIELDS 16

int tern_error_respond(tern_error_reply *rep, const tern_header *headers,
                       size_t n, const void *body, size_t len) {
  const tern_error_info *e;
  tern_header local[ERROR_FIELDS], *h = local;
  size_t i, nh = n;
  int rc, has_keep = 0;

  if (rep == NULL || !tern__fields_valid(headers, n) ||
      (len > 0 && body == NULL))
    return TERN_EINVAL;
  if (rep->used)
    return TERN_ESTATE;
  e = rep->info;
  for (i = 0; i < n && rep->keep != NULL; i++)
    if (headers[i].name_len == strlen(rep->keep) &&
        tern__ieq(headers[i].name, rep->keep, headers[i].name_len))
      has_keep = 1;
  /* A 405 without Allow breaks RFC 9110 15.5.6, a 429 without
   * Retry-After leaves the client guessing: keep tern's field unless the
   * hook wrote its own. */
  if (rep->keep != NULL && !has_keep)
    nh++;
  if (nh > ERROR_FIELDS) {
    h = tern__malloc(rep->r->w->srv, nh * sizeof(*h));
    if (h == NULL) {
      /* As when queuing fails: the connection closes. */
      rep->used = 1;
      return tern__request_fail(rep->r, TERN_ENOMEM);
    }
  }
  if (n > 0)
    memcpy(h, headers, n * sizeof(*h));
  if (nh > n) {
    h[n].name = rep->keep;
    h[n].name_len = strlen(rep->keep);
    h[n].value = rep->keep_v;
    h[n].value_len = rep->keep_len;
  }
  rep->used = 1;
  rc = respond_now(rep->r, e->status, nh > 0 ? h : NULL, nh, body, len, 1, NULL,
                   NULL, NULL);
  if (h != local)
    tern__free(rep->r->w->srv, h);
  return rc;
}

void tern__respond_status(tern_request *r, int status, const char *allow,
                          size_t allow_len) {
  tern__respond_status_with(r, status, allow != NULL ? "Allow" : NULL, allow,
                            allow_len);
}

void tern__respond_status_with(tern_request *r, int status, const char *name,
                               const char *value, size_t value_len) {
  tern_server *srv = r->w->srv;
  char body[64];
  tern_header h[2];
  size_t n = 0;
  int len;

  tern__count_self(r, status);
  if (status >= 400 && srv->error_fn != NULL &&
      !(r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED))) {
    tern_error_info e;
    tern_error_reply rep;
    memset(&e, 0, sizeof(e));
    e.status = status;
    e.reason = tern__reason(status);
    if (status == 405 && name != NULL) {
      e.allow = value;
      e.allow_len = value_len;
    }
    /* Only a request whose head parsed has a method: anything else would
     * show the hook empty or half-filled fields. */
    e.request = r->method != NULL ? r : NULL;
    e.reply = &rep;
    rep.r = r;
    rep.info = &e;
    rep.keep = name;
    rep.keep_v = value;
    rep.keep_len = name != NULL ? value_len : 0;
    rep.used = 0;
    srv->error_fn(&e, srv->error_user);
    if (rep.used)
      return;
  }
  len = snprintf(body, sizeof(body), "%d %s\n", status, tern__reason(status));
  /* A 204 or 304 carries no content, so nothing to give a type to. */
  if (status != 204 && status != 304) {
    h[n].name = "Content-Type";
    h[n].name_len = 12;
    h[n].value = "text/plain";
    h[n++].value_len = 10;
  }
  if (name != NULL) {
    h[n].name = name;
    h[n].name_len = strlen(name);
    h[n].value = value;
    h[n++].value_len = value_len;
  }
  respond_now(r, status, h, n, body, (size_t)len, 1, NULL, NULL, NULL);
}

/* ---- Cross-thread posting ------------------------------------------ */

/* Kinds of posted response calls. */
enum { M_RESPOND = 1, M_START, M_WRITE, M_END, M_INTERIM, M_FLOW, M_ABORT };

/* A posted response call: the inbox's header, the call's arguments, then
 * (in the same allocation) its fields and copied bytes. */
typedef struct {
  tern__msg base;
  int type;
  tern_request *req; /* pinned until handled (tern_request_ref) */
  tern__worker *w;   /* the request's, for freeing the message late */
  int status;
  int64_t content_length;
  tern_header *headers;
  size_t nheaders;
  const void *body;
  size_t len;
  int copy;
  tern_release_fn release;
  void *ruser;
  tern_write_fn done;
  void *duser;
  int reported; /* what the posting call returned */
  /* headers and copied bytes follow */
} resp_msg;

static void msg_apply(tern__msg *base);
static void msg_drop(tern__msg *base, int refused);
static const tern__msg_ops resp_ops = {.apply = msg_apply, .drop = msg_drop};

static resp_msg *msg_new(tern_request *r, int type, const tern_header *h,
                         size_t n, const void *data, size_t len) {
  size_t i, size = sizeof(resp_msg) + n * sizeof(tern_header) + len;
  resp_msg *m;
  char *p;

  for (i = 0; i < n; i++)
    size += h[i].name_len + h[i].value_len;
  m = tern__malloc(r->w->srv, size);
  if (m == NULL)
    return NULL;
  memset(m, 0, sizeof(*m));
  m->base.ops = &resp_ops;
  m->type = type;
  m->req = r;
  m->w = r->w;
  /* A call made while the request was the caller's may reach the worker
   * after another thread's finishing call: the pin keeps the block (and
   * so the checks the worker makes on it) until it has been handled. */
  tern_request_ref(r);
  m->headers = (tern_header *)(void *)(m + 1);
  m->nheaders = n;
  p = (char *)(m->headers + n);
  for (i = 0; i < n; i++) {
    m->headers[i].name = p;
    m->headers[i].name_len = h[i].name_len;
    memcpy(p, h[i].name, h[i].name_len);
    p += h[i].name_len;
    m->headers[i].value = p;
    m->headers[i].value_len = h[i].value_len;
    memcpy(p, h[i].value, h[i].value_len);
    p += h[i].value_len;
  }
  if (data != NULL && len > 0)
    memcpy(p, data, len);
  m->body = p;
  m->len = len;
  return m;
}

static void free_msg(void *data, void *user) {
  resp_msg *m = user;
  (void)data;
  tern__free(m->w->srv, m);
}

static int is_finishing(const resp_msg *m) {
  return m->type == M_RESPOND || m->type == M_END || m->type == M_ABORT;
}

/* Post a call and say what it returns: the client may go later, but if
 * it is known to be gone now the caller hears it now. The message
 * remembers the answer: a call that returned an error must never call its
 * callbacks. The status is taken before posting, because once posted the
 * worker may finish and free the request at any moment.
 *
 * A worker whose loop is ending (the stop deadline passed) refuses the
 * message and drops it (msg_drop): the call returns TERN_ECLOSED. */
static int post(tern_request *r, resp_msg *m) {
  int rc = is_gone(r) ? TERN_ECLOSED : 0;
  m->reported = rc;
  if (tern__worker_post(r->w, &m->base) == 0)
    return rc; /* not m->reported: m may be freed already */
  return TERN_ECLOSED;
}

/* A posted call let go of without being carried out. Its callbacks run
 * only if its caller was told it was taken (and then with TERN_ECLOSED,
 * as for a client gone): a refused call returned an error, so what it
 * passed stays the caller's. A finishing call hands the request over,
 * as the stop deadline requires: the worker cut it (or will find it
 * given up), and whichever of the two comes second frees it. (At
 * shutdown no response call is left to drop: until its request is
 * finished it keeps a connection, and so the loop, alive; the stop
 * deadline applies what was posted before it and refuses the rest.) */
static void msg_drop(tern__msg *base, int refused) {
  resp_msg *m = (resp_msg *)(void *)base;
  tern_request *r = m->req;
  int finishing = is_finishing(m);
  if (!refused && m->reported == 0) {
    if (m->type == M_WRITE && m->done != NULL)
      m->done(r, TERN_ECLOSED, m->duser);
    else if ((m->type == M_RESPOND || m->type == M_WRITE) && !m->copy &&
             m->release != NULL)
      m->release((void *)m->body, m->ruser);
  }
  tern__free(r->w->srv, m);
  if (finishing)
    tern__request_give_up(r);
  tern_request_unref(r);
}

/* A finishing call from another thread that cannot allocate its message
 * still finishes the request, as the caller is told: the request goes on
 * the worker's abort list (no allocation needed), and the worker closes
 * its connection. */
static int no_memory(tern_request *r) {
  tern__worker *w = r->w;
  int closed;
  uv_mutex_lock(&w->inbox_lock);
  closed = w->inbox_closed;
  if (!closed) {
    r->abort_next = w->aborts;
    w->aborts = r;
    uv_async_send(&w->async);
  }
  uv_mutex_unlock(&w->inbox_lock);
  if (closed)
    tern__request_give_up(r);
  return TERN_ENOMEM;
}

void tern__request_abort_all(tern_request *r) {
  while (r != NULL) {
    tern_request *next = r->abort_next;
    if (tern__list_linked(&r->held_link))
      tern__request_fail(r, 0);
    r = next;
  }
}

/* A posted call the worker could not carry out, for a reason the caller
 * could not be told (it was told 0 already): say so in the log. */
static void posted_failed(tern_request *r, const char *call, int rc) {
  tern__log(r->w->srv, TERN_LOG_ERROR,
            "%s from another thread failed on the worker: %s; the "
            "request is aborted (HTTP/1.1: its connection closes; HTTP/2: "
            "its stream is reset)",
            call, tern_strerror(rc));
}

/* Posted calls were checked for order when they were made, so these
 * checks only guard the worker against what it alone can see: the client
 * gone, a write past the declared length, no memory. The user's reference
 * is still there exactly while the request is on the worker's held list;
 * a finishing call that finds it gone is refused rather than dropping a
 * reference twice. */
static int apply_call(resp_msg *m);

static void msg_apply(tern__msg *base) {
  resp_msg *m = (resp_msg *)(void *)base;
  tern_request *r = m->req;
  if (!apply_call(m))
    tern__free(m->w->srv, m);
  tern_request_unref(r);
}

/* Carry out a posted call; 1 when the adapter keeps the message (its
 * bytes are referenced until written: free_msg). */
static int apply_call(resp_msg *m) {
  tern_request *r = m->req;
  tern__worker *w = r->w;
  const tern__req_ops *p = r->ops;
  int held = tern__list_linked(&r->held_link);
  int rc, took_ref = 0;

  switch (m->type) {
  case M_RESPOND:
    if (!held) {
      tern__log(w->srv, TERN_LOG_ERROR,
                "tern_respond from another thread dropped: the request "
                "was already finished");
      rc = TERN_ESTATE;
    } else if (m->copy) {
      /* The body sits in the message: reference it there. Once the
       * adapter holds it, it frees the message, whatever happens next. */
      int took = 0;
      rc = respond_now(r, m->status, m->headers, m->nheaders, m->body, m->len,
                       0, free_msg, m, &took);
      if (rc != 0 && rc != TERN_ECLOSED && rc != TERN_ESTATE)
        posted_failed(r, "tern_respond", rc);
      if (took)
        return 1;
    } else {
      rc = respond_now(r, m->status, m->headers, m->nheaders, m->body, m->len,
                       0, m->release, m->ruser, &took_ref);
    }
    if (rc == TERN_ESTATE && held) {
      tern__log(w->srv, TERN_LOG_ERROR,
                "tern_respond from another thread found a response already "
                "started; the request is aborted");
      tern__request_fail(r, rc);
    } else if (rc != 0 && rc != TERN_ECLOSED && held && !m->copy) {
      posted_failed(r, "tern_respond", rc);
    }
    /* The caller was told 0: the body is ours to release, unless the
     * adapter took it on (it releases it then). */
    if (rc != 0 && !m->copy && !took_ref && m->reported == 0 &&
        m->release != NULL)
      m->release((void *)m->body, m->ruser);
    break;
  case M_START:
    if (is_gone(r))
      break;
    if (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)) {
      tern__log(w->srv, TERN_LOG_ERROR,
                "tern_response_start from another thread dropped: a "
                "response was already started");
      break;
    }
    tern__request_started(r, m->status);
    rc = resp_start(r, m->status, m->headers, m->nheaders, m->content_length);
    if (rc != 0) {
      posted_failed(r, "tern_response_start", rc);
      r->ops->abort(r);
    }
    break;
  case M_WRITE:
    rc = TERN_ECLOSED;
    if (!is_gone(r) &&
        (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)) != TERN__RQ_STARTED) {
      tern__log(w->srv, TERN_LOG_ERROR,
                "tern_response_write from another thread dropped: no "
                "response in progress");
      rc = TERN_ESTATE;
    } else if (!is_gone(r)) {
      r->bytes_out += m->len;
      if (m->copy) {
        rc = resp_write(r, m->body, m->len, 0, NULL, NULL, free_msg, m);
        if (rc == 0)
          return 1;
      } else {
        rc = resp_write(r, m->body, m->len, 0, m->done, m->duser, m->release,
                        m->ruser);
        if (rc == 0)
          break;
      }
      posted_failed(r, "tern_response_write", rc);
      r->ops->abort(r);
    }
    /* The caller was told the piece was taken: it is given back. */
    if (m->reported == 0 && m->done != NULL)
      m->done(r, rc, m->duser);
    else if (m->reported == 0 && m->release != NULL)
      m->release((void *)m->body, m->ruser);
    break;
  case M_INTERIM:
    /* Too late once the final answer has begun: dropped, like a posted
     * start in the wrong order. */
    if (!is_gone(r) && !(r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)) &&
        r->protocol != TERN_PROTO_HTTP10 &&
        p->interim(r, m->status, m->headers, m->nheaders) == TERN_ENOMEM)
      r->ops->abort(r);
    break;
  case M_FLOW:
    /* tern_request_pause/resume from another thread: as on the worker,
     * once the body is being read; a request whose client went away has
     * nothing left to pace. */
    if (!is_gone(r) && (r->flags & TERN__RQ_READING)) {
      if (m->status)
        r->flags |= TERN__RQ_PAUSED;
      else
        r->flags &= ~(unsigned)TERN__RQ_PAUSED;
      r->ops->body_flow(r);
    }
    break;
  case M_END:
    if (!held) {
      tern__log(w->srv, TERN_LOG_ERROR,
                "tern_response_end from another thread dropped: the "
                "request was already finished");
    } else if (is_gone(r)) {
      finish_user(r);
    } else if (!(r->flags & TERN__RQ_STARTED)) {
      tern__log(w->srv, TERN_LOG_ERROR,
                "tern_response_end from another thread found no started "
                "response; the request is aborted");
      tern__request_fail(r, 0);
    } else if ((rc = resp_end(r, m->headers, m->nheaders)) != 0) {
      posted_failed(r, "tern_response_end", rc);
      tern__request_fail(r, 0);
    } else {
      finish_user(r);
    }
    break;
  case M_ABORT:
    if (!held)
      tern__log(w->srv, TERN_LOG_ERROR,
                "tern_response_abort from another thread dropped: the "
                "request was already finished");
    else if (is_gone(r))
      finish_user(r);
    else
      tern__request_fail(r, 0);
    break;
  }
  return 0;
}

/* tern_request_pause (paused 1) or tern_request_resume (0) from a thread
 * other than the owning worker: posted in order with the response calls,
 * so the same rule keeps the request alive until it is applied (the user
 * holds it until a finishing call, which comes after). */
int tern__request_post_flow(tern_request *r, int paused) {
  resp_msg *m;
  unsigned u = atomic_load_explicit(&r->ustate, memory_order_acquire);
  if (u & TERN__U_CUT)
    return TERN_ECLOSED;
  if (u & TERN__U_DONE) {
    tern__log(r->w->srv, TERN_LOG_ERROR,
              "%s refused: the response is already finished",
              paused ? "tern_request_pause" : "tern_request_resume");
    return TERN_ESTATE;
  }
  m = msg_new(r, M_FLOW, NULL, 0, NULL, 0);
  if (m == NULL)
    return TERN_ENOMEM;
  m->status = paused;
  return post(r, m);
}

/* ---- Public calls ---------------------------------------------------- */

/* The arguments of a final answer. A 1xx status is never final (RFC 9110
 * 15.2): taking one as the answer would leave the client waiting for the
 * real one, so it is refused here, before anything is queued or posted,
 * whatever the calling thread. */
static int check_args(tern_request *r, int status, const tern_header *h,
                      size_t n, const void *body, size_t len) {
  if (r == NULL || status < 200 || status > 999 || !tern__fields_valid(h, n) ||
      (len > 0 && body == NULL))
    return TERN_EINVAL;
  return 0;
}

int tern_respond_interim(tern_request *r, int status,
                         const tern_header *headers, size_t nheaders) {
  resp_msg *m;
  int rc;
  /* 100 is sent by tern itself when a body with Expect: 100-continue is
   * read, and 101 only by the upgrade it belongs to. */
  if (r == NULL || status < 102 || status > 199 ||
      !tern__fields_valid(headers, nheaders))
    return TERN_EINVAL;
  if (tern__on_worker(r->w)) {
    if (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED))
      return TERN_ESTATE;
    if (is_gone(r))
      return TERN_ECLOSED;
    /* HTTP/1.0 has no interim responses (RFC 9110 15.2). */
    if (r->protocol == TERN_PROTO_HTTP10)
      return 0;
    rc = r->ops->interim(r, status, headers, nheaders);
    if (rc == TERN_ENOMEM)
      r->ops->abort(r);
    return rc;
  }
  /* From another thread the order is checked against what the user has
   * done so far, as for the other calls (user_step); the worker drops an
   * interim answer that comes too late anyway. */
  rc = atomic_load_explicit(&r->ustate, memory_order_acquire);
  if (rc & TERN__U_CUT)
    return TERN_ECLOSED;
  if (rc & (TERN__U_STARTED | TERN__U_DONE))
    return TERN_ESTATE;
  m = msg_new(r, M_INTERIM, headers, nheaders, NULL, 0);
  if (m == NULL)
    return TERN_ENOMEM;
  m->status = status;
  return post(r, m);
}

int tern_respond(tern_request *r, int status, const tern_header *headers,
                 size_t nheaders, const void *body, size_t len) {
  resp_msg *m;
  int rc = check_args(r, status, headers, nheaders, body, len);
  if (rc != 0 || (rc = user_step(r, CALL_RESPOND)) != 0)
    return rc;
  if (tern__on_worker(r->w))
    return respond_now(r, status, headers, nheaders, body, len, 1, NULL, NULL,
                       NULL);
  m = msg_new(r, M_RESPOND, headers, nheaders, body, len);
  if (m == NULL)
    return no_memory(r);
  m->status = status;
  m->copy = 1;
  return post(r, m);
}

int tern_respond_ref(tern_request *r, int status, const tern_header *headers,
                     size_t nheaders, const void *body, size_t len,
                     tern_release_fn release, void *user) {
  resp_msg *m;
  int rc = check_args(r, status, headers, nheaders, body, len);
  if (rc != 0 || (rc = user_step(r, CALL_RESPOND)) != 0)
    return rc;
  if (tern__on_worker(r->w))
    return respond_now(r, status, headers, nheaders, body, len, 0, release,
                       user, NULL);
  m = msg_new(r, M_RESPOND, headers, nheaders, NULL, 0);
  if (m == NULL)
    return no_memory(r);
  m->status = status;
  m->body = body;
  m->len = len;
  m->release = release;
  m->ruser = user;
  return post(r, m);
}

/* tern_response_start once its fields were checked (or are tern's own). */
static int response_start(tern_request *r, int status,
                          const tern_header *headers, size_t nheaders,
                          int64_t content_length) {
  resp_msg *m;
  int rc;
  if ((rc = user_step(r, CALL_START)) != 0)
    return rc;
  if (tern__on_worker(r->w)) {
    if (is_gone(r))
      return TERN_ECLOSED;
    if ((r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)) ||
        hook_running(r, "tern_response_start"))
      return TERN_ESTATE;
    tern__request_started(r, status);
    return resp_start(r, status, headers, nheaders, content_length);
  }
  m = msg_new(r, M_START, headers, nheaders, NULL, 0);
  if (m == NULL)
    return TERN_ENOMEM;
  m->status = status;
  m->content_length = content_length;
  return post(r, m);
}

int tern_response_start(tern_request *r, int status, const tern_header *headers,
                        size_t nheaders, int64_t content_length) {
  if (check_args(r, status, headers, nheaders, NULL, 0) != 0 ||
      content_length < -1)
    return TERN_EINVAL;
  return response_start(r, status, headers, nheaders, content_length);
}

int tern__response_start_own(tern_request *r, int status,
                             const tern_header *headers, size_t nheaders,
                             int64_t content_length) {
  if (check_args(r, status, NULL, 0, NULL, 0) != 0 || content_length < -1)
    return TERN_EINVAL;
  return response_start(r, status, headers, nheaders, content_length);
}

int tern__respond_own(tern_request *r, int status, const tern_header *headers,
                      size_t nheaders, const void *body, size_t len) {
  int rc = check_args(r, status, NULL, 0, body, len);
  if (rc != 0 || (rc = user_step(r, CALL_RESPOND)) != 0)
    return rc;
  return respond_now(r, status, headers, nheaders, body, len, 1, NULL, NULL,
                     NULL);
}

int64_t tern__response_sendfile(tern_request *r, int fd, uint64_t *off,
                                size_t max) {
  int64_t n;

  /* A filtered body's bytes go through its filter (which has none). */
  if (r->ops->sendfile == NULL)
    return TERN_ENOTSUP;
  if (is_gone(r))
    return TERN_ECLOSED;
  if (!(r->flags & TERN__RQ_STARTED) || (r->flags & TERN__RQ_ENDED))
    return TERN_ESTATE;
  n = r->ops->sendfile(r, fd, off, max);
  if (n > 0)
    r->bytes_out += (uint64_t)n;
  return n;
}

/* A streamed piece: copied (done and release NULL), referenced until
 * done(r, status, user), or referenced until release(data, user). */
static int write_piece(tern_request *r, const void *data, size_t len,
                       tern_write_fn done, tern_release_fn release,
                       void *user) {
  int copy = done == NULL && release == NULL;
  resp_msg *m;
  int rc;
  if (r == NULL || (len > 0 && data == NULL))
    return TERN_EINVAL;
  if ((rc = user_step(r, CALL_WRITE)) != 0)
    return rc;
  if (tern__on_worker(r->w)) {
    if (is_gone(r))
      return TERN_ECLOSED;
    if (!(r->flags & TERN__RQ_STARTED) || (r->flags & TERN__RQ_ENDED))
      return TERN_ESTATE;
    r->bytes_out += len;
    rc = resp_write(r, data, len, copy, done, user, release, user);
    /* Bytes that could not be queued leave a hole in the body: the client
     * must see the response cut (the adapter's abort), never one that
     * ends cleanly without them. A write past the declared length
     * (TERN_EINVAL) leaves the body as declared, and goes on. */
    if (rc == TERN_ENOMEM)
      r->ops->abort(r);
    return rc;
  }
  m = msg_new(r, M_WRITE, NULL, 0, copy ? data : NULL, copy ? len : 0);
  if (m == NULL)
    return TERN_ENOMEM;
  if (!copy) {
    m->body = data;
    m->len = len;
  }
  m->copy = copy;
  m->done = done;
  m->duser = user;
  m->release = release;
  m->ruser = user;
  return post(r, m);
}

int tern_response_write(tern_request *r, const void *data, size_t len,
                        tern_write_fn done, void *user) {
  return write_piece(r, data, len, done, NULL, user);
}

int tern_response_write_ref(tern_request *r, const void *data, size_t len,
                            tern_release_fn release, void *user) {
  if (release == NULL)
    return r == NULL ? TERN_EINVAL
                     : tern_response_write(r, data, len, NULL, NULL);
  return write_piece(r, data, len, NULL, release, user);
}

/* End on the worker, without the user-side check: for tern_response_end
 * and for a WebSocket ending its own request. */
int tern__response_end(tern_request *r, const tern_header *trailers,
                       size_t ntrailers) {
  int rc;
  if (is_gone(r)) {
    finish_user(r);
    return TERN_ECLOSED;
  }
  if (r->flags & TERN__RQ_ENDED)
    return TERN_ESTATE;
  /* The user started a response, but its start failed (no memory for the
   * head): nothing was sent, and the request can only be aborted, as a
   * finishing call that cannot queue its bytes is (and as the posted end
   * from another thread does). */
  if (!(r->flags & TERN__RQ_STARTED))
    return tern__request_fail(r, TERN_ENOMEM);
  rc = resp_end(r, trailers, ntrailers);
  if (rc != 0)
    return tern__request_fail(r, rc);
  finish_user(r);
  return 0;
}

int tern_request_close_after(tern_request *r) {
  if (r == NULL)
    return TERN_EINVAL;
  if (!tern__on_worker(r->w) ||
      (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)))
    return TERN_ESTATE;
  if (r->protocol == TERN_PROTO_HTTP10 || r->protocol == TERN_PROTO_HTTP11)
    r->flags |= TERN__RQ_CLOSE;
  return 0;
}

int tern_response_abort(tern_request *r) {
  resp_msg *m;
  int rc;
  if (r == NULL)
    return TERN_EINVAL;
  if ((rc = user_step(r, CALL_ABORT)) != 0)
    return rc;
  if (tern__on_worker(r->w)) {
    if (hook_running(r, "tern_response_abort"))
      return TERN_ESTATE;
    if (is_gone(r)) {
      finish_user(r);
      return TERN_ECLOSED;
    }
    return tern__request_fail(r, 0);
  }
  m = msg_new(r, M_ABORT, NULL, 0, NULL, 0);
  if (m == NULL)
    return no_memory(r);
  return post(r, m);
}

int tern_response_end(tern_request *r, const tern_header *trailers,
                      size_t ntrailers) {
  resp_msg *m;
  int rc;
  if (r == NULL || !tern__fields_valid(trailers, ntrailers))
    return TERN_EINVAL;
  if ((rc = user_step(r, CALL_END)) != 0)
    return rc;
  if (tern__on_worker(r->w))
    return hook_running(r, "tern_response_end")
               ? TERN_ESTATE
               : tern__response_end(r, trailers, ntrailers);
  m = msg_new(r, M_END, trailers, ntrailers, NULL, 0);
  if (m == NULL)
    return no_memory(r);
  return post(r, m);
}
