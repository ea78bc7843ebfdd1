// Internal to the executor: its state (local devices with their tensor
// stores and compute threads, the instruction graph of this process) and
// the instruction implementations. executor.cc sets it up and schedules
// steps; executor_ops.cc runs instructions.
#ifndef QUILT_SRC_RUNTIME_EXECUTOR_IMPL_H_
#define QUILT_SRC_RUNTIME_EXECUTOR_IMPL_H_

#include <atomic>
#include <deque>
#include <queue>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "src/graph/graph.h"
#include "src/runtime/comm/collectives.h"
#include "src/runtime/comm/tags.h"
#include "src/runtime/executor.h"
#include "src/runtime/kernels/kernel.h"
#include "src/runtime/tensor_store.h"

namespace quilt {

// The tensors an instruction reads (by name; a computation's by its op in
// `g`, none for an unknown op); with `writes`, also those it writes
// (executor_lifetimes.cc).
std::vector<std::string> TensorsNamed(const quilt::v1::Instruction& ins, const Graph& g,
                                      const absl::flat_hash_map<std::string, int>& op_ids,
                                      bool writes);

// The instances an instruction reads, or with `writes` those it writes,
// as the executor addresses them (tensor ids of `ids`; rows of batch
// tensors, of an update's shard, of a send's, a part's or a receive's
// `into` range; whole otherwise; a sum over micro-batches also reads its
// whole outputs) (executor_instances.cc). Its op is known (CheckInstructions).
std::vector<InstanceKey> InstancesNamed(const quilt::v1::Instruction& ins, const Graph& g,
                                        const absl::flat_hash_map<std::string, int>& ids,
                                        const absl::flat_hash_map<std::string, int>& op_ids,
                                        const std::vector<bool>& is_update, bool writes);

class Executor::Impl {
 public:
  struct Device {
    Impl* owner = nullptr;
    std::string id;
    int topo_index = 0;  // position in the program's devices
    double slowdown = 1;
    // Emulated slowdown owed but not yet slept (sleeps shorter than a
    // millisecond overshoot by more than they last, so they are batched).
    absl::Duration slow_debt;
    TensorStore store;
    absl::flat_hash_map<InstanceKey, bool> persistent;
    std::vector<quilt::v1::TensorRange> feeds;
    bool loss_copy = false;  // DeviceProgram.loss_copy: its loss is not reported
    std::thread thread;
    // (priority, -node): the compute instructions ready to run.
    std::priority_queue<std::pair<double, int>> ready;
    double busy_s = 0;  // in kernels this step (guarded by mu_)
  };
  struct Node {
    const quilt::v1::Instruction* ins = nullptr;
    int device = 0;  // local device index
    std::vector<int> succ;
    int deps = 0;
    int pending = 0;        // guarded by mu_
    bool finished = false;  // guarded by mu_
    bool compute = false;
  };

  Impl(quilt::v1::DistributedProgram program, std::vector<std::string> world, int rank,
       Transport* transport, Dataset* data, ExecutorOptions options);
  ~Impl();
  absl::Status Init();
  absl::Status Run();
  // Ends the device threads (idempotent; the destructor calls it).
  void StopThreads();
  // The communication and copy instructions' names (executor_checks.cc).
  absl::Status CheckInstructions() const;
  // That the dependencies among this process's instructions (nodes_, once
  // built) have no cycle: one would leave its instructions waiting for
  // each other for ever (executor_checks.cc).
  absl::Status CheckAcyclic() const;
  // Which tensors each instruction frees on its device when it is the last
  // of that device's instructions to read them, and which updates it
  // commits (executor_lifetimes.cc): frees_, readers_, commits_ and
  // commit_waits_, after the nodes are built.
  void PlanFrees();
  // Its finer part: reads_from_, instance_frees_, instance_keys_ and
  // instance_waits_ (on each device, every instance of the tensors `kept`
  // there, and the persistent instances, left out).
  void PlanInstanceFrees(const std::vector<absl::flat_hash_set<int>>& kept);
  // At a node's end (mu_ held): drops the tensors its device no longer
  // needs and commits the updates it was the last to wait for; the values
  // dropped are handed back (destroyed outside the lock).
  std::vector<Tensor> Release(int node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Instruction implementations (executor_ops.cc). Compute-like ones run on
  // the device's thread and return their status; communication ones post
  // transport operations and call Done/Fail when those finish.
  absl::Status Compute(int node);
  // An update's outputs written over the values they replace, where the
  // update is the last instruction of the step there to read or write
  // them and nothing else holds their storage (no view of them, no
  // transfer in flight; `holds`: the update's own inputs): then no one
  // reads the old values again, and the simulator's in-place update is
  // what the device holds. `outs[i]` is set to the instance its output i
  // commits into; others are left empty (new values, committed later).
  void InPlaceOutputs(int node, const Op& op,
                      const std::vector<std::pair<int64_t, int64_t>>& ranges,
                      const std::vector<Tensor>& holds, std::vector<Tensor>* outs);
  // `part` added to the value of `name` an earlier micro-batch left on
  // `device` (ComputeInstr.accumulate).
  absl::StatusOr<Tensor> Accumulated(int device, const std::string& name, const Tensor& part) const;
  absl::Status Concat(int node);
  void StartSend(int node);
  void StartRecv(int node);
  void StartAllReduce(int node);
  void StartAllReduceSlice(int node, AllReduceSpec spec);
  void StartPush(int node);
  void StartAccumulate(int node);
  void StartPull(int node);
  // Server side of pulls: sends this step's parameter shards.
  void ServePulls();

  // Scheduling (executor.cc).
  void Done(int node);
  void Dispatch(int node);  // a ready communication instruction
  void Fail(int node, const absl::Status& s);
  void BeginExtra();
  void EndExtra(const absl::Status& s, const std::string& what);

  // Helpers.
  absl::StatusOr<std::vector<std::vector<Tensor>>> Feeds(int64_t step);
  absl::StatusOr<std::map<std::string, Tensor>> Restored();
  // Sends rows of a tensor this node's device holds (a copy when the
  // instance may change before the send completes).
  void SendRange(int node, const quilt::v1::TensorRange& range, const std::string& peer_device,
                 TagKind kind, uint64_t tag, bool copy);
  // Rows [begin, end) of `tensor` on `device` (0, 0: whole): from the
  // instance node `node`'s read of them surely finds by the program
  // (reads_from_); else from any that holds them.
  absl::StatusOr<Tensor> Read(int device, int tensor, int64_t begin, int64_t end,
                              int node = -1) const;
  std::vector<int64_t> DimsOf(int tensor, int64_t begin, int64_t end) const;
  int RankOfDevice(const std::string& device_id) const;
  std::string Describe(int node) const;
  // Traces an instruction that ran from `start` until now (or `end`):
  // cheap, on the instructions' path; names are made in Trace().
  void Record(int node, absl::Time start, bool comm, absl::Time end = absl::Now());

  quilt::v1::DistributedProgram program_;
  Graph graph_;
  std::vector<std::string> world_;
  int rank_;
  Transport* transport_;
  Dataset* data_;
  ExecutorOptions options_;
  int64_t batch_ = 0;
  // Micro-batches (gradient accumulation; 1 without): their rows by
  // MicroBatchRange.
  int micro_batches_ = 1;
  int64_t step_ = 0;

  absl::flat_hash_map<std::string, int> tensor_ids_, op_ids_;
  std::vector<KernelFn> kernels_;
  std::vector<bool> is_update_;
  std::vector<int> device_rank_;  // per program device
  std::vector<std::string> device_node_;
  absl::flat_hash_map<std::string, int> program_device_;   // id → program index
  std::vector<std::unique_ptr<Device>> devices_;           // local
  absl::flat_hash_map<int64_t, int> push_device_;          // push tag → program device
  absl::flat_hash_map<int64_t, std::vector<int>> groups_;  // group id → program devices
  // group id → its members' NIC bandwidths, where the program gives them.
  absl::flat_hash_map<int64_t, std::vector<double>> group_node_bytes_;
  std::vector<std::string> input_names_;
  std::string label_name_;
  int loss_tensor_ = -1;
  // The graph's state updates as (source, target) tensor ids.
  std::vector<std::pair<int, int>> update_ids_;
  std::vector<Node> nodes_;
  // Per node: the tensors its instruction reads that its device frees
  // after their last reader; per local device: how many instructions read
  // each such tensor (the step's count starts from it in readers_left_).
  // Never freed early: parameters, optimizer state and constants (any
  // tensor with a persistent instance there), the loss and, where an
  // update runs, its tensors (read after the step), the tensors a device
  // serves to pulls.
  // Keys are FreeKey(tensor, micro-batch): a batch tensor's instances of
  // one micro-batch (program.micro_batches) are freed after that
  // micro-batch's last reader; micro-batch 0 = every instance.
  std::vector<std::vector<int64_t>> frees_;
  std::vector<absl::flat_hash_map<int64_t, int>> readers_;
  // Finer, as the simulator frees instances (executor_instances.cc): each
  // instance freed above is also dropped alone after its own last reader
  // and writer. Per node: the instance each of its reads surely finds
  // (read, instance) and indexes into instance_keys_ of those it is the
  // last to wait for; per instance: its key and how many nodes it waits
  // for (the step's count in instance_left_).
  std::vector<std::vector<std::pair<InstanceKey, InstanceKey>>> reads_from_;
  std::vector<std::vector<int>> instance_frees_;
  std::vector<InstanceKey> instance_keys_;
  std::vector<int> instance_waits_;
  // Per node: the updates (indexes into update_ids_) whose commit on its
  // device waits for it; per local device: how many instructions each
  // update's commit waits for (every one there that reads or writes its
  // source or target). A committed update's new values replace the old at
  // once, as the simulator's in-place updates do, instead of both being
  // held until the step's end; updates whose target is another's source
  // are committed at the step's end, as before.
  std::vector<std::vector<int>> commits_;
  std::vector<absl::flat_hash_map<int, int>> commit_waits_;
  // Per update source: its update (index into update_ids_), where it is
  // committed as above; tensors served to pulls (read by a peer's pull
  // while the step runs).
  absl::flat_hash_map<int, int> update_of_source_;
  absl::flat_hash_set<int> served_;

  // Step state.
  absl::Mutex mu_;
  int remaining_ ABSL_GUARDED_BY(mu_) = 0;
  int idle_threads_ ABSL_GUARDED_BY(mu_) = 0;  // device threads waiting for work
  int running_ ABSL_GUARDED_BY(mu_) = 0;       // compute instructions executing
  int extra_ ABSL_GUARDED_BY(mu_) = 0;         // pull-serving sends in flight
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // While a step posts the transfers ready at its start: no kernel starts
  // (not even one a receive that landed at once made ready).
  bool posting_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::flat_hash_map<int64_t, int>> readers_left_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::flat_hash_map<int, int>> commit_left_ ABSL_GUARDED_BY(mu_);
  std::vector<int> instance_left_ ABSL_GUARDED_BY(mu_);
  absl::CondVar work_;

  std::vector<ExecutorStep> steps_;
  struct Span {
    int node = 0;
    bool comm = false;
    absl::Time start, end;
  };
  mutable absl::Mutex trace_mu_;
  std::vector<Span> trace_ ABSL_GUARDED_BY(trace_mu_);
  absl::Time trace_origin_;
};

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_EXECUTOR_IMPL_H_
