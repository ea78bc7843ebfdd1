// Plan reports: every baseline and the HeteroG plan (or one named strategy)
// lowered, validated and simulated for a training graph on a cluster, with
// the compute lower bound, each strategy's ratio to it, memory per device
// and feasibility, and the planning wall time. What `quiltctl plan` and
// JobService.PlanJob return. The HeteroG plan is the search's plan with
// its fastest gradient collectives, then with its embedding tables'
// gradients gathered (sparse lookup) when that simulates faster; it is
// never slower than the best baseline simulated: where the search finds
// nothing better, it reports that baseline's plan and says so.
#ifndef QUILT_SRC_PLANNER_PLAN_H_
#define QUILT_SRC_PLANNER_PLAN_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/plan.pb.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/cluster/topology.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"
#include "src/planner/baselines.h"
#include "src/planner/estimate.h"
#include "src/planner/heterog.h"
#include "src/sim/simulator.h"

namespace quilt {

struct PlanOptions {
  int64_t global_batch = 0;
  // "all" or one strategy name.
  std::string strategy = "all";
  // Keep the simulated timeline of the best strategy (for --trace).
  bool trace = false;
  // Called with a line before each strategy is simulated (progress of a
  // long plan), and every `simulation_progress_every_s` while simulations
  // run ("still simulating …"; 0: never); may be empty. Never called
  // from two threads at once.
  std::function<void(const std::string&)> progress;
  double simulation_progress_every_s = 5;
  // The HeteroG search ("heterog" or "all").
  SearchOptions search;
  // Whether the best program carries the training graph (with its initial
  // weights, which can be gigabytes): what executors need, not a report.
  bool program_with_graph = true;
  // Strategies of the caller's own (a strategy file), simulated beside the
  // wanted ones under their names (which must not be a baseline's or
  // "heterog"); with `strategy` "given", only these.
  std::vector<NamedStrategy> given;
  // Only whether a plan fits: with "all", where the speed-proportional
  // all-reduce baseline fits (on one device, the device alone), it alone
  // is simulated and reported; else the HeteroG search is left out when
  // another baseline fits (its plan is never slower than the best
  // baseline, so it fits wherever one does); when none fits, it runs.
  bool fit_check_only = false;
  // Where no strategy fits: the batch the report suggests is checked by
  // planning a baseline in full at it (batch_hint.h); false: none suggested.
  bool check_batch_hint = true;
  // Where nothing fits (and "heterog" is wanted): the closest plans over
  // micro-batches (gradient accumulation, accumulation.h) as the
  // planner's plan; and where the planner's plan fits but idles, the
  // same pipelined over micro-batches (pipelined_plan.h). False: the batch
  // never runs as micro-batches.
  bool accumulate = true;
  // The all-reduce baselines also simulated with their gradients in
  // frameworks' buckets, the faster kept (bucketed_baselines.h); false
  // (planning's own checks of a batch or of a micro-batch's plan, and
  // fit_check_only): one collective per gradient alone.
  bool bucketed_baselines = true;
};

struct PlanResult {
  quilt::v1::PlanReport report;
  // The best feasible strategy's program and simulation (trace if asked).
  quilt::v1::DistributedProgram best_program;
  SimResult best_sim;
};

// Errors: INVALID_ARGUMENT (unknown strategy name, graph without backward
// pass, batch < 1, a given strategy that cannot be lowered, naming it).
absl::StatusOr<PlanResult> Plan(const Graph& training_graph, const Topology& topology,
                                const PlanOptions& options);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PLAN_H_
