"""Medians over rounds, Markdown tables, targets."""

import re
import statistics

from . import common

# client CPU utilisation (of its one core) above which a closed-loop
# upload's MiB/s is the load generator's limit (perf/driver/measure.py)
CLIENT_BOUND = 0.9


# every per-row number that gets a median (min-max)
KEYS = ("rate", "requests", "errors", "non2xx", "server_cpu_s",
        "cpu_us_per_req", "server_cpu_util", "client_cpu_util",
        "allocs_per_req", "bytes_per_req", "shim_allocs_per_req",
        "shim_bytes_per_req", "peak_rss", "lat_p50", "lat_p90", "lat_p99",
        "lat_p999", "lat_max", "rate_target", "rss_per_conn", "heap_per_conn",
        "shim_heap_per_conn", "shim_allocs_per_conn", "allocs_per_conn",
        "held", "rss_before", "rss_with_idle", "live_blocks_per_conn",
        "mib_per_s", "cpu_us_per_mib", "allocs_per_mib", "bytes_per_mib",
        "shim_allocs_per_mib", "shim_bytes_per_mib")
KEYS += ("ws_wire_out_per_msg", "ws_wire_in_per_msg")  # ws-echo*
KEYS += ("resumed_pct", "handshakes_full", "handshakes_resumed")  # tls-*
KEYS += ("server_bytes_in", "wire_mib")  # *-rtt50
KEYS += ("server_threads", "redis_cpu_us_per_req")  # db-*
KEYS += ("bal_ratio", "bal_req_ratio", "bal_conn_ratio", "bal_cpu_ratio",
         "bal_req_share_max", "bal_conn_share_max", "base_rate",
         "base_lat_p50", "base_lat_p90", "base_lat_p99", "base_lat_p999",
         "alt_requests", "alt_lat_p50", "alt_lat_p99", "alt_lat_max",
         "server_requests", "server_connections")  # balance-*
# the balance rows' per-worker figures, one dict per valid round
BALANCE_FIELDS = ("bal_conn", "bal_req", "bal_cpu", "bal_handed_in",
                  "bal_open_total", "bal_source")


def summarize(rows, servers, scenarios):
    """{scenario: {server: cell}}; a cell has status ok|invalid|n/a, runs,
    valid_runs, problems, notes and {key: {median, min, max}}."""
    out = {}
    for sc in scenarios:
        out[sc] = {}
        for name in servers:
            mine = [r for r in rows if r["scenario"] == sc and r["server"] == name]
            ok = [r for r in mine if r["status"] == "ok"]
            cell = {"runs": len(mine), "valid_runs": len(ok), "values": {}}
            if not mine:
                cell["status"] = "not run"
            elif ok:
                cell["status"] = "ok"
            elif all(r["status"] == "n/a" for r in mine):
                cell["status"] = "n/a"
            else:
                cell["status"] = "invalid"
            probs, notes = [], []
            for r in mine:
                for p in r.get("problems", []):
                    p = _tidy(p)
                    if p not in probs:
                        probs.append(p)
                for p in r.get("notes", []):
                    p = _tidy(p)
                    if p not in notes:
                        notes.append(p)
            cell["problems"], cell["notes"] = probs, notes
            tls = sorted({r["tls"] for r in ok if r.get("tls")})
            if tls:
                cell["tls"] = tls
            bal = [{k: r.get(k) for k in BALANCE_FIELDS} for r in ok
                   if r.get("bal_source")]
            if bal:
                cell["balance"] = bal
            for k in KEYS:
                xs = [r[k] for r in ok if r.get(k) is not None]
                if xs:
                    cell["values"][k] = {"median": statistics.median(xs),
                                         "min": min(xs), "max": max(xs)}
            out[sc][name] = cell
    return out


def _tidy(msg):
    """One line, ports hidden (so that rounds' messages merge)."""
    msg = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", msg)
    return " ".join(msg.split())


def val(cell, key, which="median"):
    if cell is None or cell.get("status") != "ok":
        return None
    v = cell["values"].get(key)
    return v[which] if v else None


# ---------------------------------------------------------------------------
# formatting

def fmt_value(v, spec):
    if v is None:
        return "n/a"
    if spec == "bytes":
        return common.human_bytes(v)
    if spec == "bytes0":
        return "{:,.0f} B".format(v)
    return format(v, spec)


def fmt_cell(cell, key, spec, rng=True):
    st = cell.get("status") if cell else "not run"
    if st == "n/a":
        return "n/a"
    if st == "invalid":
        return "**invalid**"
    if st == "not run":
        return "-"
    v = cell["values"].get(key)
    if v is None:
        return "n/a"
    s = fmt_value(v["median"], spec)
    lo, hi = fmt_value(v["min"], spec), fmt_value(v["max"], spec)
    if rng and cell["valid_runs"] > 1 and lo != hi:
        s += " (%s–%s)" % (lo, hi)
    return s


def table(header, rows, align=None):
    align = align or (["---"] + ["---:"] * (len(header) - 1))
    L = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        L.append("| " + " | ".join(r) + " |")
    return L


# ---------------------------------------------------------------------------
# targets (shared/design/performance.md, "Targets")

PEERS = ("nginx", "h2o", "libh2o", "mhd", "civetweb", "nghttpd")


def targets(summary, servers, rate=None):
    """[(target text, measured text, verdict)]"""
    T = []

    def cell(sc, name):
        return summary.get(sc, {}).get(name)

    def verdict(ok):
        return "n/a" if ok is None else ("PASS" if ok else "FAIL")

    peers = [p for p in PEERS if p in servers]
    if "h1-get" in summary and "tern" in servers:
        t = val(cell("h1-get", "tern"), "cpu_us_per_req")
        f = val(cell("h1-get", "floor"), "cpu_us_per_req")
        if "floor" in servers:
            r = t / f if t and f else None
            T.append(("h1-get: tern server CPU/request <= 1.15 x floor",
                      "%.2f x" % r if r else "n/a",
                      verdict(None if r is None else r <= 1.15)))
        if peers:
            pv = {p: val(cell("h1-get", p), "cpu_us_per_req") for p in peers
                  if (cell("h1-get", p) or {}).get("status") != "n/a"}
            known = {p: v for p, v in pv.items() if v}
            if t and known:
                best = min(known, key=known.get)
                ok = all(t < v for v in known.values())
                T.append(("h1-get: tern server CPU/request below every peer",
                          "tern %.2f µs, best peer %s %.2f µs%s" % (
                              t, best, known[best],
                              "" if len(known) == len(pv) else
                              " (no figure for %s)" % ", ".join(
                                  p for p in pv if p not in known)),
                          verdict(ok)))
    if "h1-pipelined" in summary and "tern" in servers:
        t = val(cell("h1-pipelined", "tern"), "rate")
        if peers:
            known = {p: val(cell("h1-pipelined", p), "rate") for p in peers}
            known = {p: v for p, v in known.items() if v}
            if t and known:
                best = max(known, key=known.get)
                r = t / known[best]
                T.append(("h1-pipelined: tern req/s >= 5 x the best peer",
                          "%.2f x %s" % (r, best), verdict(r >= 5)))
        if "floor" in servers:
            f = val(cell("h1-pipelined", "floor"), "rate")
            r = t / f if t and f else None
            T.append(("h1-pipelined: tern req/s >= 0.6 x floor",
                      "%.2f x" % r if r else "n/a",
                      verdict(None if r is None else r >= 0.6)))
    if "tern" in servers:
        for sc in ("h1-get", "h1-pipelined", "app-routed"):
            if sc not in summary:
                continue
            c = cell(sc, "tern")
            own = val(c, "allocs_per_req")
            shim = val(c, "shim_allocs_per_req")
            v = own if own is not None else shim
            T.append(("%s: 0 heap allocations per keep-alive request (tern)" % sc,
                      "n/a" if v is None else "%.4f /req (/stats %s, shim %s)" % (
                          v, fmt_value(own, ".4f"), fmt_value(shim, ".4f")),
                      verdict(None if v is None else v < 0.01)))
        if "idle-conns" in summary:
            c = cell("idle-conns", "tern")
            h = val(c, "heap_per_conn")
            if h is None:
                h = val(c, "shim_heap_per_conn")
            T.append(("idle-conns: under 1 KiB of heap per idle connection (tern)",
                      "n/a" if h is None else "%.0f B heap allocated per conn "
                      "(%s blocks still live), RSS %s B per conn" % (
                          h, fmt_value(val(c, "live_blocks_per_conn"), ".2f"),
                          fmt_value(val(c, "rss_per_conn"), ",.0f")),
                      verdict(None if h is None else h < 1024)))
    T += balance_targets(summary, servers)
    if "tern" in servers:
        T += h2_targets(summary, servers)
        T += ws_targets(summary, servers)
        T += h3_targets(summary, servers)
    T += tls_targets(summary, servers)
    return T


def balance_targets(summary, servers):
    """balance-keepalive: max/min requests per worker <= 1.1 for tern's
    default policy (tern-least), issue 35's target under keep-alive load;
    the other policies' ratios are given beside it. balance-churn's
    ratios are reported in its table, with no target (the issue sets
    none for churn)."""
    from .scenarios import BALANCE_RATIO_TARGET as LIMIT
    T = []
    for sc, what, key in (("balance-keepalive", "requests", "bal_req_ratio"),):
        if sc not in summary or "tern-least" not in servers:
            continue
        c = summary[sc].get("tern-least")
        v = val(c, key)
        others = ", ".join(
            "%s %s" % (t, fmt_value(val(summary[sc].get(t), key), ".2f"))
            for t in ("tern-kernel", "tern-reuseport") if t in servers)
        zero = c is not None and c.get("status") == "ok" and v is None
        T.append(("%s: tern-least max/min %s per worker <= %.1f" % (
            sc, what, LIMIT),
            ("∞ (a worker had none)" if zero else "n/a") if v is None else
            "%.2f%s" % (v, " (%s)" % others if others else ""),
            "FAIL" if zero else "n/a" if v is None else
            ("PASS" if v <= LIMIT else "FAIL")))
    return T


def tls_targets(summary, servers):
    """tls-handshake, tls-resume: server CPU per connection (one handshake
    each) at or below nginx's, for each engine's tern row."""
    T = []
    for sc, kind in (("tls-handshake", "full"), ("tls-resume", "resumed")):
        if sc not in summary or "nginx" not in servers:
            continue
        n = val(summary[sc].get("nginx"), "cpu_us_per_req")
        for t in ("tern", "tern-mbedtls"):
            if t not in servers:
                continue
            v = val(summary[sc].get(t), "cpu_us_per_req")
            r = v / n if v and n else None
            T.append(("%s: %s server CPU per %s handshake <= nginx"
                      % (sc, t, kind),
                      "%.2f x (%s %.1f µs, nginx %.1f µs)" % (r, t, v, n)
                      if r else "n/a",
                      "n/a" if r is None else ("PASS" if r <= 1 else "FAIL")))
    return T


def ws_targets(summary, servers):
    """ws-echo: tern msgs/s >= 2 x libwebsockets (and, as the figure that
    the client's own limit does not cap, server CPU per message)."""
    T = []
    if "ws-echo" not in summary or "libwebsockets" not in servers:
        return T
    t = summary["ws-echo"].get("tern")
    p = summary["ws-echo"].get("libwebsockets")
    r = val(t, "rate")
    lr = val(p, "rate")
    ratio = r / lr if r and lr else None
    tc, lc = val(t, "cpu_us_per_req"), val(p, "cpu_us_per_req")
    T.append(("ws-echo: tern msg/s >= 2 x libwebsockets",
              "%.2f x (tern %s, libwebsockets %s msg/s; server CPU per "
              "message %s vs %s µs, %s x less)" % (
                  ratio, fmt_value(r, ",.0f"), fmt_value(lr, ",.0f"),
                  fmt_value(tc, ".2f"), fmt_value(lc, ".2f"),
                  "%.2f" % (lc / tc) if tc and lc else "n/a")
              if ratio else "n/a",
              "n/a" if ratio is None else ("PASS" if ratio >= 2 else "FAIL")))
    return T


def h2_targets(summary, servers):
    T = []

    def verdict(ok):
        return "n/a" if ok is None else ("PASS" if ok else "FAIL")

    def cell(sc, name):
        return summary.get(sc, {}).get(name)

    if "h2-get" in summary and "h2o" in servers:
        t = val(cell("h2-get", "tern"), "rate")
        h = val(cell("h2-get", "h2o"), "rate")
        r = t / h if t and h else None
        T.append(("h2-get: tern req/s >= 1.2 x h2o",
                  "%.2f x (tern %s, h2o %s req/s)" % (r, fmt_value(t, ",.0f"),
                                                     fmt_value(h, ",.0f"))
                  if r else "n/a", verdict(None if r is None else r >= 1.2)))
    for sc in ("h2-get", "h2-get-browser"):
        if sc not in summary:
            continue
        c = cell(sc, "tern")
        own = val(c, "bytes_per_req")
        shim = val(c, "shim_bytes_per_req")
        v = own if own is not None else shim
        T.append(("%s: under 256 bytes allocated per request (tern)" % sc,
                  "n/a" if v is None else "%.0f B/req (/stats %s, shim %s)" % (
                      v, fmt_value(own, ",.0f"), fmt_value(shim, ",.0f")),
                  verdict(None if v is None else v < 256)))
    def upload(sc):
        c = cell(sc, "tern")
        v = val(c, "mib_per_s")
        if v is None:
            return None, "n/a"
        cu = val(c, "client_cpu_util")
        return v, "%s MiB/s%s" % (
            fmt_value(v, ",.0f"),
            " (h2load at %.0f %% of its core: bound by the load generator)"
            % (100 * cu) if cu is not None and cu > CLIENT_BOUND else "")

    if "h2-upload" in summary:
        v, text = upload("h2-upload")
        T.append(("h2-upload: over 1 GiB/s on loopback (tern)", text,
                  verdict(None if v is None else v > 1024)))
    if "h2c-upload" in summary:
        v, text = upload("h2c-upload")
        T.append(("h2c-upload: at least 1 GiB/s on loopback (tern)", text,
                  verdict(None if v is None else v >= 1024)))
    return T


def h3_targets(summary, servers):
    """h3-get, h3-get-browser >= 1.5 x gtlsserver req/s with 0 tern
    allocations per request; h3-upload-4 >= 1.5 x gtlsserver MiB/s; at
    50 ms RTT, windows growing >= 10 x pinned; ws-echo-h3 server CPU per
    message <= 1.5 x ws-echo's."""
    from .scenarios import RTT50
    T = []

    def verdict(ok):
        return "n/a" if ok is None else ("PASS" if ok else "FAIL")

    def cell(sc, name):
        return summary.get(sc, {}).get(name)

    for sc, key, unit in (("h3-get", "rate", "req/s"),
                          ("h3-get-browser", "rate", "req/s"),
                          ("h3-upload-4", "mib_per_s", "MiB/s")):
        if sc not in summary:
            continue
        if "gtlsserver" in servers:
            t = val(cell(sc, "tern"), key)
            g = val(cell(sc, "gtlsserver"), key)
            r = t / g if t and g else None
            T.append(("%s: tern %s >= 1.5 x gtlsserver" % (sc, unit),
                      "%.2f x (tern %s, gtlsserver %s %s)" % (
                          r, fmt_value(t, ",.0f"), fmt_value(g, ",.0f"), unit)
                      if r else "n/a", verdict(None if r is None else r >= 1.5)))
        if key == "rate":
            c = cell(sc, "tern")
            own, shim = val(c, "allocs_per_req"), val(c, "shim_allocs_per_req")
            T.append(("%s: 0 heap allocations per request (tern /stats)" % sc,
                      "n/a" if own is None else
                      "%.4f /req (/stats), shim %s /req, %s B/req" % (
                          own, fmt_value(shim, ".4f"),
                          fmt_value(val(c, "shim_bytes_per_req"), ",.0f")),
                      verdict(None if own is None else own < 0.01)))
            v = val(c, "shim_bytes_per_req")
            T.append(("%s: under 512 B allocated per request (tern, the "
                      "shim: GnuTLS's included)" % sc,
                      "n/a" if v is None else "%.0f B/req (/stats %s)" % (
                          v, fmt_value(val(c, "bytes_per_req"), ",.0f")),
                      verdict(None if v is None else v < 512)))
    for base, grow, pin in RTT50:
        if grow not in summary and pin not in summary:
            continue
        g = val(cell(grow, "tern"), "mib_per_s")
        p = val(cell(pin, "tern"), "mib_per_s")
        r = g / p if g and p else None
        T.append(("%s at 50 ms RTT: windows growing >= 10 x pinned (tern)"
                  % base, "%.1f x (%s vs %s MiB/s received)" % (
                      r, fmt_value(g, ",.1f"), fmt_value(p, ",.2f"))
                  if r else "n/a", verdict(None if r is None else r >= 10)))
    if "ws-echo-h3" in summary:
        t = val(cell("ws-echo-h3", "tern"), "cpu_us_per_req")
        h = val(cell("ws-echo", "tern"), "cpu_us_per_req")
        r = t / h if t and h else None
        T.append(("ws-echo-h3: tern server CPU per message <= 1.5 x "
                  "ws-echo's (HTTP/1.1)",
                  "%.2f x (%s vs %s µs)" % (r, fmt_value(t, ".2f"),
                                            fmt_value(h, ".2f"))
                  if r else "n/a" if "ws-echo" in summary else
                  "n/a (ws-echo not in this run)",
                  verdict(None if r is None else r <= 1.5)))
    return T


NOT_YET = [
    "HTTP/3 req/s linear in workers: not measured yet (every row runs "
    "reference --workers 1, on one core)",
]
