"""Real-socket test harness for tern: servers, raw HTTP/1.1 I/O, TAP runner.

Python 3 standard library only. The test files import this module; the
binaries are found under $TERN_BUILD (meson's build root), or ../../build
relative to this file when the variable is not set.

Servers: Server('reference', ['--max-uri', '256']) starts
build/examples/reference with --port 0, waits for its "listening on PORT" line
and exposes .port. stop() sends SIGTERM, waits, falls back to SIGKILL, and
returns the exit status. While a server runs it is registered as live; after
every case the runner checks each live server (the reference server: a fresh
GET / must answer "Hello, World!"; the others: the process runs and accepts a
connection).

Raw I/O: connect(), Conn (a socket with a read buffer so that pipelined
responses are read one after another), Conn.response() parses one
response (Content-Length, chunked with strict framing checks, or
close-delimited) into a Response with .status, .headers (lower-case names,
repeated fields joined with ", "), .body and the raw bytes.

TAP: suite = Suite(); @suite.case(timeout=...) def name(): ...; then
suite.main(). Each case runs in a thread with its own timeout; a case fails
by raising (assert or any exception).
"""

import importlib
import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
# The source tree; the test files sit in subject folders below HERE and
# find the tree's other parts (test/browser, perf, examples) from REPO.
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("TERN_BUILD") or os.path.join(REPO, "build")
HOST = "127.0.0.1"
HELLO_BODY = b"Hello, World!"  # the reference server's GET / body


def raise_nofile():
    """Raise RLIMIT_NOFILE's soft limit to the hard one (children inherit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard
    if want == resource.RLIM_INFINITY:
        want = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


raise_nofile()


def binary(name):
    path = os.path.join(BUILD, "examples", name)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError("%s not built (TERN_BUILD=%s)" % (path, BUILD))
    return path


# ---------------------------------------------------------------------------
# Servers

_live = []
_live_lock = threading.Lock()


class ServerError(Exception):
    pass


class Server:
    """A server binary in its own process (new session), on port 0."""

    def __init__(self, name="reference", args=(), env=None, start_timeout=10.0,
                 prefix=(), port_args=("--port", "0")):
        """`prefix`: a command to run the server under (e.g. prlimit);
        `port_args` what asks it for an ephemeral port (the examples that
        take a bare PORT: () and "0" among `args`)."""
        self.name = name
        self.args = list(args)
        # TERN_TEST_TLS_ENGINE runs a test file's TLS servers on one TLS
        # engine (meson registers the TLS tests once per engine built).
        engine = os.environ.get("TERN_TEST_TLS_ENGINE")
        if engine and "--tls-port" in self.args and \
                "--tls-engine" not in self.args:
            self.args += ["--tls-engine", engine]
        self.port = None
        self.returncode = None
        self._stderr = tempfile.TemporaryFile()
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        cmd = list(prefix) + [binary(name)] + list(port_args) + self.args
        self.cmd = cmd
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self._stderr, env=full_env, start_new_session=True)
        try:
            line = self._read_line(start_timeout)
        except Exception:
            self.kill()
            raise
        m = re.match(rb"listening on (\d+)\s*$", line)
        if not m:
            self.kill()
            raise ServerError("%s: unexpected first line %r; stderr: %s"
                              % (name, line, self.stderr_text()))
        self.port = int(m.group(1))
        with _live_lock:
            _live.append(self)

    def _read_line(self, timeout):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        buf = getattr(self, "_pending", b"")
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerError("%s: no 'listening on' line in %.1f s"
                                  % (self.name, timeout))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 256)
            if not chunk:
                raise ServerError("%s exited before listening (rc %s); "
                                  "stderr: %s" % (self.name, self.proc.wait(),
                                                  self.stderr_text()))
            buf += chunk
        line, self._pending = buf.split(b"\n", 1)
        return line

    def next_line(self, timeout=5.0):
        """The next line the server printed after its first."""
        return self._read_line(timeout).decode("utf-8", "replace")

    def alive(self):
        return self.proc.poll() is None

    def stderr_text(self, limit=2000):
        try:
            self._stderr.seek(0)
            data = self._stderr.read()
        except (ValueError, OSError):
            return ""
        return data[-limit:].decode("utf-8", "replace")

    def _unregister(self):
        with _live_lock:
            if self in _live:
                _live.remove(self)

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout):
        """Wait for exit; returns the exit status or None on timeout."""
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._unregister()
        return self.returncode

    def stop(self, timeout=7.0):
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit
        status (negative: killed by that signal) and sets .stop_seconds."""
        self._unregister()
        t0 = time.monotonic()
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stop_seconds = time.monotonic() - t0
        self.returncode = self.proc.returncode
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.returncode

    def kill(self):
        self._unregister()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.returncode = self.proc.returncode
        if self.proc.stdout:
            self.proc.stdout.close()

    def check_alive(self):
        """Raise unless the server still runs and serves a new connection."""
        if not self.alive():
            raise AssertionError("%s died (rc %s); stderr: %s" % (
                self.name, self.proc.returncode, self.stderr_text()))
        if self.name == "reference":
            r = get(self.port, "/", timeout=5)
            if r.status != 200 or r.body != HELLO_BODY:
                raise AssertionError("alive check: GET / gave %d %r"
                                     % (r.status, r.body[:100]))
        else:
            s = connect(self.port, timeout=5)
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        """A case's own server: it must still serve, then stop cleanly
        (exit status 0)."""
        if et is not None:
            self.kill()
            return False
        try:
            self.check_alive()
        except BaseException:
            self.kill()
            raise
        rc = self.stop()
        if rc != 0:
            raise AssertionError("%s exited with %s on SIGTERM; stderr: %s"
                                 % (self.name, rc, self.stderr_text()))
        return False


def live_servers():
    with _live_lock:
        return list(_live)


# ---------------------------------------------------------------------------
# Raw sockets


def connect(port, timeout=5.0, nodelay=True, host=HOST):
    s = socket.create_connection((host, port), timeout=timeout)
    if nodelay:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(timeout)
    return s


def set_linger_rst(sock):
    """Make close() send a RST (SO_LINGER on, timeout 0)."""
    import struct
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                    struct.pack("ii", 1, 0))


def recv_until_close(sock, timeout=5.0):
    """Read until EOF. Returns (data, how): how is 'eof', 'reset' or
    'timeout'."""
    data = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(data), "timeout"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return bytes(data), "timeout"
        except (ConnectionResetError, BrokenPipeError):
            return bytes(data), "reset"
        if not chunk:
            return bytes(data), "eof"
        data += chunk


class ProtocolError(Exception):
    pass


class Closed(Exception):
    """The peer closed before a complete response."""

    def __init__(self, msg, partial=b""):
        Exception.__init__(self, msg)
        self.partial = partial


class Response:
    def __init__(self):
        self.version = None
        self.status = None
        self.reason = None
        self.header_list = []  # [(name as sent, value)]
        self.headers = {}  # lower-case name -> value (repeats joined)
        self.body = b""
        self.raw_head = b""
        self.raw_body = b""  # body bytes as framed on the wire
        self.chunk_sizes = []
        self.trailers = {}
        self.framing = None  # 'length', 'chunked', 'close', 'none'
        self.keep_raw = True

    def header_count(self, name):
        name = name.lower()
        return sum(1 for n, _ in self.header_list if n.lower() == name)

    def __repr__(self):
        return "<Response %s %s %r body[%d]=%r>" % (
            self.status, self.reason, self.headers, len(self.body),
            self.body[:80])


STATUS_RE = re.compile(rb"HTTP/(\d)\.(\d) (\d{3}) ([^\r\n]*)\Z")
FIELD_RE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*\Z")


class Conn:
    """A client connection with a read buffer."""

    def __init__(self, port=None, sock=None, timeout=5.0):
        self.sock = sock if sock is not None else connect(port, timeout)
        self.timeout = timeout
        self.buf = bytearray()
        self.eof = False

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False

    def _fill(self, deadline):
        if self.eof:
            raise Closed("connection closed by peer", bytes(self.buf))
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out waiting for the response "
                                 "(have %r)" % bytes(self.buf[:200]))
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(262144)
        except socket.timeout:
            raise socket.timeout("timed out waiting for the response "
                                 "(have %r)" % bytes(self.buf[:200]))
        except ConnectionResetError:
            self.eof = True
            raise Closed("connection reset by peer", bytes(self.buf))
        if not chunk:
            self.eof = True
            raise Closed("connection closed by peer", bytes(self.buf))
        self.buf += chunk

    def read_line(self, deadline, limit=65536):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                if not line.endswith(b"\r\n"):
                    raise ProtocolError("bare LF in response: %r" % line)
                return line
            if len(self.buf) > limit:
                raise ProtocolError("line too long")
            self._fill(deadline)

    def read_exact(self, n, deadline):
        while len(self.buf) < n:
            self._fill(deadline)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def read_some(self, deadline=None):
        """Whatever is buffered, or the next recv."""
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        if not self.buf:
            self._fill(deadline)
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def read_to_close(self, deadline):
        while True:
            try:
                self._fill(deadline)
            except Closed:
                data = bytes(self.buf)
                self.buf.clear()
                return data

    def head(self, deadline=None):
        """Read and parse one response head (status line and fields)."""
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        r = Response()
        raw = bytearray()
        line = self.read_line(deadline)
        raw += line
        m = STATUS_RE.match(line[:-2])
        if not m:
            raise ProtocolError("bad status line %r" % line)
        r.version = (int(m.group(1)), int(m.group(2)))
        r.status = int(m.group(3))
        r.reason = m.group(4).decode("latin-1")
        while True:
            line = self.read_line(deadline)
            raw += line
            if line == b"\r\n":
                break
            fm = FIELD_RE.match(line[:-2])
            if not fm:
                raise ProtocolError("bad header line %r" % line)
            name = fm.group(1).decode("latin-1")
            value = fm.group(2).decode("latin-1")
            r.header_list.append((name, value))
            key = name.lower()
            if key in r.headers:
                r.headers[key] += ", " + value
            else:
                r.headers[key] = value
        r.raw_head = bytes(raw)
        return r

    def body_chunks(self, r, deadline, sink):
        """Read a chunked body strictly, passing data pieces to sink."""
        raw = bytearray()
        while True:
            line = self.read_line(deadline)
            raw += line
            m = re.match(rb"([0-9A-Fa-f]+)(;[^\r\n]*)?\r\n\Z", line)
            if not m:
                raise ProtocolError("bad chunk-size line %r" % line)
            size = int(m.group(1), 16)
            r.chunk_sizes.append(size)
            if size == 0:
                break
            left = size
            while left > 0:
                if not self.buf:
                    self._fill(deadline)
                n = min(left, len(self.buf))
                piece = bytes(self.buf[:n])
                del self.buf[:n]
                left -= n
                sink(piece)
                if r.keep_raw:
                    raw += piece
            crlf = self.read_exact(2, deadline)
            raw += crlf
            if crlf != b"\r\n":
                raise ProtocolError("chunk data not followed by CRLF: %r"
                                    % crlf)
        while True:
            line = self.read_line(deadline)
            raw += line
            if line == b"\r\n":
                break
            fm = FIELD_RE.match(line[:-2])
            if not fm:
                raise ProtocolError("bad trailer line %r" % line)
            r.trailers[fm.group(1).decode().lower()] = fm.group(2).decode()
        r.raw_body = bytes(raw)

    def response(self, method="GET", timeout=None, sink=None, keep_raw=True):
        """Read one complete response (1xx included: the caller sees it).
        `method` is the request's (HEAD: no body). With `sink`, body bytes
        go there instead of into .body."""
        deadline = time.monotonic() + (timeout or self.timeout)
        r = self.head(deadline)
        try:
            return self._body(r, method, deadline, sink, keep_raw)
        except (socket.timeout, Closed) as e:
            raise type(e)("%s; in the body of a response with head %r"
                          % (e, r.raw_head))

    def _body(self, r, method, deadline, sink, keep_raw):
        r.keep_raw = keep_raw
        pieces = []
        put = sink if sink is not None else pieces.append
        te = r.headers.get("transfer-encoding")
        cl = r.headers.get("content-length")
        if (method == "HEAD" or 100 <= r.status < 200 or r.status in (204, 304)):
            r.framing = "none"
        elif te is not None:
            if te.lower() != "chunked":
                raise ProtocolError("unexpected Transfer-Encoding %r" % te)
            if cl is not None:
                raise ProtocolError("both Transfer-Encoding and "
                                    "Content-Length")
            r.framing = "chunked"
            self.body_chunks(r, deadline, put)
        elif cl is not None:
            if not re.match(r"\d+\Z", cl):
                raise ProtocolError("bad Content-Length %r" % cl)
            r.framing = "length"
            left = int(cl)
            while left > 0:
                if not self.buf:
                    self._fill(deadline)
                n = min(left, len(self.buf))
                put(bytes(self.buf[:n]))
                del self.buf[:n]
                left -= n
        else:
            r.framing = "close"
            put(self.read_to_close(deadline))
        if sink is None:
            r.body = b"".join(pieces)
            if r.framing != "chunked":
                r.raw_body = r.body
        return r

    def final_response(self, method="GET", timeout=None):
        """Skip interim (1xx) responses; return (interims, final)."""
        interims = []
        while True:
            r = self.response(method, timeout)
            if r.status >= 200:
                return interims, r
            interims.append(r)

    def request(self, method, target, headers=None, body=b"",
                version="HTTP/1.1", timeout=None):
        self.send(build_request(method, target, headers, body, version))
        return self.response(method, timeout)

    def at_eof(self, timeout=2.0):
        """True if the peer closes (EOF or reset) within `timeout` with no
        further bytes; raises if bytes arrive."""
        if self.buf:
            raise ProtocolError("unexpected bytes %r" % bytes(self.buf[:200]))
        data, how = recv_until_close(self.sock, timeout)
        if data:
            raise ProtocolError("unexpected bytes before close: %r"
                                % data[:200])
        return how in ("eof", "reset")

    def still_open(self, wait=0.1):
        """True if nothing arrives and the peer does not close within
        `wait` seconds."""
        if self.buf:
            return False
        r, _, _ = select.select([self.sock], [], [], wait)
        return not r


def build_request(method, target, headers=None, body=b"",
                  version="HTTP/1.1"):
    """A request; Host: x is added unless headers hold Host (pass
    ("Host", None) to leave it out)."""
    if isinstance(body, str):
        body = body.encode()
    hs = list(headers.items() if isinstance(headers, dict) else
              (headers or []))
    names = [n.lower() for n, _ in hs]
    out = ["%s %s %s\r\n" % (method, target, version)]
    if "host" not in names and version == "HTTP/1.1":
        out.append("Host: x\r\n")
    for n, v in hs:
        if v is None:
            continue
        out.append("%s: %s\r\n" % (n, v))
    if body and "content-length" not in names and \
            "transfer-encoding" not in names:
        out.append("Content-Length: %d\r\n" % len(body))
    out.append("\r\n")
    return "".join(out).encode("latin-1") + body


def get(port, target="/", headers=None, timeout=5.0, method="GET"):
    """One request on a fresh connection (closed afterwards)."""
    with Conn(port, timeout=timeout) as c:
        return c.request(method, target, headers, timeout=timeout)


def chunked(pieces, trailers=b""):
    """Encode body pieces with chunked framing (+ raw trailer lines)."""
    out = bytearray()
    for p in pieces:
        if p:
            out += b"%x\r\n" % len(p) + p + b"\r\n"
    out += b"0\r\n" + trailers + b"\r\n"
    return bytes(out)


def vmrss_kib(pid):
    """A process's resident set size in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def debian_module(name):
    """A module of Debian's python3-* packages (their dist-packages added
    when another Python runs the tests), or None when it is not
    installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if "/usr/lib/python3/dist-packages" not in sys.path:
            sys.path.append("/usr/lib/python3/dist-packages")
        try:
            return importlib.import_module(name)
        except ImportError:
            return None


def h2_requests(sock, paths, conn=None):
    """GETs of `paths`, all sent at once as streams of one cleartext
    HTTP/2 connection on `sock` (prior knowledge), with Debian's
    python3-h2 as the client; [(status, body)] in the order of `paths`.
    `conn`: an h2 H2Connection already set up on `sock` (its preface
    sent), so that several batches share a connection; by default one is
    made, with 16 MiB windows. Raises Skip without python3-h2."""
    events = debian_module("h2.events")
    if events is None:
        raise Skip("python3-h2 not installed")
    if conn is None:
        conn = h2_connection(sock)
    order, status, bodies = [], {}, {}
    for path in paths:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "GET"), (":path", path),
                                (":scheme", "http"),
                                (":authority", "127.0.0.1")],
                          end_stream=True)
        order.append(sid)
        bodies[sid] = bytearray()
    sock.sendall(conn.data_to_send())
    ended = 0
    while ended < len(order):
        data = sock.recv(1 << 20)
        if not data:
            raise AssertionError("connection closed after %d of %d answers"
                                 % (ended, len(order)))
        for ev in conn.receive_data(data):
            if isinstance(ev, events.ResponseReceived):
                status[ev.stream_id] = int(dict(ev.headers)[b":status"])
            elif isinstance(ev, events.DataReceived):
                bodies[ev.stream_id] += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length,
                                               ev.stream_id)
            elif isinstance(ev, events.StreamEnded):
                ended += 1
            elif isinstance(ev, events.StreamReset):
                raise AssertionError("stream %d reset" % ev.stream_id)
        sock.sendall(conn.data_to_send())
    return [(status.get(sid), bytes(bodies[sid])) for sid in order]


def h2_connection(sock):
    """An h2 client connection on `sock` with 16 MiB windows, its preface
    sent (see h2_requests)."""
    h2c = debian_module("h2.connection")
    if h2c is None:
        raise Skip("python3-h2 not installed")
    config, settings = debian_module("h2.config"), debian_module("h2.settings")
    conn = h2c.H2Connection(config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.update_settings(
        {settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
    conn.increment_flow_control_window(1 << 24)
    sock.sendall(conn.data_to_send())
    return conn


def websockets_module():
    """Debian's python3-websockets, or None when it is not installed."""
    return debian_module("websockets")


def stats_from(conn):
    """GET /stats on an open keep-alive connection; a dict of ints."""
    import json
    r = conn.request("GET", "/stats")
    if r.status != 200:
        raise AssertionError("/stats gave %d" % r.status)
    return json.loads(r.body)


# ---------------------------------------------------------------------------
# Assertions with useful messages


def eq(got, want, what=""):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what or "value",
                                                      got, want))


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


class Skip(Exception):
    """Raised by a case that cannot apply here; reported as TAP SKIP."""


def self_signed(directory, name="cert", sans="DNS:localhost"):
    """A self-signed P-256 certificate for localhost (subjectAltName
    `sans`), made with openssl in `directory`: (cert path, key path)."""
    cert = os.path.join(directory, name + ".crt")
    key = os.path.join(directory, name + ".key")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                    "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-subj", "/CN=localhost",
                    "-keyout", key, "-out", cert,
                    "-addext", "subjectAltName=" + sans],
                   check=True, capture_output=True)
    return cert, key


def sanitized():
    """True in the AddressSanitizer build, where tern's free lists are off
    by design (so that a use after free is seen), and allocation counts say
    nothing about the pools."""
    return os.environ.get("TERN_SANITIZE", "none") not in ("", "none")


# ---------------------------------------------------------------------------
# TAP runner


class Suite:
    """Collects cases; main() runs them as TAP."""

    def __init__(self):
        self.cases = []
        self.notes = []

    def case(self, fn=None, *, timeout=20.0, name=None):
        def wrap(f):
            self.cases.append((name or f.__name__, f, timeout))
            return f
        if fn is not None:
            return wrap(fn)
        return wrap

    def note(self, msg):
        """A diagnostic line printed under the current case's result."""
        self.notes.append(str(msg))

    def _run_one(self, fn, timeout):
        result = {}

        def target():
            try:
                fn()
                result["ok"] = True
            except Skip as e:
                result["ok"] = True
                result["skip"] = str(e)
            except BaseException as e:  # noqa: B902 (report everything)
                result["ok"] = False
                result["error"] = "".join(
                    traceback.format_exception(type(e), e, e.__traceback__))
        t = threading.Thread(target=target, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            return False, "case timed out after %.0f s" % timeout
        self.skip_reason = result.get("skip")
        return result.get("ok", False), result.get("error", "")

    def main(self, setup=None, teardown=None):
        """setup() may start shared servers (they are checked after every
        case); teardown() stops them and may fail the run."""
        only = set(sys.argv[1:])
        cases = [c for c in self.cases if not only or c[0] in only]
        failed = 0
        t_start = time.monotonic()
        if setup is not None:
            try:
                setup()
            except BaseException:
                print("Bail out! setup failed")
                for line in traceback.format_exc().splitlines():
                    print("# " + line)
                sys.stdout.flush()
                os._exit(1)
        n = 0
        for name, fn, timeout in cases:
            n += 1
            self.notes = []
            t0 = time.monotonic()
            ok, err = self._run_one(fn, timeout)
            took = time.monotonic() - t0
            servers_err = ""
            for srv in live_servers():
                try:
                    srv.check_alive()
                except BaseException as e:
                    ok = False
                    servers_err += "after the case, %s on port %s: %s\n" % (
                        srv.name, srv.port, e)
                    if not srv.alive():
                        srv._unregister()  # reported once, not every case
            skip = getattr(self, "skip_reason", None)
            self.skip_reason = None
            if ok and skip is not None:
                print("ok %d - %s # SKIP %s" % (n, name, skip))
            else:
                print("%s %d - %s" % ("ok" if ok else "not ok", n, name))
            for line in self.notes:
                print("# " + line)
            if not ok:
                failed += 1
                for line in (err.rstrip() + "\n" +
                             servers_err).strip().splitlines():
                    print("# " + line)
                for srv in live_servers():
                    tail = srv.stderr_text(800).strip()
                    if tail:
                        print("# %s stderr: %s" % (srv.name,
                                                   tail.replace("\n", " | ")))
            print("# %s: %.2f s" % (name, took))
            sys.stdout.flush()
        if teardown is not None:
            try:
                teardown()
            except BaseException:
                n += 1
                failed += 1
                print("not ok %d - teardown" % n)
                for line in traceback.format_exc().splitlines():
                    print("# " + line)
        for srv in live_servers():
            srv.kill()
        print("1..%d" % n)
        print("# %d failed, %.1f s" % (failed, time.monotonic() - t_start))
        sys.stdout.flush()
        os._exit(1 if failed else 0)


def shared_reference_teardown(srv):
    """Stop a shared reference server: it must exit 0 on SIGTERM."""
    rc = srv.stop()
    if rc != 0:
        raise AssertionError("reference exited with %s; stderr: %s"
                             % (rc, srv.stderr_text()))
