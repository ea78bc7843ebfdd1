// Discrete-event replay of a DistributedProgram on the cost model (DESIGN
// §4): every device is a compute stream that runs its ready instructions
// highest priority first; transfers, parameter-server pushes and pulls and
// collectives run on the links of their paths, holding every link they use
// while they run (so traffic through a shared NIC serializes), and overlap
// with computation. Tensor instances are reference-counted per device for
// peak memory (parameters, optimizer state and constants stay resident;
// optimizer updates are in place). Deterministic.
#ifndef QUILT_SRC_SIM_SIMULATOR_H_
#define QUILT_SRC_SIM_SIMULATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/cluster/topology.h"
#include "src/cost/cost_model.h"
#include "src/graph/graph.h"
#include "src/graph/graph_index.h"

namespace quilt {

struct DeviceUsage {
  std::string device;
  double busy_s = 0;
  double idle_s = 0;
  // Communication involving the device while it computed nothing.
  double exposed_communication_s = 0;
  int64_t peak_memory_bytes = 0;
  int64_t capacity_bytes = 0;
  bool out_of_memory = false;
};

struct LinkUsage {
  std::string resource;
  double busy_s = 0;
  double utilization = 0;  // busy / step time
};

struct TraceEvent {
  std::string name;
  std::string category;  // "compute", "comm", "collective"
  int lane = 0;          // device index, or num_devices + resource index for links
  double start_s = 0;
  double duration_s = 0;
};

struct SimResult {
  // The instructions' makespan plus the host's time per step outside them
  // (the largest measured step overhead of the devices used).
  double step_time_s = 0;
  double host_overhead_s = 0;
  std::vector<DeviceUsage> devices;  // only devices the program uses
  std::vector<LinkUsage> links;      // only links that carried traffic
  int64_t communication_bytes = 0;
  // Largest peak memory over capacity (empty when everything fits).
  std::string out_of_memory;
  // Breakdown on the critical device: the busiest (most compute plus
  // exposed communication; of equals, the one that finishes last).
  std::string critical_device;
  double compute_s = 0, exposed_communication_s = 0, idle_s = 0;
  int64_t instructions = 0;
  int64_t events = 0;
  // Wall time of preparing the program for replay, and of the replay.
  double prepare_wall_s = 0, replay_wall_s = 0;
  std::vector<TraceEvent> trace;  // with SimOptions::trace
};

struct SimOptions {
  bool trace = false;
  // The graph's index, built once by a caller that simulates many programs
  // of one graph; built per call when null (or of another graph).
  const GraphIndex* index = nullptr;
};

// The work a simulation charges the planner's clock (src/common/work_clock.h)
// installed on its thread: preparing a program, per instruction, and
// replaying it, per event. Measured on a 2-core development machine
// (125–135 ns and 195–240 ns); set with lowering's (src/planner/lower.h)
// and validation's so that the clock's seconds, with the work it does not
// count, are about the wall's there (work/wall 0.63–1.35 over the cases
// docs/BENCHMARKS.md measures).
inline constexpr absl::Duration kPrepareWorkPerInstruction = absl::Nanoseconds(140);
inline constexpr absl::Duration kReplayWorkPerEvent = absl::Nanoseconds(240);
// What replaying `r`'s program charged.
inline absl::Duration ReplayWork(const SimResult& r) { return kReplayWorkPerEvent * r.events; }

// Errors: INVALID_ARGUMENT for programs that refer to unknown devices, ops
// or tensors, have unmatched transfers or a dependency cycle.
absl::StatusOr<SimResult> Simulate(const quilt::v1::DistributedProgram& program, const Graph& graph,
                                   const Topology& topology, const CostModel& cost,
                                   const SimOptions& options = {});

namespace sim_internal {
class Sim;
}

// A program prepared for replay once and replayed any number of times:
// under its own priorities, or under others for the same instructions (the
// program reranked: Reprioritize in src/planner/lower.h), which is cheaper
// than simulating it again (preparing a large program costs more than
// replaying it). The program, graph, topology and cost model must outlive
// it; the program may change only in its instructions' priorities (which a
// replay does not read).
class PreparedProgram {
 public:
  // Errors: as Simulate's for the program's content.
  static absl::StatusOr<PreparedProgram> Prepare(const quilt::v1::DistributedProgram& program,
                                                 const Graph& graph, const Topology& topology,
                                                 const CostModel& cost,
                                                 const SimOptions& options = {});
  PreparedProgram(PreparedProgram&&) noexcept;
  PreparedProgram& operator=(PreparedProgram&&) noexcept;
  ~PreparedProgram();
  // `priorities`: one per instruction, in the program's order (devices in
  // order, each device's instructions in order); null: the program's own
  // as prepared. Errors: as Simulate's replay (a dependency cycle, a
  // collective missing members); INVALID_ARGUMENT when `priorities` does
  // not have one per instruction. The result's prepare_wall_s is the time
  // taken to copy the prepared state. FAILED_PRECONDITION after
  // ReplayLast.
  absl::StatusOr<SimResult> Replay(const std::vector<double>* priorities = nullptr) const;
  // The same, replaying the prepared state itself rather than a copy (one
  // program's state in memory, not two): the last replay.
  absl::StatusOr<SimResult> ReplayLast(const std::vector<double>* priorities = nullptr);

 private:
  PreparedProgram();
  // Heap-held: the simulator refers to them.
  std::unique_ptr<SimOptions> options_;
  std::unique_ptr<GraphIndex> index_;
  // Built; each Replay runs a copy, ReplayLast this one (then null).
  std::unique_ptr<sim_internal::Sim> sim_;
};

// The trace as Chrome trace-event JSON (opens in Perfetto / chrome://tracing):
// one process per device (compute and communication threads) and one per
// link carrying traffic.
std::string ChromeTraceJson(const SimResult& result, const Topology& topology,
                            const std::string& title);
// Any timeline (simulated or measured): one trace process per lane, named
// by `lane_names[lane]`.
std::string ChromeTraceJson(const std::vector<TraceEvent>& events,
                            const std::vector<std::string>& lane_names, const std::string& title);

}  // namespace quilt

#endif  // QUILT_SRC_SIM_SIMULATOR_H_
