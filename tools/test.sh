#!/bin/bash
# Builds Quilt and runs every test. Installs missing Debian packages first
# (tools/setup.sh). The last line of output is "N passed, N failed"; the exit
# status is non-zero if anything failed to build or a test failed. The Bazel
# server is shut down at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh || exit 1
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT
bep=$(mktemp /tmp/quilt-bep.XXXXXX.json)
bazel build --config=ci //...
build_rc=$?
bazel test --config=ci --build_event_json_file="$bep" //...
test_rc=$?
python3 tools/bazel_test_summary.py "$bep"
summary_rc=$?
rm -f "$bep"
if [ $build_rc -ne 0 ] || [ $test_rc -ne 0 ] || [ $summary_rc -ne 0 ]; then
  exit 1
fi
exit 0
