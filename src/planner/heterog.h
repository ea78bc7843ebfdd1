// The HeteroG planner: per op group, where it runs (a device set with
// replica counts that set its batch split, or one device) and how its
// gradients are aggregated (ring or hierarchical all-reduce over its
// replicas, or parameter servers sharded over them or over a server node's
// devices); execution order by HEFT rank in the lowering.
//
// The search runs on the coarsened graph (coarse_graph.h): it starts from
// the best baseline (and, when no baseline fits memory, from layer-wise
// splits over single devices, whole nodes or runs of devices: seeds.h,
// and from data parallelism over every device by speed, over memory),
// then improves by local search — moving one
// group or a run of consecutive groups to another placement, or changing a
// group's aggregation — accepting strictly better simulated steps, with
// random restarts from the best plan while the time budget lasts; it stops
// early when a full pass and the restarts find nothing better. Infeasible
// plans (a device over its memory) rank below every feasible one, by how
// far over they are. Deterministic for a seed.
#ifndef QUILT_SRC_PLANNER_HETEROG_H_
#define QUILT_SRC_PLANNER_HETEROG_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/planner/baselines.h"
#include "src/planner/coarse_graph.h"

namespace quilt {

// Where a running search stands (SearchOptions::progress). The best plan
// is this search's: with other_seed, the first search's best is kept
// unless this one beats it.
struct SearchProgress {
  std::string start;  // the plan it searches from, as SearchResult::start names it
  // A search from another seed after the first (whose plan it may beat).
  bool other_seed = false;
  int64_t evaluated = 0;      // plans simulated so far, every search of the run
  int64_t ruled_out = 0;      // and passed over by their bound (SearchResult::ruled_out)
  bool feasible = false;      // whether the best plan so far fits
  double best_s = 0;          // its step on the coarsened graph
  double overflow_bytes = 0;  // when it does not fit: bytes over capacity, summed
  // The search has ended over memory on the coarse model, and its plan is
  // being repaired on the full one (SearchOptions::repair_simulations).
  bool repairing = false;
  // No start fits the search's memory share on the coarse model: this many
  // of them are being simulated in full, to raise the share to those that
  // fit (memory_share.h); 0: not.
  int raising_share = 0;
};

// The search is deterministic for a seed when it ends by converging or by
// `max_evaluations` (the default); one cut short by the time budget depends
// on the machine's speed (the result says which ended it).
struct SearchOptions {
  double time_budget_s = 10;
  // Plans judged at most once one fits: simulated, or ruled out by their
  // bound (rule_out_by_bound); until one fits the time budget alone ends
  // the search (but for a first search from a start over memory, with
  // other seeds to search from: other_seed_evaluations, then, where no
  // search fits, resumed after them); 0 = no limit. The local search simulates two plans at a
  // time: the second, when the first is taken, is simulated again from the
  // new plan and counts twice; the limit may be passed by one.
  int64_t max_evaluations = 200;
  // Where no baseline fits, the search starts from the best of them and
  // of two layer-wise seeds (the groups over devices, or over nodes, in
  // order); then, while the budget lasts, it searches from each seed it
  // did not start from too, from the two best staged seeds (the groups in
  // stages over runs of devices: seeds.h) and last from data parallelism
  // over every device by speed (over memory as it stands), judging at most
  // this many plans from each (fitting or not); 0: from the start alone.
  int64_t other_seed_evaluations = 2000;
  // Where the start fits, the search also starts from the start regrouped
  // by the plans' lower bound (DescendBound), judging at most this many
  // plans there; 0: not.
  int64_t bound_seed_evaluations = 100;
  uint64_t seed = 1;
  // Op groups; 0 = chosen from the cluster size.
  int target_groups = 0;
  // Local-search passes restarted from a perturbed best plan after a pass
  // finds nothing.
  int restarts = 3;
  // Pass over, unsimulated, the moves whose lower bound (time_bound.h)
  // shows they cannot beat the plan they are moves from. They could not be
  // taken, and they count towards the limits as plans judged, so the
  // search takes the same moves either way, simulating fewer plans.
  bool rule_out_by_bound = true;
  // Share of each device's memory a plan may fill on the coarsened graph.
  double memory_fraction = 0.92;
  // Where the start is over that share but fits in full, each device may
  // hold as much as the start holds there (memory_share.h).
  bool raise_share_to_start = true;
  // Data parallelism over the fastest devices or nodes alone as a start, or
  // a search alongside the first, within max_evaluations plans (none where
  // those are unlimited; subset_starts.h).
  bool subset_starts = true;
  // The plan's compute lower bound, seconds per step (lower_bound.h; 0:
  // unknown): where the share was raised to a start within a few percent
  // of it, the layer-wise seeds are not searched from.
  double lower_bound_s = 0;
  // Where the search's plan does not fit on the coarsened graph, it is
  // repaired on the full one (memory_repair.h) in at most this many full
  // simulations; 0: not.
  int repair_simulations = 400;
  // The repair's share of time_budget_s: while the best plan of a search
  // does not fit, the search ends that much before the budget does, and
  // the repair then runs to the budget's end (at least this share).
  double repair_share = 0.4;
  // Gradient buckets the full plan is also simulated with (besides a
  // collective per group and per gradient): bytes per bucket, larger
  // gradients summed in slices of that size, so that small urgent
  // collectives (a synchronized batch norm's sums) wait less behind them.
  std::vector<int64_t> bucket_bytes = {2 << 20, 8 << 20};
  // Called every `progress_every_s` seconds of a search (never for one
  // that ends sooner; 0: after every batch of plans simulated).
  std::function<void(const SearchProgress&)> progress;
  double progress_every_s = 1;
};

// When a search that ends at `deadline` ends while its best plan does not
// fit: repair_share of its budget sooner, left to the memory repair (where
// there is one).
inline absl::Time UnfitDeadline(const SearchOptions& o, absl::Time deadline) {
  return o.repair_simulations > 0 ? deadline - absl::Seconds(o.repair_share * o.time_budget_s)
                                  : deadline;
}

// What the plan does with one group, and what that is worth.
struct GroupChoice {
  int group = 0;
  std::string first_op, last_op;
  int ops = 0;
  std::string placement;  // e.g. "all 8 devices (proportional)", "node-0/gpu:1"
  std::string aggregation;
  // Predicted step time added by putting this group back as the starting
  // baseline has it (0 when the choice is the baseline's).
  double saved_s = 0;
  // Put back so, the plan no longer fits memory.
  bool needed_to_fit = false;
  // Not simulated: the time budget had run out.
  bool saved_not_measured = false;
  // The group is as the start had it (nothing to put back).
  bool as_start = false;
  // The plan is over memory on the coarse model: saved_s compares the
  // two steps' times alone (the plan may fit in full).
  bool saved_over_memory = false;
};

// The search's plan repaired on the full graph after the search
// (SearchResult::repair).
struct RepairedPlan {
  // Whether the repair changed the plan; if not, the rest is empty.
  bool changed = false;
  // Whether it fits every device on the full graph (with a collective per
  // group: the first variant).
  bool fits = false;
  // The repaired plan's variants, as SearchResult's first ones (the same
  // ways of forming collectives, in order).
  std::vector<quilt::v1::Strategy> variants;
  // What the repair did, in words (DescribeRepair), and the plan's
  // choices per group (what each saves is not measured).
  std::string description;
  std::vector<GroupChoice> choices;
};

struct SearchResult {
  // The plan for the full graph, in variants for the full simulation to
  // choose from: gradients of a group fused in one collective, one
  // collective per gradient, SearchOptions::bucket_bytes buckets, and the
  // starting plan with the smallest buckets.
  std::vector<quilt::v1::Strategy> variants;
  // Per variant: how its gradients form collectives, in words.
  std::vector<std::string> variant_collectives;
  // Variants from this index on place the ops as the start does.
  size_t first_start_variant = 0;
  // The variant (else 0) of the fastest plan over
  // the search's share of memory but within the devices' whole memory: the
  // coarsened graph's memory errs, and the full simulation may find it
  // fits. Its choices are near_choices.
  size_t near_variant = 0;
  // The variant with the start's placement and the plan's aggregation (0
  // when there is none): its coarse time and choices.
  size_t mixed_variant = 0;
  double mixed_s = 0;
  bool mixed_fits = true;  // within memory on the coarsened graph
  std::vector<GroupChoice> mixed_choices;
  double near_s = 0;  // predicted on the coarsened graph
  std::vector<GroupChoice> near_choices;
  // The plans of the searches from other seeds that did not give the
  // result but fit, each a variant too (one collective per group): the
  // coarsened graph can rank them otherwise than the full simulation.
  // Each: its variant, what it started from, the coarse times of its start
  // and its plan, and its choices (against its start).
  struct OtherSearch {
    // The plan its choices' saved_s put each group back as (its start, or
    // the baseline its start was regrouped from).
    std::string against;
    // Its plan's variants: [variant, variant_end).
    size_t variant = 0, variant_end = 0;
    std::string start;
    double start_s = 0, result_s = 0;
    bool start_fits = true;   // its start within memory on the coarsened graph
    bool result_fits = true;  // and its plan
    std::vector<GroupChoice> choices;
  };
  std::vector<OtherSearch> other_searches;
  // Plans that were the search's best before its result, the latest first
  // (per group collectives), for when no variant fits in full; their
  // coarse times and choices.
  std::vector<quilt::v1::Strategy> fallbacks;
  std::vector<double> fallback_s;
  std::vector<bool> fallback_fits;  // within memory on the coarsened graph
  std::vector<std::vector<GroupChoice>> fallback_choices;
  // Where the plan fits on the coarsened graph, but the full simulation
  // may find it over memory: repairs it on the full graph (RepairMemory),
  // within `budget_s`, judging plans as `variant` (one of the plan's own,
  // before first_start_variant) forms collectives. Empty where the search
  // repaired its plan already (memory_repair). Valid while the graph,
  // topology and cost model the search ran on are.
  std::function<absl::StatusOr<RepairedPlan>(double budget_s, size_t variant)> repair;
  // Predicted on the coarsened graph: the starting baseline, the result.
  std::string start;
  double start_s = 0, result_s = 0;
  bool start_fits = true;  // the start within memory on the coarsened graph
  bool feasible = false;
  int groups = 0;
  int64_t evaluated = 0;
  // Plans the search passed over unsimulated: their lower bound on the
  // step (time_bound.h) or on memory (memory_bound.h) showed they could
  // not beat the plan they were moves from.
  int64_t ruled_out = 0;
  double search_wall_s = 0;
  // "enumerated" (every plan of a small action space tried), "converged",
  // "evaluation limit" or "time budget" (of the search whose plan it is,
  // but "time budget" where the budget ended any search of the run, or
  // left a seed unsearched).
  std::string stopped_by;
  // The memory repair on the full graph (SearchOptions::repair_simulations),
  // in words; empty where none ran. The result is the repaired plan where
  // the repair made it fit.
  std::string memory_repair;
  // Where the search raised its memory share to its start (memory_share.h):
  // what it did, in words (empty: it did not).
  std::string memory_share;
  std::vector<GroupChoice> choices;
  // The start's choices (nothing saved), for a start variant.
  std::vector<GroupChoice> start_choices;
  // Per data-parallel baseline: its step time on the coarsened graph (the
  // faster execution order), where it fits there.
  std::map<std::string, double> baseline_coarse_s;
  // Per data-parallel baseline not simulated as a start: its lower bound
  // on the coarsened graph (time_bound.h), no less than a start that fits
  // took there, so it could not be the start. (Parameter servers over
  // hundreds of devices take seconds to simulate.)
  std::map<std::string, double> baseline_bound_s;
};

// The training graph coarsened as the search coarsens it: into
// `target_groups` op groups (0: fewer on clusters of more devices), their
// costs taken at the batch's rows per device.
absl::StatusOr<std::unique_ptr<CoarseModel>> CoarsenForSearch(const Graph& g, const Topology& topo,
                                                              const CostModel& cost, int64_t batch,
                                                              int target_groups);

// `baselines`: the strategies to start from (their names and placements).
// Errors: INVALID_ARGUMENT for a graph without a backward pass.
absl::StatusOr<SearchResult> SearchHeteroG(const Graph& graph, const Topology& topo,
                                           const CostModel& cost, int64_t batch,
                                           const std::vector<NamedStrategy>& baselines,
                                           const SearchOptions& options);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_HETEROG_H_
