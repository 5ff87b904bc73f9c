"""One measurement: a fresh server process, one scenario.

  start the server (pinned, under the shim when there is one)
  check one response (status and exact body) -- else the row is invalid
  warm up with the scenario's own load
  snapshot: tern's /stats, the shim's counters, the server's CPU ticks
  the measured load
  snapshot again; peak RSS (VmHWM summed over the server's processes)
  stop the server

idle-conns instead samples the server's RSS and descriptors while the idle
client holds its connections.
"""

import os
import re
import threading
import time

from . import (balance, common, dbserver, h1client, loads, servers,
               tlsclient, wsclient)
from .common import BenchError
from .scenarios import RESUME_MIN
from .summary import CLIENT_BOUND

MIB = float(1 << 20)
# h3load's --drain on the rtt50 rows: long enough for an upload begun at
# the end of the window to finish at a pinned window's 1.3 MiB/s, so
# that every upload is answered (an unanswered one is an error)
RTT50_DRAIN = 30


def _per(x, n):
    return x / n if n else None


def _snapshot(srv, is_tern):
    snap = {"ticks": common.cpu_ticks(srv.pids()), "t": time.monotonic(),
            "times": os.times()}
    return snap


def _counters(srv, is_tern):
    """(tern /stats or None, shim totals or None)."""
    st = h1client.tern_stats(srv.port) if is_tern else None
    sh = srv.shim_snapshot() if srv.shim else None
    return st, sh


def _alloc_fields(row, st0, st1, sh0, sh1, n):
    if st0 is not None and st1 is not None:
        row["allocs_per_req"] = _per(st1["allocations"] - st0["allocations"], n)
        row["bytes_per_req"] = _per(st1["bytes_allocated"] - st0["bytes_allocated"], n)
        row["server_requests"] = st1["requests"] - st0["requests"]
        row["server_connections"] = st1["connections"] - st0["connections"]
        if "bytes_in" in st1 and "bytes_in" in st0:
            row["server_bytes_in"] = st1["bytes_in"] - st0["bytes_in"]
    if sh0 is not None and sh1 is not None:
        row["shim_allocs_per_req"] = _per(sh1["allocs"] - sh0["allocs"], n)
        row["shim_bytes_per_req"] = _per(sh1["bytes"] - sh0["bytes"], n)
        row["shim_processes"] = sh1["processes"]


# The reference server's upload handler (examples/reference/reference.c,
# upload()) counts the body in a uint64_t of its own, allocated with calloc
# per upload: the shim sees it, tern's allocator hook does not.
# (allocations, bytes) per request.
REFERENCE_UPLOAD_ALLOCS = (1, 8)


def agreement(row, app=(0, 0)):
    """tern's own counters and the shim's must agree within 1% (with an
    absolute floor of 1 byte and of 0.01 allocations per request, or two
    allocations in the window where it has fewer than 200 requests: the
    two counters are read at slightly different times around the /stats
    requests), once the application's own allocations per request (app:
    allocations, bytes; made with the C library, outside tern's hook) are
    added to tern's."""
    out = []
    n = row.get("requests") or 0
    for own, shim, floor, extra in (
            ("allocs_per_req", "shim_allocs_per_req",
             max(0.01, 2.0 / n) if n else 0.01, app[0]),
            ("bytes_per_req", "shim_bytes_per_req", 1.0, app[1])):
        a, b = row.get(own), row.get(shim)
        if a is None or b is None:
            continue
        if abs(a + extra - b) > max(0.01 * max(abs(a + extra), abs(b)),
                                    floor):
            out.append("tern /stats %s %.4g%s vs shim %.4g: disagree by "
                       "more than 1%%" % (
                           own, a, " (+ %g of the application's own)" % extra
                           if extra else "", b))
    return out


def measure(args, workdir, name, sc, shim):
    """Returns a row dict; never raises BenchError (it becomes invalid)."""
    row = {"server": name, "scenario": sc.name, "status": "ok",
           "problems": [], "notes": []}
    spec = servers.SERVERS[name]
    if sc.name in spec.unsupported or (
            sc.name.startswith("h1-get-c") and "h1-get" in spec.unsupported):
        row["status"] = "n/a"
        row["problems"].append("%s cannot answer %s correctly (%s)" % (
            name, sc.name, spec.note))
        return row
    why = servers.not_applicable(name, sc)
    if why:
        row["status"] = "n/a"
        row["problems"].append(why)
        return row
    why = servers.available(args, name)
    if why:
        row["status"] = "invalid"
        row["problems"].append("not available: " + why)
        return row
    srv = None
    redis = db_relay = None
    try:
        quic = sc.protocol in ("h3", "ws-h3")
        db = None
        if sc.protocol == "db":
            # Redis for this row alone; db-slow reaches it over TCP
            # through the relay
            redis = dbserver.Redis(workdir, args.server_cpu,
                                   tcp=bool(sc.db_slow_ms))
            row["redis_argv"] = redis.argv
            at = redis.path
            if sc.db_slow_ms:
                db_relay = loads.Relay(args, workdir, redis.tcp_port,
                                       sc.db_slow_ms, udp=False)
                at = "127.0.0.1:%d" % db_relay.port
                row["db_relay"] = {"argv": db_relay.argv}
            db = (at, sc.connections)
        srv = servers.start(name, args, workdir, args.server_cpu,
                            max_conns=sc.max_conns and args.idle_max_conns,
                            shim=shim, tls=sc.tls and not quic,
                            h2c=sc.protocol == "h2c", quic=quic,
                            server_args=sc.server_args, db=db,
                            workers=sc.workers)
        if redis is not None:
            srv.companions = [redis.pid]
        row["port"] = srv.port
        if sc.tls:
            row["tls_port"] = srv.tls_port
        if sc.protocol == "h2c":
            row["h2c_port"] = srv.h2c_port
        if quic:
            row["quic_port"] = srv.quic_port
        row["server_argv"] = srv.argv
        try:
            if sc.protocol == "h3":
                upload = tlsclient.upload_file(workdir, sc.upload) \
                    if sc.upload else None
                row["check"] = tlsclient.gtls_check(
                    srv.quic_port, sc, expected_body(name, sc), workdir,
                    upload_path=upload, gtlsclient=args.gtlsclient)
            elif sc.protocol == "ws-h3":
                row["check"] = _check_h3ws(args, workdir, srv, sc)
            elif sc.tls or sc.protocol == "h2c":
                _check_curl(workdir, srv, sc, row)
            elif sc.protocol == "ws":
                row["check"] = wsclient.check(srv.port, sc.path, sc.ws_deflate,
                                              sc.ws_size)
            elif getattr(sc, "json_items", None):
                h1client.check_json_list(srv.port, sc.path, sc.json_items)
            else:
                h1client.check(srv.port, sc.path, sc.headers, sc.body)
        except BenchError as e:
            raise BenchError("check failed: %s" % e)
        if sc.balance:
            balance.measure(args, workdir, srv, spec.kind, sc, row)
        elif sc.load == "idle":
            _measure_idle(args, workdir, srv, sc, row)
        else:
            _measure_load(args, workdir, srv, sc, row)
        if not srv.alive():
            raise BenchError("server exited during the run: %s" % srv.output_tail())
    except BenchError as e:
        row["status"] = "invalid"
        msg = str(e)
        if srv is not None and srv.proc is not None and srv.proc.poll() is not None \
                and "exited" not in msg:
            msg += " (the server had exited, status %s)" % srv.proc.returncode
        row["problems"].append(msg)
    finally:
        if srv is not None:
            srv.stop()
            if srv.strays:
                row["status"] = "invalid"
                row["problems"].append(
                    "%d server process(es) %s still running after SIGTERM "
                    "to the first one: killed" % (len(srv.strays),
                                                  srv.strays))
        if db_relay is not None:
            db_relay.stop()
        if redis is not None:
            redis.stop()
    return row


# ---------------------------------------------------------------------------
# starved connections: a server that serves fewer connections at once than
# the load opens (CivetWeb with one thread) leaves the others' requests
# unread, and wrk reports no error for them.  Two looks at the server's
# sockets (ss -ti) during the measured run: a connection whose
# bytes_received did not move between them was not served meanwhile.

def _ss_sample(port):
    rc, out = common.cmd_output(["ss", "-tnHi", "state", "established",
                                 "( sport = :%d )" % port], timeout=5)
    if rc != 0:
        return None
    socks, peer = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace():
            f = line.split()
            peer = f[3] if len(f) >= 4 else None
            if peer:
                socks[peer] = {"recvq": int(f[0]), "bytes": 0}
        elif peer:
            m = re.search(r"bytes_received:(\d+)", line)
            if m:
                socks[peer]["bytes"] = int(m.group(1))
    return socks


class StallProbe:
    def __init__(self, port, duration):
        self.port = port
        self.first = min(1.0, duration * 0.25)
        self.second = max(self.first + 0.5, duration * 0.9)
        self.samples = []
        self.t = threading.Thread(target=self._run, daemon=True)
        self.stop = threading.Event()

    def start(self):
        self.t0 = time.monotonic()
        self.t.start()
        return self

    def _run(self):
        for at in (self.first, self.second):
            if self.stop.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            self.samples.append((time.monotonic() - self.t0, _ss_sample(self.port)))

    def result(self):
        """(stalled, total, seconds) or None when it could not look."""
        self.stop.set()
        self.t.join(5)
        if len(self.samples) < 2 or None in (self.samples[0][1], self.samples[1][1]):
            return None
        (t1, a), (t2, b) = self.samples
        both = [p for p in a if p in b]
        stalled = [p for p in both if a[p]["bytes"] == b[p]["bytes"]]
        return len(stalled), len(both), t2 - t1


class ThreadProbe:
    """The server's thread count (/proc/PID/status Threads, all its
    processes, Redis not included), sampled every 0.2 s while the load
    runs; result() is the largest."""

    def __init__(self, srv):
        self.srv = srv
        self.peak = 0
        self.done = threading.Event()

    def start(self):
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        return self

    def _run(self):
        while not self.done.wait(0.2):
            n = 0
            for pid in self.srv.own_pids():
                try:
                    with open("/proc/%d/status" % pid) as f:
                        for line in f:
                            if line.startswith("Threads:"):
                                n += int(line.split()[1])
                                break
                except OSError:
                    pass
            self.peak = max(self.peak, n)

    def result(self):
        self.done.set()
        self.t.join(2)
        return self.peak or None


def expected_body(name, sc):
    """The exact body the check wants from server name."""
    if sc.upload:
        if servers.SERVERS[name].kind == "nghttpd":
            return servers.NGHTTPD_FILES["upload"]
        if servers.SERVERS[name].kind == "gtlsserver":
            return servers.GTLSSERVER_FILES["upload"]
        return str(sc.upload).encode()
    return sc.body


def _check_curl(workdir, srv, sc, row):
    """The check with curl: over TLS (HTTP/1.1 or h2 by ALPN) on the TLS
    port, or cleartext HTTP/2 with prior knowledge (h2c) on the h2c port."""
    upload = tlsclient.upload_file(workdir, sc.upload) if sc.upload else None
    kind = servers.SERVERS[srv.name].kind
    res = tlsclient.curl_check(_port(srv, sc), sc, expected_body(srv.name, sc),
                               workdir, upload_path=upload)
    row["check"] = res
    if sc.tls:
        row["tls"] = res["tls"]
    if not res["content_type_ok"]:
        if kind == "nghttpd":
            row["notes"].append("content-type %r (nghttpd types files by "
                                "extension; the body is exact)" % res["content_type"])
        else:
            raise BenchError("%s %s returned content-type %r" % (
                sc.method, sc.path, res["content_type"]))
    if sc.upload and kind == "nghttpd":
        row["notes"].append("nghttpd answers the upload with a static file "
                            "once the body has arrived (checked: curl sent "
                            "all %d bytes first); it cannot count them" % sc.upload)


def _check_h3ws(args, workdir, srv, sc):
    """One WebSocket over HTTP/3 opened and echoing (h3load --ws on one
    connection x 1 stream x 1 message in flight for a second: it checks
    the 200 to the extended CONNECT and every echo byte for byte; --ws
    runs by the clock only)."""
    one = type("One", (), {})()
    one.__dict__.update(sc.__dict__)
    one.clients = one.streams = 1
    one.ws_depth = 1
    res = loads.run_h3load(args, workdir, srv.quic_port, 1, 0, one)
    if not res["requests"] or res["errors"] or res["exit_status"]:
        raise BenchError("WebSocket over HTTP/3 on %s: h3load --ws for 1 s "
                         "on one socket got %d echoes, %d errors %s (exit "
                         "%s): %s" % (sc.path, res["requests"], res["errors"],
                                      res["socket_errors"],
                                      res["exit_status"],
                                      res["output"][-300:]))
    return {"tool": "h3load --ws --conns 1 --streams 1 --depth 1 "
                    "--duration 1", "echoes": res["requests"],
            "extension": res["raw"].get("extension")}


def _port(srv, sc):
    if sc.protocol in ("h3", "ws-h3"):
        return srv.quic_port
    if sc.protocol == "h2c":
        return srv.h2c_port
    return srv.tls_port if sc.tls else srv.port


def _run_load(args, workdir, srv, sc, duration, warmup_phase):
    if sc.load == "wrk":
        script = os.path.join(common.PERF_DIR, sc.script) if sc.script else None
        return loads.run_wrk(args, workdir, _port(srv, sc), duration,
                             sc.connections, sc.path, sc.headers, script,
                             tls=sc.tls)
    if sc.load == "h1rate":
        return loads.run_h1rate(args, workdir, srv.port, duration, 0,
                                args.rate, sc.connections, sc.path, sc.headers)
    if sc.load == "churn":
        return loads.run_churn(args, workdir, _port(srv, sc), duration, 0,
                               sc.connections, sc.path, tls=sc.tls,
                               resume=sc.tls_resume,
                               tls_max=getattr(args, "tls_max", None)
                               or sc.tls_max)
    raise ValueError(sc.load)


def _measure_load(args, workdir, srv, sc, row):
    # tern's counters come from /stats on its cleartext port; a server of
    # tern's without one (the Python server on TLS alone) is measured like
    # a peer, by the shim.
    is_tern = srv.name.startswith("tern") and srv.plain and \
        srv.port is not None
    h2 = sc.load == "h2load"
    ws = sc.load == "wsload"
    h3 = sc.load == "h3load"
    # the rtt50 rows: long enough for their pinned uploads to complete
    duration = max(args.duration, sc.min_duration or 0)
    if args.warmup > 0 and not (h2 or ws or h3):
        _run_load(args, workdir, srv, sc, args.warmup, True)
    snap = {}
    relay = None
    port = _port(srv, sc)
    if sc.relay_ms:
        relay = loads.Relay(args, workdir, port, sc.relay_ms,
                            udp=sc.protocol == "h3")
        port = relay.port
        row["relay"] = {"argv": relay.argv, "port": relay.port}

    def take(client_pid=None):
        # h2load warms up on its own connections and calls this when its
        # main duration starts: the counters cover the measured window
        snap["st0"], snap["sh0"] = _counters(srv, is_tern)
        snap["pids"] = srv.pids()
        snap["c0"] = common.cpu_ticks(snap["pids"])
        snap["comp0"] = common.cpu_ticks(getattr(srv, "companions", ()))
        snap["t0"] = time.monotonic()
        snap["client0"] = (common.cpu_ticks([client_pid]) / common.CLK_TCK
                           if client_pid else 0.0)
        if relay is not None:
            # the rtt50 rows: what the server received in exactly the
            # window, whatever the load generator does after it (h3load
            # waits for the uploads in flight: its --drain)
            snap["end"] = threading.Timer(duration, take_end)
            snap["end"].daemon = True
            snap["end"].start()

    def take_end():
        st = h1client.tern_stats(srv.port) if is_tern else None
        snap["window_end"] = {
            "stats": st, "t": time.monotonic(),
            "ticks": common.cpu_ticks(set(snap["pids"]) | set(srv.pids()))}

    r0 = os.times()
    stall = None
    if h2 or h3:
        try:
            if h2:
                upload = tlsclient.upload_file(workdir, sc.upload) \
                    if sc.upload else None
                res = loads.run_h2load(args, workdir, port, duration,
                                       args.warmup, sc.clients, sc.streams,
                                       sc.path, sc.headers, upload,
                                       on_measure_start=take, tls=sc.tls)
            else:
                # h3load warms up on the connections it measures, checks
                # every response (status and body; every echo with --ws)
                # and says when its window starts
                res = loads.run_h3load(
                    args, workdir, port, duration, args.warmup, sc,
                    expect_body=None if sc.protocol == "ws-h3"
                    else expected_body(srv.name, sc), on_measure_start=take,
                    drain=RTT50_DRAIN if sc.relay_ms else None)
        finally:
            if snap.get("end") is not None:
                # the load may end a moment before its window's timer
                # fires (h2load stops at its duration): wait for it
                snap["end"].join(duration + 10)
            if relay is not None:
                row["relay"]["summary"] = relay.stop()
    elif ws:
        # wsload warms up on the sockets it measures and says when the
        # window starts: the snapshots are taken then
        res = loads.run_wsload(args, workdir, srv.port, args.duration,
                               args.warmup, sc, on_measure_start=take)
    else:
        take()
        # (at a fixed rate, only when each connection is due often enough to
        # make progress between the two looks)
        probe = StallProbe(_port(srv, sc), args.duration).start() \
            if args.duration >= 2 and (sc.load == "wrk" or (
                sc.load == "h1rate" and args.rate / sc.connections
                * args.duration * 0.5 >= 10)) else None
        threads = ThreadProbe(srv).start() if sc.protocol == "db" else None
        try:
            res = _run_load(args, workdir, srv, sc, args.duration, False)
        finally:
            stall = probe.result() if probe else None
            if threads is not None:
                row["server_threads"] = threads.result()
    st0, sh0, pids, c0, t0 = (snap["st0"], snap["sh0"], snap["pids"],
                              snap["c0"], snap["t0"])
    pids2 = srv.pids()
    c1, t1, r1 = common.cpu_ticks(set(pids) | set(pids2)), time.monotonic(), os.times()
    sh1 = srv.shim_snapshot() if srv.shim else None
    st1 = h1client.tern_stats(srv.port) if is_tern else None
    wall = t1 - t0
    n = res["requests"]
    row["load"] = {k: v for k, v in res.items() if k not in ("raw",)}
    row["load_raw"] = res["raw"]
    row["requests"] = n
    row["errors"] = res["errors"]
    row["non2xx"] = res["non2xx"]
    row["rate"] = res["rate"]
    row["duration_s"] = res["duration_s"]
    if res.get("rate_target"):
        row["rate_target"] = res["rate_target"]
        if res["rate"] and res["rate"] < 0.95 * res["rate_target"]:
            row["notes"].append("rate not sustained: %.0f of %.0f req/s" % (
                res["rate"], res["rate_target"]))
    # wrk records one latency per pipelined batch, and its percentiles of
    # those come out wrong: no latency for such scenarios
    lat = (res.get("latency_us") or {}) if sc.latency else {}
    for k in ("p50", "p90", "p99", "p999", "max"):
        row["lat_" + k] = lat.get(k)
    row["server_cpu_s"] = (c1 - c0) / common.CLK_TCK
    row["server_cpu_util"] = row["server_cpu_s"] / wall if wall else None
    ccpu = ((r1.children_user - r0.children_user)
            + (r1.children_system - r0.children_system)) - snap["client0"]
    row["client_cpu_s"] = round(ccpu, 3)
    row["client_cpu_util"] = ccpu / wall if wall else None
    row["cpu_us_per_req"] = _per(row["server_cpu_s"] * 1e6, n)
    row["peak_rss"] = common.hwm_bytes(srv.own_pids())
    row["server_processes"] = len(pids2)
    comp = getattr(srv, "companions", ())
    if comp:
        # db-*: Redis's share of the server CPU above
        row["redis_cpu_s"] = (common.cpu_ticks(comp) - snap["comp0"]) \
            / common.CLK_TCK
        row["redis_cpu_us_per_req"] = _per(row["redis_cpu_s"] * 1e6, n)
    _alloc_fields(row, st0, st1, sh0, sh1, n)
    app = REFERENCE_UPLOAD_ALLOCS if sc.upload else (0, 0)
    if is_tern and sc.protocol == "db" and agreement(row, app):
        row["notes"].append(
            "shim %.4g allocs, %.4g bytes per request vs tern /stats %.4g, "
            "%.4g: the difference is hiredis's own (a command buffer and a "
            "reply object per query, and its libuv adapter), outside tern's "
            "allocator hook" % (
                row.get("shim_allocs_per_req") or 0,
                row.get("shim_bytes_per_req") or 0,
                row.get("allocs_per_req") or 0, row.get("bytes_per_req") or 0))
    elif srv.name == "tern-python":
        # the shim counts the interpreter's allocations too; /stats only
        # tern's (which the binding must leave at the reference server's)
        row["notes"].append(
            "shim %.4g allocs, %.4g bytes per request vs tern /stats %.4g, "
            "%.4g: the difference is Python's own (the interpreter, ctypes "
            "and the handler's objects)" % (
                row.get("shim_allocs_per_req") or 0,
                row.get("shim_bytes_per_req") or 0,
                row.get("allocs_per_req") or 0,
                row.get("bytes_per_req") or 0))
    elif is_tern and not sc.tls:
        row["notes"] += agreement(row, app)
    elif is_tern and agreement(row, app):
        # both engines allocate with the C library: the shim sees it,
        # tern's hook does not
        row["notes"].append(
            "shim %.4g allocs, %.4g bytes per %s vs tern /stats %.4g, "
            "%.4g: the difference is %s, outside tern's allocator hook" % (
                row.get("shim_allocs_per_req") or 0,
                row.get("shim_bytes_per_req") or 0, sc.per,
                row.get("allocs_per_req") or 0, row.get("bytes_per_req") or 0,
                "mbedTLS's own allocations (thousands of small blocks per "
                "handshake, its record buffers per connection)"
                if srv.name == "tern-mbedtls" else
                "what GnuTLS (QUIC's handshake and keys) and the reference "
                "server's upload handler allocate with the C library"
                if sc.protocol in ("h3", "ws-h3") else
                "the TLS engine's own allocations (GnuTLS: roughly 5 blocks "
                "of ~16.7 KiB per record received, and per handshake)"))
    if h2:
        _h2load_fields(row, res, sc)
    if h3:
        _h3load_fields(row, res, sc)
    if sc.relay_ms:
        _relay_fields(row, st0, c0, t0, snap.get("window_end"))
    if ws:
        _wsload_fields(row, res, sc)
    if sc.load == "churn" and sc.tls:
        _handshake_fields(row, res, sc)
    common.load_problems(row, res, n, (
        " (h2load: %s started, %s done in the measured window; the "
        "server answered nothing in %ss)" % (res.get("started"),
                                             res.get("done"), args.duration)
        if h2 else ""))
    if stall is not None:
        row["stalled_connections"] = stall[0]
        if stall[0]:
            row["problems"].append(
                "%d of %d connections were not served for %.1f s (starved: "
                "the server serves fewer connections at once than the load "
                "opens)" % stall)
    if res.get("dropped"):
        row["problems"].append("%d requests dropped (no connection)" % res["dropped"])
    if res.get("unfinished"):
        row["notes"].append("%d requests unanswered at the end (saturated)"
                            % res["unfinished"])
    if res.get("exit_status"):
        row["problems"].append("%s exited %s" % (res["tool"], res["exit_status"]))
    if row["problems"]:
        row["status"] = "invalid"


def _h2load_fields(row, res, sc):
    for k in ("total", "started", "done", "succeeded", "failed", "errored",
              "timeout", "status", "alpn", "tls_protocol", "cipher",
              "time_for_request"):
        row["h2load_" + k] = res.get(k)
    want = "h2" if sc.tls else "h2c"  # h2c: h2load's name for prior knowledge
    if res.get("alpn") != want:
        row["problems"].append("h2load negotiated %r, not %s" % (
            res.get("alpn"), want))
    st = res.get("status") or {}
    ok, two = res.get("succeeded") or 0, st.get("2xx") or 0
    # h2load's counts straddle the edges of the measured window: a stream
    # whose head arrived but whose body was still coming when the time
    # ended counts as 2xx, not as succeeded (with large bodies, as
    # static-10m-h2, some always are), and one whose head came in the
    # warm-up and whose end came after it counts as succeeded with its
    # status untallied (seen with nginx and h2o: 306 succeeded, 305 2xx).
    # A server that writes the head and the body apart shows both with
    # small bodies too: hypercorn's h2-get is off by 18 to 87 streams of
    # ~18,000 either way with -D, and exact (30,000 of 30,000) with -n.
    # Either way at most one per stream in flight, and only when no
    # answer had another status and nothing failed or errored.
    in_flight = (sc.clients or 1) * (sc.streams or 1)
    other = sum(v for k, v in st.items() if k != "2xx" and v)
    if 0 < abs(two - ok) <= in_flight and not other and \
            not res.get("errored") and not res.get("failed"):
        row["notes"].append("h2load: %d streams cut by the measured window "
                            "(%s)" % (abs(two - ok),
                                      "2xx head, body incomplete"
                                      if two > ok else
                                      "counted succeeded, status untallied"))
    elif two != ok:
        row["problems"].append("h2load: %s succeeded but %s 2xx" % (
            res.get("succeeded"), st.get("2xx")))
    if res.get("tls_protocol"):
        row["tls"] = "%s %s" % (res["tls_protocol"], res.get("cipher"))
    if sc.upload:
        _upload_fields(row, sc, "h2load")


def _upload_fields(row, sc, tool):
    """MiB/s (completed uploads x 16 MiB / s), server CPU and heap per
    MiB, and the load generator's bound, for h2load's and h3load's
    uploads."""
    per = sc.upload / MIB  # MiB per request
    if row.get("rate"):
        row["mib_per_s"] = row["rate"] * per
    n = row.get("requests") or 0
    if n and row.get("server_cpu_s") is not None:
        row["cpu_us_per_mib"] = row["server_cpu_s"] * 1e6 / (n * per)
    for a, b in (("allocs_per_req", "allocs_per_mib"),
                 ("bytes_per_req", "bytes_per_mib"),
                 ("shim_allocs_per_req", "shim_allocs_per_mib"),
                 ("shim_bytes_per_req", "shim_bytes_per_mib")):
        if row.get(a) is not None:
            row[b] = row[a] / per
    if 0 < n < 20 and not sc.relay_ms:
        row["notes"].append("only %d uploads in the window: the one in "
                            "flight at its end weighs on CPU and "
                            "allocations per MiB" % n)
    # the load generator is one thread on one core: near 100 % of it,
    # MiB/s is the client's limit, not the server's, and server CPU per
    # MiB is the figure that tells servers apart
    cu = row.get("client_cpu_util")
    if cu is not None and cu > CLIENT_BOUND and not sc.relay_ms:
        row["notes"].append("bound by the load generator: %s used "
                            "%.0f %% of its core" % (tool, 100 * cu))


def _h3load_fields(row, res, sc):
    """h3load's counts: the error kinds (any makes the row invalid, as
    the caller's errors check does), the upload figures, and for --ws what
    was negotiated."""
    j = res["raw"]
    row["h3load_error_kinds"] = j.get("error_kinds")
    for k in ("bytes_up", "bytes_down", "mib_per_s_up", "conns", "streams"):
        if j.get(k) is not None:
            row["h3load_" + k] = j[k]
    if sc.upload:
        _upload_fields(row, sc, "h3load")
    if sc.protocol == "ws-h3":
        row["ws_deflate_negotiated"] = j.get("deflate_negotiated")
        row["ws_extension"] = j.get("extension") or None
        if sc.ws_deflate and not j.get("deflate_negotiated"):
            row["problems"].append("permessage-deflate declined")


def _relay_fields(row, st0, c0, t0, end):
    """The rtt50 rows: MiB/s is what the server received in the window
    (tern's /stats bytes_in, read when the load's window starts and when
    its duration has passed, over those seconds: TLS records or QUIC
    packets, framing included), not completed uploads x 16 MiB: a pinned
    row completes one 16 MiB upload in some 12 s, so whole uploads would
    measure the window's edges.  Server CPU per MiB over the same
    window."""
    if end is None or st0 is None or end["stats"] is None or \
            "bytes_in" not in st0:
        row["problems"].append("no bytes_in from tern's /stats at both ends "
                               "of the window: the rtt50 rows measure what "
                               "the server received")
        return
    wall = end["t"] - t0
    mib = (end["stats"]["bytes_in"] - st0["bytes_in"]) / MIB
    cpu = (end["ticks"] - c0) / common.CLK_TCK
    row["wire_mib"] = mib
    row["window_s"] = wall
    row["window_server_cpu_s"] = cpu
    row["uploads_done"] = row.get("requests")
    row["mib_per_s"] = mib / wall if wall else None
    row["cpu_us_per_mib"] = cpu * 1e6 / mib if mib else None
    summ = (row.get("relay") or {}).get("summary")
    if summ is None:
        row["notes"].append("the relay wrote no summary")
        return
    udp, tcp = summ.get("udp") or {}, summ.get("tcp") or {}
    lost = sum(int(udp.get(k) or 0) for k in (
        "lost_up", "lost_down", "overflow_up", "overflow_down"))
    if lost:
        row["problems"].append("the relay dropped %d datagrams (full queue "
                               "or --loss)" % lost)
    if tcp.get("refused"):
        row["problems"].append("tern refused %s of the relay's connections"
                               % tcp["refused"])
    # (a reset as the load generator closes its connection with the
    # server's last bytes still on their way is its way of closing, not
    # an error: h2load counts any failed request itself)


def _handshake_fields(row, res, sc):
    """tls-handshake, tls-resume: the handshakes churn counted in the
    window, full and resumed; what was negotiated (churn's, which replaces
    the check's curl); and whether the server resumed as the scenario
    needs."""
    full = int(res.get("handshakes_full") or 0)
    resumed = int(res.get("handshakes_resumed") or 0)
    row["handshakes_full"] = full
    row["handshakes_resumed"] = resumed
    row["tls_errors"] = int(res.get("tls_errors") or 0)
    row["resumed_pct"] = 100.0 * resumed / (full + resumed) \
        if full + resumed else None
    if res.get("tls_version"):
        row["tls"] = " ".join(x for x in (res["tls_version"],
                                          res.get("tls_cipher"),
                                          res.get("tls_group")) if x)
    if res.get("tls13_no_ticket"):
        row["notes"].append(
            "%d of %d connections got no new TLS 1.3 ticket (the server "
            "issues none on a resumed connection): each slot offered its "
            "last ticket again" % (res["tls13_no_ticket"], full + resumed))
    if not full + resumed:
        return  # "no request completed" says it
    if sc.tls_resume and resumed < RESUME_MIN * (full + resumed):
        row["problems"].append(
            "only %d of %d connections resumed (%.1f %%, under %.0f %%): the "
            "server does not resume these sessions" % (
                resumed, full + resumed, row["resumed_pct"], 100 * RESUME_MIN))
    if not sc.tls_resume and resumed:
        row["problems"].append(
            "%d of %d handshakes were resumptions although no session was "
            "offered" % (resumed, full + resumed))


def _wsload_fields(row, res, sc):
    j = res["raw"]
    n = row.get("requests") or 0
    row["ws_deflate_negotiated"] = j.get("deflate_negotiated")
    row["ws_extension"] = j.get("extension") or None
    if n:
        row["ws_wire_out_per_msg"] = (j.get("bytes_out_window") or 0) / n
        row["ws_wire_in_per_msg"] = (j.get("bytes_in_window") or 0) / n
    if (j.get("upgraded") or 0) < sc.connections:
        row["problems"].append("only %s of %d sockets upgraded" % (
            j.get("upgraded"), sc.connections))
    if sc.ws_deflate and (j.get("deflate_negotiated") or 0) < (
            j.get("upgraded") or 0):
        row["problems"].append("permessage-deflate declined on %d of %d "
                               "sockets" % ((j.get("upgraded") or 0) - (
                                   j.get("deflate_negotiated") or 0),
                                   j.get("upgraded") or 0))
    if j.get("starved"):
        row["problems"].append("%d sockets got no echo in the measured "
                               "window (starved)" % j["starved"])
    if j.get("close_unanswered"):
        row["notes"].append("%d sockets got no Close back for wsload's Close"
                            % j["close_unanswered"])
    if j.get("pings"):
        row["notes"].append("the server sent %d pings" % j["pings"])


def _measure_idle(args, workdir, srv, sc, row):
    is_tern = srv.name.startswith("tern")
    n = args.idle_conns
    hold = args.idle_hold
    time.sleep(0.3)
    pids = srv.pids()
    base_rss = common.rss_bytes(pids)
    base_fds = common.nfds(pids)
    st0, sh0 = _counters(srv, is_tern)
    c0 = common.cpu_ticks(pids)
    p, argv, out_json, out_log = loads.start_idle(args, workdir, srv.port, n, hold)
    snap = None
    best = 0
    last_change = t0 = time.monotonic()
    deadline = t0 + hold + 60
    samples = []
    try:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            if not srv.alive():
                raise BenchError("server exited while connections were held")
            pids = srv.pids()
            held = common.nfds(pids) - base_fds
            now = time.monotonic()
            if held > best:
                best, last_change = held, now
            samples.append((round(now - t0, 2), held, common.rss_bytes(pids)))
            if snap is None and (held >= n or (
                    held > 0 and now - last_change > 2.0)):
                time.sleep(0.3)
                pids = srv.pids()
                held = common.nfds(pids) - base_fds
                rss = common.rss_bytes(pids)
                st1, sh1 = _counters(srv, is_tern)
                snap = {"t": round(time.monotonic() - t0, 2), "held": held,
                        "rss": rss, "stats": st1, "shim": sh1}
        if p.poll() is None:
            raise BenchError("the idle client did not finish in %ds" % (hold + 60))
    finally:
        common.stop_proc(p, grace=1.0)
    c1 = common.cpu_ticks(srv.pids())
    try:
        import json
        with open(out_json) as f:
            j = json.load(f)
    except (OSError, ValueError):
        j = {}
        row["problems"].append("the idle client left no JSON (exit %s): %s" % (
            p.returncode, open(out_log, "rb").read()[-300:].decode("utf-8", "replace")))
    row["load"] = {"tool": "idle", "argv": argv, "exit_status": p.returncode}
    row["load_raw"] = j
    row["idle_target"] = n
    row["errors"] = int(j.get("errors") or 0)
    row["non2xx"] = int(j.get("non2xx") or 0)
    row["rss_before"] = base_rss
    row["samples"] = samples[-50:]
    row["peak_rss"] = common.hwm_bytes(srv.pids())
    row["server_cpu_s"] = (c1 - c0) / common.CLK_TCK
    if snap is None:
        row["problems"].append("the server never held any connection")
    else:
        held = snap["held"]
        row["held"] = held
        row["requests"] = held
        row["rss_with_idle"] = snap["rss"]
        row["rss_per_conn"] = _per(snap["rss"] - base_rss, held)
        _alloc_fields(row, st0, snap["stats"], sh0, snap["shim"], held)
        if snap["stats"] is not None:  # blocks still allocated, per connection
            row["live_blocks_per_conn"] = _per(
                (snap["stats"]["allocations"] - st0["allocations"])
                - (snap["stats"]["frees"] - st0["frees"]), held)
        for a, b in (("allocs_per_req", "allocs_per_conn"),
                     ("bytes_per_req", "heap_per_conn"),
                     ("shim_allocs_per_req", "shim_allocs_per_conn"),
                     ("shim_bytes_per_req", "shim_heap_per_conn")):
            if a in row:
                row[b] = row[a]
        if is_tern:
            row["notes"] += agreement(row)
        if held < n * 0.99:
            row["problems"].append("held only %d of %d connections" % (held, n))
    for k in ("failed", "closed_during_hold", "unexpected_bytes"):
        if j.get(k):
            row["problems"].append("idle client: %s %s" % (k.replace("_", " "), j[k]))
    if row["errors"]:
        row["problems"].append("%d errors in the idle client" % row["errors"])
    if row["non2xx"]:
        row["problems"].append("%d non-2xx responses" % row["non2xx"])
    if p.returncode:
        row["problems"].append("the idle client exited %s" % p.returncode)
    if row["problems"]:
        row["status"] = "invalid"
