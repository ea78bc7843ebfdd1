#!/bin/bash
# Planning in the memory-tight band (docs/BENCHMARKS.md, "The time budget
# is planning's whole time"): for each model on each cluster, planner_bench
# at 75, 85 and 95 % of the memory floor's batch per device, where no
# start fits the search's memory share on its coarse model and the search
# runs to its time. Prints planner_bench's JSON lines (no summaries).
#
#   bazel build //bench:planner_bench
#   bench/tight_sweep.sh [PLANNER_BENCH]   (default: bazel-bin/bench/planner_bench)
set -uo pipefail
cd "$(dirname "$0")/.."
bench=${1:-bazel-bin/bench/planner_bench}
[ -x "$bench" ] || { echo "build it first: bazel build //bench:planner_bench" >&2; exit 1; }
cases="resnet50:eight_2gib inception_v3:eight_2gib vgg19:eight_2gib transformer:eight_2gib
resnet50:small_4x1080ti inception_v3:small_4x1080ti gpt2:small_4x1080ti transformer:small_4x1080ti
resnet50:small_mixed3 gpt2:small_mixed3 vgg19:small_mixed3"
for c in $cases; do
  model=${c%%:*}
  cluster=bench/clusters/${c#*:}.textproto
  read -r floor devices < <("$bench" --models "$model" --clusters "$cluster" --rows-per-device 1 \
    --time-budget 1 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if 'memory_floor_batch' in r: print(r['memory_floor_batch'], r['devices'])")
  if [ -z "${floor:-}" ] || [ "$floor" -le 0 ]; then
    echo "no memory floor for $model on $cluster" >&2
    continue
  fi
  rows=$(python3 -c "print(','.join(str(max(1, int(f * $floor / $devices))) for f in (0.75, 0.85, 0.95)))")
  "$bench" --models "$model" --clusters "$cluster" --rows-per-device "$rows" 2>/dev/null |
    grep -v '"summary"'
done
