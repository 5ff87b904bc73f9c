#!/usr/bin/env python3
"""The programs a newcomer copies (examples/rest.c, spa.c, feed.c, tls.c
and chat.c's rooms), run as built and exercised over real sockets: raw
HTTP/1.1, curl (HTTP/1.1 and h2c) and Python's websockets. The packaging
test (test/packaging/run.sh) compiles the same files against the
installed library with pkg-config.
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (Conn, Server, Skip, Suite, check, eq, get,
                     websockets_module)
from handlers.test_sse import Stream, by_name  # noqa: E402 (not its cases)

websockets = websockets_module()

suite = Suite()
case = suite.case
ORIGIN = "https://app.example"


def program(name, args):
    """An example taking a bare PORT among its arguments ("0" in `args`)."""
    return Server(name, args, port_args=())


def curl(args, timeout=20):
    p = subprocess.run(["curl", "-s", "-D", "-"] + args, capture_output=True,
                       text=True, timeout=timeout)
    head, _, body = p.stdout.partition("\n\n")  # text mode: LF
    return head.lower(), body


@case
def rest_crud_and_cors():
    with program("rest", ["0"]) as s:
        with Conn(s.port) as c:
            r = c.request("POST", "/todos", [("Origin", ORIGIN),
                                             ("Content-Type",
                                              "application/json")],
                          b'{"title": "buy \\"milk\\""}')
            eq(r.status, 201, "created")
            made = json.loads(r.body)
            eq(made["title"], 'buy "milk"', "the title, escapes kept")
            eq(r.headers.get("location"), "/todos/%d" % made["id"],
               "Location")
            eq(r.headers.get("access-control-allow-origin"), ORIGIN, "CORS")
            check(r.headers.get("x-request-id", "").isdigit(), "request id")
            r = c.request("GET", "/todos")
            eq(json.loads(r.body), [made], "the list")
            r = c.request("GET", "/todos/%d" % made["id"])
            eq(json.loads(r.body), made, "one todo")
            r = c.request("OPTIONS", "/todos/%d" % made["id"],
                          [("Origin", ORIGIN),
                           ("Access-Control-Request-Method", "DELETE")])
            eq((r.status, r.headers.get("access-control-allow-methods"),
                r.headers.get("access-control-allow-origin")),
               (204, "GET, POST, DELETE", ORIGIN), "preflight")
            eq(c.request("DELETE", "/todos/%d" % made["id"]).status, 204,
               "deleted")
            r = c.request("GET", "/todos/%d" % made["id"])
            eq((r.status, json.loads(r.body)["error"]), (404, 404),
               "gone: JSON 404")
            r = c.request("POST", "/todos", body=b'{"name": 1}')
            eq(r.status, 400, "no title: 400")
            r = c.request("GET", "/nope", [("Origin", "https://evil.example")])
            eq((r.status, r.headers.get("content-type")),
               (404, "application/json"), "tern's 404 through the hook")
            eq(r.headers.get("access-control-allow-origin"), None,
               "no CORS for another origin")
            check("x-request-id" in r.headers, "request id on tern's 404")
            r = c.request("PUT", "/todos")
            eq((r.status, json.loads(r.body)["error"]), (405, 405),
               "JSON 405")
        head, body = curl(["--http2-prior-knowledge", "-H",
                           "Origin: " + ORIGIN,
                           "http://127.0.0.1:%d/todos" % s.port])
        check(head.startswith("http/2 200") and
              "access-control-allow-origin: " + ORIGIN in head,
              "h2: %r" % head)
        eq(json.loads(body), [], "h2 list")


@case
def spa_files_routes_and_fields():
    d = tempfile.mkdtemp(prefix="tern-spa-")
    try:
        with open(os.path.join(d, "index.html"), "w") as f:
            f.write("<!doctype html><div id=app></div>\n")
        os.makedirs(os.path.join(d, "assets"))
        with open(os.path.join(d, "assets", "app.js"), "w") as f:
            f.write("console.log('app');\n")
        with open(os.path.join(d, ".env"), "w") as f:
            f.write("SECRET\n")
        with program("spa", [d, "0"]) as s:
            r = get(s.port, "/assets/app.js")
            eq((r.status, r.headers.get("content-type")),
               (200, "text/javascript; charset=utf-8"), "a file")
            eq(r.headers.get("content-security-policy"), "default-src 'self'",
               "CSP on files")
            eq(r.headers.get("x-content-type-options"), "nosniff",
               "the hook's field")
            for path in ("/", "/settings/profile", "/users/42"):
                r = get(s.port, path)
                eq((r.status, r.body), (200, b"<!doctype html><div id=app>"
                                        b"</div>\n"), path + ": the app")
                eq(r.headers.get("x-frame-options"), "DENY",
                   path + ": X-Frame-Options")
            r = get(s.port, "/users/42", [("If-None-Match", r.headers["etag"])])
            eq(r.status, 304, "the app's index revalidates")
            r = get(s.port, "/.env")
            eq(r.status, 404, "hidden files refused, not the app")
            check(b"SECRET" not in r.body, "nothing of .env")
            eq(r.headers.get("x-content-type-options"), "nosniff",
               "the hook on tern's 404")
    finally:
        shutil.rmtree(d, ignore_errors=True)


@case(timeout=30)
def feed_ticks_and_posts():
    with program("feed", ["0", "200"]) as s:
        a = Stream(s.port, path="/events")
        b = Stream(s.port, path="/events", h2=True,
                   headers=["Last-Event-ID: 7"])
        try:
            ev, _ = b.wait(lambda ev, c: by_name(ev, "welcome"))
            eq(by_name(ev, "welcome")[0][2], "last seen: 7", "Last-Event-ID")
            a.wait(lambda ev, c: len(by_name(ev, "tick")) >= 2,
                   what="ticks from the program's thread")
            with Conn(s.port) as c:
                eq(c.request("POST", "/say", body=b"hello\nworld").status,
                   204, "posted")
            for st in (a, b):
                ev, _ = st.wait(lambda ev, c: by_name(ev, "say"))
                eq(by_name(ev, "say")[0][2], "hello\nworld", "the post")
            ids = [int(e[0]) for e in a.wait(lambda ev, c: True)[0]
                   if e[0] is not None]
            eq(ids, sorted(ids), "ids in order")
        finally:
            a.close()
            b.close()


@case(timeout=60)
def chat_rooms_are_separate():
    if websockets is None:
        raise Skip("python3-websockets is not installed")
    with Server("chat", ["--workers", "2"]) as s:
        base = "ws://127.0.0.1:%d/chat" % s.port

        async def go():
            a1 = await websockets.connect(base + "/alpha")
            a2 = await websockets.connect(base + "/alpha")
            b1 = await websockets.connect(base + "/beta")
            lobby = await websockets.connect(base)
            for ws in (a1, a2, b1, lobby):
                check(re.match(r"welcome user\d+ \(via http/1\.1\)$",
                               await ws.recv()), "welcome")
            await a1.send("hi alpha")
            seen = set()
            while "hi alpha" not in " ".join(seen):
                seen.add(await asyncio.wait_for(a2.recv(), 5))
            await b1.send("hi beta")
            got = ""
            while not got.endswith(": hi beta"):  # after its own join
                got = await asyncio.wait_for(b1.recv(), 5)
            # Neither beta nor the lobby heard alpha, nor alpha beta.
            for ws, foreign in ((b1, "hi alpha"), (lobby, "hi alpha"),
                                (lobby, "hi beta"), (a2, "hi beta")):
                try:
                    while True:
                        m = await asyncio.wait_for(ws.recv(), 0.5)
                        check(foreign not in m, "%r leaked" % m)
                except asyncio.TimeoutError:
                    pass
            for ws in (a1, a2, b1, lobby):
                await ws.close()
        asyncio.run(asyncio.wait_for(go(), 30))
        r = get(s.port, "/chat/no%20spaces")
        eq(r.status, 400, "a bad room name")
        check("joined via http/1.1 (room alpha)" in s.stderr_text(4000),
              "the log names the room")


def pki(d):
    """A root CA, an intermediate it signed, a leaf for localhost the
    intermediate signed (chain.pem: leaf then intermediate), and a client
    certificate from a client CA."""
    def run(*a):
        subprocess.run(list(a), check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    p = lambda n: os.path.join(d, n)
    with open(p("ca.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:true\n"
                "keyUsage=critical,keyCertSign,cRLSign\n")
    with open(p("leaf.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, subj in (("root", "Root CA"), ("client-ca", "Client CA")):
        run("openssl", "req", "-x509", "-nodes", "-days", "2", "-subj",
            "/CN=" + subj, "-keyout", p(name + ".key"), "-out",
            p(name + ".crt"), *ec)
    for name, subj, ca, ext in (("int", "Intermediate", "root", "ca.ext"),
                                ("leaf", "localhost", "int", "leaf.ext"),
                                ("alice", "alice", "client-ca", None)):
        run("openssl", "req", "-nodes", "-subj", "/CN=" + subj, "-keyout",
            p(name + ".key"), "-out", p(name + ".csr"), *ec)
        run("openssl", "x509", "-req", "-in", p(name + ".csr"), "-CA",
            p(ca + ".crt"), "-CAkey", p(ca + ".key"), "-CAcreateserial",
            "-days", "2", "-out", p(name + ".crt"),
            *(["-extfile", p(ext)] if ext else []))
    with open(p("chain.pem"), "w") as f:
        f.write(open(p("leaf.crt")).read() + open(p("int.crt")).read())
    return p


@case(timeout=60)
def tls_chain_http3_and_client_certs():
    """examples/tls.c: the chain's intermediate goes out (curl trusts only
    the root), HTTP/1.1, HTTP/2 and HTTP/3 on one port number; with a
    client CA a client without a certificate is refused and alice is
    named."""
    d = tempfile.mkdtemp(prefix="tern-tlsex-")
    try:
        p = pki(d)
        h3 = os.path.join(os.environ.get("TERN_BUILD", ""), "test", "net",
                          "h3client")
        with program("tls", [p("chain.pem"), p("leaf.key"), "0"]) as s:
            url = "https://localhost:%d/" % s.port
            for v, want in (("--http1.1", "HTTP/1.1"), ("--http2", "HTTP/2")):
                out = subprocess.run(["curl", "-s", v, "--cacert",
                                      p("root.crt"), url],
                                     capture_output=True, text=True,
                                     timeout=20).stdout
                check(out.startswith("hello over %s with TLS_" % want),
                      "%s through the chain: %r" % (v, out))
            if os.path.exists(h3):
                body = os.path.join(d, "h3.body")
                subprocess.run([h3, "--body-out", body, "GET",
                                "https://127.0.0.1:%d/" % s.port],
                               capture_output=True, timeout=20)
                check(open(body).read().startswith("hello over HTTP/3"),
                      "HTTP/3 on the same port number")
        with program("tls", [p("chain.pem"), p("leaf.key"), "0",
                             p("client-ca.crt")]) as s:
            url = "https://localhost:%d/" % s.port
            r = subprocess.run(["curl", "-s", "--cacert", p("root.crt"),
                                url], capture_output=True, text=True,
                               timeout=20)
            check(r.returncode != 0 and r.stdout == "",
                  "no client certificate: refused (%d)" % r.returncode)
            out = subprocess.run(["curl", "-s", "--http2", "--cacert",
                                  p("root.crt"), "--cert", p("alice.crt"),
                                  "--key", p("alice.key"), url],
                                 capture_output=True, text=True,
                                 timeout=20).stdout
            check(out.rstrip().endswith("client CN=alice"),
                  "alice named: %r" % out)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    suite.main()
