#!/usr/bin/env bash
# Compute shares on a real GPU, through the node service (gpufracd on a scratch state directory,
# the GPUs found through NVML), with PyTorch (tests/gpu/matmul_loop.py):
#  1. each matmul loop alone, without gpufrac: its rate is "all of the GPU";
#  2. two loops at once without gpufrac: the GPU's own split (about half each);
#  3. two jobs at 0.25 and 0.75 (fair): each should get about its request of the GPU's rate;
#  4. two jobs at 0.5 and 0.5 with strict limits (--gpu-compute-limit 0.5): about half each;
#  5. a training step alone under a 0.5 job's limiter against without gpufrac (goal: at most 1%
#     slower; alone on the GPU the arbiter only renews turns).
# Prints each rate and share; fails when a share is more than 0.05 off its request. GPUFRAC names
# gpufrac (default ./build/bin/gpufrac); gpufracd is taken from beside it.
set -u
cd "$(dirname "$0")/../.."
gpufrac=${GPUFRAC:-$PWD/build/bin/gpufrac}
gpufracd=$(dirname "$gpufrac")/gpufracd
loop=$PWD/tests/gpu/matmul_loop.py
seconds=${SECONDS_PER_RUN:-15}
export MATMUL_SIZE=${MATMUL_SIZE:-4096}  # matmul_loop.py's matrices (4096: about 2.7 ms a product on an H100)
dir=$(mktemp -d)
source tests/gpu/checks_lib.sh
trap '"$gpufrac" cancel --socket "$dir/sock" 1 2 3 4 5 6 7 8 >/dev/null 2>&1
  kill $gpufracd_pid 2>/dev/null; wait $gpufracd_pid 2>/dev/null; rm -rf "$dir"' EXIT
start_gpufracd "$gpufracd" "$gpufrac" ${GPUFRACD_ARGS:-} || exit 1
alone=$(run_one alone "") || exit 1
echo "alone: $alone iterations/s"
ok=1
# While the service's jobs run, each job's GPU time over the middle of the measurement, as the
# driver measured it (gpu_seconds: NVML's per-process samples) and as the arbiter charged it
# (charged_seconds), to set beside their rates: measured time that splits like the rates checks
# NVML's samples on this GPU; charged time that is right while the rates are not means time was
# charged to a job that did not get it.
on_go() {
  "$gpufrac" status --json --socket "$dir/sock" >"$dir/$1-s1.json" 2>/dev/null
  sleep "$(python3 -c "print(max($seconds - 2, 1))")"
  "$gpufrac" status --json --socket "$dir/sock" >"$dir/$1-s2.json" 2>/dev/null
}
charged() {
  python3 - "$dir/$1-s1.json" "$dir/$1-s2.json" <<'PY'
import json, sys
def used(path, key):
    try:
        gpus = json.load(open(path))["gpus"]
    except (OSError, ValueError, KeyError):
        return {}
    return {w["job"]: w[key] for g in gpus for w in g["workloads"] if w.get(key) is not None}
for key, what in (("gpu_seconds", "measured by the driver"), ("charged_seconds", "charged")):
    a, b = used(sys.argv[1], key), used(sys.argv[2], key)
    delta = {j: b[j] - a[j] for j in sorted(b) if j in a}
    total = sum(delta.values())
    if len(delta) == 2 and total > 0:
        print(f"  GPU time {what} over the middle of the run: " + " / ".join(
            f"job {j} {d:.2f} s ({d / total:.3f})" for j, d in delta.items()))
PY
}
read -r a b < <(run_pair plain "" "")
report "without gpufrac" 0.05 "$a" "$b" - -
run="$gpufrac run --socket $dir/sock"
read -r a b < <(run_pair fair "$run --gpu-fraction 0.25 --" "$run --gpu-fraction 0.75 --")
report "fair 0.25/0.75" 0.05 "$a" "$b" 0.25 0.75
charged fair
read -r a b < <(run_pair strict "$run --gpu-fraction 0.5 --gpu-compute-limit 0.5 --" \
  "$run --gpu-fraction 0.5 --gpu-compute-limit 0.5 --")
report "strict 0.5/0.5" 0.05 "$a" "$b" 0.5 0.5
charged strict
python3 "$loop" "$seconds" --train >"$dir/train-plain" 2>&1
$run --gpu-fraction 0.5 -- python3 "$loop" "$seconds" --train >"$dir/train-gpufrac" 2>&1
plain=$(value step_ms "$dir/train-plain"); limited=$(value step_ms "$dir/train-gpufrac")
echo "training step: $plain ms without gpufrac, $limited ms under a 0.5 job's limiter"
python3 -c "import sys; r = $limited / $plain; print(f'ratio {r:.4f}'); sys.exit(0 if r <= 1.01 else 1)" \
  || { echo "  more than 1% slower"; ok=0; }
"$gpufrac" status --socket "$dir/sock"
[ $ok -eq 1 ]
