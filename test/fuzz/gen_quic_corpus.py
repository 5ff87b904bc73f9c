#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_quic (test/fuzz/corpus_quic/): datagrams
that real clients send, so that the fuzzer starts from packets that get
deep (an Initial is encrypted with keys derived from its DCID, which any
server can derive: a replayed Initial really starts a handshake, and
ngtcp2 and GnuTLS parse its ClientHello), plus hand-made ones for the
stateless paths (Version Negotiation, resets, tokens, garbage).

The real ones are captured from gtlsclient (ngtcp2 0.12.1's GnuTLS
client) talking to build/examples/reference (the reference server) over
HTTP/3, through a UDP relay in this script that records what the client
sends on its one connection (never what the server sends). Each run makes new random
values, which is why the seeds are checked in.

The client's Initials are also decrypted (their keys derive from their
DCID, RFC 9001 5.2) into "sealed" records: their plaintext frames, which
fuzz_quic protects again with a DCID of its own for every input, so that
the fuzzer mutates the ClientHello itself rather than ciphertext. This
needs the cryptography module (python3-cryptography on Debian).

The format is fuzz_quic.c's: byte 0 picks the listener (0: no Retry,
1: always Retry), then records of a control byte (bit 0: the second
source, bit 1: aim at the server's CID, bits 2-3: more loop turns, bit 4:
sealed, bit 5: sealed without padding to 1200 bytes, bit 6: sealed with
the last Retry's token and DCID), a 2-byte big-endian length and the
datagram (or the plaintext frames of a sealed Initial).

  test/fuzz/gen_quic_corpus.py [BUILDDIR]   (rewrites the seeds; default
                                            build/, or $TERN_BUILD)
"""
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
OUT = os.path.join(HERE, "corpus_quic")
BUILD = (sys.argv[1] if len(sys.argv) > 1 else
         os.environ.get("TERN_BUILD", os.path.join(ROOT, "build")))
REFERENCE = os.path.join(BUILD, "examples", "reference")
CLIENT = shutil.which("gtlsclient") or "/usr/bin/gtlsclient"

SECOND, AIM, SEALED, NOPAD, RETRIED = 1, 2, 16, 32, 64
SALT_V1 = bytes.fromhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a")


class Relay:
    """Forwards between gtlsclient and the server, recording the client's
    datagrams in order. The client runs one connection, except after
    Version Negotiation, when it starts again from a new port: each client
    address gets its own socket towards the server."""

    def __init__(self, server_port):
        self.server_port = server_port
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.port = self.front.getsockname()[1]
        self.backs = {}  # client address -> socket towards the server
        self.sent = []
        self.done = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done:
            socks = [self.front] + list(self.backs.values())
            r, _, _ = select.select(socks, [], [], 0.05)
            for s in r:
                if s is self.front:
                    data, addr = s.recvfrom(65536)
                    if addr not in self.backs:
                        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                        b.connect(("127.0.0.1", self.server_port))
                        self.backs[addr] = b
                    self.sent.append(data)
                    self.backs[addr].send(data)
                else:
                    data = s.recv(65536)
                    addr = [a for a, b in self.backs.items() if b is s][0]
                    self.front.sendto(data, addr)

    def close(self):
        self.done = True
        self.thread.join()
        self.front.close()
        for b in self.backs.values():
            b.close()


def start_reference(tmp, *extra):
    cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
    if not os.path.exists(cert):
        subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                        "-subj", "/CN=localhost", "-keyout", key, "-out",
                        cert, "-addext", "subjectAltName=DNS:localhost",
                        "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1"],
                       check=True, capture_output=True)
    p = subprocess.Popen([REFERENCE, "--port", "0", "--workers", "1",
                          "--tls-port", "0", "--quic-port", "0", "--cert",
                          cert, "--key", key] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    for _ in range(3):
        m = re.match(r"quic listening on (\d+)$", p.stdout.readline().strip())
        if m:
            return p, int(m.group(1))
    p.kill()
    raise SystemExit("reference printed no quic port")


def capture(tmp, server_args=(), client_args=(), runs=1):
    """The datagrams of gtlsclient's last run (earlier runs leave it a
    session and transport parameters for 0-RTT)."""
    server, port = start_reference(tmp, *server_args)
    try:
        for _ in range(runs):
            relay = Relay(port)
            subprocess.run([CLIENT, "-q", "--exit-on-all-streams-close"] +
                           list(client_args) +
                           ["127.0.0.1", str(relay.port),
                            "https://localhost:%d/" % port],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20)
            time.sleep(0.1)
            relay.close()
        if not relay.sent:
            raise SystemExit("no datagrams captured")
        return relay.sent
    finally:
        server.terminate()
        server.wait()


def records(dgrams, ctl=0):
    """dgrams: datagrams, or (control byte, datagram) pairs."""
    out = b""
    for d in dgrams:
        c, d = d if isinstance(d, tuple) else (ctl, d)
        out += struct.pack("!BH", c, len(d)) + d
    return out


def varint(v):
    if v < 64:
        return bytes([v])
    if v < 16384:
        return struct.pack("!H", 0x4000 | v)
    return struct.pack("!I", 0x80000000 | v)


def read_varint(b, i):
    n = 1 << (b[i] >> 6)
    v = b[i] & 0x3f
    for j in range(1, n):
        v = v << 8 | b[i + j]
    return v, i + n


def with_token(initial, token):
    """A v1 Initial with its token replaced: the header is what the server
    reads before it decrypts anything (the token decides Retry and
    refusals), so the packet need not decrypt afterwards."""
    dcil = initial[5]
    i = 6 + dcil
    i += 1 + initial[i]
    tl, j = read_varint(initial, i)
    return initial[:i] + varint(len(token)) + token + initial[j + tl:]


def expand_label(secret, label, n):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
    info = (struct.pack("!HB", n, 6 + len(label)) + b"tls13 " + label +
            b"\x00")
    return HKDFExpand(hashes.SHA256(), n, info).derive(secret)


def initial_plaintext(dgram):
    """The SCID (a length byte and the CID) and the frames of the v1
    client Initial that starts dgram, or None."""
    from cryptography.hazmat.primitives import hashes, hmac
    from cryptography.hazmat.primitives.ciphers import (Cipher, algorithms,
                                                        modes)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    if (len(dgram) < 7 or dgram[0] & 0xb0 != 0x80 or
            dgram[1:5] != b"\0\0\0\1"):
        return None
    dcid = dgram[6:6 + dgram[5]]
    i = 6 + dgram[5]
    scid = dgram[i:i + 1 + dgram[i]]
    i += 1 + dgram[i]
    tl, i = read_varint(dgram, i)
    i += tl
    length, pn_off = read_varint(dgram, i)
    h = hmac.HMAC(SALT_V1, hashes.SHA256())
    h.update(dcid)
    secret = expand_label(h.finalize(), b"client in", 32)
    key = expand_label(secret, b"quic key", 16)
    iv = expand_label(secret, b"quic iv", 12)
    hp = expand_label(secret, b"quic hp", 16)
    enc = Cipher(algorithms.AES(hp), modes.ECB()).encryptor()
    mask = enc.update(dgram[pn_off + 4:pn_off + 20]) + enc.finalize()
    first = dgram[0] ^ (mask[0] & 0x0f)
    pnlen = (first & 3) + 1
    pn = bytes(b ^ m for b, m in zip(dgram[pn_off:pn_off + pnlen],
                                     mask[1:1 + pnlen]))
    header = bytes([first]) + dgram[1:pn_off] + pn
    nonce = bytearray(iv)
    for k in range(pnlen):
        nonce[12 - pnlen + k] ^= pn[k]
    body = dgram[pn_off + pnlen:pn_off + length]
    plain = AESGCM(key).decrypt(bytes(nonce), body, header)
    return scid + (plain.rstrip(b"\0") or b"\0")  # fuzz_quic pads it


def sealed(dgrams, ctl=0, rest=AIM):
    """Initials as sealed records (their plaintext), the other datagrams
    as they were (aimed at the server's CID)."""
    out = []
    for d in dgrams:
        p = initial_plaintext(d)
        out.append((ctl | SEALED, p) if p is not None else (ctl | rest, d))
    return out


def long_header(version, dcid, scid, rest, first=0xc0):
    return (bytes([first]) + struct.pack("!I", version) + bytes([len(dcid)])
            + dcid + bytes([len(scid)]) + scid + rest)


def main():
    if not os.path.exists(REFERENCE):
        raise SystemExit("build the reference server first: %s" % REFERENCE)
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        os.unlink(os.path.join(OUT, f))
    tmp = tempfile.mkdtemp(prefix="tern-quic-corpus-")
    seeds = {}
    try:
        get = capture(tmp)
        retry = capture(tmp, ["--quic-retry"])
        vn = capture(tmp, client_args=["-v", "0x1a2a3a4a",
                                       "--preferred-versions=v1"])
        v2 = capture(tmp, client_args=["-v", "v2draft",
                                       "--preferred-versions=v2draft,v1",
                                       "--other-versions=v2draft,v1"])
        sess = ["--session-file=" + os.path.join(tmp, "s.pem"),
                "--tp-file=" + os.path.join(tmp, "tp.txt")]
        early = capture(tmp, ["--quic-early-data"], sess, runs=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    first = get[0]
    rnd = os.urandom
    # Whole connections as the client sent them; "aim" sends the packets
    # after the first Initial to the fuzz server's own CID, so that they
    # reach the connection the replayed Initial started.
    seeds["get"] = b"\x00" + records(get)
    seeds["get-sealed"] = b"\x00" + records(sealed(get))
    seeds["retry"] = b"\x01" + records(retry)
    # The Retry listener: a sealed ClientHello gets a Retry, and the same
    # again with its token starts the handshake.
    hello = initial_plaintext(first)
    seeds["retry-sealed"] = b"\x01" + records(
        [(SEALED, hello), (SEALED | RETRIED, hello)] +
        [(AIM, d) for d in get[1:]])
    seeds["vn-then-v1"] = b"\x00" + records(vn)
    seeds["v2draft"] = b"\x00" + records(
        [v2[0]] + [(AIM, d) for d in v2[1:]])
    seeds["early-data"] = b"\x00" + records(early)
    # NAT rebinding during the handshake: the Initial again from a second
    # source, then the rest from there.
    seeds["rebind"] = b"\x00" + records(
        [(SEALED, hello), (SEALED | SECOND, hello)] +
        [(SECOND | AIM, d) for d in get[1:]])
    # Initials the server must not take: one byte short of 1200, cut, and
    # sealed without padding.
    seeds["initial-short"] = b"\x00" + records(
        [first[:1199], first[:300], (SEALED | NOPAD, hello)])
    # Frames a client may send in Initials, sealed: PING and PADDING, an
    # ACK, CRYPTO at an offset and one too long, CONNECTION_CLOSE.
    scid = hello[:1 + hello[0]]
    seeds["frames"] = b"\x00" + records([
        (SEALED, hello),
        (SEALED, scid + b"\x01"),
        (SEALED, scid + b"\x02\x00\x00\x00\x00"),
        (SEALED, scid + b"\x06\x44\x00\x05hello"),
        (SEALED, scid + b"\x06\x00\x7f\xff" + rnd(20)),
        (SEALED, scid + b"\x1c\x0a\x00\x03bye")])
    # Tokens: a bad Retry token (refused: INVALID_TOKEN), a bad NEW_TOKEN
    # token (ignored, or a Retry on the Retry listener), garbage.
    for mode, name in ((0, "token"), (1, "token-retry")):
        seeds[name] = bytes([mode]) + records([
            with_token(first, b"\xb6" + rnd(77)),
            with_token(first, b"\x36" + rnd(56)),
            with_token(first, b"\x00" + rnd(20))])
    # Stateless resets: short headers for unknown CIDs, long enough for a
    # reset (40 bytes and more), too short (39), and a burst.
    seeds["resets"] = b"\x00" + records(
        [b"\x40" + rnd(39), b"\x40" + rnd(38), b"\x5f" + rnd(150)] +
        [(12, b"\x41" + rnd(60))] * 4)
    # Version Negotiation: only for 1200 bytes and more; CIDs of 0 and of
    # the most an unknown version may carry.
    seeds["vn"] = b"\x00" + records([
        long_header(0x0a0a0a0a, rnd(20), b"", bytes(1200)),
        long_header(0x0a0a0a0a, rnd(20), b"", bytes(100)),
        long_header(0xff00001d, rnd(200), rnd(255), bytes(1200)),
        long_header(2, b"", rnd(8), bytes(1300))])
    seeds["garbage"] = b"\x00" + records([
        b"", b"\x00", b"\xff" * 30, rnd(1250), b"\xc0\x00\x00\x00\x01\xff",
        long_header(1, rnd(21), rnd(8), bytes(1200)), bytes(3000),
        long_header(1, rnd(8), rnd(8), b"\x00" * 1200, first=0xe0)])
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds), OUT))


if __name__ == "__main__":
    main()
