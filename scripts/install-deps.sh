#!/usr/bin/env bash
# Installs the Debian 12 packages gpufrac needs (idempotent; needs root or sudo).
#   scripts/install-deps.sh          what the full build and the test suite need
#   scripts/install-deps.sh demo     only what ./scripts/demo builds and runs with
set -euo pipefail
# The build of the command, the service, the limiter and the simulated GPU.
pkgs=(cmake make g++ pkg-config binutils libgtest-dev libgmock-dev libbenchmark-dev
      libcli11-dev nlohmann-json3-dev libcairo2-dev fonts-dejavu-core
      libyaml-cpp-dev libsqlite3-dev libmicrohttpd-dev libcpp-httplib-dev libssl-dev zlib1g-dev
      libbrotli-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler openssl)
case "${1:-all}" in
  demo) ;;
  all)
    pkgs+=(strace                       # a limiter test traces the hot path's system calls
           python3                      # suite.no_long_functions runs scripts/long-functions
           clang-14 libclang-rt-14-dev  # clang and libFuzzer: the fuzz targets (tests/fuzz/)
           libslurm-dev slurmctld slurmd slurm-client munge)  # the Slurm plugin and its real-Slurm test
    ;;
  *)
    echo "install-deps.sh: unknown set \"$1\" (give demo, or nothing for everything)" >&2
    exit 2
    ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "gpufrac: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
