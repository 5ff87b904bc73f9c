#!/usr/bin/env python3
"""The PROXY protocol on the reference server's listeners (--proxy-protocol):
versions 1 and 2 from curl and from raw bytes, on plain TCP, under TLS and for
h2c; the client address the header names is what tern_request_peer answers (GET
/peer); LOCAL keeps the socket's; a missing, malformed, oversized or late
header closes the connection, and so does an untrusted source."""

import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import self_signed  # noqa: E402
from harness import (Conn, Server, Skip, Suite, check, eq, recv_until_close,
                     shared_reference_teardown)

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-proxy-")
srv = None
HEAD_TIMEOUT_MS = 600
SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def make_cert():
    return self_signed(tmp, "p")


def setup():
    global srv
    cert, key = make_cert()
    srv = Server("reference", ["--workers", "2", "--proxy-protocol",
                               "--head-timeout-ms", str(HEAD_TIMEOUT_MS),
                               "--tls-port", "0", "--cert", cert, "--key",
                               key])
    m = re.match(r"tls listening on (\d+)$", srv.next_line())
    check(m is not None, "no tls port line")
    srv.tls_port = int(m.group(1))
    srv.check_alive = lambda: proxied_alive(srv)


def proxied_alive(s):
    """The runner's check after each case, through a PROXY header."""
    check(s.alive(), "reference died; stderr: %s" % s.stderr_text())
    with Conn(s.port) as c:
        c.send(b"PROXY TCP4 192.0.2.1 127.0.0.1 1 2\r\n")
        r = c.request("GET", "/")
        eq((r.status, r.body), (200, b"Hello, World!"), "alive check")


def v2(cmd=1, fam=0x11, addrs=b"", tlvs=b""):
    body = addrs + tlvs
    return SIG + bytes([0x20 | cmd, fam]) + struct.pack(">H", len(body)) + body


def v2_tcp4(src, sport, dst="127.0.0.1", dport=80, tlvs=b""):
    return v2(1, 0x11, socket.inet_aton(src) + socket.inet_aton(dst) +
              struct.pack(">HH", sport, dport), tlvs)


def v2_tcp6(src, sport, dst="::1", dport=443, tlvs=b""):
    return v2(1, 0x21, socket.inet_pton(socket.AF_INET6, src) +
              socket.inet_pton(socket.AF_INET6, dst) +
              struct.pack(">HH", sport, dport), tlvs)


def tlv(t, v):
    return bytes([t]) + struct.pack(">H", len(v)) + v


def peer_of(c):
    r = c.request("GET", "/peer")
    eq(r.status, 200, "status of /peer")
    return r.body.decode()


def closed_unanswered(data, what, wait=2.0):
    """`data` on a new connection: closed by tern without a byte."""
    with Conn(srv.port) as c:
        if data:
            c.send(data)
        got, how = recv_until_close(c.sock, timeout=wait)
        eq((got, how != "timeout"), (b"", True),
           "%s: (bytes before the close, closed)" % what)


@case
def v1_from_curl():
    """curl's --haproxy-protocol (v1) names curl's own address."""
    out = subprocess.run(["curl", "-sS", "--haproxy-protocol",
                          "http://127.0.0.1:%d/peer" % srv.port],
                         capture_output=True, text=True, timeout=10)
    eq(out.returncode, 0, "curl exit: " + out.stderr)
    check(re.fullmatch(r"127\.0\.0\.1 \d+", out.stdout), out.stdout)


@case
def v1_names_the_client():
    with Conn(srv.port) as c:
        c.send(b"PROXY TCP4 192.0.2.7 198.51.100.1 5555 80\r\n")
        eq(peer_of(c), "192.0.2.7 5555", "peer")
        eq(peer_of(c), "192.0.2.7 5555", "peer of the next request")
    with Conn(srv.port) as c:
        c.send(b"PROXY TCP6 2001:db8::9 ::1 4000 80\r\nGET /peer HTTP/1.1"
               b"\r\nHost: x\r\n\r\n")
        r = c.response()
        eq(r.body, b"2001:db8::9 4000", "v1 TCP6 with the request behind it")
    with Conn(srv.port) as c:
        c.send(b"PROXY UNKNOWN\r\n")
        check(peer_of(c).startswith("127.0.0.1 "), "UNKNOWN keeps the socket's")


@case
def v2_names_the_client():
    tlvs = (tlv(0x01, b"http/1.1") + tlv(0x02, b"example.com") +
            tlv(0x20, b"\x01\0\0\0\0" + tlv(0x21, b"TLSv1.3")) +
            tlv(0x04, b"\0" * 40))
    with Conn(srv.port) as c:
        c.send(v2_tcp6("2001:db8::7", 4444, tlvs=tlvs))
        eq(peer_of(c), "2001:db8::7 4444", "peer")
    with Conn(srv.port) as c:
        c.send(v2_tcp4("203.0.113.5", 1234))
        eq(peer_of(c), "203.0.113.5 1234", "peer")


@case
def v2_tlvs_reach_the_handler():
    """ALPN, authority and the SSL TLV's version and CN, as
    tern_request_proxy_tlv gives them, on every request of the connection
    (the read buffer that held the header is long reused by then)."""
    ssl = tlv(0x20, b"\x01\0\0\0\0" + tlv(0x21, b"TLSv1.3") +
              tlv(0x22, b"client.example"))
    tlvs = tlv(0x01, b"h2") + tlv(0x02, b"example.com") + ssl
    want = (b"alpn: h2\nauthority: example.com\nssl: 1\n"
            b"ssl_version: TLSv1.3\nssl_cn: client.example\n")
    with Conn(srv.port) as c:
        c.send(v2_tcp4("198.51.100.9", 999, tlvs=tlvs))
        for i in range(3):
            r = c.request("GET", "/proxy-tlvs")
            eq((r.status, r.body), (200, want), "request %d" % i)
            c.request("GET", "/big?bytes=300000")  # the buffer moves on
    with Conn(srv.port) as c:
        c.send(v2_tcp4("198.51.100.9", 999, tlvs=tlv(0x02, b"a.example") +
                       tlv(0x20, b"\0\0\0\0\0")))
        r = c.request("GET", "/proxy-tlvs")
        eq(r.body, b"authority: a.example\n", "client not on TLS: no ssl")
    with Conn(srv.port) as c:
        c.send(v2_tcp4("198.51.100.9", 999))
        eq(c.request("GET", "/proxy-tlvs").body, b"none\n", "no TLVs")
    with Conn(srv.port) as c:
        c.send(b"PROXY TCP4 192.0.2.7 198.51.100.1 5555 80\r\n")
        eq(c.request("GET", "/proxy-tlvs").body, b"none\n", "v1")


@case
def v2_local_keeps_the_socket_address():
    with Conn(srv.port) as c:
        c.send(v2(cmd=0, fam=0))
        eq(peer_of(c), "127.0.0.1 %d" % c.sock.getsockname()[1], "peer")


@case
def header_byte_by_byte():
    """A header in 1-byte segments, then the request: served."""
    hdr = v2_tcp4("192.0.2.99", 999)
    with Conn(srv.port) as c:
        for i in range(len(hdr)):
            c.send(hdr[i:i + 1])
            time.sleep(0.002)
        eq(peer_of(c), "192.0.2.99 999", "peer")


@case
def missing_or_bad_header_closes():
    closed_unanswered(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "no header")
    closed_unanswered(b"PROXY TCP4 1.2.3.4 1.2.3.4 1 99999\r\n", "bad port")
    closed_unanswered(b"PROXY TCP4 " + b"1" * 120 + b"\r\n", "v1 too long")
    closed_unanswered(SIG + b"\x21\x11\x08\x00", "v2 of 2 KiB, announced")
    closed_unanswered(SIG + b"\x31\x11\x00\x0c" + b"\0" * 12, "v2 version 3")
    closed_unanswered(v2(1, 0x11, b"\0" * 12, b"\x02\x00\x09abc"),
                      "TLV overrun")
    # TLS without the header: the ClientHello is not a PROXY header.
    with socket.create_connection(("127.0.0.1", srv.tls_port)) as s:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            ctx.wrap_socket(s).close()
            raise AssertionError("a handshake without the header succeeded")
        except (ssl.SSLError, OSError):
            pass


@case
def header_within_head_timeout():
    """Half a header, then silence: closed at the head timeout."""
    with Conn(srv.port) as c:
        c.send(b"PROXY TCP4 1.2.")
        t0 = time.monotonic()
        got, how = recv_until_close(c.sock,
                                    timeout=HEAD_TIMEOUT_MS / 1000 + 3)
        took = time.monotonic() - t0
        eq((got, how != "timeout"), (b"", True), "(bytes, closed)")
        check(took < HEAD_TIMEOUT_MS / 1000 + 2.5,
              "closed after %.1f s, the head timeout is %d ms"
              % (took, HEAD_TIMEOUT_MS))
    with Conn(srv.port) as c:
        c.send(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n")
        time.sleep(0.1)  # the header is whole: the next request is served
        eq(peer_of(c), "1.2.3.4 1", "peer")


@case
def untrusted_source_refused():
    s = Server("reference", ["--workers", "1", "--proxy-protocol",
                             "--proxy-trusted", "192.0.2.0/24, 2001:db8::/32"])
    try:
        with Conn(s.port) as c:
            # tern closes an untrusted source at accept: the sends may
            # already meet the closed socket (EPIPE or a reset), which is
            # the refusal too
            try:
                c.send(v2_tcp4("192.0.2.1", 1))
                c.send(b"GET /peer HTTP/1.1\r\nHost: x\r\n\r\n")
                got, how = recv_until_close(c.sock, timeout=3)
            except (BrokenPipeError, ConnectionResetError):
                got, how = b"", "reset"
            eq((got, how != "timeout"), (b"", True), "(answer, closed)")
        t = Server("reference", ["--workers", "1", "--proxy-protocol",
                                 "--proxy-trusted",
                                 "10.0.0.0/8, 127.0.0.0/31"])
        try:
            with Conn(t.port) as c:
                c.send(v2_tcp4("192.0.2.1", 1))
                eq(peer_of(c), "192.0.2.1 1", "a trusted network's header")
        finally:
            eq(t.stop(), 0, "reference exit status")
    finally:
        eq(s.stop(), 0, "reference exit status")
    r = subprocess.run([s.cmd[0], "--port", "0", "--proxy-protocol",
                        "--proxy-trusted", "10.0.0.0/40"],
                       capture_output=True, text=True, timeout=10)
    check(r.returncode != 0, "a bad trusted list was taken")
    check("proxy_trusted" in r.stderr, r.stderr)


def tls_ctx(alpn):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(alpn)
    return ctx


@case
def under_tls():
    """PROXY before TLS: on its own, and in one segment with the
    ClientHello (the bytes after the header go on to TLS)."""
    with socket.create_connection(("127.0.0.1", srv.tls_port)) as raw:
        raw.sendall(v2_tcp4("198.51.100.20", 2020))
        with tls_ctx(["http/1.1"]).wrap_socket(raw) as s:
            c = Conn(sock=s)
            eq(peer_of(c), "198.51.100.20 2020", "peer over TLS")
    # The header and the ClientHello in one send, through memory BIOs.
    raw = socket.create_connection(("127.0.0.1", srv.tls_port))
    raw.settimeout(5)
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = tls_ctx(["http/1.1"]).wrap_bio(inc, out)
    first = True
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            data = out.read()
            if first:
                data = v2_tcp6("2001:db8::20", 20) + data
                first = False
            if data:
                raw.sendall(data)
            got = raw.recv(65536)
            check(got, "closed during the handshake")
            inc.write(got)
    obj.write(b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    raw.sendall(out.read())
    resp = b""
    while True:
        try:
            got = obj.read(65536)
            if not got:
                break  # close_notify
            resp += got
        except ssl.SSLWantReadError:
            got = raw.recv(65536)
            if not got:
                break
            inc.write(got)
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            break
    raw.close()
    check(resp.endswith(b"\r\n\r\n2001:db8::20 20"), resp)
    if shutil.which("curl"):
        out = subprocess.run(["curl", "-sSk", "--haproxy-protocol", "--http2",
                              "https://localhost:%d/peer" % srv.tls_port,
                              "-w", " %{http_version}"],
                             capture_output=True, text=True, timeout=10)
        eq(out.returncode, 0, "curl exit: " + out.stderr)
        check(re.fullmatch(r"127\.0\.0\.1 \d+ 2", out.stdout),
              "h2 over TLS behind PROXY: %r" % out.stdout)


@case
def h2c_prior_knowledge():
    out = subprocess.run(["curl", "-sS", "--haproxy-protocol",
                          "--http2-prior-knowledge",
                          "http://127.0.0.1:%d/peer" % srv.port,
                          "-w", " %{http_version}"],
                         capture_output=True, text=True, timeout=10)
    eq(out.returncode, 0, "curl exit: " + out.stderr)
    check(re.fullmatch(r"127\.0\.0\.1 \d+ 2", out.stdout), out.stdout)


def teardown():
    shared_reference_teardown(srv)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(setup, teardown)
