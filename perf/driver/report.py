"""Markdown reports of `perf run` and `perf compare`, the compare charts,
and the generated section of docs/performance.md."""

import os
import re
import shutil

from . import svg
from .scenarios import REGISTRY, SWEEP, PROTOCOLS, TABLES, RTT50
from .servers import SERVERS
from .summary import fmt_cell, fmt_value, table, targets, val, NOT_YET
from .summary import CLIENT_BOUND

CAVEATS = [
    "Two shared cores: the server is pinned to one CPU and the load generator "
    "to the other, so a server that needs less CPU per request leaves no more "
    "room for the client: closed-loop req/s on `h1-get` is bound by wrk, and "
    "the figure that tells servers apart there is server CPU per request.",
    "wrk (h1-get, h1-pipelined, app-routed, the sweep) and churn are closed "
    "loop: each connection waits for its answer before sending again, so "
    "their latency hides queueing (coordinated omission). h1-get-rate is the "
    "open-model measurement: h1rate sends at a fixed rate and measures from "
    "the intended send time.",
    "Every server runs under the LD_PRELOAD allocation shim (it counts "
    "malloc/calloc/realloc/free with atomic counters), so every server pays "
    "the same small per-allocation overhead; servers that allocate more per "
    "request pay more of it.",
    "Each server runs one worker on one CPU (nginx: a master and one worker; "
    "the master's CPU and RSS are counted too). Throughput is reported, never "
    "gated: rely on CPU per request and allocations, which move less on a "
    "noisy machine.",
    "Peak RSS is VmHWM summed over the server's processes for one scenario "
    "(a fresh process per scenario); it includes the warm-up.",
]


def title_of(sc, config):
    return REGISTRY[sc].title.format(rate="{:,}".format(int(config["rate"])),
                                     idle="{:,}".format(config["idle_conns"]))


TLS_CAVEATS = [
    "TLS scenarios: every server uses the same self-signed ECDSA P-256 "
    "certificate, made by openssl at the start of the run. tern's default "
    "engine, GnuTLS 3.7.9, negotiates TLS 1.3, and so do h2o and nghttpd "
    "(OpenSSL), and nginx 1.22, configured with ssl_protocols TLSv1.2 "
    "TLSv1.3 (its default stops at 1.2); the tern-mbedtls row (mbedTLS "
    "2.28) speaks TLS 1.2 only. The cipher "
    "the client and server settle on differs too (AES-128-GCM or "
    "AES-256-GCM): the negotiated protocol and cipher of each server are "
    "listed under the TLS tables. "
    "In h1-tls-get and h2-*, connections are made once per run (closed "
    "loop on kept-alive connections), so the handshake weighs little; "
    "record encryption is on every response.",
    "h1-tls-get: wrk has no warm-up on its own connections (the warm-up is "
    "a separate wrk run), so the measured window includes the 64 TLS "
    "handshakes of the measured run's connections: their CPU and their "
    "allocations (made by the TLS engine with the C library, outside "
    "tern's allocator hook: GnuTLS about a hundred blocks per handshake, "
    "mbedTLS 2.28's bignum code thousands of small ones) are spread over "
    "the window's requests; the longer --duration, the less they weigh. "
    "h2load (h2-*) warms up on the connections it measures: no handshake "
    "falls in its windows.",
    "tern's own counters (/stats) do not see what the TLS engine "
    "allocates with the C library; the shim does. GnuTLS (tern's default "
    "engine) allocates per record received, roughly 5 blocks of about "
    "16.7 KiB each (some 5,000 allocations and 85 MB per 16 MiB upload), "
    "and per handshake; mbedTLS (tern-mbedtls) allocates its record "
    "buffers once per connection and thousands of small blocks per "
    "handshake. So on TLS rows tern's /stats and shim figures differ by "
    "the engine's allocations: /stats is tern's own, the shim what the "
    "process allocated.",
    "h2load (h2-*) is closed loop, 8 connections x 32 streams for the GETs; "
    "its warm-up runs on the same connections and the server's counters "
    "(CPU, allocations) are read when h2load starts its main duration and "
    "after it ends. h2load reports no latency percentiles, so the HTTP/2 "
    "tables have none.",
    "Uploads (h2-upload, h2-upload-4 over TLS; h2c-upload, h2c-upload-4 "
    "over cleartext HTTP/2 with prior knowledge): 16 MiB bodies; MiB/s = "
    "req/s x 16. "
    "tern's and h2o's sinks answer the byte count they read (checked: "
    "16777216; the reference server counts it in 8 bytes it callocs per "
    "upload, which the shim sees and tern's /stats does not); nginx reads "
    "the body into "
    "one 16 MiB memory buffer first "
    "(echo module's echo_read_request_body: nginx's plain `return` would "
    "discard the body and, on HTTP/2, answer before it had arrived), so "
    "its allocations include that buffer; h2o 2.2.5 buffers the whole body "
    "before its mruby handler runs; nghttpd reads and drops the body and "
    "answers with a static file once it has all arrived (curl checks that "
    "the whole body was sent before the answer). nghttpd runs with 8 MiB "
    "stream / 16 MiB connection windows (-w 23 -W 24, tern's maxima) "
    "instead of its 64 KiB defaults (and --no-tls for h2c). h2c goes to "
    "each server's cleartext port: tern's and h2o's HTTP/1.1 port take the "
    "HTTP/2 connection preface as it comes; nginx 1.22 gets a second "
    "listener marked http2 (such a listener speaks h2c with prior "
    "knowledge only and refuses HTTP/1.1). h2load runs one thread on one "
    "core: where it used more than 90 % of it, MiB/s is its limit (\"bound "
    "by the load generator\" in the tables and notes) and server CPU per "
    "MiB is the figure that tells the servers apart.",
    "tls-handshake, tls-resume: churn (perf/load/churn.c, GnuTLS) makes a "
    "new TLS connection per request, 16 at a time, closed loop, on one "
    "core: connect, handshake (SNI localhost, ALPN http/1.1, the "
    "certificate not verified), one GET with Connection: close, the whole "
    "response, close_notify, close. Its own side of every handshake "
    "(key shares, the key exchange, the signature check) costs about as "
    "much as the server's, so connections/s is bound by the client's core "
    "as much as by the server's: server CPU per connection is the figure. tls-handshake offers no session, so "
    "each is a full handshake, though servers still send the tickets a new "
    "client gets (their cost is in the figure); tls-resume offers each "
    "slot's last session and is invalid under 95 % resumed. Each server "
    "negotiates the highest version it speaks up to the cap (TLS 1.3 "
    "unless perf/perf --tls-max sets another): the TLS column says what "
    "churn got.",
    "nghttpd serves files: GET / answers index.html (`Hello, World!`, "
    "content-type text/html, not text/plain); its body is checked exactly.",
]


WS_CAVEATS = [
    "ws-echo: wsload (perf/load/wsload.c) is closed loop on one core: 64 "
    "sockets, 8 messages in flight on each; every echo is compared byte for "
    "byte, and in order, with what its socket sent, and any mismatch, "
    "protocol error or closed socket makes the row invalid. Its warm-up runs "
    "on the sockets it measures, and the server's counters (CPU, "
    "allocations, /stats) are read when wsload starts its measured window "
    "and after it ends: the 64 upgrades fall outside. On two cores the "
    "client's one core (mostly the kernel's loopback send and receive) "
    "can cap msg/s, as wrk caps h1-get: server CPU per message is the "
    "figure the client does not cap.",
    "ws-echo-deflate: wsload compresses with zlib level 6 and context "
    "takeover, so its repetitive messages shrink to a few bytes; each "
    "server compresses its echoes with its own settings (bytes on the wire "
    "per message are listed). libwebsockets 4.1.6 runs its own "
    "permessage-deflate extension with 64 KiB deflate and inflate buffers "
    "instead of its 1 KiB defaults, with which it aborts on an assertion "
    "once a message inflates past about 4 KiB (perf/peers/lws_echo.c).",
]


H3_CAVEATS = [
    "HTTP/3 (h3-*): h3load (perf/load/h3load.c: ngtcp2 0.12.1 + nghttp3 "
    "0.8.0 + GnuTLS, one thread, one connected UDP socket per QUIC "
    "connection) is closed loop, 4 connections x 32 streams for the GETs, "
    "on each server's QUIC port with the run's certificate (TLS 1.3 is "
    "QUIC's; ALPN h3). It warms up on the connections it measures and "
    "prints when its window starts: the server's counters are read then "
    "and when it ends, so no handshake falls in the window. It checks the "
    "status and the body of every response (a mismatch is an error: the "
    "row is invalid with any), and closes gracefully, so the server counts "
    "every response. Before the load, gtlsclient (ngtcp2's example client) "
    "fetches one response and its status and body are checked (without "
    "h3-get-browser's extra fields, which gtlsclient cannot send).",
    "gtlsserver is ngtcp2's example server (Debian ngtcp2-server 0.12.1, "
    "GnuTLS, C++, one thread), run with -q and a docroot: GET / answers "
    "index.html (`Hello, World!`, content-type text/html); POST /upload is "
    "read to its end and dropped, and answered with the file `upload` "
    "(`Hello, World!`) once the request's stream has ended (it cannot "
    "count the bytes; tern's answer is the count it read). Its receive "
    "windows grow to tern's maxima (--max-stream-window=8M "
    "--max-window=16M instead of its 6 MiB defaults). It is pinned to the "
    "server CPU like every server and runs under the same shim.",
    "HTTP/3 uploads: MiB/s = completed 16 MiB uploads x 16 / s, as for "
    "h2-upload; h3load's JSON also has the upload bytes of the window "
    "(h3load_bytes_up in summary.json).",
]

WS_H3_CAVEATS = [
    "ws-echo-h3: h3load --ws opens one WebSocket per stream with the "
    "extended CONNECT of RFC 9220 (:protocol websocket) on /ws, 64 QUIC "
    "connections x 1 stream x 8 messages of 128 B in flight, every echo "
    "checked byte for byte and in order; tern only (gtlsserver has no "
    "extended CONNECT). Its server CPU per message is compared with "
    "ws-echo's (WebSocket over HTTP/1.1, wsload, 64 sockets x 8) of the "
    "same run.",
]

RTT50_CAVEATS = [
    "50 ms RTT rows (*-rtt50, *-rtt50-pinned): the relay "
    "(perf/load/relay.c, one thread, on the load generator's CPU) sits "
    "between the load generator and tern and delays every TCP byte "
    "(h2-*, --tcp) or UDP datagram (h3-*, --udp) by 25 ms each way, "
    "order kept: 50 ms added to the loopback round trip. Each upload runs "
    "twice, tern's receive windows growing (the default: to 8 MiB per "
    "stream, 16 MiB per connection) and pinned at their initial sizes "
    "(reference --max-stream-window 65536 --max-conn-window 1048576). A "
    "pinned stream window moves 64 KiB per round trip (about 1.3 MiB/s), "
    "so a 16 MiB upload takes some 12 s: these rows measure at least "
    "20 s (--duration, when longer), and MiB/s is the bytes tern "
    "received in the measured window (its /stats bytes_in: TLS records "
    "or QUIC packets with their framing, a few per cent above the body "
    "bytes) over the window's seconds, not completed uploads, which "
    "would measure the window's edges. Completed uploads are listed; "
    "every row must complete at least one, with no error.",
]


BALANCE_CAVEATS = [
    "Balance rows (balance-*): every server runs 2 workers, pinned like "
    "every server to the server CPU list (by default one core: the two "
    "workers share it, and the kernel's choice of which to wake is made "
    "among threads of one core; --server-cpu 0,1 spreads them, over the "
    "load generator's core too). tern-least, tern-kernel and "
    "tern-reuseport are the reference server with --workers 2 and "
    "--balance least (the default), kernel or reuseport; their per-worker figures are tern's /metrics "
    "(tern_worker_requests_total and tern_worker_connections_total over "
    "the window, tern_worker_open_connections half-way through), read on "
    "one keep-alive connection of the driver's, opened before the load "
    "while the server is idle so that its worker is known: that "
    "connection and its scrapes are taken out. tern-procs and "
    "tern-procs-kernel run --processes 2 --workers 1 (--balance least or "
    "kernel): each process x worker (pP.wW) is a worker, its figures "
    "from tern_process_worker_open_connections (half-way through) and "
    "tern_process_worker_connections_total (over the window); requests "
    "per worker are not available across processes, so they give "
    "connections only. nginx runs "
    "worker_processes 2 with its default shared listening socket "
    "(accept_mutex off, multi_accept on as in every nginx row) or, as "
    "nginx-reuseport, a socket per worker; its requests per worker are "
    "the lines of an access log (`$pid $msec $connection`, buffer=64k "
    "flush=1s, flushed with SIGUSR1 after the load) whose time falls in "
    "the window, and its open connections per worker come from ss -p "
    "half-way through: the log costs nginx a little CPU that its other "
    "rows do not pay. h2o 2.2.5 (num-threads 2) counts nothing per "
    "thread: its rows give each thread's CPU time (/proc), a proxy.",
    "balance-stall: h1rate (open model, latency from the intended send "
    "time) at 1,000 req/s over 64 connections, run twice on the same "
    "server: every request GET /, then 1 in 199 GET /stall?ms=50 (the "
    "reference server sleeps 50 ms on the worker's thread; nginx, an "
    "embedded Perl handler on its worker process). 199 is prime "
    "to 64, so the stalls rotate over every connection and fall on each "
    "worker in proportion to the connections it holds. The other "
    "requests' latency is reported apart from the stall requests'. All "
    "64 connections are opened before the stalls begin, so the policy "
    "decides only how they were split; the per-worker counts of the "
    "stalled run cover h1rate's warm-up on the same connections too.",
]


def caveats(env):
    out = list(CAVEATS)
    if not env["config"].get("shim"):
        out[2] = ("No allocation shim was found (build/perf/alloc): peers have "
                  "no allocation figures; tern's come from its own counters.")
    scs = [REGISTRY[s] for s in env["config"].get("scenarios", []) if s in REGISTRY]
    # the TLS-over-TCP caveats are not HTTP/3's (h3-* has its own below)
    tcp = [s for s in scs if s.protocol not in ("h3", "ws-h3")]
    if any(s.tls for s in tcp):
        out.append(TLS_CAVEATS[0])
    if any(s.tls and s.load == "wrk" for s in scs):
        out.append(TLS_CAVEATS[1])
    if any(s.tls for s in scs):
        out.append(TLS_CAVEATS[2])
    if any(s.load == "h2load" for s in scs):
        out.append(TLS_CAVEATS[3])
    if any(s.upload for s in tcp):
        out.append(TLS_CAVEATS[4])
    if any(s.load == "churn" and s.tls for s in scs):
        out.append(TLS_CAVEATS[5])
    if any(s.protocol == "h2" for s in scs) and \
            "nghttpd" in env["config"].get("servers", []):
        out.append(TLS_CAVEATS[6])
    if any(s.load == "wsload" for s in scs):
        out += WS_CAVEATS
    if any(s.protocol == "h3" for s in scs):
        out += H3_CAVEATS if "gtlsserver" in env["config"].get(
            "servers", []) else [H3_CAVEATS[0], H3_CAVEATS[2]]
    if any(s.protocol == "ws-h3" for s in scs):
        out += WS_H3_CAVEATS
    if any(s.relay_ms for s in scs):
        out += RTT50_CAVEATS
    if any(s.balance for s in scs):
        out += BALANCE_CAVEATS if "balance-stall" in [s.name for s in scs] \
            else BALANCE_CAVEATS[:1]
    return out


def _env_lines(env):
    L = []
    L.append("- date: %s, revision %s" % (env["date"], env["git_revision"]))
    L.append("- CPU: %s x %s, kernel %s; compiler: %s" % (
        env["cpu_model"], env["nproc"], env["kernel"], env["compiler"]))
    L.append("- pinning: server on CPU %s, load generator on CPU %s (taskset)"
             % (env["pinning"]["server_cpu"], env["pinning"]["client_cpu"]))
    c = env["config"]
    L.append("- %d round(s) x %ss measured after a %ss warm-up; h1-get-rate "
             "at %s req/s; idle-conns with %d connections held %ss" % (
                 c["rounds"], c["duration_s"], c["warmup_s"],
                 "{:,}".format(c["rate"]), c["idle_conns"], c["idle_hold_s"]))
    q = env.get("rounds_load", [])
    if q:
        L.append("- 1-minute load average before each round: %s" % ", ".join(
            "%.2f%s" % (x["loadavg1"], "" if x["quiet"] else " (not quiet)")
            for x in q))
    if c.get("tls_max"):
        L.append("- churn (tls-handshake, tls-resume) offers TLS %s at most "
                 "(--tls-max)" % c["tls_max"])
    L.append("- shim: %s" % (c.get("shim") or "none (allocations from tern's "
                                               "/stats only)"))
    tools = env.get("tools", {})
    if tools:
        L.append("- " + "; ".join("%s" % v for v in tools.values()))
    return L


def _problems(summary, servers):
    L = []
    for sc in summary:
        for name in servers:
            c = summary[sc].get(name)
            if not c:
                continue
            if c["status"] == "n/a" and name in SERVERS and sc in REGISTRY and \
                    REGISTRY[sc].protocol not in SERVERS[name].protocols:
                continue  # said once per protocol table ("Not measured here")
            if c["status"] in ("invalid", "n/a") or (
                    c["status"] == "ok" and c["valid_runs"] < c["runs"]):
                L.append("- %s, %s: %s%s" % (
                    sc, name, c["status"] if c["status"] != "ok" else
                    "%d of %d rounds invalid" % (c["runs"] - c["valid_runs"], c["runs"]),
                    (": " + "; ".join(c["problems"])) if c["problems"] else ""))
            for n in c.get("notes", []):
                L.append("- %s, %s: note: %s" % (sc, name, n))
    return L


# ---------------------------------------------------------------------------
# perf run (tern alone)

def run_markdown(env, summary, server="tern"):
    L = ["# perf run: tern", ""]
    L += _env_lines(env)
    L.append("")
    cols = ["scenario", "requests", "errors", "non-2xx", "req/s",
            "server CPU s", "CPU µs/req", "allocs/req (/stats)",
            "bytes/req (/stats)", "allocs/req (shim)", "bytes/req (shim)",
            "peak RSS", "p50 µs", "p99 µs", "p99.9 µs"]
    rows = []
    for sc in summary:
        c = summary[sc].get(server)
        if sc == "idle-conns":
            continue
        unit = " conn" if REGISTRY[sc].per == "connection" and \
            (c or {}).get("status") == "ok" else ""
        rows.append([sc] + [fmt_cell(c, k, s, rng=False) for k, s in (
            ("requests", ",.0f"), ("errors", ",.0f"), ("non2xx", ",.0f"))] + [
            fmt_cell(c, "rate", ",.0f") + unit,
            fmt_cell(c, "server_cpu_s", ".2f", rng=False),
            fmt_cell(c, "cpu_us_per_req", ".2f"),
            fmt_cell(c, "allocs_per_req", ".4f", rng=False),
            fmt_cell(c, "bytes_per_req", ".2f", rng=False),
            fmt_cell(c, "shim_allocs_per_req", ".4f", rng=False),
            fmt_cell(c, "shim_bytes_per_req", ".2f", rng=False),
            fmt_cell(c, "peak_rss", "bytes", rng=False),
            fmt_cell(c, "lat_p50", ",.0f", rng=False),
            fmt_cell(c, "lat_p99", ",.0f", rng=False),
            fmt_cell(c, "lat_p999", ",.0f", rng=False)])
    L += table(cols, rows)
    L.append("")
    L.append("Medians over the rounds (min–max where they differ); per "
             "request means per connection for conn-churn. Latency: wrk's "
             "from the send of each request (closed loop) except h1-get-rate "
             "(from the intended send time).")
    if "idle-conns" in summary:
        c = summary["idle-conns"].get(server)
        L.append("")
        L += table(["idle-conns", "connections held", "RSS before",
                    "RSS with them", "RSS per conn",
                    "heap allocated per conn (/stats)",
                    "heap allocated per conn (shim)", "allocs per conn (/stats)",
                    "blocks live per conn (/stats)"],
                   [["tern", fmt_cell(c, "held", ",.0f", False),
                     fmt_cell(c, "rss_before", "bytes", False),
                     fmt_cell(c, "rss_with_idle", "bytes", False),
                     fmt_cell(c, "rss_per_conn", "bytes0"),
                     fmt_cell(c, "heap_per_conn", "bytes0"),
                     fmt_cell(c, "shim_heap_per_conn", "bytes0"),
                     fmt_cell(c, "allocs_per_conn", ".2f"),
                     fmt_cell(c, "live_blocks_per_conn", ".2f")]])
        L.append("")
        L.append("Heap allocated per connection counts every byte allocated "
                 "while the connections were opened and answered once (freed "
                 "or not); RSS per connection is what the kernel charged.")
    up = [sc for sc in summary if REGISTRY[sc].upload]
    if up:
        L.append("")
        cells = [(sc, summary[sc].get(server)) for sc in up]
        L += table(["upload", "MiB/s", "server CPU µs/MiB",
                    "heap bytes/MiB (shim)", "load generator CPU"],
                   [[sc, fmt_cell(c, "mib_per_s", ",.0f"),
                     fmt_cell(c, "cpu_us_per_mib", ",.0f"),
                     fmt_cell(c, "shim_bytes_per_mib", ",.0f"),
                     _client_util(c)] for sc, c in cells])
    T = targets(summary, [server])
    if T:
        L.append("")
        L += table(["target", "measured", "verdict"], [list(t) for t in T],
                   ["---", "---", "---"])
    P = _problems(summary, [server])
    if P:
        L += ["", "Problems and notes:", ""] + P
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------------------
# perf compare

def _pair(cell, *keys):
    """'a / b [/ c]' of one cell, or its one status word."""
    if not cell or cell.get("status") != "ok":
        return fmt_cell(cell, "-", "")
    vals = [fmt_cell(cell, k, f, False) for k, f in keys]
    if all(v == "n/a" for v in vals):
        return "n/a"
    return " / ".join(vals)


def _grid(summary, servers, scs, show):
    """A table with a row per server and a column per scenario of `scs`;
    show(cell) formats one cell."""
    return table(["server"] + scs,
                 [[n] + [show(summary[s].get(n)) for s in scs] for n in servers])


def _tern_counters(summary, scs, per, allocs, nbytes):
    """The line with tern's own counters (/stats) for the windows of
    `scs`; allocs and nbytes are (key, format)."""
    return "tern's own counters (/stats) for the same windows: " + "; ".join(
        "%s %s allocs, %s bytes per %s" % (
            s, fmt_value(val(summary[s].get("tern"), allocs[0]), allocs[1]),
            fmt_value(val(summary[s].get("tern"), nbytes[0]), nbytes[1]), per)
        for s in scs) + "."


def compare_tables(env, summary, servers, rate, idle_conns, heading="##"):
    """The tables of a compare run (shared by summary.md and the docs)."""
    L = []
    scs = list(summary)
    by_proto = {}
    for sc in scs:
        by_proto.setdefault(REGISTRY[sc].table, []).append(sc)
    all_servers = servers
    for proto, mine in by_proto.items():
        # only the servers measured on this protocol (n/a everywhere: left out)
        servers = [n for n in all_servers if any(
            (summary[s].get(n) or {}).get("status") not in ("n/a", None)
            for s in mine)] or all_servers
        left_out = [n for n in all_servers if n not in servers]
        L.append("%s %s" % (heading, PROTOCOLS.get(proto) or TABLES[proto]))
        L.append("")
        if left_out:
            L.append("Not measured here: %s." % "; ".join(
                "%s (%s)" % (n, _why_na(summary, mine, n)) for n in left_out))
            L.append("")
        if proto == "rtt50":
            L += _rtt50_lines(summary, mine)
            continue
        if proto == "db":
            L += _db_lines(summary, servers, mine, rate)
            continue
        if proto == "balance":
            L += _balance_lines(summary, servers, mine)
            continue
        main = [s for s in mine if REGISTRY[s].group == "main"
                and REGISTRY[s].load in ("wrk", "churn", "h2load", "wsload",
                                         "h3load")]
        if main and proto in ("ws", "ws-h3"):
            L.append("Throughput in messages/s (one request = one message "
                     "echoed), median (min–max) over the rounds:")
        if main:
            if proto not in ("ws", "ws-h3"):
                L.append("Throughput, median (min–max) over the rounds; "
                         "conn-churn in connections/s:")
            L.append("")
            L += _grid(summary, servers, main,
                  lambda c: fmt_cell(c, "rate", ",.0f"))
            L.append("")
            L.append("Server CPU per request (µs; per connection for conn-churn):")
            L.append("")
            L += _grid(summary, servers, main,
                  lambda c: fmt_cell(c, "cpu_us_per_req", ".2f"))
            L.append("")
            L.append("Heap allocations per request, counted by the shim "
                     "(allocations / bytes):")
            L.append("")
            L += _grid(summary, servers, main,
                  lambda c: _pair(c, ("shim_allocs_per_req", ".2f"), ("shim_bytes_per_req", ",.0f")))
            if "tern" in servers:
                L.append("")
                L.append(_tern_counters(summary, main, "request",
                                        ("allocs_per_req", ".4f"),
                                        ("bytes_per_req", ".2f")))
            L.append("")
            L.append("Peak server RSS (VmHWM, all processes of the server):")
            L.append("")
            L += _grid(summary, servers, main,
                  lambda c: fmt_cell(c, "peak_rss", "bytes", False))
            L.append("")
            wl = [s for s in main if REGISTRY[s].load == "h3load"
                  and REGISTRY[s].latency and proto == "h3"]
            if wl:
                L.append("Closed-loop latency from h3load, from a request's "
                         "send to its whole response (p50 / p99 / p99.9, µs):")
                L.append("")
                L += _grid(summary, servers, wl,
                  lambda c: _pair(c, ("lat_p50", ",.0f"), ("lat_p99", ",.0f"), ("lat_p999", ",.0f")))
                L.append("")
            if proto == "h3":
                L += _h3_lines(summary, servers, main)
            wl = [s for s in main if REGISTRY[s].load == "wrk" and REGISTRY[s].latency]
            if wl:
                L.append("Closed-loop latency from wrk (p50 / p99 / p99.9, µs; "
                         "queueing hidden by the closed loop):")
                L.append("")
                L += _grid(summary, servers, wl,
                  lambda c: _pair(c, ("lat_p50", ",.0f"), ("lat_p99", ",.0f"), ("lat_p999", ",.0f")))
                L.append("")
            L += _ws_lines(summary, servers,
                           [s for s in main if REGISTRY[s].load == "wsload"
                            or REGISTRY[s].protocol == "ws-h3"])
            hl = [s for s in main if REGISTRY[s].load == "h2load"]
            if hl and "tern" in servers:
                L.append("Ratios of the medians, req/s (tern / h2o, tern / the "
                         "best peer): " + "; ".join(
                             "%s %s" % (s, _ratios(summary[s], servers, "rate"))
                             for s in hl) + ".")
                L.append("")
        L += _handshake_lines(summary, servers, [
            s for s in main if REGISTRY[s].load == "churn" and REGISTRY[s].tls])
        up = [s for s in mine if REGISTRY[s].group == "upload"]
        if up:
            L += _upload_tables(summary, servers, up)
        L += _tls_lines(summary, servers, mine)
        if "h1-get-rate" in mine:
            L.append("Tail latency at a fixed rate (h1-get-rate: open model, "
                     "{:,} req/s over 64 connections, from the intended send "
                     "time), µs:".format(int(rate)))
            L.append("")
            L += table(["server", "achieved req/s", "p50", "p90", "p99", "p99.9",
                        "max", "CPU µs/req", "allocs/req (shim)"],
                       [[n] + [fmt_cell(summary["h1-get-rate"].get(n), k, s)
                               for k, s in (("rate", ",.0f"), ("lat_p50", ",.0f"),
                                            ("lat_p90", ",.0f"), ("lat_p99", ",.0f"),
                                            ("lat_p999", ",.0f"), ("lat_max", ",.0f"),
                                            ("cpu_us_per_req", ".2f"),
                                            ("shim_allocs_per_req", ".2f"))]
                        for n in servers])
            L.append("")
        if "idle-conns" in mine:
            L.append("Idle keep-alive connections (%s held, one request each):"
                     % "{:,}".format(idle_conns))
            L.append("")
            L += table(["server", "held", "RSS per conn", "heap allocated per "
                        "conn (shim)", "allocs per conn (shim)", "RSS before",
                        "RSS with them"],
                       [[n] + [fmt_cell(summary["idle-conns"].get(n), k, s, r)
                               for k, s, r in (("held", ",.0f", False),
                                               ("rss_per_conn", "bytes0", True),
                                               ("shim_heap_per_conn", "bytes0", True),
                                               ("shim_allocs_per_conn", ".2f", True),
                                               ("rss_before", "bytes", False),
                                               ("rss_with_idle", "bytes", False))]
                        for n in servers])
            if "tern" in servers:
                L.append("")
                L.append("tern's own counters: %s bytes and %s allocations per "
                         "idle connection." % (
                             fmt_value(val(summary["idle-conns"].get("tern"),
                                           "heap_per_conn"), ",.0f"),
                             fmt_value(val(summary["idle-conns"].get("tern"),
                                           "allocs_per_conn"), ".2f")))
            L.append("")
        sweep = [(c, s) for c, s in SWEEP if s in mine]
        if len(sweep) > 1:
            L.append("h1-get concurrency sweep (wrk -t1 -cN): req/s, and server "
                     "CPU µs per request:")
            L.append("")
            L += table(["server"] + ["%d conn req/s" % c for c, _ in sweep]
                       + ["%d conn µs/req" % c for c, _ in sweep],
                       [[n] + [fmt_cell(summary[s].get(n), "rate", ",.0f", False)
                               for _, s in sweep]
                        + [fmt_cell(summary[s].get(n), "cpu_us_per_req", ".2f", False)
                           for _, s in sweep] for n in servers])
            L.append("")
    T = targets(summary, all_servers, rate)
    if T:
        L.append("%s Targets" % heading)
        L.append("")
        L += table(["target", "measured", "verdict"], [list(t) for t in T],
                   ["---", "---", "---"])
        L.append("")
        L += ["- " + x for x in NOT_YET]
        L.append("")
    P = _problems(summary, all_servers)
    if P:
        L.append("Invalid, n/a and notes:")
        L.append("")
        L += P
        L.append("")
    return L


def _h3_lines(summary, servers, main):
    """h3-*: the tern / gtlsserver ratios, and tern's HTTP/2 rows of the
    same run beside them for reference."""
    L = []
    if "tern" in servers and "gtlsserver" in servers:
        L.append("Ratios of the medians, tern / gtlsserver: " + "; ".join(
            "%s req/s %s, server CPU per request %s" % (
                s, _ratio(summary[s], "rate", "tern", "gtlsserver"),
                _ratio(summary[s], "cpu_us_per_req", "gtlsserver", "tern"))
            for s in main) + " (CPU: gtlsserver's / tern's, above 1 is "
            "less for tern).")
        L.append("")
    ref = [(s, "h2" + s[2:]) for s in main if "h2" + s[2:] in summary]
    if ref and "tern" in servers:
        L.append("For reference, tern over HTTP/2 + TLS in the same run "
                 "(h2load -c8 -m32): " + "; ".join(
                     "%s %s req/s, %s µs CPU/req (%s over HTTP/3: %s req/s, "
                     "%s µs)" % (
                         h2, fmt_value(val(summary[h2].get("tern"), "rate"),
                                       ",.0f"),
                         fmt_value(val(summary[h2].get("tern"),
                                       "cpu_us_per_req"), ".2f"),
                         s, fmt_value(val(summary[s].get("tern"), "rate"),
                                      ",.0f"),
                         fmt_value(val(summary[s].get("tern"),
                                       "cpu_us_per_req"), ".2f"))
                     for s, h2 in ref) + ".")
        L.append("")
    return L


def _ratio(cells, key, num, den):
    a, b = val(cells.get(num), key), val(cells.get(den), key)
    return "%.2f" % (a / b) if a and b else "n/a"


def _rtt50_lines(summary, mine):
    """The rtt50 rows: per upload, MiB/s received with tern's windows
    growing and pinned, the ratio, the uploads completed, server CPU per
    MiB."""
    rows = []
    for base, grow, pin in RTT50:
        if grow not in mine and pin not in mine:
            continue
        g, p = summary.get(grow, {}).get("tern"), summary.get(pin, {}).get("tern")
        gv, pv = val(g, "mib_per_s"), val(p, "mib_per_s")
        rows.append([base, fmt_cell(g, "mib_per_s", ",.1f"),
                     fmt_cell(p, "mib_per_s", ",.2f"),
                     "%.1f x" % (gv / pv) if gv and pv else "n/a",
                     "%s / %s" % (fmt_cell(g, "requests", ",.0f", False),
                                  fmt_cell(p, "requests", ",.0f", False)),
                     "%s / %s" % (fmt_cell(g, "cpu_us_per_mib", ",.0f", False),
                                  fmt_cell(p, "cpu_us_per_mib", ",.0f", False))])
    L = ["tern alone, through the relay (25 ms each way, so 50 ms added "
         "round trip); MiB/s is what tern received in the measured window "
         "(/stats bytes_in: TLS records or QUIC packets, framing "
         "included), median (min–max) over the rounds; pinned = reference "
         "--max-stream-window 65536 --max-conn-window 1048576 (the initial "
         "windows, so they never grow):", ""]
    L += table(["upload", "MiB/s, windows growing", "MiB/s, pinned",
                "growing / pinned", "uploads done (growing / pinned)",
                "server CPU µs/MiB (growing / pinned)"], rows)
    L.append("")
    return L


def _ws_lines(summary, servers, wl):
    """ws-echo*: latency, wire bytes per message, the tern/peer ratios."""
    if not wl:
        return []
    if all(REGISTRY[s].protocol == "ws-h3" for s in wl):
        return _ws_h3_lines(summary, wl)
    L = ["Echo latency from wsload, from a message's send to its echo "
         "(p50 / p99 / p99.9, µs; closed loop, 8 messages in flight per "
         "socket):", ""]
    L += _grid(summary, servers, wl,
                  lambda c: _pair(c, ("lat_p50", ",.0f"), ("lat_p99", ",.0f"), ("lat_p999", ",.0f")))
    L += ["", "Bytes on the wire per message, client to server / server to "
          "client (frame headers included; compressed with "
          "permessage-deflate):", ""]
    L += _grid(summary, servers, wl,
                  lambda c: _pair(c, ("ws_wire_out_per_msg", ",.1f"), ("ws_wire_in_per_msg", ",.1f")))
    L.append("")
    peers = [n for n in servers if not n.startswith("tern")]
    if "tern" in servers and peers:
        parts = []
        for s in wl:
            t = summary[s].get("tern")
            for n in peers:
                p = summary[s].get(n)
                r = (val(t, "rate"), val(p, "rate"))
                c = (val(t, "cpu_us_per_req"), val(p, "cpu_us_per_req"))
                parts.append("%s tern/%s msg/s %s, server CPU per message "
                             "%s/%s = %s" % (
                                 s, n, "%.2f" % (r[0] / r[1]) if all(r) else "n/a",
                                 n, "tern", "%.2f" % (c[1] / c[0]) if all(c)
                                 else "n/a"))
        L.append("Ratios of the medians: " + "; ".join(parts) + ".")
        L.append("")
    return L


def _ws_h3_lines(summary, wl):
    """ws-echo-h3: latency, and server CPU per message against ws-echo's
    (WebSocket over HTTP/1.1) in the same run."""
    L = ["Echo latency from h3load, from a message's send to its echo "
         "(p50 / p99 / p99.9, µs; closed loop, 8 messages in flight per "
         "socket):", ""]
    L += _grid(summary, ["tern"], wl,
               lambda c: _pair(c, ("lat_p50", ",.0f"), ("lat_p99", ",.0f"),
                               ("lat_p999", ",.0f")))
    L.append("")
    if "ws-echo" in summary:
        h1 = summary["ws-echo"].get("tern")
        parts = []
        for s in wl:
            t = summary[s].get("tern")
            parts.append("%s %s µs vs ws-echo %s µs per message: %s x" % (
                s, fmt_value(val(t, "cpu_us_per_req"), ".2f"),
                fmt_value(val(h1, "cpu_us_per_req"), ".2f"),
                _ratio({"a": t, "b": h1}, "cpu_us_per_req", "a", "b")))
        L.append("tern's server CPU per message over HTTP/3 against "
                 "WebSocket over HTTP/1.1 (ws-echo, same run): "
                 + "; ".join(parts) + ".")
        L.append("")
    return L


def _handshake_lines(summary, servers, hl):
    """tls-handshake, tls-resume: one table per scenario with what each
    connection cost and how it was made, and the tern / nginx ratios."""
    if not hl:
        return []
    L = []
    for s in hl:
        L.append("%s (%s): connections/s, server CPU µs per connection (one "
                 "handshake each), resumed %%, heap allocations and bytes per "
                 "connection (shim), what churn negotiated:" % (
                     s, "full handshakes" if not REGISTRY[s].tls_resume
                     else "resumed sessions"))
        L.append("")
        L += table(["server", "conn/s", "CPU µs/conn", "resumed %",
                    "allocs/conn (shim)", "bytes/conn (shim)", "TLS"],
                   [[n] + [fmt_cell(summary[s].get(n), k, f) for k, f in (
                       ("rate", ",.0f"), ("cpu_us_per_req", ".1f"),
                       ("resumed_pct", ".1f"), ("shim_allocs_per_req", ",.0f"),
                       ("shim_bytes_per_req", ",.0f"))]
                    + [" / ".join((summary[s].get(n) or {}).get("tls", []))
                       or "-"] for n in servers])
        L.append("")
    parts = []
    for s in hl:
        ng = val(summary[s].get("nginx"), "cpu_us_per_req")
        for t in ("tern", "tern-mbedtls"):
            v = val(summary[s].get(t), "cpu_us_per_req")
            if t in servers and "nginx" in servers:
                parts.append("%s %s/nginx %s" % (
                    s, t, "%.2f" % (v / ng) if v and ng else "n/a"))
    if parts:
        L.append("Ratios of the medians, server CPU per connection: "
                 + "; ".join(parts) + ".")
        L.append("")
    return L


def _db_lines(summary, servers, mine, rate):
    """The db-* rows: one table per scenario, every server a line."""
    L = []
    for sc in mine:
        L.append("%s: %s" % (sc, REGISTRY[sc].title.format(
            rate="{:,}".format(int(rate)))) + ":")
        L.append("")
        L += table(["server", "req/s", "p50 µs", "p99 µs", "p99.9 µs",
                    "CPU µs/req (server + Redis)", "of which Redis",
                    "threads", "peak RSS", "tern allocs/req"],
                   [[n] + [fmt_cell(summary[sc].get(n), k, f, rng=False)
                           for k, f in (("rate", ",.0f"), ("lat_p50", ",.0f"),
                                        ("lat_p99", ",.0f"),
                                        ("lat_p999", ",.0f"),
                                        ("cpu_us_per_req", ".2f"),
                                        ("redis_cpu_us_per_req", ".2f"),
                                        ("server_threads", ",.0f"),
                                        ("peak_rss", "bytes"),
                                        ("allocs_per_req", ".4f"))]
                    for n in servers])
        L.append("")
    return L


def _bal_rounds(cell, what, fmt="{:,.0f}"):
    """The per-worker counts and shares of cell's rounds ('; ' between
    rounds), and max/min of each."""
    from .balance import shares_text, ratio_text
    if not cell or cell.get("status") != "ok":
        return fmt_cell(cell, "-", ""), ""
    rounds = [b.get(what) for b in cell.get("balance", []) if b.get(what)]
    if not rounds:
        return "n/a", "n/a"
    return ("; ".join(shares_text(b, fmt) for b in rounds),
            "; ".join(ratio_text(b["ratio"], b["counts"]) for b in rounds))


def _balance_lines(summary, servers, mine):
    """The balance-* rows: a table per scenario, a line per server, with
    each worker's count and share (worker 0 / worker 1: tern's worker
    index, nginx's worker processes by pid, h2o's threads by tid;
    tern-procs*: pP.wW, each worker of each process)."""
    from .balance import PROC_SERVERS
    L = []
    all_servers = servers
    for sc in mine:
        L.append("%s: %s:" % (sc, REGISTRY[sc].title))
        L.append("")
        servers = [n for n in all_servers
                   if (summary[sc].get(n) or {}).get("status") != "n/a"]
        na = [n for n in all_servers if n not in servers]
        if na:
            L.append("Not measured on %s: %s (%s)." % (
                sc, ", ".join(na), _why_na(summary, [sc], na[0])))
            L.append("")
        if not servers:
            continue
        rows = []
        if sc == "balance-stall":
            for n in servers:
                c = summary[sc].get(n)
                conn, _ = _bal_rounds(c, "bal_conn")
                req, rr = _bal_rounds(c, "bal_req")
                rows.append([n, fmt_cell(c, "rate", ",.0f"),
                             fmt_cell(c, "alt_requests", ",.0f", False),
                             _pair(c, ("lat_p50", ",.0f"), ("lat_p90", ",.0f"),
                                   ("lat_p99", ",.0f")),
                             _pair(c, ("base_lat_p50", ",.0f"),
                                   ("base_lat_p90", ",.0f"),
                                   ("base_lat_p99", ",.0f")),
                             _pair(c, ("alt_lat_p50", ",.0f"),
                                   ("alt_lat_p99", ",.0f")),
                             conn, req, rr])
            L += table(["server", "req/s", "stall requests",
                        "others p50 / p90 / p99 µs",
                        "no stalls p50 / p90 / p99 µs",
                        "stall requests p50 / p99 µs",
                        "connections per worker (share)",
                        "requests per worker (share)",
                        "max/min requests"], rows)
        elif sc == "balance-churn":
            for n in servers:
                c = summary[sc].get(n)
                conn, cr = _bal_rounds(c, "bal_conn")
                cpu, pr = _bal_rounds(c, "bal_cpu", "{:,.0f} ticks")
                handed = "; ".join(
                    " / ".join("%d" % x for x in b["bal_handed_in"])
                    for b in (c or {}).get("balance", [])
                    if b.get("bal_handed_in")) or "-"
                if conn == "n/a" and cpu != "n/a":
                    conn, cr = "thread CPU: " + cpu, pr
                rows.append([n, fmt_cell(c, "rate", ",.0f"), conn, cr, handed,
                             ((c or {}).get("balance") or [{}])[0].get(
                                 "bal_source") or "-"])
            L += table(["server", "conn/s", "connections per worker (share)",
                        "max/min", "handed in (tern)", "per-worker source"],
                       rows)
        else:
            for n in servers:
                c = summary[sc].get(n)
                conn, cr = _bal_rounds(c, "bal_conn")
                req, rr = _bal_rounds(c, "bal_req")
                cpu, pr = _bal_rounds(c, "bal_cpu", "{:,.0f} ticks")
                if req == "n/a" and cpu != "n/a":
                    req, rr = "thread CPU: " + cpu, pr
                elif req == "n/a" and n in PROC_SERVERS:
                    req = "n/a (not available across processes)"
                rows.append([n, fmt_cell(c, "rate", ",.0f"),
                             _pair(c, ("lat_p50", ",.0f"), ("lat_p99", ",.0f")),
                             conn, cr, req, rr,
                             ((c or {}).get("balance") or [{}])[0].get(
                                 "bal_source") or "-"])
            L += table(["server", "req/s", "wrk p50 / p99 µs",
                        "connections per worker (share)", "max/min",
                        "requests per worker (share)", "max/min",
                        "per-worker source"], rows)
        L.append("")
    return L


def _why_na(summary, scs, name):
    for s in scs:
        c = summary[s].get(name) or {}
        if c.get("problems"):
            return c["problems"][0]
    return "n/a"


def _ratios(cells, servers, key, higher=True, ref="h2o"):
    t = val(cells.get("tern"), key)
    known = {n: val(cells.get(n), key) for n in servers
             if not n.startswith("tern") and n != "floor"}
    known = {n: v for n, v in known.items() if v}
    out = []
    h = known.get(ref)
    out.append("tern/%s %s" % (ref, "%.2f" % (t / h) if t and h else "n/a"))
    if t and known:
        best = (max if higher else min)(known, key=known.get)
        out.append("tern/best peer (%s) %.2f" % (best, t / known[best]))
    else:
        out.append("tern/best peer n/a")
    return ", ".join(out)


def _client_util(cell):
    """The load generator's CPU utilisation of its one core, in %, with
    'bound by the load generator' above CLIENT_BOUND."""
    s = fmt_cell(cell, "client_cpu_util", ".0%")
    v = val(cell, "client_cpu_util")
    if v is not None and v > CLIENT_BOUND:
        s += ": bound by the load generator"
    return s


def _upload_tables(summary, servers, up):
    L = ["Uploads (16 MiB POST bodies read to the end, %s): MiB/s, median "
         "(min–max) over the rounds:" % PROTOCOLS[REGISTRY[up[0]].protocol],
         ""]
    L += _grid(summary, servers, up,
                  lambda c: fmt_cell(c, "mib_per_s", ",.0f"))
    L.append("")
    L.append("Load generator (%s, one thread) CPU, share of its core; "
             "above %.0f %% the MiB/s above is the client's limit, and "
             "server CPU per MiB is the figure:" % (
                 REGISTRY[up[0]].load, 100 * CLIENT_BOUND))
    L.append("")
    L += _grid(summary, servers, up, _client_util)
    L.append("")
    if "tern" in servers:
        ref = "gtlsserver" if REGISTRY[up[0]].protocol == "h3" else "h2o"
        L.append("Ratios of the medians, MiB/s: " + "; ".join(
            "%s %s" % (s, _ratios(summary[s], servers, "mib_per_s", ref=ref))
            for s in up) + ".")
        L.append("")
    L.append("Server CPU per MiB uploaded (µs):")
    L.append("")
    L += _grid(summary, servers, up,
                  lambda c: fmt_cell(c, "cpu_us_per_mib", ",.0f"))
    L.append("")
    L.append("Heap allocated per MiB uploaded, counted by the shim "
             "(allocations / bytes):")
    L.append("")
    L += _grid(summary, servers, up,
                  lambda c: _pair(c, ("shim_allocs_per_mib", ",.2f"), ("shim_bytes_per_mib", ",.0f")))
    if "tern" in servers:
        L.append("")
        L.append(_tern_counters(summary, up, "MiB",
                                ("allocs_per_mib", ".2f"),
                                ("bytes_per_mib", ",.0f")))
    L.append("")
    L.append("Peak server RSS (VmHWM):")
    L.append("")
    L += _grid(summary, servers, up,
                  lambda c: fmt_cell(c, "peak_rss", "bytes", False))
    L.append("")
    return L


def _tls_lines(summary, servers, scs):
    seen = {}
    for n in servers:
        for s in scs:
            for t in (summary[s].get(n) or {}).get("tls", []):
                seen.setdefault(n, [])
                if t not in seen[n]:
                    seen[n].append(t)
    if not seen:
        return []
    return ["TLS negotiated: " + "; ".join(
        "%s %s" % (n, " / ".join(v)) for n, v in seen.items()) + ".", ""]


def compare_markdown(env, summary, servers):
    c = env["config"]
    L = ["# perf compare", ""]
    L += _env_lines(env)
    L.append("- servers: " + ", ".join("%s = %s" % (n, SERVERS[n].label)
                                       for n in servers))
    L.append("")
    L += compare_tables(env, summary, servers, c["rate"], c["idle_conns"])
    L.append("## Caveats")
    L.append("")
    L += ["- " + x for x in caveats(env)]
    L.append("")
    return "\n".join(L)


def short_reason(cell):
    if not cell or cell.get("status") != "invalid" or not cell.get("problems"):
        return ""
    p = cell["problems"][0]
    m = re.search(r"held only \d+ of \d+ connections", p)
    if m:
        return m.group(0)
    for key, text in (("starved", "starved connections (serves fewer at once "
                                  "than the load opens)"),
                      ("shim's signal", "exits on a signal (the shim's)"),
                      ("not available", p.replace("not available: ", "")),
                      ("check failed", p)):
        if key in p:
            return text[:64]
    return p[:64]


def chart_names(scenarios):
    """The compare run's charts: one per scenario, but one for all the
    rtt50 rows (rtt50.svg: growing beside pinned, per upload)."""
    out = [s for s in scenarios if REGISTRY[s].table != "rtt50"]
    if len(out) < len(scenarios):
        out.append("rtt50")
    return out


def rtt50_chart(env, summary):
    panels = []
    for base, grow, pin in RTT50:
        if grow not in summary and pin not in summary:
            continue
        entries = []
        for name, label, who in ((grow, "windows growing", "tern"),
                                 (pin, "windows pinned", "peer")):
            c = (summary.get(name) or {}).get("tern")
            v = (c or {}).get("values", {}).get("mib_per_s") \
                if c and c["status"] == "ok" else None
            entries.append({"name": who, "label": label,
                            "status": "ok" if v else (c or {}).get(
                                "status", "not run"),
                            "median": v["median"] if v else None,
                            "min": v["min"] if v else None,
                            "max": v["max"] if v else None,
                            "why": short_reason(c) if not v else ""})
        panels.append({"label": "%s at 50 ms RTT: received by tern" % base,
                       "unit": "MiB/s", "better": "higher", "fmt": ",.1f",
                       "entries": entries})
    c = env["config"]
    return svg.chart(
        "rtt50", "16 MiB uploads through the relay (25 ms each way), tern's "
        "receive windows growing (default) and pinned at 64 KiB per stream, "
        "1 MiB per connection", panels,
        ["median of %d round(s), whiskers min–max; MiB/s = bytes tern "
         "received in the window (/stats bytes_in) / s" % c["rounds"],
         "%s, revision %s, %s x %s" % (env["date"][:10], env["git_revision"],
                                       env["cpu_model"], env["nproc"])])


def chart_for(env, sc, summary, servers):
    if sc == "rtt50":
        return rtt50_chart(env, summary)
    s = REGISTRY[sc]
    panels = []
    # servers that do not speak the scenario's protocol get no line
    servers = [n for n in servers if n not in SERVERS
               or s.protocol in SERVERS[n].protocols] or servers
    for m in s.chart:
        entries = []
        for n in servers:
            c = summary[sc].get(n)
            v = (c or {}).get("values", {}).get(m.key) if c and c["status"] == "ok" else None
            label = n
            if n == "floor":
                label = "floor (loopback limit)"
            entries.append({"name": n, "label": label,
                            "status": "ok" if v else (c or {}).get("status", "not run"),
                            "median": v["median"] if v else None,
                            "min": v["min"] if v else None,
                            "max": v["max"] if v else None,
                            "why": short_reason(c) if not v else ""})
        unit = m.unit if m.unit != "bytes" else ""
        panels.append({"label": m.label, "unit": unit, "better": m.better,
                       "fmt": m.fmt, "entries": entries})
    c = env["config"]
    sub = title_of(sc, c)
    footer = ["median of %d rotated round(s), whiskers min–max; server pinned to "
              "CPU %s, load generator to CPU %s%s"
              % (c["rounds"], env["pinning"]["server_cpu"], env["pinning"]["client_cpu"],
                 "; every server under the allocation shim" if c.get("shim") else ""),
              "%s, revision %s, %s x %s" % (env["date"][:10], env["git_revision"],
                                            env["cpu_model"], env["nproc"])]
    return svg.chart(sc, sub, panels, footer)


# ---------------------------------------------------------------------------
# docs/performance.md

BEGIN = "<!-- perf:begin -->"
END = "<!-- perf:end -->"


def write_docs(doc_path, env, summary, servers, svgs):
    """Replace the marked section of doc_path with the latest tables and
    the charts (copied into docs/perf/)."""
    doc_dir = os.path.dirname(doc_path)
    fig_dir = os.path.join(doc_dir, "perf")
    os.makedirs(fig_dir, exist_ok=True)
    c = env["config"]
    L = [BEGIN,
         "<!-- generated by `perf/perf compare --write-docs`; edits inside "
         "this section are overwritten -->", ""]
    L.append("Measured %s at revision `%s` on %s x %s (kernel %s), %d "
             "round(s) x %ss, servers: %s." % (
                 env["date"][:10], env["git_revision"], env["cpu_model"],
                 env["nproc"], env["kernel"], c["rounds"], c["duration_s"],
                 ", ".join(servers)))
    L.append("")
    L += compare_tables(env, summary, servers, c["rate"], c["idle_conns"],
                        heading="####")
    for path in svgs:
        base = os.path.basename(path)
        shutil.copyfile(path, os.path.join(fig_dir, base))
        L.append("![%s](perf/%s)" % (os.path.splitext(base)[0], base))
        L.append("")
    L.append(END)
    block = "\n".join(L)
    text = ""
    if os.path.exists(doc_path):
        with open(doc_path) as f:
            text = f.read()
    if BEGIN in text and END in text:
        pre = text[:text.index(BEGIN)]
        post = text[text.index(END) + len(END):]
        text = pre + block + post
    else:
        text = text.rstrip("\n") + "\n\n## Current results\n\n" + block + "\n"
    with open(doc_path, "w") as f:
        f.write(text)
