#!/usr/bin/env python3
"""Request bodies over real sockets: 100-continue, large streamed uploads
(chunked and Content-Length) checked by SHA-256, trailers, and chunked
framing split at every position."""

import hashlib
import os
import select
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (HELLO_BODY, Conn, Server, Suite, build_request, check,
                     chunked, eq, shared_reference_teardown, stats_from)

suite = Suite()
case = suite.case
srv = None
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def setup():
    global srv
    srv = Server("reference")


def wait_readable(sock, timeout):
    r, _, _ = select.select([sock], [], [], timeout)
    return bool(r)


# ---- 100-continue -----------------------------------------------------------

@case
def upload_sink_counts_bytes():
    # The reference server's /upload reads a streamed body to its end and
    # answers its length: the benchmarks' upload scenarios rely on it.
    with Conn(srv.port) as c:
        body = b"u" * (1 << 20) + b"tail"
        r = c.request("POST", "/upload", {"Content-Length": str(len(body))},
                      body)
        eq((r.status, r.body), (200, str(len(body)).encode()), "length")
        r = c.request("POST", "/upload", {"Transfer-Encoding": "chunked"},
                      chunked([b"ab", b"cde", b""]))
        eq((r.status, r.body), (200, b"5"), "chunked length")
        r = c.request("POST", "/upload", {"Content-Length": "0"})
        eq((r.status, r.body), (200, b"0"), "empty body")


@case
def expect100_echo():
    # tern.h: tern_request_read() sends "100 Continue" to a client waiting
    # for it. /echo calls it at once, so the interim response must arrive
    # while the client still holds the body back.
    body = b"0123456789" * 100
    with Conn(srv.port) as c:
        c.send(build_request("POST", "/echo", {
            "Content-Length": str(len(body)), "Expect": "100-continue"}))
        check(wait_readable(c.sock, 2.0),
              "nothing within 2 s of a head with Expect: 100-continue")
        first = c.head()
        eq(first.status, 100, "first response while the body is held back "
           "(got %r)" % first.raw_head)
        eq(first.raw_head, CONTINUE, "interim response bytes")
        c.send(body)
        r = c.response()
        eq((r.status, r.body), (200, body), "echo after 100")


@case
def expect100_echo_no_deadlock():
    # Weaker than expect100_echo: some response (interim or final head)
    # must reach a client that waits before sending the body, and the
    # exchange must then complete.
    body = b"abcdefghij" * 100
    with Conn(srv.port) as c:
        c.send(build_request("POST", "/echo", {
            "Content-Length": str(len(body)), "Expect": "100-continue"}))
        check(wait_readable(c.sock, 2.0),
              "nothing within 2 s of a head with Expect: 100-continue")
        first = c.head()
        suite.note("first response to Expect on /echo: %d" % first.status)
        check(first.status in (100, 200), "first response %d" % first.status)
        c.send(body)
        if first.status == 100:
            r = c.response()
        else:
            # The final head came first: its body follows.
            r = first
            pieces = []
            c.body_chunks(r, time.monotonic() + 5, pieces.append)
            r.body = b"".join(pieces)
        eq((r.status, r.body), (200, body), "echo")
        check_hello_on(c)


@case
def expect100_collect():
    body = os.urandom(5000)
    with Conn(srv.port) as c:
        c.send(build_request("POST", "/collect", {
            "Content-Length": str(len(body)), "Expect": "100-continue"}))
        check(wait_readable(c.sock, 2.0),
              "no 100 Continue within 2 s on a collecting route")
        first = c.head()
        eq(first.raw_head, CONTINUE, "interim response")
        # Nothing else may come before the body is sent.
        check(c.still_open(0.2), "more than a 100 before the body: %r"
              % bytes(c.buf[:100]))
        c.send(body)
        r = c.response()
        eq((r.status, r.body), (200, body), "collected body")
        check_hello_on(c)


@case
def expect100_chunked_collect():
    body = os.urandom(3000)
    with Conn(srv.port) as c:
        c.send(build_request("POST", "/collect", {
            "Transfer-Encoding": "chunked", "Expect": "100-continue"}))
        check(wait_readable(c.sock, 2.0), "no 100 Continue within 2 s")
        eq(c.head().raw_head, CONTINUE, "interim response")
        c.send(chunked([body[:1000], body[1000:]]))
        r = c.response()
        eq((r.status, r.body), (200, body), "collected body")


@case
def expect100_ignored_in_http10():
    # RFC 9110 10.1.1 / 15.2: no 1xx to an HTTP/1.0 client.
    with Conn(srv.port) as c:
        c.send(b"POST /collect HTTP/1.0\r\nExpect: 100-continue\r\n"
               b"Content-Length: 5\r\n\r\n")
        check(c.still_open(0.3), "an answer to a 1.0 head before its body: "
              "%r" % bytes(c.buf[:100]))
        c.send(b"hello")
        r = c.response()
        eq((r.status, r.body), (200, b"hello"), "1.0 collect")


@case
def expect100_body_already_sent():
    # The body arrives with the head: the server may skip the 100, and if
    # it sends one it must come before the final response.
    with Conn(srv.port) as c:
        c.send(build_request("POST", "/collect", {
            "Content-Length": "5", "Expect": "100-continue"}, b"hello"))
        interims, r = c.final_response()
        for i in interims:
            eq(i.status, 100, "interim")
        eq((r.status, r.body), (200, b"hello"), "final")
        check_hello_on(c)


def check_hello_on(c):
    r = c.request("GET", "/")
    eq((r.status, r.body), (200, HELLO_BODY), "GET / on the same connection")


# ---- Large uploads ----------------------------------------------------------

TOTAL = 64 << 20
POOL = os.urandom((1 << 20) + 65536)
SIZES = [1, 13, 4096, 65536, 100003, 7, 16384, 1048575, 300, 2, 32768 + 5,
         517, 8191, 262144, 3, 1000]


def pieces(total):
    """Deterministic pieces of varying sizes adding up to `total` bytes."""
    off = 0
    i = 0
    left = total
    while left > 0:
        n = min(SIZES[i % len(SIZES)], left, len(POOL) - 1)
        start = off % (len(POOL) - n)
        yield POOL[start:start + n]
        off += 7919 * (i + 1)
        left -= n
        i += 1


def upload(target, encode_chunked, total=TOTAL, timeout=60):
    sent = hashlib.sha256()
    got = hashlib.sha256()
    count = [0, 0]
    errors = []
    c = Conn(srv.port, timeout=timeout)
    hdr = {"Transfer-Encoding": "chunked"} if encode_chunked else {
        "Content-Length": str(total)}

    def sender():
        try:
            c.send(build_request("POST", target, hdr))
            for p in pieces(total):
                sent.update(p)
                count[0] += len(p)
                if encode_chunked:
                    c.sock.sendall(b"%x\r\n" % len(p) + p + b"\r\n")
                else:
                    c.sock.sendall(p)
            if encode_chunked:
                c.sock.sendall(b"0\r\n\r\n")
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t0 = time.monotonic()
    t.start()

    def sink(b):
        got.update(b)
        count[1] += len(b)
    try:
        r = c.response(sink=sink, keep_raw=False, timeout=timeout)
        t.join(timeout)
        took = time.monotonic() - t0
        check(not errors, "sender failed: %r" % errors)
        eq(r.status, 200, "status")
        eq(count[0], total, "bytes sent")
        eq(count[1], total, "bytes echoed")
        eq(got.hexdigest(), sent.hexdigest(), "sha256 of the echo")
        suite.note("%d MiB %s: %.2f s, %d response chunks" % (
            total >> 20, "chunked" if encode_chunked else "content-length",
            took, len(r.chunk_sizes)))
        check_hello_on(c)
    finally:
        c.close()


@case(timeout=60)
def chunked_upload_64mib():
    upload("/echo", True)


@case(timeout=60)
def content_length_upload_64mib():
    upload("/echo", False)


@case(timeout=30)
def collect_4mib_chunked():
    # A collected body grows its buffer; the result must be byte-exact.
    upload("/collect", True, total=4 << 20)


# ---- Trailers and framing ---------------------------------------------------

@case
def trailers_accepted():
    with Conn(srv.port) as c:
        for target in ("/echo", "/collect"):
            c.send(build_request("POST", target,
                                 {"Transfer-Encoding": "chunked",
                                  "Trailer": "X-Checksum"}) +
                   chunked([b"hello ", b"world"],
                           trailers=b"X-Checksum: abc\r\nX-More: 1 2\r\n"))
            r = c.response()
            eq((r.status, r.body), (200, b"hello world"), target)
        check_hello_on(c)


@case
def trailers_malformed():
    # A trailer line that is not a field line is a framing error.
    with Conn(srv.port) as c:
        c.send(build_request("POST", "/collect",
                             {"Transfer-Encoding": "chunked"}) +
               b"5\r\nhello\r\n0\r\nbad trailer\r\n\r\n")
        r = c.response()
        eq(r.status, 400, "status")
        check(c.at_eof(2), "not closed after a bad trailer")


def odd_request(target):
    body_pieces = [b"a", b"bc", b"defghijklmnop", b"q" * 40, b"\r\n0\r\n"]
    raw = build_request("POST", target, {"Transfer-Encoding": "chunked"})
    # Chunk extensions (with BWS, quoted values) and upper-case hex.
    raw += b"1;ext\r\na\r\n"
    raw += b"2 ;name=val\r\nbc\r\n"
    raw += b"D;q=\"x;y\"\r\ndefghijklmnop\r\n"
    raw += b"28\r\n" + b"q" * 40 + b"\r\n"
    raw += b"00005\r\n\r\n0\r\n\r\n"
    raw += b"0\r\nX-T: 1\r\n\r\n"
    return raw, b"".join(body_pieces)


@case(timeout=40)
def chunked_split_everywhere():
    raw, body = odd_request("/echo")
    with Conn(srv.port) as c:
        c.send(raw)
        r = c.response()
        eq((r.status, r.body), (200, body), "whole")
        for target in ("/echo", "/collect"):
            raw, body = odd_request(target)
            for k in range(1, len(raw)):
                c.sock.sendall(raw[:k])
                time.sleep(0.002)  # let it arrive as its own segment
                c.sock.sendall(raw[k:])
                r = c.response()
                eq((r.status, r.body), (200, body),
                   "%s split at %d (%r|%r)" % (target, k, raw[max(0, k - 8):k],
                                              raw[k:k + 8]))
        check_hello_on(c)


@case
def chunked_one_byte_at_a_time():
    raw, body = odd_request("/echo")
    with Conn(srv.port) as c:
        for i in range(len(raw)):
            c.sock.sendall(raw[i:i + 1])
            time.sleep(0.001)
        r = c.response()
        eq((r.status, r.body), (200, body), "echo")
        raw, body = odd_request("/collect")
        for i in range(len(raw)):
            c.sock.sendall(raw[i:i + 1])
            time.sleep(0.001)
        r = c.response()
        eq((r.status, r.body), (200, body), "collect")
        check_hello_on(c)


@case
def many_tiny_chunks():
    data = bytes(i % 251 for i in range(20000))
    with Conn(srv.port, timeout=10) as c:
        c.send(build_request("POST", "/echo", {"Transfer-Encoding": "chunked"})
               + chunked([data[i:i + 1] for i in range(len(data))]))
        r = c.response()
        eq(r.status, 200, "status")
        check(r.body == data, "echo of 20000 one-byte chunks differs "
              "(%d bytes back)" % len(r.body))
        check_hello_on(c)


@case
def empty_bodies():
    with Conn(srv.port) as c:
        for target in ("/echo", "/collect"):
            c.send(build_request("POST", target,
                                 {"Transfer-Encoding": "chunked"}) +
                   b"0\r\n\r\n")
            r = c.response()
            eq((r.status, r.body), (200, b""), target + " chunked empty")
        r = c.request("POST", "/collect", {"Content-Length": "0"})
        eq((r.status, r.body), (200, b""), "/collect CL 0")
        r = c.request("POST", "/collect")
        eq((r.status, r.body), (200, b""), "/collect without a body")
        check_hello_on(c)


@case
def empty_body_stream_route():
    # A streaming route whose request has no body (Content-Length: 0, or
    # no framing at all): tern_request_read() must still work and report
    # the end of the (empty) body, so /echo answers an empty 200. Own
    # server: a request that never finishes keeps a server from stopping.
    with Server("reference") as s:
        for extra in ({"Content-Length": "0"}, {}):
            with Conn(s.port, timeout=2) as c:
                r = c.request("POST", "/echo", extra)
                eq((r.status, r.body), (200, b""), "/echo %r" % extra)


@case
def body_then_pipelined_request():
    with Conn(srv.port) as c:
        c.send(build_request("POST", "/echo", body=b"first") +
               build_request("GET", "/") +
               build_request("POST", "/collect", {
                   "Transfer-Encoding": "chunked"}) +
               chunked([b"sec", b"ond"]) +
               build_request("POST", "/echo", {
                   "Transfer-Encoding": "chunked"}) +
               chunked([b"third"]) +
               build_request("GET", "/big?bytes=4"))
        want = [b"first", HELLO_BODY, b"second", b"third", b"xxxx"]
        for i, w in enumerate(want):
            r = c.response()
            eq((r.status, r.body), (200, w), "response %d" % i)
        check(c.still_open(0.1), "extra bytes or close")


@case(timeout=60)
def collected_bodies_hold_no_blocks():
    """allocations - frees is the number of blocks tern holds: collecting
    300 chunked bodies (each grown by realloc) leaves it where it was. It
    once counted every resize as an allocation, so it climbed by one to
    four per body with nothing held: a false leak."""
    with Server("reference", ["--workers", "1"]) as s, Conn(s.port) as c:
        body = os.urandom(40000)
        req = build_request("POST", "/collect", [("Transfer-Encoding",
                                                  "chunked")],
                            chunked([body[i:i + 1000]
                                     for i in range(0, len(body), 1000)]))

        def held():
            st = stats_from(c)
            return st["allocations"] - st["frees"], st["reallocations"]
        for _ in range(20):  # pools and buffers at their working size
            c.send(req)
            eq(c.response().body, body, "collected body")
        before, re0 = held()
        for _ in range(300):
            c.send(req)
            eq(c.response().body, body, "collected body")
        after, re1 = held()
        suite.note("blocks held %d before, %d after; %d resizes"
                   % (before, after, re1 - re0))
        check(re1 - re0 >= 300, "resizes counted: %d" % (re1 - re0))
        check(after - before <= 20, "blocks held grew from %d to %d over "
              "300 collected bodies" % (before, after))


def teardown():
    shared_reference_teardown(srv)


if __name__ == "__main__":
    suite.main(setup, teardown)
