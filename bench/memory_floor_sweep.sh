#!/bin/bash
# The memory floor against the plans that fit (src/planner/memory_floor.h):
# for each zoo model on each cluster, plans every strategy at the floor's
# largest batch + 1 and at the floor's largest batch, and prints one JSON
# object per run: the floor's batch, the batch planned, the fastest
# feasible strategy ("" where none fits) and the data-parallel batch limit
# the report suggests. No strategy should fit above the floor.
#
#   bazel build //src/cli:quiltctl
#   bench/memory_floor_sweep.sh [--time-budget S] CLUSTER.textproto...
#   (MODELS="gpt2 bert_large" to choose the models)
set -uo pipefail
cd "$(dirname "$0")/.."
budget=3
if [ "${1:-}" = "--time-budget" ]; then
  budget=$2
  shift 2
fi
quiltctl=bazel-bin/src/cli/quiltctl
[ -x "$quiltctl" ] || { echo "build it first: bazel build //src/cli:quiltctl" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: $0 [--time-budget S] CLUSTER.textproto..." >&2; exit 1; }
models=${MODELS:-vgg19 resnet50 inception_v3 transformer bert_large gpt2 gpt2_xl}
field() { python3 -c "import json,sys; r=json.load(sys.stdin); print($1)"; }
for cluster in "$@"; do
  for m in $models; do
    floor=$("$quiltctl" plan "zoo:$m" --cluster "$cluster" --batch 1 --strategy single-device \
      -o json 2>/dev/null | field "r['memory_floor']['largest_batch']")
    if [ -z "$floor" ] || [ "$floor" -le 0 ]; then
      echo "{\"model\":\"$m\",\"cluster\":\"$cluster\",\"floor_batch\":${floor:-null}}"
      continue
    fi
    for b in $((floor + 1)) "$floor"; do
      "$quiltctl" plan "zoo:$m" --cluster "$cluster" --batch "$b" --strategy all \
        --time-budget "$budget" -o json 2>/dev/null |
        field "json.dumps({'model': '$m', 'cluster': '$cluster', 'floor_batch': $floor,
          'batch': $b, 'best': r.get('best', ''),
          'data_parallel_batch_limit': int(r.get('data_parallel_batch_limit', 0))})"
    done
  done
done
