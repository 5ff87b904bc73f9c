"""TLS material and the pre-measurement check over TLS (HTTP/1.1 or HTTP/2).

The run's certificate: one self-signed ECDSA P-256 certificate for
127.0.0.1 / localhost, made by openssl in the work directory when the
first TLS scenario needs it and shared by every server (tern, nginx, h2o,
nghttpd).  The upload scenarios' 16 MiB body file lives beside it.

The check fetches one response with curl (-k: the certificate is
self-signed) over the scenario's protocol and checks the status, the
protocol curl actually used (HTTP/2 must have been negotiated by ALPN),
the exact body, and for uploads that curl sent the whole body.  The same
check serves cleartext HTTP/2 (h2c: curl --http2-prior-knowledge, http://).
"""

import os
import re
import shutil
import subprocess

from . import common
from .common import BenchError, SetupError


def material(workdir):
    """{'cert', 'key', 'dir'}: made once per work directory."""
    d = os.path.join(workdir, "tls")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    if not (os.path.exists(cert) and os.path.exists(key)):
        if shutil.which("openssl") is None:
            raise SetupError("openssl not found: the TLS scenarios need it")
        os.makedirs(d, exist_ok=True)
        argv = ["openssl", "req", "-x509", "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", cert, "-days", "3",
                "-subj", "/CN=localhost",
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
        rc, out = common.cmd_output(argv, timeout=30)
        if rc != 0:
            raise SetupError("openssl could not make the certificate: %s" % out)
        os.chmod(key, 0o600)
    return {"cert": cert, "key": key, "dir": d}


def upload_file(workdir, size):
    """A file of size bytes (not all zeros, not compressible by accident)."""
    path = os.path.join(workdir, "upload-%d.bin" % size)
    if not os.path.exists(path) or os.path.getsize(path) != size:
        block = bytes(range(256)) * 4096  # 1 MiB
        with open(path + ".tmp", "wb") as f:
            left = size
            while left > 0:
                f.write(block[:left])
                left -= min(left, len(block))
        os.replace(path + ".tmp", path)
    return path


def curl_check(port, sc, expect_body, workdir, content_type="text/plain",
               upload_path=None, timeout=15):
    """One request over TLS (or, for h2c, cleartext HTTP/2 with prior
    knowledge) with curl; raises BenchError on any mismatch.
    Returns {'http_version', 'tls', 'content_type', 'seconds', ...}."""
    if shutil.which("curl") is None:
        raise BenchError("curl not found: the TLS and h2c checks need it")
    body_out = os.path.join(workdir, "check.body")
    h2c = sc.protocol == "h2c"
    url = "%s://127.0.0.1:%d%s" % ("http" if h2c else "https", port, sc.path)
    argv = ["curl", "-sS", "-k", "-v", "--max-time", str(timeout),
            "-o", body_out, "-w",
            "\nCHECK %{http_code} %{http_version} %{size_upload} "
            "%{time_total} [%{content_type}]\n"]
    argv.append({"h2": "--http2", "h2c": "--http2-prior-knowledge"}.get(
        sc.protocol, "--http1.1"))
    for h in sc.headers:
        argv += ["-H", h]
    if sc.upload:
        argv += ["--data-binary", "@" + upload_path,
                 "-H", "content-type: application/octet-stream"]
    argv.append(url)
    try:
        cp = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        raise BenchError("curl %s did not finish in %ds" % (url, timeout))
    out = cp.stdout.decode("utf-8", "replace")
    err = cp.stderr.decode("utf-8", "replace")
    m = re.search(r"CHECK (\d+) (\S+) (\d+) ([\d.]+) \[(.*)\]", out)
    if cp.returncode != 0 or not m:
        raise BenchError("curl %s %s exited %d: %s" % (
            sc.method, url, cp.returncode, (err.strip().splitlines() or [""])[-1][:200]))
    status, ver, sent, secs, ctype = (int(m.group(1)), m.group(2),
                                      int(m.group(3)), float(m.group(4)),
                                      m.group(5))
    tls = re.search(r"SSL connection using (\S+) / (\S+)", err)
    res = {"status": status, "http_version": ver, "seconds": secs,
           "content_type": ctype, "size_upload": sent,
           "tls": "%s %s" % tls.groups() if tls else (
               "none" if h2c else "unknown")}
    with open(body_out, "rb") as f:
        got = f.read()
    what = "%s %s over %s" % (sc.method, sc.path, {
        "h2": "HTTP/2", "h2c": "cleartext HTTP/2 (prior knowledge)"}.get(
            sc.protocol, "HTTP/1.1 + TLS"))
    if status != 200:
        raise BenchError("%s returned status %d (body %r)" % (what, status, got[:80]))
    want_ver = "2" if sc.protocol in ("h2", "h2c") else "1.1"
    if ver != want_ver:
        raise BenchError("%s: curl spoke HTTP/%s, not HTTP/%s (%s)" % (
            what, ver, want_ver, "prior knowledge" if h2c else "ALPN"))
    if expect_body is not None and got != expect_body:
        raise BenchError("%s returned body %s, expected %s" % (
            what, common.clip(got), common.clip(expect_body)))
    if sc.upload and sent != sc.upload:
        raise BenchError("%s: the server answered after %d of %d body bytes" % (
            what, sent, sc.upload))
    res["content_type_ok"] = (not content_type or
                              ctype.lower().startswith(content_type))
    return res


def gtls_check(port, sc, expect_body, workdir, upload_path=None, timeout=30,
               gtlsclient="gtlsclient"):
    """One HTTP/3 request with gtlsclient (ngtcp2's example client: a
    second client beside h3load, which checks every response of the load
    itself): the status from its header dump,
    the body from --download; for an upload, the body file sent as POST
    (both servers answer only once the request's stream has ended, so an
    answer means the whole body arrived).  gtlsclient sends no extra
    header fields: h3-get-browser's head is checked by h3load itself on
    every response of the load.  Raises BenchError on any mismatch."""
    if shutil.which(gtlsclient) is None:
        raise BenchError("gtlsclient not found (apt-get install "
                         "ngtcp2-client): the HTTP/3 check needs it")
    dl = os.path.join(workdir, "gtls-check")
    shutil.rmtree(dl, ignore_errors=True)
    os.makedirs(dl)
    out_path = os.path.join(workdir, "gtls-check.out")
    url = "https://localhost:%d%s" % (port, sc.path)
    argv = [gtlsclient, "--no-quic-dump", "--no-http-dump",
            "--exit-on-all-streams-close", "--download=" + dl,
            "--timeout=%ds" % timeout]
    if sc.upload:
        argv += ["-m", sc.method, "-d", upload_path]
    argv += ["127.0.0.1", str(port), url]
    with open(out_path, "wb") as out:
        try:
            cp = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, timeout=timeout + 10)
        except subprocess.TimeoutExpired:
            raise BenchError("gtlsclient %s did not finish in %ds" % (
                url, timeout + 10))
    with open(out_path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    what = "%s %s over HTTP/3" % (sc.method, sc.path)
    m = re.search(r"\[:status: (\d+)\]", text)
    if cp.returncode != 0 or not m:
        raise BenchError("gtlsclient %s %s exited %d%s: %s" % (
            sc.method, url, cp.returncode, "" if m else " with no response",
            (text.strip().splitlines() or [""])[-1][:200]))
    status = int(m.group(1))
    files = os.listdir(dl)
    got = b""
    if files:
        with open(os.path.join(dl, files[0]), "rb") as f:
            got = f.read()
    if status != 200:
        raise BenchError("%s returned status %d (body %r)" % (what, status,
                                                              got[:80]))
    if expect_body is not None and got != expect_body:
        raise BenchError("%s returned body %s, expected %s" % (
            what, common.clip(got), common.clip(expect_body)))
    ctype = re.search(r"\[content-type: ([^\]]*)\]", text)
    return {"status": status, "tool": "gtlsclient",
            "content_type": ctype.group(1) if ctype else None,
            "body_bytes": len(got)}
