"""A throwaway PostgreSQL for the HttpArena async-db profile (arena.py).

Debian's PostgreSQL (package postgresql, /usr/lib/postgresql/VERSION/bin;
15 on bookworm): initdb makes a cluster in a fresh temporary directory,
postgres serves it on a Unix socket in that directory and on 127.0.0.1 at
a free port, with HttpArena's sidecar settings made cheaper for a test
(max_connections=300, fsync, synchronous_commit and full_page_writes off).
It gets role bench (password bench), database benchmark and the items
table, seeded with arena.write_pg_seed's 100,000 rows through COPY.
stop() ends it (pg_ctl stop -m fast) and removes the directory.

PostgreSQL refuses to run as root: when this runs as root, initdb, postgres,
pg_ctl and psql run as the `postgres` system user (a setuid child: Popen's
user and group), and the directory is handed to that user.

Start-up takes about 2 s (initdb about 1 s, the seed about 1 s).  Missing
binaries raise Unavailable, which callers report as a skip; a step that
fails once PostgreSQL is there raises Failed, an error.  A process
about to _exit from a signal handler calls abandon(): the clusters run in
sessions of their own and would outlive it.
"""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

from . import arena, common


DIRS = []  # the clusters' directories not yet removed (see abandon())


class Unavailable(Exception):
    """No PostgreSQL here (not installed, or no user to run it as): a
    reason to skip."""


class Failed(Exception):
    """PostgreSQL is here but a step failed (initdb, the server, the seed,
    a query): an error, never a skip."""


def bindir():
    """The newest /usr/lib/postgresql/*/bin holding initdb and postgres
    (15 preferred when several are installed)."""
    def order(d):
        v = d.split("/")[-2]
        return (v != "15", -int(v) if v.isdigit() else 0)
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=order):
        if all(os.access(os.path.join(d, x), os.X_OK)
               for x in ("initdb", "postgres", "pg_ctl", "psql")):
            return d
    raise Unavailable("PostgreSQL not installed (apt-get install postgresql: "
                      "no /usr/lib/postgresql/*/bin/initdb)")


class Postgres:
    """A started cluster: .url (libpq URL for bench), .port, .socket_dir;
    stop_server()/start_server() stop and restart it on the same port and
    data (a database outage); stop() ends it for good."""

    def __init__(self, seed_file=None, rows=arena.PG_ROWS, timeout=30.0):
        self.bin = bindir()
        self.user = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise Unavailable("running as root and there is no postgres "
                                  "user to run PostgreSQL as")
            self.user = (pw.pw_uid, pw.pw_gid)
        # in the system's temporary directory, which the postgres user can
        # reach (a caller's work directory may be root's alone)
        self.dir = tempfile.mkdtemp(prefix="arena-pg.")
        DIRS.append(self.dir)
        self.data = os.path.join(self.dir, "data")
        self.proc = None
        self.timeout = timeout
        try:
            if self.user:
                os.chown(self.dir, *self.user)
            self._run(["initdb", "-D", self.data, "-U", "postgres", "-A",
                       "trust", "-E", "UTF8", "--locale=C", "--no-sync"], 60)
            self.port = common.free_port()
            self.start_server()
            seed = seed_file or arena.write_pg_seed(
                os.path.join(self.dir, "seed.sql"), rows=rows)
            with open(seed, "rb") as f:  # read here: psql may not reach it
                sql = f.read()
            self.psql("CREATE ROLE bench LOGIN PASSWORD 'bench'")
            self.psql("CREATE DATABASE benchmark OWNER bench")
            self._run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h",
                       self.dir, "-p", str(self.port), "-U", "bench", "-d",
                       "benchmark", "-f", "-"], 120, input=sql)
        except BaseException:
            self.stop()
            raise
        self.url = "postgres://bench:bench@127.0.0.1:%d/benchmark" % self.port
        self.socket_dir = self.dir

    def _popen_kw(self):
        kw = {"cwd": self.dir, "stdin": subprocess.DEVNULL}
        if self.user:
            kw.update(user=self.user[0], group=self.user[1], extra_groups=[])
        return kw

    def _run(self, argv, timeout, input=None):
        """Run a PostgreSQL tool of .bin (as the postgres user when root);
        raise Failed with its output when it fails."""
        argv = [os.path.join(self.bin, argv[0])] + argv[1:]
        kw = self._popen_kw()
        if input is not None:
            del kw["stdin"]
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, input=input, **kw)
        if p.returncode != 0:
            raise Failed("%s failed (rc %d): %s" % (
                os.path.basename(argv[0]), p.returncode, " | ".join(
                    p.stdout.decode("utf-8", "replace")[-800:].split("\n"))))
        return p.stdout.decode("utf-8", "replace")

    def psql(self, sql, db="postgres", user="postgres"):
        return self._run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                          "-h", self.dir, "-p", str(self.port), "-U", user,
                          "-d", db, "-c", sql], 30)

    def start_server(self):
        """postgres on the Unix socket in .dir and 127.0.0.1:.port; waits
        until it accepts a query."""
        argv = [os.path.join(self.bin, "postgres"), "-D", self.data, "-k",
                self.dir, "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                "-c", "max_connections=300", "-c", "fsync=off", "-c",
                "synchronous_commit=off", "-c", "full_page_writes=off"]
        self.log = open(os.path.join(self.dir, "postgres.log"), "ab")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, **self._popen_kw())
        common.LIVE.append(self.proc)
        deadline = time.monotonic() + self.timeout
        while True:
            if self.proc.poll() is not None:
                raise Failed("postgres exited (rc %s): %s" % (
                    self.proc.returncode, self.log_tail()))
            rc = subprocess.run([os.path.join(self.bin, "pg_isready"), "-q", "-h",
                                 self.dir, "-p", str(self.port)],
                                timeout=10, **self._popen_kw()).returncode \
                if os.access(os.path.join(self.bin, "pg_isready"), os.X_OK) else 0
            if rc == 0:
                try:
                    self.psql("SELECT 1")
                    return
                except Failed:
                    pass
            if time.monotonic() > deadline:
                raise Failed("postgres did not start in %.0f s: %s"
                                  % (self.timeout, self.log_tail()))
            time.sleep(0.05)

    def log_tail(self, n=800):
        try:
            with open(os.path.join(self.dir, "postgres.log"), "rb") as f:
                return " | ".join(f.read()[-n:].decode("utf-8", "replace").split("\n"))
        except OSError:
            return ""

    def stop_server(self):
        """pg_ctl stop -m fast (SIGKILL if that fails); the data stays."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self._run(["pg_ctl", "stop", "-D", self.data, "-m", "fast",
                           "-w", "-t", "20"], 30)
            except (Failed, subprocess.TimeoutExpired):
                pass
        common.stop_proc(self.proc, grace=5.0, sig=signal.SIGINT)
        self.proc = None
        self.log.close()

    def stop(self):
        """Stop the server and remove everything it wrote."""
        try:
            self.stop_server()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.dir in DIRS:
                DIRS.remove(self.dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def abandon():
    """From a signal handler that is about to _exit: kill every cluster
    (common.stop_all: they run in sessions of their own), even one still
    starting, and remove its directory."""
    common.stop_all()
    for d in list(DIRS):
        shutil.rmtree(d, ignore_errors=True)
        DIRS.remove(d)


class TableLock:
    """A psql session that holds ACCESS EXCLUSIVE on items until release():
    every query on the table waits meanwhile (an /async-db query held in
    flight)."""

    def __init__(self, pg):
        kw = pg._popen_kw()
        del kw["stdin"]
        self.p = subprocess.Popen(
            [os.path.join(pg.bin, "psql"), "-X", "-q", "-At", "-h", pg.dir,
             "-p", str(pg.port), "-U", "bench", "-d", "benchmark"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, **kw)
        common.LIVE.append(self.p)
        self.p.stdin.write(b"BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE;"
                           b" SELECT 'locked';\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if line.strip() != b"locked":
            self.release()
            raise Failed("could not lock items: %r" % line)

    def release(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write(b"COMMIT;\n")
                self.p.stdin.close()
            except OSError:
                pass
        common.stop_proc(self.p, grace=5.0)
