#!/usr/bin/env bash
# Installs every build and test dependency of Flowtune from Debian 12 packages.
# Called by CMake when a dependency is missing (FT_AUTO_DEPS=ON) and by the
# quick-start scripts; safe to run again (apt-get skips what is installed).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  liburing-dev libzmq3-dev cppzmq-dev capnproto libcapnp-dev
  libtbb-dev libgtest-dev libgmock-dev libbenchmark-dev
  # Open MPI: the engine across processes (allocator/mpi, mpirun).
  openmpi-bin libopenmpi-dev
  # JSON for the offline solver and benchmark output: a well-kept header-only library.
  nlohmann-json3-dev
  # TOML for the allocator's topology file: a maintained, spec-complete parser
  # with line/column errors, which a hand-written one would not match.
  libtomlplusplus-dev
  # clang + its runtime: libFuzzer targets and sanitizer runtimes.
  clang libclang-rt-14-dev
  # The linters scripts/lint.sh runs in CI: formatting and function size.
  clang-format clang-tidy
  python3
  # PNG plots from the simulator's and benchmarks' JSON.
  python3-matplotlib
  # ns-3.37 and the GSL it links: the packet-level simulator (allocator/packet).
  libns3-dev libgsl-dev
  # Real programs the preload shim is tested with (and trickle, the baseline
  # of the shim's benchmark); the JVM for the Java NIO test.
  iperf3 curl trickle openjdk-17-jdk-headless
  # nginx: static files by sendfile(), the rest by writev() (the shim's tests).
  nginx-light
  # A small-request server and its load generator: what the shim costs
  # mice (bench/redis_bench.py).
  redis-server redis-tools
  # The end-to-end testbed (bench/testbed, bench/e2e): namespaces and tc,
  # ping for RTT under load.
  iproute2 iputils-ping
  # The chaos suite (bench/chaos): nftables drops the control path, libfaketime
  # steps the allocator's clocks.
  nftables faketime
  # Metrics: prometheus-cpp's pull exposer serves the daemons' /metrics; the
  # Prometheus server and promtool check the exposition (tests/ops).
  prometheus-cpp-dev prometheus
  # Packages and units (packaging/): CPack's dpkg-shlibdeps (dpkg-dev),
  # lintian on the .debs, systemd-analyze verify on the units.
  dpkg-dev lintian systemd
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run this script as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
