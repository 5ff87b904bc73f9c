#!/usr/bin/env python3
"""WebSocket (RFC 6455, RFC 7692) against the reference server's /ws echo, over
real sockets.

Happy paths use a real client, Python's websockets (Debian's
python3-websockets): messages of 0 B to 16 MiB, text and binary,
fragmented and not, with and without permessage-deflate, echoed byte for
byte. Every protocol error and handshake rejection is sent as raw bytes
from a socket, and the test checks the close code or the status. The
slow-reader case checks that a client that never reads cannot make the
server's memory grow past the send high-water mark.
"""

import asyncio
import base64
import hashlib
import os
import re
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (HOST, Conn, Server, Skip, Suite, build_request, check,
                     eq, sanitized, shared_reference_teardown, vmrss_kib,
                     websockets_module)
from wslib import (CHOPS, answer_going_away, at_rest, close_payload,
                   deflate_raw, expect_close, frame, mask_bytes, payload,
                   push_until_stalled, read_back, read_frame,
                   ws_frame_header, ws_key)

websockets = websockets_module()

suite = Suite()
case = suite.case
srv = None
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


tls_cert = None


def setup():
    global srv, tls_cert
    srv = Server("reference")
    tmp = tempfile.mkdtemp(prefix="tern-ws-")
    tls_cert = (os.path.join(tmp, "c.crt"), os.path.join(tmp, "c.key"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-subj", "/CN=localhost", "-keyout",
                    tls_cert[1], "-out", tls_cert[0]], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def teardown():
    shared_reference_teardown(srv)


# ---------------------------------------------------------------------------
# Raw WebSocket client

def handshake(port, path="/ws", extra=None, key=None, version="13",
              method="GET", proto="HTTP/1.1", conn_token="Upgrade",
              upgrade="websocket"):
    """Send a handshake; return (Conn, Response)."""
    c = Conn(port)
    headers = [("Host", "localhost")]
    if upgrade is not None:
        headers.append(("Upgrade", upgrade))
    if conn_token is not None:
        headers.append(("Connection", conn_token))
    if key is not False:
        headers.append(("Sec-WebSocket-Key", key or ws_key()))
    if version is not None:
        headers.append(("Sec-WebSocket-Version", version))
    for h in extra or []:
        headers.append(h)
    head = "%s %s %s\r\n" % (method, path, proto)
    head += "".join("%s: %s\r\n" % h for h in headers) + "\r\n"
    c.send(head.encode())
    r = c.head(time.monotonic() + 5)
    return c, r


def opened(port, path="/ws", extra=None):
    key = ws_key()
    c, r = handshake(port, path, extra, key=key)
    eq(r.status, 101, "handshake status")
    want = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest())
    eq(r.headers.get("sec-websocket-accept", "").encode(), want,
       "Sec-WebSocket-Accept")
    return c, r


def proto_error(frames, code, path="/ws"):
    c, _ = opened(srv.port, path)
    with c:
        c.send(b"".join(frames))
        expect_close(c, code)


# ---------------------------------------------------------------------------
# Handshake rejections

def rejected(status, **kw):
    c, r = handshake(srv.port, **kw)
    with c:
        eq(r.status, status, "status")
    return r


@case
def handshake_accepts_lists_and_any_case():
    """Upgrade and Connection are token lists, compared ignoring case."""
    c, r = handshake(srv.port, conn_token="keep-alive, UPGRADE",
                     upgrade="h2c, WebSocket")
    with c:
        eq(r.status, 101, "status")
        eq(r.headers.get("upgrade", "").lower(), "websocket", "Upgrade")
        check("upgrade" in r.headers.get("connection", "").lower(),
              "Connection: Upgrade")
        c.send(frame(0x2, b"abc"))
        eq(read_frame(c)[2:], (0x2, b"abc"), "echo")


@case
def handshake_plain_get_400():
    rejected(400, upgrade=None, conn_token=None, key=False, version=None)


@case
def handshake_no_connection_upgrade_400():
    rejected(400, conn_token="keep-alive")


@case
def handshake_no_upgrade_websocket_400():
    rejected(400, upgrade="h2c")


@case
def handshake_with_connection_close_400():
    """A handshake that also says Connection: close (in the same field or
    another) cannot become a WebSocket, since its connection ends after
    the answer: 400, then the close (it used to be left unanswered: the
    carrier refused the tunnel as if the handler had misused the API)."""
    for token, extra in (("Upgrade, close", None),
                         ("Upgrade", [("Connection", "close")])):
        c, r = handshake(srv.port, conn_token=token, extra=extra)
        with c:
            eq(r.status, 400, "status for %r %r" % (token, extra))
            eq(r.headers.get("connection", "").lower(), "close", "closes")


@case
def handshake_missing_key_400():
    rejected(400, key=False)


@case
def handshake_short_key_400():
    rejected(400, key=base64.b64encode(os.urandom(15)).decode())


@case
def handshake_bad_base64_key_400():
    rejected(400, key="!!!!!!!!!!!!!!!!!!!!!!==")


@case
def handshake_two_keys_400():
    rejected(400, extra=[("Sec-WebSocket-Key", ws_key())])


@case
def handshake_missing_version_400():
    rejected(400, version=None)


@case
def handshake_wrong_version_426():
    r = rejected(426, version="8")
    eq(r.headers.get("sec-websocket-version"), "13", "Sec-WebSocket-Version")


@case
def handshake_http10_400():
    rejected(400, proto="HTTP/1.0")


@case
def handshake_post_405():
    """The route is GET only: the router answers before any handshake."""
    r = rejected(405, method="POST")
    eq(r.headers.get("allow"), "GET, HEAD", "Allow")


@case
def handshake_rejected_connection_still_serves():
    c, r = handshake(srv.port, version="99")
    with c:
        eq(r.status, 426, "status")
        c.read_exact(int(r.headers["content-length"]), time.monotonic() + 5)
        c.send(build_request("GET", "/"))
        eq(c.response().status, 200, "next request on the connection")


@case
def handshake_subprotocol_chosen():
    c, r = handshake(srv.port, extra=[("Sec-WebSocket-Protocol",
                                       "chat, echo")])
    with c:
        eq(r.status, 101, "status")
        eq(r.headers.get("sec-websocket-protocol"), "echo", "subprotocol")


@case
def handshake_frames_in_same_packet_as_head():
    """Frames sent right behind the handshake are not read as HTTP."""
    key = ws_key()
    c = Conn(srv.port)
    with c:
        c.send(("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n" % key).encode() +
               frame(0x1, b"first") + frame(0x1, b"second"))
        eq(c.head(time.monotonic() + 5).status, 101, "status")
        eq(read_frame(c)[3], b"first", "first echo")
        eq(read_frame(c)[3], b"second", "second echo")


# ---------------------------------------------------------------------------
# Protocol errors: each gets its close code, then the connection ends

@case
def error_unmasked_frame_1002():
    proto_error([frame(0x1, b"hi", mask=False)], 1002)


@case
def error_rsv1_without_deflate_1002():
    proto_error([frame(0x1, b"hi", rsv=4)], 1002, "/ws?deflate=0")


@case
def error_rsv2_1002():
    proto_error([frame(0x1, b"hi", rsv=2)], 1002)


@case
def error_rsv3_1002():
    proto_error([frame(0x2, b"hi", rsv=1)], 1002)


@case
def error_reserved_data_opcode_1002():
    proto_error([frame(0x3, b"hi")], 1002)


@case
def error_reserved_control_opcode_1002():
    proto_error([frame(0xB, b"hi")], 1002)


@case
def error_fragmented_control_1002():
    proto_error([frame(0x9, b"hi", fin=False)], 1002)


@case
def error_oversized_control_1002():
    proto_error([frame(0x9, b"x" * 126)], 1002)


@case
def error_continuation_without_start_1002():
    proto_error([frame(0x0, b"hi")], 1002)


@case
def error_new_message_inside_fragmented_1002():
    proto_error([frame(0x1, b"a", fin=False), frame(0x1, b"b")], 1002)


@case
def error_invalid_utf8_1007():
    proto_error([frame(0x1, b"ok \xff")], 1007)


@case
def error_invalid_utf8_across_fragments_1007():
    """A sequence split over fragments is fine; a broken one is not."""
    c, _ = opened(srv.port)
    with c:
        euro = "\u20ac".encode()
        c.send(frame(0x1, euro[:1], fin=False) + frame(0x0, euro[1:]))
        eq(read_frame(c)[3], euro, "split character echoed")
        c.send(frame(0x1, euro[:2], fin=False) + frame(0x0, b"A"))
        expect_close(c, 1007)


@case
def error_text_ends_inside_character_1007():
    proto_error([frame(0x1, "\u20ac".encode()[:2])], 1007)


@case
def error_close_payload_one_byte_1002():
    proto_error([frame(0x8, b"\x03")], 1002)


@case
def error_close_codes_invalid_1002():
    for code in (0, 999, 1004, 1005, 1006, 1015, 2000, 2999, 5000):
        proto_error([frame(0x8, close_payload(code))], 1002)


@case
def error_close_reason_not_utf8_1007():
    proto_error([frame(0x8, close_payload(1000, b"\xc3\x28"))], 1007)


@case
def error_message_too_big_1009():
    proto_error([frame(0x2, b"x" * 1001)], 1009, "/ws?max=1000")


@case
def error_fragmented_message_too_big_1009():
    proto_error([frame(0x2, b"x" * 600, fin=False),
                 frame(0x0, b"x" * 600)], 1009, "/ws?max=1000")


def opened_deflate(path):
    c, r = opened(srv.port, path, [("Sec-WebSocket-Extensions",
                                    "permessage-deflate")])
    eq(r.headers.get("sec-websocket-extensions"), "permessage-deflate",
       "extension accepted")
    return c


@case
def error_deflate_bomb_1009():
    """A few hundred compressed bytes that inflate past the limit."""
    c = opened_deflate("/ws?max=100000")
    with c:
        bomb = deflate_raw(b"\0" * (8 << 20))
        check(len(bomb) < 10000, "the bomb is small")
        c.send(frame(0x2, bomb, rsv=4))
        expect_close(c, 1009)


@case
def error_deflate_corrupt_1007():
    c = opened_deflate("/ws")
    with c:
        c.send(frame(0x2, b"\xff\xff\xff\xff", rsv=4))
        expect_close(c, 1007)


@case
def error_deflate_invalid_utf8_text_1007():
    c = opened_deflate("/ws")
    with c:
        c.send(frame(0x1, deflate_raw(b"abc\xff"), rsv=4))
        expect_close(c, 1007)


@case
def deflate_raw_roundtrip():
    """Our own compressed frames (context kept across messages) are
    inflated and echoed compressed."""
    c = opened_deflate("/ws")
    with c:
        z = zlib.compressobj(9, zlib.DEFLATED, -15)
        d = zlib.decompressobj(-15)
        for i in range(3):
            msg = b"hello hello hello %d" % i
            out = z.compress(msg) + z.flush(zlib.Z_SYNC_FLUSH)
            c.send(frame(0x2, out[:-4], rsv=4))
            fin, rsv, op, payload = read_frame(c)
            eq((fin, rsv, op), (True, 4, 0x2), "compressed echo frame")
            eq(d.decompress(payload + b"\x00\x00\xff\xff"), msg, "echo")


# ---------------------------------------------------------------------------
# Control frames and the close handshake

@case
def ping_answered_with_same_payload():
    c, _ = opened(srv.port)
    with c:
        c.send(frame(0x9, b"payload-123"))
        eq(read_frame(c)[2:], (0xA, b"payload-123"), "pong")


@case
def ping_between_fragments():
    c, _ = opened(srv.port)
    with c:
        c.send(frame(0x1, b"ab", fin=False) + frame(0x9, b"p") +
               frame(0x0, b"cd"))
        eq(read_frame(c)[2:], (0xA, b"p"), "pong first")
        eq(read_frame(c)[2:], (0x1, b"abcd"), "then the message")


@case
def unsolicited_pong_ignored():
    c, _ = opened(srv.port)
    with c:
        c.send(frame(0xA, b"zzz") + frame(0x1, b"after"))
        eq(read_frame(c)[2:], (0x1, b"after"), "echo after the pong")


@case
def client_close_echoed():
    c, _ = opened(srv.port)
    with c:
        c.send(frame(0x8, close_payload(1000, b"done")))
        eq(expect_close(c, 1000), b"", "the server echoes the code")


@case
def client_close_without_code():
    c, _ = opened(srv.port)
    with c:
        c.send(frame(0x8))
        fin, rsv, op, payload = read_frame(c)
        eq((op, payload), (0x8, b""), "empty close answered with empty")
        check(c.at_eof(3.0), "connection ends")


@case
def server_close_handshake():
    c, _ = opened(srv.port, "/ws?cmds=1")
    with c:
        c.send(frame(0x1, b"close"))
        fin, rsv, op, payload = read_frame(c)
        eq((op, payload), (0x8, close_payload(4000, b"bye")), "close frame")
        c.send(frame(0x1, b"dropped") + frame(0x8, close_payload(4000)))
        check(c.at_eof(3.0), "connection ends after our close")


@case(timeout=30)
def server_close_times_out():
    """The client never answers the server's close: after the close
    timeout (5 s by default) the connection is closed."""
    c, _ = opened(srv.port, "/ws?cmds=1")
    with c:
        c.send(frame(0x1, b"close"))
        eq(read_frame(c)[2], 0x8, "close frame")
        t0 = time.monotonic()
        check(c.at_eof(12.0), "closed by the server")
        took = time.monotonic() - t0
        check(3.0 <= took <= 10.0, "closed after about 5 s, took %.1f" % took)


@case
def server_ping():
    c, _ = opened(srv.port, "/ws?cmds=1")
    with c:
        c.send(frame(0x1, b"ping"))
        eq(read_frame(c)[2:], (0x9, b"hi"), "ping from the server")


@case
def broadcast_skips_null_entries():
    """tern_ws_broadcast over {NULL, this socket, NULL}: the NULL entries
    are skipped (the first one used to be dereferenced), the socket gets
    the message once, and the server lives on."""
    c, _ = opened(srv.port, "/ws?cmds=1")
    with c:
        c.send(frame(0x1, b"bcast:to all"))
        eq(read_frame(c)[2:], (0x1, b"to all"), "the broadcast")
        c.send(frame(0x1, b"after"))
        eq(read_frame(c)[2:], (0x1, b"after"), "the socket still echoes")


@case
def send_from_another_thread():
    c, _ = opened(srv.port, "/ws?cmds=1")
    with c:
        for i in range(20):
            c.send(frame(0x1, b"thread:m%d" % i))
        got = sorted(read_frame(c)[3] for _ in range(20))
        eq(got, sorted(b"m%d" % i for i in range(20)), "posted sends")


@case
def pause_and_resume_from_another_thread():
    """pause:300 stops reading; a message sent meanwhile is echoed only
    once another thread has resumed the socket (posted to its worker)."""
    c, _ = opened(srv.port, "/ws?cmds=1")
    with c:
        c.send(frame(0x1, b"pause:300"))
        time.sleep(0.05)  # the pause is in place before the next message
        t0 = time.monotonic()
        c.send(frame(0x1, b"after"))
        eq(read_frame(c, 5)[2:], (0x1, b"after"), "echo after the resume")
        waited = time.monotonic() - t0
        check(waited >= 0.2, "echoed after %.3f s: not paused" % waited)


@case
def client_vanishes_mid_message():
    """A client that disconnects inside a message leaves nothing behind."""
    for _ in range(20):
        c, _ = opened(srv.port)
        c.send(frame(0x2, b"x" * 1000, length=100000)[:500])
        c.close()
    c, _ = opened(srv.port)
    with c:
        c.send(frame(0x2, b"alive"))
        eq(read_frame(c)[3], b"alive", "server still echoes")


@case(timeout=30)
def graceful_stop_sends_1001():
    """SIGTERM: every open socket gets close 1001; once the clients answer,
    the server exits cleanly."""
    s = Server("reference", ["--workers", "2"])
    try:
        conns = [opened(s.port)[0] for _ in range(4)]
        conns[0].send(frame(0x1, b"x"))
        eq(read_frame(conns[0])[3], b"x", "echo before the stop")
        s.signal()
        answer_going_away(conns)
        eq(s.wait(10), 0, "exit status")
    finally:
        if s.alive():
            s.kill()


@case(timeout=60)
def slow_reader_bounded_by_high_water():
    """A client that sends 64 KiB messages and never reads: the server
    stops reading once 1 MiB of echoes is queued (hw=1048576), so its RSS
    stays bounded while the client pushes 64 MiB at it."""
    s = Server("reference", ["--workers", "1"])
    try:
        c, _ = opened(s.port, "/ws?hw=1048576")
        with c:
            sock = c.sock
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            msg = frame(0x2, b"s" * 65536)
            rss0 = vmrss_kib(s.proc.pid)
            sent, off = push_until_stalled(sock, msg)
            grown = vmrss_kib(s.proc.pid) - rss0
            suite.note("sent %d KiB before the server stopped reading; "
                       "server RSS grew %d KiB" % (sent >> 10, grown))
            check(sent < (32 << 20), "the server pushed back (sent %d)" % sent)
            if not sanitized():  # ASan's quarantine keeps freed memory
                check(grown < 16 * 1024, "RSS grew %d KiB" % grown)
            # Reading now drains it, and reading resumes.
            read_back(c, msg, sent, off)
    finally:
        eq(s.stop(), 0, "reference exit status")


@case
def fail_send_mode_refuses_past_mark():
    """fail=1: past the mark, sends are refused (that echo is dropped) while
    reading goes on, and control frames still go out. Both messages arrive
    in one read, so the first echo is still queued when the second would
    be sent."""
    c, _ = opened(srv.port, "/ws?hw=1000&fail=1")
    with c:
        c.send(frame(0x2, b"a" * 5000) + frame(0x2, b"b" * 10) +
               frame(0x9, b"p"))
        eq(read_frame(c)[2:], (0x2, b"a" * 5000), "first echo")
        eq(read_frame(c)[2:], (0xA, b"p"), "pong; the second was refused")
        c.send(frame(0x2, b"c"))
        eq(read_frame(c)[2:], (0x2, b"c"), "sends work again once drained")


# ---------------------------------------------------------------------------
# HTTP/2 carrier (RFC 8441), raw frames: the helpers of test_h2.py

from http2 import test_h2 as h2  # noqa: E402 (its cases are not run here)

S_ENABLE_CONNECT_PROTOCOL = 0x8


def h2_settings(conn):
    """The server's SETTINGS pairs (the first SETTINGS frame)."""
    while True:
        t, fl, sid, p = conn.read_frame()
        if t == h2.SETTINGS and not fl & h2.ACK:
            conn.send(h2.frame(h2.SETTINGS, h2.ACK, 0))
            return dict(struct.unpack(">HI", p[i:i + 6])
                        for i in range(0, len(p), 6))


def h2_connect(conn, sid, path="/ws", version="13", extra=()):
    fields = [(":method", "CONNECT"), (":protocol", "websocket"),
              (":scheme", "http"), (":path", path), (":authority", "x"),
              ("sec-websocket-version", version)] + list(extra)
    block = b"".join(h2.hpack_literal(n, v) for n, v in fields)
    conn.send(h2.headers(sid, block, end_stream=False))


def h2_stream_frames(conn, sid, until, timeout=5.0):
    """Frames of stream `sid` until `until(frames)` holds; gives window
    credit back and acknowledges SETTINGS on the way."""
    got = []
    deadline = time.monotonic() + timeout
    while not until(got):
        f = conn.read_frame(max(0.01, deadline - time.monotonic()))
        check(f is not None, "connection closed; stream %d had %r"
              % (sid, got))
        t, fl, fsid, p = f
        if t == h2.SETTINGS and not fl & h2.ACK:
            conn.send(h2.frame(h2.SETTINGS, h2.ACK, 0))
        if t == h2.DATA and p:
            conn.send(h2.window_update(0, len(p)) +
                      h2.window_update(fsid, len(p)))
        if fsid == sid:
            got.append((t, fl, p))
    return got


def data_bytes(frames):
    return b"".join(p for t, fl, p in frames if t == h2.DATA)


def ended(frames):
    return any(fl & h2.END_STREAM for t, fl, p in frames
               if t in (h2.DATA, h2.HEADERS)) or \
        any(t == h2.RST_STREAM for t, fl, p in frames)


@case
def h2_settings_enable_connect_protocol():
    with h2.H2(srv.port) as conn:
        eq(h2_settings(conn).get(S_ENABLE_CONNECT_PROTOCOL), 1,
           "SETTINGS_ENABLE_CONNECT_PROTOCOL")


@case
def h2_extended_connect_echo_and_close():
    with h2.H2(srv.port) as conn:
        h2_settings(conn)
        h2_connect(conn, 1)
        fr = h2_stream_frames(conn, 1, lambda f: f)
        eq((fr[0][0], fr[0][1] & h2.END_STREAM), (h2.HEADERS, 0),
           "response HEADERS, stream left open")
        # Two messages in one DATA frame, then a ping: one batch back.
        conn.send(h2.frame(h2.DATA, 0, 1, frame(0x1, b"hello") +
                           frame(0x2, b"\x00\x01") + frame(0x9, b"p")))
        want = b"\x81\x05hello" + b"\x82\x02\x00\x01" + b"\x8a\x01p"
        fr = h2_stream_frames(conn, 1, lambda f: len(data_bytes(f)) >=
                              len(want))
        eq(data_bytes(fr), want, "echoes and pong, unmasked")
        conn.send(h2.frame(h2.DATA, 0, 1, frame(0x8, close_payload(1000))))
        fr = h2_stream_frames(conn, 1, ended)
        eq(data_bytes(fr), b"\x88\x02\x03\xe8", "close echoed")
        # The connection serves on.
        conn.send(h2.headers(3, h2.request_block("GET", "/")))
        eq(h2.collect_streams(conn, [3])[3], (b"Hello, World!", None),
           "GET / on the same connection")


@case
def h2_extended_connect_wrong_version_426():
    with h2.H2(srv.port) as conn:
        h2_settings(conn)
        h2_connect(conn, 1, version="8")
        fr = h2_stream_frames(conn, 1, ended)
        check(b"426" in data_bytes(fr), "426 body: %r" % data_bytes(fr))


@case
def h2_protocol_error_closes_stream_only():
    with h2.H2(srv.port) as conn:
        h2_settings(conn)
        h2_connect(conn, 1)
        h2_connect(conn, 3)
        conn.send(h2.frame(h2.DATA, 0, 1, frame(0x1, b"x", mask=False)))
        fr = h2_stream_frames(conn, 1, ended)
        check(data_bytes(fr).endswith(b"\x88\x02\x03\xea"),
              "close 1002 on stream 1: %r" % data_bytes(fr))
        conn.send(h2.frame(h2.DATA, 0, 3, frame(0x1, b"still here")))
        fr = h2_stream_frames(conn, 3, lambda f: len(data_bytes(f)) >= 12)
        eq(data_bytes(fr), b"\x81\x0astill here", "stream 3 echoes on")


@case
def h2_client_reset_frees_socket():
    """A stream reset mid-message frees the socket; the connection and its
    other sockets go on."""
    with h2.H2(srv.port) as conn:
        h2_settings(conn)
        for sid in range(1, 41, 2):
            h2_connect(conn, sid)
            conn.send(h2.frame(h2.DATA, 0, sid,
                               frame(0x2, b"z" * 100, length=5000)))
            conn.send(h2.rst_stream(sid))
        h2_connect(conn, 41)
        conn.send(h2.frame(h2.DATA, 0, 41, frame(0x2, b"ok")))
        fr = h2_stream_frames(conn, 41, lambda f: len(data_bytes(f)) >= 4,
                              timeout=10)
        eq(data_bytes(fr), b"\x82\x02ok", "echo on a new stream")


# ---------------------------------------------------------------------------
# A flow-controlled RFC 8441 client: WebSockets as streams of one HTTP/2
# connection (h2c or TLS), sending within the server's windows and giving
# credit back for what it reads, as a browser does.

class H2WsStream:
    def __init__(self, mux, sid, deflate):
        self.mux, self.sid = mux, sid
        self.win = mux.peer_init
        self.out = bytearray()
        self.inbuf = bytearray()
        self.frag = []
        self.frag_op = None
        self.frag_rsv = 0
        self.messages = []
        self.headers = False
        self.ended = False
        self.rsv1_seen = False
        self.deflate = deflate
        self.z = zlib.compressobj(6, zlib.DEFLATED, -15) if deflate else None
        self.unz = zlib.decompressobj(-15)

    def send(self, m, fragments=1):
        op = 0x1 if isinstance(m, str) else 0x2
        data = m.encode() if isinstance(m, str) else m
        rsv = 0
        if self.deflate:
            data = self.z.compress(data) + self.z.flush(zlib.Z_SYNC_FLUSH)
            data = data[:-4] if data.endswith(b"\x00\x00\xff\xff") else data
            rsv = 0x40
        k = max(1, min(fragments, len(data)))
        cut = [len(data) * i // k for i in range(k + 1)]
        for i in range(k):
            piece = data[cut[i]:cut[i + 1]]
            b0 = (0x80 if i == k - 1 else 0) | (rsv if i == 0 else 0) | \
                (op if i == 0 else 0)
            self.out += ws_frame_header(b0, len(piece)) + mask_bytes(piece)

    def on_data(self, p):
        self.inbuf += p
        while True:
            b = self.inbuf
            if len(b) < 2:
                return
            check(not b[1] & 0x80, "server frames are unmasked")
            n, off = b[1] & 0x7f, 2
            if n == 126:
                if len(b) < 4:
                    return
                n, off = struct.unpack("!H", b[2:4])[0], 4
            elif n == 127:
                if len(b) < 10:
                    return
                n, off = struct.unpack("!Q", b[2:10])[0], 10
            if len(b) < off + n:
                return
            b0, payload = b[0], bytes(b[off:off + n])
            del self.inbuf[:off + n]
            op = b0 & 0x0f
            if op >= 0x8:
                self.messages.append((op, payload))
                continue
            if op != 0:
                self.frag_op, self.frag_rsv, self.frag = op, b0 & 0x40, []
            self.frag.append(payload)
            if b0 & 0x80:
                data = b"".join(self.frag)
                if self.frag_rsv:
                    self.rsv1_seen = True
                    data = self.unz.decompress(data + b"\x00\x00\xff\xff")
                self.messages.append((self.frag_op, data))


# Chromium's receive windows: 6 MiB a stream, 15 MiB the connection.
BROWSER_WINDOWS = [(h2.S_INITIAL_WINDOW_SIZE, 6 << 20)]


def browser_h2(port):
    conn = h2.H2(port, BROWSER_WINDOWS, timeout=30)
    conn.send(h2.window_update(0, (15 << 20) - 65535))
    return conn


class H2WsMux:
    """The connection: windows both ways, frames routed to streams."""

    def __init__(self, conn):
        self.c = conn
        self.win = 65535
        self.peer_init = 65535
        self.streams = {}
        while True:
            t, fl, sid, p = conn.read_frame()
            if t == h2.SETTINGS and not fl & h2.ACK:
                self.on_settings(p)
                conn.send(h2.frame(h2.SETTINGS, h2.ACK, 0))
                break
            self.on_frame(t, fl, sid, p)

    def on_settings(self, p):
        for i in range(0, len(p), 6):
            k, v = struct.unpack(">HI", p[i:i + 6])
            if k == h2.S_INITIAL_WINDOW_SIZE:
                for st in self.streams.values():
                    st.win += v - self.peer_init
                self.peer_init = v

    def open(self, sid, path="/ws", deflate=False):
        st = H2WsStream(self, sid, deflate)
        self.streams[sid] = st
        extra = [("sec-websocket-extensions", "permessage-deflate")] \
            if deflate else []
        h2_connect(self.c, sid, path, extra=extra)
        self.run(lambda: st.headers, 5)
        check(not st.ended, "stream %d refused" % sid)
        return st

    def on_frame(self, t, fl, sid, p):
        st = self.streams.get(sid)
        if t == h2.SETTINGS and not fl & h2.ACK:
            self.on_settings(p)
            self.c.send(h2.frame(h2.SETTINGS, h2.ACK, 0))
        elif t == h2.WINDOW_UPDATE:
            inc = struct.unpack(">I", p)[0] & 0x7fffffff
            if sid == 0:
                self.win += inc
            elif st is not None:
                st.win += inc
        elif t == h2.GOAWAY:
            raise AssertionError("GOAWAY %r" % (p[:8],))
        elif st is not None:
            if t == h2.HEADERS:
                st.headers = True
            if t == h2.DATA and p:
                self.c.send(h2.window_update(0, len(p)) +
                            h2.window_update(sid, len(p)))
                st.on_data(p)
            if t == h2.RST_STREAM or fl & h2.END_STREAM and \
                    t in (h2.DATA, h2.HEADERS):
                st.ended = True

    chop = 0  # > 0: DATA frames of at most this many bytes, one send each

    def flush(self):
        """Send what the windows allow, up to 128 KiB at a time: the
        caller reads between, so neither side's socket buffers fill up
        with both of them writing."""
        out = bytearray()
        for sid, st in self.streams.items():
            while st.out and self.win > 0 and st.win > 0 and \
                    len(out) < 128 << 10:
                n = min(len(st.out), self.win, st.win, self.chop or 16384)
                f = h2.frame(h2.DATA, 0, sid, bytes(st.out[:n]))
                del st.out[:n]
                self.win -= n
                st.win -= n
                if self.chop:  # written to the socket as it is made
                    self.c.sock.settimeout(30)
                    self.c.send(f)
                else:
                    out += f
        if out:
            self.c.sock.settimeout(30)  # read_frame leaves its own
            self.c.send(bytes(out))

    def buffered(self):
        b = self.c.buf
        return (len(b) >= 9 and len(b) >= 9 + int.from_bytes(b[:3], "big")) \
            or (hasattr(self.c.sock, "pending") and self.c.sock.pending())

    def run(self, until, timeout):
        deadline = time.monotonic() + timeout
        while not until():
            check(time.monotonic() < deadline, "timed out")
            self.flush()
            can_send = self.win > 0 and any(
                st.out and st.win > 0 for st in self.streams.values())
            if not self.buffered():
                r, _, _ = select.select([self.c.sock], [self.c.sock]
                                        if can_send else [], [], 1.0)
                if not r:
                    continue
            for _ in range(256):  # what has arrived, then send again
                try:
                    f = self.c.read_frame(0.001)
                except socket.timeout:
                    break
                check(f is not None, "connection closed")
                self.on_frame(*f)
                if not self.buffered():
                    break


class H2Tls(h2.H2):
    """The raw client over TLS, ALPN h2."""

    def __init__(self, port, timeout=5.0):
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        raw = socket.create_connection((HOST, port), timeout=timeout)
        # As browsers do: without it a small frame written right after
        # another waits for the server's delayed ACK (some 40 ms).
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = ctx.wrap_socket(raw)
        self.buf = bytearray()
        self.eof = False
        eq(self.sock.selected_alpn_protocol(), "h2", "ALPN")
        self.send(h2.PREFACE + h2.settings(BROWSER_WINDOWS) +
                  h2.window_update(0, (15 << 20) - 65535))


def h2_echo_sizes(conn):
    """Every size of the HTTP/1.1 suite, text and binary, whole and in three
    fragments, with and without permessage-deflate, on two sockets of one
    connection; then several messages in flight on each."""
    mux = H2WsMux(conn)
    sid = 1
    for deflate in (False, True):
        st = mux.open(sid, deflate=deflate)
        sid += 2
        for n in SIZES:
            for text in (False, True):
                for frags in (1, 3):
                    m = payload(n, text)
                    st.send(m, frags)
                    mux.run(lambda: st.messages, 120)
                    op, got = st.messages.pop(0)
                    eq(op, 0x1 if text else 0x2, "opcode at %d" % n)
                    want = m.encode() if text else m
                    check(got == want, "%d-byte %s message (%d fragments, "
                          "deflate %d) echoed intact"
                          % (n, "text" if text else "binary", frags, deflate))
        eq(st.rsv1_seen, deflate, "compressed replies iff negotiated")
    a, b = mux.open(sid), mux.open(sid + 2, deflate=True)
    msgs = [payload(n, n % 2 == 0) for n in (5, 70000, 1 << 20, 300000, 1)]
    for st in (a, b):
        for m in msgs:
            st.send(m)
    mux.run(lambda: len(a.messages) == len(b.messages) == len(msgs), 60)
    for st in (a, b):
        for m, (op, got) in zip(msgs, st.messages):
            check(got == (m.encode() if isinstance(m, str) else m),
                  "in-flight message of %d bytes" % len(m))


@case(timeout=300)
def h2_echo_sizes_h2c():
    """RFC 8441 over h2c with a client that does flow control: a 1 MiB
    message once spun the worker (every DATA of the reply was framed in
    one nghttp2 call, then its drain marker fired and re-armed forever)."""
    with browser_h2(srv.port) as conn:
        h2_echo_sizes(conn)


@case(timeout=300)
def h2_echo_sizes_tls():
    with Server("reference", ["--workers", "1", "--tls-port", "0", "--cert",
                              tls_cert[0], "--key", tls_cert[1]]) as s:
        m = re.match(r"tls listening on (\d+)$", s.next_line())
        check(m is not None, "no tls port line")
        with H2Tls(int(m.group(1))) as conn:
            h2_echo_sizes(conn)


def chopped_then_empties(port, connect):
    """Issue 36's sequence, on a fresh one-worker server: six 1 MiB text
    messages, each one frame on a connection of its own written in DATA
    frames of 64 to 2048 bytes (one send() each) and closed with 1000
    after its echo; then a new connection sends 1000 empty messages, each
    waiting for its echo. It was reported to leave WebSocket over HTTP/2
    silent on that worker. After each step the server's WebSocket,
    stream and connection counts are back at rest."""
    m = payload(1 << 20, True)
    for chop in CHOPS:
        with connect() as conn:
            mux = H2WsMux(conn)
            mux.chop = chop
            st = mux.open(1)
            st.send(m)
            mux.run(lambda: st.messages, 120)
            got = st.messages.pop(0)
            check(got == (0x1, m.encode()), "1 MiB in %d-byte DATA frames: "
                  "echo of %d bytes, opcode %d" % (chop, len(got[1]), got[0]))
            st.out += frame(0x8, close_payload(1000))
            mux.run(lambda: st.messages or st.ended, 10)
            eq(st.messages[:1], [(0x8, close_payload(1000))],
               "close echoed after the %d-byte chops" % chop)
        at_rest(port, "after the %d-byte chops" % chop)
    t0 = time.monotonic()
    with connect() as conn:
        mux = H2WsMux(conn)
        st = mux.open(1)
        for i in range(1000):
            st.send("")
            mux.run(lambda: st.messages, 10)
            eq(st.messages.pop(0), (0x1, b""), "empty message %d echoed" % i)
        st.out += frame(0x8, close_payload(1000))
        mux.run(lambda: st.messages or st.ended, 10)
    m = at_rest(port, "after the empties")
    suite.note("1000 empty echoes in %.2f s; messages in/out %d/%d" % (
        time.monotonic() - t0,
        m['tern_websocket_messages_total{direction="in"}'],
        m['tern_websocket_messages_total{direction="out"}']))


@case(timeout=180)
def h2_chopped_messages_then_empties_h2c():
    with Server("reference", ["--workers", "1"]) as s:
        chopped_then_empties(s.port, lambda: browser_h2(s.port))


@case(timeout=180)
def h2_chopped_messages_then_empties_tls():
    with Server("reference", ["--workers", "1", "--tls-port", "0", "--cert",
                              tls_cert[0], "--key", tls_cert[1]]) as s:
        m = re.match(r"tls listening on (\d+)$", s.next_line())
        check(m is not None, "no tls port line")
        chopped_then_empties(s.port, lambda: H2Tls(int(m.group(1))))


@case(timeout=60)
def h2_small_high_water_echo():
    """A 5 KB echo on a socket whose high-water mark (1000) is below what
    the connection's queue holds: the drain marker waits behind the bytes
    in flight (it once completed in the loop that re-armed it)."""
    with browser_h2(srv.port) as conn:
        mux = H2WsMux(conn)
        st = mux.open(1, "/ws?hw=1000")
        for i in range(20):
            m = bytes([i]) * 5000
            st.send(m)
            mux.run(lambda: st.messages, 10)
            eq(st.messages.pop(0), (0x2, m), "echo %d" % i)


@case(timeout=120)
def h2_large_message_leaves_worker_free():
    """With one worker, a 16 MiB message echoed over h2 does not hold up
    other connections: GETs on new connections are answered meanwhile."""
    with Server("reference", ["--workers", "1"]) as s:
        done = threading.Event()
        err = []

        def big():
            try:
                with browser_h2(s.port) as conn:
                    mux = H2WsMux(conn)
                    st = mux.open(1)
                    for _ in range(3):
                        m = os.urandom(16 << 20)
                        st.send(m)
                        mux.run(lambda: st.messages, 100)
                        check(st.messages.pop(0) == (0x2, m), "echo")
            except Exception as e:  # reported below
                err.append(e)
            done.set()
        t = threading.Thread(target=big, daemon=True)
        t.start()
        served = 0
        worst = 0.0
        while not done.is_set():
            t0 = time.monotonic()
            with Conn(s.port, timeout=5) as c:
                c.send(build_request("GET", "/"))
                eq(c.response().status, 200, "GET / meanwhile")
            worst = max(worst, time.monotonic() - t0)
            served += 1
            time.sleep(0.02)
        t.join(5)
        check(not err, "the large echo: %r" % err)
        suite.note("%d GETs answered meanwhile, slowest %.3f s"
                   % (served, worst))
        check(served >= 3 and worst < 2, "GETs served: %d, slowest %.2f s"
              % (served, worst))


# ---------------------------------------------------------------------------
# A real client: python3-websockets

def need_websockets():
    if websockets is None:
        raise Skip("python3-websockets is not installed")


def run_async(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


SIZES = [0, 1, 125, 126, 127, 65535, 65536, 1 << 20, 16 << 20]


async def echo_all(path, compression, fragmented):
    uri = "ws://%s:%d%s" % (HOST, srv.port, path)
    async with websockets.connect(uri, compression=compression,
                                  max_size=None, max_queue=None) as ws:
        ext = ws.response_headers.get("Sec-WebSocket-Extensions")
        if compression:
            check(ext is not None and "permessage-deflate" in ext,
                  "deflate negotiated: %r" % ext)
        else:
            check(ext is None, "no extension: %r" % ext)
        for n in SIZES:
            for text in (False, True):
                m = payload(n, text)
                if fragmented and n >= 3:
                    third = n // 3
                    await ws.send([m[:third], m[third:2 * third],
                                   m[2 * third:]])
                else:
                    await ws.send(m)
                got = await ws.recv()
                check(type(got) is type(m), "type kept at %d" % n)
                check(got == m, "%d-byte %s message echoed intact"
                      % (n, "text" if text else "binary"))


@case(timeout=120)
def echo_sizes_plain():
    need_websockets()
    run_async(echo_all("/ws", None, False))


@case(timeout=120)
def echo_sizes_deflate():
    need_websockets()
    run_async(echo_all("/ws", "deflate", False))


@case(timeout=120)
def echo_sizes_fragmented():
    need_websockets()
    run_async(echo_all("/ws", None, True))


@case(timeout=120)
def echo_sizes_fragmented_deflate_streamed():
    """Fragmented, compressed, and received in pieces by the server
    (stream=1), which echoes them as fragments."""
    need_websockets()
    run_async(echo_all("/ws?stream=1", "deflate", True))


@case
def client_ping_and_close_code():
    need_websockets()

    async def go():
        uri = "ws://%s:%d/ws" % (HOST, srv.port)
        async with websockets.connect(uri) as ws:
            pong = await ws.ping(b"abc")
            await asyncio.wait_for(pong, 5)
            await ws.close(code=4001, reason="over")
            eq(ws.close_code, 4001, "close code echoed")
    run_async(go())


@case
def server_close_seen_by_client():
    need_websockets()

    async def go():
        uri = "ws://%s:%d/ws?cmds=1" % (HOST, srv.port)
        async with websockets.connect(uri) as ws:
            await ws.send("close")
            try:
                await asyncio.wait_for(ws.recv(), 5)
                raise AssertionError("expected the close")
            except websockets.ConnectionClosed:
                pass
            eq((ws.close_code, ws.close_reason), (4000, "bye"), "close")
    run_async(go())


@case
def many_sockets_many_messages():
    """64 sockets, 8 messages in flight on each, 50 rounds."""
    need_websockets()

    async def one(i):
        uri = "ws://%s:%d/ws" % (HOST, srv.port)
        async with websockets.connect(uri) as ws:
            for r in range(50):
                msgs = [b"%d-%d-%d" % (i, r, k) for k in range(8)]
                for m in msgs:
                    await ws.send(m)
                for m in msgs:
                    eq(await ws.recv(), m, "echo in order")

    async def go():
        await asyncio.gather(*(one(i) for i in range(64)))
    run_async(go())


if __name__ == "__main__":
    suite.main(setup, teardown)
