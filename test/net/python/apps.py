"""ASGI and WSGI applications for test_asgi.py, served by `python -m tern
apps:NAME`. Each behaviour the tests check has a path here; what an
application saw that a response cannot carry (a disconnect, an exception
from send) goes to EVENTS, read back through /events."""
import asyncio
import hashlib
import json
import os
import sys
import time
import urllib.parse

EVENTS = []


def _json_safe(v):
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    return v


async def read_body(receive):
    body = bytearray()
    while True:
        m = await receive()
        if m["type"] == "http.disconnect":
            raise ConnectionError("disconnected while reading")
        body += m.get("body", b"")
        if not m.get("more_body"):
            return bytes(body)


async def respond(send, status=200, body=b"", headers=(), ctype=b"text/plain"):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype)] + list(headers)})
    await send({"type": "http.response.body", "body": body})


async def lifespan(scope, receive, send):
    while True:
        m = await receive()
        if m["type"] == "lifespan.startup":
            if os.environ.get("TERN_TEST_LIFESPAN_FAIL"):
                await send({"type": "lifespan.startup.failed",
                            "message": "refused on purpose"})
                return
            scope["state"]["started"] = "yes"
            scope["state"]["counter"] = [0]
            await send({"type": "lifespan.startup.complete"})
        elif m["type"] == "lifespan.shutdown":
            path = os.environ.get("TERN_TEST_SHUTDOWN_FILE")
            if path:
                with open(path, "w") as f:
                    f.write("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def websocket(scope, receive, send):
    path = scope["path"]
    m = await receive()
    assert m["type"] == "websocket.connect"
    if path == "/ws-close-before":
        await send({"type": "websocket.close", "code": 1008})
        return
    if path == "/ws-deny":
        await send({"type": "websocket.http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain"),
                                (b"x-denied", b"yes")]})
        await send({"type": "websocket.http.response.body",
                    "body": b"no entry"})
        return
    if path == "/ws-never":
        return  # the handler ends without accepting: 403
    accept = {"type": "websocket.accept"}
    if path == "/ws-sub":
        offered = scope["subprotocols"]
        accept["subprotocol"] = offered[-1] if offered else None
    if path == "/ws-headers":
        accept["headers"] = [(b"x-accepted", b"by-app")]
    await send(accept)
    if path == "/ws-scope":
        s = {k: _json_safe(v) for k, v in scope.items()
             if k not in ("state", "extensions")}
        s["ext"] = sorted(scope.get("extensions", {}))
        await send({"type": "websocket.send", "text": json.dumps(s)})
    while True:
        m = await receive()
        if m["type"] == "websocket.disconnect":
            EVENTS.append({"ws_disconnect": m["code"],
                           "reason": m.get("reason")})
            if path == "/ws-send-after-close":
                try:
                    await send({"type": "websocket.send", "text": "late"})
                    EVENTS.append({"late_send": "accepted"})
                except OSError as e:
                    EVENTS.append({"late_send": type(e).__name__})
            return
        if path == "/ws-close-reason":
            await send({"type": "websocket.close", "code": 4001,
                        "reason": "bye now"})
            continue
        out = {"type": "websocket.send"}
        if m.get("text") is not None:
            out["text"] = m["text"]
        else:
            out["bytes"] = m["bytes"]
        await send(out)


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        return await lifespan(scope, receive, send)
    if scope["type"] == "websocket":
        return await websocket(scope, receive, send)
    path = scope["path"]
    q = dict(urllib.parse.parse_qsl(scope["query_string"].decode()))
    if path == "/events":
        return await respond(send, body=json.dumps(EVENTS).encode(),
                             ctype=b"application/json")
    if path == "/pid":
        return await respond(send, body=b"%d" % os.getpid())
    if path == "/blocks":  # the interpreter's live blocks, for leak checks
        return await respond(send, body=b"%d" % sys.getallocatedblocks())
    if path.startswith("/scope"):
        s = {k: _json_safe(v) for k, v in scope.items()
             if k not in ("state", "extensions")}
        s["state"] = {k: v for k, v in scope.get("state", {}).items()
                      if isinstance(v, str)}
        s["ext"] = sorted(scope.get("extensions", {}))
        tls = scope.get("extensions", {}).get("tls")
        if tls is not None:
            s["tls"] = {"tls_version": tls.get("tls_version"),
                        "cipher_suite": tls.get("cipher_suite")}
        return await respond(send, body=json.dumps(s).encode(),
                             ctype=b"application/json")
    if path == "/state":
        # The state is a copy per request: a key set here is not seen by
        # the next request; the objects inside are shared.
        st = scope["state"]
        st["counter"][0] += 1
        seen = st.get("mine")
        st["mine"] = "set"
        return await respond(send, body=json.dumps(
            {"counter": st["counter"][0], "mine_before": seen}).encode())
    if path == "/echo":
        body = await read_body(receive)
        return await respond(send, body=b"%d %s" % (
            len(body), hashlib.sha256(body).hexdigest().encode()))
    if path == "/echo-stream":
        # Echoes each piece as it comes (chunked): both flows at once.
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")]})
        while True:
            m = await receive()
            if m["type"] == "http.disconnect":
                return
            await send({"type": "http.response.body", "body": m["body"],
                        "more_body": m.get("more_body", False)})
            if not m.get("more_body"):
                return
    if path == "/slow-read":
        # Reads one piece every 50 ms: the rest must wait in the socket.
        total = 0
        while True:
            m = await receive()
            total += len(m.get("body", b""))
            if not m.get("more_body") or m["type"] == "http.disconnect":
                break
            await asyncio.sleep(0.05)
        return await respond(send, body=b"%d" % total)
    if path == "/stream":
        n = int(q.get("n", "4"))
        size = int(q.get("size", "1000"))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")]})
        piece = bytes(i % 251 for i in range(size))
        for i in range(n):
            await send({"type": "http.response.body", "body": piece,
                        "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/close":
        return await respond(send, body=b"closing",
                             headers=[(b"connection", b"close")])
    if path == "/noread":
        return await respond(send, body=b"did not read")
    if path == "/head":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"),
                                (b"content-length", b"11")]})
        await send({"type": "http.response.body", "body": b"hello world"})
        return
    if path == "/length-short":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"10")]})
        try:
            await send({"type": "http.response.body", "body": b"12345"})
        except RuntimeError as e:
            EVENTS.append({"length_short": str(e)})
        return
    if path == "/length-long":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"5")]})
        try:
            await send({"type": "http.response.body", "body": b"1234567890"})
        except RuntimeError as e:
            EVENTS.append({"length_long": str(e)})
        return
    if path == "/raise":
        raise ValueError("raised on purpose")
    if path == "/raise-mid":
        await send({"type": "http.response.start", "status": 200,
                    "headers": []})
        await send({"type": "http.response.body", "body": b"partial",
                    "more_body": True})
        raise ValueError("raised half way")
    if path == "/wait-disconnect":
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200,
                    "headers": []})
        await send({"type": "http.response.body", "body": b"waiting\n",
                    "more_body": True})
        m = await receive()
        EVENTS.append({"after_body": m["type"]})
        try:
            await send({"type": "http.response.body", "body": b"late",
                        "more_body": True})
            EVENTS.append({"send_after_disconnect": "accepted"})
        except OSError as e:
            EVENTS.append({"send_after_disconnect": type(e).__name__})
        return
    if path == "/never":
        await asyncio.Event().wait()
    if path == "/slow":
        await asyncio.sleep(int(q.get("ms", "500")) / 1000)
        return await respond(send, body=b"slow done")
    if path == "/early-hint":
        await send({"type": "http.response.early_hint",
                    "links": [b"</style.css>; rel=preload; as=style"]})
        return await respond(send, body=b"after the hint")
    if path == "/trailers":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")],
                    "trailers": True})
        await send({"type": "http.response.body", "body": b"body then ",
                    "more_body": True})
        await send({"type": "http.response.body", "body": b"trailers"})
        await send({"type": "http.response.trailers",
                    "headers": [(b"x-checksum", b"abc123")]})
        return
    if path == "/pathsend":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/octet-stream")]})
        await send({"type": "http.response.pathsend", "path": q["file"]})
        return
    if path == "/zerocopy":
        with open(q["file"], "rb") as f:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type",
                                     b"application/octet-stream"),
                                    (b"content-length", q["count"].encode())]})
            await send({"type": "http.response.zerocopysend", "file": f,
                        "offset": int(q["offset"]),
                        "count": int(q["count"])})
        return
    if path == "/wrong-thread":
        # send() from another thread is refused (RuntimeError), not a crash
        import threading
        got = []

        def other():
            try:
                send({"type": "http.response.start", "status": 200,
                      "headers": []})
                got.append("accepted")
            except RuntimeError as e:
                got.append("refused: " + str(e))
        t = threading.Thread(target=other)
        t.start()
        t.join()
        return await respond(send, body=got[0].encode())
    if path == "/cpu":
        # Holds the thread: other clients wait for it (one thread serves).
        t = time.monotonic() + int(q.get("ms", "100")) / 1000
        while time.monotonic() < t:
            pass
        return await respond(send, body=b"busy done")
    return await respond(send, 404, b"no such test path")


async def no_lifespan(scope, receive, send):
    """An application without lifespan support, as Django's is."""
    if scope["type"] != "http":
        raise RuntimeError("only http here")
    await respond(send, body=b"served without lifespan")


def wsgi(environ, start_response):
    """A WSGI application for the WSGI cases (wrapped in
    wsgiref.validate.validator by `validated`)."""
    path = environ["PATH_INFO"]
    if path == "/echo":
        n = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(n)
        out = b"%d %s" % (len(body), hashlib.sha256(body).hexdigest().encode())
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(out)))])
        return [out]
    if path == "/environ":
        keys = ["REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING",
                "SERVER_PROTOCOL", "CONTENT_TYPE", "HTTP_X_TEST",
                "wsgi.url_scheme", "HTTP_HOST", "REMOTE_ADDR"]
        out = json.dumps({k: environ.get(k) for k in keys}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [out]
    if path == "/file":
        f = open(environ["QUERY_STRING"].split("=", 1)[1], "rb")
        start_response("200 OK", [("Content-Type",
                                   "application/octet-stream")])
        return environ["wsgi.file_wrapper"](f, 65536)
    if path == "/slow-read":
        # Reads 64 KiB every 50 ms (--threads: the rest waits in the
        # socket).
        left = int(environ.get("CONTENT_LENGTH") or 0)
        total = 0
        while left > 0:
            piece = environ["wsgi.input"].read(min(65536, left))
            if not piece:
                break
            total += len(piece)
            left -= len(piece)
            time.sleep(0.05)
        out = b"%d" % total
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(out)))])
        return [out]
    if path == "/gen":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return (b"piece %d\n" % i for i in range(5))
    if path == "/raise":
        raise ValueError("wsgi raised on purpose")
    if path == "/pid":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"%d" % os.getpid()]
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"no such path"]


def _validated():
    from wsgiref.validate import validator
    return validator(wsgi)


validated = _validated()
