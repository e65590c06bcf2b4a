#!/usr/bin/env bash
# Compute-share benchmark (issue 17) on the simulated GPU: builds what it needs, then runs
# bench/compute_share_bench for the three arms (no limiter, gpufrac, the HAMi-core-like peer) and
# prints the tables of docs/compute-benchmark.md. Raw per-seed numbers go to $OUT (default
# build/compute-bench): shares.csv, lengths.csv, cost.csv, latency.csv, and summary.md (the
# tables). Defaults are the documented run: 10 seeds, 5 s warm-up, 5 s window, 2 runs of the
# kernel-length check (about 28 minutes on 2 cores). Extra flags go to the benchmark, e.g.
# --seeds 3 --window 3 for a quick look, --parts cost for one part.
# Usage: bench/run_compute_bench.sh [compute_share_bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GPUFRAC_BUILD_DIR:-build}
if [[ -z ${GPUFRAC_BUILD_DIR:-} ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  nice -n 5 cmake --build "$build" -j2 --target compute_share_bench >/dev/null
fi
out=${OUT:-$build/compute-bench}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
echo "load before: $(cat /proc/loadavg)" >&2
"$build/bin/compute_share_bench" --seeds 10 --warmup 5 --window 5 --cost-reps 9 \
  --cost-seconds 2 --latency-runs 3 --latency-seconds 10 --out "$out" "$@"
echo "raw results: $out" >&2
