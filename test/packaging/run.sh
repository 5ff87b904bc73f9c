#!/usr/bin/env bash
# tern as other projects take it (docs/packaging.md), printed as TAP:
#   1. installed (meson install into a staging root), found with
#      pkg-config: a program compiles, links and runs against it, and a
#      man page per function is there;
#   2. the same with CMake's find_package(tern) and the tern::tern target;
#   3. as a meson subproject: the parent gets the library and nothing
#      else (no example, tool or test target, no test);
#   4. the programs a newcomer copies (examples/hello, rest, spa, feed,
#      chat, tls) compile against the installed library with pkg-config, and
#      one of them (rest) answers when run against it.
#   test/packaging/run.sh SRCDIR BUILDDIR
set -uo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "1..4"
n=0 bad=0
result() { # ok?, name: one TAP line, and the log when it failed
  n=$((n + 1))
  if [ "$1" = 0 ]; then
    echo "ok $n - $2"
  else
    bad=1
    echo "not ok $n - $2"
    tail -25 "$tmp/log" | sed 's/^/# /'
  fi
}
opt() { # a build option's value
  meson introspect "$build" --buildoptions |
    python3 -c "import json,sys; print([o['value'] for o in json.load(sys.stdin) if o['name'] == '$1'][0])"
}
want=$(meson introspect "$build" --projectinfo |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')
cat >"$tmp/v.c" <<'EOF'
#include <stdio.h>

#include <tern.h>

int main(void) {
  tern_server *srv = NULL;
  int rc = tern_server_new(NULL, &srv);
  printf("%s %s\n", tern_version(), rc == 0 ? "ok" : tern_strerror(rc));
  tern_server_free(srv);
  return rc != 0;
}
EOF

meson install -C "$build" --no-rebuild --destdir "$tmp/stage" --quiet \
  >"$tmp/log" 2>&1
rc=$?
root="$tmp/stage$(opt prefix)"
libdir="$root/$(opt libdir)"
if [ $rc = 0 ]; then
  flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config \
    --define-variable=prefix="$root" --cflags --libs tern 2>>"$tmp/log")
  # shellcheck disable=SC2086
  cc "$tmp/v.c" -o "$tmp/v_pc" $flags >>"$tmp/log" 2>&1 &&
    out=$(LD_LIBRARY_PATH="$libdir" "$tmp/v_pc" 2>>"$tmp/log") &&
    echo "$out" >>"$tmp/log" && [ "$out" = "$want ok" ] &&
    # a man page per function, with the header's text
    grep -q "Respond in one call" \
      "$tmp/stage$(opt prefix)/$(opt mandir)/man3/tern_respond.3" 2>>"$tmp/log"
  rc=$?
fi
result $rc "installed, with pkg-config (and the man pages)"

mkdir -p "$tmp/cm"
cp "$tmp/v.c" "$tmp/cm/v.c"
cat >"$tmp/cm/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(uses_tern C)
find_package(tern 0.2 REQUIRED CONFIG)
add_executable(v v.c)
target_link_libraries(v tern::tern)
EOF
{ cmake -S "$tmp/cm" -B "$tmp/cm/b" -G Ninja -DCMAKE_PREFIX_PATH="$root" &&
  cmake --build "$tmp/cm/b"; } >"$tmp/log" 2>&1 &&
  out=$(LD_LIBRARY_PATH="$libdir" "$tmp/cm/b/v" 2>>"$tmp/log") &&
  echo "$out" >>"$tmp/log" && [ "$out" = "$want ok" ]
result $? "installed, with CMake's find_package(tern)"

mkdir -p "$tmp/parent/subprojects"
ln -s "$(cd "$src" && pwd)" "$tmp/parent/subprojects/tern"
cp "$tmp/v.c" "$tmp/parent/v.c"
cat >"$tmp/parent/meson.build" <<'EOF'
project('parent', 'c')
tern_dep = subproject('tern').get_variable('tern_dep')
executable('v', 'v.c', dependencies : tern_dep)
EOF
rc=1
if meson setup "$tmp/parent/b" "$tmp/parent" >"$tmp/log" 2>&1; then
  targets=$(meson introspect "$tmp/parent/b" --targets | python3 -c '
import json, sys
print(" ".join(sorted(t["name"] + ":" + t["type"] for t in json.load(sys.stdin))))')
  tests=$(meson introspect "$tmp/parent/b" --tests | python3 -c '
import json, sys
print(len(json.load(sys.stdin)))')
  echo "targets: $targets; tests: $tests" >>"$tmp/log"
  [ "$targets" = "tern:shared library tern:static library v:executable" ] &&
    [ "$tests" = 0 ]
  rc=$?
fi
result $rc "a meson subproject gives the library alone"

rc=1
if [ -n "${flags:-}" ]; then
  rc=0
  for ex in hello rest spa feed chat tls; do
    # shellcheck disable=SC2086
    cc -std=c11 -Wall -Wextra -Werror "$src/examples/$ex.c" -o "$tmp/$ex" \
      $flags -pthread >>"$tmp/log" 2>&1 || { rc=1; echo "$ex failed" >>"$tmp/log"; }
  done
  if [ $rc = 0 ]; then
    LD_LIBRARY_PATH="$libdir" "$tmp/rest" 0 >"$tmp/rest.out" 2>>"$tmp/log" &
    pid=$!
    for _ in $(seq 50); do
      port=$(sed -n 's/^listening on \([0-9]*\)$/\1/p' "$tmp/rest.out")
      [ -n "$port" ] && break
      sleep 0.1
    done
    out=$(curl -s "http://127.0.0.1:${port:-1}/todos" 2>>"$tmp/log")
    echo "rest answered: $out" >>"$tmp/log"
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    [ "$out" = "[]" ] || rc=1
  fi
fi
result $rc "the newcomer examples build with pkg-config against the install"
exit $bad
