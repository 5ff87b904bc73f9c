#!/usr/bin/env python3
"""A fleet: Debian's haproxy 2.6 (mode tcp, send-proxy-v2, retries and
redispatch) in front of two reference --proxy-protocol instances, a load
client making 20,000 keep-alive requests, and one instance drained with
SIGTERM in the middle. Zero requests may fail; both instances must have
served some. Before the load, TLS through haproxy (terminated by tern)
resumes one session on both instances (the same --ticket-key).

The load client counts a failure for a request without a complete
response, with one exception that every HTTP client makes (RFC 9112,
9.3.1): a request sent on a reused keep-alive connection that the server
closed before a single byte of the answer (tern closing an idle
connection as it drains, while the request was on its way) is sent again
on a new connection; those are counted and reported as retries. A
response that says Connection: close makes the client reconnect."""

import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import self_signed  # noqa: E402
from harness import Conn, Server, Skip, Suite, check, eq

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-fleet-")
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TOTAL = 20000
THREADS = 4
REQ = b"GET / HTTP/1.1\r\nHost: fleet\r\n\r\n"
WANT = b"Hello, World!"


def start_haproxy(ports, tls_ports):
    """haproxy: a plain frontend and a TLS one (passed through to tern,
    which terminates TLS), both round robin over the instances."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(256)
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    t.listen(64)
    cfg = ["global", "  maxconn 500", "defaults", "  mode tcp",
           "  timeout connect 2s", "  timeout client 20s",
           "  timeout server 20s", "  retries 3", "  option redispatch 1"]
    for name, sock, backs in [("plain", s, ports), ("tls", t, tls_ports)]:
        cfg += ["frontend fe_" + name, "  bind fd@%d" % sock.fileno(),
                "  default_backend be_" + name, "backend be_" + name,
                "  balance roundrobin"]
        cfg += ["  server s%d 127.0.0.1:%d send-proxy-v2" % (i, p)
                for i, p in enumerate(backs)]
    path = os.path.join(tmp, "haproxy.cfg")
    with open(path, "w") as f:
        f.write("\n".join(cfg) + "\n")
    log = open(os.path.join(tmp, "haproxy.log"), "w+")
    p = subprocess.Popen([HAPROXY, "-db", "-f", path],
                         pass_fds=[s.fileno(), t.fileno()],
                         stdin=subprocess.DEVNULL, stdout=log,
                         stderr=subprocess.STDOUT)
    port, tls_port = s.getsockname()[1], t.getsockname()[1]
    s.close()
    t.close()
    return p, port, tls_port


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
    """Requests an instance counted (the reference server's /stats, through a
    header)."""
    with Conn(srv.port) as c:
        c.send(b"PROXY TCP4 127.0.0.1 127.0.0.1 1 2\r\n")
        r = c.request("GET", "/stats")
        eq(r.status, 200, "/stats")
        return json.loads(r.body)["requests"]


def make_cert():
    return self_signed(tmp, "f")


def instance(cert, key, ticket_key):
    s = Server("reference", ["--workers", "1", "--proxy-protocol",
                             "--tls-port", "0", "--cert", cert, "--key", key,
                             "--ticket-key", ticket_key])
    s.tls_port = int(re.match(r"tls listening on (\d+)$",
                              s.next_line()).group(1))
    s.check_alive = (lambda: check(s.alive() or s.returncode == 0,
                                   "reference died"))
    return s


def tls_get(port, ctx, session=None):
    """GET /peer over TLS through haproxy: (session, resumed, body, the
    client's local port)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, session=session) as s:
            lport = s.getsockname()[1]
            s.sendall(b"GET /peer HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: close\r\n\r\n")
            data = b""
            while True:
                got = s.recv(65536)
                if not got:
                    break
                data += got
            return (s.session, s.session_reused,
                    data.split(b"\r\n\r\n", 1)[1].decode(), lport)


@case(timeout=90)
def drain_under_load():
    if not os.path.exists(HAPROXY):
        raise Skip("no haproxy (test/deps.sh installs it)")
    cert, key = make_cert()
    ticket_key = os.urandom(64).hex()
    a = instance(cert, key, ticket_key)
    b = instance(cert, key, ticket_key)
    hap, port, tls_port = start_haproxy([a.port, b.port],
                                        [a.tls_port, b.tls_port])
    try:
        time.sleep(0.3)
        check(hap.poll() is None, "haproxy exited")
        # TLS through haproxy, terminated by tern: round robin alternates
        # the instances, and every connection after the first resumes
        # the first one's session, whichever instance it reaches; the
        # peer is the client's (PROXY v2).
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        before = (served(a), served(b))
        sess, reused, body, lport = tls_get(tls_port, ctx)
        eq((reused, body), (False, "127.0.0.1 %d" % lport), "first")
        for _ in range(4):
            _, reused, body, lport = tls_get(tls_port, ctx, sess)
            eq((reused, body), (True, "127.0.0.1 %d" % lport), "resumed")
        after = (served(a), served(b))
        check(after[0] - before[0] >= 3 and after[1] - before[1] >= 3,
              "TLS requests per instance: %r -> %r" % (before, after))
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


@case(timeout=40)
def drain_behind_haproxy_http_mode():
    """The same drain with haproxy as an HTTP proxy (mode http, health
    checks that send the PROXY header, retry-on): h2load sends 20,000
    requests through it while one instance gets SIGTERM; every one is
    answered 200 (h2load counts no failure and retries nothing itself),
    the two access logs hold them all, each with the client's address as
    haproxy saw it (::1, while haproxy reaches tern over IPv4: only the
    header can say so), and the drained instance exits 0."""
    if not os.path.exists(HAPROXY) or shutil.which("h2load") is None:
        raise Skip("no haproxy or h2load")
    logs = [os.path.join(tmp, "http%d.log" % i) for i in range(2)]
    a, b = [Server("reference", ["--workers", "1", "--proxy-protocol",
                                 "--access-log", log]) for log in logs]
    hp = load = None
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        front = probe.getsockname()[1]
        probe.close()
        cfg = os.path.join(tmp, "http.cfg")
        with open(cfg, "w") as f:
            f.write("global\n  maxconn 200\n"
                    "defaults\n  mode http\n  timeout connect 2s\n"
                    "  timeout client 10s\n  timeout server 10s\n"
                    "  retries 3\n  option redispatch\n"
                    "  retry-on conn-failure empty-response response-timeout\n"
                    "frontend fe\n  bind [::1]:%d\n  default_backend be\n"
                    "backend be\n  balance roundrobin\n"
                    "  option httpchk GET /\n"
                    "  server a 127.0.0.1:%d send-proxy-v2 check "
                    "check-send-proxy inter 200ms\n"
                    "  server b 127.0.0.1:%d send-proxy-v2 check "
                    "check-send-proxy inter 200ms\n" % (front, a.port, b.port))
        hp = subprocess.Popen([HAPROXY, "-db", "-f", cfg],
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("::1", front), 1).close()
                break
            except OSError:
                check(time.monotonic() < deadline and hp.poll() is None,
                      "haproxy did not start")
                time.sleep(0.05)
        # h2load writes an IPv6 URL's Host without brackets, which tern
        # answers 400: the authority is named outright.
        load = subprocess.Popen(
            ["h2load", "--h1", "-n", str(TOTAL), "-c", "8", "-T", "10",
             "-H", ":authority: localhost", "http://[::1]:%d/" % front],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        check(load.poll() is None, "the load ended before the drain")
        a.signal()
        eq(a.wait(10), 0, "drained instance's exit status")
        out = load.communicate(timeout=30)[0].decode()
        check("%d succeeded, 0 failed, 0 errored" % TOTAL in out and
              "status codes: %d 2xx" % TOTAL in out, "h2load: %s" % out[-800:])
        eq(b.stop(), 0, "the other instance's exit status")  # flushes its log
        n, peers = [], set()
        for path in logs:
            with open(path) as f:
                es = [json.loads(x) for x in f.read().splitlines()]
            es = [e for e in es
                  if (e.get("user_agent") or "").startswith("h2load")]
            n.append(len(es))
            peers |= {e["peer"] for e in es}
        eq(sum(n), TOTAL, "requests logged (%r)" % n)
        check(n[0] > 0 and n[1] > n[0], "split %r: a drained early" % n)
        eq(peers, {"::1"}, "peers")
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        if hp is not None:
            hp.terminate()
            hp.wait(5)
        for s in (a, b):
            if s.alive():
                s.kill()


def teardown():
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(None, teardown)
