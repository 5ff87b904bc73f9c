"""Balance across workers (issue 35): the balance-* rows.

Each server runs 2 workers (tern: reference --workers 2 --balance least,
kernel or reuseport; nginx: worker_processes 2, its listening socket shared or one per
worker with reuseport; h2o: num-threads 2), and the row says how the load
spread over them, from the best source each server has:

  tern    its /metrics, read on one keep-alive connection of the driver's
          own (opened before the load, so that its worker is known and
          its own connection and scrapes are taken out):
          tern_worker_requests_total and tern_worker_connections_total
          (differences over the window), tern_worker_open_connections
          (read half-way through the window)
  nginx   its access log, `$pid $msec $connection` a line (buffer=64k
          flush=1s; flushed with SIGUSR1 after the load), the lines of the
          window counted per worker process; and the established
          connections of each worker process (ss -p) half-way through
  h2o     no per-thread request count: the CPU time of each thread
          (/proc/PID/task/TID/stat) over the window, a proxy

Across processes (tern-procs, tern-procs-kernel: reference --processes 2
--workers 1, with --balance least or kernel; balance-keepalive and
balance-churn only): each process x worker is one of the 2 "workers", its
figures from the tern_process_worker_* families of /metrics (every worker
of every process, whichever process answers): tern_process_worker_
open_connections half-way through, tern_process_worker_connections_total
over the window.  The tern_worker_* families give the answering process's
own workers only, so requests per worker are not given across processes.
The server is stopped with SIGTERM to the first process (which stops the
others); a process of its group left after that is killed and reported.

balance-keepalive: wrk -t1 -c64 on GET /.  balance-churn: churn -c16 (a new
connection per request, Connection: close).  balance-stall: h1rate at a
fixed rate over 64 connections, twice on the same server: first every
request GET /, then 1 in 199 of them GET /stall?ms=50 (held on the worker's
thread); the latency of the other requests in the second run against the
first (tern and nginx: nginx's /stall is an embedded Perl handler that
sleeps on its worker process, servers.NGINX_STALL).
"""

import os
import re
import signal
import threading
import time

from . import common, h1client, loads
from .common import BenchError

WORKERS = 2
STALL_MS = 50
STALL_PATH = "/stall?ms=%d" % STALL_MS
# 1 in 199: an odd number, prime to the 64 connections, so that the stall
# requests (h1rate's request i goes to connection i mod 64) rotate over
# every connection instead of landing on 8 of them as 1 in 200 would
STALL_EVERY = 199
STALL_RATE = 1000  # req/s offered by h1rate in both runs of balance-stall
# the servers of the balance rows, and where their per-worker figures come
# from
SERVERS = ("tern-least", "tern-kernel", "tern-reuseport", "nginx",
           "nginx-reuseport", "h2o", "tern-procs", "tern-procs-kernel")
# process mode: 2 processes of 1 worker each (not on balance-stall)
PROC_SERVERS = ("tern-procs", "tern-procs-kernel")
PROC_SCENARIOS = ("balance-keepalive", "balance-churn")
PROC_SOURCE = "tern /metrics, tern_process_worker_* (process x worker)"
SOURCE = {"tern": "tern /metrics",
          "nginx": "access log ($pid) and ss -p",
          "h2o": "thread CPU time (/proc), a proxy"}
NGINX_LOG_FORMAT = "balance '$pid $msec $connection'"

METRIC_RE = re.compile(
    r'^(tern_worker_[a-z_]+)\{worker="(\d+)"\} (\S+)\s*$', re.M)
# process mode: every worker of every process; the key "pP.wW"
PROC_METRIC_RE = re.compile(
    r'^(tern_process_worker_[a-z_]+)\{process="(\d+)",worker="(\d+)"\} '
    r'(\S+)\s*$', re.M)
PROC_OPEN = "tern_process_worker_open_connections"
PROC_TAKEN = "tern_process_worker_connections_total"
SS_PID_RE = re.compile(r"pid=(\d+),")


# ---------------------------------------------------------------------------
# tern: /metrics on one connection of our own

class TernScraper:
    """A keep-alive connection to tern's /metrics, opened while the server
    is idle, so that the worker holding it is the one that shows one open
    connection; that connection, and the requests of the scrapes made on
    it, are taken out of that worker's figures.  procs: process mode,
    the tern_process_worker_* families, keyed "pP.wW" (no requests)."""

    def __init__(self, port, timeout=5.0, procs=False):
        self.procs = procs
        self.open_name = PROC_OPEN if procs else "tern_worker_open_connections"
        self.conn = h1client.Conn(port)
        deadline = time.monotonic() + timeout
        while True:
            # until ours is the only connection (the warm-up's, or the
            # last run's, may still be closing)
            m = self._parse(self.conn.get("/metrics"))
            open_ = m.get(self.open_name, {})
            mine = [w for w, v in open_.items() if v >= 1]
            if sum(open_.values()) == 1 and len(mine) == 1:
                break
            if time.monotonic() > deadline:
                self.conn.close()
                raise BenchError("could not tell which worker holds the "
                                 "scrape connection: open connections %r "
                                 "%.0f s after the warm-up" % (open_, timeout))
            time.sleep(0.1)
        self.worker = mine[0]
        self.first = m
        # scrapes on self.conn from self.first on: tern counts a request
        # once answered, so each but the last falls in the window
        self.scrapes = 1

    def _parse(self, resp):
        status, _, body = resp
        if status != 200:
            raise BenchError("GET /metrics returned %d" % status)
        out = {}
        text = body.decode("utf-8", "replace")
        if self.procs:
            for name, p, w, v in PROC_METRIC_RE.findall(text):
                out.setdefault(name, {})["p%s.w%s" % (p, w)] = float(v)
            if PROC_TAKEN not in out:
                raise BenchError("/metrics has no %s (not in process mode?)"
                                 % PROC_TAKEN)
            return out
        for name, w, v in METRIC_RE.findall(text):
            out.setdefault(name, {})[int(w)] = float(v)
        if "tern_worker_requests_total" not in out:
            raise BenchError("/metrics has no tern_worker_requests_total")
        return out

    def get(self):
        m = self._parse(self.conn.get("/metrics"))
        self.scrapes += 1
        return m

    def open_now(self):
        """Open connections per worker, ours taken out."""
        o = dict(self.get()[self.open_name])
        o[self.worker] -= 1
        return o

    def close(self):
        self.conn.close()


def _diff(a, b, name):
    return {w: b[name].get(w, 0) - a[name].get(w, 0) for w in
            sorted(set(a.get(name, {})) | set(b.get(name, {})))}


# ---------------------------------------------------------------------------
# nginx: the access log and ss

def nginx_log(srv):
    return os.path.join(srv.workdir, "access.log")


def nginx_flush(srv, timeout=3.0):
    """SIGUSR1 to the master: the workers reopen their logs, which writes
    out what their buffers hold; wait until the file stops growing."""
    path = nginx_log(srv)
    try:
        os.kill(srv.proc.pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise BenchError("nginx exited before its log was flushed")
    last, stable = -1, 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and stable < 3:
        time.sleep(0.1)
        try:
            size = os.path.getsize(path)
        except OSError:
            size = -1
        stable = stable + 1 if size == last else 0
        last = size


def nginx_counts(srv, t0, t1):
    """{pid: (requests, distinct connections)} of the log lines whose
    $msec falls in [t0, t1] (wall clock)."""
    reqs, conns = {}, {}
    try:
        with open(nginx_log(srv)) as f:
            for line in f:
                p = line.split()
                if len(p) != 3:
                    continue
                t = float(p[1])
                if t0 <= t <= t1:
                    pid = int(p[0])
                    reqs[pid] = reqs.get(pid, 0) + 1
                    conns.setdefault(pid, set()).add(p[2])
    except OSError as e:
        raise BenchError("nginx's access log: %s" % e)
    return {pid: (reqs[pid], len(conns[pid])) for pid in reqs}


def ss_per_pid(port):
    """Established connections on port per owning process (ss -p)."""
    rc, out = common.cmd_output(["ss", "-Htnp", "state", "established",
                                 "( sport = :%d )" % port], timeout=5)
    if rc != 0:
        return None
    per = {}
    for line in out.splitlines():
        m = SS_PID_RE.search(line)
        if m:
            pid = int(m.group(1))
            per[pid] = per.get(pid, 0) + 1
    return per


def nginx_workers(srv):
    return sorted(p for p in srv.own_pids() if p != srv.proc.pid)


# ---------------------------------------------------------------------------
# threads' CPU time (h2o)

def thread_ticks(pid):
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tids:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, t)) as f:
                rest = f.read().rsplit(")", 1)[1].split()
            out[int(t)] = int(rest[11]) + int(rest[12])
        except (OSError, IndexError, ValueError):
            pass
    return out


# ---------------------------------------------------------------------------

def _shares(counts):
    """counts {worker: n} -> (list of n in worker order, list of % shares,
    max/min or None when a worker had none)."""
    keys = sorted(counts)
    ns = [counts[k] for k in keys]
    total = float(sum(ns))
    shares = [100.0 * n / total if total else 0.0 for n in ns]
    lo = min(ns) if ns else 0
    ratio = max(ns) / float(lo) if ns and lo > 0 else None
    return ns, shares, ratio


def _record(row, what, counts):
    """row[bal_<what>] = {counts, shares, ratio}, and the scalars the
    summary takes medians of."""
    if not counts:
        return
    ns, shares, ratio = _shares(counts)
    row["bal_" + what] = {"workers": sorted(counts), "counts": ns,
                          "shares": [round(s, 2) for s in shares],
                          "ratio": ratio}
    row["bal_%s_ratio" % what] = ratio
    row["bal_%s_share_max" % what] = max(shares)
    if ratio is None and len(ns) > 1:
        row["notes"].append("%s: a worker had none (%s): max/min is "
                            "infinite" % (what, " / ".join(
                                "%g" % n for n in ns)))
    if len(ns) != WORKERS:
        row["problems"].append("%s seen on %d workers, not %d" % (
            what, len(ns), WORKERS))


class MidProbe:
    """One look at the server's connections per worker half-way through
    the window (call(srv) returns {worker: open connections})."""

    def __init__(self, at, call):
        self.at = at
        self.call = call
        self.result = None
        self.error = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.done = threading.Event()

    def start(self):
        self.t.start()
        return self

    def _run(self):
        if self.done.wait(self.at):
            return
        try:
            self.result = self.call()
        except (OSError, BenchError) as e:
            self.error = str(e)

    def finish(self):
        self.done.set()
        self.t.join(10)
        return self.result


def _load(args, workdir, srv, sc, duration, warmup=0, alt=False):
    if sc.load == "wrk":
        return loads.run_wrk(args, workdir, srv.port, duration,
                             sc.connections, sc.path)
    if sc.load == "churn":
        return loads.run_churn(args, workdir, srv.port, duration, warmup,
                               sc.connections, sc.path)
    if sc.load == "h1rate":
        return loads.run_h1rate(
            args, workdir, srv.port, duration, warmup, sc.rate,
            sc.connections, sc.path,
            alt_path=STALL_PATH if alt else None,
            alt_every=STALL_EVERY if alt else None)
    raise ValueError(sc.load)


def measure(args, workdir, srv, kind, sc, row):
    """One balance row on a started server (kind: tern, nginx or h2o) that
    passed its check."""
    procs = srv.name in PROC_SERVERS
    row["bal_source"] = ("access log ($pid)" if kind == "nginx" and
                         sc.per == "connection" else
                         PROC_SOURCE if procs else SOURCE[kind])
    row["workers"] = WORKERS
    if sc.name == "balance-stall":
        status, _, body = h1client.fetch(srv.port, "/stall?ms=1")
        if status != 200 or body != b"stalled":
            raise BenchError("GET /stall?ms=1 returned %d %r" % (status,
                                                                 body[:40]))
    # the warm-up: the scenario's own load, on connections of its own
    # (h1rate warms up on the connections it measures, in each run)
    if args.warmup > 0 and sc.load != "h1rate":
        _load(args, workdir, srv, sc, args.warmup)
    base = None
    if sc.name == "balance-stall":
        # the same run without stalls first, on the same server
        base = _load(args, workdir, srv, sc, args.duration, args.warmup)
        row["base_load"] = {k: v for k, v in base.items() if k != "raw"}
        lat = base.get("latency_us") or {}
        for k in ("p50", "p90", "p99", "p999", "max"):
            row["base_lat_" + k] = lat.get(k)
        row["base_rate"] = base["rate"]
        if base["errors"] or base["non2xx"] or base.get("dropped"):
            row["problems"].append("the run without stalls had %d errors, "
                                   "%d non-2xx, %d dropped" % (
                                       base["errors"], base["non2xx"],
                                       base.get("dropped") or 0))
    scraper = TernScraper(srv.port, procs=procs) if kind == "tern" else None
    pids = srv.pids()
    c0 = common.cpu_ticks(pids)
    th0 = thread_ticks(srv.proc.pid) if kind == "h2o" else None
    m0 = scraper.first if scraper else None
    # half-way through the window (h1rate: its warm-up first)
    lead = args.warmup if sc.load == "h1rate" else 0
    if kind == "tern":
        probe = MidProbe(lead + args.duration / 2.0, scraper.open_now)
    elif kind == "nginx":
        probe = MidProbe(lead + args.duration / 2.0,
                         lambda: ss_per_pid(srv.port))
    else:
        probe = MidProbe(lead + args.duration / 2.0,
                         lambda: {0: sum((ss_per_pid(srv.port) or {})
                                         .values())})
    w0, t0 = time.time(), time.monotonic()
    probe.start()
    try:
        # (churn's own warm-up is the run above: the window is its
        # measured seconds alone, as the per-worker counts are)
        res = _load(args, workdir, srv, sc, args.duration, lead,
                    alt=sc.name == "balance-stall")
    finally:
        mid = probe.finish()
    w1, t1 = time.time(), time.monotonic()
    c1 = common.cpu_ticks(set(pids) | set(srv.pids()))
    wall = t1 - t0
    row["load"] = {k: v for k, v in res.items() if k != "raw"}
    row["load_raw"] = res["raw"]
    n = res["requests"]
    row["requests"] = n
    row["errors"] = res["errors"]
    row["non2xx"] = res["non2xx"]
    row["rate"] = res["rate"]
    row["duration_s"] = res["duration_s"]
    lat = (res.get("latency_us") or {}) if sc.latency else {}
    for k in ("p50", "p90", "p99", "p999", "max"):
        row["lat_" + k] = lat.get(k)
    row["server_cpu_s"] = (c1 - c0) / common.CLK_TCK
    row["server_cpu_util"] = row["server_cpu_s"] / wall if wall else None
    row["cpu_us_per_req"] = (row["server_cpu_s"] * 1e6 / n) if n else None
    row["peak_rss"] = common.hwm_bytes(srv.own_pids())
    row["server_processes"] = len(srv.own_pids())
    if probe.error:
        row["notes"].append("the look half-way through failed: %s"
                            % probe.error)
    if sc.name == "balance-stall":
        j = res["raw"]
        row["alt_requests"] = j.get("alt_requests")
        row["alt_non2xx"] = j.get("alt_non2xx")
        alat = j.get("alt_latency_us") or {}
        for k in ("p50", "p99", "max"):
            row["alt_lat_" + k] = alat.get(k)
        if not j.get("alt_requests"):
            row["problems"].append("h1rate sent no stall request")
        if j.get("alt_non2xx"):
            row["problems"].append("%d stall requests got a non-2xx answer"
                                   % j["alt_non2xx"])
        if j.get("alt_unfinished"):
            row["notes"].append("%d stall requests unanswered at the end"
                                % j["alt_unfinished"])
    # per worker
    if kind == "tern" and procs:
        m1 = scraper.get()
        scraper.close()
        # our scrape connection was open at m0 and m1: counted in neither
        # difference
        taken = _diff(m0, m1, PROC_TAKEN)
        row["bal_scrape_worker"] = scraper.worker
        row["bal_processes"] = sorted({k.split(".")[0] for k in taken})
        if sc.per == "connection":
            _record(row, "conn", taken)
            row["server_connections"] = sum(taken.values())
        else:
            if mid:
                _record(row, "conn", mid)
            row["bal_taken"] = [taken[k] for k in sorted(taken)]
        row["notes"].append(
            "process mode: requests per worker are not available across "
            "processes (tern_worker_requests_total covers the answering "
            "process's own workers only); the per-worker figures are "
            "connections (tern_process_worker_*)")
    elif kind == "tern":
        m1 = scraper.get()
        scraper.close()
        reqs = _diff(m0, m1, "tern_worker_requests_total")
        # the scrapes on our connection before the last one (each counts
        # once answered)
        reqs[scraper.worker] -= scraper.scrapes - 1
        taken = _diff(m0, m1, "tern_worker_connections_total")
        handed = _diff(m0, m1, "tern_worker_connections_handed_in_total")
        row["bal_handed_in"] = [handed[w] for w in sorted(handed)]
        row["bal_scrape_worker"] = scraper.worker
        _record(row, "req", reqs)
        if sc.per == "connection":
            _record(row, "conn", taken)
        elif mid:
            _record(row, "conn", mid)
        total_taken = sum(taken.values())
        if sc.per == "connection":
            row["server_connections"] = total_taken
        row["server_requests"] = sum(reqs.values())
    elif kind == "nginx":
        nginx_flush(srv)
        per = nginx_counts(srv, w0, w1)
        workers = nginx_workers(srv)
        row["bal_pids"] = workers
        for p in workers:  # a worker that served nothing still counts
            per.setdefault(p, (0, 0))
        stray = [p for p in per if p not in workers]
        if stray:
            row["problems"].append("log lines from processes %s that are "
                                   "not nginx's workers" % stray)
        _record(row, "req", {p: per[p][0] for p in workers})
        if sc.per == "connection":
            # one request per connection: the log's count is connections
            _record(row, "conn", {p: per[p][1] for p in workers})
        elif mid is not None:
            _record(row, "conn", {p: mid.get(p, 0) for p in workers})
        row["server_requests"] = sum(per[p][0] for p in workers)
        row["bal_log_conns"] = [per[p][1] for p in workers]
    else:
        th1 = thread_ticks(srv.proc.pid)
        used = {t: th1[t] - th0.get(t, 0) for t in th1}
        total = sum(used.values())
        busy = {t: v for t, v in used.items() if total and v >= 0.02 * total}
        row["bal_thread_ticks"] = used
        if len(busy) > WORKERS:
            row["notes"].append("%d threads used CPU, not %d" % (
                len(busy), WORKERS))
        # the two busiest: h2o's event loop threads
        top = dict(sorted(busy.items(), key=lambda kv: -kv[1])[:WORKERS])
        for t in used:
            if len(top) < WORKERS and t not in top:
                top[t] = used[t]
        _record(row, "cpu", top)
        if mid:
            row["bal_open_total"] = mid.get(0)
        row["notes"].append(
            "h2o 2.2.5 has no per-thread request or connection count: the "
            "per-thread figures are CPU time (/proc/PID/task/TID/stat), a "
            "proxy for the requests each thread served")
    if sc.per == "connection" or procs:
        share = row.get("bal_conn_ratio")
    else:
        share = row.get("bal_req_ratio")
    row["bal_ratio"] = share if share is not None else row.get(
        "bal_cpu_ratio")
    row["bal_text"] = brief(row)
    common.load_problems(row, res, n)
    if res.get("dropped"):
        row["problems"].append("%d requests dropped (no connection)"
                               % res["dropped"])
    if res.get("exit_status"):
        row["problems"].append("%s exited %s" % (res["tool"],
                                                  res["exit_status"]))
    if row["problems"]:
        row["status"] = "invalid"


def shares_text(b, fmt="{:,.0f}"):
    """'32 / 32 (50.0 / 50.0 %)' of a row's bal_* entry."""
    if not b:
        return "n/a"
    return "%s (%s %%)" % (" / ".join(fmt.format(n) for n in b["counts"]),
                           " / ".join("%.1f" % s for s in b["shares"]))


def ratio_text(r, counts=None):
    if r is None:
        return "∞" if counts else "n/a"
    return "%.2f" % r


def brief(row):
    parts = []
    for what, label in (("conn", "connections"), ("req", "requests"),
                        ("cpu", "thread CPU")):
        b = row.get("bal_" + what)
        if b:
            parts.append("%s %s, max/min %s" % (
                label, shares_text(b, "{:,.0f}" if what != "cpu"
                                   else "{:,.0f} ticks"),
                ratio_text(b["ratio"], b["counts"])))
    return "; ".join(parts)
