"""aiohttp (Debian's python3-aiohttp): GET / answers "Hello, World!"
text/plain. One process, one event loop, no access log.

    python3 aiohttp_hello.py --port P
"""
import argparse

from aiohttp import web


async def hello(request):
    return web.Response(body=b"Hello, World!", content_type="text/plain")


ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
args = ap.parse_args()
app = web.Application()
app.router.add_get("/", hello)
print("listening on %d" % args.port, flush=True)
web.run_app(app, host="127.0.0.1", port=args.port, access_log=None,
            print=None, backlog=4096)
