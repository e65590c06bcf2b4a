#!/usr/bin/env bash
# Real-GPU checks of the limiter (needs an NVIDIA GPU, an existing build in ./build and PyTorch,
# CuPy and JAX): runs each framework under `gpufrac exec`, checks nvidia-smi inside the workload
# shows the limit, and runs two workloads on one GPU at once. Prints PASS/FAIL lines; record the
# output in docs/real-gpu-checks.md.
#
# --sim runs the same script on the simulated GPU (GPUFRAC_SIMGPU_DIR, default next to the
# gpufrac binary), skipping the checks that need nvidia-smi or a framework: the test suite does
# that, so that the script's own plumbing is known to work before a GPU machine's time is spent.
set -u
cd "$(dirname "$0")/../.."
gpufrac=${GPUFRAC:-$PWD/build/bin/gpufrac}
probe=${PROBE:-$(dirname "$gpufrac")/cuda_probe}
export GPUFRAC=$gpufrac PROBE=$probe  # for physical_use.sh
limit=$((4 << 30))
check_timeout=${CHECK_TIMEOUT:-240}  # seconds: a hung check fails (exit 124), the rest go on
fails=0
sim=0
[ "${1:-}" = --sim ] && sim=1
skip=" ${GPU_CHECKS_SKIP:-} "  # names of checks not to run, e.g. "compute mps" (run on their own)
check() {  # check NAME COMMAND... (a command that exits 77 could not check here: SKIP)
  local name=$1; shift
  if [[ "$skip" == *" $name "* ]]; then echo "SKIP $name (GPU_CHECKS_SKIP)"; return; fi
  local out
  out=$(timeout -k 5 "$check_timeout" "$@" 2>&1); local rc=$?
  echo "$out" | sed "s/^/  [$name] /"
  if [ $rc -eq 0 ]; then echo "PASS $name"
  elif [ $rc -eq 77 ]; then echo "SKIP $name (nothing to check it with here)"
  else echo "FAIL $name (exit $rc)"; fails=$((fails + 1)); fi
}
real_gpu_check() {  # like check, for what only a real GPU with its tools can run
  if [ $sim -eq 1 ]; then echo "SKIP $1 (simulated GPU)"; else check "$@"; fi
}
if [ $sim -eq 1 ]; then
  lib=$(cd "$(dirname "$gpufrac")/.." && pwd)/lib/simgpu
  export LD_LIBRARY_PATH=${GPUFRAC_SIMGPU_DIR:-$lib} SIMGPU_NAMESPACE=gpu-checks-$$ \
    SIMGPU_CONFIG=1xH100-80GB
  # A home of its own: `gpufrac exec` keeps its compute arbiters in a directory of /dev/shm that
  # the home's state directory records, and the suite must leave neither behind.
  HOME=$(mktemp -d /tmp/gpu-checks-home.XXXXXX)
  export HOME
  trap 'arbiters=$(head -n1 "$HOME/.local/state/gpufrac/exec-arbiters" 2>/dev/null)
        case "$arbiters" in /dev/shm/gpufrac-*) rm -rf "$arbiters" ;; esac
        rm -rf "$HOME" /dev/shm/simgpu.gpu-checks-$$' EXIT
else
  nvidia-smi -L || { echo "no NVIDIA GPU"; exit 2; }
fi
# The driver's cuGetProcAddress must hand out addresses the limiter recognises (on a CUDA 13
# driver, cuCtxSynchronize's too: CUDA 13's runtime waits through it), and every access path must
# see the limit (the simulated driver's tests, on the real one).
check resolve bash -c "out=\$('$gpufrac' exec --gpu-memory 4G -- '$probe' resolve); echo \"\$out\"; \
  echo \"\$out\" | grep -q 'gpa.cuMemAlloc.12000.default=cuMemAlloc_v2@libgpufrac.so' && \
  echo \"\$out\" | grep -q 'gpa.cuMemAllocAsync.12000.ptsz=cuMemAllocAsync_ptsz@libgpufrac.so' && \
  { ! echo \"\$out\" | grep -q 'gpa.cuCtxSynchronize.13000.default.rc=0' || \
    echo \"\$out\" | grep -q 'gpa.cuCtxSynchronize.13000.default=cuCtxSynchronize_v2@libgpufrac.so'; }"
for path in linked dlsym procaddr; do
  check "probe-$path" bash -c "out=\$('$gpufrac' exec --gpu-memory 4G -- '$probe' --path $path info); \
    echo \"\$out\"; echo \"\$out\" | grep -q 'total=$limit device_total=$limit'"
done
for kind in mem pitch managed async pool vmm vmmmap array mipmap ctx; do
  check "charge-$kind" bash -c "out=\$('$gpufrac' exec --gpu-memory 4G -- '$probe' alloc $kind 67108864); \
    echo \"\$out\"; echo \"\$out\" | grep -q 'alloc=0 .* free=0 after=0'"
done
# A process killed with SIGKILL while holding 3 GiB of a 4 GiB limit leaves no charge behind: the
# next process of the workload gets the same 3 GiB.
check sigkill-reclaim "$gpufrac" exec --gpu-memory 4G -- bash -c '
  out=$(mktemp); "$1" hold 3221225472 >"$out" & pid=$!
  until grep -q "^hold=" "$out" || ! kill -0 $pid 2>/dev/null; do sleep 0.1; done
  cat "$out"; grep -q "^hold=0" "$out"; held=$?; rm -f "$out"
  [ $held -eq 0 ] || exit 1
  kill -9 $pid; wait $pid
  "$1" alloc mem 3221225472 | tee /dev/stderr | grep -q "^alloc=0 "' reclaim "$probe"
# What a bare CUDA context really costs (the limiter charges gpu::ContextChargeBytes).
real_gpu_check context-memory tests/gpu/physical_use.sh context
# Each framework under a 4 GiB limit sees that total, fills it and gets its own out-of-memory
# error, while the GPU's physical use (read outside the workload) stays within the limit.
for fw in torch cupy jax jax-platform; do
  real_gpu_check "$fw" tests/gpu/physical_use.sh fill $limit:$fw
done
real_gpu_check nvidia-smi bash -c "total=\$('$gpufrac' exec --gpu-memory 4G -- nvidia-smi \
  --query-gpu=memory.total --format=csv,noheader,nounits | head -1); echo total_mib=\$total; \
  [ \"\$total\" = 4096 ]"
# Two workloads on one GPU at the same time, each filling and holding its own limit.
real_gpu_check two-workloads tests/gpu/physical_use.sh fill $((3 << 30)):torch $((5 << 30)):cupy
# The same through the node service: gpufracd's jobs under `gpufrac run`.
real_gpu_check service tests/gpu/service_check.sh
# Compute shares: PyTorch matmul loops as the service's jobs at 0.25/0.75 and strict 0.5/0.5,
# against the same loops without gpufrac, and a training step's time under the limiter.
real_gpu_check compute tests/gpu/compute_check.sh
# MPS: clients at 25%/75% of the SMs and a pinned-memory limit, with a control daemon of its own
# (an ordinary process: no GPU setting changes), then the same as gpufracd's jobs in MPS mode.
real_gpu_check mps tests/gpu/mps_check.sh
echo "failures=$fails"
[ $fails -eq 0 ]
