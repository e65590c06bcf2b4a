#!/usr/bin/env bash
# The test suite's check that it cleans up after itself: `snapshot FILE` records what /tmp and
# /dev/shm hold, and the cgroups gpufrac's workloads and the test Slurm clusters make, before the
# first test; `check FILE` (after the last) fails naming every entry the tests added and left. Run by CTest as the fixture around every test (tests/CMakeLists.txt).
set -euo pipefail
mode=${1:?usage: leftovers.sh snapshot|check FILE}
record=${2:?usage: leftovers.sh snapshot|check FILE}
list() {
  # gcc's own temporary files (cc??????.s and the like) belong to a build running beside the
  # tests, not to them.
  {
    find /tmp /dev/shm -mindepth 1 -maxdepth 1 -printf '%p\n' 2>/dev/null
    # Workload cgroups (gpufrac/<workload>, v1 devices or v2) and the Slurm test clusters' roots
    # (slurm_gf<...>, in each v1 controller).
    find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d \( -path '*/gpufrac/*' -o -name 'slurm_gf*' \) \
      -prune -printf '%p\n' 2>/dev/null
  } | grep -Ev '^/tmp/cc[A-Za-z0-9]{6}(\.|$)' | LC_ALL=C sort || true
}
case $mode in
  snapshot)
    list >"$record"
    ;;
  check)
    if [ ! -f "$record" ]; then
      echo "leftovers.sh: no snapshot at $record (the snapshot test did not run)" >&2
      exit 1
    fi
    left=$(LC_ALL=C comm -13 "$record" <(list))
    if [ -n "$left" ]; then
      echo "The tests left $(printf '%s\n' "$left" | wc -l) entries in /tmp, /dev/shm and the" \
        "cgroup trees (every test must remove what it makes):"
      printf '%s\n' "$left" | sed 's/^/  /'
      exit 1
    fi
    echo "Nothing left in /tmp, /dev/shm or the cgroup trees by the tests."
    ;;
  *)
    echo "leftovers.sh: unknown mode $mode (snapshot or check)" >&2
    exit 2
    ;;
esac
