"""The binding over real sockets with real clients: routes, requests,
answers now and later, async handlers, streamed bodies, errors, stops."""
import asyncio
import hashlib
import http.client
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

import tern
from conftest import ROOT, SANITIZER_PRELOAD, started


def get(port, path, method="GET", body=None, headers=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r, data


def test_readme_example_program():
    """examples/python/hello.py, the README's program, as users run it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "bindings", "python")
    if SANITIZER_PRELOAD:
        env["LD_PRELOAD"] = SANITIZER_PRELOAD
    p = subprocess.Popen([sys.executable, os.path.join(
        ROOT, "examples", "python", "hello.py"), "0"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline().decode()
        m = re.match(r"listening on (\d+)", line)
        assert m, (line, p.stderr.read() if p.poll() is not None else "")
        port = int(m.group(1))
        st, r, body = get(port, "/users/42")
        assert (st, body) == (200, b"user 42")
        assert r.getheader("content-type") == "text/plain"
        st, _, body = get(port, "/echo", "POST", b"\x00binary\xff")
        assert (st, body) == (200, b"\x00binary\xff")
        st, _, body = get(port, "/later")
        assert (st, body) == (200, b"later\n")
        st, _, _ = get(port, "/nope")
        assert st == 404
    finally:
        p.send_signal(2)  # Ctrl-C: a graceful stop
        rc = p.wait(10)
    assert rc == 0, p.stderr.read()


def test_request_accessors(server):
    app = server()
    seen = {}

    @app.route("PUT", "/a/:x/b/*")
    def h(req):
        seen.update(method=req.method, path=req.path, target=req.target,
                    query=req.query, qp=req.query_params, params=req.params,
                    h1=req.headers["X-Thing"], h2=req.headers.get("x-thing"),
                    all=req.headers.get_all("x-rep"), peer=req.peer,
                    proto=req.protocol, has="X-THING" in req.headers,
                    authority=req.authority,
                    tlv=req.proxy_tlv(tern.PROXY_AUTHORITY))
        return 204
    port = started(app)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.putrequest("PUT", "/a/h%C3%A9llo/b/c/d?k=1&k=2&e=")
    c.putheader("X-Thing", "v1")
    c.putheader("x-rep", "a")
    c.putheader("X-Rep", "b")
    c.putheader("Content-Length", "0")
    c.endheaders()
    r = c.getresponse()
    assert r.status == 204
    assert seen["method"] == "PUT"
    assert seen["path"] == "/a/h%C3%A9llo/b/c/d"
    assert seen["target"] == "/a/h%C3%A9llo/b/c/d?k=1&k=2&e="
    assert seen["query"] == "k=1&k=2&e="
    assert seen["qp"] == {"k": ["1", "2"], "e": [""]}
    assert seen["params"] == {"x": "h\u00e9llo", "*": "c/d"}
    assert seen["h1"] == seen["h2"] == "v1" and seen["has"]
    assert seen["all"] == ["a", "b"]
    assert seen["peer"][0] == "127.0.0.1" and seen["peer"][1] > 0
    assert seen["proto"] == "HTTP/1.1"
    assert seen["authority"].startswith("127.0.0.1:")
    assert seen["tlv"] is None  # no PROXY header on this listener


def test_answers_in_every_form(server):
    app = server()
    app.add_route("GET", "/bytes", lambda r: b"raw")
    app.add_route("GET", "/str", lambda r: "text \u00e9")
    app.add_route("GET", "/pair", lambda r: (202, b"two"))
    app.add_route("GET", "/status", lambda r: 204)
    app.add_route("GET", "/list", lambda r: (200, [("x-a", "1"), ("x-a", "2")],
                                             b"l"))
    app.add_route("GET", "/gen", lambda r: (200, {}, (b"%d," % i
                                                       for i in range(1000))))
    port = started(app)
    assert get(port, "/bytes")[::2] == (200, b"raw")
    st, r, body = get(port, "/str")
    assert body == "text \u00e9".encode()
    assert r.getheader("content-type") == "text/plain; charset=utf-8"
    assert get(port, "/pair")[::2] == (202, b"two")
    assert get(port, "/status")[::2] == (204, b"")
    st, r, _ = get(port, "/list")
    assert r.msg.get_all("x-a") == ["1", "2"]
    st, r, body = get(port, "/gen")
    assert r.getheader("transfer-encoding") == "chunked"
    assert body == b"".join(b"%d," % i for i in range(1000))


def test_post_body_and_limit(server):
    app = server(max_body_size=1 << 20)
    app.add_route("POST", "/echo", lambda r: (200, {}, r.body))
    app.add_route("POST", "/view", lambda r: hashlib.sha256(
        r.body_view()).hexdigest())
    port = started(app)
    data = os.urandom(300000)
    assert get(port, "/echo", "POST", data)[::2] == (200, data)
    assert get(port, "/view", "POST", data)[2] == \
        hashlib.sha256(data).hexdigest().encode()
    assert get(port, "/echo", "POST", b"x" * (2 << 20))[0] == 413


def test_streamed_upload_16mib_hash(server):
    """A 16 MiB upload to a streaming route, read on another thread with
    backpressure (the queue stays bounded), hash-checked."""
    app = server()
    peak = [0]

    @app.route("POST", "/up", stream=True, stream_high_water=256 << 10)
    def up(req):
        body = req.stream()

        def consume():
            h = hashlib.sha256()
            n = 0
            for chunk in body:
                peak[0] = max(peak[0], body._buffered + len(chunk))
                h.update(chunk)
                n += len(chunk)
                time.sleep(0.0002)  # slower than the socket
            req.respond(200, {}, "%d %s" % (n, h.hexdigest()))
        threading.Thread(target=consume).start()
    port = started(app)
    data = os.urandom(16 << 20)
    st, _, body = get(port, "/up", "POST", data, timeout=60)
    assert st == 200
    assert body.decode() == "%d %s" % (len(data),
                                       hashlib.sha256(data).hexdigest())
    # paused at the mark: never far above it (one read's worth beyond)
    assert peak[0] < (256 << 10) + (1 << 20), peak[0]


def test_streamed_upload_async(server):
    app = server()

    @app.route("POST", "/up", stream=True)
    async def up(req):
        h = hashlib.sha256()
        async for chunk in req.stream():
            h.update(chunk)
        return h.hexdigest()
    port = started(app)
    data = os.urandom(3 << 20)
    assert get(port, "/up", "POST", data)[2] == \
        hashlib.sha256(data).hexdigest().encode()


def test_respond_later_from_threads(server):
    app = server(workers=2)

    @app.route("GET", "/later/:n")
    def later(req):
        def answer():
            time.sleep(0.01)
            req.respond(200, {"x-n": req.params["n"]}, req.path)
        threading.Thread(target=answer).start()
    port = started(app)
    results = {}

    def client(i):
        results[i] = get(port, "/later/%d" % i)
    ts = [threading.Thread(target=client, args=(i,)) for i in range(20)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(20):
        st, r, body = results[i]
        assert (st, body, r.getheader("x-n")) == (200, b"/later/%d" % i,
                                                  str(i))


def test_request_used_after_finish_raises(server):
    app = server()
    kept = []

    @app.route("GET", "/x")
    def x(req):
        req.respond(200, {}, "one")
        kept.append(req)
        with pytest.raises(tern.RequestFinished):
            req.respond(200, {}, "two")
        with pytest.raises(tern.RequestFinished):
            req.headers
        return None
    port = started(app)
    assert get(port, "/x")[::2] == (200, b"one")
    with pytest.raises(tern.RequestFinished):
        kept[0].respond(500)
    with pytest.raises(tern.RequestFinished):
        kept[0].body


def test_async_handlers(server):
    app = server()

    @app.route("GET", "/a/:ms")
    async def a(req):
        await asyncio.sleep(int(req.params["ms"]) / 1000)
        return 200, {"x-async": "1"}, "slept %s" % req.params["ms"]

    @app.route("GET", "/raise")
    async def r(req):
        await asyncio.sleep(0)
        raise RuntimeError("async boom")
    port = started(app)
    # ten at once: the loop runs them concurrently (~50 ms, not 500)
    results = []
    t0 = time.monotonic()
    ts = [threading.Thread(target=lambda: results.append(get(port, "/a/50")))
          for _ in range(10)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [x[2] for x in results] == [b"slept 50"] * 10
    assert time.monotonic() - t0 < 5
    assert get(port, "/raise")[0] == 500


def test_handler_exception_answers_500(server, caplog):
    app = server()

    @app.route("GET", "/boom")
    def boom(req):
        raise KeyError("boom")

    @app.route("GET", "/badheader")
    def bad(req):
        return 200, {"bad name": "x"}, "no"
    port = started(app)
    with caplog.at_level("ERROR", logger="tern"):
        st, _, body = get(port, "/boom")
        assert st == 500 and body == b"Internal Server Error\n"
        assert get(port, "/badheader")[0] == 500
        assert get(port, "/boom")[0] == 500  # the server is still fine
    assert any("KeyError" in (r.exc_text or "") for r in caplog.records)


def test_blocking_route(server):
    app = server()

    @app.route("GET", "/block", blocking=True)
    def block(req):
        time.sleep(0.2)  # a blocking route may block
        return "blocked on %s" % ("worker" if threading.current_thread() is
                                  threading.main_thread() else "pool")
    app.add_route("GET", "/fast", lambda r: "fast")
    port = started(app)
    out = []
    t = threading.Thread(target=lambda: out.append(get(port, "/block")))
    t.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    assert get(port, "/fast")[2] == b"fast"
    assert time.monotonic() - t0 < 0.15  # the worker was free meanwhile
    t.join()
    assert out[0][2] == b"blocked on pool"


def test_graceful_stop_with_requests_in_flight():
    app = tern.Server(workers=1)

    @app.route("GET", "/slow")
    def slow(req):
        threading.Timer(0.3, lambda: req.respond(200, {}, "done")).start()
    port = started(app)
    out = []
    ts = [threading.Thread(target=lambda: out.append(get(port, "/slow")))
          for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.1)
    app.stop(5.0)  # waits for the four
    for t in ts:
        t.join()
    assert sorted(x[2] for x in out) == [b"done"] * 4
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_handler_that_never_answers():
    """The client gets tern's 503 at the stop deadline; the binding then
    finishes the request so that tern frees it, and nothing is left."""
    app = tern.Server(workers=1)
    held = []

    @app.route("GET", "/never")
    def never(req):
        held.append(req)
    port = started(app)
    out = []
    t = threading.Thread(target=lambda: out.append(get(port, "/never")))
    t.start()
    while not held:
        time.sleep(0.01)
    assert app.pending() == 1
    app.stop(0.2)
    t.join()
    assert out[0][0] == 503
    assert app.pending() == 0
    with pytest.raises(tern.RequestFinished):
        held[0].respond(200)


def test_settings_checked(server):
    with pytest.raises(tern.TernError) as e:
        server(max_pipeline=0)
    assert e.value.code == -1
    with pytest.raises(TypeError):
        server(no_such_setting=1)


def test_stats(server):
    app = server()
    app.add_route("GET", "/", lambda r: "hi")
    port = started(app)
    for _ in range(5):
        get(port, "/")
    # a response counts once written, a moment after the client has it
    deadline = time.monotonic() + 5
    while app.stats()["requests"] < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    st = app.stats()
    assert st["requests"] == 5 and st["connections"] == 5
    # version 3's arrays: h1's 2xx class counts the five
    assert st["requests_by_class"][0][2] == 5
    assert st["requests_by_class"][1] == [0] * 6


def test_metrics_mounted(server):
    """Server.mount_metrics: tern's own C handler answers the scrape."""
    app = server()
    app.add_route("GET", "/", lambda r: "hi")
    app.mount_metrics("/metrics")
    port = started(app)
    for _ in range(3):
        get(port, "/")
    status, _, body = get(port, "/metrics")
    assert status == 200
    text = body.decode()
    assert "# TYPE tern_requests_total counter" in text
    m = re.search(r'^tern_requests_total\{[^}]*protocol="http1"[^}]*'
                  r'code="2xx"[^}]*\} (\d+)', text, re.M)
    assert m and int(m.group(1)) >= 3, text[:600]


def test_fallback_interim_and_gone(server):
    app = server()
    gone = threading.Event()
    held = []

    @app.fallback
    def fallback(req):
        return req.route_status, {"x-fallback": "1"}, "fallback %d %s" % (
            req.route_status, req.path)

    @app.route("GET", "/hints")
    def hints(req):
        req.respond_interim(103, {"link": "</a.css>; rel=preload"})
        return "final"

    @app.route("GET", "/poll")
    def poll(req):
        held.append(req)
        req.on_gone(lambda r: (r.respond(499), gone.set()))
    app.add_route("GET", "/only-get", lambda r: "get")
    port = started(app)
    st, r, body = get(port, "/nowhere")
    assert (st, body) == (404, b"fallback 404 /nowhere")
    assert get(port, "/only-get", "DELETE")[::2] == (
        405, b"fallback 405 /only-get")
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /hints HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    while b"final" not in data:
        data += s.recv(4096)
    assert data.startswith(b"HTTP/1.1 103 ")
    assert b"link: </a.css>; rel=preload" in data.lower()
    assert b"HTTP/1.1 200 " in data
    s.close()
    # a long poll whose client leaves: on_gone runs, the request is answered
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /poll HTTP/1.1\r\nHost: x\r\n\r\n")
    while not held:
        time.sleep(0.01)
    s.close()
    assert gone.wait(5)
    assert held[0].finished and app.pending() == 0


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_generator_body_is_paced_by_the_client(server):
    """A 100 MiB generator body to a client that reads slowly: the next
    piece is taken only once tern wrote enough, so the process's memory
    stays flat (it grew by the whole body before), the body arrives
    whole, and the generator is not run ahead of the socket."""
    app = server()
    made = [0]

    def body():
        piece = b"x" * (1 << 20)
        for _ in range(100):
            made[0] += 1
            yield piece

    app.add_route("GET", "/big", lambda r: (200, {}, body()))
    app.add_route("GET", "/raises", lambda r: (200, {}, _raises()))

    @app.route("GET", "/raises-async")
    async def raises_async(req):
        # answered from the loop's thread: the writes and the abort are
        # posted to the worker (tern_response_abort from another thread)
        return 200, {}, _raises()

    port = started(app)
    before = _rss_kib()
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(1.0)
    assert made[0] < 20, "the generator ran ahead: %d MiB" % made[0]
    assert _rss_kib() - before < 30 * 1024
    got = 0
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        got += len(d)
        if got >= 100 * (1 << 20):
            # chunked framing around 100 MiB: read to the final chunk
            if d.endswith(b"0\r\n\r\n"):
                break
    s.close()
    assert got > 100 * (1 << 20) and made[0] == 100
    # a generator that raises half way, answered on the worker and from
    # the async loop's thread: the response is cut (closed without the
    # final chunk; what was queued may go with it), never whole
    for path in ("/raises", "/raises-async"):
        data = _read_to_close(port, path)
        assert not data.endswith(b"0\r\n\r\n"), (path, data[-40:])


def _read_to_close(port, path, fields=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path.encode(),
                                                           fields))
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    return data


def _raises():
    yield b"partial"
    raise ValueError("a body that fails half way")


def test_async_handler_learns_the_client_left(server):
    app = server()
    seen = {}
    done = threading.Event()

    @app.route("GET", "/wait")
    async def wait(req):
        seen["before"] = req.gone
        await req.wait_gone()
        seen["after"] = req.gone
        req.respond(499)
        done.set()

    port = started(app)
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.3)
    s.close()
    assert done.wait(5)
    assert seen == {"before": False, "after": True}
    assert app.pending() == 0


def test_websocket_accepted_after_the_handler_returned(server):
    """An async handler (another thread than tern's worker) accepts the
    WebSocket after its own await, as an ASGI server decides late."""
    websockets = pytest.importorskip("websockets")
    app = server()

    class Echo:
        def on_message(self, ws, data):
            ws.send(data)

    @app.route("GET", "/ws")
    async def late(req):
        await asyncio.sleep(0.05)
        req.accept_websocket(Echo())

    @app.route("GET", "/info")
    def info(req):
        return "%s %s %s" % (req.host, req.secure, req.tls)

    port = started(app)

    async def go():
        async with websockets.connect("ws://127.0.0.1:%d/ws" % port) as ws:
            await ws.send("late hello")
            assert await ws.recv() == "late hello"
    asyncio.new_event_loop().run_until_complete(go())
    st, _, body = get(port, "/info", headers={"Host": "example.test:8"})
    assert body == b"example.test False None"


class _CtypesSpy:
    """Stands in for tern's ctypes handles: records every call made."""

    def __init__(self, real, calls):
        self._real = real
        self._calls = calls

    def __getattr__(self, name):
        fn = getattr(self._real, name)
        calls = self._calls

        def call(*args):
            calls.append(name)
            return fn(*args)
        return call


def test_request_path_makes_no_ctypes_calls(server, monkeypatch):
    """Once a server is set up, serving makes no ctypes call: fields,
    answers now and later, streamed bodies both ways, the client leaving,
    an interim answer and a WebSocket all go through the native module
    (tern/_bridge.c). ctypes costs microseconds a call."""
    websockets = pytest.importorskip("websockets")
    app = server()
    gone = threading.Event()

    @app.route("POST", "/f/:x")
    def fields(req):
        return 200, {"x-h": req.headers.get("x-h", "")}, "|".join(
            str(v) for v in (
            req.method, req.target, req.path, req.query, req.authority,
            req.host, req.protocol, req.tls, req.params["x"],
            req.peer[0], req.route_status, req.is_websocket(),
            req.proxy_tlv(tern.PROXY_ALPN), bytes(req.body_view()),
            req.body))

    @app.route("GET", "/later")
    def later(req):
        threading.Timer(0.02, req.respond, (201, [("x-a", b"b")],
                                            "done")).start()

    @app.route("GET", "/gen")
    def gen(req):
        return 200, None, (b"%d," % i for i in range(1000))

    @app.route("GET", "/hint")
    def hint(req):
        req.respond_interim(103, {"link": "</s.css>; rel=preload"})
        return "after"

    @app.route("PUT", "/up", stream=True)
    async def up(req):
        n = 0
        async for piece in req.stream():
            n += len(piece)
        return str(n)

    @app.route("GET", "/hang")
    def hang(req):
        req.on_gone(lambda r: (r.respond(499), gone.set()))

    class Echo:
        def on_message(self, ws, data):
            ws.send(data)
            app.broadcast([ws], "b:" + data)

    @app.route("GET", "/ws")
    def ws(req):
        req.accept_websocket(Echo(), max_message_size=1 << 20)

    port = started(app)
    calls = []
    monkeypatch.setattr(tern, "lib", _CtypesSpy(tern.lib, calls))
    monkeypatch.setattr(tern._ffi, "fast", _CtypesSpy(tern._ffi.fast, calls))

    st, r, body = get(port, "/f/a%20b?q=1", "POST", b"xyz",
                      headers={"x-h": "v"})
    assert st == 200 and r.getheader("x-h") == "v"
    assert body == (b"POST|/f/a%%20b?q=1|/f/a%%20b|q=1|127.0.0.1:%d|"
                    b"127.0.0.1|HTTP/1.1|None|a b|127.0.0.1|0|False|"
                    b"None|b'xyz'|b'xyz'" % port)
    st, r, body = get(port, "/later")
    assert (st, r.getheader("x-a"), body) == (201, "b", b"done")
    st, _, body = get(port, "/gen")
    assert st == 200 and body == b"".join(b"%d," % i for i in range(1000))
    data = _read_to_close(port, "/hint", b"Connection: close\r\n")
    assert data.startswith(b"HTTP/1.1 103 ") and b"</s.css>" in data
    assert b"\r\nHTTP/1.1 200 " in data and data.endswith(b"\r\n\r\nafter")
    st, _, body = get(port, "/up", "PUT", b"u" * 300000)
    assert (st, body) == (200, b"300000")
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.1)
    s.close()
    assert gone.wait(5)

    async def go():
        async with websockets.connect("ws://127.0.0.1:%d/ws" % port) as c:
            await c.send("hi")
            assert {await c.recv(), await c.recv()} == {"hi", "b:hi"}
    asyncio.new_event_loop().run_until_complete(go())
    assert calls == []
