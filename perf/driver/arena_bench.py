"""HttpArena's profiles measured: `perf/perf arena run|compare`.

The loads of HttpArena's profiles (/work/arena-spec.md, sections 1, 4
and 7), scaled to a 2-core machine and run with the harness's tools and
accounting: wrk (with perf/arena/templates.lua) where HttpArena runs
gcannon or wrk, h2load for HTTP/2, tern's h3load and wsload for HTTP/3
and WebSocket.  Each row is a fresh server process, pinned to the
server's CPU (the load generator on the other), run under the allocation
shim, checked first with arena.py's validation checks of its profile, and
measured as measure.py measures the rest of the harness: server CPU per
request from /proc over the measured window, peak RSS (VmHWM), the
shim's allocations per request, the load's errors and non-2xx (either
makes the row invalid), p99 where the tool gives one.

Servers (ENTRIES): build/examples/arena ("tern") and the arena peers
(build/perf/peers/arena_*), which take the arena app's flags and print
its `listening KIND PORT` / `ready` lines: they are started through
arena.App with every port 0, and a profile whose listener a server does
not print, or whose route it answers 404, is n/a with that reason.  nginx
and h2o (Debian's) serve static and static-h2 from configurations
generated with servers.py's nginx_conf and h2o_conf; nginx serves
/baseline11, /pipeline and /upload through perf/peers/nginx_arena's
module (built where nginx-dev is installed), h2o /pipeline from mruby.
"libwebsockets" is the main harness's lws_echo peer (perf/peers/
lws_echo.c), which serves echo-ws alone.
"""

import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
import types

from . import (arena, common, loads, measure, pgserver, servers, summary,
               tlsclient)
from .common import BenchError, SetupError, log

LUA = os.path.join(common.PERF_DIR, "arena", "templates.lua")
PIPELINE_LUA = os.path.join(common.PERF_DIR, "pipeline.lua")
HOST = "Host: localhost:8080"
STATIC_AE = "Accept-Encoding: br;q=1, gzip;q=0.8"


def _get(path, *fields):
    """A raw GET as HttpArena's fixtures write it (Host localhost:8080,
    no Connection field)."""
    return "GET %s HTTP/1.1\r\n%s\r\n%s\r\n" % (
        path, HOST, "".join(f + "\r\n" for f in fields))


BASELINE_REQS = (
    _get("/baseline11?a=13&b=42"),
    "POST /baseline11?a=13&b=42 HTTP/1.1\r\n%s\r\nContent-Length: 2\r\n"
    "\r\n20" % HOST,
    "POST /baseline11?a=13&b=42 HTTP/1.1\r\n%s\r\nTransfer-Encoding: "
    "chunked\r\n\r\n2\r\n20\r\n0\r\n\r\n" % HOST)
JSON_PAIRS = ((1, 3), (5, 7), (10, 2), (15, 5), (25, 4), (40, 8), (50, 6))
COMP_PAIRS = ((25, 4), (40, 8), (50, 6))
UPLOAD_SIZES = (512000, 2097152, 10485760, 20971520)
DB_LIMITS = (5, 10, 20, 35, 50)
STATIC_PATHS = tuple("/static/" + f[0] for f in arena.STATIC_FILES)
JSON_PATHS = tuple("/json/%d?m=%d" % p for p in JSON_PAIRS)


class Profile:
    """One profile's load.  tool: wrk | pipeline | h2load | h3load |
    wsload; port: the listener kind it talks to; conns: connections (wrk
    splits them over `threads`, one per template in mode conn); reqs: raw
    requests (wrk) or paths (h2load -i, the others); every: Connection:
    close on every Nth request (gcannon -r N); check: arena.py's checks
    run before it; probe: (method, path) answered 404 -> n/a; spec: what
    HttpArena runs."""

    def __init__(self, name, tool, port, conns, spec, reqs=(), threads=1,
                 mode="conn", every=0, streams=None, headers=(), check=None,
                 probe=None, latency=True, expect=None):
        self.name, self.tool, self.port, self.conns = name, tool, port, conns
        self.spec, self.reqs, self.threads = spec, tuple(reqs), threads
        self.mode, self.every, self.streams = mode, every, streams
        self.headers, self.check = tuple(headers), check or name
        self.probe, self.latency, self.expect = probe, latency, expect

    def load_text(self, conns=None):
        c = conns or self.conns
        if self.tool in ("wrk", "pipeline"):
            per = ("one template per connection (%d threads x %d)" % (
                self.threads, c // self.threads)) if self.mode == "conn" \
                else "the %d requests rotated" % len(self.reqs)
            if self.tool == "pipeline":
                per = "16 requests per write"
            return "wrk -t%d -c%d, %s%s" % (
                self.threads, c - c % self.threads, per,
                ", Connection: close every %d" % self.every if self.every else "")
        if self.tool == "h2load":
            return "h2load -c%d -m%d%s%s" % (
                c, self.streams, " -i (%d URIs)" % len(self.reqs)
                if len(self.reqs) > 1 else "", " -H '%s'" % self.headers[0]
                if self.headers else "")
        if self.tool == "h3load":
            return "h3load --conns %d --streams %d" % (c, self.streams)
        return "wsload --conns %d --depth 1 --size 5 (text)" % c


def _json_reqs(pairs, *fields):
    return tuple(_get("/json/%d?m=%d" % p, *fields) for p in pairs)


PROFILES = {p.name: p for p in (
    Profile("baseline", "wrk", "h1", 63, "gcannon -c 512,4096 -p 1, 3 "
            "templates", BASELINE_REQS, threads=3,
            probe=("GET", "/baseline11?a=13&b=42")),
    Profile("pipelined", "pipeline", "h1", 64, "gcannon -c 512,4096 -p 16",
            ("/pipeline",), latency=False, probe=("GET", "/pipeline")),
    Profile("limited-conn", "wrk", "h1", 63, "gcannon -c 512,4096 -p 1 "
            "-r 10, 3 templates", BASELINE_REQS, threads=3, every=10,
            check="baseline", probe=("GET", "/baseline11?a=13&b=42")),
    Profile("json", "wrk", "h1", 252, "gcannon -c 4096 -p 1 -r 25, 7 "
            "templates", _json_reqs(JSON_PAIRS), threads=7, every=25,
            probe=("GET", "/json/1?m=3")),
    Profile("json-comp", "wrk", "h1", 63, "gcannon -c 512,4096,16384 -p 1 "
            "-r 25, 3 templates", _json_reqs(COMP_PAIRS,
                                             "Accept-Encoding: gzip, br"),
            threads=3, every=25, probe=("GET", "/json/25?m=4")),
    Profile("json-tls", "wrk", "h1-tls", 256, "wrk -t64 -c 4096, 7 paths "
            "rotated", _json_reqs(JSON_PAIRS), mode="rotate",
            probe=("GET", "/json/1?m=3")),
    Profile("upload", "wrk", "h1", 32, "gcannon -c 32,256 -p 1 -r 5, 4 "
            "templates", [{"upload": n} for n in UPLOAD_SIZES], threads=4,
            every=5, probe=("POST", "/upload")),
    Profile("static", "wrk", "h1", 128, "wrk -t64 -c 1024,4096,6800, 20 "
            "files rotated", tuple(_get(p, STATIC_AE) for p in STATIC_PATHS),
            mode="rotate", probe=("GET", "/static/reset.css")),
    Profile("async-db", "wrk", "h1", 125, "gcannon -c 1024 -p 1 -r 25, 5 "
            "templates", tuple(_get("/async-db?min=10&max=50&limit=%d" % n)
                               for n in DB_LIMITS), threads=5, every=25,
            probe=("GET", "/async-db?min=10&max=50&limit=5")),
    Profile("baseline-h2", "h2load", "h2", 32, "h2load -c 256,1024 -m 100",
            ("/baseline2?a=1&b=1",), streams=100,
            probe=("GET", "/baseline2?a=1&b=1")),
    Profile("static-h2", "h2load", "h2", 32, "h2load -i (20 URIs) -c "
            "256,1024 -m 32", STATIC_PATHS, streams=32, headers=(STATIC_AE,),
            probe=("GET", "/static/reset.css")),
    Profile("baseline-h2c", "h2load", "h2c", 32, "h2load -c 256,1024,4096 "
            "-m 100", ("/baseline2?a=1&b=1",), streams=100,
            probe=("GET", "/baseline2?a=1&b=1")),
    Profile("json-h2c", "h2load", "h2c", 64, "h2load -i (7 URIs) -c "
            "1024,4096 -m 32", JSON_PATHS, streams=32,
            probe=("GET", "/json/1?m=3")),
    Profile("baseline-h3", "h3load", "h3", 16, "h2load-h3 -c 64 -m 64",
            ("/baseline2?a=1&b=1",), streams=64, expect=b"2"),
    Profile("echo-ws", "wsload", "h1", 64, "gcannon --ws -c "
            "512,4096,16384, 'hello' one in flight", ("/ws",)),
)}
ORDER = tuple(PROFILES)


# ---------------------------------------------------------------------------
# the servers

# nginx's arena module (perf/peers/nginx_arena): built by meson into the
# peers' directory where nginx-dev's sources are; the profiles that need it
NGINX_DEV_CONFIGURE = "/usr/share/nginx/src/configure"
NGINX_ARENA_SO = "ngx_http_arena_module.so"
NGINX_MODULE_PROFILES = ("baseline", "limited-conn", "upload")


class Entry:
    """kind: arena (the arena app's flags and lines) | nginx | h2o | lws
    (lws_echo: --port 0, `listening on PORT`);
    profiles: the ones it serves (None: all, as its listeners and routes
    allow); why: the reason the others are n/a; why_not: profile -> the
    reason that one is n/a (a peer without the feature)."""

    def __init__(self, name, kind, label, binary=None, profiles=None, why="",
                 notes=None, why_not=None):
        self.name, self.kind, self.label = name, kind, label
        self.binary, self.profiles, self.why = binary, profiles, why
        self.notes = notes or {}
        self.why_not = why_not or {}


_NO_CODE = ("%s runs no application code here: it serves files and fixed "
            "answers only (no sums of query values, JSON, uploads counted, "
            "database or WebSocket echo)")
ENTRIES = {e.name: e for e in (
    Entry("tern", "arena", "tern (examples/arena)", "examples/arena"),
    Entry("arena_h2o", "arena", "libh2o (perf/peers/arena_h2o)",
          "perf/peers/arena_h2o", notes=dict.fromkeys(
              ("static", "static-h2"), "libh2o 2.2.5 does not take the "
              "q-values of the benchmark's Accept-Encoding: it sends the "
              "files uncompressed"), why_not={
                  "echo-ws": "the libh2o peer has no WebSocket route"}),
    Entry("arena_mhd", "arena", "libmicrohttpd (perf/peers/arena_mhd)",
          "perf/peers/arena_mhd", why_not={
              "json-comp": "libmicrohttpd has no response compression",
              "echo-ws": "the libmicrohttpd peer has no WebSocket route"}),
    Entry("arena_pgblock", "arena", "blocking libpq (perf/peers/arena_pgblock)",
          "perf/peers/arena_pgblock", profiles=("async-db", "pipelined"),
          why="the async-db profile's thread-per-connection peer: it serves "
          "/async-db, /pipeline and GET /baseline11 only"),
    Entry("nginx", "nginx", "nginx 1.22 (nginx-light: gzip_static, no "
          "brotli module, so the .gz siblings; open_file_cache and sendfile "
          "as servers.py's nginx; /baseline11, /pipeline and /upload from "
          "perf/peers/nginx_arena's module, the upload streamed through "
          "128 KiB body buffers)",
          profiles=("static", "static-h2", "pipelined") +
          NGINX_MODULE_PROFILES,
          why="nginx runs no other application code here (its arena module "
          "answers /baseline11, /pipeline and /upload; no JSON, database or "
          "WebSocket echo)"),
    Entry("h2o", "h2o", "h2o 2.2.5 (file handler with file.send-compressed; "
          "/pipeline from an mruby handler)",
          profiles=("static", "static-h2", "pipelined"),
          why=_NO_CODE % "h2o", notes=dict.fromkeys(
              ("static", "static-h2"), "h2o 2.2.5 does not take the "
              "q-values of the benchmark's `Accept-Encoding: br;q=1, "
              "gzip;q=0.8`: it sends the files uncompressed (to `gzip, br` "
              "it sends the .br)")),
    Entry("libwebsockets", "lws", "libwebsockets 4.1 (perf/peers/lws_echo, "
          "1 service thread)", "perf/peers/lws_echo", profiles=("echo-ws",),
          why="lws_echo is the WebSocket echo peer: it serves /ws (and GET /) "
          "only"),
)}


def entry_binary(args, e):
    return os.path.join(common.REPO, args.build_dir, e.binary)


def nginx_module(args):
    """The nginx arena module's path, or None when it is not built."""
    p = os.path.join(common.REPO, args.build_dir, "perf", "peers",
                     NGINX_ARENA_SO)
    return p if os.path.exists(p) else None


def module_missing(args, name, profile):
    """Why `profile` is n/a for entry `name` for want of the nginx module,
    or None."""
    if ENTRIES[name].kind != "nginx" or profile not in NGINX_MODULE_PROFILES \
            or nginx_module(args):
        return None
    return ("the nginx arena module is not built (%s: apt-get install "
            "nginx-dev, or perf/perf setup; then meson setup --reconfigure "
            "%s)" % (NGINX_ARENA_SO, args.build_dir))


def available(args, name):
    """None when name can be started, else why not."""
    e = ENTRIES[name]
    if e.kind in ("arena", "lws"):
        p = entry_binary(args, e)
        return None if common.which_exec(p) else "%s not built" % p
    tool = args.nginx if e.kind == "nginx" else args.h2o
    return None if shutil.which(tool) else "%s not installed" % tool


def _cpus(text):
    out = set()
    for part in str(text).split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


@contextlib.contextmanager
def _pinned(cpus):
    """This thread on cpus while the block runs: a child started in it
    (arena.App's Popen) inherits them, and so do the threads it makes."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _cpus(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def _patch(text, old, new):
    if old not in text:
        raise SetupError("generated configuration lacks %r" % old)
    return text.replace(old, new, 1)


NGINX_MODULE_LOCATIONS = """        location = /baseline11 {
            client_max_body_size 1k;
            arena baseline;
        }
        location = /pipeline {
            arena pipeline;
        }
        location = /upload {
            client_max_body_size 64m;
            client_body_buffer_size 128k;
            arena upload;
        }
"""


def nginx_arena_conf(port, tls_port, mat, sdir, static, module=None):
    """servers.nginx_conf with the arena's static directory as its /static/
    root, plus: gzip_static (the .gz siblings; nginx-light has no brotli),
    the MIME types, and with `module` (the nginx arena module's path)
    loaded, /baseline11, /pipeline and /upload from it; without it GET
    /pipeline is answered "ok" by nginx's return directive."""
    conf = servers.nginx_conf(port, sdir, tls=(tls_port, mat["cert"],
                                               mat["key"]), root=static)
    conf = _patch(conf, "    default_type text/plain;",
                  "    include /etc/nginx/mime.types;\n"
                  "    default_type text/plain;\n    gzip_vary on;")
    conf = conf.replace("            sendfile on;\n",
                        "            sendfile on;\n            gzip_static on;\n")
    if module:
        conf = _patch(conf, "daemon off;\n",
                      "load_module %s;\ndaemon off;\n" % module)
        return _patch(conf, "        location = / {",
                      NGINX_MODULE_LOCATIONS + "        location = / {")
    return _patch(conf, "        location = / {",
                  "        location = /pipeline {\n"
                  "            return 200 \"ok\";\n        }\n"
                  "        location = / {")


H2O_PIPELINE = """      /pipeline:
        mruby.handler: |
          Proc.new do |env|
            [200, {"content-type" => "text/plain"}, ["ok"]]
          end
"""


def h2o_arena_conf(args, port, tls_port, mat, sdir, static):
    """servers.h2o_conf (the TLS template) with the arena's static
    directory under /static, file.send-compressed (the .br and .gz
    siblings) and GET /pipeline answered "ok" by an mruby handler."""
    conf = servers.h2o_conf(args.h2o_tls_conf, port, sdir,
                            tls=(tls_port, mat["cert"], mat["key"]),
                            root=static)
    conf = _patch(conf, "        file.dir: %s\n" % static,
                  "        file.dir: %s\n        file.send-compressed: ON\n"
                  % static)
    return _patch(conf, "      /upload:\n", H2O_PIPELINE + "      /upload:\n")


class Running:
    """A started server: srv (a servers.Server: pids, shim snapshots),
    ports {kind: port}, app (arena.App, arena kind only)."""

    def __init__(self, srv, ports, app=None):
        self.srv, self.ports, self.app = srv, ports, app

    def stop(self):
        """Stop it; a note when it did not exit cleanly, or None."""
        if self.app is not None:
            rc = self.app.stop()
            self.srv.proc = None
            if rc != 0:
                return "exited with %s on SIGTERM: %s" % (
                    rc, self.app.stderr_text(300).strip())
            return None
        self.srv.stop()
        return None


def start(args, name, workdir, data, shim, database=None):
    e = ENTRIES[name]
    sdir = os.path.join(workdir, "%s.%d" % (name, len(os.listdir(workdir))))
    os.makedirs(sdir)
    mat = tlsclient.material(workdir)
    static = os.path.join(data, "static")
    if e.kind == "arena":
        srv = servers.Server(name, [], sdir, shim=shim)
        env = {}
        if shim:
            os.makedirs(srv.shim_dir)
            env = {"LD_PRELOAD": shim, "TERN_ALLOCSHIM_DIR": srv.shim_dir}
        with _pinned(args.server_cpu):
            app = arena.App(entry_binary(args, e), data, mat["cert"],
                            mat["key"], database=database,
                            workers=args.workers,
                            extra=args.extra_args.get(name, ()), env=env)
        srv.argv, srv.proc = app.argv, app.proc
        srv.port = app.ports.get("h1")
        return Running(srv, dict(app.ports), app)
    if e.kind == "lws":
        srv = servers.Server(name, [entry_binary(args, e), "--port", "0"],
                             sdir, shim=shim)
        srv.start(args.server_cpu)
        return Running(srv, {"h1": srv.port})
    port, tport = common.free_port(), common.free_port()
    if e.kind == "nginx":
        conf = os.path.join(sdir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(nginx_arena_conf(port, tport, mat, sdir, static,
                                     nginx_module(args)))
        srv = servers.Server(name, [args.nginx, "-p", sdir + "/", "-e",
                                    os.path.join(sdir, "error.log"), "-c",
                                    conf], sdir, port=port, shim=shim,
                             tls_port=tport,
                             ready_file=os.path.join(sdir, "nginx.pid"))
    else:
        conf = os.path.join(sdir, "h2o.conf")
        with open(conf, "w") as f:
            f.write(h2o_arena_conf(args, port, tport, mat, sdir, static))
        srv = servers.Server(name, [args.h2o, "-c", conf], sdir, port=port,
                             shim=shim, tls_port=tport)
    srv.start(args.server_cpu)
    # the TLS listener speaks HTTP/1.1 and h2 by ALPN
    return Running(srv, {"h1": port, "h2": tport})


# ---------------------------------------------------------------------------
# the loads

def spec_file(workdir, prof):
    """The SPEC of perf/arena/templates.lua for prof, as a Lua file."""
    path = os.path.join(workdir, "spec-%s.lua" % prof.name)
    reqs = ",\n ".join("{upload = %d}" % r["upload"] if isinstance(r, dict)
                       else json.dumps(r) for r in prof.reqs)
    with open(path, "w") as f:
        f.write("-- generated by perf/perf arena (%s)\nreturn {mode = %s, "
                "every = %d, reqs = {\n %s}}\n" % (
                    prof.name, json.dumps(prof.mode), prof.every, reqs))
    return path


def run_wrk(args, workdir, prof, port, conns, duration):
    """wrk with templates.lua (perf/pipeline.lua for pipelined) for
    duration s; loads.parse_wrk's dict, plus bytes (read, heads
    included)."""
    tls = prof.port == "h1-tls"
    if prof.tool == "pipeline":
        script, extra, path = PIPELINE_LUA, ["16"], prof.reqs[0]
    else:
        script, extra, path = LUA, [spec_file(workdir, prof)], "/"
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk,
            "-t%d" % prof.threads, "-c%d" % (conns - conns % prof.threads),
            "-d%ds" % duration, "--timeout", "10s",
            "-s", loads.wrk_script(workdir, script),
            "%s://127.0.0.1:%d%s" % ("https" if tls else "http", port, path),
            "--"] + extra
    rc, text = common.run_bounded(argv, duration + 60)
    if rc != 0:
        raise BenchError("wrk exited %d: %s" % (rc, text[-300:]))
    r = loads.parse_wrk(text)
    if not r["requests"]:
        raise BenchError("could not parse wrk's output: %s" % text[-300:])
    perf = [l for l in text.splitlines() if l.startswith("PERFJSON ")]
    r["bytes"] = json.loads(perf[-1][9:])["bytes"] if perf else None
    r.update({"tool": "wrk", "argv": argv, "raw": text})
    return r


def run_h2load(args, workdir, prof, port, conns, take):
    """loads.run_h2load; several paths go to h2load -i (a URI file),
    through a wrapper that puts -i first (h2load then ignores the URI
    loads.run_h2load adds at the end)."""
    tls = prof.port == "h2"
    a = args
    if len(prof.reqs) > 1:
        uris = os.path.join(workdir, "uris-%s.txt" % prof.name)
        with open(uris, "w") as f:
            f.write("".join("%s://127.0.0.1:%d%s\n" % (
                "https" if tls else "http", port, p) for p in prof.reqs))
        wrapper = os.path.join(workdir, "h2load-%s" % prof.name)
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec %s -i %s \"$@\"\n" % (
                shutil.which(args.h2load) or args.h2load, uris))
        os.chmod(wrapper, 0o755)
        a = types.SimpleNamespace(client_cpu=args.client_cpu, h2load=wrapper)
    res = loads.run_h2load(a, workdir, port, args.duration, args.warmup,
                           conns, prof.streams, prof.reqs[0], prof.headers,
                           on_measure_start=take, tls=tls)
    res["bytes"] = res.get("data_bytes")
    return res


def _sc(prof, conns):
    """The scenario-like object loads.run_wsload / run_h3load and
    measure's field helpers read."""
    return types.SimpleNamespace(
        name=prof.name, path=prof.reqs[0], connections=conns, clients=conns,
        streams=prof.streams, ws_depth=1, ws_size=5, ws_deflate=False,
        headers=prof.headers, upload=None, method="GET", load=prof.tool,
        protocol="h3" if prof.tool == "h3load" else "ws" if
        prof.tool == "wsload" else "h2", tls=prof.port == "h2",
        body=None, relay_ms=0)


# ---------------------------------------------------------------------------
# one row

def _probe(t, prof):
    """The status of the profile's route (curl), 0 when none came."""
    meth, path = prof.probe
    opts = ("-X", "POST", "--data-binary", "1") if meth == "POST" else ()
    return t.curl(prof.port, path, *opts).status


def check(row, host, ports, data, prof, workdir):
    """arena.py's checks of the profile (and a probe of its route first:
    404 makes the row n/a).  A server that fails a check is not measured
    on the profile: the row is invalid, with the check."""
    if prof.probe:
        t = arena.Target(host, ports, data, workdir)
        st = _probe(t, prof)
        if st == 404:
            row["status"] = "n/a"
            row["problems"].append("%s %s answers 404 (no such route)"
                                   % prof.probe)
            return False
    lines = []
    res = arena.validate(host, ports, data, [prof.check], out=lines.append)
    row["check"] = res.summary()
    for status, _, what, detail in res.rows:
        if status == "FAIL":
            row["problems"].append("check failed: %s: %s" % (what, detail))
    return not row["problems"]


def measure_row(args, workdir, name, prof, data, pg, shim):
    row = {"server": name, "scenario": prof.name, "status": "ok",
           "problems": [], "notes": []}
    e = ENTRIES[name]
    conns = args.conns.get(prof.name, prof.conns)
    row["load_text"] = prof.load_text(conns)
    if prof.name in e.notes:
        row["notes"].append(e.notes[prof.name])
    if prof.name in e.why_not:
        row["status"] = "n/a"
        row["problems"].append(e.why_not[prof.name])
        return row
    if e.profiles is not None and prof.name not in e.profiles:
        row["status"] = "n/a"
        row["problems"].append(e.why)
        return row
    why = module_missing(args, name, prof.name)
    if why:
        row["status"] = "n/a"
        row["problems"].append(why)
        return row
    if e.kind == "nginx" and prof.name == "pipelined" and \
            not nginx_module(args):
        row["notes"].append("/pipeline from nginx's return directive (the "
                            "arena module is not built)")
    if prof.name == "async-db" and isinstance(pg, str):
        row["status"] = "n/a"
        row["problems"].append(pg)
        return row
    why = available(args, name)
    if why:
        row["status"] = "invalid"
        row["problems"].append("not available: " + why)
        return row
    run = None
    try:
        run = start(args, name, workdir, data, shim,
                    database=pg.url if prof.name == "async-db" else None)
        row["server_argv"] = run.srv.argv
        row["ports"] = run.ports
        if prof.port not in run.ports:
            row["status"] = "n/a"
            row["problems"].append("%s prints no `listening %s` line" % (
                name, prof.port))
            return row
        if args.check and not check(row, "127.0.0.1", run.ports, data, prof,
                                    workdir):
            if row["status"] != "n/a":
                row["status"] = "invalid"
            return row
        _measure(args, workdir, run, prof, conns, row,
                 pg if prof.name == "async-db" else None)
        if not run.srv.alive():
            raise BenchError("server exited during the run: %s" % (
                run.app.stderr_text(300) if run.app else
                run.srv.output_tail()))
    except (BenchError, SetupError) as e:
        row["status"] = "invalid"
        row["problems"].append(str(e))
    finally:
        if run is not None:
            note = run.stop()
            if note:
                row["notes"].append(note)
    return row


def _measure(args, workdir, run, prof, conns, row, pg):
    srv = run.srv
    port = run.ports[prof.port]
    sc = _sc(prof, conns)
    wrk = prof.tool in ("wrk", "pipeline")
    if wrk and args.warmup > 0:
        run_wrk(args, workdir, prof, port, conns, args.warmup)
    snap = {}

    def take(client_pid=None):
        snap["sh0"] = srv.shim_snapshot() if srv.shim else None
        snap["pids"] = srv.pids()
        snap["c0"] = common.cpu_ticks(snap["pids"])
        snap["pg0"] = common.cpu_ticks(common.process_tree(pg.proc.pid)) \
            if pg else 0
        snap["t0"] = time.monotonic()
        snap["client0"] = (common.cpu_ticks([client_pid]) / common.CLK_TCK
                           if client_pid else 0.0)

    r0 = os.times()
    stall = None
    if wrk:
        take()
        probe = measure.StallProbe(port, args.duration).start() \
            if args.duration >= 2 and prof.port == "h1" else None
        try:
            res = run_wrk(args, workdir, prof, port, conns, args.duration)
        finally:
            stall = probe.result() if probe else None
    elif prof.tool == "h2load":
        res = run_h2load(args, workdir, prof, port, conns, take)
    elif prof.tool == "h3load":
        res = loads.run_h3load(args, workdir, port, args.duration,
                               args.warmup, sc, expect_body=prof.expect,
                               on_measure_start=take)
    else:
        res = loads.run_wsload(args, workdir, port, args.duration,
                               args.warmup, sc, on_measure_start=take)
    t1 = time.monotonic()
    c1 = common.cpu_ticks(set(snap["pids"]) | set(srv.pids()))
    r1 = os.times()
    sh1 = srv.shim_snapshot() if srv.shim else None
    wall = t1 - snap["t0"]
    n = res["requests"]
    row["load"] = {k: v for k, v in res.items() if k != "raw"}
    for k in ("errors", "non2xx", "rate", "duration_s"):
        row[k] = res[k]
    row["requests"] = n
    lat = (res.get("latency_us") or {}) if prof.latency else {}
    for k in ("p50", "p90", "p99", "p999", "max"):
        row["lat_" + k] = lat.get(k)
    row["server_cpu_s"] = (c1 - snap["c0"]) / common.CLK_TCK
    row["server_cpu_util"] = row["server_cpu_s"] / wall if wall else None
    ccpu = ((r1.children_user - r0.children_user) +
            (r1.children_system - r0.children_system)) - snap["client0"]
    row["client_cpu_util"] = ccpu / wall if wall else None
    row["cpu_us_per_req"] = measure._per(row["server_cpu_s"] * 1e6, n)
    row["peak_rss"] = common.hwm_bytes(srv.own_pids())
    if res.get("bytes") is not None and n:
        row["bytes_per_resp"] = res["bytes"] / n
        row["mib_per_s"] = res["bytes"] / (1 << 20) / (res["duration_s"] or wall)
    if pg is not None:
        pgc = common.cpu_ticks(common.process_tree(pg.proc.pid)) - snap["pg0"]
        row["db_cpu_us_per_req"] = measure._per(pgc / common.CLK_TCK * 1e6, n)
    measure._alloc_fields(row, None, None, snap["sh0"], sh1, n)
    if prof.tool == "h2load":
        measure._h2load_fields(row, res, sc)
    elif prof.tool == "h3load":
        measure._h3load_fields(row, res, sc)
    elif prof.tool == "wsload":
        measure._wsload_fields(row, res, sc)
    common.load_problems(row, res, n)
    if stall is not None and stall[0]:
        row["stalled_connections"] = stall[0]
        row["problems"].append("%d of %d connections were not served for "
                               "%.1f s (starved)" % stall)
    if res.get("exit_status"):
        row["problems"].append("%s exited %s" % (res["tool"],
                                                 res["exit_status"]))
    if row["problems"]:
        row["status"] = "invalid"


# ---------------------------------------------------------------------------
# the campaign: rounds x profiles x servers, the summary, the report

EXTRA_KEYS = ("bytes_per_resp", "db_cpu_us_per_req")


def parse_list(text, known, what):
    out = []
    for x in (text or "").split(","):
        x = x.strip()
        if x == "all":
            out += [k for k in known if k not in out]
        elif x and x not in known:
            raise SetupError("unknown %s %r (known: %s)" % (what, x,
                                                            ", ".join(known)))
        elif x and x not in out:
            out.append(x)
    return out


def parse_conns(text):
    """'json=126,static=64' -> {profile: connections}."""
    out = {}
    for item in (text or "").split(","):
        if item.strip():
            k, sep, v = item.strip().partition("=")
            if not sep or k not in PROFILES or not v.isdigit() or int(v) < 1:
                raise SetupError("--conns wants PROFILE=N,... (got %r)" % item)
            out[k] = int(v)
    return out


def start_pg(args):
    """The throwaway PostgreSQL, its processes pinned to the server's CPU
    (the backends it forks inherit that); the reason as a string when
    there is none."""
    try:
        pg = pgserver.Postgres()
    except pgserver.Unavailable as e:
        return "no PostgreSQL: %s" % e
    for pid in common.process_tree(pg.proc.pid):
        try:
            for tid in os.listdir("/proc/%d/task" % pid):
                os.sched_setaffinity(int(tid), _cpus(args.server_cpu))
        except OSError:
            pass
    log("PostgreSQL %s (pinned to CPU %s)" % (pg.url, args.server_cpu))
    return pg


def environment(args, server_names, profile_names):
    env = common.machine()
    env["pinning"] = {"server_cpu": args.server_cpu,
                      "client_cpu": args.client_cpu}
    env["config"] = {
        "duration_s": args.duration, "warmup_s": args.warmup,
        "rounds": args.rounds, "servers": server_names,
        "scenarios": profile_names, "shim": args.shim_path,
        "workers": args.workers, "checks": args.check,
        "profiles": {p: {"ours": PROFILES[p].load_text(
            args.conns.get(p, PROFILES[p].conns)),
            "httparena": PROFILES[p].spec} for p in profile_names}}
    env["server_labels"] = {n: ENTRIES[n].label for n in server_names}
    tools = {"wrk": common.first_line([args.wrk, "-v"]),
             "h2load": "h2load " + common.version_of(
                 [args.h2load, "--version"], r"nghttp2/[\d.]+")}
    if "nginx" in server_names:
        tools["nginx"] = common.first_line([args.nginx, "-v"])
    if "h2o" in server_names:
        tools["h2o"] = common.first_line([args.h2o, "--version"])
    env["tools"] = tools
    env["rlimit_nofile"] = common.raise_nofile()
    return env


def run_all(args, server_names, profile_names):
    """Every (round, profile, server) row; the environment."""
    for tool in ("taskset", args.wrk, args.h2load, "curl", "openssl"):
        if shutil.which(tool) is None:
            raise SetupError("%s not found (perf/perf setup)" % tool)
    env = environment(args, server_names, profile_names)
    env["rounds_load"] = []
    work = tempfile.mkdtemp(prefix="perf-arena-bench.")
    pg = None
    rows = []
    try:
        data = os.path.abspath(args.data) if args.data else \
            arena.write_data(os.path.join(work, "data"))
        if "async-db" in profile_names and any(
                ENTRIES[s].profiles is None for s in server_names):
            pg = start_pg(args)
        total = args.rounds * len(server_names) * len(profile_names)
        k = 0
        for rnd in range(1, args.rounds + 1):
            q = common.wait_quiet(args.load_threshold, args.load_wait)
            q["round"] = rnd
            env["rounds_load"].append(q)
            log("round %d/%d (load average %.2f%s)" % (
                rnd, args.rounds, q["loadavg1"],
                "" if q["quiet"] else ", NOT quiet"))
            for p in profile_names:
                for name in server_names:
                    k += 1
                    row = measure_row(args, work, name, PROFILES[p], data,
                                      pg, args.shim_path)
                    row["round"] = rnd
                    rows.append(row)
                    log("  [%d/%d] %-12s %-13s %s" % (k, total, p, name,
                                                      brief(row)))
    finally:
        if pg is not None and not isinstance(pg, str):
            pg.stop()
        common.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    return env, rows


def brief(row):
    if row["status"] == "n/a":
        return "n/a: " + "; ".join(row["problems"])[:200]
    if row["status"] != "ok":
        return "INVALID: " + "; ".join(row["problems"])[:300]
    parts = ["%s/s" % format(row["rate"], ",.0f")]
    if row.get("cpu_us_per_req") is not None:
        parts.append("%.2f us CPU/req" % row["cpu_us_per_req"])
    if row.get("lat_p99") is not None:
        parts.append("p99 %.0f us" % row["lat_p99"])
    parts.append("RSS %s" % common.human_bytes(row.get("peak_rss")))
    if row.get("shim_allocs_per_req") is not None:
        parts.append("%.2f allocs/req" % row["shim_allocs_per_req"])
    if row.get("bytes_per_resp") is not None:
        parts.append("%.0f B/resp" % row["bytes_per_resp"])
    if row.get("notes"):
        parts.append("NOTE: " + "; ".join(row["notes"]))
    return ", ".join(parts)


def summarize(rows, server_names, profile_names):
    """summary.summarize, plus medians of EXTRA_KEYS."""
    summ = summary.summarize(rows, server_names, profile_names)
    for p in profile_names:
        for name in server_names:
            cell = summ[p][name]
            ok = [r for r in rows if r["scenario"] == p and
                  r["server"] == name and r["status"] == "ok"]
            for key in EXTRA_KEYS:
                xs = [r[key] for r in ok if r.get(key) is not None]
                if xs:
                    cell["values"][key] = {"median": statistics.median(xs),
                                           "min": min(xs), "max": max(xs)}
    return summ


COLUMNS = (("req/s", "rate", ",.0f"), ("server CPU µs/req", "cpu_us_per_req",
                                       ".2f"),
           ("p99 µs", "lat_p99", ",.0f"), ("peak RSS", "peak_rss", "bytes"),
           ("allocs/req (shim)", "shim_allocs_per_req", ".2f"),
           ("B/resp", "bytes_per_resp", ",.0f"))


_ALIGN = ["---"] + ["---:"] * (len(COLUMNS) + 1)


def _reason(cell):
    if cell["status"] in ("n/a", "invalid") and cell.get("problems"):
        return cell["problems"][0]
    return ""


def _errors(cell):
    if cell["status"] != "ok":
        return "-"
    return "%d / %d" % (summary.val(cell, "errors") or 0,
                        summary.val(cell, "non2xx") or 0)


def _env_lines(env):
    c = env["config"]
    q = ", ".join("%.2f%s" % (x["loadavg1"], "" if x["quiet"] else
                              " (not quiet)") for x in env.get("rounds_load", []))
    return ["- %s, revision %s; %s x %s, kernel %s" % (
        env["date"], env["git_revision"], env["cpu_model"], env["nproc"],
        env["kernel"]),
        "- server on CPU %s (%s worker(s) for the arena entries), load "
        "generator on CPU %s" % (env["pinning"]["server_cpu"], c["workers"],
                                 env["pinning"]["client_cpu"]),
        "- %d round(s) x %d s measured after a %d s warm-up; a fresh server "
        "per row; load average before each round: %s" % (
            c["rounds"], c["duration_s"], c["warmup_s"], q or "n/a"),
        "- allocation shim: %s; validation checks before each row: %s" % (
            c["shim"] or "none", "on" if c["checks"] else "off"),
        "- " + "; ".join(env["tools"].values())]


def _load_table(env, profile_names):
    return summary.table(["profile", "HttpArena's load", "here (scaled)"], [
        [p, env["config"]["profiles"][p]["httparena"],
         env["config"]["profiles"][p]["ours"]] for p in profile_names],
        ["---"] * 3)


NOTES = [
    "Connections are scaled to two cores: HttpArena's server has 64 CPUs, "
    "here it has one and the load generator the other, so each profile runs "
    "its smallest HttpArena connection count divided by 8 to 16 (the table "
    "above), one count per profile.",
    "gcannon's templates: wrk runs one thread per template and each thread "
    "sends its one template on its connections, so every connection keeps "
    "one template as gcannon's do. gcannon's -r N (reconnect after N "
    "responses) is `Connection: close` on every Nth request of a thread, "
    "which the server honours and wrk reconnects: the same share of "
    "requests opens a connection.",
    "req/s counts every response; a row with socket errors or any non-2xx "
    "is invalid. p99 is wrk's (per request, closed loop), h3load's or "
    "wsload's; none for pipelined (wrk times a batch) and h2load (no "
    "percentiles). B/resp: wrk's bytes read per response (heads included), "
    "h2load's DATA bytes per response.",
    "Server CPU is the server's processes' user+system time over the "
    "measured window; for async-db, PostgreSQL (pinned to the server's CPU) "
    "is apart, in the notes.",
]


def _notes(summ, profile_names, server_names):
    L = []
    for p in profile_names:
        for n in server_names:
            cell = summ[p][n]
            db = summary.val(cell, "db_cpu_us_per_req")
            if db is not None:
                L.append("- %s, %s: PostgreSQL used %.1f µs CPU per request"
                         % (p, n, db))
            for x in cell.get("notes", []):
                L.append("- %s, %s: %s" % (p, n, x))
    return L


def run_markdown(env, summ, name, profile_names):
    rows = []
    for p in profile_names:
        cell = summ[p][name]
        why = _reason(cell)
        rows.append([p] + [summary.fmt_cell(cell, k, f) for _, k, f in COLUMNS]
                    + [_errors(cell), why])
    L = ["# perf/perf arena run: %s" % env["server_labels"][name], ""]
    L += _env_lines(env) + [""]
    L += summary.table(["profile"] + [c[0] for c in COLUMNS] +
                       ["errors / non-2xx", "n/a or invalid: why"], rows,
                       _ALIGN + ["---"])
    L += ["", "## Loads", ""] + _load_table(env, profile_names)
    L += [""] + ["- " + x for x in NOTES]
    extra = _notes(summ, profile_names, [name])
    if extra:
        L += ["", "## Notes", ""] + extra
    return "\n".join(L) + "\n"


def _best(summ, p, names, key, higher):
    vals = [(summary.val(summ[p][n], key), n) for n in names]
    vals = [v for v in vals if v[0] is not None]
    if not vals:
        return None
    return (max if higher else min)(vals)


def _ratio(v, best):
    if v is None or best is None or not best[0]:
        return "-"
    return "%.2fx" % (v / best[0])


def compare_markdown(env, summ, server_names, profile_names):
    peers = [n for n in server_names if n != "tern"]
    L = ["# perf/perf arena compare", ""] + _env_lines(env) + [""]
    L += ["Ratios are against the best peer of the profile (the best valid "
          "server other than tern): req/s higher is better, CPU per request "
          "lower is better.", ""]
    head = ["profile", "best peer (req/s)", "tern req/s vs it",
            "best peer (CPU/req)", "tern CPU/req vs it"]
    over = []
    for p in profile_names:
        br, bc = _best(summ, p, peers, "rate", True), \
            _best(summ, p, peers, "cpu_us_per_req", False)
        t = summ[p].get("tern")
        over.append([p, br[1] if br else "-",
                     _ratio(summary.val(t, "rate"), br) if t else "-",
                     bc[1] if bc else "-",
                     _ratio(summary.val(t, "cpu_us_per_req"), bc) if t
                     else "-"])
    if "tern" in server_names and peers:
        L += ["## tern against the best peer", ""] + summary.table(
            head, over, ["---", "---", "---:", "---", "---:"])
        L.append("")
    for p in profile_names:
        br = _best(summ, p, peers, "rate", True)
        bc = _best(summ, p, peers, "cpu_us_per_req", False)
        rows = []
        for n in server_names:
            cell = summ[p][n]
            rows.append([n] + [summary.fmt_cell(cell, k, f)
                               for _, k, f in COLUMNS] +
                        [_ratio(summary.val(cell, "rate"), br),
                         _ratio(summary.val(cell, "cpu_us_per_req"), bc),
                         _errors(cell), _reason(cell)])
        L += ["## %s" % p, "", "%s (HttpArena: %s)" % (
            env["config"]["profiles"][p]["ours"],
            env["config"]["profiles"][p]["httparena"]), ""]
        L += summary.table(["server"] + [c[0] for c in COLUMNS] +
                           ["req/s vs best peer", "CPU/req vs best peer",
                            "errors / non-2xx", "n/a or invalid: why"], rows,
                           _ALIGN + ["---:"] * 2 + ["---"])
        L.append("")
    L += ["## Servers", ""] + ["- %s: %s" % (n, env["server_labels"][n])
                               for n in server_names]
    L += ["", "## Loads", ""] + _load_table(env, profile_names)
    L += [""] + ["- " + x for x in NOTES]
    extra = _notes(summ, profile_names, server_names)
    if extra:
        L += ["", "## Notes", ""] + extra
    return "\n".join(L) + "\n"


def write(out, base, env, summ, rows, md):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, base + ".json")
    with open(path + ".tmp", "w") as f:
        json.dump({"environment": env, "summary": summ, "rows": rows}, f,
                  indent=1, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)
    with open(os.path.join(out, base + ".md"), "w") as f:
        f.write(md)
    log("wrote %s/%s.{json,md}" % (out, base))


def main(args, compare):
    """perf/perf arena run (compare False) or compare."""
    profile_names = parse_list(args.profiles, ORDER, "profile") or list(ORDER)
    if compare:
        server_names = parse_list(args.servers, list(ENTRIES), "server")
    else:
        server_names = [args.server]
    env, rows = run_all(args, server_names, profile_names)
    summ = summarize(rows, server_names, profile_names)
    out = os.path.abspath(args.out_dir)
    if compare:
        md = compare_markdown(env, summ, server_names, profile_names)
        write(out, "summary", env, summ, rows, md)
    else:
        md = run_markdown(env, summ, server_names[0], profile_names)
        write(out, "latest", env, summ, rows, md)
    print(md)
    return 0 if all(r["status"] in ("ok", "n/a") for r in rows) else 1
