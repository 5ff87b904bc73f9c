/* The public response calls. On the owning worker they go straight to the
 * connection's adapter; from any other thread they are packed into a
 * message (headers and copied bytes in one allocation) and posted to the
 * worker's inbox, which applies them in order.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The user's reference ends with a finishing call: tern_respond,
 * tern_respond_ref or tern_response_end. */
static void finish_user(tern_request *r) {
  r->flags |= TERN__RQ_ENDED;
  tern__request_unref(r);
}

static int is_gone(const tern_request *r) {
  return atomic_load_explicit(&r->gone, memory_order_acquire);
}

/* A finishing call that cannot queue its bytes: the client can only learn
 * of it by the connection closing. */
int tern__request_fail(tern_request *r, int rc) {
  r->flags |= TERN__RQ_CLOSE | TERN__RQ_ABORT;
  tern__conn_close(r->conn);
  finish_user(r);
  return rc;
}

static int respond_now(tern_request *r, int status, const tern_header *h,
                       size_t n, const void *body, size_t len, int copy,
                       tern_release_fn release, void *ruser) {
  const tern__proto *p = r->conn->proto;
  int rc;

  if (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED))
    return TERN_ESTATE;
  if (is_gone(r)) {
    finish_user(r);
    return TERN_ECLOSED;
  }
  rc = p->start(r, status, h, n, (int64_t)len);
  if (rc == 0 && (len > 0 || release != NULL))
    rc = p->write(r, body, len, copy, NULL, NULL, release, ruser);
  if (rc == 0)
    rc = p->end(r, NULL, 0);
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

static int fields_valid(const tern_header *h, size_t n) {
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
    for (j = 0; j < h[i].value_len; j++) {
      unsigned char ch = (unsigned char)h[i].value[j];
      if (ch == '\r' || ch == '\n' || ch == 0)
        return 0;
    }
  }
  return 1;
}

/* The error hook's view of one answer. It lives on the stack of
 * tern__respond_status for the duration of the hook. */
struct tern_error_reply {
  tern_request *r;
  const tern_error_info *info;
  int used; /* tern_error_respond took over the answer */
};

/* Room for the hook's fields plus an Allow tern adds; more than this many
 * fields are gathered on the heap, which only such an answer pays for. */
#define ERROR_FIELDS 16

int tern_error_respond(tern_error_reply *rep, const tern_header *headers,
                       size_t n, const void *body, size_t len) {
  const tern_error_info *e;
  tern_header local[ERROR_FIELDS], *h = local;
  size_t i, nh = n;
  int rc, has_allow = 0;

  if (rep == NULL || !fields_valid(headers, n) || (len > 0 && body == NULL))
    return TERN_EINVAL;
  if (rep->used)
    return TERN_ESTATE;
  e = rep->info;
  for (i = 0; i < n; i++)
    if (tern__ieq_lit(headers[i].name, headers[i].name_len, "allow"))
      has_allow = 1;
  /* A 405 without Allow breaks RFC 9110 15.5.6: keep tern's list unless
   * the hook wrote its own. */
  if (e->allow != NULL && !has_allow)
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
    h[n].name = "allow";
    h[n].name_len = 5;
    h[n].value = e->allow;
    h[n].value_len = e->allow_len;
  }
  rep->used = 1;
  rc = respond_now(rep->r, e->status, nh > 0 ? h : NULL, nh, body, len, 1, NULL,
                   NULL);
  if (h != local)
    tern__free(rep->r->w->srv, h);
  return rc;
}

void tern__respond_status(tern_request *r, int status, const char *allow,
                          size_t allow_len) {
  tern_server *srv = r->w->srv;
  char body[64];
  tern_header h[2];
  size_t n = 0;
  int len;

  if (status >= 400 && srv->error_fn != NULL &&
      !(r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED))) {
    tern_error_info e;
    tern_error_reply rep;
    memset(&e, 0, sizeof(e));
    e.status = status;
    e.reason = tern__reason(status);
    e.allow = allow;
    e.allow_len = allow != NULL ? allow_len : 0;
    /* Only a request whose head parsed has a method: anything else would
     * show the hook empty or half-filled fields. */
    e.request = r->method != NULL ? r : NULL;
    e.reply = &rep;
    rep.r = r;
    rep.info = &e;
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
  if (allow != NULL) {
    h[n].name = "Allow";
    h[n].name_len = 5;
    h[n].value = allow;
    h[n++].value_len = allow_len;
  }
  respond_now(r, status, h, n, body, (size_t)len, 1, NULL, NULL);
}

/* ---- Cross-thread posting ------------------------------------------ */

static tern__msg *msg_new(tern_request *r, int type, const tern_header *h,
                          size_t n, const void *data, size_t len) {
  size_t i, size = sizeof(tern__msg) + n * sizeof(tern_header) + len;
  tern__msg *m;
  char *p;

  for (i = 0; i < n; i++)
    size += h[i].name_len + h[i].value_len;
  m = tern__malloc(r->w->srv, size);
  if (m == NULL)
    return NULL;
  memset(m, 0, sizeof(*m));
  m->type = type;
  m->req = r;
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
  tern__msg *m = user;
  (void)data;
  tern__free(m->req->w->srv, m);
}

static void post(tern_request *r, tern__msg *m) {
  tern__worker_post(r->w, m);
}

/* What a posted call returns: the client may go later, but if it is
 * known to be gone now the caller hears it now. The message remembers the
 * answer: a call that returned an error must never call its callbacks. */
static int posted_status(tern_request *r, tern__msg *m) {
  m->reported = is_gone(r) ? TERN_ECLOSED : 0;
  return m->reported;
}

void tern__msg_apply(tern__msg *m) {
  tern_request *r = m->req;
  tern__worker *w = r->w;
  const tern__proto *p = r->conn->proto;
  int rc;

  switch (m->type) {
  case TERN__M_RESPOND:
    if (m->copy) {
      /* The body sits in the message: reference it there. */
      if (respond_now(r, m->status, m->headers, m->nheaders, m->body, m->len, 0,
                      free_msg, m) == 0)
        return;
      break;
    }
    rc = respond_now(r, m->status, m->headers, m->nheaders, m->body, m->len, 0,
                     m->release, m->ruser);
    /* The caller was told 0: the body is ours to release. */
    if (rc != 0 && m->reported == 0 && m->release != NULL)
      m->release((void *)m->body, m->ruser);
    break;
  case TERN__M_START:
    if (!is_gone(r) && !(r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)) &&
        p->start(r, m->status, m->headers, m->nheaders, m->content_length) != 0)
      tern__conn_close(r->conn);
    break;
  case TERN__M_WRITE:
    rc = TERN_ECLOSED;
    if (!is_gone(r) && (r->flags & TERN__RQ_STARTED) &&
        !(r->flags & TERN__RQ_ENDED)) {
      if (m->copy) {
        rc = p->write(r, m->body, m->len, 0, NULL, NULL, free_msg, m);
        if (rc == 0)
          return;
      } else {
        rc = p->write(r, m->body, m->len, 0, m->done, m->duser, NULL, NULL);
        if (rc == 0)
          break;
      }
      tern__conn_close(r->conn);
    }
    if (m->reported == 0 && m->done != NULL)
      m->done(r, rc, m->duser);
    break;
  case TERN__M_INTERIM:
    /* Too late once the final answer has begun: dropped, like a posted
     * start in the wrong order. */
    if (!is_gone(r) && !(r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED)) &&
        r->protocol != TERN_PROTO_HTTP10 &&
        p->interim(r, m->status, m->headers, m->nheaders) == TERN_ENOMEM)
      tern__conn_close(r->conn);
    break;
  case TERN__M_END:
    if (r->flags & TERN__RQ_ENDED)
      break;
    if (is_gone(r))
      finish_user(r);
    else if (!(r->flags & TERN__RQ_STARTED) ||
             p->end(r, m->headers, m->nheaders) != 0)
      tern__request_fail(r, 0);
    else
      finish_user(r);
    break;
  }
  tern__free(w->srv, m);
}

/* ---- Public calls ---------------------------------------------------- */

/* The arguments of a final answer. A 1xx status is never final (RFC 9110
 * 15.2): taking one as the answer would leave the client waiting for the
 * real one, so it is refused here, before anything is queued or posted,
 * whatever the calling thread. */
static int check_args(tern_request *r, int status, const tern_header *h,
                      size_t n, const void *body, size_t len) {
  if (r == NULL || status < 200 || status > 999 || !fields_valid(h, n) ||
      (len > 0 && body == NULL))
    return TERN_EINVAL;
  return 0;
}

int tern_respond_interim(tern_request *r, int status,
                         const tern_header *headers, size_t nheaders) {
  tern__msg *m;
  int rc;
  /* 100 is sent by tern itself when a body with Expect: 100-continue is
   * read, and 101 only by the upgrade it belongs to. */
  if (r == NULL || status < 102 || status > 199 ||
      !fields_valid(headers, nheaders))
    return TERN_EINVAL;
  if (tern__on_worker(r->w)) {
    if (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED))
      return TERN_ESTATE;
    if (is_gone(r))
      return TERN_ECLOSED;
    /* HTTP/1.0 has no interim responses (RFC 9110 15.2). */
    if (r->protocol == TERN_PROTO_HTTP10)
      return 0;
    rc = r->conn->proto->interim(r, status, headers, nheaders);
    if (rc == TERN_ENOMEM)
      tern__conn_close(r->conn);
    return rc;
  }
  m = msg_new(r, TERN__M_INTERIM, headers, nheaders, NULL, 0);
  if (m == NULL)
    return TERN_ENOMEM;
  m->status = status;
  rc = posted_status(r, m);
  post(r, m);
  return rc;
}

int tern_respond(tern_request *r, int status, const tern_header *headers,
                 size_t nheaders, const void *body, size_t len) {
  tern__msg *m;
  int rc = check_args(r, status, headers, nheaders, body, len);
  if (rc != 0)
    return rc;
  if (tern__on_worker(r->w))
    return respond_now(r, status, headers, nheaders, body, len, 1, NULL, NULL);
  m = msg_new(r, TERN__M_RESPOND, headers, nheaders, body, len);
  if (m == NULL)
    return TERN_ENOMEM;
  m->status = status;
  m->copy = 1;
  rc = posted_status(r, m);
  post(r, m);
  return rc;
}

int tern_respond_ref(tern_request *r, int status, const tern_header *headers,
                     size_t nheaders, const void *body, size_t len,
                     tern_release_fn release, void *user) {
  tern__msg *m;
  int rc = check_args(r, status, headers, nheaders, body, len);
  if (rc != 0)
    return rc;
  if (tern__on_worker(r->w))
    return respond_now(r, status, headers, nheaders, body, len, 0, release,
                       user);
  m = msg_new(r, TERN__M_RESPOND, headers, nheaders, NULL, 0);
  if (m == NULL)
    return TERN_ENOMEM;
  m->status = status;
  m->body = body;
  m->len = len;
  m->release = release;
  m->ruser = user;
  rc = posted_status(r, m);
  post(r, m);
  return rc;
}

int tern_response_start(tern_request *r, int status, const tern_header *headers,
                        size_t nheaders, int64_t content_length) {
  tern__msg *m;
  int rc = check_args(r, status, headers, nheaders, NULL, 0);
  if (rc != 0 || content_length < -1)
    return TERN_EINVAL;
  if (tern__on_worker(r->w)) {
    if (r->flags & (TERN__RQ_STARTED | TERN__RQ_ENDED))
      return TERN_ESTATE;
    if (is_gone(r))
      return TERN_ECLOSED;
    return r->conn->proto->start(r, status, headers, nheaders, content_length);
  }
  m = msg_new(r, TERN__M_START, headers, nheaders, NULL, 0);
  if (m == NULL)
    return TERN_ENOMEM;
  m->status = status;
  m->content_length = content_length;
  rc = posted_status(r, m);
  post(r, m);
  return rc;
}

int tern_response_write(tern_request *r, const void *data, size_t len,
                        tern_write_fn done, void *user) {
  tern__msg *m;
  int rc;
  if (r == NULL || (len > 0 && data == NULL))
    return TERN_EINVAL;
  if (tern__on_worker(r->w)) {
    if (!(r->flags & TERN__RQ_STARTED) || (r->flags & TERN__RQ_ENDED))
      return TERN_ESTATE;
    if (is_gone(r))
      return TERN_ECLOSED;
    return r->conn->proto->write(r, data, len, done == NULL, done, user, NULL,
                                 NULL);
  }
  m = msg_new(r, TERN__M_WRITE, NULL, 0, done == NULL ? data : NULL,
              done == NULL ? len : 0);
  if (m == NULL)
    return TERN_ENOMEM;
  if (done != NULL) {
    m->body = data;
    m->len = len;
  }
  m->copy = done == NULL;
  m->done = done;
  m->duser = user;
  rc = posted_status(r, m);
  post(r, m);
  return rc;
}

int tern_response_end(tern_request *r, const tern_header *trailers,
                      size_t ntrailers) {
  tern__msg *m;
  int rc;
  if (r == NULL || !fields_valid(trailers, ntrailers))
    return TERN_EINVAL;
  if (tern__on_worker(r->w)) {
    if (!(r->flags & TERN__RQ_STARTED) || (r->flags & TERN__RQ_ENDED))
      return TERN_ESTATE;
    if (is_gone(r)) {
      finish_user(r);
      return TERN_ECLOSED;
    }
    rc = r->conn->proto->end(r, trailers, ntrailers);
    if (rc != 0)
      return tern__request_fail(r, rc);
    finish_user(r);
    return 0;
  }
  m = msg_new(r, TERN__M_END, trailers, ntrailers, NULL, 0);
  if (m == NULL)
    return TERN_ENOMEM;
  rc = posted_status(r, m);
  post(r, m);
  return rc;
}
