#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_conn (test/fuzz/corpus_conn/): one file per
kind of connection the target's routes serve, so that the fuzzer starts
from inputs that get deep (HPACK blocks and WebSocket masks are hard to
find from nothing). The first byte picks the protocol: 0 HTTP/1.1,
1 HTTP/2 by prior knowledge (the target sends the preface itself), 2 TLS
(ClientHellos from Python's ssl, made in memory: a new run makes new
random values, which is why the seeds are checked in).

  test/fuzz/gen_conn_corpus.py     (rewrites the directory's seeds)
"""
import base64
import os
import ssl
import struct
import sys
import zlib

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "net"))
import test_h2 as h2  # noqa: E402 (frame and HPACK helpers)

OUT = os.path.join(HERE, "corpus_conn")


def ws_frame(opcode, payload, fin=True, rsv1=False, mask=b"\x01\x02\x03\x04"):
    b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    masked = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return head + mask + masked


def deflated(data):
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    return (c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]


KEY = base64.b64encode(b"0123456789abcdef").decode()
WS_HEAD = ("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
           "Sec-WebSocket-Version: 13\r\n" % KEY)

H1 = {
    "get": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "pipeline-later": b"GET /later HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"HEAD /chunks HTTP/1.1\r\nHost: x\r\n\r\n",
    "echo": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    "up-chunked": b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                  b"\r\n\r\n5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n",
    "continue": b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                b"Content-Length: 3\r\n\r\nabc",
    "chunks-10": b"GET /chunks HTTP/1.0\r\n\r\n",
    "ws-echo": (WS_HEAD + "\r\n").encode() + ws_frame(1, b"hi") +
               ws_frame(9, b"p") + ws_frame(8, b"\x03\xe8"),
    "ws-deflate": (WS_HEAD + "Sec-WebSocket-Extensions: permessage-deflate"
                   "\r\n\r\n").encode() +
                  ws_frame(1, deflated(b"hello hello"), rsv1=True) +
                  ws_frame(2, b"ab", fin=False) + ws_frame(0, b"cd"),
    "h2c-upgrade": b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, "
                   b"HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: \r\n\r\n"
                   b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2.settings(),
}

H2 = {
    "get": h2.headers(1, h2.request_block("GET", "/")),
    "streams": b"".join(h2.headers(s, h2.request_block("GET", p))
                        for s, p in ((1, "/"), (3, "/later"), (5, "/chunks"))),
    "echo": h2.headers(1, h2.request_block("POST", "/echo"), end_stream=False)
            + h2.frame(0, 0, 1, b"abc") + h2.frame(0, 1, 1, b"def"),
    "up-window": h2.settings([(4, 0)]) +
                 h2.headers(1, h2.request_block("POST", "/up"),
                            end_stream=False) +
                 h2.frame(0, 1, 1, b"x" * 100) + h2.window_update(0, 1000),
    "rst": h2.headers(1, h2.request_block("GET", "/later")) + h2.rst_stream(1),
    "ws-connect": h2.settings() + h2.headers(
        1, h2.request_block("CONNECT", "/ws", extra=(
            (":protocol", "websocket"), ("sec-websocket-version", "13"))),
        end_stream=False) + h2.frame(0, 0, 1, ws_frame(1, b"hi")),
}


def client_hello(alpn=None, sni=None, max_version=None):
    """The first flight of Python's TLS client, made in memory."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    if max_version:
        ctx.maximum_version = max_version
    inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, outg, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outg.read()


TLS = {
    "hello-h2": lambda: client_hello(["h2", "http/1.1"], "localhost"),
    "hello-12": lambda: client_hello(["http/1.1"], "localhost",
                                     ssl.TLSVersion.TLSv1_2),
    "hello-nosni": lambda: client_hello(),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in H1.items():
        with open(os.path.join(OUT, "h1-" + name), "wb") as f:
            f.write(b"\x00" + data)
    for name, data in H2.items():
        with open(os.path.join(OUT, "h2-" + name), "wb") as f:
            f.write(b"\x01" + data)
    # 2: the default TLS engine's port; 3: the other engine's (mbedTLS).
    for name, make in TLS.items():
        hello = make()
        with open(os.path.join(OUT, "tls-" + name), "wb") as f:
            f.write(b"\x02" + hello)
        with open(os.path.join(OUT, "tls-mbedtls-" + name), "wb") as f:
            f.write(b"\x03" + hello)


if __name__ == "__main__":
    main()
