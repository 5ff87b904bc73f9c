"""A small WebSocket client over raw sockets (RFC 6455, RFC 7692): the check
that runs before the ws-echo scenarios.  It is written independently of
perf/load/wsload.c, so the two check each other.

check() upgrades one connection to the scenario's path (offering
permessage-deflate when the scenario does), then wants back, whole and of
the same kind: a text message, a binary message holding every byte value,
and a text message sent in three fragments; then a Close answered with a
Close.  Anything else raises BenchError with what was received."""

import base64
import hashlib
import os
import socket
import struct
import zlib

from .common import BenchError
from .h1client import TcpConn

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
DEFLATE_OFFER = "permessage-deflate; client_max_window_bits"
TAIL = b"\x00\x00\xff\xff"


def accept_for(key):
    return base64.b64encode(hashlib.sha1(key + GUID).digest())


def parse_extension(value):
    """{'name': ..., params} of a one-extension Sec-WebSocket-Extensions."""
    if "," in value:
        raise BenchError("the server answered more than one extension: %r" % value)
    parts = [p.strip() for p in value.split(";")]
    out = {"name": parts[0].lower()}
    for p in parts[1:]:
        k, sep, v = p.partition("=")
        out[k.strip().lower()] = v.strip().strip('"') if sep else True
    return out


class WsConn(TcpConn):
    def __init__(self, port, path="/ws", deflate=False, host="127.0.0.1",
                 timeout=5.0):
        super().__init__(port, host, timeout)
        key = base64.b64encode(os.urandom(16))
        lines = ["GET %s HTTP/1.1" % path, "Host: %s:%d" % (host, port),
                 "Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Key: %s" % key.decode(),
                 "Sec-WebSocket-Version: 13"]
        if deflate:
            lines.append("Sec-WebSocket-Extensions: " + DEFLATE_OFFER)
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 8192:
                raise BenchError("upgrade: response head too large: %r"
                                 % bytes(self.buf[:300]))
            self._fill("upgrade")
        end = self.buf.index(b"\r\n\r\n") + 4
        head = bytes(self.buf[:end])
        del self.buf[:end]
        self.head = head.decode("latin-1")
        lines = self.head.split("\r\n")
        if not lines[0].startswith("HTTP/1.1 101"):
            raise BenchError("upgrade: status line %r (want 101); response %r"
                             % (lines[0], head[:300]))
        hdrs = {}
        for line in lines[1:]:
            k, sep, v = line.partition(":")
            if sep:
                hdrs.setdefault(k.strip().lower(), []).append(v.strip())
        if [v.lower() for v in hdrs.get("upgrade", [])] != ["websocket"]:
            raise BenchError("upgrade: Upgrade %r; response %r" % (
                hdrs.get("upgrade"), head[:300]))
        if not any("upgrade" in [t.strip().lower() for t in v.split(",")]
                   for v in hdrs.get("connection", [])):
            raise BenchError("upgrade: Connection %r; response %r" % (
                hdrs.get("connection"), head[:300]))
        want = accept_for(key).decode()
        if hdrs.get("sec-websocket-accept") != [want]:
            raise BenchError("upgrade: Sec-WebSocket-Accept %r, want %r" % (
                hdrs.get("sec-websocket-accept"), want))
        if "sec-websocket-protocol" in hdrs:
            raise BenchError("upgrade: a subprotocol nobody offered: %r"
                             % hdrs["sec-websocket-protocol"])
        ext = hdrs.get("sec-websocket-extensions")
        self.extension = None
        self.comp = self.decomp = None
        self.reset_out = self.reset_in = False
        if ext:
            if not deflate or len(ext) != 1:
                raise BenchError("upgrade: extensions %r answered to an offer "
                                 "of %r" % (ext, DEFLATE_OFFER if deflate else
                                            "none"))
            e = parse_extension(ext[0])
            if e["name"] != "permessage-deflate":
                raise BenchError("upgrade: extension %r" % ext[0])
            known = {"name", "server_no_context_takeover",
                     "client_no_context_takeover", "server_max_window_bits",
                     "client_max_window_bits"}
            if set(e) - known:
                raise BenchError("upgrade: unknown permessage-deflate "
                                 "parameters in %r" % ext[0])
            bits = int(e.get("client_max_window_bits", 15))
            self.extension = ext[0]
            self.reset_out = "client_no_context_takeover" in e
            self.reset_in = "server_no_context_takeover" in e
            # zlib's raw deflate cannot use an 8-bit window: send plain then
            self.comp = zlib.compressobj(6, zlib.DEFLATED, -bits) if bits > 8 \
                else None
            self.decomp = zlib.decompressobj(-15)

    def _fill(self, what):
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise BenchError("%s: no answer within %.0f s (received so far: %r)"
                             % (what, self.sock.gettimeout(), bytes(self.buf[:200])))
        except OSError as e:
            raise BenchError("%s: %s" % (what, e))
        if not chunk:
            raise BenchError("%s: the server closed the connection (received "
                             "so far: %r)" % (what, bytes(self.buf[:200])))
        self.buf += chunk

    def send_frame(self, b0, payload):
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", b0, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", b0, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", b0, 0x80 | 127, n)
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def send_message(self, opcode, payload, fragments=1):
        rsv1 = 0
        if self.comp is not None:
            data = self.comp.compress(payload) + self.comp.flush(zlib.Z_SYNC_FLUSH)
            if not data.endswith(TAIL):
                raise BenchError("zlib's sync flush did not end in 00 00 ff ff")
            payload = data[:-4]
            rsv1 = 0x40
            if self.reset_out:
                self.comp = zlib.compressobj(6, zlib.DEFLATED, self.comp_bits())
        step = max(1, -(-len(payload) // fragments))
        pieces = [payload[i:i + step] for i in range(0, len(payload), step)] or [b""]
        for i, p in enumerate(pieces):
            b0 = (opcode | rsv1) if i == 0 else 0
            if i == len(pieces) - 1:
                b0 |= 0x80
            self.send_frame(b0, p)

    def comp_bits(self):
        e = parse_extension(self.extension)
        return -int(e.get("client_max_window_bits", 15))

    def recv_frame(self, what):
        while True:
            if len(self.buf) >= 2:
                b0, b1 = self.buf[0], self.buf[1]
                n = b1 & 127
                h = 2
                if n == 126:
                    h = 4
                elif n == 127:
                    h = 10
                if len(self.buf) >= h:
                    if n == 126:
                        n = struct.unpack("!H", self.buf[2:4])[0]
                    elif n == 127:
                        n = struct.unpack("!Q", self.buf[2:10])[0]
                    if b1 & 0x80:
                        raise BenchError("%s: a masked frame from the server: %r"
                                         % (what, bytes(self.buf[:40])))
                    if len(self.buf) >= h + n:
                        payload = bytes(self.buf[h:h + n])
                        del self.buf[:h + n]
                        return b0 >> 7, (b0 >> 4) & 7, b0 & 15, payload
            self._fill(what)

    def recv_message(self, what):
        """(opcode, payload) of the next data message, or ('close', payload)."""
        parts, op, comp = [], None, False
        while True:
            fin, rsv, opcode, payload = self.recv_frame(what)
            if opcode >= 8:
                if not fin or len(payload) > 125 or rsv:
                    raise BenchError("%s: a bad control frame (fin %d, rsv %d, "
                                     "%d bytes)" % (what, fin, rsv, len(payload)))
                if opcode == 8:
                    return "close", payload
                if opcode == 9:
                    self.send_frame(0x8A, payload)
                elif opcode != 10:
                    raise BenchError("%s: control opcode %d" % (what, opcode))
                continue
            if rsv & 3 or (rsv and self.decomp is None):
                raise BenchError("%s: RSV bits %d without an extension for them"
                                 % (what, rsv))
            if opcode in (1, 2):
                if op is not None:
                    raise BenchError("%s: a new message inside a fragmented one"
                                     % what)
                op, comp = opcode, bool(rsv)
            elif opcode == 0:
                if op is None or rsv:
                    raise BenchError("%s: an unexpected continuation" % what)
            else:
                raise BenchError("%s: data opcode %d" % (what, opcode))
            parts.append(payload)
            if fin:
                data = b"".join(parts)
                if comp:
                    try:
                        data = self.decomp.decompress(data + TAIL)
                    except zlib.error as e:
                        raise BenchError("%s: the compressed echo does not "
                                         "inflate: %s" % (what, e))
                    if self.reset_in:
                        self.decomp = zlib.decompressobj(-15)
                return op, data


def _payload(n, tag):
    text = ("%s " % tag) + "The quick brown fox jumps over the lazy dog. " * (n // 40 + 1)
    return text.encode()[:n]


def check(port, path="/ws", deflate=False, size=128):
    """Raise BenchError unless the server echoes correctly; returns a dict
    that describes the session (the answered extension)."""
    what = "ws %s" % path
    with WsConn(port, path, deflate) as c:
        if deflate and c.extension is None:
            raise BenchError("%s: the server declined permessage-deflate "
                             "(response head %r)" % (what, c.head[:300]))
        cases = [(1, _payload(size, "text"), 1, "a text message"),
                 (2, bytes(range(256)) * (size // 256) + bytes(range(size % 256)),
                  1, "a binary message"),
                 (1, _payload(max(size, 3), "fragmented"), 3,
                  "a text message in 3 fragments")]
        for opcode, payload, frags, label in cases:
            c.send_message(opcode, payload, frags)
            op, got = c.recv_message("%s: echo of %s" % (what, label))
            if op == "close":
                raise BenchError("%s: Close (%r) instead of the echo of %s" % (
                    what, got[:40], label))
            if op != opcode:
                raise BenchError("%s: echo of %s came back as %s" % (
                    what, label, "text" if op == 1 else "binary"))
            if got != payload:
                raise BenchError("%s: echo of %s differs: sent %d bytes %r, "
                                 "got %d bytes %r" % (what, label, len(payload),
                                                      payload[:48], len(got),
                                                      got[:48]))
        c.send_frame(0x88, struct.pack("!H", 1000))
        op, got = c.recv_message("%s: answer to Close" % what)
        if op != "close":
            raise BenchError("%s: a data message instead of the Close answer"
                             % what)
        return {"extension": c.extension}
