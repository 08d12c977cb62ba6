#!/usr/bin/env bash
# The style check: every C++ file as clang-format (.clang-format) writes it, and no line of code,
# script or build file wider than 120 characters. Prints what differs and exits non-zero if
# anything does; `clang-format -i FILE` mends a file.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
mapfile -t sources < <(git ls-files '*.cpp' '*.h')
if ! clang-format --dry-run --Werror "${sources[@]}" 2> /tmp/seqgrad-format.$$; then
  sed -n '1,40p' /tmp/seqgrad-format.$$
  echo "clang-format would change the files above (clang-format -i FILE mends one)"
  status=1
fi
rm -f /tmp/seqgrad-format.$$
mapfile -t texts < <(git ls-files '*.cpp' '*.h' '*.sh' '*.py' 'CMakeLists.txt' '*/CMakeLists.txt' '*.cmake.in' '.ci/*')
wide=$(LC_ALL=C.UTF-8 grep -nE '^.{121,}$' "${texts[@]}")
if [ -n "$wide" ]; then
  echo "$wide" | cut -c1-160
  echo "lines wider than 120 characters"
  status=1
fi
[ $status -eq 0 ] && echo "style: ${#sources[@]} C++ files formatted, no line over 120 characters"
exit $status
