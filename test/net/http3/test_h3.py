#!/usr/bin/env python3
"""HTTP/3 over QUIC against the reference server (--quic-port), interop-runner
style: each case drives gtlsclient (ngtcp2's GnuTLS client, Debian's
ngtcp2-client) with the options of one QUIC feature and asserts what matters
from its log (parsed), from the files it downloads, or from the reference
server's /stats; the raw cases send hand-made datagrams from Python UDP
sockets; one case loads pages in headless Chromium over h3. Everything runs on
127.0.0.1 or ::1 and every client run is bounded by a timeout.

TERN_H3_PEER=gtlsserver runs the same cases against ngtcp2's own server
(Debian's ngtcp2-server) instead, to prove the client commands and the checks:
the cases that need the reference server's routes or behaviour say so and adapt
(gtlsserver serves /N as N zero bytes, does not echo, never sends stateless
resets, has 0-RTT on and no Alt-Svc).

After every case each server still running must answer a fresh gtlsclient GET /
over HTTP/3 (and the reference server a GET / over TCP as well)."""
import hashlib
import json
import os
import random
import re
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
import harness
from harness import (HELLO_BODY, Conn, Server, ServerError, Skip, Suite,
                     build_request, check, eq)

suite = Suite()
case = suite.case
BROWSER = os.path.join(harness.REPO, "test", "browser")
PEER = os.environ.get("TERN_H3_PEER", "reference")
GTLSCLIENT = shutil.which("gtlsclient")
GTLSSERVER = shutil.which("gtlsserver") or (
    "/usr/sbin/gtlsserver" if os.access("/usr/sbin/gtlsserver", os.X_OK)
    else None)
tmp = tempfile.mkdtemp(prefix="tern-h3-")
# The largest body the reference server's /big serves (its static buffer,
# 1 MiB).
REFERENCE_BIG_MAX = 64 << 20

cert = key = None
peer = None  # the shared server
skip_all = None  # why no case can run here (no client, no HTTP/3 build)


def make_cert(name, extra_sans=()):
    """A self-signed P-256 certificate for localhost, 127.0.0.1 and ::1
    (plus `extra_sans`, DNS names that only make it bigger)."""
    c = os.path.join(tmp, name + ".crt")
    k = os.path.join(tmp, name + ".key")
    sans = ["DNS:localhost", "IP:127.0.0.1", "IP:::1"] + [
        "DNS:" + s for s in extra_sans]
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                    "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-subj", "/CN=localhost",
                    "-keyout", k, "-out", c, "-addext",
                    "subjectAltName=" + ",".join(sans)],
                   check=True, capture_output=True)
    return c, k


# ---------------------------------------------------------------------------
# The client: gtlsclient runs and what its log says


class Run:
    """One gtlsclient run: its exit status, its log (stdout and stderr
    together, in order) and its download directory."""

    def __init__(self, cmd, rc, log, download):
        self.cmd, self.rc, self.log, self.download = cmd, rc, log, download

    def __repr__(self):
        return "<gtlsclient rc %s: %s>" % (self.rc, " ".join(self.cmd))

    def tail(self, n=1500):
        return self.log[-n:]

    def statuses(self):
        """{stream id: :status} of the responses in the log."""
        return {int(m.group(1), 16): int(m.group(2)) for m in re.finditer(
            r"http: stream 0x([0-9a-f]+) \[:status: (\d+)\]", self.log)}

    def closed(self):
        """{stream id: H3 error code} of the request streams that closed
        (0x100, H3_NO_ERROR, for a complete exchange)."""
        return {int(m.group(1)): int(m.group(2)) for m in re.finditer(
            r"HTTP stream (\d+) closed with error code (\d+)", self.log)}

    def file(self, path):
        """The body --download saved for `path` (its last segment, query
        included, names the file; "" is index.html)."""
        name = path.rsplit("/", 1)[-1] or "index.html"
        with open(os.path.join(self.download, name), "rb") as f:
            return f.read()

    def has(self, text):
        return text in self.log

    def local_ports(self, what="Sent"):
        """The client's local ports in the order they were first used."""
        out = []
        for m in re.finditer(r"^%s packet: local=\[[^\]]+\]:(\d+) " % what,
                             self.log, re.M):
            p = int(m.group(1))
            if p not in out:
                out.append(p)
        return out

    def datagrams(self):
        """[('tx' or 'rx', bytes)] in log order: the UDP datagrams the
        client sent and received (received ones are logged before the
        client's simulated loss, if any, drops them)."""
        return [("tx" if m.group(1) == "Sent" else "rx", int(m.group(2)))
                for m in re.finditer(r"^(Sent|Received) packet: .* (\d+) "
                                     r"bytes$", self.log, re.M)]

    def crypto(self, level):
        """The CRYPTO bytes the server sent at `level` ("Initial",
        "Handshake"), from the client's hexdumps (needs the QUIC dump)."""
        data = bytearray()
        lines = self.log.splitlines()
        i = 0
        while i < len(lines):
            if lines[i] == "Ordered CRYPTO data in %s crypto level" % level:
                i += 1
                while i < len(lines):
                    if not re.match(r"[0-9a-f]{8}  [0-9a-f]{2} ", lines[i]):
                        break
                    row = lines[i][10:58].split()
                    data += bytes(int(b, 16) for b in row)
                    i += 1
            i += 1
        return bytes(data)


def tls_messages(data):
    """[(handshake type, body)] of a run of TLS handshake messages."""
    out, i = [], 0
    while i + 4 <= len(data):
        n = int.from_bytes(data[i + 1:i + 4], "big")
        out.append((data[i], data[i + 4:i + 4 + n]))
        i += 4 + n
    return out


def server_hello_extensions(msg):
    """The extension types of a ServerHello body."""
    i = 2 + 32
    i += 1 + msg[i]  # legacy session id
    i += 3  # cipher suite, compression
    end = i + 2 + int.from_bytes(msg[i:i + 2], "big")
    i += 2
    types = []
    while i + 4 <= end:
        types.append(int.from_bytes(msg[i:i + 2], "big"))
        i += 4 + int.from_bytes(msg[i + 2:i + 4], "big")
    return types


def client(p, paths, *opts, quiet=False, dump=False, timeout=20,
           host=None, port=None, download=True):
    """Run gtlsclient against peer `p` for `paths` (it exits when all its
    streams have closed). Logging is on unless `quiet` (printing dominates
    its run time), with the QUIC frame dump only if `dump`; the HTTP body
    dump is always off (--download keeps the bodies)."""
    dl = tempfile.mkdtemp(dir=tmp, prefix="dl-") if download else None
    cmd = [GTLSCLIENT, "--exit-on-all-streams-close", "--timeout=5s",
           "--handshake-timeout=5s"]
    if quiet:
        cmd.append("-q")
    else:
        cmd.append("--no-http-dump")
        if not dump:
            cmd.append("--no-quic-dump")
    if dl:
        cmd.append("--download=" + dl)
    cmd += list(opts)
    port = port or p.port
    cmd += [host or p.host, str(port)]
    cmd += ["https://localhost:%d%s" % (port, path) for path in paths]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("gtlsclient ran past %d s: %s; log tail: %r"
                             % (timeout, " ".join(cmd),
                                (e.output or b"")[-1500:]))
    return Run(cmd, proc.returncode,
               proc.stdout.decode("utf-8", "replace"), dl)


def get_root(p, *opts, **kw):
    """GET / over HTTP/3; asserts a 200 with "Hello, World!"."""
    r = client(p, ["/"], *opts, **kw)
    check_root(r)
    return r


def check_root(r, stream=0):
    if not quiet(r):
        eq(r.statuses().get(stream), 200, "status of GET / (%r, log tail "
           "%r)" % (r, r.tail()))
    try:
        body = r.file("/")
    except OSError:
        raise AssertionError("no body for GET /: %r; log tail %r"
                             % (r, r.tail()))
    eq(body, HELLO_BODY, "body of GET /")


def quiet(r):
    return "-q" in r.cmd


# ---------------------------------------------------------------------------
# The servers: the reference server with --quic-port, or gtlsserver


class Hello(Server):
    """The reference server with HTTP/1.1 and HTTP/2 over TLS on .tls_port and
    HTTP/3 on UDP .port (the same certificate)."""
    kind = "reference"

    def __init__(self, c, k, *extra, host="127.0.0.1"):
        args = ["--host", host, "--workers", "2", "--tls-port", "0",
                "--cert", c, "--key", k, "--quic-port", "0"] + list(extra)
        Server.__init__(self, "reference", args)
        self.tcp_port = self.port
        self.host = host
        self.tls_port = quic = None
        try:
            while quic is None:
                line = self.next_line()
                m = re.match(r"tls listening on (\d+)$", line)
                if m:
                    self.tls_port = int(m.group(1))
                m = re.match(r"quic listening on (\d+)$", line)
                if m:
                    quic = int(m.group(1))
        except BaseException:
            self.kill()
            raise
        # .port is what the harness's TCP alive check uses; the cases use
        # .port for QUIC, so the check goes through check_alive below.
        self.port = quic

    def check_alive(self):
        quic, self.port = self.port, self.tcp_port
        try:
            if self.host == "127.0.0.1":
                Server.check_alive(self)
            elif not self.alive():
                raise AssertionError("reference died (rc %s); stderr: %s" % (
                    self.proc.returncode, self.stderr_text()))
        finally:
            self.port = quic
        get_root(self, timeout=10)

    # What the reference server serves.
    def big_path(self, n):
        check(n <= REFERENCE_BIG_MAX,
              "reference's /big serves at most %d bytes" % REFERENCE_BIG_MAX)
        return "/big?bytes=%d" % n

    @staticmethod
    def big_body(n):
        return b"x" * n

    has_routes = True

    def stats(self):
        with Conn(self.tcp_port) as c:
            c.send(build_request("GET", "/stats"))
            return json.loads(c.response().body)


class Counting:
    """with Counting(p) as n: ...; then n.delta("quic_resets"): how much a
    counter of the reference server's /stats grew in the block (None for
    gtlsserver, which has no counters)."""

    def __init__(self, p):
        self.p = p
        self.before = self.after = None

    def __enter__(self):
        if self.p.kind == "reference":
            self.before = self.p.stats()
        return self

    def __exit__(self, et, ev, tb):
        if et is None and self.before is not None:
            self.after = self.p.stats()
        return False

    def delta(self, key):
        if self.before is None:
            return None
        return self.after[key] - self.before[key]


def free_udp_port(host):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def udp_bound(port):
    """True once some socket is bound to UDP `port` (any family)."""
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(name) as f:
                for line in f.readlines()[1:]:
                    local = line.split()[1]
                    if int(local.rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


class Gtlsserver:
    """ngtcp2's gtlsserver serving htdocs/index.html ("Hello, World!")
    and /N (N zero bytes), registered with the harness like a Server."""
    kind = "gtlsserver"
    name = "gtlsserver"
    has_routes = False

    def __init__(self, c, k, *extra, host="127.0.0.1"):
        docs = os.path.join(tmp, "htdocs")
        os.makedirs(docs, exist_ok=True)
        with open(os.path.join(docs, "index.html"), "wb") as f:
            f.write(HELLO_BODY)
        self.host = host
        self.returncode = None
        self._stderr = tempfile.TemporaryFile()
        for attempt in range(5):
            self.port = free_udp_port(host)
            self.proc = subprocess.Popen(
                [GTLSSERVER, "-q", "-d", docs] + list(extra) +
                [host, str(self.port), k, c], stdin=subprocess.DEVNULL,
                stdout=self._stderr, stderr=self._stderr,
                start_new_session=True)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.alive() and \
                    not udp_bound(self.port):
                time.sleep(0.02)
            if self.alive() and udp_bound(self.port):
                break
            self.kill()
        else:
            raise ServerError("gtlsserver did not start: %s"
                              % self.stderr_text())
        with harness._live_lock:
            harness._live.append(self)

    def alive(self):
        return self.proc.poll() is None

    def stderr_text(self, limit=2000):
        try:
            self._stderr.seek(0)
            return self._stderr.read()[-limit:].decode("utf-8", "replace")
        except (ValueError, OSError):
            return ""

    def _unregister(self):
        with harness._live_lock:
            if self in harness._live:
                harness._live.remove(self)

    def check_alive(self):
        if not self.alive():
            raise AssertionError("gtlsserver died (rc %s): %s"
                                 % (self.proc.returncode, self.stderr_text()))
        get_root(self, timeout=10)

    def kill(self):
        self._unregister()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.returncode = self.proc.returncode

    def stop(self):
        self._unregister()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return 0

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            try:
                self.check_alive()
            finally:
                self.stop()
        else:
            self.kill()
        return False

    @staticmethod
    def big_path(n):
        return "/%d" % n

    @staticmethod
    def big_body(n):
        return b"\0" * n


def start_peer(c=None, k=None, *, retry=False, host="127.0.0.1",
               early_data=False):
    """A server of the kind TERN_H3_PEER names, on `host`, with Retry on
    every new connection if `retry`."""
    c, k = (c or cert), (k or key)
    if PEER == "gtlsserver":
        return Gtlsserver(c, k, *(["-V"] if retry else []), host=host)
    extra = (["--quic-retry"] if retry else []) + (
        ["--quic-early-data"] if early_data else [])
    return Hello(c, k, *extra, host=host)


def h3case(fn=None, *, timeout=30.0, reference_only=None):
    """A case that needs an HTTP/3 server and gtlsclient; `reference_only`
    (a reason) skips it against gtlsserver."""
    def wrap(f):
        def run():
            if skip_all:
                raise Skip(skip_all)
            if reference_only and PEER != "reference":
                raise Skip("against %s: %s" % (PEER, reference_only))
            f()
        run.__doc__ = f.__doc__
        suite.case(run, timeout=timeout, name=f.__name__)
        return f
    return wrap(fn) if fn is not None else wrap


def setup():
    global cert, key, peer, skip_all
    if GTLSCLIENT is None:
        skip_all = "gtlsclient (Debian package ngtcp2-client) not installed"
        return
    cert, key = make_cert("main")
    if PEER == "gtlsserver":
        if GTLSSERVER is None:
            skip_all = "gtlsserver (ngtcp2-server) not installed"
            return
    elif PEER != "reference":
        raise AssertionError("TERN_H3_PEER: reference or gtlsserver, not %r"
                             % PEER)
    try:
        peer = start_peer()
    except ServerError as e:
        # A build without HTTP/3 runs nothing: the reference server refuses the
        # option, or a QUIC listener says TERN_ENOTSUP. Any other failure to
        # start fails the run.
        if re.search(r"unknown option --quic-port|quic: not built",
                     str(e)):
            skip_all = "reference has no HTTP/3 here: %s" % " ".join(
                str(e).split())[-200:]
            return
        raise
    suite.note("peer: %s, quic port %d" % (peer.kind, peer.port))


def teardown():
    if peer is not None:
        rc = peer.stop()
        eq(rc, 0, "%s exit status on SIGTERM; stderr %s"
           % (peer.kind, peer.stderr_text()))


# ---------------------------------------------------------------------------
# Interop-runner cases


@h3case
def handshake():
    """One GET / on a new connection: the handshake completes and is
    confirmed, ALPN is h3, the suite one of TLS 1.3's AEADs, a 200 with
    "Hello, World!" whose stream closes with H3_NO_ERROR, and the client
    closes the connection with no error from the server."""
    r = get_root(peer)
    for line in ("QUIC handshake has completed", "Negotiated ALPN is h3",
                 "QUIC handshake has been confirmed"):
        check(r.has(line), "no %r in the log: %r" % (line, r.tail()))
    m = re.search(r"Negotiated cipher suite is (\S+)", r.log)
    check(m and m.group(1) in ("AES-128-GCM", "AES-256-GCM",
                               "CHACHA20-POLY1305"), "suite %r"
          % (m and m.group(1)))
    suite.note("cipher suite: %s" % m.group(1))
    eq(r.closed(), {0: 0x100}, "request stream closes")
    check(not re.search(r"frm rx \d+ \w+ CONNECTION_CLOSE", r.log),
          "the server closed the connection: %r" % re.findall(
              r".*CONNECTION_CLOSE.*", r.log))


@h3case
def many_requests_one_connection():
    """-n 1000: a thousand GET / on one connection, so the server must raise
    the client's stream limit (MAX_STREAMS) ten times over: every one is
    answered 200 and every stream closes with H3_NO_ERROR; the reference server
    counts them all, on one connection."""
    n = 1000
    before = peer.stats() if peer.kind == "reference" else None
    r = client(peer, ["/"], "-n", str(n), timeout=30)
    st = r.statuses()
    eq(len(st), n, "responses (%r; tail %r)" % (r, r.tail()))
    eq(set(st.values()), {200}, "statuses")
    eq(sorted(st), [4 * i for i in range(n)], "stream ids")
    closed = r.closed()
    eq(len(closed), n, "streams closed")
    eq(set(closed.values()), {0x100}, "their error codes")
    eq(len(r.local_ports()), 1, "one connection (one local port)")
    check(len(set(re.findall(r"^I\d+ (0x[0-9a-f]+) ", r.log, re.M))) == 1,
          "one connection (one client SCID)")
    if peer.kind == "reference":
        after = peer.stats()
        got = after["requests"] - before["requests"]
        # The reference server counts a response when the client has
        # acknowledged all of it; gtlsclient closes the connection as soon as
        # it has the last ones, often before its ACK for them leaves, so up to
        # a window of them (100 streams) may go uncounted, depending on timing.
        check(got >= n - 100, "reference counted %d requests, want >= %d"
              % (got, n - 100))
        suite.note("reference counted %d of the %d requests" % (got, n))
        eq(after["connections"] - before["connections"], 2, "connections: "
           "the QUIC one, and this /stats request's")


@h3case
def large_download():
    """8 MiB (gtlsserver: the same size) byte for byte, with the client's
    flow-control windows small (64 KiB per stream, 256 KiB per connection,
    no auto-tuning) so that the server must wait for MAX_STREAM_DATA and
    MAX_DATA many times."""
    n = 8 << 20
    path = peer.big_path(n)
    r = client(peer, [path], "--max-stream-data-bidi-local=64K",
               "--max-data=256K", "--max-window=0", "--max-stream-window=0",
               quiet=True, timeout=30)
    body = r.file(path)
    eq(len(body), n, "downloaded length")
    check(body == peer.big_body(n), "downloaded bytes differ")


@h3case(timeout=40)
def no_stall_in_slow_start():
    """Five downloads of 300 kB, each on a new connection, finish in a few
    tenths of a second each, not seconds: while a response is still in
    slow start the server's next datagrams wait for its pacing timer, and
    a write loop left to the check phase after a timer (which comes only
    after the loop's next poll) stalled until some unrelated event (a path
    MTU probe, 450 ms later), about 1.4 s per download here. The bound is
    loose (4 s for all five, against about 0.3 s) so that a loaded
    machine does not trip it; a stall of that kind does."""
    n = 300000
    path = peer.big_path(n)
    t0 = time.monotonic()
    for _ in range(5):
        r = client(peer, [path], quiet=True, timeout=20)
        eq(len(r.file(path)), n, "downloaded length")
    took = time.monotonic() - t0
    suite.note("5 x 300 kB in %.2f s" % took)
    check(took < 4.0, "5 downloads of 300 kB took %.1f s: a stall" % took)


@h3case
def concurrent_transfers():
    """Several requests in one run, open at once on one connection (all
    requests are sent before the first response ends): downloads of 300 kB, 100
    kB, 64 KiB + 1, 4 KiB and 1 byte, the page, and (the reference server) a
    chunked /stream, a streamed /tick, a deferred and a blocking-pool answer
    that overlap them; each file is checked."""
    want = {"/": HELLO_BODY}
    for n in (300000, 1, 4096, 65537, 100000):
        want[peer.big_path(n)] = peer.big_body(n)
    if peer.kind == "reference":
        want.update({
            "/stream": b"".join(b"chunk %d\n" % i for i in range(5)),
            "/tick?n=5&ms=20": b"".join(b"tick %d\n" % i for i in range(5)),
            "/defer?ms=60": b"deferred", "/block?ms=60": b"blocked"})
    paths = list(want)
    r = client(peer, paths)
    eq(sorted(r.statuses().values()), [200] * len(paths), "statuses (%r)"
       % r.tail())
    for path, body in want.items():
        got = r.file(path)
        eq(len(got), len(body), "length of %s" % path)
        check(got == body, "%s differs" % path)
    submits = [m.start() for m in re.finditer(r"submit request headers",
                                              r.log)]
    eq(len(submits), len(paths), "requests submitted")
    first_close = r.log.find("HTTP stream ")
    check(first_close > max(submits), "all requests were open together")


@h3case(reference_only="gtlsserver sends trailers only with --send-trailers")
def trailers():
    """The reference server's /trailers (the handler every protocol shares: a
    streamed body, then trailer fields) over HTTP/3: the body, then a trailer
    section with both fields, then a clean stream close."""
    r = client(peer, ["/trailers"])
    eq(r.statuses().get(0), 200, "status (%r)" % r.tail())
    eq(r.file("/trailers"), b"row 1\nrow 2\n", "body")
    tail = r.log[r.log.find("stream 0x0 trailers started"):]
    check(r.has("stream 0x0 trailers started"), "no trailers: %r" % r.tail())
    check("[x-checksum: abc123]" in tail and "[x-rows: 2]" in tail,
          "trailer fields: %r" % tail[:300])
    eq(r.closed(), {0: 0x100}, "stream close")


def cipher_case(priority, suite_name):
    r = get_root(peer, "--ciphers=NORMAL:-VERS-ALL:+VERS-TLS1.3:"
                 "-CIPHER-ALL:+" + priority)
    check(r.has("Negotiated cipher suite is " + suite_name),
          "suite: %r" % re.findall(r"Negotiated cipher.*", r.log))


@h3case
def chacha20():
    """TLS_CHACHA20_POLY1305_SHA256 only (gtlsclient takes a GnuTLS
    priority string): negotiated, and GET / answers."""
    cipher_case("CHACHA20-POLY1305", "CHACHA20-POLY1305")


@h3case
def aes256():
    """TLS_AES_256_GCM_SHA384 only: negotiated, and GET / answers."""
    cipher_case("AES-256-GCM", "AES-256-GCM")


@h3case
def resumption():
    """--session-file twice (early data off): the first handshake is a
    full one (the server's Handshake flight has a Certificate), the second
    resumes (ServerHello carries pre_shared_key, no Certificate); both
    answer GET /."""
    sess = os.path.join(tmp, "resume.pem")
    runs = [get_root(peer, "--session-file=" + sess, "--disable-early-data",
                     dump=True) for _ in range(2)]
    for i, r in enumerate(runs):
        msgs = tls_messages(r.crypto("Initial"))
        check(msgs and msgs[0][0] == 2, "run %d: no ServerHello" % (i + 1))
        psk = 41 in server_hello_extensions(msgs[0][1])
        types = [t for t, _ in tls_messages(r.crypto("Handshake"))]
        if i == 0:
            check(not psk and 11 in types, "first run: a full handshake "
                  "(handshake messages %r, psk %s)" % (types, psk))
            check(os.path.getsize(sess) > 0, "no session saved")
        else:
            check(psk and 11 not in types, "second run did not resume "
                  "(handshake messages %r, psk %s)" % (types, psk))
            eq(types, [8, 20], "resumed flight: EncryptedExtensions, "
               "Finished")


def early_data_hello_flag():
    """Whether the reference server takes --quic-early-data (starts and
    serves)."""
    try:
        with Hello(cert, key, "--quic-early-data"):
            return True
    except ServerError:
        return False


def zero_rtt_runs(p):
    """Two connections with --session-file and --tp-file; returns the
    second's run, whether it sent its request in 0-RTT, and whether the
    server accepted that."""
    sess = os.path.join(tmp, "0rtt-%d.pem" % p.port)
    tp = os.path.join(tmp, "0rtt-%d.tp" % p.port)
    for f in (sess, tp):
        if os.path.exists(f):
            os.unlink(f)
    first = get_root(p, "--session-file=" + sess, "--tp-file=" + tp)
    check(not first.has("type=0RTT"), "0-RTT without a session")
    check(os.path.exists(tp) and os.path.getsize(sess) > 0,
          "no session or transport parameters saved")
    second = get_root(p, "--session-file=" + sess, "--tp-file=" + tp)
    sent = bool(re.search(r"frm tx \d+ 0RTT STREAM\(0x0b\) id=0x0 fin=1",
                          second.log))
    if sent:
        check(re.search(r"pkt tx .* type=0RTT", second.log), "no 0-RTT")
    accepted = sent and not second.has("Early data was rejected by server")
    return second, sent, accepted


@h3case
def zero_rtt():
    """--session-file + --tp-file, twice: gtlsserver takes the second
    connection's request in 0-RTT. The reference server ships with 0-RTT off:
    its tickets may not offer early data at all, or it rejects the early data
    (the client says so); either way the request is answered after the
    handshake. Where the reference server takes --quic-early-data, a server
    started with it must accept the 0-RTT request."""
    r, sent, accepted = zero_rtt_runs(peer)
    if peer.kind == "reference":
        check(not accepted, "reference (0-RTT off) accepted early data")
        suite.note("0-RTT off: the client %s" % (
            "sent 0-RTT, rejected" if sent else "sent no 0-RTT (the ticket "
            "offers none)"))
        if early_data_hello_flag():
            with Hello(cert, key, "--quic-early-data") as s:
                r, sent, accepted = zero_rtt_runs(s)
                check(sent, "no 0-RTT sent to reference --quic-early-data")
                check(accepted, "reference --quic-early-data rejected early "
                      "data")
        else:
            suite.note("reference has no --quic-early-data: the accepted "
                       "variant is not run")
    else:
        check(sent and accepted, "gtlsserver: 0-RTT sent %s, accepted %s"
              % (sent, accepted))


@h3case
def key_update():
    """--key-update=200ms with the request held back 500 ms: the client
    updates its keys, the server follows (packets with key phase 1 come
    back), the update is confirmed, and the request answers after it."""
    r = get_root(peer, "--key-update=200ms", "--delay-stream=500ms")
    check(r.has("Initiate key update"), "no key update started")
    check(r.has("key update confirmed"), "key update not confirmed: %r"
          % r.tail())
    check(re.search(r"pkt rx pkn=\d+ dcid=\S+ type=1RTT k=1", r.log),
          "no packet from the server in key phase 1")


def migration_case(*extra):
    r = get_root(peer, "--change-local-addr=200ms", "--delay-stream=600ms",
                 *extra)
    ports = r.local_ports()
    eq(len(ports), 2, "client local ports used (%r)" % ports)
    rx = r.local_ports("Received")
    check(ports[1] in rx, "nothing received on the new port %d" % ports[1])
    # The response came after the move: the last datagram received went
    # to the new port.
    last = re.findall(r"^Received packet: local=\[[^\]]+\]:(\d+) ", r.log,
                      re.M)[-1]
    eq(int(last), ports[1], "port of the last datagram received")
    return r, ports


@h3case
def migration():
    """Active migration (--change-local-addr=200ms, request delayed to
    600 ms): the client moves to a new local port and validates the path
    (PATH_CHALLENGE answered by the server), the server follows, and the
    response arrives on the new path."""
    r, ports = migration_case()
    check(re.search(r"Path validation against path \{local:\[[^\]]+\]:%d, "
                    r"remote:[^}]+\} succeeded" % ports[1], r.log),
          "path validation of the new path: %r" % re.findall(
              r".*[Pp]ath validation.*", r.log))
    check(re.search(r"frm rx \d+ 1RTT PATH_RESPONSE", r.log),
          "no PATH_RESPONSE from the server")


@h3case
def nat_rebinding():
    """NAT rebinding (--change-local-addr with --nat-rebinding: the port
    changes, the client validates nothing): the server notices the new
    address, validates it itself (PATH_CHALLENGE to the client) and
    answers there."""
    r, ports = migration_case("--nat-rebinding")
    # (The client may have its response and close before it answers the
    # challenge, so its PATH_RESPONSE is not required.)
    check(re.search(r"frm rx \d+ 1RTT PATH_CHALLENGE", r.log),
          "the server did not validate the new path")


@h3case(timeout=60, reference_only="the count is reference's /stats")
def forwarded_to_owner():
    """A connection belongs to the worker that took its first packet; after a
    client moves to a new port the kernel's SO_REUSEPORT hash may hand its
    datagrams to another worker's socket, which forwards them by the worker
    named in the connection ID. With 4 workers and 8 clients that each move
    once, every request still answers on its new path, and the reference server
    counts forwarded datagrams (the chance that all 8 new paths land on their
    own worker is 4^-8)."""
    with Hello(cert, key, "--workers", "4") as s:
        before = s.stats()["quic_forwarded"]
        for _ in range(8):
            r = get_root(s, "--change-local-addr=100ms",
                         "--delay-stream=300ms")
            eq(len(r.local_ports()), 2, "client local ports used")
        got = s.stats()["quic_forwarded"] - before
    check(got > 0, "no datagram was forwarded between workers")
    suite.note("datagrams forwarded: %d" % got)


@h3case(timeout=60)
def handshake_loss():
    """Four handshakes in parallel, each losing 20% of the datagrams both
    ways (-t/-r 0.2): losses happen, and every connection completes and
    answers GET /. (The client's idle and handshake timeouts are long, as
    its probe timeouts back off exponentially under loss.)"""
    runs = [None] * 4

    def one(i):
        runs[i] = client(peer, ["/"], "-t", "0.2", "-r", "0.2",
                         "--initial-rtt=50ms", "--timeout=30s",
                         "--handshake-timeout=25s", timeout=35)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    lost = 0
    for r in runs:
        check(r is not None, "a client run failed")
        check_root(r)
        lost += r.log.count("** Simulated")
    check(lost > 0, "no datagram was lost")
    suite.note("datagrams lost: %d" % lost)


@h3case(timeout=60)
def transfer_loss():
    """A 500 kB download losing 10% of the datagrams both ways: losses
    happen and the body is still byte-exact."""
    n = 500000
    path = peer.big_path(n)
    r = client(peer, [path], "-t", "0.1", "-r", "0.1", "--timeout=30s",
               timeout=35)
    eq(r.statuses().get(0), 200, "status (%r)" % r.tail())
    check(r.log.count("** Simulated") > 10, "too few losses")
    check(r.file(path) == peer.big_body(n), "body differs")


@h3case
def retry():
    """A server that validates every new connection with Retry (reference
    --quic-retry; gtlsserver -V): the client gets a Retry, comes back with
    the token, the server's transport parameters carry
    retry_source_connection_id = the Retry's SCID, and GET / answers;
    the reference server counts one Retry sent."""
    with start_peer(retry=True) as s, Counting(s) as n:
        r = get_root(s)
        m = re.search(r"pkt rx pkn=\d+ dcid=\S+ scid=(0x[0-9a-f]+) "
                      r"version=0x00000001 type=Retry", r.log)
        check(m, "no Retry: %r" % r.tail())
        eq(re.findall(r"remote transport_parameters "
                      r"retry_source_connection_id=(0x[0-9a-f]+)", r.log),
           [m.group(1)], "retry_source_connection_id")
        eq(r.log.count("type=Retry"), 1, "Retries")
    if n.delta("quic_retries") is not None:
        eq(n.delta("quic_retries"), 1, "reference's quic_retries")
    # The shared server, without Retry, sends none.
    check(not get_root(peer).has("type=Retry"), "Retry without --quic-retry")


@h3case
def version_negotiation():
    """A first Initial of the reserved version 0x1a2a3a4a: the server answers
    Version Negotiation listing version 1, the client picks v1
    (--preferred-versions=v1) and GET / answers; the reference server counts
    one Version Negotiation sent."""
    with Counting(peer) as n:
        r = get_root(peer, "-v", "0x1a2a3a4a", "--preferred-versions=v1")
    check(re.search(r"pkt rx .* type=VN", r.log), "no Version Negotiation")
    vn = re.findall(r"pkt rx \d+ VN v=(0x[0-9a-f]+)", r.log)
    check("0x00000001" in vn, "VN lists %r" % vn)
    check("0x1a2a3a4a" not in vn, "VN lists the client's version")
    check(r.has("Client selected version 0x1"), "client did not pick v1")
    check(r.has("the negotiated version is 0x00000001"), "negotiated")
    if n.delta("quic_version_negotiations") is not None:
        eq(n.delta("quic_version_negotiations"), 1,
           "reference's quic_version_negotiations")


@h3case
def quic_v2_draft():
    """QUIC version 2 draft (0x709a50c4) from the first packet
    (-v v2draft, both versions offered): the connection runs in that
    version and GET / answers."""
    r = get_root(peer, "-v", "v2draft", "--preferred-versions=v2draft,v1",
                 "--other-versions=v2draft,v1")
    check(r.has("the negotiated version is 0x709a50c4"),
          "negotiated: %r" % re.findall(r".*negotiated version.*", r.log))


@h3case(timeout=60)
def upload_and_echo():
    """-m POST -d FILE: a 1 MB random body to /echo comes back identical
    (compared by SHA-256), and /upload answers its length; against
    gtlsserver (which reads the body, then serves a file) a POST of the
    same body to /N answers N bytes."""
    n = 1000003
    data = random.Random(3).randbytes(n)
    up = os.path.join(tmp, "up.bin")
    with open(up, "wb") as f:
        f.write(data)
    if peer.kind == "reference":
        r = client(peer, ["/echo"], "-m", "POST", "-d", up, timeout=40)
        eq(r.statuses().get(0), 200, "echo status (%r)" % r.tail())
        got = r.file("/echo")
        eq(len(got), n, "echoed length")
        eq(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest(),
           "SHA-256 of the echo")
        r = client(peer, ["/upload"], "-m", "POST", "-d", up, quiet=True)
        eq(r.file("/upload"), str(n).encode(), "/upload's answer")
    else:
        r = client(peer, ["/13"], "-m", "POST", "-d", up, timeout=40)
        eq(r.statuses().get(0), 200, "status")
        eq(r.file("/13"), b"\0" * 13, "body")


H3CLIENT = os.path.join(harness.BUILD, "test", "net", "h3client")


def h3client_credit(port, n):
    """h3client -v --body-size n POST /upload: (exit status, its output,
    the most stream and connection credit the server gave). Credit, from
    ngtcp2's frame log: a new MAX_STREAM_DATA (MAX_DATA) less what the
    client had sent on the stream (on every stream) by then, which can
    never exceed the server's window."""
    p = subprocess.run([H3CLIENT, "-v", "--timeout-ms", "30000",
                        "--body-size", str(n), "POST",
                        "https://127.0.0.1:%d/upload" % port],
                       capture_output=True, text=True, timeout=60)
    ends = {}
    top = {"stream": 0, "conn": 0}
    most = {"stream": 0, "conn": 0}
    for line in p.stderr.splitlines():
        m = re.search(r"frm tx \d+ \S+ STREAM\(0x[0-9a-f]+\) id=(0x[0-9a-f]+) "
                      r"fin=\d offset=(\d+) len=(\d+)", line)
        if m:
            sid = int(m.group(1), 16)
            ends[sid] = max(ends.get(sid, 0),
                            int(m.group(2)) + int(m.group(3)))
            continue
        m = re.search(r"frm rx \d+ \S+ (MAX_STREAM_DATA\(0x11\) id=0x0 "
                      r"max_stream_data|MAX_DATA\(0x10\) max_data)=(\d+)",
                      line)
        if m:
            kind = "stream" if m.group(1).startswith("MAX_S") else "conn"
            v = int(m.group(2))
            if v > top[kind]:
                top[kind] = v
                used = ends.get(0, 0) if kind == "stream" else \
                    sum(ends.values())
                most[kind] = max(most[kind], v - used)
    return p.returncode, p.stdout, most


@h3case(timeout=90, reference_only="reference's --max-stream-window")
def pinned_windows_upload():
    """reference --max-stream-window 65536 --max-conn-window 65536: a 4 MB
    h3client upload completes, and ngtcp2 never gives the client more than
    64 KiB of credit on the stream or the connection (the windows stay at
    their start: ngtcp2's auto-tuning grows only below the maximum).
    Without the options the figures are printed, not checked: growth on
    loopback depends on timing against the round trip."""
    if not os.access(H3CLIENT, os.X_OK):
        raise Skip("no h3client")
    n = 4000000
    want = hashlib.sha256(str(n).encode()).hexdigest()
    rc, out, most = h3client_credit(peer.port, n)
    print("# default: most credit %r" % most)
    eq(rc, 0, "default upload: %s" % out)
    with Hello(cert, key, "--max-stream-window", "65536",
               "--max-conn-window", "65536") as h:
        rc, out, most = h3client_credit(h.port, n)
        print("# pinned: most credit %r" % most)
        eq(rc, 0, "pinned upload: %s" % out)
        check("stream 0 status 200" in out, "status: %s" % out)
        check("stream 0 body %d sha256 %s" % (len(str(n)), want) in out,
              "reference counted %d bytes: %s" % (n, out))
        check(0 < most["stream"] <= 65536, "stream credit %r" % most)
        check(most["conn"] <= 65536, "connection credit %r" % most)


# ---------------------------------------------------------------------------
# Raw datagrams


def udp_sock(host=None):
    host = host or peer.host
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((host, 0))
    return s


def receive(s, wait):
    """Every datagram that arrives on `s` within `wait` seconds."""
    out = []
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return out
        s.settimeout(left)
        try:
            out.append(s.recv(65536))
        except socket.timeout:
            return out


def varint(v):
    if v < 64:
        return bytes([v])
    if v < 16384:
        return (0x4000 | v).to_bytes(2, "big")
    return (0x80000000 | v).to_bytes(4, "big")


def long_packet(total, version=1, ptype=0, dcid=None, scid=None,
                token=b"", rng=random):
    """A long-header packet of `total` bytes with plausible fields (type
    `ptype`: 0 Initial, 2 Handshake; a 4-byte packet number; CIDs of 8 to
    20 and 0 to 20 bytes unless given) and a random payload, which the
    server cannot decrypt."""
    dcid = dcid if dcid is not None else rng.randbytes(rng.randint(8, 20))
    scid = scid if scid is not None else rng.randbytes(rng.randint(0, 20))
    head = bytes([0xc0 | (ptype << 4) | 3]) + version.to_bytes(4, "big") + \
        bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid
    if ptype == 0:
        head += varint(len(token)) + token
    rest = total - len(head) - 2
    check(4 <= rest < 16384, "packet size out of range")
    return head + (0x4000 | rest).to_bytes(2, "big") + rng.randbytes(rest)


def still_serves(p=None):
    get_root(p or peer, timeout=10)


@h3case
def raw_garbage():
    """400 datagrams of random bytes and random sizes (1..1500), then 100
    long-header packets of version 1 with plausible headers (Initial,
    0-RTT, Handshake) and payloads that do not decrypt, and 100
    short-header ones: nothing is answered but the odd stateless reset,
    Version Negotiation or Retry, and the server still serves a real
    client."""
    rng = random.Random(11)
    s = udp_sock()
    addr = (peer.host, peer.port)
    for _ in range(400):
        s.sendto(rng.randbytes(rng.randint(1, 1500)), addr)
    for i in range(100):
        s.sendto(long_packet(rng.randint(1200, 1400), rng=rng,
                             ptype=rng.choice([0, 0, 1, 2])), addr)
    for _ in range(100):
        s.sendto(bytes([0x40 | rng.randrange(64)]) +
                 rng.randbytes(rng.randint(20, 1400)), addr)
    back = receive(s, 0.5)
    for d in back:
        # Only a stateless reset (short-header form), a VN (version 0: the
        # random datagrams carry any version) or a Retry (RFC 9000 allows
        # one for a 0-RTT packet of an unknown connection) may come back.
        ok = (d[0] & 0xc0) == 0x40 or (len(d) >= 5 and d[1:5] == b"\0" * 4) \
            or (d[0] & 0xf0) == 0xf0
        check(ok, "unexpected answer %r" % d[:40])
    check(len(back) <= 300, "%d answers to 600 datagrams" % len(back))
    suite.note("datagrams back: %d" % len(back))
    s.close()
    still_serves()


@h3case
def raw_small_initial():
    """Initial-looking datagrams below 1200 bytes (1199, 1000, 100 bytes,
    version 1) are dropped without an answer; so is a 1199-byte datagram of an
    unknown version (no Version Negotiation for it: RFC 9000 §6.1 bounds
    amplification). The reference server counts no VN, Retry, reset or refusal
    for them."""
    rng = random.Random(12)
    s = udp_sock()
    addr = (peer.host, peer.port)
    with Counting(peer) as c:
        for n in (1199, 1000, 100):
            s.sendto(long_packet(n, rng=rng), addr)
            eq(receive(s, 0.3), [], "answer to a %d-byte Initial" % n)
        s.sendto(long_packet(1199, version=0x1a2a3a4a, rng=rng), addr)
        eq(receive(s, 0.3), [], "answer to a 1199-byte unknown version")
    s.close()
    for k in ("quic_version_negotiations", "quic_retries", "quic_resets",
              "quic_refused"):
        check(c.delta(k) in (None, 0), "reference's %s grew by %s"
              % (k, c.delta(k)))
    still_serves()


def version_negotiated(version, rng, p=None):
    """A 1200-byte Initial of `version` gets exactly one Version Negotiation
    packet back: version 0, the CIDs swapped, version 1 listed and not
    `version`, no longer than the datagram that caused it; the reference
    server counts it."""
    p = p or peer
    s = udp_sock()
    dcid, scid = rng.randbytes(12), rng.randbytes(9)
    with Counting(p) as n:
        s.sendto(long_packet(1200, version=version, dcid=dcid, scid=scid,
                             rng=rng), (p.host, p.port))
        back = receive(s, 0.5)
    s.close()
    if n.delta("quic_version_negotiations") is not None:
        eq(n.delta("quic_version_negotiations"), 1,
           "reference's quic_version_negotiations (%#x)" % version)
    eq(len(back), 1, "answers to version %#x" % version)
    d = back[0]
    check(d[0] & 0x80, "long header")
    eq(d[1:5], b"\0\0\0\0", "version field of the answer to %#x" % version)
    i = 5
    eq(d[i + 1:i + 1 + d[i]], scid, "VN DCID = our SCID")
    i += 1 + d[i]
    eq(d[i + 1:i + 1 + d[i]], dcid, "VN SCID = our DCID")
    i += 1 + d[i]
    versions = [int.from_bytes(d[j:j + 4], "big")
                for j in range(i, len(d), 4)]
    check(1 in versions, "VN lists %r" % ["%#x" % v for v in versions])
    check(version not in versions, "VN lists the rejected version")
    check(len(d) <= 1200, "VN of %d bytes" % len(d))


@h3case
def raw_version_negotiation():
    """A 1200-byte datagram of the unknown version 0x1a2a3a4a gets one
    Version Negotiation packet back (version_negotiated)."""
    version_negotiated(0x1a2a3a4a, random.Random(13))


@h3case(reference_only="tern's own version list")
def draft_versions_negotiated():
    """ngtcp2 0.12 also speaks QUIC drafts 29 to 32 (0xff00001d to
    0xff000020), which tern's Version Negotiation does not list: an
    Initial of one started a connection of that version, or on a Retry
    listener got a Retry of that version (the QUIC fuzz target caught one).
    Each gets a Version Negotiation now, from a Retry listener too."""
    rng = random.Random(14)
    for v in (0xff00001d, 0xff00001e, 0xff000020):
        version_negotiated(v, rng)
    with start_peer(retry=True) as s:
        version_negotiated(0xff00001d, rng, s)


@h3case
def amplification_limit():
    """Before the client's address is validated the server sends at most
    three times what it received (RFC 9000 §8.1). A server with a big
    certificate (about 6 KB: its first flight needs more than 3 x 1200
    bytes) meets a client that receives but never acknowledges (-r 1.0,
    all incoming datagrams dropped after they are logged, so it never
    sends a Handshake packet and its address is never validated): at
    every point the bytes the client got are at most 3 x the bytes it
    had sent (its first Initial and its retransmissions), and the server
    did answer."""
    c, k = make_cert("big", ["name%03d.amplification.example.test" % i
                             for i in range(180)])
    check(os.path.getsize(c) > 6000, "certificate too small")
    with start_peer(c, k) as s:
        r = client(s, ["/"], "-r", "1.0", "--handshake-timeout=2s",
                   "--timeout=2s", "--initial-rtt=100ms", timeout=15)
        sent = got = 0
        first_tx = None
        for way, n in r.datagrams():
            if way == "tx":
                sent += n
                first_tx = first_tx or n
            else:
                got += n
                check(got <= 3 * sent, "received %d bytes against %d sent "
                      "before validation" % (got, sent))
        check(first_tx is not None and first_tx >= 1200,
              "client's first Initial: %r" % first_tx)
        check(got > 0, "the server sent nothing")
        suite.note("client sent %d, received %d bytes" % (sent, got))
        # The server is fine afterwards (the with-block checks it).


@h3case(timeout=60)
def initial_flood():
    """A flood of new connections: 16 clients whose handshakes never
    complete (they drop everything they receive) and 3000 undecryptable
    1200-byte Initials with new random DCIDs, while a real client fetches
    GET / five times: every fetch answers, and the server serves after."""
    stop = threading.Event()
    errors = []

    def garbage():
        rng = random.Random(14)
        s = udp_sock()
        try:
            for i in range(3000):
                if stop.is_set():
                    break
                s.sendto(long_packet(1200, rng=rng), (peer.host, peer.port))
                if i % 200 == 199:
                    time.sleep(0.01)
        finally:
            s.close()

    def half_open():
        try:
            client(peer, ["/"], "-r", "1.0", "--handshake-timeout=3s",
                   quiet=True, download=False, timeout=15)
        except BaseException as e:  # noqa: B902 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=garbage)] + [
        threading.Thread(target=half_open) for _ in range(16)]
    for t in threads:
        t.start()
    try:
        for _ in range(5):
            t0 = time.monotonic()
            get_root(peer, timeout=10)
            check(time.monotonic() - t0 < 5, "a GET took %.1f s"
                  % (time.monotonic() - t0))
    finally:
        stop.set()
        for t in threads:
            t.join()
    eq(errors, [], "half-open clients")
    still_serves()


@h3case(reference_only="gtlsserver never sends stateless resets")
def stateless_reset():
    """A short-header packet for a connection ID the server never issued gets a
    stateless reset (a short-header-looking datagram of at least 21 bytes,
    smaller than the packet that caused it); and one for a CID it no longer
    knows (issued to a client whose connection has since closed) gets a reset
    ending in exactly the token the server gave for that CID (in
    NEW_CONNECTION_ID, or the transport parameters). The reference server
    counts its resets."""
    before = peer.stats()["quic_resets"]
    s = udp_sock()
    rng = random.Random(15)
    pkt = bytes([0x40 | rng.randrange(64)]) + rng.randbytes(80)
    found = None
    deadline = time.monotonic() + 3
    while found is None and time.monotonic() < deadline:
        s.sendto(pkt, (peer.host, peer.port))
        for d in receive(s, 0.3):
            found = d
    s.close()
    check(found is not None, "no answer to a short-header packet for an "
          "unknown CID")
    eq(found[0] & 0xc0, 0x40, "reset's first bits (short header, fixed)")
    check(21 <= len(found) < len(pkt), "reset of %d bytes for a %d-byte "
          "packet" % (len(found), len(pkt)))
    r = get_root(peer)
    pairs = re.findall(r"frm rx \d+ 1RTT NEW_CONNECTION_ID\(0x18\) seq=\d+ "
                       r"cid=0x([0-9a-f]+) retire_prior_to=\d+ "
                       r"stateless_reset_token=0x([0-9a-f]+)", r.log)
    # Or the reset token of the transport parameters, which belongs to
    # the server's initial SCID.
    tp = re.search(r"remote transport_parameters stateless_reset_token="
                   r"0x([0-9a-f]+)", r.log)
    scid = re.search(r"remote transport_parameters "
                     r"initial_source_connection_id=0x([0-9a-f]+)", r.log)
    if tp and scid:
        pairs.append((scid.group(1), tp.group(1)))
    check(pairs, "the server gave no reset token")
    cid, token = (bytes.fromhex(x) for x in pairs[0])
    s = udp_sock()
    pkt = bytes([0x40 | rng.randrange(64)]) + cid + rng.randbytes(60)
    deadline = time.monotonic() + 5
    found = None
    # The closed connection may drain for a while (3 PTO): until then the
    # CID still routes to it and no reset comes.
    while found is None and time.monotonic() < deadline:
        s.sendto(pkt, (peer.host, peer.port))
        for d in receive(s, 0.3):
            if d[-16:] == token:
                found = d
    s.close()
    check(found is not None, "no stateless reset with the CID's token")
    eq(found[0] & 0xc0, 0x40, "reset's first bits (short header, fixed)")
    check(21 <= len(found) < len(pkt), "reset of %d bytes for a %d-byte "
          "packet" % (len(found), len(pkt)))
    got = peer.stats()["quic_resets"] - before
    check(got >= 2, "reference counted %d stateless resets" % got)


def restart_and_reset(secret_a, secret_b):
    """Reference server A (--quic-secret secret_a) on a UDP port; a client
    connects and holds its request back 1.5 s (--delay-stream); A is killed
    (SIGKILL: the client is told nothing) and reference server B (secret_b)
    takes the same port before the request leaves. Returns the client's run,
    the reset tokens A gave it, and B's quic_resets."""
    a = Hello(cert, key, "--quic-secret", secret_a)
    port = a.port
    try:
        cmd_run = {}

        def run():
            cmd_run["r"] = client(a, ["/"], "--delay-stream=1500ms",
                                  "--timeout=2s", timeout=15)
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.6)
    finally:
        a.kill()
    b = Hello(cert, key, "--quic-port", str(port), "--quic-secret",
              secret_b)
    try:
        t.join(20)
        check("r" in cmd_run, "the client run failed")
        r = cmd_run["r"]
        resets = b.stats()["quic_resets"]
    finally:
        b.kill()
    check(r.has("QUIC handshake has been confirmed"),
          "the client never connected to the first server: %r" % r.tail())
    tokens = set(re.findall(r"stateless_reset_token=0x([0-9a-f]+)", r.log))
    check(tokens, "the first server gave no reset token")
    return r, tokens, resets


@h3case(timeout=60, reference_only="gtlsserver never sends stateless resets")
def stateless_reset_after_restart():
    """RFC 9000 §10.3: a server restarted with the same secret
    (--quic-secret) resets the connections of its previous life: the
    client's delayed request reaches the new process, which answers with a
    stateless reset carrying a token the old one issued, and the client
    drops the connection at once (it logs SR; no response). A new process
    with another secret cannot: its reset does not match, so the client
    takes it for noise."""
    same = "00112233445566778899aabbccddeeff0123456789abcdef"
    r, tokens, resets = restart_and_reset(same, same)
    sr = re.findall(r"\bSR token=0x([0-9a-f]+) randlen=\d+", r.log)
    check(sr, "no stateless reset reached the client: %r" % r.tail())
    check(set(sr) <= tokens, "reset tokens %r, issued %r" % (sr, tokens))
    eq(r.statuses(), {}, "responses after the restart")
    check(resets >= 1, "the new reference server counted %d resets" % resets)
    r, tokens, resets = restart_and_reset(same, "ff" * 24)
    eq(re.findall(r"\bSR token=", r.log), [], "a reset from a server with "
       "another secret was accepted")
    check(resets >= 1,
          "the other-secret reference sent no reset (%d)" % resets)


@h3case(timeout=40, reference_only="the stop is reference's (SIGTERM: a "
        "graceful stop with a 5 s deadline)")
def graceful_stop():
    """SIGTERM while a request is in flight (/defer?ms=1500) and a client's
    handshake hangs half-done (it drops all it receives): the request is
    answered in full, the connection then closes with H3_NO_ERROR, and the
    reference server exits 0 within its 5 s stop deadline."""
    s = start_peer()
    res = {}

    def one(key, *args, **kw):
        res[key] = client(s, *args, **kw)
    ts = [threading.Thread(target=one, args=("a", ["/defer?ms=1500"]),
                           kwargs={"timeout": 15}),
          threading.Thread(target=one, args=("b", ["/"], "-r", "1.0",
                                             "--handshake-timeout=6s",
                                             "--timeout=6s"),
                           kwargs={"timeout": 15, "download": False})]
    try:
        for t in ts:
            t.start()
        time.sleep(0.4)
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        rc = s.wait(8)
        took = time.monotonic() - t0
    finally:
        s.kill()
        for t in ts:
            t.join()
    eq(rc, 0, "reference's exit status after SIGTERM")
    a = res.get("a")
    check(a is not None, "the in-flight client failed")
    eq(a.statuses(), {0: 200}, "the in-flight request's status")
    eq(a.file("/defer?ms=1500"), b"deferred", "its body")
    eq(a.closed(), {0: 0x100}, "its stream")
    check(took < 5.5, "reference took %.1f s to stop" % took)
    suite.note("stopped in %.2f s" % took)


@h3case
def ipv6():
    """A server on ::1, a client to ::1: GET / answers."""
    try:
        probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        raise Skip("no IPv6 loopback")
    with start_peer(host="::1") as s:
        get_root(s, host="::1")


@h3case(reference_only="gtlsserver has no HTTP/1.1 or HTTP/2 port")
def alt_svc():
    """HTTP/1.1 and HTTP/2 responses over TLS (curl -sI -k) advertise the
    HTTP/3 port: alt-svc: h3=":PORT"."""
    if shutil.which("curl") is None:
        raise Skip("no curl")
    for flag in ("--http1.1", "--http2"):
        p = subprocess.run(["curl", "-sI", "-k", "--max-time", "5", flag,
                            "https://127.0.0.1:%d/" % peer.tls_port],
                           capture_output=True, timeout=10)
        head = p.stdout.decode("latin-1")
        want = "HTTP/1.1 200" if flag == "--http1.1" else "HTTP/2 200"
        check(head.startswith(want), "%s: %r" % (flag, head[:100]))
        m = re.search(r"(?im)^alt-svc: *(.*?)\r?$", head)
        check(m is not None, "%s: no alt-svc in %r" % (flag, head))
        check(re.match(r'h3=":%d"' % peer.port, m.group(1)),
              "%s: alt-svc %r, want h3=\":%d\"" % (flag, m.group(1),
                                                   peer.port))


# ---------------------------------------------------------------------------
# Chromium


def spki_hash(c):
    pub = subprocess.run(["openssl", "x509", "-in", c, "-pubkey", "-noout"],
                         capture_output=True, check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"],
                         input=pub, capture_output=True, check=True).stdout
    import base64
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@h3case(timeout=90)
def chromium_h3():
    """Headless Chromium with QUIC forced on for localhost:PORT loads the
    page over h3 (nextHopProtocol "h3"), then from the page fetches a
    1 MB body (length and SHA-256 checked) and POSTs 300 kB to /echo
    (the same bytes back; gtlsserver: a file of that size), both over
    h3."""
    if shutil.which("node") is None or not os.access("/usr/bin/chromium",
                                                     os.X_OK):
        raise Skip("node or /usr/bin/chromium missing")
    if not os.path.isdir(os.path.join(BROWSER, "node_modules",
                                      "playwright-core")):
        raise Skip("playwright-core is missing: test/deps.sh installs it")
    nbig, necho = 1000000, 300000
    big = peer.big_path(nbig)
    echo = "/echo" if peer.kind == "reference" else "/%d" % necho
    p = subprocess.run(["node", os.path.join(BROWSER, "h3.mjs"),
                        "localhost:%d" % peer.port, spki_hash(cert), big,
                        echo, str(necho)], capture_output=True, timeout=80)
    check(p.returncode == 0, "chromium failed: %s" % p.stderr.decode()[-800:])
    r = json.loads(p.stdout.decode().strip().splitlines()[-1])
    eq(r["status"], 200, "page status")
    eq(r["protocol"], "h3", "page protocol")
    eq(r["text"].strip(), "Hello, World!", "page text")
    eq(r["big"]["status"], 200, "big status")
    eq(r["big"]["length"], nbig, "big length")
    eq(r["big"]["sha256"], hashlib.sha256(peer.big_body(nbig)).hexdigest(),
       "big SHA-256")
    eq(r["big"]["protocol"], "h3", "big protocol")
    sent = bytes((i * 7 + (i >> 10)) & 255 for i in range(necho))
    eq(r["sent_sha256"], hashlib.sha256(sent).hexdigest(), "pattern")
    want = sent if peer.kind == "reference" else b"\0" * necho
    eq(r["echo"]["status"], 200, "echo status")
    eq(r["echo"]["length"], len(want), "echo length")
    eq(r["echo"]["sha256"], hashlib.sha256(want).hexdigest(), "echo bytes")
    eq(r["echo"]["protocol"], "h3", "echo protocol")


if __name__ == "__main__":
    suite.main(setup=setup, teardown=teardown)
