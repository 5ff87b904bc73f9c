"""uvicorn (Debian's python3-uvicorn) with the ASGI app of every ASGI row
(asgi_peer.py: GET / answers "Hello, World!" text/plain, /ws echoes, /json
is FastAPI's). One process, one event loop (uvloop and httptools when
installed, as uvicorn picks them), access log off.

    python3 uvicorn_hello.py --port P
"""
import argparse

import uvicorn

from asgi_peer import app  # the app every ASGI row serves

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
args = ap.parse_args()
print("listening on %d" % args.port, flush=True)
uvicorn.run(app, host="127.0.0.1", port=args.port, access_log=False,
            log_level="warning", workers=1, backlog=4096)
