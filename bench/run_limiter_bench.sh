#!/usr/bin/env bash
# Measures what libgpufrac.so adds to the driver's hot paths on the simulated GPU: builds, runs
# bench/limiter_bench (direct and through the limiter, in the same run, 9 repetitions or
# $REPETITIONS) and prints the medians and the difference, in wall-clock and CPU time.
# GPUFRAC_BENCH_DRIVER=real measures on this machine's NVIDIA driver and GPU 0 instead (the build
# directory may then be a folder made by tests/gpu/pack_for_device.sh).
# Usage: bench/run_limiter_bench.sh [extra benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
# GPUFRAC_BUILD_DIR: an already built tree to measure instead of building ./build.
if [[ -n ${GPUFRAC_BUILD_DIR:-} ]]; then
  build=$(cd "$GPUFRAC_BUILD_DIR" && pwd)
else
  scripts/build.sh >/dev/null
  build=$PWD/build
fi
work=$(mktemp -d)
trap 'rm -rf "$work"; rm -f /dev/shm/simgpu.bench-$$ /dev/shm/gpufrac.bench-$$.*' EXIT
if [[ ${GPUFRAC_BENCH_DRIVER:-sim} != real ]]; then
  export LD_LIBRARY_PATH=$build/lib/simgpu SIMGPU_NAMESPACE=bench-$$ SIMGPU_CONFIG=1xH100-80GB
fi
uuid=$("$build/bin/cuda_probe" uuid | sed -n 's/^uuid=//p')
printf 'gpufrac-limits 1\nworkload bench-%s\ngpu %s limit %s context 0\n' $$ "$uuid" \
  $((64 << 30)) >"$work/limits"
chmod 0444 "$work/limits"
export GPUFRAC_LIMIT_FILE=$work/limits GPUFRAC_BENCH_LIMITER=$build/lib/libgpufrac.so
# Repetitions of direct and limited runs are interleaved in random order, so that the machine's
# drift (the contended rows swing by 2x between runs on a 2-core machine) falls on both alike.
"$build/bin/limiter_bench" --benchmark_repetitions="${REPETITIONS:-9}" \
  --benchmark_enable_random_interleaving=true --benchmark_display_aggregates_only=true \
  --benchmark_out="$work/out.json" --benchmark_out_format=json "$@" >&2
cp "$work/out.json" "${BENCH_JSON:-/dev/null}" 2>/dev/null || true
python3 - "$work/out.json" <<'PY'
import json, statistics, sys
runs = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    parts = b["run_name"].split("/")  # e.g. BM_AllocFree/1/1000
    path = "limiter" if parts[1] == "1" else "direct"
    key = "/".join([parts[0]] + parts[2:])
    runs.setdefault(key, {}).setdefault(path, []).append((b["real_time"], b["cpu_time"]))
print(f"{'benchmark':24} {'clock':5} {'direct ns':>10} {'limiter ns':>11} {'added ns':>9} "
      f"{'ratio':>6}  range of the limiter's runs")
for key, r in runs.items():
    if "direct" not in r or "limiter" not in r:
        continue
    for i, clock in enumerate(("wall", "cpu")):
        d = statistics.median(x[i] for x in r["direct"])
        lim = [x[i] for x in r["limiter"]]
        l = statistics.median(lim)
        print(f"{key:24} {clock:5} {d:10.1f} {l:11.1f} {l - d:9.1f} {l / d:6.2f}  "
              f"{min(lim):.0f}-{max(lim):.0f}")
PY
