#!/usr/bin/env bash
# The test suite's check that it cleans up after itself: `snapshot FILE` records what /tmp and
# /dev/shm hold before the first test, `check FILE` (after the last) fails naming every entry the
# tests added and left there. Run by CTest as the fixture around every test (tests/CMakeLists.txt).
set -euo pipefail
mode=${1:?usage: leftovers.sh snapshot|check FILE}
record=${2:?usage: leftovers.sh snapshot|check FILE}
list() {
  # gcc's own temporary files (cc??????.s and the like) belong to a build running beside the
  # tests, not to them.
  find /tmp /dev/shm -mindepth 1 -maxdepth 1 -printf '%p\n' 2>/dev/null |
    grep -Ev '^/tmp/cc[A-Za-z0-9]{6}(\.|$)' | LC_ALL=C sort || true
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
      echo "The tests left $(printf '%s\n' "$left" | wc -l) entries in /tmp and /dev/shm (every test" \
        "must remove what it makes):"
      printf '%s\n' "$left" | sed 's/^/  /'
      exit 1
    fi
    echo "Nothing left in /tmp or /dev/shm by the tests."
    ;;
  *)
    echo "leftovers.sh: unknown mode $mode (snapshot or check)" >&2
    exit 2
    ;;
esac
