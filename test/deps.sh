#!/usr/bin/env bash
# Installs what tern needs on Debian 12, as root, and only what is missing
# (a second run costs one dpkg query). It changes nothing it did not
# install: no service is stopped or started.
#
#   test/deps.sh          build and run the tests (the default)
#   test/deps.sh demo     build and run the demo: the build tools, the
#                         libraries and openssl for its certificate
#
# The benchmarks' peers and tools (wrk, nginx, h2o, ...) are installed by
# `perf/perf setup`, not here.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-test}
# libzstd-dev and libbrotli-dev: zstd and br, the content codings
# browsers send beside gzip, for on-the-fly response compression
# (docs/compression.md); zlib1g-dev gives gzip.
build=(build-essential meson ninja-build pkg-config
  libuv1-dev libgnutls28-dev libmbedtls-dev libnghttp2-dev zlib1g-dev
  libzstd-dev libbrotli-dev libngtcp2-dev libngtcp2-crypto-gnutls-dev libnghttp3-dev)
case "$what" in
demo) pkgs=("${build[@]}" openssl python3-dev python3-venv) ;;
# The tests: clang and its runtime for the fuzz targets, the real clients
# (gtlsclient, from ngtcp2-client, is Debian's HTTP/3 client; gtlsserver,
# from ngtcp2-server, the reference peer test_h3.py can run against),
# clang-format and valgrind for CI's format check and performance gate;
# python3-prometheus-client's parser checks /metrics (test_ops.py);
# hiredis (with its libuv adapter) and redis-server for the reference
# server's /db routes and test_db.py, which starts its own Redis on a Unix
# socket; pytest and venv for the Python binding's tests
# (bindings/python/tests: test_install.py installs the package into a fresh
# venv); haproxy as the real load balancer in front of the reference server
# (test_haproxy.py, test_fleet.py);
# the zstd and brotli tools decode compressed answers (test_compress.py);
# abigail-tools' abidw describes the built library for .ci/abi-check;
# cmake finds the installed library with find_package (test/packaging);
# python3-dev builds the Python server's native module, which serves the
# frameworks of test_frameworks.py (FastAPI, Starlette, Quart, Flask,
# Django) to httpx with HTTP/2 (python3-h2) and asyncio's uvloop; uvicorn,
# hypercorn, daphne and gunicorn are the peers of perf/'s Python rows;
# the HttpArena app (examples/arena/) parses and writes its JSON with
# jansson and queries PostgreSQL with libpq's asynchronous API, and
# test_arena.py starts a throwaway PostgreSQL cluster of its own and
# decodes br answers with python3-brotli
# (postgresql: initdb and the server, never the system's service).
test)
  pkgs=("${build[@]}" clang libclang-rt-14-dev python3 curl openssl
    nghttp2-client gnutls-bin ngtcp2-client ngtcp2-server
    python3-websockets python3-prometheus-client chromium clang-format
    valgrind libhiredis-dev redis-server python3-pytest python3-venv
    haproxy zstd brotli abigail-tools cmake python3-dev python3-fastapi
    python3-starlette python3-quart python3-flask python3-django
    python3-httpx python3-h2 python3-uvloop python3-uvicorn
    python3-httptools python3-hypercorn python3-daphne gunicorn
    libjansson-dev libpq-dev postgresql python3-brotli)
  command -v npm >/dev/null || pkgs+=(npm)
  ;;
*) echo "usage: test/deps.sh [test|demo]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing ${missing[*]}; run as root to install" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # redis-server's and postgresql's packages would start daemons: a
  # policy-rc.d that refuses every start keeps the install side-effect
  # free (removed afterwards unless one was there before).
  policy=/usr/sbin/policy-rc.d
  ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    ours=1
  fi
  rc=0
  apt-get update -qq &&
    apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >/dev/null || rc=$?
  [ "$ours" = 1 ] && rm -f "$policy"
  [ "$rc" = 0 ] || exit "$rc"
fi
# The browser tests drive Debian's Chromium with playwright-core from npm
# (package.json pins it; node_modules stays out of git).
if [ "$what" = test ] && command -v npm >/dev/null &&
  [ ! -d test/browser/node_modules/playwright-core ]; then
  (cd test/browser && npm install --no-audit --no-fund --silent) ||
    echo "deps: npm install failed; the browser tests will be skipped" >&2
fi
