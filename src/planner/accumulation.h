// Where no plan holds the batch at once: the same placements over
// micro-batches (gradient accumulation, Strategy.micro_batches), each
// micro-batch's activations held one at a time. Tried for a plan searched
// afresh at a micro-batch's rows (from the largest batch anything was
// found to fit, else the memory floor's), for the search's closest plan
// and for data parallelism (the speed-proportional all-reduce baseline at
// the micro-batch's rows), each from the rows its checked batch suggests
// (PlanReport's hybrid_batch_limit and data_parallel_batch_limit), halved
// until one fits, then halfway back to the last that did not and half
// again (a plan less pressed for memory can be the faster), each try one
// simulation in full of the whole step (validated only where it would be
// the best), and each that fits tried again
// pipelined (2, 4, … micro-batches in flight on each device, while it
// fits and gets faster, where its busiest device's compute leaves time to
// save); where more in flight overflowed the fastest, it is planned once
// more with room for them on the devices that overflowed (among the
// searched plans, before the smaller micro-batches, where their fastest
// overflowed; else at the end). The fastest
// that fits is the plan. A try that repeats an earlier one (the same
// strategy, micro-batches and in flight: data parallelism is often what the
// search found at those rows) takes its outcome without a simulation.
// Until a try fits, tries go on whatever the time (a plan that fits is
// worth it); once one does, each later step (a plan at a micro-batch's rows
// and its simulation, or a simulation alone) is begun only where `may_begin`
// affords its cost as measured on the tries before (Plan: within the time
// budget, or within PlanBudget::kAfterFitBudgets of it counted from the
// first fit: plan_budget.h), and the result says whether any was left.
// Every device holds the gradients it computes until the step's end, which
// a plan for a micro-batch's rows does not count: where the whole step
// overflows, the plan is made again with each overflowing device's memory
// scaled by its capacity over its peak.
#ifndef QUILT_SRC_PLANNER_ACCUMULATION_H_
#define QUILT_SRC_PLANNER_ACCUMULATION_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "proto/quilt/v1/plan.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"
#include "src/planner/baselines.h"
#include "src/planner/estimate_many.h"

namespace quilt {

struct AccumulatedPlan {
  NamedStrategy strategy;  // micro_batches set; named as `name` asked
  std::string note;        // what it is, for the report
  bool cut_short = false;  // tries left not begun: one fit, and the budget was spent
  // The plan's simulation in full (in its execution order; validated; no
  // lower bound in its estimate), as Plan keeps one.
  std::shared_ptr<Evaluated> full;
};

// Whether a step of about `seconds` is begun, the first try that fit
// having ended at `first_fit`; empty: always.
using MayBegin = std::function<bool(double seconds, absl::Time first_fit)>;

// A plan of its own at `rows` by `strategy` ("heterog" or a baseline's
// name), on the devices' memory scaled by `scale` (by device id; absent:
// 1): its strategy, where one fits.
using PlanAt = std::function<std::optional<quilt::v1::Strategy>(
    int64_t rows, const std::string& strategy, const std::map<std::string, double>& scale)>;

// `closest`: the search's closest strategy (none: not tried); `plan_at`
// (may be empty: only `closest` tried) plans a micro-batch's rows afresh;
// `progress` and `may_begin` may be empty. Nullopt where nothing tried
// fits, or where the graph's passes read a sum over the whole batch (the
// reason in `why`).
std::optional<AccumulatedPlan> PlanAccumulation(
    const Graph& graph, const GraphIndex& index, const Topology& topology, const CostModel& cost,
    int64_t batch, const quilt::v1::Strategy* closest, const quilt::v1::PlanReport& report,
    const std::string& name, const PlanAt& plan_at,
    const std::function<void(const std::string&)>& progress, std::string* why,
    const MayBegin& may_begin = {});

// A no-fit message's clause saying why the graph cannot run as
// micro-batches ("; gradient accumulation … (reason)"), or "" where the
// report refused none.
std::string AccumulationRefusedHint(const quilt::v1::PlanReport& report);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_ACCUMULATION_H_
