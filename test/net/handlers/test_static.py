"""The static-file handler (tern_static_*, reference --static DIR at /static/)
over real sockets: raw HTTP/1.1, curl and the h2 package over HTTP/2
(h2c), TLS and HTTP/3.

Every conditional and Range case (overlapping and invalid ranges, If-Range
with a stale ETag), traversal attempts, precompressed siblings chosen by
q-value, a 5 GiB sparse file's length and last bytes, a slow reader whose
server memory stays bounded, and a file truncated while it is served.
"""

import gzip
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import self_signed  # noqa: E402
from harness import (BUILD, Closed, Conn, Server, Suite, check, eq, get,
                     h2_connection, h2_requests, vmrss_kib, sanitized)

suite = Suite()
S = {}

BODY = b"hello static\n"
BIG = 5 << 30


def setup():
    d = tempfile.mkdtemp(prefix="tern-static-")
    root = os.path.join(d, "root")
    os.makedirs(os.path.join(root, "sub"))
    os.makedirs(os.path.join(root, "noindex"))
    with open(os.path.join(root, "a.txt"), "wb") as f:
        f.write(BODY)
    with open(os.path.join(root, "sub", "index.html"), "wb") as f:
        f.write(b"<h1>sub</h1>")
    with open(os.path.join(d, "secret"), "wb") as f:
        f.write(b"SECRET")
    with open(os.path.join(root, ".env"), "wb") as f:
        f.write(b"SECRET")
    os.symlink(os.path.join(d, "secret"), os.path.join(root, "out"))
    os.symlink("a.txt", os.path.join(root, "in"))
    css = b"body { color: red; }\n" * 50
    with open(os.path.join(root, "s.css"), "wb") as f:
        f.write(css)
    with open(os.path.join(root, "s.css.gz"), "wb") as f:
        f.write(gzip.compress(css))
    with open(os.path.join(root, "s.css.br"), "wb") as f:
        f.write(b"BROTLI-BYTES")
    with open(os.path.join(root, "s.css.zst"), "wb") as f:
        f.write(b"ZSTD-BYTES")
    # 5 GiB, sparse (costs no disk): its last bytes are known.
    with open(os.path.join(root, "huge.bin"), "wb") as f:
        f.truncate(BIG)
        f.seek(BIG - 16)
        f.write(b"0123456789abcdef")
    S["dir"], S["root"], S["css"] = d, root, css
    S["srv"] = Server("reference", ["--static", root])


def port():
    return S["srv"].port


def curl_h2(path, extra=()):
    out = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "-"] +
        list(extra) + ["http://127.0.0.1:%d%s" % (port(), path)],
        capture_output=True, timeout=30)
    check(out.returncode == 0, "curl: %r" % out.stderr)
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hs = {}
    for ln in lines[1:]:
        n, _, v = ln.partition(":")
        hs[n.strip().lower()] = v.strip()
    check(lines[0].startswith("HTTP/2"), "not HTTP/2: %r" % lines[0])
    return status, hs, body


@suite.case
def get_and_head():
    r = get(port(), "/static/a.txt")
    eq(r.status, 200, "status")
    eq(r.body, BODY, "body")
    eq(r.headers["content-type"], "text/plain; charset=utf-8", "type")
    check(re.fullmatch(r'"[0-9a-f-]+"', r.headers["etag"]), "strong etag")
    check(r.headers["last-modified"].endswith(" GMT"), "last-modified")
    eq(r.headers["accept-ranges"], "bytes", "accept-ranges")
    eq(r.headers["cache-control"], "no-cache", "cache-control")
    eq(r.headers["vary"], "Accept-Encoding", "vary")
    h = get(port(), "/static/a.txt", method="HEAD")
    eq(h.status, 200, "HEAD status")
    eq(h.headers["content-length"], str(len(BODY)), "HEAD length")
    eq(h.body, b"", "HEAD body")
    eq(h.headers["etag"], r.headers["etag"], "HEAD etag")


@suite.case
def directories():
    r = get(port(), "/static/sub")
    eq(r.status, 301, "no slash")
    eq(r.headers["location"], "/static/sub/", "location")
    r = get(port(), "/static/sub/")
    eq((r.status, r.body), (200, b"<h1>sub</h1>"), "index")
    eq(get(port(), "/static/noindex/").status, 404, "no listing")
    eq(get(port(), "/static/nope.txt").status, 404, "missing")
    # A file named as a directory is not there (nginx's answer too), on
    # every carrier, and the file itself is still served afterwards.
    for t in ("/static/a.txt/", "/static/in/", "/static/sub/index.html/"):
        eq(get(port(), t).status, 404, t)
        eq(curl_h2(t)[0], 404, t + " over HTTP/2")
    eq(get(port(), "/static/a.txt").body, BODY, "a.txt after a.txt/")


@suite.case
def traversal():
    for t in ["/static/../secret", "/static/%2e%2e/secret",
              "/static/..%2fsecret", "/static/sub/..%2f..%2fsecret",
              "/static/%2e%2e%2fsecret", "/static/a.txt%00.html",
              "/static/..\\secret", "/static/%5c..%5csecret",
              "/static/%252e%252e/secret", "/static/.env",
              "/static/%2eenv", "/static/out"]:
        r = get(port(), t)
        check(r.status in (400, 403, 404), "%s answered %d" % (t, r.status))
        check(b"SECRET" not in r.body, "%s leaked the secret" % t)
    eq(get(port(), "/static/out").status, 403, "symlink out of the root")
    r = get(port(), "/static/in")
    eq((r.status, r.body), (200, BODY), "symlink inside the root")


@suite.case
def conditionals():
    r = get(port(), "/static/a.txt")
    etag, lm = r.headers["etag"], r.headers["last-modified"]

    def st(hs):
        return get(port(), "/static/a.txt", headers=hs).status
    r = get(port(), "/static/a.txt", headers={"If-None-Match": etag})
    eq(r.status, 304, "If-None-Match")
    eq(r.headers["etag"], etag, "304 etag")
    eq(r.body, b"", "304 body")
    eq(st({"If-None-Match": '"x", W/' + etag}), 304, "weak INM list")
    eq(st({"If-None-Match": '"x"'}), 200, "INM other")
    eq(st({"If-None-Match": "*"}), 304, "INM *")
    eq(st({"If-Modified-Since": lm}), 304, "IMS equal")
    eq(st({"If-Modified-Since": "Sun, 06 Nov 1994 08:49:37 GMT"}), 200,
       "IMS older")
    eq(st({"If-Modified-Since": "garbage"}), 200, "IMS invalid")
    eq(st({"If-None-Match": '"x"', "If-Modified-Since": lm}), 200,
       "INM wins over IMS")
    eq(st({"If-Match": '"x"'}), 412, "If-Match other")
    eq(st({"If-Match": "W/" + etag}), 412, "If-Match weak")
    eq(st({"If-Match": etag}), 200, "If-Match")
    eq(st({"If-Match": "*"}), 200, "If-Match *")
    eq(st({"If-Unmodified-Since": "Sun, 06 Nov 1994 08:49:37 GMT"}), 412,
       "IUS older")
    eq(st({"If-Unmodified-Since": lm}), 200, "IUS equal")


def parts(r):
    ct = r.headers["content-type"]
    m = re.fullmatch(r"multipart/byteranges; boundary=(\S+)", ct)
    check(m, "multipart type: %r" % ct)
    b = m.group(1).encode()
    out = []
    body = r.body
    check(body.endswith(b"\r\n--" + b + b"--\r\n"), "closing boundary")
    for p in body.split(b"--" + b)[1:-1]:
        head, _, data = p.partition(b"\r\n\r\n")
        cr = re.search(rb"Content-Range: bytes (\d+)-(\d+)/(\d+)", head)
        check(cr, "part content-range")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        out.append((int(cr.group(1)), int(cr.group(2)), data))
    return out


@suite.case
def ranges():
    n = len(BODY)

    def rg(v, hs=None):
        h = {"Range": v}
        h.update(hs or {})
        return get(port(), "/static/a.txt", headers=h)
    r = rg("bytes=0-4")
    eq((r.status, r.body), (206, b"hello"), "first bytes")
    eq(r.headers["content-range"], "bytes 0-4/%d" % n, "content-range")
    eq(rg("bytes=6-").body, BODY[6:], "open range")
    eq(rg("bytes=-7").body, BODY[-7:], "suffix")
    eq(rg("bytes=-100").body, BODY, "suffix longer than the file")
    eq(rg("bytes=0-999").body, BODY, "last past the end")
    r = rg("bytes=4-8,0-2,2-5")
    eq((r.status, r.body), (206, BODY[0:9]), "overlapping ranges merge")
    r = rg("bytes=0-1,6-11")
    eq(r.status, 206, "multi status")
    eq(parts(r), [(0, 1, BODY[0:2]), (6, 11, BODY[6:12])], "parts")
    eq(int(r.headers["content-length"]), len(r.body), "multipart length")
    r = rg("bytes=100-200")
    eq(r.status, 416, "unsatisfiable")
    eq(r.headers["content-range"], "bytes */%d" % n, "416 content-range")
    for bad in ["bytes=5-1", "bytes=x-y", "chars=0-1", "bytes=", "bytes=0-1x"]:
        r = rg(bad)
        eq((r.status, r.body), (200, BODY), "invalid %r ignored" % bad)
    etag = get(port(), "/static/a.txt").headers["etag"]
    lm = get(port(), "/static/a.txt").headers["last-modified"]
    r = rg("bytes=0-4", {"If-Range": etag})
    eq(r.status, 206, "If-Range current")
    r = rg("bytes=0-4", {"If-Range": '"stale"'})
    eq((r.status, r.body), (200, BODY), "If-Range stale etag")
    eq(rg("bytes=0-4", {"If-Range": lm}).status, 206, "If-Range date")
    eq(rg("bytes=0-4", {"If-Range": "Sun, 06 Nov 1994 08:49:37 GMT"}).status,
       200, "If-Range old date")
    h = get(port(), "/static/a.txt", headers={"Range": "bytes=0-4"},
            method="HEAD")
    eq((h.status, h.headers["content-length"], h.body), (206, "5", b""),
       "HEAD range")


@suite.case
def precompressed():
    def enc(ae):
        r = get(port(), "/static/s.css", headers={"Accept-Encoding": ae})
        eq(r.status, 200, "status")
        eq(r.headers["vary"], "Accept-Encoding", "vary")
        eq(r.headers["content-type"], "text/css; charset=utf-8", "type")
        return r.headers.get("content-encoding"), r.body
    e, body = enc("gzip")
    eq(e, "gzip", "gzip chosen")
    eq(gzip.decompress(body), S["css"], "gzip round trip")
    eq(enc("gzip, br"), ("br", b"BROTLI-BYTES"), "tie: br")
    eq(enc("gzip;q=1, br;q=0.5, zstd;q=0.7")[0], "gzip", "highest q")
    eq(enc("zstd;q=0.9, br;q=0.5")[0], "zstd", "zstd by q")
    eq(enc("br;q=0, *;q=0.5")[0], "zstd", "* after br;q=0")
    eq(enc("identity"), (None, S["css"]), "identity")
    eq(enc("br;q=0, gzip;q=0, zstd;q=0"), (None, S["css"]), "all refused")
    r1 = get(port(), "/static/s.css", headers={"Accept-Encoding": "gzip"})
    r2 = get(port(), "/static/s.css")
    check(r1.headers["etag"] != r2.headers["etag"], "etag per coding")


@suite.case
def cached_file():
    # A small file is kept in memory for a second: answered then without
    # an allocation, and read again once the second has passed.
    path = os.path.join(S["root"], "c.txt")
    with open(path + ".tmp", "wb") as f:
        f.write(b"one")
    os.rename(path + ".tmp", path)
    with Conn(port()) as c:
        r = c.request("GET", "/static/c.txt")
        eq(r.body, b"one", "first")
        before = json.loads(c.request("GET", "/stats").body)
        for _ in range(20):
            r = c.request("GET", "/static/c.txt")
            eq((r.status, r.body), (200, b"one"), "cached")
        after = json.loads(c.request("GET", "/stats").body)
        if not sanitized():
            eq(after["allocations"] - before["allocations"], 0,
               "allocations for 20 cached answers")
        with open(path + ".tmp", "wb") as f:
            f.write(b"two!")
        os.rename(path + ".tmp", path)
        time.sleep(1.2)
        r2 = c.request("GET", "/static/c.txt")
        eq(r2.body, b"two!", "read again after a second")
        check(r2.headers["etag"] != r.headers["etag"], "new etag")


@suite.case
def cached_descriptor():
    """A larger file (past the in-memory cache's 16 KiB) keeps an open
    descriptor for a second: its answers (sendfile on HTTP/1.1, reads on
    HTTP/2) then cost no allocation and no trip to the pool, a range and a
    conditional are still right, and a file replaced is served anew once
    the second has passed."""
    path = os.path.join(S["root"], "d.bin")
    one = bytes(range(256)) * 256  # 64 KiB
    two = b"2" * (100 << 10)
    with open(path + ".tmp", "wb") as f:
        f.write(one)
    os.rename(path + ".tmp", path)
    with Conn(port()) as c:
        r = c.request("GET", "/static/d.bin")
        eq((r.status, r.body), (200, one), "first")
        before = json.loads(c.request("GET", "/stats").body)
        for _ in range(20):
            r2 = c.request("GET", "/static/d.bin")
            eq((r2.status, r2.body), (200, one), "from the descriptor")
        after = json.loads(c.request("GET", "/stats").body)
        if not sanitized():
            eq(after["allocations"] - before["allocations"], 0,
               "allocations for 20 answers from a kept descriptor")
        r3 = c.request("GET", "/static/d.bin",
                       headers={"Range": "bytes=1000-1003"})
        eq((r3.status, r3.body), (206, one[1000:1004]), "a range")
        r4 = c.request("GET", "/static/d.bin",
                       headers={"If-None-Match": r.headers["etag"]})
        eq(r4.status, 304, "a conditional")
        st, hs, body = curl_h2("/static/d.bin")
        eq((st, body), (200, one), "over HTTP/2")
        with open(path + ".tmp", "wb") as f:
            f.write(two)
        os.rename(path + ".tmp", path)
        r5 = c.request("GET", "/static/d.bin")
        eq(r5.body, one, "the old file within the second")
        time.sleep(1.2)
        r6 = c.request("GET", "/static/d.bin")
        eq(r6.body, two, "opened again after a second")
        check(r6.headers["etag"] != r.headers["etag"], "new etag")
        # A file deleted is not held open past its second: the next miss
        # (of any file) closes the descriptors that have expired.
        gone = os.path.join(S["root"], "gone.bin")
        with open(gone, "wb") as f:
            f.write(one)
        eq(c.request("GET", "/static/gone.bin").body, one, "gone.bin")
        os.unlink(gone)
        time.sleep(1.2)
        with open(path + ".tmp", "wb") as f:
            f.write(one)
        os.rename(path + ".tmp", path)  # d.bin anew: a miss
        eq(c.request("GET", "/static/d.bin").body, one, "d.bin anew")
        fds = os.listdir("/proc/%d/fd" % S["srv"].proc.pid)
        held = [os.readlink("/proc/%d/fd/%s" % (S["srv"].proc.pid, n))
                for n in fds]
        check(not any(h.endswith("gone.bin (deleted)") for h in held),
              "a deleted file still held open: %r" % held)


@suite.case
def blocks_from_the_pool_over_http2():
    """Over HTTP/2 a file past the in-memory cache is read a block at a
    time into a buffer the response holds. That block comes from the
    worker's pool of blocks: once two batches warmed it, 8 answers at once
    on the same connection allocate nothing (each took a block from the
    allocator before)."""
    path = os.path.join(S["root"], "e.bin")
    body = bytes(range(256)) * 768  # 192 KiB: a 256 KiB block each
    with open(path, "wb") as f:
        f.write(body)
    want = [(200, body)] * 8
    with socket.create_connection(("127.0.0.1", port()), timeout=10) as s:
        conn = h2_connection(s)
        # Two rounds warm the pools (the connection's, the blocks, and
        # those of the worker each /stats connection reaches).
        for _ in range(2):
            eq(h2_requests(s, ["/static/e.bin"] * 8, conn), want, "warm")
            with Conn(port()) as c:
                before = json.loads(c.request("GET", "/stats").body)
        eq(h2_requests(s, ["/static/e.bin"] * 8, conn), want, "answers")
        with Conn(port()) as c:
            after = json.loads(c.request("GET", "/stats").body)
    if not sanitized():
        eq(after["allocations"] - before["allocations"], 0,
           "allocations for 8 answers of 192 KiB over HTTP/2")


@suite.case
def cache_holds_a_site():
    """A site's 40 files, small and large, asked in turn (as HttpArena's
    static profile asks its 20) all stay cached: keys that share a slot's
    set do not evict each other, so a second and third round allocate
    nothing. (Direct-mapped, these 40 keys evicted each other: 22
    allocations.)"""
    names = ["site/f%02d.%s" % (i, ("css", "js", "svg", "html")[i % 4])
             for i in range(40)]
    os.makedirs(os.path.join(S["root"], "site"), exist_ok=True)
    for i, n in enumerate(names):
        with open(os.path.join(S["root"], n), "wb") as f:
            f.write(b"%d" % i * (500 if i % 2 else 10000))
    with Conn(port()) as c:
        for n in names:
            eq(c.request("GET", "/static/" + n).status, 200, n)
        before = json.loads(c.request("GET", "/stats").body)
        for _ in range(2):
            for i, n in enumerate(names):
                r = c.request("GET", "/static/" + n)
                eq(len(r.body), len(b"%d" % i) * (500 if i % 2 else 10000),
                   n)
        after = json.loads(c.request("GET", "/stats").body)
        if not sanitized():
            eq(after["allocations"] - before["allocations"], 0,
               "allocations for 80 answers from the cache")


@suite.case(timeout=30)
def huge_sparse_file():
    h = get(port(), "/static/huge.bin", method="HEAD")
    eq(h.headers["content-length"], str(BIG), "5 GiB length")
    r = get(port(), "/static/huge.bin", headers={"Range": "bytes=-16"})
    eq((r.status, r.body), (206, b"0123456789abcdef"), "last bytes")
    eq(r.headers["content-range"], "bytes %d-%d/%d" % (BIG - 16, BIG - 1, BIG),
       "content-range past 4 GiB")
    r = get(port(), "/static/huge.bin",
            headers={"Range": "bytes=%d-%d" % (BIG - 20, BIG - 13)})
    eq(r.body, b"\0\0\0\x000123", "a range across the written end")
    # Several ranges of a file larger than a block: read block by block.
    r = get(port(), "/static/huge.bin",
            headers={"Range": "bytes=0-3,%d-%d,-4" % (1 << 32, (1 << 32) + 1)})
    eq(r.status, 206, "multi status")
    eq(parts(r), [(0, 3, b"\0" * 4), (1 << 32, (1 << 32) + 1, b"\0\0"),
                  (BIG - 4, BIG - 1, b"cdef")], "parts past 4 GiB")
    eq(int(r.headers["content-length"]), len(r.body), "multipart length")


@suite.case
def http2():
    st, hs, body = curl_h2("/static/a.txt")
    eq((st, body), (200, BODY), "h2 GET")
    etag = hs["etag"]
    st, hs, body = curl_h2("/static/a.txt", ["-H", "If-None-Match: " + etag])
    eq((st, body), (304, b""), "h2 304")
    st, hs, body = curl_h2("/static/a.txt", ["-r", "0-4"])
    eq((st, body, hs["content-range"]), (206, b"hello",
                                         "bytes 0-4/%d" % len(BODY)),
       "h2 range")
    st, hs, body = curl_h2("/static/huge.bin", ["-r", "-16"])
    eq(body, b"0123456789abcdef", "h2 5 GiB tail")
    st, hs, body = curl_h2("/static/s.css", ["-H", "Accept-Encoding: gzip"])
    eq(gzip.decompress(body), S["css"], "h2 gzip sibling")
    st, hs, body = curl_h2("/static/../secret")
    check(st in (400, 404) and b"SECRET" not in body, "h2 traversal")
    out = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
         "%{size_download}", "-r", "0-67108863",
         "http://127.0.0.1:%d/static/huge.bin" % port()],
        capture_output=True, timeout=30)
    eq(out.stdout, b"67108864", "h2 64 MiB range")


@suite.case(timeout=30)
def slow_reader_bounded():
    # A client that asks for 1 GiB and reads nothing: the server holds
    # one block, not the file.
    pid = S["srv"].proc.pid
    before = vmrss_kib(pid)
    conns = []
    for _ in range(8):
        c = Conn(port())
        c.send(b"GET /static/huge.bin HTTP/1.1\r\nHost: x\r\n"
               b"Range: bytes=0-1073741823\r\n\r\n")
        conns.append(c)
    time.sleep(1.5)
    grown = vmrss_kib(pid) - before
    for c in conns:
        c.close()
    limit = 64 * 1024 if sanitized() else 24 * 1024
    check(grown < limit, "8 stalled readers grew RSS by %d KiB" % grown)


@suite.case(timeout=30)
def truncated_while_served():
    path = os.path.join(S["root"], "trunc.bin")
    with open(path, "wb") as f:
        f.truncate(256 << 20)
    c = Conn(port(), timeout=10)
    c.send(b"GET /static/trunc.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    r = c.head()
    eq(r.status, 200, "status")
    total = int(r.headers["content-length"])
    got = len(c.buf)
    c.buf.clear()
    # Read a little, then cut the file short under the response.
    while got < (1 << 20):
        got += len(c.read_some(time.monotonic() + 5))
    os.truncate(path, 1 << 20)
    deadline = time.monotonic() + 15
    while True:
        try:
            d = c.read_some(deadline)
        except Closed:
            break  # the close that tells the client it was cut short
        if not d:
            break
        got += len(d)
    check(got < total, "the response ended early (%d of %d)" % (got, total))
    c.close()
    eq(get(port(), "/static/a.txt").body, BODY, "server still serves")


@suite.case(timeout=40)
def truncated_while_served_h2():
    # The same over HTTP/2: a reader at 2 MB/s, the file cut to 1 MiB a
    # second in. The stream must end early with RST_STREAM (curl: "not
    # closed cleanly"), never as a complete response, and never hang.
    path = os.path.join(S["root"], "trunc2.bin")
    with open(path, "wb") as f:
        f.truncate(256 << 20)
    p = subprocess.Popen(
        ["curl", "-sS", "--http2-prior-knowledge", "--limit-rate", "2M",
         "-o", "/dev/null", "-w", "%{size_download}",
         "http://127.0.0.1:%d/static/trunc2.bin" % port()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)
    os.truncate(path, 1 << 20)
    out, err = p.communicate(timeout=30)
    got = int(out or b"0")
    check(p.returncode != 0, "curl saw a complete response (%d bytes)" % got)
    check(got < (256 << 20), "the stream ended early (%d bytes)" % got)
    check(b"HTTP/2" in err or b"stream" in err, "curl: %r" % err)
    eq(curl_h2("/static/a.txt")[2], BODY, "server still serves over h2")


def tls_server():
    """The reference server with TLS (h1, h2) and HTTP/3 serving the same
    root."""
    if "tls" not in S:
        c, k = self_signed(S["dir"], "c", "DNS:localhost,IP:127.0.0.1")
        args = ["--tls-port", "0", "--cert", c, "--key", k, "--static",
                S["root"]]
        quic = shutil.which("gtlsclient") is not None
        if quic:
            args += ["--quic-port", "0"]
        srv = Server("reference", args)
        srv.tls_port = srv.quic_port = None
        while srv.tls_port is None or (quic and srv.quic_port is None):
            line = srv.next_line()
            m = re.match(r"tls listening on (\d+)$", line)
            if m:
                srv.tls_port = int(m.group(1))
            m = re.match(r"quic listening on (\d+)$", line)
            if m:
                srv.quic_port = int(m.group(1))
        S["tls"] = srv
        with open(os.path.join(S["root"], "r.bin"), "wb") as f:
            f.write(os.urandom(3 << 20))
    return S["tls"]


@suite.case(timeout=30)
def tls_h1_h2():
    srv = tls_server()
    want = open(os.path.join(S["root"], "r.bin"), "rb").read()
    for v in ["--http1.1", "--http2"]:
        out = subprocess.run(
            ["curl", "-sS", "-k", v, "-o", "-", "-w", "%{http_version}",
             "https://127.0.0.1:%d/static/r.bin" % srv.tls_port],
            capture_output=True, timeout=30)
        check(out.returncode == 0, "curl %s: %r" % (v, out.stderr))
        eq(out.stdout[:len(want)], want, "%s over TLS" % v)
        eq(out.stdout[len(want):], b"1.1" if v == "--http1.1" else b"2",
           "version")


@suite.case(timeout=30)
def http3():
    srv = tls_server()
    if srv.quic_port is None:
        from harness import Skip
        raise Skip("gtlsclient (Debian package ngtcp2-client) not installed")
    dl = tempfile.mkdtemp(dir=S["dir"], prefix="dl-")
    cmd = ["gtlsclient", "--exit-on-all-streams-close", "--timeout=5s",
           "--handshake-timeout=5s", "-q", "--download=" + dl, "127.0.0.1",
           str(srv.quic_port)] + [
        "https://localhost:%d/static/%s" % (srv.quic_port, n)
        for n in ("a.txt", "r.bin")]
    out = subprocess.run(cmd, capture_output=True, timeout=30)
    eq(open(os.path.join(dl, "a.txt"), "rb").read(), BODY, "h3 a.txt")
    eq(open(os.path.join(dl, "r.bin"), "rb").read(),
       open(os.path.join(S["root"], "r.bin"), "rb").read(), "h3 3 MiB")


def h3_get(srv, path, headers=()):
    """One GET over HTTP/3 with h3client: (status, body length, sha256)."""
    client = os.path.join(BUILD, "test", "net", "h3client")
    cmd = [client, "--timeout-ms", "10000"]
    for h in headers:
        cmd += ["--header", h]
    out = subprocess.run(
        cmd + ["GET", "https://127.0.0.1:%d%s" % (srv.quic_port, path)],
        capture_output=True, timeout=20).stdout.decode("latin-1")
    st = re.search(r"stream 0 status (\d+)", out)
    body = re.search(r"stream 0 body (\d+) sha256 ([0-9a-f]+)", out)
    check(st and body, "h3client: %r" % out)
    return int(st.group(1)), int(body.group(1)), body.group(2)


@suite.case(timeout=40)
def h3_ranges_and_conditionals():
    # The Range and conditional cases once more over HTTP/3, with
    # h3client's --header (gtlsclient sends no fields of ours).
    srv = tls_server()
    if srv.quic_port is None or not os.path.exists(
            os.path.join(BUILD, "test", "net", "h3client")):
        from harness import Skip
        raise Skip("built without HTTP/3, or no gtlsclient")
    data = open(os.path.join(S["root"], "r.bin"), "rb").read()
    etag = get(port(), "/static/r.bin").headers["etag"]

    def sha(b):
        return hashlib.sha256(b).hexdigest()

    def want(code, body):
        return (code, len(body), sha(body))

    eq(h3_get(srv, "/static/r.bin", ["range: bytes=100-199"]),
       want(206, data[100:200]), "h3 range")
    eq(h3_get(srv, "/static/r.bin", ["range: bytes=-16"]),
       want(206, data[-16:]), "h3 suffix range")
    eq(h3_get(srv, "/static/r.bin", ["range: bytes=%d-" % len(data)])[0],
       416, "h3 unsatisfiable range")
    eq(h3_get(srv, "/static/r.bin", ["if-none-match: " + etag]),
       want(304, b""), "h3 If-None-Match")
    eq(h3_get(srv, "/static/r.bin", ['if-match: "x"'])[0], 412,
       "h3 If-Match other")
    eq(h3_get(srv, "/static/r.bin", ["range: bytes=0-9",
                                     "if-range: " + etag]),
       want(206, data[:10]), "h3 If-Range current")
    eq(h3_get(srv, "/static/r.bin", ["range: bytes=0-9",
                                     'if-range: "stale"']),
       want(200, data), "h3 If-Range stale: the whole file")


@suite.case(timeout=40)
def truncated_while_served_h3():
    # HTTP/3: h3client holds its stream window at 1 KiB for 1.5 s, the
    # file is cut to 1 MiB meanwhile, then it reads on. tern must reset
    # the stream once the file runs short, never end it as complete.
    srv = tls_server()
    client = os.path.join(BUILD, "test", "net", "h3client")
    if srv.quic_port is None or not os.path.exists(client):
        from harness import Skip
        raise Skip("built without HTTP/3, or no gtlsclient")
    path = os.path.join(S["root"], "trunc3.bin")
    with open(path, "wb") as f:
        f.truncate(256 << 20)
    p = subprocess.Popen(
        [client, "--stall-ms", "1500", "--timeout-ms", "20000", "GET",
         "https://127.0.0.1:%d/static/trunc3.bin" % srv.quic_port],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    os.truncate(path, 1 << 20)
    out, err = p.communicate(timeout=30)
    text = out.decode("latin-1")
    check(re.search(r"stream 0 status 200", text), "h3 head: %r" % text)
    m = re.search(r"stream 0 reset 0x([0-9a-f]+) bytes (\d+)", text)
    check(m is not None, "the stream was reset: %r %r" % (text, err[-300:]))
    check(int(m.group(2)) <= 1 << 20, "no byte past the cut: %s" % m.group(2))
    check("stream 0 body" not in text, "no complete body: %r" % text)


try:
    setup()
    suite.main()
finally:
    for k in ("srv", "tls"):
        if k in S:
            S[k].stop()
    if "dir" in S:
        shutil.rmtree(S["dir"], ignore_errors=True)
