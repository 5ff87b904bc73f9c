#!/usr/bin/env bash
# The demo: install what is missing, build, and run tern's reference
# server (examples/reference/) on localhost with every protocol built so
# far: HTTP/1.1 and h2c on the plain port, HTTP/1.1 and HTTP/2 over TLS
# on the TLS port, HTTP/3 on the same port number over UDP (advertised
# with Alt-Svc), WebSocket on all three (/ws echoes), a small page with
# its assets from examples/static at /static/ (tern_static), and the chat
# room (examples/chat) on the next two ports (HTTP/3 too): open it in two
# browser tabs. A self-signed certificate for localhost is made on the
# first run. Ctrl-C stops both gracefully.
#   examples/demo.sh [--port N] [--tls-port N]   (defaults 8080 and 8443;
#                                                  chat on N+1)
set -euo pipefail
cd "$(dirname "$0")/.."
test/deps.sh demo
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
port=8080 tls_port=8443
while [ $# -gt 0 ]; do
  case "$1" in
  --port) port=$2; shift 2 ;;
  --tls-port) tls_port=$2; shift 2 ;;
  *) echo "usage: examples/demo.sh [--port N] [--tls-port N]" >&2; exit 2 ;;
  esac
done
certs=build/demo-cert
if [ ! -f "$certs/cert.pem" ]; then
  mkdir -p "$certs"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -nodes -days 365 -subj /CN=localhost \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
    -keyout "$certs/key.pem" -out "$certs/cert.pem" 2>/dev/null
  echo "demo: made a self-signed certificate in $certs"
fi
chat_port=$((port ? port + 1 : 0)) chat_tls=$((tls_port ? tls_port + 1 : 0))
# Both servers run in the background and this script waits for them, so
# that a SIGINT or SIGTERM sent to its own PID (not only Ctrl-C to the
# terminal's process group) reaches them: each stops gracefully, and the
# script exits when both have.
pids=()
stop() {
  trap - INT TERM
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  exit 0
}
trap stop INT TERM
# Each server's lines pass through (the chat's marked "chat: "), and once
# its ports are printed the hints follow with the ports it really has
# (with --port 0 the kernel picks them).
hints() { # PREFIX: the server's lines on stdin
  local p="" t="" line
  while IFS= read -r line; do
    printf '%s%s\n' "$1" "$line"
    case $line in
    "listening on "*) p=${line##* } ;;
    "tls listening on "*) t=${line##* } ;;
    "quic listening on "*)
      if [ -n "$1" ]; then
        echo "demo: the chat room is at http://127.0.0.1:$p/ and" \
          "https://localhost:$t/ (HTTP/3 on UDP ${line##* })"
      else
        echo "demo: try  curl http://127.0.0.1:$p/  and  curl -k https://127.0.0.1:$t/"
        echo "demo: HTTP/3: gtlsclient 127.0.0.1 ${line##* }" \
          "https://localhost:${line##* }/ (package ngtcp2-client)"
        echo "demo: a page served from examples/static:" \
          "http://127.0.0.1:$p/static/ (and over TLS and HTTP/3)"
      fi
      ;;
    esac
  done
}
build/examples/chat --port "$chat_port" --tls-port "$chat_tls" --quic \
  --cert "$certs/cert.pem" --key "$certs/key.pem" > >(hints "chat: ") &
pids+=($!)
build/examples/reference --port "$port" --tls-port "$tls_port" \
  --quic-port "$tls_port" --cert "$certs/cert.pem" --key "$certs/key.pem" \
  --static examples/static > >(hints "") &
pids+=($!)
# Either server ending on its own (a port in use, say) ends the demo.
rc=0
wait -n "${pids[@]}" || rc=$?
trap - INT TERM
kill -TERM "${pids[@]}" 2>/dev/null || true
wait "${pids[@]}" 2>/dev/null || true
exit $rc
