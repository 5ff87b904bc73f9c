#!/usr/bin/env bash
# The demo: install what is missing, build, and run tern's reference
# server on localhost. Stop it with Ctrl-C (a graceful stop).
#   examples/demo.sh [--port N]      (default 8080; 0 picks a free port)
set -euo pipefail
cd "$(dirname "$0")/.."
test/deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
port=8080
if [ "${1:-}" = --port ] && [ -n "${2:-}" ]; then port=$2; fi
echo "tern demo: try  curl http://127.0.0.1:PORT/  (PORT as printed below)"
exec build/examples/hello --port "$port"
