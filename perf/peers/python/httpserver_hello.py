"""The standard library's http.server (ThreadingHTTPServer, a thread per
connection) speaking HTTP/1.1 with keep-alive: GET / answers "Hello,
World!" text/plain. One process.

    python3 httpserver_hello.py --port 0     (prints "listening on PORT")
"""
import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HELLO = b"Hello, World!"


class Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self):
        if self.path != "/":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "13")
        self.end_headers()
        self.wfile.write(HELLO)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    request_queue_size = 4096
    daemon_threads = True


ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=0)
args = ap.parse_args()
srv = Server(("127.0.0.1", args.port), Hello)
print("listening on %d" % srv.server_address[1], flush=True)
srv.serve_forever()
