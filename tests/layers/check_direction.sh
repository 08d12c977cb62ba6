#!/usr/bin/env bash
# The layers' include direction: with one layer's include directories (as its CMake target compiles
# its sources), a header of that layer compiles and a header of a layer it must not use (the layer
# above; for inference, training) does not.
#   check_direction.sh COMPILER OWN_HEADER HEADER_ABOVE DIR1:DIR2:...
set -u
compiler=$1 own=$2 above=$3
includes=()
IFS=: read -r -a dirs <<< "$4"
for dir in "${dirs[@]}"; do includes+=("-I$dir"); done
set -- "${includes[@]}"
fail() { echo "FAILED: $*"; exit 1; }
out=$(echo "#include \"$own\"" | "$compiler" -std=c++20 -fsyntax-only -x c++ "$@" - 2>&1) ||
  fail "$own does not compile with its own layer's include directories: $out"
out=$(echo "#include \"$above\"" | "$compiler" -std=c++20 -fsyntax-only -x c++ "$@" - 2>&1) &&
  fail "$above, out of this layer's reach, compiles with these include directories"
# GCC says "HEADER: No such file or directory", clang "'HEADER' file not found".
echo "$out" | grep -q -e "${above}: No such file" -e "'${above}' file not found" ||
  fail "$above was refused for another reason: $out"
echo "ok: $own compiles, $above is out of reach"
