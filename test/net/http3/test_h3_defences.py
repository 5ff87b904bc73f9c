#!/usr/bin/env python3
"""HTTP/3 defences against the reference server, with tern's own HTTP/3 client
(build/test/net/h3client, test/net/http3/h3client.c), which misbehaves on
purpose: oversized and too many header fields (431), a stream reset in
the middle of an upload (the connection survives and serves the next
request), a client that never reads (the server resets the stream after
body_timeout_ms while serving others), many streams at once (the server's
limit of 100 holds and all complete), an idle connection (the server's
idle timeout ends it). A byte-exact download and upload first prove the
client itself. Every client run is bounded by its --timeout-ms."""
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import BUILD, Conn, Server, Skip, Suite, check, eq, \
    shared_reference_teardown, sanitized, stats_from

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-h3d-")
CLIENT = os.path.join(BUILD, "test", "net", "h3client")
HELLO_SHA = hashlib.sha256(b"Hello, World!").hexdigest()
H3_REQUEST_CANCELLED = 0x10c
# Slower under the sanitizers: timing bounds get this much slack.
SLACK = 3.0 if sanitized() else 1.0

srv = None
cert = key = None


def make_cert():
    c = os.path.join(tmp, "cert.pem")
    k = os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                    "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-subj", "/CN=localhost", "-keyout", k, "-out", c,
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return c, k


def start(*extra):
    """The reference server with TLS and QUIC on ephemeral ports; .quic_port
    set."""
    s = Server("reference", ["--workers", "1", "--tls-port", "0",
                             "--cert", cert, "--key", key, "--quic-port",
                             "0"] + list(extra))
    for _ in range(3):
        m = re.match(r"quic listening on (\d+)$", s.next_line())
        if m:
            s.quic_port = int(m.group(1))
            return s
    raise AssertionError("no quic port line")


class Run:
    """One h3client run, parsed: .lines, .rc, per-stream facts."""

    def __init__(self, proc_out, rc, took):
        self.out = proc_out
        self.rc = rc
        self.took = took
        self.lines = proc_out.splitlines()
        self.status = {}
        self.body = {}
        self.sent = {}
        self.reset = {}
        for line in self.lines:
            w = line.split()
            if len(w) >= 4 and w[0] == "stream":
                sid = int(w[1])
                if w[2] == "status":
                    self.status[sid] = int(w[3])
                elif w[2] == "body":
                    self.body[sid] = (int(w[3]), w[5])
                elif w[2] == "sent":
                    self.sent[sid] = (int(w[3]), w[5])
                elif w[2] == "reset":
                    self.reset[sid] = (int(w[3], 16), int(w[5]))

    def has(self, prefix):
        return any(line.startswith(prefix) for line in self.lines)

    def find(self, pattern):
        for line in self.lines:
            m = re.match(pattern, line)
            if m:
                return m
        return None

    def __repr__(self):
        # The unremarkable lines left out: what went wrong stays readable.
        odd = [x for x in self.lines if not re.match(
            r"stream \d+ (status 200|body |sent )", x)]
        return "rc %s in %.2f s:\n%s" % (self.rc, self.took, "\n".join(odd))


def url(port, path):
    return "https://127.0.0.1:%d%s" % (port, path)


def client_args(method, port, path, *opts, timeout_ms=10000):
    return [CLIENT, "--timeout-ms", str(int(timeout_ms * SLACK))] + \
        list(opts) + [method, url(port, path)]


def h3(method, port, path, *opts, timeout_ms=10000):
    t0 = time.monotonic()
    p = subprocess.run(client_args(method, port, path, *opts,
                                   timeout_ms=timeout_ms),
                       capture_output=True, text=True,
                       timeout=timeout_ms * SLACK / 1000 + 10)
    return Run(p.stdout, p.returncode, time.monotonic() - t0)


def pattern(n):
    """The client's POST body: byte i is i % 251."""
    return (bytes(range(251)) * (n // 251 + 1))[:n]


def settle_active(port, want, within=3.0):
    """/stats over one keep-alive TCP connection (counted itself) until
    active_connections is `want`; the last figure."""
    deadline = time.monotonic() + within * SLACK
    with Conn(port) as c:
        while True:
            got = stats_from(c)["active_connections"]
            if got == want or time.monotonic() > deadline:
                return got
            time.sleep(0.05)


def setup():
    global srv, cert, key
    if not os.access(CLIENT, os.X_OK):
        return  # every case skips
    cert, key = make_cert()
    # Short enough for a stall to show, long enough for 150 uploads at
    # once on a loaded machine; the stalled client's case has its own
    # server with a second.
    srv = start("--body-timeout-ms", "5000")


def need():
    if srv is None:
        raise Skip("no h3client (built without HTTP/3)")


@case
def download_byte_exact():
    need()
    n = 1000000
    r = h3("GET", srv.quic_port, "/big?bytes=%d" % n)
    eq(r.rc, 0, "exit status (%r)" % r)
    eq(r.status.get(0), 200, "status")
    eq(r.body.get(0), (n, hashlib.sha256(b"x" * n).hexdigest()), "body")


@case
def download_not_stalled():
    need()
    # 1 MB over loopback takes 40 ms (HTTP/2 from the same reference server:
    # 10 ms). A stall shows as whole seconds: the pacing timer's callback
    # (on_timer in lib/quic/conn.c) only marks the connection dirty, and the
    # dirty list is flushed in the check phase, after a poll that then blocks
    # to the next timer (about a second), so each paced burst waits for it.
    n = 1000000
    took = []
    for _ in range(3):
        r = h3("GET", srv.quic_port, "/big?bytes=%d" % n)
        eq(r.body.get(0), (n, hashlib.sha256(b"x" * n).hexdigest()),
           "body (%r)" % r)
        took.append(r.took)
    check(sum(took) < 1.5 * SLACK,
          "3 downloads of 1 MB took %s s" % ", ".join("%.2f" % t
                                                       for t in took))


@case(timeout=90)
def nat_rebinding_mid_download():
    """An 8 MiB download whose client moves to a new UDP port (a NAT
    rebinding: ngtcp2 is told the new local address and migrates
    nothing) after 40 kB, 1 MB and 6 MB: the server notices the new
    address from the client's next packet, validates it and sends the
    rest there. The old socket is closed, so a body that completes came
    over the new path. With 1 worker and with 4, where the new port may
    hash to another worker's socket and the datagrams are forwarded."""
    need()
    n = 8 << 20
    want = (n, hashlib.sha256(b"x" * n).hexdigest())
    four = start("--workers", "4")
    try:
        for s in (srv, four):
            for after in (40000, 1000000, 6000000):
                r = h3("GET", s.quic_port, "/big?bytes=%d" % n,
                       "--rebind-after", str(after), timeout_ms=20000)
                check(r.has("rebound to port"), "no rebinding (%r)" % r)
                eq(r.rc, 0, "exit status (%r)" % r)
                eq(r.status.get(0), 200, "status")
                eq(r.body.get(0), want, "body after a rebinding at %d "
                   "bytes (%r)" % (after, r))
        four.check_alive()
    finally:
        four.stop()


@case(timeout=60)
def rapid_reset_closes_with_excessive_load():
    """Streams reset as soon as their HEADERS went out (CVE-2023-44487),
    on a route that never answers, so that every reset cancels a request
    in progress (one after the whole response is not counted): past the
    reset budget (core/mux.h: 400 at once, HTTP/2's too) the connection
    closes with H3_EXCESSIVE_LOAD (0x107); 300 such streams stay within
    it, and the server answers the next client."""
    need()
    r = h3("GET", srv.quic_port, "/never", "-n", "2000", "--rapid-reset")
    check(r.has("closed app 0x107"), "no H3_EXCESSIVE_LOAD close (%r)" % r)
    r = h3("GET", srv.quic_port, "/never", "-n", "300", "--rapid-reset")
    eq(r.rc, 0, "300 resets: exit status (%r)" % r)
    check(not r.has("closed"), "300 resets closed the connection (%r)" % r)
    r = h3("GET", srv.quic_port, "/")
    eq(r.status.get(0), 200, "the next client (%r)" % r)


@case
def upload_byte_exact():
    need()
    n = 300000
    want = hashlib.sha256(pattern(n)).hexdigest()
    r = h3("POST", srv.quic_port, "/echo", "--body-size", str(n))
    eq(r.rc, 0, "exit status (%r)" % r)
    eq(r.sent.get(0), (n, want), "what the client sent")
    eq(r.status.get(0), 200, "status")
    eq(r.body.get(0), (n, want), "the echo")
    # The sink counts what arrived.
    r = h3("POST", srv.quic_port, "/upload", "--body-size", str(n))
    eq(r.body.get(0), (len(str(n)),
                       hashlib.sha256(str(n).encode()).hexdigest()),
       "/upload's count (%r)" % r)


@case
def oversized_header_431():
    need()
    # The reference server's max_head_size is 16 KiB: one field of 20 000
    # bytes.
    r = h3("GET", srv.quic_port, "/", "--header-bytes", "20000")
    eq(r.rc, 0, "exit status (%r)" % r)
    eq(r.status.get(0), 431, "status (%r)" % r)
    check(not r.has("closed"), "the connection was closed: %r" % r)
    # Just under the limit still passes.
    r = h3("GET", srv.quic_port, "/", "--header-bytes", "8000")
    eq(r.status.get(0), 200, "status under the limit (%r)" % r)


@case
def huge_field_value_costs_only_its_stream():
    need()
    # One field of 128 KiB: its Huffman-coded value (80 KiB) is over
    # nghttp3 0.8's 64 KiB cap on one value, and nghttp3_conn_read_stream
    # fails with NGHTTP3_ERR_QPACK_HEADER_TOO_LARGE, which is fatal to the
    # whole connection unless the adapter stops the stream first. The head
    # is over max_head_size whatever nghttp3 does: the answer is 431 (or a
    # reset of that stream), and the connection lives (RFC 9114 4.2.2: a
    # stream error at most).
    r = h3("GET", srv.quic_port, "/", "--header-bytes", "131072")
    check(not r.has("closed"), "the connection was closed: %r" % r)
    check(r.status.get(0) == 431 or 0 in r.reset,
          "neither 431 nor a stream reset: %r" % r)


@case
def too_many_headers_431():
    need()
    # The reference server's max_header_count is 100.
    r = h3("GET", srv.quic_port, "/", "--headers", "150")
    eq(r.rc, 0, "exit status (%r)" % r)
    eq(r.status.get(0), 431, "status (%r)" % r)
    check(not r.has("closed"), "the connection was closed: %r" % r)
    r = h3("GET", srv.quic_port, "/", "--headers", "50")
    eq(r.status.get(0), 200, "status under the limit (%r)" % r)


@case(timeout=60)
def aborted_uploads_give_their_bytes_back():
    """60 uploads of 16 KiB on one connection, one after another, each cut
    short by its handler inside the body callback (POST /upload?abort=1:
    tern_response_abort, the stream reset there and then). The bytes that
    callback took were neither held nor owed when the stream closed, and
    went back to no window: with the connection's window pinned at 64 KiB
    the connection ran out of credit after a few dozen such uploads and
    the rest waited for ever. Every one is reset now."""
    need()
    with start("--max-conn-window", "65536") as s:
        r = h3("POST", s.quic_port, "/upload?abort=1", "-n", "60",
               "--serial", "--body-size", "16384", timeout_ms=20000)
        check(r.find(r"done requests 60 finished 60") is not None,
              "not every upload finished: %r" % r)
        eq(len(r.reset), 60, "streams reset (%r)" % r)
        eq(sorted({code for code, _ in r.reset.values()}), [0x102],
           "reset with H3_INTERNAL_ERROR")


@case
def reset_mid_body_keeps_connection():
    need()
    before = settle_active(srv.port, 1)
    eq(before, 1, "active connections before (only /stats')")
    r = h3("POST", srv.quic_port, "/upload", "--reset-mid-body", "100000")
    eq(r.rc, 0, "exit status (%r)" % r)
    check(r.has("stream 0 cancelled"), "upload not reset: %r" % r)
    check(not r.has("closed"), "the connection was closed: %r" % r)
    # The next request on the same connection (stream 4) is served.
    eq(r.status.get(4), 200, "GET / after the reset (%r)" % r)
    eq(r.body.get(4), (13, HELLO_SHA), "its body")
    eq(settle_active(srv.port, 1), 1,
       "active connections after the client left")


@case
def client_that_never_reads():
    need()
    n = 1000000
    # A response the client does not take is reset after a second.
    s = start("--body-timeout-ms", "1000")
    t0 = time.monotonic()
    stalled = subprocess.Popen(
        client_args("GET", s.quic_port, "/big?bytes=%d" % n, "--no-read"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Meanwhile another client is served, and at once.
        time.sleep(0.2)
        other = h3("GET", s.quic_port, "/")
        eq(other.status.get(0), 200, "another client (%r)" % other)
        check(other.took < 2.0 * SLACK, "another client waited %.2f s"
              % other.took)
        out, _ = stalled.communicate(timeout=20 * SLACK)
    finally:
        if stalled.poll() is None:
            stalled.kill()
            stalled.wait()
        shared_reference_teardown(s)
    took = time.monotonic() - t0
    r = Run(out, stalled.returncode, took)
    eq(r.rc, 0, "exit status (%r)" % r)
    eq(r.status.get(0), 200, "status (%r)" % r)
    check(0 in r.reset, "the server never reset the stream: %r" % r)
    code, got = r.reset[0]
    eq(code, H3_REQUEST_CANCELLED, "reset code")
    check(got < n, "the whole body came (%d bytes)" % got)
    # body_timeout_ms is 1 s: reset after it, not long after.
    check(0.9 <= took <= 4.0 * SLACK, "reset after %.2f s" % took)
    check(not r.has("closed"), "the connection was closed: %r" % r)


@case
def many_streams():
    need()
    n = 250
    r = h3("GET", srv.quic_port, "/", "--streams", str(n))
    eq(r.rc, 0, "exit status (%r)" % r)
    # ngtcp2 enforces the server's MAX_STREAMS on the client: 100 at once,
    # then one more as each completes.
    check(r.has("blocked after 100"), "not blocked at 100: %r" % r.lines[:3])
    m = r.find(r"done requests (\d+) finished (\d+) max-open (\d+)$")
    check(m is not None, "no summary: %r" % r)
    eq((int(m.group(1)), int(m.group(2))), (n, n), "requests, finished")
    check(int(m.group(3)) <= 100, "more than 100 open: %s" % m.group(3))
    eq(sorted(set(r.status.values())), [200], "statuses")
    eq(len(r.status), n, "answered")
    check(all(b == (13, HELLO_SHA) for b in r.body.values()), "bodies")
    # And with bodies: uploads on 150 streams, each echoed exactly.
    r = h3("POST", srv.quic_port, "/echo", "-n", "150", "--body-size",
           "10000")
    eq(r.rc, 0, "exit status (%r)" % r.lines[-3:])
    want = (10000, hashlib.sha256(pattern(10000)).hexdigest())
    eq(len(r.body), 150, "echoes (%r)" % r)
    check(all(b == want for b in r.body.values()), "echoed bodies")


@case
def idle_connection_closed_by_server():
    need()
    s = start("--idle-timeout-ms", "1000")
    try:
        eq(settle_active(s.port, 1), 1, "active connections before")
        r = h3("GET", s.quic_port, "/", "--idle", timeout_ms=8000)
        eq(r.rc, 0, "exit status (%r)" % r)
        eq(r.status.get(0), 200, "status")
        # QUIC's idle timeout ends a connection silently (RFC 9000 10.1):
        # the client sees its own idle expiry, or a CONNECTION_CLOSE.
        check(r.has("idle-close") or r.has("closed"), "not closed: %r" % r)
        m = r.find(r"closed (\w+) 0x([0-9a-f]+)$")
        if m:
            suite.note("server closed: %s 0x%s" % (m.group(1), m.group(2)))
        check(r.took <= 5.0 * SLACK, "closed after %.2f s" % r.took)
        eq(settle_active(s.port, 1), 1, "the server let the connection go")
    finally:
        shared_reference_teardown(s)


@case
def length_mismatch_resets_only_its_stream():
    """A request whose DATA runs past its Content-Length is malformed: a
    stream error (RFC 9114 4.1.2), H3_MESSAGE_ERROR on that stream, while
    the connection's next request is answered (it once closed the whole
    connection with H3_MESSAGE_ERROR)."""
    need()
    for declared, sent in ((10, 1000), (5000, 1000)):
        r = h3("POST", srv.quic_port, "/upload", "--body-size", str(sent),
               "--first-header", "content-length: %d" % declared, "-n", "2")
        eq(r.reset.get(0, (None,))[0], 0x10e,
           "stream 0 reset with H3_MESSAGE_ERROR (%r)" % r)
        eq(r.status.get(4), 200, "the next request (%r)" % r)
        check(not r.has("closed"), "the connection was closed (%r)" % r)
        eq(r.rc, 0, "exit status (%r)" % r)


@case
def request_knows_tls_and_host():
    """Over HTTP/3 the request is TLS 1.3 (tern_request_tls answers
    0x0304) and its host, carried as :authority, is what
    tern_request_header(r, "host") answers (the reference server's
    /whoami; test_tls.py checks HTTP/1.1 and HTTP/2)."""
    need()
    with tempfile.NamedTemporaryFile() as f:
        r = h3("GET", srv.quic_port, "/whoami", "--body-out", f.name)
        eq(r.status.get(0), 200, "status (%r)" % r)
        got = open(f.name).read()
        check(re.match(r"tls 304 host 127\.0\.0\.1:%d proto 30 name "
                       r"127\.0\.0\.1 cipher TLS_(AES|CHACHA20)\w+$"
                       % srv.quic_port, got), "the handler's view: %r" % got)


@case
def invalid_fields_reset_only_their_stream():
    """A field whose name is not a token, or whose value holds CR, LF, NUL
    or whitespace at an end, makes the request malformed (RFC 9114 4.2,
    10.3): its stream is reset with H3_MESSAGE_ERROR and its handler never
    runs, while the connection's next request is answered. nghttp3 0.8
    drops such a field without a word, and the request once ran without
    it. The same holds where the client's QPACK encoder puts the field in
    the dynamic table and later requests refer to it; valid fields
    referred to that way still pass."""
    need()
    s = start()
    try:
        bad = ("x-a: a\\rb", "x-a: a\\nb", "x-a: a\\0b", "x a: 1", "x(a: 1",
               "x-a: b ", "x-a:\tb")
        for f in bad:
            r = h3("GET", s.quic_port, "/block?ms=0", "--first-header", f,
                   "-n", "2", "--serial")
            eq(r.reset.get(0, (None,))[0], 0x10e,
               "%r: stream 0 reset with H3_MESSAGE_ERROR (%r)" % (f, r))
            eq(r.status.get(4), 200, "%r: the next request (%r)" % (f, r))
            check(not r.has("closed"), "%r: connection closed (%r)" % (f, r))
            eq(r.rc, 0, "%r: exit status (%r)" % (f, r))
        r = h3("GET", s.quic_port, "/block?ms=0", "--serial", "-n", "3",
               "--header", "user-agent: bad\\ragent")
        eq(sorted(k for k, v in r.reset.items() if v[0] == 0x10e), [0, 4, 8],
           "every request with the indexed bad field reset (%r)" % r)
        check(not r.has("closed"), "connection closed (%r)" % r)
        r = h3("GET", s.quic_port, "/block?ms=0", "--serial", "-n", "4",
               "--header", "user-agent: a-fine-agent",
               "--header", "x-custom: abc")
        eq([r.status.get(i) for i in (0, 4, 8, 12)], [200] * 4,
           "valid fields from the dynamic table (%r)" % r)
        with Conn(s.port) as c:
            runs = int(c.request("GET", "/block-runs").body)
        eq(runs, len(bad) + 4, "/block handlers that ran")
    finally:
        shared_reference_teardown(s)


@case(timeout=60)
def blocking_queue_drops_cancelled_streams():
    """Blocking requests whose streams the client cancels while they wait
    for a pool thread are dropped, not run for nobody: 300 of
    /block?ms=20 cancelled at once leave the pool free for the next
    request."""
    need()
    s = start()
    try:
        for _ in range(3):
            r = h3("GET", s.quic_port, "/block?ms=20", "-n", "100",
                   "--cancel-all")
            eq(r.rc, 0, "exit status (%r)" % r)
            eq(sum(1 for x in r.lines if x.endswith(" cancelled")), 100,
               "streams cancelled (%r)" % r)
        r = h3("GET", s.quic_port, "/block?ms=0")
        eq(r.status.get(0), 200, "the request that stayed (%r)" % r)
        with Conn(s.port) as c:
            runs = int(c.request("GET", "/block-runs").body)
        suite.note("%d of 300 cancelled streams' handlers ran" % (runs - 1))
        check(runs <= 100, "%d /block handlers ran for 300 cancelled "
              "streams" % (runs - 1))
    finally:
        shared_reference_teardown(s)


def teardown():
    if srv is not None:
        shared_reference_teardown(srv)


if __name__ == "__main__":
    suite.main(setup=setup, teardown=teardown)
