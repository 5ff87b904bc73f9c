"""tern's Python binding as a benchmark server (perf/perf: tern-python).

    TERN_LIBRARY=build/libtern.so python3 tern_hello.py --port 0
        [--tls-port 0 --cert C --key K] [--workers 1]

GET / answers "Hello, World!" (text/plain) from a Python handler; GET
/stats tern's counters as JSON, as hello's /stats does, so that the
driver reads tern's own allocations per request beside the shim's (which
count Python's too). Prints "listening on PORT" and "tls listening on
PORT".
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "bindings", "python"))
import tern  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=8080)
ap.add_argument("--tls-port", type=int)
ap.add_argument("--cert")
ap.add_argument("--key")
ap.add_argument("--workers", type=int, default=1)
ap.add_argument("--max-conns", type=int)
args = ap.parse_args()

settings = {}
if args.max_conns:
    settings["max_connections"] = args.max_conns
app = tern.Server(workers=args.workers, **settings)
TEXT = {"content-type": "text/plain"}
HELLO = b"Hello, World!"


@app.route("GET", "/")
def hello(req):
    return 200, TEXT, HELLO


@app.route("GET", "/stats")
def stats(req):
    return 200, {"content-type": "application/json"}, json.dumps(app.stats())


print("listening on %d" % app.listen("127.0.0.1", args.port), flush=True)
if args.tls_port is not None:
    port = app.listen("127.0.0.1", args.tls_port,
                      tls=app.tls(args.cert, args.key))
    print("tls listening on %d" % port, flush=True)
app.run()
