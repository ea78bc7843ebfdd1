// A lower bound on each device's peak memory for a plan state on the
// coarse model (SearchSpace::Evaluate), without lowering or simulating it.
// A device holds, for every group it runs a replica of, that group's flat
// parameters and optimizer state (all-reduced or on one device: every
// replica keeps and updates its own; under parameter servers the servers
// hold them, left out here) from the step's start; and the tensors the
// group's forward ops produce that its backward ops read, on its rows of
// the batch, from the forward op to the backward op. Where every forward
// op comes before some reader of each such tensor (a plan's forward pass
// ends before its backward pass needs them: the loss comes between), all
// of them are alive together on a device when its last forward op ends;
// otherwise only the largest one is counted. Tensors received from other
// groups, scratch, gradients and frozen parameters are left out (a bound
// may miss memory, never add any). Per (group, placement option, whether
// served by parameter servers) the devices' bytes are computed once; a
// bound then costs a sum over the groups.
#ifndef QUILT_SRC_PLANNER_MEMORY_BOUND_H_
#define QUILT_SRC_PLANNER_MEMORY_BOUND_H_

#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "src/cluster/topology.h"
#include "src/planner/coarse_graph.h"

namespace quilt {

struct PlacementOption;
struct PlanState;

class MemoryBound {
 public:
  MemoryBound(const CoarseModel& coarse, const Topology& topo, int64_t batch);
  // Bytes per device (by index); never more than the coarse simulation's
  // peak of `state` (whose placements index `options`) on that device.
  const std::vector<double>& Of(const PlanState& state,
                                const std::vector<PlacementOption>& options);
  // Whether every forward op comes before a reader of each kept tensor
  // (then a device's kept tensors are summed; else their largest counts).
  bool summed() const { return summed_; }

 private:
  // A group's bytes on one device: resident, and kept (summed, or the
  // largest).
  struct Held {
    int device;
    double resident, kept;
  };
  using Bytes = std::vector<Held>;
  // Group k's bytes on each device of `option`.
  const Bytes& Group(int k, int option, bool servers, const std::vector<PlacementOption>& options);

  const CoarseModel& coarse_;
  int num_devices_;
  int64_t batch_;
  struct Kept {
    double fixed = 0, per_row = 0;
  };
  // Per group: its flat parameters' and optimizer state's bytes, and the
  // tensors its forward ops produce that its backward ops read.
  std::vector<double> resident_;
  std::vector<std::vector<Kept>> kept_;
  bool summed_ = true;
  std::map<std::tuple<int, int, bool>, Bytes> cache_;
  std::vector<double> out_, largest_;  // scratch of Of
};

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_MEMORY_BOUND_H_
