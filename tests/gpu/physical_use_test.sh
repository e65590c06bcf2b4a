#!/usr/bin/env bash
# Checks physical_use.sh fill's own logic without a GPU: fake gpufrac, python3 and nvidia-smi on
# PATH stand in for the launcher, the framework workloads and NVML. A fake workload "fakeN"
# holds N MiB of the (fake) GPU, and is listed by nvidia-smi unless it is "hiddenN".
# Run by the test suite (GpuChecksScript.PhysicalUseChecksEachWorkload).
set -u
cd "$(dirname "$0")/../.."
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/bin" "$fake/apps"
cat >"$fake/bin/gpufrac" <<'SH'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_DIR/launched"
while [ $# -gt 0 ] && [ "$1" != -- ]; do shift; done
shift
exec "$@"
SH
cat >"$fake/bin/python3" <<'SH'
#!/usr/bin/env bash
# python3 tests/gpu/frameworks_check.py FRAMEWORK LIMIT
fw=$2 limit=$3 mib=${2//[!0-9]/}
case $fw in
  fake*) echo "$$, $mib" >"$FAKE_DIR/apps/$$" ;;
  na*) echo "$$, [N/A]" >"$FAKE_DIR/apps/$$" ;;
esac
echo "gpufrac: out of GPU memory (fake)" >&2
echo "framework=$fw pid=$$ total=$limit limit=$limit held_from_driver=0 oom_ok=True"
until [ -e "$GPUFRAC_CHECK_HOLD_FILE" ]; do sleep 0.05; done
rm -f "$FAKE_DIR/apps/$$"
SH
cat >"$fake/bin/nvidia-smi" <<'SH'
#!/usr/bin/env bash
case "$*" in
  *memory.used*)
    cat "$FAKE_DIR"/apps/* 2>/dev/null | awk -F', ' '{s += $2 + 0} END {print s + 0}' ;;
  *compute-apps*) cat "$FAKE_DIR"/apps/* 2>/dev/null ;;
esac
SH
chmod +x "$fake/bin"/*
export PATH=$fake/bin:$PATH FAKE_DIR=$fake GPUFRAC=$fake/bin/gpufrac
fails=0
expect() {  # expect PASS|FAIL PATTERN BYTES:FRAMEWORK...
  local want=$1 pattern=$2; shift 2
  local out rc
  out=$(timeout 60 tests/gpu/physical_use.sh fill "$@" 2>&1); rc=$?
  local got=PASS; [ $rc -eq 0 ] || got=FAIL
  if [ "$got" != "$want" ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "physical_use.sh fill $*: expected $want with '$pattern', got $got (exit $rc):"
    echo "$out" | sed 's/^/  /'
    fails=$((fails + 1))
  fi
}
gib=$((1 << 30))
expect PASS "pid [0-9]* holds 900 MiB of the GPU, limit 2048 MiB" $gib:fake300 $((2 * gib)):fake900
# A workload that nvidia-smi does not list (or whose memory it does not show) while it lists
# others fails: its own use is unknown. With no process listed at all, only the total counts.
expect FAIL "does not show pid" $gib:hidden300 $gib:fake300
expect FAIL "does not show pid" $gib:na300
# One workload past its own limit fails the check although the two together are within theirs.
expect FAIL "workload 0 holds more of the GPU than its limit" $gib:fake1500 $((2 * gib)):fake100
expect FAIL "more than their limits together" $gib:fake1500
expect PASS "lists no process here" $gib:hidden300
# Run as node-service jobs: gpufrac gets the launcher's words, then the request.
GPUFRAC_LAUNCH="run --socket /tmp/x.sock" expect PASS "holds 300 MiB" $gib:fake300
if ! grep -q "^run --socket /tmp/x.sock --gpu-memory $gib -- python3 " "$fake/launched"; then
  echo "GPUFRAC_LAUNCH did not reach gpufrac:"; cat "$fake/launched"; fails=$((fails + 1))
fi
echo "failures=$fails"
[ $fails -eq 0 ]
