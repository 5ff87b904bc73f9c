#!/usr/bin/env python3
"""What a browser does: Debian's headless Chromium, driven by playwright-core
(test/browser), loads pages from the reference server over HTTP/1.1 and over
HTTP/2 (TLS, ALPN) and reports the protocol it used; and two pages talk in
examples/chat's room over WebSocket, on HTTP/1.1 (Upgrade) and on HTTP/2 (RFC
8441 extended CONNECT)."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import REPO, Conn, Server, Suite, build_request, check, eq

suite = Suite()
case = suite.case
BROWSER = os.path.join(REPO, "test", "browser")
srv = None
chat = None
cert_path = None
STATIC = os.path.join(REPO, "examples", "static")


def node(script, url):
    if not os.path.isdir(os.path.join(BROWSER, "node_modules",
                                      "playwright-core")):
        raise AssertionError("playwright-core is missing: test/deps.sh "
                             "installs it with npm")
    p = subprocess.run(["node", os.path.join(BROWSER, script), url],
                       capture_output=True, timeout=80)
    check(p.returncode == 0, "chromium failed: %s" % p.stderr.decode()[-800:])
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def browse(url):
    return node("fetch.mjs", url)


def setup():
    global srv
    tmp = tempfile.mkdtemp(prefix="tern-browser-")
    cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
    subprocess.run(["openssl", "req", "-x509", "-nodes", "-days", "2",
                    "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-subj", "/CN=localhost",
                    "-keyout", key, "-out", cert], check=True,
                   capture_output=True)
    global cert_path
    cert_path = cert
    srv = Server("reference", ["--tls-port", "0", "--cert", cert, "--key", key,
                               "--quic-port", "0", "--static", STATIC])
    srv.tls_port = srv.quic_port = None
    while srv.tls_port is None or srv.quic_port is None:
        line = srv.next_line()
        m = re.match(r"tls listening on (\d+)$", line)
        if m:
            srv.tls_port = int(m.group(1))
        m = re.match(r"quic listening on (\d+)$", line)
        if m:
            srv.quic_port = int(m.group(1))
    global chat
    chat = Server("chat", ["--tls-port", "0", "--cert", cert, "--key", key])
    m = re.match(r"tls listening on (\d+)$", chat.next_line())
    check(m is not None, "no chat tls port")
    chat.tls_port = int(m.group(1))


@case(timeout=90)
def chromium_over_h2():
    r = browse("https://127.0.0.1:%d/" % srv.tls_port)
    eq(r["status"], 200, "status")
    eq(r["protocol"], "h2", "protocol Chromium used")
    eq(r["text"].strip(), "Hello, World!", "page text")
    # GnuTLS, the default engine where built, speaks TLS 1.3 to Chromium.
    m = re.search(r"tls engine (\w+)", srv.stderr_text())
    check(m is not None, "no tls engine line")
    eq(r["tls"], "TLS 1.3" if m.group(1) == "gnutls" else "TLS 1.2",
       "TLS version Chromium used")


@case(timeout=90)
def chromium_over_http11():
    r = browse("http://127.0.0.1:%d/" % srv.port)
    eq(r["status"], 200, "status")
    eq(r["protocol"], "http/1.1", "protocol Chromium used")
    eq(r["text"].strip(), "Hello, World!", "page text")


def static_page(proto, url, *quic):
    p = subprocess.run(["node", os.path.join(BROWSER, "static.mjs"), url] +
                       list(quic), capture_output=True, timeout=80)
    check(p.returncode == 0, "chromium failed: %s" % p.stderr.decode()[-800:])
    r = json.loads(p.stdout.decode().strip().splitlines()[-1])
    eq(r["status"], 200, "page status")
    eq(r["protocol"], proto, "page protocol")
    check(r["script"].startswith("Loaded over " + proto),
          "app.js did not run: %r" % r["script"])
    check(r["styled"], "style.css did not apply")
    check(r["image"], "logo.svg did not load")
    for name in ("style.css", "logo.svg", "app.js"):
        a = r["assets"].get(name)
        check(a is not None, "no resource entry for %s: %r" % (name,
                                                             r["assets"]))
        eq(a["protocol"], proto, name + " protocol")
        eq(a["size"], os.path.getsize(os.path.join(STATIC, name)),
           name + " size")


@case(timeout=90)
def chromium_static_page_over_http11():
    static_page("http/1.1", "http://127.0.0.1:%d/static/" % srv.port)


@case(timeout=90)
def chromium_static_page_over_h2():
    static_page("h2", "https://127.0.0.1:%d/static/" % srv.tls_port)


@case(timeout=90)
def chromium_static_page_over_h3():
    import base64
    import hashlib
    pub = subprocess.run(["openssl", "x509", "-in", cert_path, "-pubkey",
                          "-noout"], capture_output=True, check=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"],
                         input=pub, capture_output=True, check=True).stdout
    spki = base64.b64encode(hashlib.sha256(der).digest()).decode()
    static_page("h3", "https://localhost:%d/static/" % srv.quic_port,
                "localhost:%d" % srv.quic_port, spki)


@case(timeout=120)
def chromium_websocket_sizes_over_h2():
    """Chromium echoes WebSocket messages of 0 B to 16 MiB, text and binary,
    some in flight together, through the reference server's /ws from a page it
    loaded over h2: the socket is an RFC 8441 stream of that connection (the
    server counts one connection for the page and the socket)."""
    before = stats_connections()
    r = node("wsecho.mjs", "https://127.0.0.1:%d/" % srv.tls_port)
    eq(r["protocol"], "h2", "protocol Chromium used")
    eq(r["bad"], [], "messages not echoed intact")
    eq(r["ok"], 23, "messages echoed")
    eq(stats_connections() - before, 2, "connections: the page's, and "
       "this stats request's (no separate WebSocket connection)")


def stats_connections():
    with Conn(srv.port) as c:
        c.send(build_request("GET", "/stats"))
        return json.loads(c.response().body)["connections"]


def talk(url, protocol, carrier):
    r = node("chat.mjs", url)
    for who in ("a", "b"):
        eq(r[who]["protocol"], protocol, "page %s loaded over" % who)
        check(r[who]["welcome"].endswith("(via %s)" % carrier),
              "page %s's WebSocket carrier: %r" % (who, r[who]["welcome"]))
    check(r["line"] in r["b"]["log"], "page b shows what page a sent")
    check(r["line"] in r["a"]["log"], "page a sees its own line too")


@case(timeout=90)
def chromium_chat_over_http11():
    """Upgrade: websocket on an HTTP/1.1 connection."""
    talk("http://127.0.0.1:%d/" % chat.port, "http/1.1", "http/1.1")


@case(timeout=90)
def chromium_chat_over_h2():
    """The page came over h2, so Chromium opens the WebSocket as an
    extended CONNECT stream (RFC 8441) on that connection: the server
    saw the HTTP/2 carrier."""
    talk("https://127.0.0.1:%d/" % chat.tls_port, "h2", "h2")


def teardown():
    if chat is not None:
        eq(chat.stop(), 0, "chat exit status")
    if srv is not None:
        eq(srv.stop(), 0, "reference exit status")


if __name__ == "__main__":
    suite.main(setup=setup, teardown=teardown)
