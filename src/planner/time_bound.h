// A lower bound on a plan state's coarse step time (SearchSpace::Evaluate)
// that neither lowers nor simulates it. Each device runs its ops one at a
// time, and each link carries one communication at a time, so the step
// lasts at least the busiest device's forward and backward computation,
// and at least the busiest link's share of the gradient all-reduces and
// of the batch tensors' rows moved between groups split differently, plus
// the host's step overhead of the devices the plan uses. Parameter
// servers' pushes and pulls count too where the caller says which devices
// serve a group (set_servers). (Other sums and updates are left out: a
// bound may miss work, never add any.) Per (group, placement option) the
// devices' seconds, per (gradient, option, method), (gradient, options,
// server node) and (tensor, option, option) the links', are computed once;
// a bound then costs a sum over the groups. The local search skips the
// moves whose bound shows they cannot beat the current plan.
#ifndef QUILT_SRC_PLANNER_TIME_BOUND_H_
#define QUILT_SRC_PLANNER_TIME_BOUND_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "src/cluster/topology.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/placement.h"

namespace quilt {

struct PlacementOption;
struct PlanState;
enum class Method : uint8_t;

class TimeBound {
 public:
  TimeBound(const CoarseModel& coarse, const Topology& topo, int64_t batch);
  // The devices that serve group k's parameters under parameter-server
  // aggregation, in shard order (SearchSpace::Servers); without, their
  // traffic is left out.
  using ServersOf = std::function<std::vector<int>(const PlanState& state, int k)>;
  void set_servers(ServersOf servers) { servers_ = std::move(servers); }
  // Seconds; never more than the simulated step time of `state` (whose
  // placements index `options`). Uses the coarse model's cost model: not
  // while another thread uses it.
  double Of(const PlanState& state, const std::vector<PlacementOption>& options);
  // The bounds of `state` with group k's placement option and method
  // replaced by each of `choices` (the same as Of of each, but for
  // rounding): what involves no other choice than group k's is summed once.
  std::vector<double> OfEach(const PlanState& state, int k,
                             const std::vector<std::pair<int, Method>>& choices,
                             const std::vector<PlacementOption>& options);

 private:
  using Loads = std::vector<std::pair<int, double>>;  // (device or link, seconds)
  // Group k's forward and backward seconds on each device of `option`.
  const Loads& Compute(int k, int option, const std::vector<PlacementOption>& options);
  // The seconds each link is held by gradient g's all-reduce over the
  // devices of `option` (its producer's) by `method` (its parameter's
  // group's; none for parameter servers or one device).
  const Loads& Links(int g, int option, const std::vector<PlacementOption>& options, Method method);
  // The seconds each link is held by gradient g's pushes to its servers
  // and its parameter's pulls from them (its producer's devices push, its
  // group's devices pull).
  const Loads& ServerLinks(int g, const PlanState& state,
                           const std::vector<PlacementOption>& options);
  // The rows of crossing c's tensor that reach each instance a reader on
  // option `to` needs from the producer's instances on option `from`
  // (none for instances that are the producer's own).
  struct Received {
    int device;
    int64_t begin, end;
    Loads links;  // the seconds its transfers hold each link
  };
  const std::vector<Received>& Moved(int c, int from, int to,
                                     const std::vector<PlacementOption>& options);
  // Option `option`'s batch split (SplitBatch), computed once.
  const std::vector<Slice>& Slices(int option, const std::vector<PlacementOption>& options);
  // Seconds per device and per link, and the devices' largest step
  // overhead, summed over a plan's groups, gradients and crossings.
  struct Sums {
    std::vector<double> devices, links;
    double overhead = 0;
    double Total() const;
  };
  // Adds group k's computation, gradient i's all-reduce, crossing c's
  // transfers under `state`.
  void AddGroup(int k, const PlanState& state, const std::vector<PlacementOption>& options,
                Sums* sums);
  void AddGradient(size_t i, const PlanState& state, const std::vector<PlacementOption>& options,
                   Sums* sums);
  void AddCrossing(size_t c, const PlanState& state, const std::vector<PlacementOption>& options,
                   Sums* sums);
  void Clear(Sums* sums) const;

  const CoarseModel& coarse_;
  const Topology& topo_;
  int64_t batch_;
  // Per group: its ops other than updates, and whether each carries the
  // batch.
  std::vector<std::vector<std::pair<int, bool>>> ops_;
  // The gradients summed over their producer's devices: the group whose
  // method sums it, the group of the op that produces it, its bytes.
  struct Gradient {
    int group, producer;
    double bytes;
    int tensor;
  };
  std::vector<Gradient> gradients_;
  // Batch tensors ops of other groups read: the tensor, the group of the
  // op that writes it (split by rows), the groups that read it.
  struct Crossing {
    int tensor, producer;
    std::vector<int> readers;
  };
  std::vector<Crossing> crossings_;
  // Per group: the gradients and crossings its placement or method enters.
  std::vector<std::vector<size_t>> group_gradients_, group_crossings_;
  std::map<std::tuple<int, int, int>, std::vector<Received>> moved_;
  std::vector<std::optional<std::vector<Slice>>> slices_;  // by option
  // [option][group]: per device (absent: not computed yet).
  std::vector<std::vector<std::optional<Loads>>> compute_;
  std::map<std::tuple<int, int, Method>, Loads> links_;
  ServersOf servers_;
  // By (gradient, producer's option, group's option, server node).
  std::map<std::tuple<int, int, int, int>, Loads> server_links_;
  Sums sums_, base_;  // scratch
  // Scratch of AddCrossing: reader options and instances counted.
  std::vector<int> seen_options_;
  std::vector<const Received*> seen_;
  Loads moved_links_;  // scratch of Moved
};

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_TIME_BOUND_H_
