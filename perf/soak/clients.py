"""Small protocol clients for the soak: HTTP/1.1 (the test harness's strict
Conn), a raw HTTP/2 client with flow control in both directions, and a raw
WebSocket codec that runs over either carrier. Standard library only.

The HTTP/2 client does not decode HPACK: the soak checks a response by its
body (which it knows exactly) and by the first byte of the header block,
which nghttp2's encoder writes as the static-table index of :status when
the status is 200 (0x88).  That is enough to tell a valid answer from a
wrong one without a decoder.
"""

import base64
import hashlib
import os
import socket
import ssl
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "test",
                                                 "net")))
from harness import (Conn, Closed, ProtocolError,  # noqa: E402,F401
                     build_request)
from http2 import test_h2 as h2  # noqa: E402 (frame and HPACK helpers)

HOST = "127.0.0.1"
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
HELLO = b"Hello, World!"
STATUS_200 = 0x88


class Lost(Exception):
    """A well-behaved request that got no valid answer."""


def tcp(port, timeout=10.0):
    s = socket.create_connection((HOST, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def tls_context(alpn):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # self-signed, and swapped by reloads
    ctx.set_alpn_protocols(alpn)
    return ctx


def tls(port, alpn, timeout=10.0):
    s = tls_context(alpn).wrap_socket(tcp(port, timeout),
                                      server_hostname="localhost")
    got = s.selected_alpn_protocol()
    if got != alpn[0]:
        s.close()
        raise Lost("ALPN chose %r, wanted %r" % (got, alpn[0]))
    return s


def set_rst(sock):
    """Close with a reset rather than a FIN (SO_LINGER 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                        struct.pack("ii", 1, 0))
    except OSError:
        pass


def close_quietly(sock):
    try:
        sock.close()
    except OSError:
        pass


# ---------------------------------------------------------------------------
# WebSocket frames

def mask(data, key):
    """XOR with the 4-byte key, done on one big integer (fast in CPython)."""
    if not data:
        return b""
    n = len(data)
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^
            int.from_bytes(k, "little")).to_bytes(n, "little")


def ws_frame(opcode, payload=b"", fin=True):
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    key = os.urandom(4)
    return head + key + mask(payload, key)


def ws_parse(buf):
    """One server frame from the front of `buf` (a bytearray), removed from
    it: (fin, opcode, payload), or None when it is not all there yet."""
    if len(buf) < 2:
        return None
    b0, b1 = buf[0], buf[1]
    if b1 & 0x80:
        raise ProtocolError("a masked server frame")
    n, off = b1 & 0x7F, 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, off = struct.unpack("!H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, off = struct.unpack("!Q", buf[2:10])[0], 10
    if len(buf) < off + n:
        return None
    payload = bytes(buf[off:off + n])
    del buf[:off + n]
    return bool(b0 & 0x80), b0 & 0x0F, payload


def ws_key():
    return base64.b64encode(os.urandom(16)).decode()


class WsH1:
    """A WebSocket over an HTTP/1.1 connection (plain or TLS socket)."""

    def __init__(self, sock, path="/ws", timeout=10.0):
        self.c = Conn(sock=sock, timeout=timeout)
        key = ws_key()
        self.c.send(build_request("GET", path, [
            ("Upgrade", "websocket"), ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Version", "13")]))
        r = self.c.head(time.monotonic() + timeout)
        want = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest())
        if r.status != 101 or \
                r.headers.get("sec-websocket-accept", "").encode() != want:
            raise Lost("WebSocket handshake: %d" % r.status)
        self.timeout = timeout

    def send(self, opcode, payload):
        self.c.send(ws_frame(opcode, payload))

    def recv(self):
        """The next whole message (opcode, payload), pongs skipped."""
        deadline = time.monotonic() + self.timeout
        parts, first = [], None
        while True:
            f = ws_parse(self.c.buf)
            if f is None:
                self.c._fill(deadline)
                continue
            fin, op, payload = f
            if op == 0xA:
                continue
            if op == 0x8:
                return op, payload
            if first is None:
                first = op
            parts.append(payload)
            if fin:
                return first, b"".join(parts)

    def echo(self, opcode, payload):
        self.send(opcode, payload)
        op, got = self.recv()
        if op != opcode or got != payload:
            raise Lost("WebSocket echo of %d bytes: got op %d, %d bytes"
                       % (len(payload), op, len(got)))

    def close(self):
        """The close handshake: our 1000, the server's echo, then EOF."""
        try:
            self.send(0x8, struct.pack("!H", 1000))
            op, payload = self.recv()
            if op != 0x8:
                raise Lost("no close frame back")
        finally:
            self.c.close()


# ---------------------------------------------------------------------------
# HTTP/2

class Stream:
    def __init__(self, sid):
        self.sid = sid
        self.blocks = []
        self.data = bytearray()
        self.ended = False
        self.rst = None
        self.window = 0


class H2Client:
    """A raw HTTP/2 connection that respects the server's flow control on
    what it sends and gives every DATA byte's credit back at once."""

    WINDOW = 1 << 20

    def __init__(self, sock, preface=True, timeout=10.0):
        self.sock = sock
        self.timeout = timeout
        self.buf = bytearray()
        self.streams = {}
        self.next_sid = 1
        self.peer_initial = 65535
        self.peer_max_frame = 16384
        self.conn_window = 65535
        self.goaway = None
        if preface:
            self.sock.sendall(h2.PREFACE + self.client_settings())

    def client_settings(self):
        return h2.settings([(h2.S_INITIAL_WINDOW_SIZE, self.WINDOW),
                            (h2.S_ENABLE_PUSH, 0)]) + \
            h2.window_update(0, (1 << 24))

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        close_quietly(self.sock)

    def read_frame(self, deadline):
        while True:
            if len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + n:
                    t, fl = self.buf[3], self.buf[4]
                    sid = int.from_bytes(self.buf[5:9], "big") & 0x7fffffff
                    p = bytes(self.buf[9:9 + n])
                    del self.buf[:9 + n]
                    return t, fl, sid, p
            left = deadline - time.monotonic()
            if left <= 0:
                raise Lost("HTTP/2: timed out")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 18)
            except socket.timeout:
                raise Lost("HTTP/2: timed out")
            except (ConnectionResetError, ssl.SSLError) as e:
                raise Lost("HTTP/2: connection lost (%s)" % e)
            if not chunk:
                raise Lost("HTTP/2: connection closed (GOAWAY %r)"
                           % (self.goaway,))
            self.buf += chunk

    def pump(self, deadline):
        """Read and handle one frame."""
        t, fl, sid, p = self.read_frame(deadline)
        if t == h2.SETTINGS and not fl & h2.ACK:
            for i in range(0, len(p) - 5, 6):
                k, v = struct.unpack(">HI", p[i:i + 6])
                if k == h2.S_INITIAL_WINDOW_SIZE:
                    for s in self.streams.values():
                        s.window += v - self.peer_initial
                    self.peer_initial = v
                elif k == h2.S_MAX_FRAME_SIZE:
                    self.peer_max_frame = v
            self.send(h2.frame(h2.SETTINGS, h2.ACK, 0))
        elif t == h2.PING and not fl & h2.ACK:
            self.send(h2.frame(h2.PING, h2.ACK, 0, p))
        elif t == h2.WINDOW_UPDATE:
            inc = struct.unpack(">I", p)[0] & 0x7fffffff
            if sid == 0:
                self.conn_window += inc
            elif sid in self.streams:
                self.streams[sid].window += inc
        elif t == h2.GOAWAY:
            self.goaway = struct.unpack(">II", p[:8])
        s = self.streams.get(sid)
        if s is None or sid == 0:
            if t == h2.DATA and p:
                self.send(h2.window_update(0, len(p)))
            return
        if t == h2.HEADERS or t == h2.CONTINUATION:
            s.blocks.append(p)
        elif t == h2.DATA:
            s.data += p
            if p:
                credit = h2.window_update(0, len(p))
                if not fl & h2.END_STREAM:
                    credit += h2.window_update(sid, len(p))
                self.send(credit)
        elif t == h2.RST_STREAM:
            s.rst = struct.unpack(">I", p)[0]
            s.ended = True
        if t in (h2.DATA, h2.HEADERS) and fl & h2.END_STREAM:
            s.ended = True

    def open(self, fields, end_stream):
        sid = self.next_sid
        self.next_sid += 2
        s = Stream(sid)
        s.window = self.peer_initial
        self.streams[sid] = s
        block = b"".join(h2.hpack_literal(n, v) for n, v in fields)
        self.send(h2.headers(sid, block, end_stream=end_stream))
        return s

    def request(self, method, path, body=None, scheme="http"):
        fields = [(":method", method), (":scheme", scheme), (":path", path),
                  (":authority", "localhost")]
        if body is not None:
            fields.append(("content-length", str(len(body))))
        s = self.open(fields, end_stream=body is None)
        if body is not None:
            self.send_data(s, body, end_stream=True)
        return s

    def send_data(self, s, data, end_stream=False, deadline=None):
        """DATA within the peer's windows; reads frames while blocked."""
        deadline = deadline or time.monotonic() + self.timeout
        view = memoryview(data)
        while True:
            if not view:
                if end_stream:
                    self.send(h2.frame(h2.DATA, h2.END_STREAM, s.sid))
                return
            n = min(len(view), s.window, self.conn_window,
                    self.peer_max_frame)
            if n <= 0:
                if s.ended:
                    raise Lost("HTTP/2: stream %d ended while sending"
                               % s.sid)
                self.pump(deadline)
                continue
            last = n == len(view)
            self.send(h2.frame(h2.DATA, h2.END_STREAM
                               if (end_stream and last) else 0,
                               s.sid, bytes(view[:n])))
            s.window -= n
            self.conn_window -= n
            view = view[n:]
            if last:
                return

    def wait(self, streams, deadline=None):
        deadline = deadline or time.monotonic() + self.timeout
        while not all(s.ended for s in streams):
            self.pump(deadline)
        for s in streams:
            del self.streams[s.sid]

    def check(self, s, body):
        if s.rst is not None:
            raise Lost("HTTP/2: stream %d reset (%d)" % (s.sid, s.rst))
        if not s.blocks or not s.blocks[0] or s.blocks[0][0] != STATUS_200:
            raise Lost("HTTP/2: stream %d: not a 200 (%r)"
                       % (s.sid, s.blocks[0][:8] if s.blocks else None))
        if bytes(s.data) != body:
            raise Lost("HTTP/2: stream %d: wrong body (%d bytes, wanted %d)"
                       % (s.sid, len(s.data), len(body)))


def h2c_upgrade(port, timeout=10.0):
    """An HTTP/1.1 connection upgraded to h2c by GET /big?bytes=100; the
    client, with the upgraded request's answer checked."""
    c = Conn(sock=tcp(port, timeout), timeout=timeout)
    c.send(build_request("GET", "/big?bytes=100", [
        ("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"),
        ("HTTP2-Settings", "AAMAAABkAAQAoAAA")]))
    r = c.head(time.monotonic() + timeout)
    if r.status != 101:
        c.close()
        raise Lost("h2c upgrade: %d" % r.status)
    cl = H2Client(c.sock, preface=False, timeout=timeout)
    cl.buf = bytearray(c.buf)
    s = Stream(1)
    s.window = cl.peer_initial
    cl.streams[1] = s
    cl.next_sid = 3
    cl.send(h2.PREFACE + cl.client_settings())
    cl.wait([s])
    if s.rst is not None or bytes(s.data) != b"x" * 100:
        cl.close()
        raise Lost("h2c upgrade: stream 1 got %d bytes" % len(s.data))
    return cl


class WsH2:
    """A WebSocket on an HTTP/2 stream (RFC 8441 extended CONNECT)."""

    def __init__(self, cl, path="/ws", scheme="http"):
        self.cl = cl
        self.s = cl.open([(":method", "CONNECT"), (":protocol", "websocket"),
                          (":scheme", scheme), (":path", path),
                          (":authority", "localhost"),
                          ("sec-websocket-version", "13")], end_stream=False)
        deadline = time.monotonic() + cl.timeout
        while not self.s.blocks and not self.s.ended:
            cl.pump(deadline)
        if self.s.ended or self.s.blocks[0][:1] != bytes([STATUS_200]):
            raise Lost("WebSocket over HTTP/2: CONNECT refused")

    def echo(self, opcode, payload):
        self.cl.send_data(self.s, ws_frame(opcode, payload))
        deadline = time.monotonic() + self.cl.timeout
        while True:
            f = ws_parse(self.s.data)
            if f is not None:
                fin, op, got = f
                if op == 0xA:
                    continue
                if op != opcode or got != payload or not fin:
                    raise Lost("WebSocket over HTTP/2: echo of %d bytes: "
                               "op %d, %d bytes" % (len(payload), op,
                                                   len(got)))
                return
            if self.s.ended:
                raise Lost("WebSocket over HTTP/2: stream ended")
            self.cl.pump(deadline)

    def close(self):
        self.cl.send_data(self.s, ws_frame(0x8, struct.pack("!H", 1000)))
        self.cl.wait([self.s])
