#!/usr/bin/env python3
"""Every rejection tern's HTTP/1.1 side makes, each as raw bytes on its own
connection: the exact status, Connection: close, the close itself, and
(by the runner, after every case) a new connection that is served."""

import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (Closed, Conn, Server, Suite, check, eq,
                     recv_until_close, shared_reference_teardown)

MAX_URI = 256
MAX_HEAD = 1024
MAX_HEADERS = 10
MAX_BODY = 1000

suite = Suite()
case = suite.case
srv = None


def setup():
    global srv
    srv = Server("reference", ["--max-uri", str(MAX_URI),
                               "--max-head", str(MAX_HEAD),
                               "--max-headers", str(MAX_HEADERS),
                               "--max-body", str(MAX_BODY)])


REASONS = {400: "Bad Request", 408: "Request Timeout",
           413: "Content Too Large", 414: "URI Too Long",
           431: "Request Header Fields Too Large", 501: "Not Implemented",
           505: "HTTP Version Not Supported"}


def rejected(data, status, what=None, body_follows=b""):
    """Send `data` on a new connection; the answer must be exactly one
    `status` response that says Connection: close, then the close."""
    with Conn(srv.port) as c:
        c.send(data)
        try:
            r = c.response()
        except Closed as e:
            raise AssertionError("%s: closed without a response (got %r)"
                                 % (what or data[:60], e.partial))
        eq(r.status, status, "%s: status" % (what or repr(data[:60])))
        eq(r.reason, REASONS[status], "reason phrase")
        eq(r.headers.get("connection", "").lower(), "close",
           "Connection on a %d" % status)
        eq(r.body, b"%d %s\n" % (status, REASONS[status].encode()), "body")
        if body_follows:
            # Bytes the client sends after the head must not be taken as a
            # request (nothing is read after a rejection).
            try:
                c.send(body_follows)
            except OSError:
                pass
        check(c.at_eof(3), "%s: connection not closed after %d"
              % (what or data[:60], status))
        return r


def head(*fields, line=b"GET / HTTP/1.1", host=True):
    out = line + b"\r\n"
    if host:
        out += b"Host: x\r\n"
    for f in fields:
        out += f + b"\r\n"
    return out + b"\r\n"


# ---- Control: what is just inside the limits is served. -------------------

@case
def control_within_limits():
    with Conn(srv.port) as c:
        # Exactly MAX_HEADERS fields (Host included).
        fields = [b"X-F%d: v" % i for i in range(MAX_HEADERS - 1)]
        c.send(head(*fields))
        r = c.response()
        eq(r.status, 200, "%d fields" % MAX_HEADERS)
        # A target of exactly MAX_URI bytes: routed (404), not 414.
        target = b"/" + b"a" * (MAX_URI - 1)
        c.send(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        eq(c.response().status, 404, "target of max-uri bytes")
        # A head of exactly MAX_HEAD bytes.
        base = head(b"X-Pad: ")
        pad = MAX_HEAD - len(base)
        h = head(b"X-Pad: " + b"p" * pad)
        eq(len(h), MAX_HEAD, "head size")
        c.send(h)
        eq(c.response().status, 200, "head of max-head bytes")
        # A body of MAX_BODY bytes to the collecting route.
        body = b"b" * MAX_BODY
        c.send(b"POST /collect HTTP/1.1\r\nHost: x\r\nContent-Length: %d"
               b"\r\n\r\n" % MAX_BODY + body)
        r = c.response()
        eq((r.status, r.body), (200, body), "collect of max-body bytes")
        check(c.still_open(0.1), "control connection closed")


# ---- Field syntax -----------------------------------------------------------

@case
def obs_fold():
    rejected(head(b"X-A: a", b" b"), 400, "obs-fold (SP)")
    rejected(head(b"X-A: a", b"\tb"), 400, "obs-fold (HTAB)")
    # A fold right after the request line, too.
    rejected(b"GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400, "leading fold")


@case
def bare_cr_in_header():
    rejected(head(b"X-A: a\rb"), 400, "bare CR in a value")
    rejected(head(b"X-A\r: a"), 400, "bare CR in a name")
    rejected(b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\r\n\r\n", 400,
             "CR CR LF ending a field line")
    rejected(b"GET / HTTP/1.1\r\r\nHost: x\r\n\r\n", 400,
             "CR CR LF ending the request line")
    rejected(b"GET /\ra HTTP/1.1\r\nHost: x\r\n\r\n", 400,
             "bare CR in the target")


@case
def bare_lf_line_end():
    rejected(b"GET / HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n", 400,
             "bare LF ending a field line")
    rejected(b"GET / HTTP/1.1\nHost: x\r\n\r\n", 400,
             "bare LF ending the request line")
    # Entirely LF-terminated: never a complete head, refused from the
    # request line alone.
    rejected(b"GET / HTTP/1.1\nHost: x\n\n", 400, "all bare LF")


@case
def whitespace_before_colon():
    rejected(head(b"X-A : a"), 400, "SP before colon")
    rejected(head(b"X-A\t: a"), 400, "HTAB before colon")
    rejected(b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "Host SP colon")


@case
def invalid_header_name():
    rejected(head(b"Fo(o: x"), 400, "'(' in a name")
    rejected(head(b"Fo\"o: x"), 400, "'\"' in a name")
    rejected(head(b": x"), 400, "empty name")
    rejected(head(b"Foo x"), 400, "no colon")
    rejected(head(b"X-A: a\x00b"), 400, "NUL in a value")
    rejected(head(b"X-A: a\x7fb"), 400, "DEL in a value")


@case
def invalid_method():
    rejected(b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "'(' in a method")
    rejected(b"GE T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "SP in a method")
    rejected(b" GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "leading SP")
    rejected(b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400, "two SPs")
    rejected(b"M" * 33 + b" / HTTP/1.1\r\nHost: x\r\n\r\n", 501,
             "method over 32 bytes")


@case
def invalid_target():
    rejected(b"GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400, "fragment")
    rejected(b"GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "CTL")
    rejected(b"GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "obs-text")
    rejected(b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "* without OPTIONS")
    rejected(b"GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "ftp scheme")
    rejected(b"GET http:/// HTTP/1.1\r\nHost: x\r\n\r\n", 400, "no host")


# ---- Framing ----------------------------------------------------------------

def post(*fields, target=b"/echo"):
    return head(*fields, line=b"POST " + target + b" HTTP/1.1")


@case
def content_length_not_digits():
    for v in (b"12a", b"+12", b" 1 2", b"-1", b"0x10", b"", b"1.0"):
        rejected(post(b"Content-Length: " + v), 400, "Content-Length %r" % v)
    rejected(post(b"Content-Length: 99999999999999999999"), 400,
             "Content-Length overflow")


@case
def content_length_conflict():
    rejected(post(b"Content-Length: 5", b"Content-Length: 6"), 400,
             "two different Content-Lengths")
    rejected(post(b"Content-Length: 5, 6"), 400, "list of two values")


@case
def content_length_repeated():
    rejected(post(b"Content-Length: 5", b"Content-Length: 5"), 400,
             "Content-Length repeated")
    rejected(post(b"Content-Length: 5, 5"), 400, "Content-Length: 5, 5")


@case
def te_with_content_length():
    rejected(post(b"Transfer-Encoding: chunked", b"Content-Length: 5"), 400,
             "TE then CL")
    rejected(post(b"Content-Length: 5", b"Transfer-Encoding: chunked"), 400,
             "CL then TE")


@case
def te_not_chunked_last():
    rejected(post(b"Transfer-Encoding: gzip"), 501, "TE gzip")
    rejected(post(b"Transfer-Encoding: chunked, gzip"), 501,
             "TE chunked, gzip")
    rejected(post(b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip"),
             501, "TE chunked + TE gzip fields")


@case
def te_coding_before_chunked():
    # chunked is the only coding tern decodes: a body with gzip (or any
    # other coding) under it was handed on as if it were plain.
    for route in (b"/echo", b"/collect"):
        rejected(post(b"Transfer-Encoding: gzip, chunked", target=route) +
                 b"5\r\nhello\r\n0\r\n\r\n", 501, "TE gzip, chunked")
    rejected(post(b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked"),
             501, "TE gzip + TE chunked fields")
    rejected(post(b"Transfer-Encoding: identity"), 501, "TE identity")
    rejected(post(b"Transfer-Encoding: identity, chunked"), 501,
             "TE identity, chunked")
    rejected(post(b"Transfer-Encoding: x-custom;q=1, chunked"), 501,
             "TE with an unknown coding with parameters")
    # What was already right stays so.
    rejected(b"POST /echo HTTP/1.0\r\nTransfer-Encoding: gzip, chunked"
             b"\r\n\r\n", 400, "TE in HTTP/1.0")


@case
def te_malformed():
    rejected(post(b"Transfer-Encoding: chunked, chunked"), 400,
             "chunked twice")
    rejected(post(b"Transfer-Encoding: chunked;x=1"), 400,
             "chunked with a parameter")
    rejected(post(b"Transfer-Encoding:"), 400, "empty TE")
    rejected(b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
             400, "TE in HTTP/1.0")


@case
def chunk_size_overflow_collect():
    # A collecting route: the body is read before the handler runs, so the
    # framing error is answered with 400.
    rejected(post(b"Transfer-Encoding: chunked", target=b"/collect") +
             b"ffffffffffffffffff\r\n", 400, "chunk-size overflow")
    rejected(post(b"Transfer-Encoding: chunked", target=b"/collect") +
             b"5\r\nhello\r\n10000000000000000\r\n", 400,
             "chunk-size 2^64 after a good chunk")
    rejected(post(b"Transfer-Encoding: chunked", target=b"/collect") +
             b"5\r\nhelloXX", 400, "chunk data not followed by CRLF")
    rejected(post(b"Transfer-Encoding: chunked", target=b"/collect") +
             b"zz\r\n", 400, "chunk-size not hex")


@case
def chunk_size_leading_zeros():
    # The chunk size's value is bounded, not its digits: 19 digits with
    # leading zeros is 5.
    for route in (b"/echo", b"/collect"):
        with Conn(srv.port) as c:
            c.send(post(b"Transfer-Encoding: chunked", target=route) +
                   b"0000000000000000005\r\nhello\r\n"
                   b"00000000000000000000000\r\n\r\n")
            r = c.response()
            eq((r.status, r.body), (200, b"hello"), route.decode())
    rejected(post(b"Transfer-Encoding: chunked", target=b"/collect") +
             b"00000000000000000004000000000000001\r\n", 400,
             "2^62 + 1 with leading zeros")


@case
def chunk_error_replaces_queued_200():
    # /echo streams: its handler has queued a 200 before the broken body
    # is read, but not a byte of it has left. That 200 is taken back and
    # a 400 sent instead, so the client can tell the exchange failed.
    for what, tail in (
            ("chunk-size overflow", b"ffffffffffffffffff\r\n"),
            ("chunk-size not hex", b"5\r\nhello\r\nzz\r\n"),
            ("data longer than the size", b"5\r\nhelloXX\r\n"),
            ("no CRLF after the data", b"5\r\nhello0\r\n\r\n")):
        r = rejected(post(b"Transfer-Encoding: chunked") + tail, 400, what)
        check(b"200" not in r.raw_head, "%s: a 200 head was sent: %r"
              % (what, r.raw_head))
    # The same, pipelined behind a request still in progress: the 200 is
    # queued in the request's own output, which is replaced likewise.
    with Conn(srv.port) as c:
        c.send(b"GET /defer?ms=100 HTTP/1.1\r\nHost: x\r\n\r\n" +
               post(b"Transfer-Encoding: chunked") + b"zz\r\n")
        r = c.response()
        eq((r.status, r.body), (200, b"deferred"), "the first answer")
        r = c.response()
        eq(r.status, 400, "the broken request's answer")
        check(c.at_eof(3), "connection not closed after the 400")


@case
def chunk_error_after_200_left_cuts():
    # Once bytes of the 200 have left, it cannot be taken back: the
    # connection closes before the 200's body is complete. A complete 200
    # (last-chunk) would present the failure as a successful echo.
    with Conn(srv.port) as c:
        c.send(post(b"Transfer-Encoding: chunked") + b"5\r\nhello\r\n")
        got = b""
        deadline = time.monotonic() + 3
        while b"hello" not in got:
            check(time.monotonic() < deadline, "no echo: %r" % got)
            got += c.read_some(deadline)
        c.send(b"zz\r\n")
        data, how = recv_until_close(c.sock, 3)
    data = got + data
    check(how in ("eof", "reset"), "connection not closed (%s), got %r"
          % (how, data[:300]))
    head_end = data.find(b"\r\n\r\n")
    check(head_end > 0, "no response head before the close: %r" % data)
    eq(data.split(b" ", 2)[1], b"200", "status")
    rest = data[head_end + 4:]
    check(b"transfer-encoding: chunked" in data[:head_end].lower(),
          "200 without chunked framing: %r" % data)
    # The 200's body must not be complete: no last-chunk.
    check(not (rest == b"0\r\n\r\n" or rest.endswith(b"\r\n0\r\n\r\n")),
          "complete 200 (last-chunk sent) despite the broken request body; "
          "bytes: %r" % data)


@case
def missing_host():
    rejected(b"GET / HTTP/1.1\r\n\r\n", 400, "no Host in 1.1")
    rejected(head(b"Host: y"), 400, "two Hosts")
    rejected(head(b"Host: a@b", host=False), 400, "userinfo in Host")


@case
def version_unsupported():
    rejected(b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP/2.0")
    rejected(b"GET / HTTP/0.9\r\nHost: x\r\n\r\n", 505, "HTTP/0.9")
    rejected(b"GET / HTTP/3.0\r\nHost: x\r\n\r\n", 505, "HTTP/3.0")


@case
def version_higher_minor_is_http11():
    # RFC 9110 2.5: a higher minor version within major 1 is served as
    # HTTP/1.1 (keep-alive, chunked, Host required) and answered HTTP/1.1.
    with Conn(srv.port) as c:
        for v in (b"1.2", b"1.9"):
            c.send(b"GET / HTTP/" + v + b"\r\nHost: x\r\n\r\n")
            r = c.response()
            eq((r.status, r.body), (200, b"Hello, World!"), "HTTP/%s" % v.decode())
            check(r.raw_head.startswith(b"HTTP/1.1 200 "), "status line %r"
                  % r.raw_head[:20])
        c.send(b"POST /echo HTTP/1.2\r\nHost: x\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        r = c.response()
        eq((r.status, r.body), (200, b"hello"), "chunked over HTTP/1.2")
        check(c.still_open(), "HTTP/1.2 is persistent like HTTP/1.1")
    rejected(b"GET / HTTP/1.2\r\n\r\n", 400, "HTTP/1.2 without Host")


@case
def version_garbage():
    for v in (b"HTTX/1.1", b"http/1.1", b"HTTP/1.1x", b"HTTP/11",
              b"HTTP/1.", b"HTTP/a.b", b"FOO"):
        rejected(b"GET / " + v + b"\r\nHost: x\r\n\r\n", 400,
                 "version %r" % v)
    rejected(b"GET /\r\nHost: x\r\n\r\n", 400, "no version")


# ---- Limits -----------------------------------------------------------------

@case
def uri_too_long():
    target = b"/" + b"a" * MAX_URI
    rejected(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414,
             "target of max-uri + 1 bytes")
    # Refused as soon as the target is too long, before the head ends.
    rejected(b"GET /" + b"a" * (MAX_URI + 100), 414, "partial long target")


@case
def head_too_big():
    h = head(b"X-Pad: " + b"p" * (MAX_HEAD))
    rejected(h, 431, "head over max-head")
    # A head that never ends is refused once it passes the limit.
    rejected(b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * (MAX_HEAD + 10),
             431, "partial head over max-head")
    # Empty lines before the request line count as well.
    rejected(b"\r\n" * (MAX_HEAD // 2 + 8), 431, "a flood of empty lines")


@case
def too_many_headers():
    fields = [b"X-F%d: v" % i for i in range(MAX_HEADERS)]
    rejected(head(*fields), 431, "%d fields" % (MAX_HEADERS + 1))


@case
def body_too_large_content_length():
    # Refused from the head alone: the body is not awaited.
    rejected(post(b"Content-Length: %d" % (MAX_BODY + 1),
                      target=b"/collect"), 413, "Content-Length over max")


@case
def body_too_large_chunked():
    body = b"".join(b"64\r\n" + b"z" * 100 + b"\r\n" for _ in range(11))
    rejected(post(b"Transfer-Encoding: chunked", target=b"/collect") +
             body + b"0\r\n\r\n", 413, "chunked body over max")


@case
def body_too_large_with_continue():
    # A client that waits for 100 Continue is told 413 instead.
    with Conn(srv.port) as c:
        c.send(post(b"Content-Length: %d" % (MAX_BODY * 10),
                    b"Expect: 100-continue", target=b"/collect"))
        r = c.response(timeout=3)
        eq(r.status, 413, "status")
        eq(r.headers.get("connection", "").lower(), "close", "Connection")
        check(c.at_eof(3), "not closed after 413")


# ---- The application's own error answers (reference --error-hook) --------

hook_srv = None


def hook_server():
    """The reference server with --error-hook and this file's limits, started
    once."""
    global hook_srv
    if hook_srv is None:
        hook_srv = Server("reference", ["--error-hook",
                                        "--max-uri", str(MAX_URI),
                                        "--max-head", str(MAX_HEAD),
                                        "--max-headers", str(MAX_HEADERS),
                                        "--max-body", str(MAX_BODY)])
    return hook_srv


def hooked(data, status, method, closes=True, allow=None, what=None,
           head_only=False):
    """Send `data`; the answer must be `status` with the reference server's
    JSON body (or none for HEAD), tern's Connection semantics (close after a
    rejection, keep-alive otherwise, whatever the hook asked for) and, on a
    405, Allow."""
    what = what or repr(data[:60])
    m = "null" if method is None else '"%s"' % method
    want = (b'{"error":%d,"reason":"%s","method":%s,"bad":-1}\n'
            % (status, REASONS[status].encode(), m.encode()))
    with Conn(hook_server().port) as c:
        c.send(data)
        r = c.response("HEAD" if head_only else "GET")
        eq(r.status, status, what + ": status")
        eq(r.reason, REASONS[status], what + ": reason phrase")
        eq(r.headers.get("x-error-hook"), "1", what + ": the hook's field")
        eq(r.headers.get("content-type"), "application/json",
           what + ": content-type")
        eq(r.header_count("connection"), 1 if closes else 0,
           what + ": Connection fields")
        eq(r.headers.get("allow"), allow, what + ": Allow")
        if head_only:
            eq((r.body, r.headers.get("content-length")),
               (b"", str(len(want))), what + ": HEAD body and length")
        else:
            eq(r.body, want, what + ": body")
        if closes:
            eq(r.headers.get("connection", "").lower(), "close",
               what + ": Connection")
            check(c.at_eof(3), what + ": not closed after %d" % status)
        else:
            r = c.request("GET", "/")
            eq(r.status, 200, what + ": the connection serves on")


REASONS[404] = "Not Found"
REASONS[405] = "Method Not Allowed"


@case
def error_hook_answers():
    hooked(head(line=b"GET /nope HTTP/1.1"), 404, "GET", closes=False)
    hooked(head(line=b"HEAD /nope HTTP/1.1"), 404, "HEAD", closes=False,
           head_only=True)
    hooked(head(line=b"PUT / HTTP/1.1"), 405, "PUT", closes=False,
           allow="GET, HEAD")
    hooked(post(b"Content-Length: %d" % (MAX_BODY + 1), target=b"/collect"),
           413, "POST", what="413 from Content-Length")
    body = b"".join(b"64\r\n" + b"z" * 100 + b"\r\n" for _ in range(11))
    hooked(post(b"Transfer-Encoding: chunked", target=b"/collect") + body +
           b"0\r\n\r\n", 413, "POST", what="413 from a chunked body")
    hooked(b"GET /" + b"a" * MAX_URI + b" HTTP/1.1\r\nHost: x\r\n\r\n",
           414, None, what="414")
    hooked(b"GET /" + b"a" * (MAX_URI + 100), 414, None,
           what="414 before the head ends")
    hooked(head(b"X-Pad: " + b"p" * MAX_HEAD), 431, None, what="431 size")
    hooked(head(*[b"X-F%d: v" % i for i in range(MAX_HEADERS)]), 431, None,
           what="431 count")
    hooked(head(b"bad header"), 400, None, what="400 bad field")
    hooked(post(b"Transfer-Encoding: chunked", target=b"/collect") +
           b"zz\r\n", 400, "POST", what="400 bad chunk size")


@case
def error_hook_declines():
    # A hook that does not answer leaves tern's own text in place.
    with Conn(hook_server().port) as c:
        r = c.request("GET", "/plain/x")
        eq((r.status, r.body), (404, b"404 Not Found\n"), "tern's text")
        eq(r.headers.get("content-type"), "text/plain", "content-type")
        check("x-error-hook" not in r.headers, "the hook's field")
    check("second tern_error_respond" not in hook_server().stderr_text(),
          "a second tern_error_respond was accepted")


@case
def default_handler_404_and_405():
    s = Server("reference", ["--default-handler"])
    try:
        with Conn(s.port) as c:
            r = c.request("GET", "/nope")
            eq((r.status, r.body), (404, b'{"default":404,"allow":""}\n'),
               "unmatched path")
            check("allow" not in r.headers, "Allow on a 404")
            r = c.request("DELETE", "/stats")
            eq((r.status, r.body),
               (405, b'{"default":405,"allow":"GET, HEAD"}\n'),
               "path without the method")
            eq(r.headers.get("allow"), "GET, HEAD", "Allow")
            r = c.request("GET", "/")
            eq(r.status, 200, "a routed path")
    finally:
        eq(s.stop(), 0, "reference exit status")


def teardown():
    shared_reference_teardown(srv)
    if hook_srv is not None:
        shared_reference_teardown(hook_srv)


if __name__ == "__main__":
    suite.main(setup, teardown)
