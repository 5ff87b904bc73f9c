"""The ASGI application every ASGI server of perf/'s Python rows serves
(tern-asgi, uvicorn, hypercorn, daphne): GET / answers "Hello, World!"
text/plain (raw ASGI, h1-get and h2-get), /ws echoes each WebSocket
message (ws-echo), and GET /json is a FastAPI endpoint returning a list
of 20 items (py-json), the framework's work on top of the server's.

Every HTTP request is read to its end (receive() until more_body is
False) before the answer, as an ASGI app should, on every server alike.
hypercorn 0.13 (h11) reuses a keep-alive connection only when h11 has
consumed the request's end by the time the app's answer completes
(H11Protocol._maybe_recycle wants their_state DONE); an app that answers
without receive() finishes first, h11's side is still SEND_BODY, and
hypercorn closes the connection after each answer (docs/performance.md,
"Python app servers")."""
HELLO = b"Hello, World!"
HEAD = {"type": "http.response.start", "status": 200,
        "headers": [(b"content-type", b"text/plain"),
                    (b"content-length", b"13")]}
BODY = {"type": "http.response.body", "body": HELLO}
NOT_FOUND = {"type": "http.response.start", "status": 404,
             "headers": [(b"content-length", b"0")]}
EMPTY = {"type": "http.response.body", "body": b""}

try:
    from fastapi import FastAPI

    api = FastAPI()
    ITEMS = [{"id": i, "name": "item %d" % i, "price": i * 1.25,
              "tags": ["a", "b"]} for i in range(20)]

    @api.get("/json")
    async def items():
        return ITEMS
except ImportError:  # python3-fastapi missing: py-json is then invalid
    api = None


async def read_body(receive):
    """The request's body, read to its end; None on http.disconnect."""
    body = b""
    while True:
        m = await receive()
        if m["type"] != "http.request":
            return None
        body += m.get("body", b"")
        if not m.get("more_body", False):
            return body


async def app(scope, receive, send):
    t = scope["type"]
    if t == "http":
        body = await read_body(receive)
        if body is None:
            return
        path = scope["path"]
        if path == "/":
            await send(HEAD)
            await send(BODY)
        elif path == "/json" and api is not None:
            sent = False

            async def replay():  # the body read above, then the server's
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": body,
                        "more_body": False}
            await api(scope, replay, send)
        else:
            await send(NOT_FOUND)
            await send(EMPTY)
    elif t == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while True:
            m = await receive()
            if m["type"] == "websocket.disconnect":
                return
            if m.get("text") is not None:
                await send({"type": "websocket.send", "text": m["text"]})
            else:
                await send({"type": "websocket.send", "bytes": m["bytes"]})
    elif t == "lifespan":
        while True:
            m = await receive()
            await send({"type": m["type"] + ".complete"})
            if m["type"] == "lifespan.shutdown":
                return
