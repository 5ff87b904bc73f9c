#!/usr/bin/env python3
"""A fleet: Debian's haproxy 2.6 (mode tcp, send-proxy-v2, retries and
redispatch) in front of two hello --proxy-protocol instances, a load
client making 20,000 keep-alive requests, and one instance drained with
SIGTERM in the middle. Zero requests may fail; both instances must have
served some.

The load client counts a failure for a request without a complete
response, with one exception that every HTTP client makes (RFC 9112,
9.3.1): a request sent on a reused keep-alive connection that the server
closed before a single byte of the answer (tern closing an idle
connection as it drains, while the request was on its way) is sent again
on a new connection; those are counted and reported as retries. A
response that says Connection: close makes the client reconnect."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Conn, Server, Skip, Suite, check, eq

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-fleet-")
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TOTAL = 20000
THREADS = 4
REQ = b"GET / HTTP/1.1\r\nHost: fleet\r\n\r\n"
WANT = b"Hello, World!"


def start_haproxy(ports):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(256)
    cfg = ["global", "  maxconn 500", "defaults", "  mode tcp",
           "  timeout connect 2s", "  timeout client 20s",
           "  timeout server 20s", "  retries 3", "  option redispatch 1",
           "frontend fe", "  bind fd@%d" % s.fileno(), "  default_backend be",
           "backend be", "  balance roundrobin"]
    cfg += ["  server s%d 127.0.0.1:%d send-proxy-v2" % (i, p)
            for i, p in enumerate(ports)]
    path = os.path.join(tmp, "haproxy.cfg")
    with open(path, "w") as f:
        f.write("\n".join(cfg) + "\n")
    log = open(os.path.join(tmp, "haproxy.log"), "w+")
    p = subprocess.Popen([HAPROXY, "-db", "-f", path], pass_fds=[s.fileno()],
                         stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT)
    port = s.getsockname()[1]
    s.close()
    return p, port


class Load:
    def __init__(self, port):
        self.port = port
        self.lock = threading.Lock()
        self.left = TOTAL
        self.done = self.failed = self.retried = self.reconnects = 0
        self.errors = []

    def take(self):
        with self.lock:
            if self.left == 0:
                return False
            self.left -= 1
            return True

    def one(self, sock, buf):
        """One request on sock: (complete, bytes of the answer seen,
        close asked, the rest of the buffer)."""
        sock.sendall(REQ)
        seen = 0
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = buf[:end].lower()
                n = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
                if len(buf) >= end + 4 + n:
                    body = buf[end + 4:end + 4 + n]
                    if not head.startswith(b"http/1.1 200") or body != WANT:
                        raise AssertionError("bad answer %r" % buf[:200])
                    return True, seen, b"connection: close" in head, \
                        buf[end + 4 + n:]
            try:
                got = sock.recv(65536)
            except OSError:
                got = b""
            if not got:
                return False, seen + len(buf), False, b""
            seen += len(got)
            buf += got

    def run(self):
        sock, fresh, buf = None, True, b""
        while self.take():
            while True:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", self.port),
                                                    timeout=10)
                    fresh, buf = True, b""
                    with self.lock:
                        self.reconnects += 1
                try:
                    ok, seen, close, buf = self.one(sock, buf)
                except OSError as e:
                    ok, seen, close = False, 0, False
                    if fresh:
                        self.errors.append(repr(e))
                if ok:
                    with self.lock:
                        self.done += 1
                    fresh = False
                    if close:
                        sock.close()
                        sock = None
                    break
                sock.close()
                sock = None
                if not fresh and seen == 0:
                    with self.lock:
                        self.retried += 1
                    continue  # the keep-alive race: send it again
                with self.lock:
                    self.failed += 1
                    if len(self.errors) < 5:
                        self.errors.append("no complete answer (%d bytes)"
                                           % seen)
                break
        if sock is not None:
            sock.close()


def served(srv):
    """Requests an instance counted (hello's /stats, through a header)."""
    with Conn(srv.port) as c:
        c.send(b"PROXY TCP4 127.0.0.1 127.0.0.1 1 2\r\n")
        r = c.request("GET", "/stats")
        eq(r.status, 200, "/stats")
        return json.loads(r.body)["requests"]


@case(timeout=90)
def drain_under_load():
    if not os.path.exists(HAPROXY):
        raise Skip("no haproxy (test/deps.sh installs it)")
    a = Server("hello", ["--workers", "1", "--proxy-protocol"])
    b = Server("hello", ["--workers", "1", "--proxy-protocol"])
    for s in (a, b):
        s.check_alive = (lambda s=s: check(s.alive() or s.returncode == 0,
                                           "hello died"))
    hap, port = start_haproxy([a.port, b.port])
    try:
        time.sleep(0.3)
        check(hap.poll() is None, "haproxy exited")
        load = Load(port)
        threads = [threading.Thread(target=load.run) for _ in range(THREADS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while load.done < TOTAL * 2 // 5 and any(t.is_alive()
                                                 for t in threads):
            time.sleep(0.01)
        a_served = served(a) - 1
        a.signal()  # SIGTERM: drain
        eq(a.wait(15), 0, "the drained instance's exit status")
        drained_at = load.done
        for t in threads:
            t.join(60)
        took = time.monotonic() - t0
        b_served = served(b) - 1
        suite.note("%d requests in %.1f s, drain at %d; %d retried on a "
                   "closed keep-alive connection, %d connections; "
                   "instance a served >= %d, b %d"
                   % (load.done, took, drained_at, load.retried,
                      load.reconnects, a_served, b_served))
        eq(load.failed, 0, "failed requests (%s)" % load.errors[:5])
        eq(load.done, TOTAL, "requests answered")
        check(a_served > 0 and b_served > 0, "both instances served")
        check(drained_at < TOTAL, "the drain came in the middle")
    finally:
        hap.terminate()
        hap.wait(5)
        b.stop()
        a.kill()


def teardown():
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(None, teardown)
