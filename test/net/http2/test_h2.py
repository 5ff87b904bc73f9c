#!/usr/bin/env python3
"""HTTP/2 (h2c) over real sockets: curl, nghttp and h2load against the
reference server, then the defences, each driven by a raw socket that speaks
frames by hand.

Clients: curl (HTTP/2 built in), nghttp and h2load (Debian's
nghttp2-client, installed by test/deps.sh). Raw frames use a minimal HPACK
encoder (literal fields without indexing, no Huffman); responses are never
HPACK-decoded here: a raw test looks at frame types, stream ids, error
codes and DATA payloads, which are not compressed.
"""

import hashlib
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (HELLO_BODY, HOST, Conn, Server, Suite, build_request,
                     check, eq, sanitized, set_linger_rst,
                     shared_reference_teardown, stats_from, vmrss_kib)
from harness import binary as harness_binary

suite = Suite()
case = suite.case
srv = None


def setup():
    global srv
    srv = Server("reference")


def teardown():
    shared_reference_teardown(srv)


def url(port, path="/"):
    return "http://%s:%d%s" % (HOST, port, path)


def run(cmd, timeout=60, input=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, input=input)
    return p.returncode, p.stdout, p.stderr


def curl(args, timeout=60):
    """curl with prior knowledge; returns (body, status, http_version)."""
    rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge",
                        "-w", "\n%{http_code} %{http_version}"] + args,
                       timeout)
    if rc != 0:
        raise AssertionError("curl %r failed (%d): %s" % (args, rc, err))
    body, _, tail = out.rpartition(b"\n")
    status, version = tail.decode().split()
    return body, int(status), version


def check_serves(port):
    """A fresh HTTP/2 connection still gets GET / right."""
    body, status, version = curl([url(port)], timeout=10)
    eq((status, version, body), (200, "2", HELLO_BODY), "GET / afterwards")


# ---------------------------------------------------------------------------
# Raw HTTP/2 frames

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, \
    WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0, 1, 2, 3
STREAM_CLOSED = 5
REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 7, 8, 0xb
S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS, \
    S_INITIAL_WINDOW_SIZE, S_MAX_FRAME_SIZE, S_MAX_HEADER_LIST_SIZE = \
    range(1, 7)


def frame(ftype, flags, sid, payload=b""):
    return (struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) +
            struct.pack(">I", sid & 0x7fffffff) + payload)


def settings(pairs=()):
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", k, v)
                                          for k, v in pairs))


def window_update(sid, inc):
    return frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", inc))


def rst_stream(sid, code=CANCEL):
    return frame(RST_STREAM, 0, sid, struct.pack(">I", code))


def hpack_int(value, prefix, first=0):
    top = (1 << prefix) - 1
    if value < top:
        return bytes([first | value])
    out = bytearray([first | top])
    value -= top
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name, value, index=False):
    """A literal field with a new name: without indexing, or with
    incremental indexing (it enters the decoder's dynamic table)."""
    if isinstance(name, str):
        name = name.encode()
    if isinstance(value, str):
        value = value.encode()
    return (b"\x40" if index else b"\x00") + hpack_int(len(name), 7) + \
        name + hpack_int(len(value), 7) + value


def request_block(method="GET", path="/", extra=()):
    fields = [(":method", method), (":scheme", "http"), (":path", path),
              (":authority", "x")] + list(extra)
    return b"".join(hpack_literal(n, v) for n, v in fields)


def headers(sid, block, end_stream=True, end_headers=True):
    flags = (END_STREAM if end_stream else 0) | \
        (END_HEADERS if end_headers else 0)
    return frame(HEADERS, flags, sid, block)


class H2:
    """A raw client connection: preface and SETTINGS sent at once."""

    def __init__(self, port, pairs=(), rcvbuf=None, timeout=5.0,
                 preface=True):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(timeout)
        s.connect((HOST, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s
        self.buf = bytearray()
        self.eof = False
        if preface:
            self.send(PREFACE + settings(pairs))

    def send(self, data):
        self.sock.sendall(data)

    def send_some(self, data, timeout=2.0):
        """Send what the peer takes within `timeout` (it may stop reading);
        returns the byte count sent."""
        sent = 0
        while sent < len(data):
            _, w, _ = select.select([], [self.sock], [], timeout)
            if not w:
                break
            try:
                n = self.sock.send(data[sent:sent + 65536])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += n
        return sent

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out (have %d bytes)" % len(self.buf))
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def read_frame(self, timeout=5.0):
        """The next frame (type, flags, sid, payload), or None at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + n:
                    t, fl = self.buf[3], self.buf[4]
                    sid = int.from_bytes(self.buf[5:9], "big") & 0x7fffffff
                    payload = bytes(self.buf[9:9 + n])
                    del self.buf[:9 + n]
                    return t, fl, sid, payload
            if self.eof or not self._fill(deadline):
                return None

    def frames_until_close(self, timeout=10.0):
        """Every frame until the server closes. Raises on a timeout."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            f = self.read_frame(max(0.01, deadline - time.monotonic()))
            if f is None:
                return out
            out.append(f)


def goaway_code(frames):
    codes = [struct.unpack(">II", p[:8])[1] for t, _, _, p in frames
             if t == GOAWAY]
    return codes[-1] if codes else None


def collect_streams(conn, want, timeout=10.0):
    """Read until every stream id in `want` has ended (END_STREAM or
    RST_STREAM), acknowledging SETTINGS and giving DATA's window credit
    back as a real client does. Returns {sid: (body, rst_code or None)}."""
    bodies = {sid: bytearray() for sid in want}
    done = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(want):
        f = conn.read_frame(max(0.01, deadline - time.monotonic()))
        if f is None:
            raise AssertionError("closed with streams open: %r"
                                 % sorted(set(want) - set(done)))
        t, fl, sid, p = f
        if t == SETTINGS and not fl & ACK:
            conn.send(frame(SETTINGS, ACK, 0))
        if t == DATA and p:
            conn.send(window_update(0, len(p)) +
                      (window_update(sid, len(p)) if sid not in done and
                       not fl & END_STREAM else b""))
        if sid not in bodies:
            continue
        if t == DATA:
            bodies[sid] += p
        if t == RST_STREAM:
            done[sid] = (bytes(bodies[sid]), struct.unpack(">I", p)[0])
        elif t in (DATA, HEADERS) and fl & END_STREAM:
            done[sid] = (bytes(bodies[sid]), None)
    return done


# ---------------------------------------------------------------------------
# Clients: curl, nghttp, h2load


@case
def prior_knowledge_get():
    body, status, version = curl([url(srv.port)])
    eq((status, version, body), (200, "2", HELLO_BODY), "GET /")
    rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge", "-D", "-",
                        "-o", "/dev/null", url(srv.port)])
    eq(rc, 0, "curl rc")
    head = out.decode().lower()
    check(head.startswith("http/2 200"), "status line %r" % head[:40])
    check("content-length: 13\r\n" in head, "content-length in %r" % head)
    check("content-type: text/plain\r\n" in head, "content-type")
    check(re.search(r"\r\ndate: \w{3}, \d\d \w{3} \d{4} ", head),
          "date in %r" % head)
    for bad in ("connection:", "transfer-encoding:", "keep-alive:"):
        check(bad not in head, "%s sent over HTTP/2" % bad)


@case
def h2c_upgrade_curl():
    rc, out, err = run(["curl", "-sS", "--http2", "-w",
                        "\n%{http_code} %{http_version}", url(srv.port)])
    eq(rc, 0, "curl rc (%s)" % err)
    eq(out, HELLO_BODY + b"\n200 2", "curl --http2 (upgrade)")
    # A request with a body is served as HTTP/1.1 (the upgrade is ignored).
    rc, out, err = run(["curl", "-sS", "--http2", "--data-binary", "abc",
                        "-w", "\n%{http_code} %{http_version}",
                        url(srv.port, "/collect")])
    eq(out, b"abc\n200 1.1", "upgrade with a body")


@case
def h2c_upgrade_raw():
    with Conn(srv.port) as c:
        c.send(build_request("GET", "/big?bytes=100", [
            ("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"),
            ("HTTP2-Settings", "AAMAAABkAAQAoAAA")]))
        r = c.head()
        eq(r.status, 101, "status")
        eq(r.headers.get("upgrade"), "h2c", "Upgrade")
        h2 = H2(srv.port, preface=False)
        h2.sock.close()
        h2.sock = c.sock
        h2.buf = bytearray(c.buf)
        h2.send(PREFACE + settings())
        got = collect_streams(h2, [1])
        eq(got[1], (b"x" * 100, None), "stream 1 (the upgraded request)")
        # The connection goes on as HTTP/2.
        h2.send(headers(3, request_block()))
        eq(collect_streams(h2, [3])[3], (HELLO_BODY, None), "stream 3")
    # Other upgrades, or h2c without HTTP2-Settings, stay HTTP/1.1.
    with Conn(srv.port) as c:
        r = c.request("GET", "/", [("Connection", "Upgrade"),
                                   ("Upgrade", "h2c")])
        eq((r.status, r.version, r.body), (200, (1, 1), HELLO_BODY),
           "h2c upgrade without HTTP2-Settings")
        r = c.request("GET", "/", [("Connection", "Upgrade, HTTP2-Settings"),
                                   ("Upgrade", "websocket"),
                                   ("HTTP2-Settings", "")])
        eq((r.status, r.body), (200, HELLO_BODY), "other upgrade")


@case
def failed_stream_reset_alone():
    """One handler's answer fails on the worker (another thread writes
    past the length it announced): its stream is reset with
    INTERNAL_ERROR, and the stream beside it on the same connection is
    still answered. The whole connection used to close, without GOAWAY,
    taking the other stream's answer with it."""
    with H2(srv.port) as h:
        h.send(headers(1, request_block("GET", "/defer?ms=200")) +
               headers(3, request_block("GET", "/overrun")))
        got = collect_streams(h, [1, 3])
        eq(got[3], (b"", INTERNAL_ERROR), "the failed stream")
        eq(got[1], (b"deferred", None), "the other stream")
        h.send(headers(5, request_block()))
        eq(collect_streams(h, [5])[5], (HELLO_BODY, None),
           "the connection still serves")


@case
def preface_trickled_and_late():
    # The preface one byte at a time: the server waits for all of it.
    with H2(srv.port, preface=False) as h:
        for b in PREFACE:
            h.send(bytes([b]))
            time.sleep(0.002)
        h.send(settings() + headers(1, request_block()))
        eq(collect_streams(h, [1])[1], (HELLO_BODY, None), "after trickle")
    # After an HTTP/1.1 request the preface is not HTTP/2 any more.
    with Conn(srv.port) as c:
        eq(c.request("GET", "/").body, HELLO_BODY, "HTTP/1.1 first")
        c.send(PREFACE)
        r = c.response()
        check(r.status in (400, 505), "late preface got %d" % r.status)


@case
def http2_only_listener():
    """A listener with http2_only (the reference server's --h2c-port)
    speaks HTTP/2 with prior knowledge alone: a real client is served, and
    an invalid preface, or an HTTP/1.1 request, is a connection error,
    GOAWAY PROTOCOL_ERROR then the close (RFC 9113 3.4; h2spec 3.5/2),
    where the port that also speaks HTTP/1.1 answers such bytes as an
    HTTP/1.1 request: 400."""
    with Server("reference", ["--h2c-port", "0"]) as s:
        m = re.match(r"h2c listening on (\d+)$", s.next_line())
        check(m is not None, "no h2c line")
        port = int(m.group(1))
        rc, out, err = run(["nghttp", "-n", "-s", url(port)])
        eq(rc, 0, "nghttp rc (%s)" % err)
        for bad in (b"INVALID CONNECTION PREFACE\r\n\r\n",
                    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                    PREFACE[:-6] + b"XX\r\n\r\n"):
            with H2(port, preface=False) as h:
                h.send(bad)
                frames = h.frames_until_close()
                eq(goaway_code(frames), 1, "GOAWAY PROTOCOL_ERROR for %r "
                   "(frames %r)" % (bad, [f[0] for f in frames]))
        with Conn(s.port) as c:
            c.send(b"INVALID CONNECTION PREFACE\r\n\r\n")
            eq(c.response().status, 400, "the HTTP/1.1 port")


@case
def nghttp_frames():
    rc, out, err = run(["nghttp", "-nv", url(srv.port)])
    eq(rc, 0, "nghttp rc (%s)" % err)
    text = out.decode()
    for want in ("recv SETTINGS frame", "SETTINGS_MAX_CONCURRENT_STREAMS(0x03)"
                 ":100", "recv HEADERS frame", "recv DATA frame",
                 ":status: 200", "content-length: 13"):
        check(want in text, "nghttp -nv lacks %r:\n%s" % (want, text[-2000:]))


def h2load(args, timeout=120):
    rc, out, err = run(["h2load"] + args, timeout)
    text = out.decode()
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                  r"(\d+) succeeded, (\d+) failed, (\d+) errored", text)
    s = re.search(r"status codes: (\d+) 2xx", text)
    if rc != 0 or not m or not s:
        raise AssertionError("h2load %r: rc %d\n%s%s" % (args, rc, text,
                                                        err.decode()))
    return [int(x) for x in m.groups()], int(s.group(1)), text


@case(timeout=120)
def h2load_100k():
    nums, ok2xx, text = h2load(["-n", "100000", "-c", "4", "-m", "100",
                                url(srv.port)])
    eq(nums, [100000, 100000, 100000, 100000, 0, 0], "h2load requests")
    eq(ok2xx, 100000, "2xx")
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", text)
    suite.note("h2load -c 4 -m 100: %s req/s" % (m.group(1) if m else "?"))


@case(timeout=120)
def h2load_echo_uploads():
    with tempfile.NamedTemporaryFile() as f:
        f.write(os.urandom(300000))
        f.flush()
        nums, ok2xx, _ = h2load(["-n", "600", "-c", "3", "-m", "50", "-d",
                                 f.name, url(srv.port, "/echo")])
    eq(nums, [600, 600, 600, 600, 0, 0], "h2load POST /echo")
    eq(ok2xx, 600, "2xx")


@case(timeout=60)
def interleaved_echo_streams():
    """40 uploads on one connection, their DATA frames interleaved in 1 KiB
    pieces; every echo must come back byte-identical on its own stream."""
    n = 40
    bodies = {1 + 2 * i: os.urandom(20000 + 997 * i) for i in range(n)}
    with H2(srv.port, [(S_INITIAL_WINDOW_SIZE, 1 << 20)]) as h:
        h.send(window_update(0, (1 << 30)))
        out = bytearray()
        for sid in bodies:
            out += headers(sid, request_block("POST", "/echo"),
                           end_stream=False)
        offsets = dict.fromkeys(bodies, 0)
        while offsets:
            for sid in list(offsets):
                off = offsets[sid]
                piece = bodies[sid][off:off + 1024]
                last = off + len(piece) >= len(bodies[sid])
                out += frame(DATA, END_STREAM if last else 0, sid, piece)
                if last:
                    del offsets[sid]
                else:
                    offsets[sid] = off + len(piece)
        # The uploads fit the initial 64 KiB stream windows; the total
        # passes the connection's, so send while reading.
        t = threading.Thread(target=h.send, args=(bytes(out),), daemon=True)
        t.start()
        got = collect_streams(h, list(bodies), timeout=30)
        t.join(5)
    for sid, body in bodies.items():
        eq(got[sid][1], None, "stream %d reset" % sid)
        check(got[sid][0] == body, "stream %d: echo differs (%d vs %d bytes)"
              % (sid, len(got[sid][0]), len(body)))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@case(timeout=120)
def upload_64mib():
    with tempfile.NamedTemporaryFile() as f:
        for _ in range(64):
            f.write(os.urandom(1 << 20))
        f.flush()
        want = sha256_file(f.name)
        for path in ("/echo", "/collect"):
            with Server("reference", ["--max-body", str(80 << 20)]) as s:
                rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge",
                                    "--data-binary", "@" + f.name,
                                    "-w", "%{http_code} %{http_version}",
                                    "-o", "-", url(s.port, path)], 100)
                eq(rc, 0, "curl rc (%s)" % err)
                body, tail = out[:-len(b"200 2")], out[-len(b"200 2"):]
                eq(tail, b"200 2", path + " status")
                eq(len(body), 64 << 20, path + " length")
                eq(hashlib.sha256(body).hexdigest(), want, path + " sha256")


@case
def throttled_reader_is_credited():
    """A handler that pauses its reading after each piece and resumes from
    another thread, writing nothing until the end (/upload?pause=2): each
    resume hands the held bytes over, and the window credit for them must
    go out then. The WINDOW_UPDATE once stayed inside nghttp2 until some
    other frame was sent, so a 1 MiB upload stalled at the first window
    (64 KiB) for good."""
    with tempfile.NamedTemporaryFile() as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge",
                            "--max-time", "20", "--data-binary", "@" + f.name,
                            url(srv.port, "/upload?pause=2")], 30)
    eq(rc, 0, "curl rc (%s)" % err)
    eq(out, b"%d" % (1 << 20), "bytes the handler counted")
    check_serves(srv.port)


@case
def collect_too_large_413():
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"x" * (9 << 20))  # over the reference server's default 8 MiB
        f.flush()
        rc, out, err = run(["nghttp", "-v", "-d", f.name,
                            url(srv.port, "/collect")])
    text = out.decode()
    check(":status: 413" in text, "no 413:\n%s" % text[-1500:])
    check("RST_STREAM" in text and "NO_ERROR" in text,
          "no RST_STREAM(NO_ERROR) after the early answer")
    check_serves(srv.port)


def settle_credit(h2, avail, quiet=0.3, resets=None):
    """Read until nothing has come for `quiet` seconds, acknowledging
    SETTINGS and adding each WINDOW_UPDATE's credit to avail[sid]. With
    `resets` (a dict), RST_STREAM codes go there by stream; without, a
    reset fails, as a GOAWAY or a close always does."""
    while True:
        try:
            f = h2.read_frame(quiet)
        except socket.timeout:
            return
        check(f is not None, "closed with credit %r" % avail)
        t, fl, sid, p = f
        check(t != GOAWAY and (t != RST_STREAM or resets is not None),
              "frame type %d on stream %d" % (t, sid))
        if t == SETTINGS and not fl & ACK:
            h2.send(frame(SETTINGS, ACK, 0))
        elif t == WINDOW_UPDATE:
            avail[sid] = avail.get(sid, 0) + struct.unpack(">I", p)[0]
        elif t == RST_STREAM:
            resets[sid] = struct.unpack(">I", p)[0]


@case
def stream_window_grows_while_handler_keeps_up():
    """The inbound window policy over the wire: a handler that keeps up
    (POST /upload reads and drops) has the stream's window grow past the
    initial 64 KiB, doubling each time a whole window has been taken; a
    window that never grew would never offer more than 65535 bytes. The
    next upload on the connection starts from the window the first
    earned."""
    with H2(srv.port) as h2:
        h2.send(headers(1, request_block("POST", "/upload"),
                        end_stream=False))
        avail = {0: 65535, 1: 65535}
        seen = []

        def settle():
            settle_credit(h2, avail)

        for _ in range(6):
            settle()
            seen.append(avail[1])
            while avail[1] > 0:
                n = min(16384, avail[1], avail[0])
                check(n > 0, "no connection window (%r)" % avail)
                h2.send(frame(DATA, 0, 1, b"u" * n))
                avail[0] -= n
                avail[1] -= n
        settle()
        seen.append(avail[1])
        print("# windows offered: %r" % seen)
        check(seen[0] == 65535, "the initial window: %r" % seen)
        check(seen == sorted(seen), "the window only grows: %r" % seen)
        check(seen[-1] >= 8 * 65535 and seen[-1] <= 8 << 20,
              "grown, within 8 MiB: %r" % seen)
        h2.send(frame(DATA, END_STREAM, 1))
        body, rst = collect_streams(h2, [1])[1]
        eq(rst, None, "the upload ends cleanly")
        # The next upload on the connection starts from what the first
        # earned once its handler has taken bytes, not from 64 KiB again.
        settle()
        h2.send(headers(3, request_block("POST", "/upload"),
                        end_stream=False))
        avail[3] = 65535
        n = min(16384, avail[0])
        h2.send(frame(DATA, 0, 3, b"v" * n))
        avail[0] -= n
        avail[3] -= n
        settle()
        print("# the second stream's window: %d" % avail[3])
        check(avail[3] >= seen[-1] - n and avail[3] <= 8 << 20,
              "stream 3 adopts %d: %d" % (seen[-1], avail[3]))
        h2.send(frame(DATA, END_STREAM, 3))
        eq(collect_streams(h2, [3])[3][1], None, "the second upload ends")


@case(timeout=60)
def aborted_uploads_give_their_bytes_back():
    """A handler that cuts its upload short inside the body callback
    (POST /upload?abort=1: tern_response_abort on the first bytes) resets
    the stream there and then. The bytes that callback took were then
    neither held nor owed, and went back to no window: each such stream
    kept up to a DATA frame of the connection's window for good, and with
    the connection window pinned at 64 KiB the fifth upload found none
    left. Twenty aborted uploads later the client's connection credit is
    whole again and a 256 KiB upload goes through."""
    with Server("reference", ["--max-conn-window", "65536"]) as s, \
            H2(s.port) as h2:
        avail = {0: 65535}
        rst = {}

        def settle(quiet=0.3):
            settle_credit(h2, avail, quiet, rst)

        for i in range(20):
            sid = 1 + 2 * i
            check(avail[0] >= 16384, "upload %d: connection credit %d: "
                  "the aborted uploads before it kept theirs"
                  % (i + 1, avail[0]))
            h2.send(headers(sid, request_block("POST", "/upload?abort=1"),
                            end_stream=False) +
                    frame(DATA, 0, sid, b"a" * 16384))
            avail[0] -= 16384
            settle()
            eq(rst.get(sid), INTERNAL_ERROR, "upload %d reset" % (i + 1))
        # 65536: the pinned window (one byte over the protocol's start)
        check(avail[0] in (65535, 65536), "connection credit after 20 "
              "aborted uploads: %d" % avail[0])
        sid = 41
        h2.send(headers(sid, request_block("POST", "/upload"),
                        end_stream=False))
        avail[sid] = 65535
        sent = 0
        while sent < 256 << 10:
            n = min(16384, avail[0], avail[sid], (256 << 10) - sent)
            if n == 0:
                settle(0.1)
                check(min(avail[0], avail[sid]) > 0,
                      "no credit after %d bytes: %r" % (sent, avail))
                continue
            h2.send(frame(DATA, 0, sid, b"b" * n))
            avail[0] -= n
            avail[sid] -= n
            sent += n
        h2.send(frame(DATA, END_STREAM, sid))
        body, code = collect_streams(h2, [sid])[sid]
        eq((body, code), (b"%d" % (256 << 10), None), "the next upload")


def upload_credit(port, total):
    """POST /upload of `total` bytes on a raw connection that sends all
    the credit it has whenever it has any. Returns (the server's announced
    SETTINGS_INITIAL_WINDOW_SIZE or None, the most stream and connection
    credit outstanding at any time, the response body). Credit is what
    the client may still send: the window announced less what it has sent,
    which never exceeds the server's window, however fast either side."""
    with H2(port) as h2:
        init = None
        while True:  # the server's SETTINGS first: the stream window
            f = h2.read_frame(10)
            check(f is not None, "closed before SETTINGS")
            t, fl, sid, p = f
            if t == SETTINGS and not fl & ACK:
                for i in range(0, len(p), 6):
                    k, v = struct.unpack(">HI", p[i:i + 6])
                    if k == S_INITIAL_WINDOW_SIZE:
                        init = v
                h2.send(frame(SETTINGS, ACK, 0))
                break
        avail = {0: 65535, 1: 65535 if init is None else init}
        most = {0: avail[0], 1: avail[1]}
        h2.send(headers(1, request_block("POST", "/upload"),
                        end_stream=False))
        sent = 0
        while sent < total:
            n = min(16384, avail[0], avail[1], total - sent)
            if n > 0:
                h2.send(frame(DATA, 0, 1, b"w" * n))
                avail[0] -= n
                avail[1] -= n
                sent += n
                continue
            f = h2.read_frame(10)
            check(f is not None, "closed after %d bytes" % sent)
            t, fl, sid, p = f
            check(t not in (RST_STREAM, GOAWAY), "frame type %d" % t)
            if t == SETTINGS and not fl & ACK:
                h2.send(frame(SETTINGS, ACK, 0))
            elif t == WINDOW_UPDATE:
                avail[sid] = avail.get(sid, 0) + struct.unpack(">I", p)[0]
                if sid in most:
                    most[sid] = max(most[sid], avail[sid])
        h2.send(frame(DATA, END_STREAM, 1))
        body, rst = collect_streams(h2, [1], timeout=30)[1]
        eq(rst, None, "the upload ends cleanly")
        return init, most[1], most[0], body


@case(timeout=120)
def window_maxima_bound_credit():
    """--max-stream-window 65536 --max-conn-window 65536: through a 4 MiB
    upload the client never holds more than 64 KiB of credit on the stream
    or the connection (the connection's floor is the protocol's 65535),
    where the default grows past it; --max-stream-window 16384 is
    announced as the initial stream window and bounds the credit."""
    total = 4 << 20
    init, stream, conn, body = upload_credit(srv.port, total)
    print("# default: initial %r, most credit stream %d, connection %d"
          % (init, stream, conn))
    eq(body, b"%d" % total, "default: bytes reference counted")
    check(stream > 65536, "the default stream window grew: %d" % stream)
    with Server("reference", ["--max-stream-window", "65536",
                              "--max-conn-window", "65536"]) as s:
        init, stream, conn, body = upload_credit(s.port, total)
        print("# pinned: initial %r, most credit stream %d, connection %d"
              % (init, stream, conn))
        eq(body, b"%d" % total, "pinned: bytes reference counted")
        check(init in (None, 65535), "initial stream window %r" % init)
        check(stream <= 65536, "stream credit %d > 64 KiB" % stream)
        check(conn <= 65536, "connection credit %d > 64 KiB" % conn)
    with Server("reference", ["--max-stream-window", "16384"]) as s:
        init, stream, conn, body = upload_credit(s.port, 1 << 20)
        print("# 16 KiB: initial %r, most credit stream %d, connection %d"
              % (init, stream, conn))
        eq(init, 16384, "the initial stream window announced")
        check(stream <= 16384, "stream credit %d > 16 KiB" % stream)
        eq(body, b"%d" % (1 << 20), "16 KiB: bytes reference counted")


@case(timeout=30)
def window_maxima_refused():
    """reference --max-stream-window 1000 (below 16 KiB): tern refuses the
    settings and names the field; the reference server exits 1."""
    for args in (["--max-stream-window", "1000"],
                 ["--max-conn-window", str(2 << 30)]):
        p = subprocess.run([harness_binary("reference"), "--port", "0"] + args,
                           capture_output=True, timeout=10)
        eq(p.returncode, 1, "exit status for %r" % args)
        check(args[0][2:].replace("-", "_").encode() in p.stderr,
              "%r: stderr %r names the field" % (args, p.stderr))


@case(timeout=60)
def slow_reader_small_windows():
    # 1 MiB through 1023-byte stream and 65535-byte connection windows.
    rc, out, err = run(["nghttp", "-w", "10", "-W", "16",
                        url(srv.port, "/big?bytes=1048576")], 50)
    eq(rc, 0, "nghttp rc (%s)" % err)
    eq(out, b"x" * 1048576, "body")


@case(timeout=60)
def slow_handler_bounds_upload_memory():
    # The growing-window test from the other side. A client that obeys flow
    # control uploads 64 MiB to /echo but never opens its own window for the
    # echo: the echo stalls, the reference server's handler pauses reading (it
    # pauses past 1 MiB of unsent echo), and tern must stop crediting the
    # upload. The client gets stuck long before 64 MiB and the server's memory
    # stays bounded.
    def go():
        with H2(srv.port) as h:
            h.send(headers(1, request_block(
                "POST", "/echo", (("content-length", str(64 << 20)),)),
                end_stream=False))
            stream_win = conn_win = 65535
            sent, total, stalled_since = 0, 64 << 20, None
            while sent < total:
                n = min(16384, stream_win, conn_win, total - sent)
                if n > 0:
                    h.send(frame(DATA, 0, 1, b"x" * n))
                    sent += n
                    stream_win -= n
                    conn_win -= n
                    stalled_since = None
                    continue
                if stalled_since is None:
                    stalled_since = time.monotonic()
                elif time.monotonic() - stalled_since > 2.0:
                    break  # no window for 2 s: tern holds the upload back
                try:
                    f = h.read_frame(0.2)
                except socket.timeout:
                    continue
                check(f is not None, "closed after %d bytes" % sent)
                if f[0] == SETTINGS and not f[1] & ACK:
                    for i in range(0, len(f[3]), 6):
                        k, v = struct.unpack(">HI", f[3][i:i + 6])
                        if k == S_INITIAL_WINDOW_SIZE:
                            stream_win += v - 65535
                    h.send(frame(SETTINGS, ACK, 0))
                elif f[0] == WINDOW_UPDATE:
                    inc = struct.unpack(">I", f[3])[0] & 0x7fffffff
                    if f[2] == 0:
                        conn_win += inc
                    else:
                        stream_win += inc
                check(f[0] != RST_STREAM and f[0] != GOAWAY,
                      "stream or connection ended: %r" % (f,))
            suite.note("the upload stalled after %d KiB" % (sent >> 10))
            check(sent < (16 << 20), "%d MiB were let in" % (sent >> 20))
    attack(go, max_growth_kib=32 << 10)


@case
def deferred_and_blocking_concurrently():
    t0 = time.monotonic()
    rc, out, err = run(["nghttp", "-n", "-s",
                        url(srv.port, "/defer?ms=300"),
                        url(srv.port, "/block?ms=300"),
                        url(srv.port, "/tick?n=3&ms=50"),
                        url(srv.port, "/")])
    took = time.monotonic() - t0
    eq(rc, 0, "nghttp rc (%s)" % err)
    check(took < 1.5, "the streams did not run concurrently (%.2f s)" % took)
    for path, want in (("/defer?ms=100", b"deferred"),
                       ("/block?ms=100", b"blocked"),
                       ("/tick?n=3&ms=10", b"tick 0\ntick 1\ntick 2\n"),
                       ("/stream", b"".join(b"chunk %d\n" % i
                                            for i in range(5)))):
        eq(curl([url(srv.port, path)])[:2], (want, 200), path)


@case(timeout=60)
def blocking_queue_drops_reset_streams():
    """Blocking requests whose streams the client resets while they wait
    for a pool thread are dropped, not run for nobody: 300 of
    /block?ms=20 reset at once leave the pool free for the next stream."""
    with Server("reference", ["--workers", "1"]) as s:
        with H2(s.port) as conn:
            sid = 1
            for _ in range(3):
                out = b""
                for _ in range(100):
                    out += headers(sid, request_block("GET", "/block?ms=20"))
                    out += rst_stream(sid)
                    sid += 2
                conn.send(out)
            conn.send(headers(sid, request_block("GET", "/block?ms=0")))
            got = collect_streams(conn, [sid], timeout=30)
            eq(got[sid][0], b"blocked", "the stream that stayed")
            conn.send(headers(sid + 2, request_block("GET", "/block-runs")))
            runs = int(collect_streams(conn, [sid + 2])[sid + 2][0])
        suite.note("%d of 300 reset streams' handlers ran" % (runs - 1))
        check(runs <= 100, "%d /block handlers ran for 300 reset streams"
              % (runs - 1))


@case
def errors_head_and_params():
    body, status, _ = curl([url(srv.port, "/nope")])
    eq((status, body), (404, b"404 Not Found\n"), "404")
    rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge", "-X", "PUT",
                        "-D", "-", "-o", "/dev/null", url(srv.port)])
    head = out.decode().lower()
    check(head.startswith("http/2 405"), "405: %r" % head[:40])
    check("allow: get, head" in head, "Allow in %r" % head)
    rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge", "-I",
                        url(srv.port, "/big?bytes=5000")])
    head = out.decode().lower()
    check(head.startswith("http/2 200"), "HEAD: %r" % head[:40])
    check("content-length: 5000" in head, "HEAD content-length %r" % head)
    body, status, _ = curl(["-H", "X-Request-Id: r-77",
                            url(srv.port, "/api/v1/users/42/detail")])
    eq((status, body), (200, b"users 42 detail r-77"), "routed app")
    body, status, _ = curl(["-H", "Cookie: a=1", "-H", "Cookie: b=2",
                            url(srv.port, "/")])
    eq((status, body), (200, HELLO_BODY), "with cookie crumbs")


@case
def cookie_crumbs_joined_and_host_fallback():
    """RFC 9113 8.2.3: three cookie crumbs, another field between them,
    reach the application as one Cookie field joined with "; ", where the
    first crumb was. Without :authority the Host field is the authority
    (RFC 9113 8.3.1); with it, :authority wins and Host is a field."""
    block = b"".join(hpack_literal(n, v) for n, v in [
        (":method", "GET"), (":scheme", "http"), (":path", "/fields"),
        ("cookie", "a=1"), ("x-mid", "m"), ("cookie", "b=2"),
        ("host", "example.test:8080"), ("cookie", "c=3")])
    with H2(srv.port) as h2:
        h2.send(headers(1, block))
        h2.send(headers(3, request_block("GET", "/fields", [
            ("host", "other.test"), ("cookie", "only=1")])))
        got = collect_streams(h2, [1, 3])
    eq(got[1], (b"authority: example.test:8080\n"
                b"cookie: a=1; b=2; c=3\n"
                b"x-mid: m\n"
                b"host: example.test:8080\n", None), "joined, Host fallback")
    eq(got[3], (b"authority: x\n"
                b"host: other.test\n"
                b"cookie: only=1\n", None), ":authority wins, one crumb")


def hook_body(status, reason, method):
    m = "null" if method is None else '"%s"' % method
    return (b'{"error":%d,"reason":"%s","method":%s,"bad":-1}\n'
            % (status, reason.encode(), m.encode()))


@case(timeout=30)
def error_hook_answers():
    s = Server("reference", ["--error-hook", "--max-uri", "64", "--max-head",
                             "1024", "--max-body", "100"])
    try:
        rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge", "-X",
                            "PUT", "-D", "-", url(s.port)])
        text = out.decode()
        head, _, body = text.partition("\r\n\r\n")
        check(head.startswith("HTTP/2 405"), "405: %r" % head[:40])
        check("\r\nallow: GET, HEAD" in head, "Allow in %r" % head)
        check("\r\nx-error-hook: 1" in head, "hook field in %r" % head)
        check("\r\ncontent-type: application/json" in head,
              "content-type in %r" % head)
        check("connection" not in head.lower(), "Connection in %r" % head)
        eq(body.encode(), hook_body(405, "Method Not Allowed", "PUT"),
           "405 body")
        for args, status, reason, method in (
                ([url(s.port, "/nope")], 404, "Not Found", "GET"),
                ([url(s.port, "/" + "a" * 64)], 414, "URI Too Long", "GET"),
                (["-H", "X-Pad: " + "p" * 1024, url(s.port)], 431,
                 "Request Header Fields Too Large", "GET")):
            body, got, version = curl(args)
            eq((got, version, body), (status, "2",
                                      hook_body(status, reason, method)),
               "%d over HTTP/2" % status)
        body, got, _ = curl([url(s.port, "/plain")])
        eq((got, body), (404, b"404 Not Found\n"), "a hook that declines")
        with H2(s.port) as h:
            # Refused from Content-Length alone, before any DATA (raw: curl
            # may report the early answer's RST_STREAM as an error).
            h.send(headers(1, request_block(
                "POST", "/collect", [("content-length", "101")]),
                end_stream=False))
            got = collect_streams(h, [1])
            eq(got[1][0], hook_body(413, "Content Too Large", "POST"),
               "413 body")
        with H2(s.port) as h:
            # A WebSocket extended CONNECT without Sec-WebSocket-Version:
            # tern's 400, routed as a GET.
            h.send(headers(1, request_block(
                "CONNECT", "/ws", [(":protocol", "websocket")]),
                end_stream=False))
            got = collect_streams(h, [1])
            eq(got[1][0], hook_body(400, "Bad Request", "GET"), "400 body")
        check_serves(s.port)
    finally:
        eq(s.stop(), 0, "reference exit status")


@case
def default_handler_404_and_405():
    s = Server("reference", ["--default-handler"])
    try:
        body, status, _ = curl([url(s.port, "/nope")])
        eq((status, body), (404, b'{"default":404,"allow":""}\n'), "404")
        rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge", "-X",
                            "DELETE", "-D", "-", url(s.port, "/stats")])
        head, _, body = out.decode().partition("\r\n\r\n")
        check(head.startswith("HTTP/2 405"), "405: %r" % head[:40])
        check("\r\nallow: GET, HEAD" in head, "Allow in %r" % head)
        eq(body, '{"default":405,"allow":"GET, HEAD"}\n', "405 body")
    finally:
        eq(s.stop(), 0, "reference exit status")


def gone_counts():
    with Conn(srv.port) as c:
        st = stats_from(c)
    return st["gone"], st["gone_eclosed"]


def wait_gone(before, n, what, timeout=3.0):
    """/longpoll's gone callback must run `n` more times (each seeing
    TERN_ECLOSED) within `timeout`, and no more."""
    deadline = time.monotonic() + timeout
    want = (before[0] + n, before[1] + n)
    while True:
        got = gone_counts()
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    eq(got, want, what + ": (gone callbacks, TERN_ECLOSED answers)")
    time.sleep(0.1)
    eq(gone_counts(), want, what + ": callbacks after that")


def goaway(last_sid, code=NO_ERROR):
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_sid, code))


def no_frame_for(h, seconds):
    """No HEADERS, DATA, RST_STREAM or GOAWAY arrives within `seconds`
    (SETTINGS are acknowledged; WINDOW_UPDATE and the like are fine)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            f = h.read_frame(max(0.01, deadline - time.monotonic()))
        except socket.timeout:
            return True
        if f is None:
            return False
        if f[0] == SETTINGS:
            if not f[1] & ACK:
                h.send(frame(SETTINGS, ACK, 0))
            continue
        if f[0] in (HEADERS, DATA, RST_STREAM, GOAWAY):
            return False
    return True


@case
def gone_on_rst_stream():
    before = gone_counts()
    with H2(srv.port) as h:
        h.send(headers(1, request_block("GET", "/longpoll")) +
               headers(3, request_block("GET", "/longpoll")))
        check(no_frame_for(h, 0.2), "a long poll answered")
        h.send(rst_stream(1))
        wait_gone(before, 1, "RST_STREAM")
        # The other stream lives on, and the connection serves.
        h.send(headers(5, request_block("GET", "/")))
        got = collect_streams(h, [5])
        eq(got[5], (HELLO_BODY, None), "GET / after the reset")
    wait_gone(before, 2, "and the connection's close")


@case
def gone_on_connection_close():
    before = gone_counts()
    with H2(srv.port) as h:
        h.send(headers(1, request_block("GET", "/longpoll")) +
               headers(3, request_block("GET", "/longpoll")))
        check(no_frame_for(h, 0.2), "a long poll answered")
    wait_gone(before, 2, "FIN")


@case
def gone_after_goaway():
    before = gone_counts()
    with H2(srv.port) as h:
        h.send(headers(1, request_block("GET", "/longpoll")))
        check(no_frame_for(h, 0.2), "a long poll answered")
        # A graceful GOAWAY leaves stream 1 to be answered ...
        h.send(goaway(0))
        check(no_frame_for(h, 0.2), "answered after GOAWAY")
        eq(gone_counts(), before, "gone after a graceful GOAWAY")
        # ... until the client closes.
        set_linger_rst(h.sock)
    wait_gone(before, 1, "GOAWAY, then RST")


@case
def gone_never_after_the_answer():
    before = gone_counts()
    with H2(srv.port) as h:
        h.send(headers(1, request_block("GET", "/longpoll?now=1")))
        got = collect_streams(h, [1])
        eq(got[1], (b"answered\n", None), "answered long poll")
        h.send(rst_stream(1))
    wait_gone(before, 0, "reset and closed after the answer")


@case
def head_raw_no_body():
    with H2(srv.port) as h:
        h.send(headers(1, request_block("HEAD", "/")))
        got = collect_streams(h, [1])
        eq(got[1], (b"", None), "HEAD / over raw h2")


def curl_heads(path):
    """The response heads curl -v shows for GET `path` over h2c, each a
    list of lines ("HTTP/2 103", "link: ..."), and the body."""
    rc, out, err = run(["curl", "-sv", "--http2-prior-knowledge",
                        url(srv.port, path)], timeout=10)
    eq(rc, 0, "curl exit status")
    heads = []
    for line in err.decode("latin-1").splitlines():
        if not line.startswith("< "):
            continue
        line = line[2:].strip()
        if line.startswith("HTTP/"):
            heads.append([line])
        elif line and heads:
            heads[-1].append(line.lower())
    return heads, out


@case
def early_hints_h2():
    # 103 Early Hints as a HEADERS frame without END_STREAM ahead of the
    # final answer (RFC 9113 8.1), from the worker and another thread.
    for path in ("/early-hints", "/early-hints?thread=1"):
        heads, body = curl_heads(path)
        eq([h[0] for h in heads], ["HTTP/2 103", "HTTP/2 200"], path)
        eq(heads[0][1:], ["link: </style.css>; rel=preload; as=style"],
           "the 103's fields")
        eq(body, b"interim: 0 ok\n", path)
    with H2(srv.port) as h:
        h.send(headers(1, request_block("GET", "/early-hints")))
        got = []
        while not got or not (got[-1][1] & END_STREAM):
            f = h.read_frame()
            check(f is not None, "closed after %r" % got)
            if f[2] == 1:
                got.append(f[:2])
        eq([t for t, _ in got], [HEADERS, HEADERS, DATA], "frames")
        check(not got[0][1] & END_STREAM, "the 103 ended the stream")


@case
def no_length_on_304_h2():
    for path, want in (("/status?code=304", "HTTP/2 304"),
                       ("/status?code=204", "HTTP/2 204")):
        heads, body = curl_heads(path)
        eq([h[0] for h in heads], [want], path)
        check(not any(f.startswith("content-length") for f in heads[0]),
              "%s: %r" % (path, heads[0]))
        eq(body, b"", path + " body")
    heads, _ = curl_heads("/status?code=422")
    eq(heads[0][0], "HTTP/2 422", "a registered code")


@case(timeout=30)
def graceful_stop():
    s = Server("reference")
    try:
        p = subprocess.Popen(["nghttp", "-v", url(s.port, "/defer?ms=800")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3)
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
        text = out.decode()
        eq(p.returncode, 0, "nghttp rc (%s)" % err)
        check("deferred" in text, "response did not complete:\n%s"
              % text[-1500:])
        check(re.search(r"recv GOAWAY frame.*\n.*error_code=NO_ERROR", text),
              "no GOAWAY(NO_ERROR) seen:\n%s" % text[-1500:])
        eq(s.wait(10), 0, "server exit status")
        took = time.monotonic() - t0
        check(took < 3, "stop took %.1f s (the 5 s deadline?)" % took)
    finally:
        s.kill()
    # An idle HTTP/2 connection gets the last GOAWAY and is closed at once.
    s = Server("reference")
    try:
        with H2(s.port) as h:
            h.send(headers(1, request_block()))
            eq(collect_streams(h, [1])[1], (HELLO_BODY, None), "request")
            t0 = time.monotonic()
            s.signal(signal.SIGTERM)
            frames = h.frames_until_close(5)
            gw = [struct.unpack(">II", p[:8]) for t, _, _, p in frames
                  if t == GOAWAY]
            eq(gw, [(1, NO_ERROR)], "GOAWAY (last stream, code)")
            eq(s.wait(5), 0, "server exit status")
            check(time.monotonic() - t0 < 2, "idle stop was slow")
    finally:
        s.kill()


@case(timeout=40)
def stop_deadline_answers_503():
    """At the stop deadline a stream whose handler never answers gets 503
    and the server exits; it used to wait for the handler forever."""
    s = Server("reference")
    try:
        p = subprocess.Popen(["nghttp", "-v", url(s.port, "/never")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3)
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
        text = out.decode()
        check(":status: 503" in text, "no 503 at the deadline:\n%s"
              % text[-1500:])
        rc = s.wait(7.0 - (time.monotonic() - t0))
        check(rc is not None, "still running 7 s after SIGTERM")
        eq(rc, 0, "server exit status")
        suite.note("exit %.2f s after SIGTERM (deadline 5 s)"
                   % (time.monotonic() - t0))
    finally:
        s.kill()


# ---------------------------------------------------------------------------
# Defences: each closes the connection with the right GOAWAY code (or
# refuses the stream), the next connection is served, memory stays bounded.


def attack(fn, max_growth_kib=64 << 10):
    before = vmrss_kib(srv.proc.pid)
    fn()
    check_serves(srv.port)
    after = vmrss_kib(srv.proc.pid)
    suite.note("VmRSS %d -> %d KiB" % (before, after))
    # Under AddressSanitizer freed memory sits in its quarantine and tern's
    # free lists are off: RSS says nothing there.
    check(sanitized() or after - before < max_growth_kib,
          "RSS grew by %d KiB" % (after - before))


@case(timeout=60)
def rapid_reset():
    def go():
        with H2(srv.port) as h:
            out = bytearray()
            for i in range(1000):
                sid = 1 + 2 * i
                out += headers(sid, request_block()) + rst_stream(sid)
            h.send_some(bytes(out))
            code = goaway_code(h.frames_until_close(15))
            eq(code, ENHANCE_YOUR_CALM,
               "GOAWAY code after 1000 HEADERS+RST_STREAM")
    attack(go)


@case(timeout=60)
def continuation_flood():
    def go():
        with H2(srv.port) as h:
            block = request_block()
            out = headers(1, block[:5], end_headers=False)
            filler = hpack_literal("x-a", "b" * 20)
            for _ in range(10000):
                out += frame(CONTINUATION, 0, 1, filler)
            h.send_some(out)
            code = goaway_code(h.frames_until_close(15))
            eq(code, ENHANCE_YOUR_CALM, "GOAWAY code after CONTINUATIONs")
    attack(go)


@case(timeout=60)
def oversized_header_list():
    # A plain header list over SETTINGS_MAX_HEADER_LIST_SIZE (16 KiB).
    rc, out, err = run(["curl", "-sS", "--http2-prior-knowledge",
                        "-H", "x-big: " + "a" * 20000, "-w",
                        "\n%{http_code}", url(srv.port)])
    check(out.endswith(b"\n431"), "big header: %r %r" % (out[-80:], err))

    # An HPACK bomb: one 4000-byte field enters the decoder's table, then
    # 2000 one-byte references to it expand to 8 MB of header list.
    def go():
        with H2(srv.port) as h:
            block = request_block() + hpack_literal("x-bomb", "b" * 4000,
                                                    index=True)
            block += b"\xbe" * 2000  # indexed field 62: the newest entry
            out = bytearray()
            pieces = [block[i:i + 16000] for i in range(0, len(block), 16000)]
            for i, p in enumerate(pieces):
                last = i == len(pieces) - 1
                if i == 0:
                    out += headers(1, p, end_headers=last)
                else:
                    out += frame(CONTINUATION, END_HEADERS if last else 0, 1,
                                 p)
            h.send(bytes(out))
            got = collect_streams(h, [1])
            body, code = got[1]
            check(code is not None or
                  body == b"431 Request Header Fields Too Large\n",
                  "HPACK bomb answered %r / %r" % (body, code))
            h.send(headers(3, request_block()))
            eq(collect_streams(h, [3])[3], (HELLO_BODY, None),
               "the connection goes on")
    attack(go)


def ack_flood(frame_bytes):
    def go():
        with H2(srv.port, rcvbuf=4096) as h:
            # The client never reads: once the kernel's buffers (up to a
            # few MiB) are full, the acknowledgements pile up in tern.
            sent = h.send_some(frame_bytes * ((12 << 20) // len(frame_bytes)),
                               timeout=3)
            frames = h.frames_until_close(30)
            acks = sum(1 for f in frames if f[0] == frame_bytes[3] and
                       f[1] & ACK)
            suite.note("%d bytes sent, %d acks read" % (sent, acks))
            eq(goaway_code(frames), ENHANCE_YOUR_CALM, "GOAWAY code")
    return go


@case(timeout=90)
def settings_flood():
    attack(ack_flood(settings()))


@case(timeout=90)
def ping_flood():
    attack(ack_flood(frame(PING, 0, 0, b"12345678")))


@case(timeout=60)
def ping_burst_while_reading():
    """A burst of PINGs from a client that reads is answered, not taken
    for a flood (the input is processed in slices, acks sent between)."""
    with H2(srv.port) as h:
        n = 20000
        t = threading.Thread(target=h.send, args=(
            frame(PING, 0, 0, b"abcdefgh") * n,), daemon=True)
        t.start()
        acks = 0
        while acks < n:
            f = h.read_frame(10)
            check(f is not None, "closed after %d acks" % acks)
            check(f[0] != GOAWAY, "GOAWAY after %d acks" % acks)
            if f[0] == PING and f[1] & ACK:
                acks += 1
        t.join(5)
        h.send(headers(1, request_block()))
        eq(collect_streams(h, [1])[1], (HELLO_BODY, None), "then a request")


@case(timeout=30)
def too_many_settings_entries():
    def go():
        with H2(srv.port, pairs=[(S_ENABLE_PUSH, 0)] * 40) as h:
            code = goaway_code(h.frames_until_close(10))
            eq(code, ENHANCE_YOUR_CALM, "GOAWAY code")
    attack(go)


@case(timeout=30)
def empty_data_flood():
    def go():
        with H2(srv.port) as h:
            out = headers(1, request_block("POST", "/echo"), end_stream=False)
            out += frame(DATA, 0, 1) * 1000
            h.send_some(out)
            code = goaway_code(h.frames_until_close(10))
            eq(code, ENHANCE_YOUR_CALM, "GOAWAY code")
    attack(go)


@case(timeout=60)
def too_many_streams():
    def go():
        # Before the client acknowledges our SETTINGS: stream 101 and on
        # are refused, the first 100 are served.
        with H2(srv.port) as h:
            sids = [1 + 2 * i for i in range(101)]
            h.send(b"".join(headers(sid, request_block("GET",
                                                       "/defer?ms=1000"))
                            for sid in sids))
            got = collect_streams(h, sids, timeout=20)
            refused = [sid for sid in sids if got[sid][1] == REFUSED_STREAM]
            eq(refused, [201], "refused streams")
            for sid in sids[:100]:
                eq(got[sid], (b"deferred", None), "stream %d" % sid)
        # After acknowledging them, exceeding the limit is a connection
        # error (nghttp2: the client knew the limit).
        with H2(srv.port) as h:
            while True:
                f = h.read_frame()
                if f[0] == SETTINGS and not f[1] & ACK:
                    break
            h.send(frame(SETTINGS, ACK, 0))
            time.sleep(0.1)
            h.send(b"".join(headers(1 + 2 * i, request_block(
                "GET", "/defer?ms=200")) for i in range(101)))
            code = goaway_code(h.frames_until_close(10))
            eq(code, PROTOCOL_ERROR, "GOAWAY code")
    attack(go)


@case(timeout=30)
def window_overflow():
    def go():
        with H2(srv.port) as h:
            h.send(window_update(0, 0x7fffffff))
            code = goaway_code(h.frames_until_close(10))
            eq(code, FLOW_CONTROL_ERROR, "connection window overflow")
        with H2(srv.port) as h:
            h.send(headers(1, request_block("GET", "/defer?ms=500")) +
                   window_update(1, 0x7fffffff))
            got = collect_streams(h, [1])
            eq(got[1][1], FLOW_CONTROL_ERROR, "stream window overflow")
    attack(go)


@case(timeout=60)
def streams_never_read():
    def go():
        # A zero window: no DATA may be sent; 50 streams of 1 MiB wait.
        with H2(srv.port, [(S_INITIAL_WINDOW_SIZE, 0)]) as h:
            sids = [1 + 2 * i for i in range(50)]
            h.send(b"".join(headers(sid, request_block(
                "GET", "/big?bytes=1048576")) for sid in sids))
            seen = set()
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                try:
                    f = h.read_frame(max(0.01, deadline - time.monotonic()))
                except socket.timeout:
                    break
                if f is None:
                    raise AssertionError("closed")
                check(f[0] != DATA, "DATA sent into a zero window")
                if f[0] == HEADERS:
                    seen.add(f[2])
        eq(len(seen), 50, "response heads")
        # The same, with the window open but the socket never read.
        with H2(srv.port, rcvbuf=4096) as h:
            h.send(b"".join(headers(1 + 2 * i, request_block(
                "GET", "/big?bytes=1048576")) for i in range(50)))
            time.sleep(1)
    attack(go, max_growth_kib=32 << 10)


@case(timeout=60)
def wide_windows_never_read():
    """Clients that open the largest windows, ask for 100 streams of
    /big?bytes=1048576 each and never read: referenced bodies reach the
    socket by reference and framing stops at the 64 KiB output cap, so
    the server holds little per connection (a single nghttp2 call once
    framed, and copied, every stream's window)."""
    with Server("reference", ["--workers", "1"]) as s:
        before = vmrss_kib(s.proc.pid)
        conns = []
        for _ in range(10):
            h = H2(s.port, [(S_INITIAL_WINDOW_SIZE, 0x7fffffff),
                            (S_MAX_FRAME_SIZE, (1 << 24) - 1)], rcvbuf=4096)
            h.send(window_update(0, 0x7fffffff - 65535) +
                   b"".join(headers(1 + 2 * i, request_block(
                       "GET", "/big?bytes=1048576")) for i in range(100)))
            conns.append(h)
        time.sleep(1.5)
        after = vmrss_kib(s.proc.pid)
        t0 = time.monotonic()
        check_serves(s.port)
        took = time.monotonic() - t0
        for h in conns:
            h.close()
        suite.note("VmRSS %d -> %d KiB with 10 x 100 streams; a fresh "
                   "client answered in %.3f s" % (before, after, took))
        check(sanitized() or after - before < 24 << 10,
              "RSS grew by %d KiB" % (after - before))
        check(took < 2, "fresh client answered in %.2f s" % took)


@case(timeout=30)
def flow_blocked_streams_time_out():
    """Responses that a client's zero window holds back wait on the client:
    the idle timeout closes the connection; a client that keeps talking
    (here: PINGs) keeps it."""
    with Server("reference", ["--idle-timeout-ms", "600"]) as s:
        with H2(s.port, [(S_INITIAL_WINDOW_SIZE, 0)]) as h:
            h.send(b"".join(headers(1 + 2 * i, request_block(
                "GET", "/big?bytes=100000")) for i in range(5)))
            t0 = time.monotonic()
            frames = h.frames_until_close(10)
            took = time.monotonic() - t0
            check(0.4 < took < 3, "closed after %.2f s" % took)
            check(not any(f[0] == DATA and f[3] for f in frames),
                  "DATA sent into a zero window")
        with H2(s.port, [(S_INITIAL_WINDOW_SIZE, 0)]) as h:
            h.send(headers(1, request_block("GET", "/big?bytes=100000")))
            for _ in range(8):
                time.sleep(0.2)
                h.send(frame(PING, 0, 0, b"stillhere"[:8]))
            h.send(window_update(1, 1 << 20) + window_update(0, 1 << 20))
            got = collect_streams(h, [1])
            eq(got[1], (b"x" * 100000, None), "the response, once allowed")


# ---------------------------------------------------------------------------
# Per-stream body timers and the header-block head timer, on a connection
# that PINGs keep from ever being idle.

TIMEOUTS = ["--head-timeout-ms", "500", "--body-timeout-ms", "700",
            "--idle-timeout-ms", "10000"]


def pinging(h, seconds, tick=None, stop=None):
    """Frames read for `seconds` while a PING goes out every 200 ms (and
    tick(i) runs before the i-th); each as (time since the start, type,
    flags, sid, payload), None last if the server closed. Stops early
    once stop(frames) is true."""
    frames = []
    t0 = time.monotonic()
    next_ping, i = t0, 0
    while time.monotonic() - t0 < seconds:
        if time.monotonic() >= next_ping:
            if tick is not None:
                tick(i)
            h.send(frame(PING, 0, 0, b"pingping"))
            next_ping += 0.2
            i += 1
        try:
            f = h.read_frame(max(0.01, min(next_ping, t0 + seconds) -
                                 time.monotonic()))
        except socket.timeout:
            continue
        if f is None:
            frames.append(None)
            return frames
        if f[0] == SETTINGS and not f[1] & ACK:
            h.send(frame(SETTINGS, ACK, 0))
        frames.append((time.monotonic() - t0,) + f)
        if stop is not None and stop(frames):
            break
    return frames


def stream_events(frames, sid):
    """What happened on `sid`: [(time, 'headers'|'data'|'end'|'rst', x)],
    x the HEADERS block, the DATA payload or the RST_STREAM code."""
    out = []
    for f in frames:
        if f is None or f[3] != sid:
            continue
        t, ftype, flags, _, p = f
        if ftype == HEADERS:
            out.append((t, "headers", p))
        elif ftype == DATA and p:
            out.append((t, "data", p))
        if ftype in (HEADERS, DATA) and flags & END_STREAM:
            out.append((t, "end", None))
        if ftype == RST_STREAM:
            out.append((t, "rst", struct.unpack(">I", p)[0]))
    return out


def kinds(events):
    return [e[1] for e in events]


@case(timeout=30)
def stalled_body_answered_408():
    """Request bodies that stop arriving on a connection kept busy by PINGs
    (which used to keep them forever): each stream has its own body timer,
    re-armed by its own DATA only, so the stalled ones are answered 408
    and reset with NO_ERROR (one with a content-length too, which is not
    left to drain), while a slow body on another stream completes."""
    with Server("reference", TIMEOUTS) as s:
        with H2(s.port) as h:
            h.send(headers(1, request_block("POST", "/collect"),
                           end_stream=False) + frame(DATA, 0, 1, b"abc") +
                   headers(3, request_block("POST", "/collect"),
                           end_stream=False) +
                   headers(5, request_block("POST", "/collect", [
                       ("content-length", "10")]), end_stream=False) +
                   frame(DATA, 0, 5, b"abc"))

            def tick(i):
                # Stream 3: a piece every 400 ms (the timeout is 700 ms).
                if i in (1, 3, 5, 7):
                    h.send(frame(DATA, 0, 3, b"x"))
                elif i == 9:
                    h.send(frame(DATA, END_STREAM, 3, b"y"))
            frames = pinging(h, 3, tick, stop=lambda fr: all(
                "rst" in kinds(stream_events(fr, sid)) for sid in (1, 5)) and
                "end" in kinds(stream_events(fr, 3)))
            check(None not in frames, "the connection closed")
            for sid in (1, 5):
                ev = stream_events(frames, sid)
                eq(kinds(ev), ["headers", "data", "end", "rst"],
                   "stream %d" % sid)
                eq(ev[1][2], b"408 Request Timeout\n", "stream %d body" % sid)
                eq(ev[3][2], NO_ERROR, "stream %d reset code" % sid)
                check(0.6 < ev[0][0] < 1.5, "stream %d answered after %.2f s"
                      % (sid, ev[0][0]))
            ev = stream_events(frames, 3)
            eq([e[2] for e in ev if e[1] == "data"], [b"xxxxy"],
               "stream 3's body")
            check(ev[0][0] > 1.5, "stream 3 answered after %.2f s" % ev[0][0])
            finish(h, 7)


@case(timeout=30)
def stalled_streamed_body():
    """A streamed body that stalls: a handler that started its response
    (/echo) has its stream reset, CANCEL; one that had not (/upload) hears
    TERN_BODY_ERROR and its own answer (400) goes out, then RST_STREAM
    NO_ERROR; one that answers only later, from another thread
    (/upload?late=1), finds its client gone: tern answered 408 for it.
    Other streams are served meanwhile."""
    with Server("reference", TIMEOUTS) as s:
        with H2(s.port) as h:
            h.send(headers(1, request_block("POST", "/echo"),
                           end_stream=False) + frame(DATA, 0, 1, b"abc") +
                   headers(3, request_block("POST", "/upload"),
                           end_stream=False) + frame(DATA, 0, 3, b"abc") +
                   headers(5, request_block("POST", "/upload?late=1&ms=100"),
                           end_stream=False) + frame(DATA, 0, 5, b"abc"))
            frames = pinging(h, 3, stop=lambda fr: all(
                "rst" in kinds(stream_events(fr, sid)) for sid in (1, 3, 5)))
            check(None not in frames, "the connection closed")
            ev = stream_events(frames, 1)
            eq(kinds(ev), ["headers", "data", "rst"], "/echo")
            eq((ev[1][2], ev[2][2]), (b"abc", CANCEL), "/echo echo and code")
            check(0.6 < ev[2][0] < 1.5, "/echo reset after %.2f s" % ev[2][0])
            ev = stream_events(frames, 3)
            eq(kinds(ev), ["headers", "end", "rst"], "/upload")
            eq(ev[0][2][:1], b"\x8c", "/upload's :status 400 (indexed)")
            eq(ev[2][2], NO_ERROR, "/upload reset code")
            check(0.6 < ev[0][0] < 1.5, "/upload answered after %.2f s"
                  % ev[0][0])
            ev = stream_events(frames, 5)
            eq(kinds(ev), ["headers", "data", "end", "rst"], "late /upload")
            eq((ev[1][2], ev[3][2]), (b"408 Request Timeout\n", NO_ERROR),
               "late /upload's answer and reset code")
            time.sleep(0.2)  # the late answer is refused meanwhile
            finish(h, 7)


@case(timeout=30)
def held_streams_not_timed_out():
    """Streams whose handler holds them are the handler's: one that never
    answers (/never) and a streamed upload the handler paused (flow control
    holds the client) outlast every timeout on a connection kept busy,
    and other streams are served."""
    with Server("reference", TIMEOUTS) as s:
        with H2(s.port) as h:
            h.send(headers(1, request_block("POST", "/upload?pause=1"),
                           end_stream=False) + frame(DATA, 0, 1, b"abc") +
                   frame(DATA, 0, 1, b"def") +
                   headers(3, request_block("GET", "/never")))
            frames = pinging(h, 2)
            check(None not in frames, "the connection closed")
            for sid in (1, 3):
                eq(stream_events(frames, sid), [], "stream %d" % sid)
            finish(h, 5)
            h.send(rst_stream(1) + rst_stream(3))
            finish(h, 7)


@case(timeout=30)
def header_block_bounded_by_head_timeout():
    """A header block that stops arriving holds the whole connection
    (nothing else may come until it ends, RFC 9113 6.10): it gets
    head_timeout_ms in all, which CONTINUATION frames trickling one byte of
    it at a time do not extend: GOAWAY PROTOCOL_ERROR, then the close.
    A PING inside a block is a connection error at once."""
    with Server("reference", TIMEOUTS) as s:
        block = request_block("GET", "/", [("x-pad", "p" * 40)])
        with H2(s.port) as h:
            t0 = time.monotonic()
            h.send(headers(1, block[:6], end_headers=False))
            frames, closed, k = [], None, 6
            while closed is None and time.monotonic() - t0 < 4:
                if k < 12:
                    h.send(frame(CONTINUATION, 0, 1, block[k:k + 1]))
                    k += 1
                try:
                    f = h.read_frame(0.3)
                except socket.timeout:
                    continue
                while f is not None:
                    frames.append(f)
                    try:
                        f = h.read_frame(0.01)
                    except socket.timeout:
                        break
                if f is None:
                    closed = time.monotonic() - t0
            check(closed is not None, "still open after 4 s")
            check(closed < 1.3, "closed after %.2f s" % closed)
            eq(goaway_code(frames), PROTOCOL_ERROR, "GOAWAY code")
        with H2(s.port) as h:
            h.send(headers(1, block[:6], end_headers=False) +
                   frame(PING, 0, 0, b"pingping"))
            eq(goaway_code(h.frames_until_close(2)), PROTOCOL_ERROR,
               "PING inside a header block")
        check_serves(s.port)


@case(timeout=30)
def header_blocks_back_to_back():
    """Requests whose header blocks each straddle two writes, for three
    head timeouts: each block that ends is progress, so the next one's
    head time starts afresh, and every request is answered."""
    with Server("reference", TIMEOUTS) as s:
        with H2(s.port) as h:
            block = request_block("GET", "/")
            sid, t0 = 1, time.monotonic()
            h.send(headers(sid, block[:5], end_headers=False))
            while time.monotonic() - t0 < 1.5:
                time.sleep(0.1)
                h.send(frame(CONTINUATION, END_HEADERS, sid, block[5:]) +
                       headers(sid + 2, block[:5], end_headers=False))
                sid += 2
            h.send(frame(CONTINUATION, END_HEADERS, sid, block[5:]))
            got = collect_streams(h, list(range(1, sid + 1, 2)))
            check(all(v == (HELLO_BODY, None) for v in got.values()),
                  "answers %r" % sorted(set(got.values())))
            suite.note("%d requests" % len(got))


# ---------------------------------------------------------------------------
# RFC 9113 rules nghttp2 leaves to the server (with RFC 7540 priorities off
# and closed streams not kept), each a connection error here.

def rfc_error(send, want, pairs=(), what=""):
    """Frames sent after our SETTINGS are acknowledged end the connection
    with GOAWAY `want`; a fresh connection is served afterwards."""
    with H2(srv.port, pairs) as h:
        while True:
            f = h.read_frame()
            check(f is not None, "closed before SETTINGS")
            if f[0] == SETTINGS and not f[1] & ACK:
                break
        h.send(frame(SETTINGS, ACK, 0))
        send(h)
        eq(goaway_code(h.frames_until_close(5)), want, what)
    check_serves(srv.port)


NO_PRIORITIES = [(9, 1)]  # SETTINGS_NO_RFC7540_PRIORITIES


def finish(h, sid, path="/"):
    """A GET on `sid`, read to its end."""
    h.send(headers(sid, request_block("GET", path)))
    eq(collect_streams(h, [sid])[sid], (HELLO_BODY, None), "stream %d" % sid)


@case
def second_headers_after_answer_reset():
    """HEADERS, DATA, then a second HEADERS without END_STREAM (h2spec
    8.1/1): a malformed trailer section. When tern has already answered
    and reset the stream (NO_ERROR) before the DATA arrives, the stream
    error is still owed: RST_STREAM PROTOCOL_ERROR (under load the answer
    won the race and the client got none). A valid trailer section (with
    END_STREAM) stays ignored, and the connection serves on."""
    resets = {}

    def reset_of(h, sid):
        while sid not in resets:
            f = h.read_frame()
            check(f is not None, "closed; resets %r" % resets)
            check(f[0] != GOAWAY, "GOAWAY %r" % (f,))
            if f[0] == SETTINGS and not f[1] & ACK:
                h.send(frame(SETTINGS, ACK, 0))
            if f[0] == RST_STREAM:
                resets.setdefault(f[2], []).append(
                    struct.unpack(">I", f[3])[0])
        return resets.pop(sid)
    with H2(srv.port) as h:
        for sid, end in ((1, False), (3, True)):
            h.send(headers(sid, request_block("GET", "/nowhere"),
                           end_stream=False))
            eq(reset_of(h, sid), [NO_ERROR], "reset after the answer")
            h.send(frame(DATA, 0, sid, b"test") +
                   headers(sid, hpack_literal("x-t", "1"), end_stream=end))
        eq(reset_of(h, 1), [PROTOCOL_ERROR], "second HEADERS")
        finish(h, 5)
        check(3 not in resets, "a valid trailer section was reset")


@case
def bad_preface_goaway():
    """A wrong connection preface after the "PRI * HTTP/2.0" line gets
    GOAWAY PROTOCOL_ERROR (it was taken for HTTP/1.1 and closed)."""
    with H2(srv.port, preface=False) as h:
        h.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + settings())
        eq(goaway_code(h.frames_until_close(5)), PROTOCOL_ERROR, "bad magic")
    with H2(srv.port, preface=False) as h:
        h.send(PREFACE + frame(PING, 0, 0, b"12345678"))
        eq(goaway_code(h.frames_until_close(5)), PROTOCOL_ERROR,
           "first frame not SETTINGS")
    check_serves(srv.port)


@case
def priority_rules():
    """PRIORITY on stream 0 and a stream depending on itself are
    PROTOCOL_ERROR (RFC 9113 6.3, 5.3.1), with RFC 7540 priorities off on
    both sides too; a valid PRIORITY is ignored."""
    for pairs in ((), NO_PRIORITIES):
        rfc_error(lambda h: h.send(frame(PRIORITY, 0, 0,
                                         struct.pack(">IB", 1, 16))),
                  PROTOCOL_ERROR, pairs, "PRIORITY on stream 0")
        rfc_error(lambda h: h.send(frame(PRIORITY, 0, 3,
                                         struct.pack(">IB", 3, 16))),
                  PROTOCOL_ERROR, pairs, "PRIORITY depending on itself")
        # Split across writes: the check follows the frame boundaries.
        rfc_error(lambda h: [h.send(b) or time.sleep(0.05) for b in (
            frame(PING, 0, 0, b"12345678")[:12],
            frame(PING, 0, 0, b"12345678")[12:] +
            frame(PRIORITY, 0, 5, struct.pack(">IB", 5, 16))[:11],
            frame(PRIORITY, 0, 5, struct.pack(">IB", 5, 16))[11:])],
                  PROTOCOL_ERROR, pairs, "split self-dependency")
        rfc_error(lambda h: h.send(frame(HEADERS, END_STREAM | END_HEADERS
                                         | 0x20, 1, struct.pack(">IB", 1, 16)
                                         + request_block())),
                  PROTOCOL_ERROR, pairs, "HEADERS depending on itself")
    with H2(srv.port, NO_PRIORITIES) as h:
        h.send(frame(PRIORITY, 0, 3, struct.pack(">IB", 1, 16)))
        finish(h, 1)


@case
def frames_on_closed_streams():
    """DATA or HEADERS on a stream that closed (both sides ended it, or the
    client reset it) are STREAM_CLOSED (RFC 9113 5.1); HEADERS on a new
    stream id below one already used is PROTOCOL_ERROR (5.1.1)."""
    def after_close(h, f):
        finish(h, 1)
        h.send(f)
    rfc_error(lambda h: after_close(h, frame(DATA, END_STREAM, 1, b"x")),
              STREAM_CLOSED, what="DATA after both ends")
    rfc_error(lambda h: after_close(h, headers(1, request_block())),
              STREAM_CLOSED, what="HEADERS after both ends")

    def after_reset(h, f):
        h.send(headers(1, request_block("POST", "/echo"), end_stream=False) +
               frame(DATA, 0, 1, b"abc") + rst_stream(1))
        time.sleep(0.1)
        h.send(f)
    rfc_error(lambda h: after_reset(h, frame(DATA, 0, 1, b"x")),
              STREAM_CLOSED, what="DATA after the client's RST_STREAM")
    rfc_error(lambda h: after_reset(h, headers(1, request_block(),
                                               end_stream=True)),
              STREAM_CLOSED, what="HEADERS after the client's RST_STREAM")

    def lower_id(h):
        finish(h, 5)
        h.send(headers(3, request_block()))
    rfc_error(lower_id, PROTOCOL_ERROR, what="HEADERS on a lower new id")
    # Streams the server reset: the client's frames may be in flight, and
    # are ignored (RFC 9113 5.1). Here the answer (404) comes before the
    # body, which has no length, so the stream is reset with NO_ERROR.
    with H2(srv.port) as h:
        h.send(headers(1, request_block("POST", "/nowhere"),
                       end_stream=False))
        rst = None
        while rst is None:
            f = h.read_frame()
            check(f is not None, "closed")
            if f[0] == RST_STREAM and f[2] == 1:
                rst = struct.unpack(">I", f[3])[0]
        eq(rst, NO_ERROR, "reset after the early answer")
        h.send(frame(DATA, 0, 1, b"late") +
               headers(1, hpack_literal("x-t", "1"), end_stream=True))
        finish(h, 3)


@case
def content_length_checked_after_early_answer():
    """The handler answers before the body (404); the body then differs
    from its content-length: the stream is reset with PROTOCOL_ERROR
    (RFC 9113 8.1.1), sums over several DATA frames included."""
    for parts, what in (([b"abc", b"de"], "short"),
                        ([b"abcdef", b"ghijk"], "long")):
        with H2(srv.port) as h:
            h.send(headers(1, request_block("POST", "/nowhere", [
                ("content-length", "10")]), end_stream=False))
            t0 = time.monotonic()
            while True:
                f = h.read_frame()
                check(f is not None, "closed")
                if f[2] == 1 and f[1] & END_STREAM:
                    break
                check(time.monotonic() - t0 < 5, "no answer")
            for i, p in enumerate(parts):
                h.send(frame(DATA, END_STREAM if i == len(parts) - 1 else 0,
                             1, p))
                time.sleep(0.05)
            got = collect_streams(h, [1])
            eq(got[1][1], PROTOCOL_ERROR, "RST_STREAM code, body %s" % what)
            finish(h, 3)
    # A matching body ends the stream without an error.
    with H2(srv.port) as h:
        h.send(headers(1, request_block("POST", "/nowhere", [
            ("content-length", "5")]), end_stream=False))
        time.sleep(0.2)
        h.send(frame(DATA, 0, 1, b"abc") + frame(DATA, END_STREAM, 1, b"de"))
        got = collect_streams(h, [1])
        eq(got[1][1], None, "no reset for a matching body")
        finish(h, 3)


@case(timeout=60)
def fin_with_stuck_output_closes():
    """Responses blocked on the client's flow-control window, another
    stream finished, then the client's FIN: no window update can come, so
    the connection ends at once. 200 such clients under --max-conns 200
    once locked every new client out; a fresh one is answered now."""
    with Server("reference", ["--max-conns", "200", "--idle-timeout-ms",
                              "2000", "--body-timeout-ms", "2000"]) as s:
        conns = []
        for i in range(200):
            h = H2(s.port, [(S_INITIAL_WINDOW_SIZE, 100)])
            h.send(headers(1, request_block("POST", "/echo"),
                           end_stream=False) +
                   frame(DATA, END_STREAM, 1, b"e" * 5000) +
                   headers(3, request_block()))
            conns.append(h)
        time.sleep(0.5)
        for h in conns:
            h.sock.shutdown(socket.SHUT_WR)
        t0 = time.monotonic()
        for h in conns:
            h.frames_until_close(max(0.5, 5 - (time.monotonic() - t0)))
        took = time.monotonic() - t0
        for h in conns:
            h.close()
        suite.note("200 connections closed %.2f s after their FIN" % took)
        check_serves(s.port)


@case(timeout=60)
def client_resets_mid_response():
    """Streams reset while their responses are in flight (a deferred answer
    arriving later, a streamed one, a large one): the server stays sound."""
    def go():
        with H2(srv.port) as h:
            h.send(headers(1, request_block("GET", "/defer?ms=200")) +
                   headers(3, request_block("GET", "/tick?n=20&ms=10")) +
                   headers(5, request_block("GET", "/big?bytes=1048576")) +
                   headers(7, request_block("POST", "/echo"),
                           end_stream=False) +
                   frame(DATA, 0, 7, b"y" * 5000))
            time.sleep(0.05)
            h.send(rst_stream(1) + rst_stream(3) + rst_stream(5) +
                   rst_stream(7))
            time.sleep(0.4)
            h.send(headers(9, request_block()))
            eq(collect_streams(h, [9])[9], (HELLO_BODY, None), "stream 9")
    attack(go)


if __name__ == "__main__":
    suite.main(setup, teardown)
