"""A small HTTP/1.1 client over raw sockets: the pre-measurement check
(status and exact body), tern's /stats, and the fixed-count keep-alive and
pipelined clients of `perf gate`.  Responses must carry Content-Length
(every server here answers so)."""

import json
import re
import socket
import time

from . import common
from .common import BenchError

STATUS_RE = re.compile(rb"HTTP/1\.[01] (\d{3})")
CL_RE = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.I)


def request_bytes(path="/", headers=(), host="127.0.0.1", close=False):
    lines = ["GET %s HTTP/1.1" % path, "Host: %s" % host]
    lines += list(headers)
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class TcpConn:
    """A TCP connection (sock, with TCP_NODELAY) and its receive buffer
    (buf); closed on leaving a with block.  The base of Conn and of
    wsclient.WsConn."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Conn(TcpConn):
    """One keep-alive connection that sends requests and reads responses."""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(262144)
        if not chunk:
            raise BenchError("connection closed by the server")
        self.buf += chunk

    def read_response(self):
        """(status, headers dict, body) of the next response."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self.buf) > 65536:
                raise BenchError("response head too large")
            self._fill()
        head = bytes(self.buf[:end + 2])
        m = STATUS_RE.match(head)
        if not m:
            raise BenchError("bad status line %r" % head[:60])
        cl = CL_RE.search(head)
        if not cl:
            raise BenchError("response without Content-Length")
        n = int(cl.group(1))
        total = end + 4 + n
        while len(self.buf) < total:
            self._fill()
        body = bytes(self.buf[end + 4:total])
        del self.buf[:total]
        headers = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k:
                headers[k.strip().lower()] = v.strip()
        return int(m.group(1)), headers, body

    def skip_responses(self, count):
        """Read count responses, checking only that each is a 200; fast path
        for the fixed-count clients."""
        bad = 0
        for _ in range(count):
            while True:
                end = self.buf.find(b"\r\n\r\n")
                if end >= 0:
                    break
                self._fill()
            if self.buf[9:12] != b"200":
                bad += 1
            cl = CL_RE.search(self.buf, 0, end + 2)
            if not cl:
                raise BenchError("response without Content-Length")
            total = end + 4 + int(cl.group(1))
            while len(self.buf) < total:
                self._fill()
            del self.buf[:total]
        return bad

    def get(self, path="/", headers=()):
        self.send(request_bytes(path, headers))
        return self.read_response()


def fetch(port, path="/", headers=(), timeout=3.0):
    with Conn(port, timeout=timeout) as c:
        return c.get(path, headers)


def check(port, path, headers, body, content_type="text/plain"):
    """Fetch once; raise BenchError unless 200 with exactly body."""
    try:
        status, hdrs, got = fetch(port, path, headers)
    except OSError as e:
        raise BenchError("GET %s: %s" % (path, e))
    if status != 200:
        raise BenchError("GET %s returned status %d" % (path, status))
    if got != body:
        raise BenchError("GET %s returned body %s, expected %s" % (
            path, common.clip(got), common.clip(body)))
    ctype = hdrs.get("content-type", "")
    if content_type and not ctype.lower().startswith(content_type):
        raise BenchError("GET %s returned content-type %r" % (path, ctype))


def check_json_list(port, path, items):
    """Fetch once; raise BenchError unless 200 with a JSON list of `items`
    entries (application/json): the py-json row's frameworks format their
    JSON each their own way."""
    import json
    try:
        status, hdrs, got = fetch(port, path)
    except OSError as e:
        raise BenchError("GET %s: %s" % (path, e))
    if status != 200:
        raise BenchError("GET %s returned status %d" % (path, status))
    try:
        n = len(json.loads(got))
    except ValueError:
        raise BenchError("GET %s returned no JSON: %r" % (path, got[:80]))
    if n != items:
        raise BenchError("GET %s returned %d items, expected %d" % (
            path, n, items))
    if not hdrs.get("content-type", "").startswith("application/json"):
        raise BenchError("GET %s returned content-type %r" % (
            path, hdrs.get("content-type")))


def wait_answering(port, proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError("server exited with status %s" % proc.returncode)
        try:
            fetch(port, timeout=1.0)
            return
        except (OSError, BenchError) as e:
            last = e
            time.sleep(0.05)
    raise BenchError("server did not answer on port %d: %s" % (port, last))


def tern_stats(port, conn=None):
    """tern's counters (the reference server's GET /stats) as a dict."""
    if conn is not None:
        status, _, body = conn.get("/stats")
    else:
        status, _, body = fetch(port, "/stats")
    if status != 200:
        raise BenchError("GET /stats returned %d" % status)
    return json.loads(body)


# ---------------------------------------------------------------------------
# fixed-count clients (perf gate)

def keepalive(conn, count, path="/", headers=()):
    """count requests one at a time on conn; returns non-200 count."""
    req = request_bytes(path, headers)
    bad = 0
    for _ in range(count):
        conn.send(req)
        bad += conn.skip_responses(1)
    return bad


def pipelined(conn, count, depth=16, path="/", headers=()):
    """count requests in batches of depth back-to-back requests."""
    req = request_bytes(path, headers)
    bad = 0
    left = count
    while left > 0:
        n = min(depth, left)
        conn.send(req * n)
        bad += conn.skip_responses(n)
        left -= n
    return bad


def churn(port, count, path="/", headers=()):
    """count connections, one request each (Connection: close)."""
    req = request_bytes(path, headers, close=True)
    bad = 0
    for _ in range(count):
        with Conn(port) as c:
            c.send(req)
            bad += c.skip_responses(1)
    return bad
