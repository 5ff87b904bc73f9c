#!/usr/bin/env python3
"""The README's demo command, examples/demo.sh, as a user runs it: it serves
the reference server and the chat room on the ports it prints, and a SIGINT or
SIGTERM sent to the script's own PID (a supervisor, `kill PID`) stops both
servers gracefully and ends the script."""

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (BUILD, HELLO_BODY, REPO, Skip, Suite, check, connect, eq,
                     get, sanitized)

suite = Suite()
case = suite.case


def start_demo():
    # The demo builds and runs the normal build in build/; the sanitizer
    # build has nothing of its own to show here.
    if sanitized() or os.path.realpath(BUILD) != os.path.realpath(
            os.path.join(REPO, "build")):
        raise Skip("the demo runs the normal build in build/")
    proc = subprocess.Popen(
        ["bash", "examples/demo.sh", "--port", "0", "--tls-port", "0"],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True)
    ports, out = {}, b""
    deadline = time.monotonic() + 60
    want = ("reference", "reference-tls", "reference-quic", "chat", "chat-tls",
            "chat-quic")
    while not all(k in ports for k in want):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("demo did not print its ports: %r" % out)
        r, _, _ = select.select([proc.stdout], [], [], left)
        if r:
            chunk = os.read(proc.stdout.fileno(), 4096)
            out += chunk
        for m in re.finditer(rb"^(chat: )?(tls |quic )?listening on (\d+)$",
                             out, re.M):
            key = ("chat" if m.group(1) else "reference") + (
                "-" + m.group(2).decode().strip() if m.group(2) else "")
            ports[key] = int(m.group(3))
    return proc, ports


def h3_get(port, body=HELLO_BODY):
    """GET / over HTTP/3 with Debian's gtlsclient: the demo serves every
    protocol. `body`: the page expected, or None for any non-empty one."""
    if shutil.which("gtlsclient") is None:
        return  # test/deps.sh installs it; test_h3 says so when missing
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(
            ["gtlsclient", "-q", "--exit-on-all-streams-close",
             "--download=" + d, "127.0.0.1", str(port),
             "https://localhost:%d/" % port],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, timeout=20)
        eq(p.returncode, 0, "gtlsclient's exit status: %r" % p.stderr[-300:])
        with open(os.path.join(d, "index.html"), "rb") as f:
            got = f.read()
        if body is None:
            check(len(got) > 0, "an empty page over HTTP/3 on %d" % port)
        else:
            eq(got, body, "the body over HTTP/3")


def stops_on(sig):
    proc, ports = start_demo()
    try:
        r = get(ports["reference"], "/")
        eq(r.body, HELLO_BODY, "reference's body")
        r = get(ports["chat"], "/")
        eq(r.status, 200, "the chat page")
        # The page from examples/static and its assets (tern_static).
        for path, ctype in [("/static/", "text/html; charset=utf-8"),
                            ("/static/style.css", "text/css; charset=utf-8"),
                            ("/static/app.js",
                             "text/javascript; charset=utf-8"),
                            ("/static/logo.svg", "image/svg+xml")]:
            r = get(ports["reference"], path)
            eq((r.status, r.headers.get("content-type")), (200, ctype),
               "GET " + path)
            with open(os.path.join(REPO, "examples", "static",
                                   path[8:] or "index.html"), "rb") as f:
                eq(r.body, f.read(), "the body of " + path)
        h3_get(ports["reference-quic"])
        h3_get(ports["chat-quic"], body=None)  # the chat page
        os.kill(proc.pid, sig)  # the script alone, not its process group
        try:
            rc = proc.wait(15)
        except subprocess.TimeoutExpired:
            raise AssertionError("demo.sh still runs 15 s after signal %d"
                                 % sig)
        eq(rc, 0, "demo.sh's exit status")
        for name, port in ports.items():
            if name.endswith("-quic"):
                continue  # UDP: nothing to connect to
            try:
                connect(port, timeout=1).close()
                refused = False
            except OSError:
                refused = True
            check(refused, "%s still accepts on %d after the demo ended"
                  % (name, port))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@case(timeout=90)
def sigterm_to_script_stops_all():
    stops_on(signal.SIGTERM)


@case(timeout=90)
def sigint_to_script_stops_all():
    stops_on(signal.SIGINT)


if __name__ == "__main__":
    suite.main()
