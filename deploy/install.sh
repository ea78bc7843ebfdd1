#!/bin/bash
# Installs Quilt's daemons as systemd services on this machine (run as root
# from a built tree: tools/setup.sh && bazel build //src/...):
#   deploy/install.sh coordinator   # the cluster's coordinator
#   deploy/install.sh worker        # a worker on this node
# Binaries go to /usr/local/bin, units to /etc/systemd/system, the quilt user
# is created with systemd-sysusers, the checkpoint directory
# /var/lib/quilt/checkpoints is created, and an example config is put in
# /etc/quilt/ unless one is there already. The service is enabled and
# started, or restarted when it runs already (an upgrade: jobs outlive a
# coordinator restart; a restarted worker fails the jobs it ran).
set -euo pipefail
role=${1:-}
case "$role" in
  coordinator|worker) ;;
  *) echo "usage: $0 coordinator|worker" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "$0: run as root" >&2; exit 1; }
top=$(cd "$(dirname "$0")/.." && pwd)
bin="$top/bazel-bin/src"
for b in coordinator/quilt-coordinator worker/quilt-worker runtime/quilt-executor cli/quiltctl; do
  [ -x "$bin/$b" ] || { echo "$0: $bin/$b is missing; build first: bazel build //src/..." >&2; exit 1; }
done
install -m 0755 "$bin/coordinator/quilt-coordinator" "$bin/worker/quilt-worker" \
  "$bin/runtime/quilt-executor" "$bin/cli/quiltctl" /usr/local/bin/
install -m 0644 "$top/deploy/sysusers.d/quilt.conf" /usr/lib/sysusers.d/quilt.conf
systemd-sysusers /usr/lib/sysusers.d/quilt.conf
install -d -m 0755 /etc/quilt
# Where executors write checkpoints and the coordinator reads them (on a
# multi-node cluster, mount shared storage here on every node).
install -d -o quilt -g quilt -m 0750 /var/lib/quilt
install -d -o quilt -g quilt -m 0750 /var/lib/quilt/checkpoints
if [ ! -e "/etc/quilt/$role.toml" ]; then
  install -m 0644 "$top/config/$role.example.toml" "/etc/quilt/$role.toml"
  echo "installed /etc/quilt/$role.toml (edit it, then: systemctl restart quilt-$role)"
fi
install -m 0644 "$top/deploy/systemd/quilt-$role.service" /etc/systemd/system/
systemctl daemon-reload
if systemctl is-active --quiet "quilt-$role.service"; then
  systemctl restart "quilt-$role.service"
  echo "restarted quilt-$role with the new binaries"
else
  systemctl enable --now "quilt-$role.service"
fi
systemctl --no-pager status "quilt-$role.service" | head -5
