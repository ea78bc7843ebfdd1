#!/bin/bash
# Quilt on this machine: installs what is missing, builds, starts a
# coordinator and two workers (worker-b emulated 2x slower, as in a mixed
# cluster), waits until both are Ready, shows the cluster, plans a small
# CNN exported from PyTorch on it (and how much faster than even data
# parallelism the plan is predicted to be), trains it through the service
# on learnable synthetic data while watching the loss fall, and exports the
# trained model as ONNX and its weights as NumPy arrays. Everything is
# stopped again at the end unless --keep is given.
#
#   tools/quickstart.sh [--keep]
#
# State and logs go to .quickstart/ in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
[ "${1:-}" = "--keep" ] && keep=1

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Installing missing packages"
tools/setup.sh

step "Building (first build takes a few minutes on 2 cores)"
bazel build //src/coordinator:quilt-coordinator //src/worker:quilt-worker \
  //src/runtime:quilt-executor //src/cli:quiltctl
bin=$(bazel info bazel-bin 2>/dev/null)/src
bazel shutdown >/dev/null 2>&1 || true

dir=.quickstart
rm -rf "$dir"
mkdir -p "$dir"
pids=()
cleanup() {
  [ $keep -eq 1 ] && return
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_file() {  # path, seconds
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2; return 1
}

step "Starting the coordinator"
"$bin/coordinator/quilt-coordinator" --listen_address 127.0.0.1:0 --state_dir "$dir/state" \
  --ready_file "$dir/coordinator.addr" >"$dir/coordinator.log" 2>&1 &
pids+=($!)
wait_file "$dir/coordinator.addr" 30 || { cat "$dir/coordinator.log"; exit 1; }
addr=$(cat "$dir/coordinator.addr")
export QUILT_COORDINATOR=$addr
echo "coordinator serving on $addr (log: $dir/coordinator.log)"

step "Starting two workers (worker-b emulates a GPU half as fast)"
# A core each where the machine has two (two CPUs that are not hardware
# threads of one core): each worker measures its device on the core its
# executors then run on.
cpus_a=() cpus_b=()
allowed=$(taskset -cp $$ 2>/dev/null | sed 's/.*: //') || allowed=""
first="" first_core=""
for part in ${allowed//,/ }; do
  if [[ $part == *-* ]]; then range=$(seq "${part%-*}" "${part#*-}"); else range=$part; fi
  for c in $range; do
    core=$(cat "/sys/devices/system/cpu/cpu$c/topology/thread_siblings_list" 2>/dev/null || echo "$c")
    if [[ -z "$first" ]]; then
      first=$c first_core=$core
    elif [[ "$core" != "$first_core" && ${#cpus_b[@]} -eq 0 ]]; then
      cpus_a=(--cpus "$first") cpus_b=(--cpus "$c")
    fi
  done
done
# Both workers share this host's memory: each offers jobs 2/5 of what is
# available now (alone, each would offer all of it, and two jobs planned to
# fill both would not fit together).
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
mem=(--cpu_memory_mb $(( avail_kb / 1024 * 2 / 5 )))
"$bin/worker/quilt-worker" --coordinator_address "$addr" --node_id worker-a --cpu_cores 1 \
  "${mem[@]}" "${cpus_a[@]}" --ready_file "$dir/worker-a.ready" >"$dir/worker-a.log" 2>&1 &
pids+=($!)
"$bin/worker/quilt-worker" --coordinator_address "$addr" --node_id worker-b --cpu_cores 1 \
  "${mem[@]}" "${cpus_b[@]}" --compute_slowdown 2 --ready_file "$dir/worker-b.ready" >"$dir/worker-b.log" 2>&1 &
pids+=($!)
for w in worker-a worker-b; do
  wait_file "$dir/$w.ready" 60 || { cat "$dir/$w.log"; exit 1; }
done
echo "both workers measured their devices and registered"

step "quiltctl status"
"$bin/cli/quiltctl" status

step "quiltctl nodes -o wide"
"$bin/cli/quiltctl" nodes -o wide

model=test/fixtures/cnn/model.onnx
batch=256
step "Planning $model (a CNN exported from PyTorch) on the live cluster"
"$bin/cli/quiltctl" plan "$model" --batch $batch --optimizer sgd | tee "$dir/plan.txt"
"$bin/cli/quiltctl" plan "$model" --batch $batch -o json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
t = {e["name"]: e["step_time_s"] for e in r["estimates"] if e["feasible"]}
best, even = t[r["best"]], t.get("dp-even-ring")
if even:
    print("Predicted: %s at %.2f ms per step, %.2fx as fast as even data parallelism (%.2f ms)"
          % (r["best"], best * 1e3, even / best, even * 1e3))'

step "Training it through the service (quiltctl submit --watch)"
"$bin/cli/quiltctl" submit "$model" --loss softmax_cross_entropy --batch $batch --steps 300 \
  --data synthetic:1 --lr 0.02 --checkpoint-every 100 --name quickstart-cnn --watch

step "quiltctl jobs"
"$bin/cli/quiltctl" jobs
job=$("$bin/cli/quiltctl" jobs -o json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][-1]["job_id"])')

step "quiltctl describe job $job"
"$bin/cli/quiltctl" describe job "$job"

step "The trained model as ONNX, and its weights as NumPy arrays (quiltctl export)"
"$bin/cli/quiltctl" export "$job" -o "$dir/trained.onnx"
/usr/bin/python3 -c 'import onnx, sys; m = onnx.load(sys.argv[1]); onnx.checker.check_model(m); print("onnx loads it:", len(m.graph.initializer), "trained initializers")' "$dir/trained.onnx"
"$bin/cli/quiltctl" export "$job" -o "$dir/weights.npz"
/usr/bin/python3 -c 'import numpy as np, sys; a = np.load(sys.argv[1]); print("numpy loads the weights:", ", ".join("%s %s" % (k, v.shape) for k, v in a.items()))' "$dir/weights.npz"

if [ $keep -eq 1 ]; then
  cat <<EOT

The cluster keeps running. Try:
  export QUILT_COORDINATOR=$addr
  $bin/cli/quiltctl nodes
Stop it with: kill ${pids[*]}
EOT
else
  step "Stopping (use --keep to leave the cluster running)"
fi
