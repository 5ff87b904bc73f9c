#!/usr/bin/env python3
"""Fleet-wide TLS session tickets (tern_tls_set_ticket_key, reference
--ticket-key): a client that got a ticket from one reference server resumes
its session on another given the same key (TLS 1.3 and 1.2), and does not on
one with a different key; rotation (--previous-ticket-key): a ticket under
the previous key resumes, new tickets are under the current one. The
same on the mbedTLS engine (TLS 1.2, its only version)."""

import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import self_signed  # noqa: E402
from harness import Server, Suite, binary, check, eq, get

suite = Suite()
case = suite.case
tmp = tempfile.mkdtemp(prefix="tern-keys-")
KEY1 = os.urandom(64).hex()
KEY2 = os.urandom(64).hex()
cert = key = None


def setup():
    global cert, key
    cert, key = self_signed(tmp, "k")


def start(ticket_key, previous=None, engine=None):
    s = Server("reference", ["--workers", "1", "--tls-port", "0",
                             "--cert", cert, "--key", key, "--ticket-key",
                             ticket_key] +
               (["--previous-ticket-key", previous] if previous else []) +
               (["--tls-engine", engine] if engine else []))
    m = re.match(r"tls listening on (\d+)$", s.next_line())
    check(m is not None, "no tls port line")
    s.tls_port = int(m.group(1))
    return s


def fetch(port, ctx, session=None):
    """GET / over TLS; (the session, whether it was resumed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost",
                             session=session) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close"
                      b"\r\n\r\n")
            data = b""
            while True:
                got = s.recv(65536)
                if not got:
                    break
                data += got
            check(data.endswith(b"Hello, World!"), data[:100])
            return s.session, s.session_reused


def ctx_for(version):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = version
    return ctx


def resumes(version, engine=None):
    a, b, c = (start(KEY1, engine=engine), start(KEY1, engine=engine),
               start(KEY2, engine=engine))
    try:
        ctx = ctx_for(version)
        sess, reused = fetch(a.tls_port, ctx)
        eq(reused, False, "the first handshake")
        check(sess is not None and sess.has_ticket, "no ticket from a")
        _, reused = fetch(a.tls_port, ctx, sess)
        eq(reused, True, "resumed on the instance that issued the ticket")
        _, reused = fetch(b.tls_port, ctx, sess)
        eq(reused, True, "resumed on the other instance, same key")
        _, reused = fetch(c.tls_port, ctx, sess)
        eq(reused, False, "resumed on an instance with another key")
    finally:
        for s in (a, b, c):
            eq(s.stop(), 0, "reference exit status")


@case
def tls13_resumes_across_instances():
    resumes(ssl.TLSVersion.TLSv1_3)


@case
def tls12_resumes_across_instances():
    resumes(ssl.TLSVersion.TLSv1_2)


def rotates(version, engine=None):
    """A (key 1) issues a ticket; B (key 2, previous key 1) resumes it, C
    (key 2 alone) does not; a ticket from B's full handshake is a key-2
    one: C resumes it, A does not."""
    a, b, c = (start(KEY1, engine=engine), start(KEY2, KEY1, engine=engine),
               start(KEY2, engine=engine))
    try:
        ctx = ctx_for(version)
        sess, _ = fetch(a.tls_port, ctx)
        _, reused = fetch(b.tls_port, ctx, sess)
        eq(reused, True, "a previous-key ticket resumed on the rotated one")
        _, reused = fetch(c.tls_port, ctx, sess)
        eq(reused, False, "a previous-key ticket resumed without it")
        sess, reused = fetch(b.tls_port, ctx)
        eq(reused, False, "a full handshake on the rotated one")
        _, reused = fetch(c.tls_port, ctx, sess)
        eq(reused, True, "the rotated one's ticket under the new key")
        _, reused = fetch(a.tls_port, ctx, sess)
        eq(reused, False, "the rotated one's ticket under the old key")
    finally:
        for s in (a, b, c):
            eq(s.stop(), 0, "reference exit status")


@case
def tls13_rotation():
    rotates(ssl.TLSVersion.TLSv1_3)


@case
def tls12_rotation():
    rotates(ssl.TLSVersion.TLSv1_2)


@case
def mbedtls_resumes_and_rotates():
    """mbedTLS 2.28 has no call for ticket keys; tern sets its ticket
    context's two slots itself: the same key resumes across instances,
    the previous key's tickets still resume after a rotation."""
    resumes(ssl.TLSVersion.TLSv1_2, "mbedtls")
    rotates(ssl.TLSVersion.TLSv1_2, "mbedtls")
    # A ticket keeps resuming in later seconds (its age is checked against
    # the 24-hour lifetime, which must not be 0: then every ticket older
    # than the second it was made in had expired).
    a, b = start(KEY1, engine="mbedtls"), start(KEY1, engine="mbedtls")
    try:
        ctx = ctx_for(ssl.TLSVersion.TLSv1_2)
        sess, _ = fetch(a.tls_port, ctx)
        time.sleep(1.2)
        _, reused = fetch(b.tls_port, ctx, sess)
        eq(reused, True, "resumed a second later on the other instance")
    finally:
        for s in (a, b):
            eq(s.stop(), 0, "reference exit status")


@case
def bad_keys_refused():
    for k, why in [("ab" * 63, "short"), ("zz" * 64, "not hex")]:
        r = subprocess.run([binary("reference"), "--port", "0",
                            "--tls-port", "0", "--cert", cert, "--key", key,
                            "--ticket-key", k],
                           capture_output=True, text=True, timeout=10)
        check(r.returncode != 0, "a %s key was taken" % why)
    for engine in ("gnutls", "mbedtls"):
        r = subprocess.run([binary("reference"), "--port", "0",
                            "--tls-port", "0", "--tls-engine", engine,
                            "--cert", cert, "--key", key,
                            "--previous-ticket-key", "ab" * 63],
                           capture_output=True, text=True, timeout=10)
        check(r.returncode != 0, "%s took a short previous key" % engine)
    # A good key on mbedTLS serves.
    s = start(KEY1, engine="mbedtls")
    eq(get(s.port).status, 200,
       "reference on mbedTLS with a ticket key serves")
    eq(s.stop(), 0, "reference on mbedTLS with a ticket key")


def teardown():
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    suite.main(setup, teardown)
