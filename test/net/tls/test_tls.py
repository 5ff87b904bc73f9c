#!/usr/bin/env python3
"""HTTP/1.1 and HTTP/2 over TLS against the reference server: handshakes, ALPN,
SNI among several certificates, session tickets, TLS versions, hot certificate
reload during traffic, configuration errors, and bad clients. Every case runs
against the engine TERN_TEST_TLS_ENGINE names (meson runs the file once per
engine the build has; unset: the library's default), which the reference server
reports on stderr ("tls engine NAME")."""
import hashlib
import os
import re
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Conn, Server, Skip, Suite, check, eq, sanitized, stats_from

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-tls-")


def make_cert(name, cn, sans, kind="ec"):
    """A self-signed certificate and key made with openssl, in tmp."""
    cert = os.path.join(tmp, name + ".crt")
    key = os.path.join(tmp, name + ".key")
    alg = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
           if kind == "ec" else ["-newkey", "rsa:2048"])
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                    "-subj", "/CN=" + cn, "-keyout", key, "-out", cert,
                    "-addext", "subjectAltName=" +
                    ",".join("DNS:" + s for s in sans)] + alg,
                   check=True, capture_output=True)
    return cert, key


ENGINE = None  # the engine serving: "gnutls" or "mbedtls" (from reference)


def start(cert, key, *extra):
    s = Server("reference", ["--workers", "1", "--tls-port", "0",
                             "--cert", cert, "--key", key] + list(extra))
    m = re.match(r"tls listening on (\d+)$", s.next_line())
    check(m is not None, "no tls port line")
    s.tls_port = int(m.group(1))
    deadline = time.monotonic() + 5
    while True:
        m = re.search(r"tls engine (\w+)", s.stderr_text())
        if m or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    check(m is not None, "no tls engine line: %r" % s.stderr_text())
    s.engine = m.group(1)
    return s


def best_version():
    return "TLSv1.3" if ENGINE == "gnutls" else "TLSv1.2"


def client_ctx(alpn=None):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


def tls_connect(port, ctx=None, sni=None, session=None):
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    # Without it the request waits behind the Finished record for the
    # server's delayed ACK (Nagle): about 40 ms per connection.
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return (ctx or client_ctx()).wrap_socket(raw, server_hostname=sni,
                                             session=session)


def peer_cn(sock):
    der = sock.getpeercert(binary_form=True)
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout",
                          "-subject"], input=der, capture_output=True,
                         check=True).stdout.decode()
    return out.strip().split("CN = ")[-1].split("CN=")[-1]


def read_response(sock):
    """One response with Content-Length from a blocking socket."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("closed before the head: %r" % buf)
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    n = int(m.group(1)) if m else 0
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("closed in the body")
        rest += chunk
    return head, rest[:n], rest[n:]


GET = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"

ec_cert = ec_key = None
srv = None


def setup():
    global ec_cert, ec_key, srv, ENGINE
    ec_cert, ec_key = make_cert("a", "a.test", ["a.test", "localhost"])
    srv = start(ec_cert, ec_key)
    ENGINE = srv.engine
    want = os.environ.get("TERN_TEST_TLS_ENGINE")
    if want and want != "auto":
        eq(ENGINE, want, "the engine serving")
    suite.note("engine: %s" % ENGINE)


@case
def https_get_and_alpn():
    with tls_connect(srv.tls_port, client_ctx(["http/1.1"])) as s:
        eq(s.selected_alpn_protocol(), "http/1.1", "ALPN")
        eq(s.version(), best_version(), "version")
        s.sendall(GET)
        head, body, _ = read_response(s)
        check(head.startswith(b"HTTP/1.1 200 "), "status %r" % head[:20])
        eq(body, b"Hello, World!", "body")
    # No ALPN at all: HTTP/1.1 still.
    with tls_connect(srv.tls_port) as s:
        eq(s.selected_alpn_protocol(), None, "no ALPN offered")
        s.sendall(GET)
        eq(read_response(s)[1], b"Hello, World!", "body without ALPN")


@case
def http1_only_listeners():
    """http1_only (the reference server's --http1-port): over TLS, ALPN
    offers http/1.1 alone, so a client offering h2 first gets HTTP/1.1
    (curl --http2 too); in the clear, neither the h2c preface nor
    Upgrade: h2c starts HTTP/2. With mbedTLS (its ALPN list belongs to the
    certificate set) the listener is refused with TERN_ENOTSUP."""
    s = Server("reference", ["--workers", "1", "--tls-port", "0", "--cert",
                             ec_cert, "--key", ec_key, "--http1-port", "0"])
    if ENGINE == "mbedtls":
        rc = s.wait(10)
        check(rc not in (0, None), "mbedTLS: refused (rc %r)" % rc)
        check("not supported by the mbedtls engine" in s.stderr_text(),
              "mbedTLS: the reason (%r)" % s.stderr_text()[-300:])
        s.stop()
        return
    with s:
        m = re.match(r"tls listening on (\d+)$", s.next_line())
        check(m is not None, "no tls port line")
        tls_port = int(m.group(1))
        ports = {}
        while len(ports) < 2:
            m = re.match(r"(http1|tls-http1) listening on (\d+)$",
                         s.next_line())
            if m:
                ports[m.group(1)] = int(m.group(2))
        with tls_connect(ports["tls-http1"],
                         client_ctx(["h2", "http/1.1"])) as c:
            eq(c.selected_alpn_protocol(), "http/1.1", "ALPN, h2 offered")
            c.sendall(GET)
            eq(read_response(c)[1], b"Hello, World!", "body")
        with tls_connect(ports["tls-http1"], client_ctx(["h2"])) as c:
            eq(c.selected_alpn_protocol(), None, "ALPN, h2 alone offered")
        out = subprocess.run(["curl", "-sk", "--http2", "-w",
                              " %{http_version}", "https://127.0.0.1:%d/"
                              % ports["tls-http1"]],
                             capture_output=True, check=True).stdout
        eq(out, b"Hello, World! 1.1", "curl --http2 on the HTTP/1.1 port")
        # the TLS port beside it still offers h2
        with tls_connect(tls_port, client_ctx(["h2", "http/1.1"])) as c:
            eq(c.selected_alpn_protocol(), "h2", "ALPN on the other port")
        out = subprocess.run(["curl", "-s", "--http2-prior-knowledge",
                              "-o", "/dev/null", "-w", "%{http_code}",
                              "http://127.0.0.1:%d/" % ports["http1"]],
                             capture_output=True).stdout
        check(out != b"200", "h2c prior knowledge refused (got %r)" % out)
        with Conn(ports["http1"]) as c:
            c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            eq(c.response().status, 505, "the preface as HTTP/1.1")
        out = subprocess.run(["curl", "-s", "--http2", "-w",
                              " %{http_version}", "http://127.0.0.1:%d/"
                              % ports["http1"]],
                             capture_output=True, check=True).stdout
        eq(out, b"Hello, World! 1.1", "Upgrade: h2c ignored")


@case
def alpn_h2():
    # With HTTP/2 built, ALPN prefers h2; the same handlers answer.
    with tls_connect(srv.tls_port, client_ctx(["h2", "http/1.1"])) as s:
        eq(s.selected_alpn_protocol(), "h2", "ALPN")
    out = subprocess.run(["curl", "-sk", "--http2", "-w", " %{http_version}",
                          "https://127.0.0.1:%d/" % srv.tls_port],
                         capture_output=True, check=True).stdout
    eq(out, b"Hello, World! 2", "curl over h2")
    out = subprocess.run(["nghttp", "-n", "-s",
                          "https://127.0.0.1:%d/" % srv.tls_port],
                         capture_output=True, timeout=20)
    eq(out.returncode, 0, "nghttp over TLS")


@case(timeout=60)
def h2_uploads_over_tls():
    # Several 1 MiB uploads on one HTTP/2 connection over TLS: TLS can hold
    # more plaintext than the read buffer takes, and it must be decrypted
    # once the adapter has made room, or the upload stalls for good.
    path = os.path.join(tmp, "1m.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
    out = subprocess.run(["h2load", "-n", "6", "-c", "1", "-m", "2", "-d",
                          path, "https://127.0.0.1:%d/upload" % srv.tls_port],
                         capture_output=True, timeout=40).stdout.decode()
    check("6 succeeded" in out and "6 2xx" in out, "h2load: %s" % out[-600:])


@case
def curl_https():
    out = subprocess.run(["curl", "-sk", "--http1.1", "-w", " %{http_version}",
                          "https://127.0.0.1:%d/" % srv.tls_port],
                         capture_output=True, check=True).stdout
    eq(out, b"Hello, World! 1.1", "curl")


@case
def request_knows_tls_and_host():
    """tern_request_tls and tern_request_header(r, "host") answer the same
    way on every carrier (the reference server's /whoami): the TLS version
    over HTTPS, 0 in the clear, and the host from Host on HTTP/1.1 and
    from :authority on HTTP/2, which has no Host field."""
    tls13 = best_version() == "TLSv1.3"
    want_tls = "304" if tls13 else "303"
    for args, tls, proto in ((["--http1.1"], want_tls, "11"),
                             (["--http2"], want_tls, "20"),
                             (["--http1.1"], "0", "11"),
                             (["--http2-prior-knowledge"], "0", "20")):
        port = srv.tls_port if tls != "0" else srv.port
        scheme = "https" if tls != "0" else "http"
        out = subprocess.run(["curl", "-sk"] + args +
                             ["%s://localhost:%d/whoami" % (scheme, port)],
                             capture_output=True, timeout=20).stdout
        m = re.match(r"tls %s host localhost:%d proto %s name localhost "
                     r"cipher (\S+)$" % (tls, port, proto), out.decode())
        check(m is not None, "curl %s %s: %r" % (scheme, args[0], out))
        # tern_request_tls_cipher: the engine's name for the suite over
        # TLS (GnuTLS: IANA's TLS_..., mbedTLS: TLS-...), "-" in the clear.
        check(re.match(r"TLS[_-][A-Z0-9_-]+$", m.group(1)) if tls != "0"
              else m.group(1) == "-", "cipher %r" % m.group(1))


@case
def keep_alive_and_pipelining():
    # Sixteen requests in one write, then one more on the same connection.
    with tls_connect(srv.tls_port) as s:
        s.sendall(GET * 16)
        buf = b""
        while buf.count(b"\r\n\r\nHello, World!") < 16:
            chunk = s.recv(65536)
            check(chunk, "closed after %d responses"
                  % buf.count(b"Hello, World!"))
            buf += chunk
        eq(buf.count(b"HTTP/1.1 200 OK\r\n"), 16, "sixteen responses")
        s.sendall(GET)
        eq(read_response(s)[1], b"Hello, World!", "the seventeenth")


@case(timeout=60)
def upload_64mib_by_hash():
    data = os.urandom(1 << 20) * 64
    want = hashlib.sha256(data).hexdigest()
    path = os.path.join(tmp, "up.bin")
    with open(path, "wb") as f:
        f.write(data)
    out = subprocess.run(["curl", "-sk", "--data-binary", "@" + path,
                          "https://127.0.0.1:%d/echo" % srv.tls_port],
                         capture_output=True, check=True, timeout=50).stdout
    eq(len(out), len(data), "echoed length")
    eq(hashlib.sha256(out).hexdigest(), want, "sha256")


@case(timeout=60)
def new_connections_allocate_nothing():
    # A TLS connection's state comes from the worker's pools, as a
    # cleartext one's does: once warm, 300 connections (full handshakes,
    # one request each) leave tern's allocator counters where they were.
    # The engines' own memory (sessions, record buffers) is theirs and
    # goes to the C library, outside tern's hook.
    if sanitized():
        raise Skip("free lists are off under AddressSanitizer")
    st = Conn(srv.port)
    try:
        def run(n):
            for _ in range(n):
                with tls_connect(srv.tls_port) as s:
                    s.sendall(GET)
                    eq(read_response(s)[1], b"Hello, World!", "body")
        run(50)
        a1 = stats_from(st)
        run(300)
        deadline = time.monotonic() + 2
        while True:
            a2 = stats_from(st)
            if a2["connections"] - a1["connections"] >= 300 or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.02)
        suite.note("300 TLS connections: allocations +%d (%d bytes)" % (
            a2["allocations"] - a1["allocations"],
            a2["bytes_allocated"] - a1["bytes_allocated"]))
        check(a2["connections"] - a1["connections"] >= 300,
              "connections grew by %d" % (a2["connections"] - a1["connections"]))
        check(a2["allocations"] - a1["allocations"] <= 4,
              "%d allocations for 300 TLS connections" % (
                  a2["allocations"] - a1["allocations"]))
    finally:
        st.close()


@case
def session_ticket_resumes():
    ctx = client_ctx()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with tls_connect(srv.tls_port, ctx) as s:
        s.sendall(GET)
        read_response(s)
        sess = s.session
        check(sess is not None and sess.has_ticket, "a ticket was issued")
    with tls_connect(srv.tls_port, ctx, session=sess) as s:
        check(s.session_reused, "the second handshake resumed")
        s.sendall(GET)
        eq(read_response(s)[1], b"Hello, World!", "body after resumption")


@case
def tls_versions():
    """GnuTLS speaks TLS 1.3, and 1.2 to a client that has no more;
    mbedTLS speaks 1.2 only. A set with a minimum of 1.3 refuses a 1.2
    client (GnuTLS), or cannot be made (mbedTLS: TERN_ENOTSUP)."""
    with tls_connect(srv.tls_port) as s:
        eq(s.version(), best_version(), "version by default")
    ctx = client_ctx()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with tls_connect(srv.tls_port, ctx) as s:
        eq(s.version(), "TLSv1.2", "version with a 1.2 client")
        s.sendall(GET)
        eq(read_response(s)[1], b"Hello, World!", "body over 1.2")
    if ENGINE != "gnutls":
        p = subprocess.run(
            [os.path.join(os.environ.get("TERN_BUILD", "build"), "examples",
                          "reference"), "--port", "0", "--tls-port", "0",
             "--tls-engine", ENGINE, "--tls-min", "1.3",
             "--cert", ec_cert, "--key", ec_key],
            capture_output=True, timeout=10)
        eq(p.returncode, 1, "exit status with --tls-min 1.3")
        check(b"not built" in p.stderr, "message: %r" % p.stderr)
        return
    s13 = start(ec_cert, ec_key, "--tls-min", "1.3")
    try:
        with tls_connect(s13.tls_port) as s:
            eq(s.version(), "TLSv1.3", "version with a 1.3 minimum")
        try:
            with tls_connect(s13.tls_port, ctx) as s:
                raise AssertionError("a 1.2 client got %s" % s.version())
        except (ssl.SSLError, ConnectionError):
            pass
        with tls_connect(s13.tls_port) as s:
            s.sendall(GET)
            eq(read_response(s)[1], b"Hello, World!", "served afterwards")
    finally:
        eq(s13.stop(), 0, "reference exit status")


@case
def resumption_by_openssl():
    """openssl s_client saves the session (a ticket) and resumes it:
    "Reused" on the second connection, at the engine's best version."""
    sess = os.path.join(tmp, "sess-%s.pem" % ENGINE)
    base = ["openssl", "s_client", "-ign_eof", "-connect",
            "127.0.0.1:%d" % srv.tls_port, "-servername", "a.test"]
    get10 = b"GET / HTTP/1.0\r\n\r\n"  # the server closes after it
    first = subprocess.run(base + ["-sess_out", sess], input=get10,
                           capture_output=True, timeout=10).stdout.decode()
    check("Hello, World!" in first, "first: %s" % first[-300:])
    check(("TLSv1.3" if ENGINE == "gnutls" else "TLSv1.2") in first,
          "version in: %s" % first[-600:])
    second = subprocess.run(base + ["-sess_in", sess], input=get10,
                            capture_output=True, timeout=10).stdout.decode()
    check("Reused" in second, "not resumed: %s" % second[-800:])
    check("Hello, World!" in second, "second: %s" % second[-300:])


@case
def gnutls_cli_get():
    """GnuTLS's own client gets the answer, at the engine's best version."""
    p = subprocess.Popen(["gnutls-cli", "--insecure", "--port",
                          str(srv.tls_port), "127.0.0.1"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        p.stdin.write(GET)
        p.stdin.flush()
        out = b""
        deadline = time.monotonic() + 10
        while b"Hello, World!" not in out and time.monotonic() < deadline:
            r, _, _ = select.select([p.stdout], [], [], 0.5)
            if r:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
    finally:
        p.kill()
        p.wait()
    text = out.decode("utf-8", "replace")
    check("Hello, World!" in text, "no answer: %s" % text[-600:])
    want = "TLS1.3" if ENGINE == "gnutls" else "TLS1.2"
    check("(" + want in text, "not %s: %s" % (want, text[-900:]))


@case
def sni_picks_certificate():
    # Three certificates, an RSA one among them; the first is the default.
    a = make_cert("sa", "one.test", ["one.test"])
    b = make_cert("sb", "two.test", ["two.test", "*.wild.test"], "rsa")
    s = start(a[0], a[1], "--cert", b[0], "--key", b[1])
    try:
        for name, want in (("one.test", "one.test"),
                           ("two.test", "two.test"),
                           ("x.wild.test", "two.test"),
                           ("nobody.test", "one.test"), (None, "one.test")):
            with tls_connect(s.tls_port, sni=name) as t:
                eq(peer_cn(t), want, "certificate for SNI %r" % name)
                t.sendall(GET)
                eq(read_response(t)[1], b"Hello, World!", "body")
    finally:
        eq(s.stop(), 0, "reference exit status")


@case(timeout=30)
def hot_reload_during_traffic():
    cert, key = make_cert("r1", "before.test", ["before.test"])
    s = start(cert, key)
    try:
        stop = threading.Event()
        errors = []
        done = [0]

        def traffic():
            # New connections all through the reload: none may fail.
            while not stop.is_set():
                try:
                    with tls_connect(s.tls_port) as t:
                        t.sendall(GET)
                        if read_response(t)[1] != b"Hello, World!":
                            errors.append("bad body")
                        done[0] += 1
                except Exception as e:  # noqa: B902
                    errors.append(repr(e))
        live = tls_connect(s.tls_port)
        live.sendall(GET)
        read_response(live)
        eq(peer_cn(live), "before.test", "first certificate")
        th = threading.Thread(target=traffic)
        th.start()
        time.sleep(0.2)
        c2, k2 = make_cert("r2", "after.test", ["after.test"], "rsa")
        os.replace(c2, cert)
        os.replace(k2, key)
        s.signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while True:
            with tls_connect(s.tls_port) as t:
                if peer_cn(t) == "after.test":
                    break
            check(time.monotonic() < deadline, "new certificate not served")
            time.sleep(0.05)
        time.sleep(0.2)
        stop.set()
        th.join(10)
        eq(errors, [], "failures during the reload")
        check(done[0] > 5, "only %d requests during the reload" % done[0])
        # The connection made before the reload still works.
        live.sendall(GET)
        eq(read_response(live)[1], b"Hello, World!", "old connection")
        live.close()
    finally:
        eq(s.stop(), 0, "reference exit status")


@case
def config_errors_are_reported_at_start():
    a_cert, a_key = make_cert("e1", "e1.test", ["e1.test"])
    b_cert, b_key = make_cert("e2", "e2.test", ["e2.test"])
    junk = os.path.join(tmp, "junk.pem")
    with open(junk, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64!\n"
                "-----END CERTIFICATE-----\n")
    cases = [
        (a_cert, b_key, "do not match"),
        (junk, a_key, "certificate"),
        (a_cert, junk, "private key"),
        (os.path.join(tmp, "missing.pem"), a_key, "missing.pem"),
    ]
    for cert, key, word in cases:
        p = subprocess.run(
            [os.path.join(os.environ.get("TERN_BUILD", "build"), "examples",
                          "reference"), "--port", "0", "--tls-port", "0",
             "--cert", cert, "--key", key],
            capture_output=True, timeout=10)
        eq(p.returncode, 1, "exit status for %s" % word)
        err = p.stderr.decode()
        check("tls:" in err and word in err, "log line for %s: %r"
              % (word, err))


@case
def handshake_timeout_and_garbage():
    cert, key = make_cert("t", "t.test", ["t.test"])
    s = start(cert, key, "--head-timeout-ms", "500")
    try:
        raw = socket.create_connection(("127.0.0.1", s.tls_port), timeout=5)
        t0 = time.monotonic()
        check(raw.recv(100) == b"", "silent client closed")
        took = time.monotonic() - t0
        check(0.3 < took < 3, "closed after %.2f s" % took)
        raw.close()
        raw = socket.create_connection(("127.0.0.1", s.tls_port), timeout=5)
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not TLS
        data = b""
        try:
            while True:
                chunk = raw.recv(100)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
        check(b"Hello" not in data, "plain HTTP was answered over TLS port")
        raw.close()
        with tls_connect(s.tls_port) as t:
            t.sendall(GET)
            eq(read_response(t)[1], b"Hello, World!", "served afterwards")
    finally:
        eq(s.stop(), 0, "reference exit status")


@case(timeout=30)
def junk_refused_at_once():
    # Bytes that cannot open a TLS handshake record end the connection at
    # once, under both engines, long before the head timeout (10 s here):
    # a first byte over 127 (GnuTLS, built with SSL 2.0 hello support,
    # read it as an SSL 2.0 header and waited for its length), another
    # record type, another major version, a zero or oversized length.
    cases = [b"\xbc\x3b" + b"\x07" * 3000, b"\x8c\x5f" + b"j" * 3000,
             b"\x17\x03\x03\x00\x10" + b"j" * 16,
             b"\x16\x02\x00\x00\x10" + b"j" * 16,
             b"\x16\x03\x01\x00\x00", b"\x16\x03\x01\x40\x01" + b"j" * 100]
    for junk in cases:
        raw = socket.create_connection(("127.0.0.1", srv.tls_port), timeout=5)
        t0 = time.monotonic()
        raw.sendall(junk)
        try:
            while raw.recv(4096):
                pass
        except ConnectionResetError:
            pass
        except socket.timeout:
            raise AssertionError("%r...: not closed in 5 s" % junk[:5])
        took = time.monotonic() - t0
        raw.close()
        check(took < 2, "%r...: closed after %.2f s" % (junk[:5], took))
    # A real ClientHello whose record header comes a byte at a time is
    # answered with the server's handshake record, not refused.
    hello = client_hello_bytes()
    raw = socket.create_connection(("127.0.0.1", srv.tls_port), timeout=5)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(5):
        raw.sendall(hello[i:i + 1])
        time.sleep(0.02)
    raw.sendall(hello[5:])
    eq(raw.recv(3)[:2], b"\x16\x03", "the server's first record")
    raw.close()
    with tls_connect(srv.tls_port) as t:
        t.sendall(GET)
        eq(read_response(t)[1], b"Hello, World!", "served afterwards")


def client_hello_bytes():
    """A ClientHello made in memory by Python's TLS client."""
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_ctx().wrap_bio(inc, outg, server_hostname="t.test")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outg.read()


@case(timeout=30)
def handshake_trickle_closed_at_head_timeout():
    """A client trickling its ClientHello a byte every 200 ms is closed at
    the head timeout (500 ms here), like one trickling a request head:
    the handshake's bytes do not re-arm a timer (they used to re-arm the
    idle timer, which kept such a client connected for as long as it
    kept trickling)."""
    cert, key = make_cert("tr", "t.test", ["t.test"])
    s = start(cert, key, "--head-timeout-ms", "500")
    try:
        hello = client_hello_bytes()
        raw = socket.create_connection(("127.0.0.1", s.tls_port), timeout=5)
        t0 = time.monotonic()
        closed_at = None
        for b in hello[:40]:
            try:
                raw.sendall(bytes([b]))
            except OSError:
                closed_at = time.monotonic() - t0
                break
            r, _, _ = select.select([raw], [], [], 0.2)
            if r:
                try:
                    data = raw.recv(100)
                except OSError:
                    data = b""
                if not data:
                    closed_at = time.monotonic() - t0
                    break
        raw.close()
        check(closed_at is not None,
              "still connected after %.1f s of trickled handshake"
              % (time.monotonic() - t0))
        check(closed_at < 2.5, "closed after %.2f s" % closed_at)
        suite.note("closed after %.2f s of trickling" % closed_at)
    finally:
        eq(s.stop(), 0, "reference exit status")


@case
def close_notify_ends_close_delimited_body():
    """An HTTP/1.0 answer of unknown length ends with the connection; over
    TLS the server sends close_notify before closing, so a strict client
    (ragged EOFs not suppressed) reads a complete body and a clean end
    rather than a truncation error."""
    raw = socket.create_connection(("127.0.0.1", srv.tls_port), timeout=5)
    t = client_ctx().wrap_socket(raw, server_hostname="a.test",
                                 suppress_ragged_eofs=False)
    with t:
        t.sendall(b"GET /stream HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            try:
                chunk = t.recv(4096)
            except ssl.SSLEOFError as e:
                raise AssertionError("no close_notify before the close: %s "
                                     "after %r" % (e, data[-80:]))
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    check(head.startswith(b"HTTP/1.1 200"), "status: %r" % head[:40])
    check(b"content-length" not in head.lower() and
          b"chunked" not in head.lower(), "not close-delimited: %r" % head)
    eq(body, b"".join(b"chunk %d\n" % i for i in range(5)), "body")


def teardown():
    if srv is not None:
        eq(srv.stop(), 0, "reference exit status")


# ---- Client certificates (tern_tls_set_client_ca_file) --------------------

def client_pki():
    """A CA, a client certificate it signed (CN=alice, O=Example), and a
    self-signed one it did not."""
    ca_cert = os.path.join(tmp, "ca.crt")
    if not os.path.exists(ca_cert):
        ca_key = os.path.join(tmp, "ca.key")
        run = lambda *a: subprocess.run(list(a), check=True,
                                        capture_output=True)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        run("openssl", "req", "-x509", "-nodes", "-days", "2", "-subj",
            "/CN=Test Client CA", "-keyout", ca_key, "-out", ca_cert, *ec)
        csr = os.path.join(tmp, "alice.csr")
        run("openssl", "req", "-nodes", "-subj", "/O=Example/CN=alice",
            "-keyout", os.path.join(tmp, "alice.key"), "-out", csr, *ec)
        run("openssl", "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey",
            ca_key, "-CAcreateserial", "-days", "2", "-out",
            os.path.join(tmp, "alice.crt"))
        # A server's certificate from the same CA: its Extended Key Usage
        # leaves client authentication out.
        ext = os.path.join(tmp, "server-only.ext")
        with open(ext, "w") as f:
            f.write("extendedKeyUsage=serverAuth\n")
        csr = os.path.join(tmp, "srv.csr")
        run("openssl", "req", "-nodes", "-subj", "/CN=a server",
            "-keyout", os.path.join(tmp, "srvonly.key"), "-out", csr, *ec)
        run("openssl", "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey",
            ca_key, "-CAcreateserial", "-days", "2", "-extfile", ext,
            "-out", os.path.join(tmp, "srvonly.crt"))
        make_cert("mallory", "mallory", ["mallory.test"])
    return (ca_cert, (os.path.join(tmp, "alice.crt"),
                      os.path.join(tmp, "alice.key")),
            (os.path.join(tmp, "mallory.crt"),
             os.path.join(tmp, "mallory.key")))


def client_cert_get(port, cert=None, h2=False, path="/client-cert"):
    """curl over TLS with a client certificate (or none): (exit, body)."""
    args = ["curl", "-sk", "--max-time", "10"]
    if cert:
        args += ["--cert", cert[0], "--key", cert[1]]
    args.append("--http2" if h2 else "--http1.1")
    p = subprocess.run(args + ["https://127.0.0.1:%d%s" % (port, path)],
                       capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode()


def client_cert_server(*extra):
    ca, _, _ = client_pki()
    if ENGINE == "mbedtls":
        # Verification is GnuTLS's: the mbedTLS engine refuses it.
        p = subprocess.run(
            [os.path.join(os.environ.get("TERN_BUILD", ""), "examples",
                          "reference"), "--port", "0", "--tls-engine",
             "mbedtls", "--tls-port", "0", "--cert", ec_cert, "--key",
             ec_key, "--client-ca", ca] + list(extra),
            capture_output=True, text=True, timeout=10)
        check(p.returncode != 0 and "GnuTLS engine only" in p.stderr,
              "mbedTLS refuses client certificates: %r" % p.stderr)
        suite.note("mbedTLS refuses client certificates, as documented")
        return None
    return start(ec_cert, ec_key, "--client-ca", ca, *extra)


@case
def client_cert_optional():
    _, alice, mallory = client_pki()
    s = client_cert_server()
    if s is None:  # mbedTLS: its refusal was the check
        return
    try:
        eq(client_cert_get(s.tls_port), (0, "none"), "no certificate: served")
        for h2 in (False, True):
            rc, body = client_cert_get(s.tls_port, alice, h2)
            eq(rc, 0, "alice's certificate (h2 %s)" % h2)
            check(re.match(r"O=Example,CN=alice \d+$", body) or
                  re.match(r"CN=alice,O=Example \d+$", body),
                  "alice's subject and DER: %r" % body)
        rc, body = client_cert_get(s.tls_port, mallory)
        check(rc != 0 and body == "",
              "a certificate the CA did not sign is refused: %d %r"
              % (rc, body))
        rc, body = client_cert_get(s.tls_port, (os.path.join(tmp, "srvonly.crt"),
                                                os.path.join(tmp, "srvonly.key")))
        check(rc != 0 and body == "",
              "the CA's certificate for servers only (EKU serverAuth) is "
              "refused: %d %r" % (rc, body))
        eq(client_cert_get(s.tls_port)[1], "none", "served on after it")
        # A resumed session keeps the identity its handshake verified.
        ctx = client_ctx()
        ctx.load_cert_chain(*alice)
        got, session = [], None
        for _ in range(2):
            c = tls_connect(s.tls_port, ctx, session=session)
            c.sendall(b"GET /client-cert HTTP/1.1\r\nHost: x\r\n\r\n")
            got.append((read_response(c)[1], c.session_reused))
            session = c.session
            c.close()
        check(b"CN=alice" in got[1][0], "resumed: %r" % (got,))
        suite.note("second connection resumed: %s" % got[1][1])
    finally:
        eq(s.stop(), 0, "reference exit status")


@case
def client_cert_required():
    ca, alice, _ = client_pki()
    s = client_cert_server("--client-cert-required")
    if s is None:
        return
    try:
        rc, body = client_cert_get(s.tls_port)
        check(rc != 0 and body == "", "no certificate: refused (%d)" % rc)
        rc, body = client_cert_get(s.tls_port, alice, True)
        eq(rc, 0, "alice over h2")
        check("CN=alice" in body, "alice's subject: %r" % body)
    finally:
        eq(s.stop(), 0, "reference exit status")


@case(timeout=60)
def client_cert_over_quic():
    """HTTP/3 asks for the certificate the same way: tern's HTTP/3 client
    has none, so a required one refuses it (TLS alert
    certificate_required, 0x174) and an optional one serves it."""
    client = os.path.join(os.environ.get("TERN_BUILD", ""), "test", "net",
                          "h3client")
    if not os.path.exists(client):
        raise Skip("built without HTTP/3")
    ca, _, _ = client_pki()
    for required, want in ((True, "closed transport 0x174"),
                           (False, "stream 0 status 200")):
        extra = ["--quic-port", "0"] + (["--client-cert-required"]
                                        if required else [])
        s = client_cert_server(*extra)
        if s is None:
            return
        try:
            m = re.search(r"quic listening on (\d+)", s.next_line())
            check(m is not None, "no quic line")
            p = subprocess.run([client, "--timeout-ms", "5000", "GET",
                                "https://127.0.0.1:%s/client-cert"
                                % m.group(1)],
                               capture_output=True, text=True, timeout=30)
            check(want in p.stdout, "required %s: %r" % (required,
                                                         p.stdout[-300:]))
        finally:
            eq(s.stop(), 0, "reference exit status")


if __name__ == "__main__":
    suite.main(setup=setup, teardown=teardown)
