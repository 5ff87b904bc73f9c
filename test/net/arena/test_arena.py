#!/usr/bin/env python3
"""HttpArena's profiles against examples/arena (issue 34).

The validator is perf/driver/arena.py's (`perf/perf arena validate`): one
case per group of profiles starts a fresh build/examples/arena (every
listener on port 0, data generated once per run into a temporary
directory, the run's self-signed certificate) and wants every check to
PASS.  The async-db cases get a throwaway PostgreSQL cluster
(perf/driver/pgserver.py), started once, and skip with the reason when
PostgreSQL is not installed.

Beyond HttpArena's own checks, the edges a demanding user hits: /json
with a count of 0, above 50, negative, huge or not a number, and a bad m
(no 5xx, a 200 is well-formed, the server still answers); a POST
/baseline11 whose body is not a number (4xx); /async-db while the
database is down (200 with {"items":[],"count":0}) and after it is back
(the pool recovers by itself); clients that disconnect while their
/async-db query is held in flight by a table lock (the server, and its
small pool, keep answering).

Runs under Debian's /usr/bin/python3 (python3-brotli decodes br).  Skips
every case, with the reason, while build/examples/arena is not built.
"""

import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
from harness import Skip, Suite, check, eq  # noqa: E402

sys.path.insert(0, os.path.join(harness.REPO, "perf"))
from driver import arena, pgserver, tlsclient  # noqa: E402

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-arena-")
BINARY = os.path.join(harness.BUILD, "examples", "arena")
HOST = "127.0.0.1"
state = {"data": None, "mat": None, "pg": None, "pg_why": None}


def need_binary():
    if not os.access(BINARY, os.X_OK):
        raise Skip("%s not built (examples/arena)" % BINARY)


class Running:
    """A fresh arena for one case: it must still run at the end, then exit
    0 on SIGTERM (in the ASan build: no leak, no error)."""

    def __init__(self, **kw):
        need_binary()
        mat = state["mat"]
        self.app = arena.App(BINARY, state["data"], mat["cert"], mat["key"],
                             host=HOST, **kw)

    def __enter__(self):
        return self.app

    def __exit__(self, et, ev, tb):
        if et is not None:
            self.app.stop(grace=3.0)
            return False
        check(self.app.alive(), "arena died (rc %s): %s" % (
            self.app.proc.returncode, self.app.stderr_text()))
        rc = self.app.stop()
        eq(rc, 0, "arena's exit status on SIGTERM (stderr %s)" %
           self.app.stderr_text(1500))
        return False


def pg():
    """The shared PostgreSQL (started on first use), or Skip."""
    need_binary()
    if state["pg"] is None and state["pg_why"] is None:
        try:
            state["pg"] = pgserver.Postgres()
        except pgserver.Unavailable as e:
            state["pg_why"] = str(e)
    if state["pg"] is None:
        raise Skip("no PostgreSQL: %s" % state["pg_why"])
    return state["pg"]


def validate(app, profiles):
    res = arena.validate(HOST, app.ports, state["data"], profiles, out=None)
    suite.note("%s: %s" % (",".join(profiles), res.summary()))
    for st, p, what, why in res.rows:
        if st == "SKIP":
            suite.note("SKIP %s: %s" % (p, what))
    bad = res.failures()
    check(not bad, "%d checks failed:\n" % len(bad) + "\n".join(
        "FAIL %s: %s: %s" % r[1:] for r in bad))
    return res


def get(app, path, body=None, headers=(), timeout=10.0):
    """One HTTP/1.1 request on its own connection: Resp."""
    method = "POST" if body is not None else "GET"
    req = ["%s %s HTTP/1.1" % (method, path), "Host: localhost",
           "Connection: close"] + list(headers)
    if body is not None:
        req.append("Content-Length: %d" % len(body))
    raw = ("\r\n".join(req) + "\r\n\r\n").encode() + (body or b"")
    with socket.create_connection((HOST, app.ports["h1"]), timeout=timeout) as s:
        s.sendall(raw)
        data = arena._read_to_eof(s, timeout)
    return arena.parse_raw(data)


# ---------------------------------------------------------------------------
# HttpArena's validation, by group


@case(timeout=90)
def h1_profiles():
    """baseline (with the fragmented requests), pipelined, json,
    json-comp, upload (up to 20 MiB) on the cleartext HTTP/1.1 port."""
    with Running() as app:
        validate(app, ["baseline", "pipelined", "json", "json-comp", "upload"])


@case(timeout=60)
def tls_profiles():
    """json-tls (HTTP/1.1 only, by ALPN), baseline-h2 and static-h2 (TLS
    h2)."""
    with Running() as app:
        validate(app, ["json-tls", "baseline-h2", "static-h2"])


@case(timeout=60)
def h2c_profiles():
    """baseline-h2c (HTTP/1.1 refused) and json-h2c on the h2c port."""
    with Running() as app:
        validate(app, ["baseline-h2c", "json-h2c"])


@case(timeout=60)
def static_profile():
    """static: the types, exact sizes without Accept-Encoding, decoded
    sizes with curl --compressed, 404."""
    with Running() as app:
        validate(app, ["static"])


@case(timeout=60)
def echo_ws_profile():
    """echo-ws: validate-ws.py's eight checks."""
    with Running() as app:
        validate(app, ["echo-ws"])


@case(timeout=60)
def h3_profile():
    """baseline-h3 with gtlsclient (not in HttpArena's validator)."""
    with Running() as app:
        if "h3" not in app.ports:
            raise Skip("arena printed no 'listening h3' (built without HTTP/3)")
        res = validate(app, ["baseline-h3"])
        if res.count("SKIP"):
            raise Skip(res.rows[0][2])


@case(timeout=60)
def async_db_profile():
    """async-db against the throwaway PostgreSQL."""
    db = pg()
    with Running(database=db.url, db_max_conn=16) as app:
        validate(app, ["async-db"])


# ---------------------------------------------------------------------------
# edges


@case(timeout=60)
def json_edges():
    """Counts and multipliers the spec leaves open: no 5xx; a 200 is
    well-formed, with a count above 50 clamped to 50 (as the references
    do) and exact totals; leading zeros parse as decimal; the server then
    answers /json/3?m=2 correctly."""
    # path: (count, m) a 200 must hold, or None: count == items <= 50
    cases = {"/json/0": None, "/json/abc": None, "/json/51": (50, 1),
             "/json/1000": (50, 1), "/json/-1": None,
             "/json/99999999999999999999": None, "/json/": None,
             "/json/5?m=abc": None, "/json/5?m=-3": (5, -3),
             "/json/5?m=0": (5, 0), "/json/5?m=99999999999999999999": None,
             "/json/00007?m=02": (7, 2)}
    with Running() as app:
        for path, want in cases.items():
            r = get(app, path)
            suite.note("%s -> %d %s" % (path, r.status, r.body[:40]))
            check(r.status and r.status < 500, "%s: %r" % (path, r))
            if r.status != 200:
                continue
            if want:
                eq(arena.json_totals(r, *want), "", path)
                continue
            doc = r.json()
            check(isinstance(doc, dict) and isinstance(doc.get("items"), list)
                  and doc.get("count") == len(doc["items"]) <= 50,
                  "%s: 200 but %r" % (path, r))
        eq(get(app, "/json/00007?m=02").status, 200, "leading zeros")
        eq(arena.json_totals(get(app, "/json/3?m=2"), 3, 2), "", "/json/3?m=2")


@case(timeout=60)
def starts_bare():
    """As HttpArena's json-only and h2c-only validation runs it: no
    certificate (the TLS listeners off), no database, a data directory
    with dataset.json and no static/. baseline, json and json-h2c pass,
    /static/reset.css is a 404, /async-db the empty result."""
    need_binary()
    bare = os.path.join(tmp, "bare")
    os.makedirs(bare, exist_ok=True)
    shutil.copy(os.path.join(state["data"], "dataset.json"), bare)
    app = arena.App(BINARY, bare, host=HOST)
    try:
        check("h1-tls" not in app.ports and "h2" not in app.ports,
              "TLS listeners without a certificate: %r" % app.ports)
        validate(app, ["baseline", "json", "json-h2c"])
        eq(get(app, "/static/reset.css").status, 404, "/static/reset.css")
        r = get(app, "/async-db?min=10&max=50&limit=5")
        eq((r.status, r.json()), (200, {"items": [], "count": 0}), "/async-db")
    finally:
        rc = app.stop()
    eq(rc, 0, "exit status on SIGTERM (stderr %s)" % app.stderr_text(1500))


@case(timeout=60)
def baseline_bad_body():
    """POST /baseline11 with a body that is not a number: a 4xx, and the
    next request on a fresh connection is answered."""
    with Running() as app:
        for body in (b"abc", b"12abc", b"", b"99999999999999999999999"):
            r = get(app, "/baseline11?a=1&b=2", body=body)
            suite.note("POST body %r -> %r" % (body, r))
            if body == b"":
                check(r.status and r.status < 500, "empty body: %r" % r)
            else:
                check(400 <= r.status < 500, "body %r: want a 4xx, got %r" % (body, r))
        eq(get(app, "/baseline11?a=1&b=2", body=b"3").text(), "6", "afterwards")


@case(timeout=90)
def async_db_outage():
    """The database stops: /async-db answers 200 {"items":[],"count":0}
    (quickly, no hang); it comes back: the app reconnects by itself."""
    db = pg()
    q = "/async-db?min=10&max=50&limit=5"
    with Running(database=db.url, db_max_conn=4) as app:
        eq(arena.db_items_ok(get(app, q).json(), 5), "", "before the outage")
        db.stop_server()
        try:
            for _ in range(3):
                t0 = time.monotonic()
                r = get(app, q, timeout=15)
                eq((r.status, r.json()), (200, {"items": [], "count": 0}),
                   "database down (%r)" % r)
                check(time.monotonic() - t0 < 10, "answer took %.1f s"
                      % (time.monotonic() - t0))
        finally:
            db.start_server()
        deadline = time.monotonic() + 20
        while True:
            r = get(app, q)
            if not arena.db_items_ok(r.json(), 5):
                break
            check(time.monotonic() < deadline,
                  "no recovery 20 s after the database came back: %r" % r)
            time.sleep(0.2)
        suite.note("recovered %.1f s after the restart"
                   % (20 - (deadline - time.monotonic())))


def rst_close(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


@case(timeout=90)
def async_db_client_gone():
    """Clients send /async-db while a table lock holds every query in
    flight, then go away (half with a reset, half with a FIN); the lock is
    released: the server, with a pool of 4, answers 20 queries in a row
    within 15 s (no connection of the pool lost or stuck)."""
    db = pg()
    with Running(database=db.url, db_max_conn=4) as app:
        lock = pgserver.TableLock(db)
        try:
            socks = []
            for i in range(12):
                s = socket.create_connection((HOST, app.ports["h1"]), timeout=5)
                s.sendall(b"GET /async-db?min=10&max=50&limit=%d HTTP/1.1\r\n"
                          b"Host: localhost\r\n\r\n" % (i + 1))
                socks.append(s)
            time.sleep(0.5)
            for i, s in enumerate(socks):
                rst_close(s) if i % 2 else s.close()
            time.sleep(0.2)
        finally:
            lock.release()
        t0 = time.monotonic()
        for i in range(20):
            r = get(app, "/async-db?min=10&max=50&limit=%d" % (i % 50 + 1), timeout=15)
            eq(arena.db_items_ok(r.json(), i % 50 + 1), "",
               "query %d after (%r)" % (i, r))
        took = time.monotonic() - t0
        check(took < 15, "20 queries took %.1f s" % took)


def setup():
    if not os.access(BINARY, os.X_OK):
        return
    state["data"] = arena.write_data(os.path.join(tmp, "data"), log=lambda m: None)
    state["mat"] = tlsclient.material(tmp)


def teardown():
    if state["pg"] is not None:
        state["pg"].stop()
    shutil.rmtree(tmp, ignore_errors=True)


def on_signal(signum, _frame):
    """Killed (meson's timeout): PostgreSQL and the apps run in sessions of
    their own and would outlive this process; end them first."""
    try:
        pgserver.abandon()  # the apps too: common.stop_all
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        os._exit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    suite.main(setup, teardown)
