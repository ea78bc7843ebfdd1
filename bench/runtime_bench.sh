#!/usr/bin/env bash
# The runtime benchmarks in one run: the transport (comm_bench) and then
# training throughput and simulator fidelity (executor_bench), the latter
# given the bus bandwidth and latencies the former measured.
# JSON lines on stdout. Usage: bench/runtime_bench.sh [TRACE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:comm_bench //bench:executor_bench >&2
comm=$(bazel-bin/bench/comm_bench)
echo "$comm"
bw=$(echo "$comm" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
ar = [r for r in rows if r["bench"] == "ucx_ring_allreduce" and r["bytes"] >= 1 << 20]
print(max(r["bus_bytes_per_s"] for r in ar))')
# Per-message latency of the two-process ring: the ping-pong latency while
# the transports poll; a message that finds the receiver's progress thread
# asleep (no communication for longer than its spin window) pays the
# latency after idle instead: the difference is the wake-up.
read -r lat wake < <(echo "$comm" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
hot = [r for r in rows if r["bench"] == "ucx_ping_pong"][0]["one_way_latency_s"]
idle = [r for r in rows if r["bench"] == "ucx_ping_pong_after_idle"][0]["one_way_latency_s"]
print(hot, max(0.0, idle - hot))')
trace=()
if [[ $# -gt 0 ]]; then trace=(--trace-dir "$(realpath "$1")"); fi
cd bazel-bin/bench/executor_bench.runfiles/quilt
../../executor_bench --link-bytes-per-s "$bw" --link-latency-s "$lat" \
    --transport-wakeup-s "$wake" "${trace[@]}"
