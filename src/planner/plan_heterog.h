// The "heterog" strategy of Plan (plan.h): the HeteroG search
// (heterog.h) from the baselines, within the planning budget
// (plan_budget.h); its plan simulated in full and, where only the coarse
// model fit it, repaired on the full model and searched again with more
// headroom; refined in full (embedding gradients gathered, weight
// gradients' rows moved off the busiest devices); then compared with the
// best baseline simulated in full, never slower: a baseline as fast is
// kept. Internal to Plan.
#ifndef QUILT_SRC_PLANNER_PLAN_HETEROG_H_
#define QUILT_SRC_PLANNER_PLAN_HETEROG_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/planner/baselines.h"
#include "src/planner/estimate_many.h"
#include "src/planner/plan.h"

namespace quilt {

inline constexpr char kHeteroG[] = "heterog";

// One strategy simulated in full into the plan's estimates (once: one
// already there is kept).
using EvaluateFn = std::function<absl::Status(const NamedStrategy&)>;
// Several at once (in parallel), each as EvaluateFn would; with
// `both_orders` false, only in the execution order its strategy names;
// where `may_begin` is set, each begun only where it says so (one not
// begun is left out of the estimates: EstimateManyOptions::may_begin).
using EvaluateManyFn = std::function<absl::Status(
    const std::vector<NamedStrategy>&, bool both_orders, const std::function<bool()>& may_begin)>;

// The search's plan (the search from `baselines` on the compute lower
// bound `lb`, planning begun at `start`) as done->at(kHeteroG), with its
// search summary; the baselines it is compared with are simulated into
// `done` too. `subsets` gives data parallelism over the fastest nodes
// alone (node_subset_baselines.h), built and simulated after the search
// within the budget and not put into `done`: one faster than the plan
// becomes it.
absl::Status PlanHeteroG(const GraphIndex& ix, const Topology& topo, const CostModel& cost,
                         const std::vector<NamedStrategy>& baselines,
                         const std::function<std::vector<NamedStrategy>()>& subsets, double lb,
                         const PlanOptions& o, absl::Time start, const EvaluateFn& evaluate,
                         const EvaluateManyFn& evaluate_many,
                         std::map<std::string, Evaluated>* done);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PLAN_HETEROG_H_
