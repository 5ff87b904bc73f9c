"""`pip install bindings/python` as the README says: offline, in a fresh
venv of Debian's Python, with nothing but the standard build tools; the
installed package then serves the README's example."""
import os
import re
import shutil
import subprocess
import sys
import urllib.request

import pytest

from conftest import ROOT, SANITIZER_PRELOAD


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the package installed as the README says: (venv,
    the environment to run it with, a directory outside the checkout)."""
    tmp_path = tmp_path_factory.mktemp("install")
    venv = tmp_path / "venv"
    # python3-venv (test/deps.sh) brings pip and setuptools into the venv
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "python3 -m venv failed (python3-venv " \
        "missing?): " + r.stderr
    # a copy of the package, so that the install's build/ and egg-info
    # never land in the checkout
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "bindings", "python"), src,
                    ignore=shutil.ignore_patterns("tests", "build",
                                                  "*.egg-info",
                                                  "__pycache__"))
    # the copy is outside the checkout: setup.py finds tern.h through it
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               TERN_SOURCE_ROOT=ROOT)
    for k in ("PYTHONPATH", "TERN_NATIVE"):
        env.pop(k, None)
    if env.get("TERN_LIBRARY"):
        env["TERN_LIBRARY"] = os.path.abspath(env["TERN_LIBRARY"])
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index",
                        "--no-build-isolation", str(src)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    if SANITIZER_PRELOAD:
        env["LD_PRELOAD"] = SANITIZER_PRELOAD
    return venv, env, tmp_path


def imported_from(installed, module):
    venv, env, tmp_path = installed
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import %s as m; print(m.__file__)" % module],
                           capture_output=True, text=True, env=env,
                           cwd=str(tmp_path))
    assert where.stdout.startswith(str(venv)), where


def test_pip_install_into_fresh_venv(installed):
    venv, env, tmp_path = installed
    # run from elsewhere: the venv's tern, found by import, not the checkout
    p = subprocess.Popen([str(venv / "bin" / "python"), os.path.join(
        ROOT, "examples", "python", "hello.py"), "0"], env=env,
        cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        m = re.match(rb"listening on (\d+)", p.stdout.readline())
        assert m, p.stderr.read() if p.poll() is not None else b""
        with urllib.request.urlopen("http://127.0.0.1:%s/users/7" %
                                    m.group(1).decode(), timeout=10) as r:
            assert r.read() == b"user 7"
    finally:
        p.send_signal(2)
        rc = p.wait(10)
    assert rc == 0
    imported_from(installed, "tern")


def test_pip_install_serves_asgi_with_python_m_tern(installed):
    """The same install built the native module: `python -m tern` from
    the venv serves an ASGI application (no checkout on its path)."""
    venv, env, tmp_path = installed
    (tmp_path / "hi.py").write_text(
        "async def app(scope, receive, send):\n"
        "    if scope['type'] != 'http':\n"
        "        return\n"
        "    await send({'type': 'http.response.start', 'status': 200,\n"
        "                'headers': [(b'content-type', b'text/plain')]})\n"
        "    await send({'type': 'http.response.body',\n"
        "                'body': b'hi over ' + scope['http_version'].encode()})\n")
    p = subprocess.Popen([str(venv / "bin" / "python"), "-m", "tern", "hi:app",
                          "--port", "0", "--no-access-log"], env=env,
                         cwd=str(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        port = None
        for _ in range(50):
            line = p.stderr.readline()
            m = re.search(rb"serving http on [^:]+:(\d+)", line)
            if m:
                port = m.group(1).decode()
                break
            if not line:
                break
        assert port, "no serving line"
        with urllib.request.urlopen("http://127.0.0.1:%s/" % port,
                                    timeout=10) as r:
            assert r.read() == b"hi over 1.1"
    finally:
        p.send_signal(15)
        rc = p.wait(20)
    assert rc == 0
    imported_from(installed, "tern._native")
