#!/usr/bin/env python3
"""The soak's load: one process per kind, started by perf/soak/soak.

  load.py KIND --port P --tls-port T --seconds S --out FILE.json

Kinds: h1 (keep-alive, pipelined and TLS HTTP/1.1), h2 (raw HTTP/2 by
prior knowledge, over TLS and by h2c upgrade, plus bounded h2load runs),
h3 (HTTP/3 on the QUIC port by tern's h3client: GETs 20 to a connection,
200 KB uploads echoed, 1 MiB downloads, each body checked by SHA-256),
ws (WebSocket over HTTP/1.1 and HTTP/2, plain and TLS, small and large
messages), wsdeflate (python3-websockets with permessage-deflate; run by
Debian's /usr/bin/python3) and hostile (uploads cut off, clients that never
read, slowloris on both ports, connection floods, malformed input).

Every client targets 127.0.0.1, each loop paces itself (the load's CPU is
bounded so that the fresh-client latency criterion means something), and
the process stops by itself at its deadline: loops check it between
requests, and an alarm ends the process 60 s after it whatever happens.
The result is a JSON object of counters: ok and lost per protocol (a lost
request is a well-behaved client's request that got no valid answer, with
the first reasons kept), events of the hostile kinds, and "unexpected":
hostile traffic that the server did not answer as it must.
"""

import argparse
import collections
import json
import os
import random
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients as C  # noqa: E402
from clients import HELLO, Lost  # noqa: E402

h2 = C.h2


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = collections.Counter()
        self.lost = collections.Counter()
        self.events = collections.Counter()
        self.unexpected = collections.Counter()
        self.reasons = []

    def good(self, proto, n=1):
        with self.lock:
            self.ok[proto] += n

    def loss(self, proto, why, n=1):
        with self.lock:
            self.lost[proto] += n
            if len(self.reasons) < 40:
                self.reasons.append("%.1f %s: %s" % (
                    time.monotonic() - T0, proto, why))

    def event(self, name, n=1):
        with self.lock:
            self.events[name] += n

    def odd(self, name, why):
        with self.lock:
            self.unexpected[name] += 1
            if len(self.reasons) < 40:
                self.reasons.append("%.1f unexpected %s: %s" % (
                    time.monotonic() - T0, name, why))

    def as_dict(self):
        with self.lock:
            return {"ok": dict(self.ok), "lost": dict(self.lost),
                    "events": dict(self.events),
                    "unexpected": dict(self.unexpected),
                    "reasons": list(self.reasons)}


T0 = time.monotonic()
tally = Tally()
A = None  # the parsed arguments
DEADLINE = 0.0
ERRORS = (Lost, OSError, C.Closed, C.ProtocolError, ssl.SSLError,
          ValueError, struct.error)


def running():
    return time.monotonic() < DEADLINE


def nap(seconds):
    """Sleep, but not past the deadline."""
    time.sleep(max(0.0, min(seconds * A.pace, DEADLINE - time.monotonic())))


def forever(proto, session, pause):
    """Run `session` again and again until the deadline. An exception out of
    it is the loss of the request in flight."""
    while running():
        try:
            session()
        except ERRORS as e:
            tally.loss(proto, "%s: %s" % (type(e).__name__, e))
            nap(0.2)
        nap(pause)


# ---------------------------------------------------------------------------
# HTTP/1.1

def body_of(n, seed=0):
    return (b"%08d" % seed) * (n // 8) + b"z" * (n % 8)


def h1_mix():
    """A request and the answer it must get: (method, target, headers,
    body, status, expected body)."""
    k = random.random()
    if k < 0.35:
        return "GET", "/", None, b"", 200, HELLO
    if k < 0.5:
        n = random.choice((1000, 65536, 300000))
        return "GET", "/big?bytes=%d" % n, None, b"", 200, b"x" * n
    if k < 0.62:
        b = body_of(random.choice((0, 10, 5000, 200000)), random.randrange(9))
        return "POST", "/echo", None, b, 200, b
    if k < 0.7:
        n = random.choice((1, 100000, 1 << 20))
        return "POST", "/upload", None, b"u" * n, 200, b"%d" % n
    if k < 0.76:
        b = body_of(10000, 3)
        return "POST", "/collect", None, b, 200, b
    if k < 0.82:
        return "GET", "/stream", None, b"", 200, b"".join(
            b"chunk %d\n" % i for i in range(5))
    if k < 0.93:
        rid = "r%d" % random.randrange(1 << 20)
        return ("GET", "/api/v1/users/42/detail", [("X-Request-Id", rid)],
                b"", 200, b"users 42 detail " + rid.encode())
    if k < 0.97:
        return "GET", "/defer?ms=3", None, b"", 200, b"deferred"
    return "GET", "/no/such/page", None, b"", 404, None


def checked(r, status, body, what):
    if r.status != status or (body is not None and r.body != body):
        raise Lost("%s: status %d, %d body bytes (wanted %d, %s)" % (
            what, r.status, len(r.body or b""), status,
            "%d bytes" % len(body) if body is not None else "any body"))


def h1_session(sock_fn, proto, requests, pause):
    c = C.Conn(sock=sock_fn(), timeout=10.0)
    try:
        for _ in range(requests):
            if not running():
                break
            m, t, hs, b, st, want = h1_mix()
            checked(c.request(m, t, hs, b), st, want, "%s %s" % (m, t))
            tally.good(proto)
            nap(pause)
    finally:
        c.close()


def h1_pipelined():
    c = C.Conn(sock=C.tcp(A.port), timeout=10.0)
    try:
        for _ in range(10):
            if not running():
                break
            batch = []
            for i in range(16):
                k = i % 3
                if k == 0:
                    batch.append(("/", HELLO))
                elif k == 1:
                    batch.append(("/api/v1/orders/%d" % i,
                                  b"orders %d " % i))
                else:
                    batch.append(("/big?bytes=2000", b"x" * 2000))
            c.send(b"".join(C.build_request("GET", t) for t, _ in batch))
            for t, want in batch:
                checked(c.response(), 200, want, "pipelined GET " + t)
                tally.good("h1-pipelined")
            nap(0.05)
    finally:
        c.close()


def kind_h1():
    plain = lambda: C.tcp(A.port)  # noqa: E731
    tls = lambda: C.tls(A.tls_port, ["http/1.1"])  # noqa: E731
    return [
        lambda: forever("h1", lambda: h1_session(plain, "h1", 40, 0.01), 0.02),
        lambda: forever("h1", lambda: h1_session(plain, "h1", 40, 0.01), 0.02),
        lambda: forever("h1-pipelined", h1_pipelined, 0.05),
        lambda: forever("h1-tls", lambda: h1_session(tls, "h1-tls", 20, 0.01),
                        0.05),
    ]


# ---------------------------------------------------------------------------
# HTTP/2

def h2_batch(cl, scheme, proto):
    """16 to 32 concurrent streams of mixed requests."""
    want = []
    for i in range(random.randrange(16, 33)):
        k = i % 6
        if k in (0, 1, 2):
            want.append((cl.request("GET", "/", scheme=scheme), HELLO))
        elif k == 3:
            want.append((cl.request("GET", "/big?bytes=65536", scheme=scheme),
                         b"x" * 65536))
        elif k == 4:
            b = body_of(random.choice((100, 50000)), i)
            want.append((cl.request("POST", "/echo", b, scheme=scheme), b))
        else:
            want.append((cl.request("POST", "/upload", b"u" * 200000,
                                    scheme=scheme), b"200000"))
    cl.wait([s for s, _ in want])
    for s, body in want:
        cl.check(s, body)
    tally.good(proto, len(want))


def h2_session(make, scheme, proto, batches):
    cl = make()
    try:
        for _ in range(batches):
            if not running():
                break
            h2_batch(cl, scheme, proto)
            nap(0.05)
    finally:
        cl.close()


def h2load_runs():
    """h2load, bounded by request count, rate and time: h2c and h2 over
    TLS in turn. Its 2xx count against the requests asked for gives the
    losses."""
    tls = False
    while running():
        n = 1000
        target = ("https://127.0.0.1:%d/" % A.tls_port) if tls else \
            ("http://127.0.0.1:%d/" % A.port)
        proto = "h2load-tls" if tls else "h2load-h2c"
        try:
            # --rps bounds the burst (4 clients, 100 requests a second
            # each): unbounded, h2load would take whole cores for itself.
            p = subprocess.run(["h2load", "-n", str(n), "-c", "4", "-m", "16",
                                "-t", "1", "-T", "20", "--rps", "100",
                                target],
                               capture_output=True, timeout=60)
            out = p.stdout.decode(errors="replace")
            m = re.search(r"status codes: (\d+) 2xx", out)
            got = int(m.group(1)) if m else 0
            if got:
                tally.good(proto, got)
            if got < n:
                tally.loss(proto, "h2load: %d of %d 2xx; %s" % (
                    got, n, out.strip().splitlines()[-6:]), n - got)
        except subprocess.TimeoutExpired:
            tally.loss(proto, "h2load ran past 60 s", n)
        tls = not tls
        nap(5)


def kind_h2():
    plain = lambda: C.H2Client(C.tcp(A.port))  # noqa: E731
    tls = lambda: C.H2Client(C.tls(A.tls_port, ["h2"]))  # noqa: E731

    def up():
        cl = C.h2c_upgrade(A.port)
        tally.good("h2c-upgrade")  # the upgraded request's answer
        return cl

    return [
        lambda: forever("h2c", lambda: h2_session(plain, "http", "h2c", 10),
                        0.05),
        lambda: forever("h2-tls", lambda: h2_session(tls, "https", "h2-tls",
                                                     10), 0.1),
        lambda: forever("h2c-upgrade", lambda: h2_session(
            up, "http", "h2c-upgrade", 2), 0.5),
        h2load_runs,
    ]


# ---------------------------------------------------------------------------
# HTTP/3: tern's own h3client (test/net/http3/h3client.c) of the build under
# test, one QUIC connection a run, its answers checked by length and
# SHA-256.

def h3_run(proto, args, want):
    """One h3client run; `want` maps a stream id to the (length, sha256)
    its body must have. Counts each stream answered right as ok."""
    client = os.path.join(A.build, "test", "net", "h3client")
    p = subprocess.run([client, "--timeout-ms", "20000"] + args,
                       capture_output=True, text=True, timeout=60)
    got = {}
    for line in p.stdout.splitlines():
        w = line.split()
        if len(w) >= 6 and w[0] == "stream" and w[2] == "body":
            got[int(w[1])] = (int(w[3]), w[5])
    good = sum(1 for sid, v in want.items() if got.get(sid) == v)
    if good:
        tally.good(proto, good)
    if good < len(want):
        tally.loss(proto, "h3client rc %d: %d of %d bodies right; %s" % (
            p.returncode, good, len(want), p.stdout.strip()[-300:]),
            len(want) - good)


def h3_pattern(n):
    """h3client's POST body: byte i is i % 251."""
    return (bytes(range(251)) * (n // 251 + 1))[:n]


def kind_h3():
    import hashlib
    url = "https://127.0.0.1:%d" % A.quic_port
    hello_sum = (len(HELLO), hashlib.sha256(HELLO).hexdigest())
    echo_n = 200000
    echo_sum = (echo_n, hashlib.sha256(h3_pattern(echo_n)).hexdigest())
    big_n = 1 << 20
    big_sum = (big_n, hashlib.sha256(b"x" * big_n).hexdigest())

    def gets():
        # 20 requests on one connection, all open at once.
        h3_run("h3", ["-n", "20", "GET", url + "/"],
               {4 * i: hello_sum for i in range(20)})

    def uploads():
        h3_run("h3-echo", ["--body-size", str(echo_n), "POST",
                           url + "/echo"], {0: echo_sum})

    def downloads():
        h3_run("h3-big", ["GET", url + "/big?bytes=%d" % big_n],
               {0: big_sum})

    if not A.quic_port or not os.access(
            os.path.join(A.build, "test", "net", "h3client"), os.X_OK):
        sys.stderr.write("no QUIC port or no h3client: no HTTP/3 load\n")
        return []

    def loop(proto, fn, pause):
        def go():
            while running():
                try:
                    fn()
                except (OSError, subprocess.TimeoutExpired, ValueError) as e:
                    tally.loss(proto, "%s: %s" % (type(e).__name__, e))
                nap(pause)
        return go

    return [loop("h3", gets, 0.2), loop("h3-echo", uploads, 0.5),
            loop("h3-big", downloads, 1.0)]


# ---------------------------------------------------------------------------
# WebSocket

def ws_messages():
    """30 messages: mostly small, every tenth 64 KiB, one of 1 MiB."""
    big = random.randrange(30)
    for i in range(30):
        if i == big:
            yield 0x2, os.urandom(1 << 20)
        elif i % 10 == 9:
            yield 0x2, os.urandom(65536)
        elif i % 2:
            yield 0x1, b"t" * random.randrange(0, 200)
        else:
            yield 0x2, os.urandom(random.randrange(1, 2000))


def ws_h1_session(sock_fn, proto, path="/ws"):
    ws = C.WsH1(sock_fn(), path)
    try:
        for op, payload in ws_messages():
            if not running():
                break
            ws.echo(op, payload)
            tally.good(proto)
            nap(0.01)
        ws.close()
    finally:
        ws.c.close()


def ws_h2_session(make, scheme, proto):
    """Four WebSockets on one HTTP/2 connection, in turn, plus a GET."""
    cl = make()
    try:
        socks = [C.WsH2(cl, scheme=scheme) for _ in range(4)]
        for op, payload in ws_messages():
            if not running():
                break
            random.choice(socks).echo(op, payload)
            tally.good(proto)
            nap(0.01)
        s = cl.request("GET", "/", scheme=scheme)
        cl.wait([s])
        cl.check(s, HELLO)
        for ws in socks:
            ws.close()
    finally:
        cl.close()


def kind_ws():
    plain = lambda: C.tcp(A.port)  # noqa: E731
    tls = lambda: C.tls(A.tls_port, ["http/1.1"])  # noqa: E731
    h2p = lambda: C.H2Client(C.tcp(A.port))  # noqa: E731
    h2t = lambda: C.H2Client(C.tls(A.tls_port, ["h2"]))  # noqa: E731
    return [
        lambda: forever("ws-h1", lambda: ws_h1_session(plain, "ws-h1"), 0.1),
        lambda: forever("ws-h1-tls", lambda: ws_h1_session(tls, "ws-h1-tls"),
                        0.2),
        lambda: forever("ws-h2", lambda: ws_h2_session(h2p, "http", "ws-h2"),
                        0.1),
        lambda: forever("ws-h2-tls", lambda: ws_h2_session(h2t, "https",
                                                          "ws-h2-tls"), 0.2),
    ]


def kind_wsdeflate():
    """python3-websockets, permessage-deflate on, plain and TLS."""
    import asyncio
    import websockets

    async def session(uri, ctx, proto):
        async with websockets.connect(uri, ssl=ctx, compression="deflate",
                                      max_size=None, open_timeout=10,
                                      close_timeout=10) as ws:
            for i in range(20):
                if not running():
                    break
                if i == 7:
                    msg = b"compressible " * 80000  # about 1 MiB
                elif i % 3 == 0:
                    msg = os.urandom(random.randrange(1, 70000))
                else:
                    msg = "text %d " % i * random.randrange(1, 50)
                await ws.send(msg)
                got = await asyncio.wait_for(ws.recv(), 10)
                if got != msg:
                    raise Lost("deflate echo differs (%d bytes)" % len(msg))
                tally.good(proto)
                await asyncio.sleep(0.02 * A.pace)

    def loop(uri, ctx, proto):
        def one():
            asyncio.run(asyncio.wait_for(session(uri, ctx, proto), 60))
        forever(proto, one, 0.2)

    ctx = C.tls_context(["http/1.1"])
    return [
        lambda: loop("ws://127.0.0.1:%d/ws" % A.port, None, "ws-deflate"),
        lambda: loop("wss://127.0.0.1:%d/ws" % A.tls_port, ctx,
                     "ws-deflate-tls"),
    ]


# ---------------------------------------------------------------------------
# Hostile traffic

def send_some(sock, data, timeout=1.0):
    """Send what the peer takes within `timeout`; the byte count."""
    sent = 0
    sock.setblocking(False)
    end = time.monotonic() + timeout
    try:
        while sent < len(data) and time.monotonic() < end:
            _, w, _ = select.select([], [sock], [], 0.1)
            if not w:
                continue
            try:
                sent += sock.send(data[sent:sent + 65536])
            except (BlockingIOError, ssl.SSLWantWriteError,
                    ssl.SSLWantReadError):
                continue
    except (OSError, ssl.SSLError):
        pass
    return sent


def hang_up(sock):
    if random.random() < 0.5:
        C.set_rst(sock)
    C.close_quietly(sock)


TURN = collections.Counter()


def turn(name, n):
    """The kinds of a hostile client in rotation, so that a short run has
    them all."""
    with tally.lock:
        TURN[name] += 1
        return TURN[name] % n


def cut_upload():
    """An upload that stops halfway and the client goes."""
    k = turn("cut", 5)
    if k == 0 or k == 1:  # HTTP/1.1, plain or TLS, length-framed
        s = C.tcp(A.port) if k == 0 else C.tls(A.tls_port, ["http/1.1"])
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 1000000\r\n\r\n" + b"u" * 300000)
        hang_up(s)
        tally.event("cut-upload-h1" if k == 0 else "cut-upload-h1-tls")
    elif k == 2:  # chunked, cut inside a chunk
        s = C.tcp(A.port)
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n"
                  b"10000\r\n" + b"e" * 30000)
        time.sleep(0.05)
        hang_up(s)
        tally.event("cut-upload-chunked")
    else:  # HTTP/2: the connection goes, or the stream is reset and the
        # connection must serve on (that GET is a well-behaved request)
        cl = C.H2Client(C.tcp(A.port) if k == 3 else
                        C.tls(A.tls_port, ["h2"]))
        scheme = "http" if k == 3 else "https"
        s = cl.open([(":method", "POST"), (":scheme", scheme),
                     (":path", "/upload"), (":authority", "x"),
                     ("content-length", "1000000")], end_stream=False)
        cl.send_data(s, b"u" * 100000)
        if random.random() < 0.5:
            hang_up(cl.sock)
            tally.event("cut-upload-h2")
            return
        cl.send(h2.rst_stream(s.sid))
        del cl.streams[s.sid]
        tally.event("cut-upload-h2-rst")
        proto = "h2c" if k == 3 else "h2-tls"
        try:
            g = cl.request("GET", "/", scheme=scheme)
            cl.wait([g])
            cl.check(g, HELLO)
            tally.good(proto)
        except ERRORS as e:
            tally.loss(proto, "GET after a reset upload: %s" % e)
        cl.close()


def never_read_one():
    """A client that asks for a lot and never reads, held a few seconds."""
    k = turn("never-read", 4)
    if k == 0:
        s = C.tcp(A.port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        send_some(s, C.build_request("GET", "/big?bytes=1048576") * 30)
        name = "never-read-h1"
    elif k == 1:
        s = C.tls(A.tls_port, ["http/1.1"])
        send_some(s, C.build_request("GET", "/big?bytes=1048576") * 30)
        name = "never-read-h1-tls"
    elif k == 2:
        ws = C.WsH1(C.tcp(A.port))
        s = ws.c.sock
        msg = C.ws_frame(0x2, os.urandom(32768))
        send_some(s, msg * 100, timeout=2.0)
        name = "never-read-ws"
    else:
        s = C.tcp(A.port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        cl = C.H2Client(s)
        for _ in range(20):
            cl.request("GET", "/big?bytes=1048576")
        name = "never-read-h2"
    tally.event(name)
    nap(random.uniform(2, 6))
    hang_up(s)


SLOW_HEAD = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000


def tls_client_hello():
    """The bytes of a real ClientHello, for trickling before a handshake."""
    ctx = C.tls_context(["h2", "http/1.1"])
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def slowloris():
    """Connections that trickle a head one byte every half second: plain,
    TLS after the handshake, and TLS before it (the ClientHello). The
    server must cut each within its head timeout (plus slack)."""
    limit = A.head_timeout + 10.0
    hello_bytes = tls_client_hello()
    conns = []  # [sock, kind, data, offset, opened, next_send]

    def add(kind):
        try:
            if kind == "tls":
                s = C.tls(A.tls_port, ["http/1.1"])
                data = SLOW_HEAD
            elif kind == "tls-handshake":
                s = C.tcp(A.tls_port)
                data = hello_bytes
            else:
                s = C.tcp(A.port)
                data = SLOW_HEAD
        except ERRORS as e:
            tally.odd("slowloris-connect", str(e))
            return
        s.setblocking(False)
        now = time.monotonic()
        conns.append([s, kind, data, 0, now, now])
        tally.event("slowloris-" + kind)

    while running():
        want = {"plain": 6, "tls": 3, "tls-handshake": 3}
        for c in conns:
            want[c[1]] -= 1
        for kind, n in want.items():
            for _ in range(max(0, n)):
                add(kind)
        now = time.monotonic()
        for c in list(conns):
            s, kind, data, off, opened, nxt = c
            gone = False
            try:
                r, _, _ = select.select([s], [], [], 0)
                if r:
                    try:
                        got = s.recv(4096)
                    except (BlockingIOError, ssl.SSLWantReadError):
                        got = None
                    if got is not None and (not got or kind != "tls" or
                                            b"HTTP/1.1 4" in got):
                        gone = True
                if not gone and now >= nxt and off < len(data):
                    s.send(data[off:off + 1])
                    c[3] += 1
                    c[5] = now + 0.5
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError,
                    OSError):
                gone = True
            if gone:
                conns.remove(c)
                C.close_quietly(s)
                tally.event("slowloris-cut-" + kind)
                with tally.lock:
                    k = "slowloris-max-s-" + kind
                    tally.events[k] = max(tally.events.get(k, 0),
                                          round(now - opened, 1))
            elif now - opened > limit:
                conns.remove(c)
                C.close_quietly(s)
                tally.odd("slowloris-not-cut-" + kind,
                          "still open after %.0f s" % (now - opened))
        nap(0.25)
    for c in conns:
        C.close_quietly(c[0])


def flood():
    """Every 12 s: 200 plain connections (half with a partial request
    line) and 30 to the TLS port, opened in bursts of ten 10 ms apart (a
    quarter of a second in all: a flood, at a rate bounded so that the
    fresh-client criterion still measures the server), held a second, and
    closed."""
    nap(4)
    while running():
        socks = []
        for i in range(230):
            if not running():
                break
            if i % 10 == 9:
                time.sleep(0.01)
            try:
                s = socket.create_connection(
                    (C.HOST, A.port if i < 200 else A.tls_port), timeout=5)
                if i < 200 and i % 2:
                    s.send(b"GET / HT")
                socks.append(s)
            except OSError as e:
                tally.odd("flood-connect", str(e))
                break
        tally.event("flood-conns", len(socks))
        time.sleep(1.0)
        for s in socks:
            hang_up(s)
        nap(12)


def expect_end(sock, timeout=5.0):
    """Read until the peer closes; the bytes read, or None when it did not
    close within `timeout`."""
    got = bytearray()
    end = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < end:
        try:
            b = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, ssl.SSLError, OSError):
            return bytes(got)
        if not b:
            return bytes(got)
        got += b
    return None


def garbage():
    """Malformed input on every protocol; each must end in the right
    refusal (a 4xx and a close, a GOAWAY, a close 1002, a dropped TLS
    connection), never a hang."""
    cases = [
        ("h1-bad-line", "plain", b"GARBAGE\r\n\r\n", b"HTTP/1.1 400"),
        ("h1-bad-length", "plain", b"POST /collect HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 12x\r\n\r\n", b"HTTP/1.1 400"),
        ("h1-huge-head", "plain", b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " +
         b"b" * 200000 + b"\r\n\r\n", None),  # a 431 may be lost to the
        # reset that closing with unread input makes
        ("h1-bad-chunk", "plain", b"POST /echo HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", None),
        ("h2-bad-preface", "plain", b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", None),
        ("h2-data-on-0", "plain", h2.PREFACE + h2.settings() +
         h2.frame(h2.DATA, 0, 0, b"x"), b"GOAWAY"),
        ("tls-junk", "tls", os.urandom(3000), None),
        ("ws-unmasked", "ws", struct.pack("!BB", 0x81, 1) + b"x",
         b"\x88\x02\x03\xea"),
    ]
    while running():
        name, port, data, want = random.choice(cases)
        try:
            if port == "ws":
                ws = C.WsH1(C.tcp(A.port))
                s = ws.c.sock
                prefix = bytes(ws.c.buf)
            else:
                s = C.tcp(A.port if port == "plain" else A.tls_port)
                prefix = b""
            send_some(s, data, timeout=2.0)
            got = expect_end(s)
            C.close_quietly(s)
            if got is None:
                tally.odd(name, "the connection was not closed in 5 s")
            elif want == b"GOAWAY":
                if b"\x07\x00\x00\x00\x00\x00" not in got:
                    tally.odd(name, "no GOAWAY: %r" % got[-40:])
            elif want is not None and want not in prefix + got:
                tally.odd(name, "got %r" % got[:60])
            tally.event("garbage-" + name)
        except ERRORS as e:
            tally.odd(name, "%s: %s" % (type(e).__name__, e))
        nap(0.5)


def kind_hostile():
    def cuts():
        while running():
            try:
                cut_upload()
            except ERRORS as e:
                tally.event("cut-upload-error")  # a refusal is fine here
                del e
            nap(0.3)

    def never_read():
        while running():
            try:
                never_read_one()
            except ERRORS:
                tally.event("never-read-error")
            nap(0.5)

    return [cuts, never_read, never_read, slowloris, flood, garbage]


KINDS = {"h1": kind_h1, "h2": kind_h2, "h3": kind_h3, "ws": kind_ws,
         "wsdeflate": kind_wsdeflate, "hostile": kind_hostile}


def main():
    global A, DEADLINE
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=sorted(KINDS))
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls-port", type=int, required=True)
    ap.add_argument("--quic-port", type=int, default=0)
    ap.add_argument("--build", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build-asan"))
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pace", type=float, default=1.0,
                    help="multiplies every pause (more: lighter load)")
    ap.add_argument("--head-timeout", type=float, default=10.0)
    A = ap.parse_args()
    DEADLINE = time.monotonic() + A.seconds
    # A hard stop, whatever a client does: the alarm's default action ends
    # the process.
    signal.alarm(int(A.seconds) + 60)
    random.seed(os.getpid())
    crashed = []

    def guarded(fn):
        # A client thread that dies of a bug of its own would only make
        # the load lighter, unseen: count it, and the soak fails on it.
        def go():
            try:
                fn()
            except BaseException:  # noqa: B902
                crashed.append(traceback.format_exc())
                sys.stderr.write(crashed[-1])
        return go

    threads = [threading.Thread(target=guarded(fn), daemon=True)
               for fn in KINDS[A.kind]()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, DEADLINE - time.monotonic()) + 30)
    res = tally.as_dict()
    res["kind"] = A.kind
    res["stuck_threads"] = sum(t.is_alive() for t in threads)
    res["crashed_threads"] = crashed
    with open(A.out + ".tmp", "w") as f:
        json.dump(res, f, indent=1)
    os.rename(A.out + ".tmp", A.out)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
