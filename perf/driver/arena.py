"""HttpArena profiles (issue 34): the data, the application, the validator.

HttpArena (github.com/MDA2AV/HttpArena) benchmarks HTTP servers on 26
profiles; /work/arena-spec.md's digest of its spec is what this module
follows (its sections 5-8 and 10 are the validation contract).  tern's
entry is examples/arena/ (build/examples/arena).  Three parts:

Data (`write_data`): a generator of our own, seeded and deterministic, for
what HttpArena mounts under /data: dataset.json (50 items of the spec's
shape, 6.1), static/ (the 20 files with the spec's names and exact byte
sizes, plausible content per type, and .gz/.br siblings of the 15 text
files, 6.2), and the 100,000-row `items` table for PostgreSQL as a SQL
file with COPY (6.3; pgserver.py loads it).  None of HttpArena's data is
copied; the shapes, sizes and ranges are the spec's.

The application (`App`): build/examples/arena started with every listener
on port 0, its `listening KIND PORT` lines read back until `ready`.

The validator (`validate`): the checks of HttpArena's validate.sh and
validate-ws.py, per profile, against a host and its ports (the app started
here, or any server already running: `perf/perf arena validate --ports`).
Each check prints `PASS profile: what`, `FAIL profile: what: got X
expected Y` or `SKIP profile: why`.  curl makes the requests where
HttpArena's validator uses curl; raw sockets send the fragmented requests
(30 ms apart), the pipelined burst and the WebSocket frames; Python's ssl
module reads the TLS port's ALPN choice; gtlsclient (Debian's
ngtcp2-client) makes the HTTP/3 check, which HttpArena does not have.
"""

import base64
import gzip
import hashlib
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from . import common
from .common import SetupError

SEED = 34  # issue 34; every generator below draws from random.Random(SEED)

CATEGORIES = ("electronics", "tools", "books", "clothing", "sports", "toys",
              "home", "garden", "office", "auto")
TAGS = ("fast", "new", "popular", "sale", "limited", "premium", "eco",
        "compact", "heavy-duty", "wireless")
# Our own name parts (HttpArena's names are not reused).
NAME_A = ("Swift", "Bright", "Solid", "Prime", "Micro", "Ultra", "Smart",
          "Flex", "Metro", "Terra", "Polar", "Rapid", "Lunar", "Vivid")
NAME_B = ("Widget", "Gear", "Beacon", "Module", "Bracket", "Sensor", "Lamp",
          "Cable", "Hub", "Kit", "Valve", "Spring", "Panel", "Socket")

# (name, bytes, Content-Type the reference entries send), spec 6.2, in the
# order the static profile's load cycles through them.
STATIC_FILES = (
    ("reset.css", 8192, "text/css"), ("layout.css", 25600, "text/css"),
    ("theme.css", 18432, "text/css"), ("components.css", 204800, "text/css"),
    ("utilities.css", 61440, "text/css"),
    ("analytics.js", 12288, "application/javascript"),
    ("helpers.js", 22528, "application/javascript"),
    ("app.js", 204800, "application/javascript"),
    ("vendor.js", 307200, "application/javascript"),
    ("router.js", 35840, "application/javascript"),
    ("header.html", 122880, "text/html"), ("footer.html", 56320, "text/html"),
    ("regular.woff2", 18432, "font/woff2"), ("bold.woff2", 22528, "font/woff2"),
    ("logo.svg", 15344, "image/svg+xml"),
    ("icon-sprite.svg", 71680, "image/svg+xml"),
    ("hero.webp", 46080, "image/webp"), ("thumb1.webp", 8192, "image/webp"),
    ("thumb2.webp", 6144, "image/webp"),
    ("manifest.json", 2883, "application/json"))
BINARY_EXT = (".woff2", ".webp")
PG_ROWS = 100000

PROFILES = ("baseline", "pipelined", "json", "json-comp", "json-tls", "upload",
            "baseline-h2", "baseline-h2c", "json-h2c", "static", "static-h2",
            "async-db", "echo-ws", "baseline-h3")
# the listener each profile talks to (`listening KIND PORT`)
PROFILE_PORT = {"json-tls": "h1-tls", "baseline-h2": "h2", "static-h2": "h2",
                "baseline-h2c": "h2c", "json-h2c": "h2c", "baseline-h3": "h3"}


def brotli_module():
    """Debian's python3-brotli (its dist-packages added when another Python
    runs perf), or None."""
    try:
        import brotli
    except ImportError:
        if "/usr/lib/python3/dist-packages" not in sys.path:
            sys.path.append("/usr/lib/python3/dist-packages")
        try:
            import brotli
        except ImportError:
            return None
    return brotli


# ---------------------------------------------------------------------------
# data

def make_dataset(seed=SEED):
    """50 items, ids 1..50, the spec's keys in its order (6.1): 10
    categories of 5 items each (shuffled), integer price 2..496 and
    quantity 4..97, 1-4 distinct tags, rating {score, count} as ints."""
    rng = random.Random(seed)
    cats = [c for c in CATEGORIES for _ in range(5)]
    rng.shuffle(cats)
    names = ["%s %s" % (a, b) for a in NAME_A for b in NAME_B]
    rng.shuffle(names)
    items = []
    for i in range(50):
        items.append({
            "id": i + 1, "name": names[i], "category": cats[i],
            "price": rng.randint(2, 496), "quantity": rng.randint(4, 97),
            "active": rng.random() < 0.75,
            "tags": rng.sample(TAGS, rng.randint(1, 4)),
            "rating": {"score": rng.randint(10, 50),
                       "count": rng.randint(1, 400)}})
    return items


def _fill(rng, size, head, tail, token, pad):
    """ASCII text of exactly `size` bytes: head, tokens from token(rng)
    while they fit, pad(n) for the rest (n >= 8), tail."""
    out, n = [head], len(head) + len(tail)
    while True:
        t = token(rng)
        if n + len(t) + 8 > size:
            break
        out.append(t)
        n += len(t)
    out.append(pad(size - n))
    out.append(tail)
    text = "".join(out)
    assert len(text) == size, (len(text), size)
    return text.encode("ascii")


WORDS = ("card", "nav", "menu", "item", "grid", "panel", "btn", "title",
         "header", "footer", "list", "modal", "badge", "alert", "form",
         "input", "label", "table", "row", "col", "icon", "link", "tab",
         "toast", "avatar", "chip", "drawer", "tooltip", "banner", "hero")
PROPS = (("margin", "{n}px"), ("padding", "{n}px {m}px"), ("color", "#{h}"),
         ("background", "#{h}"), ("font-size", "{n}px"), ("display", "flex"),
         ("border", "1px solid #{h}"), ("border-radius", "{m}px"),
         ("line-height", "1.{m}"), ("width", "{p}%"), ("opacity", ".{m}"),
         ("transition", "all .{m}s ease"), ("z-index", "{n}"),
         ("justify-content", "space-between"), ("gap", "{m}px"))


def _css(rng):
    sel = ".%s-%s" % (rng.choice(WORDS), rng.choice(WORDS))
    if rng.random() < 0.3:
        sel += ":hover"
    decls = []
    for prop, val in rng.sample(PROPS, rng.randint(2, 5)):
        decls.append("%s:%s" % (prop, val.format(
            n=rng.randint(0, 48), m=rng.randint(1, 9), p=rng.choice((25, 50, 100)),
            h=rng.choice(("fff", "333", "e5e5e5", "1a73e8", "f4f4f4", "222",
                          "%06x" % rng.randrange(1 << 24))))))
    return "%s{%s}" % (sel, ";".join(decls))


def _js(rng):
    a, b = rng.choice(WORDS), rng.choice(WORDS)
    k = rng.randint(0, 99)
    return rng.choice((
        "function %s%s%d(e,t){var n=e.%s||%d;return t?n+t.%s:n}"
        % (a, b.title(), k, a, k, b),
        "var %s_%d=document.querySelector(\".%s-%s\");" % (a, k, a, b),
        "if(%s.%s!==void 0){%s.%s(%d)}" % (a, b, a, b, k),
        "exports.%s%s=function(e){return e.map(function(t){return t.%s*%d})};"
        % (a, b.title(), b, k),
        "for(var i=0;i<%s.length;i++){%s[i].%s=%d}" % (a, a, b, k)))


def _html(rng):
    return ('<div class="%s %s-%d"><a href="/%s/%d">%s %s</a><p>%s</p></div>'
            % (rng.choice(WORDS), rng.choice(WORDS), rng.randint(1, 12),
               rng.choice(WORDS), rng.randint(1, 50), rng.choice(NAME_A),
               rng.choice(NAME_B), " ".join(rng.choice(WORDS) for _ in range(
                   rng.randint(4, 12)))))


def _svg(rng):
    pts = " ".join("%s%d %d" % (rng.choice("MLQ"), rng.randint(0, 512),
                                 rng.randint(0, 512)) for _ in range(rng.randint(3, 8)))
    return '<path fill="#%06x" d="%sZ"/>' % (rng.randrange(1 << 24), pts)


def _comment(o, c):
    return lambda n: o + ("x" * (n - len(o) - len(c))) + c


def text_file(name, size, rng):
    ext = name.rsplit(".", 1)[1]
    if ext == "css":
        return _fill(rng, size, "/* %s */" % name, "", _css, _comment("/*", "*/"))
    if ext == "js":
        return _fill(rng, size, '"use strict";', "", _js, _comment("/*", "*/"))
    if ext == "html":
        return _fill(rng, size, '<header class="site">' if name.startswith("header")
                     else '<footer class="site">', "</header>" if
                     name.startswith("header") else "</footer>", _html,
                     _comment("<!--", "-->"))
    if ext == "svg":
        return _fill(rng, size, '<svg xmlns="http://www.w3.org/2000/svg" '
                     'viewBox="0 0 512 512">', "</svg>", _svg,
                     _comment("<!--", "-->"))
    # manifest.json: a web app manifest, valid JSON, padded in "description"
    doc = {"name": "Arena Demo", "short_name": "Arena", "start_url": "/",
           "display": "standalone", "background_color": "#ffffff",
           "theme_color": "#1a73e8", "description": "",
           "icons": [{"src": "/static/icon-%d.png" % s, "sizes": "%dx%d" % (s, s),
                      "type": "image/png"} for s in (48, 72, 96, 128, 144, 192,
                                                     256, 384, 512)]}
    base = len(json.dumps(doc, separators=(",", ":")))
    words = []
    while len(" ".join(words)) < size - base:
        words.append(rng.choice(WORDS))
    doc["description"] = " ".join(words)[:size - base]
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def binary_file(name, size, rng):
    """Random bytes behind a plausible header (WOFF2 or RIFF/WEBP)."""
    if name.endswith(".woff2"):
        head = b"wOF2\x00\x01\x00\x00" + struct.pack(">I", size)
    else:
        head = b"RIFF" + struct.pack("<I", size - 8) + b"WEBPVP8 " + \
            struct.pack("<I", size - 20)
    return head + rng.randbytes(size - len(head))


def pg_rows(items, rows=PG_ROWS, seed=SEED):
    """The items table's rows as COPY text lines (6.3): name "<dataset
    name> <id>", a category, price 1..500, quantity 1..1000, active, 1-4
    distinct tags as a JSON array, rating_score 1..50, rating_count
    1..500."""
    rng = random.Random(seed + 1)
    names = [it["name"] for it in items]
    for i in range(1, rows + 1):
        yield "%d\t%s %d\t%s\t%d\t%d\t%s\t%s\t%d\t%d\n" % (
            i, rng.choice(names), i, rng.choice(CATEGORIES),
            rng.randint(1, 500), rng.randint(1, 1000),
            "t" if rng.random() < 0.5 else "f",
            json.dumps(rng.sample(TAGS, rng.randint(1, 4))),
            rng.randint(1, 50), rng.randint(1, 500))


PG_SCHEMA = """CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL,
  category TEXT NOT NULL, price INTEGER NOT NULL, quantity INTEGER NOT NULL,
  active BOOLEAN NOT NULL, tags JSONB NOT NULL, rating_score INTEGER NOT NULL,
  rating_count INTEGER NOT NULL);
"""


def write_pg_seed(path, items=None, rows=PG_ROWS):
    """The seed as one SQL file: the schema, then COPY ... FROM stdin
    (psql -f loads it); no index on price, as the spec has it."""
    items = items or make_dataset()
    with open(path + ".tmp", "w") as f:
        f.write(PG_SCHEMA)
        f.write("COPY items (id, name, category, price, quantity, active, "
                "tags, rating_score, rating_count) FROM stdin;\n")
        f.writelines(pg_rows(items, rows))
        f.write("\\.\nANALYZE items;\n")
    os.replace(path + ".tmp", path)
    return path


def write_data(d, log=common.log):
    """DIR/dataset.json and DIR/static/ (20 files, .gz and .br siblings
    of the text ones); the same bytes on every run."""
    br = brotli_module()
    if br is None:
        raise SetupError("python3-brotli is needed for the .br files "
                         "(apt-get install python3-brotli)")
    os.makedirs(os.path.join(d, "static"), exist_ok=True)
    items = make_dataset()
    with open(os.path.join(d, "dataset.json"), "w") as f:
        f.write(json.dumps(items, indent=2) + "\n")
    rng = random.Random(SEED)
    for name, size, _ in STATIC_FILES:
        data = binary_file(name, size, rng) if name.endswith(BINARY_EXT) \
            else text_file(name, size, rng)
        path = os.path.join(d, "static", name)
        with open(path, "wb") as f:
            f.write(data)
        if not name.endswith(BINARY_EXT):
            with open(path + ".gz", "wb") as f:
                f.write(gzip.compress(data, 9, mtime=0))
            with open(path + ".br", "wb") as f:
                f.write(br.compress(data, quality=11))
    log("wrote %s/dataset.json and %s/static/ (%d files)"
        % (d, d, len(os.listdir(os.path.join(d, "static")))))
    return d


def load_dataset(d):
    with open(os.path.join(d, "dataset.json")) as f:
        return json.load(f)


# ---------------------------------------------------------------------------
# the application

class App:
    """build/examples/arena in its own session, every listener on port 0
    (h3 shares the h2 port's number, on UDP).  .ports maps the kinds of
    its `listening KIND PORT` lines (h1, h1-tls, h2c, h2, h3) to ports;
    stop() sends SIGTERM and returns the exit status."""

    def __init__(self, binary, data, cert=None, key=None, database=None,
                 db_max_conn=None, workers=None, host="127.0.0.1",
                 extra=(), timeout=30.0, env=None):
        if not os.access(binary, os.X_OK):
            raise SetupError("%s not built (ninja -C build)" % binary)
        argv = [binary, "--host", host, "--port", "0", "--h2c-port", "0",
                "--data", data]
        if cert:
            argv += ["--tls-port", "0", "--h2-port", "0", "--cert", cert,
                     "--key", key]
        else:
            argv += ["--tls-port", "-1", "--h2-port", "-1"]
        if database:
            argv += ["--database", database]
        if db_max_conn:
            argv += ["--db-max-conn", str(db_max_conn)]
        if workers:
            argv += ["--workers", str(workers)]
        self.argv = argv + list(extra)
        self.host = host
        self.ports = {}
        self.err = tempfile.TemporaryFile()
        self.out = bytearray()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self.err,
                                     start_new_session=True,
                                     env=dict(os.environ, **(env or {})))
        common.LIVE.append(self.proc)
        try:
            self._read_ready(timeout)
        except BaseException:
            self.stop(grace=1.0)
            raise
        threading.Thread(target=self._drain, daemon=True).start()

    def _read_ready(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = b""
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                line = line.decode("utf-8", "replace").strip()
                self.out += line.encode() + b"\n"
                m = re.match(r"listening (\S+) (\d+)$", line)
                if m:
                    self.ports[m.group(1)] = int(m.group(2))
                elif line == "ready":
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                raise SetupError("arena: no 'ready' line in %.0f s (stdout %r, "
                                 "stderr %s)" % (timeout, bytes(self.out),
                                                 self.stderr_text()))
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise SetupError("arena exited before 'ready' (rc %s): %s"
                                     % (self.proc.wait(), self.stderr_text()))
                buf += chunk

    def _drain(self):
        try:
            for line in self.proc.stdout:
                self.out += line
        except (OSError, ValueError):
            pass

    def alive(self):
        return self.proc.poll() is None

    def stderr_text(self, limit=3000):
        try:
            self.err.seek(0)
            return self.err.read()[-limit:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def stop(self, grace=10.0):
        """SIGTERM, then SIGKILL after `grace` s; the exit status (negative:
        the signal that ended it)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc in common.LIVE:
            common.LIVE.remove(self.proc)
        return self.proc.returncode


# ---------------------------------------------------------------------------
# the validator: clients

class Resp:
    """One response: status (0: no response), HTTP version as curl says it
    ('1.1', '2', '3'; '' when none), headers [(lower-case name, value)] of
    the final response, body."""

    def __init__(self, status=0, version="", headers=(), body=b"", error=""):
        self.status, self.version = status, version
        self.headers, self.body, self.error = list(headers), body, error

    def header(self, name):
        """[values] of a header (a duplicated header has two)."""
        return [v for n, v in self.headers if n == name]

    def text(self):
        return self.body.decode("utf-8", "replace").rstrip("\n")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def __repr__(self):
        return "%s %s" % (self.status or "no response (%s)" % self.error,
                          common.clip(self.body, 60))


def _heads(raw):
    """[(name, value)] of the last header block in curl's -D dump."""
    blocks = [b for b in raw.decode("latin-1").split("\r\n\r\n") if b.strip()]
    if not blocks:
        return []
    lines = blocks[-1].split("\r\n")
    out = []
    for line in lines[1:]:
        n, sep, v = line.partition(":")
        if sep:
            out.append((n.strip().lower(), v.strip()))
    return out


class Target:
    """Where the validator sends requests: host and ports (h1, h1-tls,
    h2c, h2, h3), the data its answers are checked against, and a scratch
    directory."""

    def __init__(self, host, ports, data_dir, workdir):
        self.host, self.ports, self.data = host, dict(ports), data_dir
        self.work = workdir
        self.items = load_dataset(data_dir)
        self.n = 0

    def url(self, kind, path):
        scheme = "https" if kind in ("h1-tls", "h2", "h3") else "http"
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s://%s:%d%s" % (scheme, host, self.ports[kind], path)

    def curl(self, kind, path, *opts, data=None, timeout=15):
        """curl -sk with the protocol option of `kind`; opts go first."""
        self.n += 1
        hfile = os.path.join(self.work, "h%d" % self.n)
        bfile = os.path.join(self.work, "b%d" % self.n)
        proto = {"h1": "--http1.1", "h1-tls": "--http1.1", "h2": "--http2",
                 "h2c": "--http2-prior-knowledge"}[kind]
        argv = ["curl", "-s", "-k", "--max-time", str(timeout), proto,
                "-D", hfile, "-o", bfile, "-w", "%{http_code} %{http_version}"
                ] + list(opts) + [self.url(kind, path)]
        try:
            p = subprocess.run(argv, input=data, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=timeout + 10)
        except subprocess.TimeoutExpired:
            return Resp(error="curl ran past %d s" % (timeout + 10))
        try:
            code, version = p.stdout.decode().split()
            with open(hfile, "rb") as f:
                heads = _heads(f.read())
            body = b""
            if os.path.exists(bfile):
                with open(bfile, "rb") as f:
                    body = f.read()
        except (ValueError, OSError):
            return Resp(error="curl rc %d" % p.returncode)
        finally:
            for fn in (hfile, bfile):
                if os.path.exists(fn):
                    os.unlink(fn)
        return Resp(int(code), version, heads, body,
                    "" if p.returncode == 0 else "curl rc %d" % p.returncode)

    def raw(self, pieces, gap=0.03, timeout=5.0):
        """HttpArena's fragmentation helper (5.1): each piece its own
        sendall with TCP_NODELAY, `gap` s apart; read to EOF (or until
        `timeout`); the body is decoded (chunked or Content-Length) and
        stripped.  Returns Resp."""
        try:
            with socket.create_connection((self.host, self.ports["h1"]),
                                          timeout=timeout) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for i, p in enumerate(pieces):
                    if i:
                        time.sleep(gap)
                    s.sendall(p)
                data = _read_to_eof(s, timeout)
        except OSError as e:
            return Resp(error=str(e))
        return parse_raw(data)


def _read_to_eof(s, timeout):
    data = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def parse_raw(data):
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return Resp(error="no complete head in %s" % common.clip(data))
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/(\d\.\d) (\d{3})", lines[0])
    if not m:
        return Resp(error="bad status line %r" % lines[0][:80])
    heads = [(n.strip().lower(), v.strip()) for n, s, v in
             (x.partition(":") for x in lines[1:]) if s]
    hd = dict(heads)
    if "chunked" in hd.get("transfer-encoding", "").lower():
        out, rest = bytearray(), body
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            try:
                n = int(size_line.split(b";")[0], 16)
            except ValueError:
                break
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        body = bytes(out)
    elif "content-length" in hd:
        body = body[:int(hd["content-length"])]
    return Resp(int(m.group(2)), m.group(1), heads, body.strip())


def header_is(r, name, want):
    """validate.sh's header check, on a 200: exactly one such header, whose
    value is `want` or starts with `want;` (text/javascript counts as
    application/javascript).  Returns '' or why not."""
    if r.status != 200:
        return "got %r" % r
    vals = r.header(name)
    if len(vals) != 1:
        return "%d %s headers" % (len(vals), name)
    v = vals[0].lower().replace("text/javascript", "application/javascript")
    if v == want or v.startswith(want + ";"):
        return ""
    return "%s %r" % (name, vals[0])


class Results:
    """The PASS/FAIL/SKIP lines, printed as they come (to `out`)."""

    def __init__(self, out=print):
        self.rows, self.out = [], out

    def add(self, status, profile, what, detail=""):
        self.rows.append((status, profile, what, detail))
        if self.out:
            line = "%s %s: %s" % (status, profile, what)
            self.out(line + (": " + detail if detail else ""))

    def check(self, profile, what, why):
        """PASS when why is '' (or None), else FAIL with it."""
        if why:
            self.add("FAIL", profile, what, why)
        else:
            self.add("PASS", profile, what)

    def skip(self, profile, why):
        self.add("SKIP", profile, why)

    def count(self, status):
        return sum(1 for r in self.rows if r[0] == status)

    def failures(self):
        return [r for r in self.rows if r[0] == "FAIL"]

    def summary(self):
        return "%d passed, %d failed, %d skipped" % (
            self.count("PASS"), self.count("FAIL"), self.count("SKIP"))


def want_body(r, want, status=200):
    if r.status != status or r.text() != want:
        return "got %r expected %d %r" % (r, status, want)
    return ""


def want_version(r, want):
    return "" if r.version == want else "got HTTP version %r (%r) expected %s" % (
        r.version, r, want)


# ---------------------------------------------------------------------------
# the validator: the profiles' checks

def check_baseline(t, res, P="baseline"):
    c = res.check
    g = t.curl("h1", "/baseline11?a=13&b=42")
    c(P, "GET /baseline11?a=13&b=42 = 55", want_body(g, "55"))
    p = t.curl("h1", "/baseline11?a=13&b=42", "-X", "POST", "-H",
               "Content-Type: text/plain", "--data-binary", "20")
    c(P, "POST body 20 (Content-Length) = 75", want_body(p, "75"))
    ch = t.curl("h1", "/baseline11?a=13&b=42", "-X", "POST", "-H",
                "Content-Type: text/plain", "-H", "Transfer-Encoding: chunked",
                "--data-binary", "20")
    c(P, "POST body 20 (chunked) = 75", want_body(ch, "75"))
    c(P, "GET Content-Type text/plain", header_is(g, "content-type", "text/plain"))
    c(P, "POST Content-Type text/plain", header_is(p, "content-type", "text/plain"))
    a, b = random.randint(100, 999), random.randint(100, 999)
    c(P, "anti-cheat: GET a=%d&b=%d = %d" % (a, b, a + b), want_body(
        t.curl("h1", "/baseline11?a=%d&b=%d" % (a, b)), str(a + b)))
    for x in random.sample(range(100, 1000), 2):
        c(P, "anti-cheat: POST body %d = %d" % (x, 55 + x), want_body(t.curl(
            "h1", "/baseline11?a=13&b=42", "-X", "POST", "-H",
            "Content-Type: text/plain", "--data-binary", str(x)), str(55 + x)))
    post = (b"POST /baseline11?a=13&b=42 HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: text/plain\r\nContent-Length: 2\r\n"
            b"Connection: close\r\n\r\n")
    for what, pieces, want in (
            ("fragmented request line (3 writes)",
             [b"GET /baseli", b"ne11?a=13&b=42 HTTP/1.1\r\n",
              b"Host: localhost\r\nConnection: close\r\n\r\n"], "55"),
            ("fragmented headers (4 writes)",
             [b"GET /baseline11?a=13&b=42 HTTP/1.1\r\n", b"Host: localhost\r\n",
              b"User-Agent: arena-frag/1.0\r\n", b"Connection: close\r\n\r\n"],
             "55"),
            ("fragmented POST: head, then body", [post, b"20"], "75"),
            ("fragmented POST: head, then 1-byte body writes",
             [post, b"2", b"0"], "75")):
        c(P, what + " = " + want, want_body(t.raw(pieces), want))
    # beyond validate.sh: the benchmark's own POST fixtures, byte for byte
    # (no Content-Type; chunked), as gcannon sends them
    fixtures = [b"POST /baseline11?a=13&b=42 HTTP/1.1\r\nHost: localhost:8080\r\n"
                b"Content-Length: 2\r\n\r\n20",
                b"POST /baseline11?a=13&b=42 HTTP/1.1\r\nHost: localhost:8080\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n2\r\n20\r\n0\r\n\r\n"]
    got = [r.text() for r in pipelined(t, fixtures)]
    c(P, "bench fixtures (no Content-Type; chunked) on one connection = 75, 75",
      "" if got == ["75", "75"] else "got %r" % got)


def pipelined(t, requests, timeout=5.0):
    """Send `requests` in one write on one keep-alive connection; the
    responses (Resp) in order, as many as came within `timeout`."""
    out = []
    try:
        with socket.create_connection((t.host, t.ports["h1"]), timeout=timeout) as s:
            s.sendall(b"".join(requests))
            buf = b""
            deadline = time.monotonic() + timeout
            while len(out) < len(requests) and time.monotonic() < deadline:
                while True:
                    r, buf = _one_response(buf)
                    if r is None:
                        break
                    out.append(r)
                if len(out) == len(requests):
                    break
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = s.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
    except OSError:
        pass
    return out


def _one_response(buf):
    """(Resp, rest) of one Content-Length or chunked response at the start
    of buf, or (None, buf) when incomplete."""
    i = buf.find(b"\r\n\r\n")
    if i < 0:
        return None, buf
    r = parse_raw(buf[:i + 4])
    hd = dict(r.headers)
    rest = buf[i + 4:]
    if "chunked" in hd.get("transfer-encoding", "").lower():
        body, j = bytearray(), 0
        while True:
            k = rest.find(b"\r\n", j)
            if k < 0:
                return None, buf
            n = int(rest[j:k].split(b";")[0], 16)
            if len(rest) < k + 2 + n + 2:
                return None, buf
            if n == 0:
                end = rest.find(b"\r\n", k + 2)  # no trailers expected
                r.body = bytes(body)
                return r, rest[end + 2:] if end >= 0 else b""
            body += rest[k + 2:k + 2 + n]
            j = k + 2 + n + 2
    n = int(hd.get("content-length", "0"))
    if len(rest) < n:
        return None, buf
    r.body = rest[:n]
    return r, rest[n:]


def check_pipelined(t, res, P="pipelined"):
    r = t.curl("h1", "/pipeline")
    res.check(P, "GET /pipeline = ok", want_body(r, "ok"))
    res.check(P, "Content-Type text/plain", header_is(r, "content-type", "text/plain"))
    # beyond validate.sh: 16 requests in one segment, as gcannon -p 16 sends
    rs = pipelined(t, [b"GET /pipeline HTTP/1.1\r\nHost: localhost:8080\r\n\r\n"] * 16)
    res.check(P, "16 pipelined in one write: 16 x ok, in order",
              "" if [x.body for x in rs] == [b"ok"] * 16
              else "got %d responses: %r" % (len(rs), rs[:3]))


def json_totals(r, count, m, exact_len=False):
    """'' when r (a Resp, or its decoded JSON) is /json/count?m=m's
    answer: count, and every item's total == price*quantity*m exactly, as
    an integer."""
    doc = r
    if isinstance(r, Resp):
        if r.status != 200:
            return "got %r" % r
        doc = r.json()
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        return "not {'items': [...]}: %s" % common.clip(str(doc).encode())
    if doc.get("count") != count:
        return "count %r expected %d" % (doc.get("count"), count)
    if exact_len and len(doc["items"]) != count:
        return "%d items expected %d" % (len(doc["items"]), count)
    for it in doc["items"]:
        if not isinstance(it, dict) or "total" not in it:
            return "an item without total: %r" % (it,)
        want = it.get("price", 0) * it.get("quantity", 0) * m
        if it["total"] != want or isinstance(it["total"], float):
            return "item %r: total %r expected %d" % (it.get("id"), it["total"], want)
    return ""


def check_json(t, res, P="json", kind="h1", pairs=((12, 3), (22, 7), (31, 2), (50, 5))):
    why = ""
    for cnt, m in pairs:
        why = json_totals(t.curl(kind, "/json/%d?m=%d" % (cnt, m)), cnt, m)
        if why:
            why = "/json/%d?m=%d: %s" % (cnt, m, why)
            break
    res.check(P, "count and exact totals for %s" % " ".join(
        "%d,%d" % p for p in pairs), why)
    r = t.curl(kind, "/json/50?m=1")
    res.check(P, "Content-Type application/json",
              header_is(r, "content-type", "application/json"))


def decode(r):
    """The body of r decoded by its Content-Encoding (gzip, br, or none)."""
    enc = ",".join(r.header("content-encoding")).split(",")[0].strip().lower()
    if enc == "gzip":
        return zlib.decompress(r.body, 16 + zlib.MAX_WBITS)
    if enc == "br":
        br = brotli_module()
        if br is None:
            raise ValueError("python3-brotli missing: cannot decode br")
        return br.decompress(r.body)
    if enc in ("", "identity"):
        return r.body
    raise ValueError("unknown Content-Encoding %r" % enc)


def check_json_comp(t, res, P="json-comp"):
    ae = ("-H", "Accept-Encoding: gzip, br")
    r = t.curl("h1", "/json/50?m=1", *ae)
    enc = ",".join(r.header("content-encoding")).split(",")[0].strip().lower()
    res.check(P, "Content-Encoding gzip or br with Accept-Encoding: gzip, br",
              "" if enc in ("gzip", "br") else "got %r (%r)" % (
                  r.header("content-encoding"), r))
    why = ""
    for cnt, m in ((25, 3), (40, 7), (50, 2)):
        r = t.curl("h1", "/json/%d?m=%d" % (cnt, m), *ae)
        if r.status != 200:
            why = "/json/%d?m=%d: got %r" % (cnt, m, r)
            break
        try:
            doc = json.loads(decode(r))
        except (ValueError, zlib.error) as e:
            why = "/json/%d?m=%d: cannot decode: %s (%r)" % (cnt, m, e, r)
            break
        why = json_totals(doc, cnt, m)
        if why:
            why = "/json/%d?m=%d: %s" % (cnt, m, why)
            break
    res.check(P, "decoded count and exact totals for 25,3 40,7 50,2", why)
    r = t.curl("h1", "/json/50?m=1")
    res.check(P, "no Content-Encoding without Accept-Encoding",
              "" if r.status == 200 and not r.header("content-encoding")
              else "got %r, Content-Encoding %r" % (r, r.header("content-encoding")))


def alpn(t, kind, offer):
    """The ALPN protocol the TLS port picks from `offer` (None: none)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(list(offer))
    with socket.create_connection((t.host, t.ports[kind]), timeout=5) as s:
        with ctx.wrap_socket(s, server_hostname="localhost") as ts:
            return ts.selected_alpn_protocol()


def check_json_tls(t, res, P="json-tls"):
    r = t.curl("h1-tls", "/json/1?m=1")
    res.check(P, "curl --http1.1 gets HTTP/1.1", want_version(r, "1.1"))
    try:
        got = alpn(t, "h1-tls", ("h2", "http/1.1"))
        why = "" if got == "http/1.1" else "got %r expected 'http/1.1'" % got
    except (OSError, ssl.SSLError) as e:
        why = "TLS handshake failed: %s" % e
    res.check(P, "ALPN offered h2,http/1.1 picks http/1.1", why)
    why = ""
    for cnt, m in ((7, 2), (23, 11), (50, 1)):
        why = json_totals(t.curl("h1-tls", "/json/%d?m=%d" % (cnt, m)), cnt, m)
        if why:
            why = "/json/%d?m=%d: %s" % (cnt, m, why)
            break
    res.check(P, "count and exact totals for 7,2 23,11 50,1", why)
    ct = ",".join(r.header("content-type"))
    res.check(P, "Content-Type contains application/json",
              "" if "application/json" in ct else "got %r" % ct)


def check_upload(t, res, P="upload"):
    r = t.curl("h1", "/upload", "-X", "POST", "-H",
               "Content-Type: application/octet-stream", "--data-binary",
               "Hello, HttpArena!")
    res.check(P, "17-byte body = 17", want_body(r, "17"))
    body = base64.b64encode(os.urandom(36))
    r = t.curl("h1", "/upload", "-X", "POST", "--data-binary", "@-", data=body)
    res.check(P, "anti-cheat: random 48-char body = 48", want_body(r, "48"))
    why = ""
    for n in (512000, 2097152, 10485760, 20971520):
        r = t.curl("h1", "/upload", "-X", "POST", "--data-binary", "@-",
                   data=os.urandom(n), timeout=60)
        why = want_body(r, str(n))
        if why:
            why = "%d bytes: %s" % (n, why)
            break
    res.check(P, "512000, 2097152, 10485760, 20971520 random bytes", why)


def check_baseline2(t, res, P, kind):
    r = t.curl(kind, "/baseline2?a=13&b=42")
    res.check(P, "HTTP/2 negotiated", want_version(r, "2"))
    if kind == "h2c":
        x = t.curl("h2c", "/baseline2?a=1&b=1", "--http1.1")
        res.check(P, "HTTP/1.1 on the h2c port is refused (not 200)",
                  "" if x.status != 200 else "got %r" % x)
    res.check(P, "/baseline2?a=13&b=42 = 55", want_body(r, "55"))
    a, b = random.randint(100, 999), random.randint(100, 999)
    res.check(P, "anti-cheat: a=%d&b=%d = %d" % (a, b, a + b), want_body(
        t.curl(kind, "/baseline2?a=%d&b=%d" % (a, b)), str(a + b)))
    res.check(P, "Content-Type text/plain", header_is(r, "content-type", "text/plain"))


def check_json_h2c(t, res, P="json-h2c"):
    r = t.curl("h2c", "/json/1?m=1")
    res.check(P, "HTTP/2 (prior knowledge)", want_version(r, "2"))
    res.check(P, "Content-Type application/json",
              header_is(r, "content-type", "application/json"))
    why = ""
    for cnt, m in ((12, 3), (22, 7), (31, 2), (50, 5)):
        why = json_totals(t.curl("h2c", "/json/%d?m=%d" % (cnt, m)), cnt, m,
                          exact_len=True)
        if why:
            why = "/json/%d?m=%d: %s" % (cnt, m, why)
            break
    # validate.sh checks count and items here; the totals come for free
    res.check(P, "count and items for 12,3 22,7 31,2 50,5", why)


def static_types(t, res, P, kind):
    for name, want in (("reset.css", "text/css"), ("app.js", "application/javascript"),
                       ("manifest.json", "application/json")):
        r = t.curl(kind, "/static/" + name)
        res.check(P, "%s Content-Type %s" % (name, want),
                  header_is(r, "content-type", want))


def check_static(t, res, P="static"):
    static_types(t, res, P, "h1")
    bad, types = [], []
    for name, size, ctype in STATIC_FILES:
        with open(os.path.join(t.data, "static", name), "rb") as f:
            want = f.read()
        r = t.curl("h1", "/static/" + name)
        if r.status != 200 or r.body != want or r.header("content-encoding"):
            bad.append("%s: %r, %d bytes%s, Content-Encoding %r, expected %d"
                       % (name, r.status, len(r.body), " (other bytes)" if
                          len(r.body) == len(want) else "",
                          r.header("content-encoding"), len(want)))
        elif header_is(r, "content-type", ctype):
            types.append("%s: %s" % (name, header_is(r, "content-type", ctype)))
    res.check(P, "20 files without Accept-Encoding: exact bytes", "; ".join(bad[:3]))
    # beyond validate.sh (which checks 3): every type as the references send it
    res.check(P, "20 files' Content-Types (%s)" % ", ".join(sorted(
        {c for _, _, c in STATIC_FILES})), "; ".join(types[:4]))
    bad, encoded = [], 0
    for name, _, _ in STATIC_FILES:
        want = os.path.getsize(os.path.join(t.data, "static", name))
        r = t.curl("h1", "/static/" + name, "--compressed")
        if r.header("content-encoding"):
            encoded += 1
        if r.status != 200 or len(r.body) != want:
            bad.append("%s: %r, decoded %d bytes expected %d" % (
                name, r.status, len(r.body), want))
    if bad:
        res.check(P, "20 files with curl --compressed: decoded sizes", "; ".join(bad[:3]))
    elif not encoded:
        res.skip(P, "curl --compressed: nothing came compressed (optional)")
    else:
        res.check(P, "20 files with curl --compressed: decoded sizes (%d compressed)"
                  % encoded, "")
    r = t.curl("h1", "/static/nonexistent.txt")
    res.check(P, "/static/nonexistent.txt = 404",
              "" if r.status == 404 else "got %r" % r)


def check_static_h2(t, res, P="static-h2"):
    r = t.curl("h2", "/static/reset.css")
    res.check(P, "HTTP/2 negotiated", want_version(r, "2"))
    static_types(t, res, P, "h2")
    res.check(P, "reset.css size > 0",
              "" if r.status == 200 and r.body else "got %r" % r)
    r = t.curl("h2", "/static/nonexistent.txt")
    res.check(P, "/static/nonexistent.txt = 404",
              "" if r.status == 404 else "got %r" % r)


def db_items_ok(doc, limit):
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        return "not {'items': [...]}: %s" % common.clip(json.dumps(doc).encode())
    if doc.get("count") != limit or len(doc["items"]) != limit:
        return "count %r, %d items, expected %d" % (doc.get("count"),
                                                    len(doc["items"]), limit)
    for it in doc["items"]:
        if not isinstance(it.get("rating"), dict) or "score" not in it["rating"]:
            return "item without rating.score: %r" % (it,)
        if not isinstance(it.get("tags"), list):
            return "tags not a list: %r" % (it,)
        if not isinstance(it.get("active"), bool):
            return "active not a boolean: %r" % (it,)
    return ""


def check_async_db(t, res, P="async-db"):
    why = ""
    for mn, mx, lim in ((5, 80, 7), (20, 150, 18), (100, 400, 33), (10, 50, 50)):
        r = t.curl("h1", "/async-db?min=%d&max=%d&limit=%d" % (mn, mx, lim))
        why = db_items_ok(r.json(), lim) if r.status == 200 else "got %r" % r
        if why:
            why = "min=%d&max=%d&limit=%d: %s" % (mn, mx, lim, why)
            break
    res.check(P, "4 queries: count == limit, rating.score, tags list, active bool", why)
    r = t.curl("h1", "/async-db?min=10&max=50&limit=50")
    res.check(P, "Content-Type application/json",
              header_is(r, "content-type", "application/json"))
    r = t.curl("h1", "/async-db?min=9999&max=9999&limit=50")
    doc = r.json()
    res.check(P, "anti-cheat: min=9999&max=9999 gives count 0",
              "" if r.status == 200 and isinstance(doc, dict) and doc.get("count") == 0
              else "got %r" % r)


# WebSocket (spec 8): raw frames, as validate-ws.py sends them

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_frame(opcode, payload):
    """A masked client frame, FIN set."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Ws:
    def __init__(self, t, timeout=5.0):
        self.key = base64.b64encode(os.urandom(16))
        self.sock = socket.create_connection((t.host, t.ports["h1"]), timeout=timeout)
        self.sock.sendall(b"GET /ws HTTP/1.1\r\nHost: localhost:8080\r\n"
                          b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                          b"Sec-WebSocket-Key: " + self.key +
                          b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status_line = head.split(b"\r\n")[0].decode("latin-1")
        self.headers = {n.strip().lower(): v.strip() for n, s, v in (
            x.partition(":") for x in head.decode("latin-1").split("\r\n")[1:]) if s}

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed (have %r)" % self.buf[:100])
        self.buf += chunk

    def _need(self, n):
        while len(self.buf) < n:
            self._fill()

    def frame(self):
        """(fin, opcode, masked, payload) of the next server frame."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        n, i = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, i = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, i = struct.unpack(">Q", self.buf[2:10])[0], 10
        if b1 & 0x80:
            i += 4
        self._need(i + n)
        payload, self.buf = self.buf[i:i + n], self.buf[i + n:]
        return bool(b0 & 0x80), b0 & 0x0F, bool(b1 & 0x80), payload

    def close(self):
        self.sock.close()


def check_echo_ws(t, res, P="echo-ws"):
    c = res.check

    def echo(ws, opcode, payload):
        ws.sock.sendall(ws_frame(opcode, payload))
        fin, op, masked, got = ws.frame()
        if (fin, op, masked, got) != (True, opcode, False, payload):
            return "got fin=%s opcode=%d masked=%s %s" % (
                fin, op, masked, common.clip(got, 40))
        return ""
    try:
        ws = Ws(t)
    except (OSError, EOFError) as e:
        c(P, "upgrade: 101", "no answer: %s" % e)
        return
    try:
        c(P, "upgrade: 101", "" if "101" in ws.status_line else
          "got %r" % ws.status_line)
        want = base64.b64encode(hashlib.sha1(ws.key + WS_GUID).digest()).decode()
        got = ws.headers.get("sec-websocket-accept")
        c(P, "Sec-WebSocket-Accept", "" if got == want else
          "got %r expected %r" % (got, want))
        text = ("HttpArena-validate-%s" % os.urandom(8).hex()).encode()
        c(P, "text echo", echo(ws, 0x1, text))
        c(P, "binary echo (256 bytes)", echo(ws, 0x2, os.urandom(256)))
        msgs = [("burst-%d-%s" % (i, os.urandom(4).hex())).encode() for i in range(5)]
        ws.sock.sendall(b"".join(ws_frame(0x1, m) for m in msgs))
        got = [ws.frame()[3] for _ in msgs]
        c(P, "5 text frames in one write echoed in order",
          "" if got == msgs else "got %r" % got)
        ws.sock.sendall(ws_frame(0x8, struct.pack(">H", 1000) + b"validate done"))
        try:
            f = ws.frame()
            c(P, "close answered with a close frame",
              "" if f[1] == 0x8 else "got opcode %d" % f[1])
        except (OSError, EOFError) as e:
            c(P, "close answered with a close frame", "got %s" % e)
    except (OSError, EOFError) as e:
        c(P, "echo", "connection failed: %s" % e)
    finally:
        ws.close()
    # 7: a plain GET /ws (no upgrade): 4xx, or a reset or timeout; not a
    # clean close with nothing
    try:
        with socket.create_connection((t.host, t.ports["h1"]), timeout=3) as s:
            s.sendall(b"GET /ws HTTP/1.1\r\nHost: localhost:8080\r\n"
                      b"Connection: keep-alive\r\n\r\n")
            s.settimeout(3)
            data = s.recv(4096)
        m = re.match(rb"HTTP/1\.1 (\d{3})", data)
        why = "" if m and m.group(1).startswith(b"4") else "got %s" % common.clip(data)
    except (ConnectionResetError, socket.timeout):
        why = ""
    except OSError as e:
        why = "connection failed: %s" % e
    c(P, "plain GET /ws (no upgrade) gets 4xx", why)
    try:
        ws = Ws(t)
        try:
            why = echo(ws, 0x1, b"health")
            ws.sock.sendall(ws_frame(0x8, struct.pack(">H", 1000)))
        finally:
            ws.close()
    except (OSError, EOFError) as e:
        why = str(e)
    c(P, "health: a new upgrade echoes", why)


def gtlsclient_get(t, paths, timeout=20):
    """GET paths over HTTP/3 with gtlsclient: {path: (status, content-type,
    body)} for the streams that completed."""
    exe = shutil.which("gtlsclient")
    dl = tempfile.mkdtemp(prefix="h3-", dir=t.work)
    port = t.ports["h3"]
    cmd = [exe, "--exit-on-all-streams-close", "--timeout=5s",
           "--handshake-timeout=5s", "--no-quic-dump", "--download=" + dl,
           t.host, str(port)] + ["https://localhost:%d%s" % (port, p) for p in paths]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    text = p.stdout.decode("utf-8", "replace")
    log = "gtlsclient rc %d; %s" % (p.returncode, " | ".join(
        x for x in text.splitlines()[-40:] if "error" in x.lower() or
        "timeout" in x.lower())[-200:] or "no response")
    heads = {}  # stream id: {field: value} of the response
    for m in re.finditer(r"^http: stream 0x([0-9a-f]+) \[(:?[^:\]]+): ([^\]]*)\]$",
                         text, re.M):
        heads.setdefault(int(m.group(1), 16), {})[m.group(2).lower()] = m.group(3)
    out = {}
    for i, path in enumerate(paths):  # request i went on stream 4 * i
        fn = os.path.join(dl, path.rsplit("/", 1)[-1] or "index.html")
        if os.path.exists(fn):
            h = heads.get(4 * i, {})
            with open(fn, "rb") as f:
                out[path] = (int(h.get(":status", 0)) or None,
                             h.get("content-type"), f.read())
    return out, log


def check_baseline_h3(t, res, P="baseline-h3"):
    if not shutil.which("gtlsclient"):
        res.skip(P, "gtlsclient not installed (apt-get install ngtcp2-client)")
        return
    a, b = random.randint(100, 999), random.randint(100, 999)
    paths = ["/baseline2?a=13&b=42", "/baseline2?a=%d&b=%d" % (a, b)]
    try:
        got, log = gtlsclient_get(t, paths)
    except subprocess.TimeoutExpired:
        got, log = {}, "gtlsclient timed out"
    for path, want in zip(paths, ("55", str(a + b))):
        r = got.get(path)
        why = ("no response over HTTP/3 (%s)" % log
               if r is None else "" if r[2].rstrip(b"\n") == want.encode()
               else "got %r expected %r" % (r[2][:60], want))
        if not why and r[0] not in (None, 200):
            why = "status %r" % r[0]
        res.check(P, "%s = %s over HTTP/3" % (path, want), why)
    r = got.get(paths[0])
    if r and r[1] is not None:
        v = r[1].lower()
        res.check(P, "Content-Type text/plain", "" if v == "text/plain" or
                  v.startswith("text/plain;") else "got %r" % r[1])


CHECKS = {"baseline": check_baseline, "pipelined": check_pipelined,
          "json": check_json, "json-comp": check_json_comp,
          "json-tls": check_json_tls, "upload": check_upload,
          "baseline-h2": lambda t, r: check_baseline2(t, r, "baseline-h2", "h2"),
          "baseline-h2c": lambda t, r: check_baseline2(t, r, "baseline-h2c", "h2c"),
          "json-h2c": check_json_h2c, "static": check_static,
          "static-h2": check_static_h2, "async-db": check_async_db,
          "echo-ws": check_echo_ws, "baseline-h3": check_baseline_h3}


def parse_profiles(text):
    """A comma list of profiles ('all' or None: every one), validated."""
    if not text or text == "all":
        return list(PROFILES)
    out = []
    for p in text.split(","):
        p = p.strip()
        if p and p not in PROFILES:
            raise SetupError("unknown profile %r (known: %s)" % (p, ", ".join(PROFILES)))
        if p and p not in out:
            out.append(p)
    return out


def validate(host, ports, data_dir, profiles=PROFILES, out=print, skip=None):
    """Run the checks of `profiles` against host:ports, answers checked
    against data_dir's dataset and static files.  `skip`: {profile: why}
    for profiles that cannot run here (no database, say).  Returns
    Results."""
    res = Results(out)
    if shutil.which("curl") is None:
        raise SetupError("curl not found (apt-get install curl)")
    work = tempfile.mkdtemp(prefix="arena-validate.")
    try:
        t = Target(host, ports, data_dir, work)
        for p in profiles:
            kind = PROFILE_PORT.get(p, "h1")
            if skip and p in skip:
                res.skip(p, skip[p])
            elif kind not in t.ports:
                res.skip(p, "no %s port" % kind)
            else:
                try:
                    CHECKS[p](t, res)
                except Exception as e:  # a check that crashed is a FAIL
                    res.add("FAIL", p, "validator error", "%s: %s" % (
                        type(e).__name__, e))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return res
