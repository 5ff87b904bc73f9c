#!/usr/bin/env python3
"""The reference server on Unix domain sockets (--unix, tern_listen_with's
path): HTTP/1.1 and h2c (prior knowledge and Upgrade) from curl over a socket
file and an abstract name, raw keep-alive requests, the file removed at the
end, and a second server on the same path refused."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Conn, Server, Suite, check, eq

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-unix-")


def start(path):
    s = Server("reference", ["--workers", "2", "--unix", path])
    eq(s.next_line(), "unix listening on " + path, "unix line")
    return s


def curl(*args):
    out = subprocess.run(["curl", "-sS", "-w", " %{http_version}"] +
                         list(args), capture_output=True, text=True,
                         timeout=10)
    eq(out.returncode, 0, "curl exit: " + out.stderr)
    return out.stdout


@case
def socket_file():
    path = os.path.join(tmp, "h.sock")
    with start(path) as s:
        eq(curl("--unix-socket", path, "http://x/"), "Hello, World! 1.1",
           "HTTP/1.1")
        eq(curl("--unix-socket", path, "--http2-prior-knowledge",
                "http://x/"), "Hello, World! 2", "h2c, prior knowledge")
        eq(curl("--unix-socket", path, "--http2", "http://x/"),
           "Hello, World! 2", "h2c, Upgrade")
        # No IP peer on a Unix socket.
        check(curl("--unix-socket", path, "http://x/peer").endswith(" 0 1.1"),
              "peer of a Unix client")
        # Keep-alive and pipelining over the raw socket, both workers.
        for _ in range(4):
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            u.connect(path)
            with Conn(sock=u) as c:
                for _ in range(3):
                    r = c.request("GET", "/")
                    eq((r.status, r.body), (200, b"Hello, World!"), "answer")
        # A second server on the same path is refused, the first goes on.
        r = subprocess.run(s.cmd[:1] + ["--port", "0", "--unix", path],
                           capture_output=True, text=True, timeout=10)
        check(r.returncode != 0 and "in use" in r.stderr.lower(),
              "second server: %d %r" % (r.returncode, r.stderr))
        eq(curl("--unix-socket", path, "http://x/"), "Hello, World! 1.1",
           "the first still serves")
    check(not os.path.exists(path), "the socket file stays after the stop")


@case
def abstract_name():
    name = "tern-test-%d" % os.getpid()
    with start("@" + name):
        eq(curl("--abstract-unix-socket", name, "http://x/"),
           "Hello, World! 1.1", "HTTP/1.1")
        eq(curl("--abstract-unix-socket", name, "--http2-prior-knowledge",
                "http://x/"), "Hello, World! 2", "h2c")


@case
def bad_paths():
    s = start(os.path.join(tmp, "ok.sock"))
    binary = s.cmd[0]
    s.stop()
    for path in ["x" * 108, os.path.join(tmp, "no", "such", "dir.sock"), "@"]:
        r = subprocess.run([binary, "--port", "0", "--unix", path],
                           capture_output=True, text=True, timeout=10)
        check(r.returncode != 0, "served on %r" % path)


def teardown():
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(None, teardown)
