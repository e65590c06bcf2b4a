#!/usr/bin/env bash
# A real single-node Slurm (Debian's munged, slurmctld and slurmd) in one directory, on loopback,
# with simulated GPUs declared in gres.conf against device nodes made here. Used by
# tests/integration/slurm_test.cc and by hand:
#   cluster.sh start DIR GPUS UNITS_PER_GPU PLUGIN LIBGPUFRAC SIMGPU_DIR JOB_SUBMIT_LUA
#   cluster.sh stop DIR
# The GPUs are shared through Slurm's `shard` GRES (UNITS_PER_GPU shards each), or with
# GPUFRAC_SLURM_SHARING=mps through its `mps` GRES instead (UNITS_PER_GPU MPS units each, 100 as
# Slurm's documentation has it). Not both: Slurm 22.05 accepts both on one node, but then sets
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from the node's shard count (312 for mps:25 with 8 shards).
# `start` writes DIR/env (SLURM_CONF and the simulated machine's variables) for clients, and
# waits until the node is idle. Needs root (slurmd runs jobs as their users).
set -euo pipefail

# The node's name, from DIR's: its own for each cluster, so that Slurm's cgroups for it
# (slurm_<node>, on a Debian build for several slurmd) are not another cluster's on this machine.
node_name() {
  local base
  base=$(basename "$1" | tr -cd '[:alnum:]')
  echo "gf${base: -6}"
}

stop() {
  local dir=$1
  for name in slurmd slurmctld munged; do
    local pidfile="$dir/$name.pid"
    [ -s "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
  # Slurm's cgroup v1 root for the node, empty once its daemons and jobs are gone.
  local root
  root=/sys/fs/cgroup/devices/slurm_$(node_name "$dir")
  [ -d "$root" ] && find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
  return 0
}

# A port in 20000..39999 that no socket of this machine is bound to (from /proc/net/tcp*).
free_port() {
  local port used
  used=$(awk 'NR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  while :; do
    port=$((20000 + RANDOM % 20000))
    grep -qx "$(printf '%04X' "$port")" <<<"$used" || break
  done
  echo "$port"
}

start() {
  local dir=$1 gpus=$2 units=$3 plugin=$4 limiter=$5 simgpu=$6 lua=$7
  local sharing=${GPUFRAC_SLURM_SHARING:-shard}
  case "$sharing" in
    shard | mps) ;;
    *) echo "cluster.sh: GPUFRAC_SLURM_SHARING is shard or mps, not \"$sharing\"" >&2; return 2 ;;
  esac
  mkdir -p "$dir"/{dev,state,spool,log,gpufrac}
  chmod 0755 "$dir"
  # The GPUs' device nodes: NVIDIA's character major 195, minor = index.
  for ((i = 0; i < gpus; i++)); do
    [ -e "$dir/dev/nvidia$i" ] || mknod -m 0666 "$dir/dev/nvidia$i" c 195 "$i"
  done
  # munged with its own key and socket.
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge.key"
  munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed"
  # Two ports on loopback that nothing listens on, one for each daemon.
  local ctld_port slurmd_port
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
  local host node
  host=$(hostname -s)
  node=$(node_name "$dir")
  # Where the host mounts cgroup v1's devices controller (GPUFRAC_SLURM_CGROUP=0 turns it off),
  # steps run in Slurm's cgroups with ConstrainDevices=yes: a step opens only its GPUs' nodes.
  local task_plugin=task/none
  local cgroup=${GPUFRAC_SLURM_CGROUP:-auto}
  if [ "$cgroup" = auto ]; then
    cgroup=0
    [ -e /sys/fs/cgroup/devices/devices.allow ] && cgroup=1
  fi
  if [ "$cgroup" = 1 ]; then
    task_plugin=task/cgroup
    printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainDevices=yes\n' >"$dir/cgroup.conf"
  fi
  local last=$((gpus - 1))
  # The simulated machine's GPUs: every process of a job finds them through this environment.
  local sim_config="${gpus}xA100-40GB"
  local sim_ns="slurm$$"
  cat >"$dir/slurm.conf" <<CONF
ClusterName=gpufractest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=debug
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=2
MinJobAge=2
InactiveLimit=0
SchedulerType=sched/builtin
PlugStackConfig=$dir/plugstack.conf
# Every job an extern step, into which pam_slurm_adopt would put its user's ssh sessions.
PrologFlags=contain
JobSubmitPlugins=lua
GresTypes=gpu,$sharing
NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 Gres=gpu:$gpus,$sharing:$((gpus * units)) State=UNKNOWN
PartitionName=main Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  {
    echo "NodeName=$node Name=gpu File=$dir/dev/nvidia[0-$last]"
    for ((i = 0; i < gpus; i++)); do
      echo "NodeName=$node Name=$sharing Count=$units File=$dir/dev/nvidia$i"
    done
  } >"$dir/gres.conf"
  # The memory a shard stands for: the simulated A100-40GB's 40 GiB over its UNITS_PER_GPU shards,
  # as the job-submit rule's table below says.
  local shard_memory=$((40 * 1024 * 1024 * 1024 / units))
  [ "$plugin" = none ] && : >"$dir/plugstack.conf" || echo "required $plugin state_dir=$dir/gpufrac limiter=$limiter shard_memory=$shard_memory" >"$dir/plugstack.conf"
  # The rule books what the GPUs declare: its GRES, the memory a shard stands for and the count
  # per GPU (UNITS_PER_GPU).
  sed -e "s/^GPUFRAC_GRES = \"shard\"\$/GPUFRAC_GRES = \"$sharing\"/" \
    -e "/^  { name = \"A100-40GB\"/s/shard_memory = \"[^\"]*\", shards = [0-9]*/shard_memory = \"$shard_memory\", shards = $units/" \
    "$lua" >"$dir/job_submit.lua"
  if ! grep -qx "GPUFRAC_GRES = \"$sharing\"" "$dir/job_submit.lua" ||
    ! grep -q "shard_memory = \"$shard_memory\", shards = $units }" "$dir/job_submit.lua"; then
    echo "cluster.sh: $lua does not have the GPUFRAC_GRES and A100-40GB lines this edits" >&2
    return 1
  fi
  cat >"$dir/env" <<ENV
export SLURM_CONF=$dir/slurm.conf
export LD_LIBRARY_PATH=$simgpu
export SIMGPU_CONFIG=$sim_config
export SIMGPU_NAMESPACE=$sim_ns
ENV
  # The daemons see the simulated machine too (slurmstepd's plugin asks its NVML for UUIDs).
  (
    # shellcheck disable=SC1091
    . "$dir/env"
    slurmctld -c -f "$dir/slurm.conf"
    slurmd -N "$node" -f "$dir/slurm.conf"
  )
  export SLURM_CONF=$dir/slurm.conf
  for _ in $(seq 150); do
    if sinfo -h -N -o '%t' 2>/dev/null | grep -qx idle; then return 0; fi
    sleep 0.2
  done
  echo "cluster.sh: the node did not become idle; see $dir/log" >&2
  sinfo -N >&2 || true
  return 1
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: [GPUFRAC_SLURM_SHARING=shard|mps] cluster.sh start DIR GPUS UNITS PLUGIN LIBGPUFRAC SIMGPU_DIR LUA | stop DIR" >&2; exit 2 ;;
esac
