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

namespace quilt {

struct InstanceKey {
  int tensor = 0;
  int64_t begin = 0, end = 0;
  bool operator==(const InstanceKey& o) const {
    return tensor == o.tensor && begin == o.begin && end == o.end;
  }
  template <typename H>
  friend H AbslHashValue(H h, const InstanceKey& k) {
    return H::combine(std::move(h), k.tensor, k.begin, k.end);
  }
};

// The tensors one device holds: whole tensors or row ranges of them.
class TensorStore {
 public:
  void Put(const InstanceKey& k, Tensor t);
  // The exact instance, or nullptr.
  bool Get(const InstanceKey& k, Tensor* out) const;
  // An instance that contains rows [begin, end) (or any instance of a whole
  // tensor when begin = end = 0): its key and value. The exact instance
  // first, then one a kernel or a whole receive produced, and only then one
  // being assembled from parts (which may still miss rows).
  bool FindContaining(int tensor, int64_t begin, int64_t end, InstanceKey* key, Tensor* out) const;
  // Writes `src` at rows [at, ...) along `axis` of the instance `k`,
  // creating it (zeros of `dims`) if absent; the instance counts as being
  // assembled until a Put replaces it.
  absl::Status WriteInto(const InstanceKey& k, DType dtype, const std::vector<int64_t>& dims,
                         int axis, int64_t at, const Tensor& src);
  // Writes `src` at rows [at, ...) of dim 0 of the existing instance `k`
  // (a slice of a gradient summed on its own). The first such write to a
  // value copies it, since its storage may be shared with other tensors;
  // later writes to the same value write in place. Errors: NOT_FOUND when
  // `k` is absent; those of WriteRows.
  absl::Status WriteSlice(const InstanceKey& k, int64_t at, const Tensor& src);
  // Keeps only the keys in `keep`; the others' values are handed back, so
  // that the caller can free them when it suits it.
  std::vector<Tensor> Retain(const absl::flat_hash_map<InstanceKey, bool>& keep);
  std::vector<std::pair<InstanceKey, Tensor>> All() const;
  // The instances of one tensor.
  std::vector<std::pair<InstanceKey, Tensor>> Instances(int tensor) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<InstanceKey, Tensor> values_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::vector<InstanceKey>> by_tensor_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<InstanceKey> assembled_ ABSL_GUARDED_BY(mu_);
  // Per instance written by WriteSlice: the storage of its private copy.
  absl::flat_hash_map<InstanceKey, const void*> sliced_ ABSL_GUARDED_BY(mu_);
};

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

  // Instruction implementations (executor_ops.cc). Compute-like ones run on
  // the device's thread and return their status; communication ones post
  // transport operations and call Done/Fail when those finish.
  absl::Status Compute(int node);
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
  absl::StatusOr<Tensor> Read(int device, int tensor, int64_t begin, int64_t end) const;
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

  // Step state.
  absl::Mutex mu_;
  int remaining_ ABSL_GUARDED_BY(mu_) = 0;
  int idle_threads_ ABSL_GUARDED_BY(mu_) = 0;  // device threads waiting for work
  int running_ ABSL_GUARDED_BY(mu_) = 0;       // compute instructions executing
  int extra_ ABSL_GUARDED_BY(mu_) = 0;         // pull-serving sends in flight
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
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
