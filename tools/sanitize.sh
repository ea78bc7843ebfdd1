#!/bin/bash
# Runs tests built with AddressSanitizer: every process they start (the
# coordinator, workers, executors, quiltctl) is instrumented too, and any
# report fails the run. Builds into an output directory of its own
# (bazel-out/k8-opt-asan), so the normal build stays cached.
#
#   tools/sanitize.sh [TARGET...]   (default: every test, //...)
#
# Reports go to $QUILT_ASAN_DIR (default: a new directory under /tmp), one
# file per process that found an error. Leak checking is off: daemons are
# stopped by signals, which ends them before any leak report. UCX's memory
# hooks are off, as they would patch the sanitizer's allocator.
set -uo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(//...)
fi
reports=${QUILT_ASAN_DIR:-$(mktemp -d /tmp/quilt-asan.XXXXXX)}
mkdir -p "$reports"
flags=(--platform_suffix=-asan --copt=-fsanitize=address --copt=-fno-omit-frame-pointer
  --copt=-g --linkopt=-fsanitize=address --test_timeout=1200
  --test_env=ASAN_OPTIONS=detect_leaks=0:log_path="$reports"/asan
  --test_env=UCX_MEM_MALLOC_HOOKS=no --test_env=UCX_MEM_EVENTS=no)
bazel test "${flags[@]}" "${targets[@]}"
rc=$?
found=$(find "$reports" -name 'asan*' -type f | wc -l)
if [ "$found" -gt 0 ]; then
  echo "sanitize: $found report(s) in $reports:"
  find "$reports" -name 'asan*' -type f -exec head -n 30 {} \;
  exit 1
fi
echo "sanitize: no AddressSanitizer reports"
exit $rc
