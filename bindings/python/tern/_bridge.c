/* tern._native, part two: the request path of the tern.Server API
 * (bindings/python/tern/__init__.py), against the CPython C API.
 *
 * tern.Server sets a server up through ctypes (tern/_ffi.py) and runs it
 * on tern's own worker threads. Everything a request touches goes through
 * this file instead: the C callbacks tern calls (a route's handler, body
 * pieces, a write's completion, the client leaving, WebSocket events, a
 * call on a worker) are the trampolines below, which take the GIL and
 * call the Python function bridge_init() was given for their kind with
 * the callback's user pointer (a key into the package's table of live
 * objects) and the event's values as Python objects; and the calls a
 * request makes into tern (its fields, the answer, streaming, reading,
 * WebSocket sends) are the functions below, which take pointers as
 * Python ints.
 *
 * The GIL: field reads keep it (they only read the request's memory).
 * Every call that may wait on a lock a worker holds while it runs Python
 * (an answer from another thread, a WebSocket send) or may call back
 * releases it around the call, as ctypes.CDLL did. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include <tern.h>

enum {
  CB_REQUEST,
  CB_BODY,
  CB_GONE,
  CB_WRITTEN,
  CB_WS_OPEN,
  CB_WS_MESSAGE,
  CB_WS_CLOSE,
  CB_WS_DRAIN,
  CB_WORKER,
  CB_COUNT
};

static const char *const cb_names[CB_COUNT] = {
    "on_request",    "on_body",     "on_gone",     "on_written", "on_ws_open",
    "on_ws_message", "on_ws_close", "on_ws_drain", "on_worker",
};

/* The Python functions the trampolines call (bridge_init). */
static PyObject *callbacks[CB_COUNT];

static void *ptr_of(PyObject *o) {
  if (o == Py_None)
    return NULL;
  return PyLong_AsVoidPtr(o);
}

/* Call callbacks[kind] with the GIL taken; what it raises is reported
 * (sys.unraisablehook), as a ctypes callback's was. */
static void call_back(int kind, const char *fmt, ...) {
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *fn = callbacks[kind], *args, *res;
  va_list ap;
  if (fn == NULL) {
    PyGILState_Release(g);
    return;
  }
  va_start(ap, fmt);
  args = Py_VaBuildValue(fmt, ap);
  va_end(ap);
  res = args != NULL ? PyObject_Call(fn, args, NULL) : NULL;
  Py_XDECREF(args);
  if (res == NULL)
    PyErr_WriteUnraisable(fn);
  Py_XDECREF(res);
  PyGILState_Release(g);
}

/* ---- The trampolines ------------------------------------------------ */

/* Every Python object an event carries is made in call_back, under the
 * GIL: a trampoline runs on a tern thread that does not hold it, so a
 * pointer goes as an integer ("K"), never as PyLong_FromVoidPtr in the
 * call's arguments (evaluated before call_back takes the GIL: an object
 * allocated without it corrupts the interpreter's heap). */
static unsigned long long ptr_arg(const void *p) {
  return (unsigned long long)(uintptr_t)p;
}

static void t_request(tern_request *r, void *user) {
  call_back(CB_REQUEST, "(nK)", (Py_ssize_t)(intptr_t)user, ptr_arg(r));
}

static void t_body(tern_request *r, int event, const char *data, size_t len,
                   void *user) {
  (void)r;
  call_back(CB_BODY, "(niy#)", (Py_ssize_t)(intptr_t)user, event,
            len ? data : "", (Py_ssize_t)len);
}

static void t_gone(tern_request *r, void *user) {
  (void)r;
  call_back(CB_GONE, "(n)", (Py_ssize_t)(intptr_t)user);
}

static void t_written(tern_request *r, int status, void *user) {
  (void)r;
  call_back(CB_WRITTEN, "(ni)", (Py_ssize_t)(intptr_t)user, status);
}

static void t_ws_open(tern_ws *ws, void *user) {
  call_back(CB_WS_OPEN, "(nK)", (Py_ssize_t)(intptr_t)user, ptr_arg(ws));
}

/* A text message is a str (tern has checked its UTF-8), a binary one
 * bytes. */
static void t_ws_message(tern_ws *ws, int type, const char *data, size_t len,
                         int fin, void *user) {
  (void)ws;
  (void)fin;
  call_back(CB_WS_MESSAGE, type == TERN_WS_TEXT ? "(ns#)" : "(ny#)",
            (Py_ssize_t)(intptr_t)user, len ? data : "", (Py_ssize_t)len);
}

static void t_ws_close(tern_ws *ws, int code, const char *reason, size_t len,
                       void *user) {
  PyGILState_STATE g = PyGILState_Ensure();
  /* A reason that is not UTF-8 is the client's: replaced, not refused. */
  PyObject *text =
      PyUnicode_DecodeUTF8(len ? reason : "", (Py_ssize_t)len, "replace");
  (void)ws;
  if (text == NULL)
    PyErr_WriteUnraisable(NULL);
  else
    call_back(CB_WS_CLOSE, "(niN)", (Py_ssize_t)(intptr_t)user, code, text);
  PyGILState_Release(g);
}

static void t_ws_drain(tern_ws *ws, void *user) {
  (void)ws;
  call_back(CB_WS_DRAIN, "(n)", (Py_ssize_t)(intptr_t)user);
}

static void t_worker(tern_server *srv, unsigned worker, void *loop,
                     void *user) {
  (void)srv;
  (void)worker;
  call_back(CB_WORKER, "(nO)", (Py_ssize_t)(intptr_t)user,
            loop != NULL ? Py_True : Py_False);
}

/* ---- Set-up --------------------------------------------------------- */

static PyObject *bridge_init(PyObject *m, PyObject *args, PyObject *kw) {
  PyObject *fns[CB_COUNT];
  int i;
  (void)m;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOOO:bridge_init",
                                   (char **)cb_names, &fns[0], &fns[1], &fns[2],
                                   &fns[3], &fns[4], &fns[5], &fns[6], &fns[7],
                                   &fns[8]))
    return NULL;
  for (i = 0; i < CB_COUNT; i++)
    if (!PyCallable_Check(fns[i])) {
      PyErr_Format(PyExc_TypeError, "%s is not callable", cb_names[i]);
      return NULL;
    }
  for (i = 0; i < CB_COUNT; i++)
    Py_XSETREF(callbacks[i], Py_NewRef(fns[i]));
  Py_RETURN_NONE;
}

/* route(srv, method, pattern, key, flags, max_body_size) -> rc. A pattern
 * of None installs the default handler (tern_server_set_default_handler)
 * instead; a method of None is any method. The handler is t_request with
 * `key` as its user pointer. */
static PyObject *b_route(PyObject *m, PyObject *args) {
  PyObject *srv;
  const char *method, *pattern;
  Py_ssize_t key;
  unsigned flags;
  unsigned long long max_body;
  tern_route_options o;
  tern_server *s;
  int rc;
  (void)m;
  if (!PyArg_ParseTuple(args, "OzznIK:route", &srv, &method, &pattern, &key,
                        &flags, &max_body))
    return NULL;
  if ((s = ptr_of(srv)) == NULL)
    return PyErr_Occurred() ? NULL : PyLong_FromLong(TERN_EINVAL);
  tern_route_options_init(&o);
  o.flags = flags;
  o.max_body_size = max_body;
  rc = pattern != NULL ? tern_route_with(s, method, pattern, t_request,
                                         (void *)(intptr_t)key, &o)
                       : tern_server_set_default_handler(
                             s, t_request, (void *)(intptr_t)key, &o);
  return PyLong_FromLong(rc);
}

/* ---- Reading a request ---------------------------------------------- */

#define REQ(o, r)                                                              \
  do {                                                                         \
    if (((r) = ptr_of(o)) == NULL) {                                           \
      if (!PyErr_Occurred())                                                   \
        PyErr_SetString(PyExc_ValueError, "no request");                       \
      return NULL;                                                             \
    }                                                                          \
  } while (0)

typedef const char *(*field_fn)(const tern_request *, size_t *);
static const field_fn str_fields[] = {
    tern_request_method, tern_request_target,    tern_request_path,
    tern_request_query,  tern_request_authority, tern_request_host,
};

/* req_str(ptr, which) -> str (latin-1) or None: which indexes
 * str_fields (method, target, path, query, authority, host). */
static PyObject *req_str(PyObject *m, PyObject *args) {
  PyObject *o;
  int which;
  tern_request *r;
  const char *p;
  size_t n = 0;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oi:req_str", &o, &which))
    return NULL;
  REQ(o, r);
  if (which < 0 || which >= (int)(sizeof str_fields / sizeof str_fields[0]))
    return PyErr_Format(PyExc_ValueError, "no field %d", which);
  p = str_fields[which](r, &n);
  if (p == NULL)
    Py_RETURN_NONE;
  return PyUnicode_DecodeLatin1(p, (Py_ssize_t)n, NULL);
}

/* req_int(ptr, which) -> int: protocol, tls, route_status, is_upgrade,
 * worker. */
static PyObject *req_int(PyObject *m, PyObject *args) {
  PyObject *o;
  int which, v;
  tern_request *r;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oi:req_int", &o, &which))
    return NULL;
  REQ(o, r);
  switch (which) {
  case 0:
    v = tern_request_protocol(r);
    break;
  case 1:
    v = tern_request_tls(r);
    break;
  case 2:
    v = tern_request_route_status(r);
    break;
  case 3:
    v = tern_ws_is_upgrade(r);
    break;
  case 4:
    v = tern_request_worker(r);
    break;
  default:
    return PyErr_Format(PyExc_ValueError, "no field %d", which);
  }
  return PyLong_FromLong(v);
}

/* req_headers(ptr) -> [(name, value)], str (latin-1), in arrival order. */
static PyObject *req_headers(PyObject *m, PyObject *o) {
  tern_request *r;
  size_t i, n;
  PyObject *list;
  (void)m;
  REQ(o, r);
  n = tern_request_header_count(r);
  if ((list = PyList_New((Py_ssize_t)n)) == NULL)
    return NULL;
  for (i = 0; i < n; i++) {
    const tern_header *h = tern_request_header_at(r, i);
    PyObject *t =
        h == NULL
            ? NULL
            : Py_BuildValue("(NN)",
                            PyUnicode_DecodeLatin1(
                                h->name, (Py_ssize_t)h->name_len, NULL),
                            PyUnicode_DecodeLatin1(
                                h->value, (Py_ssize_t)h->value_len, NULL));
    if (t == NULL) {
      Py_DECREF(list);
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "a header went missing");
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, t);
  }
  return list;
}

/* req_param(ptr, name) -> str (latin-1, not decoded) or None. */
static PyObject *req_param(PyObject *m, PyObject *args) {
  PyObject *o;
  const char *name, *p;
  Py_ssize_t name_len;
  size_t n = 0;
  tern_request *r;
  (void)m;
  if (!PyArg_ParseTuple(args, "Os#:req_param", &o, &name, &name_len))
    return NULL;
  REQ(o, r);
  p = tern_request_param(r, name, (size_t)name_len, &n);
  if (p == NULL)
    Py_RETURN_NONE;
  return PyUnicode_DecodeLatin1(p, (Py_ssize_t)n, NULL);
}

/* req_peer(ptr) -> (rc, address, port). */
static PyObject *req_peer(PyObject *m, PyObject *o) {
  tern_request *r;
  char buf[64];
  int port = 0, rc;
  (void)m;
  REQ(o, r);
  buf[0] = 0;
  rc = tern_request_peer(r, buf, sizeof buf, &port);
  return Py_BuildValue("(isi)", rc, rc == 0 ? buf : "", port);
}

/* req_proxy_tlv(ptr, kind) -> bytes or None. */
static PyObject *req_proxy_tlv(PyObject *m, PyObject *args) {
  PyObject *o;
  int kind;
  size_t n = 0;
  const char *p;
  tern_request *r;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oi:req_proxy_tlv", &o, &kind))
    return NULL;
  REQ(o, r);
  p = tern_request_proxy_tlv(r, kind, &n);
  if (p == NULL)
    Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
}

/* req_body(ptr, view) -> the collected body: bytes (a copy), or with
 * view true a read-only memoryview of tern's memory (valid while the
 * handler runs; the package releases it when the handler returns). */
static PyObject *req_body(PyObject *m, PyObject *args) {
  PyObject *o;
  int view = 0;
  size_t n = 0;
  const char *p;
  tern_request *r;
  (void)m;
  if (!PyArg_ParseTuple(args, "O|p:req_body", &o, &view))
    return NULL;
  REQ(o, r);
  p = tern_request_body(r, &n);
  if (p == NULL || n == 0)
    p = "", n = 0;
  if (view)
    return PyMemoryView_FromMemory((char *)p, (Py_ssize_t)n, PyBUF_READ);
  return PyBytes_FromStringAndSize(p, (Py_ssize_t)n);
}

/* ---- Answering -------------------------------------------------------- */

/* Headers from Python: None or a sequence of (name, value) pairs, each
 * str (latin-1) or bytes; a value of another type is str()'d. The
 * array points into `keep` (a list), to be released after the call. */
#define HDR_LOCAL 16
typedef struct {
  tern_header local[HDR_LOCAL];
  tern_header *h;
  size_t n;
  PyObject *keep;
} hdrs;

static int latin1_bytes(PyObject *v, PyObject *keep, const char **p,
                        size_t *n) {
  PyObject *b;
  if (PyBytes_Check(v)) {
    *p = PyBytes_AS_STRING(v);
    *n = (size_t)PyBytes_GET_SIZE(v);
    return 0;
  }
  if (PyUnicode_Check(v))
    b = PyUnicode_AsLatin1String(v);
  else {
    PyObject *s = PyObject_Str(v);
    b = s != NULL ? PyUnicode_AsLatin1String(s) : NULL;
    Py_XDECREF(s);
  }
  if (b == NULL)
    return -1;
  if (PyList_Append(keep, b) < 0) {
    Py_DECREF(b);
    return -1;
  }
  Py_DECREF(b);
  *p = PyBytes_AS_STRING(b);
  *n = (size_t)PyBytes_GET_SIZE(b);
  return 0;
}

static void hdrs_free(hdrs *h) {
  if (h->h != h->local)
    PyMem_Free(h->h);
  Py_CLEAR(h->keep);
}

static int hdrs_from(PyObject *seq, hdrs *h) {
  PyObject *fast;
  Py_ssize_t i, n;
  h->h = h->local;
  h->n = 0;
  h->keep = NULL;
  if (seq == Py_None)
    return 0;
  if ((fast = PySequence_Fast(seq, "headers must be a sequence of pairs")) ==
      NULL)
    return -1;
  n = PySequence_Fast_GET_SIZE(fast);
  if ((h->keep = PyList_New(0)) == NULL)
    goto fail;
  if (n > HDR_LOCAL &&
      (h->h = PyMem_Malloc((size_t)n * sizeof(tern_header))) == NULL) {
    h->h = h->local;
    PyErr_NoMemory();
    goto fail;
  }
  for (i = 0; i < n; i++) {
    PyObject *pair = PySequence_Fast_GET_ITEM(fast, i);
    tern_header *x = &h->h[i];
    if (!PyTuple_Check(pair) && !PyList_Check(pair)) {
      PyErr_SetString(PyExc_TypeError, "a header is a (name, value) pair");
      goto fail;
    }
    if (PySequence_Size(pair) != 2) {
      PyErr_SetString(PyExc_ValueError, "a header is a (name, value) pair");
      goto fail;
    }
    {
      PyObject *k = PySequence_GetItem(pair, 0),
               *v = PySequence_GetItem(pair, 1);
      int bad = k == NULL || v == NULL ||
                latin1_bytes(k, h->keep, &x->name, &x->name_len) < 0 ||
                latin1_bytes(v, h->keep, &x->value, &x->value_len) < 0;
      /* A bytes name or value is used in place: kept alive by `keep`. */
      if (!bad && PyBytes_Check(k) && PyList_Append(h->keep, k) < 0)
        bad = 1;
      if (!bad && PyBytes_Check(v) && PyList_Append(h->keep, v) < 0)
        bad = 1;
      Py_XDECREF(k);
      Py_XDECREF(v);
      if (bad)
        goto fail;
    }
  }
  h->n = (size_t)n;
  Py_DECREF(fast);
  return 0;
fail:
  Py_DECREF(fast);
  hdrs_free(h);
  return -1;
}

/* respond(ptr, status, headers, body) -> rc (tern_respond). */
static PyObject *b_respond(PyObject *m, PyObject *args) {
  PyObject *o, *headers;
  int status, rc;
  Py_buffer body;
  tern_request *r;
  hdrs h;
  (void)m;
  if (!PyArg_ParseTuple(args, "OiOy*:respond", &o, &status, &headers, &body))
    return NULL;
  if ((r = ptr_of(o)) == NULL || hdrs_from(headers, &h) < 0) {
    PyBuffer_Release(&body);
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "no request");
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS rc = tern_respond(r, status, h.n ? h.h : NULL, h.n,
                                           body.buf, (size_t)body.len);
  Py_END_ALLOW_THREADS PyBuffer_Release(&body);
  hdrs_free(&h);
  return PyLong_FromLong(rc);
}

/* respond_interim(ptr, status, headers) and response_start(ptr, status,
 * headers, content_length) -> rc. */
static PyObject *b_head(PyObject *args, int interim) {
  PyObject *o, *headers;
  int status, rc;
  long long length = -1;
  tern_request *r;
  hdrs h;
  if (!PyArg_ParseTuple(args,
                        interim ? "OiO:respond_interim" : "OiOL:response_start",
                        &o, &status, &headers, &length))
    return NULL;
  REQ(o, r);
  if (hdrs_from(headers, &h) < 0)
    return NULL;
  Py_BEGIN_ALLOW_THREADS rc =
      interim ? tern_respond_interim(r, status, h.n ? h.h : NULL, h.n)
              : tern_response_start(r, status, h.n ? h.h : NULL, h.n,
                                    (int64_t)length);
  Py_END_ALLOW_THREADS hdrs_free(&h);
  return PyLong_FromLong(rc);
}

static PyObject *b_respond_interim(PyObject *m, PyObject *args) {
  (void)m;
  return b_head(args, 1);
}

static PyObject *b_response_start(PyObject *m, PyObject *args) {
  (void)m;
  return b_head(args, 0);
}

/* response_write(ptr, data, key) -> rc. tern references `data` until
 * t_written runs with `key`: the caller keeps the object alive until
 * then. */
static PyObject *b_response_write(PyObject *m, PyObject *args) {
  PyObject *o;
  Py_buffer data;
  Py_ssize_t key;
  tern_request *r;
  int rc;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oy*n:response_write", &o, &data, &key))
    return NULL;
  if ((r = ptr_of(o)) == NULL) {
    PyBuffer_Release(&data);
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "no request");
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS rc = tern_response_write(
      r, data.buf, (size_t)data.len, t_written, (void *)(intptr_t)key);
  Py_END_ALLOW_THREADS PyBuffer_Release(&data);
  return PyLong_FromLong(rc);
}

/* request_call(ptr, what) -> rc, for the calls on a request that take
 * no more than it: what is 0 tern_response_end (no trailers), 1
 * tern_response_abort, 2 tern_request_pause, 3 tern_request_resume. */
static PyObject *b_request_call(PyObject *m, PyObject *args) {
  PyObject *o;
  tern_request *r;
  int what, rc = TERN_EINVAL;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oi:request_call", &o, &what))
    return NULL;
  REQ(o, r);
  Py_BEGIN_ALLOW_THREADS switch (what) {
  case 0:
    rc = tern_response_end(r, NULL, 0);
    break;
  case 1:
    rc = tern_response_abort(r);
    break;
  case 2:
    rc = tern_request_pause(r);
    break;
  case 3:
    rc = tern_request_resume(r);
    break;
  }
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

/* request_watch(ptr, key, what) -> rc: what 0 tern_request_read (the body
 * to t_body), 1 tern_request_on_gone (to t_gone), with `key`. */
static PyObject *b_request_watch(PyObject *m, PyObject *args) {
  PyObject *o;
  Py_ssize_t key;
  tern_request *r;
  int what, rc;
  void *user;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oni:request_watch", &o, &key, &what))
    return NULL;
  REQ(o, r);
  user = (void *)(intptr_t)key;
  Py_BEGIN_ALLOW_THREADS rc = what == 0 ? tern_request_read(r, t_body, user)
                                        : tern_request_on_gone(r, t_gone, user);
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

/* worker_call(srv, worker, key) -> rc: t_worker with `key` on the
 * worker. */
static PyObject *b_worker_call(PyObject *m, PyObject *args) {
  PyObject *srv;
  unsigned worker;
  Py_ssize_t key;
  tern_server *s;
  int rc;
  (void)m;
  if (!PyArg_ParseTuple(args, "OIn:worker_call", &srv, &worker, &key))
    return NULL;
  if ((s = ptr_of(srv)) == NULL)
    return PyErr_Occurred() ? NULL : PyLong_FromLong(TERN_EINVAL);
  Py_BEGIN_ALLOW_THREADS rc =
      tern_worker_call(s, worker, t_worker, (void *)(intptr_t)key);
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

/* ---- WebSocket -------------------------------------------------------- */

/* ws_accept(ptr, key, options) -> (rc, ws or None). options: a dict of
 * tern_ws_options fields by name (subprotocol a str); an unknown name is
 * a TypeError. The events go to t_ws_* with `key`. */
static PyObject *b_ws_accept(PyObject *m, PyObject *args) {
  PyObject *o, *opts, *name, *value, *sub = NULL;
  Py_ssize_t key, pos = 0;
  tern_request *r;
  tern_ws_options wo;
  tern_ws *ws = NULL;
  int rc;
  (void)m;
  if (!PyArg_ParseTuple(args, "OnO!:ws_accept", &o, &key, &PyDict_Type, &opts))
    return NULL;
  REQ(o, r);
  tern_ws_options_init(&wo);
  wo.on_open = t_ws_open;
  wo.on_message = t_ws_message;
  wo.on_close = t_ws_close;
  wo.on_drain = t_ws_drain;
  while (PyDict_Next(opts, &pos, &name, &value)) {
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    unsigned long long v = 0;
    if (n == NULL) {
      PyErr_SetString(PyExc_TypeError, "a WebSocket option name is a str");
      goto fail;
    }
    if (strcmp(n, "subprotocol") == 0) {
      if (value == Py_None)
        continue;
      Py_XDECREF(sub);
      if ((sub = PyUnicode_AsUTF8String(value)) == NULL)
        goto fail;
      wo.subprotocol = PyBytes_AS_STRING(sub);
      wo.subprotocol_len = (size_t)PyBytes_GET_SIZE(sub);
      continue;
    }
    v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
      goto fail;
    if (strcmp(n, "max_message_size") == 0)
      wo.max_message_size = v;
    else if (strcmp(n, "high_water") == 0)
      wo.high_water = (size_t)v;
    else if (strcmp(n, "on_full") == 0)
      wo.on_full = (int)v;
    else if (strcmp(n, "stream_messages") == 0)
      wo.stream_messages = (int)v;
    else if (strcmp(n, "deflate") == 0)
      wo.deflate = (int)v;
    else if (strcmp(n, "deflate_window_bits") == 0)
      wo.deflate_window_bits = (int)v;
    else if (strcmp(n, "deflate_mem_level") == 0)
      wo.deflate_mem_level = (int)v;
    else if (strcmp(n, "deflate_level") == 0)
      wo.deflate_level = (int)v;
    else if (strcmp(n, "close_timeout_ms") == 0)
      wo.close_timeout_ms = (uint32_t)v;
    else {
      PyErr_Format(PyExc_TypeError, "unknown WebSocket option %R", name);
      goto fail;
    }
  }
  Py_BEGIN_ALLOW_THREADS rc =
      tern_ws_accept(r, &wo, (void *)(intptr_t)key, &ws);
  Py_END_ALLOW_THREADS Py_XDECREF(sub);
  if (rc != 0 || ws == NULL)
    return Py_BuildValue("(iO)", rc, Py_None);
  return Py_BuildValue("(iN)", rc, PyLong_FromVoidPtr(ws));
fail:
  Py_XDECREF(sub);
  return NULL;
}

#define WS(o, w)                                                               \
  do {                                                                         \
    if (((w) = ptr_of(o)) == NULL) {                                           \
      if (!PyErr_Occurred())                                                   \
        PyErr_SetString(PyExc_ValueError, "no WebSocket");                     \
      return NULL;                                                             \
    }                                                                          \
  } while (0)

/* ws_send(ws, type, data), ws_ping(ws, data) -> rc. */
static PyObject *b_ws_send(PyObject *m, PyObject *args) {
  PyObject *o;
  int type, rc;
  Py_buffer data;
  tern_ws *w;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oiy*:ws_send", &o, &type, &data))
    return NULL;
  if ((w = ptr_of(o)) == NULL) {
    PyBuffer_Release(&data);
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "no WebSocket");
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS rc =
      type == 0 ? tern_ws_ping(w, data.buf, (size_t)data.len)
                : tern_ws_send(w, type, data.buf, (size_t)data.len);
  Py_END_ALLOW_THREADS PyBuffer_Release(&data);
  return PyLong_FromLong(rc);
}

/* ws_close(ws, code, reason) -> rc. */
static PyObject *b_ws_close(PyObject *m, PyObject *args) {
  PyObject *o;
  int code, rc;
  const char *reason;
  Py_ssize_t len;
  tern_ws *w;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oiy#:ws_close", &o, &code, &reason, &len))
    return NULL;
  WS(o, w);
  Py_BEGIN_ALLOW_THREADS rc = tern_ws_close(w, code, reason, (size_t)len);
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

/* ws_call(ws, what) -> int: 0 pause, 1 resume, 2 buffered, 3 protocol. */
static PyObject *b_ws_call(PyObject *m, PyObject *args) {
  PyObject *o;
  int what;
  long long v = TERN_EINVAL;
  tern_ws *w;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oi:ws_call", &o, &what))
    return NULL;
  WS(o, w);
  Py_BEGIN_ALLOW_THREADS switch (what) {
  case 0:
    v = tern_ws_pause(w);
    break;
  case 1:
    v = tern_ws_resume(w);
    break;
  case 2:
    v = (long long)tern_ws_buffered(w);
    break;
  case 3:
    v = tern_ws_protocol(w);
    break;
  }
  Py_END_ALLOW_THREADS return PyLong_FromLongLong(v);
}

/* ws_broadcast(sockets, type, data) -> rc (tern_ws_broadcast): sockets
 * a sequence of WebSocket pointers, None for one closed meanwhile. */
static PyObject *b_ws_broadcast(PyObject *m, PyObject *args) {
  PyObject *seq, *fast;
  int type, rc;
  Py_buffer data;
  Py_ssize_t i, n;
  tern_ws **list;
  (void)m;
  if (!PyArg_ParseTuple(args, "Oiy*:ws_broadcast", &seq, &type, &data))
    return NULL;
  if ((fast = PySequence_Fast(seq, "sockets must be a sequence")) == NULL) {
    PyBuffer_Release(&data);
    return NULL;
  }
  n = PySequence_Fast_GET_SIZE(fast);
  list = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *list);
  if (list == NULL) {
    Py_DECREF(fast);
    PyBuffer_Release(&data);
    return PyErr_NoMemory();
  }
  for (i = 0; i < n; i++) {
    list[i] = ptr_of(PySequence_Fast_GET_ITEM(fast, i));
    if (list[i] == NULL && PyErr_Occurred()) {
      PyMem_Free(list);
      Py_DECREF(fast);
      PyBuffer_Release(&data);
      return NULL;
    }
  }
  Py_BEGIN_ALLOW_THREADS rc =
      tern_ws_broadcast(list, (size_t)n, type, data.buf, (size_t)data.len);
  Py_END_ALLOW_THREADS PyMem_Free(list);
  Py_DECREF(fast);
  PyBuffer_Release(&data);
  return PyLong_FromLong(rc);
}

PyMethodDef tern_bridge_methods[] = {
    {"bridge_init", (PyCFunction)(void (*)(void))bridge_init,
     METH_VARARGS | METH_KEYWORDS,
     "The Python functions tern.Server's C callbacks call."},
    {"route", b_route, METH_VARARGS, "A route to the request trampoline."},
    {"req_str", req_str, METH_VARARGS, "A request's text field."},
    {"req_int", req_int, METH_VARARGS, "A request's number field."},
    {"req_headers", req_headers, METH_O, "A request's header fields."},
    {"req_param", req_param, METH_VARARGS, "A path parameter."},
    {"req_peer", req_peer, METH_O, "The client's address."},
    {"req_proxy_tlv", req_proxy_tlv, METH_VARARGS, "A PROXY v2 TLV."},
    {"req_body", req_body, METH_VARARGS, "The collected body."},
    {"respond", b_respond, METH_VARARGS, "tern_respond."},
    {"respond_interim", b_respond_interim, METH_VARARGS,
     "tern_respond_interim."},
    {"response_start", b_response_start, METH_VARARGS, "tern_response_start."},
    {"response_write", b_response_write, METH_VARARGS, "tern_response_write."},
    {"request_call", b_request_call, METH_VARARGS,
     "tern_response_end, _abort, tern_request_pause, _resume."},
    {"request_watch", b_request_watch, METH_VARARGS,
     "tern_request_read, tern_request_on_gone."},
    {"worker_call", b_worker_call, METH_VARARGS, "tern_worker_call."},
    {"ws_accept", b_ws_accept, METH_VARARGS, "tern_ws_accept."},
    {"ws_send", b_ws_send, METH_VARARGS, "tern_ws_send (type 0: a ping)."},
    {"ws_close", b_ws_close, METH_VARARGS, "tern_ws_close."},
    {"ws_call", b_ws_call, METH_VARARGS,
     "tern_ws_pause, _resume, _buffered, _protocol."},
    {"ws_broadcast", b_ws_broadcast, METH_VARARGS, "tern_ws_broadcast."},
    {NULL, NULL, 0, NULL},
};
