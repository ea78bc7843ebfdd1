// Lowering: Strategy + training graph → DistributedProgram (DESIGN §4). Every
// op runs where its group's placement puts it; tensors a device needs but
// does not hold arrive by Send/Recv (row ranges of batch-split tensors are
// assembled from the devices that computed them); partial gradients are
// summed exactly once — by all-reduce over their devices, or pushed to
// parameter servers that sum them and apply the update; parameters on
// servers are pulled by the devices that use them; gradients of one fusion
// bucket share one all-reduce; the lookups' gradient of an embedding table
// gathered by sparse lookup runs over the whole batch on each of the
// table's devices, from row gradients sent by the others. Instruction priorities are HEFT upward
// ranks on the cost model. Deterministic.
#ifndef QUILT_SRC_PLANNER_LOWER_H_
#define QUILT_SRC_PLANNER_LOWER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/arena.h"
#include "proto/quilt/v1/program.pb.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"

namespace quilt {

// The work lowering charges the planner's clock (src/common/work_clock.h)
// installed on its thread, per instruction of the program: 780–1170 ns
// measured on a 2-core development machine (in full plans; 340–450 ns in
// the search's coarse ones). Set with the simulation's and validation's
// (src/sim/simulator.h) so that the clock's seconds are about the wall's
// there, the work it does not count included.
inline constexpr absl::Duration kLowerWorkPerInstruction = absl::Nanoseconds(950);

// The instructions of `program`, over all its devices.
inline int64_t InstructionCount(const quilt::v1::DistributedProgram& program) {
  int64_t n = 0;
  for (const quilt::v1::DeviceProgram& d : program.devices()) n += d.instructions_size();
  return n;
}

// `graph` is a training graph (has_backward); `cost` sets the priorities
// (uniform when null). Errors: INVALID_ARGUMENT for strategies that cannot
// be lowered (see Place), naming the op or tensor.
absl::StatusOr<quilt::v1::DistributedProgram> Lower(const Graph& graph,
                                                    const quilt::v1::Strategy& strategy,
                                                    const Topology& topology, const CostModel* cost,
                                                    int64_t global_batch);
// The same for the graph `index` resolves (built once by the caller).
absl::StatusOr<quilt::v1::DistributedProgram> Lower(const GraphIndex& index,
                                                    const quilt::v1::Strategy& strategy,
                                                    const Topology& topology, const CostModel* cost,
                                                    int64_t global_batch);

// The same without the training graph inside (its initial weights can be
// gigabytes): what simulating a strategy needs.
absl::StatusOr<quilt::v1::DistributedProgram> LowerWithoutGraph(const GraphIndex& index,
                                                                const quilt::v1::Strategy& strategy,
                                                                const Topology& topology,
                                                                const CostModel* cost,
                                                                int64_t global_batch);

// The same program built on `arena` (owned by it) and without the training
// graph inside, for the graph `index` resolves (built once): what a search
// that lowers thousands of candidates uses.
absl::StatusOr<quilt::v1::DistributedProgram*> LowerOnArena(
    const GraphIndex& index, const quilt::v1::Strategy& strategy, const Topology& topology,
    const CostModel* cost, int64_t global_batch, google::protobuf::Arena* arena);

// Recomputes a lowered program's instruction priorities for `order` (and
// records it in the program's strategy): the same program otherwise.
// Errors: INVALID_ARGUMENT for negative or repeated instruction ids,
// dependencies on ids no instruction has, group ids outside 1..groups, or
// devices the topology lacks.
absl::Status Reprioritize(const Graph& graph, const Topology& topology, const CostModel* cost,
                          quilt::v1::ExecutionOrder order, quilt::v1::DistributedProgram* program);
absl::Status Reprioritize(const GraphIndex& index, const Topology& topology, const CostModel* cost,
                          quilt::v1::ExecutionOrder order, quilt::v1::DistributedProgram* program);
// The execution order a program's estimate also tries: transfers first for
// critical path, critical path for any other.
quilt::v1::ExecutionOrder OtherOrder(quilt::v1::ExecutionOrder order);
// A program's instruction priorities in program order, and the same put
// back (into the same program, or one with its instructions in that order).
std::vector<double> Priorities(const quilt::v1::DistributedProgram& program);
void SetPriorities(const std::vector<double>& priorities, quilt::v1::DistributedProgram* program);

// Bytes of rows [begin, end) of `t` (whole tensor when begin = end = 0;
// batch rows for batch tensors, rows of dim 0 otherwise).
int64_t RangeBytes(const TensorInfo& t, int64_t begin, int64_t end);

// Sorts an all-reduce's members as a lowered program lists them: by node,
// then by device.
void SortByNode(const Topology& topo, std::vector<int>* devices);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_LOWER_H_
