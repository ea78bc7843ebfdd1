// Checks a DistributedProgram before it is simulated or run: instruction
// ids and dependencies (acyclic, issue order topological per device),
// matched transfers, consistent collectives, every input of a computation
// produced on its device before it is used (resident, or written by an
// instruction it depends on), replicas of each op covering the global batch
// exactly once (or, for ops whose outputs do not carry the batch, each the
// whole batch), and every gradient of a replicated parameter aggregated
// exactly once. Errors name the instruction, op or tensor.
#ifndef QUILT_SRC_PLANNER_PROGRAM_VALIDATOR_H_
#define QUILT_SRC_PLANNER_PROGRAM_VALIDATOR_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/cluster/topology.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"

namespace quilt {

// The work validating charges the planner's clock (src/common/work_clock.h)
// installed on its thread, per instruction: 790–900 ns measured on a
// 2-core development machine, set lower with lowering's and simulation's
// (src/sim/simulator.h) so that the clock's seconds are about the wall's.
inline constexpr absl::Duration kValidateWorkPerInstruction = absl::Nanoseconds(700);

// Errors: INVALID_ARGUMENT describing the first violation.
absl::Status ValidateProgram(const quilt::v1::DistributedProgram& program, const Graph& graph,
                             const Topology& topology);
// The same for the graph `index` resolves (built once by the caller).
absl::Status ValidateProgram(const quilt::v1::DistributedProgram& program, const GraphIndex& index,
                             const Topology& topology);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PROGRAM_VALIDATOR_H_
