#!/usr/bin/env bash
# Installs what tern needs to build, test and benchmark on Debian 12, as
# root, and only what is missing (a second run costs one dpkg query).
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config clang
  libclang-rt-14-dev python3 curl openssl wrk nginx-light
  libuv1-dev libmbedtls-dev libnghttp2-dev libngtcp2-dev
  libngtcp2-crypto-gnutls-dev libnghttp3-dev libgnutls28-dev zlib1g-dev
  nghttp2-client clang-format valgrind chromium python3-websockets)
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The browser tests drive Debian's Chromium with playwright-core from npm
# (package.json pins it; node_modules stays out of git).
if command -v npm >/dev/null &&
  [ ! -d test/browser/node_modules/playwright-core ]; then
  (cd test/browser && npm install --no-audit --no-fund --silent) ||
    echo "deps: npm install failed; the browser tests will be skipped" >&2
fi
# Debian starts the nginx package's own service on port 80; the benchmarks
# run their own nginx and the test machine needs no web server.
if pgrep -x nginx >/dev/null && [ -f /run/nginx.pid ]; then
  nginx -s quit 2>/dev/null || true
fi
