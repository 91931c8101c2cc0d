#!/usr/bin/env bash
# scripts/package.sh [BUILD_DIR]: the Debian packages (packaging/), from
# the release build (default build/release): builds the packaged targets,
# runs CPack into BUILD_DIR/packages, then lintian on each .deb, which must
# report no error. Prints the packages' paths.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build/release}
"$top/scripts/build.sh" release flowtune-allocator flowtune-ctl flowtune flowtune_static flowtune_preload \
  flowtune-run flowtune-pacer flowtune-relay flowtune-witness flowtune-agent > /dev/null
rm -rf "$build/packages"
cpack --config "$build/CPackConfig.cmake" -B "$build/packages" > "$build/cpack.log" 2>&1 ||
  { tail -n 30 "$build/cpack.log"; exit 1; }
debs=("$build"/packages/*.deb)
[ ${#debs[@]} -eq 8 ] || { echo "package: expected 8 packages, got ${#debs[@]}: ${debs[*]}" >&2; exit 1; }
if command -v lintian > /dev/null; then
  # Errors fail (and are printed); warnings are counted, kept in the log.
  lintian --fail-on error "${debs[@]}" > "$build/lintian.log" 2>&1 ||
    { grep '^E:' "$build/lintian.log" >&2; exit 1; }
  echo "package: lintian: 0 errors, $(grep -c '^W:' "$build/lintian.log") warnings ($build/lintian.log)" >&2
else
  echo "package: lintian is not installed: not checked" >&2
fi
printf '%s\n' "${debs[@]}"
