/* tern._native: the request path of tern's Python server (ASGI 3 and
 * WSGI), against the CPython C API. docs/python.md is the guide.
 *
 * Shape: one tern worker attached (tern_attach) to a libuv loop that this
 * module owns, driven from the asyncio loop of the thread that serves:
 * the libuv loop's backend descriptor is an asyncio reader, its next
 * timer an asyncio timer, and every call into tern from Python asks for
 * one more turn of it before asyncio sleeps again (Server.pump). So tern's
 * worker and the application share one thread: no hand-off, no GIL
 * transfer, and every tern callback runs with the GIL held (pump is called
 * from Python).
 *
 * Per request a Conn carries the ASGI (or WSGI) state: its receive and
 * send are C methods that answer with a ready awaitable when nothing
 * needs waiting, and with an asyncio future when the body or the socket
 * makes the application wait (flow control both ways). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tern.h>
#include <uv.h>

/* Body bytes queued for an application that has not asked for them yet
 * before the socket is paused, and response bytes in flight before
 * send() waits for the socket. */
#define RECV_HIGH (64 * 1024)
#define SEND_HIGH (256 * 1024)
#define SEND_LOW (64 * 1024)

enum { IFACE_ASGI = 0, IFACE_WSGI = 1 };

/* Interned strings, made once. */
static PyObject *s_type, *s_body, *s_more_body, *s_status, *s_headers,
    *s_trailers, *s_more_trailers, *s_bytes, *s_text, *s_code, *s_reason,
    *s_subprotocol, *s_path, *s_file, *s_offset, *s_count, *s_links,
    *s_http_request, *s_http_disconnect, *s_ws_connect, *s_ws_receive,
    *s_ws_disconnect, *s_set_result, *s_done;
static PyObject *k_type, *k_asgi, *k_http_version, *k_server, *k_client,
    *k_scheme, *k_method, *k_root_path, *k_path, *k_raw_path, *k_query_string,
    *k_headers, *k_state, *k_extensions, *k_subprotocols;
static PyObject *s_http_response_start, *s_http_response_body,
    *s_http_response_trailers, *s_http_response_pathsend,
    *s_http_response_zerocopysend, *s_http_response_early_hint, *s_ws_send,
    *s_ws_accept, *s_ws_close, *s_ws_http_response_start,
    *s_http_response_body_ws;

static PyObject *x_ws_denial, *x_trailers, *x_early_hint, *x_pathsend,
    *x_zerocopysend;
static PyObject *v_http, *v_websocket, *v_asgi_info, *v_asgi_ws, *v_https_s,
    *v_ws_s, *v_wss_s, *v_v10, *v_v11, *v_v2, *v_v3, *v_empty_bytes;

/* ---- Ready: an awaitable that is done already ----------------------- */

typedef struct {
  PyObject_HEAD PyObject *value;
} ReadyObject;

static PyTypeObject ReadyType;

static void Ready_dealloc(ReadyObject *r) {
  Py_XDECREF(r->value);
  Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *Ready_await(PyObject *self) {
  Py_INCREF(self);
  return self;
}

static PySendResult Ready_send(PyObject *self, PyObject *arg,
                               PyObject **result) {
  ReadyObject *r = (ReadyObject *)self;
  (void)arg;
  *result = r->value != NULL ? r->value : Py_None;
  Py_INCREF(*result);
  return PYGEN_RETURN;
}

/* Iterating (yield from, or an old-style driver) ends at once with the
 * value. */
static PyObject *Ready_next(PyObject *self) {
  ReadyObject *r = (ReadyObject *)self;
  PyObject *v = r->value != NULL ? r->value : Py_None;
  PyObject *e = PyObject_CallOneArg(PyExc_StopIteration, v);
  if (e != NULL) {
    PyErr_SetObject(PyExc_StopIteration, e);
    Py_DECREF(e);
  }
  return NULL;
}

static PyAsyncMethods Ready_async = {
    .am_await = Ready_await,
    .am_send = Ready_send,
};

static PyTypeObject ReadyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._native.Ready",
    .tp_basicsize = sizeof(ReadyObject),
    .tp_dealloc = (destructor)Ready_dealloc,
    .tp_as_async = &Ready_async,
    .tp_iter = Ready_await,
    .tp_iternext = Ready_next,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An awaitable that is already done.",
};

static PyObject *ready_none;

/* Steals `value`. */
static PyObject *ready_new(PyObject *value) {
  ReadyObject *r;
  if (value == NULL)
    return NULL;
  r = PyObject_New(ReadyObject, &ReadyType);
  if (r == NULL) {
    Py_DECREF(value);
    return NULL;
  }
  r->value = value;
  return (PyObject *)r;
}

/* ---- Server ---------------------------------------------------------- */

typedef struct ConnObject ConnObject;

typedef struct {
  PyObject_HEAD tern_server *srv;
  uv_loop_t uv;
  int uv_ready;            /* uv_loop_init done */
  int attached;            /* tern_attach done */
  int stopping;            /* tern_stop called */
  int forked;              /* tern_server_fork called */
  PyObject *loop;          /* the asyncio loop */
  PyObject *create_future; /* loop.create_future */
  PyObject *call_soon;     /* loop.call_soon */
  PyObject *call_later;    /* loop.call_later */
  PyObject *pump;          /* self.pump, bound once */
  PyObject *timer_cb;      /* self._timer, bound once */
  PyObject *timer;         /* the armed TimerHandle, or NULL */
  uint64_t timer_at;       /* its uv_now() deadline */
  int pump_soon;           /* a call_soon(pump) is pending */
  PyObject *closed;        /* future: tern has stopped (set by pump) */
  PyObject *app;
  int iface;
  PyObject *state;     /* lifespan state (a dict), or NULL */
  PyObject *root_path; /* str */
  PyObject *on_error;  /* callable(kind, exc) for the log */
  PyObject *forwarded; /* trusted proxies (frozenset of str), or NULL */
  int trust_all;       /* "*" among them */
  long limit;          /* --limit-concurrency (0: none) */
  long active;         /* requests and sockets held now */
  uint64_t served;     /* requests handed to the application */
  tern_tls *tls;
  PyObject *on_log;       /* callable(level, text) for tern's log lines */
  PyObject *file_wrapper; /* WSGI's wsgi.file_wrapper (a type) */
  PyObject *local;        /* the last scope["server"] tuple */
  unsigned long thread;   /* the loop's thread (attach) */
  char stats_path[64];    /* answered with tern's counters ("": none) */
  size_t stats_path_len;
  char local_text[64];
  int local_port;
} ServerObject;

static PyTypeObject ServerType;

/* A Python exception in a tern callback cannot propagate: report it
 * through the server's error callable (the log), as asyncio does for a
 * callback that raises. */
static void report(ServerObject *s, const char *kind) {
  PyObject *type, *value, *tb, *rc;
  if (!PyErr_Occurred())
    return;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL && value != NULL)
    PyException_SetTraceback(value, tb);
  if (s != NULL && s->on_error != NULL && value != NULL) {
    rc = PyObject_CallFunction(s->on_error, "sO", kind, value);
    if (rc == NULL)
      PyErr_WriteUnraisable(s->on_error);
    Py_XDECREF(rc);
  } else {
    PyErr_Restore(type, value, tb);
    PyErr_WriteUnraisable(NULL);
    return;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

static int error_from(int rc, const char *what) {
  PyErr_Format(rc == TERN_ECLOSED ? PyExc_OSError : PyExc_RuntimeError,
               "%s: %s", what, tern_strerror(rc));
  return -1;
}

/* Ask for a turn of the libuv loop before asyncio next sleeps: a call
 * into tern from Python may leave work (a write's completion, a close)
 * that only uv_run carries out, and that no descriptor announces. */
static void want_pump(ServerObject *s) {
  PyObject *h;
  if (s->pump_soon || s->call_soon == NULL)
    return;
  h = PyObject_CallOneArg(s->call_soon, s->pump);
  if (h == NULL) {
    report(s, "pump");
    return;
  }
  Py_DECREF(h);
  s->pump_soon = 1;
}

/* After a turn: the next one when libuv's nearest timer is due. */
static void arm_timer(ServerObject *s) {
  int t = uv_backend_timeout(&s->uv);
  uint64_t at;
  PyObject *h, *delay;
  if (t == 0) {
    want_pump(s);
    return;
  }
  if (t < 0)
    return;
  uv_update_time(&s->uv);
  at = uv_now(&s->uv) + (uint64_t)t;
  if (s->timer != NULL && s->timer_at <= at)
    return; /* one that fires sooner is armed: it will re-arm */
  if (s->timer != NULL) {
    h = PyObject_CallMethod(s->timer, "cancel", NULL);
    Py_XDECREF(h);
    Py_CLEAR(s->timer);
  }
  delay = PyFloat_FromDouble(t / 1000.0);
  if (delay == NULL) {
    report(s, "pump");
    return;
  }
  h = PyObject_CallFunctionObjArgs(s->call_later, delay, s->timer_cb, NULL);
  Py_DECREF(delay);
  if (h == NULL) {
    report(s, "pump");
    return;
  }
  s->timer = h;
  s->timer_at = at;
}

static PyObject *Server_pump(ServerObject *s, PyObject *unused) {
  (void)unused;
  s->pump_soon = 0;
  if (!s->attached)
    Py_RETURN_NONE;
  uv_run(&s->uv, UV_RUN_NOWAIT);
  if (PyErr_Occurred())
    report(s, "pump");
  if (s->stopping && !uv_loop_alive(&s->uv)) {
    /* tern has closed every handle: the serving is over. */
    if (s->closed != NULL) {
      PyObject *done = PyObject_CallMethodNoArgs(s->closed, s_done);
      if (done != NULL && done == Py_False) {
        PyObject *rc =
            PyObject_CallMethodOneArg(s->closed, s_set_result, Py_None);
        Py_XDECREF(rc);
      }
      Py_XDECREF(done);
      if (PyErr_Occurred())
        report(s, "pump");
    }
    Py_RETURN_NONE;
  }
  arm_timer(s);
  Py_RETURN_NONE;
}

/* tern's log lines go to the Python side's logger (on_log), from
 * whichever thread tern logs on. */
/* The armed timer fired: it is armed no more. */
static PyObject *Server_timer(ServerObject *s, PyObject *unused) {
  Py_CLEAR(s->timer);
  return Server_pump(s, unused);
}

static void log_cb(int level, const char *msg, size_t len, void *user) {
  ServerObject *s = user;
  PyGILState_STATE g = PyGILState_Ensure();
  if (s->on_log != NULL) {
    PyObject *rc =
        PyObject_CallFunction(s->on_log, "is#", level, msg, (Py_ssize_t)len);
    if (rc == NULL)
      PyErr_WriteUnraisable(s->on_log);
    Py_XDECREF(rc);
  } else {
    fprintf(stderr, "tern: %.*s\n", (int)len, msg);
  }
  PyGILState_Release(g);
}

static void handler(tern_request *r, void *user);
static void response_hook(const tern_request *r, int status,
                          tern_response_head *head, void *user);

static int Server_init(ServerObject *s, PyObject *args, PyObject *kw) {
  static char *names[] = {
      "max_body_size", "idle_timeout_ms", "max_connections", "head_timeout_ms",
      "max_head_size", "on_log",          "log_level",       NULL};
  unsigned long long max_body = 0;
  unsigned idle = 0, maxc = 0, head = 0, head_size = 0;
  PyObject *on_log = Py_None;
  int log_level = TERN_LOG_WARN;
  tern_settings st;
  tern_route_options ro;
  int rc;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|KIIIIOi", names, &max_body,
                                   &idle, &maxc, &head, &head_size, &on_log,
                                   &log_level))
    return -1;
  if (s->srv != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "Server already initialised");
    return -1;
  }
  if (on_log != Py_None) {
    Py_INCREF(on_log);
    Py_XSETREF(s->on_log, on_log);
  }
  s->root_path = PyUnicode_FromString("");
  if (s->root_path == NULL)
    return -1;
  tern_settings_init(&st);
  st.workers = 1;
  if (max_body)
    st.max_body_size = max_body;
  if (idle)
    st.idle_timeout_ms = idle;
  if (maxc)
    st.max_connections = maxc;
  if (head)
    st.head_timeout_ms = head;
  if (head_size)
    st.max_head_size = head_size;
  st.log = log_cb;
  st.log_user = s;
  st.log_level = log_level;
  rc = tern_server_new(&st, &s->srv);
  if (rc != 0)
    return error_from(rc, "tern_server_new");
  tern_route_options_init(&ro);
  ro.flags = TERN_ROUTE_STREAM_BODY;
  rc = tern_server_set_default_handler(s->srv, handler, s, &ro);
  if (rc != 0)
    return error_from(rc, "tern_server_set_default_handler");
  rc = tern_server_on_response(s->srv, response_hook, s);
  if (rc != 0)
    return error_from(rc, "tern_server_on_response");
  return 0;
}

static void Server_release(ServerObject *s) {
  if (s->srv != NULL && (!s->attached || !uv_loop_alive(&s->uv))) {
    tern_server_free(s->srv);
    s->srv = NULL;
    if (s->uv_ready) {
      /* What tern closed may still need a closing turn. */
      uv_run(&s->uv, UV_RUN_NOWAIT);
      if (uv_loop_close(&s->uv) == 0)
        s->uv_ready = 0;
    }
  }
  if (s->srv == NULL)
    s->tls = NULL; /* the server's, freed with it */
}

static int Server_traverse(ServerObject *s, visitproc visit, void *arg) {
  Py_VISIT(s->loop);
  Py_VISIT(s->create_future);
  Py_VISIT(s->call_soon);
  Py_VISIT(s->call_later);
  Py_VISIT(s->pump);
  Py_VISIT(s->timer_cb);
  Py_VISIT(s->timer);
  Py_VISIT(s->closed);
  Py_VISIT(s->app);
  Py_VISIT(s->state);
  Py_VISIT(s->root_path);
  Py_VISIT(s->on_error);
  Py_VISIT(s->forwarded);
  Py_VISIT(s->on_log);
  Py_VISIT(s->file_wrapper);
  return 0;
}

static int Server_clear(ServerObject *s) {
  Py_CLEAR(s->loop);
  Py_CLEAR(s->create_future);
  Py_CLEAR(s->call_soon);
  Py_CLEAR(s->call_later);
  Py_CLEAR(s->pump);
  Py_CLEAR(s->timer_cb);
  Py_CLEAR(s->timer);
  Py_CLEAR(s->closed);
  Py_CLEAR(s->app);
  Py_CLEAR(s->state);
  Py_CLEAR(s->root_path);
  Py_CLEAR(s->on_error);
  Py_CLEAR(s->forwarded);
  Py_CLEAR(s->on_log);
  Py_CLEAR(s->file_wrapper);
  Py_CLEAR(s->local);
  return 0;
}

static void Server_dealloc(ServerObject *s) {
  PyObject_GC_UnTrack(s);
  Server_release(s);
  Server_clear(s);
  Py_TYPE(s)->tp_free((PyObject *)s);
}

static int need_srv(ServerObject *s) {
  if (s->srv == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "the server is closed");
    return -1;
  }
  return 0;
}

/* listen(host=None, port=0, path=None, fd=-1, certfile=None,
 *        keyfile=None, quic=False, proxy_protocol=False,
 *        proxy_trusted=None) -> bound port (0 for a path or fd) */
static PyObject *Server_listen(ServerObject *s, PyObject *args, PyObject *kw) {
  static char *names[] = {"host",          "port",    "path", "fd",
                          "certfile",      "keyfile", "quic", "proxy_protocol",
                          "proxy_trusted", NULL};
  const char *host = NULL, *path = NULL, *cert = NULL, *key = NULL,
             *trusted = NULL;
  int port = 0, fd = -1, quic = 0, proxy = 0, bound = 0, rc;
  tern_listen_options o;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|zizizzppz", names, &host, &port,
                                   &path, &fd, &cert, &key, &quic, &proxy,
                                   &trusted))
    return NULL;
  if (need_srv(s) < 0)
    return NULL;
  tern_listen_options_init(&o);
  if (cert != NULL) {
    if (s->tls == NULL) {
      if ((rc = tern_tls_new(s->srv, &s->tls)) != 0) {
        error_from(rc, "tern_tls_new");
        return NULL;
      }
      rc = tern_tls_add_cert_file(s->tls, cert, key != NULL ? key : cert);
      if (rc == 0)
        rc = tern_tls_commit(s->tls);
      if (rc != 0) {
        PyErr_Format(PyExc_OSError, "TLS certificate %s: %s", cert,
                     tern_strerror(rc));
        s->tls = NULL; /* the server's: freed with it */
        return NULL;
      }
    }
    o.tls = s->tls;
  } else if (quic) {
    PyErr_SetString(PyExc_ValueError, "HTTP/3 needs a certificate");
    return NULL;
  }
  o.host = host;
  o.port = port;
  o.path = path;
  o.fd = fd;
  o.quic = quic;
  o.proxy_protocol = proxy;
  o.proxy_trusted = trusted;
  rc = tern_listen_with(s->srv, &o, &bound);
  if (rc != 0) {
    PyErr_Format(PyExc_OSError, "listen on %s%s%d: %s",
                 path != NULL   ? path
                 : host != NULL ? host
                                : "*",
                 path != NULL ? "" : ":", path != NULL ? fd : port,
                 tern_strerror(rc));
    return NULL;
  }
  return PyLong_FromLong(bound);
}

/* fork(processes) -> index (0 in the caller; pids in .children) */
static PyObject *Server_fork(ServerObject *s, PyObject *args) {
  unsigned n, index = 0, i;
  int *pids;
  int rc;
  PyObject *list;
  if (!PyArg_ParseTuple(args, "I", &n))
    return NULL;
  if (need_srv(s) < 0)
    return NULL;
  pids = PyMem_Calloc(n > 1 ? n : 1, sizeof(int));
  if (pids == NULL)
    return PyErr_NoMemory();
  PyOS_BeforeFork();
  rc = tern_server_fork(s->srv, n, &index, pids);
  if (index == 0)
    PyOS_AfterFork_Parent();
  else
    PyOS_AfterFork_Child();
  if (rc != 0) {
    PyMem_Free(pids);
    error_from(rc, "tern_server_fork");
    return NULL;
  }
  s->forked = 1;
  list = PyList_New(0);
  for (i = 0; index == 0 && list != NULL && i + 1 < n; i++) {
    PyObject *p = PyLong_FromLong(pids[i]);
    if (p == NULL || PyList_Append(list, p) < 0)
      Py_CLEAR(list);
    Py_XDECREF(p);
  }
  PyMem_Free(pids);
  if (list == NULL)
    return NULL;
  return Py_BuildValue("(IN)", index, list);
}

static PyObject *Server_access_log(ServerObject *s, PyObject *args) {
  const char *path;
  int combined = 1, rc;
  tern_access_log_options o;
  if (!PyArg_ParseTuple(args, "s|p", &path, &combined))
    return NULL;
  if (need_srv(s) < 0)
    return NULL;
  tern_access_log_options_init(&o);
  o.path = path;
  o.format = combined ? TERN_ACCESS_LOG_COMBINED : TERN_ACCESS_LOG_JSON;
  rc = tern_server_access_log(s->srv, &o);
  if (rc != 0) {
    error_from(rc, "tern_server_access_log");
    return NULL;
  }
  Py_RETURN_NONE;
}

/* configure(app, interface, state, root_path, on_error, forwarded, limit) */
static PyObject *Server_configure(ServerObject *s, PyObject *args,
                                  PyObject *kw) {
  static char *names[] = {"app",
                          "interface",
                          "state",
                          "root_path",
                          "on_error",
                          "forwarded_allow",
                          "limit_concurrency",
                          "file_wrapper",
                          "stats_path",
                          NULL};
  const char *stats_path = NULL;
  PyObject *app, *state = Py_None, *root = NULL, *on_error = Py_None,
                 *fwd = Py_None, *fw = Py_None;
  const char *iface = "asgi";
  long limit = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sOUOOlOz", names, &app, &iface,
                                   &state, &root, &on_error, &fwd, &limit, &fw,
                                   &stats_path))
    return NULL;
  s->stats_path_len = 0;
  if (stats_path != NULL) {
    size_t n = strlen(stats_path);
    if (n == 0 || n >= sizeof(s->stats_path) || stats_path[0] != '/') {
      PyErr_SetString(PyExc_ValueError, "stats_path: a path of 1 to 63 "
                                        "bytes starting with /");
      return NULL;
    }
    memcpy(s->stats_path, stats_path, n);
    s->stats_path_len = n;
  }
  if (fw != Py_None) {
    if (!PyType_Check(fw)) {
      PyErr_SetString(PyExc_TypeError, "file_wrapper must be a type");
      return NULL;
    }
    Py_INCREF(fw);
    Py_XSETREF(s->file_wrapper, fw);
  }
  if (strcmp(iface, "asgi") == 0)
    s->iface = IFACE_ASGI;
  else if (strcmp(iface, "wsgi") == 0)
    s->iface = IFACE_WSGI;
  else {
    PyErr_SetString(PyExc_ValueError, "interface: asgi or wsgi");
    return NULL;
  }
  Py_INCREF(app);
  Py_XSETREF(s->app, app);
  if (state != Py_None) {
    if (!PyDict_Check(state)) {
      PyErr_SetString(PyExc_TypeError, "state must be a dict");
      return NULL;
    }
    Py_INCREF(state);
    Py_XSETREF(s->state, state);
  } else {
    Py_CLEAR(s->state);
  }
  if (root != NULL) {
    Py_INCREF(root);
    Py_XSETREF(s->root_path, root);
  }
  if (on_error != Py_None) {
    Py_INCREF(on_error);
    Py_XSETREF(s->on_error, on_error);
  }
  Py_CLEAR(s->forwarded);
  s->trust_all = 0;
  if (fwd != Py_None) {
    PyObject *star = PyUnicode_FromString("*");
    s->forwarded = PyFrozenSet_New(fwd);
    if (s->forwarded == NULL || star == NULL) {
      Py_XDECREF(star);
      return NULL;
    }
    s->trust_all = PySet_Contains(s->forwarded, star) == 1;
    Py_DECREF(star);
  }
  s->limit = limit;
  Py_RETURN_NONE;
}

/* attach(loop): tern's worker on this module's libuv loop, driven by the
 * asyncio loop `loop` from now on. Returns the future that is done once
 * tern has stopped (after stop()). */
static PyObject *Server_attach(ServerObject *s, PyObject *loop) {
  PyObject *add_reader, *rc;
  int r;
  if (need_srv(s) < 0)
    return NULL;
  if (s->attached) {
    PyErr_SetString(PyExc_RuntimeError, "attached already");
    return NULL;
  }
  if (s->app == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "configure() first");
    return NULL;
  }
  if (!s->uv_ready) {
    if ((r = uv_loop_init(&s->uv)) != 0) {
      PyErr_Format(PyExc_OSError, "uv_loop_init: %s", uv_strerror(r));
      return NULL;
    }
    s->uv_ready = 1;
  }
  Py_INCREF(loop);
  Py_XSETREF(s->loop, loop);
#define BIND(field, name)                                                      \
  Py_XSETREF(s->field, PyObject_GetAttrString(loop, name));                    \
  if (s->field == NULL)                                                        \
    return NULL;
  BIND(create_future, "create_future")
  BIND(call_soon, "call_soon")
  BIND(call_later, "call_later")
#undef BIND
  Py_XSETREF(s->pump, PyObject_GetAttrString((PyObject *)s, "pump"));
  Py_XSETREF(s->timer_cb, PyObject_GetAttrString((PyObject *)s, "_timer"));
  if (s->pump == NULL || s->timer_cb == NULL)
    return NULL;
  Py_XSETREF(s->closed, PyObject_CallNoArgs(s->create_future));
  if (s->closed == NULL)
    return NULL;
  r = tern_attach(s->srv, &s->uv);
  if (r != 0) {
    error_from(r, "tern_attach");
    return NULL;
  }
  s->attached = 1;
  s->thread = PyThread_get_thread_ident();
  add_reader = PyObject_GetAttrString(loop, "add_reader");
  if (add_reader == NULL)
    return NULL;
  rc = PyObject_CallFunction(add_reader, "iO", uv_backend_fd(&s->uv), s->pump);
  Py_DECREF(add_reader);
  if (rc == NULL)
    return NULL;
  Py_DECREF(rc);
  want_pump(s);
  Py_INCREF(s->closed);
  return s->closed;
}

static PyObject *Server_stop(ServerObject *s, PyObject *args) {
  unsigned deadline = 30000;
  int rc;
  if (!PyArg_ParseTuple(args, "|I", &deadline))
    return NULL;
  if (need_srv(s) < 0)
    return NULL;
  rc = tern_stop(s->srv, deadline);
  s->stopping = 1;
  if (s->attached)
    want_pump(s);
  return PyLong_FromLong(rc);
}

/* detach(): after the closed future is done: the reader goes, the server
 * and its loop are freed. */
static PyObject *Server_close(ServerObject *s, PyObject *unused) {
  (void)unused;
  if (s->attached && s->loop != NULL && s->uv_ready) {
    PyObject *rc = PyObject_CallMethod(s->loop, "remove_reader", "i",
                                       uv_backend_fd(&s->uv));
    if (rc == NULL)
      return NULL;
    Py_DECREF(rc);
  }
  if (s->timer != NULL) {
    PyObject *rc = PyObject_CallMethod(s->timer, "cancel", NULL);
    Py_XDECREF(rc);
    Py_CLEAR(s->timer);
  }
  Server_release(s);
  if (s->srv == NULL)
    s->attached = 0; /* a pump still scheduled finds nothing to run */
  Py_RETURN_NONE;
}

static PyObject *Server_stats(ServerObject *s, PyObject *unused) {
  (void)unused;
  return Py_BuildValue("{s:l,s:K}", "active", s->active, "served",
                       (unsigned long long)s->served);
}

static PyMethodDef Server_methods[] = {
    {"listen", (PyCFunction)(void (*)(void))Server_listen,
     METH_VARARGS | METH_KEYWORDS, "Add a listener; returns the bound port."},
    {"fork", (PyCFunction)Server_fork, METH_VARARGS,
     "tern_server_fork: (index, children's pids)."},
    {"access_log", (PyCFunction)Server_access_log, METH_VARARGS,
     "Log requests to a file (tern's writer)."},
    {"configure", (PyCFunction)(void (*)(void))Server_configure,
     METH_VARARGS | METH_KEYWORDS, "Set the application and its options."},
    {"attach", (PyCFunction)Server_attach, METH_O,
     "Serve on an asyncio loop; returns the stopped future."},
    {"pump", (PyCFunction)Server_pump, METH_NOARGS, "One libuv turn."},
    {"_timer", (PyCFunction)Server_timer, METH_NOARGS,
     "One libuv turn, from the armed timer."},
    {"stop", (PyCFunction)Server_stop, METH_VARARGS,
     "Graceful stop with a deadline in ms."},
    {"close", (PyCFunction)Server_close, METH_NOARGS,
     "Free the server once stopped."},
    {"stats", (PyCFunction)Server_stats, METH_NOARGS, "Counters."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ServerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._native.Server",
    .tp_basicsize = sizeof(ServerObject),
    .tp_dealloc = (destructor)Server_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Server_traverse,
    .tp_clear = (inquiry)Server_clear,
    .tp_methods = Server_methods,
    .tp_init = (initproc)Server_init,
    .tp_new = PyType_GenericNew,
    .tp_doc = "tern's server for ASGI and WSGI applications.",
};

/* ---- Conn: one request (or WebSocket) of the application -------------- */

enum {
  C_STARTED = 1u << 0,        /* http.response.start seen */
  C_HEAD_SENT = 1u << 1,      /* tern has the head (respond/start) */
  C_FINISHED = 1u << 2,       /* tern's finishing call made */
  C_GONE = 1u << 3,           /* the client left */
  C_READING = 1u << 4,        /* tern_request_read called */
  C_PAUSED = 1u << 5,         /* body reading paused by us */
  C_BODY_END = 1u << 6,       /* the whole body was received */
  C_BODY_TAKEN = 1u << 7,     /* ... and handed to the application */
  C_WS = 1u << 8,             /* a websocket scope */
  C_WS_OPEN = 1u << 9,        /* accepted */
  C_WS_CLOSED = 1u << 10,     /* on_close ran (or refused before accept) */
  C_TRAILERS = 1u << 11,      /* the app sends trailers */
  C_HEAD = 1u << 12,          /* HEAD request */
  C_CONNECT_TAKEN = 1u << 13, /* websocket.connect delivered */
  C_HELD = 1u << 14,          /* the request holds a reference on the Conn */
  C_BODY_ERROR = 1u << 16,
  C_ACCEPTING = 1u << 17, /* inside tern_ws_accept: the hook adds fields */
};

struct ConnObject {
  PyObject_HEAD ServerObject *server;
  tern_request *r; /* until the finishing call */
  tern_ws *ws;     /* from accept until on_close */
  unsigned flags;
  int status;
  PyObject *headers; /* the start message's headers, kept until sent */
  int64_t declared;  /* Content-Length given by the app, or -1 */
  int64_t written;   /* body bytes sent */
  /* Received and not yet taken: body pieces (bytes) or ws messages (dicts). */
  PyObject *queue; /* list */
  Py_ssize_t qpos;
  size_t queued;         /* bytes in it */
  PyObject *recv_waiter; /* future of a receive() waiting */
  PyObject *send_waiter; /* future of a send() waiting for the socket */
  /* Writes in flight, in order: their bytes objects. */
  PyObject **ring;
  size_t ring_cap, ring_head, ring_len;
  size_t inflight;
  size_t maps; /* file pieces tern still holds */
  int close_code;
  PyObject *close_reason;
  PyObject *wsgi_status; /* WSGI start_response's */
  PyObject *wsgi_headers;
  PyObject *environ;
};

static PyTypeObject ConnType;

static int Conn_traverse(ConnObject *c, visitproc visit, void *arg) {
  size_t i;
  Py_VISIT(c->server);
  Py_VISIT(c->headers);
  Py_VISIT(c->queue);
  Py_VISIT(c->recv_waiter);
  Py_VISIT(c->send_waiter);
  Py_VISIT(c->close_reason);
  Py_VISIT(c->wsgi_status);
  Py_VISIT(c->wsgi_headers);
  Py_VISIT(c->environ);
  for (i = 0; i < c->ring_len; i++)
    Py_VISIT(c->ring[(c->ring_head + i) % c->ring_cap]);
  return 0;
}

static int Conn_clear(ConnObject *c) {
  Py_CLEAR(c->headers);
  Py_CLEAR(c->queue);
  Py_CLEAR(c->recv_waiter);
  Py_CLEAR(c->send_waiter);
  Py_CLEAR(c->close_reason);
  Py_CLEAR(c->wsgi_status);
  Py_CLEAR(c->wsgi_headers);
  Py_CLEAR(c->environ);
  return 0;
}

static void Conn_dealloc(ConnObject *c) {
  size_t i;
  PyObject_GC_UnTrack(c);
  Conn_clear(c);
  for (i = 0; i < c->ring_len; i++)
    Py_DECREF(c->ring[(c->ring_head + i) % c->ring_cap]);
  PyMem_Free(c->ring);
  Py_CLEAR(c->server);
  Py_TYPE(c)->tp_free((PyObject *)c);
}

static ConnObject *conn_new(ServerObject *s, tern_request *r) {
  ConnObject *c = PyObject_GC_New(ConnObject, &ConnType);
  if (c == NULL)
    return NULL;
  Py_INCREF(s);
  c->server = s;
  c->r = r;
  c->ws = NULL;
  c->flags = 0;
  c->status = 0;
  c->headers = NULL;
  c->declared = -1;
  c->written = 0;
  c->queue = NULL;
  c->qpos = 0;
  c->queued = 0;
  c->recv_waiter = NULL;
  c->send_waiter = NULL;
  c->ring = NULL;
  c->ring_cap = c->ring_head = c->ring_len = 0;
  c->inflight = 0;
  c->maps = 0;
  c->close_code = 0;
  c->close_reason = NULL;
  c->wsgi_status = NULL;
  c->wsgi_headers = NULL;
  c->environ = NULL;
  PyObject_GC_Track(c);
  return c;
}

/* The reference the request (or socket) holds on its Conn goes once
 * tern can call back no more: finished, and every write completed. */
static void conn_maybe_release(ConnObject *c) {
  if ((c->flags & C_HELD) && (c->flags & C_FINISHED) && c->ring_len == 0 &&
      c->maps == 0 && c->ws == NULL) {
    c->flags &= ~(unsigned)C_HELD;
    c->server->active--;
    Py_DECREF(c);
  }
}

/* Resolve a waiter with `value` (borrowed), unless it was cancelled. */
static int wake(PyObject **waiter, PyObject *value) {
  PyObject *f = *waiter, *done, *rc;
  if (f == NULL)
    return 0;
  *waiter = NULL;
  done = PyObject_CallMethodNoArgs(f, s_done);
  if (done == NULL) {
    Py_DECREF(f);
    return -1;
  }
  if (done == Py_True) {
    Py_DECREF(done);
    Py_DECREF(f);
    return 0; /* cancelled: the value stays where it was */
  }
  Py_DECREF(done);
  rc = PyObject_CallMethodOneArg(f, s_set_result, value);
  Py_DECREF(f);
  if (rc == NULL)
    return -1;
  Py_DECREF(rc);
  return 1;
}

static PyObject *new_future(ConnObject *c) {
  return PyObject_CallNoArgs(c->server->create_future);
}

static PyObject *disconnect_message(ConnObject *c) {
  if (c->flags & C_WS) {
    PyObject *reason = c->close_reason;
    return Py_BuildValue("{s:O,s:i,s:O}", "type", s_ws_disconnect, "code",
                         c->close_code ? c->close_code : 1006, "reason",
                         reason != NULL ? reason : Py_None);
  }
  return Py_BuildValue("{s:O}", "type", s_http_disconnect);
}

static PyObject *body_message(PyObject *bytes, int more) {
  PyObject *d = PyDict_New();
  if (d == NULL)
    return NULL;
  if (PyDict_SetItem(d, s_type, s_http_request) < 0 ||
      PyDict_SetItem(d, s_body, bytes) < 0 ||
      PyDict_SetItem(d, s_more_body, more ? Py_True : Py_False) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

/* The client went away (tern_request_on_gone), or the socket closed. */
static void wake_all_gone(ConnObject *c) {
  PyObject *m;
  if (c->recv_waiter != NULL) {
    m = disconnect_message(c);
    if (m != NULL)
      wake(&c->recv_waiter, m);
    Py_XDECREF(m);
  }
  if (c->send_waiter != NULL)
    wake(&c->send_waiter, Py_None); /* send() then raises OSError */
}

static void on_gone(tern_request *r, void *user) {
  ConnObject *c = user;
  (void)r;
  c->flags |= C_GONE;
  wake_all_gone(c);
  if (PyErr_Occurred())
    report(c->server, "disconnect");
}

static void take_body_piece(ConnObject *c, PyObject **out_bytes, int *more);

static void on_body(tern_request *r, int event, const char *data, size_t len,
                    void *user) {
  ConnObject *c = user;
  PyObject *b = NULL;
  (void)r;
  if ((c->flags & C_FINISHED) ||
      (event == TERN_BODY_END && (c->flags & C_BODY_END)))
    return;
  if (event == TERN_BODY_DATA) {
    b = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    if (b == NULL)
      goto fail;
    if (c->queue == NULL && (c->queue = PyList_New(0)) == NULL)
      goto fail;
    if (PyList_Append(c->queue, b) < 0)
      goto fail;
    Py_CLEAR(b);
    c->queued += len;
  } else if (event == TERN_BODY_END) {
    c->flags |= C_BODY_END;
  } else {
    c->flags |= C_BODY_END | C_BODY_ERROR | C_GONE;
  }
  if (c->recv_waiter != NULL) {
    if (c->flags & C_BODY_ERROR) {
      PyObject *m = disconnect_message(c);
      if (m != NULL)
        wake(&c->recv_waiter, m);
      Py_XDECREF(m);
    } else {
      int more;
      PyObject *m;
      take_body_piece(c, &b, &more);
      if (b == NULL)
        goto fail;
      m = body_message(b, more);
      Py_CLEAR(b);
      if (m == NULL)
        goto fail;
      if (wake(&c->recv_waiter, m) == 0) {
        /* The waiter was cancelled: put the piece back. */
        PyObject *body = PyDict_GetItem(m, s_body);
        if (body != NULL && PyBytes_GET_SIZE(body) > 0) {
          if (c->queue == NULL)
            c->queue = PyList_New(0);
          if (c->queue != NULL) {
            PyList_Insert(c->queue, c->qpos, body);
            c->queued += (size_t)PyBytes_GET_SIZE(body);
          }
        }
        if (!more)
          c->flags &= ~(unsigned)C_BODY_TAKEN;
      }
      Py_DECREF(m);
    }
  }
  if (c->queued >= RECV_HIGH && !(c->flags & (C_PAUSED | C_BODY_END)) &&
      c->r != NULL) {
    c->flags |= C_PAUSED;
    tern_request_pause(c->r);
  }
  if (PyErr_Occurred())
    report(c->server, "body");
  return;
fail:
  Py_XDECREF(b);
  report(c->server, "body");
}

/* The queued body as one bytes object (joined), and whether more is to
 * come; marks the body taken when it is complete. */
static void take_body_piece(ConnObject *c, PyObject **out, int *more) {
  Py_ssize_t n = c->queue != NULL ? PyList_GET_SIZE(c->queue) - c->qpos : 0;
  if (n <= 0) {
    *out = v_empty_bytes;
    Py_INCREF(*out);
  } else if (n == 1) {
    *out = PyList_GET_ITEM(c->queue, c->qpos);
    Py_INCREF(*out);
  } else {
    PyObject *slice =
        PyList_GetSlice(c->queue, c->qpos, PyList_GET_SIZE(c->queue));
    *out = slice != NULL ? _PyBytes_Join(v_empty_bytes, slice) : NULL;
    Py_XDECREF(slice);
  }
  if (c->queue != NULL)
    PyList_SetSlice(c->queue, 0, PyList_GET_SIZE(c->queue), NULL);
  c->qpos = 0;
  c->queued = 0;
  *more = !(c->flags & C_BODY_END);
  if (!*more)
    c->flags |= C_BODY_TAKEN;
  if ((c->flags & C_PAUSED) && c->r != NULL && *more) {
    c->flags &= ~(unsigned)C_PAUSED;
    tern_request_resume(c->r);
    want_pump(c->server);
  }
}

/* Start reading the body: tern sends 100 Continue now, when the client
 * asked for it, so only an application that reads gets the body. */
static int start_reading(ConnObject *c) {
  int rc;
  if (c->flags & C_READING)
    return 0;
  c->flags |= C_READING;
  if (c->r == NULL)
    return 0;
  rc = tern_request_read(c->r, on_body, c);
  want_pump(c->server);
  if (rc != 0) {
    c->flags |= C_BODY_END | C_BODY_ERROR;
    return 0;
  }
  return 0;
}

/* The client left: send() and its kind raise OSError (ASGI 2.4). */
static PyObject *client_gone(ConnObject *c) {
  c->flags |= C_GONE;
  PyErr_SetString(PyExc_OSError, "the client disconnected");
  return NULL;
}

/* receive() with nothing to give yet: a future the callbacks resolve. */
static PyObject *wait_message(ConnObject *c) {
  if (c->recv_waiter != NULL) {
    PyErr_SetString(PyExc_RuntimeError,
                    "receive() called while another receive() waits");
    return NULL;
  }
  c->recv_waiter = new_future(c);
  if (c->recv_waiter == NULL)
    return NULL;
  Py_INCREF(c->recv_waiter);
  return c->recv_waiter;
}

/* A message's "type", or NULL with an exception. */
static PyObject *message_type(PyObject *msg) {
  PyObject *type;
  if (!PyDict_Check(msg)) {
    PyErr_SetString(PyExc_TypeError, "send() takes a dict");
    return NULL;
  }
  type = PyDict_GetItemWithError(msg, s_type);
  if (type == NULL && !PyErr_Occurred())
    PyErr_SetString(PyExc_KeyError, "message without 'type'");
  return type;
}

static const tern_header text_plain = {"content-type", 12,
                                       "text/plain; charset=utf-8", 25};

/* The answer for an application that failed before its response. */
static void answer_500(ConnObject *c) {
  tern_respond(c->r, 500, &text_plain, 1, "Internal Server Error", 21);
}

/* receive() of an HTTP scope. */
static PyObject *http_receive(ConnObject *c) {
  PyObject *b, *m;
  int more;
  if (!(c->flags & C_BODY_TAKEN)) {
    if (c->flags & C_BODY_ERROR)
      return ready_new(disconnect_message(c));
    if (!(c->flags & C_READING))
      start_reading(c);
    if ((c->flags & C_BODY_END) || c->queued > 0) {
      take_body_piece(c, &b, &more);
      if (b == NULL)
        return NULL;
      m = body_message(b, more);
      Py_DECREF(b);
      return ready_new(m);
    }
  } else if (c->flags & (C_GONE | C_FINISHED)) {
    /* Everything was read: the next message is the disconnect, once the
     * client left or the response is complete. */
    return ready_new(disconnect_message(c));
  }
  return wait_message(c);
}

/* ---- Sending ----------------------------------------------------------- */

/* Header list (iterable of (name, value) bytes pairs) to tern_header[],
 * borrowing the bytes' buffers (the list is kept alive by the caller).
 * Content-Length is taken out into *length (-1 when absent); names tern
 * sets itself are left to tern. Returns the count, or -1. */
static Py_ssize_t convert_headers(PyObject *seq, tern_header **out,
                                  PyObject **keep, int64_t *length,
                                  int *close) {
  PyObject *fast, *item;
  Py_ssize_t n, i, k = 0;
  tern_header *h;
  *out = NULL;
  *keep = NULL;
  if (length != NULL)
    *length = -1;
  if (seq == NULL || seq == Py_None)
    return 0;
  fast = PySequence_Fast(seq, "headers must be a list of (name, value)");
  if (fast == NULL)
    return -1;
  n = PySequence_Fast_GET_SIZE(fast);
  h = PyMem_Malloc(sizeof(*h) * (size_t)(n > 0 ? n : 1));
  if (h == NULL) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    return -1;
  }
  for (i = 0; i < n; i++) {
    PyObject *name, *value;
    char *nb, *vb;
    Py_ssize_t nl, vl;
    item = PySequence_Fast_GET_ITEM(fast, i);
    if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2) {
      name = PyTuple_GET_ITEM(item, 0);
      value = PyTuple_GET_ITEM(item, 1);
    } else if (PyList_Check(item) && PyList_GET_SIZE(item) == 2) {
      name = PyList_GET_ITEM(item, 0);
      value = PyList_GET_ITEM(item, 1);
    } else {
      PyErr_SetString(PyExc_TypeError, "a header must be a (name, value) pair");
      goto fail;
    }
    if (!PyBytes_Check(name) || !PyBytes_Check(value)) {
      PyErr_SetString(PyExc_TypeError, "header names and values must be bytes");
      goto fail;
    }
    PyBytes_AsStringAndSize(name, &nb, &nl);
    PyBytes_AsStringAndSize(value, &vb, &vl);
    if (close != NULL && nl == 10 && strncasecmp(nb, "connection", 10) == 0) {
      /* tern writes Connection itself: "close" is asked for instead
       * (tern_request_close_after). */
      if (vl == 5 && strncasecmp(vb, "close", 5) == 0)
        *close = 1;
      continue;
    }
    if (length != NULL && nl == 14 &&
        strncasecmp(nb, "content-length", 14) == 0) {
      char *end;
      long long v;
      char tmp[32];
      if (vl <= 0 || vl >= (Py_ssize_t)sizeof(tmp)) {
        PyErr_SetString(PyExc_ValueError, "bad Content-Length");
        goto fail;
      }
      memcpy(tmp, vb, (size_t)vl);
      tmp[vl] = 0;
      errno = 0;
      v = strtoll(tmp, &end, 10);
      if (*end != 0 || v < 0 || errno != 0 || tmp[0] == '-' || tmp[0] == '+') {
        PyErr_SetString(PyExc_ValueError, "bad Content-Length");
        goto fail;
      }
      *length = v;
      continue;
    }
    h[k].name = nb;
    h[k].name_len = (size_t)nl;
    h[k].value = vb;
    h[k].value_len = (size_t)vl;
    k++;
  }
  *out = h;
  *keep = fast;
  return k;
fail:
  PyMem_Free(h);
  Py_DECREF(fast);
  return -1;
}

static void ring_push(ConnObject *c, PyObject *b) {
  if (c->ring_len == c->ring_cap) {
    size_t cap = c->ring_cap ? c->ring_cap * 2 : 8, i;
    PyObject **n = PyMem_Malloc(sizeof(*n) * cap);
    if (n == NULL)
      Py_FatalError("tern: out of memory for the write ring");
    for (i = 0; i < c->ring_len; i++)
      n[i] = c->ring[(c->ring_head + i) % c->ring_cap];
    PyMem_Free(c->ring);
    c->ring = n;
    c->ring_cap = cap;
    c->ring_head = 0;
  }
  Py_INCREF(b);
  c->ring[(c->ring_head + c->ring_len) % c->ring_cap] = b;
  c->ring_len++;
}

static void on_written(tern_request *r, int status, void *user) {
  ConnObject *c = user;
  PyObject *b;
  (void)r;
  if (c->ring_len == 0)
    return;
  b = c->ring[c->ring_head];
  c->ring_head = (c->ring_head + 1) % c->ring_cap;
  c->ring_len--;
  c->inflight -= (size_t)PyBytes_GET_SIZE(b);
  Py_DECREF(b);
  if (status != 0)
    c->flags |= C_GONE;
  if (c->send_waiter != NULL && (c->inflight <= SEND_LOW || status != 0))
    wake(&c->send_waiter, Py_None);
  if (PyErr_Occurred())
    report(c->server, "write");
  Py_INCREF(c);
  conn_maybe_release(c);
  Py_DECREF(c);
}

static void finished(ConnObject *c) {
  c->flags |= C_FINISHED;
  c->r = NULL;
  if (c->recv_waiter != NULL && (c->flags & C_BODY_TAKEN)) {
    PyObject *m = disconnect_message(c);
    if (m != NULL)
      wake(&c->recv_waiter, m);
    Py_XDECREF(m);
  }
  want_pump(c->server);
}

/* Queue one piece; returns the awaitable send() answers with. */
static PyObject *write_piece(ConnObject *c, PyObject *bytes) {
  Py_ssize_t len = PyBytes_GET_SIZE(bytes);
  int rc;
  if (len == 0 || (c->flags & C_HEAD))
    goto ready;
  if (c->declared >= 0 && c->written + len > c->declared) {
    PyErr_SetString(PyExc_RuntimeError,
                    "response body longer than its Content-Length");
    return NULL;
  }
  ring_push(c, bytes);
  c->inflight += (size_t)len;
  rc = tern_response_write(c->r, PyBytes_AS_STRING(bytes), (size_t)len,
                           on_written, c);
  want_pump(c->server);
  if (rc != 0) {
    /* Not queued: the ring's last entry goes back. */
    c->ring_len--;
    c->inflight -= (size_t)len;
    Py_DECREF(bytes);
    if (rc == TERN_ECLOSED)
      return client_gone(c);
    error_from(rc, "tern_response_write");
    return NULL;
  }
  c->written += len;
  if (c->inflight > SEND_HIGH) {
    if (c->send_waiter == NULL && (c->send_waiter = new_future(c)) == NULL)
      return NULL;
    Py_INCREF(c->send_waiter);
    return c->send_waiter;
  }
ready:
  Py_INCREF(ready_none);
  return ready_none;
}

/* The head goes to tern: at once with the whole body when it is the only
 * piece (tern_respond), else a streamed start. */
static int send_head(ConnObject *c, PyObject *first, int more) {
  tern_header *h;
  PyObject *keep;
  int64_t length;
  Py_ssize_t n;
  int rc, close = 0;
  n = convert_headers(c->headers, &h, &keep, &length, &close);
  if (n < 0)
    return -1;
  c->declared = length;
  if (close)
    tern_request_close_after(c->r);
  if (!more && !(c->flags & C_TRAILERS)) {
    Py_ssize_t blen = first != NULL ? PyBytes_GET_SIZE(first) : 0;
    if (length >= 0 && length != blen && !(c->flags & C_HEAD)) {
      /* The head promised another length: what the client gets is cut
       * short (never a response that looks whole). */
      rc = tern_response_start(c->r, c->status, h, (size_t)n, length);
      PyMem_Free(h);
      Py_XDECREF(keep);
      Py_CLEAR(c->headers);
      c->flags |= C_HEAD_SENT;
      if (rc == 0 && blen > 0 && blen < length)
        tern_response_write(c->r, PyBytes_AS_STRING(first), (size_t)blen, NULL,
                            NULL);
      tern_response_abort(c->r);
      finished(c);
      PyErr_Format(PyExc_RuntimeError,
                   "response body of %zd bytes with Content-Length %lld", blen,
                   (long long)length);
      return -1;
    }
    if ((c->flags & C_HEAD) && length >= 0) {
      /* HEAD with the app's length: announced, no body. */
      int rc2;
      rc = tern_response_start(c->r, c->status, h, (size_t)n, length);
      rc2 = tern_response_end(c->r, NULL, 0);
      rc = rc != 0 ? rc : rc2;
    } else
      rc = tern_respond(c->r, c->status, h, (size_t)n,
                        first != NULL ? PyBytes_AS_STRING(first) : NULL,
                        (size_t)blen);
    PyMem_Free(h);
    Py_XDECREF(keep);
    Py_CLEAR(c->headers);
    c->flags |= C_HEAD_SENT;
    finished(c);
    if (rc != 0 && rc != TERN_ECLOSED)
      return error_from(rc, "tern_respond");
    if (rc == TERN_ECLOSED) {
      client_gone(c);
      return -1;
    }
    return 0;
  }
  rc = tern_response_start(c->r, c->status, h, (size_t)n,
                           (c->flags & C_TRAILERS) ? -1 : length);
  PyMem_Free(h);
  Py_XDECREF(keep);
  Py_CLEAR(c->headers);
  c->flags |= C_HEAD_SENT;
  want_pump(c->server);
  if (rc == TERN_ECLOSED) {
    client_gone(c);
    return -1;
  }
  if (rc != 0)
    return error_from(rc, "tern_response_start");
  return 0;
}

static int end_response(ConnObject *c, PyObject *trailers) {
  tern_header *h = NULL;
  PyObject *keep = NULL;
  Py_ssize_t n = 0;
  int rc;
  if (c->declared >= 0 && c->written < c->declared && !(c->flags & C_HEAD)) {
    tern_response_abort(c->r);
    finished(c);
    PyErr_Format(PyExc_RuntimeError,
                 "response body of %lld bytes shorter than its "
                 "Content-Length %lld",
                 (long long)c->written, (long long)c->declared);
    return -1;
  }
  if (trailers != NULL) {
    n = convert_headers(trailers, &h, &keep, NULL, NULL);
    if (n < 0)
      return -1;
  }
  rc = tern_response_end(c->r, h, (size_t)n);
  PyMem_Free(h);
  Py_XDECREF(keep);
  finished(c);
  if (rc == TERN_ECLOSED) {
    client_gone(c);
    return -1;
  }
  if (rc != 0)
    return error_from(rc, "tern_response_end");
  return 0;
}

static int str_eq(PyObject *a, PyObject *b) {
  return a == b || (PyUnicode_Check(a) && PyUnicode_Compare(a, b) == 0);
}

static PyObject *get_bytes(PyObject *msg, PyObject *key) {
  PyObject *v = PyDict_GetItemWithError(msg, key);
  if (v == NULL) {
    if (PyErr_Occurred())
      return NULL;
    return v_empty_bytes;
  }
  if (PyBytes_Check(v))
    return v;
  if (PyByteArray_Check(v) || PyMemoryView_Check(v)) {
    PyErr_SetString(PyExc_TypeError, "body must be bytes");
    return NULL;
  }
  PyErr_Format(PyExc_TypeError, "'%U' must be bytes", key);
  return NULL;
}

static int get_flag(PyObject *msg, PyObject *key) {
  PyObject *v = PyDict_GetItemWithError(msg, key);
  if (v == NULL)
    return PyErr_Occurred() ? -1 : 0;
  return PyObject_IsTrue(v);
}

/* A file body (pathsend, zerocopysend, wsgi.file_wrapper): mapped and
 * written by reference (tern_response_write_ref), so its bytes go from
 * the page cache to the socket without a copy in user space, and the
 * memory it takes is the file's pages, not the process's. The mapping
 * goes when tern has written it (or dropped it); the awaitable send()
 * returns is done then. */
typedef struct {
  void *base;
  size_t len;
  ConnObject *c;
  PyObject *waiter; /* future, or NULL */
} file_piece;

static void file_written(void *data, void *user) {
  file_piece *f = user;
  ConnObject *c = f->c;
  (void)data;
  munmap(f->base, f->len);
  c->maps--;
  if (f->waiter != NULL) {
    wake(&f->waiter, Py_None);
    if (PyErr_Occurred())
      report(c->server, "write");
  }
  PyMem_Free(f);
  conn_maybe_release(c);
  Py_DECREF(c);
}

static PyObject *send_file(ConnObject *c, int fd, int64_t offset, int64_t count,
                           int more, int wait) {
  struct stat st;
  PyObject *out = NULL;
  if (fstat(fd, &st) < 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return NULL;
  }
  if (offset < 0)
    offset = 0;
  if (count < 0 || offset + count > st.st_size)
    count = st.st_size > offset ? st.st_size - offset : 0;
  if (!(c->flags & C_HEAD_SENT)) {
    /* The length is known: Content-Length, no chunking (unless more
     * follows). */
    if (!more) {
      char num[32];
      PyObject *len;
      snprintf(num, sizeof(num), "%lld", (long long)count);
      len = PyBytes_FromString(num);
      PyObject *pair =
          len != NULL ? Py_BuildValue("(yO)", "content-length", len) : NULL;
      Py_XDECREF(len);
      if (pair == NULL)
        return NULL;
      if (c->headers == NULL || !PyList_Check(c->headers)) {
        PyObject *l =
            c->headers != NULL ? PySequence_List(c->headers) : PyList_New(0);
        if (l == NULL) {
          Py_DECREF(pair);
          return NULL;
        }
        Py_XSETREF(c->headers, l);
      } else {
        /* The app's own list: not changed behind its back. */
        PyObject *l = PySequence_List(c->headers);
        if (l == NULL) {
          Py_DECREF(pair);
          return NULL;
        }
        Py_SETREF(c->headers, l);
      }
      if (PyList_Append(c->headers, pair) < 0) {
        Py_DECREF(pair);
        return NULL;
      }
      Py_DECREF(pair);
    }
    if (send_head(c, NULL, 1) < 0)
      return NULL;
  }
  if (count > 0 && !(c->flags & C_HEAD)) {
    long page = sysconf(_SC_PAGESIZE);
    int64_t base = offset - offset % page;
    size_t maplen = (size_t)(count + (offset - base));
    void *p;
    file_piece *f;
    int rc;
    if (c->declared >= 0 && c->written + count > c->declared) {
      PyErr_SetString(PyExc_RuntimeError,
                      "response body longer than its Content-Length");
      return NULL;
    }
    p = mmap(NULL, maplen, PROT_READ, MAP_SHARED, fd, (off_t)base);
    if (p == MAP_FAILED) {
      PyErr_SetFromErrno(PyExc_OSError);
      return NULL;
    }
    madvise(p, maplen, MADV_SEQUENTIAL);
    f = PyMem_Malloc(sizeof(*f));
    if (f == NULL) {
      munmap(p, maplen);
      return PyErr_NoMemory();
    }
    f->base = p;
    f->len = maplen;
    f->c = c;
    f->waiter = NULL;
    if (wait && (f->waiter = new_future(c)) == NULL) {
      munmap(p, maplen);
      PyMem_Free(f);
      return NULL;
    }
    rc = tern_response_write_ref(c->r, (const char *)p + (offset - base),
                                 (size_t)count, file_written, f);
    want_pump(c->server);
    if (rc != 0) {
      munmap(p, maplen);
      Py_XDECREF(f->waiter);
      PyMem_Free(f);
      if (rc == TERN_ECLOSED) {
        client_gone(c);
      } else {
        error_from(rc, "tern_response_write_ref");
      }
      return NULL;
    }
    Py_INCREF(c);
    c->maps++;
    c->written += count;
    if (f->waiter != NULL)
      out = Py_NewRef(f->waiter);
  }
  if (!more && !(c->flags & C_FINISHED) && end_response(c, NULL) < 0) {
    Py_XDECREF(out);
    return NULL;
  }
  if (out == NULL)
    out = Py_NewRef(ready_none);
  return out;
}

static PyObject *http_send(ConnObject *c, PyObject *msg) {
  PyObject *type;
  if ((type = message_type(msg)) == NULL)
    return NULL;
  if (str_eq(type, s_http_response_body)) {
    PyObject *body;
    int more;
    if (!(c->flags & C_STARTED)) {
      PyErr_SetString(PyExc_RuntimeError,
                      "http.response.body before http.response.start");
      return NULL;
    }
    if (c->flags & C_FINISHED) {
      if (c->flags & C_GONE)
        return client_gone(c);
      PyErr_SetString(PyExc_RuntimeError, "the response is complete already");
      return NULL;
    }
    if ((body = get_bytes(msg, s_body)) == NULL)
      return NULL;
    if ((more = get_flag(msg, s_more_body)) < 0)
      return NULL;
    if (c->flags & C_GONE)
      return client_gone(c);
    if (!(c->flags & C_HEAD_SENT)) {
      if (send_head(c, body, more) < 0)
        return NULL;
      if (c->flags & C_FINISHED) {
        Py_INCREF(ready_none);
        return ready_none;
      }
    }
    {
      PyObject *rc = write_piece(c, body);
      if (rc == NULL)
        return NULL;
      if (!more && !(c->flags & C_TRAILERS) && end_response(c, NULL) < 0) {
        Py_DECREF(rc);
        return NULL;
      }
      return rc;
    }
  }
  if (str_eq(type, s_http_response_start)) {
    PyObject *status, *headers;
    long st;
    int tr;
    if (c->flags & C_STARTED) {
      PyErr_SetString(PyExc_RuntimeError, "http.response.start sent twice");
      return NULL;
    }
    status = PyDict_GetItemWithError(msg, s_status);
    if (status == NULL || !PyLong_Check(status)) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "'status' must be an int");
      return NULL;
    }
    st = PyLong_AsLong(status);
    if (st < 200 || st > 999) {
      PyErr_Format(PyExc_ValueError, "bad response status %ld", st);
      return NULL;
    }
    if ((tr = get_flag(msg, s_trailers)) < 0)
      return NULL;
    headers = PyDict_GetItemWithError(msg, s_headers);
    if (headers == NULL && PyErr_Occurred())
      return NULL;
    if (c->flags & C_GONE)
      return client_gone(c);
    c->status = (int)st;
    c->flags |= C_STARTED | (tr ? C_TRAILERS : 0);
    Py_XINCREF(headers);
    Py_XSETREF(c->headers, headers);
    Py_INCREF(ready_none);
    return ready_none;
  }
  if (str_eq(type, s_http_response_trailers)) {
    PyObject *headers;
    int more;
    if (!(c->flags & C_TRAILERS) || !(c->flags & C_STARTED) ||
        (c->flags & C_FINISHED)) {
      PyErr_SetString(PyExc_RuntimeError,
                      "http.response.trailers without trailers: True in "
                      "the start, or after the end");
      return NULL;
    }
    if ((more = get_flag(msg, s_more_trailers)) < 0)
      return NULL;
    headers = PyDict_GetItemWithError(msg, s_headers);
    if (headers == NULL && PyErr_Occurred())
      return NULL;
    if (!(c->flags & C_HEAD_SENT) && send_head(c, NULL, 1) < 0)
      return NULL;
    /* Gathered until the last message: tern sends the trailer section
     * once, at the end. */
    if (c->wsgi_headers == NULL && (c->wsgi_headers = PyList_New(0)) == NULL)
      return NULL;
    if (headers != NULL && headers != Py_None) {
      PyObject *it = PyObject_GetIter(headers), *item;
      if (it == NULL)
        return NULL;
      while ((item = PyIter_Next(it)) != NULL) {
        int bad = PyList_Append(c->wsgi_headers, item);
        Py_DECREF(item);
        if (bad < 0)
          break;
      }
      Py_DECREF(it);
      if (PyErr_Occurred())
        return NULL;
    }
    if (more) {
      Py_INCREF(ready_none);
      return ready_none;
    }
    if (end_response(c, c->wsgi_headers) < 0)
      return NULL;
    Py_INCREF(ready_none);
    return ready_none;
  }
  if (str_eq(type, s_http_response_pathsend) ||
      str_eq(type, s_http_response_zerocopysend)) {
    int fd, own = 0, more = 0;
    int64_t offset = 0, count = -1;
    PyObject *rc;
    if (!(c->flags & C_STARTED) || (c->flags & C_FINISHED)) {
      PyErr_SetString(PyExc_RuntimeError, "file body outside a response");
      return NULL;
    }
    if (str_eq(type, s_http_response_pathsend)) {
      PyObject *path = PyDict_GetItemWithError(msg, s_path), *enc;
      if (path == NULL) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_KeyError, "pathsend without 'path'");
        return NULL;
      }
      if (!PyUnicode_FSConverter(path, &enc))
        return NULL;
      fd = open(PyBytes_AS_STRING(enc), O_RDONLY | O_CLOEXEC);
      Py_DECREF(enc);
      if (fd < 0)
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
      own = 1;
    } else {
      PyObject *f = PyDict_GetItemWithError(msg, s_file), *v;
      if (f == NULL) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_KeyError, "zerocopysend without 'file'");
        return NULL;
      }
      fd = PyObject_AsFileDescriptor(f);
      if (fd < 0)
        return NULL;
      if ((v = PyDict_GetItemWithError(msg, s_offset)) != NULL && v != Py_None)
        offset = PyLong_AsLongLong(v);
      else
        offset = (int64_t)lseek(fd, 0, SEEK_CUR);
      if (offset < 0)
        offset = 0;
      if ((v = PyDict_GetItemWithError(msg, s_count)) != NULL && v != Py_None)
        count = PyLong_AsLongLong(v);
      if (PyErr_Occurred())
        return NULL;
      if ((more = get_flag(msg, s_more_body)) < 0)
        return NULL;
    }
    rc = send_file(c, fd, offset, count, more, 1);
    if (own)
      close(fd); /* the mapping keeps the pages */
    return rc;
  }
  if (str_eq(type, s_http_response_early_hint)) {
    PyObject *links = PyDict_GetItemWithError(msg, s_links), *fast;
    tern_header *h;
    Py_ssize_t n, i;
    int rc;
    if (links == NULL) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_KeyError, "early_hint without 'links'");
      return NULL;
    }
    if (c->flags & (C_HEAD_SENT | C_FINISHED)) {
      Py_INCREF(ready_none); /* too late for a hint: dropped */
      return ready_none;
    }
    fast = PySequence_Fast(links, "links must be a list of bytes");
    if (fast == NULL)
      return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    h = PyMem_Malloc(sizeof(*h) * (size_t)(n ? n : 1));
    if (h == NULL) {
      Py_DECREF(fast);
      return PyErr_NoMemory();
    }
    for (i = 0; i < n; i++) {
      PyObject *v = PySequence_Fast_GET_ITEM(fast, i);
      if (!PyBytes_Check(v)) {
        PyMem_Free(h);
        Py_DECREF(fast);
        PyErr_SetString(PyExc_TypeError, "a link must be bytes");
        return NULL;
      }
      h[i].name = "link";
      h[i].name_len = 4;
      h[i].value = PyBytes_AS_STRING(v);
      h[i].value_len = (size_t)PyBytes_GET_SIZE(v);
    }
    rc = n > 0 ? tern_respond_interim(c->r, 103, h, (size_t)n) : 0;
    PyMem_Free(h);
    Py_DECREF(fast);
    want_pump(c->server);
    if (rc != 0 && rc != TERN_ECLOSED) {
      error_from(rc, "early hint");
      return NULL;
    }
    Py_INCREF(ready_none);
    return ready_none;
  }
  PyErr_Format(PyExc_RuntimeError, "unexpected ASGI message '%S' for http",
               type);
  return NULL;
}

/* ---- WebSocket -------------------------------------------------------- */

static void ws_on_message(tern_ws *ws, int type, const char *data, size_t len,
                          int fin, void *user) {
  ConnObject *c = user;
  PyObject *m, *payload;
  (void)ws;
  (void)fin;
  if (type == TERN_WS_TEXT)
    payload = PyUnicode_DecodeUTF8(data, (Py_ssize_t)len, "strict");
  else
    payload = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
  if (payload == NULL) {
    report(c->server, "websocket");
    return;
  }
  m = PyDict_New();
  if (m == NULL || PyDict_SetItem(m, s_type, s_ws_receive) < 0 ||
      PyDict_SetItem(m, type == TERN_WS_TEXT ? s_text : s_bytes, payload) < 0) {
    Py_XDECREF(m);
    Py_DECREF(payload);
    report(c->server, "websocket");
    return;
  }
  Py_DECREF(payload);
  if (c->recv_waiter != NULL &&
      (c->queue == NULL || PyList_GET_SIZE(c->queue) == c->qpos)) {
    if (wake(&c->recv_waiter, m) != 0) {
      Py_DECREF(m);
      if (PyErr_Occurred())
        report(c->server, "websocket");
      return;
    }
  }
  if (c->queue == NULL && (c->queue = PyList_New(0)) == NULL) {
    Py_DECREF(m);
    report(c->server, "websocket");
    return;
  }
  PyList_Append(c->queue, m);
  Py_DECREF(m);
  c->queued += len + 64;
  if (c->queued >= RECV_HIGH && !(c->flags & C_PAUSED) && c->ws != NULL) {
    c->flags |= C_PAUSED;
    tern_ws_pause(c->ws);
  }
}

static void ws_on_close(tern_ws *ws, int code, const char *reason, size_t len,
                        void *user) {
  ConnObject *c = user;
  (void)ws;
  c->flags |= C_WS_CLOSED | C_GONE;
  c->close_code = code;
  Py_XSETREF(c->close_reason,
             PyUnicode_DecodeUTF8(reason, (Py_ssize_t)len, "replace"));
  if (c->close_reason == NULL)
    PyErr_Clear();
  c->ws = NULL;
  if (c->queue == NULL || PyList_GET_SIZE(c->queue) == c->qpos)
    wake_all_gone(c);
  else if (c->send_waiter != NULL)
    wake(&c->send_waiter, Py_None);
  if (PyErr_Occurred())
    report(c->server, "websocket");
  Py_INCREF(c);
  conn_maybe_release(c);
  Py_DECREF(c);
}

static void ws_on_drain(tern_ws *ws, void *user) {
  ConnObject *c = user;
  (void)ws;
  if (c->send_waiter != NULL)
    wake(&c->send_waiter, Py_None);
  if (PyErr_Occurred())
    report(c->server, "websocket");
}

static PyObject *ws_receive(ConnObject *c) {
  if (!(c->flags & C_CONNECT_TAKEN)) {
    c->flags |= C_CONNECT_TAKEN;
    return ready_new(Py_BuildValue("{s:O}", "type", s_ws_connect));
  }
  if (c->queue != NULL && PyList_GET_SIZE(c->queue) > c->qpos) {
    /* The list's reference to the message becomes the Ready's; the
     * slot holds None until the list is emptied below. */
    PyObject *m = PyList_GET_ITEM(c->queue, c->qpos);
    PyList_SET_ITEM(c->queue, c->qpos, Py_NewRef(Py_None));
    c->qpos++;
    if (c->qpos == PyList_GET_SIZE(c->queue)) {
      PyList_SetSlice(c->queue, 0, PyList_GET_SIZE(c->queue), NULL);
      c->qpos = 0;
      c->queued = 0;
      if ((c->flags & C_PAUSED) && c->ws != NULL) {
        c->flags &= ~(unsigned)C_PAUSED;
        tern_ws_resume(c->ws);
        want_pump(c->server);
      }
    }
    return ready_new(m);
  }
  if ((c->flags & C_WS_CLOSED) ||
      (!(c->flags & C_WS_OPEN) && (c->flags & (C_GONE | C_FINISHED))))
    return ready_new(disconnect_message(c));
  return wait_message(c);
}

/* Response fields the application gave websocket.accept: added to the
 * handshake's answer by the response hook (tern_ws_accept takes none). */
static void response_hook(const tern_request *r, int status,
                          tern_response_head *head, void *user) {
  ConnObject *c = tern_request_data(r);
  Py_ssize_t i, n;
  (void)status;
  (void)user;
  if (c == NULL || !(c->flags & C_ACCEPTING) || c->headers == NULL ||
      !PyList_Check(c->headers))
    return;
  n = PyList_GET_SIZE(c->headers);
  for (i = 0; i < n; i++) {
    PyObject *p = PyList_GET_ITEM(c->headers, i);
    PyObject *name = PySequence_GetItem(p, 0),
             *value = PySequence_GetItem(p, 1);
    if (name != NULL && value != NULL && PyBytes_Check(name) &&
        PyBytes_Check(value))
      tern_response_head_add(
          head, PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name),
          PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
    Py_XDECREF(name);
    Py_XDECREF(value);
  }
  PyErr_Clear();
}

static PyObject *ws_send(ConnObject *c, PyObject *msg) {
  PyObject *type;
  int rc;
  if ((type = message_type(msg)) == NULL)
    return NULL;
  if (str_eq(type, s_ws_send)) {
    PyObject *text = PyDict_GetItemWithError(msg, s_text);
    PyObject *bytes = PyDict_GetItemWithError(msg, s_bytes);
    const char *data;
    Py_ssize_t len;
    int kind;
    if (PyErr_Occurred())
      return NULL;
    if (!(c->flags & C_WS_OPEN)) {
      PyErr_SetString(PyExc_RuntimeError,
                      "websocket.send before websocket.accept");
      return NULL;
    }
    if (c->ws == NULL || (c->flags & (C_WS_CLOSED | C_GONE))) {
      PyErr_SetString(PyExc_OSError, "the websocket is closed");
      return NULL;
    }
    if (bytes != NULL && bytes != Py_None) {
      if (!PyBytes_Check(bytes)) {
        PyErr_SetString(PyExc_TypeError, "'bytes' must be bytes");
        return NULL;
      }
      data = PyBytes_AS_STRING(bytes);
      len = PyBytes_GET_SIZE(bytes);
      kind = TERN_WS_BINARY;
    } else if (text != NULL && text != Py_None) {
      if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "'text' must be str");
        return NULL;
      }
      data = PyUnicode_AsUTF8AndSize(text, &len);
      if (data == NULL)
        return NULL;
      kind = TERN_WS_TEXT;
    } else {
      PyErr_SetString(PyExc_ValueError,
                      "websocket.send needs 'bytes' or 'text'");
      return NULL;
    }
    rc = tern_ws_send(c->ws, kind, data, (size_t)len);
    want_pump(c->server);
    if (rc == TERN_ECLOSED) {
      PyErr_SetString(PyExc_OSError, "the websocket is closed");
      return NULL;
    }
    if (rc != 0) {
      error_from(rc, "tern_ws_send");
      return NULL;
    }
    if (tern_ws_buffered(c->ws) > SEND_HIGH * 4) {
      if (c->send_waiter == NULL && (c->send_waiter = new_future(c)) == NULL)
        return NULL;
      Py_INCREF(c->send_waiter);
      return c->send_waiter;
    }
    Py_INCREF(ready_none);
    return ready_none;
  }
  if (str_eq(type, s_ws_accept)) {
    tern_ws_options o;
    PyObject *sub = PyDict_GetItemWithError(msg, s_subprotocol);
    PyObject *headers = PyDict_GetItemWithError(msg, s_headers);
    const char *sp = NULL;
    Py_ssize_t splen = 0;
    if (PyErr_Occurred())
      return NULL;
    if (c->flags & (C_WS_OPEN | C_HEAD_SENT | C_FINISHED)) {
      if (c->flags & C_GONE)
        return client_gone(c);
      PyErr_SetString(PyExc_RuntimeError, "websocket.accept after the answer");
      return NULL;
    }
    if (c->r == NULL || (c->flags & C_GONE))
      return client_gone(c);
    tern_ws_options_init(&o);
    o.on_message = ws_on_message;
    o.on_close = ws_on_close;
    o.on_drain = ws_on_drain;
    if (sub != NULL && sub != Py_None) {
      if (!PyUnicode_Check(sub)) {
        PyErr_SetString(PyExc_TypeError, "subprotocol must be str");
        return NULL;
      }
      sp = PyUnicode_AsUTF8AndSize(sub, &splen);
      if (sp == NULL)
        return NULL;
      o.subprotocol = sp;
      o.subprotocol_len = (size_t)splen;
    }
    if (headers != NULL && headers != Py_None) {
      PyObject *l = PySequence_List(headers);
      if (l == NULL)
        return NULL;
      Py_XSETREF(c->headers, l);
    }
    c->flags |= C_ACCEPTING;
    rc = tern_ws_accept(c->r, &o, c, &c->ws);
    c->flags &= ~(unsigned)C_ACCEPTING;
    Py_CLEAR(c->headers);
    want_pump(c->server);
    c->r = NULL;
    c->flags |= C_HEAD_SENT | C_FINISHED;
    if (rc != 0) {
      c->ws = NULL;
      c->flags |= C_GONE | C_WS_CLOSED;
      c->close_code = 1006;
      if (rc == TERN_EHANDSHAKE || rc == TERN_ECLOSED) {
        PyErr_SetString(PyExc_OSError, "the websocket handshake failed");
        return NULL;
      }
      {
        error_from(rc, "tern_ws_accept");
        return NULL;
      }
    }
    c->flags |= C_WS_OPEN;
    Py_INCREF(ready_none);
    return ready_none;
  }
  if (str_eq(type, s_ws_close)) {
    PyObject *code = PyDict_GetItemWithError(msg, s_code);
    PyObject *reason = PyDict_GetItemWithError(msg, s_reason);
    long cd = 1000;
    const char *rs = "";
    Py_ssize_t rl = 0;
    if (PyErr_Occurred())
      return NULL;
    if (code != NULL && code != Py_None && (cd = PyLong_AsLong(code)) == -1 &&
        PyErr_Occurred())
      return NULL;
    if (reason != NULL && reason != Py_None) {
      rs = PyUnicode_AsUTF8AndSize(reason, &rl);
      if (rs == NULL)
        return NULL;
    }
    if (!(c->flags & C_WS_OPEN)) {
      /* Before accept: the handshake is refused with 403. */
      if (c->flags & C_FINISHED) {
        PyErr_SetString(PyExc_OSError, "the websocket is closed");
        return NULL;
      }
      rc = tern_respond(c->r, 403, NULL, 0, NULL, 0);
      c->flags |= C_HEAD_SENT | C_WS_CLOSED;
      c->close_code = (int)cd;
      finished(c);
      Py_INCREF(ready_none);
      return ready_none;
    }
    if (c->ws == NULL) {
      PyErr_SetString(PyExc_OSError, "the websocket is closed");
      return NULL;
    }
    rc = tern_ws_close(c->ws, (int)cd, rs, (size_t)rl);
    want_pump(c->server);
    if (rc == TERN_EINVAL) {
      PyErr_Format(PyExc_ValueError, "bad close code %ld", cd);
      return NULL;
    }
    Py_INCREF(ready_none);
    return ready_none;
  }
  if (str_eq(type, s_ws_http_response_start) ||
      str_eq(type, s_http_response_body_ws)) {
    /* Denial response (the websocket.http.response extension): an
     * ordinary HTTP answer to the handshake. */
    PyObject *m2 = PyDict_Copy(msg), *rc2;
    if (m2 == NULL)
      return NULL;
    if (c->flags & C_WS_OPEN) {
      Py_DECREF(m2);
      PyErr_SetString(PyExc_RuntimeError,
                      "a denial response after websocket.accept");
      return NULL;
    }
    PyDict_SetItem(m2, s_type,
                   str_eq(type, s_ws_http_response_start)
                       ? s_http_response_start
                       : s_http_response_body);
    rc2 = http_send(c, m2);
    Py_DECREF(m2);
    if (c->flags & C_FINISHED)
      c->flags |= C_WS_CLOSED;
    return rc2;
  }
  PyErr_Format(PyExc_RuntimeError, "unexpected ASGI message '%S' for websocket",
               type);
  return NULL;
}

/* receive() and send() belong to the event loop's thread: from another
 * one they would touch the loop and tern's worker unsynchronised. */
static int wrong_thread(ConnObject *c) {
  if (PyThread_get_thread_ident() == c->server->thread)
    return 0;
  PyErr_SetString(PyExc_RuntimeError,
                  "ASGI receive()/send() called from a thread other than "
                  "the event loop's (use asyncio.run_coroutine_threadsafe)");
  return 1;
}

static PyObject *Conn_receive(ConnObject *c, PyObject *unused) {
  (void)unused;
  if (wrong_thread(c))
    return NULL;
  if (c->flags & C_WS)
    return ws_receive(c);
  return http_receive(c);
}

static PyObject *Conn_send(ConnObject *c, PyObject *msg) {
  if (wrong_thread(c))
    return NULL;
  if (c->flags & C_WS)
    return ws_send(c, msg);
  return http_send(c, msg);
}

/* The application's coroutine ended: a response it did not finish is
 * finished here (500 when nothing was sent, cut short otherwise). `exc`
 * (borrowed) is what it raised, if anything. */
static void app_ended(ConnObject *c, PyObject *exc, int cancelled) {
  ServerObject *s = c->server;
  if (exc != NULL && s->on_error != NULL) {
    PyObject *rc = PyObject_CallFunction(s->on_error, "sO", "application", exc);
    if (rc == NULL)
      PyErr_WriteUnraisable(s->on_error);
    Py_XDECREF(rc);
  }
  if (c->ws != NULL) {
    /* The application returned with the socket open: close it. */
    tern_ws_close(c->ws, exc != NULL ? 1011 : 1000, NULL, 0);
    want_pump(s);
  }
  if (!(c->flags & C_FINISHED) && c->r != NULL) {
    if (!(c->flags & C_HEAD_SENT) && (c->flags & C_STARTED) && exc == NULL &&
        !cancelled && !(c->flags & C_WS)) {
      /* Started, no body message: an empty body. */
      if (send_head(c, NULL, 0) < 0)
        report(s, "application");
    }
    if (!(c->flags & C_FINISHED) && c->r != NULL) {
      if (c->flags & C_HEAD_SENT)
        /* A response that never ended: the client must not take it for
         * whole. */
        tern_response_abort(c->r);
      else if (c->flags & C_WS)
        /* Never accepted: the handshake is refused. */
        tern_respond(c->r, exc != NULL ? 500 : 403, NULL, 0, NULL, 0);
      else
        answer_500(c);
      finished(c);
    }
  }
  conn_maybe_release(c);
}

static PyMethodDef receive_def = {"receive", (PyCFunction)Conn_receive,
                                  METH_NOARGS, "ASGI receive()."};
static PyMethodDef send_def = {"send", (PyCFunction)Conn_send, METH_O,
                               "ASGI send(message)."};

static PyMethodDef Conn_methods[] = {
    {"receive", (PyCFunction)Conn_receive, METH_NOARGS,
     "ASGI receive(): an awaitable of the next message."},
    {"send", (PyCFunction)Conn_send, METH_O,
     "ASGI send(message): an awaitable."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ConnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._native.Conn",
    .tp_basicsize = sizeof(ConnObject),
    .tp_dealloc = (destructor)Conn_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Conn_traverse,
    .tp_clear = (inquiry)Conn_clear,
    .tp_methods = Conn_methods,
    .tp_doc = "One request or WebSocket of the application.",
};

/* ---- Runner: the application's coroutine, as its task sees it -------- */

/* The task steps the Runner, the Runner steps the application: when the
 * application returns or raises, the Runner finishes the request on the
 * spot, so no done callback, no set of tasks and no lookup of the task's
 * result are needed per request. An exception is reported (logged) and
 * not passed on: nobody awaits the task. Cancellation is passed on. */
typedef struct {
  PyObject_HEAD PyObject *it; /* the coroutine (or its __await__ iterator) */
  ConnObject *conn;           /* until the end */
} RunnerObject;

static PyTypeObject RunnerType;
static PyObject *cancelled_error, *task_type, *task_kwnames, *s_task_name,
    *bytes_io;

static void Runner_dealloc(RunnerObject *r) {
  PyObject_GC_UnTrack(r);
  Py_CLEAR(r->it);
  Py_CLEAR(r->conn);
  Py_TYPE(r)->tp_free((PyObject *)r);
}

static int Runner_traverse(RunnerObject *r, visitproc visit, void *arg) {
  Py_VISIT(r->it);
  Py_VISIT(r->conn);
  return 0;
}

static void runner_end(RunnerObject *r, PyObject *exc, int cancelled) {
  ConnObject *c = r->conn;
  if (c == NULL)
    return;
  r->conn = NULL;
  app_ended(c, exc, cancelled);
  Py_DECREF(c);
}

/* After a step: a value yielded goes to the task; the end finishes. */
static PyObject *runner_after(RunnerObject *r, PySendResult res,
                              PyObject *out) {
  PyObject *type, *value, *tb;
  int cancelled;
  if (res == PYGEN_NEXT)
    return out;
  if (res == PYGEN_RETURN) {
    Py_DECREF(out);
    runner_end(r, NULL, 0);
    PyErr_SetNone(PyExc_StopIteration);
    return NULL;
  }
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL && value != NULL)
    PyException_SetTraceback(value, tb);
  cancelled = cancelled_error != NULL && value != NULL &&
              PyErr_GivenExceptionMatches(value, cancelled_error);
  runner_end(r, cancelled ? NULL : value, cancelled);
  if (cancelled) {
    PyErr_Restore(type, value, tb);
    return NULL;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  if (PyErr_Occurred())
    report(NULL, "application");
  PyErr_SetNone(PyExc_StopIteration);
  return NULL;
}

static PyObject *Runner_send(RunnerObject *r, PyObject *value) {
  PyObject *out = NULL;
  PySendResult res;
  if (r->it == NULL) {
    PyErr_SetNone(PyExc_StopIteration);
    return NULL;
  }
  res = PyIter_Send(r->it, value, &out);
  return runner_after(r, res, out);
}

static PyObject *Runner_next(RunnerObject *r) {
  return Runner_send(r, Py_None);
}

static PySendResult Runner_am_send(PyObject *self, PyObject *arg,
                                   PyObject **result) {
  RunnerObject *r = (RunnerObject *)self;
  PyObject *out = Runner_send(r, arg);
  if (out != NULL) {
    *result = out;
    return PYGEN_NEXT;
  }
  if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
    PyErr_Clear();
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
  }
  *result = NULL;
  return PYGEN_ERROR;
}

static PyObject *Runner_throw(RunnerObject *r, PyObject *args) {
  PyObject *meth, *out, *type, *value, *tb;
  if (r->it == NULL) {
    PyErr_SetNone(PyExc_StopIteration);
    return NULL;
  }
  meth = PyObject_GetAttrString(r->it, "throw");
  if (meth == NULL)
    return runner_after(r, PYGEN_ERROR, NULL);
  out = PyObject_Call(meth, args, NULL);
  Py_DECREF(meth);
  if (out != NULL)
    return runner_after(r, PYGEN_NEXT, out);
  if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
    PyErr_Fetch(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return runner_after(r, PYGEN_RETURN, Py_NewRef(Py_None));
  }
  return runner_after(r, PYGEN_ERROR, NULL);
}

static PyObject *Runner_close(RunnerObject *r, PyObject *unused) {
  PyObject *rc = NULL;
  (void)unused;
  if (r->it != NULL && PyObject_HasAttrString(r->it, "close"))
    rc = PyObject_CallMethod(r->it, "close", NULL);
  else
    rc = Py_NewRef(Py_None);
  runner_end(r, NULL, 1);
  return rc;
}

static PyObject *Runner_await(PyObject *self) {
  return Py_NewRef(self);
}

static PyMethodDef Runner_methods[] = {
    {"send", (PyCFunction)Runner_send, METH_O, "Step the application."},
    {"throw", (PyCFunction)Runner_throw, METH_VARARGS,
     "Throw into the application."},
    {"close", (PyCFunction)Runner_close, METH_NOARGS,
     "Close the application's coroutine."},
    {"__await__", (PyCFunction)(void (*)(void))Runner_await, METH_NOARGS,
     "Itself."},
    {NULL, NULL, 0, NULL},
};

static PyAsyncMethods Runner_async = {
    .am_await = Runner_await,
    .am_send = Runner_am_send,
};

static PyTypeObject RunnerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._native.Runner",
    .tp_basicsize = sizeof(RunnerObject),
    .tp_dealloc = (destructor)Runner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Runner_traverse,
    .tp_as_async = &Runner_async,
    .tp_iter = Runner_await,
    .tp_iternext = (iternextfunc)Runner_next,
    .tp_methods = Runner_methods,
    .tp_doc = "The application's coroutine under its task.",
};

static PyObject *runner_new(ConnObject *c, PyObject *coro) {
  RunnerObject *r;
  PyObject *it;
  if (PyCoro_CheckExact(coro) || PyGen_CheckExact(coro)) {
    it = Py_NewRef(coro);
  } else {
    /* Any other awaitable: its __await__ iterator. */
    it = PyObject_CallMethod(coro, "__await__", NULL);
    if (it == NULL)
      return NULL;
  }
  r = PyObject_GC_New(RunnerObject, &RunnerType);
  if (r == NULL) {
    Py_DECREF(it);
    return NULL;
  }
  r->it = it;
  r->conn = (ConnObject *)Py_NewRef((PyObject *)c);
  PyObject_GC_Track(r);
  return (PyObject *)r;
}

/* ---- The scope ---------------------------------------------------------- */

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

/* The path, percent-decoded, as str (UTF-8, undecodable bytes kept as
 * surrogates as WSGI and uvicorn do). */
static PyObject *decode_path(const char *p, size_t n) {
  char *buf;
  size_t i, k = 0;
  PyObject *out;
  if (memchr(p, '%', n) == NULL)
    return PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "surrogateescape");
  buf = PyMem_Malloc(n + 1);
  if (buf == NULL)
    return PyErr_NoMemory();
  for (i = 0; i < n; i++) {
    int a, b;
    if (p[i] == '%' && i + 2 < n && (a = hexval(p[i + 1])) >= 0 &&
        (b = hexval(p[i + 2])) >= 0) {
      buf[k++] = (char)(a * 16 + b);
      i += 2;
    } else {
      buf[k++] = p[i];
    }
  }
  out = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)k, "surrogateescape");
  PyMem_Free(buf);
  return out;
}

static PyObject *addr_tuple(const char *text, int port) {
  PyObject *t = PyTuple_New(2), *a, *p;
  if (t == NULL)
    return NULL;
  a = PyUnicode_DecodeASCII(text, (Py_ssize_t)strlen(text), NULL);
  p = PyLong_FromLong(port);
  if (a == NULL || p == NULL) {
    Py_XDECREF(a);
    Py_XDECREF(p);
    Py_DECREF(t);
    return NULL;
  }
  PyTuple_SET_ITEM(t, 0, a);
  PyTuple_SET_ITEM(t, 1, p);
  return t;
}

/* scope["client"] (peer) or scope["server"]: (host, port), or None for a
 * Unix socket. The server's is the same for most requests: the last one
 * is kept (a tuple is immutable, so one object serves them all). */
static PyObject *address(ServerObject *s, const tern_request *r, int peer) {
  char buf[64];
  int port = 0;
  int rc = peer ? tern_request_peer(r, buf, sizeof(buf), &port)
                : tern_request_local(r, buf, sizeof(buf), &port);
  if (rc != 0) {
    Py_RETURN_NONE;
  }
  if (peer)
    return addr_tuple(buf, port);
  if (s->local != NULL && s->local_port == port &&
      strcmp(s->local_text, buf) == 0)
    return Py_NewRef(s->local);
  Py_XSETREF(s->local, addr_tuple(buf, port));
  if (s->local == NULL)
    return NULL;
  s->local_port = port;
  memcpy(s->local_text, buf, sizeof(buf));
  return Py_NewRef(s->local);
}

static int lower_name(const tern_header *h, PyObject **out) {
  char *b;
  size_t i;
  *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)h->name_len);
  if (*out == NULL)
    return -1;
  b = PyBytes_AS_STRING(*out);
  for (i = 0; i < h->name_len; i++) {
    char ch = h->name[i];
    b[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
  }
  return 0;
}

/* X-Forwarded-For / X-Forwarded-Proto from a trusted proxy
 * (--proxy-headers): the client address and scheme they name. */
static int apply_forwarded(ServerObject *s, const tern_request *r,
                           PyObject **client, PyObject **scheme, int ws) {
  const char *v;
  size_t len;
  PyObject *host;
  int trusted;
  if (s->forwarded == NULL)
    return 0;
  if (*client == Py_None)
    trusted = 1; /* a Unix socket's clients are the proxy */
  else if (s->trust_all)
    trusted = 1;
  else {
    host = PyTuple_GET_ITEM(*client, 0);
    trusted = PySet_Contains(s->forwarded, host) == 1;
  }
  if (!trusted)
    return 0;
  v = tern_request_header(r, "x-forwarded-proto", 17, &len);
  if (v != NULL) {
    int https = (len == 5 && strncasecmp(v, "https", 5) == 0) ||
                (len == 3 && strncasecmp(v, "wss", 3) == 0);
    int http = (len == 4 && strncasecmp(v, "http", 4) == 0) ||
               (len == 2 && strncasecmp(v, "ws", 2) == 0);
    if (https || http) {
      PyObject *sc =
          ws ? (https ? v_wss_s : v_ws_s) : (https ? v_https_s : v_http);
      Py_INCREF(sc);
      Py_SETREF(*scheme, sc);
    }
  }
  v = tern_request_header(r, "x-forwarded-for", 15, &len);
  if (v != NULL) {
    /* The last address is the one the trusted proxy saw. */
    size_t start = len, end = len;
    while (end > 0 && (v[end - 1] == ' ' || v[end - 1] == '\t'))
      end--;
    start = end;
    while (start > 0 && v[start - 1] != ',')
      start--;
    while (start < end && (v[start] == ' ' || v[start] == '\t'))
      start++;
    if (end > start) {
      PyObject *c =
          Py_BuildValue("(s#i)", v + start, (Py_ssize_t)(end - start), 0);
      if (c == NULL)
        return -1;
      Py_SETREF(*client, c);
    }
  }
  return 0;
}

static PyObject *make_scope(ServerObject *s, tern_request *r, int ws) {
  PyObject *scope = _PyDict_NewPresized(16), *v = NULL, *headers = NULL,
           *client = NULL, *scheme;
  size_t i, n, plen, qlen;
  const char *path, *query, *m;
  int proto, tls;
  int has_host = 0;
  if (scope == NULL)
    return NULL;
#define SET(k, val)                                                            \
  do {                                                                         \
    v = (val);                                                                 \
    if (v == NULL || PyDict_SetItem(scope, k, v) < 0)                          \
      goto fail;                                                               \
    Py_CLEAR(v);                                                               \
  } while (0)
#define SET_BORROWED(k, val)                                                   \
  do {                                                                         \
    if (PyDict_SetItem(scope, k, val) < 0)                                     \
      goto fail;                                                               \
  } while (0)
  SET_BORROWED(k_type, ws ? v_websocket : v_http);
  SET(k_asgi, PyDict_Copy(ws ? v_asgi_ws : v_asgi_info));
  proto = tern_request_protocol(r);
  SET_BORROWED(k_http_version, proto == TERN_PROTO_HTTP10  ? v_v10
                               : proto == TERN_PROTO_HTTP2 ? v_v2
                               : proto == TERN_PROTO_HTTP3 ? v_v3
                                                           : v_v11);
  tls = tern_request_tls(r) > 0;
  scheme = ws ? (tls ? v_wss_s : v_ws_s) : (tls ? v_https_s : v_http);
  Py_INCREF(scheme);
  client = address(s, r, 1);
  if (client == NULL)
    goto fail_scheme;
  if (apply_forwarded(s, r, &client, &scheme, ws) < 0)
    goto fail_scheme;
  SET_BORROWED(k_scheme, scheme);
  Py_CLEAR(scheme);
  SET_BORROWED(k_client, client);
  Py_CLEAR(client);
  SET(k_server, address(s, r, 0));
  if (!ws) {
    m = tern_request_method(r, &n);
    SET(k_method, PyUnicode_DecodeLatin1(m, (Py_ssize_t)n, NULL));
  }
  SET_BORROWED(k_root_path, s->root_path);
  path = tern_request_path(r, &plen);
  SET(k_path, decode_path(path, plen));
  SET(k_raw_path, PyBytes_FromStringAndSize(path, (Py_ssize_t)plen));
  query = tern_request_query(r, &qlen);
  SET(k_query_string,
      PyBytes_FromStringAndSize(query != NULL ? query : "",
                                query != NULL ? (Py_ssize_t)qlen : 0));
  n = tern_request_header_count(r);
  headers = PyList_New(0);
  if (headers == NULL)
    goto fail;
  for (i = 0; i < n; i++) {
    const tern_header *h = tern_request_header_at(r, i);
    PyObject *name, *value, *pair;
    if (h == NULL)
      break;
    if (h->name_len == 4 && strncasecmp(h->name, "host", 4) == 0)
      has_host = 1;
    if (lower_name(h, &name) < 0)
      goto fail;
    value = PyBytes_FromStringAndSize(h->value, (Py_ssize_t)h->value_len);
    if (value == NULL) {
      Py_DECREF(name);
      goto fail;
    }
    pair = PyTuple_Pack(2, name, value);
    Py_DECREF(name);
    Py_DECREF(value);
    if (pair == NULL || PyList_Append(headers, pair) < 0) {
      Py_XDECREF(pair);
      goto fail;
    }
    Py_DECREF(pair);
  }
  if (!has_host) {
    /* HTTP/2 and HTTP/3 carry the host as :authority: frameworks read
     * it from a host header, as HTTP/1.1 has it. */
    size_t alen;
    const char *a = tern_request_authority(r, &alen);
    if (a != NULL && alen > 0) {
      PyObject *pair =
          Py_BuildValue("(y#y#)", "host", (Py_ssize_t)4, a, (Py_ssize_t)alen);
      if (pair == NULL || PyList_Insert(headers, 0, pair) < 0) {
        Py_XDECREF(pair);
        goto fail;
      }
      Py_DECREF(pair);
    }
  }
  SET_BORROWED(k_headers, headers);
  Py_CLEAR(headers);
  if (ws) {
    /* The subprotocols offered, each of the comma-separated lists. */
    PyObject *subs = PyList_New(0);
    if (subs == NULL)
      goto fail;
    for (i = 0; i < n; i++) {
      const tern_header *h = tern_request_header_at(r, i);
      size_t a = 0;
      if (h == NULL || h->name_len != 22 ||
          strncasecmp(h->name, "sec-websocket-protocol", 22) != 0)
        continue;
      while (a < h->value_len) {
        size_t b = a, e;
        while (b < h->value_len && h->value[b] != ',')
          b++;
        e = b;
        while (a < e && (h->value[a] == ' ' || h->value[a] == '\t'))
          a++;
        while (e > a && (h->value[e - 1] == ' ' || h->value[e - 1] == '\t'))
          e--;
        if (e > a) {
          PyObject *p =
              PyUnicode_DecodeLatin1(h->value + a, (Py_ssize_t)(e - a), NULL);
          if (p == NULL || PyList_Append(subs, p) < 0) {
            Py_XDECREF(p);
            Py_DECREF(subs);
            goto fail;
          }
          Py_DECREF(p);
        }
        a = b + 1;
      }
    }
    SET(k_subprotocols, subs);
  }
  if (s->state != NULL)
    SET(k_state, PyDict_Copy(s->state));
  {
    PyObject *ext = PyDict_New(), *e;
    if (ext == NULL)
      goto fail;
#define EXT(name)                                                              \
  e = PyDict_New();                                                            \
  if (e == NULL || PyDict_SetItem(ext, name, e) < 0) {                         \
    Py_XDECREF(e);                                                             \
    Py_DECREF(ext);                                                            \
    goto fail;                                                                 \
  }                                                                            \
  Py_DECREF(e);
    if (ws) {
      EXT(x_ws_denial)
    } else {
      EXT(x_trailers)
      EXT(x_early_hint)
      EXT(x_pathsend)
      EXT(x_zerocopysend)
    }
#undef EXT
    if (tls) {
      size_t clen = 0, cert_len = 0;
      const char *cipher = tern_request_tls_cipher(r);
      const void *cert = tern_request_tls_client_cert(r, &cert_len);
      const char *subj = tern_request_tls_client_subject(r, &clen);
      PyObject *chain = PyList_New(0), *t;
      (void)cert;
      if (chain == NULL) {
        Py_DECREF(ext);
        goto fail;
      }
      if (cert != NULL && cert_len > 0) {
        /* The client's certificate, DER, as PEM text: the spec's
         * client_cert_chain holds PEM strings. */
        PyObject *b = PyBytes_FromStringAndSize(cert, (Py_ssize_t)cert_len);
        PyObject *ssl = b != NULL ? PyImport_ImportModule("ssl") : NULL;
        PyObject *pem =
            ssl != NULL
                ? PyObject_CallMethod(ssl, "DER_cert_to_PEM_cert", "O", b)
                : NULL;
        Py_XDECREF(b);
        Py_XDECREF(ssl);
        if (pem != NULL)
          PyList_Append(chain, pem);
        else
          PyErr_Clear();
        Py_XDECREF(pem);
      }
      t = Py_BuildValue(
          "{s:s,s:N,s:N,s:i,s:N}", "server_cert", NULL, "client_cert_chain",
          chain, "client_cert_name",
          subj != NULL ? PyUnicode_DecodeUTF8(subj, (Py_ssize_t)clen, "replace")
                       : Py_NewRef(Py_None),
          "tls_version", tern_request_tls(r), "cipher_suite",
          cipher != NULL ? PyUnicode_FromString(cipher) : Py_NewRef(Py_None));
      if (t == NULL || PyDict_SetItemString(ext, "tls", t) < 0) {
        Py_XDECREF(t);
        Py_DECREF(ext);
        goto fail;
      }
      Py_DECREF(t);
    }
    SET(k_extensions, ext);
  }
#undef SET
#undef SET_BORROWED
  return scope;
fail_scheme:
  Py_XDECREF(scheme);
fail:
  Py_XDECREF(v);
  Py_XDECREF(headers);
  Py_XDECREF(client);
  Py_DECREF(scope);
  return NULL;
}

/* ---- WSGI (inline on the worker) ------------------------------------ */

static PyObject *wsgi_environ(ServerObject *s, tern_request *r, PyObject *body);
static void wsgi_run(ConnObject *c);

static void wsgi_on_body(tern_request *r, int event, const char *data,
                         size_t len, void *user) {
  ConnObject *c = user;
  (void)r;
  if (c->flags & C_FINISHED)
    return;
  if (event == TERN_BODY_DATA) {
    PyObject *b = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    if (b == NULL || (c->queue == NULL && (c->queue = PyList_New(0)) == NULL) ||
        PyList_Append(c->queue, b) < 0) {
      Py_XDECREF(b);
      report(c->server, "body");
      return;
    }
    Py_DECREF(b);
    c->queued += len;
    return;
  }
  if (event == TERN_BODY_ERROR) {
    c->flags |= C_GONE | C_BODY_ERROR;
    tern_respond(c->r, 400, NULL, 0, NULL, 0);
    finished(c);
    conn_maybe_release(c);
    return;
  }
  c->flags |= C_BODY_END;
  wsgi_run(c);
}

/* ---- The handler ------------------------------------------------------ */

/* --stats-path: tern's own counters as JSON, as the reference server's
 * /stats has them (perf/'s harness reads its allocations per request):
 * what tern allocated, not what Python did. */
static void answer_stats(ServerObject *s, tern_request *r) {
  static const tern_header ct = {"content-type", 12, "application/json", 16};
  tern_stats st;
  char body[512];
  int n;
  tern_stats_init(&st);
  tern_server_stats(s->srv, &st);
  n = snprintf(
      body, sizeof(body),
      "{\"requests\":%llu,\"connections\":%llu,"
      "\"active_connections\":%llu,\"bytes_in\":%llu,"
      "\"bytes_out\":%llu,\"allocations\":%llu,"
      "\"bytes_allocated\":%llu,\"frees\":%llu,"
      "\"reallocations\":%llu,\"ws_open\":%llu,"
      "\"app_active\":%ld}",
      (unsigned long long)st.requests, (unsigned long long)st.connections,
      (unsigned long long)st.active_connections,
      (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out,
      (unsigned long long)st.allocations,
      (unsigned long long)st.bytes_allocated, (unsigned long long)st.frees,
      (unsigned long long)st.reallocations, (unsigned long long)st.ws_open,
      s->active);
  tern_respond(r, 200, &ct, 1, body, (size_t)n);
}

static void handler(tern_request *r, void *user) {
  ServerObject *s = user;
  ConnObject *c;
  PyObject *scope = NULL, *coro = NULL, *task = NULL, *cb = NULL, *recv = NULL,
           *send = NULL;
  int ws;
  if (s->stats_path_len > 0) {
    size_t plen;
    const char *p = tern_request_path(r, &plen);
    if (plen == s->stats_path_len && memcmp(p, s->stats_path, plen) == 0) {
      answer_stats(s, r);
      return;
    }
  }
  if (s->app == NULL || (s->limit > 0 && s->active >= s->limit)) {
    tern_respond(r, 503, &text_plain, 1, "Service Unavailable", 19);
    return;
  }
  c = conn_new(s, r);
  if (c == NULL) {
    tern_respond(r, 500, NULL, 0, NULL, 0);
    report(s, "request");
    return;
  }
  c->flags |= C_HELD; /* the request's reference: c itself */
  s->active++;
  s->served++;
  tern_request_set_data(r, c);
  if (tern_request_on_gone(r, on_gone, c) == TERN_ECLOSED)
    c->flags |= C_GONE;
  {
    size_t ml;
    const char *m = tern_request_method(r, &ml);
    if (ml == 4 && memcmp(m, "HEAD", 4) == 0)
      c->flags |= C_HEAD;
  }
  if (s->iface == IFACE_WSGI) {
    if (tern_request_body_length(r) == 0) {
      c->flags |= C_BODY_END | C_READING;
      wsgi_run(c);
    } else {
      c->flags |= C_READING;
      if (tern_request_read(r, wsgi_on_body, c) != 0) {
        tern_respond(r, 400, NULL, 0, NULL, 0);
        finished(c);
        conn_maybe_release(c);
      }
    }
    return;
  }
  ws = tern_ws_is_upgrade(r);
  if (ws)
    c->flags |= C_WS;
  else if (tern_request_body_length(r) == 0) {
    /* Nothing to read: receive() answers at once. The read still starts,
     * so that tern moves past the (empty) body and watches the socket:
     * a client that leaves is seen. */
    c->flags |= C_READING | C_BODY_END;
    tern_request_read(r, on_body, c);
  }
  scope = make_scope(s, r, ws);
  if (scope == NULL)
    goto fail;
  recv = PyCFunction_NewEx(&receive_def, (PyObject *)c, NULL);
  send = PyCFunction_NewEx(&send_def, (PyObject *)c, NULL);
  if (recv == NULL || send == NULL)
    goto fail;
  {
    PyObject *argv[3] = {scope, recv, send};
    coro = PyObject_Vectorcall(s->app, argv, 3, NULL);
  }
  if (coro == NULL)
    goto fail;
  cb = runner_new(c, coro);
  if (cb == NULL)
    goto fail;
  {
    /* asyncio.Task(runner, loop=loop, name="tern"): loop.create_task
     * names each task "Task-N" through a format call, and wraps the
     * constructor in a Python-level call of its own. */
    PyObject *argv[3] = {cb, s->loop, s_task_name};
    task = PyObject_Vectorcall(task_type, argv, 1, task_kwnames);
  }
  if (task == NULL) {
    /* Never stepped: the Runner finishes nothing; the answer is ours. */
    ((RunnerObject *)cb)->conn = NULL;
    Py_DECREF(c);
    goto fail;
  }
  Py_DECREF(cb);
  Py_DECREF(task);
  Py_DECREF(coro);
  Py_DECREF(recv);
  Py_DECREF(send);
  Py_DECREF(scope);
  return;
fail:
  report(s, "application");
  Py_XDECREF(cb);
  Py_XDECREF(task);
  Py_XDECREF(coro);
  Py_XDECREF(recv);
  Py_XDECREF(send);
  Py_XDECREF(scope);
  if (!(c->flags & C_FINISHED)) {
    tern_respond(r, 500, NULL, 0, NULL, 0);
    finished(c);
  }
  conn_maybe_release(c);
}

/* ---- WSGI ----------------------------------------------------------- */

static PyObject *wsgi_environ(ServerObject *s, tern_request *r,
                              PyObject *input) {
  PyObject *env = PyDict_New(), *v = NULL;
  size_t n, i, len;
  const char *p;
  int tls = tern_request_tls(r) > 0, proto = tern_request_protocol(r);
  char buf[64];
  int port;
  if (env == NULL)
    return NULL;
#define PUT(key, val)                                                          \
  do {                                                                         \
    v = (val);                                                                 \
    if (v == NULL || PyDict_SetItemString(env, key, v) < 0)                    \
      goto fail;                                                               \
    Py_CLEAR(v);                                                               \
  } while (0)
  p = tern_request_method(r, &len);
  PUT("REQUEST_METHOD", PyUnicode_DecodeLatin1(p, (Py_ssize_t)len, NULL));
  PUT("SCRIPT_NAME", Py_NewRef(s->root_path));
  p = tern_request_path(r, &len);
  {
    /* PEP 3333: the decoded path as latin-1 "bytes in a str". */
    PyObject *d = decode_path(p, len), *b;
    if (d == NULL)
      goto fail;
    b = PyUnicode_AsEncodedString(d, "utf-8", "surrogateescape");
    Py_DECREF(d);
    if (b == NULL)
      goto fail;
    PUT("PATH_INFO", PyUnicode_DecodeLatin1(PyBytes_AS_STRING(b),
                                            PyBytes_GET_SIZE(b), NULL));
    Py_DECREF(b);
  }
  p = tern_request_query(r, &len);
  PUT("QUERY_STRING",
      PyUnicode_DecodeLatin1(p != NULL ? p : "",
                             p != NULL ? (Py_ssize_t)len : 0, NULL));
  PUT("SERVER_PROTOCOL",
      PyUnicode_FromString(proto == TERN_PROTO_HTTP10  ? "HTTP/1.0"
                           : proto == TERN_PROTO_HTTP2 ? "HTTP/2"
                           : proto == TERN_PROTO_HTTP3 ? "HTTP/3"
                                                       : "HTTP/1.1"));
  if (tern_request_local(r, buf, sizeof(buf), &port) == 0) {
    PUT("SERVER_NAME", PyUnicode_FromString(buf));
    PUT("SERVER_PORT", PyUnicode_FromFormat("%d", port));
  } else {
    PUT("SERVER_NAME", PyUnicode_FromString("localhost"));
    PUT("SERVER_PORT", PyUnicode_FromString("0"));
  }
  if (tern_request_peer(r, buf, sizeof(buf), &port) == 0) {
    PUT("REMOTE_ADDR", PyUnicode_FromString(buf));
    PUT("REMOTE_PORT", PyUnicode_FromFormat("%d", port));
  }
  n = tern_request_header_count(r);
  for (i = 0; i < n; i++) {
    const tern_header *h = tern_request_header_at(r, i);
    char key[300];
    size_t k, o = 0;
    PyObject *old;
    if (h == NULL || h->name_len > 250)
      continue;
    if (h->name_len == 12 && strncasecmp(h->name, "content-type", 12) == 0)
      o = (size_t)snprintf(key, sizeof(key), "CONTENT_TYPE");
    else if (h->name_len == 14 &&
             strncasecmp(h->name, "content-length", 14) == 0)
      o = (size_t)snprintf(key, sizeof(key), "CONTENT_LENGTH");
    else {
      memcpy(key, "HTTP_", 5);
      o = 5;
      for (k = 0; k < h->name_len; k++) {
        char ch = h->name[k];
        if (ch == '_')
          break; /* ambiguous with '-': dropped, as CGI servers do */
        key[o++] = ch == '-'                  ? '_'
                   : (ch >= 'a' && ch <= 'z') ? (char)(ch - 32)
                                              : ch;
      }
      if (k < h->name_len)
        continue;
      key[o] = 0;
    }
    v = PyUnicode_DecodeLatin1(h->value, (Py_ssize_t)h->value_len, NULL);
    if (v == NULL)
      goto fail;
    old = PyDict_GetItemString(env, key);
    if (old != NULL) {
      /* Repeated fields are joined (cookies with "; "). */
      PyObject *j = PyUnicode_FromFormat(
          strcmp(key, "HTTP_COOKIE") == 0 ? "%U; %U" : "%U, %U", old, v);
      Py_DECREF(v);
      v = j;
      if (v == NULL)
        goto fail;
    }
    if (PyDict_SetItemString(env, key, v) < 0)
      goto fail;
    Py_CLEAR(v);
  }
  if (PyDict_GetItemString(env, "HTTP_HOST") == NULL) {
    p = tern_request_authority(r, &len);
    if (p != NULL && len > 0)
      PUT("HTTP_HOST", PyUnicode_DecodeLatin1(p, (Py_ssize_t)len, NULL));
  }
  PUT("wsgi.version", Py_BuildValue("(ii)", 1, 0));
  PUT("wsgi.url_scheme", PyUnicode_FromString(tls ? "https" : "http"));
  PUT("wsgi.input", Py_NewRef(input));
  /* sys.stderr as it is now (borrowed; an app may have replaced it) */
  v = PySys_GetObject("stderr");
  if (v == NULL || PyDict_SetItemString(env, "wsgi.errors", v) < 0) {
    v = NULL;
    goto fail;
  }
  v = NULL;
  PUT("wsgi.multithread", Py_NewRef(Py_False));
  PUT("wsgi.multiprocess", Py_NewRef(Py_True));
  PUT("wsgi.run_once", Py_NewRef(Py_False));
#undef PUT
  return env;
fail:
  Py_XDECREF(v);
  Py_DECREF(env);
  return NULL;
}

/* start_response(status, headers, exc_info=None) */
static PyObject *Conn_start_response(ConnObject *c, PyObject *args) {
  PyObject *status, *headers, *exc = Py_None;
  if (!PyArg_ParseTuple(args, "UO|O", &status, &headers, &exc))
    return NULL;
  if (c->wsgi_status != NULL && exc == Py_None) {
    PyErr_SetString(PyExc_RuntimeError,
                    "start_response called twice without exc_info");
    return NULL;
  }
  if (exc != Py_None && (c->flags & C_HEAD_SENT)) {
    /* Too late to change the head: re-raise, as PEP 3333 asks. */
    PyObject *t = PySequence_GetItem(exc, 0), *v = PySequence_GetItem(exc, 1),
             *tb = PySequence_GetItem(exc, 2);
    PyErr_Restore(t, v, tb);
    return NULL;
  }
  Py_INCREF(status);
  Py_XSETREF(c->wsgi_status, status);
  Py_INCREF(headers);
  Py_XSETREF(c->wsgi_headers, headers);
  return PyObject_GetAttrString((PyObject *)c, "_write");
}

/* start_response's status and headers become the response's (c->status,
 * c->headers as bytes pairs). */
static int wsgi_take_head(ConnObject *c) {
  PyObject *out, *fast;
  Py_ssize_t i, n;
  const char *st;
  int status;
  if (c->wsgi_status == NULL) {
    PyErr_SetString(PyExc_RuntimeError,
                    "WSGI body before start_response was called");
    return -1;
  }
  st = PyUnicode_AsUTF8(c->wsgi_status);
  if (st == NULL)
    return -1;
  status = atoi(st);
  if (status < 200 || status > 999) {
    PyErr_Format(PyExc_ValueError, "bad WSGI status %R", c->wsgi_status);
    return -1;
  }
  fast = PySequence_Fast(c->wsgi_headers, "headers must be a list");
  if (fast == NULL)
    return -1;
  n = PySequence_Fast_GET_SIZE(fast);
  out = PyList_New(n);
  if (out == NULL) {
    Py_DECREF(fast);
    return -1;
  }
  for (i = 0; i < n; i++) {
    PyObject *pair = PySequence_Fast_GET_ITEM(fast, i), *name, *value, *t;
    PyObject *nb, *vb;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      PyErr_SetString(PyExc_TypeError, "a WSGI header must be a 2-tuple");
      goto fail;
    }
    name = PyTuple_GET_ITEM(pair, 0);
    value = PyTuple_GET_ITEM(pair, 1);
    if (!PyUnicode_Check(name) || !PyUnicode_Check(value)) {
      PyErr_SetString(PyExc_TypeError, "WSGI header names and values are str");
      goto fail;
    }
    nb = PyUnicode_AsLatin1String(name);
    vb = PyUnicode_AsLatin1String(value);
    if (nb == NULL || vb == NULL) {
      Py_XDECREF(nb);
      Py_XDECREF(vb);
      goto fail;
    }
    t = PyTuple_Pack(2, nb, vb);
    Py_DECREF(nb);
    Py_DECREF(vb);
    if (t == NULL)
      goto fail;
    PyList_SET_ITEM(out, i, t);
  }
  Py_DECREF(fast);
  c->status = status;
  c->flags |= C_STARTED;
  Py_XSETREF(c->headers, out);
  return 0;
fail:
  Py_DECREF(fast);
  Py_DECREF(out);
  return -1;
}

/* The write() callable start_response returns, and each item of the
 * body iterable. */
static int wsgi_write(ConnObject *c, PyObject *b, int last) {
  PyObject *rc;
  if (!PyBytes_Check(b)) {
    PyErr_SetString(PyExc_TypeError, "a WSGI body item must be bytes");
    return -1;
  }
  if (!(c->flags & C_HEAD_SENT)) {
    if (wsgi_take_head(c) < 0 || send_head(c, b, !last) < 0)
      return -1;
    if (c->flags & C_FINISHED)
      return 0;
  }
  if (c->flags & C_FINISHED)
    return 0;
  rc = write_piece(c, b);
  if (rc == NULL)
    return -1;
  Py_DECREF(rc); /* inline: no waiting; the ring keeps the bytes */
  return 0;
}

static PyObject *Conn_write(ConnObject *c, PyObject *b) {
  if (c->flags & C_GONE)
    return client_gone(c);
  if (wsgi_write(c, b, 0) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static void wsgi_run(ConnObject *c) {
  ServerObject *s = c->server;
  PyObject *input = NULL, *body, *env = NULL, *sr = NULL, *result = NULL,
           *it = NULL, *item, *next = NULL;
  int failed = 0;
  Py_INCREF(c);
  {
    if (c->queue != NULL && PyList_GET_SIZE(c->queue) > 0)
      body = _PyBytes_Join(v_empty_bytes, c->queue);
    else
      body = Py_NewRef(v_empty_bytes);
    input = body != NULL ? PyObject_CallOneArg(bytes_io, body) : NULL;
    Py_XDECREF(body);
    Py_CLEAR(c->queue);
    c->queued = 0;
    if (input == NULL)
      goto fail;
  }
  env = wsgi_environ(s, c->r, input);
  Py_CLEAR(input);
  if (env == NULL)
    goto fail;
  if (s->state != NULL) {
    PyObject *st = PyDict_Copy(s->state);
    if (st == NULL || PyDict_SetItemString(env, "tern.state", st) < 0) {
      Py_XDECREF(st);
      goto fail;
    }
    Py_DECREF(st);
  }
  if (s->file_wrapper != NULL &&
      PyDict_SetItemString(env, "wsgi.file_wrapper", s->file_wrapper) < 0)
    goto fail;
  sr = PyObject_GetAttrString((PyObject *)c, "start_response");
  if (sr == NULL)
    goto fail;
  result = PyObject_CallFunctionObjArgs(s->app, env, sr, NULL);
  if (result == NULL)
    goto fail;
  /* A file wrapper of ours (wsgi.file_wrapper): the file goes by
   * reference. */
  if (s->file_wrapper != NULL &&
      Py_TYPE(result) == (PyTypeObject *)s->file_wrapper) {
    PyObject *f = PyObject_GetAttrString(result, "filelike"), *rc;
    int fd = f != NULL ? PyObject_AsFileDescriptor(f) : -1;
    Py_XDECREF(f);
    if (fd < 0)
      goto fail;
    if (!(c->flags & C_HEAD_SENT)) {
      if (wsgi_take_head(c) < 0)
        goto fail;
      {
        /* The app's Content-Length, if any, counts. */
        tern_header *hh;
        PyObject *keep;
        int64_t length;
        if (convert_headers(c->headers, &hh, &keep, &length, NULL) < 0)
          goto fail;
        PyMem_Free(hh);
        Py_XDECREF(keep);
        if (length >= 0) {
          rc = send_file(c, fd, (int64_t)lseek(fd, 0, SEEK_CUR), length, 1, 0);
          if (rc == NULL)
            goto fail;
          Py_DECREF(rc);
          goto close;
        }
      }
    }
    rc = send_file(c, fd, (int64_t)lseek(fd, 0, SEEK_CUR), -1, 0, 0);
    if (rc == NULL)
      goto fail;
    Py_DECREF(rc);
    goto close;
  }
  if (PyList_Check(result) && PyList_GET_SIZE(result) == 1) {
    if (wsgi_write(c, PyList_GET_ITEM(result, 0), 1) < 0)
      goto fail;
  } else {
    it = PyObject_GetIter(result);
    if (it == NULL)
      goto fail;
    item = PyIter_Next(it);
    while (item != NULL) {
      next = PyIter_Next(it);
      if (next == NULL && PyErr_Occurred()) {
        Py_DECREF(item);
        goto fail;
      }
      if (wsgi_write(c, item, next == NULL) < 0) {
        Py_DECREF(item);
        Py_XDECREF(next);
        goto fail;
      }
      Py_DECREF(item);
      item = next;
    }
    if (PyErr_Occurred())
      goto fail;
  }
close:
  if (!PyList_CheckExact(result) && !PyTuple_CheckExact(result) &&
      PyObject_HasAttrString(result, "close")) {
    PyObject *rc = PyObject_CallMethod(result, "close", NULL);
    if (rc == NULL)
      report(s, "application");
    Py_XDECREF(rc);
  }
  goto finish;
fail:
  failed = 1;
  report(s, "application");
  if (result != NULL && PyObject_HasAttrString(result, "close")) {
    PyObject *rc = PyObject_CallMethod(result, "close", NULL);
    if (rc == NULL)
      report(s, "application");
    Py_XDECREF(rc);
  }
finish:
  if (!(c->flags & C_FINISHED) && c->r != NULL) {
    if (!failed && !(c->flags & C_HEAD_SENT) && c->wsgi_status != NULL &&
        wsgi_write(c, v_empty_bytes, 1) < 0) {
      failed = 1;
      report(s, "application");
    }
    if (!failed && !(c->flags & C_FINISHED) && (c->flags & C_HEAD_SENT) &&
        end_response(c, NULL) < 0) {
      failed = 1;
      report(s, "application");
    }
    if (!(c->flags & C_FINISHED) && c->r != NULL) {
      if (c->flags & C_HEAD_SENT)
        tern_response_abort(c->r);
      else
        answer_500(c);
      finished(c);
    }
  }
  Py_XDECREF(it);
  Py_XDECREF(result);
  Py_XDECREF(sr);
  Py_XDECREF(env);
  conn_maybe_release(c);
  Py_DECREF(c);
}

static PyMethodDef Conn_wsgi_methods[] = {
    {"start_response", (PyCFunction)Conn_start_response, METH_VARARGS,
     "WSGI start_response."},
    {"_write", (PyCFunction)Conn_write, METH_O, "WSGI write()."},
    {NULL, NULL, 0, NULL},
};

/* ---- The module --------------------------------------------------------- */

static int intern(PyObject **slot, const char *text) {
  *slot = PyUnicode_InternFromString(text);
  return *slot != NULL ? 0 : -1;
}

/* The file of the libtern this module runs on, so that the ctypes part
 * of the package loads the same one. */
static PyObject *library_path(PyObject *m, PyObject *unused) {
  Dl_info info;
  (void)m;
  (void)unused;
  if (dladdr((void *)(uintptr_t)tern_version, &info) == 0 ||
      info.dli_fname == NULL)
    Py_RETURN_NONE;
  return PyUnicode_DecodeFSDefault(info.dli_fname);
}

/* tern.Server's request path (tern/_bridge.c). */
extern PyMethodDef tern_bridge_methods[];

static PyMethodDef module_methods[] = {
    {"library_path", library_path, METH_NOARGS,
     "The path of the libtern this module uses."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "tern._native",
    "tern's request path for ASGI and WSGI applications (CPython API).",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
  PyObject *m;
  PyMethodDef *d;
  static PyMethodDef
      all[sizeof(Conn_methods) / sizeof(Conn_methods[0]) +
          sizeof(Conn_wsgi_methods) / sizeof(Conn_wsgi_methods[0])];
  size_t k = 0;
  for (d = Conn_methods; d->ml_name != NULL; d++)
    all[k++] = *d;
  for (d = Conn_wsgi_methods; d->ml_name != NULL; d++)
    all[k++] = *d;
  ConnType.tp_methods = all;
  if (PyType_Ready(&ReadyType) < 0 || PyType_Ready(&ServerType) < 0 ||
      PyType_Ready(&ConnType) < 0 || PyType_Ready(&RunnerType) < 0)
    return NULL;
  {
    PyObject *ex = PyImport_ImportModule("asyncio.exceptions");
    if (ex == NULL)
      return NULL;
    cancelled_error = PyObject_GetAttrString(ex, "CancelledError");
    Py_DECREF(ex);
    if (cancelled_error == NULL)
      return NULL;
    ex = PyImport_ImportModule("asyncio");
    if (ex == NULL)
      return NULL;
    task_type = PyObject_GetAttrString(ex, "Task");
    Py_DECREF(ex);
    ex = PyImport_ImportModule("io");
    if (ex == NULL)
      return NULL;
    bytes_io = PyObject_GetAttrString(ex, "BytesIO"); /* wsgi.input */
    Py_DECREF(ex);
    task_kwnames = Py_BuildValue("(ss)", "loop", "name");
    s_task_name = PyUnicode_InternFromString("tern");
    if (task_type == NULL || task_kwnames == NULL || s_task_name == NULL ||
        bytes_io == NULL)
      return NULL;
  }
  if (intern(&s_type, "type") || intern(&s_body, "body") ||
      intern(&s_more_body, "more_body") || intern(&s_status, "status") ||
      intern(&s_headers, "headers") || intern(&s_trailers, "trailers") ||
      intern(&s_more_trailers, "more_trailers") || intern(&s_bytes, "bytes") ||
      intern(&s_text, "text") || intern(&s_code, "code") ||
      intern(&s_reason, "reason") || intern(&s_subprotocol, "subprotocol") ||
      intern(&s_path, "path") || intern(&s_file, "file") ||
      intern(&s_offset, "offset") || intern(&s_count, "count") ||
      intern(&s_links, "links") || intern(&s_http_request, "http.request") ||
      intern(&s_http_disconnect, "http.disconnect") ||
      intern(&s_ws_connect, "websocket.connect") ||
      intern(&s_ws_receive, "websocket.receive") ||
      intern(&s_ws_disconnect, "websocket.disconnect") ||
      intern(&s_set_result, "set_result") || intern(&s_done, "done") ||
      intern(&s_http_response_start, "http.response.start") ||
      intern(&s_http_response_body, "http.response.body") ||
      intern(&s_http_response_trailers, "http.response.trailers") ||
      intern(&s_http_response_pathsend, "http.response.pathsend") ||
      intern(&s_http_response_zerocopysend, "http.response.zerocopysend") ||
      intern(&s_http_response_early_hint, "http.response.early_hint") ||
      intern(&s_ws_send, "websocket.send") ||
      intern(&s_ws_accept, "websocket.accept") ||
      intern(&s_ws_close, "websocket.close") ||
      intern(&s_ws_http_response_start, "websocket.http.response.start") ||
      intern(&s_http_response_body_ws, "websocket.http.response.body") ||
      intern(&k_type, "type") || intern(&k_asgi, "asgi") ||
      intern(&k_http_version, "http_version") || intern(&k_server, "server") ||
      intern(&k_client, "client") || intern(&k_scheme, "scheme") ||
      intern(&k_method, "method") || intern(&k_root_path, "root_path") ||
      intern(&k_path, "path") || intern(&k_raw_path, "raw_path") ||
      intern(&k_query_string, "query_string") ||
      intern(&k_headers, "headers") || intern(&k_state, "state") ||
      intern(&k_extensions, "extensions") ||
      intern(&k_subprotocols, "subprotocols") || intern(&v_http, "http") ||
      intern(&v_websocket, "websocket") || intern(&v_https_s, "https") ||
      intern(&v_ws_s, "ws") || intern(&v_wss_s, "wss") ||
      intern(&v_v10, "1.0") || intern(&v_v11, "1.1") || intern(&v_v2, "2") ||
      intern(&v_v3, "3") || intern(&x_ws_denial, "websocket.http.response") ||
      intern(&x_trailers, "http.response.trailers") ||
      intern(&x_early_hint, "http.response.early_hint") ||
      intern(&x_pathsend, "http.response.pathsend") ||
      intern(&x_zerocopysend, "http.response.zerocopysend"))
    return NULL;
  v_empty_bytes = PyBytes_FromStringAndSize("", 0);
  v_asgi_info =
      Py_BuildValue("{s:s,s:s}", "version", "3.0", "spec_version", "2.4");
  v_asgi_ws =
      Py_BuildValue("{s:s,s:s}", "version", "3.0", "spec_version", "2.5");
  ready_none = ready_new(Py_NewRef(Py_None));
  if (v_empty_bytes == NULL || v_asgi_info == NULL || v_asgi_ws == NULL ||
      ready_none == NULL)
    return NULL;
  m = PyModule_Create(&module);
  if (m == NULL || PyModule_AddFunctions(m, tern_bridge_methods) < 0)
    return NULL;
  Py_INCREF(&ServerType);
  Py_INCREF(&ConnType);
  if (PyModule_AddObject(m, "Server", (PyObject *)&ServerType) < 0 ||
      PyModule_AddObject(m, "Conn", (PyObject *)&ConnType) < 0 ||
      PyModule_AddIntConstant(m, "RECV_HIGH", RECV_HIGH) < 0 ||
      PyModule_AddIntConstant(m, "SEND_HIGH", SEND_HIGH) < 0 ||
      PyModule_AddStringConstant(m, "tern_version", tern_version()) < 0)
    return NULL;
  return m;
}
