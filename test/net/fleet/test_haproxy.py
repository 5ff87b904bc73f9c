#!/usr/bin/env python3
"""The reference server behind Debian's haproxy (2.6, mode tcp) with
--proxy-protocol: haproxy's send-proxy-v2 and send-proxy (v1) headers carry the
client's address and port, which is what tern_request_peer answers (GET /peer),
on plain HTTP/1.1, h2c and TLS that tern terminates. haproxy's listening
sockets are bound here on port 0 and handed to it (bind fd@N)."""

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
from harness import self_signed  # noqa: E402
from harness import Server, Skip, Suite, check, eq, shared_reference_teardown

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-haproxy-")
srv = None
hap = None
fronts = {}
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def make_cert():
    return self_signed(tmp, "p")


def setup():
    global srv, hap
    if not os.path.exists(HAPROXY):
        return
    cert, key = make_cert()
    srv = Server("reference", ["--workers", "2", "--proxy-protocol",
                               "--tls-port", "0", "--cert", cert, "--key",
                               key])
    srv.tls_port = int(re.match(r"tls listening on (\d+)$",
                                srv.next_line()).group(1))
    srv.check_alive = lambda: check(srv.alive(), "reference died")
    socks = []
    cfg = ["global", "  maxconn 200", "defaults", "  mode tcp",
           "  timeout connect 2s", "  timeout client 10s",
           "  timeout server 10s"]
    for name, port, how in [("v2", srv.port, "send-proxy-v2"),
                            ("v1", srv.port, "send-proxy"),
                            ("tls", srv.tls_port, "send-proxy-v2")]:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        socks.append(s)
        fronts[name] = s.getsockname()[1]
        cfg += ["frontend fe_" + name, "  bind fd@%d" % s.fileno(),
                "  default_backend be_" + name, "backend be_" + name,
                "  server h 127.0.0.1:%d %s" % (port, how)]
    path = os.path.join(tmp, "haproxy.cfg")
    with open(path, "w") as f:
        f.write("\n".join(cfg) + "\n")
    log = open(os.path.join(tmp, "haproxy.log"), "w+")
    hap = subprocess.Popen([HAPROXY, "-db", "-f", path],
                           pass_fds=[s.fileno() for s in socks],
                           stdin=subprocess.DEVNULL, stdout=log,
                           stderr=subprocess.STDOUT)
    for s in socks:
        s.close()  # haproxy has its own copies
    time.sleep(0.3)
    if hap.poll() is not None:
        log.seek(0)
        raise AssertionError("haproxy exited: %r" % log.read())


def curl(*args):
    """curl through haproxy with a fixed local port, so that the peer
    tern reports can be checked against it."""
    for _ in range(20):
        with socket.socket() as probe:  # a free local port for curl
            probe.bind(("127.0.0.1", 0))
            lport = probe.getsockname()[1]
        out = subprocess.run(["curl", "-sS", "--local-port", str(lport),
                              "-w", " %{http_version}"] + list(args),
                             capture_output=True, text=True, timeout=10)
        if "bind" not in out.stderr.lower():
            eq(out.returncode, 0, "curl exit: " + out.stderr)
            return out.stdout, lport
    raise AssertionError("no local port for curl")


def need():
    if hap is None:
        raise Skip("no haproxy (test/deps.sh installs it)")


@case
def send_proxy_v2():
    need()
    body, lport = curl("http://127.0.0.1:%d/peer" % fronts["v2"])
    eq(body, "127.0.0.1 %d 1.1" % lport, "peer through haproxy (v2)")
    body, lport = curl("--http2-prior-knowledge",
                       "http://127.0.0.1:%d/peer" % fronts["v2"])
    eq(body, "127.0.0.1 %d 2" % lport, "h2c through haproxy (v2)")


@case
def send_proxy_v1():
    need()
    body, lport = curl("http://127.0.0.1:%d/peer" % fronts["v1"])
    eq(body, "127.0.0.1 %d 1.1" % lport, "peer through haproxy (v1)")


@case
def tls_terminated_by_tern():
    need()
    body, lport = curl("-k", "--http2",
                       "https://localhost:%d/peer" % fronts["tls"])
    eq(body, "127.0.0.1 %d 2" % lport, "h2 over TLS through haproxy")


@case
def direct_without_header_refused():
    """The same listener straight, without haproxy's header: closed."""
    need()
    out = subprocess.run(["curl", "-sS", "http://127.0.0.1:%d/" % srv.port],
                         capture_output=True, text=True, timeout=10)
    eq(out.returncode, 52, "curl exit (52: empty reply): " + out.stderr)


def teardown():
    if hap is not None:
        hap.terminate()
        hap.wait(5)
    if srv is not None:
        shared_reference_teardown(srv)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(setup, teardown)
