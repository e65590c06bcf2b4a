#!/usr/bin/env bash
# MPS benchmark (issue 18) on the simulated GPU: builds what it needs, then runs the part "mps" of
# bench/compute_share_bench: a latency-sensitive client (one kernel at a time, synchronising after
# each) beside a throughput workload (saturating kernels), under no sharing policy, gpufrac's
# compute shares and MPS, and prints the table of docs/mps-benchmark.md. Raw results go to $OUT
# (default build/mps-bench): mps.csv (one line per run), mps-latency.csv (every kernel) and
# summary.md. Defaults are the documented run: 3 runs per cell, 2 s warm-up, 6 s per client
# (about 6 minutes on 2 cores). Extra flags go to the benchmark, e.g. --mps-runs 1 for a quick look.
# Usage: bench/run_mps_bench.sh [compute_share_bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GPUFRAC_BUILD_DIR:-build}
if [[ -z ${GPUFRAC_BUILD_DIR:-} ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  nice -n 5 cmake --build "$build" -j2 --target compute_share_bench >/dev/null
fi
out=${OUT:-$build/mps-bench}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
echo "load before: $(cat /proc/loadavg)" >&2
"$build/bin/compute_share_bench" --parts mps --warmup 2 --mps-runs 3 --mps-seconds 6 \
  --out "$out" "$@"
echo "raw results: $out" >&2
