#!/usr/bin/env python3
"""Unmodified applications of Debian's frameworks, the examples under
examples/python/, served by `python -m tern` and driven by real clients:
curl (HTTP/1.1), httpx with HTTP/2 over TLS (python3-httpx, python3-h2),
tern's h3client (HTTP/3), Python's websockets. FastAPI, Starlette, Quart
and Django on ASGI; Flask and Django on WSGI."""
import asyncio
import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_asgi import (REPO, PyServer, Skip, Suite, check, curl, eq,  # noqa
                       get, h3get, self_signed, websockets)

suite = Suite()
case = suite.case
EXAMPLES = os.path.join(REPO, "examples", "python")
CERT = None


def need(module):
    try:
        __import__(module)
    except ImportError:
        raise Skip("%s is not installed (test/deps.sh installs it)" % module)


def serve(app, *args, quic=False):
    extra = list(args)
    if quic:
        extra += ["--ssl-certfile", CERT[0], "--ssl-keyfile", CERT[1],
                  "--http3"]
    return PyServer(app, extra, cwd=EXAMPLES, quic=quic)


def h2get(port, path, method="GET", **kw):
    import httpx
    with httpx.Client(http2=True, verify=False, timeout=20) as c:
        r = c.request(method, "https://127.0.0.1:%d%s" % (port, path), **kw)
        eq(r.http_version, "HTTP/2", "httpx negotiated HTTP/2")
        return r


def gtls_get(port, path):
    """GET over HTTP/3 with gtlsclient (ngtcp2's GnuTLS client, Debian's
    HTTP/3 client): the body it downloaded."""
    import shutil
    import subprocess
    if not shutil.which("gtlsclient"):
        raise Skip("gtlsclient (ngtcp2-client) not installed")
    dl = tempfile.mkdtemp()
    p = subprocess.run(["gtlsclient", "-q", "--exit-on-all-streams-close",
                        "--timeout=10s", "--download=" + dl, "127.0.0.1",
                        str(port), "https://localhost:%d%s" % (port, path)],
                       capture_output=True, timeout=30)
    files = os.listdir(dl)
    check(len(files) == 1, "gtlsclient downloaded %r (rc %d: %r)" %
          (files, p.returncode, p.stdout[-500:] + p.stderr[-500:]))
    with open(os.path.join(dl, files[0]), "rb") as f:
        return f.read()


def every_protocol(port, quic_port, path, check_body):
    """GET path over HTTP/1.1 over TLS (curl), HTTP/2 (httpx), HTTP/3
    (tern's h3client and gtlsclient); check_body(bytes) each."""
    p = curl("-k", "--http1.1", "https://127.0.0.1:%d%s" % (port, path))
    check_body(p.stdout)
    check_body(h2get(port, path).content)
    st, body = h3get(quic_port, path, os.path.join(tempfile.mkdtemp(), "b"))
    eq(st, 200, "HTTP/3 status")
    check_body(body)
    check_body(gtls_get(quic_port, path))


def setup():
    global CERT
    CERT = self_signed(tempfile.mkdtemp(prefix="tern-fw-"))


@case(timeout=90)
def fastapi_app():
    need("fastapi")
    with serve("fastapi_app:app", quic=True) as s:
        every_protocol(s.port, s.quic_port, "/items?limit=3",
                       lambda b: eq(len(json.loads(b)), 3, "items"))
        r = h2get(s.port, "/items", "POST",
                  json={"id": 7, "name": "new", "price": 2.5})
        eq((r.status_code, r.json()["name"]), (201, "new"), "POST")
        r = h2get(s.port, "/items/99")
        eq(r.status_code, 404, "HTTPException")
        r = h2get(s.port, "/items", "POST", json={"id": "x"})
        eq(r.status_code, 422, "validation error")
        if websockets is not None:
            import ssl
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE

            async def go():
                async with websockets.connect(
                        "wss://127.0.0.1:%d/ws" % s.port, ssl=ctx) as ws:
                    await ws.send("hi")
                    eq(await ws.recv(), "echo: hi", "FastAPI WebSocket")
            asyncio.new_event_loop().run_until_complete(go())


@case(timeout=90)
def starlette_chat():
    need("starlette")
    if websockets is None:
        raise Skip("python3-websockets not installed")
    with serve("starlette_chat:app", quic=True) as s:
        every_protocol(s.port, s.quic_port, "/", lambda b: eq(
            json.loads(b)["connected"], 0, "Starlette status page"))
        async def go():
            url = "wss://127.0.0.1:%d/chat" % s.port
            import ssl
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            async with websockets.connect(url, ssl=ctx) as a, \
                    websockets.connect(url, ssl=ctx) as b:
                await a.recv()
                await b.recv()
                await a.send("hello room")
                eq(await a.recv(), "hello room", "to the sender")
                eq(await b.recv(), "hello room", "to the other")
        asyncio.new_event_loop().run_until_complete(go())
        st, body = h3get(s.quic_port, "/", os.path.join(tempfile.mkdtemp(),
                                                        "b"))
        eq(json.loads(body)["http_version"], "3", "status page over HTTP/3")


@case(timeout=90)
def quart_app():
    need("quart")
    with serve("quart_app:app") as s:
        eq(get(s.port, "/").body, b"Hello from Quart on tern", "GET")
        r = get(s.port, "/echo", method="POST", body=b"x" * 5000)
        eq(json.loads(r.body)["length"], 5000, "POST body")
        p = curl("--http2-prior-knowledge", "http://127.0.0.1:%d/" % s.port)
        eq(p.stdout, b"Hello from Quart on tern", "h2c")
    with serve("quart_app:app", quic=True) as s:
        every_protocol(s.port, s.quic_port, "/", lambda b: eq(
            b, b"Hello from Quart on tern", "Quart"))


@case(timeout=90)
def flask_app_inline_and_threads():
    need("flask")
    for extra in ([], ["--threads", "4"]):
        with serve("flask_app:app", *extra, quic=True) as s:
            every_protocol(s.port, s.quic_port, "/items",
                           lambda b: eq(len(json.loads(b)), 20, "items"))
            r = h2get(s.port, "/echo", "POST", data={"a": "1", "b": "two"})
            eq(r.json()["form"], {"a": "1", "b": "two"}, "form %s" % extra)
            r = h2get(s.port, "/hello/you")
            eq(r.text, "hello you (HTTP/2)", "route")


@case(timeout=90)
def django_asgi_and_wsgi():
    need("django")
    for app in ("djangosite.asgi:application", "djangosite.wsgi:application"):
        with serve(app, quic=True) as s:
            every_protocol(s.port, s.quic_port, "/",
                           lambda b: eq(b, b"Hello from Django on tern", app))
            info = h2get(s.port, "/info").json()
            eq((info["secure"], info["host"]),
               (True, "127.0.0.1:%d" % s.port), "https and host: %r" % info)
            r = h2get(s.port, "/echo", "POST", content=b"y" * 70000)
            eq(r.json()["length"], 70000, "body")


if __name__ == "__main__":
    suite.main(setup=setup)
