#!/usr/bin/env bash
# NVIDIA MPS on a real GPU, with PyTorch (tests/gpu/matmul_loop.py). The MPS control daemon runs
# as an ordinary process on a scratch pipe directory: it changes no setting of the GPU (no
# compute mode, no MIG), and it is stopped at the end.
#  1. MPS itself, without gpufrac: matmul loops as clients at 25% and 75% of the SMs
#     (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) at the same time, and one at 25% alone, each against
#     one loop alone without MPS; a client under a 2 GiB pinned-memory limit
#     (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) allocating 1 GiB, then 3 GiB, which must fail; and a
#     client asking for 100% of a server whose default is 25% (set through the control daemon),
#     which must get about 25%.
#  2. Through the node service: gpufracd with GPU 0 in MPS mode starts the daemon itself; jobs at
#     0.25 and 0.75 (and compute limits to match) run side by side, each on its share of the
#     SMs; a job of 2 GiB allocating 3 GiB is refused; `gpufrac status` shows the GPU's MPS clients; the daemon is gone once the
#     service stops.
# Prints each rate and share. Fails when two clients' split of their combined rate is more than
# 0.05 off their percentages, or a lone client's share of one loop's rate without MPS is more than
# TOLERANCE (default 0.07: MPS hands out SMs in pairs, and a kernel's last wave rounds up) off.
# GPUFRAC names gpufrac (default ./build/bin/gpufrac); gpufracd is taken from beside it, with
# GPUFRACD_ARGS added. MPS_CONTROL names nvidia-cuda-mps-control (default: found on PATH or in
# /usr/local/nvidia/bin); exits 77 when there is none.
set -u
cd "$(dirname "$0")/../.."
gpufrac=${GPUFRAC:-$PWD/build/bin/gpufrac}
gpufracd=$(dirname "$gpufrac")/gpufracd
loop=$PWD/tests/gpu/matmul_loop.py
seconds=${SECONDS_PER_RUN:-10}
tolerance=${TOLERANCE:-0.07}
control=${MPS_CONTROL:-$(PATH=$PATH:/usr/local/nvidia/bin:/usr/bin command -v nvidia-cuda-mps-control)}
if [ -z "$control" ] || [ ! -x "$control" ]; then
  echo "no nvidia-cuda-mps-control here: MPS cannot be checked"
  exit 77
fi
echo "control daemon: $control"
dir=$(mktemp -d)
source tests/gpu/checks_lib.sh
gpufracd_pid=
# Whatever happens, no daemon, server or job of this check is left behind.
cleanup() {
  if [ -n "$gpufracd_pid" ]; then
    "$gpufrac" cancel --socket "$dir/sock" 1 2 3 4 5 6 >/dev/null 2>&1
    kill $gpufracd_pid 2>/dev/null; wait $gpufracd_pid 2>/dev/null
  fi
  for pipe in "$dir"/pipe-*; do
    [ -d "$pipe" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe timeout 10 "$control" >/dev/null 2>&1
  done
  rm -rf "$dir"
}
trap cleanup EXIT
ok=1
# mps_start NAME: a control daemon on $dir/pipe-NAME (its log in $dir/log-NAME), exported as the
# pipe directory of what runs next.
mps_start() {
  export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe-$1 CUDA_MPS_LOG_DIRECTORY=$dir/log-$1
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  "$control" -d || { echo "the control daemon did not start"; return 1; }
  for _ in $(seq 50); do [ -e "$CUDA_MPS_PIPE_DIRECTORY/control" ] && return 0; sleep 0.1; done
  echo "the control daemon made no control pipe"; return 1
}
# mps_gone: waits up to 10 s for every MPS control daemon and server to end (their process name,
# cut to 15 characters, is nvidia-cuda-mps); false, listing them, if some still run.
mps_gone() {
  for _ in $(seq 100); do pgrep -x nvidia-cuda-mps >/dev/null || return 0; sleep 0.1; done
  pgrep -ax nvidia-cuda-mps; return 1
}
mps_command() { echo "$1" | timeout 10 "$control"; }
mps_stop() {
  echo "servers: $(mps_command get_server_list | tr '\n' ' ')"
  mps_command quit
  mps_gone || { echo "  MPS still runs after quit"; ok=0; }
  echo "daemon log:"; sed 's/^/  /' "$CUDA_MPS_LOG_DIRECTORY/control.log" | tail -20
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
# split RATE_A RATE_B WANT_A: A's part of the two clients' combined rate must be within 0.05 of
# WANT_A. (Their rates against one loop alone on the whole GPU are lower: a matmul's rate does not
# grow in proportion to its SMs, its kernels' last wave being partly empty, and the two clients
# share the memory bandwidth and the L2.)
split() {
  local part; part=$(python3 -c "print(f'{${1:-0} / (${1:-0} + ${2:-0} + 1e-9):.3f}')")
  echo "  split of their combined rate: $part / $(python3 -c "print(f'{1 - $part:.3f}')") (want $3 / $(python3 -c "print(1 - $3)"))"
  near "$part" "$3" 0.05 || { echo "  split off by more than 0.05"; ok=0; }
}
alloc_py='import sys, torch
for n in map(int, sys.argv[1:]):
    try:
        x = torch.empty(n, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); del x
        print(f"alloc {n}: ok", flush=True)
    except torch.cuda.OutOfMemoryError as e:
        print(f"alloc {n}: out of memory: {str(e).splitlines()[0][:160]}", flush=True)'
# expect_alloc FILE: the first allocation in FILE succeeded and the second ran out of memory.
expect_alloc() {
  cat "$1"
  grep -q "^alloc $((1 << 30)): ok" "$1" && grep -q "^alloc $((3 << 30)): out of memory" "$1" ||
    { echo "  want 1 GiB allocated and 3 GiB refused"; ok=0; }
}

alone=$(run_one alone "") || exit 1
echo "alone, without MPS: $alone iterations/s"

echo "== MPS without gpufrac"
mps_start raw || exit 1
pct() { echo "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$1"; }
read -r a b < <(run_pair mps-pair "$(pct 25)" "$(pct 75)")
report "MPS clients at 25% and 75%, together" - "$a" "$b" 0.25 0.75
split "$a" "$b" 0.25
a25=$(run_one mps-alone-25 "$(pct 25)")
report "MPS client at 25%, alone" "$tolerance" "$a25" "$alone" 0.25 1
echo "  the 25% client together with the 75% one ran at $(python3 -c "print(f'{$a / $a25:.3f}')") of its rate alone"
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2G python3 -c "$alloc_py" $((1 << 30)) $((3 << 30)) \
  >"$dir/pinned" 2>&1
echo "pinned-memory limit 2 GiB:"; expect_alloc "$dir/pinned"
mps_stop

echo "== a client's environment cannot raise the server's default"
mps_start capped || exit 1
echo "set_default_active_thread_percentage 25: $(mps_command 'set_default_active_thread_percentage 25')"
a=$(run_one mps-raise "$(pct 100)")
report "client asking for 100% of a 25% server" "$tolerance" "$a" "$alone" 0.25 1
mps_stop

echo "== gpufracd with GPU 0 in MPS mode"
start_gpufracd "$gpufracd" "$gpufrac" --mps-gpus 0 --mps-control "$control" --verbose ${GPUFRACD_ARGS:-} || exit 1
run="$gpufrac run --socket $dir/sock"
# A job's share of the SMs is its compute limit (by default all the GPU, under the fair policy).
read -r a b < <(run_pair jobs "$run --gpu-fraction 0.25 --gpu-compute-limit 0.25 --" \
  "$run --gpu-fraction 0.75 --gpu-compute-limit 0.75 --")
report "jobs at 0.25 and 0.75 on an MPS GPU" - "$a" "$b" 0.25 0.75
split "$a" "$b" 0.25
for f in jobs-a jobs-b; do grep -q ready "$dir/$f" || { echo "$f:"; cat "$dir/$f"; }; done
# A job held by its 2 GiB (the limiter and the MPS pinned limit, both set by gpufracd).
$run --gpu-memory 2G -- python3 -c "$alloc_py" $((1 << 30)) $((3 << 30)) >"$dir/job-pinned" 2>&1
echo "job of 2 GiB:"; expect_alloc "$dir/job-pinned"
# While a job runs, the status shows it as a client with its SM share.
$run --gpu-fraction 0.25 --gpu-compute-limit 0.25 -- python3 "$loop" 6 >"$dir/status-job" 2>&1 &
job=$!
until grep -q ready "$dir/status-job" || ! kill -0 $job 2>/dev/null; do sleep 0.2; done
"$gpufrac" status --socket "$dir/sock" | tee "$dir/status"
grep -q '(mps)' "$dir/status" && grep -q 'sm 25%' "$dir/status" ||
  { echo "  the status shows no MPS client at 25% of the SMs"; ok=0; }
wait $job
kill $gpufracd_pid; wait $gpufracd_pid; gpufracd_pid=
mps_gone || { echo "  the service left its MPS daemon running"; ok=0; }
echo "gpufracd log:"; sed 's/^/  /' "$dir/log" | tail -30
[ $ok -eq 1 ]
