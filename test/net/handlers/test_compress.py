"""On-the-fly response compression (tern_route_options.compress; reference
--compress: /compress, /ctick and, with --static, /cstatic/) over real
sockets: raw HTTP/1.1, curl over HTTP/1.1 and HTTP/2 (h2c), and tern's own
HTTP/3 client; gzip, zstd and br.

Every compressed body is decompressed and compared byte for byte with what
the handler wrote (gzip by Python's zlib, zstd and br by the zstd and
brotli tools; curl --compressed agrees); every answer of a compressing route must carry
Vary: Accept-Encoding, compressed or not.
"""

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import BUILD, self_signed  # noqa: E402
from harness import Conn, Server, Skip, Suite, check, eq, get

suite = Suite()
S = {}


def text(n):
    """The reference server's /compress body: the same lines, cut to n
    bytes."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += b"line %06d: the quick brown fox jumps over the lazy dog\n" % i
        i += 1
    return bytes(out[:n])


FILE = b"static text that compresses, again and again\n" * 200


def setup():
    d = tempfile.mkdtemp(prefix="tern-compress-")
    root = os.path.join(d, "root")
    os.makedirs(root)
    with open(os.path.join(root, "f.txt"), "wb") as f:
        f.write(FILE)
    S["dir"], S["root"] = d, root
    S["srv"] = Server("reference", ["--compress", "--static", root])


def port():
    return S["srv"].port


def gz(**hs):
    h = {"Accept-Encoding": "gzip"}
    h.update(hs)
    return h


def tool(argv, data):
    out = subprocess.run(argv, input=data, capture_output=True, timeout=10)
    check(out.returncode == 0, "%s: %r" % (" ".join(argv), out.stderr))
    return out.stdout


def decode(coding, data):
    if coding == "gzip":
        return gzip.decompress(data)
    if coding == "zstd":
        return tool(["zstd", "-dcq"], data)
    if coding == "br":
        return tool(["brotli", "-dc"], data)
    raise AssertionError("unknown coding %r" % coding)


def compressed(r, want, what, coding="gzip"):
    """r is an answer in `coding` whose decompressed body is `want`."""
    eq(r.headers.get("content-encoding"), coding, what + ": coding")
    eq(r.headers.get("vary"), "Accept-Encoding", what + ": vary")
    check(r.headers.get("accept-ranges") is None,
          what + ": no ranges of the compressed bytes")
    body = decode(coding, r.body)
    eq(body, want, what + ": decompressed body")
    check(len(r.body) < len(want), what + ": smaller")


def identity(r, want, what):
    check("content-encoding" not in r.headers, what + ": not compressed")
    eq(r.headers.get("vary"), "Accept-Encoding", what + ": vary")
    eq(r.body, want, what + ": body")


@suite.case
def q_values():
    want = text(4096)
    # The highest q-value wins; ties go to br, then zstd, then gzip.
    for ae, coding in [
            ("gzip", "gzip"), ("GZIP", "gzip"), ("x-gzip", "gzip"),
            ("*", "br"), ("br;q=1, gzip;q=0.5", "br"), ("br", "br"),
            ("BR", "br"), ("br;q=0.5, gzip", "gzip"),
            ("zstd;q=0.5, gzip", "gzip"), ("zstd", "zstd"),
            ("gzip;q=0.8, zstd;q=0.9, br;q=1", "br"),
            ("gzip;q=0.8, zstd;q=0.9, br;q=0.7", "zstd"),
            ("gzip, deflate, br, zstd", "br"), ("gzip, zstd", "zstd"),
            ("gzip, deflate, br", "br"),
            ("deflate, gzip;q=0.001", "gzip"),
            ("identity;q=0.5, *;q=0.2", "br"), ("zstd;q=0, *", "br"),
            ("br;q=0, *", "zstd"), ("br;q=0, zstd;q=0, *", "gzip")]:
        r = get(port(), "/compress", headers={"Accept-Encoding": ae})
        eq(r.status, 200, ae)
        compressed(r, want, ae, coding)
        eq(int(r.headers["content-length"]), len(r.body),
           ae + ": a whole body keeps an exact length")
    for ae in ["gzip;q=0", "gzip;q=0.000", "*;q=0", "identity", "deflate",
               "compress", "br;q=0, zstd;q=0, *;q=0",
               "gzip;q=0, br;q=0, zstd;q=0, *", "", "gzip;q=x"]:
        r = get(port(), "/compress", headers={"Accept-Encoding": ae})
        identity(r, want, "refused %r" % ae)
        eq(r.headers["content-length"], "4096", ae + ": length")
    r = get(port(), "/compress")
    identity(r, want, "no Accept-Encoding")


@suite.case
def rules():
    # The threshold (1024 by default) counts a body known up front.
    identity(get(port(), "/compress?bytes=1023", headers=gz()), text(1023),
             "below the threshold")
    compressed(get(port(), "/compress?bytes=1024", headers=gz()), text(1024),
               "at the threshold")
    identity(get(port(), "/compress?bytes=0", headers=gz()), b"", "empty")
    # Types: text/* and the listed application types only.
    compressed(get(port(), "/compress?type=json", headers=gz()), text(4096),
               "application/json")
    identity(get(port(), "/compress?type=png", headers=gz()), text(4096),
             "image/png")
    identity(get(port(), "/compress?type=none", headers=gz()), text(4096),
             "no Content-Type")
    # The handler's own coding: its bytes go out untouched.
    r = get(port(), "/compress?ce=1", headers=gz())
    eq(r.body, text(4096), "already encoded: untouched")
    eq(r.header_count("content-encoding"), 1, "one Content-Encoding")
    eq(r.headers["vary"], "Accept-Encoding", "already encoded: vary")
    identity(get(port(), "/compress?nt=1", headers=gz()), text(4096),
             "Cache-Control: no-transform")
    # Statuses: no 206, 204, 304; an error page is compressed.
    identity(get(port(), "/compress?code=206", headers=gz()), text(4096),
             "206")
    compressed(get(port(), "/compress?code=404", headers=gz()), text(4096),
               "404")
    r = get(port(), "/compress?code=204", headers=gz())
    eq((r.status, r.body), (204, b""), "204")
    check("content-encoding" not in r.headers, "204 not compressed")
    # HEAD: the identity head (the body's length), and Vary.
    r = get(port(), "/compress", headers=gz(), method="HEAD")
    eq(r.status, 200, "HEAD")
    check("content-encoding" not in r.headers, "HEAD not compressed")
    eq(r.headers["content-length"], "4096", "HEAD length")
    eq(r.headers["vary"], "Accept-Encoding", "HEAD vary")


@suite.case
def etags():
    r = get(port(), "/compress?etag=1", headers=gz())
    compressed(r, text(4096), "etag")
    eq(r.headers["etag"], 'W/"v1"', "a strong ETag becomes weak")
    r = get(port(), "/compress?etag=1")
    eq(r.headers["etag"], '"v1"', "identity keeps the strong ETag")


@suite.case
def static_files():
    r = get(port(), "/cstatic/f.txt", headers=gz())
    eq(r.status, 200, "status")
    compressed(r, FILE, "static file")
    strong = get(port(), "/cstatic/f.txt").headers["etag"]
    eq(r.headers["etag"], "W/" + strong, "weak ETag of the file's")
    # Range: the identity bytes, never compressed.
    r = get(port(), "/cstatic/f.txt", headers=gz(Range="bytes=10-29"))
    eq(r.status, 206, "range status")
    eq(r.body, FILE[10:30], "range bytes")
    check("content-encoding" not in r.headers, "206 not compressed")
    eq(r.headers["etag"], strong, "206 keeps the strong ETag")
    # If-Range with the weak tag cannot match (strong comparison): the
    # whole representation, compressed.
    r = get(port(), "/cstatic/f.txt",
            headers=gz(Range="bytes=0-9", **{"If-Range": "W/" + strong}))
    eq(r.status, 200, "If-Range weak")
    compressed(r, FILE, "If-Range weak")
    r = get(port(), "/cstatic/f.txt",
            headers=gz(**{"If-None-Match": "W/" + strong}))
    eq((r.status, r.body), (304, b""), "revalidation with the weak tag")
    r = get(port(), "/cstatic/f.txt", headers=gz(), method="HEAD")
    check("content-encoding" not in r.headers, "HEAD file not compressed")
    eq(r.headers["content-length"], str(len(FILE)), "HEAD file length")


@suite.case
def streamed():
    # A streamed body with a known length above the threshold: compressed,
    # sent chunked (the compressed length is not known up front).
    r = get(port(), "/compress?stream=1&bytes=50000", headers=gz())
    compressed(r, text(50000), "streamed, length known")
    eq(r.headers.get("transfer-encoding"), "chunked", "chunked")
    check("content-length" not in r.headers, "no Content-Length")
    r = get(port(), "/compress?stream=1&cl=-1&bytes=300", headers=gz())
    compressed(r, text(300), "streamed, length unknown (no threshold)")
    r = get(port(), "/compress?stream=1&bytes=100", headers=gz())
    identity(r, text(100), "streamed, known length below the threshold")
    eq(r.headers.get("content-length"), "100", "its length")
    # The declared length still bounds the writes (the adapter sees
    # none): one byte past it is refused, as without compression.
    r = get(port(), "/compress?stream=1&bytes=3000&over=1", headers=gz())
    compressed(r, text(3000), "a write past the declared length refused")


@suite.case
def streamed_codings():
    for coding in ["zstd", "br"]:
        r = get(port(), "/compress?stream=1&bytes=50000",
                headers={"Accept-Encoding": coding})
        compressed(r, text(50000), coding + " streamed", coding)
        r = get(port(), "/compress?bytes=50000",
                headers={"Accept-Encoding": coding})
        compressed(r, text(50000), coding + " whole", coding)
        eq(int(r.headers["content-length"]), len(r.body), coding + " length")


@suite.case(timeout=20)
def streamed_in_pieces():
    # Another thread writes "tick I" every 300 ms: each must be
    # decompressible when it arrives, not only at the end.
    got = []
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with Conn(port(), timeout=10) as c:
        c.send(b"GET /ctick?n=4&ms=300 HTTP/1.1\r\nHost: x\r\n"
               b"Accept-Encoding: gzip\r\n\r\n")

        def sink(piece):
            out = d.decompress(piece)
            if out:
                got.append((time.monotonic(), out))
        r = c.response(sink=sink, timeout=10)
    eq(r.headers.get("content-encoding"), "gzip", "coding")
    eq(r.headers.get("vary"), "Accept-Encoding", "vary")
    eq(b"".join(o for _, o in got), b"tick 0\ntick 1\ntick 2\ntick 3\n",
       "the ticks")
    eq(d.eof, True, "the gzip stream ended")
    eq([o for _, o in got][:4],
       [b"tick 0\n", b"tick 1\n", b"tick 2\n", b"tick 3\n"],
       "one tick decompressed per write")
    check(got[3][0] - got[0][0] >= 0.6,
          "the ticks arrived apart: %r" % [round(t - got[0][0], 2)
                                           for t, _ in got])


@suite.case
def keep_alive():
    # Several answers, compressed and not, on one connection: framing.
    with Conn(port()) as c:
        for path, hs, want, z in [
                ("/compress", gz(), text(4096), True),
                ("/compress?stream=1", gz(), text(4096), True),
                ("/compress", {}, text(4096), False),
                ("/compress?stream=1&cl=-1&bytes=2000", gz(), text(2000),
                 True),
                ("/compress?bytes=10", gz(), text(10), False)]:
            r = c.request("GET", path, hs)
            (compressed if z else identity)(r, want, "keep-alive " + path)


def curl(args, path):
    out = subprocess.run(
        ["curl", "-sS", "-D", "-", "-o", "-"] + args +
        ["http://127.0.0.1:%d%s" % (port(), path)],
        capture_output=True, timeout=30)
    check(out.returncode == 0, "curl: %r" % out.stderr)
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hs = {}
    for ln in lines[1:]:
        n, _, v = ln.partition(":")
        hs[n.strip().lower()] = v.strip()
    return lines[0], hs, body


@suite.case
def curl_h1_h2():
    for v, name in [(["--http1.1"], "HTTP/1.1"),
                    (["--http2-prior-knowledge"], "HTTP/2")]:
        for path, want in [("/compress?bytes=20000", text(20000)),
                           ("/compress?stream=1&bytes=20000", text(20000)),
                           ("/ctick?n=3&ms=10", b"tick 0\ntick 1\ntick 2\n"),
                           ("/cstatic/f.txt", FILE)]:
            for coding in ["gzip", "zstd", "br"]:
                what = "%s %s %s" % (name, coding, path)
                ae = ["-H", "Accept-Encoding: " + coding]
                line, hs, body = curl(v + ae, path)
                check(line.startswith(name), "%s: version %r" % (what, line))
                eq(hs.get("content-encoding"), coding, what + ": coding")
                eq(hs.get("vary"), "Accept-Encoding", what + ": vary")
                eq(decode(coding, body), want, what + ": decompressed")
                # curl's own decoder agrees.
                _, _, body = curl(v + ae + ["--compressed"], path)
                eq(body, want, what + ": curl --compressed")
            _, hs, body = curl(v, path)
            eq(body, want, what + ": identity")
            check("content-encoding" not in hs, what + ": identity coding")
            eq(hs.get("vary"), "Accept-Encoding", what + ": identity vary")
        line, hs, body = curl(v + ["-H", "Accept-Encoding: gzip", "-H",
                                   "Range: bytes=5-14"], "/cstatic/f.txt")
        check(" 206" in line, name + " range: %r" % line)
        eq(body, FILE[5:15], name + ": range bytes")
        check("content-encoding" not in hs, name + ": 206 not compressed")


@suite.case(timeout=30)
def http3():
    client = os.path.join(BUILD, "test", "net", "h3client")
    if not os.access(client, os.X_OK):
        raise Skip("no h3client (built without HTTP/3)")
    c, k = self_signed(S["dir"], "c", "DNS:localhost,IP:127.0.0.1")
    srv = Server("reference", ["--tls-port", "0", "--cert", c, "--key", k,
                               "--quic-port", "0", "--compress"])
    S["h3"] = srv
    qport = None
    while qport is None:
        m = re.match(r"quic listening on (\d+)$", srv.next_line())
        if m:
            qport = int(m.group(1))
    want = text(20000)
    # The same zlib, level and window as tern's defaults give the same
    # bytes: h3client reports the body's length and digest.
    z = zlib.compressobj(5, zlib.DEFLATED, 16 + 15, 8)
    zipped = z.compress(want) + z.flush()
    check(gzip.decompress(zipped) == want, "reference gzip")
    for hs, body in [(["--header", "accept-encoding: gzip"], zipped),
                     ([], want)]:
        out = subprocess.run(
            [client, "--timeout-ms", "10000"] + hs +
            ["GET", "https://127.0.0.1:%d/compress?bytes=20000" % qport],
            capture_output=True, timeout=20, text=True)
        m = re.search(r"stream 0 body (\d+) sha256 ([0-9a-f]+)", out.stdout)
        check(m, "h3client: %r %r" % (out.stdout, out.stderr[-500:]))
        eq((int(m.group(1)), m.group(2)),
           (len(body), hashlib.sha256(body).hexdigest()),
           "HTTP/3 body %s" % ("gzip" if hs else "identity"))
    # zstd and br: the body as it came, decompressed by the tools.
    for coding in ["zstd", "br"]:
        path = os.path.join(S["dir"], "h3." + coding)
        out = subprocess.run(
            [client, "--timeout-ms", "10000", "--header",
             "accept-encoding: " + coding, "--body-out", path,
             "GET", "https://127.0.0.1:%d/compress?bytes=20000" % qport],
            capture_output=True, timeout=20, text=True)
        check("stream 0 status 200" in out.stdout,
              "h3client %s: %r %r" % (coding, out.stdout, out.stderr[-500:]))
        with open(path, "rb") as f:
            got = f.read()
        check(len(got) < len(want), "HTTP/3 %s: smaller" % coding)
        eq(decode(coding, got), want, "HTTP/3 body %s" % coding)


@suite.case(timeout=60)
def compressor_bounds():
    """10 h2c connections x 100 slow compressed streams: at most
    max_compressors_per_conn (4) compressors on each connection and
    max_compressors (here 25) in the server; every other answer goes out
    in identity, and every body is whole. Each compressor holds up to 2
    MiB, and a burst like this one once grew RSS by 796 MB."""
    from http2 import test_h2 as h2
    want = b"tick 0\ntick 1\ntick 2\n"
    with Server("reference", ["--compress", "--workers", "1",
                              "--max-compressors", "25"]) as s:
        conns = [h2.H2(s.port) for _ in range(10)]
        try:
            sids = list(range(1, 201, 2))
            block = h2.request_block("GET", "/ctick?n=3&ms=300",
                                     [("accept-encoding", "zstd")])
            for c in conns:
                c.send(b"".join(h2.headers(sid, block) for sid in sids))
            per_conn = []
            for c in conns:
                got = h2.collect_streams(c, sids, timeout=30)
                n = 0
                for sid in sids:
                    body, rst = got[sid]
                    eq(rst, None, "stream %d reset" % sid)
                    if body.startswith(b"\x28\xb5\x2f\xfd"):
                        n += 1
                        body = decode("zstd", body)
                    eq(body, want, "stream %d's body" % sid)
                per_conn.append(n)
            suite.note("compressed per connection: %r" % per_conn)
            check(max(per_conn) <= 4, "per connection: %r" % per_conn)
            eq(sum(per_conn), 25, "compressed in all (%r)" % per_conn)
            # The places come back: a new stream is compressed again.
            conns[0].send(h2.headers(201, block))
            body = h2.collect_streams(conns[0], [201])[201][0]
            eq(decode("zstd", body), want, "compressed after the burst")
        finally:
            for c in conns:
                c.close()


try:
    setup()
    suite.main()
finally:
    for k in ("srv", "h3"):
        if k in S:
            S[k].stop()
    if "dir" in S:
        shutil.rmtree(S["dir"], ignore_errors=True)
