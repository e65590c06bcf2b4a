#!/usr/bin/env bash
# Physical GPU memory, read with nvidia-smi outside any workload (no limiter), on a real GPU with
# nothing else running on GPU 0.
#
#   physical_use.sh context
#       What one process's bare CUDA context costs: cuda_probe holds a context and 2 MiB, not
#       under the limiter. Prints context_mib=N.
#   physical_use.sh fill BYTES:FRAMEWORK [BYTES:FRAMEWORK...]
#       Starts one `gpufrac exec --gpu-memory BYTES -- frameworks_check.py FRAMEWORK BYTES` per
#       argument, all at once (GPUFRAC_LAUNCH="run --socket PATH" runs them as node-service
#       jobs instead of `exec`). Each fills its limit and holds it; once all hold, reads the GPU's
#       memory in use, in all and per process, then lets them exit. Passes when every check
#       passed, every refusal but jax's own pool's came from the limiter, each workload's process
#       holds at most its limit, and the GPU's use grew by at most the sum of the limits. Prints
#       what each process holds outside its framework's allocator (its context and loaded
#       kernels), for which the limiter charges gpu::ContextChargeBytes per context.
#
# GPUFRAC and PROBE name the binaries (defaults: ./build/bin/gpufrac and cuda_probe beside it).
set -u
cd "$(dirname "$0")/../.."
gpufrac=${GPUFRAC:-$PWD/build/bin/gpufrac}
probe=${PROBE:-$(dirname "$gpufrac")/cuda_probe}
read -ra launch <<<"${GPUFRAC_LAUNCH:-exec}"
used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
field() {  # field FILE NAME: NAME's value on FILE's "framework=... NAME=VALUE ..." line
  sed -n "s/^framework=.* $2=\([^ ]*\).*/\1/p" "$1" | head -1
}
wait_for() {  # wait_for FILE PATTERN PID: until FILE has PATTERN, or PID has exited
  until grep -q "$2" "$1" || ! kill -0 "$3" 2>/dev/null; do sleep 0.2; done
}
before=$(used_mib)
case ${1:-} in
context)
  "$probe" hold 2097152 >"$dir/probe.out" 2>&1 & pid=$!
  wait_for "$dir/probe.out" '^hold=' $pid
  during=$(used_mib)
  kill $pid; wait $pid 2>/dev/null
  cat "$dir/probe.out"
  grep -q '^hold=0' "$dir/probe.out" || exit 1
  echo "used_before_mib=$before used_during_mib=$during context_mib=$((during - before - 2))"
  ;;
fill)
  shift
  [ $# -gt 0 ] || { echo "physical_use.sh fill: give at least one BYTES:FRAMEWORK" >&2; exit 2; }
  pids=() limits=0
  for spec; do
    size=${spec%%:*}
    GPUFRAC_CHECK_HOLD_FILE=$dir/release "$gpufrac" "${launch[@]}" --gpu-memory "$size" -- \
      python3 tests/gpu/frameworks_check.py "${spec#*:}" "$size" >"$dir/${#pids[@]}.out" 2>&1 &
    pids+=($!)
    limits=$((limits + size))
  done
  for i in "${!pids[@]}"; do wait_for "$dir/$i.out" '^framework=' "${pids[i]}"; done
  during=$(used_mib)
  # pid, MiB of every process NVML lists on the GPU (none where it cannot see them, e.g. from
  # inside a container's PID namespace).
  apps=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -i 0)
  touch "$dir/release"
  ok=1 held=0
  for i in "${!pids[@]}"; do
    wait "${pids[i]}" || ok=0
    out=$dir/$i.out
    cat "$out"
    fw=$(sed -n 's/^framework=\([^ ]*\).*/\1/p' "$out")
    if [ "$fw" != jax ] && ! grep -q '^gpufrac: out of GPU memory' "$out"; then
      echo "workload $i: its out-of-memory error did not come from the limiter"; ok=0
    fi
    bytes=$(field "$out" held_from_driver) limit=$(field "$out" limit) pid=$(field "$out" pid)
    held=$((held + ${bytes:-0}))
    used=$(echo "$apps" | awk -F', *' -v p="$pid" '$1 == p {print $2}')
    if [ -z "$apps" ]; then
      echo "workload $i ($fw): nvidia-smi lists no process here (another PID namespace?);" \
        "only the GPU's total is checked"
      continue
    fi
    if ! [[ $used =~ ^[0-9]+$ ]]; then
      echo "workload $i ($fw): nvidia-smi does not show pid ${pid:-?}'s memory (${used:-absent})"
      ok=0
      continue
    fi
    echo "workload $i ($fw): pid $pid holds ${used} MiB of the GPU, limit $((limit >> 20)) MiB," \
      "outside its allocator $((used - (${bytes:-0} >> 20))) MiB"
    if [ $((used << 20)) -gt "$limit" ]; then
      echo "workload $i holds more of the GPU than its limit"; ok=0
    fi
  done
  grown_mib=$((during - before))
  echo "used_before_mib=$before used_during_mib=$during limits_mib=$((limits >> 20))" \
    "held_by_frameworks_mib=$((held >> 20))"
  if [ $((grown_mib << 20)) -gt $limits ]; then
    echo "the workloads hold $grown_mib MiB of the GPU, more than their limits together"; ok=0
  fi
  [ $ok -eq 1 ]
  ;;
*)
  echo "usage: physical_use.sh context | fill BYTES:FRAMEWORK..." >&2; exit 2
  ;;
esac
