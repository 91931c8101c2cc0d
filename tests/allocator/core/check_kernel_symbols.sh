#!/usr/bin/env bash
# check_kernel_symbols.sh NM OBJECT...: the one-definition-rule check for the
# engine kernels (allocator/core/src/kernels_impl.h is compiled with and
# without AVX-512). Among the objects, kernels_avx512*.o must define no weak
# or unique symbol (the linker could substitute one for a baseline copy of
# the same name, or the other way round), and it may share no weak symbol
# with kernels_generic*.o. Exit 77 (skipped) when there is no AVX-512 object.
set -euo pipefail
nm=${1:?usage: check_kernel_symbols.sh NM OBJECT...}
shift
avx="" generic=""
for o in "$@"; do
  case "$(basename "$o")" in
    kernels_avx512*.o) avx=$o ;;
    kernels_generic*.o) generic=$o ;;
  esac
done
if [ -z "$avx" ]; then
  echo "no AVX-512 kernel object (the compiler or FT_AVX512 left it out): skipped"
  exit 77
fi
[ -n "$generic" ] || { echo "no generic kernel object among: $*" >&2; exit 1; }

# Defined weak (W, V) and unique (u) symbols, mangled. Left out: the
# personality routine's reference, data the compiler emits for any exception
# table, and type_info objects and names (_ZTI*, _ZTS*: UBSan's function
# check emits them for function types); they are data that no instruction
# set changes, so one copy serves both objects.
weak() {
  "$nm" --defined-only "$1" | awk '$2 ~ /^[WVu]$/ {print $3}' |
    grep -v -e '^DW\.ref\.__gxx_personality_v0$' -e '^_ZTI' -e '^_ZTS' | sort -u || true
}

demangle() { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }

fail=0
avx_weak=$(weak "$avx")
if [ -n "$avx_weak" ]; then
  echo "FAIL: $avx defines weak symbols (each could be merged with another object's copy):"
  echo "$avx_weak" | demangle | sed 's/^/  /'
  fail=1
fi
both=$(comm -12 <(echo "$avx_weak") <(weak "$generic"))
if [ -n "$both" ]; then
  echo "FAIL: weak symbols defined by both kernel objects (the linker keeps one copy for both):"
  echo "$both" | demangle | sed 's/^/  /'
  fail=1
fi
[ $fail -eq 0 ] && echo "ok: $(basename "$avx") defines no weak symbols"
exit $fail
