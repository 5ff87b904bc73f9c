"""uvicorn (Debian's python3-uvicorn) with a minimal ASGI app: GET /
answers "Hello, World!" text/plain, anything else 404. One process, one
event loop, access log off.

    python3 uvicorn_hello.py --port P
"""
import argparse

import uvicorn

HELLO = b"Hello, World!"
HEAD = {"type": "http.response.start", "status": 200,
        "headers": [(b"content-type", b"text/plain"),
                    (b"content-length", b"13")]}
BODY = {"type": "http.response.body", "body": HELLO}
NOT_FOUND = {"type": "http.response.start", "status": 404,
             "headers": [(b"content-length", b"0")]}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/":
        await send(HEAD)
        await send(BODY)
    else:
        await send(NOT_FOUND)
        await send({"type": "http.response.body", "body": b""})


ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
args = ap.parse_args()
print("listening on %d" % args.port, flush=True)
uvicorn.run(app, host="127.0.0.1", port=args.port, access_log=False,
            log_level="warning", workers=1, backlog=4096)
