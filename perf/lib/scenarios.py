"""The scenario registry (shared/design/performance.md, "Scenarios").

A scenario names its protocol, its load, the request it sends and the exact
answer expected, its headline metric, and the table group it belongs to.
Only HTTP/1.1 scenarios exist now; h2-*, ws-echo and h3-* slot in by adding
entries with a new protocol and a load kind that perf/lib/measure.py knows.
"""

HELLO = b"Hello, World!"
APP_PATH = "/api/v1/orders/42/detail"
APP_HEADERS = ("X-Request-Id: abc123",)
APP_BODY = b"orders 42 detail abc123"

PROTOCOLS = {
    "h1": "HTTP/1.1 (cleartext)",
    # "h1-tls": "HTTP/1.1 over TLS", "h2": "HTTP/2 over TLS",
    # "ws": "WebSocket", "h3": "HTTP/3 over QUIC"   -- not measured yet
}


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
}


class Scenario:
    def __init__(self, name, protocol, load, title, path="/", headers=(),
                 body=HELLO, connections=64, script=None, group="main",
                 per="request", chart=(), max_conns=None, summary="",
                 latency=True):
        self.name = name
        self.protocol = protocol
        self.load = load            # 'wrk' | 'h1rate' | 'churn' | 'idle'
        self.title = title
        self.path = path
        self.headers = tuple(headers)
        self.body = body
        self.connections = connections
        self.script = script        # wrk Lua script, relative to perf/
        self.group = group          # 'main' | 'sweep'
        self.per = per              # 'request' | 'connection'
        self.chart = chart          # metrics drawn in its SVG, headline first
        self.max_conns = max_conns  # servers configured for this many
        self.summary = summary
        self.latency = latency      # False: the load's latency means nothing


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

# the h1-get concurrency sweep: connections -> scenario
SWEEP = [(1, "h1-get-c1"), (8, "h1-get-c8"), (32, "h1-get-c32"), (64, "h1-get")]

DEFAULT = [n for n in REGISTRY]


def headline(s):
    return s.chart[0]
