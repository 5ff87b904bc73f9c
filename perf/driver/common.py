"""Process bookkeeping, /proc accounting, machine metadata.

Shared by every subcommand of perf/perf: every child in its own session
so that it and its children end with it; CPU time summed over a process
tree; wait for a quiet load average before each round.
"""

import datetime
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time

PERF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(PERF_DIR)
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

VERBOSE = [True]


def clip(b, n=80):
    """A body for a message: its first n bytes, and its length when it
    is longer (a 10 MiB expected body must not end up in a report)."""
    return repr(b[:n]) + ("... (%d bytes)" % len(b) if len(b) > n else "")


def log(msg):
    if VERBOSE[0]:
        print("[perf] " + msg, file=sys.stderr, flush=True)


class BenchError(Exception):
    """A measurement could not be made (the row becomes invalid)."""


class SetupError(Exception):
    """The whole command cannot go on (missing tool, bad option)."""


# ---------------------------------------------------------------------------
# children: each in its own session (process group), ended by group id.

LIVE = []  # Popen objects started by us and not yet reaped


def spawn(argv, stdout=None, cwd=None, env=None):
    """Start argv in a new session; it is registered for cleanup."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                         stdout=stdout if stdout is not None else subprocess.DEVNULL,
                         stderr=subprocess.STDOUT, cwd=cwd, env=env,
                         start_new_session=True)
    LIVE.append(p)
    return p


def stop_proc(p, grace=3.0, sig=signal.SIGTERM):
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    # the group may outlive its leader (an nginx worker, say)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    if p in LIVE:
        LIVE.remove(p)


def stop_all():
    for p in list(LIVE):
        stop_proc(p, grace=1.0)


def on_signal(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def install_signal_handlers():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)


def run_bounded(argv, timeout, cwd=None, env=None):
    """Run argv to completion (its own session), at most timeout seconds.

    Returns (returncode, output text).  On timeout the whole group is
    killed and BenchError raised."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, cwd=cwd, env=env,
                         start_new_session=True)
    LIVE.append(p)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_proc(p, grace=1.0, sig=signal.SIGKILL)
        raise BenchError("%s did not finish within %ds" % (
            os.path.basename(argv[0]) if argv[0] != "taskset" else argv[3],
            timeout))
    finally:
        if p in LIVE and p.poll() is not None:
            LIVE.remove(p)
        elif p in LIVE:
            stop_proc(p, grace=1.0)
    return p.returncode, out.decode("utf-8", "replace")


def cmd_output(argv, timeout=10, **kw):
    try:
        cp = subprocess.run(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            timeout=timeout, **kw)
        return cp.returncode, cp.stdout.decode("utf-8", "replace").strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def raise_nofile(want=65536):
    """Raise RLIMIT_NOFILE (children inherit it); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:  # root may raise the hard limit too
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return want
        except (ValueError, OSError):
            want = hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return want
    except (ValueError, OSError):
        return soft


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# /proc

def _stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    return rest


def proc_ppid_and_ticks(pid):
    rest = _stat(pid)
    if rest is None:
        return None
    return int(rest[1]), int(rest[11]) + int(rest[12])


def process_tree(root):
    """root and all its descendants."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_ppid_and_ticks(int(name))
        if st is not None:
            children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def group_pids(pgid):
    """The live processes (zombies not counted) of process group pgid."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # rest[0] state, rest[1] ppid, rest[2] pgrp
        if len(rest) > 2 and rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(int(name))
    return sorted(out)


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        st = proc_ppid_and_ticks(pid)
        if st is not None:
            total += st[1]
    return total


def status_kb(pids, field):
    """Sum of a /proc/PID/status field (kB) over pids, in bytes."""
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def rss_bytes(pids):
    return status_kb(pids, "VmRSS")


def hwm_bytes(pids):
    return status_kb(pids, "VmHWM")


def nfds(pids):
    n = 0
    for pid in pids:
        try:
            n += len(os.listdir("/proc/%d/fd" % pid))
        except OSError:
            pass
    return n


# ---------------------------------------------------------------------------
# machine

def loadavg1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def wait_quiet(limit=1.5, timeout=30.0):
    """Wait up to timeout s for the 1-minute load average to drop below limit."""
    t0 = time.monotonic()
    la = loadavg1()
    while la >= limit and time.monotonic() - t0 < timeout:
        time.sleep(1.0)
        la = loadavg1()
    return {"loadavg1": la, "waited_s": round(time.monotonic() - t0, 1),
            "quiet": la < limit, "limit": limit}


def git_revision(repo=REPO):
    rc, out = cmd_output(["git", "-C", repo, "rev-parse", "--short", "HEAD"])
    if rc != 0:
        return "unknown"
    rc2, st = cmd_output(["git", "-C", repo, "status", "--porcelain",
                          "--untracked-files=no"])
    return out + ("-dirty" if rc2 == 0 and st else "")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def first_line(argv):
    rc, out = cmd_output(argv)
    return out.splitlines()[0] if out else "unknown"


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc)


def machine():
    return {
        "date": now_utc().isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "compiler": first_line(["cc", "--version"]),
        "cpu_model": cpu_model(),
        "nproc": os.cpu_count(),
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
    }


def human_bytes(n):
    if n is None:
        return "n/a"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n


def which_exec(path):
    return path if path and os.access(path, os.X_OK) and os.path.isfile(path) else None


def version_of(argv, pattern=None):
    rc, out = cmd_output(argv)
    if pattern:
        m = re.search(pattern, out)
        return m.group(0) if m else "unknown"
    return out.splitlines()[0] if out else "unknown"


def load_problems(row, res, n, why_none=""):
    """What makes a measured row invalid, as every driver says it: no
    request completed, socket errors, non-2xx answers."""
    if not n:
        row["problems"].append("no request completed" + why_none)
    if row["errors"]:
        row["problems"].append("%d socket errors %s" % (
            row["errors"], res.get("socket_errors") or ""))
    if row["non2xx"]:
        row["problems"].append("%d non-2xx responses" % row["non2xx"])
