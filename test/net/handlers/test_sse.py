#!/usr/bin/env python3
"""Server-Sent Events (tern_sse_*, the reference server's /sse, a hub
published to from another thread by /sse-publish) over real sockets:
curl over HTTP/1.1 and HTTP/2 (h2c), tern's HTTP/3 client, and raw
sockets where a client must misbehave (one that never reads).

The streams are read back with the WHATWG HTML standard's event-stream
parser (below): every published event reaches every subscriber on every
worker and protocol, in order, with multi-line data intact; Last-Event-ID
comes back; heartbeats keep a quiet stream alive; a client too slow to
read is closed and its memory given back; a client that leaves is
noticed; the graceful stop ends every stream at once.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (BUILD, Conn, Server, Skip, Suite, check, eq, get,
                     sanitized, self_signed, vmrss_kib)

suite = Suite()
case = suite.case
S = {}


def setup():
    import tempfile
    d = tempfile.mkdtemp(prefix="tern-sse-")
    S["cert"] = self_signed(d)
    S["srv"] = start()


def start(*extra):
    s = Server("reference", ["--workers", "2", "--tls-port", "0", "--cert",
                             S["cert"][0], "--key", S["cert"][1],
                             "--quic-port", "0"] + list(extra))
    s.quic = None
    for _ in range(3):
        m = re.match(r"quic listening on (\d+)$", s.next_line())
        if m:
            s.quic = int(m.group(1))
            break
    return s


def teardown():
    S["srv"].stop()


def parse_events(text):
    """The standard's "interpret an event stream": [(id, event, data)]
    for each dispatched event, and the comment lines seen."""
    events, comments = [], 0
    data, event, last_id = [], "", None
    for line in re.split(r"\r\n|\r|\n", text)[:-1]:  # the last is partial
        if line == "":
            if data:
                events.append((last_id, event or "message",
                               "\n".join(data)))
            data, event = [], ""
            continue
        if line.startswith(":"):
            comments += 1
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            last_id = value
        elif name == "retry":
            events.append((None, "retry", value))
    return events, comments


class Stream:
    """curl -N on /sse (or `path`), read as it arrives."""

    def __init__(self, port, query="", h2=False, headers=(), path="/sse"):
        args = ["curl", "-sN", "--max-time", "60"]
        if h2:
            args.append("--http2-prior-knowledge")
        for h in headers:
            args += ["-H", h]
        self.p = subprocess.Popen(
            args + ["http://127.0.0.1:%d%s%s" % (port, path, query)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf = b""
        self.ended = False
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            b = self.p.stdout.read1(65536)
            with self.cv:
                if not b:
                    self.ended = True
                    self.cv.notify_all()
                    return
                self.buf += b
                self.cv.notify_all()

    def wait(self, pred, timeout=10.0, what="events"):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                ev, com = parse_events(self.buf.decode())
                if pred(ev, com):
                    return ev, com
                left = deadline - time.monotonic()
                check(left > 0 and not (self.ended and not pred(ev, com)
                                         and self.ended),
                      "%s: not seen in %.0f s; got %r" % (what, timeout,
                                                          self.buf[-600:]))
                self.cv.wait(min(left, 0.2))

    def close(self):
        self.p.kill()
        self.p.wait()


def stats(port):
    return json.loads(get(port, "/sse-stats").body)


def publish(port, **q):
    from urllib.parse import urlencode
    r = get(port, "/sse-publish?" + urlencode(q))
    eq(r.status, 200, "publish")
    rc, subs = r.body.split()
    return int(rc), int(subs)


def wait_stats(port, pred, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        st = stats(port)
        if pred(st):
            return st
        check(time.monotonic() < deadline, "%s: %r" % (what, st))
        time.sleep(0.05)


def by_name(ev, name):
    return [e for e in ev if e[1] == name]


@case
def stream_framing_and_last_event_id():
    s = S["srv"]
    a = Stream(s.port, "?n=3&retry=2500")
    b = Stream(s.port, "", h2=True, headers=["Last-Event-ID: 41"])
    try:
        ev, _ = a.wait(lambda ev, c: len(ev) >= 5)
        eq(ev[:5], [(None, "retry", "2500"), (None, "hello", "none"),
                    ("1", "message", "event 1"), ("2", "message", "event 2"),
                    ("3", "message", "event 3")], "h1 stream")
        ev, _ = b.wait(lambda ev, c: ev)
        eq(ev[0], (None, "hello", "41"), "Last-Event-ID read back (h2)")
    finally:
        a.close()
        b.close()


@case
def publish_reaches_every_subscriber_in_order():
    """12 subscribers over h1 and h2 on two workers; 50 events published
    from another thread (a blocking route), with multi-line and empty
    data: each subscriber gets all 50, in order, intact."""
    s = S["srv"]
    streams = [Stream(s.port, "", h2=i % 2 == 1) for i in range(12)]
    try:
        for st in streams:
            st.wait(lambda ev, c: by_name(ev, "hello"))
        wait_stats(s.port, lambda st: st["subscribers"] == 12,
                   "12 subscribers")
        want = []
        for i in range(50):
            data = ["plain %d" % i, "two\nlines %d" % i, "",
                    "crlf\r\nmade lf %d" % i][i % 4]
            rc, subs = publish(s.port, id=str(100 + i), event="tick",
                               data=data)
            eq((rc, subs), (0, 12), "publish %d" % i)
            want.append((str(100 + i), "tick", data.replace("\r\n", "\n")))
        for k, st in enumerate(streams):
            ev, _ = st.wait(lambda ev, c: len(by_name(ev, "tick")) >= 50,
                            what="stream %d" % k)
            eq(by_name(ev, "tick"), want, "stream %d's events" % k)
    finally:
        for st in streams:
            st.close()
    st = wait_stats(s.port, lambda st: st["subscribers"] == 0,
                    "subscribers gone after the clients left")
    check(st["gone"] >= 12, "the leaving clients counted: %r" % st)


@case
def http3_stream():
    s = S["srv"]
    client = os.path.join(BUILD, "test", "net", "h3client")
    if s.quic is None or not os.path.exists(client):
        raise Skip("built without HTTP/3")
    out = os.path.join(os.path.dirname(S["cert"][0]), "h3.body")
    p = subprocess.run([client, "--print-headers", "--body-out", out, "GET",
                        "https://127.0.0.1:%d/sse?n=2&close=1" % s.quic],
                       capture_output=True, text=True, timeout=30)
    text = p.stdout + p.stderr
    check("stream 0 status 200" in text and
          "header content-type: text/event-stream" in text, text[-500:])
    with open(out) as f:
        ev, _ = parse_events(f.read())
    eq(ev, [(None, "hello", "none"), ("1", "message", "event 1"),
            ("2", "message", "event 2")], "h3 stream")


@case
def closed_by_the_server():
    s = S["srv"]
    before = stats(s.port)["closed"]
    with Conn(s.port) as c:
        r = c.request("GET", "/sse?n=1&close=1")
        eq((r.status, r.headers.get("content-type"), r.framing),
           (200, "text/event-stream", "chunked"), "a finished stream")
        ev, _ = parse_events(r.body.decode())
        eq([e[1] for e in ev], ["hello", "message"], "its events")
        eq(c.request("GET", "/").status, 200, "the connection serves on")
    eq(stats(s.port)["closed"], before + 1, "counted as closed")
    r = get(s.port, "/sse", method="HEAD")
    eq((r.status, r.headers.get("content-type"), r.body),
       (200, "text/event-stream", b""), "HEAD: the head, no stream")


@case(timeout=30)
def heartbeat_keeps_a_quiet_stream_alive():
    s = S["srv"]
    a = Stream(s.port, "?heartbeat=1000")
    quiet = Stream(s.port, "?heartbeat=0")
    try:
        t0 = time.monotonic()
        a.wait(lambda ev, c: c >= 2, timeout=8, what="two heartbeats")
        took = time.monotonic() - t0
        suite.note("two heartbeats in %.1f s" % took)
        _, c = quiet.wait(lambda ev, c: ev)
        eq(c, 0, "no heartbeat with heartbeat=0")
    finally:
        a.close()
        quiet.close()


@case(timeout=60)
def slow_client_is_closed_and_memory_bounded():
    """A subscriber that never reads (a 4 KiB receive buffer) with a
    64 KiB high-water mark; 200 events of 64 KiB published: the server
    closes it as too slow instead of queuing 12.5 MiB, and a reader with a
    high mark keeps getting every event."""
    s = S["srv"]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", s.port))
    sock.sendall(b"GET /sse?hw=65536&heartbeat=0 HTTP/1.1\r\nHost: x\r\n\r\n")
    # The reader may fall behind on a loaded machine: its mark is high.
    reader = Stream(s.port, "?heartbeat=0&hw=67108864")
    try:
        reader.wait(lambda ev, c: ev)
        wait_stats(s.port, lambda st: st["subscribers"] == 2, "2 subscribers")
        before = stats(s.port)["slow"]
        rss0 = vmrss_kib(s.proc.pid)
        for i in range(200):
            rc, subs = publish(s.port, id=str(i), size=65536)
            eq(rc, 0, "publish %d" % i)
        st = wait_stats(s.port, lambda st: st["slow"] == before + 1,
                        "the slow client closed")
        eq(st["subscribers"], 1, "the reader stays")
        ev, _ = reader.wait(lambda ev, c: len(ev) >= 201, timeout=30,
                            what="every event at the reader")
        eq([e[0] for e in ev[1:]], [str(i) for i in range(200)],
           "the reader's ids")
        grown = vmrss_kib(s.proc.pid) - rss0
        suite.note("server RSS grew %d KiB for 12.5 MiB published" % grown)
        if not sanitized():
            # What the reader had not taken yet may be queued for it; the
            # slow client's share is bounded by its mark (the count above).
            check(grown < 20 << 10, "RSS grew %d KiB" % grown)
    finally:
        reader.close()
        sock.close()


@case(timeout=40)
def graceful_stop_ends_every_stream():
    """SIGTERM: each open stream ends cleanly (curl sees the chunked end
    on HTTP/1.1, END_STREAM on HTTP/2, and exits 0; the clients reconnect
    elsewhere) instead of holding the stop until its 5 s deadline, which
    would cut them (curl: "transfer closed"); the server exits 0."""
    s = start()
    streams = [Stream(s.port, "", h2=i % 2 == 1) for i in range(4)]
    try:
        for st in streams:
            st.wait(lambda ev, c: ev)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        for st in streams:
            with st.cv:
                while not st.ended and time.monotonic() - t0 < 10:
                    st.cv.wait(0.2)
            check(st.ended, "stream still open %.1f s after SIGTERM"
                  % (time.monotonic() - t0))
        eq([st.p.wait(10) for st in streams], [0] * 4,
           "curl's exit status: each stream ended cleanly")
        eq(s.proc.wait(15), 0, "exit status")
        suite.note("streams ended and the server exited %.2f s after "
                   "SIGTERM" % (time.monotonic() - t0))
    finally:
        for st in streams:
            st.close()
        s.kill()


@case
def publish_refuses_a_field_that_would_split():
    s = S["srv"]
    rc, _ = publish(s.port, id="a\nb", data="x")
    eq(rc, -1, "an id with LF: TERN_EINVAL")
    rc, _ = publish(s.port, event="a\rdata: injected", data="x")
    eq(rc, -1, "an event type with CR: TERN_EINVAL")


if __name__ == "__main__":
    suite.main(setup, teardown)
