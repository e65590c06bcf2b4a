# Shell functions shared by the real-GPU checks that measure rates (compute_check.sh,
# mps_check.sh). Source it after setting `dir` (a scratch directory), `loop` (matmul_loop.py) and
# `seconds` (how long each loop measures).

# start_gpufracd GPUFRACD GPUFRAC [ARGS...]: starts gpufracd on $dir/state and $dir/sock with
# ARGS, waits until it answers; sets gpufracd_pid. Fails with its log if it does not start.
start_gpufracd() {
  local daemon=$1 client=$2; shift 2
  "$daemon" --state-dir "$dir/state" --socket "$dir/sock" "$@" >"$dir/log" 2>&1 &
  gpufracd_pid=$!
  until "$client" status --socket "$dir/sock" >/dev/null 2>&1; do
    kill -0 $gpufracd_pid 2>/dev/null || { echo "gpufracd did not start:"; cat "$dir/log"; return 1; }
    sleep 0.2
  done
}

# value NAME FILE: the last NAME=<number> in FILE.
value() { grep -o "$1=[0-9.]*" "$2" | tail -1 | cut -d= -f2; }

# run_one NAME LAUNCH: one loop, LAUNCH (a command prefix, may be empty) in front; prints its rate.
run_one() {
  $2 python3 "$loop" "$seconds" >"$dir/$1" 2>&1 || { cat "$dir/$1" >&2; return 1; }
  value iters_per_s "$dir/$1"
}

# run_pair NAME LAUNCH_A LAUNCH_B: two loops started together (a file barrier); prints both rates.
run_pair() {
  local name=$1 a=$2 b=$3 go="$dir/go-$1"
  $a python3 "$loop" "$seconds" --start "$go" >"$dir/$name-a" 2>&1 &
  local pa=$!
  $b python3 "$loop" "$seconds" --start "$go" >"$dir/$name-b" 2>&1 &
  local pb=$!
  until grep -q ready "$dir/$name-a" && grep -q ready "$dir/$name-b"; do
    if ! kill -0 $pa 2>/dev/null || ! kill -0 $pb 2>/dev/null; then break; fi
    sleep 0.2
  done
  touch "$go"
  # A script may define on_go NAME to run alongside the measurement (e.g. sample the service).
  local sampler=
  if declare -F on_go >/dev/null; then on_go "$name" & sampler=$!; fi
  wait $pa $pb
  [ -n "$sampler" ] && wait $sampler
  echo "$(value iters_per_s "$dir/$name-a") $(value iters_per_s "$dir/$name-b")"
}

# share RATE: RATE as a fraction of $alone (the rate of one loop alone on the GPU).
share() { python3 -c "print(f'{$1 / $alone:.3f}')"; }
# near A B TOLERANCE: whether |A - B| <= TOLERANCE.
near() { python3 -c "import sys; sys.exit(0 if abs($1 - $2) <= $3 else 1)"; }
# report NAME TOLERANCE RATE_A RATE_B WANT_A WANT_B: prints both rates and their shares of the GPU;
# clears `ok` when a share is more than TOLERANCE off what is wanted (TOLERANCE or WANT_A "-":
# nothing is checked).
report() {
  local sa sb
  sa=$(share "${3:-0}") sb=$(share "${4:-0}")
  echo "$1: $3 / $4 iterations/s = $sa / $sb of the GPU (want $5 / $6)"
  if [ "$2" != "-" ] && [ "$5" != "-" ]; then
    near "$sa" "$5" "$2" && near "$sb" "$6" "$2" || { echo "  off by more than $2"; ok=0; }
  fi
}
