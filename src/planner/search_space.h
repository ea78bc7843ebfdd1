// The HeteroG planner's action space and its evaluator. A plan state gives
// each op group one placement option (a device set with replica counts, or
// a single device) and an aggregation method. Options come from the
// cluster: every device, each node, the fastest k devices, the fastest j
// nodes, the baselines' splits, and single devices. States are scored by
// lowering the coarsened graph (coarse_graph.h) and simulating it; scores
// are cached by state. Not thread-safe; EvaluateAll runs a second thread
// of its own while it lasts.
#ifndef QUILT_SRC_PLANNER_SEARCH_SPACE_H_
#define QUILT_SRC_PLANNER_SEARCH_SPACE_H_

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/memory_bound.h"
#include "src/planner/time_bound.h"
#include "src/sim/simulator.h"

namespace quilt {

struct PlacementOption {
  // (device, replicas), replicas > 0.
  std::vector<std::pair<int, int>> replicas;
  std::string label;
  bool single() const { return replicas.size() == 1; }
};

enum class Method : uint8_t { kRing, kHierarchical, kParameterServer, kTree };
std::string MethodLabel(Method m);
// The aggregation method a Method is lowered with.
quilt::v1::AggregationMethod ProtoMethod(Method m);
// How SearchSpace::FineStrategy's `fusion` forms collectives, in words.
std::string FusionLabel(int64_t fusion);

struct PlanState {
  std::vector<int> place;  // option per group
  std::vector<Method> method;
  // Per group under parameter-server aggregation: the node whose devices
  // serve its parameters; -1 (or no entry): the group's own devices.
  std::vector<int> server_node;
  quilt::v1::ExecutionOrder order = quilt::v1::EXECUTION_ORDER_CRITICAL_PATH;
  int ServerNode(int k) const {
    return k < static_cast<int>(server_node.size()) ? server_node[k] : -1;
  }
  bool operator==(const PlanState& o) const {
    if (!(place == o.place && method == o.method && order == o.order)) return false;
    for (size_t k = 0; k < place.size(); ++k) {
      if (ServerNode(static_cast<int>(k)) != o.ServerNode(static_cast<int>(k))) return false;
    }
    return true;
  }
};

// Sets group k's server node (growing the state's list as needed; -1:
// the group's own devices).
void SetServerNode(PlanState* s, int k, int node);

struct Score {
  double time_s = 0;
  // Bytes over capacity, summed over devices (0 when it fits).
  double overflow_bytes = 0;
  // Within every device's whole memory (the search's share of it may be
  // less): the full simulation may find it fits.
  bool fits_whole = false;
  bool feasible() const { return overflow_bytes <= 0; }
  // Feasible before infeasible; then faster, or less over memory.
  bool BetterThan(const Score& o) const;
};

class SearchSpace {
 public:
  // `fine_cost` gives device speeds (for the options' replica counts).
  // `memory_fraction`: the share of each device's memory a plan may fill
  // on the coarsened graph (it misses short-lived tensors inside groups).
  SearchSpace(const Topology& topo, const CostModel& fine_cost, const CoarseModel& coarse,
              int64_t batch, double memory_fraction);
  // Its bound asks it for parameter servers (TimeBound::set_servers).
  SearchSpace(const SearchSpace&) = delete;
  SearchSpace& operator=(const SearchSpace&) = delete;

  const std::vector<PlacementOption>& options() const { return options_; }
  // Adds an option (or finds an equal one); its index.
  int AddOption(PlacementOption option);
  // An option over `devices` with replica counts in proportion to speed
  // (in eighths of the fastest's), not added.
  PlacementOption BySpeed(std::vector<int> devices, std::string label) const;
  // Single-device option of `device`.
  int SingleOption(int device);
  // Aggregation methods worth trying for an option (none matter for one
  // device: its gradients are whole).
  std::vector<Method> MethodsFor(int option) const;
  bool Allows(int option, Method m) const {
    const std::vector<Method> ok = MethodsFor(option);
    return std::find(ok.begin(), ok.end(), m) != ok.end();
  }
  // Nodes worth serving a group's parameters besides its own devices: on
  // clusters of several nodes, the two with the fastest NICs (a parameter
  // server's node takes every replica's gradient in).
  const std::vector<int>& ServerNodes() const { return server_nodes_; }
  // The options over a subset of the devices by speed: the fastest k
  // devices, each node of several, the fastest k nodes (data parallelism
  // over them is a start for the search: subset_starts.h).
  const std::vector<int>& SubsetOptions() const { return subset_options_; }
  // Whether `option`'s devices are exactly node `node`'s (servers on the
  // node are then the group's own).
  bool OnlyOn(int option, int node) const;
  // How group k's gradients are aggregated, in words.
  std::string AggregationLabel(const PlanState& state, int k) const;
  // A rough step time of every group on `option`, without simulating: the
  // slowest member's computation (the groups' reference time scaled by its
  // rows and speed) or a ring all-reduce of every parameter over the
  // slowest link between consecutive members, whichever is longer. Only
  // for ordering candidates: it ignores memory, latencies and the ops'
  // order.
  double Estimate(int option) const;

  // The state a data-parallel strategy (one group over every op) maps to.
  PlanState FromDataParallel(const quilt::v1::Strategy& strategy);

  quilt::v1::Strategy CoarseStrategy(const PlanState& state) const;
  // How a fine strategy's all-reduce gradients form collectives:
  // kFusePerGroup, the gradients of a group in one (as the coarse model has
  // them); kFuseNone, one each; or > 0, buckets of at most that many bytes
  // in the order gradients become ready (GradientBuckets), gradients larger
  // than that summed in slices of that size (partition_bytes).
  static constexpr int64_t kFusePerGroup = -1;
  static constexpr int64_t kFuseNone = 0;
  // The same plan for the full graph: each group's forward ops placed as the
  // state says, its parameters aggregated by its method, all-reduce
  // gradients fused as `fusion` says, parameter servers shared by bytes over
  // the group's devices.
  quilt::v1::Strategy FineStrategy(const Graph& fine, const PlanState& state,
                                   const std::string& name, int64_t fusion) const;

  // Lowers and simulates the coarsened graph; cached. Errors: lowering or
  // simulation errors (a bug; the caller treats the state as unusable).
  absl::StatusOr<Score> Evaluate(const PlanState& state);
  // The same for several states, those not cached on two threads where the
  // machine has two cores (the scores are the same either way); in order.
  std::vector<absl::StatusOr<Score>> EvaluateAll(const std::vector<PlanState>& states);
  // Plans that take longer than this to simulate (a moving average) are
  // simulated on two threads by EvaluateAll; kParallelAboveS by default;
  // 0: always (even on one core: tests).
  void set_parallel_above(double seconds) { parallel_above_s_ = seconds; }
  // States lowered and simulated (not found in the cache).
  int64_t evaluations() const { return evaluations_; }
  // Whether `state` cannot take less than `time_s`: by its cached score,
  // else by a bound that neither lowers nor simulates it (time_bound.h);
  // states the bound rules out are counted in ruled_out(). Not while
  // EvaluateAll runs.
  bool CannotBeat(const PlanState& state, double time_s);
  int64_t ruled_out() const { return ruled_out_; }
  // Whether `state` cannot be better than a plan of score `than` by its
  // memory, without lowering or simulating it: its bound on each device's
  // peak (memory_bound.h) is over the search's share of memory by at least
  // `than`'s overflow (by any bytes, where `than` fits), and over some
  // device's whole memory (so the full simulation could not find it fits
  // either: LocalSearchResult::near). Counted in ruled_out() as
  // CannotBeat's are (once a state). Not for a state simulated already
  // (its score judges it at no cost), nor while EvaluateAll runs.
  bool MemoryCannotBeat(const PlanState& state, const Score& than);
  // By that bound: the bytes `state` is over the search's share of memory,
  // summed over the devices (not cached).
  double MemoryOverShare(const PlanState& state);
  // CannotBeat for a plan judged before the search (a start): not counted
  // in ruled_out(), then or when the search meets it again (as a start
  // simulated and cached would not be).
  bool StartCannotBeat(const PlanState& state, double time_s);
  // The bound of `state` (time_bound.h), cached by state; it rules
  // nothing out. Not while EvaluateAll runs.
  double BoundOf(const PlanState& state);
  // The bounds of `state` with group k's placement and method replaced by
  // each of `choices` (as BoundOf gives them, the new ones computed
  // together: TimeBound::OfEach).
  std::vector<double> BoundsOf(const PlanState& state, int k,
                               const std::vector<std::pair<int, Method>>& choices);
  // A state's key: equal for equal states (PlanState::operator==).
  std::string StateKey(const PlanState& state) const { return Key(state); }
  // States judged without the cache: simulated or ruled out.
  int64_t judged() const { return evaluations_ + ruled_out_; }
  // The coarse model's peak memory of `state` on each device, bytes, by
  // device index (simulated again: scores keep no peaks).
  absl::StatusOr<std::vector<double>> CoarsePeaks(const PlanState& state);
  // Lets each device hold up to `bytes[d]` on the coarse model where that
  // is above memory_fraction's share of it (memory_share.h); the scores
  // cached so far are dropped (they judged memory by the share).
  void RaiseMemoryCaps(const std::vector<double>& bytes);

 private:
  std::string Key(const PlanState& state) const;
  // Lowers and simulates with `cost` (the coarse model's, or a copy), the
  // program in an arena that starts in `block`.
  absl::StatusOr<Score> Compute(const PlanState& state, const CostModel& cost,
                                std::unique_ptr<char[]>* block) const;
  // Lowers and simulates `state` on the coarsened graph (Compute's core).
  absl::StatusOr<SimResult> Run(const PlanState& state, const CostModel& cost,
                                std::unique_ptr<char[]>* block) const;
  static constexpr size_t kArenaBlockBytes = 8 << 20;
  // A thread's start and end cost tens of microseconds: two threads pay
  // from about a tenth of a millisecond a plan (with one allocator arena
  // for every thread: src/common/allocator_options.cc; with an arena a
  // thread they cost more than they saved below about 2 ms).
  static constexpr double kParallelAboveS = 1e-4;
  // The bytes device d may hold on the coarse model: memory_fraction_ of
  // its `capacity`, or more where RaiseMemoryCaps allows it.
  double Cap(int d, double capacity) const;
  // Parameter servers of group k (parameter-server aggregation).
  std::vector<int> Servers(const PlanState& state, int k) const;

  const Topology& topo_;
  const CoarseModel& coarse_;
  int64_t batch_;
  double memory_fraction_;
  // Per device (by index): the bytes a plan may hold on the coarse model
  // (empty: memory_fraction_ of each device's capacity).
  std::vector<double> caps_;
  std::vector<double> speed_;
  std::vector<PlacementOption> options_;
  std::vector<int> server_nodes_;
  std::vector<int> subset_options_;
  absl::flat_hash_map<std::string, Score> cache_;
  // The coarse cost model for EvaluateAll's second thread.
  std::unique_ptr<CostModel> second_cost_;
  // Moving average of one plan's lowering and simulation, seconds (0: none
  // yet); EvaluateAll uses a second thread above kParallelAboveS.
  double compute_s_ = 0;
  double parallel_above_s_ = kParallelAboveS;
  // Per thread: the first block of the arena programs are lowered into.
  std::unique_ptr<char[]> blocks_[2];
  int64_t evaluations_ = 0;
  TimeBound bound_;
  MemoryBound memory_bound_;
  // Bounds by state key, and whether each has ruled its state out (states
  // simulated since are in cache_ too).
  struct Bound {
    double seconds = 0;
    bool ruled_out = false;
    // By the memory bound, computed when first asked (negative: not yet):
    // bytes over the search's share, summed; whether over some device's
    // whole memory.
    double over_share = -1;
    bool over_whole = false;
  };
  absl::flat_hash_map<std::string, Bound> bounds_;
  // `state`'s entry in bounds_ (by its key), its bound computed when new.
  Bound& BoundEntry(std::string key, const PlanState& state);
  // CannotBeat, counting what it rules out in ruled_out() or not.
  bool RuleOut(const PlanState& state, double time_s, bool count);
  int64_t ruled_out_ = 0;
};

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_SEARCH_SPACE_H_
