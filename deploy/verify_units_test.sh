#!/bin/bash
# Checks the systemd units with systemd-analyze verify. The units' ExecStart
# paths are the install locations, which do not exist on a build machine, so
# the check runs on copies pointing at the built binaries; everything else
# (directives, sections, values) is verified as shipped.
set -u
if ! command -v systemd-analyze >/dev/null; then
  echo "FAIL: systemd-analyze not found (package systemd)"; exit 1
fi
coordinator=$(readlink -f "$1"); worker=$(readlink -f "$2"); shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
status=0
for unit in "$@"; do
  name=$(basename "$unit")
  sed -e "s|/usr/local/bin/quilt-coordinator|$coordinator|" \
      -e "s|/usr/local/bin/quilt-worker|$worker|" "$unit" > "$dir/$name"
  grep -q '^Type=notify' "$dir/$name" || { echo "FAIL: $name is not Type=notify"; status=1; }
  # Only this unit's own findings count (the build machine's other units may be odd).
  out=$(systemd-analyze verify --man=no "$dir/$name" 2>&1 | grep -F "$name")
  if [ -n "$out" ]; then
    echo "FAIL: $name:"; echo "$out"; status=1
  else
    echo "ok: $name"
  fi
done
exit $status
