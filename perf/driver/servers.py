"""The servers under test: how each is started, checked and accounted.

Every server runs in its own process (own session), pinned with taskset,
with a fresh temporary directory as its working directory, optionally under
the allocation-counting shim (LD_PRELOAD).  A Server is started once per
(round, scenario), so peak RSS and the counters belong to one scenario.
"""

import os
import re
import shutil
import signal
import socket
import tempfile
import time

from . import common
from .common import BenchError, log
from . import balance, h1client, tlsclient
from .scenarios import BALANCE, STATIC_FILES

# The resources of the routed app (examples/reference/reference.c: 25
# resources, routes /api/v1/R/:id and /api/v1/R/:id/detail, 50 in all).
APP_RESOURCES = (
    "users", "orders", "items", "carts", "payments",
    "invoices", "products", "reviews", "sessions", "tokens",
    "teams", "projects", "tasks", "comments", "files",
    "folders", "tags", "events", "alerts", "reports",
    "metrics", "logs", "jobs", "queues", "webhooks")

SHIM_SIGNAL = signal.SIGRTMIN + 4
SHIM_LINE = re.compile(r"allocs=(\d+)\s+bytes=(\d+)\s+frees=(\d+)")


# ---------------------------------------------------------------------------
# nginx: the configuration is generated here, so that
# it can carry the routed app and a per-scenario worker_connections.

NGINX_ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"
# balance-stall's GET /stall?ms=N on nginx: an embedded Perl handler that
# sleeps on the worker process's thread (select with a timeout), as tern's
# reference server does on its worker; nginx's echo_sleep would wait on a
# timer and hold nothing
NGINX_PERL_MODULE = "/usr/lib/nginx/modules/ngx_http_perl_module.so"
NGINX_STALL = """
        location = /stall {
            perl 'sub { my $r = shift;
                my ($ms) = (($r->args || "") =~ /(?:^|&)ms=(\\d+)/);
                select(undef, undef, undef, ($ms || 0) / 1000.0);
                $r->header_out("Content-Length", 7);
                $r->send_http_header("text/plain");
                $r->print("stalled");
                return 0; }';
        }
"""


# The locations of nginx's TLS and h2c server blocks.  The upload sink
# reads the whole body before it answers (the echo module's
# echo_read_request_body; nginx's own `return` would discard the body and,
# on HTTP/2, answer before it arrived and reset the stream) into one
# memory buffer (client_body_buffer_size: no temporary file), then answers
# the Content-Length it read.
NGINX_H2_LOCATIONS = """
        http2_max_concurrent_streams 128;
%(static)s
        location = / {
            return 200 "Hello, World!";
        }
        location = /upload {
            client_max_body_size 0;
            client_body_buffer_size 16m;
            client_body_in_single_buffer on;
            echo_read_request_body;
            echo -n $content_length;
        }
        location / {
            return 404;
        }
"""


def static_root(workdir):
    """The static rows' docroot (scenarios.STATIC_FILES), written once per
    run into the work directory."""
    root = os.path.join(workdir, "static-root")
    if not os.path.isdir(root):
        os.makedirs(root + ".tmp", exist_ok=True)
        for fn, data in STATIC_FILES.items():
            with open(os.path.join(root + ".tmp", fn), "wb") as f:
                f.write(data)
        os.rename(root + ".tmp", root)
    return root


def nginx_static(root):
    """nginx's /static/ location: sendfile, and the open file cache (no
    open or stat per request for a hot file), as a tuned nginx serves
    files."""
    return """
        location /static/ {
            alias %s/;
            sendfile on;
            tcp_nopush on;
            open_file_cache max=1000 inactive=60s;
            open_file_cache_valid 60s;
        }
""" % root


def nginx_tls_server(tls_port, cert, key, root):
    """The TLS server block (HTTP/1.1 and HTTP/2 by ALPN) of the TLS
    scenarios.  TLS 1.3 is switched on (nginx 1.22's default
    ssl_protocols stop at 1.2; 1.23.4 and later have it on): every other
    server, tern included, negotiates 1.3, and a comparison across
    protocol versions would measure the versions."""
    return """
    server {
        listen 127.0.0.1:%(port)d ssl http2 backlog=4096;
        server_name _;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        ssl_session_cache shared:SSL:1m;
        ssl_session_tickets on;
%(locations)s    }
""" % {"port": tls_port, "cert": cert, "key": key,
       "locations": NGINX_H2_LOCATIONS % {"static": nginx_static(root)}}


def nginx_h2c_server(h2c_port, root):
    """The cleartext HTTP/2 server block of h2c-upload: nginx 1.22 speaks
    h2c (prior knowledge only, no Upgrade) on a listener marked http2,
    which then refuses HTTP/1.1, so it gets a port of its own beside the
    HTTP/1.1 one.  The same locations as over TLS."""
    return """
    server {
        listen 127.0.0.1:%(port)d http2 backlog=4096;
        server_name _;
%(locations)s    }
""" % {"port": h2c_port,
       "locations": NGINX_H2_LOCATIONS % {"static": nginx_static(root)}}


def nginx_conf(port, tmpdir, worker_connections=4096, tls=None,
               h2c_port=None, access_log=None, root=None, workers=1,
               reuseport=False, pid_log=None, stall=False):
    """nginx.conf.  workers: worker_processes; reuseport: a listening
    socket per worker (listen ... reuseport) instead of one they share;
    pid_log: an access log of `$pid $msec $connection` lines (the balance
    rows count each worker's requests in it), buffered as nginx-logged's;
    stall: GET /stall?ms=N held on the worker (NGINX_STALL)."""
    routes = []
    for r in APP_RESOURCES:
        routes.append(
            '        location ~ ^/api/v1/%s/([^/]+)/detail$ {\n'
            '            return 200 "%s $1 detail $http_x_request_id";\n'
            '        }\n'
            '        location ~ ^/api/v1/%s/([^/]+)$ {\n'
            '            return 200 "%s $1 $http_x_request_id";\n'
            '        }\n' % (r, r, r, r))
    return """# generated by perf/perf (perf/driver/servers.py)
%(load_module)sdaemon off;
master_process on;
worker_processes %(workers)d;
worker_rlimit_nofile %(nofile)d;
user root root;
pid %(tmp)s/nginx.pid;
error_log %(tmp)s/error.log warn;
lock_file %(tmp)s/nginx.lock;

events {
    use epoll;
    worker_connections %(wc)d;
    multi_accept on;
    accept_mutex off;
}

http {
    %(access_log)s;
    log_not_found off;
    server_tokens off;
    client_body_temp_path %(tmp)s/client_body;
    proxy_temp_path %(tmp)s/proxy;
    fastcgi_temp_path %(tmp)s/fastcgi;
    uwsgi_temp_path %(tmp)s/uwsgi;
    scgi_temp_path %(tmp)s/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    tcp_nodelay on;
    charset off;
    default_type text/plain;

    server {
        listen 127.0.0.1:%(port)d%(reuseport)s backlog=4096;
        server_name _;

        location = / {
            return 200 "Hello, World!";
        }
%(stall)s%(static)s%(routes)s
        location / {
            return 404;
        }
    }
%(tls)s}
""" % {"port": port, "tmp": tmpdir, "wc": worker_connections,
       "nofile": worker_connections * 2 + 100, "routes": "".join(routes),
       # nginx-logged: the combined format through a 64 KiB buffer
       # flushed each second, nginx's cheapest production setting
       # (unbuffered, it would write(2) once per request)
       "access_log": ("access_log %s combined buffer=64k flush=1s"
                      % access_log) if access_log else
       ("log_format %s;\n    access_log %s balance buffer=64k flush=1s" % (
           balance.NGINX_LOG_FORMAT, pid_log)) if pid_log else "access_log off",
       "workers": workers, "reuseport": " reuseport" if reuseport else "",
       "static": nginx_static(root) if root else "",
       "tls": (nginx_tls_server(*tls, root) if tls else "") + (
           nginx_h2c_server(h2c_port, root) if h2c_port else ""),
       "stall": NGINX_STALL if stall else "",
       "load_module": (("load_module %s;\n" % NGINX_ECHO_MODULE)
                       if tls or h2c_port else "") + (
                           ("load_module %s;\n" % NGINX_PERL_MODULE)
                           if stall else "")}


def h2o_conf(template, port, tmpdir, max_conns=None, tls=None, root=None,
             threads=1):
    with open(template) as f:
        conf = f.read()
    if threads != 1:
        conf = re.sub(r"(?m)^num-threads:.*$", "num-threads: %d" % threads,
                      conf)
    conf = conf.replace("@PORT@", str(port)).replace("@TMPDIR@", tmpdir)
    conf = conf.replace("@STATIC@", root or tmpdir)
    if tls:
        conf = (conf.replace("@TLS_PORT@", str(tls[0]))
                .replace("@CERT@", tls[1]).replace("@KEY@", tls[2]))
    if max_conns:
        if re.search(r"(?m)^max-connections:", conf):
            conf = re.sub(r"(?m)^max-connections:.*$",
                          "max-connections: %d" % max_conns, conf)
        else:
            conf += "\nmax-connections: %d\n" % max_conns
    return conf


# ---------------------------------------------------------------------------

class Server:
    def __init__(self, name, argv, workdir, port=None, ready_file=None,
                 env=None, shim=None, tls_port=None, read_tls_port=False,
                 plain=True, h2c=None, quic_port=None, read_quic_port=False):
        self.name = name
        self.argv = argv
        self.workdir = workdir
        self.port = port          # known up front, or read from the output
        self.tls_port = tls_port  # the TLS port (HTTP/1.1 and h2 by ALPN)
        self.read_tls_port = read_tls_port  # 'tls listening on PORT' (tern)
        self.plain = plain        # False: no cleartext HTTP/1.1 port (nghttpd)
        # the cleartext HTTP/2 (prior knowledge) port: "plain" when it is
        # the HTTP/1.1 port (tern, h2o), a port number of its own (nginx,
        # nghttpd --no-tls), None when not asked for
        self.h2c = h2c
        self.quic_port = quic_port  # the UDP port of HTTP/3 (QUIC)
        self.read_quic_port = read_quic_port  # 'quic listening on PORT' (tern)
        self.ready_file = ready_file
        self.env = env
        self.shim = shim          # path of the shim when preloaded
        self.shim_dir = os.path.join(workdir, "shim") if shim else None
        self.proc = None
        self.out_path = os.path.join(workdir, "server.out")
        self.term_first = False   # stop: SIGTERM to the first process only
        self.strays = []          # processes left after that SIGTERM

    def start(self, cpu):
        env = dict(os.environ if self.env is None else self.env)
        if self.shim:
            os.makedirs(self.shim_dir, exist_ok=True)
            env["LD_PRELOAD"] = self.shim
            env["TERN_ALLOCSHIM_DIR"] = self.shim_dir
        with open(self.out_path, "wb") as out:
            argv = (["taskset", "-c", str(cpu)] if cpu is not None else []) \
                + self.argv
            self.proc = common.spawn(argv, stdout=out, cwd=self.workdir, env=env)
        if self.plain and self.port is None:
            self.port = self._read_port()
        if self.read_tls_port and self.tls_port is None:
            self.tls_port = self._read_port(rb"tls listening on (\d+)")
        if self.read_quic_port and self.quic_port is None:
            self.quic_port = self._read_port(rb"quic listening on (\d+)")
        if self.ready_file is not None:
            self._wait_file(self.ready_file)
        if self.plain:
            h1client.wait_answering(self.port, self.proc)
        if self.tls_port is not None:
            self._wait_tcp(self.tls_port)
        if isinstance(self.h2c, int):
            self._wait_tcp(self.h2c)
        if self.quic_port is not None:
            self._wait_udp(self.quic_port)

    @property
    def h2c_port(self):
        return self.port if self.h2c == "plain" else self.h2c

    def _wait_tcp(self, port, timeout=15.0):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError("%s exited (%s) before listening on %d: %s" % (
                    self.name, self.proc.returncode, port, self.output_tail()))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise BenchError("%s does not accept on %d: %s" % (
                        self.name, port, e))
            time.sleep(0.05)

    def _wait_udp(self, port, timeout=15.0):
        """Until a socket of the server's is bound to UDP port (ss): a
        QUIC server says nothing to a probe without a handshake."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError("%s exited (%s) before listening on UDP "
                                 "%d: %s" % (self.name, self.proc.returncode,
                                             port, self.output_tail()))
            rc, out = common.cmd_output(["ss", "-Hunlp", "sport = :%d" % port],
                                        timeout=5)
            pids = set(self.pids())
            if rc == 0 and any("pid=%d," % p in out for p in pids):
                return
            if time.monotonic() > deadline:
                raise BenchError("%s is not bound to UDP %d" % (self.name, port))
            time.sleep(0.05)

    def _wait_file(self, path, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.proc.poll() is not None:
                raise BenchError("%s exited (%s) before starting: %s" % (
                    self.name, self.proc.returncode, self.output_tail()))
            if time.monotonic() > deadline:
                raise BenchError("%s did not write %s" % (self.name, path))
            time.sleep(0.02)

    def _read_port(self, pattern=rb"(?m)^listening on (\d+)", timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.out_path, "rb") as f:
                m = re.search(pattern, f.read())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise BenchError("%s exited (%s) before listening: %s" % (
                    self.name, self.proc.returncode, self.output_tail()))
            time.sleep(0.02)
        raise BenchError("%s printed no %r line" % (
            self.name, pattern.decode().replace("\\d+", "PORT")))

    def output_tail(self):
        try:
            with open(self.out_path, "rb") as f:
                return f.read()[-500:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pids(self):
        """The server's processes and its companions' (db-*: Redis, whose
        CPU time counts as the server's)."""
        return common.process_tree(self.proc.pid) + list(
            getattr(self, "companions", ()))

    def own_pids(self):
        """The server's processes alone (RSS, threads)."""
        return common.process_tree(self.proc.pid)

    def stop(self):
        if self.proc is not None:
            if self.term_first:
                self._stop_first()
            common.stop_proc(self.proc)
            self.proc = None

    def _stop_first(self, grace=5.0):
        """Process mode (tern-procs*): SIGTERM to the first process alone,
        which stops the others; then wait until no process of its group
        (start_new_session: the group is the first process's pid) is
        left.  Any left after grace are named in self.strays (and killed
        by stop_proc's SIGKILL to the group)."""
        pgid = self.proc.pid
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while True:
            # the first process reaped (or still running), then its group
            if self.proc.poll() is not None:
                left = common.group_pids(pgid)
                if not left:
                    break
            if time.monotonic() > deadline:
                left = common.group_pids(pgid)
                break
            time.sleep(0.05)
        self.strays = left
        if left:
            log("%s: %d process(es) %s still running %.0f s after SIGTERM to "
                "the first one: killed" % (self.name, len(left), left, grace))

    # -- the allocation shim ------------------------------------------------

    def shim_pids(self):
        """Processes of this server that have the shim mapped."""
        out = []
        for pid in self.pids():
            try:
                with open("/proc/%d/maps" % pid) as f:
                    if self.shim in f.read():
                        out.append(pid)
            except OSError:
                pass
        return out

    def shim_snapshot(self, timeout=3.0):
        """Cumulative {allocs, bytes, frees} summed over the server's
        processes (each writes shim_dir/PID.txt on SIGRTMIN+4)."""
        if not self.shim:
            return None
        pids = self.shim_pids()
        if not pids:
            raise BenchError("the allocation shim is not loaded in %s" % self.name)
        for pid in pids:
            try:
                os.unlink(os.path.join(self.shim_dir, "%d.txt" % pid))
            except FileNotFoundError:
                pass
        for pid in pids:
            try:
                os.kill(pid, SHIM_SIGNAL)
            except ProcessLookupError:
                pass
        total = {"allocs": 0, "bytes": 0, "frees": 0, "processes": len(pids)}
        deadline = time.monotonic() + timeout
        for pid in pids:
            path = os.path.join(self.shim_dir, "%d.txt" % pid)
            while True:
                m = None
                try:
                    with open(path) as f:
                        m = SHIM_LINE.search(f.read())
                except FileNotFoundError:
                    pass
                if m:
                    total["allocs"] += int(m.group(1))
                    total["bytes"] += int(m.group(2))
                    total["frees"] += int(m.group(3))
                    break
                if time.monotonic() > deadline:
                    if not os.path.exists("/proc/%d" % pid):
                        break  # the process ended meanwhile
                    raise BenchError("the shim of %s (pid %d) wrote no %s" % (
                        self.name, pid, path))
                time.sleep(0.005)
        time.sleep(0.05)
        if self.proc.poll() is not None:
            raise BenchError(
                "%s exited (status %s) after the shim's signal (SIGRTMIN+4): "
                "it does not survive a signal interrupting its event loop" % (
                    self.name, self.proc.returncode))
        return total


# ---------------------------------------------------------------------------
# the registry of servers

H1 = ("h1",)
ALL = ("h1", "h1-tls", "h2")


class Spec:
    def __init__(self, name, label, kind, unsupported=(), note="",
                 protocols=ALL, why_not=None, only=None, only_why=None):
        self.name = name
        self.label = label
        self.kind = kind          # 'tern' | 'floor' | 'nginx' | 'h2o' | 'nghttpd' | 'peer'
        self.unsupported = set(unsupported)
        self.note = note
        self.protocols = set(protocols)  # protocols it is measured on
        self.why_not = why_not or {}     # scenario or protocol -> reason (n/a)
        self.only = set(only) if only else None  # the scenarios it serves
        self.only_why = only_why


def not_applicable(name, sc):
    """None when server name is measured on scenario sc, else why not."""
    spec = SERVERS[name]
    if sc.protocol not in spec.protocols:
        return spec.why_not.get(sc.protocol) or (
            "%s is not measured on %s" % (name, sc.protocol))
    if getattr(sc, "balance", False) and name not in balance.SERVERS:
        return ("the balance rows run 2 workers: tern as tern-least, "
                "tern-kernel and tern-reuseport" if name == "tern" else
                "the balance rows measure %s (2 workers each)"
                % ", ".join(balance.SERVERS))
    if sc.name in spec.why_not:
        return spec.why_not[sc.name]
    if spec.only is not None and sc.name not in spec.only:
        return spec.only_why
    if getattr(sc, "tern_only", None) and spec.kind != "tern":
        return sc.tern_only
    if (sc.name == "balance-stall" and spec.kind == "nginx" and
            not os.path.exists(NGINX_PERL_MODULE)):
        return ("its /stall needs libnginx-mod-http-perl (perf/perf setup)")
    if getattr(sc, "python_only", None) and spec.kind not in ("pyapp",
                                                              "python"):
        return sc.python_only
    return None


_CLEAR = "cleartext HTTP/1.1 only (its peer program has no TLS)"
# the static rows: a peer program that answers its one canned body
_NO_FILES = "its peer program serves no files (one canned answer)"
_NO_FILES_NA = {"static-1k": _NO_FILES, "static-10m": _NO_FILES}
# h2c (cleartext HTTP/2, prior knowledge): measured where the server has an
# upload sink that speaks it; each of the others says why not
_FLOOR = "the floor is a cleartext HTTP/1.1 limit"
SERVERS = {
    "tern": Spec("tern", "tern (reference --workers 1)", "tern",
                 protocols=ALL + ("ws", "h2c", "h3", "ws-h3", "db")),
    # The same reference server with the other TLS engine: the "tern" row's
    # TLS is the default engine (GnuTLS where built), this one mbedTLS 2.28.
    "tern-mbedtls": Spec("tern-mbedtls",
                         "tern with mbedTLS (reference --tls-engine mbedtls)",
                         "tern", protocols=("h1-tls", "h2"),
                         why_not={"h1": "the same as tern over cleartext",
                                  "ws": "the same as tern over cleartext",
                                  "h2c": "the same as tern over cleartext"}),
    # nginx 1.22 speaks h2c only on a listener marked http2, which then
    # refuses HTTP/1.1: h2c-upload gets a second cleartext port
    "nginx": Spec("nginx", "nginx 1.22 (1 worker; on the balance rows 2, "
                           "sharing the listening socket)", "nginx",
                  protocols=ALL + ("h2c",)),
    "h2o": Spec("h2o", "h2o 2.2.5 server (1 thread; 2 on the balance "
                       "rows)", "h2o",
                protocols=ALL + ("h2c",), why_not={
                    "balance-stall": "h2o 2.2.5 has no handler that holds "
                    "a worker's thread: its mruby has no sleep, and a busy "
                    "loop would also take the other thread's CPU"}),
    "libh2o": Spec("libh2o", "libh2o embedded (libh2o_hello)", "peer",
                   protocols=H1, why_not={
                       **_NO_FILES_NA, "h1-tls": _CLEAR, "h2": _CLEAR,
                       "h2c": "its peer program answers GET only (no "
                              "/upload sink: POST /upload is 404); the h2o "
                              "row runs the same h2o 2.2.5 HTTP/2 code"}),
    "mhd": Spec("mhd", "libmicrohttpd (mhd_hello)", "peer",
                protocols=H1, why_not={
                    **_NO_FILES_NA, "h1-tls": _CLEAR, "h2": _CLEAR,
                    "h2c": "libmicrohttpd speaks no HTTP/2 (it closes the "
                           "connection on the HTTP/2 preface)"}),
    "civetweb": Spec("civetweb", "CivetWeb (civetweb_hello)", "peer",
                     protocols=H1, why_not={
                         **_NO_FILES_NA, "h1-tls": _CLEAR, "h2": _CLEAR,
                         "h2c": "Debian's CivetWeb build speaks no HTTP/2 "
                                "(it closes the connection on the HTTP/2 "
                                "preface)"}),
    "floor": Spec("floor", "floor (canned bytes, no parsing)", "floor",
                  unsupported=("app-routed",),
                  note="answers every request head with the same canned "
                       "response: no parsing, no routing",
                  protocols=H1, why_not={
                      "static-1k": "the floor answers every request with "
                                   "its one canned body (no files)",
                      "static-10m": "the floor answers every request with "
                                    "its one canned body (no files)",
                      "h1-tls": _FLOOR, "h2": _FLOOR, "h2c": _FLOOR}),
    "nghttpd": Spec("nghttpd", "nghttpd 1.52 (nghttp2's server, 1 worker)",
                    "nghttpd", protocols=("h2", "h2c"),
                    why_not={"h1": "nghttpd speaks only HTTP/2",
                             "h1-tls": "nghttpd speaks only HTTP/2"}),
}
_WS_ONLY = "the libwebsockets peer serves only the WebSocket scenarios"
SERVERS["libwebsockets"] = Spec(
    "libwebsockets", "libwebsockets 4.1 (lws_echo, 1 service thread)", "peer",
    protocols=("ws",), why_not={"h1": _WS_ONLY, "h1-tls": _WS_ONLY,
                                "h2": _WS_ONLY, "h2c": _WS_ONLY})
# ngtcp2's example HTTP/3 server (Debian ngtcp2-server 0.12.1), the peer
# of the h3-* rows; it has no WebSocket (no extended CONNECT).
_H3_ONLY = "gtlsserver speaks only HTTP/3"
SERVERS["gtlsserver"] = Spec(
    "gtlsserver", "gtlsserver (ngtcp2 0.12.1 example server, GnuTLS)",
    "gtlsserver", protocols=("h3",),
    why_not={"h1": _H3_ONLY, "h1-tls": _H3_ONLY, "h2": _H3_ONLY,
             "h2c": _H3_ONLY, "ws": _H3_ONLY,
             "ws-h3": "gtlsserver has no WebSocket (no extended CONNECT)"})
# The db-* peers: the same Redis GET per request, synchronous hiredis on a
# thread per connection (each thread keeps its own Redis connection).
_DB_ONLY = "its peer program serves only the db-* scenarios"
_NA_DB = {p: _DB_ONLY for p in ("h1", "h1-tls", "h2", "h2c", "ws", "h3",
                                "ws-h3")}
SERVERS["civetweb-db"] = Spec(
    "civetweb-db", "CivetWeb + hiredis (civetweb_db: a thread per "
    "connection)", "peer", protocols=("db",), why_not=_NA_DB)
SERVERS["mhd-db"] = Spec(
    "mhd-db", "libmicrohttpd + hiredis (mhd_db: thread-per-connection "
    "mode)", "peer", protocols=("db",), why_not=_NA_DB)
# The cost of operations (docs/operations.md): the same servers with their
# access log on, on h1-get only.  Opt-in (perf/perf compare --servers
# tern,tern-logged,nginx,nginx-logged h1-get), not in the default list.
_LOGGED_ONLY = "the logged rows measure h1-get only"
SERVERS["tern-logged"] = Spec(
    "tern-logged", "tern with the JSON access log and the duration "
    "histogram (reference --access-log FILE --metrics)", "tern", protocols=H1,
    why_not={"h1-tls": _LOGGED_ONLY, "h2": _LOGGED_ONLY,
             "h2c": _LOGGED_ONLY})
SERVERS["nginx-logged"] = Spec(
    "nginx-logged", "nginx 1.22 with its access log (combined, "
    "buffer=64k flush=1s)", "nginx", protocols=H1,
    why_not={"h1-tls": _LOGGED_ONLY, "h2": _LOGGED_ONLY,
             "h2c": _LOGGED_ONLY})
# Balance across workers (issue 35): the balance-* rows, 2 workers each;
# tern once per policy (least connections, the default; the kernel's
# choice on one shared socket; a socket per worker in a reuseport group),
# nginx with its listening socket shared (the "nginx" row,
# worker_processes 2 there) and with one per worker (nginx-reuseport).
_BALANCE_ONLY = "the balance rows (2 workers) only"
SERVERS["tern-least"] = Spec(
    "tern-least", "tern, 2 workers, least connections (reference --workers "
    "2 --balance least, the default)", "tern", protocols=H1, only=BALANCE,
    only_why=_BALANCE_ONLY)
SERVERS["tern-kernel"] = Spec(
    "tern-kernel", "tern, 2 workers, the kernel's choice (reference "
    "--workers 2 --balance kernel)", "tern", protocols=H1, only=BALANCE,
    only_why=_BALANCE_ONLY)
SERVERS["tern-reuseport"] = Spec(
    "tern-reuseport", "tern, 2 workers, a listening socket each (reference "
    "--workers 2 --balance reuseport: the kernel's hash)", "tern",
    protocols=H1, only=BALANCE, only_why=_BALANCE_ONLY)
SERVERS["nginx-reuseport"] = Spec(
    "nginx-reuseport", "nginx 1.22, 2 workers, a listening socket each "
    "(listen ... reuseport)", "nginx", protocols=H1, only=BALANCE,
    only_why=_BALANCE_ONLY)
# Across processes: reference --processes 2 --workers 1 (2 processes of
# one worker each, sharing the listening socket), least connections over
# all workers of all processes (tern-procs) or each worker accepting from
# the shared socket (tern-procs-kernel); balance-keepalive and
# balance-churn only (balance-stall's requests per worker are not
# available across processes).
_PROCS_ONLY = ("the process-mode rows measure balance-keepalive and "
               "balance-churn only: requests per worker are not available "
               "across processes")
SERVERS["tern-procs"] = Spec(
    "tern-procs", "tern, 2 processes of 1 worker, least connections across "
    "processes (reference --processes 2 --workers 1 --balance least)",
    "tern", protocols=H1, only=balance.PROC_SCENARIOS, only_why=_PROCS_ONLY)
SERVERS["tern-procs-kernel"] = Spec(
    "tern-procs-kernel", "tern, 2 processes of 1 worker, the kernel's choice "
    "on the shared socket (reference --processes 2 --workers 1 --balance "
    "kernel)", "tern", protocols=H1, only=balance.PROC_SCENARIOS,
    only_why=_PROCS_ONLY)
OPT_IN = ("tern-logged", "nginx-logged", "tern-least", "tern-kernel",
          "tern-reuseport", "nginx-reuseport", "tern-procs",
          "tern-procs-kernel")
SERVER_ORDER = [n for n in SERVERS if n not in OPT_IN]

# The Python servers (issue 17): tern's Python binding against Python's
# own servers, on h1-get and h2-get only. Not in the default --servers:
#   perf/perf compare --servers tern-python,uvicorn,aiohttp,http.server \
#       --scenarios h1-get,h2-get
# Each is one process of Debian's Python (/usr/bin/python3) answering GET
# / with "Hello, World!" text/plain (perf/peers/python/).
PYTHON = "/usr/bin/python3"
_PY_ONLY = "the Python servers are measured on h1-get and h2-get only"
_PY_NO_H2 = "it speaks no HTTP/2"
PYTHON_SCRIPTS = {"tern-python": "tern_hello.py",
                  "uvicorn": "uvicorn_hello.py",
                  "aiohttp": "aiohttp_hello.py",
                  "http.server": "httpserver_hello.py"}
PYTHON_MODULES = {"uvicorn": "uvicorn", "aiohttp": "aiohttp"}
SERVERS["tern-python"] = Spec(
    "tern-python", "tern's Python binding (tern.Server, native request "
    "path; workers=1, a Python handler)", "python", protocols=("h1", "h2"), only=("h1-get", "h2-get"),
    only_why=_PY_ONLY)
SERVERS["uvicorn"] = Spec(
    "uvicorn", "uvicorn 0.17 (minimal ASGI app, 1 process)", "python",
    protocols=("h1",), only=("h1-get",), only_why=_PY_ONLY,
    why_not={"h2": _PY_NO_H2, "h1-tls": _PY_ONLY})
SERVERS["aiohttp"] = Spec(
    "aiohttp", "aiohttp 3.8 (web.Application, 1 process)", "python",
    protocols=("h1",), only=("h1-get",), only_why=_PY_ONLY,
    why_not={"h2": _PY_NO_H2, "h1-tls": _PY_ONLY})
SERVERS["http.server"] = Spec(
    "http.server", "Python http.server (ThreadingHTTPServer, HTTP/1.1)",
    "python", protocols=("h1",), only=("h1-get",), only_why=_PY_ONLY,
    why_not={"h2": _PY_NO_H2, "h1-tls": _PY_ONLY})
# tern's Python server (python -m tern, issue 31) against the Python
# servers of ASGI and WSGI applications, each one process on the same app
# (perf/peers/python/asgi_peer.py, wsgi_peer.py):
#   perf/perf compare --servers tern-asgi,tern-wsgi,uvicorn,hypercorn,\
#       daphne,gunicorn,gunicorn-gthread \
#       --scenarios h1-get,h2-get,ws-echo,py-json
_APP_ONLY = ("the Python app servers are measured on h1-get, h2-get, "
             "ws-echo and py-json")
_APP_SCEN = ("h1-get", "h2-get", "ws-echo", "py-json")
_NO_WS = "it serves WSGI: no WebSocket"
APP_SERVERS = {
    # name: (interface, module argv builder key)
    "tern-asgi": "asgi", "tern-wsgi": "wsgi", "hypercorn": "asgi",
    "daphne": "asgi", "gunicorn": "wsgi", "gunicorn-gthread": "wsgi"}
SERVERS["tern-asgi"] = Spec(
    "tern-asgi", "tern's Python server, ASGI (python -m tern, native "
    "module, 1 process, uvloop)", "pyapp", protocols=("h1", "h2", "ws"),
    only=_APP_SCEN, only_why=_APP_ONLY)
SERVERS["tern-wsgi"] = Spec(
    "tern-wsgi", "tern's Python server, WSGI inline on the worker "
    "(python -m tern --interface wsgi, 1 process)", "pyapp",
    protocols=("h1", "h2"), only=_APP_SCEN, only_why=_APP_ONLY,
    why_not={"ws": _NO_WS})
SERVERS["hypercorn"] = Spec(
    "hypercorn", "hypercorn 0.13 (asyncio, 1 process, --bind fd:// for "
    "TCP_NODELAY; HTTP/2 over TLS)",
    "pyapp", protocols=("h1", "h2", "ws"), only=_APP_SCEN,
    only_why=_APP_ONLY)
SERVERS["daphne"] = Spec(
    "daphne", "daphne 4.0 (Twisted, 1 process)", "pyapp",
    protocols=("h1", "ws"), only=_APP_SCEN, only_why=_APP_ONLY,
    why_not={"h2": _PY_NO_H2})
SERVERS["gunicorn"] = Spec(
    "gunicorn", "gunicorn 20.1, sync worker (1 process)", "pyapp",
    protocols=("h1",), only=_APP_SCEN, only_why=_APP_ONLY,
    why_not={"h2": _PY_NO_H2, "ws": _NO_WS})
SERVERS["gunicorn-gthread"] = Spec(
    "gunicorn-gthread", "gunicorn 20.1, gthread worker (1 process, 4 "
    "threads)", "pyapp", protocols=("h1",), only=_APP_SCEN,
    only_why=_APP_ONLY, why_not={"h2": _PY_NO_H2, "ws": _NO_WS})
# uvicorn serves the same ASGI app (its WebSocket through the websockets
# package) and joins the py-json and ws-echo rows.
SERVERS["uvicorn"].protocols = {"h1", "ws"}
SERVERS["uvicorn"].only = set(_APP_SCEN)
SERVERS["uvicorn"].only_why = _APP_ONLY
SERVERS["uvicorn"].label = ("uvicorn 0.17 (uvloop, httptools, 1 process; "
                            "the same ASGI app)")
OPT_IN += tuple(APP_SERVERS)
SERVER_ORDER = [n for n in SERVERS if n not in OPT_IN]
PYTHON_SERVERS = list(PYTHON_SCRIPTS)

PEER_BINARIES = {"libh2o": "libh2o_hello", "mhd": "mhd_hello",
                 "civetweb": "civetweb_hello", "libwebsockets": "lws_echo",
                 "civetweb-db": "civetweb_db", "mhd-db": "mhd_db"}


def peer_path(args, name):
    return os.path.join(args.peers_dir, PEER_BINARIES[name])


def available(args, name):
    """None when the server can be started, else why not."""
    kind = SERVERS[name].kind
    if kind == "tern":
        return None if common.which_exec(args.reference) else (
            "%s not built" % args.reference)
    if kind == "floor":
        return None if common.which_exec(args.floor) else "%s not built" % args.floor
    if kind == "nginx":
        return None if shutil.which(args.nginx) else "nginx not installed"
    if kind == "h2o":
        if not shutil.which(args.h2o):
            return "h2o not installed"
        if not os.path.exists(args.h2o_conf):
            return "%s missing" % args.h2o_conf
        return None
    if kind == "nghttpd":
        return None if shutil.which(args.nghttpd) else (
            "nghttpd not installed (apt-get install nghttp2-server)")
    if kind == "gtlsserver":
        return None if shutil.which(args.gtlsserver) else (
            "gtlsserver not installed (apt-get install ngtcp2-server)")
    if kind == "pyapp":
        if not os.access(PYTHON, os.X_OK):
            return "%s missing" % PYTHON
        if name.startswith("tern-"):
            return None if native_module(args) else (
                "the native module is not built (python3-dev missing?)")
        mod = {"hypercorn": "hypercorn", "daphne": "daphne"}.get(
            name, "gunicorn")
        if common.cmd_output([PYTHON, "-c", "import " + mod])[0]:
            return "%s not installed (perf/perf setup)" % mod
        return None
    if kind == "python":
        if not os.access(PYTHON, os.X_OK):
            return "%s missing" % PYTHON
        if name == "tern-python":
            lib = tern_library(args)
            return None if os.path.exists(lib) else "%s not built" % lib
        mod = PYTHON_MODULES.get(name)
        if mod and common.cmd_output([PYTHON, "-c", "import " + mod])[0]:
            return "python3-%s not installed (perf/perf setup)" % mod
        return None
    p = peer_path(args, name)
    return None if common.which_exec(p) else "%s not built" % p


# nghttpd's docroot: GET / serves index.html; POST /upload is answered with
# the file "upload" once the whole body has arrived (nghttpd reads and drops
# it).  Both hold "Hello, World!": nghttpd cannot count what it read.
NGHTTPD_FILES = {"index.html": b"Hello, World!", "upload": b"Hello, World!"}
# gtlsserver's docroot, the same way: it maps / to index.html, reads a
# request's body to its end and drops it, and answers once the stream has
# ended (its --early-response, not given, would answer first).
GTLSSERVER_FILES = NGHTTPD_FILES
# gtlsserver's receive windows grow (ngtcp2's auto-tuning) up to these,
# tern's maxima (its defaults, 6 MiB each, would cap a 16 MiB upload
# sooner than tern's)
GTLSSERVER_WINDOWS = ("--max-stream-window=8M", "--max-window=16M")


def native_module(args):
    """The native module of tern's Python server in the build, or None."""
    import glob
    build = os.path.dirname(os.path.abspath(tern_library(args)))
    found = glob.glob(os.path.join(build, "_native.cpython-*.so"))
    return found[0] if found else None


def pyapp_server(name, args, sdir, shim, tls, mat):
    """A Python app server of the rows above on the shared app, on a port
    of its own: cleartext, or TLS (HTTP/2 by ALPN) when tls."""
    peers = os.path.join(common.REPO, "perf", "peers", "python")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=peers)
    port = common.free_port()
    app = ("asgi_peer:app" if APP_SERVERS[name] == "asgi" or
           name == "uvicorn" else "wsgi_peer:app")
    if name.startswith("tern-"):
        env["TERN_NATIVE"] = native_module(args)
        env["TERN_LIBRARY"] = tern_library(args)
        env["PYTHONPATH"] = os.pathsep.join(
            [peers, os.path.join(common.REPO, "bindings", "python")])
        argv = [PYTHON, "-m", "tern", app, "--host", "127.0.0.1", "--port",
                str(port), "--no-access-log", "--log-level", "warning",
                "--interface", APP_SERVERS[name], "--stats-path", "/stats"]
        if tls:
            argv += ["--ssl-certfile", mat["cert"], "--ssl-keyfile",
                     mat["key"]]
    elif name == "hypercorn":
        # --bind fd:// of a socket made with IPPROTO_TCP, so that asyncio
        # sets TCP_NODELAY (hypercorn_fd.py: with --bind HOST:PORT each
        # keep-alive answer waits ~40 ms for the client's delayed ACK)
        argv = [PYTHON, os.path.join(peers, "hypercorn_fd.py"),
                "127.0.0.1:%d" % port, "--workers", "1", "--log-level",
                "warning", "--backlog", "4096"]
        if tls:
            argv += ["--certfile", mat["cert"], "--keyfile", mat["key"]]
        argv.append(app)
    elif name == "daphne":
        argv = [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                "-v", "0", app]
    else:  # gunicorn, gunicorn-gthread
        argv = [PYTHON, "-m", "gunicorn", "--bind", "127.0.0.1:%d" % port,
                "--workers", "1", "--log-level", "warning", "--backlog",
                "4096", "--keep-alive", "75"]
        if name == "gunicorn-gthread":
            argv += ["--worker-class", "gthread", "--threads", "4"]
        argv.append(app)
    if tls:
        return Server(name, argv, sdir, shim=shim, env=env, tls_port=port,
                      plain=False)
    return Server(name, argv, sdir, port=port, shim=shim, env=env)


def tern_library(args):
    """The libtern.so beside the reference server's build
    (build/examples/reference -> build/libtern.so)."""
    return os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(args.reference))), "libtern.so")


def free_udp_port():
    """A UDP port nothing is bound to on 127.0.0.1 (gtlsserver wants one
    given)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make(name, args, workdir, max_conns=None, shim=None, tls=False,
         h2c=False, quic=False, server_args=(), db=None, workers=1):
    """A Server (not started) for name, in a fresh directory under workdir.
    tls: also listen on a TLS port (HTTP/1.1 and h2 by ALPN), with the
    run's certificate.  h2c: serve cleartext HTTP/2 with prior knowledge
    (Server.h2c_port): tern's and h2o's HTTP/1.1 port takes the HTTP/2
    preface as it is, nginx gets a second listener, nghttpd runs
    --no-tls.  quic: also serve HTTP/3 on a UDP port (Server.quic_port;
    tern: --quic-port beside its TLS port; gtlsserver serves nothing
    else).  server_args: the scenario's own arguments (tern only: the
    windows of the rtt50 rows).  db: (where Redis is, connections) of the
    db-* rows: --redis PATH|HOST:PORT for tern and the db peers; CivetWeb
    gets a thread per connection.  workers: tern's workers, nginx's
    worker processes, h2o's threads (the balance rows: 2; tern-least,
    tern-kernel and tern-reuseport add --balance least, kernel or
    reuseport, nginx-reuseport listens with reuseport, and nginx then
    logs $pid per request)."""
    sdir = tempfile.mkdtemp(prefix=name + ".", dir=workdir)
    kind = SERVERS[name].kind
    extra = list(getattr(args, "extra_args", {}).get(name, []))
    root = static_root(workdir)
    mat = tlsclient.material(workdir) if (tls or quic or kind in (
        "gtlsserver",) or (kind == "nghttpd" and not h2c)) else None
    if kind == "tern":
        procs = name in balance.PROC_SERVERS
        if procs:
            # the balance rows' 2 workers as 2 processes of 1 worker
            argv = [args.reference, "--port", "0", "--processes",
                    str(workers), "--workers", "1", "--static", root,
                    "--balance", "kernel" if name.endswith("-kernel")
                    else "least"]
        else:
            argv = [args.reference, "--port", "0", "--workers", str(workers),
                    "--static", root]
        if name in ("tern-least", "tern-kernel", "tern-reuseport"):
            argv += ["--balance", name.split("-")[1]]
        if max_conns:
            argv += ["--max-conns", str(max_conns)]
        if tls:
            argv += ["--tls-port", "0", "--cert", mat["cert"], "--key", mat["key"]]
            if name == "tern-mbedtls":
                argv += ["--tls-engine", "mbedtls"]
        if quic:
            if not tls:
                argv += ["--tls-port", "0", "--cert", mat["cert"],
                         "--key", mat["key"]]
            argv += ["--quic-port", "0"]
        if name == "tern-logged":
            argv += ["--access-log", os.path.join(sdir, "access.log"),
                     "--metrics"]
        if db:
            argv += ["--redis", db[0]]
        srv = Server(name, argv + list(server_args) + extra, sdir, shim=shim,
                     read_tls_port=tls or quic,
                     h2c="plain" if h2c else None, read_quic_port=quic)
        srv.term_first = procs
        return srv
    if kind == "gtlsserver":
        docroot = os.path.join(sdir, "htdocs")
        os.makedirs(docroot)
        for fn, data in GTLSSERVER_FILES.items():
            with open(os.path.join(docroot, fn), "wb") as f:
                f.write(data)
        qport = free_udp_port()
        argv = [args.gtlsserver, "-q", "-d", docroot] + list(
            GTLSSERVER_WINDOWS) + extra + ["127.0.0.1", str(qport),
                                           mat["key"], mat["cert"]]
        return Server(name, argv, sdir, shim=shim, plain=False,
                      quic_port=qport)
    if kind == "nghttpd":
        docroot = os.path.join(sdir, "htdocs")
        os.makedirs(docroot)
        for fn, data in NGHTTPD_FILES.items():
            with open(os.path.join(docroot, fn), "wb") as f:
                f.write(data)
        # the static rows' files under /static/, as the other servers
        # serve them
        os.symlink(root, os.path.join(docroot, "static"))
        tport = common.free_port()
        # windows as large as tern's largest (8 MiB stream, 16 MiB
        # connection): nghttpd's defaults (64 KiB) would throttle uploads
        argv = [args.nghttpd, "-a", "127.0.0.1", "-n", "1", "-d", docroot,
                "-w", "23", "-W", "24", str(tport)]
        if h2c:
            return Server(name, argv + ["--no-tls"] + extra, sdir, shim=shim,
                          plain=False, h2c=tport)
        return Server(name, argv + [mat["key"], mat["cert"]] + extra, sdir,
                      shim=shim, tls_port=tport, plain=False)
    if kind == "floor":
        return Server(name, [args.floor, "--port", "0"] + extra, sdir, shim=shim)
    if kind == "pyapp":
        return pyapp_server(name, args, sdir, shim, tls, mat)
    if kind == "python":
        script = os.path.join(common.REPO, "perf", "peers", "python",
                              PYTHON_SCRIPTS[name])
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        if name == "tern-python":
            env["TERN_LIBRARY"] = tern_library(args)
            argv = [PYTHON, script, "--port", "0", "--workers", "1"]
            if max_conns:
                argv += ["--max-conns", str(max_conns)]
            if tls:
                argv += ["--tls-port", "0", "--cert", mat["cert"],
                         "--key", mat["key"]]
            return Server(name, argv + extra, sdir, shim=shim, env=env,
                          read_tls_port=tls)
        if name == "http.server":
            return Server(name, [PYTHON, script, "--port", "0"] + extra,
                          sdir, shim=shim, env=env)
        port = common.free_port()
        return Server(name, [PYTHON, script, "--port", str(port)] + extra,
                      sdir, port=port, shim=shim, env=env)
    if kind == "nginx":
        port = common.free_port()
        conf = os.path.join(sdir, "nginx.conf")
        tport = common.free_port() if tls else None
        hport = common.free_port() if h2c else None
        with open(conf, "w") as f:
            f.write(nginx_conf(port, sdir, max(4096, (max_conns or 0) + 64),
                               (tport, mat["cert"], mat["key"]) if tls
                               else None, hport,
                               os.path.join(sdir, "access.log")
                               if name == "nginx-logged" else None, root,
                               workers=workers,
                               reuseport=name == "nginx-reuseport",
                               pid_log=os.path.join(sdir, "access.log")
                               if workers > 1 else None,
                               stall=workers > 1 and os.path.exists(
                                   NGINX_PERL_MODULE)))
        return Server(name, [args.nginx, "-p", sdir + "/", "-e",
                             os.path.join(sdir, "error.log"), "-c", conf],
                      sdir, port=port, shim=shim, tls_port=tport,
                      ready_file=os.path.join(sdir, "nginx.pid"), h2c=hport)
    if kind == "h2o":
        port = common.free_port()
        tport = common.free_port() if tls else None
        conf = os.path.join(sdir, "h2o.conf")
        with open(conf, "w") as f:
            f.write(h2o_conf(args.h2o_tls_conf if tls else args.h2o_conf,
                             port, sdir, max_conns,
                             (tport, mat["cert"], mat["key"]) if tls else None,
                             root, threads=workers))
        return Server(name, [args.h2o, "-c", conf], sdir, port=port, shim=shim,
                      tls_port=tport, h2c="plain" if h2c else None)
    argv = [peer_path(args, name), "--port", "0"]
    if db:
        argv += ["--redis", db[0]]
        if name == "civetweb-db":
            argv += ["--threads", str(db[1] + 16)]
    if max_conns and args.peer_max_conns_flag:
        argv += [args.peer_max_conns_flag, str(max_conns)]
    if name == "civetweb" and not any(a == "--threads" for a in extra):
        # CivetWeb serves one connection per thread: with one thread it
        # would serve one of the 64 connections at a time. 64 threads is
        # its own model at this load, still pinned to one core.  A
        # connection holds its thread for as long as it stays open, so
        # idle-conns (max_conns given) needs a thread per idle connection,
        # plus the 64.
        threads = 64
        if max_conns:
            threads += getattr(args, "idle_conns", None) or max_conns
        argv += ["--threads", str(threads)]
    return Server(name, argv + extra, sdir, shim=shim)


def start(name, args, workdir, cpu, max_conns=None, shim=None, tls=False,
          h2c=False, quic=False, server_args=(), db=None, workers=1):
    """Make and start a server; a server whose port was picked up front
    (nginx, h2o, nghttpd) is retried on a fresh port if it fails to bind."""
    srv = make(name, args, workdir, max_conns, shim, tls, h2c, quic,
               server_args, db, workers)
    attempts = 3 if (srv.port is not None or not srv.plain) else 1
    for attempt in range(attempts):
        try:
            srv.start(cpu)
            return srv
        except BenchError as e:
            tail = srv.output_tail()
            exited = srv.proc is not None and srv.proc.poll() is not None
            srv.stop()
            if attempt == attempts - 1 or not exited:
                raise BenchError("%s%s" % (e, (" (output: %s)" % tail) if tail
                                           and tail not in str(e) else ""))
            log("%s did not start, retrying" % name)
            srv = make(name, args, workdir, max_conns, shim, tls, h2c, quic,
                       server_args, db, workers)
    raise BenchError("unreachable")
