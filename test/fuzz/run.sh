#!/usr/bin/env bash
# Build a libFuzzer target with clang and run it for a bounded time over
# its seed corpus (new inputs go to a scratch directory, never into the
# source tree). Prints one TAP result.
#   run.sh SRCDIR BUILDDIR NAME SECONDS source.c...
set -uo pipefail
src=$1 build=$2 name=$3 secs=$4
shift 4
out="$build/fuzz"
mkdir -p "$out/$name-corpus"
echo "1..1"
if ! clang -g -O1 -std=c11 -D_GNU_SOURCE \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$src/include" -I"$src/lib" "$@" -o "$out/$name" 2>"$out/$name.log"
then
  cat "$out/$name.log"
  echo "not ok 1 - $name (build failed)"
  exit 1
fi
seeds="$src/test/fuzz/corpus_${name#fuzz_}"
dict="$src/test/fuzz/${name#fuzz_}.dict"
args=(-max_total_time="$secs" -print_final_stats=1)
[ -f "$dict" ] && args+=(-dict="$dict")
if "$out/$name" "${args[@]}" "$out/$name-corpus" "$seeds" \
    >"$out/$name.log" 2>&1; then
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$name.log" |
    grep -o '[0-9]*$')
  echo "ok 1 - $name ($runs inputs in ${secs}s)"
else
  tail -40 "$out/$name.log"
  echo "not ok 1 - $name (crash: see $out/$name.log)"
  exit 1
fi
