#!/bin/bash
# Runs quilt-cuda-probe: NCCL must report a version (the library linked and
# loads); on a machine with a GPU the kernel must run and be correct.
set -u
probe="$1"
out=$("$probe")
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: probe exited $rc"; exit 1; }
echo "$out" | grep -Eq '^nccl_version=[1-9][0-9]+ nccl_status=no error' \
  || { echo "FAIL: NCCL did not report a version"; exit 1; }
if echo "$out" | grep -q '^gpus=0'; then
  echo "SKIP: no GPU on this machine; the kernel was compiled and linked but not run"
else
  echo "$out" | grep -q '^kernel=ok' || { echo "FAIL: kernel did not run correctly"; exit 1; }
fi
echo PASS
