#!/bin/bash
# Checks that every C++/CUDA source in the repository is formatted as
# .clang-format says. Fix with: git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format -i
set -u
command -v clang-format >/dev/null || { echo "FAIL: clang-format not installed"; exit 1; }
# The runfile is a symlink into the source tree: find the repository from it.
top=$(dirname "$(readlink -f "$1")")
cd "$top" || exit 1
files=$(git ls-files '*.cc' '*.h' '*.cu' 2>/dev/null || find src test bench -name '*.cc' -o -name '*.h' -o -name '*.cu')
bad=$(echo "$files" | xargs clang-format --dry-run 2>&1 | grep -o '^[^:]*:[0-9]*:[0-9]*: warning' | cut -d: -f1 | sort -u)
if [ -n "$bad" ]; then
  echo "FAIL: not clang-formatted:"; echo "$bad"; exit 1
fi
echo "PASS: $(echo "$files" | wc -l) files formatted"
