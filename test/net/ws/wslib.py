"""WebSocket frame helpers shared by test_ws.py (HTTP/1.1 and HTTP/2
carriers) and test_ws_h3.py (HTTP/3): a raw client's frames (masked, or
deliberately broken), the server's frames read back from anything with
Conn's read_exact / at_eof, close payloads, raw deflate, and test
messages; and the server's WebSocket, stream and connection counts
(its /metrics, over HTTP/1.1) back at rest. No carrier is known here."""

import base64
import hashlib
import os
import struct
import threading
import time
import zlib

from harness import Conn, check, eq


def ws_key():
    return base64.b64encode(os.urandom(16)).decode()


def mask_bytes(payload):
    """A fresh masking key followed by `payload` masked with it."""
    key = os.urandom(4)
    n = len(payload)
    if n == 0:
        return key
    m = (key * (n // 4 + 1))[:n]
    return key + (int.from_bytes(payload, "big") ^
                  int.from_bytes(m, "big")).to_bytes(n, "big")


def ws_frame_header(b0, n):
    """A masked frame's header up to (not including) the masking key."""
    if n < 126:
        return struct.pack("!BB", b0, 0x80 | n)
    if n < 65536:
        return struct.pack("!BBH", b0, 0x80 | 126, n)
    return struct.pack("!BBQ", b0, 0x80 | 127, n)


def frame(opcode, payload=b"", fin=True, rsv=0, mask=True, length=None):
    """A client frame; `length` overrides the announced length (a frame cut
    short), mask=False makes the protocol error of an unmasked one."""
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload) if length is None else length
    if n < 126:
        head = struct.pack("!BB", b0, (0x80 if mask else 0) | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, (0x80 if mask else 0) | 126, n)
    else:
        head = struct.pack("!BBQ", b0, (0x80 if mask else 0) | 127, n)
    if not mask:
        return head + payload
    return head + mask_bytes(payload)


def close_payload(code, reason=b""):
    return struct.pack("!H", code) + reason


def read_frame(c, timeout=5.0):
    """One server frame: (fin, rsv, opcode, payload). Server frames must
    not be masked."""
    deadline = time.monotonic() + timeout
    b0, b1 = c.read_exact(2, deadline)
    check(not (b1 & 0x80), "server frames are unmasked")
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", c.read_exact(2, deadline))[0]
    elif n == 127:
        n = struct.unpack("!Q", c.read_exact(8, deadline))[0]
    payload = c.read_exact(n, deadline) if n else b""
    return bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F, payload


def expect_close(c, code, timeout=5.0):
    """The server's next frames end with a close carrying `code`, then the
    connection ends."""
    while True:
        fin, rsv, op, payload = read_frame(c, timeout)
        if op == 0x8:
            break
    got = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
    eq(got, code, "close code")
    check(c.at_eof(3.0), "the connection ends after the close frame")
    return payload[2:]


def deflate_raw(data):
    """permessage-deflate's form of `data`: raw deflate, sync-flushed, the
    trailing 00 00 ff ff removed (RFC 7692 7.2.1)."""
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    out = z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)
    check(out.endswith(b"\x00\x00\xff\xff"), "sync flush marker")
    return out[:-4]


def payload(n, text):
    """A test message of n bytes: text with 1 to 4 byte characters, or
    binary."""
    if text:
        unit = "a\u00e9\u20ac\U0001f600"  # 1, 2, 3 and 4 byte characters
        s = (unit * (n // 10 + 1)).encode()[:n]
        while True:  # cut on a character boundary, pad with ASCII
            try:
                return s.decode() + "z" * (n - len(s))
            except UnicodeDecodeError:
                s = s[:-1]
    seed = hashlib.sha256(b"%d" % n).digest()
    return (seed * (n // 32 + 1))[:n]


def push_until_stalled(sock, msg, limit=64 << 20, stall=1.5, within=30.0):
    """Send `msg` over and over on `sock` without reading, until `limit`
    bytes went, the socket stayed full for `stall` seconds, or `within`
    passed: (bytes sent, offset reached in msg). Leaves it non-blocking."""
    sock.setblocking(False)
    sent, off, stalled_since = 0, 0, None
    deadline = time.monotonic() + within
    while sent < limit and time.monotonic() < deadline:
        try:
            n = sock.send(msg[off:])  # frames stay whole on the wire
            sent += n
            off = (off + n) % len(msg)
            stalled_since = None
        except BlockingIOError:
            if stalled_since is None:
                stalled_since = time.monotonic()
            elif time.monotonic() - stalled_since > stall:
                break
            time.sleep(0.01)
    return sent, off


def read_back(c, msg, sent, off, timeout=20.0):
    """After push_until_stalled: finish the frame being sent while a thread
    reads, and check that every message came back intact."""
    c.sock.setblocking(True)
    want = (sent + (len(msg) - off if off else 0)) // len(msg)
    echo = read_frame_of(msg)
    got = []

    def reader():
        try:
            for _ in range(want):
                got.append(read_frame(c, timeout)[2:])
        except Exception as e:  # reported below as a short count
            got.append(e)
    t = threading.Thread(target=reader)
    t.start()
    if off:
        c.send(msg[off:])
    t.join(60)
    eq(len(got), want, "echoes read back")
    check(all(g == echo for g in got), "every echo intact")


def read_frame_of(msg):
    """(opcode, payload) of a masked client frame that frame() built."""
    op, n = msg[0] & 0x0F, msg[1] & 0x7F
    at = 2 + (2 if n == 126 else 8 if n == 127 else 0)
    key, body = msg[at:at + 4], msg[at + 4:]
    m = (key * (len(body) // 4 + 1))[:len(body)]
    if not body:
        return op, b""
    return op, (int.from_bytes(body, "big") ^
                int.from_bytes(m, "big")).to_bytes(len(body), "big")


def answer_going_away(conns, timeout=5.0):
    """A graceful stop: each socket's next frame is close 1001; echo it,
    and the server ends the socket."""
    for c in conns:
        fin, rsv, op, p = read_frame(c, timeout)
        eq((op, p[:2]), (0x8, b"\x03\xe9"), "close 1001")
        c.send(frame(0x8, p[:2]))
        check(c.at_eof(timeout), "closed after the handshake")
        c.close()


# ---------------------------------------------------------------------------
# The server's counters at rest (issue 36's checks, on every carrier)

# The write sizes of issue 36's chopped 1 MiB messages.
CHOPS = (64, 128, 256, 512, 1024, 2048)


def metrics(port):
    """The reference server's Prometheus counters: {name{labels}: value}."""
    with Conn(port) as c:
        r = c.request("GET", "/metrics")
    eq(r.status, 200, "/metrics")
    out = {}
    for line in r.body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def at_rest(port, what):
    """WebSocket sessions, streams and connections other than the one
    asking are back at zero (closes finish on the server's next turns,
    so this waits a moment for them)."""
    keys = ["tern_websocket_open"] + [
        'tern_open_%s{protocol="%s"}' % (k, p)
        for k in ("connections", "streams") for p in ("http2", "http3")]
    deadline = time.monotonic() + 5
    while True:
        m = metrics(port)
        busy = {k: m.get(k) for k in keys if m.get(k) != 0}
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    eq(busy, {}, "counters not at rest %s" % what)
    return m
