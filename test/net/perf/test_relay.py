#!/usr/bin/env python3
"""perf/load/relay, the delaying forwarder, on real sockets: TCP and UDP
echo servers in this process behind it (on one port number, as the relay
serves both on one), then the reference server over HTTP/2 (curl) and HTTP/3
(gtlsclient) through it.

Delays are checked only from below (a round trip through a relay that
delays D each way takes at least 2 D, whatever the machine's load), never
from above."""

import hashlib
import json
import os
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
from http3 import test_h3  # noqa: E402 (its certificate, server, gtlsclient)
from harness import (BUILD, HELLO_BODY, Server, Skip, Suite, check,  # noqa
                     eq)

suite = Suite()
case = suite.case
HOST = "127.0.0.1"
D = 20  # ms each way


def relay_path():
    path = os.path.join(BUILD, "perf", "load", "relay")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError("%s not built (TERN_BUILD=%s)" % (path, BUILD))
    return path


class Relay:
    """relay --listen 127.0.0.1:0 --to HOST:port --delay-ms delay; .tcp and
    .udp are its ports (0 for a protocol it does not relay). stop() sends
    SIGTERM and returns its JSON summary; it must exit 0."""

    def __init__(self, to_port, delay=D, *extra):
        self.json = tempfile.mktemp(prefix="relay-", suffix=".json")
        cmd = [relay_path(), "--listen", HOST + ":0",
               "--to", "%s:%d" % (HOST, to_port), "--delay-ms", str(delay),
               "--json", self.json] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()
        m = re.match(r"relay: listening TCP (\d+) UDP (\d+)$", line.strip())
        if not m:
            self.proc.kill()
            raise AssertionError("relay's first line %r; stderr %r" % (
                line, self.proc.stderr.read()))
        self.tcp, self.udp = int(m.group(1)), int(m.group(2))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("relay ignored SIGTERM")
        eq(rc, 0, "relay's exit status; stderr %r" % self.proc.stderr.read())
        with open(self.json) as f:
            summary = json.load(f)
        os.unlink(self.json)
        return summary

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return False


class Echo:
    """A TCP and a UDP echo server on one port number. TCP: streaming
    echo, or with after_eof everything read up to the client's FIN, then
    sent back, then a FIN (a half-close both ways). UDP: each datagram
    back to its sender, counted in .udp_count."""

    def __init__(self, after_eof=False):
        self.after_eof = after_eof
        self.udp_count = 0
        self.tcp_ended = 0  # connections served to their end
        for _ in range(50):
            self.ls = socket.socket()
            self.ls.bind((HOST, 0))
            self.port = self.ls.getsockname()[1]
            self.us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                self.us.bind((HOST, self.port))
                break
            except OSError:
                self.ls.close()
                self.us.close()
        self.ls.listen(16)
        self.us.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        threading.Thread(target=self._tcp, daemon=True).start()
        threading.Thread(target=self._udp, daemon=True).start()

    def _tcp(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,),
                             daemon=True).start()

    def _serve(self, c):
        got = bytearray()
        try:
            while True:
                d = c.recv(1 << 20)
                if not d:
                    break
                if self.after_eof:
                    got += d
                else:
                    c.sendall(d)
            c.sendall(got)
            c.shutdown(socket.SHUT_WR)
            c.recv(1)  # until the relay closes
        except OSError:
            pass
        finally:
            c.close()
            self.tcp_ended += 1

    def _udp(self):
        while True:
            try:
                d, a = self.us.recvfrom(65536)
            except OSError:
                return
            self.udp_count += 1
            self.us.sendto(d, a)

    def close(self):
        self.ls.close()
        self.us.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False


def tcp_exchange(port, data, timeout=60):
    """Send `data` and a FIN while reading; returns (bytes read to EOF,
    seconds)."""
    c = socket.create_connection((HOST, port), timeout=timeout)
    t0 = time.monotonic()

    def writer():
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    got = bytearray()
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        got += d
    took = time.monotonic() - t0
    w.join()
    c.close()
    return bytes(got), took


def pattern(n, seed=0):
    # Not all one byte: reordered or duplicated pieces would show.
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(b"%d %d" % (seed, i)).digest()
        i += 1
    return bytes(out[:n])


@case(timeout=30)
def tcp_round_trip():
    """A 1-byte echo through the relay takes at least 2 D, each time."""
    with Echo() as e, Relay(e.port) as r:
        c = socket.create_connection((HOST, r.tcp), timeout=10)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for i in range(5):
            t0 = time.monotonic()
            c.sendall(b"%d" % i)
            eq(c.recv(10), b"%d" % i, "echo")
            rtts.append(time.monotonic() - t0)
        c.close()
        suite.note("round trips (ms): " + " ".join(
            "%.1f" % (x * 1000) for x in rtts))
        for x in rtts:
            check(x >= 2 * D / 1000, "a round trip of %.2f ms < 2 D" %
                  (x * 1000))
        r.stop()


@case(timeout=120)
def tcp_transfers():
    """0 B .. 8 MiB echoed, streaming both ways at once, bytes identical,
    the FIN passed on; the summary counts every byte."""
    sizes = [0, 1, 1000, 65536 + 7, 1 << 20, 8 << 20]
    with Echo() as e, Relay(e.port) as r:
        for n in sizes:
            data = pattern(n, n)
            got, took = tcp_exchange(r.tcp, data)
            eq(len(got), n, "bytes back for %d" % n)
            check(got == data, "the %d bytes came back changed" % n)
            check(took >= 2 * D / 1000, "%d bytes in %.1f ms" % (n, took))
        s = r.stop()
        eq(s["tcp"]["connections"], len(sizes), "connections")
        eq(s["tcp"]["bytes_up"], sum(sizes), "bytes up")
        eq(s["tcp"]["bytes_down"], sum(sizes), "bytes down")
        eq(s["tcp"]["resets"], 0, "resets")


@case(timeout=120)
def tcp_bounded_queue():
    """--max-queue 64k: an 8 MiB echo still arrives whole (the relay stops
    reading a side whose queue is full), and no queue ever held more."""
    with Echo() as e, Relay(e.port, D, "--max-queue", "64k") as r:
        data = pattern(8 << 20, 3)
        got, _ = tcp_exchange(r.tcp, data)
        check(got == data, "8 MiB through 64 KiB queues (%d back)" % len(got))
        s = r.stop()
        check(0 < s["max_queue_bytes"] <= 65536, "max queue %d" %
              s["max_queue_bytes"])


@case(timeout=120)
def tcp_half_close():
    """The client's FIN reaches the server, which only then answers: data
    still flows to a client that has shut its sending side, and the
    server's FIN follows it (0 B .. 8 MiB)."""
    with Echo(after_eof=True) as e, Relay(e.port) as r:
        for n in [0, 1, 300000, 8 << 20]:
            data = pattern(n, 7)
            got, took = tcp_exchange(r.tcp, data)
            eq(len(got), n, "bytes after the half-close")
            check(got == data, "bytes changed (%d)" % n)
            # The FIN goes there (D), the answer back (D).
            check(took >= 2 * D / 1000, "%d bytes in %.1f ms" % (n, took))
        r.stop()


@case(timeout=30)
def tcp_resets():
    """A client's RST resets the upstream connection, and an upstream
    that is not there resets the client."""
    import struct
    with Echo() as e, Relay(e.port) as r:
        c = socket.create_connection((HOST, r.tcp), timeout=10)
        c.sendall(b"x")
        eq(c.recv(1), b"x", "echo")
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     struct.pack("ii", 1, 0))
        c.close()
        deadline = time.monotonic() + 10
        while e.tcp_ended == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        eq(e.tcp_ended, 1, "the upstream connection ended")
        s = r.stop()
        eq(s["tcp"]["resets"], 1, "resets after the client's RST")
    # Nothing listens on a closed port: connect fails upstream.
    closed = socket.socket()
    closed.bind((HOST, 0))
    port = closed.getsockname()[1]
    closed.close()
    with Relay(port, D, "--tcp") as r:
        eq(r.udp, 0, "no UDP with --tcp")
        # The reset can come before create_connection's non-blocking
        # connect has read its result (SO_ERROR is then ECONNRESET) or
        # after: both are the reset this case wants.
        c = None
        try:
            c = socket.create_connection((HOST, r.tcp), timeout=10)
            d = c.recv(10)
        except ConnectionResetError:
            d = None
        eq(d, None, "the client reset (not %r)" % d)
        if c is not None:
            c.close()
        r.stop()


def udp_exchange(sock, port, datagrams, window=50, timeout=10):
    """Send datagrams `window` at a time and wait for each window's echoes;
    returns them in order of arrival."""
    back = []
    sock.settimeout(timeout)
    for i in range(0, len(datagrams), window):
        part = datagrams[i:i + window]
        for d in part:
            sock.sendto(d, (HOST, port))
        for _ in part:
            back.append(sock.recv(65536))
    return back


@case(timeout=60)
def udp_echo():
    """Datagrams of 1 B .. 65507 B (IPv4's largest) come back whole and in
    order, each round trip at least 2 D."""
    with Echo() as e, Relay(e.port) as r:
        eq(r.tcp, r.udp, "TCP and UDP on one port")
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        for n in [1, 1200, 1500, 9000, 65507]:
            d = pattern(n, n)
            t0 = time.monotonic()
            u.sendto(d, (HOST, r.udp))
            u.settimeout(10)
            got = u.recv(65536)
            took = time.monotonic() - t0
            eq(len(got), n, "datagram length")
            check(got == d, "datagram of %d changed" % n)
            check(took >= 2 * D / 1000, "round trip %.2f ms" % (took * 1000))
        many = [b"%06d" % i + pattern(1200, i) for i in range(300)]
        back = udp_exchange(u, r.udp, many)
        eq(back, many, "300 datagrams, in order")
        u.close()
        s = r.stop()
        eq(s["udp"]["datagrams_up"], 305, "datagrams up")
        eq(s["udp"]["datagrams_down"], 305, "datagrams down")
        eq(s["udp"]["lost_up"] + s["udp"]["lost_down"], 0, "lost")
        eq(s["udp"]["sessions"], 1, "sessions")


def relay_drained(port):
    """True when the relay's UDP socket on `port` holds nothing unread."""
    with open("/proc/net/udp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                return int(fields[4].split(":")[1], 16) == 0
    return True


def send_and_stop(r, n):
    """Send n datagrams to relay r, wait until it has read them all (its
    socket's queue is empty), then stop it: its summary."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        u.sendto(b"%d" % i, (HOST, r.udp))
    deadline = time.monotonic() + 10
    while not relay_drained(r.udp) and time.monotonic() < deadline:
        time.sleep(0.01)
    s = r.stop()
    u.close()
    eq(s["udp"]["datagrams_up"], n, "datagrams the relay read")
    return s


@case(timeout=60)
def udp_loss():
    """--loss 100 drops every datagram, --loss 0 none; --loss 50 with a
    seed drops some and passes some."""
    with Echo() as e, Relay(e.port, D, "--udp", "--loss", "100") as r:
        eq(r.tcp, 0, "no TCP with --udp")
        s = send_and_stop(r, 200)
        eq(s["udp"]["lost_up"], 200, "datagrams lost")
        eq(e.udp_count, 0, "datagrams that reached the server")
    with Echo() as e, Relay(e.port, D, "--udp", "--loss", "0") as r:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        many = [b"%d" % i for i in range(400)]
        eq(udp_exchange(u, r.udp, many), many, "all echoed")
        u.close()
        s = r.stop()
        eq(s["udp"]["lost_up"] + s["udp"]["lost_down"], 0, "lost")
    with Echo() as e, Relay(e.port, 1, "--udp", "--loss", "50",
                            "--seed", "42") as r:
        lost = send_and_stop(r, 400)["udp"]["lost_up"]
        check(100 < lost < 300, "--loss 50 lost %d of 400" % lost)


@case(timeout=60)
def bad_arguments():
    """Wrong arguments: exit status 2 and the usage, never a relay."""
    for args in [[], ["--listen", "127.0.0.1:0"],
                 ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1"],
                 ["--listen", "x", "--to", "127.0.0.1:1", "--delay-ms", "1"],
                 ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1",
                  "--delay-ms", "-1"],
                 ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1",
                  "--delay-ms", "1", "--loss", "101"],
                 ["--listen", "127.0.0.1:0", "--to", "127.0.0.1:1",
                  "--delay-ms", "1", "--max-queue", "1"],
                 ["--listen", "127.0.0.1:70000", "--to", "127.0.0.1:1",
                  "--delay-ms", "1"]]:
        p = subprocess.run([relay_path()] + args, capture_output=True,
                           timeout=10)
        eq(p.returncode, 2, "exit status for %r" % args)
        check(b"usage" in p.stderr, "usage for %r" % args)


# ---- tern through the relay -------------------------------------------------

certs = None


def cert_pair():
    global certs
    if certs is None:
        certs = test_h3.make_cert("relay")
    return certs


@case(timeout=60)
def h2_through_relay():
    """curl over HTTP/2 (TLS) to the reference server through the relay: GET /
    and a 1 MiB POST /upload, whose length the reference server reports."""
    if not shutil.which("curl"):
        raise Skip("no curl")
    c, k = cert_pair()
    with Server("reference", ["--tls-port", "0", "--cert", c, "--key",
                              k]) as s:
        tls_port = None
        while tls_port is None:
            m = re.match(r"tls listening on (\d+)$", s.next_line())
            if m:
                tls_port = int(m.group(1))
        with Relay(tls_port, D, "--tcp") as r:
            body = os.path.join(test_h3.tmp, "upload.bin")
            with open(body, "wb") as f:
                f.write(pattern(1 << 20))
            base = "https://127.0.0.1:%d" % r.tcp
            p = subprocess.run(
                ["curl", "-sS", "-k", "--http2", "-w", "\n%{http_version}\n",
                 base + "/", "--next", "-sS", "-k", "--http2",
                 "--data-binary", "@" + body, "-w", "\n%{http_version}",
                 base + "/upload"],
                capture_output=True, timeout=30)
            eq(p.returncode, 0, "curl: %r" % p.stderr)
            out = p.stdout.decode().split("\n")
            if out[1] != "2":
                raise Skip("curl did not negotiate HTTP/2 (%r): reference "
                           "built without it?" % out[1])
            eq(out[0].encode(), HELLO_BODY, "GET / body")
            eq(out[2], str(1 << 20), "upload length")
            eq(out[3], "2", "upload over HTTP/2")
            st = r.stop()
            check(st["tcp"]["bytes_up"] > 1 << 20, "bytes up %d" %
                  st["tcp"]["bytes_up"])


@case(timeout=60)
def h3_through_relay():
    """gtlsclient over HTTP/3 to the reference server through the relay's UDP
    side: GET / and a 1 MiB download, bytes identical."""
    if test_h3.GTLSCLIENT is None:
        raise Skip("gtlsclient (ngtcp2-client) not installed")
    c, k = cert_pair()
    try:
        h = test_h3.Hello(c, k)
    except test_h3.ServerError as e:
        if re.search(r"unknown option --quic-port|quic: not built", str(e)):
            raise Skip("reference has no HTTP/3 here")
        raise
    with h, Relay(h.port, D, "--udp") as r:
        n = 1 << 20
        run = test_h3.client(h, ["/", h.big_path(n)], host=HOST, port=r.udp,
                             timeout=30)
        test_h3.check_root(run)
        check(run.file(h.big_path(n)) == h.big_body(n),
              "the 1 MiB body through the relay; log %r" % run.tail())
        st = r.stop()
        check(st["udp"]["datagrams_down"] > n // 1500, "datagrams down %d" %
              st["udp"]["datagrams_down"])


if __name__ == "__main__":
    suite.main()
