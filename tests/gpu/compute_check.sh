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
dir=$(mktemp -d)
"$gpufracd" --state-dir "$dir/state" --socket "$dir/sock" >"$dir/log" 2>&1 &
pid=$!
trap '"$gpufrac" cancel --socket "$dir/sock" 1 2 3 4 5 6 7 8 >/dev/null 2>&1
  kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
until "$gpufrac" status --socket "$dir/sock" >/dev/null 2>&1; do
  kill -0 $pid 2>/dev/null || { echo "gpufracd did not start:"; cat "$dir/log"; exit 1; }
  sleep 0.2
done
value() { grep -o "$1=[0-9.]*" "$2" | tail -1 | cut -d= -f2; }
# run_pair NAME LAUNCH_A LAUNCH_B: two loops started together (a file barrier); prints both rates.
run_pair() {
  local name=$1 a=$2 b=$3 go="$dir/go-$1"
  $a python3 "$loop" "$seconds" --start "$go" >"$dir/$name-a" 2>&1 &
  local pa=$!
  $b python3 "$loop" "$seconds" --start "$go" >"$dir/$name-b" 2>&1 &
  local pb=$!
  until grep -q ready "$dir/$name-a" && grep -q ready "$dir/$name-b"; do sleep 0.2; done
  touch "$go"
  wait $pa $pb
  echo "$(value iters_per_s "$dir/$name-a") $(value iters_per_s "$dir/$name-b")"
}
python3 "$loop" "$seconds" >"$dir/alone" 2>&1 || { cat "$dir/alone"; exit 1; }
alone=$(value iters_per_s "$dir/alone")
echo "alone: $alone iterations/s"
ok=1
share() { python3 -c "print(f'{$1 / $alone:.3f}')"; }
near() { python3 -c "import sys; sys.exit(0 if abs($1 - $2) <= 0.05 else 1)"; }
report() {  # report NAME RATE_A RATE_B WANT_A WANT_B
  local sa sb; sa=$(share "$2"); sb=$(share "$3")
  echo "$1: $2 / $3 iterations/s = $sa / $sb of the GPU (want $4 / $5)"
  if [ "$4" != "-" ]; then near "$sa" "$4" && near "$sb" "$5" || { echo "  off by more than 0.05"; ok=0; }; fi
}
read -r a b < <(run_pair plain "" "")
report "without gpufrac" "$a" "$b" - -
run="$gpufrac run --socket $dir/sock"
read -r a b < <(run_pair fair "$run --gpu-fraction 0.25 --" "$run --gpu-fraction 0.75 --")
report "fair 0.25/0.75" "$a" "$b" 0.25 0.75
read -r a b < <(run_pair strict "$run --gpu-fraction 0.5 --gpu-compute-limit 0.5 --" \
  "$run --gpu-fraction 0.5 --gpu-compute-limit 0.5 --")
report "strict 0.5/0.5" "$a" "$b" 0.5 0.5
python3 "$loop" "$seconds" --train >"$dir/train-plain" 2>&1
$run --gpu-fraction 0.5 -- python3 "$loop" "$seconds" --train >"$dir/train-gpufrac" 2>&1
plain=$(value step_ms "$dir/train-plain"); limited=$(value step_ms "$dir/train-gpufrac")
echo "training step: $plain ms without gpufrac, $limited ms under a 0.5 job's limiter"
python3 -c "import sys; r = $limited / $plain; print(f'ratio {r:.4f}'); sys.exit(0 if r <= 1.01 else 1)" \
  || { echo "  more than 1% slower"; ok=0; }
"$gpufrac" status --socket "$dir/sock"
[ $ok -eq 1 ]
