#!/usr/bin/env bash
# Packs gpufrac, gpufracd (with its gpufrac-shim), cuda_probe, limiter_bench and libgpufrac.so
# from a build into one folder that runs on another x86-64 Linux machine with a newer glibc but
# without this machine's Debian packages (a GPU machine with no package registry). The libraries
# the programs link beyond glibc and the C++ runtime go to DEST/deps, and their RPATH (not RUNPATH, so that those libraries' own
# dependencies are found there too) points at them. Nothing is set in the environment, so the
# workloads they start load only their own libraries. Needs patchelf.
#
# usage: tests/gpu/pack_for_device.sh [BUILD_DIR] [DEST]      (defaults: build .gpu)
# then, there: GPUFRAC=DEST/bin/gpufrac tests/gpu/run_real_gpu_checks.sh, or
#   GPUFRAC_BENCH_DRIVER=real GPUFRAC_BUILD_DIR=DEST bench/run_limiter_bench.sh
set -euo pipefail
build=${1:-build}
dest=${2:-.gpu}
if ! command -v patchelf >/dev/null; then
  echo "pack_for_device.sh: install patchelf first (apt-get install patchelf)" >&2
  exit 2
fi
programs=(gpufrac gpufracd gpufrac-shim cuda_probe limiter_bench)
for f in "${programs[@]/#/$build/bin/}" "$build/lib/libgpufrac.so"; do
  [ -f "$f" ] || { echo "pack_for_device.sh: $f is missing: build first" >&2; exit 2; }
done
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/deps"
cp "${programs[@]/#/$build/bin/}" "$dest/bin/"
cp "$build/lib/libgpufrac.so" "$dest/lib/"
strip --strip-debug "$dest"/bin/* "$dest"/lib/*  # a device call carries at most 64 MiB
linked=(gpufrac gpufracd limiter_bench)  # the programs that link more than glibc and C++
if ldd "${linked[@]/#/$build/bin/}" | grep 'not found'; then
  echo "pack_for_device.sh: the libraries above are missing here" >&2
  exit 2
fi
# The C library, the loader and the C++ runtime come from the target machine (newer there).
ldd "${linked[@]/#/$build/bin/}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so' |
  sort -u | while read -r lib; do cp -L "$lib" "$dest/deps/"; done
for exe in "${linked[@]}"; do
  patchelf --force-rpath --set-rpath '$ORIGIN/../deps' "$dest/bin/$exe"
done
echo "packed $(ls "$dest/deps" | wc -l) libraries, $(du -sh "$dest" | cut -f1) in $dest"
