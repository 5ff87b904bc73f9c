#!/usr/bin/env bash
# Build a libFuzzer target with clang and run it for a bounded time over
# its seed corpus (new inputs go to a scratch directory, never into the
# source tree). Prints one TAP result. meson's fuzz suite calls it once
# per target (test/meson.build lists the targets and their sources).
#   run.sh SRCDIR BUILDDIR NAME SECONDS source.c... [clang flags]
#
# A campaign runs every target of the fuzz suite for longer and records
# what it did:
#   run.sh --long [MINUTES] [BUILDDIR] [TARGET...]
#                       (default 20 minutes, build/, every target)
# It runs the suite with TERN_FUZZ_SECONDS set (two targets at a time on
# this machine's cores) and writes BUILDDIR/fuzz/campaign.md: per target
# the executions, the coverage reached, the corpus size and any finding
# (the input is kept as BUILDDIR/fuzz/NAME-{crash,timeout,leak,oom}-*).
set -uo pipefail
if [ "${1:-}" = --long ]; then
  mins=${2:-20} build=${3:-build}
  shift $(($# < 3 ? $# : 3))
  cd "$(dirname "$0")/../.."
  [ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null || exit 1
  start=$(date -u +%FT%TZ)
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  # Findings are the artifacts this campaign writes, not older ones.
  stamp=$(mktemp)
  trap 'rm -f "$stamp"' EXIT
  # Only this campaign's logs are summed up below.
  for t in "${@:-}"; do [ -n "$t" ] && rm -f "$build/fuzz/$t.log"; done
  [ $# -eq 0 ] && rm -f "$build"/fuzz/fuzz_*.log
  TERN_FUZZ_SECONDS=$((mins * 60)) meson test -C "$build" --suite fuzz \
    --timeout-multiplier 0 --num-processes "$(nproc)" --print-errorlogs "$@"
  rc=$?
  {
    echo "# Fuzz campaign"
    echo
    echo "$mins minutes per target, started $start, revision $rev," \
      "$(nproc) cores, $(clang --version | head -1)."
    echo
    echo "| target | executions | exec/s | coverage | features | corpus | result |"
    echo "|---|---:|---:|---:|---:|---:|---|"
    if [ $# -gt 0 ]; then
      logs=()
      for t in "$@"; do logs+=("$build/fuzz/$t.log"); done
    else
      logs=("$build"/fuzz/fuzz_*.log)
    fi
    for log in "${logs[@]}"; do
      name=$(basename "$log" .log)
      runs=$(grep -ao 'number_of_executed_units: *[0-9]*' "$log" |
        grep -o '[0-9]*$' | tail -1)
      eps=$(grep -ao 'average_exec_per_sec: *[0-9]*' "$log" |
        grep -o '[0-9]*$' | tail -1)
      last=$(grep -a ' cov: ' "$log" | tail -1)
      cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
      ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
      corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
      found=$(find "$build/fuzz" -maxdepth 1 -newer "$stamp" \( -name \
        "$name-crash-*" -o -name "$name-timeout-*" -o -name "$name-leak-*" \
        -o -name "$name-oom-*" \) 2>/dev/null)
      result="clean"
      [ -n "$found" ] && result="finding(s): $(echo $found)"
      echo "| $name | ${runs:-?} | ${eps:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $result |"
    done
  } >"$build/fuzz/campaign.md"
  cat "$build/fuzz/campaign.md"
  exit $rc
fi
src=$1 build=$2 name=$3 secs=${TERN_FUZZ_SECONDS:-$4}
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
# -timeout: an input that runs for 10 s is a stuck loop, a finding.
args=(-max_total_time="$secs" -print_final_stats=1 -timeout=10
  -artifact_prefix="$out/$name-")
[ -f "$dict" ] && args+=(-dict="$dict")
# A target's own libFuzzer flags, one a line ('#' starts a comment).
opts="$src/test/fuzz/${name#fuzz_}.options"
if [ -f "$opts" ]; then
  while read -r o; do
    case $o in '' | '#'*) ;; *) args+=("$o") ;; esac
  done <"$opts"
fi
if "$out/$name" "${args[@]}" "$out/$name-corpus" "$seeds" \
    >"$out/$name.log" 2>&1; then
  runs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$out/$name.log" |
    grep -o '[0-9]*$')
  echo "ok 1 - $name ($runs inputs in ${secs}s)"
else
  tail -40 "$out/$name.log"
  echo "not ok 1 - $name (crash: see $out/$name.log)"
  exit 1
fi
