"""The binding on every carrier: WebSocket (Python's websockets), HTTP/2
(nghttp, cleartext prior knowledge), TLS with HTTP/1.1 and HTTP/2
(curl)."""
import asyncio
import shutil
import subprocess
import threading
import time

import pytest

import tern
from conftest import started


class Echo:
    def __init__(self):
        self.events = []
        self.closed = threading.Event()

    def on_open(self, ws):
        self.events.append("open " + ws.protocol)

    def on_message(self, ws, data):
        ws.send(data)

    def on_close(self, ws, code, reason):
        self.events.append("close %d" % code)
        self.closed.set()


def test_websocket_echo(server):
    websockets = pytest.importorskip("websockets")
    app = server()
    echo = Echo()
    socks = []

    @app.route("GET", "/ws")
    def ws(req):
        socks.append(req.accept_websocket(echo, max_message_size=1 << 20))

    @app.route("GET", "/bad")
    def bad(req):
        with pytest.raises(tern.HandshakeError):
            req.accept_websocket(echo)
    port = started(app)

    async def client():
        async with websockets.connect("ws://127.0.0.1:%d/ws" % port,
                                      max_size=None) as c:
            for msg in ("hello", "h\u00e9llo \u2603", b"\x00\x01\xff" * 1000,
                        "x" * 70000):
                await c.send(msg)
                assert await asyncio.wait_for(c.recv(), 5) == msg
            # a send from another thread, while the socket is open
            t = threading.Thread(target=lambda: socks[0].send("from a thread"))
            t.start()
            t.join()
            assert await asyncio.wait_for(c.recv(), 5) == "from a thread"
            await c.close(1000, "bye")
    asyncio.run(client())
    assert echo.closed.wait(5)
    assert echo.events == ["open HTTP/1.1", "close 1000"]
    # after on_close the handle is gone: the Python object says so
    with pytest.raises(tern.TernError) as e:
        socks[0].send("late")
    assert e.value.code == -7  # TERN_ECLOSED
    # a plain GET to a route that accepts: tern answers 400
    import http.client
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    h.request("GET", "/bad")
    assert h.getresponse().status == 400


def test_websocket_broadcast_and_server_close(server):
    websockets = pytest.importorskip("websockets")
    app = server(workers=2)
    members = []
    lock = threading.Lock()

    class Room:
        def on_open(self, ws):
            with lock:
                members.append(ws)

        def on_message(self, ws, data):
            with lock:
                m = list(members)
            app.broadcast(m, "all: " + data)

    app.add_route("GET", "/room", lambda r: r.accept_websocket(Room()) and None)
    port = started(app)

    async def client():
        cs = [await websockets.connect("ws://127.0.0.1:%d/room" % port)
              for _ in range(3)]
        while len(members) < 3:
            await asyncio.sleep(0.01)
        await cs[0].send("hi")
        for c in cs:
            assert await asyncio.wait_for(c.recv(), 5) == "all: hi"
        # graceful stop: members get 1001
        await asyncio.get_running_loop().run_in_executor(None, app.stop, 1.0)
        for c in cs:
            await asyncio.wait_for(c.wait_closed(), 5)
            assert c.close_code == 1001
    asyncio.run(client())


@pytest.mark.skipif(not shutil.which("nghttp"), reason="nghttp missing")
def test_http2_cleartext_with_nghttp(server):
    app = server()
    seen = []

    @app.route("GET", "/h2/:x")
    def h2(req):
        seen.append(req.protocol)
        return 200, {"x-proto": req.protocol}, "h2 %s" % req.params["x"]

    @app.route("POST", "/h2echo")
    async def echo(req):
        return req.body
    port = started(app)
    out = subprocess.run(["nghttp", "http://127.0.0.1:%d/h2/7" % port],
                         capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"h2 7"
    assert seen == ["HTTP/2"]
    data = b"0123456789" * 10000
    with open(app_tmp(), "wb") as f:
        f.write(data)
    out = subprocess.run(["nghttp", "-d", app_tmp(),
                          "http://127.0.0.1:%d/h2echo" % port],
                         capture_output=True, timeout=20)
    assert out.stdout == data


@pytest.mark.skipif(not shutil.which("nghttp"), reason="nghttp missing")
def test_http2_only_listener(server):
    """listen(http2_only=True): HTTP/2 with prior knowledge is served, an
    HTTP/1.1 request is not (the connection closes without an HTTP/1.1
    answer)."""
    import socket
    app = server()

    @app.route("GET", "/only")
    def only(req):
        return 200, {}, req.protocol
    port = started(app, http2_only=True)
    out = subprocess.run(["nghttp", "http://127.0.0.1:%d/only" % port],
                         capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"HTTP/2"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        got = send_until_close(s, b"GET /only HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not got.startswith(b"HTTP/1.1")
    assert got[3] == 4 and b"\x07\x00\x00\x00\x00" in got  # SETTINGS, GOAWAY


def test_http1_only_listener(server):
    """listen(http1_only=True) in the clear: Upgrade: h2c is ignored and
    the answer is HTTP/1.1."""
    app = server()

    @app.route("GET", "/only")
    def only(req):
        return 200, {}, req.protocol
    port = started(app, http1_only=True)
    out = subprocess.run(["curl", "-s", "--http2", "http://127.0.0.1:%d/only"
                          % port], capture_output=True, timeout=20)
    assert out.stdout == b"HTTP/1.1"


def send_until_close(sock, data):
    """Send `data` on a connected socket; what came back until the peer
    closed."""
    sock.sendall(data)
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk


def app_tmp():
    import tempfile
    import os
    return os.path.join(tempfile.gettempdir(), "tern-py-h2-%d" % os.getpid())


@pytest.mark.skipif(not shutil.which("curl"), reason="curl missing")
def test_tls_with_curl(server, cert):
    app = server()
    app.add_route("GET", "/tls",
                  lambda r: "over %s %s" % (r.protocol, r.tls))
    tls = app.tls(*cert)
    port = started(app, tls=tls)
    assert tls.engine in ("gnutls", "mbedtls")
    v = "1.3" if tls.engine == "gnutls" else "1.2"
    for flag, want in (("--http1.1", b"over HTTP/1.1 " + v.encode()),
                       ("--http2", b"over HTTP/2 " + v.encode())):
        out = subprocess.run(["curl", "-sS", flag, "--cacert", cert[0],
                              "https://localhost:%d/tls" % port,
                              "--resolve", "localhost:%d:127.0.0.1" % port],
                             capture_output=True, timeout=20)
        assert out.returncode == 0, out.stderr
        assert out.stdout == want


@pytest.mark.skipif(not shutil.which("curl"), reason="curl missing")
def test_tls_fleet_ticket_keys(server, cert):
    """set_ticket_key and set_previous_ticket_key take 64-byte keys (a
    rotation: tickets under the previous key still resume; net_fleet_keys
    checks that part) and refuse other sizes; the server then serves."""
    app = server()
    app.add_route("GET", "/k", lambda r: "keyed")
    tls = app.tls(*cert)
    with pytest.raises(tern.TernError) as e:
        tls.set_previous_ticket_key(b"k" * 32)
    assert e.value.code == -1  # TERN_EINVAL
    tls.set_ticket_key(bytes(range(64)))
    tls.set_previous_ticket_key(bytes(range(64, 128)))
    port = started(app, tls=tls)
    out = subprocess.run(["curl", "-sS", "--cacert", cert[0],
                          "https://localhost:%d/k" % port,
                          "--resolve", "localhost:%d:127.0.0.1" % port],
                         capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"keyed"


def test_tls_bad_certificate(server, tmp_path):
    app = server()
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(tern.TernError) as e:
        app.tls(str(bad), str(bad))
    assert e.value.code == -11  # TERN_ETLS


def test_unix_socket(tmp_path):
    """listen_unix: HTTP/1.1 over a Unix socket, as curl --unix-socket
    would speak it (here a plain socket client)."""
    import socket as _s
    app = tern.Server(workers=1)
    app.add_route("GET", "/", lambda r: "over unix")
    path = str(tmp_path / "t.sock")
    app.listen_unix(path)
    app.start()
    try:
        c = _s.socket(_s.AF_UNIX, _s.SOCK_STREAM)
        c.settimeout(10)
        c.connect(path)
        data = send_until_close(
            c, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        c.close()
        assert data.startswith(b"HTTP/1.1 200")
        assert data.endswith(b"over unix")
    finally:
        app.stop(1.0)
