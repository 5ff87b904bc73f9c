#!/usr/bin/env bash
# h2spec (github.com/summerwind/h2spec; Debian does not package it, see
# docs/testing.md "HTTP/2 conformance: h2spec" for building it) against
# the reference server, RUNS times on each of its three HTTP/2 doors: TLS
# with ALPN h2, an http2_only port (h2c alone) and the plain port that
# also speaks HTTP/1.1. Prints one summary line per run and door; exits 1
# when a run on TLS or on the http2_only port is short of all tests (the
# HTTP/1.1 port answers h2spec 3.5/2's non-HTTP bytes with an HTTP/1.1
# 400, as docs/tls-http2.md explains, so it is reported, not judged).
#
#   test/conformance/h2spec.sh [RUNS] [BUILDDIR]     (default 5, build)
set -uo pipefail
runs=${1:-5} build=${2:-build}
cd "$(dirname "$0")/../.."
command -v h2spec >/dev/null || { echo "h2spec: not installed" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 2 -subj /CN=localhost \
  2>/dev/null || exit 1
"$build/examples/reference" --port 0 --tls-port 0 --h2c-port 0 \
  --cert "$tmp/cert.pem" --key "$tmp/key.pem" >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 50); do
  grep -q '^h2c listening' "$tmp/out" && break
  sleep 0.1
done
plain=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$tmp/out")
tls=$(sed -n 's/^tls listening on \([0-9]*\)$/\1/p' "$tmp/out")
h2c=$(sed -n 's/^h2c listening on \([0-9]*\)$/\1/p' "$tmp/out")
[ -n "$plain" ] && [ -n "$tls" ] && [ -n "$h2c" ] ||
  { echo "h2spec.sh: the server did not start: $(cat "$tmp/err")" >&2; exit 1; }
bad=0
for i in $(seq "$runs"); do
  for door in tls h2c plain; do
    case $door in
    tls) args=(-t -k -p "$tls") ;;
    h2c) args=(-p "$h2c") ;;
    plain) args=(-p "$plain") ;;
    esac
    line=$(timeout 300 h2spec -h 127.0.0.1 -o 5 "${args[@]}" 2>&1 | tail -1)
    echo "run $i $door: $line"
    if [ "$door" != plain ] && { ! [[ $line =~ ^([0-9]+)\ tests,\ ([0-9]+)\ passed ]] ||
      [ "${BASH_REMATCH[1]}" != "${BASH_REMATCH[2]}" ]; }; then
      bad=1
    fi
  done
done
exit $bad
