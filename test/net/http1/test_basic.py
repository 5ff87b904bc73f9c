#!/usr/bin/env python3
"""Basic HTTP/1.1 behaviour of tern over real sockets: the reference server,
routes, defer."""

import datetime
import email.utils
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (HELLO_BODY, Conn, Server, Suite, build_request, check,
                     eq, get, set_linger_rst, shared_reference_teardown,
                     stats_from)

suite = Suite()
case = suite.case
srv = None


def setup():
    global srv
    srv = Server("reference")


def check_hello(r, what="GET /"):
    eq(r.status, 200, what + " status")
    eq(r.body, HELLO_BODY, what + " body")
    eq(r.headers.get("content-length"), "13", what + " Content-Length")


@case
def get_root():
    with Conn(srv.port) as c:
        r = c.request("GET", "/")
        eq(r.version, (1, 1), "version")
        eq(r.reason, "OK", "reason")
        check_hello(r)
        eq(r.headers.get("content-type"), "text/plain", "content-type")
        eq(r.header_count("content-type"), 1, "content-type fields")
        check("transfer-encoding" not in r.headers, "unexpected TE")
        check("connection" not in r.headers or
              r.headers["connection"].lower() != "close",
              "HTTP/1.1 keep-alive answer says close")
        check(c.still_open(0.1), "connection closed after a 1.1 request")


@case
def date_header():
    r = get(srv.port, "/")
    eq(r.header_count("date"), 1, "Date fields")
    d = r.headers["date"]
    check(re.match(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|"
                   r"May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d "
                   r"GMT\Z", d), "Date not IMF-fixdate: %r" % d)
    when = email.utils.parsedate_to_datetime(d)
    now = datetime.datetime.now(datetime.timezone.utc)
    skew = abs((now - when).total_seconds())
    check(skew < 3, "Date %r is %.1f s off the clock" % (d, skew))
    # The weekday must be the right one for the date.
    eq(d[:3], when.strftime("%a"), "weekday")


@case
def head_root():
    with Conn(srv.port) as c:
        # HEAD then GET in one write: if HEAD leaked body bytes, the second
        # response would not parse.
        c.send(build_request("HEAD", "/") + build_request("GET", "/"))
        h = c.response("HEAD")
        eq(h.status, 200, "HEAD status")
        eq(h.headers.get("content-length"), "13", "HEAD Content-Length")
        eq(h.headers.get("content-type"), "text/plain", "HEAD content-type")
        check(c.buf.startswith(b"HTTP/1.1 ") or not c.buf,
              "bytes after HEAD response head: %r" % bytes(c.buf[:40]))
        check_hello(c.response("GET"), "GET after HEAD")
        check(c.still_open(0.1), "extra bytes or close after HEAD+GET")


@case
def keep_alive():
    with Conn(srv.port) as c:
        local = c.sock.getsockname()
        for i in range(10):
            r = c.request("GET", "/")
            check_hello(r, "request %d" % i)
            check("close" not in r.headers.get("connection", "").lower(),
                  "server asked to close on request %d" % i)
        eq(c.sock.getsockname(), local, "same socket")
        check(c.still_open(0.2), "keep-alive connection closed")
        check_hello(c.request("GET", "/"), "after a pause")


@case
def http10_closes():
    with Conn(srv.port) as c:
        c.send(b"GET / HTTP/1.0\r\n\r\n")
        r = c.response()
        check_hello(r, "HTTP/1.0 GET")
        eq(r.headers.get("connection", "").lower(), "close", "Connection")
        check(c.at_eof(2), "HTTP/1.0 connection not closed")


@case
def http10_keep_alive():
    with Conn(srv.port) as c:
        for i in range(3):
            c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            r = c.response()
            check_hello(r, "HTTP/1.0 keep-alive request %d" % i)
            eq(r.headers.get("connection", "").lower(), "keep-alive",
               "Connection")
        check(c.still_open(0.2), "HTTP/1.0 keep-alive connection closed")
        # A streamed (unknown length) response on 1.0 ends with the
        # connection: no chunked coding for a 1.0 client.
        c.send(b"GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r = c.response()
        eq(r.status, 200, "1.0 /stream status")
        check("transfer-encoding" not in r.headers, "chunked sent to 1.0")
        eq(r.framing, "close", "1.0 /stream framing")
        eq(r.body, b"".join(b"chunk %d\n" % i for i in range(5)),
           "1.0 /stream body")


@case
def connection_close():
    with Conn(srv.port) as c:
        # The second request follows one that says close: it must not be
        # answered.
        c.send(build_request("GET", "/", {"Connection": "close"}) +
               build_request("GET", "/big?bytes=5"))
        r = c.response()
        check_hello(r)
        eq(r.headers.get("connection", "").lower(), "close", "Connection")
        check(c.at_eof(2), "not closed after Connection: close")


def pipelined(n):
    targets = []
    for i in range(n):
        k = i % 4
        if k == 0:
            targets.append(("/", HELLO_BODY))
        elif k == 1:
            targets.append(("/big?bytes=%d" % (i * 37), b"x" * (i * 37)))
        elif k == 2:
            targets.append(("/stream", b"".join(b"chunk %d\n" % j
                                                for j in range(5))))
        else:
            targets.append(("/defer?ms=%d" % (i % 3), b"deferred"))
    with Conn(srv.port) as c:
        c.send(b"".join(build_request("GET", t) for t, _ in targets))
        for i, (t, body) in enumerate(targets):
            r = c.response()
            eq(r.status, 200, "response %d (%s) status" % (i, t))
            eq(r.body, body, "response %d (%s) body" % (i, t))
        check(c.still_open(0.1), "extra bytes or close after the pipeline")
        check_hello(c.request("GET", "/"), "after the pipeline")


@case
def pipeline_3():
    pipelined(3)


@case
def pipeline_16():
    pipelined(16)


@case
def pipeline_at_the_bound():
    # Exactly max_pipeline (32) requests: parsing stops at the bound with
    # the buffer empty, and reading must resume once they are answered.
    with Conn(srv.port) as c:
        for _ in range(3):
            c.send(build_request("GET", "/") * 32)
            for i in range(32):
                check_hello(c.response(timeout=5), "response %d" % i)
        check_hello(c.request("GET", "/"), "after three rounds")


@case
def pipeline_out_of_order():
    with Conn(srv.port) as c:
        t0 = time.monotonic()
        c.send(build_request("GET", "/defer?ms=300") +
               build_request("GET", "/") +
               build_request("GET", "/defer?ms=50"))
        first = c.response(timeout=5)
        t1 = time.monotonic() - t0
        second = c.response(timeout=5)
        third = c.response(timeout=5)
        eq((first.status, first.body), (200, b"deferred"), "first")
        check_hello(second, "second")
        eq((third.status, third.body), (200, b"deferred"), "third")
        # The first response comes from a thread that sleeps 300 ms; the
        # later ones, ready earlier, must have waited for it.
        check(t1 >= 0.28, "first response after %.3f s, before its handler "
              "could answer" % t1)
        check(c.still_open(0.1), "extra bytes or close after the pipeline")


@case
def pipeline_ends_with_close_or_eof():
    # A later request that says Connection: close ends the connection after
    # that request's answer, not after the first one: the answers queued
    # behind a deferred first request used to be dropped.
    with Conn(srv.port) as c:
        c.send(build_request("GET", "/defer?ms=100") +
               build_request("GET", "/") +
               build_request("GET", "/", {"Connection": "close"}))
        first = c.response(timeout=5)
        eq((first.status, first.body), (200, b"deferred"), "first")
        check_hello(c.response(timeout=5), "second")
        check_hello(c.response(timeout=5), "third")
        check(c.at_eof(3), "not closed after the last answer")
    # A client that shuts down its sending side while the head of its
    # pipeline is unanswered has left (as nginx takes it, see api.md's
    # "client gone"): the unanswered request and those queued behind it
    # are dropped, nothing is sent out of order, and the connection closes.
    import socket
    with Conn(srv.port) as c:
        c.send(build_request("GET", "/defer?ms=100") +
               build_request("GET", "/") + build_request("GET", "/"))
        c.sock.shutdown(socket.SHUT_WR)
        check(c.at_eof(3), "not closed after the client's FIN")


def field_names(raw_head):
    """The field names of a raw response head, as sent (case kept)."""
    return [line.split(b":", 1)[0] for line in raw_head.split(b"\r\n")[1:]
            if b":" in line]


@case
def reason_phrases_registered():
    # Every registered code has its reason phrase; these were "Unknown".
    want = {410: "Gone", 412: "Precondition Failed",
            416: "Range Not Satisfiable", 421: "Misdirected Request",
            422: "Unprocessable Content", 423: "Locked", 425: "Too Early",
            428: "Precondition Required", 451: "Unavailable For Legal Reasons",
            207: "Multi-Status", 226: "IM Used", 506: "Variant Also Negotiates",
            507: "Insufficient Storage", 508: "Loop Detected",
            511: "Network Authentication Required", 599: "Unknown"}
    with Conn(srv.port) as c:
        for code, reason in sorted(want.items()):
            r = c.request("GET", "/status?code=%d" % code)
            eq((r.status, r.reason), (code, reason), "status line")


@case
def final_1xx_refused():
    # A 1xx is never a final answer: tern_respond refuses it with
    # TERN_EINVAL, on the worker and from another thread alike, and the
    # handler can still answer properly.
    with Conn(srv.port) as c:
        for code in (100, 101, 103, 199):
            for thread in ("", "&thread=1"):
                r = c.request("GET", "/status?code=%d%s" % (code, thread))
                eq((r.status, r.body), (200, b"status %d refused: invalid "
                                              b"argument\n" % code),
                   "code %d%s" % (code, thread))


@case
def early_hints():
    # 103 Early Hints ahead of the final answer, from the worker and from
    # another thread; HTTP/1.0 clients get the final answer only.
    with Conn(srv.port) as c:
        for thread in ("", "?thread=1"):
            c.send(build_request("GET", "/early-hints" + thread))
            interims, r = c.final_response()
            eq([(i.status, i.reason) for i in interims],
               [(103, "Early Hints")], "interim answers" + thread)
            eq(interims[0].headers.get("link"),
               "</style.css>; rel=preload; as=style", "Link")
            # An interim answer carries no framing or Date of tern's.
            eq(field_names(interims[0].raw_head), [b"Link"], "103 fields")
            eq((r.status, r.body), (200, b"interim: 0 ok\n"), "final")
        for code in (100, 101, 200):
            r = c.request("GET", "/early-hints?code=%d" % code)
            eq(r.body, b"interim: -1 invalid argument\n", "code %d" % code)
        check(c.still_open(0.05), "extra bytes after the answers")
    with Conn(srv.port) as c:
        c.send(b"GET /early-hints HTTP/1.0\r\n\r\n")
        r = c.response()
        eq((r.status, r.body), (200, b"interim: 0 ok\n"), "HTTP/1.0")


@case
def no_length_on_204_and_304():
    with Conn(srv.port) as c:
        r = c.request("GET", "/status?code=304")
        eq(r.status, 304, "status")
        check("content-length" not in r.headers and
              "transfer-encoding" not in r.headers,
              "framing on a 304: %r" % r.raw_head)
        # The caller's Content-Length describes the representation.
        r = c.request("GET", "/status?code=304&cl=1234")
        eq(r.headers.get("content-length"), "1234", "304 with its length")
        eq(r.body, b"", "no body")
        r = c.request("GET", "/status?code=204")
        check("content-length" not in r.headers and
              "transfer-encoding" not in r.headers,
              "framing on a 204: %r" % r.raw_head)
        # tern's own 204 (OPTIONS *) has no content, so no Content-Type.
        r = c.request("OPTIONS", "*")
        eq(r.status, 204, "OPTIONS *")
        eq(sorted(r.headers), ["allow", "date"], "fields of tern's 204")
        check_hello(c.request("GET", "/"), "after them")


@case
def own_fields_title_case():
    # The fields tern writes itself on HTTP/1.1 share one casing.
    with Conn(srv.port) as c:
        r = c.request("GET", "/nowhere", {"Connection": "close"})
        eq(r.status, 404, "status")
        eq(field_names(r.raw_head),
           [b"Content-Type", b"Date", b"Content-Length", b"Connection"],
           "field names as sent")
    with Conn(srv.port) as c:
        r = c.request("POST", "/", {"Content-Length": "0"})
        eq(r.status, 405, "status")
        check(b"\r\nAllow: " in r.raw_head, "Allow: %r" % r.raw_head)


@case
def not_found():
    with Conn(srv.port) as c:
        r = c.request("GET", "/no/such/path")
        eq(r.status, 404, "status")
        eq(r.body, b"404 Not Found\n", "body")
        check_hello(c.request("GET", "/"), "same connection after 404")


@case
def method_not_allowed():
    with Conn(srv.port) as c:
        r = c.request("POST", "/", {"Content-Length": "0"})
        eq(r.status, 405, "status")
        allow = [m.strip() for m in r.headers.get("allow", "").split(",")]
        check("GET" in allow and "HEAD" in allow,
              "Allow %r lacks GET or HEAD" % r.headers.get("allow"))
        check("POST" not in allow, "Allow %r lists POST" % allow)
        # The (empty) body was complete: the connection goes on.
        check_hello(c.request("GET", "/"), "same connection after 405")
        # With a body that has arrived, too.
        r = c.request("PUT", "/", body=b"abc")
        eq(r.status, 405, "PUT with body")
        check_hello(c.request("GET", "/"), "same connection after 405+body")


@case
def options_star():
    with Conn(srv.port) as c:
        c.send(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
        r = c.response()
        eq(r.status, 204, "status")
        check("content-length" not in r.headers,
              "Content-Length in a 204: %r" % r.headers)
        allow = [m.strip() for m in r.headers.get("allow", "").split(",")]
        for m in ("GET", "POST"):
            check(m in allow, "Allow %r lacks %s" % (r.headers.get("allow"),
                                                     m))
        check_hello(c.request("GET", "/"), "same connection after OPTIONS")


@case
def options_star_lists_head():
    # Every GET route answers HEAD (tern.h), and the 405 Allow lists HEAD:
    # the server-wide Allow should say so as well.
    with Conn(srv.port) as c:
        c.send(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
        r = c.response()
        allow = [m.strip() for m in r.headers.get("allow", "").split(",")]
        check("HEAD" in allow, "OPTIONS * Allow %r lacks HEAD"
              % r.headers.get("allow"))


@case
def absolute_form():
    with Conn(srv.port) as c:
        check_hello(c.request("GET", "http://x/"), "http://x/")
        check_hello(c.request("GET", "HTTP://example.com:8080"),
                    "HTTP://example.com:8080 (empty path)")
        r = c.request("GET", "http://x/big?bytes=3")
        eq(r.body, b"xxx", "absolute-form query")


@case
def slow_sender():
    with Conn(srv.port) as c:
        req = build_request("GET", "/big?bytes=11",
                            {"User-Agent": "slow", "Accept": "*/*"})
        for i in range(len(req)):
            c.sock.send(req[i:i + 1])
            time.sleep(0.001)
        r = c.response()
        eq((r.status, r.body), (200, b"x" * 11), "response")
        check_hello(c.request("GET", "/"), "same connection after")


@case
def stream_chunked():
    with Conn(srv.port) as c:
        c.send(build_request("GET", "/stream"))
        r = c.response()
        eq(r.status, 200, "status")
        eq(r.headers.get("transfer-encoding"), "chunked", "TE")
        eq(r.headers.get("content-type"), "text/plain", "content-type")
        want = b"".join(b"chunk %d\n" % i for i in range(5))
        eq(r.body, want, "body")
        # The raw framing, byte for byte: each write is one chunk, then the
        # last-chunk and the empty trailer section.
        raw = b"".join(b"8\r\nchunk %d\n\r\n" % i for i in range(5))
        eq(r.raw_body, raw + b"0\r\n\r\n", "raw chunked bytes")
        check(c.still_open(0.1), "bytes after the last chunk")
        # HEAD of a chunked route: head only.
        c.send(build_request("HEAD", "/stream") + build_request("GET", "/"))
        h = c.response("HEAD")
        eq(h.status, 200, "HEAD /stream status")
        check_hello(c.response(), "GET after HEAD /stream")


@case
def big_body():
    with Conn(srv.port, timeout=10) as c:
        r = c.request("GET", "/big?bytes=1048576")
        eq(r.status, 200, "status")
        eq(r.headers.get("content-length"), "1048576", "Content-Length")
        eq(len(r.body), 1048576, "body length")
        check(r.body == b"x" * 1048576, "body bytes are not all 'x'")
        r = c.request("GET", "/big?bytes=0")
        eq((r.status, r.body, r.headers.get("content-length")),
           (200, b"", "0"), "empty /big")
        check_hello(c.request("GET", "/"), "same connection after")


def curl(*args):
    p = subprocess.run(["curl", "-sS", "--max-time", "10"] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=20)
    check(p.returncode == 0, "curl %s: rc %d, %s" % (
        " ".join(args), p.returncode, p.stderr.decode(errors="replace")))
    return p.stdout


@case
def curl_works():
    base = "http://127.0.0.1:%d" % srv.port
    eq(curl(base + "/"), HELLO_BODY, "curl GET /")
    eq(curl("--http1.0", base + "/"), HELLO_BODY, "curl --http1.0 GET /")
    out = curl("-o", "/dev/null", "-w", "%{http_code} %{size_download}",
               base + "/big?bytes=100000")
    eq(out, b"200 100000", "curl /big")
    data = bytes(range(256)) * 4000
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "--data-binary",
                        "@-", base + "/echo"], input=data,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=20)
    eq(p.returncode, 0, "curl POST /echo rc (%s)" % p.stderr[-200:])
    check(p.stdout == data, "curl POST /echo: %d bytes back, want %d"
          % (len(p.stdout), len(data)))
    out = curl("-o", "/dev/null", "-w", "%{http_code}", base + "/nope")
    eq(out, b"404", "curl 404")


@case
def app_routes():
    # The reference server's benchmark tier: 50 routes with a parameter and a
    # header.
    with Conn(srv.port) as c:
        r = c.request("GET", "/api/v1/orders/42/detail",
                      {"X-Request-Id": "abc123"})
        eq((r.status, r.body), (200, b"orders 42 detail abc123"), "detail")
        r = c.request("GET", "/api/v1/webhooks/7", {"X-Request-Id": "z"})
        eq((r.status, r.body), (200, b"webhooks 7 z"), "plain")
        r = c.request("GET", "/api/v1/nothing/7")
        eq(r.status, 404, "unknown resource")
        r = c.request("GET", "/api/v1/users/7/detail/more")
        eq(r.status, 404, "too deep")


@case
def routes_example():
    with Server("routes") as rs:
        with Conn(rs.port) as c:
            r = c.request("GET", "/users/42")
            eq(r.status, 200, "GET /users/42")
            eq(r.headers.get("content-type"), "application/json", "type")
            eq(r.body, b'{"id":"42"}', "GET /users/42 body")
            r = c.request("GET", "/users/al%20ice")
            eq(r.body, b'{"id":"al%20ice"}', "params are not decoded")
            r = c.request("DELETE", "/users/42")
            eq(r.status, 204, "DELETE")
            eq(r.body, b"", "DELETE body")
            check("content-length" not in r.headers, "CL in 204")
            r = c.request("GET", "/files/a/b/c.txt")
            eq((r.status, r.body), (200, b"a/b/c.txt"), "wildcard")
            r = c.request("GET", "/users/a\"b")
            eq(r.status, 400, "quote in id (the handler refuses)")
            r = c.request("GET", "/nothing/here")
            eq(r.status, 404, "unknown path")
            r = c.request("GET", "/users")
            eq(r.status, 404, "/users without id")
            r = c.request("POST", "/users/42", {"Content-Length": "0"})
            eq(r.status, 405, "POST /users/42")
            allow = [m.strip() for m in
                     r.headers.get("allow", "").split(",")]
            for m in ("GET", "HEAD", "DELETE"):
                check(m in allow, "Allow %r lacks %s"
                      % (r.headers.get("allow"), m))
            r = c.request("HEAD", "/users/7")
            eq((r.status, r.headers.get("content-length")), (200, "10"),
               "HEAD /users/7")
            check(c.still_open(0.1), "routes connection closed")


@case
def defer_example():
    with Server("defer") as ds:
        with Conn(ds.port) as c:
            t0 = time.monotonic()
            r = c.request("GET", "/slow?ms=100")
            took = time.monotonic() - t0
            eq((r.status, r.body), (200, b"done after 100 ms\n"), "response")
            check(took >= 0.095, "answered after %.3f s" % took)
            # Three in flight on one connection answer in order.
            c.send(build_request("GET", "/slow?ms=200") +
                   build_request("GET", "/slow?ms=10") +
                   build_request("GET", "/slow?ms=0"))
            for ms in (200, 10, 0):
                r = c.response()
                eq(r.body, b"done after %d ms\n" % ms, "pipelined %d" % ms)


# ---- The client going away (tern_request_on_gone) --------------------------

def gone_counts():
    with Conn(srv.port) as c:
        st = stats_from(c)
    return st["gone"], st["gone_eclosed"]


def wait_gone(before, n, what, timeout=3.0):
    """/longpoll's gone callback must run `n` more times (each seeing
    TERN_ECLOSED from tern_respond) within `timeout`, and no more."""
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


def long_polls(n, path="/longpoll"):
    """A connection with `n` pipelined long polls, once the server has
    them (they never answer)."""
    c = Conn(srv.port)
    c.send(b"".join(build_request("GET", path) for _ in range(n)))
    check(c.still_open(0.2), "a long poll answered or closed")
    return c


@case
def gone_on_client_close():
    before = gone_counts()
    long_polls(1).close()
    wait_gone(before, 1, "FIN")


@case
def gone_on_client_reset():
    before = gone_counts()
    c = long_polls(1)
    set_linger_rst(c.sock)
    c.close()
    wait_gone(before, 1, "RST")


@case
def gone_behind_the_pipeline_head():
    # The second request is not at the head of the pipeline: it learns of
    # the close as well.
    before = gone_counts()
    long_polls(2).close()
    wait_gone(before, 2, "two pipelined")


@case
def gone_never_after_the_answer():
    before = gone_counts()
    with Conn(srv.port) as c:
        r = c.request("GET", "/longpoll?now=1")
        eq((r.status, r.body), (200, b"answered\n"), "answered long poll")
    wait_gone(before, 0, "closed after the answer")
    r = get(srv.port, "/longpoll?thread=1")
    eq(r.body, b"on_gone from a thread: -3\n", "subscribing off the worker")


def teardown():
    shared_reference_teardown(srv)


def curl_head(proto, path, *args):
    """curl() (`proto`: --http1.1 or --http2-prior-knowledge) to the shared
    server's `path` with `args`, the head shown: (status, head, body) as
    text."""
    out = curl("-i", proto, *args,
               "http://127.0.0.1:%d%s" % (srv.port, path)).decode()
    head, _, body = out.partition("\r\n\r\n")
    return int(head.split(" ")[1]), head, body


@case
def query_and_form_pairs():
    """tern_form_next and tern_form_decode as a handler uses them (the
    reference server's /form): the query's pairs, and an urlencoded POST
    body's, each decoded ('+' and %XX), a bad escape refused; the same
    over HTTP/1.1 and h2c."""
    pairs = "q=tern%20http&&x+y=%E2%82%AC&bad=%zz&flag&page=2"
    want = "q=tern http\nx y=\u20ac\nbad=?\nflag=\npage=2\n"
    for proto in ("--http1.1", "--http2-prior-knowledge"):
        eq(curl_head(proto, "/form?" + pairs)[2], want, "GET " + proto)
        eq(curl_head(proto, "/form", "--data-raw", pairs)[2], want,
           "POST " + proto)


@case
def cookies_read_and_set():
    """tern_request_cookie finds a cookie among several (quoted or not,
    over HTTP/1.1 and h2c, where curl may send crumbs) and
    tern_cookie_format builds the Set-Cookie (the reference server's
    /cookie); a cookie the request lacks is a 404."""
    for proto in ("--http1.1", "--http2-prior-knowledge"):
        _, head, body = curl_head(proto, "/cookie?name=sid", "-b",
                             'a=1; sid="abc"; b=2')
        eq(body, "abc", "the cookie's value " + proto)
        check(re.search(r"(?im)^set-cookie: seen=1; Path=/; HttpOnly; "
                        r"SameSite=Lax\r$", head) is not None,
              "Set-Cookie %s: %r" % (proto, head))
        eq(curl_head(proto, "/cookie?name=sid", "-b", "a=1")[0], 404,
           "no such cookie " + proto)


@case
def basic_auth():
    """tern_request_basic_auth and tern_equal_secret as a handler uses
    them (the reference server's /private): the right user and password
    get in, a wrong password, an unknown user or no credentials get 401
    with a WWW-Authenticate challenge, over HTTP/1.1 and h2c."""
    for proto in ("--http1.1", "--http2-prior-knowledge"):
        for cred, code, body in (("admin:s3cret", 200, "hello admin\n"),
                                 ("admin:s3creT", 401, "who are you?\n"),
                                 ("root:s3cret", 401, "who are you?\n"),
                                 (None, 401, "who are you?\n")):
            status, head, got = curl_head(proto, "/private",
                                     *(["-u", cred] if cred else []))
            eq(status, code, "%s %s: %r" % (proto, cred, head[:40]))
            eq(got, body, "%s %s" % (proto, cred))
            if code == 401:
                check(re.search(r'(?im)^www-authenticate: Basic realm="tern"',
                                head) is not None, "challenge %r" % head)


@case
def virtual_hosts():
    """Routes with tern_route_options.host (reference --vhosts): chosen by
    Host (HTTP/1.1) or :authority (h2c), without case, port or final dot;
    an exact host over a wildcard one; a path a host lacks falls through
    to the routes without a host, a method it lacks is its 405."""
    with Server("reference", ["--vhosts"]) as s:
        def ask(host, path="/site", method="GET"):
            with Conn(s.port) as c:
                r = c.request(method, path, [("Host", host)])
                return r.status, r.body
        eq(ask("a.example"), (200, b"site a"), "exact host")
        eq(ask("A.Example:8080"), (200, b"site a"), "case and port")
        eq(ask("a.example."), (200, b"site a"), "a final dot")
        eq(ask("y.b.example"), (200, b"site b"), "a wildcard")
        eq(ask("x.b.example"), (200, b"site x"), "exact over wildcard")
        eq(ask("b.example")[0], 404, "a wildcard is below its name only")
        eq(ask("other.example")[0], 404, "no such host: the plain routes")
        eq(ask("a.example", "/"), (200, HELLO_BODY), "falls through")
        eq(ask("a.example", "/only-post")[0], 405, "the host's 405")
        eq(ask("a.example", "/only-post", "POST"), (200, b"posted"), "POST")
        p = subprocess.run(["curl", "-s", "--http2-prior-knowledge",
                            "--resolve", "x.b.example:%d:127.0.0.1" % s.port,
                            "http://x.b.example:%d/site" % s.port],
                           capture_output=True, timeout=30)
        eq(p.stdout, b"site x", "h2c's :authority")


@case(timeout=60)
def write_ref_hands_back_each_pointer():
    """tern_response_write_ref (the reference's /write-ref): every piece,
    written on the worker or from another thread, over HTTP/1.1 and h2c,
    comes back to its release with the pointer written, once; a client
    that leaves mid-body gets its pieces released too (the ASan build's
    leak check sees any that are not)."""
    with Server("reference", ["--workers", "2"]) as s:
        def stats():
            with Conn(s.port) as c:
                return tuple(map(int, c.request(
                    "GET", "/write-ref-stats").body.split()))
        total = 0
        for thread in (0, 1):
            with Conn(s.port) as c:
                r = c.request("GET", "/write-ref?n=300&thread=%d" % thread)
                eq((r.status, len(r.body)), (200, 300000), "h1 body")
                eq(r.body[:1000] + r.body[-1000:],
                   b"a" * 1000 + bytes([ord("a") + 299 % 26]) * 1000,
                   "the pieces in order")
            p = subprocess.run(["curl", "-s", "--http2-prior-knowledge",
                                "http://127.0.0.1:%d/write-ref?n=300&thread=%d"
                                % (s.port, thread)], capture_output=True,
                               timeout=30)
            eq(len(p.stdout), 300000, "h2 body")
            total += 600
        deadline = time.monotonic() + 5
        while stats()[0] < total and time.monotonic() < deadline:
            time.sleep(0.05)
        eq(stats(), (total, 0), "released, with the pointer written")
        with Conn(s.port) as c:  # leaves after the head
            c.send(build_request("GET", "/write-ref?n=20000&thread=1"))
            c.read_line(time.monotonic() + 5)
        time.sleep(0.5)
        eq(stats()[1], 0, "no pointer mismatched")


@case(timeout=60)
def request_ref_keeps_the_handle():
    """tern_request_ref (the reference's /pinned): a thread writing a
    streamed response goes on calling after another thread ended it, and
    after the worker let go of the request; its calls are refused with
    TERN_ESTATE (-3), or TERN_ECLOSED (-5) for a client gone, never
    anything else, the per-request pointer still answers, and the client
    got a response that ends cleanly with whole lines. Over HTTP/1.1 and
    h2c, and with a client that leaves; an unref without a reference is
    refused and logged. (The ASan build sees any use of a freed block, and
    any block leaked by the last unref.)"""
    with Server("reference", ["--workers", "2"]) as s:
        def stats():
            with Conn(s.port) as c:
                return tuple(map(int, c.request(
                    "GET", "/pinned-stats").body.split()))

        def settle(done):
            deadline = time.monotonic() + 10
            while stats()[0] < done and time.monotonic() < deadline:
                time.sleep(0.05)
            return stats()

        def lines(body):
            got = body.decode().split("\n")
            eq(got[-1], "", "the body ends with a whole line")
            eq(got[:-1], ["piece %d" % i for i in range(len(got) - 1)],
               "the pieces in order")
            return len(got) - 1

        url = "/pinned?n=300&ms=2&end=150"
        with Conn(s.port) as c:
            r = c.request("GET", url)
            eq(r.status, 200, "h1 status")
            n1 = lines(r.body)
        p = subprocess.run(["curl", "-sS", "--http2-prior-knowledge",
                            "http://127.0.0.1:%d%s" % (s.port, url)],
                           capture_output=True, timeout=30)
        eq(p.returncode, 0, "curl over h2c: %r" % p.stderr)
        n2 = lines(p.stdout)
        done, ok, state, closed, other, lost = settle(4)
        eq((done, other, lost), (4, 0, 0), "threads done, no other code, "
           "the pointer kept")
        eq(ok + state + closed, 2 * (300 + 2), "every call counted")
        check(0 < n1 < 300 and 0 < n2 < 300,
              "the end came while the writer wrote (%d, %d lines)" % (n1, n2))
        # The writes accepted are those the clients got, plus at most the
        # one racing the end on each request; the two end calls were 0.
        check(n1 + n2 + 2 <= ok <= n1 + n2 + 4,
              "%d calls accepted for %d + %d lines" % (ok, n1, n2))
        eq(closed, 0, "no TERN_ECLOSED while the clients stayed")
        check(state >= 2, "the calls after the end refused (%d)" % state)

        with Conn(s.port) as c:  # leaves after the head
            c.send(build_request("GET", "/pinned?n=200&ms=2&end=200&extra=1"))
            c.read_line(time.monotonic() + 5)
        done, ok, state, closed2, other, lost = settle(6)
        eq((done, other, lost), (6, 0, 0), "after a client that left")
        check(closed2 > closed, "the writes after it left: TERN_ECLOSED")
        s.check_alive()
        err = s.stderr_text(200000)
        for what in ("tern_request_unref refused: the request holds no "
                     "reference",
                     "tern_response_write refused: the response is already "
                     "finished"):
            check(what in err, "no log line %r" % what)


if __name__ == "__main__":
    suite.main(setup, teardown)
