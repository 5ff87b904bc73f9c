"""Fixtures of the binding's tests, and TAP output for meson.

With TERN_TAP=1 (the meson test `python`, test/meson.build) every test
prints one TAP line ("ok N - name" / "not ok N - name", its failure as
"# " lines) and the plan at the end, which test/summary.py counts; run
with `-p no:terminal` so that pytest's own report stays out of the TAP
stream. Without it, pytest reports as usual:

    TERN_LIBRARY=build/libtern.so /usr/bin/python3 -m pytest bindings/python/tests
"""
import os
import shutil
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))

import tern  # noqa: E402

TAP = os.environ.get("TERN_TAP") == "1"

# Under the sanitizer build the meson test preloads the ASan runtime into
# this Python; the clients the tests start (curl, nghttp, the example
# programs' own Python) are not ASan programs and must not get it.
# The example programs load the ASan libtern too: they get it back
# (SANITIZER_PRELOAD).
SANITIZER_PRELOAD = None
if "libasan" in os.environ.get("LD_PRELOAD", ""):
    SANITIZER_PRELOAD = os.environ.pop("LD_PRELOAD")


def pytest_addoption(parser):
    # -p no:terminal (TAP mode) drops the option that assertion messages
    # read; give it back so that failed asserts still explain themselves.
    if TAP:
        parser.addoption("--tap-verbose", dest="verbose", type=int, default=0)
_tap = {"n": 0, "lock": threading.Lock()}


def pytest_collection_modifyitems(session, config, items):
    if TAP:
        print("TAP version 13", flush=True)


def pytest_runtest_logreport(report):
    if not TAP:
        return
    name = report.nodeid.split("::", 1)[-1]
    if report.when == "call" or (report.when == "setup" and
                                 (report.failed or report.skipped)):
        _tap["n"] += 1
        n = _tap["n"]
        if report.passed:
            print("ok %d - %s" % (n, name), flush=True)
        elif report.skipped:
            why = report.longrepr[2] if isinstance(report.longrepr, tuple) \
                else ""
            print("ok %d - %s # SKIP %s" % (n, name, why), flush=True)
        else:
            print("not ok %d - %s" % (n, name), flush=True)
            for line in str(report.longrepr).splitlines()[-40:]:
                print("# " + line, flush=True)
    elif report.when == "teardown" and report.failed:
        _tap["n"] += 1
        print("not ok %d - %s (teardown)" % (_tap["n"], name), flush=True)
        for line in str(report.longrepr).splitlines()[-40:]:
            print("# " + line, flush=True)


def pytest_collectreport(report):
    # a test file that does not even import: one failure, with its error
    if TAP and report.failed:
        _tap["n"] += 1
        print("not ok %d - collecting %s" % (_tap["n"], report.nodeid),
              flush=True)
        for line in str(report.longrepr).splitlines()[-40:]:
            print("# " + line, flush=True)


def pytest_sessionfinish(session, exitstatus):
    if TAP:
        print("1..%d" % _tap["n"], flush=True)


@pytest.fixture
def server():
    """A factory: server(**settings) -> a started tern.Server(workers=1
    unless given) listening on 127.0.0.1, stopped after the test; routes
    are added by the test before start (pass start=False)."""
    made = []

    def make(**kw):
        kw.setdefault("workers", 1)
        s = tern.Server(**kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.stop(1.0)
        assert s.pending() == 0


def started(app, **listen):
    app.port_ = app.listen("127.0.0.1", 0, **listen)
    app.start()
    return app.port_


@pytest.fixture(scope="session")
def cert(tmp_path_factory):
    """A self-signed ECDSA P-256 certificate for localhost: (cert, key)."""
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("cert")
    c, k = str(d / "cert.pem"), str(d / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec",
                    "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", k, "-out", c, "-days", "2", "-subj",
                    "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    return c, k
