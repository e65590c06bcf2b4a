#!/usr/bin/env bash
# Where other users can run the build's programs. Tests run jobs as other users (uid 65534), which
# must execute and preload what the build made; from a checkout inside a directory only its owner
# can enter (root's home is 0700 on Debian) they cannot. `make BUILD_DIR` then puts the programs
# and libraries such jobs use in a fresh 0755 directory under /tmp (hard links where the file
# system allows, else copies, in the build's layout) and records its path in
# BUILD_DIR/reachable-build, where the tests' harness looks (BuildPath); `remove BUILD_DIR` takes it
# away. Run by CTest as a fixture around every test (tests/CMakeLists.txt).
set -euo pipefail
mode=${1:?usage: reachable_build.sh make|remove BUILD_DIR}
build=$(cd "${2:?usage: reachable_build.sh make|remove BUILD_DIR}" && pwd -P)
record=$build/reachable-build
# What jobs of other users run, preload or have the service run for them.
files=(bin/gpufrac bin/gpufracd bin/gpufrac-shim bin/cuda_probe bin/mps_probe tests/gpu_load
       lib/libgpufrac.so lib/simgpu)

# Whether every directory from / down to the build lets other users through.
reachable() {
  local dir=$build
  while [ "$dir" != / ]; do
    [ "$(( 0$(stat -c %a "$dir") & 01 ))" -ne 0 ] || return 1
    dir=$(dirname "$dir")
  done
}

remove() {
  [ -f "$record" ] || return 0
  local mirror
  mirror=$(cat "$record")
  case $mirror in /tmp/gpufrac-build-*) rm -rf -- "$mirror" ;; esac
  rm -f -- "$record"
}

case $mode in
  make)
    remove
    reachable && exit 0
    mirror=$(mktemp -d /tmp/gpufrac-build-XXXXXX)
    chmod 0755 "$mirror"
    for f in "${files[@]}"; do
      [ -e "$build/$f" ] || continue
      mkdir -p -m 0755 "$mirror/$(dirname "$f")"
      cp -a -l "$build/$f" "$mirror/$f" 2>/dev/null ||
        { rm -rf -- "${mirror:?}/$f"; cp -a "$build/$f" "$mirror/$f"; }
    done
    echo "$mirror" >"$record"
    echo "The build is out of other users' reach; their jobs run the copies in $mirror."
    ;;
  remove)
    remove
    ;;
  *)
    echo "reachable_build.sh: unknown mode $mode (make or remove)" >&2
    exit 2
    ;;
esac
