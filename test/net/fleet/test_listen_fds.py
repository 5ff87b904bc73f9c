#!/usr/bin/env python3
"""Socket activation: a parent (this test, as systemd would) binds a TCP socket
and a Unix socket, then starts reference --listen-fds through bash that sets
LISTEN_PID to its own pid and execs the reference server (so the pid is the
reference server's), the sockets as descriptors 3 and 4 (LISTEN_FDS=2). The
reference server must serve on both; a LISTEN_PID of another process is
ignored; a UDP socket is refused without certificates (the reference server
serves HTTP/3 on it with --tls-port: test_quic_fleet.py)."""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Conn, Skip, Suite, binary, check, eq

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-fds-")
SHELL = 'LISTEN_PID=$$ LISTEN_FDS=%d exec "$@" %s'


def spawn(socks, pid_ok=True):
    """The reference server with socks as fds 3, 4, ... through bash."""
    # Through high numbers first, so that no target is a later source.
    redir = " ".join("%d<&%d %d<&-" % (40 + i, s.fileno(), s.fileno())
                     for i, s in enumerate(socks))
    redir += " " + " ".join("%d<&%d %d<&-" % (3 + i, 40 + i, 40 + i)
                            for i in range(len(socks)))
    script = SHELL % (len(socks), redir)
    if not pid_ok:
        script = script.replace("LISTEN_PID=$$", "LISTEN_PID=1")
    return subprocess.Popen(
        ["bash", "-c", script, "bash", binary("reference"), "--port", "0",
         "--workers", "2", "--listen-fds"],
        pass_fds=[s.fileno() for s in socks], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def first_line(p):
    """The reference server's own listener; served once the reference server is
    fully up."""
    m = re.match(r"listening on (\d+)$", p.stdout.readline().strip())
    check(m, "first line")
    return int(m.group(1))


def stop(p, port):
    with Conn(port) as c:  # up, signal handlers in place
        eq(c.request("GET", "/").status, 200, "reference's own port")
    p.terminate()
    eq(p.wait(10), 0, "reference exit status")


@case
def tcp_and_unix_handed_over():
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    t.listen(16)
    tport = t.getsockname()[1]
    path = os.path.join(tmp, "a.sock")
    u = socket.socket(socket.AF_UNIX)
    u.bind(path)
    u.listen(16)
    p = spawn([t, u])
    t.close()
    u.close()
    port = None
    try:
        port = first_line(p)
        eq(p.stdout.readline().strip(), "fd 3 listening on %d" % tport,
           "the TCP socket")
        eq(p.stdout.readline().strip(), "fd 4 listening on 0",
           "the Unix socket")
        for _ in range(3):
            with Conn(tport) as c:
                r = c.request("GET", "/")
                eq((r.status, r.body), (200, b"Hello, World!"), "over TCP")
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            with Conn(sock=s) as c:
                r = c.request("GET", "/")
                eq((r.status, r.body), (200, b"Hello, World!"), "over Unix")
    finally:
        if port is None:
            p.kill()
        stop(p, port)


@case
def another_pid_ignored():
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    t.listen(16)
    p = spawn([t], pid_ok=False)
    t.close()
    stop(p, first_line(p))
    eq(p.stdout.read().strip(), "", "no fd line for another process's fds")


@case
def udp_refused():
    d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    d.bind(("127.0.0.1", 0))
    p = spawn([d])
    d.close()
    out, err = p.communicate(timeout=10)
    check(p.returncode != 0, "a UDP socket was taken without certificates")
    # HTTP/3 needs the certificates (test_quic_fleet.py serves it).
    check("fd 3: a UDP socket serves HTTP/3" in err, err)


def served(port):
    """Requests a server answered, from its /metrics on its own port."""
    with Conn(port) as c:
        body = c.request("GET", "/metrics").body.decode()
    return sum(float(v) for k, v in re.findall(
        r"^(tern_requests_total\{[^}]*\}) (\S+)$", body, re.M))


@case(timeout=90)
def replaced_under_load_loses_nothing():
    """A process replaced under h2load's HTTP/1.1 load: the socket is
    handed to a second instance (as systemd's socket activation or a
    supervisor does), then the first is stopped gracefully. Nothing
    queued is lost (the socket stays open in the new process), and the
    old one's keep-alive connections are not closed under a request the
    client just sent: each idle one gets a short grace, and the request
    that arrives in it is answered with Connection: close, on which h2load
    reconnects (to whichever process accepts). Every request succeeds.
    (h2load reconnects only on HTTP/1.1's Connection: close, not after an
    HTTP/2 GOAWAY, so the load is HTTP/1.1.)"""
    h2load = shutil.which("h2load")
    if h2load is None:
        raise Skip("no h2load")
    t = socket.socket()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind(("127.0.0.1", 0))
    t.listen(1024)
    tport = t.getsockname()[1]
    old = spawn([t])
    new = None
    try:
        old_port = first_line(old)
        eq(old.stdout.readline().strip(), "fd 3 listening on %d" % tport,
           "the old instance's socket")
        load = subprocess.Popen(
            [h2load, "--h1", "-c", "16", "-n", "400000",
             "http://127.0.0.1:%d/" % tport],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        new = spawn([t])
        new_port = first_line(new)
        eq(new.stdout.readline().strip(), "fd 3 listening on %d" % tport,
           "the new instance's socket")
        before = served(old_port)
        old.terminate()
        eq(old.wait(20), 0, "the old instance's exit status")
        out, _ = load.communicate(timeout=60)
        m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                      r"(\d+) succeeded, (\d+) failed, (\d+) errored", out)
        check(m, "h2load's summary: %r" % out[-600:])
        total, _, done, ok, failed, errored = map(int, m.groups())
        eq((done, ok, failed, errored), (total, total, 0, 0),
           "every request answered")
        after = served(new_port) - 1  # this scrape's own
        check(before > 0 and after > 0,
              "both instances served (%d before the stop, %d by the new "
              "one)" % (before, after))
        suite.note("%d requests, 0 failed: the old instance had answered "
                   "%d when it was stopped, the new one answered %d"
                   % (total, before, after))
    finally:
        t.close()
        if old.poll() is None:
            old.kill()
        if new is not None:
            new.terminate()
            new.wait(10)


def teardown():
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(None, teardown)
