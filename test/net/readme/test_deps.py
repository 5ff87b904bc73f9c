#!/usr/bin/env python3
"""test/deps.sh, the set-up both README commands run: it asks only for
what its purpose needs (the demo: no browser, no test clients) and touches
no service of the machine's (it used to stop whatever nginx was running).

deps.sh runs with a PATH whose first directory holds stand-ins: a
dpkg-query that logs each package asked about and answers "installed" (so
nothing is installed), and nginx, systemctl, service, invoke-rc.d, kill and
pkill stand-ins that log being called. A process named nginx runs beside
it, with a pid file, as a user's own nginx would."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import REPO, Skip, Suite, check, eq

suite = Suite()
case = suite.case
PIDFILE = "/run/nginx.pid"


def stand_ins(d):
    log = os.path.join(d, "calls.log")
    scripts = {
        "dpkg-query": 'for a; do last=$a; done\n'
                      'echo "dpkg-query $last" >>%s\n'
                      'printf "install ok installed"\n' % log,
    }
    for name in ("nginx", "systemctl", "service", "invoke-rc.d", "kill",
                 "pkill"):
        scripts[name] = 'echo "%s $*" >>%s\n' % (name, log)
    for name, body in scripts.items():
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(p, 0o755)
    return log


def run_deps(args):
    """Run deps.sh with the stand-ins; returns the calls it made."""
    d = tempfile.mkdtemp(prefix="tern-deps-")
    log = stand_ins(d)
    # A process named nginx, as pgrep -x sees one.
    fake = os.path.join(d, "bin")
    os.mkdir(fake)
    shutil.copy("/bin/sleep", os.path.join(fake, "nginx"))
    nginx = subprocess.Popen([os.path.join(fake, "nginx"), "30"])
    made_pid = False
    try:
        if os.geteuid() == 0 and not os.path.exists(PIDFILE):
            with open(PIDFILE, "w") as f:
                f.write("%d\n" % nginx.pid)
            made_pid = True
        env = dict(os.environ, PATH=d + ":" + os.environ.get("PATH", ""))
        p = subprocess.run(["bash", "test/deps.sh"] + args, cwd=REPO,
                           env=env, capture_output=True, timeout=120)
        eq(p.returncode, 0, "deps.sh %s: %s" % (args, p.stderr[-400:]))
        check(nginx.poll() is None, "the machine's nginx was stopped")
        calls = open(log).read().split("\n") if os.path.exists(log) else []
        return [c for c in calls if c]
    finally:
        if made_pid:
            os.unlink(PIDFILE)
        nginx.kill()
        nginx.wait()
        shutil.rmtree(d, ignore_errors=True)


def asked(calls):
    return {c.split(" ", 1)[1] for c in calls if c.startswith("dpkg-query ")}


def services_touched(calls):
    return [c for c in calls if not c.startswith("dpkg-query ")]


@case(timeout=150)
def demo_asks_only_for_what_it_needs():
    if shutil.which("dpkg-query") is None:
        raise Skip("not a Debian machine")
    calls = run_deps(["demo"])
    got = asked(calls)
    for p in ("libuv1-dev", "libnghttp2-dev", "libmbedtls-dev", "meson",
              "openssl"):
        check(p in got, "the demo did not check for %s: %s" % (p, sorted(got)))
    for p in ("chromium", "nghttp2-client", "python3-websockets", "wrk",
              "nginx-light", "valgrind", "clang"):
        check(p not in got, "the demo asks for %s, which it does not need"
              % p)
    eq(services_touched(calls), [], "services touched by deps.sh demo")


@case(timeout=150)
def tests_touch_no_service():
    if shutil.which("dpkg-query") is None:
        raise Skip("not a Debian machine")
    if os.geteuid() != 0:
        raise Skip("the pid file of a running nginx needs root")
    calls = run_deps([])
    got = asked(calls)
    for p in ("chromium", "nghttp2-client", "python3-websockets", "clang"):
        check(p in got, "the tests did not check for %s" % p)
    eq(services_touched(calls), [], "services touched by deps.sh")


if __name__ == "__main__":
    suite.main()
