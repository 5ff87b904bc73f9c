"""The scenario registry (shared/design/performance.md, "Scenarios").

A scenario names its protocol, its load, the request it sends and the exact
answer expected, its headline metric, and the table group it belongs to.
HTTP/1.1 (cleartext and over TLS), HTTP/2 over TLS, cleartext HTTP/2
(uploads), WebSocket over HTTP/1.1, HTTP/3 over QUIC (h3load), WebSocket
over HTTP/3, and uploads through the delaying relay at 50 ms RTT.
"""

HELLO = b"Hello, World!"
APP_PATH = "/api/v1/orders/42/detail"
APP_HEADERS = ("X-Request-Id: abc123",)
APP_BODY = b"orders 42 detail abc123"

PROTOCOLS = {
    "h1": "HTTP/1.1 (cleartext)",
    "h1-tls": "HTTP/1.1 over TLS",
    "h2": "HTTP/2 over TLS",
    "h2c": "HTTP/2 cleartext, prior knowledge (h2c)",
    "ws": "WebSocket (cleartext, HTTP/1.1 Upgrade)",
    "h3": "HTTP/3 over QUIC",
    "ws-h3": "WebSocket over HTTP/3 (RFC 9220 extended CONNECT)",
    "db": "Waiting on a database: one Redis GET per request (HTTP/1.1)",
}

# The tables that are not one protocol's: the uploads through the relay
# (h2 and h3 side by side, windows growing and pinned).
TABLES = {
    "rtt50": "Uploads at 50 ms RTT (relay --delay-ms 25): windows growing "
             "and pinned",
}

# The static-file rows (issue 16): files served from one docroot that
# perf/driver/servers.py writes into the work directory; every server maps
# /static/ onto it (tern: reference --static; nginx: alias with sendfile and
# open_file_cache; h2o: file.dir). A pattern rather than one byte
# repeated, so that a body from a wrong offset fails the check.
STATIC_1K = (b"0123456789abcdef" * 64)
STATIC_10M = (b"static-file-pattern-" * 16)[:256] * (40 * 1024)
STATIC_FILES = {"1k.txt": STATIC_1K, "10m.txt": STATIC_10M}

# The upload scenarios' body: 16 MiB, written once into the work directory.
UPLOAD_BYTES = 16 << 20
UPLOAD_PATH = "/upload"

# A Chrome-like request head (h2-get-browser): 16 fields beside the
# pseudo-headers, sec-ch-ua counted as four (sec-ch-ua, -mobile, -platform,
# -full-version).
BROWSER_HEAD = (
    "user-agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, "
    "like Gecko) Chrome/120.0.0.0 Safari/537.36",
    "accept: text/html,application/xhtml+xml,application/xml;q=0.9,"
    "image/avif,image/webp,image/apng,*/*;q=0.8,application/signed-exchange;"
    "v=b3;q=0.7",
    "accept-language: en-US,en;q=0.9,de;q=0.8",
    "accept-encoding: gzip, deflate, br",
    "cookie: session=7f3c9a1e5b2d4c6f8a0b1c2d3e4f5a6b; theme=dark; "
    "_ga=GA1.1.1234567890.1700000000; consent=analytics%3Dno%26ads%3Dno",
    "referer: https://127.0.0.1/index.html",
    'sec-ch-ua: "Not_A Brand";v="8", "Chromium";v="120", "Google Chrome";v="120"',
    "sec-ch-ua-mobile: ?0",
    'sec-ch-ua-platform: "Linux"',
    'sec-ch-ua-full-version: "120.0.6099.109"',
    "sec-fetch-site: same-origin",
    "sec-fetch-mode: navigate",
    "sec-fetch-dest: document",
    "upgrade-insecure-requests: 1",
    "dnt: 1",
    "cache-control: max-age=0",
    "pragma: no-cache",
)


class Metric:
    def __init__(self, key, label, unit, better, fmt):
        self.key = key
        self.label = label
        self.unit = unit
        self.better = better  # 'higher' | 'lower'
        self.fmt = fmt        # a format spec or 'bytes'


M = {
    "rate": Metric("rate", "throughput", "req/s", "higher", ",.0f"),
    "conn_rate": Metric("rate", "connection rate", "conn/s", "higher", ",.0f"),
    "cpu_us_per_req": Metric("cpu_us_per_req", "server CPU per request",
                             "µs", "lower", ".2f"),
    "cpu_us_per_conn": Metric("cpu_us_per_req", "server CPU per connection",
                              "µs", "lower", ".2f"),
    "shim_allocs_per_req": Metric("shim_allocs_per_req",
                                  "heap allocations per request (shim)",
                                  "allocs", "lower", ".2f"),
    "lat_p50": Metric("lat_p50", "latency p50", "µs", "lower", ",.0f"),
    "lat_p99": Metric("lat_p99", "latency p99", "µs", "lower", ",.0f"),
    "lat_p999": Metric("lat_p999", "latency p99.9", "µs", "lower", ",.0f"),
    "shim_heap_per_conn": Metric("shim_heap_per_conn",
                                 "heap allocated per idle connection (shim)",
                                 "bytes", "lower", "bytes"),
    "rss_per_conn": Metric("rss_per_conn", "server RSS per idle connection",
                           "bytes", "lower", "bytes"),
    "shim_bytes_per_req": Metric("shim_bytes_per_req",
                                 "heap bytes allocated per request (shim)",
                                 "bytes", "lower", ",.0f"),
    "mib_per_s": Metric("mib_per_s", "upload throughput", "MiB/s", "higher",
                        ",.0f"),
    "cpu_us_per_mib": Metric("cpu_us_per_mib", "server CPU per MiB uploaded",
                             "µs", "lower", ",.0f"),
    "shim_bytes_per_mib": Metric("shim_bytes_per_mib",
                                 "heap bytes allocated per MiB (shim)",
                                 "bytes", "lower", ",.0f"),
}


class Scenario:
    def __init__(self, name, protocol, load, title, path="/", headers=(),
                 body=HELLO, connections=64, script=None, group="main",
                 per="request", chart=(), max_conns=None, summary="",
                 latency=True, tls=False, clients=None, streams=None,
                 upload=None, method="GET", table=None):
        self.name = name
        self.protocol = protocol
        self.load = load            # 'wrk' | 'h1rate' | 'churn' | 'idle' | 'h2load'
        self.tls_resume = False     # churn over TLS: offer the last session
        self.tls_max = None         # churn over TLS: highest version offered
        self.title = title
        self.path = path
        self.headers = tuple(headers)
        self.body = body
        self.connections = connections
        self.script = script        # wrk Lua script, relative to perf/
        self.group = group          # 'main' | 'sweep' | 'upload'
        self.per = per              # 'request' | 'connection'
        self.chart = chart          # metrics drawn in its SVG, headline first
        self.max_conns = max_conns  # servers configured for this many
        self.summary = summary
        self.latency = latency      # False: the load's latency means nothing
        self.tls = tls              # served on the server's TLS port
        self.clients = clients      # h2load -c (connections)
        self.streams = streams      # h2load -m (streams in flight per connection)
        self.upload = upload        # request body size (POST), bytes
        self.method = method
        self.table = table or protocol  # the table it is reported in
        self.relay_ms = None        # one-way delay of the relay in front
        self.server_args = ()       # extra server arguments (tern)
        self.min_duration = None    # measured seconds at least
        self.tern_only = None       # why the peers are not measured
        self.pair = None            # (growing, pinned) names of an rtt50 row
        self.balance = False        # a balance-* row (perf/driver/balance.py)
        self.workers = 1            # workers (threads, processes) per server
        self.rate = None            # h1rate's offered rate, when fixed


REGISTRY = {}


def add(s):
    REGISTRY[s.name] = s


add(Scenario("h1-get", "h1", "wrk", "GET /, 64 connections, closed loop (wrk -t1 -c64)",
             chart=(M["cpu_us_per_req"], M["rate"], M["shim_allocs_per_req"]),
             summary="On 2 cores this is bound by the load generator: the "
                     "measure is server CPU per request."))
add(Scenario("h1-pipelined", "h1", "wrk",
             "GET /, 16 connections x 16 pipelined requests (wrk -t1 -c16 + perf/pipeline.lua)",
             connections=16, script="pipeline.lua", latency=False,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"]),
             summary="Server-bound: the batching write path."))
add(Scenario("h1-get-rate", "h1", "h1rate",
             "GET /, open model at {rate} req/s over 64 connections (h1rate), "
             "latency from the intended send time",
             chart=(M["lat_p99"], M["lat_p999"], M["lat_p50"], M["cpu_us_per_req"]),
             summary="Tail latency at a rate every server sustains "
                     "(coordinated omission corrected)."))
add(Scenario("conn-churn", "h1", "churn",
             "a new connection per request, 16 at a time (churn -c16)",
             connections=16, per="connection",
             chart=(M["conn_rate"], M["cpu_us_per_conn"]),
             summary="Connections per second; accept, parse, answer, close."))
add(Scenario("idle-conns", "h1", "idle",
             "{idle} idle keep-alive connections held (idle), one request each",
             per="connection", max_conns=20000,
             chart=(M["rss_per_conn"], M["shim_heap_per_conn"]),
             summary="Server RSS per idle connection: (RSS with N idle - RSS "
                     "before) / N."))
add(Scenario("app-routed", "h1", "wrk",
             "GET %s with X-Request-Id, 64 connections (wrk -t1 -c64): a "
             "50-route router, a path parameter and a header read" % APP_PATH,
             path=APP_PATH, headers=APP_HEADERS, body=APP_BODY,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"]),
             summary="The routed tier."))
for c in (1, 8, 32):
    add(Scenario("h1-get-c%d" % c, "h1", "wrk",
                 "GET /, %d connection%s, closed loop (wrk -t1 -c%d)" % (
                     c, "" if c == 1 else "s", c),
                 connections=c, group="sweep",
                 chart=(M["rate"], M["cpu_us_per_req"])))

# HTTP/1.1 over TLS and HTTP/2 over TLS (ALPN h2); the servers' TLS ports,
# one self-signed ECDSA P-256 certificate made at the start of the run
add(Scenario("h1-tls-get", "h1-tls", "wrk",
             "GET / over TLS (HTTP/1.1), 64 connections, closed loop "
             "(wrk -t1 -c64 https://)", tls=True,
             chart=(M["cpu_us_per_req"], M["rate"], M["shim_allocs_per_req"]),
             summary="h1-get over TLS: record encryption on every response."))
# The file handler (issue 16): a 1 KiB file (per-request cost) and a
# 10 MiB one (bytes per second; MiB/s = req/s x 10), over HTTP/1.1,
# HTTP/1.1 over TLS and HTTP/2 over TLS.
add(Scenario("static-1k", "h1", "wrk",
             "GET /static/1k.txt (1 KiB file), 64 connections, closed loop "
             "(wrk -t1 -c64)", path="/static/1k.txt", body=STATIC_1K,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"]),
             summary="Target: tern >= nginx req/s with no more CPU per "
                     "request."))
add(Scenario("static-10m", "h1", "wrk",
             "GET /static/10m.txt (10 MiB file), 8 connections, closed loop "
             "(wrk -t1 -c8); MiB/s = req/s x 10", path="/static/10m.txt",
             body=STATIC_10M, connections=8, latency=False,
             chart=(M["rate"], M["cpu_us_per_req"]),
             summary="Target: tern >= nginx MiB/s on plain TCP."))
add(Scenario("static-10m-tls", "h1-tls", "wrk",
             "GET /static/10m.txt over TLS (HTTP/1.1), 8 connections "
             "(wrk -t1 -c8 https://); MiB/s = req/s x 10",
             path="/static/10m.txt", body=STATIC_10M, connections=8,
             latency=False, tls=True,
             chart=(M["rate"], M["cpu_us_per_req"]),
             summary="Target: tern >= 1.5 x nginx MiB/s over TLS."))
add(Scenario("static-1k-h2", "h2", "h2load",
             "GET /static/1k.txt over HTTP/2 + TLS, 8 connections x 32 "
             "streams (h2load -c8 -m32)", path="/static/1k.txt",
             body=STATIC_1K, tls=True, clients=8, streams=32, latency=False,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"])))
add(Scenario("static-10m-h2", "h2", "h2load",
             "GET /static/10m.txt over HTTP/2 + TLS, 4 connections x 2 "
             "streams (h2load -c4 -m2); MiB/s = req/s x 10",
             path="/static/10m.txt", body=STATIC_10M, tls=True, clients=4,
             streams=2, latency=False,
             chart=(M["rate"], M["cpu_us_per_req"])))
add(Scenario("h2-get", "h2", "h2load",
             "GET / over HTTP/2 + TLS, 8 connections x 32 streams, closed "
             "loop (h2load -c8 -m32)", tls=True, clients=8, streams=32,
             latency=False,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"],
                    M["shim_bytes_per_req"]),
             summary="Target: tern >= 1.2 x h2o; under 256 bytes allocated "
                     "per request."))
# The Python app servers' framework row (perf/driver/servers.py, the
# tern-asgi, tern-wsgi, uvicorn, ... rows): a FastAPI endpoint (Flask on
# the WSGI servers) returning a 20-item JSON list, over 64 keep-alive
# connections. Most of the CPU is the framework's: the server's share is
# what the rows differ by.
add(Scenario("py-json", "h1", "wrk",
             "GET /json: a FastAPI (ASGI) or Flask (WSGI) endpoint returning "
             "20 items as JSON, 64 connections (wrk -t1 -c64)", path="/json",
             body=None,
             chart=(M["rate"], M["cpu_us_per_req"], M["lat_p99"]),
             summary="Target: tern-asgi >= 1.3 x uvicorn."))
REGISTRY["py-json"].json_items = 20
REGISTRY["py-json"].python_only = ("a Python framework's row: the Python "
                                   "app servers only")
add(Scenario("h2-get-browser", "h2", "h2load",
             "as h2-get with a 16-field Chrome-like request head "
             "(h2load -c8 -m32 -H ...)", tls=True, clients=8, streams=32,
             headers=BROWSER_HEAD, latency=False,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"],
                    M["shim_bytes_per_req"]),
             summary="HPACK and header handling with a realistic head."))
for n in (1, 4):
    add(Scenario("h2-upload" + ("" if n == 1 else "-%d" % n), "h2", "h2load",
                 "POST %s, 16 MiB bodies read to the end, 1 connection x %d "
                 "stream%s in flight (h2load -c1 -m%d -d FILE)" % (
                     UPLOAD_PATH, n, "" if n == 1 else "s", n),
                 tls=True, clients=1, streams=n, upload=UPLOAD_BYTES,
                 method="POST", path=UPLOAD_PATH, group="upload",
                 latency=False, body=None,
                 chart=(M["mib_per_s"], M["cpu_us_per_mib"],
                        M["shim_bytes_per_mib"]),
                 summary="Target (h2-upload): over 1 GiB/s on loopback."))
# The same uploads over cleartext HTTP/2 with prior knowledge (h2load
# http://: the connection preface straight away, no Upgrade), on the
# servers' cleartext ports: the HTTP/2 and body path without the record
# decryption, where the load generator's own core is the likelier limit.
for n in (1, 4):
    add(Scenario("h2c-upload" + ("" if n == 1 else "-%d" % n), "h2c",
                 "h2load",
                 "POST %s, 16 MiB bodies read to the end, cleartext HTTP/2 "
                 "(prior knowledge), 1 connection x %d stream%s in flight "
                 "(h2load -c1 -m%d -d FILE http://)" % (
                     UPLOAD_PATH, n, "" if n == 1 else "s", n),
                 clients=1, streams=n, upload=UPLOAD_BYTES,
                 method="POST", path=UPLOAD_PATH, group="upload",
                 latency=False, body=None,
                 chart=(M["mib_per_s"], M["cpu_us_per_mib"],
                        M["shim_bytes_per_mib"]),
                 summary="Target (h2c-upload): at least 1 GiB/s on "
                         "loopback."))

# TLS handshakes: a new TLS connection per request, 16 at a time (churn
# --tls: GnuTLS, SNI localhost, ALPN http/1.1, no certificate check, one
# GET with Connection: close each), on the servers' TLS ports.
# tls-handshake never offers a session, so every handshake is a full one
# (a server that resumes one anyway is invalid); tls-resume offers each
# slot's last session (tickets, or a session ID in TLS 1.2), and a server
# that resumes fewer than RESUME_MIN of the measured connections is
# invalid.  The protocol is capped at tls_max (TLS 1.3; perf/perf
# --tls-max 1.2|1.3 overrides it): each server negotiates what it
# speaks, and the version, cipher and group are listed per row.
RESUME_MIN = 0.95
M["shim_allocs_per_conn"] = Metric("shim_allocs_per_req",
                                   "heap allocations per connection (shim)",
                                   "allocs", "lower", ",.0f")
M["shim_bytes_per_conn"] = Metric("shim_bytes_per_req",
                                  "heap bytes allocated per connection (shim)",
                                  "bytes", "lower", ",.0f")


def _hs(name, title, summary, resume):
    """A TLS connection-churn scenario: churn --tls [--resume]."""
    sc = Scenario(name, "h1-tls", "churn", title, connections=16,
                  per="connection", tls=True,
                  chart=(M["conn_rate"], M["cpu_us_per_conn"],
                         M["shim_allocs_per_conn"], M["shim_bytes_per_conn"]),
                  summary=summary)
    sc.tls_resume = resume
    sc.tls_max = "1.3"
    return sc


add(_hs("tls-handshake",
        "a new TLS connection per request, full handshake (no session "
        "offered), 16 at a time (churn --tls -c16)",
        "Target: server CPU per full handshake at or below nginx's.",
        resume=False))
add(_hs("tls-resume",
        "as tls-handshake, each connection resuming its slot's last session "
        "(churn --tls --resume -c16)",
        "Target: server CPU per resumed handshake at or below nginx's.",
        resume=True))

# WebSocket echo: wsload (build/perf/load) keeps ws_depth messages of
# ws_size bytes in flight on each of 64 sockets and checks every echo byte
# for byte; one request = one message echoed.  ws-echo-deflate offers
# permessage-deflate, and a server that declines it is invalid there.
M["msg_rate"] = Metric("rate", "throughput", "msg/s", "higher", ",.0f")
M["cpu_us_per_msg"] = Metric("cpu_us_per_req", "server CPU per message",
                             "µs", "lower", ".2f")
M["shim_bytes_per_msg"] = Metric("shim_bytes_per_req",
                                 "heap bytes allocated per message (shim)",
                                 "bytes", "lower", ",.0f")


def _ws(name, title, summary, deflate, depth=8, size=128):
    """A WebSocket echo scenario on /ws: wsload, one request = one message."""
    sc = Scenario(name, "ws", "wsload", title, path="/ws", body=None,
                  per="message",
                  chart=(M["msg_rate"], M["cpu_us_per_msg"],
                         M["shim_bytes_per_msg"], M["lat_p99"]),
                  summary=summary)
    sc.ws_deflate = deflate
    sc.ws_depth = depth
    sc.ws_size = size
    return sc


add(_ws("ws-echo",
        "64 WebSockets x 8 text messages of 128 B in flight, each echoed and "
        "checked (wsload); one request = one message",
        "Target: tern >= 2 x libwebsockets.", deflate=False))
add(_ws("ws-echo-deflate",
        "as ws-echo with permessage-deflate (wsload --deflate: context "
        "takeover, zlib level 6 on the client)",
        "Compression on every message, both ways.", deflate=True))

# HTTP/3 over QUIC: h3load (build/perf/load/h3load: ngtcp2 + nghttp3,
# one thread, closed loop) on the servers' QUIC ports, with the run's
# certificate; every response's status and body checked by h3load itself.
# gtlsserver (ngtcp2's example server) is the peer.
add(Scenario("h3-get", "h3", "h3load",
             "GET / over HTTP/3, 4 connections x 32 streams, closed loop "
             "(h3load --conns 4 --streams 32)", tls=True, clients=4,
             streams=32, latency=True,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"],
                    M["shim_bytes_per_req"]),
             summary="Target: tern >= 1.5 x gtlsserver, 0 allocations per "
                     "request (tern /stats)."))
add(Scenario("h3-get-browser", "h3", "h3load",
             "as h3-get with a 16-field Chrome-like request head "
             "(h3load --conns 4 --streams 32 --header ...)", tls=True,
             clients=4, streams=32, headers=BROWSER_HEAD, latency=True,
             chart=(M["rate"], M["cpu_us_per_req"], M["shim_allocs_per_req"],
                    M["shim_bytes_per_req"]),
             summary="QPACK and header handling with a realistic head."))
for n in (1, 4):
    add(Scenario("h3-upload" + ("" if n == 1 else "-%d" % n), "h3", "h3load",
                 "POST %s, 16 MiB bodies read to the end, HTTP/3, 1 "
                 "connection x %d stream%s in flight (h3load --conns 1 "
                 "--streams %d --upload-size 16777216)" % (
                     UPLOAD_PATH, n, "" if n == 1 else "s", n),
                 tls=True, clients=1, streams=n, upload=UPLOAD_BYTES,
                 method="POST", path=UPLOAD_PATH, group="upload",
                 latency=False, body=None,
                 chart=(M["mib_per_s"], M["cpu_us_per_mib"],
                        M["shim_bytes_per_mib"]),
                 summary="Target (h3-upload-4): tern >= 1.5 x gtlsserver."))

# WebSocket echo over HTTP/3 (RFC 9220): h3load --ws, one WebSocket per
# stream, 64 sockets on 64 QUIC connections, as ws-echo's 64 over TCP.
sc = _ws("ws-echo-h3",
         "64 WebSockets over HTTP/3 (one per QUIC connection) x 8 messages "
         "of 128 B in flight, each echoed and checked (h3load --ws --conns "
         "64 --streams 1 --depth 8 --size 128)",
         "Target: server CPU per message <= 1.5 x ws-echo's (HTTP/1.1).",
         deflate=False)
sc.protocol = sc.table = "ws-h3"
sc.load = "h3load"
sc.tls = True
sc.clients, sc.streams = 64, 1
add(sc)

# Uploads at 50 ms RTT: the relay (build/perf/load/relay) delays every
# byte (TCP) or datagram (UDP) by 25 ms each way between the load
# generator and tern; each upload twice, tern's receive windows growing
# (the default: up to 8 MiB per stream, 16 MiB per connection) and
# pinned at their initial sizes (64 KiB per stream, 1 MiB per
# connection).  MiB/s is the bytes the server received in the measured
# window (tern's /stats bytes_in: TLS or QUIC framing included), so that
# a pinned row, whose 16 MiB uploads take some 12 s each, is measured
# without waiting for whole uploads.  A row still needs one upload to
# finish inside its window (the proof that the handler read every byte):
# four pinned streams share some 3 MiB/s, so their first four 16 MiB
# uploads end only after about 22 s, and those rows measure 40 s.
# tern only.
RTT50_DELAY_MS = 25
RTT50_MIN_DURATION = 20
RTT50_PINNED_MULTI_DURATION = 40
PIN_ARGS = ("--max-stream-window", "65536", "--max-conn-window", "1048576")
M["wire_mib_per_s"] = Metric("mib_per_s", "received by the server (wire)",
                             "MiB/s", "higher", ",.1f")
RTT50 = []
for base in ("h2-upload", "h2-upload-4", "h3-upload", "h3-upload-4"):
    b = REGISTRY[base]
    names = (base + "-rtt50", base + "-rtt50-pinned")
    RTT50.append((base,) + names)
    for name, pinned in zip(names, (False, True)):
        sc = Scenario(name, b.protocol, b.load,
                      "%s through the relay at 50 ms RTT (25 ms each way), "
                      "tern's windows %s" % (
                          base, "pinned (reference %s)" % " ".join(PIN_ARGS)
                          if pinned else "growing (the default)"),
                      tls=True, clients=b.clients, streams=b.streams,
                      upload=b.upload, method="POST", path=UPLOAD_PATH,
                      group="rtt50", latency=False, body=None,
                      table="rtt50",
                      chart=(M["wire_mib_per_s"], M["cpu_us_per_mib"]),
                      summary="Target: growing >= 10 x pinned.")
        sc.relay_ms = RTT50_DELAY_MS
        sc.server_args = PIN_ARGS if pinned else ()
        sc.min_duration = (RTT50_PINNED_MULTI_DURATION
                           if pinned and b.streams > 1 else RTT50_MIN_DURATION)
        sc.tern_only = ("the 50 ms RTT rows compare tern's windows growing "
                        "and pinned: tern only")
        sc.pair = names
        add(sc)

# Waiting on a database (issue 18): one Redis GET per request (Debian's
# redis-server, started per row on a Unix socket in the work directory,
# pinned to the server's CPU, its CPU time counted with the server's),
# key k1, 64-byte value, checked.  tern answers on the worker's loop
# (db-async*: GET /db/k1, hiredis's libuv adapter, a connection per
# worker) or on the blocking lane (db-blocking*: GET /db-blocking/k1,
# synchronous hiredis, a connection per pool thread); the peers answer
# both paths in their own model (a thread per connection, synchronous
# hiredis).  db-slow*: the same through the relay (perf/load/relay, 1 ms
# each way between the server and Redis over TCP): every query waits
# 2 ms more, as a query that takes 2 ms on a remote database would.
from . import dbserver  # noqa: E402
M["threads"] = Metric("server_threads", "server threads (peak)", "threads",
                      "lower", ",.0f")
M["cpu_us_per_req_db"] = Metric("cpu_us_per_req",
                                "server + Redis CPU per request", "µs",
                                "lower", ".2f")
DB_SLOW_MS = 1  # the relay's delay each way


def _db(name, lane, load, conns, title, slow=False):
    sc = Scenario(name, "db", load, title,
                  path="/db/%s" % dbserver.KEY if lane == "async"
                  else "/db-blocking/%s" % dbserver.KEY,
                  body=dbserver.VALUE, connections=conns,
                  chart=(M["rate"] if load == "wrk" else M["lat_p99"],
                         M["lat_p99"] if load == "wrk" else M["lat_p50"],
                         M["cpu_us_per_req_db"], M["threads"]),
                  summary="Target (db-async-512): tern >= 1.5 x the best "
                          "peer, p99 no worse, <= 2 threads per core.")
    sc.db_lane = lane
    sc.db_slow_ms = DB_SLOW_MS if slow else None
    return sc


for lane in ("async", "blocking"):
    for c in (64, 512):
        add(_db("db-%s%s" % (lane, "" if c == 64 else "-%d" % c), lane, "wrk",
                c, "GET /db/k1 (%s lane), one Redis GET each, %d "
                "connections, closed loop (wrk -t1 -c%d)" % (lane, c, c)))
    add(_db("db-%s-rate" % lane, lane, "h1rate", 64,
            "GET /db/k1 (%s lane), open model at {rate} req/s over 64 "
            "connections (h1rate), latency from the intended send time"
            % lane))
    add(_db("db-slow-%s" % lane, lane, "h1rate", 512,
            "as db-%s-rate over 512 connections, Redis 2 ms away (relay "
            "%d ms each way): open model at {rate} req/s" % (lane, DB_SLOW_MS),
            slow=True))
DB = [n for n in REGISTRY if n.startswith("db-")]

# Balance across workers (issue 35): 2 workers each (tern: reference
# --workers 2 with --balance least, kernel or reuseport, the rows
# tern-least, tern-kernel and tern-reuseport; nginx: worker_processes 2,
# its listening socket shared, or one per worker with nginx-reuseport;
# h2o: num-threads 2), and how the load spread over them (perf/driver/balance.py: tern's /metrics, nginx's
# access log with $pid and ss -p, h2o's threads' CPU time).  Opt-in: not
# in the default scenarios (perf/perf compare --scenarios balance-...).
TABLES["balance"] = ("Balance across workers: 2 workers (tern "
                     "--workers 2, nginx worker_processes 2, h2o "
                     "num-threads 2)")
M["bal_req_ratio"] = Metric("bal_req_ratio",
                            "requests per worker, max / min", "x", "lower",
                            ".2f")
M["bal_conn_ratio"] = Metric("bal_conn_ratio",
                             "connections per worker, max / min", "x",
                             "lower", ".2f")
M["base_lat_p99"] = Metric("base_lat_p99", "latency p99 without stalls",
                           "µs", "lower", ",.0f")
M["lat_p99_others"] = Metric("lat_p99", "latency p99 of the other requests "
                             "(1 in 199 stalls 50 ms)", "µs", "lower", ",.0f")
BALANCE_RATIO_TARGET = 1.1


def _balance(name, load, title, connections, per="request", chart=(),
             summary=""):
    sc = Scenario(name, "h1", load, title, connections=connections,
                  per=per, table="balance", chart=chart, summary=summary)
    sc.balance = True
    sc.workers = 2
    return sc


add(_balance("balance-keepalive", "wrk",
             "GET /, 64 keep-alive connections (wrk -t1 -c64), 2 workers: "
             "each worker's share of the connections and of the requests",
             64, chart=(M["bal_req_ratio"], M["bal_conn_ratio"], M["rate"]),
             summary="Target: max/min requests per worker <= 1.1."))
sc = _balance("balance-stall", "h1rate",
              "64 keep-alive connections at 1,000 req/s (h1rate), 2 workers; "
              "1 in 199 requests GET /stall?ms=50 (held on the worker's "
              "thread): the other requests' latency against the same run "
              "without stalls", 64,
              chart=(M["lat_p99_others"], M["base_lat_p99"],
                     M["bal_req_ratio"]),
              summary="nginx holds its worker in an embedded Perl "
                      "handler; h2o has no handler that can.")
sc.rate = 1000
add(sc)
add(_balance("balance-churn", "churn",
             "a new connection per request (Connection: close), 16 at a time "
             "(churn -c16), 2 workers: each worker's share of the connections",
             16, per="connection",
             chart=(M["bal_conn_ratio"], M["conn_rate"]),
             summary="Target: max/min connections per worker <= 1.1."))
BALANCE = [n for n in REGISTRY if getattr(REGISTRY[n], "balance", False)]

# the h1-get concurrency sweep: connections -> scenario
SWEEP = [(1, "h1-get-c1"), (8, "h1-get-c8"), (32, "h1-get-c32"), (64, "h1-get")]

# every scenario but the opt-in ones (the balance rows: they need servers
# of their own, tern-least, tern-kernel and tern-reuseport)
DEFAULT = [n for n in REGISTRY if n not in BALANCE]


def headline(s):
    return s.chart[0]
