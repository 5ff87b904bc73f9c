"""tern as a server of Python web applications: ASGI 3 (HTTP, WebSocket,
lifespan) and WSGI (PEP 3333), over HTTP/1.1, HTTP/2 and HTTP/3.

    python -m tern myproject.asgi:application --port 8000
    tern.run(app, host="127.0.0.1", port=8000)

The request path is the native module tern._native (C against the
CPython API): tern's worker runs on the libuv loop that module owns,
driven from this process's asyncio loop (uvloop when installed), so the
application and tern share one thread. docs/python.md is the guide.
"""
import argparse
import asyncio
import importlib
import inspect
import logging
import os
import signal
import sys

log = logging.getLogger("tern.server")
access_log = logging.getLogger("tern.access")

LEVELS = {"critical": logging.CRITICAL, "error": logging.ERROR,
          "warning": logging.WARNING, "info": logging.INFO,
          "debug": logging.DEBUG, "trace": 5}
# tern's own log levels (TERN_LOG_*) to Python's.
_TERN_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO,
                3: logging.DEBUG}


from ._ffi import native  # noqa: E402  (tern._native, found by _ffi)


# Config's options and their defaults (the keywords of run(), the flags
# of python -m tern with - for _).
DEFAULTS = dict(
    host="127.0.0.1", port=8000, uds=None, fd=None, workers=1,
    interface="auto", ssl_certfile=None, ssl_keyfile=None, http3=False,
    root_path="", proxy_headers=True, forwarded_allow_ips=None,
    proxy_protocol=False, lifespan="auto", limit_concurrency=None,
    timeout_keep_alive=5, timeout_graceful_shutdown=None, access_log=True,
    log_level="info", factory=False, threads=0, loop="auto",
    max_body_size=None, stats_path=None,
    # called with the list of (kind, address) once listening
    ready=None)


class Config:
    """Everything `python -m tern` takes; the keyword arguments of run()
    (DEFAULTS lists them)."""

    def __init__(self, app, **kw):
        unknown = set(kw) - set(DEFAULTS)
        if unknown:
            raise TypeError("unknown options: %s" % ", ".join(sorted(unknown)))
        self.app = app
        for k, v in DEFAULTS.items():
            setattr(self, k, kw.get(k, v))
        self.workers = self.workers or 1
        self.root_path = self.root_path or ""
        ips = self.forwarded_allow_ips
        if ips is None:
            ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
        if isinstance(ips, str):
            ips = [x.strip() for x in ips.split(",") if x.strip()]
        self.forwarded_allow_ips = list(ips)


def import_app(spec, factory=False):
    """'module:attribute' (the attribute may be dotted) to the object;
    the current directory is importable, as with uvicorn."""
    if not isinstance(spec, str):
        return spec() if factory else spec
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit("Error: the application must be given as "
                         "'module:attribute', not %r" % spec)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name and not module_name.startswith(
                (e.name or "") + "."):
            raise
        raise SystemExit("Error: could not import module %r" % module_name)
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise SystemExit("Error: attribute %r not found in module %r" %
                         (attr, module_name))
    if factory:
        obj = obj()
    return obj


def detect_interface(app):
    """ASGI when the application (or its __call__) is a coroutine
    function, WSGI otherwise."""
    if inspect.iscoroutinefunction(app):
        return "asgi"
    call = getattr(app, "__call__", None)
    if call is not None and inspect.iscoroutinefunction(call):
        return "asgi"
    if inspect.isclass(app):
        # ASGI 2 (double-callable) classes are not supported: wrap them.
        raise SystemExit("Error: ASGI 2 applications are not supported; "
                         "use asgiref.compatibility.guarantee_single_callable")
    return "wsgi"


class FileWrapper:
    """wsgi.file_wrapper: the file goes to the socket by reference (it is
    mapped, never read into Python), when the application returns it."""

    def __init__(self, filelike, blksize=8192):
        self.filelike = filelike
        self.blksize = blksize

    def __iter__(self):
        # An iterator for whoever else consumes it (middleware).
        while True:
            data = self.filelike.read(self.blksize)
            if not data:
                return
            yield data

    def close(self):
        if hasattr(self.filelike, "close"):
            self.filelike.close()


class Lifespan:
    """ASGI lifespan 2.0: startup before serving, shutdown after; its state
    dict is copied into every request's scope."""

    def __init__(self, app, mode):
        self.app = app
        self.mode = mode
        self.state = {}
        self.supported = mode != "off"
        self.queue = asyncio.Queue()
        self.startup_done = asyncio.Event()
        self.shutdown_done = asyncio.Event()
        self.failed = None
        self.task = None

    async def startup(self):
        if not self.supported:
            return True
        self.task = asyncio.get_running_loop().create_task(self._run())
        await self.queue.put({"type": "lifespan.startup"})
        await self.startup_done.wait()
        if self.failed is not None and self.supported:
            log.error("Application startup failed: %s", self.failed)
            return False
        return True

    async def shutdown(self):
        if not self.supported or self.task is None or self.task.done():
            return
        await self.queue.put({"type": "lifespan.shutdown"})
        await self.shutdown_done.wait()
        if self.failed is not None:
            log.error("Application shutdown failed: %s", self.failed)

    async def _run(self):
        scope = {"type": "lifespan",
                 "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": self.state}
        try:
            await self.app(scope, self.queue.get, self._send)
        except BaseException as e:
            if not self.startup_done.is_set() and self.mode == "auto":
                # An application without lifespan support (Django's) raises
                # on the scope: serve without it.
                log.info("ASGI 'lifespan' protocol appears unsupported.")
                self.supported = False
            elif not isinstance(e, asyncio.CancelledError):
                self.failed = self.failed or repr(e)
                log.error("Exception in 'lifespan' protocol", exc_info=e)
        finally:
            self.startup_done.set()
            self.shutdown_done.set()

    async def _send(self, message):
        t = message.get("type")
        if t == "lifespan.startup.complete":
            self.startup_done.set()
        elif t == "lifespan.startup.failed":
            self.failed = message.get("message", "") or "startup failed"
            self.startup_done.set()
        elif t == "lifespan.shutdown.complete":
            self.shutdown_done.set()
        elif t == "lifespan.shutdown.failed":
            self.failed = message.get("message", "") or "shutdown failed"
            self.shutdown_done.set()
        else:
            raise RuntimeError("unexpected lifespan message %r" % t)


def _on_error(kind, exc):
    log.error("Exception in ASGI application" if kind == "application"
              else "Exception in tern's %s callback" % kind, exc_info=exc)


def _on_log(level, text):
    logging.getLogger("tern").log(_TERN_LEVELS.get(level, logging.INFO),
                                  "%s", text)


async def _on_loop(fn, *args):
    """fn(*args) awaited on the event loop (receive and send are the
    loop's: a thread hands them over with run_coroutine_threadsafe)."""
    return await fn(*args)


class _WSGIInput:
    """wsgi.input of --threads: the body read on demand from the request
    (each refill is one receive() on the event loop, from the app's
    thread), so a large upload streams with backpressure: what the app
    has not asked for stays in the socket."""

    def __init__(self, loop, receive):
        self.loop = loop
        self.receive = receive
        self.buf = bytearray()
        self.eof = False

    def _fill(self):
        if self.eof:
            return False
        m = asyncio.run_coroutine_threadsafe(_on_loop(self.receive),
                                             self.loop).result()
        if m["type"] != "http.request":
            self.eof = True
            raise IOError("the client disconnected during the body")
        self.buf += m.get("body", b"")
        if not m.get("more_body"):
            self.eof = True
        return True

    def read(self, size=-1):
        if size is None or size < 0:
            while self._fill():
                pass
            size = len(self.buf)
        while len(self.buf) < size and self._fill():
            pass
        out = bytes(self.buf[:size])
        del self.buf[:size]
        return out

    def readline(self, size=-1):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0 or (size is not None and 0 <= size <= len(self.buf)):
                break
            if not self._fill():
                break
        n = len(self.buf) if i < 0 else i + 1
        if size is not None and size >= 0:
            n = min(n, size)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def readlines(self, hint=-1):
        lines = []
        total = 0
        while True:
            line = self.readline()
            if not line:
                return lines
            lines.append(line)
            total += len(line)
            if hint is not None and 0 < hint <= total:
                return lines

    def __iter__(self):
        while True:
            line = self.readline()
            if not line:
                return
            yield line


def _threaded_wsgi(app, threads):
    """--threads N: the WSGI application runs on a pool of N threads
    while the worker's thread serves on. wsgi.input streams the body on
    demand and each piece of the answer is sent as it comes, both through
    the event loop's flow control (a slow client holds the app's
    thread, not memory)."""
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(max_workers=threads,
                              thread_name_prefix="tern-wsgi")

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return
        loop = asyncio.get_running_loop()
        environ = _environ_from_scope(scope, _WSGIInput(loop, receive))
        state = {"sent": False}

        def push(message):
            asyncio.run_coroutine_threadsafe(_on_loop(send, message),
                                             loop).result()

        def start_head():
            if not state["sent"]:
                state["sent"] = True
                push({"type": "http.response.start",
                      "status": state["status"],
                      "headers": state["headers"]})

        def write(data):
            start_head()
            if data:
                push({"type": "http.response.body", "body": bytes(data),
                      "more_body": True})

        def start_response(status, headers, exc_info=None):
            if exc_info and state["sent"]:
                raise exc_info[1].with_traceback(exc_info[2])
            state["status"] = int(status.split(" ", 1)[0])
            state["headers"] = [(k.encode("latin-1").lower(),
                                 v.encode("latin-1")) for k, v in headers]
            return write

        def call():
            result = app(environ, start_response)
            try:
                for piece in result:
                    write(piece)
            finally:
                if hasattr(result, "close"):
                    result.close()
            start_head()
            push({"type": "http.response.body", "body": b""})

        await loop.run_in_executor(pool, call)

    return asgi


def _environ_from_scope(scope, wsgi_input):
    env = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", ""),
        "PATH_INFO": scope["path"].encode("utf-8", "surrogateescape")
        .decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_PROTOCOL": "HTTP/" + scope["http_version"],
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": wsgi_input,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.file_wrapper": FileWrapper,
    }
    server = scope.get("server") or ("localhost", 0)
    env["SERVER_NAME"], env["SERVER_PORT"] = server[0], str(server[1])
    if scope.get("client"):
        env["REMOTE_ADDR"], env["REMOTE_PORT"] = (scope["client"][0],
                                                  str(scope["client"][1]))
    for name, value in scope["headers"]:
        key = name.decode("latin-1").upper().replace("-", "_")
        if "_" in name.decode("latin-1"):
            continue
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
        value = value.decode("latin-1")
        if key in env:
            value = env[key] + ("; " if key == "HTTP_COOKIE" else ", ") + value
        env[key] = value
    return env


class Server:
    """One serving process (or, with workers > 1, the first of several)."""

    def __init__(self, config):
        self.config = config
        self.native = None
        self.should_exit = False
        self.children = []
        self.bound = []

    def _listen(self):
        c = self.config
        kwargs = dict(max_body_size=c.max_body_size or 0,
                      idle_timeout_ms=int(c.timeout_keep_alive * 1000),
                      on_log=_on_log,
                      log_level=3 if c.log_level in ("debug", "trace")
                      else 1)
        srv = native.Server(**kwargs)
        tls = dict(certfile=c.ssl_certfile, keyfile=c.ssl_keyfile)
        common = dict(proxy_protocol=c.proxy_protocol)
        if c.uds:
            if os.path.exists(c.uds):
                os.unlink(c.uds)
            srv.listen(path=c.uds, **tls, **common)
            self.bound.append(("unix", c.uds))
        elif c.fd is not None:
            srv.listen(fd=c.fd, **tls, **common)
            self.bound.append(("fd", c.fd))
        else:
            port = srv.listen(host=c.host, port=c.port, **tls, **common)
            self.bound.append(("https" if c.ssl_certfile else "http",
                               (c.host, port)))
        return srv

    def _add_quic(self, srv):
        c = self.config
        if not (c.http3 and c.ssl_certfile and not c.uds and c.fd is None):
            return
        port = self.bound[0][1][1]
        srv.listen(host=c.host, port=port, certfile=c.ssl_certfile,
                   keyfile=c.ssl_keyfile, quic=True)
        self.bound.append(("h3", (c.host, port)))

    def run(self):
        c = self.config
        if c.http3 and not c.ssl_certfile:
            raise SystemExit("Error: --http3 needs --ssl-certfile and "
                             "--ssl-keyfile")
        self.native = srv = self._listen()
        index = 0
        if c.workers > 1:
            sys.stdout.flush()
            sys.stderr.flush()
            index, self.children = srv.fork(c.workers)
        # HTTP/3's connections are routed within one process: the first
        # process serves it (tern_server_fork refuses a QUIC listener).
        if index == 0:
            self._add_quic(srv)
        if c.access_log:
            srv.access_log("/dev/stdout", True)
        loop_factory = _loop_factory(c.loop)
        loop = loop_factory()
        asyncio.set_event_loop(loop)
        try:
            rc = loop.run_until_complete(self.serve(index))
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
        if index == 0:
            rc = self._reap() or rc
        return rc

    def _reap(self):
        rc = 0
        for pid in self.children:
            try:
                _, status = os.waitpid(pid, 0)
                if os.WIFEXITED(status) and os.WEXITSTATUS(status):
                    rc = os.WEXITSTATUS(status)
            except ChildProcessError:
                pass
        return rc

    async def serve(self, index=0):
        c = self.config
        loop = asyncio.get_running_loop()
        app = import_app(c.app, c.factory)
        iface = c.interface
        if iface == "auto":
            iface = detect_interface(app)
        lifespan = None
        state = None
        if iface == "asgi":
            lifespan = Lifespan(app, c.lifespan)
            if not await lifespan.startup():
                self.native.stop(0)
                return 3
            state = lifespan.state if lifespan.supported else None
        elif c.threads:
            app = _threaded_wsgi(app, c.threads)
            iface = "asgi"
        try:
            return await self._serve(loop, app, iface, lifespan, state)
        finally:
            if lifespan is not None and lifespan.task is not None and \
                    not lifespan.task.done():
                lifespan.task.cancel()

    async def _serve(self, loop, app, iface, lifespan, state):
        c = self.config
        self.native.configure(
            app, interface=iface, state=state, root_path=c.root_path,
            on_error=_on_error,
            forwarded_allow=c.forwarded_allow_ips if c.proxy_headers
            else None,
            limit_concurrency=c.limit_concurrency or 0,
            file_wrapper=FileWrapper, stats_path=c.stats_path)
        stopped = self.native.attach(loop)
        stop_now = asyncio.Event()

        def on_signal(sig):
            if stop_now.is_set():
                return
            stop_now.set()
            for pid in self.children:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        for kind, where in self.bound:
            if isinstance(where, tuple):
                log.info("tern serving %s on %s:%d (process %d)", kind,
                         where[0], where[1], os.getpid())
            else:
                log.info("tern serving on %s %s (process %d)", kind, where,
                         os.getpid())
        if c.ready is not None:
            c.ready(self.bound)
        await stop_now.wait()
        grace = c.timeout_graceful_shutdown
        deadline = int((grace if grace is not None else 30) * 1000)
        log.info("Shutting down (deadline %d ms)", deadline)
        self.native.stop(deadline)
        await stopped
        # What is still running had its requests answered or cut by tern:
        # the tasks go.
        me = asyncio.current_task()
        keep = {me, lifespan.task if lifespan is not None else None}
        tasks = [t for t in asyncio.all_tasks() if t not in keep]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.native.close()
        if lifespan is not None:
            await lifespan.shutdown()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if c.uds and os.path.exists(c.uds):
            try:
                os.unlink(c.uds)
            except OSError:
                pass
        return 0


def _loop_factory(kind):
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
            return uvloop.new_event_loop
        except ImportError:
            if kind == "uvloop":
                raise SystemExit("Error: uvloop is not installed")
    return asyncio.new_event_loop


def run(app, **kwargs):
    """Serve `app` (an ASGI or WSGI application, or 'module:attribute')
    until SIGINT or SIGTERM; the keywords are Config's."""
    config = Config(app, **kwargs)
    _setup_logging(config.log_level)
    return Server(config).run()


def _setup_logging(level):
    lvl = LEVELS.get(level, logging.INFO)
    root = logging.getLogger("tern")
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        root.addHandler(h)
    root.setLevel(lvl)
    root.propagate = False


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m tern",
        description="Serve an ASGI or WSGI application with tern "
                    "(HTTP/1.1, HTTP/2, HTTP/3, WebSocket).")
    p.add_argument("app", help="the application, as module:attribute")
    p.add_argument("--host", default=DEFAULTS["host"])
    p.add_argument("--port", type=int, default=DEFAULTS["port"])
    p.add_argument("--uds", help="a Unix domain socket to listen on")
    p.add_argument("--fd", type=int, help="a listening socket to serve")
    p.add_argument("--workers", type=int,
                   default=int(os.environ.get("WEB_CONCURRENCY", "1")),
                   help="processes (least connections across them)")
    p.add_argument("--interface", choices=["auto", "asgi", "wsgi"],
                   default="auto")
    p.add_argument("--loop", choices=["auto", "asyncio", "uvloop"],
                   default="auto")
    p.add_argument("--ssl-certfile")
    p.add_argument("--ssl-keyfile")
    p.add_argument("--http3", action="store_true",
                   help="HTTP/3 over QUIC on the TLS port (Alt-Svc sent)")
    p.add_argument("--root-path", default=DEFAULTS["root_path"])
    p.add_argument("--proxy-headers", dest="proxy_headers",
                   action="store_true", default=True)
    p.add_argument("--no-proxy-headers", dest="proxy_headers",
                   action="store_false")
    p.add_argument("--forwarded-allow-ips")
    p.add_argument("--proxy-protocol", action="store_true",
                   help="connections open with a PROXY protocol header")
    p.add_argument("--lifespan", choices=["auto", "on", "off"],
                   default="auto")
    p.add_argument("--limit-concurrency", type=int,
                   help="requests and WebSockets at once; beyond: 503")
    p.add_argument("--timeout-keep-alive", type=float,
                   default=DEFAULTS["timeout_keep_alive"])
    p.add_argument("--timeout-graceful-shutdown", type=float)
    p.add_argument("--access-log", dest="access_log", action="store_true",
                   default=True)
    p.add_argument("--no-access-log", dest="access_log",
                   action="store_false")
    p.add_argument("--log-level", choices=sorted(LEVELS),
                   default=DEFAULTS["log_level"])
    p.add_argument("--factory", action="store_true",
                   help="the attribute is a factory that returns the app")
    p.add_argument("--threads", type=int, default=DEFAULTS["threads"],
                   help="WSGI: run the application on this many threads "
                        "(0: inline on the worker)")
    p.add_argument("--max-body-size", type=int,
                   help="bytes a WSGI request body may have (8 MiB)")
    p.add_argument("--stats-path",
                   help="answer GET on this path with tern's own counters "
                        "(JSON: requests, allocations, ...) before the app "
                        "sees it")
    a = p.parse_args(argv)
    if a.uds and a.fd is not None:
        p.error("--uds and --fd exclude each other")
    return run(a.app, **{k: getattr(a, k) for k in DEFAULTS if hasattr(a, k)})
