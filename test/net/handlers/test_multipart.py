#!/usr/bin/env python3
"""multipart/form-data read as it streams in (tern_multipart_*, the
reference server's POST /multipart on a streamed-body route), over real
sockets: curl's -F over HTTP/1.1 and h2c, and raw HTTP/1.1 where the
body must arrive in small pieces or be wrong.

The reference answers one line per part, "NAME FILENAME BYTES FNV1A64",
computed from the DATA events alone, so a byte lost, doubled or moved
across a delimiter shows; a 64 MiB file goes through without the server
holding it.
"""

import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import Conn, Server, Suite, check, eq, sanitized, vmrss_kib

suite = Suite()
case = suite.case
S = {}


def setup():
    S["srv"] = Server("reference", ["--workers", "1"])
    S["dir"] = tempfile.mkdtemp(prefix="tern-mp-")


def teardown():
    S["srv"].stop()


def fnv(data):
    h = 14695981039346656037
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def line(name, filename, data):
    return "%s %s %d %s" % (name, filename or "-", len(data), fnv(data))


def curl_form(fields, h2=False):
    args = ["curl", "-s", "-w", "\n%{http_code}"]
    if h2:
        args.append("--http2-prior-knowledge")
    for f in fields:
        args += ["-F", f]
    p = subprocess.run(args + ["http://127.0.0.1:%d/multipart"
                               % S["srv"].port],
                       capture_output=True, timeout=60)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code), body.decode()


@case
def curl_forms_h1_and_h2():
    data = os.urandom(300000) + b"\r\n--" + os.urandom(1000)
    path = os.path.join(S["dir"], "up.bin")
    with open(path, "wb") as f:
        f.write(data)
    for h2 in (False, True):
        code, body = curl_form(["title=hello world", "empty=",
                                "f=@%s;filename=report.bin" % path], h2)
        eq(code, 200, "status (h2 %s)" % h2)
        eq(body.splitlines(), [line("title", None, b"hello world"),
                               line("empty", None, b""),
                               line("f", "report.bin", data), "end"],
           "parts (h2 %s)" % h2)


def raw_post(body, ctype, piece=None, pause=0.0):
    """POST /multipart over raw HTTP/1.1, the body chunked in `piece`-byte
    writes (or whole)."""
    with Conn(S["srv"].port, timeout=30) as c:
        head = ("POST /multipart HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n"
                % ctype)
        if piece is None:
            c.send(head.encode() + b"Content-Length: %d\r\n\r\n" % len(body)
                   + body)
        else:
            c.send(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(body), piece):
                p = body[i:i + piece]
                c.send(b"%x\r\n%s\r\n" % (len(p), p))
                if pause:
                    time.sleep(pause)
            c.send(b"0\r\n\r\n")
        r = c.response()
        return r.status, r.body.decode()


@case(timeout=60)
def delimiters_split_across_pieces():
    """A body written 1, 2, 3, 5 and 7 bytes at a time (chunked, so the
    server sees small pieces): parts whose data holds near-delimiters."""
    parts = [(b"a", b"\r\n--BOUNDARX\r\r\n--BOUND"),
             (b"b", b"--BOUNDARY"), (b"c", b"")]
    body = b"preamble\r\n"
    for name, data in parts:
        body += (b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"%s\""
                 b"\r\n\r\n%s\r\n" % (name, data))
    body += b"--BOUNDARY--\r\nepilogue"
    want = [line(n.decode(), None, d) for n, d in parts] + ["end"]
    for piece in (1, 2, 3, 5, 7, None):
        # A pause between the smallest pieces, so that the server reads
        # them one by one.
        status, text = raw_post(body, "multipart/form-data; boundary=BOUNDARY",
                                piece, 0.001 if piece in (1, 2) else 0.0)
        eq((status, text.splitlines()), (200, want), "pieces of %s" % piece)


@case
def refused_bodies():
    ct = "multipart/form-data; boundary=B"
    eq(raw_post(b"x", "text/plain")[0], 415, "not multipart: 415")
    eq(raw_post(b"x", "multipart/form-data")[0], 415, "no boundary: 415")
    eq(raw_post(b"--B\r\nA: b\r\n\r\ndata", ct)[0], 400, "incomplete: 400")
    eq(raw_post(b"--B\r\nno colon\r\n\r\nx\r\n--B--", ct)[0], 400,
       "a malformed head: 400")
    body = b"".join(b"--B\r\n\r\n%d\r\n" % i for i in range(3)) + b"--B--"
    with Conn(S["srv"].port) as c:
        c.send(b"POST /multipart?parts=2 HTTP/1.1\r\nHost: x\r\nContent-Type:"
               b" multipart/form-data; boundary=B\r\nContent-Length: %d\r\n\r\n"
               % len(body) + body)
        eq(c.response().status, 413, "a third part past parts=2: 413")


@case(timeout=120)
def large_upload_is_not_held():
    """A 64 MiB file: the server hashes it as it streams through; its
    memory grows by far less than the file."""
    path = os.path.join(S["dir"], "big.bin")
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(64):
            f.write(block)
    s = S["srv"]
    rss0 = vmrss_kib(s.proc.pid)
    code, body = curl_form(["big=@%s;filename=big.bin" % path])
    grown = vmrss_kib(s.proc.pid) - rss0
    eq(code, 200, "status")
    eq(body.splitlines(), [line("big", "big.bin", block * 64), "end"],
       "the 64 MiB part's size and hash")
    suite.note("server RSS grew %d KiB for a 64 MiB upload" % grown)
    if not sanitized():
        check(grown < 16 << 10, "RSS grew %d KiB" % grown)


if __name__ == "__main__":
    suite.main(setup, teardown)
