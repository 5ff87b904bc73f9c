"""perf gate: the CI gate on figures that are stable on a noisy machine.

  allocations and bytes per request (per message, per connection): tern's
    own counters (the reference server's /stats) over a fixed COUNT after
    a warm-up, and the LD_PRELOAD shim's counts over the same window (the
    shim sees every malloc of the process: libuv's, libc's, the
    handler's).  The /stats
    requests ride on a warm keep-alive connection, so the window holds
    exactly the measured work plus one keep-alive /stats request (0
    allocations, itself gated by h1-get); tern's figures are divided by
    COUNT, or by COUNT + 1 where /stats needs a fresh connection:
      h1-get        N requests one at a time
      h1-pipelined  N requests in batches of 16 back-to-back requests
      app-routed    N routed requests (path parameter + header)
      conn-churn    C connections, one request each (per connection)
      ws-echo       N messages on one WebSocket to /ws (plain, no
                    permessage-deflate; per message): binary, 128 bytes, in
                    batches of 8 in flight, every echo read back and
                    compared byte for byte (a mismatch is an error); /stats
                    on a separate keep-alive HTTP connection
      h3-get        HTTP/3 (a second reference, --quic-port): h3load --requests
                    W twice, then --requests W and --requests W + N (1
                    connection x 8 streams, every response checked), each
                    a QUIC connection of its own; per request = (window 2
                    - window 1) / N, which cancels the handshake, the
                    connection and its graceful close
  instructions per request (per message): valgrind --tool=callgrind on
    the reference server, four runs that differ only in the number of
    requests (messages)
    of one kind; the difference of the totals divided by the difference of
    the counts cancels start-up, warm-up and shutdown:
      I(base) = run(W warm-up, N1 GET /, N1 app-routed, N1 ws messages)
      h1-get     = (run(N2, N1, N1) - I(base)) / (N2 - N1)
      app-routed = (run(N1, N2, N1) - I(base)) / (N2 - N1)
      ws-echo    = (run(N1, N1, N2) - I(base)) / (N2 - N1)
    and two more on a reference server with --quic-port, each one h3load
    connection
    (1 x 8 streams) of N1 or N2 GET / over HTTP/3:
      h3-get     = (run(h3 N2) - run(h3 N1)) / (N2 - N1)
    and two on a reference server with --static and --tls-port, each one
    h2load connection (1 x 8 streams) of N1 or N2 GET /static/1k.txt over
    HTTP/2 + TLS (the handshake, the same in both, cancels):
      static-1k-h2 = (run(h2 N2) - run(h2 N1)) / (N2 - N1)
  static-1k-h2's allocations are counted the same way as h3-get's (two
  h2load connections of W and W + N requests, per request = the
  difference / N), from tern's /stats only: the shim would see GnuTLS's
  allocations per record received, whose count follows how h2load
  happens to batch its requests into records. Its bytes are not gated:
  the file cache's refresh once a second falls into one window or the
  other.

Tolerances live in the baseline (limit = baseline x (1 + rel) + abs):
allocations and bytes per request or message may not exceed the baseline
plus an absolute 0.01; per connection (not exactly repeatable: a pool may
grow once in a window) baseline x 1.02 + 0.01; instructions per request or
message may not exceed the baseline x 1.05.  Throughput is never gated.
"""

import json
import os
import re
import signal
import struct
import tempfile
import time

from . import common, h1client, loads, servers, tlsclient, wsclient
from .common import BenchError, SetupError, log
from .scenarios import APP_PATH, APP_HEADERS, HELLO, REGISTRY

ALLOC_TOL = {"abs": 0.01}
# per connection: not exactly repeatable (a pool may grow once in a window)
CONN_TOL = {"rel": 0.02, "abs": 0.01}
INSTR_TOL = {"rel": 0.05}
# h3-get-browser runs 4 x 32 requests in flight, whose peak of live
# blocks (packets in flight, ACK ranges, field buffers) depends on timing:
# on a loaded machine a window may reach a new peak and grow the worker's
# pools by some hundreds of blocks (measured up to 0.03 per request, 51
# bytes per request, in a CI run), kept and never freed.  What the gate
# wants to see is churn, blocks taken from malloc and given back each
# request, as the pools' old limits caused (0.35 allocations and as many
# frees per request): frees per request are gated tightly, allocations
# loosely (a leak or churn of one block in ten requests still fails), and
# bytes, which growth moves most, not at all.
H3_BROWSER_ALLOC_TOL = {"abs": 0.1}

# ws-echo: binary messages of WS_SIZE bytes, WS_DEPTH in flight
WS_SIZE = 128
WS_DEPTH = 8
# distinct payloads, sent in turn, so that an echo out of order differs
WS_PAYLOADS = [bytes((s * 37 + j) & 255 for j in range(WS_SIZE))
               for s in range(16)]


PRIME_CONNS = 16


def _prime(port, k):
    """Hold k keep-alive connections at once, each answered once."""
    conns = [h1client.Conn(port) for _ in range(k)]
    try:
        for c in conns:
            h1client.keepalive(c, 1)
    finally:
        for c in conns:
            c.close()


def _start_reference(binary, workdir, cpu, prefix=(), extra=()):
    out_path = os.path.join(workdir,
                            "reference-%d.out" % len(os.listdir(workdir)))
    argv = (["taskset", "-c", str(cpu)] if cpu is not None else []) + \
        list(prefix) + [binary, "--port", "0", "--workers", "1"] + list(extra)
    with open(out_path, "wb") as out:
        p = common.spawn(argv, stdout=out, cwd=workdir)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(out_path, "rb") as f:
                text = f.read()
        m = re.search(rb"(?m)^listening on (\d+)", text)
        q = re.search(rb"quic listening on (\d+)", text)
        t = re.search(rb"(?m)^tls listening on (\d+)", text)
        if m and (q or "--quic-port" not in extra) and \
                (t or "--tls-port" not in extra):
            return (p, int(m.group(1)), out_path,
                    int(q.group(1)) if q else None,
                    int(t.group(1)) if t else None)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    text = open(out_path, "rb").read()[-800:].decode("utf-8", "replace")
    common.stop_proc(p)
    raise BenchError("reference did not start: %s" % text)


def _window(srv, conn, fn, count, out, name, per="req", http=True):
    """Counters around fn(count): tern's /stats (on conn, or a fresh
    connection when conn is None) outside, the shim's inside.  http: fn
    makes count HTTP requests (else none, e.g. WebSocket messages)."""
    port = srv.port
    s0 = h1client.tern_stats(port, conn=conn)
    m0 = srv.shim_snapshot() if srv.shim else None
    bad = fn(count)
    m1 = srv.shim_snapshot() if srv.shim else None
    s1 = h1client.tern_stats(port, conn=conn)
    if bad:
        raise BenchError("%s: %d responses were not 200" % (name, bad))
    if conn is not None:
        reqs = s1["requests"] - s0["requests"]
        want = (count if http else 0) + 1
        if reqs != want:
            log("warning: %s: the server counted %d requests in a window of "
                "%s1" % (name, reqs, ("%d + " % count) if http else ""))
    # a fresh connection for the second /stats: one more in the window
    n_stats = count + (1 if conn is None else 0)
    out["%s.allocs_per_%s" % (name, per)] = (s1["allocations"] - s0["allocations"]) / n_stats
    out["%s.bytes_per_%s" % (name, per)] = (s1["bytes_allocated"] - s0["bytes_allocated"]) / n_stats
    if m0 is not None:
        out["%s.shim_allocs_per_%s" % (name, per)] = (m1["allocs"] - m0["allocs"]) / count
        out["%s.shim_bytes_per_%s" % (name, per)] = (m1["bytes"] - m0["bytes"]) / count


def _ws_frame(payload):
    """A masked binary frame (FIN) of payload, a fresh mask each."""
    n = len(payload)
    mask = os.urandom(4)
    head = struct.pack("!BB", 0x82, 0x80 | n) if n < 126 else \
        struct.pack("!BBH", 0x82, 0x80 | 126, n)
    key = (mask * (n // 4 + 1))[:n]
    body = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(
        n, "big")
    return head + mask + body


def ws_echo(ws, count, depth=WS_DEPTH, name="ws-echo"):
    """count binary messages of WS_SIZE bytes on ws, in batches of depth
    (each batch in one write); every echo must come back, in order, binary
    and byte for byte the message sent, else BenchError.  Returns 0 (the
    count of bad answers, as the HTTP clients do)."""
    k = 0
    while k < count:
        n = min(depth, count - k)
        ws.sock.sendall(b"".join(_ws_frame(WS_PAYLOADS[(k + i) % len(WS_PAYLOADS)])
                                 for i in range(n)))
        for i in range(k, k + n):
            op, got = ws.recv_message("%s: echo of message %d" % (name, i))
            want = WS_PAYLOADS[i % len(WS_PAYLOADS)]
            if op != 2 or got != want:
                raise BenchError(
                    "%s: message %d (binary, %d bytes %r...) came back as %s, "
                    "%d bytes %r..." % (name, i, len(want), want[:16],
                                        {1: "text", 2: "binary"}.get(op, op),
                                        len(got), got[:16]))
        k += n
    return 0


def ws_open(port, timeout=10.0, name="ws-echo"):
    """A plain WebSocket to the reference server's /ws (nothing offered,
    nothing answered)."""
    ws = wsclient.WsConn(port, "/ws", deflate=False, timeout=timeout)
    if ws.extension is not None:
        ws.close()
        raise BenchError("%s: the server answered extension %r to no offer"
                         % (name, ws.extension))
    return ws


def ws_close(ws, name="ws-echo"):
    """The closing handshake: Close 1000, and the server's Close back."""
    ws.send_frame(0x88, struct.pack("!H", 1000))
    op, _ = ws.recv_message("%s: answer to Close" % name)
    if op != "close":
        raise BenchError("%s: a data message instead of the Close answer" % name)
    ws.close()


def alloc_metrics(args, workdir):
    srv = servers.Server("tern",
                         [args.reference, "--port", "0", "--workers", "1"],
                         workdir, shim=args.shim_path)
    out = {}
    try:
        srv.start(args.server_cpu)
        n, w = args.requests, args.warmup_requests
        with h1client.Conn(srv.port) as c:
            # Each window right after its own warm-up: the worker's pools
            # give back what stayed unused through two trims (about 2 s),
            # so a window run seconds after its warm-up (the windows
            # before it took that long on a slow machine) saw the pools
            # grow again: one 16-request batch's objects, a few hundred
            # bytes over 20000 requests, failed h1-pipelined now and then.
            h1client.keepalive(c, w)
            _window(srv, c, lambda k: h1client.keepalive(c, k), n, out, "h1-get")
            h1client.pipelined(c, w)
            _window(srv, c, lambda k: h1client.pipelined(c, k, 16), n, out,
                    "h1-pipelined")
            h1client.keepalive(c, w, APP_PATH, APP_HEADERS)
            _window(srv, c, lambda k: h1client.keepalive(c, k, APP_PATH, APP_HEADERS),
                    n, out, "app-routed")
        # connections: one request each, a fresh connection every time. A
        # closing connection's object lives until the client's FIN has
        # been read, so on a busy machine a few overlap: the warm-up first
        # holds PRIME_CONNS connections at once, so that the pools already
        # hold what such an overlap takes and the window sees the steady
        # state rather than a pool growing by one connection.
        _prime(srv.port, PRIME_CONNS)
        h1client.churn(srv.port, min(w, 200))
        _window(srv, None, lambda k: h1client.churn(srv.port, k),
                args.connections, out, "conn-churn", per="conn")
        # WebSocket echo: /stats on a separate, warm keep-alive connection
        with h1client.Conn(srv.port) as c:
            h1client.keepalive(c, 16)
            ws = ws_open(srv.port)
            try:
                ws_echo(ws, w)
                h1client.tern_stats(srv.port, conn=c)
                _window(srv, c, lambda k: ws_echo(ws, k), n, out, "ws-echo",
                        per="msg", http=False)
                ws_close(ws)
            finally:
                ws.close()
    finally:
        srv.stop()
    return out


# h3-get: GET / over HTTP/3, h3load on one connection x H3_STREAMS
H3_STREAMS = 8
# connections before the windows: the second QUIC connection of a fresh
# reference server still grows a pool (measured: 8 blocks, 18 KiB more than the
# third); from the third on, a connection of N requests costs the same
H3_WARM_CONNS = 2
H3_SCENARIO = REGISTRY["h3-get"]


def _h3_args(args):
    """The h3-get part needs h3load (built with the http3 dependencies)."""
    h3load = os.path.join(args.load_dir, "h3load")
    if not common.which_exec(h3load):
        return "%s not built (meson found no ngtcp2/nghttp3?)" % h3load
    return None


def _h3_sc():
    sc = type("H3Gate", (), {})()
    sc.__dict__.update(H3_SCENARIO.__dict__)
    sc.clients, sc.streams = 1, H3_STREAMS
    return sc


# h3-get-browser's allocations: the scenario as perf/perf compare loads
# it (4 connections x 32 requests of the 16-field head in flight), whose
# peak of live nghttp3 field buffers once outgrew the worker's pools
H3_BROWSER_SCENARIO = REGISTRY["h3-get-browser"]


def _h3_count(args, workdir, port, n, timeout=120, sc=None):
    """h3load --requests n, on one connection unless sc says otherwise;
    every one must be a 200 with the exact body, or BenchError."""
    sc = sc or _h3_sc()
    res = loads.h3load_count(args, workdir, port, sc, n,
                             timeout=timeout, expect_body=HELLO)
    if res["requests"] != n or res["errors"] or res["exit_status"]:
        raise BenchError("%s: h3load --requests %d got %d responses, %d "
                         "errors %s (exit %s): %s" % (
                             sc.name, n, res["requests"], res["errors"],
                             res["socket_errors"], res["exit_status"],
                             res["output"][-300:]))
    return res


def _quic_extra(workdir):
    mat = tlsclient.material(workdir)
    return ["--tls-port", "0", "--cert", mat["cert"], "--key", mat["key"],
            "--quic-port", "0"]


def _two_windows(srv, run, w, n, warm, name):
    """Counters around run(w) and run(w + n), after `warm` runs of w:
    tern's /stats (on a keep-alive HTTP/1.1 connection) outside, the
    shim's inside; [(s0, s1, m0, m1)] for each window (m None without the
    shim). Logs when the server counted other than each window's requests
    plus the /stats that closes it."""
    with h1client.Conn(srv.port) as c:
        h1client.keepalive(c, 16)
        for _ in range(warm):  # pools, caches
            run(w)
        marks = []
        for k in (w, w + n):
            s0 = h1client.tern_stats(srv.port, conn=c)
            m0 = srv.shim_snapshot() if srv.shim else None
            run(k)
            m1 = srv.shim_snapshot() if srv.shim else None
            s1 = h1client.tern_stats(srv.port, conn=c)
            marks.append((s0, s1, m0, m1))
    for (s0, s1, _, _), k in zip(marks, (w, w + n)):
        if s1["requests"] - s0["requests"] != k + 1:
            log("warning: %s: the server counted %d requests in a window "
                "of %d + 1" % (name, s1["requests"] - s0["requests"], k))
    return marks


def h3_alloc_metrics(args, workdir, out, name="h3-get", sc=None,
                     churn=False):
    """h3-get's allocations per request (or those of sc, named name):
    three h3load runs on a reference server with --quic-port (under the
    shim), the
    counters read between them on a keep-alive HTTP/1.1 connection; per
    request = the difference of the last two windows / their difference
    in requests.  churn: allocations and frees per request instead of
    allocations and bytes (H3_BROWSER_ALLOC_TOL says why)."""
    srv = servers.Server("tern",
                         [args.reference, "--port", "0", "--workers", "1"]
                         + _quic_extra(workdir), workdir, shim=args.shim_path,
                         read_tls_port=True, read_quic_port=True)
    w, n = args.warmup_requests, args.requests
    try:
        srv.start(args.server_cpu)
        marks = _two_windows(
            srv, lambda k: _h3_count(args, workdir, srv.quic_port, k, sc=sc),
            w, n, H3_WARM_CONNS, name)
    finally:
        srv.stop()

    def d(i, key, shim):
        a, b = (marks[i][2], marks[i][3]) if shim else (marks[i][0], marks[i][1])
        return b[key] - a[key]

    second = ("frees", "frees") if churn else ("bytes_allocated", "bytes")
    out[name + ".allocs_per_req"] = (d(1, "allocations", False)
                                     - d(0, "allocations", False)) / n
    out["%s.%s_per_req" % (name, second[1])] = (
        d(1, second[0], False) - d(0, second[0], False)) / n
    if srv.shim:
        out[name + ".shim_allocs_per_req"] = (d(1, "allocs", True)
                                              - d(0, "allocs", True)) / n
        out["%s.shim_%s_per_req" % (name, second[1])] = (
            d(1, second[1], True) - d(0, second[1], True)) / n


# static-1k-h2: the file handler's 1 KiB file over HTTP/2 + TLS, h2load on
# one connection x STATIC_H2_STREAMS (issue 33: the perf gate covers it)
STATIC_H2_SCENARIO = REGISTRY["static-1k-h2"]
STATIC_H2_STREAMS = 8


def _static_extra(workdir):
    mat = tlsclient.material(workdir)
    return ["--static", servers.static_root(workdir), "--tls-port", "0",
            "--cert", mat["cert"], "--key", mat["key"]]


def _h2load_count(args, port, n, timeout=120):
    """h2load -n n of static-1k-h2's path on one connection x
    STATIC_H2_STREAMS: every response must be a 2xx carrying the file's
    length (h2load's data bytes), else BenchError."""
    sc = STATIC_H2_SCENARIO
    argv = ["taskset", "-c", str(args.client_cpu), args.h2load, "-n", str(n),
            "-c", "1", "-m", str(STATIC_H2_STREAMS), "-t", "1",
            "https://127.0.0.1:%d%s" % (port, sc.path)]
    rc, text = common.run_bounded(argv, timeout)
    r = loads.parse_h2load(text)
    st = r.get("status") or {}
    data = r.get("data_bytes")
    if rc != 0 or r.get("succeeded") != n or st.get("2xx") != n or \
            data != n * len(sc.body):
        raise BenchError("static-1k-h2: h2load -n %d: exit %s, %s succeeded, "
                         "status %s, %s data bytes (want %d): %s" % (
                             n, rc, r.get("succeeded"), st, data,
                             n * len(sc.body), text[-300:]))
    return r


def static_h2_alloc_metrics(args, workdir, out):
    """static-1k-h2's allocations per request from tern's /stats (not
    bytes: see below): two
    h2load connections of W and W + N requests after two warm ones, the
    counters read around each on a keep-alive HTTP/1.1 connection; per
    request = the difference of the two windows / N."""
    srv = servers.Server("tern",
                         [args.reference, "--port", "0", "--workers", "1"]
                         + _static_extra(workdir), workdir,
                         shim=args.shim_path, read_tls_port=True)
    w, n = args.warmup_requests, args.requests
    try:
        srv.start(args.server_cpu)
        # two warm connections: pools, the file cache, TLS session state
        marks = _two_windows(
            srv, lambda k: _h2load_count(args, srv.tls_port, k), w, n, 2,
            "static-1k-h2")
    finally:
        srv.stop()
    # Allocations only: the file cache refreshes its entry once a second (a
    # trip to the pool that reads the file again: 2 blocks, 6 KiB, in
    # tern's counters), and a window sees one refresh more than the other
    # by chance, or several on a busy machine whose windows last seconds.
    # In blocks that stays below the limit (0.0009 per request when a busy
    # machine put nine more refreshes into one window); in bytes it would
    # not (2.47 per request then).
    d = [s1["allocations"] - s0["allocations"] for s0, s1, _, _ in marks]
    out["static-1k-h2.allocs_per_req"] = (d[1] - d[0]) / n


def _static_h2_args(args):
    """static-1k-h2 needs h2load (nghttp2-client)."""
    if not common.which_exec(args.h2load) and not _which(args.h2load):
        return "%s not installed (nghttp2-client)" % args.h2load
    return None


def callgrind_static_h2_run(args, workdir, n, tag):
    """The reference server (--static, --tls-port) under callgrind, one
    h2load connection of n GET /static/1k.txt; the instructions in
    total."""
    def drive(ports):
        _h2load_count(args, ports[3], n, timeout=300)
    return _under_callgrind(args, workdir, tag, drive, _static_extra(workdir))


def _callgrind_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise BenchError("no totals in %s" % path)


def _under_callgrind(args, workdir, tag, drive, extra=()):
    """The reference server (with `extra` arguments) under callgrind:
    drive(ports) sends the traffic, where ports is what _start_reference
    found after the process; then the server is stopped and its
    instructions in total returned."""
    cg_out = os.path.join(workdir, "callgrind.%s.out" % tag)
    prefix = [args.valgrind, "--tool=callgrind", "--callgrind-out-file=" + cg_out,
              "--dump-instr=no", "--dump-line=no"]
    started = _start_reference(args.reference, workdir, args.server_cpu,
                               prefix, extra)
    p = started[0]
    try:
        drive(started[1:])
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(60)
        except Exception:
            raise BenchError("reference under callgrind did not stop")
    finally:
        common.stop_proc(p)
    return _callgrind_total(cg_out)


def callgrind_h3_run(args, workdir, n, tag):
    """The reference server (--quic-port) under callgrind, one h3load
    connection of n
    GET / over HTTP/3; the instructions in total."""
    def drive(ports):
        _h3_count(args, workdir, ports[2], n, timeout=300)
    return _under_callgrind(args, workdir, tag, drive, _quic_extra(workdir))


def callgrind_run(args, workdir, n_get, n_app, n_ws, tag):
    def drive(ports):
        port = ports[0]
        w = args.callgrind_warmup
        with h1client.Conn(port, timeout=60) as c:
            h1client.keepalive(c, w)
            h1client.keepalive(c, w, APP_PATH, APP_HEADERS)
            bad = h1client.keepalive(c, n_get)
            bad += h1client.keepalive(c, n_app, APP_PATH, APP_HEADERS)
        if bad:
            raise BenchError("%d responses were not 200 under callgrind" % bad)
        ws = ws_open(port, timeout=60)
        try:
            ws_echo(ws, w)
            ws_echo(ws, n_ws)
            ws_close(ws)
        finally:
            ws.close()
    return _under_callgrind(args, workdir, tag, drive)


def instr_metrics(args, workdir):
    n1, n2 = args.callgrind_n1, args.callgrind_n2
    base = callgrind_run(args, workdir, n1, n1, n1, "base")
    get = callgrind_run(args, workdir, n2, n1, n1, "get")
    app = callgrind_run(args, workdir, n1, n2, n1, "app")
    ws = callgrind_run(args, workdir, n1, n1, n2, "ws")
    return {"h1-get.instructions_per_req": (get - base) / (n2 - n1),
            "app-routed.instructions_per_req": (app - base) / (n2 - n1),
            "ws-echo.instructions_per_msg": (ws - base) / (n2 - n1)}, \
        {"base": base, "get": get, "app": app, "ws": ws}


def tolerance_for(key):
    if key.endswith(("instructions_per_req", "instructions_per_msg")):
        return INSTR_TOL
    if key.startswith("h3-get-browser.") and key.endswith("allocs_per_req"):
        return H3_BROWSER_ALLOC_TOL
    if key.endswith("_per_conn"):
        return CONN_TOL
    return ALLOC_TOL


def limit(entry):
    """baseline x (1 + rel) + abs"""
    v, tol = entry["value"], entry.get("tolerance", {})
    return v * (1 + tol.get("rel", 0.0)) + tol.get("abs", 0.0)


def run_gate(args):
    if not common.which_exec(args.reference):
        raise SetupError("%s not built (ninja -C build)" % args.reference)
    if not args.update and _load(args.baseline) is None:
        raise SetupError("no baseline at %s (run with --update)" % args.baseline)
    workdir = tempfile.mkdtemp(prefix="perf-gate.")
    t0 = time.monotonic()
    try:
        log("allocation counts: %d warm-up + %d requests (messages) per "
            "window on %s%s" % (
            args.warmup_requests, args.requests, args.reference,
            " (and the shim)" if args.shim_path else ""))
        if not args.shim_path and not args.no_shim:
            raise SetupError("the allocation shim is not built (ninja -C build); "
                             "--no-shim checks tern's own counters only")
        cur = alloc_metrics(args, workdir)
        h3_why = _h3_args(args)
        if h3_why:
            log("h3-get: skipped (%s)" % h3_why)
        else:
            h3_alloc_metrics(args, workdir, cur)
            h3_alloc_metrics(args, workdir, cur, "h3-get-browser",
                             H3_BROWSER_SCENARIO, churn=True)
        h2_why = _static_h2_args(args)
        if h2_why:
            log("static-1k-h2: skipped (%s)" % h2_why)
        else:
            static_h2_alloc_metrics(args, workdir, cur)
        raw = None
        if args.no_callgrind:
            log("instructions: skipped (--no-callgrind)")
        else:
            if not common.which_exec(args.valgrind) and not _which(args.valgrind):
                raise SetupError("valgrind not installed (perf/perf setup)")
            log("instructions: 4 callgrind runs (%d / %d requests or "
                "messages)" % (
                args.callgrind_n1, args.callgrind_n2))
            m, raw = instr_metrics(args, workdir)
            cur.update(m)
            if not h3_why:
                n1, n2 = args.callgrind_n1, args.callgrind_n2
                log("instructions: 2 callgrind runs of h3-get (%d / %d "
                    "requests)" % (n1, n2))
                raw["h3_base"] = callgrind_h3_run(args, workdir, n1, "h3base")
                raw["h3_get"] = callgrind_h3_run(args, workdir, n2, "h3get")
                cur["h3-get.instructions_per_req"] = (
                    raw["h3_get"] - raw["h3_base"]) / (n2 - n1)
            if not h2_why:
                n1, n2 = args.callgrind_n1, args.callgrind_n2
                log("instructions: 2 callgrind runs of static-1k-h2 (%d / %d "
                    "requests)" % (n1, n2))
                raw["static_h2_base"] = callgrind_static_h2_run(
                    args, workdir, n1, "static-h2-base")
                raw["static_h2"] = callgrind_static_h2_run(
                    args, workdir, n2, "static-h2")
                cur["static-1k-h2.instructions_per_req"] = (
                    raw["static_h2"] - raw["static_h2_base"]) / (n2 - n1)
    finally:
        common.stop_all()
        import shutil
        if not os.environ.get("TERN_GATE_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - t0
    env = common.machine()
    env["valgrind"] = common.first_line([args.valgrind, "--version"])
    # the revision of the tree the measured reference server was built from
    rc, top = common.cmd_output(["git", "-C", os.path.dirname(args.reference),
                                 "rev-parse", "--show-toplevel"])
    if rc == 0 and top:
        env["git_revision"] = common.git_revision(top)
        env["reference"] = os.path.relpath(args.reference, top)
    else:
        env["reference"] = args.reference

    if args.update:
        metrics = {}
        for k, v in sorted(cur.items()):
            tol = tolerance_for(k)
            metrics[k] = {"value": round(v, 4), "tolerance": tol}
        doc = {
            "comment": "perf/perf gate baseline: allocations and bytes per request "
                       "(per WebSocket message for ws-echo) from tern's /stats and "
                       "from the LD_PRELOAD shim over a fixed count of requests, "
                       "instructions per request (message) from callgrind; "
                       "limit = value x (1 + rel) + abs. Rewrite with "
                       "`perf/perf gate --update` after an intended change.",
            "environment": env,
            "config": _config(args),
            "metrics": metrics,
        }
        if raw:
            doc["callgrind_totals"] = raw
        with open(args.baseline, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=False)
            f.write("\n")
        _print_table(cur, {"metrics": metrics})
        print("baseline written to %s (%.0f s)" % (args.baseline, elapsed))
        return 0

    base = _load(args.baseline)
    if base is None:
        raise SetupError("no baseline at %s (run with --update)" % args.baseline)
    if base.get("config") and base["config"] != _config(args):
        print("note: the baseline was measured with %s, now %s" % (
            base["config"], _config(args)))
    bad = _print_table(cur, base)
    if base.get("environment", {}).get("compiler") != env["compiler"]:
        print("note: baseline compiler %r, now %r: instruction counts may move"
              % (base.get("environment", {}).get("compiler"), env["compiler"]))
    if bad:
        print("perf gate: FAIL (%d regression(s): %s) in %.0f s" % (
            len(bad), ", ".join(bad), elapsed))
        return 1
    print("perf gate: PASS in %.0f s" % elapsed)
    return 0


def _which(x):
    import shutil
    return shutil.which(x)


def _config(args):
    return {"warmup_requests": args.warmup_requests, "requests": args.requests,
            "connections": args.connections,
            "callgrind_warmup": args.callgrind_warmup,
            "callgrind_n1": args.callgrind_n1, "callgrind_n2": args.callgrind_n2,
            "ws_message": "binary, %d B, %d in flight" % (WS_SIZE, WS_DEPTH),
            "h3_get": "h3load --conns 1 --streams %d --requests N" % H3_STREAMS,
            "h3_get_browser": "h3load --conns %d --streams %d, the browser "
                              "head, --requests N" % (
                                  H3_BROWSER_SCENARIO.clients,
                                  H3_BROWSER_SCENARIO.streams),
            "static_1k_h2": "h2load -c 1 -m %d -n N %s over TLS, "
                            "--static" % (STATIC_H2_STREAMS,
                                          STATIC_H2_SCENARIO.path),
            "reference": "build/examples/reference --workers 1"}


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _print_table(cur, base):
    bm = base.get("metrics", {})
    rows = []
    bad = []
    for k in sorted(set(cur) | set(bm)):
        c = cur.get(k)
        b = bm.get(k)
        if b is None:
            rows.append((k, "-", _f(c), "-", "new (not in the baseline)"))
            continue
        if c is None:
            rows.append((k, _f(b["value"]), "-", _f(limit(b)),
                         "not measured (skipped by option)"))
            continue
        lim = limit(b)
        if c > lim + 1e-9:
            verdict = "REGRESSION"
            bad.append(k)
        elif c < b["value"] - max(abs(b["value"]) * 0.02, 0.005):
            verdict = "improved (consider --update)"
        else:
            verdict = "ok"
        moved = c - b["value"]
        rows.append((k, _f(b["value"]), _f(c), _f(lim),
                     "%s (%+.4g%s)" % (verdict, moved, (
                         ", %+.2f%%" % (moved * 100 / b["value"]) if b["value"] else ""))))
    w = [max(len(r[i]) for r in rows + [("metric", "baseline", "now", "limit", "")])
         for i in range(4)]
    print("%-*s  %*s  %*s  %*s  %s" % (w[0], "metric", w[1], "baseline", w[2],
                                       "now", w[3], "limit", "verdict"))
    for r in rows:
        print("%-*s  %*s  %*s  %*s  %s" % (w[0], r[0], w[1], r[1], w[2], r[2],
                                           w[3], r[3], r[4]))
    return bad


def _f(v):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return "%.1f" % v
    return "%.4f" % v
