// Several strategies estimated in full at once (Plan's simulations of the
// baselines and of the search's plans): one per thread, up to the
// machine's cores, each lowered and simulated as EstimateOnArena does,
// with progress lines before each and while they run (on hundreds of
// devices one takes many seconds). Strategies that are the same plan but
// for their names and replica counts that give each device the same rows
// (the even and speed-proportional splits over devices of one speed) are
// simulated once.
#ifndef QUILT_SRC_PLANNER_ESTIMATE_MANY_H_
#define QUILT_SRC_PLANNER_ESTIMATE_MANY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/planner/estimate.h"

namespace quilt {

// One strategy simulated in full, as Plan keeps it.
struct Evaluated {
  quilt::v1::StrategyEstimate estimate;
  ArenaProgram program;  // empty for a strategy infeasible before lowering
  SimResult sim;
  // Seconds its lowering and simulation took (in each order simulated), on
  // the planner's clock where one is installed (src/common/work_clock.h:
  // the work they charged), else the wall's.
  double wall_s = 0;
  // Whether its program was validated (ValidateProgram) where it was
  // simulated: Plan then does not validate it again.
  bool validated = false;

  // Named `name`: the estimate, its strategy and the program's strategy.
  void Rename(const std::string& name) {
    estimate.set_name(name);
    estimate.mutable_strategy()->set_name(name);
    if (!program.empty()) program->mutable_strategy()->set_name(name);
  }
};

// Whether `challenger` should replace `incumbent`: it fits, and is faster
// or the incumbent does not fit.
inline bool FitsAndBeats(const quilt::v1::StrategyEstimate& challenger,
                         const quilt::v1::StrategyEstimate& incumbent) {
  return challenger.feasible() &&
         (!incumbent.feasible() || challenger.step_time_s() < incumbent.step_time_s());
}

struct EstimateManyOptions {
  int64_t batch = 0;
  double lower_bound = 0;
  bool trace = false;
  // With false, each only in the execution order its strategy names.
  bool both_orders = true;
  // Called (never from two threads at once) with "simulating NAME (T s so
  // far)" before each, and every `heartbeat_s` while any runs with "still
  // simulating …" (T: seconds since `start`); may be empty.
  std::function<void(const std::string&)> progress;
  double heartbeat_s = 5;
  absl::Time start;
  // Where set, asked before each strategy is begun (never from two
  // threads at once): one it refuses is not simulated, and is left out of
  // `done` (the planning budget's end: plan_budget.h).
  std::function<bool()> may_begin;
};

// Estimates each of `list` (EstimateOnArena) and, when all succeed, puts
// them into `done` by name (those `may_begin` refused left out); else
// returns the first error, in list order, and leaves `done` as it was.
absl::Status EstimateMany(const GraphIndex& index, const Topology& topology, const CostModel& cost,
                          const std::vector<NamedStrategy>& list, const EstimateManyOptions& o,
                          std::map<std::string, Evaluated>* done);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_ESTIMATE_MANY_H_
