"""The smallest tern program in Python (README.md, "Python").

    TERN_LIBRARY=build/libtern.so python3 examples/python/hello.py [PORT]

GET /users/:id answers from the handler, POST /echo sends the body back,
GET /later answers from another thread. Ctrl-C stops gracefully. Prints
"listening on PORT" (PORT 0: any free port).
"""
import sys
import threading

import tern

app = tern.Server(workers=1)


@app.route("GET", "/users/:id")
def user(req):
    return 200, {"content-type": "text/plain"}, "user %s" % req.params["id"]


@app.route("POST", "/echo")
def echo(req):
    return 200, {"content-type": "application/octet-stream"}, req.body


@app.route("GET", "/later")
def later(req):
    def answer():
        req.respond(200, {"content-type": "text/plain"}, "later\n")
    threading.Timer(0.01, answer).start()


port = app.listen("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8080)
print("listening on %d" % port, flush=True)
app.run()
