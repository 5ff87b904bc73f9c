"""Redis for the db-* scenarios: Debian's redis-server, started for one
(round, scenario) in a temporary directory, listening on a Unix socket
(and on a TCP port for db-slow, whose servers reach it through the
delaying relay), loaded with the keys the scenarios ask for, pinned to
the server's CPU (its CPU time is counted with the server's), stopped
after."""

import os
import shutil
import socket
import tempfile
import time

from . import common
from .common import BenchError

KEY = "k1"
# 64 bytes: a small cached record
VALUE = b"value-of-k1:" + b"r" * 52


def _resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Redis:
    def __init__(self, workdir, cpu, tcp=False):
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.access(exe, os.X_OK):
            raise BenchError("redis-server not installed (perf/perf setup)")
        self.dir = tempfile.mkdtemp(prefix="redis.", dir=workdir)
        self.path = os.path.join(self.dir, "redis.sock")
        self.tcp_port = common.free_port() if tcp else None
        argv = ([] if cpu is None else ["taskset", "-c", str(cpu)]) + [
            exe, "--port", str(self.tcp_port or 0), "--bind", "127.0.0.1",
            "--unixsocket", self.path, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", self.dir,
            "--loglevel", "warning", "--maxclients", "10000"]
        self.argv = argv
        with open(os.path.join(self.dir, "redis.out"), "wb") as out:
            self.proc = common.spawn(argv, stdout=out, cwd=self.dir)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.command("PING") == b"+PONG\r\n":
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise BenchError("redis-server did not start")
            time.sleep(0.02)
        if self.command("SET", KEY, VALUE) != b"+OK\r\n":
            self.stop()
            raise BenchError("redis-server refused SET")

    def command(self, *args):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.path)
            s.sendall(_resp(*args))
            return s.recv(65536)

    @property
    def pid(self):
        """redis-server's pid (under taskset, which execs it)."""
        return self.proc.pid

    def stop(self):
        common.stop_proc(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)
