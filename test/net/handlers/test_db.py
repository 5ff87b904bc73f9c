#!/usr/bin/env python3
"""The reference server's database routes against a real redis-server
(Debian's), started here on a Unix socket in a temporary directory: GET
/db/:key (one Redis GET on the worker's loop through hiredis's libuv adapter)
and GET /db-blocking/:key (the same on the blocking lane, synchronous hiredis).
Values and misses on both lanes, many clients at once, clients that leave while
their query is in flight (Redis held busy by DEBUG SLEEP), a stop while queries
are in flight, and Redis going away. Skipped where redis-server or hiredis (the
reference server answers 501) is missing."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Conn, Server, Skip, Suite, check, connect, eq, get  # noqa

suite = Suite()
case = suite.case

KEYS = {("k%d" % i): ("value-%d-" % i + "x" * (i * 37)).encode()
        for i in range(20)}
KEYS["big"] = b"B" * 20000


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Redis:
    """redis-server on a Unix socket in a temporary directory."""

    def __init__(self):
        exe = shutil.which("redis-server") or (
            "/usr/bin/redis-server"
            if os.access("/usr/bin/redis-server", os.X_OK) else None)
        if exe is None:
            raise Skip("redis-server not installed")
        self.dir = tempfile.mkdtemp(prefix="tern-redis-")
        self.path = os.path.join(self.dir, "redis.sock")
        self.proc = subprocess.Popen(
            [exe, "--port", "0", "--unixsocket", self.path,
             "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--loglevel", "warning",
             "--enable-debug-command", "local"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if self.command("PING") == b"+PONG\r\n":
                    return
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise AssertionError("redis-server did not start")

    def command(self, *args, timeout=5.0):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(self.path)
            s.sendall(resp(*args))
            return s.recv(65536)

    def send_only(self, *args):
        """Send a command and leave its connection open (DEBUG SLEEP)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        s.sendall(resp(*args))
        return s

    def load(self):
        for k, v in KEYS.items():
            eq(self.command("SET", k, v), b"+OK\r\n", "SET " + k)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def with_db(fn):
    """Run fn(redis, the reference server) with Redis loaded and the reference
    server on it."""
    def run():
        redis = Redis()
        try:
            redis.load()
            srv = Server("reference", ["--workers", "2", "--redis",
                                       redis.path])
            try:
                r = get(srv.port, "/db/k1")
                if r.status == 501:
                    raise Skip("reference built without hiredis")
                fn(redis, srv)
            finally:
                if srv.returncode is None:
                    eq(srv.stop(), 0, "reference's exit status")
        finally:
            redis.stop()
    run.__name__ = fn.__name__
    return run


@case(timeout=30)
@with_db
def values_on_both_lanes(redis, srv):
    with Conn(srv.port) as c:
        for lane in ("/db/", "/db-blocking/"):
            for k, v in KEYS.items():
                r = c.request("GET", lane + k)
                eq(r.status, 200, lane + k)
                eq(r.body, v, lane + k)
            r = c.request("GET", lane + "missing")
            eq(r.status, 404, lane + "missing")


@case(timeout=30)
@with_db
def many_clients_at_once(redis, srv):
    errors = []

    def client(n):
        try:
            with Conn(srv.port) as c:
                for i in range(20):
                    k = "k%d" % ((n + i) % 20)
                    lane = "/db/" if (n + i) % 2 else "/db-blocking/"
                    r = c.request("GET", lane + k)
                    if r.status != 200 or r.body != KEYS[k]:
                        errors.append((lane + k, r.status))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    ts = [threading.Thread(target=client, args=(n,)) for n in range(32)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    eq(errors, [], "errors")


@case(timeout=30)
@with_db
def client_leaves_while_query_in_flight(redis, srv):
    """Redis sleeps 300 ms (DEBUG SLEEP holds the whole server), clients ask
    and leave at once; the late answers are dropped, the server stays well (the
    reference server checks itself after each case), and its queries are not
    left behind: the next ones are answered."""
    busy = redis.send_only("DEBUG", "SLEEP", "0.3")
    time.sleep(0.05)  # Redis is asleep now
    for lane in ("/db/", "/db-blocking/"):
        for i in range(10):
            s = connect(srv.port)
            s.sendall(b"GET %sk%d HTTP/1.1\r\nHost: x\r\n\r\n"
                      % (lane.encode(), i))
            s.close()
    busy.settimeout(5)
    eq(busy.recv(100), b"+OK\r\n", "DEBUG SLEEP")
    busy.close()
    for lane in ("/db/", "/db-blocking/"):
        r = get(srv.port, lane + "k3")
        eq((r.status, r.body), (200, KEYS["k3"]), lane + "k3")


@case(timeout=30)
@with_db
def stop_with_queries_in_flight(redis, srv):
    """A graceful stop while queries wait on a sleeping Redis: they are
    answered, then the per-worker connections close (on_stop) and the reference
    server exits 0, not held by a handle left on its loops."""
    results = []
    busy = redis.send_only("DEBUG", "SLEEP", "0.3")
    time.sleep(0.05)

    def client():
        try:
            results.append(get(srv.port, "/db/k2").body)
        except Exception as e:  # noqa: BLE001
            results.append(repr(e))

    ts = [threading.Thread(target=client) for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.1)
    srv.signal(signal.SIGTERM)
    for t in ts:
        t.join(10)
    busy.close()
    eq(results, [KEYS["k2"]] * 4, "answers")
    eq(srv.wait(10), 0, "reference's exit status")


@case(timeout=30)
@with_db
def redis_gone(redis, srv):
    """Redis stops: both lanes answer 502 at once, never hang, and the
    reference server still stops cleanly."""
    redis.proc.terminate()
    redis.proc.wait(5)
    for lane in ("/db/", "/db-blocking/"):
        for _ in range(3):
            eq(get(srv.port, lane + "k1").status, 502, lane)
    eq(srv.stop(), 0, "reference's exit status")


if __name__ == "__main__":
    suite.main()
