// Runs this process's devices' share of a DistributedProgram, step after
// step: the same program the simulator predicts. Each local device is a
// compute stream (a thread running its ready instructions highest priority
// first, kernels from the CPU kernel registry); transfers, collectives and
// parameter-server messages run asynchronously on the transport and
// overlap with computation. Each device reads its rows of every global
// batch from the dataset (sample i is the same everywhere, so a
// distributed run sees what a single-device run sees). Parameters and
// optimizer state change only when a whole step has succeeded.
//
// A step that fails — a kernel error, a peer that died, a transport error,
// the step timeout — stops with an error naming the instruction, its
// device and the cause, and applies no update.
#ifndef QUILT_SRC_RUNTIME_EXECUTOR_H_
#define QUILT_SRC_RUNTIME_EXECUTOR_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/program.pb.h"
#include "src/graph/tensor.h"
#include "src/runtime/comm/transport.h"
#include "src/runtime/data/dataset.h"
#include "src/sim/simulator.h"

namespace quilt {

struct ExecutorStep {
  int64_t step = 0;  // 1-based
  // This process's part of the step's loss (the parts of all processes sum
  // to the loss of the global batch).
  double loss_part = 0;
  bool has_loss = false;
  double step_time_s = 0;
  // Time the busiest of this process's devices spent in kernels.
  double compute_time_s = 0;
  // The most bytes one of this process's devices held during the step:
  // its parameters, optimizer state and constants, the step's tensors,
  // each freed once the device's last instruction that reads it has
  // finished, and the buffers beside them while in use (an all-reduce's
  // staging buffer, a parameter server's receive buffers): what the
  // simulator's peak memory counts. (Not counted by either: the
  // collectives' own segment buffers.)
  int64_t peak_bytes = 0;
};

struct ExecutorOptions {
  int64_t steps = 1;
  uint64_t seed = 0;
  absl::Duration step_timeout = absl::Seconds(120);
  // Emulated slowdown of local devices (device id → factor ≥ 1): each
  // kernel is followed by (factor - 1) times its own duration of waiting.
  std::map<std::string, double> slowdown;
  // Record every instruction's start and end.
  bool trace = false;
  // Every step computes its updates and applies none (the parameters stay
  // as they began): a profile's timing run on synthetic data, which the
  // job's learning rate could make diverge, times the same work.
  bool timing_only = false;
  // Called after each step; an error ends the run with it (e.g. a
  // checkpoint that cannot be written).
  std::function<absl::Status(const ExecutorStep&)> on_step;
  // Training that goes on from an earlier run (a resumed job): the steps
  // it trained, so that step k of this run reads the data of step
  // steps_before + k and Adam's bias correction and random kernels count
  // on; steps are still reported (and checkpointed) from 1.
  int64_t steps_before = 0;
  // With `restore`, the parameters and optimizer state (every persistent
  // tensor but constants no step updates) start from the whole tensors it
  // returns for the
  // names asked, in place of their initializers and zeros (shards take
  // their rows). A name it lacks, or a tensor of another type or shape,
  // fails Create naming it.
  std::function<absl::StatusOr<std::map<std::string, Tensor>>(const std::set<std::string>& names)>
      restore;
};

// A persistent tensor (or shard) a local device holds.
struct HeldTensor {
  std::string device, tensor;
  int64_t begin = 0, end = 0;
  Tensor value;
};

class Executor {
 public:
  // `world[r]`: the node whose devices process r runs (a device
  // "<node>/<kind>:<i>" belongs to <node>); this process is `rank`.
  // Errors: INVALID_ARGUMENT for programs this process cannot run (unknown
  // ops, kernels, tensors, peers, servers, pushes or groups, dependencies
  // across processes, devices of no process).
  static absl::StatusOr<std::unique_ptr<Executor>> Create(quilt::v1::DistributedProgram program,
                                                          std::vector<std::string> world, int rank,
                                                          Transport* transport, Dataset* data,
                                                          ExecutorOptions options);
  ~Executor();

  absl::Status Run();
  // Ends the device threads; Run may not be called after. The executor
  // stays, so that the transport can end before it (transfers a failed
  // step left posted call back into the executor as they are cancelled,
  // and the device threads use the transport).
  void Stop();
  std::vector<HeldTensor> Persistent() const;
  const std::vector<ExecutorStep>& steps() const;
  // Measured timeline (with options.trace): lanes are local device
  // indices (compute) and device index + devices (communication).
  std::vector<TraceEvent> Trace() const;
  // Lane names of Trace().
  std::vector<std::string> TraceLanes() const;

  class Impl;

 private:
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_EXECUTOR_H_
