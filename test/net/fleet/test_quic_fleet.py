#!/usr/bin/env python3
"""HTTP/3 in a fleet. Sockets handed over: a parent (this test, as systemd
would) binds a UDP and a TCP socket and starts reference --listen-fds with them
as descriptors 3 and 4 (LISTEN_PID set to the reference server's pid through
bash's exec, LISTEN_FDNAMES naming them); the reference server serves HTTP/3 on
the UDP one (tern_listen_with, quic and fd) and HTTP/1.1 on the TCP one, and
reports the names; --quic-fd takes a plain inherited UDP socket (IPv6 here); a
TCP socket, an unbound UDP socket and a Unix datagram socket are refused with
the reason logged. Keys: a NEW_TOKEN token one reference server issued spares
the client a Retry on another reference server that has the first one's secret
as its previous one (and not on one without it), and a reference server rotated
to a new secret still resets, with the right token, a connection the old-secret
reference server had."""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import self_signed  # noqa: E402
from harness import BUILD, Conn, Skip, Suite, binary, check, eq

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-qfleet-")
GTLSCLIENT = shutil.which("gtlsclient")
H3CLIENT = os.path.join(BUILD, "test", "net", "h3client")
SHELL = 'LISTEN_PID=$$ LISTEN_FDS=%d LISTEN_FDNAMES=%s exec "$@" %s'
S1 = "11" * 32
S2 = "22" * 32
cert = key = None
procs = []


def setup():
    global cert, key
    cert, key = self_signed(tmp, "q")


def need_client():
    if GTLSCLIENT is None:
        raise Skip("gtlsclient (Debian package ngtcp2-client) not installed")


def start_reference(args, socks=(), listen_fds=False, names=None):
    """The reference server with `socks` as fds 3, 4, ... (with LISTEN_FDS if
    `listen_fds`, and LISTEN_FDNAMES `names`, else as they are, for
    --quic-fd)."""
    base = [binary("reference"), "--port", "0", "--workers", "2"] + list(args)
    if listen_fds:
        # Through high numbers first, so that no target is a later source.
        redir = " ".join("%d<&%d %d<&-" % (40 + i, s.fileno(), s.fileno())
                         for i, s in enumerate(socks))
        redir += " " + " ".join("%d<&%d %d<&-" % (3 + i, 40 + i, 40 + i)
                                for i in range(len(socks)))
        fdnames = ":".join(names or ["unknown"] * len(socks))
        cmd = ["bash", "-c", SHELL % (len(socks), fdnames, redir),
               "bash"] + base
    else:
        cmd = base
    p = subprocess.Popen(cmd, pass_fds=[s.fileno() for s in socks],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    procs.append(p)
    return p


def lines_until(p, pattern):
    """The reference server's stdout lines up to the one matching `pattern`:
    its match."""
    seen = []
    while True:
        line = p.stdout.readline()
        if not line:
            raise AssertionError("reference ended before %r: %r; stderr %r"
                                 % (pattern, seen, p.stderr.read()[-800:]))
        seen.append(line.strip())
        m = re.match(pattern, line.strip())
        if m:
            return m, seen


def kill(p):
    if p.poll() is None:
        p.kill()
    p.wait()


def gtls(port, *opts, host="127.0.0.1", timeout=15):
    """gtlsclient GET / on UDP `port`: (exit status, log, body)."""
    dl = tempfile.mkdtemp(dir=tmp, prefix="dl-")
    cmd = [GTLSCLIENT, "--exit-on-all-streams-close", "--timeout=5s",
           "--handshake-timeout=5s", "--no-http-dump", "--no-quic-dump",
           "--download=" + dl] + list(opts) + [
               host, str(port), "https://localhost:%d/" % port]
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    body = b""
    path = os.path.join(dl, "index.html")
    if os.path.exists(path):
        with open(path, "rb") as f:
            body = f.read()
    return r.returncode, r.stdout.decode("utf-8", "replace"), body


def get_root(port, *opts, **kw):
    rc, log, body = gtls(port, *opts, **kw)
    eq((rc, body), (0, b"Hello, World!"), "GET / over HTTP/3 (log tail %r)"
       % log[-600:])
    return log


@case
def udp_and_tcp_from_listen_fds():
    need_client()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    uport = u.getsockname()[1]
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    t.listen(16)
    tport = t.getsockname()[1]
    p = start_reference(["--tls-port", "0", "--cert", cert, "--key", key,
                         "--listen-fds"], [u, t], listen_fds=True,
              names=["h3", "web"])
    u.close()
    t.close()
    try:
        _, seen = lines_until(p, r"fd 3 quic listening on (\d+)$")
        check("fd 4 listening on %d" % tport in seen, seen)
        check("fd 3 quic listening on %d" % uport in seen, seen)
        for _ in range(3):
            get_root(uport)
        with Conn(tport) as c:
            r = c.request("GET", "/")
            eq((r.status, r.body), (200, b"Hello, World!"), "over TCP")
        p.terminate()
        eq(p.wait(10), 0, "reference exit status")
        err = p.stderr.read()
        check("fd 3 named h3" in err and "fd 4 named web" in err,
              "LISTEN_FDNAMES: %r" % err[-600:])
    finally:
        kill(p)


@case
def quic_fd_ipv6():
    need_client()
    try:
        u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        u.bind(("::1", 0))
    except OSError as e:
        raise Skip("no IPv6 loopback: %s" % e)
    uport = u.getsockname()[1]
    p = start_reference(["--tls-port", "0", "--cert", cert, "--key", key,
                         "--quic-fd", str(u.fileno())], [u])
    u.close()
    try:
        lines_until(p, r"fd \d+ quic listening on %d$" % uport)
        get_root(uport, host="::1")
    finally:
        kill(p)


def refused(args, socks, want, listen_fds=False):
    p = start_reference(args, socks, listen_fds)
    for s in socks:
        s.close()
    try:
        out, err = p.communicate(timeout=10)
    finally:
        kill(p)
    check(p.returncode not in (0, None), "reference took it: %r" % out)
    check(want in err, "%r not in %r" % (want, err[-600:]))


@case
def wrong_sockets_refused():
    tls = ["--tls-port", "0", "--cert", cert, "--key", key]
    t = socket.socket()
    t.bind(("127.0.0.1", 0))
    t.listen(4)
    refused(tls + ["--quic-fd", str(t.fileno())], [t],
            "fd %d: not a datagram (UDP) socket" % t.fileno())
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    refused(tls + ["--quic-fd", str(u.fileno())], [u],
            "fd %d: not bound to a port" % u.fileno())
    d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    d.bind(os.path.join(tmp, "d.sock"))
    refused(tls + ["--quic-fd", str(d.fileno())], [d],
            "fd %d: not an IPv4 or IPv6 socket" % d.fileno())
    # A UDP socket from LISTEN_FDS without certificates to serve it with.
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    refused(["--listen-fds"], [u], "fd 3: a UDP socket serves HTTP/3, which "
            "needs --tls-port", listen_fds=True)
    # A previous secret alone rotates nothing.
    refused(tls + ["--quic-port", "0", "--quic-previous-secret", S1], [],
            "a previous_secret needs a secret")


def quic_reference(*extra, port=0):
    p = start_reference(["--tls-port", "0", "--cert", cert, "--key", key,
                         "--quic-port", str(port)] + list(extra))
    m, _ = lines_until(p, r"quic listening on (\d+)$")
    p.quic = int(m.group(1))
    return p


def h3client(port, token):
    """tern's test client: GET / with --token-file; its output lines."""
    r = subprocess.run([H3CLIENT, "--token-file", token,
                        "--timeout-ms", "5000", "GET",
                        "https://127.0.0.1:%d/" % port],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=15)
    out = r.stdout.decode("utf-8", "replace").splitlines()
    eq(r.returncode, 0, "h3client exit status (%r)" % out)
    check("stream 0 status 200" in out, out)
    return out


@case
def token_from_another_instance():
    """NEW_TOKEN: a token from reference server A (secret S1) spares the
    client the Retry of reference server B (--quic-retry, secret S2,
    previous secret S1), not that of reference server C (S2 alone)."""
    token = os.path.join(tmp, "token")
    a = quic_reference("--quic-secret", S1)
    b = quic_reference("--quic-retry", "--quic-secret", S2,
                       "--quic-previous-secret", S1)
    c = quic_reference("--quic-retry", "--quic-secret", S2)
    try:
        out = h3client(a.quic, token)
        check(any(x.startswith("new-token ") for x in out), out)
        with open(token, "rb") as f:
            issued = f.read()
        check(issued[:1] == b"\x36", "not a regular token: %r" % issued[:8])
        out = h3client(b.quic, token)
        check("retry" not in out, "B sent a Retry for A's token: %r" % out)
        # B's own NEW_TOKEN (made under S2) replaced A's in the file.
        with open(token, "rb") as f:
            check(f.read() != issued, "B issued no token")
        with open(token, "wb") as f:
            f.write(issued)
        out = h3client(c.quic, token)
        check("retry" in out, "C accepted a token of another secret: %r"
              % out)
        # And with no token at all, B validates with a Retry.
        os.unlink(token)
        out = h3client(b.quic, token)
        check("retry" in out, "B sent no Retry without a token: %r" % out)
    finally:
        for p in (a, b, c):
            kill(p)


def reset_after_rotation(new_args):
    """Reference server A (S1) on a UDP port; a client connects and holds
    its request back; A is killed and reference server B (`new_args`) takes
    the port before the request leaves. The client's log and the reset tokens A
    gave it."""
    a = quic_reference("--quic-secret", S1)
    port = a.quic
    out = {}

    def run():
        out["r"] = gtls(port, "--delay-stream=1500ms", "--timeout=2s")
    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.6)
    kill(a)
    b = quic_reference(*new_args, port=port)
    try:
        th.join(20)
    finally:
        kill(b)
    check("r" in out, "the client run failed")
    log = out["r"][1]
    check("QUIC handshake has been confirmed" in log,
          "the client never reached A: %r" % log[-800:])
    tokens = set(re.findall(r"stateless_reset_token=0x([0-9a-f]+)", log))
    check(tokens, "A gave no reset token")
    return log, tokens


@case
def reset_after_rotation_uses_previous():
    """A client of an instance on the old secret, whose next packet reaches
    an instance rotated to a new one (S2, previous S1), gets a stateless
    reset it recognises: the token is the one the old instance gave; one
    on S2 alone cannot."""
    need_client()
    log, tokens = reset_after_rotation(
        ["--quic-secret", S2, "--quic-previous-secret", S1])
    sr = re.findall(r"\bSR token=0x([0-9a-f]+) randlen=\d+", log)
    check(sr, "no stateless reset reached the client: %r" % log[-800:])
    check(set(sr) <= tokens, "reset tokens %r, issued %r" % (sr, tokens))
    # Without the previous secret the reset does not match.
    log, _ = reset_after_rotation(["--quic-secret", S2])
    eq(re.findall(r"\bSR token=", log), [], "a reset under the new secret "
       "alone was accepted")


def teardown():
    for p in procs:
        kill(p)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(setup, teardown)
