"""tern for Python: the embeddable HTTP server library, through its C ABI.
docs/python.md is the guide. A server is set up through ctypes
(tern/_ffi.py); everything a request touches goes through the native
module (tern/_bridge.c): tern's callbacks and the calls a handler makes.

    import tern
    app = tern.Server(workers=1)

    @app.route("GET", "/users/:id")
    def user(req):
        return 200, {"content-type": "text/plain"}, "user %s" % req.params["id"]

    app.listen("127.0.0.1", 8080)
    app.run()

Handlers run on tern's worker threads (or its blocking pool, or an
asyncio loop for `async def` handlers) and hold the GIL while they run
Python. A handler answers by returning (status, headers, body), (status,
body), a body, or nothing and calling req.respond() later from any thread.
"""

import asyncio
import atexit
import ctypes
import inspect
import itertools
import logging
import signal
import threading
import urllib.parse
from collections import deque

from . import _ffi
from ._ffi import lib
from ._ffi import native as _n

__all__ = ["Server", "Request", "Headers", "WebSocket", "TLS", "TernError",
           "RequestFinished", "HandshakeError", "version", "library_path",
           "PROXY_ALPN", "PROXY_AUTHORITY", "PROXY_SSL", "PROXY_SSL_VERSION",
           "PROXY_SSL_CN"]

version = _ffi.version
library_path = _ffi.path
log = logging.getLogger("tern")

_byref = ctypes.byref

# The native calls' selectors (tern/_bridge.c): request_call's,
# request_watch's, ws_call's, ws_send's type for a ping, and req_int's
# fields.
_END, _ABORT, _PAUSE, _RESUME = 0, 1, 2, 3
_WATCH_BODY, _WATCH_GONE = 0, 1
_WS_PAUSE, _WS_RESUME, _WS_BUFFERED, _WS_PROTOCOL = 0, 1, 2, 3
_WS_PING = 0
_PROTOCOL, _TLS, _ROUTE_STATUS, _IS_UPGRADE, _WORKER = 0, 1, 2, 3, 4  # req_int

# tern_request_proxy_tlv's kinds (TERN_PROXY_* in tern.h).
PROXY_ALPN = 0x01
PROXY_AUTHORITY = 0x02
PROXY_SSL = 0x20
PROXY_SSL_VERSION = 0x21
PROXY_SSL_CN = 0x22


class TernError(Exception):
    """A tern call failed: .code is the negative TERN_E* code."""

    def __init__(self, code, what=""):
        self.code = code
        msg = _ffi.strerror(code)
        super().__init__("%s: %s" % (what, msg) if what else msg)


class RequestFinished(TernError):
    """The request was answered (or handed to a WebSocket): tern may have
    freed it, so it cannot be used any more."""

    def __init__(self, what="request"):
        Exception.__init__(self, "%s: the request is finished" % what)
        self.code = _ffi.ESTATE


class HandshakeError(TernError):
    """tern_ws_accept refused the handshake and answered it (400/426)."""


def _check(rc, what):
    if rc < 0:
        raise TernError(rc, what)
    return rc


def _b(s):
    return s.encode("latin-1") if isinstance(s, str) else bytes(s)


# ---------------------------------------------------------------------------
# Headers


class Headers:
    """The request's header fields, in arrival order: a read-only,
    case-insensitive mapping (the first value of a name) with get_all()
    for repeated names. Names and values are str (latin-1, as on the
    wire)."""

    __slots__ = ("_items", "_index")

    def __init__(self, items):
        self._items = items
        self._index = None

    def _idx(self):
        if self._index is None:
            idx = {}
            for k, v in self._items:
                idx.setdefault(k.lower(), v)
            self._index = idx
        return self._index

    def __getitem__(self, name):
        return self._idx()[name.lower()]

    def get(self, name, default=None):
        return self._idx().get(name.lower(), default)

    def get_all(self, name):
        n = name.lower()
        return [v for k, v in self._items if k.lower() == n]

    def __contains__(self, name):
        return isinstance(name, str) and name.lower() in self._idx()

    def __iter__(self):
        return iter(self._idx())

    def __len__(self):
        return len(self._idx())

    def keys(self):
        return self._idx().keys()

    def items(self):
        """Every field as (name, value), in order, repeats included."""
        return list(self._items)

    def __repr__(self):
        return "Headers(%r)" % (self._items,)


# ---------------------------------------------------------------------------
# Requests

_UNSET = object()
# Request fields that a request still unanswered when its handler returns
# copies out (so that another thread may read them later).
_SNAPSHOT = ("method", "target", "path", "query", "authority", "protocol",
             "headers", "params", "peer", "body", "tls", "host")


class Request:
    """One request. The accessors read tern's memory the first time and
    keep a copy; when the handler returns without having answered, every
    field is copied, so that another thread may read them and answer
    later. Once answered, the request cannot be used: a field never read
    raises RequestFinished, and so does a second answer."""

    __slots__ = ("_server", "_ptr", "_route", "_lock", "_cache", "_stream",
                 "_views", "_handler_thread", "_id", "_gone", "_gone_event",
                 "__weakref__")

    def __init__(self, server, ptr, route):
        self._server = server
        self._ptr = ptr
        self._route = route
        self._lock = threading.Lock()
        self._cache = {}
        self._stream = None
        self._views = None
        self._handler_thread = None
        self._id = ptr
        self._gone = False
        self._gone_event = None  # (loop, asyncio.Event) for async handlers

    # -- reading -------------------------------------------------------

    def _str(self, which, key):
        c = self._cache
        v = c.get(key, _UNSET)
        if v is not _UNSET:
            return v
        with self._lock:
            p = self._ptr
            if p is None:
                raise RequestFinished(key)
            v = _n.req_str(p, which)
        c[key] = v
        return v

    @property
    def method(self):
        return self._str(0, "method")

    @property
    def target(self):
        """The request-target as sent (path and query)."""
        return self._str(1, "target")

    @property
    def path(self):
        """The path without the query, not percent-decoded."""
        return self._str(2, "path")

    @property
    def query(self):
        """The query string without '?', or None."""
        return self._str(3, "query")

    @property
    def authority(self):
        return self._str(4, "authority")

    @property
    def query_params(self):
        """The query parsed: {name: [values]} (urllib.parse.parse_qs)."""
        q = self.query
        return urllib.parse.parse_qs(q, keep_blank_values=True) if q else {}

    def _read(self, key, fn):
        c = self._cache
        v = c.get(key, _UNSET)
        if v is not _UNSET:
            return v
        with self._lock:
            if self._ptr is None:
                raise RequestFinished(key)
            v = fn(self._ptr)
        c[key] = v
        return v

    @property
    def protocol(self):
        """'HTTP/1.0', 'HTTP/1.1', 'HTTP/2' or 'HTTP/3'."""
        return self._read("protocol", lambda p: _PROTO_NAMES.get(
            _n.req_int(p, _PROTOCOL), "?"))

    @property
    def tls(self):
        """The TLS version the request came over, '1.3' or '1.2', or None
        in the clear (tern_request_tls)."""
        return self._read("tls", lambda p: {0x0304: "1.3", 0x0303: "1.2"}.get(
            _n.req_int(p, _TLS)))

    @property
    def secure(self):
        """True when the request came over TLS (HTTP/3 always does)."""
        return self.tls is not None

    @property
    def host(self):
        """The host the request is for: its Host field, or on HTTP/2 and
        HTTP/3 its :authority (tern_request_host), or None."""
        return self._str(5, "host")

    @property
    def gone(self):
        """True once the client went away before the answer. Kept up to
        date for async handlers (tern watches for them); a plain handler
        asks with on_gone()."""
        return self._gone

    async def wait_gone(self):
        """In an async handler: return when the client goes away (it may
        never: race it against the work, e.g. with asyncio.wait)."""
        if self._gone:
            return
        ev = self._gone_event
        if ev is None:
            raise RuntimeError("wait_gone() is for async handlers")
        await ev[1].wait()

    @property
    def headers(self):
        return self._read("headers", lambda p: Headers(_n.req_headers(p)))

    @property
    def params(self):
        """Path parameters by name (percent-decoded, UTF-8); the
        wildcard's under '*'."""
        def load(p):
            out = {}
            for name in self._route.param_names:
                a = _n.req_param(p, name)
                if a is not None:
                    out[name] = urllib.parse.unquote(
                        a, encoding="utf-8", errors="surrogateescape")
            return out
        return self._read("params", load)

    @property
    def peer(self):
        """(address, port) of the client."""
        def load(p):
            rc, address, port = _n.req_peer(p)
            _check(rc, "peer")
            return address, port
        return self._read("peer", load)

    def proxy_tlv(self, kind):
        """A TLV of the PROXY protocol v2 header the connection came with,
        as bytes, or None: kind is one of PROXY_ALPN, PROXY_AUTHORITY,
        PROXY_SSL (b"1" when the client spoke TLS to the proxy),
        PROXY_SSL_VERSION, PROXY_SSL_CN."""
        return self._read(("proxy_tlv", int(kind)),
                          lambda p: _n.req_proxy_tlv(p, int(kind)))

    @property
    def body(self):
        """The collected body as bytes (b"" when there is none; a
        streaming route's body comes from stream())."""
        return self._read("body", _n.req_body)

    def body_view(self):
        """The collected body without a copy: a memoryview of tern's
        memory, valid only while the handler runs, on its thread. The
        binding releases it when the handler returns; a slice or an
        export taken from it must not outlive that (docs/python.md,
        "Lifetimes")."""
        with self._lock:
            if self._ptr is None:
                raise RequestFinished("body_view")
            if self._handler_thread != threading.get_ident():
                raise RuntimeError("body_view() is only for the handler's "
                                   "thread, while it runs")
            mv = _n.req_body(self._ptr, True)
        if self._views is None:
            self._views = []
        self._views.append(mv)
        return mv

    def json(self):
        import json
        return json.loads(self.body)

    def stream(self):
        """A streaming route's body (route(..., stream=True)): an iterator
        of bytes pieces for a thread other than the worker, and an async
        iterator for an async handler. When more than the route's
        stream_high_water bytes wait unread, tern stops reading the
        socket until half of them have been taken."""
        if self._stream is None:
            raise RuntimeError("stream() needs a route with stream=True")
        return self._stream

    @property
    def finished(self):
        return self._ptr is None

    # -- answering -----------------------------------------------------

    def respond(self, status=200, headers=None, body=b""):
        """Answer, from any thread: body as bytes, str (UTF-8; a
        text/plain content-type is added when none is given), or an
        iterable of those (streamed, chunked on HTTP/1.1). Raises
        RequestFinished when already answered, TernError for bad
        fields."""
        self._server._answer(self, status, headers, body)

    def respond_interim(self, status, headers=None):
        """Send an interim (1xx) answer ahead of the final one, such as
        103 Early Hints; any thread."""
        hdrs = _header_list(headers)
        with self._lock:
            if self._ptr is None:
                raise RequestFinished("respond_interim")
            rc = _n.respond_interim(self._ptr, status, hdrs)
        if rc not in (0, _ffi.ECLOSED):
            raise TernError(rc, "tern_respond_interim")

    def on_gone(self, fn):
        """Call fn(req) on the worker if the client goes away before the
        answer (a long poll stops waiting). From the handler only (tern
        needs the worker); the request must still be answered."""
        key = self._server._key((fn, self))
        with self._lock:
            if self._ptr is None:
                raise RequestFinished("on_gone")
            rc = _n.request_watch(self._ptr, key, _WATCH_GONE)
        if rc != 0:
            self._server._refs.pop(key, None)
            raise TernError(rc, "tern_request_on_gone")
        self._server._gone_keys[self._id] = (key, self)

    @property
    def route_status(self):
        """0 for a routed request; 404 or 405 in the fallback handler."""
        return self._read("route_status", lambda p: _n.req_int(p, _ROUTE_STATUS))

    def accept_websocket(self, handler=None, **options):
        """Accept the request as a WebSocket (from a plain, not async or
        blocking, handler: tern needs its worker). `handler` is an object
        with any of on_open(ws), on_message(ws, data) (str for text,
        bytes for binary), on_close(ws, code, reason), on_drain(ws);
        options are tern_ws_options fields (max_message_size,
        high_water, on_full, deflate, deflate_level, close_timeout_ms,
        subprotocol, ...). Returns the WebSocket."""
        return self._server._ws_accept(self, handler, options)

    def is_websocket(self):
        return self._read("is_ws", lambda p: bool(_n.req_int(p, _IS_UPGRADE)))

    def _snapshot(self):
        for k in _SNAPSHOT:
            try:
                getattr(self, k)
            except (RequestFinished, TernError):
                pass

    def _release_views(self):
        views, self._views = self._views, None
        for v in views or ():
            try:
                v.release()
            except BufferError:
                log.error("a body_view() is still exported after its "
                          "handler returned: it points at memory tern "
                          "will free")

    def __repr__(self):
        return "<tern.Request %s %s%s>" % (
            self._cache.get("method", "?"), self._cache.get("target", "?"),
            " finished" if self._ptr is None else "")


_PROTO_NAMES = {_ffi.PROTO_HTTP10: "HTTP/1.0", _ffi.PROTO_HTTP11: "HTTP/1.1",
                _ffi.PROTO_HTTP2: "HTTP/2", _ffi.PROTO_HTTP3: "HTTP/3"}


class BodyStream:
    """The body of a streaming route, filled on the worker by tern's body
    callback and read from another thread or an asyncio loop."""

    def __init__(self, server, req, high_water):
        self._server = server
        self._req = req
        self._high = high_water
        self._cond = threading.Condition()
        self._chunks = deque()
        self._buffered = 0
        self._paused = False
        self._state = 0  # 0 reading, 1 ended, 2 failed
        self._async_waiters = []

    # on the worker
    def _event(self, event, data):
        with self._cond:
            if event == _ffi.BODY_DATA:
                if data:
                    self._chunks.append(data)
                    self._buffered += len(data)
                if self._buffered >= self._high and not self._paused:
                    with self._req._lock:
                        if self._req._ptr is not None:
                            _n.request_call(self._req._ptr, _PAUSE)
                            self._paused = True
            else:
                self._state = 1 if event == _ffi.BODY_END else 2
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_set_result, fut)

    def _take(self):
        # under self._cond
        c = self._chunks.popleft()
        self._buffered -= len(c)
        if self._paused and self._buffered <= self._high // 2:
            self._paused = False
            with self._req._lock:
                if self._req._ptr is not None:
                    _n.request_call(self._req._ptr, _RESUME)
        return c

    def __iter__(self):
        return self

    def __next__(self):
        if self._req._handler_thread == threading.get_ident():
            raise RuntimeError("a streamed body cannot be read on the "
                               "worker running its handler: read it from "
                               "another thread or an async handler")
        with self._cond:
            while not self._chunks and self._state == 0:
                self._cond.wait()
            if self._chunks:
                return self._take()
            if self._state == 2:
                raise IOError("the request body was cut off (client gone "
                              "or bad framing)")
            raise StopIteration

    def __aiter__(self):
        return self

    async def __anext__(self):
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                if self._chunks:
                    return self._take()
                if self._state == 2:
                    raise IOError("the request body was cut off")
                if self._state == 1:
                    raise StopAsyncIteration
                fut = loop.create_future()
                self._async_waiters.append((loop, fut))
            await fut

    def read(self):
        """The whole rest of the body as bytes (blocking)."""
        return b"".join(self)


def _set_result(fut):
    if not fut.done():
        fut.set_result(None)


# ---------------------------------------------------------------------------
# WebSocket


class WebSocket:
    """An accepted WebSocket. send/close/ping may be called from any
    thread; after on_close they raise TernError(ECLOSED)."""

    def __init__(self, server, handler, key):
        self._server = server
        self._handler = handler
        self._key = key
        self._ptr = None
        self._lock = threading.RLock()
        self.closed = False
        self.close_code = None
        self.data = None  # free for the application

    def _call(self, fn, *args):
        with self._lock:
            if self._ptr is None:
                raise TernError(_ffi.ECLOSED, fn.__name__)
            return fn(self._ptr, *args)

    def send(self, data):
        """Send a whole message: str as text, bytes as binary."""
        if isinstance(data, str):
            rc = self._call(_n.ws_send, _ffi.WS_TEXT, data.encode())
        else:
            rc = self._call(_n.ws_send, _ffi.WS_BINARY, data)
        _check(rc, "tern_ws_send")

    def ping(self, data=b""):
        _check(self._call(_n.ws_send, _WS_PING, data), "tern_ws_ping")

    def close(self, code=1000, reason=""):
        rc = self._call(_n.ws_close, code, reason.encode())
        if rc != _ffi.ECLOSED:
            _check(rc, "tern_ws_close")

    def pause(self):
        _check(self._call(_n.ws_call, _WS_PAUSE), "tern_ws_pause")

    def resume(self):
        _check(self._call(_n.ws_call, _WS_RESUME), "tern_ws_resume")

    @property
    def buffered(self):
        return self._call(_n.ws_call, _WS_BUFFERED)

    @property
    def protocol(self):
        return _PROTO_NAMES.get(self._call(_n.ws_call, _WS_PROTOCOL), "?")


# ---------------------------------------------------------------------------
# TLS


class TLS:
    """A set of certificates for TLS (and QUIC) listeners:
    Server.tls(cert, key). reload() swaps the certificates while the
    server runs."""

    def __init__(self, server, ptr):
        self._server = server
        self._ptr = ptr

    def add(self, cert=None, key=None, cert_pem=None, key_pem=None):
        if cert_pem is not None:
            c, k = _b(cert_pem), _b(key_pem)
            _check(lib.tern_tls_add_cert_mem(self._ptr, c, len(c), k, len(k)),
                   "tern_tls_add_cert_mem")
        else:
            _check(lib.tern_tls_add_cert_file(self._ptr, cert.encode(),
                                              key.encode()),
                   "tern_tls_add_cert_file")

    def commit(self):
        _check(lib.tern_tls_commit(self._ptr), "tern_tls_commit")

    def reload(self, cert, key):
        self.add(cert, key)
        self.commit()

    def set_ticket_key(self, key):
        """The session-ticket key (64 bytes), the same on every instance
        of a fleet so that a client resumes on any (before the server
        runs; both engines)."""
        key = bytes(key)
        _check(lib.tern_tls_set_ticket_key(self._ptr, key, len(key)),
               "tern_tls_set_ticket_key")

    def set_previous_ticket_key(self, key):
        """The key the fleet used before (64 bytes): tickets made under it
        still resume while new ones use set_ticket_key's (before the
        server runs)."""
        key = bytes(key)
        _check(lib.tern_tls_set_previous_ticket_key(self._ptr, key, len(key)),
               "tern_tls_set_previous_ticket_key")

    @property
    def engine(self):
        return lib.tern_tls_engine_name(self._ptr).decode()


# ---------------------------------------------------------------------------
# The server

_servers = set()
_in_handler = threading.local()  # .on while a handler runs on this thread
_servers_lock = threading.Lock()


@atexit.register
def _stop_all():
    # Worker threads must not call into an interpreter that is finalizing.
    with _servers_lock:
        live = list(_servers)
    for s in live:
        try:
            s.stop(0.5)
        except Exception:  # pragma: no cover - best effort at exit
            pass


class _Route:
    __slots__ = ("method", "pattern", "fn", "is_async", "param_names",
                 "stream", "high_water", "key", "blocking", "server")

    def __init__(self, method, pattern, fn, stream, high_water, blocking):
        self.method = method
        self.pattern = pattern
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.param_names = [s[1:] if s.startswith(":") else "*"
                            for s in pattern.split("/")
                            if s.startswith(":") or s == "*"]
        self.stream = stream
        self.high_water = high_water
        self.blocking = blocking
        self.key = None
        self.server = None


_TEXT_PLAIN = ("content-type", "text/plain; charset=utf-8")


class _Stream:
    """An iterable response body being written (Server._stream_out)."""

    HIGH = 256 * 1024

    def __init__(self, server, p, it):
        self.server = server
        self.p = p
        self.it = it
        self.lock = threading.Lock()
        self.inflight = 0
        self.pending = deque()  # bytes tern references until written
        self.finished = False
        self.pumping = False
        self.again = False
        self.key = server._key(self)

    def pump(self):
        with self.lock:
            if self.pumping:
                self.again = True
                return
            self.pumping = True
        while True:
            self._fill()
            with self.lock:
                if not self.again:
                    self.pumping = False
                    break
                self.again = False
        self._maybe_forget()

    def _fill(self):
        while True:
            with self.lock:
                if self.finished or self.inflight >= self.HIGH:
                    return
            try:
                c = next(self.it)
            except StopIteration:
                self._finish(False)
                return
            except Exception:
                log.exception("a streamed response body raised; the "
                              "response is cut short")
                self._finish(True)
                return
            if isinstance(c, str):
                c = c.encode()
            elif not isinstance(c, bytes):
                c = bytes(c)
            if not c:
                continue
            with self.lock:
                self.pending.append(c)
                self.inflight += len(c)
            rc = _n.response_write(self.p, c, self.key)
            if rc != 0:
                with self.lock:
                    self.pending.pop()
                    self.inflight -= len(c)
                self._finish(rc != _ffi.ECLOSED)
                return

    def _finish(self, cut):
        with self.lock:
            if self.finished:
                return
            self.finished = True
        close = getattr(self.it, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                log.exception("closing a streamed response body raised")
        if cut:
            _n.request_call(self.p, _ABORT)
        else:
            _n.request_call(self.p, _END)

    def written(self, status):
        with self.lock:
            if self.pending:
                self.inflight -= len(self.pending.popleft())
        if status != 0:
            self._finish(False)  # the client left: nothing more to send
            self._maybe_forget()
        else:
            self.pump()

    def _maybe_forget(self):
        with self.lock:
            done = self.finished and not self.pending
        if done:
            self.server._refs.pop(self.key, None)


class Server:
    """A tern server. Keyword arguments are tern_settings fields
    (workers, max_body_size, idle_timeout_ms, ...; tern checks them).
    `loop`: an asyncio loop (running in another thread) for async
    handlers; by default the server starts its own when one is needed.
    `stop_deadline`: seconds a graceful stop waits for requests in
    flight."""

    def __init__(self, workers=0, *, loop=None, stop_deadline=5.0,
                 **settings):
        s = _ffi.init_struct(_ffi.Settings, "tern_settings_init")
        s.workers = workers
        for k, v in settings.items():
            if k not in _ffi.SETTINGS_FIELDS:
                raise TypeError("unknown setting %r" % k)
            setattr(s, k, v)
        self._log_cb = _ffi.log_fn(self._on_log)
        s.log = ctypes.cast(self._log_cb, ctypes.c_void_p)
        if "log_level" not in settings:
            s.log_level = _ffi.LOG_WARN
        p = ctypes.c_void_p()
        _check(lib.tern_server_new(_byref(s), _byref(p)), "tern_server_new")
        self._srv = p
        self._srv_ptr = p.value  # the same, as the native calls take it
        self._routes = []
        self._live = {}        # ptr -> Request not answered by its handler
        self._live_lock = threading.Lock()
        self._refs = _refs     # key -> object a C callback will look up
        self._free_lock = threading.Lock()
        self._tls = []
        self.ports = []
        self._thread = None
        self._state = "new"    # new, running, stopped, freed
        self._loop = loop
        self._own_loop = None
        self._stop_deadline = stop_deadline
        self._run_rc = None
        self._started = threading.Event()
        # Set when tern_run has returned. Waiting is on this, never on
        # Thread.join: a KeyboardInterrupt that lands inside join() can
        # leave the thread looking finished while tern_run still runs
        # (CPython's gh-90882), and the server would then be freed under
        # its worker.
        self._done = threading.Event()
        self._gone_keys = {}   # request ptr -> (key, Request) with on_gone

    # -- configuration -------------------------------------------------

    def _on_log(self, level, msg, n, user):
        text = ctypes.string_at(msg, n).decode("utf-8", "replace")
        log.log({0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO}.get(
            level, logging.DEBUG), "%s", text)

    def route(self, method, pattern, *, blocking=False, stream=False,
              max_body_size=0, stream_high_water=1 << 20):
        """Decorator: `method` ("GET", or "*" for any), `pattern` with
        :name parameters and a trailing *. blocking: the handler runs on
        tern's blocking pool and may block. stream: the handler runs
        when the head has arrived and reads the body with req.stream()."""
        def deco(fn):
            self.add_route(method, pattern, fn, blocking=blocking,
                           stream=stream, max_body_size=max_body_size,
                           stream_high_water=stream_high_water)
            return fn
        return deco

    def add_route(self, method, pattern, fn, *, blocking=False, stream=False,
                  max_body_size=0, stream_high_water=1 << 20):
        r = _Route(method, pattern, fn, stream, stream_high_water, blocking)
        if r.is_async and blocking:
            raise ValueError("an async handler cannot be a blocking route")
        flags = (_ffi.ROUTE_BLOCKING if blocking else 0) | (
            _ffi.ROUTE_STREAM_BODY if stream else 0)
        self._add(r, method, pattern, flags, max_body_size)
        if r.is_async and self._loop is None:
            self._start_loop()
        return r

    def fallback(self, fn):
        """Decorator: the handler of requests no route matches, instead
        of tern's 404/405 (req.route_status tells which; a 405 should
        carry an Allow header)."""
        r = _Route("*", "", fn, False, 0, False)
        self._add(r, None, None, 0, 0)
        if r.is_async and self._loop is None:
            self._start_loop()
        return fn

    def _add(self, r, method, pattern, flags, max_body_size):
        """Install route r: its handler is the native trampoline, which
        finds r by its key (pattern None: the default handler)."""
        r.server = self
        r.key = self._key(r)
        rc = _n.route(self._srv_ptr, method, pattern, r.key, flags,
                      max_body_size)
        if rc != 0:
            self._refs.pop(r.key, None)
            raise TernError(rc, "tern_route %s %s" % (method, pattern)
                            if pattern is not None
                            else "tern_server_set_default_handler")
        self._routes.append(r)

    def tls(self, cert=None, key=None, *, cert_pem=None, key_pem=None,
            engine=None, min_version=None):
        """A certificate set for listen(..., tls=...): PEM files or PEM
        text; engine "gnutls" or "mbedtls"; min_version "1.2" or
        "1.3"."""
        p = ctypes.c_void_p()
        _check(lib.tern_tls_new(self._srv, _byref(p)), "tern_tls_new")
        t = TLS(self, p)
        if engine is not None:
            _check(lib.tern_tls_set_engine(p, {
                "gnutls": _ffi.TLS_ENGINE_GNUTLS,
                "mbedtls": _ffi.TLS_ENGINE_MBEDTLS}[engine]),
                "tern_tls_set_engine")
        if min_version is not None:
            _check(lib.tern_tls_set_min_version(p, {
                "1.2": _ffi.TLS_1_2, "1.3": _ffi.TLS_1_3}[min_version]),
                "tern_tls_set_min_version")
        t.add(cert, key, cert_pem, key_pem)
        t.commit()
        self._tls.append(t)
        return t

    def _listen_with(self, what, **fields):
        """tern_listen_with with the options named (the rest defaults);
        returns the bound port."""
        o = _ffi.init_struct(_ffi.ListenOptions, "tern_listen_options_init")
        for k, v in fields.items():
            setattr(o, k, v)
        bound = ctypes.c_int()
        _check(lib.tern_listen_with(self._srv, _byref(o), _byref(bound)),
               "tern_listen_with %s" % what)
        return bound.value

    def listen(self, host="127.0.0.1", port=0, *, tls=None, quic=False,
               http2_only=False, http1_only=False):
        """Listen on host:port (0: any free port); tls: a TLS (or a
        (cert, key) pair) for HTTPS with HTTP/2; quic: HTTP/3 on the UDP
        port of the same number too; http2_only: HTTP/2 alone in the
        clear (prior knowledge, no HTTP/1.1; not with tls); http1_only:
        HTTP/1.1 alone (no h2c; over TLS, ALPN offers http/1.1 only; not
        with quic or http2_only). Returns the bound port."""
        if isinstance(tls, tuple):
            tls = self.tls(*tls)
        h = host.encode() if host else None
        if http1_only:
            if quic or http2_only:
                raise ValueError("http1_only is not with quic or http2_only")
            bound = self._listen_with(
                "%s:%s (HTTP/1.1 only)" % (host, port), host=h, port=port,
                tls=tls._ptr if tls is not None else None, http1_only=1)
        elif http2_only:
            if tls is not None:
                raise ValueError("http2_only is for plain listeners")
            bound = self._listen_with("%s:%s (h2c only)" % (host, port),
                                      host=h, port=port, http2_only=1)
        elif tls is None:
            bound = ctypes.c_int()
            _check(lib.tern_listen(self._srv, h, port, _byref(bound)),
                   "tern_listen %s:%s" % (host, port))
            bound = bound.value
        else:
            bound = self._listen_with("%s:%s (TLS)" % (host, port), host=h,
                                      port=port, tls=tls._ptr)
            if quic:
                self._listen_with("%s:%s (QUIC)" % (host, bound), host=h,
                                  port=bound, tls=tls._ptr, quic=1)
        self.ports.append(bound)
        return bound

    def listen_unix(self, path):
        """Serve HTTP/1.1 and h2c on a Unix socket: a path, or "@name" for
        Linux's abstract namespace (removed when the server is freed)."""
        self._listen_with("unix %s" % path, path=path.encode())

    def listen_fd(self, fd):
        """Serve on a listening stream socket a parent bound (socket
        activation); tern owns it on success. Returns its TCP port (0 for
        a Unix socket)."""
        return self._listen_with("fd %d" % fd, fd=fd)

    @property
    def port(self):
        return self.ports[0] if self.ports else None

    # -- running -------------------------------------------------------

    def _run_thread(self):
        self._started.set()
        try:
            self._run_rc = lib.tern_run(self._srv)
        finally:
            self._done.set()

    def start(self):
        """Run in the background (tern's worker 0 on a thread of its
        own); stop() ends it."""
        if self._state != "new":
            raise TernError(_ffi.ESTATE, "start")
        self._state = "running"
        with _servers_lock:
            _servers.add(self)
        self._thread = threading.Thread(target=self._run_thread,
                                        name="tern-run", daemon=True)
        self._thread.start()
        self._started.wait()
        return self

    def run(self):
        """Run in the foreground until Ctrl-C (SIGINT) or SIGTERM, which
        stop gracefully (stop_deadline), or until stop() from another
        thread."""
        self.start()
        old = None
        if threading.current_thread() is threading.main_thread():
            def term(signum, frame):
                raise KeyboardInterrupt
            old = signal.signal(signal.SIGTERM, term)
        try:
            while not self._done.wait(0.25):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            if old is not None:
                signal.signal(signal.SIGTERM, old)
            self.stop()
        if self._run_rc:
            raise TernError(self._run_rc, "tern_run")

    def stop(self, deadline=None):
        """Stop gracefully and wait: requests in flight get `deadline`
        seconds (the server's stop_deadline by default) to be answered;
        those still unanswered then are answered 503 by tern. Then the
        server is freed. Safe to call more than once. From a handler it
        only starts the stop (the handler's own worker cannot end while
        it waits): run() returns, or a later stop() from another thread
        waits and frees."""
        if self._state == "freed":
            return
        if deadline is None:
            deadline = self._stop_deadline
        lib.tern_stop(self._srv, int(deadline * 1000))
        if self._thread is not None:
            if getattr(_in_handler, "on", False):
                return  # a handler cannot wait for its own worker to end
            while not self._done.wait(0.5):
                pass
        self._free()

    def _free(self):
        with self._free_lock:
            if self._state == "freed":
                return
            self._state = "freed"
        # Requests a handler never answered: tern has answered the client
        # (503) at the deadline and keeps each until a finishing call; make
        # it, so that nothing stays allocated.
        with self._live_lock:
            left = list(self._live.values())
            self._live.clear()
        for req in left:
            with req._lock:
                p, req._ptr = req._ptr, None
                if p is not None:
                    _n.respond(p, 503, None, b"")
        lib.tern_server_free(self._srv)
        self._srv = self._srv_ptr = None
        for r in self._routes:
            self._refs.pop(r.key, None)
        with _servers_lock:
            _servers.discard(self)
        if self._own_loop is not None:
            self._own_loop.call_soon_threadsafe(self._own_loop.stop)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stats(self):
        """tern's counters (tern_server_stats) as a dict."""
        st = _ffi.init_struct(_ffi.Stats, "tern_stats_init")
        _check(lib.tern_server_stats(self._srv, _byref(st)),
               "tern_server_stats")
        out = {}
        for k, _ in st._fields_[2:]:
            v = getattr(st, k)
            # version 3's arrays: a list per protocol (h1, h2, h3)
            out[k] = [list(x) if hasattr(x, "__len__") else x for x in v] \
                if hasattr(v, "__len__") else v
        return out

    def mount_metrics(self, path="/metrics"):
        """Answer GET path with tern's counters in Prometheus' text format
        (tern_metrics_handler, a C handler: no Python runs per scrape)."""
        fn = ctypes.cast(lib.tern_metrics_handler, _ffi.handler_fn)
        _check(lib.tern_route(self._srv, b"GET", path.encode(), fn, None),
               "tern_route")
        self._metrics_fn = fn  # kept alive with the server

    def pending(self):
        """How many requests handlers have left unanswered."""
        return len(self._live)

    def broadcast(self, sockets, data):
        """Send one message to many WebSockets (one frame, shared);
        returns how many took it."""
        socks = [s for s in sockets if s._ptr is not None]
        if isinstance(data, str):
            b, t = data.encode(), _ffi.WS_TEXT
        else:
            b, t = bytes(data), _ffi.WS_BINARY
        # in one order for every caller, so two broadcasts cannot deadlock
        locks = sorted((s._lock for s in socks), key=id)
        for lk in locks:
            lk.acquire()
        try:
            # sockets closed meanwhile are NULL entries: tern skips them
            return _check(_n.ws_broadcast([s._ptr for s in socks], t, b),
                          "tern_ws_broadcast")
        finally:
            for lk in locks:
                lk.release()

    # -- the asyncio loop ------------------------------------------------

    def _start_loop(self):
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main():
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()
        threading.Thread(target=main, name="tern-asyncio",
                         daemon=True).start()
        ready.wait()
        self._loop = self._own_loop = loop

    async def _run_async(self, route, req):
        try:
            result = await route.fn(req)
            if result is not None or req._ptr is None:
                if result is not None:
                    self._answer(req, *_normalize(result))
                return
        except Exception:
            self._failed(route, req)

    # -- dispatch ------------------------------------------------------

    def _key(self, obj):
        k = next(_keys)  # atomic under the GIL
        _refs[k] = obj
        return k

    def _dispatch(self, route, ptr):
        req = Request(self, ptr, route)
        req._handler_thread = threading.get_ident()
        _in_handler.on = True
        try:
            if route.stream:
                req._stream = BodyStream(self, req, route.high_water)
                key = self._key(req._stream)
                if _n.request_watch(ptr, key, _WATCH_BODY) != 0:
                    self._refs.pop(key, None)
                    req._stream._state = 2
            if route.is_async:
                # The client leaving reaches the coroutine (req.gone,
                # req.wait_gone()): tern tells only its worker, here.
                req._gone_event = (self._loop, asyncio.Event())
                try:
                    req.on_gone(_async_gone)
                except TernError as e:
                    if e.code == _ffi.ECLOSED:
                        req._gone = True
                req._snapshot()
                self._hold(req)
                req._handler_thread = None
                asyncio.run_coroutine_threadsafe(
                    self._run_async(route, req), self._loop)
                return
            result = route.fn(req)
            if result is not None:
                if req._ptr is None:
                    log.error("%s %s: the handler answered with "
                              "respond() and returned a value too",
                              route.method, route.pattern)
                else:
                    self._answer(req, *_normalize(result))
        except BaseException:
            self._failed(route, req)
        finally:
            _in_handler.on = False
            req._handler_thread = None
            if req._views is not None:
                req._release_views()
        if req._ptr is not None:
            req._snapshot()
            self._hold(req)

    def _hold(self, req):
        with self._live_lock:
            if req._ptr is not None:
                self._live[req._ptr] = req

    def _failed(self, route, req):
        log.exception("%s %s: the handler raised", route.method,
                      route.pattern)
        try:
            if req._ptr is not None:
                self._answer(req, 500, [_TEXT_PLAIN],
                             b"Internal Server Error\n")
        except Exception:
            log.exception("answering 500 failed")

    def _answer(self, req, status, headers, body):
        hdrs = list(headers.items() if isinstance(headers, dict)
                    else headers or ())
        stream = None
        if isinstance(body, str):
            body = body.encode()
            if not any(k.lower() == "content-type" for k, _ in hdrs):
                hdrs.append(_TEXT_PLAIN)
        elif body is None:
            body = b""
        elif not isinstance(body, (bytes, bytearray, memoryview)):
            stream = iter(body)
        with req._lock:
            p = req._ptr
            if p is None:
                raise RequestFinished("respond")
            if stream is None:
                rc = _n.respond(p, status, hdrs, body)
                if rc in (_ffi.EINVAL, _ffi.ESTATE):
                    raise TernError(rc, "tern_respond")
                req._ptr = None
            else:
                rc = _n.response_start(p, status, hdrs, -1)
                if rc in (_ffi.EINVAL, _ffi.ESTATE):
                    raise TernError(rc, "tern_response_start")
                req._ptr = None  # no other answer from here on
        if stream is not None:
            self._stream_out(p, stream)
        with self._live_lock:
            self._live.pop(p, None)
        g = self._gone_keys.pop(p, None)
        if g is not None:
            self._refs.pop(g[0], None)

    def _stream_out(self, p, chunks):
        """Write an iterable body with at most _Stream.HIGH bytes in
        flight: the next piece is taken from the iterable when tern has
        written enough (from the write's completion, on the worker), so a
        slow client holds the generator instead of the server's memory."""
        _Stream(self, p, iter(chunks)).pump()

    def _ws_accept(self, req, handler, options):
        # the options are tern_ws_options fields by name: tern/_bridge.c
        # sets them, and raises TypeError for a name it does not know
        opts = dict(options)
        ws = WebSocket(self, handler, 0)
        key = self._key(ws)
        ws._key = key
        try:
            with req._lock:
                p = req._ptr
                if p is None:
                    raise RequestFinished("accept_websocket")
                rc = _n.ws_accept(p, key, opts)[0]
                if rc == _ffi.ESTATE and not getattr(_in_handler, "on",
                                                     False):
                    # Not on the request's worker (an async handler, or
                    # any thread after the handler returned): tern
                    # accepts only there, so the call goes to the worker
                    # and this thread waits for it (one loop turn).
                    rc = self._on_request_worker(
                        p, lambda: _n.ws_accept(p, key, opts)[0])
                if rc in (_ffi.EINVAL, _ffi.ESTATE):
                    raise TernError(rc, "tern_ws_accept")
                req._ptr = None
        except BaseException:
            self._refs.pop(key, None)
            raise
        if rc != 0:
            self._refs.pop(key, None)
            if rc == _ffi.EHANDSHAKE:
                raise HandshakeError(rc, "tern_ws_accept")
            raise TernError(rc, "tern_ws_accept")
        return ws

    def _on_request_worker(self, p, call, timeout=30.0):
        """Run call() on request p's worker (tern_worker_call) and return
        its result; TERN_ECLOSED when the worker no longer takes calls."""
        done = threading.Event()
        box = [_ffi.ECLOSED]

        def run(alive):
            try:
                if alive:
                    box[0] = call()
            finally:
                done.set()  # even if call() raised: the caller waits on it
        k = self._key(run)
        rc = _n.worker_call(self._srv_ptr, _n.req_int(p, _WORKER), k)
        if rc != 0:
            self._refs.pop(k, None)
            return rc
        if not done.wait(timeout):
            return _ffi.ECLOSED
        return box[0]


# ---------------------------------------------------------------------------
# tern's C callbacks, through the native trampolines (tern/_bridge.c): the
# user pointer of each is a key into _refs, shared by every Server.

_refs = {}
_keys = itertools.count(1)


def _on_request(key, ptr):
    r = _refs.get(key)
    if r is not None:
        r.server._dispatch(r, ptr)


def _on_body(key, event, data):
    st = _refs.get(key)
    if st is None:
        return
    if event != _ffi.BODY_DATA:
        _refs.pop(key, None)
    st._event(event, data)


def _on_gone(key):
    entry = _refs.pop(key, None)
    if entry is None:
        return
    fn, req = entry
    if req._server._gone_keys.pop(req._id, None) is None:
        return  # answered meanwhile
    try:
        fn(req)
    except Exception:
        log.exception("an on_gone callback raised")


def _on_written(key, status):
    st = _refs.get(key)
    if st is not None:
        st.written(status)


def _ws_call(key, name, *args):
    ws = _refs.get(key)
    if ws is None:
        return None
    fn = getattr(ws._handler, name, None)
    if fn is not None:
        try:
            fn(ws, *args)
        except Exception:
            log.exception("WebSocket %s raised", name)
    return ws


def _on_ws_open(key, ptr):
    ws = _refs.get(key)
    if ws is not None:
        ws._ptr = ptr
        _ws_call(key, "on_open")


def _on_ws_message(key, data):
    _ws_call(key, "on_message", data)


def _on_ws_close(key, code, reason):
    ws = _refs.get(key)
    if ws is None:
        return
    with ws._lock:
        ws._ptr = None
        ws.closed = True
        ws.close_code = code
    _ws_call(key, "on_close", code, reason)
    _refs.pop(key, None)


def _on_ws_drain(key):
    _ws_call(key, "on_drain")


def _on_worker(key, alive):
    fn = _refs.pop(key, None)
    if fn is not None:
        fn(alive)


_n.bridge_init(_on_request, _on_body, _on_gone, _on_written, _on_ws_open,
               _on_ws_message, _on_ws_close, _on_ws_drain, _on_worker)


def _async_gone(req):
    """on_gone of an async handler's request, on the worker: the flag, and
    the event on the handler's loop."""
    req._gone = True
    loop, ev = req._gone_event
    try:
        loop.call_soon_threadsafe(ev.set)
    except RuntimeError:
        pass  # the loop is closed


def _header_list(hdrs):
    """Headers as the native calls take them: None or a list of (name,
    value) pairs (str or bytes; a value of another type is str()'d)."""
    if isinstance(hdrs, dict):
        return list(hdrs.items())
    return list(hdrs) if hdrs else None


def _normalize(result):
    """A handler's return value as (status, headers, body)."""
    if isinstance(result, tuple):
        if len(result) == 3:
            return result
        if len(result) == 2:
            return result[0], None, result[1]
        if len(result) == 1:
            return result[0], None, b""
        raise ValueError("a handler returns (status, headers, body)")
    if isinstance(result, int):
        return result, None, b""
    return 200, None, result
