#!/usr/bin/env python3
"""examples/hello.c, the program a newcomer copies, run as its comment
says (`hello PORT`): it prints "listening on PORT", answers GET / with
"Hello, world!" to a real client (urllib), lets tern answer the rest, and
stops cleanly on SIGINT (Ctrl-C) and SIGTERM; a port it cannot listen on
is an error message and exit status 1."""

import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import HOST, Suite, binary, check, eq  # noqa: E402

suite = Suite()
case = suite.case


def start(port=0):
    """hello on `port`: (process, the port it printed)."""
    p = subprocess.Popen([binary("hello"), str(port)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    r, _, _ = select.select([p.stdout], [], [], 10)
    line = p.stdout.readline().decode() if r else ""
    if not line.startswith("listening on "):
        p.kill()
        raise AssertionError("hello printed %r; stderr %r" % (
            line, p.communicate(timeout=5)[1]))
    return p, int(line.split()[2])


def stop(p, sig):
    p.send_signal(sig)
    try:
        return p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()


def fetch(port, path):
    """urllib's GET: (status, body)."""
    url = "http://%s:%d%s" % (HOST, port, path)
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@case
def answers_and_stops_on_sigint():
    p, port = start()
    try:
        eq(fetch(port, "/"), (200, b"Hello, world!\n"), "GET /")
        eq(fetch(port, "/")[1], b"Hello, world!\n", "a second GET /")
        eq(fetch(port, "/nope")[0], 404, "GET /nope")
    finally:
        eq(stop(p, signal.SIGINT), 0, "exit status after SIGINT")


@case
def stops_on_sigterm():
    p, port = start()
    eq(fetch(port, "/")[0], 200, "GET /")
    t0 = time.monotonic()
    eq(stop(p, signal.SIGTERM), 0, "exit status after SIGTERM")
    check(time.monotonic() - t0 < 5, "took %.1f s to stop"
          % (time.monotonic() - t0))


@case
def port_in_use_is_an_error():
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([binary("hello"), str(port)],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=10)
    eq(r.returncode, 1, "exit status")
    eq(r.stdout, b"", "stdout")
    check(r.stderr.startswith(b"hello: "), "stderr: %r" % r.stderr)


if __name__ == "__main__":
    suite.main()
