#!/usr/bin/env bash
# Runs gpufrac's libFuzzer targets (tests/fuzz/fuzz_*.cc) one after another, each for a while,
# and prints what each did: executions, seconds, corpus size and what it found. The test suite
# runs each for 10 s this way (tests/fuzz.cmake); by hand, run them longer:
#
#   tests/fuzz/run.sh                         # every target, 300 s each
#   tests/fuzz/run.sh -t 60 limit_file        # one target for 60 s
#   tests/fuzz/run.sh -t 600 api_json -- -max_len=65536   # after --: more libFuzzer flags
#
# Options: -t SECONDS per target (default 300); -b DIR, the fuzz build (default build-fuzz,
# configured with clang and GPUFRAC_FUZZ=ON and built there first, unless -n: use DIR/bin as it
# is); -w DIR, where runs keep their work (default DIR/work).
#
# The seeds in tests/fuzz/corpus/<target>/ are read, never written: what a run adds goes to
# WORK/corpus/<target>/ and is read again by the next run. An input that crashes, leaks, hangs
# (over 10 s) or runs out of memory is saved as WORK/artifacts/<target>/<kind>-<hash>, the log is
# WORK/logs/<target>.log, and the script exits 1. Reproduce a finding with
# DIR/bin/fuzz_<target> WORK/artifacts/<target>/<file>.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
seconds=300
build="$repo/build-fuzz"
work=""
do_build=1
while getopts "t:b:w:n" opt; do
  case "$opt" in
    t) seconds="$OPTARG" ;;
    b) build="$OPTARG" ;;
    w) work="$OPTARG" ;;
    n) do_build=0 ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do targets+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
extra=("$@")
work="${work:-$build/work}"

if [ ${#targets[@]} -eq 0 ]; then
  for src in "$repo"/tests/fuzz/fuzz_*.cc; do
    name="$(basename "$src" .cc)"
    targets+=("${name#fuzz_}")
  done
fi

if [ "$do_build" = 1 ]; then
  cxx="$(command -v clang++-14 || command -v clang++ || true)"
  cc="$(command -v clang-14 || command -v clang || true)"
  if [ -z "$cxx" ] || [ -z "$cc" ]; then
    echo "run.sh: needs clang (scripts/install-deps.sh installs clang-14 and libclang-rt-14-dev)" >&2
    exit 2
  fi
  cmake -S "$repo" -B "$build" -DGPUFRAC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
fi

# Undefined behaviour and leaks stop a run like a crash; detect_leaks is on by default.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=0
printf '%-16s %8s %12s %10s %8s  %s\n' target seconds executions "exec/s" corpus result
for t in "${targets[@]}"; do
  bin="$build/bin/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "run.sh: no fuzz target $bin (build the fuzz configuration, or drop -n)" >&2
    exit 2
  fi
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t" "$work/logs"
  log="$work/logs/$t.log"
  dict=()
  [ -f "$repo/tests/fuzz/dict/$t.dict" ] && dict=("-dict=$repo/tests/fuzz/dict/$t.dict")
  before="$(ls "$work/artifacts/$t" | wc -l)"
  start=$(date +%s)
  rc=0
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$t/" "${dict[@]}" ${extra[@]+"${extra[@]}"} \
    "$work/corpus/$t" "$repo/tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  took=$(($(date +%s) - start))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  corpus="$(ls "$work/corpus/$t" | wc -l)"
  result=ok
  if [ "$rc" -ne 0 ] || [ "$(ls "$work/artifacts/$t" | wc -l)" -ne "$before" ]; then
    failed=1
    artifact="$(ls -t "$work/artifacts/$t" | head -1)"
    result="FOUND (exit $rc) ${artifact:+$work/artifacts/$t/$artifact}; log $log"
    grep -m1 -E 'ERROR: |invariant failed|runtime error|Test unit written' "$log" >&2 || true
  fi
  printf '%-16s %8s %12s %10s %8s  %s\n' "$t" "$took" "${execs:-?}" "${rate:-?}" "$corpus" \
    "$result"
done
exit "$failed"
