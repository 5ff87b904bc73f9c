#!/usr/bin/env python3
"""The response hook (tern_server_on_response) and the static handler's
version 2 options, over real sockets: raw HTTP/1.1, curl over HTTP/2
(h2c), and tern's HTTP/3 client.

The reference server's --response-hook adds X-Hooked (the status),
X-Content-Type-Options unless the answer has one (tern_response_head_get),
and CORS fields for a request with an Origin. Every kind of answer must
carry them: a handler's, a streamed one, one from another thread, a
compressed one, the static handler's (a file, a 304, the fallback file,
its refusals), the error hook's, tern's own (404, 405, a malformed head)
and a WebSocket handshake. The hook's limits and its misuse (a response
call from inside it) are refused with their error codes, and the answer
still goes out.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (BUILD, Conn, Server, Skip, Suite, check, eq, get,
                     self_signed)

suite = Suite()
case = suite.case
S = {}

ORIGIN = "https://app.example"
TERN_EINVAL, TERN_ENOMEM, TERN_ESTATE = -1, -2, -3
SPA = b"<!doctype html><title>spa</title>\n"


def setup():
    d = tempfile.mkdtemp(prefix="tern-hooks-")
    root = os.path.join(d, "root")
    os.makedirs(root)
    with open(os.path.join(root, "a.txt"), "wb") as f:
        f.write(b"hello static\n")
    with open(os.path.join(root, "index.html"), "wb") as f:
        f.write(SPA)
    with open(os.path.join(root, ".env"), "wb") as f:
        f.write(b"SECRET")
    S["dir"] = d
    S["cert"] = self_signed(d)
    S["srv"] = Server("reference", [
        "--workers", "1", "--response-hook", "--error-hook", "--compress",
        "--static", root, "--static-fallback", "index.html",
        "--static-header", "x-frame-options: DENY",
        "--static-header", "x-content-type-options: nosniff",
        "--tls-port", "0", "--cert", S["cert"][0], "--key", S["cert"][1],
        "--quic-port", "0"])
    for _ in range(3):
        m = re.match(r"quic listening on (\d+)$", S["srv"].next_line())
        if m:
            S["quic"] = int(m.group(1))
            break


def teardown():
    S["srv"].stop()
    shutil.rmtree(S["dir"], ignore_errors=True)


def hooked(r, status, what, origin=True):
    """The hook's fields on one HTTP/1.1 answer."""
    eq(r.status, status, what + ": status")
    eq(r.headers.get("x-hooked"), str(status), what + ": X-Hooked")
    eq(r.header_count("x-content-type-options"), 1,
       what + ": one X-Content-Type-Options")
    if origin:
        eq(r.headers.get("access-control-allow-origin"), ORIGIN,
           what + ": Access-Control-Allow-Origin")
        check("origin" in r.headers.get("vary", "").lower().split(", "),
              what + ": Vary: %r" % r.headers.get("vary"))


def ask(method, target, headers=(), what=None, origin=True):
    hs = [("Origin", ORIGIN)] if origin else []
    with Conn(S["srv"].port) as c:
        r = c.request(method, target, hs + list(headers))
        # The connection serves on after each of them.
        eq(c.request("GET", "/").status, 200, "%s %s: a GET after it"
           % (method, target))
    return r


@case
def handler_answers():
    r = ask("GET", "/")
    hooked(r, 200, "GET /")
    eq(r.body, b"Hello, World!", "body")
    hooked(ask("GET", "/tick?n=3&ms=5"), 200, "a streamed answer")
    hooked(ask("GET", "/status?code=201&thread=1"), 201,
           "an answer from another thread")
    r = ask("GET", "/compress", [("Accept-Encoding", "gzip")])
    hooked(r, 200, "a compressed answer")
    eq(r.headers.get("content-encoding"), "gzip", "compressed")


@case
def tern_and_error_hook_answers():
    r = ask("GET", "/nope")
    hooked(r, 404, "404 through the error hook")
    eq(r.headers.get("x-error-hook"), "1", "the error hook answered")
    r = ask("PUT", "/")
    hooked(r, 405, "405")
    eq(r.headers.get("allow"), "GET, HEAD", "Allow kept")
    # A head that does not parse has no request: the hook runs with none
    # (no Origin to read), and the connection closes as for any 400.
    with Conn(S["srv"].port) as c:
        c.send(b"GARBAGE\r\nOrigin: " + ORIGIN.encode() + b"\r\n\r\n")
        r = c.response()
        hooked(r, 400, "a malformed head", origin=False)
        eq(r.headers.get("access-control-allow-origin"), None,
           "no request, no Origin")
        check(c.at_eof(3), "closed after the 400")


@case
def static_answers():
    r = ask("GET", "/static/a.txt")
    hooked(r, 200, "a static file")
    eq(r.headers.get("x-frame-options"), "DENY", "the static extra field")
    eq(r.headers.get("x-content-type-options"), "nosniff",
       "the static handler's own field, not doubled by the hook")
    r304 = ask("GET", "/static/a.txt", [("If-None-Match", r.headers["etag"])])
    hooked(r304, 304, "a static 304")
    eq(r304.headers.get("x-frame-options"), "DENY", "extra field on the 304")
    r416 = ask("GET", "/static/a.txt", [("Range", "bytes=100-")])
    hooked(r416, 416, "a static 416")
    eq(r416.headers.get("x-frame-options"), "DENY", "extra field on the 416")
    for bad, status in (("/static/.env", 404), ("/static/%00", 400)):
        r = ask("GET", bad)
        hooked(r, status, "static refusal " + bad)
        eq(r.headers.get("x-error-hook"), "1",
           bad + ": refused through the error hook")
        check(b"SECRET" not in r.body, bad + ": nothing of the file")


@case
def static_fallback_is_the_spa_index():
    """try-files: any missing path under the mount is index.html, 200,
    with the index's own validators (a 304 on its ETag)."""
    for path in ("/static/app/settings", "/static/x/y/z", "/static/dir/"):
        r = ask("GET", path)
        hooked(r, 200, "fallback for " + path)
        eq(r.body, SPA, path + ": the fallback's body")
        eq(r.headers.get("content-type"), "text/html; charset=utf-8",
           path + ": the fallback's type")
    etag = r.headers["etag"]
    eq(ask("GET", "/static/a.txt").headers["etag"] != etag, True,
       "the fallback has its own ETag")
    r = ask("GET", "/static/other/route", [("If-None-Match", etag)])
    eq((r.status, r.body), (304, b""), "a 304 on the fallback's ETag")
    r = ask("HEAD", "/static/app")
    eq((r.status, r.headers.get("content-length")), (200, str(len(SPA))),
       "HEAD of the fallback")


@case
def websocket_handshake():
    with Conn(S["srv"].port) as c:
        c.send(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
               b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               b"Origin: " + ORIGIN.encode() + b"\r\n\r\n")
        r = c.response()
        hooked(r, 101, "the WebSocket handshake")
        eq(r.headers.get("sec-websocket-accept"),
           "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "the handshake itself intact")


@case
def hook_limits_and_misuse():
    """A value past the hook's 4 KiB, a field with CR LF and a response
    call from inside the hook: each refused (TERN_ENOMEM, TERN_EINVAL,
    TERN_ESTATE), logged, and the answer (here a 404) still goes out with
    the hook's other fields."""
    srv = S["srv"]
    for path, code in (("/hook-big", TERN_ENOMEM), ("/hook-bad", TERN_EINVAL),
                       ("/hook-respond", TERN_ESTATE)):
        r = ask("GET", path)
        hooked(r, 404, path)
        eq(r.headers.get("x-hook-refused"), str(code), path + ": refused")
        check("x-big" not in r.headers and "x-bad" not in r.headers,
              path + ": the refused field is absent")
    log = srv.stderr_text(4000)
    check("tern_respond refused: called from the response hook" in log,
          "the misuse logged: %r" % log[-500:])


@case
def http2_answers():
    url = "http://127.0.0.1:%d" % S["srv"].port
    for path, status in (("/", 200), ("/nope", 404), ("/static/a.txt", 200),
                         ("/static/spa/route", 200)):
        p = subprocess.run(["curl", "-s", "-D", "-", "-o", "/dev/null",
                            "--http2-prior-knowledge", "-H",
                            "Origin: " + ORIGIN, url + path],
                           capture_output=True, text=True, timeout=30)
        head = p.stdout.lower()
        check(head.startswith("http/2 %d" % status),
              "h2 %s: %r" % (path, head[:200]))
        check("x-hooked: %d\n" % status in head, "h2 %s: X-Hooked" % path)
        check("access-control-allow-origin: %s\n" % ORIGIN in head,
              "h2 %s: CORS" % path)


@case
def http3_answers():
    client = os.path.join(BUILD, "test", "net", "h3client")
    if "quic" not in S or not os.path.exists(client):
        raise Skip("built without HTTP/3")
    for path, status in (("/", 200), ("/nope", 404), ("/static/a.txt", 200),
                         ("/static/spa/route", 200)):
        p = subprocess.run([client, "--print-headers", "--header",
                            "origin: " + ORIGIN, "GET",
                            "https://127.0.0.1:%d%s" % (S["quic"], path)],
                           capture_output=True, text=True, timeout=30)
        out = p.stdout + p.stderr
        check("stream 0 status %d" % status in out,
              "h3 %s: %r" % (path, out[-400:]))
        check("header x-hooked: %d" % status in out, "h3 %s: X-Hooked" % path)
        check("header access-control-allow-origin: %s" % ORIGIN in out,
              "h3 %s: CORS" % path)


@case
def no_hook_no_fields():
    with Server("reference", ["--workers", "1"]) as s:
        r = get(s.port, "/nope", [("Origin", ORIGIN)])
        eq((r.status, r.headers.get("x-hooked"),
            r.headers.get("access-control-allow-origin")), (404, None, None),
           "without --response-hook")
        eq(r.headers.get("content-type"), "text/plain", "tern's 404 text")


@case
def static_options_checked():
    """tern_static_new refuses a bad extra field and a fallback that is not
    a file name below the root, naming the problem."""
    root = os.path.join(S["dir"], "root")
    for args, why in (
            (["--static-header", "bad name: v"], "not a token"),
            (["--static-fallback", "../secret"], "fallback"),
            (["--static-fallback", "/"], "fallback")):
        p = subprocess.run([os.path.join(BUILD, "examples", "reference"),
                            "--port", "0", "--static", root] + args,
                           capture_output=True, text=True, timeout=10)
        check(p.returncode != 0 and why in p.stderr,
              "%r: rc %d, %r" % (args, p.returncode, p.stderr[-300:]))


if __name__ == "__main__":
    suite.main(setup, teardown)
