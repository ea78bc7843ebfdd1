#!/usr/bin/env bash
# How soon a worker is back after its coordinator restarts: a coordinator
# and one worker on loopback; the coordinator is stopped (SIGTERM), left
# down for DOWN_S seconds and started again on the same address and state
# dir; the time from its start to the worker's node being Ready again
# (polled with quiltctl every 50 ms). TRIALS times.
# JSON lines on stdout. Usage: bench/reconnect_bench.sh [TRIALS] [DOWN_S]
# BENCH_WORKER_BIN runs another worker binary (an A/B of two builds);
# BENCH_KEEP=1 keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-5}
down_s=${2:-3}
bazel build //src/coordinator:quilt-coordinator //src/worker:quilt-worker //src/cli:quiltctl >&2
bin=$(bazel info bazel-bin 2>/dev/null)/src
worker_bin=${BENCH_WORKER_BIN:-$bin/worker/quilt-worker}
dir=$(mktemp -d)
coordinator=""
worker=""
cleanup() {
  for p in $worker $coordinator; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n "${BENCH_KEEP:-}" ]] && echo "logs: $dir" >&2 || rm -rf "$dir"
}
trap cleanup EXIT

wait_for() {  # command..., up to 60 s
  for _ in $(seq 1 1200); do "$@" && return 0; sleep 0.05; done
  echo "timed out: $*" >&2
  return 1
}
start_coordinator() {  # address
  "$bin/coordinator/quilt-coordinator" --listen_address "$1" --state_dir "$dir/state" \
    --ready_file "$dir/coordinator.addr" >>"$dir/coordinator.log" 2>&1 &
  coordinator=$!
}
ready() {
  "$bin/cli/quiltctl" --coordinator "$addr" nodes 2>/dev/null |
    awk '$1 == "bench-node" { print $2 }' | grep -qx Ready
}

start_coordinator 127.0.0.1:0
wait_for test -s "$dir/coordinator.addr"
addr=$(cat "$dir/coordinator.addr")
"$worker_bin" --coordinator_address "$addr" --node_id bench-node --cpu_cores 1 \
  --ready_file "$dir/worker.ready" >"$dir/worker.log" 2>&1 &
worker=$!
wait_for test -s "$dir/worker.ready"
wait_for ready

for trial in $(seq 1 "$trials"); do
  kill -TERM "$coordinator"
  wait "$coordinator" || true
  sleep "$down_s"
  rm -f "$dir/coordinator.addr"
  start=$(date +%s.%N)
  start_coordinator "$addr"
  wait_for ready
  end=$(date +%s.%N)
  python3 -c 'import json, sys
print(json.dumps({"bench": "worker_ready_after_coordinator_restart", "trial": int(sys.argv[1]),
                  "down_s": float(sys.argv[2]),
                  "seconds": round(float(sys.argv[4]) - float(sys.argv[3]), 3)}))' \
    "$trial" "$down_s" "$start" "$end"
done
