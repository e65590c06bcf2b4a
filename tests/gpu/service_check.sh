#!/usr/bin/env bash
# The node service on a real GPU: starts gpufracd on a scratch state directory and socket (the
# GPUs found through NVML), then runs framework workloads as its jobs with `gpufrac run`, through
# physical_use.sh fill: PyTorch alone in 4 GiB, then PyTorch in 3 GiB and CuPy in 5 GiB side by
# side. Each must see its limit, get its out-of-memory error from the limiter and keep the GPU's
# physical use within its limit. Then reads the MIG layout (`gpufrac mig export`, read-only: it
# changes nothing on the GPU). Prints `gpufrac status` and the service's log at the end.
#
# GPUFRAC names gpufrac (default ./build/bin/gpufrac); gpufracd is taken from beside it.
set -u
cd "$(dirname "$0")/../.."
gpufrac=${GPUFRAC:-$PWD/build/bin/gpufrac}
gpufracd=$(dirname "$gpufrac")/gpufracd
dir=$(mktemp -d)
"$gpufracd" --state-dir "$dir/state" --socket "$dir/sock" --verbose >"$dir/log" 2>&1 &
pid=$!
# Jobs outlive gpufracd by design: cancel any left (a timed-out check) before stopping it.
trap '"$gpufrac" cancel --socket "$dir/sock" 1 2 3 >/dev/null 2>&1
  kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
until "$gpufrac" status --socket "$dir/sock" >/dev/null 2>&1; do
  if ! kill -0 $pid 2>/dev/null; then
    echo "gpufracd did not start:"; cat "$dir/log"; exit 1
  fi
  sleep 0.2
done
export GPUFRAC=$gpufrac GPUFRAC_LAUNCH="run --socket $dir/sock"
ok=1
tests/gpu/physical_use.sh fill $((4 << 30)):torch || ok=0
tests/gpu/physical_use.sh fill $((3 << 30)):torch $((5 << 30)):cupy || ok=0
# The three workloads ran as gpufracd's jobs (its --verbose log names each start).
for job in 1 2 3; do
  grep -q "job $job of .* started on GPU 0 " "$dir/log" || { echo "job $job did not run"; ok=0; }
done
"$gpufrac" mig export --socket "$dir/sock" >"$dir/mig.yaml" || ok=0
cat "$dir/mig.yaml"
grep -q 'mig-enabled: ' "$dir/mig.yaml" || { echo "no MIG layout exported"; ok=0; }
"$gpufrac" status --socket "$dir/sock"
"$gpufrac" ps --all --socket "$dir/sock"
echo "gpufracd log:"; cat "$dir/log"
[ $ok -eq 1 ]
