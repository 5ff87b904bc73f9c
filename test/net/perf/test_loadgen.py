#!/usr/bin/env python3
"""The benchmark tools checked against the reference server: that h1rate
corrects for coordinated omission and keeps its schedule, that churn and idle
work, and that the allocation-counting shim agrees with tern's own counters.
These are tests of the tools, not benchmarks: the loads are small."""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import (BUILD, HELLO_BODY, REPO, Conn, Server, ServerError, Skip,
                     Suite, build_request, check, chunked, eq, sanitized,
                     stats_from)

suite = Suite()
case = suite.case


def tool(*parts):
    path = os.path.join(BUILD, "perf", *parts)
    if not os.path.exists(path):
        raise FileNotFoundError("%s not built (TERN_BUILD=%s)" % (path, BUILD))
    return path


def run_json(cmd, timeout):
    """Run a tool with --json; returns (exit status, stdout, report)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = subprocess.run(cmd + ["--json", out], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        text = p.stdout.decode("utf-8", "replace")
        check(p.returncode == 0, "%s exited %d: %s" % (cmd[0], p.returncode,
                                                       text))
        with open(out) as f:
            return p.returncode, text, json.load(f)


# ---- h1rate -----------------------------------------------------------------

@case(timeout=40)
def h1rate_coordinated_omission():
    # 2000 req/s over 8 connections for 3 s after a 0.5 s warm-up: N = 6000
    # measured requests, one due every 0.5 ms. About 1.5 s in, the server
    # is frozen for S = 0.4 s. Every request due during the stall waits for
    # its end, so the one due at stall_start + x has latency >= S - x: the
    # stall alone puts R * S = 800 requests (13 %) above 0, spread evenly
    # up to S. The k slowest requests therefore all exceed S - k / R, and
    # the q-quantile (the (1 - q) * N slowest) is at least
    # S - (1 - q) * N / R: p99 >= S - 30 ms = 370 ms, p99.9 >= S - 3 ms,
    # p90 >= S - 300 ms = 100 ms.
    #
    # A client that measured from the actual send would see only the 8
    # requests in flight at the stall (0.13 %) as slow, and its p99 would
    # be the unloaded one (well under a millisecond). It could also hide
    # the stall by sending fewer requests; so the count must match the
    # schedule too.
    rate, conns, duration, warmup = 2000, 8, 3.0, 0.5
    with Server("reference", ["--workers", "1"]) as s, \
            tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "h1rate.json")
        cmd = [tool("load", "h1rate"), "--host", "127.0.0.1",
               "--port", str(s.port), "--connections", str(conns),
               "--rate", str(rate), "--duration", str(duration),
               "--warmup", str(warmup), "--json", out]
        t_launch = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        t_stop = None
        try:
            time.sleep(max(0.0, t_launch + 1.5 - time.monotonic()))
            s.signal(signal.SIGSTOP)
            # Read after the stop and before the continue: any delay here
            # makes the stall look shorter than it was, and the bounds
            # below looser, never stricter.
            t_stop = time.monotonic()
            time.sleep(0.4)
        finally:
            if t_stop is not None:
                stall = time.monotonic() - t_stop
                s.signal(signal.SIGCONT)
        try:
            text = p.communicate(timeout=20)[0].decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise AssertionError("h1rate did not stop by itself")
        eq(p.returncode, 0, "h1rate exit status")
        with open(out) as f:
            r = json.load(f)
    suite.note("stall %.3f s; %s" % (stall, text.strip().splitlines()[-1]))
    lat = r["latency_us"]
    n = r["scheduled"]
    eq(n, int(rate * duration), "requests scheduled")
    eq(r["errors"], 0, "errors")
    eq(r["non2xx"], 0, "non2xx")
    eq(r["unfinished"], 0, "unfinished")
    eq(r["dropped"], 0, "dropped")
    # The schedule was kept: every due request was sent and answered.
    check(abs(r["requests"] - rate * duration) <= 0.1 * rate * duration,
          "requests %d, want %d +- 10%%" % (r["requests"], rate * duration))
    check(abs(r["rate_achieved"] - rate) <= 0.1 * rate,
          "rate_achieved %.1f, want %d +- 10%%" % (r["rate_achieved"], rate))
    stall_us = stall * 1e6
    check(lat["max"] >= 350000,
          "max %d us: the %.0f ms stall is missing" % (lat["max"],
                                                       stall * 1e3))
    # 0.9: histogram buckets are 0.8 % wide, and the timing of the stall
    # as seen from here is not exact.
    for q, key in ((0.999, "p999"), (0.99, "p99"), (0.9, "p90")):
        floor = stall_us - (1 - q) * n / rate * 1e6
        check(lat[key] >= 0.9 * floor,
              "%s %d us, want >= %.0f (stall %.0f ms, N %d): requests "
              "queued behind the stall were not charged for it"
              % (key, lat[key], 0.9 * floor, stall * 1e3, n))
    # Half the requests never met the stall.
    check(lat["p50"] < 50000, "p50 %d us: the stall leaked into the median"
          % lat["p50"])


@case(timeout=20)
def h1rate_keeps_rate_and_parses_bodies():
    # Chunked and sized bodies, a 404, no warm-up: counts must add up.
    with Server("reference", ["--workers", "1"]) as s:
        base = [tool("load", "h1rate"), "--host", "127.0.0.1",
                "--port", str(s.port), "--connections", "4",
                "--rate", "1000", "--duration", "1"]
        for path, non2xx in (("/stream", 0), ("/big?bytes=70000", 0),
                             ("/missing", 1000)):
            _, text, r = run_json(base + ["--path", path], 15)
            eq(r["errors"], 0, "%s: errors" % path)
            eq(r["requests"], 1000, "%s: requests" % path)
            eq(r["non2xx"], non2xx, "%s: non2xx" % path)


# ---- churn ------------------------------------------------------------------

@case(timeout=20)
def churn_against_hello():
    with Server("reference", ["--workers", "1"]) as s:
        with Conn(s.port) as st:
            before = stats_from(st)
            _, text, r = run_json(
                [tool("load", "churn"), "--host", "127.0.0.1",
                 "--port", str(s.port), "--concurrency", "16",
                 "--duration", "1", "--warmup", "0.2"], 15)
            after = stats_from(st)
    suite.note(text.strip().splitlines()[-1])
    eq(r["errors"], 0, "errors")
    eq(r["non2xx"], 0, "non2xx")
    eq(r["addrnotavail"], 0, "EADDRNOTAVAIL")
    check(r["connections"] > 100, "only %d connections" % r["connections"])
    # Each counted connection was a real one, as the server saw it.
    new = after["connections"] - before["connections"]
    check(new >= r["connections"],
          "server saw %d connections, churn reports %d"
          % (new, r["connections"]))
    check(r["latency_us"]["max"] > 0, "no latency recorded")


def tls_hello(d):
    """The reference server with a TLS port and a fresh self-signed ECDSA P-256
    certificate in d; returns (Server, TLS port)."""
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                    "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-subj", "/CN=localhost", "-keyout", key, "-out", cert,
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=30)
    s = Server("reference", ["--workers", "1", "--tls-port", "0",
                             "--cert", cert, "--key", key])
    m = re.match(r"tls listening on (\d+)$", s.next_line())
    if m is None:
        s.kill()
        raise AssertionError("reference printed no tls port line")
    return s, int(m.group(1))


def churn_tls(port, *extra):
    """churn --tls for about a second against port; Skip where churn was
    built without GnuTLS (it refuses --tls with exit status 2)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = subprocess.run(
            [tool("load", "churn"), "--host", "127.0.0.1", "--port",
             str(port), "--concurrency", "16", "--duration", "1",
             "--warmup", "0.2", "--tls"] + list(extra) + ["--json", out],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
        text = p.stdout.decode("utf-8", "replace")
        if p.returncode == 2 and "without GnuTLS" in text:
            raise Skip("churn built without GnuTLS: no --tls")
        eq(p.returncode, 0, "churn --tls exit status (%s)" % text.strip())
        with open(out) as f:
            r = json.load(f)
    suite.note(text.strip().splitlines()[-1])
    eq(r["tls"], True, "tls in the report")
    eq(r["errors"], 0, "errors (tls_errors %s)" % r.get("tls_errors"))
    eq(r["tls_errors"], 0, "tls_errors")
    eq(r["non2xx"], 0, "non2xx")
    check(r["connections"] > 0, "no connection completed")
    eq(r["handshakes_full"] + r["handshakes_resumed"], r["connections"],
       "full + resumed handshakes")
    return r


@case(timeout=60)
def churn_tls_full_and_resumed_handshakes():
    # tls-handshake and tls-resume rest on churn's counts: without --resume no
    # session is offered, so every handshake must be a full one; with it each
    # of the 16 slots offers its last session, and the reference server
    # (tickets with either engine) must resume nearly all of them. Only a
    # slot's first connection, in the warm-up, has nothing to offer.
    with tempfile.TemporaryDirectory() as d:
        s, tls_port = tls_hello(d)
        with s:
            full = churn_tls(tls_port)
            check(full["handshakes_full"] > 0, "no full handshake")
            eq(full["handshakes_resumed"], 0,
               "resumed handshakes with no session offered")
            res = churn_tls(tls_port, "--resume")
            check(res["handshakes_resumed"] >= 0.9 * res["connections"],
                  "only %d of %d connections resumed (want >= 90 %%)"
                  % (res["handshakes_resumed"], res["connections"]))
    suite.note("full: %d connections, %s; resume: %d of %d resumed"
               % (full["connections"], full.get("tls_version"),
                  res["handshakes_resumed"], res["connections"]))


# ---- idle -------------------------------------------------------------------

@case(timeout=30)
def idle_holds_connections():
    n = 300
    with Server("reference", ["--workers", "1"]) as s, \
            tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "idle.json")
        p = subprocess.Popen(
            [tool("load", "idle"), "--host", "127.0.0.1", "--port",
             str(s.port), "--connections", str(n), "--hold", "1.5",
             "--json", out], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
        try:
            line = p.stdout.readline().decode()
            check(line.startswith("idle: ready %d of %d" % (n, n)),
                  "first line %r" % line)
            with Conn(s.port) as st:
                active = stats_from(st)["active_connections"]
            rest = p.communicate(timeout=15)[0].decode()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        eq(p.returncode, 0, "idle exit status")
        with open(out) as f:
            r = json.load(f)
    suite.note(line.strip())
    # n held plus the one asking.
    check(active >= n + 1, "server has %d connections open during the "
          "hold, want >= %d" % (active, n + 1))
    eq(r["ready"], n, "ready")
    eq(r["failed"], 0, "failed")
    eq(r["closed_during_hold"], 0, "closed during the hold (%s)" % rest)


# ---- allocshim --------------------------------------------------------------

def shim_counts(d, pid):
    """Signal the process and read the line its shim writes."""
    path = os.path.join(d, "%d.txt" % pid)
    if os.path.exists(path):
        os.unlink(path)
    os.kill(pid, signal.SIGRTMIN + 4)
    deadline = time.monotonic() + 5
    while not os.path.exists(path):
        check(time.monotonic() < deadline, "no %s after the signal" % path)
        time.sleep(0.002)
    with open(path) as f:
        line = f.read()
    fields = dict(kv.split("=") for kv in line.split())
    eq(sorted(fields), ["allocs", "bytes", "frees"], "fields of %r" % line)
    return {k: int(v) for k, v in fields.items()}


@case(timeout=60)
def allocshim_agrees_with_tern():
    # What each side counts, per request:
    # - POST /collect with a chunked body: tern collects the body into a
    #   buffer it reallocs (NULL -> 4096) through its allocator hook, which
    #   by default is libc's malloc, and frees it when the request ends;
    #   the reference server allocates nothing. Both must see 1
    #   allocation, 4096 bytes and 1 free per request. (With
    #   Content-Length, a body that arrived with the head is referenced in
    #   place and nothing is allocated.)
    # - POST /echo: the reference server callocs its state and mallocs a
    #   copy of each piece itself, outside tern's hook: the shim must see
    #   them, tern must not.
    # The /stats reads go over one keep-alive connection set up before
    # the window. Tern takes its snapshot inside the /stats handler, so
    # the response to the first read allocates after it (a block of
    # output, once per connection): tern may count 2 more than the shim.
    if sanitized():
        raise Skip("AddressSanitizer owns malloc; the shim cannot preload")
    shim = tool("alloc", "liballocshim.so")
    n = 5000
    collect = build_request("POST", "/collect",
                            [("Transfer-Encoding", "chunked")],
                            chunked([b"0123456789"]))
    echo = build_request("POST", "/echo", body=b"0123456789")
    with tempfile.TemporaryDirectory() as d:
        with Server("reference", ["--workers", "1"],
                    env={"LD_PRELOAD": shim,
                         "TERN_ALLOCSHIM_DIR": d}) as s:
            pid = s.proc.pid
            with Conn(s.port) as c, Conn(s.port) as st:
                for _ in range(1000):  # warm-up: pools, buffers
                    c.send(collect)
                    eq(c.response().body, b"0123456789", "collect")
                t0 = stats_from(st)
                a0 = shim_counts(d, pid)
                for _ in range(n):
                    c.send(collect)
                    r = c.response()
                    eq(r.status, 200, "collect status")
                a1 = shim_counts(d, pid)
                t1 = stats_from(st)
                for _ in range(1000):
                    c.send(echo)
                    eq(c.response().body, b"0123456789", "echo")
                a2 = shim_counts(d, pid)
                t2 = stats_from(st)
    shim_d = {k: a1[k] - a0[k] for k in a0}
    tern_d = {"allocs": t1["allocations"] - t0["allocations"],
              "bytes": t1["bytes_allocated"] - t0["bytes_allocated"],
              "frees": t1["frees"] - t0["frees"]}
    suite.note("%d chunked POST /collect: shim %s, tern %s"
               % (n, shim_d, tern_d))
    if tern_d["allocs"] < n:
        # Should tern one day pool these buffers, both sides read ~0 and
        # only the /echo part below shows that the shim counts at all.
        suite.note("tern no longer allocates per chunked body")
    for k, slack in (("allocs", 2), ("frees", 2), ("bytes", 2 * 32768)):
        check(abs(shim_d[k] - tern_d[k]) <= 0.01 * tern_d[k] + slack,
              "%s: shim %d, tern %d (want within 1%% + %d)"
              % (k, shim_d[k], tern_d[k], slack))
    echo_shim = a2["allocs"] - a1["allocs"]
    echo_tern = t2["allocations"] - t1["allocations"]
    suite.note("1000 POST /echo: shim %d allocations, tern %d"
               % (echo_shim, echo_tern))
    check(echo_shim >= 2000, "the shim missed reference's own allocations "
          "(%d for 1000 echoes)" % echo_shim)
    check(echo_tern <= 2 + 0.01 * 1000,
          "tern counted %d allocations for 1000 echoes" % echo_tern)

# ---- h3load -----------------------------------------------------------------
# h3load against the reference server's HTTP/3 (and gtlsserver's, where
# installed): its counts agree with the server's, its checks catch what they
# should, and its exit status follows its contract. Skipped where tern has no
# HTTP/3.

GTLSCLIENT = shutil.which("gtlsclient")
GTLSSERVER = shutil.which("gtlsserver")


def h3load_tool():
    try:
        return tool("load", "h3load")
    except FileNotFoundError:
        raise Skip("h3load not built (no ngtcp2/nghttp3: -Dhttp3)")


def make_cert(d):
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                    "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-subj", "/CN=localhost", "-keyout", key, "-out", cert,
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=30)
    return cert, key


@contextlib.contextmanager
def quic_reference():
    """with quic_reference() as (s, quic): reference --workers 1 with a
    QUIC port (Skip where tern was built without HTTP/3); like Server, it
    must still serve and stop cleanly at the end."""
    h3load_tool()
    with tempfile.TemporaryDirectory() as d:
        cert, key = make_cert(d)
        quic = None
        try:
            s = Server("reference", ["--workers", "1", "--tls-port", "0",
                                     "--quic-port", "0", "--cert", cert,
                                     "--key", key])
            for _ in range(3):
                m = re.match(r"quic listening on (\d+)$", s.next_line())
                if m:
                    quic = int(m.group(1))
                    break
        except ServerError as e:
            if re.search(r"unknown option --quic-port|quic: not built",
                         str(e)):
                raise Skip("reference has no HTTP/3 here")
            raise
        with s:
            check(quic is not None, "reference printed no quic port line")
            yield s, quic


def h3load(port, *args, timeout=60):
    """One h3load run; returns (exit status, its output, its report)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        p = subprocess.run([h3load_tool(), "--port", str(port)] +
                           list(args) + ["--json", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
        text = p.stdout.decode("utf-8", "replace")
        report = None
        if os.path.exists(out):
            with open(out) as f:
                report = json.load(f)
        return p.returncode, text, report


def summary(text):
    """h3load's line of counts, for the TAP notes."""
    lines = [l for l in text.splitlines()
             if l.startswith(("h3load: requests", "h3load: messages"))]
    return lines[-1] if lines else text.strip()[-200:]


def h3_ok(rc, text, r):
    """A run that must have gone cleanly."""
    eq(rc, 0, "h3load exit status (%s)" % text.strip())
    eq(r["errors"], 0, "errors %r (%s)" % (r["error_kinds"], text.strip()))
    check("h3load: measuring" in text, "no measuring line: %s" % text)


@case(timeout=90)
def h3load_counts_agree_with_hello_and_gtlsclient():
    # 3000 GET / on 4 connections x 32 streams: every response correct, and the
    # reference server, which counts an HTTP/3 response when the client has
    # acknowledged all of it, counted exactly as many: h3load's graceful close
    # (after its last ACKs) loses none.
    n = 3000
    with quic_reference() as (s, quic):
        with Conn(s.port) as st:
            before = stats_from(st)
            rc, text, r = h3load(quic, "--requests", str(n),
                                 "--expect-body", HELLO_BODY.decode())
            after = stats_from(st)
        h3_ok(rc, text, r)
        eq(r["requests"], n, "h3load's requests")
        eq(after["requests"] - before["requests"] - 1, n,
           "reference's request count (less the first /stats)")
        eq(r["bytes_down"], n * len(HELLO_BODY), "bytes_down")
        eq(r["conns"], 4, "conns")
        eq(r["streams"], 32, "streams")
        eq(r["latency_us"]["count"], n, "latencies recorded")
        check(r["rate_achieved"] > 0, "rate_achieved")
        # The same body for gtlsclient, the reference client.
        if GTLSCLIENT is not None:
            with tempfile.TemporaryDirectory() as dl:
                g = subprocess.run(
                    [GTLSCLIENT, "--exit-on-all-streams-close",
                     "--timeout=5s", "--handshake-timeout=5s", "-q",
                     "--download=" + dl, "-n", "300", "127.0.0.1",
                     str(quic), "https://localhost:%d/" % quic],
                    stdin=subprocess.DEVNULL, capture_output=True,
                    timeout=30)
                eq(g.returncode, 0, "gtlsclient exit status")
                with open(os.path.join(dl, "index.html"), "rb") as f:
                    eq(f.read(), HELLO_BODY, "gtlsclient's body")
    suite.note(summary(text))


@case(timeout=60)
def h3load_counts_errors():
    # A body other than the expected one is a body error on every
    # response; a status other than the expected one a status error; a
    # port nobody listens on gives connect errors and exit status 1 (it
    # could not start), still with a report.
    with quic_reference() as (s, quic):
        rc, text, r = h3load(quic, "--requests", "200",
                             "--expect-body", "Hello, World?")
        eq(rc, 0, "exit status (%s)" % text.strip())
        eq(r["requests"], 0, "correct responses")
        eq(r["error_kinds"]["body"], 200, "body errors")
        eq(r["errors"], 200, "errors")
        check("first body error" in text, "no body error described")
        rc, text, r = h3load(quic, "--requests", "50",
                             "--expect-length", "13",
                             "--expect-status", "404")
        eq(r["error_kinds"]["status"], 50, "status errors")
        rc, text, r = h3load(quic, "--requests", "50", "--path",
                             "/nothing-here", "--expect-status", "404")
        eq(r["errors"], 0, "errors for an expected 404")
        eq(r["requests"], 50, "expected 404s")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.1", 0))
    dead = u.getsockname()[1]
    u.close()
    rc, text, r = h3load(dead, "--requests", "10", "--conns", "2")
    eq(rc, 1, "exit status against a dead port (%s)" % text.strip())
    eq(r["error_kinds"]["connect"], 2, "connect errors")
    eq(r["requests"], 0, "requests")


@case(timeout=60)
def h3load_rate_is_kept():
    # --rate: the open model; the rate achieved follows the rate offered
    # (loosely: a busy machine may lag, never by half).
    with quic_reference() as (s, quic):
        rc, text, r = h3load(quic, "--rate", "400", "--duration", "2",
                             "--expect-body", HELLO_BODY.decode())
    h3_ok(rc, text, r)
    eq(r["rate_offered"], 400, "rate_offered")
    check(r["rate_achieved"] > 200, "rate_achieved %s for 400 offered"
          % r["rate_achieved"])
    check(r["requests"] + r["unfinished"] >= 700,
          "requests %d + unfinished %d for 800 due"
          % (r["requests"], r["unfinished"]))
    suite.note(summary(text))


@case(timeout=90)
def h3load_uploads():
    # 16 MiB POST bodies: each is read to its end by the reference server's
    # /upload, which answers the byte count; bytes_up counts them all.
    n, size = 4, 16 << 20
    with quic_reference() as (s, quic):
        rc, text, r = h3load(quic, "--requests", str(n), "--path",
                             "/upload", "--upload-size", str(size),
                             "--expect-body", str(size))
    h3_ok(rc, text, r)
    eq(r["requests"], n, "uploads answered")
    eq(r["bytes_up"], n * size, "bytes_up")
    check(r["mib_per_s_up"] > 0, "mib_per_s_up")
    suite.note(summary(text))


@case(timeout=60)
def h3load_websocket_over_h3():
    # --ws: extended CONNECT (RFC 9220) to the reference server's /ws echo,
    # every echo checked; with --deflate, permessage-deflate on every socket.
    with quic_reference() as (s, quic):
        for extra in ([], ["--deflate", "--binary", "--size", "3000"]):
            rc, text, r = h3load(quic, "--ws", "--conns", "2",
                                 "--streams", "8", "--duration", "1",
                                 *extra)
            h3_ok(rc, text, r)
            eq(r["sockets"], 16, "sockets")
            eq(r["upgraded"], 16, "sockets upgraded")
            check(r["messages"] > 0, "no echo")
            eq(r["messages"], r["requests"], "messages = requests")
            eq(r["close_unanswered"], 0, "Closes unanswered")
            if extra:
                eq(r["deflate_negotiated"], 16, "deflate sockets")
                check(r["extension"].startswith("permessage-deflate"),
                      "extension %r" % r["extension"])
            suite.note(summary(text))


@case(timeout=60)
def h3load_against_gtlsserver():
    # ngtcp2's own server, as perf/README.md runs it: a 13-byte file from
    # its htdocs for GET and for POST (it reads the body and serves the
    # file).
    if GTLSSERVER is None:
        raise Skip("gtlsserver (Debian package ngtcp2-server) not installed")
    h3load_tool()
    with tempfile.TemporaryDirectory() as d:
        cert, key = make_cert(d)
        docs = os.path.join(d, "htdocs")
        os.mkdir(docs)
        with open(os.path.join(docs, "index.html"), "wb") as f:
            f.write(HELLO_BODY)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        u.close()
        srv = subprocess.Popen([GTLSSERVER, "-q", "--no-quic-dump",
                                "--no-http-dump", "-d", docs, "127.0.0.1",
                                str(port), key, cert],
                               stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        try:
            # It prints nothing when it listens: try until it answers.
            deadline = time.monotonic() + 10
            while True:
                rc, text, r = h3load(port, "--requests", "1", "--conns", "1")
                if rc == 0 and r["requests"] == 1:
                    break
                check(time.monotonic() < deadline and srv.poll() is None,
                      "gtlsserver does not answer: %s" % text.strip())
                time.sleep(0.1)
            rc, text, r = h3load(port, "--requests", "1000",
                                 "--expect-body", HELLO_BODY.decode())
            h3_ok(rc, text, r)
            eq(r["requests"], 1000, "GET responses")
            rc, text2, r = h3load(port, "--requests", "20", "--upload-size",
                                  "100000", "--expect-body",
                                  HELLO_BODY.decode())
            h3_ok(rc, text2, r)
            eq(r["bytes_up"], 20 * 100000, "bytes_up")
        finally:
            srv.kill()
            srv.wait()
    suite.note(summary(text))


@case(timeout=20)
def h3load_rejects_bad_arguments():
    bad = [
        [],
        ["--port", "9", "--conns", "0"],
        ["--port", "9", "--header", "bad"],
        ["--port", "9", "--header", ":path: /x"],
        ["--port", "9", "--expect-body", "x", "--expect-length", "1"],
        ["--port", "9", "--rate", "10", "--requests", "5"],
        ["--port", "9", "--ws", "--requests", "5"],
        ["--port", "9", "--path", "no-slash"],
        ["--port", "9", "--bogus"],
    ]
    for args in bad:
        p = subprocess.run([h3load_tool()] + args, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10)
        eq(p.returncode, 2, "exit status of h3load %s" % " ".join(args))


# ---- wsload -----------------------------------------------------------------

@case(timeout=40)
def wsload_echo_against_hello():
    # wsload (its WebSocket side in wsproto.c, shared with h3load --ws):
    # every echo correct, plain and with permessage-deflate.
    with Server("reference", ["--workers", "1"]) as s:
        for extra in ([], ["--deflate", "--binary", "--size", "3000"]):
            _, text, r = run_json(
                [tool("load", "wsload"), "--port", str(s.port), "--conns",
                 "8", "--duration", "1"] + extra, 20)
            eq(r["errors"], 0, "errors (%s)" % text.strip())
            eq(r["upgraded"], 8, "sockets upgraded")
            check(r["messages"] > 0, "no echo")
            if extra:
                eq(r["deflate_negotiated"], 8, "deflate sockets")
    suite.note(text.strip().splitlines()[-2])



# ---- arguments --------------------------------------------------------------

@case(timeout=20)
def tools_reject_bad_arguments():
    port = ["--host", "127.0.0.1", "--port", "9"]
    bad = [
        ["load", "h1rate"],
        ["load", "h1rate"] + port + ["--connections", "1", "--rate", "x",
                                     "--duration", "1"],
        ["load", "h1rate"] + port + ["--connections", "1", "--rate", "10",
                                     "--duration", "1", "--header", "bad"],
        ["load", "h1rate"] + port + ["--connections", "0", "--rate", "10",
                                     "--duration", "1"],
        ["load", "churn"] + port + ["--duration", "1"],
        ["load", "churn"] + port + ["--concurrency", "1", "--duration",
                                    "1", "--bogus"],
        ["load", "idle"] + port + ["--connections", "1"],
    ]
    for args in bad:
        p = subprocess.run([tool(*args[:2])] + args[2:],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10)
        eq(p.returncode, 2, "exit status of %s" % " ".join(args[1:]))


# ---- perf/perf's HTTP/3 and 50 ms RTT rows (the harness) -------------------

PERF = os.path.join(REPO, "perf")


def perf_driver():
    """perf/driver (the driver's modules), imported from the source tree."""
    if PERF not in sys.path:
        sys.path.insert(0, PERF)
    from driver import common, scenarios, tlsclient  # noqa: E402
    return common, scenarios, tlsclient


def perf_compare(d, servers, scenarios, *extra, timeout=300):
    """perf/perf compare into d; returns (exit status, output, summary)."""
    argv = [sys.executable, os.path.join(PERF, "perf"), "compare",
            "--servers", servers, "--scenarios", scenarios,
            "--rounds", "1", "--load-wait", "0", "--out-dir", d,
            "--reference", os.path.join(BUILD, "examples", "reference"),
            "--load-dir", os.path.join(BUILD, "perf", "load"),
            "--alloc-dir", os.path.join(BUILD, "perf", "alloc")] + list(extra)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    text = p.stdout.decode("utf-8", "replace")
    path = os.path.join(d, "summary.json")
    summ = None
    if os.path.exists(path):
        with open(path) as f:
            summ = json.load(f)
    return p.returncode, text, summ


@case(timeout=60)
def perf_h3_check_wants_the_exact_answer():
    """The h3 rows' check (gtlsclient): the reference server's body and upload
    count pass, a body other than the one expected is refused."""
    if shutil.which("gtlsclient") is None:
        raise Skip("gtlsclient not installed (ngtcp2-client)")
    common, scenarios, tlsclient = perf_driver()
    with quic_reference() as (s, quic), tempfile.TemporaryDirectory() as d:
        get = scenarios.REGISTRY["h3-get"]
        r = tlsclient.gtls_check(quic, get, b"Hello, World!", d)
        eq(r["status"], 200, "status")
        eq(r["body_bytes"], 13, "body bytes")
        try:
            tlsclient.gtls_check(quic, get, b"Hello, World?", d)
            check(False, "a wrong expected body passed the check")
        except common.BenchError as e:
            check("expected" in str(e), "the reason: %s" % e)
        up = scenarios.REGISTRY["h3-upload"]
        body = tlsclient.upload_file(d, 1 << 20)
        # The reference server answers the byte count it read: the whole body
        # arrived
        r = tlsclient.gtls_check(quic, up, b"1048576", d, upload_path=body)
        eq(r["status"], 200, "upload status")


@case(timeout=180)
def perf_compare_h3_rows_against_gtlsserver():
    """perf/perf compare on h3-get and h3-upload, tern and gtlsserver:
    every cell valid, with h3load's counts, no error, and tern's own
    counters of the window."""
    if sanitized():
        raise Skip("perf/perf preloads the allocation shim, which "
                   "AddressSanitizer's malloc refuses")
    if GTLSSERVER is None or shutil.which("gtlsclient") is None:
        raise Skip("gtlsserver or gtlsclient not installed (ngtcp2-server, "
                   "ngtcp2-client)")
    with quic_reference():
        pass  # skips where the reference server or h3load has no HTTP/3
    with tempfile.TemporaryDirectory() as d:
        rc, text, summ = perf_compare(d, "tern,gtlsserver", "h3-get,h3-upload",
                                      "--duration", "1", "--warmup", "1")
        check(summ is not None, "no summary.json: %s" % text[-800:])
        rows = summ["rows"]
        eq(len(rows), 4, "rows")
        for r in rows:
            eq(r["status"], "ok", "%s %s: %s" % (r["scenario"], r["server"],
                                                 r["problems"]))
            eq(r["errors"], 0, "%s %s errors" % (r["scenario"], r["server"]))
            check(r["requests"] > 0, "%s %s: no request" % (r["scenario"],
                                                            r["server"]))
            eq(r["load"]["tool"], "h3load", "the load")
            eq(r["check"]["status"], 200, "the check")
        tern = [r for r in rows if r["server"] == "tern"]
        for r in tern:
            check(r.get("server_requests", 0) > 0,
                  "tern's /stats saw no request in %s" % r["scenario"])
        eq(rc, 0, "exit status (%s)" % text[-400:])


@case(timeout=180)
def perf_rtt50_pinned_window_is_bounded_by_the_round_trip():
    """h2-upload-rtt50-pinned through the relay: a 64 KiB stream window
    per 50 ms round trip cannot move more than ~1.3 MiB/s (the relay's
    delay is a lower bound on the round trip, so this bound holds on any
    machine), and the row still completes an upload with no error."""
    if sanitized():
        raise Skip("perf/perf preloads the allocation shim, which "
                   "AddressSanitizer's malloc refuses")
    try:
        tool("load", "relay")
    except FileNotFoundError:
        raise Skip("relay not built")
    if shutil.which("h2load") is None:
        raise Skip("h2load not installed (nghttp2-client)")
    with tempfile.TemporaryDirectory() as d:
        rc, text, summ = perf_compare(d, "tern", "h2-upload-rtt50-pinned",
                                      "--duration", "1", "--warmup", "1")
        check(summ is not None, "no summary.json: %s" % text[-800:])
        (r,) = summ["rows"]
        if "unknown option --max-stream-window" in " ".join(r["problems"]):
            raise Skip("reference has no --max-stream-window here")
        eq(r["status"], "ok", "status: %s" % r["problems"])
        eq(r["errors"], 0, "errors")
        check(r["uploads_done"] >= 1, "no upload completed in the window")
        check(r["window_s"] >= 20, "the window (%.1f s) is the rows' 20 s "
              "at least" % r["window_s"])
        # 64 KiB per 50 ms = 1.25 MiB/s of body, plus TLS and HTTP/2
        # framing: well under 2
        check(0 < r["mib_per_s"] < 2.0,
              "pinned: %.2f MiB/s received" % r["mib_per_s"])
        eq(rc, 0, "exit status")


@case(timeout=180)
def perf_compare_db_rows():
    """The db-* rows (issue 18) on a short run: Redis started per row and
    its CPU counted with the server's, the relay in front of it for
    db-slow, every cell valid, tern's async lane on one thread with no
    allocation of its own per request, CivetWeb with a thread per
    connection."""
    if sanitized():
        raise Skip("perf/perf preloads the allocation shim, which "
                   "AddressSanitizer's malloc refuses")
    if shutil.which("redis-server") is None and not os.access(
            "/usr/bin/redis-server", os.X_OK):
        raise Skip("redis-server not installed")
    if not os.access(os.path.join(BUILD, "perf", "peers", "civetweb_db"),
                     os.X_OK):
        raise Skip("civetweb_db not built (libcivetweb-dev, libhiredis-dev)")
    with tempfile.TemporaryDirectory() as d:
        rc, text, summ = perf_compare(
            d, "tern,civetweb-db", "db-async,db-slow-async", "--duration",
            "1", "--warmup", "1", "--rate", "2000",
            "--peers-dir", os.path.join(BUILD, "perf", "peers"))
        check(summ is not None, "no summary.json: %s" % text[-800:])
        rows = {(r["scenario"], r["server"]): r for r in summ["rows"]}
        eq(len(rows), 4, "rows")
        for (sc, srv), r in rows.items():
            eq(r["status"], "ok", "%s %s: %s" % (sc, srv, r["problems"]))
            eq(r["errors"], 0, "%s %s errors" % (sc, srv))
            check(r["requests"] > 0, "%s %s: no request" % (sc, srv))
            check(r["redis_cpu_s"] > 0, "%s %s: Redis's CPU not counted"
                  % (sc, srv))
            check(r["server_cpu_s"] > r["redis_cpu_s"],
                  "%s %s: the server's CPU holds Redis's" % (sc, srv))
        check("db_relay" in rows[("db-slow-async", "tern")],
              "db-slow runs through the relay")
        for sc in ("db-async", "db-slow-async"):
            eq(rows[(sc, "tern")]["server_threads"], 1, sc + " tern threads")
            check(rows[(sc, "civetweb-db")]["server_threads"] > 64,
                  "%s civetweb-db: a thread per connection" % sc)
        check(rows[("db-async", "tern")]["allocs_per_req"] < 0.01,
              "tern allocates per request on the async lane: %s"
              % rows[("db-async", "tern")]["allocs_per_req"])
        eq(rc, 0, "exit status (%s)" % text[-400:])


if __name__ == "__main__":
    suite.main()
