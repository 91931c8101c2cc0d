#!/usr/bin/env bash
# scripts/check-install.sh [BUILD_DIR]: checks libflowtune as a consumer
# sees it. Builds the two library targets in BUILD_DIR (default
# build/release), installs components libflowtune and libflowtune_dev (the
# runtime and the development package's files) into a temporary prefix,
# checks that libflowtune.so exports only ft_* symbols, then builds
# examples/explicit_api against the installed package only: with CMake
# (find_package; shared and static) and with pkg-config (shared and
# --static), and runs each build. One line per step; at the first failure it
# prints that step's output and exits 1. Removes the prefix on exit.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
example=$top/examples/explicit_api

if [ $# -gt 0 ]; then
  build=$(cd "$1" && pwd)
  build_cmd=(cmake --build "$build" --target flowtune flowtune_static)
else
  build=$top/build/release
  build_cmd=("$top/scripts/build.sh" release flowtune flowtune_static)
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

# step NAME CMD...: runs CMD with its output in a log, one line for the result.
step() {
  local name=$1
  shift
  if "$@" >"$tmp/log" 2>&1; then
    echo "check-install: $name: ok"
  else
    echo "check-install: $name: FAILED" >&2
    cat "$tmp/log" >&2
    exit 1
  fi
}

# The exported dynamic symbols, one per line: the C API only.
exports_only_c_api() {
  local so=$1 all others
  all=$(nm -D --defined-only "$so" | awk '{print $3}')
  others=$(grep -v '^ft_' <<<"$all" || true)
  echo "$(wc -l <<<"$all") exported symbols"
  if [ -n "$others" ]; then
    echo "not part of the C API:" && echo "$others"
    return 1
  fi
}

# A program that links libflowtune statically has no libflowtune.so NEEDED.
not_linked_to_so() {
  ! readelf -d "$1" | grep -q 'NEEDED.*libflowtune'
}

# Configures and builds the example with CMake against the prefix only, and
# checks that find_package took the package from there.
cmake_example() {
  local dir=$1
  shift
  cmake -S "$example" -B "$dir" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "$@" &&
    grep -q "^flowtune_DIR:PATH=$prefix/" "$dir/CMakeCache.txt" &&
    cmake --build "$dir"
}

step "build flowtune and flowtune_static in $build" "${build_cmd[@]}"
step "install $build (component libflowtune) into a temporary prefix" \
  cmake --install "$build" --prefix "$prefix" --component libflowtune
step "install $build (component libflowtune_dev)" \
  cmake --install "$build" --prefix "$prefix" --component libflowtune_dev
pcfile=$(find "$prefix" -name flowtune.pc)
[ -n "$pcfile" ] || { echo "check-install: flowtune.pc was not installed" >&2; exit 1; }
pcdir=$(dirname "$pcfile")
libdir=$(dirname "$pcdir")
step "libflowtune.so exports only ft_* ($(nm -D --defined-only "$libdir/libflowtune.so" | wc -l) symbols)" \
  exports_only_c_api "$libdir/libflowtune.so"

step "cmake: find_package(flowtune), flowtune::flowtune: build" cmake_example "$tmp/cmake-shared"
step "cmake: flowtune::flowtune: run" "$tmp/cmake-shared/explicit_api"
step "cmake: flowtune::flowtune_static: build" cmake_example "$tmp/cmake-static" \
  -DEXPLICIT_API_STATIC=ON
step "cmake: flowtune::flowtune_static: no libflowtune.so needed" \
  not_linked_to_so "$tmp/cmake-static/explicit_api"
step "cmake: flowtune::flowtune_static: run" "$tmp/cmake-static/explicit_api"

export PKG_CONFIG_PATH=$pcdir
# shellcheck disable=SC2046  # pkg-config output is a list of flags
step "pkg-config: cc \$(pkg-config --cflags --libs flowtune): build" \
  cc -Wall -Wextra -o "$tmp/pc-shared" "$example/explicit_api.c" \
  $(pkg-config --cflags --libs flowtune)
step "pkg-config: shared: run" env LD_LIBRARY_PATH="$libdir" "$tmp/pc-shared"
# --static adds the private dependencies; -l:libflowtune.a makes the linker
# take the archive where plain -lflowtune would prefer the .so beside it.
static_flags=$(pkg-config --static --cflags --libs flowtune)
# shellcheck disable=SC2086
step "pkg-config: cc \$(pkg-config --static --cflags --libs flowtune): build" \
  cc -Wall -Wextra -o "$tmp/pc-static" "$example/explicit_api.c" \
  ${static_flags/-lflowtune/-l:libflowtune.a}
step "pkg-config: static: no libflowtune.so needed" not_linked_to_so "$tmp/pc-static"
step "pkg-config: static: run" "$tmp/pc-static"
echo "check-install: all steps passed"
